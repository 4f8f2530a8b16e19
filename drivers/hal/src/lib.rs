//! `volley-hal`: what Volley's NIC drivers (`volley-e1000`, `volley-tulip`) need from
//! their platform: register access and DMA memory. The unikernel implements it once
//! (identity-mapped BARs, a static DMA arena); host tests implement it with fakes.
//!
//! Also what the drivers share above their rings: the Volley framing in Ethernet
//! ([`ether`]), the core's device tokens ([`RingRx`], [`RingTx`]) and the plain
//! Ethernet view ([`EthernetNic`]), all built on a driver's [`FrameRing`].
#![no_std]
#![warn(missing_docs)]

use core::ptr::NonNull;

use volley_core::phy::{RxToken, TxToken};
use volley_core::NodeAddr;

/// A physical (bus) address, as the NIC sees memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PhysAddr(pub u64);

/// A NIC's register window (a memory BAR).
pub trait Mmio {
    /// Reads the 32-bit register at byte offset `off`.
    fn read32(&self, off: usize) -> u32;
    /// Writes the 32-bit register at byte offset `off`.
    fn write32(&mut self, off: usize, v: u32);
}

/// A block of DMA memory: where the CPU sees it and where the NIC does.
#[derive(Debug, Clone, Copy)]
pub struct Dma {
    /// Address for the NIC.
    pub phys: PhysAddr,
    /// Address for the CPU.
    pub virt: NonNull<u8>,
    /// Bytes.
    pub len: usize,
}

impl Dma {
    /// Packet buffer `i` of `size` bytes in this block, for reading.
    ///
    /// # Safety
    ///
    /// The block must come from a [`DmaAlloc`], and the device must not write the
    /// buffer while the slice lives (the driver owns its descriptor).
    pub unsafe fn slot(&self, i: usize, size: usize) -> &[u8] {
        // Checked in release builds too: an index past the block is a driver bug, and
        // a panic is better than a read outside the DMA memory.
        assert!(
            (i + 1) * size <= self.len,
            "packet buffer index out of range"
        );
        // SAFETY: inside the block (checked above), which DmaAlloc's contract makes
        // valid memory; no concurrent write (the caller's contract).
        unsafe { core::slice::from_raw_parts(self.virt.as_ptr().add(i * size), size) }
    }

    /// Packet buffer `i` of `size` bytes in this block, for writing.
    ///
    /// # Safety
    ///
    /// As [`Dma::slot`], and the device must not read the buffer while the slice lives
    /// (it gets it only when the driver hands the descriptor over), and no other slice
    /// of it may be alive.
    // DMA memory is written through a shared handle by design: ownership comes from the
    // descriptor protocol, which the `# Safety` contract hands to the caller.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot_mut(&self, i: usize, size: usize) -> &mut [u8] {
        assert!(
            (i + 1) * size <= self.len,
            "packet buffer index out of range"
        );
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.virt.as_ptr().add(i * size), size) }
    }
}

/// Allocates DMA memory.
///
/// # Safety
///
/// Implementations must return memory that is zeroed, aligned to 4 KiB, `len` bytes
/// long, valid for the rest of the program, not used for anything else, and that the
/// NIC reaches at `phys` (identity-mapped or translated, cache-coherent).
pub unsafe trait DmaAlloc {
    /// `len` bytes of zeroed DMA memory, or `None` if there is no more.
    fn alloc(&mut self, len: usize) -> Option<Dma>;
}

/// Volley frames in Ethernet, as every NIC driver carries them: the Volley frame is the
/// payload of an Ethernet II frame of type [`ether::ETHERTYPE`].
pub mod ether {
    /// Ethernet type of Volley frames (IEEE 802 "local experimental" 1).
    pub const ETHERTYPE: u16 = 0x88B5;
    /// Destination, source, type.
    pub const HEADER: usize = 14;
    /// Shortest frame on the wire without its FCS: shorter ones are padded.
    pub const MIN_FRAME: usize = 60;
    /// Largest Volley frame carried (the Ethernet payload).
    pub const MTU: usize = 1500;
    /// The broadcast address.
    pub const BROADCAST: [u8; 6] = [0xFF; 6];
    /// Largest frame on the wire without its FCS.
    pub const MAX_FRAME: usize = HEADER + MTU;

    /// Writes the header of a Volley frame from `src` to `dst` into `frame[..HEADER]`,
    /// zero-pads the payload of `len` bytes to the minimum frame, and returns the
    /// frame's length on the wire.
    pub fn finish(frame: &mut [u8], dst: [u8; 6], src: [u8; 6], len: usize) -> usize {
        frame[0..6].copy_from_slice(&dst);
        frame[6..12].copy_from_slice(&src);
        frame[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        let total = (HEADER + len).max(MIN_FRAME);
        frame[HEADER + len..total].fill(0);
        total
    }

    /// Whether a received `frame` is a Volley frame for this node: our type, and sent
    /// to `mac`, to everyone, or to one of `groups`.
    pub fn accepts(frame: &[u8], mac: [u8; 6], groups: &[[u8; 6]]) -> bool {
        addressed_to(frame, mac, groups) && frame[12..14] == ETHERTYPE.to_be_bytes()
    }

    /// Whether a received `frame` of any type is sent to `mac`, to everyone, or to one
    /// of `groups`.
    pub fn addressed_to(frame: &[u8], mac: [u8; 6], groups: &[[u8; 6]]) -> bool {
        frame.len() >= HEADER
            && (frame[0..6] == mac
                || frame[0..6] == BROADCAST
                || groups.iter().any(|g| frame[0..6] == *g))
    }
}

/// A NIC seen as a plain Ethernet interface: whole frames in and out, any type, for an
/// IP stack on top (the unikernel's smoltcp). Frames arrive filtered by the card's
/// address filter: our address, broadcast, joined groups.
pub trait EthernetNic {
    /// This card's MAC address.
    fn mac(&self) -> [u8; 6];
    /// Calls `f` with the next received frame (from its destination address to the end
    /// of its payload, no FCS), if one is waiting.
    fn recv_frame<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R>;
    /// Whether a frame can be sent now (a transmit descriptor is free).
    fn can_send(&mut self) -> bool;
    /// Sends a frame of `len` bytes (cut to a full Ethernet frame, padded to the
    /// minimum) that `f` writes whole, headers included; `None` when no descriptor is
    /// free.
    fn send_frame<R>(&mut self, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Option<R>;
}

/// A card's receive interrupt, driven from its register window alone, so that an
/// interrupt handler can acknowledge and mask it without the driver (which the
/// interrupted program may be using).
pub trait RxInterrupt<M: Mmio> {
    /// Unmasks (`true`) or masks the card's receive interrupt.
    fn set_rx_interrupt(mmio: &mut M, on: bool);
    /// Acknowledges the card's pending interrupt causes; whether there was one.
    fn ack_interrupt(mmio: &mut M) -> bool;
}

/// The primitives of a descriptor-ring Ethernet driver, from which the core's device
/// tokens and the [`EthernetNic`] view are built once for every card.
pub trait FrameRing {
    /// This card's MAC address.
    fn address(&self) -> [u8; 6];
    /// The MAC address of fabric address `dst`, if the table has one.
    fn peer(&self, dst: NodeAddr) -> Option<[u8; 6]>;
    /// The next good frame addressed to us, as (slot, length without FCS): Volley
    /// frames only, or (`raw`) any type. Others are counted and handed back.
    fn next_frame(&mut self, raw: bool) -> Option<(usize, usize)>;
    /// Receive buffer `slot`, which the driver owns until [`FrameRing::release`].
    fn rx_buffer(&self, slot: usize) -> &[u8];
    /// Counts the frame in `slot` as delivered (`raw`: to the plain view) and hands the
    /// slot back to the card.
    fn release(&mut self, slot: usize, raw: bool);
    /// Whether a transmit descriptor is free (counting a full ring).
    fn tx_free(&mut self) -> bool;
    /// Sends the frame `fill` writes into the next free buffer (checked by
    /// [`FrameRing::tx_free`]); `fill` returns its result and the frame's length.
    /// `raw`: from the plain view (counted apart).
    fn send<R>(&mut self, raw: bool, fill: impl FnOnce(&mut [u8]) -> (R, usize)) -> R;
}

/// A received Volley frame, lent from its DMA buffer.
#[derive(Debug)]
pub struct RingRx<'a, T> {
    nic: &'a mut T,
    slot: usize,
    len: usize,
}

/// A transmit buffer for one Volley frame to a known peer.
#[derive(Debug)]
pub struct RingTx<'a, T> {
    nic: &'a mut T,
    dst: [u8; 6],
}

/// The core's `Device::receive` for a ring driver: the next Volley frame.
pub fn receive<T: FrameRing>(nic: &mut T) -> Option<RingRx<'_, T>> {
    let (slot, len) = nic.next_frame(false)?;
    Some(RingRx { nic, slot, len })
}

/// The core's `Device::transmit` for a ring driver: room for a frame to `dst`.
pub fn transmit<T: FrameRing>(nic: &mut T, dst: NodeAddr) -> Option<RingTx<'_, T>> {
    let dst = nic.peer(dst)?;
    nic.tx_free().then_some(RingTx { nic, dst })
}

impl<T: FrameRing> RxToken for RingRx<'_, T> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.nic.rx_buffer(self.slot)[ether::HEADER..self.len]);
        self.nic.release(self.slot, false);
        r
    }
}

impl<T: FrameRing> TxToken for RingTx<'_, T> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let len = len.min(ether::MTU);
        let (dst, src) = (self.dst, self.nic.address());
        self.nic.send(false, |b| {
            let r = f(&mut b[ether::HEADER..ether::HEADER + len]);
            (r, ether::finish(b, dst, src, len))
        })
    }
}

impl<T: FrameRing> EthernetNic for T {
    fn mac(&self) -> [u8; 6] {
        self.address()
    }

    fn recv_frame<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let (slot, len) = self.next_frame(true)?;
        let r = f(&self.rx_buffer(slot)[..len]);
        self.release(slot, true);
        Some(r)
    }

    fn can_send(&mut self) -> bool {
        self.tx_free()
    }

    fn send_frame<R>(&mut self, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        if !self.tx_free() {
            return None;
        }
        let len = len.min(ether::MAX_FRAME);
        Some(self.send(true, |b| {
            let r = f(&mut b[..len]);
            let total = ether::MIN_FRAME.max(len);
            b[len..total].fill(0);
            (r, total)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::ether::*;

    #[test]
    fn a_short_frame_is_padded_and_the_filter_takes_only_ours() {
        let mut f = [0xAAu8; 100];
        let me = [2, 0, 0, 0, 0, 1];
        let them = [2, 0, 0, 0, 0, 2];
        assert_eq!(finish(&mut f, them, me, 5), MIN_FRAME);
        assert_eq!(&f[0..6], &them);
        assert_eq!(&f[6..12], &me);
        assert_eq!(&f[12..14], &ETHERTYPE.to_be_bytes());
        assert!(
            f[HEADER + 5..MIN_FRAME].iter().all(|&b| b == 0),
            "padding zeroed"
        );
        assert_eq!(f[MIN_FRAME], 0xAA, "nothing written past the frame");
        let group = [0x01, 0, 0x5E, 0, 0, 9];
        let mut g = [0u8; 60];
        finish(&mut g, group, them, 10);
        assert!(!accepts(&g, me, &[]));
        assert!(accepts(&g, me, &[group]));
        finish(&mut g, BROADCAST, them, 10);
        assert!(accepts(&g, me, &[]));
        g[12] = 0x08;
        assert!(!accepts(&g, me, &[]), "another type");
        assert!(addressed_to(&g, me, &[]), "but addressed to everyone");
        assert!(!addressed_to(&g[..13], me, &[]), "shorter than a header");
    }
}
