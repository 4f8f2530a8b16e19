//! Two unikernel nodes on the Myrinet-like model over one `ivshmem-plain` region, under
//! the accelerator in use: one-way latency of an 8-byte GAMMA message, next to a
//! reference row measured in the same run: the same images bouncing a counter through
//! two cache lines of the same kind of region, no NIC model and no protocol.
//!
//! `cargo bench -p volley-qemu --bench ivshmem_latency`. The two kinds of run
//! alternate; each figure is the median of 5 runs, each itself the median of 2000
//! round trips. Under TCG every guest instruction costs several host ones while the
//! flag's cache-line transfer does not, so the ratio there says more about TCG than
//! about the path; under KVM it is the path's. A last row runs the interrupt-mode
//! ping-pong (`irq=on`: each wait halts until the peer's doorbell) over
//! `ivshmem-doorbell`, the region handed out by the harness's ivshmem server.

use volley_qemu::{accel, job_id, latency_pair, median, Boot, SharedRegion};

fn pair(app: &str) -> (Option<f64>, Option<f64>) {
    let region = SharedRegion::new(16 << 20);
    // Interrupt mode needs the doorbell device, served by the harness.
    let server = (app == "irqpong").then(|| region.doorbell_server());
    let irq = if server.is_some() { " irq=on" } else { "" };
    let job = job_id();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            let mut b = Boot::new(&format!(
                "app={app} rank={i} nodes=2 fabric=ivshmem job={job}{irq}"
            ));
            b.extra = server
                .as_ref()
                .map_or_else(|| region.qemu_args(), |s| s.qemu_args());
            b
        })
        .collect();
    latency_pair(app, &boots)
}

fn main() {
    let runs = 5;
    let mut flag = Vec::new();
    let mut gamma = Vec::new();
    let mut first = Vec::new();
    let mut irq = Vec::new();
    for r in 0..runs {
        eprintln!("ivshmem latency: run {}/{runs}", r + 1);
        flag.push(pair("flagpong").0.expect("flag median printed"));
        let (g, f) = pair("latency");
        gamma.push(g.expect("gamma median printed"));
        first.push(f.expect("first sync seen"));
        irq.push(pair("irqpong").0.expect("interrupt-mode median printed"));
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{:.2}-{:.2}", lo / 1000.0, hi / 1000.0)
    };
    let (fs, gs, is) = (spread(&flag), spread(&gamma), spread(&irq));
    let (flag, gamma, first, irq) = (median(flag), median(gamma), median(first), median(irq));
    println!(
        "two unikernel nodes, Myrinet-like model over ivshmem-plain, accelerator {}",
        accel()
    );
    println!(
        "{:<52} {:>12} {:>8} {:>14}",
        "path", "one-way us", "ratio", "runs (us)"
    );
    println!(
        "{:<52} {:>12.3} {:>8} {:>14}",
        "reference: flag ping-pong through the region",
        flag / 1000.0,
        "1.00",
        fs
    );
    println!(
        "{:<52} {:>12.3} {:>8.2} {:>14}",
        "GAMMA send, 8 bytes",
        gamma / 1000.0,
        gamma / flag,
        gs
    );
    println!(
        "{:<52} {:>12.3} {:>8.2} {:>14}",
        "GAMMA send, 8 bytes, halted waits woken by doorbells",
        irq / 1000.0,
        irq / flag,
        is
    );
    println!("boot to first message (QEMU start to the first barrier, both nodes): {first:.0} ms");
}
