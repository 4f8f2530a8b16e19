//! GAMMA's C ABI: `gamma.h` (the GAMMA API of March 2004) and
//! `linux/gamma/libgamma.h` (the later GAMMA API, `unsigned short` ports, one handler
//! per active port).
//!
//! A rank starts exactly as a Rust program does ([`volley_hosted::init`]): our
//! launcher, `mpiexec`, Open MPI, Slurm or a hosts list, and `VOLLEY_FABRIC`. Started
//! by none of them, `gamma_init` starts the job itself, as GAMMA did: `-GAMMANP N` on
//! the command line (or `num_nodes`) copies of the program on this machine.
//!
//! GAMMA is single-threaded: the instance lives in the thread that called
//! `gamma_init`, and handlers run on it inside the calls that poll. While a handler
//! runs, the calls it makes go through its [`Upcall`] (post a buffer, signal, queue a
//! send); the calls that would wait for the poll running the handler return an error.

use crate::{args_of, die, guard};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_long, c_uchar, c_ulong, c_ushort, c_void};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI64, AtomicU16, AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use volley_core::engine::{Error, SendHandle, BROADCAST as ANY_NODE};
use volley_core::gamma::{BufferKind, Upcall, BARRIER_PORT, BROADCAST_PORT, PORTS};
use volley_hosted::bootstrap::{self, Boot, Source};
use volley_hosted::secret::Secret;
use volley_hosted::wakeup::EventLoop;
use volley_hosted::{launcher, node, Fabric, HostGamma};

mod os;
mod send;
mod start;

pub use os::*;
pub use send::*;
pub use start::*;

/// A C handler: `void handler(void)`.
pub type CHandler = extern "C" fn();

/// What the C side keeps per process, shared with the handler trampolines.
#[derive(Debug)]
pub struct CState {
    recv: Vec<Option<CHandler>>,
    err: Vec<Option<CHandler>>,
    /// Each port's buffer size, for `gamma_attach_buffer` (which gives none).
    buf_len: Vec<usize>,
}

impl CState {
    fn new() -> CState {
        CState {
            recv: vec![None; PORTS],
            err: vec![None; PORTS],
            buf_len: vec![0; PORTS],
        }
    }
}

type Up<'u> = Upcall<'u, 'static, CState>;

struct Instance {
    g: HostGamma<CState>,
    /// Non-blocking sends by C handle.
    handles: Handles,
    /// Copies of this program `gamma_init` started (no launcher).
    children: Vec<Child>,
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<Instance>>> = const { RefCell::new(None) };
    /// The running handler's upcall, erased; null outside handlers.
    static CURRENT: Cell<*mut ()> = const { Cell::new(std::ptr::null_mut()) };
    /// Inside `gamma_atomic`: no call may poll (and so run a handler).
    static ATOMIC: Cell<bool> = const { Cell::new(false) };
    static IDS: Cell<(c_int, c_int, c_int)> = const { Cell::new((-1, -1, -1)) };
}

// Globals a handler reads. Atomics have the layout of the plain C types the headers
// declare; they are written only by the thread running the handler.
/// `gamma_active_port` of `gamma.h`.
#[no_mangle]
pub static gamma_active_port: AtomicU8 = AtomicU8::new(0);
/// `gamma_active_port` of `linux/gamma/libgamma.h` (renamed there by a macro).
#[no_mangle]
pub static volley_libgamma_active_port: AtomicU16 = AtomicU16::new(0);
/// `gamma_errno`.
#[no_mangle]
pub static gamma_errno: AtomicU8 = AtomicU8::new(0);
/// `gamma_msglen`.
#[no_mangle]
pub static gamma_msglen: AtomicI64 = AtomicI64::new(0);

/// Returned for a call made before `gamma_init`, on another thread, or with a bad
/// argument (a null pointer, an unknown buffer kind).
const E_USAGE: c_int = -1;
/// The C handle of a send a handler queued: it completes on its own.
const QUEUED_HANDLE: c_int = 0;

fn code(e: Error) -> c_int {
    volley_core::gamma::code(e)
}

/// Runs `f` on the instance, outside handlers and `gamma_atomic` when `polls`.
fn with_gamma(polls: bool, f: impl FnOnce(&mut Instance) -> c_int) -> c_int {
    if polls && ATOMIC.get() {
        return code(Error::InHandler);
    }
    INSTANCE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut inst) => match inst.as_mut() {
            Some(i) => f(i),
            None => E_USAGE,
        },
        // Borrowed further up this stack: a handler is running.
        Err(_) => code(Error::InHandler),
    })
}

/// The process's GAMMA instance as an event loop sees it (`volley.h`); `None`
/// before `gamma_init` on this thread. Inside a handler: `Err(code)`.
pub(crate) fn event<R>(f: impl FnOnce(&mut dyn EventLoop) -> R) -> Option<Result<R, c_int>> {
    INSTANCE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut inst) => inst.as_mut().map(|i| Ok(f(&mut i.g))),
        Err(_) => Some(Err(code(Error::InHandler))),
    })
}

/// Runs `f` on the running handler's upcall, if a handler is running.
fn with_upcall<R>(f: impl FnOnce(&mut Up<'static>) -> R) -> Option<R> {
    let p = CURRENT.get();
    if p.is_null() {
        return None;
    }
    // SAFETY: `run_handler` stores a pointer to the live upcall for exactly the time
    // the C handler runs, on this thread; we are called from that handler, so the
    // engine code holding the upcall is suspended in the call and nothing else uses
    // it. The `'static` only erases the borrow's lifetime; the reference does not
    // leave this call.
    Some(f(unsafe { &mut *(p as *mut Up<'static>) }))
}

fn run_handler(up: &mut Up<'_>, error: bool) {
    let port = up.active_port();
    let st = up.state();
    let h = if error {
        st.err[port as usize]
    } else {
        st.recv[port as usize]
    };
    let Some(h) = h else { return };
    gamma_active_port.store(port as u8, Relaxed);
    volley_libgamma_active_port.store(port, Relaxed);
    gamma_errno.store(up.errno().map_or(0, |e| e as u8), Relaxed);
    gamma_msglen.store(up.msg_len() as i64, Relaxed);
    let prev = CURRENT.replace(up as *mut Up<'_> as *mut ());
    h();
    CURRENT.set(prev);
}

fn on_message(up: &mut Up<'_>) {
    run_handler(up, false)
}

fn on_error(up: &mut Up<'_>) {
    run_handler(up, true)
}

/// Whether a C pointer and length can name memory at all: not NULL with bytes to
/// give, not past what an object may span (`isize::MAX`), not wrapping around the
/// address space. What `slice::from_raw_parts` needs and a caller can get wrong.
fn plausible(p: *const c_void, len: usize) -> bool {
    len == 0
        || (!p.is_null() && len <= isize::MAX as usize && (p as usize).checked_add(len).is_some())
}

/// A buffer the C program hands over: `Ok(None)` for none (NULL or length 0: a
/// port without a buffer takes only empty messages, as GAMMA's), an error for a
/// length no memory has.
///
/// # Safety
/// `p` must point to `len` writable bytes that stay valid, and are touched by the
/// program only as GAMMA allows, for as long as the port may store into them.
unsafe fn buffer(p: *mut c_void, len: usize) -> Result<Option<&'static mut [u8]>, c_int> {
    if p.is_null() || len == 0 {
        return Ok(None);
    }
    if !plausible(p, len) {
        return Err(E_USAGE);
    }
    // SAFETY: the caller's contract above (GAMMA's: a destination buffer is valid
    // memory the program set aside for the port); `plausible` checked what can be.
    Ok(Some(unsafe {
        std::slice::from_raw_parts_mut(p as *mut u8, len)
    }))
}

/// Bytes to send (empty for length 0); `None` for NULL with a length, or a length
/// no memory has: a usage error, never an empty message in its place.
///
/// # Safety
/// `p` must point to `len` readable bytes that stay valid for `'a`.
unsafe fn data<'a>(p: *const c_void, len: c_ulong) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    if len == 0 {
        return Some(&[]);
    }
    if !plausible(p, len) {
        return None;
    }
    // SAFETY: the caller's contract above; `plausible` checked what can be.
    Some(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

fn user_port(port: u16) -> Result<(), Error> {
    match port {
        BROADCAST_PORT | BARRIER_PORT => Err(Error::ReservedPort),
        p if p as usize >= PORTS => Err(Error::InvalidPort),
        _ => Ok(()),
    }
}

fn result(r: Result<usize, Error>) -> c_int {
    match r {
        Ok(n) => n.min(c_int::MAX as usize) as c_int,
        Err(e) => code(e),
    }
}

// ------------------------------------------------------------------- start-up

fn kind_of(k: c_uchar) -> Option<BufferKind> {
    match k {
        1 => Some(BufferKind::GoAhead),
        2 => Some(BufferKind::GoBack),
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
/// # Safety
/// As [`buffer`] for `buf` and `len`.
unsafe fn set_port(
    port: u16,
    dest_node: u16,
    dest_par_pid: u16,
    dest_port: u16,
    recv: Option<CHandler>,
    err: Option<CHandler>,
    sem: u16,
    kind: c_uchar,
    buf: *mut c_void,
    len: c_ulong,
) -> c_int {
    // SAFETY: the caller's contract.
    let buf = match unsafe { buffer(buf, len as usize) } {
        Ok(b) => b,
        Err(rc) => return rc,
    };
    if !CURRENT.get().is_null() {
        return code(Error::InHandler);
    }
    let Some(kind) = kind_of(kind) else {
        return E_USAGE;
    };
    with_gamma(false, |i| {
        let len = buf.as_ref().map_or(0, |b| b.len());
        let r = i.g.set_active_port(
            port,
            dest_node,
            dest_par_pid,
            dest_port,
            recv.map(|_| on_message as fn(&mut Up<'_>)),
            err.map(|_| on_error as fn(&mut Up<'_>)),
            sem,
            kind,
            buf,
        );
        if r.is_ok() {
            let st = i.g.state_mut();
            st.recv[port as usize] = recv;
            st.err[port as usize] = err;
            st.buf_len[port as usize] = len;
        }
        r.map_or_else(code, |()| 0)
    })
}

fn wide_node(n: c_uchar) -> u16 {
    if n == 255 {
        ANY_NODE
    } else {
        n as u16
    }
}

/// `gamma_set_active_port`.
///
/// # Safety
/// `destination_buffer` is null or `buffer_len` writable bytes that stay valid while
/// the port may store into them.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn gamma_set_active_port(
    port: c_uchar,
    dest_node: c_uchar,
    dest_par_pid: c_uchar,
    dest_port: c_uchar,
    receiver_handler: Option<CHandler>,
    error_handler: Option<CHandler>,
    semaphore: c_uchar,
    buffer_kind: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    guard("gamma_set_active_port", E_USAGE, || {
        // SAFETY: the caller's contract.
        unsafe {
            set_port(
                port as u16,
                wide_node(dest_node),
                dest_par_pid as u16,
                dest_port as u16,
                receiver_handler,
                error_handler,
                semaphore as u16,
                buffer_kind,
                destination_buffer,
                buffer_len,
            )
        }
    })
}

/// `gamma_set_passive_port`.
///
/// # Safety
/// As [`gamma_set_active_port`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn gamma_set_passive_port(
    port: c_uchar,
    dest_node: c_uchar,
    dest_par_pid: c_uchar,
    dest_port: c_uchar,
    semaphore: c_uchar,
    buffer_kind: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    guard("gamma_set_passive_port", E_USAGE, || {
        // SAFETY: the caller's contract.
        unsafe {
            set_port(
                port as u16,
                wide_node(dest_node),
                dest_par_pid as u16,
                dest_port as u16,
                None,
                None,
                semaphore as u16,
                buffer_kind,
                destination_buffer,
                buffer_len,
            )
        }
    })
}

/// `gamma_set_active_port` of `libgamma.h`: one handler, wide ports.
///
/// # Safety
/// As [`gamma_set_active_port`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn volley_libgamma_set_active_port(
    port: c_ushort,
    dest_node: c_ushort,
    dest_par_pid: c_uchar,
    dest_port: c_ushort,
    handler: Option<CHandler>,
    semaphore: c_ushort,
    buffer_kind: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    guard("gamma_set_active_port", E_USAGE, || {
        // SAFETY: the caller's contract.
        unsafe {
            set_port(
                port,
                dest_node,
                dest_par_pid as u16,
                dest_port,
                handler,
                None,
                semaphore,
                buffer_kind,
                destination_buffer,
                buffer_len,
            )
        }
    })
}

/// `gamma_set_passive_port` of `libgamma.h`.
///
/// # Safety
/// As [`gamma_set_active_port`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn volley_libgamma_set_passive_port(
    port: c_ushort,
    dest_node: c_ushort,
    dest_par_pid: c_uchar,
    dest_port: c_ushort,
    semaphore: c_ushort,
    buffer_kind: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    guard("gamma_set_passive_port", E_USAGE, || {
        // SAFETY: the caller's contract.
        unsafe {
            set_port(
                port,
                dest_node,
                dest_par_pid as u16,
                dest_port,
                None,
                None,
                semaphore,
                buffer_kind,
                destination_buffer,
                buffer_len,
            )
        }
    })
}

/// `post_recv` (`len` given) and `attach_buffer` (`len` = the port's buffer size).
fn rebind(port: u16, p: *mut c_void, len: Option<usize>) -> c_int {
    if let Err(e) = user_port(port) {
        return code(e);
    }
    let post = |up_len: usize| {
        // SAFETY: the C caller hands the buffer over as GAMMA requires (valid for
        // `len` bytes until the port is given another one).
        unsafe { buffer(p, len.unwrap_or(up_len)) }.ok().flatten()
    };
    let r = with_upcall(|up| {
        let l = up.state().buf_len[port as usize];
        let Some(b) = post(l) else {
            return E_USAGE;
        };
        let n = b.len();
        let r = match len {
            Some(_) => up.post_recv(port, b),
            None => up.attach_buffer(port, b),
        };
        if r.is_ok() && len.is_some() {
            up.state().buf_len[port as usize] = n;
        }
        r.map_or_else(code, |_| 0)
    });
    if let Some(rc) = r {
        return rc;
    }
    with_gamma(false, |i| {
        let l = i.g.state().buf_len[port as usize];
        let Some(b) = post(l) else {
            return E_USAGE;
        };
        let n = b.len();
        let r = match len {
            Some(_) => i.g.post_recv(port, b),
            None => i.g.attach_buffer(port, b),
        };
        if r.is_ok() && len.is_some() {
            i.g.state_mut().buf_len[port as usize] = n;
        }
        r.map_or_else(code, |_| 0)
    })
}

/// `gamma_post_recv`.
///
/// # Safety
/// `destination_buffer` holds `buffer_len` writable bytes that stay valid while the
/// port may store into them.
#[no_mangle]
pub unsafe extern "C" fn gamma_post_recv(
    input_port: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    guard("gamma_post_recv", E_USAGE, || {
        rebind(
            input_port as u16,
            destination_buffer,
            Some(buffer_len as usize),
        )
    })
}

/// `gamma_post_recv` of `libgamma.h`.
///
/// # Safety
/// As [`gamma_post_recv`].
#[no_mangle]
pub unsafe extern "C" fn volley_libgamma_post_recv(
    input_port: c_ushort,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    guard("gamma_post_recv", E_USAGE, || {
        rebind(input_port, destination_buffer, Some(buffer_len as usize))
    })
}

/// `gamma_attach_buffer`.
///
/// # Safety
/// `destination_buffer` holds as many writable bytes as the port's buffer size,
/// valid while the port may store into them.
#[no_mangle]
pub unsafe extern "C" fn gamma_attach_buffer(
    input_port: c_uchar,
    destination_buffer: *mut c_void,
) -> c_int {
    guard("gamma_attach_buffer", E_USAGE, || {
        rebind(input_port as u16, destination_buffer, None)
    })
}

/// `gamma_attach_buffer` of `libgamma.h`.
///
/// # Safety
/// As [`gamma_attach_buffer`].
#[no_mangle]
pub unsafe extern "C" fn volley_libgamma_attach_buffer(
    input_port: c_ushort,
    destination_buffer: *mut c_void,
) -> c_int {
    guard("gamma_attach_buffer", E_USAGE, || {
        rebind(input_port, destination_buffer, None)
    })
}

// ---------------------------------------------------------------------- sends

fn sem_op(sem: u16, error: bool) -> c_int {
    let r = with_upcall(|up| {
        let r = if error {
            up.sigerr(sem)
        } else {
            up.signal(sem)
        };
        r.map_or_else(code, |()| 0)
    });
    if let Some(rc) = r {
        return rc;
    }
    with_gamma(false, |i| {
        let r = if error {
            i.g.sigerr(sem)
        } else {
            i.g.signal(sem)
        };
        r.map_or_else(code, |()| 0)
    })
}

fn wait(sem: u16, n: c_ulong) -> c_int {
    if !CURRENT.get().is_null() {
        return code(Error::InHandler);
    }
    let n = n.min(u32::MAX as c_ulong) as u32;
    with_gamma(true, |i| i.g.wait(sem, n).unwrap_or_else(code))
}

fn test(sem: u16) -> c_int {
    let count = |v: u32| v.min(c_int::MAX as u32) as c_int;
    if let Some(rc) = with_upcall(|up| up.semaphore(sem).map_or_else(code, |s| count(s.count))) {
        return rc;
    }
    let polls = !ATOMIC.get();
    with_gamma(false, |i| {
        let r = if polls {
            i.g.test(sem)
        } else {
            i.g.engine().ports().semaphore(sem).map(|s| s.count)
        };
        r.map_or_else(code, count)
    })
}

/// `gamma_signal`.
#[no_mangle]
pub extern "C" fn gamma_signal(sem: c_uchar) -> c_int {
    guard("gamma_signal", E_USAGE, || sem_op(sem as u16, false))
}
/// `gamma_signal` of `libgamma.h`.
#[no_mangle]
pub extern "C" fn volley_libgamma_signal(sem: c_ushort) -> c_int {
    guard("gamma_signal", E_USAGE, || sem_op(sem, false))
}
/// `gamma_sigerr`.
#[no_mangle]
pub extern "C" fn gamma_sigerr(sem: c_uchar) -> c_int {
    guard("gamma_sigerr", E_USAGE, || sem_op(sem as u16, true))
}
/// `gamma_sigerr` of `libgamma.h`.
#[no_mangle]
pub extern "C" fn volley_libgamma_sigerr(sem: c_ushort) -> c_int {
    guard("gamma_sigerr", E_USAGE, || sem_op(sem, true))
}
/// `gamma_wait`: polls until `sem` reaches `n`, takes `n`; 0, or minus the errors
/// signalled on it since the last wait.
#[no_mangle]
pub extern "C" fn gamma_wait(sem: c_uchar, n: c_ulong) -> c_int {
    guard("gamma_wait", E_USAGE, || wait(sem as u16, n))
}
/// `gamma_wait` of `libgamma.h`.
#[no_mangle]
pub extern "C" fn volley_libgamma_wait(sem: c_ushort, n: c_ulong) -> c_int {
    guard("gamma_wait", E_USAGE, || wait(sem, n))
}
/// `gamma_test`: the semaphore's value.
#[no_mangle]
pub extern "C" fn gamma_test(sem: c_uchar) -> c_int {
    guard("gamma_test", E_USAGE, || test(sem as u16))
}
/// `gamma_test` of `libgamma.h`.
#[no_mangle]
pub extern "C" fn volley_libgamma_test(sem: c_ushort) -> c_int {
    guard("gamma_test", E_USAGE, || test(sem))
}

// -------------------------------------------------------------- miscellaneous

/// `gamma_atomic`: runs `funct` with no handler in between. Inside it, as in a
/// handler, calls that would poll (sends, waits, the barrier) return an error.
#[no_mangle]
pub extern "C" fn gamma_atomic(funct: Option<CHandler>) -> c_int {
    guard("gamma_atomic", E_USAGE, || {
        let Some(f) = funct else { return E_USAGE };
        let prev = ATOMIC.replace(true);
        f();
        ATOMIC.set(prev);
        0
    })
}

/// `gamma_sync`: barrier of the group; negative if a member died.
#[no_mangle]
pub extern "C" fn gamma_sync() -> c_int {
    guard("gamma_sync", E_USAGE, || {
        if !CURRENT.get().is_null() {
            return code(Error::InHandler);
        }
        with_gamma(true, |i| i.g.sync().map_or_else(code, |()| 0))
    })
}

fn id(pick: fn((c_int, c_int, c_int)) -> c_int) -> c_int {
    let v = pick(IDS.get());
    if v < 0 {
        E_USAGE
    } else {
        v
    }
}

/// `gamma_my_par_pid`.
#[no_mangle]
pub extern "C" fn gamma_my_par_pid() -> c_int {
    guard("gamma_my_par_pid", E_USAGE, || id(|i| i.0))
}
/// `gamma_my_node`.
#[no_mangle]
pub extern "C" fn gamma_my_node() -> c_int {
    guard("gamma_my_node", E_USAGE, || id(|i| i.1))
}
/// `gamma_how_many_nodes`.
#[no_mangle]
pub extern "C" fn gamma_how_many_nodes() -> c_int {
    guard("gamma_how_many_nodes", E_USAGE, || id(|i| i.2))
}

/// `gamma_msglen` as the signed `long` the headers declare.
const _: () = assert!(std::mem::size_of::<AtomicI64>() == std::mem::size_of::<c_long>());
