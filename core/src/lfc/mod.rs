//! The LFC personality: the VU Amsterdam packet interface (LFC User Guide 2.0), in Rust.
//!
//! Named after the seed's calls (`lfc_send_alloc` is [`Lfc::send_alloc`], and so on).
//! What the seed promised and what this one adds:
//!
//! - **Packets.** [`Lfc::send_alloc`] hands out a send packet of the engine's pool; the
//!   program fills it ([`Lfc::packet_mut`]) and launches it, and the launch queues
//!   frames that read that same buffer (no copy). Received packets land in the
//!   receive pool (the seed's host receive ring, `-lfc-ring-frames`) and are handed
//!   to the upcall, which returns [`Keep`]: `Keep::No` recycles the packet at once,
//!   `Keep::Yes` leaves it with the program until [`Lfc::packet_free`]. Kept packets
//!   hold receive slots; when none is left the senders are refused at the wire and
//!   retry, so nothing is lost (the seed's warning about running out of receive
//!   packets becomes back-pressure instead of an overrun).
//! - **Upcalls** run inside [`Lfc::poll`] and inside the calls that take
//!   `upcalls_allowed` when it is true: a call that must wait (no free send packet,
//!   a fetch-and-add in flight) drains the network meanwhile, and makes upcalls only
//!   if allowed (otherwise the packets wait for a later poll). An upcall gets the
//!   whole [`Lfc`] and may launch, free and poll.
//! - **FIFO** between packets sent by the same primitive to the same destination (for
//!   multicasts: per root and group); nothing more is promised.
//! - **Multicast** to static groups ([`Lfc::group_create`], before [`Lfc::start`])
//!   down a binary (default), binomial or chain tree: each member's engine forwards
//!   to its children before its own upcall, so a slow program does not hold up the
//!   tree. Every member but the sender gets the packet exactly once.
//! - **Fetch-and-add** on a per-process variable starting at 0: served by the
//!   Myrinet-like device in NIC memory where there is one, else by the owner's engine.
//! - **Interrupts**: nested [`Lfc::intr_disable`]/[`Lfc::intr_enable`] with the seed's
//!   rules (disabled when [`Lfc::start`] returns; only the outermost pair acts). The
//!   personality keeps the state and the time of the program's last poll
//!   ([`Lfc::interrupt_due`]); the deployment supplies the asynchronous delivery (a
//!   progress thread in a Linux process, the NIC's interrupt on the unikernel) and
//!   calls [`Lfc::interrupt`].
//! - **Beyond the seed's limits**: frames are retransmitted over lossy links (sliding
//!   window), several processes may share a host and a device, jobs are isolated by
//!   their key. One `Lfc` is used by one thread at a time (`&mut self`); a hosted
//!   deployment with interrupts puts it behind a lock.

use crate::endpoint::Endpoint;
use crate::engine::{Config, Delivery, Engine, Error, Group, PacketId, Storage, MCAST_ALL};
use crate::phy::Device;
use crate::time::{Clock, Duration, Instant};
use crate::NodeId;

pub use crate::engine::{Tree, PACKET_MAX};

/// Set in an upcall's flags for a multicast or broadcast packet (`LFC_UPCALL_MCAST`).
pub const UPCALL_MCAST: u32 = 0x1;

/// What an upcall does with the packet it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Done with it: recycle it (the upcall returned 0).
    No,
    /// The program keeps it until [`Lfc::packet_free`] (the upcall returned nonzero).
    Yes,
}

/// A packet handed to an upcall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The process that launched it.
    pub src: NodeId,
    /// The packet, to read with [`Lfc::packet`] and free with [`Lfc::packet_free`].
    pub packet: PacketId,
    /// Payload length.
    pub size: usize,
    /// [`UPCALL_MCAST`] for multicast and broadcast packets.
    pub flags: u32,
}

/// The program's `lfc_upcall`.
pub type Upcall<'a, D, C, S> = fn(&mut Lfc<'a, D, C, S>, Received) -> Keep;

/// Run-time settings (the seed's `-lfc-*` options and `LFC_*` variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Multicast tree shape (`-lfc-tree`).
    pub tree: Tree,
    /// Receive packets (`-lfc-ring-frames`).
    pub ring_frames: usize,
    /// Send packets.
    pub send_packets: usize,
    /// No interrupts at all (`-lfc-no-intr`).
    pub no_intr: bool,
    /// First interrupt delay after the program's last poll (`-lfc-intr-first`).
    pub intr_first: Duration,
    /// Delay between later interrupts (`-lfc-interval`).
    pub interval: Duration,
    /// Print the configuration at start (`-lfc-verbose`).
    pub verbose: bool,
    /// Collect and print statistics at exit (`-lfc-stats`).
    pub stats: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tree: Tree::Binary,
            ring_frames: 256,
            send_packets: 64,
            no_intr: false,
            intr_first: Duration::from_micros(50),
            interval: Duration::from_micros(50),
            verbose: false,
            stats: false,
        }
    }
}

/// Statistics of one process (LFC's host statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LfcStats {
    /// Packets launched (a multicast counts once).
    pub launched: u64,
    /// Upcalls made.
    pub upcalls: u64,
    /// Of them, for multicast packets.
    pub mcast_upcalls: u64,
    /// Packets the upcall kept.
    pub kept: u64,
    /// Upcalls run by an interrupt.
    pub interrupts: u64,
    /// Calls of `lfc_poll`.
    pub polls: u64,
    /// Fetch-and-adds made.
    pub fetch_adds: u64,
    /// Frames sent (engine).
    pub tx_frames: u64,
    /// Frames received (engine).
    pub rx_frames: u64,
    /// Frames sent again (engine).
    pub retransmits: u64,
    /// Frames refused for now (receive ring full, or in-order delivery waiting).
    pub refused: u64,
}

impl LfcStats {
    /// Number of counters, in [`LfcStats::to_array`] order.
    pub const COUNT: usize = 11;
    /// Counter names, for a dump.
    pub const NAMES: [&'static str; Self::COUNT] = [
        "launched",
        "upcalls",
        "mcast_upcalls",
        "kept",
        "interrupts",
        "polls",
        "fetch_adds",
        "tx_frames",
        "rx_frames",
        "retransmits",
        "refused",
    ];
    /// The counters as an array.
    pub fn to_array(&self) -> [u64; Self::COUNT] {
        [
            self.launched,
            self.upcalls,
            self.mcast_upcalls,
            self.kept,
            self.interrupts,
            self.polls,
            self.fetch_adds,
            self.tx_frames,
            self.rx_frames,
            self.retransmits,
            self.refused,
        ]
    }
}

/// Statistics buffers live on process 0; this many at most.
pub const STATS_BUFFERS: usize = 8;

/// One LFC process: the engine, its device and its clock.
pub struct Lfc<'a, D, C, S = ()> {
    ep: Endpoint<'a, D, C>,
    opts: Options,
    upcall: Upcall<'a, D, C, S>,
    state: S,
    started: bool,
    /// Nesting depth of `intr_disable`; interrupts are enabled at 0.
    intr_depth: u32,
    last_poll: Instant,
    last_interrupt: Instant,
    last_keepalive: Instant,
    dead: Option<NodeId>,
    timer_start: Instant,
    timer_elapsed: Duration,
    stats: LfcStats,
    /// Statistics buffers created so far (the same count on every process).
    stats_buffers: usize,
    /// Process 0: the gathered counters, `[buffer][rank]`.
    #[cfg(feature = "alloc")]
    gathered: alloc::vec::Vec<alloc::vec::Vec<[u64; LfcStats::COUNT]>>,
    /// Statistics packets received and not yet used by a gather.
    stats_arrivals: u32,
}

crate::endpoint::deref_endpoint!(Lfc, 'a, D, C, S);

impl<D, C, S> core::fmt::Debug for Lfc<'_, D, C, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Lfc")
            .field("engine", &self.ep.engine)
            .field("opts", &self.opts)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl<'a, D: Device, C: Clock, S> Lfc<'a, D, C, S> {
    /// `lfc_init`: this process is instance `cfg.node` of group `cfg.group`, with
    /// tables from `storage` (which must include packet pools, see
    /// [`Storage::with_packets`]).
    #[allow(clippy::too_many_arguments)]
    pub fn init(
        cfg: Config,
        groups: &'a [Group<'a>],
        storage: Storage<'a>,
        dev: D,
        clock: C,
        opts: Options,
        upcall: Upcall<'a, D, C, S>,
        state: S,
    ) -> Result<Self, Error> {
        if storage.packets.tx.is_empty() || storage.packets.rx.is_empty() {
            return Err(Error::BadConfig);
        }
        let mut engine = Engine::new(cfg, groups, storage)?;
        engine.set_capabilities(dev.capabilities());
        let now = clock.now();
        Ok(Lfc {
            ep: Endpoint::new(engine, dev, clock),
            opts,
            upcall,
            state,
            started: false,
            intr_depth: 1,
            last_poll: now,
            last_interrupt: now,
            last_keepalive: now,
            dead: None,
            timer_start: now,
            timer_elapsed: Duration::ZERO,
            stats: LfcStats::default(),
            stats_buffers: 0,
            #[cfg(feature = "alloc")]
            gathered: alloc::vec::Vec::new(),
            stats_arrivals: 0,
        })
    }

    /// `lfc_init` with tables allocated here for a fabric of `fabric_nodes` addresses.
    #[cfg(feature = "alloc")]
    #[allow(clippy::too_many_arguments)]
    pub fn init_alloc(
        cfg: Config,
        groups: &'a [Group<'a>],
        fabric_nodes: usize,
        dev: D,
        clock: C,
        opts: Options,
        upcall: Upcall<'a, D, C, S>,
        state: S,
    ) -> Result<Self, Error> {
        if opts.ring_frames == 0 || opts.send_packets == 0 || opts.ring_frames > 0x7FFF {
            return Err(Error::BadConfig);
        }
        let cap = crate::engine::Capacity {
            ports: 1,
            channels: fabric_nodes,
            fabric_nodes,
            // A forwarded multicast takes up to two sends per receive packet.
            ops: (2 * opts.ring_frames + 2 * opts.send_packets + 4 * fabric_nodes).min(0xFFF0),
            assemblies: 1,
            eager: 0,
        };
        let storage = Storage::with_capacity(cap).with_packets(
            opts.send_packets,
            opts.ring_frames,
            64,
            64 * fabric_nodes.max(16),
        );
        Self::init(cfg, groups, storage, dev, clock, opts, upcall, state)
    }

    // ------------------------------------------------------------ set-up

    /// `lfc_group_create`: a static multicast group of these ranks (distinct, the same
    /// list on every process); before [`Lfc::start`]. Returns its id.
    pub fn group_create(&mut self, members: &[NodeId]) -> Result<u16, Error> {
        if self.started {
            return Err(Error::BadConfig);
        }
        self.ep.engine.create_multicast_group(members)
    }

    /// `lfc_start`: waits until every process has started (a barrier); interrupts
    /// are disabled when it returns.
    pub fn start(&mut self) -> Result<(), Error> {
        self.start_begin()?;
        loop {
            let busy = self.poll_network();
            if self.start_test()? {
                return Ok(());
            }
            self.idle_step(busy);
        }
    }

    /// [`Lfc::start`] without waiting: begins the start barrier; groups can no longer
    /// be created. [`Lfc::start_test`] tells when it is over.
    pub fn start_begin(&mut self) -> Result<(), Error> {
        if self.started {
            return Err(Error::BadConfig);
        }
        self.ep.engine.start_barrier()?;
        self.started = true;
        self.intr_depth = 1;
        Ok(())
    }

    /// Whether the start barrier is over (after a poll).
    pub fn start_test(&mut self) -> Result<bool, Error> {
        self.ep.engine.barrier_done()
    }

    /// A barrier among all processes that drains the network without upcalls.
    pub fn barrier(&mut self) -> Result<(), Error> {
        self.ep.engine.start_barrier()?;
        loop {
            let busy = self.poll_network();
            if self.ep.engine.barrier_done()? {
                return Ok(());
            }
            self.idle_step(busy);
        }
    }

    /// `lfc_exit`: finishes the packets still in flight (at most 10 s), tells the
    /// other processes that this one is leaving (so that those still working do not
    /// take its silence for a death: [`Engine::say_goodbye`]) and hands back the
    /// device and the program's state. Not collective: a process with nothing more
    /// to do may leave while others go on.
    pub fn exit(mut self) -> (D, S) {
        let start = self.ep.clock.now();
        let deadline = start + Duration::from_secs(10);
        let mut told = false;
        // Besides our own packets, peers may still wait on acks for theirs (the last
        // barrier or gather): stay and answer until the network has been quiet for
        // 20 ms, so that a process leaving first does not look dead to them.
        let (mut heard, mut seen) = (start, self.ep.engine.stats().rx_frames);
        loop {
            let now = self.ep.clock.now();
            told = told || self.ep.engine.say_goodbye();
            self.ep.engine.flush_acks();
            self.ep.engine.poll(now, &mut self.ep.dev, None);
            let rx = self.ep.engine.stats().rx_frames;
            if rx != seen {
                (heard, seen) = (now, rx);
            }
            let quiet = now >= heard + Duration::from_millis(20);
            if (told && self.ep.engine.is_quiescent() && quiet) || now >= deadline {
                break;
            }
            self.idle_step(false);
        }
        (self.ep.dev, self.state)
    }

    // ----------------------------------------------------- configuration

    /// `lfc_my_proc`.
    pub fn my_proc(&self) -> NodeId {
        self.ep.engine.config().node
    }
    /// `lfc_nr_procs`.
    pub fn nr_procs(&self) -> u16 {
        self.ep.engine.size()
    }
    /// `lfc_packet_size`: the largest payload of a packet.
    pub fn packet_size(&self) -> usize {
        self.ep.engine.packet_size()
    }
    /// The settings in force.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    // ----------------------------------------------------------- sending

    /// `lfc_send_alloc`: a send packet ([`Lfc::packet_mut`] to fill it). Waits for one
    /// to come free, draining the network meanwhile, with upcalls if allowed.
    pub fn send_alloc(&mut self, upcalls_allowed: bool) -> Result<PacketId, Error> {
        loop {
            match self.ep.engine.packet_alloc_on(&self.ep.dev) {
                Ok(id) => return Ok(id),
                Err(Error::NoResources) => self.wait_step(upcalls_allowed)?,
                Err(e) => return Err(e),
            }
        }
    }

    /// `lfc_ucast_launch`: sends the first `size` bytes of `packet` to `dest`.
    pub fn ucast_launch(
        &mut self,
        dest: NodeId,
        packet: PacketId,
        size: usize,
        upcalls_allowed: bool,
    ) -> Result<(), Error> {
        if self.ep.engine.peer_left(dest) {
            return Err(Error::PeerLeft);
        }
        // Out in this call where nothing waits before it on its channel, with the
        // clock read after the frame where the device allows.
        let clock = &self.ep.clock;
        let mut read = None;
        let out =
            self.ep
                .engine
                .launch_unicast_now(&mut self.ep.dev, packet, dest, size, || {
                    *read.get_or_insert_with(|| clock.now())
                })?;
        if out {
            let now = read.unwrap_or_else(|| clock.now());
            self.ep.dev.flush(now);
            self.stats.launched += 1;
            return Ok(());
        }
        self.launch(upcalls_allowed, Some(dest), |e, _, _| {
            e.launch_unicast(packet, dest, size).map(|()| false)
        })
    }

    /// `lfc_mcast_launch`: sends the first `size` bytes of `packet` to every member of
    /// group `gid` but this process, down the configured tree.
    pub fn mcast_launch(
        &mut self,
        gid: u16,
        packet: PacketId,
        size: usize,
        upcalls_allowed: bool,
    ) -> Result<(), Error> {
        if self.ep.engine.left_member(gid).is_some() {
            return Err(Error::PeerLeft);
        }
        let tree = self.opts.tree;
        // Through the board, written in this call where nothing of ours waits.
        self.launch(upcalls_allowed, None, |e, dev, now| {
            e.launch_multicast_on(now, dev, packet, gid, size, tree)
        })
    }

    /// `lfc_bcast_launch`: sends the first `size` bytes of `packet` to every other process.
    pub fn bcast_launch(
        &mut self,
        packet: PacketId,
        size: usize,
        upcalls_allowed: bool,
    ) -> Result<(), Error> {
        self.mcast_launch(MCAST_ALL, packet, size, upcalls_allowed)
    }

    /// Runs launch `f` (to `dest`, for a unicast), draining the network while the
    /// engine has no room, then sends what it queued.
    fn launch(
        &mut self,
        upcalls_allowed: bool,
        dest: Option<NodeId>,
        mut f: impl FnMut(&mut Engine<'a>, &mut D, Instant) -> Result<bool, Error>,
    ) -> Result<(), Error> {
        loop {
            let now = self.ep.clock.now();
            match f(&mut self.ep.engine, &mut self.ep.dev, now) {
                Ok(true) => {
                    // Already in the board: nothing more to send.
                    self.stats.launched += 1;
                    return Ok(());
                }
                Ok(false) => {
                    self.stats.launched += 1;
                    // Out at once: the caller is often about to wait for the answer.
                    match dest {
                        Some(d) => self.ep.engine.transmit_to(now, &mut self.ep.dev, d),
                        None => self.ep.engine.poll_transmit(now, &mut self.ep.dev, None),
                    };
                    return Ok(());
                }
                // Out of operation slots or channels for now: drain and retry.
                Err(Error::NoResources) => self.wait_step(upcalls_allowed)?,
                Err(e) => return Err(e),
            }
        }
    }

    /// A packet's bytes (a received one's payload, a send packet's whole buffer).
    pub fn packet(&self, packet: PacketId) -> Option<&[u8]> {
        self.ep.engine.packet_in(&self.ep.dev, packet)
    }

    /// A packet's buffer, to fill before a launch (its first [`Lfc::packet_size`]
    /// bytes are sent).
    pub fn packet_mut(&mut self, packet: PacketId) -> Option<&mut [u8]> {
        let n = self.ep.engine.packet_size();
        self.ep
            .engine
            .packet_mut_in(&mut self.ep.dev, packet)
            .map(|b| &mut b[..n])
    }

    /// The packet whose data starts at `addr` (for a C facade).
    pub fn packet_at(&self, addr: usize) -> Option<PacketId> {
        self.ep.engine.packet_at_in(&self.ep.dev, addr)
    }

    /// `lfc_packet_free`: gives back a packet an upcall kept.
    pub fn packet_free(&mut self, packet: PacketId) -> Result<(), Error> {
        self.ep.engine.packet_free(packet)
    }

    // --------------------------------------------------------- receiving

    /// `lfc_poll`: drains the network and makes an upcall for each packet received.
    /// Returns the number of upcalls. A packet send that failed (its peer died) is
    /// reported here once, as `Err(SendFailure)`.
    pub fn poll(&mut self) -> Result<usize, Error> {
        self.stats.polls += 1;
        // One clock read serves the watchdog, the keepalive and the engine.
        let now = self.ep.clock.now();
        self.last_poll = now;
        self.keepalive(now);
        self.poll_network_at(now);
        let n = self.run_upcalls();
        self.check_failure()?;
        Ok(n)
    }

    /// Whether the next poll has work with no frame arriving: packets waiting for
    /// their upcall (an event loop polls before it sleeps).
    pub fn work_waiting(&self) -> bool {
        self.ep.engine.deliveries_pending() > 0
    }

    /// When a poll next probes the peers (`Config::keepalive`, once started): an
    /// event loop that sleeps wakes then too, so that a peer's death is found
    /// meanwhile.
    pub fn keepalive_at(&self) -> Option<Instant> {
        self.started
            .then(|| self.last_keepalive + self.ep.engine.config().keepalive)
    }

    /// Drains the network without upcalls: received packets wait for a later poll.
    pub fn poll_network(&mut self) -> bool {
        let now = self.ep.clock.now();
        self.poll_network_at(now)
    }

    fn poll_network_at(&mut self, now: Instant) -> bool {
        let busy = self.ep.engine.poll(now, &mut self.ep.dev, None);
        self.take_internal();
        busy
    }

    /// The next packet for an upcall, taken off the queue: for a deployment that runs
    /// the program's upcall itself (a C facade). The packet is then the program's.
    pub fn next_received(&mut self) -> Option<Received> {
        self.take_internal();
        let d = self.ep.engine.next_delivery()?;
        Some(self.count_upcall(d))
    }

    fn count_upcall(&mut self, d: Delivery) -> Received {
        self.stats.upcalls += 1;
        if d.multicast {
            self.stats.mcast_upcalls += 1;
        }
        Received {
            src: d.src,
            packet: d.packet,
            size: d.len,
            flags: if d.multicast { UPCALL_MCAST } else { 0 },
        }
    }

    /// Records an upcall's verdict on `r` (for a deployment that runs upcalls itself).
    pub fn upcall_returned(&mut self, r: Received, keep: Keep) {
        match keep {
            Keep::Yes => self.stats.kept += 1,
            // The upcall may have freed it already; that is fine.
            Keep::No => {
                let _ = self.ep.engine.packet_free(r.packet);
            }
        }
    }

    /// Runs the upcall for every packet waiting; returns how many.
    pub fn run_upcalls(&mut self) -> usize {
        let mut n = 0;
        while let Some(r) = self.next_received() {
            let keep = (self.upcall)(self, r);
            self.upcall_returned(r, keep);
            n += 1;
        }
        n
    }

    /// Statistics packets are the personality's own: taken off the queue here,
    /// wherever they wait in it.
    #[inline]
    fn take_internal(&mut self) {
        while let Some(d) = self.ep.engine.next_internal_delivery() {
            self.stats_packet(d);
            let _ = self.ep.engine.packet_free(d.packet);
        }
    }

    fn check_failure(&mut self) -> Result<(), Error> {
        match self.take_failure() {
            Some(_) => Err(Error::SendFailure),
            None => Ok(()),
        }
    }

    /// A process that died (a packet to it failed, or it stopped answering the
    /// probes a waiting process sends), once; the calls report it as
    /// `Err(SendFailure)`.
    pub fn take_failure(&mut self) -> Option<NodeId> {
        let f = self.ep.engine.take_packet_failure();
        if f.is_some() {
            self.dead = f;
        }
        f
    }

    /// The last process found dead, if any.
    pub fn failed_process(&self) -> Option<NodeId> {
        self.dead
    }

    /// While the program waits (polls, interrupts), the other processes are probed
    /// now and then: LFC cannot tell whom a receiver waits for, and a dead one must
    /// become an error, not a wait without end.
    fn keepalive(&mut self, now: Instant) {
        if self.started
            && now.saturating_since(self.last_keepalive) >= self.ep.engine.config().keepalive
        {
            self.last_keepalive = now;
            self.ep.engine.keepalive_all(now);
        }
    }

    /// One round of a waiting call: drain, upcalls if allowed, the idle hook.
    fn wait_step(&mut self, upcalls_allowed: bool) -> Result<(), Error> {
        let now = self.ep.clock.now();
        self.keepalive(now);
        let mut busy = self.poll_network_at(now);
        if upcalls_allowed {
            busy |= self.run_upcalls() > 0;
        }
        self.check_failure()?;
        self.idle_step(busy);
        Ok(())
    }

    // -------------------------------------------------------- interrupts

    /// `lfc_intr_disable`: nestable; the outermost call disables interrupts.
    pub fn intr_disable(&mut self) {
        self.intr_depth = self.intr_depth.saturating_add(1);
    }

    /// `lfc_intr_enable`: the outermost call (matching the first disable) enables them.
    pub fn intr_enable(&mut self) {
        self.intr_depth = self.intr_depth.saturating_sub(1);
    }

    /// `lfc_intr_status`: true iff interrupts are enabled.
    pub fn intr_status(&self) -> bool {
        self.intr_depth == 0 && !self.opts.no_intr
    }

    /// Whether an interrupt should be taken now: enabled, and the program has not
    /// polled for `intr_first` (the polling watchdog), nor been interrupted within
    /// `interval`.
    pub fn interrupt_due(&self) -> bool {
        if !self.started || !self.intr_status() {
            return false;
        }
        let now = self.ep.clock.now();
        now.saturating_since(self.last_poll) >= self.opts.intr_first
            && now.saturating_since(self.last_interrupt) >= self.opts.interval
    }

    /// Takes an interrupt: drains the network and makes the upcalls, if one is due.
    /// Returns the number of upcalls.
    pub fn interrupt(&mut self) -> usize {
        if !self.interrupt_due() {
            return 0;
        }
        let now = self.ep.clock.now();
        self.last_interrupt = now;
        self.keepalive(now);
        self.poll_network();
        let n = self.run_upcalls();
        self.stats.interrupts += n as u64;
        n
    }

    // ------------------------------------------------------ timer, atomics

    /// `lfc_timer_start`.
    pub fn timer_start(&mut self) {
        self.timer_start = self.ep.clock.now();
    }
    /// `lfc_timer_stop`.
    pub fn timer_stop(&mut self) {
        self.timer_elapsed = self.ep.clock.now().saturating_since(self.timer_start);
    }
    /// `lfc_timer_elapsed`: microseconds between the last start/stop pair.
    pub fn timer_elapsed(&self) -> f64 {
        self.timer_elapsed.as_micros_f64()
    }
    /// `lfc_timer_delta`: spins for `us` microseconds.
    pub fn timer_delta(&self, us: u32) {
        let end = self.ep.clock.now() + Duration::from_micros(us as u64);
        while self.ep.clock.now() < end {
            core::hint::spin_loop();
        }
    }

    /// `lfc_fetch_and_add`: adds one to process `dest`'s variable and returns the value
    /// before. Drains the network while waiting, with upcalls if allowed.
    pub fn fetch_and_add(&mut self, dest: NodeId, upcalls_allowed: bool) -> Result<u32, Error> {
        self.stats.fetch_adds += 1;
        if self.ep.engine.peer_left(dest) {
            return Err(Error::PeerLeft);
        }
        let group = self.ep.engine.config().group;
        let addr = self.ep.engine.address(group, dest)?;
        if let Some(v) = self
            .ep
            .dev
            .nic_atomics()
            .and_then(|a| a.fetch_add(addr, 0, 1))
        {
            return Ok(v);
        }
        if dest == self.my_proc() {
            return self.ep.engine.fetch_add_local(0, 1);
        }
        let h = loop {
            match self.ep.engine.start_fetch_add(group, dest, 0, 1) {
                Ok(h) => break h,
                Err(Error::NoResources) => self.wait_step(upcalls_allowed)?,
                Err(e) => return Err(e),
            }
        };
        let now = self.ep.clock.now();
        self.ep.engine.poll_transmit(now, &mut self.ep.dev, None);
        loop {
            if let Some(v) = self.ep.engine.fetch_add_result(h)? {
                return Ok(v);
            }
            self.wait_step(upcalls_allowed)?;
        }
    }

    // -------------------------------------------------------- statistics

    /// This process's counters.
    pub fn stats(&self) -> LfcStats {
        let e = self.ep.engine.stats();
        LfcStats {
            tx_frames: e.tx_frames,
            rx_frames: e.rx_frames,
            retransmits: e.retransmits,
            refused: e.rx_refused,
            ..self.stats
        }
    }

    /// `lfc_stats_reset`: a barrier, then every process's counters start over.
    pub fn stats_reset(&mut self) -> Result<(), Error> {
        self.barrier()?;
        self.stats = LfcStats::default();
        self.ep.engine.reset_stats();
        Ok(())
    }

    /// `lfc_stats_create`: a statistics buffer (on process 0); every process calls it
    /// in the same order and gets the same id.
    pub fn stats_create(&mut self) -> Result<i32, Error> {
        if self.stats_buffers >= STATS_BUFFERS {
            return Err(Error::NoResources);
        }
        #[cfg(feature = "alloc")]
        if self.my_proc() == 0 {
            self.stats_rows(self.stats_buffers);
        }
        self.stats_buffers += 1;
        Ok(self.stats_buffers as i32 - 1)
    }

    /// `lfc_stats_gather`: every process's counters into buffer `buf` on process 0,
    /// then a barrier.
    pub fn stats_gather(&mut self, buf: i32) -> Result<(), Error> {
        if buf < 0 || buf as usize >= self.stats_buffers {
            return Err(Error::InvalidHandle);
        }
        let mine = self.stats().to_array();
        if self.my_proc() == 0 {
            self.store_stats(buf as usize, 0, &mine);
            let others = self.nr_procs() as u32 - 1;
            while self.stats_arrivals < others {
                self.wait_step(false)?;
            }
            self.stats_arrivals -= others;
        } else {
            let p = self.send_alloc(false)?;
            let b = self
                .ep
                .engine
                .packet_mut_in(&mut self.ep.dev, p)
                .ok_or(Error::InvalidHandle)?;
            b[..4].copy_from_slice(&(buf as u32).to_le_bytes());
            for (i, v) in mine.iter().enumerate() {
                b[4 + 8 * i..12 + 8 * i].copy_from_slice(&v.to_le_bytes());
            }
            let len = 4 + 8 * LfcStats::COUNT;
            loop {
                match self.ep.engine.launch_internal(p, 0, len) {
                    Ok(()) => break,
                    Err(Error::NoResources) => self.wait_step(false)?,
                    Err(e) => return Err(e),
                }
            }
        }
        self.barrier()
    }

    fn stats_packet(&mut self, d: Delivery) {
        let Some(b) = self.ep.engine.packet_in(&self.ep.dev, d.packet) else {
            return;
        };
        if d.len < 4 + 8 * LfcStats::COUNT {
            return;
        }
        let buf = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let mut v = [0u64; LfcStats::COUNT];
        for (i, x) in v.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[4 + 8 * i..12 + 8 * i]);
            *x = u64::from_le_bytes(w);
        }
        self.store_stats(buf, d.src as usize, &v);
        self.stats_arrivals += 1;
    }

    /// Makes sure buffer `buf` exists on process 0: another process's counters may
    /// arrive before process 0 has created it.
    #[cfg(feature = "alloc")]
    fn stats_rows(&mut self, buf: usize) {
        let n = self.nr_procs() as usize;
        while self.gathered.len() <= buf.min(STATS_BUFFERS - 1) {
            self.gathered.push(alloc::vec![[0; LfcStats::COUNT]; n]);
        }
    }

    #[allow(unused_variables)]
    fn store_stats(&mut self, buf: usize, rank: usize, v: &[u64; LfcStats::COUNT]) {
        #[cfg(feature = "alloc")]
        {
            if buf < STATS_BUFFERS {
                self.stats_rows(buf);
            }
            if let Some(row) = self.gathered.get_mut(buf).and_then(|b| b.get_mut(rank)) {
                *row = *v;
            }
        }
    }

    /// The counters gathered into buffer `buf`, one row per process (process 0 only).
    #[cfg(feature = "alloc")]
    pub fn stats_buffer(&self, buf: i32) -> Option<&[[u64; LfcStats::COUNT]]> {
        self.gathered
            .get(usize::try_from(buf).ok()?)
            .map(|v| &v[..])
    }

    // ---------------------------------------------------------- plumbing

    /// The program's state, shared with upcalls.
    pub fn state(&self) -> &S {
        &self.state
    }
    /// The program's state, mutably.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }
}
