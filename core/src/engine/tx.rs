//! Sending: the handlers' outbox and what the windows and credits allow per
//! channel (frames are built in `emit.rs`, sends within the call in `send_now.rs`).

use super::*;

impl<'a> Engine<'a> {
    // --------------------------------------------------------------- sending

    /// Starts the sends handlers queued. Only those queued before this call: one
    /// that fails here is a `SendFailure` notice, whose handler runs after the call
    /// and queues for the next one.
    pub(super) fn start_queued(&mut self) {
        let queued = core::mem::take(&mut self.outbox);
        for q in &queued.items[..queued.len] {
            let src = Src::Queued {
                idx: q.eager,
                len: q.len as usize,
            };
            match self.start(q.port, &[], src, q.reliable) {
                Ok(h) => {
                    // Nobody holds the handle: a failure is a notice to the port's owner.
                    let _ = self.detach(h);
                }
                Err(_) => {
                    self.bufs.give_eager(q.eager);
                    if let Some(dest) = self.port_dest(q.port) {
                        self.notify_send_failure(q.port, dest);
                    }
                }
            }
        }
    }

    /// Sends what the windows and credits allow. `ext` is the payload of the
    /// [`Body::External`] send in progress, if any. Returns frames sent.
    pub fn poll_transmit<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
    ) -> usize {
        self.poll_transmit_mem(now, dev, ext, &mut NoMemory)
    }

    /// [`Engine::poll_transmit`] with program memory, which one-sided operations
    /// read their frames' data from.
    #[inline]
    pub(crate) fn poll_transmit_mem<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
        mem: &mut dyn Memory,
    ) -> usize {
        let mut sent = 0;
        if self.outbox.len > 0
            || self.bcast.gate.len > 0
            || self.bcast.gate.waits > 0
            || self.orphans.cuts
            || self.bcast.board_head != NONE
            || self.hellos.waiting()
        {
            sent += self.transmit_queued(now, dev, ext);
        }
        let n = self.chans.hwm;
        if n == 0 {
            return sent;
        }
        if self.chans.work.get() {
            // Start at a different channel each time so no peer is always served last.
            self.chans.rr = if self.chans.rr + 1 >= n {
                0
            } else {
                self.chans.rr + 1
            };
            let mut ci = self.chans.rr;
            // Cleared first: what the pass itself gives a channel sets it again.
            self.chans.work.set(false);
            for _ in 0..n {
                if self.chans.table[ci].to_transmit() {
                    sent += self.transmit_chan(now, dev, ci, ext, mem);
                    if self.chans.table[ci].to_transmit() {
                        // Still waiting (for credits, room): looked at next time.
                        self.chans.work.set(true);
                    }
                }
                ci = if ci + 1 == n { 0 } else { ci + 1 };
            }
        } else {
            debug_assert!(
                !self.chans.table[..n].iter().any(Channel::to_transmit),
                "a channel was given work without `chan_work`"
            );
        }
        if self.bcast.gate.len > 0 {
            // A best-effort broadcast whose copies left in this pass lets what
            // waits behind it go (their frames at the next pass, which their
            // channels' work asks for).
            self.release_gate();
        }
        if sent > 0 {
            dev.flush(now);
        }
        sent
    }

    /// What waits outside the channels: handlers' sends, gated broadcasts, fences
    /// to answer, cut streams, board broadcasts. Returns frames sent.
    #[inline(never)]
    fn transmit_queued<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
    ) -> usize {
        if self.outbox.len > 0 {
            self.start_queued();
        }
        if self.bcast.gate.len > 0 {
            self.release_gate();
        }
        if self.bcast.gate.waits > 0 {
            self.answer_fences();
        }
        if self.orphans.cuts {
            self.end_cuts();
        }
        let mut sent = 0;
        if self.hellos.waiting() {
            sent += self.send_hellos(now, dev);
        }
        if self.bcast.board_head != NONE {
            return sent + self.transmit_board(now, dev, ext);
        }
        sent
    }

    /// [`Engine::poll_transmit`] for a send just started: only its channel is
    /// served, unless handlers' sends or board broadcasts are queued (they go first,
    /// as in a full pass). Other channels wait for the next poll.
    pub(crate) fn transmit_send<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        h: SendHandle,
        ext: Option<&[u8]>,
    ) -> usize {
        let ci = match self.ops.table.get(h.idx()) {
            Some(o) if o.gen == h.gen() && o.dest.node != BROADCAST => o.chan as usize,
            _ => NONE as usize,
        };
        self.transmit_only(now, dev, ci, ext)
    }

    /// Serves channel `ci` alone, or makes a full pass where it is no live channel
    /// or handlers' sends or board broadcasts are queued (they go first).
    fn transmit_only<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ci: usize,
        ext: Option<&[u8]>,
    ) -> usize {
        let alone = ci < self.chans.hwm && self.nothing_ahead();
        if !alone || !self.chans.table[ci].in_use || self.chans.table[ci].failed {
            return self.poll_transmit(now, dev, ext);
        }
        let sent = self.transmit_chan(now, dev, ci, ext, &mut NoMemory);
        if sent > 0 {
            dev.flush(now);
        }
        sent
    }

    /// [`Engine::poll_transmit`] after a packet was launched to instance `dest` of
    /// this group ([`Engine::launch_unicast`]): only its channel is served, as
    /// [`Engine::transmit_send`] does for a send.
    pub(crate) fn transmit_to<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        dest: NodeId,
    ) -> usize {
        let ci = self
            .addr_of(self.cfg.group, dest)
            .ok()
            .and_then(|a| self.chans.peer_map.get(a.0 as usize).copied())
            .map_or(NONE as usize, |c| c as usize);
        self.transmit_only(now, dev, ci, None)
    }

    /// No handlers' sends, board broadcasts, gated broadcasts or cut streams wait:
    /// a send may go straight out on its own channel.
    pub(super) fn nothing_ahead(&self) -> bool {
        self.outbox.len == 0
            && self.bcast.board_head == NONE
            && self.bcast.gate.len == 0
            && self.bcast.gate.waits == 0
            && !self.orphans.cuts
    }

    /// Whether anything waits to be transmitted: a queued or refused send, a
    /// control frame, an ack owed now, a resend, a relayed stream, a barrier, or
    /// what `nothing_ahead` names. A waiting call then polls often (see
    /// `Gamma::await_frame`): credits coming back show only to a poll. Scans the
    /// channels in use, unless none has been given work since a scan found none
    /// (`chan_work`).
    #[inline]
    pub fn sends_waiting(&self) -> bool {
        if !self.nothing_ahead() || self.bar.active || self.bufs.queued_streams > 0 {
            return true;
        }
        if !self.chans.work.get() {
            // Every place that gives a channel work says so (tests check it).
            debug_assert!(
                !self.chans.table[..self.chans.hwm]
                    .iter()
                    .any(Channel::has_work),
                "a channel was given work without `chan_work`"
            );
            return false;
        }
        // A plain loop: `Iter::any` with this closure was a call of its own per scan.
        let mut in_flight_untimed = false;
        for c in &self.chans.table[..self.chans.hwm] {
            if c.has_work() {
                return true;
            }
            in_flight_untimed |= c.to_transmit();
        }
        // Cleared only where `poll_transmit` has nothing to do either.
        self.chans.work.set(in_flight_untimed);
        false
    }

    /// The destination of `port` (one node) and the channel already open to it, for
    /// a send of first piece `head` that may skip the queue.
    pub(super) fn open_channel(&self, port: PortId, head: &[u8]) -> Option<(Dest, usize)> {
        let p = self.ports.table.get(port as usize)?;
        // No address for a broadcast.
        let (dest, addr) = (p.dest?, p.dest_addr?);
        if head.len() > INLINE_HEAD_MAX {
            return None;
        }
        match self.chans.peer_map.get(addr.0 as usize) {
            Some(&ci) if ci != NONE => Some((dest, ci as usize)),
            _ => None,
        }
    }

    pub(super) fn transmit_chan<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ci: usize,
        ext: Option<&[u8]>,
        mem: &mut dyn Memory,
    ) -> usize {
        let Engine {
            chans:
                channel::Channels {
                    table: chans,
                    timer_at,
                    ..
                },
            ops,
            bufs,
            cfg,
            caps,
            stats,
            rma,
            tags,
            ..
        } = self;
        let gets = &rma.gets[..];
        let ch = &mut chans[ci];
        let max_payload = max_payload(cfg, caps);
        if max_payload == 0 {
            return 0;
        }
        let mut tx = Tx::new(dev, now, caps, cfg, &tags.tx, stats, bufs);

        // 1. Frames to send again.
        let mut s = ch.snd_una;
        while ch.resend_any && seq_lt(s, ch.snd_nxt) {
            let e = *ch.slot_mut(s);
            if e.resend && !e.sacked {
                let ok = match e.slot {
                    Slot::Data { op, offset, len } if ops[op as usize].mem_src => {
                        let last = offset + len as u32 == ops[op as usize].total;
                        tx.rma(ch, &ops[op as usize], s, offset, len, last, true, mem)
                    }
                    Slot::Data { op, offset, len } => {
                        let o = &ops[op as usize];
                        if let Some(k) = bufs.pkts.pooled_slot(o.packet) {
                            tx.pooled(ch, o, s, k, true)
                        } else {
                            match frame_pieces(o, bufs, ext, offset, len as usize) {
                                Some(pieces) => {
                                    let last = offset + len as u32 == o.total;
                                    tx.data(ch, o, s, offset, pieces, last, true)
                                }
                                None => false,
                            }
                        }
                    }
                    Slot::Short { idx } => {
                        let copy = ch.shorts[idx as usize];
                        tx.short_again(ch, s, &copy)
                    }
                    ctrl @ (Slot::Barrier { .. }
                    | Slot::Reject { .. }
                    | Slot::FetchAdd { .. }
                    | Slot::FetchAddReply { .. }
                    | Slot::GetRequest { .. }
                    | Slot::Deny { .. }
                    | Slot::Fence { .. }
                    | Slot::FenceOk { .. }
                    | Slot::Abort { .. }
                    | Slot::Bye) => tx.slot(ch, s, ctrl, gets),
                    Slot::Free => true,
                };
                if !ok {
                    return tx.sent;
                }
                ch.slot_mut(s).resend = false;
                tx.stats.retransmits += 1;
            }
            s = s.wrapping_add(1);
        }
        ch.resend_any = false;

        // 2. Control frames: barrier tokens, rejections, fetch-and-adds.
        while ch.ctrl_len > 0 && ch.can_send_new() {
            let slot = ch.ctrl[0];
            let seq = ch.snd_nxt;
            if !tx.slot(ch, seq, slot, gets) {
                return tx.sent;
            }
            ch.push_timed(slot, now);
            ch.ctrl.copy_within(1.., 0);
            ch.ctrl_len -= 1;
        }

        // 3. New data, in queue order. A relayed long broadcast waiting for its
        // next chunk lets the messages queued behind it go first: their receiver
        // has already taken its first frame, so it takes theirs in turn.
        let mut prev = NONE;
        let mut cur = ch.q_head;
        while cur != NONE {
            let oi = cur as usize;
            let o = &ops[oi];
            if o.reliable && !ch.can_send_new() {
                break;
            }
            let off = o.framed;
            let seq = ch.snd_nxt;
            let reliable = o.reliable;
            let len;
            if o.mem_src {
                len = ((o.total - off) as usize).min(max_payload.saturating_sub(wire::RMA_PREFIX));
                let last = off as usize + len == o.total as usize;
                if len == 0 && !last {
                    break;
                }
                if !tx.rma(ch, o, seq, off, len as u16, last, false, mem) {
                    break;
                }
            } else {
                let room = if o.tree {
                    max_payload.saturating_sub(wire::TREE_PREFIX)
                } else {
                    max_payload
                };
                let mut n = ((o.total - off) as usize).min(room);
                if o.chunked() {
                    n = n.min(stream::CHUNK - off as usize % stream::CHUNK);
                }
                if let Some(st) = bufs.streams.get(o.stream as usize) {
                    n = n.min(st.ready_bytes().saturating_sub(off) as usize);
                    if n == 0 {
                        prev = cur;
                        cur = o.next;
                        continue;
                    }
                }
                len = n;
                let last = off as usize + len == o.total as usize;
                if len == 0 && !last {
                    break;
                }
                if let Some(k) = bufs.pkts.pooled_slot(o.packet) {
                    // A packet is one frame, sent from the device slot it lies in.
                    if !tx.pooled(ch, o, seq, k, false) {
                        break;
                    }
                } else {
                    let Some(pieces) = frame_pieces(o, bufs, ext, off, len) else {
                        break;
                    };
                    if !tx.data(ch, o, seq, off, pieces, last, false) {
                        break;
                    }
                }
            }
            let last = off as usize + len == o.total as usize;
            let op = &mut ops[oi];
            op.framed += len as u32;
            op.started = true;
            if reliable {
                ch.push_timed(
                    Slot::Data {
                        op: oi as u16,
                        offset: off,
                        len: len as u16,
                    },
                    now,
                );
                op.unacked += 1;
            }
            if last {
                let next = op.next;
                if prev == NONE {
                    ch.q_head = next;
                } else {
                    ops[prev as usize].next = next;
                }
                if ch.q_tail == cur {
                    ch.q_tail = prev;
                }
                if !reliable {
                    finish_op(ops, bufs, oi, true);
                }
                cur = next;
            }
        }

        // 4. A bare ack if none rode on data; while the peer recovers from a loss
        // (frames came again or after a gap), one for each of those, as TCP acks
        // every such segment at once: a run of lost acks then costs the peer a
        // round trip or two, not a timeout for each.
        if ch.ack_now {
            tx.ack(ch);
        }
        if ch.out_of_order > 0 {
            let mut more = (ch.out_of_order - 1).min(ACKS_IN_RECOVERY);
            ch.out_of_order = 0;
            while more > 0 && tx.ack(ch) {
                more -= 1;
            }
        }
        if ch.outstanding() > 0 {
            ch.arm_rto(now, timer_at);
        }
        tx.sent
    }
}
