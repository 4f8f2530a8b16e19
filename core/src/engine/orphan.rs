//! Messages whose sender died half-way.
//!
//! A reliable message is stored into its port as its frames come, and holds the
//! port (and, at a relay, the eager buffers and forwards of a broadcast) until
//! the last one. If its sender dies first, the rest never comes: the port would
//! stay busy for good, and a broadcast port takes every root's messages. So a
//! receiver watches the senders of its unfinished messages: one silent for
//! `keepalive` is probed, and once it is declared dead ([`Engine::fail_channel`])
//! each of its unfinished messages is handed to its port as lost
//! ([`Fault::Lost`], with what had come) and the port takes the next.
//!
//! A relay passes a long broadcast on chunk by chunk, so its children may hold
//! part of it too. It stops the forwards there, and once the frames already sent
//! are acknowledged tells each child with a CONTROL `ABORT` frame (`msg_id` the
//! forward's message on that channel); the child drops the message the same way,
//! and passes the abort on to its own children.

use super::*;

impl<'a> Engine<'a> {
    /// Probes the senders of unfinished reliable messages that have been silent
    /// for `keepalive`; `handle_timeout` calls it once `orphan_check_at` is due,
    /// so at most once per `keepalive`.
    pub(super) fn watch_senders(&mut self, now: Instant) {
        self.orphans.check_at = now + self.cfg.keepalive;
        if self.bcast.gate.waits > 0 {
            self.give_up_fences(now);
        }
        for ai in 0..self.asms.hwm {
            let a = self.asms.table[ai];
            if !a.used || !a.reliable {
                continue;
            }
            let Some(ch) = self.chans.table.get(a.chan as usize) else {
                continue;
            };
            let (group, node) = (ch.peer_group, ch.peer_node);
            self.probe_if_silent(now, group, node);
        }
    }

    /// Fences we owe a root whose broadcasts come through a member that died
    /// (a relay above us in its tree): what that relay had not passed on will
    /// never come, so we answer as if it had. Relays above us are probed.
    fn give_up_fences(&mut self, now: Instant) {
        let Some(tree) = self.cfg.bcast_tree else {
            return;
        };
        let (me, group) = (self.cfg.node, self.cfg.group);
        for ci in 0..self.chans.hwm {
            let ch = &self.chans.table[ci];
            let Some(bseq) = ch.fence_wait.filter(|_| ch.in_use && !ch.failed) else {
                continue;
            };
            let root = ch.peer_node;
            let mut x = me;
            let mut dead = false;
            while let Some(p) = mcast::tree_parent(self.size, root, x, tree) {
                if p == root {
                    break;
                }
                self.probe_if_silent(now, group, p);
                let pc = self
                    .addr_of(group, p)
                    .ok()
                    .and_then(|a| self.chans.peer_map.get(a.0 as usize).copied());
                if pc
                    .and_then(|c| self.chans.table.get(c as usize))
                    .is_some_and(|c| c.failed)
                {
                    dead = true;
                    break;
                }
                x = p;
            }
            self.chans.work.set(true);
            if dead && self.chans.table[ci].queue_ctrl(Slot::FenceOk { bseq }) {
                self.chans.table[ci].fence_wait = None;
                self.bcast.gate.waits = self.bcast.gate.waits.saturating_sub(1);
                self.stats.fences_given_up += 1;
            }
        }
    }

    /// Channel `ci`'s peer is dead: its messages are handed over in order, the
    /// unfinished ones as lost, and the forwards of those we relay are stopped.
    pub(super) fn drop_orphans(&mut self, ci: usize) {
        loop {
            let want = self.chans.table[ci].next_deliver;
            let Some(ai) = self.asms.find(ci, want, true) else {
                break;
            };
            let a = self.asms.table[ai];
            if a.received >= a.total && a.rma == RMA_NONE {
                self.chans.table[ci].next_deliver = want.wrapping_add(1);
                self.deliver(ai, None);
            } else {
                self.drop_message(ai);
            }
        }
        for ai in 0..self.asms.hwm {
            let a = self.asms.table[ai];
            if a.used && a.reliable && a.chan == ci as u16 {
                self.drop_message(ai);
            }
        }
    }

    /// Hands unfinished message `ai` to its port as lost (a put's or get reply's
    /// is dropped: `fail_gets` and the initiator report those), stopping its
    /// forwards.
    fn drop_message(&mut self, ai: usize) {
        let a = self.asms.table[ai];
        if a.relay != NONE {
            self.stop_forwards(a.relay, a.relay_gen);
            self.asms.table[ai].relay = NONE;
        }
        self.stats.rx_orphaned += 1;
        if a.rma != RMA_NONE {
            self.asms.table[ai].used = false;
            return;
        }
        if let Some(ch) = self.chans.table.get_mut(a.chan as usize) {
            if ch.next_deliver == a.msg_id {
                ch.next_deliver = a.msg_id.wrapping_add(1);
            }
        }
        self.deliver(ai, Some(Fault::Lost));
    }

    /// Stops the forwards of relayed broadcast `pi`: those not on a channel yet
    /// end now; those that sent frames send no more, and end (with an `ABORT` to
    /// their child) once those are acknowledged.
    fn stop_forwards(&mut self, pi: u16, gen: u16) {
        let Some(p) = self
            .ops
            .get(pi as usize)
            .copied()
            .filter(|p| p.gen == gen && p.state == OpState::Active)
        else {
            return;
        };
        // Not queued yet: linked from the parent.
        let mut oi = core::mem::replace(&mut self.ops.table[pi as usize].next, NONE);
        while let Some(o) = self.ops.table.get(oi as usize).copied() {
            finish_op(&mut self.ops, &mut self.bufs, oi as usize, false);
            oi = o.next;
        }
        let Some(st) = self.bufs.streams.get_mut(p.stream as usize) else {
            return;
        };
        st.cut = true;
        let st = *st;
        for &(k, kgen) in st.kids() {
            let live = self
                .ops
                .get(k as usize)
                .is_some_and(|o| o.gen == kgen && o.state == OpState::Active && o.chan != NONE);
            if live {
                self.cut_forward(k as usize);
            }
        }
    }

    /// Forward `oi`, on a channel, sends nothing more: taken off the channel's
    /// queue, its message ends at what it has sent, and its child is told.
    fn cut_forward(&mut self, oi: usize) {
        let ci = self.ops.table[oi].chan as usize;
        let ch = &mut self.chans.table[ci];
        // Unlink it from the queue of operations still sending.
        let (mut prev, mut cur) = (NONE, ch.q_head);
        while cur != NONE && cur as usize != oi {
            prev = cur;
            cur = self.ops.table[cur as usize].next;
        }
        if cur != NONE {
            let next = self.ops.table[oi].next;
            if prev == NONE {
                ch.q_head = next;
            } else {
                self.ops.table[prev as usize].next = next;
            }
            if ch.q_tail == cur {
                ch.q_tail = prev;
            }
        }
        let o = &mut self.ops.table[oi];
        o.total = o.framed;
        o.started = true;
        if o.unacked == 0 {
            self.end_cut_forward(oi);
        }
    }

    /// A cut forward's frames are all acknowledged: it ends, and its child learns
    /// that the rest of the message will not come.
    pub(super) fn end_cut_forward(&mut self, oi: usize) {
        let o = self.ops.table[oi];
        // A child takes an ABORT only for its next message, and one it refused
        // would hold the window that an earlier message's frames need: it goes once
        // every earlier message on the channel has been acknowledged, so has landed.
        let earlier = self.ops.table.iter().any(|p| {
            p.state == OpState::Active
                && p.reliable
                && p.chan == o.chan
                && seq_lt(p.msg_id, o.msg_id)
        });
        if earlier {
            self.orphans.cuts = true;
            return;
        }
        if let Some(ch) = self.chans.table.get_mut(o.chan as usize) {
            self.chans.work.set(true);
            if !ch.failed && !ch.queue_ctrl(Slot::Abort { msg: o.msg_id }) {
                // Room comes as control frames leave: tried again next pass.
                self.orphans.cuts = true;
                return;
            }
        }
        finish_op(&mut self.ops, &mut self.bufs, oi, false);
    }

    /// Ends the cut forwards whose frames are all acknowledged.
    pub(super) fn end_cuts(&mut self) {
        self.orphans.cuts = false;
        for oi in 0..self.ops.table.len() {
            let o = &self.ops.table[oi];
            let forward = o.parent != NONE && o.chan != NONE;
            if forward && o.state == OpState::Active && o.unacked == 0 && o.cut(&self.bufs) {
                self.end_cut_forward(oi);
            }
        }
    }

    /// An `ABORT` from channel `ci`'s peer: the rest of its message `msg_id` will not
    /// come. Refused (asked again) while an earlier message of the channel is still
    /// unfinished, or its control queue is full.
    pub(super) fn rx_abort(&mut self, ci: usize, repr: &Repr) -> bool {
        let msg = repr.msg_id;
        let (deliver, reserve) = (
            self.chans.table[ci].next_deliver,
            self.chans.table[ci].next_reserve,
        );
        if seq_lt(msg, deliver) {
            return true; // handed over already
        }
        if msg != deliver {
            return false;
        }
        if let Some(ai) = self.asms.find(ci, msg, true) {
            self.drop_message(ai);
        } else if reserve == msg {
            // None of it came: it is skipped.
            let ch = &mut self.chans.table[ci];
            ch.next_reserve = msg.wrapping_add(1);
            ch.next_deliver = msg.wrapping_add(1);
            self.stats.rx_orphaned += 1;
        }
        true
    }
}

/// When the senders of unfinished messages are next looked at, and whether a
/// forward cut short may be ready to end.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Orphans {
    pub(crate) check_at: Instant,
    pub(crate) cuts: bool,
}
