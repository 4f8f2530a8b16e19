//! A QNIX process on a hosted fabric.
//!
//! `qx_init` takes no arguments to start processes with, so a QNIX job is started
//! by a launcher (`volley run`, `mpiexec`, Slurm, `VOLLEY_HOSTS`); a program started
//! by hand is a job of one process. Each process then registers its (AI, PI) with
//! every endpoint of the job: the names, not the ranks, say who is who, and several
//! applications may share one job.

// What a program needs of the core's qnix beside this module's start-up, so that
// it depends on this crate alone.
pub use volley_core::qnix::*;

use crate::clock::HostClock;
use volley_core::engine::Memory;

use crate::bootstrap::{self, Boot, Source};
use crate::launcher;
use crate::lfc::launched;
use crate::node::{engine_setup, HostDevice};
use crate::{Fabric, HostError};

/// A QNIX process of a hosted job, reaching program memory through `M`.
pub type HostQnix<M> = Qnix<'static, HostDevice, HostClock, M>;

/// This process's place: an endpoint of a launched job, or a job of one.
pub fn boot() -> Result<Boot, HostError> {
    let env = |k: &str| std::env::var(k).ok();
    if launched(&env) || env("VOLLEY_HOSTS").is_some() {
        return bootstrap::from_env(None)
            .map_err(|e| HostError::Bootstrap(format!("qx_init: {}", e.0)));
    }
    Ok(Boot {
        rank: 0,
        size: 1,
        job: launcher::new_job_id(),
        source: Source::Launcher,
        hosts: Vec::new(),
        secret: crate::secret::Secret::generate().ok(),
        said: None,
    })
}

/// The (unregistered) process for `boot` on `fabric`, reaching `mem`.
pub fn qnix<M: Memory>(boot: &Boot, fabric: Fabric, mem: M) -> Result<HostQnix<M>, HostError> {
    let (groups, cfg, dev) = engine_setup(boot, fabric)?;
    let mut q = Qnix::new(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        mem,
    )
    .map_err(|e| HostError::Bootstrap(format!("qx_init: {e}")))?;
    q.set_idle(Some(std::thread::yield_now));
    Ok(q)
}
