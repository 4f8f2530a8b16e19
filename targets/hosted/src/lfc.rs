//! An LFC process on a hosted fabric: the seed's run-time options, start-up, and
//! interrupt delivery.
//!
//! # Options
//!
//! [`parse_args`] takes the `-lfc-*` options out of the argument list, as `lfc_init`
//! does; each can also be given as `LFC_<PARAM>` in the environment (`-lfc-tree
//! chain` is `LFC_TREE=chain`, a flag is `LFC_NO_INTR=1`), except `-lfc-hosts` and
//! `-lfc-routes`, which are `HOSTS` and `ROUTES`. The command line wins. With
//! `HOSTS` set and no `-lfc-use-hosts`, `argv[1]` and `argv[2]` are the rank and the
//! number of processes (and are removed). A bad value is one line naming it.
//!
//! Ranks come from our bootstrap first (`volley run`, `mpiexec`, Slurm), then from
//! `-lfc-hosts`/`HOSTS`; with none of them the program is a job of one, which sends
//! to itself (the seed's one-node case).
//!
//! # Interrupts
//!
//! A Linux process gets no interrupt from a NIC, so [`Interrupts`] runs a progress
//! thread: while the program has interrupts enabled and has not polled for
//! `-lfc-intr-first` microseconds (the polling watchdog), it takes the process's lock
//! and drains the network, running the upcalls on its own thread, then waits
//! `-lfc-interval` before the next one. A program that polls, or that is inside any
//! LFC call (which holds the lock), is never interrupted; with interrupts disabled
//! the thread sleeps on a condition variable and costs nothing. Cost: an interrupt
//! is noticed within about one interval (a timed sleep, with the thread's timer
//! slack set to 1 us) plus a thread wake-up, several microseconds against a poll's
//! fraction of one; the upcall runs on another thread, so the program's data
//! shared with it must be `volatile`/atomic, as the seed's example has it.

// What a program needs of the core's lfc beside this module's start-up, so that
// it depends on this crate alone.
pub use volley_core::engine::{Error, PacketId};
pub use volley_core::lfc::*;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::clock::HostClock;
use volley_core::time::Duration;

use crate::bootstrap::{self, Boot, Source};
use crate::node::{engine_setup, HostDevice};
use crate::{Fabric, HostError};

/// An LFC process of a hosted job.
pub type HostLfc<S> = Lfc<'static, HostDevice, HostClock, S>;

/// What `lfc_init` found on the command line and in the environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// Personality options.
    pub options: Options,
    /// `-lfc-hosts` / `HOSTS`.
    pub hosts: Option<Vec<String>>,
    /// `-lfc-use-hosts`: the rank comes from this host's place in `HOSTS`.
    pub use_hosts: bool,
    /// Rank and size from `argv[1]`, `argv[2]` (with `HOSTS`).
    pub rank_size: Option<(u16, u16)>,
    /// `-lfc-lcp`: accepted; there is no NIC control program to load.
    pub lcp: Option<String>,
    /// `-lfc-routes` / `ROUTES`: accepted; the fabrics route by themselves.
    pub routes: Option<String>,
}

/// The options that take a value, by name after `-lfc-`.
const VALUED: [&str; 7] = [
    "hosts",
    "ring-frames",
    "interval",
    "intr-first",
    "lcp",
    "tree",
    "routes",
];
/// The flags.
const FLAGS: [&str; 4] = ["use-hosts", "verbose", "no-intr", "stats"];

fn env_name(param: &str) -> String {
    match param {
        "hosts" => "HOSTS".into(),
        "routes" => "ROUTES".into(),
        p => format!("LFC_{}", p.to_uppercase().replace('-', "_")),
    }
}

fn micros(name: &str, v: &str) -> Result<Duration, HostError> {
    match v.trim().parse::<u64>() {
        Ok(us) if us <= 10_000_000 => Ok(Duration::from_micros(us)),
        _ => Err(HostError::Bootstrap(format!(
            "lfc_init: {name} {v:?}: expected microseconds, 0 to 10000000"
        ))),
    }
}

/// Takes the `-lfc-*` options (and, with `HOSTS`, the rank and size) out of `args`
/// (`args[0]` is the program) and reads the `LFC_*` variables through `env`.
pub fn parse_args(
    args: &mut Vec<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, HostError> {
    let mut given: Vec<(String, Option<String>)> = Vec::new();
    let mut kept = Vec::with_capacity(args.len());
    let mut it = std::mem::take(args).into_iter();
    if let Some(a0) = it.next() {
        kept.push(a0);
    }
    while let Some(a) = it.next() {
        let Some(name) = a.strip_prefix("-lfc-") else {
            kept.push(a);
            continue;
        };
        if FLAGS.contains(&name) {
            given.push((name.to_string(), None));
        } else if VALUED.contains(&name) {
            let v = it.next().ok_or_else(|| {
                HostError::Bootstrap(format!("lfc_init: -lfc-{name} needs a value"))
            })?;
            given.push((name.to_string(), Some(v)));
        } else {
            return Err(HostError::Bootstrap(format!(
                "lfc_init: unknown option -lfc-{name} (known: {}, {})",
                VALUED.join(", "),
                FLAGS.join(", ")
            )));
        }
    }
    // The environment first, so that the command line overrides it.
    let mut all: Vec<(String, Option<String>, String)> = Vec::new();
    for p in VALUED {
        if let Some(v) = env(&env_name(p)) {
            all.push((p.to_string(), Some(v), env_name(p)));
        }
    }
    for p in FLAGS {
        if let Some(v) = env(&env_name(p)) {
            let on = !matches!(v.trim(), "" | "0" | "no" | "false");
            if on {
                all.push((p.to_string(), None, env_name(p)));
            }
        }
    }
    for (p, v) in given {
        let shown = format!("-lfc-{p}");
        all.push((p, v, shown));
    }
    let mut s = Settings::default();
    for (p, v, shown) in all {
        let v = v.unwrap_or_default();
        match p.as_str() {
            "hosts" => {
                let list = bootstrap::parse_hosts(&v.replace(',', " "));
                if list.is_empty() {
                    return Err(HostError::Bootstrap(format!(
                        "lfc_init: {shown}: empty hosts list"
                    )));
                }
                s.hosts = Some(list);
            }
            "ring-frames" => {
                s.options.ring_frames = match v.trim().parse::<usize>() {
                    Ok(n) if (1..=0x7FFF).contains(&n) => n,
                    _ => {
                        return Err(HostError::Bootstrap(format!(
                            "lfc_init: {shown} {v:?}: expected a number of packets, 1 to 32767"
                        )))
                    }
                }
            }
            "interval" => s.options.interval = micros(&shown, &v)?,
            "intr-first" => s.options.intr_first = micros(&shown, &v)?,
            "tree" => {
                s.options.tree = match v.trim() {
                    "binary" | "bst" => Tree::Binary,
                    "binomial" => Tree::Binomial,
                    "chain" => Tree::Chain,
                    _ => {
                        return Err(HostError::Bootstrap(format!(
                            "lfc_init: {shown} {v:?}: expected binary, binomial or chain"
                        )))
                    }
                }
            }
            "lcp" => s.lcp = Some(v),
            "routes" => s.routes = Some(v),
            "use-hosts" => s.use_hosts = true,
            "verbose" => s.options.verbose = true,
            "no-intr" => s.options.no_intr = true,
            "stats" => s.options.stats = true,
            _ => {}
        }
    }
    // Seed: with HOSTS set, argv[1] is the rank and argv[2] the number of processes.
    if env("HOSTS").is_some() && !s.use_hosts && !launched(env) {
        let num = |i: usize, what: &str| -> Result<u16, HostError> {
            kept.get(i)
                .and_then(|a| a.parse::<u16>().ok())
                .ok_or_else(|| {
                    HostError::Bootstrap(format!(
                        "lfc_init: HOSTS is set, so argv[{i}] must be the {what} (or give -lfc-use-hosts)"
                    ))
                })
        };
        let (rank, size) = (num(1, "rank")?, num(2, "number of processes")?);
        if size == 0 || rank >= size {
            return Err(HostError::Bootstrap(format!(
                "lfc_init: rank {rank} is not below the number of processes {size}"
            )));
        }
        kept.drain(1..3);
        s.rank_size = Some((rank, size));
    }
    *args = kept;
    Ok(s)
}

/// Whether a launcher gives this process its rank.
pub(crate) fn launched(env: &dyn Fn(&str) -> Option<String>) -> bool {
    [
        "VOLLEY_RANK",
        "PMI_RANK",
        "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .any(|k| env(k).is_some())
}

/// This rank's place in the job from the settings and the environment.
pub fn boot(s: &Settings) -> Result<Boot, HostError> {
    let env = |k: &str| std::env::var(k).ok();
    let e = |e: bootstrap::BootError| HostError::Bootstrap(format!("lfc_init: {}", e.0));
    if launched(&env) {
        return bootstrap::from_env(s.hosts.clone()).map_err(e);
    }
    let hosts = s.hosts.clone();
    if let Some((rank, size)) = s.rank_size {
        // One entry per process (`host:N` expanded).
        let hosts = match hosts {
            Some(h) => crate::hosts::expand(&h).map_err(e)?.0,
            None => Vec::new(),
        };
        if !hosts.is_empty() && hosts.len() != size as usize {
            return Err(HostError::Bootstrap(format!(
                "lfc_init: HOSTS names {} processes but argv[2] says {size}",
                hosts.len()
            )));
        }
        let job = match env("VOLLEY_JOB") {
            Some(v) => bootstrap::parse_job(&v).ok_or_else(|| {
                HostError::Bootstrap(format!("lfc_init: VOLLEY_JOB={v:?} is not a job id"))
            })?,
            None => 0x40_0000_0000 ^ size as u64,
        };
        let secret = crate::secret::load(rank)?;
        return Ok(Boot {
            rank,
            size,
            job,
            source: Source::Hosts,
            hosts,
            secret,
            said: None,
        });
    }
    if hosts.is_some() || env("VOLLEY_HOSTS").is_some() {
        return bootstrap::from_env(hosts).map_err(e);
    }
    // No launcher and no hosts: a job of one (it sends to itself).
    Ok(Boot {
        rank: 0,
        size: 1,
        job: crate::launcher::new_job_id(),
        source: Source::Launcher,
        hosts: Vec::new(),
        secret: crate::secret::Secret::generate().ok(),
        said: None,
    })
}

/// `lfc_init` for this rank: the fabric from `VOLLEY_FABRIC` (shm by default).
pub fn lfc<S>(
    boot: &Boot,
    fabric: Fabric,
    options: Options,
    upcall: Upcall<'static, HostDevice, HostClock, S>,
    state: S,
) -> Result<HostLfc<S>, HostError> {
    let (groups, cfg, dev) = engine_setup(boot, fabric)?;
    let mut l = Lfc::init_alloc(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        options,
        upcall,
        state,
    )
    .map_err(|e| HostError::Bootstrap(format!("lfc_init: {e}")))?;
    l.set_idle(Some(std::thread::yield_now));
    Ok(l)
}

/// The configuration as `lfc_print_config` prints it.
pub fn describe<S>(l: &HostLfc<S>, s: &Settings, fabric: Fabric) -> String {
    let o = l.options();
    let mut out = format!(
        "LFC (Volley): rank {} of {}, fabric {}, packet size {} bytes, {} send / {} receive packets, tree {:?}, interrupts {} (first {} us, interval {} us), statistics {}",
        l.my_proc(),
        l.nr_procs(),
        fabric.name(),
        l.packet_size(),
        o.send_packets,
        o.ring_frames,
        o.tree,
        if o.no_intr { "off" } else { "progress thread" },
        o.intr_first.total_micros(),
        o.interval.total_micros(),
        if o.stats { "on" } else { "off" },
    );
    if let Some(f) = &s.lcp {
        out += &format!("; -lfc-lcp {f} ignored (no NIC control program)");
    }
    if let Some(f) = &s.routes {
        out += &format!("; routes {f} ignored (the fabric routes)");
    }
    out
}

/// The progress thread that delivers interrupts to one process.
#[derive(Debug)]
pub struct Interrupts {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    /// Notified when the program enables interrupts (and at stop).
    wake: Condvar,
    lock: Mutex<()>,
}

impl Interrupts {
    /// Starts the thread for `lfc`. `take(&mut l)` takes an interrupt if one is due
    /// (usually [`Lfc::interrupt`] or a C facade's equivalent) and returns whether
    /// interrupts are enabled.
    pub fn start<T: Send + 'static>(
        lfc: Arc<Mutex<T>>,
        period: Duration,
        take: fn(&mut T) -> bool,
    ) -> Interrupts {
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let period = std::time::Duration::from_nanos(period.total_nanos().max(1_000));
        let thread = std::thread::Builder::new()
            .name("lfc-interrupts".into())
            .spawn(move || {
                // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's slack.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64) };
                while !sh.stop.load(Ordering::Acquire) {
                    let enabled = match lfc.try_lock() {
                        Ok(mut l) => take(&mut l),
                        // The program is inside an LFC call: it is polling.
                        Err(_) => true,
                    };
                    if enabled {
                        std::thread::sleep(period);
                    } else {
                        let g = sh.lock.lock().unwrap_or_else(|p| p.into_inner());
                        if !sh.stop.load(Ordering::Acquire) {
                            let _ = sh
                                .wake
                                .wait_timeout(g, std::time::Duration::from_millis(20));
                        }
                    }
                }
            })
            .expect("spawn the interrupt thread");
        Interrupts {
            shared,
            thread: Some(thread),
        }
    }

    /// The program enabled interrupts: wake the thread now.
    pub fn enabled(&self) {
        let _g = self.shared.lock.lock();
        self.shared.wake.notify_all();
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.enabled();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<(Settings, Vec<String>), HostError> {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let look = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let s = parse_args(&mut a, &look)?;
        Ok((s, a))
    }

    #[test]
    fn options_from_argv_are_removed() {
        let (s, rest) = parse(
            &[
                "latency",
                "-nsend",
                "5",
                "-lfc-tree",
                "chain",
                "-lfc-no-intr",
                "-lfc-hosts",
                "a,b",
                "-lfc-interval",
                "30",
                "-size",
                "8",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(rest, ["latency", "-nsend", "5", "-size", "8"]);
        assert_eq!(s.options.tree, Tree::Chain);
        assert!(s.options.no_intr);
        assert_eq!(s.hosts, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(s.options.interval, Duration::from_micros(30));
    }

    #[test]
    fn options_from_the_environment_and_argv_wins() {
        let (s, _) = parse(
            &["p", "-lfc-tree", "binomial"],
            &[
                ("LFC_TREE", "chain"),
                ("LFC_RING_FRAMES", "64"),
                ("LFC_INTR_FIRST", "7"),
                ("LFC_VERBOSE", "1"),
                ("LFC_STATS", "0"),
                ("ROUTES", "/etc/routes.lfc"),
            ],
        )
        .unwrap();
        assert_eq!(s.options.tree, Tree::Binomial);
        assert_eq!(s.options.ring_frames, 64);
        assert_eq!(s.options.intr_first, Duration::from_micros(7));
        assert!(s.options.verbose && !s.options.stats);
        assert_eq!(s.routes.as_deref(), Some("/etc/routes.lfc"));
    }

    #[test]
    fn hosts_variable_takes_rank_and_size_from_argv() {
        let (s, rest) = parse(&["p", "1", "2", "-nsend", "9"], &[("HOSTS", "n0 n1")]).unwrap();
        assert_eq!(s.rank_size, Some((1, 2)));
        assert_eq!(rest, ["p", "-nsend", "9"]);
        // -lfc-use-hosts: the rank comes from the host's place, argv is left alone.
        let (s, rest) = parse(&["p", "1", "2", "-lfc-use-hosts"], &[("HOSTS", "n0 n1")]).unwrap();
        assert_eq!(s.rank_size, None);
        assert_eq!(rest, ["p", "1", "2"]);
    }

    #[test]
    fn bad_values_are_one_line() {
        for (args, env, what) in [
            (&["p", "-lfc-tree", "star"][..], &[][..], "-lfc-tree"),
            (&["p", "-lfc-ring-frames", "0"], &[], "-lfc-ring-frames"),
            (&["p", "-lfc-interval", "-5"], &[], "-lfc-interval"),
            (&["p", "-lfc-bogus"], &[], "-lfc-bogus"),
            (&["p", "-lfc-hosts"], &[], "-lfc-hosts"),
            (&["p"], &[("LFC_TREE", "x")], "LFC_TREE"),
            (&["p", "x"], &[("HOSTS", "a b")], "argv[1]"),
            (&["p", "2", "2"], &[("HOSTS", "a b")], "rank 2"),
        ] {
            let e = parse(args, env).unwrap_err().to_string();
            assert!(e.contains(what) && !e.contains('\n'), "{args:?}: {e}");
        }
    }
}
