//! Set-up the simulator test files share (each one says `mod common;`).

// Each test file uses its own part of this.
#![allow(dead_code)]

use volley_core::engine::{Group, Members};
use volley_core::phy::FaultConfig;
use volley_core::time::Duration;

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
