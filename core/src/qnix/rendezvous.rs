//! Long sends by rendezvous: request, grant, the put into the granted region,
//! and its end.

use super::*;

/// A receive granted to a rendezvous: peers' puts may land in `[addr, addr + len)`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Armed {
    pub(super) ctx: usize,
    pub(super) src: NodeId,
    pub(super) addr: u64,
    pub(super) len: usize,
    /// The message's whole length (longer than `len`: truncated).
    pub(super) total: usize,
}

/// A send going by rendezvous.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rndv {
    pub(super) ctx: usize,
    pub(super) dest: NodeId,
    pub(super) tag: i32,
    pub(super) addr: u64,
    pub(super) len: usize,
    pub(super) state: RndvState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RndvState {
    /// The request is out; no grant yet.
    Asked,
    /// Granted: put `len` bytes at `addr` of receive context `rctx`.
    Granted { rctx: usize, addr: u64, len: usize },
    /// The put is in flight.
    Putting { rctx: usize },
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    /// Starts send `ctx` by rendezvous to each destination that qualifies: at
    /// least [`RENDEZVOUS_MIN`] bytes in one range, not this process, not dead
    /// (a broadcast or multicast asks each member). Returns the others.
    pub(super) fn ask_rendezvous(
        &mut self,
        ctx: usize,
        to: Vec<NodeId>,
        data: &TxData,
    ) -> Vec<NodeId> {
        let c = &self.ctxs[SEND][ctx];
        let range = match data {
            TxData::Segments(segs) => contiguous(segs),
            TxData::Owned(_) => None,
        };
        let Some((addr, len)) = range.filter(|&(_, n)| n >= RENDEZVOUS_MIN && n == c.len) else {
            return to;
        };
        let (tag, me) = (c.tag, self.ep.engine.config().node);
        let (asked, rest): (Vec<NodeId>, Vec<NodeId>) =
            to.into_iter().partition(|&d| d != me && !self.is_dead(d));
        for dest in asked {
            let h = head(K_RTS, tag, ctx as i32, len as u32);
            self.tx.push_back(TxJob::control(alloc::vec![dest], h));
            self.rndv.push(Rndv {
                ctx,
                dest,
                tag,
                addr,
                len,
                state: RndvState::Asked,
            });
            self.parts[ctx] += 1;
        }
        rest
    }

    /// One part of send `ctx` (a rendezvous, or its packets) ended with `r`; the
    /// send completes with the first error once every part has.
    pub(super) fn part_done(&mut self, ctx: usize, r: Result<(), QxError>) {
        if let Err(e) = r {
            self.part_error[ctx].get_or_insert(e);
        }
        self.parts[ctx] = self.parts[ctx].saturating_sub(1);
        if self.parts[ctx] == 0 {
            let e = self.part_error[ctx].take();
            self.complete_send(ctx, e.map_or(Ok(()), Err));
        }
    }

    /// A rendezvous request from `src`: granted to a posted receive, else kept in
    /// arrival order with the early messages.
    pub(super) fn requested(&mut self, src: NodeId, tag: i32, sid: i32, len: usize) {
        let Some(from) = self.name_of(src).filter(|n| n.ai == self.me.ai) else {
            self.stats.dropped += 1;
            return;
        };
        match self.match_posted(from, tag) {
            Some(ctx) => self.grant(src, ctx, sid, len),
            // A sender has at most `CONTEXTS` sends: more is a flood, not a program.
            // No receive yet: the data comes at once as packets and is kept, as a
            // short message would be, so a sender never waits for a receive.
            None if self.unexpected.len() < CONTEXTS * (self.names.len() + 1) => {
                self.stats.unexpected += 1;
                self.unexpected.push_back(Unexpected {
                    src,
                    tag,
                    data: Vec::new(),
                    rts: Some((sid, len)),
                });
                self.clear_to_send(src, sid, -1, 0, 0);
            }
            None => self.stats.dropped += 1,
        }
    }

    /// Grants receive `ctx` to `src`'s rendezvous `sid` of `len` bytes: its range if
    /// it is one (the sender puts there), else packets addressed to it.
    pub(super) fn grant(&mut self, src: NodeId, ctx: usize, sid: i32, len: usize) {
        if self.is_dead(src) {
            self.complete_recv(ctx, 0, Err(QxError::Dead));
            return;
        }
        let c = &self.ctxs[RECV][ctx];
        let room = len.min(c.len);
        let addr = match contiguous(&c.segs).filter(|_| room > 0) {
            Some((addr, _)) => {
                self.armed.push(Armed {
                    ctx,
                    src,
                    addr,
                    len: room,
                    total: len,
                });
                addr
            }
            None => {
                self.bound[ctx] = Some(src);
                0
            }
        };
        self.clear_to_send(src, sid, ctx as i32, room, addr);
    }

    pub(super) fn clear_to_send(
        &mut self,
        src: NodeId,
        sid: i32,
        rctx: i32,
        room: usize,
        addr: u64,
    ) {
        let mut job = TxJob::control(alloc::vec![src], head(K_CTS, sid, rctx, room as u32));
        job.data = TxData::Owned(addr.to_be_bytes().to_vec());
        job.len = 8;
        self.tx.push_back(job);
    }

    /// The data of kept request `sid` from `src` has all come.
    pub(super) fn early_arrived(&mut self, src: NodeId, sid: i32, data: Vec<u8>) {
        let kept = self
            .unexpected
            .iter()
            .position(|u| u.src == src && u.rts.is_some_and(|r| r.0 == sid));
        let bound = self
            .early_bound
            .iter()
            .position(|&(s, x, _)| s == src && x == sid);
        match (kept, bound) {
            (Some(i), _) => {
                let u = &mut self.unexpected[i];
                u.data = data;
                u.rts = None;
            }
            (None, Some(b)) => {
                self.unexpected_bytes -= data.len();
                let ctx = self.early_bound.swap_remove(b).2;
                self.fill(ctx, &data);
            }
            (None, None) => {
                self.unexpected_bytes -= data.len();
                self.stats.dropped += 1;
            }
        }
    }

    /// The receiver of rendezvous `sid` granted `granted` bytes at `addr` of its
    /// receive `rctx` (address 0: send packets to that receive; `rctx` -1: no receive
    /// there yet).
    pub(super) fn cleared(&mut self, src: NodeId, sid: i32, rctx: i32, granted: u32, addr: u64) {
        let i = self.rndv.iter().position(|r| {
            Ok(r.ctx) == usize::try_from(sid) && r.dest == src && r.state == RndvState::Asked
        });
        let Some(i) = i.filter(|_| (-1..CONTEXTS as i32).contains(&rctx)) else {
            self.stats.dropped += 1;
            return;
        };
        let r = self.rndv[i];
        if rctx >= 0 && addr != 0 {
            let len = (granted as usize).min(r.len);
            self.rndv[i].state = RndvState::Granted {
                rctx: rctx as usize,
                addr,
                len,
            };
            return;
        }
        // Packets instead: to receive `rctx` there, or, with no receive there yet
        // (-1), kept by the receiver in the place of request `sid`.
        let to = if rctx < 0 { -(sid + 1) } else { rctx };
        self.rndv.remove(i);
        let h = head(K_MSG_TO, r.tag, to, r.len as u32);
        let data = TxData::Segments(alloc::vec![(r.addr, r.len)]);
        self.tx
            .push_back(TxJob::message(alloc::vec![src], h, r.len, data, r.ctx));
    }

    /// Starts the puts of granted rendezvous.
    pub(super) fn start_puts(&mut self) -> bool {
        let group = self.ep.engine.config().group;
        let mut busy = false;
        let mut i = 0;
        while i < self.rndv.len() {
            let r = self.rndv[i];
            let RndvState::Granted { rctx, addr, len } = r.state else {
                i += 1;
                continue;
            };
            let mut gate = Gate {
                mem: &mut self.mem,
                armed: &self.armed,
                rung: &mut self.rung,
            };
            let t = Transfer {
                group,
                node: r.dest,
                remote: addr,
                local: r.addr,
                len: len as u32,
                local_bell: token(SEND, r.ctx),
                remote_bell: token(RECV, rctx),
            };
            let started = self.ep.engine.start_put(&mut gate, t);
            match started {
                Ok(()) => {
                    self.rndv[i].state = RndvState::Putting { rctx };
                    busy = true;
                    i += 1;
                }
                Err(Error::NoResources) => i += 1,
                Err(e) => {
                    self.rndv.remove(i);
                    self.end_put(r.ctx, r.dest, rctx, e);
                    busy = true;
                }
            }
        }
        busy
    }

    /// Completes the rendezvous whose bells rang, and those whose puts failed.
    pub(super) fn settle_rendezvous(&mut self) -> bool {
        let mut busy = false;
        while let Some(t) = self.rung.pop() {
            busy = true;
            match untoken(t) {
                Some((SEND, ctx)) => {
                    let i = self
                        .rndv
                        .iter()
                        .position(|r| r.ctx == ctx && matches!(r.state, RndvState::Putting { .. }));
                    if let Some(i) = i {
                        self.rndv.remove(i);
                        self.stats.messages_sent += 1;
                        self.stats.rendezvous += 1;
                        self.part_done(ctx, Ok(()));
                    }
                }
                Some((_, ctx)) => {
                    if let Some(i) = self.armed.iter().position(|a| a.ctx == ctx) {
                        let a = self.armed.swap_remove(i);
                        let r = if a.total > a.len {
                            Err(QxError::Truncated)
                        } else {
                            Ok(())
                        };
                        self.stats.messages_received += 1;
                        self.complete_recv(ctx, a.len, r);
                    }
                }
                None => {}
            }
        }
        while let Some(f) = self.ep.engine.take_rma_failure() {
            busy = true;
            self.put_failed(f);
        }
        busy
    }

    pub(super) fn put_failed(&mut self, f: RmaFailure) {
        // The failure names the put by its local bell.
        let i = self.rndv.iter().position(|r| {
            token(SEND, r.ctx) == f.local_bell
                && r.dest == f.node
                && matches!(r.state, RndvState::Putting { .. })
        });
        let Some(i) = i else {
            return;
        };
        let r = self.rndv.remove(i);
        if let RndvState::Putting { rctx } = r.state {
            self.end_put(r.ctx, r.dest, rctx, f.error);
        }
    }

    /// Send `ctx`'s put to receive `rctx` of `dest` failed with `e`: a refused range
    /// fails the receive too (a dead receiver fails nothing more).
    pub(super) fn end_put(&mut self, ctx: usize, dest: NodeId, rctx: usize, e: Error) {
        let e = match e {
            Error::SendFailure => QxError::Dead,
            Error::BadAddress => QxError::Fault,
            e => e.into(),
        };
        if e != QxError::Dead {
            let h = head(K_FIN, rctx as i32, 0, 0);
            self.tx.push_back(TxJob::control(alloc::vec![dest], h));
        }
        self.part_done(ctx, Err(e));
    }

    /// Rendezvous with dead `n` fail: sends to it, receives granted to it.
    pub(super) fn end_rendezvous_with(&mut self, n: NodeId) {
        let mut k = 0;
        while k < self.rndv.len() {
            if self.rndv[k].dest == n {
                let r = self.rndv.remove(k);
                self.part_done(r.ctx, Err(QxError::Dead));
            } else {
                k += 1;
            }
        }
        let mut k = 0;
        while k < self.armed.len() {
            if self.armed[k].src == n {
                let a = self.armed.swap_remove(k);
                self.complete_recv(a.ctx, 0, Err(QxError::Dead));
            } else {
                k += 1;
            }
        }
        for ctx in 0..CONTEXTS {
            if self.bound[ctx] == Some(n) {
                self.bound[ctx] = None;
                self.complete_recv(ctx, 0, Err(QxError::Dead));
            }
        }
        self.unexpected.retain(|u| u.src != n || u.rts.is_none());
    }
}
