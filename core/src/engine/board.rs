//! Broadcasts through the device's board: where every member maps the root's NIC
//! memory (the Myrinet-like model on shared memory), a short broadcast is written
//! there once and each member reads it itself, instead of one frame per member or
//! a hop per tree level.
//!
//! A board broadcast is a `MULTICAST` frame with [`Flags::TREE`], shape
//! [`BOARD`], `dst_node` [`BROADCAST`] and no [`Flags::RELIABLE`]: the board loses
//! nothing while its reader lives and holds a frame its reader refuses, so no
//! sequence number, ack or retransmission is needed. Members deliver it in the
//! root's broadcast order (`bseq`) like every tree broadcast; it is not ordered
//! with the root's unicast messages.

use super::mcast::{TreeTag, BOARD};
use super::*;
use crate::phy::BoardTake;

impl<'a> Engine<'a> {
    /// Whether a broadcast of `total` bytes to group `g` can go through the board:
    /// it reaches exactly the group's members (ours, at fabric addresses below its
    /// size) and one frame holds the message.
    pub(super) fn board_fits(&self, g: &Group<'_>, total: u32) -> bool {
        total as usize <= self.board_piece() && self.board_takes(g)
    }

    /// Whether a broadcast to group `g` can go through the board in frames of
    /// [`Engine::board_piece`] bytes: it reaches exactly the group's members (ours,
    /// at fabric addresses below its size).
    pub(super) fn board_takes(&self, g: &Group<'_>) -> bool {
        self.caps.board_nodes == self.size
            && self.board_piece() > 0
            && g.id == self.cfg.group
            && (0..self.size).all(|i| g.members.addr(i).is_some_and(|a| a.0 < self.size))
    }

    /// The most message bytes one board frame holds (after header, tree prefix and
    /// tag, within the payload length's 16 bits). A message that takes several
    /// frames goes in multiples of 64 where a frame holds that much: frames then
    /// start at aligned offsets of the port buffer.
    pub(super) fn board_piece(&self) -> usize {
        let tag = if self.cfg.auth_key.is_some() {
            wire::TAG_LEN
        } else {
            0
        };
        let room = self
            .caps
            .board_mtu
            .saturating_sub(HEADER_LEN + wire::TREE_PREFIX + tag);
        room.min(u16::MAX as usize - wire::TREE_PREFIX)
    }

    /// The message bytes of the board frame at `off` of a message of `total`.
    fn board_frame_len(&self, off: u32, total: u32) -> usize {
        let left = total.saturating_sub(off) as usize;
        let piece = self.board_piece();
        if left <= piece {
            left
        } else if piece >= 64 {
            piece & !63
        } else {
            piece
        }
    }

    /// Writes a reliable broadcast on `port` that one board frame holds into the
    /// board from the caller's bytes at once: no operation, no copy, no pass. The
    /// caller has checked that nothing of ours waits before it (`nothing_ahead`: no
    /// board broadcast queued, none in the gate). It is
    /// numbered and fences a later flat one as a copied [`Engine::start_send`]'s
    /// would be, and, like that one once written, needs nothing more. `false`
    /// when it does not apply or the board is full; nothing has happened then.
    pub(super) fn send_now_board<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        port: PortId,
        head: &[u8],
        body: &[u8],
    ) -> bool {
        let Some(dest) = self.ports.table.get(port as usize).and_then(|p| p.dest) else {
            return false;
        };
        // Most callers here are unicasts without a channel yet: ruled out first.
        // Any length one board frame holds goes (`board_fits`): written from the
        // caller's bytes, it needs no copy, however long.
        if dest.node != BROADCAST || head.len() > INLINE_HEAD_MAX {
            return false;
        }
        let me = self.cfg.node;
        let total = head.len() + body.len();
        let numbered = dest.group == self.cfg.group && (me as usize) < self.bcast.seq.len();
        let fits = self
            .group(dest.group)
            .is_some_and(|g| self.board_fits(g, total as u32));
        if !numbered || !fits {
            return false;
        }
        let mut op = Op::EMPTY;
        op.head[..head.len()].copy_from_slice(head);
        op.head_len = head.len() as u8;
        op.total = total as u32;
        op.src_port = port;
        op.dest = dest;
        op.root = me;
        op.bseq = self.bcast.next;
        let Some((ok, _)) = self.write_board(now, dev, &op, Some(body), None) else {
            return false;
        };
        self.bcast.next = op.bseq.wrapping_add(1);
        self.bcast.released(BOARD, op.bseq);
        self.stats.board_now += 1;
        if !ok {
            self.notify_send_failure(port, dest);
        }
        true
    }

    /// Queues broadcast `op` (its copy taken) for the board; it is written at the
    /// next transmit pass, after the board broadcasts queued before it.
    pub(super) fn queue_board(&mut self, pi: usize) {
        self.ops.table[pi].next = NONE;
        if self.bcast.board_tail == NONE {
            self.bcast.board_head = pi as u16;
        } else {
            self.ops.table[self.bcast.board_tail as usize].next = pi as u16;
        }
        self.bcast.board_tail = pi as u16;
    }

    /// Writes queued board broadcasts, oldest first, frame by frame while the
    /// board has room; `ext` is the payload of an external one (see `poll`), which
    /// waits for a pass that has it. The frames of one broadcast are written one
    /// after another, nothing between them: a member takes a root's broadcasts in
    /// order, so the next one's first frame would wait behind the rest of this one.
    /// Returns frames written.
    pub(super) fn transmit_board<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
    ) -> usize {
        let mut sent = 0;
        while self.bcast.board_head != NONE {
            let oi = self.bcast.board_head as usize;
            let o = self.ops.table[oi];
            let Some((ok, end)) = self.write_board(now, dev, &o, None, ext) else {
                break;
            };
            sent += 1;
            if ok && end < o.total {
                self.ops.table[oi].framed = end;
                continue;
            }
            self.bcast.board_head = o.next;
            if self.bcast.board_head == NONE {
                self.bcast.board_tail = NONE;
            }
            finish_op(&mut self.ops, &mut self.bufs, oi, ok);
            if !ok && o.detached && o.kind != Kind::Packet {
                self.notify_send_failure(o.src_port, o.dest);
            }
        }
        sent
    }

    /// Writes the next board frame of broadcast `o` (queued, or built for one
    /// written at once), the one at `o.framed`: its body is `body`, else its
    /// packet, eager copy, `ext` (external) or borrowed bytes. `None`: the board is
    /// full, or an external body is not in this pass; nothing written.
    /// `Some((false, _))`: the frame could not be made (a packet slot the device no
    /// longer has: nothing written; a body shorter than the message: a last frame
    /// that its readers take as the message lost); the broadcast is over all the
    /// same, failed. `Some((true, end))`: the
    /// frame holds the message up to `end`.
    pub(super) fn write_board<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        o: &Op<'_>,
        body: Option<&[u8]>,
        ext: Option<&[u8]>,
    ) -> Option<(bool, u32)> {
        let packet = o.kind == Kind::Packet;
        let len = (o.total as usize).saturating_sub(o.head_len as usize);
        // A packet in a device send slot: the device moves it into the board.
        let pooled = if packet && body.is_none() {
            self.bufs.pkts.pooled_slot(o.packet)
        } else {
            None
        };
        let body = if pooled.is_some() {
            None
        } else if body.is_some() {
            body
        } else {
            let b = emit::op_body(o, &self.bufs, ext);
            if b.is_none() && o.external {
                return None;
            }
            b
        };
        let body = body.unwrap_or(&[]);
        // A packet (LFC) goes whole; a broadcast from `framed` on, as much as a
        // frame holds.
        let (off, piece) = if packet {
            let n = if pooled.is_some() { len } else { body.len() };
            (0, o.head_len as usize + n)
        } else {
            (o.framed, self.board_frame_len(o.framed, o.total))
        };
        let end = off + piece as u32;
        let [head, tail] = if packet {
            [&o.head[..o.head_len as usize], body]
        } else {
            o.pieces(body, off as usize, piece)
        };
        let whole = if pooled.is_some() {
            piece
        } else {
            head.len() + tail.len()
        };
        // A body shorter than its message (never, but not trusted): the frame
        // says what it holds and ends the message, which its members then take
        // as lost, and the broadcast fails.
        let bad = whole != piece;
        // A packet (LFC) has no tree prefix: its root is `src_port` and the
        // board's mark is in `offset`, as a tree packet's shape (WIRE.md).
        let prefix_len = if packet { 0 } else { wire::TREE_PREFIX };
        let mut prefix = [0u8; wire::TREE_PREFIX];
        prefix[0..2].copy_from_slice(&o.root.to_be_bytes());
        prefix[2] = BOARD;
        prefix[4..8].copy_from_slice(&o.bseq.to_be_bytes());
        let prefix = &prefix[..prefix_len];
        let last = if end >= o.total || bad {
            Flags::LAST
        } else {
            Flags::empty()
        };
        let repr = Repr {
            kind: if packet {
                Kind::Packet
            } else {
                Kind::Multicast
            },
            flags: Flags::TREE | last,
            job_key: self.cfg.job_key,
            ends: Endpoints {
                src_group: self.cfg.group,
                src_node: self.cfg.node,
                dst_group: o.dest.group,
                dst_node: BROADCAST,
                src_port: o.src_port,
                dst_port: o.dest.port,
            },
            seq: 0,
            ack: None,
            msg_id: o.bseq,
            offset: if packet { u32::from(BOARD) } else { off },
            total_len: o.total,
            payload_len: (prefix_len + whole) as u16,
        };
        let key = self.cfg.auth_key.as_ref();
        let frame_len = repr.buffer_len() + if key.is_some() { wire::TAG_LEN } else { 0 };
        let skip_crc = self.caps.integrity;
        let mut ok = false;
        let written = if let Some(k) = pooled {
            let parts = dev
                .send_pool()
                .and_then(|p| p.slot(k))
                .and_then(|b| b.get(..len))
                .map(|b| repr.frame_parts(skip_crc, key, [head, b]));
            match parts {
                Some(Ok((h, t))) => {
                    ok = true;
                    let tag = if key.is_some() { &t[..] } else { &[] };
                    dev.board()
                        .is_some_and(|b| b.write_pooled(now, &h, k, len, tag))
                }
                // A slot the device no longer has: the packet fails.
                _ => true,
            }
        } else if head.len() + tail.len() >= dev.gather_from() {
            // The device copies a long payload its own way, from where it lies.
            match repr.frame_parts(skip_crc, key, [prefix, head, tail]) {
                Ok((h, t)) => {
                    ok = !bad;
                    let tag = if key.is_some() { &t[..] } else { &[] };
                    dev.board()
                        .is_some_and(|b| b.write_parts(now, &[&h, prefix, head, tail, tag]))
                }
                // Never (the lengths are the header's): the broadcast fails.
                Err(_) => true,
            }
        } else {
            dev.board().is_some_and(|board| {
                board.write(now, frame_len, &mut |buf| {
                    ok = repr
                        .emit_frame_with(buf, skip_crc, key, |p| {
                            let (a, rest) = p.split_at_mut(prefix_len);
                            a.copy_from_slice(prefix);
                            let (b, c) = rest.split_at_mut(head.len());
                            b.copy_from_slice(head);
                            c.copy_from_slice(tail);
                        })
                        .is_ok()
                        && !bad;
                })
            })
        };
        if !written {
            return None;
        }
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += repr.payload_len as u64;
        self.stats.board_tx += 1;
        Some((ok, end))
    }

    /// A frame from the board of the node at fabric address `from`. Refused, it
    /// stays there, to be offered again: for a moment while the port is busy or
    /// a message was delivered in this poll ([`BoardTake::Later`]); until the
    /// program binds the port, or while an earlier broadcast of its root that came
    /// another way or a channel slot for the root is awaited ([`BoardTake::Held`]:
    /// the root's barrier does not wait for it).
    pub(super) fn rx_board(&mut self, now: Instant, from: NodeAddr, frame: &[u8]) -> BoardTake {
        let Some((repr, payload)) = self.parse_ours(frame) else {
            return BoardTake::Taken;
        };
        if repr.ends.dst_group != self.cfg.group || repr.ends.src_group != self.cfg.group {
            self.stats.rx_foreign_group += 1;
            return BoardTake::Taken;
        }
        let Ok(addr) = self.addr_of(repr.ends.src_group, repr.ends.src_node) else {
            self.stats.rx_unknown_source += 1;
            return BoardTake::Taken;
        };
        if addr != from {
            self.stats.rx_spoofed += 1;
            return BoardTake::Taken;
        }
        if repr.kind == Kind::Packet {
            if let Ok(ci) = self.channel_for(addr, repr.ends.src_group, repr.ends.src_node) {
                let ch = &mut self.chans.table[ci];
                ch.heard_at = now;
                ch.silent_since = None;
                ch.met = true;
            }
            return match self.rx_board_packet(&repr, payload) {
                true => BoardTake::Taken,
                // No receive slot until the program frees one.
                false => BoardTake::Held,
            };
        }
        if self.progress.delivered {
            // One message to a port per poll, as from the rings: its owner's handler
            // reads it in place before the port may store the next (GO_BACK).
            return BoardTake::Later;
        }
        // One frame holds the message, or this is one of several that follow each
        // other on the root's board, in order (see `transmit_board`).
        let data = payload.len().saturating_sub(wire::TREE_PREFIX);
        let end = repr.offset as u64 + data as u64;
        let last = repr.flags.contains(Flags::LAST);
        let tag = TreeTag::parse(payload).filter(|t| {
            repr.kind == Kind::Multicast
                && repr.flags.contains(Flags::TREE)
                && !repr.flags.contains(Flags::RELIABLE)
                && repr.ends.dst_node == BROADCAST
                && end <= u64::from(repr.total_len)
                && (last || (data > 0 && end < u64::from(repr.total_len)))
                && t.shape == BOARD
                && t.root == repr.ends.src_node
        });
        let Some(tag) = tag else {
            self.stats.rx_malformed += 1;
            return BoardTake::Taken;
        };
        let Ok(ci) = self.channel_for(addr, repr.ends.src_group, repr.ends.src_node) else {
            // No channel slot for the root yet: try again later.
            return BoardTake::Held;
        };
        let ch = &mut self.chans.table[ci];
        ch.heard_at = now;
        ch.silent_since = None;
        ch.met = true;
        let root_dead = ch.failed;
        if repr.offset > 0 {
            return self.rx_board_next(ci, &repr, tag.bseq, &payload[wire::TREE_PREFIX..]);
        }
        // A root's frames of one message follow each other: one begun before this
        // one will never have the rest.
        if let Some(ai) = self.asms.board(ci, None) {
            self.stats.rx_malformed += 1;
            self.deliver(ai, Some(Fault::Lost));
        }
        let Some(&want) = self.bcast.seq.get(tag.root as usize) else {
            self.stats.rx_malformed += 1;
            return BoardTake::Taken;
        };
        if root_dead && !last {
            // The rest of it may never come, and the port would stay taken.
            self.stats.rx_dropped += 1;
            self.bcast_passed(tag.root, tag.bseq);
            return BoardTake::Taken;
        }
        // In the root's order: an earlier broadcast of its that went another way
        // (too long for the board, or the board was full) comes first.
        if seq_lt(want, tag.bseq) && !root_dead {
            return BoardTake::Held;
        }
        let ai = match self.reserve(ci, &repr, true, now) {
            Some(ai) => ai,
            None if self.closed_port(ci, &repr, now, true) => {
                // Nobody to tell (no channel carried it): counted, and the root's
                // later broadcasts may come.
                self.stats.rx_rejected += 1;
                self.bcast_passed(tag.root, tag.bseq);
                self.wake_refused();
                return BoardTake::Taken;
            }
            // Busy with another message for a moment, or not bound yet.
            None => {
                let bound = self
                    .ports
                    .table
                    .get(repr.ends.dst_port as usize)
                    .is_some_and(|p| p.input);
                return if bound {
                    BoardTake::Later
                } else {
                    BoardTake::Held
                };
            }
        };
        self.chans.table[ci].unbound_board = None;
        self.place(ai, 0, &payload[wire::TREE_PREFIX..]);
        let a = &mut self.asms.table[ai];
        a.tree = true;
        a.shape = BOARD;
        a.bseq = tag.bseq;
        self.stats.rx_frames += 1;
        self.stats.board_rx += 1;
        if last {
            let whole = self.asms.table[ai].received == repr.total_len;
            self.deliver(ai, (!whole).then_some(Fault::Lost));
        }
        BoardTake::Taken
    }

    /// A later frame of board broadcast `bseq` from channel `ci`'s peer, `data`
    /// at `repr.offset`: placed into the message its first frame began; the last
    /// one delivers it. A frame out of order ends the message as lost (a root
    /// writes them in order), one of no message here (refused or lost) is dropped.
    fn rx_board_next(&mut self, ci: usize, repr: &Repr, bseq: u32, data: &[u8]) -> BoardTake {
        let Some(ai) = self.asms.board(ci, Some(bseq)) else {
            self.stats.rx_dropped += 1;
            return BoardTake::Taken;
        };
        self.stats.rx_frames += 1;
        self.stats.board_rx += 1;
        let a = self.asms.table[ai];
        if a.total != repr.total_len || a.received != repr.offset {
            self.stats.rx_malformed += 1;
            self.deliver(ai, Some(Fault::Lost));
            return BoardTake::Taken;
        }
        self.place(ai, repr.offset, data);
        if repr.flags.contains(Flags::LAST) {
            let whole = self.asms.table[ai].received == repr.total_len;
            self.deliver(ai, (!whole).then_some(Fault::Lost));
        }
        BoardTake::Taken
    }
}
