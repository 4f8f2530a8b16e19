//! CPU exceptions: each of vectors 0-31 gets a stub (in assembly: `extern
//! "x86-interrupt"` is nightly-only) that pushes its number, and an error code of 0
//! where the CPU pushes none, then reports the fault on the console and fails the run.

use core::arch::global_asm;

use crate::exit::{exit, Verdict};
use crate::println;

global_asm!(
    r#"
    .section .text
exc_stub_0:
    push 0
    push 0
    jmp exc_common
exc_stub_1:
    push 0
    push 1
    jmp exc_common
exc_stub_2:
    push 0
    push 2
    jmp exc_common
exc_stub_3:
    push 0
    push 3
    jmp exc_common
exc_stub_4:
    push 0
    push 4
    jmp exc_common
exc_stub_5:
    push 0
    push 5
    jmp exc_common
exc_stub_6:
    push 0
    push 6
    jmp exc_common
exc_stub_7:
    push 0
    push 7
    jmp exc_common
exc_stub_8:
    push 8
    jmp exc_common
exc_stub_9:
    push 0
    push 9
    jmp exc_common
exc_stub_10:
    push 10
    jmp exc_common
exc_stub_11:
    push 11
    jmp exc_common
exc_stub_12:
    push 12
    jmp exc_common
exc_stub_13:
    push 13
    jmp exc_common
exc_stub_14:
    push 14
    jmp exc_common
exc_stub_15:
    push 0
    push 15
    jmp exc_common
exc_stub_16:
    push 0
    push 16
    jmp exc_common
exc_stub_17:
    push 17
    jmp exc_common
exc_stub_18:
    push 0
    push 18
    jmp exc_common
exc_stub_19:
    push 0
    push 19
    jmp exc_common
exc_stub_20:
    push 0
    push 20
    jmp exc_common
exc_stub_21:
    push 21
    jmp exc_common
exc_stub_22:
    push 0
    push 22
    jmp exc_common
exc_stub_23:
    push 0
    push 23
    jmp exc_common
exc_stub_24:
    push 0
    push 24
    jmp exc_common
exc_stub_25:
    push 0
    push 25
    jmp exc_common
exc_stub_26:
    push 0
    push 26
    jmp exc_common
exc_stub_27:
    push 0
    push 27
    jmp exc_common
exc_stub_28:
    push 0
    push 28
    jmp exc_common
exc_stub_29:
    push 29
    jmp exc_common
exc_stub_30:
    push 30
    jmp exc_common
exc_stub_31:
    push 0
    push 31
    jmp exc_common
exc_common:
    mov rdi, rsp
    and rsp, -16
    call exception
    ud2

    .section .rodata
    .balign 8
    .global exc_stubs
exc_stubs:
    .quad exc_stub_0
    .quad exc_stub_1
    .quad exc_stub_2
    .quad exc_stub_3
    .quad exc_stub_4
    .quad exc_stub_5
    .quad exc_stub_6
    .quad exc_stub_7
    .quad exc_stub_8
    .quad exc_stub_9
    .quad exc_stub_10
    .quad exc_stub_11
    .quad exc_stub_12
    .quad exc_stub_13
    .quad exc_stub_14
    .quad exc_stub_15
    .quad exc_stub_16
    .quad exc_stub_17
    .quad exc_stub_18
    .quad exc_stub_19
    .quad exc_stub_20
    .quad exc_stub_21
    .quad exc_stub_22
    .quad exc_stub_23
    .quad exc_stub_24
    .quad exc_stub_25
    .quad exc_stub_26
    .quad exc_stub_27
    .quad exc_stub_28
    .quad exc_stub_29
    .quad exc_stub_30
    .quad exc_stub_31
"#
);

extern "C" {
    static exc_stubs: [u64; 32];
}

#[repr(C, align(16))]
struct Idt([u128; 256]);

static mut IDT: Idt = Idt([0; 256]);

#[repr(C, packed)]
struct IdtPtr {
    limit: u16,
    base: u64,
}

const NAMES: [&str; 32] = [
    "divide error",
    "debug",
    "NMI",
    "breakpoint",
    "overflow",
    "bound range",
    "invalid opcode",
    "device not available",
    "double fault",
    "coprocessor overrun",
    "invalid TSS",
    "segment not present",
    "stack fault",
    "general protection",
    "page fault",
    "reserved",
    "x87 floating point",
    "alignment check",
    "machine check",
    "SIMD floating point",
    "virtualization",
    "control protection",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "hypervisor injection",
    "VMM communication",
    "security",
    "reserved",
];

/// A 64-bit interrupt gate to `addr` in the kernel code segment, present, ring 0.
fn gate(addr: u64) -> u128 {
    let a = addr as u128;
    (a & 0xFFFF)
        | (0x08 << 16)
        | (0x8E << 40)
        | (((a >> 16) & 0xFFFF) << 48)
        | (((a >> 32) & 0xFFFF_FFFF) << 64)
}

/// Points `vector` at the stub at `addr` (device interrupts: intr.rs).
pub fn set_gate(vector: u8, addr: u64) {
    // SAFETY: called with interrupts off (boot, before `sti`), so no interrupt reads
    // the entry while it is written; IDT is only written here and in `init`.
    unsafe {
        let idt = &mut *core::ptr::addr_of_mut!(IDT);
        core::ptr::write_volatile(&mut idt.0[vector as usize], gate(addr));
    }
}

/// Loads an IDT whose first 32 entries are the exception stubs.
pub fn init() {
    // SAFETY: single-threaded boot code is the only user of IDT; the stub table is
    // 32 addresses emitted above; lidt takes a pointer to a valid descriptor.
    unsafe {
        let idt = &mut *core::ptr::addr_of_mut!(IDT);
        for (v, &addr) in exc_stubs.iter().enumerate() {
            idt.0[v] = gate(addr);
        }
        let ptr = IdtPtr {
            limit: (core::mem::size_of::<Idt>() - 1) as u16,
            base: idt as *const Idt as u64,
        };
        core::arch::asm!("lidt [{}]", in(reg) &ptr, options(readonly, nostack, preserves_flags));
    }
}

/// Reports an exception and fails the run. `frame` points at the vector, then the
/// error code, then the CPU's frame (RIP, CS, RFLAGS, RSP, SS).
#[no_mangle]
extern "C" fn exception(frame: *const u64) -> ! {
    // SAFETY: the stub passes its stack pointer: seven readable words.
    let f = unsafe { core::slice::from_raw_parts(frame, 7) };
    let v = f[0] as usize;
    let cr2: u64;
    // SAFETY: reading CR2 has no side effects.
    unsafe {
        core::arch::asm!("mov {}, cr2", out(reg) cr2, options(nomem, nostack, preserves_flags))
    };
    println!(
        "volley unikernel: EXCEPTION {} ({}) error {:#x} at rip {:#x} rsp {:#x} cr2 {:#x}",
        v,
        NAMES.get(v).copied().unwrap_or("?"),
        f[1],
        f[2],
        f[5],
        cr2
    );
    exit(Verdict::Failure)
}
