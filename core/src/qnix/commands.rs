//! The posting calls: argument checks and the command queue.

use super::*;

#[derive(Debug)]
pub(super) enum Command {
    Send {
        ctx: usize,
        to: Vec<NodeId>,
        data: TxData,
        /// A broadcast or multicast (which may go through the board).
        fan: bool,
    },
    Receive {
        ctx: usize,
    },
    Join {
        ctx: usize,
        group: i32,
        size: i32,
    },
    Barrier {
        ctx: usize,
        group: usize,
    },
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    pub(super) fn post(&mut self, cmd: Command) {
        while self.queue.len() >= QUEUE {
            let busy = self.step();
            self.idle_step(busy);
        }
        self.queue.push_back(cmd);
        self.post_step();
    }

    /// What a posting call runs of the NIC step: the queue consumed and what that
    /// made put on the wire, without a look at the receive side (as GAMMA's send
    /// leaves before its receive poll): arrivals wait for the next full step, in a
    /// `poll_for_*` call or the NIC thread. Jobs the engine could not take (its
    /// window full) get a full step, whose acks make room, and so does every
    /// [`POSTS_PER_STEP`]th post in a row: a program that spins on a doorbell
    /// posting only, without the NIC thread, still sees its messages arrive.
    pub(super) fn post_step(&mut self) {
        self.posts_since_step += 1;
        self.consume_queue();
        // A barrier starts now: its first token (or its arrival in NIC memory)
        // need not wait for the caller's first poll.
        self.advance_barriers();
        self.send_out(None);
        if !self.tx.is_empty() || self.posts_since_step >= POSTS_PER_STEP {
            self.step();
        }
    }

    /// The data a send of `ctx` carries: a short send's bytes are copied now, a
    /// long send's segments are checked now and read by the NIC step.
    pub(super) fn prepare_send(&mut self, ctx: usize, short: bool) -> Result<TxData, QxError> {
        self.idle(SEND, ctx)?;
        let len = self.ctxs[SEND][ctx].len;
        if short && len > SHORT_MAX {
            return Err(QxError::TooLong);
        }
        if let Region::Data(d) = &self.ctxs[SEND][ctx].region {
            let d = d.get(..len).ok_or(QxError::Invalid)?;
            let mut out = self.spares.bytes();
            out.extend_from_slice(d);
            return Ok(TxData::Owned(out));
        }
        let region = core::mem::take(&mut self.ctxs[SEND][ctx].region);
        let segs = self.resolve(&region, len, Access::Read);
        self.ctxs[SEND][ctx].region = region;
        let segs = segs?;
        if !short {
            return Ok(TxData::Segments(segs));
        }
        let mut d = self.spares.bytes();
        d.resize(len, 0);
        let r = read_at(&mut self.mem, &segs, 0, &mut d);
        self.spares.give_segs(segs);
        if r.is_err() {
            self.spares.give_bytes(d);
            return Err(QxError::Fault);
        }
        Ok(TxData::Owned(d))
    }

    pub(super) fn post_send(
        &mut self,
        ctx: usize,
        short: bool,
        to: Vec<NodeId>,
        fan: bool,
    ) -> Result<(), QxError> {
        let data = self.prepare_send(ctx, short)?;
        self.set_bell(SEND, ctx, BUSY);
        self.post(Command::Send { ctx, to, data, fan });
        Ok(())
    }

    /// `qx_send`: sends the context's data to its receiver straight out of its
    /// region, which must stay as it is until the send completes.
    pub fn send(&mut self, ctx: usize) -> Result<(), QxError> {
        let r = self.unicast(ctx, false);
        self.refused(SEND, ctx, r)
    }

    /// `qx_send_short`: copies the data (at most [`SHORT_MAX`] bytes) now and sends it.
    pub fn send_short(&mut self, ctx: usize) -> Result<(), QxError> {
        let r = self.unicast(ctx, true);
        self.refused(SEND, ctx, r)
    }

    pub(super) fn unicast(&mut self, ctx: usize, short: bool) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let to = self.lookup(self.ctxs[SEND][ctx].peer)?;
        if short && self.send_short_now(ctx, to) {
            return Ok(());
        }
        let mut dests = self.spares.nodes();
        dests.push(to);
        self.post_send(ctx, short, dests, false)
    }

    /// `qx_send_short` of idle context `ctx` that holds its data, to another live
    /// process `to`, when nothing posted before it waits in the command queue or
    /// the transmit queue: what posting it and the NIC step would do (barriers
    /// and granted puts advanced first, then one packet launched and the send
    /// completed), without the command, its copy of the data and its transmit
    /// job. `false`, with nothing changed but those advances, where that does not
    /// apply or the packet could not be launched: the command queue takes it then.
    pub(super) fn send_short_now(&mut self, ctx: usize, to: NodeId) -> bool {
        let me = self.ep.engine.config().node;
        if !self.queue.is_empty()
            || !self.tx.is_empty()
            || to == me
            || self.dead.get(to as usize).copied().unwrap_or(true)
        {
            return false;
        }
        let c = &self.ctxs[SEND][ctx];
        let (len, tag) = (c.len, c.tag);
        let Region::Data(d) = &c.region else {
            return false;
        };
        if len > SHORT_MAX || d.len() < len || HEAD + len > self.ep.engine.packet_size() {
            return false;
        }
        // In the step's order: what a barrier or a grant sends goes first.
        self.advance_barriers();
        let started = self.start_puts();
        if !self.tx.is_empty() {
            return false;
        }
        let Ok(id) = self.ep.engine.packet_alloc() else {
            return false;
        };
        let filled = match (&self.ctxs[SEND][ctx].region, self.ep.engine.packet_mut(id)) {
            (Region::Data(d), Some(p)) => {
                p[..HEAD].copy_from_slice(&head(K_MSG, tag, 0, len as u32));
                // What it must not overtake at the receiver (see `goes_once`).
                p[1..3].copy_from_slice(&self.bc_sent.to_be_bytes());
                p[HEAD..HEAD + len].copy_from_slice(&d[..len]);
                true
            }
            _ => false,
        };
        if !filled {
            let _ = self.ep.engine.packet_free(id);
            return false;
        }
        let now = self.ep.clock.now();
        let left = match self
            .ep
            .engine
            .launch_unicast_on(now, &mut self.ep.dev, id, to, HEAD + len)
        {
            Ok(left) => left,
            Err(_) => {
                let _ = self.ep.engine.packet_free(id);
                return false;
            }
        };
        let s = &mut self.sent_to[to as usize];
        *s = s.wrapping_add(1);
        self.posts_since_step += 1;
        self.stats.commands += 1;
        self.stats.messages_sent += 1;
        self.set_bell(SEND, ctx, BUSY);
        self.parts[ctx] += 1;
        self.part_done(ctx, Ok(()));
        if !left || started {
            self.engine_transmit(now);
        }
        self.ep.dev.flush(now);
        if self.posts_since_step >= POSTS_PER_STEP {
            self.step();
        }
        true
    }

    /// `qx_broadcast`: sends to every member of formed group `group` but this process.
    pub fn broadcast(&mut self, ctx: usize, group: i32) -> Result<(), QxError> {
        let r = self.bcast(ctx, group, false);
        self.refused(SEND, ctx, r)
    }

    /// `qx_broadcast_short`.
    pub fn broadcast_short(&mut self, ctx: usize, group: i32) -> Result<(), QxError> {
        let r = self.bcast(ctx, group, true);
        self.refused(SEND, ctx, r)
    }

    pub(super) fn bcast(&mut self, ctx: usize, group: i32, short: bool) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let gi = self.formed_group(group)?;
        let me = self.ep.engine.config().node;
        let mut to = self.spares.nodes();
        to.extend(
            self.groups[gi]
                .members
                .iter()
                .map(|m| m.1)
                .filter(|&n| n != me),
        );
        self.post_send(ctx, short, to, true)
    }

    /// `qx_multicast`: sends to each process of `to` (of this application).
    pub fn multicast(&mut self, ctx: usize, to: &[Name]) -> Result<(), QxError> {
        let r = self.mcast(ctx, to, false);
        self.refused(SEND, ctx, r)
    }

    /// `qx_multicast_short`.
    pub fn multicast_short(&mut self, ctx: usize, to: &[Name]) -> Result<(), QxError> {
        let r = self.mcast(ctx, to, true);
        self.refused(SEND, ctx, r)
    }

    pub(super) fn mcast(&mut self, ctx: usize, to: &[Name], short: bool) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        if to.is_empty() {
            return Err(QxError::Invalid);
        }
        let mut nodes = self.spares.nodes();
        for &n in to {
            match self.lookup(n) {
                Ok(d) => nodes.push(d),
                Err(e) => {
                    give_spare(&mut self.spares.nodes, nodes);
                    return Err(e);
                }
            }
        }
        self.post_send(ctx, short, nodes, true)
    }

    /// `qx_receive`: the next message from the context's sender with its tag lands
    /// in its region (messages match receives in the order both were posted).
    pub fn receive(&mut self, ctx: usize) -> Result<(), QxError> {
        let r = self.post_receive(ctx);
        self.refused(RECV, ctx, r)
    }

    pub(super) fn post_receive(&mut self, ctx: usize) -> Result<(), QxError> {
        self.idle(RECV, ctx)?;
        self.lookup(self.ctxs[RECV][ctx].peer)?;
        let len = self.ctxs[RECV][ctx].len;
        let region = core::mem::take(&mut self.ctxs[RECV][ctx].region);
        let segs = self.resolve(&region, len, Access::Write);
        let c = &mut self.ctxs[RECV][ctx];
        c.region = region;
        let old = core::mem::replace(&mut c.segs, segs?);
        self.spares.give_segs(old);
        self.set_bell(RECV, ctx, BUSY);
        self.post(Command::Receive { ctx });
        Ok(())
    }

    /// `qx_join_group`: this process joins group `group` of `size` processes of its
    /// application; the context's doorbell rings when all have joined.
    pub fn join_group(&mut self, ctx: usize, group: i32, size: i32) -> Result<(), QxError> {
        let r = self.post_join(ctx, group, size);
        self.refused(SEND, ctx, r)
    }

    pub(super) fn post_join(&mut self, ctx: usize, group: i32, size: i32) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        if group == self.me.ai {
            return Err(QxError::Exists);
        }
        if size < 1 || size > self.app_size {
            return Err(QxError::Size);
        }
        let me = self.ep.engine.config().node;
        if self
            .groups
            .iter()
            .any(|g| g.name == group && g.members.iter().any(|m| m.1 == me))
        {
            return Err(QxError::Exists);
        }
        self.set_bell(SEND, ctx, BUSY);
        self.post(Command::Join { ctx, group, size });
        Ok(())
    }

    /// `qx_barrier`: the context's doorbell rings once every member of formed group
    /// `group` (of `size`, which must match) has reached the barrier.
    pub fn barrier(&mut self, ctx: usize, group: i32, size: i32) -> Result<(), QxError> {
        let r = self.post_barrier(ctx, group, size);
        self.refused(SEND, ctx, r)
    }

    pub(super) fn post_barrier(
        &mut self,
        ctx: usize,
        group: i32,
        size: i32,
    ) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let gi = self.formed_group(group)?;
        let me = self.ep.engine.config().node;
        let g = &self.groups[gi];
        if g.size != Some(size) {
            return Err(QxError::Size);
        }
        if !g.members.iter().any(|m| m.1 == me) {
            return Err(QxError::Unknown);
        }
        if g.barrier_active {
            return Err(QxError::Busy);
        }
        self.groups[gi].barrier_active = true;
        self.set_bell(SEND, ctx, BUSY);
        self.post(Command::Barrier { ctx, group: gi });
        Ok(())
    }
}
