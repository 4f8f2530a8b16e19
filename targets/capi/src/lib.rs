//! Volley's C ABI: the entry points `libvolley` exports.
//!
//! Linked into `libvolley.so` and `libvolley.a` by the `libvolley` package (which
//! only re-exports this crate, so that release builds of the library get
//! whole-program LTO: cargo skips LTO for a package that is also an rlib), with
//! hand-written headers in `include/`: `gamma.h` (the GAMMA API of March 2004) and
//! `linux/gamma/libgamma.h` (the later GAMMA API, `unsigned short` ports, one handler
//! per active port). The build writes `volley.pc` next to the library for
//! `pkg-config`.
//!
//! A rank starts exactly as a Rust program does ([`volley_hosted::init`]): our
//! launcher, `mpiexec`, Open MPI, Slurm or a hosts list, and `VOLLEY_FABRIC`. Started
//! by none of them, `gamma_init` starts the job itself, as GAMMA did: `-GAMMANP N` on
//! the command line (or `num_nodes`) copies of the program on this machine.
//!
//! Every `extern "C"` entry catches panics: a Rust panic never crosses into C; it
//! becomes one line on stderr and an error return. Errors at start-up are one line
//! and a non-zero exit.
//!
//! GAMMA is single-threaded: the instance lives in the thread that called
//! `gamma_init`, and handlers run on it inside the calls that poll. While a handler
//! runs, the calls it makes go through its [`Upcall`] (post a buffer, signal, queue a
//! send); the calls that would wait for the poll running the handler return an error.

pub mod cheetah;
pub use cheetah::{
    cheetah_core_ainvoke, cheetah_core_barrier, cheetah_core_expose, cheetah_core_finalize,
    cheetah_core_get, cheetah_core_mycontext, cheetah_core_ncontexts, cheetah_core_poll,
    cheetah_core_put, cheetah_core_register, cheetah_core_setup, cheetah_core_wait,
};
pub mod lfc;
pub mod qnix;
pub use lfc::*;
pub use qnix::*;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_long, c_uchar, c_ulong, c_ushort, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI64, AtomicU16, AtomicU8, Ordering::Relaxed};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use volley_core::engine::{Error, SendHandle, BROADCAST as ANY_NODE};
use volley_core::gamma::{BufferKind, Upcall, BARRIER_PORT, BROADCAST_PORT, PORTS};
use volley_hosted::bootstrap::{self, Boot, Source};
use volley_hosted::secret::Secret;
use volley_hosted::{launcher, node, Fabric, HostGamma};

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
    e.code()
}

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

/// `-GAMMANP N` (or `-GAMMANP=N`) from the command line.
/// How many processes a job asks for: the seed's `num_nodes` (or `-GAMMANP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Processes {
    N(u32),
    /// "Less than or equal to zero": every workstation of the cluster.
    All,
}

/// The processes "all" means for a job this program starts itself: the seed's
/// cluster is the machines of `/etc/gamma.conf`; here it is this machine, one
/// process per processor the program may run on.
fn all_processes() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() as u32)
        .min(u16::MAX as u32)
}

fn gammanp(args: &[String]) -> Option<Result<Processes, String>> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = if a == "-GAMMANP" {
            it.next().map(String::as_str).unwrap_or("")
        } else if let Some(v) = a.strip_prefix("-GAMMANP=") {
            v
        } else {
            continue;
        };
        // As for `num_nodes`, zero or less means every workstation of the cluster.
        return Some(match v.parse::<i64>() {
            Ok(n) if n <= 0 => Ok(Processes::All),
            Ok(n) if n <= u16::MAX as i64 => Ok(Processes::N(n as u32)),
            _ => Err(format!(
                "gamma_init: -GAMMANP {v:?}: expected a number of processes, up to 65535 \
                 (0: one per processor of this machine)"
            )),
        });
    }
    None
}

/// Whether a launcher or a hosts list gives this process its rank.
fn launched() -> bool {
    [
        "VOLLEY_RANK",
        "PMI_RANK",
        "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID",
        "VOLLEY_HOSTS",
    ]
    .iter()
    .any(|k| std::env::var_os(k).is_some())
}

/// Starts `n - 1` more copies of this program (ranks 1..n) for a job of `n`.
fn spawn_copies(n: u16, job: u64, fabric: Fabric, secret: &Secret, args: &[String]) -> Vec<Child> {
    use std::os::unix::process::CommandExt;
    let mut children = Vec::new();
    for rank in 1..n {
        let mut cmd = Command::new("/proc/self/exe");
        if let Some(a0) = args.first() {
            cmd.arg0(a0);
        }
        cmd.args(args.iter().skip(1))
            .env("VOLLEY_RANK", rank.to_string())
            .env("VOLLEY_SIZE", n.to_string())
            .env("VOLLEY_JOB", format!("{job:#x}"))
            .env("VOLLEY_FABRIC", fabric.name())
            // In the environment, which only this user can read; never in argv.
            .env(volley_hosted::secret::ENV, secret.to_hex());
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // A copy does not outlive the process that started it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => die(&format!("gamma_init: cannot start rank {rank}: {e}")),
        }
    }
    children
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

fn init(num_nodes: c_int, args: Vec<String>) -> c_int {
    if INSTANCE.with(|c| c.try_borrow().map_or(true, |i| i.is_some())) {
        eprintln!("volley: gamma_init: already called in this process");
        return code(Error::BadConfig);
    }
    let wanted = match gammanp(&args) {
        Some(Ok(n)) => n,
        Some(Err(msg)) => die(&msg),
        None if num_nodes > 0 => Processes::N(num_nodes as u32),
        None => Processes::All,
    };
    let fabric = Fabric::from_env().unwrap_or_else(|e| die(&format!("gamma_init: {e}")));
    let (boot, children) = if launched() {
        let boot = bootstrap::from_env(None).unwrap_or_else(|e| die(&e.to_string()));
        // The seed: more than there are is the same as all of them.
        if let Processes::N(w) = wanted {
            if w < boot.size as u32 {
                die(&format!(
                    "gamma_init: {w} processes requested (-GAMMANP or num_nodes) but {} started {}",
                    boot.source, boot.size
                ));
            }
        }
        (boot, Vec::new())
    } else {
        let n = match wanted {
            Processes::N(n) => n,
            Processes::All => all_processes(),
        };
        let n = u16::try_from(n).unwrap_or_else(|_| die("gamma_init: at most 65535 processes"));
        let job = launcher::new_job_id();
        let secret = Secret::generate().unwrap_or_else(|e| die(&format!("gamma_init: {e}")));
        let boot = Boot {
            rank: 0,
            size: n,
            job,
            source: Source::Launcher,
            hosts: Vec::new(),
            secret: Some(secret),
        };
        (boot, spawn_copies(n, job, fabric, &secret, &args))
    };
    let g = node::gamma(&boot, fabric, CState::new())
        .unwrap_or_else(|e| die(&format!("gamma_init (rank {}): {e}", boot.rank)));
    IDS.set((
        g.my_par_pid() as c_int,
        g.my_node() as c_int,
        g.how_many_nodes() as c_int,
    ));
    INSTANCE.with(|c| {
        *c.borrow_mut() = Some(Box::new(Instance {
            g,
            handles: Handles::default(),
            children,
        }))
    });
    0
}

/// `gamma_init`: joins (or, started by no launcher, starts) the parallel job.
///
/// # Safety
/// `argv` is null or holds `argc` valid C strings.
#[no_mangle]
pub unsafe extern "C" fn gamma_init(
    num_nodes: c_int,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    let args = unsafe { args_of(argc, argv) };
    guard("gamma_init", E_USAGE, || init(num_nodes, args))
}

fn wait_children(children: Vec<Child>) -> c_int {
    let mut rc = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, mut c) in children.into_iter().enumerate() {
        let status = loop {
            match c.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = c.kill();
                    break c.wait().ok();
                }
            }
        };
        if !status.is_some_and(|s| s.success()) {
            eprintln!("volley: gamma_exit: rank {} ended badly: {status:?}", i + 1);
            rc = code(Error::SendFailure);
        }
    }
    rc
}

/// `gamma_exit`: finishes what is in flight (at most 10 s), leaves the job; rank 0 of
/// a job `gamma_init` started waits for the copies it started.
#[no_mangle]
pub extern "C" fn gamma_exit() -> c_int {
    guard("gamma_exit", E_USAGE, || {
        if !CURRENT.get().is_null() || ATOMIC.get() {
            return code(Error::InHandler);
        }
        let inst = INSTANCE.with(|c| c.try_borrow_mut().ok().and_then(|mut i| i.take()));
        let Some(inst) = inst else { return E_USAGE };
        let Instance { g, children, .. } = *inst;
        drop(g.exit());
        IDS.set((-1, -1, -1));
        wait_children(children)
    })
}

/// `gamma_abort`: ends the whole job now (this process exits with status 1; the
/// launcher stops the others).
#[no_mangle]
pub extern "C" fn gamma_abort() {
    let rank = IDS.get().1;
    eprintln!("volley: gamma_abort called by instance {rank}");
    INSTANCE.with(|c| {
        if let Ok(mut i) = c.try_borrow_mut() {
            for ch in i
                .as_mut()
                .map(|i| i.children.iter_mut())
                .into_iter()
                .flatten()
            {
                let _ = ch.kill();
            }
        }
    });
    std::process::exit(1)
}

// ---------------------------------------------------------------------- ports

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

#[derive(Clone, Copy)]
enum SendKind {
    Blocking,
    NonBlocking,
}

/// Every send: `head` is the first piece of a two-piece send (or empty).
fn send(port: u16, head: &[u8], body: &'static [u8], reliable: bool, how: SendKind) -> c_int {
    if let Err(e) = user_port(port) {
        return code(e);
    }
    // From a handler: copied and queued, sent when the handler returns.
    let queued = with_upcall(|up| {
        let r = if reliable {
            up.send_flowctl(port, head, body)
        } else {
            up.send(port, head, body)
        };
        match (r, how) {
            (Ok(_), SendKind::NonBlocking) => QUEUED_HANDLE,
            (r, _) => result(r),
        }
    });
    if let Some(rc) = queued {
        return rc;
    }
    with_gamma(true, |i| match how {
        SendKind::Blocking => result(match (head.is_empty(), reliable) {
            (true, false) => i.g.send(port, body),
            (true, true) => i.g.send_flowctl(port, body),
            (false, false) => i.g.send_2p(port, head, body),
            (false, true) => i.g.send_2p_flowctl(port, head, body),
        }),
        SendKind::NonBlocking => {
            let r = match (head.is_empty(), reliable) {
                (true, false) => i.g.isend(port, body),
                (true, true) => i.g.isend_flowctl(port, body),
                (false, false) => i.g.isend_2p(port, head, body),
                (false, true) => i.g.isend_2p_flowctl(port, head, body),
            };
            match r {
                Ok(h) => i.handles.issue(h),
                Err(e) => code(e),
            }
        }
    })
}

macro_rules! send_fns {
    ($($(#[$doc:meta])* $name:ident, $wide:ident, $reliable:expr, $how:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `data` holds `len` readable bytes; for a non-blocking send they must stay
        /// valid and unchanged until the send completes (`gamma_wsend`/`gamma_tsend`).
        #[no_mangle]
        pub unsafe extern "C" fn $name(output_port: c_uchar, data: *mut c_void, len: c_ulong) -> c_int {
            guard(stringify!($name), E_USAGE, || {
                // SAFETY: the caller's contract.
                let Some(body) = (unsafe { data_static(data, len) }) else {
                    return E_USAGE;
                };
                send(output_port as u16, &[], body, $reliable, $how)
            })
        }

        $(#[$doc])*
        /// (the `libgamma.h` variant: wide ports)
        ///
        /// # Safety
        /// As the 2004 API's call.
        #[no_mangle]
        pub unsafe extern "C" fn $wide(output_port: c_ushort, data: *mut c_void, len: c_ulong) -> c_int {
            guard(stringify!($name), E_USAGE, || {
                // SAFETY: the caller's contract.
                let Some(body) = (unsafe { data_static(data, len) }) else {
                    return E_USAGE;
                };
                send(output_port, &[], body, $reliable, $how)
            })
        }
    )*};
}

macro_rules! send_2p_fns {
    ($($(#[$doc:meta])* $name:ident, $wide:ident, $reliable:expr, $how:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `data1`/`data2` hold `len1`/`len2` readable bytes; for a non-blocking send
        /// `data2` must stay valid and unchanged until the send completes.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            output_port: c_uchar,
            data1: *mut c_void,
            len1: c_ulong,
            data2: *mut c_void,
            len2: c_ulong,
        ) -> c_int {
            guard(stringify!($name), E_USAGE, || {
                // SAFETY: the caller's contract.
                let pieces = unsafe { (data(data1, len1), data_static(data2, len2)) };
                let (Some(head), Some(body)) = pieces else {
                    return E_USAGE;
                };
                send(output_port as u16, head, body, $reliable, $how)
            })
        }

        $(#[$doc])*
        /// (the `libgamma.h` variant: wide ports)
        ///
        /// # Safety
        /// As the 2004 API's call.
        #[no_mangle]
        pub unsafe extern "C" fn $wide(
            output_port: c_ushort,
            data1: *mut c_void,
            len1: c_ulong,
            data2: *mut c_void,
            len2: c_ulong,
        ) -> c_int {
            guard(stringify!($name), E_USAGE, || {
                // SAFETY: the caller's contract.
                let pieces = unsafe { (data(data1, len1), data_static(data2, len2)) };
                let (Some(head), Some(body)) = pieces else {
                    return E_USAGE;
                };
                send(output_port, head, body, $reliable, $how)
            })
        }
    )*};
}

/// # Safety
/// As [`data`], valid for as long as the engine may read it (see the send calls).
unsafe fn data_static(p: *const c_void, len: c_ulong) -> Option<&'static [u8]> {
    // SAFETY: the caller's contract.
    unsafe { data(p, len) }
}

send_fns! {
    /// `gamma_send`: best effort, blocking; returns the length.
    gamma_send, volley_libgamma_send, false, SendKind::Blocking;
    /// `gamma_send_flowctl`: reliable, blocking; returns the length.
    gamma_send_flowctl, volley_libgamma_send_flowctl, true, SendKind::Blocking;
    /// `gamma_isend`: best effort, non-blocking; returns a handle.
    gamma_isend, volley_libgamma_isend, false, SendKind::NonBlocking;
    /// `gamma_isend_flowctl`: reliable, non-blocking; returns a handle.
    gamma_isend_flowctl, volley_libgamma_isend_flowctl, true, SendKind::NonBlocking;
}

send_2p_fns! {
    /// `gamma_send_2p`: two pieces, the first at most 20 bytes.
    gamma_send_2p, volley_libgamma_send_2p, false, SendKind::Blocking;
    /// `gamma_send_2p_flowctl`.
    gamma_send_2p_flowctl, volley_libgamma_send_2p_flowctl, true, SendKind::Blocking;
    /// `gamma_isend_2p`.
    gamma_isend_2p, volley_libgamma_isend_2p, false, SendKind::NonBlocking;
    /// `gamma_isend_2p_flowctl`.
    gamma_isend_2p_flowctl, volley_libgamma_isend_2p_flowctl, true, SendKind::NonBlocking;
}

/// How many failed sends' errors [`Handles`] keeps.
const FAILED_KEPT: usize = 4096;

/// Non-blocking sends by C handle. A handle stays answerable once its send has
/// ended, as in GAMMA, where a program may test or wait on it again: complete, or
/// the error it ended with. Handles count up from 1 and wrap after `c_int::MAX`;
/// the errors of the last [`FAILED_KEPT`] failed sends are kept, and a handle older
/// than a forgotten failure answers `InvalidHandle` (too old to tell).
#[derive(Debug, Default)]
struct Handles {
    /// Sends not seen ending yet: C handle, sequence number, the engine's handle.
    pending: Vec<(c_int, u64, SendHandle)>,
    /// Handles issued so far (the next one's sequence number).
    issued: u64,
    /// Failed sends: sequence number and the code they ended with, oldest first.
    failed: VecDeque<(u64, c_int)>,
    /// Sends numbered below this may have failed with an error no longer kept.
    forgotten_below: u64,
}

impl Handles {
    fn issue(&mut self, h: SendHandle) -> c_int {
        let seq = self.issued;
        self.issued += 1;
        let c = (seq % c_int::MAX as u64) as c_int + 1;
        self.pending.push((c, seq, h));
        c
    }

    /// The newest sequence number issued as C handle `c`.
    fn seq_of(&self, c: c_ulong) -> Option<u64> {
        let m = c_int::MAX as u64;
        let first = c.checked_sub(1).filter(|&f| f < m)?;
        let last = self.issued.checked_sub(1).filter(|&l| l >= first)?;
        Some(first + (last - first) / m * m)
    }

    /// Records that pending send `pos` ended with `rc` (1: complete).
    fn ended(&mut self, pos: usize, rc: c_int) {
        let (_, seq, _) = self.pending.swap_remove(pos);
        if rc < 0 {
            if self.failed.len() == FAILED_KEPT {
                if let Some((old, _)) = self.failed.pop_front() {
                    self.forgotten_below = old + 1;
                }
            }
            self.failed.push_back((seq, rc));
        }
    }

    /// What a handle whose send is not pending answers: 1 (complete), the error
    /// its send ended with, or `InvalidHandle`.
    fn answer(&self, c: c_ulong) -> c_int {
        let Some(seq) = self.seq_of(c) else {
            return code(Error::InvalidHandle);
        };
        if let Some(&(_, rc)) = self.failed.iter().rev().find(|&&(s, _)| s == seq) {
            return rc;
        }
        if seq < self.forgotten_below {
            return code(Error::InvalidHandle);
        }
        1
    }
}

fn complete(handle: c_ulong, wait: bool) -> c_int {
    if handle == QUEUED_HANDLE as c_ulong {
        return 1;
    }
    with_gamma(true, |i| {
        let Some(pos) = i
            .handles
            .pending
            .iter()
            .position(|&(c, _, _)| c as c_ulong == handle)
        else {
            return i.handles.answer(handle);
        };
        let h = i.handles.pending[pos].2;
        let r = if wait {
            i.g.wsend(h).map(|()| true)
        } else {
            i.g.tsend(h)
        };
        let rc = match r {
            Ok(false) => return 0,
            Ok(true) => 1,
            Err(e) => code(e),
        };
        i.handles.ended(pos, rc);
        rc
    })
}

/// `gamma_wsend`: waits for a non-blocking send; 0, or negative if it failed.
#[no_mangle]
pub extern "C" fn gamma_wsend(handle: c_ulong) -> c_int {
    guard("gamma_wsend", E_USAGE, || match complete(handle, true) {
        1 => 0,
        rc => rc,
    })
}

/// `gamma_tsend`: 1 once the send has completed, 0 while it runs, negative if it failed.
#[no_mangle]
pub extern "C" fn gamma_tsend(handle: c_ulong) -> c_int {
    guard("gamma_tsend", E_USAGE, || complete(handle, false))
}

// ----------------------------------------------------------------- semaphores

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
            i.g.engine().semaphore(sem).map(|s| s.count)
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

fn os_result(rc: c_int) -> c_int {
    if rc == 0 {
        0
    } else {
        -std::io::Error::last_os_error().raw_os_error().unwrap_or(1)
    }
}

/// `gamma_mlock`: `mlock(2)`, which also faults the pages in; `-errno` on failure
/// (raise `ulimit -l` for large buffers).
///
/// # Safety
/// Any range may be passed; the kernel checks it.
#[no_mangle]
pub unsafe extern "C" fn gamma_mlock(buffer: *mut c_void, len: c_ulong) -> c_int {
    guard("gamma_mlock", E_USAGE, || {
        // SAFETY: mlock only changes page residency; the kernel validates the range.
        os_result(unsafe { libc::mlock(buffer, len as usize) })
    })
}

/// `gamma_munlock`: `munlock(2)`.
///
/// # Safety
/// Any range may be passed; the kernel checks it.
#[no_mangle]
pub unsafe extern "C" fn gamma_munlock(buffer: *mut c_void, len: c_ulong) -> c_int {
    guard("gamma_munlock", E_USAGE, || {
        // SAFETY: as for mlock.
        os_result(unsafe { libc::munlock(buffer, len as usize) })
    })
}

/// `gamma_munlockall`: `munlockall(2)`.
#[no_mangle]
pub extern "C" fn gamma_munlockall() -> c_int {
    guard("gamma_munlockall", E_USAGE, || {
        // SAFETY: no arguments; unlocks this process's pages.
        os_result(unsafe { libc::munlockall() })
    })
}

/// GAMMA's `time_586`: the 64-bit time stamp as two halves.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Time586 {
    /// High 32 bits.
    pub hi: c_ulong,
    /// Low 32 bits.
    pub lo: c_ulong,
}

/// Ticks of the time stamp counter, and ticks per microsecond.
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is available on every x86_64 CPU and has no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

fn ticks_per_us() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        if cfg!(not(target_arch = "x86_64")) {
            return 1000.0;
        }
        // GAMMA compiled the CPU's MHz in (CLOCK); we measure it against the OS clock.
        let (t0, c0) = (Instant::now(), ticks());
        std::thread::sleep(Duration::from_millis(20));
        let (dt, dc) = (t0.elapsed(), ticks().wrapping_sub(c0));
        dc as f64 / (dt.as_nanos() as f64 / 1000.0)
    })
}

/// `gamma_time`: the time stamp counter into `t`.
///
/// # Safety
/// `t` is null or points to a writable `time_586`.
#[no_mangle]
pub unsafe extern "C" fn gamma_time(t: *mut Time586) {
    guard("gamma_time", (), || {
        let v = ticks();
        if !t.is_null() {
            // SAFETY: the caller's contract.
            unsafe {
                t.write(Time586 {
                    hi: (v >> 32) as c_ulong,
                    lo: (v & 0xFFFF_FFFF) as c_ulong,
                })
            };
        }
    })
}

/// `gamma_time_diff`: `b - a` in microseconds.
///
/// # Safety
/// `b` and `a` point to readable `time_586` values.
#[no_mangle]
pub unsafe extern "C" fn gamma_time_diff(b: *const Time586, a: *const Time586) -> f64 {
    guard("gamma_time_diff", 0.0, || {
        if a.is_null() || b.is_null() {
            return 0.0;
        }
        // SAFETY: the caller's contract.
        let (b, a) = unsafe { (b.read(), a.read()) };
        let v = |t: Time586| (t.hi << 32) | (t.lo & 0xFFFF_FFFF);
        (v(b) as i64).wrapping_sub(v(a) as i64) as f64 / ticks_per_us()
    })
}

/// `gamma_msglen` as the signed `long` the headers declare.
const _: () = assert!(std::mem::size_of::<AtomicI64>() == std::mem::size_of::<c_long>());
