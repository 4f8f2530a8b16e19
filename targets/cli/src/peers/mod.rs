//! `volley bench --peers`: MPICH and UCX measured on this machine beside Volley, in
//! interleaved rounds. MPICH runs a bundled MPI ping-pong ([`MPI_PINGPONG`], built
//! with `mpicc.mpich`); UCX runs `ucx_perftest` (`ucp_am_lat` at 8 B and 1 MiB,
//! `tag_bw`) over `tcp` beside `udp` and `eth`, and beside `shm` over `posix,self` at
//! 8 B and `posix,cma,self` at 1 MiB (`ucx_tls`). A peer that is not installed is
//! named, with its Debian package, and skipped.
//!
//! Each peer's processes are pinned as Volley's ranks are ([`crate::programs::pin`]):
//! process *r* on core *r*, so that both sides cross the same pair of cores and a
//! ratio does not hang on where the scheduler happened to put a peer.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::bench::Row;
use crate::programs::{cpus, pin_to};

/// The MPI side: 8-byte and 1 MiB one-way latency and 1 MiB streaming, as Volley's
/// rows.
pub const MPI_PINGPONG: &str = include_str!("mpi_pingpong.c");
/// The MPI side of the collective rows: `MPI_Barrier`, `MPI_Bcast`.
pub const MPI_COLL: &str = include_str!("mpi_coll.c");
/// The MPI side of the start-up rows of the benchmark across hosts.
pub const MPI_STARTUP: &str = include_str!("mpi_startup.c");

/// A program on `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The peers found on this machine.
#[derive(Debug)]
pub struct Peers {
    /// The built MPI programs (ping-pong, collectives) and `mpiexec.mpich`.
    mpi: Option<(PathBuf, PathBuf, PathBuf)>,
    /// `ucx_perftest`.
    ucx: Option<PathBuf>,
    /// One line per peer that cannot run, saying why.
    pub missing: Vec<String>,
}

impl Peers {
    /// Looks for the peers and builds the MPI program in `dir` (private to this run).
    pub fn find(dir: &Path) -> Peers {
        let mut missing = Vec::new();
        let mpi = match (on_path("mpicc.mpich"), on_path("mpiexec.mpich")) {
            (Some(cc), Some(exec)) => match build_mpi(dir, &cc, "mpi_pingpong", MPI_PINGPONG)
                .and_then(|p| Ok((p, build_mpi(dir, &cc, "mpi_coll", MPI_COLL)?)))
            {
                Ok((p, c)) => Some((p, c, exec)),
                Err(e) => {
                    missing.push(format!("MPICH: {e}"));
                    None
                }
            },
            _ => {
                missing.push(
                    "MPICH: mpicc.mpich or mpiexec.mpich not installed (Debian: mpich, libmpich-dev)"
                        .into(),
                );
                None
            }
        };
        let ucx = on_path("ucx_perftest");
        if ucx.is_none() {
            missing.push("UCX: ucx_perftest not installed (Debian: ucx-utils)".into());
        }
        Peers { mpi, ucx, missing }
    }

    /// One round of the peers that run beside `fabric`: their rows (per-round
    /// medians), each test named after the peer.
    pub fn round(&self, fabric: &'static str, iters: usize, rounds: usize) -> Vec<Row> {
        let mut rows = Vec::new();
        if fabric == "shm" {
            if let Some((prog, _, exec)) = &self.mpi {
                match mpich(prog, exec, iters, rounds) {
                    Ok(r) => rows.extend(r),
                    Err(e) => eprintln!("bench: MPICH: {e}"),
                }
            }
        }
        if let Some(ucx) = &self.ucx {
            let tests = [
                ("ucp_am_lat", 8, iters),
                ("ucp_am_lat", 1 << 20, (iters / 100).max(1)),
                ("tag_bw", 1 << 20, rounds * 32),
            ];
            for (test, bytes, n) in tests {
                let tls = ucx_tls(fabric, bytes);
                match ucx_perftest(ucx, tls, test, bytes, n) {
                    Ok(v) => rows.push(Row {
                        fabric: fabric.into(),
                        test: format!("UCX {test}, UCX_TLS={tls}"),
                        bytes,
                        unit: if test.ends_with("lat") { "us" } else { "MB/s" }.into(),
                        median: v,
                        p90: v,
                        p99: v,
                        ratio: None,
                    }),
                    Err(e) => eprintln!("bench: UCX {test} over {tls}: {e}"),
                }
            }
        }
        rows
    }
}

/// The transports UCX gets beside `fabric` for a `bytes` message: on one host,
/// shared memory for small messages and, for large ones, also CMA (a single copy
/// with `process_vm_readv`, UCX's zero-copy rendezvous there: "UCX with CMA");
/// across hosts, TCP.
fn ucx_tls(fabric: &str, bytes: usize) -> &'static str {
    match fabric {
        "shm" if bytes >= 1 << 16 => "posix,cma,self",
        "shm" => "posix,self",
        _ => "tcp",
    }
}

/// Compiles MPI program `text` as `dir/name` with `cc` (`mpicc`); its first error
/// line otherwise.
pub fn build_mpi(dir: &Path, cc: &Path, name: &str, text: &str) -> Result<PathBuf, String> {
    let src = dir.join(format!("{name}.c"));
    let bin = dir.join(name);
    std::fs::write(&src, text).map_err(|e| format!("{}: {e}", src.display()))?;
    let o = Command::new(cc)
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(|e| format!("{}: {e}", cc.display()))?;
    if !o.status.success() {
        return Err(format!(
            "cannot build {name}.c: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ));
    }
    Ok(bin)
}

impl Peers {
    /// Whether MPICH can run.
    pub fn has_mpich(&self) -> bool {
        self.mpi.is_some()
    }

    /// MPICH's `MPI_Barrier` and `MPI_Bcast` (8 B, 16 KiB, 1 MiB) over `ranks`
    /// processes, measured as Volley's collective rows (`mpi_coll.c`), with
    /// `iters` iterations of barrier, small, medium and large broadcast.
    pub fn mpich_collectives(&self, ranks: u16, iters: [usize; 4]) -> Result<Vec<Row>, String> {
        let Some((_, prog, exec)) = &self.mpi else {
            return Err("MPICH is not installed".into());
        };
        let label = crate::bench::ranks_label(ranks);
        let args = iters.map(|n| n.to_string());
        run_mpi(exec, prog, ranks, &args, 4, |what| match what {
            "barrier" => Some((format!("MPICH MPI_Barrier{label}"), "us")),
            "bcast" => Some((format!("MPICH MPI_Bcast{label}"), "us")),
            _ => None,
        })
    }
}

/// Waits for `child` at most `limit`, killing it past that.
fn wait_bounded(mut child: Child, limit: Duration) -> Result<Output, String> {
    let end = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(|e| e.to_string()),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {limit:?}"));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The MPI program under `mpiexec.mpich -n 2`: rows for latency and bandwidth.
fn mpich(prog: &Path, exec: &Path, iters: usize, rounds: usize) -> Result<Vec<Row>, String> {
    let args = [iters.to_string(), rounds.to_string()];
    run_mpi(exec, prog, 2, &args, 3, |what| match what {
        "lat" => Some(("MPICH MPI_Send/MPI_Recv ping-pong".into(), "us")),
        "bw" => Some(("MPICH MPI_Isend window of 32".into(), "MB/s")),
        _ => None,
    })
}

/// Runs MPI program `prog` on `ranks` ranks with `args`, for at most 300 s, and reads
/// its `what bytes median p90 p99` lines as `shm` rows, `name(what)` giving each
/// test and unit (`None`: not a row). Exactly `want` rows, or an error.
fn run_mpi(
    exec: &Path,
    prog: &Path,
    ranks: u16,
    args: &[String],
    want: usize,
    name: impl Fn(&str) -> Option<(String, &'static str)>,
) -> Result<Vec<Row>, String> {
    let child = Command::new(exec)
        .args(["-bind-to", &hydra_binding(ranks, cpus())])
        .args(["-n", &ranks.to_string()])
        .arg(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", exec.display()))?;
    let o = wait_bounded(child, Duration::from_secs(300))?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).trim().to_string());
    }
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<Row> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [what, bytes, m, p90, p99] = f[..] else {
                return None;
            };
            let (test, unit) = name(what)?;
            Some(Row {
                fabric: "shm".into(),
                test,
                bytes: bytes.parse().ok()?,
                unit: unit.into(),
                median: m.parse().ok()?,
                p90: p90.parse().ok()?,
                p99: p99.parse().ok()?,
                ratio: None,
            })
        })
        .collect();
    if rows.len() != want {
        return Err(format!("unexpected output: {text:?}"));
    }
    Ok(rows)
}

/// Hydra's `-bind-to` value that puts rank *r* on core *r* (modulo `cpus`), where
/// [`crate::programs::pin`] puts Volley's rank *r*.
fn hydra_binding(ranks: u16, cpus: usize) -> String {
    let cores: Vec<String> = (0..ranks as usize)
        .map(|r| (r % cpus).to_string())
        .collect();
    format!("user:{}", cores.join(","))
}

/// `cmd`, to run pinned to core `rank` (modulo the cores there are), as
/// [`crate::programs::pin`] pins rank `rank`.
fn pinned(mut cmd: Command, rank: usize) -> Command {
    let cpu = rank % cpus();
    // SAFETY: runs in the child between fork and exec and calls only `pin_to`,
    // which is async-signal-safe; a failure leaves the child unpinned.
    unsafe {
        cmd.pre_exec(move || {
            pin_to(cpu);
            Ok(())
        });
    }
    cmd
}

/// One `ucx_perftest` test between a server and a client on loopback: the median
/// latency (microseconds) of a latency test, the average bandwidth (MB/s, from
/// UCX's MiB/s) of a bandwidth test.
fn ucx_perftest(exe: &Path, tls: &str, test: &str, bytes: usize, n: usize) -> Result<f64, String> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port()
            .to_string();
        // The server answers, as Volley's rank 1 does; the client measures (rank 0).
        let server = pinned(Command::new(exe), 1)
            .args(["-p", &port])
            .env("UCX_TLS", tls)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        std::thread::sleep(Duration::from_millis(300));
        let client = pinned(Command::new(exe), 0)
            .args(["127.0.0.1", "-p", &port, "-t", test])
            .args(["-s", &bytes.to_string(), "-n", &n.to_string()])
            .env("UCX_TLS", tls)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let out = wait_bounded(client, Duration::from_secs(120));
        let _ = wait_bounded(server, Duration::from_secs(5));
        let out = out?;
        let text = String::from_utf8_lossy(&out.stdout);
        // "Final: iters lat50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall"
        if let Some(f) = text.lines().find_map(|l| l.trim().strip_prefix("Final:")) {
            let v: Vec<f64> = f
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if v.len() >= 6 {
                return Ok(if test.ends_with("lat") {
                    v[1]
                } else {
                    v[4] * 1.048_576
                });
            }
        }
        last = String::from_utf8_lossy(&out.stderr).trim().to_string();
    }
    Err(format!("no result: {last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_copies_large_messages_once_beside_shm() {
        assert_eq!(ucx_tls("shm", 8), "posix,self");
        assert_eq!(ucx_tls("shm", 1 << 20), "posix,cma,self");
        assert_eq!(ucx_tls("udp", 1 << 20), "tcp");
        assert_eq!(ucx_tls("eth", 8), "tcp");
    }

    #[test]
    fn peers_run_on_the_cores_volleys_ranks_run_on() {
        assert_eq!(hydra_binding(2, 16), "user:0,1");
        assert_eq!(hydra_binding(4, 2), "user:0,1,0,1");
        assert_eq!(hydra_binding(1, 1), "user:0");
        // A child started through `pinned` may run on its one core alone (where this
        // process may use that core: under a narrower CPU set, as `pin`, it is not
        // pinned).
        // SAFETY: a zeroed cpu_set_t is a valid empty set that sched_getaffinity fills.
        let allowed = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            set
        };
        for rank in [0, 1] {
            // SAFETY: reads a bit of a valid set.
            if !unsafe { libc::CPU_ISSET(rank % cpus(), &allowed) } {
                eprintln!("core {} is outside this process's CPU set", rank % cpus());
                continue;
            }
            let out = pinned(Command::new("sh"), rank)
                .args(["-c", "grep Cpus_allowed_list /proc/self/status"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let list = text.split(':').nth(1).unwrap_or("").trim();
            assert_eq!(list, (rank % cpus()).to_string(), "{text}");
        }
    }
}
