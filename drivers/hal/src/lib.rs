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
        frame.len() >= HEADER
            && frame[12..14] == ETHERTYPE.to_be_bytes()
            && (frame[0..6] == mac
                || frame[0..6] == BROADCAST
                || groups.iter().any(|g| frame[0..6] == *g))
    }
}
