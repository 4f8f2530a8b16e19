//! Sends: the calls of every kind and their handles (`gamma_wsend`, `gamma_tsend`).

use super::*;

#[derive(Clone, Copy)]
pub(super) enum SendKind {
    Blocking,
    NonBlocking,
}

/// Every send: `head` is the first piece of a two-piece send (or empty).
pub(super) fn send(
    port: u16,
    head: &[u8],
    body: &'static [u8],
    reliable: bool,
    how: SendKind,
) -> c_int {
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
pub(super) unsafe fn data_static(p: *const c_void, len: c_ulong) -> Option<&'static [u8]> {
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
pub(super) const FAILED_KEPT: usize = 4096;

/// Non-blocking sends by C handle. A handle stays answerable once its send has
/// ended, as in GAMMA, where a program may test or wait on it again: complete, or
/// the error it ended with. Handles count up from 1 and wrap after `c_int::MAX`;
/// the errors of the last [`FAILED_KEPT`] failed sends are kept, and a handle older
/// than a forgotten failure answers `InvalidHandle` (too old to tell).
#[derive(Debug, Default)]
pub(super) struct Handles {
    /// Sends not seen ending yet: C handle, sequence number, the engine's handle.
    pub(super) pending: Vec<(c_int, u64, SendHandle)>,
    /// Handles issued so far (the next one's sequence number).
    pub(super) issued: u64,
    /// Failed sends: sequence number and the code they ended with, oldest first.
    pub(super) failed: VecDeque<(u64, c_int)>,
    /// Sends numbered below this may have failed with an error no longer kept.
    pub(super) forgotten_below: u64,
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

pub(super) fn complete(handle: c_ulong, wait: bool) -> c_int {
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
