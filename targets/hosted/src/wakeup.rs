//! Sleeping until there is work: a file descriptor an event loop waits on instead
//! of spinning, as UCX's `ucp_worker_get_efd` and `ucp_worker_arm`.
//!
//! A process's wake-up descriptor is an epoll set of its own holding:
//! - what tells of frames: the `udp` socket, the `eth` ring's socket (both readable
//!   while a frame waits; an ICMP report on `udp` reads as an error), or on `shm`
//!   an eventfd that a helper thread rings when a producer raised this node's NIC
//!   interrupt (`volley_myri`'s "Interrupts");
//! - a timerfd set, at each arming, to when the endpoint next needs a poll with no
//!   frame arriving (a retransmission, a peer owed an ack, a keepalive, a liveness
//!   check), so that timeouts and failed peers are found while the program sleeps.
//!
//! The protocol is UCX's: poll until nothing is left, [`EventLoop::arm`], and sleep
//! on the descriptor only if that returned `Ok(true)`; after it turns readable,
//! poll again. Arming when work is already there returns `Ok(false)` (poll first).
//! On `shm` a producer raises the interrupt only while its consumer is armed, so a
//! program that spins pays nothing, and a producer pays a fence and a load.
//! Every descriptor is close-on-exec. With the `tokio` feature, `tokio::Async`
//! awaits it in a tokio runtime.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use volley_core::cheetah::Cheetah;
use volley_core::gamma::Gamma;
use volley_core::lfc::Lfc;
use volley_core::qnix::Qnix;
use volley_core::time::{Clock, Instant};

use crate::clock::HostClock;
use crate::node::HostDevice;
use crate::HostError;

#[cfg(feature = "tokio")]
pub mod tokio;

fn os_error(what: &str) -> HostError {
    HostError::Fabric(format!(
        "wake-up descriptor: {what}: {}",
        io::Error::last_os_error()
    ))
}

fn owned(fd: RawFd, what: &str) -> Result<OwnedFd, HostError> {
    if fd < 0 {
        return Err(os_error(what));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads what `fd` (an eventfd or a timerfd, non-blocking) holds, so that it reads
/// as not ready until it is rung again.
fn drain(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: a valid descriptor and 8 writable bytes; EAGAIN when empty.
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// A process's wake-up descriptor: an epoll set, its timer, and on `shm` the
/// eventfd its interrupt helper rings.
#[derive(Debug)]
pub struct Wakeup {
    // Dropped first: the helper stops before the eventfd it rings closes.
    irq: Option<IrqHelper>,
    epoll: OwnedFd,
    timer: OwnedFd,
    event: Option<Arc<OwnedFd>>,
}

impl Wakeup {
    /// An epoll set with a timer in it, and `sources` (descriptors readable while a
    /// frame waits).
    pub(crate) fn new(sources: &[RawFd]) -> Result<Wakeup, HostError> {
        // SAFETY: plain system calls; the descriptors are owned below.
        let epoll = owned(
            unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
            "epoll_create1",
        )?;
        // SAFETY: as above.
        let timer = owned(
            unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            },
            "timerfd_create",
        )?;
        let w = Wakeup {
            irq: None,
            epoll,
            timer,
            event: None,
        };
        w.watch(w.timer.as_raw_fd())?;
        for &fd in sources {
            w.watch(fd)?;
        }
        Ok(w)
    }

    /// A wake-up descriptor for a `shm` node whose interrupt word is `word`: an
    /// eventfd in the set, rung by a helper thread that waits on the word.
    ///
    /// # Safety
    ///
    /// `word` must stay valid until the returned value is dropped (it lives in the
    /// device's mapping, which the device drops after its wake-up descriptor).
    pub(crate) unsafe fn for_interrupt(word: &AtomicU32) -> Result<Wakeup, HostError> {
        // SAFETY: a plain system call; the descriptor is owned below.
        let event = owned(
            unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) },
            "eventfd",
        )?;
        let event = Arc::new(event);
        let mut w = Wakeup::new(&[event.as_raw_fd()])?;
        // SAFETY: the caller's contract.
        w.irq = Some(unsafe { IrqHelper::spawn(word, event.clone()) }?);
        w.event = Some(event);
        Ok(w)
    }

    /// Adds `fd` to the set: the descriptor then also turns readable while `fd`
    /// is (a personality's own events, such as QNIX doorbells rung by its NIC
    /// thread). Closing `fd` takes it out of the set.
    pub fn watch(&self, fd: RawFd) -> Result<(), HostError> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: valid descriptors and a live event.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0
        {
            return Err(os_error("epoll_ctl"));
        }
        Ok(())
    }

    /// Takes what the timer and the interrupt's eventfd hold (their news is about
    /// to be acted on by a poll, or was).
    pub(crate) fn drain(&self) {
        drain(&self.timer);
        if let Some(e) = &self.event {
            drain(e);
        }
    }

    /// Sets the timer to go off after `after` (`None`: disarmed).
    pub(crate) fn set_timer(&self, after: Option<std::time::Duration>) -> Result<(), HostError> {
        // SAFETY: a zeroed itimerspec is valid: all zero disarms.
        let mut spec: libc::itimerspec = unsafe { std::mem::zeroed() };
        if let Some(d) = after {
            // An expiry of zero would disarm: at least a nanosecond.
            let d = d.max(std::time::Duration::from_nanos(1));
            spec.it_value.tv_sec = d.as_secs() as libc::time_t;
            spec.it_value.tv_nsec = d.subsec_nanos() as libc::c_long;
        }
        // SAFETY: a valid timerfd and a live spec.
        if unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) }
            != 0
        {
            return Err(os_error("timerfd_settime"));
        }
        Ok(())
    }

    /// Waits until the descriptor turns readable or `timeout` passes (`None`:
    /// forever); `true` if it did. For programs with no event loop of their own
    /// (and the tests).
    pub fn wait(&self, timeout: Option<std::time::Duration>) -> Result<bool, HostError> {
        let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as libc::c_int);
        let mut pfd = libc::pollfd {
            fd: self.epoll.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one live pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n >= 0 {
                return Ok(n > 0);
            }
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return Err(os_error("poll"));
            }
        }
    }
}

impl AsRawFd for Wakeup {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

impl AsFd for Wakeup {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

/// `FUTEX_WAKE` on a word of a shared mapping (not process-private), for every
/// waiter: the NIC model's interrupt hook on hosted `shm`
/// ([`volley_myri::NicConfig::interrupt`]).
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: a valid, aligned u32 for the kernel to hash by its page.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

fn futex_wait(word: &AtomicU32, seen: u32) {
    // SAFETY: as in `futex_wake`; returns at once if the word is no longer `seen`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

/// The thread that turns this node's raised NIC interrupt into an eventfd
/// event: the host's interrupt handler. Stopped and joined on drop.
#[derive(Debug)]
struct IrqHelper {
    word: usize,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl IrqHelper {
    /// # Safety
    ///
    /// As [`Wakeup::for_interrupt`].
    unsafe fn spawn(word: &AtomicU32, event: Arc<OwnedFd>) -> Result<IrqHelper, HostError> {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = word.as_ptr() as usize;
        let s = stop.clone();
        // Signals stay with the program: the thread starts with all of them blocked.
        let old = crate::beacon::block_all();
        let spawned = std::thread::Builder::new()
            .name("volley-irq".into())
            .stack_size(64 << 10)
            .spawn(move || {
                // SAFETY: the caller keeps the word valid until the helper is
                // joined (drop).
                let word = unsafe { &*(addr as *const AtomicU32) };
                irq_loop(word, &event, &s);
            });
        crate::beacon::restore(&old);
        let thread = spawned
            .map_err(|e| HostError::Fabric(format!("wake-up descriptor: no helper thread: {e}")))?;
        Ok(IrqHelper {
            word: addr,
            stop,
            thread: Some(thread),
        })
    }
}

fn irq_loop(word: &AtomicU32, event: &OwnedFd, stop: &AtomicBool) {
    use volley_myri::{IRQ_QUIET, IRQ_RAISED};
    while !stop.load(Ordering::Acquire) {
        let v = word.load(Ordering::Acquire);
        if v == IRQ_RAISED {
            // Quiet first, then told: a raise that comes after the program armed
            // again is either left for the next look or told by this write. (Told
            // first, a program that drained the event and armed again in between
            // would have its new raise taken back here, unannounced.) A failed
            // exchange means the program armed again: it looked at its rings then.
            if word
                .compare_exchange(IRQ_RAISED, IRQ_QUIET, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let one = 1u64;
                // SAFETY: a valid eventfd and 8 readable bytes.
                unsafe { libc::write(event.as_raw_fd(), (&one as *const u64).cast(), 8) };
            }
            continue;
        }
        futex_wait(word, v);
    }
}

impl Drop for IrqHelper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // SAFETY: the word is still mapped (the helper is dropped first).
        let word = unsafe { &*(self.word as *const AtomicU32) };
        // Changed, so that a helper about to wait on the old value does not sleep,
        // and woken: it sees `stop` at its next look.
        word.store(volley_myri::IRQ_RAISED, Ordering::Release);
        futex_wake(word);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        word.store(volley_myri::IRQ_QUIET, Ordering::Release);
    }
}

/// What a personality needs of the wake-up descriptor: a hosted process of any of
/// the four APIs sleeps on [`EventLoop::wakeup_fd`] after [`EventLoop::arm`].
pub trait EventLoop {
    /// The wake-up descriptor (made at the first call; close-on-exec): readable
    /// when there is work for the personality's poll.
    fn wakeup(&mut self) -> Result<&Wakeup, HostError>;

    /// Its raw descriptor.
    fn wakeup_fd(&mut self) -> Result<RawFd, HostError> {
        Ok(self.wakeup()?.as_raw_fd())
    }

    /// Arms the descriptor: `Ok(true)` when the program may now sleep on it,
    /// `Ok(false)` when work is already there (poll, then arm again).
    fn arm(&mut self) -> Result<bool, HostError>;
}

/// The earlier of two deadlines.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The arming every personality shares: `waiting`, work for the next poll is
/// there; `poll_at`, when the next poll is due with no frame arriving.
fn arm_device(
    dev: &mut HostDevice,
    now: Instant,
    waiting: bool,
    poll_at: Option<Instant>,
) -> Result<bool, HostError> {
    dev.wakeup()?.drain();
    if waiting || poll_at.is_some_and(|t| t <= now) || !dev.arm_rx() {
        return Ok(false);
    }
    let after =
        poll_at.map(|t| std::time::Duration::from_nanos(t.saturating_since(now).total_nanos()));
    dev.wakeup()?.set_timer(after)?;
    Ok(true)
}

impl<S> EventLoop for Gamma<'static, HostDevice, HostClock, S> {
    fn wakeup(&mut self) -> Result<&Wakeup, HostError> {
        self.device_mut().wakeup()
    }

    fn arm(&mut self) -> Result<bool, HostError> {
        let (now, at) = (self.clock().now(), self.poll_at());
        let waiting = self.work_waiting();
        arm_device(self.device_mut(), now, waiting, at)
    }
}

impl<S> EventLoop for Lfc<'static, HostDevice, HostClock, S> {
    fn wakeup(&mut self) -> Result<&Wakeup, HostError> {
        self.device_mut().wakeup()
    }

    fn arm(&mut self) -> Result<bool, HostError> {
        let at = earliest(self.poll_at(), self.keepalive_at());
        let (now, waiting) = (self.clock().now(), self.work_waiting());
        arm_device(self.device_mut(), now, waiting, at)
    }
}

impl<M: volley_core::engine::Memory> EventLoop for Cheetah<'static, HostDevice, HostClock, M> {
    fn wakeup(&mut self) -> Result<&Wakeup, HostError> {
        self.device_mut().wakeup()
    }

    fn arm(&mut self) -> Result<bool, HostError> {
        let at = earliest(self.poll_at(), self.keepalive_at());
        let (now, waiting) = (self.clock().now(), self.work_waiting());
        arm_device(self.device_mut(), now, waiting, at)
    }
}

impl<M: volley_core::engine::Memory> EventLoop for Qnix<'static, HostDevice, HostClock, M> {
    fn wakeup(&mut self) -> Result<&Wakeup, HostError> {
        self.device_mut().wakeup()
    }

    fn arm(&mut self) -> Result<bool, HostError> {
        let at = earliest(self.poll_at(), self.keepalive_at());
        let (now, waiting) = (self.clock().now(), self.work_waiting());
        arm_device(self.device_mut(), now, waiting, at)
    }
}
