//! Remote fetch-and-add on per-endpoint counters (LFC's `lfc_fetch_and_add`: one
//! variable per NIC, starting at 0).
//!
//! A request is a reliable `FETCH_ADD` frame (`msg_id` = request id, `dst_port` =
//! counter, `offset` = delta); the owner's engine applies it when it accepts the
//! frame, which the channel's sequence space makes exactly once, and answers with a
//! reliable `FETCH_ADD_REPLY` (`offset` = the value before the add). No handler of
//! the owner runs. A device that does it in NIC memory (`NicAtomics::fetch_add`) is asked
//! first by the personalities, and then no frame is sent at all.

use super::*;

/// Counters each endpoint serves (LFC: one per NIC; the Myrinet-like model has 8).
pub const COUNTERS: usize = 8;
/// Fetch-and-adds one endpoint may have waiting for their answer.
pub const FETCH_SLOTS: usize = 16;

/// Handle of a fetch-and-add in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FetchHandle(u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum FetchState {
    #[default]
    Free,
    Waiting,
    Done(u32),
    Failed,
}

/// One fetch-and-add waiting for its answer.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Fetch {
    pub(super) state: FetchState,
    pub(super) gen: u16,
    pub(super) chan: u16,
    pub(super) req: u32,
}

/// The counters this endpoint serves and the requests it has made.
#[derive(Debug, Clone, Default)]
pub(super) struct Atomics {
    pub(super) counters: [u32; COUNTERS],
    pub(super) fetches: [Fetch; FETCH_SLOTS],
    pub(super) next_req: u32,
}

impl Atomics {
    /// The owner on channel `ci` died: its requests fail.
    pub(super) fn fail(&mut self, ci: usize) {
        for f in self.fetches.iter_mut() {
            if f.state == FetchState::Waiting && f.chan == ci as u16 {
                f.state = FetchState::Failed;
            }
        }
    }

    /// Requests waiting for their answers.
    pub(super) fn waiting(&self) -> bool {
        self.fetches.iter().any(|f| f.state == FetchState::Waiting)
    }
}

impl<'a> Engine<'a> {
    /// Starts adding `delta` to counter `var` of instance `node` of group `group`; the
    /// answer (the value before the add) comes from [`Engine::fetch_add_result`].
    /// Personalities first try [`crate::phy::NicAtomics::fetch_add`], which needs no frame.
    pub fn start_fetch_add(
        &mut self,
        group: GroupId,
        node: NodeId,
        var: u16,
        delta: u32,
    ) -> Result<FetchHandle, Error> {
        if var as usize >= COUNTERS {
            return Err(Error::InvalidCounter);
        }
        let addr = self.addr_of(group, node)?;
        let slot = self
            .atomics
            .fetches
            .iter()
            .position(|f| f.state == FetchState::Free)
            .ok_or(Error::NoResources)?;
        let ci = self.channel_for(addr, group, node)?;
        let ch = &mut self.chans.table[ci];
        if ch.failed {
            return Err(Error::SendFailure);
        }
        let req = self.atomics.next_req;
        self.chans.work.set(true);
        if !ch.queue_ctrl(Slot::FetchAdd { req, var, delta }) {
            return Err(Error::NoResources);
        }
        self.atomics.next_req = req.wrapping_add(1);
        let f = &mut self.atomics.fetches[slot];
        f.gen = f.gen.wrapping_add(1);
        f.state = FetchState::Waiting;
        f.chan = ci as u16;
        f.req = req;
        Ok(FetchHandle((f.gen as u32) << 16 | slot as u32))
    }

    /// `Ok(Some(old value))` once the answer is in (the handle is then spent),
    /// `Ok(None)` while it is not, `Err(SendFailure)` if the owner died.
    pub fn fetch_add_result(&mut self, h: FetchHandle) -> Result<Option<u32>, Error> {
        let f = self
            .atomics
            .fetches
            .get_mut((h.0 & 0xFFFF) as usize)
            .filter(|f| f.gen == (h.0 >> 16) as u16 && f.state != FetchState::Free)
            .ok_or(Error::InvalidHandle)?;
        match f.state {
            FetchState::Done(v) => {
                f.state = FetchState::Free;
                Ok(Some(v))
            }
            FetchState::Failed => {
                f.state = FetchState::Free;
                Err(Error::SendFailure)
            }
            _ => Ok(None),
        }
    }

    /// Adds `delta` to this endpoint's own counter `var`; the value before.
    pub(crate) fn fetch_add_local(&mut self, var: u16, delta: u32) -> Result<u32, Error> {
        let c = self
            .atomics
            .counters
            .get_mut(var as usize)
            .ok_or(Error::InvalidCounter)?;
        let v = *c;
        *c = c.wrapping_add(delta);
        Ok(v)
    }

    /// The fabric address of instance `node` of group `group`.
    pub(crate) fn address(&self, group: GroupId, node: NodeId) -> Result<NodeAddr, Error> {
        self.addr_of(group, node)
    }

    /// The value of one of this endpoint's own counters.
    pub fn counter(&self, var: u16) -> Result<u32, Error> {
        self.atomics
            .counters
            .get(var as usize)
            .copied()
            .ok_or(Error::InvalidCounter)
    }

    /// A `FETCH_ADD` request accepted in sequence: apply it once and queue the answer.
    /// `false` (refuse, the peer sends it again) if there is no room for the answer.
    pub(super) fn rx_fetch_add(&mut self, ci: usize, repr: &Repr) -> bool {
        let ch = &mut self.chans.table[ci];
        if ch.ctrl_full() {
            return false;
        }
        let Some(c) = self.atomics.counters.get_mut(repr.ends.dst_port as usize) else {
            // Not a counter: nothing to add to; the requester learns nothing and its
            // request was malformed (only a foreign build sends one).
            self.stats.rx_malformed += 1;
            return true;
        };
        let value = *c;
        *c = c.wrapping_add(repr.offset);
        // Room was checked above.
        self.chans.work.set(true);
        ch.queue_ctrl(Slot::FetchAddReply {
            req: repr.msg_id,
            value,
        })
    }

    /// A `FETCH_ADD_REPLY` accepted in sequence: the answer to one of our requests.
    pub(super) fn rx_fetch_reply(&mut self, ci: usize, repr: &Repr) {
        let found = self.atomics.fetches.iter_mut().find(|f| {
            f.state == FetchState::Waiting && f.chan == ci as u16 && f.req == repr.msg_id
        });
        match found {
            Some(f) => f.state = FetchState::Done(repr.offset),
            None => self.stats.rx_dropped += 1,
        }
    }
}
