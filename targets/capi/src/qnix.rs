//! The QNIX C ABI (`include/qnix.h`): De Vivo's interface on Volley.
//!
//! - **The NIC.** `qx_send` and the other commands check their arguments and post a
//!   command in the process's command queue; the library's NIC step consumes it,
//!   moves the data and writes the doorbells in the HPS `qx_init` returned. The step
//!   runs inside every `qx_*` call (and is spun by `qx_poll_for_*`), and between
//!   calls on the library's NIC thread: every 20 us while a doorbell is busy, every
//!   millisecond otherwise (so peers' messages and acks are taken), never while the
//!   program is inside a call (it then looks again a millisecond later). So a
//!   program may spin on its doorbells in the HPS, as on the original NIC, or
//!   compute while its messages move. The cost: a wake-up per 20 us of a busy
//!   doorbell outside calls, one per millisecond otherwise. `VOLLEY_QNIX_NIC=0`
//!   turns the thread off: the work is then done only inside calls.
//! - **Physical addresses.** `qx_buffer_translate` reads `/proc/self/pagemap`: the
//!   kernel gives frame numbers only to a process with `CAP_SYS_ADMIN`, so elsewhere
//!   it returns `QX_ENOPHYS` and a program uses the buffer pool instead. The pages
//!   must be resident (lock them first: `QX_EFAULT` otherwise). Like the original
//!   NIC, this one takes page tables of physical addresses; it reaches only frames
//!   this process translated (`qx_buffer_translate`, `qx_buffer_pool`), through the
//!   virtual pages they were translated from, and only while those are still
//!   mapped: any other address in a page table is `QX_EFAULT`.
//! - **Context regions.** `context_reg` is kept with the context and read when the
//!   command is posted: as the data itself (at most `QX_SHORT_MAX` bytes, copied,
//!   so the buffer is free when the call returns) by the `*_short` commands, as a
//!   page table by the others and by `qx_receive`.
//! - **Errors.** Every call returns a negative `QX_E*` number (or NULL) on error and
//!   records it for `qx_last_error`; `qx_strerror` names it.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_long, c_ulong, c_void};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use std::os::fd::{AsRawFd, FromRawFd};
use volley_core::qnix::{Name, QxError, Region, CONTEXTS, PAGE, TRANSLATE_MAX};
use volley_hosted::qnix::{self as hosted, HostQnix};
use volley_hosted::wakeup::EventLoop;
use volley_hosted::{Fabric, HostError};

use crate::guard;
use volley_hosted::procmem::ProcessMemory;

/// The Host Process Structure (`qx_hps_t`).
#[repr(C)]
#[derive(Debug)]
pub struct QxHps {
    proc_name: [c_int; 2],
    group_size: c_int,
    send_doorbell: [c_int; CONTEXTS],
    recv_doorbell: [c_int; CONTEXTS],
    buffer_pool: *mut c_char,
    buffer_pool_size: c_long,
}

struct State {
    q: HostQnix<ProcessMemory>,
    /// The HPS, leaked so that it outlives `qx_end`.
    hps: *mut QxHps,
    send_reg: [usize; CONTEXTS],
    recv_reg: [usize; CONTEXTS],
    /// Which `qx_init` this is: the NIC thread of an earlier one stops.
    generation: u64,
    /// A doorbell changed since the last `volley_arm`.
    rung: bool,
    /// Rung with each doorbell change once `volley_wakeup_fd` made it: the NIC
    /// thread's work wakes a program asleep on its wake-up descriptor.
    bell_fd: Option<std::os::fd::OwnedFd>,
}

// SAFETY: the HPS pointer is only written under the state lock, by the program's
// calls and by the NIC thread, one at a time.
unsafe impl Send for State {}

static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Frames this process translated: frame number to virtual page.
static FRAMES: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());
static LAST: AtomicI32 = AtomicI32::new(0);
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Whether the NIC thread is wanted (`VOLLEY_QNIX_NIC`, on by default).
fn nic_wanted() -> Result<bool, String> {
    match std::env::var("VOLLEY_QNIX_NIC") {
        Err(_) => Ok(true),
        Ok(v) => match v.trim() {
            "1" | "" => Ok(true),
            "0" => Ok(false),
            _ => Err(format!("VOLLEY_QNIX_NIC={v:?}: expected 0 (off) or 1 (on)")),
        },
    }
}

/// The NIC between calls: steps the state of `qx_init` number `generation` while
/// the program is not inside a call, until `qx_end`.
fn start_nic(generation: u64) -> std::io::Result<()> {
    let busy_wait = Duration::from_micros(20);
    let idle_wait = Duration::from_millis(1);
    std::thread::Builder::new()
        .name("qnix-nic".into())
        .spawn(move || {
            // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack,
            // so that the short sleeps are short.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64) };
            loop {
                let g = match STATE.try_lock() {
                    Ok(g) => Some(g),
                    Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    // The program is inside a call: it does the work, and the thread
                    // looks again a millisecond later.
                    Err(TryLockError::WouldBlock) => None,
                };
                let pending = match g {
                    None => false,
                    Some(mut g) => match g.as_mut() {
                        Some(s) if s.generation == generation => {
                            let busy = s.q.step();
                            s.sync();
                            busy || s.pending()
                        }
                        _ => return,
                    },
                };
                std::thread::sleep(if pending { busy_wait } else { idle_wait });
            }
        })
        .map(|_| ())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ret(r: Result<c_int, QxError>) -> c_int {
    r.unwrap_or_else(|e| {
        LAST.store(e.code(), Ordering::Relaxed);
        e.code()
    })
}

/// `volley_wakeup_fd` (`arm` false) or `volley_arm` (true) for a QNIX process;
/// `None` before `qx_init` or after `qx_end`.
pub(crate) fn event(arm: bool) -> Option<Result<c_int, HostError>> {
    let mut g = lock(&STATE);
    let s = g.as_mut()?;
    Some(if arm { s.arm() } else { s.wakeup_fd() })
}

/// Runs `f` on the process's state, then copies the doorbells into the HPS.
fn with(f: impl FnOnce(&mut State) -> Result<c_int, QxError>) -> c_int {
    let mut g = lock(&STATE);
    let r = match g.as_mut() {
        Some(s) => {
            let r = f(s);
            s.sync();
            r
        }
        None => Err(QxError::NotInitialized),
    };
    ret(r)
}

impl State {
    /// Copies the doorbells written since the last copy into the HPS.
    fn sync(&mut self) {
        let [send, recv] = self.q.take_changed_bells();
        self.copy_bells(send, recv);
        if send | recv != 0 {
            self.rung = true;
            if let Some(fd) = &self.bell_fd {
                let one = 1u64;
                // SAFETY: a valid eventfd and 8 readable bytes.
                unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            }
        }
    }

    /// `volley_wakeup_fd`: the device's wake-up descriptor, with the doorbells'
    /// eventfd in it.
    fn wakeup_fd(&mut self) -> Result<c_int, HostError> {
        if self.bell_fd.is_none() {
            // SAFETY: a plain system call; the descriptor is owned below.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                return Err(HostError::Other(format!(
                    "wake-up descriptor: eventfd: {e}"
                )));
            }
            // SAFETY: just made, owned by nobody else.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            // The doorbells' descriptor lives with the state, as long as the
            // device's wake-up descriptor that watches it.
            self.q.wakeup()?.watch(fd.as_raw_fd())?;
            self.bell_fd = Some(fd);
        }
        self.q.wakeup_fd()
    }

    /// `volley_arm`: a step as any call makes (the NIC's work, the doorbells
    /// copied), then 1 if a doorbell changed since the last arming or work waits,
    /// else armed.
    fn arm(&mut self) -> Result<c_int, HostError> {
        self.wakeup_fd()?;
        self.q.step();
        self.sync();
        if let Some(fd) = &self.bell_fd {
            let mut v = 0u64;
            // SAFETY: a valid non-blocking eventfd and 8 writable bytes.
            unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
        if std::mem::take(&mut self.rung) {
            return Ok(1);
        }
        Ok(if self.q.arm()? { 0 } else { 1 })
    }

    /// Copies the doorbells of the contexts in the masks (bit `i`: context `i`) into
    /// the HPS.
    fn copy_bells(&mut self, send: u64, recv: u64) {
        let h = self.hps;
        for (mut mask, side) in [(send, 0), (recv, 1)] {
            while mask != 0 {
                let i = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let v = if side == 0 {
                    self.q.send_doorbell(i)
                } else {
                    self.q.recv_doorbell(i)
                };
                // SAFETY: `h` is the live, leaked HPS, whose `int`s are aligned, and
                // `i < CONTEXTS` (a bit of a `u64` mask the core keeps per context).
                // Atomic release stores: the program polls these fields (from the NIC
                // thread's point of view, concurrently) and then reads the data they
                // announce.
                unsafe {
                    let b = if side == 0 {
                        std::ptr::addr_of_mut!((*h).send_doorbell[i])
                    } else {
                        std::ptr::addr_of_mut!((*h).recv_doorbell[i])
                    };
                    AtomicI32::from_ptr(b).store(v, Ordering::Release);
                }
            }
        }
    }

    /// Whether an operation is under way (a doorbell is busy).
    fn pending(&self) -> bool {
        (0..CONTEXTS).any(|i| {
            self.q.send_doorbell(i) == volley_core::qnix::BUSY
                || self.q.recv_doorbell(i) == volley_core::qnix::BUSY
        })
    }

    /// Resolves the context region of send context `i` for a send of `short` kind.
    fn prepare_send(&mut self, i: usize, short: bool) -> Result<(), QxError> {
        let (len, region) = self.q.send_context_info(i).ok_or(QxError::NoContext)?;
        let reg = self.send_reg[i];
        let region = match (reg, region) {
            (0, Region::None) if len == 0 => Region::Data(Vec::new()),
            (0, _) => return Ok(()),
            (p, _) if short => self.q.data_region(p as u64, len)?,
            (p, _) => Region::Segments(page_table(p as *const c_ulong, len)?),
        };
        self.q.set_send_region(i, region)
    }
}

fn name_at(p: *const c_int) -> Result<Name, QxError> {
    if p.is_null() {
        return Err(QxError::Invalid);
    }
    // SAFETY: the seed's contract: a two-element array.
    unsafe { Ok(Name::new(*p, *p.add(1))) }
}

fn index(ctx: c_int) -> Result<usize, QxError> {
    usize::try_from(ctx)
        .ok()
        .filter(|&i| i < CONTEXTS)
        .ok_or(QxError::NoContext)
}

/// The segments a page table of `len` bytes names, through frames this process
/// translated.
fn page_table(table: *const c_ulong, len: usize) -> Result<Vec<(u64, usize)>, QxError> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if len > TRANSLATE_MAX {
        return Err(QxError::TooLong);
    }
    let page = PAGE as u64;
    // `unsigned long` is 64 bits on every target the hosted library builds for.
    #[allow(clippy::useless_conversion)]
    // SAFETY: the seed's contract: the table qx_buffer_translate wrote, one entry
    // per page plus the trailer (its length follows from the first entry).
    let at = |k: usize| u64::from(unsafe { *table.add(k) });
    let frames = lock(&FRAMES);
    let virt = |phys: u64| frames.get(&(phys / page)).copied().ok_or(QxError::Fault);
    let first = at(0);
    let off = (first % page) as usize;
    let n = (off + len).div_ceil(PAGE);
    let first_bytes = len.min(PAGE - off);
    let last_bytes = if n == 1 {
        first_bytes
    } else {
        off + len - (n - 1) * PAGE
    };
    if at(n) != ((first_bytes as u64) << 16 | last_bytes as u64) {
        return Err(QxError::Invalid);
    }
    let mut segs: Vec<(u64, usize)> = vec![(virt(first)? + off as u64, first_bytes)];
    let mut left = len - first_bytes;
    for k in 1..n {
        let p = at(k);
        if p % page != 0 {
            return Err(QxError::Invalid);
        }
        let v = virt(p)?;
        let b = left.min(PAGE);
        left -= b;
        match segs.last_mut() {
            Some(last) if last.0 + last.1 as u64 == v => last.1 += b,
            _ => segs.push((v, b)),
        }
    }
    Ok(segs)
}

/// `void *qx_init(int *proc_name, int group_name, int group_size)`: registers this
/// process; returns the HPS once the whole application has registered.
///
/// # Safety
/// `proc_name` is null or a two-element array.
#[no_mangle]
pub unsafe extern "C" fn qx_init(
    proc_name: *mut c_int,
    group_name: c_int,
    group_size: c_int,
) -> *mut c_void {
    guard("qx_init", std::ptr::null_mut(), || {
        let r = init(proc_name, group_name, group_size);
        match r {
            Ok(h) => h as *mut c_void,
            Err(e) => {
                LAST.store(e.code(), Ordering::Relaxed);
                std::ptr::null_mut()
            }
        }
    })
}

fn init(
    proc_name: *mut c_int,
    group_name: c_int,
    group_size: c_int,
) -> Result<*mut QxHps, QxError> {
    let name = name_at(proc_name)?;
    let mut g = lock(&STATE);
    if g.is_some() {
        return Err(QxError::Exists);
    }
    let say = |m: &str| eprintln!("volley: {m}");
    let nic = nic_wanted().map_err(|e| {
        say(&format!("qx_init: {e}"));
        QxError::Invalid
    })?;
    let fabric = Fabric::from_env().map_err(|e| {
        say(&format!("qx_init: {}", e));
        QxError::Invalid
    })?;
    let boot = hosted::boot().map_err(|e| {
        say(&e.to_string());
        QxError::Invalid
    })?;
    if group_size > boot.size as c_int {
        say(&format!(
            "qx_init: group_size {group_size}, but this job has {} process(es): start it with `volley run -n {group_size}` (or mpiexec, srun)",
            boot.size
        ));
        return Err(QxError::Size);
    }
    let mut q = hosted::qnix(&boot, fabric, ProcessMemory::default()).map_err(|e| {
        say(&e.to_string());
        QxError::Network
    })?;
    q.init(name, group_name, group_size)?;
    let hps = Box::into_raw(Box::new(QxHps {
        proc_name: [name.ai, name.pi],
        group_size,
        send_doorbell: [0; CONTEXTS],
        recv_doorbell: [0; CONTEXTS],
        buffer_pool: std::ptr::null_mut(),
        buffer_pool_size: 0,
    }));
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    *g = Some(State {
        q,
        hps,
        send_reg: [0; CONTEXTS],
        recv_reg: [0; CONTEXTS],
        generation,
        rung: false,
        bell_fd: None,
    });
    if let Some(s) = g.as_mut() {
        // Every doorbell once, as the core holds them; from now on the changed ones.
        s.q.take_changed_bells();
        let all = u64::MAX >> (64 - CONTEXTS);
        s.copy_bells(all, all);
    }
    if nic {
        start_nic(generation).map_err(|e| {
            say(&format!("qx_init: no NIC thread: {e}"));
            *g = None;
            QxError::NoMemory
        })?;
    }
    Ok(hps)
}

/// `int qx_end(int *proc_name)`: finishes what was posted and de-registers.
///
/// # Safety
/// `proc_name` is null or a two-element array.
#[no_mangle]
pub unsafe extern "C" fn qx_end(proc_name: *mut c_int) -> c_int {
    guard("qx_end", QxError::Network.code(), || {
        let name = name_at(proc_name);
        let mut g = lock(&STATE);
        let r = match g.as_mut() {
            None => Err(QxError::NotInitialized),
            Some(s) if name != Ok(s.q.name()) => Err(QxError::Invalid),
            Some(s) => {
                let r = s.q.end().map(|()| 0);
                s.sync();
                *g = None;
                r
            }
        };
        ret(r)
    })
}

/// `int qx_buffer_lock(char *buffer, long buffer_size)`: `mlock(2)`.
///
/// # Safety
/// Any range may be passed; the kernel checks it.
#[no_mangle]
pub unsafe extern "C" fn qx_buffer_lock(buffer: *mut c_char, size: c_long) -> c_int {
    guard("qx_buffer_lock", QxError::Network.code(), || {
        let Ok(n) = usize::try_from(size) else {
            return ret(Err(QxError::Invalid));
        };
        // SAFETY: mlock only changes page residency; the kernel validates the range.
        let r = unsafe { libc::mlock(buffer as *const c_void, n) };
        ret(if r == 0 {
            Ok(0)
        } else {
            Err(QxError::NoMemory)
        })
    })
}

/// `int qx_buffer_unlock(char *buffer, long buffer_size)`: `munlock(2)`.
///
/// # Safety
/// Any range may be passed; the kernel checks it.
#[no_mangle]
pub unsafe extern "C" fn qx_buffer_unlock(buffer: *mut c_char, size: c_long) -> c_int {
    guard("qx_buffer_unlock", QxError::Network.code(), || {
        let Ok(n) = usize::try_from(size) else {
            return ret(Err(QxError::Invalid));
        };
        // SAFETY: as for mlock.
        let r = unsafe { libc::munlock(buffer as *const c_void, n) };
        ret(if r == 0 { Ok(0) } else { Err(QxError::Invalid) })
    })
}

/// Translates `[buf, buf + len)` into `out` (entries then the trailer); records the
/// frames. Returns the number of pages.
fn translate(buf: u64, len: usize, out: *mut c_ulong) -> Result<c_int, QxError> {
    if buf == 0 || out.is_null() || len == 0 {
        return Err(QxError::Invalid);
    }
    if len > TRANSLATE_MAX {
        return Err(QxError::TooLong);
    }
    if !ProcessMemory::default().allowed(buf, len as u64, false, false) {
        return Err(QxError::Fault);
    }
    let page = PAGE as u64;
    let first = buf / page;
    let n = ((buf + len as u64 - 1) / page - first + 1) as usize;
    let f = std::fs::File::open("/proc/self/pagemap").map_err(|_| QxError::NoPhysical)?;
    let mut raw = vec![0u8; 8 * n];
    f.read_exact_at(&mut raw, first * 8)
        .map_err(|_| QxError::NoPhysical)?;
    let mut pfns = Vec::with_capacity(n);
    for e in raw.chunks_exact(8) {
        let e = u64::from_le_bytes(e.try_into().unwrap_or_default());
        // Bit 63: present; bits 0-54: frame number (zero without CAP_SYS_ADMIN).
        if e >> 63 == 0 {
            return Err(QxError::Fault);
        }
        let pfn = e & ((1 << 55) - 1);
        if pfn == 0 {
            return Err(QxError::NoPhysical);
        }
        pfns.push(pfn);
    }
    let off = (buf % page) as usize;
    let first_bytes = len.min(PAGE - off);
    let last_bytes = if n == 1 {
        first_bytes
    } else {
        off + len - (n - 1) * PAGE
    };
    let mut frames = lock(&FRAMES);
    for (k, &pfn) in pfns.iter().enumerate() {
        let v = pfn * page + if k == 0 { off as u64 } else { 0 };
        // SAFETY: the seed's contract: `out` has one entry per page plus one.
        unsafe { *out.add(k) = v as c_ulong };
        frames.insert(pfn, (first + k as u64) * page);
    }
    // SAFETY: as above, the last entry.
    unsafe { *out.add(n) = ((first_bytes as u64) << 16 | last_bytes as u64) as c_ulong };
    Ok(n as c_int)
}

/// `int qx_buffer_translate(char *buffer, long buffer_size, unsigned long
/// *phys_addr)`: physical addresses of the buffer's pages (the first with the
/// buffer's offset), then the trailer; returns the number of pages.
///
/// # Safety
/// `phys_addr` has room for one entry per page of the buffer plus one.
#[no_mangle]
pub unsafe extern "C" fn qx_buffer_translate(
    buffer: *mut c_char,
    size: c_long,
    phys_addr: *mut c_ulong,
) -> c_int {
    guard("qx_buffer_translate", QxError::Network.code(), || {
        let r = usize::try_from(size)
            .map_err(|_| QxError::Invalid)
            .and_then(|n| translate(buffer as u64, n, phys_addr));
        ret(r)
    })
}

/// `int qx_buffer_pool(int pool_size)`: a page-aligned, locked pool of `pool_size`
/// pages (at most 8 MB), in the HPS; contexts name its pages by index.
#[no_mangle]
pub extern "C" fn qx_buffer_pool(pool_size: c_int) -> c_int {
    guard("qx_buffer_pool", QxError::Network.code(), || {
        with(|s| {
            if pool_size < 1 {
                return Err(QxError::Invalid);
            }
            let len = pool_size as usize * PAGE;
            if len > volley_core::qnix::POOL_MAX {
                return Err(QxError::TooLong);
            }
            if s.q.pool().is_some() {
                return Err(QxError::Exists);
            }
            // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(QxError::NoMemory);
            }
            // SAFETY: the mapping just made.
            if unsafe { libc::mlock(p, len) } != 0 {
                // SAFETY: as above; it is unused.
                unsafe { libc::munmap(p, len) };
                return Err(QxError::NoMemory);
            }
            // Frames recorded where the platform gives them, so that page tables
            // into the pool work too.
            let mut scratch = vec![0 as c_ulong; TRANSLATE_MAX / PAGE + 1];
            for chunk in (0..len).step_by(TRANSLATE_MAX) {
                let n = (len - chunk).min(TRANSLATE_MAX);
                let _ = translate(p as u64 + chunk as u64, n, scratch.as_mut_ptr());
            }
            if let Err(e) = s.q.set_pool(p as u64, len) {
                // SAFETY: as above.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
            // SAFETY: the live HPS.
            unsafe {
                (*s.hps).buffer_pool = p as *mut c_char;
                (*s.hps).buffer_pool_size = len as c_long;
            }
            Ok(0)
        })
    })
}

fn pool_region(index: c_int, reg: *mut c_ulong) -> Result<(Region, usize), QxError> {
    match index {
        i if i >= 0 => Ok((Region::Pool(i as usize), 0)),
        -1 => Ok((Region::None, reg as usize)),
        _ => Err(QxError::Invalid),
    }
}

/// `int qx_send_context(int *receiver_proc_name, int context_tag, int
/// doorbell_flag, int size, long len, int buffer_pool_index, unsigned long
/// *context_reg)`: returns the send context's index.
///
/// # Safety
/// `receiver_proc_name` is null or a two-element array; `context_reg` is null or
/// what the command posted later reads (see the module documentation).
#[no_mangle]
pub unsafe extern "C" fn qx_send_context(
    receiver_proc_name: *mut c_int,
    context_tag: c_int,
    doorbell_flag: c_int,
    size: c_int,
    len: c_long,
    buffer_pool_index: c_int,
    context_reg: *mut c_ulong,
) -> c_int {
    guard("qx_send_context", QxError::Network.code(), || {
        with(|s| {
            // A context for a barrier or join names nobody.
            let to = if receiver_proc_name.is_null() {
                Name::new(s.q.name().ai, -1)
            } else {
                name_at(receiver_proc_name)?
            };
            let len = usize::try_from(len).map_err(|_| QxError::Invalid)?;
            let (region, reg) = pool_region(buffer_pool_index, context_reg)?;
            let i =
                s.q.send_context(to, context_tag, doorbell_flag != 0, size, len, region)?;
            s.send_reg[i] = reg;
            Ok(i as c_int)
        })
    })
}

/// `int qx_recv_context(int *sender_proc_name, int context_tag, int
/// doorbell_flag, int size, long len, int buffer_pool_index, unsigned long
/// *context_reg)`: returns the receive context's index.
///
/// # Safety
/// As for [`qx_send_context`]; `context_reg` is a page table.
#[no_mangle]
pub unsafe extern "C" fn qx_recv_context(
    sender_proc_name: *mut c_int,
    context_tag: c_int,
    doorbell_flag: c_int,
    size: c_int,
    len: c_long,
    buffer_pool_index: c_int,
    context_reg: *mut c_ulong,
) -> c_int {
    guard("qx_recv_context", QxError::Network.code(), || {
        with(|s| {
            let from = name_at(sender_proc_name)?;
            let len = usize::try_from(len).map_err(|_| QxError::Invalid)?;
            let (region, reg) = pool_region(buffer_pool_index, context_reg)?;
            let i =
                s.q.recv_context(from, context_tag, doorbell_flag != 0, size, len, region)?;
            s.recv_reg[i] = reg;
            Ok(i as c_int)
        })
    })
}

/// Resolves send context `ctx` for a `short` or long send, then runs `post`.
fn sending(
    ctx: c_int,
    short: bool,
    post: impl FnOnce(&mut HostQnix<ProcessMemory>, usize) -> Result<(), QxError>,
) -> c_int {
    with(|s| {
        let i = index(ctx)?;
        if let Err(e) = s.prepare_send(i, short) {
            return Err(s.q.refuse_send(i, e));
        }
        post(&mut s.q, i).map(|()| 0)
    })
}

/// `int qx_send(int context_index)`.
#[no_mangle]
pub extern "C" fn qx_send(context_index: c_int) -> c_int {
    guard("qx_send", QxError::Network.code(), || {
        sending(context_index, false, |q, i| q.send(i))
    })
}

/// `int qx_send_short(int context_index)`.
#[no_mangle]
pub extern "C" fn qx_send_short(context_index: c_int) -> c_int {
    guard("qx_send_short", QxError::Network.code(), || {
        sending(context_index, true, |q, i| q.send_short(i))
    })
}

/// `int qx_broadcast(int context_index, int group_name)`.
#[no_mangle]
pub extern "C" fn qx_broadcast(context_index: c_int, group_name: c_int) -> c_int {
    guard("qx_broadcast", QxError::Network.code(), || {
        sending(context_index, false, |q, i| q.broadcast(i, group_name))
    })
}

/// `int qx_broadcast_short(int context_index, int group_name)`.
#[no_mangle]
pub extern "C" fn qx_broadcast_short(context_index: c_int, group_name: c_int) -> c_int {
    guard("qx_broadcast_short", QxError::Network.code(), || {
        sending(context_index, true, |q, i| q.broadcast_short(i, group_name))
    })
}

fn names(size: c_int, list: *mut *mut c_int) -> Result<Vec<Name>, QxError> {
    if size < 1 || list.is_null() {
        return Err(QxError::Invalid);
    }
    (0..size as usize)
        // SAFETY: the seed's contract: `size` pointers to two-element arrays.
        .map(|k| name_at(unsafe { *list.add(k) }))
        .collect()
}

fn multicast(call: &str, ctx: c_int, size: c_int, list: *mut *mut c_int, short: bool) -> c_int {
    guard(call, QxError::Network.code(), || match names(size, list) {
        Ok(to) if short => sending(ctx, true, |q, i| q.multicast_short(i, &to)),
        Ok(to) => sending(ctx, false, |q, i| q.multicast(i, &to)),
        Err(e) => ret(Err(e)),
    })
}

/// `int qx_multicast(int context_index, int size, int **recv_proc_name_list)`.
///
/// # Safety
/// `recv_proc_name_list` holds `size` pointers to two-element arrays.
#[no_mangle]
pub unsafe extern "C" fn qx_multicast(
    context_index: c_int,
    size: c_int,
    recv_proc_name_list: *mut *mut c_int,
) -> c_int {
    multicast(
        "qx_multicast",
        context_index,
        size,
        recv_proc_name_list,
        false,
    )
}

/// `int qx_multicast_short(int context_index, int size, int **recv_proc_name_list)`.
///
/// # Safety
/// As for [`qx_multicast`].
#[no_mangle]
pub unsafe extern "C" fn qx_multicast_short(
    context_index: c_int,
    size: c_int,
    recv_proc_name_list: *mut *mut c_int,
) -> c_int {
    multicast(
        "qx_multicast_short",
        context_index,
        size,
        recv_proc_name_list,
        true,
    )
}

/// `int qx_receive(int context_index)`.
#[no_mangle]
pub extern "C" fn qx_receive(context_index: c_int) -> c_int {
    guard("qx_receive", QxError::Network.code(), || {
        with(|s| {
            let i = index(context_index)?;
            let (len, region) = s.q.recv_context_info(i).ok_or(QxError::NoContext)?;
            match (s.recv_reg[i], region) {
                (0, Region::None) if len == 0 => {
                    s.q.set_recv_region(i, Region::Segments(Vec::new()))?
                }
                (0, _) => {}
                (p, _) => {
                    let segs = page_table(p as *const c_ulong, len)?;
                    s.q.set_recv_region(i, Region::Segments(segs))?;
                }
            }
            s.q.receive(i).map(|()| 0)
        })
    })
}

/// `int qx_join_group(int context_index, int group_name, int group_size)`.
#[no_mangle]
pub extern "C" fn qx_join_group(
    context_index: c_int,
    group_name: c_int,
    group_size: c_int,
) -> c_int {
    guard("qx_join_group", QxError::Network.code(), || {
        with(|s| {
            s.q.join_group(index(context_index)?, group_name, group_size)
                .map(|()| 0)
        })
    })
}

/// `int qx_barrier(int context_index, int group_name, int group_size)`.
#[no_mangle]
pub extern "C" fn qx_barrier(context_index: c_int, group_name: c_int, group_size: c_int) -> c_int {
    guard("qx_barrier", QxError::Network.code(), || {
        with(|s| {
            s.q.barrier(index(context_index)?, group_name, group_size)
                .map(|()| 0)
        })
    })
}

/// `int qx_poll_for_send(int context_index)`: 0 once the send completed.
#[no_mangle]
pub extern "C" fn qx_poll_for_send(context_index: c_int) -> c_int {
    guard("qx_poll_for_send", QxError::Network.code(), || {
        with(|s| s.q.poll_for_send(index(context_index)?).map(|()| 0))
    })
}

/// `int qx_poll_for_receive(int context_index)`: the bytes received.
#[no_mangle]
pub extern "C" fn qx_poll_for_receive(context_index: c_int) -> c_int {
    guard("qx_poll_for_receive", QxError::Network.code(), || {
        with(|s| {
            s.q.poll_for_receive(index(context_index)?)
                .map(|n| n as c_int)
        })
    })
}

/// Extension: `const char *qx_strerror(int error)`.
#[no_mangle]
pub extern "C" fn qx_strerror(error: c_int) -> *const c_char {
    static TEXTS: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let texts = TEXTS.get_or_init(|| {
        (1..=QxError::COUNT as c_int)
            .filter_map(|k| QxError::from_code(-k))
            .map(|e| std::ffi::CString::new(e.message()).unwrap_or_default())
            .chain([c"no error".into(), c"unknown error".into()])
            .collect()
    });
    let k = match QxError::from_code(error) {
        Some(e) => (-e.code() - 1) as usize,
        None if error >= 0 => QxError::COUNT,
        None => QxError::COUNT + 1,
    };
    texts[k].as_ptr()
}

/// Extension: `int qx_last_error(void)`: the code of the last failed call (0: none).
#[no_mangle]
pub extern "C" fn qx_last_error() -> c_int {
    LAST.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_text() {
        for code in -17..=-1 {
            let e = QxError::from_code(code).unwrap();
            // SAFETY: qx_strerror returns a static C string.
            let s = unsafe { std::ffi::CStr::from_ptr(qx_strerror(code)) };
            assert_eq!(s.to_str().unwrap(), e.message());
        }
    }
}
