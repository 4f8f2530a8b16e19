//! POLYVAL (RFC 8452 section 3) with 256-bit carry-less multiplication
//! (`VPCLMULQDQ` on AVX2), for the long frame tags' AES-GCM-SIV on x86_64 hosts
//! that have it. The core computes the rest of the tag; this module only hashes,
//! through the hook [`volley_core::wire::use_polyval`] that [`install`] sets.
//!
//! Why here: aws-lc's GCM-SIV hashes 128 bits per multiply, and on `udp` that
//! hash took 41% of a 1 MiB stream's samples (it runs once at each end of every
//! long frame). Two blocks per instruction, sixteen blocks per reduction,
//! hash about twice as fast. No crate offers this (RustCrypto's `polyval` and
//! aws-lc multiply one block at a time), and the core forbids `unsafe`.
//!
//! The method is the textbook one for GHASH-like hashes: with the powers
//! H, dot(H, H), ... precomputed, 16 blocks are multiplied each by its power
//! (Karatsuba: three 64-bit multiplies per block, 20% faster here than four), the
//! 256-bit products summed unreduced, and the sum reduced once (a multiplication
//! by x^-128 modulo x^128 + x^127 + x^126 + x^121 + 1, by two 64-bit folds with
//! the constant 0xc2 << 56). The tests compare it with the `polyval` crate.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Blocks hashed per reduction.
const STRIDE: usize = 16;

/// Makes the core's long tags hash with this module's POLYVAL when the CPU has
/// 256-bit carry-less multiplication; otherwise leaves them as they are. Cheap
/// and idempotent: every hosted engine with a frame key calls it.
pub fn install() {
    if available() {
        volley_core::wire::use_polyval(polyval);
    }
}

/// Which code hashes long tags on this CPU, in words (the benchmark prints it).
pub fn describe() -> &'static str {
    if available() {
        "long frame tags: POLYVAL two blocks per VPCLMULQDQ"
    } else {
        "long frame tags: aws-lc's AES-GCM-SIV (no VPCLMULQDQ on this CPU)"
    }
}

/// Whether this CPU runs [`polyval`] with `VPCLMULQDQ`.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// POLYVAL under key `h` of the zero-padded concatenation of `pieces`, followed by
/// the block `last` (GCM-SIV's length block). `None` where the CPU lacks the
/// instructions (the core then tags as it does without the hook).
pub fn polyval(h: &[u8; 16], pieces: &[&[u8]], last: &[u8; 16]) -> Option<[u8; 16]> {
    if !available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the CPU has AVX2, PCLMULQDQ and VPCLMULQDQ (checked above).
        Some(unsafe { x86::polyval(h, pieces, last) })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (h, pieces, last);
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;

    /// The reduction constant: x^127 + x^126 + x^121 (as 0xc2 << 56) in the high
    /// 64 bits, 1 in the low.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn poly() -> __m128i {
        _mm_set_epi64x(0xc200_0000_0000_0000_u64 as i64, 1)
    }

    /// `hi` * x^128 + `lo`, times x^-128, modulo the field polynomial.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
        let p = poly();
        // lo * x^-64 = its high half + its low half * (x^64 + x^63 + x^62 + x^57).
        let t = _mm_xor_si128(
            _mm_shuffle_epi32(lo, 0x4e),
            _mm_clmulepi64_si128(lo, p, 0x10),
        );
        let t = _mm_xor_si128(_mm_shuffle_epi32(t, 0x4e), _mm_clmulepi64_si128(t, p, 0x10));
        _mm_xor_si128(t, hi)
    }

    /// The 256-bit product of `a` and `b` as (lo, hi).
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn mul(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
        let lo = _mm_clmulepi64_si128(a, b, 0x00);
        let hi = _mm_clmulepi64_si128(a, b, 0x11);
        let mid = _mm_xor_si128(
            _mm_clmulepi64_si128(a, b, 0x01),
            _mm_clmulepi64_si128(a, b, 0x10),
        );
        (
            _mm_xor_si128(lo, _mm_slli_si128(mid, 8)),
            _mm_xor_si128(hi, _mm_srli_si128(mid, 8)),
        )
    }

    /// dot(a, b) = a * b * x^-128 (RFC 8452 section 3).
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn dot(a: __m128i, b: __m128i) -> __m128i {
        let (lo, hi) = mul(a, b);
        reduce(lo, hi)
    }

    /// One block into the running sum: s = dot(s + x, h).
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn one(s: __m128i, x: &[u8; 16], h: __m128i) -> __m128i {
        dot(_mm_xor_si128(s, load(x)), h)
    }

    /// A block as a field element (little-endian, RFC 8452).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(x: &[u8; 16]) -> __m128i {
        // SAFETY: `x` is 16 readable bytes; the load may be unaligned.
        unsafe { _mm_loadu_si128(x.as_ptr() as *const __m128i) }
    }

    /// The running sum `s` after the whole blocks of `data` (a multiple of 16 bytes):
    /// strides of [`STRIDE`] blocks against the powers (`pairs`, and for Karatsuba
    /// `kpairs`), then block by block.
    #[target_feature(enable = "avx2,pclmulqdq,vpclmulqdq")]
    fn run(
        mut s: __m128i,
        data: &[u8],
        h1: __m128i,
        pairs: &[__m256i; STRIDE / 2],
        kpairs: &[__m256i; STRIDE / 2],
    ) -> __m128i {
        let mut strides = data.chunks_exact(16 * STRIDE);
        for c in &mut strides {
            // (`chunks_exact`: always a whole stride.)
            let c: &[u8; 16 * STRIDE] = c.try_into().unwrap_or(&[0; 16 * STRIDE]);
            let mut lo = _mm256_setzero_si256();
            let mut hi = _mm256_setzero_si256();
            let mut mid = _mm256_setzero_si256();
            for (i, (pair, kp)) in pairs.iter().zip(kpairs).enumerate() {
                // SAFETY: bytes 32i..32i+32 of the 256-byte stride; unaligned.
                let mut d = unsafe { _mm256_loadu_si256(c.as_ptr().add(32 * i) as *const __m256i) };
                if i == 0 {
                    // The sum so far joins the stride's first block.
                    d = _mm256_xor_si256(d, _mm256_zextsi128_si256(s));
                }
                lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128(d, *pair, 0x00));
                hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128(d, *pair, 0x11));
                let dk = _mm256_xor_si256(d, _mm256_shuffle_epi32(d, 0x4e));
                mid = _mm256_xor_si256(mid, _mm256_clmulepi64_epi128(dk, *kp, 0x00));
            }
            // (a0 + a1)(b0 + b1) - a0 b0 - a1 b1: the cross terms.
            let mid = _mm256_xor_si256(mid, _mm256_xor_si256(lo, hi));
            // The two lanes' sums, then the middle terms into both halves.
            let fold = |v: __m256i| {
                _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))
            };
            let (lo, hi, mid) = (fold(lo), fold(hi), fold(mid));
            let lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
            let hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
            s = reduce(lo, hi);
        }
        for b in strides.remainder().chunks_exact(16) {
            s = one(s, b.try_into().unwrap_or(&[0; 16]), h1);
        }
        s
    }

    /// [`super::polyval`] on a CPU with AVX2, PCLMULQDQ and VPCLMULQDQ.
    #[target_feature(enable = "avx2,pclmulqdq,vpclmulqdq")]
    pub(super) fn polyval(h: &[u8; 16], pieces: &[&[u8]], last: &[u8; 16]) -> [u8; 16] {
        let h1 = load(h);
        // Powers H^1..H^16 (dot powers), paired high-first so that block 2i of a
        // stride (lane 0) meets H^(16-2i) and block 2i+1 (lane 1) H^(15-2i).
        let mut pw = [h1; STRIDE];
        for i in 1..STRIDE {
            pw[i] = dot(pw[i - 1], h1);
        }
        let pairs: [__m256i; STRIDE / 2] = core::array::from_fn(|i| {
            _mm256_set_m128i(pw[STRIDE - 2 - 2 * i], pw[STRIDE - 1 - 2 * i])
        });
        // Karatsuba: each power's halves xored, for the middle product.
        let kpairs: [__m256i; STRIDE / 2] = core::array::from_fn(|i| {
            _mm256_xor_si256(pairs[i], _mm256_shuffle_epi32(pairs[i], 0x4e))
        });

        let mut s = _mm_setzero_si128();
        volley_core::wire::block_runs(pieces, |r| s = run(s, r, h1, &pairs, &kpairs));
        s = one(s, last, h1);
        let mut out = [0u8; 16];
        // SAFETY: 16 writable bytes; the store may be unaligned.
        unsafe { _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, s) };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polyval::universal_hash::{KeyInit, UniversalHash};

    fn reference(h: &[u8; 16], pieces: &[&[u8]], last: &[u8; 16]) -> [u8; 16] {
        let mut all: Vec<u8> = pieces.concat();
        all.resize(all.len().div_ceil(16) * 16, 0);
        all.extend_from_slice(last);
        let mut p = polyval::Polyval::new(h.into());
        p.update_padded(&all);
        p.finalize().into()
    }

    #[test]
    fn polyval_is_rfc_8452s_on_every_length_and_split() {
        if !available() {
            eprintln!("no VPCLMULQDQ on this CPU: nothing to compare");
            return;
        }
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        let data: Vec<u8> = (0..70_000).map(|_| next()).collect();
        for round in 0..40 {
            let h: [u8; 16] = core::array::from_fn(|_| next());
            let last: [u8; 16] = core::array::from_fn(|_| next());
            // Lengths around the stride and block edges, and long ones.
            for len in (0..600).chain([2047, 2048, 4096, 4097, 65_000, 65_536, 70_000]) {
                let d = &data[..len];
                assert_eq!(
                    polyval(&h, &[d], &last),
                    Some(reference(&h, &[d], &last)),
                    "len {len}"
                );
                // The same bytes in pieces cut anywhere.
                let a = (round * 37 + len / 3) % (len + 1);
                let b = a + (len - a) / 2;
                let cut = [&d[..a], &d[a..b], &d[b..]];
                assert_eq!(
                    polyval(&h, &cut, &last),
                    Some(reference(&h, &[d], &last)),
                    "len {len} cut {a} {b}"
                );
            }
        }
    }

    /// RFC 8452 appendix A: POLYVAL(H, X_1, X_2).
    #[test]
    fn polyval_matches_the_rfcs_example() {
        if !available() {
            return;
        }
        let hex = |s: &str| -> [u8; 16] {
            core::array::from_fn(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        };
        let h = hex("25629347589242761d31f826ba4b757b");
        let x1 = hex("4f4f95668c83dfb6401762bb2d01a262");
        let x2 = hex("d1a24ddd2721d006bbe45f20d3c9f362");
        let want = hex("f7a3b47b846119fae5b7866cf5e5b77e");
        assert_eq!(polyval(&h, &[&x1], &x2), Some(want));
    }
}
