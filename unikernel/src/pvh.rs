//! The PVH `hvm_start_info` structure (Xen's `arch-x86/hvm/start_info.h`): magic at 0,
//! `cmdline_paddr` (u64) at 24.

const MAGIC: u32 = 0x336e_c578;

/// The kernel command line, if the start info is valid and the line is UTF-8.
pub fn cmdline(start_info: u32) -> Option<&'static str> {
    if start_info == 0 {
        return None;
    }
    let base = start_info as usize as *const u8;
    // SAFETY: QEMU passes a valid, identity-mapped start info; we read two fields.
    let (magic, paddr) = unsafe {
        (
            core::ptr::read_unaligned(base as *const u32),
            core::ptr::read_unaligned(base.add(24) as *const u64),
        )
    };
    if magic != MAGIC || paddr == 0 || paddr >= 1 << 32 {
        return None;
    }
    let p = paddr as usize as *const u8;
    let mut len = 0;
    // SAFETY: a NUL-terminated string in identity-mapped low memory; bounded at 4 KiB.
    while len < 4096 && unsafe { *p.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: `len` bytes at `p` were just read.
    core::str::from_utf8(unsafe { core::slice::from_raw_parts(p, len) }).ok()
}

/// The value of `key=value` on the command line.
pub fn arg<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}
