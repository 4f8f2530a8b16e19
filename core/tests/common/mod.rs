//! Set-up the simulator test files share (each one says `mod common;`).

// Each test file uses its own part of this.
#![allow(dead_code)]

use volley_core::engine::{Engine, Group, Members, Tree, MCAST_ALL};
use volley_core::phy::FaultConfig;
use volley_core::rng::Rng;
use volley_core::time::Duration;
use volley_core::NodeId;

/// One group, id 1, of instances `0..n`.
pub fn groups(n: u16) -> &'static [Group<'static>] {
    Vec::leak(vec![Group {
        id: 1,
        members: Members::Range { first: 0, count: n },
    }])
}

/// A lossy link: these chances per frame, a held-back frame waiting up to 30 µs.
pub fn faults(loss: f64, duplicate: f64, reorder: f64, corrupt: f64) -> FaultConfig {
    FaultConfig {
        loss,
        duplicate,
        reorder,
        corrupt,
        reorder_delay: Duration::from_micros(30),
    }
}

/// `len` bytes of a xorshift stream from `seed`: contents that tell messages apart.
pub fn xorshift(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Launches one garbage packet from `e` to instance `to` (`None`: multicast to
/// every instance): `head` first, then random bytes, the whole cut to a random
/// length (a fifth of the time inside the head). `None` when `e` has no packet
/// free; else whether it was launched.
pub fn launch_garbage(
    e: &mut Engine<'_>,
    rng: &mut Rng,
    to: Option<NodeId>,
    head: &[u8],
) -> Option<bool> {
    let p = e.packet_alloc().ok()?;
    let (size, h) = (e.packet_size(), head.len());
    let len = if rng.chance(0.2) {
        rng.below(h as u64) as usize
    } else {
        h + rng.below((size - h) as u64) as usize
    };
    let b = e.packet_mut(p).unwrap();
    b[..h].copy_from_slice(head);
    for x in b[h..len.max(h)].iter_mut() {
        *x = rng.next_u64() as u8;
    }
    let launched = match to {
        Some(to) => e.launch_unicast(p, to, len),
        None => e.launch_multicast(p, MCAST_ALL, len, Tree::Binomial),
    };
    if launched.is_err() {
        e.packet_free(p).unwrap();
        return Some(false);
    }
    Some(true)
}

/// Asserts that engine `e` took no peer for dead while node `peer` computed.
pub fn none_taken_for_dead(e: &Engine<'_>, seed: u64, peer: usize) {
    assert_eq!(
        e.stats().peers_failed,
        0,
        "seed {seed:#x}: node {peer} taken for dead"
    );
}

/// Runs only node `who` of `sim` for `secs` seconds of virtual time: the others
/// compute and never call in.
pub fn only<N: volley_core::sim::SimNode>(
    sim: &mut volley_core::sim::Sim<N>,
    who: usize,
    secs: u64,
) {
    let end = sim.now() + Duration::from_secs(secs);
    while sim.now() < end {
        sim.nodes[who].poll();
        let next = sim.nodes[who].wake_at().unwrap_or(end);
        let now = sim.now();
        sim.clock
            .set(next.min(end).max(now + Duration::from_nanos(1)));
    }
}
