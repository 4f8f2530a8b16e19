//! Jobs across many hosts, as a cluster's users start them: one namespace per host
//! (`netns`), each rank started by hand on its host with a key file, a job id and a
//! hosts list (the README's recipe), which the rank finds itself in by address, by
//! host name or by a name that resolves to it, with several ranks per host where an
//! entry says `host:N`. 64 hosts on `udp` and `eth`, 64 hosts behind links that each
//! lose 10% of the frames, 64 ranks on this machine's few cores. Root only (CI runs
//! as root); elsewhere each test says so and passes. The benchmark of how start-up,
//! barrier and broadcast grow with the hosts is `benches/hosts_scale.rs`.

mod netns;

use netns::{root, serial, text, wait_all, Hosts, LossySwitch, Wiring};
use std::process::Output;
use std::time::Duration;

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");

/// A key file for the job (a fresh private directory: nothing predictable).
fn key_file() -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    std::fs::write(&path, "00112233445566778899aabbccddeeff\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = path.to_str().unwrap().to_owned();
    (dir, p)
}

fn job_id(salt: u64) -> String {
    format!(
        "{:#x}",
        (std::process::id() as u64) << 20 ^ salt ^ 0x4057_0000
    )
}

/// `volley worker PROGRAM --fabric F --hosts LIST` on every host, `per_host` ranks
/// on each, with `env`; every rank's output, in host order.
fn run(
    hosts: &Hosts,
    per_host: usize,
    program: &str,
    fabric: &str,
    list: &str,
    env: &[(&str, &str)],
) -> (Vec<Output>, Duration) {
    let (_dir, key) = key_file();
    let job = job_id(hosts.n as u64 * 31 + per_host as u64);
    let mut all = vec![
        ("VOLLEY_KEY_FILE", key.as_str()),
        ("VOLLEY_JOB", job.as_str()),
        ("VOLLEY_ETH_IF", "eth0"),
        ("VOLLEY_VERBOSE", "1"),
    ];
    all.extend_from_slice(env);
    let argv = [
        VOLLEY, "worker", program, "--fabric", fabric, "--hosts", list,
    ];
    let children = (0..hosts.n)
        .flat_map(|h| (0..per_host).map(move |_| h))
        .map(|h| hosts.spawn(h, &argv, &all))
        .collect();
    wait_all(children, Duration::from_secs(240))
}

/// Every rank exited 0, rank 0's line says the suite passed on `n` ranks, and each
/// rank said which entry it took, and how: `how`.
fn passed(outs: &[Output], n: usize, fabric: &str, how: &str) {
    let failed: Vec<String> = outs
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.status.success())
        .map(|(i, o)| format!("process {i} ({}): {}", o.status, text(o)))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    for (i, o) in outs.iter().enumerate() {
        let t = text(o);
        assert!(
            t.contains("volley: hosts list: rank ") && t.contains(how),
            "process {i} did not say how it found its entry ({how}): {t}"
        );
    }
    let all: String = outs.iter().map(text).collect();
    assert!(
        all.contains(&format!("suite ok: {n} ranks on {fabric}")),
        "{all}"
    );
    // Each rank exactly once.
    let mut ranks: Vec<usize> = outs
        .iter()
        .map(|o| {
            let t = text(o);
            let at = t.find("hosts list: rank ").unwrap() + "hosts list: rank ".len();
            t[at..].split(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, (0..n).collect::<Vec<_>>());
}

/// Runs of each 64-host job: `VOLLEY_HOSTS_RUNS` (CI runs a few; `=10` makes the
/// ten-out-of-ten check), else `default`.
fn runs(default: usize) -> usize {
    std::env::var("VOLLEY_HOSTS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn sixty_four_hosts_by_address_pass_the_suite_on_udp_and_eth() {
    if !root() {
        return;
    }
    let _s = serial();
    let hosts = Hosts::new(64, Wiring::Bridge, false);
    let list = hosts.list(|r| hosts.addr(r));
    for (fabric, runs) in [("udp", runs(2)), ("eth", runs(1))] {
        for k in 0..runs {
            let (outs, took) = run(&hosts, 1, "suite", fabric, &list, &[]);
            passed(&outs, 64, fabric, "by interface address");
            eprintln!("64 hosts, {fabric}, run {k}: {took:?}");
        }
    }
}

#[test]
fn named_hosts_are_found_by_name_fqdn_or_resolved_name_and_a_stranger_is_told_why() {
    if !root() {
        return;
    }
    let _s = serial();
    let hosts = Hosts::new(16, Wiring::Bridge, true);
    // Short names: each rank's host name.
    let list = hosts.list(|r| hosts.name(r));
    let (outs, _) = run(&hosts, 1, "suite", "udp", &list, &[]);
    passed(&outs, 16, "udp", "by host name");
    // Fully qualified names: the short host name is their first label.
    let list = hosts.list(|r| format!("{}.cluster.test", hosts.name(r)));
    let (outs, _) = run(&hosts, 1, "suite", "udp", &list, &[]);
    passed(&outs, 16, "udp", "by host name");
    // Names that are not the host names, resolving to the hosts' addresses.
    let (_dir, key) = key_file();
    let etc = (0..16)
        .map(|r| format!("{} node-{r}.example\n", hosts.addr(r)))
        .collect::<String>();
    for r in 0..16 {
        let f = format!("/etc/netns/{}/hosts", hosts.ns(r));
        let mut all = std::fs::read_to_string(&f).unwrap();
        all.push_str(&etc);
        std::fs::write(&f, all).unwrap();
    }
    let list = hosts.list(|r| format!("node-{r}.example"));
    let (outs, _) = run(&hosts, 1, "suite", "udp", &list, &[]);
    passed(&outs, 16, "udp", "by the address its name resolves to");
    // A host the list does not name: one line saying what it is and why.
    let list = (1..16).map(|r| hosts.addr(r)).collect::<Vec<_>>().join(",");
    let argv = [
        VOLLEY, "worker", "suite", "--fabric", "udp", "--hosts", &list,
    ];
    let env = [("VOLLEY_KEY_FILE", key.as_str()), ("VOLLEY_JOB", "7")];
    let (outs, _) = wait_all(vec![hosts.spawn(0, &argv, &env)], Duration::from_secs(30));
    let o = &outs[0];
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("this host (h0; addresses ")
            && err.contains("10.77.0.1")
            && err.contains("matches no entry"),
        "{err}"
    );
}

#[test]
fn host_slots_run_several_ranks_on_each_host() {
    if !root() {
        return;
    }
    let _s = serial();
    let hosts = Hosts::new(8, Wiring::Bridge, false);
    // `addr:4`: four ranks per host, each process claiming a slot of its own.
    let list = hosts.list(|r| format!("{}:4", hosts.addr(r)));
    let (outs, _) = run(&hosts, 4, "suite", "udp", &list, &[]);
    passed(&outs, 32, "udp", "slot ");
    for o in &outs {
        assert!(text(o).contains(" of 4 on this host"), "{}", text(o));
    }
    // A fifth process on a host finds every slot taken, and says so in one line.
    let (_dir, key) = key_file();
    let hold = run_holding(&hosts, &list, &key);
    let argv = [
        VOLLEY, "worker", "attach", "--fabric", "udp", "--hosts", &list,
    ];
    let env = [("VOLLEY_KEY_FILE", key.as_str()), ("VOLLEY_JOB", "77")];
    let (outs, _) = wait_all(vec![hosts.spawn(0, &argv, &env)], Duration::from_secs(30));
    let err = String::from_utf8_lossy(&outs[0].stderr).to_string();
    for mut c in hold {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(!outs[0].status.success());
    assert!(
        err.contains("all 4 ranks the hosts list gives this host")
            && err.trim().lines().count() == 1,
        "{err}"
    );
}

/// Four processes of job 77 on host 0 that hold their slots until dropped (they
/// wait for peers that never come).
fn run_holding(hosts: &Hosts, list: &str, key: &str) -> Vec<std::process::Child> {
    let argv = [
        VOLLEY, "worker", "attach", "--fabric", "udp", "--hosts", list,
    ];
    let env = [
        ("VOLLEY_KEY_FILE", key),
        ("VOLLEY_JOB", "77"),
        ("VOLLEY_STARTUP_TIMEOUT", "20"),
    ];
    let held: Vec<_> = (0..4).map(|_| hosts.spawn(0, &argv, &env)).collect();
    // Their slots are claimed first thing.
    std::thread::sleep(Duration::from_millis(700));
    held
}

#[test]
fn sixty_four_hosts_behind_lossy_links_pass_the_suite_exactly_once() {
    if !root() {
        return;
    }
    let _s = serial();
    let hosts = Hosts::new(64, Wiring::Bare, false);
    let seed = std::env::var("VOLLEY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64);
    let list = hosts.list(|r| hosts.addr(r));
    for k in 0..runs(1) {
        let seed = seed + k as u64;
        let switch = LossySwitch::start(&hosts, 10, seed);
        // Datagrams of one path MTU each: the switch forwards frames, not the
        // segmentation offload's trains of them.
        let (outs, took) = run(&hosts, 1, "suite", "udp", &list, &[("VOLLEY_UDP_GSO", "0")]);
        let (passed_frames, dropped) = switch.finish();
        eprintln!("seed {seed}: {took:?}, {passed_frames} frames passed, {dropped} dropped");
        passed(&outs, 64, "udp", "by interface address");
        assert!(
            dropped * 100 >= (passed_frames + dropped) * 12,
            "seed {seed}: the switch lost too little: {dropped} of {}",
            passed_frames + dropped
        );
    }
}
