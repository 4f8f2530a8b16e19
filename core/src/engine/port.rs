//! GAMMA's port model as the engine serves it: ports (output binding, input buffer,
//! handlers, semaphore), semaphores, the handler context (`Upcall`) with its outbox,
//! and the notification that runs a port's handlers. The engine's other mechanisms
//! (channels, assemblies, packets, trees) do not depend on it except through
//! `notify` and the port table.

use super::*;

/// How successive messages fill a port's buffer (GAMMA `buffer_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BufferKind {
    /// Each message is stored at the start of the buffer.
    #[default]
    GoBack,
    /// Each message is stored after the previous one (gather).
    GoAhead,
}

/// Error conditions reported to handlers, with GAMMA's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Errno {
    /// A chunk of a message was lost (best-effort sends).
    FrameLost = 2,
    /// The message did not fit the buffer (or there was none) and was truncated.
    MsgTooLong = 3,
    /// A send to this port's destination failed: the peer stopped answering.
    SendFailure = 4,
}

/// A receiver or error handler.
pub type Handler<'a, S> = fn(&mut Upcall<'_, 'a, S>);

/// A port's destination buffer: lent for the engine's lifetime, or (with `alloc`)
/// owned, moving into the port and back out by value when a fresh one is posted.
#[derive(Debug, PartialEq, Eq)]
pub enum RecvBuf<'a> {
    /// Memory the caller lends.
    Lent(&'a mut [u8]),
    /// Memory handed over; [`Engine::post_recv`] gives it back.
    #[cfg(feature = "alloc")]
    Owned(alloc::boxed::Box<[u8]>),
}

impl<'a> RecvBuf<'a> {
    /// The lent slice back, if this buffer was lent.
    pub fn into_lent(self) -> Option<&'a mut [u8]> {
        match self {
            RecvBuf::Lent(b) => Some(b),
            #[cfg(feature = "alloc")]
            RecvBuf::Owned(_) => None,
        }
    }

    /// The owned buffer back, if this buffer was owned.
    #[cfg(feature = "alloc")]
    pub fn into_owned(self) -> Option<alloc::boxed::Box<[u8]>> {
        match self {
            RecvBuf::Owned(b) => Some(b),
            RecvBuf::Lent(_) => None,
        }
    }
}

impl core::ops::Deref for RecvBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            RecvBuf::Lent(b) => b,
            #[cfg(feature = "alloc")]
            RecvBuf::Owned(b) => b,
        }
    }
}

impl core::ops::DerefMut for RecvBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            RecvBuf::Lent(b) => b,
            #[cfg(feature = "alloc")]
            RecvBuf::Owned(b) => b,
        }
    }
}

impl<'a> From<&'a mut [u8]> for RecvBuf<'a> {
    fn from(b: &'a mut [u8]) -> Self {
        RecvBuf::Lent(b)
    }
}

#[cfg(feature = "alloc")]
impl From<alloc::boxed::Box<[u8]>> for RecvBuf<'_> {
    fn from(b: alloc::boxed::Box<[u8]>) -> Self {
        RecvBuf::Owned(b)
    }
}

#[cfg(feature = "alloc")]
impl From<alloc::vec::Vec<u8>> for RecvBuf<'_> {
    fn from(b: alloc::vec::Vec<u8>) -> Self {
        RecvBuf::Owned(b.into_boxed_slice())
    }
}

/// One port: output binding, input buffer, handlers and semaphore.
pub struct Port<'a, S> {
    pub(super) dest: Option<Dest>,
    pub(super) input: bool,
    pub(super) recv: Option<Handler<'a, S>>,
    pub(super) err: Option<Handler<'a, S>>,
    pub(super) sem: u16,
    pub(super) kind: BufferKind,
    pub(super) buf: Option<RecvBuf<'a>>,
    pub(super) buf_len: usize,
    pub(super) cursor: usize,
    pub(super) full: bool,
    pub(super) busy: bool,
}

impl<S> core::fmt::Debug for Port<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Port")
            .field("dest", &self.dest)
            .field("input", &self.input)
            .field("sem", &self.sem)
            .field("kind", &self.kind)
            .field("buf_len", &self.buf_len)
            .field("cursor", &self.cursor)
            .field("busy", &self.busy)
            .finish_non_exhaustive()
    }
}

impl<'a, S> Port<'a, S> {
    /// An unbound port.
    pub const EMPTY: Port<'a, S> = Port {
        dest: None,
        input: false,
        recv: None,
        err: None,
        sem: 0,
        kind: BufferKind::GoBack,
        buf: None,
        buf_len: 0,
        cursor: 0,
        full: false,
        busy: false,
    };

    pub(super) fn room(&self, base: usize) -> usize {
        if self.full {
            return 0;
        }
        let len = self.buf.as_ref().map_or(0, |b| b.len().min(self.buf_len));
        len.saturating_sub(base)
    }
}

/// How to set a port up.
pub struct PortSetup<'a, S> {
    /// Output binding, if the port sends.
    pub dest: Option<Dest>,
    /// Whether the port receives.
    pub input: bool,
    /// Run when a message has landed.
    pub recv: Option<Handler<'a, S>>,
    /// Run on an error at the port; without one, errors count on the semaphore.
    pub err: Option<Handler<'a, S>>,
    /// Semaphore incremented per message.
    pub sem: u16,
    /// How successive messages fill the buffer.
    pub kind: BufferKind,
    /// Destination buffer.
    pub buffer: Option<&'a mut [u8]>,
}

impl<S> core::fmt::Debug for PortSetup<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortSetup")
            .field("dest", &self.dest)
            .field("input", &self.input)
            .field("sem", &self.sem)
            .finish_non_exhaustive()
    }
}

/// A notification counter with its error count (GAMMA semaphore, QNIX/Cheetah doorbell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Semaphore {
    /// Events signalled and not yet waited for.
    pub count: u32,
    /// Errors signalled since the last wait.
    pub errors: u32,
    /// A peer that a port counting on this semaphore is bound to has died: a wait
    /// for more than `count` may never end.
    pub peer_dead: bool,
}

/// The context a handler runs in: the message, the port, and the engine's counters.
pub struct Upcall<'u, 'a, S> {
    pub(super) port: PortId,
    pub(super) errno: Option<Errno>,
    pub(super) msg_len: u32,
    pub(super) stored: usize,
    pub(super) base: usize,
    pub(super) src: Endpoints,
    pub(super) ports: &'u mut [Port<'a, S>],
    pub(super) sems: &'u mut [Semaphore],
    pub(super) state: &'u mut S,
    pub(super) eager: &'u mut [EagerBuf],
    pub(super) outbox: &'u mut Outbox,
}

/// Sends a handler queued, at most this many per poll.
pub const OUTBOX: usize = 32;

/// A send queued by a handler: its bytes wait in an eager buffer.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Queued {
    pub(super) port: PortId,
    pub(super) eager: u16,
    pub(super) len: u16,
    pub(super) reliable: bool,
}

/// Sends queued by handlers, started once the handler has returned.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    pub(super) items: [Queued; OUTBOX],
    pub(super) len: usize,
}

impl<S> core::fmt::Debug for Upcall<'_, '_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Upcall")
            .field("port", &self.port)
            .field("errno", &self.errno)
            .field("msg_len", &self.msg_len)
            .field("stored", &self.stored)
            .finish_non_exhaustive()
    }
}

impl<'a, S> Upcall<'_, 'a, S> {
    /// The port that triggered this handler (GAMMA `gamma_active_port`).
    pub fn active_port(&self) -> PortId {
        self.port
    }
    /// The error being reported, if this is an error handler (GAMMA `gamma_errno`).
    pub fn errno(&self) -> Option<Errno> {
        self.errno
    }
    /// Length of the message as sent.
    pub fn msg_len(&self) -> usize {
        self.msg_len as usize
    }
    /// Bytes of it stored in the buffer (less when truncated).
    pub fn len(&self) -> usize {
        self.stored
    }
    /// True for an empty message.
    pub fn is_empty(&self) -> bool {
        self.stored == 0
    }
    /// Sender's group, instance and port.
    pub fn source(&self) -> Dest {
        Dest {
            group: self.src.src_group,
            node: self.src.src_node,
            port: self.src.src_port,
        }
    }
    /// The stored message, read from the port's buffer.
    pub fn data(&self) -> &[u8] {
        let p = &self.ports[self.port as usize];
        let end = self.base + self.stored;
        p.buf
            .as_deref()
            .and_then(|b| b.get(self.base..end))
            .unwrap_or(&[])
    }
    /// The application state shared with handlers.
    pub fn state(&mut self) -> &mut S {
        self.state
    }
    /// Increments semaphore `sem` (GAMMA `gamma_signal`).
    pub fn signal(&mut self, sem: u16) -> Result<(), Error> {
        signal(self.sems, sem)
    }
    /// Increments error semaphore `sem` (GAMMA `gamma_sigerr`).
    pub fn sigerr(&mut self, sem: u16) -> Result<(), Error> {
        sigerr(self.sems, sem)
    }
    /// Binds a fresh buffer to `port`, returning the previous one (GAMMA
    /// `gamma_post_recv`). Allowed on the port whose handler is running: its message
    /// has landed, and the next one goes into `buf`.
    pub fn post_recv(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        post_recv(self.ports, port, buf.into())
    }
    /// Binds a fresh buffer keeping the port's buffer size (GAMMA `gamma_attach_buffer`).
    pub fn attach_buffer(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        attach_buffer(self.ports, port, buf.into())
    }
    /// Takes the buffer back from `port`.
    pub fn take_buffer(&mut self, port: PortId) -> Result<Option<RecvBuf<'a>>, Error> {
        take_buffer(self.ports, port)
    }
    /// A semaphore's state (GAMMA `gamma_test` from a handler).
    pub fn semaphore(&self, sem: u16) -> Result<Semaphore, Error> {
        self.sems
            .get(sem as usize)
            .copied()
            .ok_or(Error::InvalidSemaphore)
    }
    /// Queues a best-effort send through `port` (GAMMA `gamma_send` from a handler).
    /// `head` (at most [`HEAD_MAX`] bytes) and `body` are copied into one of the
    /// engine's eager buffers, so together at most [`EAGER_MAX`] bytes; the message
    /// leaves when the handler has returned, in the order queued. A failure later is
    /// reported through the port's error handler or error semaphore. Returns the length.
    pub fn send(&mut self, port: PortId, head: &[u8], body: &[u8]) -> Result<usize, Error> {
        self.queue(port, head, body, false)
    }
    /// Queues a reliable send (GAMMA `gamma_send_flowctl` from a handler); see [`Upcall::send`].
    pub fn send_flowctl(&mut self, port: PortId, head: &[u8], body: &[u8]) -> Result<usize, Error> {
        self.queue(port, head, body, true)
    }
    fn queue(
        &mut self,
        port: PortId,
        head: &[u8],
        body: &[u8],
        reliable: bool,
    ) -> Result<usize, Error> {
        let p = self.ports.get(port as usize).ok_or(Error::InvalidPort)?;
        if p.dest.is_none() {
            return Err(Error::NotBound);
        }
        if head.len() > HEAD_MAX {
            return Err(Error::FirstPieceTooLong);
        }
        let len = head.len() + body.len();
        if len > EAGER_MAX {
            return Err(Error::MessageTooLong);
        }
        if self.outbox.len >= OUTBOX {
            return Err(Error::NoResources);
        }
        let i = self
            .eager
            .iter()
            .position(|e| !e.used)
            .ok_or(Error::NoResources)?;
        let e = &mut self.eager[i];
        e.used = true;
        e.data[..head.len()].copy_from_slice(head);
        e.data[head.len()..len].copy_from_slice(body);
        self.outbox.items[self.outbox.len] = Queued {
            port,
            eager: i as u16,
            len: len as u16,
            reliable,
        };
        self.outbox.len += 1;
        Ok(len)
    }
}

pub(super) fn signal(sems: &mut [Semaphore], sem: u16) -> Result<(), Error> {
    let s = sems.get_mut(sem as usize).ok_or(Error::InvalidSemaphore)?;
    s.count = s.count.saturating_add(1);
    Ok(())
}

pub(super) fn sigerr(sems: &mut [Semaphore], sem: u16) -> Result<(), Error> {
    let s = sems.get_mut(sem as usize).ok_or(Error::InvalidSemaphore)?;
    s.errors = s.errors.saturating_add(1);
    Ok(())
}

pub(super) fn port_mut<'p, 'a, S>(
    ports: &'p mut [Port<'a, S>],
    port: PortId,
) -> Result<&'p mut Port<'a, S>, Error> {
    ports.get_mut(port as usize).ok_or(Error::InvalidPort)
}

pub(super) fn post_recv<'a, S>(
    ports: &mut [Port<'a, S>],
    port: PortId,
    buf: RecvBuf<'a>,
) -> Result<Option<RecvBuf<'a>>, Error> {
    let p = port_mut(ports, port)?;
    if p.busy {
        return Err(Error::PortBusy);
    }
    p.buf_len = buf.len();
    p.cursor = 0;
    p.full = false;
    Ok(p.buf.replace(buf))
}

pub(super) fn attach_buffer<'a, S>(
    ports: &mut [Port<'a, S>],
    port: PortId,
    buf: RecvBuf<'a>,
) -> Result<Option<RecvBuf<'a>>, Error> {
    let p = port_mut(ports, port)?;
    if p.busy {
        return Err(Error::PortBusy);
    }
    if buf.len() < p.buf_len {
        return Err(Error::BufferTooSmall);
    }
    p.cursor = 0;
    p.full = false;
    Ok(p.buf.replace(buf))
}

pub(super) fn take_buffer<'a, S>(
    ports: &mut [Port<'a, S>],
    port: PortId,
) -> Result<Option<RecvBuf<'a>>, Error> {
    let p = port_mut(ports, port)?;
    if p.busy {
        return Err(Error::PortBusy);
    }
    p.cursor = 0;
    p.full = false;
    Ok(p.buf.take())
}

/// What to tell a port's handlers.
pub(super) struct Note {
    pub(super) port: PortId,
    pub(super) errno: Option<Errno>,
    pub(super) count: bool,
    pub(super) msg_len: u32,
    pub(super) stored: usize,
    pub(super) base: usize,
    pub(super) src: Endpoints,
}

/// Borrowed parts of the engine a handler may touch.
pub(super) struct HandlerCx<'e, 'a, S> {
    pub(super) ports: &'e mut [Port<'a, S>],
    pub(super) sems: &'e mut [Semaphore],
    pub(super) state: &'e mut S,
    pub(super) eager: &'e mut [EagerBuf],
    pub(super) outbox: &'e mut Outbox,
}

pub(super) fn notify<S>(cx: HandlerCx<'_, '_, S>, n: Note) {
    let HandlerCx {
        ports,
        sems,
        state,
        eager,
        outbox,
    } = cx;
    let Some(p) = ports.get(n.port as usize) else {
        return;
    };
    // A port not set up for input has no handler or semaphore to tell (seed: both are
    // part of setting a port up for input); the engine's counters still see it.
    if !p.input && n.errno != Some(Errno::SendFailure) {
        return;
    }
    let sem = p.sem as usize;
    let handler = if n.errno.is_some() { p.err } else { p.recv };
    if let Some(s) = sems.get_mut(sem) {
        if n.count {
            s.count = s.count.saturating_add(1);
        }
        if n.errno.is_some() && handler.is_none() {
            s.errors = s.errors.saturating_add(1);
        }
    }
    if let Some(h) = handler {
        let mut up = Upcall {
            port: n.port,
            errno: n.errno,
            msg_len: n.msg_len,
            stored: n.stored,
            base: n.base,
            src: n.src,
            ports,
            sems,
            state,
            eager,
            outbox,
        };
        h(&mut up);
    }
}

impl<'a, S> Engine<'a, S> {
    // ---------------------------------------------------------------- ports

    /// Sets a port up (or re-binds it). Fails with `PortBusy` while a message is being
    /// stored into it.
    pub fn bind_port(&mut self, port: PortId, setup: PortSetup<'a, S>) -> Result<(), Error> {
        if setup.sem as usize >= self.sems.len() {
            return Err(Error::InvalidSemaphore);
        }
        if let Some(d) = setup.dest {
            let g = self.group(d.group).ok_or(Error::UnknownGroup)?;
            if d.node != BROADCAST && d.node >= g.members.len() {
                return Err(Error::UnknownNode);
            }
            if d.group == self.cfg.group && d.node == self.cfg.node {
                return Err(Error::SelfConnect);
            }
            if d.port as usize >= self.ports.len() {
                return Err(Error::InvalidPort);
            }
        }
        let p = port_mut(&mut self.ports, port)?;
        if p.busy {
            return Err(Error::PortBusy);
        }
        p.dest = setup.dest;
        p.input = setup.input;
        p.recv = setup.recv;
        p.err = setup.err;
        p.sem = setup.sem;
        p.kind = setup.kind;
        p.buf_len = setup.buffer.as_ref().map_or(0, |b| b.len());
        p.buf = setup.buffer.map(RecvBuf::Lent);
        p.cursor = 0;
        p.full = false;
        Ok(())
    }

    /// Binds a fresh buffer to `port`, returning the previous one.
    pub fn post_recv(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        post_recv(&mut self.ports, port, buf.into())
    }

    /// Binds a fresh buffer keeping the port's buffer size, returning the previous one.
    pub fn attach_buffer(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        attach_buffer(&mut self.ports, port, buf.into())
    }

    /// Takes the buffer back from `port`.
    pub fn take_buffer(&mut self, port: PortId) -> Result<Option<RecvBuf<'a>>, Error> {
        take_buffer(&mut self.ports, port)
    }

    /// The port's buffer, to read what was delivered into it.
    pub fn buffer(&self, port: PortId) -> Option<&[u8]> {
        let p = self.ports.get(port as usize)?;
        let len = p.buf_len;
        p.buf.as_deref().map(|b| &b[..len.min(b.len())])
    }

    /// The port's output binding.
    pub fn port_dest(&self, port: PortId) -> Option<Dest> {
        self.ports.get(port as usize).and_then(|p| p.dest)
    }

    // ----------------------------------------------------------- semaphores

    /// Increments semaphore `sem`.
    pub fn signal(&mut self, sem: u16) -> Result<(), Error> {
        signal(&mut self.sems, sem)
    }
    /// Increments error semaphore `sem`.
    pub fn sigerr(&mut self, sem: u16) -> Result<(), Error> {
        sigerr(&mut self.sems, sem)
    }
    /// The semaphore's state.
    pub fn semaphore(&self, sem: u16) -> Result<Semaphore, Error> {
        self.sems
            .get(sem as usize)
            .copied()
            .ok_or(Error::InvalidSemaphore)
    }
    /// If `sem` has reached `n`, takes `n` from it and returns (and clears) the error
    /// count; otherwise `None`.
    pub fn try_take(&mut self, sem: u16, n: u32) -> Result<Option<u32>, Error> {
        let s = self
            .sems
            .get_mut(sem as usize)
            .ok_or(Error::InvalidSemaphore)?;
        if s.count < n {
            return Ok(None);
        }
        s.count -= n;
        Ok(Some(core::mem::take(&mut s.errors)))
    }
}
