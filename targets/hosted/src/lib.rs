//! `volley-hosted`: Volley inside a Linux process.
//!
//! - [`bootstrap`]: rank, size and job from our launcher, `mpiexec`, Open MPI, Slurm
//!   or a hosts list;
//! - fabrics, each a core device: [`shm::ShmDevice`] (the Myrinet-like NIC model on
//!   `/dev/shm`) and [`udp::UdpDevice`], behind [`HostDevice`];
//! - [`node`]: a GAMMA process on them;
//! - [`launcher`]: `volley run`;
//! - [`programs`]: the demo, the benchmark and the test programs the `volley` command runs.

use std::fmt;

pub mod bench;
pub mod bootstrap;
pub mod launcher;
pub mod node;
pub mod programs;
pub mod shm;
pub mod udp;

/// A hosted-side failure, as one line of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError(pub String);

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostError {}

impl From<volley_core::engine::Error> for HostError {
    fn from(e: volley_core::engine::Error) -> Self {
        HostError(e.to_string())
    }
}

/// Which fabric a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fabric {
    /// The Myrinet-like NIC model on shared memory (one machine).
    Shm,
    /// UDP sockets (loopback or across machines).
    Udp,
}

impl Fabric {
    /// The name used on the command line and in `VOLLEY_FABRIC`.
    pub fn name(self) -> &'static str {
        match self {
            Fabric::Shm => "shm",
            Fabric::Udp => "udp",
        }
    }

    /// From `VOLLEY_FABRIC`, defaulting to `shm`.
    pub fn from_env() -> Result<Fabric, HostError> {
        match std::env::var("VOLLEY_FABRIC").as_deref() {
            Err(_) | Ok("shm") => Ok(Fabric::Shm),
            Ok("udp") => Ok(Fabric::Udp),
            Ok(other) => Err(HostError(format!(
                "VOLLEY_FABRIC={other:?}: expected shm or udp"
            ))),
        }
    }
}

pub use node::{HostDevice, HostGamma};
