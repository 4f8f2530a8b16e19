//! The Cheetah core personality (LANL, Karmesin 1999-2000), in Rust: one-sided put
//! and get with doorbells, remote handler invocation by tag, poll, wait and barrier.
//!
//! - **Contexts** are the ranks of one job ([`Cheetah::ncontexts`],
//!   [`Cheetah::mycontext`]).
//! - **Memory.** Addresses are the program's own, as in the seed; what a peer may
//!   reach is decided by the [`Memory`] this process was given: [`Segments`] (memory
//!   the program lent, addressed by the numbers [`Segments::expose`] returns) in
//!   Rust, the process's own writable mappings in the C library. An address outside
//!   it is refused at the target, which is left untouched, and the initiator's next
//!   call returns [`Error::BadAddress`].
//! - **Put / get** ([`Cheetah::put`], [`Cheetah::get`]) are served by the target's
//!   engine at its next poll, with no handler of the target involved: fragments go
//!   straight between memory and frames. Bells are `i32` counters in memory
//!   (native byte order), rung by the engine at the moments the seed defines: a
//!   put's local bell when the source may be reused (the target has every byte),
//!   its remote bell when the data has landed; a get's local bell when the data has
//!   landed, its remote bell when the target's source may be reused. Address 0 is
//!   "no bell".
//! - **Ainvoke** ([`Cheetah::ainvoke`]) copies the buffer into send packets at once
//!   (so its local bell rings before the call returns) and the target runs the
//!   handler registered for the tag inside a poll, wait or barrier, with the whole
//!   `Cheetah` (it may put, get and ainvoke). Buffers longer than a packet are sent
//!   in several, in order, and put together at the target (up to [`AINVOKE_MAX`]).
//! - **Dead peers** become errors: a put, get or invocation to a context that stops
//!   answering fails the next call with [`Error::SendFailure`].

use crate::endpoint::Endpoint;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::engine::{
    Access, Config, Delivery, Engine, Error, Group, Memory, PacketId, Storage, Transfer,
};
use crate::phy::Device;
use crate::time::{Clock, Duration, Instant};
use crate::NodeId;

/// Longest buffer an ainvoke carries.
pub const AINVOKE_MAX: usize = 1 << 20;

/// The largest handler buffer kept between invocations, so that short ones copy
/// into it and allocate nothing.
const SCRATCH_MAX: usize = 64 * 1024;

/// Buffers of finished invocations kept for the next (none over [`SCRATCH_MAX`]):
/// invocations of ourselves and ones put together from several packets then
/// allocate nothing once warm. Longer ones get a buffer of their own.
const SPARES: usize = 8;
/// Bytes in front of an invocation's first packet: tag (i32), length (u32).
const INVOKE_HEAD: usize = 8;

/// A registered handler: `(cheetah, who, tag, buffer)`.
pub type Handler<'a, D, C, M> = fn(&mut Cheetah<'a, D, C, M>, NodeId, i32, &[u8]);

/// An invocation that has arrived whole, for a deployment that runs the handler
/// itself (a C facade): read it with [`Cheetah::invocation_data`], end it with
/// [`Cheetah::invocation_done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invocation {
    /// The context that invoked.
    pub who: NodeId,
    /// The tag it named.
    pub tag: i32,
    /// Buffer length.
    pub len: usize,
    at: InvocationData,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InvocationData {
    /// In one received packet, after the head.
    Packet(PacketId),
    /// Put together from several, in `assembled[i]`.
    Assembled(usize),
    /// No bytes at all.
    Empty,
}

/// An invocation arriving in several packets.
#[derive(Debug, Default)]
struct Partial {
    tag: i32,
    want: usize,
    buf: Vec<u8>,
}

/// Counters of one context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheetahStats {
    /// Puts started.
    pub puts: u64,
    /// Gets started.
    pub gets: u64,
    /// Invocations sent.
    pub ainvokes: u64,
    /// Handlers run here.
    pub handlers: u64,
    /// Invocations dropped for want of a handler.
    pub unhandled: u64,
}

/// Program memory lent to the engine: segments at numbered addresses, so that a
/// peer reaches exactly what was exposed. Segment `i` starts at `(i + 1) << 40`.
#[derive(Debug, Default)]
pub struct Segments<'m> {
    segs: Vec<&'m mut [u8]>,
}

impl<'m> Segments<'m> {
    /// No memory exposed yet.
    pub fn new() -> Self {
        Segments { segs: Vec::new() }
    }

    /// Exposes `mem` to peers (for reading and writing); returns its address.
    pub fn expose(&mut self, mem: &'m mut [u8]) -> u64 {
        self.segs.push(mem);
        (self.segs.len() as u64) << 40
    }

    /// The segment at `base`.
    pub fn segment(&self, base: u64) -> Option<&[u8]> {
        let i = (base >> 40).checked_sub(1)? as usize;
        (base & ((1 << 40) - 1) == 0)
            .then(|| self.segs.get(i).map(|s| &s[..]))
            .flatten()
    }

    /// The segment at `base`, to change.
    pub fn segment_mut(&mut self, base: u64) -> Option<&mut [u8]> {
        let i = (base >> 40).checked_sub(1)? as usize;
        if base & ((1 << 40) - 1) != 0 {
            return None;
        }
        self.segs.get_mut(i).map(|s| &mut s[..])
    }

    fn range(&mut self, addr: u64, len: u64) -> Result<&mut [u8], Error> {
        let i = (addr >> 40).checked_sub(1).ok_or(Error::BadAddress)? as usize;
        let off = (addr & ((1 << 40) - 1)) as usize;
        let seg = self.segs.get_mut(i).ok_or(Error::BadAddress)?;
        let end = off.checked_add(len as usize).ok_or(Error::BadAddress)?;
        seg.get_mut(off..end).ok_or(Error::BadAddress)
    }
}

impl Memory for Segments<'_> {
    fn check(&mut self, addr: u64, len: u64, _: Access) -> Result<(), Error> {
        self.range(addr, len).map(|_| ())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.range(addr, data.len() as u64)?.copy_from_slice(data);
        Ok(())
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        out.copy_from_slice(self.range(addr, out.len() as u64)?);
        Ok(())
    }
    fn ring(&mut self, bell: u64) {
        if let Ok(b) = self.range(bell, 4) {
            let v = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]).wrapping_add(1);
            b.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

/// One Cheetah context.
pub struct Cheetah<'a, D, C, M> {
    ep: Endpoint<'a, D, C>,
    mem: M,
    handlers: Vec<(i32, Handler<'a, D, C, M>)>,
    partial: Vec<Partial>,
    assembled: Vec<Option<Vec<u8>>>,
    /// The buffer a handler is lent its invocation's data in.
    scratch: Vec<u8>,
    /// Emptied buffers of finished invocations, for the next ones (see [`SPARES`]).
    spares: Vec<Vec<u8>>,
    /// Invocations of ourselves, run at the next poll.
    own: VecDeque<(i32, Vec<u8>)>,
    failed: Option<(NodeId, Error)>,
    /// Contexts found dead.
    dead: Vec<bool>,
    last_keepalive: Instant,
    finalized: bool,
    stats: CheetahStats,
}

crate::endpoint::deref_endpoint!(Cheetah, 'a, D, C, M);

impl<D, C, M> core::fmt::Debug for Cheetah<'_, D, C, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cheetah")
            .field("engine", &self.ep.engine)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'a, D: Device, C: Clock, M: Memory> Cheetah<'a, D, C, M> {
    /// `cheetah_core_setup`: this process is context `cfg.node` of the job's group,
    /// with tables for a fabric of `fabric_nodes` addresses, serving `mem`.
    pub fn setup(
        cfg: Config,
        groups: &'a [Group<'a>],
        fabric_nodes: usize,
        dev: D,
        clock: C,
        mem: M,
    ) -> Result<Self, Error> {
        let cap = crate::engine::Capacity {
            ports: 1,
            channels: fabric_nodes,
            fabric_nodes,
            ops: (256 + 8 * fabric_nodes).min(0xFFF0),
            assemblies: 16 + 2 * fabric_nodes,
            eager: 0,
        };
        let storage: Storage<'a> = Storage::with_capacity(cap).with_packets(64, 256, 0, 0);
        let mut engine = Engine::new(cfg, groups, storage)?;
        engine.set_capabilities(dev.capabilities());
        let now = clock.now();
        let n = fabric_nodes;
        let mut partial = Vec::with_capacity(n);
        partial.resize_with(n, Partial::default);
        Ok(Cheetah {
            ep: Endpoint::new(engine, dev, clock),
            mem,
            handlers: Vec::new(),
            partial,
            assembled: Vec::new(),
            scratch: Vec::new(),
            spares: Vec::new(),
            own: VecDeque::new(),
            failed: None,
            dead: alloc::vec![false; n],
            last_keepalive: now,
            finalized: false,
            stats: CheetahStats::default(),
        })
    }

    /// `cheetah_core_finalize`: a barrier, then the operations still in flight are
    /// finished (at most 10 s). No call but the accessors may follow.
    pub fn finalize(&mut self) -> Result<(), Error> {
        self.barrier()?;
        self.shutdown();
        Ok(())
    }

    /// The part of [`Cheetah::finalize`] after its barrier (for a facade that runs
    /// the barrier itself): finishes what is in flight, at most 10 s.
    pub fn shutdown(&mut self) {
        self.finalized = true;
        self.ep.engine.flush_acks();
        let deadline = self.ep.clock.now() + Duration::from_secs(10);
        loop {
            let now = self.ep.clock.now();
            self.ep
                .engine
                .poll_mem(now, &mut self.ep.dev, None, &mut self.mem);
            if (self.ep.engine.is_quiescent() && self.ep.engine.rma_pending() == 0)
                || now >= deadline
            {
                return;
            }
            self.idle_step(false);
        }
    }

    /// `cheetah_core_ncontexts`.
    pub fn ncontexts(&self) -> u16 {
        self.ep.engine.size()
    }

    /// `cheetah_core_mycontext`.
    pub fn mycontext(&self) -> NodeId {
        self.ep.engine.config().node
    }

    fn usable(&self, context: NodeId) -> Result<(), Error> {
        if self.finalized {
            return Err(Error::BadConfig);
        }
        if context >= self.ncontexts() {
            return Err(Error::UnknownNode);
        }
        Ok(())
    }

    /// `cheetah_core_put`: `len` bytes from local `local` to `remote` in `context`.
    pub fn put(
        &mut self,
        context: NodeId,
        remote: u64,
        local: u64,
        len: usize,
        local_bell: u64,
        remote_bell: u64,
    ) -> Result<(), Error> {
        self.stats.puts += 1;
        self.transfer(true, context, remote, local, len, local_bell, remote_bell)
    }

    /// `cheetah_core_get`: `len` bytes from `remote` in `context` to local `local`.
    pub fn get(
        &mut self,
        context: NodeId,
        remote: u64,
        local: u64,
        len: usize,
        local_bell: u64,
        remote_bell: u64,
    ) -> Result<(), Error> {
        self.stats.gets += 1;
        self.transfer(false, context, remote, local, len, local_bell, remote_bell)
    }

    /// Rings the bell at `bell` in `context` through the fabric, after this
    /// context's earlier puts and gets to it: a put of no bytes, checked there like
    /// any put's bell (a refusal is [`Error::BadAddress`] at a later call). A
    /// deployment that moved the data itself (a direct copy between processes of
    /// one host) rings the target's bell this way; the target's engine rings it at
    /// its next poll.
    pub fn ring(&mut self, context: NodeId, bell: u64) -> Result<(), Error> {
        self.usable(context)?;
        if bell == crate::engine::NO_BELL {
            return Ok(());
        }
        if context == self.mycontext() {
            self.mem.check(bell, 4, Access::Write)?;
            self.mem.ring(bell);
            return Ok(());
        }
        self.transfer(true, context, bell, 0, 0, 0, bell)
    }

    /// A put (`put`) or get. Within this context it is a checked copy that rings
    /// the destination's bell, then the source's.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &mut self,
        put: bool,
        context: NodeId,
        remote: u64,
        local: u64,
        len: usize,
        local_bell: u64,
        remote_bell: u64,
    ) -> Result<(), Error> {
        self.usable(context)?;
        let len = u32::try_from(len).map_err(|_| Error::MessageTooLong)?;
        if context == self.mycontext() {
            let (from, to, to_bell, from_bell) = if put {
                (local, remote, remote_bell, local_bell)
            } else {
                (remote, local, local_bell, remote_bell)
            };
            self.copy_local(from, to, len)?;
            self.mem.ring(to_bell);
            self.mem.ring(from_bell);
            return Ok(());
        }
        let group = self.ep.engine.config().group;
        // A put in one frame, or a get's request, leaves in this call where its
        // channel is free.
        self.check_failure()?;
        let now = self.ep.clock.now();
        let t = Transfer {
            group,
            node: context,
            remote,
            local,
            len,
            local_bell,
            remote_bell,
        };
        let (e, dev, mem) = (&mut self.ep.engine, &mut self.ep.dev, &mut self.mem);
        let sent = if put {
            e.put_now(now, dev, mem, t)?
        } else {
            e.get_now(now, dev, mem, t)?
        };
        if sent {
            self.ep.dev.flush(now);
            return Ok(());
        }
        let start = if put {
            Engine::start_put
        } else {
            Engine::start_get
        };
        self.retry(|c| start(&mut c.ep.engine, &mut c.mem, t))
    }

    /// Starts `f`; while the tables are full, drains the network (running handlers)
    /// and tries again. Out at once when started.
    fn retry(&mut self, mut f: impl FnMut(&mut Self) -> Result<(), Error>) -> Result<(), Error> {
        self.check_failure()?;
        loop {
            match f(self) {
                Ok(()) => {
                    let now = self.ep.clock.now();
                    self.ep
                        .engine
                        .poll_transmit_mem(now, &mut self.ep.dev, None, &mut self.mem);
                    return Ok(());
                }
                Err(Error::NoResources) => {
                    let busy = self.progress()?;
                    self.idle_step(busy);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A put or get within this context: a checked copy through memory.
    fn copy_local(&mut self, from: u64, to: u64, len: u32) -> Result<(), Error> {
        self.mem.check(from, len as u64, Access::Read)?;
        self.mem.check(to, len as u64, Access::Write)?;
        let mut chunk = [0u8; 512];
        let mut off = 0u64;
        // Overlapping ranges copy like memmove: back to front when `to` is above.
        let backward = to > from && to < from + len as u64;
        while off < len as u64 {
            let n = (len as u64 - off).min(chunk.len() as u64);
            let at = if backward { len as u64 - off - n } else { off };
            self.mem.read(from + at, &mut chunk[..n as usize])?;
            self.mem.write(to + at, &chunk[..n as usize])?;
            off += n;
        }
        Ok(())
    }

    /// `cheetah_core_register`: `handler` runs for invocations that name `tag`
    /// (a tag registered again gets the new handler).
    pub fn register(&mut self, tag: i32, handler: Handler<'a, D, C, M>) {
        match self.handlers.iter_mut().find(|(t, _)| *t == tag) {
            Some(h) => h.1 = handler,
            None => self.handlers.push((tag, handler)),
        }
    }

    /// The handler registered for `tag`.
    pub fn handler(&self, tag: i32) -> Option<Handler<'a, D, C, M>> {
        self.handlers.iter().find(|(t, _)| *t == tag).map(|h| h.1)
    }

    /// `cheetah_core_ainvoke`: runs `context`'s handler for `tag` with a copy of
    /// `buf`. `buf` is copied before this returns, so `local_bell` rings now.
    pub fn ainvoke(
        &mut self,
        context: NodeId,
        tag: i32,
        buf: &[u8],
        local_bell: u64,
    ) -> Result<(), Error> {
        self.usable(context)?;
        if buf.len() > AINVOKE_MAX {
            return Err(Error::LongerThan(AINVOKE_MAX));
        }
        self.check_failure()?;
        if self.dead.get(context as usize) == Some(&true) {
            self.failed = Some((context, Error::SendFailure));
            return Err(Error::SendFailure);
        }
        self.stats.ainvokes += 1;
        if context == self.mycontext() {
            let mut copy = self.spare();
            copy.extend_from_slice(buf);
            self.own.push_back((tag, copy));
            self.mem.ring(local_bell);
            return Ok(());
        }
        let size = self.ep.engine.packet_size();
        if size <= INVOKE_HEAD {
            return Err(Error::BadConfig);
        }
        let mut off = 0;
        let mut first = true;
        while first || off < buf.len() {
            let id = loop {
                match self.ep.engine.packet_alloc() {
                    Ok(id) => break id,
                    Err(Error::NoResources) => {
                        let busy = self.progress()?;
                        self.idle_step(busy);
                    }
                    Err(e) => return Err(e),
                }
            };
            let p = self.ep.engine.packet_mut(id).ok_or(Error::InvalidHandle)?;
            let head = if first { INVOKE_HEAD } else { 0 };
            let n = (buf.len() - off).min(size - head);
            if first {
                p[..4].copy_from_slice(&tag.to_be_bytes());
                p[4..8].copy_from_slice(&(buf.len() as u32).to_be_bytes());
            }
            p[head..head + n].copy_from_slice(&buf[off..off + n]);
            loop {
                // Out at once where nothing waits before it on its channel.
                let now = self.ep.clock.now();
                match self
                    .ep
                    .engine
                    .launch_unicast_on(now, &mut self.ep.dev, id, context, head + n)
                {
                    Ok(_) => break,
                    Err(Error::NoResources) => {
                        let busy = self.progress()?;
                        self.idle_step(busy);
                    }
                    Err(e) => {
                        let _ = self.ep.engine.packet_free(id);
                        return Err(e);
                    }
                }
            }
            off += n;
            first = false;
        }
        self.mem.ring(local_bell);
        let now = self.ep.clock.now();
        self.ep
            .engine
            .poll_transmit_mem(now, &mut self.ep.dev, None, &mut self.mem);
        // Packets launched at once above leave together.
        self.ep.dev.flush(now);
        Ok(())
    }

    // ------------------------------------------------------------ progress

    /// `cheetah_core_poll`: serves peers' puts and gets, rings bells, and runs the
    /// handlers of the invocations that have arrived. Returns how many ran. A
    /// failed operation of ours is reported here once.
    pub fn poll(&mut self) -> Result<usize, Error> {
        self.progress()?;
        Ok(self.run_handlers())
    }

    /// Drains the network: serves peers, rings bells; invocations wait for
    /// [`Cheetah::run_handlers`] and failures for the next call. Whether anything
    /// happened.
    pub fn poll_network(&mut self) -> bool {
        let now = self.ep.clock.now();
        if now.saturating_since(self.last_keepalive) >= self.ep.engine.config().keepalive {
            self.last_keepalive = now;
            self.ep.engine.keepalive_all(now);
        }
        self.ep
            .engine
            .poll_mem(now, &mut self.ep.dev, None, &mut self.mem)
    }

    fn progress(&mut self) -> Result<bool, Error> {
        let busy = self.poll_network();
        self.check_failure()?;
        Ok(busy)
    }

    /// The next failed operation of ours as an error (for a facade that polls with
    /// [`Cheetah::poll_network`]).
    ///
    /// A context that dies with nothing of ours in flight to it is no error here
    /// (see [`Cheetah::dead_context`]); an operation to it is.
    pub fn check_failure(&mut self) -> Result<(), Error> {
        while let Some(node) = self.ep.engine.take_packet_failure() {
            if let Some(d) = self.dead.get_mut(node as usize) {
                *d = true;
            }
        }
        if let Some(f) = self.ep.engine.take_rma_failure() {
            self.failed = Some((f.node, f.error));
            return Err(f.error);
        }
        Ok(())
    }

    /// A context found dead, if any: a wait for a bell it may have been going to
    /// ring would never end.
    pub fn dead_context(&self) -> Option<NodeId> {
        self.dead.iter().position(|&d| d).map(|n| n as NodeId)
    }

    /// Whether `context` was found dead.
    pub fn is_dead(&self, context: NodeId) -> bool {
        self.dead.get(context as usize).copied().unwrap_or(false)
    }

    /// The context and error of the last failed operation, if any.
    pub fn failure(&self) -> Option<(NodeId, Error)> {
        self.failed
    }

    /// Runs the handlers of every invocation that has arrived whole; how many ran.
    pub fn run_handlers(&mut self) -> usize {
        let mut n = 0;
        while let Some(inv) = self.next_invocation() {
            let Some(h) = self.handler(inv.tag) else {
                self.stats.unhandled += 1;
                self.invocation_done(inv);
                continue;
            };
            // The handler gets the whole context, so the buffer is lent as a copy
            // it cannot keep (the seed: it may not capture it).
            let mut data = core::mem::take(&mut self.scratch);
            self.take_data(inv, &mut data);
            h(self, inv.who, inv.tag, &data);
            // Kept for the next invocation (a long one's buffer is let go).
            if data.capacity() <= SCRATCH_MAX {
                data.clear();
                self.scratch = data;
            }
            n += 1;
        }
        n
    }

    /// Puts the data of `inv` into `out` (empty): the assembled buffer itself,
    /// or a copy of the packet's bytes.
    fn take_data(&mut self, inv: Invocation, out: &mut Vec<u8>) {
        match inv.at {
            InvocationData::Assembled(i) => {
                let whole = self.assembled[i].take().unwrap_or_default();
                let lent = core::mem::replace(out, whole);
                self.keep(lent);
            }
            _ => out.extend_from_slice(self.invocation_data(&inv)),
        }
        self.invocation_done(inv);
    }

    /// Whether [`Cheetah::next_invocation`] may find one: an own invocation is
    /// queued or a packet is waiting (perhaps only part of a long invocation). A
    /// deployment whose handler loop costs a lock asks this first.
    #[inline]
    pub fn invocations_waiting(&self) -> bool {
        !self.own.is_empty() || self.ep.engine.deliveries_pending() > 0
    }

    /// The next invocation that has arrived whole (for a deployment that runs the
    /// handler itself); `None` if none.
    pub fn next_invocation(&mut self) -> Option<Invocation> {
        if let Some((tag, data)) = self.own.pop_front() {
            self.stats.handlers += 1;
            let len = data.len();
            let i = self.store(data);
            return Some(Invocation {
                who: self.mycontext(),
                tag,
                len,
                at: InvocationData::Assembled(i),
            });
        }
        while let Some(d) = self.ep.engine.next_delivery() {
            if let Some(inv) = self.take_packet(d) {
                self.stats.handlers += 1;
                return Some(inv);
            }
        }
        None
    }

    /// An empty buffer, kept from a finished invocation where one is.
    fn spare(&mut self) -> Vec<u8> {
        self.spares.pop().unwrap_or_default()
    }

    /// Keeps `b`, emptied, for a later invocation (see [`SPARES`]).
    fn keep(&mut self, mut b: Vec<u8>) {
        if (1..=SCRATCH_MAX).contains(&b.capacity()) && self.spares.len() < SPARES {
            b.clear();
            self.spares.push(b);
        }
    }

    fn store(&mut self, data: Vec<u8>) -> usize {
        match self.assembled.iter().position(Option::is_none) {
            Some(i) => {
                self.assembled[i] = Some(data);
                i
            }
            None => {
                self.assembled.push(Some(data));
                self.assembled.len() - 1
            }
        }
    }

    /// A received packet: a whole invocation, the start of a long one, or more of it.
    fn take_packet(&mut self, d: Delivery) -> Option<Invocation> {
        let src = d.src as usize;
        let p = self
            .ep
            .engine
            .packet(d.packet)
            .and_then(|p| p.get(..d.len))?;
        let Some(part) = self.partial.get_mut(src) else {
            let _ = self.ep.engine.packet_free(d.packet);
            return None;
        };
        if part.want > part.buf.len() {
            let n = (part.want - part.buf.len()).min(p.len());
            part.buf.extend_from_slice(&p[..n]);
            let _ = self.ep.engine.packet_free(d.packet);
            if part.buf.len() < part.want {
                return None;
            }
            let (tag, data) = (part.tag, core::mem::take(&mut part.buf));
            part.want = 0;
            let len = data.len();
            let i = self.store(data);
            return Some(Invocation {
                who: d.src,
                tag,
                len,
                at: InvocationData::Assembled(i),
            });
        }
        if p.len() < INVOKE_HEAD {
            let _ = self.ep.engine.packet_free(d.packet);
            return None;
        }
        let tag = i32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        let len = u32::from_be_bytes([p[4], p[5], p[6], p[7]]) as usize;
        let here = p.len() - INVOKE_HEAD;
        if len <= here {
            return Some(Invocation {
                who: d.src,
                tag,
                len,
                at: if len == 0 {
                    let _ = self.ep.engine.packet_free(d.packet);
                    InvocationData::Empty
                } else {
                    InvocationData::Packet(d.packet)
                },
            });
        }
        if len > AINVOKE_MAX {
            let _ = self.ep.engine.packet_free(d.packet);
            return None;
        }
        part.tag = tag;
        part.want = len;
        part.buf.clear();
        if part.buf.capacity() == 0 {
            // A long invocation is put together in a kept buffer where there is one.
            part.buf = self.spares.pop().unwrap_or_default();
        }
        part.buf.extend_from_slice(&p[INVOKE_HEAD..]);
        let _ = self.ep.engine.packet_free(d.packet);
        None
    }

    /// An invocation's buffer.
    pub fn invocation_data(&self, inv: &Invocation) -> &[u8] {
        match inv.at {
            InvocationData::Packet(id) => self
                .ep
                .engine
                .packet(id)
                .and_then(|p| p.get(INVOKE_HEAD..INVOKE_HEAD + inv.len))
                .unwrap_or(&[]),
            InvocationData::Assembled(i) => self
                .assembled
                .get(i)
                .and_then(|b| b.as_deref())
                .unwrap_or(&[]),
            InvocationData::Empty => &[],
        }
    }

    /// Ends an invocation: its buffer is recycled.
    pub fn invocation_done(&mut self, inv: Invocation) {
        match inv.at {
            InvocationData::Packet(id) => {
                let _ = self.ep.engine.packet_free(id);
            }
            InvocationData::Assembled(i) => {
                if let Some(b) = self.assembled.get_mut(i).and_then(Option::take) {
                    self.keep(b);
                }
            }
            InvocationData::Empty => {}
        }
    }

    /// Counts an invocation dropped for want of a handler (for a C facade).
    pub fn note_unhandled(&mut self) {
        self.stats.unhandled += 1;
    }

    /// `cheetah_core_wait`: polls (running handlers) until the `i32` bell at `bell`
    /// is at least `value`.
    pub fn wait(&mut self, bell: u64, value: i32) -> Result<(), Error> {
        loop {
            if self.bell(bell)? >= value {
                return Ok(());
            }
            let busy = self.progress()?;
            if let Some(n) = self.dead_context() {
                self.failed = Some((n, Error::SendFailure));
                return Err(Error::SendFailure);
            }
            let ran = self.run_handlers();
            self.idle_step(busy || ran > 0);
        }
    }

    /// The value of the bell at `bell`.
    pub fn bell(&mut self, bell: u64) -> Result<i32, Error> {
        let mut b = [0u8; 4];
        self.mem.read(bell, &mut b)?;
        Ok(i32::from_ne_bytes(b))
    }

    /// `cheetah_core_barrier`: every context reaches it before any leaves; handlers
    /// keep running meanwhile.
    pub fn barrier(&mut self) -> Result<(), Error> {
        if self.finalized {
            return Err(Error::BadConfig);
        }
        self.ep.engine.start_barrier()?;
        loop {
            let busy = self.progress()?;
            let ran = self.run_handlers();
            if self.ep.engine.barrier_done()? {
                return Ok(());
            }
            self.idle_step(busy || ran > 0);
        }
    }

    // ------------------------------------------------------------ accessors

    /// Counters.
    pub fn stats(&self) -> CheetahStats {
        self.stats
    }
    /// The memory peers reach.
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// The memory peers reach, to change.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }
    /// Ends the context, giving back its device (after [`Cheetah::finalize`]).
    pub fn into_device(self) -> D {
        self.ep.dev
    }
    /// The device and the memory together (a deployment that reads what peers
    /// published on the device while it changes its memory's view of them).
    pub fn device_and_memory_mut(&mut self) -> (&mut D, &mut M) {
        (&mut self.ep.dev, &mut self.mem)
    }
    /// When the engine next needs a poll (`None`: only when a frame comes).
    pub fn poll_at(&self) -> Option<Instant> {
        self.ep.engine.poll_at(self.ep.clock.now())
    }

    /// Whether the next poll has work with no frame arriving: invocations waiting
    /// for their handlers (an event loop polls before it sleeps).
    pub fn work_waiting(&self) -> bool {
        !self.own.is_empty() || self.ep.engine.deliveries_pending() > 0
    }

    /// When a poll next probes the peers (`Config::keepalive`): an event loop
    /// that sleeps wakes then too, so that a peer's death is found meanwhile.
    pub fn keepalive_at(&self) -> Option<Instant> {
        Some(self.last_keepalive + self.ep.engine.config().keepalive)
    }
}
