//! PVH entry: QEMU jumps to `_start32` in 32-bit protected mode, paging off, with the
//! physical address of `hvm_start_info` in EBX. We zero .bss, identity-map the low
//! 4 GiB with 2 MiB pages (RAM and the PCI hole), enter long mode and call
//! `rust_main(start_info)`.

use core::arch::global_asm;

// The PVH ELF note (XEN_ELFNOTE_PHYS32_ENTRY = 18): name "Xen", an 8-byte descriptor
// holding the 32-bit physical entry point (PLATFORM.md: QEMU 7.2 reads 8 bytes).
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

const STACK_SIZE: usize = 64 * 1024;

#[repr(C, align(4096))]
struct Table([u64; 512]);

#[repr(C, align(16))]
struct Stack([u8; STACK_SIZE]);

#[no_mangle]
static mut PML4: Table = Table([0; 512]);
#[no_mangle]
static mut PDPT: Table = Table([0; 512]);
#[no_mangle]
static mut PD: [Table; 4] = [const { Table([0; 512]) }; 4];
#[no_mangle]
static mut STACK: Stack = Stack([0; STACK_SIZE]);
