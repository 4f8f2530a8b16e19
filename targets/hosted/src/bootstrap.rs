//! Who am I, how many are we, and which job is this?
//!
//! Sources, in order of preference: our launcher (`VOLLEY_RANK`, `VOLLEY_SIZE`,
//! `VOLLEY_JOB`); MPICH/Hydra `mpiexec` (`PMI_RANK`, `PMI_SIZE`); Open MPI
//! (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`); Slurm (`SLURM_PROCID`,
//! `SLURM_NTASKS`); and a hosts list (`--hosts a,b,c`, a hosts file, or `VOLLEY_HOSTS`;
//! GAMMA's node list and LFC's `-lfc-hosts`), where the rank is this host's index.
//! Missing or contradictory settings are one clear error line.

use std::fmt;

/// Where the rank came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `volley run`.
    Launcher,
    /// MPICH / Hydra `mpiexec`.
    Pmi,
    /// Open MPI `mpirun`.
    OpenMpi,
    /// Slurm `srun`.
    Slurm,
    /// A hosts list.
    Hosts,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Launcher => "volley launcher",
            Source::Pmi => "PMI (mpiexec)",
            Source::OpenMpi => "Open MPI",
            Source::Slurm => "Slurm",
            Source::Hosts => "hosts list",
        })
    }
}

/// This process's place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    /// Rank, `0..size`.
    pub rank: u16,
    /// Number of ranks.
    pub size: u16,
    /// Job identifier, the same in every rank: names the shared region, keys the frames.
    pub job: u64,
    /// Where the rank came from.
    pub source: Source,
    /// Host of each rank, if a hosts list was given (UDP peers live there): the
    /// list with `host:N` entries expanded ([`crate::hosts`]), each `name` or
    /// `name=MAC` ([`host_name`]).
    pub hosts: Vec<String>,
    /// The job secret ([`crate::secret`]), if one reached this rank.
    pub secret: Option<crate::secret::Secret>,
    /// Which hosts-list entry this rank is, and how it was matched (one line;
    /// printed at start with `VOLLEY_VERBOSE=1`).
    pub said: Option<String>,
}

/// A bootstrap failure: one line saying what is missing or contradicts what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootError(pub String);

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "volley bootstrap: {}", self.0)
    }
}

impl std::error::Error for BootError {}

fn err<T>(msg: impl Into<String>) -> Result<T, BootError> {
    Err(BootError(msg.into()))
}

fn number(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, BootError> {
    match env(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => err(format!("{name}={v:?} is not a number")),
        },
    }
}

/// Parses a job id: decimal, or hex with `0x`.
pub fn parse_job(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// The host name of a hosts-list entry: `name`, or `name=MAC` where the entry also
/// gives the MAC address the `eth` fabric reaches that rank at.
pub fn host_name(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(name, _)| name)
}

/// Splits a hosts list: commas or whitespace (one per line in a file), `#` comments.
pub fn parse_hosts(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Works out the rank from `env` (a lookup, `std::env::var` in real use), an optional
/// hosts list ([`crate::hosts`]), this host (`this`: its name and addresses), the
/// parent process id (the job id under a launcher that sets none, e.g. Hydra on one
/// host), and `claim(job, slot)`, which takes the `slot`-th rank of this host for
/// this process where a hosts list gives it several and no launcher says which.
pub fn detect(
    env: &dyn Fn(&str) -> Option<String>,
    hosts: Option<Vec<String>>,
    this: &crate::hosts::ThisHost<'_>,
    parent_pid: u32,
    claim: &mut dyn FnMut(u64, usize) -> bool,
) -> Result<Boot, BootError> {
    let hosts = match hosts {
        Some(h) => Some(h),
        None => env("VOLLEY_HOSTS").map(|v| parse_hosts(&v)),
    };
    let pairs = [
        (Source::Launcher, "VOLLEY_RANK", "VOLLEY_SIZE"),
        (Source::Pmi, "PMI_RANK", "PMI_SIZE"),
        (
            Source::OpenMpi,
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
        ),
        (Source::Slurm, "SLURM_PROCID", "SLURM_NTASKS"),
    ];
    let mut found = None;
    for (source, r, s) in pairs {
        match (number(env, r)?, number(env, s)?) {
            (Some(rank), Some(size)) => {
                found = Some((source, rank, size));
                break;
            }
            (Some(_), None) => return err(format!("{r} is set but {s} is not")),
            (None, Some(_)) if source != Source::Slurm => {
                return err(format!("{s} is set but {r} is not"))
            }
            _ => {}
        }
    }
    // One entry per rank (`host:N` expanded).
    let hosts = match hosts {
        Some(list) => Some((crate::hosts::expand(&list)?.0, list)),
        None => None,
    };
    let mut said = None;
    let (source, rank, size) =
        match (found, &hosts) {
            (Some(f), _) => f,
            (None, Some((ranks, list))) => {
                let size = ranks.len() as u64;
                let job = job_id(env, Source::Hosts, size, parent_pid)?;
                let mut local = None;
                for var in crate::hosts::LOCAL_RANK_VARS {
                    if let Some(k) = number(env, var)? {
                        local = Some((var, k));
                        break;
                    }
                }
                let (rank, _, line) =
                    crate::hosts::rank_from_list(list, this, local, &mut |slot| claim(job, slot))?;
                said = Some(line);
                (Source::Hosts, rank as u64, size)
            }
            (None, None) => return err(
                "no rank: start under `volley run`, mpiexec, srun, or give --hosts / VOLLEY_HOSTS",
            ),
        };
    if size == 0 || size > u16::MAX as u64 {
        return err(format!("job size {size} out of range"));
    }
    if rank >= size {
        return err(format!(
            "rank {rank} is not below the job size {size} ({source})"
        ));
    }
    if let Some((ranks, _)) = &hosts {
        if ranks.len() as u64 != size {
            return err(format!(
                "the hosts list has {} ranks but {source} says {size}",
                ranks.len()
            ));
        }
    }
    let job = job_id(env, source, size, parent_pid)?;
    Ok(Boot {
        rank: rank as u16,
        size: size as u16,
        job,
        source,
        hosts: hosts.map(|(ranks, _)| ranks).unwrap_or_default(),
        secret: None,
        said,
    })
}

/// The job id: `VOLLEY_JOB`, else what the source gives.
fn job_id(
    env: &dyn Fn(&str) -> Option<String>,
    source: Source,
    size: u64,
    parent_pid: u32,
) -> Result<u64, BootError> {
    Ok(match env("VOLLEY_JOB") {
        Some(v) => {
            parse_job(&v).ok_or_else(|| BootError(format!("VOLLEY_JOB={v:?} is not a job id")))?
        }
        None => match source {
            Source::Slurm => {
                let id = number(env, "SLURM_JOB_ID")?.unwrap_or(0);
                let step = number(env, "SLURM_STEP_ID")?.unwrap_or(0);
                (id << 16) ^ step ^ 0x51_0000_0000
            }
            Source::Launcher => return err("VOLLEY_RANK is set but VOLLEY_JOB is not"),
            // Ranks started by one mpiexec on one host share their parent (the proxy).
            // Across hosts, set VOLLEY_JOB (`mpiexec -genv VOLLEY_JOB 1234`).
            Source::Pmi | Source::OpenMpi => 0x50_0000_0000 ^ parent_pid as u64,
            Source::Hosts => 0x40_0000_0000 ^ size,
        },
    })
}

/// [`detect`] from the real environment.
pub fn from_env(hosts: Option<Vec<String>>) -> Result<Boot, BootError> {
    let env = |k: &str| std::env::var(k).ok();
    let name = hostname();
    let addrs = crate::hosts::interface_addrs();
    let this = crate::hosts::ThisHost {
        name: &name,
        addrs: &addrs,
        resolve: &crate::hosts::resolve,
    };
    // SAFETY: getppid has no preconditions and cannot fail.
    let ppid = unsafe { libc::getppid() } as u32;
    let mut boot = detect(&env, hosts, &this, ppid, &mut crate::hosts::claim_slot)?;
    // Once per job, not once per rank.
    if boot.rank == 0 {
        crate::vars::warn_unknown();
    }
    let verbose = crate::settings::env_integer("VOLLEY_VERBOSE", 0, 1)
        .map_err(|e| BootError(e.to_string()))?;
    if let (Some(line), Some(1)) = (boot.said.as_deref(), verbose) {
        eprintln!("volley: {line}");
    }
    boot.secret = crate::secret::load(boot.rank).map_err(|e| BootError(e.to_string()))?;
    Ok(boot)
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(vars: &[(&str, &str)], hosts: Option<&str>) -> Result<Boot, BootError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |k: &str| m.get(k).cloned();
        let no_dns = |_: &str| Vec::new();
        let this = crate::hosts::ThisHost {
            name: "b",
            addrs: &[],
            resolve: &no_dns,
        };
        detect(&env, hosts.map(parse_hosts), &this, 77, &mut |_, _| false)
    }

    #[test]
    fn order_of_preference() {
        let b = run(
            &[
                ("VOLLEY_RANK", "2"),
                ("VOLLEY_SIZE", "4"),
                ("VOLLEY_JOB", "0x10"),
                ("PMI_RANK", "0"),
                ("PMI_SIZE", "4"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(
            (b.rank, b.size, b.job, b.source),
            (2, 4, 16, Source::Launcher)
        );
        let b = run(
            &[
                ("PMI_RANK", "1"),
                ("PMI_SIZE", "3"),
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "3"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(
            (b.rank, b.source, b.job),
            (1, Source::Pmi, 0x50_0000_0000 ^ 77)
        );
        let b = run(
            &[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")],
            None,
        )
        .unwrap();
        assert_eq!(b.source, Source::OpenMpi);
        let b = run(
            &[
                ("SLURM_PROCID", "3"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_JOB_ID", "99"),
            ],
            None,
        )
        .unwrap();
        assert_eq!((b.rank, b.source), (3, Source::Slurm));
        let b = run(&[], Some("a, b ,c")).unwrap();
        assert_eq!((b.rank, b.size, b.source), (1, 3, Source::Hosts));
        assert_eq!(b.hosts, ["a", "b", "c"]);
        let b = run(&[("VOLLEY_HOSTS", "# cluster\na\nb\n")], None).unwrap();
        assert_eq!((b.rank, b.size), (1, 2));
    }

    #[test]
    fn contradictions_are_one_clear_line() {
        let e = |v: &[(&str, &str)], h: Option<&str>| run(v, h).unwrap_err().to_string();
        assert!(e(&[], None).contains("no rank"));
        assert!(e(&[("VOLLEY_RANK", "1")], None).contains("VOLLEY_SIZE is not"));
        assert!(e(
            &[
                ("VOLLEY_RANK", "4"),
                ("VOLLEY_SIZE", "4"),
                ("VOLLEY_JOB", "1")
            ],
            None
        )
        .contains("not below"));
        assert!(e(&[("VOLLEY_RANK", "x"), ("VOLLEY_SIZE", "4")], None).contains("not a number"));
        assert!(
            e(&[("VOLLEY_RANK", "0"), ("VOLLEY_SIZE", "2")], None).contains("VOLLEY_JOB is not")
        );
        assert!(e(&[("PMI_RANK", "0"), ("PMI_SIZE", "4")], Some("a,b")).contains("2 ranks"));
        assert!(e(&[], Some("a,c")).contains("matches no entry"));
        assert!(e(&[], Some("b,b")).contains("all 2 ranks"));
        assert!(e(&[], Some("a,b:0")).contains("whole number"));
        assert!(
            e(&[("VOLLEY_LOCAL_RANK", "2")], Some("a,b:2")).contains("gives this host (b) 2 ranks")
        );
        assert!(e(&[("PMI_SIZE", "4")], None).contains("PMI_RANK is not"));
        for msg in [e(&[], None), e(&[], Some("a,c"))] {
            assert!(!msg.contains('\n'));
        }
    }
}
