//! Timers and liveness: retransmission, failure by time, probes of silent peers,
//! quiescence and the next wake-up.

use super::*;

/// Doublings of a channel's timeout, from the one its round trips give, that
/// consecutive timeouts may take it to (under `Config::rto_max`).
const BACKOFF_MAX: u32 = 3;

impl<'a> Engine<'a> {
    // ---------------------------------------------------------------- timers

    /// Fires every timer due at `now`: retransmissions, delayed acks, abandoned
    /// best-effort messages, and declares peers dead when retries run out.
    #[inline]
    pub fn handle_timeout(&mut self, now: Instant) {
        self.handle_timeout_vouched(now, &mut |_| false)
    }

    /// [`Engine::handle_timeout`] where `vouched(peer)` tells whether the device has
    /// lately seen the peer's process alive ([`crate::phy::Liveness::peer_vouched`]): such a peer,
    /// silent for the whole peer timeout, computes without calling in and is waited
    /// for another peer timeout rather than declared dead.
    #[inline]
    pub(super) fn handle_timeout_vouched(
        &mut self,
        now: Instant,
        vouched: &mut dyn FnMut(NodeAddr) -> bool,
    ) {
        if now >= self.chans.timer_at {
            let late = now.saturating_since(self.chans.timer_at);
            if late > NOT_RUNNING_AFTER {
                self.resumed(late);
            }
            for ci in 0..self.chans.hwm {
                let ch = &mut self.chans.table[ci];
                if !ch.in_use {
                    continue;
                }
                if ch.ack_at.is_some_and(|t| t <= now) {
                    ch.ack_at = None;
                    ch.ack_now = true;
                    self.chans.work.set(true);
                }
                let Some(t) = ch.rto_at else { continue };
                if t > now {
                    continue;
                }
                if ch.ack_due.is_some() {
                    // The ack kept for this poll may end what the timer waits for.
                    self.take_due_ack(now, ci);
                    if self.chans.table[ci].rto_at.is_none_or(|t| t > now) {
                        continue;
                    }
                }
                let ch = &mut self.chans.table[ci];
                if ch.outstanding() == 0 {
                    ch.rto_at = None;
                    continue;
                }
                self.stats.timeouts += 1;
                self.chans.timer_fired = true;
                let refused = core::mem::take(&mut ch.refused);
                if !refused {
                    ch.retries = ch.retries.saturating_add(1);
                }
                trace!(
                    "{now} node {} timeout to {:?}: una {} nxt {} retries {} refused {refused} rto {}",
                    self.cfg.node,
                    ch.peer,
                    ch.snd_una,
                    ch.snd_nxt,
                    ch.retries,
                    ch.rto
                );
                // Failure is judged by time without a word from the peer, not by rounds;
                // one never heard from may still be starting.
                let since = *ch.silent_since.get_or_insert(now);
                let limit = if ch.met {
                    self.cfg.peer_timeout
                } else {
                    self.cfg.peer_timeout.max(self.cfg.first_contact)
                };
                if now.saturating_since(since) >= limit {
                    if vouched(ch.peer) {
                        ch.silent_since = Some(now);
                        self.stats.peers_vouched += 1;
                    } else {
                        self.fail_channel(ci);
                        continue;
                    }
                }
                let ch = &mut self.chans.table[ci];
                ch.untime();
                if self.caps.reliable && !refused {
                    // Nothing is lost on this link: probe with the oldest frame only.
                    let una = ch.snd_una;
                    let e = ch.slot_mut(una);
                    if !e.sacked {
                        e.resend = true;
                        ch.resend_any = true;
                    }
                } else {
                    ch.mark_all_for_resend();
                }
                self.chans.work.set(true);
                // Back off, but no further than BACKOFF_MAX doublings of the timeout
                // the round trips give: failure is judged by time (`peer_timeout`),
                // and a burst of losses costs one timeout per round of frames it
                // eats, so long timeouts after a short round trip only stretch it.
                let cap = self.cfg.rto_max.min(ch.rto_base.shifted(BACKOFF_MAX));
                ch.rto = if ch.rto.doubled() > cap {
                    cap
                } else {
                    ch.rto.doubled()
                };
                ch.rto_at = Some(now + ch.rto);
                self.chans.timer_at = self.chans.timer_at.min(now + ch.rto);
            }
            self.chans.timer_at = self.chans.next_timer();
        } else {
            debug_assert!(
                self.chans.next_timer() >= self.chans.timer_at,
                "a channel timer was set without `timer_at`"
            );
        }
        if now >= self.orphans.check_at {
            self.watch_senders(now);
        }
        if self.asms.best_effort == 0 {
            return;
        }
        for ai in 0..self.asms.table.len() {
            let a = &self.asms.table[ai];
            if a.used && !a.reliable && a.deadline <= now {
                if let Some(ch) = self.chans.table.get_mut(a.chan as usize) {
                    ch.be_asm = NONE;
                }
                self.deliver(ai, Some(Fault::Lost));
            }
        }
    }

    /// Declares the peer of channel `ci` dead: every send to it fails.
    pub(super) fn fail_channel(&mut self, ci: usize) {
        // What the peer acknowledged before it went has landed: not a failure.
        let heard = self.chans.table[ci].heard_at;
        self.take_due_ack(heard, ci);
        self.stats.peers_failed += 1;
        // Packets have no port to tell: the personality reports the peer, and its
        // packets in flight with it.
        // A peer that said goodbye is not reported: silence is what it promised
        // (a packet lost to it still is, through `packet_send_failed`).
        let packets = !self.bufs.pkts.rx.is_empty();
        let ch = &mut self.chans.table[ci];
        if packets && !ch.failed && !ch.unreported && !ch.left {
            ch.unreported = true;
            self.chans.unreported += 1;
        }
        let ch = &mut self.chans.table[ci];
        ch.failed = true;
        ch.rto_at = None;
        ch.ctrl_len = 0;
        ch.q_head = NONE;
        ch.q_tail = NONE;
        ch.snd_una = ch.snd_nxt;
        ch.inflight.iter_mut().for_each(|e| e.slot = Slot::Free);
        for oi in 0..self.ops.table.len() {
            let o = self.ops.table[oi];
            if o.state == OpState::Active && o.chan == ci as u16 && o.children == 0 {
                self.reroute(oi);
                finish_op(&mut self.ops, &mut self.bufs, oi, false);
                if o.owned {
                    // One-sided: `settle_rma` reports it.
                    continue;
                }
                if o.kind == Kind::Packet {
                    // Reported with the channel (`unreported`).
                    continue;
                }
                // A forward's failure goes to the port the broadcast came in on.
                let port = if o.relay { o.dest.port } else { o.src_port };
                self.port_send_failed(port, o.dest);
            }
        }
        // Short messages the channel kept: their ports hear of it as a detached
        // operation's would.
        let ch = &mut self.chans.table[ci];
        let shorts = core::mem::replace(&mut ch.shorts, [channel::Short::EMPTY; channel::SHORTS]);
        let (group, node) = (ch.peer_group, ch.peer_node);
        for s in shorts.iter().filter(|s| s.used) {
            let port = s.dst_port;
            self.port_send_failed(s.src_port, Dest { group, node, port });
        }
        self.fail_ports_bound_to(ci);
        self.atomics.fail(ci);
        self.fail_gets(ci);
        self.drop_orphans(ci);
        if self.bar.active && self.chans.table[ci].peer_group == self.cfg.group {
            // The member we send to or wait for in this round is gone.
            let peer = self.chans.table[ci].peer_node as u32;
            let n = self.size as u32;
            let me = self.cfg.node as u32;
            let step = (1u32 << self.bar.round.min(31)) % n.max(1);
            if peer == (me + step) % n || peer == (me + n - step) % n {
                self.fail_barrier(Error::SendFailure);
            }
        }
    }

    /// A send through `port` to `dest` failed with its peer: the port is told, and
    /// its semaphore marked (the scan of `fail_ports_bound_to` does not tell it
    /// again).
    fn port_send_failed(&mut self, port: PortId, dest: Dest) {
        self.notify_send_failure(port, dest);
        let sem = self
            .ports
            .table
            .get(port as usize)
            .filter(|p| p.input)
            .map(|p| p.sem);
        if let Some(s) = sem.and_then(|s| self.ports.sems.get_mut(s as usize)) {
            s.peer_dead = true;
        }
    }

    /// Tells every input port bound to channel `ci`'s (dead) peer, directly or through a
    /// broadcast binding to its group: `SENDFAILURE` on the port, and its semaphore
    /// marked so that a wait for messages that cannot come ends.
    pub(super) fn fail_ports_bound_to(&mut self, ci: usize) {
        let (group, node) = (
            self.chans.table[ci].peer_group,
            self.chans.table[ci].peer_node,
        );
        for port in 0..self.ports.table.len() {
            let p = &self.ports.table[port];
            let bound = p.input
                && p.dest
                    .is_some_and(|d| d.group == group && (d.node == node || d.node == BROADCAST));
            if !bound {
                continue;
            }
            let (sem, dest) = (p.sem as usize, p.dest);
            if let Some(s) = self.ports.sems.get_mut(sem) {
                if s.peer_dead {
                    continue; // told already (another port on this semaphore)
                }
                s.peer_dead = true;
            }
            if let Some(d) = dest {
                self.notify_send_failure(port as PortId, d);
            }
        }
    }

    /// Probes, at most once per `keepalive`, every silent peer that an input port
    /// counting on semaphore `sem` is bound to: a rank waiting for a message from a
    /// peer that died then sees `SENDFAILURE` after `peer_timeout` (at once on a
    /// device that knows) instead of waiting forever.
    pub fn keepalive(&mut self, now: Instant, sem: u16) {
        let me = (self.cfg.group, self.cfg.node);
        for port in 0..self.ports.table.len() {
            let p = &self.ports.table[port];
            let Some(d) = p.dest.filter(|_| p.input && p.sem == sem) else {
                continue;
            };
            let Some(g) = self.group(d.group).copied() else {
                continue;
            };
            let nodes = if d.node == BROADCAST {
                0..g.members.len()
            } else {
                d.node..d.node.saturating_add(1)
            };
            for node in nodes.filter(|&n| (d.group, n) != me) {
                self.probe_if_silent(now, d.group, node);
            }
        }
    }

    /// Probes, at most once per `keepalive`, every silent member of this process's
    /// group: for a personality whose receivers cannot tell whom they wait for (LFC),
    /// so that a member that died becomes an error (`take_packet_failure`) instead of
    /// a wait that never ends.
    pub(crate) fn keepalive_all(&mut self, now: Instant) {
        let (group, me) = (self.cfg.group, self.cfg.node);
        for node in (0..self.size).filter(|&n| n != me) {
            if !self.peer_left(node) {
                self.probe_if_silent(now, group, node);
            }
        }
    }

    /// Tells every other member of this process's group that it is leaving on
    /// purpose (LFC's `lfc_exit`): a reliable BYE each, which the leaver's last
    /// polls see acknowledged. A member that got it stops probing this process
    /// (`Engine::keepalive_all`), does not report its silence as a death, and
    /// refuses packets to it ([`Error::PeerLeft`]). Queues what the control
    /// queues take; `true` once every goodbye is queued (call again until then).
    pub fn say_goodbye(&mut self) -> bool {
        let (group, me) = (self.cfg.group, self.cfg.node);
        let mut all = true;
        for node in (0..self.size).filter(|&n| n != me) {
            let Ok(ci) = self
                .addr_of(group, node)
                .and_then(|a| self.channel_for(a, group, node))
            else {
                continue;
            };
            let ch = &mut self.chans.table[ci];
            if ch.failed || ch.left || ch.bye_queued {
                continue;
            }
            if ch.queue_ctrl(Slot::Bye) {
                ch.bye_queued = true;
                self.chans.work.set(true);
            } else {
                all = false;
            }
        }
        all
    }

    /// Whether instance `node` of this process's group said goodbye
    /// ([`Engine::say_goodbye`]).
    #[inline]
    pub(crate) fn peer_left(&self, node: NodeId) -> bool {
        if self.stats.peers_left == 0 {
            return false;
        }
        self.addr_of(self.cfg.group, node)
            .ok()
            .and_then(|a| self.chans.peer_map.get(a.0 as usize).copied())
            .and_then(|c| self.chans.table.get(c as usize))
            .is_some_and(|c| c.in_use && c.left)
    }

    pub(super) fn probe_if_silent(&mut self, now: Instant, group: GroupId, node: NodeId) {
        let Ok(addr) = self.addr_of(group, node) else {
            return;
        };
        let Ok(ci) = self.channel_for(addr, group, node) else {
            return;
        };
        let ch = &mut self.chans.table[ci];
        let idle = ch.outstanding() == 0 && ch.ctrl_len == 0 && ch.q_head == NONE;
        if ch.failed || !idle || now.saturating_since(ch.heard_at) < self.cfg.keepalive {
            return;
        }
        // A probe is a reliable barrier frame the peer only acknowledges.
        ch.ctrl[0] = Slot::Barrier {
            epoch: self.bar.epoch,
            round: BARRIER_PROBE,
        };
        ch.ctrl_len = 1;
        ch.heard_at = now;
        self.chans.work.set(true);
    }

    /// Sends every ack held back (delayed to ride on data) at the next transmit.
    pub(crate) fn flush_acks(&mut self) {
        self.chans.flush_acks();
    }

    /// True when nothing is in flight: no send running, no frame unacknowledged, no
    /// ack owed, no barrier running (failed peers and peers that said goodbye
    /// excepted: nothing more will happen there).
    pub fn is_quiescent(&self) -> bool {
        let ops_idle = self
            .ops
            .iter()
            .all(|o| o.state != OpState::Active || o.chan_gone(&self.chans));
        let chans_idle = self.chans.table[..self.chans.hwm].iter().all(|c| {
            !c.in_use
                || c.failed
                || c.left
                || (c.outstanding() == 0 && !c.ack_now && c.ack_at.is_none() && c.ctrl_len == 0)
        });
        ops_idle
            && chans_idle
            && !self.bar.active
            && self.outbox.len == 0
            && !self.atomics.waiting()
    }

    /// Asks the device about every peer still owed an ack; a peer the device knows
    /// to be dead fails at once instead of after the whole back-off.
    pub(super) fn check_liveness<D: Device>(&mut self, now: Instant, dev: &mut D) {
        for ci in 0..self.chans.hwm {
            let ch = &self.chans.table[ci];
            if ch.in_use && !ch.failed && ch.outstanding() > 0 && !peer_alive(dev, now, ch.peer) {
                self.fail_channel(ci);
            }
        }
    }

    /// Whether a queued operation on `ch` could send a new frame now (a relayed
    /// long broadcast waiting for its next chunk cannot).
    fn sendable(&self, ch: &Channel) -> bool {
        let mut oi = ch.q_head;
        while let Some(op) = self.ops.table.get(oi as usize) {
            let waiting = self
                .bufs
                .streams
                .get(op.stream as usize)
                .is_some_and(|st| st.ready_bytes() <= op.framed);
            if !waiting {
                return !op.reliable || ch.can_send_new();
            }
            oi = op.next;
        }
        false
    }

    /// When the engine next needs a poll without a frame arriving: `Some(now)` if it
    /// has frames it could send right away.
    pub fn poll_at(&self, now: Instant) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut min = |t: Instant| at = Some(at.map_or(t, |a| a.min(t)));
        // A cut forward waiting to end (see `orphan`) waits for acks or room in
        // a control queue, each of which comes with a poll.
        // Kept acks are taken at the next poll.
        // So is a delivering poll's upkeep.
        if self.outbox.len > 0 || self.chans.acks_due > 0 || self.progress.upkeep_due {
            min(now);
        }
        // Senders of unfinished messages and relays above owed fences are watched.
        let partial = self.asms.table[..self.asms.hwm.min(self.asms.table.len())]
            .iter()
            .any(|a| a.used && a.reliable);
        if partial || self.bcast.gate.waits > 0 {
            min(self.orphans.check_at.max(now));
        }
        for ch in self.chans.table.iter().filter(|c| c.in_use && !c.failed) {
            if ch.ack_now || ch.resend_any || (ch.ctrl_len > 0 && ch.can_send_new()) {
                min(now);
            }
            if self.sendable(ch) {
                min(now);
            }
            if let Some(t) = ch.rto_at {
                min(t);
            }
            if let Some(t) = ch.ack_at {
                min(t);
            }
        }
        for a in self.asms.table.iter().filter(|a| a.used && !a.reliable) {
            min(a.deadline);
        }
        // A started barrier queues its token at the next poll (the device's barrier
        // is polled until it ends); then the member waited for is probed.
        if self.bar.active {
            min(if self.bar.sent {
                self.bar.since + self.cfg.barrier_probe
            } else {
                now
            });
        }
        at
    }
}

/// Bytes of a beacon frame with a tag ([`beacon_frame`]); without one, the header.
pub const BEACON_LEN: usize = wire::HEADER_LEN + wire::TAG_LEN;

/// A beacon: an empty acknowledgement (no `HAS_ACK`, so it acknowledges nothing)
/// from the instance of `cfg` to instance `node` of `group`, under the job's key
/// and tag. The receiving engine takes it like any valid frame from that peer, as a
/// sign of life (the peer is not silent), and does nothing else with it. A host
/// sends it from a helper while its program computes without calling in, so that
/// peers waiting on the program (an ack it owes, a barrier it has not reached) wait
/// rather than take it for dead; a process that died sends none. `count` numbers
/// it (1, 2, ...: in `msg_id`, under the tag): a peer counts only a beacon newer
/// than the last it heard, so a recorded one replayed keeps nobody alive. `buf`
/// must hold [`BEACON_LEN`] bytes.
pub fn beacon_frame(
    cfg: &Config,
    group: GroupId,
    node: NodeId,
    count: u32,
    buf: &mut [u8],
) -> Result<usize, wire::WireError> {
    let repr = Repr {
        kind: Kind::Ack,
        flags: Flags::empty(),
        job_key: cfg.job_key,
        ends: Endpoints {
            src_group: cfg.group,
            src_node: cfg.node,
            src_port: 0,
            dst_group: group,
            dst_node: node,
            dst_port: 0,
        },
        seq: 0,
        ack: None,
        msg_id: count,
        offset: 0,
        total_len: 0,
        payload_len: 0,
    };
    repr.emit_frame(buf, &[], false, cfg.auth_key.as_ref())
}
