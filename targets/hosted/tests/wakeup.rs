//! The wake-up descriptor ([`volley_hosted::wakeup`]): a rank that sleeps on it
//! between polls misses no message, is woken by a peer's death, spends (almost) no
//! processor while it waits, and leaks no descriptor into a program it executes.
//!
//! A harness of its own: the death test runs its peer as a second process, this
//! same binary started with `VOLLEY_WAKEUP_PEER` set.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use volley_core::gamma::{Upcall, GO_BACK};
use volley_hosted::bootstrap::{Boot, Source};
use volley_hosted::node::{self, HostGamma};
use volley_hosted::secret::Secret;
use volley_hosted::wakeup::EventLoop;
use volley_hosted::Fabric;

type G = HostGamma<u64>;

/// How long a sleeper waits before calling its wake-up lost.
const LOST_AFTER: Duration = Duration::from_secs(10);

fn on_msg(u: &mut Upcall<'_, '_, u64>) {
    *u.state() += 1;
}

fn boot(job: u64, rank: u16) -> Boot {
    Boot {
        rank,
        size: 2,
        job,
        source: Source::Hosts,
        hosts: Vec::new(),
        secret: Some(Secret([5; 16])),
        said: None,
    }
}

fn job(k: u64) -> u64 {
    0x7_0000_0000 + u64::from(std::process::id()) * 16 + k
}

/// Port 1 of `g` bound to rank `peer`'s, counted by its handler.
fn bind(g: &mut G, peer: u16) {
    let pid = g.my_par_pid();
    g.set_active_port(
        1,
        peer,
        pid,
        1,
        Some(on_msg),
        None,
        1,
        GO_BACK,
        Some(Vec::leak(vec![0u8; 4096])),
    )
    .unwrap();
}

/// Both ranks of a job on `fabric`, each opened in a thread of its own (a rank may
/// wait for the other while it opens), port 1 bound.
fn pair(fabric: Fabric, k: u64) -> (G, G) {
    // On `udp` each job has its own base port: a few are tried until two are free.
    for n in 0..50 {
        let j = job(k) + n * 131;
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| node::gamma(&boot(j, 0), fabric, 0u64));
            let b = s.spawn(|| node::gamma(&boot(j, 1), fabric, 0u64));
            (a.join().unwrap(), b.join().unwrap())
        });
        match (a, b) {
            (Ok(a), Ok(b)) => return bound(a, b),
            (Err(e), _) | (_, Err(e)) if fabric == Fabric::Shm => panic!("{e}"),
            _ => {}
        }
    }
    panic!("no two free udp ports");
}

fn bound(mut a: G, mut b: G) -> (G, G) {
    bind(&mut a, 1);
    bind(&mut b, 0);
    (a, b)
}

/// Polls `g` until its handler has counted `want` messages, sleeping on the
/// wake-up descriptor whenever arming says it may; panics if a sleep outlasts
/// [`LOST_AFTER`] (a wake-up lost). How many times it slept.
fn await_count(g: &mut G, want: u64) -> u64 {
    let mut slept = 0;
    let since = Instant::now();
    loop {
        g.test(1).unwrap();
        if *g.state() >= want {
            return slept;
        }
        assert!(
            since.elapsed() < LOST_AFTER,
            "message {want}: not there after {LOST_AFTER:?}"
        );
        if g.arm().unwrap() {
            slept += 1;
            let woke = g.wakeup().unwrap().wait(Some(LOST_AFTER)).unwrap();
            assert!(woke, "message {want}: a wake-up was lost");
        }
    }
}

/// Ping-pong where each side sleeps between messages: every reply races the
/// other side's arming.
fn ping_pong(fabric: Fabric, k: u64, rounds: u64) {
    let (mut a, mut b) = pair(fabric, k);
    let started = Instant::now();
    let (slept_a, slept_b) = std::thread::scope(|s| {
        let pa = s.spawn(move || {
            let mut slept = 0;
            for i in 1..=rounds {
                a.send_flowctl(1, &i.to_le_bytes()).unwrap();
                slept += await_count(&mut a, i);
            }
            slept
        });
        let pb = s.spawn(move || {
            let mut slept = 0;
            for i in 1..=rounds {
                slept += await_count(&mut b, i);
                b.send_flowctl(1, &i.to_le_bytes()).unwrap();
            }
            slept
        });
        (pa.join().unwrap(), pb.join().unwrap())
    });
    eprintln!(
        "{}: {rounds} round trips in {:?}, slept {slept_a} + {slept_b} times",
        fabric.name(),
        started.elapsed()
    );
    // The race was run: most waits slept rather than found the message at once.
    assert!(
        slept_a + slept_b > rounds / 2,
        "too few sleeps to test anything"
    );
}

fn no_wakeup_is_lost_on_shm() {
    ping_pong(Fabric::Shm, 1, 100_000);
}

fn no_wakeup_is_lost_on_udp() {
    ping_pong(Fabric::Udp, 2, 20_000);
}

/// The processor time this process has used (every thread).
fn cpu_time() -> Duration {
    // SAFETY: a zeroed rusage is valid; getrusage only writes it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a live rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

/// 100 messages 10 ms apart: the receiver sleeps in between, and the whole
/// process (sender, receiver, helpers) uses at most 20 % of a core.
fn a_sleeper_uses_little_processor(fabric: Fabric, k: u64) {
    let (mut a, mut b) = pair(fabric, k);
    let (t0, c0) = (Instant::now(), cpu_time());
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 1..=100u64 {
                let next = t0 + Duration::from_millis(10 * i);
                a.send_flowctl(1, &i.to_le_bytes()).unwrap();
                // Acks and timers served while it waits for the next send time.
                loop {
                    a.test(1).unwrap();
                    let now = Instant::now();
                    if now >= next {
                        break;
                    }
                    if a.arm().unwrap() {
                        a.wakeup().unwrap().wait(Some(next - now)).unwrap();
                    }
                }
            }
            // Until the receiver has everything (its acks answered).
            let end = Instant::now() + Duration::from_millis(50);
            while Instant::now() < end {
                a.test(1).unwrap();
                if a.arm().unwrap() {
                    a.wakeup()
                        .unwrap()
                        .wait(Some(Duration::from_millis(5)))
                        .unwrap();
                }
            }
        });
        s.spawn(move || {
            await_count(&mut b, 100);
        });
    });
    let (wall, cpu) = (t0.elapsed(), cpu_time() - c0);
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    eprintln!(
        "{}: {:?} of processor over {:?} ({:.1} %)",
        fabric.name(),
        cpu,
        wall,
        share * 100.0
    );
    assert!(
        share <= 0.20,
        "{}: {:.1} % of a core",
        fabric.name(),
        share * 100.0
    );
}

fn sleeping_on_shm_costs_little() {
    a_sleeper_uses_little_processor(Fabric::Shm, 3);
}

fn sleeping_on_udp_costs_little() {
    a_sleeper_uses_little_processor(Fabric::Udp, 4);
}

/// Descriptors of this process that a program it executes still holds: the
/// links in its `/proc/self/fd`, as `ls` there lists them.
fn inherited() -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("for f in /proc/self/fd/*; do readlink \"$f\"; done")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn no_descriptor_leaks_into_an_executed_program() {
    let (mut a, mut b) = pair(Fabric::Shm, 5);
    let (fa, fb) = (a.wakeup_fd().unwrap(), b.wakeup_fd().unwrap());
    assert!(fa >= 0 && fb >= 0 && fa != fb);
    assert!(a.arm().unwrap());
    let seen = inherited();
    for kind in ["eventpoll", "eventfd", "timerfd"] {
        assert!(
            !seen.contains(kind),
            "an executed program holds a {kind}:\n{seen}"
        );
    }
    // The descriptor is the one the process holds, and it works after the fork.
    b.send_flowctl(1, b"x").unwrap();
    assert!(a.wakeup().unwrap().wait(Some(LOST_AFTER)).unwrap());
    assert_eq!(a.wakeup().unwrap().as_raw_fd(), fa);
}

/// The peer of [`a_peers_death_wakes_the_sleeper`]: rank 1 of the job that
/// `VOLLEY_WAKEUP_PEER` names (its id and fabric), which takes nothing (so a
/// message to it stays unacked) and waits to be killed.
fn peer(job: u64, fabric: Fabric) {
    let mut g = node::gamma(&boot(job, 1), fabric, 0u64).unwrap();
    bind(&mut g, 0);
    println!("ready");
    std::thread::sleep(Duration::from_secs(120));
}

/// A rank asleep with a message unacked by a peer that then dies is woken, and
/// its poll then finds the peer failed.
fn a_peers_death_wakes_the_sleeper(fabric: Fabric, k: u64) {
    use std::io::BufRead;
    let j = job(k);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env("VOLLEY_WAKEUP_PEER", format!("{j} {}", fabric.name()))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut g = node::gamma(&boot(j, 0), fabric, 0u64).unwrap();
    bind(&mut g, 1);
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    g.send_flowctl(1, b"never acked").unwrap();
    // Asleep (armed, so nothing was due), then the peer dies.
    while !g.arm().unwrap() {
        g.test(1).unwrap();
    }
    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = killed + Duration::from_secs(60);
    let mut wakes = 0;
    loop {
        assert!(
            g.wakeup().unwrap().wait(Some(LOST_AFTER)).unwrap(),
            "asleep with a dead peer and nothing to wake it"
        );
        wakes += 1;
        let _ = g.test(1);
        if g.engine().peer_status(1).failed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the peer's death was not noticed"
        );
        // Work left by that poll is done before the next sleep.
        while !g.arm().unwrap() {
            let _ = g.test(1);
        }
        if g.engine().peer_status(1).failed {
            break;
        }
    }
    eprintln!(
        "{}: peer's death noticed after {:?}, {wakes} wakes",
        fabric.name(),
        killed.elapsed()
    );
}

fn a_peers_death_wakes_the_sleeper_on_shm() {
    a_peers_death_wakes_the_sleeper(Fabric::Shm, 6);
}

fn a_peers_death_wakes_the_sleeper_on_udp() {
    a_peers_death_wakes_the_sleeper(Fabric::Udp, 7);
}

fn main() {
    if let Some(p) = std::env::var_os("VOLLEY_WAKEUP_PEER") {
        let p = p.to_string_lossy();
        let (j, f) = p.split_once(' ').unwrap();
        let fabric = if f == "udp" { Fabric::Udp } else { Fabric::Shm };
        peer(j.parse().unwrap(), fabric);
        return;
    }
    let tests: [(&str, fn()); 7] = [
        ("no_wakeup_is_lost_on_shm", no_wakeup_is_lost_on_shm),
        ("no_wakeup_is_lost_on_udp", no_wakeup_is_lost_on_udp),
        ("sleeping_on_shm_costs_little", sleeping_on_shm_costs_little),
        ("sleeping_on_udp_costs_little", sleeping_on_udp_costs_little),
        (
            "no_descriptor_leaks_into_an_executed_program",
            no_descriptor_leaks_into_an_executed_program,
        ),
        (
            "a_peers_death_wakes_the_sleeper_on_shm",
            a_peers_death_wakes_the_sleeper_on_shm,
        ),
        (
            "a_peers_death_wakes_the_sleeper_on_udp",
            a_peers_death_wakes_the_sleeper_on_udp,
        ),
    ];
    // `cargo test -- NAME` runs the tests whose names contain NAME.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut failed = 0;
    for (name, t) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let started = Instant::now();
        let ok = std::panic::catch_unwind(t).is_ok();
        println!(
            "test {name} ... {} ({:.1} s)",
            if ok { "ok" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        failed += usize::from(!ok);
    }
    if failed > 0 {
        println!("{failed} wake-up test(s) failed");
        std::process::exit(1);
    }
}
