//! The QNIX personality (A. De Vivo's communication system for the QNIX system area
//! network), in Rust: processes named by (application, process), send and receive
//! contexts with tags, a command queue consumed by the "NIC", doorbells, short and
//! long sends, broadcast and multicast, groups and barriers.
//!
//! - **Names.** A process is `(AI, PI)`: application id and process id. [`Qnix::init`]
//!   registers the name with every endpoint of the fabric and returns once all
//!   `group_size` processes of the application have registered. Several
//!   applications may share a fabric; a process only reaches processes of its own
//!   application ([`QxError::OtherApplication`] for a registered process of another;
//!   a name nobody registered is [`QxError::Unknown`]), and frames that claim
//!   otherwise are dropped at the receiver.
//! - **Contexts.** [`Qnix::send_context`] and [`Qnix::recv_context`] fill the first
//!   free entry of the send or receive context list ([`CONTEXTS`] each) and return
//!   its index. The data of a context is its [`Region`]: pages of the buffer pool,
//!   a list of memory segments (what a page table resolves to), or bytes copied into
//!   the context region (short messages, at most [`SHORT_MAX`]).
//! - **Commands.** `send`, `send_short`, `broadcast(_short)`, `multicast(_short)`,
//!   `receive`, `join_group` and `barrier` check their arguments, post a command in
//!   the process's command queue ([`QUEUE`] entries) and return; the NIC step
//!   ([`Qnix::step`], run by the waiting calls and by the simulator's poll; a
//!   posting call runs its transmit half) consumes the queue, packetises sends
//!   straight out of program memory, matches arriving messages to posted receives
//!   by (sender, tag) in posting order and writes them straight into the receive
//!   region. A message that arrives before its receive is
//!   posted is kept (at most [`UNEXPECTED_MAX`] bytes; beyond that the NIC stops
//!   taking packets and the senders are held back at the wire: nothing is lost).
//! - **Doorbells.** Each context has one, an `i32`: [`FREE`], [`BUSY`] once a
//!   command is posted, [`DONE`] when it completes (a send: its buffer may be
//!   reused; a receive: the data is in place), or a negative [`QxError`] code.
//!   `poll_for_send`/`poll_for_receive` wait for it, set it back to free and free
//!   the context. A context whose doorbell flag is off is freed when its operation
//!   completes.
//! - **Groups.** The application is the group named by its AI. `join_group` forms a
//!   new group of the application once `group_size` members have joined it;
//!   `barrier` is a dissemination barrier over a group's members in PI order,
//!   except on the application's group when the application is the whole fabric:
//!   that one is the engine's barrier (in NIC memory on the Myrinet-like model);
//!   `broadcast` sends to every member but the sender, `multicast` to a list;
//!   in a whole-fabric application one goes once, in each sender's order: written
//!   on the sender's board in NIC memory when it fits one packet, or down the
//!   engine's binomial tree, in as many packets as it takes, where the device has
//!   no board and it is shorter than [`RENDEZVOUS_MIN`] (see `Qnix::goes_once`).
//! - **Long sends go by rendezvous.** A `send` (and a `broadcast` or `multicast`,
//!   to each member) of at least [`RENDEZVOUS_MIN`] bytes from one contiguous
//!   range asks the receiver first. A
//!   receive already posted there as one range is granted: the NIC writes the data
//!   straight into it as one put (frames as large as the fabric allows, no packet
//!   copies). The receive completes when the last byte lands, the send when the
//!   receiver has acknowledged them all. Otherwise the receiver asks for packets: to
//!   a receive that is not one range, or, with no receive posted yet, kept in the
//!   request's place among the early messages, so a send never waits for a receive.
//!   Peers may write only into ranges granted this way, and only while the grant
//!   lasts.
//! - **Dead peers** become errors: a send to, a receive from, or a barrier with a
//!   process that stops answering completes with [`QxError::Dead`].

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::engine::{
    Access, Capacity, Config, Delivery, Engine, Error, Group, Memory, RmaFailure, Storage, Tree,
    MCAST_ALL,
};
use crate::phy::Device;
use crate::time::{Clock, Duration, Instant};
use crate::NodeId;

/// Entries in each of the send and receive context lists.
pub const CONTEXTS: usize = 64;
// One bit a context in `Qnix::changed`.
const _: () = assert!(CONTEXTS <= 64);
/// Entries in the command queue.
pub const QUEUE: usize = 64;
/// Longest short message (it is copied into the context region).
pub const SHORT_MAX: usize = 4096;
/// Page size of the buffer pool and of page tables.
pub const PAGE: usize = 4096;
/// Largest buffer pool (the seed: 8 MB).
pub const POOL_MAX: usize = 8 << 20;
/// Longest buffer one page table describes (the seed: 2 MB).
pub const TRANSLATE_MAX: usize = 2 << 20;
/// Longest message.
pub const MESSAGE_MAX: usize = POOL_MAX;
/// Bytes of early messages kept while no receive matches them.
pub const UNEXPECTED_MAX: usize = 64 << 20;
/// Posting calls in a row that run only the transmit half of the NIC step; the
/// next runs all of it.
const POSTS_PER_STEP: u32 = 8;
/// Shortest unicast `send` that goes by rendezvous (a put into the granted receive
/// region) rather than as packets.
pub const RENDEZVOUS_MIN: usize = 16 * 1024;

/// Doorbell: the context has no operation.
pub const FREE: i32 = 0;
/// Doorbell: the operation is posted and not finished.
pub const BUSY: i32 = 1;
/// Doorbell: the operation completed.
pub const DONE: i32 = 2;

/// Bytes in front of a message's first packet and of every control packet:
/// kind (u8), the sender's count of board broadcasts so far (big-endian u16, see
/// [`Qnix::goes_once`]), a reserved byte, then three big-endian 32-bit fields.
const HEAD: usize = 16;
const K_MSG: u8 = 1;
const K_REG: u8 = 2;
const K_JOIN: u8 = 3;
const K_BAR: u8 = 4;
/// Rendezvous: request to send (tag, send context, length).
const K_RTS: u8 = 5;
/// Rendezvous: clear to send (send context, receive context, granted length), then
/// the granted address (u64; 0: send it as packets with `K_MSG_TO`).
const K_CTS: u8 = 6;
/// Rendezvous: the put failed (receive context); the receive fails.
const K_FIN: u8 = 7;
/// A message for receive context `b` of the receiver, matched there already.
const K_MSG_TO: u8 = 8;
/// The next part of a tree broadcast longer than its first packet, from byte `c`
/// of the message (see [`Qnix::goes_once`]).
const K_MORE: u8 = 9;

/// Bells the engine rings for rendezvous puts are these pseudo-addresses, never
/// memory (non-canonical on x86_64, unmapped elsewhere): the [`Gate`] takes them.
const TOKEN_BASE: u64 = 0xFFFF_F000_0000_0000;

fn token(side: usize, ctx: usize) -> u64 {
    TOKEN_BASE + ((side * CONTEXTS + ctx) as u64) * 4
}

fn untoken(t: u64) -> Option<(usize, usize)> {
    let i = t.checked_sub(TOKEN_BASE)?;
    if i % 4 != 0 || i / 4 >= (2 * CONTEXTS) as u64 {
        return None;
    }
    let i = (i / 4) as usize;
    Some((i / CONTEXTS, i % CONTEXTS))
}

/// Why a QNIX call or operation failed. The seed defines only "a negative number";
/// these are Volley's, one per cause, with [`QxError::code`] the number returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QxError {
    /// An argument is out of range or contradicts another.
    Invalid = -1,
    /// No free context, or the index names no context in use.
    NoContext = -2,
    /// The context already has an operation posted.
    Busy = -3,
    /// No registered process or formed group has that name.
    Unknown = -4,
    /// The process belongs to another application.
    OtherApplication = -5,
    /// The length exceeds what the operation allows.
    TooLong = -6,
    /// Physical addresses are not available on this platform or to this user.
    NoPhysical = -7,
    /// The memory is not mapped, not locked and translated, or not writable.
    Fault = -8,
    /// Memory could not be allocated or locked.
    NoMemory = -9,
    /// The peer stopped answering.
    Dead = -10,
    /// The message was longer than the receive buffer (the buffer holds its start).
    Truncated = -11,
    /// Registration did not complete in time.
    TimedOut = -12,
    /// `qx_init` has not succeeded, or `qx_end` was called.
    NotInitialized = -13,
    /// The name, group or buffer pool exists already.
    Exists = -14,
    /// A group size disagrees with the group's.
    Size = -15,
    /// The context was set up without a doorbell.
    NoDoorbell = -16,
    /// The network failed in a way not listed here.
    Network = -17,
}

impl QxError {
    /// How many errors there are: their codes are `-1..=-COUNT`.
    pub const COUNT: usize = 17;
    const ALL: [QxError; Self::COUNT] = [
        QxError::Invalid,
        QxError::NoContext,
        QxError::Busy,
        QxError::Unknown,
        QxError::OtherApplication,
        QxError::TooLong,
        QxError::NoPhysical,
        QxError::Fault,
        QxError::NoMemory,
        QxError::Dead,
        QxError::Truncated,
        QxError::TimedOut,
        QxError::NotInitialized,
        QxError::Exists,
        QxError::Size,
        QxError::NoDoorbell,
        QxError::Network,
    ];

    /// The negative number the C API returns.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The error a negative number stands for.
    pub fn from_code(code: i32) -> Option<QxError> {
        Self::ALL.iter().copied().find(|e| e.code() == code)
    }

    /// One line saying what went wrong.
    pub fn message(self) -> &'static str {
        match self {
            QxError::Invalid => "invalid argument",
            QxError::NoContext => "no such context (or none free)",
            QxError::Busy => "the context has an operation posted",
            QxError::Unknown => "no registered process or formed group by that name",
            QxError::OtherApplication => "the process belongs to another application",
            QxError::TooLong => "length above the operation's limit",
            QxError::NoPhysical => "physical addresses are not available here",
            QxError::Fault => "memory not mapped, not translated or not writable",
            QxError::NoMemory => "memory could not be allocated or locked",
            QxError::Dead => "the peer stopped answering",
            QxError::Truncated => "message longer than the receive buffer",
            QxError::TimedOut => "registration did not complete in time",
            QxError::NotInitialized => "qx_init has not succeeded (or qx_end was called)",
            QxError::Exists => "already registered or created",
            QxError::Size => "group size disagrees with the group's",
            QxError::NoDoorbell => "the context has no doorbell",
            QxError::Network => "network failure",
        }
    }
}

impl core::fmt::Display for QxError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.message())
    }
}

impl From<Error> for QxError {
    fn from(e: Error) -> Self {
        match e {
            Error::SendFailure => QxError::Dead,
            Error::BadAddress => QxError::Fault,
            Error::MessageTooLong | Error::LongerThan(_) => QxError::TooLong,
            Error::UnknownNode | Error::UnknownGroup => QxError::Unknown,
            Error::BadConfig => QxError::Invalid,
            Error::Timeout => QxError::TimedOut,
            _ => QxError::Network,
        }
    }
}

/// A process name: (application id, process id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Name {
    /// Application id (AI).
    pub ai: i32,
    /// Process id within the application (PI), `0..group_size`.
    pub pi: i32,
}

impl Name {
    /// `(ai, pi)`.
    pub const fn new(ai: i32, pi: i32) -> Self {
        Name { ai, pi }
    }
}

/// Where a context's data is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Region {
    /// Not given yet (a C facade resolves the context region when the command is posted).
    #[default]
    None,
    /// The buffer pool, from this page on.
    Pool(usize),
    /// Memory segments `(address, length)` in order (a resolved page table).
    Segments(Vec<(u64, usize)>),
    /// Bytes copied into the context region.
    Data(Vec<u8>),
}

/// Which context list: send or receive.
const SEND: usize = 0;
const RECV: usize = 1;

/// A send or receive context.
#[derive(Debug, Default)]
struct Ctx {
    used: bool,
    /// The receiver of a send, the sender of a receive.
    peer: Name,
    tag: i32,
    doorbell: bool,
    len: usize,
    region: Region,
    /// A posted receive's region, resolved.
    segs: Vec<(u64, usize)>,
    /// Bytes received by the last completed receive.
    got: usize,
}

#[derive(Debug)]
enum Command {
    Send {
        ctx: usize,
        to: Vec<NodeId>,
        data: TxData,
        /// A broadcast or multicast (which may go through the board).
        fan: bool,
    },
    Receive {
        ctx: usize,
    },
    Join {
        ctx: usize,
        group: i32,
        size: i32,
    },
    Barrier {
        ctx: usize,
        group: usize,
    },
}

#[derive(Debug)]
enum TxData {
    Owned(Vec<u8>),
    Segments(Vec<(u64, usize)>),
}

impl TxData {
    /// Copies the message's bytes from `off` into `out`; `false`, with `out`
    /// zeroed (the receiver still gets every byte it was told of), where program
    /// memory refused them.
    fn read_into<M: Memory>(&self, mem: &mut M, off: usize, out: &mut [u8]) -> bool {
        let ok = match self {
            TxData::Owned(v) => match v.get(off..off + out.len()) {
                Some(b) => {
                    out.copy_from_slice(b);
                    true
                }
                None => false,
            },
            TxData::Segments(s) => read_at(mem, s, off, out).is_ok(),
        };
        if !ok {
            out.fill(0);
        }
        ok
    }
}

/// Buffers kept for reuse, so that a send or receive in the steady state
/// allocates nothing: destination lists, short messages' copies, resolved regions.
/// At most [`SPARES`] of each kind are kept, none over [`SHORT_MAX`] bytes.
#[derive(Debug, Default)]
struct Spares {
    nodes: Vec<Vec<NodeId>>,
    bytes: Vec<Vec<u8>>,
    segs: Vec<Vec<(u64, usize)>>,
}

/// Spare buffers kept of each kind: enough for the sends and receives one NIC
/// step finishes.
const SPARES: usize = 64;

/// An empty buffer from `pool`, or a new one.
fn take_spare<T>(pool: &mut Vec<Vec<T>>) -> Vec<T> {
    pool.pop().unwrap_or_default()
}

/// Keeps `v` (emptied) in `pool` if it has room and `v` holds memory, but not
/// more than a short message's worth (a long message's copy is given back).
fn give_spare<T>(pool: &mut Vec<Vec<T>>, mut v: Vec<T>) {
    let bytes = v.capacity() * core::mem::size_of::<T>();
    if (1..=SHORT_MAX).contains(&bytes) && pool.len() < SPARES {
        v.clear();
        pool.push(v);
    }
}

impl Spares {
    fn nodes(&mut self) -> Vec<NodeId> {
        take_spare(&mut self.nodes)
    }
    fn bytes(&mut self) -> Vec<u8> {
        take_spare(&mut self.bytes)
    }
    fn segs(&mut self) -> Vec<(u64, usize)> {
        take_spare(&mut self.segs)
    }
    fn give_bytes(&mut self, v: Vec<u8>) {
        give_spare(&mut self.bytes, v)
    }
    fn give_segs(&mut self, v: Vec<(u64, usize)>) {
        give_spare(&mut self.segs, v)
    }
    /// A context region's buffer (a short send's copy, a page table) is kept.
    fn give_region(&mut self, r: Region) {
        match r {
            Region::Data(v) => self.give_bytes(v),
            Region::Segments(v) => self.give_segs(v),
            Region::None | Region::Pool(_) => {}
        }
    }
    fn give_job(&mut self, job: TxJob) {
        give_spare(&mut self.nodes, job.dests);
        match job.data {
            TxData::Owned(b) => self.give_bytes(b),
            TxData::Segments(s) => self.give_segs(s),
        }
    }
}

/// One message (or control packet) on its way out, to one destination after another.
#[derive(Debug)]
struct TxJob {
    dests: Vec<NodeId>,
    /// A message to every other process, sent once (see [`Qnix::goes_once`]).
    board: bool,
    at: usize,
    off: usize,
    started: bool,
    head: [u8; HEAD],
    len: usize,
    data: TxData,
    ctx: Option<usize>,
    failed: Option<QxError>,
}

#[derive(Debug, Default)]
enum Target {
    #[default]
    Discard,
    Direct(usize),
    Buffer(Vec<u8>),
    /// The data of a rendezvous request kept early (the sender's context).
    Early(i32, Vec<u8>),
    /// A message its sender sent after a board broadcast not taken here yet (the
    /// count of those before it): kept until that broadcast is taken.
    Parked(u16, Vec<u8>),
}

/// What a sender sent after a board broadcast that has not been taken here yet.
#[derive(Debug)]
struct Parked {
    /// The sender's board broadcasts before it.
    bc: u16,
    item: ParkedItem,
}

#[derive(Debug)]
enum ParkedItem {
    Msg { tag: i32, data: Vec<u8> },
    Rts { a: i32, b: i32, c: u32 },
}

/// A board broadcast taken before the packets its sender sent here ahead of it.
#[derive(Debug)]
struct Board {
    /// Packets from its sender to take first (a wrapping count).
    after: u32,
    /// This process is one it is for (others only count it).
    for_me: bool,
    tag: i32,
    /// The message's length (`data` holds all of it once every packet is in).
    len: usize,
    data: Vec<u8>,
}

/// Whether board-broadcast count `a` is past `b` (counts wrap).
fn ahead(a: u16, b: u16) -> bool {
    (a.wrapping_sub(b) as i16) > 0
}

/// A message arriving from one source.
#[derive(Debug, Default)]
struct RxPartial {
    active: bool,
    tag: i32,
    len: usize,
    got: usize,
    /// A write into the receive region failed.
    fault: bool,
    target: Target,
}

#[derive(Debug)]
struct Unexpected {
    src: NodeId,
    tag: i32,
    data: Vec<u8>,
    /// A rendezvous request (the sender's context, the length) that no receive
    /// matched: its data follows as packets and takes this place in the order.
    rts: Option<(i32, usize)>,
}

/// A receive granted to a rendezvous: peers' puts may land in `[addr, addr + len)`.
#[derive(Debug, Clone, Copy)]
struct Armed {
    ctx: usize,
    src: NodeId,
    addr: u64,
    len: usize,
    /// The message's whole length (longer than `len`: truncated).
    total: usize,
}

/// A send going by rendezvous.
#[derive(Debug, Clone, Copy)]
struct Rndv {
    ctx: usize,
    dest: NodeId,
    tag: i32,
    addr: u64,
    len: usize,
    state: RndvState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RndvState {
    /// The request is out; no grant yet.
    Asked,
    /// Granted: put `len` bytes at `addr` of receive context `rctx`.
    Granted { rctx: usize, addr: u64, len: usize },
    /// The put is in flight.
    Putting { rctx: usize },
}

/// Program memory as the engine sees it in a QNIX process: the process's own
/// operations reach all of it, peers only the ranges granted to rendezvous, and
/// the rendezvous bells are noted instead of rung.
struct Gate<'m, M> {
    mem: &'m mut M,
    armed: &'m [Armed],
    rung: &'m mut Vec<u64>,
}

impl<M: Memory> Memory for Gate<'_, M> {
    fn check(&mut self, addr: u64, len: u64, access: Access) -> Result<(), Error> {
        if untoken(addr).is_some() {
            // A peer may ring the bell of a receive granted to a rendezvous only.
            return match untoken(addr) {
                Some((RECV, c)) if access == Access::PeerWrite && len == 4 => {
                    if self.armed.iter().any(|a| a.ctx == c) {
                        Ok(())
                    } else {
                        Err(Error::BadAddress)
                    }
                }
                _ => Err(Error::BadAddress),
            };
        }
        match access {
            Access::PeerRead => Err(Error::BadAddress),
            Access::PeerWrite => {
                let inside = self.armed.iter().any(|a| {
                    addr >= a.addr
                        && addr
                            .checked_add(len)
                            .is_some_and(|end| end <= a.addr + a.len as u64)
                });
                if inside {
                    self.mem.check(addr, len, Access::Write)
                } else {
                    Err(Error::BadAddress)
                }
            }
            _ => self.mem.check(addr, len, access),
        }
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.mem.write(addr, data)
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        self.mem.read(addr, out)
    }
    fn ring(&mut self, bell: u64) {
        if untoken(bell).is_some() && self.rung.len() < 4 * CONTEXTS {
            self.rung.push(bell);
        }
    }
}

/// `segs` as one range, if they are adjacent.
fn contiguous(segs: &[(u64, usize)]) -> Option<(u64, usize)> {
    let (&(first, _), _) = segs.split_first()?;
    let mut end = first;
    for &(a, n) in segs {
        if a != end {
            return None;
        }
        end = a.checked_add(n as u64)?;
    }
    Some((first, (end - first) as usize))
}

#[derive(Debug, Default)]
struct GroupState {
    name: i32,
    /// Declared size (from the first join seen).
    size: Option<i32>,
    /// Members as (PI, endpoint), in PI order.
    members: Vec<(i32, NodeId)>,
    bad: bool,
    /// Barrier tokens received, per round.
    tokens: Vec<u32>,
    /// Barriers this process has started on the group.
    epoch: u32,
    barrier_active: bool,
}

impl GroupState {
    fn formed(&self) -> bool {
        !self.bad && self.size == Some(self.members.len() as i32)
    }
}

#[derive(Debug)]
struct BarrierOp {
    ctx: usize,
    group: usize,
    epoch: u32,
    round: u32,
    /// A token for `round` is queued; for a barrier on the engine: it is started.
    sent: bool,
    /// Run as the engine's barrier (see [`Qnix::barrier`]).
    on_engine: bool,
}

/// Counters of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QnixStats {
    /// Commands consumed by the NIC step.
    pub commands: u64,
    /// Messages sent (one per destination).
    pub messages_sent: u64,
    /// Messages received into a posted receive.
    pub messages_received: u64,
    /// Messages that arrived before their receive was posted.
    pub unexpected: u64,
    /// Messages dropped: unknown sender or another application.
    pub dropped: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Of those, barriers of the application's group run as the engine's barrier
    /// (in NIC memory on the Myrinet-like model).
    pub engine_barriers: u64,
    /// Messages sent by rendezvous (a put into the receiver's granted region).
    pub rendezvous: u64,
    /// Broadcasts and multicasts written once on this process's board in NIC
    /// memory rather than sent to each member.
    pub board_broadcasts: u64,
    /// Messages kept back because they overtook their sender's board broadcast.
    pub parked: u64,
    /// Board broadcasts read before packets their sender sent here ahead of them
    /// (kept until those were taken).
    pub early_boards: u64,
}

/// One QNIX process.
pub struct Qnix<'a, D, C, M> {
    engine: Engine<'a>,
    dev: D,
    clock: C,
    mem: M,
    me: Name,
    app_size: i32,
    registered: bool,
    ended: bool,
    /// Per endpoint: its name and application size, once registered.
    names: Vec<Option<(Name, i32)>>,
    conflict: bool,
    dead: Vec<bool>,
    /// The send and receive context lists ([`SEND`], [`RECV`]).
    ctxs: [Vec<Ctx>; 2],
    bells: [[i32; CONTEXTS]; 2],
    /// Per side, the contexts whose doorbell was written since
    /// [`Qnix::take_changed_bells`] last took them (bit `i`: context `i`).
    changed: [u64; 2],
    queue: VecDeque<Command>,
    tx: VecDeque<TxJob>,
    /// Buffers of finished sends and receives, reused by the next ones.
    spares: Spares,
    rx: Vec<RxPartial>,
    /// Board broadcasts sent; per sender, those taken; per sender, what it sent
    /// after one not taken yet, in order (see [`Qnix::goes_once`]).
    bc_sent: u16,
    bc_taken: Vec<u16>,
    parked: Vec<VecDeque<Parked>>,
    parked_bytes: usize,
    /// Per process: packets launched to it; packets taken from it; its board
    /// broadcasts that wait for packets it sent here before them.
    sent_to: Vec<u32>,
    got_from: Vec<u32>,
    /// Per process: its board broadcasts come down a tree through a relay found
    /// dead, so those not here yet never come.
    cut_off: Vec<bool>,
    boards: Vec<VecDeque<Board>>,
    /// Per process: its tree broadcast whose later packets are still coming.
    growing: Vec<Option<Board>>,
    posted: Vec<usize>,
    unexpected: VecDeque<Unexpected>,
    unexpected_bytes: usize,
    /// Receives granted to rendezvous, and the bells rung for rendezvous.
    armed: Vec<Armed>,
    rung: Vec<u64>,
    /// Receives to be filled by a `K_MSG_TO` message from this sender.
    bound: [Option<NodeId>; CONTEXTS],
    /// Receives matched to a kept request `(sender, its context, receive)`.
    early_bound: Vec<(NodeId, i32, usize)>,
    /// Sends going by rendezvous (one per destination).
    rndv: Vec<Rndv>,
    /// Per send context: parts not ended yet, and the first error of those that did.
    parts: [u16; CONTEXTS],
    part_error: [Option<QxError>; CONTEXTS],
    groups: Vec<GroupState>,
    joins: Vec<(usize, usize)>,
    barriers: Vec<BarrierOp>,
    pool: Option<(u64, usize)>,
    stats: QnixStats,
    last_keepalive: Instant,
    init_timeout: Duration,
    idle: crate::idle::Idle,
    /// Posting calls since the last full step.
    posts_since_step: u32,
}

impl<D, C, M> core::fmt::Debug for Qnix<'_, D, C, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Qnix")
            .field("me", &self.me)
            .field("engine", &self.engine)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Writes `data` at byte `off` of the region made of `segs`.
fn write_at<M: Memory>(
    mem: &mut M,
    segs: &[(u64, usize)],
    mut off: usize,
    mut data: &[u8],
) -> Result<(), Error> {
    for &(addr, len) in segs {
        if data.is_empty() {
            break;
        }
        if off >= len {
            off -= len;
            continue;
        }
        let n = (len - off).min(data.len());
        mem.write(addr + off as u64, &data[..n])?;
        data = &data[n..];
        off = 0;
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(Error::BadAddress)
    }
}

/// Reads `out.len()` bytes from byte `off` of the region made of `segs`.
fn read_at<M: Memory>(
    mem: &mut M,
    segs: &[(u64, usize)],
    mut off: usize,
    mut out: &mut [u8],
) -> Result<(), Error> {
    for &(addr, len) in segs {
        if out.is_empty() {
            break;
        }
        if off >= len {
            off -= len;
            continue;
        }
        let n = (len - off).min(out.len());
        let (now, rest) = out.split_at_mut(n);
        mem.read(addr + off as u64, now)?;
        out = rest;
        off = 0;
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(Error::BadAddress)
    }
}

fn head(kind: u8, a: i32, b: i32, c: u32) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[0] = kind;
    h[4..8].copy_from_slice(&a.to_be_bytes());
    h[8..12].copy_from_slice(&b.to_be_bytes());
    h[12..16].copy_from_slice(&c.to_be_bytes());
    h
}

fn parse_head(p: &[u8]) -> Option<(u8, i32, i32, u32)> {
    let h = p.get(..HEAD)?;
    let f = |i: usize| [h[i], h[i + 1], h[i + 2], h[i + 3]];
    Some((
        h[0],
        i32::from_be_bytes(f(4)),
        i32::from_be_bytes(f(8)),
        u32::from_be_bytes(f(12)),
    ))
}

/// Bytes in front of a board broadcast's message on a fabric of `n` processes:
/// the head, then per process the packets sent to it before (u32), then a bitmap
/// of the processes it is for.
fn board_prefix(n: usize) -> usize {
    HEAD + 4 * n + n.div_ceil(8)
}

/// The sender's board-broadcast count in the head of packet `d`.
fn bc_of(engine: &Engine<'_>, d: Delivery) -> u16 {
    engine
        .packet(d.packet)
        .and_then(|p| p.get(1..3))
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    /// A process on endpoint `cfg.node` of a fabric of `fabric_nodes` endpoints,
    /// reaching program memory through `mem`; not registered yet ([`Qnix::register`]).
    pub fn new(
        cfg: Config,
        groups: &'a [Group<'a>],
        fabric_nodes: usize,
        dev: D,
        clock: C,
        mem: M,
    ) -> Result<Self, QxError> {
        let cap = Capacity {
            ports: 1,
            channels: fabric_nodes,
            fabric_nodes,
            ops: (256 + 8 * fabric_nodes).min(0xFFF0),
            assemblies: 16 + 2 * fabric_nodes,
            eager: 0,
        };
        let storage: Storage<'a> = Storage::with_capacity(cap).with_packets(64, 256, 0, 0);
        let mut engine = Engine::new(cfg, groups, storage)?;
        engine.set_capabilities(dev.capabilities());
        if engine.packet_size() <= HEAD {
            return Err(QxError::Invalid);
        }
        let now = clock.now();
        let list = || {
            let mut v = Vec::with_capacity(CONTEXTS);
            v.resize_with(CONTEXTS, Ctx::default);
            v
        };
        let mut rx = Vec::with_capacity(fabric_nodes);
        rx.resize_with(fabric_nodes, RxPartial::default);
        Ok(Qnix {
            engine,
            dev,
            clock,
            mem,
            me: Name::new(0, 0),
            app_size: 0,
            registered: false,
            ended: false,
            names: alloc::vec![None; fabric_nodes],
            conflict: false,
            dead: alloc::vec![false; fabric_nodes],
            ctxs: [list(), list()],
            bells: [[FREE; CONTEXTS]; 2],
            changed: [0; 2],
            queue: VecDeque::with_capacity(QUEUE),
            tx: VecDeque::new(),
            spares: Spares::default(),
            rx,
            bc_sent: 0,
            bc_taken: alloc::vec![0; fabric_nodes],
            parked: (0..fabric_nodes).map(|_| VecDeque::new()).collect(),
            parked_bytes: 0,
            sent_to: alloc::vec![0; fabric_nodes],
            got_from: alloc::vec![0; fabric_nodes],
            cut_off: alloc::vec![false; fabric_nodes],
            boards: (0..fabric_nodes).map(|_| VecDeque::new()).collect(),
            growing: (0..fabric_nodes).map(|_| None).collect(),
            posted: Vec::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            armed: Vec::new(),
            rung: Vec::new(),
            bound: [None; CONTEXTS],
            early_bound: Vec::new(),
            rndv: Vec::new(),
            parts: [0; CONTEXTS],
            part_error: [None; CONTEXTS],
            groups: Vec::new(),
            joins: Vec::new(),
            barriers: Vec::new(),
            pool: None,
            stats: QnixStats::default(),
            last_keepalive: now,
            init_timeout: Duration::from_secs(60),
            idle: crate::idle::Idle::new(),
            posts_since_step: 0,
        })
    }

    /// A hook waiting calls run once polls have found nothing for a while
    /// ([`crate::idle`], as in GAMMA).
    pub fn set_idle(&mut self, idle: Option<fn()>) {
        self.idle.set_hook(idle);
    }

    /// How long [`Qnix::init`] waits for the application (60 s by default).
    pub fn set_init_timeout(&mut self, t: Duration) {
        self.init_timeout = t;
    }

    /// `qx_init`: registers as `name` of application `group_name` (which must be
    /// `name.ai`) of `group_size` processes and waits until all have registered.
    pub fn init(&mut self, name: Name, group_name: i32, group_size: i32) -> Result<(), QxError> {
        self.register(name, group_name, group_size)?;
        let deadline = self.clock.now() + self.init_timeout;
        loop {
            if self.registered()? {
                return Ok(());
            }
            if self.clock.now() >= deadline {
                return Err(QxError::TimedOut);
            }
        }
    }

    /// The first half of [`Qnix::init`]: tells every endpoint this process's name.
    pub fn register(
        &mut self,
        name: Name,
        group_name: i32,
        group_size: i32,
    ) -> Result<(), QxError> {
        if self.app_size != 0 || self.ended {
            return Err(QxError::Exists);
        }
        if group_name != name.ai || group_size < 1 || name.pi < 0 || name.pi >= group_size {
            return Err(QxError::Invalid);
        }
        if group_size as usize > self.names.len() {
            return Err(QxError::Size);
        }
        let me = self.engine.config().node;
        if self
            .names
            .iter()
            .any(|n| matches!(n, Some((n, _)) if *n == name))
        {
            return Err(QxError::Exists);
        }
        self.me = name;
        self.app_size = group_size;
        self.names[me as usize] = Some((name, group_size));
        let others: Vec<NodeId> = (0..self.names.len() as NodeId)
            .filter(|&n| n != me)
            .collect();
        self.tx.push_back(TxJob::control(
            others,
            head(K_REG, name.ai, name.pi, group_size as u32),
        ));
        self.step();
        Ok(())
    }

    /// The second half of [`Qnix::init`]: whether the whole application has
    /// registered (one step first).
    pub fn registered(&mut self) -> Result<bool, QxError> {
        if self.registered {
            return Ok(true);
        }
        if self.app_size == 0 {
            return Err(QxError::NotInitialized);
        }
        let busy = self.step();
        if self.conflict {
            return Err(QxError::Exists);
        }
        let mut seen = alloc::vec![false; self.app_size as usize];
        let mut count = 0;
        for (name, size) in self.names.iter().flatten().copied() {
            if name.ai != self.me.ai {
                continue;
            }
            if size != self.app_size {
                return Err(QxError::Size);
            }
            let Some(s) = seen.get_mut(name.pi as usize) else {
                return Err(QxError::Size);
            };
            if !*s {
                *s = true;
                count += 1;
            }
        }
        if count == self.app_size {
            let mut app = GroupState {
                name: self.me.ai,
                size: Some(self.app_size),
                ..GroupState::default()
            };
            for (n, v) in self.names.iter().enumerate() {
                if let Some((name, _)) = v.filter(|(name, _)| name.ai == self.me.ai) {
                    app.members.push((name.pi, n as NodeId));
                }
            }
            app.members.sort_unstable();
            match self.groups.iter_mut().find(|g| g.name == self.me.ai) {
                Some(g) => {
                    app.tokens = core::mem::take(&mut g.tokens);
                    *g = app;
                }
                None => self.groups.push(app),
            }
            self.registered = true;
            return Ok(true);
        }
        if self.dead.iter().any(|&d| d) {
            return Err(QxError::Dead);
        }
        self.idle_step(busy);
        Ok(false)
    }

    fn ready(&self) -> Result<(), QxError> {
        if self.registered && !self.ended {
            Ok(())
        } else {
            Err(QxError::NotInitialized)
        }
    }

    /// `qx_end`: finishes what was posted (at most 10 s) and de-registers.
    pub fn end(&mut self) -> Result<(), QxError> {
        self.ready()?;
        let deadline = self.clock.now() + Duration::from_secs(10);
        self.engine.flush_acks();
        loop {
            let busy = self.step();
            let idle = self.queue.is_empty()
                && self.tx.is_empty()
                && self.rndv.is_empty()
                && self.engine.is_quiescent();
            if idle || self.clock.now() >= deadline {
                break;
            }
            self.idle_step(busy);
        }
        self.ended = true;
        Ok(())
    }

    // ------------------------------------------------------------ names

    /// This process's name.
    pub fn name(&self) -> Name {
        self.me
    }

    /// Processes in this process's application.
    pub fn app_size(&self) -> i32 {
        self.app_size
    }

    /// The endpoint of a registered process of this application.
    pub fn lookup(&self, name: Name) -> Result<NodeId, QxError> {
        if name.ai != self.me.ai {
            // Out of reach if another application registered it; a name nobody
            // registered is unknown, whatever its application id.
            let known = self.names.iter().flatten().any(|(n, _)| *n == name);
            return Err(if known {
                QxError::OtherApplication
            } else {
                QxError::Unknown
            });
        }
        self.names
            .iter()
            .position(|n| matches!(n, Some((n, _)) if *n == name))
            .map(|n| n as NodeId)
            .ok_or(QxError::Unknown)
    }

    fn name_of(&self, node: NodeId) -> Option<Name> {
        self.names
            .get(node as usize)
            .copied()
            .flatten()
            .map(|(n, _)| n)
    }

    fn formed_group(&self, name: i32) -> Result<usize, QxError> {
        self.groups
            .iter()
            .position(|g| g.name == name && g.formed())
            .ok_or(QxError::Unknown)
    }

    // ------------------------------------------------------------ memory

    /// `qx_buffer_pool`: the buffer pool is `len` bytes of program memory at `base`
    /// (page-aligned, at most [`POOL_MAX`]); contexts name its pages by index.
    pub fn set_pool(&mut self, base: u64, len: usize) -> Result<(), QxError> {
        if self.pool.is_some() {
            return Err(QxError::Exists);
        }
        if len == 0 || len > POOL_MAX || !base.is_multiple_of(PAGE as u64) {
            return Err(QxError::Invalid);
        }
        self.mem.check(base, len as u64, Access::Write)?;
        self.pool = Some((base, len));
        Ok(())
    }

    /// The buffer pool, if any: (address, length).
    pub fn pool(&self) -> Option<(u64, usize)> {
        self.pool
    }

    /// The segments of `region` holding `len` bytes, checked for `access`.
    fn resolve(
        &mut self,
        region: &Region,
        len: usize,
        access: Access,
    ) -> Result<Vec<(u64, usize)>, QxError> {
        let segs = match region {
            Region::None => return Err(QxError::Invalid),
            Region::Data(_) => return Err(QxError::Invalid),
            Region::Pool(page) => {
                let (base, size) = self.pool.ok_or(QxError::Invalid)?;
                let off = page.checked_mul(PAGE).ok_or(QxError::Invalid)?;
                if off.checked_add(len).is_none_or(|end| end > size) {
                    return Err(QxError::TooLong);
                }
                let mut out = self.spares.segs();
                out.push((base + off as u64, len));
                out
            }
            Region::Segments(s) => {
                let mut out = self.spares.segs();
                let mut left = len;
                for &(addr, n) in s {
                    if left == 0 {
                        break;
                    }
                    let n = n.min(left);
                    out.push((addr, n));
                    left -= n;
                }
                if left != 0 {
                    return Err(QxError::TooLong);
                }
                out
            }
        };
        for &(addr, n) in &segs {
            if n > 0 {
                self.mem
                    .check(addr, n as u64, access)
                    .map_err(|_| QxError::Fault)?;
            }
        }
        Ok(segs)
    }

    // ------------------------------------------------------------ contexts

    /// `qx_send_context`: fills the first free send context; returns its index.
    /// `size` (packets) is checked for sign only: Volley derives packets from `len`.
    #[allow(clippy::too_many_arguments)]
    pub fn send_context(
        &mut self,
        to: Name,
        tag: i32,
        doorbell: bool,
        size: i32,
        len: usize,
        region: Region,
    ) -> Result<usize, QxError> {
        if matches!(&region, Region::Data(d) if d.len() < len) {
            return Err(QxError::Invalid);
        }
        self.new_context(SEND, to, tag, doorbell, size, len, region)
    }

    /// `qx_recv_context`: fills the first free receive context; returns its index.
    /// `size` (pages) is checked for sign only.
    #[allow(clippy::too_many_arguments)]
    pub fn recv_context(
        &mut self,
        from: Name,
        tag: i32,
        doorbell: bool,
        size: i32,
        len: usize,
        region: Region,
    ) -> Result<usize, QxError> {
        if matches!(region, Region::Data(_)) {
            return Err(QxError::Invalid);
        }
        self.new_context(RECV, from, tag, doorbell, size, len, region)
    }

    #[allow(clippy::too_many_arguments)]
    fn new_context(
        &mut self,
        side: usize,
        peer: Name,
        tag: i32,
        doorbell: bool,
        size: i32,
        len: usize,
        region: Region,
    ) -> Result<usize, QxError> {
        self.ready()?;
        if size < 0 {
            return Err(QxError::Invalid);
        }
        if len > MESSAGE_MAX {
            return Err(QxError::TooLong);
        }
        let i = self.ctxs[side]
            .iter()
            .position(|c| !c.used)
            .ok_or(QxError::NoContext)?;
        self.ctxs[side][i] = Ctx {
            used: true,
            peer,
            tag,
            doorbell,
            len,
            region,
            ..Ctx::default()
        };
        self.set_bell(side, i, FREE);
        Ok(i)
    }

    /// Replaces a send context's region (a C facade resolves page tables and copies
    /// short data when the command is posted).
    pub fn set_send_region(&mut self, ctx: usize, region: Region) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let old = core::mem::replace(&mut self.ctxs[SEND][ctx].region, region);
        self.spares.give_region(old);
        Ok(())
    }

    /// A [`Region::Data`] holding the `len` bytes at `addr` of this process's
    /// memory (a short send's data, copied when its command is posted), in a buffer
    /// kept from an earlier context: no allocation once warm.
    pub fn data_region(&mut self, addr: u64, len: usize) -> Result<Region, QxError> {
        if len > SHORT_MAX {
            return Err(QxError::TooLong);
        }
        let mut d = self.spares.bytes();
        d.resize(len, 0);
        if self.mem.read(addr, &mut d).is_err() {
            self.spares.give_bytes(d);
            return Err(QxError::Fault);
        }
        Ok(Region::Data(d))
    }

    /// A [`Region::Data`] holding a copy of `bytes` (a short send's data), in a
    /// buffer kept from an earlier context, as [`Qnix::data_region`] for data the
    /// program holds itself: no allocation once warm.
    pub fn short_data(&mut self, bytes: &[u8]) -> Result<Region, QxError> {
        if bytes.len() > SHORT_MAX {
            return Err(QxError::TooLong);
        }
        let mut d = self.spares.bytes();
        d.extend_from_slice(bytes);
        Ok(Region::Data(d))
    }

    /// Replaces a receive context's region.
    pub fn set_recv_region(&mut self, ctx: usize, region: Region) -> Result<(), QxError> {
        self.idle(RECV, ctx)?;
        self.ctxs[RECV][ctx].region = region;
        Ok(())
    }

    /// A send context's length and region.
    pub fn send_context_info(&self, ctx: usize) -> Option<(usize, &Region)> {
        self.context_info(SEND, ctx)
    }

    /// A receive context's length and region.
    pub fn recv_context_info(&self, ctx: usize) -> Option<(usize, &Region)> {
        self.context_info(RECV, ctx)
    }

    fn context_info(&self, side: usize, ctx: usize) -> Option<(usize, &Region)> {
        self.ctxs[side]
            .get(ctx)
            .filter(|c| c.used)
            .map(|c| (c.len, &c.region))
    }

    /// Context `ctx` of `side` is in use and has nothing posted.
    fn idle(&self, side: usize, ctx: usize) -> Result<(), QxError> {
        self.ready()?;
        match self.ctxs[side].get(ctx) {
            Some(c) if c.used => {}
            _ => return Err(QxError::NoContext),
        }
        if self.bells[side][ctx] != FREE {
            return Err(QxError::Busy);
        }
        Ok(())
    }

    /// Writes the doorbell of context `ctx` of `side` and notes it changed.
    #[inline(always)]
    fn set_bell(&mut self, side: usize, ctx: usize, v: i32) {
        self.bells[side][ctx] = v;
        self.changed[side] |= 1 << ctx;
    }

    /// The contexts whose doorbells were written since the last call, per side
    /// (`[send, receive]`, bit `i` for context `i`), forgotten here: a facade that
    /// mirrors the doorbells into the program's memory (QNIX's HPS) copies only
    /// those.
    pub fn take_changed_bells(&mut self) -> [u64; 2] {
        core::mem::take(&mut self.changed)
    }

    /// A send context's doorbell.
    pub fn send_doorbell(&self, ctx: usize) -> i32 {
        self.bells[SEND].get(ctx).copied().unwrap_or(FREE)
    }

    /// A receive context's doorbell.
    pub fn recv_doorbell(&self, ctx: usize) -> i32 {
        self.bells[RECV].get(ctx).copied().unwrap_or(FREE)
    }

    // ------------------------------------------------------------ commands

    fn post(&mut self, cmd: Command) {
        while self.queue.len() >= QUEUE {
            let busy = self.step();
            self.idle_step(busy);
        }
        self.queue.push_back(cmd);
        self.post_step();
    }

    /// What a posting call runs of the NIC step: the queue consumed and what that
    /// made put on the wire, without a look at the receive side (as GAMMA's send
    /// leaves before its receive poll): arrivals wait for the next full step, in a
    /// `poll_for_*` call or the NIC thread. Jobs the engine could not take (its
    /// window full) get a full step, whose acks make room, and so does every
    /// [`POSTS_PER_STEP`]th post in a row: a program that spins on a doorbell
    /// posting only, without the NIC thread, still sees its messages arrive.
    fn post_step(&mut self) {
        self.posts_since_step += 1;
        self.consume_queue();
        // A barrier starts now: its first token (or its arrival in NIC memory)
        // need not wait for the caller's first poll.
        self.advance_barriers();
        self.send_out(None);
        if !self.tx.is_empty() || self.posts_since_step >= POSTS_PER_STEP {
            self.step();
        }
    }

    /// The data a send of `ctx` carries: a short send's bytes are copied now, a
    /// long send's segments are checked now and read by the NIC step.
    fn prepare_send(&mut self, ctx: usize, short: bool) -> Result<TxData, QxError> {
        self.idle(SEND, ctx)?;
        let len = self.ctxs[SEND][ctx].len;
        if short && len > SHORT_MAX {
            return Err(QxError::TooLong);
        }
        if let Region::Data(d) = &self.ctxs[SEND][ctx].region {
            let d = d.get(..len).ok_or(QxError::Invalid)?;
            let mut out = self.spares.bytes();
            out.extend_from_slice(d);
            return Ok(TxData::Owned(out));
        }
        let region = core::mem::take(&mut self.ctxs[SEND][ctx].region);
        let segs = self.resolve(&region, len, Access::Read);
        self.ctxs[SEND][ctx].region = region;
        let segs = segs?;
        if !short {
            return Ok(TxData::Segments(segs));
        }
        let mut d = self.spares.bytes();
        d.resize(len, 0);
        let r = read_at(&mut self.mem, &segs, 0, &mut d);
        self.spares.give_segs(segs);
        if r.is_err() {
            self.spares.give_bytes(d);
            return Err(QxError::Fault);
        }
        Ok(TxData::Owned(d))
    }

    fn post_send(
        &mut self,
        ctx: usize,
        short: bool,
        to: Vec<NodeId>,
        fan: bool,
    ) -> Result<(), QxError> {
        let data = self.prepare_send(ctx, short)?;
        self.set_bell(SEND, ctx, BUSY);
        self.post(Command::Send { ctx, to, data, fan });
        Ok(())
    }

    /// `qx_send`: sends the context's data to its receiver straight out of its
    /// region, which must stay as it is until the send completes.
    pub fn send(&mut self, ctx: usize) -> Result<(), QxError> {
        let r = self.unicast(ctx, false);
        self.refused(SEND, ctx, r)
    }

    /// `qx_send_short`: copies the data (at most [`SHORT_MAX`] bytes) now and sends it.
    pub fn send_short(&mut self, ctx: usize) -> Result<(), QxError> {
        let r = self.unicast(ctx, true);
        self.refused(SEND, ctx, r)
    }

    fn unicast(&mut self, ctx: usize, short: bool) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let to = self.lookup(self.ctxs[SEND][ctx].peer)?;
        if short && self.send_short_now(ctx, to) {
            return Ok(());
        }
        let mut dests = self.spares.nodes();
        dests.push(to);
        self.post_send(ctx, short, dests, false)
    }

    /// `qx_send_short` of idle context `ctx` that holds its data, to another live
    /// process `to`, when nothing posted before it waits in the command queue or
    /// the transmit queue: what posting it and the NIC step would do (barriers
    /// and granted puts advanced first, then one packet launched and the send
    /// completed), without the command, its copy of the data and its transmit
    /// job. `false`, with nothing changed but those advances, where that does not
    /// apply or the packet could not be launched: the command queue takes it then.
    fn send_short_now(&mut self, ctx: usize, to: NodeId) -> bool {
        let me = self.engine.config().node;
        if !self.queue.is_empty()
            || !self.tx.is_empty()
            || to == me
            || self.dead.get(to as usize).copied().unwrap_or(true)
        {
            return false;
        }
        let c = &self.ctxs[SEND][ctx];
        let (len, tag) = (c.len, c.tag);
        let Region::Data(d) = &c.region else {
            return false;
        };
        if len > SHORT_MAX || d.len() < len || HEAD + len > self.engine.packet_size() {
            return false;
        }
        // In the step's order: what a barrier or a grant sends goes first.
        self.advance_barriers();
        let started = self.start_puts();
        if !self.tx.is_empty() {
            return false;
        }
        let Ok(id) = self.engine.packet_alloc() else {
            return false;
        };
        let filled = match (&self.ctxs[SEND][ctx].region, self.engine.packet_mut(id)) {
            (Region::Data(d), Some(p)) => {
                p[..HEAD].copy_from_slice(&head(K_MSG, tag, 0, len as u32));
                // What it must not overtake at the receiver (see `goes_once`).
                p[1..3].copy_from_slice(&self.bc_sent.to_be_bytes());
                p[HEAD..HEAD + len].copy_from_slice(&d[..len]);
                true
            }
            _ => false,
        };
        if !filled {
            let _ = self.engine.packet_free(id);
            return false;
        }
        let now = self.clock.now();
        let left = match self
            .engine
            .launch_unicast_on(now, &mut self.dev, id, to, HEAD + len)
        {
            Ok(left) => left,
            Err(_) => {
                let _ = self.engine.packet_free(id);
                return false;
            }
        };
        let s = &mut self.sent_to[to as usize];
        *s = s.wrapping_add(1);
        self.posts_since_step += 1;
        self.stats.commands += 1;
        self.stats.messages_sent += 1;
        self.set_bell(SEND, ctx, BUSY);
        self.parts[ctx] += 1;
        self.part_done(ctx, Ok(()));
        if !left || started {
            self.engine_transmit(now);
        }
        self.dev.flush(now);
        if self.posts_since_step >= POSTS_PER_STEP {
            self.step();
        }
        true
    }

    /// `qx_broadcast`: sends to every member of formed group `group` but this process.
    pub fn broadcast(&mut self, ctx: usize, group: i32) -> Result<(), QxError> {
        let r = self.bcast(ctx, group, false);
        self.refused(SEND, ctx, r)
    }

    /// `qx_broadcast_short`.
    pub fn broadcast_short(&mut self, ctx: usize, group: i32) -> Result<(), QxError> {
        let r = self.bcast(ctx, group, true);
        self.refused(SEND, ctx, r)
    }

    fn bcast(&mut self, ctx: usize, group: i32, short: bool) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let gi = self.formed_group(group)?;
        let me = self.engine.config().node;
        let mut to = self.spares.nodes();
        to.extend(
            self.groups[gi]
                .members
                .iter()
                .map(|m| m.1)
                .filter(|&n| n != me),
        );
        self.post_send(ctx, short, to, true)
    }

    /// `qx_multicast`: sends to each process of `to` (of this application).
    pub fn multicast(&mut self, ctx: usize, to: &[Name]) -> Result<(), QxError> {
        let r = self.mcast(ctx, to, false);
        self.refused(SEND, ctx, r)
    }

    /// `qx_multicast_short`.
    pub fn multicast_short(&mut self, ctx: usize, to: &[Name]) -> Result<(), QxError> {
        let r = self.mcast(ctx, to, true);
        self.refused(SEND, ctx, r)
    }

    fn mcast(&mut self, ctx: usize, to: &[Name], short: bool) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        if to.is_empty() {
            return Err(QxError::Invalid);
        }
        let mut nodes = self.spares.nodes();
        for &n in to {
            match self.lookup(n) {
                Ok(d) => nodes.push(d),
                Err(e) => {
                    give_spare(&mut self.spares.nodes, nodes);
                    return Err(e);
                }
            }
        }
        self.post_send(ctx, short, nodes, true)
    }

    /// `qx_receive`: the next message from the context's sender with its tag lands
    /// in its region (messages match receives in the order both were posted).
    pub fn receive(&mut self, ctx: usize) -> Result<(), QxError> {
        let r = self.post_receive(ctx);
        self.refused(RECV, ctx, r)
    }

    fn post_receive(&mut self, ctx: usize) -> Result<(), QxError> {
        self.idle(RECV, ctx)?;
        self.lookup(self.ctxs[RECV][ctx].peer)?;
        let len = self.ctxs[RECV][ctx].len;
        let region = core::mem::take(&mut self.ctxs[RECV][ctx].region);
        let segs = self.resolve(&region, len, Access::Write);
        let c = &mut self.ctxs[RECV][ctx];
        c.region = region;
        let old = core::mem::replace(&mut c.segs, segs?);
        self.spares.give_segs(old);
        self.set_bell(RECV, ctx, BUSY);
        self.post(Command::Receive { ctx });
        Ok(())
    }

    /// `qx_join_group`: this process joins group `group` of `size` processes of its
    /// application; the context's doorbell rings when all have joined.
    pub fn join_group(&mut self, ctx: usize, group: i32, size: i32) -> Result<(), QxError> {
        let r = self.post_join(ctx, group, size);
        self.refused(SEND, ctx, r)
    }

    fn post_join(&mut self, ctx: usize, group: i32, size: i32) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        if group == self.me.ai {
            return Err(QxError::Exists);
        }
        if size < 1 || size > self.app_size {
            return Err(QxError::Size);
        }
        let me = self.engine.config().node;
        if self
            .groups
            .iter()
            .any(|g| g.name == group && g.members.iter().any(|m| m.1 == me))
        {
            return Err(QxError::Exists);
        }
        self.set_bell(SEND, ctx, BUSY);
        self.post(Command::Join { ctx, group, size });
        Ok(())
    }

    /// `qx_barrier`: the context's doorbell rings once every member of formed group
    /// `group` (of `size`, which must match) has reached the barrier.
    pub fn barrier(&mut self, ctx: usize, group: i32, size: i32) -> Result<(), QxError> {
        let r = self.post_barrier(ctx, group, size);
        self.refused(SEND, ctx, r)
    }

    fn post_barrier(&mut self, ctx: usize, group: i32, size: i32) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let gi = self.formed_group(group)?;
        let me = self.engine.config().node;
        let g = &self.groups[gi];
        if g.size != Some(size) {
            return Err(QxError::Size);
        }
        if !g.members.iter().any(|m| m.1 == me) {
            return Err(QxError::Unknown);
        }
        if g.barrier_active {
            return Err(QxError::Busy);
        }
        self.groups[gi].barrier_active = true;
        self.set_bell(SEND, ctx, BUSY);
        self.post(Command::Barrier { ctx, group: gi });
        Ok(())
    }

    /// `qx_poll_for_send`: waits (stepping the NIC) until the send context's
    /// operation completes, then frees its doorbell and the context.
    pub fn poll_for_send(&mut self, ctx: usize) -> Result<(), QxError> {
        self.poll_for(SEND, ctx).map(|_| ())
    }

    /// `qx_poll_for_receive`: waits until the receive completes, frees its doorbell
    /// and the context; returns the bytes received.
    pub fn poll_for_receive(&mut self, ctx: usize) -> Result<usize, QxError> {
        self.poll_for(RECV, ctx)
    }

    fn poll_for(&mut self, side: usize, ctx: usize) -> Result<usize, QxError> {
        self.ready()?;
        match self.ctxs[side].get(ctx) {
            Some(c) if c.used && c.doorbell => {}
            Some(c) if c.used => return Err(QxError::NoDoorbell),
            _ => return Err(QxError::NoContext),
        }
        if self.bells[side][ctx] == FREE {
            return Err(QxError::Invalid);
        }
        loop {
            let b = self.bells[side][ctx];
            if b != BUSY {
                let got = self.ctxs[side][ctx].got;
                self.free_ctx(side, ctx);
                return match b {
                    DONE => Ok(got),
                    e => Err(QxError::from_code(e).unwrap_or(QxError::Network)),
                };
            }
            let busy = self.step();
            self.idle_step(busy);
        }
    }

    /// A command refused before it was posted gives its context back, as if its
    /// operation had ended: the seed's context lists lend a context for one
    /// operation, and a program that gets an error takes new ones (after 64
    /// refusals it could not send at all otherwise). A context with an operation
    /// posted (its doorbell not FREE) is left alone.
    fn refused<T>(&mut self, side: usize, ctx: usize, r: Result<T, QxError>) -> Result<T, QxError> {
        if r.is_err()
            && self.ctxs[side].get(ctx).is_some_and(|c| c.used)
            && self.bells[side][ctx] == FREE
        {
            self.free_ctx(side, ctx);
        }
        r
    }

    /// [`Qnix::send`]'s refusal of send context `ctx` for a cause the caller found
    /// before posting (a facade that resolves the context's memory itself): gives
    /// the context back as a refused command does, and returns `e`.
    pub fn refuse_send(&mut self, ctx: usize, e: QxError) -> QxError {
        let _ = self.refused::<()>(SEND, ctx, Err(e));
        e
    }

    fn complete_send(&mut self, ctx: usize, r: Result<(), QxError>) {
        self.complete(SEND, ctx, 0, r);
    }

    fn complete_recv(&mut self, ctx: usize, got: usize, r: Result<(), QxError>) {
        self.complete(RECV, ctx, got, r);
    }

    /// Frees context `ctx` of `side`, keeping its resolved region for reuse.
    fn free_ctx(&mut self, side: usize, ctx: usize) {
        let old = core::mem::take(&mut self.ctxs[side][ctx]);
        self.spares.give_segs(old.segs);
        self.spares.give_region(old.region);
        self.set_bell(side, ctx, FREE);
    }

    /// Rings the doorbell of `ctx` of `side`, or frees a context without one.
    fn complete(&mut self, side: usize, ctx: usize, got: usize, r: Result<(), QxError>) {
        if !self.ctxs[side][ctx].doorbell {
            self.free_ctx(side, ctx);
            return;
        }
        self.ctxs[side][ctx].got = got;
        self.set_bell(side, ctx, r.map_or_else(QxError::code, |()| DONE));
    }

    // ------------------------------------------------------------ the NIC

    /// The NIC step: consumes the command queue, receives, transmits, advances joins
    /// and barriers and notices dead peers. Whether anything happened.
    pub fn step(&mut self) -> bool {
        self.posts_since_step = 0;
        let now = self.clock.now();
        if now.saturating_since(self.last_keepalive) >= self.engine.config().keepalive {
            self.last_keepalive = now;
            self.engine.keepalive_all(now);
        }
        let mut busy = self.consume_queue();
        let mut gate = Gate {
            mem: &mut self.mem,
            armed: &self.armed,
            rung: &mut self.rung,
        };
        busy |= self.engine.poll_mem(now, &mut self.dev, None, &mut gate);
        busy |= self.receive_packets();
        self.notice_dead();
        busy |= self.settle_rendezvous();
        busy |= self.advance_barriers();
        self.check_joins();
        busy |= self.send_out(Some(now));
        busy
    }

    /// Consumes the command queue; whether there was anything in it.
    fn consume_queue(&mut self) -> bool {
        let mut any = false;
        while let Some(cmd) = self.queue.pop_front() {
            self.stats.commands += 1;
            self.consume(cmd);
            any = true;
        }
        any
    }

    /// Starts granted puts and packetises the transmit queue, then has the engine
    /// send what that made (at `now`, read here if `None`: only then); whether there
    /// was anything.
    fn send_out(&mut self, now: Option<Instant>) -> bool {
        let started = self.start_puts();
        let mut now = now;
        if !(self.transmit(&mut now) || started) {
            return false;
        }
        let now = now.unwrap_or_else(|| self.clock.now());
        self.engine_transmit(now);
        // Packets launched at once in `transmit` leave together.
        self.dev.flush(now);
        true
    }

    /// The engine's transmit pass, one-sided operations reaching memory through
    /// the gate.
    fn engine_transmit(&mut self, now: Instant) {
        let mut gate = Gate {
            mem: &mut self.mem,
            armed: &self.armed,
            rung: &mut self.rung,
        };
        self.engine
            .poll_transmit_mem(now, &mut self.dev, None, &mut gate);
    }

    fn consume(&mut self, cmd: Command) {
        match cmd {
            Command::Send { ctx, to, data, fan } => {
                let len = self.ctxs[SEND][ctx].len;
                if fan && self.goes_once(&to, len) {
                    self.parts[ctx] += 1;
                    let c = &self.ctxs[SEND][ctx];
                    let h = head(K_MSG, c.tag, 0, c.len as u32);
                    let mut job = TxJob::message(to, h, c.len, data, ctx);
                    job.board = true;
                    self.tx.push_back(job);
                    return;
                }
                // Destinations reached by rendezvous leave the rest to packets. A
                // send to nobody (a group of one) is a job with no destination,
                // which completes at once.
                let to = self.ask_rendezvous(ctx, to, &data);
                if to.is_empty() && self.parts[ctx] > 0 {
                    return;
                }
                self.parts[ctx] += 1;
                let c = &self.ctxs[SEND][ctx];
                let h = head(K_MSG, c.tag, 0, c.len as u32);
                self.tx.push_back(TxJob::message(to, h, c.len, data, ctx));
            }
            Command::Receive { ctx } => {
                let (from, tag) = (self.ctxs[RECV][ctx].peer, self.ctxs[RECV][ctx].tag);
                let early = self
                    .unexpected
                    .iter()
                    .position(|u| u.tag == tag && self.name_of(u.src) == Some(from));
                if let Some(u) = early.and_then(|i| self.unexpected.remove(i)) {
                    self.unexpected_bytes -= u.data.len();
                    match u.rts {
                        // Its data is on its way as packets.
                        Some((sid, _)) => self.early_bound.push((u.src, sid, ctx)),
                        None => {
                            self.fill(ctx, &u.data);
                            self.spares.give_bytes(u.data);
                        }
                    }
                } else if self.lookup(from).is_ok_and(|n| self.dead[n as usize]) {
                    self.complete_recv(ctx, 0, Err(QxError::Dead));
                } else {
                    self.posted.push(ctx);
                }
            }
            Command::Join { ctx, group, size } => {
                let members = self.app_members();
                self.tx
                    .push_back(TxJob::control(members, head(K_JOIN, group, size, 0)));
                match self.group_index(group) {
                    Some(gi) => self.joins.push((ctx, gi)),
                    None => self.complete_send(ctx, Err(QxError::NoMemory)),
                }
            }
            Command::Barrier { ctx, group } => {
                let on_engine = self.whole_fabric(group);
                let g = &mut self.groups[group];
                let epoch = g.epoch;
                if !on_engine {
                    g.epoch = g.epoch.wrapping_add(1);
                }
                self.barriers.push(BarrierOp {
                    ctx,
                    group,
                    epoch,
                    round: 0,
                    sent: false,
                    on_engine,
                });
            }
        }
    }

    fn app_members(&self) -> Vec<NodeId> {
        (0..self.names.len())
            .filter(|&n| matches!(self.names[n], Some((name, _)) if name.ai == self.me.ai))
            .map(|n| n as NodeId)
            .collect()
    }

    /// Packetises the transmit queue in order, while the engine has packets, and
    /// launches each packet (at once where its channel allows; `now` is read from
    /// the clock when first needed).
    fn transmit(&mut self, now: &mut Option<Instant>) -> bool {
        let me = self.engine.config().node;
        let size = self.engine.packet_size();
        let mut busy = false;
        while let Some(job) = self.tx.front_mut() {
            if job.at == job.dests.len() {
                let (ctx, failed) = (job.ctx, job.failed);
                if let Some(job) = self.tx.pop_front() {
                    self.spares.give_job(job);
                }
                if let Some(ctx) = ctx {
                    self.part_done(ctx, failed.map_or(Ok(()), Err));
                }
                busy = true;
                continue;
            }
            if job.board && job.started {
                // The rest of a tree broadcast: each packet says where it goes.
                let Ok(id) = self.engine.packet_alloc() else {
                    break;
                };
                let Some(p) = self.engine.packet_mut(id) else {
                    break;
                };
                let n = (job.len - job.off).min(size - HEAD);
                p[..HEAD].copy_from_slice(&head(K_MORE, 0, 0, job.off as u32));
                if !job
                    .data
                    .read_into(&mut self.mem, job.off, &mut p[HEAD..HEAD + n])
                {
                    job.failed = Some(QxError::Fault);
                }
                let now = self.clock.now();
                match self.engine.launch_multicast_on(
                    now,
                    &mut self.dev,
                    id,
                    MCAST_ALL,
                    HEAD + n,
                    Tree::Binomial,
                ) {
                    Ok(_) => {
                        if job.tree_part_sent(n) {
                            self.stats.messages_sent += job.dests.len() as u64;
                        }
                        busy = true;
                    }
                    Err(Error::NoResources) => {
                        let _ = self.engine.packet_free(id);
                        break;
                    }
                    Err(e) => {
                        // Its first packet went: the rest cannot go another way.
                        let _ = self.engine.packet_free(id);
                        job.failed = Some(e.into());
                        job.at = job.dests.len();
                    }
                }
                continue;
            }
            if job.board {
                let tree = !self
                    .engine
                    .board_takes_packet(board_prefix(self.sent_to.len()) + job.len);
                if job.dests.iter().any(|&d| self.dead[d as usize])
                    || (tree && self.dead.iter().any(|&d| d))
                {
                    // Member by member: a dead one fails the send, and a dead
                    // relay would not pass it on.
                    job.board = false;
                    continue;
                }
                let n = self.sent_to.len();
                let at = board_prefix(n);
                if at > size {
                    // Not even its prefix fits a packet: member by member.
                    job.board = false;
                    continue;
                }
                let Ok(id) = self.engine.packet_alloc() else {
                    break;
                };
                let Some(p) = self.engine.packet_mut(id) else {
                    break;
                };
                // After the head, how many packets went to each process before it:
                // a receiver takes it only after those (see `goes_once`).
                p[..HEAD].copy_from_slice(&job.head);
                for (i, c) in self.sent_to.iter().enumerate() {
                    p[HEAD + 4 * i..HEAD + 4 * i + 4].copy_from_slice(&c.to_be_bytes());
                }
                // Then which processes it is for: every other one reads it, and
                // counts it, but only these take the message.
                let to = HEAD + 4 * n;
                p[to..at].fill(0);
                for &d in &job.dests {
                    p[to + d as usize / 8] |= 1 << (d % 8);
                }
                // A longer one goes on in `K_MORE` packets (down the tree only).
                let first = job.len.min(size - at);
                if !job.data.read_into(&mut self.mem, 0, &mut p[at..at + first]) {
                    job.failed = Some(QxError::Fault);
                }
                // Into the board at once where nothing of ours waits before it.
                let now = self.clock.now();
                let len = at + first;
                match self.engine.launch_multicast_on(
                    now,
                    &mut self.dev,
                    id,
                    MCAST_ALL,
                    len,
                    Tree::Binomial,
                ) {
                    Ok(_) => {
                        self.bc_sent = self.bc_sent.wrapping_add(1);
                        self.stats.board_broadcasts += 1;
                        if job.tree_part_sent(first) {
                            self.stats.messages_sent += job.dests.len() as u64;
                        }
                        busy = true;
                    }
                    Err(Error::NoResources) => {
                        let _ = self.engine.packet_free(id);
                        break;
                    }
                    Err(_) => {
                        let _ = self.engine.packet_free(id);
                        job.board = false;
                    }
                }
                continue;
            }
            let dest = job.dests[job.at];
            let Some((kind, a, b, c)) = parse_head(&job.head) else {
                break;
            };
            if dest == me {
                job.at += 1;
                busy = true;
                if kind != K_MSG {
                    self.control(me, kind, a, b, c);
                    continue;
                }
                let mut d = self.spares.bytes();
                d.resize(job.len, 0);
                if !job.data.read_into(&mut self.mem, 0, &mut d) {
                    job.failed = Some(QxError::Fault);
                }
                self.stats.messages_sent += 1;
                self.arrived(me, a, d);
                continue;
            }
            if self.dead.get(dest as usize).copied().unwrap_or(true) {
                job.failed = Some(QxError::Dead);
                job.next_dest();
                continue;
            }
            let Ok(id) = self.engine.packet_alloc() else {
                break;
            };
            let h = if job.started { 0 } else { HEAD };
            let n = (job.len - job.off).min(size - h);
            let Some(p) = self.engine.packet_mut(id) else {
                break;
            };
            p[..h].copy_from_slice(&job.head[..h]);
            if h == HEAD {
                // What it must not overtake at the receiver (see `goes_once`).
                p[1..3].copy_from_slice(&self.bc_sent.to_be_bytes());
            }
            if !job.data.read_into(&mut self.mem, job.off, &mut p[h..h + n]) {
                job.failed = Some(QxError::Fault);
            }
            let at = *now.get_or_insert_with(|| self.clock.now());
            // Out at once where nothing waits before it on its channel.
            match self
                .engine
                .launch_unicast_on(at, &mut self.dev, id, dest, h + n)
            {
                Ok(_) => {
                    let s = &mut self.sent_to[dest as usize];
                    *s = s.wrapping_add(1);
                }
                Err(Error::NoResources) => {
                    let _ = self.engine.packet_free(id);
                    break;
                }
                Err(e) => {
                    let _ = self.engine.packet_free(id);
                    job.failed = Some(e.into());
                    job.next_dest();
                    continue;
                }
            }
            busy = true;
            job.started = true;
            job.off += n;
            if job.off >= job.len {
                job.next_dest();
                if kind == K_MSG || kind == K_MSG_TO {
                    self.stats.messages_sent += 1;
                }
            }
        }
        busy
    }

    fn receive_packets(&mut self) -> bool {
        let mut busy = false;
        // Over the early-message budget, packets stay in the engine's slots and the
        // senders are held back at the wire.
        while self.unexpected_bytes < UNEXPECTED_MAX {
            let Some(d) = self.engine.next_delivery() else {
                break;
            };
            busy = true;
            self.take(d);
        }
        busy
    }

    fn take(&mut self, d: Delivery) {
        let src = d.src as usize;
        if src >= self.rx.len() {
            let _ = self.engine.packet_free(d.packet);
            return;
        }
        if d.multicast {
            self.take_board(d);
            return;
        }
        self.take_unicast(d);
        // Board broadcasts that waited for this packet may follow it now.
        self.got_from[src] = self.got_from[src].wrapping_add(1);
        self.take_boards(src);
    }

    fn take_unicast(&mut self, d: Delivery) {
        let src = d.src as usize;
        if self.rx[src].active {
            self.body(d, 0);
            return;
        }
        let h = self
            .engine
            .packet(d.packet)
            .and_then(|p| p.get(..d.len))
            .and_then(parse_head);
        let Some((kind, a, b, c)) = h else {
            let _ = self.engine.packet_free(d.packet);
            return;
        };
        if kind == K_CTS {
            let addr = self
                .engine
                .packet(d.packet)
                .and_then(|p| p.get(HEAD..HEAD + 8))
                .and_then(|p| p.try_into().ok())
                .map_or(0, u64::from_be_bytes);
            let _ = self.engine.packet_free(d.packet);
            self.cleared(d.src, a, b, c, addr);
            return;
        }
        let held = (kind == K_MSG || kind == K_RTS) && self.held(d);
        if kind == K_RTS && held {
            let bc = bc_of(&self.engine, d);
            let _ = self.engine.packet_free(d.packet);
            self.stats.parked += 1;
            let item = ParkedItem::Rts { a, b, c };
            self.parked[src].push_back(Parked { bc, item });
            return;
        }
        if kind != K_MSG && kind != K_MSG_TO {
            let _ = self.engine.packet_free(d.packet);
            self.control(d.src, kind, a, b, c);
            return;
        }
        let len = c as usize;
        let from = self
            .name_of(d.src)
            .filter(|n| n.ai == self.me.ai && len <= MESSAGE_MAX);
        let target = match from {
            // The data of a request kept early: into the receive matched to it since,
            // else into its place among the early messages.
            Some(_) if kind == K_MSG_TO && b < 0 => {
                let sid = -(b + 1);
                let i = self
                    .early_bound
                    .iter()
                    .position(|&(s, x, _)| s == d.src && x == sid);
                match i {
                    Some(i) => Target::Direct(self.early_bound.swap_remove(i).2),
                    None => Target::Early(sid, Vec::with_capacity(len.min(1 << 20))),
                }
            }
            // Matched when its rendezvous was granted.
            Some(_) if kind == K_MSG_TO => {
                let ctx = usize::try_from(b).ok().filter(|&x| x < CONTEXTS);
                match ctx.filter(|&x| self.bound[x] == Some(d.src)) {
                    Some(ctx) => {
                        self.bound[ctx] = None;
                        Target::Direct(ctx)
                    }
                    None => {
                        self.stats.dropped += 1;
                        Target::Discard
                    }
                }
            }
            Some(_) if held => {
                self.stats.parked += 1;
                Target::Parked(bc_of(&self.engine, d), Vec::with_capacity(len.min(1 << 20)))
            }
            Some(n) => match self.match_posted(n, a) {
                Some(ctx) => Target::Direct(ctx),
                None => Target::Buffer(Vec::with_capacity(len.min(1 << 20))),
            },
            None => {
                self.stats.dropped += 1;
                Target::Discard
            }
        };
        self.rx[src] = RxPartial {
            active: true,
            tag: a,
            len,
            got: 0,
            fault: false,
            target,
        };
        self.body(d, HEAD);
    }

    /// The bytes of a message's packet, straight to their place.
    fn body(&mut self, d: Delivery, skip: usize) {
        let src = d.src as usize;
        let st = &mut self.rx[src];
        if let Some(p) = self
            .engine
            .packet(d.packet)
            .and_then(|p| p.get(skip..d.len))
        {
            let n = p.len().min(st.len - st.got);
            let p = &p[..n];
            match &mut st.target {
                Target::Direct(ctx) => {
                    let c = &self.ctxs[RECV][*ctx];
                    let room = c.len.saturating_sub(st.got).min(n);
                    if room > 0 && write_at(&mut self.mem, &c.segs, st.got, &p[..room]).is_err() {
                        st.fault = true;
                    }
                }
                Target::Buffer(v) | Target::Early(_, v) => {
                    v.extend_from_slice(p);
                    self.unexpected_bytes += n;
                }
                Target::Parked(_, v) => {
                    v.extend_from_slice(p);
                    self.parked_bytes += n;
                }
                Target::Discard => {}
            }
            st.got += n;
        }
        let _ = self.engine.packet_free(d.packet);
        if self.rx[src].got >= self.rx[src].len {
            self.finish_message(src);
        }
    }

    fn finish_message(&mut self, src: usize) {
        let st = core::mem::take(&mut self.rx[src]);
        match st.target {
            Target::Direct(ctx) => {
                let room = self.ctxs[RECV][ctx].len;
                let r = if st.fault {
                    Err(QxError::Fault)
                } else if st.len > room {
                    Err(QxError::Truncated)
                } else {
                    Ok(())
                };
                self.stats.messages_received += 1;
                self.complete_recv(ctx, st.len.min(room), r);
            }
            Target::Buffer(v) => {
                self.unexpected_bytes -= v.len();
                self.arrived(src as NodeId, st.tag, v);
            }
            Target::Early(sid, v) => self.early_arrived(src as NodeId, sid, v),
            Target::Parked(bc, data) => {
                let item = ParkedItem::Msg { tag: st.tag, data };
                self.parked[src].push_back(Parked { bc, item });
                self.release(src);
            }
            Target::Discard => {}
        }
    }

    /// A message or rendezvous request from a process of this application that
    /// names more of its sender's board broadcasts than were taken here, or comes
    /// after one that does: it waits for them.
    fn held(&self, d: Delivery) -> bool {
        let src = d.src as usize;
        let ours = self.name_of(d.src).is_some_and(|n| n.ai == self.me.ai);
        ours && (self.still_coming(src, bc_of(&self.engine, d)) || !self.parked[src].is_empty())
    }

    /// Whether `src`'s board broadcasts up to count `bc` are still to be taken
    /// here: not yet taken, and either on their way or (cut off from `src`'s
    /// tree) already here, waiting for earlier packets.
    fn still_coming(&self, src: usize, bc: u16) -> bool {
        ahead(bc, self.bc_taken[src]) && !(self.cut_off[src] && self.boards[src].is_empty())
    }

    /// A broadcast from `d.src`'s board: taken in its place among that sender's
    /// messages (after the packets it sent here before it), then what waited for it.
    fn take_board(&mut self, d: Delivery) {
        let src = d.src as usize;
        let me = self.engine.config().node as usize;
        let n = self.sent_to.len();
        let ours = self.name_of(d.src).is_some_and(|n| n.ai == self.me.ai);
        let mut data = self.spares.bytes();
        // The first packet: head, counts, recipients, the message's start. A
        // `K_MORE` packet: head (with its offset), the next bytes.
        let part = self
            .engine
            .packet(d.packet)
            .and_then(|p| p.get(..d.len))
            .and_then(|p| {
                let (kind, tag, _, c) = parse_head(p)?;
                if kind == K_MORE {
                    data.extend_from_slice(&p[HEAD..]);
                    return Some((kind, tag, c, 0, false));
                }
                let after = p.get(HEAD + 4 * me..HEAD + 4 * me + 4)?;
                let after = u32::from_be_bytes([after[0], after[1], after[2], after[3]]);
                let for_me = p.get(HEAD + 4 * n + me / 8)? & (1 << (me % 8)) != 0;
                data.extend_from_slice(p.get(board_prefix(n)..)?);
                Some((kind, tag, c, after, for_me))
            });
        let _ = self.engine.packet_free(d.packet);
        match part {
            // Whole, or a first part of less than the rendezvous size.
            Some((K_MSG, tag, len, after, for_me))
                if ours
                    && (len as usize == data.len()
                        || (data.len()..RENDEZVOUS_MIN).contains(&(len as usize))) =>
            {
                if self.growing[src].take().is_some() {
                    self.stats.dropped += 1;
                }
                if (after.wrapping_sub(self.got_from[src]) as i32) > 0 {
                    self.stats.early_boards += 1;
                }
                let b = Board {
                    after,
                    for_me,
                    tag,
                    len: len as usize,
                    data,
                };
                if b.data.len() < b.len {
                    self.growing[src] = Some(b);
                } else {
                    self.boards[src].push_back(b);
                    self.take_boards(src);
                }
            }
            Some((K_MORE, _, off, _, _)) if ours => {
                let grown = match self.growing[src].as_mut() {
                    Some(g)
                        if g.data.len() == off as usize && g.len - g.data.len() >= data.len() =>
                    {
                        g.data.extend_from_slice(&data);
                        g.data.len() == g.len
                    }
                    _ => {
                        // Out of its place: what was growing is lost with it.
                        self.stats.dropped += 1;
                        self.growing[src] = None;
                        false
                    }
                };
                self.spares.give_bytes(data);
                if let Some(b) = self.growing[src].take_if(|_| grown) {
                    self.boards[src].push_back(b);
                    self.take_boards(src);
                }
            }
            _ => {
                self.stats.dropped += 1;
                self.spares.give_bytes(data);
            }
        }
    }

    /// Takes `src`'s waiting board broadcasts whose earlier packets are all here.
    fn take_boards(&mut self, src: usize) {
        while let Some(b) = self.boards[src].front() {
            let got = self.got_from[src];
            if (b.after.wrapping_sub(got) as i32) > 0 {
                break;
            }
            let Some(b) = self.boards[src].pop_front() else {
                break;
            };
            self.bc_taken[src] = self.bc_taken[src].wrapping_add(1);
            if b.for_me {
                self.arrived(src as NodeId, b.tag, b.data);
            } else {
                self.spares.give_bytes(b.data);
            }
            self.release(src);
        }
    }

    /// Hands on what `src` sent after board broadcasts that are now taken.
    fn release(&mut self, src: usize) {
        while let Some(p) = self.parked[src].front() {
            if self.still_coming(src, p.bc) {
                break;
            }
            let Some(p) = self.parked[src].pop_front() else {
                break;
            };
            match p.item {
                ParkedItem::Msg { tag, data } => {
                    self.parked_bytes -= data.len();
                    self.arrived(src as NodeId, tag, data);
                }
                ParkedItem::Rts { a, b, c } => self.control(src as NodeId, K_RTS, a, b, c),
            }
        }
    }

    fn match_posted(&mut self, from: Name, tag: i32) -> Option<usize> {
        let i = self
            .posted
            .iter()
            .position(|&c| self.ctxs[RECV][c].peer == from && self.ctxs[RECV][c].tag == tag)?;
        Some(self.posted.remove(i))
    }

    /// A whole message from `src`: into its posted receive, else kept until one is.
    fn arrived(&mut self, src: NodeId, tag: i32, data: Vec<u8>) {
        let Some(from) = self.name_of(src) else {
            self.stats.dropped += 1;
            return;
        };
        match self.match_posted(from, tag) {
            Some(ctx) => {
                self.fill(ctx, &data);
                self.spares.give_bytes(data);
            }
            None => {
                self.stats.unexpected += 1;
                self.unexpected_bytes += data.len();
                self.unexpected.push_back(Unexpected {
                    src,
                    tag,
                    data,
                    rts: None,
                });
            }
        }
    }

    /// Completes receive `ctx` with a whole message.
    fn fill(&mut self, ctx: usize, data: &[u8]) {
        let c = &self.ctxs[RECV][ctx];
        let n = data.len().min(c.len);
        let r = match write_at(&mut self.mem, &c.segs, 0, &data[..n]) {
            Err(_) => Err(QxError::Fault),
            Ok(()) if data.len() > c.len => Err(QxError::Truncated),
            Ok(()) => Ok(()),
        };
        self.stats.messages_received += 1;
        self.complete_recv(ctx, n, r);
    }

    // ------------------------------------------------------------ rendezvous

    /// Starts send `ctx` by rendezvous to each destination that qualifies: at
    /// least [`RENDEZVOUS_MIN`] bytes in one range, not this process, not dead
    /// (a broadcast or multicast asks each member). Returns the others.
    fn ask_rendezvous(&mut self, ctx: usize, to: Vec<NodeId>, data: &TxData) -> Vec<NodeId> {
        let c = &self.ctxs[SEND][ctx];
        let range = match data {
            TxData::Segments(segs) => contiguous(segs),
            TxData::Owned(_) => None,
        };
        let Some((addr, len)) = range.filter(|&(_, n)| n >= RENDEZVOUS_MIN && n == c.len) else {
            return to;
        };
        let (tag, me) = (c.tag, self.engine.config().node);
        let (asked, rest): (Vec<NodeId>, Vec<NodeId>) =
            to.into_iter().partition(|&d| d != me && !self.is_dead(d));
        for dest in asked {
            let h = head(K_RTS, tag, ctx as i32, len as u32);
            self.tx.push_back(TxJob::control(alloc::vec![dest], h));
            self.rndv.push(Rndv {
                ctx,
                dest,
                tag,
                addr,
                len,
                state: RndvState::Asked,
            });
            self.parts[ctx] += 1;
        }
        rest
    }

    /// One part of send `ctx` (a rendezvous, or its packets) ended with `r`; the
    /// send completes with the first error once every part has.
    fn part_done(&mut self, ctx: usize, r: Result<(), QxError>) {
        if let Err(e) = r {
            self.part_error[ctx].get_or_insert(e);
        }
        self.parts[ctx] = self.parts[ctx].saturating_sub(1);
        if self.parts[ctx] == 0 {
            let e = self.part_error[ctx].take();
            self.complete_send(ctx, e.map_or(Ok(()), Err));
        }
    }

    /// A rendezvous request from `src`: granted to a posted receive, else kept in
    /// arrival order with the early messages.
    fn requested(&mut self, src: NodeId, tag: i32, sid: i32, len: usize) {
        let Some(from) = self.name_of(src).filter(|n| n.ai == self.me.ai) else {
            self.stats.dropped += 1;
            return;
        };
        match self.match_posted(from, tag) {
            Some(ctx) => self.grant(src, ctx, sid, len),
            // A sender has at most `CONTEXTS` sends: more is a flood, not a program.
            // No receive yet: the data comes at once as packets and is kept, as a
            // short message would be, so a sender never waits for a receive.
            None if self.unexpected.len() < CONTEXTS * (self.names.len() + 1) => {
                self.stats.unexpected += 1;
                self.unexpected.push_back(Unexpected {
                    src,
                    tag,
                    data: Vec::new(),
                    rts: Some((sid, len)),
                });
                self.clear_to_send(src, sid, -1, 0, 0);
            }
            None => self.stats.dropped += 1,
        }
    }

    /// Grants receive `ctx` to `src`'s rendezvous `sid` of `len` bytes: its range if
    /// it is one (the sender puts there), else packets addressed to it.
    fn grant(&mut self, src: NodeId, ctx: usize, sid: i32, len: usize) {
        if self.is_dead(src) {
            self.complete_recv(ctx, 0, Err(QxError::Dead));
            return;
        }
        let c = &self.ctxs[RECV][ctx];
        let room = len.min(c.len);
        let addr = match contiguous(&c.segs).filter(|_| room > 0) {
            Some((addr, _)) => {
                self.armed.push(Armed {
                    ctx,
                    src,
                    addr,
                    len: room,
                    total: len,
                });
                addr
            }
            None => {
                self.bound[ctx] = Some(src);
                0
            }
        };
        self.clear_to_send(src, sid, ctx as i32, room, addr);
    }

    fn clear_to_send(&mut self, src: NodeId, sid: i32, rctx: i32, room: usize, addr: u64) {
        let mut job = TxJob::control(alloc::vec![src], head(K_CTS, sid, rctx, room as u32));
        job.data = TxData::Owned(addr.to_be_bytes().to_vec());
        job.len = 8;
        self.tx.push_back(job);
    }

    /// The data of kept request `sid` from `src` has all come.
    fn early_arrived(&mut self, src: NodeId, sid: i32, data: Vec<u8>) {
        let kept = self
            .unexpected
            .iter()
            .position(|u| u.src == src && u.rts.is_some_and(|r| r.0 == sid));
        let bound = self
            .early_bound
            .iter()
            .position(|&(s, x, _)| s == src && x == sid);
        match (kept, bound) {
            (Some(i), _) => {
                let u = &mut self.unexpected[i];
                u.data = data;
                u.rts = None;
            }
            (None, Some(b)) => {
                self.unexpected_bytes -= data.len();
                let ctx = self.early_bound.swap_remove(b).2;
                self.fill(ctx, &data);
            }
            (None, None) => {
                self.unexpected_bytes -= data.len();
                self.stats.dropped += 1;
            }
        }
    }

    /// The receiver of rendezvous `sid` granted `granted` bytes at `addr` of its
    /// receive `rctx` (address 0: send packets to that receive; `rctx` -1: no receive
    /// there yet).
    fn cleared(&mut self, src: NodeId, sid: i32, rctx: i32, granted: u32, addr: u64) {
        let i = self.rndv.iter().position(|r| {
            Ok(r.ctx) == usize::try_from(sid) && r.dest == src && r.state == RndvState::Asked
        });
        let Some(i) = i.filter(|_| (-1..CONTEXTS as i32).contains(&rctx)) else {
            self.stats.dropped += 1;
            return;
        };
        let r = self.rndv[i];
        if rctx >= 0 && addr != 0 {
            let len = (granted as usize).min(r.len);
            self.rndv[i].state = RndvState::Granted {
                rctx: rctx as usize,
                addr,
                len,
            };
            return;
        }
        // Packets instead: to receive `rctx` there, or, with no receive there yet
        // (-1), kept by the receiver in the place of request `sid`.
        let to = if rctx < 0 { -(sid + 1) } else { rctx };
        self.rndv.remove(i);
        let h = head(K_MSG_TO, r.tag, to, r.len as u32);
        let data = TxData::Segments(alloc::vec![(r.addr, r.len)]);
        self.tx
            .push_back(TxJob::message(alloc::vec![src], h, r.len, data, r.ctx));
    }

    /// Starts the puts of granted rendezvous.
    fn start_puts(&mut self) -> bool {
        let group = self.engine.config().group;
        let mut busy = false;
        let mut i = 0;
        while i < self.rndv.len() {
            let r = self.rndv[i];
            let RndvState::Granted { rctx, addr, len } = r.state else {
                i += 1;
                continue;
            };
            let mut gate = Gate {
                mem: &mut self.mem,
                armed: &self.armed,
                rung: &mut self.rung,
            };
            let started = self.engine.start_put(
                &mut gate,
                group,
                r.dest,
                addr,
                r.addr,
                len as u32,
                token(SEND, r.ctx),
                token(RECV, rctx),
            );
            match started {
                Ok(()) => {
                    self.rndv[i].state = RndvState::Putting { rctx };
                    busy = true;
                    i += 1;
                }
                Err(Error::NoResources) => i += 1,
                Err(e) => {
                    self.rndv.remove(i);
                    self.end_put(r.ctx, r.dest, rctx, e);
                    busy = true;
                }
            }
        }
        busy
    }

    /// Completes the rendezvous whose bells rang, and those whose puts failed.
    fn settle_rendezvous(&mut self) -> bool {
        let mut busy = false;
        while let Some(t) = self.rung.pop() {
            busy = true;
            match untoken(t) {
                Some((SEND, ctx)) => {
                    let i = self
                        .rndv
                        .iter()
                        .position(|r| r.ctx == ctx && matches!(r.state, RndvState::Putting { .. }));
                    if let Some(i) = i {
                        self.rndv.remove(i);
                        self.stats.messages_sent += 1;
                        self.stats.rendezvous += 1;
                        self.part_done(ctx, Ok(()));
                    }
                }
                Some((_, ctx)) => {
                    if let Some(i) = self.armed.iter().position(|a| a.ctx == ctx) {
                        let a = self.armed.swap_remove(i);
                        let r = if a.total > a.len {
                            Err(QxError::Truncated)
                        } else {
                            Ok(())
                        };
                        self.stats.messages_received += 1;
                        self.complete_recv(ctx, a.len, r);
                    }
                }
                None => {}
            }
        }
        while let Some(f) = self.engine.take_rma_failure() {
            busy = true;
            self.put_failed(f);
        }
        busy
    }

    fn put_failed(&mut self, f: RmaFailure) {
        // The failure names the put by its local bell.
        let i = self.rndv.iter().position(|r| {
            token(SEND, r.ctx) == f.local_bell
                && r.dest == f.node
                && matches!(r.state, RndvState::Putting { .. })
        });
        let Some(i) = i else {
            return;
        };
        let r = self.rndv.remove(i);
        if let RndvState::Putting { rctx } = r.state {
            self.end_put(r.ctx, r.dest, rctx, f.error);
        }
    }

    /// Send `ctx`'s put to receive `rctx` of `dest` failed with `e`: a refused range
    /// fails the receive too (a dead receiver fails nothing more).
    fn end_put(&mut self, ctx: usize, dest: NodeId, rctx: usize, e: Error) {
        let e = match e {
            Error::SendFailure => QxError::Dead,
            Error::BadAddress => QxError::Fault,
            e => e.into(),
        };
        if e != QxError::Dead {
            let h = head(K_FIN, rctx as i32, 0, 0);
            self.tx.push_back(TxJob::control(alloc::vec![dest], h));
        }
        self.part_done(ctx, Err(e));
    }

    /// A registration, join or barrier token from `src`.
    fn control(&mut self, src: NodeId, kind: u8, a: i32, b: i32, c: u32) {
        let me = self.engine.config().node;
        match kind {
            K_REG => {
                let name = Name::new(a, b);
                if src != me && self.app_size != 0 && name == self.me {
                    self.conflict = true;
                }
                if let Some(slot) = self.names.get_mut(src as usize) {
                    if slot.is_none() {
                        *slot = Some((name, c as i32));
                    }
                }
            }
            K_JOIN => {
                let Some(from) = self.name_of(src).filter(|n| n.ai == self.me.ai) else {
                    self.stats.dropped += 1;
                    return;
                };
                let Some(gi) = self.group_index(a) else {
                    return;
                };
                let g = &mut self.groups[gi];
                match g.size {
                    None => g.size = Some(b),
                    Some(s) if s != b => g.bad = true,
                    _ => {}
                }
                if let Err(at) = g.members.binary_search(&(from.pi, src)) {
                    g.members.insert(at, (from.pi, src));
                }
                if g.members.len() as i32 > b {
                    g.bad = true;
                }
            }
            K_RTS => self.requested(src, a, b, c as usize),
            K_FIN => {
                let i = self
                    .armed
                    .iter()
                    .position(|x| Ok(x.ctx) == usize::try_from(a) && x.src == src);
                if let Some(i) = i {
                    let x = self.armed.swap_remove(i);
                    self.complete_recv(x.ctx, 0, Err(QxError::Fault));
                }
            }
            K_BAR => {
                if self.name_of(src).is_none_or(|n| n.ai != self.me.ai) {
                    self.stats.dropped += 1;
                    return;
                }
                let Ok(round) = usize::try_from(b) else {
                    return;
                };
                if round >= 32 {
                    return;
                }
                if let Some(gi) = self.group_index(a) {
                    let t = &mut self.groups[gi].tokens;
                    if t.len() <= round {
                        t.resize(round + 1, 0);
                    }
                    t[round] = t[round].wrapping_add(1);
                }
            }
            _ => self.stats.dropped += 1,
        }
    }

    fn group_index(&mut self, name: i32) -> Option<usize> {
        if let Some(i) = self.groups.iter().position(|g| g.name == name) {
            return Some(i);
        }
        // Groups come from frames: a bound keeps a flood of names from growing it.
        if self.groups.len() >= 1024 {
            return None;
        }
        self.groups.push(GroupState {
            name,
            ..GroupState::default()
        });
        Some(self.groups.len() - 1)
    }

    fn check_joins(&mut self) {
        let mut i = 0;
        while i < self.joins.len() {
            let (ctx, gi) = self.joins[i];
            let g = &self.groups[gi];
            let r = if g.bad {
                Some(Err(QxError::Size))
            } else if g.formed() {
                Some(Ok(()))
            } else if self.app_members().iter().any(|&n| self.dead[n as usize]) {
                Some(Err(QxError::Dead))
            } else {
                None
            };
            match r {
                Some(r) => {
                    self.joins.swap_remove(i);
                    self.complete_send(ctx, r);
                }
                None => i += 1,
            }
        }
    }

    /// Whether a message of `len` bytes to `to` goes once, as packets to every
    /// other process, rather than to each member: the application is the whole
    /// fabric and `to` lists other processes once each (the first packet names
    /// those it is for: the others only count it). Where the device has a board
    /// (the Myrinet-like model's, in NIC memory, which every other process reads)
    /// a message that fits one packet is written there once. Where it has none
    /// (`udp`, `eth`) a message shorter than [`RENDEZVOUS_MIN`] goes down the
    /// engine's binomial tree of relays, its first packet followed by `K_MORE`
    /// parts: log n steps instead of n - 1 sends by the root; a longer one is
    /// written by rendezvous straight into each member's receive. Both are called
    /// board broadcasts here. Others keep going member by member, and so does every
    /// broadcast down a tree once a process of the application is dead (its relays
    /// may be gone).
    ///
    /// QNIX matches a sender's messages in the order sent; a board packet is read
    /// apart from the rings (and may pass packets still queued for a full ring),
    /// so order is kept at both ends. The board packet carries, for every
    /// process, how many packets the sender had launched to it; a receiver takes
    /// the broadcast only once it has taken that many from the sender. Every
    /// message or rendezvous request sent afterwards carries the sender's count of
    /// board broadcasts, and a receiver keeps one back (with whatever follows it
    /// from that sender) until it has taken that many of them.
    fn goes_once(&self, to: &[NodeId], len: usize) -> bool {
        let me = self.engine.config().node as usize;
        let n = self.engine.size() as usize;
        if to.is_empty() || to.len() >= n {
            return false;
        }
        let Some(gi) = self.groups.iter().position(|g| g.name == self.me.ai) else {
            return false;
        };
        if !self.whole_fabric(gi) {
            return false;
        }
        // Every destination once, and not this process: a bitmap on the stack.
        let mut seen = [0u64; 64];
        if n > seen.len() * 64 {
            return false;
        }
        seen[me / 64] |= 1 << (me % 64);
        for &d in to {
            let d = d as usize;
            if d >= n || seen[d / 64] & (1 << (d % 64)) != 0 {
                return false;
            }
            seen[d / 64] |= 1 << (d % 64);
        }
        // Down the tree in as many packets as it takes, below the rendezvous size
        // (a longer one is written straight into each member's receive).
        let prefix = board_prefix(n);
        self.engine.board_takes_packet(prefix + len)
            || (len < RENDEZVOUS_MIN
                && self.engine.tree_takes_packet(prefix + 1)
                && self.engine.packet_size() > HEAD
                && !self.any_dead())
    }

    /// Whether a process of the fabric was found dead.
    fn any_dead(&self) -> bool {
        self.dead.iter().any(|&d| d)
    }

    /// Whether group `gi` is the application's own group and the application is
    /// every endpoint of the fabric: its barriers are then the engine's barrier (in
    /// NIC memory where the device has one, seed 3's "NIC" doing the work). Only
    /// that group may use it: the engine has one barrier sequence, which every
    /// member must take in the same order, and a process runs the barriers of one
    /// group one at a time ([`QxError::Busy`]) while those of different groups may
    /// interleave differently at each member. Another application on the fabric
    /// would have to arrive too, so then the group runs its own barrier.
    fn whole_fabric(&self, gi: usize) -> bool {
        let g = &self.groups[gi];
        let n = g.members.len();
        g.name == self.me.ai && n == self.names.len() && n == self.engine.size() as usize
    }

    /// The application group's barrier on the engine: it starts once every job
    /// queued before it was handed to the engine (where a token would have been
    /// queued), and ends when the engine's does: a dead member fails it.
    fn advance_engine_barrier(&mut self, i: usize) -> Option<Result<(), QxError>> {
        let b = &mut self.barriers[i];
        if !b.sent {
            if !self.tx.is_empty() {
                return None;
            }
            if let Err(e) = self.engine.start_barrier() {
                return Some(Err(e.into()));
            }
            b.sent = true;
        }
        match self.engine.barrier_done() {
            Ok(true) => {
                self.stats.engine_barriers += 1;
                Some(Ok(()))
            }
            Ok(false) => None,
            Err(e) => Some(Err(e.into())),
        }
    }

    /// Dissemination barrier: in round k, a token to the member 2^k after this one
    /// (in PI order), and wait for the one from the member 2^k before.
    fn advance_barriers(&mut self) -> bool {
        let me = self.engine.config().node;
        let mut busy = false;
        let mut i = 0;
        while i < self.barriers.len() {
            if self.barriers[i].on_engine {
                let started = self.barriers[i].sent;
                let result = self.advance_engine_barrier(i);
                busy |= started != self.barriers[i].sent;
                if let Some(r) = result {
                    let b = self.barriers.swap_remove(i);
                    self.groups[b.group].barrier_active = false;
                    if r.is_ok() {
                        self.stats.barriers += 1;
                    }
                    self.complete_send(b.ctx, r);
                    busy = true;
                } else {
                    i += 1;
                }
                continue;
            }
            let b = &mut self.barriers[i];
            let g = &mut self.groups[b.group];
            let n = g.members.len();
            let my = g.members.iter().position(|m| m.1 == me).unwrap_or(0);
            let result = loop {
                let step = 1usize << b.round;
                if step >= n {
                    break Some(Ok(()));
                }
                if !b.sent {
                    let to = g.members[(my + step) % n].1;
                    let h = head(K_BAR, g.name, b.round as i32, b.epoch);
                    self.tx.push_back(TxJob::control(alloc::vec![to], h));
                    b.sent = true;
                    busy = true;
                }
                let from = g.members[(my + n - step) % n].1;
                if self.dead[from as usize] {
                    break Some(Err(QxError::Dead));
                }
                if g.tokens.get(b.round as usize).copied().unwrap_or(0) > b.epoch {
                    b.round += 1;
                    b.sent = false;
                    busy = true;
                } else {
                    break None;
                }
            };
            match result {
                Some(r) => {
                    g.barrier_active = false;
                    let ctx = b.ctx;
                    self.barriers.swap_remove(i);
                    if r.is_ok() {
                        self.stats.barriers += 1;
                    }
                    self.complete_send(ctx, r);
                    busy = true;
                }
                None => i += 1,
            }
        }
        busy
    }

    fn notice_dead(&mut self) {
        while let Some(n) = self.engine.take_packet_failure() {
            let Some(d) = self.dead.get_mut(n as usize) else {
                continue;
            };
            *d = true;
            // What it sent after a broadcast that never came waits for nothing now.
            let gone: usize = self.parked[n as usize]
                .drain(..)
                .map(|p| match p.item {
                    ParkedItem::Msg { data, .. } => data.len(),
                    ParkedItem::Rts { .. } => 0,
                })
                .sum();
            self.parked_bytes -= gone;
            self.boards[n as usize].clear();
            self.growing[n as usize] = None;
            self.cut_off_below(n);
            if let Some(name) = self.name_of(n) {
                let mut k = 0;
                while k < self.posted.len() {
                    let ctx = self.posted[k];
                    if self.ctxs[RECV][ctx].peer == name {
                        self.posted.remove(k);
                        self.complete_recv(ctx, 0, Err(QxError::Dead));
                    } else {
                        k += 1;
                    }
                }
            }
            let st = core::mem::take(&mut self.rx[n as usize]);
            match st.target {
                Target::Direct(ctx) if st.active => {
                    self.complete_recv(ctx, 0, Err(QxError::Dead));
                }
                Target::Buffer(v) | Target::Early(_, v) => self.unexpected_bytes -= v.len(),
                _ => {}
            }
            self.end_rendezvous_with(n);
        }
    }

    /// Where board broadcasts go down a tree, those of a root whose tree reaches
    /// this process through dead `n` that are not here now never come: what the
    /// root sent after them waits for nothing (QNIX's order holds for what
    /// arrives; a broadcast a dead relay did not pass on is lost, as with LFC's
    /// multicast).
    fn cut_off_below(&mut self, n: NodeId) {
        if !self.engine.tree_takes_packet(0) {
            return;
        }
        let me = self.engine.config().node;
        for root in 0..self.dead.len() {
            let r = root as NodeId;
            if r == me || self.dead[root] || self.cut_off[root] {
                continue;
            }
            if self.engine.relayed_through(r, n, Tree::Binomial) {
                self.cut_off[root] = true;
                self.growing[root] = None;
                self.release(root);
            }
        }
    }

    /// Rendezvous with dead `n` fail: sends to it, receives granted to it.
    fn end_rendezvous_with(&mut self, n: NodeId) {
        let mut k = 0;
        while k < self.rndv.len() {
            if self.rndv[k].dest == n {
                let r = self.rndv.remove(k);
                self.part_done(r.ctx, Err(QxError::Dead));
            } else {
                k += 1;
            }
        }
        let mut k = 0;
        while k < self.armed.len() {
            if self.armed[k].src == n {
                let a = self.armed.swap_remove(k);
                self.complete_recv(a.ctx, 0, Err(QxError::Dead));
            } else {
                k += 1;
            }
        }
        for ctx in 0..CONTEXTS {
            if self.bound[ctx] == Some(n) {
                self.bound[ctx] = None;
                self.complete_recv(ctx, 0, Err(QxError::Dead));
            }
        }
        self.unexpected.retain(|u| u.src != n || u.rts.is_none());
    }

    fn idle_step(&mut self, busy: bool) {
        self.idle.step(busy, &self.clock);
    }

    // ------------------------------------------------------------ accessors

    /// Whether [`Qnix::register`] has completed.
    pub fn is_registered(&self) -> bool {
        self.registered
    }
    /// Whether `node` was found dead.
    pub fn is_dead(&self, node: NodeId) -> bool {
        self.dead.get(node as usize).copied().unwrap_or(false)
    }
    /// Counters.
    pub fn stats(&self) -> QnixStats {
        self.stats
    }
    /// The memory the NIC reaches.
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// The memory the NIC reaches, to change.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }
    /// The engine.
    pub fn engine(&self) -> &Engine<'a> {
        &self.engine
    }
    /// The engine, to change: what is sent through it bypasses QNIX's protocol
    /// (tools, and tests that play a misbehaving peer).
    pub fn engine_mut(&mut self) -> &mut Engine<'a> {
        &mut self.engine
    }
    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }
    /// The device, to change.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.dev
    }
    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
    /// When the engine next needs a step (`None`: only when a frame comes).
    pub fn poll_at(&self) -> Option<Instant> {
        let now = self.clock.now();
        if !self.queue.is_empty() || !self.tx.is_empty() {
            return Some(now);
        }
        self.engine.poll_at(now)
    }
}

impl TxJob {
    fn control(dests: Vec<NodeId>, head: [u8; HEAD]) -> Self {
        Self::new(dests, head, 0, TxData::Owned(Vec::new()), None)
    }

    /// Message `head` of `len` bytes of `data` for send context `ctx`.
    fn message(dests: Vec<NodeId>, head: [u8; HEAD], len: usize, data: TxData, ctx: usize) -> Self {
        Self::new(dests, head, len, data, Some(ctx))
    }

    fn new(
        dests: Vec<NodeId>,
        head: [u8; HEAD],
        len: usize,
        data: TxData,
        ctx: Option<usize>,
    ) -> Self {
        TxJob {
            dests,
            board: false,
            at: 0,
            off: 0,
            started: false,
            head,
            len,
            data,
            ctx,
            failed: None,
        }
    }

    /// `n` more bytes of a board or tree broadcast went (its first packet, then
    /// `K_MORE` parts); whether that was the last.
    fn tree_part_sent(&mut self, n: usize) -> bool {
        self.started = true;
        self.off += n;
        if self.off < self.len {
            return false;
        }
        self.at = self.dests.len();
        true
    }

    fn next_dest(&mut self) {
        self.at += 1;
        self.off = 0;
        self.started = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cheetah::Segments;

    #[test]
    fn peers_reach_only_granted_ranges_and_bells() {
        let mut buf = [0u8; 256];
        let mut mem = Segments::new();
        let base = mem.expose(&mut buf);
        let armed = [Armed {
            ctx: 5,
            src: 1,
            addr: base + 64,
            len: 64,
            total: 64,
        }];
        let mut rung = Vec::new();
        let mut g = Gate {
            mem: &mut mem,
            armed: &armed,
            rung: &mut rung,
        };
        let peer = Access::PeerWrite;
        assert_eq!(g.check(base + 64, 64, peer), Ok(()));
        assert_eq!(g.check(base + 100, 8, peer), Ok(()));
        for (addr, len) in [
            (base + 63, 2),
            (base + 120, 9),
            (base, 8),
            (base + 64, u64::MAX),
        ] {
            assert_eq!(
                g.check(addr, len, peer),
                Err(Error::BadAddress),
                "{addr:#x}+{len}"
            );
        }
        assert_eq!(
            g.check(base + 64, 8, Access::PeerRead),
            Err(Error::BadAddress)
        );
        // The process itself reaches all of its memory.
        assert_eq!(g.check(base, 256, Access::Read), Ok(()));
        assert_eq!(g.check(base, 256, Access::Write), Ok(()));
        // Bells: a granted receive's, for peers; never another context's or a send's.
        assert_eq!(g.check(token(RECV, 5), 4, peer), Ok(()));
        assert_eq!(g.check(token(RECV, 6), 4, peer), Err(Error::BadAddress));
        assert_eq!(g.check(token(SEND, 5), 4, peer), Err(Error::BadAddress));
        assert_eq!(
            g.check(token(RECV, 5), 4, Access::Write),
            Err(Error::BadAddress)
        );
        g.ring(token(SEND, 3));
        g.ring(base + 64);
        assert_eq!(rung, [token(SEND, 3)], "memory is never rung");
        assert_eq!(
            untoken(token(RECV, CONTEXTS - 1)),
            Some((RECV, CONTEXTS - 1))
        );
        assert_eq!(untoken(token(RECV, CONTEXTS - 1) + 4), None);
        assert_eq!(untoken(token(SEND, 0) + 2), None);
    }

    #[cfg(feature = "std")]
    type SimNode = crate::sim::SimQnix<'static, Segments<'static>>;

    /// `n` registered processes of application 5 in the simulator, each with one
    /// segment of `len` bytes at `1 << 40` (the first segment exposed).
    #[cfg(feature = "std")]
    fn sim_app(n: u16, len: usize, seed: u64) -> crate::sim::Sim<SimNode> {
        use crate::engine::{Group, Members};
        use crate::sim::{Sim, SimConfig};
        let groups: &'static [Group<'static>] = Vec::leak(alloc::vec![Group {
            id: 1,
            members: Members::Range { first: 0, count: n },
        }]);
        let mut sim = Sim::new(n as usize, SimConfig::lan(seed), |i, dev, clock| {
            let mut mem = Segments::new();
            assert_eq!(mem.expose(Vec::leak(alloc::vec![0u8; len])), 1 << 40);
            let c = Config::new(9, 1, i as u16);
            let q: SimNode = Qnix::new(c, groups, n as usize, dev, clock, mem).unwrap();
            q
        });
        for (i, q) in sim.nodes.iter_mut().enumerate() {
            q.register(Name::new(5, i as i32), 5, n as i32).unwrap();
        }
        let limit = sim.now() + Duration::from_secs(10);
        sim.run_until(limit, |n, _| n.iter_mut().all(|q| q.registered().unwrap()))
            .unwrap();
        sim
    }

    /// A put the receiver refuses (here: its grant moved under it) fails the send
    /// at the sender with `Fault`, and the receive with it (`K_FIN`): no hang.
    #[cfg(feature = "std")]
    #[test]
    fn a_refused_rendezvous_put_fails_both_ends() {
        let len = 64 * 1024;
        let base = 1u64 << 40;
        let mut sim = sim_app(2, len, 0x5e7);
        let seg = Region::Segments(alloc::vec![(base, len)]);
        let r = sim.nodes[1].recv_context(Name::new(5, 0), 1, true, 0, len, seg.clone());
        let r = r.unwrap();
        sim.nodes[1].receive(r).unwrap();
        let s = sim.nodes[0].send_context(Name::new(5, 1), 1, true, 0, len, seg);
        let s = s.unwrap();
        sim.nodes[0].send(s).unwrap();
        let limit = sim.now() + Duration::from_secs(10);
        sim.run_until(limit, |n, _| !n[1].armed.is_empty()).unwrap();
        sim.nodes[1].armed[0].addr += 1;
        let limit = sim.now() + Duration::from_secs(10);
        sim.run_until(limit, |n, _| {
            n[0].send_doorbell(s) != BUSY && n[1].recv_doorbell(r) != BUSY
        })
        .unwrap();
        assert_eq!(sim.nodes[0].poll_for_send(s), Err(QxError::Fault));
        assert_eq!(sim.nodes[1].poll_for_receive(r), Err(QxError::Fault));
        assert!(sim.nodes[1].armed.is_empty());
    }

    /// Every doorbell write is in the changed masks once, until taken: a facade
    /// that copies only those (the C ABI's HPS) misses no change.
    #[test]
    fn changed_bells_name_every_doorbell_written() {
        let len = 64;
        let mut sim = sim_app(2, len, 0xbe11);
        let data = Region::Data(alloc::vec![9; len]);
        let seg = Region::Segments(alloc::vec![(1u64 << 40, len)]);
        for n in &mut sim.nodes {
            n.take_changed_bells();
        }
        let r = sim.nodes[1].recv_context(Name::new(5, 0), 3, true, 1, len, seg);
        let r = r.unwrap();
        assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "made FREE");
        sim.nodes[1].receive(r).unwrap();
        assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "BUSY");
        assert_eq!(sim.nodes[1].take_changed_bells(), [0, 0], "taken");
        let s = sim.nodes[0].send_context(Name::new(5, 1), 3, true, 1, len, data);
        let s = s.unwrap();
        sim.nodes[0].send_short(s).unwrap();
        assert_eq!(sim.nodes[0].take_changed_bells(), [1 << s, 0]);
        // A short send may be done by the time the call returns.
        let rung = sim.nodes[0].send_doorbell(s) == DONE;
        let limit = sim.now() + Duration::from_secs(10);
        sim.run_until(limit, |n, _| {
            n[0].send_doorbell(s) == DONE && n[1].recv_doorbell(r) == DONE
        })
        .unwrap();
        let changed = [if rung { 0 } else { 1 << s }, 0];
        assert_eq!(sim.nodes[0].take_changed_bells(), changed, "DONE");
        assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "DONE");
        assert_eq!(sim.nodes[1].poll_for_receive(r), Ok(len));
        assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "FREE again");
        assert_eq!(sim.nodes[1].recv_doorbell(r), FREE);
    }

    /// A peer of the application that sends packets with random heads (every kind,
    /// random fields and lengths) panics nothing, completes no receive posted for
    /// another sender, and leaves the process working: a real message from that
    /// sender then lands whole.
    #[cfg(feature = "std")]
    #[test]
    fn random_heads_from_a_peer_break_nothing() {
        let seed = 0x4ead;
        let len = 64 * 1024;
        let base = 1u64 << 40;
        let mut sim = sim_app(3, len, seed);
        let from2 = Name::new(5, 2);
        let seg = |off: u64, n: usize| Region::Segments(alloc::vec![(base + off, n)]);
        let r = sim.nodes[0].recv_context(from2, 7, true, 0, 20_000, seg(0, 20_000));
        let r = r.unwrap();
        sim.nodes[0].receive(r).unwrap();
        let mut rng = crate::rng::Rng::new(seed);
        for k in 0..3000 {
            let q = &mut sim.nodes[1];
            let Ok(id) = q.engine.packet_alloc() else {
                let limit = sim.now() + Duration::from_millis(1);
                let _ = sim.run_until(limit, |_, _| false);
                continue;
            };
            let size = q.engine.packet_size();
            let n = (rng.below(size as u64 + 1) as usize).max(if k % 2 == 0 { HEAD } else { 0 });
            let p = q.engine.packet_mut(id).unwrap();
            for b in p[..n].iter_mut() {
                *b = rng.next_u64() as u8;
            }
            if n >= 1 {
                // Mostly known kinds, so that every parser is reached.
                p[0] = rng.below(10) as u8;
            }
            if n >= 16 && k % 3 == 0 {
                // Small fields now and then: real context indices and lengths.
                p[8..12].copy_from_slice(&(rng.below(70) as i32 - 3).to_be_bytes());
                p[12..16].copy_from_slice(&(rng.below(100_000) as u32).to_be_bytes());
            }
            q.engine.launch_unicast(id, 0, n).unwrap();
            let limit = sim.now() + Duration::from_micros(50);
            let _ = sim.run_until(limit, |_, _| false);
        }
        let limit = sim.now() + Duration::from_millis(200);
        let _ = sim.run_until(limit, |_, _| false);
        let heard = sim.nodes[0].engine().stats().rx_frames;
        assert!(heard > 2500, "the packets arrived: {heard}");
        assert_eq!(sim.nodes[0].recv_doorbell(r), BUSY, "seed {seed:#x}");
        // Process 2 sends the real message (by rendezvous: 20 KB from one range).
        let data: Vec<u8> = (0..20_000).map(|i| (i * 7 % 251) as u8).collect();
        let q = &mut sim.nodes[2];
        q.memory_mut().segment_mut(base).unwrap()[..20_000].copy_from_slice(&data);
        let s = q.send_context(Name::new(5, 0), 7, true, 0, 20_000, seg(0, 20_000));
        let s = s.unwrap();
        q.send(s).unwrap();
        let limit = sim.now() + Duration::from_secs(10);
        sim.run_until(limit, |n, _| {
            n[0].recv_doorbell(r) != BUSY && n[2].send_doorbell(s) != BUSY
        })
        .unwrap();
        assert_eq!(
            sim.nodes[0].poll_for_receive(r),
            Ok(20_000),
            "seed {seed:#x}"
        );
        assert!(sim.nodes[0].memory().segment(base).unwrap()[..20_000] == data[..]);
        assert_eq!(sim.nodes[2].poll_for_send(s), Ok(()));
    }

    #[test]
    fn only_adjacent_segments_are_one_range() {
        assert_eq!(contiguous(&[(100, 10), (110, 5)]), Some((100, 15)));
        assert_eq!(contiguous(&[(100, 10), (111, 5)]), None);
        assert_eq!(contiguous(&[]), None);
        assert_eq!(contiguous(&[(u64::MAX - 1, 5)]), None);
    }
}
