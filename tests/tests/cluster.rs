//! Several unikernel nodes, each its own QEMU, talking GAMMA (and Cheetah core, QNIX)
//! over their e1000s and 21143s.
//! One cluster at a time: the machine has 2 cores and TCG is not fast.

use std::sync::Mutex;
use std::time::Duration;

use volley_qemu::{
    assert_barriers_and_broadcast, dgram_card, dgram_nic, hub_card, macs, ports, run_all, Boot,
    Outcome, Verdict, E1000, E1000E, TULIP,
};

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn node(cmdline: String, extra: Vec<String>) -> Boot {
    let mut b = Boot::new(&cmdline);
    b.extra = extra;
    b.timeout = Duration::from_secs(120);
    b
}

/// Two nodes with `card` on a point-to-point link (the kernel told `fabric=card`)
/// ping-pong 8 B to 1 MiB, every byte checked; each found its card by itself.
fn pingpong_over(card: &str) {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let base = ports();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            node(
                format!("app=pingpong rank={i} fabric={card} macs={}", macs(2)),
                dgram_card(i, base, card),
            )
        })
        .collect();
    let out = run_all(&boots);
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.verdict, Verdict::Success, "node {i}:\n{}", o.console);
        assert!(o.console.contains(&format!("{card} mac")), "{}", o.console);
        assert!(o.when("first sync after").is_some(), "{}", o.console);
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
fn two_nodes_ping_pong_up_to_1_mib_over_e1000() {
    pingpong_over(E1000);
}

/// The 82574L (QEMU's `e1000e`) on the same driver. (How soon the first message
/// completes is the `ethernet_latency` benchmark's figure.)
#[test]
fn two_nodes_ping_pong_up_to_1_mib_over_the_82574() {
    pingpong_over(E1000E);
}

#[test]
fn two_nodes_ping_pong_up_to_1_mib_over_the_21143() {
    pingpong_over(TULIP);
}

#[test]
fn four_nodes_run_barriers_and_a_broadcast() {
    hub_cluster("barrier", &[E1000; 4]);
}

/// Nodes of one job that boot seconds apart (a busy host, a slow launcher) still
/// form it: node 0 starts twice the peer timeout (4 s) after the others, which wait
/// for a node never heard from longer than for one that went silent.
#[test]
fn a_node_that_boots_late_still_joins_the_job() {
    let late = Duration::from_secs(8);
    let out = on_hub_late("barrier", &[E1000; 4], Some((0, late)));
    let consoles = check_hub_cluster(out, &[E1000; 4]);
    // Someone did wait longer than the peer timeout for it (their first barrier;
    // the others may be late too on a busy host, but not all by 2 s).
    let waited = consoles.iter().enumerate().skip(1).map(|(i, c)| {
        let ms = c
            .split(&format!("node {i} of 4: first sync after "))
            .nth(1)
            .and_then(|rest| rest.split(' ').next()?.parse::<u64>().ok());
        (ms.unwrap_or_else(|| panic!("node {i}:\n{c}")), i)
    });
    let (longest, who) = waited.max().unwrap();
    assert!(longest >= 6_000, "node {who} waited longest, {longest} ms");
}

#[test]
fn a_node_that_never_starts_is_a_sendfailure_not_a_hang() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let base = ports();
    // Node 1 is in the MAC table but never booted; it is waited for `startup=`,
    // longer than the 4 s after which a node that went silent is given up.
    let b = node(
        format!("app=pingpong rank=0 startup=8 macs={}", macs(2)),
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
    let failed = o.when("first sync: SENDFAILURE").unwrap();
    assert!(failed >= Duration::from_secs(8), "after {failed:?}");
    // It says whom it waited for.
    let named = "node 1 never heard from within startup=8 s";
    assert!(o.console.contains(named), "{}", o.console);
}

/// A node holding another key (another job, or an attacker on the LAN who does not
/// know the secret) cannot talk to the cluster: its frames fail authentication, and
/// the node that waits for it reports SENDFAILURE.
#[test]
fn a_node_with_another_key_is_not_heard() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let base = ports();
    let other = volley_qemu::new_key_file();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            // Not heard from: given up after `startup=`.
            let mut b = node(
                format!("app=pingpong rank={i} startup=5 macs={}", macs(2)),
                dgram_nic(i, base),
            );
            if i == 1 {
                b.key_file = Some(other.clone());
            }
            b
        })
        .collect();
    let out = run_all(&boots);
    let _ = std::fs::remove_dir_all(other.parent().unwrap());
    assert_eq!(out[0].verdict, Verdict::Failure, "{}", out[0].console);
    assert!(
        out[0].console.contains("first sync: SENDFAILURE"),
        "{}",
        out[0].console
    );
    let named = "node 1 never heard from within startup=5 s";
    assert!(out[0].console.contains(named), "{}", out[0].console);
    let dropped: u64 = out[0]
        .console
        .lines()
        .find_map(|l| {
            l.strip_prefix("volley unikernel: ")?
                .strip_suffix(" frames failed authentication")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(dropped > 0, "{}", out[0].console);
}

/// A node given no usable key refuses to run, saying how to give one.
#[test]
fn a_node_without_a_key_refuses_to_run() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let bad = volley_qemu::new_key_file();
    std::fs::write(&bad, "not hex").unwrap();
    let mut b = node(
        format!("app=pingpong rank=0 macs={}", macs(2)),
        dgram_nic(0, ports()),
    );
    b.key_file = Some(bad.clone());
    b.timeout = std::time::Duration::from_secs(60);
    let out = run_all(&[b]);
    let _ = std::fs::remove_dir_all(bad.parent().unwrap());
    assert_eq!(out[0].verdict, Verdict::Failure, "{}", out[0].console);
    assert!(out[0].console.contains("no job key"), "{}", out[0].console);
}

/// Runs `app` on one node per entry of `cards`, node `i` with `cards[i]`, all on
/// one hub (one cluster at a time).
fn on_hub(app: &str, cards: &[&str]) -> Vec<Outcome> {
    on_hub_late(app, cards, None)
}

/// [`on_hub`] with node `late.0` started `late.1` after the others.
fn on_hub_late(app: &str, cards: &[&str], late: Option<(usize, Duration)>) -> Vec<Outcome> {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let port = ports();
    let n = cards.len();
    let boots: Vec<Boot> = cards
        .iter()
        .enumerate()
        .map(|(i, card)| {
            let mut b = node(
                format!("app={app} rank={i} macs={}", macs(n)),
                hub_card(i, port, card),
            );
            if let Some((_, after)) = late.filter(|&(who, _)| who == i) {
                b.start_after = after;
            }
            b
        })
        .collect();
    run_all(&boots)
}

/// Barriers and a broadcast on four nodes with `cards[i]` on one hub; with `app=mixed`
/// instances 0 and 1 first ping-pong up to 1 MiB. Returns the consoles.
fn hub_cluster(app: &str, cards: &[&str]) -> Vec<String> {
    check_hub_cluster(on_hub(app, cards), cards)
}

/// What [`hub_cluster`] checks of the nodes' outcomes `out`.
fn check_hub_cluster(out: Vec<Outcome>, cards: &[&str]) -> Vec<String> {
    // One node's failure is often another's doing: show every console.
    let all: String = out
        .iter()
        .enumerate()
        .map(|(i, o)| {
            format!(
                "--- node {i} ({}), {:?}:\n{}\n",
                cards[i], o.verdict, o.console
            )
        })
        .collect();
    for (i, o) in out.iter().enumerate() {
        assert_eq!(
            o.verdict,
            Verdict::Success,
            "node {i} failed; all nodes:\n{all}"
        );
        assert!(
            o.console.contains(&format!("{} mac", cards[i])),
            "node {i} found its {} by itself:\n{}",
            cards[i],
            o.console
        );
    }
    assert_barriers_and_broadcast(&out);
    out.into_iter().map(|o| o.console).collect()
}

#[test]
fn four_21143_nodes_run_barriers_and_a_broadcast() {
    hub_cluster("barrier", &[TULIP; 4]);
}

/// e1000, 82574L and 21143 nodes on one hub are one job: the ping-pong crosses from
/// one kind of card to another, the barriers and the broadcast span all three.
#[test]
fn e1000_and_21143_nodes_share_one_lan() {
    let consoles = hub_cluster("mixed", &[E1000, TULIP, E1000E, TULIP]);
    for len in [8, 1000, 65_536, 1_048_576] {
        assert!(
            consoles[0].contains(&format!("pingpong {len} B ok")),
            "{}",
            consoles[0]
        );
    }
}

/// Runs `app` on nodes with `cards[i]` on one hub; every node must succeed and
/// print `{app} ok: {who} i of n`. Returns the consoles.
fn hub_app(app: &str, who: &str, cards: &[&str]) -> Vec<String> {
    let out = on_hub(app, cards);
    let n = cards.len();
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.verdict, Verdict::Success, "node {i}:\n{}", o.console);
        assert!(
            o.console.contains(&format!("{app} ok: {who} {i} of {n}")),
            "{}",
            o.console
        );
    }
    out.into_iter().map(|o| o.console).collect()
}

/// Cheetah core on three nodes (an e1000, a 21143 and an 82574L on one hub): a
/// put ring and a get ring with both bells and every byte checked, handlers
/// invoked from context 0 (one answers with an invocation, one puts back), a put
/// to memory context 1 never exposed refused there, barrier and finalize.
#[test]
fn three_nodes_run_cheetah_puts_gets_and_handlers() {
    let out = hub_app("cheetah", "context", &[E1000, TULIP, E1000E]);
    assert!(
        out[1].contains(" 1 denied"),
        "context 1 refused the hostile put:\n{}",
        out[1]
    );
}

/// QNIX on three nodes of one hub: contexts matched by tag, a short message kept
/// early, a 64 KB message by rendezvous straight into the receiver's buffer pool,
/// every byte checked; a group of all with barriers and a broadcast.
#[test]
fn three_nodes_run_qnix_contexts_a_rendezvous_groups_and_barriers() {
    for console in hub_app("qnix", "process", &[E1000; 3]) {
        assert!(
            console.contains("(1 by rendezvous)"),
            "the long message went by rendezvous:\n{console}"
        );
    }
}
