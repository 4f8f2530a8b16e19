//! The broadcast board: each node's ring of slots in NIC memory, written once
//! and read by every member.

use super::*;
use volley_core::phy::Liveness;

impl MyriNic {
    /// Writes a frame of `len` bytes, filled by `fill` (given the region, to read
    /// our send slots), into our board ([`volley_core::phy::Board::write`]).
    pub(super) fn board_write(
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
        self.raise_readers();
        true
    }

    /// The board's free slots once every reader still in the job is counted:
    /// readers that left or died are passed over (their frames are lost with them).
    pub(super) fn board_room(&mut self) -> u64 {
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

    /// [`volley_core::phy::Board::unread`]: a live reader that has neither read every frame
    /// of our board nor said it holds the next one back. One whose heartbeat has
    /// stopped is not waited for (the barrier then finds it dead).
    pub(super) fn board_waits_for_readers(&mut self, now: Instant) -> bool {
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

    /// The first root of `from..to` (to at most the node count), not us, whose
    /// board holds a frame we have not read. One load per board: its place is
    /// stepped to from the one before, not computed anew (a poll scans every
    /// node's board, so that cost grows with the job).
    #[inline]
    pub(super) fn board_fresh_in(&self, from: u32, to: u32) -> Option<u32> {
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
    pub(super) fn boards_unseen(&self) -> Option<u64> {
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
    pub(super) fn board_take(
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
}
