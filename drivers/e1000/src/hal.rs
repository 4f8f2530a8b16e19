//! What the driver needs from its platform: register access and DMA memory.

use core::ptr::NonNull;

/// A physical (bus) address, as the NIC sees memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PhysAddr(pub u64);

/// The NIC's register window (BAR0).
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
