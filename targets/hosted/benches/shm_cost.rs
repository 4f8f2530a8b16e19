//! The `shm` fabric's cost per message as a hosted process pays it, without a
//! second core: two GAMMA ranks of one job on one region, each opening it as its
//! process would (the job's private directory, the mapped file, the device and clock
//! it runs with). `engine_cost` counts the engine on the NIC model alone; this adds
//! the hosted glue (the fabric's device wrapper, its tokens, the process clock). The
//! reference row is the fabric's device alone: an 8-byte frame written into the
//! peer's ring and read out, no engine.
//!
//! `cargo bench -p volley-hosted --bench shm_cost [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message (the receiver's empty poll before each
//! message, as a waiting receiver makes, is not timed); under callgrind, see
//! `cost/mod.rs`.

mod cost;

use volley_hosted::node;
use volley_hosted::shm::{ShmDevice, ShmOptions};
use volley_hosted::Fabric;

/// A job id of this process, `k` telling its jobs apart.
fn job(k: u64) -> u64 {
    0x5_0000_0000 + u64::from(std::process::id()) * 8 + k
}

fn main() {
    let args = cost::Args::parse();
    cost::run(
        &args,
        "shm",
        "reference: the shm device alone, 8 B",
        |iters| {
            let open = |b: &_| ShmDevice::open(b, ShmOptions::default());
            let (mut a, mut b) = cost::pair("shm_cost", job(0), open);
            Box::new(move || cost::measured_bare(&mut a, &mut b, iters))
        },
        |k| cost::pair("shm_cost", job(k), |b| node::gamma(b, Fabric::Shm, 0u64)),
    );
}
