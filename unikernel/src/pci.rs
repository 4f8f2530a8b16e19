//! PCI configuration space through ports 0xCF8/0xCFC (mechanism #1): bus 0 and the
//! buses behind its bridges.
//! Memory BARs left at zero by the firmware (qboot assigns none) are
//! given addresses from a bump allocator in the identity-mapped, uncached PCI hole.

use crate::port::{inl, outl};

/// A PCI function.
#[derive(Debug, Clone, Copy)]
pub struct Function {
    /// Bus number.
    pub bus: u8,
    /// Device number.
    pub dev: u8,
    /// Function number.
    pub func: u8,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Class code.
    pub class: u8,
}

fn addr(f: &Function, reg: u8) -> u32 {
    0x8000_0000
        | (f.bus as u32) << 16
        | (f.dev as u32) << 11
        | (f.func as u32) << 8
        | (reg as u32 & 0xFC)
}

/// Reads a config-space double word.
pub fn read(f: &Function, reg: u8) -> u32 {
    outl(0xCF8, addr(f, reg));
    inl(0xCFC)
}

/// Writes a config-space double word.
pub fn write(f: &Function, reg: u8, v: u32) {
    outl(0xCF8, addr(f, reg));
    outl(0xCFC, v);
}

/// Calls `visit` for every function present: bus 0, then the buses behind its
/// PCI-to-PCI bridges (header type 1: secondary bus number at 0x19), depth first.
/// Scanning only the buses that exist, not all 256, keeps boot short (every config
/// access is a port I/O exit).
pub fn scan(mut visit: impl FnMut(Function)) {
    scan_bus(0, &mut visit, 0);
}

fn scan_bus(bus: u8, visit: &mut impl FnMut(Function), depth: u8) {
    for dev in 0..32u8 {
        for func in 0..8u8 {
            let mut f = Function {
                bus,
                dev,
                func,
                vendor: 0,
                device: 0,
                class: 0,
            };
            let id = read(&f, 0);
            if id & 0xFFFF == 0xFFFF {
                if func == 0 {
                    break;
                }
                continue;
            }
            f.vendor = id as u16;
            f.device = (id >> 16) as u16;
            f.class = (read(&f, 8) >> 24) as u8;
            visit(f);
            let header = (read(&f, 0x0C) >> 16) as u8;
            // A bridge: its secondary bus (bounded depth: a loop of bus numbers in a
            // broken configuration must not recurse forever).
            if header & 0x7F == 1 && depth < 8 {
                let secondary = (read(&f, 0x18) >> 8) as u8;
                if secondary > bus {
                    scan_bus(secondary, visit, depth + 1);
                }
            }
            // Single-function device: skip functions 1..7.
            if func == 0 && header & 0x80 == 0 {
                break;
            }
        }
    }
}

/// Next free address in the PCI hole for BARs the firmware left unassigned.
static mut NEXT_MMIO: u64 = 0xC000_0000;

/// The physical address and size of memory BAR `n`, assigned here if the firmware
/// left it at zero. A 64-bit BAR (ivshmem's BAR2) placed above 4 GiB, outside the
/// identity map, is moved below. `None` for an I/O BAR or an absent one.
pub fn memory_bar(f: &Function, n: u8) -> Option<(u64, u64)> {
    let reg = 0x10 + 4 * n;
    let orig = read(f, reg);
    if orig & 1 != 0 {
        return None;
    }
    // Type 0b10 in bits 2:1: 64 bits wide, the next register holds the upper half
    // (PCI Local Bus 3.0, 6.2.5.1).
    let wide = (orig >> 1) & 3 == 2 && n < 5;
    let hi_reg = reg + 4;
    let orig_hi = if wide { read(f, hi_reg) } else { 0 };
    // Size: write all ones, read the mask back, restore.
    write(f, reg, 0xFFFF_FFFF);
    let mask_lo = read(f, reg) & !0xF;
    write(f, reg, orig);
    let mask_hi = if wide {
        write(f, hi_reg, 0xFFFF_FFFF);
        let m = read(f, hi_reg);
        write(f, hi_reg, orig_hi);
        m
    } else {
        0xFFFF_FFFF
    };
    let mask = (mask_hi as u64) << 32 | mask_lo as u64;
    if mask_lo == 0 && (!wide || mask_hi == 0) {
        return None;
    }
    let size = !mask + 1;
    let mut base = (orig_hi as u64) << 32 | (orig & !0xF) as u64;
    // The identity map ends at 4 GiB; the hole we allocate from ends below the I/O APIC.
    if base == 0 || base + size > 1 << 32 {
        if size > 1 << 30 {
            return None;
        }
        // SAFETY: single-threaded boot code is the only user of the allocator.
        unsafe {
            let next = (NEXT_MMIO + size - 1) & !(size - 1);
            if next + size > 0xFEC0_0000 {
                return None;
            }
            NEXT_MMIO = next + size;
            base = next;
        }
        write(f, reg, base as u32);
        if wide {
            write(f, hi_reg, 0);
        }
    }
    Some((base, size))
}

/// Enables memory decoding and bus mastering (QEMU's e1000 delivers nothing without).
pub fn enable(f: &Function) {
    let cmd = read(f, 0x04);
    write(f, 0x04, cmd | 0x2 | 0x4);
}

/// Enables memory decoding only: for a device that never masters the bus (ivshmem).
pub fn enable_memory(f: &Function) {
    let cmd = read(f, 0x04);
    write(f, 0x04, cmd | 0x2);
}

/// The ISA IRQ (and so the I/O APIC input) that function `f`'s INTx line reaches on
/// QEMU's `pc` board: INTA..INTD of slot S go to PIRQ (S - 1 + pin) mod 4 (the board's
/// swizzle, which QEMU implements for the PIIX3), and the PIIX3's PIRQ route control
/// registers (config 0x60..0x63 of 00:01.0, PIIX3 data sheet) map each PIRQ to an IRQ.
/// A disabled route is set to IRQ 11. The interrupt line register qboot fills in
/// assumes another swizzle and is not used. `None` without an INTx pin or a PIIX3.
pub fn intx_irq(f: &Function) -> Option<u8> {
    let pin = ((read(f, 0x3C) >> 8) & 0xFF) as u8;
    if !(1..=4).contains(&pin) || f.bus != 0 || f.dev == 0 {
        return None;
    }
    let piix = Function {
        bus: 0,
        dev: 1,
        func: 0,
        vendor: 0,
        device: 0,
        class: 0,
    };
    if read(&piix, 0) != 0x7000_8086 {
        return None;
    }
    let pirq = (f.dev as u32 - 1 + pin as u32 - 1) % 4;
    let routes = read(&piix, 0x60);
    let mut route = (routes >> (8 * pirq)) as u8;
    if route & 0x80 != 0 || route & 0x0F < 3 {
        route = 11;
        let routes = (routes & !(0xFF << (8 * pirq))) | (route as u32) << (8 * pirq);
        write(&piix, 0x60, routes);
    }
    Some(route & 0x0F)
}

/// Points function `f`'s MSI capability (PCI Local Bus 3.0, 6.8.1) at this CPU's
/// local APIC with `vector` (fixed delivery, edge: Intel SDM vol. 3, 11.11) and
/// enables it, which turns its INTx line off. False if it has no MSI capability.
pub fn enable_msi(f: &Function, apic_id: u8, vector: u8) -> bool {
    let Some(ptr) = capability(f, 0x05) else {
        return false;
    };
    let head = read(f, ptr);
    let control = (head >> 16) as u16;
    let wide = control & (1 << 7) != 0;
    write(f, ptr + 4, 0xFEE0_0000 | (apic_id as u32) << 12);
    let data_at = if wide {
        write(f, ptr + 8, 0);
        ptr + 12
    } else {
        ptr + 8
    };
    // The data register is the low 16 bits of its dword.
    let old = read(f, data_at);
    write(f, data_at, (old & 0xFFFF_0000) | vector as u32);
    // One message (MME 0), enabled.
    let control = (control & !(0b111 << 4)) | 1;
    write(f, ptr, (head & 0xFFFF) | (control as u32) << 16);
    true
}

/// The config-space offset of function `f`'s capability `id`, if it has one.
fn capability(f: &Function, id: u8) -> Option<u8> {
    // Status bit 4: a capability list at 0x34.
    if read(f, 0x04) & (1 << 20) == 0 {
        return None;
    }
    let mut ptr = (read(f, 0x34) & 0xFC) as u8;
    // Bounded: a looping list in a broken device must not hang the boot.
    for _ in 0..48 {
        if ptr < 0x40 {
            return None;
        }
        let head = read(f, ptr);
        if head & 0xFF == id as u32 {
            return Some(ptr);
        }
        ptr = ((head >> 8) & 0xFC) as u8;
    }
    None
}

/// Whether function `f` has an MSI-X capability.
pub fn has_msix(f: &Function) -> bool {
    capability(f, 0x11).is_some()
}

/// Points entry 0 of function `f`'s MSI-X table (PCI Local Bus 3.0, 6.8.2) at this
/// CPU's local APIC with `vector`, masked, and enables MSI-X (which turns INTx off).
/// Returns the entry's physical address: its vector control word at +12 masks (1)
/// and unmasks (0) it; a message raised while masked is held pending and sent on
/// unmasking. `None` without MSI-X or if the table's BAR cannot be placed.
pub fn enable_msix(f: &Function, apic_id: u8, vector: u8) -> Option<u64> {
    let cap = capability(f, 0x11)?;
    let table = read(f, cap + 4);
    let (bar, _) = memory_bar(f, (table & 7) as u8)?;
    let entry = bar + (table & !7) as u64;
    let words = [0xFEE0_0000 | (apic_id as u32) << 12, 0, vector as u32, 1];
    for (i, w) in words.iter().enumerate() {
        // SAFETY: entry 0 of the table, inside the BAR just assigned (identity-mapped,
        // uncached PCI hole), which nothing else uses.
        unsafe { core::ptr::write_volatile((entry + 4 * i as u64) as *mut u32, *w) };
    }
    enable(f);
    let head = read(f, cap);
    // Message control: enable (bit 15), function mask off (bit 14).
    let control = ((head >> 16) as u16 & !(1 << 14)) | 1 << 15;
    write(f, cap, (head & 0xFFFF) | (control as u32) << 16);
    Some(entry)
}
