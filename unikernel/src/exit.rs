//! The verdict, through QEMU's `isa-debug-exit` (iobase 0xf4): writing `v` ends QEMU
//! with status `(v << 1) | 1`.

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Verdict {
    /// QEMU exits with status 33.
    Success = 0x10,
    /// QEMU exits with status 35.
    Failure = 0x11,
}

/// Ends the run.
pub fn exit(v: Verdict) -> ! {
    // SAFETY: port 0xf4 is the debug-exit device; without one the write is ignored.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") 0xf4u16, in("eax") v as u32, options(nomem, nostack))
    };
    loop {
        // SAFETY: halting with interrupts off parks the CPU for good.
        unsafe { core::arch::asm!("cli; hlt", options(nomem, nostack)) };
    }
}
