//! `volley-hosted`: Volley inside a Linux process.
//!
//! - [`bootstrap`]: rank, size and job from our launcher, `mpiexec`, Open MPI, Slurm
//!   or a hosts list;
//! - fabrics, each a core device: [`shm::ShmDevice`] (the Myrinet-like NIC model on
//!   `/dev/shm`), [`udp::UdpDevice`] and [`eth::EthDevice`] (raw Ethernet, with
//!   [`xdp`] for `AF_XDP`), behind [`HostDevice`];
//! - [`node`]: a GAMMA process on them; [`lfc`]: an LFC process, its options and its
//!   interrupts (a progress thread with the polling watchdog);
//! - [`clmul`]: POLYVAL with 256-bit carry-less multiplication for long frame tags;
//! - [`launcher`]: `volley run`.
//!
//! The tools (the demo, the benchmark, its plots and peers, the test programs) are
//! the `volley` command's, in `volley-cli`.

use std::fmt;

pub mod beacon;
pub mod bootstrap;
pub mod cheetah;
pub mod clmul;
pub mod clock;
pub mod direct;
pub mod eth;
pub mod hosts;
pub mod image;
pub mod launcher;
pub mod lfc;
pub mod node;
pub mod pmi;
pub mod procmem;
pub mod qnix;
pub mod secret;
pub mod settings;
pub mod shm;
pub mod stream_copy;
mod sys;
pub mod udp;
pub mod vars;
pub mod wakeup;
pub mod xdp;

/// A hosted-side failure. Each variant says where it arose; `Display` gives the
/// one line to show a user. The engine's own errors keep their type.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostError {
    /// A setting (`VOLLEY_*`, an option) has a value outside its range, or is
    /// missing where it is needed.
    Setting(String),
    /// This rank could not find its place in its job: its rank and size, its hosts
    /// list entry, the job's secret.
    Bootstrap(String),
    /// The fabric could not be opened or used: the shared region, a socket, an
    /// interface, the start-up exchange, a system call.
    Fabric(String),
    /// The engine refused a call or reported a failure (a peer that died is
    /// `Engine(Error::SendFailure)` or the personality's equivalent).
    Engine(volley_core::engine::Error),
    /// Anything else (the tools of the `volley` command, a C facade).
    Other(String),
}

impl HostError {
    /// The engine's error, where this is one.
    pub fn engine(&self) -> Option<volley_core::engine::Error> {
        match self {
            HostError::Engine(e) => Some(*e),
            _ => None,
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Setting(m)
            | HostError::Bootstrap(m)
            | HostError::Fabric(m)
            | HostError::Other(m) => f.write_str(m),
            HostError::Engine(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for HostError {}

impl From<volley_core::engine::Error> for HostError {
    fn from(e: volley_core::engine::Error) -> Self {
        HostError::Engine(e)
    }
}

impl From<bootstrap::BootError> for HostError {
    fn from(e: bootstrap::BootError) -> Self {
        HostError::Bootstrap(e.0)
    }
}

/// Which fabric a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    /// The Myrinet-like NIC model on shared memory (one machine).
    Shm,
    /// UDP sockets (loopback or across machines).
    Udp,
    /// Raw Ethernet frames through a packet socket (across machines on one LAN).
    Eth,
}

impl Fabric {
    /// The name used on the command line and in `VOLLEY_FABRIC`.
    pub fn name(self) -> &'static str {
        match self {
            Fabric::Shm => "shm",
            Fabric::Udp => "udp",
            Fabric::Eth => "eth",
        }
    }

    /// From its name.
    pub fn parse(name: &str) -> Option<Fabric> {
        match name {
            "shm" => Some(Fabric::Shm),
            "udp" => Some(Fabric::Udp),
            "eth" => Some(Fabric::Eth),
            _ => None,
        }
    }

    /// From `VOLLEY_FABRIC`, defaulting to `shm`.
    pub fn from_env() -> Result<Fabric, HostError> {
        match std::env::var("VOLLEY_FABRIC") {
            Err(std::env::VarError::NotPresent) => Ok(Fabric::Shm),
            Err(std::env::VarError::NotUnicode(v)) => Err(HostError::Setting(format!(
                "VOLLEY_FABRIC={v:?}: expected shm, udp or eth"
            ))),
            Ok(v) => Fabric::parse(&v).ok_or_else(|| {
                HostError::Setting(format!("VOLLEY_FABRIC={v:?}: expected shm, udp or eth"))
            }),
        }
    }
}

pub use node::{HostDevice, HostGamma};

/// GAMMA's constants, handler context and errors (`volley_core::gamma`, and the
/// engine's `Error` its calls return), so that a program needs this crate alone.
pub mod gamma {
    pub use volley_core::engine::Error;
    pub use volley_core::gamma::*;
}

/// The context a handler of a hosted GAMMA process runs in: write handlers as
/// `fn on_message(up: &mut Upcall<MyState>)`.
pub type Upcall<'u, S> = volley_core::gamma::Upcall<'u, 'static, S>;

/// Sets an int socket option; `false` if the kernel refuses it.
pub(crate) fn set_int(
    fd: &impl std::os::fd::AsRawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> bool {
    // SAFETY: a valid socket (`fd` owns or borrows it) and an int option of the
    // right size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Boots this rank from the environment and returns its GAMMA instance: the one call
/// an embedding program makes (`gamma_init`).
///
/// The rank, size and job come from our launcher (`volley run`), `mpiexec`
/// (`PMI_*`), Open MPI (`OMPI_*`), Slurm (`SLURM_*`) or a hosts list
/// (`VOLLEY_HOSTS`), in that order; the fabric from `VOLLEY_FABRIC` (`shm` by
/// default, or `udp`). `state` is the value handlers share ([`Upcall::state`]).
///
/// ```
/// // A one-rank job, as `volley run -n 1` would start it.
/// std::env::set_var("VOLLEY_RANK", "0");
/// std::env::set_var("VOLLEY_SIZE", "1");
/// std::env::set_var("VOLLEY_JOB", format!("{:#x}", std::process::id() as u64 | 0xD0C << 32));
/// let mut g = volley_hosted::init(()).expect("rank starts");
/// assert_eq!((g.my_node(), g.how_many_nodes()), (0, 1));
/// g.sync().expect("a barrier of one");
/// g.exit();
/// ```
pub fn init<S>(state: S) -> Result<HostGamma<S>, HostError> {
    let boot = bootstrap::from_env(None)?;
    let fabric = Fabric::from_env()?;
    node::gamma(&boot, fabric, state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use volley_core::engine::Error;

    /// A program can tell a dead peer from a bad setting without reading text.
    #[test]
    fn errors_keep_their_kind_and_the_engines_its_type() {
        let e: HostError = Error::SendFailure.into();
        assert_eq!(e, HostError::Engine(Error::SendFailure));
        assert_eq!(e.engine(), Some(Error::SendFailure));
        assert_eq!(e.to_string(), Error::SendFailure.to_string());
        let boot: HostError = bootstrap::BootError("no rank".into()).into();
        assert!(matches!(boot, HostError::Bootstrap(ref m) if m == "no rank"));
        assert_eq!(boot.engine(), None);
        let bad =
            HostError::Setting(settings::integer("VOLLEY_PORT", "1", 1024, 65_535).unwrap_err());
        assert!(bad.to_string().contains("VOLLEY_PORT"));
        let dyn_err: &dyn std::error::Error = &bad;
        assert!(dyn_err.to_string().starts_with("VOLLEY_PORT"));
    }
}
