//! Send and receive contexts: the lists, their regions, doorbells and completion.

use super::*;

/// A send or receive context.
#[derive(Debug, Default)]
pub(super) struct Ctx {
    pub(super) used: bool,
    /// The receiver of a send, the sender of a receive.
    pub(super) peer: Name,
    pub(super) tag: i32,
    pub(super) doorbell: bool,
    pub(super) len: usize,
    pub(super) region: Region,
    /// A posted receive's region, resolved.
    pub(super) segs: Vec<(u64, usize)>,
    /// Bytes received by the last completed receive.
    pub(super) got: usize,
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    /// `qx_send_context`: fills the first free send context; returns its index.
    /// `size` (packets) is checked for sign only: Volley derives packets from `len`.
    #[allow(clippy::too_many_arguments)]
    pub fn send_context(
        &mut self,
        to: Name,
        tag: i32,
        doorbell: bool,
        size: i32,
        len: usize,
        region: Region,
    ) -> Result<usize, QxError> {
        if matches!(&region, Region::Data(d) if d.len() < len) {
            return Err(QxError::Invalid);
        }
        self.new_context(SEND, to, tag, doorbell, size, len, region)
    }

    /// `qx_recv_context`: fills the first free receive context; returns its index.
    /// `size` (pages) is checked for sign only.
    #[allow(clippy::too_many_arguments)]
    pub fn recv_context(
        &mut self,
        from: Name,
        tag: i32,
        doorbell: bool,
        size: i32,
        len: usize,
        region: Region,
    ) -> Result<usize, QxError> {
        if matches!(region, Region::Data(_)) {
            return Err(QxError::Invalid);
        }
        self.new_context(RECV, from, tag, doorbell, size, len, region)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_context(
        &mut self,
        side: usize,
        peer: Name,
        tag: i32,
        doorbell: bool,
        size: i32,
        len: usize,
        region: Region,
    ) -> Result<usize, QxError> {
        self.ready()?;
        if size < 0 {
            return Err(QxError::Invalid);
        }
        if len > MESSAGE_MAX {
            return Err(QxError::TooLong);
        }
        let i = self.ctxs[side]
            .iter()
            .position(|c| !c.used)
            .ok_or(QxError::NoContext)?;
        self.ctxs[side][i] = Ctx {
            used: true,
            peer,
            tag,
            doorbell,
            len,
            region,
            ..Ctx::default()
        };
        self.set_bell(side, i, FREE);
        Ok(i)
    }

    /// Replaces a send context's region (a C facade resolves page tables and copies
    /// short data when the command is posted).
    pub fn set_send_region(&mut self, ctx: usize, region: Region) -> Result<(), QxError> {
        self.idle(SEND, ctx)?;
        let old = core::mem::replace(&mut self.ctxs[SEND][ctx].region, region);
        self.spares.give_region(old);
        Ok(())
    }

    /// Replaces a receive context's region.
    pub fn set_recv_region(&mut self, ctx: usize, region: Region) -> Result<(), QxError> {
        self.idle(RECV, ctx)?;
        self.ctxs[RECV][ctx].region = region;
        Ok(())
    }

    /// A send context's length and region.
    pub fn send_context_info(&self, ctx: usize) -> Option<(usize, &Region)> {
        self.context_info(SEND, ctx)
    }

    /// A receive context's length and region.
    pub fn recv_context_info(&self, ctx: usize) -> Option<(usize, &Region)> {
        self.context_info(RECV, ctx)
    }

    pub(super) fn context_info(&self, side: usize, ctx: usize) -> Option<(usize, &Region)> {
        self.ctxs[side]
            .get(ctx)
            .filter(|c| c.used)
            .map(|c| (c.len, &c.region))
    }

    /// Context `ctx` of `side` is in use and has nothing posted.
    pub(super) fn idle(&self, side: usize, ctx: usize) -> Result<(), QxError> {
        self.ready()?;
        match self.ctxs[side].get(ctx) {
            Some(c) if c.used => {}
            _ => return Err(QxError::NoContext),
        }
        if self.bells[side][ctx] != FREE {
            return Err(QxError::Busy);
        }
        Ok(())
    }

    /// Writes the doorbell of context `ctx` of `side` and notes it changed.
    #[inline(always)]
    pub(super) fn set_bell(&mut self, side: usize, ctx: usize, v: i32) {
        self.bells[side][ctx] = v;
        self.changed[side] |= 1 << ctx;
    }

    /// The contexts whose doorbells were written since the last call, per side
    /// (`[send, receive]`, bit `i` for context `i`), forgotten here: a facade that
    /// mirrors the doorbells into the program's memory (QNIX's HPS) copies only
    /// those.
    pub fn take_changed_bells(&mut self) -> [u64; 2] {
        core::mem::take(&mut self.changed)
    }

    /// A send context's doorbell.
    pub fn send_doorbell(&self, ctx: usize) -> i32 {
        self.bells[SEND].get(ctx).copied().unwrap_or(FREE)
    }

    /// A receive context's doorbell.
    pub fn recv_doorbell(&self, ctx: usize) -> i32 {
        self.bells[RECV].get(ctx).copied().unwrap_or(FREE)
    }

    // ------------------------------------------------------------ commands

    /// `qx_poll_for_send`: waits (stepping the NIC) until the send context's
    /// operation completes, then frees its doorbell and the context.
    pub fn poll_for_send(&mut self, ctx: usize) -> Result<(), QxError> {
        self.poll_for(SEND, ctx).map(|_| ())
    }

    /// `qx_poll_for_receive`: waits until the receive completes, frees its doorbell
    /// and the context; returns the bytes received.
    pub fn poll_for_receive(&mut self, ctx: usize) -> Result<usize, QxError> {
        self.poll_for(RECV, ctx)
    }

    pub(super) fn poll_for(&mut self, side: usize, ctx: usize) -> Result<usize, QxError> {
        self.ready()?;
        match self.ctxs[side].get(ctx) {
            Some(c) if c.used && c.doorbell => {}
            Some(c) if c.used => return Err(QxError::NoDoorbell),
            _ => return Err(QxError::NoContext),
        }
        if self.bells[side][ctx] == FREE {
            return Err(QxError::Invalid);
        }
        loop {
            let b = self.bells[side][ctx];
            if b != BUSY {
                let got = self.ctxs[side][ctx].got;
                self.free_ctx(side, ctx);
                return match b {
                    DONE => Ok(got),
                    e => Err(QxError::from_code(e).unwrap_or(QxError::Network)),
                };
            }
            let busy = self.step();
            self.idle_step(busy);
        }
    }

    /// A command refused before it was posted gives its context back, as if its
    /// operation had ended: the seed's context lists lend a context for one
    /// operation, and a program that gets an error takes new ones (after 64
    /// refusals it could not send at all otherwise). A context with an operation
    /// posted (its doorbell not FREE) is left alone.
    pub(super) fn refused<T>(
        &mut self,
        side: usize,
        ctx: usize,
        r: Result<T, QxError>,
    ) -> Result<T, QxError> {
        if r.is_err()
            && self.ctxs[side].get(ctx).is_some_and(|c| c.used)
            && self.bells[side][ctx] == FREE
        {
            self.free_ctx(side, ctx);
        }
        r
    }

    /// [`Qnix::send`]'s refusal of send context `ctx` for a cause the caller found
    /// before posting (a facade that resolves the context's memory itself): gives
    /// the context back as a refused command does, and returns `e`.
    pub fn refuse_send(&mut self, ctx: usize, e: QxError) -> QxError {
        let _ = self.refused::<()>(SEND, ctx, Err(e));
        e
    }

    pub(super) fn complete_send(&mut self, ctx: usize, r: Result<(), QxError>) {
        self.complete(SEND, ctx, 0, r);
    }

    pub(super) fn complete_recv(&mut self, ctx: usize, got: usize, r: Result<(), QxError>) {
        self.complete(RECV, ctx, got, r);
    }

    /// Frees context `ctx` of `side`, keeping its resolved region for reuse.
    pub(super) fn free_ctx(&mut self, side: usize, ctx: usize) {
        let old = core::mem::take(&mut self.ctxs[side][ctx]);
        self.spares.give_segs(old.segs);
        self.spares.give_region(old.region);
        self.set_bell(side, ctx, FREE);
    }

    /// Rings the doorbell of `ctx` of `side`, or frees a context without one.
    pub(super) fn complete(&mut self, side: usize, ctx: usize, got: usize, r: Result<(), QxError>) {
        if !self.ctxs[side][ctx].doorbell {
            self.free_ctx(side, ctx);
            return;
        }
        self.ctxs[side][ctx].got = got;
        self.set_bell(side, ctx, r.map_or_else(QxError::code, |()| DONE));
    }

    // ------------------------------------------------------------ the NIC
}
