//! The protocol engine: one instance per process (endpoint), sans-IO.
//!
//! # Calling contract
//!
//! The engine owns no device and reads no clock. The caller:
//! 1. calls [`Engine::poll`]`(now, &mut device, ext)` whenever it wants progress: it
//!    drains received frames (queuing notices and deliveries as messages complete, for
//!    the personality to take after the call), fires expired
//!    timers, advances the barrier, and transmits what the windows and credits allow;
//! 2. may sleep until [`Engine::poll_at`] (`None`: nothing to do until a frame comes);
//! 3. starts work with the non-blocking calls ([`Engine::start_send`],
//!    [`Engine::start_barrier`], ...) and observes it with the status calls.
//!
//! `poll` is [`Engine::handle_frame`] for each received frame, then
//! [`Engine::handle_timeout`], then [`Engine::poll_transmit`]; they may be called
//! separately in that order. Everything happens inside these calls; the engine calls no
//! personality code. The personality takes what they raised ([`Engine::next_notice`],
//! [`Engine::next_delivery`]) right after each, and runs its handlers then.
//!
//! # Delivery service
//!
//! *Reliable* sends (GAMMA's `_flowctl`) travel in the channel's sequence space: sliding
//! window, cumulative plus selective acks, retransmission with exponential back-off,
//! credits (the receiver's advertised window), exactly-once in-order delivery per
//! channel, and a send failure at the sender once the peer has been silent for
//! `peer_timeout` (time, not a count of rounds: a paused peer survives; and only time
//! in which this endpoint ran: where its timers are taken more than
//! [`NOT_RUNNING_AFTER`] late, it was descheduled, stopped or computing, and that
//! lateness is no peer's silence). On a
//! device that declares itself reliable there is no delayed-ack timer and no blind
//! retransmission: acks are credit returns, batched per half window and at message
//! ends, and only frames the receiver refused (port busy or not bound yet) are sent again.
//!
//! *Best-effort* sends (plain GAMMA `send`) are fragmented the same way but never
//! retransmitted: a receiver that misses a fragment, or a whole message before a later
//! one, reports `FrameLost` on the port; it never hands over silently wrong data.
//!
//! A message is placed straight into the destination port's posted buffer at its
//! fragment offset; its port's owner is told (a [`Notice`]) when the whole message has
//! landed. A poll hands at most one message to ports, so the owner's handler runs
//! before the port's buffer takes the next. (A best-effort message reported lost
//! because a later one began may show the later one's first bytes by then: its
//! `FrameLost` is what counts.)

use managed::ManagedSlice;

use crate::phy::{BarrierMembers, BarrierPoll, Capabilities, Device, RxToken, TxToken};
use crate::time::{Duration, Instant};
use crate::wire::{self, AckInfo, Endpoints, Flags, Kind, Repr, WireError, HEADER_LEN};
use crate::{GroupId, NodeAddr, NodeId, PortId};

mod assembly;
mod atomic;
mod barrier;
mod board;
mod channel;
mod config;
mod emit;
mod error;
mod fence;
mod hello;
mod mcast;
mod ops;
mod orphan;
mod packet;
mod port;
mod rma;
mod rx;
mod rx_fast;
mod send;
mod send_now;
mod stats;
mod storage;
mod stream;
#[cfg(test)]
mod tests;
mod timers;
mod tx;

pub use atomic::{FetchHandle, COUNTERS, FETCH_SLOTS};
use channel::{seq_lt, SeqCheck, Short, Slot, NONE, SHORT_MAX};
pub use channel::{Channel, MAX_WINDOW};
pub use mcast::{McastGroup, McastTables, Tree, MCAST_ALL};
pub use packet::{Delivery, PacketBuf, PacketId, Packets, PACKET_MAX};
pub use port::*;
use rma::RMA_NONE;
pub use rma::{Access, Memory, NoMemory, RmaFailure, Transfer, GET_SLOTS, NO_BELL};
pub use rx::Received;
pub use timers::{beacon_frame, BEACON_LEN};

pub use assembly::Assembly;
pub use config::{Config, Dest, Group, Members, PeerStatus};
use emit::*;
pub use error::Error;
use ops::*;
pub use ops::{Body, EagerBuf, Op, SendHandle, SendRequest, SendStatus};
pub use send_now::OneFrame;
pub use stats::Stats;
use storage::*;
pub use storage::{Capacity, Storage};

/// Whether `dev` still believes `peer` alive: yes where it cannot tell (see
/// [`crate::phy::Liveness`]).
#[inline]
fn peer_alive<D: Device>(dev: &mut D, now: Instant, peer: NodeAddr) -> bool {
    dev.liveness().is_none_or(|l| l.peer_alive(now, peer))
}

/// Destination instance meaning "every member of the group but the sender".
pub const BROADCAST: NodeId = u16::MAX;
/// Longest first piece of a message sent in two pieces, which an operation holds
/// inline (copied at the send call); the body is sent from where it lies.
pub const INLINE_HEAD_MAX: usize = 20;
/// Largest message a blocking reliable send copies into an engine buffer and returns
/// from at once (MPI's eager protocol); larger ones wait for the receiver's ack.
pub const EAGER_MAX: usize = 16 * 1024;
/// Timers taken later than this after they were due: the endpoint did not run
/// meanwhile, and its peers' silence over that time does not count towards
/// `peer_timeout`.
pub const NOT_RUNNING_AFTER: Duration = Duration::from_millis(20);
/// Barrier round value meaning "are you alive?": acked, otherwise ignored.
const BARRIER_PROBE: u32 = u32::MAX;
/// Barrier round bit meaning "this barrier failed": the receiver's fails too.
const BARRIER_ABORT: u32 = 1 << 31;
/// `offset` of a CONTROL frame that rejects a message (WIRE.md).
const CONTROL_REJECT: u32 = 1;
/// `offset` of a CONTROL frame that denies a put: its address is not exposed.
const CONTROL_DENY_PUT: u32 = 2;
/// `offset` of a CONTROL frame that denies a get request.
const CONTROL_DENY_GET: u32 = 3;
/// `offset` of a CONTROL frame from a broadcast's root: answer once you have its
/// broadcasts before number `msg_id` (see `fence`).
const CONTROL_FENCE: u32 = 4;
/// `offset` of a CONTROL frame answering a FENCE for broadcast `msg_id`.
const CONTROL_FENCE_OK: u32 = 5;
/// `offset` of a CONTROL frame saying the rest of message `msg_id` will not come
/// (see `orphan`).
const CONTROL_ABORT: u32 = 6;
/// `offset` of a CONTROL frame saying the sender is leaving the job on purpose
/// (see [`Engine::say_goodbye`]): not a death.
const CONTROL_BYE: u32 = 7;

#[derive(Debug, Clone, Copy, Default)]
struct BarrierState {
    /// Barriers completed; also the epoch of the next one.
    epoch: u32,
    active: bool,
    round: u32,
    sent: bool,
    failed: Option<Error>,
    /// Round tokens seen for `epoch` and `epoch + 1`.
    arrivals: [u64; 2],
    /// An abort seen for `epoch` and `epoch + 1`.
    aborted: [bool; 2],
    /// When the current wait (or the last probe) began.
    since: Instant,
    /// This member's sends have landed: it may arrive at the device's barrier.
    drained: bool,
    /// The device answered that it runs no barrier: frames only, no drain.
    no_device: bool,
}

/// The protocol engine of one endpoint.
pub struct Engine<'a> {
    cfg: Config,
    groups: &'a [Group<'a>],
    size: u16,
    ports: port::Ports<'a>,
    chans: channel::Channels<'a>,
    ops: ops::Ops<'a>,
    asms: assembly::Assemblies<'a>,
    bufs: Bufs<'a>,
    mcast: McastTables<'a>,
    bcast: fence::Broadcasts<'a>,
    orphans: orphan::Orphans,
    /// Answers to late HELLOs waiting to go ([`Config::hello`]).
    hellos: hello::LateHellos,
    /// The short tags' hashes of the last header sent and received (`wire::TagCache`).
    tags: Tags,
    stats: Stats,
    caps: Capabilities,
    /// Whether a poll has read `caps` from its device: once, as a device's
    /// capabilities stay as they were when the engine began to use it (reading them at
    /// every poll cost 10 to 25 instructions a poll, `engine_cost`, `shm_cost`).
    caps_read: bool,
    /// The longest payload a frame of `caps` carries (`emit::max_payload`), kept
    /// with `caps`: a send checks it, not the sum that makes it.
    payload_max: usize,
    bar: BarrierState,
    progress: Progress,
    /// Sends handlers queued.
    outbox: Outbox,
    /// Counters served here and fetch-and-adds waiting for answers.
    atomics: atomic::Atomics,
    /// Gets waiting for data, one-sided failures.
    rma: rma::Rma,
}

/// The short tags' cached hashes, of the last header sent and received.
#[derive(Debug, Default)]
struct Tags {
    tx: wire::TagCache,
    rx: wire::TagCache,
}

/// What a poll leaves for the next, and the time it ran.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// A message was handed to a port during the current poll.
    delivered: bool,
    /// A packet was stored for the program during the current poll (LFC's upcall),
    /// or a put's bell rung: the poll drains the rest and leaves its upkeep.
    stored: bool,
    /// The last poll delivered a message and left timers and transmission to the
    /// next one.
    upkeep_due: bool,
    /// The time of the last poll: what a send that leaves at once gives a device
    /// that does not read it ([`Device::transmit_reads_time`]).
    polled_at: Instant,
}

impl core::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'a> Engine<'a> {
    /// An engine for `cfg.node` of group `cfg.group`, talking to the groups in `groups`.
    pub fn new(cfg: Config, groups: &'a [Group<'a>], storage: Storage<'a>) -> Result<Self, Error> {
        let g = groups
            .iter()
            .find(|g| g.id == cfg.group)
            .ok_or(Error::BadConfig)?;
        if cfg.node >= g.members.len() || cfg.window == 0 || storage.ops.len() > NONE as usize {
            return Err(Error::BadConfig);
        }
        if storage.channels.len() >= NONE as usize || storage.sems.is_empty() {
            return Err(Error::BadConfig);
        }
        let size = g.members.len();
        let eager_free = storage.eager.iter().filter(|b| !b.used).count();
        // A short broadcast's copy at its root leaves a unit of buffers for each
        // level of relays below it (see `start`).
        let pool = storage.eager.len();
        let bcast_keep = cfg
            .bcast_tree
            .map(|t| t.height(0, size as usize))
            .filter(|&levels| levels <= pool)
            .map_or(0, |levels| {
                stream::relay_unit(pool, levels) * (levels.max(1) - 1)
            });
        let caps = Capabilities::new(1500, false, false);
        let payload_max = emit::max_payload(&cfg, &caps);
        Ok(Engine {
            size,
            cfg,
            groups,
            ports: port::Ports {
                table: storage.ports,
                notices: Notices::new(storage.notices),
                sems: storage.sems,
            },
            chans: channel::Channels::new(storage.channels, storage.peer_map),
            ops: ops::Ops {
                table: storage.ops,
                hint: 0,
            },
            asms: assembly::Assemblies {
                table: storage.assemblies,
                hwm: 0,
                best_effort: 0,
            },
            bufs: Bufs {
                eager: storage.eager,
                pkts: storage.packets,
                rma_done: 0,
                rma_head: NONE,
                rma_tail: NONE,
                streams: [stream::Stream::EMPTY; stream::MAX_STREAMS],
                queued_streams: 0,
                eager_free,
                eager_hint: 0,
            },
            mcast: storage.mcast,
            bcast: fence::Broadcasts {
                seq: storage.bcast_seq,
                next: 0,
                keep: bcast_keep,
                board_head: NONE,
                board_tail: NONE,
                packet_tree_used: false,
                gate: fence::Gate::default(),
            },
            orphans: orphan::Orphans::default(),
            hellos: hello::LateHellos::new(),
            tags: Tags::default(),
            stats: Stats::default(),
            caps,
            caps_read: false,
            payload_max,
            bar: BarrierState::default(),
            progress: Progress::default(),
            outbox: Outbox::default(),
            atomics: atomic::Atomics::default(),
            rma: rma::Rma::default(),
        })
    }

    /// Learns the device's limits (MTU, reliability, integrity) before the first
    /// [`Engine::poll`], which otherwise learns them; sends started earlier are framed
    /// to the device's MTU, not a default.
    pub fn set_capabilities(&mut self, caps: Capabilities) {
        self.caps = caps;
        self.payload_max = emit::max_payload(&self.cfg, &caps);
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// What this engine knows of member `node` of its own group: whether it was
    /// ever heard from, and whether it has been given up (sends to it fail). Both
    /// false for a member nothing was exchanged with, or one out of range.
    pub fn peer_status(&self, node: NodeId) -> PeerStatus {
        let group = self.cfg.group;
        self.addr_of(group, node)
            .ok()
            .and_then(|a| self.chans.peer_map.get(a.0 as usize).copied())
            .and_then(|ci| self.chans.table.get(ci as usize))
            .filter(|c| c.in_use && c.peer_group == group && c.peer_node == node)
            .map_or(PeerStatus::default(), |c| PeerStatus {
                heard_from: c.met,
                failed: c.failed,
            })
    }
    /// Eager buffers free now (none held by a send, a copy or a relay).
    pub fn eager_free(&self) -> usize {
        self.bufs.eager_free
    }
    /// Sets every counter to zero.
    pub(crate) fn reset_stats(&mut self) {
        self.stats = Stats::default();
    }
    /// Instances in this process's group.
    pub(crate) fn size(&self) -> u16 {
        self.size
    }

    #[inline]
    fn group(&self, id: GroupId) -> Option<&Group<'a>> {
        self.groups.iter().find(|g| g.id == id)
    }

    #[inline]
    fn addr_of(&self, group: GroupId, node: NodeId) -> Result<NodeAddr, Error> {
        let g = self.group(group).ok_or(Error::UnknownGroup)?;
        g.members.addr(node).ok_or(Error::UnknownNode)
    }

    /// Receives and processes frames, fires timers, advances the barrier and transmits.
    /// Returns true if anything happened.
    pub fn poll<D: Device>(&mut self, now: Instant, dev: &mut D, ext: Option<&[u8]>) -> bool {
        self.poll_mem(now, dev, ext, &mut NoMemory)
    }

    /// [`Engine::poll`] for an endpoint that serves one-sided operations: peers'
    /// puts and gets reach program memory through `mem`, and the bells of finished
    /// operations are rung through it.
    pub fn poll_mem<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
        mem: &mut dyn Memory,
    ) -> bool {
        self.poll_with(now, dev, ext, mem, None)
    }

    /// [`Engine::poll_mem`] that runs the personality's handlers (`upcalls`) of the
    /// messages header prediction delivers in this poll, from inside it, where no
    /// notice waits before theirs; what those handlers queue to send is started
    /// before the poll returns (at once where its channel allows, else by this
    /// poll's transmit pass). Other notices are queued as [`Engine::poll`] queues
    /// them.
    pub fn poll_with<D: Device>(
        &mut self,
        now: Instant,
        dev: &mut D,
        ext: Option<&[u8]>,
        mem: &mut dyn Memory,
        mut upcalls: Option<&mut dyn Upcalls<'a>>,
    ) -> bool {
        if !self.caps_read {
            self.set_capabilities(dev.capabilities());
            self.caps_read = true;
        }
        self.progress.polled_at = now;
        self.take_due_acks(now);
        let mut busy = false;
        // A bounded batch keeps transmission (and acks) flowing under a receive flood;
        // once a message has been delivered the caller gets control back at once (it
        // is probably waiting for it), without another look at the device.
        self.progress.delivered = false;
        self.progress.stored = false;
        for _ in 0..256 {
            let Some(tok) = dev.receive(now) else { break };
            let src = tok.source();
            tok.consume_parts(|f, body| {
                if body.is_empty() {
                    if f.first() == Some(&wire::COMPACT_MAGIC) {
                        self.rx_compact(now, f, src, mem, reborrow(&mut upcalls))
                    } else {
                        self.rx_whole(now, f, src, mem, reborrow(&mut upcalls))
                    }
                } else {
                    self.handle_split(now, f, body, src, mem)
                }
            });
            busy = true;
            if self.progress.delivered {
                break;
            }
        }
        if upcalls.is_some() && self.outbox.len > 0 {
            // A handler's reply, as the personality sends it after its handlers.
            self.send_queued_at_once_cold(now, dev);
        }
        if !self.progress.delivered {
            busy |= dev
                .board()
                .is_some_and(|b| b.read(now, &mut |from, f| self.rx_board(now, from, f)));
        }
        // (`busy` first: an empty poll decides on one register.)
        if busy && (self.progress.delivered || self.progress.stored) && self.upkeep_can_wait() {
            // Timers, acks that may wait and transmission come at the next poll,
            // after this message's handler (or the packet's upcall) and the reply
            // it probably sends, rather than before them.
            self.progress.upkeep_due = true;
            return busy;
        }
        self.progress.upkeep_due = false;
        self.handle_timeout_vouched(now, &mut |peer| {
            dev.liveness().is_some_and(|l| l.peer_vouched(now, peer))
        });
        if core::mem::take(&mut self.chans.timer_fired) {
            self.check_liveness(now, dev);
        }
        if self.bar.active {
            self.advance_barrier(now, dev);
        }
        busy |= self.poll_transmit_mem(now, dev, ext, mem) > 0;
        if self.bar.active {
            self.advance_barrier(now, dev);
        }
        self.settle_rma(mem);
        if !busy && self.cfg.auth_key.is_some() {
            // Nothing to do: hash ahead the headers of the frames most likely to
            // come and go next, so that their tags cost less when they do.
            self.tags.rx.prepare();
            self.tags.tx.prepare();
        }
        busy
    }

    /// Timers taken `gap` after they were due: this endpoint did not run (or did
    /// not poll) meanwhile, so its peers' silence over the gap is not counted
    /// against them. With ranks outnumbering cores, both ends of a channel may
    /// wait their turn for long; frames sent meanwhile are read before any timer.
    #[cold]
    #[inline(never)]
    fn resumed(&mut self, gap: Duration) {
        let mut silent = false;
        for ch in self.chans.table[..self.chans.hwm].iter_mut() {
            if let Some(t) = ch.silent_since.as_mut() {
                *t += gap;
                silent = true;
            }
        }
        self.stats.resumed += u64::from(silent);
    }

    /// A whole frame under the full header: predicted, else the general path; a
    /// compact put straight to its own prediction (not through the others' first).
    #[inline(never)]
    fn rx_whole(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
        upcalls: Option<&mut dyn Upcalls<'a>>,
    ) {
        if frame.first() == Some(&wire::COMPACT_PUT_MAGIC) {
            return self.rx_compact_put(now, frame, source, mem);
        }
        if !self.rx_predicted(now, frame, source, upcalls) {
            self.rx_general(now, frame, source, mem)
        }
    }

    /// A whole frame that header prediction did not take: out of line and cold, so
    /// that the predicted path keeps its registers (`rx_compact_general` likewise).
    #[cold]
    #[inline(never)]
    fn rx_general(
        &mut self,
        now: Instant,
        frame: &[u8],
        source: Option<NodeAddr>,
        mem: &mut dyn Memory,
    ) {
        self.handle_whole(now, frame, source, mem)
    }

    /// Whether a poll that delivered may leave its upkeep to the next poll:
    /// nothing received in it is to go out at once (an ack asked for, a RETRY,
    /// forwards down a tree, a fence's answer, a relayed stream's next frames, a
    /// handler's send), no barrier runs, no one-sided operation has finished, and
    /// the poll before did not leave its own. Timers and delayed acks can wait.
    fn upkeep_can_wait(&self) -> bool {
        !self.progress.upkeep_due && self.bufs.rma_done == 0 && !self.sends_waiting()
    }
}

/// `upcalls` lent for one call (the object's lifetime shortened with the loan's).
#[inline(always)]
fn reborrow<'s, 'a>(
    upcalls: &'s mut Option<&mut dyn Upcalls<'a>>,
) -> Option<&'s mut dyn Upcalls<'a>> {
    match upcalls {
        Some(u) => Some(&mut **u),
        None => None,
    }
}

/// Re-exported so personalities need not name the wire module.
pub use wire::Kind as FrameKind;

/// `dst.copy_from_slice(src)` that moves up to 16 bytes inline, in two overlapping
/// moves: most active messages are a few words, and a call to `memcpy` for them
/// cost more than their delivery's other stores (`engine_cost`).
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() != n || n > 16 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<8>(), src.first_chunk::<8>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<8>(), src.last_chunk::<8>()) {
            *d = *s;
        }
    } else if n >= 4 {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<4>(), src.first_chunk::<4>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<4>(), src.last_chunk::<4>()) {
            *d = *s;
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}
