//! The barrier: in device memory where the device has one (the Myrinet-like model's
//! combining tree of flags), else the dissemination barrier: rounds, tokens, probes
//! of the member waited for, and aborts passed along when a member died.

use super::*;

impl<'a> Engine<'a> {
    // -------------------------------------------------------------- barrier

    /// Starts a barrier among all members of this process's group (dissemination
    /// algorithm: `ceil(log2 n)` rounds, one token sent and one awaited per round).
    pub fn start_barrier(&mut self) -> Result<(), Error> {
        if self.bar.active {
            return Err(Error::BarrierInProgress);
        }
        self.bar.active = true;
        self.bar.round = 0;
        self.bar.sent = false;
        self.bar.failed = None;
        self.bar.drained = false;
        if self.cfg.device_barrier && !self.bar.no_device {
            // Others drain into us: our acks go at once while the barrier runs.
            self.chans.flush_acks();
        }
        Ok(())
    }

    /// Whether everything this engine sent has been acknowledged and nothing waits to
    /// go, except to failed peers and to peers refusing it for now (a receiver's
    /// program holding its port or packets decides when those land, maybe only after
    /// the barrier).
    fn sends_landed(&self) -> bool {
        self.bcast.board_head == NONE
            && self.bcast.gate.len == 0
            && self.chans.table[..self.chans.hwm].iter().all(|c| {
                !c.in_use
                    || c.failed
                    || c.held
                    || (c.outstanding() == 0 && c.q_head == NONE && c.ctrl_len == 0)
            })
    }

    /// Chooses between the device's barrier and the frame barrier
    /// ([`Config::device_barrier`]) between barriers; every member must switch at
    /// the same point of its sequence. `BarrierInProgress` while one runs.
    pub fn set_device_barrier(&mut self, on: bool) -> Result<(), Error> {
        if self.bar.active {
            return Err(Error::BarrierInProgress);
        }
        self.cfg.device_barrier = on;
        Ok(())
    }

    /// `Ok(true)` once the barrier started last has completed, `Ok(false)` while it runs,
    /// `Err(SendFailure)` if a peer it needed is dead (`NoResources` if the channel
    /// table has no room for one).
    pub fn barrier_done(&self) -> Result<bool, Error> {
        if let Some(e) = self.bar.failed {
            return Err(e);
        }
        Ok(!self.bar.active)
    }

    /// Ends the running barrier with `e` and tells every member it would still have
    /// sent a token to, so that nobody waits for a barrier that can no longer complete
    /// (each of them passes the abort on in turn: the dissemination pattern reaches all).
    pub(super) fn fail_barrier(&mut self, e: Error) {
        self.bar.failed = Some(e);
        self.bar.active = false;
        let (n, me) = (self.size as u32, self.cfg.node as u32);
        for r in self.bar.round..self.rounds() {
            let peer = ((me + (1u32 << r)) % n) as NodeId;
            // Best effort: a member not reached this way finds out by its own probe.
            let _ = self.queue_barrier_frame(peer, r | BARRIER_ABORT);
        }
    }

    /// Queues a barrier frame (token, probe or abort) for `peer`; false if it cannot
    /// go (no channel, peer failed) or must wait (queue full).
    pub(super) fn queue_barrier_frame(&mut self, peer: NodeId, round: u32) -> Result<bool, Error> {
        let ci = self.live_channel(peer)?;
        self.chans.work.set(true);
        Ok(self.chans.table[ci].queue_ctrl(Slot::Barrier {
            epoch: self.bar.epoch,
            round,
        }))
    }

    /// The channel to member `peer` of our group; `SendFailure` if it failed.
    fn live_channel(&mut self, peer: NodeId) -> Result<usize, Error> {
        let addr = self.addr_of(self.cfg.group, peer)?;
        let ci = self.channel_for(addr, self.cfg.group, peer)?;
        if self.chans.table[ci].failed {
            return Err(Error::SendFailure);
        }
        Ok(ci)
    }

    /// Asks `peer`, the member a barrier round waits for, whether it is alive: a
    /// probe it only acknowledges, unless frames to it are already waiting for
    /// their ack (their retransmissions ask the same; a probe per period on top
    /// would pile up in the window and all be resent each timeout while a member
    /// is still starting). `SendFailure` once it is known dead.
    fn probe_barrier_source(&mut self, peer: NodeId) -> Result<(), Error> {
        let ci = self.live_channel(peer)?;
        let ch = &mut self.chans.table[ci];
        if ch.outstanding() == 0 && ch.ctrl_len == 0 {
            self.chans.work.set(true);
            ch.queue_ctrl(Slot::Barrier {
                epoch: self.bar.epoch,
                round: BARRIER_PROBE,
            });
        }
        Ok(())
    }

    pub(super) fn rounds(&self) -> u32 {
        let n = self.size as u32;
        if n <= 1 {
            0
        } else {
            32 - (n - 1).leading_zeros()
        }
    }

    /// Completes the running barrier.
    fn barrier_complete(&mut self) {
        self.bar.active = false;
        self.bar.epoch = self.bar.epoch.wrapping_add(1);
        self.bar.arrivals = [self.bar.arrivals[1], 0];
        self.bar.aborted = [self.bar.aborted[1], false];
        self.stats.barriers += 1;
    }

    /// Runs the barrier in device memory. `false` when the device has none (every
    /// member's device answers alike, so all of them take the frame path then).
    fn advance_device_barrier<D: Device>(&mut self, now: Instant, dev: &mut D) -> bool {
        let group = self.group(self.cfg.group).map(|g| g.members);
        let Some(members) = group else { return false };
        let addr = |i: u16| members.addr(i);
        let who = BarrierMembers {
            me: self.cfg.node,
            n: self.size,
            addr: &addr,
        };
        let Some(nic) = dev.nic_barrier() else {
            return false;
        };
        match nic.barrier(now, &who) {
            BarrierPoll::Unsupported => false,
            BarrierPoll::Done => {
                self.stats.device_barriers += 1;
                self.barrier_complete();
                true
            }
            BarrierPoll::Pending => {
                // Nobody sends tokens, so nobody can pass an abort along: every
                // waiting member checks every other one itself, and a dead member
                // fails the barrier everywhere within one probe interval.
                if now.saturating_since(self.bar.since) >= self.cfg.barrier_probe {
                    self.bar.since = now;
                    let dead = (0..self.size)
                        .filter(|&i| i != self.cfg.node)
                        .filter_map(|i| members.addr(i))
                        .any(|a| !peer_alive(dev, now, a));
                    // A member that completed this barrier may have exited since the
                    // look above: its release happened before its exit, so one more
                    // look tells a finished barrier from a failed one.
                    // (Asked only then: the call after a `Done` starts the next one.)
                    let mut done = || {
                        dev.nic_barrier()
                            .is_some_and(|b| matches!(b.barrier(now, &who), BarrierPoll::Done))
                    };
                    if dead && done() {
                        self.stats.device_barriers += 1;
                        self.barrier_complete();
                    } else if dead {
                        self.bar.failed = Some(Error::SendFailure);
                        self.bar.active = false;
                    }
                }
                true
            }
        }
    }

    pub(super) fn advance_barrier<D: Device>(&mut self, now: Instant, dev: &mut D) {
        if self.cfg.device_barrier && !self.bar.no_device && self.bar.round == 0 && !self.bar.sent {
            // No token travels behind our earlier frames: arrive once they landed.
            if !self.bar.drained {
                // Our board's frames, too, unless a reader holds them back.
                if !self.sends_landed() || dev.board().is_some_and(|b| b.unread(now)) {
                    return;
                }
                self.bar.drained = true;
            }
            if self.advance_device_barrier(now, dev) {
                return;
            }
            self.bar.no_device = true;
        }
        let rounds = self.rounds();
        while self.bar.active {
            if self.bar.aborted[0] {
                return self.fail_barrier(Error::SendFailure);
            }
            if self.bar.round >= rounds {
                return self.barrier_complete();
            }
            let n = self.size as u32;
            let me = self.cfg.node as u32;
            if !self.bar.sent {
                let peer = ((me + (1u32 << self.bar.round)) % n) as NodeId;
                match self.queue_barrier_frame(peer, self.bar.round) {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => return self.fail_barrier(e),
                }
                self.bar.sent = true;
                self.bar.since = now;
            }
            if self.bar.arrivals[0] & (1u64 << self.bar.round) == 0 {
                // Still waiting: make sure the member we wait for is alive.
                if now.saturating_since(self.bar.since) >= self.cfg.barrier_probe {
                    self.bar.since = now;
                    let source = ((me + n - (1u32 << self.bar.round) % n) % n) as NodeId;
                    if let Err(e) = self.probe_barrier_source(source) {
                        return self.fail_barrier(e);
                    }
                }
                return;
            }
            self.bar.round += 1;
            self.bar.sent = false;
        }
    }
}
