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

use crate::endpoint::Endpoint;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::engine::{
    Access, Capacity, Config, Delivery, Engine, Error, Group, Memory, RmaFailure, Storage,
    Transfer, Tree, MCAST_ALL,
};
use crate::phy::Device;
use crate::time::{Clock, Duration, Instant};
use crate::NodeId;

mod board;
mod commands;
mod contexts;
mod error;
mod groups;
mod memory;
mod names;
mod nic;
mod receive;
mod rendezvous;
#[cfg(test)]
mod tests;
mod wire;

use board::*;
use commands::*;
use contexts::*;
pub use error::QxError;
use groups::*;
pub use memory::Region;
use memory::*;
pub use names::Name;
use nic::*;
use receive::*;
use rendezvous::*;
use wire::*;

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

/// Which context list: send or receive.
const SEND: usize = 0;
const RECV: usize = 1;

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
    ep: Endpoint<'a, D, C>,
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
    /// Posting calls since the last full step.
    posts_since_step: u32,
}

crate::endpoint::deref_endpoint!(Qnix, 'a, D, C, M);

impl<D, C, M> core::fmt::Debug for Qnix<'_, D, C, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Qnix")
            .field("me", &self.me)
            .field("engine", &self.ep.engine)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
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
            ep: Endpoint::new(engine, dev, clock),
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
            posts_since_step: 0,
        })
    }

    /// How long [`Qnix::init`] waits for the application (60 s by default).
    pub fn set_init_timeout(&mut self, t: Duration) {
        self.init_timeout = t;
    }

    /// The NIC step: consumes the command queue, receives, transmits, advances joins
    /// and barriers and notices dead peers. Whether anything happened.
    pub fn step(&mut self) -> bool {
        self.posts_since_step = 0;
        let now = self.ep.clock.now();
        if now.saturating_since(self.last_keepalive) >= self.ep.engine.config().keepalive {
            self.last_keepalive = now;
            self.ep.engine.keepalive_all(now);
        }
        let mut busy = self.consume_queue();
        let mut gate = Gate {
            mem: &mut self.mem,
            armed: &self.armed,
            rung: &mut self.rung,
        };
        busy |= self
            .ep
            .engine
            .poll_mem(now, &mut self.ep.dev, None, &mut gate);
        busy |= self.receive_packets();
        self.notice_dead();
        busy |= self.settle_rendezvous();
        busy |= self.advance_barriers();
        self.check_joins();
        busy |= self.send_out(Some(now));
        busy
    }

    fn notice_dead(&mut self) {
        while let Some(n) = self.ep.engine.take_packet_failure() {
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
    /// When the engine next needs a step (`None`: only when a frame comes).
    pub fn poll_at(&self) -> Option<Instant> {
        let now = self.ep.clock.now();
        if self.work_waiting() {
            return Some(now);
        }
        self.ep.engine.poll_at(now)
    }

    /// Whether the next step has work with no frame arriving: commands waiting for
    /// the NIC (an event loop steps before it sleeps).
    pub fn work_waiting(&self) -> bool {
        !self.queue.is_empty() || !self.tx.is_empty()
    }

    /// When a step next probes the peers (`Config::keepalive`): an event loop
    /// that sleeps wakes then too, so that a peer's death is found meanwhile.
    pub fn keepalive_at(&self) -> Option<Instant> {
        Some(self.last_keepalive + self.ep.engine.config().keepalive)
    }
}
