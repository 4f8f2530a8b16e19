//! Multi-process tests: real ranks started by `volley run` and by MPICH's
//! `mpiexec.mpich`, on both fabrics. Jobs run one at a time (the machine has 2 cores).

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

mod forge;
mod relay;
use forge::forged_frames;
use relay::{free_port, Faults, Relay};

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn job_dir(job: u64) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc_getuid() };
    PathBuf::from(format!("/dev/shm/volley-{uid}-{job:016x}"))
}

extern "C" {
    #[link_name = "getuid"]
    fn libc_getuid() -> u32;
}

/// This user's job directories in /dev/shm (their names are secret-derived under the
/// launcher, so tests look at what appeared rather than at a predicted name).
fn shm_dirs() -> std::collections::BTreeSet<String> {
    // SAFETY: getuid has no preconditions.
    let prefix = format!("volley-{}-", unsafe { libc_getuid() });
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

fn assert_nothing_left(before: &std::collections::BTreeSet<String>, what: &str) {
    let after = shm_dirs();
    let new: Vec<&String> = after.difference(before).collect();
    assert!(new.is_empty(), "{what}: left behind in /dev/shm: {new:?}");
}

fn job_id(salt: u64) -> u64 {
    (std::process::id() as u64) << 20 ^ salt ^ 0xA5A5_0000_0000
}

fn run(args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(VOLLEY)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("volley runs");
    (out, t.elapsed())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn launch(
    n: &str,
    fabric: &str,
    job: u64,
    program: &[&str],
    env: &[(&str, &str)],
) -> (Output, Duration) {
    let job = format!("{job:#x}");
    let mut args = vec![
        "run",
        "-n",
        n,
        "--fabric",
        fabric,
        "--timeout",
        "180",
        "--job",
        &job,
        "--",
        VOLLEY,
        "worker",
    ];
    args.extend_from_slice(program);
    run(&args, env)
}

/// The main job (`volley demo`, what `cargo run --release` runs) on its default
/// fabric and on `udp`: every check passes and the table has every row.
#[test]
fn the_main_job_checks_itself() {
    for fabric in [None, Some("udp")] {
        let _g = serial();
        // Its launcher gives up after 15 minutes; a test, sooner.
        let mut args = vec!["180", VOLLEY, "demo"];
        args.extend(fabric.iter().flat_map(|f| ["--fabric", *f]));
        let t0 = Instant::now();
        let out = Command::new("timeout")
            .args(&args)
            .env_remove("VOLLEY_FABRIC")
            .env_remove("VOLLEY_RANK")
            .output()
            .expect("volley runs");
        let t = text(&out);
        assert!(
            out.status.success(),
            "{args:?} after {:?}:\n{t}",
            t0.elapsed()
        );
        let name = fabric.unwrap_or("shm");
        assert!(t.contains(&format!("4 ranks on the {name} fabric")), "{t}");
        let rows: Vec<&str> = t
            .lines()
            .filter(|l| {
                l.contains("ping-pong") || l.contains("barrier,") || l.contains("broadcast")
            })
            .collect();
        assert_eq!(rows.len(), 6, "{t}");
        assert!(rows.iter().all(|r| r.contains(" ok ")), "{t}");
    }
}

fn suite_via_launcher(fabric: &str, salt: u64) {
    let _g = serial();
    let before = shm_dirs();
    let job = job_id(salt);
    let (out, took) = launch("4", fabric, job, &["suite"], &[]);
    let t = text(&out);
    assert!(
        out.status.success(),
        "{fabric} suite failed after {took:?}:\n{t}"
    );
    assert!(t.contains("suite ok: 4 ranks"), "{t}");
    assert_nothing_left(&before, fabric);
}

#[test]
fn launcher_shm_pingpong_barrier_broadcast() {
    suite_via_launcher("shm", 1);
}

#[test]
fn launcher_udp_pingpong_barrier_broadcast() {
    suite_via_launcher("udp", 2);
}

fn mpiexec() -> &'static str {
    let m = "mpiexec.mpich";
    assert!(
        Command::new(m)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "{m} is missing: install Debian's mpich (.ci/run does)"
    );
    m
}

fn suite_via_mpiexec(fabric: &str) {
    let m = mpiexec();
    let _g = serial();
    let t0 = Instant::now();
    let out = Command::new("timeout")
        .args([
            "180", m, "-n", "4", VOLLEY, "worker", "suite", "--fabric", fabric,
        ])
        .env_remove("VOLLEY_RANK")
        .output()
        .expect("mpiexec runs");
    let t = text(&out);
    assert!(
        out.status.success(),
        "mpiexec {fabric} suite failed after {:?}:\n{t}",
        t0.elapsed()
    );
    assert!(t.contains("suite ok: 4 ranks"), "{t}");
}

#[test]
fn mpiexec_shm_pingpong_barrier_broadcast() {
    suite_via_mpiexec("shm");
}

#[test]
fn mpiexec_udp_pingpong_barrier_broadcast() {
    suite_via_mpiexec("udp");
}

#[test]
fn two_groups_send_to_each_other() {
    for (fabric, salt) in [("shm", 3), ("udp", 4)] {
        let _g = serial();
        let (out, _) = launch(
            "4",
            fabric,
            job_id(salt),
            &["intergroup"],
            &[("VOLLEY_GROUPS", "2,2")],
        );
        let t = text(&out);
        assert!(out.status.success(), "{fabric}:\n{t}");
        assert!(
            t.contains("group 1 instance 0: got \"hello from group 2\""),
            "{t}"
        );
        assert!(
            t.contains("group 2 instance 0: got \"hello from group 1\""),
            "{t}"
        );
    }
}

/// Runs `volley worker victim` on `n` ranks with `env`, on shm (job `salts[0]`) then
/// udp (`salts[1]`): the launcher must fail within 20 s, every rank in `survivors`
/// must print `rank R: SENDFAILURE {what}`, and nothing may be left behind.
fn victim_job(n: &str, salts: [u64; 2], env: &[(&str, &str)], survivors: &[u16], what: &str) {
    victim_on(
        &[("shm", salts[0]), ("udp", salts[1])],
        n,
        env,
        survivors,
        what,
    );
}

/// [`victim_job`] on the fabrics given, each with its job salt.
fn victim_on(
    fabrics: &[(&str, u64)],
    n: &str,
    env: &[(&str, &str)],
    survivors: &[u16],
    what: &str,
) {
    for &(fabric, salt) in fabrics {
        let _g = serial();
        let before = shm_dirs();
        let (out, took) = launch(n, fabric, job_id(salt), &["victim"], env);
        let t = text(&out);
        assert!(
            !out.status.success(),
            "{fabric}: the launcher must fail:\n{t}"
        );
        assert!(
            took < Duration::from_secs(20),
            "{fabric}: took {took:?}:\n{t}"
        );
        assert!(t.contains("failed (signal 9)"), "{fabric}: {t}");
        for r in survivors {
            assert!(
                t.contains(&format!("rank {r}: SENDFAILURE {what}")),
                "{fabric}: rank {r}:\n{t}"
            );
        }
        assert_nothing_left(&before, fabric);
    }
}

/// A member that dies while the root broadcasts long messages through its board
/// (`shm`) stops reading it: the board fills behind it, the root finds its process
/// gone and passes it over, the survivors get all 40 broadcasts whole and in order
/// (each checked), and the next barrier reports the death.
#[test]
fn broadcasts_through_the_board_go_past_a_dead_member() {
    let env = [("VOLLEY_VICTIM_MODE", "bcast")];
    let what = "in sync after the broadcasts";
    victim_on(&[("shm", 25)], "4", &env, &[0, 1, 2], what);
}

#[test]
fn a_killed_rank_becomes_sendfailure_everywhere_and_fails_the_job() {
    victim_job("4", [5, 6], &[], &[0, 1, 2], "sending to rank 3");
}

#[test]
fn a_killed_rank_fails_the_barrier_at_every_survivor() {
    let env = [("VOLLEY_VICTIM", "1"), ("VOLLEY_VICTIM_MODE", "sync")];
    victim_job("4", [9, 10], &env, &[0, 2, 3], "in sync");
}

/// A rank that dies before its first frame: on udp the survivors never heard from it,
/// so its closed port may only be a rank still starting, until the device's start-up
/// grace is over. They must still see `SENDFAILURE` in seconds, not `peer_timeout`.
#[test]
fn a_rank_killed_before_its_first_frame_fails_the_barrier_everywhere() {
    let env = [("VOLLEY_VICTIM_MODE", "early")];
    victim_job("4", [23, 24], &env, &[0, 1, 2], "in sync");
}

/// The `VOLLEY_UDP_PEERS` and `VOLLEY_UDP_BIND` values of a job whose ranks talk
/// through `relay` and bind `real`.
fn relay_addrs(relay: &Relay, real: &[SocketAddr]) -> (String, String) {
    let list = |v: &[SocketAddr]| {
        v.iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    (list(&relay.relay_addrs), list(real))
}

/// `flowctl-exact` of `messages` on two `udp` ranks (job salt `salt`) through a
/// relay misbehaving as `faults` (seeded by `seed`), with `env` besides: the
/// launcher's output, how long it took, and the relay.
fn flowctl_via_relay(
    faults: Faults,
    seed: u64,
    salt: u64,
    messages: &str,
    env: &[(&str, &str)],
) -> (Output, Duration, Relay) {
    let real = vec![free_port(), free_port()];
    let relay = Relay::with(real.clone(), seed, faults);
    let (peers, binds) = relay_addrs(&relay, &real);
    let mut all = vec![
        ("VOLLEY_UDP_PEERS", peers.as_str()),
        ("VOLLEY_UDP_BIND", binds.as_str()),
        ("VOLLEY_MESSAGES", messages),
    ];
    all.extend_from_slice(env);
    let (out, took) = launch("2", "udp", job_id(salt), &["flowctl-exact"], &all);
    (out, took, relay)
}

/// Exactly once through a relay that drops 10%, duplicates 5% and reorders 5%:
/// Ethernet-sized datagrams (1472 bytes, as across a network), then loopback's
/// 64 KiB ones (the default there, found from the path MTU).
#[test]
fn flowctl_over_a_lossy_udp_relay_arrives_exactly_once() {
    for (salt, mtu, messages) in [(7, Some("1472"), "300"), (11, None, "1000")] {
        let _g = serial();
        let env: Vec<(&str, &str)> = mtu.map(|m| ("VOLLEY_UDP_MTU", m)).into_iter().collect();
        let (out, took, relay) =
            flowctl_via_relay(Faults::Random, 0xC0FFEE + salt, salt, messages, &env);
        let t = text(&out);
        assert!(out.status.success(), "mtu {mtu:?}, after {took:?}:\n{t}");
        assert!(
            t.contains(&format!(
                "flowctl-exact ok: {messages} messages exactly once, in order"
            )),
            "{t}"
        );
        let (d, u, r, big) = (
            relay.dropped.load(Ordering::Relaxed),
            relay.duplicated.load(Ordering::Relaxed),
            relay.reordered.load(Ordering::Relaxed),
            relay.largest.load(Ordering::Relaxed),
        );
        assert!(
            d > 50 && u > 20 && r > 20,
            "mtu {mtu:?}: the relay must have misbehaved: dropped {d}, duplicated {u}, reordered {r}"
        );
        match mtu {
            Some(m) => assert!(
                big <= m.parse().unwrap(),
                "a {big}-byte datagram over mtu {m}"
            ),
            None => assert!(big > 60_000, "loopback frames are 64 KiB, not {big} bytes"),
        }
        // Long frames go out gathered from the program's memory (no copy before the
        // kernel's): on loopback, 100 KB messages alone make two per message.
        if mtu.is_some() {
            continue;
        }
        let gathered = number_after(&t, "flowctl-exact sender: ");
        let at_least = 2 * messages.parse::<u64>().unwrap() / 5;
        assert!(
            gathered >= at_least,
            "{gathered} gathered frames, {at_least} expected"
        );
    }
}

/// Long frames on `shm` (8 KiB and more) are copied into the peer's ring by the
/// device, through the cache or with non-temporal stores as `VOLLEY_SHM_COPY` says,
/// and every message arrives exactly once, in order, intact either way.
#[test]
fn shm_long_frames_arrive_intact_however_they_are_copied() {
    let _g = serial();
    for (mode, salt) in [("streaming", 14), ("cached", 15)] {
        let env = [("VOLLEY_SHM_COPY", mode), ("VOLLEY_MESSAGES", "200")];
        let (out, took) = launch("2", "shm", job_id(salt), &["flowctl-exact"], &env);
        let t = text(&out);
        assert!(out.status.success(), "{mode}, after {took:?}:\n{t}");
        assert!(
            t.contains("flowctl-exact ok: 200 messages exactly once, in order"),
            "{mode}: {t}"
        );
        // 40 messages of 100 KB, two long frames each (64 KiB slots), and 40 of 9000 B.
        let cached = number_after(&t, "shm long frames: ");
        let streamed = number_after(&t, "through the cache, ");
        let (copied, other) = match mode {
            "streaming" => (streamed, cached),
            _ => (cached, streamed),
        };
        assert!(copied >= 120 && other == 0, "{mode}: {t}");
    }
}

/// Long broadcasts on `shm` go through the root's board, whose frames the device
/// copies as it copies long frames into a peer's ring (a member in another core
/// complex reads them as it would read a ring): every member still gets every
/// broadcast whole and in order, however they are copied.
#[test]
fn shm_long_broadcasts_arrive_intact_however_they_are_copied() {
    let _g = serial();
    for (mode, salt) in [("streaming", 16), ("cached", 17)] {
        let env = [("VOLLEY_SHM_COPY", mode)];
        let (out, took) = launch("4", "shm", job_id(salt), &["suite"], &env);
        let t = text(&out);
        assert!(out.status.success(), "{mode}, after {took:?}:\n{t}");
        assert!(t.contains("suite ok: 4 ranks"), "{mode}: {t}");
        let cached = number_after(&t, "shm long frames: ");
        let streamed = number_after(&t, "through the cache, ");
        let board = number_after(&t, "non-temporal stores, ");
        let other = if mode == "streaming" {
            cached
        } else {
            streamed
        };
        // 100,000 bytes in two board frames, then two of 600,000 in ten each.
        assert!(board >= 22 && other == 0, "{mode}: {t}");
    }
}

/// The number after `prefix` in `t` (up to a space or comma).
fn number_after(t: &str, prefix: &str) -> u64 {
    t.split(prefix)
        .nth(1)
        .and_then(|r| r.split([' ', ',']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix:?} in:\n{t}"))
}

/// Ethernet-sized datagrams straight over loopback: frames to one peer leave in
/// sends of several datagrams (`UDP_SEGMENT`) and arrive in reads of several
/// (`UDP_GRO`), and every message still arrives exactly once, in order, intact.
/// With `VOLLEY_UDP_GSO=0`, one datagram a call, and the same messages.
#[test]
fn datagrams_to_one_peer_are_sent_and_read_together() {
    for gso in ["1", "0"] {
        let _g = serial();
        let env = [
            ("VOLLEY_UDP_MTU", "1472"),
            ("VOLLEY_MESSAGES", "500"),
            ("VOLLEY_UDP_GSO", gso),
        ];
        let (out, took) = launch("2", "udp", job_id(31), &["flowctl-exact"], &env);
        let t = text(&out);
        assert!(out.status.success(), "gso {gso}, after {took:?}:\n{t}");
        assert!(
            t.contains("flowctl-exact ok: 500 messages exactly once, in order"),
            "{t}"
        );
        let segmented = number_after(&t, "frames sent from where their payload lay, ");
        let coalesced = number_after(&t, "datagrams from strangers dropped; ");
        if gso == "1" {
            // 100 KB messages alone are 70 datagrams each.
            assert!(segmented >= 100, "{segmented} segmented sends:\n{t}");
            assert!(coalesced >= 100, "{coalesced} coalesced reads:\n{t}");
        } else {
            assert_eq!((segmented, coalesced), (0, 0), "{t}");
        }
    }
}

/// 50 datagrams in a row lost in the ack direction (towards the sender), again and
/// again: a live job must not fail (failure is judged by time, not by rounds).
#[test]
fn bursts_of_50_lost_acks_do_not_fail_a_live_job() {
    let _g = serial();
    let faults = Faults::Bursts {
        to: 0,
        every: 200,
        burst: 50,
    };
    let (out, took, relay) = flowctl_via_relay(faults, 0xB0057, 8, "400", &[]);
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(
        t.contains("flowctl-exact ok: 400 messages exactly once"),
        "{t}"
    );
    let d = relay.dropped.load(Ordering::Relaxed);
    assert!(d >= 100, "at least two bursts of 50 were dropped, not {d}");
}

/// 50 datagrams in a row lost of every 500, both ways (the start-up exchange's
/// included): every message still arrives exactly once, in order, and the job
/// finishes (how fast is `cargo bench --bench burst_loss`'s).
#[test]
fn bursts_of_loss_both_ways_deliver_every_message_exactly_once() {
    let _g = serial();
    let faults = Faults::BurstsBoth {
        every: 500,
        burst: 50,
    };
    let (out, took, relay) = flowctl_via_relay(faults, 0xB0058, 0xB2, "2000", &[]);
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(
        t.contains("flowctl-exact ok: 2000 messages exactly once"),
        "{t}"
    );
    let d = relay.dropped.load(Ordering::Relaxed);
    assert!(d >= 300, "bursts of 50 were dropped both ways, not {d}");
}

/// A rank blocked waiting for a message from a rank that dies gets SENDFAILURE (the
/// seed's error for a failed peer) within seconds, not a hang until the launcher's
/// timeout.
#[test]
fn a_rank_waiting_for_a_killed_sender_gets_sendfailure() {
    let env = [("VOLLEY_VICTIM", "2"), ("VOLLEY_VICTIM_MODE", "wait")];
    victim_job("3", [21, 22], &env, &[0, 1], "waiting for rank 2");
}

/// A master and two workers that each take a task and compute for 3 s without
/// calling in, under a 1 s peer timeout: the workers' beacons (a word in the region
/// on shm, frames on udp) keep the master waiting for their answers instead of
/// declaring them dead, on both fabrics.
#[test]
fn workers_that_compute_past_the_peer_timeout_are_waited_for() {
    let _g = serial();
    for (fabric, salt) in [("shm", 0xC0u64), ("udp", 0xC1)] {
        let env = [("VOLLEY_PEER_TIMEOUT", "1"), ("VOLLEY_COMPUTE", "3")];
        let (out, took) = launch("3", fabric, job_id(salt), &["compute"], &env);
        let t = text(&out);
        assert!(out.status.success(), "{fabric} after {took:?}:\n{t}");
        for r in 0..3 {
            assert!(
                t.contains(&format!("compute ok: rank {r} of 3")),
                "{fabric}: {t}"
            );
        }
        assert!(!t.contains("peers failed 1"), "{fabric}: {t}");
        let beats = |r: u16| {
            t.lines()
                .find(|l| l.contains(&format!("compute ok: rank {r} of 3")))
                .map_or(0, |l| number_after(l, "beacons "))
        };
        // Each worker spoke for itself while it computed.
        assert!(beats(1) > 0 && beats(2) > 0, "{fabric}: {t}");
        if fabric == "udp" {
            assert_eq!(
                beats(0),
                0,
                "a master that polls sends no beacon frames: {t}"
            );
        }
    }
}

/// Finds the pid of rank `rank` of job `job` (a child of the launcher).
fn rank_pid(job: u64, rank: u16) -> Option<u32> {
    let want_job = format!("VOLLEY_JOB=0x{job:016x}");
    let want_rank = format!("VOLLEY_RANK={rank}");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        let has = |w: &str| vars.contains(&w.as_bytes());
        if has(&want_job) && has(&want_rank) {
            return Some(pid);
        }
    }
    None
}

/// A rank stopped for 5 s (a debugger, swapping) in the middle of a transfer: the job
/// goes on when it resumes, on both fabrics.
#[test]
fn a_rank_stopped_for_five_seconds_is_survived() {
    let _g = serial();
    for (fabric, salt) in [("shm", 19u64), ("udp", 20)] {
        let job = job_id(salt);
        let t0 = Instant::now();
        let args = [
            "run",
            "-n",
            "2",
            "--fabric",
            fabric,
            "--timeout",
            "120",
            "--job",
            &format!("{job:#x}"),
            "--",
            VOLLEY,
            "worker",
            "flowctl-exact",
        ];
        // Enough to last well past the stop on either fabric (64 KiB datagrams make
        // udp fast on loopback).
        let child = Command::new(VOLLEY)
            .args(args)
            .env("VOLLEY_MESSAGES", "40000")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until rank 1 exists and has been working a little.
        let pid = loop {
            if let Some(p) = rank_pid(job, 1) {
                break p;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{fabric}: rank 1 never started"
            );
            thread::sleep(Duration::from_millis(10));
        };
        thread::sleep(Duration::from_millis(300));
        let sig = |s: &str| {
            Command::new("kill")
                .args([s, &pid.to_string()])
                .status()
                .unwrap()
        };
        assert!(sig("-STOP").success());
        thread::sleep(Duration::from_secs(5));
        assert!(sig("-CONT").success());
        let out = child.wait_with_output().unwrap();
        let t = text(&out);
        assert!(
            out.status.success(),
            "{fabric}: after {:?}:\n{t}",
            t0.elapsed()
        );
        assert!(
            t.contains("flowctl-exact ok: 40000 messages"),
            "{fabric}: {t}"
        );
    }
}

fn write_region(job: u64, bytes: &[u8]) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = job_dir(job);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join("region"))
        .unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
}

#[test]
fn garbage_and_stale_regions_are_rejected_then_replaced() {
    let _g = serial();
    let job = job_id(8);
    let rank1 = |timeout: &str| {
        let jobs = format!("{job:#x}");
        run(
            &["worker", "attach", "--fabric", "shm"],
            &[
                ("VOLLEY_RANK", "1"),
                ("VOLLEY_SIZE", "2"),
                ("VOLLEY_JOB", jobs.as_str()),
                ("VOLLEY_STARTUP_TIMEOUT", timeout),
            ],
        )
    };
    // Initialised header, impossible geometry: rejected at once, with the reason.
    let mut region = vec![0u8; 1 << 16];
    region[0..8].copy_from_slice(b"VOLLEYMY");
    region[8..12].copy_from_slice(&volley_myri::VERSION.to_le_bytes());
    region[12..16].copy_from_slice(&2u32.to_le_bytes());
    region[16..20].copy_from_slice(&64u32.to_le_bytes());
    region[20..24].copy_from_slice(&1000u32.to_le_bytes());
    region[24..32].copy_from_slice(&job.to_le_bytes());
    write_region(job, &region);
    let (out, took) = rank1("10");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("shared region corrupt: the slot size"), "{t}");
    assert!(
        took < Duration::from_secs(5),
        "rejected at once, not after the timeout"
    );
    assert_eq!(t.lines().count(), 1, "one clear line: {t}");
    // Garbage without a header: never joined; a clear error when the wait ends.
    let noise: Vec<u8> = (0..1u32 << 16)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write_region(job, &noise);
    let (out, _) = rank1("1");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("stale or garbage"), "{t}");
    // A whole job of that id (no secret, so the same directory name) replaces the
    // stale region and leaves nothing behind.
    let outs = job_without_launcher(job, 2, &["worker", "attach", "--fabric", "shm"], &[]);
    for o in &outs {
        assert!(o.status.success(), "{}", text(o));
    }
    assert!(!job_dir(job).exists());
}

/// Starts the ranks of a job by hand, as a launcher that passes no secret would (the
/// directory name is then the job id: predictable, and so attackable).
fn job_without_launcher(job: u64, n: u16, args: &[&str], env: &[(&str, &str)]) -> Vec<Output> {
    let children: Vec<_> = (0..n)
        .map(|rank| {
            Command::new("timeout")
                .arg("60")
                .arg(VOLLEY)
                .args(args)
                .env("VOLLEY_RANK", rank.to_string())
                .env("VOLLEY_SIZE", n.to_string())
                .env("VOLLEY_JOB", format!("{job:#x}"))
                .env("VOLLEY_STARTUP_TIMEOUT", "5")
                .env_remove("VOLLEY_SECRET")
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

/// Runs `cmd` as user `nobody` (the test must be root): another local user.
fn as_nobody(cmd: &[&str]) -> Option<Output> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc_getuid() } != 0 {
        eprintln!("not root: the second-user attacks are not run (CI runs as root)");
        return None;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .args(cmd)
        .output()
        .expect("setpriv (util-linux) runs");
    Some(o)
}

/// Another user creates the job's directory first (as a hosts-list or mpiexec job's
/// name is predictable without a secret), or plants a symbolic link there: the job
/// refuses with one clear line and writes nothing into it.
#[test]
fn another_users_directory_or_symlink_is_refused() {
    let _g = serial();
    let job = job_id(0xA77);
    let dir = job_dir(job);
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let Some(o) = as_nobody(&["mkdir", "-m", "777", &d]) else {
        return;
    };
    assert!(o.status.success(), "{}", text(&o));
    let outs = job_without_launcher(job, 2, &["worker", "attach", "--fabric", "shm"], &[]);
    let t = text(&outs[0]);
    assert!(!outs[0].status.success(), "{t}");
    assert!(t.contains("belongs to uid"), "{t}");
    assert_eq!(t.trim().lines().count(), 1, "{t}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written there"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    // A symbolic link (to a directory the attacker can read) at the name.
    let bait = std::env::temp_dir().join(format!("volley-bait-{}", std::process::id()));
    std::fs::create_dir_all(&bait).unwrap();
    std::os::unix::fs::symlink(&bait, &dir).unwrap();
    let outs = job_without_launcher(job, 2, &["worker", "attach", "--fabric", "shm"], &[]);
    let t = text(&outs[0]);
    assert!(!outs[0].status.success(), "{t}");
    assert!(t.contains("symbolic link"), "{t}");
    assert_eq!(
        std::fs::read_dir(&bait).unwrap().count(),
        0,
        "nothing written there"
    );
    std::fs::remove_file(&dir).unwrap();
    std::fs::remove_dir_all(&bait).unwrap();
}

/// Under the launcher the directory name comes from the job secret: the job id alone
/// (visible in `ps`) does not name it.
#[test]
fn the_directory_name_is_not_the_job_id_under_the_launcher() {
    let _g = serial();
    let job = job_id(0xD1);
    let predictable = job_dir(job);
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, stop2, p2) = (
        Arc::new(AtomicBool::new(false)),
        stop.clone(),
        predictable.clone(),
    );
    let seen2 = seen.clone();
    let watcher = thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            if p2.exists() {
                seen2.store(true, Ordering::Relaxed);
            }
            thread::sleep(Duration::from_micros(200));
        }
    });
    let (out, _) = launch("3", "shm", job, &["attach"], &[]);
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !seen.load(Ordering::Relaxed),
        "{} appeared",
        predictable.display()
    );
}

/// A /dev/shm too small for the region is one clear line at start-up (saying how to
/// size it), not a SIGBUS later.
#[test]
fn a_too_small_dev_shm_is_one_clear_line() {
    let _g = serial();
    let before = shm_dirs();
    // Four rings of 65536 one-MiB slots: 256 GiB, more than any /dev/shm here.
    let env = [
        ("VOLLEY_SHM_SLOTS", "65536"),
        ("VOLLEY_SHM_SLOT_SIZE", "1048576"),
        ("VOLLEY_STARTUP_TIMEOUT", "3"),
    ];
    let (out, took) = launch("2", "shm", job_id(0x5A11), &["attach"], &env);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("--shm-size"), "{t}");
    assert!(t.contains("[0] volley: the shm region needs 26214"), "{t}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_nothing_left(&before, "too small");
}

/// A rank 0 killed during start-up leaves its directory behind; the next job of this
/// user removes it (nobody holds its lock).
#[test]
fn a_directory_left_by_a_dead_rank_0_is_removed_by_the_next_job() {
    let _g = serial();
    let stale = job_dir(job_id(0x57A1E));
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("region.deadbeef"), b"half-built").unwrap();
    let a = Command::new("chmod")
        .arg("700")
        .arg(&stale)
        .status()
        .unwrap();
    assert!(a.success());
    // Old enough not to be a job that is just starting.
    let t = Command::new("touch")
        .args(["-d", "1 minute ago"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(t.success());
    let outs = job_without_launcher(
        job_id(0x57A1F),
        2,
        &["worker", "attach", "--fabric", "shm"],
        &[],
    );
    for o in &outs {
        assert!(o.status.success(), "{}", text(o));
    }
    assert!(!stale.exists(), "{} is still there", stale.display());
}

#[test]
fn bootstrap_errors_are_one_line() {
    let out = Command::new(VOLLEY)
        .args(["worker", "attach"])
        .env_remove("VOLLEY_RANK")
        .env_remove("PMI_RANK")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("SLURM_PROCID")
        .env_remove("VOLLEY_HOSTS")
        .env("VOLLEY_SIZE", "2")
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(t.lines().count(), 1, "{t}");
    assert!(
        t.contains("VOLLEY_SIZE is set but VOLLEY_RANK is not"),
        "{t}"
    );
}

/// Every bad setting is one line naming it and its valid range, with a non-zero exit;
/// never a panic, a misleading message or a silent replacement.
#[test]
fn bad_settings_are_one_line_naming_the_setting() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            &["run", "--timeout", "-1", "-n", "1", "--", "true"],
            &[],
            "--timeout",
        ),
        (
            &["run", "--timeout", "NaN", "-n", "1", "--", "true"],
            &[],
            "--timeout",
        ),
        (
            &["run", "--timeout", "1e300", "-n", "1", "--", "true"],
            &[],
            "--timeout",
        ),
        (
            &["run", "--grace", "-5", "-n", "1", "--", "true"],
            &[],
            "--grace",
        ),
        (
            &["run", "--grace", "NaN", "-n", "1", "--", "true"],
            &[],
            "--grace",
        ),
        (&["run", "-n", "0", "--", "true"], &[], "1..=65535"),
        (
            &["worker", "attach"],
            &[("VOLLEY_STARTUP_TIMEOUT", "-3")],
            "VOLLEY_STARTUP_TIMEOUT",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_STARTUP_TIMEOUT", "NaN")],
            "VOLLEY_STARTUP_TIMEOUT",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_STARTUP_TIMEOUT", "1e300")],
            "VOLLEY_STARTUP_TIMEOUT",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_SHM_SLOT_SIZE", "1099511627776")],
            "VOLLEY_SHM_SLOT_SIZE",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_SHM_SLOTS", "1")],
            "VOLLEY_SHM_SLOTS",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_SHM_SLOTS", "3")],
            "power of two",
        ),
        (
            &["worker", "attach", "--fabric", "udp"],
            &[("VOLLEY_PORT", "0")],
            "VOLLEY_PORT",
        ),
        (
            &["worker", "attach", "--fabric", "udp"],
            &[("VOLLEY_PORT", "abc")],
            "VOLLEY_PORT",
        ),
        (
            &["worker", "attach", "--fabric", "udp"],
            &[("VOLLEY_UDP_MTU", "10")],
            "VOLLEY_UDP_MTU",
        ),
        (
            &["worker", "attach", "--fabric", "udp"],
            &[("VOLLEY_UDP_MTU", "70000")],
            "VOLLEY_UDP_MTU",
        ),
        (
            &["worker", "attach", "--fabric", "udp"],
            &[("VOLLEY_UDP_MTU", "abc")],
            "VOLLEY_UDP_MTU",
        ),
        (
            &["worker", "attach", "--fabric", "udp"],
            &[("VOLLEY_UDP_GSO", "2")],
            "VOLLEY_UDP_GSO",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_SIZE", "300"), ("VOLLEY_RANK", "0")],
            "at most 256 ranks",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_BARRIER", "sometimes")],
            "VOLLEY_BARRIER",
        ),
        (
            &["worker", "attach"],
            &[("VOLLEY_BCAST", "star")],
            "VOLLEY_BCAST",
        ),
        // The launcher and the main job read the fabric's setting too.
        (&[], &[("VOLLEY_FABRIC", "carrier-pigeon")], "VOLLEY_FABRIC"),
        (
            &["run", "-n", "1", "--", "true"],
            &[("VOLLEY_FABRIC", "tcp")],
            "VOLLEY_FABRIC",
        ),
        (
            &["run", "-n", "2", "--unikernel", "1", "--", "true"],
            &[("VOLLEY_FABRIC", "shm")],
            "VOLLEY_FABRIC says shm",
        ),
    ];
    for (args, env, want) in cases {
        let out = Command::new(VOLLEY)
            .args(*args)
            .env("VOLLEY_RANK", "0")
            .env("VOLLEY_SIZE", "1")
            .env("VOLLEY_JOB", format!("{:#x}", job_id(0xBAD)))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let t = text(&out);
        assert!(!out.status.success(), "{args:?} {env:?} succeeded:\n{t}");
        assert!(t.contains(want), "{args:?} {env:?}: {t}");
        assert!(!t.contains("panicked"), "{t}");
        let lines: Vec<&str> = t
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
            .collect();
        assert_eq!(lines.len(), 1, "{args:?} {env:?}: one line:\n{t}");
    }
}

/// `volley run` without `--fabric` starts its ranks on the fabric
/// `VOLLEY_FABRIC` names (as README says), and `--fabric` wins over it.
#[test]
fn the_launcher_takes_the_fabric_from_volley_fabric_unless_told() {
    let fabric_of_ranks = |args: &[&str], env: Option<&str>| {
        let mut c = Command::new(VOLLEY);
        c.arg("run").args(["-n", "2"]).args(args);
        c.args(["--", "sh", "-c", "echo fabric=$VOLLEY_FABRIC"]);
        c.env_remove("VOLLEY_FABRIC");
        if let Some(f) = env {
            c.env("VOLLEY_FABRIC", f);
        }
        let out = c.output().unwrap();
        let t = text(&out);
        assert!(out.status.success(), "{args:?} {env:?}:\n{t}");
        let mut seen: Vec<&str> = t
            .lines()
            .filter_map(|l| l.split("fabric=").nth(1))
            .collect();
        seen.dedup();
        assert_eq!(
            seen.len(),
            1,
            "{args:?} {env:?}: one fabric for all ranks:\n{t}"
        );
        seen[0].to_owned()
    };
    assert_eq!(fabric_of_ranks(&[], None), "shm");
    assert_eq!(fabric_of_ranks(&[], Some("udp")), "udp");
    assert_eq!(fabric_of_ranks(&["--fabric", "shm"], Some("udp")), "shm");
}

/// Sends `payload` as a UDP datagram that claims to come from `src` (root only: a
/// raw socket), as an attacker on the path could.
fn spoofed_udp(src: std::net::SocketAddrV4, dst: std::net::SocketAddrV4, payload: &[u8]) -> bool {
    let mut p = vec![0u8; 28 + payload.len()];
    let total = p.len() as u16;
    p[0] = 0x45;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.ip().octets());
    p[16..20].copy_from_slice(&dst.ip().octets());
    p[20..22].copy_from_slice(&src.port().to_be_bytes());
    p[22..24].copy_from_slice(&dst.port().to_be_bytes());
    p[24..26].copy_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    extern "C" {
        fn socket(domain: i32, ty: i32, proto: i32) -> i32;
        fn sendto(
            fd: i32,
            buf: *const u8,
            len: usize,
            flags: i32,
            addr: *const u8,
            alen: u32,
        ) -> isize;
        fn close(fd: i32) -> i32;
    }
    // AF_INET = 2, SOCK_RAW = 3, IPPROTO_RAW = 255 (the header is ours).
    // SAFETY: plain system calls with a buffer and a sockaddr_in that outlive them.
    unsafe {
        let fd = socket(2, 3, 255);
        if fd < 0 {
            return false;
        }
        let mut sa = [0u8; 16];
        sa[0..2].copy_from_slice(&2u16.to_ne_bytes());
        sa[4..8].copy_from_slice(&dst.ip().octets());
        let n = sendto(fd, p.as_ptr(), p.len(), 0, sa.as_ptr(), 16);
        close(fd);
        n == p.len() as isize
    }
}

/// Forged datagrams never reach a handler, a semaphore or a FRAMELOST: from a
/// stranger's socket they are dropped by address; spoofed as rank 0 (root only) they
/// fail the job's authentication. The job's own 2000 messages arrive exactly once.
#[test]
fn forged_udp_datagrams_never_reach_the_application() {
    let _g = serial();
    let job = job_id(0xF0);
    let base = free_port().port().clamp(20_000, 60_000);
    let base_s = base.to_string();
    let env = [
        ("VOLLEY_MESSAGES", "2000"),
        ("VOLLEY_PORT", base_s.as_str()),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let sent = Arc::new(AtomicU64::new(0));
    let sent2 = sent.clone();
    let spoofed = Arc::new(AtomicU64::new(0));
    let spoofed2 = spoofed.clone();
    let attacker = thread::spawn(move || {
        let frames = forged_frames(job);
        let me = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rank0 = std::net::SocketAddrV4::new([127, 0, 0, 1].into(), base);
        let rank1 = std::net::SocketAddrV4::new([127, 0, 0, 1].into(), base + 1);
        let end = Instant::now() + Duration::from_secs(60);
        while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
            for f in &frames {
                if me.send_to(f, rank1).is_ok() {
                    sent2.fetch_add(1, Ordering::Relaxed);
                }
                if spoofed_udp(rank0, rank1, f) {
                    spoofed2.fetch_add(1, Ordering::Relaxed);
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
    });
    let (out, took) = launch("2", "udp", job, &["flowctl-exact"], &env);
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(
        t.contains("flowctl-exact ok: 2000 messages exactly once"),
        "{t}"
    );
    let (sent, spoofed) = (
        sent.load(Ordering::Relaxed),
        spoofed.load(Ordering::Relaxed),
    );
    assert!(sent > 1000, "forgeries sent: {sent}");
    let number = |after: &str| -> u64 {
        let i = t.find(after).expect("stats in the output");
        t[..i]
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert!(number(" datagrams from strangers") > 0, "{t}");
    // SAFETY: getuid has no preconditions.
    if unsafe { libc_getuid() } == 0 {
        assert!(spoofed > 1000, "spoofed datagrams sent: {spoofed}");
        assert!(number(" unauthenticated frames") > 0, "{t}");
    } else {
        eprintln!("not root: spoofed-source datagrams not sent (CI runs as root)");
    }
}

/// Fetch-and-add from every rank at once: served in NIC memory on shm, by rank 0's
/// engine on udp; every value exactly once, the final count exact.
#[test]
fn fetch_and_add_from_every_rank_at_once() {
    for (fabric, salt) in [("shm", 0xFA1), ("udp", 0xFA2)] {
        let _g = serial();
        let (out, took) = launch("4", fabric, job_id(salt), &["fetch-add"], &[]);
        let t = text(&out);
        assert!(out.status.success(), "{fabric} after {took:?}:\n{t}");
        assert!(
            t.contains("fetch-add ok: 800 values from 4 ranks, each exactly once"),
            "{fabric}: {t}"
        );
    }
}

/// Starts `volley run` with `args`, its output piped, and reads lines until one
/// `[r] pid N` for each of `ranks` ranks has come: the launcher and the ranks' pids.
fn launcher_with_pids(args: &[&str], ranks: u16) -> (std::process::Child, Vec<i32>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(VOLLEY)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("volley runs");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some((_, pid)) = line.split_once("] pid ") {
                let _ = tx.send(pid.trim().parse::<i32>().unwrap_or(0));
            }
        }
    });
    let pids = (0..ranks)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(30))
                .expect("every rank says its pid")
        })
        .collect();
    (child, pids)
}

fn alive(pid: i32) -> bool {
    // Gone, or a zombie nobody reaped yet (its parent died with it).
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(") ").next().is_some_and(|r| !r.starts_with('Z')))
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on the launcher this test started and has not reaped.
    unsafe { libc::kill(pid as i32, sig) };
}

fn wait_gone(pids: &[i32], within: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < within {
        if !pids.iter().any(|&p| alive(p)) {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// SIGTERM, SIGINT and SIGHUP on `volley run` reach every rank; ranks that ignore
/// them are killed after the grace period; the launcher exits 128 + the signal and
/// leaves no job directory. A launcher killed outright takes its ranks with it. A
/// rank a signal killed makes the launcher exit 128 + that signal.
#[test]
fn the_launcher_leaves_nothing_running() {
    let _g = serial();
    let before = shm_dirs();
    // Real ranks, busy (workers computing, rank 0 waiting for them): forwarded.
    for (sig, name) in [
        (libc::SIGTERM, "TERM"),
        (libc::SIGINT, "INT"),
        (libc::SIGHUP, "HUP"),
    ] {
        let child = Command::new(VOLLEY)
            .args(["run", "-n", "3", "--fabric", "shm", "--grace", "20", "--"])
            .args([VOLLEY, "worker", "compute"])
            .env("VOLLEY_COMPUTE", "120")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_millis(1500));
        let t = Instant::now();
        signal(child.id(), sig);
        let o = child.wait_with_output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(128 + sig), "SIG{name}: {e}");
        assert!(t.elapsed() < Duration::from_secs(15), "SIG{name}: {e}");
        assert!(e.contains(&format!("got signal {sig}")), "SIG{name}: {e}");
        assert_nothing_left(&before, name);
    }
    // Ranks that ignore SIGTERM: killed once the grace has passed.
    let prog = "trap '' TERM; echo pid $$; while :; do :; done";
    let (child, pids) = launcher_with_pids(
        &["run", "-n", "2", "--grace", "1", "--", "sh", "-c", prog],
        2,
    );
    signal(child.id(), libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM));
    assert!(
        wait_gone(&pids, Duration::from_secs(5)),
        "ranks {pids:?} survived"
    );
    // The launcher killed outright: its ranks die with it.
    let prog = "echo pid $$; while :; do :; done";
    let (mut child, pids) = launcher_with_pids(&["run", "-n", "2", "--", "sh", "-c", prog], 2);
    signal(child.id(), libc::SIGKILL);
    let _ = child.wait();
    assert!(
        wait_gone(&pids, Duration::from_secs(5)),
        "ranks {pids:?} outlived the launcher"
    );
    // A rank killed by a signal: 128 + it, as mpiexec says.
    let (o, _) = run(
        &[
            "run",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "if [ $VOLLEY_RANK = 1 ]; then kill -USR1 $$; fi",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(128 + libc::SIGUSR1), "{}", text(&o));
    // A timeout names the ranks still running.
    let (o, _) = run(
        &[
            "run",
            "-n",
            "3",
            "--timeout",
            "1",
            "--",
            "sh",
            "-c",
            "[ $VOLLEY_RANK = 1 ] || sleep 30",
        ],
        &[],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(124), "{t}");
    assert!(t.contains("rank 0, 2 still running"), "{t}");
}

/// The internet checksum of `b`.
fn inet_checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends (root only: a raw socket) a forged ICMP "port unreachable" to `victim`'s
/// host, from another address, saying that a datagram `victim` sent to `about`
/// found its port closed. False if it could not be sent.
fn forged_icmp(victim: std::net::SocketAddrV4, about: std::net::SocketAddrV4) -> bool {
    // The datagram it claims came back: an IP header and the first 8 bytes (UDP).
    let mut inner = [0u8; 28];
    inner[0] = 0x45;
    inner[2..4].copy_from_slice(&36u16.to_be_bytes());
    inner[8] = 64;
    inner[9] = 17;
    inner[12..16].copy_from_slice(&victim.ip().octets());
    inner[16..20].copy_from_slice(&about.ip().octets());
    let c = inet_checksum(&inner[..20]);
    inner[10..12].copy_from_slice(&c.to_be_bytes());
    inner[20..22].copy_from_slice(&victim.port().to_be_bytes());
    inner[22..24].copy_from_slice(&about.port().to_be_bytes());
    inner[24..26].copy_from_slice(&16u16.to_be_bytes());
    let mut icmp = vec![3u8, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&inner);
    let c = inet_checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 1;
    p[12..16].copy_from_slice(&[127, 0, 0, 2]);
    p[16..20].copy_from_slice(&victim.ip().octets());
    p.extend_from_slice(&icmp);
    // SAFETY: plain system calls with a buffer and a sockaddr_in that outlive them.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
        if fd < 0 {
            return false;
        }
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes(victim.ip().octets());
        let n = libc::sendto(
            fd,
            p.as_ptr() as *const libc::c_void,
            p.len(),
            0,
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        );
        libc::close(fd);
        n == p.len() as isize
    }
}

/// ICMP is not authenticated: a stream of forged "port unreachable" reports, each
/// rank told that the other's port is closed, makes them suspect each other, but a
/// live peer answers and the job finishes, every message exactly once. A rank that
/// really dies is still reported within a second.
#[test]
fn forged_icmp_errors_do_not_kill_a_live_udp_job() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc_getuid() } != 0 {
        eprintln!("not root: no raw socket to forge ICMP with (CI runs as root)");
        return;
    }
    let _g = serial();
    let job = job_id(0x1C);
    let base = free_port().port().clamp(20_000, 60_000);
    let base_s = base.to_string();
    let env = [
        ("VOLLEY_MESSAGES", "5000"),
        ("VOLLEY_PORT", base_s.as_str()),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let forged = Arc::new(AtomicU64::new(0));
    let forged2 = forged.clone();
    let attacker = thread::spawn(move || {
        let rank0 = std::net::SocketAddrV4::new([127, 0, 0, 1].into(), base);
        let rank1 = std::net::SocketAddrV4::new([127, 0, 0, 1].into(), base + 1);
        let end = Instant::now() + Duration::from_secs(60);
        while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
            for (v, a) in [(rank0, rank1), (rank1, rank0)] {
                if forged_icmp(v, a) {
                    forged2.fetch_add(1, Ordering::Relaxed);
                }
            }
            thread::sleep(Duration::from_millis(1));
        }
    });
    let (out, took) = launch("2", "udp", job, &["flowctl-exact"], &env);
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "after {took:?}:\n{t}");
    assert!(
        t.contains("flowctl-exact ok: 5000 messages exactly once"),
        "{t}"
    );
    assert!(forged.load(Ordering::Relaxed) > 100, "{t}");
    // The reports reached the ranks: suspected, never gone.
    let suspected = number_after(&t, "] rank 0: ") + number_after(&t, "] rank 1: ");
    assert!(suspected > 0, "{t}");
    assert_eq!(t.matches("by ICMP, 0 found gone").count(), 2, "{t}");
    // A real death: found within a second at every survivor.
    let (out, _) = launch("4", "udp", job_id(0x1D), &["victim"], &[]);
    let t = text(&out);
    for r in 0..3 {
        let line = t
            .lines()
            .find(|l| l.contains(&format!("rank {r}: SENDFAILURE")))
            .unwrap_or_else(|| panic!("rank {r}:\n{t}"));
        let secs: f64 = line
            .rsplit("after ")
            .next()
            .and_then(|s| s.trim_end_matches(" s").parse().ok())
            .unwrap_or(f64::MAX);
        assert!(secs < 1.0, "rank {r} took {secs} s:\n{t}");
    }
}

/// Frames of an earlier run of a job (same key file, same job id, same addresses)
/// recorded on the way to rank 1, then replayed from where rank 0 sent them, while
/// rank 1 starts again alone: it takes the replayed HELLOs as valid but stale (they
/// echo the earlier run's nonce), never gets through its start-up, so never reaches
/// a barrier or takes a message, and says which rank gave no fresh answer.
#[test]
fn frames_of_an_earlier_run_are_refused_by_a_later_one_on_udp() {
    let _g = serial();
    let key_path = volley_qemu::new_key_file();
    let key = key_path.to_str().unwrap().to_owned();
    let job = format!("{:#x}", job_id(0x5E5));
    let real = vec![free_port(), free_port()];
    let relay = Relay::with(real.clone(), 1, Faults::Record);
    let (peers, binds) = relay_addrs(&relay, &real);
    let rank = |r: u16, timeout: &str| {
        Command::new("timeout")
            .arg("60")
            .args([VOLLEY, "worker", "flowctl-exact"])
            .env("VOLLEY_RANK", r.to_string())
            .env("VOLLEY_SIZE", "2")
            .env("VOLLEY_JOB", &job)
            .env("VOLLEY_FABRIC", "udp")
            .env("VOLLEY_KEY_FILE", &key)
            .env("VOLLEY_UDP_PEERS", &peers)
            .env("VOLLEY_UDP_BIND", &binds)
            .env("VOLLEY_MESSAGES", "20")
            .env("VOLLEY_STARTUP_TIMEOUT", timeout)
            .env_remove("VOLLEY_SECRET")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The earlier run: both ranks, every datagram recorded.
    let (a, b) = (rank(0, "30"), rank(1, "30"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
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
    let to_1 = relay.recorded.lock().unwrap()[1].clone();
    let from = relay.relay_addrs[1];
    drop(relay);
    assert!(to_1.len() > 20, "{} frames recorded", to_1.len());
    // The later run: rank 1 alone, fed the recording from rank 0's side.
    let lone = rank(1, "3");
    let replayer = UdpSocket::bind(from).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let to = real[1];
    let feeder = thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(30);
        let mut sent = 0u64;
        while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
            for f in &to_1 {
                if replayer.send_to(f, to).is_ok() {
                    sent += 1;
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
        sent
    });
    let out = lone.wait_with_output().unwrap();
    stop.store(true, Ordering::Relaxed);
    let sent = feeder.join().unwrap();
    let t = text(&out);
    assert!(sent > 100, "{sent} replayed");
    assert!(!out.status.success(), "{t}");
    assert!(
        !t.contains("flowctl-exact ok") && !t.contains("barrier"),
        "{t}"
    );
    assert!(
        t.contains("start-up: rank 0 gave no answer with this run's nonce"),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(key_path.parent().unwrap());
    let taken = number_after(&t, "HELLOs sent, ");
    assert!(taken > 0, "the replayed HELLOs were valid: {t}");
    assert!(number_after(&t, "taken, ") > 0, "and stale: {t}");
}
