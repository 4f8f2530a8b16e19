//! Hosts lists: which ranks run where, and which of them this process is.
//!
//! An entry is `host[:slots][=MAC]`: a host name, a fully qualified name or an
//! address (IPv6 in brackets, `[fe80::1]:2`), the number of ranks it runs (1 if
//! not given; Hydra's `-hosts a:2,b:2` and hostfiles spell it so), and for the
//! `eth` fabric the MAC address its ranks are reached at. The list expands to one
//! entry per rank, in order: `a:2,b` is ranks 0 and 1 on `a`, rank 2 on `b`.
//!
//! A process finds its entries as MPI's start-ups do: by this machine's host name
//! (short or fully qualified), else by an address of one of its interfaces, else
//! by what the entries' names resolve to. Where several ranks run on this host, it
//! takes the one its launcher names (`VOLLEY_LOCAL_RANK`, `MPI_LOCALRANKID`,
//! `OMPI_COMM_WORLD_LOCAL_RANK`, `SLURM_LOCALID`), else the first one no other
//! process of the job on this host holds: a claim is an abstract socket named
//! after the job, the user and the slot, bound for the life of the process (so
//! nothing is left in a shared directory, and a crashed rank's slot is free again).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bootstrap::BootError;

/// One entry of a hosts list, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// Name or address (an IPv6 address without its brackets).
    pub host: String,
    /// Ranks on it.
    pub slots: u16,
    /// The `eth` fabric's MAC address for its ranks, as written.
    pub mac: Option<String>,
}

impl HostEntry {
    /// Reads `host[:slots][=MAC]`; one line saying what is wrong otherwise.
    pub fn parse(entry: &str) -> Result<HostEntry, BootError> {
        let bad = |why: &str| Err(BootError(format!("hosts list entry {entry:?}: {why}")));
        let (place, mac) = match entry.split_once('=') {
            Some((p, m)) => (p, Some(m.to_owned())),
            None => (entry, None),
        };
        let (host, slots) = if let Some(rest) = place.strip_prefix('[') {
            let Some((addr, after)) = rest.split_once(']') else {
                return bad("an opening bracket without its closing one");
            };
            if addr.parse::<Ipv6Addr>().is_err() {
                return bad("brackets hold an IPv6 address");
            }
            match after {
                "" => (addr, None),
                s => match s.strip_prefix(':') {
                    Some(n) => (addr, Some(n)),
                    None => return bad("only `:slots` may follow the brackets"),
                },
            }
        } else if place.matches(':').count() > 1 {
            return bad("an IPv6 address goes in brackets: [addr] or [addr]:slots");
        } else {
            match place.split_once(':') {
                Some((h, n)) => (h, Some(n)),
                None => (place, None),
            }
        };
        if host.is_empty() {
            return bad("no host");
        }
        let slots = match slots {
            None => 1,
            Some(n) => match n.parse::<u16>() {
                Ok(k) if k >= 1 => k,
                _ => return bad("the number of ranks after `:` is a whole number from 1"),
            },
        };
        Ok(HostEntry {
            host: host.to_owned(),
            slots,
            mac,
        })
    }

    /// The entry of one of its ranks: `host` or `host=MAC` (brackets kept off).
    fn per_rank(&self) -> String {
        match &self.mac {
            Some(m) => format!("{}={m}", self.host),
            None => self.host.clone(),
        }
    }
}

/// The list with each entry repeated once per rank it runs, and the entry each rank
/// came from.
pub fn expand(list: &[String]) -> Result<(Vec<String>, Vec<usize>), BootError> {
    let mut ranks = Vec::new();
    let mut from = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let entry = HostEntry::parse(e)?;
        if ranks.len() + entry.slots as usize > u16::MAX as usize {
            return Err(BootError(format!(
                "the hosts list names more than {} ranks",
                u16::MAX
            )));
        }
        for _ in 0..entry.slots {
            ranks.push(entry.per_rank());
            from.push(i);
        }
    }
    Ok((ranks, from))
}

/// What this machine is called and where it can be reached, and how to resolve a
/// name: what a hosts list is matched against.
pub struct ThisHost<'a> {
    /// The host name (`/proc/sys/kernel/hostname`).
    pub name: &'a str,
    /// The addresses of its interfaces.
    pub addrs: &'a [IpAddr],
    /// A name's addresses (none if it does not resolve).
    pub resolve: &'a dyn Fn(&str) -> Vec<IpAddr>,
}

impl std::fmt::Debug for ThisHost<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThisHost")
            .field("name", &self.name)
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

/// How an entry was found to be this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// It is the host name, or the short or qualified form of it.
    Name,
    /// It is an address of one of this host's interfaces.
    Address,
    /// It is a name that resolves to one of those addresses.
    Resolved,
}

impl Matched {
    fn says(self) -> &'static str {
        match self {
            Matched::Name => "by host name",
            Matched::Address => "by interface address",
            Matched::Resolved => "by the address its name resolves to",
        }
    }
}

/// Whether name `a` names host `b`: equal, or one is the first label of the other
/// written in full (`node1` and `node1.cluster`), ignoring case.
fn same_name(a: &str, b: &str) -> bool {
    let first = |s: &str| s.split('.').next().unwrap_or("").to_ascii_lowercase();
    a.eq_ignore_ascii_case(b)
        || (!a.contains('.') && first(b) == a.to_ascii_lowercase())
        || (!b.contains('.') && first(a) == b.to_ascii_lowercase())
}

fn literal(host: &str) -> Option<IpAddr> {
    host.parse().ok()
}

/// The ranks of `ranks` (one entry per rank, see [`expand`]) that run on this
/// host, and how they were found: by name first, then by address, then by
/// resolving the names (each step only if the one before found none).
pub fn mine(ranks: &[String], this: &ThisHost<'_>) -> (Vec<usize>, Option<Matched>) {
    let hosts: Vec<&str> = ranks
        .iter()
        .map(|e| crate::bootstrap::host_name(e))
        .collect();
    let pick = |f: &dyn Fn(&str) -> bool| -> Vec<usize> {
        (0..hosts.len()).filter(|&i| f(hosts[i])).collect()
    };
    let by_name = pick(&|h| literal(h).is_none() && same_name(h, this.name));
    if !by_name.is_empty() {
        return (by_name, Some(Matched::Name));
    }
    let local = |a: &IpAddr| a.is_loopback() || this.addrs.contains(a);
    let by_addr = pick(&|h| literal(h).is_some_and(|a| this.addrs.contains(&a)));
    if !by_addr.is_empty() {
        return (by_addr, Some(Matched::Address));
    }
    // Each distinct name resolved once.
    let mut resolved: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
    for &h in &hosts {
        if literal(h).is_none() && !resolved.contains_key(h) {
            resolved.insert(h, (this.resolve)(h).iter().any(local));
        }
    }
    let by_resolving = pick(&|h| match literal(h) {
        Some(a) => a.is_loopback(),
        None => resolved.get(h).copied().unwrap_or(false),
    });
    if !by_resolving.is_empty() {
        return (by_resolving, Some(Matched::Resolved));
    }
    (Vec::new(), None)
}

/// The launchers' variables for a process's index among the ranks of its host.
pub const LOCAL_RANK_VARS: [&str; 4] = [
    "VOLLEY_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
];

/// This process's rank from a hosts list (`list` as given), with one line saying
/// which entry it took and why. `local` is a launcher's index of this process
/// among the ranks of this host; without one, `claim(slot)` takes the `slot`-th
/// rank of this host for this process, or says another process holds it.
pub fn rank_from_list(
    list: &[String],
    this: &ThisHost<'_>,
    local: Option<(&str, u64)>,
    claim: &mut dyn FnMut(usize) -> bool,
) -> Result<(usize, Vec<String>, String), BootError> {
    let (ranks, from) = expand(list)?;
    let (mine, how) = mine(&ranks, this);
    let Some(how) = how else {
        let addrs: Vec<String> = this.addrs.iter().map(|a| a.to_string()).collect();
        return Err(BootError(format!(
            "this host ({}; addresses {}) matches no entry of the hosts list {:?} by name, interface address or resolved name",
            this.name,
            if addrs.is_empty() { "none".to_owned() } else { addrs.join(", ") },
            list
        )));
    };
    let slot = match local {
        Some((var, k)) => {
            if k as usize >= mine.len() {
                return Err(BootError(format!(
                    "{var}={k}, but the hosts list gives this host ({}) {} rank{}",
                    this.name,
                    mine.len(),
                    if mine.len() == 1 { "" } else { "s" }
                )));
            }
            k as usize
        }
        None if mine.len() == 1 => 0,
        None => (0..mine.len()).find(|&s| claim(s)).ok_or_else(|| {
            BootError(format!(
                "all {} ranks the hosts list gives this host ({}) are taken by other processes of this job: start at most {} here, or set VOLLEY_RANK",
                mine.len(),
                this.name,
                mine.len()
            ))
        })?,
    };
    let rank = mine[slot];
    let entry = &list[from[rank]];
    let said = format!(
        "hosts list: rank {rank} of {} is entry {} ({entry}) {}, slot {} of {} on this host ({})",
        ranks.len(),
        from[rank] + 1,
        how.says(),
        slot + 1,
        mine.len(),
        this.name
    );
    Ok((rank, ranks, said))
}

/// The addresses of this machine's interfaces that are up (`getifaddrs`).
pub fn interface_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` receives a list the call allocates; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, live until freed.
        let ifa = unsafe { &*p };
        let up = ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0;
        if up && !ifa.ifa_addr.is_null() {
            // SAFETY: a non-null address of the family its header says.
            match unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int {
                libc::AF_INET => {
                    // SAFETY: an AF_INET address is a sockaddr_in.
                    let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                    out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))));
                }
                libc::AF_INET6 => {
                    // SAFETY: an AF_INET6 address is a sockaddr_in6.
                    let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                    out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                }
                _ => {}
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs allocated, freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// A name's addresses by the system's resolver (none if it does not resolve).
pub fn resolve(name: &str) -> Vec<IpAddr> {
    use std::net::ToSocketAddrs;
    (name, 0)
        .to_socket_addrs()
        .map(|a| a.map(|s| s.ip()).collect())
        .unwrap_or_default()
}

/// Claims slot `slot` of this host for job `job` for the life of the process: an
/// abstract socket (`@volley/<uid>/<job>/<slot>`, in this network namespace, so
/// one per machine), bound or refused because another process holds it.
pub fn claim_slot(job: u64, slot: usize) -> bool {
    use std::os::fd::FromRawFd;
    // SAFETY: plain system calls on values that outlive them; the descriptor is
    // owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: a descriptor just opened, owned once.
    let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let name = format!("volley/{uid}/{job:x}/{slot}");
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // The abstract namespace: a leading NUL, then the name.
    for (d, s) in sa.sun_path[1..].iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    // SAFETY: a valid socket and an address of `len` bytes within `sa`.
    let bound = unsafe {
        libc::bind(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            &sa as *const libc::sockaddr_un as *const libc::sockaddr,
            len as libc::socklen_t,
        )
    } == 0;
    if bound {
        // Held until the process ends.
        std::mem::forget(sock);
    }
    bound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_read_slots_macs_and_bracketed_addresses() {
        let e = HostEntry::parse("node1:4=02:00:00:00:00:01").unwrap();
        assert_eq!((e.host.as_str(), e.slots), ("node1", 4));
        assert_eq!(e.mac.as_deref(), Some("02:00:00:00:00:01"));
        let e = HostEntry::parse("10.0.0.2").unwrap();
        assert_eq!((e.host.as_str(), e.slots, e.mac), ("10.0.0.2", 1, None));
        let e = HostEntry::parse("[fe80::1]:2").unwrap();
        assert_eq!((e.host.as_str(), e.slots), ("fe80::1", 2));
        for bad in [
            "a:0", "a:x", ":2", "fe80::1", "[fe80::1", "[x]:2", "[::1]2", "a:70000",
        ] {
            let m = HostEntry::parse(bad).unwrap_err().to_string();
            assert!(m.contains(bad) && !m.contains('\n'), "{bad}: {m}");
        }
        let (ranks, from) = expand(&["a:2".into(), "b=02:00:00:00:00:09".into()]).unwrap();
        assert_eq!(ranks, ["a", "a", "b=02:00:00:00:00:09"]);
        assert_eq!(from, [0, 0, 1]);
    }

    fn host<'a>(
        name: &'a str,
        addrs: &'a [IpAddr],
        dns: &'a dyn Fn(&str) -> Vec<IpAddr>,
    ) -> ThisHost<'a> {
        ThisHost {
            name,
            addrs,
            resolve: dns,
        }
    }

    #[test]
    fn a_host_is_found_by_name_fqdn_address_or_resolved_name() {
        let addrs = [ip("10.1.0.3"), ip("192.168.5.3")];
        let no_dns = |_: &str| Vec::new();
        let list = |s: &str| crate::bootstrap::parse_hosts(s);
        let find = |l: &str, name: &str, dns: &dyn Fn(&str) -> Vec<IpAddr>| {
            let mut none = |_| false;
            rank_from_list(&list(l), &host(name, &addrs, dns), None, &mut none)
        };
        let (r, ranks, said) = find("n1,n2,n3", "n3", &no_dns).unwrap();
        assert_eq!((r, ranks.len()), (2, 3));
        assert!(said.contains("entry 3 (n3) by host name"), "{said}");
        let (r, ..) = find("n1.cl.example,n3.cl.example", "n3", &no_dns).unwrap();
        assert_eq!(r, 1);
        let (r, ..) = find("n1,N3", "n3.cl.example", &no_dns).unwrap();
        assert_eq!(r, 1);
        // A qualified name of another domain is another host.
        assert!(find("n3.other,n1.cl", "n3.cl", &no_dns).is_err());
        let (r, _, said) = find("10.1.0.1,10.1.0.2,10.1.0.3", "vm", &no_dns).unwrap();
        assert_eq!(r, 2);
        assert!(said.contains("by interface address"), "{said}");
        let dns = |n: &str| match n {
            "alpha" => vec![ip("10.1.0.9")],
            "beta" => vec![ip("192.168.5.3")],
            _ => Vec::new(),
        };
        let (r, _, said) = find("alpha,beta", "vm", &dns).unwrap();
        assert_eq!(r, 1);
        assert!(said.contains("resolves"), "{said}");
        let e = find("10.1.0.1,alpha", "vm", &dns).unwrap_err().to_string();
        assert!(
            e.contains("matches no entry") && e.contains("10.1.0.3") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn several_ranks_on_a_host_take_the_launchers_index_or_claim_a_slot() {
        let addrs = [ip("10.1.0.2")];
        let no_dns = |_: &str| Vec::new();
        let this = host("vm", &addrs, &no_dns);
        let list = crate::bootstrap::parse_hosts("10.1.0.1:2,10.1.0.2:3");
        let mut never = |_| panic!("no claim with a launcher's index");
        let (r, ranks, said) =
            rank_from_list(&list, &this, Some(("SLURM_LOCALID", 1)), &mut never).unwrap();
        assert_eq!((r, ranks.len()), (3, 5));
        assert!(said.contains("slot 2 of 3"), "{said}");
        let e = rank_from_list(&list, &this, Some(("MPI_LOCALRANKID", 3)), &mut never)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MPI_LOCALRANKID=3") && e.contains("3 ranks"),
            "{e}"
        );
        // Slots 0 and 1 held by other processes: this one takes slot 2.
        let mut tried = Vec::new();
        let mut claim = |s: usize| {
            tried.push(s);
            s == 2
        };
        let (r, ..) = rank_from_list(&list, &this, None, &mut claim).unwrap();
        assert_eq!((r, tried), (4, vec![0, 1, 2]));
        let mut full = |_| false;
        let e = rank_from_list(&list, &this, None, &mut full)
            .unwrap_err()
            .to_string();
        assert!(e.contains("all 3 ranks") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn a_claimed_slot_is_held_until_the_process_ends() {
        let job = 0xC1A1_0000 ^ u64::from(std::process::id());
        assert!(claim_slot(job, 0));
        assert!(!claim_slot(job, 0), "held by this process");
        assert!(claim_slot(job, 1));
        assert!(claim_slot(job ^ 1, 0), "another job's slots are its own");
    }
}
