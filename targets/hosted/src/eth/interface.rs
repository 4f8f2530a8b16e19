//! The interface: packet sockets, checks of the interface a rank is given, and
//! peers' MAC addresses given by hand.

use super::*;

/// What the interface is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// Its index.
    pub index: i32,
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Its MTU.
    pub mtu: usize,
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split([':', '-']);
    for b in mac.iter_mut() {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The line a process without `CAP_NET_RAW` gets.
pub(super) fn needs_cap_net_raw() -> HostError {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "PROGRAM".into());
    HostError::Fabric(format!(
        "the eth fabric needs CAP_NET_RAW to open a packet socket: run as root, or grant it once with `sudo setcap cap_net_raw+ep {exe}`"
    ))
}

/// A packet socket for Ethernet type `proto` (0: none, for interface queries).
pub(super) fn packet_socket(proto: u16) -> Result<OwnedFd, HostError> {
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            proto.to_be() as libc::c_int,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => needs_cap_net_raw(),
            _ => HostError::Fabric(format!("eth: packet socket: {e}")),
        });
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn bind(fd: &OwnedFd, iface: &Interface, proto: u16) -> Result<(), HostError> {
    // SAFETY: a zeroed sockaddr_ll is valid; the fields that matter are set below.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto.to_be();
    sa.sll_ifindex = iface.index;
    // SAFETY: a valid socket and a sockaddr_ll with its true length.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(HostError::Fabric(format!(
            "eth: cannot bind to {}: {}",
            iface.name,
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Asks the kernel about interface `name` through socket `fd`: `request` fills `req`.
pub(super) fn if_ioctl(fd: &OwnedFd, name: &str, request: libc::c_ulong) -> Option<libc::ifreq> {
    // SAFETY: a zeroed ifreq is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a valid socket and an ifreq naming the interface, for the kernel to fill.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, &mut req) };
    (r == 0).then_some(req)
}

/// The interfaces that are up, for error messages.
pub(super) fn interfaces_up() -> String {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    std::fs::read_to_string(format!("/sys/class/net/{n}/operstate"))
                        .is_ok_and(|s| s.trim() == "up")
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.is_empty() {
        "none is up".into()
    } else {
        format!("up here: {}", names.join(", "))
    }
}

/// Checks interface `name` (exists, Ethernet, up, carrier, MTU) with socket `fd`.
pub fn check_interface(fd: &OwnedFd, name: &str) -> Result<Interface, HostError> {
    let c =
        CString::new(name).map_err(|_| HostError::Setting("VOLLEY_ETH_IF: a NUL byte".into()))?;
    // SAFETY: a valid C string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) } as i32;
    if index == 0 {
        return Err(HostError::Setting(format!(
            "VOLLEY_ETH_IF={name}: no such interface ({})",
            interfaces_up()
        )));
    }
    let hw = if_ioctl(fd, name, libc::SIOCGIFHWADDR).ok_or_else(|| {
        HostError::Setting(format!("VOLLEY_ETH_IF={name}: cannot read its address"))
    })?;
    // SAFETY: SIOCGIFHWADDR filled the hardware-address member of the union.
    let sa = unsafe { hw.ifr_ifru.ifru_hwaddr };
    if sa.sa_family != libc::ARPHRD_ETHER {
        return Err(HostError::Setting(format!(
            "VOLLEY_ETH_IF={name}: not an Ethernet interface ({})",
            interfaces_up()
        )));
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    let flags = if_ioctl(fd, name, libc::SIOCGIFFLAGS).ok_or_else(|| {
        HostError::Setting(format!("VOLLEY_ETH_IF={name}: cannot read its flags"))
    })?;
    // SAFETY: SIOCGIFFLAGS filled the flags member.
    let flags = unsafe { flags.ifr_ifru.ifru_flags } as libc::c_int;
    if flags & libc::IFF_UP == 0 {
        return Err(HostError::Setting(format!(
            "VOLLEY_ETH_IF={name} is down: `ip link set {name} up`"
        )));
    }
    if flags & libc::IFF_RUNNING == 0 {
        return Err(HostError::Setting(format!(
            "VOLLEY_ETH_IF={name} has no carrier (cable, or the other end of a veth pair, down)"
        )));
    }
    let m = if_ioctl(fd, name, libc::SIOCGIFMTU)
        .ok_or_else(|| HostError::Setting(format!("VOLLEY_ETH_IF={name}: cannot read its MTU")))?;
    // SAFETY: SIOCGIFMTU filled the MTU member.
    let mtu = unsafe { m.ifr_ifru.ifru_mtu }.max(0) as usize;
    if mtu < MIN_MTU {
        return Err(HostError::Setting(format!(
            "VOLLEY_ETH_IF={name}: MTU {mtu} is below the {MIN_MTU} bytes a frame needs"
        )));
    }
    Ok(Interface {
        name: name.into(),
        index,
        mac,
        mtu,
    })
}

/// This rank's interface name from `VOLLEY_ETH_IF`.
pub fn interface_name(rank: u16) -> Result<String, HostError> {
    let list = std::env::var("VOLLEY_ETH_IF").map_err(|_| {
        HostError::Fabric(format!(
            "the eth fabric needs VOLLEY_ETH_IF, the interface to use ({})",
            interfaces_up()
        ))
    })?;
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    let name = if names.len() == 1 {
        names[0]
    } else {
        names.get(rank as usize).copied().ok_or_else(|| {
            HostError::Setting(format!(
                "VOLLEY_ETH_IF has {} interfaces but no entry for rank {rank}",
                names.len()
            ))
        })?
    };
    if name.is_empty() {
        return Err(HostError::Setting(
            "VOLLEY_ETH_IF: an empty interface name".into(),
        ));
    }
    Ok(name.into())
}

/// The ranks' MAC addresses given by the user (`VOLLEY_ETH_MACS`, or a hosts list of
/// `host=MAC` entries), if any.
pub fn given_macs(boot: &Boot) -> Result<Option<Vec<[u8; 6]>>, HostError> {
    let (what, texts): (&str, Vec<String>) = match std::env::var("VOLLEY_ETH_MACS") {
        Ok(list) => (
            "VOLLEY_ETH_MACS",
            list.split(',').map(|s| s.trim().to_owned()).collect(),
        ),
        Err(_) => {
            let with_macs = boot.hosts.iter().filter(|h| h.contains('=')).count();
            if with_macs == 0 {
                return Ok(None);
            }
            if with_macs != boot.hosts.len() {
                return Err(HostError::Fabric(format!(
                    "the hosts list gives MAC addresses for {with_macs} of {} ranks: give every entry as host=MAC, or none",
                    boot.hosts.len()
                )));
            }
            (
                "the hosts list",
                boot.hosts
                    .iter()
                    .map(|h| h.split_once('=').map_or("", |(_, m)| m).to_owned())
                    .collect(),
            )
        }
    };
    if texts.len() != boot.size as usize {
        return Err(HostError::Fabric(format!(
            "{what} has {} MAC addresses for {} ranks",
            texts.len(),
            boot.size
        )));
    }
    let macs = texts
        .iter()
        .map(|t| {
            parse_mac(t)
                .ok_or_else(|| HostError::Fabric(format!("{what}: {t:?} is not a MAC address")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_distinct(&macs, what)?;
    Ok(Some(macs))
}

/// Every rank needs its own station: frames to one's own MAC never come back.
pub(super) fn check_distinct(macs: &[[u8; 6]], what: &str) -> Result<(), HostError> {
    for (i, a) in macs.iter().enumerate() {
        if let Some(j) = macs[i + 1..].iter().position(|b| b == a) {
            return Err(HostError::Fabric(format!(
                "{what}: ranks {i} and {} both have MAC {}: each rank needs its own interface",
                i + 1 + j,
                mac_text(a)
            )));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ hellos
