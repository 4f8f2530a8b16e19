//! Direct copies between the processes of one host: Cheetah core's put and get
//! without the target's CPU.
//!
//! Between contexts of a job on one host, whatever the fabric, an initiator
//! copies straight into (`process_vm_writev`) or out of (`process_vm_readv`) the
//! target's memory, one copy, and the operation is complete when the call returns:
//! the local bell rings at once. A remote bell is rung by the target's engine at its
//! next poll (a put of no bytes through the fabric, [`volley_core::cheetah::Cheetah::ring`]), after the
//! data is in place; bells are plain `int`s, which another process cannot add to
//! atomically.
//!
//! # What an initiator may touch
//!
//! The target decides, exactly as for puts its engine serves: by default its
//! private writable mappings, after `cheetah_core_expose` only the ranges exposed
//! ([`ProcessMemory`]). It publishes that decision in an **exposure table** in its
//! own memory, and the table's address and a version word where same-host peers
//! find them: on `shm` in its node's host words in the fabric's region
//! ([`volley_myri::MyriNic::publish_host`]); on `udp` and `eth` in a page of its
//! own, a `memfd` named `volley-expos-<job>-<node>`, which a peer finds (and the
//! target's pid with it) in the maps of this user's processes (never another
//! user's), looking at most four times, 200 ms apart, for peers it has not found
//! (those on other hosts never are). The initiator:
//!
//! 1. reads the table once with `process_vm_readv` and checks it (magic, job, node,
//!    pid): a table that does not match, or a process it may not read, turns
//!    direct copies to that context off (one line on stderr; its operations then
//!    go through the fabric, served at its polls);
//! 2. re-reads it whenever the host version word in the region changed (the target
//!    makes the word odd while it changes the table, and even after);
//! 3. in the default mode checks the range and the remote bell against the
//!    target's `/proc/<pid>/maps`, read again when an address is not found in it;
//!    in exposed mode against the table's ranges;
//! 4. copies. An address the target does not allow is [`Error::BadAddress`] at the
//!    initiator, with nothing of the target touched.
//!
//! Operations to a context keep their order: the first direct copy to it waits
//! until nothing sent through the fabric is in flight, and a context is never
//! switched back from direct copies except when they become impossible.
//!
//! `VOLLEY_CHEETAH_DIRECT=0` turns the path off (every put and get through the
//! fabric); `1`, the default, turns it on.

use std::ffi::c_void;

use volley_core::engine::{Error, Memory};
use volley_core::NodeId;

use crate::cheetah::HostCheetah;
use crate::node::HostDevice;
use crate::procmem::{covered, inside, parse_maps, Mapping, ProcessMemory};
use crate::HostError;

/// Ranges the exposure table holds; a program that exposes more is reached
/// through the fabric.
pub const TABLE_RANGES: usize = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"VLYEXPOS");
const HEAD: usize = 32;
const TABLE_BYTES: usize = HEAD + 16 * TABLE_RANGES;

/// The table's modes.
const MODE_MAPPINGS: u32 = 0;
const MODE_EXPOSED: u32 = 1;
const MODE_TOO_MANY: u32 = 2;

/// What a process publishes about its memory to same-host peers (native byte
/// order; peers read it with `process_vm_readv`).
#[repr(C)]
#[derive(Debug, Clone)]
pub(crate) struct ExposureTable {
    magic: u64,
    job: u64,
    pid: u32,
    node: u32,
    mode: u32,
    count: u32,
    ranges: [[u64; 2]; TABLE_RANGES],
}

impl ExposureTable {
    fn new(job: u64, node: u32) -> Self {
        ExposureTable {
            magic: MAGIC,
            job,
            pid: std::process::id(),
            node,
            mode: MODE_MAPPINGS,
            count: 0,
            ranges: [[0; 2]; TABLE_RANGES],
        }
    }

    pub(crate) fn set_exposed(&mut self, exposed: &[(u64, u64)]) {
        if exposed.len() > TABLE_RANGES {
            self.mode = MODE_TOO_MANY;
            self.count = 0;
            return;
        }
        for (slot, &(s, e)) in self.ranges.iter_mut().zip(exposed) {
            *slot = [s, e];
        }
        self.count = exposed.len() as u32;
        self.mode = if exposed.is_empty() {
            MODE_MAPPINGS
        } else {
            MODE_EXPOSED
        };
    }
}

/// Counters of direct copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectStats {
    /// Puts copied straight into a peer.
    pub puts: u64,
    /// Gets copied straight out of a peer.
    pub gets: u64,
    /// Bytes so copied.
    pub bytes: u64,
    /// Operations refused at this initiator (the target's rule).
    pub refused: u64,
    /// Times a peer's table was read.
    pub table_reads: u64,
    /// Times a peer's `maps` was read.
    pub maps_reads: u64,
}

/// How a peer is reached.
#[derive(Debug, Default)]
enum Peer {
    /// Not tried yet (or its table is not published yet).
    #[default]
    Unknown,
    /// Through the fabric only.
    Off,
    /// By direct copies.
    On(PeerMemory),
}

#[derive(Debug)]
struct PeerMemory {
    pid: i32,
    table: u64,
    version: u64,
    mode: u32,
    ranges: Vec<(u64, u64)>,
    maps: Option<Vec<Mapping>>,
}

/// This process's view of its peers' memory (kept in its [`ProcessMemory`]).
#[derive(Debug, Default)]
pub(crate) struct Direct {
    on: bool,
    job: u64,
    /// Fabric node of context 0.
    first: u32,
    peers: Vec<Peer>,
    noticed: bool,
    refused_by: Option<NodeId>,
    stats: DirectStats,
    /// Off `shm`: this process's published words, and where peers' are.
    page: Option<Page>,
    found: Vec<Option<(i32, u64)>>,
    scans: u32,
    last_scan: Option<std::time::Instant>,
}

/// A page of its own holding a process's `[table address, version]` (off `shm`):
/// a `memfd` mapping whose name peers look for in `/proc/<pid>/maps`.
#[derive(Debug)]
struct Page {
    words: *mut u64,
    _fd: std::os::fd::OwnedFd,
}

// SAFETY: the mapping belongs to this value alone; its words are written through
// atomics by whoever holds the value (the process's memory, under its lock).
unsafe impl Send for Page {}

const PAGE_BYTES: usize = 4096;

fn page_name(job: u64, node: u32) -> String {
    format!("volley-expos-{job:016x}-{node}")
}

impl Page {
    fn new(job: u64, node: u32) -> std::io::Result<Page> {
        use std::os::fd::FromRawFd;
        let name = std::ffi::CString::new(page_name(job, node)).map_err(std::io::Error::other)?;
        // SAFETY: a NUL-terminated name; the descriptor returned is ours to own.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is a memfd of ours; the size is a page.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), PAGE_BYTES as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh shared mapping of the whole memfd, read and write.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Page {
            words: p as *mut u64,
            _fd: fd,
        })
    }

    fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: words 0 and 1 of the mapping, page-aligned and alive as long as
        // `self`; only ever accessed atomically.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.words.add(i.min(1))) }
    }

    fn get(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Acquire;
        (self.word(0).load(Acquire), self.word(1).load(Acquire))
    }

    fn publish(&self, table: u64, version: u64) {
        use std::sync::atomic::Ordering::Release;
        self.word(0).store(table, Release);
        self.word(1).store(version, Release);
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Page::new`, not used after this.
        unsafe { libc::munmap(self.words as *mut c_void, PAGE_BYTES) };
    }
}

/// A peer's published `(table, version)` read from its page at `at`; `None` if
/// the page cannot be read (the process is gone, or not reachable).
fn read_page(pid: i32, at: u64) -> Option<(u64, u64)> {
    let mut w = [0u64; 2];
    vm_copy(pid, false, w.as_mut_ptr() as u64, at, 16).ok()?;
    Some((w[0], w[1]))
}

/// The pages of job `job` in `/proc/*/maps`: `(node, pid, address)`, for this
/// user's processes. A page is kept only if the table it names says the same
/// process and node (a child that inherited the mapping does not).
fn scan_pages(job: u64) -> Vec<(u32, i32, u64)> {
    let prefix = format!("/memfd:{}", page_name(job, 0));
    let prefix = &prefix[..prefix.len() - 1];
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // Only this user's processes: a process of another user could name a page
        // like ours (root may read every process's map), and is never a peer.
        use std::os::unix::fs::MetadataExt;
        if e.metadata().map_or(true, |m| m.uid() != uid) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        use procfs_core::FromBufRead;
        let Ok(maps) = procfs_core::process::MemoryMaps::from_buf_read(text.as_bytes()) else {
            continue;
        };
        for m in maps.0 {
            let name = match &m.pathname {
                procfs_core::process::MMapPath::Path(p) => p.to_string_lossy().into_owned(),
                procfs_core::process::MMapPath::Other(s) => s.clone(),
                _ => continue,
            };
            let Some(at) = name.find(prefix) else {
                continue;
            };
            let rest = &name[at + prefix.len()..];
            let Some(node) = rest.split(' ').next().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let start = m.address.0;
            let ok = read_page(pid, start)
                .is_some_and(|(table, _)| read_table(pid, table, job, node).is_ok());
            if ok {
                out.push((node, pid, start));
            }
        }
    }
    out
}

/// Why a copy between processes failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VmError {
    /// Not permitted (another user, a non-dumpable process, Yama).
    Denied(i32),
    /// The process is gone.
    Gone,
    /// An address was not mapped as needed, on either side.
    Fault,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Copies `len` bytes between `local` here and `remote` in process `pid`
/// (`write`: into it). Partial transfers are continued.
fn vm_copy(pid: i32, write: bool, local: u64, remote: u64, len: usize) -> Result<(), VmError> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            iov_base: (local as usize + done) as *mut c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut c_void,
            iov_len: len - done,
        };
        // SAFETY: one local and one remote iovec; the kernel checks both address
        // ranges (EFAULT) and never touches memory outside them. The local range
        // was checked against this process's mappings by the caller, with the
        // access the copy makes.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
            } else {
                libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
            }
        };
        if n < 0 {
            return match errno() {
                libc::EINTR => continue,
                libc::ESRCH => Err(VmError::Gone),
                e @ (libc::EPERM | libc::EACCES | libc::ENOSYS) => Err(VmError::Denied(e)),
                _ => Err(VmError::Fault),
            };
        }
        if n == 0 {
            return Err(VmError::Fault);
        }
        done += n as usize;
    }
    Ok(())
}

/// Why a peer's exposure table cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TableError {
    /// It could not be read.
    Vm(VmError),
    /// It is not what it should be.
    Invalid(String),
}

/// A peer's exposure table as read: `(mode, ranges)`, or why it cannot be used.
fn read_table(
    pid: i32,
    table: u64,
    job: u64,
    node: u32,
) -> Result<(u32, Vec<(u64, u64)>), TableError> {
    let mut b = [0u8; TABLE_BYTES];
    vm_copy(pid, false, b.as_mut_ptr() as u64, table, TABLE_BYTES).map_err(TableError::Vm)?;
    let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    if u64_at(0) != MAGIC || u64_at(8) != job || u32_at(20) != node {
        return Err(TableError::Invalid(
            "its exposure table is not this job's".into(),
        ));
    }
    if u32_at(16) as i32 != pid {
        return Err(TableError::Invalid(format!(
            "process {pid} is not the one that published it"
        )));
    }
    let (mode, count) = (u32_at(24), u32_at(28) as usize);
    if mode > MODE_TOO_MANY || count > TABLE_RANGES {
        return Err(TableError::Invalid("its exposure table is corrupt".into()));
    }
    let ranges = (0..count)
        .map(|i| (u64_at(HEAD + 16 * i), u64_at(HEAD + 16 * i + 8)))
        .collect();
    Ok((mode, ranges))
}

fn read_maps(pid: i32) -> Option<Vec<Mapping>> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .ok()
        .map(|t| parse_maps(&t))
}

impl Direct {
    fn notice(&mut self, context: NodeId, why: &str) {
        if !self.noticed {
            self.noticed = true;
            eprintln!(
                "volley: cheetah: no direct copies to context {context} ({why}); its puts and gets go through the fabric, served at its polls"
            );
        }
    }

    fn turn_off(&mut self, context: NodeId, why: &str) {
        self.notice(context, why);
        if let Some(p) = self.peers.get_mut(context as usize) {
            *p = Peer::Off;
        }
    }

    /// The peer's memory if direct copies to it are on and its table is current.
    /// `published` reads its `(table, version)` host words, `pid` is its process;
    /// `idle` says nothing of ours to any peer is in flight through the fabric.
    ///
    /// The version is a sequence lock: a table read is kept only if the version
    /// was even before it and unchanged after it. A peer copied to before waits
    /// (at most a second) for a change to end rather than go through the fabric,
    /// so that nothing of its overtakes what went before.
    fn reach(
        &mut self,
        context: NodeId,
        pid: u32,
        published: &dyn Fn() -> (u64, u64),
        idle: bool,
    ) -> Option<&mut PeerMemory> {
        let mut host = published();
        let (job, node) = (self.job, self.first + context as u32);
        let i = context as usize;
        let stale = match self.peers.get(i)? {
            Peer::Off => return None,
            // Not published yet, changing, or earlier operations to keep behind.
            Peer::Unknown => {
                if host.0 == 0 || host.1 % 2 == 1 || pid == 0 || !idle {
                    return None;
                }
                true
            }
            Peer::On(p) => p.version != host.1 || p.table != host.0,
        };
        if stale {
            let was_on = matches!(self.peers[i], Peer::On(_));
            let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
            let read = loop {
                if host.1.is_multiple_of(2) {
                    self.stats.table_reads += 1;
                    let r = read_table(pid as i32, host.0, job, node);
                    if published() == host {
                        break r;
                    }
                }
                if !was_on {
                    return None;
                }
                if std::time::Instant::now() >= until {
                    // Changing for that long: stopped or dead there.
                    self.turn_off(context, "its exposure table stays mid-change");
                    return None;
                }
                std::thread::yield_now();
                host = published();
            };
            let (table, version) = host;
            match read {
                Ok((mode, ranges)) => {
                    let maps = match &mut self.peers[i] {
                        Peer::On(p) if p.pid == pid as i32 => p.maps.take(),
                        _ => None,
                    };
                    self.peers[i] = Peer::On(PeerMemory {
                        pid: pid as i32,
                        table,
                        version,
                        mode,
                        ranges,
                        maps,
                    });
                }
                Err(TableError::Vm(VmError::Denied(e))) => {
                    let why = format!("process_vm_readv: {}", std::io::Error::from_raw_os_error(e));
                    self.turn_off(context, &why);
                    return None;
                }
                // Gone: the fabric reports the death. Fault: not mapped (yet).
                // A context copied to before goes through the fabric from now on,
                // so that nothing overtakes what does.
                Err(TableError::Vm(_)) => {
                    if was_on {
                        self.peers[i] = Peer::Off;
                    }
                    return None;
                }
                Err(TableError::Invalid(why)) => {
                    self.turn_off(context, &why);
                    return None;
                }
            }
        }
        match &mut self.peers[i] {
            Peer::On(p) if p.mode != MODE_TOO_MANY => Some(p),
            _ => None,
        }
    }

    /// Off `shm`: where context `context` publishes, `(pid, page address)`, looked
    /// for in `/proc` (at most four times, 200 ms apart, while some are not found).
    fn locate(&mut self, context: NodeId) -> Option<(i32, u64)> {
        let i = context as usize;
        if let Some(f) = self.found.get(i).copied().flatten() {
            return Some(f);
        }
        let now = std::time::Instant::now();
        let due = self
            .last_scan
            .is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_millis(200));
        if self.page.is_none() || self.scans >= 4 || !due {
            return None;
        }
        self.scans += 1;
        self.last_scan = Some(now);
        let me = std::process::id() as i32;
        for (node, pid, at) in scan_pages(self.job) {
            let Some(c) = node.checked_sub(self.first).map(|c| c as usize) else {
                continue;
            };
            if pid != me && c < self.found.len() && self.found[c].is_none() {
                self.found[c] = Some((pid, at));
            }
        }
        self.found.get(i).copied().flatten()
    }

    /// Whether the peer allows `[addr, addr + len)` (and the bell, if any).
    fn allows(&mut self, context: NodeId, addr: u64, len: u64, bell: u64) -> Option<bool> {
        let Peer::On(p) = self.peers.get_mut(context as usize)? else {
            return None;
        };
        if p.mode == MODE_EXPOSED {
            return Some(inside(&p.ranges, addr, len) && (bell == 0 || inside(&p.ranges, bell, 4)));
        }
        let ok = |maps: &[Mapping]| {
            covered(maps, addr, len, true) && (bell == 0 || covered(maps, bell, 4, true))
        };
        if p.maps.as_deref().is_some_and(ok) {
            return Some(true);
        }
        // Mapped since the list was read?
        self.stats.maps_reads += 1;
        p.maps = read_maps(p.pid);
        match p.maps.as_deref() {
            Some(m) => Some(ok(m)),
            None => {
                self.turn_off(context, "its memory map cannot be read");
                None
            }
        }
    }
}

/// Whether direct copies are wanted (`VOLLEY_CHEETAH_DIRECT`, on by default).
pub fn wanted() -> Result<bool, HostError> {
    match std::env::var("VOLLEY_CHEETAH_DIRECT") {
        Err(_) => Ok(true),
        Ok(v) => match v.trim() {
            "1" | "" => Ok(true),
            "0" => Ok(false),
            _ => Err(HostError::Setting(format!(
                "VOLLEY_CHEETAH_DIRECT={v:?}: expected 0 (off) or 1 (on)"
            ))),
        },
    }
}

/// Turns direct copies on for context `c` of job `job` whose context 0 is fabric
/// node `first`: publishes its exposure table where same-host peers find it.
/// Off (false) where the fabric is not `shm` or `VOLLEY_CHEETAH_DIRECT=0`.
pub fn enable(c: &mut HostCheetah<ProcessMemory>, job: u64, first: u32, on: bool) -> bool {
    let n = c.ncontexts() as usize;
    let node = first + c.mycontext() as u32;
    if !on {
        return false;
    }
    let (dev, mem) = c.device_and_memory_mut();
    let page = match dev {
        HostDevice::Shm(_) => None,
        _ => match Page::new(job, node) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("volley: cheetah: no direct copies (memfd: {e}); puts and gets go through the fabric");
                return false;
            }
        },
    };
    let mut t = Box::new(ExposureTable::new(job, node));
    t.set_exposed(mem.exposed());
    let addr = &*t as *const ExposureTable as u64;
    mem.table = Some(t);
    let d = &mut mem.direct;
    d.on = true;
    d.job = job;
    d.first = first;
    d.peers = (0..n).map(|_| Peer::Unknown).collect();
    d.found = vec![None; n];
    match (dev, page) {
        (HostDevice::Shm(shm), _) => shm.nic().publish_host(addr, 2),
        (_, Some(p)) => {
            p.publish(addr, 2);
            d.page = Some(p);
        }
        _ => {}
    }
    true
}

/// `cheetah_core_expose` with direct copies: exposes `[addr, addr + len)` and
/// tells same-host peers that the table changed (see [`ProcessMemory::expose`]).
pub fn expose(c: &mut HostCheetah<ProcessMemory>, addr: u64, len: u64) -> bool {
    let (dev, mem) = c.device_and_memory_mut();
    if !mem.direct.on {
        return mem.expose(addr, len);
    }
    if let HostDevice::Shm(s) = dev {
        let nic = s.nic();
        let (table, version) = nic.host(nic.node());
        nic.set_host_version(version | 1);
        let ok = mem.expose(addr, len);
        nic.publish_host(table, (version | 1) + 1);
        return ok;
    }
    let Some((table, version)) = mem.direct.page.as_ref().map(Page::get) else {
        return mem.expose(addr, len);
    };
    if let Some(p) = &mem.direct.page {
        p.publish(table, version | 1);
    }
    let ok = mem.expose(addr, len);
    if let Some(p) = &mem.direct.page {
        p.publish(table, (version | 1) + 1);
    }
    ok
}

/// Counters of this process's direct copies.
pub fn stats(c: &HostCheetah<ProcessMemory>) -> DirectStats {
    c.memory().direct.stats
}

/// The context whose rule refused this process's last direct copy, if any.
pub fn refused_by(c: &HostCheetah<ProcessMemory>) -> Option<NodeId> {
    c.memory().direct.refused_by
}

/// Whether direct copies are on in this process.
pub fn is_on(c: &HostCheetah<ProcessMemory>) -> bool {
    c.memory().direct.on
}

/// `cheetah_core_put`: a direct copy where the target can be reached so, else
/// through the fabric.
pub fn put(
    c: &mut HostCheetah<ProcessMemory>,
    context: NodeId,
    remote: u64,
    local: u64,
    len: usize,
    local_bell: u64,
    remote_bell: u64,
) -> Result<(), Error> {
    transfer(
        c,
        true,
        context,
        remote,
        local,
        len,
        local_bell,
        remote_bell,
    )
}

/// `cheetah_core_get`: a direct copy where the target can be reached so, else
/// through the fabric.
pub fn get(
    c: &mut HostCheetah<ProcessMemory>,
    context: NodeId,
    remote: u64,
    local: u64,
    len: usize,
    local_bell: u64,
    remote_bell: u64,
) -> Result<(), Error> {
    transfer(
        c,
        false,
        context,
        remote,
        local,
        len,
        local_bell,
        remote_bell,
    )
}

/// A put (`put`) or get: a direct copy where the target can be reached so, else
/// through the fabric.
#[allow(clippy::too_many_arguments)]
pub fn transfer(
    c: &mut HostCheetah<ProcessMemory>,
    put: bool,
    context: NodeId,
    remote: u64,
    local: u64,
    len: usize,
    local_bell: u64,
    remote_bell: u64,
) -> Result<(), Error> {
    if try_direct(c, put, context, remote, local, len, local_bell, remote_bell)? {
        return Ok(());
    }
    if put {
        c.put(context, remote, local, len, local_bell, remote_bell)
    } else {
        c.get(context, remote, local, len, local_bell, remote_bell)
    }
}

/// Does the operation by a direct copy if it can: `Ok(true)` when done,
/// `Ok(false)` when it must go through the fabric.
#[allow(clippy::too_many_arguments)]
fn try_direct(
    c: &mut HostCheetah<ProcessMemory>,
    put: bool,
    context: NodeId,
    remote: u64,
    local: u64,
    len: usize,
    local_bell: u64,
    remote_bell: u64,
) -> Result<bool, Error> {
    if len == 0 || context == c.mycontext() || context >= c.ncontexts() {
        return Ok(false);
    }
    if !c.memory().direct.on {
        return Ok(false);
    }
    c.memory_mut().direct.refused_by = None;
    c.check_failure()?;
    let idle = c.engine().rma_pending() == 0;
    let dead = c.is_dead(context);
    let (dev, mem) = c.device_and_memory_mut();
    let node = mem.direct.first + context as u32;
    // A context that left or was found dead gets nothing more by copy: its pid
    // may name another process one day. The fabric reports the failure.
    let reached = match dev {
        HostDevice::Shm(shm) => {
            let nic = shm.nic();
            if nic.state(node) != volley_myri::NodeState::Alive {
                return Ok(false);
            }
            let pid = nic.pid(node);
            mem.direct
                .reach(context, pid, &|| nic.host(node), idle)
                .is_some()
        }
        _ => {
            let Some((pid, at)) = mem.direct.locate(context).filter(|_| !dead) else {
                return Ok(false);
            };
            let Some(first) = read_page(pid, at) else {
                // Gone, or no longer readable: the fabric from now on.
                if let Some(p) = mem.direct.peers.get_mut(context as usize) {
                    *p = Peer::Off;
                }
                return Ok(false);
            };
            // The words just read serve `reach`'s first look: one read per
            // operation, not two (each is a system call).
            let first = std::cell::Cell::new(Some(first));
            let published = || {
                first
                    .take()
                    .or_else(|| read_page(pid, at))
                    .unwrap_or((0, 1))
            };
            mem.direct
                .reach(context, pid as u32, &published, idle)
                .is_some()
        }
    };
    if !reached {
        return Ok(false);
    }
    // This side first, with the access the copy makes here.
    if !mem.allowed(local, len as u64, !put, false) {
        return Err(Error::BadAddress);
    }
    let d = &mut mem.direct;
    let refuse = |d: &mut Direct| {
        d.stats.refused += 1;
        d.refused_by = Some(context);
        Err(Error::BadAddress)
    };
    match d.allows(context, remote, len as u64, remote_bell) {
        None => return Ok(false),
        Some(false) => return refuse(d),
        Some(true) => {}
    }
    let Some(Peer::On(p)) = d.peers.get(context as usize) else {
        return Ok(false);
    };
    match vm_copy(p.pid, put, local, remote, len) {
        Ok(()) => {}
        Err(VmError::Gone) => return Ok(false),
        Err(VmError::Denied(e)) => {
            let why = format!(
                "process_vm_{}v: {}",
                if put { "write" } else { "read" },
                std::io::Error::from_raw_os_error(e)
            );
            d.turn_off(context, &why);
            return Ok(false);
        }
        Err(VmError::Fault) => {
            // Unmapped since its map was read: read it again for the next one.
            if let Some(Peer::On(p)) = d.peers.get_mut(context as usize) {
                p.maps = None;
            }
            return refuse(d);
        }
    }
    if put {
        d.stats.puts += 1;
    } else {
        d.stats.gets += 1;
    }
    d.stats.bytes += len as u64;
    mem.ring(local_bell);
    c.ring(context, remote_bell)?;
    Ok(true)
}

/// The context for `boot` on `fabric` serving this process's own memory, with
/// direct copies to same-host peers where the fabric and
/// `VOLLEY_CHEETAH_DIRECT` allow.
pub fn cheetah(
    boot: &crate::bootstrap::Boot,
    fabric: crate::Fabric,
) -> Result<HostCheetah<ProcessMemory>, HostError> {
    let on = wanted()?;
    let mut c = crate::cheetah::cheetah(boot, fabric, ProcessMemory::default())?;
    let first = (boot.rank as u32).saturating_sub(c.mycontext() as u32);
    enable(&mut c, boot.job, first, on);
    Ok(c)
}

// The reader decodes the table at these offsets.
const _: () = assert!(std::mem::size_of::<ExposureTable>() == TABLE_BYTES);

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> i32 {
        std::process::id() as i32
    }

    #[test]
    fn copies_between_processes_and_their_errors() {
        let src = *b"sixteen bytes...";
        let mut dst = [0u8; 16];
        let (s, d) = (src.as_ptr() as u64, dst.as_mut_ptr() as u64);
        // This process is a process like any other to the kernel.
        assert_eq!(vm_copy(me(), true, s, d, 16), Ok(()));
        assert_eq!(dst, src);
        dst = [0; 16];
        assert_eq!(vm_copy(me(), false, d, s, 16), Ok(()));
        assert_eq!(dst, src);
        assert_eq!(
            vm_copy(me(), true, s, 16, 16),
            Err(VmError::Fault),
            "unmapped"
        );
        let code = copies_between_processes_and_their_errors as *const () as u64;
        assert_eq!(vm_copy(me(), true, s, code, 1), Err(VmError::Fault), "code");
        assert_eq!(
            vm_copy(0x3fff_fff0, false, d, s, 16),
            Err(VmError::Gone),
            "no such process"
        );
    }

    #[test]
    fn a_table_is_used_only_if_it_is_this_jobs_and_this_nodes() {
        let mut t = Box::new(ExposureTable::new(0x1234, 3));
        let at = &*t as *const ExposureTable as u64;
        assert_eq!(read_table(me(), at, 0x1234, 3), Ok((MODE_MAPPINGS, vec![])));
        t.set_exposed(&[(0x1000, 0x2000), (0x5000, 0x5004)]);
        assert_eq!(
            read_table(me(), at, 0x1234, 3),
            Ok((MODE_EXPOSED, vec![(0x1000, 0x2000), (0x5000, 0x5004)]))
        );
        let invalid = |r| matches!(r, Err(TableError::Invalid(_)));
        assert!(invalid(read_table(me(), at, 0x9999, 3)), "another job");
        assert!(invalid(read_table(me(), at, 0x1234, 4)), "another node");
        t.pid ^= 1;
        assert!(invalid(read_table(me(), at, 0x1234, 3)), "another process");
        t.pid ^= 1;
        t.count = TABLE_RANGES as u32 + 1;
        assert!(invalid(read_table(me(), at, 0x1234, 3)), "corrupt");
        assert_eq!(
            read_table(me(), 16, 0x1234, 3),
            Err(TableError::Vm(VmError::Fault))
        );
        let many: Vec<(u64, u64)> = (0..TABLE_RANGES as u64 + 1)
            .map(|i| (i << 20, (i << 20) + 8))
            .collect();
        t.set_exposed(&many);
        assert_eq!(read_table(me(), at, 0x1234, 3), Ok((MODE_TOO_MANY, vec![])));
    }

    /// Off `shm`, a process's page is found in `/proc/*/maps` by its job and node,
    /// with its pid, only when the table it names is that process's and node's; the
    /// words read back as published, and a page dropped is gone.
    #[test]
    fn pages_are_found_by_job_and_node_in_proc() {
        let job = 0x5eed_0000_0000_0000 ^ u64::from(std::process::id());
        let t = Box::new(ExposureTable::new(job, 7));
        let at = &*t as *const ExposureTable as u64;
        let page = Page::new(job, 7).unwrap();
        // Not published yet: the table address is 0, so the page is not kept.
        assert!(scan_pages(job).is_empty());
        page.publish(at, 2);
        let found = scan_pages(job);
        assert_eq!(found.len(), 1, "{found:?}");
        let (node, pid, addr) = found[0];
        assert_eq!((node, pid), (7, me()));
        assert_eq!(read_page(pid, addr), Some((at, 2)));
        page.publish(at, 3);
        assert_eq!(
            read_page(pid, addr),
            Some((at, 3)),
            "the version as published"
        );
        // A page whose table names another node, or of another job, is not kept.
        let liar = Page::new(job, 8).unwrap();
        liar.publish(at, 2);
        assert_eq!(
            scan_pages(job).len(),
            1,
            "node 8's page names node 7's table"
        );
        assert!(scan_pages(job ^ 1).is_empty());
        drop(page);
        drop(liar);
        assert!(scan_pages(job).is_empty(), "unmapped with its owner");
    }

    #[test]
    fn the_peer_rule_is_the_tables() {
        let buf = vec![0u8; 4096];
        let b = buf.as_ptr() as u64;
        let mut t = Box::new(ExposureTable::new(7, 1));
        let at = &*t as *const ExposureTable as u64;
        let mut d = Direct {
            on: true,
            job: 7,
            first: 0,
            peers: vec![Peer::Unknown, Peer::Unknown],
            ..Direct::default()
        };
        let pid = std::process::id();
        // Not published, or operations still in flight through the fabric: later.
        assert!(d.reach(1, pid, &|| (0, 0), true).is_none());
        assert!(d.reach(1, pid, &|| (at, 2), false).is_none());
        assert!(matches!(d.peers[1], Peer::Unknown));
        assert!(d.reach(1, pid, &|| (at, 2), true).is_some());
        // Default mode: private writable mappings.
        assert_eq!(d.allows(1, b, 4096, 0), Some(true));
        assert_eq!(d.allows(1, b, 4096, b + 8), Some(true));
        let code = the_peer_rule_is_the_tables as *const () as u64;
        assert_eq!(d.allows(1, code, 8, 0), Some(false), "code");
        assert_eq!(d.allows(1, b, 8, code), Some(false), "a bell in code");
        assert_eq!(d.allows(1, 16, 8, 0), Some(false), "unmapped");
        // The program exposes a range; peers see the new version and the new rule.
        t.set_exposed(&[(b, b + 64)]);
        assert!(d.reach(1, pid, &|| (at, 4), true).is_some());
        assert_eq!(d.allows(1, b, 64, b + 60), Some(true));
        assert_eq!(d.allows(1, b + 1, 64, 0), Some(false), "past the range");
        assert_eq!(d.allows(1, b, 8, b + 64), Some(false), "bell outside");
        // A table that stays mid-change turns the peer off for good.
        assert!(d.reach(1, pid, &|| (at, 5), true).is_none());
        assert!(matches!(d.peers[1], Peer::Off));
        assert!(d.reach(1, pid, &|| (at, 6), true).is_none());
        assert!(d.noticed);
        assert_eq!(d.stats.table_reads, 2);
    }

    #[test]
    fn a_table_read_while_it_changes_is_not_kept() {
        let t = Box::new(ExposureTable::new(7, 1));
        let at = &*t as *const ExposureTable as u64;
        let mut d = Direct {
            on: true,
            job: 7,
            peers: vec![Peer::Unknown, Peer::Unknown],
            ..Direct::default()
        };
        let pid = std::process::id();
        // The version moves during the read: not kept, and a context never copied
        // to goes through the fabric this time.
        let calls = std::cell::Cell::new(0);
        let moving = || {
            calls.set(calls.get() + 1);
            (at, if calls.get() == 1 { 2 } else { 4 })
        };
        assert!(d.reach(1, pid, &moving, true).is_none());
        assert!(matches!(d.peers[1], Peer::Unknown));
        assert!(d.reach(1, pid, &|| (at, 4), true).is_some());
        // A context copied to before reads again until the version holds.
        calls.set(0);
        let moving = || {
            calls.set(calls.get() + 1);
            (at, if calls.get() == 1 { 6 } else { 8 })
        };
        assert!(d.reach(1, pid, &moving, true).is_some());
        assert!(matches!(&d.peers[1], Peer::On(p) if p.version == 8));
        assert_eq!(d.stats.table_reads, 4);
    }
}
