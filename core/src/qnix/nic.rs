//! The NIC's work: consuming the command queue and packetising messages out of
//! program memory.

use super::*;

/// One message (or control packet) on its way out, to one destination after another.
#[derive(Debug)]
pub(super) struct TxJob {
    pub(super) dests: Vec<NodeId>,
    /// A message to every other process, sent once (see [`Qnix::goes_once`]).
    pub(super) board: bool,
    pub(super) at: usize,
    pub(super) off: usize,
    pub(super) started: bool,
    pub(super) head: [u8; HEAD],
    pub(super) len: usize,
    pub(super) data: TxData,
    pub(super) ctx: Option<usize>,
    pub(super) failed: Option<QxError>,
}

#[derive(Debug, Default)]
pub(super) enum Target {
    #[default]
    Discard,
    Direct(usize),
    Buffer(Vec<u8>),
    /// The data of a rendezvous request kept early (the sender's context).
    Early(i32, Vec<u8>),
    /// A message its sender sent after a board broadcast not taken here yet (the
    /// count of those before it): kept until that broadcast is taken.
    Parked(u16, Vec<u8>),
}

impl TxJob {
    pub(super) fn control(dests: Vec<NodeId>, head: [u8; HEAD]) -> Self {
        Self::new(dests, head, 0, TxData::Owned(Vec::new()), None)
    }

    /// Message `head` of `len` bytes of `data` for send context `ctx`.
    pub(super) fn message(
        dests: Vec<NodeId>,
        head: [u8; HEAD],
        len: usize,
        data: TxData,
        ctx: usize,
    ) -> Self {
        Self::new(dests, head, len, data, Some(ctx))
    }

    pub(super) fn new(
        dests: Vec<NodeId>,
        head: [u8; HEAD],
        len: usize,
        data: TxData,
        ctx: Option<usize>,
    ) -> Self {
        TxJob {
            dests,
            board: false,
            at: 0,
            off: 0,
            started: false,
            head,
            len,
            data,
            ctx,
            failed: None,
        }
    }

    /// `n` more bytes of a board or tree broadcast went (its first packet, then
    /// `K_MORE` parts); whether that was the last.
    pub(super) fn tree_part_sent(&mut self, n: usize) -> bool {
        self.started = true;
        self.off += n;
        if self.off < self.len {
            return false;
        }
        self.at = self.dests.len();
        true
    }

    pub(super) fn next_dest(&mut self) {
        self.at += 1;
        self.off = 0;
        self.started = false;
    }
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    /// Consumes the command queue; whether there was anything in it.
    pub(super) fn consume_queue(&mut self) -> bool {
        let mut any = false;
        while let Some(cmd) = self.queue.pop_front() {
            self.stats.commands += 1;
            self.consume(cmd);
            any = true;
        }
        any
    }

    /// Starts granted puts and packetises the transmit queue, then has the engine
    /// send what that made (at `now`, read here if `None`: only then); whether there
    /// was anything.
    pub(super) fn send_out(&mut self, now: Option<Instant>) -> bool {
        let started = self.start_puts();
        let mut now = now;
        if !(self.transmit(&mut now) || started) {
            return false;
        }
        let now = now.unwrap_or_else(|| self.ep.clock.now());
        self.engine_transmit(now);
        // Packets launched at once in `transmit` leave together.
        self.ep.dev.flush(now);
        true
    }

    /// The engine's transmit pass, one-sided operations reaching memory through
    /// the gate.
    pub(super) fn engine_transmit(&mut self, now: Instant) {
        let mut gate = Gate {
            mem: &mut self.mem,
            armed: &self.armed,
            rung: &mut self.rung,
        };
        self.ep
            .engine
            .poll_transmit_mem(now, &mut self.ep.dev, None, &mut gate);
    }

    pub(super) fn consume(&mut self, cmd: Command) {
        match cmd {
            Command::Send { ctx, to, data, fan } => {
                let len = self.ctxs[SEND][ctx].len;
                if fan && self.goes_once(&to, len) {
                    self.parts[ctx] += 1;
                    let c = &self.ctxs[SEND][ctx];
                    let h = head(K_MSG, c.tag, 0, c.len as u32);
                    let mut job = TxJob::message(to, h, c.len, data, ctx);
                    job.board = true;
                    self.tx.push_back(job);
                    return;
                }
                // Destinations reached by rendezvous leave the rest to packets. A
                // send to nobody (a group of one) is a job with no destination,
                // which completes at once.
                let to = self.ask_rendezvous(ctx, to, &data);
                if to.is_empty() && self.parts[ctx] > 0 {
                    return;
                }
                self.parts[ctx] += 1;
                let c = &self.ctxs[SEND][ctx];
                let h = head(K_MSG, c.tag, 0, c.len as u32);
                self.tx.push_back(TxJob::message(to, h, c.len, data, ctx));
            }
            Command::Receive { ctx } => {
                let (from, tag) = (self.ctxs[RECV][ctx].peer, self.ctxs[RECV][ctx].tag);
                let early = self
                    .unexpected
                    .iter()
                    .position(|u| u.tag == tag && self.name_of(u.src) == Some(from));
                if let Some(u) = early.and_then(|i| self.unexpected.remove(i)) {
                    self.unexpected_bytes -= u.data.len();
                    match u.rts {
                        // Its data is on its way as packets.
                        Some((sid, _)) => self.early_bound.push((u.src, sid, ctx)),
                        None => {
                            self.fill(ctx, &u.data);
                            self.spares.give_bytes(u.data);
                        }
                    }
                } else if self.lookup(from).is_ok_and(|n| self.dead[n as usize]) {
                    self.complete_recv(ctx, 0, Err(QxError::Dead));
                } else {
                    self.posted.push(ctx);
                }
            }
            Command::Join { ctx, group, size } => {
                let members = self.app_members();
                self.tx
                    .push_back(TxJob::control(members, head(K_JOIN, group, size, 0)));
                match self.group_index(group) {
                    Some(gi) => self.joins.push((ctx, gi)),
                    None => self.complete_send(ctx, Err(QxError::NoMemory)),
                }
            }
            Command::Barrier { ctx, group } => {
                let on_engine = self.whole_fabric(group);
                let g = &mut self.groups[group];
                let epoch = g.epoch;
                if !on_engine {
                    g.epoch = g.epoch.wrapping_add(1);
                }
                self.barriers.push(BarrierOp {
                    ctx,
                    group,
                    epoch,
                    round: 0,
                    sent: false,
                    on_engine,
                });
            }
        }
    }

    pub(super) fn app_members(&self) -> Vec<NodeId> {
        (0..self.names.len())
            .filter(|&n| matches!(self.names[n], Some((name, _)) if name.ai == self.me.ai))
            .map(|n| n as NodeId)
            .collect()
    }

    /// Packetises the transmit queue in order, while the engine has packets, and
    /// launches each packet (at once where its channel allows; `now` is read from
    /// the clock when first needed).
    pub(super) fn transmit(&mut self, now: &mut Option<Instant>) -> bool {
        let me = self.ep.engine.config().node;
        let size = self.ep.engine.packet_size();
        let mut busy = false;
        while let Some(job) = self.tx.front_mut() {
            if job.at == job.dests.len() {
                let (ctx, failed) = (job.ctx, job.failed);
                if let Some(job) = self.tx.pop_front() {
                    self.spares.give_job(job);
                }
                if let Some(ctx) = ctx {
                    self.part_done(ctx, failed.map_or(Ok(()), Err));
                }
                busy = true;
                continue;
            }
            if job.board && job.started {
                // The rest of a tree broadcast: each packet says where it goes.
                let Ok(id) = self.ep.engine.packet_alloc() else {
                    break;
                };
                let Some(p) = self.ep.engine.packet_mut(id) else {
                    break;
                };
                let n = (job.len - job.off).min(size - HEAD);
                p[..HEAD].copy_from_slice(&head(K_MORE, 0, 0, job.off as u32));
                if !job
                    .data
                    .read_into(&mut self.mem, job.off, &mut p[HEAD..HEAD + n])
                {
                    job.failed = Some(QxError::Fault);
                }
                let now = self.ep.clock.now();
                match self.ep.engine.launch_multicast_on(
                    now,
                    &mut self.ep.dev,
                    id,
                    MCAST_ALL,
                    HEAD + n,
                    Tree::Binomial,
                ) {
                    Ok(_) => {
                        if job.tree_part_sent(n) {
                            self.stats.messages_sent += job.dests.len() as u64;
                        }
                        busy = true;
                    }
                    Err(Error::NoResources) => {
                        let _ = self.ep.engine.packet_free(id);
                        break;
                    }
                    Err(e) => {
                        // Its first packet went: the rest cannot go another way.
                        let _ = self.ep.engine.packet_free(id);
                        job.failed = Some(e.into());
                        job.at = job.dests.len();
                    }
                }
                continue;
            }
            if job.board {
                let tree = !self
                    .ep
                    .engine
                    .board_takes_packet(board_prefix(self.sent_to.len()) + job.len);
                if job.dests.iter().any(|&d| self.dead[d as usize])
                    || (tree && self.dead.iter().any(|&d| d))
                {
                    // Member by member: a dead one fails the send, and a dead
                    // relay would not pass it on.
                    job.board = false;
                    continue;
                }
                let n = self.sent_to.len();
                let at = board_prefix(n);
                if at > size {
                    // Not even its prefix fits a packet: member by member.
                    job.board = false;
                    continue;
                }
                let Ok(id) = self.ep.engine.packet_alloc() else {
                    break;
                };
                let Some(p) = self.ep.engine.packet_mut(id) else {
                    break;
                };
                // After the head, how many packets went to each process before it:
                // a receiver takes it only after those (see `goes_once`).
                p[..HEAD].copy_from_slice(&job.head);
                for (i, c) in self.sent_to.iter().enumerate() {
                    p[HEAD + 4 * i..HEAD + 4 * i + 4].copy_from_slice(&c.to_be_bytes());
                }
                // Then which processes it is for: every other one reads it, and
                // counts it, but only these take the message.
                let to = HEAD + 4 * n;
                p[to..at].fill(0);
                for &d in &job.dests {
                    p[to + d as usize / 8] |= 1 << (d % 8);
                }
                // A longer one goes on in `K_MORE` packets (down the tree only).
                let first = job.len.min(size - at);
                if !job.data.read_into(&mut self.mem, 0, &mut p[at..at + first]) {
                    job.failed = Some(QxError::Fault);
                }
                // Into the board at once where nothing of ours waits before it.
                let now = self.ep.clock.now();
                let len = at + first;
                match self.ep.engine.launch_multicast_on(
                    now,
                    &mut self.ep.dev,
                    id,
                    MCAST_ALL,
                    len,
                    Tree::Binomial,
                ) {
                    Ok(_) => {
                        self.bc_sent = self.bc_sent.wrapping_add(1);
                        self.stats.board_broadcasts += 1;
                        if job.tree_part_sent(first) {
                            self.stats.messages_sent += job.dests.len() as u64;
                        }
                        busy = true;
                    }
                    Err(Error::NoResources) => {
                        let _ = self.ep.engine.packet_free(id);
                        break;
                    }
                    Err(_) => {
                        let _ = self.ep.engine.packet_free(id);
                        job.board = false;
                    }
                }
                continue;
            }
            let dest = job.dests[job.at];
            let Some((kind, a, b, c)) = parse_head(&job.head) else {
                break;
            };
            if dest == me {
                job.at += 1;
                busy = true;
                if kind != K_MSG {
                    self.control(me, kind, a, b, c);
                    continue;
                }
                let mut d = self.spares.bytes();
                d.resize(job.len, 0);
                if !job.data.read_into(&mut self.mem, 0, &mut d) {
                    job.failed = Some(QxError::Fault);
                }
                self.stats.messages_sent += 1;
                self.arrived(me, a, d);
                continue;
            }
            if self.dead.get(dest as usize).copied().unwrap_or(true) {
                job.failed = Some(QxError::Dead);
                job.next_dest();
                continue;
            }
            let Ok(id) = self.ep.engine.packet_alloc() else {
                break;
            };
            let h = if job.started { 0 } else { HEAD };
            let n = (job.len - job.off).min(size - h);
            let Some(p) = self.ep.engine.packet_mut(id) else {
                break;
            };
            p[..h].copy_from_slice(&job.head[..h]);
            if h == HEAD {
                // What it must not overtake at the receiver (see `goes_once`).
                p[1..3].copy_from_slice(&self.bc_sent.to_be_bytes());
            }
            if !job.data.read_into(&mut self.mem, job.off, &mut p[h..h + n]) {
                job.failed = Some(QxError::Fault);
            }
            let at = *now.get_or_insert_with(|| self.ep.clock.now());
            // Out at once where nothing waits before it on its channel.
            match self
                .ep
                .engine
                .launch_unicast_on(at, &mut self.ep.dev, id, dest, h + n)
            {
                Ok(_) => {
                    let s = &mut self.sent_to[dest as usize];
                    *s = s.wrapping_add(1);
                }
                Err(Error::NoResources) => {
                    let _ = self.ep.engine.packet_free(id);
                    break;
                }
                Err(e) => {
                    let _ = self.ep.engine.packet_free(id);
                    job.failed = Some(e.into());
                    job.next_dest();
                    continue;
                }
            }
            busy = true;
            job.started = true;
            job.off += n;
            if job.off >= job.len {
                job.next_dest();
                if kind == K_MSG || kind == K_MSG_TO {
                    self.stats.messages_sent += 1;
                }
            }
        }
        busy
    }

    pub(super) fn receive_packets(&mut self) -> bool {
        let mut busy = false;
        // Over the early-message budget, packets stay in the engine's slots and the
        // senders are held back at the wire.
        while self.unexpected_bytes < UNEXPECTED_MAX {
            let Some(d) = self.ep.engine.next_delivery() else {
                break;
            };
            busy = true;
            self.take(d);
        }
        busy
    }
}
