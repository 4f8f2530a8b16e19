//! The e1000's platform: BAR0 registers through volatile accesses, and DMA memory from
//! a bump allocator over a static, identity-mapped arena (physical = virtual).

use core::ptr::NonNull;

use volley_e1000::{Dma, DmaAlloc, Mmio, PhysAddr};

/// BAR0 of an e1000, identity-mapped and uncached (the PCI hole: see boot.rs).
#[derive(Debug)]
pub struct Bar0 {
    base: usize,
    len: usize,
}

impl Bar0 {
    /// The register window at physical `base`, `len` bytes.
    ///
    /// # Safety
    ///
    /// `base..base + len` must be the device's memory BAR, mapped, and used by nothing else.
    pub unsafe fn new(base: u64, len: u64) -> Bar0 {
        Bar0 {
            base: base as usize,
            len: len as usize,
        }
    }
}

impl Mmio for Bar0 {
    fn read32(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len, "register {off:#x} outside BAR0");
        // SAFETY: inside the BAR (checked), 4-aligned register offsets from the driver.
        unsafe { core::ptr::read_volatile((self.base + off) as *const u32) }
    }
    fn write32(&mut self, off: usize, v: u32) {
        assert!(off + 4 <= self.len, "register {off:#x} outside BAR0");
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
