//! The QNIX head in front of every message and control packet, and the
//! pseudo-addresses of rendezvous bells.

use super::*;

/// Bytes in front of a message's first packet and of every control packet:
/// kind (u8), the sender's count of board broadcasts so far (big-endian u16, see
/// [`Qnix::goes_once`]), a reserved byte, then three big-endian 32-bit fields.
pub(super) const HEAD: usize = 16;
pub(super) const K_MSG: u8 = 1;
pub(super) const K_REG: u8 = 2;
pub(super) const K_JOIN: u8 = 3;
pub(super) const K_BAR: u8 = 4;
/// Rendezvous: request to send (tag, send context, length).
pub(super) const K_RTS: u8 = 5;
/// Rendezvous: clear to send (send context, receive context, granted length), then
/// the granted address (u64; 0: send it as packets with `K_MSG_TO`).
pub(super) const K_CTS: u8 = 6;
/// Rendezvous: the put failed (receive context); the receive fails.
pub(super) const K_FIN: u8 = 7;
/// A message for receive context `b` of the receiver, matched there already.
pub(super) const K_MSG_TO: u8 = 8;
/// The next part of a tree broadcast longer than its first packet, from byte `c`
/// of the message (see [`Qnix::goes_once`]).
pub(super) const K_MORE: u8 = 9;

/// Bells the engine rings for rendezvous puts are these pseudo-addresses, never
/// memory (non-canonical on x86_64, unmapped elsewhere): the [`Gate`] takes them.
pub(super) const TOKEN_BASE: u64 = 0xFFFF_F000_0000_0000;

pub(super) fn token(side: usize, ctx: usize) -> u64 {
    TOKEN_BASE + ((side * CONTEXTS + ctx) as u64) * 4
}

pub(super) fn untoken(t: u64) -> Option<(usize, usize)> {
    let i = t.checked_sub(TOKEN_BASE)?;
    if i % 4 != 0 || i / 4 >= (2 * CONTEXTS) as u64 {
        return None;
    }
    let i = (i / 4) as usize;
    Some((i / CONTEXTS, i % CONTEXTS))
}

pub(super) fn head(kind: u8, a: i32, b: i32, c: u32) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[0] = kind;
    h[4..8].copy_from_slice(&a.to_be_bytes());
    h[8..12].copy_from_slice(&b.to_be_bytes());
    h[12..16].copy_from_slice(&c.to_be_bytes());
    h
}

pub(super) fn parse_head(p: &[u8]) -> Option<(u8, i32, i32, u32)> {
    let h = p.get(..HEAD)?;
    let f = |i: usize| [h[i], h[i + 1], h[i + 2], h[i + 3]];
    Some((
        h[0],
        i32::from_be_bytes(f(4)),
        i32::from_be_bytes(f(8)),
        u32::from_be_bytes(f(12)),
    ))
}

/// Bytes in front of a board broadcast's message on a fabric of `n` processes:
/// the head, then per process the packets sent to it before (u32), then a bitmap
/// of the processes it is for.
pub(super) fn board_prefix(n: usize) -> usize {
    HEAD + 4 * n + n.div_ceil(8)
}

/// The sender's board-broadcast count in the head of packet `d`.
pub(super) fn bc_of(engine: &Engine<'_>, d: Delivery) -> u16 {
    engine
        .packet(d.packet)
        .and_then(|p| p.get(1..3))
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}
