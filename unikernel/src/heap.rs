//! The application's heap: a `linked_list_allocator` over a static arena in .bss.

use linked_list_allocator::LockedHeap;

const HEAP_SIZE: usize = 32 << 20;

#[repr(C, align(4096))]
struct Arena([u8; HEAP_SIZE]);

static mut ARENA: Arena = Arena([0; HEAP_SIZE]);

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

/// Hands the arena to the allocator; call once, before any allocation.
pub fn init() {
    // SAFETY: called once at boot, before anything allocates; the arena is a static
    // used by nothing else.
    unsafe {
        let start = core::ptr::addr_of_mut!(ARENA) as *mut u8;
        HEAP.lock().init(start, HEAP_SIZE);
    }
}
