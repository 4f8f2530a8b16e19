//! What every personality holds: its engine, its device, its clock and its idle
//! policy, with their accessors and the step a waiting call takes between two
//! polls. [`crate::gamma::Gamma`], [`crate::lfc::Lfc`], [`crate::cheetah::Cheetah`]
//! and `qnix::Qnix` each dereference to their `Endpoint`, so `engine()`,
//! `device_mut()`, `set_idle()` and the rest are written once.

use crate::engine::Engine;
use crate::idle::Idle;
use crate::time::{Clock, Instant};

/// An engine driven over a device by a clock, with the idle policy of the calls
/// that wait.
#[derive(Debug)]
pub struct Endpoint<'a, D, C> {
    pub(crate) engine: Engine<'a>,
    pub(crate) dev: D,
    pub(crate) clock: C,
    pub(crate) idle: Idle,
}

impl<'a, D, C> Endpoint<'a, D, C> {
    /// `engine` over `dev`, timed by `clock`; waiting calls spin (no idle hook).
    pub(crate) fn new(engine: Engine<'a>, dev: D, clock: C) -> Self {
        Endpoint {
            engine,
            dev,
            clock,
            idle: Idle::new(),
        }
    }

    /// The engine, for its counters and lower-level calls.
    pub fn engine(&self) -> &Engine<'a> {
        &self.engine
    }

    /// The engine, mutably.
    pub fn engine_mut(&mut self) -> &mut Engine<'a> {
        &mut self.engine
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Sets a hook that blocking calls run after many polls in a row found nothing to
    /// do: `std::thread::yield_now` when ranks may share cores, a `pause` or `hlt` on
    /// bare metal. Without one they spin, as the original systems did.
    pub fn set_idle(&mut self, idle: Option<fn()>) {
        self.idle.set_hook(idle);
    }

    /// How many polls in a row must find nothing before the idle hook runs (1 where
    /// the hook halts until an interrupt that a message raises). By default 64 polls
    /// and 4 us; set here, the count alone decides.
    pub fn set_idle_after(&mut self, polls: u32) {
        self.idle.set_after(polls);
    }
}

impl<D, C: Clock> Endpoint<'_, D, C> {
    /// Called after each poll of a waiting call (`busy` if it did anything): runs
    /// the idle hook once enough polls found nothing. `true` if it ran.
    #[inline]
    pub(crate) fn idle_step(&mut self, busy: bool) -> bool {
        self.idle.step(busy, &self.clock)
    }

    /// When the engine next needs a poll (`None`: not until a frame comes).
    pub fn poll_at(&self) -> Option<Instant> {
        self.engine.poll_at(self.clock.now())
    }
}

/// `Deref`/`DerefMut` from a personality to the `Endpoint` in its field `ep`:
/// `deref_endpoint!(Gamma, 'a, D, C, S)`.
macro_rules! deref_endpoint {
    ($ty:ident, $($gen:tt),*) => {
        impl<$($gen),*> core::ops::Deref for $ty<$($gen),*> {
            type Target = $crate::endpoint::Endpoint<'a, D, C>;
            #[inline(always)]
            fn deref(&self) -> &Self::Target {
                &self.ep
            }
        }
        impl<$($gen),*> core::ops::DerefMut for $ty<$($gen),*> {
            #[inline(always)]
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.ep
            }
        }
    };
}
pub(crate) use deref_endpoint;
