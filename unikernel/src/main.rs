//! `volley-unikernel`: Volley as a single-application x86_64 kernel, one image per node,
//! booted by QEMU straight from `-kernel` through the PVH entry point.
//!
//! This first part boots to long mode, talks on COM1, catches CPU exceptions and ends
//! QEMU through `isa-debug-exit` with a verdict. The kernel command line (`-append`)
//! chooses what to run: `test=ok` (default), `test=panic`, `test=fault`.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod boot;
mod exit;
mod idt;
mod pvh;
mod serial;

use exit::{exit, Verdict};

/// Entered from the boot code in long mode with the `hvm_start_info` address.
#[no_mangle]
extern "C" fn rust_main(start_info: u32) -> ! {
    serial::init();
    idt::init();
    let cmdline = pvh::cmdline(start_info).unwrap_or("");
    println!("volley unikernel: booted, cmdline {:?}", cmdline);
    match pvh::arg(cmdline, "test").unwrap_or("ok") {
        "ok" => {
            println!("volley unikernel: test ok");
            exit(Verdict::Success)
        }
        "panic" => panic!("deliberate panic requested on the command line"),
        "fault" => {
            // SAFETY: ud2 raises #UD on purpose; the exception handler ends the run.
            unsafe { core::arch::asm!("ud2") };
            unreachable!("ud2 returned")
        }
        other => {
            println!("volley unikernel: unknown test {:?}", other);
            exit(Verdict::Failure)
        }
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("volley unikernel: PANIC: {}", info);
    exit(Verdict::Failure)
}
