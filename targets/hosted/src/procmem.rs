//! The process's own memory as the engine may reach it: private mappings of
//! `/proc/self/maps`, re-read when an address is not found (the program mapped more
//! since). Cheetah core serves peers' puts and gets through it; QNIX's NIC step
//! reads send regions and writes receive regions through it. It also holds what
//! this process tells same-host peers about it (the exposure table) and what it
//! knows of theirs ([`crate::direct`]).

use volley_core::engine::{Access, Error, Memory};

use crate::direct::{Direct, ExposureTable};

/// One mapping of a `/proc/<pid>/maps` file that peers may reach at all: private,
/// not one of the kernel's special pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) read: bool,
    pub(crate) write: bool,
}

/// The private mappings listed in a `maps` file's text, read by `procfs-core`. A
/// text it cannot read gives none: nothing is reachable then, rather than a guess.
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    use procfs_core::process::{MMPermissions, MMapPath, MemoryMaps};
    use procfs_core::FromBufRead;
    let Ok(maps) = MemoryMaps::from_buf_read(text.as_bytes()) else {
        return Vec::new();
    };
    maps.0
        .into_iter()
        // Private mappings only, never the kernel's special pages.
        .filter(|m| m.perms.contains(MMPermissions::PRIVATE))
        .filter(|m| match &m.pathname {
            MMapPath::Vdso | MMapPath::Vvar | MMapPath::Vsyscall => false,
            // The kernel's other pages (`[vvar_vclock]`), brackets taken off.
            MMapPath::Other(name) => !name.starts_with('v'),
            _ => true,
        })
        .map(|m| {
            let read = m.perms.contains(MMPermissions::READ);
            Mapping {
                start: m.address.0,
                end: m.address.1,
                read,
                write: read && m.perms.contains(MMPermissions::WRITE),
            }
        })
        .collect()
}

/// Whether `[addr, addr + len)` lies in consecutive mappings of `maps` that allow
/// reading (and writing, with `write`). Address 0 never does.
pub(crate) fn covered(maps: &[Mapping], addr: u64, len: u64, write: bool) -> bool {
    if addr == 0 {
        return false;
    }
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let mut at = addr;
    loop {
        let Some(m) = maps
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

/// Whether `[addr, addr + len)` lies inside one of `ranges` (`(start, end)` pairs).
pub(crate) fn inside(ranges: &[(u64, u64)], addr: u64, len: u64) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    addr != 0 && ranges.iter().any(|&(s, e)| s <= addr && end <= e)
}

/// The process's memory as peers may reach it: by default its private writable
/// mappings; once the program exposed ranges ([`ProcessMemory::expose`]), only
/// those.
#[derive(Debug, Default)]
pub struct ProcessMemory {
    maps: Vec<Mapping>,
    exposed: Vec<(u64, u64)>,
    /// Published to same-host peers when direct copies are on.
    pub(crate) table: Option<Box<ExposureTable>>,
    /// What this process knows of its peers' memory.
    pub(crate) direct: Direct,
}

impl ProcessMemory {
    fn load_maps(&mut self) {
        self.maps = std::fs::read_to_string("/proc/self/maps")
            .map(|t| parse_maps(&t))
            .unwrap_or_default();
    }

    /// Private mappings that allow it; for a peer, once the program has exposed
    /// ranges, only those.
    pub fn allowed(&mut self, addr: u64, len: u64, write: bool, peer: bool) -> bool {
        if addr == 0 {
            return false;
        }
        if peer && !self.exposed.is_empty() {
            return inside(&self.exposed, addr, len);
        }
        if covered(&self.maps, addr, len, write) {
            return true;
        }
        // Mapped since the list was read?
        self.load_maps();
        covered(&self.maps, addr, len, write)
    }

    /// From the first call on, peers reach only the ranges exposed. False (and
    /// nothing changes) for an empty range or one that is not writable memory of
    /// this process. Same-host peers see the change through the exposure table;
    /// [`crate::direct::expose`] also tells them it changed.
    pub fn expose(&mut self, addr: u64, len: u64) -> bool {
        if len == 0 || !self.allowed(addr, len, true, false) {
            return false;
        }
        self.exposed.push((addr, addr + len));
        if let Some(t) = self.table.as_mut() {
            t.set_exposed(&self.exposed);
        }
        true
    }

    /// The ranges exposed so far (`(start, end)`), empty in the default mode.
    pub fn exposed(&self) -> &[(u64, u64)] {
        &self.exposed
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

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 1 /usr/bin/prog
55d0c0001000-55d0c0002000 r-xp 00001000 08:01 1 /usr/bin/prog
55d0c0003000-55d0c0005000 rw-p 00003000 08:01 1 /usr/bin/prog
55d0c0005000-55d0c0007000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 rw-s 00000000 00:1a 9 /dev/shm/x/region
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r--p 00000000 00:00 0 [vvar]
7ffd00102000-7ffd00104000 r-xp 00000000 00:00 0 [vdso]
7ffd00104000-7ffd00106000 r--p 00000000 00:00 0 [vvar_vclock]
";

    #[test]
    fn only_private_writable_mappings_are_covered_for_writing() {
        let m = parse_maps(MAPS);
        assert_eq!(m.len(), 5, "the shared mapping and [vvar] are left out");
        assert!(
            covered(&m, 0x55d0_c000_3000, 0x4000, true),
            "data then heap"
        );
        assert!(
            !covered(&m, 0x55d0_c000_4ff0, 0x2020, true),
            "past the heap"
        );
        assert!(!covered(&m, 0x55d0_c000_1000, 8, true), "code");
        assert!(covered(&m, 0x55d0_c000_0000, 8, false), "constants, read");
        assert!(!covered(&m, 0x7f00_0000_0000, 8, false), "shared region");
        assert!(!covered(&m, 0x7ffd_0010_0000, 8, false), "[vvar]");
        assert!(!covered(&m, 0x55d0_c000_2000, 8, false), "the hole");
        assert!(!covered(&m, 0, 0, false), "address 0");
        assert!(!covered(&m, u64::MAX - 4, 8, false), "wraps");
    }

    #[test]
    fn inside_needs_one_range_to_hold_it_all() {
        let r = [(0x1000, 0x2000), (0x2000, 0x3000)];
        assert!(inside(&r, 0x1000, 0x1000));
        assert!(!inside(&r, 0x1800, 0x1000), "two ranges are not one");
        assert!(!inside(&r, u64::MAX, 2));
        assert!(!inside(&r, 0, 0));
    }
}
