//! Frame authentication tags (WIRE.md, flag `AUTH`).
//!
//! Short payloads: SipHash-2-4 with 128-bit output over the header's words (in
//! [`HEADER_WORD_ORDER`]) then the payload, the fastest on a few cache lines. From
//! [`LONG_TAG_FROM`] payload bytes: AES-128-GCM-SIV (RFC 8452) as a MAC, with the
//! payload as associated data and no plaintext, under a key derived from the job's;
//! its nonce is a keyed hash of the header, so the tag covers every header byte
//! while the bulk of the frame is hashed in one call from where it lies. GCM-SIV
//! keeps its strength when a nonce repeats (a resent frame), unlike GMAC. Hosted
//! builds with the `aws-lc` feature compute it with aws-lc's carry-less-multiply
//! code (about 6 GB/s here, 1.6x keyed BLAKE3); everywhere else with the portable
//! [`aes`] and [`polyval`] crates, to the same bits. A host may give a faster
//! POLYVAL ([`use_polyval`]): the hosted target's hashes two blocks per instruction
//! where the CPU can (about twice aws-lc's speed).

use core::cell::Cell;
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
    if payload.len() < LONG_TAG_FROM {
        return short_tag(key, h, payload);
    }
    tag_parts(key, h, &[payload])
}

/// The order in which the short tag hashes a header's eight-byte words: first the
/// ones that stay the same in a run of frames of one kind between two endpoints
/// (version, kind, flags and job; both ends' groups and instances; `sack`'s upper
/// half, `window` and `payload_len`; `total_len` and `crc`, zero in a tagged
/// frame), then those that change from frame to frame (ports and `seq`; `ack` and
/// `sack`'s lower half; `msg_id` and `offset`). [`TagCache`] keeps the hash of the
/// first [`CACHED_WORDS`], so a ping-pong's frame hashes three header words, not
/// seven. Any fixed order is as strong a MAC: it is SipHash of a fixed rearrangement
/// of the frame (WIRE.md, `AUTH`).
pub const HEADER_WORD_ORDER: [usize; HEADER_LEN / 8] = [0, 1, 4, 6, 2, 3, 5];

/// How many of [`HEADER_WORD_ORDER`]'s words [`TagCache`] covers.
const CACHED_WORDS: usize = 4;

/// The header's word `i` (of [`HEADER_WORD_ORDER`]).
#[inline(always)]
fn header_word(h: &[u8; HEADER_LEN], i: usize) -> u64 {
    word(&h[8 * i..8 * i + 8])
}

/// The short tag of a payload in one piece: the header's words in
/// [`HEADER_WORD_ORDER`], then the payload's, with none of [`Sip::write`]'s
/// carrying of bytes between pieces (it runs twice per message, sender and
/// receiver).
#[inline]
fn short_tag(key: &AuthKey, h: &[u8; HEADER_LEN], payload: &[u8]) -> [u8; TAG_LEN] {
    let mut m = Sip::new(key);
    for &i in &HEADER_WORD_ORDER {
        m.compress(header_word(h, i));
    }
    short_tag_payload(m, payload)
}

/// The short tag from the hash of the whole header, `m`.
#[inline(always)]
fn short_tag_payload(mut m: Sip, payload: &[u8]) -> [u8; TAG_LEN] {
    // The payload starts on a word of the message (WIRE.md: a 56-byte header).
    const _: () = assert!(HEADER_LEN.is_multiple_of(8));
    let mut words = payload.chunks_exact(8);
    for w in &mut words {
        m.compress(word(w));
    }
    for (i, &b) in words.remainder().iter().enumerate() {
        m.tail |= u64::from(b) << (8 * i);
    }
    m.len = HEADER_LEN + payload.len();
    m.finish()
}

/// The little-endian word of the first 8 bytes of `w`.
#[inline(always)]
fn word(w: &[u8]) -> u64 {
    u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])
}

/// How many of [`HEADER_WORD_ORDER`]'s words come after the cached ones.
const REST_WORDS: usize = HEADER_LEN / 8 - CACHED_WORDS;

/// The header words of `h` after the cached ones, in [`HEADER_WORD_ORDER`].
#[inline(always)]
fn rest_words(h: &[u8; HEADER_LEN]) -> [u64; REST_WORDS] {
    let mut rest = [0u64; REST_WORDS];
    for (r, &i) in rest.iter_mut().zip(&HEADER_WORD_ORDER[CACHED_WORDS..]) {
        *r = header_word(h, i);
    }
    rest
}

/// The short tag's hash after the header's first four (`CACHED_WORDS`) words in
/// the short tag's order (`HEADER_WORD_ORDER`), kept for the next frame that has
/// them too. They are the same for every frame of one kind and size between two
/// endpoints, so a run of them (a ping-pong's) hashes four words fewer each (of
/// nine for an 8-byte message). Kept with the key it was computed under. One per
/// direction of an endpoint.
///
/// It may also hold the hash of a whole header guessed ahead ([`TagCache::prepare`]):
/// the last frame's with `seq`, `ack` and `msg_id` one more, as the next frame of a
/// ping-pong or a stream of one-frame messages has them. A frame that has exactly
/// those words then hashes only its payload.
#[derive(Debug, Default)]
pub struct TagCache {
    /// Whether `v` holds a hash.
    held: Cell<bool>,
    /// The key's two words and the header's words that `v` is the hash of.
    of: Cell<[u64; 2 + CACHED_WORDS]>,
    v: Cell<[u64; 4]>,
    /// The other header words of the last frame hashed from `v`.
    last: Cell<[u64; REST_WORDS]>,
    /// Whether `next` and `next_v` hold a guess made from `v` and `last`.
    ahead: Cell<bool>,
    /// The guessed header's other words, and the hash of all its words.
    next: Cell<[u64; REST_WORDS]>,
    next_v: Cell<[u64; 4]>,
}

/// Where the counters that grow by one from frame to frame lie among the header's
/// words after the cached ones: (word, byte in it) of `seq`, `ack` and `msg_id`,
/// each a big-endian `u32`.
const COUNTERS: [(usize, usize); 3] = [
    counter_at(super::field::SEQ.start),
    counter_at(super::field::ACK.start),
    counter_at(super::field::MSG_ID.start),
];

/// The place of the `u32` at header byte `at` among [`HEADER_WORD_ORDER`]'s words
/// after the cached ones (a build error if it lies among the cached ones).
const fn counter_at(at: usize) -> (usize, usize) {
    let mut i = CACHED_WORDS;
    while i < HEADER_WORD_ORDER.len() {
        if HEADER_WORD_ORDER[i] == at / 8 {
            assert!(at % 8 <= 4, "a counter within one word");
            return (i - CACHED_WORDS, at % 8);
        }
        i += 1;
    }
    panic!("a counter among the cached words");
}

/// The header words after the cached ones of the frame after one with `rest`:
/// `seq`, `ack` and `msg_id` one more (wrapping, as the protocol counts).
fn successor(mut rest: [u64; REST_WORDS]) -> [u64; REST_WORDS] {
    for (w, at) in COUNTERS {
        let mut b = rest[w].to_le_bytes();
        let n = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]).wrapping_add(1);
        b[at..at + 4].copy_from_slice(&n.to_be_bytes());
        rest[w] = u64::from_le_bytes(b);
    }
    rest
}

impl TagCache {
    /// Hashes ahead the header of the frame most likely to come next through this
    /// cache (see the type), for an endpoint with nothing else to do: that frame's
    /// tag then costs six SipHash rounds fewer (of eighteen for an 8-byte message).
    /// Does nothing if a guess is held or nothing was hashed yet.
    pub fn prepare(&self) {
        if !self.held.get() || self.ahead.get() {
            return;
        }
        let next = successor(self.last.get());
        let mut m = Sip {
            v: self.v.get(),
            tail: 0,
            ntail: 0,
            len: 0,
        };
        for w in next {
            m.compress(w);
        }
        self.next.set(next);
        self.next_v.set(m.v);
        self.ahead.set(true);
    }
}

/// [`tag`], with the hash of the header's first four (`CACHED_WORDS`) words taken
/// from `cache` where it holds them (and left there otherwise), or of the whole header
/// where `cache` guessed it. The same tag.
pub fn tag_cached(
    key: &AuthKey,
    cache: &TagCache,
    h: &[u8; HEADER_LEN],
    payload: &[u8],
) -> [u8; TAG_LEN] {
    if payload.len() >= LONG_TAG_FROM {
        return tag_parts(key, h, &[payload]);
    }
    let mut of = [word(&key[..8]), word(&key[8..]), 0, 0, 0, 0];
    for (o, &i) in of[2..].iter_mut().zip(&HEADER_WORD_ORDER) {
        *o = header_word(h, i);
    }
    let rest = rest_words(h);
    let mut m = Sip::new(key);
    // Compared word by word: `==` on the arrays calls `bcmp`, 30 instructions more.
    let held = cache.of.get();
    let differ = of.iter().zip(&held).fold(0, |d, (a, b)| d | (a ^ b));
    let hit = cache.held.get() && differ == 0;
    let guessed = hit && cache.ahead.get() && {
        let next = cache.next.get();
        rest.iter().zip(&next).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    };
    cache.last.set(rest);
    cache.ahead.set(false);
    if guessed {
        m.v = cache.next_v.get();
        return short_tag_payload(m, payload);
    }
    if hit {
        m.v = cache.v.get();
    } else {
        for &w in &of[2..] {
            m.compress(w);
        }
        cache.of.set(of);
        cache.v.set(m.v);
        cache.held.set(true);
    }
    for w in rest {
        m.compress(w);
    }
    short_tag_payload(m, payload)
}

/// [`tag`] of a payload given as `pieces` laid end to end.
pub fn tag_parts(key: &AuthKey, h: &[u8; HEADER_LEN], pieces: &[&[u8]]) -> [u8; TAG_LEN] {
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    if len < LONG_TAG_FROM {
        let mut m = Sip::new(key);
        for &i in &HEADER_WORD_ORDER {
            m.compress(header_word(h, i));
        }
        m.len = HEADER_LEN;
        for p in pieces {
            m.write(p);
        }
        return m.finish();
    }
    #[cfg(feature = "std")]
    if let Some(t) = hook::long_tag(key, h, pieces) {
        return t;
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

/// SipHash-2-4 with 128-bit output, as the `siphasher` crate's `SipHasher24` and
/// `finish128` compute it (the tests compare the two), written for the short tag:
/// it runs twice per frame (sender and receiver), and the crate's general streaming
/// state costs about a third more instructions on a 64-byte frame.
struct Sip {
    v: [u64; 4],
    /// Bytes not yet compressed (fewer than 8), little-endian, and how many.
    tail: u64,
    ntail: usize,
    len: usize,
}

impl Sip {
    #[inline(always)]
    fn new(key: &AuthKey) -> Sip {
        let k0 = u64::from_le_bytes([
            key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
        ]);
        let k1 = u64::from_le_bytes([
            key[8], key[9], key[10], key[11], key[12], key[13], key[14], key[15],
        ]);
        Sip {
            // The 128-bit variant marks `v1` with 0xee.
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d ^ 0xee,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: 0,
            ntail: 0,
            len: 0,
        }
    }

    #[inline(always)]
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    /// One message word, two rounds (the "2" of 2-4).
    #[inline(always)]
    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        Sip::round(&mut self.v);
        Sip::round(&mut self.v);
        self.v[0] ^= m;
    }

    #[inline(always)]
    fn write(&mut self, mut p: &[u8]) {
        self.len += p.len();
        // Finish a word begun by the previous piece.
        while self.ntail > 0 {
            let Some((&b, rest)) = p.split_first() else {
                return;
            };
            self.tail |= u64::from(b) << (8 * self.ntail);
            self.ntail = (self.ntail + 1) % 8;
            p = rest;
            if self.ntail == 0 {
                let m = self.tail;
                self.tail = 0;
                self.compress(m);
            }
        }
        let mut words = p.chunks_exact(8);
        for w in &mut words {
            self.compress(u64::from_le_bytes([
                w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
            ]));
        }
        for (i, &b) in words.remainder().iter().enumerate() {
            self.tail |= u64::from(b) << (8 * i);
        }
        self.ntail = words.remainder().len();
    }

    /// The last word (length byte on top), four rounds per output half.
    #[inline(always)]
    fn finish(mut self) -> [u8; TAG_LEN] {
        let b = ((self.len as u64 & 0xff) << 56) | self.tail;
        self.compress(b);
        let v = &mut self.v;
        v[2] ^= 0xee;
        for _ in 0..4 {
            Sip::round(v);
        }
        let h0 = v[0] ^ v[1] ^ v[2] ^ v[3];
        v[1] ^= 0xdd;
        for _ in 0..4 {
            Sip::round(v);
        }
        let h1 = v[0] ^ v[1] ^ v[2] ^ v[3];
        let mut out = [0u8; TAG_LEN];
        out[..8].copy_from_slice(&h0.to_le_bytes());
        out[8..].copy_from_slice(&h1.to_le_bytes());
        out
    }
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

/// A POLYVAL (RFC 8452 section 3) faster than the portable one, given by the host
/// ([`use_polyval`]): under key `h`, of the zero-padded concatenation of the
/// pieces, then the block `last`. `None`: not on this CPU after all.
pub type PolyvalFn = fn(h: &[u8; 16], pieces: &[&[u8]], last: &[u8; 16]) -> Option<[u8; 16]>;

/// Long tags hash with `f` from now on, in every thread (the first function given
/// stays). The tags do not change: `f` must compute POLYVAL.
#[cfg(feature = "std")]
pub fn use_polyval(f: PolyvalFn) {
    let _ = hook::POLYVAL.set(f);
}

/// The long tag with the host's POLYVAL, and the derived keys and key-generating
/// AES key schedule kept per thread for the last job key seen.
#[cfg(feature = "std")]
mod hook {
    extern crate std;

    use std::cell::RefCell;
    use std::sync::OnceLock;

    use aes::cipher::KeyInit;
    use aes::Aes128;

    use super::{siv_setup, siv_tag, AuthKey, LongKeys, PolyvalFn, HEADER_LEN, TAG_LEN};

    pub(super) static POLYVAL: OnceLock<PolyvalFn> = OnceLock::new();

    std::thread_local! {
        static KEYS: RefCell<Option<(AuthKey, LongKeys, Aes128)>> = const { RefCell::new(None) };
    }

    pub(super) fn long_tag(
        key: &AuthKey,
        h: &[u8; HEADER_LEN],
        pieces: &[&[u8]],
    ) -> Option<[u8; TAG_LEN]> {
        let f = *POLYVAL.get()?;
        KEYS.with(|k| {
            let mut k = k.borrow_mut();
            if k.as_ref().is_none_or(|(job, ..)| job != key) {
                let keys = LongKeys::new(key);
                let kgk = Aes128::new(&keys.aes.into());
                *k = Some((*key, keys, kgk));
            }
            let (_, keys, kgk) = k.as_ref()?;
            let nonce = keys.nonce(h);
            let (auth, enc, lens) = siv_setup(kgk, &nonce, pieces);
            Some(siv_tag(f(&auth, pieces, &lens)?, &nonce, &enc))
        })
    }
}

/// The AES-128-GCM-SIV tag (RFC 8452 section 4) of an empty plaintext with the
/// associated data `aad` (pieces laid end to end), nonce `nonce`, key `key`.
fn gcm_siv_aad(key: &[u8; 16], nonce: &[u8; 12], aad: &[&[u8]]) -> [u8; TAG_LEN] {
    let kgk = Aes128::new(key.into());
    let (auth, enc, lens) = siv_setup(&kgk, nonce, aad);
    siv_tag(portable_polyval(&auth, aad, &lens), nonce, &enc)
}

/// GCM-SIV's per-nonce authentication and encryption keys under the key-generating
/// key's schedule `kgk`, and the length block of associated data `aad`.
fn siv_setup(kgk: &Aes128, nonce: &[u8; 12], aad: &[&[u8]]) -> ([u8; 16], [u8; 16], [u8; 16]) {
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
    // Length block: bit lengths of the associated data and of the (empty) plaintext.
    let total: u64 = aad.iter().map(|p| p.len() as u64).sum();
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&(total * 8).to_le_bytes());
    (auth, enc, lens)
}

/// The tag from the POLYVAL `s` of the associated data and length block.
fn siv_tag(mut s: [u8; 16], nonce: &[u8; 12], enc: &[u8; 16]) -> [u8; TAG_LEN] {
    for (b, n) in s.iter_mut().zip(nonce) {
        *b ^= n;
    }
    s[15] &= 0x7f;
    let mut blk = s.into();
    Aes128::new(enc.into()).encrypt_block(&mut blk);
    blk.into()
}

/// POLYVAL as [`PolyvalFn`] says, with the `polyval` crate.
fn portable_polyval(auth: &[u8; 16], aad: &[&[u8]], lens: &[u8; 16]) -> [u8; 16] {
    let mut pv = Polyval::new(auth.into());
    block_runs(aad, |run| pv.update_padded(run));
    pv.update(&[(*lens).into()]);
    pv.finalize().into()
}

/// `pieces` laid end to end as one stream of 16-byte blocks, the last one
/// zero-padded, handed to `f` in order as runs of whole blocks: each piece's own
/// blocks in one run, and a block that straddles pieces (or the padded last one) as
/// a run of its own. What a POLYVAL of pieces needs ([`PolyvalFn`]).
pub fn block_runs(pieces: &[&[u8]], mut f: impl FnMut(&[u8])) {
    let mut carry = [0u8; 16];
    let mut held = 0;
    for piece in pieces {
        let mut p = *piece;
        if held > 0 {
            let take = p.len().min(16 - held);
            carry[held..held + take].copy_from_slice(&p[..take]);
            held += take;
            p = &p[take..];
            if held < 16 {
                continue;
            }
            f(&carry);
        }
        let whole = p.len() / 16 * 16;
        if whole > 0 {
            f(&p[..whole]);
        }
        carry[..p.len() - whole].copy_from_slice(&p[whole..]);
        held = p.len() - whole;
    }
    if held > 0 {
        carry[held..].fill(0);
        f(&carry);
    }
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
    use std::vec;
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

    /// The header's words in [`HEADER_WORD_ORDER`]: the bytes the short tag hashes
    /// before the payload.
    fn ordered(h: &[u8; HEADER_LEN]) -> Vec<u8> {
        HEADER_WORD_ORDER
            .iter()
            .flat_map(|&i| h[8 * i..8 * i + 8].iter().copied())
            .collect()
    }

    /// Every header word is hashed once: the order is a rearrangement.
    #[test]
    fn the_header_word_order_is_a_permutation() {
        let mut seen = [false; HEADER_LEN / 8];
        for &i in &HEADER_WORD_ORDER {
            assert!(!seen[i], "word {i} twice");
            seen[i] = true;
        }
        assert!(seen.iter().all(|&s| s));
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
                m.write(&ordered(&h));
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
            for i in [0, 17, 33, 41, 49, HEADER_LEN - 1] {
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

    /// A reproducible stream of pseudo-random words (xorshift64) from `x`.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The short tag's SipHash is the crate's SipHash-2-4-128, for every length to
    /// 300 bytes (the header and a short payload) and pieces cut anywhere.
    #[test]
    fn short_tag_siphash_is_the_crates() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let bytes: Vec<u8> = (0..300).map(|_| next() as u8).collect();
        for len in 0..bytes.len() {
            let mut key = [0u8; 16];
            key.iter_mut().for_each(|b| *b = next() as u8);
            let m = &bytes[..len];
            let mut want = SipHasher24::new_with_key(&key);
            want.write(m);
            let want = want.finish128().as_bytes();
            let cut1 = next() as usize % (len + 1);
            let cut2 = cut1 + next() as usize % (len - cut1 + 1);
            let mut got = Sip::new(&key);
            got.write(&m[..cut1]);
            got.write(&[]);
            got.write(&m[cut1..cut2]);
            got.write(&m[cut2..]);
            assert_eq!(got.finish(), want, "{len} bytes cut at {cut1} and {cut2}");
        }
    }

    /// The one-piece short tag (`tag`, the frame paths') is the crate's
    /// SipHash-2-4-128 of the header's words in [`HEADER_WORD_ORDER`] then the
    /// payload, and so is `tag_parts`' (in pieces cut anywhere), for every payload
    /// length to 300 bytes (whole words and every tail).
    #[test]
    fn one_piece_short_tags_are_the_crates() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for len in 0..300 {
            let mut key = [0u8; 16];
            key.iter_mut().for_each(|b| *b = next() as u8);
            let mut h = [0u8; HEADER_LEN];
            h.iter_mut().for_each(|b| *b = next() as u8);
            let p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut want = SipHasher24::new_with_key(&key);
            want.write(&ordered(&h));
            want.write(&p);
            let want = want.finish128().as_bytes();
            assert_eq!(tag(&key, &h, &p), want, "{len} bytes");
            assert_eq!(tag_parts(&key, &h, &[&p]), want, "{len} bytes, parts");
            let (a, b) = p.split_at(next() as usize % (len + 1));
            let (b, c) = b.split_at(next() as usize % (b.len() + 1));
            assert_eq!(
                tag_parts(&key, &h, &[a, &[], b, c]),
                want,
                "{len} bytes cut"
            );
        }
    }

    /// A cached tag is the tag, whatever came through the cache before it: the same
    /// first words (a hit), other flags, other ends, another key, a long payload.
    #[test]
    fn cached_tags_are_the_tags() {
        let mut next = xorshift(0x1234_5678_9abc_def1);
        let cache = TagCache::default();
        let keys = [*b"0123456789abcdef", *b"0123456789abcdeF"];
        let mut h = [0u8; HEADER_LEN];
        h.iter_mut().for_each(|b| *b = next() as u8);
        let long = vec![3u8; LONG_TAG_FROM];
        let mut hits = 0;
        for i in 0..2_000 {
            let r = next();
            // Mostly the words hashed after the cached ones change (a run of
            // frames: ports and `seq`, `ack`, `msg_id`); now and then the flags,
            // the ends, the lengths or the key.
            let k = (r >> 8) as usize;
            let at = match r % 16 {
                0 => 2,
                1 => 9,
                2 => 32 + k % 8,
                3 => 48 + k % 8,
                _ => [16 + k % 16, 40 + k % 8][k / 16 % 2],
            };
            let before = (cache.held.get(), cache.of.get());
            h[at] ^= (r >> 16) as u8 | 1;
            let key = &keys[(r >> 24) as usize % 7 / 6];
            let p: Vec<u8> = (0..(r >> 32) as usize % 100)
                .map(|_| next() as u8)
                .collect();
            let p = if i % 97 == 0 { &long[..] } else { &p[..] };
            assert_eq!(tag_cached(key, &cache, &h, p), tag(key, &h, p), "frame {i}");
            hits += usize::from(before == (cache.held.get(), cache.of.get()) && before.0);
        }
        assert!(hits > 1_000, "{hits} hits");
    }

    /// Adds one to the big-endian `u32` at `at` of `h`.
    fn bump(h: &mut [u8; HEADER_LEN], at: usize) {
        let n = u32::from_be_bytes(h[at..at + 4].try_into().unwrap()).wrapping_add(1);
        h[at..at + 4].copy_from_slice(&n.to_be_bytes());
    }

    /// The guess is the last header with `seq`, `ack` and `msg_id` one more, carries
    /// and wrapping included, and every other byte as it was.
    #[test]
    fn the_guess_is_the_next_frames_header() {
        use super::super::field;
        let mut h = [0u8; HEADER_LEN];
        h.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i * 7 + 1) as u8);
        h[field::SEQ].copy_from_slice(&0x0000_00ffu32.to_be_bytes());
        h[field::ACK].copy_from_slice(&u32::MAX.to_be_bytes());
        h[field::MSG_ID].copy_from_slice(&0x00ff_ffffu32.to_be_bytes());
        let mut want = h;
        want[field::SEQ].copy_from_slice(&0x0000_0100u32.to_be_bytes());
        want[field::ACK].copy_from_slice(&0u32.to_be_bytes());
        want[field::MSG_ID].copy_from_slice(&0x0100_0000u32.to_be_bytes());
        assert_eq!(successor(rest_words(&h)), rest_words(&want));
    }

    /// A tag from a guessed header is the tag: a run of frames whose `seq`, `ack`
    /// and `msg_id` grow by one (the guess holds), with now and then another change
    /// or two steps at once (it does not), a guess made before most frames.
    #[test]
    fn tags_from_guessed_headers_are_the_tags() {
        use super::super::field;
        let mut next = xorshift(0x5eed_0f9e_55aa_1234);
        let key = *b"0123456789abcdef";
        let cache = TagCache::default();
        let mut h = [0u8; HEADER_LEN];
        h.iter_mut().for_each(|b| *b = next() as u8);
        h[field::SEQ].copy_from_slice(&(u32::MAX - 40).to_be_bytes());
        let mut guessed = 0;
        for i in 0..3_000 {
            let r = next();
            for at in [field::SEQ.start, field::ACK.start, field::MSG_ID.start] {
                bump(&mut h, at);
            }
            match r % 16 {
                0 => h[16 + (r >> 8) as usize % 40] ^= (r >> 16) as u8 | 1,
                1 => bump(&mut h, field::ACK.start),
                _ => {}
            }
            if !(r >> 24).is_multiple_of(8) {
                cache.prepare();
            }
            let guess = cache.ahead.get() && cache.next.get() == rest_words(&h);
            let p: Vec<u8> = (0..(r >> 32) as usize % 40).map(|_| next() as u8).collect();
            assert_eq!(
                tag_cached(&key, &cache, &h, &p),
                tag(&key, &h, &p),
                "frame {i}"
            );
            assert!(!cache.ahead.get(), "a guess is used once");
            guessed += usize::from(guess);
        }
        assert!(guessed > 2_000, "{guessed} guessed");
    }

    /// With `aws-lc`, the hosted code and the portable code (the unikernel's) give
    /// the same tags, for every length and key tried.
    #[cfg(feature = "aws-lc")]
    #[test]
    fn aws_lc_and_portable_long_tags_agree() {
        let mut next = xorshift(0x1234_5678_9abc_def0);
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

    /// A host's POLYVAL ([`use_polyval`]) hashes every long tag, whole or in pieces,
    /// to the same tags; one that declines leaves the tag to the other code.
    #[test]
    fn a_hosts_polyval_makes_the_same_long_tags_and_may_decline() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        const DECLINED: usize = LONG_TAG_FROM + 1;
        fn host(h: &[u8; 16], pieces: &[&[u8]], last: &[u8; 16]) -> Option<[u8; 16]> {
            if pieces.iter().map(|p| p.len()).sum::<usize>() == DECLINED {
                return None;
            }
            CALLS.fetch_add(1, Ordering::SeqCst);
            Some(portable_polyval(h, pieces, last))
        }
        use_polyval(host);
        let mut next = xorshift(0x0bad_cafe_f00d_d00d);
        let payload: Vec<u8> = (0..66_000).map(|_| next() as u8).collect();
        let mut key = [0u8; 16];
        key.iter_mut().for_each(|b| *b = next() as u8);
        let mut h = [0u8; HEADER_LEN];
        h.iter_mut().for_each(|b| *b = next() as u8);
        for len in [LONG_TAG_FROM, DECLINED, 4099, 65_000] {
            let p = &payload[..len];
            let keys = LongKeys::new(&key);
            let want = gcm_siv_aad(&keys.aes, &keys.nonce(&h), &[p]);
            let before = CALLS.load(Ordering::SeqCst);
            assert_eq!(tag(&key, &h, p), want, "{len} bytes");
            assert_eq!(
                tag_parts(&key, &h, &[&p[..7], &p[7..]]),
                want,
                "{len} bytes"
            );
            if len != DECLINED {
                assert!(CALLS.load(Ordering::SeqCst) >= before + 2, "{len} bytes");
            }
        }
    }

    /// [`block_runs`] hands out exactly the pieces' bytes, zero-padded to whole
    /// blocks, in runs of whole blocks, wherever the pieces are cut.
    #[test]
    fn block_runs_are_the_padded_stream_in_whole_blocks() {
        let data: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37) | 1).collect();
        for len in 0..data.len() {
            for a in 0..=len.min(40) {
                let b = (a + 17).min(len);
                let pieces = [&data[..a], &[][..], &data[a..b], &data[b..len]];
                let mut got = Vec::new();
                block_runs(&pieces, |r| {
                    assert!(!r.is_empty() && r.len() % 16 == 0, "run of {}", r.len());
                    got.extend_from_slice(r);
                });
                let mut want = data[..len].to_vec();
                want.resize(len.div_ceil(16) * 16, 0);
                assert_eq!(got, want, "len {len}, cuts {a} {b}");
            }
        }
    }
}
