//! The wake-up descriptor in a tokio runtime (feature `tokio`): an endpoint of any
//! of the four APIs whose waits are `.await`s, so that one runtime serves it beside
//! sockets, timers and other tasks.
//!
//! [`Async::until`] is the building block: it runs a poll of the API until the poll
//! returns something, and between two polls that find nothing it arms the
//! descriptor and awaits it (registered with the runtime's reactor), so the task
//! sleeps until a frame, a completion or one of the library's timers.

use std::os::fd::{AsRawFd, RawFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::EventLoop;
use crate::HostError;

/// The wake-up descriptor's number, for the reactor (the endpoint owns it).
#[derive(Debug)]
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// An endpoint (a hosted `Gamma`, `Lfc`, `Cheetah` or `Qnix`) whose waits are
/// awaited in a tokio runtime.
#[derive(Debug)]
pub struct Async<E> {
    // Deregistered before the endpoint (and its descriptor) goes.
    fd: AsyncFd<Fd>,
    ep: E,
}

fn io_error(e: std::io::Error) -> HostError {
    HostError::Fabric(format!("wake-up descriptor in the tokio reactor: {e}"))
}

impl<E: EventLoop> Async<E> {
    /// `ep`, its wake-up descriptor registered with the current runtime's reactor
    /// (call from inside a runtime with I/O enabled).
    pub fn new(mut ep: E) -> Result<Async<E>, HostError> {
        let fd = ep.wakeup_fd()?;
        // SAFETY: the descriptor is the endpoint's, open from its first call until
        // the endpoint drops, which is after the registration (field order here,
        // and `into_inner`); nothing replaces it meanwhile.
        let fd = unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }
            .map_err(|e| io_error(e.into()))?;
        Ok(Async { fd, ep })
    }

    /// The endpoint.
    pub fn get_ref(&self) -> &E {
        &self.ep
    }

    /// The endpoint, for calls that do not wait (sends, port set-up, a poll).
    pub fn get_mut(&mut self) -> &mut E {
        &mut self.ep
    }

    /// The endpoint back, its descriptor out of the reactor.
    pub fn into_inner(self) -> E {
        let Async { fd, ep } = self;
        drop(fd);
        ep
    }

    /// Runs `poll` (a poll of the API, then a look for what the caller waits
    /// for) until it returns `Some`, sleeping on the wake-up descriptor between
    /// two that find nothing. Other tasks run meanwhile.
    pub async fn until<T>(
        &mut self,
        mut poll: impl FnMut(&mut E) -> Option<T>,
    ) -> Result<T, HostError> {
        loop {
            if let Some(t) = poll(&mut self.ep) {
                return Ok(t);
            }
            if !self.ep.arm()? {
                // Work is there already: polled again, after the other tasks.
                tokio::task::yield_now().await;
                continue;
            }
            let mut ready = self.fd.readable().await.map_err(io_error)?;
            // Cleared before the next poll: what arrives after it raises the
            // descriptor again.
            ready.clear_ready();
        }
    }
}
