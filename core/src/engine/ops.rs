//! Outgoing operations: what a send carries, its state, its handle and status.

use super::*;

/// Where a send's payload comes from.
#[derive(Debug, Clone, Copy)]
pub enum Body<'a, 'c> {
    /// Borrowed for as long as the engine lives (non-blocking sends).
    Borrowed(&'a [u8]),
    /// Of this length, handed to every `poll` as `ext` until the send completes
    /// (blocking sends, whose data outlives only the call).
    External(usize),
    /// Copied into one of the engine's eager buffers at the call (at most
    /// [`EAGER_MAX`] bytes; a broadcast's, at most `BCAST_COPY_MAX`), so the
    /// caller may reuse its own at once: reliable sends only.
    Copied(&'c [u8]),
}

/// A send, as [`Engine::start_send`] takes it: what the kinds of send differ in
/// are its fields.
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a, 'c> {
    /// The port whose output binding names the destination (a broadcast binding
    /// sends to every other member).
    pub port: PortId,
    /// A first piece, copied at the call (at most [`INLINE_HEAD_MAX`] bytes), sent
    /// before `body`.
    pub head: &'c [u8],
    /// The rest of the message.
    pub body: Body<'a, 'c>,
    /// Flow-controlled, retransmitted, delivered exactly once in order; else
    /// best effort.
    pub reliable: bool,
}

/// Payload of a send as the engine takes it: a [`Body`], or a handler's send
/// already copied.
#[derive(Debug, Clone, Copy)]
pub(super) enum Src<'a, 'c> {
    Body(Body<'a, 'c>),
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
    pub(super) used: bool,
    pub(super) data: [u8; EAGER_MAX],
}

impl EagerBuf {
    /// A free buffer.
    pub const EMPTY: EagerBuf = EagerBuf {
        used: false,
        data: [0; EAGER_MAX],
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpState {
    Free,
    Active,
    Done,
    Failed,
    Rejected,
}

/// One send operation (a slot in the operation table).
#[derive(Debug, Clone, Copy)]
pub struct Op<'a> {
    pub(super) state: OpState,
    pub(super) gen: u16,
    pub(super) reliable: bool,
    pub(super) external: bool,
    pub(super) started: bool,
    /// Eager buffer holding the body, or `NONE`.
    pub(super) eager: u16,
    /// Packet buffer holding the body ([`PacketId`] as raw), or `NONE`.
    pub(super) packet: u16,
    /// Per-kind extra: a packet's multicast tree shape; a tree broadcast's shape
    /// (or [`mcast::FLAT`]).
    pub(super) aux: u8,
    /// A reliable broadcast in our group: frames carry [`Flags::TREE`] with `root`,
    /// `aux` and `bseq`.
    pub(super) tree: bool,
    /// Forwarded for another root: a failure is told to port `dest.port`.
    pub(super) relay: bool,
    pub(super) root: NodeId,
    pub(super) bseq: u32,
    /// A forward of a long tree broadcast, sent from relay stream `stream` as its
    /// chunks arrive (see [`stream`]), or `NONE`.
    pub(super) stream: u16,
    /// One-sided: the body is read from program memory at `local` as frames are
    /// built, and every frame starts with `prefix` (`wire::RMA_PREFIX` bytes).
    pub(super) mem_src: bool,
    /// One-sided: the engine keeps the slot and rings `bell` when it is done.
    pub(super) owned: bool,
    /// One-sided and finished: on the list `settle_rma` takes (`Bufs::rma_head`),
    /// followed by `settle_next`.
    pub(super) listed: bool,
    pub(super) settle_next: u16,
    pub(super) local: u64,
    pub(super) prefix: [u64; 2],
    pub(super) bell: u64,
    /// The caller has let go of the handle: the slot frees itself when done.
    pub(super) detached: bool,
    /// The receiver discarded the message (port not bound): fails once acked.
    pub(super) rejected: bool,
    pub(super) head: [u8; INLINE_HEAD_MAX],
    pub(super) head_len: u8,
    pub(super) body: &'a [u8],
    pub(super) total: u32,
    pub(super) framed: u32,
    pub(super) unacked: u32,
    pub(super) chan: u16,
    pub(super) next: u16,
    pub(super) parent: u16,
    pub(super) children: u16,
    pub(super) child_failed: bool,
    pub(super) msg_id: u32,
    pub(super) kind: Kind,
    pub(super) src_port: PortId,
    pub(super) dest: Dest,
}

impl Op<'_> {
    /// A forward of a long broadcast whose upstream died (see `orphan`).
    pub(super) fn cut(&self, bufs: &Bufs<'_>) -> bool {
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
        head: [0; INLINE_HEAD_MAX],
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
    pub(super) fn chunked(&self) -> bool {
        self.tree && self.aux != mcast::FLAT && self.total as usize > EAGER_MAX
    }

    /// True if the op's channel has failed or its peer said goodbye.
    pub(super) fn chan_gone(&self, chans: &[Channel]) -> bool {
        chans
            .get(self.chan as usize)
            .is_some_and(|c| c.failed || c.left)
    }

    /// The payload bytes `[off, off + len)`, as up to two pieces (head, body).
    pub(super) fn pieces<'s>(&'s self, body: &'s [u8], off: usize, len: usize) -> [&'s [u8]; 2] {
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

/// Handle of a non-blocking send (GAMMA's `isend` handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SendHandle(u32);

impl SendHandle {
    /// A handle from its integer, as a forged or stale one would be (tests).
    #[cfg(test)]
    pub(crate) fn from_raw(v: u32) -> Self {
        SendHandle(v)
    }
    pub(super) fn new(idx: usize, gen: u16) -> Self {
        SendHandle(((gen as u32) << 16) | idx as u32)
    }
    pub(super) fn idx(self) -> usize {
        (self.0 & 0xFFFF) as usize
    }
    pub(super) fn gen(self) -> u16 {
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

/// Marks a finished operation, folding children into their parent. A finished
/// top-level operation gives its eager buffer back, and frees its slot if detached.
pub(super) fn finish_op(ops: &mut [Op<'_>], bufs: &mut Bufs<'_>, i: usize, ok: bool) {
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

/// The outgoing operations, in caller storage, and where the search for a free
/// one starts.
#[derive(Debug)]
pub(crate) struct Ops<'a> {
    pub(crate) table: ManagedSlice<'a, Op<'a>>,
    /// Where the search for a free operation slot starts.
    pub(crate) hint: usize,
}

impl Ops<'_> {
    /// [`Ops::alloc`] that first tries the hint alone: where [`Ops::hint_free`]
    /// ran since, no search.
    #[inline(always)]
    pub(crate) fn alloc_hinted(&mut self) -> Result<usize, Error> {
        let h = self.hint;
        match self.table.get_mut(h) {
            Some(o) if o.state == OpState::Free => {
                o.gen = o.gen.wrapping_add(1);
                o.state = OpState::Active;
                Ok(h)
            }
            _ => self.alloc(),
        }
    }

    /// Points the hint at a free slot, if there is one (taking nothing): done where
    /// time does not count, so that the next [`Ops::alloc_hinted`] is a
    /// single look.
    pub(crate) fn hint_free(&mut self) {
        if let Some(i) = self.free() {
            self.hint = i;
        }
    }

    /// A free operation slot, searched from the hint on: freed slots are usually
    /// near where the last search ended.
    #[inline]
    fn free(&self) -> Option<usize> {
        let n = self.table.len();
        let h = self.hint.min(n);
        (h..n)
            .chain(0..h)
            .find(|&i| self.table[i].state == OpState::Free)
    }

    /// Takes a free slot, its generation bumped.
    pub(crate) fn alloc(&mut self) -> Result<usize, Error> {
        let i = self.free().ok_or(Error::NoResources)?;
        self.hint = i;
        // Bump the generation so stale handles to this slot are recognised.
        let gen = self.table[i].gen.wrapping_add(1);
        self.table[i].gen = gen;
        self.table[i].state = OpState::Active;
        Ok(i)
    }
}

/// The part reads as its table where only the table is wanted (`part[i]`, `iter`).
impl<'a> core::ops::Deref for Ops<'a> {
    type Target = [Op<'a>];
    fn deref(&self) -> &[Op<'a>] {
        &self.table
    }
}

impl<'a> core::ops::DerefMut for Ops<'a> {
    fn deref_mut(&mut self) -> &mut [Op<'a>] {
        &mut self.table
    }
}
