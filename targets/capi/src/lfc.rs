//! The LFC C ABI (`include/lfc.h`): LFC User Guide 2.0 on Volley.
//!
//! `lfc_init` is a macro of the header that passes the program's `lfc_upcall` to
//! [`volley_lfc_init`], so the library holds no undefined symbol and a GAMMA program
//! links without one.
//!
//! One process lock serialises the calls: the program's thread, the upcalls and
//! the interrupt thread ([`volley_hosted::lfc::Interrupts`]) take turns. An upcall
//! runs with the lock held, on the thread that polled (or the interrupt thread); the
//! LFC calls it makes go straight to the instance through a thread-local pointer.
//! Calls that return nothing report misuse (a pointer that is no packet, a launch
//! after `lfc_exit`) and a dead peer as one line on stderr and exit 1, as MPI's
//! default error handler does; `-lfc-*` errors at start-up likewise.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use linked_list_allocator::LockedHeap;
use volley_core::engine::Error;
use volley_core::lfc::{Keep, LfcStats, Received};
use volley_hosted::lfc::{self as hosted, HostLfc, Interrupts, Settings};
use volley_hosted::wakeup::EventLoop;
use volley_hosted::Fabric;

use crate::{args_of, die, guard};

/// The program's `int lfc_upcall(unsigned src, void *packet, unsigned size, lfc_upcall_flags_t flags)`.
pub type CUpcall = extern "C" fn(c_uint, *mut c_void, c_uint, c_int) -> c_int;

type Shared = Arc<Mutex<Option<HostLfc<()>>>>;

static STATE: OnceLock<Shared> = OnceLock::new();
static UPCALL: OnceLock<CUpcall> = OnceLock::new();
static SETTINGS: OnceLock<(Settings, Fabric)> = OnceLock::new();
static INTERRUPTS: Mutex<Option<Interrupts>> = Mutex::new(None);
static TIMER: Mutex<Option<(Instant, Duration)>> = Mutex::new(None);

thread_local! {
    /// The instance while an upcall runs on this thread; null otherwise.
    static CURRENT: Cell<*mut HostLfc<()>> = const { Cell::new(std::ptr::null_mut()) };
}

fn fatal(call: &str, e: impl std::fmt::Display) -> ! {
    die(&format!("{call}: {e}"))
}

fn lock(s: &Shared) -> MutexGuard<'_, Option<HostLfc<()>>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process's LFC instance as an event loop sees it (`volley.h`): the one an
/// upcall on this thread was given, or the process's; `None` before `lfc_init` or
/// after `lfc_exit`.
pub(crate) fn event<R>(f: impl FnOnce(&mut dyn EventLoop) -> R) -> Option<R> {
    let p = CURRENT.get();
    if !p.is_null() {
        // SAFETY: as in `with_lfc`.
        return Some(f(unsafe { &mut *p }));
    }
    let mut g = lock(STATE.get()?);
    g.as_mut().map(|l| f(l))
}

/// Runs `f` on the instance: the one an upcall on this thread was given, or the
/// process's under its lock.
fn with_lfc<R>(call: &str, f: impl FnOnce(&mut HostLfc<()>) -> R) -> R {
    let p = CURRENT.get();
    if !p.is_null() {
        // SAFETY: `upcall_shim` stores this pointer, made from the `&mut` it was
        // given, for exactly the time the C upcall runs on this thread; the engine
        // code holding that `&mut` is suspended in the call, so this is the only use.
        return f(unsafe { &mut *p });
    }
    let Some(s) = STATE.get() else {
        fatal(call, "called before lfc_init")
    };
    let mut g = lock(s);
    match g.as_mut() {
        Some(l) => f(l),
        None => fatal(call, "called after lfc_exit"),
    }
}

/// The personality's upcall: calls the program's with the packet's address.
fn upcall_shim(l: &mut HostLfc<()>, r: Received) -> Keep {
    let Some(up) = UPCALL.get() else {
        return Keep::No;
    };
    let ptr = l
        .packet_mut(r.packet)
        .map_or(std::ptr::null_mut(), |b| b.as_mut_ptr()) as *mut c_void;
    let prev = CURRENT.replace(l as *mut HostLfc<()>);
    let kept = up(r.src as c_uint, ptr, r.size as c_uint, r.flags as c_int);
    CURRENT.set(prev);
    if kept != 0 {
        Keep::Yes
    } else {
        Keep::No
    }
}

fn take_interrupt(l: &mut Option<HostLfc<()>>) -> bool {
    match l {
        Some(l) => {
            l.interrupt();
            // The program may be spinning on a counter: a dead process must not
            // leave it spinning forever.
            if let Some(p) = l.take_failure() {
                fatal("lfc interrupt", format!("process {p} died"));
            }
            l.intr_status()
        }
        None => false,
    }
}

/// Writes the kept arguments back into the caller's `argv` and `argc`.
///
/// # Safety
/// `argv` holds `*argc` valid entries plus a terminating slot.
pub(crate) unsafe fn write_back(argc: *mut c_int, argv: *mut *mut c_char, kept: &[String]) {
    // SAFETY: the caller's contract: `argc` is valid.
    let n = unsafe { *argc } as usize;
    // SAFETY: the caller's contract.
    let orig: Vec<*mut c_char> = (0..n).map(|i| unsafe { *argv.add(i) }).collect();
    let mut out = Vec::with_capacity(kept.len());
    let mut i = 0;
    for k in kept {
        // Kept arguments are a subsequence of the originals: match them in order.
        while i < n {
            let p = orig[i];
            i += 1;
            // SAFETY: each entry is null or a NUL-terminated string.
            let s = (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) });
            if s.is_some_and(|s| s.to_string_lossy() == *k) {
                out.push(p);
                break;
            }
        }
    }
    for (j, p) in out.iter().enumerate() {
        // SAFETY: `j < out.len() <= n`, inside the array.
        unsafe { *argv.add(j) = *p };
    }
    if out.len() < n {
        // SAFETY: as above; C's argv[argc] is NULL.
        unsafe { *argv.add(out.len()) = std::ptr::null_mut() };
    }
    // SAFETY: the caller's contract.
    unsafe { *argc = out.len() as c_int };
}

/// `lfc_init(&argc, argv)` through the header's macro: parses and removes the
/// `-lfc-*` options, joins the job, remembers the program's `lfc_upcall`.
///
/// # Safety
/// `argc` points to the argument count and `argv` holds that many C strings (both
/// may be null: no arguments).
#[no_mangle]
pub unsafe extern "C" fn volley_lfc_init(
    argc: *mut c_int,
    argv: *mut *mut c_char,
    upcall: Option<CUpcall>,
) {
    // SAFETY: the caller's contract: a non-null `argc` points to the count.
    let n = if argc.is_null() { 0 } else { unsafe { *argc } };
    // SAFETY: the caller's contract.
    let mut args = unsafe { args_of(n, argv) };
    guard("lfc_init", (), || {
        let Some(upcall) = upcall else {
            fatal("lfc_init", "no lfc_upcall")
        };
        if STATE.get().is_some() {
            fatal("lfc_init", "already called in this process");
        }
        let env = |k: &str| std::env::var(k).ok();
        let settings = hosted::parse_args(&mut args, &env).unwrap_or_else(|e| die(&e.to_string()));
        if !argc.is_null() && !argv.is_null() {
            // SAFETY: the caller's contract.
            unsafe { write_back(argc, argv, &args) };
        }
        let fabric = Fabric::from_env().unwrap_or_else(|e| fatal("lfc_init", e));
        let boot = hosted::boot(&settings).unwrap_or_else(|e| die(&e.to_string()));
        let l = hosted::lfc(&boot, fabric, settings.options, upcall_shim, ())
            .unwrap_or_else(|e| fatal(&format!("lfc_init (rank {})", boot.rank), e));
        if settings.options.verbose {
            println!("{}", hosted::describe(&l, &settings, fabric));
        }
        let _ = UPCALL.set(upcall);
        let _ = SETTINGS.set((settings, fabric));
        let _ = STATE.set(Arc::new(Mutex::new(Some(l))));
    })
}

/// `lfc_group_create`: a static multicast group; before `lfc_start`.
///
/// # Safety
/// `members` holds `nr_members` ranks.
#[no_mangle]
pub unsafe extern "C" fn lfc_group_create(members: *mut c_uint, nr_members: c_uint) -> c_int {
    if members.is_null() || nr_members == 0 {
        fatal("lfc_group_create", "no members");
    }
    // SAFETY: the caller's contract.
    let list = unsafe { std::slice::from_raw_parts(members, nr_members as usize) };
    guard("lfc_group_create", -1, || {
        let ranks: Vec<u16> = list
            .iter()
            .map(|&r| u16::try_from(r).unwrap_or(u16::MAX))
            .collect();
        with_lfc("lfc_group_create", |l| match l.group_create(&ranks) {
            Ok(g) => g as c_int,
            Err(Error::BadConfig) => fatal(
                "lfc_group_create",
                "groups must be created before lfc_start, with members",
            ),
            Err(e) => fatal("lfc_group_create", format!("{e} (members {list:?})")),
        })
    })
}

/// `lfc_start`: synchronises all processes; interrupts are disabled on return.
#[no_mangle]
pub extern "C" fn lfc_start() {
    guard("lfc_start", (), || {
        with_lfc("lfc_start", |l| {
            l.start().unwrap_or_else(|e| fatal("lfc_start", e));
        });
        let (s, _) = SETTINGS.get().expect("set by lfc_init");
        if !s.options.no_intr {
            let shared = STATE.get().expect("set by lfc_init").clone();
            let period = s.options.interval.min(s.options.intr_first);
            let i = Interrupts::start(shared, period, take_interrupt);
            *INTERRUPTS.lock().unwrap_or_else(|p| p.into_inner()) = Some(i);
        }
    })
}

/// `lfc_exit`: prints statistics if `-lfc-stats`, finishes what is in flight, and
/// cleans up; no LFC call may follow.
#[no_mangle]
pub extern "C" fn lfc_exit() {
    guard("lfc_exit", (), || {
        if !CURRENT.get().is_null() {
            fatal("lfc_exit", "not allowed inside lfc_upcall");
        }
        let Some(s) = STATE.get() else { return };
        // The interrupt thread stops first: it must not find the instance gone. It
        // is joined outside the lock, which an upcall of its own may be waiting for.
        let intr = INTERRUPTS.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(intr);
        let stats = SETTINGS.get().is_some_and(|(s, _)| s.options.stats);
        if stats {
            with_lfc("lfc_exit", |l| {
                let buf = l.stats_create().unwrap_or_else(|e| fatal("lfc_exit", e));
                l.stats_gather(buf).unwrap_or_else(|e| fatal("lfc_exit", e));
                if l.my_proc() == 0 {
                    print!("{}", dump(l, buf, Some("LFC statistics"), None));
                }
            });
        }
        if let Some(l) = lock(s).take() {
            let _ = l.exit();
        }
    })
}

/// `lfc_my_proc`.
#[no_mangle]
pub extern "C" fn lfc_my_proc() -> c_uint {
    guard("lfc_my_proc", 0, || {
        with_lfc("lfc_my_proc", |l| l.my_proc() as c_uint)
    })
}

/// `lfc_nr_procs`.
#[no_mangle]
pub extern "C" fn lfc_nr_procs() -> c_uint {
    guard("lfc_nr_procs", 0, || {
        with_lfc("lfc_nr_procs", |l| l.nr_procs() as c_uint)
    })
}

/// `lfc_packet_size`.
#[no_mangle]
pub extern "C" fn lfc_packet_size() -> c_uint {
    guard("lfc_packet_size", 0, || {
        with_lfc("lfc_packet_size", |l| l.packet_size() as c_uint)
    })
}

/// `lfc_print_config`: the configuration on stdout.
#[no_mangle]
pub extern "C" fn lfc_print_config() {
    guard("lfc_print_config", (), || {
        let Some((s, fabric)) = SETTINGS.get() else {
            fatal("lfc_print_config", "called before lfc_init")
        };
        let text = with_lfc("lfc_print_config", |l| hosted::describe(l, s, *fabric));
        println!("{text}");
    })
}

/// `lfc_send_alloc`: a send packet; waits (draining the network, with upcalls if
/// allowed) while all are in flight.
#[no_mangle]
pub extern "C" fn lfc_send_alloc(upcalls_allowed: c_int) -> *mut c_void {
    guard("lfc_send_alloc", std::ptr::null_mut(), || {
        with_lfc("lfc_send_alloc", |l| {
            let id = l
                .send_alloc(upcalls_allowed != 0)
                .unwrap_or_else(|e| fatal("lfc_send_alloc", e));
            l.packet_mut(id)
                .map_or(std::ptr::null_mut(), |b| b.as_mut_ptr() as *mut c_void)
        })
    })
}

fn packet_of(l: &HostLfc<()>, call: &str, p: *mut c_void) -> volley_core::engine::PacketId {
    l.packet_at(p as usize)
        .unwrap_or_else(|| fatal(call, format!("{p:?} is not an LFC packet")))
}

fn launched(call: &str, r: Result<(), Error>) {
    match r {
        Ok(()) => {}
        Err(Error::InvalidHandle) => {
            fatal(call, "packet not from lfc_send_alloc, or launched already")
        }
        Err(Error::LongerThan(_) | Error::MessageTooLong) => {
            fatal(call, "size larger than lfc_packet_size()")
        }
        Err(Error::SendFailure) => fatal(call, "a destination process died"),
        Err(Error::PeerLeft) => fatal(
            call,
            "a destination process has left (it called lfc_exit): nothing sent to it can arrive",
        ),
        Err(e) => fatal(call, e),
    }
}

/// `lfc_ucast_launch`: sends the first `size` bytes of `packet` to `dest`.
#[no_mangle]
pub extern "C" fn lfc_ucast_launch(
    dest: c_uint,
    packet: *mut c_void,
    size: c_uint,
    upcalls_allowed: c_int,
) {
    guard("lfc_ucast_launch", (), || {
        with_lfc("lfc_ucast_launch", |l| {
            let id = packet_of(l, "lfc_ucast_launch", packet);
            let dest = u16::try_from(dest).unwrap_or(u16::MAX);
            let r = l.ucast_launch(dest, id, size as usize, upcalls_allowed != 0);
            if r == Err(Error::PeerLeft) {
                fatal(
                    "lfc_ucast_launch",
                    format!("process {dest} has left (it called lfc_exit)"),
                );
            }
            launched("lfc_ucast_launch", r)
        })
    })
}

/// `lfc_mcast_launch`: to every member of group `gid` but the sender.
#[no_mangle]
pub extern "C" fn lfc_mcast_launch(
    gid: c_int,
    packet: *mut c_void,
    size: c_uint,
    upcalls_allowed: c_int,
) {
    guard("lfc_mcast_launch", (), || {
        with_lfc("lfc_mcast_launch", |l| {
            let id = packet_of(l, "lfc_mcast_launch", packet);
            let gid = u16::try_from(gid)
                .ok()
                .filter(|&g| g < volley_core::engine::MCAST_ALL)
                .unwrap_or_else(|| fatal("lfc_mcast_launch", format!("no group {gid}")));
            let r = l.mcast_launch(gid, id, size as usize, upcalls_allowed != 0);
            launched("lfc_mcast_launch", r)
        })
    })
}

/// `lfc_bcast_launch`: to every process but the sender.
#[no_mangle]
pub extern "C" fn lfc_bcast_launch(packet: *mut c_void, size: c_uint, upcalls_allowed: c_int) {
    guard("lfc_bcast_launch", (), || {
        with_lfc("lfc_bcast_launch", |l| {
            let id = packet_of(l, "lfc_bcast_launch", packet);
            let r = l.bcast_launch(id, size as usize, upcalls_allowed != 0);
            launched("lfc_bcast_launch", r)
        })
    })
}

/// `lfc_poll`: makes an upcall for each packet that has arrived.
#[no_mangle]
pub extern "C" fn lfc_poll() {
    guard("lfc_poll", (), || {
        with_lfc("lfc_poll", |l| {
            if l.poll().is_err() {
                let who = l
                    .failed_process()
                    .map_or("a process".into(), |p| format!("process {p}"));
                fatal("lfc_poll", format!("{who} died"))
            }
        })
    })
}

/// `lfc_packet_free`: gives back a packet an upcall kept.
#[no_mangle]
pub extern "C" fn lfc_packet_free(packet: *mut c_void) {
    guard("lfc_packet_free", (), || {
        with_lfc("lfc_packet_free", |l| {
            let id = packet_of(l, "lfc_packet_free", packet);
            if l.packet_free(id).is_err() {
                fatal(
                    "lfc_packet_free",
                    "packet not held by the program (freed twice?)",
                );
            }
        })
    })
}

/// `lfc_intr_disable`: nestable.
#[no_mangle]
pub extern "C" fn lfc_intr_disable() {
    guard("lfc_intr_disable", (), || {
        with_lfc("lfc_intr_disable", |l| l.intr_disable())
    })
}

/// `lfc_intr_enable`: the outermost call re-enables interrupts.
#[no_mangle]
pub extern "C" fn lfc_intr_enable() {
    guard("lfc_intr_enable", (), || {
        let on = with_lfc("lfc_intr_enable", |l| {
            l.intr_enable();
            l.intr_status()
        });
        if on {
            if let Some(i) = INTERRUPTS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                i.enabled();
            }
        }
    })
}

/// `lfc_intr_status`: nonzero iff interrupts are enabled.
#[no_mangle]
pub extern "C" fn lfc_intr_status() -> c_int {
    guard("lfc_intr_status", 0, || {
        with_lfc("lfc_intr_status", |l| l.intr_status() as c_int)
    })
}

// ------------------------------------------------------------------ heap

/// The upcall-safe heap: separate from malloc's, behind a spin lock that an upcall
/// never finds held by its own thread (upcalls run between LFC calls).
static HEAP: LockedHeap = LockedHeap::empty();
static HEAP_INIT: std::sync::Once = std::sync::Once::new();
/// Heap size: address space reserved once, pages touched on use.
const HEAP_BYTES: usize = 64 << 20;
/// Bytes before each block: its size (and 16-byte alignment of the payload).
const HEADER: usize = 16;

fn heap() -> &'static LockedHeap {
    HEAP_INIT.call_once(|| {
        // Zeroed pages from the kernel, touched only when used; never freed.
        let mem: &'static mut [u8] = Box::leak(vec![0u8; HEAP_BYTES].into_boxed_slice());
        // SAFETY: the region is valid for the program's lifetime and used by nothing else.
        unsafe { HEAP.lock().init(mem.as_mut_ptr(), HEAP_BYTES) };
    });
    &HEAP
}

fn layout(size: usize) -> Option<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(size.checked_add(HEADER)?, 16).ok()
}

/// `lfc_malloc`: from the LFC heap; safe in upcalls.
#[no_mangle]
pub extern "C" fn lfc_malloc(size: usize) -> *mut c_void {
    guard("lfc_malloc", std::ptr::null_mut(), || {
        let Some(lay) = layout(size) else {
            return std::ptr::null_mut();
        };
        match heap().lock().allocate_first_fit(lay) {
            Ok(p) => {
                let p = p.as_ptr();
                // SAFETY: the block is `size + HEADER` bytes, 16-aligned.
                unsafe {
                    (p as *mut usize).write(size);
                    p.add(HEADER) as *mut c_void
                }
            }
            Err(()) => std::ptr::null_mut(),
        }
    })
}

/// `lfc_calloc`.
#[no_mangle]
pub extern "C" fn lfc_calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        return std::ptr::null_mut();
    };
    let p = lfc_malloc(total);
    if !p.is_null() {
        // SAFETY: `p` is a fresh block of `total` bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, total) };
    }
    p
}

/// The size `lfc_malloc` recorded for `p`.
///
/// # Safety
/// `p` came from `lfc_malloc` and was not freed.
unsafe fn block_size(p: *mut c_void) -> usize {
    // SAFETY: the caller's contract: the header precedes the payload.
    unsafe { ((p as *mut u8).sub(HEADER) as *const usize).read() }
}

/// `lfc_free`.
///
/// # Safety
/// `p` is null or came from `lfc_malloc`/`lfc_calloc`/`lfc_realloc` and was not freed.
#[no_mangle]
pub unsafe extern "C" fn lfc_free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let size = unsafe { block_size(p) };
    if let Some(lay) = layout(size) {
        // SAFETY: the block starts HEADER bytes before `p` with this layout.
        unsafe {
            let base = (p as *mut u8).sub(HEADER);
            heap()
                .lock()
                .deallocate(std::ptr::NonNull::new_unchecked(base), lay)
        };
    }
}

/// `lfc_realloc`.
///
/// # Safety
/// As for [`lfc_free`].
#[no_mangle]
pub unsafe extern "C" fn lfc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return lfc_malloc(size);
    }
    // SAFETY: the caller's contract.
    let old = unsafe { block_size(p) };
    let q = lfc_malloc(size);
    if !q.is_null() {
        // SAFETY: both blocks hold at least `min(old, size)` bytes and are distinct.
        unsafe {
            std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size));
            lfc_free(p);
        }
    }
    q
}

/// `lfc_memcpy`: copies into a send packet (or anywhere); returns `dst`.
///
/// # Safety
/// As `memcpy`: `dst` and `src` are valid for `n` bytes and do not overlap.
#[no_mangle]
pub unsafe extern "C" fn lfc_memcpy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    if n > 0 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, n) };
    }
    dst
}

// ----------------------------------------------------------------- timer

/// `lfc_timer_start`.
#[no_mangle]
pub extern "C" fn lfc_timer_start() {
    let mut t = TIMER.lock().unwrap_or_else(|p| p.into_inner());
    *t = Some((Instant::now(), Duration::ZERO));
}

/// `lfc_timer_stop`.
#[no_mangle]
pub extern "C" fn lfc_timer_stop() {
    let mut t = TIMER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((start, _)) = *t {
        *t = Some((start, start.elapsed()));
    }
}

/// `lfc_timer_elapsed`: microseconds between the last start and stop.
#[no_mangle]
pub extern "C" fn lfc_timer_elapsed() -> f64 {
    let t = TIMER.lock().unwrap_or_else(|p| p.into_inner());
    t.map_or(0.0, |(_, d)| d.as_secs_f64() * 1e6)
}

/// `lfc_timer_delta`: spins for `microsec` microseconds.
#[no_mangle]
pub extern "C" fn lfc_timer_delta(microsec: c_uint) {
    let end = Instant::now() + Duration::from_micros(microsec as u64);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// `lfc_fetch_and_add`: adds one to `dest`'s variable; returns the value before.
#[no_mangle]
pub extern "C" fn lfc_fetch_and_add(dest: c_uint, upcalls_allowed: c_int) -> c_uint {
    guard("lfc_fetch_and_add", 0, || {
        with_lfc("lfc_fetch_and_add", |l| {
            let dest = u16::try_from(dest).unwrap_or(u16::MAX);
            match l.fetch_and_add(dest, upcalls_allowed != 0) {
                Ok(v) => v as c_uint,
                Err(e) => fatal("lfc_fetch_and_add", format!("process {dest}: {e}")),
            }
        })
    })
}

// ------------------------------------------------------------ statistics

/// `lfc_stats_reset`: collective; every process's counters start over.
#[no_mangle]
pub extern "C" fn lfc_stats_reset() {
    guard("lfc_stats_reset", (), || {
        with_lfc("lfc_stats_reset", |l| {
            l.stats_reset()
                .unwrap_or_else(|e| fatal("lfc_stats_reset", e))
        })
    })
}

/// `lfc_stats_create`: a statistics buffer on process 0 (same id everywhere).
#[no_mangle]
pub extern "C" fn lfc_stats_create() -> c_int {
    guard("lfc_stats_create", -1, || {
        with_lfc("lfc_stats_create", |l| {
            l.stats_create()
                .unwrap_or_else(|e| fatal("lfc_stats_create", e))
        })
    })
}

/// `lfc_stats_gather`: collective; every process's counters into `statbuf`.
#[no_mangle]
pub extern "C" fn lfc_stats_gather(statbuf: c_int) {
    guard("lfc_stats_gather", (), || {
        with_lfc("lfc_stats_gather", |l| {
            l.stats_gather(statbuf)
                .unwrap_or_else(|e| fatal("lfc_stats_gather", e))
        })
    })
}

fn dump(l: &HostLfc<()>, buf: c_int, hdr: Option<&str>, ftr: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(h) = hdr {
        out += h;
        out += "\n";
    }
    out += &format!("{:>5}", "rank");
    for n in LfcStats::NAMES {
        out += &format!(" {n:>13}");
    }
    out += "\n";
    for (rank, row) in l.stats_buffer(buf).unwrap_or(&[]).iter().enumerate() {
        out += &format!("{rank:>5}");
        for v in row {
            out += &format!(" {v:>13}");
        }
        out += "\n";
    }
    if let Some(f) = ftr {
        out += f;
        out += "\n";
    }
    out
}

/// `lfc_stats_dump`: prints buffer `statbuf` to `fp`, between `hdr` and `ftr`
/// (each followed by a newline; null: none). On process 0 only.
///
/// # Safety
/// `fp` is an open `FILE *`; `hdr` and `ftr` are null or C strings.
#[no_mangle]
pub unsafe extern "C" fn lfc_stats_dump(
    fp: *mut libc::FILE,
    statbuf: c_int,
    hdr: *mut c_char,
    ftr: *mut c_char,
) {
    let text = |p: *const c_char| {
        (!p.is_null()).then(|| {
            // SAFETY: the caller's contract: a non-null `hdr`/`ftr` is a C string.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        })
    };
    let (hdr, ftr) = (text(hdr), text(ftr));
    guard("lfc_stats_dump", (), || {
        if fp.is_null() {
            fatal("lfc_stats_dump", "no stream");
        }
        let s = with_lfc("lfc_stats_dump", |l| {
            if l.my_proc() != 0 {
                fatal("lfc_stats_dump", "call it on process 0 only");
            }
            if l.stats_buffer(statbuf).is_none() {
                fatal("lfc_stats_dump", format!("no statistics buffer {statbuf}"));
            }
            dump(l, statbuf, hdr.as_deref(), ftr.as_deref())
        });
        let c = CString::new(s).unwrap_or_default();
        // SAFETY: `fp` is an open stream (the caller's contract), `c` a C string.
        unsafe { libc::fputs(c.as_ptr(), fp) };
    })
}
