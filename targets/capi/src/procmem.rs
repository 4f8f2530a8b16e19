//! The process's own memory as the engine may reach it: private mappings of
//! `/proc/self/maps`, re-read when an address is not found (the program mapped more
//! since). Cheetah core serves peers' puts and gets through it; QNIX's NIC step
//! reads send regions and writes receive regions through it.

use volley_core::engine::{Access, Error, Memory};

/// One mapping of `/proc/self/maps`.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    read: bool,
    write: bool,
}

/// The process's memory as peers may reach it (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct ProcessMemory {
    maps: Vec<Mapping>,
    pub(crate) exposed: Vec<(u64, u64)>,
}

impl ProcessMemory {
    fn load_maps(&mut self) {
        self.maps.clear();
        let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms)) = (f.next(), f.next()) else {
                continue;
            };
            let name = f.nth(3).unwrap_or("");
            let p = perms.as_bytes();
            // Private mappings only, never the kernel's special pages.
            if p.len() < 4 || p[3] != b'p' || name.starts_with("[v") {
                continue;
            }
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
            else {
                continue;
            };
            self.maps.push(Mapping {
                start,
                end,
                read: p[0] == b'r',
                write: p[0] == b'r' && p[1] == b'w',
            });
        }
    }

    /// Whether `[addr, addr + len)` lies in consecutive accepted mappings.
    fn covered(&self, addr: u64, len: u64, write: bool) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        let mut at = addr;
        loop {
            let Some(m) = self
                .maps
                .iter()
                .find(|m| m.start <= at && at < m.end && m.read && (m.write || !write))
            else {
                return false;
            };
            if end <= m.end {
                return true;
            }
            at = m.end;
        }
    }

    /// Private mappings that allow it; for a peer, once the program has exposed
    /// ranges, only those.
    pub(crate) fn allowed(&mut self, addr: u64, len: u64, write: bool, peer: bool) -> bool {
        if addr == 0 {
            return false;
        }
        if peer && !self.exposed.is_empty() {
            let Some(end) = addr.checked_add(len) else {
                return false;
            };
            return self.exposed.iter().any(|&(s, e)| s <= addr && end <= e);
        }
        if self.covered(addr, len, write) {
            return true;
        }
        // Mapped since the list was read?
        self.load_maps();
        self.covered(addr, len, write)
    }
}

impl Memory for ProcessMemory {
    fn check(&mut self, addr: u64, len: u64, access: Access) -> Result<(), Error> {
        // What a peer reads is held to the rule of what it may write: program data,
        // not code or constants.
        let ok = match access {
            Access::Read => self.allowed(addr, len, false, false),
            Access::Write => self.allowed(addr, len, true, false),
            Access::PeerRead | Access::PeerWrite => self.allowed(addr, len, true, true),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::BadAddress)
        }
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        if data.is_empty() {
            return Ok(());
        }
        if !self.allowed(addr, data.len() as u64, true, false) {
            return Err(Error::BadAddress);
        }
        // SAFETY: the range was just found inside private writable mappings of this
        // process (the policy was applied by `check` before the operation began).
        unsafe { std::ptr::copy(data.as_ptr(), addr as *mut u8, data.len()) };
        Ok(())
    }

    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        if out.is_empty() {
            return Ok(());
        }
        if !self.allowed(addr, out.len() as u64, false, false) {
            return Err(Error::BadAddress);
        }
        // SAFETY: the range lies in readable private mappings of this process.
        unsafe { std::ptr::copy(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn ring(&mut self, bell: u64) {
        if bell == 0 || !self.allowed(bell, 4, true, false) {
            return;
        }
        if bell.is_multiple_of(4) {
            // SAFETY: an aligned, writable `int` of this process; atomics so that a
            // program polling it sees a whole value.
            let a = unsafe { std::sync::atomic::AtomicI32::from_ptr(bell as *mut i32) };
            a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        } else {
            let p = bell as *mut i32;
            // SAFETY: a writable (unaligned) `int` of this process.
            unsafe { p.write_unaligned(p.read_unaligned().wrapping_add(1)) };
        }
    }
}
