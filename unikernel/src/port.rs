//! x86 I/O ports.

/// Writes a byte to an I/O port.
pub fn outb(port: u16, v: u8) {
    // SAFETY: port I/O has no memory effects; the callers name devices they own.
    unsafe {
        core::arch::asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a byte from an I/O port.
pub fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: as for `outb`.
    unsafe {
        core::arch::asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack, preserves_flags))
    };
    v
}

/// Writes a double word to an I/O port.
pub fn outl(port: u16, v: u32) {
    // SAFETY: as for `outb`.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") port, in("eax") v, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a double word from an I/O port.
pub fn inl(port: u16) -> u32 {
    let v: u32;
    // SAFETY: as for `outb`.
    unsafe {
        core::arch::asm!("in eax, dx", out("eax") v, in("dx") port, options(nomem, nostack, preserves_flags))
    };
    v
}

/// Writes a word to an I/O port.
pub fn outw(port: u16, v: u16) {
    // SAFETY: as for `outb`.
    unsafe {
        core::arch::asm!("out dx, ax", in("dx") port, in("ax") v, options(nomem, nostack, preserves_flags))
    };
}
