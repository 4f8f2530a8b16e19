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
pub mod services;

pub use fault::{FaultConfig, FaultInjector, FaultStats};
pub use loopback::{Loopback, Ring};
#[cfg(feature = "std")]
pub use pcap::{write_header, write_record, PcapWriter};
pub use services::{Board, Liveness, NicAtomics, NicBarrier, SendPool};

/// What a device can do, read once when the engine starts using it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Largest frame, Volley header included, the device carries.
    pub mtu: usize,
    /// The link never drops, duplicates or reorders frames (Myrinet, shared memory):
    /// the engine then takes no gap in a peer's acknowledgements for a loss, and a
    /// retransmission timer resends only the oldest frame, as a probe. Acks still
    /// return credits, free the senders' copies and carry refusals.
    pub reliable: bool,
    /// The link never corrupts frames: the CRC may be skipped.
    pub integrity: bool,
    /// A broadcast board ([`Device::board`]): nodes it reaches, the
    /// sender included, at fabric addresses `0..board_nodes`; 0 when there is none.
    pub board_nodes: u16,
    /// Largest frame the board carries.
    pub board_mtu: usize,
    /// Send slots in the device's own memory ([`Device::send_pool`]) that a program
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

    /// These capabilities with no broadcast board and no send slots, for a wrapper
    /// that must see every frame its node sends (a capture): everything then goes
    /// through transmit tokens.
    pub const fn frames_only(self) -> Capabilities {
        Capabilities {
            board_nodes: 0,
            board_mtu: 0,
            pool_slots: 0,
            pool_slot_size: 0,
            ..self
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
    /// the device left where its sender wrote it ([`crate::phy::SendPool::send_slot`]), the
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

/// A frame device: it moves frames, says what it can do, and hands out the
/// services it offers beside (see [`services`]); every service accessor defaults
/// to none.
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
    /// Sends what earlier transmit tokens queued. Devices that batch frames and tell
    /// the hardware once per batch (a kernel packet ring: one system call) do it
    /// here; the engine calls it at the end of each transmit pass.
    fn flush(&mut self, _now: Instant) {}
    /// Sends one frame to `dst` given as `parts` laid end to end (header, the payload
    /// where it lies in the program's memory, tag), for a device whose kernel copies
    /// the frame anyway (`sendmsg` with an I/O vector): it spares the copy into a
    /// transmit buffer; or for one that copies long payloads its own way (the hosted
    /// `shm` device's non-temporal stores). `false` when there is no room now.
    /// Called only for frames with at least [`Device::gather_from`] payload bytes,
    /// in order with earlier tokens.
    fn transmit_parts(&mut self, _now: Instant, _dst: NodeAddr, _parts: &[&[u8]]) -> bool {
        false
    }
    /// Payload bytes from which the engine sends a frame with
    /// [`Device::transmit_parts`] instead of filling a transmit token; `usize::MAX`
    /// (the default): never. A method, not a capability, so that the engine's
    /// send path sees a device's constant.
    fn gather_from(&self) -> usize {
        usize::MAX
    }
    /// Whether [`Device::transmit`], [`Device::transmit_parts`] and
    /// [`Device::flush`] read the `now` they are given. Where they do not, a send
    /// that leaves at once reads the clock only after its frame has left, so the
    /// read does not delay the frame. A method, as [`Device::gather_from`].
    fn transmit_reads_time(&self) -> bool {
        true
    }
    /// Whether a frame may be waiting for [`Device::receive`] or the board's
    /// [`Board::read`]: `false` only where a look at memory (no system call, no
    /// side effect) finds none. A waiting call that found nothing looks here between
    /// its polls, so it notices a frame within a few loads instead of a whole poll.
    /// The default: maybe (a call just polls).
    fn rx_pending(&self) -> bool {
        true
    }
    /// What the device knows of its peers' liveness by means of its own; none: the
    /// engine's timers alone decide.
    #[inline(always)]
    fn liveness(&mut self) -> Option<&mut dyn Liveness> {
        None
    }
    /// Atomic operations in the device's memory; none: the engine runs them as a
    /// protocol with the owner.
    #[inline(always)]
    fn nic_atomics(&mut self) -> Option<&mut dyn NicAtomics> {
        None
    }
    /// A barrier in the device's memory; none: the engine exchanges frames.
    #[inline(always)]
    fn nic_barrier(&mut self) -> Option<&mut dyn NicBarrier> {
        None
    }
    /// The broadcast board ([`Capabilities::board_nodes`]).
    #[inline(always)]
    fn board(&mut self) -> Option<&mut dyn Board> {
        None
    }
    /// The send pool ([`Capabilities::pool_slots`]), read-only.
    #[inline(always)]
    fn send_pool(&self) -> Option<&dyn SendPool> {
        None
    }
    /// The send pool.
    #[inline(always)]
    fn send_pool_mut(&mut self) -> Option<&mut dyn SendPool> {
        None
    }
}

/// What a reader did with a board frame offered by [`Board::read`].
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
    fn flush(&mut self, now: Instant) {
        (**self).flush(now)
    }
    fn transmit_parts(&mut self, now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        (**self).transmit_parts(now, dst, parts)
    }
    fn gather_from(&self) -> usize {
        (**self).gather_from()
    }
    fn transmit_reads_time(&self) -> bool {
        (**self).transmit_reads_time()
    }
    fn rx_pending(&self) -> bool {
        (**self).rx_pending()
    }
    #[inline(always)]
    fn liveness(&mut self) -> Option<&mut dyn Liveness> {
        (**self).liveness()
    }
    #[inline(always)]
    fn nic_atomics(&mut self) -> Option<&mut dyn NicAtomics> {
        (**self).nic_atomics()
    }
    #[inline(always)]
    fn nic_barrier(&mut self) -> Option<&mut dyn NicBarrier> {
        (**self).nic_barrier()
    }
    #[inline(always)]
    fn board(&mut self) -> Option<&mut dyn Board> {
        (**self).board()
    }
    #[inline(always)]
    fn send_pool(&self) -> Option<&dyn SendPool> {
        (**self).send_pool()
    }
    #[inline(always)]
    fn send_pool_mut(&mut self) -> Option<&mut dyn SendPool> {
        (**self).send_pool_mut()
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
    struct OneFrameBoard<'r> {
        lo: Loopback<'r, 4, 256>,
        frame: Vec<u8>,
        full: bool,
    }

    impl Device for OneFrameBoard<'_> {
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
        fn board(&mut self) -> Option<&mut dyn super::Board> {
            Some(self)
        }
    }

    impl super::Board for OneFrameBoard<'_> {
        fn write(&mut self, _now: Instant, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
            if self.full {
                return false;
            }
            self.frame = std::vec![0xEE; len];
            fill(&mut self.frame);
            true
        }
        fn read(
            &mut self,
            _now: Instant,
            _take: &mut dyn FnMut(NodeAddr, &[u8]) -> BoardTake,
        ) -> bool {
            false
        }
    }

    /// A device that copies long board frames no way of its own gets them through
    /// its board's `write`, the parts laid end to end, and says so when it is
    /// full, through a `&mut` too.
    #[test]
    fn board_parts_are_written_end_to_end_by_default() {
        let mut rings: Vec<Ring<4, 256>> = (0..2).map(|_| Ring::new()).collect();
        let mut b = OneFrameBoard {
            lo: Loopback::new(&mut rings, NodeAddr(0)),
            frame: Vec::new(),
            full: false,
        };
        let parts: [&[u8]; 5] = [b"head", b"", b"prefix", &[7; 300], b"tag"];
        let mut through = &mut b;
        let board = Device::board(&mut through).unwrap();
        assert!(board.write_parts(Instant::ZERO, &parts));
        assert_eq!(b.frame, parts.concat());
        b.full = true;
        b.frame.clear();
        assert!(!b.board().unwrap().write_parts(Instant::ZERO, &parts));
        assert!(b.frame.is_empty());
    }
}
