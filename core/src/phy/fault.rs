//! A seeded fault injector: loss, duplication, reordering and corruption on receive.
//!
//! Faults are applied as frames leave the wrapped device's receive side, so any device
//! can be wrapped. The same seed and the same sequence of calls give the same faults.
//! Frames larger than `BUF` pass untouched (they cannot be copied for mangling).

use super::{Capabilities, Device, RxToken};
use crate::rng::Rng;
use crate::time::{Duration, Instant};
use crate::NodeAddr;

/// Fault probabilities, each per received frame.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultConfig {
    /// Drop the frame.
    pub loss: f64,
    /// Deliver the frame twice.
    pub duplicate: f64,
    /// Hold the frame back and deliver a later one first.
    pub reorder: f64,
    /// Flip one bit of the frame.
    pub corrupt: f64,
    /// Longest a held-back frame waits when nothing overtakes it.
    pub reorder_delay: Duration,
}

/// What the injector did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultStats {
    /// Frames dropped.
    pub dropped: u64,
    /// Frames delivered twice.
    pub duplicated: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames with a bit flipped.
    pub corrupted: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Pass,
    Drop,
    Duplicate,
    Reorder,
    Corrupt,
}

/// Wraps a device and mangles what it receives.
#[derive(Debug)]
pub struct FaultInjector<D, const BUF: usize = 2048> {
    inner: D,
    config: FaultConfig,
    rng: Rng,
    scratch: [u8; BUF],
    held: [u8; BUF],
    held_len: Option<usize>,
    held_until: Instant,
    stats: FaultStats,
}

impl<D: Device, const BUF: usize> FaultInjector<D, BUF> {
    /// Wraps `inner` with faults drawn from `seed`.
    pub fn new(inner: D, config: FaultConfig, seed: u64) -> Self {
        FaultInjector {
            inner,
            config,
            rng: Rng::new(seed),
            scratch: [0; BUF],
            held: [0; BUF],
            held_len: None,
            held_until: Instant::ZERO,
            stats: FaultStats::default(),
        }
    }

    /// Counts of the faults injected so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// The wrapped device.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// When a held-back frame will be released, if one is held.
    pub fn held_until(&self) -> Option<Instant> {
        self.held_len.map(|_| self.held_until)
    }

    fn injects_nothing(&self) -> bool {
        let c = self.config;
        c.loss <= 0.0 && c.duplicate <= 0.0 && c.reorder <= 0.0 && c.corrupt <= 0.0
    }

    /// Changes the fault probabilities from now on.
    pub fn set_config(&mut self, config: FaultConfig) {
        self.config = config;
    }

    fn roll(&mut self) -> Action {
        let c = self.config;
        if self.rng.chance(c.loss) {
            Action::Drop
        } else if self.rng.chance(c.corrupt) {
            Action::Corrupt
        } else if self.rng.chance(c.duplicate) {
            Action::Duplicate
        } else if self.rng.chance(c.reorder) {
            Action::Reorder
        } else {
            Action::Pass
        }
    }
}

/// A frame from the injector: the inner device's own, or a mangled copy.
#[derive(Debug)]
pub enum FaultRx<'a, T> {
    /// Passed through untouched.
    Pass(T),
    /// A copy held by the injector.
    Copy(&'a [u8]),
}

impl<T: RxToken> RxToken for FaultRx<'_, T> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            FaultRx::Pass(t) => t.consume(f),
            FaultRx::Copy(b) => f(b),
        }
    }
    fn source(&self) -> Option<crate::NodeAddr> {
        match self {
            FaultRx::Pass(t) => t.source(),
            // A held copy (reordered, duplicated) has lost its origin.
            FaultRx::Copy(_) => None,
        }
    }
}

impl<D: Device, const BUF: usize> Device for FaultInjector<D, BUF> {
    type RxToken<'a>
        = FaultRx<'a, D::RxToken<'a>>
    where
        Self: 'a;
    type TxToken<'a>
        = D::TxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
        if let Some(n) = self.held_len {
            if now >= self.held_until {
                self.held_len = None;
                self.scratch[..n].copy_from_slice(&self.held[..n]);
                return Some(FaultRx::Copy(&self.scratch[..n]));
            }
        }
        let action = loop {
            match self.roll() {
                Action::Drop => {
                    let t = self.inner.receive(now)?;
                    t.consume(|_| ());
                    self.stats.dropped += 1;
                }
                a => break a,
            }
        };
        // Only one frame can be held at a time.
        let action = match action {
            Action::Duplicate | Action::Reorder if self.held_len.is_some() => Action::Pass,
            a => a,
        };
        let scratch = &mut self.scratch;
        let held = &mut self.held;
        match action {
            Action::Pass | Action::Drop => self.inner.receive(now).map(FaultRx::Pass),
            Action::Corrupt => {
                let t = self.inner.receive(now)?;
                let n = t.consume(|f| copy_into(scratch, f));
                if n > 0 {
                    let bit = self.rng.below(n as u64 * 8);
                    scratch[(bit / 8) as usize] ^= 1 << (bit % 8);
                    self.stats.corrupted += 1;
                }
                Some(FaultRx::Copy(&scratch[..n]))
            }
            Action::Duplicate => {
                let t = self.inner.receive(now)?;
                let n = t.consume(|f| copy_into(scratch, f));
                held[..n].copy_from_slice(&scratch[..n]);
                self.held_len = Some(n);
                self.held_until = now;
                self.stats.duplicated += 1;
                Some(FaultRx::Copy(&scratch[..n]))
            }
            Action::Reorder => {
                let t = self.inner.receive(now)?;
                let n = t.consume(|f| copy_into(held, f));
                self.held_len = Some(n);
                self.held_until = now + self.config.reorder_delay;
                self.stats.reordered += 1;
                self.inner.receive(now).map(FaultRx::Pass)
            }
        }
    }

    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>> {
        self.inner.transmit(now, dst)
    }

    fn liveness(&mut self) -> Option<&mut dyn super::Liveness> {
        self.inner.liveness()
    }

    fn flush(&mut self, now: Instant) {
        self.inner.flush(now)
    }

    fn capabilities(&self) -> Capabilities {
        // Frames from send slots would go past the faults: none here.
        let inner = Capabilities {
            pool_slots: 0,
            pool_slot_size: 0,
            ..self.inner.capabilities()
        };
        if self.injects_nothing() {
            return inner;
        }
        // Whatever the wrapped link promised, this one breaks both promises, and
        // sends nothing past the faults (the board would).
        Capabilities {
            reliable: false,
            integrity: false,
            compact: false,
            board_nodes: 0,
            board_mtu: 0,
            ..inner
        }
    }

    // Other nodes' board frames are always read: a reader that stopped would hold
    // their boards full. This node writes on the board only where its
    // capabilities say it has one: when it injects nothing.
    fn board(&mut self) -> Option<&mut dyn super::Board> {
        self.inner.board()
    }
}

/// Copies a frame into `dst`; a frame too large is truncated to nothing so that the
/// engine sees it as garbage rather than as a silently shortened frame.
fn copy_into(dst: &mut [u8], f: &[u8]) -> usize {
    if f.len() > dst.len() {
        return 0;
    }
    dst[..f.len()].copy_from_slice(f);
    f.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phy::{Loopback, Ring, TxToken};

    #[test]
    fn faults_follow_the_probabilities() {
        let mut rings = [Ring::<1024, 64>::new(), Ring::new()];
        {
            let mut a = Loopback::new(&mut rings, NodeAddr(0));
            for i in 0..1000u32 {
                a.transmit(Instant::ZERO, NodeAddr(1))
                    .unwrap()
                    .consume(8, |b| b[..4].copy_from_slice(&i.to_be_bytes()));
            }
        }
        let cfg = FaultConfig {
            loss: 0.2,
            duplicate: 0.05,
            reorder: 0.05,
            corrupt: 0.01,
            reorder_delay: Duration::from_micros(10),
        };
        let mut f: FaultInjector<_, 64> =
            FaultInjector::new(Loopback::new(&mut rings, NodeAddr(1)), cfg, 1);
        assert!(!f.capabilities().reliable);
        let mut got = std::vec::Vec::new();
        let mut t = Instant::ZERO;
        for _ in 0..5000 {
            t += Duration::from_micros(1);
            if let Some(tok) = f.receive(t) {
                got.push(tok.consume(|b| b.to_vec()));
            }
        }
        let s = f.stats();
        assert!((150..250).contains(&s.dropped), "{s:?}");
        assert!(
            s.duplicated > 10 && s.reordered > 10 && s.corrupted > 0,
            "{s:?}"
        );
        let n = got.len() as u64;
        assert_eq!(n, 1000 - s.dropped + s.duplicated);
        let ids: std::vec::Vec<u32> = got
            .iter()
            .map(|b| u32::from_be_bytes(b[..4].try_into().unwrap()))
            .collect();
        assert!(
            ids.windows(2).any(|w| w[0] > w[1]),
            "some reordering expected"
        );
    }
}
