//! Two unikernel nodes over e1000 under the accelerator in use: one-way latency of an
//! 8-byte GAMMA message, next to a reference row measured in the same run by the same
//! images bouncing a raw Ethernet frame through the driver with no protocol on top;
//! and the time from kernel entry to the first GAMMA exchange (the first barrier).
//!
//! `cargo bench -p volley-qemu --bench e1000_latency`. Medians of 3 runs, each itself
//! the median of 2000 round trips.

use volley_qemu::{accel, dgram_nic, latency_pair, macs, median, ports, Boot};

fn pair(app: &str) -> (Option<f64>, Option<f64>) {
    let base = ports();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            let mut b = Boot::new(&format!("app={app} rank={i} macs={}", macs(2)));
            b.extra = dgram_nic(i, base);
            b
        })
        .collect();
    latency_pair(app, &boots)
}

fn main() {
    let runs = 3;
    let mut raw = Vec::new();
    let mut gamma = Vec::new();
    let mut first = Vec::new();
    for r in 0..runs {
        eprintln!("e1000 latency: run {}/{runs}", r + 1);
        raw.push(pair("rawpong").0.expect("raw median printed"));
        let (g, f) = pair("latency");
        gamma.push(g.expect("gamma median printed"));
        first.push(f.expect("first sync printed"));
    }
    let (raw, gamma, first) = (median(raw), median(gamma), median(first));
    println!(
        "two unikernel nodes, e1000 over -netdev dgram, accelerator {}",
        accel()
    );
    println!("{:<52} {:>12} {:>8}", "path", "one-way us", "ratio");
    println!(
        "{:<52} {:>12.2} {:>8}",
        "reference: raw Ethernet frame through the driver",
        raw / 1000.0,
        "1.00"
    );
    println!(
        "{:<52} {:>12.2} {:>8.2}",
        "GAMMA send, 8 bytes",
        gamma / 1000.0,
        gamma / raw
    );
    println!("boot to first message (kernel entry to the first barrier, incl. QEMU's 1 s RCTL hold-off): {first:.0} ms");
}
