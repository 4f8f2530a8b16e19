//! TSC frequency, calibrated against PIT channel 2 (1.193182 MHz) on the `pc` machine:
//! gate the channel on, count down 2 ms in mode 0, and see how far the TSC moved
//! (the OUT2 pin, bit 5 of port 0x61, goes high at terminal count).

use crate::port::{inb, outb};

const PIT_HZ: u64 = 1_193_182;
/// 2 ms: 2386 PIT ticks, so within 0.05 %, and boot stays short.
const WINDOW_MS: u64 = 2;

/// Reads the time-stamp counter.
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: rdtsc only reads the counter.
    unsafe {
        core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    ((hi as u64) << 32) | lo as u64
}

/// TSC ticks per second, or `None` if the PIT never reached terminal count. Three
/// windows, the shortest kept: the host stopping the VM can only lengthen one.
pub fn calibrate() -> Option<u64> {
    (0..3).filter_map(|_| window()).min()
}

/// One window of `WINDOW_MS`: TSC ticks per second it implies.
fn window() -> Option<u64> {
    let count = (PIT_HZ * WINDOW_MS / 1000) as u16;
    // Gate off then on (bit 0) restarts the count; speaker off (bit 1).
    outb(0x61, inb(0x61) & !0x03);
    outb(0x61, (inb(0x61) & !0x02) | 0x01);
    // Channel 2, lobyte/hibyte, mode 0 (interrupt on terminal count), binary.
    outb(0x43, 0b1011_0000);
    outb(0x42, count as u8);
    outb(0x42, (count >> 8) as u8);
    let start = rdtsc();
    // Bounded: a missing PIT must not hang the boot.
    for _ in 0..100_000_000u64 {
        if inb(0x61) & 0x20 != 0 {
            let ticks = rdtsc() - start;
            return Some(ticks * 1000 / WINDOW_MS);
        }
    }
    None
}
