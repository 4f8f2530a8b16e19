//! `<volley.h>`: Volley's extensions beside the original APIs. An event loop
//! sleeps on [`volley_wakeup_fd`] after [`volley_arm`] returned 0, then calls its
//! API's poll (`gamma_test`, `lfc_poll`, `cheetah_core_poll`, a look at the QNIX
//! doorbells); see `volley_hosted::wakeup`.

use std::ffi::c_int;

use volley_hosted::wakeup::EventLoop;
use volley_hosted::HostError;

use crate::guard;

/// An error return: -1, with one line on stderr saying why.
const E_FAIL: c_int = -1;

fn fail(call: &str, e: &HostError) -> c_int {
    eprintln!("volley: {call}: {e}");
    E_FAIL
}

/// Runs `f` on the personality this process started: GAMMA (on this thread), LFC,
/// Cheetah, else QNIX (`qnix`).
fn on_personality(
    call: &str,
    f: impl Fn(&mut dyn EventLoop) -> Result<c_int, HostError>,
    qnix: bool,
) -> c_int {
    let r = crate::gamma::event(&f)
        .map(|r| {
            r.unwrap_or_else(|code| {
                // GAMMA's own number for the misuse, as its calls return it.
                eprintln!("volley: {call}: called from inside a GAMMA handler");
                Ok(code)
            })
        })
        .or_else(|| crate::lfc::event(&f))
        .or_else(|| crate::cheetah::event(&f))
        .or_else(|| crate::qnix::event(qnix));
    match r {
        Some(Ok(v)) => v,
        Some(Err(e)) => fail(call, &e),
        None => fail(
            call,
            &HostError::Other("no API started in this process (gamma_init, lfc_init, cheetah_core_setup or qx_init first)".into()),
        ),
    }
}

/// `volley_wakeup_fd`: a descriptor of this process that turns readable when
/// there is work for its API's poll; close-on-exec. -1 (one line on stderr) before
/// any API was started, or where it cannot be made.
#[no_mangle]
pub extern "C" fn volley_wakeup_fd() -> c_int {
    guard("volley_wakeup_fd", E_FAIL, || {
        on_personality("volley_wakeup_fd", |e| e.wakeup_fd(), false)
    })
}

/// `volley_arm`: 0 when armed (the program may sleep on the descriptor), 1 when
/// work is already there (poll first, then arm again), -1 on error.
#[no_mangle]
pub extern "C" fn volley_arm() -> c_int {
    guard("volley_arm", E_FAIL, || {
        on_personality("volley_arm", |e| e.arm().map(|a| c_int::from(!a)), true)
    })
}
