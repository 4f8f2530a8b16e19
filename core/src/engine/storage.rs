//! The tables an engine runs in, from caller storage or sized once at start-up.

use super::*;

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
    pub(super) eager_hint: usize,
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
