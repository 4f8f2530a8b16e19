//! Receiving: frame validation and dispatch, acks, reliable and best-effort
//! assembly straight into port buffers, delivery (notices to ports' owners), rejections.

use super::*;

impl<'a> Engine<'a> {
    // ------------------------------------------------------------ receiving

    /// Processes one received frame. Never panics, whatever the bytes. The CRC is
    /// skipped only if the device last given to [`Engine::poll`] guarantees integrity.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.handle_frame_from(now, frame, None)
    }

    /// [`Engine::handle_frame`] for a frame the device saw come from fabric address
    /// `source`: a header claiming another sender is dropped (`rx_spoofed`).
    pub fn handle_frame_from(&mut self, now: Instant, frame: &[u8], source: Option<NodeAddr>) {
        self.handle_frame_mem(now, frame, source, &mut NoMemory)
    }

    /// [`Engine::handle_frame_from`] with program memory for one-sided operations.
    #[inline]
    pub fn handle_frame_mem(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        if frame.first() == Some(&wire::COMPACT_MAGIC) {
            return self.rx_compact(now, frame, source, mem);
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

    /// Header prediction (after TCP's fast path): the commonest frame, a whole
    /// message in one data frame that is the next on its channel and fits its
    /// port, tagged under the job key or from a device that guarantees integrity, is
    /// delivered here with what `handle_parsed` and `rx_reliable` would do for it,
    /// without their dispatch or the search for a message waiting behind it (a
    /// channel with none received out of order has none). So is the next packet
    /// (LFC's, QNIX's) of a channel, unicast, with a free receive slot: stored as
    /// `rx_packet` stores it. `false`, with nothing changed, for any other frame:
    /// the general path takes it then.
    #[inline]
    pub(super) fn rx_predicted(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
    ) -> bool {
        // Without a key, only from a device that guarantees integrity (no CRC
        // is checked here); with one, the tag is.
        if (self.cfg.auth_key.is_none() && !self.caps.integrity) || self.bufs.queued_streams != 0 {
            return false;
        }
        // Each kind its own copy, the data frame's inline: a packet's checks
        // cost a message nothing.
        self.rx_predicted_as::<false>(now, frame, source)
            || self.rx_predicted_packet(now, frame, source)
    }

    /// The packet's prediction, out of line (a data frame's path stays as short).
    #[inline(never)]
    fn rx_predicted_packet(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
    ) -> bool {
        self.rx_predicted_as::<true>(now, frame, source)
    }

    /// [`Engine::rx_predicted`] of a data frame, or of a packet (`PACKET`).
    #[inline(always)]
    fn rx_predicted_as<const PACKET: bool>(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
    ) -> bool {
        let key = self.cfg.auth_key.as_ref();
        let kind = if PACKET { Kind::Packet } else { Kind::Data };
        let taken =
            Repr::parse_single_cached(frame, kind, key, Some(&self.tag_rx), |repr, payload| {
                self.predicts::<PACKET, false>(repr, payload.len(), source)
            });
        let Some((repr, payload, (ci, reliable))) = taken else {
            return false;
        };
        let taken = if PACKET {
            self.store_predicted_packet(ci, &repr, payload)
        } else {
            self.deliver_single(ci, &repr, payload, reliable)
        };
        if !taken {
            return false;
        }
        self.stats.rx_frames += 1;
        self.took_predicted(now, ci, &repr, reliable);
        true
    }

    /// What follows a predicted frame's delivery (a packet's: queued for the
    /// program): what `handle_parsed` does for any frame of the channel (the ack
    /// touches only what was sent, so its place after the delivery changes
    /// nothing), and `rx_reliable` for a new reliable one.
    #[inline(always)]
    fn took_predicted(&mut self, now: Instant, ci: usize, repr: &Repr, reliable: bool) {
        self.stats.rx_predicted += 1;
        let ch = &mut self.chans[ci];
        // A predicted reliable frame is the next on its channel: new (the ack it
        // carries is then not looked at here; a replay of one of its kind is a
        // duplicate, and its ack moves `ack_heard` at most once).
        if reliable || repr.ack.is_some_and(|a| ch.new_ack(a)) {
            ch.heard_at = now;
            ch.silent_since = None;
            ch.met = true;
        }
        if let Some(a) = repr.ack {
            self.plain_ack(now, ci, a, true);
        }
        if reliable {
            self.took_reliable(now, ci, repr);
        }
    }

    /// A frame under the compact header (`wire::compact`): only from a device that
    /// vouches for it ([`crate::phy::Capabilities::compact`]) in a job without a key,
    /// which names its sender. Predicted as [`Engine::rx_predicted`] predicts a
    /// full header, else taken by the general path with the fields the header
    /// leaves out filled in.
    pub(super) fn rx_compact(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        self.stats.rx_frames += 1;
        self.stats.rx_compact += 1;
        let vouched = self.caps.compact && self.cfg.auth_key.is_none();
        let Some(src) = source.filter(|_| vouched) else {
            self.stats.rx_unauthenticated += 1;
            return;
        };
        let c = &self.cfg;
        let Ok((repr, payload)) = Repr::parse_compact(frame, c.job_key, c.group, c.node) else {
            self.stats.rx_malformed += 1;
            return;
        };
        // As `rx_predicted` takes them: a refusal or a call to retry goes the
        // general way (`on_ack` with its flags).
        let plain = !repr.flags.intersects(Flags::REFUSED | Flags::RETRY);
        if plain && self.bufs.queued_streams == 0 {
            if let Some((ci, reliable)) =
                self.predicts::<false, false>(&repr, payload.len(), source)
            {
                if self.deliver_single(ci, &repr, payload, reliable) {
                    self.took_predicted(now, ci, &repr, reliable);
                    return;
                }
            }
        }
        self.rx_compact_general(now, repr, payload, src, mem)
    }

    /// A compact put ([`wire::COMPACT_PUT_MAGIC`]), vouched for as
    /// [`Engine::rx_compact`] requires: predicted where it is the next message of
    /// its channel, to memory we expose, else taken by the general path.
    #[inline(never)]
    fn rx_compact_put(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        self.stats.rx_frames += 1;
        self.stats.rx_compact += 1;
        let vouched = self.caps.compact && self.cfg.auth_key.is_none();
        let Some(src) = source.filter(|_| vouched) else {
            self.stats.rx_unauthenticated += 1;
            return;
        };
        let c = &self.cfg;
        let Ok((repr, payload)) = Repr::parse_compact_put(frame, c.job_key, c.group, c.node) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let plain = !repr.flags.intersects(Flags::REFUSED | Flags::RETRY);
        if plain
            && self.bufs.queued_streams == 0
            && self.rx_predicted_put(now, &repr, payload, source, mem)
        {
            return;
        }
        self.handle_parsed(now, repr, payload, Some(src), mem)
    }

    /// A compact put that header prediction takes: the next message of its
    /// channel in order, to memory we expose. Written and its bell rung, then taken
    /// as a predicted data frame is (a new ack it carries kept for the next poll,
    /// off the put's path), its own ack owed at once where
    /// `Config::ack_exchange_ends`. `false` with nothing changed: the general path
    /// takes it.
    #[inline]
    fn rx_predicted_put(
        &mut self,
        now: Instant,
        repr: &Repr,
        payload: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) -> bool {
        let Some((ci, true)) = self.predicts::<false, true>(repr, payload.len(), source) else {
            return false;
        };
        if !self.rx_put_single(ci, repr, payload, mem) {
            return false;
        }
        self.took_predicted(now, ci, repr, true);
        if self.cfg.ack_exchange_ends {
            self.chans[ci].ack_now = true;
            self.chan_work.set(true);
        }
        true
    }

    /// A compact frame that prediction did not take: the general path, cold.
    #[cold]
    #[inline(never)]
    fn rx_compact_general(
        &mut self,
        now: Instant,
        repr: Repr,
        payload: &[u8],
        src: NodeAddr,
        mem: &mut dyn Memory,
    ) {
        self.handle_parsed(now, repr, payload, Some(src), mem)
    }

    /// Whether header prediction takes `repr` (`n` bytes of payload), changing
    /// nothing: of this job and for us, from the peer a channel is open to under
    /// the same name (groups are fixed: the header then names the device's
    /// sender, where it tells one), the next message of its service in order,
    /// fitting its port (a packet: reliable, unicast from its sender, with a free
    /// receive slot; a put (`PUT`): no port, its memory checked by the caller). Its
    /// channel and service.
    #[inline]
    fn predicts<const PACKET: bool, const PUT: bool>(
        &self,
        repr: &Repr,
        n: usize,
        source: Option<NodeAddr>,
    ) -> Option<(usize, bool)> {
        let e = &repr.ends;
        if repr.job_key != self.cfg.job_key
            || e.dst_group != self.cfg.group
            || e.dst_node != self.cfg.node
        {
            return None;
        }
        // Where the device does not tell the sender, the header's name for it.
        let addr = match source {
            Some(a) => a,
            None => self.addr_of(e.src_group, e.src_node).ok()?,
        };
        let ci = *self.peer_map.get(addr.0 as usize)?;
        if ci == NONE {
            return None;
        }
        let ch = self.chans.get(ci as usize)?;
        let reliable = repr.flags.contains(Flags::RELIABLE);
        let next = if reliable {
            repr.seq == ch.rcv_nxt
                && ch.rcv_sack == 0
                && repr.msg_id == ch.next_reserve
                && ch.next_deliver == ch.next_reserve
        } else {
            // Packets are reliable only.
            !PACKET && ch.be_asm == NONE && repr.msg_id == ch.be_expect
        };
        let ok = next
            && !ch.failed
            && ch.peer_group == e.src_group
            && ch.peer_node == e.src_node
            && if PUT {
                true
            } else if PACKET {
                self.packet_fits(repr)
            } else {
                self.single_fits(repr, n)
            };
        ok.then_some((ci as usize, reliable))
    }

    /// Whether a packet `repr` (the next of its channel) is what `rx_packet`
    /// stores without forwarding or dropping it: unicast from its sender within
    /// our group, with a free receive slot and room in the delivery queue.
    #[inline]
    fn packet_fits(&self, repr: &Repr) -> bool {
        let e = &repr.ends;
        e.dst_port == mcast::UNICAST
            && e.src_port == e.src_node
            && e.src_group == self.cfg.group
            && self.bufs.pkts.can_store()
    }

    /// [`Engine::handle_frame_mem`] of a frame received in two parts: the header (and
    /// tag) in `head`, the payload where its sender's device left it
    /// ([`crate::phy::RxToken::consume_parts`]). Never panics, whatever the bytes.
    pub fn handle_split_frame(
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
    fn handle_parsed(
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
        let ch = &mut self.chans[ci];
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
                let ch = &self.chans[ci];
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
        let ch = &mut self.chans[ci];
        if ch.ack_due.is_some_and(|(d, _)| seq_lt(a.ack, d.ack)) {
            self.take_due_ack(now, ci);
            self.on_ack(now, now, ci, a, Flags::empty());
            return;
        }
        let fresh = ch.ack_due.is_none();
        ch.ack_due = Some((a, now));
        ch.peer_window = a.window;
        self.acks_due += u16::from(fresh);
    }

    /// Ack `a` of channel `ci` on a frame without `REFUSED` or `RETRY`, with no
    /// stream queued. Most acks on a busy channel carry nothing new (every frame
    /// has one): only the credits change then. A new one on a data frame or a
    /// packet (`data`) is kept for the next poll (`defer_ack`). `false` for a new
    /// one on any other frame: the caller takes it at once.
    #[inline(always)]
    fn plain_ack(&mut self, now: Instant, ci: usize, a: AckInfo, data: bool) -> bool {
        let ch = &mut self.chans[ci];
        if a.ack == ch.snd_una && a.sack == 0 && ch.ack_due.is_none() {
            ch.peer_window = a.window;
        } else if data {
            self.defer_ack(now, ci, a);
        } else {
            return false;
        }
        true
    }

    /// Takes the ack channel `ci` keeps (see `defer_ack`), if any: the round trip
    /// is measured to when it came, the timer restarts from `now`.
    pub(super) fn take_due_ack(&mut self, now: Instant, ci: usize) {
        if let Some((a, heard)) = self.chans[ci].ack_due.take() {
            self.acks_due -= 1;
            self.on_ack(now, heard, ci, a, Flags::empty());
        }
    }

    /// Takes every kept ack (at the start of each poll).
    #[inline]
    pub(super) fn take_due_acks(&mut self, now: Instant) {
        if self.acks_due == 0 {
            return;
        }
        // Until the last kept ack is taken: the rest hold none.
        for ci in 0..self.chan_hwm {
            if self.acks_due == 0 {
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
        let ch = &mut self.chans[ci];
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
        self.cuts |= cut;
        if refused {
            ch.refused = true;
            ch.held = true;
        } else if !self.caps.reliable {
            ch.mark_holes_for_resend(a);
            self.chan_work.set(true);
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
                self.timer_at = self.timer_at.min(t);
            }
        }
        if flags.contains(Flags::RETRY) {
            // The port that refused us is free: no need to wait for the timer.
            ch.mark_all_for_resend();
            self.chan_work.set(true);
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
            self.chans[ci].check_seq(repr.seq),
            self.chans[ci].rcv_nxt
        );
        match self.chans[ci].check_seq(repr.seq) {
            SeqCheck::Duplicate => {
                self.stats.rx_duplicates += 1;
                let ch = &mut self.chans[ci];
                ch.ack_now = true;
                ch.out_of_order = ch.out_of_order.saturating_add(1);
                self.chan_work.set(true);
                return;
            }
            SeqCheck::OutOfWindow => {
                self.stats.rx_out_of_window += 1;
                self.chans[ci].ack_now = true;
                self.chan_work.set(true);
                return;
            }
            SeqCheck::New => {
                let ch = &mut self.chans[ci];
                if repr.seq != ch.rcv_nxt {
                    // After a gap: the sender is missing an ack (TCP acks such a
                    // segment at once).
                    ch.out_of_order = ch.out_of_order.saturating_add(1);
                    ch.ack_now = true;
                    self.chan_work.set(true);
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
        let ch = &mut self.chans[ci];
        if !accepted {
            self.stats.rx_refused += 1;
            ch.refusing = true;
            if !ch.owed_retry {
                ch.owed_retry = true;
                self.owed_retries += 1;
            }
            ch.ack_now = true;
            self.chan_work.set(true);
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
            self.chans[ci].ack_now = true;
            self.chan_work.set(true);
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
    fn took_reliable(&mut self, now: Instant, ci: usize, repr: &Repr) {
        let ch = &mut self.chans[ci];
        ch.mark_received(repr.seq);
        ch.since_ack = ch.since_ack.saturating_add(1);
        // A member draining into the device's barrier waits for this ack.
        let draining = self.bar.active && self.cfg.device_barrier && !self.bar.no_device;
        if repr.flags.contains(Flags::ACK_REQ)
            || draining
            || ch.since_ack >= (self.cfg.window / 2).max(1)
        {
            ch.ack_now = true;
            self.chan_work.set(true);
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
            self.timer_at = self.timer_at.min(due);
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
                if !self.chans[ci].left {
                    self.chans[ci].left = true;
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
        let found = self.ops.iter().position(|o| {
            o.state != OpState::Free && o.reliable && o.chan == ci as u16 && o.msg_id == repr.msg_id
        });
        let ch = &self.chans[ci];
        let mut dest = Dest {
            group: ch.peer_group,
            node: ch.peer_node,
            port: 0,
        };
        if let Some(i) = found {
            let o = &mut self.ops[i];
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

    /// The assembly of message `msg_id` on channel `ci` (a board broadcast's, by
    /// the root's broadcast number instead, is not one: see `rx_board_next`).
    pub(super) fn find_asm(&self, ci: usize, msg_id: u32, reliable: bool) -> Option<usize> {
        self.asms[..self.asm_hwm].iter().position(|a| {
            a.used
                && a.chan == ci as u16
                && a.msg_id == msg_id
                && a.reliable == reliable
                && !(a.tree && a.shape == mcast::BOARD)
        })
    }

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
        let p = self.ports.get_mut(port as usize)?;
        if !p.input || p.busy {
            return None;
        }
        let ai = free_asm(&self.asms, &mut self.asm_hwm)?;
        let base = match p.kind {
            BufferKind::GoBack => 0,
            BufferKind::GoAhead => p.cursor,
        };
        let cap = (repr.total_len as usize).min(p.room(base));
        if p.kind == BufferKind::GoAhead {
            p.cursor = base + cap;
        }
        p.busy = true;
        if !reliable {
            self.be_asms += 1;
        }
        self.asms[ai] = Assembly {
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
        let unbound = match self.ports.get(dp as usize) {
            _ if dp == BARRIER_PORT || dp == BROADCAST_PORT => return true,
            None => return true,
            Some(p) => !p.input,
        };
        let ch = &mut self.chans[ci];
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
        if self.chans[ci].ctrl_full() {
            return None;
        }
        let ai = free_asm(&self.asms, &mut self.asm_hwm)?;
        self.asms[ai] = Assembly {
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
        let a = &mut self.asms[ai];
        a.received = a.received.saturating_add(payload.len() as u32);
        let off = offset as usize;
        if off >= a.cap {
            return;
        }
        let n = payload.len().min(a.cap - off);
        let at = a.base + off;
        if let Some(buf) = self
            .ports
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
        if let Some(ai) = self.find_asm(ci, repr.msg_id, true) {
            return Ok(ai);
        }
        let next = self.chans[ci].next_reserve;
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
        self.chans[ci].next_reserve = next.wrapping_add(1);
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
        let ch = &self.chans[ci];
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
        let ch = &self.chans[ci];
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
        if self.asms[ai].rma == RMA_NONE {
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
            let want = self.chans[ci].next_deliver;
            let Some(ai) = self.find_asm(ci, want, true) else {
                return;
            };
            let a = self.asms[ai];
            if a.received < a.total {
                if a.stream != NONE {
                    // Its turn to be passed on may have come.
                    self.kick_stream(ai);
                }
                return;
            }
            self.chans[ci].next_deliver = want.wrapping_add(1);
            if a.rma != RMA_NONE {
                self.asms[ai].used = false;
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
        if let Some(s) = self.bcast_seq.get_mut(root as usize) {
            if !seq_lt(bseq, *s) {
                *s = bseq.wrapping_add(1);
            }
        }
    }

    /// Hands a finished (or abandoned, with `lost`) message to its port.
    #[inline]
    pub(super) fn deliver(&mut self, ai: usize, lost: Option<Errno>) {
        let a = &mut self.asms[ai];
        a.used = false;
        if !a.reliable {
            self.be_asms -= 1;
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
            if let Some(ch) = self.chans.get_mut(a.chan as usize).filter(|_| from_root) {
                self.chan_work.set(true);
                ch.queue_ctrl(Slot::Reject {
                    msg: a.msg_id,
                    port: a.src.src_port,
                });
            }
            return;
        }
        self.delivered = true;
        let truncated = (a.total as usize) > a.cap;
        let errno = lost.or(truncated.then_some(Errno::MsgTooLong));
        match errno {
            Some(Errno::FrameLost) => self.stats.lost += 1,
            Some(_) => self.stats.truncated += 1,
            None => self.stats.delivered += 1,
        }
        // Whoever was refused may find this port free now.
        self.wake_refused();
        if let Some(p) = self.ports.get_mut(a.port as usize) {
            p.busy = false;
            if p.kind == BufferKind::GoAhead {
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
            errno,
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
        if self.owed_retries > 0 {
            self.wake_refused_now();
        }
    }

    #[inline(never)]
    fn wake_refused_now(&mut self) {
        self.owed_retries = 0;
        for ch in self.chans[..self.chan_hwm]
            .iter_mut()
            .filter(|c| c.owed_retry)
        {
            ch.owed_retry = false;
            ch.retry_now = true;
            ch.ack_now = true;
            self.chan_work.set(true);
        }
    }

    /// Reports a best-effort message lost before any of it was placed.
    pub(super) fn report_lost(&mut self, repr: &Repr) {
        self.stats.lost += 1;
        if (repr.ends.dst_port as usize) < self.ports.len() {
            self.notify(Note {
                port: repr.ends.dst_port,
                errno: Some(Errno::FrameLost),
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
        let expect = self.chans[ci].be_expect;
        let cur = self.chans[ci].be_asm;
        // `be_expect` is already past the message being assembled: its later fragments
        // belong to `cur`, everything else older is stale.
        let continues = cur != NONE && self.asms[cur as usize].msg_id == msg;
        if !continues && seq_lt(msg, expect) {
            self.stats.rx_dropped += 1;
            return;
        }
        if cur != NONE && !continues {
            // A later message started: the unfinished one lost frames.
            self.chans[ci].be_asm = NONE;
            self.deliver(cur as usize, Some(Errno::FrameLost));
        }
        let ai = if self.chans[ci].be_asm != NONE {
            self.chans[ci].be_asm as usize
        } else {
            // Whole messages vanished between `expect` and `msg`: one report each, so
            // that every message is either delivered or reported (bounded by a window,
            // whatever a frame claims).
            let vanished = msg.wrapping_sub(expect).min(MAX_WINDOW as u32);
            for _ in 0..vanished {
                self.report_lost(repr);
            }
            self.chans[ci].be_expect = msg.wrapping_add(1);
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
            self.chans[ci].be_asm = ai as u16;
            ai
        };
        let next = self.asms[ai].received;
        if repr.offset < next {
            // A duplicate of a fragment already placed.
            self.stats.rx_dropped += 1;
            return;
        }
        if repr.offset > next {
            self.chans[ci].be_asm = NONE;
            self.deliver(ai, Some(Errno::FrameLost));
            return;
        }
        self.place(ai, repr.offset, payload);
        self.asms[ai].deadline = now + self.cfg.reassembly_timeout;
        if self.asms[ai].received >= self.asms[ai].total {
            self.chans[ci].be_asm = NONE;
            self.deliver(ai, None);
        }
    }
}

impl Engine<'_> {
    /// Whether [`Engine::rx_single_frame`] takes `repr` with `n` bytes of payload:
    /// a whole message in one data frame, for an idle GO_BACK port that holds it.
    #[inline(always)]
    fn single_fits(&self, repr: &Repr, n: usize) -> bool {
        if repr.kind != Kind::Data || repr.offset != 0 || n as u32 != repr.total_len {
            return false;
        }
        self.ports
            .get(repr.ends.dst_port as usize)
            .is_some_and(|p| p.input && !p.busy && p.kind == BufferKind::GoBack && p.room(0) >= n)
    }

    /// The short active message's path: a message that is one whole frame, the
    /// channel's next of its service (best-effort, or reliable with every earlier
    /// one delivered), going to an idle GO_BACK port that holds it, is copied
    /// straight into the port's buffer and handed over, with no assembly (what
    /// `reserve`, `place` and `deliver` would do for it, less their bookkeeping).
    /// `false`, with nothing changed, for anything else.
    fn rx_single_frame(&mut self, ci: usize, repr: &Repr, payload: &[u8], reliable: bool) -> bool {
        self.single_fits(repr, payload.len()) && self.deliver_single(ci, repr, payload, reliable)
    }

    /// [`Engine::rx_single_frame`] of a frame that [`Engine::single_fits`].
    #[inline(always)]
    fn deliver_single(&mut self, ci: usize, repr: &Repr, payload: &[u8], reliable: bool) -> bool {
        let n = payload.len();
        let Some(p) = self.ports.get_mut(repr.ends.dst_port as usize) else {
            return false;
        };
        let Some(dst) = p.buf.as_deref_mut().and_then(|b| b.get_mut(..n)) else {
            return false;
        };
        copy_short(dst, payload);
        let ch = &mut self.chans[ci];
        let next = repr.msg_id.wrapping_add(1);
        if reliable {
            ch.next_reserve = next;
            ch.next_deliver = next;
            ch.unbound_msg = None;
        } else {
            ch.be_expect = next;
        }
        self.delivered = true;
        self.stats.delivered += 1;
        self.wake_refused();
        self.notify(Note {
            port: repr.ends.dst_port,
            errno: None,
            count: true,
            msg_len: repr.total_len,
            stored: n,
            base: 0,
            src: repr.ends,
        });
        true
    }
}

/// The lowest free assembly slot, if any; `hwm` follows the highest ever taken.
pub(super) fn free_asm(asms: &[Assembly], hwm: &mut usize) -> Option<usize> {
    let ai = asms.iter().position(|a| !a.used)?;
    *hwm = (*hwm).max(ai + 1);
    Some(ai)
}

impl Engine<'_> {
    /// A HELLO (see [`crate::session`]) from a rank still in its start-up exchange:
    /// answered if it asks, from [`Config::hello`].
    #[cold]
    #[inline(never)]
    fn rx_hello(&mut self, frame: &[u8], source: Option<NodeAddr>) {
        let Some(hc) = self.cfg.hello else {
            self.stats.hellos_dropped += 1;
            return;
        };
        let Ok(me) = self.addr_of(self.cfg.group, self.cfg.node) else {
            return;
        };
        let h = match crate::session::Hello::parse(frame, &hc.key, self.cfg.job_key, me.0) {
            Ok(h) if source.is_none_or(|s| s.0 == h.from) => h,
            _ => {
                self.stats.hellos_dropped += 1;
                return;
            }
        };
        let Some(answer) = hc.answer(me.0, &h) else {
            return;
        };
        if self.hellos as usize >= HELLO_OUT {
            self.stats.hellos_dropped += 1;
            return;
        }
        self.hello_out[self.hellos as usize] = (h.from, answer);
        self.hellos += 1;
    }

    /// Sends the answers to late HELLOs that wait.
    pub(super) fn send_hellos<D: Device>(&mut self, now: Instant, dev: &mut D) -> usize {
        let mut sent = 0;
        for &(to, frame) in &self.hello_out[..self.hellos as usize] {
            if let Some(tx) = dev.transmit(now, NodeAddr(to)) {
                tx.consume(frame.len(), |b| b.copy_from_slice(&frame));
                sent += 1;
            }
        }
        self.stats.hellos_answered += sent as u64;
        self.hellos = 0;
        sent
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
