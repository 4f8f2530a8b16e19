//! An engine's settings, and the groups it belongs to.

use super::*;

/// Tunables of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Per-job key: frames carrying another key are dropped and counted.
    pub job_key: u32,
    /// This process's group (parallel pid).
    pub group: GroupId,
    /// This process's instance number in its group.
    pub node: NodeId,
    /// Credits advertised to each peer: frames beyond the cumulative ack (at most 64).
    pub window: u16,
    /// First retransmission timeout, and the least one: once round trips are
    /// measured the timeout is `srtt + 4 * rttvar` (RFC 6298), never below this.
    pub rto_initial: Duration,
    /// Ceiling of the exponential back-off.
    pub rto_max: Duration,
    /// How long a peer may stay silent (no frame of any kind) while we wait for it
    /// before it is declared dead and sends to it fail. Retransmissions and probes go
    /// out meanwhile; a debugger stop, swapping or a busy node shorter than this is
    /// survived. A device that knows a peer died (a dead process on shared memory)
    /// fails it at once.
    pub peer_timeout: Duration,
    /// How long a peer never heard from may stay silent, where that is longer than
    /// `peer_timeout`: a job's members do not start at once (nodes booting on a
    /// busy host, ranks that a launcher starts one by one), and one that has not
    /// spoken yet is more likely late than dead. `ZERO` (the default): no longer.
    pub first_contact: Duration,
    /// A rank waiting on a semaphore probes, this often, the silent peers its ports
    /// are bound to, so that a dead sender becomes an error instead of a hang.
    pub keepalive: Duration,
    /// Longest an ack may be held back hoping to ride on a data frame (lossy links).
    pub ack_delay: Duration,
    /// The same for a dissemination barrier token (never above half of
    /// `rto_initial`, the retransmission timer's floor): nobody waits for its ack,
    /// and in a dissemination barrier no frame goes back to the token's sender, so
    /// each ack is a frame of its own that a member sends while the next barrier
    /// runs. Held longer, one ack covers the tokens of several barriers.
    pub barrier_ack_delay: Duration,
    /// A best-effort message not completed within this time is reported lost.
    pub reassembly_timeout: Duration,
    /// A barrier waiting this long for a round's token probes the member it waits
    /// for (and again every such period): a dead one fails the barrier.
    pub barrier_probe: Duration,
    /// The job's authentication key: every frame sent carries a tag ([`wire::tag`]) under
    /// it, and a frame without a valid one is dropped before anything else looks at
    /// it (`rx_unauthenticated`). `None` on fabrics no other party can write to
    /// (shared memory private to the job's user).
    pub auth_key: Option<wire::AuthKey>,
    /// A reliable message to a port that is not bound for input is refused (the sender
    /// retries) for this long, then discarded; its sender's send fails with
    /// [`Error::PortClosed`]. Ports bound late (no barrier after setting up) still get
    /// their messages within it.
    pub unbound_grace: Duration,
    /// Barriers run in device memory where the device can ([`crate::phy::NicBarrier::barrier`]);
    /// `false` (the default) keeps the frame (dissemination) barrier. The device's
    /// barrier sends no token behind earlier frames, so a member arrives at it only
    /// once what it sent has been acknowledged (or is held back by its receiver's
    /// refusal): a message sent before the barrier has landed when anyone leaves
    /// it. Every member of a group must have the same setting.
    pub device_barrier: bool,
    /// The tree a reliable broadcast to this engine's own group travels down, each
    /// member forwarding it to its children from an eager buffer (`None`: the root
    /// sends every copy itself); one longer than [`EAGER_MAX`] is passed on chunk by
    /// chunk as it arrives. Roots with fewer eager buffers than the tree has levels
    /// send every copy themselves.
    /// Every member of a group must have the same setting.
    pub bcast_tree: Option<Tree>,
    /// Whether the frame that ends a one-sided exchange (a put's or a get reply's
    /// last, a fetch-and-add answer) is acknowledged in the poll that takes it even
    /// where its sender does not ask (it asks where a bell waits for the ack). `true`
    /// (the default): a process that takes it and then computes without calling in
    /// owes no ack, and its peer, hearing nothing, would otherwise take it for dead
    /// after `peer_timeout`. A host that speaks for its processes while they compute
    /// (a beacon: [`beacon_frame`], [`crate::phy::Liveness::peer_vouched`]) sets it
    /// `false`: the ack then rides on the next frame back (a ping-pong's answer, the
    /// next request) or follows within `ack_delay`, a frame less per operation.
    pub ack_exchange_ends: bool,
    /// Where the job's ranks met in a start-up exchange ([`crate::session`]) whose
    /// run key is `auth_key`: this rank's nonce and the hello key, so that the
    /// engine answers HELLOs that come late (a peer that lost the last one). `None`
    /// (the default): HELLOs are dropped as malformed.
    pub hello: Option<crate::session::HelloConfig>,
    /// Ports from this one up are the personality's own, never a message's
    /// destination (GAMMA keeps 1023 and 1024 for broadcast and barrier): a reliable
    /// message to one is refused at once, without the grace an unbound port gets.
    /// `PortId::MAX` (the default): the last port only, which no table reaches.
    pub reserved_ports_from: PortId,
}

impl Config {
    /// Defaults suited to a LAN or shared memory: a dead peer is declared after ~2 s.
    pub const fn new(job_key: u32, group: GroupId, node: NodeId) -> Config {
        Config {
            job_key,
            group,
            node,
            window: 32,
            rto_initial: Duration::from_micros(500),
            rto_max: Duration::from_millis(200),
            peer_timeout: Duration::from_secs(30),
            first_contact: Duration::ZERO,
            keepalive: Duration::from_millis(500),
            ack_delay: Duration::from_micros(20),
            barrier_ack_delay: Duration::from_micros(200),
            reassembly_timeout: Duration::from_millis(100),
            barrier_probe: Duration::from_millis(50),
            unbound_grace: Duration::from_secs(10),
            auth_key: None,
            device_barrier: false,
            bcast_tree: Some(Tree::Binomial),
            ack_exchange_ends: true,
            hello: None,
            reserved_ports_from: PortId::MAX,
        }
    }
}

/// The members of a group, in instance order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Members<'a> {
    /// Instances `0..count` live at fabric addresses `first..first + count`.
    Range {
        /// Fabric address of instance 0.
        first: u16,
        /// Number of instances.
        count: u16,
    },
    /// Instance `i` lives at `list[i]`.
    List(&'a [NodeAddr]),
}

impl Members<'_> {
    /// Number of instances.
    pub(crate) fn len(&self) -> u16 {
        match *self {
            Members::Range { count, .. } => count,
            Members::List(l) => l.len().min(u16::MAX as usize) as u16,
        }
    }
    /// Fabric address of instance `i`.
    pub(crate) fn addr(&self, i: NodeId) -> Option<NodeAddr> {
        match *self {
            Members::Range { first, count } => (i < count).then(|| NodeAddr(first.wrapping_add(i))),
            Members::List(l) => l.get(i as usize).copied(),
        }
    }
}

/// A process group this engine can talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group<'a> {
    /// Parallel pid.
    pub id: GroupId,
    /// Where its instances live.
    pub members: Members<'a>,
}

/// Where an output port sends: GAMMA's destination triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// Destination group (parallel pid).
    pub group: GroupId,
    /// Destination instance, or [`BROADCAST`].
    pub node: NodeId,
    /// Destination port.
    pub port: PortId,
}

/// A peer as [`Engine::peer_status`] sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStatus {
    /// A valid frame from it has arrived.
    pub heard_from: bool,
    /// It was declared dead: silent for `peer_timeout` once heard from, before
    /// that for `first_contact` where longer, or known dead by the device.
    pub failed: bool,
}
