//! The engine's clock: the TSC, scaled by the frequency calibrated at boot.

use volley_core::gamma::Clock;
use volley_core::time::Instant;

/// Nanoseconds since boot from the TSC.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    /// Nanoseconds per tick as a 32.32 fixed-point number: the engine reads the clock
    /// on every poll, and a 128-bit division per read cost more than the rest of an
    /// idle poll under TCG.
    ns_per_tick: u64,
    start: u64,
}

impl TscClock {
    /// A clock ticking at `hz` (at least 1 MHz), starting now.
    pub fn new(hz: u64) -> TscClock {
        let hz = hz.max(1_000_000) as u128;
        TscClock {
            ns_per_tick: ((1_000_000_000u128 << 32) / hz) as u64,
            start: crate::tsc::rdtsc(),
        }
    }
}

impl Clock for TscClock {
    fn now(&self) -> Instant {
        let ticks = crate::tsc::rdtsc().wrapping_sub(self.start);
        Instant::from_nanos(((ticks as u128 * self.ns_per_tick as u128) >> 32) as u64)
    }
}
