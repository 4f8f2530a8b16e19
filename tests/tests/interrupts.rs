//! Interrupt mode on the unikernel (`irq=on`): MSI or the card's INTx line through the
//! I/O APIC, GAMMA handlers and LFC upcalls run from the interrupt, waits that halt,
//! the polling watchdog.

use std::sync::Mutex;
use std::time::Duration;

use volley_qemu::{
    assert_barriers_and_broadcast, dgram_card, hub_card, macs, ports, run_all, Boot, Outcome,
    Verdict, E1000, E1000E, TULIP,
};

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn node(cmdline: String, extra: Vec<String>) -> Boot {
    let mut b = Boot::new(&cmdline);
    b.extra = extra;
    b.timeout = Duration::from_secs(120);
    b
}

/// Boots the nodes; every one must succeed. Returns their outcomes.
fn cluster(boots: &[Boot]) -> Vec<Outcome> {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let out = run_all(boots);
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.verdict, Verdict::Success, "node {i}:\n{}", o.console);
    }
    out
}

fn pair(app: &str, card: &str, extra: &str) -> Vec<Outcome> {
    let base = ports();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            node(
                format!("app={app} rank={i} fabric={card} macs={} {extra}", macs(2)),
                dgram_card(i, base, card),
            )
        })
        .collect();
    cluster(&boots)
}

/// 2200 ping-pong round trips where each side waits halted until its card's
/// interrupt: on every card model, each node takes card interrupts, by MSI on the
/// 82574L (or its INTx line when asked) and by INTx through the I/O APIC elsewhere.
#[test]
fn interrupt_mode_ping_pong_on_every_card() {
    for (card, mode, how) in [
        (E1000E, "irq=on", "on MSI, vector 0x30"),
        (E1000E, "irq=intx", "on I/O APIC pin"),
        (TULIP, "irq=on", "on I/O APIC pin"),
        (E1000, "irq=on", "on I/O APIC pin"),
    ] {
        let out = pair("irqpong", card, mode);
        assert!(
            out[0].console.contains("interrupt-mode one-way median"),
            "{}",
            out[0].console
        );
        for o in &out {
            assert!(o.console.contains(how), "{card} {mode}: {}", o.console);
            assert!(o.count("interrupts: card ") > 1000, "{card}: {}", o.console);
        }
    }
}

/// Four nodes with two card models on one hub: 20 barriers and a broadcast, every
/// wait halted until an interrupt.
#[test]
fn interrupt_mode_barriers_and_broadcast_on_four_nodes() {
    hub_barriers(&[E1000E, TULIP, E1000E, TULIP]);
}

/// Eight nodes on the multicast hub, halted between interrupts (so eight VMs share
/// two cores): barriers and a broadcast.
#[test]
fn interrupt_mode_barriers_and_broadcast_on_eight_nodes() {
    hub_barriers(&[E1000E, TULIP, E1000E, TULIP, E1000E, TULIP, E1000E, TULIP]);
}

fn hub_barriers(cards: &[&str]) {
    let port = ports();
    let boots: Vec<Boot> = cards
        .iter()
        .enumerate()
        .map(|(i, card)| {
            node(
                format!("app=irqbarrier irq=on rank={i} macs={}", macs(cards.len())),
                hub_card(i, port, card),
            )
        })
        .collect();
    let out = cluster(&boots);
    assert_barriers_and_broadcast(&out);
    for o in &out {
        assert!(o.count("interrupts: card ") > 0, "{}", o.console);
    }
}

/// The polling watchdog: while instance 1 polls, its card stays quiet; while it
/// computes and never polls, all 100 messages reach its handler from the interrupt.
#[test]
fn the_polling_watchdog_keeps_a_polling_program_quiet_and_serves_a_computing_one() {
    for card in [E1000E, TULIP] {
        let out = pair("watchdog", card, "irq=on irq_interval=1000");
        let o = &out[1];
        assert!(
            o.console
                .contains("computing, 100 of 100 messages reached the handler at interrupt time"),
            "{card}: {}",
            o.console
        );
        assert!(o.count("polling took ") <= 10, "{card}: {}", o.console);
        assert!(
            o.count("polls at interrupt time ") > 0,
            "{card}: {}",
            o.console
        );
    }
}

/// The LFC User Guide's chapter-5 latency program, polling then in interrupt mode,
/// where the program spins on its counter and never polls: its upcalls run from the
/// card's interrupt.
#[test]
fn the_lfc_latency_program_runs_in_polling_and_interrupt_mode() {
    for card in [E1000E, TULIP, E1000] {
        let out = pair("lfclatency", card, "irq=on");
        for mode in [1, 0] {
            assert!(
                out[0]
                    .console
                    .contains(&format!("Size   16 polling {mode} latency")),
                "{card}: {}",
                out[0].console
            );
        }
        for o in &out {
            assert!(o.count("upcalls, ") >= 1000, "{card}: {}", o.console);
        }
        if card != TULIP {
            // LFC's packets are the e1000's send slots: launches leave as descriptor
            // chains from where the program wrote them.
            for o in &out {
                assert!(o.count("from send slots ") >= 1000, "{card}: {}", o.console);
            }
        }
    }
}
