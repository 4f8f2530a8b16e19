//! Time as the engine sees it: values handed in by the caller, never read from a clock.
//!
//! Nanosecond resolution in a `u64` (584 years): enough for TSC-derived clocks and
//! for the simulator's virtual clock alike.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    nanos: u64,
}

/// A span of time in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration {
    nanos: u64,
}

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant { nanos: 0 };
    /// Later than any instant the engine will ever be given.
    pub const MAX: Instant = Instant { nanos: u64::MAX };

    /// From nanoseconds since the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant { nanos }
    }
    /// From microseconds since the epoch.
    pub const fn from_micros(us: u64) -> Self {
        Instant {
            nanos: us.saturating_mul(1_000),
        }
    }
    /// From milliseconds since the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Instant {
            nanos: ms.saturating_mul(1_000_000),
        }
    }
    /// Nanoseconds since the epoch.
    pub const fn total_nanos(self) -> u64 {
        self.nanos
    }
    /// Microseconds since the epoch.
    pub const fn total_micros(self) -> u64 {
        self.nanos / 1_000
    }
    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration {
            nanos: self.nanos.saturating_sub(earlier.nanos),
        }
    }
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration { nanos: 0 };
    /// From nanoseconds.
    pub const fn from_nanos(nanos: u64) -> Self {
        Duration { nanos }
    }
    /// From microseconds.
    pub const fn from_micros(us: u64) -> Self {
        Duration {
            nanos: us.saturating_mul(1_000),
        }
    }
    /// From milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Duration {
            nanos: ms.saturating_mul(1_000_000),
        }
    }
    /// From seconds.
    pub const fn from_secs(s: u64) -> Self {
        Duration {
            nanos: s.saturating_mul(1_000_000_000),
        }
    }
    /// Whole nanoseconds.
    pub const fn total_nanos(self) -> u64 {
        self.nanos
    }
    /// Whole microseconds.
    pub const fn total_micros(self) -> u64 {
        self.nanos / 1_000
    }
    /// Microseconds as a float, as GAMMA's `time_diff` and LFC's timers report them.
    pub fn as_micros_f64(self) -> f64 {
        self.nanos as f64 / 1_000.0
    }
    /// Twice as long, saturating: the back-off step.
    pub const fn doubled(self) -> Duration {
        Duration {
            nanos: self.nanos.saturating_mul(2),
        }
    }
    /// `2^n` times as long, saturating.
    pub const fn shifted(self, n: u32) -> Duration {
        Duration {
            nanos: self.nanos.saturating_mul(1u64 << (n & 63)),
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant {
            nanos: self.nanos.saturating_add(d.nanos),
        }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration {
            nanos: self.nanos.saturating_add(d.nanos),
        }
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.nanos / 1_000_000_000,
            (self.nanos / 1_000) % 1_000_000
        )
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}us", self.nanos / 1_000, self.nanos % 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_micros(5);
        assert_eq!((t + Duration::from_micros(3)).total_micros(), 8);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(Duration::from_millis(1).doubled(), Duration::from_millis(2));
        assert_eq!(Duration::from_nanos(1500).as_micros_f64(), 1.5);
    }
}

/// Where a node reads the time: the TSC on bare metal, `std::time` hosted, a virtual
/// clock in the simulator.
pub trait Clock {
    /// The current time.
    fn now(&self) -> Instant;
}

/// A clock on `std::time::Instant`, counting from its creation.
#[cfg(feature = "std")]
#[derive(Debug, Clone, Copy)]
pub struct StdClock(std::time::Instant);

#[cfg(feature = "std")]
impl Default for StdClock {
    fn default() -> Self {
        StdClock(std::time::Instant::now())
    }
}

#[cfg(feature = "std")]
impl Clock for StdClock {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
}
