//! `volley-core`: the sans-IO protocol engine of Volley.
//!
//! Everything here is a state machine driven from outside: frames come in through
//! [`phy::Device`] tokens, time comes in as [`time::Instant`] arguments, and the
//! engine never reads a clock, spawns a thread or allocates on the data path.
//! Tables are sized once, from caller storage or (with `alloc`) from a `Vec`.
//!
//! Layers, bottom up:
//! - [`wire`]: the frame format (`Packet` views plus `Repr::parse/emit`), CRC-32C.
//! - [`phy`]: the token device interface, an in-memory [`phy::Loopback`], the
//!   seeded [`phy::FaultInjector`] and (with `std`) a pcap writer.
//! - [`engine`]: per-peer channels (sliding window, cumulative and selective
//!   acks, retransmission with back-off, credits), fragmentation straight into
//!   posted user buffers, ports, semaphores, handlers, groups and the barrier.
//! - [`gamma`], [`lfc`], `cheetah` and `qnix` (with `alloc`): the personalities, named after
//!   the functions of their seeds.
//! - `sim` (with the `sim` feature): the deterministic multi-node simulator used by tests.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

/// Data-path tracing: compiled out unless the `trace` feature is on.
macro_rules! trace {
    ($($arg:tt)*) => {
        #[cfg(feature = "trace")]
        std::eprintln!($($arg)*);
    };
}

#[cfg(feature = "alloc")]
pub mod cheetah;
pub mod endpoint;
pub mod engine;
pub mod gamma;
pub mod idle;
pub mod lfc;
pub mod phy;
#[cfg(feature = "alloc")]
pub mod qnix;
pub mod rng;
pub mod session;
#[cfg(feature = "sim")]
pub mod sim;
pub mod time;
pub mod wire;

/// Address of an endpoint (a process) on the fabric: the index a device uses to reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeAddr(pub u16);

/// A process group's "parallel pid" (GAMMA) or application id (QNIX).
pub type GroupId = u16;
/// An instance number inside a group, `0..n`.
pub type NodeId = u16;
/// A port number. GAMMA uses `0..=1024`.
pub type PortId = u16;
