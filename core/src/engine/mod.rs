//! The protocol engine: one instance per process (endpoint), sans-IO.
//!
//! # Calling contract
//!
//! The engine owns no device and reads no clock. The caller:
//! 1. calls [`Engine::poll`]`(now, &mut device, ext)` whenever it wants progress: it
//!    drains received frames (running handlers as messages complete), fires expired
//!    timers, advances the barrier, and transmits what the windows and credits allow;
//! 2. may sleep until [`Engine::poll_at`] (`None`: nothing to do until a frame comes);
//! 3. starts work with the non-blocking calls ([`Engine::start_send`],
//!    [`Engine::start_barrier`], ...) and observes it with the status calls.
//!
//! `poll` is [`Engine::handle_frame`] for each received frame, then
//! [`Engine::handle_timeout`], then [`Engine::poll_transmit`]; they may be called
//! separately in that order. Everything happens inside these calls: handlers run on the
//! caller's stack, straight off the device's receive token.
//!
//! # Delivery service
//!
//! *Reliable* sends (GAMMA's `_flowctl`) travel in the channel's sequence space: sliding
//! window, cumulative plus selective acks, retransmission with exponential back-off,
//! credits (the receiver's advertised window), exactly-once in-order delivery per
//! channel, and a send failure at the sender once the peer has been silent for
//! `peer_timeout` (time, not a count of rounds: a paused peer survives). On a
//! device that declares itself reliable there is no delayed-ack timer and no blind
//! retransmission: acks are credit returns, batched per half window and at message
//! ends, and only frames the receiver refused (port busy or not bound yet) are sent again.
//!
//! *Best-effort* sends (plain GAMMA `send`) are fragmented the same way but never
//! retransmitted: a receiver that misses a fragment, or a whole message before a later
//! one, reports `FrameLost` on the port; it never hands over silently wrong data.
//!
//! A message is placed straight into the destination port's posted buffer at its
//! fragment offset; the handler runs when the whole message has landed, and the port
//! takes no new message until then.

use managed::ManagedSlice;

use crate::phy::{Capabilities, Device, RxToken, TxToken};
use crate::time::{Duration, Instant};
use crate::wire::{self, AckInfo, Endpoints, Flags, Kind, Repr, WireError, HEADER_LEN};
use crate::{GroupId, NodeAddr, NodeId, PortId};

mod channel;
#[cfg(test)]
mod tests;

use channel::{seq_lt, SeqCheck, Slot, CTRL_QUEUE, NONE};
pub use channel::{Channel, MAX_WINDOW};

/// Destination instance meaning "every member of the group but the sender".
pub const BROADCAST: NodeId = u16::MAX;
/// Longest first piece of a two-piece send (GAMMA `send_2p`), copied at call time.
pub const HEAD_MAX: usize = 20;
/// Largest message a blocking reliable send copies into an engine buffer and returns
/// from at once (MPI's eager protocol); larger ones wait for the receiver's ack.
pub const EAGER_MAX: usize = 16 * 1024;
/// Barrier round value meaning "are you alive?": acked, otherwise ignored.
const BARRIER_PROBE: u32 = u32::MAX;
/// Barrier round bit meaning "this barrier failed": the receiver's fails too.
const BARRIER_ABORT: u32 = 1 << 31;
/// Port number that barrier tokens carry (GAMMA reserves 1024 for barriers).
pub const BARRIER_PORT: PortId = 1024;
/// Port reserved for collective broadcast (GAMMA: 1023); never a message's destination.
pub const BROADCAST_PORT: PortId = 1023;
/// `offset` of a CONTROL frame that rejects a message (WIRE.md).
const CONTROL_REJECT: u32 = 1;

/// Tunables of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Per-job key: frames carrying another key are dropped and counted.
    pub job_key: u32,
    /// This process's group (parallel pid).
    pub group: GroupId,
    /// This process's instance number in its group.
    pub node: NodeId,
    /// Credits advertised to each peer: frames beyond the cumulative ack (at most 64).
    pub window: u16,
    /// First retransmission timeout.
    pub rto_initial: Duration,
    /// Ceiling of the exponential back-off.
    pub rto_max: Duration,
    /// How long a peer may stay silent (no frame of any kind) while we wait for it
    /// before it is declared dead and sends to it fail. Retransmissions and probes go
    /// out meanwhile; a debugger stop, swapping or a busy node shorter than this is
    /// survived. A device that knows a peer died (a dead process on shared memory)
    /// fails it at once.
    pub peer_timeout: Duration,
    /// A rank waiting on a semaphore probes, this often, the silent peers its ports
    /// are bound to, so that a dead sender becomes an error instead of a hang.
    pub keepalive: Duration,
    /// Longest an ack may be held back hoping to ride on a data frame (lossy links).
    pub ack_delay: Duration,
    /// A best-effort message not completed within this time is reported lost.
    pub reassembly_timeout: Duration,
    /// A barrier waiting this long for a round's token probes the member it waits
    /// for (and again every such period): a dead one fails the barrier.
    pub barrier_probe: Duration,
    /// The job's authentication key: every frame sent carries a SipHash-2-4 tag under
    /// it, and a frame without a valid one is dropped before anything else looks at
    /// it (`rx_unauthenticated`). `None` on fabrics no other party can write to
    /// (shared memory private to the job's user).
    pub auth_key: Option<wire::AuthKey>,
    /// A reliable message to a port that is not bound for input is refused (the sender
    /// retries) for this long, then discarded; its sender's send fails with
    /// [`Error::PortClosed`]. Ports bound late (no barrier after setting up) still get
    /// their messages within it.
    pub unbound_grace: Duration,
}

impl Config {
    /// Defaults suited to a LAN or shared memory: a dead peer is declared after ~2 s.
    pub const fn new(job_key: u32, group: GroupId, node: NodeId) -> Config {
        Config {
            job_key,
            group,
            node,
            window: 32,
            rto_initial: Duration::from_micros(500),
            rto_max: Duration::from_millis(200),
            peer_timeout: Duration::from_secs(30),
            keepalive: Duration::from_millis(500),
            ack_delay: Duration::from_micros(20),
            reassembly_timeout: Duration::from_millis(100),
            barrier_probe: Duration::from_millis(50),
            unbound_grace: Duration::from_secs(10),
            auth_key: None,
        }
    }
}

/// The members of a group, in instance order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Members<'a> {
    /// Instances `0..count` live at fabric addresses `first..first + count`.
    Range {
        /// Fabric address of instance 0.
        first: u16,
        /// Number of instances.
        count: u16,
    },
    /// Instance `i` lives at `list[i]`.
    List(&'a [NodeAddr]),
}

impl Members<'_> {
    /// Number of instances.
    pub fn len(&self) -> u16 {
        match *self {
            Members::Range { count, .. } => count,
            Members::List(l) => l.len().min(u16::MAX as usize) as u16,
        }
    }
    /// True for an empty group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fabric address of instance `i`.
    pub fn addr(&self, i: NodeId) -> Option<NodeAddr> {
        match *self {
            Members::Range { first, count } => (i < count).then(|| NodeAddr(first.wrapping_add(i))),
            Members::List(l) => l.get(i as usize).copied(),
        }
    }
}

/// A process group this engine can talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group<'a> {
    /// Parallel pid.
    pub id: GroupId,
    /// Where its instances live.
    pub members: Members<'a>,
}

/// Where an output port sends: GAMMA's destination triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// Destination group (parallel pid).
    pub group: GroupId,
    /// Destination instance, or [`BROADCAST`].
    pub node: NodeId,
    /// Destination port.
    pub port: PortId,
}

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

/// Errors of engine calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Port number outside the port table.
    InvalidPort,
    /// The port is reserved for collectives.
    ReservedPort,
    /// The port has no destination bound for output.
    NotBound,
    /// A port cannot be connected to itself for output.
    SelfConnect,
    /// Semaphore number outside the table or reserved.
    InvalidSemaphore,
    /// The destination group is not in the group table.
    UnknownGroup,
    /// The destination instance is not in its group.
    UnknownNode,
    /// A table (send operations, channels, assemblies) is full: try again later.
    NoResources,
    /// The handle does not name a live send operation.
    InvalidHandle,
    /// The first piece of a two-piece send is longer than [`HEAD_MAX`].
    FirstPieceTooLong,
    /// The message is longer than the wire can describe (4 GiB).
    MessageTooLong,
    /// The send failed: the peer stopped answering (GAMMA `SENDFAILURE`).
    SendFailure,
    /// `attach_buffer` with a buffer shorter than the port's buffer size.
    BufferTooSmall,
    /// A message is being stored into the port's buffer right now.
    PortBusy,
    /// A barrier is already running.
    BarrierInProgress,
    /// The configuration contradicts itself (e.g. this node is not in its group).
    BadConfig,
    /// A deadline passed first.
    Timeout,
    /// The receiver discarded the message: its destination port was not bound for
    /// input within [`Config::unbound_grace`], or is reserved.
    PortClosed,
    /// The call may not be made from inside a handler (it would wait for the poll
    /// that is running the handler).
    InHandler,
}

impl Error {
    /// The negative value a C facade returns; GAMMA's own numbers where GAMMA has one.
    pub fn code(self) -> i32 {
        match self {
            Error::SendFailure => -(Errno::SendFailure as i32),
            Error::BufferTooSmall => -(Errno::MsgTooLong as i32),
            other => -(10 + other as i32),
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::InvalidPort => "port number out of range",
            Error::ReservedPort => "port reserved for collective operations",
            Error::NotBound => "port has no destination",
            Error::SelfConnect => "a port cannot send to itself",
            Error::InvalidSemaphore => "semaphore number out of range or reserved",
            Error::UnknownGroup => "unknown destination group",
            Error::UnknownNode => "destination instance not in its group",
            Error::NoResources => "table full, try again later",
            Error::InvalidHandle => "no such send operation",
            Error::FirstPieceTooLong => "first piece longer than 20 bytes",
            Error::MessageTooLong => "message longer than 4 GiB",
            Error::SendFailure => "send failed: peer not answering",
            Error::BufferTooSmall => "buffer shorter than the port's buffer size",
            Error::PortBusy => "a message is being stored into this port",
            Error::BarrierInProgress => "a barrier is already running",
            Error::BadConfig => "inconsistent configuration",
            Error::Timeout => "deadline passed",
            Error::PortClosed => "destination port not bound for input at the receiver",
            Error::InHandler => "not allowed inside a handler",
        })
    }
}

impl core::error::Error for Error {}

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
    dest: Option<Dest>,
    input: bool,
    recv: Option<Handler<'a, S>>,
    err: Option<Handler<'a, S>>,
    sem: u16,
    kind: BufferKind,
    buf: Option<RecvBuf<'a>>,
    buf_len: usize,
    cursor: usize,
    full: bool,
    busy: bool,
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

    fn room(&self, base: usize) -> usize {
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

/// Where a send's payload comes from.
#[derive(Debug, Clone, Copy)]
pub enum Body<'a> {
    /// Borrowed for as long as the engine lives (non-blocking sends).
    Borrowed(&'a [u8]),
    /// Of this length, handed to every `poll` as `ext` until the send completes
    /// (blocking sends, whose data outlives only the call).
    External(usize),
}

/// Payload of a send as the engine takes it: a [`Body`], or bytes to copy.
#[derive(Debug, Clone, Copy)]
enum Src<'a, 'c> {
    Body(Body<'a>),
    Copy(&'c [u8]),
    /// Already copied into eager buffer `idx` (`len` bytes) by a handler.
    Queued {
        idx: u16,
        len: usize,
    },
}

/// A buffer a reliable send's payload is copied into, so the caller may reuse its own
/// at once while the engine keeps the bytes for retransmission.
#[derive(Debug, Clone)]
pub struct EagerBuf {
    used: bool,
    data: [u8; EAGER_MAX],
}

impl EagerBuf {
    /// A free buffer.
    pub const EMPTY: EagerBuf = EagerBuf {
        used: false,
        data: [0; EAGER_MAX],
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpState {
    Free,
    Active,
    Done,
    Failed,
    Rejected,
}

/// One send operation (a slot in the operation table).
#[derive(Debug, Clone, Copy)]
pub struct Op<'a> {
    state: OpState,
    gen: u16,
    reliable: bool,
    external: bool,
    started: bool,
    /// Eager buffer holding the body, or `NONE`.
    eager: u16,
    /// The caller has let go of the handle: the slot frees itself when done.
    detached: bool,
    /// The receiver discarded the message (port not bound): fails once acked.
    rejected: bool,
    head: [u8; HEAD_MAX],
    head_len: u8,
    body: &'a [u8],
    total: u32,
    framed: u32,
    unacked: u32,
    chan: u16,
    next: u16,
    parent: u16,
    children: u16,
    child_failed: bool,
    msg_id: u32,
    kind: Kind,
    src_port: PortId,
    dest: Dest,
}

impl Op<'_> {
    /// A free slot.
    pub const EMPTY: Op<'static> = Op {
        state: OpState::Free,
        gen: 0,
        reliable: false,
        external: false,
        started: false,
        eager: NONE,
        detached: false,
        rejected: false,
        head: [0; HEAD_MAX],
        head_len: 0,
        body: &[],
        total: 0,
        framed: 0,
        unacked: 0,
        chan: NONE,
        next: NONE,
        parent: NONE,
        children: 0,
        child_failed: false,
        msg_id: 0,
        kind: Kind::Data,
        src_port: 0,
        dest: Dest {
            group: 0,
            node: 0,
            port: 0,
        },
    };

    /// True if the op's channel has failed (it will not progress).
    fn chan_failed(&self, chans: &[Channel]) -> bool {
        chans.get(self.chan as usize).is_some_and(|c| c.failed)
    }

    /// The payload bytes `[off, off + len)`, as up to two pieces (head, body).
    fn pieces<'s>(&'s self, body: &'s [u8], off: usize, len: usize) -> [&'s [u8]; 2] {
        let h = self.head_len as usize;
        let end = off + len;
        let head = if off < h {
            &self.head[off..end.min(h)]
        } else {
            &[][..]
        };
        let b0 = off.saturating_sub(h);
        let b1 = end.saturating_sub(h);
        let tail = body.get(b0..b1).unwrap_or(&[]);
        [head, tail]
    }
}

/// A message being stored into a port's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Assembly {
    used: bool,
    /// Fragments are taken and dropped (the port is closed); see `reserve_discard`.
    discard: bool,
    chan: u16,
    msg_id: u32,
    reliable: bool,
    port: PortId,
    base: usize,
    cap: usize,
    total: u32,
    received: u32,
    deadline: Instant,
    src: Endpoints,
}

impl Assembly {
    /// A free slot.
    pub const EMPTY: Assembly = Assembly {
        used: false,
        discard: false,
        chan: NONE,
        msg_id: 0,
        reliable: false,
        port: 0,
        base: 0,
        cap: 0,
        total: 0,
        received: 0,
        deadline: Instant::ZERO,
        src: Endpoints {
            src_group: 0,
            src_node: 0,
            src_port: 0,
            dst_group: 0,
            dst_node: 0,
            dst_port: 0,
        },
    };
}

/// Handle of a non-blocking send (GAMMA's `isend` handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SendHandle(u32);

impl SendHandle {
    /// The handle as an integer (for a C facade).
    pub fn to_raw(self) -> u32 {
        self.0
    }
    /// A handle from [`SendHandle::to_raw`].
    pub fn from_raw(v: u32) -> Self {
        SendHandle(v)
    }
    fn new(idx: usize, gen: u16) -> Self {
        SendHandle(((gen as u32) << 16) | idx as u32)
    }
    fn idx(self) -> usize {
        (self.0 & 0xFFFF) as usize
    }
    fn gen(self) -> u16 {
        (self.0 >> 16) as u16
    }
}

/// Progress of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    /// Still going.
    Pending,
    /// Delivered (reliable) or handed to the device (best-effort).
    Done,
    /// The peer stopped answering.
    Failed,
    /// The receiver discarded the message: its port was not bound for input.
    Rejected,
}

/// Counters, in the spirit of LFC's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Frames handed to the device.
    pub tx_frames: u64,
    /// Payload bytes handed to the device.
    pub tx_bytes: u64,
    /// Frames sent again after a timeout or refusal.
    pub retransmits: u64,
    /// Frames that were acks only.
    pub tx_acks: u64,
    /// Frames received from the device.
    pub rx_frames: u64,
    /// Frames dropped for a bad CRC.
    pub rx_bad_crc: u64,
    /// Frames dropped for a missing or wrong authentication tag (with a job key).
    pub rx_unauthenticated: u64,
    /// Frames dropped as malformed (length, version, kind, fields).
    pub rx_malformed: u64,
    /// Frames of another job key.
    pub rx_foreign_job: u64,
    /// Frames addressed to another group or instance.
    pub rx_foreign_group: u64,
    /// Frames whose sender is not in the group table.
    pub rx_unknown_source: u64,
    /// Frames whose header names another sender than the one the device saw.
    pub rx_spoofed: u64,
    /// Reliable frames received twice.
    pub rx_duplicates: u64,
    /// Frames beyond the advertised window.
    pub rx_out_of_window: u64,
    /// Frames refused for now (port busy or not bound): the sender retries.
    pub rx_refused: u64,
    /// Frames of kinds this engine does not serve yet.
    pub rx_unsupported: u64,
    /// Reliable messages discarded because their port was not bound for input
    /// (their senders were told).
    pub rx_rejected: u64,
    /// Of our reliable messages, those the receiver discarded.
    pub tx_rejected: u64,
    /// Best-effort frames dropped (unbound port, stale, after a gap).
    pub rx_dropped: u64,
    /// Messages handed to ports.
    pub delivered: u64,
    /// Messages reported lost.
    pub lost: u64,
    /// Messages truncated.
    pub truncated: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Peers declared dead.
    pub peers_failed: u64,
    /// Barriers completed.
    pub barriers: u64,
}

/// The context a handler runs in: the message, the port, and the engine's counters.
pub struct Upcall<'u, 'a, S> {
    port: PortId,
    errno: Option<Errno>,
    msg_len: u32,
    stored: usize,
    base: usize,
    src: Endpoints,
    ports: &'u mut [Port<'a, S>],
    sems: &'u mut [Semaphore],
    state: &'u mut S,
    eager: &'u mut [EagerBuf],
    outbox: &'u mut Outbox,
}

/// Sends a handler queued, at most this many per poll.
pub const OUTBOX: usize = 32;

/// A send queued by a handler: its bytes wait in an eager buffer.
#[derive(Debug, Clone, Copy, Default)]
struct Queued {
    port: PortId,
    eager: u16,
    len: u16,
    reliable: bool,
}

/// Sends queued by handlers, started once the handler has returned.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    items: [Queued; OUTBOX],
    len: usize,
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

fn signal(sems: &mut [Semaphore], sem: u16) -> Result<(), Error> {
    let s = sems.get_mut(sem as usize).ok_or(Error::InvalidSemaphore)?;
    s.count = s.count.saturating_add(1);
    Ok(())
}

fn sigerr(sems: &mut [Semaphore], sem: u16) -> Result<(), Error> {
    let s = sems.get_mut(sem as usize).ok_or(Error::InvalidSemaphore)?;
    s.errors = s.errors.saturating_add(1);
    Ok(())
}

fn port_mut<'p, 'a, S>(
    ports: &'p mut [Port<'a, S>],
    port: PortId,
) -> Result<&'p mut Port<'a, S>, Error> {
    ports.get_mut(port as usize).ok_or(Error::InvalidPort)
}

fn post_recv<'a, S>(
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

fn attach_buffer<'a, S>(
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

fn take_buffer<'a, S>(
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

/// Tables an engine works in, from caller storage (`&mut [T]`) or, with `alloc`, a `Vec`.
#[derive(Debug)]
pub struct Storage<'a, S> {
    /// Ports (GAMMA: 1025).
    pub ports: ManagedSlice<'a, Port<'a, S>>,
    /// Semaphores (GAMMA: 1025).
    pub sems: ManagedSlice<'a, Semaphore>,
    /// One channel per peer talked to.
    pub channels: ManagedSlice<'a, Channel>,
    /// Fabric address to channel slot; as long as the largest fabric address + 1.
    pub peer_map: ManagedSlice<'a, u16>,
    /// Send operations in progress.
    pub ops: ManagedSlice<'a, Op<'a>>,
    /// Messages being stored.
    pub assemblies: ManagedSlice<'a, Assembly>,
    /// Eager buffers for blocking reliable sends (may be empty).
    pub eager: ManagedSlice<'a, EagerBuf>,
}

/// Table sizes for [`Storage::with_capacity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Ports and semaphores.
    pub ports: usize,
    /// Peers talked to at once.
    pub channels: usize,
    /// Largest fabric address + 1.
    pub fabric_nodes: usize,
    /// Send operations (a broadcast takes one per member plus one).
    pub ops: usize,
    /// Messages stored concurrently.
    pub assemblies: usize,
    /// Eager buffers ([`EAGER_MAX`] bytes each).
    pub eager: usize,
}

#[cfg(feature = "alloc")]
impl<S> Storage<'_, S> {
    /// Tables of the given sizes, allocated once here and never resized.
    pub fn with_capacity(c: Capacity) -> Self {
        use alloc::vec::Vec;
        let mut ports = Vec::with_capacity(c.ports);
        ports.resize_with(c.ports, || Port::EMPTY);
        let mut ops = Vec::with_capacity(c.ops);
        ops.resize_with(c.ops, || Op::EMPTY);
        Storage {
            ports: ports.into(),
            sems: alloc::vec![Semaphore::default(); c.ports].into(),
            channels: alloc::vec![Channel::EMPTY; c.channels].into(),
            peer_map: alloc::vec![NONE; c.fabric_nodes].into(),
            ops: ops.into(),
            assemblies: alloc::vec![Assembly::EMPTY; c.assemblies].into(),
            eager: alloc::vec![EagerBuf::EMPTY; c.eager].into(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct BarrierState {
    /// Barriers completed; also the epoch of the next one.
    epoch: u32,
    active: bool,
    round: u32,
    sent: bool,
    failed: Option<Error>,
    /// Round tokens seen for `epoch` and `epoch + 1`.
    arrivals: [u64; 2],
    /// An abort seen for `epoch` and `epoch + 1`.
    aborted: [bool; 2],
    /// When the current wait (or the last probe) began.
    since: Instant,
}

/// The protocol engine of one endpoint.
pub struct Engine<'a, S = ()> {
    cfg: Config,
    groups: &'a [Group<'a>],
    size: u16,
    ports: ManagedSlice<'a, Port<'a, S>>,
    sems: ManagedSlice<'a, Semaphore>,
    chans: ManagedSlice<'a, Channel>,
    peer_map: ManagedSlice<'a, u16>,
    ops: ManagedSlice<'a, Op<'a>>,
    asms: ManagedSlice<'a, Assembly>,
    eager: ManagedSlice<'a, EagerBuf>,
    state: S,
    stats: Stats,
    caps: Capabilities,
    bar: BarrierState,
    rr: usize,
    /// Channels in use all sit below this index (they are allocated lowest first).
    chan_hwm: usize,
    /// Best-effort messages being stored (their timers need watching).
    be_asms: usize,
    /// Channels owed a RETRY when a port frees up.
    owed_retries: usize,
    /// Where the search for a free operation slot starts.
    op_hint: usize,
    /// A retransmission timer fired since the last liveness check.
    timer_fired: bool,
    /// A message was handed to a port during the current poll.
    delivered: bool,
    /// Sends handlers queued.
    outbox: Outbox,
}

impl<S> core::fmt::Debug for Engine<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// What to tell a port's handlers.
struct Note {
    port: PortId,
    errno: Option<Errno>,
    count: bool,
    msg_len: u32,
    stored: usize,
    base: usize,
    src: Endpoints,
}

/// Borrowed parts of the engine a handler may touch.
struct HandlerCx<'e, 'a, S> {
    ports: &'e mut [Port<'a, S>],
    sems: &'e mut [Semaphore],
    state: &'e mut S,
    eager: &'e mut [EagerBuf],
    outbox: &'e mut Outbox,
}

fn notify<S>(cx: HandlerCx<'_, '_, S>, n: Note) {
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

/// Marks a finished operation, folding children into their parent. A finished
/// top-level operation gives its eager buffer back, and frees its slot if detached.
fn finish_op(ops: &mut [Op<'_>], eager: &mut [EagerBuf], i: usize, ok: bool) {
    let parent = ops[i].parent;
    let top = if parent == NONE {
        ops[i].state = match (ok, ops[i].rejected) {
            (true, false) => OpState::Done,
            (true, true) => OpState::Rejected,
            (false, _) => OpState::Failed,
        };
        i
    } else {
        let ok = ok && !ops[i].rejected;
        ops[i].state = OpState::Free;
        let p = &mut ops[parent as usize];
        p.children = p.children.saturating_sub(1);
        p.child_failed |= !ok;
        if p.children > 0 {
            return;
        }
        p.state = if p.child_failed {
            OpState::Failed
        } else {
            OpState::Done
        };
        parent as usize
    };
    let op = &mut ops[top];
    if let Some(b) = eager.get_mut(op.eager as usize) {
        b.used = false;
    }
    op.eager = NONE;
    if op.detached {
        op.state = OpState::Free;
    }
}

impl<'a, S> Engine<'a, S> {
    /// An engine for `cfg.node` of group `cfg.group`, talking to the groups in `groups`.
    pub fn new(
        cfg: Config,
        groups: &'a [Group<'a>],
        storage: Storage<'a, S>,
        state: S,
    ) -> Result<Self, Error> {
        let g = groups
            .iter()
            .find(|g| g.id == cfg.group)
            .ok_or(Error::BadConfig)?;
        if cfg.node >= g.members.len() || cfg.window == 0 || storage.ops.len() > NONE as usize {
            return Err(Error::BadConfig);
        }
        if storage.channels.len() >= NONE as usize || storage.sems.is_empty() {
            return Err(Error::BadConfig);
        }
        Ok(Engine {
            size: g.members.len(),
            cfg,
            groups,
            ports: storage.ports,
            sems: storage.sems,
            chans: storage.channels,
            peer_map: storage.peer_map,
            ops: storage.ops,
            asms: storage.assemblies,
            eager: storage.eager,
            state,
            stats: Stats::default(),
            caps: Capabilities {
                mtu: 1500,
                reliable: false,
                integrity: false,
            },
            bar: BarrierState::default(),
            rr: 0,
            chan_hwm: 0,
            be_asms: 0,
            owed_retries: 0,
            op_hint: 0,
            timer_fired: false,
            delivered: false,
            outbox: Outbox::default(),
        })
    }

    /// Learns the device's limits (MTU, reliability, integrity) before the first
    /// [`Engine::poll`], which otherwise learns them; sends started earlier are framed
    /// to the device's MTU, not a default.
    pub fn set_capabilities(&mut self, caps: Capabilities) {
        self.caps = caps;
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// Instances in this process's group.
    pub fn size(&self) -> u16 {
        self.size
    }
    /// The application state shared with handlers.
    pub fn state(&self) -> &S {
        &self.state
    }
    /// The application state, mutably.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }
    /// Ends the engine, handing back the application state.
    pub fn into_state(self) -> S {
        self.state
    }
    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }
    /// Number of semaphores.
    pub fn sem_count(&self) -> usize {
        self.sems.len()
    }

    fn handler_cx(&mut self) -> HandlerCx<'_, 'a, S> {
        HandlerCx {
            ports: &mut self.ports,
            sems: &mut self.sems,
            state: &mut self.state,
            eager: &mut self.eager,
            outbox: &mut self.outbox,
        }
    }

    fn group(&self, id: GroupId) -> Option<&Group<'a>> {
        self.groups.iter().find(|g| g.id == id)
    }

    fn addr_of(&self, group: GroupId, node: NodeId) -> Result<NodeAddr, Error> {
        let g = self.group(group).ok_or(Error::UnknownGroup)?;
        g.members.addr(node).ok_or(Error::UnknownNode)
    }

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

    // ---------------------------------------------------------------- sends

    /// Starts sending `head` (copied, at most [`HEAD_MAX`] bytes) followed by `body`
    /// through `port`'s output binding. `reliable` selects the flow-controlled,
    /// retransmitting service. A broadcast binding sends to every other member.
    pub fn start_send(
        &mut self,
        port: PortId,
        head: &[u8],
        body: Body<'a>,
        reliable: bool,
    ) -> Result<SendHandle, Error> {
        self.start(port, head, Src::Body(body), reliable)
    }

    /// Starts a reliable unicast send whose payload (at most [`EAGER_MAX`] bytes) is
    /// copied into one of the engine's eager buffers now, so the caller may reuse its
    /// own at once; `NoResources` when no buffer is free, the message is too long, or
    /// the port broadcasts. Once [`Engine::handed_off`], the caller may
    /// [`Engine::detach`]: delivery is then the engine's job, and a failure is reported
    /// through the port's error handler or error semaphore.
    pub fn start_send_eager(
        &mut self,
        port: PortId,
        head: &[u8],
        body: &[u8],
    ) -> Result<SendHandle, Error> {
        self.start(port, head, Src::Copy(body), true)
    }

    fn start(
        &mut self,
        port: PortId,
        head: &[u8],
        body: Src<'a, '_>,
        reliable: bool,
    ) -> Result<SendHandle, Error> {
        let p = self.ports.get(port as usize).ok_or(Error::InvalidPort)?;
        let dest = p.dest.ok_or(Error::NotBound)?;
        if head.len() > HEAD_MAX {
            return Err(Error::FirstPieceTooLong);
        }
        let mut eager = NONE;
        let (body_ref, body_len, external) = match body {
            Src::Body(Body::Borrowed(b)) => (b, b.len(), false),
            Src::Body(Body::External(n)) => (&[][..], n, true),
            Src::Queued { idx, len } => {
                eager = idx;
                (&[][..], len, false)
            }
            Src::Copy(b) => {
                if b.len() > EAGER_MAX || dest.node == BROADCAST || !reliable {
                    return Err(Error::NoResources);
                }
                let i = self
                    .eager
                    .iter()
                    .position(|e| !e.used)
                    .ok_or(Error::NoResources)?;
                self.eager[i].used = true;
                self.eager[i].data[..b.len()].copy_from_slice(b);
                eager = i as u16;
                (&[][..], b.len(), false)
            }
        };
        let total = u32::try_from(head.len() + body_len).map_err(|_| Error::MessageTooLong)?;
        let mut op = Op::EMPTY;
        op.state = OpState::Active;
        op.reliable = reliable;
        op.external = external;
        op.head[..head.len()].copy_from_slice(head);
        op.head_len = head.len() as u8;
        op.body = body_ref;
        op.eager = eager;
        op.total = total;
        op.src_port = port;
        op.dest = dest;
        if dest.node != BROADCAST {
            let slots = self
                .addr_of(dest.group, dest.node)
                .and_then(|addr| self.channel_for(addr, dest.group, dest.node))
                .and_then(|ci| Ok((ci, self.alloc_op()?)));
            let (ci, oi) = match slots {
                Ok(x) => x,
                Err(e) => {
                    if let Some(b) = self.eager.get_mut(eager as usize) {
                        b.used = false;
                    }
                    return Err(e);
                }
            };
            self.enqueue(ci, oi, &op);
            return Ok(SendHandle::new(oi, self.ops[oi].gen));
        }
        // Broadcast: a parent slot plus one child per member, all or nothing.
        let g = *self.group(dest.group).ok_or(Error::UnknownGroup)?;
        let members: u16 = (0..g.members.len())
            .filter(|&i| !(dest.group == self.cfg.group && i == self.cfg.node))
            .count() as u16;
        let free = self.ops.iter().filter(|o| o.state == OpState::Free).count();
        if free < members as usize + 1 {
            return Err(Error::NoResources);
        }
        // Every member needs a channel: check there is room before starting any.
        let need = (0..g.members.len())
            .filter(|&i| !(dest.group == self.cfg.group && i == self.cfg.node))
            .filter_map(|i| g.members.addr(i))
            .filter(|a| self.peer_map.get(a.0 as usize).is_none_or(|&s| s == NONE))
            .count();
        let free_chans = self.chans.iter().filter(|c| !c.in_use).count();
        let unmapped = (0..g.members.len())
            .filter_map(|i| g.members.addr(i))
            .any(|a| a.0 as usize >= self.peer_map.len());
        if need > free_chans || unmapped {
            return Err(Error::NoResources);
        }
        let pi = self.alloc_op()?;
        let mut parent = op;
        parent.children = members;
        parent.gen = self.ops[pi].gen;
        parent.state = if members == 0 {
            OpState::Done
        } else {
            OpState::Active
        };
        self.ops[pi] = parent;
        op.kind = Kind::Multicast;
        op.parent = pi as u16;
        for i in 0..g.members.len() {
            if dest.group == self.cfg.group && i == self.cfg.node {
                continue;
            }
            let Some(addr) = g.members.addr(i) else {
                continue;
            };
            let mut child = op;
            child.dest.node = i;
            // Room was checked above.
            let ci = self.channel_for(addr, dest.group, i)?;
            let oi = self.alloc_op()?;
            self.enqueue(ci, oi, &child);
        }
        Ok(SendHandle::new(pi, self.ops[pi].gen))
    }

    fn alloc_op(&mut self) -> Result<usize, Error> {
        // Start the search where the last one ended: freed slots are usually near it.
        let n = self.ops.len();
        let h = self.op_hint.min(n);
        let i = (h..n)
            .chain(0..h)
            .find(|&i| self.ops[i].state == OpState::Free)
            .ok_or(Error::NoResources)?;
        self.op_hint = i;
        // Bump the generation so stale handles to this slot are recognised.
        let gen = self.ops[i].gen.wrapping_add(1);
        self.ops[i].gen = gen;
        self.ops[i].state = OpState::Active;
        Ok(i)
    }

    /// Fills slot `oi` (already taken by `alloc_op`) from `proto` and queues it on
    /// channel `ci`.
    fn enqueue(&mut self, ci: usize, oi: usize, proto: &Op<'a>) {
        let ch = &mut self.chans[ci];
        let gen = self.ops[oi].gen;
        let op = &mut self.ops[oi];
        *op = *proto;
        op.gen = gen;
        op.chan = ci as u16;
        op.next = NONE;
        if ch.failed {
            let (port, dest) = (op.src_port, op.dest);
            finish_op(&mut self.ops, &mut self.eager, oi, false);
            self.notify_send_failure(port, dest);
            return;
        }
        if op.reliable {
            op.msg_id = ch.next_msg;
            ch.next_msg = ch.next_msg.wrapping_add(1);
        } else {
            op.msg_id = ch.next_be_msg;
            ch.next_be_msg = ch.next_be_msg.wrapping_add(1);
        }
        if ch.q_tail == NONE {
            ch.q_head = oi as u16;
        } else {
            self.ops[ch.q_tail as usize].next = oi as u16;
        }
        ch.q_tail = oi as u16;
    }

    fn notify_send_failure(&mut self, port: PortId, dest: Dest) {
        notify(
            self.handler_cx(),
            Note {
                port,
                errno: Some(Errno::SendFailure),
                count: false,
                msg_len: 0,
                stored: 0,
                base: 0,
                src: Endpoints {
                    src_group: dest.group,
                    src_node: dest.node,
                    src_port: dest.port,
                    ..Endpoints::default()
                },
            },
        );
    }

    /// Progress of a send. A finished one keeps its slot until [`Engine::release`].
    pub fn send_status(&self, h: SendHandle) -> Result<SendStatus, Error> {
        let op = self.ops.get(h.idx()).ok_or(Error::InvalidHandle)?;
        if op.gen != h.gen() || op.state == OpState::Free || op.parent != NONE {
            return Err(Error::InvalidHandle);
        }
        Ok(match op.state {
            OpState::Done => SendStatus::Done,
            OpState::Failed => SendStatus::Failed,
            OpState::Rejected => SendStatus::Rejected,
            _ => SendStatus::Pending,
        })
    }

    /// True once every byte of the send has been handed to the device (for an eager
    /// send, the caller's part is then over), or the send has finished.
    pub fn handed_off(&self, h: SendHandle) -> Result<bool, Error> {
        let st = self.send_status(h)?;
        let op = &self.ops[h.idx()];
        Ok(st != SendStatus::Pending || (op.started && op.framed == op.total))
    }

    /// Lets go of a send: its slot frees itself when it finishes. A failure is still
    /// reported through the port's error handler or error semaphore.
    pub fn detach(&mut self, h: SendHandle) -> Result<(), Error> {
        let st = self.send_status(h)?;
        let op = &mut self.ops[h.idx()];
        if st == SendStatus::Pending {
            op.detached = true;
        } else {
            op.state = OpState::Free;
        }
        Ok(())
    }

    /// Frees a finished send's slot and returns how it ended. A pending send is left alone.
    pub fn release(&mut self, h: SendHandle) -> Result<SendStatus, Error> {
        let st = self.send_status(h)?;
        if st != SendStatus::Pending {
            self.ops[h.idx()].state = OpState::Free;
        }
        Ok(st)
    }

    fn channel_for(
        &mut self,
        addr: NodeAddr,
        group: GroupId,
        node: NodeId,
    ) -> Result<usize, Error> {
        let slot = self
            .peer_map
            .get(addr.0 as usize)
            .copied()
            .ok_or(Error::NoResources)?;
        if slot != NONE {
            return Ok(slot as usize);
        }
        let ci = self
            .chans
            .iter()
            .position(|c| !c.in_use)
            .ok_or(Error::NoResources)?;
        self.chans[ci].open(
            addr,
            group,
            node,
            self.cfg.window.min(MAX_WINDOW as u16),
            self.cfg.rto_initial,
        );
        self.peer_map[addr.0 as usize] = ci as u16;
        self.chan_hwm = self.chan_hwm.max(ci + 1);
        Ok(ci)
    }

    // -------------------------------------------------------------- barrier

    /// Starts a barrier among all members of this process's group (dissemination
    /// algorithm: `ceil(log2 n)` rounds, one token sent and one awaited per round).
    pub fn start_barrier(&mut self) -> Result<(), Error> {
        if self.bar.active {
            return Err(Error::BarrierInProgress);
        }
        self.bar.active = true;
        self.bar.round = 0;
        self.bar.sent = false;
        self.bar.failed = None;
        Ok(())
    }

    /// `Ok(true)` once the barrier started last has completed, `Ok(false)` while it runs,
    /// `Err(SendFailure)` if a peer it needed is dead (`NoResources` if the channel
    /// table has no room for one).
    pub fn barrier_done(&self) -> Result<bool, Error> {
        if let Some(e) = self.bar.failed {
            return Err(e);
        }
        Ok(!self.bar.active)
    }

    /// Ends the running barrier with `e` and tells every member it would still have
    /// sent a token to, so that nobody waits for a barrier that can no longer complete
    /// (each of them passes the abort on in turn: the dissemination pattern reaches all).
    fn fail_barrier(&mut self, e: Error) {
        self.bar.failed = Some(e);
        self.bar.active = false;
        let (n, me) = (self.size as u32, self.cfg.node as u32);
        for r in self.bar.round..self.rounds() {
            let peer = ((me + (1u32 << r)) % n) as NodeId;
            // Best effort: a member not reached this way finds out by its own probe.
            let _ = self.queue_barrier_frame(peer, r | BARRIER_ABORT);
        }
    }

    /// Queues a barrier frame (token, probe or abort) for `peer`; false if it cannot
    /// go (no channel, peer failed) or must wait (queue full).
    fn queue_barrier_frame(&mut self, peer: NodeId, round: u32) -> Result<bool, Error> {
        let addr = self.addr_of(self.cfg.group, peer)?;
        let ci = self.channel_for(addr, self.cfg.group, peer)?;
        let ch = &mut self.chans[ci];
        if ch.failed {
            return Err(Error::SendFailure);
        }
        if ch.ctrl_len == CTRL_QUEUE {
            return Ok(false);
        }
        ch.ctrl[ch.ctrl_len] = Slot::Barrier {
            epoch: self.bar.epoch,
            round,
        };
        ch.ctrl_len += 1;
        Ok(true)
    }

    fn rounds(&self) -> u32 {
        let n = self.size as u32;
        if n <= 1 {
            0
        } else {
            32 - (n - 1).leading_zeros()
        }
    }

    fn advance_barrier(&mut self, now: Instant) {
        let rounds = self.rounds();
        while self.bar.active {
            if self.bar.aborted[0] {
                return self.fail_barrier(Error::SendFailure);
            }
            if self.bar.round >= rounds {
                self.bar.active = false;
                self.bar.epoch = self.bar.epoch.wrapping_add(1);
                self.bar.arrivals = [self.bar.arrivals[1], 0];
                self.bar.aborted = [self.bar.aborted[1], false];
                self.stats.barriers += 1;
                return;
            }
            let n = self.size as u32;
            let me = self.cfg.node as u32;
            if !self.bar.sent {
                let peer = ((me + (1u32 << self.bar.round)) % n) as NodeId;
                match self.queue_barrier_frame(peer, self.bar.round) {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => return self.fail_barrier(e),
                }
                self.bar.sent = true;
                self.bar.since = now;
            }
            if self.bar.arrivals[0] & (1u64 << self.bar.round) == 0 {
                // Still waiting: make sure the member we wait for is alive.
                if now.saturating_since(self.bar.since) >= self.cfg.barrier_probe {
                    self.bar.since = now;
                    let source = ((me + n - (1u32 << self.bar.round) % n) % n) as NodeId;
                    if let Err(e) = self.queue_barrier_frame(source, BARRIER_PROBE) {
                        return self.fail_barrier(e);
                    }
                }
                return;
            }
            self.bar.round += 1;
            self.bar.sent = false;
        }
    }

    // ------------------------------------------------------------ receiving

    /// Processes one received frame. Never panics, whatever the bytes. The CRC is
    /// skipped only if the device last given to [`Engine::poll`] guarantees integrity.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.handle_frame_from(now, frame, None)
    }

    /// [`Engine::handle_frame`] for a frame the device saw come from fabric address
    /// `source`: a header claiming another sender is dropped (`rx_spoofed`).
    pub fn handle_frame_from(&mut self, now: Instant, frame: &[u8], source: Option<NodeAddr>) {
        self.stats.rx_frames += 1;
        // The header is read once, into private memory: the frame may sit in a ring
        // slot that another process can still write.
        let key = self.cfg.auth_key.as_ref();
        let (repr, payload) = match Repr::parse_frame(frame, self.caps.integrity, key) {
            Ok(r) => r,
            Err(WireError::BadTag) => {
                self.stats.rx_unauthenticated += 1;
                return;
            }
            Err(WireError::BadChecksum) => {
                self.stats.rx_bad_crc += 1;
                return;
            }
            Err(_) => {
                self.stats.rx_malformed += 1;
                return;
            }
        };
        if repr.job_key != self.cfg.job_key {
            self.stats.rx_foreign_job += 1;
            return;
        }
        if repr.ends.dst_group != self.cfg.group || repr.ends.dst_node != self.cfg.node {
            self.stats.rx_foreign_group += 1;
            return;
        }
        let Ok(addr) = self.addr_of(repr.ends.src_group, repr.ends.src_node) else {
            self.stats.rx_unknown_source += 1;
            return;
        };
        if source.is_some_and(|s| s != addr) {
            self.stats.rx_spoofed += 1;
            return;
        }
        let Ok(ci) = self.channel_for(addr, repr.ends.src_group, repr.ends.src_node) else {
            self.stats.rx_dropped += 1;
            return;
        };
        // Any valid frame shows the peer is alive.
        let ch = &mut self.chans[ci];
        ch.heard_at = now;
        ch.silent_since = None;
        if let Some(a) = repr.ack {
            self.on_ack(now, ci, a, repr.flags);
        }
        match repr.kind {
            Kind::Ack => {}
            Kind::Data | Kind::Multicast | Kind::Barrier | Kind::Control
                if repr.flags.contains(Flags::RELIABLE) =>
            {
                self.rx_reliable(now, ci, &repr, payload)
            }
            Kind::Data | Kind::Multicast => self.rx_best_effort(now, ci, &repr, payload),
            _ => self.stats.rx_unsupported += 1,
        }
    }

    fn on_ack(&mut self, now: Instant, ci: usize, a: AckInfo, flags: Flags) {
        let refused = flags.contains(Flags::REFUSED);
        let ops = &mut self.ops;
        let eager = &mut self.eager;
        let ch = &mut self.chans[ci];
        let progress = ch.on_ack(a, |slot| {
            if let Slot::Data { op, .. } = slot {
                let o = &mut ops[op as usize];
                o.unacked = o.unacked.saturating_sub(1);
                if o.state == OpState::Active && o.framed == o.total && o.started && o.unacked == 0
                {
                    finish_op(ops, eager, op as usize, true);
                }
            }
        });
        if refused {
            ch.refused = true;
        } else if !self.caps.reliable {
            ch.mark_holes_for_resend(a);
        }
        if progress || refused {
            ch.retries = 0;
        }
        if progress {
            ch.rto = self.cfg.rto_initial;
            ch.rto_at = (ch.outstanding() > 0).then(|| now + ch.rto);
        }
        if flags.contains(Flags::RETRY) {
            // The port that refused us is free: no need to wait for the timer.
            ch.mark_all_for_resend();
        }
    }

    fn rx_reliable(&mut self, now: Instant, ci: usize, repr: &Repr, payload: &[u8]) {
        trace!(
            "{now} node {} rx seq {} msg {} off {} from {}: {:?} rcv_nxt {}",
            self.cfg.node,
            repr.seq,
            repr.msg_id,
            repr.offset,
            repr.ends.src_node,
            self.chans[ci].check_seq(repr.seq),
            self.chans[ci].rcv_nxt
        );
        match self.chans[ci].check_seq(repr.seq) {
            SeqCheck::Duplicate => {
                self.stats.rx_duplicates += 1;
                self.chans[ci].ack_now = true;
                return;
            }
            SeqCheck::OutOfWindow => {
                self.stats.rx_out_of_window += 1;
                self.chans[ci].ack_now = true;
                return;
            }
            SeqCheck::New => {}
        }
        let accepted = match repr.kind {
            Kind::Barrier => {
                self.rx_barrier(repr);
                true
            }
            Kind::Control => {
                self.rx_control(ci, repr);
                true
            }
            _ => self.rx_reliable_data(now, ci, repr, payload),
        };
        let ch = &mut self.chans[ci];
        if !accepted {
            self.stats.rx_refused += 1;
            ch.refusing = true;
            if !ch.owed_retry {
                ch.owed_retry = true;
                self.owed_retries += 1;
            }
            ch.ack_now = true;
            return;
        }
        ch.mark_received(repr.seq);
        ch.since_ack = ch.since_ack.saturating_add(1);
        if repr.flags.contains(Flags::ACK_REQ) || ch.since_ack >= (self.cfg.window / 2).max(1) {
            ch.ack_now = true;
        } else if ch.ack_at.is_none() {
            // Credits come back within the delay even if nothing is sent meanwhile.
            ch.ack_at = Some(now + self.cfg.ack_delay);
        }
        if matches!(repr.kind, Kind::Data | Kind::Multicast) {
            self.deliver_in_order(ci);
        }
    }

    /// A control frame: REJECT fails our message `msg_id` sent from `dst_port`.
    fn rx_control(&mut self, ci: usize, repr: &Repr) {
        if repr.offset != CONTROL_REJECT {
            self.stats.rx_unsupported += 1;
            return;
        }
        self.stats.tx_rejected += 1;
        let found = self.ops.iter().position(|o| {
            o.state != OpState::Free && o.reliable && o.chan == ci as u16 && o.msg_id == repr.msg_id
        });
        let ch = &self.chans[ci];
        let mut dest = Dest {
            group: ch.peer_group,
            node: ch.peer_node,
            port: 0,
        };
        if let Some(i) = found {
            let o = &mut self.ops[i];
            dest = o.dest;
            match o.state {
                OpState::Active => o.rejected = true,
                OpState::Done if o.parent == NONE => o.state = OpState::Rejected,
                _ => {}
            }
        }
        self.notify_send_failure(repr.ends.dst_port, dest);
    }

    fn rx_barrier(&mut self, repr: &Repr) {
        let (epoch, round) = (repr.msg_id, repr.offset);
        if round == BARRIER_PROBE {
            return; // its ack is the answer
        }
        let slot = if epoch == self.bar.epoch {
            0
        } else if epoch == self.bar.epoch.wrapping_add(1) {
            1
        } else {
            self.stats.rx_dropped += 1;
            return;
        };
        if round & BARRIER_ABORT != 0 {
            self.bar.aborted[slot] = true;
        } else if round < 64 {
            self.bar.arrivals[slot] |= 1u64 << round;
        } else {
            self.stats.rx_malformed += 1;
        }
    }

    fn find_asm(&self, ci: usize, msg_id: u32, reliable: bool) -> Option<usize> {
        self.asms.iter().position(|a| {
            a.used && a.chan == ci as u16 && a.msg_id == msg_id && a.reliable == reliable
        })
    }

    /// Reserves room in the destination port for a new message, or `None` to refuse.
    fn reserve(&mut self, ci: usize, repr: &Repr, reliable: bool, now: Instant) -> Option<usize> {
        let port = repr.ends.dst_port;
        let p = self.ports.get_mut(port as usize)?;
        if !p.input || p.busy {
            return None;
        }
        let ai = self.asms.iter().position(|a| !a.used)?;
        let base = match p.kind {
            BufferKind::GoBack => 0,
            BufferKind::GoAhead => p.cursor,
        };
        let cap = (repr.total_len as usize).min(p.room(base));
        if p.kind == BufferKind::GoAhead {
            p.cursor = base + cap;
        }
        p.busy = true;
        if !reliable {
            self.be_asms += 1;
        }
        self.asms[ai] = Assembly {
            used: true,
            chan: ci as u16,
            msg_id: repr.msg_id,
            discard: false,
            reliable,
            port,
            base,
            cap,
            total: repr.total_len,
            received: 0,
            deadline: now + self.cfg.reassembly_timeout,
            src: repr.ends,
        };
        Some(ai)
    }

    /// Whether a reliable message that `reserve` refused should be discarded: its port
    /// is reserved or out of range, or has not been bound for input within the grace.
    fn closed_port(&mut self, ci: usize, repr: &Repr, now: Instant) -> bool {
        let dp = repr.ends.dst_port;
        let unbound = match self.ports.get(dp as usize) {
            _ if dp == BARRIER_PORT || dp == BROADCAST_PORT => return true,
            None => return true,
            Some(p) => !p.input,
        };
        let ch = &mut self.chans[ci];
        if !unbound {
            // Busy: ordinary flow control, the port frees up when its message lands.
            ch.unbound_msg = None;
            return false;
        }
        match ch.unbound_msg {
            Some((m, since)) if m == repr.msg_id => {
                now.saturating_since(since) >= self.cfg.unbound_grace
            }
            _ => {
                ch.unbound_msg = Some((repr.msg_id, now));
                false
            }
        }
    }

    /// An assembly that takes a message's fragments and stores nothing, so that the
    /// channel's order holds; the sender is told when it completes. `None` (refuse
    /// for now) if no assembly or control slot is free.
    fn reserve_discard(&mut self, ci: usize, repr: &Repr, now: Instant) -> Option<usize> {
        if self.chans[ci].ctrl_len >= CTRL_QUEUE {
            return None;
        }
        let ai = self.asms.iter().position(|a| !a.used)?;
        self.asms[ai] = Assembly {
            used: true,
            discard: true,
            chan: ci as u16,
            msg_id: repr.msg_id,
            reliable: true,
            port: repr.ends.dst_port,
            base: 0,
            cap: 0,
            total: repr.total_len,
            received: 0,
            deadline: now + self.cfg.reassembly_timeout,
            src: repr.ends,
        };
        Some(ai)
    }

    /// Copies a fragment into its place in the port buffer.
    fn place(&mut self, ai: usize, offset: u32, payload: &[u8]) {
        let a = &mut self.asms[ai];
        a.received = a.received.saturating_add(payload.len() as u32);
        let off = offset as usize;
        if off >= a.cap {
            return;
        }
        let n = payload.len().min(a.cap - off);
        let at = a.base + off;
        if let Some(buf) = self
            .ports
            .get_mut(a.port as usize)
            .and_then(|p| p.buf.as_deref_mut())
        {
            if let Some(dst) = buf.get_mut(at..at + n) {
                dst.copy_from_slice(&payload[..n]);
            }
        }
    }

    fn rx_reliable_data(&mut self, now: Instant, ci: usize, repr: &Repr, payload: &[u8]) -> bool {
        let ai = match self.find_asm(ci, repr.msg_id, true) {
            Some(ai) => ai,
            None => {
                let next = self.chans[ci].next_reserve;
                if seq_lt(repr.msg_id, next) {
                    // Its message is already complete: nothing left to place.
                    self.stats.rx_dropped += 1;
                    return true;
                }
                if repr.msg_id != next {
                    // Placed in message order, so a later message waits for an earlier one.
                    return false;
                }
                let ai = match self.reserve(ci, repr, true, now) {
                    Some(ai) => ai,
                    None if self.closed_port(ci, repr, now) => {
                        let Some(ai) = self.reserve_discard(ci, repr, now) else {
                            return false;
                        };
                        ai
                    }
                    None => return false,
                };
                self.chans[ci].unbound_msg = None;
                self.chans[ci].next_reserve = next.wrapping_add(1);
                ai
            }
        };
        self.place(ai, repr.offset, payload);
        true
    }

    fn deliver_in_order(&mut self, ci: usize) {
        loop {
            let want = self.chans[ci].next_deliver;
            let Some(ai) = self.find_asm(ci, want, true) else {
                return;
            };
            let a = self.asms[ai];
            if a.received < a.total {
                return;
            }
            self.chans[ci].next_deliver = want.wrapping_add(1);
            self.deliver(ai, None);
        }
    }

    /// Hands a finished (or abandoned, with `lost`) message to its port.
    fn deliver(&mut self, ai: usize, lost: Option<Errno>) {
        let a = &mut self.asms[ai];
        a.used = false;
        if !a.reliable {
            self.be_asms -= 1;
        }
        let a = *a;
        if a.discard {
            self.stats.rx_rejected += 1;
            if let Some(ch) = self.chans.get_mut(a.chan as usize) {
                if ch.ctrl_len < CTRL_QUEUE {
                    ch.ctrl[ch.ctrl_len] = Slot::Reject {
                        msg: a.msg_id,
                        port: a.src.src_port,
                    };
                    ch.ctrl_len += 1;
                }
            }
            return;
        }
        self.delivered = true;
        let truncated = (a.total as usize) > a.cap;
        let errno = lost.or(truncated.then_some(Errno::MsgTooLong));
        match errno {
            Some(Errno::FrameLost) => self.stats.lost += 1,
            Some(_) => self.stats.truncated += 1,
            None => self.stats.delivered += 1,
        }
        // Whoever was refused may find this port free now.
        if self.owed_retries > 0 {
            self.owed_retries = 0;
            for ch in self.chans[..self.chan_hwm]
                .iter_mut()
                .filter(|c| c.owed_retry)
            {
                ch.owed_retry = false;
                ch.retry_now = true;
                ch.ack_now = true;
            }
        }
        if let Some(p) = self.ports.get_mut(a.port as usize) {
            p.busy = false;
            if p.kind == BufferKind::GoAhead {
                let len = p.buf.as_ref().map_or(0, |b| b.len().min(p.buf_len));
                if truncated {
                    // GAMMA: a filled buffer stays invalid until a fresh one is posted.
                    p.full = true;
                } else if p.cursor >= len {
                    // An exact fit: the next message starts over at the beginning.
                    p.cursor = 0;
                }
            }
        }
        notify(
            self.handler_cx(),
            Note {
                port: a.port,
                errno,
                count: true,
                msg_len: a.total,
                stored: a.cap.min(a.received as usize),
                base: a.base,
                src: a.src,
            },
        );
    }

    /// Reports a best-effort message lost before any of it was placed.
    fn report_lost(&mut self, repr: &Repr) {
        self.stats.lost += 1;
        if (repr.ends.dst_port as usize) < self.ports.len() {
            notify(
                self.handler_cx(),
                Note {
                    port: repr.ends.dst_port,
                    errno: Some(Errno::FrameLost),
                    count: false,
                    msg_len: repr.total_len,
                    stored: 0,
                    base: 0,
                    src: repr.ends,
                },
            );
        }
    }

    fn rx_best_effort(&mut self, now: Instant, ci: usize, repr: &Repr, payload: &[u8]) {
        let msg = repr.msg_id;
        let expect = self.chans[ci].be_expect;
        let cur = self.chans[ci].be_asm;
        // `be_expect` is already past the message being assembled: its later fragments
        // belong to `cur`, everything else older is stale.
        let continues = cur != NONE && self.asms[cur as usize].msg_id == msg;
        if !continues && seq_lt(msg, expect) {
            self.stats.rx_dropped += 1;
            return;
        }
        if cur != NONE && !continues {
            // A later message started: the unfinished one lost frames.
            self.chans[ci].be_asm = NONE;
            self.deliver(cur as usize, Some(Errno::FrameLost));
        }
        let ai = if self.chans[ci].be_asm != NONE {
            self.chans[ci].be_asm as usize
        } else {
            // Whole messages vanished between `expect` and `msg`: one report each, so
            // that every message is either delivered or reported (bounded by a window,
            // whatever a frame claims).
            let vanished = msg.wrapping_sub(expect).min(MAX_WINDOW as u32);
            for _ in 0..vanished {
                self.report_lost(repr);
            }
            self.chans[ci].be_expect = msg.wrapping_add(1);
            if repr.offset != 0 {
                self.stats.rx_dropped += 1;
                self.report_lost(repr);
                return;
            }
            let Some(ai) = self.reserve(ci, repr, false, now) else {
                self.stats.rx_dropped += 1;
                self.report_lost(repr);
                return;
            };
            self.chans[ci].be_asm = ai as u16;
            ai
        };
        let next = self.asms[ai].received;
        if repr.offset < next {
            // A duplicate of a fragment already placed.
            self.stats.rx_dropped += 1;
            return;
        }
        if repr.offset > next {
            self.chans[ci].be_asm = NONE;
            self.deliver(ai, Some(Errno::FrameLost));
            return;
        }
        self.place(ai, repr.offset, payload);
        self.asms[ai].deadline = now + self.cfg.reassembly_timeout;
        if self.asms[ai].received >= self.asms[ai].total {
            self.chans[ci].be_asm = NONE;
            self.deliver(ai, None);
        }
    }

    // ---------------------------------------------------------------- timers

    /// Fires every timer due at `now`: retransmissions, delayed acks, abandoned
    /// best-effort messages, and declares peers dead when retries run out.
    pub fn handle_timeout(&mut self, now: Instant) {
        for ci in 0..self.chan_hwm {
            let ch = &mut self.chans[ci];
            if !ch.in_use {
                continue;
            }
            if ch.ack_at.is_some_and(|t| t <= now) {
                ch.ack_at = None;
                ch.ack_now = true;
            }
            let Some(t) = ch.rto_at else { continue };
            if t > now {
                continue;
            }
            if ch.outstanding() == 0 {
                ch.rto_at = None;
                continue;
            }
            self.stats.timeouts += 1;
            self.timer_fired = true;
            let refused = core::mem::take(&mut ch.refused);
            if !refused {
                ch.retries = ch.retries.saturating_add(1);
            }
            trace!(
                "{now} node {} timeout to {:?}: una {} nxt {} retries {} refused {refused} rto {}",
                self.cfg.node,
                ch.peer,
                ch.snd_una,
                ch.snd_nxt,
                ch.retries,
                ch.rto
            );
            // Failure is judged by time without a word from the peer, not by rounds.
            let since = *ch.silent_since.get_or_insert(now);
            if now.saturating_since(since) >= self.cfg.peer_timeout {
                self.fail_channel(ci);
                continue;
            }
            if self.caps.reliable && !refused {
                // Nothing is lost on this link: probe with the oldest frame only.
                let una = ch.snd_una;
                let e = ch.slot_mut(una);
                if !e.sacked {
                    e.resend = true;
                    ch.resend_any = true;
                }
            } else {
                ch.mark_all_for_resend();
            }
            ch.rto = if ch.rto.doubled() > self.cfg.rto_max {
                self.cfg.rto_max
            } else {
                ch.rto.doubled()
            };
            ch.rto_at = Some(now + ch.rto);
        }
        if self.be_asms == 0 {
            return;
        }
        for ai in 0..self.asms.len() {
            let a = &self.asms[ai];
            if a.used && !a.reliable && a.deadline <= now {
                if let Some(ch) = self.chans.get_mut(a.chan as usize) {
                    ch.be_asm = NONE;
                }
                self.deliver(ai, Some(Errno::FrameLost));
            }
        }
    }

    /// Declares the peer of channel `ci` dead: every send to it fails.
    fn fail_channel(&mut self, ci: usize) {
        self.stats.peers_failed += 1;
        let ch = &mut self.chans[ci];
        ch.failed = true;
        ch.rto_at = None;
        ch.ctrl_len = 0;
        ch.q_head = NONE;
        ch.q_tail = NONE;
        ch.snd_una = ch.snd_nxt;
        ch.inflight.iter_mut().for_each(|e| e.slot = Slot::Free);
        for oi in 0..self.ops.len() {
            let o = self.ops[oi];
            if o.state == OpState::Active && o.chan == ci as u16 && o.children == 0 {
                finish_op(&mut self.ops, &mut self.eager, oi, false);
                self.notify_send_failure(o.src_port, o.dest);
                // That port has been told: the scan below does not tell it again.
                let sem = self
                    .ports
                    .get(o.src_port as usize)
                    .filter(|p| p.input)
                    .map(|p| p.sem);
                if let Some(s) = sem.and_then(|s| self.sems.get_mut(s as usize)) {
                    s.peer_dead = true;
                }
            }
        }
        self.fail_ports_bound_to(ci);
        if self.bar.active && self.chans[ci].peer_group == self.cfg.group {
            // The member we send to or wait for in this round is gone.
            let peer = self.chans[ci].peer_node as u32;
            let n = self.size as u32;
            let me = self.cfg.node as u32;
            let step = (1u32 << self.bar.round.min(31)) % n.max(1);
            if peer == (me + step) % n || peer == (me + n - step) % n {
                self.fail_barrier(Error::SendFailure);
            }
        }
    }

    /// Tells every input port bound to channel `ci`'s (dead) peer, directly or through a
    /// broadcast binding to its group: `SENDFAILURE` on the port, and its semaphore
    /// marked so that a wait for messages that cannot come ends.
    fn fail_ports_bound_to(&mut self, ci: usize) {
        let (group, node) = (self.chans[ci].peer_group, self.chans[ci].peer_node);
        for port in 0..self.ports.len() {
            let p = &self.ports[port];
            let bound = p.input
                && p.dest
                    .is_some_and(|d| d.group == group && (d.node == node || d.node == BROADCAST));
            if !bound {
                continue;
            }
            let (sem, dest) = (p.sem as usize, p.dest);
            if let Some(s) = self.sems.get_mut(sem) {
                if s.peer_dead {
                    continue; // told already (another port on this semaphore)
                }
                s.peer_dead = true;
            }
            if let Some(d) = dest {
                self.notify_send_failure(port as PortId, d);
            }
        }
    }

    /// Probes, at most once per `keepalive`, every silent peer that an input port
    /// counting on semaphore `sem` is bound to: a rank waiting for a message from a
    /// peer that died then sees `SENDFAILURE` after `peer_timeout` (at once on a
    /// device that knows) instead of waiting forever.
    pub fn keepalive(&mut self, now: Instant, sem: u16) {
        let me = (self.cfg.group, self.cfg.node);
        for port in 0..self.ports.len() {
            let p = &self.ports[port];
            let Some(d) = p.dest.filter(|_| p.input && p.sem == sem) else {
                continue;
            };
            let Some(g) = self.group(d.group).copied() else {
                continue;
            };
            let nodes = if d.node == BROADCAST {
                0..g.members.len()
            } else {
                d.node..d.node.saturating_add(1)
            };
            for node in nodes.filter(|&n| (d.group, n) != me) {
                let Ok(addr) = self.addr_of(d.group, node) else {
                    continue;
                };
                let Ok(ci) = self.channel_for(addr, d.group, node) else {
                    continue;
                };
                let ch = &mut self.chans[ci];
                let idle = ch.outstanding() == 0 && ch.ctrl_len == 0 && ch.q_head == NONE;
                if ch.failed || !idle || now.saturating_since(ch.heard_at) < self.cfg.keepalive {
                    continue;
                }
                // A probe is a reliable barrier frame the peer only acknowledges.
                ch.ctrl[0] = Slot::Barrier {
                    epoch: self.bar.epoch,
                    round: BARRIER_PROBE,
                };
                ch.ctrl_len = 1;
                ch.heard_at = now;
            }
        }
    }

    /// Sends every ack held back (delayed to ride on data) at the next transmit.
    pub fn flush_acks(&mut self) {
        for ch in self.chans[..self.chan_hwm]
            .iter_mut()
            .filter(|c| c.in_use && !c.failed)
        {
            if ch.ack_at.take().is_some() || ch.since_ack > 0 {
                ch.ack_now = true;
            }
        }
    }

    /// True when nothing is in flight: no send running, no frame unacknowledged, no
    /// ack owed, no barrier running (failed peers excepted: nothing more will happen there).
    pub fn is_quiescent(&self) -> bool {
        let ops_idle = self
            .ops
            .iter()
            .all(|o| o.state != OpState::Active || o.chan_failed(&self.chans));
        let chans_idle = self.chans[..self.chan_hwm].iter().all(|c| {
            !c.in_use
                || c.failed
                || (c.outstanding() == 0 && !c.ack_now && c.ack_at.is_none() && c.ctrl_len == 0)
        });
        ops_idle && chans_idle && !self.bar.active && self.outbox.len == 0
    }

    /// Asks the device about every peer still owed an ack; a peer the device knows
    /// to be dead fails at once instead of after the whole back-off.
    fn check_liveness<D: Device>(&mut self, now: Instant, dev: &mut D) {
        for ci in 0..self.chan_hwm {
            let ch = &self.chans[ci];
            if ch.in_use && !ch.failed && ch.outstanding() > 0 && !dev.peer_alive(now, ch.peer) {
                self.fail_channel(ci);
            }
        }
    }

    /// When the engine next needs a poll without a frame arriving: `Some(now)` if it
    /// has frames it could send right away.
    pub fn poll_at(&self, now: Instant) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut min = |t: Instant| at = Some(at.map_or(t, |a| a.min(t)));
        if self.outbox.len > 0 {
            min(now);
        }
        for ch in self.chans.iter().filter(|c| c.in_use && !c.failed) {
            if ch.ack_now || ch.resend_any || (ch.ctrl_len > 0 && ch.can_send_new()) {
                min(now);
            }
            if ch.q_head != NONE {
                let op = &self.ops[ch.q_head as usize];
                if !op.reliable || ch.can_send_new() {
                    min(now);
                }
            }
            if let Some(t) = ch.rto_at {
                min(t);
            }
            if let Some(t) = ch.ack_at {
                min(t);
            }
        }
        for a in self.asms.iter().filter(|a| a.used && !a.reliable) {
            min(a.deadline);
        }
        at
    }

    // --------------------------------------------------------------- sending

    /// Starts the sends handlers queued. Only those queued before this call: a
    /// handler run from here (an error handler) queues for the next one.
    fn start_queued(&mut self) {
        let queued = core::mem::take(&mut self.outbox);
        for q in &queued.items[..queued.len] {
            let src = Src::Queued {
                idx: q.eager,
                len: q.len as usize,
            };
            match self.start(q.port, &[], src, q.reliable) {
                Ok(h) => {
                    // Nobody holds the handle: a failure goes to the port's error handler.
                    let _ = self.detach(h);
                }
                Err(_) => {
                    if let Some(b) = self.eager.get_mut(q.eager as usize) {
                        b.used = false;
                    }
                    if let Some(dest) = self.port_dest(q.port) {
                        self.notify_send_failure(q.port, dest);
                    }
                }
            }
        }
    }

    /// Sends what the windows and credits allow. `ext` is the payload of the
    /// [`Body::External`] send in progress, if any. Returns frames sent.
    pub fn poll_transmit<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
    ) -> usize {
        if self.outbox.len > 0 {
            self.start_queued();
        }
        let n = self.chan_hwm;
        if n == 0 {
            return 0;
        }
        // Start at a different channel each time so no peer is always served last.
        self.rr = if self.rr + 1 >= n { 0 } else { self.rr + 1 };
        let start = self.rr;
        let mut sent = 0;
        for ci in (start..n).chain(0..start) {
            let ch = &self.chans[ci];
            let idle = !ch.resend_any
                && ch.ctrl_len == 0
                && ch.q_head == NONE
                && !ch.ack_now
                && (ch.rto_at.is_some() || ch.outstanding() == 0);
            if ch.in_use && !ch.failed && !idle {
                sent += self.transmit_chan(now, dev, ci, ext);
            }
        }
        sent
    }

    fn transmit_chan<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ci: usize,
        ext: Option<&[u8]>,
    ) -> usize {
        let Engine {
            chans,
            ops,
            eager,
            cfg,
            caps,
            stats,
            ..
        } = self;
        let ch = &mut chans[ci];
        let tag = if cfg.auth_key.is_some() {
            wire::TAG_LEN
        } else {
            0
        };
        let max_payload = caps
            .mtu
            .saturating_sub(HEADER_LEN + tag)
            .min(u16::MAX as usize);
        if max_payload == 0 {
            return 0;
        }
        let mut tx = Tx {
            dev,
            now,
            caps: *caps,
            cfg,
            stats,
            sent: 0,
        };

        // 1. Frames to send again.
        let mut s = ch.snd_una;
        while ch.resend_any && seq_lt(s, ch.snd_nxt) {
            let e = *ch.slot_mut(s);
            if e.resend && !e.sacked {
                let ok = match e.slot {
                    Slot::Data { op, offset, len } => {
                        let o = &ops[op as usize];
                        let body = op_body(o, eager, ext);
                        match body {
                            Some(body) => {
                                let pieces = o.pieces(body, offset as usize, len as usize);
                                let last = offset + len as u32 == o.total;
                                tx.data(ch, o, s, offset, pieces, last, true)
                            }
                            None => false,
                        }
                    }
                    Slot::Barrier { epoch, round } => tx.barrier(ch, s, epoch, round),
                    Slot::Reject { msg, port } => tx.reject(ch, s, msg, port),
                    Slot::Free => true,
                };
                if !ok {
                    return tx.sent;
                }
                ch.slot_mut(s).resend = false;
                tx.stats.retransmits += 1;
            }
            s = s.wrapping_add(1);
        }
        ch.resend_any = false;

        // 2. Control frames: barrier tokens, rejections.
        while ch.ctrl_len > 0 && ch.can_send_new() {
            let slot = ch.ctrl[0];
            let seq = ch.snd_nxt;
            let ok = match slot {
                Slot::Barrier { epoch, round } => tx.barrier(ch, seq, epoch, round),
                Slot::Reject { msg, port } => tx.reject(ch, seq, msg, port),
                _ => true,
            };
            if !ok {
                return tx.sent;
            }
            ch.push(slot);
            ch.ctrl.copy_within(1.., 0);
            ch.ctrl_len -= 1;
        }

        // 3. New data, in queue order.
        while ch.q_head != NONE {
            let oi = ch.q_head as usize;
            let o = &ops[oi];
            if o.reliable && !ch.can_send_new() {
                break;
            }
            let Some(body) = op_body(o, eager, ext) else {
                break;
            };
            let off = o.framed;
            let len = ((o.total - off) as usize).min(max_payload);
            let last = off as usize + len == o.total as usize;
            let pieces = o.pieces(body, off as usize, len);
            let seq = ch.snd_nxt;
            let reliable = o.reliable;
            if !tx.data(ch, o, seq, off, pieces, last, false) {
                break;
            }
            let op = &mut ops[oi];
            op.framed += len as u32;
            op.started = true;
            if reliable {
                ch.push(Slot::Data {
                    op: oi as u16,
                    offset: off,
                    len: len as u16,
                });
                op.unacked += 1;
            }
            if last {
                ch.q_head = op.next;
                if ch.q_head == NONE {
                    ch.q_tail = NONE;
                }
                if !reliable {
                    finish_op(ops, eager, oi, true);
                }
            }
        }

        // 4. A bare ack if none rode on data.
        if ch.ack_now {
            tx.ack(ch);
        }
        if ch.outstanding() > 0 && ch.rto_at.is_none() {
            ch.rto_at = Some(now + ch.rto);
        }
        tx.sent
    }

    /// Receives and processes frames, fires timers, advances the barrier and transmits.
    /// Returns true if anything happened.
    pub fn poll<D: Device>(&mut self, now: Instant, dev: &mut D, ext: Option<&[u8]>) -> bool {
        self.caps = dev.capabilities();
        let mut busy = false;
        // A bounded batch keeps transmission (and acks) flowing under a receive flood;
        // once a message has been delivered the caller gets control back at once (it
        // is probably waiting for it), without another look at the device.
        self.delivered = false;
        for _ in 0..256 {
            let Some(tok) = dev.receive(now) else { break };
            let src = tok.source();
            tok.consume(|f| self.handle_frame_from(now, f, src));
            busy = true;
            if self.delivered {
                break;
            }
        }
        self.handle_timeout(now);
        if core::mem::take(&mut self.timer_fired) {
            self.check_liveness(now, dev);
        }
        if self.bar.active {
            self.advance_barrier(now);
        }
        busy |= self.poll_transmit(now, dev, ext) > 0;
        if self.bar.active {
            self.advance_barrier(now);
        }
        busy
    }
}

/// The payload of an operation: borrowed, in an eager buffer, or the `ext` of `poll`
/// (`None` if that is missing or of the wrong length).
fn op_body<'b>(o: &'b Op<'_>, eager: &'b [EagerBuf], ext: Option<&'b [u8]>) -> Option<&'b [u8]> {
    let len = (o.total as usize).saturating_sub(o.head_len as usize);
    if let Some(b) = eager.get(o.eager as usize) {
        return b.data.get(..len);
    }
    if o.external {
        return ext.filter(|b| b.len() == len);
    }
    Some(o.body)
}

/// Frame emission for one channel.
struct Tx<'t, D> {
    dev: &'t mut D,
    now: Instant,
    caps: Capabilities,
    cfg: &'t Config,
    stats: &'t mut Stats,
    sent: usize,
}

impl<D: Device> Tx<'_, D> {
    fn emit(&mut self, ch: &mut Channel, mut repr: Repr, pieces: [&[u8]; 2]) -> bool {
        repr.ends.src_group = self.cfg.group;
        repr.ends.src_node = self.cfg.node;
        repr.ends.dst_group = ch.peer_group;
        repr.ends.dst_node = ch.peer_node;
        repr.job_key = self.cfg.job_key;
        repr.ack = Some(ch.ack_info(self.cfg.window.min(MAX_WINDOW as u16)));
        if ch.refusing {
            repr.flags |= Flags::REFUSED;
        }
        if ch.retry_now {
            repr.flags |= Flags::RETRY;
        }
        let skip_crc = self.caps.integrity;
        let key = self.cfg.auth_key.as_ref();
        let len = repr.buffer_len() + if key.is_some() { wire::TAG_LEN } else { 0 };
        let Some(tok) = self.dev.transmit(self.now, ch.peer) else {
            return false;
        };
        let ok = tok.consume(len, |buf| {
            repr.emit_frame(buf, &pieces, skip_crc, key).is_ok()
        });
        if !ok {
            return false;
        }
        ch.ack_now = false;
        ch.ack_at = None;
        ch.since_ack = 0;
        ch.refusing = false;
        ch.retry_now = false;
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += repr.payload_len as u64;
        self.sent += 1;
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn data(
        &mut self,
        ch: &mut Channel,
        o: &Op<'_>,
        seq: u32,
        offset: u32,
        pieces: [&[u8]; 2],
        last: bool,
        resend: bool,
    ) -> bool {
        let mut flags = Flags::empty();
        if o.reliable {
            flags |= Flags::RELIABLE;
            // Ask for an ack at message ends (so sends complete), on resends, and
            // before the window runs dry.
            let filling = ch.outstanding() + 1 >= (ch.peer_window as u32 * 3 / 4).max(1);
            // Nobody waits for an eager message's ack: let it ride on the reply.
            if (last && o.eager == NONE) || resend || filling {
                flags |= Flags::ACK_REQ;
            }
        }
        if last {
            flags |= Flags::LAST;
        }
        let payload_len = (pieces[0].len() + pieces[1].len()) as u16;
        let repr = Repr {
            kind: o.kind,
            flags,
            job_key: 0,
            ends: Endpoints {
                src_port: o.src_port,
                dst_port: o.dest.port,
                ..Endpoints::default()
            },
            seq: if o.reliable { seq } else { 0 },
            ack: None,
            msg_id: o.msg_id,
            offset,
            total_len: o.total,
            payload_len,
        };
        self.emit(ch, repr, pieces)
    }

    fn barrier(&mut self, ch: &mut Channel, seq: u32, epoch: u32, round: u32) -> bool {
        let repr = Repr {
            kind: Kind::Barrier,
            flags: Flags::RELIABLE | Flags::ACK_REQ,
            job_key: 0,
            ends: Endpoints {
                src_port: BARRIER_PORT,
                dst_port: BARRIER_PORT,
                ..Endpoints::default()
            },
            seq,
            ack: None,
            msg_id: epoch,
            offset: round,
            total_len: 0,
            payload_len: 0,
        };
        self.emit(ch, repr, [&[], &[]])
    }

    fn reject(&mut self, ch: &mut Channel, seq: u32, msg: u32, port: PortId) -> bool {
        let repr = Repr {
            kind: Kind::Control,
            flags: Flags::RELIABLE | Flags::ACK_REQ,
            job_key: 0,
            ends: Endpoints {
                src_port: 0,
                dst_port: port,
                ..Endpoints::default()
            },
            seq,
            ack: None,
            msg_id: msg,
            offset: CONTROL_REJECT,
            total_len: 0,
            payload_len: 0,
        };
        self.emit(ch, repr, [&[], &[]])
    }

    fn ack(&mut self, ch: &mut Channel) -> bool {
        let repr = Repr {
            kind: Kind::Ack,
            flags: Flags::empty(),
            job_key: 0,
            ends: Endpoints::default(),
            seq: 0,
            ack: None,
            msg_id: 0,
            offset: 0,
            total_len: 0,
            payload_len: 0,
        };
        let ok = self.emit(ch, repr, [&[], &[]]);
        if ok {
            self.stats.tx_acks += 1;
        }
        ok
    }
}

/// Re-exported so personalities need not name the wire module.
pub use wire::Kind as FrameKind;
