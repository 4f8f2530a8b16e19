//! The clock of a hosted process: the CPU's time-stamp counter where it is invariant,
//! else `std::time::Instant`.
//!
//! Every engine poll reads the clock once (timers, liveness), so its cost is paid on
//! every message (a send that leaves at once reads it only after its frame: the
//! hosted devices' transmit reads no time, see `Device::transmit_reads_time`):
//! a `clock_gettime` through the vDSO costs about 30 ns on the machines
//! measured here, `rdtsc` and a multiply about 12 (UCX reads the counter too). The
//! counter is used only where the CPU says it ticks at a constant rate in every
//! power state (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`) and the kernel
//! keeps it as its own clock source (it switches away from a counter it finds out of
//! step between CPUs); its rate is measured once per process against `Instant` over
//! 2 ms, each end read as a close pair. `VOLLEY_CLOCK=std` always uses `Instant`.
//! Times are only ever compared within one process.

use std::sync::OnceLock;

use volley_core::time::{Clock, Instant};

use crate::HostError;

/// Counter ticks measured against `Instant` to learn the counter's rate.
const CALIBRATION: std::time::Duration = std::time::Duration::from_millis(2);

/// A monotonic clock counting nanoseconds from its creation.
#[derive(Debug, Clone, Copy)]
pub struct HostClock {
    /// Counter value at creation, and nanoseconds per tick in 32.32 fixed point;
    /// `None`: `Instant` is used.
    tsc: Option<(u64, u64)>,
    epoch: std::time::Instant,
}

impl Default for HostClock {
    fn default() -> Self {
        HostClock::new()
    }
}

impl HostClock {
    /// A clock starting at zero now, on the counter if the CPU allows (and
    /// `VOLLEY_CLOCK` is not `std`).
    pub fn new() -> HostClock {
        let epoch = std::time::Instant::now();
        let tsc = ns_per_tick().map(|m| (ticks(), m));
        HostClock { tsc, epoch }
    }

    /// Whether this clock reads the time-stamp counter.
    pub fn uses_tsc(&self) -> bool {
        self.tsc.is_some()
    }
}

impl Clock for HostClock {
    #[inline]
    fn now(&self) -> Instant {
        if let Some((start, mult)) = self.tsc {
            let t = ticks().wrapping_sub(start);
            return Instant::from_nanos(((t as u128 * mult as u128) >> 32) as u64);
        }
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }
}

/// `VOLLEY_CLOCK`: `tsc` (the default, where the CPU allows) or `std`.
pub fn check_setting() -> Result<(), HostError> {
    match std::env::var("VOLLEY_CLOCK").as_deref() {
        Err(_) | Ok("tsc") | Ok("std") => Ok(()),
        Ok(v) => Err(HostError::Setting(format!(
            "VOLLEY_CLOCK={v:?}: expected tsc or std"
        ))),
    }
}

/// Nanoseconds per counter tick (32.32), measured once per process; `None` where the
/// counter is not to be used.
fn ns_per_tick() -> Option<u64> {
    static RATE: OnceLock<Option<u64>> = OnceLock::new();
    *RATE.get_or_init(|| {
        if std::env::var("VOLLEY_CLOCK").as_deref() == Ok("std") || !invariant_tsc() {
            return None;
        }
        let (t0, c0) = paired_reading();
        while t0.elapsed() < CALIBRATION {
            std::hint::spin_loop();
        }
        let (t1, c1) = paired_reading();
        let ns = t1.duration_since(t0).as_nanos();
        let n = c1.wrapping_sub(c0) as u128;
        // 100 MHz to 20 GHz: anything else is a counter that cannot be trusted.
        let hz = n * 1_000_000_000 / ns.max(1);
        if !(100_000_000..=20_000_000_000).contains(&hz) {
            return None;
        }
        Some(((ns << 32) / n) as u64)
    })
}

/// `Instant` and the counter read together: the counter between two readings of
/// `Instant` that lie at most 2 us apart (a few tries), paired with their middle. A
/// preemption between two plain reads would put the pair tens of microseconds
/// apart, and the rate measured over 2 ms off by a few percent.
fn paired_reading() -> (std::time::Instant, u64) {
    let read = || {
        let a = std::time::Instant::now();
        let c = ticks();
        let width = a.elapsed();
        (a + width / 2, c, width)
    };
    let mut best = read();
    for _ in 0..16 {
        if best.2 <= std::time::Duration::from_micros(2) {
            break;
        }
        let r = read();
        if r.2 < best.2 {
            best = r;
        }
    }
    (best.0, best.1)
}

/// Whether the CPU says its counter runs at one rate, in every state.
fn invariant_tsc() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let flags = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    has("constant_tsc") && has("nonstop_tsc") && source.trim() == "tsc"
}

#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` reads a counter; it touches no memory and exists on every
        // x86_64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counter clock agrees with `Instant` over a sleep, to within 1 %, and
    /// never runs backwards. Each reading of ours is bracketed by two of
    /// `Instant`, so a preemption between them (a loaded machine) widens the
    /// bracket instead of failing the test.
    #[test]
    fn the_counter_clock_follows_real_time() {
        use std::time::Instant as Real;
        let c = HostClock::new();
        let (r0, a, r1) = (Real::now(), c.now(), Real::now());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (r2, b, r3) = (Real::now(), c.now(), Real::now());
        let shortest = (r2 - r1).as_nanos() as f64;
        let longest = (r3 - r0).as_nanos() as f64;
        let ours = (b - a).total_nanos() as f64;
        assert!(
            ours >= shortest * 0.99 - 20_000.0 && ours <= longest * 1.01 + 20_000.0,
            "tsc {}: {ours} ns, not within [{shortest}, {longest}] ns",
            c.uses_tsc()
        );
        let mut last = c.now();
        for _ in 0..100_000 {
            let n = c.now();
            assert!(n >= last);
            last = n;
        }
    }
}
