//! The engine's clock: the TSC, scaled by the frequency calibrated at boot.

use volley_core::gamma::Clock;
use volley_core::time::Instant;

/// Nanoseconds since boot from the TSC.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    hz: u64,
    start: u64,
}

impl TscClock {
    /// A clock ticking at `hz`, starting now.
    pub fn new(hz: u64) -> TscClock {
        TscClock {
            hz: hz.max(1),
            start: crate::tsc::rdtsc(),
        }
    }
}

impl Clock for TscClock {
    fn now(&self) -> Instant {
        let ticks = crate::tsc::rdtsc().wrapping_sub(self.start);
        Instant::from_nanos((ticks as u128 * 1_000_000_000 / self.hz as u128) as u64)
    }
}
