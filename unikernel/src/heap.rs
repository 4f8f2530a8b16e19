//! The application's heap: a `linked_list_allocator` over the largest block of usable
//! RAM in the PVH memory map that lies above the kernel image and below 4 GiB (what
//! the boot page tables map).

use linked_list_allocator::LockedHeap;

use crate::pvh;

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

extern "C" {
    static __bss_end: u8;
}

/// Largest heap used, whatever the machine has.
const MAX_HEAP: u64 = 256 << 20;

/// Picks the heap from the memory map and hands it to the allocator; returns its
/// start and size, or `None` if the map offers no usable RAM (then nothing allocates).
pub fn init(start_info: u32) -> Option<(u64, u64)> {
    // Taking the address of a linker symbol reads nothing.
    let kernel_end = core::ptr::addr_of!(__bss_end) as u64;
    let floor = kernel_end.div_ceil(4096) * 4096;
    let mut best: Option<(u64, u64)> = None;
    pvh::memmap(start_info, |r| {
        if r.kind != 1 {
            return;
        }
        let start = r.addr.max(floor);
        let end = (r.addr + r.size).min(1 << 32);
        if end > start && best.is_none_or(|(_, s)| end - start > s) {
            best = Some((start, end - start));
        }
    });
    let (start, size) = best?;
    let size = size.min(MAX_HEAP);
    // SAFETY: usable RAM per the firmware's map, above the kernel image, identity
    // mapped, used by nothing else; called once before anything allocates.
    unsafe { HEAP.lock().init(start as *mut u8, size as usize) };
    Some((start, size))
}
