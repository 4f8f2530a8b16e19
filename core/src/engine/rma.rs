//! Remote memory access: one-sided put and get (Cheetah core), served by the engine
//! with no handler of the target involved.
//!
//! Addresses are the program's own (64-bit); the engine never touches memory itself
//! but goes through a [`Memory`] the personality passes to [`Engine::poll_mem`], which
//! decides what a peer may reach. A put is a reliable message of `PUT` frames, each
//! carrying the destination address and bell, written fragment by fragment straight
//! to the address; its bell rings once every byte is there. A get is a reliable
//! `GET_REQUEST`; the target's engine answers with a reliable message of `GET_REPLY`
//! frames read straight from its memory into the frames (again on retransmission),
//! and rings its own bell once the initiator has acked them all. An address the owner
//! does not expose is refused (CONTROL `DENY_PUT` / `DENY_GET`): nothing is written or
//! read, and the initiator learns it as [`Error::BadAddress`].

use super::*;

/// Gets one endpoint may have waiting for their data.
pub const GET_SLOTS: usize = 32;
/// Bell address meaning "no bell".
pub const NO_BELL: u64 = 0;

/// Who touches memory, and how: the program's own operation, or a peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The source of our own put.
    Read,
    /// The destination of our own get.
    Write,
    /// A peer's get reads it.
    PeerRead,
    /// A peer's put writes it, or a peer rings a bell there.
    PeerWrite,
}

/// The program memory a peer may reach, as its owner decides.
///
/// The engine asks [`Memory::check`] once per operation, for the whole range and
/// for every bell a peer names, before it reads, writes or rings anything there;
/// [`Memory::read`], [`Memory::write`] and [`Memory::ring`] then only need to be
/// safe (refuse what is not memory at all).
pub trait Memory {
    /// Whether `[addr, addr + len)` may be touched with `access`.
    fn check(&mut self, addr: u64, len: u64, access: Access) -> Result<(), Error>;
    /// Copies `data` to `addr`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error>;
    /// Copies from `addr` into `out`.
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), Error>;
    /// Adds one to the bell (an `i32` counter, native byte order) at `bell`;
    /// [`NO_BELL`] and addresses that are not memory are ignored.
    fn ring(&mut self, bell: u64);
}

/// Checks a bell a peer named (none is fine).
fn peer_bell(mem: &mut dyn Memory, bell: u64) -> bool {
    bell == NO_BELL || mem.check(bell, 4, Access::PeerWrite).is_ok()
}

/// No memory at all: every access is refused (engines without a one-sided personality).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMemory;

impl Memory for NoMemory {
    fn check(&mut self, _: u64, _: u64, _: Access) -> Result<(), Error> {
        Err(Error::BadAddress)
    }
    fn write(&mut self, _: u64, _: &[u8]) -> Result<(), Error> {
        Err(Error::BadAddress)
    }
    fn read(&mut self, _: u64, _: &mut [u8]) -> Result<(), Error> {
        Err(Error::BadAddress)
    }
    fn ring(&mut self, _: u64) {}
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum GetState {
    #[default]
    Free,
    Waiting,
}

/// A get waiting for its data.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Get {
    pub(super) state: GetState,
    pub(super) chan: u16,
    pub(super) req: u32,
    /// Where the data goes here, and the bell rung when it is all there.
    pub(super) local: u64,
    pub(super) local_bell: u64,
    /// Where it comes from at the target, and the target's bell.
    pub(super) remote: u64,
    pub(super) remote_bell: u64,
    pub(super) len: u32,
}

/// A one-sided operation that failed, for the personality to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmaFailure {
    /// The peer's group and instance.
    pub group: GroupId,
    /// The peer's instance.
    pub node: NodeId,
    /// `BadAddress` (the peer refused the address) or `SendFailure` (peer dead).
    pub error: Error,
    /// The operation's local bell, which did not ring ([`NO_BELL`] where none was
    /// given, or for a put refused after its bell rang).
    pub local_bell: u64,
}

/// Gets in flight and failures not yet taken.
#[derive(Debug, Clone)]
pub(super) struct Rma {
    pub(super) gets: [Get; GET_SLOTS],
    pub(super) next_req: u32,
    pub(super) failures: [Option<RmaFailure>; 8],
    /// Failures that found the list full (reported as a count).
    pub(super) overflow: u32,
    /// Puts that completed lately (channel, message id, peer): a denial may still
    /// come for one whose last ack travelled ahead of it (a bare ack sent while the
    /// target's window was full).
    pub(super) recent: [(u16, u32); 16],
    pub(super) recent_at: usize,
}

impl Default for Rma {
    fn default() -> Self {
        Rma {
            gets: Default::default(),
            next_req: 0,
            failures: [None; 8],
            overflow: 0,
            recent: [(NONE, 0); 16],
            recent_at: 0,
        }
    }
}

impl Rma {
    pub(super) fn fail(&mut self, f: RmaFailure) {
        match self.failures.iter_mut().find(|s| s.is_none()) {
            Some(s) => *s = Some(f),
            None => self.overflow = self.overflow.saturating_add(1),
        }
    }
}

/// Reads a big-endian u64 from the first 8 bytes of `b` (0 if shorter).
fn be64(b: &[u8]) -> u64 {
    b.get(..8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// A one-sided transfer between `len` bytes at local address `local` and address
/// `remote` of instance `node` of `group`. A put writes there; a get reads from
/// there. `local_bell` is rung here and `remote_bell` there, each once its end is
/// done with the bytes (see `Engine::start_put` and `Engine::start_get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The peer's group.
    pub group: GroupId,
    /// The peer's instance in it.
    pub node: NodeId,
    /// The address at the peer.
    pub remote: u64,
    /// The address here.
    pub local: u64,
    /// Bytes.
    pub len: u32,
    /// Rung here ([`NO_BELL`]: none).
    pub local_bell: u64,
    /// Rung at the peer ([`NO_BELL`]: none).
    pub remote_bell: u64,
}

impl<'a> Engine<'a> {
    /// Starts writing `len` bytes from local address `local` to address `remote` of
    /// instance `node` of `group`. `local_bell` is rung here once the local bytes may
    /// be reused (the target has them all), `remote_bell` there once they have all
    /// landed. A refused address or a dead peer shows up in
    /// [`Engine::take_rma_failure`] and the local bell is not rung.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn start_put(&mut self, mem: &mut dyn Memory, t: Transfer) -> Result<(), Error> {
        let ci = self.put_channel(mem, t.group, t.node, t.local, t.len)?;
        let oi = self.ops.alloc()?;
        let op = put_op(&t);
        self.enqueue(ci, oi, &op);
        Ok(())
    }

    /// The channel a put of `len` bytes from local `local` to `node` of `group`
    /// goes on: the bytes readable, the peer known and not failed.
    pub(super) fn put_channel(
        &mut self,
        mem: &mut dyn Memory,
        group: GroupId,
        node: NodeId,
        local: u64,
        len: u32,
    ) -> Result<usize, Error> {
        // A put of no bytes reads nothing here: it only rings `remote_bell` there.
        if len > 0 {
            mem.check(local, len as u64, Access::Read)?;
        }
        let addr = self.addr_of(group, node)?;
        let ci = self.channel_for(addr, group, node)?;
        if self.chans.table[ci].failed {
            return Err(Error::SendFailure);
        }
        Ok(ci)
    }

    /// Starts reading `len` bytes at address `remote` of instance `node` of `group`
    /// into local address `local`. `local_bell` is rung here once the data has all
    /// landed, `remote_bell` there once the source may be reused.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn start_get(&mut self, mem: &mut dyn Memory, t: Transfer) -> Result<(), Error> {
        let Transfer {
            group,
            node,
            remote,
            local,
            len,
            local_bell,
            remote_bell,
        } = t;
        let (gi, ci) = self.get_slot(mem, group, node, local, len)?;
        let ch = &mut self.chans.table[ci];
        let req = self.rma.next_req;
        self.chans.work.set(true);
        if !ch.queue_ctrl(Slot::GetRequest {
            get: gi as u16,
            req,
        }) {
            return Err(Error::NoResources);
        }
        self.rma.next_req = req.wrapping_add(1);
        self.rma.gets[gi] = Get {
            state: GetState::Waiting,
            chan: ci as u16,
            req,
            local,
            local_bell,
            remote,
            remote_bell,
            len,
        };
        Ok(())
    }

    /// A free slot of the get table and the channel for a get of `len` bytes into
    /// local `local` from `node` of `group`: the local range writable, the peer
    /// known and not failed (`NoResources`: no free slot).
    pub(super) fn get_slot(
        &mut self,
        mem: &mut dyn Memory,
        group: GroupId,
        node: NodeId,
        local: u64,
        len: u32,
    ) -> Result<(usize, usize), Error> {
        mem.check(local, len as u64, Access::Write)?;
        let addr = self.addr_of(group, node)?;
        let gi = self
            .rma
            .gets
            .iter()
            .position(|g| g.state == GetState::Free)
            .ok_or(Error::NoResources)?;
        let ci = self.channel_for(addr, group, node)?;
        if self.chans.table[ci].failed {
            return Err(Error::SendFailure);
        }
        Ok((gi, ci))
    }

    /// One-sided operations still in flight (puts not acked, gets not answered).
    pub fn rma_pending(&self) -> usize {
        let puts = self
            .ops
            .iter()
            .filter(|o| o.owned && o.kind == Kind::Put && o.state != OpState::Free)
            .count();
        let gets = self
            .rma
            .gets
            .iter()
            .filter(|g| g.state != GetState::Free)
            .count();
        puts + gets
    }

    /// The next one-sided operation of ours that failed, oldest first.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    pub(crate) fn take_rma_failure(&mut self) -> Option<RmaFailure> {
        let f = self.rma.failures[0].take();
        self.rma.failures.rotate_left(1);
        f
    }

    /// A `GET_REQUEST` accepted in sequence: answer it from memory, or deny it.
    /// False (refuse, the initiator retries) when no operation slot is free.
    pub(super) fn rx_get_request(
        &mut self,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> bool {
        let remote = be64(payload);
        let bell = be64(payload.get(8..).unwrap_or(&[]));
        let len = payload
            .get(16..20)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u32::from_be_bytes);
        if mem.check(remote, len as u64, Access::PeerRead).is_err() || !peer_bell(mem, bell) {
            return self.deny(ci, repr.msg_id, CONTROL_DENY_GET);
        }
        let Ok(oi) = self.ops.alloc() else {
            return false;
        };
        let ch = &self.chans.table[ci];
        let mut op = Op::EMPTY;
        op.state = OpState::Active;
        op.reliable = true;
        op.kind = Kind::GetReply;
        op.mem_src = true;
        op.owned = true;
        op.local = remote;
        op.prefix = [(repr.msg_id as u64) << 32, 0];
        op.bell = bell;
        op.total = len;
        op.dest = Dest {
            group: ch.peer_group,
            node: ch.peer_node,
            port: 0,
        };
        self.enqueue(ci, oi, &op);
        self.stats.rma_served += 1;
        true
    }

    /// Queues a denial of put message / get request `msg`; false if the control
    /// queue is full (the frame is refused and comes again).
    fn deny(&mut self, ci: usize, msg: u32, code: u32) -> bool {
        self.chans.work.set(true);
        let queued = self.chans.table[ci].queue_ctrl(Slot::Deny { msg, code });
        if queued {
            self.stats.rma_denied += 1;
        }
        queued
    }

    /// Reserves an assembly for the first fragment of a put or get reply: the
    /// destination comes from the frame's prefix (put, checked against `mem`) or from
    /// our get table (reply). A put to memory we do not expose, or a reply nobody
    /// asked for, is taken into a discard assembly. `None`: refuse for now.
    pub(super) fn reserve_rma(
        &mut self,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        now: Instant,
        mem: &mut dyn Memory,
    ) -> Option<usize> {
        let (dest, bell, get) = if repr.kind == Kind::Put {
            let addr = be64(payload);
            let bell = be64(payload.get(8..)?);
            let ok = mem
                .check(addr, repr.total_len as u64, Access::PeerWrite)
                .is_ok()
                && peer_bell(mem, bell);
            (ok.then_some(addr), bell, NONE)
        } else {
            let req = (be64(payload) >> 32) as u32;
            let gi = self.rma.gets.iter().position(|g| {
                g.state == GetState::Waiting
                    && g.chan == ci as u16
                    && g.req == req
                    && g.len == repr.total_len
            });
            match gi {
                Some(gi) => {
                    let g = &self.rma.gets[gi];
                    (Some(g.local), g.local_bell, gi as u16)
                }
                None => (None, NO_BELL, NONE),
            }
        };
        let ai = self.asms.free_slot()?;
        if dest.is_none() && repr.kind == Kind::Put && self.chans.table[ci].ctrl_full() {
            return None;
        }
        self.asms.table[ai] = Assembly {
            used: true,
            discard: dest.is_none(),
            chan: ci as u16,
            msg_id: repr.msg_id,
            reliable: true,
            port: 0,
            base: 0,
            cap: 0,
            total: repr.total_len,
            received: 0,
            deadline: now + self.cfg.reassembly_timeout,
            src: repr.ends,
            rma: if repr.kind == Kind::Put {
                RMA_PUT
            } else {
                RMA_GET
            },
            addr: dest.unwrap_or(0),
            bell,
            get,
            ..Assembly::EMPTY
        };
        Some(ai)
    }

    /// A put whole in one frame (`offset` 0, `LAST`), the next message of channel
    /// `ci` to place and deliver, to memory we expose: written and its bell rung
    /// at once, with no assembly, as [`Engine::rx_reliable_data`] takes a data
    /// message in one frame. `false` changes nothing: anything else (a put to
    /// refuse, say) goes the general way.
    #[inline]
    pub(super) fn rx_put_single(
        &mut self,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> bool {
        let Some((prefix, data)) = payload.split_first_chunk::<{ wire::RMA_PREFIX }>() else {
            return false;
        };
        let (addr, bell) = (be64(prefix), be64(&prefix[8..]));
        if data.len() as u64 != u64::from(repr.total_len)
            || mem
                .check(addr, data.len() as u64, Access::PeerWrite)
                .is_err()
            || !peer_bell(mem, bell)
        {
            return false;
        }
        self.landed_single(ci, repr, addr, data, bell, mem);
        true
    }

    /// The reply to a get of ours, whole in one frame, as [`Engine::rx_put_single`]
    /// takes a put: written where the get asked (checked when it started) and its
    /// bell rung, the get freed. `false` changes nothing: the general path takes it
    /// (a reply nobody waits for is dropped there).
    #[inline]
    pub(super) fn rx_get_reply_single(
        &mut self,
        ci: usize,
        repr: &Repr,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> bool {
        let Some((prefix, data)) = payload.split_first_chunk::<{ wire::RMA_PREFIX }>() else {
            return false;
        };
        let req = (be64(prefix) >> 32) as u32;
        let Some(g) = self.rma.gets.iter_mut().find(|g| {
            g.state == GetState::Waiting
                && g.chan == ci as u16
                && g.req == req
                && g.len == repr.total_len
        }) else {
            return false;
        };
        if data.len() as u64 != u64::from(g.len) {
            return false;
        }
        g.state = GetState::Free;
        let (local, bell) = (g.local, g.local_bell);
        self.landed_single(ci, repr, local, data, bell, mem);
        true
    }

    /// What taking a put or get reply in one frame leaves to do: `data` written at
    /// `addr`, the message passed in order, `bell` rung.
    #[inline(always)]
    fn landed_single(
        &mut self,
        ci: usize,
        repr: &Repr,
        addr: u64,
        data: &[u8],
        bell: u64,
        mem: &mut dyn Memory,
    ) {
        if mem.write(addr, data).is_err() {
            // As `place_rma`: checked, then unmapped by its owner.
            self.stats.rma_denied += 1;
        }
        let ch = &mut self.chans.table[ci];
        let next = repr.msg_id.wrapping_add(1);
        ch.next_reserve = next;
        ch.next_deliver = next;
        self.stats.rma_landed += 1;
        mem.ring(bell);
        // Its owner probably waits on the bell: as for a stored packet, the poll's
        // upkeep may come after it has seen it.
        self.progress.stored = true;
        self.wake_refused();
    }

    /// Writes a put or get-reply fragment to its place.
    pub(super) fn place_rma(&mut self, ai: usize, offset: u32, data: &[u8], mem: &mut dyn Memory) {
        let a = &mut self.asms.table[ai];
        a.received = a.received.saturating_add(data.len() as u32);
        // Only the range checked at the first fragment: a later frame claiming a
        // longer message does not reach past it.
        if a.discard || offset as u64 + data.len() as u64 > a.total as u64 {
            return;
        }
        if mem.write(a.addr.wrapping_add(offset as u64), data).is_err() {
            // Checked at the first fragment: the owner has unmapped it since.
            self.stats.rma_denied += 1;
        }
    }

    /// A put or get reply has landed entirely (in message order): ring its bell,
    /// or tell the initiator of a put that it was denied.
    pub(super) fn deliver_rma(&mut self, a: Assembly, mem: &mut dyn Memory) {
        if a.discard {
            if a.rma == RMA_PUT {
                let _ = self.deny(a.chan as usize, a.msg_id, CONTROL_DENY_PUT);
            } else {
                self.stats.rx_dropped += 1;
            }
            return;
        }
        if a.rma == RMA_GET {
            if let Some(g) = self.rma.gets.get_mut(a.get as usize) {
                g.state = GetState::Free;
            }
        }
        self.stats.rma_landed += 1;
        mem.ring(a.bell);
    }

    /// A CONTROL denial: our put message or get request `msg_id` named memory the
    /// peer does not expose.
    pub(super) fn rx_deny(&mut self, ci: usize, repr: &Repr) {
        let ch = &self.chans.table[ci];
        let failure = RmaFailure {
            group: ch.peer_group,
            node: ch.peer_node,
            error: Error::BadAddress,
            local_bell: NO_BELL,
        };
        if repr.offset == CONTROL_DENY_GET {
            if let Some(g) = self.rma.gets.iter_mut().find(|g| {
                g.state == GetState::Waiting && g.chan == ci as u16 && g.req == repr.msg_id
            }) {
                g.state = GetState::Free;
                let local_bell = g.local_bell;
                self.rma.fail(RmaFailure {
                    local_bell,
                    ..failure
                });
            }
            return;
        }
        if let Some(o) = self.ops.table.iter_mut().find(|o| {
            o.owned && o.state != OpState::Free && o.chan == ci as u16 && o.msg_id == repr.msg_id
        }) {
            match o.state {
                OpState::Active => o.rejected = true,
                OpState::Done => o.state = OpState::Rejected,
                _ => {}
            }
        } else if let Some(r) = self
            .rma
            .recent
            .iter_mut()
            .find(|r| r.0 == ci as u16 && r.1 == repr.msg_id)
        {
            // Its bell has rung already; the program still learns of the refusal.
            r.0 = NONE;
            self.rma.fail(failure);
        }
    }

    /// Gets waiting on channel `ci`, whose peer died, fail.
    pub(super) fn fail_gets(&mut self, ci: usize) {
        let ch = &self.chans.table[ci];
        let failure = RmaFailure {
            group: ch.peer_group,
            node: ch.peer_node,
            error: Error::SendFailure,
            local_bell: NO_BELL,
        };
        for gi in 0..GET_SLOTS {
            let g = &mut self.rma.gets[gi];
            if g.state == GetState::Waiting && g.chan == ci as u16 {
                g.state = GetState::Free;
                let local_bell = g.local_bell;
                self.rma.fail(RmaFailure {
                    local_bell,
                    ..failure
                });
            }
        }
    }

    /// Rings the bells of finished one-sided operations and records failed ones.
    #[inline]
    pub(super) fn settle_rma(&mut self, mem: &mut dyn Memory) {
        if self.bufs.rma_done != 0 {
            self.settle_rma_now(mem);
        }
    }

    #[inline(never)]
    fn settle_rma_now(&mut self, mem: &mut dyn Memory) {
        self.bufs.rma_done = 0;
        self.bufs.rma_tail = NONE;
        let mut next = core::mem::replace(&mut self.bufs.rma_head, NONE);
        while let Some(o) = self.ops.table.get_mut(next as usize) {
            next = core::mem::replace(&mut o.settle_next, NONE);
            o.listed = false;
            if !o.owned || matches!(o.state, OpState::Free | OpState::Active) {
                continue;
            }
            let (state, bell, dest) = (o.state, o.bell, o.dest);
            o.state = OpState::Free;
            o.owned = false;
            let error = match state {
                OpState::Done => {
                    if o.kind == Kind::Put {
                        let at = self.rma.recent_at;
                        self.rma.recent[at] = (o.chan, o.msg_id);
                        self.rma.recent_at = (at + 1) % self.rma.recent.len();
                    }
                    mem.ring(bell);
                    continue;
                }
                OpState::Rejected => Error::BadAddress,
                _ => Error::SendFailure,
            };
            // A get reply that could not be delivered is the initiator's failure.
            if o.kind == Kind::Put {
                self.rma.fail(RmaFailure {
                    group: dest.group,
                    node: dest.node,
                    error,
                    local_bell: bell,
                });
            }
        }
    }

    /// The payload of a GET_REQUEST for get `gi` (zeros if that get has ended: the
    /// target then already has the request, and a resend is only a duplicate).
    pub(super) fn get_request_payload(
        gets: &[Get],
        gi: u16,
        req: u32,
    ) -> [u8; wire::GET_REQUEST_LEN] {
        let mut p = [0u8; wire::GET_REQUEST_LEN];
        if let Some(g) = gets
            .get(gi as usize)
            .filter(|g| g.state == GetState::Waiting && g.req == req)
        {
            p[..8].copy_from_slice(&g.remote.to_be_bytes());
            p[8..16].copy_from_slice(&g.remote_bell.to_be_bytes());
            p[16..20].copy_from_slice(&g.len.to_be_bytes());
        }
        p
    }
}

/// The operation of a put of `len` bytes from local `local` to `remote` of `node`
/// in `group`, ringing `local_bell` here and `remote_bell` there (not yet on a
/// channel).
pub(super) fn put_op(t: &Transfer) -> Op<'static> {
    let &Transfer {
        group,
        node,
        remote,
        local,
        len,
        local_bell,
        remote_bell,
    } = t;
    let mut op = Op::EMPTY;
    op.state = OpState::Active;
    op.reliable = true;
    op.kind = Kind::Put;
    op.mem_src = true;
    op.owned = true;
    op.local = local;
    op.prefix = [remote, remote_bell];
    op.bell = local_bell;
    op.total = len;
    op.dest = Dest {
        group,
        node,
        port: 0,
    };
    op
}

/// Assembly flavours (`Assembly::rma`).
pub(super) const RMA_NONE: u8 = 0;
pub(super) const RMA_PUT: u8 = 1;
pub(super) const RMA_GET: u8 = 2;
