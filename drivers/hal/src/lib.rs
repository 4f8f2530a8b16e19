//! `volley-hal`: what Volley's NIC drivers (`volley-e1000`, `volley-tulip`) need from
//! their platform: register access and DMA memory. The unikernel implements it once
//! (identity-mapped BARs, a static DMA arena); host tests implement it with fakes.
#![no_std]
#![warn(missing_docs)]

use core::ptr::NonNull;

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
