//! Memory locking and GAMMA's Pentium time-stamp clock (`gamma_time`).

use super::*;

pub(super) fn os_result(rc: c_int) -> c_int {
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
pub(super) fn ticks() -> u64 {
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

pub(super) fn ticks_per_us() -> f64 {
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
