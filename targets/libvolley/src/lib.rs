//! `libvolley.so` and `libvolley.a`: every `extern "C"` entry point and variable of
//! [`volley_capi`] (GAMMA, LFC, Cheetah core and QNIX), exported under the names the
//! headers in `targets/capi/include` declare. Build it with
//! `cargo build --release -p libvolley`; `volley.pc` is written next to it.

pub use volley_capi::*;
