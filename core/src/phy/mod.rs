//! The frame device interface, in the token style of `smoltcp::phy::Device`.
//!
//! A device moves whole Volley frames between fabric addresses. Receiving hands out
//! an [`RxToken`] that lends the frame in place (a ring slot, NIC memory) until it is
//! consumed; transmitting hands out a [`TxToken`] that lends a device buffer to write
//! the frame into. `transmit` returns `None` when the device has no room for that
//! destination right now (ring full, no credit): the engine tries again on a later poll.
//!
//! Wrappers compose: [`FaultInjector`] around anything, [`PcapWriter`] (with `std`)
//! around anything.

use crate::time::Instant;
use crate::NodeAddr;

mod fault;
mod loopback;
#[cfg(feature = "std")]
mod pcap;

pub use fault::{FaultConfig, FaultInjector, FaultStats};
pub use loopback::{Loopback, Ring};
#[cfg(feature = "std")]
pub use pcap::PcapWriter;

/// What a device can do, read once when the engine starts using it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Largest frame, Volley header included, the device carries.
    pub mtu: usize,
    /// The link never drops, duplicates or reorders frames (Myrinet, shared memory):
    /// the engine then skips acknowledgements and retransmission and keeps only credits.
    pub reliable: bool,
    /// The link never corrupts frames: the CRC may be skipped.
    pub integrity: bool,
    /// A broadcast board ([`Device::board_transmit`]): nodes it reaches, the
    /// sender included, at fabric addresses `0..board_nodes`; 0 when there is none.
    pub board_nodes: u16,
    /// Largest frame the board carries.
    pub board_mtu: usize,
    /// Send slots in the device's own memory ([`Device::pool_slot`]) that a program
    /// may fill and the device sends from where they lie; 0 when there are none.
    pub pool_slots: u16,
    /// Bytes per pool slot.
    pub pool_slot_size: usize,
    /// The device names the sender of every frame it receives
    /// ([`RxToken::source`]), delivers a frame only to the node it was sent to,
    /// never corrupts one, and carries one job alone: a job without a key may send
    /// its short messages under the compact header ([`crate::wire::COMPACT_LEN`]
    /// bytes). Every node on the device must say the same.
    pub compact: bool,
}

impl Capabilities {
    /// A device with no broadcast board.
    pub const fn new(mtu: usize, reliable: bool, integrity: bool) -> Capabilities {
        Capabilities {
            mtu,
            reliable,
            integrity,
            board_nodes: 0,
            board_mtu: 0,
            pool_slots: 0,
            pool_slot_size: 0,
            compact: false,
        }
    }
}

/// Where a barrier that the device runs in its own memory stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierPoll {
    /// The device has no barrier of its own: the engine exchanges frames instead.
    Unsupported,
    /// Not every member has arrived yet.
    Pending,
    /// Every member has arrived: the barrier is over for this member.
    Done,
}

/// The members of a barrier, as the device sees them: `n` positions, the caller at
/// position `me`, position `i` at fabric address `addr(i)`. Every member passes the
/// same list, so a device can lay a tree over the positions without talking.
pub struct BarrierMembers<'a> {
    /// The caller's position.
    pub me: u16,
    /// Number of members.
    pub n: u16,
    /// Fabric address of a position (`None` outside `0..n`).
    pub addr: &'a dyn Fn(u16) -> Option<NodeAddr>,
}

impl core::fmt::Debug for BarrierMembers<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BarrierMembers")
            .field("me", &self.me)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

/// A received frame, lent until consumed.
pub trait RxToken {
    /// Hands the frame bytes to `f`, then releases the slot.
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R;

    /// The fabric address the device saw the frame come from, if it knows (a UDP
    /// source address it maps to a rank): the engine drops a frame whose header
    /// claims another sender.
    fn source(&self) -> Option<NodeAddr> {
        None
    }

    /// Hands the frame to `f` as two parts laid end to end: for a frame whose payload
    /// the device left where its sender wrote it ([`Device::transmit_pooled`]), the
    /// header part here and the payload in the sender's send slot; for any other
    /// frame, the whole frame and an empty second part.
    fn consume_parts<R, F: FnOnce(&[u8], &[u8]) -> R>(self, f: F) -> R
    where
        Self: Sized,
    {
        self.consume(|b| f(b, &[]))
    }
}

/// Room for one frame to a known destination, lent until consumed.
pub trait TxToken {
    /// Lends `len` bytes (at most the MTU) for `f` to fill, then sends them.
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R;
}

/// A frame device.
pub trait Device {
    /// Token for a received frame.
    type RxToken<'a>: RxToken
    where
        Self: 'a;
    /// Token for a frame to send.
    type TxToken<'a>: TxToken
    where
        Self: 'a;

    /// The next received frame, if any.
    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>>;
    /// Room to send one frame to `dst`, if the device has it now.
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>>;
    /// The device's capabilities. They must not change while an engine uses the
    /// device: an engine reads them at its first poll only.
    fn capabilities(&self) -> Capabilities;
    /// Whether the device still believes `peer` is alive (a liveness word, a heartbeat,
    /// a link state). The engine asks when a retransmission timer fires and declares the
    /// peer dead at once on `false`. Devices that cannot tell answer `true`, and the
    /// engine's retry limit decides.
    fn peer_alive(&mut self, _now: Instant, _peer: NodeAddr) -> bool {
        true
    }
    /// Whether the device has lately seen `peer`'s process alive by means of its own
    /// (a beacon word in shared memory that a helper of the peer's process moves while
    /// its program computes). The engine asks before it declares a peer that has been
    /// silent for the whole peer timeout dead, and on `true` goes on waiting for it:
    /// alive but not calling in is not dead. Devices that cannot tell answer `false`.
    fn peer_vouched(&mut self, _now: Instant, _peer: NodeAddr) -> bool {
        false
    }
    /// Adds `delta` to counter `var` of `peer`'s NIC and returns the previous value,
    /// if the device does it itself (the Myrinet-like model, in NIC memory, with no CPU
    /// of the peer involved); `None` and the engine runs the protocol instead.
    fn fetch_add(&mut self, _peer: NodeAddr, _var: u16, _delta: u32) -> Option<u32> {
        None
    }
    /// Advances this member's next barrier among `members`, if the device runs
    /// barriers itself (the Myrinet-like model: a combining tree of flags in NIC
    /// memory, no frames). Called again on every poll until it answers `Done`; the
    /// call after that starts the next barrier. The device numbers the barriers, so
    /// engines that take turns on one device continue one sequence. Liveness stays
    /// the engine's job. Devices without one answer `Unsupported`, and every member
    /// of a job must answer alike.
    fn barrier(&mut self, _now: Instant, _members: &BarrierMembers<'_>) -> BarrierPoll {
        BarrierPoll::Unsupported
    }
    /// Sends what earlier transmit tokens queued. Devices that batch frames and tell
    /// the hardware once per batch (a kernel packet ring: one system call) do it
    /// here; the engine calls it at the end of each transmit pass.
    fn flush(&mut self, _now: Instant) {}
    /// Payload bytes from which the engine sends a frame with
    /// [`Device::transmit_parts`] instead of filling a transmit token; `usize::MAX`
    /// (the default): never.
    fn gather_from(&self) -> usize {
        usize::MAX
    }
    /// Sends one frame to `dst` given as `parts` laid end to end (header, the payload
    /// where it lies in the program's memory, tag), for a device whose kernel copies
    /// the frame anyway (`sendmsg` with an I/O vector): it spares the copy into a
    /// transmit buffer; or for one that copies long payloads its own way (the hosted
    /// `shm` device's non-temporal stores). `false` when there is no room now.
    /// Called only for frames with at least [`Device::gather_from`] payload bytes, in
    /// order with earlier tokens.
    fn transmit_parts(&mut self, _now: Instant, _dst: NodeAddr, _parts: &[&[u8]]) -> bool {
        false
    }
    /// Writes one frame of `len` bytes (at most `board_mtu`), filled by `fill`, once
    /// into this node's broadcast board, where every other node reads it in place
    /// (the Myrinet-like model: NIC memory that the whole job maps). Frames leave in
    /// the order written and are never lost while their reader lives. `false`: no
    /// room now (a reader has not taken an older frame yet), or no board.
    fn board_transmit(
        &mut self,
        _now: Instant,
        _len: usize,
        _fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        false
    }
    /// [`Device::board_transmit`] of a frame given as `parts` laid end to end
    /// (header, the payload's pieces where they lie, tag), for a device that copies
    /// long payloads its own way (the hosted `shm` device's non-temporal stores, as
    /// [`Device::transmit_parts`]). Called only for frames with at least
    /// [`Device::gather_from`] payload bytes.
    fn board_transmit_parts(&mut self, now: Instant, parts: &[&[u8]]) -> bool {
        let len = parts.iter().map(|p| p.len()).sum();
        self.board_transmit(now, len, &mut |buf| {
            let mut rest = buf;
            for p in parts {
                let n = p.len().min(rest.len());
                let (d, tail) = rest.split_at_mut(n);
                d.copy_from_slice(&p[..n]);
                rest = tail;
            }
        })
    }
    /// Send slot `i` of the device's own memory (`i` below
    /// [`Capabilities::pool_slots`]), read-only.
    fn pool_slot(&self, _i: usize) -> Option<&[u8]> {
        None
    }
    /// Send slot `i`, for the program to fill (LFC: `lfc_send_alloc` hands out a
    /// transmit slot of the device). The engine lends a slot out only while no frame
    /// that reads it is still unread.
    fn pool_slot_mut(&mut self, _i: usize) -> Option<&mut [u8]> {
        None
    }
    /// Sends one frame to `dst` whose payload is the first `len` bytes of send slot
    /// `slot`, read where it lies: `head` (the header) before it and `tail` (the tag)
    /// after it. The receiver gets the frame through [`RxToken::consume_parts`].
    /// `false` when there is no room now or no pool.
    fn transmit_pooled(
        &mut self,
        _now: Instant,
        _dst: NodeAddr,
        _head: &[u8],
        _slot: usize,
        _len: usize,
        _tail: &[u8],
    ) -> bool {
        false
    }
    /// [`Device::board_transmit`] of a frame made of `head`, the first `len` bytes of
    /// send slot `slot` and `tail`, which the device moves into the board itself.
    fn board_transmit_pooled(
        &mut self,
        _now: Instant,
        _head: &[u8],
        _slot: usize,
        _len: usize,
        _tail: &[u8],
    ) -> bool {
        false
    }
    /// Offers every other node's oldest unread board frame to `take`, with the
    /// node's fabric address. A frame it takes ([`BoardTake::Taken`]) is consumed
    /// and the node's next one offered; one it refuses stays, and holds back that
    /// node's later frames until a later call. Returns whether any frame was taken.
    fn board_receive(
        &mut self,
        _now: Instant,
        _take: &mut dyn FnMut(NodeAddr, &[u8]) -> BoardTake,
    ) -> bool {
        false
    }
    /// Whether a frame this node wrote into its board is still unread by a live
    /// reader (see [`Device::peer_alive`]) that has not said it holds it back
    /// ([`BoardTake::Held`]): the NIC barrier waits for the rest, as for acks of
    /// frames on the rings.
    fn board_unread(&mut self, _now: Instant) -> bool {
        false
    }
    /// Whether [`Device::transmit`], [`Device::transmit_parts`] and
    /// [`Device::flush`] read the `now` they are given. Where they do not, a send
    /// that leaves at once reads the clock only after its frame has left (the
    /// engine's `send_now_timed`), so the read does not delay the frame.
    fn transmit_reads_time(&self) -> bool {
        true
    }
    /// Whether a frame may be waiting for [`Device::receive`] or
    /// [`Device::board_receive`]: `false` only where a look at memory (no system
    /// call, no side effect) finds none. A waiting call that found nothing looks
    /// here between its polls, so it notices a frame within a few loads instead of
    /// a whole poll. The default: maybe (a call just polls).
    fn rx_pending(&self) -> bool {
        true
    }
}

/// What a reader did with a board frame offered by [`Device::board_receive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardTake {
    /// Consumed: the next one may come.
    Taken,
    /// Refused for a moment (the engine is busy with another message).
    Later,
    /// Refused until the program acts (its port is not bound yet): its writer
    /// need not wait for it before a barrier.
    Held,
}

impl<D: Device> Device for &mut D {
    type RxToken<'a>
        = D::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = D::TxToken<'a>
    where
        Self: 'a;
    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
        (**self).receive(now)
    }
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>> {
        (**self).transmit(now, dst)
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn peer_alive(&mut self, now: Instant, peer: NodeAddr) -> bool {
        (**self).peer_alive(now, peer)
    }
    fn peer_vouched(&mut self, now: Instant, peer: NodeAddr) -> bool {
        (**self).peer_vouched(now, peer)
    }
    fn fetch_add(&mut self, peer: NodeAddr, var: u16, delta: u32) -> Option<u32> {
        (**self).fetch_add(peer, var, delta)
    }
    fn barrier(&mut self, now: Instant, members: &BarrierMembers<'_>) -> BarrierPoll {
        (**self).barrier(now, members)
    }
    fn flush(&mut self, now: Instant) {
        (**self).flush(now)
    }
    fn gather_from(&self) -> usize {
        (**self).gather_from()
    }
    fn transmit_parts(&mut self, now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        (**self).transmit_parts(now, dst, parts)
    }
    fn board_transmit(
        &mut self,
        now: Instant,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        (**self).board_transmit(now, len, fill)
    }
    fn board_transmit_parts(&mut self, now: Instant, parts: &[&[u8]]) -> bool {
        (**self).board_transmit_parts(now, parts)
    }
    fn board_receive(
        &mut self,
        now: Instant,
        take: &mut dyn FnMut(NodeAddr, &[u8]) -> BoardTake,
    ) -> bool {
        (**self).board_receive(now, take)
    }
    fn board_unread(&mut self, now: Instant) -> bool {
        (**self).board_unread(now)
    }
    fn transmit_reads_time(&self) -> bool {
        (**self).transmit_reads_time()
    }
    fn rx_pending(&self) -> bool {
        (**self).rx_pending()
    }
    fn pool_slot(&self, i: usize) -> Option<&[u8]> {
        (**self).pool_slot(i)
    }
    fn pool_slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        (**self).pool_slot_mut(i)
    }
    fn transmit_pooled(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        (**self).transmit_pooled(now, dst, head, slot, len, tail)
    }
    fn board_transmit_pooled(
        &mut self,
        now: Instant,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        (**self).board_transmit_pooled(now, head, slot, len, tail)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use super::loopback::{Loopback, Ring};
    use super::*;

    /// A loopback with a one-frame board that keeps what is written, `full` when
    /// it has no room.
    struct Board<'r> {
        lo: Loopback<'r, 4, 256>,
        frame: Vec<u8>,
        full: bool,
    }

    impl Device for Board<'_> {
        type RxToken<'a>
            = <Loopback<'static, 4, 256> as Device>::RxToken<'a>
        where
            Self: 'a;
        type TxToken<'a>
            = <Loopback<'static, 4, 256> as Device>::TxToken<'a>
        where
            Self: 'a;
        fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
            self.lo.receive(now)
        }
        fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>> {
            self.lo.transmit(now, dst)
        }
        fn capabilities(&self) -> Capabilities {
            self.lo.capabilities()
        }
        fn board_transmit(
            &mut self,
            _now: Instant,
            len: usize,
            fill: &mut dyn FnMut(&mut [u8]),
        ) -> bool {
            if self.full {
                return false;
            }
            self.frame = std::vec![0xEE; len];
            fill(&mut self.frame);
            true
        }
    }

    /// A device that copies long board frames no way of its own gets them through
    /// its `board_transmit`, the parts laid end to end, and says so when it is full,
    /// through a `&mut` too.
    #[test]
    fn board_parts_are_written_end_to_end_by_default() {
        let mut rings: Vec<Ring<4, 256>> = (0..2).map(|_| Ring::new()).collect();
        let mut b = Board {
            lo: Loopback::new(&mut rings, NodeAddr(0)),
            frame: Vec::new(),
            full: false,
        };
        let parts: [&[u8]; 5] = [b"head", b"", b"prefix", &[7; 300], b"tag"];
        let mut through = &mut b;
        assert!(Device::board_transmit_parts(
            &mut through,
            Instant::ZERO,
            &parts
        ));
        assert_eq!(b.frame, parts.concat());
        b.full = true;
        b.frame.clear();
        assert!(!b.board_transmit_parts(Instant::ZERO, &parts));
        assert!(b.frame.is_empty());
    }
}
