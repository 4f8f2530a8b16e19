//! When a waiting call gives the processor away: every personality's blocking calls
//! poll, and after a run of polls that found nothing they run the program's idle
//! hook (`sched_yield` where ranks may share cores, `hlt` on bare metal).

use crate::time::{Clock, Duration, Instant};

/// Polls in a row with nothing to do before the hook runs.
pub const IDLE_SPINS: u32 = 64;
/// How long those polls must also have lasted: a poll's cost depends on the clock
/// and the device (tens of nanoseconds on a fast clock), and a hook run too soon (a
/// `sched_yield`) lands in the middle of the wait for a reply microseconds away.
pub const IDLE_TIME: Duration = Duration::from_micros(4);

/// Empty polls in a row after which a waiting call no longer looks at the device
/// between its polls (`Gamma::await_frame`): the looks speed up noticing a reply
/// that comes soon, and stop before the hook is due (two runs of looks, about a
/// microsecond), which then runs about as early as without them.
pub const LOOKING_POLLS: u32 = 2;

/// The idle policy of one process: its hook and the run of empty polls so far.
#[derive(Debug, Clone, Copy)]
pub struct Idle {
    hook: Option<fn()>,
    polls: u32,
    after: u32,
    /// How long polls must have found nothing (zero: the count alone decides), and
    /// since when they have.
    time: Duration,
    since: Instant,
}

impl Default for Idle {
    fn default() -> Self {
        Self::new()
    }
}

impl Idle {
    /// No hook (waiting calls spin, as the seeds' did); [`IDLE_SPINS`] polls and
    /// [`IDLE_TIME`] once there is one.
    pub const fn new() -> Self {
        Idle {
            hook: None,
            polls: 0,
            after: IDLE_SPINS,
            time: IDLE_TIME,
            since: Instant::ZERO,
        }
    }

    /// The hook, or none.
    pub fn set_hook(&mut self, hook: Option<fn()>) {
        self.hook = hook;
        self.polls = 0;
    }

    /// How many empty polls in a row run the hook (1 where it halts until an
    /// interrupt a message raises); set here, the count alone decides.
    pub fn set_after(&mut self, polls: u32) {
        self.after = polls.max(1);
        self.time = Duration::ZERO;
        self.polls = 0;
    }

    /// Whether the run of empty polls is short enough for looks at the device
    /// between them (see [`LOOKING_POLLS`]).
    #[inline]
    pub fn looking(&self) -> bool {
        self.polls < LOOKING_POLLS
    }

    /// Called after each poll of a waiting call: `busy` if it did anything.
    /// `true` if the hook ran (the time read before it may be long past).
    #[inline]
    pub fn step<C: Clock>(&mut self, busy: bool, clock: &C) -> bool {
        if busy {
            self.polls = 0;
            return false;
        }
        let Some(hook) = self.hook else { return false };
        self.polls += 1;
        let timed = self.time > Duration::ZERO;
        if timed && self.polls == 1 {
            self.since = clock.now();
        }
        if self.polls >= self.after {
            if timed && clock.now().saturating_since(self.since) < self.time {
                // Not idle for long enough yet: count another run from here.
                self.polls = 1;
                return false;
            }
            self.polls = 0;
            hook();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;
    use core::sync::atomic::{AtomicU32, Ordering};

    struct Fake(Cell<u64>);
    impl Clock for Fake {
        fn now(&self) -> Instant {
            Instant::from_nanos(self.0.get())
        }
    }

    static RUNS: AtomicU32 = AtomicU32::new(0);
    fn hook() {
        RUNS.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn the_hook_runs_after_enough_empty_polls_for_long_enough() {
        let runs = || RUNS.load(Ordering::Relaxed);
        let clock = Fake(Cell::new(0));
        let tick = |ns| clock.0.set(clock.0.get() + ns);
        let mut idle = Idle::new();
        for _ in 0..1000 {
            idle.step(false, &clock);
        }
        assert_eq!(runs(), 0, "no hook, no run");
        idle.set_hook(Some(hook));
        // Many polls in no time: not yet.
        for _ in 0..1000 {
            idle.step(false, &clock);
        }
        assert_eq!(runs(), 0);
        // 64 polls 100 ns apart (6.3 us from the first): once, at the 64th.
        idle.set_hook(Some(hook));
        for i in 1..=IDLE_SPINS {
            tick(100);
            idle.step(false, &clock);
            assert_eq!(runs(), u32::from(i == IDLE_SPINS), "poll {i}");
        }
        // A busy poll starts the count again.
        for i in 0..IDLE_SPINS * 4 {
            tick(1000);
            idle.step(i % 32 == 0, &clock);
        }
        assert_eq!(runs(), 1);
        // The count alone: every empty poll, none for a busy one.
        idle.set_after(1);
        for i in 0..6 {
            idle.step(i == 3, &clock);
        }
        assert_eq!(runs(), 6);
    }

    #[test]
    fn looks_between_polls_stop_after_a_short_run_of_empty_polls() {
        fn noop() {}
        let clock = Fake(Cell::new(0));
        let mut idle = Idle::new();
        for _ in 0..100 {
            idle.step(false, &clock);
        }
        assert!(idle.looking(), "no hook: nothing to run early for");
        idle.set_hook(Some(noop));
        for i in 0..LOOKING_POLLS {
            assert!(idle.looking(), "poll {i}");
            idle.step(false, &clock);
        }
        assert!(!idle.looking());
        idle.step(true, &clock);
        assert!(idle.looking(), "a busy poll starts the run again");
    }
}
