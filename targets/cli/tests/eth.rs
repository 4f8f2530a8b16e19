//! The `eth` fabric between network namespaces that the tests make and remove: ranks
//! joined by veth pairs to a bridge (or to a relay that loses frames), jobs of two and
//! four ranks, a killed rank, another job and a forger on the same bridge, start-up
//! errors. Root only (CI runs as root); elsewhere each test says so and passes.

mod forge;
mod netns;

use netns::{enter, ip, root, serial, text};

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");
const SECRET: &str = "00112233445566778899aabbccddeeff";

/// Rank namespaces, each with an `eth0` whose other end (`pN`) is in a hub namespace,
/// on a bridge `br0` or left for a relay. Removed when dropped.
struct Lan {
    tag: String,
    n: usize,
}

impl Lan {
    fn new(n: usize, bridged: bool) -> Lan {
        Lan::with_taps(n, bridged, &[])
    }

    /// As [`Lan::new`], but the ranks in `taps` get a tap device `pN` on the bridge
    /// instead, for a QEMU node.
    fn with_taps(n: usize, bridged: bool, taps: &[usize]) -> Lan {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "vly{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let lan = Lan { tag, n };
        let hub = lan.hub();
        ip(&["netns", "add", &hub]);
        if bridged {
            ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
            ip(&["-n", &hub, "link", "set", "br0", "up"]);
        }
        for r in 0..n {
            let (ns, port, mac) = (lan.ns(r), format!("p{r}"), lan.mac(r));
            if taps.contains(&r) {
                ip(&["-n", &hub, "tuntap", "add", "dev", &port, "mode", "tap"]);
                ip(&["-n", &hub, "link", "set", &port, "master", "br0"]);
                ip(&["-n", &hub, "link", "set", &port, "up"]);
                continue;
            }
            ip(&["netns", "add", &ns]);
            ip(&[
                "link", "add", &port, "netns", &hub, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "address", &mac]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            if bridged {
                ip(&["-n", &hub, "link", "set", &port, "master", "br0"]);
            }
            ip(&["-n", &hub, "link", "set", &port, "up"]);
        }
        lan
    }

    /// Sets every link of the LAN (bridge, ports, ranks' interfaces) to `mtu`.
    fn set_mtu(&self, mtu: u32) {
        let (hub, m) = (self.hub(), mtu.to_string());
        ip(&["-n", &hub, "link", "set", "br0", "mtu", &m]);
        for r in 0..self.n {
            ip(&["-n", &hub, "link", "set", &format!("p{r}"), "mtu", &m]);
            ip(&["-n", &self.ns(r), "link", "set", "eth0", "mtu", &m]);
        }
    }

    fn hub(&self) -> String {
        format!("{}h", self.tag)
    }

    fn ns(&self, r: usize) -> String {
        format!("{}r{r}", self.tag)
    }

    fn mac(&self, r: usize) -> String {
        format!("02:76:6c:79:00:{r:02x}")
    }

    fn macs(&self) -> String {
        (0..self.n)
            .map(|r| self.mac(r))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn mac_bytes(&self, r: usize) -> [u8; 6] {
        [2, 0x76, 0x6c, 0x79, 0, r as u8]
    }

    /// Runs `program` as a job of `n` ranks in namespaces `first..first + n`.
    fn job(
        &self,
        first: usize,
        n: usize,
        job: u64,
        program: &[&str],
        run_args: &[&str],
        env: &[(&str, &str)],
    ) -> (Output, Duration) {
        run_job(&self.tag, first, n, job, program, run_args, env, "")
    }
}

/// [`Lan::job`] on the LAN named `tag` (from another thread); each rank's shell runs
/// `prefix` first (with `VOLLEY_RANK` set).
#[allow(clippy::too_many_arguments)]
fn run_job(
    tag: &str,
    first: usize,
    n: usize,
    job: u64,
    program: &[&str],
    run_args: &[&str],
    env: &[(&str, &str)],
    prefix: &str,
) -> (Output, Duration) {
    let script =
        format!("{prefix}exec ip netns exec {tag}r$((VOLLEY_RANK + {first})) \"$0\" worker \"$@\"");
    let n = n.to_string();
    let job = format!("{job:#x}");
    let mut args = vec![
        "run",
        "-n",
        &n,
        "--fabric",
        "eth",
        "--timeout",
        "150",
        "--job",
        &job,
    ];
    args.extend_from_slice(run_args);
    args.extend(["--", "sh", "-c", &script, VOLLEY]);
    args.extend_from_slice(program);
    let t = Instant::now();
    let out = Command::new(VOLLEY)
        .args(&args)
        .env("VOLLEY_ETH_IF", "eth0")
        .envs(env.iter().copied())
        .output()
        .expect("volley runs");
    (out, t.elapsed())
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Deleting a namespace deletes the interfaces in it, and their veth peers.
        for r in 0..self.n {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(r)])
                .output();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.hub()])
            .output();
    }
}

fn job_id(salt: u64) -> u64 {
    (std::process::id() as u64) << 20 ^ salt ^ 0xE7E7_0000_0000
}

/// A packet socket on interface `name` of the calling thread's namespace, for every
/// Ethernet type, reads timing out after 10 ms.
fn raw_socket(name: &str) -> (i32, i32) {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: plain system calls on values that outlive them.
    unsafe {
        let index = libc::if_nametoindex(c.as_ptr()) as i32;
        assert!(index > 0, "{name} exists");
        let fd = libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            (libc::ETH_P_ALL as u16).to_be() as i32,
        );
        assert!(fd >= 0, "packet socket");
        let mut sa: libc::sockaddr_ll = std::mem::zeroed();
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sa.sll_ifindex = index;
        let r = libc::bind(
            fd,
            &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        assert_eq!(r, 0, "bind to {name}");
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 10_000,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as u32,
        );
        (fd, index)
    }
}

/// The next frame that arrived on `fd` (not one sent from it); `None` on timeout.
fn recv_frame(fd: i32, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a valid socket, a buffer and a sockaddr_ll that outlive the call.
    unsafe {
        let mut sa: libc::sockaddr_ll = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        let n = libc::recvfrom(
            fd,
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
            &mut sa as *mut libc::sockaddr_ll as *mut libc::sockaddr,
            &mut len,
        );
        (n > 0 && sa.sll_pkttype != libc::PACKET_OUTGOING).then_some(n as usize)
    }
}

fn send_frame(fd: i32, f: &[u8]) -> bool {
    // SAFETY: a valid bound socket and a buffer of the given length.
    unsafe { libc::send(fd, f.as_ptr() as *const libc::c_void, f.len(), 0) == f.len() as isize }
}

/// A relay in the hub between ports `p0` and `p1` that drops 10%, duplicates 5% and
/// reorders 5% of the frames each way, from a seeded generator.
struct LossyRelay {
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    duplicated: Arc<AtomicU64>,
    reordered: Arc<AtomicU64>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl LossyRelay {
    fn start(hub: &str, seed: u64) -> LossyRelay {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = [
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        ];
        let threads = (0..2)
            .map(|from| {
                let (hub, stop, c) = (hub.to_owned(), stop.clone(), counters.clone());
                thread::spawn(move || {
                    enter(&hub);
                    let (rx, _) = raw_socket(&format!("p{from}"));
                    let (tx, _) = raw_socket(&format!("p{}", 1 - from));
                    let mut state = seed ^ (from as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut rand = move || {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state % 100
                    };
                    let mut buf = vec![0u8; 65_536];
                    let mut held: Option<Vec<u8>> = None;
                    let end = Instant::now() + Duration::from_secs(300);
                    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                        let Some(n) = recv_frame(rx, &mut buf) else {
                            if let Some(h) = held.take() {
                                send_frame(tx, &h);
                            }
                            continue;
                        };
                        let f = &buf[..n];
                        match rand() {
                            0..=9 => {
                                c[0].fetch_add(1, Ordering::Relaxed);
                            }
                            10..=14 => {
                                c[1].fetch_add(1, Ordering::Relaxed);
                                send_frame(tx, f);
                                send_frame(tx, f);
                            }
                            15..=19 if held.is_none() => {
                                c[2].fetch_add(1, Ordering::Relaxed);
                                held = Some(f.to_vec());
                            }
                            _ => {
                                send_frame(tx, f);
                                if let Some(h) = held.take() {
                                    send_frame(tx, &h);
                                }
                            }
                        }
                    }
                    // SAFETY: sockets opened above, closed once.
                    unsafe {
                        libc::close(rx);
                        libc::close(tx);
                    }
                })
            })
            .collect();
        let [dropped, duplicated, reordered] = counters;
        LossyRelay {
            stop,
            dropped,
            duplicated,
            reordered,
            threads,
        }
    }

    fn finish(self) -> (u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        (
            self.dropped.load(Ordering::Relaxed),
            self.duplicated.load(Ordering::Relaxed),
            self.reordered.load(Ordering::Relaxed),
        )
    }
}

#[test]
fn two_and_four_ranks_on_a_bridge_pingpong_barrier_broadcast() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(4, true);
    for (n, salt) in [(2, 1), (4, 2)] {
        let (out, took) = lan.job(0, n, job_id(salt), &["suite"], &[], &[]);
        let t = text(&out);
        assert!(out.status.success(), "{n} ranks, after {took:?}:\n{t}");
        assert!(
            t.contains(&format!(
                "suite ok: {n} ranks on eth, ping-pong up to 16 MiB, 20 barriers, broadcast"
            )),
            "{t}"
        );
    }
}

/// Jumbo frames: at the largest MTU a veth carries, ring slots are larger than the
/// usual ring block (one frame a block); contents still checked end to end.
#[test]
fn sixty_four_kib_frames_carry_the_suite() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(2, true);
    lan.set_mtu(65_535);
    let (out, took) = lan.job(0, 2, job_id(8), &["suite"], &[], &[]);
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(
        t.contains("suite ok: 2 ranks on eth, ping-pong up to 16 MiB"),
        "{t}"
    );
}

#[test]
fn a_killed_rank_becomes_sendfailure_at_every_survivor() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(3, true);
    let (out, took) = lan.job(0, 3, job_id(3), &["victim"], &["--peer-timeout", "2"], &[]);
    let t = text(&out);
    assert!(!out.status.success(), "the job must fail:\n{t}");
    assert!(took < Duration::from_secs(60), "took {took:?}:\n{t}");
    assert!(t.contains("rank 2 failed (signal 9)"), "{t}");
    for r in 0..2 {
        assert!(
            t.contains(&format!("rank {r}: SENDFAILURE sending to rank 2")),
            "rank {r}:\n{t}"
        );
    }
}

/// A master and two workers on a bridge, each worker computing for 3 s without
/// calling in under a 1 s peer timeout: the workers' beacon frames keep the master
/// waiting for their answers instead of declaring them dead.
#[test]
fn workers_that_compute_past_the_peer_timeout_are_waited_for() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(3, true);
    let (out, took) = lan.job(
        0,
        3,
        job_id(0xC2),
        &["compute"],
        &["--peer-timeout", "1"],
        &[("VOLLEY_COMPUTE", "3")],
    );
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    for r in 0..3 {
        assert!(t.contains(&format!("compute ok: rank {r} of 3")), "{t}");
    }
    for r in 1..3 {
        let line = t
            .lines()
            .find(|l| l.contains(&format!("compute ok: rank {r} of 3")))
            .unwrap_or_default();
        assert!(
            !line.contains("beacons 0,"),
            "rank {r} sent no beacon:\n{t}"
        );
    }
}

/// Two jobs share one bridge (each sees the other's hellos) while a fifth station
/// forges frames from its own MAC and, now and then, "from rank 0" of the first
/// (spoofed MAC): both jobs finish, every message exactly once; the forgeries are
/// dropped by station or by authentication.
#[test]
fn another_job_and_a_forger_on_the_bridge_are_ignored() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(5, true);
    let job_a = job_id(4);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let forger = {
        let (ns, stop, sent) = (lan.ns(4), stop.clone(), sent.clone());
        let (rank0, rank1, own) = (lan.mac_bytes(0), lan.mac_bytes(1), lan.mac_bytes(4));
        thread::spawn(move || {
            enter(&ns);
            let (fd, _) = raw_socket("eth0");
            let frames = forge::forged_frames(job_a);
            let end = Instant::now() + Duration::from_secs(120);
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                for _ in 0..20 {
                    let payload = &frames[k % frames.len()];
                    // A few with rank 0's address as their source: each one also
                    // teaches the bridge that rank 0 lives here, so frames to rank 0 are
                    // lost until rank 0 sends again (which the engine's retransmission
                    // covers); a flood of them would be a denial of service that no
                    // protocol above a plain bridge survives.
                    let src = if k % 400 < 3 { rank0 } else { own };
                    let mut f = Vec::with_capacity(14 + payload.len());
                    f.extend_from_slice(&rank1);
                    f.extend_from_slice(&src);
                    f.extend_from_slice(&0x88B5u16.to_be_bytes());
                    f.extend_from_slice(payload);
                    if send_frame(fd, &f) {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    k += 1;
                }
                thread::sleep(Duration::from_millis(2));
            }
            // SAFETY: the socket opened above, closed once.
            unsafe { libc::close(fd) };
        })
    };
    let other = {
        let tag = lan.tag.clone();
        thread::spawn(move || run_job(&tag, 2, 2, job_id(5), &["suite"], &[], &[], ""))
    };
    let (out, took) = lan.job(
        0,
        2,
        job_a,
        &["flowctl-exact"],
        &[],
        &[("VOLLEY_MESSAGES", "2000")],
    );
    let (out_b, took_b) = other.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    forger.join().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "job A after {took:?}:\n{t}");
    assert!(
        t.contains("flowctl-exact ok: 2000 messages exactly once, in order"),
        "{t}"
    );
    let tb = text(&out_b);
    assert!(out_b.status.success(), "job B after {took_b:?}:\n{tb}");
    assert!(tb.contains("suite ok: 2 ranks on eth"), "{tb}");
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent > 1000, "forgeries sent: {sent}");
    let number = |after: &str| -> u64 {
        let i = t.find(after).expect("stats in the output");
        t[..i]
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert!(number(" unauthenticated frames") > 0, "{t}");
    assert!(number(" datagrams from strangers") > 0, "{t}");
}

/// A relay between the two ranks drops, duplicates and reorders frames (the kernel
/// here has no `netem`; where it has, the same loss could come from `tc`): 1000
/// messages arrive exactly once, in order.
#[test]
fn loss_duplication_and_reordering_are_survived_exactly_once() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(2, false);
    let seed = 0xE7_4E55 ^ std::process::id() as u64;
    let relay = LossyRelay::start(&lan.hub(), seed);
    let (out, took) = lan.job(
        0,
        2,
        job_id(6),
        &["flowctl-exact"],
        &[],
        &[("VOLLEY_MESSAGES", "1000")],
    );
    let (d, u, r) = relay.finish();
    let t = text(&out);
    assert!(out.status.success(), "seed {seed:#x}, after {took:?}:\n{t}");
    assert!(
        t.contains("flowctl-exact ok: 1000 messages exactly once, in order"),
        "seed {seed:#x}:\n{t}"
    );
    assert!(
        d > 50 && u > 20 && r > 20,
        "seed {seed:#x}: the relay must have misbehaved: dropped {d}, duplicated {u}, reordered {r}"
    );
}

/// Runs one rank of a job of `size` by hand in namespace `ns` (no launcher), with
/// `env` added and the variables in `remove` taken away.
fn one_rank(
    ns: &str,
    rank: u16,
    size: u16,
    env: &[(&str, &str)],
    remove: &[&str],
) -> std::process::Child {
    let mut c = Command::new("ip");
    c.args([
        "netns", "exec", ns, "timeout", "60", VOLLEY, "worker", "suite",
    ])
    .env("VOLLEY_RANK", rank.to_string())
    .env("VOLLEY_SIZE", size.to_string())
    .env("VOLLEY_JOB", "0x5eed")
    .env("VOLLEY_SECRET", SECRET)
    .env("VOLLEY_FABRIC", "eth")
    .env("VOLLEY_ETH_IF", "eth0")
    .envs(env.iter().copied())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for r in remove {
        c.env_remove(r);
    }
    c.spawn().expect("ip netns exec runs")
}

fn one_line_error(o: Output, want: &str) {
    let t = text(&o);
    assert!(!o.status.success(), "{want}: {t}");
    assert!(t.contains(want), "want {want:?}, got:\n{t}");
    assert_eq!(t.trim().lines().count(), 1, "{t}");
}

/// Start-up errors are one line naming the cause: a rank that never says hello, bad
/// or missing interfaces, bad MAC lists, and no CAP_NET_RAW.
#[test]
fn start_up_errors_are_one_line() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(3, true);
    // Rank 2 never starts.
    let kids: Vec<_> = (0..2)
        .map(|r| {
            one_rank(
                &lan.ns(r as usize),
                r,
                3,
                &[("VOLLEY_STARTUP_TIMEOUT", "2")],
                &[],
            )
        })
        .collect();
    for k in kids {
        one_line_error(
            k.wait_with_output().unwrap(),
            "eth: no hello from rank 2 on eth0 within 2 s",
        );
    }
    // Rank 1's interface down.
    ip(&["-n", &lan.ns(1), "link", "set", "eth0", "down"]);
    one_line_error(
        one_rank(&lan.ns(1), 1, 3, &[], &[])
            .wait_with_output()
            .unwrap(),
        "VOLLEY_ETH_IF=eth0 is down",
    );
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);
    let cases: [Case; 9] = [
        (
            &[],
            &["VOLLEY_ETH_IF"],
            "the eth fabric needs VOLLEY_ETH_IF",
        ),
        (
            &[("VOLLEY_ETH_IF", "nosuch0")],
            &[],
            "VOLLEY_ETH_IF=nosuch0: no such interface",
        ),
        (
            &[("VOLLEY_ETH_IF", "lo")],
            &[],
            "VOLLEY_ETH_IF=lo: not an Ethernet interface",
        ),
        (
            &[("VOLLEY_ETH_IF", "a,b")],
            &[],
            "VOLLEY_ETH_IF has 2 interfaces but no entry for rank 2",
        ),
        (
            &[("VOLLEY_ETH_MACS", "02:00:00:00:00:01,zz")],
            &[],
            "VOLLEY_ETH_MACS has 2 MAC addresses for 3 ranks",
        ),
        (
            &[("VOLLEY_ETH_MACS", "02:00:00:00:00:01,02:00:00:00:00:02,zz")],
            &[],
            "VOLLEY_ETH_MACS: \"zz\" is not a MAC address",
        ),
        (
            &[("VOLLEY_ETH_MTU", "100")],
            &[],
            "VOLLEY_ETH_MTU=\"100\": expected an integer from 256 to 1500",
        ),
        (&[], &["VOLLEY_SECRET"], "the eth fabric needs a job secret"),
        (
            &[("VOLLEY_ETH_XDP", "fast")],
            &[],
            "VOLLEY_ETH_XDP=\"fast\": expected off, on or auto",
        ),
    ];
    for (env, remove, want) in cases {
        let c = one_rank(&lan.ns(2), 2, 3, env, remove);
        one_line_error(c.wait_with_output().unwrap(), want);
    }
    // Another user, without CAP_NET_RAW.
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .args([VOLLEY, "worker", "suite"])
        .env("VOLLEY_RANK", "0")
        .env("VOLLEY_SIZE", "2")
        .env("VOLLEY_JOB", "1")
        .env("VOLLEY_SECRET", SECRET)
        .env("VOLLEY_FABRIC", "eth")
        .env("VOLLEY_ETH_IF", "eth0")
        .output()
        .expect("setpriv (util-linux) runs");
    one_line_error(o, "needs CAP_NET_RAW to open a packet socket: run as root, or grant it once with `sudo setcap cap_net_raw+ep");
    // AF_XDP asked for by a process that may open packet sockets but not load BPF
    // programs (MAC addresses given, so no peer needs to be there).
    let o = Command::new("ip")
        .args(["netns", "exec", &lan.ns(2), "setpriv"])
        .args(["--bounding-set=-sys_admin,-bpf,-net_admin,-perfmon", "--"])
        .args([VOLLEY, "worker", "suite"])
        .env("VOLLEY_RANK", "2")
        .env("VOLLEY_SIZE", "3")
        .env("VOLLEY_JOB", "1")
        .env("VOLLEY_SECRET", SECRET)
        .env("VOLLEY_FABRIC", "eth")
        .env("VOLLEY_ETH_IF", "eth0")
        .env("VOLLEY_ETH_MACS", lan.macs())
        .env("VOLLEY_ETH_XDP", "on")
        .output()
        .expect("setpriv (util-linux) runs");
    one_line_error(o, "eth: AF_XDP needs CAP_NET_ADMIN and CAP_BPF");
}

/// The numbers after "rank {r} path: " in `t`: frames in and out by AF_XDP, then by
/// the packet ring; `None` where the rank ran without AF_XDP.
fn xdp_counts(t: &str, r: usize) -> Option<[u64; 4]> {
    let line = t
        .lines()
        .find(|l| l.contains(&format!("rank {r} path: ")))
        .unwrap_or_else(|| panic!("no path line for rank {r}:\n{t}"));
    if !line.contains("AF_XDP ") || line.contains("no AF_XDP") {
        return None;
    }
    let n: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // The interface's name carries a digit (eth0): the counts are the last four.
    Some([
        n[n.len() - 4],
        n[n.len() - 3],
        n[n.len() - 2],
        n[n.len() - 1],
    ])
}

/// Whether interface `eth0` in namespace `ns` has an XDP program attached.
fn has_xdp(ns: &str) -> bool {
    let o = Command::new("ip")
        .args(["-n", ns, "link", "show", "eth0"])
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
}

/// `VOLLEY_ETH_XDP`: this job's frames through AF_XDP sockets, beside the packet
/// rings. Both ranks on AF_XDP; one rank on each path in one job; a second job on the
/// same interfaces, whose frames the first job's XDP program must pass on (and which
/// falls back to the packet rings under `auto`); frames longer than a UMEM chunk on
/// a 64 KiB MTU.
#[test]
fn af_xdp_carries_jobs_beside_the_packet_rings() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(2, true);
    let xdp = [("VOLLEY_ETH_XDP", "on")];
    let (out, took) = lan.job(0, 2, job_id(9), &["suite"], &[], &xdp);
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(t.contains("suite ok: 2 ranks on eth"), "{t}");
    for r in 0..2 {
        let [xin, xout, _, rout] = xdp_counts(&t, r).unwrap_or_else(|| panic!("rank {r}:\n{t}"));
        // A few frames may reach the packet ring before the program is attached.
        assert!(xin > 1000 && xout > 1000 && rout == 0, "rank {r}:\n{t}");
    }
    assert!(!has_xdp(&lan.ns(0)), "the program goes with the job");

    // Rank 0 on AF_XDP, rank 1 on the packet rings: the same frames.
    let tag = lan.tag.clone();
    let prefix = "[ \"$VOLLEY_RANK\" = 0 ] && export VOLLEY_ETH_XDP=on; ";
    let (out, took) = run_job(&tag, 0, 2, job_id(10), &["suite"], &[], &[], prefix);
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(xdp_counts(&t, 0).is_some_and(|c| c[0] > 1000), "{t}");
    assert!(xdp_counts(&t, 1).is_none(), "{t}");

    // Another job's AF_XDP sockets and programs hold both interfaces (job key
    // 01020304): this job's frames must pass them by to its packet rings, and `auto`
    // finds the interfaces taken.
    let (held, done) = (Arc::new(Barrier::new(3)), Arc::new(Barrier::new(3)));
    let holders: Vec<_> = (0..2)
        .map(|r| {
            let (ns, held, done) = (lan.ns(r), held.clone(), done.clone());
            thread::spawn(move || {
                enter(&ns);
                // SAFETY: a valid C string.
                let index = unsafe { libc::if_nametoindex(c"eth0".as_ptr()) } as i32;
                // Both barriers whatever happens, so that the test cannot hang on them.
                let x = volley_hosted::xdp::Xsk::open(index, [1, 2, 3, 4]);
                held.wait();
                done.wait();
                let mut x = x.expect("AF_XDP");
                // Nothing of the job below came this way.
                assert!(x.peek().is_none(), "a frame of another job was taken");
                x.stats().rx
            })
        })
        .collect();
    held.wait();
    let (out, took) = lan.job(
        0,
        2,
        job_id(11),
        &["suite"],
        &[],
        &[("VOLLEY_ETH_XDP", "auto")],
    );
    done.wait();
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(t.contains("suite ok: 2 ranks on eth"), "{t}");
    for h in holders {
        assert_eq!(h.join().unwrap(), 0, "frames of another job taken");
    }
    for r in 0..2 {
        assert!(
            t.contains(&format!(
                "rank {r} path: packet rings on eth0 (no AF_XDP: eth: AF_XDP: the interface already has an XDP program"
            )),
            "rank {r}:\n{t}"
        );
        // Said once on stderr, for programs that print no path.
        assert!(
            t.contains(&format!(
                "[{r}] volley: VOLLEY_ETH_XDP=auto: packet rings only (eth: AF_XDP: the interface already has"
            )),
            "rank {r}:\n{t}"
        );
    }

    // Frames longer than a chunk (64 KiB MTU) take the packet ring, both ways.
    lan.set_mtu(65_535);
    let (out, took) = lan.job(0, 2, job_id(13), &["suite"], &[], &xdp);
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    for r in 0..2 {
        let c = xdp_counts(&t, r).unwrap_or_else(|| panic!("rank {r}:\n{t}"));
        assert!(c.iter().all(|&n| n > 10), "rank {r}: {c:?}\n{t}");
    }
}

/// A layer-2 mixed cluster: ranks 0 and 2 are Linux processes on veth pairs, ranks 1
/// and 3 unikernel nodes whose e1000s are QEMU tap devices, all on one bridge, one
/// job (one secret, one job id): ping-pong between a process and a unikernel node,
/// barriers across both kinds, and a broadcast from a process to everyone.
#[test]
fn processes_and_unikernel_nodes_share_a_job_on_one_lan() {
    if !root() {
        return;
    }
    let _g = serial();
    // Built before the clock starts.
    volley_qemu::image();
    let lan = Lan::with_taps(4, true, &[1, 3]);
    let job = job_id(7);
    let key = volley_qemu::job_key_file().display().to_string();
    let macs = lan.macs();
    let nodes: Vec<volley_qemu::Boot> = [1usize, 3]
        .iter()
        .map(|&r| {
            let mut b =
                volley_qemu::Boot::new(&format!("app=mixed rank={r} macs={macs} job={job:#x}"));
            b.timeout = Duration::from_secs(240);
            b.prefix = vec!["ip".into(), "netns".into(), "exec".into(), lan.hub()];
            b.extra = vec![
                "-netdev".into(),
                format!("tap,id=n0,ifname=p{r},script=no,downscript=no"),
                "-device".into(),
                format!("e1000,netdev=n0,mac={},romfile=", lan.mac(r)),
            ];
            b
        })
        .collect();
    let qemu = thread::spawn(move || volley_qemu::run_all(&nodes));
    let ranks: Vec<_> = [0usize, 2]
        .iter()
        .map(|&r| {
            Command::new("ip")
                .args(["netns", "exec", &lan.ns(r), "timeout", "240", VOLLEY])
                .args(["worker", "mixed"])
                .env("VOLLEY_RANK", r.to_string())
                .env("VOLLEY_SIZE", "4")
                .env("VOLLEY_JOB", format!("{job:#x}"))
                .env_remove("VOLLEY_SECRET")
                .env("VOLLEY_KEY_FILE", &key)
                .env("VOLLEY_FABRIC", "eth")
                .env("VOLLEY_ETH_IF", "eth0")
                .env("VOLLEY_ETH_MACS", &macs)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("ip netns exec runs")
        })
        .collect();
    let outs: Vec<Output> = ranks
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let nodes = qemu.join().unwrap();
    let consoles = nodes
        .iter()
        .map(|n| n.console.as_str())
        .collect::<Vec<_>>()
        .join("\n----\n");
    for (o, r) in outs.iter().zip([0, 2]) {
        let t = text(o);
        assert!(
            o.status.success(),
            "rank {r}:\n{t}\nunikernel nodes:\n{consoles}"
        );
        assert!(
            t.contains(&format!("mixed ok: rank {r} of 4 on eth")),
            "rank {r}:\n{t}"
        );
    }
    for (n, r) in nodes.iter().zip([1, 3]) {
        assert_eq!(
            n.verdict,
            volley_qemu::Verdict::Success,
            "node {r}:\n{}",
            n.console
        );
    }
    // Rank 1 (a unikernel node) answered rank 0 (a process) at every size; rank 3 got
    // rank 0's broadcast.
    assert!(
        nodes[1].console.contains("node 3 got the broadcast"),
        "{consoles}"
    );
}

/// Frames of an earlier run of a job started by hand (the same secret and job id)
/// recorded as rank 0 sent them, then sent again from rank 0's namespace while rank
/// 1 starts alone: it takes the replayed HELLOs as valid but stale (they echo the
/// earlier run's nonce), never gets through its start-up, so never reaches a
/// barrier or takes a message, and names the rank that gave no fresh answer.
#[test]
fn frames_of_an_earlier_run_are_refused_by_a_later_one_on_eth() {
    if !root() {
        return;
    }
    let _g = serial();
    let lan = Lan::new(2, true);
    let macs = lan.macs();
    let rank = |r: usize, timeout: &str| {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &lan.ns(r),
                "timeout",
                "60",
                VOLLEY,
                "worker",
            ])
            .arg("flowctl-exact")
            .env("VOLLEY_RANK", r.to_string())
            .env("VOLLEY_SIZE", "2")
            .env("VOLLEY_JOB", "0x5e5")
            .env("VOLLEY_SECRET", SECRET)
            .env("VOLLEY_FABRIC", "eth")
            .env("VOLLEY_ETH_IF", "eth0")
            .env("VOLLEY_ETH_MACS", &macs)
            .env("VOLLEY_MESSAGES", "20")
            .env("VOLLEY_STARTUP_TIMEOUT", timeout)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec runs")
    };
    // The earlier run, rank 0's frames recorded as they enter the bridge.
    let stop = Arc::new(AtomicBool::new(false));
    let (hub, stop2) = (lan.hub(), stop.clone());
    let ready = Arc::new(Barrier::new(2));
    let ready2 = ready.clone();
    let recorder = thread::spawn(move || {
        enter(&hub);
        let (fd, _) = raw_socket("p0");
        ready2.wait();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65_536];
        let end = Instant::now() + Duration::from_secs(60);
        while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
            if let Some(n) = recv_frame(fd, &mut buf) {
                got.push(buf[..n].to_vec());
            }
        }
        // SAFETY: the socket opened above, closed once.
        unsafe { libc::close(fd) };
        got
    });
    ready.wait();
    let (a, b) = (rank(0, "30"), rank(1, "30"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    stop.store(true, Ordering::Relaxed);
    let recorded = recorder.join().unwrap();
    assert!(
        a.status.success() && b.status.success(),
        "{}{}",
        text(&a),
        text(&b)
    );
    assert!(
        text(&b).contains("flowctl-exact ok: 20 messages"),
        "{}",
        text(&b)
    );
    assert!(recorded.len() > 20, "{} frames recorded", recorded.len());
    // The later run: rank 1 alone, the recording replayed from rank 0's side.
    let lone = rank(1, "3");
    let stop = Arc::new(AtomicBool::new(false));
    let (ns0, stop2) = (lan.ns(0), stop.clone());
    let feeder = thread::spawn(move || {
        enter(&ns0);
        let (fd, _) = raw_socket("eth0");
        let mut sent = 0u64;
        let end = Instant::now() + Duration::from_secs(30);
        while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
            for f in &recorded {
                sent += u64::from(send_frame(fd, f));
            }
            thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: the socket opened above, closed once.
        unsafe { libc::close(fd) };
        sent
    });
    let out = lone.wait_with_output().unwrap();
    stop.store(true, Ordering::Relaxed);
    let sent = feeder.join().unwrap();
    let t = text(&out);
    assert!(sent > 100, "{sent} replayed");
    assert!(!out.status.success(), "{t}");
    assert!(!t.contains("flowctl-exact ok"), "{t}");
    assert!(
        t.contains("start-up: rank 0 gave no answer with this run's nonce"),
        "{t}"
    );
    let taken: u64 = t
        .split("HELLOs sent, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(taken > 0, "the replayed HELLOs were valid: {t}");
}
