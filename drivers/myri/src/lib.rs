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
//! | 64 + 64 nodes + 128 i | 128 | node *i*'s barrier words: `arrived` u32 at 0, `released` u32 at 64 (each on its own cache line) |
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
//! 4..16 and 52..56 (job, addresses and CRC in a Volley header: the same in every
//! frame on a ring) equal the ring's template: the length word has bit 30
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

/// `"VOLLEYMY"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"VOLLEYMY");
/// Layout version (9: the header counts the board frames written; 8: a beacon word
/// in each node's entry; 7: frames of 113 to 128 bytes travel compact too).
pub const VERSION: u32 = 9;

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
/// Ring slot length-word bit: the frame travels without its [`ELIDED`] bytes, which
/// the ring's template holds (see the module documentation).
pub const COMPACT: u32 = 1 << 30;
/// Bytes a compact frame leaves out: 4..16 and 52..56 (in a Volley frame the job,
/// the addresses and the CRC, the same in every frame on a ring).
pub const ELIDED: usize = 16;
/// Frames from this many bytes up have the elided fields.
const COMPACT_MIN: usize = 56;
/// The elided bytes of a frame, in the order the ring's template holds them.
const TEMPLATE_PARTS: [core::ops::Range<usize>; 2] = [4..16, 52..56];
/// Frames up to this many bytes travel compact in one line: sequence word, length
/// and frame then fit the slot's first cache line, so a short message costs one
/// line, not two.
pub const COMPACT_ONE: usize = 64 - SLOT_HEADER + ELIDED;
/// Frames from this many bytes up to [`COMPACT_MAX`] travel compact in two lines
/// instead of three (shorter ones take two lines whole).
pub const COMPACT_TWO_MIN: usize = 2 * 64 - SLOT_HEADER + 1;
/// The longest compact frame: two lines.
pub const COMPACT_MAX: usize = 2 * 64 - SLOT_HEADER + ELIDED;
/// The bytes a compact frame of one line (two: `KEPT_TWO`) keeps, in the order its
/// slot holds them (bytes past the frame's end are moved too, unread: every slot
/// has room for them).
const KEPT_ONE: [core::ops::Range<usize>; 3] = [0..4, 16..52, 56..COMPACT_ONE];
const KEPT_TWO: [core::ops::Range<usize>; 3] = [0..4, 16..52, 56..COMPACT_MAX];

/// Whether a frame of `len` bytes saves a cache line travelling compact.
#[inline(always)]
fn compact_len(len: usize) -> bool {
    (COMPACT_MIN..=COMPACT_ONE).contains(&len) || (COMPACT_TWO_MIN..=COMPACT_MAX).contains(&len)
}

/// Default board slot: a 4 KiB broadcast with its headers.
const BOARD_SLOT_DEFAULT: usize = 4224;
/// Largest board slot: the largest Volley frame (a 56-byte header, 65535 bytes of
/// payload, a 16-byte tag) after the slot's header, rounded up to a cache line.
pub const BOARD_SLOT_LIMIT: u32 = 65_664;
const SLOT_HEADER: usize = 16;
const PAGE: usize = 4096;

mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const NODES: usize = 12;
    pub const SLOTS: usize = 16;
    pub const SLOT_SIZE: usize = 20;
    pub const GENERATION: usize = 24;
    pub const BOARD_SLOT: usize = 32;
    pub const NODE_TABLE: usize = 64;
    pub const NODE_STATE: usize = 0;
    pub const NODE_PID: usize = 4;
    pub const NODE_GENERATION: usize = 8;
    pub const NODE_HEARTBEAT: usize = 16;
    pub const NODE_HOST: usize = 24;
    pub const NODE_HOST_VERSION: usize = 32;
    pub const NODE_BEACON: usize = 40;
    pub const BARRIER_STRIDE: usize = 128;
    pub const BARRIER_ARRIVED: usize = 0;
    pub const BARRIER_RELEASED: usize = 64;
    pub const RING_TAIL: usize = 0;
    pub const RING_HEAD: usize = 64;
    pub const RING_TEMPLATE: usize = 128;
    pub const RING_SLOTS: usize = 256;
}

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

/// The shape of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Nodes sharing the region.
    pub nodes: u32,
    /// Slots per ring (power of two).
    pub slots: u32,
    /// Bytes per slot (multiple of 64); frames are up to `slot_size - 64` bytes.
    pub slot_size: u32,
    /// Bytes per broadcast board slot (multiple of 64); frames are up to
    /// `board_slot - 16` bytes.
    pub board_slot: u32,
}

impl Geometry {
    /// A geometry, validated.
    pub fn new(nodes: u32, slots: u32, slot_size: u32) -> Result<Geometry, MyriError> {
        let g = Geometry {
            nodes,
            slots,
            slot_size,
            board_slot: slot_size.min(BOARD_SLOT_DEFAULT as u32),
        };
        g.check().map_err(MyriError::BadGeometry)?;
        Ok(g)
    }

    /// This geometry with board slots of `bytes` (a multiple of 64 from 128 to
    /// [`BOARD_SLOT_LIMIT`]): broadcasts up to a frame of `bytes - 16` go through the
    /// board, at `BOARD_SLOTS * bytes` of NIC memory per node.
    pub fn with_board_slot(self, bytes: u32) -> Result<Geometry, MyriError> {
        let g = Geometry {
            board_slot: bytes,
            ..self
        };
        g.check().map_err(MyriError::BadGeometry)?;
        Ok(g)
    }

    /// A geometry read from a region: anything impossible means corruption.
    fn validate(&self) -> Result<(), MyriError> {
        self.check().map_err(MyriError::Corrupt)
    }

    fn check(&self) -> Result<(), &'static str> {
        if self.nodes == 0 || self.nodes as usize > MAX_NODES {
            return Err("the node count must be 1 to 256");
        }
        if !self.slots.is_power_of_two() || self.slots < 2 || self.slots > 1 << 16 {
            return Err("slots per ring must be a power of two from 2 to 65536");
        }
        if !self.slot_size.is_multiple_of(64) || self.slot_size < 128 || self.slot_size > 1 << 20 {
            return Err("the slot size must be a multiple of 64 from 128 to 1048576 bytes");
        }
        if !self.board_slot.is_multiple_of(64)
            || self.board_slot < 128
            || self.board_slot > BOARD_SLOT_LIMIT
        {
            return Err("the board slot must be a multiple of 64 from 128 to 65664 bytes");
        }
        self.region_len()
            .map(|_| ())
            .ok_or("the region would be larger than the address space")
    }

    fn header_len(&self) -> usize {
        let raw = self.boards_written() + 64;
        raw.div_ceil(PAGE) * PAGE
    }

    /// The count of board frames written, on its own cache line after the
    /// barrier words.
    fn boards_written(&self) -> usize {
        self.barrier_table() + off::BARRIER_STRIDE * self.nodes as usize
    }

    fn barrier_table(&self) -> usize {
        off::NODE_TABLE + 64 * self.nodes as usize
    }

    fn ring_len(&self) -> Option<usize> {
        (self.slots as usize)
            .checked_mul(self.slot_size as usize)?
            .checked_add(off::RING_SLOTS)
    }

    fn nic_len(&self) -> Option<usize> {
        self.ring_len()?
            .checked_mul(self.nodes as usize)?
            .checked_add(
                64 + self.heads_len()
                    + BOARD_SLOTS as usize * self.board_slot()
                    + POOL_SLOTS * POOL_SLOT,
            )
    }

    /// Offset in a node's NIC memory of its send slots.
    fn pool_area(&self) -> usize {
        self.board_area() + self.heads_len() + BOARD_SLOTS as usize * self.board_slot()
    }

    /// Offset in a node's NIC memory of its `heads` words, then its board.
    fn board_area(&self) -> usize {
        64 + self.nodes as usize * self.ring_len().unwrap_or(0)
    }

    fn heads_len(&self) -> usize {
        (8 * self.nodes as usize).div_ceil(64) * 64
    }

    fn board_slot(&self) -> usize {
        self.board_slot as usize
    }

    /// Largest frame a broadcast board slot carries.
    pub fn board_mtu(&self) -> usize {
        self.board_slot() - SLOT_HEADER
    }

    fn rings(&self) -> Rings {
        Rings {
            first: self.nic(0),
            stride: self.nic_len().unwrap_or(0),
            ring: self.ring_len().unwrap_or(0),
            slot: self.slot_size as usize,
            mask: self.slots as u64 - 1,
            pool: self.nic(0) + self.pool_area(),
        }
    }

    /// Where the boards lie, computed once: readers poll every board on each call.
    fn boards(&self) -> Boards {
        Boards {
            first: self.nic(0) + self.board_area(),
            stride: self.nic_len().unwrap_or(0),
            heads: self.heads_len(),
            slot: self.board_slot(),
        }
    }
}

/// Where the rings lie, computed once: every frame sent or received needs them.
#[derive(Debug, Clone, Copy)]
struct Rings {
    /// Node 0's NIC memory.
    first: usize,
    /// NIC memory per node.
    stride: usize,
    /// Bytes per ring.
    ring: usize,
    slot: usize,
    mask: u64,
    /// Node 0's send slots.
    pool: usize,
}

impl Rings {
    /// The ring from `src` into `dst`'s NIC memory (as [`Geometry::ring`]).
    fn ring(&self, dst: u32, src: u32) -> usize {
        self.first + dst as usize * self.stride + 64 + src as usize * self.ring
    }

    /// Slot `index` of that ring (as [`Geometry::slot`]).
    fn slot(&self, ring: usize, index: u64) -> usize {
        ring + off::RING_SLOTS + (index & self.mask) as usize * self.slot
    }

    // Ring access on the data path, without `Region`'s check per access. A NIC's
    // `rings` come from a geometry that `Geometry::check_fits` accepted for its
    // region (`MyriNic::attach`), and neither changes afterwards. For `dst` and `src`
    // below that geometry's node count, ring `ring(dst, src)` ends at most
    // `nodes * ring_len` past its NIC's first ring, inside the NIC's `nic_len`, and
    // the NICs end at `region_len <= region.len()`. Every ring, slot and NIC
    // offset is a multiple of 64 past the page-aligned header (`ring_len`,
    // `slot_size` and `nic_len` are multiples of 64), so each word is aligned.
    // Each accessor's `# Safety`: `ring` is `self.ring(dst, src)` for such nodes,
    // and `region` is that NIC's.

    /// The ring's `tail` and `head` words.
    ///
    /// # Safety
    ///
    /// See the comment above.
    #[inline]
    unsafe fn words<'r>(&self, region: &'r Region, ring: usize) -> (&'r AtomicU64, &'r AtomicU64) {
        // SAFETY: words 0 and 64 of the ring, inside and aligned (the caller's
        // contract, see above).
        unsafe {
            (
                region.u64_unchecked(ring + off::RING_TAIL),
                region.u64_unchecked(ring + off::RING_HEAD),
            )
        }
    }

    /// Slot `index`'s sequence and length words, and the offset of its frame.
    ///
    /// # Safety
    ///
    /// See the comment above.
    #[inline]
    unsafe fn slot_words<'r>(
        &self,
        region: &'r Region,
        ring: usize,
        index: u64,
    ) -> (&'r AtomicU64, &'r AtomicU32, usize) {
        let slot = self.slot(ring, index);
        // SAFETY: words 0 and 8 of a slot of the ring (the index is masked), inside
        // and aligned (see above).
        unsafe {
            (
                region.u64_unchecked(slot),
                region.u32_unchecked(slot + 8),
                slot + SLOT_HEADER,
            )
        }
    }

    /// Send slot `i` of `node`.
    fn pool_slot(&self, node: u32, i: usize) -> usize {
        self.pool + node as usize * self.stride + i * POOL_SLOT
    }
}

/// Offsets of the broadcast boards (see the module documentation).
#[derive(Debug, Clone, Copy)]
struct Boards {
    /// Node 0's `heads` words.
    first: usize,
    /// NIC memory per node.
    stride: usize,
    heads: usize,
    slot: usize,
}

impl Boards {
    /// The word where `reader` counts the frames of `root`'s board it has read.
    fn head(&self, reader: u32, root: u32) -> usize {
        self.first + reader as usize * self.stride + 8 * root as usize
    }

    fn slot(&self, root: u32, index: u64) -> usize {
        let i = (index % BOARD_SLOTS) as usize;
        self.first + root as usize * self.stride + self.heads + i * self.slot
    }
}

impl Geometry {
    /// Checks the geometry is possible and fits `region`; returns the bytes it needs.
    fn check_fits(&self, region: &Region) -> Result<usize, MyriError> {
        self.validate()?;
        let needed = self
            .region_len()
            .ok_or(MyriError::Corrupt("geometry overflows"))?;
        if needed > region.len() {
            return Err(MyriError::TooSmall {
                needed,
                have: region.len(),
            });
        }
        Ok(needed)
    }

    /// Bytes of shared memory this geometry needs.
    pub fn region_len(&self) -> Option<usize> {
        self.nic_len()?
            .checked_mul(self.nodes as usize)?
            .checked_add(self.header_len())
    }

    /// Largest frame a slot carries.
    pub fn mtu(&self) -> usize {
        self.slot_size as usize - SLOT_HEADER
    }

    fn nic(&self, node: u32) -> usize {
        self.header_len() + node as usize * self.nic_len().unwrap_or(0)
    }

    /// The reference for [`Rings`], which the data path uses.
    #[cfg(test)]
    fn ring(&self, dst: u32, src: u32) -> usize {
        self.nic(dst) + 64 + src as usize * self.ring_len().unwrap_or(0)
    }

    #[cfg(test)]
    fn slot(&self, dst: u32, src: u32, index: u64) -> usize {
        let i = (index & (self.slots as u64 - 1)) as usize;
        self.ring(dst, src) + off::RING_SLOTS + i * self.slot_size as usize
    }

    fn node_entry(&self, node: u32) -> usize {
        off::NODE_TABLE + 64 * node as usize
    }

    fn barrier_entry(&self, node: u32) -> usize {
        self.barrier_table() + off::BARRIER_STRIDE * node as usize
    }
}

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
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            dead_after: Duration::from_secs(5),
            pid: 0,
            host_clock: None,
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

#[derive(Debug, Clone, Copy)]
struct Watch {
    beat: u64,
    since: Instant,
    seen: bool,
}

impl Watch {
    const NEW: Watch = Watch {
        beat: 0,
        since: Instant::ZERO,
        seen: false,
    };
}

/// How recently, by the host's clock ([`NicConfig::host_clock`]), a peer's beacon
/// must have beaten for [`Device::peer_vouched`] (a [`Beacon`] is meant to beat
/// every few hundred milliseconds).
pub const VOUCH_WINDOW: Duration = Duration::from_secs(2);

/// A node's beacon: the `beacon` word of its entry in the node table, in which a
/// helper of the node's process writes the host's clock whatever its program does
/// (computes, sleeps), so that a peer waiting for a frame from it knows the process
/// lives ([`Device::peer_vouched`]) rather than taking silence for death. It holds
/// a region of its own (another mapping of the same memory), for another thread.
#[derive(Debug)]
pub struct Beacon {
    region: Region,
    at: usize,
}

impl Beacon {
    /// The beacon of node `node` in `region`, a region whose header a NIC has
    /// checked (its magic and version are checked again here).
    pub fn new(region: Region, node: u32) -> Result<Beacon, MyriError> {
        let magic = region.u64_at(off::MAGIC)?.load(Ordering::Acquire);
        if magic != MAGIC || region.u32_at(off::VERSION)?.load(Ordering::Relaxed) != VERSION {
            return Err(MyriError::NotReady {
                magic,
                generation: region.u64_at(off::GENERATION)?.load(Ordering::Relaxed),
            });
        }
        if node >= region.u32_at(off::NODES)?.load(Ordering::Relaxed) {
            return Err(MyriError::BadNode);
        }
        let at = off::NODE_TABLE + 64 * node as usize + off::NODE_BEACON;
        region.u64_at(at)?;
        Ok(Beacon { region, at })
    }

    /// Beats: writes `now`, the host's clock ([`NicConfig::host_clock`]; zero
    /// means "never beat").
    pub fn beat(&mut self, now: u64) {
        if let Ok(w) = self.region.u64_at(self.at) {
            w.store(now.max(1), Ordering::Relaxed);
        }
    }
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
        };
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

    /// Whether node `p`'s beacon beat within [`VOUCH_WINDOW`] by the host's clock
    /// (never without one, or for a node whose beacon never beat).
    fn beacon_fresh(&self, p: u32) -> bool {
        let Some(clock) = self.cfg.host_clock else {
            return false;
        };
        let b = self
            .node_dword(p, off::NODE_BEACON)
            .map_or(0, |w| w.load(Ordering::Relaxed));
        // A beat read a moment before our clock is fresh too (no wrap).
        b != 0 && clock().saturating_sub(b) < VOUCH_WINDOW.total_nanos()
    }

    /// A node's state word.
    pub fn state(&self, node: u32) -> NodeState {
        self.node_word(node, off::NODE_STATE)
            .map_or(NodeState::Absent, |w| {
                NodeState::from_u32(w.load(Ordering::Acquire))
            })
    }

    /// The process id a node recorded when it joined.
    pub fn pid(&self, node: u32) -> u32 {
        self.node_word(node, off::NODE_PID)
            .map_or(0, |w| w.load(Ordering::Relaxed))
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

    /// Declares `node` dead (a launcher saw its process exit): peers stop waiting for it.
    pub fn mark_dead(&self, node: u32) {
        if let Some(w) = self.node_word(node, off::NODE_STATE) {
            let _ = w.compare_exchange(
                NodeState::Alive as u32,
                NodeState::Dead as u32,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Leaves the region cleanly.
    pub fn leave(&self) {
        if let Some(w) = self.node_word(self.me, off::NODE_STATE) {
            w.store(NodeState::Exited as u32, Ordering::Release);
        }
    }

    /// Atomically adds `delta` to counter `counter` in `node`'s NIC memory and returns
    /// the previous value. No CPU of `node` takes part (LFC's NIC-resident
    /// `lfc_fetch_and_add`; counters start at 0).
    pub fn fetch_and_add(&self, node: u32, counter: usize, delta: u64) -> Result<u64, MyriError> {
        if node >= self.geo.nodes {
            return Err(MyriError::BadNode);
        }
        if counter >= COUNTERS {
            return Err(MyriError::OutOfBounds);
        }
        let c = self.region.u64_at(self.geo.nic(node) + 8 * counter)?;
        Ok(c.fetch_add(delta, Ordering::AcqRel))
    }

    fn barrier_word(&self, node: u32, field: usize) -> Option<&AtomicU32> {
        if node >= self.geo.nodes {
            return None;
        }
        self.region
            .u32_at(self.geo.barrier_entry(node) + field)
            .ok()
    }

    /// Advances this node's next barrier among `n` members, this node at position
    /// `me`, position `i` being node `node(i)` (see the module documentation).
    /// `Ok(true)` once every member has arrived; the next call starts the next
    /// barrier. The count lives with the NIC, not with whoever calls, so engines
    /// that take turns on one NIC continue one sequence. A member list that does not
    /// put this node at `me`, or names a node outside the region, is `BadNode`.
    pub fn barrier_step(
        &mut self,
        me: u16,
        n: u16,
        node: impl Fn(u16) -> Option<u32>,
    ) -> Result<bool, MyriError> {
        let target = self.barriers.wrapping_add(1);
        // Wrapping comparison: a word is at most one barrier ahead of a reader.
        let reached = |w: &AtomicU32| (w.load(Ordering::Acquire).wrapping_sub(target) as i32) >= 0;
        let word = |p: u16, field: usize| {
            node(p)
                .and_then(|a| self.barrier_word(a, field))
                .ok_or(MyriError::BadNode)
        };
        if me >= n || node(me) != Some(self.me) {
            return Err(MyriError::BadNode);
        }
        let arrived = word(me, off::BARRIER_ARRIVED)?;
        let mut wrote = false;
        let done = if reached(arrived) {
            reached(word(0, off::BARRIER_RELEASED)?)
        } else {
            let first = me as u32 * BARRIER_FANIN as u32 + 1;
            for c in first..(first + BARRIER_FANIN as u32).min(n as u32) {
                if !reached(word(c as u16, off::BARRIER_ARRIVED)?) {
                    return Ok(false);
                }
            }
            // The subtree is in: its arrival happens-before the parent's acquire.
            arrived.store(target, Ordering::Release);
            wrote = true;
            if me == 0 {
                word(0, off::BARRIER_RELEASED)?.store(target, Ordering::Release);
            }
            me == 0 || reached(word(0, off::BARRIER_RELEASED)?)
        };
        if wrote {
            self.stats.barrier_arrivals += 1;
            if me == 0 {
                self.stats.barrier_releases += 1;
            }
        }
        if done {
            self.barriers = target;
        }
        Ok(done)
    }

    /// Writes a frame of `len` bytes, filled by `fill` (given the region, to read
    /// our send slots), into our board ([`Device::board_transmit`]).
    fn board_write(
        &mut self,
        now: Instant,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8], &Region),
    ) -> bool {
        if len > self.geo.board_mtu() {
            return false;
        }
        if self.board_room() == 0 {
            // A reader whose heartbeat has stopped for `dead_after` (its node died with
            // no launcher to say so, as a VM on ivshmem does) would keep the board
            // full for good: declare it dead, as `peer_alive` already reports it.
            if let Some(d) = self.board_laggard() {
                if !self.peer_alive(now, NodeAddr(d as u16)) {
                    self.mark_dead(d);
                }
            }
            if self.board_room() == 0 {
                self.stats.board_full += 1;
                return false;
            }
        }
        let tail = self.board_tail;
        let slot = self.boards.slot(self.me, tail);
        let (Ok(seq), Ok(len_w)) = (self.region.u64_at(slot), self.region.u32_at(slot + 8)) else {
            return false;
        };
        // SAFETY: slot `tail` of the board we alone produce into is free: every
        // reader still in the job has read frame `tail - BOARD_SLOTS` (checked by
        // `board_room`) and none reads this slot before we publish its sequence
        // word; no other slice of it exists.
        let Ok(bytes) = (unsafe { self.region.bytes_mut(slot + SLOT_HEADER, len) }) else {
            return false;
        };
        fill(bytes, &self.region);
        len_w.store(len as u32, Ordering::Relaxed);
        // Publish: the frame happens-before every reader's acquire of `seq`.
        seq.store(tail.wrapping_add(1), Ordering::Release);
        // Then counted: a reader that sees the count sees the frame. Not news to
        // us: where we had seen every frame before, we have seen this one too.
        if let Ok(w) = self.region.u64_at(self.boards_written) {
            let before = w.fetch_add(1, Ordering::Release);
            if before == self.boards_seen {
                self.boards_seen = before.wrapping_add(1);
            }
        }
        self.board_tail = tail.wrapping_add(1);
        self.stats.board_tx += 1;
        true
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
        };
        Some((tok, region))
    }

    /// The board's free slots once every reader still in the job is counted:
    /// readers that left or died are passed over (their frames are lost with them).
    fn board_room(&mut self) -> u64 {
        let tail = self.board_tail;
        if tail.wrapping_sub(self.board_low) >= BOARD_SLOTS {
            let mut lag = 0;
            for d in (0..self.geo.nodes).filter(|&d| d != self.me) {
                if matches!(self.state(d), NodeState::Exited | NodeState::Dead) {
                    continue;
                }
                let head = self
                    .region
                    .u64_at(self.boards.head(d, self.me))
                    .map_or(0, |w| w.load(Ordering::Acquire) & !HELD);
                // A head ahead of the tail is garbage: count the board as full.
                let l = tail.wrapping_sub(head);
                lag = lag.max(if l > BOARD_SLOTS { BOARD_SLOTS } else { l });
            }
            self.board_low = tail - lag;
        }
        BOARD_SLOTS - tail.wrapping_sub(self.board_low)
    }

    /// The index of the next frame written into our board (its slot: the index
    /// modulo [`BOARD_SLOTS`]).
    pub fn board_next(&self) -> u64 {
        self.board_tail
    }

    /// The reader furthest behind on our board while it is full (a launcher may
    /// find its process gone and [`MyriNic::mark_dead`] it).
    pub fn board_laggard(&self) -> Option<u32> {
        if self.board_tail.wrapping_sub(self.board_low) < BOARD_SLOTS {
            return None;
        }
        (0..self.geo.nodes)
            .filter(|&d| d != self.me && self.state(d) == NodeState::Alive)
            .find(|&d| {
                self.region
                    .u64_at(self.boards.head(d, self.me))
                    .is_ok_and(|w| w.load(Ordering::Acquire) & !HELD == self.board_low)
            })
    }

    /// [`Device::board_unread`]: a live reader that has neither read every frame
    /// of our board nor said it holds the next one back. One whose heartbeat has
    /// stopped is not waited for (the barrier then finds it dead).
    fn board_waits_for_readers(&mut self, now: Instant) -> bool {
        let tail = self.board_tail;
        for d in 0..self.geo.nodes {
            if d == self.me {
                continue;
            }
            let w = self
                .region
                .u64_at(self.boards.head(d, self.me))
                .map_or(tail, |w| w.load(Ordering::Acquire));
            // A head ahead of the tail, or further behind than the board holds, is
            // garbage: not waited for.
            let lag = tail.wrapping_sub(w);
            let unread = w & HELD == 0 && lag > 0 && lag <= BOARD_SLOTS;
            if unread && self.peer_alive(now, NodeAddr(d as u16)) {
                return true;
            }
        }
        false
    }

    #[inline]
    fn heartbeat(&mut self) {
        self.beat = self.beat.wrapping_add(1);
        let at = self.geo.node_entry(self.me) + off::NODE_HEARTBEAT;
        // SAFETY: `me` is below the node count (`attach`), and the node table
        // (`barrier_table` = 64 bytes a node past `NODE_TABLE`) ends inside the
        // header, inside the region (`check_fits`); entries are 64-aligned.
        unsafe { self.region.u64_unchecked(at) }.store(self.beat, Ordering::Relaxed);
    }

    /// The first root of `from..to` (to at most the node count), not us, whose
    /// board holds a frame we have not read. One load per board: its place is
    /// stepped to from the one before, not computed anew (a poll scans every
    /// node's board, so that cost grows with the job).
    #[inline]
    fn board_fresh_in(&self, from: u32, to: u32) -> Option<u32> {
        let to = to.min(self.geo.nodes);
        let nexts = self.board_next.get(from as usize..to as usize)?;
        let b = &self.boards;
        let mut board = b.slot(from, 0);
        for (root, &next) in (from..).zip(nexts) {
            if root != self.me {
                let at = board + (next % BOARD_SLOTS) as usize * b.slot;
                // SAFETY: `at` is slot `next % BOARD_SLOTS` of `root`'s board
                // (`board` is stepped by the NIC length from `b.slot(from, 0)`), and
                // `root` is below the node count: inside `root`'s NIC memory
                // (`nic_len` counts the heads and `BOARD_SLOTS` board slots past
                // `board_area`), which ends inside the region (`attach` checked the
                // geometry against it); every term is a multiple of 64 past the
                // page-aligned header, so the word is aligned.
                let w = unsafe { self.region.u64_unchecked(at) };
                if w.load(Ordering::Acquire) == next.wrapping_add(1) {
                    return Some(root);
                }
            }
            board += b.stride;
        }
        None
    }

    /// The region's count of board frames written, if it has moved since a look at
    /// every board last found nothing to read.
    #[inline]
    fn boards_unseen(&self) -> Option<u64> {
        // SAFETY: `boards_written` is the geometry's count word: 64-aligned, before
        // the header's end, inside the region (`attach` checked the geometry).
        let w = unsafe { self.region.u64_unchecked(self.boards_written) };
        // Acquire: the frames counted happen-before the scan that follows.
        let written = w.load(Ordering::Acquire);
        (written != self.boards_seen).then_some(written)
    }

    /// Hands `take` the frames on `root`'s board, in order, until it refuses one
    /// (left for the next call) or none is new: at most one pass over the board.
    #[inline(never)]
    fn board_take(
        &mut self,
        root: u32,
        take: &mut dyn FnMut(NodeAddr, &[u8]) -> BoardTake,
    ) -> bool {
        let MyriNic {
            region,
            geo,
            me,
            board_next,
            boards,
            stats,
            ..
        } = self;
        let mtu = geo.board_mtu();
        let Some(next) = board_next.get_mut(root as usize) else {
            return false;
        };
        let Ok(head) = region.u64_at(boards.head(*me, root)) else {
            return false;
        };
        let mut any = false;
        for _ in 0..BOARD_SLOTS {
            let slot = boards.slot(root, *next);
            let Ok(seq) = region.u64_at(slot) else { break };
            if seq.load(Ordering::Acquire) != next.wrapping_add(1) {
                break;
            }
            let len = region
                .u32_at(slot + 8)
                .map(|w| w.load(Ordering::Relaxed) as usize);
            match len
                .ok()
                .filter(|&l| l <= mtu)
                .and_then(|l| region.bytes(slot + SLOT_HEADER, l).ok())
            {
                Some(frame) => match take(NodeAddr(root as u16), frame) {
                    BoardTake::Taken => {
                        stats.board_rx += 1;
                        any = true;
                    }
                    refused => {
                        // Said once per change: the writer's barrier reads it.
                        let held = if refused == BoardTake::Held { HELD } else { 0 };
                        if head.load(Ordering::Relaxed) != *next | held {
                            head.store(*next | held, Ordering::Release);
                        }
                        break;
                    }
                },
                // An impossible length: skipped, like a ring's.
                None => stats.corrupt += 1,
            }
            *next = next.wrapping_add(1);
            // Our reads of the slot happen-before its producer reuses it.
            head.store(*next, Ordering::Release);
        }
        any
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

/// The inline part, payload and split point (inline bytes before the payload) of a
/// ring slot at `slot` (from `src`) whose length word `w` says its payload is in
/// `src`'s send slot; `None` if anything in it is impossible.
fn indirect<'r>(
    region: &'r Region,
    rings: &Rings,
    geo: &Geometry,
    src: u32,
    slot: usize,
    w: u32,
) -> Option<(&'r [u8], &'r [u8], usize)> {
    let inline = (w & !INDIRECT) as usize;
    if inline > INDIRECT_INLINE_MAX || 8 + inline > geo.mtu() {
        return None;
    }
    let at = slot + SLOT_HEADER;
    let d = region.bytes(at, 8).ok()?;
    let i = u16::from_le_bytes([d[0], d[1]]) as usize;
    let split = u16::from_le_bytes([d[2], d[3]]) as usize;
    let len = u32::from_le_bytes([d[4], d[5], d[6], d[7]]) as usize;
    if i >= POOL_SLOTS || len > POOL_SLOT || split > inline {
        return None;
    }
    let frame = region.bytes(at + 8, inline).ok()?;
    let body = region.bytes(rings.pool_slot(src, i), len).ok()?;
    Some((frame, body, split))
}

impl Drop for MyriNic {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A frame in one of our rings, lent in place.
#[derive(Debug)]
pub struct MyriRx<'a> {
    /// The frame, or the inline part of one sent from a send slot.
    frame: &'a [u8],
    /// The payload in the producer's send slot (empty for an inline frame).
    body: &'a [u8],
    /// Bytes of `frame` that come before `body` in the frame.
    split: usize,
    head: &'a AtomicU64,
    /// Our copy of `head` (we alone write it).
    cursor: &'a mut u64,
    next: u64,
    /// The ring's producer: the node that sent the frame.
    src: u16,
}

/// A free slot in a peer's ring, lent in place.
#[derive(Debug)]
pub struct MyriTx<'a> {
    slot: &'a mut [u8],
    seq: &'a AtomicU64,
    len: &'a AtomicU32,
    tail: &'a AtomicU64,
    next: u64,
    /// The region and the ring's offset: its template and `head` words.
    ring: (&'a Region, usize),
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

/// Copies `parts` of frame `f`, in order, into `out` (exactly their length).
fn gather(f: &[u8], parts: &[core::ops::Range<usize>], out: &mut [u8]) {
    let mut at = 0;
    for r in parts {
        out[at..at + r.len()].copy_from_slice(&f[r.clone()]);
        at += r.len();
    }
}

/// Copies `src` (exactly the length of `parts`) into `parts` of frame `f`.
fn scatter(f: &mut [u8], parts: &[core::ops::Range<usize>], src: &[u8]) {
    let mut at = 0;
    for r in parts {
        f[r.clone()].copy_from_slice(&src[at..at + r.len()]);
        at += r.len();
    }
}

impl RxToken for MyriRx<'_> {
    /// Only `src` produces into its ring to us.
    fn source(&self) -> Option<NodeAddr> {
        Some(NodeAddr(self.src))
    }

    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        if self.body.is_empty() {
            return self.consume_parts(|frame, _| f(frame));
        }
        // A reader that wants the frame whole gets a joined copy.
        let mut joined = [0u8; INDIRECT_INLINE_MAX + POOL_SLOT];
        let (before, after) = self.frame.split_at(self.split);
        let (a, b) = (before.len(), self.body.len());
        let n = a + b + after.len();
        joined[..a].copy_from_slice(before);
        joined[a..a + b].copy_from_slice(self.body);
        joined[a + b..n].copy_from_slice(after);
        self.consume_parts(|_, _| f(&joined[..n]))
    }

    fn consume_parts<R, F: FnOnce(&[u8], &[u8]) -> R>(self, f: F) -> R {
        let r = f(self.frame, self.body);
        // Hand the slot back to the producer: our reads (of the send slot too)
        // happen-before its reuse.
        *self.cursor = self.next;
        self.head.store(self.next, Ordering::Release);
        r
    }
}

impl MyriTx<'_> {
    /// Publishes a descriptor of send slot `slot` (`len` payload bytes) with the
    /// inline part `head` then `tail` (see the module documentation).
    fn consume_indirect(self, slot: usize, len: usize, head: &[u8], tail: &[u8]) {
        let inline = head.len() + tail.len();
        self.slot[0..2].copy_from_slice(&(slot as u16).to_le_bytes());
        self.slot[2..4].copy_from_slice(&(head.len() as u16).to_le_bytes());
        self.slot[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        self.slot[8..8 + head.len()].copy_from_slice(head);
        self.slot[8 + head.len()..8 + inline].copy_from_slice(tail);
        self.len.store(INDIRECT | inline as u32, Ordering::Relaxed);
        // Publish: descriptor, inline part and the send slot's bytes (written
        // before this call) happen-before the consumer's acquire of `seq`.
        self.seq.store(self.next, Ordering::Release);
        self.tail.store(self.next, Ordering::Relaxed);
    }
}

/// Whether frame `f` (at least [`COMPACT_MIN`] bytes), to go as frame `next` of
/// `ring`, may leave out its [`ELIDED`] bytes: they match the ring's template, or
/// the template is rewritten to them because the consumer has read every frame
/// before this one (its release of `head` orders its last template read before our
/// stores).
fn compactable((region, ring): (&Region, usize), next: u64, f: &[u8; COMPACT_MAX]) -> bool {
    // SAFETY: `reserve` named `ring` for a node below the node count (see `Rings`'
    // ring access); only its producer, us, writes the template.
    let t = unsafe { ring_template(region, ring) };
    let mut mine = [0u8; ELIDED];
    gather(f, &TEMPLATE_PARTS, &mut mine);
    if t == mine {
        return true;
    }
    let consumed = region
        .u64_at(ring + off::RING_HEAD)
        .is_ok_and(|h| h.load(Ordering::Acquire) == next.wrapping_sub(1));
    if !consumed {
        return false;
    }
    // SAFETY: only the ring's producer (us, through `&mut MyriNic`) writes its
    // template, and its consumer reads it only while it holds a compact frame,
    // which it holds none of now (`head` has caught up); the shared slice `t`
    // is not used again.
    let Ok(t) = (unsafe { region.bytes_mut(ring + off::RING_TEMPLATE, ELIDED) }) else {
        return false;
    };
    // Published with the frame by the release of its sequence word.
    t.copy_from_slice(&mine);
    true
}

impl TxToken for MyriTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let len = len.min(self.slot.len());
        // A short frame is filled on the stack: the slot's line it would save is
        // not touched unless the frame cannot travel compact.
        let mut buf = [0u8; COMPACT_MAX];
        let short = compact_len(len);
        let r = f(if short {
            &mut buf[..len]
        } else {
            &mut self.slot[..len]
        });
        self.publish(short.then_some(&buf), len);
        r
    }
}

impl MyriTx<'_> {
    /// The place of this frame in its ring's sequence, from 0 at the ring's start:
    /// it fills slot `index % Geometry::slots` (a producer may keep notes per slot).
    pub fn index(&self) -> u64 {
        self.next.wrapping_sub(1)
    }

    /// Publishes the frame of `len` bytes: in the slot, or short in `buf`.
    ///
    /// The slot's lines stay in this core's cache for the consumer to fetch. Pushing
    /// them to the shared cache after publishing (`CLDEMOTE`) was measured on a
    /// 16-core Xeon that has it: 1 MiB streaming fell from 11.5 to 5.7 GB/s and
    /// 8-byte latency did not improve (168 interleaved runs).
    #[inline(never)]
    fn publish(self, buf: Option<&[u8; COMPACT_MAX]>, len: usize) {
        let word = match buf {
            None => len as u32,
            Some(buf) if compactable(self.ring, self.next, buf) => {
                // Fixed-size moves (the slot has room past the frame: its MTU is
                // at least 112 bytes).
                if len <= COMPACT_ONE {
                    gather(buf, &KEPT_ONE, &mut self.slot[..COMPACT_ONE - ELIDED]);
                } else {
                    gather(buf, &KEPT_TWO, &mut self.slot[..COMPACT_MAX - ELIDED]);
                }
                COMPACT | (len - ELIDED) as u32
            }
            Some(buf) => {
                self.slot[..len].copy_from_slice(&buf[..len]);
                len as u32
            }
        };
        self.len.store(word, Ordering::Relaxed);
        // Publish the slot: its bytes (and a rewritten template) happen-before the
        // consumer's acquire of `seq`.
        self.seq.store(self.next, Ordering::Release);
        self.tail.store(self.next, Ordering::Relaxed);
    }
}

impl Device for MyriNic {
    type RxToken<'a> = MyriRx<'a>;
    type TxToken<'a> = MyriTx<'a>;

    fn receive(&mut self, _now: Instant) -> Option<MyriRx<'_>> {
        self.heartbeat();
        // The scan touches one word per peer (the next slot's sequence word) and
        // keeps its consumer position here: an empty poll stays a few loads.
        let src = self.rx_ready()?;
        self.take(src)
    }

    // Always: a send is this, a slot and a publish; left to the inliner, builds
    // with more callers kept it a call (hosted `shm` latency path 29 more).
    #[inline(always)]
    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<MyriTx<'_>> {
        // A program that only sends (short sends need no receive poll) is alive too.
        self.heartbeat();
        self.reserve(dst).map(|(t, _)| t)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            mtu: self.geo.mtu(),
            reliable: true,
            integrity: true,
            board_nodes: self.geo.nodes as u16,
            board_mtu: self.geo.board_mtu(),
            pool_slots: POOL_SLOTS as u16,
            pool_slot_size: POOL_SLOT,
            // Rings are per pair of nodes, in the job's own region (`source`).
            compact: true,
        }
    }

    fn pool_slot(&self, i: usize) -> Option<&[u8]> {
        if i >= POOL_SLOTS {
            return None;
        }
        self.region
            .bytes(self.rings.pool_slot(self.me, i), POOL_SLOT)
            .ok()
    }

    fn pool_slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        if i >= POOL_SLOTS {
            return None;
        }
        let at = self.rings.pool_slot(self.me, i);
        // SAFETY: our own send slot: only this node writes it, `&mut self` keeps any
        // other slice of ours from living meanwhile, and consumers read it only
        // through a ring slot we published, which the caller's protocol (the engine
        // reuses a packet once acknowledged) has seen consumed before it writes again.
        unsafe { self.region.bytes_mut(at, POOL_SLOT) }.ok()
    }

    fn transmit_pooled(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        let inline = head.len() + tail.len();
        if slot >= POOL_SLOTS || len > POOL_SLOT || inline > INDIRECT_INLINE_MAX {
            return false;
        }
        if 8 + inline > self.geo.mtu() {
            return false;
        }
        if len <= POOL_INLINE && inline + len <= self.geo.mtu() {
            // Short: the payload rides in the ring slot, as a NIC inlines a short send
            // into its descriptor; the consumer then reads one place, not two.
            let from = self.rings.pool_slot(self.me, slot);
            self.heartbeat();
            let Some((tok, region)) = self.reserve(dst) else {
                return false;
            };
            let Ok(body) = region.bytes(from, len) else {
                return false;
            };
            tok.consume(inline + len, |b| {
                let (h, rest) = b.split_at_mut(head.len());
                h.copy_from_slice(head);
                let (p, t) = rest.split_at_mut(len);
                p.copy_from_slice(body);
                t.copy_from_slice(tail);
            });
            self.stats.tx_pooled += 1;
            self.stats.tx_pool_inline += 1;
            return true;
        }
        match self.transmit(now, dst) {
            Some(tok) => {
                tok.consume_indirect(slot, len, head, tail);
                self.stats.tx_pooled += 1;
                true
            }
            None => false,
        }
    }

    fn board_transmit_pooled(
        &mut self,
        now: Instant,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        if slot >= POOL_SLOTS || len > POOL_SLOT {
            return false;
        }
        let from = self.rings.pool_slot(self.me, slot);
        let total = head.len() + len + tail.len();
        // The NIC moves the packet from its send slot into the board.
        self.board_write(now, total, &mut |buf, region| {
            let (h, rest) = buf.split_at_mut(head.len());
            h.copy_from_slice(head);
            let (body, t) = rest.split_at_mut(len);
            match region.bytes(from, len) {
                Ok(src) => body.copy_from_slice(src),
                Err(_) => body.fill(0),
            }
            t.copy_from_slice(tail);
        })
    }

    fn fetch_add(&mut self, peer: NodeAddr, var: u16, delta: u32) -> Option<u32> {
        // The counters are 64-bit in NIC memory; the API's values are 32-bit.
        self.fetch_and_add(peer.0 as u32, var as usize, delta as u64)
            .ok()
            .map(|v| v as u32)
    }

    fn board_transmit(
        &mut self,
        now: Instant,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        self.board_write(now, len, &mut |buf, _| fill(buf))
    }

    fn board_unread(&mut self, now: Instant) -> bool {
        self.board_waits_for_readers(now)
    }

    fn transmit_reads_time(&self) -> bool {
        false
    }

    /// A load of each peer's next ring slot, and of the board count.
    fn rx_pending(&self) -> bool {
        self.rx_ready().is_some() || self.boards_unseen().is_some()
    }

    fn board_receive(
        &mut self,
        _now: Instant,
        take: &mut dyn FnMut(NodeAddr, &[u8]) -> BoardTake,
    ) -> bool {
        // One load when no board has a new frame, one per board when one has; the
        // reading is out of line.
        let Some(written) = self.boards_unseen() else {
            return false;
        };
        let n = self.geo.nodes;
        let mut any = false;
        let mut from = 0;
        while let Some(root) = self.board_fresh_in(from, n) {
            any |= self.board_take(root, take);
            from = root + 1;
        }
        // A frame refused (or written since the count was read) is looked for again.
        if self.board_fresh_in(0, n).is_none() {
            self.boards_seen = written;
        }
        any
    }

    fn barrier(&mut self, _now: Instant, m: &BarrierMembers<'_>) -> BarrierPoll {
        // Fabric addresses on this device are node numbers.
        let node = |i: u16| (m.addr)(i).map(|a| a.0 as u32);
        match self.barrier_step(m.me, m.n, node) {
            Ok(true) => BarrierPoll::Done,
            Ok(false) => BarrierPoll::Pending,
            // Members outside this region: the engine's frame barrier can reach them.
            Err(_) => BarrierPoll::Unsupported,
        }
    }

    fn peer_alive(&mut self, now: Instant, peer: NodeAddr) -> bool {
        let p = peer.0 as u32;
        if self.state(p) != NodeState::Alive {
            return false;
        }
        let beat = self
            .node_dword(p, off::NODE_HEARTBEAT)
            .map_or(0, |h| h.load(Ordering::Relaxed));
        let Some(w) = self.watch.get_mut(p as usize) else {
            return true;
        };
        if !w.seen || w.beat != beat {
            (w.beat, w.since, w.seen) = (beat, now, true);
            return true;
        }
        // The heartbeat stands still: a program that computes does not poll, but
        // its process's beacon moves (read only now: a polling peer costs nothing).
        now - w.since < self.cfg.dead_after || self.beacon_fresh(p)
    }

    fn peer_vouched(&mut self, now: Instant, peer: NodeAddr) -> bool {
        let p = peer.0 as u32;
        let _ = now;
        self.state(p) == NodeState::Alive && self.beacon_fresh(p)
    }
}

#[cfg(test)]
mod tests;
