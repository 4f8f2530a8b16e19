//! Relay streams: pipelined forwarding of long tree broadcasts.
//!
//! A member with children in a broadcast tree forwards a message of at most
//! [`EAGER_MAX`] bytes whole, from one eager copy (see `mcast.rs`). A longer one
//! goes into a ring of eager buffers, one [`CHUNK`] of the message per buffer, and
//! each chunk is sent on as soon as it is whole, while the next ones arrive. No
//! frame of such a broadcast crosses a chunk boundary (WIRE.md), so every frame
//! lies in one buffer.
//!
//! A root sends a broadcast down the tree only if every relay's ring holds all of
//! it ([`relay_unit`]) and, past 256 KiB, the tree spares the root enough copies
//! ([`long_tree_pays`]): a relay then takes the whole message whatever its
//! children do, as with short ones. A ring shorter than its message would tie the
//! relay's intake to its slowest child, whose port may be busy with another
//! root's broadcast that waits, the same way, on this relay's children: crossing
//! broadcasts could then hold each other up for ever (the simulator found such a
//! cycle at 13 nodes). Such a ring still works where members' pools differ: a
//! chunk's buffer takes the next chunk once every child has acknowledged it, and
//! frames beyond the ring are refused until a buffer frees (a RETRY).

use super::mcast::{Tree, MAX_CHILDREN};
use super::*;

/// Relay streams one engine runs at once.
pub(crate) const MAX_STREAMS: usize = 8;
/// The most eager buffers one stream's ring takes: a 1 MiB broadcast's chunks, so
/// that a pool large enough for it (as hosted engines have) sends one down the
/// tree instead of from the root to every member.
pub(crate) const RING_MAX: usize = 64;
/// Bytes of a long tree broadcast per ring buffer: frames never cross a multiple.
pub(crate) const CHUNK: usize = EAGER_MAX;

/// One long broadcast being forwarded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stream {
    used: bool,
    /// Eager buffers; chunk `k` lives in `ring[k % len]`.
    ring: [u16; RING_MAX],
    len: u8,
    /// Bytes received of the chunk each buffer holds.
    got: [u32; RING_MAX],
    total: u32,
    /// Chunks `low..` are held; chunks below `ready` are whole.
    low: u32,
    ready: u32,
    /// The forwards are on their channels.
    pub(super) queued: bool,
    /// The forwards (operation, generation), whose acks free chunks.
    kids: [(u16, u16); MAX_CHILDREN],
    nkids: u8,
    /// The upstream died: the forwards send nothing more, and each tells its
    /// child once its frames are acknowledged (see `orphan`).
    pub(super) cut: bool,
}

impl Stream {
    pub(crate) const EMPTY: Stream = Stream {
        used: false,
        ring: [NONE; RING_MAX],
        len: 0,
        got: [0; RING_MAX],
        total: 0,
        low: 0,
        ready: 0,
        queued: false,
        kids: [(NONE, 0); MAX_CHILDREN],
        nkids: 0,
        cut: false,
    };

    fn chunk_len(&self, k: u32) -> u32 {
        let start = k as u64 * CHUNK as u64;
        (self.total as u64).saturating_sub(start).min(CHUNK as u64) as u32
    }

    /// Whether the message's first chunk is still held (none given back yet).
    pub(super) fn holds_start(&self) -> bool {
        self.low == 0
    }

    /// The forwards (operation, generation).
    pub(super) fn kids(&self) -> &[(u16, u16)] {
        &self.kids[..self.nkids as usize]
    }

    /// Bytes from the message's start that are here whole.
    pub(super) fn ready_bytes(&self) -> u32 {
        (self.ready as u64 * CHUNK as u64).min(self.total as u64) as u32
    }
}

/// The eager buffers a relay may take for one broadcast in a tree of `levels`
/// (the root's height) from a pool of `pool`: what leaves as many for every level
/// of relays below it (see `reserve_tree`), at most a quarter of the pool (at
/// least 16, at most [`RING_MAX`]: a small pool keeps its buffers for many short
/// broadcasts, a hosted one of 256 rings 1 MiB). An eighth of the pool stays out
/// of the relays' share, for the copies of the member's own short broadcasts,
/// which sit above every level of relays (see `start`).
pub(super) fn relay_unit(pool: usize, levels: usize) -> usize {
    let cap = (pool / 4).clamp(16, RING_MAX);
    ((pool - pool / 8) / levels.saturating_sub(1).max(1)).clamp(1, cap)
}

/// Chunks (256 KiB) up to which a broadcast that the relays' rings hold goes down
/// the tree at any rank count.
pub(crate) const TREE_ANY_CHUNKS: usize = 16;

/// Whether a longer one goes down tree `t` of `n` members: only where the root
/// sends at most a third of the copies it would send alone (binomial: from 13
/// members). Relaying costs each relay a ring and an ack per chunk; measured on 16
/// cores with 1 MiB, the tree was 1.3x slower than the root alone at 4 ranks, level
/// at 8, and 1.5x (`udp`) to 2.1x (`shm`) faster at 16.
pub(crate) fn long_tree_pays(t: Tree, n: usize) -> bool {
    let mut kids = [0; MAX_CHILDREN];
    let k = t.children(0, n, &mut kids);
    k > 0 && n.saturating_sub(1) >= 3 * k
}

/// Gives stream `si`'s buffers back.
pub(super) fn free(bufs: &mut Bufs<'_>, si: u16) {
    let Some(st) = bufs.streams.get_mut(si as usize) else {
        return;
    };
    let st = core::mem::replace(st, Stream::EMPTY);
    for &b in &st.ring[..st.len as usize] {
        bufs.give_eager(b);
    }
    if st.queued {
        bufs.queued_streams -= 1;
    }
}

/// Bytes `off..off + len` of stream `si`'s message, if they lie in one held chunk.
pub(super) fn piece<'b>(bufs: &'b Bufs<'_>, si: u16, off: u32, len: usize) -> Option<&'b [u8]> {
    let st = bufs.streams.get(si as usize).filter(|s| s.used)?;
    let k = off / CHUNK as u32;
    if k < st.low || k >= st.ready || st.len == 0 {
        return None;
    }
    let b = st.ring[(k % st.len as u32) as usize];
    let at = off as usize % CHUNK;
    bufs.eager.get(b as usize)?.data.get(at..at + len)
}

/// How a frame of a relayed long broadcast fits its stream's ring.
pub(super) enum Fit {
    /// Copy it to this buffer at this offset.
    Copy(u16, usize),
    /// Beyond the ring: refuse it for now.
    Full,
    /// Not for the ring (crosses a chunk, or a chunk already passed on).
    Skip,
}

impl<'a> Engine<'a> {
    /// Whether a member `h` levels above the leaves may open a stream of `len`
    /// buffers (their count checked by `reserve_tree`): stream slots go by level
    /// like buffers, one left for each level below.
    pub(super) fn stream_room(&self, h: usize, len: usize) -> Option<u8> {
        let slots = self.bufs.streams.iter().filter(|s| !s.used).count();
        (slots >= h.clamp(1, MAX_STREAMS) && len > 0).then_some(len.min(RING_MAX) as u8)
    }

    /// Takes a stream with a ring of `len` buffers (room checked by `stream_room`).
    pub(super) fn open_stream(&mut self, total: u32, len: u8) -> u16 {
        let Some(si) = self.bufs.streams.iter().position(|s| !s.used) else {
            return NONE;
        };
        let mut st = Stream::EMPTY;
        st.used = true;
        st.total = total;
        for slot in st.ring.iter_mut().take(len as usize) {
            let Some(b) = self.bufs.free_eager() else {
                break;
            };
            self.bufs.take_eager(b as u16);
            *slot = b as u16;
            st.len += 1;
        }
        self.bufs.streams[si] = st;
        si as u16
    }

    /// Records forward `oi` of stream `si`, whose acks free its chunks.
    pub(super) fn stream_kid(&mut self, si: u16, oi: usize) {
        let gen = self.ops.table[oi].gen;
        if let Some(st) = self.bufs.streams.get_mut(si as usize) {
            if (st.nkids as usize) < MAX_CHILDREN {
                st.kids[st.nkids as usize] = (oi as u16, gen);
                st.nkids += 1;
            }
        }
    }

    /// Where frame `off..off + len` of stream `si`'s message goes.
    pub(super) fn stream_fit(&self, si: u16, off: u32, len: usize) -> Fit {
        let Some(st) = self.bufs.streams.get(si as usize).filter(|s| s.used) else {
            return Fit::Skip;
        };
        let k = off / CHUNK as u32;
        let at = off as usize % CHUNK;
        if at + len > CHUNK || k < st.low || st.len == 0 {
            return Fit::Skip;
        }
        if k >= st.low + st.len as u32 {
            return Fit::Full;
        }
        Fit::Copy(st.ring[(k % st.len as u32) as usize], at)
    }

    /// Copies a frame that [`Engine::stream_fit`] placed, and counts it.
    pub(super) fn stream_copy(&mut self, si: u16, buf: u16, at: usize, off: u32, data: &[u8]) {
        self.bufs.eager_write(buf, at, data);
        let Some(st) = self.bufs.streams.get_mut(si as usize).filter(|s| s.len > 0) else {
            return;
        };
        let k = off / CHUNK as u32;
        let n = st.len as u32;
        st.got[(k % n) as usize] += data.len() as u32;
        while st.ready < st.low + n && st.got[(st.ready % n) as usize] >= st.chunk_len(st.ready) {
            st.ready += 1;
            if st.ready as u64 * CHUNK as u64 >= st.total as u64 {
                break;
            }
        }
    }

    /// Gives back the chunks every forward of a stream has had acknowledged, and
    /// tells the refused upstream to send again.
    pub(super) fn release_streams(&mut self) {
        let mut freed = false;
        for si in 0..MAX_STREAMS {
            let st = self.bufs.streams[si];
            if !st.used || !st.queued {
                continue;
            }
            let mut acked = u32::MAX;
            for &(oi, gen) in &st.kids[..st.nkids as usize] {
                let live = self
                    .ops
                    .get(oi as usize)
                    .is_some_and(|o| o.gen == gen && o.state == OpState::Active);
                if live {
                    acked = acked.min(self.acked_prefix(oi as usize));
                }
            }
            let st = &mut self.bufs.streams[si];
            let n = st.len as u32;
            if n == 0 {
                continue;
            }
            while st.low < st.ready && (st.low as u64 + 1) * CHUNK as u64 <= acked as u64 {
                st.got[(st.low % n) as usize] = 0;
                st.low += 1;
                freed = true;
            }
        }
        if freed {
            self.wake_refused();
        }
    }

    /// The bytes of operation `oi`'s message below which every frame it sent has
    /// been acknowledged.
    fn acked_prefix(&self, oi: usize) -> u32 {
        let o = &self.ops.table[oi];
        let Some(ch) = self.chans.table.get(o.chan as usize) else {
            return 0;
        };
        let mut s = ch.snd_una;
        while seq_lt(s, ch.snd_nxt) {
            let e = ch.slot(s);
            if let (false, Slot::Data { op, offset, .. }) = (e.sacked, e.slot) {
                if op as usize == oi {
                    return offset;
                }
            }
            s = s.wrapping_add(1);
        }
        o.framed
    }
}
