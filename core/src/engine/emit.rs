//! Emission: one frame of an operation, an ack, a control frame or a barrier
//! token, built straight into a device's transmit token.

use super::*;

/// The most acks a channel sends in one pass while its peer recovers from a loss.
pub(super) const ACKS_IN_RECOVERY: u8 = 16;

/// Operation slot `oi`, just allocated, cleared for a reliable send (its
/// generation kept, so handles to its past uses stay stale).
pub(super) fn fresh_reliable_op<'o, 'a>(ops: &'o mut [Op<'a>], oi: usize) -> &'o mut Op<'a> {
    let op = &mut ops[oi];
    *op = Op {
        gen: op.gen,
        state: OpState::Active,
        reliable: true,
        ..Op::EMPTY
    };
    op
}

/// A whole message sent in one frame from `src_port` to `dst_port` as message
/// `msg_id` (and frame `seq` where reliable): what the send-at-once paths know of
/// its header (addresses and ack are filled in at emission).
#[derive(Debug, Clone, Copy)]
pub(super) struct One {
    pub(super) src_port: PortId,
    pub(super) dst_port: PortId,
    pub(super) flags: Flags,
    pub(super) seq: u32,
    pub(super) msg_id: u32,
}

impl One {
    /// The full header of this message of `total` bytes.
    #[inline]
    fn repr(&self, total: usize) -> Repr {
        Repr {
            kind: Kind::Data,
            flags: self.flags,
            job_key: 0,
            ends: Endpoints {
                src_port: self.src_port,
                dst_port: self.dst_port,
                ..Endpoints::default()
            },
            seq: self.seq,
            ack: None,
            msg_id: self.msg_id,
            offset: 0,
            total_len: total as u32,
            payload_len: total as u16,
        }
    }
}

/// The most payload one frame carries on this device (after header and tag).
pub(super) fn max_payload(cfg: &Config, caps: &Capabilities) -> usize {
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
pub(super) fn ack_window(cfg: &Config, bufs: &Bufs<'_>) -> u16 {
    let window = cfg.window.min(MAX_WINDOW as u16);
    if bufs.pkts.rx.is_empty() {
        window
    } else {
        window.min(bufs.pkts.rx_free().max(1) as u16)
    }
}

/// The pieces of bytes `off..off + len` of an operation's message.
pub(super) fn frame_pieces<'b>(
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
pub(super) struct Tx<'t, D> {
    pub(super) dev: &'t mut D,
    pub(super) now: Instant,
    pub(super) caps: &'t Capabilities,
    pub(super) cfg: &'t Config,
    /// The short tags' hash of the last header sent.
    pub(super) tags: &'t wire::TagCache,
    pub(super) stats: &'t mut Stats,
    /// Credits advertised in this round's acks.
    pub(super) window: u16,
    pub(super) sent: usize,
}

impl<'t, D: Device> Tx<'t, D> {
    pub(super) fn new(
        dev: &'t mut D,
        now: Instant,
        caps: &'t Capabilities,
        cfg: &'t Config,
        tags: &'t wire::TagCache,
        stats: &'t mut Stats,
        bufs: &Bufs<'_>,
    ) -> Self {
        Tx {
            dev,
            now,
            caps,
            cfg,
            tags,
            stats,
            window: ack_window(cfg, bufs),
            sent: 0,
        }
    }

    pub(super) fn emit(&mut self, ch: &mut Channel, mut repr: Repr, pieces: [&[u8]; 2]) -> bool {
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
        self.sent_frame(ch, repr.payload_len);
        true
    }

    /// A whole message in one frame, `head` then `body`: [`Tx::emit`] without the
    /// pieces of an operation (the send-at-once paths). Under the compact header
    /// where the device takes it, written straight from `one` and the channel.
    #[inline]
    pub(super) fn single(&mut self, ch: &mut Channel, one: One, head: &[u8], body: &[u8]) -> bool {
        // What `Repr::compactable` asks of a whole message's frame: a plain ack; and
        // not one the device sends from where it lies (`Tx::emit`).
        if self.caps.compact
            && self.cfg.auth_key.is_none()
            && ch.rcv_sack == 0
            && !(head.is_empty() && body.len() >= self.dev.gather_from())
        {
            return self.single_compact(ch, one, head, body);
        }
        self.single_full(ch, one, head, body)
    }

    /// [`Tx::single`] under the full header.
    #[inline]
    fn single_full(&mut self, ch: &mut Channel, one: One, head: &[u8], body: &[u8]) -> bool {
        let repr = one.repr(head.len() + body.len());
        if head.is_empty() && body.len() >= self.dev.gather_from() {
            return self.emit(ch, repr, [head, body]);
        }
        self.emit_with(ch, repr, |rest| {
            let (a, b) = rest.split_at_mut(head.len());
            a.copy_from_slice(head);
            b.copy_from_slice(body);
        })
    }

    /// [`Tx::single`] under the compact header (`wire::compact`), with no [`Repr`]
    /// built on the way: the flags and ack that [`Tx::address`] would add, then the
    /// header and the payload into the device's buffer.
    #[inline(always)]
    fn single_compact(&mut self, ch: &mut Channel, one: One, head: &[u8], body: &[u8]) -> bool {
        let len = head.len() + body.len();
        let mut flags = one.flags;
        if ch.refusing {
            flags |= Flags::REFUSED;
        }
        if ch.retry_now {
            flags |= Flags::RETRY;
        }
        let h = wire::CompactHeader {
            flags,
            src_group: self.cfg.group,
            src_node: self.cfg.node,
            src_port: one.src_port,
            dst_port: one.dst_port,
            len: len as u16,
            seq: one.seq,
            msg_id: one.msg_id,
            ack: ch.rcv_nxt,
            window: self.window,
        };
        let Some(tok) = self.dev.transmit(self.now, ch.peer) else {
            return false;
        };
        let ok = tok.consume(wire::COMPACT_LEN + len, |buf| {
            h.emit(buf, |rest| {
                let (a, b) = rest.split_at_mut(head.len());
                a.copy_from_slice(head);
                copy_short(b, body);
            })
            .is_ok()
        });
        if !ok {
            return false;
        }
        self.stats.tx_compact += 1;
        self.sent_frame(ch, len as u16);
        true
    }

    /// Fills in what every frame on `ch` carries: addresses, job, ack, flags.
    pub(super) fn address(&self, ch: &Channel, repr: &mut Repr) {
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
    pub(super) fn sent_frame(&mut self, ch: &mut Channel, payload_len: u16) {
        ch.ack_now = false;
        ch.ack_at = None;
        ch.since_ack = 0;
        ch.refusing = false;
        ch.retry_now = false;
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += u64::from(payload_len);
        self.sent += 1;
    }

    /// Emits `repr` with its payload written by `fill` straight into the frame.
    // Always: each caller's `fill` is its own copy loop, and the one-frame send
    // path (`single`) must not pay a call for it.
    #[inline(always)]
    pub(super) fn emit_with<F: FnOnce(&mut [u8])>(
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
        self.sent_frame(ch, repr.payload_len);
        true
    }

    /// [`Tx::emit_with`] of a frame under the compact header (see
    /// [`crate::phy::Capabilities::compact`]); a put's (`PUT`) under its own magic.
    #[inline]
    pub(super) fn emit_compact<const PUT: bool, F: FnOnce(&mut [u8])>(
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
        self.sent_frame(ch, repr.payload_len);
        true
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn data(
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
        let mut first = [0u8; wire::TREE_PREFIX + INLINE_HEAD_MAX];
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

    /// A short message (see [`Short`]) sent again from its channel's copy, as
    /// frame `seq`, asking for its ack.
    pub(super) fn short_again(&mut self, ch: &mut Channel, seq: u32, s: &Short) -> bool {
        let flags = Flags::RELIABLE | Flags::LAST | Flags::ACK_REQ;
        let one = One {
            src_port: s.src_port,
            dst_port: s.dst_port,
            flags,
            seq,
            msg_id: s.msg_id,
        };
        self.single(ch, one, &[], s.data())
    }

    /// Packet operation `o` (one frame) from device send slot `slot`, where the
    /// program wrote it: the device sends it from there, header and tag beside it.
    pub(super) fn pooled(
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
        let Some(body) = self.dev.send_pool().and_then(|p| p.slot(slot)?.get(..len)) else {
            return false;
        };
        let Ok((h, t)) = repr.frame_parts(self.caps.integrity, key, [&[], body]) else {
            return false;
        };
        let tag = if key.is_some() { &t[..] } else { &[] };
        let now = self.now;
        if !self
            .dev
            .send_pool_mut()
            .is_some_and(|p| p.send_slot(now, ch.peer, &h, slot, len, tag))
        {
            return false;
        }
        self.sent_frame(ch, repr.payload_len);
        true
    }

    /// The header of a data frame of `o` (addresses and ack filled in at emission).
    pub(super) fn data_repr(
        &self,
        o: &Op<'_>,
        flags: Flags,
        seq: u32,
        offset: u32,
        payload_len: u16,
    ) -> Repr {
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
    pub(super) fn data_flags(
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
    pub(super) fn rma(
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

    pub(super) fn barrier(&mut self, ch: &mut Channel, seq: u32, epoch: u32, round: u32) -> bool {
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
                src_port: wire::BARRIER_TOKEN_PORT,
                dst_port: wire::BARRIER_TOKEN_PORT,
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

    pub(super) fn reject(&mut self, ch: &mut Channel, seq: u32, msg: u32, port: PortId) -> bool {
        self.control(ch, seq, Kind::Control, msg, CONTROL_REJECT, port)
    }

    /// A reliable control frame without payload: a REJECT, a fetch-and-add request
    /// or its answer.
    pub(super) fn control(
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
    pub(super) fn slot(
        &mut self,
        ch: &mut Channel,
        seq: u32,
        slot: Slot,
        gets: &[rma::Get],
    ) -> bool {
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
            Slot::Data { .. } | Slot::Short { .. } | Slot::Free => true,
        }
    }

    pub(super) fn ack(&mut self, ch: &mut Channel) -> bool {
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
