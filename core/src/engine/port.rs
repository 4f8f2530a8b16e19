//! Ports as the engine serves them: output binding, input buffer and semaphore
//! (GAMMA's port model, which the other personalities use only for counters), the
//! [`Notice`]s the engine queues for a personality's handlers, and the narrow view of
//! the engine a handler may use ([`HandlerView`]: post buffers, signal, queue sends).
//!
//! The engine holds no handler and no application state: a port only says whether
//! its owner wants a notice of messages or of errors. The personality takes the
//! notices after each call into the engine ([`Engine::next_notice`]) and runs its
//! own handlers with its own state (GAMMA: `gamma::Upcall`). The engine's other
//! mechanisms (channels, assemblies, packets, trees) do not depend on ports except
//! through `notify` and the port table.

use super::*;

/// How successive messages fill a port's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fill {
    /// Each message is stored at the start of the buffer.
    #[default]
    Restart,
    /// Each message is stored after the previous one (gather).
    Append,
}

/// What went wrong with a message or a send, told to the port's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A chunk of a message was lost (best-effort sends), or its sender died
    /// before the last one came (reliable).
    Lost,
    /// The message did not fit the buffer (or there was none) and was truncated.
    Truncated,
    /// A send to this port's destination failed: the peer stopped answering.
    SendFailed,
}

/// A port's destination buffer: lent for the engine's lifetime, or (with `alloc`)
/// owned, moving into the port and back out by value when a fresh one is posted.
#[derive(Debug, PartialEq, Eq)]
pub enum RecvBuf<'a> {
    /// Memory the caller lends.
    Lent(&'a mut [u8]),
    /// Memory handed over; [`Ports::post_recv`] gives it back.
    #[cfg(feature = "alloc")]
    Owned(alloc::boxed::Box<[u8]>),
}

impl<'a> RecvBuf<'a> {
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

/// One port: output binding, input buffer, semaphore, and whether its owner wants
/// notices.
pub struct Port<'a> {
    pub(super) dest: Option<Dest>,
    /// The fabric address of a one-node `dest` (groups are fixed: found once, at
    /// binding, instead of at every send).
    pub(super) dest_addr: Option<NodeAddr>,
    pub(super) input: bool,
    pub(super) recv: bool,
    pub(super) err: bool,
    pub(super) sem: u16,
    pub(super) kind: Fill,
    pub(super) buf: Option<RecvBuf<'a>>,
    pub(super) buf_len: usize,
    pub(super) cursor: usize,
    pub(super) full: bool,
    pub(super) busy: bool,
}

impl core::fmt::Debug for Port<'_> {
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

impl<'a> Port<'a> {
    /// An unbound port.
    pub const EMPTY: Port<'a> = Port {
        dest: None,
        dest_addr: None,
        input: false,
        recv: false,
        err: false,
        sem: 0,
        kind: Fill::Restart,
        buf: None,
        buf_len: 0,
        cursor: 0,
        full: false,
        busy: false,
    };

    /// Whether a whole message of `n` bytes may be stored here at once, with no
    /// assembly: an idle GO_BACK input port with room for it.
    #[inline(always)]
    pub(super) fn takes_whole(&self, n: usize) -> bool {
        self.input && !self.busy && self.kind == Fill::Restart && self.room(0) >= n
    }

    pub(super) fn room(&self, base: usize) -> usize {
        if self.full {
            return 0;
        }
        let len = self.buf.as_ref().map_or(0, |b| b.len().min(self.buf_len));
        len.saturating_sub(base)
    }
}

/// How to set a port up.
pub struct PortSetup<'a> {
    /// Output binding, if the port sends.
    pub dest: Option<Dest>,
    /// Whether the port receives.
    pub input: bool,
    /// A [`Notice`] is queued when a message has landed (its owner has a handler).
    pub recv: bool,
    /// A [`Notice`] is queued on an error at the port; without, errors count on the
    /// semaphore.
    pub err: bool,
    /// Semaphore incremented per message.
    pub sem: u16,
    /// How successive messages fill the buffer.
    pub kind: Fill,
    /// Destination buffer.
    pub buffer: Option<&'a mut [u8]>,
}

impl core::fmt::Debug for PortSetup<'_> {
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

/// What a port's owner is told: a message has landed (`fault` `None`, or
/// `Lost`/`Truncated` for one delivered damaged), or a send through the port
/// failed (`SendFailed`). Taken with [`Engine::next_notice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Notice {
    /// The port.
    pub port: PortId,
    /// The error, if this is for the error handler.
    pub fault: Option<Fault>,
    /// Length of the message as sent.
    pub msg_len: u32,
    /// Bytes of it stored in the port's buffer (less when truncated).
    pub stored: usize,
    /// Where in the buffer they start.
    pub base: usize,
    /// Sender's (for a failed send: destination's) group, instance and port.
    pub src: Endpoints,
}

/// A personality's handlers, run by [`Engine::poll_with`] from inside the poll:
/// a message that header prediction delivers reaches its handler in the step
/// that received its frame, with no notice queued and taken back.
pub trait Upcalls<'a> {
    /// Runs the handler of `notice` (as the personality would for a notice from
    /// [`Engine::next_notice`]) with the view of the engine it may use.
    fn upcall(&mut self, notice: &Notice, view: HandlerView<'_, 'a>);
}

/// The parts of the engine a handler may touch while it runs: ports and semaphores
/// (it derefs to [`Ports`], as the program's [`Engine::ports_mut`] does) and the
/// outbox of sends queued from handlers (started once the handler returns).
pub struct HandlerView<'u, 'a> {
    // The engine itself, one pointer to hand over: the view's methods are what a
    // handler may use of it.
    engine: &'u mut Engine<'a>,
}

impl core::fmt::Debug for HandlerView<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HandlerView")
            .field("outbox", &self.engine.outbox.len)
            .finish_non_exhaustive()
    }
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

impl<'a> HandlerView<'_, 'a> {
    /// The message `n` reports, read from its port's buffer.
    pub fn data(&self, n: &Notice) -> &[u8] {
        let end = n.base + n.stored;
        self.engine
            .ports
            .table
            .get(n.port as usize)
            .and_then(|p| p.buf.as_deref())
            .and_then(|b| b.get(n.base..end))
            .unwrap_or(&[])
    }
    /// Queues a send through `port`, reliable or best-effort: `head` (at most
    /// [`INLINE_HEAD_MAX`] bytes) and `body` are copied into one of the engine's eager
    /// buffers, so together at most [`EAGER_MAX`] bytes; the message leaves at the
    /// next transmit pass, in the order queued. A failure later is a `SendFailure`
    /// notice (or an error on the port's semaphore). Returns the length.
    /// `NoResources` when no buffer is free; a reliable broadcast in our group
    /// also leaves free the buffers its tree's relays need (as a copied `start_send`
    /// does).
    pub(crate) fn send(
        &mut self,
        port: PortId,
        head: &[u8],
        body: &[u8],
        reliable: bool,
    ) -> Result<usize, Error> {
        self.queue(port, head, body, reliable)
    }
    fn queue(
        &mut self,
        port: PortId,
        head: &[u8],
        body: &[u8],
        reliable: bool,
    ) -> Result<usize, Error> {
        let e = &mut *self.engine;
        let p = e.ports.table.get(port as usize).ok_or(Error::InvalidPort)?;
        let Some(dest) = p.dest else {
            return Err(Error::NotBound);
        };
        // A reliable broadcast in our group leaves free the eager buffers its
        // copy's relays need (`Engine::start`'s rule, so that handlers'
        // broadcasts from every root at once cannot take them all).
        let keep = match dest {
            Dest {
                node: BROADCAST,
                group,
                ..
            } if reliable && group == e.cfg.group => e.bcast.keep,
            _ => 0,
        };
        if head.len() > INLINE_HEAD_MAX {
            return Err(Error::FirstPieceTooLong);
        }
        let len = head.len() + body.len();
        if len > EAGER_MAX {
            return Err(Error::LongerThan(EAGER_MAX));
        }
        if e.outbox.len >= OUTBOX {
            return Err(Error::NoResources);
        }
        let i = e
            .bufs
            .eager_copy_parts(head, body, keep)
            .ok_or(Error::NoResources)?;
        e.outbox.items[e.outbox.len] = Queued {
            port,
            eager: i,
            len: len as u16,
            reliable,
        };
        e.outbox.len += 1;
        Ok(len)
    }
}

/// What to tell a port's owner (see `Engine::notify`).
pub(super) struct Note {
    pub(super) port: PortId,
    pub(super) fault: Option<Fault>,
    pub(super) count: bool,
    pub(super) msg_len: u32,
    pub(super) stored: usize,
    pub(super) base: usize,
    pub(super) src: Endpoints,
}

/// Notices waiting for the personality, oldest first (caller storage).
#[derive(Debug)]
pub(super) struct Notices<'a> {
    pub(super) ring: ManagedSlice<'a, Notice>,
    pub(super) head: usize,
    pub(super) len: usize,
}

impl<'a> Notices<'a> {
    /// A queue in `ring`.
    pub(super) fn new(ring: ManagedSlice<'a, Notice>) -> Self {
        Notices {
            ring,
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, n: Notice) -> bool {
        let cap = self.ring.len();
        if self.len >= cap {
            return false;
        }
        // head < cap and len < cap: one subtraction wraps it (no division).
        let mut at = self.head + self.len;
        if at >= cap {
            at -= cap;
        }
        self.ring[at] = n;
        self.len += 1;
        true
    }

    #[inline]
    fn pop(&mut self) -> Option<Notice> {
        if self.len == 0 {
            return None;
        }
        let n = self.ring[self.head];
        self.head += 1;
        if self.head == self.ring.len() {
            self.head = 0;
        }
        self.len -= 1;
        Some(n)
    }
}

impl<'a> Engine<'a> {
    // -------------------------------------------------------------- notices

    /// Counts event `n` on its port's semaphore and, if the port's owner wants it,
    /// queues it as a [`Notice`]. A port not set up for input has no semaphore or
    /// owner to tell (GAMMA: both belong to setting a port up for input), except of a
    /// failed send through it; the engine's counters still see it.
    #[inline]
    pub(super) fn notify(&mut self, n: Note) {
        if let Some(notice) = self.note(n) {
            self.queue_notice(notice);
        }
    }

    /// What [`Engine::notify`] does but the queueing: the count on the semaphore,
    /// and the notice the owner wants, if it wants one.
    #[inline]
    pub(super) fn note(&mut self, n: Note) -> Option<Notice> {
        let p = self.ports.table.get(n.port as usize)?;
        if !p.input && n.fault != Some(Fault::SendFailed) {
            return None;
        }
        let wanted = if n.fault.is_some() { p.err } else { p.recv };
        if let Some(s) = self.ports.sems.get_mut(p.sem as usize) {
            if n.count {
                s.count = s.count.saturating_add(1);
            }
            if n.fault.is_some() && !wanted {
                s.errors = s.errors.saturating_add(1);
            }
        }
        wanted.then_some(Notice {
            port: n.port,
            fault: n.fault,
            msg_len: n.msg_len,
            stored: n.stored,
            base: n.base,
            src: n.src,
        })
    }

    #[inline]
    fn queue_notice(&mut self, notice: Notice) {
        if !self.ports.notices.push(notice) {
            // Sized so that this cannot happen when notices are taken after every
            // call (see `Capacity`); counted if it does.
            self.stats.notices_dropped += 1;
        }
    }

    /// Hands `notice` to the personality's `upcalls` at once, where it gave some
    /// and no notice waits before this one (their order is kept); else queues it.
    #[inline]
    pub(super) fn hand_over(&mut self, notice: Notice, upcalls: Option<&mut dyn Upcalls<'a>>) {
        match upcalls {
            Some(u) if self.ports.notices.len == 0 => {
                self.stats.upcalls_in_poll += 1;
                u.upcall(&notice, self.handler_view());
            }
            _ => self.queue_notice(notice),
        }
    }

    /// The view of the engine a handler may use.
    #[inline]
    fn handler_view(&mut self) -> HandlerView<'_, 'a> {
        HandlerView { engine: self }
    }

    /// The oldest notice not yet taken, with the view of the engine its handler may
    /// use. Take them after every call into the engine: a GO_BACK port's next
    /// message is stored only at the next receive.
    #[inline]
    pub fn next_notice(&mut self) -> Option<(Notice, HandlerView<'_, 'a>)> {
        let n = self.ports.notices.pop()?;
        Some((n, self.handler_view()))
    }

    /// Notices waiting.
    #[inline]
    pub(crate) fn notices_pending(&self) -> usize {
        self.ports.notices.len
    }

    /// Sends queued from handlers that no transmit pass has started yet.
    #[inline]
    pub(crate) fn outbox_pending(&self) -> usize {
        self.outbox.len
    }

    // ---------------------------------------------------------------- ports

    /// Sets a port up (or re-binds it). Fails with `PortBusy` while a message is being
    /// stored into it.
    pub fn bind_port(&mut self, port: PortId, setup: PortSetup<'a>) -> Result<(), Error> {
        if setup.sem as usize >= self.ports.sems.len() {
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
            if d.port as usize >= self.ports.table.len() {
                return Err(Error::InvalidPort);
            }
        }
        let dest_addr = setup
            .dest
            .filter(|d| d.node != BROADCAST)
            .and_then(|d| self.addr_of(d.group, d.node).ok());
        let p = self.ports.port_mut(port)?;
        if p.busy {
            return Err(Error::PortBusy);
        }
        p.dest = setup.dest;
        p.dest_addr = dest_addr;
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

    /// The ports and semaphores, for the program: buffers posted, semaphores
    /// signalled and read.
    pub fn ports(&self) -> &Ports<'a> {
        &self.ports
    }
    /// [`Engine::ports`], to change.
    pub fn ports_mut(&mut self) -> &mut Ports<'a> {
        &mut self.ports
    }

    /// The port's output binding.
    pub(crate) fn port_dest(&self, port: PortId) -> Option<Dest> {
        self.ports.table.get(port as usize).and_then(|p| p.dest)
    }

    /// If `sem` has reached `n`, takes `n` from it and returns (and clears) the error
    /// count; otherwise `None`, or `SendFailure` where a peer that could have
    /// signalled it is dead (`Semaphore::peer_dead`): a wait would not end.
    pub(crate) fn try_take(&mut self, sem: u16, n: u32) -> Result<Option<u32>, Error> {
        let s = self
            .ports
            .sems
            .get_mut(sem as usize)
            .ok_or(Error::InvalidSemaphore)?;
        if s.count < n {
            return if s.peer_dead {
                Err(Error::SendFailure)
            } else {
                Ok(None)
            };
        }
        s.count -= n;
        Ok(Some(core::mem::take(&mut s.errors)))
    }
}

/// The ports, their semaphores, and the notices waiting for the personality:
/// what a program (through [`Engine::ports_mut`]) and a handler (through its
/// [`HandlerView`]) use alike.
#[derive(Debug)]
pub struct Ports<'a> {
    pub(super) table: ManagedSlice<'a, Port<'a>>,
    pub(super) notices: Notices<'a>,
    pub(super) sems: ManagedSlice<'a, Semaphore>,
}

impl<'a> Ports<'a> {
    pub(super) fn port_mut(&mut self, port: PortId) -> Result<&mut Port<'a>, Error> {
        self.table.get_mut(port as usize).ok_or(Error::InvalidPort)
    }

    /// A port not storing a message, its buffer's cursor rewound.
    fn idle_port(&mut self, port: PortId) -> Result<&mut Port<'a>, Error> {
        let p = self.port_mut(port)?;
        if p.busy {
            return Err(Error::PortBusy);
        }
        p.cursor = 0;
        p.full = false;
        Ok(p)
    }

    /// Binds a fresh buffer to `port`, returning the previous one. From a
    /// handler, allowed on the port whose notice is being handled: its message has
    /// landed, and the next one goes into `buf`.
    pub fn post_recv(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        let buf = buf.into();
        let p = self.idle_port(port)?;
        p.buf_len = buf.len();
        Ok(p.buf.replace(buf))
    }

    /// Binds a fresh buffer keeping the port's buffer size, returning the previous one.
    pub(crate) fn attach_buffer(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        let buf = buf.into();
        let p = self.port_mut(port)?;
        if !p.busy && buf.len() < p.buf_len {
            return Err(Error::BufferTooSmall);
        }
        Ok(self.idle_port(port)?.buf.replace(buf))
    }

    /// Takes the buffer back from `port`.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn take_buffer(&mut self, port: PortId) -> Result<Option<RecvBuf<'a>>, Error> {
        Ok(self.idle_port(port)?.buf.take())
    }

    /// The port's buffer, to read what was delivered into it.
    pub(crate) fn buffer(&self, port: PortId) -> Option<&[u8]> {
        let p = self.table.get(port as usize)?;
        let len = p.buf_len;
        p.buf.as_deref().map(|b| &b[..len.min(b.len())])
    }

    /// Increments semaphore `sem`.
    pub(crate) fn signal(&mut self, sem: u16) -> Result<(), Error> {
        let s = self.sem_mut(sem)?;
        s.count = s.count.saturating_add(1);
        Ok(())
    }

    /// Increments error semaphore `sem`.
    pub(crate) fn sigerr(&mut self, sem: u16) -> Result<(), Error> {
        let s = self.sem_mut(sem)?;
        s.errors = s.errors.saturating_add(1);
        Ok(())
    }

    /// The semaphore's state.
    pub fn semaphore(&self, sem: u16) -> Result<Semaphore, Error> {
        self.sems
            .get(sem as usize)
            .copied()
            .ok_or(Error::InvalidSemaphore)
    }

    fn sem_mut(&mut self, sem: u16) -> Result<&mut Semaphore, Error> {
        self.sems
            .get_mut(sem as usize)
            .ok_or(Error::InvalidSemaphore)
    }
}

impl<'a> core::ops::Deref for HandlerView<'_, 'a> {
    type Target = Ports<'a>;
    fn deref(&self) -> &Ports<'a> {
        &self.engine.ports
    }
}

impl<'a> core::ops::DerefMut for HandlerView<'_, 'a> {
    fn deref_mut(&mut self) -> &mut Ports<'a> {
        &mut self.engine.ports
    }
}
