//! Receiving: frame validation and dispatch, acks, reliable and best-effort
//! frames, control frames and barrier tokens (the fast paths are in `rx_fast.rs`,
//! assembly and delivery in `assembly.rs`).

use super::*;

/// A received frame, as [`Engine::handle_frame`] takes it: `From` a whole
/// frame's bytes.
#[derive(Debug, Clone, Copy)]
pub struct Received<'f> {
    /// The whole frame, or its header (and tag) where `payload` lies apart.
    pub bytes: &'f [u8],
    /// The payload where its sender's device left it
    /// ([`crate::phy::RxToken::consume_parts`]), apart from `bytes`.
    pub payload: Option<&'f [u8]>,
    /// The fabric address the device saw the frame come from: a header claiming
    /// another sender is dropped (`rx_spoofed`).
    pub source: Option<NodeAddr>,
}

impl<'f> From<&'f [u8]> for Received<'f> {
    fn from(bytes: &'f [u8]) -> Self {
        Received {
            bytes,
            payload: None,
            source: None,
        }
    }
}

impl<'a> Engine<'a> {
    // ------------------------------------------------------------ receiving

    /// Processes one received frame (see [`Received`]), with program memory for
    /// one-sided operations (`&mut NoMemory` where there is none). Never panics,
    /// whatever the bytes. The CRC is skipped only if the device last given to
    /// [`Engine::poll`] guarantees integrity.
    pub fn handle_frame(&mut self, now: Instant, frame: Received<'_>, mem: &mut dyn Memory) {
        match frame.payload {
            None => self.handle_whole(now, frame.bytes, frame.source, mem),
            Some(payload) => self.handle_split(now, frame.bytes, payload, frame.source, mem),
        }
    }

    /// [`Engine::handle_frame`] of a whole frame.
    #[inline]
    pub(super) fn handle_whole(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        if frame.first() == Some(&wire::COMPACT_MAGIC) {
            return self.rx_compact(now, frame, source, mem, None);
        }
        if frame.first() == Some(&wire::COMPACT_PUT_MAGIC) {
            return self.rx_compact_put(now, frame, source, mem);
        }
        self.stats.rx_frames += 1;
        if frame.first() == Some(&crate::session::HELLO_MAGIC) {
            return self.rx_hello(frame, source);
        }
        let Some((repr, payload)) = self.parse_ours(frame) else {
            return;
        };
        self.handle_parsed(now, repr, payload, source, mem)
    }

    /// [`Engine::handle_frame`] of a frame received in two parts: the header (and
    /// tag) in `head`, the payload where its sender's device left it
    /// ([`crate::phy::RxToken::consume_parts`]).
    pub(super) fn handle_split(
        &mut self,
        now: Instant,
        head: &[u8],
        payload: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        self.stats.rx_frames += 1;
        let key = self.cfg.auth_key.as_ref();
        let parsed = Repr::parse_parts(head, payload, self.caps.integrity, key);
        let Some(repr) = self.count_parse(parsed) else {
            return;
        };
        self.handle_parsed(now, repr, payload, source, mem)
    }

    /// A parsed frame of this job: addressing checks, acks, dispatch by kind.
    #[inline]
    pub(super) fn handle_parsed(
        &mut self,
        now: Instant,
        repr: Repr,
        payload: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        if repr.ends.dst_group != self.cfg.group || repr.ends.dst_node != self.cfg.node {
            self.stats.rx_foreign_group += 1;
            return;
        }
        let Ok(addr) = self.addr_of(repr.ends.src_group, repr.ends.src_node) else {
            self.stats.rx_unknown_source += 1;
            return;
        };
        if source.is_some_and(|s| s != addr) {
            self.stats.rx_spoofed += 1;
            return;
        }
        let Ok(ci) = self.channel_for(addr, repr.ends.src_group, repr.ends.src_node) else {
            self.stats.rx_dropped += 1;
            return;
        };
        // Only a frame that says something new shows the peer is alive: a replayed
        // one (valid, but recorded earlier) must not keep a dead peer so.
        let ch = &mut self.chans.table[ci];
        if fresh(ch, &repr) {
            ch.heard_at = now;
            ch.silent_since = None;
            ch.met = true;
        }
        if let Some(a) = repr.ack {
            let plain = !repr.flags.intersects(Flags::REFUSED | Flags::RETRY)
                && self.bufs.queued_streams == 0;
            let data = matches!(repr.kind, Kind::Data | Kind::Packet);
            if !(plain && self.plain_ack(now, ci, a, data)) {
                self.take_due_ack(now, ci);
                self.on_ack(now, now, ci, a, repr.flags);
            }
        }
        match repr.kind {
            Kind::Ack => {}
            Kind::Data
            | Kind::Multicast
            | Kind::Barrier
            | Kind::Control
            | Kind::FetchAdd
            | Kind::FetchAddReply
            | Kind::Packet
            | Kind::Put
            | Kind::GetRequest
            | Kind::GetReply
                if repr.flags.contains(Flags::RELIABLE) =>
            {
                self.rx_reliable(now, ci, &repr, payload, mem)
            }
            Kind::Data | Kind::Multicast => {
                let ch = &self.chans.table[ci];
                let next = ch.be_asm == NONE && repr.msg_id == ch.be_expect;
                if !(next && self.rx_single_frame(ci, &repr, payload, false)) {
                    self.rx_best_effort(now, ci, &repr, payload)
                }
            }
            _ => self.stats.rx_unsupported += 1,
        }
    }

    /// Parses an untrusted frame of this job, counting why one is dropped. The
    /// header is read once, into private memory: the frame may sit in a ring slot
    /// or board that another process can still write.
    #[inline]
    pub(super) fn parse_ours<'f>(&mut self, frame: &'f [u8]) -> Option<(Repr, &'f [u8])> {
        let key = self.cfg.auth_key.as_ref();
        match Repr::parse_frame(frame, self.caps.integrity, key) {
            Ok((repr, payload)) => self.count_parse(Ok(repr)).map(|r| (r, payload)),
            Err(e) => {
                self.count_parse(Err(e));
                None
            }
        }
    }

    /// Counts why a frame failed to parse, or is of another job.
    #[inline]
    fn count_parse(&mut self, parsed: Result<Repr, WireError>) -> Option<Repr> {
        let repr = match parsed {
            Ok(r) => r,
            Err(WireError::BadTag) => {
                self.stats.rx_unauthenticated += 1;
                return None;
            }
            Err(WireError::BadChecksum) => {
                self.stats.rx_bad_crc += 1;
                return None;
            }
            Err(_) => {
                self.stats.rx_malformed += 1;
                return None;
            }
        };
        if repr.job_key != self.cfg.job_key {
            self.stats.rx_foreign_job += 1;
            return None;
        }
        Some(repr)
    }

    /// Keeps ack `a`, which came at `now` on a data frame or a packet of channel
    /// `ci`, for the start of the next poll. What it frees (the copies and
    /// operations of the messages it acknowledges) is then freed while the program
    /// waits, instead of between the frame's arrival and its handler: in a
    /// ping-pong each side's reply carries the ack of what it answers, and its
    /// handler and the next send run first. Credits count at once; a newer ack
    /// replaces a kept one, and an older one (reordered on the way) is taken after
    /// it.
    #[inline]
    fn defer_ack(&mut self, now: Instant, ci: usize, a: AckInfo) {
        match self.chans.table[ci].keep_ack(now, a) {
            Some(fresh) => self.chans.acks_due += u16::from(fresh),
            None => self.older_ack(now, ci, a),
        }
    }

    /// [`Engine::defer_ack`] of an ack older than the one kept: both taken now.
    #[cold]
    #[inline(never)]
    pub(super) fn older_ack(&mut self, now: Instant, ci: usize, a: AckInfo) {
        self.take_due_ack(now, ci);
        self.on_ack(now, now, ci, a, Flags::empty());
    }

    /// Ack `a` of channel `ci` on a frame without `REFUSED` or `RETRY`, with no
    /// stream queued. Most acks on a busy channel carry nothing new (every frame
    /// has one): only the credits change then. A new one on a data frame or a
    /// packet (`data`) is kept for the next poll (`defer_ack`). `false` for a new
    /// one on any other frame: the caller takes it at once.
    #[inline(always)]
    pub(super) fn plain_ack(&mut self, now: Instant, ci: usize, a: AckInfo, data: bool) -> bool {
        if !self.chans.table[ci].credits_only(a) {
            if !data {
                return false;
            }
            self.defer_ack(now, ci, a);
        }
        true
    }

    /// Takes the ack channel `ci` keeps (see `defer_ack`), if any: the round trip
    /// is measured to when it came, the timer restarts from `now`.
    pub(super) fn take_due_ack(&mut self, now: Instant, ci: usize) {
        if let Some((a, heard)) = self.chans.table[ci].ack_due.take() {
            self.chans.acks_due -= 1;
            self.on_ack(now, heard, ci, a, Flags::empty());
        }
    }

    /// Takes every kept ack (at the start of each poll).
    #[inline]
    pub(super) fn take_due_acks(&mut self, now: Instant) {
        if self.chans.acks_due == 0 {
            return;
        }
        // Until the last kept ack is taken: the rest hold none.
        for ci in 0..self.chans.hwm {
            if self.chans.acks_due == 0 {
                break;
            }
            self.take_due_ack(now, ci);
        }
    }

    /// Ack `a` of channel `ci`, received at `heard`, taken at `now`.
    #[inline(never)]
    pub(super) fn on_ack(
        &mut self,
        now: Instant,
        heard: Instant,
        ci: usize,
        a: AckInfo,
        flags: Flags,
    ) {
        let refused = flags.contains(Flags::REFUSED);
        let ops = &mut self.ops;
        let bufs = &mut self.bufs;
        let ch = &mut self.chans.table[ci];
        let mut cut = false;
        let progress = ch.on_ack(a, |slot| {
            if let Slot::Data { op, .. } = slot {
                let o = &mut ops[op as usize];
                o.unacked = o.unacked.saturating_sub(1);
                if o.state == OpState::Active && o.framed == o.total && o.started && o.unacked == 0
                {
                    if o.cut(bufs) {
                        // Its child is told first (see `orphan`).
                        cut = true;
                    } else {
                        finish_op(ops, bufs, op as usize, true);
                    }
                }
            }
        });
        self.orphans.cuts |= cut;
        if refused {
            ch.refused = true;
            ch.held = true;
        } else if !self.caps.reliable {
            ch.mark_holes_for_resend(a);
            self.chans.work.set(true);
        }
        if progress || refused {
            ch.retries = 0;
        }
        if progress {
            ch.held = false;
            ch.measure(heard, self.cfg.rto_initial, self.cfg.rto_max);
            ch.rto = ch.rto_base;
            ch.rto_at = (ch.outstanding() > 0).then(|| now + ch.rto);
            if let Some(t) = ch.rto_at {
                self.chans.timer_at = self.chans.timer_at.min(t);
            }
        }
        if flags.contains(Flags::RETRY) {
            // The port that refused us is free: no need to wait for the timer.
            ch.mark_all_for_resend();
            self.chans.work.set(true);
        }
        if self.bufs.queued_streams > 0 {
            self.release_streams();
        }
    }

    #[inline]
    pub(super) fn rx_reliable(
        &mut self,
        now: Instant,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        trace!(
            "{now} node {} rx seq {} msg {} off {} from {}: {:?} rcv_nxt {}",
            self.cfg.node,
            repr.seq,
            repr.msg_id,
            repr.offset,
            repr.ends.src_node,
            self.chans.table[ci].check_seq(repr.seq),
            self.chans.table[ci].rcv_nxt
        );
        match self.chans.table[ci].check_seq(repr.seq) {
            SeqCheck::Duplicate => {
                self.stats.rx_duplicates += 1;
                let ch = &mut self.chans.table[ci];
                ch.ack_now = true;
                ch.out_of_order = ch.out_of_order.saturating_add(1);
                self.chans.work.set(true);
                return;
            }
            SeqCheck::OutOfWindow => {
                self.stats.rx_out_of_window += 1;
                self.chans.table[ci].ack_now = true;
                self.chans.work.set(true);
                return;
            }
            SeqCheck::New => {
                let ch = &mut self.chans.table[ci];
                if repr.seq != ch.rcv_nxt {
                    // After a gap: the sender is missing an ack (TCP acks such a
                    // segment at once).
                    ch.out_of_order = ch.out_of_order.saturating_add(1);
                    ch.ack_now = true;
                    self.chans.work.set(true);
                }
            }
        }
        let accepted = match repr.kind {
            Kind::Barrier => {
                self.rx_barrier(repr);
                true
            }
            Kind::Control => self.rx_control(ci, repr),
            Kind::FetchAdd => self.rx_fetch_add(ci, repr),
            Kind::Packet => self.rx_packet(ci, repr, payload),
            Kind::FetchAddReply => {
                self.rx_fetch_reply(ci, repr);
                true
            }
            Kind::GetRequest => self.rx_get_request(ci, repr, payload, mem),
            Kind::Put | Kind::GetReply => self.rx_rma_data(now, ci, repr, payload, mem),
            Kind::Multicast if repr.flags.contains(Flags::TREE) => {
                self.rx_tree(now, ci, repr, payload)
            }
            _ => self.rx_reliable_data(now, ci, repr, payload),
        };
        let ch = &mut self.chans.table[ci];
        if !accepted {
            self.stats.rx_refused += 1;
            ch.refusing = true;
            if !ch.owed_retry {
                ch.owed_retry = true;
                self.chans.owed_retries += 1;
            }
            ch.ack_now = true;
            self.chans.work.set(true);
            return;
        }
        self.took_reliable(now, ci, repr);
        // The end of a one-sided exchange: see `Config::ack_exchange_ends`.
        let ends = match repr.kind {
            Kind::Put | Kind::GetReply => repr.flags.contains(Flags::LAST),
            Kind::FetchAddReply => true,
            _ => false,
        };
        if ends && self.cfg.ack_exchange_ends {
            self.chans.table[ci].ack_now = true;
            self.chans.work.set(true);
        }
        if matches!(
            repr.kind,
            Kind::Data
                | Kind::Multicast
                | Kind::Packet
                | Kind::Put
                | Kind::GetReply
                | Kind::Control
        ) {
            self.deliver_in_order(ci, mem);
        }
    }

    /// A new reliable frame `repr` of channel `ci`, taken: marked received, and
    /// its ack due at once or within the delay.
    #[inline(always)]
    pub(super) fn took_reliable(&mut self, now: Instant, ci: usize, repr: &Repr) {
        let ch = &mut self.chans.table[ci];
        ch.mark_received(repr.seq);
        ch.since_ack = ch.since_ack.saturating_add(1);
        // A member draining into the device's barrier waits for this ack.
        let draining = self.bar.active && self.cfg.device_barrier && !self.bar.no_device;
        if repr.flags.contains(Flags::ACK_REQ)
            || draining
            || ch.since_ack >= (self.cfg.window / 2).max(1)
        {
            ch.ack_now = true;
            self.chans.work.set(true);
        } else {
            // Credits come back within the delay even if nothing is sent meanwhile;
            // a token's ack may wait longer (see `Config::barrier_ack_delay`), a
            // later frame's shortens that wait.
            let delay = if repr.kind == Kind::Barrier {
                let floor = Duration::from_nanos(self.cfg.rto_initial.total_nanos() / 2);
                self.cfg
                    .barrier_ack_delay
                    .min(floor)
                    .max(self.cfg.ack_delay)
            } else {
                self.cfg.ack_delay
            };
            let due = now + delay;
            ch.ack_at = Some(ch.ack_at.map_or(due, |t| t.min(due)));
            self.chans.timer_at = self.chans.timer_at.min(due);
        }
    }

    /// A control frame: REJECT fails our message `msg_id` sent from `dst_port`;
    /// DENY_PUT and DENY_GET fail a one-sided operation; FENCE and FENCE_OK order
    /// broadcasts (see `fence`); ABORT drops a message whose sender's upstream died
    /// (see `orphan`); BYE marks the peer as gone on purpose. False: refused for now.
    pub(super) fn rx_control(&mut self, ci: usize, repr: &Repr) -> bool {
        match repr.offset {
            CONTROL_DENY_PUT | CONTROL_DENY_GET => {
                self.rx_deny(ci, repr);
                return true;
            }
            CONTROL_FENCE => return self.rx_fence(ci, repr),
            CONTROL_ABORT => return self.rx_abort(ci, repr),
            CONTROL_FENCE_OK => {
                self.rx_fence_ok(ci, repr);
                return true;
            }
            CONTROL_BYE => {
                if !self.chans.table[ci].left {
                    self.chans.table[ci].left = true;
                    self.stats.peers_left += 1;
                }
                return true;
            }
            CONTROL_REJECT => {}
            _ => {
                self.stats.rx_unsupported += 1;
                return true;
            }
        }
        self.stats.tx_rejected += 1;
        let found = self.ops.table.iter().position(|o| {
            o.state != OpState::Free && o.reliable && o.chan == ci as u16 && o.msg_id == repr.msg_id
        });
        let ch = &self.chans.table[ci];
        let mut dest = Dest {
            group: ch.peer_group,
            node: ch.peer_node,
            port: 0,
        };
        if let Some(s) = ch.shorts.iter().find(|s| s.used && s.msg_id == repr.msg_id) {
            dest.port = s.dst_port;
        }
        if let Some(i) = found {
            let o = &mut self.ops.table[i];
            dest = o.dest;
            match o.state {
                OpState::Active => o.rejected = true,
                OpState::Done if o.parent == NONE => o.state = OpState::Rejected,
                _ => {}
            }
        }
        self.notify_send_failure(repr.ends.dst_port, dest);
        true
    }

    pub(super) fn rx_barrier(&mut self, repr: &Repr) {
        let (epoch, round) = (repr.msg_id, repr.offset);
        if round == BARRIER_PROBE {
            return; // its ack is the answer
        }
        let slot = if epoch == self.bar.epoch {
            0
        } else if epoch == self.bar.epoch.wrapping_add(1) {
            1
        } else {
            self.stats.rx_dropped += 1;
            return;
        };
        if round & BARRIER_ABORT != 0 {
            self.bar.aborted[slot] = true;
        } else if round < 64 {
            self.bar.arrivals[slot] |= 1u64 << round;
        } else {
            self.stats.rx_malformed += 1;
        }
    }

    /// Reports a best-effort message lost before any of it was placed.
    pub(super) fn report_lost(&mut self, repr: &Repr) {
        self.stats.lost += 1;
        if (repr.ends.dst_port as usize) < self.ports.table.len() {
            self.notify(Note {
                port: repr.ends.dst_port,
                fault: Some(Fault::Lost),
                count: false,
                msg_len: repr.total_len,
                stored: 0,
                base: 0,
                src: repr.ends,
            });
        }
    }

    #[inline]
    pub(super) fn rx_best_effort(&mut self, now: Instant, ci: usize, repr: &Repr, payload: &[u8]) {
        let msg = repr.msg_id;
        let expect = self.chans.table[ci].be_expect;
        let cur = self.chans.table[ci].be_asm;
        // `be_expect` is already past the message being assembled: its later fragments
        // belong to `cur`, everything else older is stale.
        let continues = cur != NONE && self.asms.table[cur as usize].msg_id == msg;
        if !continues && seq_lt(msg, expect) {
            self.stats.rx_dropped += 1;
            return;
        }
        if cur != NONE && !continues {
            // A later message started: the unfinished one lost frames.
            self.chans.table[ci].be_asm = NONE;
            self.deliver(cur as usize, Some(Fault::Lost));
        }
        let ai = if self.chans.table[ci].be_asm != NONE {
            self.chans.table[ci].be_asm as usize
        } else {
            // Whole messages vanished between `expect` and `msg`: one report each, so
            // that every message is either delivered or reported (bounded by a window,
            // whatever a frame claims).
            let vanished = msg.wrapping_sub(expect).min(MAX_WINDOW as u32);
            for _ in 0..vanished {
                self.report_lost(repr);
            }
            self.chans.table[ci].be_expect = msg.wrapping_add(1);
            if repr.offset != 0 {
                self.stats.rx_dropped += 1;
                self.report_lost(repr);
                return;
            }
            let Some(ai) = self.reserve(ci, repr, false, now) else {
                self.stats.rx_dropped += 1;
                self.report_lost(repr);
                return;
            };
            self.chans.table[ci].be_asm = ai as u16;
            ai
        };
        let next = self.asms.table[ai].received;
        if repr.offset < next {
            // A duplicate of a fragment already placed.
            self.stats.rx_dropped += 1;
            return;
        }
        if repr.offset > next {
            self.chans.table[ci].be_asm = NONE;
            self.deliver(ai, Some(Fault::Lost));
            return;
        }
        self.place(ai, repr.offset, payload);
        self.asms.table[ai].deadline = now + self.cfg.reassembly_timeout;
        if self.asms.table[ai].received >= self.asms.table[ai].total {
            self.chans.table[ci].be_asm = NONE;
            self.deliver(ai, None);
        }
    }
}

/// Whether `repr`, a valid frame from channel `ch`'s peer, says something new: a
/// reliable frame not seen before, an ack that covers more than any before it, or a
/// standalone ack or beacon whose counter (`msg_id`, under the tag) is newer than
/// the last one heard. Remembers what it saw.
#[inline]
fn fresh(ch: &mut Channel, repr: &Repr) -> bool {
    let mut new = repr.ack.is_some_and(|a| ch.new_ack(a));
    if repr.kind == Kind::Ack {
        let seen = if repr.ack.is_some() {
            &mut ch.acks_heard
        } else {
            &mut ch.beacon_heard
        };
        if seq_lt(*seen, repr.msg_id) {
            *seen = repr.msg_id;
            new = true;
        }
    } else if repr.flags.contains(Flags::RELIABLE) {
        new |= ch.check_seq(repr.seq) == SeqCheck::New;
    }
    new
}
