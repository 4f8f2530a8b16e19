//! The `shm` fabric's cost per message as a hosted process pays it, without a
//! second core: two GAMMA ranks of one job on one region (each as its process
//! would open it: the job's private directory, the mapped file, the device and
//! clock it runs with), taking turns in one thread, so every poll finds its frame.
//! `engine_cost` counts the engine on the NIC model alone; this adds the hosted
//! glue (the fabric's device wrapper, its tokens, the process clock). The reference
//! row is the fabric's device alone: an 8-byte frame written into the peer's ring
//! and read out, no engine.
//!
//! `cargo bench -p volley-hosted --bench shm_cost [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message (the receiver's empty poll before each
//! message, as a waiting receiver makes, is not timed). Under callgrind,
//! `--collect-atstart=no --toggle-collect='*shm_cost::hop*'` with `ITERS flowctl`
//! (or `send`, or `bare` with `'*shm_cost::bare_hop*'`) as arguments: the
//! instruction count divided by `18 * ITERS` is what a message costs from the send
//! call to the end of its handler, both ends.

use std::hint::black_box;
use std::time::Instant as WallInstant;

use volley_core::gamma::{Upcall, GO_BACK};
use volley_core::phy::{Device, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::NodeAddr;
use volley_hosted::bootstrap::{Boot, Source};
use volley_hosted::node::{self, HostGamma};
use volley_hosted::secret::Secret;
use volley_hosted::shm::{ShmDevice, ShmOptions};
use volley_hosted::{Fabric, HostError};

type G = HostGamma<u64>;

fn on_msg(u: &mut Upcall<'_, '_, u64>) {
    *u.state() += 1;
}

/// Rank `rank` of the 2-rank job `job`.
fn boot(job: u64, rank: u16) -> Boot {
    Boot {
        rank,
        size: 2,
        job,
        source: Source::Hosts,
        hosts: Vec::new(),
        secret: Some(Secret([9; 16])),
    }
}

/// A job id of this process, `k` telling its jobs apart.
fn job(k: u64) -> u64 {
    0x5_0000_0000 + u64::from(std::process::id()) * 8 + k
}

/// Both ranks' `open` of job `job`, each in a thread of its own (rank 0 waits there
/// for rank 1 to join); a failure is one line and exit status 2.
fn pair<T: Send>(job: u64, open: impl Fn(&Boot) -> Result<T, HostError> + Sync) -> (T, T) {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| open(&boot(job, 0)));
        let b = s.spawn(|| open(&boot(job, 1)));
        (a.join(), b.join())
    });
    match (a, b) {
        (Ok(Ok(a)), Ok(Ok(b))) => (a, b),
        (Ok(Err(e)), _) | (_, Ok(Err(e))) => {
            eprintln!("shm_cost: {e}");
            std::process::exit(2);
        }
        _ => {
            eprintln!("shm_cost: opening the shm fabric panicked");
            std::process::exit(2);
        }
    }
}

/// Ranks 0 and 1 of job `job`, port 1 of each bound to the other's.
fn ranks(job: u64) -> (G, G) {
    let (mut a, mut b) = pair(job, |b| node::gamma(b, Fabric::Shm, 0u64));
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

/// The bare exchange: 8 bytes written into `to`'s ring from `from`, then read.
#[inline(never)]
fn bare_hop(from: &mut ShmDevice, to: &mut ShmDevice, to_rank: u16, i: u64) {
    let now = Instant::ZERO;
    if let Some(tok) = from.transmit(now, NodeAddr(to_rank)) {
        tok.consume(8, |f| f.copy_from_slice(&i.to_le_bytes()));
    }
    loop {
        if let Some(tok) = to.receive(now) {
            black_box(tok.consume(|f| f.first().copied()));
            return;
        }
    }
}

/// Nanoseconds of `2 * iters` bare hops, each timed as [`measured`] times a hop.
#[inline(never)]
fn measured_bare(a: &mut ShmDevice, b: &mut ShmDevice, iters: usize) -> f64 {
    let mut ns = 0;
    for i in 0..iters as u64 {
        let t = WallInstant::now();
        bare_hop(a, b, 1, i);
        ns += t.elapsed().as_nanos();
        let t = WallInstant::now();
        bare_hop(b, a, 0, i);
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
    // `send`, `flowctl` or `bare` measures only that row (for callgrind); cargo's
    // `--bench` flag is ignored.
    let only = args
        .iter()
        .find(|a| ["send", "flowctl", "bare"].contains(&a.as_str()));
    let rounds = 9;
    let per_msg = |ns: f64| ns / (2 * iters) as f64;

    let bare = if only.is_none_or(|o| o == "bare") {
        let (mut a, mut b) = pair(job(0), |b| ShmDevice::open(b, ShmOptions::default()));
        let ns = median(
            (0..rounds)
                .map(|_| per_msg(measured_bare(&mut a, &mut b, iters)))
                .collect(),
        );
        println!(
            "{:<44} {:>9.1} ns  1.00x",
            "reference: the shm device alone, 8 B", ns
        );
        Some(ns)
    } else {
        None
    };
    for (k, reliable, row, name) in [
        (1, false, "send", "GAMMA send, 8 B, shm"),
        (2, true, "flowctl", "GAMMA send_flowctl, 8 B, shm"),
    ] {
        if only.is_some_and(|o| o != row) {
            continue;
        }
        let (mut a, mut b) = ranks(job(k));
        let ns = median(
            (0..rounds)
                .map(|_| per_msg(measured(&mut a, &mut b, iters, reliable)))
                .collect(),
        );
        assert_eq!(*a.state() + *b.state(), (2 * rounds * iters) as u64);
        match bare {
            Some(r) => println!("{:<44} {:>9.1} ns  {:.2}x", name, ns, ns / r),
            None => println!("{:<44} {:>9.1} ns", name, ns),
        }
    }
}
