//! The `shm` fabric: the Myrinet-like NIC model on a `/dev/shm` mapping.
//!
//! The region lives in a per-job directory, `/dev/shm/volley-<uid>-<tag>`, where
//! `<tag>` is derived from the job secret (so other users cannot predict it) or, with
//! no secret, is the job id. Nothing there is trusted by name: the directory is
//! created by rank 0 (`mkdir` must succeed) or, if it exists, must be a real directory
//! owned by this user with mode 0700, checked on the opened descriptor (not the path,
//! no symbolic links followed); every file is created relative to that descriptor
//! with `O_CREAT|O_EXCL|O_NOFOLLOW` under a random name, its space reserved up front
//! (`posix_fallocate`: a `/dev/shm` too small is one clear error, not a `SIGBUS`
//! later), initialised and only then renamed into place as `region`. The others wait
//! for it, check it the same way, map it and attach once its header carries this
//! job's generation. Once every rank has joined, rank 0 removes the file and the
//! directory: the mapping lives on and nothing is left behind.
//!
//! Rank 0 holds a lock on the directory until then: a directory nobody holds a lock
//! on is left over from a job whose rank 0 died during start-up, and the next job of
//! this user removes it (the launcher also removes its job's directory at the end).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use memmap2::MmapMut;
use volley_core::phy::{
    Board, Capabilities, Device, Liveness, NicAtomics, NicBarrier, SendPool, TxToken,
};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;
use volley_myri::{Geometry, MyriError, MyriNic, MyriRx, MyriTx, NicConfig, Region};

use crate::bootstrap::Boot;
use crate::secret::Secret;
use crate::stream_copy::{streaming_copy, timed_copy, CopyMode, CopyPolicy, STREAM_FROM};
use crate::HostError;

/// Shape and timing of the shared region.
#[derive(Debug, Clone, Copy)]
pub struct ShmOptions {
    /// Slots per ring (0: chosen from the job size).
    pub slots: u32,
    /// Bytes per slot, frames up to 64 less (0: chosen from the job size).
    pub slot_size: u32,
    /// How long to wait for the region and for every rank to join.
    pub startup_timeout: StdDuration,
    /// A peer whose heartbeat stands still this long is dead (a process that is
    /// gone is noticed at once through `/proc`; a stopped one is alive).
    pub peer_timeout: volley_core::time::Duration,
    /// How long frames are copied into a peer's ring (`VOLLEY_SHM_COPY`).
    pub copy: CopyMode,
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            slots: 0,
            slot_size: 0,
            startup_timeout: StdDuration::from_secs(30),
            peer_timeout: volley_core::time::Duration::from_secs(30),
            copy: CopyMode::Auto,
        }
    }
}

/// The most ranks a job on this fabric holds (the NIC model's node table).
pub const MAX_RANKS: usize = volley_myri::MAX_NODES;

/// Where job directories are made: `VOLLEY_SHM_DIR`, else `/dev/shm`.
pub fn shm_base() -> PathBuf {
    std::env::var_os("VOLLEY_SHM_DIR").map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The name of a job's directory (`suffix` tells apart other private directories of
/// the same job, such as the benchmark's).
pub fn job_dir_name(job: u64, secret: Option<&Secret>, suffix: &str) -> String {
    let tag = secret.map_or_else(|| format!("{job:016x}"), |s| s.dir_tag(job));
    format!("volley-{}-{tag}{suffix}", euid())
}

/// The path of a job's directory (for messages and clean-up).
pub fn job_dir(job: u64, secret: Option<&Secret>) -> PathBuf {
    shm_base().join(job_dir_name(job, secret, ""))
}

/// Removes a job's directory if it is still there and really ours (launcher clean-up).
pub fn remove_job_dir(job: u64, secret: Option<&Secret>) {
    let path = job_dir(job, secret);
    if let Ok(m) = std::fs::symlink_metadata(&path) {
        if m.is_dir() && m.uid() == euid() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

fn cstr(name: &str) -> CString {
    CString::new(name).unwrap_or_default()
}

fn last_os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A directory of this job, opened and checked: a real directory (not a symbolic
/// link), owned by this user, no permissions for anyone else.
#[derive(Debug)]
pub struct PrivateDir {
    fd: OwnedFd,
    base: OwnedFd,
    name: String,
    path: PathBuf,
}

impl PrivateDir {
    fn open_base() -> Result<(OwnedFd, PathBuf), HostError> {
        let base = shm_base();
        let c = cstr(&base.to_string_lossy());
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(HostError::Fabric(format!(
                "{}: {} (set VOLLEY_SHM_DIR to a tmpfs directory)",
                base.display(),
                last_os_error()
            )));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok((unsafe { OwnedFd::from_raw_fd(fd) }, base))
    }

    /// Creates the directory (or takes over a leftover of our own), for rank 0.
    pub fn create(name: &str) -> Result<PrivateDir, HostError> {
        let (base, base_path) = Self::open_base()?;
        let c = cstr(name);
        // SAFETY: valid descriptor and NUL-terminated name.
        if unsafe { libc::mkdirat(base.as_raw_fd(), c.as_ptr(), 0o700) } < 0 {
            let e = last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(HostError::Fabric(format!(
                    "cannot create {}: {e}",
                    base_path.join(name).display()
                )));
            }
        }
        Self::check(base, base_path, name)
    }

    /// Opens an existing directory, for the other ranks; `Ok(None)` if not there yet.
    pub fn open(name: &str) -> Result<Option<PrivateDir>, HostError> {
        let (base, base_path) = Self::open_base()?;
        match Self::check(base, base_path, name) {
            Err(e) if e.to_string().ends_with(NOT_THERE) => Ok(None),
            r => r.map(Some),
        }
    }

    fn check(base: OwnedFd, base_path: PathBuf, name: &str) -> Result<PrivateDir, HostError> {
        let path = base_path.join(name);
        let c = cstr(name);
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid descriptor and NUL-terminated name.
        let fd = unsafe { libc::openat(base.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            let e = last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::ENOENT) => NOT_THERE.to_owned(),
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                    "is a symbolic link or not a directory: refused (another user may have planted it)".to_owned()
                }
                _ => e.to_string(),
            };
            return Err(HostError::Fabric(format!("{}: {why}", path.display())));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Checked on the descriptor: what we opened, not whatever the path names now.
        let m = File::from(
            fd.try_clone()
                .map_err(|e| HostError::Fabric(e.to_string()))?,
        )
        .metadata()
        .map_err(|e| HostError::Fabric(format!("{}: {e}", path.display())))?;
        if m.uid() != euid() {
            return Err(HostError::Fabric(format!(
                "{} belongs to uid {}, not to this user ({}): refused (another user may be interfering; use another job id)",
                path.display(),
                m.uid(),
                euid()
            )));
        }
        if m.mode() & 0o077 != 0 {
            return Err(HostError::Fabric(format!(
                "{} has mode {:o}, not 700: refused",
                path.display(),
                m.mode() & 0o777
            )));
        }
        Ok(PrivateDir {
            fd,
            base,
            name: name.to_owned(),
            path,
        })
    }

    /// Takes the directory's lock without waiting: false if a live process holds it.
    pub fn try_lock(&self) -> bool {
        // SAFETY: a valid descriptor; flock has no memory effects.
        unsafe { libc::flock(self.fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    }

    /// Creates `name` inside: `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600, `len` bytes
    /// reserved.
    pub fn create_file(&self, name: &str, len: u64) -> Result<File, HostError> {
        let c = cstr(name);
        let flags =
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid descriptor and NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(HostError::Fabric(format!(
                "cannot create {}: {}",
                self.path.join(name).display(),
                last_os_error()
            )));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: a valid descriptor of a regular file we own.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if rc != 0 {
            self.remove(name);
            let e = std::io::Error::from_raw_os_error(rc);
            return Err(HostError::Fabric(format!(
                "the shm region needs {} MiB and {} cannot hold it ({e}): give the job more shared memory (docker run --shm-size=1g; mount -o remount,size=4g /dev/shm) or smaller rings (VOLLEY_SHM_SLOTS, VOLLEY_SHM_SLOT_SIZE)",
                len.div_ceil(1 << 20),
                shm_base().display()
            )));
        }
        Ok(file)
    }

    /// Opens `name` inside, if it is there and a regular file of ours with mode 0600.
    pub fn open_file(&self, name: &str) -> Result<Option<File>, HostError> {
        let c = cstr(name);
        let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid descriptor and NUL-terminated name.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            let e = last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Ok(None);
            }
            return Err(HostError::Fabric(format!(
                "{}: {e}",
                self.path.join(name).display()
            )));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let m = file
            .metadata()
            .map_err(|e| HostError::Fabric(e.to_string()))?;
        if !m.file_type().is_file() || m.uid() != euid() || m.mode() & 0o077 != 0 {
            return Err(HostError::Fabric(format!(
                "{}: not a private regular file of this user: refused",
                self.path.join(name).display()
            )));
        }
        Ok(Some(file))
    }

    /// Renames `from` to `to` inside.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), HostError> {
        let (a, b) = (cstr(from), cstr(to));
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid descriptor and NUL-terminated names.
        if unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) } < 0 {
            return Err(HostError::Fabric(format!(
                "cannot publish the shm region: {}",
                last_os_error()
            )));
        }
        Ok(())
    }

    /// Removes `name` inside (best effort).
    pub fn remove(&self, name: &str) {
        let c = cstr(name);
        // SAFETY: valid descriptor and NUL-terminated name.
        unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
    }

    /// Removes everything inside (leftovers of an earlier start of this job).
    pub fn clear(&self) {
        if let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd())) {
            for e in entries.flatten() {
                self.remove(&e.file_name().to_string_lossy());
            }
        }
    }

    /// Removes the directory and what is in it.
    pub fn destroy(self) {
        self.clear();
        let c = cstr(&self.name);
        // SAFETY: valid descriptor and NUL-terminated name.
        unsafe { libc::unlinkat(self.base.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
    }

    /// Where it is (for messages).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

const NOT_THERE: &str = "not there yet";

/// A random file name, so nobody can plant anything under it beforehand.
fn random_name(prefix: &str) -> Result<String, HostError> {
    Ok(format!("{prefix}.{}", &Secret::generate()?.to_hex()[..16]))
}

/// Removes this user's job directories that nobody holds a lock on and that have
/// not changed for a while: left over by a rank 0 killed during start-up.
pub fn remove_stale_dirs() {
    let prefix = format!("volley-{}-", euid());
    let Ok(entries) = std::fs::read_dir(shm_base()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        let old = m
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > StdDuration::from_secs(10));
        if !m.is_dir() || m.uid() != euid() || !old {
            continue;
        }
        if let Ok(Some(d)) = PrivateDir::open(&name) {
            if d.try_lock() {
                d.destroy();
            }
        }
    }
}

/// One rank's NIC on the job's shared region.
#[derive(Debug)]
pub struct ShmDevice {
    /// The beacon helper ([`crate::beacon`]), with its own mapping: stopped first.
    beacon: Option<crate::beacon::Helper>,
    /// The wake-up descriptor and its interrupt helper ([`crate::wakeup`]), made
    /// at the first call for it; stopped before the mapping goes.
    wakeup: Option<crate::wakeup::Wakeup>,
    // Declared before the mapping: dropped (and marked exited) while it is still mapped.
    nic: MyriNic,
    _map: MmapMut,
    /// When the processes of our board's readers were last looked up in /proc
    /// (for a full board, or a barrier waiting for them to read it).
    readers_checked: Option<Instant>,
    /// How long frames are copied into each peer's ring ([`crate::stream_copy`]).
    copy_mode: CopyMode,
    copy: Vec<CopyPolicy>,
    /// Per peer and slot of its ring, how many bytes from the slot's start this
    /// process has written: a copy into pages written before is timed for the
    /// policy, one into fresh pages is not (their first-touch faults would read as
    /// slow copies).
    written: Vec<u32>,
    /// The copy of long frames into our broadcast board, and per board slot how
    /// many bytes this process has written (as `written`).
    board_copy: CopyPolicy,
    board_written: [u32; volley_myri::BOARD_SLOTS as usize],
    stats: ShmStats,
}

/// Counters of the `shm` device's own (the NIC model keeps the rest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Long frames copied through the cache.
    pub cached_frames: u64,
    /// Long frames copied with non-temporal stores.
    pub streamed_frames: u64,
    /// Times a peer's copies (or the board's) turned to non-temporal stores.
    pub turned_streaming: u64,
    /// Frames written into our broadcast board by the device's copy (those with
    /// [`STREAM_FROM`] payload bytes or more; their long parts are also counted
    /// above, as copied through the cache or with non-temporal stores).
    pub board_frames: u64,
}

/// Whether a copy of `len` bytes goes into pages this process wrote before, of
/// which `written` bytes from the slot's start are (then counting these): only such
/// copies are timed for the policy, since first-touch faults would read as slow.
fn warm(written: &mut u32, len: usize) -> bool {
    let warm = len <= *written as usize;
    *written = (*written).max(len as u32);
    warm
}

/// Copies `parts` laid end to end into `slot`, those of [`STREAM_FROM`] bytes or more
/// as `policy` says (and teaching it by their speed); a frame longer than the slot is
/// cut, as a token cuts it (never: the engine keeps frames to the MTU).
fn copy_parts(
    slot: &mut [u8],
    parts: &[&[u8]],
    policy: &mut CopyPolicy,
    mode: CopyMode,
    warm: bool,
    stats: &mut ShmStats,
) {
    let streams = policy.streams(mode);
    let mut rest = slot;
    for p in parts {
        let n = p.len().min(rest.len());
        let (d, tail) = rest.split_at_mut(n);
        if n < STREAM_FROM {
            d.copy_from_slice(&p[..n]);
        } else if streams {
            streaming_copy(d, &p[..n]);
            policy.streamed();
            stats.streamed_frames += 1;
        } else if warm {
            let ns = timed_copy(d, &p[..n]);
            stats.cached_frames += 1;
            if policy.copied(n, ns) {
                stats.turned_streaming += 1;
            }
        } else {
            d.copy_from_slice(&p[..n]);
            stats.cached_frames += 1;
        }
        rest = tail;
    }
}

fn map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the file is ours (mode 0600 in a 0700 directory, checked on the
    // descriptor); other processes of the job change it only through the ring
    // protocol, which `Region` accounts for.
    unsafe { MmapMut::map_mut(file) }
}

/// The beacon helper of node `me` of the region in `file`, through a mapping of
/// its own; `None` (one line on stderr) if it cannot be made.
fn beacon(file: &File, me: u32) -> Option<crate::beacon::Helper> {
    let made = map(file).map_err(|e| e.to_string()).and_then(|mut m| {
        let r = region(&mut m).map_err(|e| e.to_string())?;
        let b = volley_myri::Beacon::new(r, me).map_err(|e| e.to_string())?;
        Ok((b, m))
    });
    match made {
        Ok((beacon, m)) => {
            crate::beacon::Helper::spawn(crate::beacon::Sink::Word { beacon, _map: m })
        }
        Err(e) => {
            crate::beacon::without(&e);
            None
        }
    }
}

fn region(map: &mut MmapMut) -> Result<Region, HostError> {
    // SAFETY: the mapping outlives the region (both are kept in `ShmDevice`, the NIC
    // dropped first) and is used by this process only through the region.
    unsafe { Region::new(map.as_mut_ptr(), map.len()) }
        .map_err(|e| HostError::Fabric(e.to_string()))
}

/// What the default slot sizes have beyond a power of two. At a power-of-two stride
/// the first line of every slot (its sequence word, and the whole of a small frame)
/// falls in the same sets of each core's caches, where a ring's slots and the ring
/// back evict one another; one line more spreads them over the sets (16-core
/// machine, `cross_core`, medians of six runs: ring alone 239 -> 232 ns one-way,
/// GAMMA `send_flowctl` 392 -> 370).
const SLOT_PAD: u32 = 64;

impl ShmDevice {
    /// The device of `nic` on mapping `map`, a copy policy per node of its region.
    fn new(
        beacon: Option<crate::beacon::Helper>,
        nic: MyriNic,
        map: MmapMut,
        copy_mode: CopyMode,
    ) -> ShmDevice {
        let g = nic.geometry();
        ShmDevice {
            beacon,
            wakeup: None,
            copy: vec![CopyPolicy::default(); g.nodes as usize],
            written: vec![0; g.nodes as usize * g.slots as usize],
            board_copy: CopyPolicy::default(),
            board_written: [0; volley_myri::BOARD_SLOTS as usize],
            nic,
            _map: map,
            readers_checked: None,
            copy_mode,
            stats: ShmStats::default(),
        }
    }

    /// `write` (a frame into our board), tried again once if the board was full and
    /// its reader furthest behind turns out to be a process that is gone: such a
    /// reader would hold the board full until its heartbeat timed out.
    fn board_room_or_reap(
        &mut self,
        now: Instant,
        mut write: impl FnMut(&mut ShmDevice) -> bool,
    ) -> bool {
        if write(self) {
            return true;
        }
        match self.nic.board_laggard() {
            Some(d) if self.readers_due(now) && self.reap(d) => write(self),
            _ => false,
        }
    }

    /// Creates (rank 0) or joins the job's region, then waits for every rank.
    pub fn open(boot: &Boot, opts: ShmOptions) -> Result<ShmDevice, HostError> {
        let name = job_dir_name(boot.job, boot.secret.as_ref(), "");
        let deadline = StdInstant::now() + opts.startup_timeout;
        let cfg = NicConfig {
            pid: std::process::id(),
            dead_after: opts.peer_timeout,
            host_clock: Some(crate::beacon::host_clock),
            // Sleeping peers are woken through a futex on their interrupt word.
            interrupt: Some(crate::wakeup::futex_wake),
        };
        let me = boot.rank as u32;
        let (dev, dir) = if boot.rank == 0 {
            // One ring per ordered pair: 2 MiB rings of 64 KiB frames (per-frame costs
            // dominate bandwidth) while there are few ranks, smaller as n^2 grows.
            let (slots, slot_size) = if boot.size <= 8 {
                (32, 64 * 1024 + SLOT_PAD)
            } else {
                (16, 16 * 1024 + SLOT_PAD)
            };
            let slots = if opts.slots == 0 { slots } else { opts.slots };
            let slot_size = if opts.slot_size == 0 {
                slot_size
            } else {
                opts.slot_size
            };
            if boot.size as usize > volley_myri::MAX_NODES {
                return Err(HostError::Fabric(format!(
                    "the shm fabric holds at most {} ranks, this job has {}: use the udp fabric",
                    volley_myri::MAX_NODES,
                    boot.size
                )));
            }
            // Board slots for a 64 KiB frame: a broadcast up to that is written once
            // and read by every member (16 slots: about 1 MiB more per rank).
            let geo = Geometry::new(boot.size as u32, slots, slot_size)
                .and_then(|g| g.with_board_slot(volley_myri::BOARD_SLOT_LIMIT))
                .map_err(|e| HostError::Fabric(e.to_string()))?;
            let len = geo
                .region_len()
                .ok_or_else(|| HostError::Fabric("shm region too large".into()))?;
            remove_stale_dirs();
            let dir = PrivateDir::create(&name)?;
            if !dir.try_lock() {
                return Err(HostError::Fabric(format!(
                    "{}: another rank 0 of job {:#x} is starting (job ids must differ)",
                    dir.path().display(),
                    boot.job
                )));
            }
            dir.clear();
            let tmp = random_name("region")?;
            let file = dir.create_file(&tmp, len as u64)?;
            let mut m = map(&file)
                .map_err(|e| HostError::Fabric(format!("cannot map the shm region: {e}")))?;
            let nic = MyriNic::create(region(&mut m)?, geo, me, boot.job, cfg)
                .map_err(|e| HostError::Fabric(e.to_string()))?;
            dir.rename(&tmp, "region")?;
            (
                ShmDevice::new(beacon(&file, me), nic, m, opts.copy),
                Some(dir),
            )
        } else {
            let mut last = String::from("region never appeared");
            let dev = loop {
                if StdInstant::now() > deadline {
                    return Err(HostError::Fabric(format!(
                        "{}: {last} (gave up after {:?})",
                        job_dir(boot.job, boot.secret.as_ref()).display(),
                        opts.startup_timeout
                    )));
                }
                let retry = |last: &mut String, why: String| {
                    *last = why;
                    std::thread::sleep(StdDuration::from_millis(1));
                };
                let Some(dir) = PrivateDir::open(&name)? else {
                    retry(&mut last, "directory never appeared".into());
                    continue;
                };
                let Some(file) = dir.open_file("region")? else {
                    retry(&mut last, "region never appeared".into());
                    continue;
                };
                let mut m = match map(&file) {
                    Ok(m) if m.len() >= 4096 => m,
                    Ok(_) => {
                        retry(&mut last, "region file too short".into());
                        continue;
                    }
                    Err(e) => {
                        retry(&mut last, format!("cannot map: {e}"));
                        continue;
                    }
                };
                match MyriNic::attach(region(&mut m)?, me, boot.job, cfg) {
                    Ok(nic) => break ShmDevice::new(beacon(&file, me), nic, m, opts.copy),
                    Err(e @ MyriError::NotReady { .. }) => retry(&mut last, e.to_string()),
                    Err(e) => {
                        return Err(HostError::Fabric(format!(
                            "{}/region: {e}",
                            dir.path().display()
                        )))
                    }
                }
            };
            (dev, None)
        };
        // Start-up barrier: every rank attached to this generation.
        while !dev.nic.all_joined() {
            if StdInstant::now() > deadline {
                if let Some(d) = dir {
                    d.destroy();
                }
                let missing: Vec<u32> = (0..boot.size as u32)
                    .filter(|&n| dev.nic.state(n) == volley_myri::NodeState::Absent)
                    .collect();
                return Err(HostError::Fabric(format!(
                    "ranks {missing:?} never joined the shm region"
                )));
            }
            std::thread::sleep(StdDuration::from_micros(200));
        }
        // Everyone has it mapped: nothing needs the name any more.
        if let Some(d) = dir {
            d.destroy();
        }
        Ok(dev)
    }

    /// The device's own counters.
    pub fn stats(&self) -> ShmStats {
        self.stats
    }

    /// The NIC (for fetch-and-add and statistics).
    pub fn nic(&self) -> &MyriNic {
        &self.nic
    }

    /// Beats of this process's beacon so far.
    pub fn beacons_sent(&self) -> u64 {
        self.beacon.as_ref().map_or(0, |b| b.sent())
    }

    /// Whether the beacon helper runs.
    pub fn has_beacon(&self) -> bool {
        self.beacon.is_some()
    }
}

/// True if process `pid` has exited (gone, or a zombie not yet reaped).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => {
            stat.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                == Some("Z")
        }
        Err(_) => true,
    }
}

impl ShmDevice {
    /// Marks node `d` dead if its process is gone; whether it was.
    fn reap(&mut self, d: u32) -> bool {
        let pid = self.nic.pid(d);
        let gone = pid != 0 && process_gone(pid);
        if gone {
            self.nic.mark_dead(d);
        }
        gone
    }

    /// The wake-up descriptor ([`crate::wakeup`]), made at the first call: an
    /// eventfd that this node's NIC interrupt rings.
    pub fn wakeup(&mut self) -> Result<&crate::wakeup::Wakeup, HostError> {
        if self.wakeup.is_none() {
            let word = self
                .nic
                .interrupt_word()
                .ok_or_else(|| HostError::Fabric("shm: no interrupt word in the region".into()))?;
            // SAFETY: the word lies in `_map`, which is dropped after `wakeup` (field
            // order) and never unmapped before.
            self.wakeup = Some(unsafe { crate::wakeup::Wakeup::for_interrupt(word) }?);
        }
        Ok(self.wakeup.as_ref().expect("made above"))
    }

    /// Asks for an interrupt at the next frame: `false` when one waits already.
    pub fn arm_rx(&mut self) -> bool {
        self.nic.arm_interrupt()
    }

    /// Whether our board's readers may be looked up in /proc now: once per
    /// millisecond at most, as a full board or a waiting barrier asks each poll.
    fn readers_due(&mut self, now: Instant) -> bool {
        let due = self
            .readers_checked
            .is_none_or(|t| now.saturating_since(t) >= Duration::from_millis(1));
        if due {
            self.readers_checked = Some(now);
        }
        due
    }
}

impl Device for ShmDevice {
    type RxToken<'a> = MyriRx<'a>;
    type TxToken<'a> = MyriTx<'a>;

    fn receive(&mut self, now: Instant) -> Option<MyriRx<'_>> {
        self.nic.receive(now)
    }

    // Always: see `HostDevice::transmit`.
    #[inline(always)]
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<MyriTx<'_>> {
        self.nic.transmit(now, dst)
    }

    fn capabilities(&self) -> Capabilities {
        self.nic.capabilities()
    }

    fn transmit_reads_time(&self) -> bool {
        self.nic.transmit_reads_time()
    }

    fn gather_from(&self) -> usize {
        STREAM_FROM
    }

    /// A long frame, copied into the peer's ring by its [`CopyPolicy`].
    fn transmit_parts(&mut self, now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        let Some(policy) = self.copy.get_mut(dst.0 as usize) else {
            return false;
        };
        let slots = self.nic.geometry().slots as u64;
        let Some(tok) = self.nic.transmit(now, dst) else {
            return false;
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let at = dst.0 as usize * slots as usize + (tok.index() % slots) as usize;
        let warm = warm(&mut self.written[at], len);
        let (mode, stats) = (self.copy_mode, &mut self.stats);
        tok.consume(len, |slot| {
            copy_parts(slot, parts, policy, mode, warm, stats)
        });
        true
    }

    fn rx_pending(&self) -> bool {
        self.nic.rx_pending()
    }

    #[inline(always)]
    fn liveness(&mut self) -> Option<&mut dyn Liveness> {
        Some(self)
    }

    #[inline(always)]
    fn nic_atomics(&mut self) -> Option<&mut dyn NicAtomics> {
        self.nic.nic_atomics()
    }

    #[inline(always)]
    fn nic_barrier(&mut self) -> Option<&mut dyn NicBarrier> {
        self.nic.nic_barrier()
    }

    #[inline(always)]
    fn board(&mut self) -> Option<&mut dyn Board> {
        Some(self)
    }

    #[inline(always)]
    fn send_pool(&self) -> Option<&dyn SendPool> {
        self.nic.send_pool()
    }

    #[inline(always)]
    fn send_pool_mut(&mut self) -> Option<&mut dyn SendPool> {
        self.nic.send_pool_mut()
    }
}

/// The NIC model's board, written only once a reader whose process is gone has
/// been reaped, long frames copied by the board's [`CopyPolicy`].
impl Board for ShmDevice {
    fn write(&mut self, now: Instant, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        self.board_room_or_reap(now, |d| d.nic.write(now, len, fill))
    }

    /// A long frame, copied into our broadcast board by the board's [`CopyPolicy`]:
    /// a member in another core complex reads it as a peer's ring would be read.
    fn write_parts(&mut self, now: Instant, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.board_room_or_reap(now, |d| {
            let at = (d.nic.board_next() % volley_myri::BOARD_SLOTS) as usize;
            let mut seen = d.board_written[at];
            let warm = warm(&mut seen, len);
            let (mode, policy, stats) = (d.copy_mode, &mut d.board_copy, &mut d.stats);
            let sent = d.nic.write(now, len, &mut |slot| {
                copy_parts(slot, parts, policy, mode, warm, stats);
                stats.board_frames += 1;
            });
            if sent {
                d.board_written[at] = seen;
            }
            sent
        })
    }

    fn write_pooled(
        &mut self,
        now: Instant,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        self.nic.write_pooled(now, head, slot, len, tail)
    }

    fn read(
        &mut self,
        now: Instant,
        take: &mut dyn FnMut(NodeAddr, &[u8]) -> volley_core::phy::BoardTake,
    ) -> bool {
        self.nic.read(now, take)
    }

    fn unread(&mut self, now: Instant) -> bool {
        if !self.nic.unread(now) {
            return false;
        }
        // A reader whose process is gone is dead at once, as in `peer_alive`.
        if self.readers_due(now) {
            let me = self.nic.node();
            for d in (0..self.nic.geometry().nodes).filter(|&d| d != me) {
                self.reap(d);
            }
        }
        self.nic.unread(now)
    }
}

/// The NIC model's liveness words, and a peer whose process is gone (its pid no
/// longer in /proc) reaped at once.
impl Liveness for ShmDevice {
    fn peer_alive(&mut self, now: Instant, peer: NodeAddr) -> bool {
        self.reap(peer.0 as u32);
        self.nic.peer_alive(now, peer)
    }

    fn peer_vouched(&mut self, now: Instant, peer: NodeAddr) -> bool {
        self.reap(peer.0 as u32);
        self.nic.peer_vouched(now, peer)
    }
}
