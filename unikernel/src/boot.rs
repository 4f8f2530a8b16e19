//! PVH entry: QEMU jumps to `_start32` in 32-bit protected mode, paging off, with the
//! physical address of `hvm_start_info` in EBX. We zero .bss, identity-map the low
//! 4 GiB with 2 MiB pages (RAM and the PCI hole), enter long mode and call
//! `rust_main(start_info)`.

use core::arch::global_asm;

// The PVH ELF note (XEN_ELFNOTE_PHYS32_ENTRY = 18): name "Xen", an 8-byte descriptor
// holding the 32-bit physical entry point (QEMU 7.2 reads 8 bytes).
global_asm!(
    r#"
    .section .note.Xen, "a"
    .balign 4
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .balign 4
    .quad _start32
    .balign 4
"#
);

global_asm!(
    r#"
    .section .text.boot, "ax"
    .code32
    .global _start32
_start32:
    cli
    cld
    mov esi, ebx

    /* Zero .bss (page tables and stack included: they are filled below). */
    mov edi, offset __bss_start
    mov ecx, offset __bss_end
    sub ecx, edi
    xor eax, eax
    rep stosb

    mov esp, offset {stack} + {stack_size}

    /* PML4[0] -> PDPT; PDPT[0..4] -> PD[0..4]; PD entries map 2 MiB each. */
    mov eax, offset {pdpt}
    or eax, 3
    mov [{pml4}], eax
    xor ecx, ecx
2:
    mov eax, ecx
    shl eax, 12
    add eax, offset {pd}
    or eax, 3
    mov [{pdpt} + ecx * 8], eax
    inc ecx
    cmp ecx, 4
    jne 2b
    xor ecx, ecx
3:
    mov eax, ecx
    shl eax, 21
    or eax, 0x83
    /* 3..4 GiB is the PCI hole: device registers, uncached (PCD | PWT). */
    cmp ecx, 1536
    jb 6f
    or eax, 0x18
6:
    mov [{pd} + ecx * 8], eax
    inc ecx
    cmp ecx, 2048
    jne 3b

    /* PAE, then EFER.LME, then paging: long mode. */
    mov eax, cr4
    or eax, 1 << 5
    mov cr4, eax
    mov eax, offset {pml4}
    mov cr3, eax
    mov ecx, 0xC0000080
    rdmsr
    or eax, 1 << 8
    wrmsr
    mov eax, cr0
    or eax, (1 << 31) | 1
    mov cr0, eax

    lgdt [gdt_ptr]
    mov eax, offset long_mode
    push 0x08
    push eax
    retf

    .code64
long_mode:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    mov fs, ax
    mov gs, ax
    mov rsp, offset {stack} + {stack_size}
    mov edi, esi
    call rust_main
5:
    hlt
    jmp 5b

    /* Null, 64-bit code (0x08), data (0x10). */
    .section .rodata
    .balign 8
gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF
    .quad 0x00CF92000000FFFF
gdt_ptr:
    .word 23
    .long gdt
"#,
    stack = sym STACK,
    stack_size = const STACK_SIZE,
    pml4 = sym PML4,
    pdpt = sym PDPT,
    pd = sym PD,
);

// The engine and the Myrinet-like NIC model are built on the stack before they move
// into the heap: 64 KiB overflowed into the page tables below it.
const STACK_SIZE: usize = 1024 * 1024;

#[repr(C, align(4096))]
struct Table([u64; 512]);

#[repr(C, align(4096))]
struct Stack([u8; STACK_SIZE]);

#[no_mangle]
static mut PML4: Table = Table([0; 512]);
#[no_mangle]
static mut PDPT: Table = Table([0; 512]);
#[no_mangle]
static mut PD: [Table; 4] = [const { Table([0; 512]) }; 4];
#[no_mangle]
static mut STACK: Stack = Stack([0; STACK_SIZE]);
/// The address of the unmapped page below the stack.
pub fn stack_guard() -> u64 {
    core::ptr::addr_of!(STACK) as u64
}

/// 4 KiB pages for the 2 MiB page holding the bottom of the stack (see `guard_stack`).
static mut GUARD_PT: Table = Table([0; 512]);

/// Unmaps the lowest 4 KiB of the stack, so that an overflow faults at once instead
/// of writing over whatever lies below (the page tables did, before the stack grew).
/// Without a separate exception stack the fault ends the run as a triple fault, which
/// QEMU's `-no-reboot` turns into an exit the harness reports: loud, not silent.
pub fn guard_stack() {
    let guard = stack_guard();
    let big = guard >> 21;
    let pt = core::ptr::addr_of!(GUARD_PT) as u64;
    // SAFETY: single-threaded kernel at boot; the tables are ours. The new 4 KiB
    // entries map the same frames with the same rights as the 2 MiB page they
    // replace, except the guard page, which nothing uses (the stack pointer is near
    // the top), so no live reference loses its memory.
    unsafe {
        let t = &mut *core::ptr::addr_of_mut!(GUARD_PT);
        for (j, e) in t.0.iter_mut().enumerate() {
            let frame = (big << 21) + ((j as u64) << 12);
            *e = if frame == guard { 0 } else { frame | 0x3 };
        }
        let pd = &mut *core::ptr::addr_of_mut!(PD);
        pd[(big / 512) as usize].0[(big % 512) as usize] = pt | 0x3;
    }
    x86_64::instructions::tlb::flush_all();
}

/// Maps `base..base + len` (inside the identity-mapped low 4 GiB) write-back instead
/// of uncached: for a BAR that is memory, not registers (ivshmem's BAR2 is RAM shared
/// with other VMs; uncached, every ring poll would go to memory on real hardware).
/// Pages are 2 MiB, so a range not made of whole 2 MiB pages (it would share one
/// with device registers) stays uncached: returns whether the mapping changed.
pub fn map_write_back(base: u64, len: u64) -> bool {
    const PAGE: u64 = 1 << 21;
    if !base.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || len == 0 || base + len > 1 << 32 {
        return false;
    }
    let first = base >> 21;
    let last = (base + len) >> 21;
    for i in first..last {
        let (t, e) = ((i / 512) as usize, (i % 512) as usize);
        // SAFETY: single-threaded kernel; the page directories are ours, built at boot,
        // and `i < 2048` stays inside the 4 directories. Only the cache bits change; the
        // frame, present and writable bits stay, so no live reference is invalidated.
        unsafe {
            let pd = &mut *core::ptr::addr_of_mut!(PD);
            pd[t].0[e] &= !0x18;
        }
    }
    // Stale uncached translations must not survive the change.
    x86_64::instructions::tlb::flush_all();
    true
}
