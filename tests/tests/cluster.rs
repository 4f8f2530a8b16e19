//! Several unikernel nodes, each its own QEMU, talking GAMMA over their e1000s.
//! One cluster at a time: the machine has 2 cores and TCG is not fast.

use std::sync::Mutex;
use std::time::Duration;

use volley_qemu::{dgram_nic, hub_nic, macs, ports, run_all, Boot, Verdict};

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn node(cmdline: String, extra: Vec<String>) -> Boot {
    let mut b = Boot::new(&cmdline);
    b.extra = extra;
    b.timeout = Duration::from_secs(120);
    b
}

#[test]
fn two_nodes_ping_pong_up_to_1_mib_over_e1000() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let base = ports();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            node(
                format!("app=pingpong rank={i} macs={}", macs(2)),
                dgram_nic(i, base),
            )
        })
        .collect();
    let out = run_all(&boots);
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.verdict, Verdict::Success, "node {i}:\n{}", o.console);
    }
    for len in [8, 1000, 65_536, 1_048_576] {
        assert!(
            out[0].console.contains(&format!("pingpong {len} B ok")),
            "{}",
            out[0].console
        );
    }
}

#[test]
fn four_nodes_run_barriers_and_a_broadcast() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let port = ports();
    let boots: Vec<Boot> = (0..4)
        .map(|i| {
            node(
                format!("app=barrier rank={i} macs={}", macs(4)),
                hub_nic(i, port),
            )
        })
        .collect();
    let out = run_all(&boots);
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.verdict, Verdict::Success, "node {i}:\n{}", o.console);
    }
    assert!(
        out[0].console.contains("20 barriers ok"),
        "{}",
        out[0].console
    );
    for (i, o) in out.iter().enumerate().skip(1) {
        assert!(
            o.console.contains(&format!("node {i} got the broadcast")),
            "{}",
            o.console
        );
    }
}

#[test]
fn a_node_that_never_starts_is_a_sendfailure_not_a_hang() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let base = ports();
    // Node 1 is in the MAC table but never booted.
    let b = node(
        format!("app=pingpong rank=0 macs={}", macs(2)),
        dgram_nic(0, base),
    );
    let out = run_all(&[b]);
    let o = &out[0];
    assert_eq!(o.verdict, Verdict::Failure, "{}", o.console);
    assert!(
        o.console.contains("first sync: SENDFAILURE"),
        "{}",
        o.console
    );
    assert!(o.took < Duration::from_secs(60), "took {:?}", o.took);
}
