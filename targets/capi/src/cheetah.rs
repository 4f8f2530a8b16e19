//! The Cheetah core C ABI (`include/cheetah_core.h`): Karmesin's interface on Volley.
//!
//! # What a peer may reach
//!
//! The seed hands raw remote addresses around. A context serves a peer's put only
//! into, and a get only out of, memory of its own that [`ProcessMemory`] accepts:
//!
//! - by default, the process's **private writable mappings** (`rw-p` in
//!   `/proc/self/maps`: data, bss, heap, stacks, anonymous `mmap`), so an unchanged
//!   Cheetah program runs as it did; never a shared mapping (the fabric's region),
//!   a read-only or executable one, or an address nothing is mapped at;
//! - once the program calls the extension `cheetah_core_expose(ptr, len)`, **only
//!   the ranges it exposed** (a stricter mode for programs that want it).
//!
//! Bells a peer rings follow the same rule. Reads of the program's own source
//! buffers (a put's `local`) may also come from read-only private mappings (a
//! string constant). The mapping list is read once and again whenever an address
//! is not found in it (the program mapped more since); an address that fails is
//! refused at the target, which stays untouched, and the initiator's next call
//! (`poll`, `wait`, `barrier`, a put) prints one line and exits 1, as MPI's default
//! error handler does. Every process of a job runs under the job's key, so only the
//! job's own contexts can ask at all.
//!
//! Between processes of one host puts and gets are direct copies
//! ([`volley_hosted::direct`]): the initiator applies the target's rule, which the
//! target publishes, before it copies, and a refusal is one line at once.
//!
//! # Static variables name the same variable everywhere
//!
//! Where the seed's programs ran, every context was one executable loaded at one
//! address, so `&a` of a static `a` (an array, a bell) was "a pointer valid in the
//! remote context" (seed, Put), and programs put into a peer's `a` that way. Linux
//! loads each process at its own random address now. At setup every context tells
//! the others where its executable's writable static data lies
//! ([`volley_hosted::image`], an invocation under the library's own tag
//! [`IMAGE_TAG`]); a put's or get's remote address or remote bell inside our static
//! data then goes to the same byte of the target's, if the target runs the same
//! executable. Any other address (heap, stack, one a peer sent) goes as given.
//!
//! One process lock serialises the calls; it is not held while a C handler runs, so
//! a handler may call any Cheetah function (the seed allows it).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use volley_core::cheetah::{Invocation, AINVOKE_MAX};
use volley_core::engine::Error;
use volley_core::idle::Idle;
use volley_hosted::cheetah::{self as hosted, HostCheetah, Start};
use volley_hosted::clock::HostClock;
use volley_hosted::direct;
use volley_hosted::image::{self, Image};
use volley_hosted::procmem::ProcessMemory;
use volley_hosted::wakeup::EventLoop;
use volley_hosted::Fabric;

use crate::{args_of, die, guard};

/// The program's `void handler(int who, int tag, void *buffer, int length)`.
pub type CHandler = extern "C" fn(c_int, c_int, *mut c_void, c_int);

static STATE: Mutex<Option<HostCheetah<ProcessMemory>>> = Mutex::new(None);
static HANDLERS: Mutex<Vec<(c_int, CHandler)>> = Mutex::new(Vec::new());

/// The process's Cheetah context as an event loop sees it (`volley.h`); `None`
/// before `cheetah_core_setup` or after `cheetah_core_finalize`.
pub(crate) fn event<R>(f: impl FnOnce(&mut dyn EventLoop) -> R) -> Option<R> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    g.as_mut().map(|c| f(c))
}

/// The invocation tag under which contexts tell each other their static data at
/// setup (see the module); a program may not register or invoke it.
pub const IMAGE_TAG: c_int = c_int::MIN;
/// This process's static data (`None`: the loader does not tell).
static MINE: OnceLock<Option<Image>> = OnceLock::new();
/// Each context's static data once it has told (`Some(None)`: it has none, or it
/// never told within [`IMAGE_WAIT`]).
static IMAGES: Mutex<Vec<Option<Option<Image>>>> = Mutex::new(Vec::new());
/// The library's own invocations sent and taken (left out of the counters).
static LIBRARY_SENT: AtomicU64 = AtomicU64::new(0);
static LIBRARY_TAKEN: AtomicU64 = AtomicU64::new(0);
/// How many times the library's waiting loops gave the processor away.
static YIELDS: AtomicU64 = AtomicU64::new(0);
/// How long a put or get waits for its target's static data before it takes the
/// addresses as given (a context that is not a C program never tells).
const IMAGE_WAIT: Duration = Duration::from_secs(10);

fn fatal(call: &str, e: impl std::fmt::Display) -> ! {
    die(&format!("{call}: {e}"))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the context; a call before setup or after finalize is fatal.
fn with<R>(call: &str, f: impl FnOnce(&mut HostCheetah<ProcessMemory>) -> R) -> R {
    let mut g = lock(&STATE);
    match g.as_mut() {
        Some(c) => f(c),
        None => fatal(
            call,
            "called before cheetah_core_setup or after cheetah_core_finalize",
        ),
    }
}

/// When the library's waiting loops (`cheetah_core_wait`, the barrier, the wait for
/// a peer's static data) give the processor away: as the core's own waits do
/// ([`Idle`]), after a run of empty rounds, never at each one. A `sched_yield` per
/// empty round made a put's remote bell, rung a few hundred nanoseconds later, wait
/// for the system call (and, where the ranks share cores, for the scheduler).
struct Waiting {
    idle: Idle,
    clock: HostClock,
}

impl Waiting {
    fn new(call: &str) -> Waiting {
        let mut idle = Idle::new();
        idle.set_hook(Some(give_away));
        Waiting {
            idle,
            clock: with(call, |c| *c.clock()),
        }
    }

    /// After each round: `busy` if it did anything.
    fn step(&mut self, busy: bool) {
        self.idle.step(busy, &self.clock);
    }
}

/// The waiting loops' idle hook: `sched_yield`, counted.
fn give_away() {
    YIELDS.fetch_add(1, Ordering::Relaxed);
    std::thread::yield_now();
}

/// `void cheetah_core_setup(int *argc, char ***argv)`: takes `-np N` out of the
/// arguments; started by hand with `-np N` (N > 1), runs the job and exits.
///
/// # Safety
/// `argc` and `argv` are null or `main`'s (through pointers).
#[no_mangle]
pub unsafe extern "C" fn cheetah_core_setup(argc: *mut c_int, argv: *mut c_void) {
    guard("cheetah_core_setup", (), || {
        let argv = argv as *mut *mut *mut c_char;
        let mut args = if argc.is_null() || argv.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller's contract.
            unsafe { args_of(*argc, *argv) }
        };
        let np = hosted::parse_args(&mut args).unwrap_or_else(|e| die(&e.to_string()));
        if !argc.is_null() && !argv.is_null() {
            // SAFETY: the caller's contract; `args` is a subsequence of the originals.
            unsafe { crate::lfc::write_back(argc, *argv, &args) };
        }
        let fabric = Fabric::from_env().unwrap_or_else(|e| die(&e.to_string()));
        let boot = match hosted::start(np).unwrap_or_else(|e| die(&e.to_string())) {
            Start::Launch(n) => std::process::exit(hosted::launch(n, &args, fabric)),
            Start::Context(b) => b,
        };
        let c = direct::cheetah(&boot, fabric).unwrap_or_else(|e| die(&e.to_string()));
        let (me, n) = (c.mycontext(), c.ncontexts());
        *lock(&STATE) = Some(c);
        // Our static data to every other context (see the module).
        let mine = *MINE.get_or_init(image::own);
        *lock(&IMAGES) = vec![None; n.into()];
        lock(&IMAGES)[usize::from(me)] = Some(mine);
        let told = mine.map_or([0; image::IMAGE_BYTES], |m| m.to_bytes());
        with("cheetah_core_setup", |c| {
            for to in (0..n).filter(|&t| t != me) {
                if let Err(e) = c.ainvoke(to, IMAGE_TAG, &told, 0) {
                    report("cheetah_core_setup", c, e);
                }
                LIBRARY_SENT.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Contexts start together, as the seed's setup does. No handler is
        // registered yet: an invocation that comes meanwhile waits for the first
        // poll after setup instead of finding none.
        barrier("cheetah_core_setup", false);
    })
}

/// `void cheetah_core_finalize(void)`: a barrier, then teardown.
#[no_mangle]
pub extern "C" fn cheetah_core_finalize() {
    guard("cheetah_core_finalize", (), || {
        barrier("cheetah_core_finalize", true);
        with("cheetah_core_finalize", |c| {
            c.shutdown();
            if std::env::var_os("VOLLEY_CHEETAH_STATS").is_some_and(|v| v == "1") {
                let library = (
                    LIBRARY_SENT.load(Ordering::Relaxed),
                    LIBRARY_TAKEN.load(Ordering::Relaxed),
                );
                eprintln!(
                    "volley: cheetah: {}; waits gave the processor away {} times",
                    hosted::describe_stats(c, library),
                    YIELDS.load(Ordering::Relaxed)
                );
            }
        });
        *lock(&STATE) = None;
    })
}

/// `int cheetah_core_ncontexts(void)`.
#[no_mangle]
pub extern "C" fn cheetah_core_ncontexts() -> c_int {
    guard("cheetah_core_ncontexts", -1, || {
        with("cheetah_core_ncontexts", |c| c.ncontexts() as c_int)
    })
}

/// `int cheetah_core_mycontext(void)`.
#[no_mangle]
pub extern "C" fn cheetah_core_mycontext() -> c_int {
    guard("cheetah_core_mycontext", -1, || {
        with("cheetah_core_mycontext", |c| c.mycontext() as c_int)
    })
}

fn context(call: &str, c: &HostCheetah<ProcessMemory>, context: c_int) -> u16 {
    match u16::try_from(context) {
        Ok(n) if n < c.ncontexts() => n,
        _ => fatal(
            call,
            format!("context {context} is not in 0..{}", c.ncontexts()),
        ),
    }
}

fn length(call: &str, length: c_int) -> usize {
    usize::try_from(length).unwrap_or_else(|_| fatal(call, format!("negative length {length}")))
}

fn report(call: &str, c: &HostCheetah<ProcessMemory>, e: Error) -> ! {
    let failure = c.failure().or(direct::refused_by(c).map(|n| (n, e)));
    match (e, failure) {
        (Error::BadAddress, Some((n, _))) => fatal(
            call,
            format!("context {n} refused an address of a put or get: not memory it exposes"),
        ),
        (Error::BadAddress, None) => {
            fatal(call, "a local buffer or bell is not memory of this process")
        }
        (Error::SendFailure, Some((n, _))) => fatal(call, format!("context {n} died")),
        (e, _) => fatal(call, e),
    }
}

/// `void cheetah_core_put(int context, void *remote, void *local, int length,
/// int *local_bell, int *remote_bell)`.
#[no_mangle]
pub extern "C" fn cheetah_core_put(
    ctx: c_int,
    remote: *mut c_void,
    local: *mut c_void,
    len: c_int,
    local_bell: *mut c_int,
    remote_bell: *mut c_int,
) {
    transfer(
        "cheetah_core_put",
        true,
        ctx,
        remote,
        local,
        len,
        local_bell,
        remote_bell,
    );
}

/// `void cheetah_core_get(int context, void *remote, void *local, int length,
/// int *local_bell, int *remote_bell)`.
#[no_mangle]
pub extern "C" fn cheetah_core_get(
    ctx: c_int,
    remote: *mut c_void,
    local: *mut c_void,
    len: c_int,
    local_bell: *mut c_int,
    remote_bell: *mut c_int,
) {
    transfer(
        "cheetah_core_get",
        false,
        ctx,
        remote,
        local,
        len,
        local_bell,
        remote_bell,
    );
}

/// A put (`put`) or get with the seed's arguments; then the handlers that came.
#[allow(clippy::too_many_arguments)]
fn transfer(
    call: &str,
    put: bool,
    ctx: c_int,
    remote: *mut c_void,
    local: *mut c_void,
    len: c_int,
    local_bell: *mut c_int,
    remote_bell: *mut c_int,
) {
    // A panic caught: the handlers run anyway.
    let invocations = guard(call, true, || {
        let len = length(call, len);
        let (local, lb) = (local as u64, local_bell as u64);
        let (remote, rb) = (remote as u64, remote_bell as u64);
        let mine = MINE
            .get()
            .copied()
            .flatten()
            .filter(|m| m.holds(remote) || m.holds(rb));
        loop {
            // One lock for the translation and the transfer, once the target has
            // told where its static data lies (its first put or get waits for it).
            let done = with(call, |c| {
                let n = context(call, c, ctx);
                let (mut remote, mut rb) = (remote, rb);
                if let Some(mine) = &mine {
                    match lock(&IMAGES).get(usize::from(n)).copied() {
                        Some(None) => return Err(n),
                        Some(Some(Some(theirs))) => {
                            remote = symmetric(call, n, remote, mine, &theirs);
                            rb = symmetric(call, n, rb, mine, &theirs);
                        }
                        // None of its own, or a context the list does not hold:
                        // the addresses go as given.
                        _ => {}
                    }
                }
                if let Err(e) = direct::transfer(c, put, n, remote, local, len, lb, rb) {
                    report(call, c, e);
                }
                Ok(c.invocations_waiting())
            });
            match done {
                Ok(invocations) => return invocations,
                Err(n) => await_image(call, n),
            }
        }
    });
    if invocations {
        run_handlers();
    }
}

/// Waits (polling, handlers included) until context `n` has told where its static
/// data lies, or for [`IMAGE_WAIT`]; then notes that it has none, so that its
/// addresses go as given.
fn await_image(call: &str, n: u16) {
    let start = Instant::now();
    let mut waiting = Waiting::new(call);
    loop {
        if lock(&IMAGES)
            .get(usize::from(n))
            .is_none_or(|told| told.is_some())
        {
            return;
        }
        if start.elapsed() > IMAGE_WAIT {
            eprintln!(
                "volley: {call}: context {n} never told where its static data lies; \
                 its addresses are taken as given"
            );
            if let Some(slot) = lock(&IMAGES).get_mut(usize::from(n)) {
                *slot = Some(None);
            }
            return;
        }
        waiting.step(progress_checking(call, true, true));
    }
}

/// Where address `a` (a remote address or bell of a put or get to context `n`)
/// lies in `n`: see the module.
fn symmetric(call: &str, n: u16, a: u64, mine: &Image, theirs: &Image) -> u64 {
    image::translate(a, mine, theirs).unwrap_or_else(|_| {
        fatal(
            call,
            format!(
                "address {a:#x} lies in this program's static data and in context {n}'s, \
                 which the loader put at different addresses: it names no one variable \
                 (run the job with address randomization off, e.g. under setarch -R)"
            ),
        )
    })
}

/// `void cheetah_core_register(int tag, void (*handler)(int, int, void *, int))`.
#[no_mangle]
pub extern "C" fn cheetah_core_register(tag: c_int, handler: Option<CHandler>) {
    guard("cheetah_core_register", (), || {
        if tag == IMAGE_TAG {
            fatal(
                "cheetah_core_register",
                format!("tag {tag} is the library's own"),
            );
        }
        let mut h = lock(&HANDLERS);
        h.retain(|(t, _)| *t != tag);
        if let Some(f) = handler {
            h.push((tag, f));
        }
    })
}

/// `void cheetah_core_ainvoke(int context, int tag, void *buffer, int length,
/// int *local_bell)`.
///
/// # Safety
/// `buffer` holds `length` readable bytes (or `length` is 0).
#[no_mangle]
pub unsafe extern "C" fn cheetah_core_ainvoke(
    ctx: c_int,
    tag: c_int,
    buffer: *mut c_void,
    len: c_int,
    local_bell: *mut c_int,
) {
    const CALL: &str = "cheetah_core_ainvoke";
    let invocations = guard(CALL, true, || {
        if tag == IMAGE_TAG {
            fatal(CALL, format!("tag {tag} is the library's own"));
        }
        let len = length(CALL, len);
        if len > AINVOKE_MAX {
            fatal(
                CALL,
                format!("{len} bytes: an invocation carries at most {AINVOKE_MAX}"),
            );
        }
        let data = if len == 0 {
            &[][..]
        } else if buffer.is_null() {
            fatal(CALL, format!("a NULL buffer of {len} bytes"));
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(buffer as *const u8, len) }
        };
        with(CALL, |c| {
            let n = context(CALL, c, ctx);
            if let Err(e) = c.ainvoke(n, tag, data, local_bell as u64) {
                report(CALL, c, e);
            }
            c.invocations_waiting()
        })
    });
    if invocations {
        run_handlers();
    }
}

/// Runs the C handlers of the invocations that have arrived, without the lock.
fn run_handlers() -> usize {
    let mut ran = 0;
    loop {
        let next = with("cheetah_core_poll", |c| loop {
            let inv: Invocation = c.next_invocation()?;
            if inv.tag == IMAGE_TAG {
                // A context's static data (see the module), for no handler.
                let told = Image::from_bytes(c.invocation_data(&inv));
                if let Some(slot) = lock(&IMAGES).get_mut(usize::from(inv.who)) {
                    *slot = Some(told);
                }
                c.invocation_done(inv);
                LIBRARY_TAKEN.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let ptr = c.invocation_data(&inv).as_ptr() as *mut c_void;
            return Some((inv, ptr));
        });
        let Some((inv, ptr)) = next else {
            return ran;
        };
        let h = lock(&HANDLERS)
            .iter()
            .find(|(t, _)| *t == inv.tag)
            .map(|h| h.1);
        match h {
            Some(f) => {
                // The buffer stays put until `invocation_done`; the lock is free, so
                // the handler may call anything.
                f(inv.who as c_int, inv.tag, ptr, inv.len as c_int);
                ran += 1;
            }
            None => {
                eprintln!(
                    "volley: cheetah: context {} invoked tag {} with no handler registered here; dropped",
                    inv.who, inv.tag
                );
                with("cheetah_core_poll", |c| c.note_unhandled());
            }
        }
        with("cheetah_core_poll", |c| c.invocation_done(inv));
    }
}

/// One round: the network, failures and, with `handlers`, the handlers of the
/// invocations that came (without, they wait for a later round). Whether anything
/// happened.
fn progress(call: &str, handlers: bool) -> bool {
    progress_checking(call, handlers, false)
}

/// [`progress`], which with `dead_fatal` first ends the program if a context died
/// (a wait for a bell it may never ring): one lock a round, the handler loop's
/// only when an invocation may be there.
fn progress_checking(call: &str, handlers: bool, dead_fatal: bool) -> bool {
    let (busy, waiting) = with(call, |c| {
        if dead_fatal {
            if let Some(n) = c.dead_context() {
                fatal(call, format!("context {n} died"));
            }
        }
        let busy = c.poll_network();
        if let Err(e) = c.check_failure() {
            report(call, c, e);
        }
        (busy, c.invocations_waiting())
    });
    (handlers && waiting && run_handlers() > 0) || busy
}

/// `void cheetah_core_poll(void)`.
#[no_mangle]
pub extern "C" fn cheetah_core_poll() {
    guard("cheetah_core_poll", (), || {
        progress("cheetah_core_poll", true);
    })
}

/// `void cheetah_core_wait(int *bell, int value)`: polls until `*bell >= value`.
///
/// # Safety
/// `bell` points to an `int` of this process.
#[no_mangle]
pub unsafe extern "C" fn cheetah_core_wait(bell: *mut c_int, value: c_int) {
    const CALL: &str = "cheetah_core_wait";
    guard(CALL, (), || {
        if bell.is_null() {
            fatal(CALL, "null bell");
        }
        // Made at the first empty round: a bell already there costs no lock for it.
        let mut waiting: Option<Waiting> = None;
        loop {
            // SAFETY: the caller's contract; the engine rings it atomically.
            let v = unsafe { std::ptr::read_volatile(bell) };
            if v >= value {
                return;
            }
            let busy = progress_checking(CALL, true, true);
            waiting.get_or_insert_with(|| Waiting::new(CALL)).step(busy);
        }
    })
}

/// A barrier; with `handlers`, invocations are served meanwhile.
fn barrier(call: &str, handlers: bool) {
    with(call, |c| {
        if let Err(e) = c.engine_mut().start_barrier() {
            fatal(call, e);
        }
    });
    let mut waiting = Waiting::new(call);
    loop {
        let done = with(call, |c| c.engine().barrier_done());
        match done {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => fatal(call, format!("barrier failed: {e}")),
        }
        waiting.step(progress(call, handlers));
    }
}

/// `void cheetah_core_barrier(void)`.
#[no_mangle]
pub extern "C" fn cheetah_core_barrier() {
    guard("cheetah_core_barrier", (), || {
        barrier("cheetah_core_barrier", true)
    })
}

/// Extension: `int cheetah_core_expose(void *base, long length)`. From the first
/// call on, peers reach only the ranges exposed (see the module documentation).
/// Returns 0, or -1 for a range that is not writable memory of this process.
#[no_mangle]
pub extern "C" fn cheetah_core_expose(base: *mut c_void, len: std::ffi::c_long) -> c_int {
    guard("cheetah_core_expose", -1, || {
        with("cheetah_core_expose", |c| {
            if direct::expose(c, base as u64, len.max(0) as u64) {
                0
            } else {
                -1
            }
        })
    })
}
