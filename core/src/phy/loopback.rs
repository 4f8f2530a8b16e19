//! An in-memory fabric: one fixed ring of frame slots per node, storage from the caller.
//!
//! `Loopback::new(&mut rings, me)` is a cheap view for node `me`: transmitting to `d`
//! writes into `rings[d]`, receiving reads `rings[me]`. A full ring refuses the
//! transmit token, so nothing is ever dropped: the fabric declares itself reliable.
//! `Loopback::vouching` is the same view on a fabric that, like the Myrinet-like
//! model, names each frame's sender and carries one job: it offers
//! [`Capabilities::compact`].

use super::{Capabilities, Device, RxToken, TxToken};
use crate::time::Instant;
use crate::NodeAddr;

/// A FIFO of `SLOTS` frames of at most `MTU` bytes each.
#[derive(Debug, Clone)]
pub struct Ring<const SLOTS: usize, const MTU: usize> {
    slots: [[u8; MTU]; SLOTS],
    lens: [usize; SLOTS],
    /// Each slot's sender.
    from: [u16; SLOTS],
    head: usize,
    count: usize,
}

impl<const SLOTS: usize, const MTU: usize> Default for Ring<SLOTS, MTU> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const SLOTS: usize, const MTU: usize> Ring<SLOTS, MTU> {
    /// An empty ring.
    pub const fn new() -> Self {
        Ring {
            slots: [[0; MTU]; SLOTS],
            lens: [0; SLOTS],
            from: [0; SLOTS],
            head: 0,
            count: 0,
        }
    }
    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.count
    }
    /// True when no frame waits.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Node `me`'s view of a set of rings.
#[derive(Debug)]
pub struct Loopback<'r, const SLOTS: usize, const MTU: usize> {
    rings: &'r mut [Ring<SLOTS, MTU>],
    me: usize,
    vouching: bool,
}

impl<'r, const SLOTS: usize, const MTU: usize> Loopback<'r, SLOTS, MTU> {
    /// The view of node `me` (which must index `rings`).
    pub fn new(rings: &'r mut [Ring<SLOTS, MTU>], me: NodeAddr) -> Self {
        Loopback {
            rings,
            me: me.0 as usize,
            vouching: false,
        }
    }

    /// [`Loopback::new`] on a fabric that names each frame's sender
    /// ([`RxToken::source`]) and offers [`Capabilities::compact`].
    pub fn vouching(rings: &'r mut [Ring<SLOTS, MTU>], me: NodeAddr) -> Self {
        Loopback {
            vouching: true,
            ..Loopback::new(rings, me)
        }
    }
}

/// Lends the oldest frame of a ring.
#[derive(Debug)]
pub struct LoopRx<'a, const SLOTS: usize, const MTU: usize> {
    ring: &'a mut Ring<SLOTS, MTU>,
    vouching: bool,
}

/// Lends the next free slot of a ring.
#[derive(Debug)]
pub struct LoopTx<'a, const SLOTS: usize, const MTU: usize> {
    ring: &'a mut Ring<SLOTS, MTU>,
    me: u16,
}

impl<const SLOTS: usize, const MTU: usize> RxToken for LoopRx<'_, SLOTS, MTU> {
    fn source(&self) -> Option<NodeAddr> {
        let r = &self.ring;
        self.vouching.then_some(NodeAddr(r.from[r.head]))
    }

    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = self.ring;
        let i = r.head;
        let out = f(&r.slots[i][..r.lens[i]]);
        r.head = (r.head + 1) % SLOTS;
        r.count -= 1;
        out
    }
}

impl<const SLOTS: usize, const MTU: usize> TxToken for LoopTx<'_, SLOTS, MTU> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let r = self.ring;
        let i = (r.head + r.count) % SLOTS;
        let len = len.min(MTU);
        let out = f(&mut r.slots[i][..len]);
        r.lens[i] = len;
        r.from[i] = self.me;
        r.count += 1;
        out
    }
}

impl<const SLOTS: usize, const MTU: usize> Device for Loopback<'_, SLOTS, MTU> {
    type RxToken<'a>
        = LoopRx<'a, SLOTS, MTU>
    where
        Self: 'a;
    type TxToken<'a>
        = LoopTx<'a, SLOTS, MTU>
    where
        Self: 'a;

    fn receive(&mut self, _now: Instant) -> Option<Self::RxToken<'_>> {
        let ring = self.rings.get_mut(self.me)?;
        let vouching = self.vouching;
        (ring.count > 0).then_some(LoopRx { ring, vouching })
    }

    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>> {
        let ring = self.rings.get_mut(dst.0 as usize)?;
        let me = self.me as u16;
        (ring.count < SLOTS).then_some(LoopTx { ring, me })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            compact: self.vouching,
            ..Capabilities::new(MTU, true, true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_backpressure() {
        let mut rings = [Ring::<2, 16>::new(), Ring::new()];
        let mut a = Loopback::new(&mut rings, NodeAddr(0));
        for v in 1..=2u8 {
            a.transmit(Instant::ZERO, NodeAddr(1))
                .unwrap()
                .consume(3, |b| b.fill(v));
        }
        assert!(
            a.transmit(Instant::ZERO, NodeAddr(1)).is_none(),
            "full ring must refuse"
        );
        assert!(a.receive(Instant::ZERO).is_none());
        assert!(
            a.transmit(Instant::ZERO, NodeAddr(9)).is_none(),
            "unknown node"
        );
        let mut b = Loopback::new(&mut rings, NodeAddr(1));
        assert_eq!(
            b.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec()),
            [1, 1, 1]
        );
        assert_eq!(
            b.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec()),
            [2, 2, 2]
        );
        assert!(b.receive(Instant::ZERO).is_none());
    }

    #[test]
    fn a_vouching_view_names_the_sender_and_offers_compact_headers() {
        let mut rings = [Ring::<2, 16>::new(), Ring::new(), Ring::new()];
        for from in [0u16, 2] {
            Loopback::new(&mut rings, NodeAddr(from))
                .transmit(Instant::ZERO, NodeAddr(1))
                .unwrap()
                .consume(1, |b| b[0] = from as u8);
        }
        let mut plain = Loopback::new(&mut rings, NodeAddr(1));
        assert!(!plain.capabilities().compact);
        // (A token not consumed leaves its frame.)
        assert_eq!(plain.receive(Instant::ZERO).unwrap().source(), None);
        let mut b = Loopback::vouching(&mut rings, NodeAddr(1));
        assert!(b.capabilities().compact);
        for from in [0u16, 2] {
            let tok = b.receive(Instant::ZERO).unwrap();
            assert_eq!(tok.source(), Some(NodeAddr(from)));
            assert_eq!(tok.consume(|f| f[0]), from as u8);
        }
    }
}
