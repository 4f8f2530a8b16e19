//! A Cheetah core context on a hosted fabric: `-np`, start-up, and the job a
//! program started by hand launches for itself.
//!
//! Ranks come from our bootstrap (`volley run`, `mpiexec`, Slurm, `VOLLEY_HOSTS`).
//! The seed lets a program start as one context and create the others in
//! `cheetah_core_setup`: started by hand with `-np N` (N > 1), the program becomes
//! the launcher of a local job of N copies of itself (same arguments, `-np`
//! removed) on `VOLLEY_FABRIC`, waits for them and exits with their status, each
//! output line prefixed by its context as `volley run` does. Under a launcher,
//! `-np` must agree with the number of ranks it started.

// What a program needs of the core's cheetah beside this module's start-up, so that
// it depends on this crate alone.
pub use volley_core::cheetah::*;
pub use volley_core::engine::Error;

use std::time::Duration;

use crate::clock::HostClock;
use volley_core::engine::Memory;

use crate::bootstrap::{self, Boot, Source};
use crate::launcher::{self, RunOptions};
use crate::lfc::launched;
use crate::node::{engine_setup, HostDevice};
use crate::{Fabric, HostError};

/// A Cheetah context of a hosted job, serving memory `M`.
pub type HostCheetah<M> = Cheetah<'static, HostDevice, HostClock, M>;

/// How this process goes on after `cheetah_core_setup` has read its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// It is a context of the job.
    Context(Boot),
    /// It was started by hand with `-np N`: it launches the job and exits.
    Launch(u16),
}

/// Takes `-np N` (also `-np=N`) out of `args` (`args[0]` is the program).
pub fn parse_args(args: &mut Vec<String>) -> Result<Option<u16>, HostError> {
    let mut np = None;
    let mut kept = Vec::with_capacity(args.len());
    let mut it = std::mem::take(args).into_iter();
    if let Some(a0) = it.next() {
        kept.push(a0);
    }
    while let Some(a) = it.next() {
        let v = if a == "-np" {
            it.next().ok_or_else(|| {
                HostError::Bootstrap("cheetah_core_setup: -np needs a number".into())
            })?
        } else if let Some(v) = a.strip_prefix("-np=") {
            v.to_string()
        } else {
            kept.push(a);
            continue;
        };
        np = Some(match v.trim().parse::<u16>() {
            Ok(n) if (1..=4096).contains(&n) => n,
            _ => {
                return Err(HostError::Bootstrap(format!(
                    "cheetah_core_setup: -np {v:?}: expected a number of contexts, 1 to 4096"
                )))
            }
        });
    }
    *args = kept;
    Ok(np)
}

/// This process's place: a context of a launched job, a job of one, or the
/// launcher of a local job of `np`.
pub fn start(np: Option<u16>) -> Result<Start, HostError> {
    let env = |k: &str| std::env::var(k).ok();
    let e = |e: bootstrap::BootError| HostError::Bootstrap(format!("cheetah_core_setup: {}", e.0));
    if launched(&env) || env("VOLLEY_HOSTS").is_some() {
        let b = bootstrap::from_env(None).map_err(e)?;
        if let Some(n) = np.filter(|&n| n != b.size) {
            return Err(HostError::Bootstrap(format!(
                "cheetah_core_setup: -np {n}, but the job was started with {} contexts",
                b.size
            )));
        }
        return Ok(Start::Context(b));
    }
    match np {
        Some(n) if n > 1 => Ok(Start::Launch(n)),
        _ => Ok(Start::Context(Boot {
            rank: 0,
            size: 1,
            job: launcher::new_job_id(),
            source: Source::Launcher,
            hosts: Vec::new(),
            secret: crate::secret::Secret::generate().ok(),
            said: None,
        })),
    }
}

/// Runs a local job of `np` copies of this program with `args` (`args[0]` is
/// ignored: the running executable is started); returns its exit code.
pub fn launch(np: u16, args: &[String], fabric: Fabric) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(p) => p.to_string_lossy().into_owned(),
        Err(e) => {
            eprintln!("cheetah_core_setup: cannot find this program to start it: {e}");
            return 2;
        }
    };
    let mut command = vec![exe];
    command.extend(args.iter().skip(1).cloned());
    launcher::run(&RunOptions {
        ranks: np,
        fabric,
        timeout: Duration::from_secs(24 * 3600),
        grace: Duration::from_secs(10),
        job: None,
        command,
        env: Vec::new(),
        rank0_only: false,
        unikernel: None,
        stdin: true,
    })
}

/// One line of a context's counters: its operations by direct copy and through
/// the fabric (`VOLLEY_CHEETAH_STATS=1` prints it at finalize), less the
/// invocations the library itself sent and took (`library`).
pub fn describe_stats(
    c: &HostCheetah<crate::procmem::ProcessMemory>,
    library: (u64, u64),
) -> String {
    let d = crate::direct::stats(c);
    let mut s = c.stats();
    // The library's own invocations (sent, taken) are not the program's.
    s.ainvokes = s.ainvokes.saturating_sub(library.0);
    s.handlers = s.handlers.saturating_sub(library.1);
    format!(
        "context {}: direct copies {} (puts {}, gets {}, {} bytes, {} refused; peers' tables read {} times, their maps {}); through the fabric: puts {}, gets {}; ainvokes {}, handlers {}",
        c.mycontext(),
        if crate::direct::is_on(c) { "on" } else { "off" },
        d.puts,
        d.gets,
        d.bytes,
        d.refused,
        d.table_reads,
        d.maps_reads,
        s.puts,
        s.gets,
        s.ainvokes,
        s.handlers
    )
}

/// The context for `boot` on `fabric`, serving `mem`.
pub fn cheetah<M: Memory>(
    boot: &Boot,
    fabric: Fabric,
    mem: M,
) -> Result<HostCheetah<M>, HostError> {
    let (groups, cfg, dev) = engine_setup(boot, fabric)?;
    let mut c = Cheetah::setup(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        mem,
    )
    .map_err(|e| HostError::Bootstrap(format!("cheetah_core_setup: {e}")))?;
    c.set_idle(Some(std::thread::yield_now));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(a: &[&str]) -> Result<(Option<u16>, Vec<String>), HostError> {
        let mut v: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        parse_args(&mut v).map(|n| (n, v))
    }

    #[test]
    fn np_is_taken_out() {
        assert_eq!(
            parse(&["p", "-np", "4", "x"]).unwrap(),
            (Some(4), vec!["p".into(), "x".into()])
        );
        assert_eq!(parse(&["p", "-np=2"]).unwrap().0, Some(2));
        assert_eq!(
            parse(&["p", "y"]).unwrap(),
            (None, vec!["p".into(), "y".into()])
        );
        for bad in [&["p", "-np"][..], &["p", "-np", "0"], &["p", "-np", "many"]] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("cheetah_core_setup: -np") && !e.contains('\n'),
                "{e}"
            );
        }
    }
}
