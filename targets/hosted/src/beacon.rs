//! Beacons: a process shows its peers that it lives while its program computes.
//!
//! An engine runs only inside the program's calls. A program that takes a message
//! and then computes for longer than `VOLLEY_PEER_TIMEOUT` without calling in owes
//! its sender an ack (it rides on the reply, which has not been sent), and its
//! sender, hearing nothing, would take it for dead: a master whose worker computes
//! for a minute would get `SENDFAILURE`. So every hosted process runs a helper
//! thread that speaks for it without touching its engine:
//!
//! - on `shm`, it writes the host's clock ([`host_clock`]) into the node's beacon
//!   word in the region every [`TICK`] ([`volley_myri::Beacon`]); a peer's device
//!   vouches for a node whose beacon beat within the last 2 s
//!   (`volley_core::phy::Liveness::peer_vouched`), and its engine then waits rather than declares it
//!   dead;
//! - on `udp` and `eth`, once the program has not polled for a [`TICK`], it sends
//!   every peer a beacon frame every `VOLLEY_PEER_TIMEOUT / 4` (at most 200 ms, so
//!   that it also answers for the process within the time a forged ICMP report
//!   leaves it, `udp`'s `SUSPECT_FOR`): an
//!   empty ack under the job's key and tag (`volley_core::engine::beacon_frame`),
//!   numbered one more each round, which the peer's engine takes as a sign of life
//!   only if newer than the last it heard (a recorded one replayed is not), and
//!   which changes nothing else there. A program that polls sends none.
//!
//! A process that died, or was stopped (a debugger, `SIGSTOP`), beats no more, so
//! death is still found within the timeout. The helper blocks every signal (they go
//! to the program's threads) and is stopped and joined when the device is dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the helper looks (and beats, on `shm`).
pub const TICK: Duration = Duration::from_millis(100);

/// Sends a frame to target `i` of a [`Sink::Frames`].
pub(crate) type SendFrame = Box<dyn FnMut(usize, &[u8]) + Send>;

/// Writes beacon number `count` (1, 2, ...) for target `i` of a [`Sink::Frames`]
/// into the buffer, which comes empty.
pub(crate) type BuildFrame = Box<dyn FnMut(usize, u32, &mut Vec<u8>) + Send>;

/// What the helper moves or sends.
pub(crate) enum Sink {
    /// `shm`: the node's beacon word, through a mapping of the region of its own
    /// (the beacon is declared first: dropped while its memory is still mapped).
    Word {
        beacon: volley_myri::Beacon,
        _map: memmap2::MmapMut,
    },
    /// `udp`, `eth`: a beacon for each of `targets` peers, built by `build` and
    /// sent through `send` (with the target's index), every `every` while
    /// `polled`, which the device moves on every receive poll, stands still.
    Frames {
        send: SendFrame,
        build: BuildFrame,
        targets: usize,
        polled: Arc<AtomicU64>,
        every: Duration,
    },
}

/// The helper thread; stopped and joined on drop.
#[derive(Debug)]
pub struct Helper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    sent: Arc<AtomicU64>,
}

impl Helper {
    /// Starts the helper for `sink`; `None` (and one line on stderr) if no thread
    /// can be made, when the process goes on without one.
    pub(crate) fn spawn(sink: Sink) -> Option<Helper> {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), sent.clone());
        // Signals stay with the program: the thread starts with all of them blocked.
        let old = block_all();
        let spawned = std::thread::Builder::new()
            .name("volley-beacon".into())
            .stack_size(64 << 10)
            .spawn(move || run(sink, &s, &n));
        restore(&old);
        match spawned {
            Ok(t) => Some(Helper {
                stop,
                thread: Some(t),
                sent,
            }),
            Err(e) => {
                without(&format!("no thread: {e}"));
                None
            }
        }
    }

    /// Beacon frames sent so far (`udp`, `eth`), or beats (`shm`).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the host (the
/// `shm` beacons' time, [`volley_myri::NicConfig::host_clock`]).
pub fn host_clock() -> u64 {
    // SAFETY: a zeroed timespec is valid; clock_gettime only writes it.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// A helper sending beacons to `targets` peers, built by `build` and sent through
/// `send`, while the program does not poll ([`Sink::Frames`]).
pub(crate) fn send_frames(
    send: impl FnMut(usize, &[u8]) + Send + 'static,
    build: BuildFrame,
    targets: usize,
    polled: &Arc<AtomicU64>,
    every: Duration,
) -> Option<Helper> {
    Helper::spawn(Sink::Frames {
        send: Box::new(send),
        build,
        targets,
        polled: polled.clone(),
        every,
    })
}

/// Says on stderr that this process goes without a beacon, and what that means.
pub(crate) fn without(why: &str) {
    eprintln!(
        "volley: no beacon ({why}): a peer may take this process for dead while its program computes for longer than VOLLEY_PEER_TIMEOUT without calling in"
    );
}

/// How often a computing process sends its beacon frames: four times per peer
/// timeout, at least every 200 ms (twice within `udp`'s `SUSPECT_FOR`), at most
/// every 10 ms.
pub fn frame_interval(peer_timeout: volley_core::time::Duration) -> Duration {
    Duration::from_nanos(peer_timeout.total_nanos() / 4)
        .clamp(Duration::from_millis(10), Duration::from_millis(200))
}

fn run(mut sink: Sink, stop: &AtomicBool, sent: &AtomicU64) {
    let mut seen = u64::MAX;
    let mut last_sent: Option<Instant> = None;
    let (mut count, mut frame) = (0u32, Vec::new());
    let tick = match &sink {
        Sink::Frames { every, .. } => TICK.min(*every),
        Sink::Word { .. } => TICK,
    };
    while !stop.load(Ordering::Acquire) {
        match &mut sink {
            Sink::Word { beacon, .. } => {
                beacon.beat(host_clock());
                sent.fetch_add(1, Ordering::Relaxed);
            }
            Sink::Frames {
                send,
                build,
                targets,
                polled,
                every,
            } => {
                let p = polled.load(Ordering::Relaxed);
                if p != seen {
                    // Polled since the last look: the engine speaks for itself.
                    seen = p;
                    last_sent = None;
                } else if last_sent.is_none_or(|t| t.elapsed() >= *every) {
                    // Each round's beacons newer than the last (never 0: none yet).
                    count = count.wrapping_add(1).max(1);
                    for i in 0..*targets {
                        frame.clear();
                        build(i, count, &mut frame);
                        if !frame.is_empty() {
                            send(i, &frame);
                        }
                    }
                    sent.fetch_add(*targets as u64, Ordering::Relaxed);
                    last_sent = Some(Instant::now());
                }
            }
        }
        std::thread::park_timeout(tick);
    }
}

/// Blocks every signal in this thread; returns the mask it had.
/// Blocks every signal in the calling thread (a helper about to be spawned
/// inherits the mask); the old mask, for [`restore`].
pub(crate) fn block_all() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, filled by sigfillset and pthread_sigmask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    }
}

/// Puts back a mask [`block_all`] returned.
pub(crate) fn restore(old: &libc::sigset_t) {
    // SAFETY: `old` is a mask pthread_sigmask returned.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_go_only_while_the_program_does_not_poll() {
        let polled = Arc::new(AtomicU64::new(0));
        let got = Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
        let g = got.clone();
        let h = Helper::spawn(Sink::Frames {
            send: Box::new(move |_, f| g.lock().unwrap().push(f.to_vec())),
            build: Box::new(|i, count, f| f.extend_from_slice(&[i as u8, count as u8])),
            targets: 2,
            polled: polled.clone(),
            every: Duration::from_millis(20),
        })
        .unwrap();
        // Polling: a different value at every look.
        let until = Instant::now() + Duration::from_millis(300);
        let mut i = 0;
        while Instant::now() < until {
            i += 1;
            polled.store(i, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(h.sent(), 0, "a polling program sends no beacon");
        // Computing: beacons every 20 ms, both frames each time.
        std::thread::sleep(Duration::from_millis(400));
        let n = h.sent();
        assert!(n >= 6 && n.is_multiple_of(2), "{n} frames in 400 ms");
        // Round k sends beacon k to each target, in turn.
        let sent: Vec<Vec<u8>> = got.lock().unwrap().clone();
        for (j, f) in sent.iter().enumerate() {
            assert_eq!(f, &[(j % 2) as u8, (j / 2 + 1) as u8], "{sent:?}");
        }
        // Polling again: they stop.
        let until = Instant::now() + Duration::from_millis(300);
        let at = h.sent();
        while Instant::now() < until {
            i += 1;
            polled.store(i, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(h.sent() <= at + 2, "{} after {at}", h.sent());
        drop(h);
    }

    #[test]
    fn the_interval_is_a_quarter_of_the_timeout_within_bounds() {
        use volley_core::time::Duration as D;
        assert_eq!(frame_interval(D::from_secs(30)), Duration::from_millis(200));
        assert_eq!(
            frame_interval(D::from_millis(400)),
            Duration::from_millis(100)
        );
        assert_eq!(frame_interval(D::from_millis(1)), Duration::from_millis(10));
    }
}
