//! The Volley frame format.
//!
//! One fixed 56-byte header followed by up to `payload_len` bytes, all integers
//! big-endian; on a device that vouches for each frame's sender, a short message
//! may travel under a 28-byte compact header instead (`compact`). `core/WIRE.md`
//! is the table a dissector writer needs.
//!
//! Contract (as in smoltcp): [`Packet::new_checked`] verifies the length fields; after
//! it succeeds no getter panics. [`Repr::parse`] additionally checks version, kind and
//! (unless told the device guarantees integrity) the CRC-32C. Nothing here panics on
//! any input.

use core::fmt;

use bitflags::bitflags;
use crc::{Crc, CRC_32_ISCSI};

mod compact;
mod tag;
pub use compact::{CompactHeader, COMPACT_LEN, COMPACT_MAGIC, COMPACT_PUT_MAGIC};
#[cfg(feature = "std")]
pub use tag::use_polyval;
pub use tag::{
    block_runs, tag, tag_cached, tag_parts, PolyvalFn, TagCache, LONG_TAG_FROM, TAG_LEN,
};

/// The wire version this build speaks.
pub const VERSION: u8 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 56;
/// The header's bytes that every full-header frame from one sender to one
/// receiver of a job repeats: the job and both addresses, and the checksum where
/// the device keeps frames intact (`Capabilities::integrity`: left zero). A device
/// that carries one pair's frames on a ring of its own may keep them once per ring
/// and leave them out of each frame (the Myrinet-like model's compact slots,
/// WIRE.md); it learns which bytes they are here.
pub const PAIR_INVARIANT: [core::ops::Range<usize>; 2] =
    [field::JOB.start..field::DST_NODE.end, field::CRC];
/// Bytes in [`PAIR_INVARIANT`].
pub const PAIR_INVARIANT_LEN: usize =
    (field::DST_NODE.end - field::JOB.start) + (field::CRC.end - field::CRC.start);
/// Bytes at the start of every `PUT` and `GET_REPLY` payload before the data: the
/// destination (address and bell for a put, the request id for a get reply).
pub const RMA_PREFIX: usize = 16;
/// Payload of a `GET_REQUEST`: source address, source bell, length, reserved.
pub const GET_REQUEST_LEN: usize = 24;
/// Bytes at the start of every [`Flags::TREE`] multicast frame's payload, before the
/// message's bytes: root instance (u16), tree shape (u8), reserved (u8), the root's
/// broadcast sequence number (u32).
pub const TREE_PREFIX: usize = 8;
/// The port number barrier tokens carry in both port fields (WIRE.md, `BARRIER`).
pub const BARRIER_TOKEN_PORT: crate::PortId = 1024;

/// The tag of a header and payload: with the hash `cache` keeps where one is given.
#[inline]
fn tag_with(
    key: &AuthKey,
    cache: Option<&TagCache>,
    h: &[u8; HEADER_LEN],
    payload: &[u8],
) -> [u8; TAG_LEN] {
    match cache {
        Some(c) => tag_cached(key, c, h, payload),
        None => tag(key, h, payload),
    }
}

/// CRC-32C (Castagnoli), the polynomial of iSCSI and SCTP.
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// Byte ranges of the header fields.
mod field {
    use core::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const JOB: Range<usize> = 4..8;
    pub const SRC_GROUP: Range<usize> = 8..10;
    pub const SRC_NODE: Range<usize> = 10..12;
    pub const DST_GROUP: Range<usize> = 12..14;
    pub const DST_NODE: Range<usize> = 14..16;
    pub const SRC_PORT: Range<usize> = 16..18;
    pub const DST_PORT: Range<usize> = 18..20;
    pub const SEQ: Range<usize> = 20..24;
    pub const ACK: Range<usize> = 24..28;
    pub const SACK: Range<usize> = 28..36;
    pub const WINDOW: Range<usize> = 36..38;
    pub const PAYLOAD_LEN: Range<usize> = 38..40;
    pub const MSG_ID: Range<usize> = 40..44;
    pub const OFFSET: Range<usize> = 44..48;
    pub const TOTAL_LEN: Range<usize> = 48..52;
    pub const CRC: Range<usize> = 52..56;
}

/// Why a frame was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the header, or than the header plus the payload it announces.
    Truncated,
    /// A version this build does not speak.
    BadVersion,
    /// A frame kind this build does not know.
    UnknownKind,
    /// Fields that contradict each other (e.g. a fragment past its message's end).
    Malformed,
    /// The CRC-32C does not match: corrupted on the way.
    BadChecksum,
    /// The receiver holds the job's key and the frame carries no valid tag under it:
    /// forged, from another job, or altered on the way.
    BadTag,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WireError::Truncated => "frame truncated",
            WireError::BadVersion => "unsupported wire version",
            WireError::UnknownKind => "unknown frame kind",
            WireError::Malformed => "inconsistent header fields",
            WireError::BadChecksum => "CRC-32C mismatch",
            WireError::BadTag => "missing or wrong authentication tag",
        })
    }
}

impl core::error::Error for WireError {}

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A fragment of a point-to-point message.
    Data = 1,
    /// Acknowledgement and credit return, no payload.
    Ack = 2,
    /// A barrier token: `msg_id` is the epoch, `offset` the round.
    Barrier = 3,
    /// A fragment of a broadcast or multicast message.
    Multicast = 4,
    /// Control, reliable: `offset` 1 = REJECT, the message `msg_id` the receiver of this
    /// frame sent from port `dst_port` was discarded (its destination port is not bound
    /// for input, or is reserved).
    Control = 5,
    /// Remote fetch-and-add request (reserved for the LFC personality).
    FetchAdd = 6,
    /// Remote fetch-and-add reply.
    FetchAddReply = 7,
    /// One-sided put: a fragment written straight to an address of the receiver.
    /// The payload starts with [`RMA_PREFIX`] bytes: address (u64), bell (u64).
    Put = 8,
    /// One-sided get request ([`GET_REQUEST_LEN`] bytes: address, bell, length).
    GetRequest = 9,
    /// A fragment of a get's data. The payload starts with [`RMA_PREFIX`] bytes:
    /// the request id (u32), then zeros.
    GetReply = 10,
    /// Remote handler invocation by tag (Cheetah `ainvoke`).
    Ainvoke = 11,
    /// A packet (LFC): one reliable frame, the whole message. `dst_port` is the
    /// multicast group (`0xFFFF`: unicast), `src_port` the rank that launched it,
    /// `offset` the forwarding tree's shape.
    Packet = 12,
}

impl Kind {
    /// The kind for a wire byte, if known.
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Barrier,
            4 => Kind::Multicast,
            5 => Kind::Control,
            6 => Kind::FetchAdd,
            7 => Kind::FetchAddReply,
            8 => Kind::Put,
            9 => Kind::GetRequest,
            10 => Kind::GetReply,
            11 => Kind::Ainvoke,
            12 => Kind::Packet,
            _ => return None,
        })
    }
}

bitflags! {
    /// Header flags.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Flags: u16 {
        /// The frame occupies `seq` in the sender's reliable sequence space.
        const RELIABLE = 1 << 0;
        /// The receiver should acknowledge at once (last fragment, window filling up).
        const ACK_REQ = 1 << 1;
        /// `ack`, `sack` and `window` are valid for the reverse direction.
        const HAS_ACK = 1 << 2;
        /// The last fragment of its message.
        const LAST = 1 << 3;
        /// The sender skipped the CRC because its device guarantees integrity.
        const NO_CRC = 1 << 4;
        /// The receiver could not take some frames yet (port busy or not bound):
        /// the sender should retry them later, and not count the silence as death.
        const REFUSED = 1 << 5;
        /// A port that refused frames of this channel is free now: send them again.
        const RETRY = 1 << 6;
        /// A [`TAG_LEN`]-byte tag under the job's key follows the payload
        /// (it covers header and payload; the CRC is then skipped).
        const AUTH = 1 << 7;
        /// A reliable broadcast within the sender's group that members forward down a
        /// tree: the payload starts with [`TREE_PREFIX`] bytes naming its root, the
        /// tree's shape and the root's sequence number; `offset` and `total_len`
        /// count the message's bytes only.
        const TREE = 1 << 8;
    }
}

/// Big-endian fields of a header copy, for the parsers.
#[derive(Clone, Copy)]
struct Head<'h>(&'h [u8; HEADER_LEN]);

impl Head<'_> {
    // Each field one load: a byte array built from single bytes stays single
    // byte loads once the header has been copied.
    #[inline]
    fn b16(self, r: core::ops::Range<usize>) -> u16 {
        let mut b = [0; 2];
        b.copy_from_slice(&self.0[r.start..r.start + 2]);
        u16::from_be_bytes(b)
    }

    #[inline]
    fn b32(self, r: core::ops::Range<usize>) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.0[r.start..r.start + 4]);
        u32::from_be_bytes(b)
    }

    #[inline]
    fn ends(self) -> Endpoints {
        Endpoints {
            src_group: self.b16(field::SRC_GROUP),
            src_node: self.b16(field::SRC_NODE),
            src_port: self.b16(field::SRC_PORT),
            dst_group: self.b16(field::DST_GROUP),
            dst_node: self.b16(field::DST_NODE),
            dst_port: self.b16(field::DST_PORT),
        }
    }

    #[inline]
    fn ack(self) -> AckInfo {
        AckInfo {
            ack: self.b32(field::ACK),
            sack: (self.b32(field::SACK.start..field::SACK.start + 4) as u64) << 32
                | self.b32(field::SACK.start + 4..field::SACK.end) as u64,
            window: self.b16(field::WINDOW),
        }
    }
}

/// A read/write view over the bytes of one frame.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

macro_rules! getters {
    ($($(#[$m:meta])* $name:ident, $set:ident, $ty:ty, $field:ident;)*) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            $($(#[$m])* pub fn $name(&self) -> $ty {
                let b = &self.buffer.as_ref()[field::$field];
                <$ty>::from_be_bytes(b.try_into().unwrap_or_default())
            })*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(#[doc = concat!("Sets the field read by [`Packet::", stringify!($name), "`].")]
            pub fn $set(&mut self, v: $ty) {
                self.buffer.as_mut()[field::$field].copy_from_slice(&v.to_be_bytes());
            })*
        }
    };
}

getters! {
    /// Per-job key: frames of another job are dropped.
    job_key, set_job_key, u32, JOB;
    /// Sender's group (parallel pid).
    src_group, set_src_group, u16, SRC_GROUP;
    /// Sender's instance number.
    src_node, set_src_node, u16, SRC_NODE;
    /// Destination group.
    dst_group, set_dst_group, u16, DST_GROUP;
    /// Destination instance number.
    dst_node, set_dst_node, u16, DST_NODE;
    /// Sending port.
    src_port, set_src_port, u16, SRC_PORT;
    /// Destination port.
    dst_port, set_dst_port, u16, DST_PORT;
    /// Sequence number in the sender's reliable space.
    seq, set_seq, u32, SEQ;
    /// Cumulative ack: the next sequence number the sender of this frame expects.
    ack, set_ack, u32, ACK;
    /// Selective ack: bit `i` set means `ack + 1 + i` was received.
    sack, set_sack, u64, SACK;
    /// Credits: frames beyond `ack` the sender of this frame will accept.
    window, set_window, u16, WINDOW;
    /// Bytes of payload after the header.
    payload_len, set_payload_len, u16, PAYLOAD_LEN;
    /// Message id (barrier: epoch).
    msg_id, set_msg_id, u32, MSG_ID;
    /// Offset of this fragment in its message (barrier: round).
    offset, set_offset, u32, OFFSET;
    /// Total length of the message.
    total_len, set_total_len, u32, TOTAL_LEN;
    /// CRC-32C over the header (this field as zero) and the payload.
    checksum, set_checksum, u32, CRC;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps bytes without checking them.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps bytes and checks that the header and the announced payload fit.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, WireError> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the header and the announced payload fit in the buffer.
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if len < HEADER_LEN + self.payload_len() as usize {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The wire version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The raw kind byte.
    pub fn kind_raw(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// The flags (unknown bits dropped).
    pub fn flags(&self) -> Flags {
        let b = &self.buffer.as_ref()[field::FLAGS];
        Flags::from_bits_truncate(u16::from_be_bytes([b[0], b[1]]))
    }

    /// The payload, as long as `payload_len` says.
    pub fn payload(&self) -> &[u8] {
        let n = self.payload_len() as usize;
        // Empty rather than a panic if the buffer is shorter than announced.
        self.buffer
            .as_ref()
            .get(HEADER_LEN..HEADER_LEN + n)
            .unwrap_or(&[])
    }

    /// Computes the CRC-32C of header (checksum field as zero) and payload.
    pub fn compute_checksum(&self) -> u32 {
        let b = self.buffer.as_ref();
        let mut d = CRC32C.digest();
        d.update(b.get(..field::CRC.start).unwrap_or(&[]));
        d.update(&[0; 4]);
        d.update(self.payload());
        d.finalize()
    }

    /// True when the stored CRC matches the contents.
    pub fn verify_checksum(&self) -> bool {
        self.checksum() == self.compute_checksum()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the wire version.
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    /// Sets the kind.
    pub fn set_kind(&mut self, k: Kind) {
        self.buffer.as_mut()[field::KIND] = k as u8;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, f: Flags) {
        self.buffer.as_mut()[field::FLAGS].copy_from_slice(&f.bits().to_be_bytes());
    }
    /// The payload area, as long as `payload_len` says.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let n = self.payload_len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..HEADER_LEN + n]
    }
    /// Stores the CRC-32C of the current contents.
    pub fn fill_checksum(&mut self) {
        let c = self.compute_checksum();
        self.set_checksum(c);
    }
}

/// A job's 128-bit authentication key.
pub type AuthKey = [u8; 16];

/// A key derived from a job secret for one purpose (`what`) and one job, so that the
/// key that authenticates frames, the job key in headers and anything else taken
/// from the secret are unrelated: HKDF-SHA256 (RFC 5869) with salt `"volley"`, the
/// secret as input key material, and `what` then the little-endian job as info.
/// Hosted ranks and unikernel nodes derive alike, so they can share a job.
pub fn derive_key(secret: &AuthKey, what: &[u8], job: u64) -> [u8; 16] {
    hkdf16(b"volley", [&secret[..]], &[what, &job.to_le_bytes()])
}

/// The first 16 bytes of HKDF-SHA256 (RFC 5869) of the input key material given in
/// `ikm` pieces, laid end to end, under `salt`, with `info` pieces likewise.
pub(crate) fn hkdf16<'i>(
    salt: &[u8],
    ikm: impl IntoIterator<Item = &'i [u8]>,
    info: &[&[u8]],
) -> [u8; 16] {
    let mut extract = hkdf::HkdfExtract::<sha2::Sha256>::new(Some(salt));
    for piece in ikm {
        extract.input_ikm(piece);
    }
    let (_, kdf) = extract.finalize();
    let mut out = [0u8; 16];
    // 16 bytes is far below HKDF-SHA256's limit (255 * 32): it cannot fail.
    let _ = kdf.expand_multi_info(info, &mut out);
    out
}

/// The frame key of job `job` under `secret` (see [`derive_key`]).
pub fn frame_key(secret: &AuthKey, job: u64) -> AuthKey {
    derive_key(secret, b"volley frame key", job)
}

/// The 32-bit job key carried in every header of job `job` under `secret`.
pub fn job_key(secret: &AuthKey, job: u64) -> u32 {
    let d = derive_key(secret, b"volley job key", job);
    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

/// Compares two tags in constant time: every byte is looked at, the differences
/// OR-ed together (branch-free), so no early exit tells a forger how many bytes it
/// got right. `subtle`'s `ct_eq`, whose optimisation barrier is a volatile read per
/// byte, cost 183 more instructions a message on `udp` (`udp_cost`, 2,303 against
/// 2,486), so the compare stays this one; `tags_compare_whole` tests it.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// CRC-32C of a header (checksum field taken as zero) and its payload.
fn checksum(h: &[u8; HEADER_LEN], payload: &[u8]) -> u32 {
    let mut d = CRC32C.digest();
    d.update(&h[..field::CRC.start]);
    d.update(&[0; 4]);
    d.update(payload);
    d.finalize()
}

/// Sender and destination of a frame: `(group, instance, port)` each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Endpoints {
    /// Sender's group.
    pub src_group: u16,
    /// Sender's instance.
    pub src_node: u16,
    /// Sender's port.
    pub src_port: u16,
    /// Destination group.
    pub dst_group: u16,
    /// Destination instance.
    pub dst_node: u16,
    /// Destination port.
    pub dst_port: u16,
}

/// Acknowledgement state carried by a frame for the reverse direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckInfo {
    /// Next sequence number expected.
    pub ack: u32,
    /// Bit `i`: `ack + 1 + i` received.
    pub sack: u64,
    /// Credits beyond `ack`.
    pub window: u16,
}

/// A parsed header: everything but the payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Frame kind.
    pub kind: Kind,
    /// Flags (`HAS_ACK` and `NO_CRC` are derived on emit).
    pub flags: Flags,
    /// Job key.
    pub job_key: u32,
    /// Who sends and who receives.
    pub ends: Endpoints,
    /// Sequence number (valid with `RELIABLE`).
    pub seq: u32,
    /// Piggy-backed ack.
    pub ack: Option<AckInfo>,
    /// Message id / barrier epoch.
    pub msg_id: u32,
    /// Fragment offset / barrier round.
    pub offset: u32,
    /// Message length.
    pub total_len: u32,
    /// Payload bytes following the header.
    pub payload_len: u16,
}

impl Repr {
    /// Parses and validates a frame. With `trust_integrity` (a device that never
    /// corrupts, like shared memory) a frame flagged `NO_CRC` skips the checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>, trust_integrity: bool) -> Result<Repr, WireError> {
        Repr::parse_frame(p.buffer.as_ref(), trust_integrity, None).map(|(r, _)| r)
    }

    /// Parses and validates `frame`, returning the payload that goes with it.
    ///
    /// The header is copied once into private memory and everything, the payload's
    /// extent and the checksum included, comes from that copy: a frame in memory that
    /// another process may still be writing (a shared ring slot) can give wrong
    /// contents, never an out-of-range read or a header that changes between checks.
    #[inline]
    pub fn parse_frame<'f>(
        frame: &'f [u8],
        trust_integrity: bool,
        key: Option<&AuthKey>,
    ) -> Result<(Repr, &'f [u8]), WireError> {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(frame.get(..HEADER_LEN).ok_or(WireError::Truncated)?);
        let plen = Head(&h).b16(field::PAYLOAD_LEN);
        let end = HEADER_LEN + plen as usize;
        let payload = frame.get(HEADER_LEN..end).ok_or(WireError::Truncated)?;
        let got = frame.get(end..end + TAG_LEN);
        let repr = Repr::parse_checked(&h, payload, got, trust_integrity, key)?;
        Ok((repr, payload))
    }

    /// [`Repr::parse_frame`] of the commonest frames of `kind`, or `None` for any
    /// other: a whole message in one `Data` frame (offset 0, total length its
    /// payload's), or a `Packet` (total length its payload's, any offset: its
    /// tree), with an ack and no flag but `RELIABLE` and `ACK_REQ` beyond `LAST`,
    /// `HAS_ACK` and `NO_CRC` (and `AUTH` with a key). It reads only the fields
    /// such a frame needs (a receiver's header prediction); `take` says, changing
    /// nothing, whether the receiver would take it (and what with), and only then
    /// is the tag checked, so that a frame left to `parse_frame` is tagged once.
    /// Without a key, the caller's device must guarantee integrity. A `None`
    /// frame goes through `parse_frame`, which says why it is refused, if it is.
    /// Any `kind` but `Data` and `Packet` takes nothing.
    #[inline]
    pub fn parse_single<'f, T>(
        frame: &'f [u8],
        kind: Kind,
        key: Option<&AuthKey>,
        take: impl FnOnce(&Repr, &[u8]) -> Option<T>,
    ) -> Option<(Repr, &'f [u8], T)> {
        Repr::parse_single_cached(frame, kind, key, None, take)
    }

    /// [`Repr::parse_single`] that checks the tag with the hash `cache` keeps
    /// ([`tag_cached`]), where it is given.
    #[inline]
    pub fn parse_single_cached<'f, T>(
        frame: &'f [u8],
        kind: Kind,
        key: Option<&AuthKey>,
        cache: Option<&TagCache>,
        take: impl FnOnce(&Repr, &[u8]) -> Option<T>,
    ) -> Option<(Repr, &'f [u8], T)> {
        // Any other kind turned away before the copy (the copy is checked again).
        if !matches!(kind, Kind::Data | Kind::Packet)
            || frame.get(field::KIND) != Some(&(kind as u8))
        {
            return None;
        }
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(frame.get(..HEADER_LEN)?);
        let f = Head(&h);
        let flags = f.b16(field::FLAGS);
        let auth = if key.is_some() {
            Flags::AUTH
        } else {
            Flags::empty()
        };
        let must = (Flags::LAST | Flags::HAS_ACK | Flags::NO_CRC | auth).bits();
        let may = (Flags::RELIABLE | Flags::ACK_REQ).bits();
        let payload_len = f.b16(field::PAYLOAD_LEN);
        // A data frame's offset is where it goes in its message; a packet's is
        // the tree it is forwarded on (no constraint on the wire).
        let offset = f.b32(field::OFFSET);
        if h[field::VERSION] != VERSION
            || h[field::KIND] != kind as u8
            || flags & !may != must
            || (kind == Kind::Data && offset != 0)
            || f.b32(field::TOTAL_LEN) != payload_len as u32
        {
            return None;
        }
        let end = HEADER_LEN + payload_len as usize;
        let payload = frame.get(HEADER_LEN..end)?;
        let repr = Repr {
            kind,
            flags: Flags::from_bits_truncate(flags) - Flags::HAS_ACK - Flags::NO_CRC - Flags::AUTH,
            job_key: f.b32(field::JOB),
            ends: f.ends(),
            seq: f.b32(field::SEQ),
            ack: Some(f.ack()),
            msg_id: f.b32(field::MSG_ID),
            offset,
            total_len: payload_len as u32,
            payload_len,
        };
        let t = take(&repr, payload)?;
        if let Some(key) = key {
            let got = frame.get(end..end + TAG_LEN)?;
            if !same(got, &tag_with(key, cache, &h, payload)) {
                return None;
            }
        }
        Some((repr, payload, t))
    }

    /// [`Repr::parse_frame`] of a frame received in two parts
    /// ([`crate::phy::RxToken::consume_parts`]): `head` holds the header and, with a
    /// key, the tag, and nothing else; `payload` is the whole payload.
    #[inline]
    pub fn parse_parts(
        head: &[u8],
        payload: &[u8],
        trust_integrity: bool,
        key: Option<&AuthKey>,
    ) -> Result<Repr, WireError> {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(head.get(..HEADER_LEN).ok_or(WireError::Truncated)?);
        let plen = Head(&h).b16(field::PAYLOAD_LEN);
        let tag_len = if key.is_some() { TAG_LEN } else { 0 };
        if plen as usize != payload.len() || head.len() != HEADER_LEN + tag_len {
            return Err(WireError::Truncated);
        }
        let got = head.get(HEADER_LEN..);
        Repr::parse_checked(&h, payload, got, trust_integrity, key)
    }

    /// Checks the tag (`got`, with a key) or checksum of header `h` and `payload`,
    /// then parses the header.
    #[inline]
    fn parse_checked(
        h: &[u8; HEADER_LEN],
        payload: &[u8],
        got: Option<&[u8]>,
        trust_integrity: bool,
        key: Option<&AuthKey>,
    ) -> Result<Repr, WireError> {
        let mut trusted = trust_integrity;
        if let Some(key) = key {
            // With the job's key, nothing about a frame is looked at before its tag.
            let flags = Head(h).b16(field::FLAGS);
            let ok = Flags::from_bits_truncate(flags).contains(Flags::AUTH)
                && got.is_some_and(|t| same(t, &tag(key, h, payload)));
            if !ok {
                return Err(WireError::BadTag);
            }
            // The tag covers every byte: a CRC adds nothing.
            trusted = true;
        }
        Repr::parse_header(h, payload, trusted)
    }

    #[inline]
    fn parse_header(
        h: &[u8; HEADER_LEN],
        payload: &[u8],
        trust_integrity: bool,
    ) -> Result<Repr, WireError> {
        let f = Head(h);
        if h[field::VERSION] != VERSION {
            return Err(WireError::BadVersion);
        }
        let flags = Flags::from_bits_truncate(f.b16(field::FLAGS));
        let skip_crc = trust_integrity && flags.contains(Flags::NO_CRC);
        if !skip_crc && f.b32(field::CRC) != checksum(h, payload) {
            return Err(WireError::BadChecksum);
        }
        let kind = Kind::from_u8(h[field::KIND]).ok_or(WireError::UnknownKind)?;
        let payload_len = f.b16(field::PAYLOAD_LEN);
        let (msg_id, offset, total_len) = (
            f.b32(field::MSG_ID),
            f.b32(field::OFFSET),
            f.b32(field::TOTAL_LEN),
        );
        // A tree frame's prefix is not part of its message.
        let data_len = if kind == Kind::Multicast && flags.contains(Flags::TREE) {
            payload_len
                .checked_sub(TREE_PREFIX as u16)
                .ok_or(WireError::Malformed)?
        } else {
            payload_len
        };
        if matches!(kind, Kind::Data | Kind::Multicast)
            && (offset as u64 + data_len as u64 > total_len as u64)
        {
            return Err(WireError::Malformed);
        }
        if matches!(kind, Kind::Put | Kind::GetReply)
            && (payload_len < RMA_PREFIX as u16
                || offset as u64 + (payload_len - RMA_PREFIX as u16) as u64 > total_len as u64)
        {
            return Err(WireError::Malformed);
        }
        if kind == Kind::GetRequest && payload_len != GET_REQUEST_LEN as u16 {
            return Err(WireError::Malformed);
        }
        if kind == Kind::Packet && total_len != payload_len as u32 {
            return Err(WireError::Malformed);
        }
        if kind == Kind::Ack && payload_len != 0 {
            return Err(WireError::Malformed);
        }
        let ack = flags.contains(Flags::HAS_ACK).then(|| f.ack());
        Ok(Repr {
            kind,
            flags: flags - Flags::HAS_ACK - Flags::NO_CRC - Flags::AUTH,
            job_key: f.b32(field::JOB),
            ends: f.ends(),
            seq: f.b32(field::SEQ),
            ack,
            msg_id,
            offset,
            total_len,
            payload_len,
        })
    }

    /// Bytes needed to emit this frame.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize
    }

    /// The header bytes, checksum field zero.
    #[inline]
    fn header_bytes(&self, skip_crc: bool, auth: bool) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        self.write_header(&mut h, skip_crc, auth);
        h
    }

    /// Writes the header bytes into `h`, checksum field zero. Every field is stored
    /// at its fixed place (no intermediate copy): this runs once per frame sent.
    #[inline]
    fn write_header(&self, h: &mut [u8; HEADER_LEN], skip_crc: bool, auth: bool) {
        // The derived flags by bit, not by `Flags::set` (three branches per frame).
        let derived = (Flags::HAS_ACK.bits() * self.ack.is_some() as u16)
            | (Flags::NO_CRC.bits() * skip_crc as u16)
            | (Flags::AUTH.bits() * auth as u16);
        let clear = Flags::HAS_ACK | Flags::NO_CRC | Flags::AUTH;
        let flags = (self.flags.bits() & !clear.bits()) | derived;
        let a = self.ack.unwrap_or_default();
        fn put<const N: usize>(h: &mut [u8; HEADER_LEN], at: usize, v: [u8; N]) {
            h[at..at + N].copy_from_slice(&v);
        }
        h[field::VERSION] = VERSION;
        h[field::KIND] = self.kind as u8;
        put(h, field::FLAGS.start, flags.to_be_bytes());
        put(h, field::JOB.start, self.job_key.to_be_bytes());
        put(h, field::SRC_GROUP.start, self.ends.src_group.to_be_bytes());
        put(h, field::SRC_NODE.start, self.ends.src_node.to_be_bytes());
        put(h, field::DST_GROUP.start, self.ends.dst_group.to_be_bytes());
        put(h, field::DST_NODE.start, self.ends.dst_node.to_be_bytes());
        put(h, field::SRC_PORT.start, self.ends.src_port.to_be_bytes());
        put(h, field::DST_PORT.start, self.ends.dst_port.to_be_bytes());
        put(h, field::SEQ.start, self.seq.to_be_bytes());
        put(h, field::ACK.start, a.ack.to_be_bytes());
        put(h, field::SACK.start, a.sack.to_be_bytes());
        put(h, field::WINDOW.start, a.window.to_be_bytes());
        put(h, field::PAYLOAD_LEN.start, self.payload_len.to_be_bytes());
        put(h, field::MSG_ID.start, self.msg_id.to_be_bytes());
        put(h, field::OFFSET.start, self.offset.to_be_bytes());
        put(h, field::TOTAL_LEN.start, self.total_len.to_be_bytes());
        put(h, field::CRC.start, [0; 4]);
    }

    /// Writes the header into `p` (checksum zero), for a caller that fills the payload
    /// itself and then calls [`Packet::fill_checksum`] unless `skip_crc`.
    /// [`Repr::emit_with_payload`] does all of it.
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, skip_crc: bool) {
        p.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&self.header_bytes(skip_crc, false));
    }

    /// Writes header and payload pieces (concatenated) and the checksum.
    /// `buf` must be at least [`Repr::buffer_len`] bytes and the pieces must add up
    /// to `payload_len`; otherwise nothing is written and `Malformed` is returned.
    pub fn emit_with_payload(
        &self,
        buf: &mut [u8],
        pieces: &[&[u8]],
        skip_crc: bool,
    ) -> Result<usize, WireError> {
        self.emit_frame(buf, pieces, skip_crc, None)
    }

    /// [`Repr::emit_with_payload`], then (with `key`) the authentication tag after the
    /// payload: `buf` must then hold [`Repr::buffer_len`] + [`TAG_LEN`] bytes.
    #[inline]
    pub fn emit_frame(
        &self,
        buf: &mut [u8],
        pieces: &[&[u8]],
        skip_crc: bool,
        key: Option<&AuthKey>,
    ) -> Result<usize, WireError> {
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        if total != self.payload_len as usize {
            return Err(WireError::Malformed);
        }
        self.emit_frame_with(buf, skip_crc, key, |rest| {
            let mut at = 0;
            for piece in pieces {
                rest[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
        })
    }

    /// The header and tag (zeros without `key`) of the frame [`Repr::emit_frame_with`]
    /// would write with `pieces` as its payload, for a device that sends the parts
    /// where they lie ([`crate::phy::Device::transmit_parts`]).
    pub fn frame_parts<const N: usize>(
        &self,
        skip_crc: bool,
        key: Option<&AuthKey>,
        pieces: [&[u8]; N],
    ) -> Result<([u8; HEADER_LEN], [u8; TAG_LEN]), WireError> {
        if pieces.iter().map(|p| p.len()).sum::<usize>() != self.payload_len as usize {
            return Err(WireError::Malformed);
        }
        let skip_crc = skip_crc || key.is_some();
        let mut h = self.header_bytes(skip_crc, key.is_some());
        if !skip_crc {
            let mut d = CRC32C.digest();
            d.update(&h[..field::CRC.start]);
            d.update(&[0; 4]);
            for p in pieces {
                d.update(p);
            }
            h[field::CRC].copy_from_slice(&d.finalize().to_be_bytes());
        }
        let t = match key {
            // With a key the checksum is skipped: `h` is what the tag covers.
            Some(key) => tag_parts(key, &h, &pieces),
            None => [0; TAG_LEN],
        };
        Ok((h, t))
    }

    /// [`Repr::emit_frame`] with the payload written by `fill` straight into its place
    /// (`payload_len` bytes), for a payload that is read from elsewhere (remote
    /// memory access reads the program's memory into the frame).
    #[inline]
    pub fn emit_frame_with<F: FnOnce(&mut [u8])>(
        &self,
        buf: &mut [u8],
        skip_crc: bool,
        key: Option<&AuthKey>,
        fill: F,
    ) -> Result<usize, WireError> {
        self.emit_frame_cached(buf, skip_crc, key, None, fill)
    }

    /// [`Repr::emit_frame_with`] that tags with the hash `cache` keeps
    /// ([`tag_cached`]), where it is given.
    #[inline]
    pub fn emit_frame_cached<F: FnOnce(&mut [u8])>(
        &self,
        buf: &mut [u8],
        skip_crc: bool,
        key: Option<&AuthKey>,
        cache: Option<&TagCache>,
        fill: F,
    ) -> Result<usize, WireError> {
        let total = self.payload_len as usize;
        let len = self.buffer_len();
        let full = len + if key.is_some() { TAG_LEN } else { 0 };
        if buf.len() < full {
            return Err(WireError::Malformed);
        }
        let skip_crc = skip_crc || key.is_some();
        let (head, rest) = buf.split_at_mut(HEADER_LEN);
        let Ok(head) = <&mut [u8; HEADER_LEN]>::try_from(head) else {
            return Err(WireError::Malformed);
        };
        self.write_header(head, skip_crc, key.is_some());
        fill(&mut rest[..total]);
        if !skip_crc {
            let mut d = CRC32C.digest();
            d.update(&head[..]);
            d.update(&rest[..total]);
            head[field::CRC].copy_from_slice(&d.finalize().to_be_bytes());
        }
        if let Some(key) = key {
            let t = tag_with(key, cache, head, &rest[..total]);
            buf[len..full].copy_from_slice(&t);
        }
        Ok(full)
    }
}

#[cfg(test)]
mod tests;
