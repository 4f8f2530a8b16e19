//! The `shm` fabric's cost per message as a hosted process pays it, without a
//! second core: two GAMMA ranks of one job on one region (each as its process
//! would open it: the job's private directory, the mapped file, the device and
//! clock it runs with), taking turns in one thread, so every poll finds its frame.
//! `engine_cost` counts the engine on the NIC model alone; this adds the hosted
//! glue (the fabric's device wrapper, its tokens, the process clock).
//!
//! `cargo bench -p volley-hosted --bench shm_cost [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message (the receiver's empty poll before each
//! message, as a waiting receiver makes, is not timed). Under callgrind,
//! `--collect-atstart=no --toggle-collect='*shm_cost::hop*'` with `ITERS flowctl`
//! (or `send`) as arguments: the instruction count divided by `18 * ITERS` is what
//! a message costs from the send call to the end of its handler, both ends.

use std::hint::black_box;
use std::time::Instant as WallInstant;

use volley_core::gamma::{Upcall, GO_BACK};
use volley_hosted::bootstrap::{Boot, Source};
use volley_hosted::node::{self, HostGamma};
use volley_hosted::secret::Secret;
use volley_hosted::Fabric;

type G = HostGamma<u64>;

fn on_msg(u: &mut Upcall<'_, '_, u64>) {
    *u.state() += 1;
}

/// Ranks 0 and 1 of one job, port 1 of each bound to the other's. Each opens the
/// region in a thread of its own (rank 0 waits there for rank 1 to join).
fn ranks() -> (G, G) {
    let secret = Secret([9; 16]);
    let job = 0x5_0000_0000u64.wrapping_add(u64::from(std::process::id()));
    let boot = |rank| Boot {
        rank,
        size: 2,
        job,
        source: Source::Hosts,
        hosts: Vec::new(),
        secret: Some(secret),
    };
    let (mut a, mut b) = std::thread::scope(|s| {
        let a = s.spawn(|| node::gamma(&boot(0), Fabric::Shm, 0u64).unwrap());
        let b = s.spawn(|| node::gamma(&boot(1), Fabric::Shm, 0u64).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    for (g, peer) in [(&mut a, 1u16), (&mut b, 0)] {
        let pid = g.my_par_pid();
        g.set_active_port(
            1,
            peer,
            pid,
            1,
            Some(on_msg),
            None,
            1,
            GO_BACK,
            Some(Vec::leak(vec![0u8; 4096])),
        )
        .unwrap();
    }
    (a, b)
}

/// One message from `from` to `to`: sent, then polled until its handler ran.
#[inline(never)]
fn hop(from: &mut G, to: &mut G, data: &[u8], reliable: bool) {
    if reliable {
        from.send_flowctl(1, data).unwrap();
    } else {
        from.send(1, data).unwrap();
    }
    to.wait(1, 1).unwrap();
}

/// Nanoseconds of `2 * iters` hops, each after its receiver's empty poll (untimed).
#[inline(never)]
fn measured(a: &mut G, b: &mut G, iters: usize, reliable: bool) -> f64 {
    let data = [7u8; 8];
    let mut ns = 0;
    for _ in 0..iters {
        black_box(b.test(1).unwrap());
        let t = WallInstant::now();
        hop(a, b, &data, reliable);
        ns += t.elapsed().as_nanos();
        black_box(a.test(1).unwrap());
        let t = WallInstant::now();
        hop(b, a, &data, reliable);
        ns += t.elapsed().as_nanos();
    }
    ns as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    // `send` or `flowctl` measures only that row (for callgrind); cargo's `--bench`
    // flag is ignored.
    let only = args
        .iter()
        .find(|a| ["send", "flowctl"].contains(&a.as_str()));
    let rounds = 9;
    let per_msg = |ns: f64| ns / (2 * iters) as f64;
    for (reliable, row, name) in [
        (false, "send", "GAMMA send, 8 B, shm"),
        (true, "flowctl", "GAMMA send_flowctl, 8 B, shm"),
    ] {
        if only.is_some_and(|o| o != row) {
            continue;
        }
        let (mut a, mut b) = ranks();
        let ns = median(
            (0..rounds)
                .map(|_| per_msg(measured(&mut a, &mut b, iters, reliable)))
                .collect(),
        );
        assert_eq!(*a.state() + *b.state(), (2 * rounds * iters) as u64);
        println!("{:<44} {:>9.1} ns", name, ns);
        a.exit();
        b.exit();
    }
}
