//! The GAMMA personality: the Genoa Active Message MAchine API (2004), in Rust.
//!
//! Named after the seed's functions (`gamma_send` is [`Gamma::send`], and so on) so a
//! GAMMA programmer finds everything. Differences that Rust imposes, and choices the
//! seed left open:
//!
//! - Buffers are lent or handed over, not pinned: [`Gamma::set_active_port`] takes a
//!   lent `&'a mut [u8]`; [`Gamma::post_recv`] takes a lent slice or an owned
//!   `Vec<u8>`/`Box<[u8]>` ([`RecvBuf`]) and gives the previous buffer back by value,
//!   so a program can keep its buffers in its state and swap them from a handler
//!   without leaking them. [`Gamma::buffer`] reads what landed. The Rust API does not
//!   lock memory: a lent buffer cannot move under the engine, and a hosted process is
//!   paged like any other (the C library's `gamma_mlock` calls `mlock(2)`).
//! - Handlers are `fn(&mut Upcall)`: `gamma_active_port`, the message length and
//!   `gamma_errno` are read from the [`Upcall`], and shared state lives in the `S` value
//!   that [`Upcall::state`] and [`Gamma::state`] reach (GAMMA used globals).
//!   Handlers run inside [`Gamma::poll`] and the blocking calls, straight off the
//!   device, when a whole message has landed and before the port stores another one.
//!   As the seed allows, a handler may make any GAMMA call that does not wait: signal
//!   semaphores, re-post buffers ([`Upcall::post_recv`]) and send
//!   ([`Upcall::send`], [`Upcall::send_flowctl`]: copied, at most `EAGER_MAX` bytes,
//!   queued and transmitted as soon as the handler returns; a failure later goes to
//!   the port's error handler). Waiting calls (`wait`, `sync`, `wsend`) cannot be
//!   reached from a handler.
//! - A reliable message to a port the receiver has not bound for input is refused
//!   and retried for [`Config::unbound_grace`] (10 s by default: ports set up late
//!   still get it), then discarded by the receiver, which tells the sender: the send
//!   fails with [`Error::PortClosed`] and the port's error handler sees `SENDFAILURE`.
//!   Best-effort messages to such a port are dropped and counted
//!   ([`crate::engine::Stats::rx_dropped`]): no handler and no semaphore belongs to it.
//!   Reserved ports (1023, 1024) are refused as destinations by `set_active_port`.
//! - Service levels: plain `send` is *best-effort*: fragments are never retransmitted,
//!   and a receiver that misses one sees `FRAMELOST` on the port (error handler, or the
//!   error count that [`Gamma::wait`] returns), never silently wrong data. Non-blocking
//!   sends complete once handed to the device. The `_flowctl` sends are *reliable and
//!   flow-controlled*: credits, acks, retransmission. A blocking `_flowctl` send of at
//!   most `EAGER_MAX` (16 KiB) bytes copies the message into the engine and returns
//!   once it is on the wire (MPI's eager protocol): delivery is then the engine's job,
//!   and a peer that stops answering is reported through the port's error handler or
//!   error semaphore. Larger ones, and the non-blocking ones, complete when the
//!   receiver has taken the whole message, or fail with `SENDFAILURE`. A `_flowctl` message to a port that
//!   is not set up yet, or busy, is retried until it is taken.
//! - Blocking calls spin on [`Gamma::poll`] as GAMMA's did; `wait_deadline` is an
//!   addition that gives up at a deadline.

use crate::endpoint::Endpoint;
use crate::engine::{
    Body, Config, Dest, Engine, Error, Fault, Fill, Group, HandlerView, NoMemory, Notice, OneFrame,
    PortSetup, Semaphore, SendHandle, SendRequest, SendStatus, Storage, Upcalls,
};
use crate::phy::Device;
use crate::time::{Duration, Instant};
use crate::{GroupId, NodeId, PortId};
use managed::ManagedSlice;

pub use crate::engine::{RecvBuf, BROADCAST};

/// Ports per process, numbered `0..=1024`.
pub const PORTS: usize = 1025;
/// Looks at the device a waiting call takes between two polls that find nothing,
/// with one peer and nothing waiting to be sent; with `n` peers `LOOKS / n` (each
/// look loads a slot per peer). A frame that comes during the looks is noticed at
/// the next look, one that comes during a poll at the next poll: the longer the
/// looks against a poll, the sooner a reply is noticed on average. 256 loads are
/// under a microsecond, which timers and retries can wait. See `Gamma::await_frame`.
pub const LOOKS: u32 = 256;
/// [`LOOKS`] while something waits to be sent: the credits it waits for show only
/// to a poll.
pub const LOOKS_SENDING: u32 = 32;
/// Semaphores per process, numbered `0..=1024`.
pub const SEMAPHORES: usize = 1025;
/// Port and semaphore reserved for broadcast.
pub const BROADCAST_PORT: PortId = 1023;
/// Port and semaphore reserved for barrier synchronisation (the port the engine's
/// barrier tokens carry).
pub const BARRIER_PORT: PortId = crate::wire::BARRIER_TOKEN_PORT;
/// Longest first piece of a two-piece send (`send_2p`), copied at the call.
pub const HEAD_MAX: usize = crate::engine::INLINE_HEAD_MAX;
/// Store each message after the previous one.
pub const GO_AHEAD: BufferKind = BufferKind::GoAhead;
/// Store each message at the start of the buffer.
pub const GO_BACK: BufferKind = BufferKind::GoBack;
/// Longest reliable non-blocking send (`isend_flowctl`, `isend_2p_flowctl`) copied
/// into the engine as a blocking one is, and complete once on the wire. (A 4 KiB
/// limit cost streaming `isend_flowctl` of 4 KiB a third of its bandwidth: the copy.)
pub const ISEND_COPY_MAX: usize = 1024;
/// `gamma_errno` value: a chunk of a message was lost.
pub const ERR_FRAMELOST: u8 = Errno::FrameLost as u8;
/// `gamma_errno` value: the message did not fit the buffer.
pub const ERR_MSGTOOLONG: u8 = Errno::MsgTooLong as u8;
/// `gamma_errno` value: a send failed.
pub const ERR_SENDFAILURE: u8 = Errno::SendFailure as u8;

/// How successive messages fill a port's buffer (GAMMA `buffer_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BufferKind {
    /// Each message is stored at the start of the buffer.
    #[default]
    GoBack,
    /// Each message is stored after the previous one (gather).
    GoAhead,
}

impl From<BufferKind> for Fill {
    fn from(k: BufferKind) -> Self {
        match k {
            BufferKind::GoBack => Fill::Restart,
            BufferKind::GoAhead => Fill::Append,
        }
    }
}

/// Error conditions reported to handlers, with GAMMA's numbers (`gamma_errno`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Errno {
    /// A chunk of a message was lost (best-effort sends), or its sender died
    /// before the last one came (reliable).
    FrameLost = 2,
    /// The message did not fit the buffer (or there was none) and was truncated.
    MsgTooLong = 3,
    /// A send to this port's destination failed: the peer stopped answering.
    SendFailure = 4,
}

impl From<Fault> for Errno {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Lost => Errno::FrameLost,
            Fault::Truncated => Errno::MsgTooLong,
            Fault::SendFailed => Errno::SendFailure,
        }
    }
}

/// The negative value GAMMA's C calls return for `e`: GAMMA's own numbers where
/// GAMMA has one (a message the receiver discarded is a failed send to GAMMA),
/// Volley's above 10 otherwise.
pub fn code(e: Error) -> i32 {
    let n = match e {
        Error::SendFailure | Error::PortClosed => return -(Errno::SendFailure as i32),
        Error::BufferTooSmall => return -(Errno::MsgTooLong as i32),
        Error::InvalidPort => 0,
        Error::ReservedPort => 1,
        Error::NotBound => 2,
        Error::SelfConnect => 3,
        Error::InvalidSemaphore => 4,
        Error::UnknownGroup => 5,
        Error::UnknownNode => 6,
        Error::NoResources => 7,
        Error::InvalidHandle => 8,
        Error::FirstPieceTooLong => 9,
        Error::MessageTooLong | Error::LongerThan(_) => 10,
        Error::PortBusy => 13,
        Error::BarrierInProgress => 14,
        Error::BadConfig => 15,
        Error::Timeout => 16,
        Error::InHandler => 18,
        Error::InvalidCounter => 19,
        Error::BadAddress => 20,
        Error::PeerLeft => 21,
    };
    -(10 + n)
}

pub use crate::time::Clock;
#[cfg(feature = "std")]
pub use crate::time::StdClock;

/// A receiver or error handler.
pub type Handler<'a, S> = fn(&mut Upcall<'_, 'a, S>);

/// A port's two handlers.
pub struct PortHandlers<'a, S> {
    /// Run when a message has landed.
    pub recv: Option<Handler<'a, S>>,
    /// Run on an error at the port.
    pub err: Option<Handler<'a, S>>,
}

impl<'a, S> PortHandlers<'a, S> {
    /// No handler.
    pub const EMPTY: PortHandlers<'a, S> = PortHandlers {
        recv: None,
        err: None,
    };
}

impl<S> core::fmt::Debug for PortHandlers<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortHandlers")
            .field("recv", &self.recv.is_some())
            .field("err", &self.err.is_some())
            .finish()
    }
}

/// The context a handler runs in: the message (or error), the engine's ports,
/// semaphores and outbox, and the application state.
pub struct Upcall<'u, 'a, S> {
    notice: &'u Notice,
    view: HandlerView<'u, 'a>,
    state: &'u mut S,
}

impl<S> core::fmt::Debug for Upcall<'_, '_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Upcall")
            .field("notice", &self.notice)
            .finish_non_exhaustive()
    }
}

impl<'a, S> Upcall<'_, 'a, S> {
    /// The port that triggered this handler (GAMMA `gamma_active_port`).
    pub fn active_port(&self) -> PortId {
        self.notice.port
    }
    /// The error being reported, if this is an error handler (GAMMA `gamma_errno`).
    pub fn errno(&self) -> Option<Errno> {
        self.notice.fault.map(Errno::from)
    }
    /// Length of the message as sent.
    pub fn msg_len(&self) -> usize {
        self.notice.msg_len as usize
    }
    /// Bytes of it stored in the buffer (less when truncated).
    pub fn len(&self) -> usize {
        self.notice.stored
    }
    /// True for an empty message.
    pub fn is_empty(&self) -> bool {
        self.notice.stored == 0
    }
    /// Sender's group, instance and port.
    pub fn source(&self) -> Dest {
        let e = &self.notice.src;
        Dest {
            group: e.src_group,
            node: e.src_node,
            port: e.src_port,
        }
    }
    /// The stored message, read from the port's buffer.
    pub fn data(&self) -> &[u8] {
        self.view.data(self.notice)
    }
    /// The application state shared with handlers.
    pub fn state(&mut self) -> &mut S {
        self.state
    }
    /// Increments semaphore `sem` (GAMMA `gamma_signal`).
    pub fn signal(&mut self, sem: u16) -> Result<(), Error> {
        self.view.signal(sem)
    }
    /// Increments error semaphore `sem` (GAMMA `gamma_sigerr`).
    pub fn sigerr(&mut self, sem: u16) -> Result<(), Error> {
        self.view.sigerr(sem)
    }
    /// Binds a fresh buffer to `port`, returning the previous one (GAMMA
    /// `gamma_post_recv`). Allowed on the port whose handler is running: its message
    /// has landed, and the next one goes into `buf`.
    pub fn post_recv(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        self.view.post_recv(port, buf.into())
    }
    /// Binds a fresh buffer keeping the port's buffer size (GAMMA `gamma_attach_buffer`).
    pub fn attach_buffer(
        &mut self,
        port: PortId,
        buf: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        self.view.attach_buffer(port, buf.into())
    }
    /// Takes the buffer back from `port`.
    pub fn take_buffer(&mut self, port: PortId) -> Result<Option<RecvBuf<'a>>, Error> {
        self.view.take_buffer(port)
    }
    /// A semaphore's state (GAMMA `gamma_test` from a handler).
    pub fn semaphore(&self, sem: u16) -> Result<Semaphore, Error> {
        self.view.semaphore(sem)
    }
    /// Queues a best-effort send through `port` (GAMMA `gamma_send` from a handler).
    /// `head` (at most [`HEAD_MAX`] bytes) and `body` are copied into
    /// one of the engine's eager buffers, so together at most
    /// [`crate::engine::EAGER_MAX`] bytes; the message leaves when the handler has
    /// returned, in the order queued. A failure later is reported through the port's
    /// error handler or error semaphore. Returns the length.
    pub fn send(&mut self, port: PortId, head: &[u8], body: &[u8]) -> Result<usize, Error> {
        self.view.send(port, head, body, false)
    }
    /// Queues a reliable send (GAMMA `gamma_send_flowctl` from a handler); see [`Upcall::send`].
    pub fn send_flowctl(&mut self, port: PortId, head: &[u8], body: &[u8]) -> Result<usize, Error> {
        self.view.send(port, head, body, true)
    }
}

/// The ports' handlers and the state they share, as the engine runs them
/// ([`Upcalls`]): from inside a poll, or for a queued notice.
struct Direct<'h, 'a, S> {
    handlers: &'h ManagedSlice<'a, PortHandlers<'a, S>>,
    state: &'h mut S,
}

impl<'a, S> Upcalls<'a> for Direct<'_, 'a, S> {
    #[inline]
    fn upcall(&mut self, notice: &Notice, view: HandlerView<'_, 'a>) {
        let h = self.handlers.get(notice.port as usize).and_then(|h| {
            if notice.fault.is_some() {
                h.err
            } else {
                h.recv
            }
        });
        if let Some(h) = h {
            h(&mut Upcall {
                notice,
                view,
                state: &mut *self.state,
            });
        }
    }
}

/// One GAMMA process: the engine, its device and its clock, the ports' handlers and
/// the state they share.
pub struct Gamma<'a, D, C, S = ()> {
    ep: Endpoint<'a, D, C>,
    handlers: ManagedSlice<'a, PortHandlers<'a, S>>,
    state: S,
}

crate::endpoint::deref_endpoint!(Gamma, 'a, D, C, S);

impl<D, C, S> core::fmt::Debug for Gamma<'_, D, C, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gamma")
            .field("engine", &self.ep.engine)
            .finish_non_exhaustive()
    }
}

fn user_port(port: PortId) -> Result<(), Error> {
    match port {
        BROADCAST_PORT | BARRIER_PORT => Err(Error::ReservedPort),
        p if p as usize >= PORTS => Err(Error::InvalidPort),
        _ => Ok(()),
    }
}

/// How a finished send ended, as a result.
fn status_result(st: SendStatus) -> Result<(), Error> {
    match st {
        SendStatus::Failed => Err(Error::SendFailure),
        SendStatus::Rejected => Err(Error::PortClosed),
        _ => Ok(()),
    }
}

fn user_sem(sem: u16) -> Result<(), Error> {
    if sem as usize >= SEMAPHORES - 2 {
        return Err(Error::InvalidSemaphore);
    }
    Ok(())
}

/// The longest `gamma_exit` waits for its goodbyes to be acknowledged.
const GOODBYE_WAIT: Duration = Duration::from_secs(1);

impl<'a, D: Device, C: Clock, S> Gamma<'a, D, C, S> {
    /// `gamma_init`: joins group `cfg.group` as instance `cfg.node`, with tables from
    /// `storage` (at least [`PORTS`] ports and [`SEMAPHORES`] semaphores) and a
    /// handler table of at least [`PORTS`] entries.
    pub fn init(
        cfg: Config,
        groups: &'a [Group<'a>],
        storage: Storage<'a>,
        handlers: ManagedSlice<'a, PortHandlers<'a, S>>,
        dev: D,
        clock: C,
        state: S,
    ) -> Result<Self, Error> {
        if storage.ports.len() < PORTS || storage.sems.len() < SEMAPHORES {
            return Err(Error::BadConfig);
        }
        if handlers.len() < PORTS {
            return Err(Error::BadConfig);
        }
        // Broadcast's and barrier's ports are GAMMA's own.
        let cfg = Config {
            reserved_ports_from: BROADCAST_PORT,
            ..cfg
        };
        let mut engine = Engine::new(cfg, groups, storage)?;
        // Sends before the first poll are framed to this device's MTU.
        engine.set_capabilities(dev.capabilities());
        Ok(Gamma {
            ep: Endpoint::new(engine, dev, clock),
            handlers,
            state,
        })
    }

    /// `gamma_init` with tables allocated here: `fabric_nodes` is the largest fabric
    /// address + 1; peers, concurrent sends and messages get room for that many nodes.
    #[cfg(feature = "alloc")]
    pub fn init_alloc(
        cfg: Config,
        groups: &'a [Group<'a>],
        fabric_nodes: usize,
        dev: D,
        clock: C,
        state: S,
    ) -> Result<Self, Error> {
        let cap = Self::capacity(fabric_nodes);
        Self::init_alloc_with(cfg, groups, cap, dev, clock, state)
    }

    /// The tables [`Gamma::init_alloc`] allocates for `fabric_nodes` nodes: 32 eager
    /// buffers (512 KiB), which a program may raise (hosted ranks take 256, so that
    /// relays can pass a 1 MiB broadcast down the tree, see `engine::stream`).
    pub fn capacity(fabric_nodes: usize) -> crate::engine::Capacity {
        crate::engine::Capacity {
            ports: PORTS,
            channels: fabric_nodes,
            fabric_nodes,
            ops: (4 * fabric_nodes).clamp(64, 4096),
            assemblies: fabric_nodes.clamp(16, 1024),
            eager: 32,
        }
    }

    /// [`Gamma::init_alloc`] with tables of the sizes `cap` gives.
    #[cfg(feature = "alloc")]
    pub fn init_alloc_with(
        cfg: Config,
        groups: &'a [Group<'a>],
        cap: crate::engine::Capacity,
        dev: D,
        clock: C,
        state: S,
    ) -> Result<Self, Error> {
        let mut handlers = alloc::vec::Vec::with_capacity(PORTS);
        handlers.resize_with(PORTS, || PortHandlers::EMPTY);
        let storage = Storage::with_capacity(cap);
        Self::init(cfg, groups, storage, handlers.into(), dev, clock, state)
    }

    /// `gamma_exit`: finishes every send still in flight (or sees it fail), waiting at
    /// most 10 s, then hands back the device and the application state.
    pub fn exit(self) -> (D, S) {
        let deadline = self.ep.clock.now() + Duration::from_secs(10);
        self.exit_deadline(deadline)
    }

    /// `gamma_exit` that stops draining at `deadline` whatever is still in flight (a
    /// peer that keeps refusing, a dead one not yet declared).
    pub fn exit_deadline(mut self, deadline: Instant) -> (D, S) {
        // Acks held back to ride on replies go out now: there will be no replies.
        self.ep.engine.flush_acks();
        loop {
            let now = self.ep.clock.now();
            self.engine_poll(now, None);
            if self.ep.engine.is_quiescent() || now >= deadline {
                break;
            }
            self.idle_step(false);
        }
        // Then the peers are told this process leaves, so that one whose last
        // frames to us go unanswered (their acks lost) stops waiting at once,
        // until each goodbye is acknowledged (on a lossy network that takes a
        // few retransmissions). For a second at most: a peer computing without
        // polling acks it later, or finds this process gone.
        let until = deadline.min(self.ep.clock.now() + GOODBYE_WAIT);
        let mut told = false;
        loop {
            let now = self.ep.clock.now();
            told = told || self.ep.engine.say_goodbye();
            self.engine_poll(now, None);
            if (told && self.ep.engine.is_quiescent()) || now >= until {
                break;
            }
            self.idle_step(false);
        }
        let Gamma { ep, state, .. } = self;
        (ep.dev, state)
    }

    /// `gamma_set_active_port`: binds `port` for output to `(dest_node, dest_par_pid,
    /// dest_port)` (`dest_node` may be [`BROADCAST`]) and for input to `buffer`,
    /// semaphore `sem` and the two handlers.
    #[allow(clippy::too_many_arguments)]
    pub fn set_active_port(
        &mut self,
        port: PortId,
        dest_node: NodeId,
        dest_par_pid: GroupId,
        dest_port: PortId,
        receiver_handler: Option<Handler<'a, S>>,
        error_handler: Option<Handler<'a, S>>,
        semaphore: u16,
        buffer_kind: BufferKind,
        buffer: Option<&'a mut [u8]>,
    ) -> Result<(), Error> {
        user_port(port)?;
        user_sem(semaphore)?;
        // The reserved ports belong to the collectives: never a message's destination.
        user_port(dest_port)?;
        let dest = Dest {
            group: dest_par_pid,
            node: dest_node,
            port: dest_port,
        };
        let setup = PortSetup {
            dest: Some(dest),
            input: true,
            recv: receiver_handler.is_some(),
            err: error_handler.is_some(),
            sem: semaphore,
            kind: buffer_kind.into(),
            buffer,
        };
        self.ep.engine.bind_port(port, setup)?;
        self.handlers[port as usize] = PortHandlers {
            recv: receiver_handler,
            err: error_handler,
        };
        Ok(())
    }

    /// `gamma_set_passive_port`: as [`Gamma::set_active_port`] without handlers; errors
    /// count on the semaphore and [`Gamma::wait`] reports them.
    #[allow(clippy::too_many_arguments)]
    pub fn set_passive_port(
        &mut self,
        port: PortId,
        dest_node: NodeId,
        dest_par_pid: GroupId,
        dest_port: PortId,
        semaphore: u16,
        buffer_kind: BufferKind,
        buffer: Option<&'a mut [u8]>,
    ) -> Result<(), Error> {
        self.set_active_port(
            port,
            dest_node,
            dest_par_pid,
            dest_port,
            None,
            None,
            semaphore,
            buffer_kind,
            buffer,
        )
    }

    /// `gamma_post_recv`: the next message on `port` goes into `buffer`; the previous
    /// buffer is returned.
    pub fn post_recv(
        &mut self,
        port: PortId,
        buffer: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        user_port(port)?;
        self.ep.engine.ports_mut().post_recv(port, buffer)
    }

    /// `gamma_attach_buffer`: as `post_recv`, keeping the port's buffer size (`buffer`
    /// must be at least that long).
    pub fn attach_buffer(
        &mut self,
        port: PortId,
        buffer: impl Into<RecvBuf<'a>>,
    ) -> Result<Option<RecvBuf<'a>>, Error> {
        user_port(port)?;
        self.ep.engine.ports_mut().attach_buffer(port, buffer)
    }

    /// The buffer bound to `port`, to read what landed there.
    pub fn buffer(&self, port: PortId) -> Option<&[u8]> {
        self.ep.engine.ports().buffer(port)
    }

    fn blocking_send(
        &mut self,
        port: PortId,
        head: &[u8],
        body: &[u8],
        reliable: bool,
    ) -> Result<usize, Error> {
        user_port(port)?;
        // The clock is read after the frame has left where the device allows.
        let clock = &self.ep.clock;
        let msg = OneFrame {
            port,
            head,
            body,
            reliable,
        };
        let sent = self
            .ep
            .engine
            .send_now(&mut self.ep.dev, msg, || clock.now());
        if sent {
            return Ok(head.len() + body.len());
        }
        // A small reliable message is copied into the engine (eager): the call returns
        // once it is on the wire, and the ack rides on whatever the receiver sends back.
        let eager = if reliable {
            self.ep
                .engine
                .start_send(SendRequest {
                    port,
                    head,
                    body: Body::Copied(body),
                    reliable: true,
                })
                .ok()
        } else {
            None
        };
        let h = match eager {
            Some(h) => h,
            None => self.ep.engine.start_send(SendRequest {
                port,
                head,
                body: Body::External(body.len()),
                reliable,
            })?,
        };
        // Frames leave before anything is received: a receive poll first would delay
        // them by a (possibly empty, system-call) look at the device.
        let ext = eager.is_none().then_some(body);
        let now = self.ep.clock.now();
        self.ep.engine.transmit_send(now, &mut self.ep.dev, h, ext);
        self.run_handlers(now, ext);
        // A message that left whole in that pass returns without a receive poll:
        // most sends cost one transmit pass and no look at the device's receive side.
        loop {
            match self.ep.engine.send_status(h)? {
                SendStatus::Pending if eager.is_some() && self.ep.engine.handed_off(h)? => {
                    self.ep.engine.detach(h)?;
                    return Ok(head.len() + body.len());
                }
                SendStatus::Pending => {}
                SendStatus::Done => {
                    self.ep.engine.release(h)?;
                    return Ok(head.len() + body.len());
                }
                SendStatus::Failed => {
                    self.ep.engine.release(h)?;
                    return Err(Error::SendFailure);
                }
                SendStatus::Rejected => {
                    self.ep.engine.release(h)?;
                    return Err(Error::PortClosed);
                }
            }
            let now = self.ep.clock.now();
            let busy = self.engine_poll(now, ext);
            self.idle_step(busy);
        }
    }

    /// `gamma_send`: best-effort, returns once the message is handed to the device.
    pub fn send(&mut self, port: PortId, data: &[u8]) -> Result<usize, Error> {
        self.blocking_send(port, &[], data, false)
    }

    /// `gamma_send_flowctl`: reliable; returns once the message is on the wire (up to
    /// 16 KiB, eager) or the receiver has taken it (larger).
    pub fn send_flowctl(&mut self, port: PortId, data: &[u8]) -> Result<usize, Error> {
        self.blocking_send(port, &[], data, true)
    }

    /// `gamma_send_2p`: a message in two pieces, the first at most 20 bytes.
    pub fn send_2p(&mut self, port: PortId, data1: &[u8], data2: &[u8]) -> Result<usize, Error> {
        self.blocking_send(port, data1, data2, false)
    }

    /// `gamma_send_2p_flowctl`.
    pub fn send_2p_flowctl(
        &mut self,
        port: PortId,
        data1: &[u8],
        data2: &[u8],
    ) -> Result<usize, Error> {
        self.blocking_send(port, data1, data2, true)
    }

    fn start(
        &mut self,
        port: PortId,
        head: &[u8],
        body: &'a [u8],
        reliable: bool,
    ) -> Result<SendHandle, Error> {
        user_port(port)?;
        // A short reliable message is copied, as a blocking send's is: complete once
        // on the wire (see `wsend`), rather than when the receiver's ack comes back,
        // which in a ping-pong rides on the next message the other way.
        let copy = reliable && head.len() + body.len() <= ISEND_COPY_MAX;
        if copy {
            // Sent in this call where nothing is ahead of it, as a blocking send is.
            let clock = &self.ep.clock;
            let at_once =
                self.ep
                    .engine
                    .isend_now_reliable(&mut self.ep.dev, port, head, body, || clock.now());
            if let Some(h) = at_once {
                return Ok(h);
            }
        }
        let h = match copy.then(|| {
            self.ep.engine.start_send(SendRequest {
                port,
                head,
                body: Body::Copied(body),
                reliable: true,
            })
        }) {
            Some(Ok(h)) => h,
            _ => self.ep.engine.start_send(SendRequest {
                port,
                head,
                body: Body::Borrowed(body),
                reliable,
            })?,
        };
        // Start the first frames now, as GAMMA's trap into the driver did: only this
        // send's channel (and what handlers queued before it).
        let now = self.ep.clock.now();
        self.ep.engine.transmit_send(now, &mut self.ep.dev, h, None);
        self.run_handlers(now, None);
        Ok(h)
    }

    /// How a send of [`Gamma::start`] ended, its handle freed, once it has done its
    /// part: finished, or a copy whose every byte is on the wire (then let go: the
    /// engine delivers it, and a failure later reaches the port's error handler or
    /// error semaphore). `None` while it runs.
    fn send_done(&mut self, handle: SendHandle) -> Result<Option<Result<(), Error>>, Error> {
        match self.ep.engine.send_status(handle)? {
            SendStatus::Pending
                if self.ep.engine.copied(handle)? && self.ep.engine.handed_off(handle)? =>
            {
                self.ep.engine.detach(handle)?;
                Ok(Some(Ok(())))
            }
            SendStatus::Pending => Ok(None),
            _ => Ok(Some(status_result(self.ep.engine.release(handle)?))),
        }
    }

    /// `gamma_isend`: non-blocking best-effort send; `data` stays lent to the engine.
    pub fn isend(&mut self, port: PortId, data: &'a [u8]) -> Result<SendHandle, Error> {
        self.start(port, &[], data, false)
    }

    /// `gamma_isend_flowctl`: up to [`ISEND_COPY_MAX`] bytes copied (the caller's
    /// buffer free on return); a longer `data` stays lent to the engine.
    pub fn isend_flowctl(&mut self, port: PortId, data: &'a [u8]) -> Result<SendHandle, Error> {
        self.start(port, &[], data, true)
    }

    /// `gamma_isend_2p`: the first piece (at most 20 bytes) is copied now.
    pub fn isend_2p(
        &mut self,
        port: PortId,
        data1: &[u8],
        data2: &'a [u8],
    ) -> Result<SendHandle, Error> {
        self.start(port, data1, data2, false)
    }

    /// `gamma_isend_2p_flowctl`: copied as [`Gamma::isend_flowctl`] is, up to
    /// [`ISEND_COPY_MAX`] bytes in all.
    pub fn isend_2p_flowctl(
        &mut self,
        port: PortId,
        data1: &[u8],
        data2: &'a [u8],
    ) -> Result<SendHandle, Error> {
        self.start(port, data1, data2, true)
    }

    /// `gamma_wsend`: waits for a non-blocking send to complete and frees its handle.
    /// A short reliable one (a copy, up to [`ISEND_COPY_MAX`] bytes) completes once
    /// it is on the wire, as a blocking `gamma_send_flowctl` returns then.
    pub fn wsend(&mut self, handle: SendHandle) -> Result<(), Error> {
        loop {
            if let Some(r) = self.send_done(handle)? {
                return r;
            }
            let busy = self.poll();
            self.idle_step(busy);
        }
    }

    /// `gamma_tsend`: `true` (and the handle freed) once the send completed; `false`
    /// while it runs.
    pub fn tsend(&mut self, handle: SendHandle) -> Result<bool, Error> {
        if let Some(r) = self.send_done(handle)? {
            return r.map(|()| true);
        }
        self.poll();
        match self.send_done(handle)? {
            Some(r) => r.map(|()| true),
            None => Ok(false),
        }
    }

    /// `gamma_signal`.
    pub fn signal(&mut self, sem: u16) -> Result<(), Error> {
        user_sem(sem)?;
        self.ep.engine.ports_mut().signal(sem)
    }

    /// `gamma_sigerr`.
    pub fn sigerr(&mut self, sem: u16) -> Result<(), Error> {
        user_sem(sem)?;
        self.ep.engine.ports_mut().sigerr(sem)
    }

    /// `gamma_wait`: polls until semaphore `sem` reaches `n`, takes `n` from it, and
    /// returns 0, or minus the number of errors signalled on it since the last wait.
    pub fn wait(&mut self, sem: u16, n: u32) -> Result<i32, Error> {
        self.wait_deadline(sem, n, Instant::MAX)
    }

    /// `gamma_wait` that gives up with [`Error::Timeout`] at `deadline`.
    ///
    /// While it waits, the silent peers that this semaphore's ports are bound to are
    /// probed: if one has died, the wait ends with [`Error::SendFailure`] (and the
    /// port's error handler, or its error count, sees `SENDFAILURE`) instead of
    /// waiting for a message that cannot come.
    pub fn wait_deadline(&mut self, sem: u16, n: u32, deadline: Instant) -> Result<i32, Error> {
        user_sem(sem)?;
        // Probing scans the port table: only a wait that has lasted a while does it.
        let mut probe_at: Option<Instant> = None;
        // The time of the poll before, when a look has just seen a frame come.
        let mut seen: Option<Instant> = None;
        loop {
            // A frame seen by a look goes straight to a poll, with the time of the
            // poll before (at most one look budget old, under a microsecond): no
            // clock read and no check delays it. The checks come after that poll.
            let now = match seen.take() {
                Some(t) => t,
                None => {
                    if let Some(errors) = self.ep.engine.try_take(sem, n)? {
                        return Ok(-(errors.min(i32::MAX as u32) as i32));
                    }
                    // One clock read per turn serves the deadline and the poll.
                    let now = self.ep.clock.now();
                    if now >= deadline {
                        return Err(Error::Timeout);
                    }
                    match probe_at {
                        None => probe_at = Some(now + self.ep.engine.config().keepalive),
                        Some(t) if now >= t => {
                            self.ep.engine.keepalive(now, sem);
                            probe_at = Some(now + self.ep.engine.config().keepalive);
                        }
                        Some(_) => {}
                    }
                    now
                }
            };
            let busy = self.engine_poll_direct(now, None);
            // A handler (of a failure, say) may run for long: `now` is then old.
            let handled = self.ep.engine.notices_pending() != 0;
            self.run_handlers(now, None);
            let slept = self.idle_step(busy);
            if !busy && self.ep.idle.looking() && self.await_frame() && !slept && !handled {
                seen = Some(now);
            }
        }
    }

    /// After a poll that found nothing: up to [`LOOKS`] looks at the device
    /// ([`Device::rx_pending`], a few loads on shared memory; fewer with more
    /// peers, as each look loads more; [`LOOKS_SENDING`] while something waits to
    /// be sent) before the next poll, which then comes as soon as a frame is
    /// there. Timers and retries wait at most those looks (under a microsecond).
    /// Only in the first [`crate::idle::LOOKING_POLLS`] empty polls of a run, so
    /// that the idle hook (a `sched_yield`) runs about when it did without them.
    ///
    /// `true` when a look saw a frame come after one had found none: the device
    /// can look, and the next poll will find the frame.
    #[inline]
    fn await_frame(&self) -> bool {
        // The first look before the budget: a device that cannot look says "maybe"
        // at once, and the channels are not scanned for it.
        if self.ep.dev.rx_pending() {
            return false;
        }
        let peers = u32::from(self.ep.engine.size()).saturating_sub(1).max(1);
        let mut looks = LOOKS / peers;
        if looks > LOOKS_SENDING && self.ep.engine.sends_waiting() {
            looks = LOOKS_SENDING / peers;
        }
        for _ in 1..looks.max(1) {
            if self.ep.dev.rx_pending() {
                return true;
            }
        }
        false
    }

    /// `gamma_test`: the semaphore's value, unchanged.
    pub fn test(&mut self, sem: u16) -> Result<u32, Error> {
        user_sem(sem)?;
        self.poll();
        Ok(self.ep.engine.ports().semaphore(sem)?.count)
    }

    /// `gamma_atomic`: runs `f` with no handler in between (handlers only run inside
    /// polls, so this holds by construction), on the state handlers share.
    pub fn atomic<R>(&mut self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.state)
    }

    /// `gamma_sync`: barrier among all processes of the group. If a member has died,
    /// every survivor gets `Err(SendFailure)` (the failure is passed along the
    /// barrier's own pattern) instead of waiting forever; the group cannot synchronise
    /// again after that.
    pub fn sync(&mut self) -> Result<(), Error> {
        self.sync_start()?;
        loop {
            if self.sync_test()? {
                return Ok(());
            }
        }
    }

    /// Starts a barrier without waiting (an addition: GAMMA's `sync` is blocking).
    pub fn sync_start(&mut self) -> Result<(), Error> {
        self.ep.engine.start_barrier()?;
        self.poll();
        Ok(())
    }

    /// Polls once and tells whether the barrier started by [`Gamma::sync_start`] is over.
    pub fn sync_test(&mut self) -> Result<bool, Error> {
        let busy = self.poll();
        self.idle_step(busy);
        self.ep.engine.barrier_done()
    }

    /// Adds `delta` to counter `var` (`0..COUNTERS`, starting at 0) of instance `node` of
    /// this group and returns the value before: an addition to GAMMA (LFC's
    /// `lfc_fetch_and_add`). Concurrent callers all get distinct values. A device that
    /// does it in NIC memory (the Myrinet-like model) answers at once without the
    /// owner's CPU; elsewhere the owner's engine serves it at its next poll, no
    /// handler involved. `Err(SendFailure)` if the owner died.
    pub fn fetch_add(&mut self, node: NodeId, var: u16, delta: u32) -> Result<u32, Error> {
        if var as usize >= crate::engine::COUNTERS {
            return Err(Error::InvalidCounter);
        }
        let group = self.my_par_pid();
        let addr = self.ep.engine.address(group, node)?;
        if let Some(v) = self
            .ep
            .dev
            .nic_atomics()
            .and_then(|a| a.fetch_add(addr, var, delta))
        {
            return Ok(v);
        }
        if node == self.my_node() {
            return self.ep.engine.fetch_add_local(var, delta);
        }
        let h = self.ep.engine.start_fetch_add(group, node, var, delta)?;
        let now = self.ep.clock.now();
        self.ep.engine.poll_transmit(now, &mut self.ep.dev, None);
        self.run_handlers(now, None);
        loop {
            if let Some(v) = self.ep.engine.fetch_add_result(h)? {
                return Ok(v);
            }
            let busy = self.poll();
            self.idle_step(busy);
        }
    }

    /// `gamma_my_par_pid`.
    pub fn my_par_pid(&self) -> GroupId {
        self.ep.engine.config().group
    }

    /// `gamma_my_node`.
    pub fn my_node(&self) -> NodeId {
        self.ep.engine.config().node
    }

    /// `gamma_how_many_nodes`.
    pub fn how_many_nodes(&self) -> u16 {
        self.ep.engine.size()
    }

    /// `gamma_time`: the current time of the node's clock.
    pub fn time(&self) -> Instant {
        self.ep.clock.now()
    }

    /// `gamma_time_diff`: `b - a` in microseconds.
    pub fn time_diff(b: Instant, a: Instant) -> f64 {
        if b >= a {
            (b - a).as_micros_f64()
        } else {
            -(a - b).as_micros_f64()
        }
    }

    /// Lets the engine make progress once: receive, run handlers, retransmit, send.
    pub fn poll(&mut self) -> bool {
        let now = self.ep.clock.now();
        self.engine_poll(now, None)
    }

    /// One engine poll (`ext`: the body of a blocking send in progress), then the
    /// handlers of what it delivered or reported.
    fn engine_poll(&mut self, now: Instant, ext: Option<&[u8]>) -> bool {
        let busy = self.engine_poll_direct(now, ext);
        self.run_handlers(now, ext);
        busy
    }

    /// One engine poll that runs the handler of a message it delivers from inside
    /// it (see [`Engine::poll_with`]); the handlers of what it queued are left to
    /// [`Gamma::run_handlers`].
    #[inline]
    fn engine_poll_direct(&mut self, now: Instant, ext: Option<&[u8]>) -> bool {
        let mut direct = Direct {
            handlers: &self.handlers,
            state: &mut self.state,
        };
        self.ep
            .engine
            .poll_with(now, &mut self.ep.dev, ext, &mut NoMemory, Some(&mut direct))
    }

    /// Runs the handler of every notice the engine queued, oldest first, with the
    /// state; what they queued to send leaves at once (`ext` as for the poll). A
    /// notice for a port whose handler has since been removed only counted.
    #[inline]
    fn run_handlers(&mut self, now: Instant, ext: Option<&[u8]>) {
        if self.ep.engine.notices_pending() != 0 {
            self.run_pending_handlers(now, ext);
        }
    }

    #[inline(never)]
    fn run_pending_handlers(&mut self, now: Instant, ext: Option<&[u8]>) {
        let mut direct = Direct {
            handlers: &self.handlers,
            state: &mut self.state,
        };
        while let Some((notice, view)) = self.ep.engine.next_notice() {
            direct.upcall(&notice, view);
        }
        if self.ep.engine.outbox_pending() > 0 {
            // Replies go now, as the program's own sends do; what cannot waits for
            // the pass, in order.
            self.send_queued_at_once(now);
            if self.ep.engine.outbox_pending() > 0 {
                self.ep.engine.poll_transmit(now, &mut self.ep.dev, ext);
            }
        }
    }

    /// [`Engine::send_queued_at_once`], out of line and cold: a receive path whose
    /// handlers send nothing does not carry it (inline, LFC's path in `engine_cost`
    /// cost 47 instructions more, for the inliner's sake).
    #[cold]
    #[inline(never)]
    fn send_queued_at_once(&mut self, now: Instant) {
        self.ep.engine.send_queued_at_once(now, &mut self.ep.dev);
    }

    /// When the engine next needs a poll (see [`Engine::poll_at`]).
    pub fn poll_at(&self) -> Option<Instant> {
        self.ep.engine.poll_at(self.ep.clock.now())
    }

    /// Whether the next poll has work with no frame arriving: handlers waiting to
    /// run (an event loop polls before it sleeps).
    pub fn work_waiting(&self) -> bool {
        self.ep.engine.notices_pending() > 0
    }

    /// The state handlers share.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The state handlers share, mutably.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers a C facade returns: GAMMA's own where GAMMA has one (a message the
    /// receiver discarded is a failed send), Volley's above 10 otherwise, and the
    /// limit a too-long message broke in its text.
    #[test]
    fn c_codes_are_gammas_where_gamma_has_one() {
        assert_eq!(code(Error::SendFailure), -(Errno::SendFailure as i32));
        assert_eq!(code(Error::PortClosed), -(Errno::SendFailure as i32));
        assert_eq!(code(Error::BufferTooSmall), -(Errno::MsgTooLong as i32));
        assert_eq!(code(Error::InvalidHandle), -18);
        assert_eq!(code(Error::MessageTooLong), -20);
        assert_eq!(code(Error::LongerThan(crate::engine::EAGER_MAX)), -20);
        assert_eq!(code(Error::PeerLeft), -31);
        use std::string::ToString;
        assert!(Error::LongerThan(crate::engine::EAGER_MAX)
            .to_string()
            .contains("16384 bytes"));
        assert!(Error::MessageTooLong.to_string().contains("4 GiB"));
    }
}
