//! Keeping a root's broadcasts in order when they go different ways.
//!
//! A root's reliable broadcasts are numbered (`bseq`) and travel one of three
//! ways: its board (short, where every member maps the root's NIC memory), down
//! a tree through relays, or flat, straight from the root to each member over
//! its channel (too long for the relays' rings). Members deliver a broadcast
//! that went through the board or a tree only after the root's earlier ones
//! (`reserve_tree`, `rx_board`), since what they wait for cannot be held up
//! behind it. A flat one cannot wait that way: refusing it holds its channel,
//! and with it the tree broadcasts of other roots that the root relays, which
//! those roots' own flat broadcasts may be waiting behind: a cycle.
//!
//! So the root keeps a flat broadcast back until every member has its earlier
//! ones. After a board or tree broadcast it asks each member with a FENCE
//! control frame (`msg_id` the flat one's number); the member answers FENCE_OK
//! as soon as it has delivered everything before that number, or later when it
//! has. Neither frame is ever refused for ordering, so nothing waits in a cycle.
//! Meanwhile the flat broadcast and every later one of this root wait here, in
//! order (the gate), their frames not yet on any channel. A member that fails
//! counts as answered. A member below a relay that died answers once it finds
//! the relay dead (see `orphan`): what the relay did not pass on never comes.
//!
//! A best-effort broadcast has no number (a lost one would leave a gap that
//! members wait on forever), so the gate orders it: it is fenced like a flat
//! one, and the broadcasts after it wait until its copies have left the root.

use super::mcast::{BOARD, FLAT};
use super::*;

/// Broadcasts that can wait in the gate (a root's later broadcasts while a flat
/// one waits for its fence); beyond it a send fails with `NoResources`.
pub(super) const GATE_MAX: usize = 64;

/// A root's broadcasts waiting to go, and what the next flat one waits for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gate {
    /// Parent operations (slot, generation), oldest at `head`.
    q: [(u16, u16); GATE_MAX],
    head: u8,
    pub(super) len: u8,
    /// Our newest broadcast that went by board or tree and that some member may not
    /// have yet: a flat one must be fenced.
    need: Option<u32>,
    /// Member side: channels whose root waits for our FENCE_OK.
    pub(super) waits: u16,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            q: [(NONE, 0); GATE_MAX],
            head: 0,
            len: 0,
            need: None,
            waits: 0,
        }
    }
}

impl Gate {
    fn front(&self) -> Option<(u16, u16)> {
        (self.len > 0).then(|| self.q[self.head as usize])
    }

    fn pop(&mut self) {
        self.head = ((self.head as usize + 1) % GATE_MAX) as u8;
        self.len -= 1;
    }

    fn push(&mut self, pi: usize, gen: u16) -> bool {
        if self.len as usize >= GATE_MAX {
            return false;
        }
        let at = (self.head as usize + self.len as usize) % GATE_MAX;
        self.q[at] = (pi as u16, gen);
        self.len += 1;
        true
    }
}

impl<'a> Engine<'a> {
    /// Queues numbered broadcast `pi` (a board op, or a parent whose forwards are
    /// linked through `next` and on no channel) behind the gate.
    pub(super) fn hold(&mut self, pi: usize) {
        let gen = self.ops.table[pi].gen;
        // Room was checked by the caller (`gate_room`).
        let pushed = self.bcast.gate.push(pi, gen);
        debug_assert!(pushed);
    }

    /// Lets the gate's broadcasts go, oldest first, while their fences allow.
    pub(super) fn release_gate(&mut self) {
        while let Some((pi, gen)) = self.bcast.gate.front() {
            let Some(o) = self.ops.table.get(pi as usize).copied() else {
                self.bcast.gate.pop();
                continue;
            };
            if o.gen != gen || o.state != OpState::Active {
                self.bcast.gate.pop();
                continue;
            }
            if !o.tree && o.next == NONE {
                // A best-effort one on its way: members have no number to order
                // it by, so what follows waits until its copies have left.
                return;
            }
            if o.aux == FLAT && self.bcast.gate.need.is_some() {
                if !self.fence_answered(o.bseq) {
                    return;
                }
                self.bcast.gate.need = None;
            }
            if !o.tree {
                // Best-effort: released, but it stays at the front (see above).
                self.queue_forwards(pi as usize);
                continue;
            }
            self.bcast.gate.pop();
            if o.aux == BOARD {
                self.queue_board(pi as usize);
            } else {
                self.queue_forwards(pi as usize);
            }
            self.bcast.released(o.aux, o.bseq);
        }
    }

    /// Puts the forwards linked from parent `pi` (a held broadcast of ours, or
    /// one we relay) on their channels.
    pub(super) fn queue_forwards(&mut self, pi: usize) {
        let mut oi = core::mem::replace(&mut self.ops.table[pi].next, NONE);
        let group = self.cfg.group;
        while let Some(o) = self.ops.table.get(oi as usize).copied() {
            let next = o.next;
            let ci = self
                .addr_of(group, o.dest.node)
                .and_then(|a| self.channel_for(a, group, o.dest.node));
            match ci {
                Ok(ci) => self.enqueue(ci, oi as usize, &o),
                // A member we cannot reach (no channel slot left, or it vanished):
                // its copy fails, and its children get theirs from us.
                Err(_) => {
                    self.reroute(oi as usize);
                    finish_op(&mut self.ops, &mut self.bufs, oi as usize, false);
                }
            }
            oi = next;
        }
    }

    /// Whether every live member has answered the fence for our broadcast `bseq`;
    /// asks those that have not been asked.
    fn fence_answered(&mut self, bseq: u32) -> bool {
        let group = self.cfg.group;
        let mut all = true;
        let me = self.cfg.node;
        for node in (0..self.size).filter(|&n| n != me) {
            let Ok(ci) = self
                .addr_of(group, node)
                .and_then(|a| self.channel_for(a, group, node))
            else {
                all = false;
                continue;
            };
            let ch = &mut self.chans.table[ci];
            if ch.failed || ch.fence_ok == Some(bseq) {
                continue;
            }
            all = false;
            self.chans.work.set(true);
            if ch.fence_asked != Some(bseq) && ch.queue_ctrl(Slot::Fence { bseq }) {
                ch.fence_asked = Some(bseq);
            }
        }
        if all {
            self.stats.fences += 1;
        }
        all
    }

    /// A FENCE from the root on channel `ci`: answer once we have delivered its
    /// broadcasts before `msg_id`. Refused (asked again) only while the control
    /// queue is full.
    pub(super) fn rx_fence(&mut self, ci: usize, repr: &Repr) -> bool {
        let ch = &self.chans.table[ci];
        if ch.peer_group != self.cfg.group {
            self.stats.rx_malformed += 1;
            return true;
        }
        let bseq = repr.msg_id;
        let had = ch.fence_wait.is_some();
        if self.fence_met(ci, bseq) {
            self.chans.work.set(true);
            let ch = &mut self.chans.table[ci];
            if !ch.queue_ctrl(Slot::FenceOk { bseq }) {
                return false;
            }
            ch.fence_wait = None;
        } else {
            self.chans.table[ci].fence_wait = Some(bseq);
            if !had {
                self.bcast.gate.waits += 1;
            }
        }
        true
    }

    /// Whether we have delivered the broadcasts of channel `ci`'s peer before `bseq`.
    fn fence_met(&self, ci: usize, bseq: u32) -> bool {
        let root = self.chans.table[ci].peer_node;
        self.bcast
            .seq
            .get(root as usize)
            .is_none_or(|&want| !seq_lt(want, bseq))
    }

    /// Answers the fences that the broadcasts delivered since have met.
    pub(super) fn answer_fences(&mut self) {
        let mut waits = 0;
        for ci in 0..self.chans.hwm {
            let Some(bseq) = self.chans.table[ci].fence_wait else {
                continue;
            };
            let ch = &self.chans.table[ci];
            if !ch.in_use || ch.failed {
                self.chans.table[ci].fence_wait = None;
                continue;
            }
            self.chans.work.set(true);
            if self.fence_met(ci, bseq) && self.chans.table[ci].queue_ctrl(Slot::FenceOk { bseq }) {
                self.chans.table[ci].fence_wait = None;
            } else {
                waits += 1;
            }
        }
        self.bcast.gate.waits = waits;
    }

    /// A FENCE_OK from a member: it has our broadcasts before `msg_id`.
    pub(super) fn rx_fence_ok(&mut self, ci: usize, repr: &Repr) {
        self.chans.table[ci].fence_ok = Some(repr.msg_id);
    }
}

/// A root's reliable broadcasts and their order: the numbers of the next one
/// and of each root's next to deliver, those waiting for the device's board,
/// and those waiting in the gate.
#[derive(Debug)]
pub(crate) struct Broadcasts<'a> {
    /// See [`Storage::bcast_seq`].
    pub(crate) seq: ManagedSlice<'a, u32>,
    /// Our next reliable broadcast's sequence number.
    pub(crate) next: u32,
    /// Eager buffers the copy of a short broadcast down our tree must leave free.
    pub(crate) keep: usize,
    /// Broadcasts waiting to be written into the device's board, oldest first,
    /// linked through their ops' `next`.
    pub(crate) board_head: u16,
    pub(crate) board_tail: u16,
    /// A multicast packet of ours went down a tree: the later ones must too (see
    /// `packet_board_fits`).
    pub(crate) packet_tree_used: bool,
    /// Our broadcasts waiting for a fence, and fences we owe (see `fence`).
    pub(crate) gate: Gate,
}

impl Broadcasts<'_> {
    /// Records that our broadcast `bseq`, of shape `aux`, has gone its way: one by
    /// board or tree fences the next flat one.
    pub(super) fn released(&mut self, aux: u8, bseq: u32) {
        if aux != FLAT {
            self.gate.need = Some(bseq);
        }
    }

    /// Whether the gate has room for one more broadcast.
    pub(super) fn gate_room(&self) -> bool {
        (self.gate.len as usize) < GATE_MAX
    }

    /// Whether a numbered broadcast going `flat` (or not) must wait in the gate:
    /// something of ours waits there already, or it is flat and an earlier one by
    /// board or tree may still be on its way.
    pub(super) fn must_hold(&self, flat: bool) -> bool {
        self.gate.len > 0 || (flat && self.gate.need.is_some())
    }
}
