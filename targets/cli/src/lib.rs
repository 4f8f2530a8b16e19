//! The `volley` command's tools, built on `volley-hosted`:
//!
//! - [`programs`]: the demo (the main job), the benchmark's rank program and the
//!   multi-process test programs `volley worker` runs inside each rank;
//! - [`bench`](mod@bench): `volley bench`, an OSU-style sweep with a same-run reference row;
//! - [`peers`]: MPICH and UCX measured beside Volley;
//! - [`plot`]: the sweep's charts;
//! - [`info`]: `volley info`, what this machine and build offer;
//! - [`install`]: `volley install`, the C library, its headers and `volley.pc`
//!   under a prefix.

pub mod bench;
pub mod info;
pub mod install;
pub mod peers;
pub mod plot;
pub mod programs;
