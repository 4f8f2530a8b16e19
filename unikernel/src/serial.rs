//! COM1 (16550 UART at I/O port 0x3F8), polled, and a `println!` on top.

use core::fmt::{self, Write};

const COM1: u16 = 0x3F8;

fn outb(port: u16, v: u8) {
    // SAFETY: writing the UART's (or debug-exit's) I/O ports has no memory effects.
    unsafe {
        core::arch::asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack, preserves_flags))
    };
}

fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: reading the UART's I/O ports has no memory effects.
    unsafe {
        core::arch::asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack, preserves_flags))
    };
    v
}

/// 115200 8N1, FIFOs on, interrupts off.
pub fn init() {
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x80);
    outb(COM1, 0x01);
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03);
    outb(COM1 + 2, 0xC7);
    outb(COM1 + 4, 0x03);
}

fn put(b: u8) {
    // Wait for the transmit holding register to empty (LSR bit 5).
    while inb(COM1 + 5) & 0x20 == 0 {}
    outb(COM1, b);
}

/// The serial console as a `fmt::Write`.
pub struct Serial;

impl Write for Serial {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                put(b'\r');
            }
            put(b);
        }
        Ok(())
    }
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments<'_>) {
    let _ = Serial.write_fmt(args);
}

/// Prints to COM1.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::serial::_print(format_args!($($arg)*)) };
}

/// Prints a line to COM1.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => { $crate::print!("{}\n", format_args!($($arg)*)) };
}
