//! The PVH `hvm_start_info` structure (Xen's `arch-x86/hvm/start_info.h`): magic at 0,
//! version at 4, `cmdline_paddr` (u64) at 24, and from version 1 the memory map.

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

/// A region of the PVH memory map (E820 types: 1 is usable RAM).
#[derive(Debug, Clone, Copy)]
pub struct Region {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// E820 type.
    pub kind: u32,
}

/// The memory map (version >= 1: `memmap_paddr` at 40, `memmap_entries` at 48;
/// 24-byte entries), passed one region at a time to `visit`.
pub fn memmap(start_info: u32, mut visit: impl FnMut(Region)) {
    if start_info == 0 {
        return;
    }
    let base = start_info as usize as *const u8;
    // SAFETY: QEMU passes a valid, identity-mapped start info (checked by its magic).
    let (magic, version, paddr, n) = unsafe {
        (
            core::ptr::read_unaligned(base as *const u32),
            core::ptr::read_unaligned(base.add(4) as *const u32),
            core::ptr::read_unaligned(base.add(40) as *const u64),
            core::ptr::read_unaligned(base.add(48) as *const u32),
        )
    };
    if magic != MAGIC || version < 1 || paddr == 0 || paddr >= 1 << 32 {
        return;
    }
    for i in 0..n.min(128) as usize {
        let e = (paddr as usize + 24 * i) as *const u8;
        // SAFETY: entry `i` of the map QEMU wrote in low, identity-mapped memory.
        let r = unsafe {
            Region {
                addr: core::ptr::read_unaligned(e as *const u64),
                size: core::ptr::read_unaligned(e.add(8) as *const u64),
                kind: core::ptr::read_unaligned(e.add(16) as *const u32),
            }
        };
        visit(r);
    }
}
