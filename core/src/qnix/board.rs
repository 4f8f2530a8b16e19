//! Broadcasts that go once (a board in NIC memory or a tree), kept in each
//! sender's order with the packets it sent before them.

use super::*;

/// What a sender sent after a board broadcast that has not been taken here yet.
#[derive(Debug)]
pub(super) struct Parked {
    /// The sender's board broadcasts before it.
    pub(super) bc: u16,
    pub(super) item: ParkedItem,
}

#[derive(Debug)]
pub(super) enum ParkedItem {
    Msg { tag: i32, data: Vec<u8> },
    Rts { a: i32, b: i32, c: u32 },
}

/// A board broadcast taken before the packets its sender sent here ahead of it.
#[derive(Debug)]
pub(super) struct Board {
    /// Packets from its sender to take first (a wrapping count).
    pub(super) after: u32,
    /// This process is one it is for (others only count it).
    pub(super) for_me: bool,
    pub(super) tag: i32,
    /// The message's length (`data` holds all of it once every packet is in).
    pub(super) len: usize,
    pub(super) data: Vec<u8>,
}

/// Whether board-broadcast count `a` is past `b` (counts wrap).
pub(super) fn ahead(a: u16, b: u16) -> bool {
    (a.wrapping_sub(b) as i16) > 0
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    /// A message or rendezvous request from a process of this application that
    /// names more of its sender's board broadcasts than were taken here, or comes
    /// after one that does: it waits for them.
    pub(super) fn held(&self, d: Delivery) -> bool {
        let src = d.src as usize;
        let ours = self.name_of(d.src).is_some_and(|n| n.ai == self.me.ai);
        ours && (self.still_coming(src, bc_of(&self.ep.engine, d)) || !self.parked[src].is_empty())
    }

    /// Whether `src`'s board broadcasts up to count `bc` are still to be taken
    /// here: not yet taken, and either on their way or (cut off from `src`'s
    /// tree) already here, waiting for earlier packets.
    pub(super) fn still_coming(&self, src: usize, bc: u16) -> bool {
        ahead(bc, self.bc_taken[src]) && !(self.cut_off[src] && self.boards[src].is_empty())
    }

    /// A broadcast from `d.src`'s board: taken in its place among that sender's
    /// messages (after the packets it sent here before it), then what waited for it.
    pub(super) fn take_board(&mut self, d: Delivery) {
        let src = d.src as usize;
        let me = self.ep.engine.config().node as usize;
        let n = self.sent_to.len();
        let ours = self.name_of(d.src).is_some_and(|n| n.ai == self.me.ai);
        let mut data = self.spares.bytes();
        // The first packet: head, counts, recipients, the message's start. A
        // `K_MORE` packet: head (with its offset), the next bytes.
        let part = self
            .ep
            .engine
            .packet(d.packet)
            .and_then(|p| p.get(..d.len))
            .and_then(|p| {
                let (kind, tag, _, c) = parse_head(p)?;
                if kind == K_MORE {
                    data.extend_from_slice(&p[HEAD..]);
                    return Some((kind, tag, c, 0, false));
                }
                let after = p.get(HEAD + 4 * me..HEAD + 4 * me + 4)?;
                let after = u32::from_be_bytes([after[0], after[1], after[2], after[3]]);
                let for_me = p.get(HEAD + 4 * n + me / 8)? & (1 << (me % 8)) != 0;
                data.extend_from_slice(p.get(board_prefix(n)..)?);
                Some((kind, tag, c, after, for_me))
            });
        let _ = self.ep.engine.packet_free(d.packet);
        match part {
            // Whole, or a first part of less than the rendezvous size.
            Some((K_MSG, tag, len, after, for_me))
                if ours
                    && (len as usize == data.len()
                        || (data.len()..RENDEZVOUS_MIN).contains(&(len as usize))) =>
            {
                if self.growing[src].take().is_some() {
                    self.stats.dropped += 1;
                }
                if (after.wrapping_sub(self.got_from[src]) as i32) > 0 {
                    self.stats.early_boards += 1;
                }
                let b = Board {
                    after,
                    for_me,
                    tag,
                    len: len as usize,
                    data,
                };
                if b.data.len() < b.len {
                    self.growing[src] = Some(b);
                } else {
                    self.boards[src].push_back(b);
                    self.take_boards(src);
                }
            }
            Some((K_MORE, _, off, _, _)) if ours => {
                let grown = match self.growing[src].as_mut() {
                    Some(g)
                        if g.data.len() == off as usize && g.len - g.data.len() >= data.len() =>
                    {
                        g.data.extend_from_slice(&data);
                        g.data.len() == g.len
                    }
                    _ => {
                        // Out of its place: what was growing is lost with it.
                        self.stats.dropped += 1;
                        self.growing[src] = None;
                        false
                    }
                };
                self.spares.give_bytes(data);
                if let Some(b) = self.growing[src].take_if(|_| grown) {
                    self.boards[src].push_back(b);
                    self.take_boards(src);
                }
            }
            _ => {
                self.stats.dropped += 1;
                self.spares.give_bytes(data);
            }
        }
    }

    /// Takes `src`'s waiting board broadcasts whose earlier packets are all here.
    pub(super) fn take_boards(&mut self, src: usize) {
        while let Some(b) = self.boards[src].front() {
            let got = self.got_from[src];
            if (b.after.wrapping_sub(got) as i32) > 0 {
                break;
            }
            let Some(b) = self.boards[src].pop_front() else {
                break;
            };
            self.bc_taken[src] = self.bc_taken[src].wrapping_add(1);
            if b.for_me {
                self.arrived(src as NodeId, b.tag, b.data);
            } else {
                self.spares.give_bytes(b.data);
            }
            self.release(src);
        }
    }

    /// Hands on what `src` sent after board broadcasts that are now taken.
    pub(super) fn release(&mut self, src: usize) {
        while let Some(p) = self.parked[src].front() {
            if self.still_coming(src, p.bc) {
                break;
            }
            let Some(p) = self.parked[src].pop_front() else {
                break;
            };
            match p.item {
                ParkedItem::Msg { tag, data } => {
                    self.parked_bytes -= data.len();
                    self.arrived(src as NodeId, tag, data);
                }
                ParkedItem::Rts { a, b, c } => self.control(src as NodeId, K_RTS, a, b, c),
            }
        }
    }

    /// Whether a message of `len` bytes to `to` goes once, as packets to every
    /// other process, rather than to each member: the application is the whole
    /// fabric and `to` lists other processes once each (the first packet names
    /// those it is for: the others only count it). Where the device has a board
    /// (the Myrinet-like model's, in NIC memory, which every other process reads)
    /// a message that fits one packet is written there once. Where it has none
    /// (`udp`, `eth`) a message shorter than [`RENDEZVOUS_MIN`] goes down the
    /// engine's binomial tree of relays, its first packet followed by `K_MORE`
    /// parts: log n steps instead of n - 1 sends by the root; a longer one is
    /// written by rendezvous straight into each member's receive. Both are called
    /// board broadcasts here. Others keep going member by member, and so does every
    /// broadcast down a tree once a process of the application is dead (its relays
    /// may be gone).
    ///
    /// QNIX matches a sender's messages in the order sent; a board packet is read
    /// apart from the rings (and may pass packets still queued for a full ring),
    /// so order is kept at both ends. The board packet carries, for every
    /// process, how many packets the sender had launched to it; a receiver takes
    /// the broadcast only once it has taken that many from the sender. Every
    /// message or rendezvous request sent afterwards carries the sender's count of
    /// board broadcasts, and a receiver keeps one back (with whatever follows it
    /// from that sender) until it has taken that many of them.
    pub(super) fn goes_once(&self, to: &[NodeId], len: usize) -> bool {
        let me = self.ep.engine.config().node as usize;
        let n = self.ep.engine.size() as usize;
        if to.is_empty() || to.len() >= n {
            return false;
        }
        let Some(gi) = self.groups.iter().position(|g| g.name == self.me.ai) else {
            return false;
        };
        if !self.whole_fabric(gi) {
            return false;
        }
        // Every destination once, and not this process: a bitmap on the stack.
        let mut seen = [0u64; 64];
        if n > seen.len() * 64 {
            return false;
        }
        seen[me / 64] |= 1 << (me % 64);
        for &d in to {
            let d = d as usize;
            if d >= n || seen[d / 64] & (1 << (d % 64)) != 0 {
                return false;
            }
            seen[d / 64] |= 1 << (d % 64);
        }
        // Down the tree in as many packets as it takes, below the rendezvous size
        // (a longer one is written straight into each member's receive).
        let prefix = board_prefix(n);
        self.ep.engine.board_takes_packet(prefix + len)
            || (len < RENDEZVOUS_MIN
                && self.ep.engine.tree_takes_packet(prefix + 1)
                && self.ep.engine.packet_size() > HEAD
                && !self.any_dead())
    }

    /// Where board broadcasts go down a tree, those of a root whose tree reaches
    /// this process through dead `n` that are not here now never come: what the
    /// root sent after them waits for nothing (QNIX's order holds for what
    /// arrives; a broadcast a dead relay did not pass on is lost, as with LFC's
    /// multicast).
    pub(super) fn cut_off_below(&mut self, n: NodeId) {
        if !self.ep.engine.tree_takes_packet(0) {
            return;
        }
        let me = self.ep.engine.config().node;
        for root in 0..self.dead.len() {
            let r = root as NodeId;
            if r == me || self.dead[root] || self.cut_off[root] {
                continue;
            }
            if self.ep.engine.relayed_through(r, n, Tree::Binomial) {
                self.cut_off[root] = true;
                self.growing[root] = None;
                self.release(root);
            }
        }
    }
}
