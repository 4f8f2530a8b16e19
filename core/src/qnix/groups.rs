//! Groups: joining, and barriers (dissemination, or the engine's barrier).

use super::*;

#[derive(Debug, Default)]
pub(super) struct GroupState {
    pub(super) name: i32,
    /// Declared size (from the first join seen).
    pub(super) size: Option<i32>,
    /// Members as (PI, endpoint), in PI order.
    pub(super) members: Vec<(i32, NodeId)>,
    pub(super) bad: bool,
    /// Barrier tokens received, per round.
    pub(super) tokens: Vec<u32>,
    /// Barriers this process has started on the group.
    pub(super) epoch: u32,
    pub(super) barrier_active: bool,
}

impl GroupState {
    pub(super) fn formed(&self) -> bool {
        !self.bad && self.size == Some(self.members.len() as i32)
    }
}

#[derive(Debug)]
pub(super) struct BarrierOp {
    pub(super) ctx: usize,
    pub(super) group: usize,
    pub(super) epoch: u32,
    pub(super) round: u32,
    /// A token for `round` is queued; for a barrier on the engine: it is started.
    pub(super) sent: bool,
    /// Run as the engine's barrier (see [`Qnix::barrier`]).
    pub(super) on_engine: bool,
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    pub(super) fn formed_group(&self, name: i32) -> Result<usize, QxError> {
        self.groups
            .iter()
            .position(|g| g.name == name && g.formed())
            .ok_or(QxError::Unknown)
    }

    // ------------------------------------------------------------ memory

    pub(super) fn group_index(&mut self, name: i32) -> Option<usize> {
        if let Some(i) = self.groups.iter().position(|g| g.name == name) {
            return Some(i);
        }
        // Groups come from frames: a bound keeps a flood of names from growing it.
        if self.groups.len() >= 1024 {
            return None;
        }
        self.groups.push(GroupState {
            name,
            ..GroupState::default()
        });
        Some(self.groups.len() - 1)
    }

    pub(super) fn check_joins(&mut self) {
        let mut i = 0;
        while i < self.joins.len() {
            let (ctx, gi) = self.joins[i];
            let g = &self.groups[gi];
            let r = if g.bad {
                Some(Err(QxError::Size))
            } else if g.formed() {
                Some(Ok(()))
            } else if self.app_members().iter().any(|&n| self.dead[n as usize]) {
                Some(Err(QxError::Dead))
            } else {
                None
            };
            match r {
                Some(r) => {
                    self.joins.swap_remove(i);
                    self.complete_send(ctx, r);
                }
                None => i += 1,
            }
        }
    }

    /// Whether a process of the fabric was found dead.
    pub(super) fn any_dead(&self) -> bool {
        self.dead.iter().any(|&d| d)
    }

    /// Whether group `gi` is the application's own group and the application is
    /// every endpoint of the fabric: its barriers are then the engine's barrier (in
    /// NIC memory where the device has one, seed 3's "NIC" doing the work). Only
    /// that group may use it: the engine has one barrier sequence, which every
    /// member must take in the same order, and a process runs the barriers of one
    /// group one at a time ([`QxError::Busy`]) while those of different groups may
    /// interleave differently at each member. Another application on the fabric
    /// would have to arrive too, so then the group runs its own barrier.
    pub(super) fn whole_fabric(&self, gi: usize) -> bool {
        let g = &self.groups[gi];
        let n = g.members.len();
        g.name == self.me.ai && n == self.names.len() && n == self.ep.engine.size() as usize
    }

    /// The application group's barrier on the engine: it starts once every job
    /// queued before it was handed to the engine (where a token would have been
    /// queued), and ends when the engine's does: a dead member fails it.
    pub(super) fn advance_engine_barrier(&mut self, i: usize) -> Option<Result<(), QxError>> {
        let b = &mut self.barriers[i];
        if !b.sent {
            if !self.tx.is_empty() {
                return None;
            }
            if let Err(e) = self.ep.engine.start_barrier() {
                return Some(Err(e.into()));
            }
            b.sent = true;
        }
        match self.ep.engine.barrier_done() {
            Ok(true) => {
                self.stats.engine_barriers += 1;
                Some(Ok(()))
            }
            Ok(false) => None,
            Err(e) => Some(Err(e.into())),
        }
    }

    /// Dissemination barrier: in round k, a token to the member 2^k after this one
    /// (in PI order), and wait for the one from the member 2^k before.
    pub(super) fn advance_barriers(&mut self) -> bool {
        let me = self.ep.engine.config().node;
        let mut busy = false;
        let mut i = 0;
        while i < self.barriers.len() {
            if self.barriers[i].on_engine {
                let started = self.barriers[i].sent;
                let result = self.advance_engine_barrier(i);
                busy |= started != self.barriers[i].sent;
                if let Some(r) = result {
                    let b = self.barriers.swap_remove(i);
                    self.groups[b.group].barrier_active = false;
                    if r.is_ok() {
                        self.stats.barriers += 1;
                    }
                    self.complete_send(b.ctx, r);
                    busy = true;
                } else {
                    i += 1;
                }
                continue;
            }
            let b = &mut self.barriers[i];
            let g = &mut self.groups[b.group];
            let n = g.members.len();
            let my = g.members.iter().position(|m| m.1 == me).unwrap_or(0);
            let result = loop {
                let step = 1usize << b.round;
                if step >= n {
                    break Some(Ok(()));
                }
                if !b.sent {
                    let to = g.members[(my + step) % n].1;
                    let h = head(K_BAR, g.name, b.round as i32, b.epoch);
                    self.tx.push_back(TxJob::control(alloc::vec![to], h));
                    b.sent = true;
                    busy = true;
                }
                let from = g.members[(my + n - step) % n].1;
                if self.dead[from as usize] {
                    break Some(Err(QxError::Dead));
                }
                if g.tokens.get(b.round as usize).copied().unwrap_or(0) > b.epoch {
                    b.round += 1;
                    b.sent = false;
                    busy = true;
                } else {
                    break None;
                }
            };
            match result {
                Some(r) => {
                    g.barrier_active = false;
                    let ctx = b.ctx;
                    self.barriers.swap_remove(i);
                    if r.is_ok() {
                        self.stats.barriers += 1;
                    }
                    self.complete_send(ctx, r);
                    busy = true;
                }
                None => i += 1,
            }
        }
        busy
    }
}
