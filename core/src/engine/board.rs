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

impl<'a> Engine<'a> {
    /// Whether a broadcast of `total` bytes to group `g` can go through the board:
    /// it reaches exactly the group's members (ours, at fabric addresses below its
    /// size) and one frame holds the message.
    pub(super) fn board_fits(&self, g: &Group<'_>, total: u32) -> bool {
        let tag = if self.cfg.auth_key.is_some() {
            wire::TAG_LEN
        } else {
            0
        };
        let frame = HEADER_LEN + wire::TREE_PREFIX + total as usize + tag;
        self.caps.board_nodes == self.size
            && g.id == self.cfg.group
            && frame <= self.caps.board_mtu
            && (0..self.size).all(|i| g.members.addr(i).is_some_and(|a| a.0 < self.size))
    }

    /// Writes a reliable broadcast on `port` that one board frame holds into the
    /// board from the caller's bytes at once: no operation, no copy, no pass. The
    /// caller has checked that nothing of ours waits before it (`nothing_ahead`: no
    /// board broadcast queued, none in the gate). It is
    /// numbered and fences a later flat one as [`Engine::start_send_eager`]'s
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
        let Some(dest) = self.ports.get(port as usize).and_then(|p| p.dest) else {
            return false;
        };
        // Most callers here are unicasts without a channel yet: ruled out first.
        // Any length one board frame holds goes (`board_fits`): written from the
        // caller's bytes, it needs no copy, however long.
        if dest.node != BROADCAST || head.len() > HEAD_MAX {
            return false;
        }
        let me = self.cfg.node;
        let total = head.len() + body.len();
        let numbered = dest.group == self.cfg.group && (me as usize) < self.bcast_seq.len();
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
        op.bseq = self.bcast_next;
        let Some(ok) = self.write_board(now, dev, &op, Some(body)) else {
            return false;
        };
        self.bcast_next = op.bseq.wrapping_add(1);
        self.bcast_released(BOARD, op.bseq);
        self.stats.board_now += 1;
        if !ok {
            self.notify_send_failure(port, dest);
        }
        true
    }

    /// Queues broadcast `op` (its copy taken) for the board; it is written at the
    /// next transmit pass, after the board broadcasts queued before it.
    pub(super) fn queue_board(&mut self, pi: usize) {
        self.ops[pi].next = NONE;
        if self.board_tail == NONE {
            self.board_head = pi as u16;
        } else {
            self.ops[self.board_tail as usize].next = pi as u16;
        }
        self.board_tail = pi as u16;
    }

    /// Writes queued board broadcasts, oldest first, while the board has room.
    /// Returns frames written.
    pub(super) fn transmit_board<D: Device>(&mut self, now: Instant, dev: &mut D) -> usize {
        let mut sent = 0;
        while self.board_head != NONE {
            let oi = self.board_head as usize;
            let o = self.ops[oi];
            let Some(ok) = self.write_board(now, dev, &o, None) else {
                break;
            };
            self.board_head = o.next;
            if self.board_head == NONE {
                self.board_tail = NONE;
            }
            sent += 1;
            finish_op(&mut self.ops, &mut self.bufs, oi, ok);
            if !ok && o.detached && o.kind != Kind::Packet {
                self.notify_send_failure(o.src_port, o.dest);
            }
        }
        sent
    }

    /// Writes the board frame of broadcast `o` (queued, or built for one written
    /// at once): its body is `body`, else its packet or eager copy. `None`: the
    /// board is full, nothing written. `Some(false)`: the frame could not be made
    /// (a packet slot the device no longer has: nothing written; a body that does
    /// not fit: a slot its readers drop); the broadcast is over all the same, failed.
    pub(super) fn write_board<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        o: &Op<'_>,
        body: Option<&[u8]>,
    ) -> Option<bool> {
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
        } else if packet {
            self.bufs.pkts.payload(o.packet)
        } else {
            self.bufs
                .eager
                .get(o.eager as usize)
                .and_then(|b| b.data.get(..len))
        };
        let body = body.unwrap_or(&[]);
        let body_len = if pooled.is_some() { len } else { body.len() };
        let head = &o.head[..o.head_len as usize];
        // A packet (LFC) has no tree prefix: its root is `src_port` and the
        // board's mark is in `offset`, as a tree packet's shape (WIRE.md).
        let prefix_len = if packet { 0 } else { wire::TREE_PREFIX };
        let mut prefix = [0u8; wire::TREE_PREFIX];
        prefix[0..2].copy_from_slice(&o.root.to_be_bytes());
        prefix[2] = BOARD;
        prefix[4..8].copy_from_slice(&o.bseq.to_be_bytes());
        let prefix = &prefix[..prefix_len];
        let repr = Repr {
            kind: if packet {
                Kind::Packet
            } else {
                Kind::Multicast
            },
            flags: Flags::TREE | Flags::LAST,
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
            offset: if packet { u32::from(BOARD) } else { 0 },
            total_len: o.total,
            payload_len: (prefix_len + head.len() + body_len) as u16,
        };
        let key = self.cfg.auth_key.as_ref();
        let frame_len = repr.buffer_len() + if key.is_some() { wire::TAG_LEN } else { 0 };
        let skip_crc = self.caps.integrity;
        let mut ok = false;
        let written = if let Some(k) = pooled {
            let parts = dev
                .pool_slot(k)
                .and_then(|b| b.get(..len))
                .map(|b| repr.frame_parts(skip_crc, key, [head, b]));
            match parts {
                Some(Ok((h, t))) => {
                    ok = true;
                    let tag = if key.is_some() { &t[..] } else { &[] };
                    dev.board_transmit_pooled(now, &h, k, len, tag)
                }
                // A slot the device no longer has: the packet fails.
                _ => true,
            }
        } else {
            dev.board_transmit(now, frame_len, &mut |buf| {
                ok = repr
                    .emit_frame_with(buf, skip_crc, key, |p| {
                        let (a, rest) = p.split_at_mut(prefix_len);
                        a.copy_from_slice(prefix);
                        let (b, c) = rest.split_at_mut(head.len());
                        b.copy_from_slice(head);
                        c.copy_from_slice(body);
                    })
                    .is_ok();
            })
        };
        if !written {
            return None;
        }
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += repr.payload_len as u64;
        self.stats.board_tx += 1;
        Some(ok)
    }

    /// A frame from the board of the node at fabric address `from`. `false` leaves
    /// it there, to be offered again: an earlier broadcast of its root has not come
    /// yet, or the port is busy.
    pub(super) fn rx_board(&mut self, now: Instant, from: NodeAddr, frame: &[u8]) -> bool {
        let Some((repr, payload)) = self.parse_ours(frame) else {
            return true;
        };
        if repr.ends.dst_group != self.cfg.group || repr.ends.src_group != self.cfg.group {
            self.stats.rx_foreign_group += 1;
            return true;
        }
        let Ok(addr) = self.addr_of(repr.ends.src_group, repr.ends.src_node) else {
            self.stats.rx_unknown_source += 1;
            return true;
        };
        if addr != from {
            self.stats.rx_spoofed += 1;
            return true;
        }
        if repr.kind == Kind::Packet {
            if let Ok(ci) = self.channel_for(addr, repr.ends.src_group, repr.ends.src_node) {
                let ch = &mut self.chans[ci];
                ch.heard_at = now;
                ch.silent_since = None;
            }
            return self.rx_board_packet(&repr, payload);
        }
        if self.delivered {
            // One message to a port per poll, as from the rings: its owner's handler
            // reads it in place before the port may store the next (GO_BACK).
            return false;
        }
        let tag = TreeTag::parse(payload).filter(|t| {
            repr.kind == Kind::Multicast
                && repr.flags.contains(Flags::TREE)
                && !repr.flags.contains(Flags::RELIABLE)
                && repr.ends.dst_node == BROADCAST
                && repr.offset == 0
                && repr.total_len as usize + wire::TREE_PREFIX == payload.len()
                && t.shape == BOARD
                && t.root == repr.ends.src_node
        });
        let Some(tag) = tag else {
            self.stats.rx_malformed += 1;
            return true;
        };
        let Ok(ci) = self.channel_for(addr, repr.ends.src_group, repr.ends.src_node) else {
            // No channel slot for the root yet: try again later.
            return false;
        };
        let ch = &mut self.chans[ci];
        ch.heard_at = now;
        ch.silent_since = None;
        let root_dead = ch.failed;
        let Some(&want) = self.bcast_seq.get(tag.root as usize) else {
            self.stats.rx_malformed += 1;
            return true;
        };
        // In the root's order: an earlier broadcast of its that went another way
        // (too long for the board, or the board was full) comes first.
        if seq_lt(want, tag.bseq) && !root_dead {
            return false;
        }
        let ai = match self.reserve(ci, &repr, true, now) {
            Some(ai) => ai,
            None if self.closed_port(ci, &repr, now, true) => {
                // Nobody to tell (no channel carried it): counted, and the root's
                // later broadcasts may come.
                self.stats.rx_rejected += 1;
                if !seq_lt(tag.bseq, want) {
                    self.bcast_seq[tag.root as usize] = tag.bseq.wrapping_add(1);
                }
                self.wake_refused();
                return true;
            }
            None => return false,
        };
        self.chans[ci].unbound_board = None;
        self.place(ai, 0, &payload[wire::TREE_PREFIX..]);
        let a = &mut self.asms[ai];
        a.tree = true;
        a.shape = BOARD;
        a.bseq = tag.bseq;
        self.stats.rx_frames += 1;
        self.stats.board_rx += 1;
        self.deliver(ai, None);
        true
    }
}
