//! The receive fast paths: frames whose header the channel predicted (sent
//! compact), and whole messages in one frame for an idle port, taken without an
//! assembly.

use super::*;

impl Engine<'_> {
    /// Whether [`Engine::rx_single_frame`] takes `repr` with `n` bytes of payload:
    /// a whole message in one data frame, for an idle GO_BACK port that holds it.
    #[inline(always)]
    pub(super) fn single_fits(&self, repr: &Repr, n: usize) -> bool {
        if repr.kind != Kind::Data || repr.offset != 0 || n as u32 != repr.total_len {
            return false;
        }
        self.ports
            .table
            .get(repr.ends.dst_port as usize)
            .is_some_and(|p| p.takes_whole(n))
    }

    /// The short active message's path: a message that is one whole frame, the
    /// channel's next of its service (best-effort, or reliable with every earlier
    /// one delivered), going to an idle GO_BACK port that holds it, is copied
    /// straight into the port's buffer and handed over, with no assembly (what
    /// `reserve`, `place` and `deliver` would do for it, less their bookkeeping).
    /// `false`, with nothing changed, for anything else.
    pub(super) fn rx_single_frame(
        &mut self,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        reliable: bool,
    ) -> bool {
        if !self.single_fits(repr, payload.len()) {
            return false;
        }
        let Some(Delivered(notice)) = self.deliver_single(ci, repr, payload, reliable) else {
            return false;
        };
        if let Some(n) = notice {
            self.hand_over(n, None);
        }
        true
    }

    /// [`Engine::rx_single_frame`] of a frame that [`Engine::single_fits`]: the
    /// message stored and counted, its notice left to the caller to hand over
    /// ([`Engine::hand_over`]) once its frame has been taken. `None`, nothing
    /// changed: the port has no room for it.
    #[inline(always)]
    pub(super) fn deliver_single(
        &mut self,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        reliable: bool,
    ) -> Option<Delivered> {
        let n = payload.len();
        let p = self.ports.table.get_mut(repr.ends.dst_port as usize)?;
        let dst = p.buf.as_deref_mut().and_then(|b| b.get_mut(..n))?;
        copy_short(dst, payload);
        self.chans.table[ci].delivered_next(reliable, repr.msg_id);
        self.progress.delivered = true;
        self.stats.delivered += 1;
        self.wake_refused();
        Some(Delivered(self.note(Note {
            port: repr.ends.dst_port,
            fault: None,
            count: true,
            msg_len: repr.total_len,
            stored: n,
            base: 0,
            src: repr.ends,
        })))
    }
}

/// A message [`Engine::deliver_single`] stored: the notice its port's owner
/// wants, if it wants one.
pub(super) struct Delivered(Option<Notice>);

impl<'a> Engine<'a> {
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
        upcalls: Option<&mut dyn Upcalls<'a>>,
    ) -> bool {
        // Without a key, only from a device that guarantees integrity (no CRC
        // is checked here); with one, the tag is.
        if (self.cfg.auth_key.is_none() && !self.caps.integrity) || self.bufs.queued_streams != 0 {
            return false;
        }
        // Each kind its own copy, the data frame's inline: a packet's checks
        // cost a message nothing.
        self.rx_predicted_as::<false>(now, frame, source, upcalls)
            || self.rx_predicted_packet(now, frame, source)
    }

    /// The packet's prediction, out of line (a data frame's path stays as short).
    #[inline(never)]
    pub(super) fn rx_predicted_packet(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
    ) -> bool {
        self.rx_predicted_as::<true>(now, frame, source, None)
    }

    /// [`Engine::rx_predicted`] of a data frame, or of a packet (`PACKET`).
    #[inline(always)]
    pub(super) fn rx_predicted_as<const PACKET: bool>(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        upcalls: Option<&mut dyn Upcalls<'a>>,
    ) -> bool {
        let key = self.cfg.auth_key.as_ref();
        let kind = if PACKET { Kind::Packet } else { Kind::Data };
        let taken =
            Repr::parse_single_cached(frame, kind, key, Some(&self.tags.rx), |repr, payload| {
                self.predicts::<PACKET, false>(repr, payload.len(), source)
            });
        let Some((repr, payload, (ci, reliable))) = taken else {
            return false;
        };
        let notice = if PACKET {
            if !self.store_predicted_packet(ci, &repr, payload) {
                return false;
            }
            None
        } else {
            let Some(Delivered(notice)) = self.deliver_single(ci, &repr, payload, reliable) else {
                return false;
            };
            notice
        };
        self.stats.rx_frames += 1;
        self.took_predicted(now, ci, &repr, reliable);
        if let Some(n) = notice {
            self.hand_over(n, upcalls);
        }
        true
    }

    /// What follows a predicted frame's delivery (a packet's: queued for the
    /// program): what `handle_parsed` does for any frame of the channel (the ack
    /// touches only what was sent, so its place after the delivery changes
    /// nothing), and `rx_reliable` for a new reliable one.
    #[inline(always)]
    pub(super) fn took_predicted(&mut self, now: Instant, ci: usize, repr: &Repr, reliable: bool) {
        self.stats.rx_predicted += 1;
        let ch = &mut self.chans.table[ci];
        // A predicted reliable frame is the next on its channel: new (the ack it
        // carries is then not looked at here; a replay of one of its kind is a
        // duplicate, and its ack moves `ack_heard` at most once).
        if reliable || repr.ack.is_some_and(|a| ch.new_ack(a)) {
            ch.heard(now);
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
        upcalls: Option<&mut dyn Upcalls<'a>>,
    ) {
        self.stats.rx_frames += 1;
        self.stats.rx_compact += 1;
        let vouched = self.caps.compact && self.cfg.auth_key.is_none();
        let Some(src) = source.filter(|_| vouched) else {
            self.stats.rx_unauthenticated += 1;
            return;
        };
        let Ok((h, payload)) = wire::CompactHeader::parse(frame) else {
            self.stats.rx_malformed += 1;
            return;
        };
        // As `rx_predicted` takes them: a refusal or a call to retry goes the
        // general way (`on_ack` with its flags).
        let plain = !h.flags.intersects(Flags::REFUSED | Flags::RETRY);
        if plain && self.bufs.queued_streams == 0 {
            if let Some(Delivered(notice)) = self.compact_predicted(now, src, &h, payload) {
                if let Some(n) = notice {
                    self.hand_over(n, upcalls);
                }
                return;
            }
        }
        let c = &self.cfg;
        let repr = h.repr(c.job_key, c.group, c.node);
        self.rx_compact_general(now, repr, payload, src, mem)
    }

    /// Header prediction of a compact frame from `src` (see [`Engine::predicts`])
    /// and, where it holds, the message delivered (as [`Engine::deliver_single`])
    /// and its frame taken (as [`Engine::took_predicted`]), the channel and the
    /// port each looked up once. `None`, nothing changed: the general path takes it.
    #[inline(always)]
    fn compact_predicted(
        &mut self,
        now: Instant,
        src: NodeAddr,
        h: &wire::CompactHeader,
        payload: &[u8],
    ) -> Option<Delivered> {
        let n = payload.len();
        let ci = *self.chans.peer_map.get(src.0 as usize)?;
        if ci == NONE {
            return None;
        }
        let Engine {
            chans,
            ports,
            cfg,
            stats,
            progress,
            bar,
            ..
        } = self;
        let ch = chans.table.get_mut(ci as usize)?;
        let reliable = h.flags.contains(Flags::RELIABLE);
        let next = ch.next_in_order(reliable, h.seq, h.msg_id);
        if !next || ch.failed || ch.peer_group != h.src_group || ch.peer_node != h.src_node {
            return None;
        }
        let p = ports.table.get_mut(h.dst_port as usize)?;
        if !p.takes_whole(n) {
            return None;
        }
        let dst = p.buf.as_deref_mut().and_then(|b| b.get_mut(..n))?;
        copy_short(dst, payload);
        let (sem, wanted) = (p.sem, p.recv);
        // What `deliver_single` does.
        ch.delivered_next(reliable, h.msg_id);
        progress.delivered = true;
        stats.delivered += 1;
        if let Some(s) = ports.sems.get_mut(sem as usize) {
            s.count = s.count.saturating_add(1);
        }
        let notice = wanted.then_some(Notice {
            port: h.dst_port,
            fault: None,
            msg_len: u32::from(h.len),
            stored: n,
            base: 0,
            src: Endpoints {
                src_group: h.src_group,
                src_node: h.src_node,
                src_port: h.src_port,
                dst_group: cfg.group,
                dst_node: cfg.node,
                dst_port: h.dst_port,
            },
        });
        // What `took_predicted` does, the ack kept for the next poll where new
        // (`plain_ack`, `defer_ack`).
        stats.rx_predicted += 1;
        let a = AckInfo {
            ack: h.ack,
            sack: 0,
            window: h.window,
        };
        if reliable || ch.new_ack(a) {
            ch.heard(now);
        }
        let mut older = false;
        if !ch.credits_only(a) {
            match ch.keep_ack(now, a) {
                Some(fresh) => chans.acks_due += u16::from(fresh),
                None => older = true,
            }
        }
        if reliable {
            // What `took_reliable` does for a data frame, on the channel borrowed
            // here (a helper shared with it cost the packet paths more:
            // `engine_cost`).
            ch.mark_received(h.seq);
            ch.since_ack = ch.since_ack.saturating_add(1);
            // A member draining into the device's barrier waits for this ack.
            let draining = bar.active && cfg.device_barrier && !bar.no_device;
            if h.flags.contains(Flags::ACK_REQ)
                || draining
                || ch.since_ack >= (cfg.window / 2).max(1)
            {
                ch.ack_now = true;
                chans.work.set(true);
            } else {
                let due = now + cfg.ack_delay;
                ch.ack_at = Some(ch.ack_at.map_or(due, |t| t.min(due)));
                chans.timer_at = chans.timer_at.min(due);
            }
        }
        if older {
            self.older_ack(now, ci as usize, a);
        }
        self.wake_refused();
        Some(Delivered(notice))
    }

    /// A compact put ([`wire::COMPACT_PUT_MAGIC`]), vouched for as
    /// [`Engine::rx_compact`] requires: predicted where it is the next message of
    /// its channel, to memory we expose, else taken by the general path.
    #[inline(never)]
    pub(super) fn rx_compact_put(
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
    pub(super) fn rx_predicted_put(
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
            self.chans.table[ci].ack_now = true;
            self.chans.work.set(true);
        }
        true
    }

    /// A compact frame that prediction did not take: the general path, cold.
    #[cold]
    #[inline(never)]
    pub(super) fn rx_compact_general(
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
    pub(super) fn predicts<const PACKET: bool, const PUT: bool>(
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
        let ci = *self.chans.peer_map.get(addr.0 as usize)?;
        if ci == NONE {
            return None;
        }
        let ch = self.chans.table.get(ci as usize)?;
        let reliable = repr.flags.contains(Flags::RELIABLE);
        // Packets are reliable only.
        let next = (reliable || !PACKET) && ch.next_in_order(reliable, repr.seq, repr.msg_id);
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
    pub(super) fn packet_fits(&self, repr: &Repr) -> bool {
        let e = &repr.ends;
        e.dst_port == mcast::UNICAST
            && e.src_port == e.src_node
            && e.src_group == self.cfg.group
            && self.bufs.pkts.can_store()
    }
}
