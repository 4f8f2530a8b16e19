//! Sends that go out within the call: the frame is written into the device at
//! once when the channel has room and nothing waits ahead of it.

use super::*;

/// A message that fits one frame, for `Engine::send_now` (the personalities' send
/// that leaves within the call).
#[derive(Debug, Clone, Copy)]
pub struct OneFrame<'b> {
    /// The port it goes through (its output binding names the destination).
    pub port: PortId,
    /// A first piece, copied (at most [`INLINE_HEAD_MAX`] bytes), then `body`.
    pub head: &'b [u8],
    /// The rest of the message.
    pub body: &'b [u8],
    /// Delivered exactly once, in order (else best effort: never retransmitted).
    pub reliable: bool,
}

/// Longest handler's send that [`Engine::send_queued_at_once`] sends at once
/// (copied to the stack on the way): an active message's reply, say.
const QUEUED_AT_ONCE: usize = 1024;

impl<'a> Engine<'a> {
    /// Sends the handlers' queued sends at once, in order, each as the program's
    /// own send would leave when nothing is ahead of it (one frame, no queue, no
    /// pass over the channels): an active message's reply, sent from its handler,
    /// leaves as soon as the handler returns. Stops at the first that cannot (a
    /// broadcast, longer than 1 KiB, a channel with something queued or no room);
    /// it and those after it stay queued, in order, for the next transmit pass.
    /// Returns the frames sent.
    pub(crate) fn send_queued_at_once<D: Device>(&mut self, now: Instant, dev: &mut D) -> usize {
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

    /// [`Engine::send_queued_at_once`] out of line and cold, for a poll whose
    /// handlers ran inside it: a receive path whose handlers send nothing does not
    /// carry it.
    #[cold]
    #[inline(never)]
    pub(super) fn send_queued_at_once_cold<D: Device>(&mut self, now: Instant, dev: &mut D) {
        self.send_queued_at_once(now, dev);
    }

    /// One handler's send of [`Engine::send_queued_at_once`], its outbox copy given
    /// back once it has left. `false`, nothing changed: it does not apply.
    pub(super) fn send_queued_now<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        q: &Queued,
    ) -> bool {
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
            self.send_one_reliable(dev, q.port, &[], body, || now)
        } else {
            self.send_one_best_effort(dev, q.port, &[], body, || now)
        };
        if sent {
            self.stats.tx_queued_at_once += 1;
        } else {
            // Nothing happened: the same buffer, its bytes unchanged, taken again.
            self.bufs.take_eager(q.eager);
        }
        sent
    }

    /// A reliable [`Engine::send_now`] for a non-blocking send: when the message
    /// left in this call, a handle of its own that reports it done (the message
    /// goes on detached, as a blocking send's: a failure later reaches the port's
    /// error handler or error semaphore). `None`, nothing changed: it did not leave.
    pub(crate) fn isend_now_reliable<D: Device>(
        &mut self,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
        now: impl FnMut() -> Instant,
    ) -> Option<SendHandle> {
        // The handle's slot, taken first: the message must not leave without one.
        let token = self.ops.alloc().ok()?;
        let gen = self.ops.table[token].gen;
        self.ops.table[token] = Op {
            gen,
            state: OpState::Done,
            ..Op::EMPTY
        };
        if self.send_one_reliable(dev, port, head, body, now) {
            Some(SendHandle::new(token, gen))
        } else {
            self.ops.table[token].state = OpState::Free;
            None
        }
    }

    /// Sends `msg`, a message that fits one frame, in this call: the frame goes
    /// straight into the device when its channel has nothing queued before it (and,
    /// reliable, nothing to resend and room in the peer's window), with no queue and
    /// no pass over the channels. Most small sends take this path. The time is read
    /// through `now`, at most once and only where it is needed: before the frame if
    /// the device's transmit reads it
    /// ([`Device::transmit_reads_time`]), else, for a reliable
    /// message, once the frame has left (its retransmission timer starts then), so
    /// that no clock read delays the frame.
    ///
    /// A reliable message leaves from a copy in an eager buffer and is detached
    /// (see [`Engine::detach`]): the ack frees the copy, and a failure is reported
    /// through the port's error handler or error semaphore; a short broadcast goes
    /// into the board (see `send_now_board`). `false` when this does not apply, no
    /// eager buffer or slot is free, or the device has no room; nothing has happened
    /// then, and [`Engine::start_send`] (copied, or not) takes the
    /// message.
    #[inline(always)]
    pub(crate) fn send_now<D: Device>(
        &mut self,
        dev: &mut D,
        msg: OneFrame<'_>,
        now: impl FnMut() -> Instant,
    ) -> bool {
        if msg.reliable {
            self.send_one_reliable(dev, msg.port, msg.head, msg.body, now)
        } else {
            self.send_one_best_effort(dev, msg.port, msg.head, msg.body, now)
        }
    }

    fn send_one_reliable<D: Device>(
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
        let max = self.payload_max;
        let ready = self.chans.table[ci].free_to_send_now();
        if !ready || max == 0 || total > max || body.len() > EAGER_MAX {
            return false;
        }
        if total <= SHORT_MAX {
            if let Some(k) = self.chans.table[ci].free_short() {
                return self.send_short(dev, ci, k, dest, port, head, body, now);
            }
        }
        // The copy is taken once the frame is out (it is needed only to send again):
        // the receiver does not wait for it. A buffer is sure to be free then.
        if self.bufs.eager_free == 0 {
            return false;
        }
        let Ok(oi) = self.ops.alloc_hinted() else {
            return false;
        };
        let Engine {
            chans,
            ops,
            bufs,
            cfg,
            caps,
            stats,
            tags,
            ..
        } = self;
        let ch = &mut chans[ci];
        // An eager message's ack rides on the reply (see `data_flags`), unless the
        // peer's window is filling.
        let mut flags = Flags::RELIABLE | Flags::LAST;
        if ch.filling() {
            flags |= Flags::ACK_REQ;
        }
        let one = One {
            src_port: port,
            dst_port: dest.port,
            flags,
            seq: ch.snd_nxt,
            msg_id: ch.next_msg,
        };
        let early = dev.transmit_reads_time().then(&mut now);
        let at = early.unwrap_or(self.progress.polled_at);
        let mut tx = Tx::new(dev, at, caps, cfg, &tags.tx, stats, bufs);
        if !tx.single(ch, one, head, body) {
            ops[oi].state = OpState::Free;
            return false;
        }
        dev.flush(at);
        let now = move || early.unwrap_or_else(now);
        self.sent_eager_single(now, ci, oi, dest, port, head, body);
        true
    }

    /// [`Engine::send_one_reliable`] of a message of at most [`SHORT_MAX`] bytes,
    /// its copy kept by the channel in short copy `k` (free): no operation, no
    /// eager buffer. `false`, nothing changed: the device has no room.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn send_short<D: Device>(
        &mut self,
        dev: &mut D,
        ci: usize,
        k: usize,
        dest: Dest,
        port: PortId,
        head: &[u8],
        body: &[u8],
        mut now: impl FnMut() -> Instant,
    ) -> bool {
        let Engine {
            chans:
                channel::Channels {
                    table: chans,
                    timer_at,
                    ..
                },
            bufs,
            cfg,
            caps,
            stats,
            tags,
            progress,
            ..
        } = self;
        let ch = &mut chans[ci];
        // Its ack rides on the reply (as an eager message's, see `data_flags`),
        // unless the peer's window is filling.
        let mut flags = Flags::RELIABLE | Flags::LAST;
        if ch.filling() {
            flags |= Flags::ACK_REQ;
        }
        let msg = ch.next_msg;
        let one = One {
            src_port: port,
            dst_port: dest.port,
            flags,
            seq: ch.snd_nxt,
            msg_id: msg,
        };
        let early = dev.transmit_reads_time().then(&mut now);
        let at = early.unwrap_or(progress.polled_at);
        let mut tx = Tx::new(dev, at, caps, cfg, &tags.tx, stats, bufs);
        if !tx.single(ch, one, head, body) {
            return false;
        }
        dev.flush(at);
        // The clock is read once the frame is out, for its retransmission timer.
        let now = early.unwrap_or_else(now);
        ch.next_msg = msg.wrapping_add(1);
        ch.push_short(k, msg, port, dest.port, head, body, now);
        ch.arm_rto(now, timer_at);
        stats.tx_short += 1;
        true
    }

    /// [`Engine::start_put`] of a put that fits one frame, sent in this call where
    /// its channel may take a new frame ahead of nothing (as
    /// a reliable `Engine::send_now` sends a message): no queue, no transmit pass.
    /// `Ok(false)`, nothing changed: not sent (something ahead, no credit, too long
    /// for one frame, no free operation, the device full); `start_put` takes it.
    /// The caller flushes the device ([`Device::flush`]).
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn put_now<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        mem: &mut dyn Memory,
        t: Transfer,
    ) -> Result<bool, Error> {
        let len = t.len;
        let ci = self.put_channel(mem, t.group, t.node, t.local, len)?;
        let fits = len as usize + wire::RMA_PREFIX <= self.payload_max;
        if !fits || !self.nothing_ahead() || !self.chans.table[ci].free_to_send_now() {
            return Ok(false);
        }
        let Ok(oi) = self.ops.alloc() else {
            return Ok(false);
        };
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
            tags,
            ..
        } = self;
        let ch = &mut chans[ci];
        let gen = ops[oi].gen;
        ops[oi] = Op {
            gen,
            chan: ci as u16,
            msg_id: ch.next_msg,
            ..super::rma::put_op(&t)
        };
        let seq = ch.snd_nxt;
        let mut tx = Tx::new(dev, now, caps, cfg, &tags.tx, stats, bufs);
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
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn get_now<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        mem: &mut dyn Memory,
        t: Transfer,
    ) -> Result<bool, Error> {
        let Transfer {
            group,
            node,
            remote,
            local,
            len,
            local_bell,
            remote_bell,
        } = t;
        let (gi, ci) = match self.get_slot(mem, group, node, local, len) {
            Ok(s) => s,
            Err(Error::NoResources) => return Ok(false),
            Err(e) => return Err(e),
        };
        let open = self.payload_max >= wire::GET_REQUEST_LEN;
        if !open || !self.nothing_ahead() || !self.chans.table[ci].free_to_send_now() {
            return Ok(false);
        }
        let Engine {
            chans:
                channel::Channels {
                    table: chans,
                    timer_at,
                    ..
                },
            bufs,
            cfg,
            caps,
            stats,
            tags,
            rma,
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
        let mut tx = Tx::new(dev, now, caps, cfg, &tags.tx, stats, bufs);
        if !tx.slot(ch, seq, slot, &rma.gets) {
            rma.gets[gi].state = rma::GetState::Free;
            return Ok(false);
        }
        rma.next_req = req.wrapping_add(1);
        ch.push_timed(slot, now);
        ch.arm_rto(now, timer_at);
        Ok(true)
    }

    /// What a reliable [`Engine::send_now`] does once its frame is out: the
    /// operation (taken before, so that the frame could not go without one) filled
    /// in, the copy for sending again, the frame's place in the channel and its
    /// timer. Nothing here delays the frame or its receiver; kept out of line so
    /// that the cost before the frame leaves can be measured apart (`engine_cost`).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) fn sent_eager_single(
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
            chans:
                channel::Channels {
                    table: chans,
                    timer_at,
                    ..
                },
            ops,
            bufs,
            ..
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
        ch.arm_rto(now, timer_at);
        // The next send's slot, looked for now rather than before its frame.
        self.ops.hint_free();
    }

    /// [`Engine::launch_unicast`] with the frame sent in this call, when nothing is
    /// queued before it on its channel (the packet's counterpart of a reliable
    /// [`Engine::send_now`], reading the time through `now` as it does): its
    /// operation is set up in place, with no queue and no transmit pass.
    /// `Ok(false)` when that does not apply (to itself, no open channel, something
    /// ahead, no credit) or the device has no room: nothing has happened then, and
    /// `launch_unicast` takes the packet. The caller flushes the device
    /// ([`Device::flush`]) once it has launched what it has, so that a run of
    /// packets leaves in one batch where the device batches.
    pub(crate) fn launch_unicast_now<D: Device>(
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
            Ok(a) => self.chans.peer_map.get(a.0 as usize).map_or(NONE, |&c| c) as usize,
            Err(_) => return Ok(false),
        };
        let Some(ch) = self.chans.table[..self.chans.hwm].get(ci) else {
            return Ok(false);
        };
        let ready = ch.peer_group == group && ch.peer_node == dest && ch.free_to_send_now();
        let max = self.payload_max;
        if !ready || max == 0 || len > max {
            return Ok(false);
        }
        let Ok(oi) = self.ops.alloc() else {
            return Ok(false);
        };
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
            tags,
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
            early.unwrap_or(self.progress.polled_at),
            caps,
            cfg,
            &tags.tx,
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
        ch.arm_rto(now, timer_at);
        Ok(true)
    }

    /// [`Engine::launch_unicast`], with the frame sent in this call where
    /// `Engine::launch_unicast_now` allows: `Ok(true)` if it left, `Ok(false)` if
    /// it was queued for the next transmit pass (the caller flushes the device, as
    /// there).
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn launch_unicast_on<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        id: PacketId,
        dest: NodeId,
        len: usize,
    ) -> Result<bool, Error> {
        if self.launch_unicast_now(dev, id, dest, len, || now)? {
            return Ok(true);
        }
        self.launch_unicast(id, dest, len).map(|()| false)
    }

    /// A best-effort [`Engine::send_now`]: no op, no queue; the time is read only if
    /// the device's transmit reads it (a best-effort frame needs no time of its own).
    fn send_one_best_effort<D: Device>(
        &mut self,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
        mut now: impl FnMut() -> Instant,
    ) -> bool {
        let Some((dest, ci)) = self.open_channel(port, head) else {
            return false;
        };
        let at = if dev.transmit_reads_time() {
            now()
        } else {
            self.progress.polled_at
        };
        let Engine {
            chans,
            bufs,
            cfg,
            caps,
            stats,
            tags,
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
        let one = One {
            src_port: port,
            dst_port: dest.port,
            flags: Flags::LAST,
            seq: 0,
            msg_id: ch.next_be_msg,
        };
        let mut tx = Tx::new(dev, at, caps, cfg, &tags.tx, stats, bufs);
        if !tx.single(ch, one, head, body) {
            return false;
        }
        ch.next_be_msg = ch.next_be_msg.wrapping_add(1);
        dev.flush(at);
        true
    }
}
