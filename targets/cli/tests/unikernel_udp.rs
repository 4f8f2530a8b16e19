//! Linux processes and unikernel nodes as ranks of one job over the `udp` fabric, with
//! nothing that needs root: each unikernel node is a QEMU on its user-mode network
//! (NAT), its port forwarded from the host's loopback (`hostfwd`), reaching the others
//! through the gateway 10.0.2.2, which is the host. Processes use the same datagrams:
//! `VOLLEY_UDP_MTU=1472` (an Ethernet MTU, what the nodes' IP stack sends) and
//! `VOLLEY_UDP_ANY_SOURCE=1` (a node's datagrams come from QEMU's NAT port, not its own).

use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

mod relay;

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");

/// One job at a time: every rank busy-polls and TCG is not fast.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A UDP port free on loopback now.
fn free_port() -> u16 {
    relay::free_port().port()
}

/// A job: `kinds[r]` says what rank `r` is: `Some(card)` a unikernel node with that
/// card running `node_app`, `None` a process running `volley worker <worker>`.
struct Job<'a> {
    kinds: &'a [Option<&'a str>],
    node_app: &'a str,
    worker: &'a str,
    env: &'a [(&'a str, &'a str)],
}

/// What each rank of a kind did, with its rank.
type Ranks<T> = Vec<(usize, T)>;

/// Runs the job; returns the processes' outputs and the nodes' outcomes, in rank order
/// within each kind.
fn run(job: &Job<'_>) -> (Ranks<Output>, Ranks<volley_qemu::Outcome>) {
    volley_qemu::image();
    let n = job.kinds.len();
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let id = volley_qemu::job_id();
    let key = volley_qemu::job_key_file().display().to_string();
    // Everyone reaches every rank at a loopback port of the host: the nodes through
    // their gateway, the processes directly.
    let guest_peers = ports
        .iter()
        .map(|p| format!("10.0.2.2:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let host_peers = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let nodes: Vec<(usize, volley_qemu::Boot)> = job
        .kinds
        .iter()
        .enumerate()
        .filter_map(|(r, k)| k.map(|card| (r, card)))
        .map(|(r, card)| {
            let mut b = volley_qemu::Boot::new(&format!(
                "app={} rank={r} job={id:#x} fabric=udp ip=10.0.2.15/24 gw=10.0.2.2 peers={guest_peers}",
                job.node_app
            ));
            b.timeout = Duration::from_secs(180);
            b.extra = vec![
                "-netdev".into(),
                format!("user,id=n0,hostfwd=udp:127.0.0.1:{0}-:{0}", ports[r]),
                "-device".into(),
                format!("{card},netdev=n0,mac={},romfile=", volley_qemu::mac(r)),
            ];
            (r, b)
        })
        .collect();
    let boots: Vec<volley_qemu::Boot> = nodes.iter().map(|(_, b)| b.clone()).collect();
    let qemu = thread::spawn(move || volley_qemu::run_all(&boots));
    let procs: Vec<(usize, Child)> = job
        .kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| k.is_none())
        .map(|(r, _)| {
            let child = Command::new("timeout")
                .args(["180", VOLLEY, "worker", job.worker])
                .env("VOLLEY_RANK", r.to_string())
                .env("VOLLEY_SIZE", n.to_string())
                .env("VOLLEY_JOB", format!("{id:#x}"))
                .env_remove("VOLLEY_SECRET")
                .env("VOLLEY_KEY_FILE", &key)
                .env("VOLLEY_FABRIC", "udp")
                .env("VOLLEY_UDP_PEERS", &host_peers)
                .env("VOLLEY_UDP_MTU", "1472")
                .env("VOLLEY_UDP_ANY_SOURCE", "1")
                .envs(job.env.iter().copied())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("volley runs");
            (r, child)
        })
        .collect();
    let outs = procs
        .into_iter()
        .map(|(r, c)| (r, c.wait_with_output().expect("waited")))
        .collect();
    let outcomes = qemu.join().expect("the QEMU runner");
    let ranks = nodes.iter().map(|(r, _)| *r);
    (outs, ranks.zip(outcomes).collect())
}

fn consoles(nodes: &[(usize, volley_qemu::Outcome)]) -> String {
    nodes
        .iter()
        .map(|(r, o)| format!("node {r}:\n{}", o.console))
        .collect::<Vec<_>>()
        .join("\n----\n")
}

/// Ranks 0 and 2 are processes, 1 (a 21143) and 3 (an e1000) unikernel nodes: the
/// ping-pong crosses from a process to a node, the barriers and the broadcast (from
/// a process) span both kinds.
#[test]
fn processes_and_unikernel_nodes_are_one_job_over_udp() {
    let _g = serial();
    let (procs, nodes) = run(&Job {
        kinds: &[
            None,
            Some(volley_qemu::TULIP),
            None,
            Some(volley_qemu::E1000),
        ],
        node_app: "mixed",
        worker: "mixed",
        env: &[],
    });
    let all = consoles(&nodes);
    for (r, o) in &procs {
        let t = text(o);
        assert!(
            o.status.success(),
            "rank {r}:\n{t}\nunikernel nodes:\n{all}"
        );
        assert!(
            t.contains(&format!("mixed ok: rank {r} of 4 on udp")),
            "rank {r}:\n{t}"
        );
    }
    for (r, o) in &nodes {
        assert_eq!(o.verdict, volley_qemu::Verdict::Success, "{all}");
        assert!(o.console.contains("udp 10.0.2.15/24"), "node {r}: {all}");
        assert!(
            o.console.contains(&format!("node {r} got the broadcast")),
            "{all}"
        );
    }
}

/// Two unikernel nodes (a 21143, an e1000) and two processes in one job; the last
/// process kills itself after three messages. Every survivor sending to it gets
/// SENDFAILURE instead of hanging: the nodes and the other process alike.
#[test]
fn a_killed_process_is_a_sendfailure_on_the_unikernel_nodes() {
    let _g = serial();
    let (procs, nodes) = run(&Job {
        kinds: &[
            Some(volley_qemu::TULIP),
            Some(volley_qemu::E1000),
            None,
            None,
        ],
        node_app: "sendfail",
        worker: "victim",
        env: &[],
    });
    let all = consoles(&nodes);
    let (_, survivor) = &procs[0];
    let t = text(survivor);
    assert_eq!(
        survivor.status.code(),
        Some(4),
        "GAMMA's SENDFAILURE:\n{t}\n{all}"
    );
    assert!(t.contains("rank 2: SENDFAILURE sending to rank 3"), "{t}");
    let (_, victim) = &procs[1];
    assert!(
        !victim.status.success(),
        "the victim died: {}",
        text(victim)
    );
    for (r, node) in &nodes {
        assert_eq!(
            node.verdict,
            volley_qemu::Verdict::Success,
            "node {r}: {all}"
        );
        assert!(node.console.contains("node 3 found dead after"), "{all}");
    }
}

/// `volley run --unikernel 1`: the launcher boots the last rank as a unikernel node
/// next to two processes, one job, the node's console under its `[rank]` prefix; the
/// key file it made for the node is gone afterwards.
#[test]
fn volley_run_starts_unikernel_ranks_next_to_processes() {
    let _g = serial();
    volley_qemu::image();
    let keys = || {
        std::fs::read_dir(std::env::temp_dir())
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("volley-key-"))
                    .count()
            })
            .unwrap_or(0)
    };
    let before = keys();
    let out = Command::new("timeout")
        .args(["180", VOLLEY, "run", "-n", "3", "--unikernel", "1"])
        .args(["--timeout", "150", "--", VOLLEY, "worker", "mixed"])
        .env_remove("VOLLEY_UDP_MTU")
        .output()
        .expect("volley runs");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for r in 0..2 {
        assert!(
            t.contains(&format!("[{r}] mixed ok: rank {r} of 3 on udp")),
            "{t}"
        );
    }
    assert!(t.contains("[2] volley unikernel: tulip mac"), "{t}");
    assert!(
        t.contains("[2] volley unikernel: node 2 got the broadcast"),
        "{t}"
    );
    assert_eq!(keys(), before, "the node's key file is removed");
    // Misuse is one line and exit code 2, before anything starts.
    let bad = Command::new(VOLLEY)
        .args([
            "run",
            "-n",
            "2",
            "--unikernel",
            "1",
            "--fabric",
            "shm",
            "--",
            "true",
        ])
        .output()
        .expect("volley runs");
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(
        text(&bad).trim(),
        "volley run: --unikernel needs the udp fabric"
    );
}
