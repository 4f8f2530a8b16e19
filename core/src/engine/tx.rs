//! Sending: the handlers' outbox, what the windows and credits allow per channel,
//! and frame emission.

use super::*;

/// Longest handler's send that [`Engine::send_queued_at_once`] sends at once
/// (copied to the stack on the way): an active message's reply, say.
const QUEUED_AT_ONCE: usize = 1024;

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

    /// Sends the handlers' queued sends at once, in order, each as the program's
    /// own send would leave when nothing is ahead of it (one frame, no queue, no
    /// pass over the channels): an active message's reply, sent from its handler,
    /// leaves as soon as the handler returns. Stops at the first that cannot (a
    /// broadcast, longer than 1 KiB, a channel with something queued or no room);
    /// it and those after it stay queued, in order, for the next transmit pass.
    /// Returns the frames sent.
    pub fn send_queued_at_once<D: Device>(&mut self, now: Instant, dev: &mut D) -> usize {
        // Taken while they go: a send at once needs nothing queued ahead of it.
        let mut queued = core::mem::take(&mut self.outbox);
        let n = queued.len;
        let mut sent = 0;
        while sent < n && self.send_queued_now(now, dev, &queued.items[sent]) {
            sent += 1;
        }
        queued.items.copy_within(sent..n, 0);
        queued.len = n - sent;
        self.outbox = queued;
        sent
    }

    /// One handler's send of [`Engine::send_queued_at_once`], its outbox copy given
    /// back once it has left. `false`, nothing changed: it does not apply.
    fn send_queued_now<D: Device>(&mut self, now: Instant, dev: &mut D, q: &Queued) -> bool {
        let len = q.len as usize;
        if len > QUEUED_AT_ONCE || self.open_channel(q.port, &[]).is_none() {
            return false;
        }
        // Copied out: the send paths copy from the caller's bytes (a reliable one
        // into an eager buffer of its own, which is then this one).
        let mut copy = [0u8; QUEUED_AT_ONCE];
        let Some(data) = self
            .bufs
            .eager
            .get(q.eager as usize)
            .map(|b| &b.data[..len])
        else {
            return false;
        };
        copy[..len].copy_from_slice(data);
        let body = &copy[..len];
        // Given back first: a reliable send needs a free buffer, and takes the one
        // given back last.
        self.bufs.give_eager(q.eager);
        let sent = if q.reliable {
            self.send_now_reliable_timed(dev, q.port, &[], body, || now)
        } else {
            self.send_now_timed(dev, q.port, &[], body, || now)
        };
        if sent {
            self.stats.tx_queued_at_once += 1;
        } else {
            // Nothing happened: the same buffer, its bytes unchanged, taken again.
            self.bufs.take_eager(q.eager);
        }
        sent
    }

    /// [`Engine::send_now_reliable_timed`] for a non-blocking send: when the message
    /// left in this call, a handle of its own that reports it done (the message
    /// goes on detached, as a blocking send's: a failure later reaches the port's
    /// error handler or error semaphore). `None`, nothing changed: it did not leave.
    pub fn isend_now_reliable<D: Device>(
        &mut self,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
        now: impl FnMut() -> Instant,
    ) -> Option<SendHandle> {
        // The handle's slot, taken first: the message must not leave without one.
        let token = self.alloc_op().ok()?;
        let gen = self.ops[token].gen;
        self.ops[token] = Op {
            gen,
            state: OpState::Done,
            ..Op::EMPTY
        };
        if self.send_now_reliable_timed(dev, port, head, body, now) {
            Some(SendHandle::new(token, gen))
        } else {
            self.ops[token].state = OpState::Free;
            None
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
    pub fn poll_transmit_mem<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
        mem: &mut dyn Memory,
    ) -> usize {
        let mut sent = 0;
        if self.outbox.len > 0
            || self.gate.len > 0
            || self.gate.waits > 0
            || self.cuts
            || self.board_head != NONE
            || self.hellos > 0
        {
            sent += self.transmit_queued(now, dev, ext);
        }
        let n = self.chan_hwm;
        if n == 0 {
            return sent;
        }
        if self.chan_work.get() {
            // Start at a different channel each time so no peer is always served last.
            self.rr = if self.rr + 1 >= n { 0 } else { self.rr + 1 };
            let mut ci = self.rr;
            // Cleared first: what the pass itself gives a channel sets it again.
            self.chan_work.set(false);
            for _ in 0..n {
                if self.chans[ci].to_transmit() {
                    sent += self.transmit_chan(now, dev, ci, ext, mem);
                    if self.chans[ci].to_transmit() {
                        // Still waiting (for credits, room): looked at next time.
                        self.chan_work.set(true);
                    }
                }
                ci = if ci + 1 == n { 0 } else { ci + 1 };
            }
        } else {
            debug_assert!(
                !self.chans[..n].iter().any(Channel::to_transmit),
                "a channel was given work without `chan_work`"
            );
        }
        if self.gate.len > 0 {
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
        if self.gate.len > 0 {
            self.release_gate();
        }
        if self.gate.waits > 0 {
            self.answer_fences();
        }
        if self.cuts {
            self.end_cuts();
        }
        let mut sent = 0;
        if self.hellos > 0 {
            sent += self.send_hellos(now, dev);
        }
        if self.board_head != NONE {
            return sent + self.transmit_board(now, dev, ext);
        }
        sent
    }

    /// [`Engine::poll_transmit`] for a send just started: only its channel is
    /// served, unless handlers' sends or board broadcasts are queued (they go first,
    /// as in a full pass). Other channels wait for the next poll.
    pub fn transmit_send<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        h: SendHandle,
        ext: Option<&[u8]>,
    ) -> usize {
        let ci = match self.ops.get(h.idx()) {
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
        let alone = ci < self.chan_hwm && self.nothing_ahead();
        if !alone || !self.chans[ci].in_use || self.chans[ci].failed {
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
    pub fn transmit_to<D: Device>(&mut self, now: Instant, dev: &mut D, dest: NodeId) -> usize {
        let ci = self
            .addr_of(self.cfg.group, dest)
            .ok()
            .and_then(|a| self.peer_map.get(a.0 as usize).copied())
            .map_or(NONE as usize, |c| c as usize);
        self.transmit_only(now, dev, ci, None)
    }

    /// No handlers' sends, board broadcasts, gated broadcasts or cut streams wait:
    /// a send may go straight out on its own channel.
    pub(super) fn nothing_ahead(&self) -> bool {
        self.outbox.len == 0
            && self.board_head == NONE
            && self.gate.len == 0
            && self.gate.waits == 0
            && !self.cuts
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
        if !self.chan_work.get() {
            // Every place that gives a channel work says so (tests check it).
            debug_assert!(
                !self.chans[..self.chan_hwm].iter().any(Channel::has_work),
                "a channel was given work without `chan_work`"
            );
            return false;
        }
        // A plain loop: `Iter::any` with this closure was a call of its own per scan.
        let mut in_flight_untimed = false;
        for c in &self.chans[..self.chan_hwm] {
            if c.has_work() {
                return true;
            }
            in_flight_untimed |= c.to_transmit();
        }
        // Cleared only where `poll_transmit` has nothing to do either.
        self.chan_work.set(in_flight_untimed);
        false
    }

    /// The destination of `port` (one node) and the channel already open to it, for
    /// a send of first piece `head` that may skip the queue.
    fn open_channel(&self, port: PortId, head: &[u8]) -> Option<(Dest, usize)> {
        let p = self.ports.get(port as usize)?;
        // No address for a broadcast.
        let (dest, addr) = (p.dest?, p.dest_addr?);
        if head.len() > HEAD_MAX {
            return None;
        }
        match self.peer_map.get(addr.0 as usize) {
            Some(&ci) if ci != NONE => Some((dest, ci as usize)),
            _ => None,
        }
    }

    /// Sends a reliable message that fits one frame at once, from a copy in an
    /// eager buffer, when its channel has nothing queued, nothing to resend and room
    /// in the peer's window: the frame leaves in this call, no queue and no pass
    /// over the channels (a short broadcast: into the board, see `send_now_board`).
    /// The send is detached (see [`Engine::detach`]): the ack frees the copy, and a
    /// failure is reported through the port's error handler or error semaphore.
    /// `false` when it does not apply, no eager buffer or slot is free, or the
    /// device has no room; nothing has happened then, and
    /// [`Engine::start_send_eager`] or [`Engine::start_send`] takes the message.
    pub fn send_now_reliable<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
    ) -> bool {
        self.send_now_reliable_timed(dev, port, head, body, || now)
    }

    /// [`Engine::send_now_reliable`] that reads the time through `now` (at most
    /// once) only where it is needed: before the frame if the device's transmit
    /// reads it ([`Device::transmit_reads_time`]), else once the frame has left (its
    /// retransmission timer starts then), so that no clock read delays the frame.
    pub fn send_now_reliable_timed<D: Device>(
        &mut self,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
        mut now: impl FnMut() -> Instant,
    ) -> bool {
        // Handlers' sends and board broadcasts go first (as in `transmit_only`).
        if !self.nothing_ahead() {
            return false;
        }
        let Some((dest, ci)) = self.open_channel(port, head) else {
            return self.send_now_board(now(), dev, port, head, body);
        };
        let total = head.len() + body.len();
        let max = max_payload(&self.cfg, &self.caps);
        let ready = self.chans[ci].free_to_send_now();
        if !ready || max == 0 || total > max || body.len() > EAGER_MAX {
            return false;
        }
        // The copy is taken once the frame is out (it is needed only to send again):
        // the receiver does not wait for it. A buffer is sure to be free then.
        if self.bufs.eager_free == 0 {
            return false;
        }
        let Ok(oi) = self.alloc_op_hinted() else {
            return false;
        };
        let Engine {
            chans,
            ops,
            bufs,
            cfg,
            caps,
            stats,
            tag_tx,
            ..
        } = self;
        let ch = &mut chans[ci];
        // An eager message's ack rides on the reply (see `data_flags`), unless the
        // peer's window is filling.
        let mut flags = Flags::RELIABLE | Flags::LAST;
        if ch.filling() {
            flags |= Flags::ACK_REQ;
        }
        let repr = single_repr(port, dest, flags, ch.snd_nxt, ch.next_msg, total);
        let early = dev.transmit_reads_time().then(&mut now);
        let at = early.unwrap_or(self.polled_at);
        let mut tx = Tx::new(dev, at, caps, cfg, tag_tx, stats, bufs);
        if !tx.single(ch, repr, head, body) {
            ops[oi].state = OpState::Free;
            return false;
        }
        dev.flush(at);
        let now = move || early.unwrap_or_else(now);
        self.sent_eager_single(now, ci, oi, dest, port, head, body);
        true
    }

    /// [`Engine::start_put`] of a put that fits one frame, sent in this call where
    /// its channel may take a new frame ahead of nothing (as
    /// [`Engine::send_now_reliable`] sends a message): no queue, no transmit pass.
    /// `Ok(false)`, nothing changed: not sent (something ahead, no credit, too long
    /// for one frame, no free operation, the device full); `start_put` takes it.
    /// The caller flushes the device ([`Device::flush`]).
    #[allow(clippy::too_many_arguments)]
    pub fn put_now<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        mem: &mut dyn Memory,
        group: GroupId,
        node: NodeId,
        remote: u64,
        local: u64,
        len: u32,
        local_bell: u64,
        remote_bell: u64,
    ) -> Result<bool, Error> {
        let ci = self.put_channel(mem, group, node, local, len)?;
        let fits = len as usize + wire::RMA_PREFIX <= max_payload(&self.cfg, &self.caps);
        if !fits || !self.nothing_ahead() || !self.chans[ci].free_to_send_now() {
            return Ok(false);
        }
        let Ok(oi) = self.alloc_op() else {
            return Ok(false);
        };
        let Engine {
            chans,
            ops,
            bufs,
            cfg,
            caps,
            stats,
            tag_tx,
            timer_at,
            ..
        } = self;
        let ch = &mut chans[ci];
        let gen = ops[oi].gen;
        ops[oi] = Op {
            gen,
            chan: ci as u16,
            msg_id: ch.next_msg,
            ..super::rma::put_op(group, node, remote, local, len, local_bell, remote_bell)
        };
        let seq = ch.snd_nxt;
        let mut tx = Tx::new(dev, now, caps, cfg, tag_tx, stats, bufs);
        if !tx.rma(ch, &ops[oi], seq, 0, len as u16, true, false, mem) {
            ops[oi].state = OpState::Free;
            return Ok(false);
        }
        ch.next_msg = ch.next_msg.wrapping_add(1);
        ch.push_timed(
            Slot::Data {
                op: oi as u16,
                offset: 0,
                len: len as u16,
            },
            now,
        );
        let op = &mut ops[oi];
        op.framed = len;
        op.started = true;
        op.unacked = 1;
        ch.arm_rto(now, timer_at);
        Ok(true)
    }

    /// [`Engine::start_get`] with its request sent in this call where its channel
    /// may take a new frame ahead of nothing (as [`Engine::put_now`]). `Ok(false)`,
    /// nothing changed: not sent (something ahead, no credit, no free get slot, the
    /// device full); `start_get` takes it. The caller flushes the device.
    #[allow(clippy::too_many_arguments)]
    pub fn get_now<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        mem: &mut dyn Memory,
        group: GroupId,
        node: NodeId,
        remote: u64,
        local: u64,
        len: u32,
        local_bell: u64,
        remote_bell: u64,
    ) -> Result<bool, Error> {
        let (gi, ci) = match self.get_slot(mem, group, node, local, len) {
            Ok(s) => s,
            Err(Error::NoResources) => return Ok(false),
            Err(e) => return Err(e),
        };
        let open = max_payload(&self.cfg, &self.caps) >= wire::GET_REQUEST_LEN;
        if !open || !self.nothing_ahead() || !self.chans[ci].free_to_send_now() {
            return Ok(false);
        }
        let Engine {
            chans,
            bufs,
            cfg,
            caps,
            stats,
            tag_tx,
            rma,
            timer_at,
            ..
        } = self;
        let ch = &mut chans[ci];
        let req = rma.next_req;
        rma.gets[gi] = rma::Get {
            state: rma::GetState::Waiting,
            chan: ci as u16,
            req,
            local,
            local_bell,
            remote,
            remote_bell,
            len,
        };
        let slot = Slot::GetRequest {
            get: gi as u16,
            req,
        };
        let seq = ch.snd_nxt;
        let mut tx = Tx::new(dev, now, caps, cfg, tag_tx, stats, bufs);
        if !tx.slot(ch, seq, slot, &rma.gets) {
            rma.gets[gi].state = rma::GetState::Free;
            return Ok(false);
        }
        rma.next_req = req.wrapping_add(1);
        ch.push_timed(slot, now);
        ch.arm_rto(now, timer_at);
        Ok(true)
    }

    /// What [`Engine::send_now_reliable_timed`] does once its frame is out: the
    /// operation (taken before, so that the frame could not go without one) filled
    /// in, the copy for sending again, the frame's place in the channel and its
    /// timer. Nothing here delays the frame or its receiver; kept out of line so
    /// that the cost before the frame leaves can be measured apart (`engine_cost`).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn sent_eager_single(
        &mut self,
        now: impl FnOnce() -> Instant,
        ci: usize,
        oi: usize,
        dest: Dest,
        port: PortId,
        head: &[u8],
        body: &[u8],
    ) {
        let now = now();
        let total = head.len() + body.len();
        let Engine {
            chans, ops, bufs, ..
        } = self;
        let ch = &mut chans[ci];
        let op = fresh_reliable_op(ops, oi);
        op.head[..head.len()].copy_from_slice(head);
        op.head_len = head.len() as u8;
        op.total = total as u32;
        op.src_port = port;
        op.dest = dest;
        op.chan = ci as u16;
        op.next = NONE;
        op.msg_id = ch.next_msg;
        // `eager_free` said one is free, and nothing took it since.
        if let Some(eager) = bufs.free_eager() {
            op.eager = eager as u16;
            let b = &mut bufs.eager[eager];
            b.data[..body.len()].copy_from_slice(body);
            bufs.take_eager(eager as u16);
        }
        ch.next_msg = ch.next_msg.wrapping_add(1);
        ch.push_timed(
            Slot::Data {
                op: oi as u16,
                offset: 0,
                len: total as u16,
            },
            now,
        );
        let op = &mut ops[oi];
        op.framed = total as u32;
        op.started = true;
        op.unacked = 1;
        op.detached = true;
        ch.arm_rto(now, &mut self.timer_at);
        // The next send's slot, looked for now rather than before its frame.
        self.hint_free_op();
    }

    /// [`Engine::launch_unicast`] with the frame sent in this call, when nothing is
    /// queued before it on its channel (the packet's counterpart of
    /// [`Engine::send_now_reliable`]): its operation is set up in place, with no
    /// queue and no transmit pass. `Ok(false)` when that does not apply (to itself,
    /// no open channel, something ahead, no credit) or the device has no room:
    /// nothing has happened then, and `launch_unicast` takes the packet. The
    /// caller flushes the device ([`Device::flush`]) once it has launched what it
    /// has, so that a run of packets leaves in one batch where the device batches.
    pub fn launch_unicast_now<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        id: PacketId,
        dest: NodeId,
        len: usize,
    ) -> Result<bool, Error> {
        self.launch_unicast_now_timed(dev, id, dest, len, || now)
    }

    /// [`Engine::launch_unicast_now`] that reads the time through `now` only where
    /// it is needed, as [`Engine::send_now_reliable_timed`] does.
    pub fn launch_unicast_now_timed<D: Device>(
        &mut self,
        dev: &mut D,
        id: PacketId,
        dest: NodeId,
        len: usize,
        mut now: impl FnMut() -> Instant,
    ) -> Result<bool, Error> {
        self.check_launch(id, len)?;
        if dest >= self.size {
            return Err(Error::UnknownNode);
        }
        let group = self.cfg.group;
        if dest == self.cfg.node || !self.nothing_ahead() {
            return Ok(false);
        }
        let ci = match self.addr_of(group, dest) {
            Ok(a) => self.peer_map.get(a.0 as usize).map_or(NONE, |&c| c) as usize,
            Err(_) => return Ok(false),
        };
        let Some(ch) = self.chans[..self.chan_hwm].get(ci) else {
            return Ok(false);
        };
        let ready = ch.peer_group == group && ch.peer_node == dest && ch.free_to_send_now();
        let max = max_payload(&self.cfg, &self.caps);
        if !ready || max == 0 || len > max {
            return Ok(false);
        }
        let Ok(oi) = self.alloc_op() else {
            return Ok(false);
        };
        let Engine {
            chans,
            ops,
            bufs,
            cfg,
            caps,
            stats,
            tag_tx,
            ..
        } = self;
        let ch = &mut chans[ci];
        // The operation `launch_unicast` queues (`start_packet_send`, `enqueue`).
        let op = fresh_reliable_op(ops, oi);
        op.detached = true;
        op.kind = Kind::Packet;
        op.packet = id.raw();
        op.aux = mcast::Tree::Binary as u8;
        op.total = len as u32;
        op.src_port = cfg.node;
        op.dest = Dest {
            group,
            node: dest,
            port: mcast::UNICAST,
        };
        op.chan = ci as u16;
        op.next = NONE;
        op.msg_id = ch.next_msg;
        let Some(was) = bufs.pkts.set_len(id, len) else {
            ops[oi].state = OpState::Free;
            return Ok(false);
        };
        let o = &ops[oi];
        let seq = ch.snd_nxt;
        let early = dev.transmit_reads_time().then(&mut now);
        let mut tx = Tx::new(
            dev,
            early.unwrap_or(self.polled_at),
            caps,
            cfg,
            tag_tx,
            stats,
            bufs,
        );
        let sent = match bufs.pkts.pooled_slot(o.packet) {
            Some(k) => tx.pooled(ch, o, seq, k, false),
            None => frame_pieces(o, bufs, None, 0, len)
                .is_some_and(|pieces| tx.data(ch, o, seq, 0, pieces, true, false)),
        };
        if !sent {
            ops[oi].state = OpState::Free;
            bufs.pkts.set_len(id, was as usize);
            return Ok(false);
        }
        bufs.pkts.launched(id);
        ch.next_msg = ch.next_msg.wrapping_add(1);
        let now = early.unwrap_or_else(now);
        ch.push_timed(
            Slot::Data {
                op: oi as u16,
                offset: 0,
                len: len as u16,
            },
            now,
        );
        let op = &mut ops[oi];
        op.framed = len as u32;
        op.started = true;
        op.unacked = 1;
        ch.arm_rto(now, &mut self.timer_at);
        Ok(true)
    }

    /// [`Engine::launch_unicast`], with the frame sent in this call where
    /// [`Engine::launch_unicast_now`] allows: `Ok(true)` if it left, `Ok(false)` if
    /// it was queued for the next transmit pass (the caller flushes the device, as
    /// there).
    pub fn launch_unicast_on<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        id: PacketId,
        dest: NodeId,
        len: usize,
    ) -> Result<bool, Error> {
        if self.launch_unicast_now(now, dev, id, dest, len)? {
            return Ok(true);
        }
        self.launch_unicast(id, dest, len).map(|()| false)
    }

    /// Sends a best-effort message that fits one frame at once, when nothing is
    /// queued before it on its channel: no op, no queue, no pass over the channels.
    /// Most small sends take this path. `false` when it does not apply or the device
    /// has no room; nothing has happened then, and [`Engine::start_send`] takes the
    /// message.
    pub fn send_now<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
    ) -> bool {
        self.send_now_timed(dev, port, head, body, || now)
    }

    /// [`Engine::send_now`] that reads the time through `now` only if the device's
    /// transmit reads it ([`Device::transmit_reads_time`]): a best-effort frame
    /// needs no time of its own.
    pub fn send_now_timed<D: Device>(
        &mut self,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
        now: impl FnOnce() -> Instant,
    ) -> bool {
        let Some((dest, ci)) = self.open_channel(port, head) else {
            return false;
        };
        let at = if dev.transmit_reads_time() {
            now()
        } else {
            self.polled_at
        };
        let Engine {
            chans,
            bufs,
            cfg,
            caps,
            stats,
            tag_tx,
            ..
        } = self;
        let ch = &mut chans[ci];
        let total = head.len() + body.len();
        // No frame before the first poll has told the engine the device's MTU.
        let max = max_payload(cfg, caps);
        let fits = max > 0 && total <= max;
        if !fits || !ch.in_use || ch.failed || ch.q_head != NONE {
            return false;
        }
        // One frame, no op: the header straight from what is known here.
        let repr = single_repr(port, dest, Flags::LAST, 0, ch.next_be_msg, total);
        let mut tx = Tx::new(dev, at, caps, cfg, tag_tx, stats, bufs);
        if !tx.single(ch, repr, head, body) {
            return false;
        }
        ch.next_be_msg = ch.next_be_msg.wrapping_add(1);
        dev.flush(at);
        true
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
            chans,
            ops,
            bufs,
            cfg,
            caps,
            stats,
            rma,
            tag_tx,
            ..
        } = self;
        let gets = &rma.gets[..];
        let ch = &mut chans[ci];
        let max_payload = max_payload(cfg, caps);
        if max_payload == 0 {
            return 0;
        }
        let mut tx = Tx::new(dev, now, caps, cfg, tag_tx, stats, bufs);

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
            ch.arm_rto(now, &mut self.timer_at);
        }
        tx.sent
    }
}

/// The most acks a channel sends in one pass while its peer recovers from a loss.
const ACKS_IN_RECOVERY: u8 = 16;

/// Operation slot `oi`, just allocated, cleared for a reliable send (its
/// generation kept, so handles to its past uses stay stale).
fn fresh_reliable_op<'o, 'a>(ops: &'o mut [Op<'a>], oi: usize) -> &'o mut Op<'a> {
    let op = &mut ops[oi];
    *op = Op {
        gen: op.gen,
        state: OpState::Active,
        reliable: true,
        ..Op::EMPTY
    };
    op
}

/// The header of a message of `total` bytes sent whole in one frame from `port` to
/// `dest` (addresses and ack filled in at emission).
#[inline]
fn single_repr(
    port: PortId,
    dest: Dest,
    flags: Flags,
    seq: u32,
    msg_id: u32,
    total: usize,
) -> Repr {
    Repr {
        kind: Kind::Data,
        flags,
        job_key: 0,
        ends: Endpoints {
            src_port: port,
            dst_port: dest.port,
            ..Endpoints::default()
        },
        seq,
        ack: None,
        msg_id,
        offset: 0,
        total_len: total as u32,
        payload_len: total as u16,
    }
}

/// The most payload one frame carries on this device (after header and tag).
fn max_payload(cfg: &Config, caps: &Capabilities) -> usize {
    let tag = if cfg.auth_key.is_some() {
        wire::TAG_LEN
    } else {
        0
    };
    caps.mtu
        .saturating_sub(HEADER_LEN + tag)
        .min(u16::MAX as usize)
}

/// The credits this endpoint advertises in its acks: with a receive ring, no more
/// than it has room for (at least one, so a full ring answers with a refusal and a
/// RETRY once a slot frees).
fn ack_window(cfg: &Config, bufs: &Bufs<'_>) -> u16 {
    let window = cfg.window.min(MAX_WINDOW as u16);
    if bufs.pkts.rx.is_empty() {
        window
    } else {
        window.min(bufs.pkts.rx_free().max(1) as u16)
    }
}

/// The pieces of bytes `off..off + len` of an operation's message.
fn frame_pieces<'b>(
    o: &'b Op<'_>,
    bufs: &'b Bufs<'_>,
    ext: Option<&'b [u8]>,
    off: u32,
    len: usize,
) -> Option<[&'b [u8]; 2]> {
    if o.stream != NONE {
        return stream::piece(bufs, o.stream, off, len).map(|p| [&[][..], p]);
    }
    let body = op_body(o, bufs, ext)?;
    Some(o.pieces(body, off as usize, len))
}

/// The payload of an operation: borrowed, in an eager buffer, or the `ext` of `poll`
/// (`None` if that is missing or of the wrong length).
pub(super) fn op_body<'b>(
    o: &'b Op<'_>,
    bufs: &'b Bufs<'_>,
    ext: Option<&'b [u8]>,
) -> Option<&'b [u8]> {
    let len = (o.total as usize).saturating_sub(o.head_len as usize);
    if o.packet != NONE {
        return bufs.pkts.payload(o.packet).filter(|b| b.len() == len);
    }
    if let Some(b) = bufs.eager.get(o.eager as usize) {
        return b.data.get(..len);
    }
    if o.external {
        return ext.filter(|b| b.len() == len);
    }
    Some(o.body)
}

/// Frame emission for one channel.
struct Tx<'t, D> {
    dev: &'t mut D,
    now: Instant,
    caps: Capabilities,
    cfg: &'t Config,
    /// The short tags' hash of the last header sent.
    tags: &'t wire::TagCache,
    stats: &'t mut Stats,
    /// Credits advertised in this round's acks.
    window: u16,
    sent: usize,
}

impl<'t, D: Device> Tx<'t, D> {
    fn new(
        dev: &'t mut D,
        now: Instant,
        caps: &Capabilities,
        cfg: &'t Config,
        tags: &'t wire::TagCache,
        stats: &'t mut Stats,
        bufs: &Bufs<'_>,
    ) -> Self {
        Tx {
            dev,
            now,
            caps: *caps,
            cfg,
            tags,
            stats,
            window: ack_window(cfg, bufs),
            sent: 0,
        }
    }

    fn emit(&mut self, ch: &mut Channel, mut repr: Repr, pieces: [&[u8]; 2]) -> bool {
        // A payload in two places (a tree prefix before the data) is joined: a long
        // tag is computed fastest over one slice (`wire::tag_parts`).
        let split = !pieces[0].is_empty() && !pieces[1].is_empty();
        if split || pieces[0].len() + pieces[1].len() < self.dev.gather_from() {
            return self.emit_with(ch, repr, |rest| {
                let (a, b) = rest.split_at_mut(pieces[0].len());
                a.copy_from_slice(pieces[0]);
                b.copy_from_slice(pieces[1]);
            });
        }
        // The device sends the payload from where it lies: header and tag beside it.
        self.address(ch, &mut repr);
        let key = self.cfg.auth_key.as_ref();
        let Ok((h, t)) = repr.frame_parts(self.caps.integrity, key, pieces) else {
            return false;
        };
        let tag = if key.is_some() { &t[..] } else { &[] };
        if !self
            .dev
            .transmit_parts(self.now, ch.peer, &[&h, pieces[0], pieces[1], tag])
        {
            return false;
        }
        self.sent_frame(ch, &repr);
        true
    }

    /// A whole message in one frame, `head` then `body`: [`Tx::emit`] without the
    /// pieces of an operation (the send-at-once paths).
    #[inline]
    fn single(&mut self, ch: &mut Channel, repr: Repr, head: &[u8], body: &[u8]) -> bool {
        if head.is_empty() && body.len() >= self.dev.gather_from() {
            return self.emit(ch, repr, [head, body]);
        }
        self.emit_with(ch, repr, |rest| {
            let (a, b) = rest.split_at_mut(head.len());
            a.copy_from_slice(head);
            b.copy_from_slice(body);
        })
    }

    /// Fills in what every frame on `ch` carries: addresses, job, ack, flags.
    fn address(&self, ch: &Channel, repr: &mut Repr) {
        repr.ends.src_group = self.cfg.group;
        repr.ends.src_node = self.cfg.node;
        repr.ends.dst_group = ch.peer_group;
        repr.ends.dst_node = ch.peer_node;
        repr.job_key = self.cfg.job_key;
        repr.ack = Some(ch.ack_info(self.window));
        if ch.refusing {
            repr.flags |= Flags::REFUSED;
        }
        if ch.retry_now {
            repr.flags |= Flags::RETRY;
        }
    }

    /// The bookkeeping of a frame sent on `ch`.
    fn sent_frame(&mut self, ch: &mut Channel, repr: &Repr) {
        ch.ack_now = false;
        ch.ack_at = None;
        ch.since_ack = 0;
        ch.refusing = false;
        ch.retry_now = false;
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += repr.payload_len as u64;
        self.sent += 1;
    }

    /// Emits `repr` with its payload written by `fill` straight into the frame.
    fn emit_with<F: FnOnce(&mut [u8])>(
        &mut self,
        ch: &mut Channel,
        mut repr: Repr,
        fill: F,
    ) -> bool {
        self.address(ch, &mut repr);
        let skip_crc = self.caps.integrity;
        let key = self.cfg.auth_key.as_ref();
        if self.caps.compact && key.is_none() && repr.compactable() {
            return self.emit_compact::<false, _>(ch, repr, fill);
        }
        let len = repr.buffer_len() + if key.is_some() { wire::TAG_LEN } else { 0 };
        let Some(tok) = self.dev.transmit(self.now, ch.peer) else {
            return false;
        };
        let ok = tok.consume(len, |buf| {
            repr.emit_frame_cached(buf, skip_crc, key, Some(self.tags), fill)
                .is_ok()
        });
        if !ok {
            return false;
        }
        self.sent_frame(ch, &repr);
        true
    }

    /// [`Tx::emit_with`] of a frame under the compact header (see
    /// [`crate::phy::Capabilities::compact`]); a put's (`PUT`) under its own magic.
    #[inline]
    fn emit_compact<const PUT: bool, F: FnOnce(&mut [u8])>(
        &mut self,
        ch: &mut Channel,
        repr: Repr,
        fill: F,
    ) -> bool {
        let len = wire::COMPACT_LEN + repr.payload_len as usize;
        let Some(tok) = self.dev.transmit(self.now, ch.peer) else {
            return false;
        };
        let ok = tok.consume(len, |buf| {
            if PUT {
                repr.emit_compact_put(buf, fill).is_ok()
            } else {
                repr.emit_compact(buf, fill).is_ok()
            }
        });
        if !ok {
            return false;
        }
        self.stats.tx_compact += 1;
        self.sent_frame(ch, &repr);
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn data(
        &mut self,
        ch: &mut Channel,
        o: &Op<'_>,
        seq: u32,
        offset: u32,
        pieces: [&[u8]; 2],
        last: bool,
        resend: bool,
    ) -> bool {
        let payload = pieces[0].len() + pieces[1].len();
        let mut flags = self.data_flags(ch, o, offset, payload, last, resend);
        // A tree broadcast's fragments start with its root, shape and number; the
        // first piece (at most the 20-byte head) is copied behind them.
        let mut first = [0u8; wire::TREE_PREFIX + HEAD_MAX];
        let pieces = if o.tree {
            flags |= Flags::TREE;
            let n = wire::TREE_PREFIX + pieces[0].len();
            first[0..2].copy_from_slice(&o.root.to_be_bytes());
            first[2] = o.aux;
            first[4..8].copy_from_slice(&o.bseq.to_be_bytes());
            first[wire::TREE_PREFIX..n].copy_from_slice(pieces[0]);
            [&first[..n], pieces[1]]
        } else {
            pieces
        };
        let payload_len = (pieces[0].len() + pieces[1].len()) as u16;
        let repr = self.data_repr(o, flags, seq, offset, payload_len);
        self.emit(ch, repr, pieces)
    }

    /// Packet operation `o` (one frame) from device send slot `slot`, where the
    /// program wrote it: the device sends it from there, header and tag beside it.
    fn pooled(
        &mut self,
        ch: &mut Channel,
        o: &Op<'_>,
        seq: u32,
        slot: usize,
        resend: bool,
    ) -> bool {
        let len = o.total as usize;
        let flags = self.data_flags(ch, o, 0, len, true, resend);
        let mut repr = self.data_repr(o, flags, seq, 0, len as u16);
        self.address(ch, &mut repr);
        let key = self.cfg.auth_key.as_ref();
        let Some(body) = self.dev.pool_slot(slot).and_then(|b| b.get(..len)) else {
            return false;
        };
        let Ok((h, t)) = repr.frame_parts(self.caps.integrity, key, [&[], body]) else {
            return false;
        };
        let tag = if key.is_some() { &t[..] } else { &[] };
        if !self
            .dev
            .transmit_pooled(self.now, ch.peer, &h, slot, len, tag)
        {
            return false;
        }
        self.sent_frame(ch, &repr);
        true
    }

    /// The header of a data frame of `o` (addresses and ack filled in at emission).
    fn data_repr(&self, o: &Op<'_>, flags: Flags, seq: u32, offset: u32, payload_len: u16) -> Repr {
        Repr {
            kind: o.kind,
            flags,
            job_key: 0,
            ends: Endpoints {
                src_port: o.src_port,
                dst_port: o.dest.port,
                ..Endpoints::default()
            },
            seq: if o.reliable { seq } else { 0 },
            ack: None,
            msg_id: o.msg_id,
            offset: if o.kind == Kind::Packet {
                o.aux as u32
            } else {
                offset
            },
            total_len: o.total,
            payload_len,
        }
    }

    /// The flags of a data frame of `o` carrying `payload` bytes from `offset`.
    fn data_flags(
        &self,
        ch: &Channel,
        o: &Op<'_>,
        offset: u32,
        payload: usize,
        last: bool,
        resend: bool,
    ) -> Flags {
        let mut flags = Flags::empty();
        if o.reliable {
            flags |= Flags::RELIABLE;
            // Ask for an ack at message ends (so sends complete), on resends, and
            // before the window runs dry.
            let filling = ch.filling();
            // Nobody waits for an eager message's ack: let it ride on the reply.
            // A root's broadcast has no reply, and its copy is wanted for the next
            // one. A relay frees a chunk of its ring once every child has acked it.
            let chunk_end =
                o.chunked() && (offset as usize + payload).is_multiple_of(stream::CHUNK);
            let root_copy = o.kind == Kind::Multicast && !o.relay;
            let wanted = (o.eager == NONE || root_copy) && o.packet == NONE;
            if (last && wanted) || resend || filling || chunk_end {
                flags |= Flags::ACK_REQ;
            }
        }
        if last {
            flags |= Flags::LAST;
        }
        flags
    }

    /// A fragment of a put or get reply: the prefix, then `len` bytes read from
    /// program memory at the op's `local + offset` (zeros, counted, if unreadable).
    #[allow(clippy::too_many_arguments)]
    fn rma(
        &mut self,
        ch: &mut Channel,
        o: &Op<'_>,
        seq: u32,
        offset: u32,
        len: u16,
        last: bool,
        resend: bool,
        mem: &mut dyn Memory,
    ) -> bool {
        // A last fragment's ack rings the op's bell (a put's local bell, a get
        // reply's bell at the target): asked for at once where there is one. Else
        // the receiver decides (`Config::ack_exchange_ends`).
        let mut flags = Flags::RELIABLE;
        if (last && o.bell != NO_BELL) || resend || ch.filling() {
            flags |= Flags::ACK_REQ;
        }
        if last {
            flags |= Flags::LAST;
        }
        let mut repr = Repr {
            kind: o.kind,
            flags,
            job_key: 0,
            ends: Endpoints::default(),
            seq,
            ack: None,
            msg_id: o.msg_id,
            offset,
            total_len: o.total,
            payload_len: wire::RMA_PREFIX as u16 + len,
        };
        let mut faulted = false;
        let fill = |p: &mut [u8]| {
            let (head, data) = p.split_at_mut(wire::RMA_PREFIX);
            head[..8].copy_from_slice(&o.prefix[0].to_be_bytes());
            head[8..].copy_from_slice(&o.prefix[1].to_be_bytes());
            if mem.read(o.local.wrapping_add(offset as u64), data).is_err() {
                data.fill(0);
                faulted = true;
            }
        };
        // A put in one frame travels compact where data frames do.
        let compact = self.caps.compact && self.cfg.auth_key.is_none() && o.kind == Kind::Put;
        let ok = if compact && {
            self.address(ch, &mut repr);
            repr.compact_put()
        } {
            self.emit_compact::<true, _>(ch, repr, fill)
        } else {
            self.emit_with(ch, repr, fill)
        };
        if faulted {
            self.stats.rma_denied += 1;
        }
        ok
    }

    fn barrier(&mut self, ch: &mut Channel, seq: u32, epoch: u32, round: u32) -> bool {
        // A token's ack rides on the receiver's next frame to us or goes after the
        // ack delay: asked for at once, it would double a round's frames. A probe's
        // ack is its answer, and an abort is rare: those ask.
        let mut flags = Flags::RELIABLE;
        if round == BARRIER_PROBE || round & BARRIER_ABORT != 0 {
            flags |= Flags::ACK_REQ;
        }
        let repr = Repr {
            kind: Kind::Barrier,
            flags,
            job_key: 0,
            ends: Endpoints {
                src_port: BARRIER_PORT,
                dst_port: BARRIER_PORT,
                ..Endpoints::default()
            },
            seq,
            ack: None,
            msg_id: epoch,
            offset: round,
            total_len: 0,
            payload_len: 0,
        };
        self.emit(ch, repr, [&[], &[]])
    }

    fn reject(&mut self, ch: &mut Channel, seq: u32, msg: u32, port: PortId) -> bool {
        self.control(ch, seq, Kind::Control, msg, CONTROL_REJECT, port)
    }

    /// A reliable control frame without payload: a REJECT, a fetch-and-add request
    /// or its answer.
    fn control(
        &mut self,
        ch: &mut Channel,
        seq: u32,
        kind: Kind,
        msg_id: u32,
        offset: u32,
        port: PortId,
    ) -> bool {
        // Nobody here waits for a fetch-and-add answer's ack: the asker decides
        // when it goes (`Config::ack_exchange_ends`).
        let flags = if kind == Kind::FetchAddReply {
            Flags::RELIABLE
        } else {
            Flags::RELIABLE | Flags::ACK_REQ
        };
        let repr = Repr {
            kind,
            flags,
            job_key: 0,
            ends: Endpoints {
                src_port: 0,
                dst_port: port,
                ..Endpoints::default()
            },
            seq,
            ack: None,
            msg_id,
            offset,
            total_len: 0,
            payload_len: 0,
        };
        self.emit(ch, repr, [&[], &[]])
    }

    /// Sends control slot `slot` (anything but data) as frame `seq`.
    fn slot(&mut self, ch: &mut Channel, seq: u32, slot: Slot, gets: &[rma::Get]) -> bool {
        match slot {
            Slot::Barrier { epoch, round } => self.barrier(ch, seq, epoch, round),
            Slot::Reject { msg, port } => self.reject(ch, seq, msg, port),
            Slot::FetchAdd { req, var, delta } => {
                self.control(ch, seq, Kind::FetchAdd, req, delta, var)
            }
            Slot::FetchAddReply { req, value } => {
                self.control(ch, seq, Kind::FetchAddReply, req, value, 0)
            }
            Slot::Deny { msg, code } => self.control(ch, seq, Kind::Control, msg, code, 0),
            Slot::Fence { bseq } => self.control(ch, seq, Kind::Control, bseq, CONTROL_FENCE, 0),
            Slot::FenceOk { bseq } => {
                self.control(ch, seq, Kind::Control, bseq, CONTROL_FENCE_OK, 0)
            }
            Slot::Abort { msg } => self.control(ch, seq, Kind::Control, msg, CONTROL_ABORT, 0),
            Slot::Bye => self.control(ch, seq, Kind::Control, 0, CONTROL_BYE, 0),
            Slot::GetRequest { get, req } => {
                let payload = Engine::get_request_payload(gets, get, req);
                let repr = Repr {
                    kind: Kind::GetRequest,
                    flags: Flags::RELIABLE | Flags::ACK_REQ,
                    job_key: 0,
                    ends: Endpoints::default(),
                    seq,
                    ack: None,
                    msg_id: req,
                    offset: 0,
                    total_len: 0,
                    payload_len: wire::GET_REQUEST_LEN as u16,
                };
                self.emit(ch, repr, [&payload, &[]])
            }
            Slot::Data { .. } | Slot::Free => true,
        }
    }

    fn ack(&mut self, ch: &mut Channel) -> bool {
        // Numbered, so that the peer can tell it from a replayed one.
        ch.acks_sent = ch.acks_sent.wrapping_add(1);
        let repr = Repr {
            kind: Kind::Ack,
            flags: Flags::empty(),
            job_key: 0,
            ends: Endpoints::default(),
            seq: 0,
            ack: None,
            msg_id: ch.acks_sent,
            offset: 0,
            total_len: 0,
            payload_len: 0,
        };
        let ok = self.emit(ch, repr, [&[], &[]]);
        if ok {
            self.stats.tx_acks += 1;
        }
        ok
    }
}
