//! The `shm` fabric: the Myrinet-like NIC model on a `/dev/shm` mapping.
//!
//! Rank 0 builds the region under a temporary name, initialises it for this job and
//! renames it into place (`/dev/shm/volley-<uid>-<job>/region`, directory 0700, file
//! 0600), so a stale file from an earlier job is replaced, never joined. The others
//! map it and attach as soon as its header carries this job's generation. Once every
//! rank has joined, rank 0 unlinks the file and its directory: the mapping lives on
//! and nothing is left behind, even if ranks crash later.

use std::fs::{self, DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use memmap2::MmapMut;
use volley_core::phy::{Capabilities, Device};
use volley_core::time::Instant;
use volley_core::NodeAddr;
use volley_myri::{Geometry, MyriError, MyriNic, MyriRx, MyriTx, NicConfig, Region};

use crate::bootstrap::Boot;
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
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            slots: 0,
            slot_size: 0,
            startup_timeout: StdDuration::from_secs(30),
            peer_timeout: volley_core::time::Duration::from_secs(30),
        }
    }
}

/// The directory of a job's region.
pub fn job_dir(job: u64) -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/dev/shm/volley-{uid}-{job:016x}"))
}

/// Removes a job's region directory if it is still there (launcher clean-up).
pub fn remove_job_dir(job: u64) {
    let _ = fs::remove_dir_all(job_dir(job));
}

/// One rank's NIC on the job's shared region.
#[derive(Debug)]
pub struct ShmDevice {
    // Declared before the mapping: dropped (and marked exited) while it is still mapped.
    nic: MyriNic,
    _map: MmapMut,
}

fn map(path: &Path) -> std::io::Result<MmapMut> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    // SAFETY: the file is ours (mode 0600 in a 0700 directory); other processes of
    // the job change it only through the ring protocol, which `Region` accounts for.
    unsafe { MmapMut::map_mut(&file) }
}

fn region(map: &mut MmapMut) -> Result<Region, HostError> {
    // SAFETY: the mapping outlives the region (both are kept in `ShmDevice`, the NIC
    // dropped first) and is used by this process only through the region.
    unsafe { Region::new(map.as_mut_ptr(), map.len()) }.map_err(|e| HostError(e.to_string()))
}

impl ShmDevice {
    /// Creates (rank 0) or joins the job's region, then waits for every rank.
    pub fn open(boot: &Boot, opts: ShmOptions) -> Result<ShmDevice, HostError> {
        let dir = job_dir(boot.job);
        let path = dir.join("region");
        let deadline = StdInstant::now() + opts.startup_timeout;
        let cfg = NicConfig {
            pid: std::process::id(),
            dead_after: opts.peer_timeout,
        };
        let me = boot.rank as u32;
        let dev = if boot.rank == 0 {
            // One ring per ordered pair: 2 MiB rings of 64 KiB frames (per-frame costs
            // dominate bandwidth) while there are few ranks, smaller as n^2 grows.
            let (slots, slot_size) = if boot.size <= 8 {
                (32, 64 * 1024)
            } else {
                (16, 16 * 1024)
            };
            let slots = if opts.slots == 0 { slots } else { opts.slots };
            let slot_size = if opts.slot_size == 0 {
                slot_size
            } else {
                opts.slot_size
            };
            if boot.size as usize > volley_myri::MAX_NODES {
                return Err(HostError(format!(
                    "the shm fabric holds at most {} ranks, this job has {}: use the udp fabric",
                    volley_myri::MAX_NODES,
                    boot.size
                )));
            }
            let geo = Geometry::new(boot.size as u32, slots, slot_size)
                .map_err(|e| HostError(e.to_string()))?;
            let len = geo
                .region_len()
                .ok_or_else(|| HostError("shm region too large".into()))?;
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| HostError(format!("cannot create {}: {e}", dir.display())))?;
            let tmp = dir.join(format!("region.{}", std::process::id()));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| HostError(format!("cannot create {}: {e}", tmp.display())))?;
            file.set_len(len as u64)
                .map_err(|e| HostError(format!("cannot size the shm region: {e}")))?;
            let mut m =
                map(&tmp).map_err(|e| HostError(format!("cannot map the shm region: {e}")))?;
            let nic = MyriNic::create(region(&mut m)?, geo, me, boot.job, cfg)
                .map_err(|e| HostError(e.to_string()))?;
            fs::rename(&tmp, &path)
                .map_err(|e| HostError(format!("cannot publish the shm region: {e}")))?;
            ShmDevice { nic, _map: m }
        } else {
            let mut last = String::from("region file never appeared");
            loop {
                if StdInstant::now() > deadline {
                    return Err(HostError(format!(
                        "{}: {last} (gave up after {:?})",
                        path.display(),
                        opts.startup_timeout
                    )));
                }
                let mut m = match map(&path) {
                    Ok(m) if m.len() >= 4096 => m,
                    Ok(_) => {
                        last = "region file too short".into();
                        std::thread::sleep(StdDuration::from_millis(1));
                        continue;
                    }
                    Err(e) => {
                        last = format!("cannot map: {e}");
                        std::thread::sleep(StdDuration::from_millis(1));
                        continue;
                    }
                };
                match MyriNic::attach(region(&mut m)?, me, boot.job, cfg) {
                    Ok(nic) => break ShmDevice { nic, _map: m },
                    Err(e @ MyriError::NotReady { .. }) => {
                        last = e.to_string();
                        std::thread::sleep(StdDuration::from_millis(1));
                    }
                    Err(e) => return Err(HostError(format!("{}: {e}", path.display()))),
                }
            }
        };
        // Start-up barrier: every rank attached to this generation.
        while !dev.nic.all_joined() {
            if StdInstant::now() > deadline {
                if boot.rank == 0 {
                    remove_job_dir(boot.job);
                }
                let missing: Vec<u32> = (0..boot.size as u32)
                    .filter(|&n| dev.nic.state(n) == volley_myri::NodeState::Absent)
                    .collect();
                return Err(HostError(format!(
                    "ranks {missing:?} never joined the shm region"
                )));
            }
            std::thread::sleep(StdDuration::from_micros(200));
        }
        if boot.rank == 0 {
            // Everyone has it mapped: nothing needs the name any more.
            remove_job_dir(boot.job);
        }
        Ok(dev)
    }

    /// The NIC (for fetch-and-add and statistics).
    pub fn nic(&self) -> &MyriNic {
        &self.nic
    }
}

/// True if process `pid` has exited (gone, or a zombie not yet reaped).
fn process_gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
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

impl Device for ShmDevice {
    type RxToken<'a> = MyriRx<'a>;
    type TxToken<'a> = MyriTx<'a>;

    fn receive(&mut self, now: Instant) -> Option<MyriRx<'_>> {
        self.nic.receive(now)
    }

    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<MyriTx<'_>> {
        self.nic.transmit(now, dst)
    }

    fn capabilities(&self) -> Capabilities {
        self.nic.capabilities()
    }

    fn peer_alive(&mut self, now: Instant, peer: NodeAddr) -> bool {
        let pid = self.nic.pid(peer.0 as u32);
        if pid != 0 && process_gone(pid) {
            self.nic.mark_dead(peer.0 as u32);
        }
        self.nic.peer_alive(now, peer)
    }
}
