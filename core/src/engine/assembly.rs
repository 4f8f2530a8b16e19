//! Incoming messages being assembled from their frames: finding or reserving an
//! assembly, placing each frame's bytes, and delivering in order.

use super::*;

/// A message being stored into a port's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Assembly {
    pub(super) used: bool,
    /// Fragments are taken and dropped (the port is closed); see `reserve_discard`.
    pub(super) discard: bool,
    pub(super) chan: u16,
    pub(super) msg_id: u32,
    pub(super) reliable: bool,
    pub(super) port: PortId,
    pub(super) base: usize,
    pub(super) cap: usize,
    pub(super) total: u32,
    pub(super) received: u32,
    pub(super) deadline: Instant,
    pub(super) src: Endpoints,
    /// `RMA_NONE`, or a put / get reply written to `addr` (ring `bell` at the end).
    pub(super) rma: u8,
    pub(super) addr: u64,
    pub(super) bell: u64,
    /// The get a reply belongs to.
    pub(super) get: u16,
    /// A tree broadcast: its root (also in `src.src_node`), shape and sequence
    /// number, and the parent operation of its forwards, which holds the eager copy
    /// they are sent from (`NONE`: a leaf).
    pub(super) tree: bool,
    pub(super) shape: u8,
    pub(super) bseq: u32,
    pub(super) relay: u16,
    /// `relay`'s generation, and the relay stream a long one is copied into
    /// (`NONE`: a short one, forwarded whole from the eager copy).
    pub(super) relay_gen: u16,
    pub(super) stream: u16,
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

impl<'a> Engine<'a> {
    /// Reserves room in the destination port for a new message, or `None` to refuse.
    #[inline]
    pub(super) fn reserve(
        &mut self,
        ci: usize,
        repr: &Repr,
        reliable: bool,
        now: Instant,
    ) -> Option<usize> {
        let port = repr.ends.dst_port;
        let p = self.ports.table.get_mut(port as usize)?;
        if !p.input || p.busy {
            return None;
        }
        let ai = self.asms.free_slot()?;
        let base = match p.kind {
            Fill::Restart => 0,
            Fill::Append => p.cursor,
        };
        let cap = (repr.total_len as usize).min(p.room(base));
        if p.kind == Fill::Append {
            p.cursor = base + cap;
        }
        p.busy = true;
        if !reliable {
            self.asms.best_effort += 1;
        }
        self.asms.table[ai] = Assembly {
            used: true,
            chan: ci as u16,
            msg_id: repr.msg_id,
            discard: false,
            reliable,
            port,
            base,
            cap,
            total: repr.total_len,
            received: 0,
            deadline: now + self.cfg.reassembly_timeout,
            src: repr.ends,
            ..Assembly::EMPTY
        };
        Some(ai)
    }

    /// Whether a reliable message that `reserve` refused should be discarded: its port
    /// is reserved or out of range, or has not been bound for input within the grace.
    /// `board`: a board broadcast, whose grace is kept apart (see `unbound_board`).
    pub(super) fn closed_port(
        &mut self,
        ci: usize,
        repr: &Repr,
        now: Instant,
        board: bool,
    ) -> bool {
        let dp = repr.ends.dst_port;
        let unbound = match self.ports.table.get(dp as usize) {
            _ if dp >= self.cfg.reserved_ports_from => return true,
            None => return true,
            Some(p) => !p.input,
        };
        let ch = &mut self.chans.table[ci];
        let waiting = if board {
            &mut ch.unbound_board
        } else {
            &mut ch.unbound_msg
        };
        if !unbound {
            // Busy: ordinary flow control, the port frees up when its message lands.
            *waiting = None;
            return false;
        }
        match *waiting {
            Some((m, since)) if m == repr.msg_id => {
                now.saturating_since(since) >= self.cfg.unbound_grace
            }
            _ => {
                *waiting = Some((repr.msg_id, now));
                false
            }
        }
    }

    /// An assembly that takes a message's fragments and stores nothing, so that the
    /// channel's order holds; the sender is told when it completes. `None` (refuse
    /// for now) if no assembly or control slot is free.
    pub(super) fn reserve_discard(
        &mut self,
        ci: usize,
        repr: &Repr,
        now: Instant,
    ) -> Option<usize> {
        if self.chans.table[ci].ctrl_full() {
            return None;
        }
        let ai = self.asms.free_slot()?;
        self.asms.table[ai] = Assembly {
            used: true,
            discard: true,
            chan: ci as u16,
            msg_id: repr.msg_id,
            reliable: true,
            port: repr.ends.dst_port,
            base: 0,
            cap: 0,
            total: repr.total_len,
            received: 0,
            deadline: now + self.cfg.reassembly_timeout,
            src: repr.ends,
            ..Assembly::EMPTY
        };
        Some(ai)
    }

    /// Copies a fragment into its place in the port buffer.
    #[inline]
    pub(super) fn place(&mut self, ai: usize, offset: u32, payload: &[u8]) {
        let a = &mut self.asms.table[ai];
        a.received = a.received.saturating_add(payload.len() as u32);
        let off = offset as usize;
        if off >= a.cap {
            return;
        }
        let n = payload.len().min(a.cap - off);
        let at = a.base + off;
        if let Some(buf) = self
            .ports
            .table
            .get_mut(a.port as usize)
            .and_then(|p| p.buf.as_deref_mut())
        {
            if let Some(dst) = buf.get_mut(at..at + n) {
                dst.copy_from_slice(&payload[..n]);
            }
        }
    }

    /// The assembly a reliable message's fragment goes to, reserving one with
    /// `reserve` at the message's first fragment; messages are reserved in id order.
    /// `Err(true)`: its message is already complete (take and drop the frame);
    /// `Err(false)`: refuse it for now.
    pub(super) fn assembly_for(
        &mut self,
        ci: usize,
        repr: &Repr,
        reserve: impl FnOnce(&mut Self) -> Option<usize>,
    ) -> Result<usize, bool> {
        if let Some(ai) = self.asms.find(ci, repr.msg_id, true) {
            return Ok(ai);
        }
        let next = self.chans.table[ci].next_reserve;
        if seq_lt(repr.msg_id, next) {
            // Its message is already complete: nothing left to place.
            self.stats.rx_dropped += 1;
            return Err(true);
        }
        if repr.msg_id != next {
            // Placed in message order, so a later message waits for an earlier one.
            return Err(false);
        }
        let ai = reserve(self).ok_or(false)?;
        self.chans.table[ci].next_reserve = next.wrapping_add(1);
        Ok(ai)
    }

    #[inline]
    pub(super) fn rx_reliable_data(
        &mut self,
        now: Instant,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
    ) -> bool {
        let ch = &self.chans.table[ci];
        if repr.msg_id == ch.next_reserve
            && ch.next_deliver == ch.next_reserve
            && self.rx_single_frame(ci, repr, payload, true)
        {
            return true;
        }
        let ai = self.assembly_for(ci, repr, |e| {
            let ai = match e.reserve(ci, repr, true, now) {
                Some(ai) => ai,
                None if e.closed_port(ci, repr, now, false) => e.reserve_discard(ci, repr, now)?,
                None => return None,
            };
            e.chans[ci].unbound_msg = None;
            Some(ai)
        });
        match ai {
            Ok(ai) => {
                self.place(ai, repr.offset, payload);
                true
            }
            Err(taken) => taken,
        }
    }

    /// The fragment of a put or get reply: placed straight into memory, in
    /// message order like [`Engine::rx_reliable_data`].
    pub(super) fn rx_rma_data(
        &mut self,
        now: Instant,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> bool {
        let ch = &self.chans.table[ci];
        if repr.offset == 0
            && repr.flags.contains(Flags::LAST)
            && repr.msg_id == ch.next_reserve
            && ch.next_deliver == ch.next_reserve
            && if repr.kind == Kind::Put {
                self.rx_put_single(ci, repr, payload, mem)
            } else {
                self.rx_get_reply_single(ci, repr, payload, mem)
            }
        {
            return true;
        }
        let ai = match self.assembly_for(ci, repr, |e| e.reserve_rma(ci, repr, payload, now, mem)) {
            Ok(ai) => ai,
            Err(taken) => return taken,
        };
        if self.asms.table[ai].rma == RMA_NONE {
            // A message id of a DATA message: the frame contradicts its sender.
            self.stats.rx_malformed += 1;
            return true;
        }
        let data = payload.get(wire::RMA_PREFIX..).unwrap_or(&[]);
        self.place_rma(ai, repr.offset, data, mem);
        true
    }

    #[inline]
    pub(super) fn deliver_in_order(&mut self, ci: usize, mem: &mut dyn Memory) {
        loop {
            let want = self.chans.table[ci].next_deliver;
            let Some(ai) = self.asms.find(ci, want, true) else {
                return;
            };
            let a = self.asms.table[ai];
            if a.received < a.total {
                if a.stream != NONE {
                    // Its turn to be passed on may have come.
                    self.kick_stream(ai);
                }
                return;
            }
            self.chans.table[ci].next_deliver = want.wrapping_add(1);
            if a.rma != RMA_NONE {
                self.asms.table[ai].used = false;
                self.deliver_rma(a, mem);
                // A get reply frees a get; a denial may now fit the control queue.
                self.wake_refused();
            } else {
                self.deliver(ai, None);
            }
        }
    }

    /// Root `root`'s broadcast `bseq` is behind us (delivered, dropped or refused
    /// for good): its next may come. Counts up to one past the newest seen: a
    /// member below a relay that died answers fences without what the relay lost
    /// (see `orphan`).
    pub(super) fn bcast_passed(&mut self, root: NodeId, bseq: u32) {
        if let Some(s) = self.bcast.seq.get_mut(root as usize) {
            if !seq_lt(bseq, *s) {
                *s = bseq.wrapping_add(1);
            }
        }
    }

    /// Hands a finished (or abandoned, with `lost`) message to its port.
    #[inline]
    pub(super) fn deliver(&mut self, ai: usize, lost: Option<Fault>) {
        let a = &mut self.asms.table[ai];
        a.used = false;
        if !a.reliable {
            self.asms.best_effort -= 1;
        }
        let a = *a;
        if a.tree {
            // The root's next broadcast may come now; our children get this one
            // before our own program does.
            self.bcast_passed(a.src.src_node, a.bseq);
            if a.relay != NONE {
                self.forward_tree(a.relay, a.relay_gen);
            }
            self.wake_refused();
        }
        if a.discard {
            self.stats.rx_rejected += 1;
            // Only the root holds the send that a rejection fails: a forwarder
            // is not told (its own port may well be open).
            let from_root = !a.tree
                || self
                    .chans
                    .get(a.chan as usize)
                    .is_some_and(|c| c.peer_node == a.src.src_node);
            if let Some(ch) = self
                .chans
                .table
                .get_mut(a.chan as usize)
                .filter(|_| from_root)
            {
                self.chans.work.set(true);
                ch.queue_ctrl(Slot::Reject {
                    msg: a.msg_id,
                    port: a.src.src_port,
                });
            }
            return;
        }
        self.progress.delivered = true;
        let truncated = (a.total as usize) > a.cap;
        let fault = lost.or(truncated.then_some(Fault::Truncated));
        match fault {
            Some(Fault::Lost) => self.stats.lost += 1,
            Some(_) => self.stats.truncated += 1,
            None => self.stats.delivered += 1,
        }
        // Whoever was refused may find this port free now.
        self.wake_refused();
        if let Some(p) = self.ports.table.get_mut(a.port as usize) {
            p.busy = false;
            if p.kind == Fill::Append {
                let len = p.buf.as_ref().map_or(0, |b| b.len().min(p.buf_len));
                if truncated {
                    // GAMMA: a filled buffer stays invalid until a fresh one is posted.
                    p.full = true;
                } else if p.cursor >= len {
                    // An exact fit: the next message starts over at the beginning.
                    p.cursor = 0;
                }
            }
        }
        self.notify(Note {
            port: a.port,
            fault,
            count: true,
            msg_len: a.total,
            stored: a.cap.min(a.received as usize),
            base: a.base,
            src: a.src,
        });
    }

    /// Tells the peers whose frames were refused to send them again: a port or a
    /// receive packet came free.
    #[inline]
    pub(super) fn wake_refused(&mut self) {
        // The test inline (every delivery makes it), the waking out of line.
        if self.chans.owed_retries > 0 {
            self.wake_refused_now();
        }
    }

    #[inline(never)]
    pub(super) fn wake_refused_now(&mut self) {
        self.chans.owed_retries = 0;
        for ch in self.chans.table[..self.chans.hwm]
            .iter_mut()
            .filter(|c| c.owed_retry)
        {
            ch.owed_retry = false;
            ch.retry_now = true;
            ch.ack_now = true;
            self.chans.work.set(true);
        }
    }
}

/// The messages being assembled, in caller storage, and counts that bound the
/// scans over them.
#[derive(Debug)]
pub(crate) struct Assemblies<'a> {
    pub(crate) table: ManagedSlice<'a, Assembly>,
    /// One past the highest slot ever taken: lookups scan no further (slots are
    /// taken lowest first, so this stays small).
    pub(crate) hwm: usize,
    /// Best-effort messages being stored (their timers need watching).
    pub(crate) best_effort: usize,
}

impl Assemblies<'_> {
    /// The board message from channel `ci`'s peer being assembled (number `bseq`,
    /// or any).
    pub(super) fn board(&self, ci: usize, bseq: Option<u32>) -> Option<usize> {
        self.table[..self.hwm].iter().position(|a| {
            a.used
                && a.chan == ci as u16
                && a.tree
                && a.shape == mcast::BOARD
                && bseq.is_none_or(|b| a.bseq == b)
        })
    }

    /// The assembly of message `msg_id` on channel `ci` (a board broadcast's, by
    /// the root's broadcast number instead, is not one: see `rx_board_next`).
    pub(super) fn find(&self, ci: usize, msg_id: u32, reliable: bool) -> Option<usize> {
        self.table[..self.hwm].iter().position(|a| {
            a.used
                && a.chan == ci as u16
                && a.msg_id == msg_id
                && a.reliable == reliable
                && !(a.tree && a.shape == mcast::BOARD)
        })
    }

    /// The lowest free slot, if any (`hwm` follows the highest ever taken).
    pub(crate) fn free_slot(&mut self) -> Option<usize> {
        let ai = self.table.iter().position(|a| !a.used)?;
        self.hwm = self.hwm.max(ai + 1);
        Some(ai)
    }
}

/// The part reads as its table where only the table is wanted (`part[i]`, `iter`).
impl core::ops::Deref for Assemblies<'_> {
    type Target = [Assembly];
    fn deref(&self) -> &[Assembly] {
        &self.table
    }
}

impl core::ops::DerefMut for Assemblies<'_> {
    fn deref_mut(&mut self) -> &mut [Assembly] {
        &mut self.table
    }
}
