//! Receive and transmit tokens: a frame read in place from a slot, or written
//! straight into one (or into a send-pool slot named by an indirect descriptor).

use super::*;

/// The inline part, payload and split point (inline bytes before the payload) of a
/// ring slot at `slot` (from `src`) whose length word `w` says its payload is in
/// `src`'s send slot; `None` if anything in it is impossible.
pub(super) fn indirect<'r>(
    region: &'r Region,
    rings: &Rings,
    geo: &Geometry,
    src: u32,
    slot: usize,
    w: u32,
) -> Option<(&'r [u8], &'r [u8], usize)> {
    let inline = (w & !INDIRECT) as usize;
    if inline > INDIRECT_INLINE_MAX || 8 + inline > geo.mtu() {
        return None;
    }
    let at = slot + SLOT_HEADER;
    let d = region.bytes(at, 8).ok()?;
    let i = u16::from_le_bytes([d[0], d[1]]) as usize;
    let split = u16::from_le_bytes([d[2], d[3]]) as usize;
    let len = u32::from_le_bytes([d[4], d[5], d[6], d[7]]) as usize;
    if i >= POOL_SLOTS || len > POOL_SLOT || split > inline {
        return None;
    }
    let frame = region.bytes(at + 8, inline).ok()?;
    let body = region.bytes(rings.pool_slot(src, i), len).ok()?;
    Some((frame, body, split))
}

/// A frame in one of our rings, lent in place.
#[derive(Debug)]
pub struct MyriRx<'a> {
    /// The frame, or the inline part of one sent from a send slot.
    pub(super) frame: &'a [u8],
    /// The payload in the producer's send slot (empty for an inline frame).
    pub(super) body: &'a [u8],
    /// Bytes of `frame` that come before `body` in the frame.
    pub(super) split: usize,
    pub(super) head: &'a AtomicU64,
    /// Our copy of `head` (we alone write it).
    pub(super) cursor: &'a mut u64,
    pub(super) next: u64,
    /// The ring's producer: the node that sent the frame.
    pub(super) src: u16,
}

/// A free slot in a peer's ring, lent in place.
#[derive(Debug)]
pub struct MyriTx<'a> {
    pub(super) slot: &'a mut [u8],
    pub(super) seq: &'a AtomicU64,
    pub(super) len: &'a AtomicU32,
    pub(super) tail: &'a AtomicU64,
    pub(super) next: u64,
    /// The region and the ring's offset: its template and `head` words.
    pub(super) ring: (&'a Region, usize),
    /// The consumer's interrupt word, where the host has a hook to raise it
    /// ([`Region`]'s `interrupt`).
    pub(super) irq: Option<&'a AtomicU32>,
}

impl RxToken for MyriRx<'_> {
    /// Only `src` produces into its ring to us.
    fn source(&self) -> Option<NodeAddr> {
        Some(NodeAddr(self.src))
    }

    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        if self.body.is_empty() {
            return self.consume_parts(|frame, _| f(frame));
        }
        // A reader that wants the frame whole gets a joined copy.
        let mut joined = [0u8; INDIRECT_INLINE_MAX + POOL_SLOT];
        let (before, after) = self.frame.split_at(self.split);
        let (a, b) = (before.len(), self.body.len());
        let n = a + b + after.len();
        joined[..a].copy_from_slice(before);
        joined[a..a + b].copy_from_slice(self.body);
        joined[a + b..n].copy_from_slice(after);
        self.consume_parts(|_, _| f(&joined[..n]))
    }

    fn consume_parts<R, F: FnOnce(&[u8], &[u8]) -> R>(self, f: F) -> R {
        let r = f(self.frame, self.body);
        // Hand the slot back to the producer: our reads (of the send slot too)
        // happen-before its reuse.
        *self.cursor = self.next;
        self.head.store(self.next, Ordering::Release);
        r
    }
}

impl MyriTx<'_> {
    /// Publishes a descriptor of send slot `slot` (`len` payload bytes) with the
    /// inline part `head` then `tail` (see the module documentation).
    pub(super) fn consume_indirect(self, slot: usize, len: usize, head: &[u8], tail: &[u8]) {
        let inline = head.len() + tail.len();
        self.slot[0..2].copy_from_slice(&(slot as u16).to_le_bytes());
        self.slot[2..4].copy_from_slice(&(head.len() as u16).to_le_bytes());
        self.slot[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        self.slot[8..8 + head.len()].copy_from_slice(head);
        self.slot[8 + head.len()..8 + inline].copy_from_slice(tail);
        self.len.store(INDIRECT | inline as u32, Ordering::Relaxed);
        // Publish: descriptor, inline part and the send slot's bytes (written
        // before this call) happen-before the consumer's acquire of `seq`.
        self.seq.store(self.next, Ordering::Release);
        self.tail.store(self.next, Ordering::Relaxed);
        if let (Some(w), Some(raise)) = (self.irq, self.ring.0.interrupt) {
            raise_if_armed(w, raise);
        }
    }
}

impl TxToken for MyriTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let len = len.min(self.slot.len());
        if !compact_len(len) {
            let r = f(&mut self.slot[..len]);
            self.publish(None, len);
            return r;
        }
        // A short frame is filled on the stack: the slot's line it would save is
        // not touched unless the frame cannot travel compact.
        let mut buf = [0u8; COMPACT_MAX];
        let r = f(&mut buf[..len]);
        self.publish(Some(&buf), len);
        r
    }
}

impl MyriTx<'_> {
    /// The place of this frame in its ring's sequence, from 0 at the ring's start:
    /// it fills slot `index % Geometry::slots` (a producer may keep notes per slot).
    pub fn index(&self) -> u64 {
        self.next.wrapping_sub(1)
    }

    /// Publishes the frame of `len` bytes: in the slot, or short in `buf`.
    ///
    /// The slot's lines stay in this core's cache for the consumer to fetch. Pushing
    /// them to the shared cache after publishing (`CLDEMOTE`) was measured on a
    /// 16-core Xeon that has it: 1 MiB streaming fell from 11.5 to 5.7 GB/s and
    /// 8-byte latency did not improve (168 interleaved runs).
    #[inline(never)]
    pub(super) fn publish(self, buf: Option<&[u8; COMPACT_MAX]>, len: usize) {
        let word = match buf {
            None => len as u32,
            Some(buf) if compactable(self.ring, self.next, buf) => {
                // Fixed-size moves (the slot has room past the frame: its MTU is
                // at least 112 bytes).
                if len <= COMPACT_ONE {
                    gather(buf, &KEPT_ONE, &mut self.slot[..COMPACT_ONE - ELIDED]);
                } else {
                    gather(buf, &KEPT_TWO, &mut self.slot[..COMPACT_MAX - ELIDED]);
                }
                COMPACT | (len - ELIDED) as u32
            }
            Some(buf) => {
                self.slot[..len].copy_from_slice(&buf[..len]);
                len as u32
            }
        };
        self.len.store(word, Ordering::Relaxed);
        // Publish the slot: its bytes (and a rewritten template) happen-before the
        // consumer's acquire of `seq`.
        self.seq.store(self.next, Ordering::Release);
        self.tail.store(self.next, Ordering::Relaxed);
        if let (Some(w), Some(raise)) = (self.irq, self.ring.0.interrupt) {
            raise_if_armed(w, raise);
        }
    }
}
