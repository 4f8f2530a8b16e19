//! Services a device may offer beside moving frames, each a trait of its own that
//! a device hands out through its [`super::Device`] accessor when it has it (the
//! Myrinet-like NIC model: all of them, in NIC memory; a UDP socket: liveness from
//! ICMP). A wrapper forwards the accessor and nothing else.

use super::{BarrierMembers, BarrierPoll, BoardTake};
use crate::time::Instant;
use crate::NodeAddr;

/// What the device knows of its peers' liveness by means of its own.
pub trait Liveness {
    /// Whether the device still believes `peer` is alive (a liveness word, a
    /// heartbeat, a link state). The engine asks when a retransmission timer fires
    /// and declares the peer dead at once on `false`.
    fn peer_alive(&mut self, now: Instant, peer: NodeAddr) -> bool;
    /// Whether the device has lately seen `peer`'s process alive (a beacon word in
    /// shared memory that a helper of the peer's process moves while its program
    /// computes). The engine asks before it declares a peer that has been silent
    /// for the whole peer timeout dead, and on `true` goes on waiting for it: alive
    /// but not calling in is not dead.
    fn peer_vouched(&mut self, _now: Instant, _peer: NodeAddr) -> bool {
        false
    }
}

/// Atomic operations the device performs in its own memory.
pub trait NicAtomics {
    /// Adds `delta` to counter `var` of `peer`'s NIC and returns the previous value,
    /// with no CPU of the peer involved; `None` where the device cannot (the engine
    /// then runs the protocol).
    fn fetch_add(&mut self, peer: NodeAddr, var: u16, delta: u32) -> Option<u32>;
}

/// A barrier the device runs in its own memory.
pub trait NicBarrier {
    /// Advances this member's next barrier among `members` (a combining tree of
    /// flags in NIC memory, no frames). Called again on every poll until it answers
    /// `Done`; the call after that starts the next barrier. The device numbers the
    /// barriers, so engines that take turns on one device continue one sequence.
    /// Liveness stays the engine's job. Every member of a job must have one alike.
    fn barrier(&mut self, now: Instant, members: &BarrierMembers<'_>) -> BarrierPoll;
}

/// A broadcast board: frames written once into this node's board, where every
/// other node ([`super::Capabilities::board_nodes`]) reads them in place.
pub trait Board {
    /// Writes one frame of `len` bytes (at most `board_mtu`), filled by `fill`.
    /// Frames leave in the order written and are never lost while their reader
    /// lives. `false`: no room now (a reader has not taken an older frame yet).
    fn write(&mut self, now: Instant, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool;
    /// [`Board::write`] of a frame given as `parts` laid end to end (header,
    /// the payload's pieces where they lie, tag), for a device that copies long
    /// payloads its own way. Called only for frames with at least
    /// [`super::Device::gather_from`] payload bytes.
    fn write_parts(&mut self, now: Instant, parts: &[&[u8]]) -> bool {
        let len = parts.iter().map(|p| p.len()).sum();
        self.write(now, len, &mut |buf| {
            let mut rest = buf;
            for p in parts {
                let n = p.len().min(rest.len());
                let (d, tail) = rest.split_at_mut(n);
                d.copy_from_slice(&p[..n]);
                rest = tail;
            }
        })
    }
    /// [`Board::write`] of a frame made of `head`, the first `len` bytes of send
    /// slot `slot` ([`SendPool`]) and `tail`, which the device moves into the board
    /// itself. `false` where it cannot.
    fn write_pooled(
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
    fn read(&mut self, now: Instant, take: &mut dyn FnMut(NodeAddr, &[u8]) -> BoardTake) -> bool;
    /// Whether a frame this node wrote is still unread by a live reader that has
    /// not said it holds it back ([`BoardTake::Held`]): a barrier waits for the
    /// rest, as for acks of frames on the rings.
    fn unread(&mut self, _now: Instant) -> bool {
        false
    }
}

/// Send slots in the device's own memory that a program fills and the device
/// sends from where they lie ([`super::Capabilities::pool_slots`] of them).
pub trait SendPool {
    /// Slot `i`, read-only.
    fn slot(&self, i: usize) -> Option<&[u8]>;
    /// Slot `i`, for the program to fill (LFC: `lfc_send_alloc` hands out a
    /// transmit slot of the device). The engine lends a slot out only while no frame
    /// that reads it is still unread.
    fn slot_mut(&mut self, i: usize) -> Option<&mut [u8]>;
    /// Sends one frame to `dst` whose payload is the first `len` bytes of slot
    /// `slot`, read where it lies: `head` (the header) before it and `tail` (the tag)
    /// after it. The receiver gets the frame through
    /// [`super::RxToken::consume_parts`]. `false` when there is no room now.
    fn send_slot(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool;
}
