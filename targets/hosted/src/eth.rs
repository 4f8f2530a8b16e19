//! The `eth` fabric: raw Ethernet frames between processes, no IP, as GAMMA did.
//!
//! Volley frames travel as the payload of Ethernet frames of type [`ETHERTYPE`], byte
//! for byte as the unikernel's e1000 driver sends them, so a process and a unikernel
//! node on one LAN are peers. Each rank has an `AF_PACKET` socket bound to its
//! interface with memory-mapped `TPACKET_V2` rings: frames are read from the receive
//! ring and written into the transmit ring without a system call; one `send` hands a
//! batch of transmit slots to the kernel (at the engine's flush), past the queueing
//! discipline (`PACKET_QDISC_BYPASS`).
//!
//! Settings:
//! - `VOLLEY_ETH_IF`: the interface (or a comma list indexed by rank, for ranks that
//!   share a host, each with its own interface). Checked: it exists, is Ethernet, is
//!   up with a carrier, and its MTU carries a frame.
//! - Peers' MAC addresses, in this order: `VOLLEY_ETH_MACS` (a list in rank order);
//!   a hosts list whose every entry is `host=MAC`; else discovered at start-up by
//!   broadcast hellos of type [`HELLO_ETHERTYPE`], authenticated under a key derived
//!   from the job secret and bound to the sender's MAC. A rank not heard from within
//!   `VOLLEY_STARTUP_TIMEOUT` (30 s) is an error that names it.
//! - `VOLLEY_ETH_MTU`: frames smaller than the interface's MTU (a jumbo-frame LAN that
//!   also holds e1000 unikernel nodes, whose frames stop at 1500 bytes).
//! - `VOLLEY_ETH_XDP`: `off` (the default), `on` or `auto`: this job's frames through
//!   an `AF_XDP` socket ([`crate::xdp`]) beside the packet rings, which still take
//!   whatever the XDP program passes on. `on` fails with one line where the kernel,
//!   the driver or the process's capabilities do not allow it; `auto` then uses the
//!   packet rings alone. Frames that fit a UMEM chunk ([`crate::xdp::MAX_FRAME`]) go
//!   through the socket, longer ones through the packet ring.
//!
//! Opening a packet socket takes `CAP_NET_RAW`: without it, one line says how to grant it.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use volley_core::phy::{Capabilities, Device, RxToken, TxToken};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;

use crate::bootstrap::Boot;
use crate::xdp::Xsk;
use crate::{set_int, HostError};

/// Ethernet type of Volley frames (IEEE 802 "local experimental" 1), as the e1000
/// driver's.
pub const ETHERTYPE: u16 = 0x88B5;
/// Ethernet type of the start-up hellos that discover peers' MAC addresses ("local
/// experimental" 2): kept off the data ring and out of the engines' way.
pub const HELLO_ETHERTYPE: u16 = 0x88B6;
/// Ethernet header: destination, source, type.
pub const ETH_HEADER: usize = 14;
/// Shortest Ethernet frame without its CRC: shorter ones are padded with zeros.
const ETH_MIN: usize = 60;
/// Smallest MTU the engine works with.
const MIN_MTU: usize = 256;
/// Bytes of receive ring and transmit ring.
const RX_RING_BYTES: usize = 8 << 20;
const TX_RING_BYTES: usize = 2 << 20;
/// Ring block size: a multiple of the page size that holds whole frames (one frame
/// when frames are larger: jumbo MTUs).
const BLOCK: usize = 64 << 10;
/// Fewest slots in each ring, whatever the frame size.
const MIN_SLOTS: usize = 32;
/// Transmit slots filled before the kernel is told even without a flush.
const TX_BATCH: usize = 32;
/// Payload bytes from which a frame goes out with one `sendmsg` straight from the
/// program's memory instead of through the transmit ring: the kernel copies it
/// either way, so this spares the copy into the ring, while one system call a frame
/// costs less than that copy from about this size on.
const GATHER_FROM: usize = 8192;
/// How often a running rank looks for hellos to answer (late ranks still asking).
const HELLO_CHECK: Duration = Duration::from_millis(1);
/// How often a rank that still misses peers broadcasts its hello.
const HELLO_EVERY: StdDuration = StdDuration::from_millis(20);
/// Offset of frame data in a transmit slot: `TPACKET_ALIGN(sizeof(tpacket2_hdr))`
/// (packet(7): the kernel reads from `tp_hdrlen - sizeof(sockaddr_ll)`).
const TX_DATA: usize = 32;
/// Offset of the `sockaddr_ll` in a receive slot, and of its `sll_pkttype`.
const RX_LL: usize = 32;
const LL_PKTTYPE: usize = 10;

/// Whether to use `AF_XDP` (`VOLLEY_ETH_XDP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpSetting {
    /// Packet rings only.
    Off,
    /// `AF_XDP`, or an error.
    On,
    /// `AF_XDP` where it works, else packet rings only.
    Auto,
}

/// Reads `VOLLEY_ETH_XDP`.
pub fn xdp_setting() -> Result<XdpSetting, HostError> {
    match std::env::var("VOLLEY_ETH_XDP") {
        Err(_) => Ok(XdpSetting::Off),
        Ok(v) => match v.trim() {
            "off" | "0" | "" => Ok(XdpSetting::Off),
            "on" | "1" => Ok(XdpSetting::On),
            "auto" => Ok(XdpSetting::Auto),
            _ => Err(HostError(format!(
                "VOLLEY_ETH_XDP={v:?}: expected off, on or auto"
            ))),
        },
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EthStats {
    /// Frames sent.
    pub tx: u64,
    /// `send` calls that handed a batch of frames to the kernel.
    pub tx_kicks: u64,
    /// Frames sent with `sendmsg` from where their payload lies (long ones).
    pub tx_gathered: u64,
    /// Frames the kernel refused (`TP_STATUS_WRONG_FORMAT`) or kicks that failed.
    pub tx_errors: u64,
    /// Frames received and handed to the engine.
    pub rx: u64,
    /// Frames from MAC addresses that are no rank of this job, or addressed to
    /// another station: dropped unread.
    pub rx_foreign: u64,
    /// Times the kernel found the receive ring full and dropped frames.
    pub rx_ring_full: u64,
    /// Hellos answered after start-up.
    pub hellos_answered: u64,
    /// Hellos dropped: bad tag, another job, malformed.
    pub hellos_rejected: u64,
}

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
fn needs_cap_net_raw() -> HostError {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "PROGRAM".into());
    HostError(format!(
        "the eth fabric needs CAP_NET_RAW to open a packet socket: run as root, or grant it once with `sudo setcap cap_net_raw+ep {exe}`"
    ))
}

/// A packet socket for Ethernet type `proto` (0: none, for interface queries).
fn packet_socket(proto: u16) -> Result<OwnedFd, HostError> {
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
            _ => HostError(format!("eth: packet socket: {e}")),
        });
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind(fd: &OwnedFd, iface: &Interface, proto: u16) -> Result<(), HostError> {
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
        return Err(HostError(format!(
            "eth: cannot bind to {}: {}",
            iface.name,
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Asks the kernel about interface `name` through socket `fd`: `request` fills `req`.
fn if_ioctl(fd: &OwnedFd, name: &str, request: libc::c_ulong) -> Option<libc::ifreq> {
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
fn interfaces_up() -> String {
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
    let c = CString::new(name).map_err(|_| HostError("VOLLEY_ETH_IF: a NUL byte".into()))?;
    // SAFETY: a valid C string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) } as i32;
    if index == 0 {
        return Err(HostError(format!(
            "VOLLEY_ETH_IF={name}: no such interface ({})",
            interfaces_up()
        )));
    }
    let hw = if_ioctl(fd, name, libc::SIOCGIFHWADDR)
        .ok_or_else(|| HostError(format!("VOLLEY_ETH_IF={name}: cannot read its address")))?;
    // SAFETY: SIOCGIFHWADDR filled the hardware-address member of the union.
    let sa = unsafe { hw.ifr_ifru.ifru_hwaddr };
    if sa.sa_family != libc::ARPHRD_ETHER {
        return Err(HostError(format!(
            "VOLLEY_ETH_IF={name}: not an Ethernet interface ({})",
            interfaces_up()
        )));
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    let flags = if_ioctl(fd, name, libc::SIOCGIFFLAGS)
        .ok_or_else(|| HostError(format!("VOLLEY_ETH_IF={name}: cannot read its flags")))?;
    // SAFETY: SIOCGIFFLAGS filled the flags member.
    let flags = unsafe { flags.ifr_ifru.ifru_flags } as libc::c_int;
    if flags & libc::IFF_UP == 0 {
        return Err(HostError(format!(
            "VOLLEY_ETH_IF={name} is down: `ip link set {name} up`"
        )));
    }
    if flags & libc::IFF_RUNNING == 0 {
        return Err(HostError(format!(
            "VOLLEY_ETH_IF={name} has no carrier (cable, or the other end of a veth pair, down)"
        )));
    }
    let m = if_ioctl(fd, name, libc::SIOCGIFMTU)
        .ok_or_else(|| HostError(format!("VOLLEY_ETH_IF={name}: cannot read its MTU")))?;
    // SAFETY: SIOCGIFMTU filled the MTU member.
    let mtu = unsafe { m.ifr_ifru.ifru_mtu }.max(0) as usize;
    if mtu < MIN_MTU {
        return Err(HostError(format!(
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
        HostError(format!(
            "the eth fabric needs VOLLEY_ETH_IF, the interface to use ({})",
            interfaces_up()
        ))
    })?;
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    let name = if names.len() == 1 {
        names[0]
    } else {
        names.get(rank as usize).copied().ok_or_else(|| {
            HostError(format!(
                "VOLLEY_ETH_IF has {} interfaces but no entry for rank {rank}",
                names.len()
            ))
        })?
    };
    if name.is_empty() {
        return Err(HostError("VOLLEY_ETH_IF: an empty interface name".into()));
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
                return Err(HostError(format!(
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
        return Err(HostError(format!(
            "{what} has {} MAC addresses for {} ranks",
            texts.len(),
            boot.size
        )));
    }
    let macs = texts
        .iter()
        .map(|t| {
            parse_mac(t).ok_or_else(|| HostError(format!("{what}: {t:?} is not a MAC address")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_distinct(&macs, what)?;
    Ok(Some(macs))
}

/// Every rank needs its own station: frames to one's own MAC never come back.
fn check_distinct(macs: &[[u8; 6]], what: &str) -> Result<(), HostError> {
    for (i, a) in macs.iter().enumerate() {
        if let Some(j) = macs[i + 1..].iter().position(|b| b == a) {
            return Err(HostError(format!(
                "{what}: ranks {i} and {} both have MAC {}: each rank needs its own interface",
                i + 1 + j,
                mac_text(a)
            )));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ hellos

/// A hello: "I am rank `rank` of `size` of the job with header key `job_key`, at
/// `mac`"; `ask` asks for an answer. 36 bytes of Ethernet payload: magic, version,
/// kind, rank, size, job key, MAC, and a 16-byte SipHash tag under the job's hello key
/// over the rest. The tag binds the MAC, so a replayed hello cannot move a rank
/// elsewhere; it does not stop a replay from the rank's own address, which says
/// nothing new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Wants an answer.
    pub ask: bool,
    /// Sender's rank.
    pub rank: u16,
    /// Job size.
    pub size: u16,
    /// The job key of frame headers.
    pub job_key: u32,
    /// Sender's MAC address.
    pub mac: [u8; 6],
}

const HELLO_MAGIC: &[u8; 4] = b"VLYH";
const HELLO_BODY: usize = 20;
/// Length of a hello's payload.
pub const HELLO_LEN: usize = HELLO_BODY + 16;

impl Hello {
    fn tag(key: &[u8; 16], body: &[u8]) -> [u8; 16] {
        use siphasher::sip128::{Hasher128, SipHasher24};
        use std::hash::Hasher;
        let mut h = SipHasher24::new_with_key(key);
        h.write(body);
        h.finish128().as_bytes()
    }

    /// Writes the hello, tagged under `key`.
    pub fn emit(&self, key: &[u8; 16]) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(HELLO_MAGIC);
        b[4] = 1;
        b[5] = if self.ask { 1 } else { 2 };
        b[6..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..10].copy_from_slice(&self.size.to_le_bytes());
        b[10..14].copy_from_slice(&self.job_key.to_le_bytes());
        b[14..20].copy_from_slice(&self.mac);
        let t = Hello::tag(key, &b[..HELLO_BODY]);
        b[HELLO_BODY..].copy_from_slice(&t);
        b
    }

    /// Reads a hello tagged under `key`; `None` for anything else.
    pub fn parse(b: &[u8], key: &[u8; 16]) -> Option<Hello> {
        let b = b.get(..HELLO_LEN)?;
        if &b[0..4] != HELLO_MAGIC || b[4] != 1 || !matches!(b[5], 1 | 2) {
            return None;
        }
        let t = Hello::tag(key, &b[..HELLO_BODY]);
        // Constant-time: no early exit on the first differing byte.
        if t.iter()
            .zip(&b[HELLO_BODY..])
            .fold(0u8, |a, (x, y)| a | (x ^ y))
            != 0
        {
            return None;
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&b[14..20]);
        Some(Hello {
            ask: b[5] == 1,
            rank: u16::from_le_bytes([b[6], b[7]]),
            size: u16::from_le_bytes([b[8], b[9]]),
            job_key: u32::from_le_bytes([b[10], b[11], b[12], b[13]]),
            mac,
        })
    }
}

/// The hello socket: a plain packet socket for [`HELLO_ETHERTYPE`], read without
/// blocking.
#[derive(Debug)]
struct Hellos {
    fd: OwnedFd,
    key: [u8; 16],
    me: Hello,
    buf: Vec<u8>,
}

impl Hellos {
    fn send(&self, iface: &Interface, to: [u8; 6], ask: bool) -> bool {
        let mut f = [0u8; ETH_MIN];
        f[0..6].copy_from_slice(&to);
        f[6..12].copy_from_slice(&iface.mac);
        f[12..14].copy_from_slice(&HELLO_ETHERTYPE.to_be_bytes());
        let h = Hello { ask, ..self.me };
        f[ETH_HEADER..ETH_HEADER + HELLO_LEN].copy_from_slice(&h.emit(&self.key));
        // SAFETY: a valid socket and a buffer of the given length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                f.as_ptr() as *const libc::c_void,
                f.len(),
                libc::MSG_DONTWAIT,
            )
        };
        n == f.len() as isize
    }

    /// The next hello waiting on the socket: `None` when none is, `Some(Err(()))` for
    /// one that is not a valid hello of this job from the station it names.
    fn next(&mut self) -> Option<Result<Hello, ()>> {
        // SAFETY: a valid socket and a buffer of the given length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr() as *mut libc::c_void,
                self.buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return None;
        }
        let f = &self.buf[..n as usize];
        let ok = f.len() >= ETH_HEADER + HELLO_LEN && f[12..14] == HELLO_ETHERTYPE.to_be_bytes();
        let h = ok
            .then(|| Hello::parse(&f[ETH_HEADER..], &self.key))
            .flatten()
            // Bound to the station it came from, and of this job.
            .filter(|h| f[6..12] == h.mac && h.job_key == self.me.job_key && h.size == self.me.size)
            .filter(|h| h.rank < h.size && h.rank != self.me.rank);
        Some(h.ok_or(()))
    }
}

/// Finds every rank's MAC address by hellos (see the module documentation).
fn discover(
    iface: &Interface,
    hellos: &mut Hellos,
    timeout: StdDuration,
) -> Result<Vec<[u8; 6]>, HostError> {
    let size = hellos.me.size as usize;
    let me = hellos.me.rank as usize;
    let mut macs: Vec<Option<[u8; 6]>> = vec![None; size];
    macs[me] = Some(iface.mac);
    let start = StdInstant::now();
    let mut last_ask: Option<StdInstant> = None;
    loop {
        if macs.iter().all(Option::is_some) {
            break;
        }
        let now = StdInstant::now();
        if last_ask.is_none_or(|t| now - t >= HELLO_EVERY) {
            hellos.send(iface, [0xFF; 6], true);
            last_ask = Some(now);
        }
        let mut got = false;
        while let Some(h) = hellos.next() {
            got = true;
            let Ok(h) = h else { continue };
            let r = h.rank as usize;
            if let Some(j) = macs.iter().position(|m| *m == Some(h.mac)) {
                if j != r {
                    return Err(HostError(format!(
                        "eth: ranks {j} and {r} both have MAC {} on {}: each rank needs its own interface",
                        mac_text(&h.mac),
                        iface.name
                    )));
                }
            }
            macs[r].get_or_insert(h.mac);
            if h.ask {
                hellos.send(iface, h.mac, false);
            }
        }
        if now - start > timeout {
            let missing: Vec<String> = (0..size)
                .filter(|&r| macs[r].is_none())
                .map(|r| r.to_string())
                .collect();
            return Err(HostError(format!(
                "eth: no hello from rank {} on {} within {:.0} s: are they started, each on its own interface on this LAN, with this job's id and secret?",
                missing.join(", "),
                iface.name,
                timeout.as_secs_f64()
            )));
        }
        if !got {
            std::thread::sleep(StdDuration::from_micros(200));
        }
    }
    Ok(macs.into_iter().map(|m| m.unwrap_or_default()).collect())
}

// ------------------------------------------------------------------ rings

/// The two rings, mapped.
#[derive(Debug)]
struct Rings {
    base: *mut u8,
    len: usize,
    frame: usize,
    rx_frames: usize,
    tx_frames: usize,
}

// SAFETY: the mapping belongs to the device that owns these rings and moves with it;
// the kernel is the only other party, synchronised through the status words.
unsafe impl Send for Rings {}

impl Rings {
    fn rx_slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.rx_frames);
        // SAFETY: inside the mapping (receive ring first, `rx_frames` slots).
        unsafe { self.base.add(i * self.frame) }
    }

    fn tx_slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.tx_frames);
        // SAFETY: inside the mapping (transmit ring after the receive ring).
        unsafe { self.base.add((self.rx_frames + i) * self.frame) }
    }

    /// The status word at the start of `slot` (one of this mapping's), shared with
    /// the kernel.
    fn status(&self, slot: *mut u8) -> &AtomicU32 {
        // SAFETY: every slot starts with the 4-byte-aligned `tp_status` of a
        // tpacket2_hdr, which the kernel and this process hand each other; the mapping
        // lives as long as `self`.
        unsafe { &*(slot as *const AtomicU32) }
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `EthDevice::open`, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// A rank's packet socket and rings.
#[derive(Debug)]
pub struct EthDevice {
    /// This run's frame key and what answers late HELLOs, once the start-up
    /// exchange is through ([`crate::node::start_session`]).
    pub(crate) session: Option<(
        volley_core::wire::AuthKey,
        volley_core::session::HelloConfig,
    )>,
    // Dropped in this order: the mapping, then the socket.
    rings: Rings,
    fd: OwnedFd,
    /// A socket that receives nothing, for frames sent as parts: with a transmit
    /// ring, `sendmsg` on `fd` would send the ring instead.
    gather: OwnedFd,
    iface: Interface,
    mtu: usize,
    macs: Vec<[u8; 6]>,
    ranks: HashMap<[u8; 6], u16>,
    rx_next: usize,
    tx_next: usize,
    tx_pending: usize,
    hellos: Option<Hellos>,
    hello_at: Instant,
    stats: EthStats,
    /// The `AF_XDP` socket, when in use: it sends the frames that fit a chunk and
    /// receives this job's frames the XDP program hands it.
    xsk: Option<Box<Xsk>>,
    /// Why `VOLLEY_ETH_XDP=auto` went without it.
    xdp_refused: Option<String>,
    /// Moved at every receive poll, for the beacon helper ([`crate::beacon`]).
    polled: std::sync::Arc<std::sync::atomic::AtomicU64>,
    beacon: Option<crate::beacon::Helper>,
}

fn setup_ring(
    fd: &OwnedFd,
    opt: libc::c_int,
    frame: usize,
    bytes: usize,
) -> Result<usize, HostError> {
    // `frame` is a power of two, so blocks hold whole frames and the slots of a
    // ring are evenly spaced in the mapping.
    let block = BLOCK.max(frame);
    let blocks = (bytes.max(MIN_SLOTS * frame) / block).max(1);
    let req = libc::tpacket_req {
        tp_block_size: block as u32,
        tp_block_nr: blocks as u32,
        tp_frame_size: frame as u32,
        tp_frame_nr: (blocks * (block / frame)) as u32,
    };
    // SAFETY: a valid socket and a tpacket_req of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            opt,
            &req as *const libc::tpacket_req as *const libc::c_void,
            std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(HostError(format!(
            "eth: cannot set up the packet ring: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(req.tp_frame_nr as usize)
}

impl EthDevice {
    /// Opens this rank's socket on `VOLLEY_ETH_IF` and learns the peers' MAC
    /// addresses (given, or by hellos under a key derived from the job secret).
    pub fn open(boot: &Boot, secret: &crate::secret::Secret) -> Result<EthDevice, HostError> {
        EthDevice::open_with(boot, secret, xdp_setting()?)
    }

    /// As [`EthDevice::open`], with `AF_XDP` as `xdp` says whatever `VOLLEY_ETH_XDP`
    /// says (the benchmark's references measure both paths).
    pub fn open_with(
        boot: &Boot,
        secret: &crate::secret::Secret,
        xdp: XdpSetting,
    ) -> Result<EthDevice, HostError> {
        EthDevice::open_on(boot, secret, xdp, &interface_name(boot.rank)?)
    }

    /// As [`EthDevice::open_with`], on interface `name`.
    fn open_on(
        boot: &Boot,
        secret: &crate::secret::Secret,
        xdp: XdpSetting,
        name: &str,
    ) -> Result<EthDevice, HostError> {
        let job_key = secret.job_key(boot.job);
        let hello_key = volley_core::wire::derive_key(&secret.0, b"volley eth hello", boot.job);
        let fd = packet_socket(0)?;
        let iface = check_interface(&fd, name)?;
        drop(fd);
        let given = given_macs(boot)?;
        let mtu =
            match crate::settings::env_integer("VOLLEY_ETH_MTU", MIN_MTU as u64, iface.mtu as u64)?
            {
                Some(m) => m as usize,
                None => iface.mtu,
            };
        let fd = packet_socket(ETHERTYPE)?;
        let v2 = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        if !set_int(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, v2) {
            return Err(HostError(format!(
                "eth: TPACKET_V2 rings are not available: {}",
                std::io::Error::last_os_error()
            )));
        }
        // Straight to the driver, past the queueing discipline (kernels from 3.14).
        set_int(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1);
        // A slot holds the header, the link-level address, alignment and the frame.
        let frame = (TX_DATA + 64 + ETH_HEADER + mtu)
            .next_power_of_two()
            .max(2048);
        let rx_frames = setup_ring(&fd, libc::PACKET_RX_RING, frame, RX_RING_BYTES)?;
        let tx_frames = setup_ring(&fd, libc::PACKET_TX_RING, frame, TX_RING_BYTES)?;
        let len = (rx_frames + tx_frames) * frame;
        // SAFETY: mapping the rings just set up on this socket, shared with the kernel.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(HostError(format!(
                "eth: cannot map the packet rings: {}",
                std::io::Error::last_os_error()
            )));
        }
        let rings = Rings {
            base: base as *mut u8,
            len,
            frame,
            rx_frames,
            tx_frames,
        };
        // Bound after the rings exist, so that no frame is queued outside them.
        bind(&fd, &iface, ETHERTYPE)?;
        // Protocol 0: sends only (packet(7)).
        let gather = packet_socket(0)?;
        set_int(&gather, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1);
        bind(&gather, &iface, 0)?;
        let me = Hello {
            ask: true,
            rank: boot.rank,
            size: boot.size,
            job_key,
            mac: iface.mac,
        };
        let (macs, hellos) = match given {
            Some(macs) => {
                if macs[boot.rank as usize] != iface.mac {
                    return Err(HostError(format!(
                        "eth: rank {} is listed at MAC {} but {} is {}",
                        boot.rank,
                        mac_text(&macs[boot.rank as usize]),
                        iface.name,
                        mac_text(&iface.mac)
                    )));
                }
                (macs, None)
            }
            None => {
                let hfd = packet_socket(HELLO_ETHERTYPE)?;
                bind(&hfd, &iface, HELLO_ETHERTYPE)?;
                let mut h = Hellos {
                    fd: hfd,
                    key: hello_key,
                    me,
                    buf: vec![0; 2048],
                };
                let timeout =
                    crate::settings::env_seconds("VOLLEY_STARTUP_TIMEOUT", 0.001, 86_400.0)?
                        .unwrap_or(StdDuration::from_secs(30));
                (discover(&iface, &mut h, timeout)?, Some(h))
            }
        };
        let ranks = macs
            .iter()
            .enumerate()
            .map(|(i, m)| (*m, i as u16))
            .collect();
        // After discovery: the program takes this job's frames from the packet socket.
        let (xsk, xdp_refused) = match xdp {
            XdpSetting::Off => (None, None),
            XdpSetting::On => (
                Some(Box::new(Xsk::open(iface.index, job_key.to_be_bytes())?)),
                None,
            ),
            XdpSetting::Auto => match Xsk::open(iface.index, job_key.to_be_bytes()) {
                Ok(x) => (Some(Box::new(x)), None),
                Err(e) => {
                    eprintln!("volley: VOLLEY_ETH_XDP=auto: packet rings only ({})", e.0);
                    (None, Some(e.0))
                }
            },
        };
        Ok(EthDevice {
            rings,
            fd,
            gather,
            iface,
            mtu,
            macs,
            ranks,
            rx_next: 0,
            tx_next: 0,
            tx_pending: 0,
            hellos,
            hello_at: Instant::from_nanos(0),
            stats: EthStats::default(),
            xsk,
            xdp_refused,
            polled: Default::default(),
            beacon: None,
            session: None,
        })
    }

    /// Starts the beacon helper ([`crate::beacon`]): beacons to `ranks` (by
    /// rank), the Volley frame of the `i`-th built by `build(i, count, buf)` and
    /// sent in an Ethernet frame to its MAC, every `every` while the program does
    /// not poll. False if no thread could be made.
    pub fn start_beacon(
        &mut self,
        ranks: &[usize],
        build: crate::beacon::BuildFrame,
        every: std::time::Duration,
    ) -> bool {
        let fd = match self.gather.try_clone() {
            Ok(x) => x,
            Err(e) => {
                crate::beacon::without(&e.to_string());
                return false;
            }
        };
        let macs: Vec<[u8; 6]> = ranks
            .iter()
            .filter_map(|&r| self.macs.get(r).copied())
            .collect();
        let (targets, me) = (macs.len(), self.iface.mac);
        let mut e = Vec::new();
        let send = move |i: usize, f: &[u8]| {
            let Some(to) = macs.get(i) else { return };
            e.clear();
            e.extend_from_slice(to);
            e.extend_from_slice(&me);
            e.extend_from_slice(&ETHERTYPE.to_be_bytes());
            e.extend_from_slice(f);
            e.resize(e.len().max(ETH_MIN), 0);
            // SAFETY: a valid packet socket bound to the interface; `e` is a live
            // Ethernet frame the kernel only reads during the call.
            let _ = unsafe {
                libc::send(
                    fd.as_raw_fd(),
                    e.as_ptr() as *const libc::c_void,
                    e.len(),
                    libc::MSG_DONTWAIT,
                )
            };
        };
        self.beacon = crate::beacon::send_frames(send, build, targets, &self.polled, every);
        self.beacon.is_some()
    }

    /// Beacon frames sent while the program computed.
    pub fn beacons_sent(&self) -> u64 {
        self.beacon.as_ref().map_or(0, |b| b.sent())
    }

    /// Whether the beacon helper runs.
    pub fn has_beacon(&self) -> bool {
        self.beacon.is_some()
    }

    /// Counters.
    pub fn stats(&self) -> EthStats {
        self.stats
    }

    /// The interface.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Every rank's MAC address.
    pub fn macs(&self) -> &[[u8; 6]] {
        &self.macs
    }

    /// How the `AF_XDP` socket runs and its counters, when there is one.
    pub fn xdp(&self) -> Option<(crate::xdp::Mode, crate::xdp::XskStats)> {
        self.xsk.as_ref().map(|x| (x.mode(), x.stats()))
    }

    /// One line on the path frames take, for programs to print.
    pub fn path(&self) -> String {
        match (&self.xsk, &self.xdp_refused) {
            (Some(x), _) => format!(
                "{} on {} ({} frames in, {} out by AF_XDP; {} in, {} out by the packet ring)",
                x.mode().text(),
                self.iface.name,
                x.stats().rx,
                x.stats().tx,
                self.stats.rx - x.stats().rx,
                self.stats.tx - x.stats().tx
            ),
            (None, Some(why)) => format!("packet rings on {} (no AF_XDP: {why})", self.iface.name),
            (None, None) => format!("packet rings on {}", self.iface.name),
        }
    }

    /// Slots in the receive ring.
    pub fn rx_frames(&self) -> usize {
        self.rings.rx_frames
    }

    /// The receive window to advertise, in frames: half the receive ring, 4 to 64.
    pub fn window(&self) -> u16 {
        (self.rings.rx_frames / 2).clamp(4, 64) as u16
    }

    /// Hands the frames queued on either path to the kernel. At most one path has
    /// frames queued (each consume kicks the other first), so their order holds.
    fn kick(&mut self) {
        if let Some(x) = self.xsk.as_mut() {
            x.kick();
        }
        self.kick_ring();
    }

    /// Hands the filled transmit slots of the packet ring to the kernel.
    fn kick_ring(&mut self) {
        if self.tx_pending == 0 {
            return;
        }
        if let Err(e) = crate::sys::kick(self.fd.as_raw_fd()) {
            // ENOBUFS/EAGAIN: the frames stay queued and go with the next kick.
            if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                self.stats.tx_errors += 1;
            }
            return;
        }
        self.stats.tx_kicks += 1;
        self.tx_pending = 0;
    }

    /// Answers hellos of ranks still starting (their asks arrive after this rank has
    /// finished its own discovery).
    fn answer_hellos(&mut self) {
        let Some(h) = self.hellos.as_mut() else {
            return;
        };
        for _ in 0..16 {
            match h.next() {
                None => break,
                Some(Err(())) => self.stats.hellos_rejected += 1,
                Some(Ok(hello)) => {
                    if hello.ask && self.macs.get(hello.rank as usize) == Some(&hello.mac) {
                        h.send(&self.iface, hello.mac, false);
                        self.stats.hellos_answered += 1;
                    }
                }
            }
        }
    }
}

/// A received frame, lent from the ring until consumed.
#[derive(Debug)]
pub struct EthRx<'a> {
    dev: &'a mut EthDevice,
    slot: *mut u8,
    off: usize,
    len: usize,
    src: u16,
    /// The UMEM chunk, for a frame from the `AF_XDP` socket (`slot` points into it).
    chunk: Option<u64>,
}

/// A transmit slot for one frame to a peer.
#[derive(Debug)]
pub struct EthTx<'a> {
    dev: &'a mut EthDevice,
    dst: [u8; 6],
}

/// Writes the Ethernet header (to `dst` from `src`) and the padding around a payload
/// of `len` bytes in frame `b` (`ETH_HEADER + len` bytes at least).
fn frame_around(b: &mut [u8], dst: &[u8; 6], src: &[u8; 6], len: usize) {
    b[0..6].copy_from_slice(dst);
    b[6..12].copy_from_slice(src);
    b[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    // Padding up to the 60-byte minimum; none after most Volley frames (a call to
    // `memset` even for nothing).
    if let Some(pad) = b.get_mut(ETH_HEADER + len..).filter(|p| !p.is_empty()) {
        pad.fill(0);
    }
}

impl EthDevice {
    /// The next frame of a rank from the `AF_XDP` socket, if one waits: its chunk,
    /// where it lies, its length and the rank.
    fn next_xsk(&mut self) -> Option<(u64, *const u8, usize, u16)> {
        loop {
            let (chunk, frame, len) = self.xsk.as_mut()?.peek()?;
            // SAFETY: `peek` lent `len` bytes at `frame` until the chunk is released.
            let f = unsafe { std::slice::from_raw_parts(frame, len) };
            // The program checked type and job key; the station is checked here, as on
            // the packet ring (where the kernel filters by destination).
            let rank = (len >= ETH_HEADER && f[0..6] == self.iface.mac)
                .then(|| self.rank_of(&f[6..12]))
                .flatten();
            if let Some(rank) = rank {
                return Some((chunk, frame, len, rank));
            }
            self.stats.rx_foreign += 1;
            if let Some(x) = self.xsk.as_mut() {
                x.release(chunk);
            }
        }
    }

    /// The rank at MAC address `src`.
    fn rank_of(&self, src: &[u8]) -> Option<u16> {
        // A few ranks: a scan of their addresses beats hashing one.
        if self.macs.len() <= 16 {
            self.macs
                .iter()
                .position(|m| m[..] == *src)
                .map(|r| r as u16)
        } else {
            let mut m = [0u8; 6];
            m.copy_from_slice(src);
            self.ranks.get(&m).copied()
        }
    }
}

impl RxToken for EthRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        // SAFETY: the kernel handed this slot to us (TP_STATUS_USER, read with acquire
        // ordering) and will not touch it until its status is written back below;
        // `off + len` was checked to lie inside the slot. A frame from the `AF_XDP`
        // socket: `peek` lent these bytes until the chunk goes back below.
        let frame = unsafe { std::slice::from_raw_parts(self.slot.add(self.off), self.len) };
        let r = f(&frame[ETH_HEADER..]);
        match (self.chunk, self.dev.xsk.as_mut()) {
            (Some(c), Some(x)) => x.release(c),
            _ => self
                .dev
                .rings
                .status(self.slot)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release),
        }
        self.dev.stats.rx += 1;
        r
    }

    fn source(&self) -> Option<NodeAddr> {
        Some(NodeAddr(self.src))
    }
}

impl TxToken for EthTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let d = self.dev;
        let len = len.min(d.mtu);
        let total = (ETH_HEADER + len).max(ETH_MIN);
        let mac = d.iface.mac;
        if d.xsk.is_some() && total <= crate::xdp::MAX_FRAME {
            // Frames queued on the packet ring leave first.
            d.kick_ring();
        }
        if let Some(x) = d.xsk.as_mut().filter(|_| total <= crate::xdp::MAX_FRAME) {
            // `transmit` made sure of a chunk and a ring entry.
            let r = x.send(total, |b| {
                let r = f(&mut b[ETH_HEADER..ETH_HEADER + len]);
                frame_around(b, &self.dst, &mac, len);
                r
            });
            let queued = x.pending();
            d.stats.tx += 1;
            if queued as usize >= TX_BATCH {
                d.kick();
            }
            return r;
        }
        // Longer frames go by the packet ring, after those queued on the socket.
        if let Some(x) = d.xsk.as_mut() {
            x.kick();
        }
        let slot = d.rings.tx_slot(d.tx_next);
        // SAFETY: the slot's status was TP_STATUS_AVAILABLE (checked in `transmit`), so
        // the kernel does not read it until the status written below; the frame fits
        // the slot (`frame` was sized for the MTU).
        let b = unsafe { std::slice::from_raw_parts_mut(slot.add(TX_DATA), total) };
        let r = f(&mut b[ETH_HEADER..ETH_HEADER + len]);
        frame_around(b, &self.dst, &mac, len);
        // SAFETY: `tp_len` is the second word of the slot's tpacket2_hdr.
        unsafe { (slot.add(4) as *mut u32).write_volatile(total as u32) };
        d.rings
            .status(slot)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        d.tx_next = (d.tx_next + 1) % d.rings.tx_frames;
        d.tx_pending += 1;
        d.stats.tx += 1;
        if d.tx_pending >= TX_BATCH {
            d.kick();
        }
        r
    }
}

impl Device for EthDevice {
    type RxToken<'a> = EthRx<'a>;
    type TxToken<'a> = EthTx<'a>;

    fn receive(&mut self, now: Instant) -> Option<EthRx<'_>> {
        // The program polls: the beacon helper keeps quiet.
        self.polled
            .store(now.total_nanos(), std::sync::atomic::Ordering::Relaxed);
        if self.hellos.is_some() && now >= self.hello_at {
            self.hello_at = now + HELLO_CHECK;
            self.answer_hellos();
        }
        if let Some((chunk, frame, len, src)) = self.next_xsk() {
            return Some(EthRx {
                dev: self,
                slot: frame as *mut u8,
                off: 0,
                len,
                src,
                chunk: Some(chunk),
            });
        }
        loop {
            let slot = self.rings.rx_slot(self.rx_next);
            let status = self.rings.status(slot).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                return None;
            }
            self.rx_next = (self.rx_next + 1) % self.rings.rx_frames;
            if status & libc::TP_STATUS_LOSING != 0 {
                self.stats.rx_ring_full += 1;
            }
            // SAFETY: the slot is ours (TP_STATUS_USER); its tpacket2_hdr and
            // sockaddr_ll are plain bytes the kernel wrote before the status.
            let (len, snap, mac_off, pkttype) = unsafe {
                (
                    // tp_len, tp_snaplen, tp_mac (struct tpacket2_hdr).
                    (slot.add(4) as *const u32).read_volatile() as usize,
                    (slot.add(8) as *const u32).read_volatile() as usize,
                    (slot.add(12) as *const u16).read_volatile() as usize,
                    slot.add(RX_LL + LL_PKTTYPE).read_volatile(),
                )
            };
            let fits = mac_off
                .checked_add(snap)
                .is_some_and(|end| end <= self.rings.frame);
            // A frame longer than the slot arrives cut short (snaplen < len): dropped.
            if fits && snap == len && snap >= ETH_HEADER && pkttype != libc::PACKET_OTHERHOST {
                // SAFETY: inside the slot (checked above).
                let h = unsafe { std::slice::from_raw_parts(slot.add(mac_off), ETH_HEADER) };
                if let Some(rank) = self.rank_of(&h[6..12]) {
                    return Some(EthRx {
                        dev: self,
                        slot,
                        off: mac_off,
                        len: snap,
                        src: rank,
                        chunk: None,
                    });
                }
            }
            self.stats.rx_foreign += 1;
            self.rings
                .status(slot)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
    }

    /// A look at the status word of the packet ring's next slot (and at the
    /// `AF_XDP` receive ring's producer index): memory the kernel writes, no system
    /// call. A frame from no rank of the job also says yes; `receive` drops it.
    fn rx_pending(&self) -> bool {
        if self.xsk.as_ref().is_some_and(|x| x.rx_waiting()) {
            return true;
        }
        let slot = self.rings.rx_slot(self.rx_next);
        self.rings.status(slot).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    #[inline]
    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<EthTx<'_>> {
        let to = *self.macs.get(dst.0 as usize)?;
        let slot = self.rings.tx_slot(self.tx_next);
        let mut status = self.rings.status(slot).load(Ordering::Acquire);
        if status != libc::TP_STATUS_AVAILABLE && self.tx_pending > 0 {
            // The ring is full of frames not yet handed over.
            self.kick();
            status = self.rings.status(slot).load(Ordering::Acquire);
        }
        if status & libc::TP_STATUS_WRONG_FORMAT != 0 {
            self.stats.tx_errors += 1;
            self.rings
                .status(slot)
                .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
        } else if status != libc::TP_STATUS_AVAILABLE {
            return None;
        }
        // Room on both paths: the frame's length, which picks one, comes later.
        if let Some(x) = self.xsk.as_mut() {
            if !x.can_send() {
                return None;
            }
        }
        Some(EthTx { dev: self, dst: to })
    }

    fn flush(&mut self, _now: Instant) {
        self.kick();
    }

    fn gather_from(&self) -> usize {
        GATHER_FROM
    }

    fn transmit_parts(&mut self, _now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        let Some(&to) = self.macs.get(dst.0 as usize) else {
            return false;
        };
        // Frames already queued go first.
        self.kick();
        if self.tx_pending > 0 || self.xsk.as_ref().is_some_and(|x| x.pending() > 0) {
            return false;
        }
        let mut head = [0u8; ETH_HEADER];
        head[0..6].copy_from_slice(&to);
        head[6..12].copy_from_slice(&self.iface.mac);
        head[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.mtu {
            // Never from the engine (it keeps to the MTU): dropped, counted.
            self.stats.tx_errors += 1;
            return true;
        }
        let pad = [0u8; ETH_MIN];
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 8];
        let pieces = std::iter::once(&head[..])
            .chain(parts.iter().copied())
            .chain(std::iter::once(
                &pad[..ETH_MIN.saturating_sub(ETH_HEADER + len)],
            ))
            .filter(|p| !p.is_empty());
        let mut n = 0;
        for p in pieces {
            if n == iov.len() {
                self.stats.tx_errors += 1;
                return true;
            }
            iov[n] = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
            n += 1;
        }
        // SAFETY: a zeroed msghdr is valid (no address, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        // SAFETY: a valid socket; `msg` points at `n` iovecs over live slices that
        // the kernel only reads during the call.
        let r = unsafe { crate::sys::sendmsg(self.gather.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
        if let Err(e) = r {
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                return false;
            }
            // Lost like a dropped frame: the engine sends it again.
            self.stats.tx_errors += 1;
            return true;
        }
        self.stats.tx += 1;
        self.stats.tx_gathered += 1;
        true
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(self.mtu, false, false)
    }

    fn transmit_reads_time(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_print() {
        let m = parse_mac("02:00:5e:10:ab:FF").unwrap();
        assert_eq!(m, [2, 0, 0x5e, 0x10, 0xab, 0xff]);
        assert_eq!(mac_text(&m), "02:00:5e:10:ab:ff");
        assert_eq!(parse_mac("02-00-5e-10-ab-ff"), Some(m));
        for bad in [
            "",
            "02:00:5e:10:ab",
            "02:00:5e:10:ab:ff:00",
            "2:00:5e:10:ab:ff",
            "zz:00:5e:10:ab:ff",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }

    #[test]
    fn hellos_round_trip_and_forgeries_are_refused() {
        let key = [7u8; 16];
        let h = Hello {
            ask: true,
            rank: 3,
            size: 4,
            job_key: 0xDEAD_BEEF,
            mac: [2, 0, 0, 0, 0, 3],
        };
        let b = h.emit(&key);
        assert_eq!(Hello::parse(&b, &key), Some(h));
        assert_eq!(Hello::parse(&b, &[8u8; 16]), None, "another job's key");
        for i in 0..HELLO_LEN {
            let mut m = b;
            m[i] ^= 1;
            assert_eq!(Hello::parse(&m, &key), None, "byte {i} flipped");
        }
        assert_eq!(Hello::parse(&b[..HELLO_LEN - 1], &key), None);
        // Garbage of every length never panics.
        for n in 0..64 {
            assert_eq!(Hello::parse(&vec![0xA5; n], &key), None);
        }
    }

    /// The look a waiting call takes between polls (`rx_pending`) sees a frame in the
    /// packet ring before `receive` takes it, and none once it is taken. Root only (a
    /// veth pair is made and removed; CI runs as root); elsewhere it says so and passes.
    #[test]
    fn a_look_at_the_ring_sees_a_frame_before_it_is_received() {
        use std::process::Command;
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            eprintln!("not root: no veth pair can be made here (CI runs as root)");
            return;
        }
        struct Veth(String);
        impl Drop for Veth {
            fn drop(&mut self) {
                let _ = Command::new("ip").args(["link", "del", &self.0]).output();
            }
        }
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("ip runs");
            assert!(o.status.success(), "ip {args:?}: {o:?}");
        };
        let id = std::process::id();
        let (a, b) = (format!("vlyl{id}a"), format!("vlyl{id}b"));
        let macs = ["02:00:00:00:00:01", "02:00:00:00:00:02"];
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        let _pair = Veth(a.clone());
        for (end, mac) in [(&a, macs[0]), (&b, macs[1])] {
            ip(&["link", "set", end, "address", mac]);
            ip(&["link", "set", end, "up"]);
        }
        let boot = |rank| Boot {
            rank,
            size: 2,
            job: 1,
            source: crate::bootstrap::Source::Hosts,
            hosts: vec![format!("a={}", macs[0]), format!("b={}", macs[1])],
            secret: None,
        };
        let secret = crate::secret::Secret([9; 16]);
        // Carrier comes up a moment after both ends are up.
        let open = |rank, name: &str| {
            let t0 = std::time::Instant::now();
            loop {
                match EthDevice::open_on(&boot(rank), &secret, XdpSetting::Off, name) {
                    Ok(d) => return d,
                    Err(e) if t0.elapsed() > StdDuration::from_secs(5) => panic!("{}", e.0),
                    Err(_) => std::thread::sleep(StdDuration::from_millis(10)),
                }
            }
        };
        let (mut tx, mut rx) = (open(0, &a), open(1, &b));
        let now = Instant::ZERO;
        assert!(!rx.rx_pending(), "an empty ring looks empty");
        let tok = tx.transmit(now, NodeAddr(1)).expect("room to send");
        tok.consume(64, |f| f.fill(0x5a));
        tx.flush(now);
        let t0 = std::time::Instant::now();
        while !rx.rx_pending() {
            assert!(
                t0.elapsed() < StdDuration::from_secs(5),
                "the frame sent never showed in the look"
            );
        }
        // Only looked at: still there for `receive`.
        assert!(rx.rx_pending());
        let tok = rx.receive(now).expect("the frame the look saw");
        assert_eq!(tok.source(), Some(NodeAddr(0)));
        tok.consume(|f| assert!(f.len() >= 64 && f[..64].iter().all(|&x| x == 0x5a)));
        assert!(!rx.rx_pending(), "a taken frame is not seen again");
        assert!(rx.receive(now).is_none());
    }

    #[test]
    fn given_macs_are_checked() {
        let boot = |hosts: &[&str]| Boot {
            rank: 0,
            size: 2,
            job: 1,
            source: crate::bootstrap::Source::Hosts,
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            secret: None,
        };
        assert_eq!(given_macs(&boot(&["a", "b"])).unwrap(), None);
        let m = given_macs(&boot(&["a=02:00:00:00:00:01", "b=02:00:00:00:00:02"]))
            .unwrap()
            .unwrap();
        assert_eq!(m[1], [2, 0, 0, 0, 0, 2]);
        let e = given_macs(&boot(&["a=02:00:00:00:00:01", "b"])).unwrap_err();
        assert!(e.0.contains("1 of 2 ranks"), "{}", e.0);
        let e = given_macs(&boot(&["a=02:00:00:00:00:01", "b=02:00:00:00:00:01"])).unwrap_err();
        assert!(e.0.contains("ranks 0 and 1 both have MAC"), "{}", e.0);
        let e = given_macs(&boot(&["a=02:00:00:00:00:01", "b=nonsense"])).unwrap_err();
        assert!(e.0.contains("\"nonsense\" is not a MAC address"), "{}", e.0);
    }
}
