//! Two unikernel nodes on the Myrinet-like model over one `ivshmem-plain` region, under
//! the accelerator in use: one-way latency of an 8-byte GAMMA message, next to a
//! reference row measured in the same run: the same images bouncing a counter through
//! two cache lines of the same kind of region, no NIC model and no protocol.
//!
//! `cargo bench -p volley-qemu --bench ivshmem_latency`. The two kinds of run
//! alternate; each figure is the median of 5 runs, each itself the median of 2000
//! round trips. Under TCG every guest instruction costs several host ones while the
//! flag's cache-line transfer does not, so the ratio there says more about TCG than
//! about the path; under KVM it is the path's.

use volley_qemu::{accel, job_id, latency_pair, median, Boot, SharedRegion};

fn pair(app: &str) -> (Option<f64>, Option<f64>) {
    let region = SharedRegion::new(16 << 20);
    let job = job_id();
    let boots: Vec<Boot> = (0..2)
        .map(|i| {
            let mut b = Boot::new(&format!(
                "app={app} rank={i} nodes=2 fabric=ivshmem job={job}"
            ));
            b.extra = region.qemu_args();
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
    for r in 0..runs {
        eprintln!("ivshmem latency: run {}/{runs}", r + 1);
        flag.push(pair("flagpong").0.expect("flag median printed"));
        let (g, f) = pair("latency");
        gamma.push(g.expect("gamma median printed"));
        first.push(f.expect("first sync seen"));
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{:.2}-{:.2}", lo / 1000.0, hi / 1000.0)
    };
    let (fs, gs) = (spread(&flag), spread(&gamma));
    let (flag, gamma, first) = (median(flag), median(gamma), median(first));
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
    println!("boot to first message (QEMU start to the first barrier, both nodes): {first:.0} ms");
}
