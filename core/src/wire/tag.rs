//! Frame authentication tags (WIRE.md, flag `AUTH`).
//!
//! Short payloads: SipHash-2-4 with 128-bit output over header then payload, the
//! fastest on a few cache lines. From [`LONG_TAG_FROM`] payload bytes:
//! AES-128-GCM-SIV (RFC 8452) as a MAC, with the payload as associated data and no
//! plaintext, under a key derived from the job's; its nonce is a keyed hash of the
//! header, so the tag covers every header byte while the bulk of the frame is hashed
//! in one call from where it lies. GCM-SIV keeps its strength when a nonce repeats
//! (a resent frame), unlike GMAC. Hosted builds with the `aws-lc` feature compute it
//! with aws-lc's carry-less-multiply code (about 6 GB/s here, 1.6x keyed BLAKE3);
//! everywhere else with the portable [`aes`] and [`polyval`] crates, to the same bits.

use core::hash::Hasher;

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use polyval::universal_hash::UniversalHash;
use polyval::Polyval;
use siphasher::sip128::{Hasher128, SipHasher24};

use super::{derive_key, AuthKey, HEADER_LEN};

/// Length of the authentication tag that follows the payload of an `AUTH` frame.
pub const TAG_LEN: usize = 16;

/// Payloads from this length on are tagged with AES-GCM-SIV, shorter ones with SipHash.
pub const LONG_TAG_FROM: usize = 2048;

/// The tag of a header and its payload under `key` (see the module).
/// The length is in the header, so each frame has exactly one valid tag function.
pub fn tag(key: &AuthKey, h: &[u8; HEADER_LEN], payload: &[u8]) -> [u8; TAG_LEN] {
    tag_parts(key, h, &[payload])
}

/// [`tag`] of a payload given as `pieces` laid end to end.
pub fn tag_parts(key: &AuthKey, h: &[u8; HEADER_LEN], pieces: &[&[u8]]) -> [u8; TAG_LEN] {
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    if len < LONG_TAG_FROM {
        let mut m = SipHasher24::new_with_key(key);
        m.write(h);
        for p in pieces {
            m.write(p);
        }
        return m.finish128().as_bytes();
    }
    #[cfg(feature = "aws-lc")]
    {
        let mut whole = pieces.iter().filter(|p| !p.is_empty());
        if let (Some(one), None) = (whole.next(), whole.next()) {
            if let Some(t) = fast::long_tag(key, h, one) {
                return t;
            }
        }
    }
    let keys = LongKeys::new(key);
    gcm_siv_aad(&keys.aes, &keys.nonce(h), pieces)
}

/// The keys of long tags, derived from the job's frame key.
struct LongKeys {
    /// GCM-SIV's key-generating key.
    aes: [u8; 16],
    /// SipHash key of the nonce.
    nonce: [u8; 16],
}

impl LongKeys {
    fn new(key: &AuthKey) -> LongKeys {
        LongKeys {
            aes: derive_key(key, b"volley long tag", 0),
            nonce: derive_key(key, b"volley long tag nonce", 0),
        }
    }

    /// The GCM-SIV nonce of a frame with header `h`: the first 12 bytes of its keyed
    /// SipHash-2-4-128. A forger would need two headers with one nonce under a key it
    /// does not know.
    fn nonce(&self, h: &[u8; HEADER_LEN]) -> [u8; 12] {
        let mut m = SipHasher24::new_with_key(&self.nonce);
        m.write(h);
        let d = m.finish128().as_bytes();
        let mut n = [0u8; 12];
        n.copy_from_slice(&d[..12]);
        n
    }
}

/// The AES-128-GCM-SIV tag (RFC 8452 section 4) of an empty plaintext with the
/// associated data `aad` (pieces laid end to end), nonce `nonce`, key `key`.
fn gcm_siv_aad(key: &[u8; 16], nonce: &[u8; 12], aad: &[&[u8]]) -> [u8; TAG_LEN] {
    let kgk = Aes128::new(key.into());
    // Per-nonce keys: the first half of AES(LE32(i) || nonce), i = 0..3.
    let half = |i: u32| {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&i.to_le_bytes());
        b[4..].copy_from_slice(nonce);
        let mut blk = b.into();
        kgk.encrypt_block(&mut blk);
        let mut out = [0u8; 8];
        out.copy_from_slice(&blk[..8]);
        out
    };
    let mut auth = [0u8; 16];
    auth[..8].copy_from_slice(&half(0));
    auth[8..].copy_from_slice(&half(1));
    let mut enc = [0u8; 16];
    enc[..8].copy_from_slice(&half(2));
    enc[8..].copy_from_slice(&half(3));

    let mut pv = Polyval::new(&auth.into());
    // The pieces as one stream of 16-byte blocks, the last one zero-padded.
    let mut carry = [0u8; 16];
    let mut held = 0;
    let mut total = 0u64;
    for piece in aad {
        total += piece.len() as u64;
        let mut p = *piece;
        if held > 0 {
            let take = p.len().min(16 - held);
            carry[held..held + take].copy_from_slice(&p[..take]);
            held += take;
            p = &p[take..];
            if held < 16 {
                continue;
            }
            pv.update(&[carry.into()]);
        }
        let whole = p.len() / 16 * 16;
        pv.update_padded(&p[..whole]);
        carry[..p.len() - whole].copy_from_slice(&p[whole..]);
        held = p.len() - whole;
    }
    if held > 0 {
        carry[held..].fill(0);
        pv.update(&[carry.into()]);
    }
    // Length block: bit lengths of the associated data and of the (empty) plaintext.
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&(total * 8).to_le_bytes());
    pv.update(&[lens.into()]);
    let mut s: [u8; 16] = pv.finalize().into();
    for (b, n) in s.iter_mut().zip(nonce) {
        *b ^= n;
    }
    s[15] &= 0x7f;
    let mut blk = s.into();
    Aes128::new(&enc.into()).encrypt_block(&mut blk);
    blk.into()
}

/// The hosted long tag through aws-lc (contiguous payloads), with the derived keys
/// and aws-lc's key schedule kept per thread for the last job key seen.
#[cfg(feature = "aws-lc")]
mod fast {
    extern crate std;

    use std::cell::RefCell;

    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM_SIV};

    use super::{AuthKey, LongKeys, HEADER_LEN, TAG_LEN};

    std::thread_local! {
        static KEYS: RefCell<Option<(AuthKey, LongKeys, LessSafeKey)>> = const { RefCell::new(None) };
    }

    /// `None` only if aws-lc refuses (it does not for these lengths): the caller
    /// then takes the portable code.
    pub(super) fn long_tag(
        key: &AuthKey,
        h: &[u8; HEADER_LEN],
        payload: &[u8],
    ) -> Option<[u8; TAG_LEN]> {
        KEYS.with(|k| {
            let mut k = k.borrow_mut();
            if k.as_ref().is_none_or(|(job, ..)| job != key) {
                let keys = LongKeys::new(key);
                let unbound = UnboundKey::new(&AES_128_GCM_SIV, &keys.aes).ok()?;
                *k = Some((*key, keys, LessSafeKey::new(unbound)));
            }
            let (_, keys, aead) = k.as_ref()?;
            // GCM-SIV needs no unique nonce (a repeat only shows an identical frame
            // repeated); aws-lc's type name is about GCM.
            let nonce = Nonce::assume_unique_for_key(keys.nonce(h));
            let t = aead
                .seal_in_place_separate_tag(nonce, Aad::from(payload), &mut [])
                .ok()?;
            t.as_ref().try_into().ok()
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8452 appendix C.1's vector with nothing to encrypt or authenticate, then
    /// the RustCrypto `aes-gcm-siv` crate (an independent RFC 8452 implementation)
    /// on associated data of many lengths: the portable code is AES-128-GCM-SIV, in
    /// one piece and cut anywhere.
    #[test]
    fn long_tags_are_rfc_8452_aes_128_gcm_siv() {
        use aes_gcm_siv::aead::{AeadInPlace, KeyInit};
        let key: [u8; 16] = unhex("01000000000000000000000000000000")
            .try_into()
            .unwrap();
        let nonce: [u8; 12] = unhex("030000000000000000000000").try_into().unwrap();
        let t = gcm_siv_aad(&key, &nonce, &[]);
        assert_eq!(t.to_vec(), unhex("dc20e2d83f25705bb49e439eca56de25"));
        let aad: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        let other = aes_gcm_siv::Aes128GcmSiv::new(&key.into());
        for len in [1, 15, 16, 17, 32, 40, 2048, 4999] {
            let a = &aad[..len];
            let want = other
                .encrypt_in_place_detached(&nonce.into(), a, &mut [])
                .unwrap();
            let whole = gcm_siv_aad(&key, &nonce, &[a]);
            assert_eq!(whole[..], want[..], "{len} bytes");
            for cut in [0, 1, 15, 16, 17, len / 2, len - 1, len] {
                let (x, y) = a.split_at(cut.min(len));
                assert_eq!(gcm_siv_aad(&key, &nonce, &[x, y]), whole, "cut at {cut}");
                let (y1, y2) = y.split_at(y.len() / 2);
                assert_eq!(gcm_siv_aad(&key, &nonce, &[x, y1, &[], y2]), whole);
            }
        }
    }

    /// The tag is what WIRE.md promises: SipHash-2-4 (128-bit) below
    /// [`LONG_TAG_FROM`] payload bytes, GCM-SIV from there; every input bit matters.
    #[test]
    fn tag_is_siphash_then_gcm_siv_over_header_and_payload() {
        let key: AuthKey = *b"0123456789abcdef";
        let h = [0x5au8; HEADER_LEN];
        let payload: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        for len in [0, 8, LONG_TAG_FROM - 1, LONG_TAG_FROM, 4097, 70_000] {
            let p = &payload[..len];
            let want: [u8; 16] = if len < LONG_TAG_FROM {
                let mut m = SipHasher24::new_with_key(&key);
                m.write(&h);
                m.write(p);
                m.finish128().as_bytes()
            } else {
                let keys = LongKeys::new(&key);
                gcm_siv_aad(&keys.aes, &keys.nonce(&h), &[p])
            };
            let t = tag(&key, &h, p);
            assert_eq!(t, want, "{len} bytes");
            // Cut in two: the same tag (a frame sent from where its parts lie).
            let (a, b) = p.split_at(len / 3);
            assert_eq!(tag_parts(&key, &h, &[a, b]), t, "{len} bytes in two");
            let mut other = key;
            other[15] ^= 1;
            assert_ne!(tag(&other, &h, p), t, "{len} bytes");
            for i in [0, 17, HEADER_LEN - 1] {
                let mut h2 = h;
                h2[i] ^= 1;
                assert_ne!(tag(&key, &h2, p), t, "{len} bytes, header byte {i}");
            }
            if len > 0 {
                let mut p2 = p.to_vec();
                p2[len - 1] ^= 0x80;
                assert_ne!(tag(&key, &h, &p2), t, "{len} bytes");
                p2[len - 1] ^= 0x80;
                p2[0] ^= 1;
                assert_ne!(tag(&key, &h, &p2), t, "{len} bytes");
            }
        }
    }

    /// With `aws-lc`, the hosted code and the portable code (the unikernel's) give
    /// the same tags, for every length and key tried.
    #[cfg(feature = "aws-lc")]
    #[test]
    fn aws_lc_and_portable_long_tags_agree() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let payload: Vec<u8> = (0..66_000).map(|_| next() as u8).collect();
        for round in 0..40 {
            let mut key = [0u8; 16];
            key.iter_mut().for_each(|b| *b = next() as u8);
            let mut h = [0u8; HEADER_LEN];
            h.iter_mut().for_each(|b| *b = next() as u8);
            let len = LONG_TAG_FROM + (next() as usize % (payload.len() - LONG_TAG_FROM));
            let p = &payload[..len];
            let keys = LongKeys::new(&key);
            let portable = gcm_siv_aad(&keys.aes, &keys.nonce(&h), &[p]);
            let fast = fast::long_tag(&key, &h, p);
            assert_eq!(fast, Some(portable), "round {round}, {len} bytes");
            assert_eq!(tag(&key, &h, p), portable);
        }
    }
}
