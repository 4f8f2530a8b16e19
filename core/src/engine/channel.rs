//! Per-peer channel state: the sending window with its retransmission timer, and the
//! receiving window with cumulative and selective acknowledgement.
//!
//! Sequence numbers are per ordered pair of endpoints and wrap; at most
//! [`MAX_WINDOW`] frames are outstanding, so one `u64` bitmap covers the selective
//! acks and a fixed array of [`MAX_WINDOW`] entries holds what is in flight.

use crate::time::{Duration, Instant};
use crate::wire::AckInfo;
use crate::{GroupId, NodeAddr, NodeId, PortId};
use managed::ManagedSlice;

/// Largest number of unacknowledged frames per channel (the width of the SACK bitmap).
pub const MAX_WINDOW: usize = 64;
/// Control frames (barrier tokens, rejections) that may wait to be sent on one channel.
pub(crate) const CTRL_QUEUE: usize = 8;
pub(crate) const NONE: u16 = u16::MAX;

/// `a < b` in wrapping sequence space.
pub(crate) fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// What an in-flight slot holds, so it can be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Free,
    /// A whole message in one frame whose copy the channel keeps itself:
    /// `Channel::shorts[idx]` (see [`Short`]).
    Short {
        idx: u8,
    },
    /// A fragment of send operation `op`.
    Data {
        op: u16,
        offset: u32,
        len: u16,
    },
    /// A barrier token.
    Barrier {
        epoch: u32,
        round: u32,
    },
    /// "Your reliable message `msg` from port `port` was discarded": the destination
    /// port is not bound for input (or is not a port at all).
    Reject {
        msg: u32,
        port: u16,
    },
    /// Request `req`: add `delta` to counter `var` and answer with the old value.
    FetchAdd {
        req: u32,
        var: u16,
        delta: u32,
    },
    /// The answer to request `req`.
    FetchAddReply {
        req: u32,
        value: u32,
    },
    /// Get request `req`, described by get slot `get`.
    GetRequest {
        get: u16,
        req: u32,
    },
    /// "Your put message / get request `msg` named memory we do not expose".
    Deny {
        msg: u32,
        code: u32,
    },
    /// "Answer once you have my broadcasts before number `bseq`" (see `fence`).
    Fence {
        bseq: u32,
    },
    /// "I have your broadcasts before number `bseq`".
    FenceOk {
        bseq: u32,
    },
    /// "The rest of my message `msg` will not come" (see `orphan`).
    Abort {
        msg: u32,
    },
    /// "I am leaving the job" ([`crate::engine::Engine::say_goodbye`]).
    Bye,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Inflight {
    pub slot: Slot,
    pub sacked: bool,
    pub resend: bool,
    /// Already sent again because later frames were acked (once per timeout round).
    pub fast: bool,
}

impl Inflight {
    const EMPTY: Inflight = Inflight {
        slot: Slot::Free,
        sacked: false,
        resend: false,
        fast: false,
    };
}

/// The outcome of receiving a reliable frame's sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeqCheck {
    /// New and inside the window: process it, then call [`Channel::mark_received`].
    New,
    /// Seen before: drop, but acknowledge again so the sender learns.
    Duplicate,
    /// Beyond what we advertised: drop.
    OutOfWindow,
}

/// Longest reliable message a channel keeps its own copy of (see [`Short`]).
pub(crate) const SHORT_MAX: usize = 32;
/// Such copies a channel holds at once; beyond them, a message is an operation
/// with an eager buffer.
pub(crate) const SHORTS: usize = 8;

/// A short reliable message sent whole in one frame, kept by its channel until
/// acknowledged, to be sent again: no operation, no eager buffer, no handle (the
/// message is detached from its sender, whose port hears of a failure).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Short {
    pub(crate) used: bool,
    pub(crate) len: u8,
    pub(crate) src_port: PortId,
    pub(crate) dst_port: PortId,
    pub(crate) msg_id: u32,
    pub(crate) bytes: [u8; SHORT_MAX],
}

impl Short {
    pub(crate) const EMPTY: Short = Short {
        used: false,
        len: 0,
        src_port: 0,
        dst_port: 0,
        msg_id: 0,
        bytes: [0; SHORT_MAX],
    };

    /// The message's bytes.
    pub(crate) fn data(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// State shared with one peer endpoint.
#[derive(Debug, Clone)]
pub struct Channel {
    pub(crate) peer: NodeAddr,
    pub(crate) in_use: bool,
    pub(crate) peer_group: GroupId,
    pub(crate) peer_node: NodeId,
    /// Retries ran out: every send to this peer fails from now on.
    pub(crate) failed: bool,
    /// Failed, and a personality of packets (which have no port to tell) has not
    /// been told yet ([`crate::engine::Engine::take_packet_failure`]).
    pub(crate) unreported: bool,
    /// The peer said goodbye: it left the job on purpose.
    pub(crate) left: bool,
    /// Our goodbye is queued on this channel.
    pub(crate) bye_queued: bool,

    // Sending side.
    pub(crate) snd_una: u32,
    pub(crate) snd_nxt: u32,
    pub(crate) peer_window: u16,
    pub(crate) inflight: [Inflight; MAX_WINDOW],
    pub(crate) q_head: u16,
    pub(crate) q_tail: u16,
    pub(crate) ctrl: [Slot; CTRL_QUEUE],
    pub(crate) ctrl_len: usize,
    /// Copies of short messages in flight (`Slot::Short`).
    pub(crate) shorts: [Short; SHORTS],
    pub(crate) next_msg: u32,
    pub(crate) next_be_msg: u32,
    pub(crate) rto: Duration,
    pub(crate) rto_at: Option<Instant>,
    /// The timeout after progress: the configured one at first, then from the
    /// round-trip estimate ([`Channel::measure`]).
    pub(crate) rto_base: Duration,
    /// The frame being timed (sequence number, first sent), if any.
    pub(crate) rtt_probe: Option<(u32, Instant)>,
    /// Smoothed round trip and its variation, nanoseconds (0: no sample yet).
    pub(crate) srtt: u64,
    pub(crate) rttvar: u64,
    pub(crate) retries: u8,
    pub(crate) refused: bool,
    /// The peer refused our oldest frame and has taken nothing since: its program
    /// decides when that lands (a barrier does not wait for it).
    pub(crate) held: bool,
    /// Some slot is marked `resend`.
    pub(crate) resend_any: bool,
    /// An ack that came on a data frame, and when: taken at the start of the next
    /// poll (see `Engine::defer_ack`), not between the frame and its handler.
    pub(crate) ack_due: Option<(AckInfo, Instant)>,

    // Receiving side.
    pub(crate) rcv_nxt: u32,
    pub(crate) rcv_sack: u64,
    pub(crate) since_ack: u16,
    pub(crate) ack_now: bool,
    pub(crate) ack_at: Option<Instant>,
    pub(crate) refusing: bool,
    /// Frames were refused since the last RETRY: tell the peer when a port frees up.
    pub(crate) owed_retry: bool,
    pub(crate) retry_now: bool,
    pub(crate) next_reserve: u32,
    pub(crate) next_deliver: u32,
    pub(crate) be_expect: u32,
    pub(crate) be_asm: u16,
    /// Reliable message refused because its port is not bound for input, and since when.
    pub(crate) unbound_msg: Option<(u32, Instant)>,
    /// The same for the peer's board broadcasts (by broadcast number): kept apart,
    /// so that the two kinds waiting at once do not restart each other's grace.
    pub(crate) unbound_board: Option<(u32, Instant)>,
    /// Our broadcast fence this peer answered, and the one we asked it (see `fence`).
    pub(crate) fence_ok: Option<u32>,
    pub(crate) fence_asked: Option<u32>,
    /// The peer's fence we owe an answer, once its broadcasts before it are here.
    pub(crate) fence_wait: Option<u32>,
    /// When the peer last said something new (see `Engine::fresh`): a replayed
    /// frame is no sign of life.
    pub(crate) heard_at: Instant,
    /// The newest ack the peer's frames carried (cumulative, and the selective acks
    /// beside it): a frame whose ack covers more says something new.
    pub(crate) ack_heard: u32,
    pub(crate) sack_heard: u64,
    /// Counters of standalone acks: ours sent, and the peer's newest heard (carried
    /// in `msg_id`, so that an answer that acknowledges nothing new, a refusal,
    /// is still new).
    pub(crate) acks_sent: u32,
    pub(crate) acks_heard: u32,
    /// The newest beacon counter heard from the peer.
    pub(crate) beacon_heard: u32,
    /// Reliable frames that came again or out of order since the last pass: the
    /// peer is recovering from a loss, and gets an ack for every two (see
    /// `Engine::transmit_chan`).
    pub(crate) out_of_order: u8,
    /// Since when we have been waiting for the peer without hearing from it.
    pub(crate) silent_since: Option<Instant>,
    /// Whether the peer was ever heard from: until then it may still be starting
    /// ([`crate::engine::Config::first_contact`]).
    pub(crate) met: bool,
}

impl Channel {
    /// An unused channel slot.
    pub const EMPTY: Channel = Channel {
        peer: NodeAddr(0),
        in_use: false,
        peer_group: 0,
        peer_node: 0,
        failed: false,
        unreported: false,
        left: false,
        bye_queued: false,
        snd_una: 0,
        snd_nxt: 0,
        peer_window: 0,
        inflight: [Inflight::EMPTY; MAX_WINDOW],
        q_head: NONE,
        q_tail: NONE,
        ctrl: [Slot::Free; CTRL_QUEUE],
        ctrl_len: 0,
        shorts: [Short::EMPTY; SHORTS],
        next_msg: 0,
        next_be_msg: 0,
        rto: Duration::ZERO,
        rto_at: None,
        rto_base: Duration::ZERO,
        rtt_probe: None,
        srtt: 0,
        rttvar: 0,
        retries: 0,
        refused: false,
        held: false,
        resend_any: false,
        ack_due: None,
        rcv_nxt: 0,
        rcv_sack: 0,
        since_ack: 0,
        ack_now: false,
        ack_at: None,
        refusing: false,
        owed_retry: false,
        retry_now: false,
        next_reserve: 0,
        next_deliver: 0,
        be_expect: 0,
        be_asm: NONE,
        unbound_msg: None,
        unbound_board: None,
        fence_ok: None,
        fence_asked: None,
        fence_wait: None,
        heard_at: Instant::ZERO,
        ack_heard: 0,
        sack_heard: 0,
        acks_sent: 0,
        acks_heard: 0,
        beacon_heard: 0,
        out_of_order: 0,
        silent_since: None,
        met: false,
    };

    pub(crate) fn open(
        &mut self,
        peer: NodeAddr,
        group: GroupId,
        node: NodeId,
        window: u16,
        rto: Duration,
    ) {
        *self = Channel::EMPTY;
        self.peer = peer;
        self.in_use = true;
        self.peer_group = group;
        self.peer_node = node;
        self.peer_window = window;
        self.rto = rto;
        self.rto_base = rto;
    }

    /// Whether this live channel has something to send: a queued send, a control
    /// frame, an ack owed now or a resend.
    #[inline(always)]
    pub(crate) fn has_work(&self) -> bool {
        let work = self.q_head != NONE || self.ctrl_len != 0 || self.ack_now || self.resend_any;
        work && self.in_use && !self.failed
    }

    /// Whether `poll_transmit` has something to do on this live channel: work
    /// ([`Channel::has_work`]), or frames in flight with no timer yet.
    #[inline(always)]
    pub(crate) fn to_transmit(&self) -> bool {
        self.has_work()
            || (self.in_use && !self.failed && self.rto_at.is_none() && self.outstanding() > 0)
    }

    /// Frames sent and not yet acknowledged cumulatively.
    pub(crate) fn outstanding(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }

    /// Whether the peer's credits allow one more new frame.
    /// Whether the control queue has no room left.
    pub(crate) fn ctrl_full(&self) -> bool {
        self.ctrl_len >= CTRL_QUEUE
    }

    /// Queues control frame `slot`; false (nothing queued) if the queue is full.
    pub(crate) fn queue_ctrl(&mut self, slot: Slot) -> bool {
        if self.ctrl_full() {
            return false;
        }
        self.ctrl[self.ctrl_len] = slot;
        self.ctrl_len += 1;
        true
    }

    /// Whether one more frame would fill three quarters of the peer's window: the
    /// sender then asks for an ack at once.
    #[inline]
    pub(crate) fn filling(&self) -> bool {
        self.outstanding() + 1 >= (self.peer_window as u32 * 3 / 4).max(1)
    }

    pub(crate) fn can_send_new(&self) -> bool {
        let limit = (self.peer_window as u32).min(MAX_WINDOW as u32);
        self.outstanding() < limit
    }

    /// A new reliable frame may go out on this channel now, ahead of nothing: open,
    /// alive, nothing queued, no control frame or resend waiting, a credit free (the
    /// send-at-once paths).
    #[inline]
    pub(crate) fn free_to_send_now(&self) -> bool {
        self.in_use
            && !self.failed
            && self.q_head == NONE
            && self.ctrl_len == 0
            && !self.resend_any
            && self.can_send_new()
    }

    /// A free short copy's index, if any (see [`Short`]).
    #[inline]
    pub(crate) fn free_short(&self) -> Option<usize> {
        self.shorts.iter().position(|s| !s.used)
    }

    /// Keeps `head` then `body` in short copy `k` as message `msg_id` from
    /// `src_port` to `dst_port`, and pushes its frame (sent at `now`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn push_short(
        &mut self,
        k: usize,
        msg_id: u32,
        src_port: PortId,
        dst_port: PortId,
        head: &[u8],
        body: &[u8],
        now: Instant,
    ) {
        let s = &mut self.shorts[k];
        let n = head.len() + body.len();
        s.used = true;
        s.len = n as u8;
        s.src_port = src_port;
        s.dst_port = dst_port;
        s.msg_id = msg_id;
        if !head.is_empty() {
            s.bytes[..head.len()].copy_from_slice(head);
        }
        super::copy_short(&mut s.bytes[head.len()..n], body);
        self.push_timed(Slot::Short { idx: k as u8 }, now);
    }

    /// Starts the retransmission timer where none runs, bringing the engine's next
    /// timer (`timer_at`) forward to it.
    #[inline]
    pub(crate) fn arm_rto(&mut self, now: Instant, timer_at: &mut Instant) {
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rto);
            *timer_at = (*timer_at).min(now + self.rto);
        }
    }

    /// Takes the next sequence number for `slot`.
    pub(crate) fn push(&mut self, slot: Slot) -> u32 {
        let seq = self.snd_nxt;
        self.inflight[seq as usize % MAX_WINDOW] = Inflight::EMPTY;
        self.inflight[seq as usize % MAX_WINDOW].slot = slot;
        self.snd_nxt = seq.wrapping_add(1);
        seq
    }

    /// [`Channel::push`] of a frame sent for the first time at `now`: timed if no
    /// other frame is.
    pub(crate) fn push_timed(&mut self, slot: Slot, now: Instant) -> u32 {
        let seq = self.push(slot);
        if self.rtt_probe.is_none() {
            self.rtt_probe = Some((seq, now));
        }
        seq
    }

    /// Takes a round-trip sample once the timed frame is acknowledged and sets the
    /// timeout after progress to `srtt + 4 * rttvar` within `[floor, ceiling]`
    /// (RFC 6298; Karn's rule: a frame sent again is not timed, see
    /// [`Channel::untime`]). A slow path (a loaded host, an emulated NIC) so stops
    /// resending frames whose acks are merely late.
    pub(crate) fn measure(&mut self, now: Instant, floor: Duration, ceiling: Duration) {
        let Some((seq, sent)) = self.rtt_probe else {
            return;
        };
        if !seq_lt(seq, self.snd_una) {
            return;
        }
        self.rtt_probe = None;
        let r = now.saturating_since(sent).total_nanos();
        if self.srtt == 0 {
            self.srtt = r.max(1);
            self.rttvar = r / 2;
        } else {
            self.rttvar = (3 * self.rttvar + self.srtt.abs_diff(r)) / 4;
            self.srtt = ((7 * self.srtt + r) / 8).max(1);
        }
        let rto = self.srtt.saturating_add(self.rttvar.saturating_mul(4));
        self.rto_base = Duration::from_nanos(rto.clamp(floor.total_nanos(), ceiling.total_nanos()));
    }

    /// Frames go again: the one being timed no longer gives a clean sample.
    pub(crate) fn untime(&mut self) {
        self.rtt_probe = None;
    }

    pub(crate) fn slot(&self, seq: u32) -> &Inflight {
        &self.inflight[seq as usize % MAX_WINDOW]
    }

    pub(crate) fn slot_mut(&mut self, seq: u32) -> &mut Inflight {
        &mut self.inflight[seq as usize % MAX_WINDOW]
    }

    /// Applies an incoming ack; calls `acked` once for every slot newly acknowledged.
    /// Returns true if anything was newly acknowledged.
    #[inline]
    pub(crate) fn on_ack(&mut self, a: AckInfo, mut acked: impl FnMut(Slot)) -> bool {
        let mut progress = false;
        // A cumulative ack can only cover what was sent.
        if seq_lt(self.snd_nxt, a.ack) {
            return false;
        }
        if a.ack == self.snd_una && a.sack == 0 {
            // Nothing new (the common case on a one-way stream): only credits.
            self.peer_window = a.window;
            return false;
        }
        while seq_lt(self.snd_una, a.ack) {
            let e = &mut self.inflight[self.snd_una as usize % MAX_WINDOW];
            // A frame selectively acked was released then (its copy may be
            // another message's by now).
            match e.slot {
                _ if e.sacked => {}
                Slot::Short { idx } => self.shorts[idx as usize].used = false,
                slot => acked(slot),
            }
            *e = Inflight::EMPTY;
            self.snd_una = self.snd_una.wrapping_add(1);
            progress = true;
        }
        let mut bits = a.sack;
        while bits != 0 {
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            let seq = a.ack.wrapping_add(1 + i);
            if !seq_lt(seq, self.snd_nxt) {
                break;
            }
            // A stale (reordered) ack may cover frames already released, whose slots
            // now hold later sequence numbers.
            if seq_lt(seq, self.snd_una) {
                continue;
            }
            let e = &mut self.inflight[seq as usize % MAX_WINDOW];
            if !e.sacked && e.slot != Slot::Free {
                e.sacked = true;
                e.resend = false;
                if let Slot::Short { idx } = e.slot {
                    self.shorts[idx as usize].used = false;
                } else {
                    acked(e.slot);
                }
                progress = true;
            }
        }
        self.peer_window = a.window;
        progress
    }

    /// Fast retransmission (lossy links): a frame missing while at least three later
    /// ones were acknowledged is taken as lost and marked to go again, once per
    /// timeout round, without waiting for the timer.
    pub(crate) fn mark_holes_for_resend(&mut self, a: AckInfo) -> u32 {
        if a.sack == 0 {
            return 0;
        }
        let highest = 63 - a.sack.leading_zeros();
        let top = a.ack.wrapping_add(1 + highest);
        let mut n = 0;
        let mut s = self.snd_una;
        while seq_lt(s.wrapping_add(2), top) && seq_lt(s, self.snd_nxt) {
            let e = &mut self.inflight[s as usize % MAX_WINDOW];
            if !e.sacked && !e.fast && e.slot != Slot::Free {
                e.resend = true;
                e.fast = true;
                n += 1;
            }
            s = s.wrapping_add(1);
        }
        if n > 0 {
            self.resend_any = true;
            self.untime();
        }
        n
    }

    /// Marks every unacknowledged frame for sending again.
    pub(crate) fn mark_all_for_resend(&mut self) -> u32 {
        let mut n = 0;
        let mut s = self.snd_una;
        while seq_lt(s, self.snd_nxt) {
            let e = &mut self.inflight[s as usize % MAX_WINDOW];
            if !e.sacked && e.slot != Slot::Free {
                e.resend = true;
                e.fast = false;
                n += 1;
            }
            s = s.wrapping_add(1);
        }
        self.resend_any |= n > 0;
        if n > 0 {
            self.untime();
        }
        n
    }

    /// Classifies an incoming reliable sequence number.
    pub(crate) fn check_seq(&self, seq: u32) -> SeqCheck {
        let off = seq.wrapping_sub(self.rcv_nxt);
        if off as i32 <= -1 {
            return SeqCheck::Duplicate;
        }
        if off as usize > MAX_WINDOW {
            return SeqCheck::OutOfWindow;
        }
        if off > 0 && self.rcv_sack & (1u64 << (off - 1)) != 0 {
            return SeqCheck::Duplicate;
        }
        SeqCheck::New
    }

    /// Whether ack `a`, on a frame from the peer, covers more than any before it
    /// (and could be true: nothing beyond what was sent); remembers it if so.
    #[inline(always)]
    pub(crate) fn new_ack(&mut self, a: AckInfo) -> bool {
        if seq_lt(self.ack_heard, a.ack) {
            if seq_lt(self.snd_nxt, a.ack) {
                return false;
            }
            self.ack_heard = a.ack;
            self.sack_heard = a.sack;
            return true;
        }
        if a.ack == self.ack_heard && a.sack & !self.sack_heard != 0 {
            self.sack_heard |= a.sack;
            return true;
        }
        false
    }

    /// Ack `a` if it moves nothing (all it acknowledges was acknowledged, none is
    /// kept): its credits taken. `false`, nothing changed: it is new.
    #[inline(always)]
    pub(crate) fn credits_only(&mut self, a: AckInfo) -> bool {
        if a.ack == self.snd_una && a.sack == 0 && self.ack_due.is_none() {
            self.peer_window = a.window;
            return true;
        }
        false
    }

    /// Keeps ack `a`, which came at `now`, for the next poll in place of one kept
    /// (see `Engine::defer_ack`); its credits count at once. Whether none was kept
    /// before; `None`, nothing changed, where `a` is older than the one kept.
    #[inline(always)]
    pub(crate) fn keep_ack(&mut self, now: Instant, a: AckInfo) -> Option<bool> {
        if self.ack_due.is_some_and(|(d, _)| seq_lt(a.ack, d.ack)) {
            return None;
        }
        let fresh = self.ack_due.is_none();
        self.ack_due = Some((a, now));
        self.peer_window = a.window;
        Some(fresh)
    }

    /// Whether message `msg_id` (frame `seq` where `reliable`) is the next of its
    /// service on this channel with nothing before it outstanding: reliable, every
    /// earlier one delivered and none received out of order; best effort, none
    /// being stored.
    #[inline(always)]
    pub(crate) fn next_in_order(&self, reliable: bool, seq: u32, msg_id: u32) -> bool {
        if reliable {
            seq == self.rcv_nxt
                && self.rcv_sack == 0
                && msg_id == self.next_reserve
                && self.next_deliver == self.next_reserve
        } else {
            self.be_asm == NONE && msg_id == self.be_expect
        }
    }

    /// Message `msg_id`, [`Channel::next_in_order`], delivered whole: the next of
    /// its service is expected.
    #[inline(always)]
    pub(crate) fn delivered_next(&mut self, reliable: bool, msg_id: u32) {
        let next = msg_id.wrapping_add(1);
        if reliable {
            self.next_reserve = next;
            self.next_deliver = next;
            self.unbound_msg = None;
        } else {
            self.be_expect = next;
        }
    }

    /// The peer was heard from at `now` (a new frame or ack of its).
    #[inline(always)]
    pub(crate) fn heard(&mut self, now: Instant) {
        self.heard_at = now;
        self.silent_since = None;
        self.met = true;
    }

    /// Records `seq` (checked `New`) as received.
    pub(crate) fn mark_received(&mut self, seq: u32) {
        let off = seq.wrapping_sub(self.rcv_nxt);
        if off == 0 {
            self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
            loop {
                let b = self.rcv_sack & 1;
                self.rcv_sack >>= 1;
                if b == 0 {
                    break;
                }
                self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
            }
        } else {
            self.rcv_sack |= 1u64 << (off - 1);
        }
    }

    /// The ack this side would send now.
    pub(crate) fn ack_info(&self, window: u16) -> AckInfo {
        AckInfo {
            ack: self.rcv_nxt,
            sack: self.rcv_sack,
            window,
        }
    }
}

/// The channels, one per peer endpoint, and what the engine keeps across them:
/// which peer has which, how far the table is in use, the earliest timer, and
/// counts that spare a scan of the table when nothing waits.
#[derive(Debug)]
pub(crate) struct Channels<'a> {
    pub(crate) table: ManagedSlice<'a, Channel>,
    /// Device address to channel index, `NONE` where none is open.
    pub(crate) peer_map: ManagedSlice<'a, u16>,
    /// Channels in use all sit below this index (they are allocated lowest first).
    pub(crate) hwm: usize,
    /// Channels with [`Channel::unreported`] set.
    pub(crate) unreported: usize,
    /// Channels owed a RETRY when a port frees up.
    pub(crate) owed_retries: usize,
    /// Whether a channel may have something to send (a queued send, a control
    /// frame, an ack owed now, a resend): false only once a look at every channel
    /// (`sends_waiting`, `poll_transmit`) found none, until something gives one
    /// work; every place that does sets it (debug builds check). Spares those
    /// looks, one per delivered message and one per poll, their cost per open
    /// channel.
    pub(crate) work: core::cell::Cell<bool>,
    /// No channel's retransmission or delayed-ack timer is due before this (an
    /// early bound, made exact by each look at the timers): until then a poll
    /// leaves the channels' timers alone.
    pub(crate) timer_at: Instant,
    /// Channels holding an ack to take at the next poll (`Channel::ack_due`).
    pub(crate) acks_due: u16,
    /// Where the transmit pass starts its round over the channels.
    pub(crate) rr: usize,
    /// A retransmission timer fired since the last liveness check.
    pub(crate) timer_fired: bool,
}

impl<'a> Channels<'a> {
    /// Sends every ack held back (delayed to ride on data) at the next transmit.
    pub(crate) fn flush_acks(&mut self) {
        for ch in self.table[..self.hwm]
            .iter_mut()
            .filter(|c| c.in_use && !c.failed)
        {
            if ch.ack_at.take().is_some() || ch.since_ack > 0 {
                ch.ack_now = true;
                self.work.set(true);
            }
        }
    }

    /// The earliest retransmission or delayed-ack timer of the channels in use.
    pub(crate) fn next_timer(&self) -> Instant {
        self.table[..self.hwm]
            .iter()
            .filter(|c| c.in_use)
            .flat_map(|c| [c.rto_at, c.ack_at])
            .flatten()
            .min()
            .unwrap_or(Instant::MAX)
    }

    pub(crate) fn new(table: ManagedSlice<'a, Channel>, peer_map: ManagedSlice<'a, u16>) -> Self {
        Channels {
            table,
            peer_map,
            hwm: 0,
            unreported: 0,
            owed_retries: 0,
            work: core::cell::Cell::new(true),
            timer_at: Instant::ZERO,
            acks_due: 0,
            rr: 0,
            timer_fired: false,
        }
    }
}

/// The part reads as its table where only the table is wanted (`part[i]`, `iter`).
impl core::ops::Deref for Channels<'_> {
    type Target = [Channel];
    fn deref(&self) -> &[Channel] {
        &self.table
    }
}

impl core::ops::DerefMut for Channels<'_> {
    fn deref_mut(&mut self) -> &mut [Channel] {
        &mut self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chan() -> Channel {
        let mut c = Channel::EMPTY;
        c.open(NodeAddr(1), 0, 1, 32, Duration::from_micros(100));
        c
    }

    #[test]
    fn receive_window_tracks_holes() {
        let mut c = chan();
        c.rcv_nxt = u32::MAX - 1; // exercise wrap-around
        let base = c.rcv_nxt;
        let s = |i: u32| base.wrapping_add(i);
        assert_eq!(c.check_seq(s(2)), SeqCheck::New);
        c.mark_received(s(2));
        c.mark_received(s(3));
        assert_eq!(c.check_seq(s(2)), SeqCheck::Duplicate);
        assert_eq!(c.rcv_nxt, s(0));
        assert_eq!(c.rcv_sack, 0b110);
        c.mark_received(s(0));
        assert_eq!((c.rcv_nxt, c.rcv_sack), (s(1), 0b11));
        c.mark_received(s(1));
        assert_eq!((c.rcv_nxt, c.rcv_sack), (s(4), 0));
        assert_eq!(c.check_seq(s(3)), SeqCheck::Duplicate);
        assert_eq!(c.check_seq(s(4 + 64)), SeqCheck::New);
        assert_eq!(c.check_seq(s(4 + 65)), SeqCheck::OutOfWindow);
    }

    #[test]
    fn acks_release_slots_once() {
        let mut c = chan();
        for i in 0..5 {
            c.push(Slot::Barrier { epoch: 0, round: i });
        }
        let mut seen = std::vec::Vec::new();
        // Frames 0 and 4 arrived (sack bit i stands for ack + 1 + i).
        assert!(c.on_ack(
            AckInfo {
                ack: 1,
                sack: 0b100,
                window: 32
            },
            |s| seen.push(s)
        ));
        assert_eq!(seen.len(), 2);
        assert_eq!(c.mark_all_for_resend(), 3); // 1, 2 and 3
        seen.clear();
        // Duplicate ack adds nothing.
        assert!(!c.on_ack(
            AckInfo {
                ack: 1,
                sack: 0b100,
                window: 32
            },
            |s| seen.push(s)
        ));
        assert!(seen.is_empty());
        // Frames 3, 4, 5 were acked past the holes at 1 and 2: both go again at once.
        let mut f = chan();
        for i in 0..6 {
            f.push(Slot::Barrier { epoch: 0, round: i });
        }
        let a = AckInfo {
            ack: 1,
            sack: 0b1110,
            window: 32,
        };
        f.on_ack(a, |_| ());
        assert_eq!(f.mark_holes_for_resend(a), 2);
        assert!(f.slot_mut(1).resend && f.slot_mut(2).resend && !f.slot_mut(5).resend);
        // With only two acked beyond it, a hole may still be reordering: wait.
        let mut g = chan();
        for i in 0..4 {
            g.push(Slot::Barrier { epoch: 0, round: i });
        }
        let b = AckInfo {
            ack: 1,
            sack: 0b11,
            window: 32,
        };
        g.on_ack(b, |_| ());
        assert_eq!(g.mark_holes_for_resend(b), 0);
        assert_eq!(f.mark_holes_for_resend(a), 0, "once per timeout round");
        assert!(c.on_ack(
            AckInfo {
                ack: 5,
                sack: 0,
                window: 32
            },
            |s| seen.push(s)
        ));
        assert_eq!(seen.len(), 3, "4 was already counted");
        assert_eq!(c.outstanding(), 0);
        // A stale ack arriving late must not mark the slots' new occupants.
        let mut d = chan();
        for i in 0..70 {
            d.push(Slot::Barrier { epoch: 0, round: i });
            if i >= 63 {
                d.on_ack(
                    AckInfo {
                        ack: i - 62,
                        sack: 0,
                        window: 64,
                    },
                    |_| (),
                );
            }
        }
        assert_eq!((d.snd_una, d.snd_nxt), (7, 70));
        // Old ack: base 2, bit i for 3 + i; seqs 3..7 are gone, 67..69 sit in their slots.
        assert!(!d.on_ack(
            AckInfo {
                ack: 2,
                sack: 0b1111,
                window: 64
            },
            |_| panic!("stale")
        ));
        assert!(!d.slot_mut(67).sacked);
        // An ack beyond what was sent is ignored.
        assert!(!c.on_ack(
            AckInfo {
                ack: 9,
                sack: 0,
                window: 32
            },
            |_| panic!()
        ));
    }

    #[test]
    fn credits_limit_new_frames() {
        let mut c = chan();
        c.peer_window = 2;
        assert!(c.can_send_new());
        c.push(Slot::Free);
        c.push(Slot::Free);
        assert!(!c.can_send_new());
        c.peer_window = 1000;
        for _ in 2..MAX_WINDOW {
            c.push(Slot::Free);
        }
        assert!(!c.can_send_new(), "never more than the SACK bitmap covers");
    }

    /// The timeout after progress follows the measured round trip (RFC 6298) within
    /// its bounds, and a frame sent again gives no sample (Karn).
    #[test]
    fn the_timeout_follows_the_round_trip_and_resent_frames_are_not_timed() {
        let (floor, ceiling) = (Duration::from_micros(500), Duration::from_millis(200));
        let ack = |c: &mut Channel, n: u32| {
            c.on_ack(
                AckInfo {
                    ack: n,
                    sack: 0,
                    window: 64,
                },
                |_| (),
            );
        };
        let mut c = chan();
        c.rto_base = floor;
        let t0 = Instant::ZERO;
        let ms = Duration::from_millis;
        // 2 ms round trips: 2 + 4 * 1 = 6 ms at first, then the variation decays.
        c.push_timed(Slot::Free, t0);
        c.push_timed(Slot::Free, t0 + ms(1));
        assert_eq!(c.rtt_probe, Some((0, t0)), "one frame timed at a time");
        ack(&mut c, 1);
        c.measure(t0 + ms(2), floor, ceiling);
        assert_eq!(c.rto_base, ms(6));
        assert_eq!(c.rtt_probe, None);
        let mut t = t0 + ms(2);
        for k in 2..40 {
            c.push_timed(Slot::Free, t);
            t += ms(2);
            ack(&mut c, k + 1);
            c.measure(t, floor, ceiling);
        }
        let settled = c.rto_base;
        assert!(settled >= ms(2) && settled < ms(3), "{settled}");
        // A fast path stays at the floor; a very slow one at the ceiling.
        let mut f = chan();
        f.push_timed(Slot::Free, t0);
        ack(&mut f, 1);
        f.measure(t0 + Duration::from_micros(10), floor, ceiling);
        assert_eq!(f.rto_base, floor);
        let mut s = chan();
        s.push_timed(Slot::Free, t0);
        ack(&mut s, 1);
        s.measure(t0 + Duration::from_secs(1), floor, ceiling);
        assert_eq!(s.rto_base, ceiling);
        // Karn: the timed frame went again, so its ack measures nothing.
        c.push_timed(Slot::Barrier { epoch: 0, round: 0 }, t);
        assert_eq!(c.mark_all_for_resend(), 1);
        let all = c.snd_nxt;
        ack(&mut c, all);
        c.measure(t + ms(50), floor, ceiling);
        assert_eq!(c.rto_base, settled);
    }
}
