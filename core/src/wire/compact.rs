//! The compact header (WIRE.md, "Compact frames").
//!
//! A device that names the sender of every frame, delivers a frame only to the node
//! it was sent to, never corrupts one and carries one job alone (the Myrinet-like
//! model on the job's own shared memory: [`crate::phy::Capabilities::compact`]) lets
//! a whole message in one data frame of a job without a key travel under
//! [`COMPACT_LEN`] bytes instead of [`super::HEADER_LEN`]: the job, the receiver's
//! name, the offset (0), the total (the payload's length), the selective acks (none)
//! and the checksum are left out. The receiver fills them in from what it knows and
//! parses the rest as untrusted bytes. Little-endian, unlike the full header: it
//! never leaves the host or the machines sharing its memory. A whole put in one
//! frame travels the same way under [`COMPACT_PUT_MAGIC`], its total the payload
//! less the put's [`RMA_PREFIX`].
//!
//! | bytes | field |
//! |---|---|
//! | 0 | [`COMPACT_MAGIC`] (never a [`super::VERSION`]) |
//! | 1 | flags: `RELIABLE` (bit 0), `ACK_REQ` (1), `REFUSED` (5), `RETRY` (6) |
//! | 2..4 | sender's group |
//! | 4..6 | sender's instance |
//! | 6..8 | sender's port |
//! | 8..10 | receiver's port |
//! | 10..12 | payload length |
//! | 12..16 | `seq` |
//! | 16..20 | `msg_id` |
//! | 20..24 | `ack` |
//! | 24..26 | `window` |
//! | 26..28 | zero |

use super::{AckInfo, Endpoints, Flags, Kind, Repr, WireError, RMA_PREFIX};

/// Bytes of the compact header.
pub const COMPACT_LEN: usize = 28;
/// The first byte of a compact frame.
pub const COMPACT_MAGIC: u8 = 0xC5;
/// The first byte of a compact put: a data frame's header, whose payload is a
/// put's ([`RMA_PREFIX`], then the data) and whose total leaves that prefix out.
pub const COMPACT_PUT_MAGIC: u8 = 0xC6;

/// The flags a compact frame may carry (`LAST` is implied).
const CARRIED: Flags = Flags::RELIABLE
    .union(Flags::ACK_REQ)
    .union(Flags::REFUSED)
    .union(Flags::RETRY);

/// A compact header's fields, read from or written to its bytes in one place:
/// the send-at-once and receive fast paths use it without a [`Repr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactHeader {
    /// Flags; only those a compact frame carries are written (`LAST` is implied).
    pub flags: Flags,
    /// Sender's group.
    pub src_group: u16,
    /// Sender's instance.
    pub src_node: u16,
    /// Sender's port.
    pub src_port: u16,
    /// Receiver's port.
    pub dst_port: u16,
    /// Payload bytes (the whole message).
    pub len: u16,
    /// Sequence number (with `RELIABLE`).
    pub seq: u32,
    /// Message id.
    pub msg_id: u32,
    /// Next sequence number the sender expects (no selective acks).
    pub ack: u32,
    /// Credits the sender advertises.
    pub window: u16,
}

impl CompactHeader {
    /// Writes the header into `buf`, then the payload through `fill` (given
    /// exactly [`CompactHeader::len`] bytes). `buf` must hold [`COMPACT_LEN`] plus
    /// the payload.
    #[inline(always)]
    pub fn emit<F: FnOnce(&mut [u8])>(&self, buf: &mut [u8], fill: F) -> Result<usize, WireError> {
        let n = COMPACT_LEN + self.len as usize;
        let Some((h, rest)) = buf
            .get_mut(..n)
            .and_then(|b| b.split_first_chunk_mut::<COMPACT_LEN>())
        else {
            return Err(WireError::Malformed);
        };
        h[0] = COMPACT_MAGIC;
        h[1] = (self.flags & CARRIED).bits() as u8;
        h[2..4].copy_from_slice(&self.src_group.to_le_bytes());
        h[4..6].copy_from_slice(&self.src_node.to_le_bytes());
        h[6..8].copy_from_slice(&self.src_port.to_le_bytes());
        h[8..10].copy_from_slice(&self.dst_port.to_le_bytes());
        h[10..12].copy_from_slice(&self.len.to_le_bytes());
        h[12..16].copy_from_slice(&self.seq.to_le_bytes());
        h[16..20].copy_from_slice(&self.msg_id.to_le_bytes());
        h[20..24].copy_from_slice(&self.ack.to_le_bytes());
        h[24..26].copy_from_slice(&self.window.to_le_bytes());
        h[26..28].copy_from_slice(&[0, 0]);
        fill(rest);
        Ok(n)
    }

    /// Parses an untrusted compact frame: its header (read once, into private
    /// memory: the frame may sit where its sender can still write) and payload.
    /// The flags returned include the implied `LAST`.
    #[inline(always)]
    pub fn parse(frame: &[u8]) -> Result<(CompactHeader, &[u8]), WireError> {
        let h: [u8; COMPACT_LEN] = *frame
            .first_chunk::<COMPACT_LEN>()
            .ok_or(WireError::Truncated)?;
        // Each field one load (a byte array built from single bytes stays single
        // byte loads).
        let b16 = |at: usize| {
            let mut b = [0; 2];
            b.copy_from_slice(&h[at..at + 2]);
            u16::from_le_bytes(b)
        };
        let b32 = |at: usize| {
            let mut b = [0; 4];
            b.copy_from_slice(&h[at..at + 4]);
            u32::from_le_bytes(b)
        };
        if h[0] != COMPACT_MAGIC {
            return Err(WireError::BadVersion);
        }
        let flags = Flags::from_bits(u16::from(h[1]))
            .filter(|f| CARRIED.contains(*f))
            .ok_or(WireError::Malformed)?;
        if b16(26) != 0 {
            return Err(WireError::Malformed);
        }
        let len = b16(10);
        let payload = frame
            .get(COMPACT_LEN..COMPACT_LEN + len as usize)
            .ok_or(WireError::Truncated)?;
        let header = CompactHeader {
            flags: flags | Flags::LAST,
            src_group: b16(2),
            src_node: b16(4),
            src_port: b16(6),
            dst_port: b16(8),
            len,
            seq: b32(12),
            msg_id: b32(16),
            ack: b32(20),
            window: b16(24),
        };
        Ok((header, payload))
    }

    /// The full header this one stands for, on a frame that came to
    /// `dst_group`/`dst_node` of job `job_key` (what the compact header leaves out).
    #[inline]
    pub fn repr(&self, job_key: u32, dst_group: u16, dst_node: u16) -> Repr {
        Repr {
            kind: Kind::Data,
            flags: self.flags,
            job_key,
            ends: Endpoints {
                src_group: self.src_group,
                src_node: self.src_node,
                src_port: self.src_port,
                dst_group,
                dst_node,
                dst_port: self.dst_port,
            },
            seq: self.seq,
            ack: Some(AckInfo {
                ack: self.ack,
                sack: 0,
                window: self.window,
            }),
            msg_id: self.msg_id,
            offset: 0,
            total_len: u32::from(self.len),
            payload_len: self.len,
        }
    }
}

impl Repr {
    /// Whether this frame may travel compact: a whole message in one data frame,
    /// with an ack that selects nothing, no flag the compact header lacks.
    #[inline]
    pub fn compactable(&self) -> bool {
        self.kind == Kind::Data
            && self.offset == 0
            && self.total_len == self.payload_len as u32
            && self.flags.contains(Flags::LAST)
            && (self.flags - Flags::LAST - CARRIED).is_empty()
            && self.ack.is_some_and(|a| a.sack == 0)
    }

    /// Whether this frame may travel as a compact put: a whole put in one frame,
    /// with an ack that selects nothing, no flag the compact header lacks.
    #[inline]
    pub fn compact_put(&self) -> bool {
        self.kind == Kind::Put
            && self.offset == 0
            && u64::from(self.total_len) + RMA_PREFIX as u64 == u64::from(self.payload_len)
            && self.flags.contains(Flags::LAST)
            && (self.flags - Flags::LAST - CARRIED).is_empty()
            && self.ack.is_some_and(|a| a.sack == 0)
    }

    /// [`Repr::emit_compact`] of a [`Repr::compact_put`] frame: the same header
    /// under [`COMPACT_PUT_MAGIC`].
    #[inline]
    pub fn emit_compact_put<F: FnOnce(&mut [u8])>(
        &self,
        buf: &mut [u8],
        fill: F,
    ) -> Result<usize, WireError> {
        let n = self.emit_compact(buf, fill)?;
        if let Some(b) = buf.first_mut() {
            *b = COMPACT_PUT_MAGIC;
        }
        Ok(n)
    }

    /// Writes the compact header of a [`Repr::compactable`] frame into `buf`, then
    /// its payload through `fill`. `buf` must hold [`COMPACT_LEN`] plus the payload.
    #[inline]
    pub fn emit_compact<F: FnOnce(&mut [u8])>(
        &self,
        buf: &mut [u8],
        fill: F,
    ) -> Result<usize, WireError> {
        let a = self.ack.unwrap_or_default();
        let e = &self.ends;
        CompactHeader {
            flags: self.flags,
            src_group: e.src_group,
            src_node: e.src_node,
            src_port: e.src_port,
            dst_port: e.dst_port,
            len: self.payload_len,
            seq: self.seq,
            msg_id: self.msg_id,
            ack: a.ack,
            window: a.window,
        }
        .emit(buf, fill)
    }

    /// Parses an untrusted compact frame that came to `dst_group`/`dst_node` of job
    /// `job_key`: the header and its payload.
    #[inline]
    pub fn parse_compact(
        frame: &[u8],
        job_key: u32,
        dst_group: u16,
        dst_node: u16,
    ) -> Result<(Repr, &[u8]), WireError> {
        let (h, payload) = CompactHeader::parse(frame)?;
        Ok((h.repr(job_key, dst_group, dst_node), payload))
    }

    /// Parses an untrusted compact put as [`Repr::parse_compact`] parses a data
    /// frame: first byte [`COMPACT_PUT_MAGIC`], a payload of at least its
    /// [`RMA_PREFIX`], the total the rest.
    pub fn parse_compact_put(
        frame: &[u8],
        job_key: u32,
        dst_group: u16,
        dst_node: u16,
    ) -> Result<(Repr, &[u8]), WireError> {
        let mut head: [u8; COMPACT_LEN] = *frame
            .first_chunk::<COMPACT_LEN>()
            .ok_or(WireError::Truncated)?;
        if head[0] != COMPACT_PUT_MAGIC {
            return Err(WireError::BadVersion);
        }
        let len = u16::from_le_bytes([head[10], head[11]]);
        let total = len
            .checked_sub(RMA_PREFIX as u16)
            .ok_or(WireError::Malformed)?;
        // The rest is a data frame's header: parsed as one, without its payload.
        head[0] = COMPACT_MAGIC;
        head[10..12].fill(0);
        let (mut repr, _) = Repr::parse_compact(&head, job_key, dst_group, dst_node)?;
        let payload = frame
            .get(COMPACT_LEN..COMPACT_LEN + len as usize)
            .ok_or(WireError::Truncated)?;
        repr.kind = Kind::Put;
        repr.payload_len = len;
        repr.total_len = u32::from(total);
        Ok((repr, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Repr {
        Repr {
            kind: Kind::Data,
            flags: Flags::RELIABLE | Flags::LAST | Flags::ACK_REQ,
            job_key: 0xDEAD_BEEF,
            ends: Endpoints {
                src_group: 7,
                src_node: 0x0102,
                src_port: 3,
                dst_group: 7,
                dst_node: 2,
                dst_port: 1024,
            },
            seq: 0x1122_3344,
            ack: Some(AckInfo {
                ack: 0x5566_7788,
                sack: 0,
                window: 0x99AA,
            }),
            msg_id: 0xBBCC_DDEE,
            offset: 0,
            total_len: 5,
            payload_len: 5,
        }
    }

    #[test]
    fn round_trip_fills_in_what_the_header_leaves_out() {
        let r = sample();
        assert!(r.compactable());
        let mut buf = [0u8; 64];
        let n = r
            .emit_compact(&mut buf, |p| p.copy_from_slice(b"hello"))
            .unwrap();
        assert_eq!(n, COMPACT_LEN + 5);
        assert_eq!(buf[0], COMPACT_MAGIC);
        let (got, payload) = Repr::parse_compact(&buf[..n], 0xDEAD_BEEF, 7, 2).unwrap();
        assert_eq!((got, payload), (r, &b"hello"[..]));
        // Bytes past the frame are not its payload.
        let (_, p) = Repr::parse_compact(&buf, 0xDEAD_BEEF, 7, 2).unwrap();
        assert_eq!(p, b"hello");
        assert_eq!(
            r.emit_compact(&mut buf[..n - 1], |_| ()),
            Err(WireError::Malformed)
        );
    }

    #[test]
    fn the_header_alone_round_trips_and_stands_for_the_full_one() {
        let r = sample();
        let mut buf = [0u8; 64];
        let n = r.emit_compact(&mut buf, |p| p.fill(4)).unwrap();
        let (h, payload) = CompactHeader::parse(&buf[..n]).unwrap();
        assert_eq!(payload, &[4u8; 5][..]);
        assert_eq!(h.repr(0xDEAD_BEEF, 7, 2), r);
        // Written from the header alone, the same bytes.
        let mut again = [0u8; 64];
        assert_eq!(h.emit(&mut again, |p| p.fill(4)), Ok(n));
        assert_eq!(again[..n], buf[..n]);
        // Flags the compact header cannot carry are not written.
        let wide = CompactHeader {
            flags: h.flags | Flags::TREE,
            ..h
        };
        assert_eq!(wide.emit(&mut again, |p| p.fill(4)), Ok(n));
        assert_eq!(again[..n], buf[..n]);
        assert_eq!(
            h.emit(&mut again[..n - 1], |_| ()),
            Err(WireError::Malformed)
        );
    }

    #[test]
    fn only_a_whole_message_in_one_data_frame_with_a_plain_ack_is_compactable() {
        let with = |f: fn(&mut Repr)| {
            let mut r = sample();
            f(&mut r);
            r.compactable()
        };
        assert!(!with(|r| r.kind = Kind::Multicast));
        assert!(!with(|r| r.offset = 1));
        assert!(!with(|r| r.total_len = 6));
        assert!(!with(|r| r.flags -= Flags::LAST));
        assert!(!with(|r| r.flags |= Flags::TREE));
        assert!(!with(|r| r.ack = None));
        assert!(!with(|r| r.ack = Some(AckInfo {
            sack: 1,
            ..AckInfo::default()
        })));
        assert!(with(|r| r.flags |= Flags::REFUSED | Flags::RETRY));
        assert!(with(|r| r.flags -= Flags::RELIABLE | Flags::ACK_REQ));
    }

    #[test]
    fn a_put_in_one_frame_round_trips_under_its_own_magic() {
        let mut r = sample();
        r.kind = Kind::Put;
        r.payload_len = (RMA_PREFIX + 5) as u16;
        assert!(r.compact_put() && !r.compactable());
        assert!(!sample().compact_put());
        let mut buf = [0u8; 64];
        let n = r.emit_compact_put(&mut buf, |p| p.fill(3)).unwrap();
        assert_eq!(
            (n, buf[0]),
            (COMPACT_LEN + RMA_PREFIX + 5, COMPACT_PUT_MAGIC)
        );
        let (got, payload) = Repr::parse_compact_put(&buf[..n], 0xDEAD_BEEF, 7, 2).unwrap();
        assert_eq!((got, payload), (r, &[3u8; RMA_PREFIX + 5][..]));
        // Not a data frame, and a data frame is not a put.
        assert_eq!(
            Repr::parse_compact(&buf[..n], 0, 7, 2).map(|_| ()),
            Err(WireError::BadVersion)
        );
        let m = sample().emit_compact(&mut buf, |p| p.fill(1)).unwrap();
        let parse = |b: &[u8]| Repr::parse_compact_put(b, 0, 7, 2).map(|_| ());
        assert_eq!(parse(&buf[..m]), Err(WireError::BadVersion));
        // A put shorter than its prefix, a cut one, bad flags, a non-zero pad.
        let n = r.emit_compact_put(&mut buf, |p| p.fill(3)).unwrap();
        let mut b = buf;
        b[10..12].copy_from_slice(&(RMA_PREFIX as u16 - 1).to_le_bytes());
        assert_eq!(parse(&b[..n]), Err(WireError::Malformed));
        assert_eq!(parse(&buf[..n - 1]), Err(WireError::Truncated));
        assert_eq!(parse(&buf[..COMPACT_LEN - 1]), Err(WireError::Truncated));
        let mut b = buf;
        b[1] |= Flags::AUTH.bits() as u8;
        assert_eq!(parse(&b[..n]), Err(WireError::Malformed));
        let mut b = buf;
        b[26] = 1;
        assert_eq!(parse(&b[..n]), Err(WireError::Malformed));
        // Only a whole put in one frame.
        let with = |f: fn(&mut Repr)| {
            let mut p = r;
            f(&mut p);
            p.compact_put()
        };
        assert!(!with(|p| p.offset = 16));
        assert!(!with(|p| p.total_len += 1));
        assert!(!with(|p| p.flags -= Flags::LAST));
        assert!(!with(|p| p.ack = None));
    }

    #[test]
    fn bad_headers_are_refused_with_a_reason() {
        let mut buf = [0u8; 64];
        let n = sample().emit_compact(&mut buf, |p| p.fill(1)).unwrap();
        let parse = |b: &[u8]| Repr::parse_compact(b, 0, 7, 2).map(|_| ());
        assert_eq!(parse(&buf[..n]), Ok(()));
        assert_eq!(parse(&buf[..COMPACT_LEN - 1]), Err(WireError::Truncated));
        assert_eq!(parse(&buf[..n - 1]), Err(WireError::Truncated));
        let mut b = buf;
        b[0] = super::super::VERSION;
        assert_eq!(parse(&b[..n]), Err(WireError::BadVersion));
        for bad in [Flags::LAST, Flags::AUTH, Flags::HAS_ACK, Flags::NO_CRC] {
            let mut b = buf;
            b[1] |= bad.bits() as u8;
            assert_eq!(parse(&b[..n]), Err(WireError::Malformed), "{bad:?}");
        }
        let mut b = buf;
        b[27] = 1;
        assert_eq!(parse(&b[..n]), Err(WireError::Malformed));
    }
}
