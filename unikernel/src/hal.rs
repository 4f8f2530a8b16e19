//! The NIC drivers' platform (`volley-hal`): registers in a memory BAR through volatile
//! accesses, and DMA memory from a bump allocator over a static, identity-mapped arena
//! (physical = virtual, below 4 GiB as the 21143's 32-bit addressing needs).

use core::ptr::NonNull;

use volley_hal::{Dma, DmaAlloc, Mmio, PhysAddr};

/// A NIC's memory BAR (the e1000's BAR0, the 21143's BAR1), identity-mapped and
/// uncached (the PCI hole: see boot.rs).
#[derive(Debug)]
pub struct MemBar {
    base: usize,
    len: usize,
}

impl MemBar {
    /// The register window at physical `base`, `len` bytes.
    ///
    /// # Safety
    ///
    /// `base..base + len` must be the device's memory BAR, mapped, and used by nothing else.
    pub unsafe fn new(base: u64, len: u64) -> MemBar {
        MemBar {
            base: base as usize,
            len: len as usize,
        }
    }
}

impl Mmio for MemBar {
    fn read32(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len, "register {off:#x} outside the BAR");
        // SAFETY: inside the BAR (checked), 4-aligned register offsets from the driver.
        unsafe { core::ptr::read_volatile((self.base + off) as *const u32) }
    }
    fn write32(&mut self, off: usize, v: u32) {
        assert!(off + 4 <= self.len, "register {off:#x} outside the BAR");
        // SAFETY: as in `read32`.
        unsafe { core::ptr::write_volatile((self.base + off) as *mut u32, v) }
    }
}

const DMA_SIZE: usize = 1 << 20;

#[repr(C, align(4096))]
struct DmaArena([u8; DMA_SIZE]);

static mut DMA_ARENA: DmaArena = DmaArena([0; DMA_SIZE]);

/// Hands out the DMA arena front to back.
#[derive(Debug, Default)]
pub struct BumpDma {
    used: usize,
}

// SAFETY: the arena is zeroed .bss, identity-mapped (physical = virtual, cache-coherent
// on x86), never reused: every block handed out is 4 KiB aligned and exclusive.
unsafe impl DmaAlloc for BumpDma {
    fn alloc(&mut self, len: usize) -> Option<Dma> {
        let len4k = len.div_ceil(4096) * 4096;
        if self.used + len4k > DMA_SIZE {
            return None;
        }
        let base = core::ptr::addr_of_mut!(DMA_ARENA) as *mut u8;
        // SAFETY: in bounds (checked above).
        let p = unsafe { base.add(self.used) };
        self.used += len4k;
        Some(Dma {
            phys: PhysAddr(p as u64),
            virt: NonNull::new(p)?,
            len,
        })
    }
}
