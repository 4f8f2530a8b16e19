//! The protocol engine: one instance per process (endpoint), sans-IO.
//!
//! # Calling contract
//!
//! The engine owns no device and reads no clock. The caller:
//! 1. calls [`Engine::poll`]`(now, &mut device, ext)` whenever it wants progress: it
//!    drains received frames (queuing notices and deliveries as messages complete, for
//!    the personality to take after the call), fires expired
//!    timers, advances the barrier, and transmits what the windows and credits allow;
//! 2. may sleep until [`Engine::poll_at`] (`None`: nothing to do until a frame comes);
//! 3. starts work with the non-blocking calls ([`Engine::start_send`],
//!    [`Engine::start_barrier`], ...) and observes it with the status calls.
//!
//! `poll` is [`Engine::handle_frame`] for each received frame, then
//! [`Engine::handle_timeout`], then [`Engine::poll_transmit`]; they may be called
//! separately in that order. Everything happens inside these calls; the engine calls no
//! personality code. The personality takes what they raised ([`Engine::next_notice`],
//! [`Engine::next_delivery`]) right after each, and runs its handlers then.
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
//! fragment offset; its port's owner is told (a [`Notice`]) when the whole message has
//! landed. A poll hands at most one message to ports, so the owner's handler runs
//! before the port's buffer takes the next. (A best-effort message reported lost
//! because a later one began may show the later one's first bytes by then: its
//! `FrameLost` is what counts.)

use managed::ManagedSlice;

use crate::phy::{BarrierMembers, BarrierPoll, Capabilities, Device, RxToken, TxToken};
use crate::time::{Duration, Instant};
use crate::wire::{self, AckInfo, Endpoints, Flags, Kind, Repr, WireError, HEADER_LEN};
use crate::{GroupId, NodeAddr, NodeId, PortId};

mod atomic;
mod barrier;
mod board;
mod channel;
mod fence;
mod mcast;
mod orphan;
mod packet;
mod port;
mod rma;
mod rx;
mod send;
mod stream;
#[cfg(test)]
mod tests;
mod timers;
mod tx;

pub use atomic::{FetchHandle, COUNTERS, FETCH_SLOTS};
use channel::{seq_lt, SeqCheck, Slot, NONE};
pub use channel::{Channel, MAX_WINDOW};
pub use mcast::{McastGroup, McastTables, Tree, MCAST_ALL};
pub use packet::{Delivery, PacketBuf, PacketId, Packets, PACKET_MAX};
pub use port::*;
use rma::RMA_NONE;
pub use rma::{Access, Memory, NoMemory, RmaFailure, GET_SLOTS, NO_BELL};
pub use timers::{beacon_frame, BEACON_LEN};

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
/// `offset` of a CONTROL frame that denies a put: its address is not exposed.
const CONTROL_DENY_PUT: u32 = 2;
/// `offset` of a CONTROL frame that denies a get request.
const CONTROL_DENY_GET: u32 = 3;
/// `offset` of a CONTROL frame from a broadcast's root: answer once you have its
/// broadcasts before number `msg_id` (see `fence`).
const CONTROL_FENCE: u32 = 4;
/// `offset` of a CONTROL frame answering a FENCE for broadcast `msg_id`.
const CONTROL_FENCE_OK: u32 = 5;
/// `offset` of a CONTROL frame saying the rest of message `msg_id` will not come
/// (see `orphan`).
const CONTROL_ABORT: u32 = 6;
/// `offset` of a CONTROL frame saying the sender is leaving the job on purpose
/// (see [`Engine::say_goodbye`]): not a death.
const CONTROL_BYE: u32 = 7;

/// Answers to late HELLOs an engine holds at once; more are dropped (their senders
/// ask again).
const HELLO_OUT: usize = 4;

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
    /// First retransmission timeout, and the least one: once round trips are
    /// measured the timeout is `srtt + 4 * rttvar` (RFC 6298), never below this.
    pub rto_initial: Duration,
    /// Ceiling of the exponential back-off.
    pub rto_max: Duration,
    /// How long a peer may stay silent (no frame of any kind) while we wait for it
    /// before it is declared dead and sends to it fail. Retransmissions and probes go
    /// out meanwhile; a debugger stop, swapping or a busy node shorter than this is
    /// survived. A device that knows a peer died (a dead process on shared memory)
    /// fails it at once.
    pub peer_timeout: Duration,
    /// How long a peer never heard from may stay silent, where that is longer than
    /// `peer_timeout`: a job's members do not start at once (nodes booting on a
    /// busy host, ranks that a launcher starts one by one), and one that has not
    /// spoken yet is more likely late than dead. `ZERO` (the default): no longer.
    pub first_contact: Duration,
    /// A rank waiting on a semaphore probes, this often, the silent peers its ports
    /// are bound to, so that a dead sender becomes an error instead of a hang.
    pub keepalive: Duration,
    /// Longest an ack may be held back hoping to ride on a data frame (lossy links).
    pub ack_delay: Duration,
    /// The same for a dissemination barrier token (never above half of
    /// `rto_initial`, the retransmission timer's floor): nobody waits for its ack,
    /// and in a dissemination barrier no frame goes back to the token's sender, so
    /// each ack is a frame of its own that a member sends while the next barrier
    /// runs. Held longer, one ack covers the tokens of several barriers.
    pub barrier_ack_delay: Duration,
    /// A best-effort message not completed within this time is reported lost.
    pub reassembly_timeout: Duration,
    /// A barrier waiting this long for a round's token probes the member it waits
    /// for (and again every such period): a dead one fails the barrier.
    pub barrier_probe: Duration,
    /// The job's authentication key: every frame sent carries a tag ([`wire::tag`]) under
    /// it, and a frame without a valid one is dropped before anything else looks at
    /// it (`rx_unauthenticated`). `None` on fabrics no other party can write to
    /// (shared memory private to the job's user).
    pub auth_key: Option<wire::AuthKey>,
    /// A reliable message to a port that is not bound for input is refused (the sender
    /// retries) for this long, then discarded; its sender's send fails with
    /// [`Error::PortClosed`]. Ports bound late (no barrier after setting up) still get
    /// their messages within it.
    pub unbound_grace: Duration,
    /// Barriers run in device memory where the device can ([`Device::barrier`]);
    /// `false` (the default) keeps the frame (dissemination) barrier. The device's
    /// barrier sends no token behind earlier frames, so a member arrives at it only
    /// once what it sent has been acknowledged (or is held back by its receiver's
    /// refusal): a message sent before the barrier has landed when anyone leaves
    /// it. Every member of a group must have the same setting.
    pub device_barrier: bool,
    /// The tree a reliable broadcast to this engine's own group travels down, each
    /// member forwarding it to its children from an eager buffer (`None`: the root
    /// sends every copy itself); one longer than [`EAGER_MAX`] is passed on chunk by
    /// chunk as it arrives. Roots with fewer eager buffers than the tree has levels
    /// send every copy themselves.
    /// Every member of a group must have the same setting.
    pub bcast_tree: Option<Tree>,
    /// Whether the frame that ends a one-sided exchange (a put's or a get reply's
    /// last, a fetch-and-add answer) is acknowledged in the poll that takes it even
    /// where its sender does not ask (it asks where a bell waits for the ack). `true`
    /// (the default): a process that takes it and then computes without calling in
    /// owes no ack, and its peer, hearing nothing, would otherwise take it for dead
    /// after `peer_timeout`. A host that speaks for its processes while they compute
    /// (a beacon: [`beacon_frame`], [`crate::phy::Device::peer_vouched`]) sets it
    /// `false`: the ack then rides on the next frame back (a ping-pong's answer, the
    /// next request) or follows within `ack_delay`, a frame less per operation.
    pub ack_exchange_ends: bool,
    /// Where the job's ranks met in a start-up exchange ([`crate::session`]) whose
    /// run key is `auth_key`: this rank's nonce and the hello key, so that the
    /// engine answers HELLOs that come late (a peer that lost the last one). `None`
    /// (the default): HELLOs are dropped as malformed.
    pub hello: Option<crate::session::HelloConfig>,
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
            first_contact: Duration::ZERO,
            keepalive: Duration::from_millis(500),
            ack_delay: Duration::from_micros(20),
            barrier_ack_delay: Duration::from_micros(200),
            reassembly_timeout: Duration::from_millis(100),
            barrier_probe: Duration::from_millis(50),
            unbound_grace: Duration::from_secs(10),
            auth_key: None,
            device_barrier: false,
            bcast_tree: Some(Tree::Binomial),
            ack_exchange_ends: true,
            hello: None,
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

/// A peer as [`Engine::peer_status`] sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStatus {
    /// A valid frame from it has arrived.
    pub heard_from: bool,
    /// It was declared dead: silent for `peer_timeout` once heard from, before
    /// that for `first_contact` where longer, or known dead by the device.
    pub failed: bool,
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
    /// Counter number outside the counters an endpoint serves.
    InvalidCounter,
    /// The address range is not memory its owner lets peers reach.
    BadAddress,
    /// The destination process has left the job (it said goodbye on its way out:
    /// [`Engine::say_goodbye`]); nothing sent to it can arrive.
    PeerLeft,
    /// Longer than the most this call takes, in bytes (a handler's send: 16 KiB;
    /// a packet: its size; an invocation: its limit).
    LongerThan(usize),
}

impl Error {
    /// The negative value a C facade returns; GAMMA's own numbers where GAMMA has one
    /// (a message the receiver discarded is a failed send to GAMMA).
    pub fn code(self) -> i32 {
        let n = match self {
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
            Error::InvalidCounter => "no such counter",
            Error::BadAddress => "address not in memory its owner exposes",
            Error::PeerLeft => "the destination process has left the job",
            Error::LongerThan(max) => {
                return write!(f, "longer than {max} bytes, the most this call takes");
            }
        })
    }
}

impl core::error::Error for Error {}

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
    /// Packet buffer holding the body ([`PacketId`] as raw), or `NONE`.
    packet: u16,
    /// Per-kind extra: a packet's multicast tree shape; a tree broadcast's shape
    /// (or [`mcast::FLAT`]).
    aux: u8,
    /// A reliable broadcast in our group: frames carry [`Flags::TREE`] with `root`,
    /// `aux` and `bseq`.
    tree: bool,
    /// Forwarded for another root: a failure is told to port `dest.port`.
    relay: bool,
    root: NodeId,
    bseq: u32,
    /// A forward of a long tree broadcast, sent from relay stream `stream` as its
    /// chunks arrive (see [`stream`]), or `NONE`.
    stream: u16,
    /// One-sided: the body is read from program memory at `local` as frames are
    /// built, and every frame starts with `prefix` (`wire::RMA_PREFIX` bytes).
    mem_src: bool,
    /// One-sided: the engine keeps the slot and rings `bell` when it is done.
    owned: bool,
    /// One-sided and finished: on the list `settle_rma` takes (`Bufs::rma_head`),
    /// followed by `settle_next`.
    listed: bool,
    settle_next: u16,
    local: u64,
    prefix: [u64; 2],
    bell: u64,
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
    /// A forward of a long broadcast whose upstream died (see `orphan`).
    fn cut(&self, bufs: &Bufs<'_>) -> bool {
        bufs.streams
            .get(self.stream as usize)
            .is_some_and(|s| s.cut)
    }

    /// A free slot.
    pub const EMPTY: Op<'static> = Op {
        state: OpState::Free,
        gen: 0,
        reliable: false,
        external: false,
        started: false,
        eager: NONE,
        packet: NONE,
        aux: 0,
        tree: false,
        relay: false,
        root: 0,
        bseq: 0,
        stream: NONE,
        mem_src: false,
        owned: false,
        listed: false,
        settle_next: NONE,
        local: 0,
        prefix: [0; 2],
        bell: 0,
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

    /// A long tree broadcast: no frame crosses a multiple of [`stream::CHUNK`],
    /// so that a relay keeps every frame in one buffer of its ring.
    fn chunked(&self) -> bool {
        self.tree && self.aux != mcast::FLAT && self.total as usize > EAGER_MAX
    }

    /// True if the op's channel has failed or its peer said goodbye.
    fn chan_gone(&self, chans: &[Channel]) -> bool {
        chans
            .get(self.chan as usize)
            .is_some_and(|c| c.failed || c.left)
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
    /// `RMA_NONE`, or a put / get reply written to `addr` (ring `bell` at the end).
    rma: u8,
    addr: u64,
    bell: u64,
    /// The get a reply belongs to.
    get: u16,
    /// A tree broadcast: its root (also in `src.src_node`), shape and sequence
    /// number, and the parent operation of its forwards, which holds the eager copy
    /// they are sent from (`NONE`: a leaf).
    tree: bool,
    shape: u8,
    bseq: u32,
    relay: u16,
    /// `relay`'s generation, and the relay stream a long one is copied into
    /// (`NONE`: a short one, forwarded whole from the eager copy).
    relay_gen: u16,
    stream: u16,
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
        rma: RMA_NONE,
        addr: 0,
        bell: 0,
        get: NONE,
        tree: false,
        shape: 0,
        bseq: 0,
        relay: NONE,
        relay_gen: 0,
        stream: NONE,
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
    /// Of those, whole messages taken by header prediction (`rx_predicted`): the
    /// next message of their channel in the commonest shape.
    pub rx_predicted: u64,
    /// Frames dropped for a bad CRC.
    pub rx_bad_crc: u64,
    /// Of those, frames under the compact header (`wire::compact`).
    pub rx_compact: u64,
    /// Frames sent under the compact header.
    pub tx_compact: u64,
    /// Handlers' sends that left at once when their handler returned
    /// ([`Engine::send_queued_at_once`]), not through a transmit pass.
    pub tx_queued_at_once: u64,
    /// Frames dropped for a missing or wrong authentication tag (with a job key),
    /// and compact frames from a device that does not vouch for them or in a job
    /// with a key.
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
    /// Peers that said goodbye ([`Engine::say_goodbye`]).
    pub peers_left: u64,
    /// Times a peer silent for the whole peer timeout was waited for again because
    /// the device had seen its process alive ([`crate::phy::Device::peer_vouched`]).
    pub peers_vouched: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Of those, barriers the device ran in its own memory (no frames).
    pub device_barriers: u64,
    /// Gets answered from our memory.
    pub rma_served: u64,
    /// Puts and gets whose address we refused (or that failed to copy).
    pub rma_denied: u64,
    /// Puts and get replies that landed in our memory.
    pub rma_landed: u64,
    /// Reliable broadcasts and multicast packets of other roots passed on to our
    /// children in the tree.
    pub forwarded: u64,
    /// Notices dropped because nobody took them (see [`Storage::notices`]).
    pub notices_dropped: u64,
    /// Our broadcasts written once into the device's board (not one frame a member).
    pub board_tx: u64,
    /// Of those, the ones written in the sending or launching call, with no copy
    /// or queue (nothing of ours waited before them).
    pub board_now: u64,
    /// Other roots' broadcasts taken from their boards.
    pub board_rx: u64,
    /// Flat broadcasts of ours that waited for every member to have our earlier
    /// ones (see `fence`).
    pub fences: u64,
    /// Messages whose sender died (or whose relay's upstream did) before the last
    /// of them came: handed to their port as lost (see `orphan`).
    pub rx_orphaned: u64,
    /// Copies of tree broadcasts sent to a dead member's children in its place.
    pub rerouted: u64,
    /// Fences we answered without the root's earlier broadcasts, because a relay
    /// above us in its tree died (see `orphan`).
    pub fences_given_up: u64,
    /// Late HELLOs answered ([`Config::hello`]).
    pub hellos_answered: u64,
    /// HELLOs dropped: bad tag, another job or rank, none expected, no room to answer.
    pub hellos_dropped: u64,
}

/// Tables an engine works in, from caller storage (`&mut [T]`) or, with `alloc`, a `Vec`.
#[derive(Debug)]
pub struct Storage<'a> {
    /// Ports (GAMMA: 1025).
    pub ports: ManagedSlice<'a, Port<'a>>,
    /// Notices for ports' owners, waiting to be taken: at least as many as
    /// operations + assemblies + 256 (what one call can raise: each operation fails
    /// once, each assembly is delivered once, a receive batch is 256 frames).
    pub notices: ManagedSlice<'a, Notice>,
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
    /// Packet pools (LFC; empty unless given).
    pub packets: Packets<'a>,
    /// Multicast groups (LFC; empty unless given).
    pub mcast: McastTables<'a>,
    /// Per member of our group: the sequence number of the next reliable broadcast
    /// expected from it (one entry per instance; broadcasts from instances beyond it
    /// are taken in arrival order).
    pub bcast_seq: ManagedSlice<'a, u32>,
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
impl Storage<'_> {
    /// Tables of the given sizes, allocated once here and never resized.
    pub fn with_capacity(c: Capacity) -> Self {
        use alloc::vec::Vec;
        let mut ports = Vec::with_capacity(c.ports);
        ports.resize_with(c.ports, || Port::EMPTY);
        let mut ops = Vec::with_capacity(c.ops);
        ops.resize_with(c.ops, || Op::EMPTY);
        Storage {
            ports: ports.into(),
            notices: alloc::vec![Notice::default(); c.ops + c.assemblies + 256].into(),
            sems: alloc::vec![Semaphore::default(); c.ports].into(),
            channels: alloc::vec![Channel::EMPTY; c.channels].into(),
            peer_map: alloc::vec![NONE; c.fabric_nodes].into(),
            ops: ops.into(),
            assemblies: alloc::vec![Assembly::EMPTY; c.assemblies].into(),
            eager: alloc::vec![EagerBuf::EMPTY; c.eager].into(),
            packets: Packets::default(),
            mcast: McastTables::default(),
            bcast_seq: alloc::vec![0; c.fabric_nodes].into(),
        }
    }

    /// Adds packet pools of `tx` send and `rx` receive packets, and room for
    /// `groups` multicast groups of up to `members` instances in all.
    pub fn with_packets(mut self, tx: usize, rx: usize, groups: usize, members: usize) -> Self {
        self.packets = Packets::with_capacity(tx, rx);
        self.mcast = McastTables::new(
            alloc::vec![McastGroup::EMPTY; groups].into(),
            alloc::vec![0; members].into(),
        );
        self
    }
}

/// Buffers the engine keeps payloads in: eager copies and packets.
#[derive(Debug)]
pub(crate) struct Bufs<'a> {
    pub(crate) eager: ManagedSlice<'a, EagerBuf>,
    pub(crate) pkts: Packets<'a>,
    /// One-sided operations finished since the last `settle_rma`.
    pub(crate) rma_done: u16,
    /// Those operations, oldest first (through `Op::settle_next`), or `NONE`:
    /// settling walks them instead of the whole operation table.
    pub(crate) rma_head: u16,
    pub(crate) rma_tail: u16,
    /// Long tree broadcasts being forwarded as they arrive.
    pub(crate) streams: [stream::Stream; stream::MAX_STREAMS],
    /// Streams whose forwards are on their channels (acks may free their chunks).
    pub(crate) queued_streams: u8,
    /// Eager buffers not in use: counted, since each one's flag lies in its own
    /// 16 KiB and a pool of hundreds would cost a cache miss per buffer to scan.
    pub(crate) eager_free: usize,
    /// Where the search for a free eager buffer starts.
    eager_hint: usize,
}

impl Bufs<'_> {
    /// Copies `data` into eager buffer `buf` at `at` (nothing if it does not fit).
    pub(crate) fn eager_write(&mut self, buf: u16, at: usize, data: &[u8]) {
        if let Some(dst) = self
            .eager
            .get_mut(buf as usize)
            .and_then(|b| b.data.get_mut(at..at + data.len()))
        {
            dst.copy_from_slice(data);
        }
    }

    /// Takes a free eager buffer, while at least `keep` more stay free, and copies
    /// `head` then `body` (together at most [`EAGER_MAX`] bytes) into it.
    pub(crate) fn eager_copy_parts(
        &mut self,
        head: &[u8],
        body: &[u8],
        keep: usize,
    ) -> Option<u16> {
        let len = head.len() + body.len();
        if self.eager_free <= keep || len > EAGER_MAX {
            return None;
        }
        let i = self.free_eager()?;
        let b = &mut self.eager[i];
        if !head.is_empty() {
            b.data[..head.len()].copy_from_slice(head);
        }
        b.data[head.len()..len].copy_from_slice(body);
        b.used = true;
        self.eager_free -= 1;
        Some(i as u16)
    }

    /// [`Bufs::eager_copy_parts`] of one piece.
    pub(crate) fn eager_copy(&mut self, data: &[u8], keep: usize) -> Option<u16> {
        self.eager_copy_parts(&[], data, keep)
    }

    /// A free eager buffer (not taken yet), searched from where the last was found.
    pub(crate) fn free_eager(&mut self) -> Option<usize> {
        let n = self.eager.len();
        if self.eager_free == 0 || n == 0 {
            return None;
        }
        // Usually the one after the last taken, or the last given back.
        let h = if self.eager_hint < n {
            self.eager_hint
        } else {
            0
        };
        let i = if !self.eager[h].used {
            h
        } else {
            (h + 1..n).chain(0..h).find(|&i| !self.eager[i].used)?
        };
        self.eager_hint = i + 1;
        Some(i)
    }

    /// Marks eager buffer `i` in use.
    pub(crate) fn take_eager(&mut self, i: u16) {
        if let Some(b) = self.eager.get_mut(i as usize).filter(|b| !b.used) {
            b.used = true;
            self.eager_free -= 1;
        }
    }

    /// Gives eager buffer `i` back (nothing for `NONE`).
    #[inline]
    pub(crate) fn give_eager(&mut self, i: u16) {
        if let Some(b) = self.eager.get_mut(i as usize) {
            self.eager_free += usize::from(b.used);
            b.used = false;
            // Taken next: its lines are warm.
            self.eager_hint = i as usize;
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
    /// This member's sends have landed: it may arrive at the device's barrier.
    drained: bool,
    /// The device answered that it runs no barrier: frames only, no drain.
    no_device: bool,
}

/// The protocol engine of one endpoint.
pub struct Engine<'a> {
    cfg: Config,
    groups: &'a [Group<'a>],
    size: u16,
    ports: ManagedSlice<'a, Port<'a>>,
    notices: Notices<'a>,
    sems: ManagedSlice<'a, Semaphore>,
    chans: ManagedSlice<'a, Channel>,
    peer_map: ManagedSlice<'a, u16>,
    ops: ManagedSlice<'a, Op<'a>>,
    asms: ManagedSlice<'a, Assembly>,
    bufs: Bufs<'a>,
    mcast: McastTables<'a>,
    /// See [`Storage::bcast_seq`].
    bcast_seq: ManagedSlice<'a, u32>,
    /// Our next reliable broadcast's sequence number.
    bcast_next: u32,
    /// Eager buffers the copy of a short broadcast down our tree must leave free.
    bcast_keep: usize,
    /// Broadcasts waiting to be written into the device's board, oldest first,
    /// linked through their ops' `next`.
    board_head: u16,
    board_tail: u16,
    /// A multicast packet of ours went down a tree: the later ones must too (see
    /// `packet_board_fits`).
    packet_tree_used: bool,
    /// Our broadcasts waiting for a fence, and fences we owe (see `fence`).
    gate: fence::Gate,
    /// When the senders of unfinished messages are next looked at (see `orphan`).
    orphan_check_at: Instant,
    /// A forward cut short may be ready to end (see `orphan`).
    cuts: bool,
    /// Answers to late HELLOs waiting to go ([`Config::hello`]): fabric address and
    /// frame; the first `hellos` are in use.
    hello_out: [(u16, [u8; crate::session::HELLO_LEN]); HELLO_OUT],
    hellos: u8,
    /// The time of the last poll: what a send that leaves at once gives a device
    /// that does not read it ([`Device::transmit_reads_time`]).
    polled_at: Instant,
    /// The short tags' hashes of the last header sent and received (`wire::TagCache`).
    tag_tx: wire::TagCache,
    tag_rx: wire::TagCache,
    stats: Stats,
    caps: Capabilities,
    /// Whether a poll has read `caps` from its device: once, as a device's
    /// capabilities stay as they were when the engine began to use it (reading them at
    /// every poll cost 10 to 25 instructions a poll, `engine_cost`, `shm_cost`).
    caps_read: bool,
    bar: BarrierState,
    rr: usize,
    /// Channels in use all sit below this index (they are allocated lowest first).
    chan_hwm: usize,
    /// Channels with [`Channel::unreported`] set.
    unreported: usize,
    /// Best-effort messages being stored (their timers need watching).
    be_asms: usize,
    /// One past the highest assembly slot ever taken: lookups scan no further (slots
    /// are taken lowest first, so this stays small).
    asm_hwm: usize,
    /// Channels owed a RETRY when a port frees up.
    owed_retries: usize,
    /// Where the search for a free operation slot starts.
    op_hint: usize,
    /// A retransmission timer fired since the last liveness check.
    timer_fired: bool,
    /// A message was handed to a port during the current poll.
    delivered: bool,
    /// A packet was stored for the program during the current poll (LFC's upcall),
    /// or a put's bell rung: the poll drains the rest and leaves its upkeep.
    stored: bool,
    /// The last poll delivered a message and left timers and transmission to the
    /// next one.
    upkeep_due: bool,
    /// Whether a channel may have something to send (a queued send, a control
    /// frame, an ack owed now, a resend): false only once a look at every channel
    /// (`sends_waiting`, `poll_transmit`) found none, until something gives one
    /// work; every place that does sets it (debug builds check). Spares those
    /// looks, one per delivered message and one per poll, their cost per open
    /// channel.
    chan_work: core::cell::Cell<bool>,
    /// No channel's retransmission or delayed-ack timer is due before this (an
    /// early bound, made exact by each look at the timers): until then a poll
    /// leaves the channels' timers alone.
    timer_at: Instant,
    /// Channels holding an ack to take at the next poll (`Channel::ack_due`).
    acks_due: u16,
    /// Sends handlers queued.
    outbox: Outbox,
    /// Counters served here and fetch-and-adds waiting for answers.
    atomics: atomic::Atomics,
    /// Gets waiting for data, one-sided failures.
    rma: rma::Rma,
}

impl core::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Marks a finished operation, folding children into their parent. A finished
/// top-level operation gives its eager buffer back, and frees its slot if detached.
fn finish_op(ops: &mut [Op<'_>], bufs: &mut Bufs<'_>, i: usize, ok: bool) {
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
    bufs.give_eager(op.eager);
    op.eager = NONE;
    if op.stream != NONE {
        stream::free(bufs, op.stream);
        op.stream = NONE;
    }
    if op.packet != NONE {
        bufs.pkts.release_net(op.packet);
        op.packet = NONE;
    }
    if op.owned {
        bufs.rma_done = bufs.rma_done.saturating_add(1);
        if !op.listed {
            op.listed = true;
            op.settle_next = NONE;
            match ops.get_mut(bufs.rma_tail as usize) {
                Some(last) => last.settle_next = top as u16,
                None => bufs.rma_head = top as u16,
            }
            bufs.rma_tail = top as u16;
        }
    } else if op.detached {
        op.state = OpState::Free;
    }
}

impl<'a> Engine<'a> {
    /// An engine for `cfg.node` of group `cfg.group`, talking to the groups in `groups`.
    pub fn new(cfg: Config, groups: &'a [Group<'a>], storage: Storage<'a>) -> Result<Self, Error> {
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
        let size = g.members.len();
        let eager_free = storage.eager.iter().filter(|b| !b.used).count();
        // A short broadcast's copy at its root leaves a unit of buffers for each
        // level of relays below it (see `start`).
        let pool = storage.eager.len();
        let bcast_keep = cfg
            .bcast_tree
            .map(|t| t.height(0, size as usize))
            .filter(|&levels| levels <= pool)
            .map_or(0, |levels| {
                stream::relay_unit(pool, levels) * (levels.max(1) - 1)
            });
        Ok(Engine {
            size,
            bcast_keep,
            cfg,
            groups,
            ports: storage.ports,
            notices: Notices::new(storage.notices),
            sems: storage.sems,
            chans: storage.channels,
            peer_map: storage.peer_map,
            ops: storage.ops,
            asms: storage.assemblies,
            bufs: Bufs {
                eager: storage.eager,
                pkts: storage.packets,
                rma_done: 0,
                rma_head: NONE,
                rma_tail: NONE,
                streams: [stream::Stream::EMPTY; stream::MAX_STREAMS],
                queued_streams: 0,
                eager_free,
                eager_hint: 0,
            },
            mcast: storage.mcast,
            bcast_seq: storage.bcast_seq,
            bcast_next: 0,
            board_head: NONE,
            board_tail: NONE,
            packet_tree_used: false,
            gate: fence::Gate::default(),
            orphan_check_at: Instant::ZERO,
            cuts: false,
            hello_out: [(0, [0; crate::session::HELLO_LEN]); HELLO_OUT],
            hellos: 0,
            polled_at: Instant::ZERO,
            tag_tx: wire::TagCache::default(),
            tag_rx: wire::TagCache::default(),
            stats: Stats::default(),
            caps: Capabilities::new(1500, false, false),
            caps_read: false,
            bar: BarrierState::default(),
            rr: 0,
            chan_hwm: 0,
            unreported: 0,
            be_asms: 0,
            asm_hwm: 0,
            owed_retries: 0,
            op_hint: 0,
            timer_fired: false,
            delivered: false,
            stored: false,
            upkeep_due: false,
            chan_work: core::cell::Cell::new(true),
            timer_at: Instant::ZERO,
            acks_due: 0,
            outbox: Outbox::default(),
            atomics: atomic::Atomics::default(),
            rma: rma::Rma::default(),
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
    /// What this engine knows of member `node` of its own group: whether it was
    /// ever heard from, and whether it has been given up (sends to it fail). Both
    /// false for a member nothing was exchanged with, or one out of range.
    pub fn peer_status(&self, node: NodeId) -> PeerStatus {
        let group = self.cfg.group;
        self.addr_of(group, node)
            .ok()
            .and_then(|a| self.peer_map.get(a.0 as usize).copied())
            .and_then(|ci| self.chans.get(ci as usize))
            .filter(|c| c.in_use && c.peer_group == group && c.peer_node == node)
            .map_or(PeerStatus::default(), |c| PeerStatus {
                heard_from: c.met,
                failed: c.failed,
            })
    }
    /// Eager buffers free now (none held by a send, a copy or a relay).
    pub fn eager_free(&self) -> usize {
        self.bufs.eager_free
    }
    /// Sets every counter to zero.
    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
    }
    /// Instances in this process's group.
    pub fn size(&self) -> u16 {
        self.size
    }
    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }
    /// Number of semaphores.
    pub fn sem_count(&self) -> usize {
        self.sems.len()
    }

    #[inline]
    fn group(&self, id: GroupId) -> Option<&Group<'a>> {
        self.groups.iter().find(|g| g.id == id)
    }

    #[inline]
    fn addr_of(&self, group: GroupId, node: NodeId) -> Result<NodeAddr, Error> {
        let g = self.group(group).ok_or(Error::UnknownGroup)?;
        g.members.addr(node).ok_or(Error::UnknownNode)
    }

    /// Receives and processes frames, fires timers, advances the barrier and transmits.
    /// Returns true if anything happened.
    pub fn poll<D: Device>(&mut self, now: Instant, dev: &mut D, ext: Option<&[u8]>) -> bool {
        self.poll_mem(now, dev, ext, &mut NoMemory)
    }

    /// [`Engine::poll`] for an endpoint that serves one-sided operations: peers'
    /// puts and gets reach program memory through `mem`, and the bells of finished
    /// operations are rung through it.
    pub fn poll_mem<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
        mem: &mut dyn Memory,
    ) -> bool {
        if !self.caps_read {
            self.caps = dev.capabilities();
            self.caps_read = true;
        }
        self.polled_at = now;
        self.take_due_acks(now);
        let mut busy = false;
        // A bounded batch keeps transmission (and acks) flowing under a receive flood;
        // once a message has been delivered the caller gets control back at once (it
        // is probably waiting for it), without another look at the device.
        self.delivered = false;
        self.stored = false;
        for _ in 0..256 {
            let Some(tok) = dev.receive(now) else { break };
            let src = tok.source();
            tok.consume_parts(|f, body| {
                if body.is_empty() {
                    if f.first() == Some(&wire::COMPACT_MAGIC) {
                        self.rx_compact(now, f, src, mem)
                    } else if !self.rx_predicted(now, f, src) {
                        self.rx_general(now, f, src, mem)
                    }
                } else {
                    self.handle_split_frame(now, f, body, src, mem)
                }
            });
            busy = true;
            if self.delivered {
                break;
            }
        }
        if !self.delivered {
            busy |= dev.board_receive(now, &mut |from, f| self.rx_board(now, from, f));
        }
        // (`busy` first: an empty poll decides on one register.)
        if busy && (self.delivered || self.stored) && self.upkeep_can_wait() {
            // Timers, acks that may wait and transmission come at the next poll,
            // after this message's handler (or the packet's upcall) and the reply
            // it probably sends, rather than before them.
            self.upkeep_due = true;
            return busy;
        }
        self.upkeep_due = false;
        self.handle_timeout_vouched(now, &mut |peer| dev.peer_vouched(now, peer));
        if core::mem::take(&mut self.timer_fired) {
            self.check_liveness(now, dev);
        }
        if self.bar.active {
            self.advance_barrier(now, dev);
        }
        busy |= self.poll_transmit_mem(now, dev, ext, mem) > 0;
        if self.bar.active {
            self.advance_barrier(now, dev);
        }
        self.settle_rma(mem);
        if !busy && self.cfg.auth_key.is_some() {
            // Nothing to do: hash ahead the headers of the frames most likely to
            // come and go next, so that their tags cost less when they do.
            self.tag_rx.prepare();
            self.tag_tx.prepare();
        }
        busy
    }

    /// A whole frame that header prediction did not take: out of line and cold, so
    /// that the predicted path keeps its registers (`rx_compact_general` likewise).
    #[cold]
    #[inline(never)]
    fn rx_general(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        self.handle_frame_mem(now, frame, source, mem)
    }

    /// Whether a poll that delivered may leave its upkeep to the next poll:
    /// nothing received in it is to go out at once (an ack asked for, a RETRY,
    /// forwards down a tree, a fence's answer, a relayed stream's next frames, a
    /// handler's send), no barrier runs, no one-sided operation has finished, and
    /// the poll before did not leave its own. Timers and delayed acks can wait.
    fn upkeep_can_wait(&self) -> bool {
        !self.upkeep_due && self.bufs.rma_done == 0 && !self.sends_waiting()
    }
}

/// Re-exported so personalities need not name the wire module.
pub use wire::Kind as FrameKind;

/// `dst.copy_from_slice(src)` that moves up to 16 bytes inline, in two overlapping
/// moves: most active messages are a few words, and a call to `memcpy` for them
/// cost more than their delivery's other stores (`engine_cost`).
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() != n || n > 16 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<8>(), src.first_chunk::<8>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<8>(), src.last_chunk::<8>()) {
            *d = *s;
        }
    } else if n >= 4 {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<4>(), src.first_chunk::<4>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<4>(), src.last_chunk::<4>()) {
            *d = *s;
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}
