//! How start-up, barrier and broadcast grow with the number of hosts, on `udp` and
//! `eth`, with MPICH over the same hosts as the peer row, measured in the same run.
//! Each host is a network namespace on a bridge (`tests/netns`), with one rank; the
//! ranks are started by hand with a hosts list of addresses (the README's recipe),
//! MPICH's through `mpiexec -hosts` (its proxies enter the hosts' namespaces).
//!
//! - start-up: from starting the ranks to rank 0 leaving its first barrier (Volley:
//!   `volley worker startup`; MPICH: `MPI_Init` and `MPI_Barrier`, its launch
//!   through Hydra's proxies included), the median of `HOSTS_SCALE_RUNS` runs;
//! - barrier and broadcast (8 B, 16 KiB, 1 MiB): `volley worker bench-hosts
//!   --quick` against `mpi_coll.c`, measured as `volley bench` measures them.
//!
//! `cargo bench -p volley-cli --bench hosts_scale`; `HOSTS_SCALE_N` the host counts
//! (`2,4,8,16,32,64`), `HOSTS_SCALE_RUNS` start-ups per count (3). Root only. On a
//! machine with fewer cores than hosts the ranks share cores: the figures then show
//! how the protocols cope with that, not a cluster's latencies.

#[path = "../tests/netns/mod.rs"]
mod netns;

use netns::{wait_all, Hosts, Wiring};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use volley_cli::peers::{build_mpi, on_path, MPI_COLL, MPI_STARTUP};

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");

fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The `startup-done NANOS` a run printed, less `t0`: milliseconds.
fn startup_ms(out: &str, t0: u128) -> Option<f64> {
    let l = out.lines().find(|l| l.starts_with("startup-done "))?;
    let t: u128 = l["startup-done ".len()..].trim().parse().ok()?;
    Some(t.saturating_sub(t0) as f64 / 1e6)
}

/// MPICH's compiler and launcher, and the programs built with them.
struct Mpich {
    exec: PathBuf,
    startup: PathBuf,
    coll: PathBuf,
}

fn mpich(dir: &Path) -> Option<Mpich> {
    let cc = on_path("mpicc.mpich")?;
    Some(Mpich {
        exec: on_path("mpiexec.mpich")?,
        startup: build_mpi(dir, &cc, "mpi_startup", MPI_STARTUP).ok()?,
        coll: build_mpi(dir, &cc, "mpi_coll", MPI_COLL).ok()?,
    })
}

/// A Hydra launcher (`-launcher-exec`) that runs a proxy in the namespace of the
/// host whose address it is given.
fn launcher(dir: &Path, hosts: &Hosts) -> PathBuf {
    let path = dir.join(format!("enter-{}", hosts.hub()));
    let prefix = hosts.ns(0);
    let prefix = &prefix[..prefix.len() - 1];
    let script = format!(
        "#!/bin/sh\n# Hydra calls: [options] HOST COMMAND...\nwhile [ \"${{1#-}}\" != \"$1\" ]; do shift; done\nhost=$1; shift\nlast=${{host##*.}}; rest=${{host%.*}}; third=${{rest##*.}}\nexec ip netns exec {prefix}$((third * 200 + last - 1)) sh -c \"$*\"\n"
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    path
}

/// `program ARGS` under MPICH on every host (one rank each), from the hub, killed
/// after `limit`: what it printed.
fn mpirun(
    m: &Mpich,
    hosts: &Hosts,
    enter: &Path,
    program: &Path,
    args: &[String],
    limit: Duration,
) -> Option<String> {
    let list = hosts.list(|r| hosts.addr(r));
    let child = Command::new("ip")
        .args(["netns", "exec", &hosts.hub()])
        .arg(&m.exec)
        // Between hosts only: no shared memory (the namespaces share /dev/shm and
        // one kernel, which MPICH and UCX would otherwise use as one machine's).
        .args([
            "-genv",
            "MPIR_CVAR_NOLOCAL",
            "1",
            "-genv",
            "UCX_TLS",
            "tcp,self",
        ])
        .args(["-genv", "UCX_NET_DEVICES", "eth0"])
        .args(["-iface", "br0", "-launcher", "ssh", "-launcher-exec"])
        .arg(enter)
        .args(["-hosts", &list, "-n", &hosts.n.to_string()])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let (outs, took) = wait_all(vec![child], limit);
    let o = &outs[0];
    if !o.status.success() {
        // With more ranks than cores, MPICH's finalize may spin on long after its
        // figures are out: they are taken, said so.
        eprintln!(
            "mpich {} on {} hosts: {} after {took:?}",
            program.display(),
            hosts.n,
            o.status
        );
    }
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `volley worker PROGRAM ARGS --fabric F --hosts LIST` on every host; rank 0's
/// output, or `None` (said) if a rank failed.
fn volley_run(hosts: &Hosts, fabric: &str, key: &str, job: u64, argv: &[&str]) -> Option<String> {
    let list = hosts.list(|r| hosts.addr(r));
    let job = job.to_string();
    let env = [
        ("VOLLEY_KEY_FILE", key),
        ("VOLLEY_JOB", job.as_str()),
        ("VOLLEY_ETH_IF", "eth0"),
    ];
    let mut all = vec![VOLLEY, "worker"];
    all.extend_from_slice(argv);
    all.extend(["--fabric", fabric, "--hosts", &list]);
    let children = (0..hosts.n).map(|r| hosts.spawn(r, &all, &env)).collect();
    let (outs, _) = wait_all(children, Duration::from_secs(600));
    if let Some(o) = outs.iter().find(|o| !o.status.success()) {
        eprintln!("volley {fabric}: {}", netns::text(o).trim());
        return None;
    }
    Some(String::from_utf8_lossy(&outs[0].stdout).into_owned())
}

/// The (test, bytes, median) of the barrier and broadcast rows in CSV `text`
/// (`volley worker bench-collectives --csv`).
fn volley_coll(text: &str) -> Vec<(String, usize, f64)> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes());
    r.records()
        .filter_map(|rec| {
            let rec = rec.ok()?;
            let test = rec.get(1)?;
            let kind = if test.starts_with("barrier") {
                "barrier"
            } else if test.starts_with("broadcast") {
                "broadcast"
            } else {
                return None;
            };
            let bytes = rec.get(2)?.parse().ok()?;
            Some((kind.to_owned(), bytes, rec.get(4)?.parse().ok()?))
        })
        .collect()
}

/// The same from `mpi_coll`'s `barrier 0 M P90 P99` / `bcast BYTES M P90 P99` lines.
fn mpich_coll(text: &str) -> Vec<(String, usize, f64)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let kind = match *f.first()? {
                "barrier" => "barrier",
                "bcast" => "broadcast",
                _ => return None,
            };
            Some((
                kind.to_owned(),
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
            ))
        })
        .collect()
}

fn row(n: usize, fabric: &str, test: &str, unit: &str, v: f64, peer: Option<f64>) {
    let (p, ratio) = match peer {
        Some(p) => (format!("{p:>12.1}"), format!("{:>8.2}x", v / p)),
        None => (format!("{:>12}", "-"), format!("{:>9}", "-")),
    };
    println!("{n:>5}  {fabric:<4} {test:<22} {unit:<3} {v:>12.1} {p} {ratio}");
}

fn main() {
    if !netns::root() {
        return;
    }
    let counts: Vec<usize> = std::env::var("HOSTS_SCALE_N")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![2, 4, 8, 16, 32, 64]);
    let runs: usize = std::env::var("HOSTS_SCALE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "00112233445566778899aabbccddeeff\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key = key.to_str().unwrap().to_owned();
    let mpi = mpich(dir.path());
    if mpi.is_none() {
        eprintln!("MPICH (mpicc.mpich, mpiexec.mpich) not found: no peer rows");
    }
    let quick = volley_cli::bench::Sweep {
        quick: true,
        ..Default::default()
    };
    let iters = volley_cli::bench::collective_iters(quick).map(|n| n.to_string());
    println!(
        "{:>5}  {:<4} {:<22} {:<3} {:>12} {:>12} {:>9}",
        "hosts", "fab", "test", "", "volley", "MPICH", "vs MPICH"
    );
    let mut job = (std::process::id() as u64) << 16;
    for &n in &counts {
        let _s = netns::serial();
        let hosts = Hosts::new(n, Wiring::Bridge, false);
        let enter = launcher(dir.path(), &hosts);
        let peer_startup = mpi.as_ref().and_then(|m| {
            let v: Vec<f64> = (0..runs)
                .filter_map(|_| {
                    let t0 = epoch_ns();
                    let out = mpirun(m, &hosts, &enter, &m.startup, &[], Duration::from_secs(60))?;
                    startup_ms(&out, t0)
                })
                .collect();
            (!v.is_empty()).then(|| median(v))
        });
        let peer_coll = mpi
            .as_ref()
            .and_then(|m| mpirun(m, &hosts, &enter, &m.coll, &iters, Duration::from_secs(90)))
            .map(|t| mpich_coll(&t))
            .unwrap_or_default();
        for fabric in ["udp", "eth"] {
            let v: Vec<f64> = (0..runs)
                .filter_map(|_| {
                    job += 1;
                    let t0 = epoch_ns();
                    startup_ms(&volley_run(&hosts, fabric, &key, job, &["startup"])?, t0)
                })
                .collect();
            if !v.is_empty() {
                row(n, fabric, "start-up", "ms", median(v), peer_startup);
            }
            job += 1;
            let argv = ["bench-hosts", "--quick", "--csv"];
            let Some(text) = volley_run(&hosts, fabric, &key, job, &argv) else {
                continue;
            };
            for (kind, bytes, us) in volley_coll(&text) {
                let peer = peer_coll
                    .iter()
                    .find(|(k, b, _)| *k == kind && (*b == bytes || kind == "barrier"))
                    .map(|p| p.2);
                let test = if kind == "barrier" {
                    "barrier".to_owned()
                } else {
                    format!("broadcast {bytes} B")
                };
                row(n, fabric, &test, "us", us, peer);
            }
        }
    }
}
