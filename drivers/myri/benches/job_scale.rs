//! What a larger job adds to a small `shm` message: ranks 0 and 1 of an `N`-node
//! job (`VOLLEY_BENCH_NODES`, 2 to 64; 16 unless set) on one Myrinet-like region in
//! one thread, GAMMA `send_flowctl` of 8 bytes back and forth, first with a channel
//! to each other only (the reference row), then once both have sent a message to
//! every other rank, so that each holds a channel open to all of them, as after an
//! all-to-all exchange. Every poll then looks at `N` rings and `N` boards, and the
//! engine keeps `N - 1` channels.
//!
//! `cargo bench -p volley-myri --bench job_scale [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message, and the ratio to the reference. Under
//! callgrind, with `ITERS closed` or `ITERS open` (that phase alone),
//! `--collect-atstart=no --toggle-collect='*job_scale::hop*'
//! --toggle-collect='*sent_eager_single*'` counts a message's latency path (as
//! `engine_cost`'s, which says what a short message's includes): the count divided
//! by `18 * ITERS`.

use std::hint::black_box;
use std::time::{Duration, Instant as WallInstant};

use volley_core::engine::{Config, Group, Members};
use volley_core::gamma::{Gamma, GO_BACK};
use volley_core::time::StdClock;

#[allow(dead_code)]
#[path = "../tests/pair/mod.rs"]
mod pair;
use pair::G;

const ROUNDS: usize = 9;

/// One message from `from` to `to`, sent, then polled until its handler ran.
#[inline(never)]
fn hop(from: &mut G, to: &mut G, data: &[u8]) {
    from.send_flowctl(1, data).unwrap();
    to.wait(1, 1).unwrap();
}

/// `iters` round trips, each end polling once before its message comes.
#[inline(never)]
fn ping_pong(a: &mut G, b: &mut G, iters: usize) {
    let data = [7u8; 8];
    // Its length unknown to the compiler, as a program's messages are.
    let data: &[u8] = black_box(&data);
    for _ in 0..iters {
        black_box(b.test(1).unwrap());
        hop(a, b, data);
        black_box(a.test(1).unwrap());
        hop(b, a, data);
    }
}

/// The median over [`ROUNDS`] rounds, ns per one-way message.
fn rounds(a: &mut G, b: &mut G, iters: usize) -> f64 {
    let mut v: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = WallInstant::now();
            ping_pong(a, b, iters);
            t.elapsed().as_nanos() as f64 / (2 * iters) as f64
        })
        .collect();
    v.sort_by(|x, y| x.total_cmp(y));
    v[ROUNDS / 2]
}

/// Ranks 0 and 1 each send a message on port 2 to every other rank, and every rank
/// polls until each has arrived and the acks are back.
fn open_all(gs: &mut [G]) {
    let n = gs.len();
    for s in 0..2 {
        for k in (0..n).filter(|&k| k != s) {
            let before = *gs[k].state();
            let buf: &'static mut [u8] = Vec::leak(vec![0u8; 64]);
            gs[s]
                .set_active_port(2, k as u16, 1, 2, None, None, 2, GO_BACK, Some(buf))
                .unwrap();
            gs[s].send_flowctl(2, b"hello").unwrap();
            let t = WallInstant::now();
            while gs[k].engine().ports().semaphore(2).unwrap().count == 0 {
                for g in gs.iter_mut() {
                    g.test(2).unwrap();
                }
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "rank {k} got nothing"
                );
            }
            gs[k].wait(2, 1).unwrap();
            assert_eq!(*gs[k].state(), before);
        }
    }
    // Delayed acks and credits settle.
    let t = WallInstant::now();
    while t.elapsed() < Duration::from_millis(50) {
        for g in gs.iter_mut() {
            g.test(2).unwrap();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let only = args.iter().find(|a| *a == "open" || *a == "closed");
    let nodes = pair::region_nodes_or(16);
    let geo = pair::geometry_for(nodes);
    let groups: &'static [Group<'static>] = Vec::leak(vec![Group {
        id: 1,
        members: Members::Range {
            first: 0,
            count: nodes as u16,
        },
    }]);
    let mut gs: Vec<G> = pair::nics_on(geo, nodes)
        .into_iter()
        .enumerate()
        .map(|(me, nic)| {
            let me = me as u16;
            let cfg = Config::new(9, 1, me);
            let clock = StdClock::default();
            let mut g: G = Gamma::init_alloc(cfg, groups, nodes as usize, nic, clock, 0).unwrap();
            if me < 2 {
                let buf: &'static mut [u8] = Vec::leak(vec![0u8; 4096]);
                g.set_active_port(
                    1,
                    1 - me,
                    1,
                    1,
                    Some(pair::on_msg),
                    None,
                    1,
                    GO_BACK,
                    Some(buf),
                )
                .unwrap();
            }
            // Where the messages that open the channels land.
            let buf: &'static mut [u8] = Vec::leak(vec![0u8; 64]);
            g.set_active_port(
                2,
                u16::from(me == 0),
                1,
                2,
                None,
                None,
                2,
                GO_BACK,
                Some(buf),
            )
            .unwrap();
            g
        })
        .collect();
    println!("ranks 0 and 1 of a {nodes}-node shm job, GAMMA send_flowctl 8 B, one-way ns");
    let reference = if only.is_none_or(|o| o == "closed") {
        let (a, rest) = gs.split_at_mut(1);
        let ns = rounds(&mut a[0], &mut rest[0], iters);
        println!(
            "{:<44} {:>9.1} ns  1.00x",
            "reference: a channel to each other only", ns
        );
        ns
    } else {
        0.0
    };
    if only.is_some_and(|o| o == "closed") {
        return;
    }
    open_all(&mut gs);
    let (a, rest) = gs.split_at_mut(1);
    let ns = rounds(&mut a[0], &mut rest[0], iters);
    let name = format!("channels open to all {} other ranks", nodes - 1);
    if reference > 0.0 {
        println!("{name:<44} {ns:>9.1} ns  {:.2}x", ns / reference);
    } else {
        println!("{name:<44} {ns:>9.1} ns");
    }
}
