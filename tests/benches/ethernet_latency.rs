//! Two unikernel nodes over each Ethernet card (the e1000, the 82574L and the DEC 21143) under the
//! accelerator in use: one-way latency of an 8-byte GAMMA message, next to a reference
//! row measured in the same run by the same images bouncing a raw Ethernet frame
//! through the same driver with no protocol on top, and next to the same exchange in
//! interrupt mode (waits halted until the card's interrupt); and the boot time, from the start
//! of the QEMU processes to the first completed GAMMA exchange (the first barrier) on
//! both nodes, as the harness sees their console lines arrive. Then the `udp` fabric (smoltcp on the
//! 21143, through QEMU's user-mode network and the host's loopback, as in a job with
//! processes): GAMMA next to a bare UDP datagram bounced over the same path.
//!
//! `cargo bench -p volley-qemu --bench ethernet_latency`. Medians of 3 runs, each itself
//! the median of 2000 round trips.

use volley_qemu::{
    accel, dgram_card, latency_pair, mac, macs, median, ports, Boot, E1000, E1000E, TULIP,
};

fn pair(app: &str, card: &str) -> (Option<f64>, Option<f64>) {
    let base = ports();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            // The interrupt-mode ping-pong needs interrupt mode.
            let irq = if app == "irqpong" { " irq=on" } else { "" };
            let mut b = Boot::new(&format!(
                "app={app} rank={i} fabric={card} macs={}{irq}",
                macs(2)
            ));
            b.extra = dgram_card(i, base, card);
            b
        })
        .collect();
    latency_pair(app, &boots)
}

/// Two nodes on the `udp` fabric, each behind its own QEMU user-mode network.
fn udp_pair(app: &str) -> Option<f64> {
    let base = ports();
    let port = |i: u16| base + 2000 + i;
    let peers = format!("10.0.2.2:{},10.0.2.2:{}", port(0), port(1));
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            let mut b = Boot::new(&format!(
                "app={app} rank={i} fabric=udp ip=10.0.2.15/24 gw=10.0.2.2 peers={peers}"
            ));
            b.extra = vec![
                "-netdev".into(),
                format!("user,id=n0,hostfwd=udp:127.0.0.1:{0}-:{0}", port(i)),
                "-device".into(),
                format!("{TULIP},netdev=n0,mac={},romfile=", mac(i as usize)),
            ];
            b
        })
        .collect();
    latency_pair(app, &boots).0
}

fn main() {
    let runs = 3;
    println!(
        "two unikernel nodes over -netdev dgram, accelerator {}",
        accel()
    );
    println!("{:<60} {:>12} {:>8}", "path", "one-way us", "ratio");
    let mut boot = Vec::new();
    for card in [E1000, E1000E, TULIP] {
        let (mut raw, mut gamma, mut irq, mut first) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..runs {
            eprintln!("{card} latency: run {}/{runs}", r + 1);
            raw.push(pair("rawpong", card).0.expect("raw median printed"));
            let (g, f) = pair("latency", card);
            gamma.push(g.expect("gamma median printed"));
            first.push(f.expect("first sync seen"));
            irq.push(
                pair("irqpong", card)
                    .0
                    .expect("interrupt-mode median printed"),
            );
        }
        let (raw, gamma, irq) = (median(raw), median(gamma), median(irq));
        println!(
            "{:<60} {:>12.2} {:>8}",
            format!("{card}: reference, raw Ethernet frame through the driver"),
            raw / 1000.0,
            "1.00"
        );
        println!(
            "{:<60} {:>12.2} {:>8.2}",
            format!("{card}: GAMMA send, 8 bytes, polled"),
            gamma / 1000.0,
            gamma / raw
        );
        println!(
            "{:<60} {:>12.2} {:>8.2}",
            format!("{card}: GAMMA send, 8 bytes, interrupt-driven (irq=on)"),
            irq / 1000.0,
            irq / raw
        );
        boot.push((card, median(first)));
    }
    let (mut raw, mut gamma) = (Vec::new(), Vec::new());
    for r in 0..runs {
        eprintln!("udp latency: run {}/{runs}", r + 1);
        raw.push(udp_pair("rawpong").expect("raw median printed"));
        gamma.push(udp_pair("latency").expect("gamma median printed"));
    }
    let (raw, gamma) = (median(raw), median(gamma));
    println!(
        "{:<60} {:>12.2} {:>8}",
        "udp (tulip, user network): reference, bare UDP datagram",
        raw / 1000.0,
        "1.00"
    );
    println!(
        "{:<60} {:>12.2} {:>8.2}",
        "udp (tulip, user network): GAMMA send, 8 bytes",
        gamma / 1000.0,
        gamma / raw
    );
    for (card, ms) in boot {
        let note = if card == E1000 {
            " (QEMU's 8254x model holds reception off for 1 s after RCTL is written)"
        } else {
            ""
        };
        println!("{card}: QEMU start to the first message, both nodes, {ms:.0} ms{note}");
    }
}
