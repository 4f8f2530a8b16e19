//! `volley-myri`: a software model of a Myrinet/LANai-style NIC on shared memory.
//!
//! The model runs on any region of memory that the nodes share: a `/dev/shm` mapping
//! between processes, or an `ivshmem` BAR between virtual machines. It is a *reliable*
//! link in the sense of the core's device trait: frames are never dropped, duplicated
//! or reordered, so the engine takes its credit-only fast path.
//!
//! # Region layout (all integers little-endian, offsets in bytes)
//!
//! | offset | size | what |
//! |-------:|-----:|------|
//! | 0 | 8 | magic `"VOLLEYMY"` (`0x594D_5945_4C4C_4F56`), written last by the creator |
//! | 8 | 4 | layout version ([`VERSION`]) |
//! | 12 | 4 | `nodes` |
//! | 16 | 4 | `slots` per ring (a power of two) |
//! | 20 | 4 | `slot_size` (a multiple of 64) |
//! | 24 | 8 | `generation`: the job this region belongs to |
//! | 32 | 4 | `board_slot`: bytes per broadcast board slot (a multiple of 64) |
//! | 64 + 64 i | 64 | node *i*: `state` u32 (0 absent, 1 alive, 2 exited, 3 dead), `pid` u32, `generation` u64, `heartbeat` u64, `host` u64, `host_version` u64, `beacon` u64 |
//! | 64 + 64 nodes + 128 i | 128 | node *i*'s barrier words: `arrived` u32 at 0, `released` u32 at 64 (each on its own cache line); its interrupt word `irq` u32 at 8 (see below) |
//! | 64 + 192 nodes | 64 | `boards`: u64, the broadcast board frames all nodes have written (see below) |
//! | `H` = align4096(128 + 192 nodes) | | NIC memory of node 0, then node 1, ... |
//!
//! NIC memory of node *d* (`nic_size = 64 + nodes * ring_size + heads + BOARD_SLOTS * board_slot + POOL_SLOTS * POOL_SLOT`):
//!
//! | offset | size | what |
//! |-------:|-----:|------|
//! | 0 | 64 | 8 fetch-and-add counters, u64 each, start at 0 |
//! | 64 + s * ring_size | ring_size | the ring from node *s* to node *d* |
//! | `B` = 64 + nodes * ring_size | `heads` = align64(8 nodes) | u64 *r*: frames of node *r*'s board that *d* has read; bit 63 ([`HELD`]): *d* holds the next one back for its program |
//! | `B + heads` | `BOARD_SLOTS * board_slot` | *d*'s broadcast board (`board_slot`: by default `min(slot_size, 4224)`, a 4 KiB broadcast with its headers; hosted `shm` takes 65664, a frame of 64 KiB) |
//! | `P` = `B + heads + BOARD_SLOTS * board_slot` | `POOL_SLOTS * POOL_SLOT` | *d*'s send slots ([`POOL_SLOTS`] of [`POOL_SLOT`] bytes) |
//!
//! A ring (`ring_size = 256 + slots * slot_size`) is single-producer (node *s*),
//! single-consumer (node *d*): `tail` (u64, producer's cache line) at 0, `head` (u64,
//! consumer's cache line) at 64, the template (16 bytes, see below) at 128, then the
//! slots from 256. (A slot's first line then shares its 128-byte pair, which the
//! hardware may fetch together, with the end of the slot before, as it did before
//! the template was added; slots from 192 measured slower.) A slot holds a
//! sequence word (u64) at 0, the frame length (u32) at 8 and the frame at 16, at most
//! `slot_size - 16` bytes. The producer writes frame and length, then stores the
//! frame's number + 1 into the sequence word with release ordering (and advances
//! `tail`); the consumer polls the sequence word of slot `head` with acquire, so a
//! small frame costs it one cache line, reads the frame, then stores `head` with
//! release. Credits are the free slots, `slots - (tail - head)`; the producer reloads
//! `head` only when its cached copy says the ring is full.
//!
//! A frame of 56 to 64 bytes (a Volley header with at most 8 bytes of payload) would
//! spill into the slot's second cache line, and the consumer would wait for two line
//! transfers instead of one; one of 113 to 128 bytes (57 to 72 bytes of payload: a
//! 64-byte message) into its third. Such a frame travels *compact* when its bytes
//! 4..16 and 52..56 (the wire format's `PAIR_INVARIANT`: job, addresses and CRC,
//! the same in every frame on a ring) equal the ring's template: the length word has bit 30
//! ([`COMPACT`]) set and the rest is the frame's length less [`ELIDED`], and the
//! frame area holds bytes 0..4, 16..52 and 56.. of the frame, one line fewer. The
//! consumer puts the template's bytes back.
//! The producer fills such a frame outside the slot and rewrites the template (bytes
//! 4..16 then 52..56) only when the consumer has read every earlier frame; otherwise
//! a frame that does not match goes whole. Any frame's bytes go through unchanged.
//!
//! # Send slots and frames sent from them
//!
//! A node's send slots hold packets its program wrote straight into NIC memory (LFC's
//! `lfc_send_alloc`). A frame whose payload is in one is not copied into the ring: its
//! ring slot holds a descriptor, and the length word has bit 31 ([`INDIRECT`]) set
//! and the rest is the inline part's length. The frame area then holds the send
//! slot's index (u16) at 0, the length of what comes before the payload (u16) at 2,
//! the payload length (u32) at 4, and the inline part (what comes before the payload
//! and what comes after it: the header and the tag, at most [`INDIRECT_INLINE_MAX`]
//! bytes) at 8. Payloads up to [`POOL_INLINE`] bytes are copied into the ring slot
//! instead, as a NIC inlines short sends. The consumer reads
//! the payload from the producer's send slot while it holds the ring slot, the way a
//! NIC fetches a packet from its send buffer as it goes out. The producer rewrites a
//! send slot only once every ring slot that names it has been consumed (the engine
//! reuses a packet only after the receiver acknowledged it, which it does after
//! consuming it). A consumer reads only the send slots of the ring's producer, so no
//! node can point a peer at another node's memory.
//!
//! # Broadcast board
//!
//! A node writes a frame meant for every other node once, into its own board: a
//! ring of [`BOARD_SLOTS`] slots laid out like a ring's (sequence word, length,
//! frame) with one producer and every other node as a consumer. Each consumer
//! polls the sequence word of the next slot of every board, reads the frame in
//! place, then stores how many it has read into its own `heads` word for that board
//! (its own cache line, in its own NIC memory). The producer writes slot `t` only
//! once every consumer that has not left or died has read frame `t - BOARD_SLOTS`;
//! it reloads those words only when its cached minimum says the board is full.
//! Once a frame is published, its writer adds one to the header's `boards` count: a
//! consumer looks at the boards only when that count has moved since it last found
//! nothing on them, so a poll costs one load however many nodes the job has.
//!
//! # Barrier
//!
//! The barrier runs in NIC memory, without frames: a combining tree of fan-in
//! [`BARRIER_FANIN`] laid over the members' positions (position `p`'s children are
//! `4p + 1 ..= 4p + 4`). Barrier number `e` (counted from 0) has the target `e + 1`.
//! A member stores the target into its `arrived` word once every child's `arrived`
//! word has reached it (so the word speaks for the whole subtree); the root then
//! stores it into its `released` word, which every member polls. The NIC counts the
//! barriers its node has completed (engines taking turns on one NIC continue one
//! sequence). Each word has one writer and its own cache line: a member's arrival
//! costs its parent one line transfer, and the release one more per member.
//! Counting instead of flipping a sense bit means no word is ever reset;
//! comparisons wrap.
//!
//! # Start-up and liveness
//!
//! The creator (rank 0) clears the magic, zeroes the region, writes the geometry and
//! the job's `generation`, then writes the magic (release). A joining node waits until
//! magic, version and generation all match ([`MyriError::NotReady`] until then), so a
//! region left over by an earlier job is never joined. Each node then marks itself
//! alive; [`MyriNic::all_joined`] is the start-up barrier. A node bumps its heartbeat on
//! every receive poll; a peer whose state is not *alive*, or whose heartbeat has not
//! moved for [`NicConfig::dead_after`], is reported dead through the device trait's
//! `peer_alive`, and the engine fails sends to it instead of waiting. Such a reader
//! holding a broadcast board full is marked dead in the node table by the writer, so
//! the board goes on for the others (no launcher watches a VM's process). A node's
//! `beacon` word holds the host's clock as a helper of its process last wrote it,
//! whatever its program does ([`Beacon`]): where the nodes share that clock
//! ([`NicConfig::host_clock`]), a peer whose beacon beat within [`VOUCH_WINDOW`] is
//! alive though it does not poll, and `peer_vouched` tells the engine so.
//!
//! # Interrupts
//!
//! A node's program that wants to sleep until a frame comes asks its NIC for an
//! interrupt, as a Myrinet host enables the LANai's: it stores [`IRQ_ARMED`] into its
//! `irq` word, then looks at its rings and board once more ([`MyriNic::arm_interrupt`]).
//! A producer, once it has published a frame into a ring or its board, looks at the
//! consumer's `irq` word; if armed, it moves it to [`IRQ_RAISED`] (one producer wins)
//! and calls the host's [`NicConfig::interrupt`] with it (a futex wake when hosted).
//! Both sides put a full fence between their store and their load, so either the
//! producer sees the word armed or the consumer sees the frame: no frame is left
//! unannounced to a sleeper. A word that is not armed costs a producer a fence and a
//! load of a line that only arming writes; without an `interrupt` hook, nothing.
//!
//! # Host words
//!
//! A node's `host` and `host_version` words are what its program tells peers on
//! the same host through the NIC, as a Myrinet host tells its LANai where its
//! registered memory lies ([`MyriNic::publish_host`], [`MyriNic::host`]). The model
//! gives them no meaning; they start at 0 and only their node writes them. Volley's
//! hosted Cheetah core puts the address of its table of exposed memory there, and
//! bumps the version around each change of that table (odd while changing).
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use volley_core::phy::{
    BarrierMembers, BarrierPoll, BoardTake, Capabilities, Device, RxToken, TxToken,
};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;

mod region;
pub use region::Region;

mod board;
mod compact;
mod device;
mod interrupt;
mod layout;
mod liveness;
mod services;
mod token;

use compact::*;
pub use compact::{COMPACT, COMPACT_MAX, COMPACT_ONE, COMPACT_TWO_MIN, ELIDED};
pub use layout::Geometry;
use layout::*;
use liveness::*;
pub use liveness::{Beacon, VOUCH_WINDOW};
use token::*;
pub use token::{MyriRx, MyriTx};

/// `"VOLLEYMY"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"VOLLEYMY");
/// Layout version (10: each node's interrupt word; 9: the header counts the board
/// frames written; 8: a beacon word in each node's entry; 7: frames of 113 to 128
/// bytes travel compact too).
pub const VERSION: u32 = 10;

/// A node's interrupt word: its program polls, no interrupt wanted.
pub const IRQ_QUIET: u32 = 0;
/// A node's interrupt word: its program sleeps until the next frame for it.
pub const IRQ_ARMED: u32 = 1;
/// A node's interrupt word: a producer raised the interrupt its program armed.
pub const IRQ_RAISED: u32 = 2;

/// Frames in a row that a look at the rings takes from one sender, beginning
/// with its ring, before it begins with the next node's: a peer that keeps its
/// ring full delays another's frame by at most this many.
pub const RX_BURST: u32 = 16;
/// Most nodes a region can hold.
pub const MAX_NODES: usize = 256;
/// Fetch-and-add counters per node.
pub const COUNTERS: usize = 8;
/// Children per position in the barrier's combining tree.
pub const BARRIER_FANIN: u16 = 4;
/// Slots in each node's broadcast board.
pub const BOARD_SLOTS: u64 = 16;

/// Bit of a reader's `heads` word: it holds the next frame of that board back
/// until its program acts ([`BoardTake::Held`]); the writer's barrier need not wait
/// for it. The count is in the other bits.
pub const HELD: u64 = 1 << 63;
/// Send slots in each node's NIC memory.
pub const POOL_SLOTS: usize = 64;
/// Bytes per send slot.
pub const POOL_SLOT: usize = 1024;
/// Payloads up to this many bytes from a send slot are copied into the ring slot
/// (one place for the consumer to read, as a NIC inlines short sends).
pub const POOL_INLINE: usize = 256;
/// Ring slot length-word bit: the frame's payload is in the producer's send slot.
pub const INDIRECT: u32 = 1 << 31;
/// Largest inline part (header and tag) of a frame sent from a send slot.
pub const INDIRECT_INLINE_MAX: usize = 256;
/// Largest board slot: the largest Volley frame (a 56-byte header, 65535 bytes of
/// payload, a 16-byte tag) after the slot's header, rounded up to a cache line.
pub const BOARD_SLOT_LIMIT: u32 = 65_664;
/// A node's state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum NodeState {
    /// Never joined.
    Absent = 0,
    /// Joined and running.
    Alive = 1,
    /// Left cleanly.
    Exited = 2,
    /// Declared dead by a peer or a launcher.
    Dead = 3,
}

impl NodeState {
    fn from_u32(v: u32) -> NodeState {
        match v {
            1 => NodeState::Alive,
            2 => NodeState::Exited,
            3 => NodeState::Dead,
            _ => NodeState::Absent,
        }
    }
}

/// What went wrong with a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MyriError {
    /// The region's base is not 64-byte aligned (or an offset is misaligned).
    Misaligned,
    /// An offset or length read from the region points outside it.
    OutOfBounds,
    /// The region is not (yet) initialised for this job: wrong magic or generation.
    NotReady {
        /// The magic found.
        magic: u64,
        /// The generation found.
        generation: u64,
    },
    /// The header is initialised but its contents are impossible.
    Corrupt(&'static str),
    /// The region is smaller than its geometry requires.
    TooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes there.
        have: usize,
    },
    /// This node's number is not below the region's node count.
    BadNode,
    /// A geometry asked for is impossible: what is wrong, and the valid range.
    BadGeometry(&'static str),
}

impl fmt::Display for MyriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MyriError::Misaligned => f.write_str("shared region misaligned"),
            MyriError::OutOfBounds => f.write_str("offset read from the shared region points outside it"),
            MyriError::NotReady { magic, generation } => write!(
                f,
                "shared region not initialised for this job (magic {magic:#018x}, generation {generation:#x}): stale or garbage contents"
            ),
            MyriError::Corrupt(what) => write!(f, "shared region corrupt: {what}"),
            MyriError::TooSmall { needed, have } => {
                write!(f, "shared region too small: {needed} bytes needed, {have} mapped")
            }
            MyriError::BadNode => f.write_str("node number not below the region's node count"),
            MyriError::BadGeometry(what) => write!(f, "shm geometry: {what}"),
        }
    }
}

impl core::error::Error for MyriError {}

/// Tunables of a node's NIC.
#[derive(Debug, Clone, Copy)]
pub struct NicConfig {
    /// A peer whose heartbeat has not moved for this long is dead.
    pub dead_after: Duration,
    /// Process id recorded in the node table (for a launcher's liveness checks).
    pub pid: u32,
    /// A clock every node of the region reads alike, in nanoseconds (a host's
    /// `CLOCK_MONOTONIC`): with it, a peer whose [`Beacon`] beat within
    /// [`VOUCH_WINDOW`] by that clock is alive though it does not poll. `None` (VMs
    /// on `ivshmem` share no clock): heartbeats alone decide.
    pub host_clock: Option<fn() -> u64>,
    /// Raises a peer's interrupt: called with the peer's `irq` word once this node
    /// has moved it from [`IRQ_ARMED`] to [`IRQ_RAISED`] (see the module
    /// documentation). `None`: peers' interrupt words are not looked at.
    pub interrupt: Option<fn(&AtomicU32)>,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            dead_after: Duration::from_secs(5),
            pid: 0,
            host_clock: None,
            interrupt: None,
        }
    }
}

/// Counters of the NIC model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicStats {
    /// Frames written into peers' rings.
    pub tx_frames: u64,
    /// Frames taken from our rings.
    pub rx_frames: u64,
    /// Transmit attempts refused for want of credit (ring full).
    pub no_credit: u64,
    /// Slots or rings found corrupt and skipped.
    pub corrupt: u64,
    /// Frames written into our broadcast board.
    pub board_tx: u64,
    /// Frames taken from other nodes' boards.
    pub board_rx: u64,
    /// Board writes refused: a reader had not taken the oldest frame yet.
    pub board_full: u64,
    /// Barrier arrivals this node wrote for its subtree (one per barrier).
    pub barrier_arrivals: u64,
    /// Barrier releases this node wrote (position 0, one per barrier).
    pub barrier_releases: u64,
    /// Frames sent from a send slot (a descriptor in the ring, no copy).
    pub tx_pooled: u64,
    /// Of those, short ones whose payload rode in the ring slot ([`POOL_INLINE`]).
    pub tx_pool_inline: u64,
    /// Frames taken whose payload was read in a peer's send slot.
    pub rx_pooled: u64,
    /// Frames taken compact ([`COMPACT`]): one cache line for slot header and frame.
    pub rx_compact: u64,
}

/// One node's NIC on a shared region.
#[derive(Debug)]
pub struct MyriNic {
    region: Region,
    geo: Geometry,
    me: u32,
    cfg: NicConfig,
    generation: u64,
    /// The node the next look at the rings begins with: the last sender, for up
    /// to [`RX_BURST`] frames in a row (`streak`), then the node after it.
    rr: u32,
    streak: u32,
    beat: u64,
    watch: [Watch; MAX_NODES],
    /// Consumer `head` of each peer's ring as last read: credits without a cache miss.
    tx_head: [u64; MAX_NODES],
    /// Barriers this node has completed (its `arrived` word when it attached).
    barriers: u32,
    boards: Boards,
    rings: Rings,
    /// Frames written into our board, and the fewest any reader has read (cached).
    board_tail: u64,
    board_low: u64,
    /// Frames read from each node's board.
    board_next: [u64; MAX_NODES],
    /// Where the region counts the board frames every node has written, and that
    /// count when a look at every board last found nothing left to read: until it
    /// moves, no board has a new frame, and a poll loads that one word instead of
    /// one per board.
    boards_written: usize,
    boards_seen: u64,
    /// Consumer `head` of each peer's ring into us (we alone write it): the scan
    /// for frames reads only sequence words.
    rx_head: [u64; MAX_NODES],
    /// The last compact frame received, made whole (lent to the engine in place).
    whole: [u8; COMPACT_MAX],
    stats: NicStats,
    /// Node 0's interrupt word; node `d`'s lies `d` barrier entries further.
    irq_at: usize,
}

/// Node `node`'s interrupt word.
#[inline]
fn irq_word<'r>(region: &'r Region, geo: &Geometry, node: u32) -> Option<&'r AtomicU32> {
    region
        .u32_at(geo.barrier_entry(node) + off::BARRIER_IRQ)
        .ok()
}

/// After a frame for the owner of `word` was published: raises its interrupt if
/// armed (see the module documentation), through `raise`.
#[inline]
fn raise_if_armed(word: &AtomicU32, raise: fn(&AtomicU32)) {
    // The frame's publication is ordered before this load (the consumer orders its
    // arming before its last look at the rings the same way).
    core::sync::atomic::fence(Ordering::SeqCst);
    raise_if_armed_after_fence(word, raise);
}

/// [`raise_if_armed`] where the caller has fenced since it published (once for
/// many words).
#[inline]
fn raise_if_armed_after_fence(word: &AtomicU32, raise: fn(&AtomicU32)) {
    if word.load(Ordering::Relaxed) == IRQ_ARMED
        && word
            .compare_exchange(IRQ_ARMED, IRQ_RAISED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        raise(word);
    }
}

impl MyriNic {
    /// Initialises `region` for a new job (`generation`) and joins it as node `me`.
    /// Only one node (by convention rank 0) creates; the others [`MyriNic::attach`].
    pub fn create(
        mut region: Region,
        geo: Geometry,
        me: u32,
        generation: u64,
        cfg: NicConfig,
    ) -> Result<MyriNic, MyriError> {
        let needed = geo.check_fits(&region)?;
        // Invalidate first, so nobody joins a half-written region.
        region.u64_at(off::MAGIC)?.store(0, Ordering::Release);
        region.zero(8, needed - 8)?;
        region
            .u32_at(off::VERSION)?
            .store(VERSION, Ordering::Relaxed);
        region
            .u32_at(off::NODES)?
            .store(geo.nodes, Ordering::Relaxed);
        region
            .u32_at(off::SLOTS)?
            .store(geo.slots, Ordering::Relaxed);
        region
            .u32_at(off::SLOT_SIZE)?
            .store(geo.slot_size, Ordering::Relaxed);
        region
            .u32_at(off::BOARD_SLOT)?
            .store(geo.board_slot, Ordering::Relaxed);
        region
            .u64_at(off::GENERATION)?
            .store(generation, Ordering::Relaxed);
        region.u64_at(off::MAGIC)?.store(MAGIC, Ordering::Release);
        Self::attach(region, me, generation, cfg)
    }

    /// Joins a region initialised for `generation` as node `me`. Returns
    /// [`MyriError::NotReady`] while the creator has not initialised it (retry), and
    /// a `Corrupt`/`TooSmall` error if the initialised header is impossible.
    pub fn attach(
        region: Region,
        me: u32,
        generation: u64,
        cfg: NicConfig,
    ) -> Result<MyriNic, MyriError> {
        let magic = region.u64_at(off::MAGIC)?.load(Ordering::Acquire);
        let found = region.u64_at(off::GENERATION)?.load(Ordering::Relaxed);
        if magic != MAGIC || found != generation {
            return Err(MyriError::NotReady {
                magic,
                generation: found,
            });
        }
        if region.u32_at(off::VERSION)?.load(Ordering::Relaxed) != VERSION {
            return Err(MyriError::Corrupt("layout version"));
        }
        let geo = Geometry {
            nodes: region.u32_at(off::NODES)?.load(Ordering::Relaxed),
            slots: region.u32_at(off::SLOTS)?.load(Ordering::Relaxed),
            slot_size: region.u32_at(off::SLOT_SIZE)?.load(Ordering::Relaxed),
            board_slot: region.u32_at(off::BOARD_SLOT)?.load(Ordering::Relaxed),
        };
        geo.check_fits(&region)?;
        if me >= geo.nodes {
            return Err(MyriError::BadNode);
        }
        let mut nic = MyriNic {
            region,
            geo,
            me,
            cfg,
            generation,
            rr: 0,
            streak: 0,
            beat: 0,
            watch: [Watch::NEW; MAX_NODES],
            tx_head: [0; MAX_NODES],
            barriers: 0,
            boards: geo.boards(),
            rings: geo.rings(),
            board_tail: 0,
            board_low: 0,
            board_next: [0; MAX_NODES],
            boards_written: geo.boards_written(),
            boards_seen: 0,
            rx_head: [0; MAX_NODES],
            whole: [0; COMPACT_MAX],
            stats: NicStats::default(),
            irq_at: geo.barrier_entry(0) + off::BARRIER_IRQ,
        };
        nic.region.interrupt = cfg.interrupt;
        if let Some(w) = nic.barrier_word(me, off::BARRIER_ARRIVED) {
            nic.barriers = w.load(Ordering::Acquire);
        }
        // A rank restarted on a reused region goes on where its predecessor stopped.
        for src in 0..geo.nodes {
            let ring = nic.rings.ring(me, src);
            nic.rx_head[src as usize] = nic
                .region
                .u64_at(ring + off::RING_HEAD)?
                .load(Ordering::Acquire);
        }
        let e = geo.node_entry(me);
        nic.region
            .u32_at(e + off::NODE_PID)?
            .store(cfg.pid, Ordering::Relaxed);
        nic.region
            .u64_at(e + off::NODE_GENERATION)?
            .store(generation, Ordering::Relaxed);
        nic.region
            .u64_at(e + off::NODE_HEARTBEAT)?
            .store(0, Ordering::Relaxed);
        // A rank restarted on a reused region must not advertise its predecessor's.
        nic.region
            .u64_at(e + off::NODE_HOST_VERSION)?
            .store(0, Ordering::Relaxed);
        nic.region
            .u64_at(e + off::NODE_HOST)?
            .store(0, Ordering::Relaxed);
        nic.region
            .u32_at(e + off::NODE_STATE)?
            .store(NodeState::Alive as u32, Ordering::Release);
        Ok(nic)
    }

    /// The region's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// This node's number.
    pub fn node(&self) -> u32 {
        self.me
    }

    /// Counters.
    pub fn stats(&self) -> NicStats {
        self.stats
    }

    fn node_word(&self, node: u32, field: usize) -> Option<&AtomicU32> {
        if node >= self.geo.nodes {
            return None;
        }
        self.region.u32_at(self.geo.node_entry(node) + field).ok()
    }

    fn node_dword(&self, node: u32, field: usize) -> Option<&AtomicU64> {
        if node >= self.geo.nodes {
            return None;
        }
        self.region.u64_at(self.geo.node_entry(node) + field).ok()
    }

    /// Publishes this node's host words (see "Host words"): `host`, then `version`
    /// with release ordering, so a peer that sees the version sees the word.
    pub fn publish_host(&self, host: u64, version: u64) {
        if let Some(w) = self.node_dword(self.me, off::NODE_HOST) {
            w.store(host, Ordering::Relaxed);
        }
        if let Some(w) = self.node_dword(self.me, off::NODE_HOST_VERSION) {
            w.store(version, Ordering::Release);
        }
    }

    /// Sets only this node's host version word (release): a program marks a change
    /// of what its host word points to as begun (odd) or done (even).
    pub fn set_host_version(&self, version: u64) {
        if let Some(w) = self.node_dword(self.me, off::NODE_HOST_VERSION) {
            w.store(version, Ordering::Release);
        }
    }

    /// A node's host words as `(host, version)`; `(0, 0)` for a node out of range
    /// or one that published nothing.
    pub fn host(&self, node: u32) -> (u64, u64) {
        let v = self
            .node_dword(node, off::NODE_HOST_VERSION)
            .map_or(0, |w| w.load(Ordering::Acquire));
        let h = self
            .node_dword(node, off::NODE_HOST)
            .map_or(0, |w| w.load(Ordering::Relaxed));
        (h, v)
    }

    /// True once every node has joined this generation: the start-up barrier. A node
    /// that joined and already left (or died) counts as joined, so a fast rank that
    /// passes the barrier and exits cannot hold a slow one at it forever.
    pub fn all_joined(&self) -> bool {
        (0..self.geo.nodes).all(|n| {
            self.state(n) != NodeState::Absent
                && self
                    .node_dword(n, off::NODE_GENERATION)
                    .map(|g| g.load(Ordering::Acquire))
                    == Some(self.generation)
        })
    }

    /// The next free slot of our ring into `dst`, and the region (to read our send
    /// slots while the token lives).
    #[inline]
    fn reserve(&mut self, dst: NodeAddr) -> Option<(MyriTx<'_>, &Region)> {
        let MyriNic {
            region,
            geo,
            me,
            stats,
            tx_head,
            rings,
            irq_at,
            ..
        } = self;
        let dst = dst.0 as u32;
        if dst >= geo.nodes || dst == *me {
            return None;
        }
        let cached = tx_head.get_mut(dst as usize)?;
        let ring = rings.ring(dst, *me);
        // SAFETY: `dst` (above) and `me` (`attach`) are below the node count.
        let (tail_w, head_w) = unsafe { rings.words(region, ring) };
        let tail = tail_w.load(Ordering::Relaxed);
        if tail.wrapping_sub(*cached) >= geo.slots as u64 {
            // Looks full: see how far the consumer has got.
            *cached = head_w.load(Ordering::Acquire);
            if tail.wrapping_sub(*cached) >= geo.slots as u64 {
                stats.no_credit += 1;
                return None;
            }
        }
        // SAFETY: as above.
        let (seq, len, at) = unsafe { rings.slot_words(region, ring, tail) };
        // SAFETY: the slot's frame bytes (`mtu` of them) lie inside the slot, itself
        // inside the region (see `Rings`' ring access). Slot `tail` of the ring we
        // alone produce into is free (tail - head < slots, checked above): its
        // consumer has released it and will not read it before we publish its
        // sequence word, and no other slice of it exists.
        let bytes = unsafe { region.bytes_mut_unchecked(at, geo.mtu()) };
        stats.tx_frames += 1;
        let tok = MyriTx {
            slot: bytes,
            seq,
            len,
            tail: tail_w,
            next: tail.wrapping_add(1),
            ring: (region, ring),
            // SAFETY: `dst` is below the node count (above), so its barrier entry
            // lies in the header, which `attach` checked fits the region; the word
            // is 4-aligned.
            irq: region.interrupt.map(|_| unsafe {
                region.u32_unchecked(*irq_at + off::BARRIER_STRIDE * dst as usize)
            }),
        };
        Some((tok, region))
    }

    /// The first node whose ring into us holds a published frame, looking from
    /// `rr` round the nodes.
    #[inline]
    fn rx_ready(&self) -> Option<u32> {
        let (rr, n) = (self.rr, self.geo.nodes);
        match self.rx_ready_in(rr, n) {
            Some(src) => Some(src),
            // Round from the first node to where the look began.
            None if rr > 0 => self.rx_ready_in(0, rr),
            None => None,
        }
    }

    /// The first node of `from..to` (to at most the node count), not us, whose
    /// ring into us holds a published frame in its next slot. One load per ring
    /// (its sequence word): the ring's place is stepped to from the one before,
    /// not computed anew, as a poll looks at every peer's ring.
    #[inline]
    fn rx_ready_in(&self, from: u32, to: u32) -> Option<u32> {
        let to = to.min(self.geo.nodes);
        let heads = self.rx_head.get(from as usize..to as usize)?;
        let r = &self.rings;
        let mut ring = r.ring(self.me, from);
        for (src, &head) in (from..).zip(heads) {
            if src != self.me {
                // SAFETY: `ring` is `r.ring(me, src)` (stepped by the ring length
                // from `from`), `src < to <=` the node count, and `me` (`attach`)
                // is below it.
                let (seq, ..) = unsafe { r.slot_words(&self.region, ring, head) };
                if seq.load(Ordering::Acquire) == head.wrapping_add(1) {
                    return Some(src);
                }
            }
            ring += r.ring;
        }
        None
    }

    /// Lends the frames waiting in `src`'s ring (the next one found whole): slots
    /// with an impossible length are skipped, at most one pass over the ring.
    // Out of line: an empty poll, a waiting receiver's spin, then saves fewer
    // registers. Inlined into `receive`, a message cost 8 instructions fewer and
    // an empty poll 9 more (`shm_cost`).
    #[inline(never)]
    fn take(&mut self, src: u32) -> Option<MyriRx<'_>> {
        let MyriNic {
            region,
            geo,
            me,
            rr,
            streak,
            stats,
            rings,
            whole,
            rx_head,
            ..
        } = self;
        if src >= geo.nodes {
            return None;
        }
        let ring = rings.ring(*me, src);
        // SAFETY: `src` (above) and `me` (`attach`) are below the node count.
        let (_, head_w) = unsafe { rings.words(region, ring) };
        let cursor = rx_head.get_mut(src as usize)?;
        for _ in 0..=geo.slots {
            let head = *cursor;
            // SAFETY: as above.
            let (seq, word, at) = unsafe { rings.slot_words(region, ring, head) };
            if seq.load(Ordering::Acquire) != head.wrapping_add(1) {
                break; // nothing (more) from this peer
            }
            let word = word.load(Ordering::Relaxed);
            let parts = match word {
                w if w & INDIRECT != 0 => indirect(region, rings, geo, src, at - SLOT_HEADER, w),
                // Made whole in `whole`, lent below.
                w if w & COMPACT != 0 => {
                    // SAFETY: as above; the slot is published and ours to read.
                    unsafe { expand(whole, region, ring, at, (w & !COMPACT) as usize) }
                        .map(|n| (&[][..], &[][..], n))
                }
                len if len as usize <= geo.mtu() => {
                    // SAFETY: at most `mtu` bytes of the slot's frame, inside the slot
                    // (see `Rings`' ring access); published, ours to read.
                    let f = unsafe { region.bytes_unchecked(at, len as usize) };
                    Some((f, &[][..], f.len()))
                }
                _ => None,
            };
            if let Some((mut frame, body, split)) = parts {
                if word & COMPACT != 0 {
                    frame = &whole[..split];
                    stats.rx_compact += 1;
                }
                // The sender of this frame probably sends the next (a reply, the
                // rest of a message): looked at first, for a while.
                if *rr != src {
                    (*rr, *streak) = (src, 1);
                } else if *streak + 1 < RX_BURST {
                    *streak += 1;
                } else {
                    *rr = if src + 1 == geo.nodes { 0 } else { src + 1 };
                    *streak = 0;
                }
                stats.rx_frames += 1;
                stats.rx_pooled += u64::from(word & INDIRECT != 0);
                return Some(MyriRx {
                    frame,
                    body,
                    split,
                    head: head_w,
                    cursor,
                    next: head.wrapping_add(1),
                    src: src as u16,
                });
            }
            // A slot with an impossible length is skipped.
            stats.corrupt += 1;
            *cursor = head.wrapping_add(1);
            head_w.store(*cursor, Ordering::Release);
        }
        None
    }
}

impl Drop for MyriNic {
    fn drop(&mut self) {
        self.leave();
    }
}

/// The compact-frame template of ring `ring`: read by its consumer for each compact
/// frame (`expand`) and by its producer for each short one (`compactable`).
///
/// # Safety
///
/// As [`Rings`]' ring access asks of `ring`; and the caller may read the template
/// under the ring protocol (its producer rewrites it only when the consumer holds
/// no compact frame).
#[inline]
unsafe fn ring_template(region: &Region, ring: usize) -> &[u8] {
    // SAFETY: 16 bytes at 128 of the ring, before its slots at 256 (the caller's
    // contract).
    unsafe { region.bytes_unchecked(ring + off::RING_TEMPLATE, ELIDED) }
}

/// Makes the compact frame of `n` bytes at `at` (a slot's frame) of `ring` whole in
/// `buf` with the ring's template; its length, or `None` (a corrupt slot) if `n` is
/// impossible.
///
/// # Safety
///
/// As [`Rings`]' ring access asks of `ring`, and `at` is the frame of one of its
/// slots, published and ours to read.
unsafe fn expand(
    buf: &mut [u8; COMPACT_MAX],
    region: &Region,
    ring: usize,
    at: usize,
    n: usize,
) -> Option<usize> {
    if !compact_len(n + ELIDED) {
        return None;
    }
    // Fixed-size moves, one copy of the code for each size: the slot has room past
    // the frame (its MTU is at least 112 bytes), and only the first `n + ELIDED`
    // bytes are lent.
    if n + ELIDED <= COMPACT_ONE {
        // SAFETY: 48 bytes of the slot's frame (at least 112 long).
        let c = unsafe { region.bytes_unchecked(at, COMPACT_ONE - ELIDED) };
        scatter(buf, &KEPT_ONE, c);
    } else {
        // SAFETY: 112 bytes of the slot's frame (at least 112 long).
        let c = unsafe { region.bytes_unchecked(at, COMPACT_MAX - ELIDED) };
        scatter(buf, &KEPT_TWO, c);
    }
    // SAFETY: the ring's template (the caller's contract).
    let t = unsafe { ring_template(region, ring) };
    scatter(buf, &TEMPLATE_PARTS, t);
    Some(n + ELIDED)
}

#[cfg(test)]
mod tests;
