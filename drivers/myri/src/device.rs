//! The core's `Device` trait over the NIC, and the services it offers: the send
//! pool, the broadcast board, fetch-and-add and the barrier in NIC memory, and
//! liveness words.

use super::*;
use volley_core::phy::{Board, Liveness, NicAtomics, NicBarrier, SendPool};

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

    // A send is a slot and a publish: the time may be read after it.
    fn transmit_reads_time(&self) -> bool {
        false
    }

    /// A load of each peer's next ring slot, and of the board count.
    fn rx_pending(&self) -> bool {
        self.rx_ready().is_some() || self.boards_unseen().is_some()
    }

    #[inline(always)]
    fn liveness(&mut self) -> Option<&mut dyn Liveness> {
        Some(self)
    }

    #[inline(always)]
    fn nic_atomics(&mut self) -> Option<&mut dyn NicAtomics> {
        Some(self)
    }

    #[inline(always)]
    fn nic_barrier(&mut self) -> Option<&mut dyn NicBarrier> {
        Some(self)
    }

    #[inline(always)]
    fn board(&mut self) -> Option<&mut dyn Board> {
        Some(self)
    }

    #[inline(always)]
    fn send_pool(&self) -> Option<&dyn SendPool> {
        Some(self)
    }

    #[inline(always)]
    fn send_pool_mut(&mut self) -> Option<&mut dyn SendPool> {
        Some(self)
    }
}

impl SendPool for MyriNic {
    fn slot(&self, i: usize) -> Option<&[u8]> {
        if i >= POOL_SLOTS {
            return None;
        }
        self.region
            .bytes(self.rings.pool_slot(self.me, i), POOL_SLOT)
            .ok()
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
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

    fn send_slot(
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
        match Device::transmit(self, now, dst) {
            Some(tok) => {
                tok.consume_indirect(slot, len, head, tail);
                self.stats.tx_pooled += 1;
                true
            }
            None => false,
        }
    }
}

impl Board for MyriNic {
    fn write(&mut self, now: Instant, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        self.board_write(now, len, &mut |buf, _| fill(buf))
    }

    fn write_pooled(
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

    fn read(&mut self, _now: Instant, take: &mut dyn FnMut(NodeAddr, &[u8]) -> BoardTake) -> bool {
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

    fn unread(&mut self, now: Instant) -> bool {
        self.board_waits_for_readers(now)
    }
}

impl NicAtomics for MyriNic {
    fn fetch_add(&mut self, peer: NodeAddr, var: u16, delta: u32) -> Option<u32> {
        // The counters are 64-bit in NIC memory; the API's values are 32-bit.
        self.fetch_and_add(peer.0 as u32, var as usize, delta as u64)
            .ok()
            .map(|v| v as u32)
    }
}

impl NicBarrier for MyriNic {
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
}

impl Liveness for MyriNic {
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
