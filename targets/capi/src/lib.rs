//! Volley's C ABI: the entry points `libvolley` exports, one module per API
//! ([`gamma`], [`lfc`], [`cheetah`], [`qnix`]) and Volley's own extensions
//! ([`volley`]: event-loop integration).
//!
//! Linked into `libvolley.so` and `libvolley.a` by the `libvolley` package (which
//! only re-exports this crate, so that release builds of the library get
//! whole-program LTO: cargo skips LTO for a package that is also an rlib), with
//! hand-written headers in `include/`. The build writes `volley.pc` next to the
//! library for `pkg-config`.
//!
//! Every `extern "C"` entry catches panics: a Rust panic never crosses into C; it
//! becomes one line on stderr and an error return. Errors at start-up are one line
//! and a non-zero exit.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

pub mod cheetah;
pub use cheetah::{
    cheetah_core_ainvoke, cheetah_core_barrier, cheetah_core_expose, cheetah_core_finalize,
    cheetah_core_get, cheetah_core_mycontext, cheetah_core_ncontexts, cheetah_core_poll,
    cheetah_core_put, cheetah_core_register, cheetah_core_setup, cheetah_core_wait,
};
pub mod gamma;
pub use gamma::*;
pub mod lfc;
pub mod qnix;
pub use lfc::*;
pub use qnix::*;
pub mod volley;
pub use volley::{volley_arm, volley_wakeup_fd};

/// Runs a C entry point's body, turning a panic into one line and `fail`.
fn guard<T>(name: &str, fail: T, f: impl FnOnce() -> T) -> T {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // One line, not a backtrace: the guard below says which call it was.
        std::panic::set_hook(Box::new(|info| {
            eprintln!("volley: internal error: {info}");
        }));
    });
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            eprintln!("volley: {name} failed");
            fail
        }
    }
}

/// Start-up failure: one line, then exit non-zero.
fn die(msg: &str) -> ! {
    eprintln!("volley: {msg}");
    std::process::exit(1)
}

/// # Safety
/// `argv` is null or holds `argc` valid C strings.
unsafe fn args_of(argc: c_int, argv: *mut *mut c_char) -> Vec<String> {
    if argv.is_null() || argc <= 0 {
        return Vec::new();
    }
    (0..argc as usize)
        .map(|i| {
            // SAFETY: the caller's contract: argv has argc entries.
            let p = unsafe { *argv.add(i) };
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: each entry is a NUL-terminated string.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        })
        .collect()
}
