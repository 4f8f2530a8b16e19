//! Short frames written compactly: the header bytes every frame of a pair repeats
//! (which bytes those are, the wire format says: `wire::PAIR_INVARIANT`) are kept
//! once in a template and left out of the slot. The NIC moves bytes; it reads no
//! header field.

use super::*;
use volley_core::wire::{HEADER_LEN, PAIR_INVARIANT, PAIR_INVARIANT_LEN};

/// Ring slot length-word bit: the frame travels without its [`ELIDED`] bytes, which
/// the ring's template holds (see the module documentation).
pub const COMPACT: u32 = 1 << 30;
/// Bytes a compact frame leaves out: the wire format's pair-invariant bytes (the
/// job, the addresses and the CRC, the same in every frame on a ring).
pub const ELIDED: usize = PAIR_INVARIANT_LEN;
/// Frames from this many bytes up have the elided fields.
pub(super) const COMPACT_MIN: usize = HEADER_LEN;
/// The elided bytes of a frame, in the order the ring's template holds them.
pub(super) const TEMPLATE_PARTS: [core::ops::Range<usize>; 2] = PAIR_INVARIANT;
/// Frames up to this many bytes travel compact in one line: sequence word, length
/// and frame then fit the slot's first cache line, so a short message costs one
/// line, not two.
pub const COMPACT_ONE: usize = 64 - SLOT_HEADER + ELIDED;
/// Frames from this many bytes up to [`COMPACT_MAX`] travel compact in two lines
/// instead of three (shorter ones take two lines whole).
pub const COMPACT_TWO_MIN: usize = 2 * 64 - SLOT_HEADER + 1;
/// The longest compact frame: two lines.
pub const COMPACT_MAX: usize = 2 * 64 - SLOT_HEADER + ELIDED;
/// The bytes a compact frame of one line (two: `KEPT_TWO`) keeps, in the order its
/// slot holds them (bytes past the frame's end are moved too, unread: every slot
/// has room for them).
pub(super) const KEPT_ONE: [core::ops::Range<usize>; 3] = kept(COMPACT_ONE);
pub(super) const KEPT_TWO: [core::ops::Range<usize>; 3] = kept(COMPACT_MAX);

/// The bytes of a frame of `len` bytes around the elided ones.
const fn kept(len: usize) -> [core::ops::Range<usize>; 3] {
    let [a, b] = PAIR_INVARIANT;
    [0..a.start, a.end..b.start, b.end..len]
}
// The region layout (`VERSION`) holds a 16-byte template and slots laid out for
// these ranges: a header that moved them would need a new layout version.
const _: () = assert!(ELIDED == 16 && KEPT_ONE[1].start == 16 && KEPT_ONE[2].start == 56);

/// Whether a frame of `len` bytes saves a cache line travelling compact.
#[inline(always)]
pub(super) fn compact_len(len: usize) -> bool {
    (COMPACT_MIN..=COMPACT_ONE).contains(&len) || (COMPACT_TWO_MIN..=COMPACT_MAX).contains(&len)
}

/// Copies `parts` of frame `f`, in order, into `out` (exactly their length).
pub(super) fn gather(f: &[u8], parts: &[core::ops::Range<usize>], out: &mut [u8]) {
    let mut at = 0;
    for r in parts {
        out[at..at + r.len()].copy_from_slice(&f[r.clone()]);
        at += r.len();
    }
}

/// Copies `src` (exactly the length of `parts`) into `parts` of frame `f`.
pub(super) fn scatter(f: &mut [u8], parts: &[core::ops::Range<usize>], src: &[u8]) {
    let mut at = 0;
    for r in parts {
        f[r.clone()].copy_from_slice(&src[at..at + r.len()]);
        at += r.len();
    }
}

/// Whether frame `f` (at least [`COMPACT_MIN`] bytes), to go as frame `next` of
/// `ring`, may leave out its [`ELIDED`] bytes: they match the ring's template, or
/// the template is rewritten to them because the consumer has read every frame
/// before this one (its release of `head` orders its last template read before our
/// stores).
pub(super) fn compactable(
    (region, ring): (&Region, usize),
    next: u64,
    f: &[u8; COMPACT_MAX],
) -> bool {
    // SAFETY: `reserve` named `ring` for a node below the node count (see `Rings`'
    // ring access); only its producer, us, writes the template.
    let t = unsafe { ring_template(region, ring) };
    let mut mine = [0u8; ELIDED];
    gather(f, &TEMPLATE_PARTS, &mut mine);
    if t == mine {
        return true;
    }
    let consumed = region
        .u64_at(ring + off::RING_HEAD)
        .is_ok_and(|h| h.load(Ordering::Acquire) == next.wrapping_sub(1));
    if !consumed {
        return false;
    }
    // SAFETY: only the ring's producer (us, through `&mut MyriNic`) writes its
    // template, and its consumer reads it only while it holds a compact frame,
    // which it holds none of now (`head` has caught up); the shared slice `t`
    // is not used again.
    let Ok(t) = (unsafe { region.bytes_mut(ring + off::RING_TEMPLATE, ELIDED) }) else {
        return false;
    };
    // Published with the frame by the release of its sequence word.
    t.copy_from_slice(&mine);
    true
}
