//! A pcap writer wrapped around any device: every frame sent and received lands in a
//! classic pcap file (link type USER0 = 147, one frame a record), which
//! `core/wireshark/volley.lua` dissects.

use std::io::Write;

use super::{Capabilities, Device, RxToken, TxToken};
use crate::time::Instant;
use crate::NodeAddr;

const LINKTYPE_USER0: u32 = 147;

/// Wraps a device and records its traffic into `W`.
#[derive(Debug)]
pub struct PcapWriter<D, W: Write> {
    inner: D,
    sink: W,
    now: Instant,
    /// First write error, if any; later frames are not recorded.
    pub error: Option<std::io::ErrorKind>,
}

/// Writes a pcap file's global header (link type USER0, frames up to 64 KiB).
pub fn write_header<W: Write>(sink: &mut W) -> std::io::Result<()> {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&65535u32.to_le_bytes());
    h[20..24].copy_from_slice(&LINKTYPE_USER0.to_le_bytes());
    sink.write_all(&h)
}

/// Writes one frame's record, stamped `now`, after [`write_header`]: for a
/// device wrapper of its own that cannot be a [`PcapWriter`].
pub fn write_record<W: Write>(sink: &mut W, now: Instant, frame: &[u8]) -> std::io::Result<()> {
    let mut error = None;
    record(sink, &mut error, now, frame);
    error.map_or(Ok(()), |k| Err(k.into()))
}

impl<D: Device, W: Write> PcapWriter<D, W> {
    /// Wraps `inner`, writing the pcap global header to `sink` first.
    pub fn new(inner: D, mut sink: W) -> std::io::Result<Self> {
        write_header(&mut sink)?;
        Ok(PcapWriter {
            inner,
            sink,
            now: Instant::ZERO,
            error: None,
        })
    }

    /// The sink, e.g. to flush or inspect it.
    pub fn sink_mut(&mut self) -> &mut W {
        &mut self.sink
    }
}

fn record<W: Write>(sink: &mut W, error: &mut Option<std::io::ErrorKind>, now: Instant, f: &[u8]) {
    if error.is_some() {
        return;
    }
    let us = now.total_micros();
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
    h[4..8].copy_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
    h[8..12].copy_from_slice(&(f.len() as u32).to_le_bytes());
    h[12..16].copy_from_slice(&(f.len() as u32).to_le_bytes());
    if let Err(e) = sink.write_all(&h).and_then(|_| sink.write_all(f)) {
        *error = Some(e.kind());
    }
}

/// A received frame that is recorded when consumed.
#[derive(Debug)]
pub struct PcapRx<'a, T, W: Write> {
    tok: T,
    sink: &'a mut W,
    error: &'a mut Option<std::io::ErrorKind>,
    now: Instant,
}

/// A frame to send that is recorded once written.
#[derive(Debug)]
pub struct PcapTx<'a, T, W: Write> {
    tok: T,
    sink: &'a mut W,
    error: &'a mut Option<std::io::ErrorKind>,
    now: Instant,
}

impl<T: RxToken, W: Write> RxToken for PcapRx<'_, T, W> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let (sink, error, now) = (self.sink, self.error, self.now);
        self.tok.consume(|b| {
            record(sink, error, now, b);
            f(b)
        })
    }
    fn source(&self) -> Option<crate::NodeAddr> {
        self.tok.source()
    }
}

impl<T: TxToken, W: Write> TxToken for PcapTx<'_, T, W> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let (sink, error, now) = (self.sink, self.error, self.now);
        self.tok.consume(len, |b| {
            let r = f(b);
            record(sink, error, now, b);
            r
        })
    }
}

impl<D: Device, W: Write> Device for PcapWriter<D, W> {
    type RxToken<'a>
        = PcapRx<'a, D::RxToken<'a>, W>
    where
        Self: 'a;
    type TxToken<'a>
        = PcapTx<'a, D::TxToken<'a>, W>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
        self.now = now;
        let tok = self.inner.receive(now)?;
        Some(PcapRx {
            tok,
            sink: &mut self.sink,
            error: &mut self.error,
            now,
        })
    }

    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>> {
        self.now = now;
        let tok = self.inner.transmit(now, dst)?;
        Some(PcapTx {
            tok,
            sink: &mut self.sink,
            error: &mut self.error,
            now,
        })
    }

    fn capabilities(&self) -> Capabilities {
        // Every frame this node sends goes through the capture. Compact frames are
        // recorded as they travel (WIRE.md: a dissector tells them by their first
        // byte).
        self.inner.capabilities().frames_only()
    }

    // Other nodes' board frames are read (not captured): a reader that stopped
    // would hold their boards full. This node writes none (no `board_nodes`).
    fn board(&mut self) -> Option<&mut dyn super::Board> {
        self.inner.board()
    }

    fn liveness(&mut self) -> Option<&mut dyn super::Liveness> {
        self.inner.liveness()
    }

    fn flush(&mut self, now: Instant) {
        self.inner.flush(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phy::{Loopback, Ring};

    #[test]
    fn writes_a_readable_pcap() {
        let mut rings = [Ring::<4, 32>::new(), Ring::new()];
        let mut out = std::vec::Vec::new();
        {
            let mut p = PcapWriter::new(Loopback::new(&mut rings, NodeAddr(0)), &mut out).unwrap();
            p.transmit(Instant::from_micros(1_500_001), NodeAddr(1))
                .unwrap()
                .consume(5, |b| b.copy_from_slice(b"hello"));
            assert!(p.error.is_none());
        }
        assert_eq!(out.len(), 24 + 16 + 5);
        assert_eq!(&out[0..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(&out[20..24], &147u32.to_le_bytes());
        assert_eq!(&out[24..28], &1u32.to_le_bytes()); // seconds
        assert_eq!(&out[28..32], &500_001u32.to_le_bytes()); // microseconds
        assert_eq!(&out[32..36], &5u32.to_le_bytes());
        assert_eq!(&out[40..], b"hello");
    }
}
