//! Interrupts: the legacy 8259 PICs masked, the local APIC enabled (its timer periodic),
//! the I/O APIC routing the card's PCI INTx line (qboot programs the PIIX routing and
//! each function's interrupt line register). Entry stubs are assembly: `extern
//! "x86-interrupt"` is nightly-only.
//!
//! Interrupt mode, and the rule for what runs at interrupt time: the node is attached
//! here; the program reaches it only through [`with_node`], which marks it busy. An
//! interrupt that finds it idle polls it, so GAMMA handlers run straight from the
//! card's interrupt; one that finds it busy only acknowledges the card and leaves a
//! note, and the program polls when its call returns. A handler therefore never runs
//! inside another engine call, and the handler may touch the engine's state and
//! atomics, nothing the interrupted program holds.
//!
//! The polling watchdog (LFC's): every call through [`with_node`] counts as polling and
//! masks the card's receive interrupt; the APIC timer unmasks it once the program has
//! not polled for the interval, so a polling program takes no card interrupts and a
//! computing one gets its messages within the interval. A program idle in a wait
//! unmasks it before `hlt`, so a message wakes it at once.

use core::arch::global_asm;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::port::outb;

/// Vectors: the card, the APIC timer, spurious.
pub const NIC_VECTOR: u8 = 0x30;
pub const TIMER_VECTOR: u8 = 0x31;
const SPURIOUS_VECTOR: u8 = 0xFF;

/// Local APIC registers (Intel SDM vol. 3, 11.4.1: the default base, checked below).
const LAPIC_BASE: u64 = 0xFEE0_0000;
const LAPIC_ID: usize = 0x20;
const LAPIC_TPR: usize = 0x80;
const LAPIC_EOI: usize = 0xB0;
const LAPIC_SVR: usize = 0xF0;
const LAPIC_LVT_TIMER: usize = 0x320;
const LAPIC_TIMER_INITIAL: usize = 0x380;
const LAPIC_TIMER_CURRENT: usize = 0x390;
const LAPIC_TIMER_DIVIDE: usize = 0x3E0;
/// I/O APIC (82093AA data sheet): index and data windows.
const IOAPIC_BASE: u64 = 0xFEC0_0000;

global_asm!(
    r#"
    .section .text
    .global irq_stub_nic
    .global irq_stub_timer
    .global irq_stub_spurious
irq_stub_nic:
    push 0x30
    jmp irq_common
irq_stub_timer:
    push 0x31
    jmp irq_common
irq_stub_spurious:
    iretq
irq_common:
    /* The caller-saved registers; the kernel uses no SSE (soft-float target). */
    push rax
    push rcx
    push rdx
    push rsi
    push rdi
    push r8
    push r9
    push r10
    push r11
    mov rdi, [rsp + 72]
    /* The CPU aligned RSP to 16 before its 5-word frame; with the vector and 9
       registers that is 15 words: one more makes RSP 16-aligned at the call. */
    sub rsp, 8
    call irq_entry
    add rsp, 8
    pop r11
    pop r10
    pop r9
    pop r8
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rax
    add rsp, 8
    iretq
"#
);

extern "C" {
    fn irq_stub_nic();
    fn irq_stub_timer();
    fn irq_stub_spurious();
}

fn lapic_read(off: usize) -> u32 {
    // SAFETY: the local APIC's registers, identity-mapped uncached (the PCI hole, 3 to
    // 4 GiB: boot.rs), 32-bit aligned.
    unsafe { core::ptr::read_volatile((LAPIC_BASE as usize + off) as *const u32) }
}

fn lapic_write(off: usize, v: u32) {
    // SAFETY: as in `lapic_read`.
    unsafe { core::ptr::write_volatile((LAPIC_BASE as usize + off) as *mut u32, v) }
}

fn ioapic_write(reg: u32, v: u32) {
    // SAFETY: the I/O APIC's index (offset 0) and data (offset 0x10) windows, mapped
    // as the local APIC's.
    unsafe {
        core::ptr::write_volatile(IOAPIC_BASE as *mut u32, reg);
        core::ptr::write_volatile((IOAPIC_BASE + 0x10) as *mut u32, v);
    }
}

/// Counters: interrupts taken, and those that ran the node's poll (handlers).
pub static NIC_INTERRUPTS: AtomicU64 = AtomicU64::new(0);
pub static TIMER_INTERRUPTS: AtomicU64 = AtomicU64::new(0);
pub static POLLS_AT_INTERRUPT: AtomicU64 = AtomicU64::new(0);

/// Masks the PICs, enables the local APIC and installs the gates. Interrupts stay
/// off (`cli`) until [`enable`].
pub fn init() -> bool {
    // Both 8259s fully masked: the APICs deliver everything.
    outb(0x21, 0xFF);
    outb(0xA1, 0xFF);
    // IA32_APIC_BASE (MSR 0x1B): enabled, at the default address we mapped.
    // SAFETY: reading an architectural MSR present on every x86-64 CPU.
    let base = unsafe { x86_64::registers::model_specific::Msr::new(0x1B).read() };
    if base & (1 << 11) == 0 || base & 0xFFFF_F000 != LAPIC_BASE {
        return false;
    }
    crate::idt::set_gate(NIC_VECTOR, irq_stub_nic as *const () as u64);
    crate::idt::set_gate(TIMER_VECTOR, irq_stub_timer as *const () as u64);
    crate::idt::set_gate(SPURIOUS_VECTOR, irq_stub_spurious as *const () as u64);
    lapic_write(LAPIC_TPR, 0);
    lapic_write(LAPIC_SVR, 0x100 | SPURIOUS_VECTOR as u32);
    true
}

/// This CPU's local APIC id.
pub fn apic_id() -> u8 {
    (lapic_read(LAPIC_ID) >> 24) as u8
}

/// Routes I/O APIC input `pin` (a PCI INTx line: level-triggered) to `vector` on this
/// CPU. QEMU's I/O APIC takes the PIIX's PCI lines as active high.
pub fn route(pin: u8, vector: u8) {
    let id = lapic_read(LAPIC_ID) >> 24;
    let reg = 0x10 + 2 * pin as u32;
    ioapic_write(reg + 1, id << 24);
    ioapic_write(reg, vector as u32 | 1 << 15);
}

/// Starts the APIC timer, periodic every `period` microseconds, calibrated against the
/// TSC (`tsc_hz`).
pub fn start_timer(period_us: u64, tsc_hz: u64) {
    // Divide by 16; count down from the top for 2 ms of TSC time.
    lapic_write(LAPIC_TIMER_DIVIDE, 0b0011);
    lapic_write(LAPIC_LVT_TIMER, 1 << 16);
    lapic_write(LAPIC_TIMER_INITIAL, u32::MAX);
    let t0 = crate::tsc::rdtsc();
    while crate::tsc::rdtsc() - t0 < tsc_hz / 500 {}
    let per_2ms = u32::MAX - lapic_read(LAPIC_TIMER_CURRENT);
    let ticks = (per_2ms as u64 * period_us / 2_000).clamp(1, u32::MAX as u64);
    lapic_write(LAPIC_LVT_TIMER, TIMER_VECTOR as u32 | 1 << 17);
    lapic_write(LAPIC_TIMER_INITIAL, ticks as u32);
}

/// Interrupts on.
pub fn enable() {
    // SAFETY: the IDT has a gate for every vector that can arrive (exceptions, the
    // card, the timer, spurious).
    unsafe { core::arch::asm!("sti", options(nomem, nostack)) };
}

/// Sleeps until the next interrupt (interrupts on).
pub fn halt() {
    // SAFETY: `sti; hlt` enables interrupts and halts with no window between them
    // (STI's one-instruction shadow), so a pending interrupt wakes the halt.
    unsafe { core::arch::asm!("sti", "hlt", options(nomem, nostack)) };
}

/// The attached node, type-erased: its address and the functions that poll it and
/// drive its card's interrupt, made for its concrete type by [`attach`].
struct Attached {
    node: AtomicUsize,
    poll: AtomicUsize,
    card: AtomicUsize,
}

static NODE: Attached = Attached {
    node: AtomicUsize::new(0),
    poll: AtomicUsize::new(0),
    card: AtomicUsize::new(0),
};
/// Inside a [`with_node`] call.
static BUSY: AtomicBool = AtomicBool::new(false);
/// An interrupt found the node busy: poll when the call returns.
static PENDING: AtomicBool = AtomicBool::new(false);
/// The card's receive interrupt is unmasked.
static UNMASKED: AtomicBool = AtomicBool::new(false);
/// TSC of the program's last poll, and the watchdog interval in TSC ticks.
static LAST_POLL: AtomicU64 = AtomicU64::new(0);
static INTERVAL: AtomicU64 = AtomicU64::new(u64::MAX);

/// The card's interrupt control: `f(op)` with op 0 = mask, 1 = unmask, 2 = acknowledge.
pub type CardOp = fn(u8) -> bool;

/// Attaches `node` for interrupt mode; `poll` polls it (running handlers), `card`
/// drives its card's interrupt; `interval_tsc` is the watchdog's delay.
///
/// # Safety
///
/// `node` must stay valid, and be reached only through [`with_node`], until
/// [`detach`].
pub unsafe fn attach(node: *mut (), poll: unsafe fn(*mut ()), card: CardOp, interval_tsc: u64) {
    NODE.poll.store(poll as usize, Ordering::SeqCst);
    NODE.card.store(card as usize, Ordering::SeqCst);
    INTERVAL.store(interval_tsc, Ordering::SeqCst);
    LAST_POLL.store(crate::tsc::rdtsc(), Ordering::SeqCst);
    NODE.node.store(node as usize, Ordering::SeqCst);
}

/// Detaches the node: interrupts no longer touch it.
pub fn detach() {
    // SAFETY: `cli` only masks interrupts.
    unsafe { core::arch::asm!("cli", options(nomem, nostack)) };
    card(0);
    UNMASKED.store(false, Ordering::SeqCst);
    NODE.node.store(0, Ordering::SeqCst);
}

fn card(op: u8) -> bool {
    let f = NODE.card.load(Ordering::SeqCst);
    if f == 0 {
        return false;
    }
    // SAFETY: stored by `attach` from a `CardOp`.
    let f: CardOp = unsafe { core::mem::transmute::<usize, CardOp>(f) };
    f(op)
}

/// Runs `f` on the attached node of type `T`, as the program's poll: interrupts that
/// arrive meanwhile leave the node alone; the card's interrupt is masked (the program
/// is polling); a poll an interrupt asked for runs at the end. Not reentrant.
///
/// # Safety
///
/// `T` must be the type the node was attached with.
pub unsafe fn with_node<T, R>(f: impl FnOnce(&mut T) -> R) -> R {
    // Only an interrupt's poll sets BUSY besides this, and the program does not run
    // during one: BUSY here means a nested call, which would let the inner call end
    // the outer one's protection.
    assert!(
        !BUSY.swap(true, Ordering::SeqCst),
        "intr::with_node is not reentrant"
    );
    let p = NODE.node.load(Ordering::SeqCst) as *mut T;
    // SAFETY: attached and valid (`attach`'s contract); no interrupt touches it while
    // BUSY is set, and this is the program's only way in.
    let node = unsafe { &mut *p };
    LAST_POLL.store(crate::tsc::rdtsc(), Ordering::SeqCst);
    if UNMASKED.swap(false, Ordering::SeqCst) {
        card(0);
    }
    let r = f(node);
    if PENDING.swap(false, Ordering::SeqCst) {
        poll_node();
    }
    // A long call is polling until its end: the watchdog's delay counts from here.
    LAST_POLL.store(crate::tsc::rdtsc(), Ordering::SeqCst);
    BUSY.store(false, Ordering::SeqCst);
    r
}

/// The wait's idle step in interrupt mode: let the card's interrupt wake us, then halt.
/// Interrupts are off from the unmasking to the `hlt` (`sti; hlt` reopens them with no
/// gap), so a frame that arrives meanwhile wakes the halt instead of being noted by an
/// interrupt that comes before it; one already noted skips the halt.
pub fn idle() {
    // SAFETY: `cli` only masks interrupts; `halt` or the `sti` below reopens them.
    unsafe { core::arch::asm!("cli", options(nomem, nostack)) };
    if !UNMASKED.swap(true, Ordering::SeqCst) {
        card(1);
    }
    if PENDING.swap(false, Ordering::SeqCst) {
        enable();
        return;
    }
    halt();
}

fn poll_node() {
    let node = NODE.node.load(Ordering::SeqCst);
    let poll = NODE.poll.load(Ordering::SeqCst);
    if node != 0 && poll != 0 {
        // SAFETY: stored by `attach` from an `unsafe fn(*mut ())` for this node's type.
        let poll: unsafe fn(*mut ()) = unsafe { core::mem::transmute::<usize, _>(poll) };
        // SAFETY: `attach`'s contract; callers hold the node (BUSY, or an interrupt
        // that found it idle).
        unsafe { poll(node as *mut ()) };
    }
}

/// Entered from the stubs with the vector.
#[no_mangle]
extern "C" fn irq_entry(vector: u64) {
    match vector as u8 {
        NIC_VECTOR => {
            NIC_INTERRUPTS.fetch_add(1, Ordering::Relaxed);
            // The line is level-triggered: acknowledge the card before the EOI.
            card(2);
            run_or_note();
        }
        TIMER_VECTOR => {
            TIMER_INTERRUPTS.fetch_add(1, Ordering::Relaxed);
            let silent = crate::tsc::rdtsc().wrapping_sub(LAST_POLL.load(Ordering::SeqCst));
            if NODE.node.load(Ordering::SeqCst) != 0
                && !BUSY.load(Ordering::SeqCst)
                && silent >= INTERVAL.load(Ordering::SeqCst)
            {
                // Watchdog: the program stopped polling; the card's interrupt delivers.
                if !UNMASKED.swap(true, Ordering::SeqCst) {
                    card(1);
                }
                // Timers (retransmission, acks) run even if nothing arrives.
                run_or_note();
            }
        }
        _ => {}
    }
    lapic_write(LAPIC_EOI, 0);
}

fn run_or_note() {
    if NODE.node.load(Ordering::SeqCst) == 0 {
        return;
    }
    if BUSY.swap(true, Ordering::SeqCst) {
        PENDING.store(true, Ordering::SeqCst);
        return;
    }
    POLLS_AT_INTERRUPT.fetch_add(1, Ordering::Relaxed);
    poll_node();
    BUSY.store(false, Ordering::SeqCst);
}
