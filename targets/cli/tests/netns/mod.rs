//! Many "hosts" on one machine, for the tests and the benchmark of jobs across
//! hosts: a network namespace per host, each with an `eth0` (a veth pair) whose other
//! end is in a hub namespace, on a bridge or on a switch that loses frames; each
//! host has its own address and MAC, and may run its processes under a host name of
//! its own (a UTS namespace) that the others resolve (`/etc/netns/NS/hosts`, which
//! `ip netns exec` puts in place of `/etc/hosts`). Root only.

#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

pub fn root() -> bool {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        return true;
    }
    eprintln!("not root: network namespaces cannot be made here (CI runs as root)");
    false
}

/// One job of hosts at a time: every rank busy-polls, and the neighbour table is
/// the machine's.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip runs");
    assert!(o.status.success(), "ip {args:?}: {}", text(&o));
}

/// How the hosts are joined.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wiring {
    /// A bridge in the hub.
    Bridge,
    /// Nothing in the hub: a [`LossySwitch`] joins the ports.
    Bare,
}

/// `n` hosts in namespaces of their own. Removed when dropped.
pub struct Hosts {
    tag: String,
    pub n: usize,
    /// Whether each host has a name its peers resolve (`h<i>`, `h<i>.cluster.test`).
    named: bool,
    _neigh: NeighCapacity,
}

impl Hosts {
    pub fn new(n: usize, wiring: Wiring, named: bool) -> Hosts {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "vh{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let hosts = Hosts {
            tag,
            n,
            named,
            // Room beside what namespaces still being torn down hold.
            _neigh: NeighCapacity::at_least(4 * n * n + 1024),
        };
        let hub = hosts.hub();
        ip(&["netns", "add", &hub]);
        if wiring == Wiring::Bridge {
            ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
            ip(&["-n", &hub, "link", "set", "br0", "up"]);
            // mpiexec runs in the hub, reached by its ranks at this address.
            ip(&["-n", &hub, "addr", "add", "10.77.250.1/16", "dev", "br0"]);
        }
        let etc = (0..n)
            .map(|j| format!("{} h{j}.cluster.test h{j}\n", hosts.addr(j)))
            .collect::<String>();
        for r in 0..n {
            let (ns, port) = (hosts.ns(r), format!("p{r}"));
            ip(&["netns", "add", &ns]);
            ip(&[
                "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns",
                &hub,
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "address", &hosts.mac(r)]);
            let cidr = format!("{}/16", hosts.addr(r));
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            if wiring == Wiring::Bridge {
                ip(&["-n", &hub, "link", "set", &port, "master", "br0"]);
            }
            ip(&["-n", &hub, "link", "set", &port, "up"]);
            if named {
                let dir = format!("/etc/netns/{ns}");
                std::fs::create_dir_all(&dir).expect("/etc/netns");
                std::fs::write(format!("{dir}/hosts"), &etc).expect("a hosts file");
            }
        }
        hosts
    }

    pub fn hub(&self) -> String {
        format!("{}h", self.tag)
    }

    pub fn ns(&self, r: usize) -> String {
        format!("{}r{r}", self.tag)
    }

    /// Host `r`'s address (`10.77.0.1` up).
    pub fn addr(&self, r: usize) -> String {
        format!("10.77.{}.{}", r / 200, r % 200 + 1)
    }

    pub fn mac(&self, r: usize) -> String {
        format!("02:76:6c:79:{:02x}:{:02x}", r >> 8, r & 0xff)
    }

    /// Host `r`'s name (resolvable where the hosts are named).
    pub fn name(&self, r: usize) -> String {
        format!("h{r}")
    }

    /// `f(r)` for every host, joined by commas: a hosts list.
    pub fn list(&self, f: impl Fn(usize) -> String) -> String {
        (0..self.n).map(f).collect::<Vec<_>>().join(",")
    }

    /// Starts `argv` on host `r`, under the host's own name where the hosts are
    /// named, with `env`; its output piped.
    pub fn spawn(&self, r: usize, argv: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(r)]);
        if self.named {
            let script = format!("hostname {}; exec \"$0\" \"$@\"", self.name(r));
            cmd.args(["unshare", "--uts", "sh", "-c", &script]);
        }
        cmd.args(argv)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("ip netns exec runs")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes the interfaces in it, and their veth peers.
        for r in 0..self.n {
            let ns = self.ns(r);
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
            if self.named {
                let _ = std::fs::remove_dir_all(format!("/etc/netns/{ns}"));
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.hub()])
            .output();
    }
}

/// Waits for every child, killing what is left after `limit`; their outputs in
/// order, and how long the last took.
pub fn wait_all(children: Vec<Child>, limit: Duration) -> (Vec<Output>, Duration) {
    let t = Instant::now();
    let end = t + limit;
    let mut outs = Vec::new();
    for mut c in children {
        loop {
            match c.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < end => thread::sleep(Duration::from_millis(5)),
                _ => {
                    let _ = c.kill();
                    break;
                }
            }
        }
        outs.push(c.wait_with_output().expect("a child's output"));
    }
    (outs, t.elapsed())
}

/// The kernel's neighbour table is one for every network namespace of the machine,
/// and refuses new entries past `gc_thresh3` (1,024 by default): `n` hosts that all
/// talk need about `n * n`. Raised for the life of this value, then put back.
pub struct NeighCapacity {
    old: Option<(String, String)>,
}

const THRESH2: &str = "/proc/sys/net/ipv4/neigh/default/gc_thresh2";
const THRESH3: &str = "/proc/sys/net/ipv4/neigh/default/gc_thresh3";

impl NeighCapacity {
    pub fn at_least(entries: usize) -> NeighCapacity {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let (t2, t3) = (read(THRESH2), read(THRESH3));
        if t3.trim().parse::<usize>().unwrap_or(0) >= entries {
            return NeighCapacity { old: None };
        }
        std::fs::write(THRESH3, entries.to_string()).expect("gc_thresh3");
        std::fs::write(THRESH2, (entries / 2).to_string()).expect("gc_thresh2");
        NeighCapacity {
            old: Some((t2, t3)),
        }
    }
}

impl Drop for NeighCapacity {
    fn drop(&mut self) {
        if let Some((t2, t3)) = &self.old {
            let _ = std::fs::write(THRESH2, t2.trim());
            let _ = std::fs::write(THRESH3, t3.trim());
        }
    }
}

/// A switch in the hub of [`Wiring::Bare`] hosts, in a thread: frames go to the
/// port of their destination MAC (every other port for a broadcast), and each link
/// loses `loss_pct` percent of the frames that cross it, each way (a frame crosses
/// two links: its sender's and its receiver's), from a seeded generator.
pub struct LossySwitch {
    stop: Arc<AtomicBool>,
    pub passed: Arc<AtomicU64>,
    pub dropped: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl LossySwitch {
    pub fn start(hosts: &Hosts, loss_pct: u64, seed: u64) -> LossySwitch {
        let stop = Arc::new(AtomicBool::new(false));
        let passed = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let (hub, n) = (hosts.hub(), hosts.n);
        let (s, p, d) = (stop.clone(), passed.clone(), dropped.clone());
        let ready = Arc::new(std::sync::Barrier::new(2));
        let r2 = ready.clone();
        let thread = thread::spawn(move || {
            enter(&hub);
            // A switch is hardware: it does not wait behind the hosts' processes.
            let prio = libc::sched_param { sched_priority: 1 };
            // SAFETY: a plain system call on this thread with a live parameter.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &prio) };
            let ports: Vec<i32> = (0..n)
                .map(|r| {
                    let c = std::ffi::CString::new(format!("p{r}")).unwrap();
                    // SAFETY: a valid C string.
                    unsafe { libc::if_nametoindex(c.as_ptr()) as i32 }
                })
                .collect();
            // SAFETY: plain system calls; the descriptor is closed below.
            let fd = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW,
                    (libc::ETH_P_ALL as u16).to_be() as i32,
                )
            };
            assert!(fd >= 0, "packet socket");
            let big: libc::c_int = 8 << 20;
            // SAFETY: a valid socket and option.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    &big as *const libc::c_int as *const libc::c_void,
                    4,
                )
            };
            r2.wait();
            let mut state = seed | 1;
            let mut rand = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % 100
            };
            let mut buf = vec![0u8; 65_536];
            let end = Instant::now() + Duration::from_secs(600);
            while !s.load(Ordering::Relaxed) && Instant::now() < end {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one live pollfd.
                if unsafe { libc::poll(&mut pfd, 1, 20) } <= 0 {
                    continue;
                }
                loop {
                    // SAFETY: a zeroed sockaddr_ll is valid.
                    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                    // SAFETY: a valid socket, a buffer and an address that outlive it.
                    let got = unsafe {
                        libc::recvfrom(
                            fd,
                            buf.as_mut_ptr() as *mut libc::c_void,
                            buf.len(),
                            libc::MSG_DONTWAIT,
                            &mut sa as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                            &mut len,
                        )
                    };
                    if got < 14 {
                        break;
                    }
                    if sa.sll_pkttype == libc::PACKET_OUTGOING {
                        continue;
                    }
                    let Some(from) = ports.iter().position(|&i| i == sa.sll_ifindex) else {
                        continue;
                    };
                    // A veth leaves the UDP checksum to a card that is not there.
                    udp_checksum(&mut buf[..got as usize]);
                    let f = &buf[..got as usize];
                    // The sender's link.
                    if rand() < loss_pct {
                        d.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let dst = &f[..6];
                    let to: Vec<usize> = if dst[0] & 1 != 0 {
                        (0..n).filter(|&r| r != from).collect()
                    } else if dst[..4] == [2, 0x76, 0x6c, 0x79] {
                        let r = (dst[4] as usize) << 8 | dst[5] as usize;
                        if r < n {
                            vec![r]
                        } else {
                            Vec::new()
                        }
                    } else {
                        Vec::new()
                    };
                    for r in to {
                        // The receiver's link.
                        if rand() < loss_pct {
                            d.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        // SAFETY: a zeroed sockaddr_ll is valid; filled below.
                        let mut out: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                        out.sll_family = libc::AF_PACKET as u16;
                        out.sll_ifindex = ports[r];
                        out.sll_halen = 6;
                        out.sll_addr[..6].copy_from_slice(dst);
                        // SAFETY: a valid socket, frame and address.
                        unsafe {
                            libc::sendto(
                                fd,
                                f.as_ptr() as *const libc::c_void,
                                f.len(),
                                0,
                                &out as *const libc::sockaddr_ll as *const libc::sockaddr,
                                std::mem::size_of::<libc::sockaddr_ll>() as u32,
                            )
                        };
                        p.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // SAFETY: the socket opened above, closed once.
            unsafe { libc::close(fd) };
        });
        ready.wait();
        LossySwitch {
            stop,
            passed,
            dropped,
            thread: Some(thread),
        }
    }

    /// Stops the switch: what passed and what was dropped.
    pub fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        (
            self.passed.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

impl Drop for LossySwitch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Moves the calling thread into network namespace `ns`.
pub fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("the namespace exists");
    // SAFETY: a valid namespace descriptor; only this thread changes namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {ns}");
}

/// Fills in the UDP checksum of an unfragmented IPv4 datagram in Ethernet frame `f`
/// (a veth's sender leaves it to the card: on a real link it would be there).
fn udp_checksum(f: &mut [u8]) {
    if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14] >> 4 != 4 || f[23] != 17 {
        return;
    }
    let ihl = (f[14] & 0x0f) as usize * 4;
    let frag = u16::from_be_bytes([f[20], f[21]]) & 0x3fff;
    let total = u16::from_be_bytes([f[16], f[17]]) as usize;
    if frag != 0 || ihl < 20 || 14 + total > f.len() || total < ihl + 8 {
        return;
    }
    let (ip, udp) = f[14..14 + total].split_at_mut(ihl);
    let len = udp.len();
    udp[6] = 0;
    udp[7] = 0;
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&ip[12..20]);
    add(&[0, 17]);
    add(&(len as u16).to_be_bytes());
    add(udp);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    let c = if c == 0 { 0xffff } else { c };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
}
