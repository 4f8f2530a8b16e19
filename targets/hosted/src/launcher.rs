//! `volley run -n N -- PROGRAM ARGS...`: starts N ranks on this machine.
//!
//! Each rank gets `VOLLEY_RANK`, `VOLLEY_SIZE`, `VOLLEY_JOB` and `VOLLEY_FABRIC`; its
//! output comes back line by line with a `[rank]` prefix. When a rank fails, the others
//! get a grace period to notice and report it (a dead peer is an error at the sender),
//! then they are killed; the launcher exits non-zero (128 + the signal for a rank a
//! signal killed, as `mpiexec` does). SIGINT, SIGTERM and SIGHUP sent to the launcher
//! go to every rank; what is left after the grace period is killed. A rank dies with
//! its launcher if that is killed outright (`PR_SET_PDEATHSIG`). The shared-memory
//! directory of the job is removed at the end whatever happened.
//!
//! With `--unikernel K` the last K ranks are unikernel nodes instead: one QEMU each,
//! booting Volley's image (built on first use) on the `udp` fabric through QEMU's
//! user-mode network, its port forwarded from the host's loopback; the job secret
//! reaches them as a private file, never on a command line.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::secret::Secret;
use crate::{shm, Fabric};

/// What `volley run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Ranks.
    pub ranks: u16,
    /// Fabric.
    pub fabric: Fabric,
    /// Give up (and fail) after this long.
    pub timeout: Duration,
    /// After a rank fails, how long the others may take to notice and exit.
    pub grace: Duration,
    /// Job id (random if `None`).
    pub job: Option<u64>,
    /// Program and its arguments.
    pub command: Vec<String>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// Print rank 0's standard output as it is and drop the others' (reports);
    /// otherwise every line gets its `[rank]` prefix.
    pub rank0_only: bool,
    /// Unikernel nodes among the ranks (the last ones), if any.
    pub unikernel: Option<UnikernelRanks>,
    /// Rank 0 reads the launcher's standard input, as `mpiexec` forwards it; the
    /// other ranks (and all, when false) read an empty one.
    pub stdin: bool,
}

/// The unikernel ranks of a job: the last `count` ranks boot Volley's image under QEMU.
#[derive(Debug, Clone)]
pub struct UnikernelRanks {
    /// How many.
    pub count: u16,
    /// The application linked in the image they run (`app=`: `mixed`, `barrier`, ...),
    /// the counterpart of the processes' program.
    pub app: String,
    /// Their Ethernet card: `tulip` (the DEC 21143) or `e1000`.
    pub nic: String,
}

/// QEMU's exit status when the kernel reports success through `isa-debug-exit`.
const QEMU_SUCCESS: i32 = 33;

/// Where the unikernel image is: `VOLLEY_UNIKERNEL_IMAGE` (which must be a file),
/// else the build output of this source tree's `unikernel/` (which may not be built
/// yet). Builds nothing.
pub fn unikernel_image_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("VOLLEY_UNIKERNEL_IMAGE") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "VOLLEY_UNIKERNEL_IMAGE={} is not a file",
                p.display()
            ))
        };
    }
    let image = unikernel_dir().join("target/x86_64-unknown-none/release/volley-unikernel");
    if image.is_file() || unikernel_dir().join("Cargo.toml").is_file() {
        Ok(image)
    } else {
        Err("no unikernel image: set VOLLEY_UNIKERNEL_IMAGE".into())
    }
}

fn unikernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../unikernel")
}

/// The unikernel image to boot: `VOLLEY_UNIKERNEL_IMAGE` as it is, else this source
/// tree's, brought up to date first (cargo rebuilds it when a source changed since
/// the last build, and does nothing otherwise; its progress shows on stderr).
fn unikernel_image() -> Result<PathBuf, String> {
    let image = unikernel_image_path()?;
    let dir = unikernel_dir();
    if std::env::var_os("VOLLEY_UNIKERNEL_IMAGE").is_some() || !dir.join("Cargo.toml").is_file() {
        return Ok(image);
    }
    eprintln!(
        "volley run: bringing the unikernel image up to date ({})",
        dir.display()
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Inside unikernel/, so its own target and static relocation apply.
    let out = Command::new(cargo)
        .current_dir(&dir)
        .args(["build", "--release"])
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .map_err(|e| format!("cannot run cargo to build the unikernel: {e}"))?;
    if out.success() && image.is_file() {
        Ok(image)
    } else {
        Err("building the unikernel image failed".into())
    }
}

/// A private (0700) directory holding the job key file (0600, 32 hex digits) QEMU
/// hands each node; removed when dropped.
struct KeyFile {
    dir: PathBuf,
    path: PathBuf,
}

impl KeyFile {
    fn new(secret: &Secret) -> Result<KeyFile, String> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let mut raw = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut raw))
            .map_err(|e| format!("no random bytes: {e}"))?;
        let name: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        // A fresh random name, created exclusively: nothing planted there is followed.
        let dir = std::env::temp_dir().join(format!("volley-key-{name}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("key");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(secret.to_hex().as_bytes()));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("cannot write the key file: {e}"));
        }
        Ok(KeyFile { dir, path })
    }
}

impl KeyFile {
    /// A file beside the key holding a fresh random start-up nonce for rank
    /// `rank` (32 hex digits, 0600), which its node reads through fw_cfg.
    fn nonce_file(&self, rank: u16) -> Result<PathBuf, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let nonce = Secret::generate().map_err(|e| e.to_string())?;
        let path = self.dir.join(format!("nonce-{rank}"));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(nonce.to_hex().as_bytes()))
            .map_err(|e| format!("cannot write a nonce file: {e}"))?;
        Ok(path)
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The QEMU command that boots unikernel rank `rank` of `size`, reaching every rank
/// `r` at port `base + r` of the host's loopback (10.0.2.2 from inside).
#[allow(clippy::too_many_arguments)]
fn qemu_node(
    u: &UnikernelRanks,
    image: &Path,
    key: &Path,
    nonce: &Path,
    rank: u16,
    size: u16,
    job: u64,
    base: u16,
) -> Command {
    let peers = (0..size)
        .map(|r| format!("10.0.2.2:{}", base as u32 + r as u32))
        .collect::<Vec<_>>()
        .join(",");
    let port = base as u32 + rank as u32;
    let accel = std::env::var("VOLLEY_QEMU_ACCEL").unwrap_or_else(|_| "tcg".into());
    let mut c = Command::new("qemu-system-x86_64");
    c.args(["-machine", "pc", "-bios", "/usr/share/qemu/qboot.rom"])
        .args(["-accel", &accel, "-m", "128M", "-nodefaults"])
        .args(["-display", "none", "-no-reboot", "-serial", "stdio"])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .arg("-fw_cfg")
        .arg(format!("name=opt/volley/key,file={}", key.display()))
        .arg("-fw_cfg")
        .arg(format!("name=opt/volley/nonce,file={}", nonce.display()))
        .arg("-netdev")
        .arg(format!("user,id=n0,hostfwd=udp:127.0.0.1:{port}-:{port}"))
        .arg("-device")
        .arg(format!(
            "{},netdev=n0,mac=52:54:00:5e:{:02x}:{:02x},romfile=",
            u.nic,
            rank >> 8,
            rank & 0xFF
        ))
        .arg("-kernel")
        .arg(image)
        .arg("-append")
        .arg(format!(
            "app={} rank={rank} job=0x{job:016x} fabric=udp ip=10.0.2.15/24 gw=10.0.2.2 peers={peers}",
            u.app
        ));
    c
}

/// A fresh job id.
pub fn new_job_id() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

fn forward(
    rank: u16,
    from: impl Read + Send + 'static,
    to_stderr: bool,
    plain: Option<bool>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            match plain {
                Some(true) => {
                    let _ = writeln!(std::io::stdout().lock(), "{line}");
                    continue;
                }
                Some(false) => continue,
                None => {}
            }
            if to_stderr {
                let _ = writeln!(std::io::stderr().lock(), "[{rank}] {line}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "[{rank}] {line}");
            }
        }
    })
}

/// The signal that asked the launcher to stop (SIGINT, SIGTERM or SIGHUP); 0 while
/// none has.
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(sig: libc::c_int) {
    STOP.store(sig, Ordering::Relaxed);
}

/// The signal (SIGINT, SIGTERM or SIGHUP) that asked this process to stop since
/// [`catch_stop_signals`], if one has.
pub fn stop_requested() -> Option<i32> {
    Some(STOP.load(Ordering::Relaxed)).filter(|&s| s != 0)
}

/// Asks the job in progress (and a caller running several) to stop as if signal
/// `sig` had come: the ranks are passed it, and [`stop_requested`] returns it.
pub fn request_stop(sig: i32) {
    STOP.store(sig, Ordering::Relaxed);
}

/// From now on SIGINT, SIGTERM and SIGHUP only note themselves (see
/// [`stop_requested`]): the supervising loop passes them on to the ranks, and a
/// caller running several jobs stops after the one it is in, cleaning up.
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe;
        // a zeroed sigaction with a handler and an empty mask is valid.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Makes `cmd`'s process die with this one: killed when the launcher's thread that
/// started it ends (all of it, for the main thread), or at once if the launcher is
/// already gone when it starts.
fn dies_with_launcher(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let launcher = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and raise are async-signal-safe; nothing else runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != launcher {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// The launcher's exit code for a rank that ended with `s`, not as it should: its
/// own code, or 128 + the signal that killed it.
fn failure_code(s: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) if c != 0 => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "unknown status".into(),
    }
}

/// What can be known wrong with a job before any rank starts, as one line: a bad
/// setting, more ranks than the fabric holds, no interface for an `eth` rank. Each
/// rank would otherwise find it and say it, once per rank.
pub fn check_job(opts: &RunOptions) -> Result<(), String> {
    crate::vars::check_env().map_err(|e| e.to_string())?;
    let processes = opts.ranks
        - opts
            .unikernel
            .as_ref()
            .map_or(0, |u| u.count.min(opts.ranks));
    match opts.fabric {
        Fabric::Shm if opts.ranks as usize > crate::shm::MAX_RANKS => Err(format!(
            "the shm fabric holds at most {} ranks, this job has {}: use the udp fabric (--fabric udp)",
            crate::shm::MAX_RANKS,
            opts.ranks
        )),
        Fabric::Udp => crate::udp::base_port(opts.job.unwrap_or(0), opts.ranks)
            .map(drop)
            .map_err(|e| e.to_string()),
        Fabric::Eth => (0..processes)
            .try_for_each(|r| crate::eth::interface_name(r).map(drop))
            .map_err(|e| e.to_string()),
        _ => Ok(()),
    }
}

/// Runs the job; returns the launcher's exit code.
pub fn run(opts: &RunOptions) -> i32 {
    let Some((program, args)) = opts.command.split_first() else {
        eprintln!("volley run: no program given (volley run -n N -- PROGRAM ARGS...)");
        return 2;
    };
    if let Err(e) = check_job(opts) {
        eprintln!("volley run: {e}");
        return 2;
    }
    let job = opts.job.unwrap_or_else(new_job_id);
    // The job secret reaches the ranks in their environment, which only this user can
    // read; never on a command line.
    let secret = match Secret::generate() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("volley run: {e}");
            return 2;
        }
    };
    // Unikernel ranks: their image, their key file, and the udp settings every rank
    // needs to speak with them.
    let mut nodes = None;
    let mut extra_env: Vec<(String, String)> = Vec::new();
    if let Some(u) = opts.unikernel.as_ref().filter(|u| u.count > 0) {
        let setup = (|| -> Result<_, String> {
            if opts.fabric != Fabric::Udp {
                return Err("--unikernel needs the udp fabric".into());
            }
            if u.count > opts.ranks {
                return Err(format!(
                    "--unikernel {} is more than -n {}",
                    u.count, opts.ranks
                ));
            }
            let base = crate::udp::base_port(job, opts.ranks).map_err(|e| e.to_string())?;
            Ok((unikernel_image()?, KeyFile::new(&secret)?, base))
        })();
        match setup {
            Ok(s) => nodes = Some((u, s)),
            Err(e) => {
                eprintln!("volley run: {e}");
                return 2;
            }
        }
        // What the nodes' IP stack sends (an Ethernet MTU), and their datagrams come
        // from QEMU's NAT port: processes accept them, authenticated.
        if std::env::var_os("VOLLEY_UDP_MTU").is_none() {
            extra_env.push(("VOLLEY_UDP_MTU".into(), "1472".into()));
        }
        extra_env.push(("VOLLEY_UDP_ANY_SOURCE".into(), "1".into()));
    }
    let first_node = opts.ranks - nodes.as_ref().map_or(0, |(u, _)| u.count);
    catch_stop_signals();
    let mut children: Vec<(u16, Child, i32)> = Vec::new();
    let mut pumps = Vec::new();
    for rank in 0..opts.ranks {
        let (mut cmd, success) = match &nodes {
            Some((u, (image, key, base))) if rank >= first_node => {
                let nonce = match key.nonce_file(rank) {
                    Ok(n) => n,
                    Err(e) => {
                        eprintln!("volley run: {e}");
                        for (_, c, _) in children.iter_mut() {
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                        return 2;
                    }
                };
                (
                    qemu_node(u, image, &key.path, &nonce, rank, opts.ranks, job, *base),
                    QEMU_SUCCESS,
                )
            }
            _ => {
                let mut cmd = Command::new(program);
                cmd.args(args)
                    .env("VOLLEY_RANK", rank.to_string())
                    .env("VOLLEY_SIZE", opts.ranks.to_string())
                    .env("VOLLEY_JOB", format!("0x{job:016x}"))
                    .env("VOLLEY_FABRIC", opts.fabric.name())
                    .env(crate::secret::ENV, secret.to_hex())
                    .envs(opts.env.iter().map(|(k, v)| (k, v)))
                    .envs(extra_env.iter().map(|(k, v)| (k, v)));
                (cmd, 0)
            }
        };
        let stdin = if opts.stdin && rank == 0 && success == 0 {
            Stdio::inherit()
        } else {
            Stdio::null()
        };
        cmd.stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        dies_with_launcher(&mut cmd);
        match cmd.spawn() {
            Ok(mut child) => {
                let plain = opts.rank0_only.then_some(rank == 0);
                if let Some(o) = child.stdout.take() {
                    pumps.push(forward(rank, o, false, plain));
                }
                if let Some(e) = child.stderr.take() {
                    pumps.push(forward(rank, e, true, None));
                }
                children.push((rank, child, success));
            }
            Err(e) => {
                let what = if success == QEMU_SUCCESS {
                    "qemu-system-x86_64"
                } else {
                    program.as_str()
                };
                eprintln!("volley run: cannot start {what}: {e}");
                for (_, c, _) in children.iter_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                shm::remove_job_dir(job, Some(&secret));
                return 2;
            }
        }
    }
    let code = supervise(&mut children, opts);
    for p in pumps {
        let _ = p.join();
    }
    shm::remove_job_dir(job, Some(&secret));
    code
}

/// Waits for every rank; `children` holds each one's rank, process and the exit code
/// that means success (0, or QEMU's 33 for a unikernel node).
fn supervise(children: &mut [(u16, Child, i32)], opts: &RunOptions) -> i32 {
    let start = Instant::now();
    let mut done: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut failed: Option<(u16, Instant)> = None;
    // A stop signal passed on to the ranks, and when.
    let mut stopping: Option<(i32, Instant)> = None;
    let mut code = 0;
    loop {
        for (i, (rank, child, success)) in children.iter_mut().enumerate() {
            if done[i].is_some() {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                done[i] = Some(status);
                if status.code() != Some(*success) {
                    if stopping.is_none() {
                        eprintln!("volley run: rank {rank} failed ({})", describe(status));
                    }
                    if failed.is_none() {
                        failed = Some((*rank, Instant::now()));
                        code = failure_code(status);
                    }
                }
            }
        }
        if let Some((sig, _)) = stopping {
            if done.iter().all(Option::is_some) {
                return 128 + sig;
            }
        } else if done.iter().all(Option::is_some) {
            return code;
        }
        let sig = STOP.load(Ordering::Relaxed);
        if sig != 0 && stopping.is_none() {
            eprintln!("volley run: got signal {sig}; passing it to the ranks");
            for (i, (_, child, _)) in children.iter_mut().enumerate() {
                if done[i].is_none() {
                    // SAFETY: kill(2) on a child not yet reaped, so its pid is ours.
                    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
                }
            }
            stopping = Some((sig, Instant::now()));
        }
        let running = || {
            let left: Vec<String> = children
                .iter()
                .zip(&done)
                .filter(|(_, d)| d.is_none())
                .map(|((r, _, _), _)| r.to_string())
                .collect();
            format!("rank {} still running", left.join(", "))
        };
        let kill_reason = match (stopping, failed) {
            (Some((sig, at)), _) if at.elapsed() > opts.grace => {
                Some(format!("{} {:?} after signal {sig}", running(), opts.grace))
            }
            (Some(_), _) => None,
            _ if start.elapsed() > opts.timeout => {
                Some(format!("timeout after {:?}, {}", opts.timeout, running()))
            }
            (None, Some((rank, at))) if at.elapsed() > opts.grace => {
                Some(format!("rank {rank} failed {:?} ago", opts.grace))
            }
            _ => None,
        };
        if let Some(reason) = kill_reason {
            eprintln!("volley run: {reason}; stopping the remaining ranks");
            for (i, (_, child, _)) in children.iter_mut().enumerate() {
                if done[i].is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            if let Some((sig, _)) = stopping {
                return 128 + sig;
            }
            return if code == 0 { 124 } else { code };
        }
        thread::sleep(Duration::from_millis(5));
    }
}
