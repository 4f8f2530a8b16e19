//! The region's layout: where every node's rings, slots, boards, words and
//! counters lie, computed from its geometry and checked when attaching.

use super::*;

/// Default board slot: a 4 KiB broadcast with its headers.
pub(super) const BOARD_SLOT_DEFAULT: usize = 4224;
pub(super) const SLOT_HEADER: usize = 16;
pub(super) const PAGE: usize = 4096;

pub(super) mod off {
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
    pub const BARRIER_IRQ: usize = 8;
    pub const BARRIER_RELEASED: usize = 64;
    pub const RING_TAIL: usize = 0;
    pub const RING_HEAD: usize = 64;
    pub const RING_TEMPLATE: usize = 128;
    pub const RING_SLOTS: usize = 256;
}

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
    pub(super) fn validate(&self) -> Result<(), MyriError> {
        self.check().map_err(MyriError::Corrupt)
    }

    pub(super) fn check(&self) -> Result<(), &'static str> {
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

    pub(super) fn header_len(&self) -> usize {
        let raw = self.boards_written() + 64;
        raw.div_ceil(PAGE) * PAGE
    }

    /// The count of board frames written, on its own cache line after the
    /// barrier words.
    pub(super) fn boards_written(&self) -> usize {
        self.barrier_table() + off::BARRIER_STRIDE * self.nodes as usize
    }

    pub(super) fn barrier_table(&self) -> usize {
        off::NODE_TABLE + 64 * self.nodes as usize
    }

    pub(super) fn ring_len(&self) -> Option<usize> {
        (self.slots as usize)
            .checked_mul(self.slot_size as usize)?
            .checked_add(off::RING_SLOTS)
    }

    pub(super) fn nic_len(&self) -> Option<usize> {
        self.ring_len()?
            .checked_mul(self.nodes as usize)?
            .checked_add(
                64 + self.heads_len()
                    + BOARD_SLOTS as usize * self.board_slot()
                    + POOL_SLOTS * POOL_SLOT,
            )
    }

    /// Offset in a node's NIC memory of its send slots.
    pub(super) fn pool_area(&self) -> usize {
        self.board_area() + self.heads_len() + BOARD_SLOTS as usize * self.board_slot()
    }

    /// Offset in a node's NIC memory of its `heads` words, then its board.
    pub(super) fn board_area(&self) -> usize {
        64 + self.nodes as usize * self.ring_len().unwrap_or(0)
    }

    pub(super) fn heads_len(&self) -> usize {
        (8 * self.nodes as usize).div_ceil(64) * 64
    }

    pub(super) fn board_slot(&self) -> usize {
        self.board_slot as usize
    }

    /// Largest frame a broadcast board slot carries.
    pub fn board_mtu(&self) -> usize {
        self.board_slot() - SLOT_HEADER
    }

    pub(super) fn rings(&self) -> Rings {
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
    pub(super) fn boards(&self) -> Boards {
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
pub(super) struct Rings {
    /// Node 0's NIC memory.
    pub(super) first: usize,
    /// NIC memory per node.
    pub(super) stride: usize,
    /// Bytes per ring.
    pub(super) ring: usize,
    pub(super) slot: usize,
    pub(super) mask: u64,
    /// Node 0's send slots.
    pub(super) pool: usize,
}

impl Rings {
    /// The ring from `src` into `dst`'s NIC memory (as [`Geometry::ring`]).
    pub(super) fn ring(&self, dst: u32, src: u32) -> usize {
        self.first + dst as usize * self.stride + 64 + src as usize * self.ring
    }

    /// Slot `index` of that ring (as [`Geometry::slot`]).
    pub(super) fn slot(&self, ring: usize, index: u64) -> usize {
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
    pub(super) unsafe fn words<'r>(
        &self,
        region: &'r Region,
        ring: usize,
    ) -> (&'r AtomicU64, &'r AtomicU64) {
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
    pub(super) unsafe fn slot_words<'r>(
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
    pub(super) fn pool_slot(&self, node: u32, i: usize) -> usize {
        self.pool + node as usize * self.stride + i * POOL_SLOT
    }
}

/// Offsets of the broadcast boards (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub(super) struct Boards {
    /// Node 0's `heads` words.
    pub(super) first: usize,
    /// NIC memory per node.
    pub(super) stride: usize,
    pub(super) heads: usize,
    pub(super) slot: usize,
}

impl Boards {
    /// The word where `reader` counts the frames of `root`'s board it has read.
    pub(super) fn head(&self, reader: u32, root: u32) -> usize {
        self.first + reader as usize * self.stride + 8 * root as usize
    }

    pub(super) fn slot(&self, root: u32, index: u64) -> usize {
        let i = (index % BOARD_SLOTS) as usize;
        self.first + root as usize * self.stride + self.heads + i * self.slot
    }
}

impl Geometry {
    /// Checks the geometry is possible and fits `region`; returns the bytes it needs.
    pub(super) fn check_fits(&self, region: &Region) -> Result<usize, MyriError> {
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

    pub(super) fn nic(&self, node: u32) -> usize {
        self.header_len() + node as usize * self.nic_len().unwrap_or(0)
    }

    /// The reference for [`Rings`], which the data path uses.
    #[cfg(test)]
    pub(super) fn ring(&self, dst: u32, src: u32) -> usize {
        self.nic(dst) + 64 + src as usize * self.ring_len().unwrap_or(0)
    }

    #[cfg(test)]
    pub(super) fn slot(&self, dst: u32, src: u32, index: u64) -> usize {
        let i = (index & (self.slots as u64 - 1)) as usize;
        self.ring(dst, src) + off::RING_SLOTS + i * self.slot_size as usize
    }

    pub(super) fn node_entry(&self, node: u32) -> usize {
        off::NODE_TABLE + 64 * node as usize
    }

    pub(super) fn barrier_entry(&self, node: u32) -> usize {
        self.barrier_table() + off::BARRIER_STRIDE * node as usize
    }
}
