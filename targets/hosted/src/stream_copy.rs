//! How the `shm` fabric copies long frames into a peer's ring (and into its own
//! broadcast board, which every member reads): through the cache (a plain `memcpy`),
//! or with non-temporal stores that write whole lines to memory.
//!
//! Which is faster depends on where the peer's core sits. Measured on a 2-core AMD EPYC
//! (Zen 4) VM whose two vCPUs land now in one core complex and now in two, streaming
//! 64 KiB slots of a 2 MiB ring from one core to the other (medians):
//! - same complex (a cache line crosses in 60 ns): `memcpy` 14–25 GB/s, non-temporal
//!   stores 6.7 GB/s;
//! - two complexes (220 ns a line): `memcpy` 4.3 GB/s, non-temporal stores 9 GB/s.
//!
//! Across complexes every line of a slot crosses twice with `memcpy`: the writer must
//! take it back from the reader's cache before writing (a read for ownership), the
//! reader then fetches it from the writer's. Non-temporal stores skip the first
//! crossing, and the reader reads from memory. The writer's own copy shows which case
//! holds: across complexes it runs at the slow crossing's pace. So [`CopyPolicy`]
//! times its `memcpy` of long frames, one peer at a time, and turns to non-temporal
//! stores after [`SLOW_RUN`] slow copies in a row, trying `memcpy` again every
//! [`STREAM_FRAMES`] frames. Copies into pages not written before are not timed
//! (their first-touch faults are no sign of a far reader). Where copies stay fast
//! nothing changes: within one complex here (10–20 GB/s, none of 4,800 frames
//! turned), and on a 16-core Intel machine, whose ring
//! streamed at 11–13 GB/s, so each writer's copy ran at least that fast.

use std::time::Instant;

/// Frames with at least this many payload bytes are copied by the policy (the
/// device gathers them: `Device::gather_from`); shorter ones by the engine. Below
/// the 16 KiB slots of jobs of more than 8 ranks, so that their frames are too.
pub const STREAM_FROM: usize = 8 * 1024;

/// A `memcpy` of a long frame slower than this (bytes per nanosecond, GB/s) is slow.
const SLOW_GBPS: f64 = 6.0;

/// Slow copies in a row that turn a peer's frames to non-temporal stores.
pub const SLOW_RUN: u32 = 4;

/// Frames sent with non-temporal stores before `memcpy` is tried again.
pub const STREAM_FRAMES: u32 = 256;

/// `VOLLEY_SHM_COPY`: how long frames are copied into a peer's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMode {
    /// Chosen by the copies' speed, per peer (the default).
    Auto,
    /// Always through the cache.
    Cached,
    /// Always with non-temporal stores.
    Streaming,
}

impl CopyMode {
    /// The mode `VOLLEY_SHM_COPY` names (`auto` if unset), or one line saying what it
    /// expected.
    pub fn from_env() -> Result<CopyMode, crate::HostError> {
        match std::env::var("VOLLEY_SHM_COPY") {
            Err(_) => Ok(CopyMode::Auto),
            Ok(v) => CopyMode::parse(&v).ok_or_else(|| {
                crate::HostError::Setting(format!(
                    "VOLLEY_SHM_COPY={v:?}: expected auto, cached or streaming"
                ))
            }),
        }
    }

    fn parse(v: &str) -> Option<CopyMode> {
        match v.trim() {
            "auto" => Some(CopyMode::Auto),
            "cached" => Some(CopyMode::Cached),
            "streaming" => Some(CopyMode::Streaming),
            _ => None,
        }
    }
}

/// The copy of one peer's long frames (see the module).
#[derive(Debug, Clone, Copy, Default)]
pub struct CopyPolicy {
    /// Slow `memcpy`s in a row.
    slow: u32,
    /// Frames still to send with non-temporal stores.
    streaming: u32,
}

impl CopyPolicy {
    /// Whether the next frame goes with non-temporal stores.
    pub fn streams(&self, mode: CopyMode) -> bool {
        match mode {
            CopyMode::Auto => self.streaming > 0,
            CopyMode::Cached => false,
            CopyMode::Streaming => true,
        }
    }

    /// Counts a frame sent with non-temporal stores.
    pub fn streamed(&mut self) {
        self.streaming = self.streaming.saturating_sub(1);
    }

    /// Learns from a `memcpy` of `bytes` that took `ns` nanoseconds; `true` when
    /// that turns the peer's next frames to non-temporal stores.
    pub fn copied(&mut self, bytes: usize, ns: u64) -> bool {
        // A copy of zero nanoseconds (a clock too coarse) counts as fast.
        if (bytes as f64) < SLOW_GBPS * ns as f64 {
            self.slow += 1;
        } else {
            self.slow = 0;
        }
        if self.slow >= SLOW_RUN {
            self.slow = 0;
            self.streaming = STREAM_FRAMES;
            return true;
        }
        false
    }
}

/// Copies `src` into `dst` (the same length) through the cache, and returns the
/// nanoseconds it took.
pub fn timed_copy(dst: &mut [u8], src: &[u8]) -> u64 {
    let t = Instant::now();
    dst.copy_from_slice(src);
    t.elapsed().as_nanos() as u64
}

/// Copies `src` into `dst` (the same length) with non-temporal stores where the CPU
/// has them (x86-64's SSE2: every x86-64 CPU), through the cache elsewhere. The
/// stores are ordered before the caller's next ones (a fence), so that a flag
/// published after the copy is seen after the bytes.
pub fn streaming_copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "streaming_copy: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Up to the first 16-byte boundary of `dst` through the cache.
        let lead = dst.as_ptr().align_offset(16).min(dst.len());
        dst[..lead].copy_from_slice(&src[..lead]);
        let (d, s) = (&mut dst[lead..], &src[lead..]);
        let body = d.len() / 16 * 16;
        let (dp, sp) = (d.as_mut_ptr(), s.as_ptr());
        let mut i = 0;
        while i < body {
            // SAFETY: `i + 16 <= body <= d.len() == s.len()`, so both 16-byte
            // accesses lie inside the slices; `dp + i` is 16-byte aligned (`lead`
            // brought `dp` to a boundary, `i` is a multiple of 16), as the store
            // needs; the load takes any alignment. SSE2 is part of x86-64.
            unsafe {
                let v = _mm_loadu_si128(sp.add(i) as *const __m128i);
                _mm_stream_si128(dp.add(i) as *mut __m128i, v);
            }
            i += 16;
        }
        d[body..].copy_from_slice(&s[body..]);
        // SAFETY: a store fence has no memory operands; SSE is part of x86-64.
        unsafe { _mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_every_byte_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut buf = vec![0u8; 5100];
        for off in 0..17 {
            for soff in [0, 1, 8, 15] {
                for len in [0, 1, 15, 16, 17, 63, 64, 65, 1000, 4096, 4900] {
                    buf.fill(0xAA);
                    streaming_copy(&mut buf[off..off + len], &src[soff..soff + len]);
                    assert_eq!(&buf[off..off + len], &src[soff..soff + len]);
                    assert!(buf[..off].iter().all(|&b| b == 0xAA), "before, {off} {len}");
                    assert!(buf[off + len..].iter().all(|&b| b == 0xAA), "after");
                }
            }
        }
    }

    #[test]
    fn slow_copies_in_a_row_turn_a_peer_to_streaming_for_a_while() {
        let mut p = CopyPolicy::default();
        let frame = 64 * 1024;
        // 64 KiB in 5 us (13 GB/s): fast, never streams.
        for _ in 0..100 {
            assert!(!p.copied(frame, 5_000));
        }
        assert!(!p.streams(CopyMode::Auto));
        // 64 KiB in 16 us (4 GB/s): streams after SLOW_RUN of them in a row.
        for _ in 1..SLOW_RUN {
            assert!(!p.copied(frame, 16_000));
        }
        // A fast one in between starts the count again.
        assert!(!p.copied(frame, 5_000));
        for _ in 1..SLOW_RUN {
            assert!(!p.copied(frame, 16_000));
        }
        assert!(p.copied(frame, 16_000));
        for _ in 0..STREAM_FRAMES {
            assert!(p.streams(CopyMode::Auto));
            assert!(!p.streams(CopyMode::Cached), "the setting wins");
            p.streamed();
        }
        // Then memcpy is tried again.
        assert!(!p.streams(CopyMode::Auto));
        assert!(p.streams(CopyMode::Streaming), "the setting wins");
        assert!(!p.copied(frame, 0), "a clock too coarse reads fast");
    }

    #[test]
    fn the_setting_is_auto_cached_or_streaming() {
        assert_eq!(CopyMode::parse("auto"), Some(CopyMode::Auto));
        assert_eq!(CopyMode::parse(" cached "), Some(CopyMode::Cached));
        assert_eq!(CopyMode::parse("streaming"), Some(CopyMode::Streaming));
        assert_eq!(CopyMode::parse("nt"), None);
        assert_eq!(CopyMode::parse(""), None);
    }
}
