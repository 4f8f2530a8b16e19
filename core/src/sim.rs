//! A deterministic network simulator for tests (`std` only).
//!
//! [`SimNet`] models a switched fabric on a virtual clock: each node's egress link
//! serialises its frames at a fixed bandwidth, then every frame takes a fixed latency.
//! Each node's device is a [`FaultInjector`] around its [`SimPort`], seeded from the
//! run's seed, so a failing run is reproduced by its seed alone. [`Sim`] drives many
//! nodes, jumping the clock from event to event.
//!
//! [`ThreadFabric`] is the other half: a lossless in-memory fabric that threads share,
//! for exercising the blocking API with one thread per node.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use crate::gamma::Gamma;
use crate::phy::{Capabilities, Device, FaultConfig, FaultInjector, RxToken, TxToken};
use crate::time::Clock;
use crate::time::{Duration, Instant};
use crate::NodeAddr;

/// Shape of the simulated fabric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// One-way latency of every frame.
    pub latency: Duration,
    /// Egress bandwidth of each node, bytes per second.
    pub bytes_per_sec: u64,
    /// Largest frame.
    pub mtu: usize,
    /// Faults applied on every node's receive side.
    pub faults: FaultConfig,
    /// Seed of the whole run.
    pub seed: u64,
    /// Each node's device names the sender of every frame and offers compact
    /// headers ([`Capabilities::compact`]), as the Myrinet-like rings do (a fault
    /// injector that breaks frames takes that back, on every node alike).
    pub names_senders: bool,
}

impl SimConfig {
    /// A 10 Gbit/s fabric with 2 us latency, 1500-byte frames and no faults;
    /// its devices name each frame's sender (compact headers) under odd seeds, so
    /// that a sweep of seeds runs both.
    pub fn lan(seed: u64) -> Self {
        SimConfig {
            latency: Duration::from_micros(2),
            bytes_per_sec: 1_250_000_000,
            mtu: 1500,
            faults: FaultConfig::default(),
            seed,
            names_senders: seed & 1 == 1,
        }
    }
}

/// A recorded link (from, to) and the frames sent on it.
type Tap = ((usize, usize), Vec<Vec<u8>>);

/// Arrival, order of sending, sender, bytes.
type Frame = Reverse<(Instant, u64, usize, Vec<u8>)>;

#[derive(Debug)]
struct NetInner {
    inbound: Vec<BinaryHeap<Frame>>,
    link_free: Vec<Instant>,
    order: u64,
    cfg: SimConfig,
    /// Nodes whose frames vanish (a crashed peer): neither sent nor received.
    dead: Vec<bool>,
    /// Links (from, to) whose frames vanish.
    cut: Vec<(usize, usize)>,
    /// Links (from, to) whose frames are recorded, and what they carried.
    taps: Vec<Tap>,
    /// Bursts of loss on every link: of every `.0` frames sent on a link, the
    /// first `.1` vanish; frames sent per link so far.
    bursts: Option<(u32, u32)>,
    sent_on: Vec<u32>,
    /// Whether devices vouch for live nodes ([`SimNet::vouch_for_the_living`]).
    vouch: bool,
}

/// The simulated fabric, shared by the node devices.
#[derive(Debug, Clone)]
pub struct SimNet(Rc<RefCell<NetInner>>);

impl SimNet {
    /// A fabric of `n` nodes.
    pub fn new(n: usize, cfg: SimConfig) -> Self {
        SimNet(Rc::new(RefCell::new(NetInner {
            inbound: (0..n).map(|_| BinaryHeap::new()).collect(),
            link_free: std::vec![Instant::ZERO; n],
            order: 0,
            cfg,
            dead: std::vec![false; n],
            cut: Vec::new(),
            taps: Vec::new(),
            bursts: None,
            sent_on: std::vec![0; n * n],
            vouch: false,
        })))
    }

    /// From now on every node's device vouches for the nodes not killed
    /// ([`crate::phy::Liveness::peer_vouched`]), as a host's beacon does for a process that computes
    /// without calling in: a node that is not polled is then waited for, never
    /// declared dead, while a killed one still is.
    pub fn vouch_for_the_living(&self) {
        self.0.borrow_mut().vouch = true;
    }

    /// Drops every frame node `from` sends to node `to` from now on (one direction).
    pub fn cut(&self, from: usize, to: usize) {
        self.0.borrow_mut().cut.push((from, to));
    }

    /// From now on, on every link (each way), of every `every` frames sent the
    /// first `burst` vanish: bursts of consecutive losses, as a congested switch or
    /// a flapping link makes them.
    pub fn drop_bursts(&self, every: u32, burst: u32) {
        self.0.borrow_mut().bursts = Some((every.max(1), burst));
    }

    /// Records every frame node `from` sends to node `to` from now on (what an
    /// eavesdropper on the link would keep), for [`SimNet::recorded`].
    pub fn tap(&self, from: usize, to: usize) {
        self.0.borrow_mut().taps.push(((from, to), Vec::new()));
    }

    /// The frames recorded on link (`from`, `to`) so far, in the order sent.
    pub fn recorded(&self, from: usize, to: usize) -> Vec<Vec<u8>> {
        let n = self.0.borrow();
        n.taps
            .iter()
            .filter(|(l, _)| *l == (from, to))
            .flat_map(|(_, f)| f.iter().cloned())
            .collect()
    }

    /// Delivers `frame` to node `to` at `at` as if node `from` had sent it (a
    /// replayed or forged frame; `from` is what a device that names senders says).
    pub fn inject(&self, from: usize, to: usize, frame: Vec<u8>, at: Instant) {
        let mut n = self.0.borrow_mut();
        n.order += 1;
        let order = n.order;
        n.inbound[to].push(Reverse((at, order, from, frame)));
    }

    /// Node `i`'s device.
    pub fn port(&self, i: usize) -> SimPort {
        SimPort {
            net: self.clone(),
            me: i,
        }
    }

    /// Crashes node `i`: it stops sending and receiving from now on.
    pub fn kill(&self, i: usize) {
        let mut n = self.0.borrow_mut();
        n.dead[i] = true;
        n.inbound[i].clear();
    }

    /// Ends an outage of node `i` begun by [`SimNet::kill`] (a paused process, a cable
    /// pulled and plugged back): frames flow again; those sent meanwhile are gone.
    pub fn revive(&self, i: usize) {
        self.0.borrow_mut().dead[i] = false;
    }

    /// When the next frame reaches node `i`.
    pub fn next_arrival(&self, i: usize) -> Option<Instant> {
        self.0.borrow().inbound[i].peek().map(|Reverse((t, ..))| *t)
    }
}

/// One node's view of a [`SimNet`].
#[derive(Debug)]
pub struct SimPort {
    net: SimNet,
    me: usize,
}

/// A frame received from the simulator, and its sender where the devices name it.
#[derive(Debug)]
pub struct SimRx(Vec<u8>, Option<NodeAddr>);

/// Room for a frame in the simulator.
#[derive(Debug)]
pub struct SimTx {
    net: SimNet,
    src: usize,
    dst: usize,
    now: Instant,
}

impl RxToken for SimRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
    fn source(&self) -> Option<NodeAddr> {
        self.1
    }
}

impl TxToken for SimTx {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = std::vec![0u8; len];
        let r = f(&mut buf);
        let mut n = self.net.0.borrow_mut();
        if n.dead[self.src] || n.dead[self.dst] || n.cut.contains(&(self.src, self.dst)) {
            return r;
        }
        if let Some((every, burst)) = n.bursts {
            let nodes = n.dead.len();
            let k = &mut n.sent_on[self.src * nodes + self.dst];
            let lost = *k % every < burst;
            *k = k.wrapping_add(1);
            if lost {
                return r;
            }
        }
        let bw = n.cfg.bytes_per_sec.max(1);
        let wire = Duration::from_nanos((len as u64 * 1_000_000_000) / bw);
        let start = n.link_free[self.src].max(self.now);
        let done = start + wire;
        n.link_free[self.src] = done;
        let at = done + n.cfg.latency;
        let link = (self.src, self.dst);
        if let Some((_, f)) = n.taps.iter_mut().find(|(l, _)| *l == link) {
            f.push(buf.clone());
        }
        n.order += 1;
        let order = n.order;
        n.inbound[self.dst].push(Reverse((at, order, self.src, buf)));
        r
    }
}

impl Device for SimPort {
    type RxToken<'a> = SimRx;
    type TxToken<'a> = SimTx;

    fn receive(&mut self, now: Instant) -> Option<SimRx> {
        let mut n = self.net.0.borrow_mut();
        if n.dead[self.me] {
            return None;
        }
        let named = n.cfg.names_senders;
        let q = &mut n.inbound[self.me];
        match q.peek() {
            Some(Reverse((t, ..))) if *t <= now => q
                .pop()
                .map(|Reverse((_, _, src, f))| SimRx(f, named.then_some(NodeAddr(src as u16)))),
            _ => None,
        }
    }

    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<SimTx> {
        let n = self.net.0.borrow();
        if dst.0 as usize >= n.inbound.len() {
            return None;
        }
        Some(SimTx {
            net: self.net.clone(),
            src: self.me,
            dst: dst.0 as usize,
            now,
        })
    }

    fn capabilities(&self) -> Capabilities {
        let cfg = &self.net.0.borrow().cfg;
        Capabilities {
            compact: cfg.names_senders,
            ..Capabilities::new(cfg.mtu, true, true)
        }
    }

    fn liveness(&mut self) -> Option<&mut dyn crate::phy::Liveness> {
        Some(self)
    }
}

impl crate::phy::Liveness for SimPort {
    // The simulator's links tell nothing of liveness; a vouching helper (when the
    // net has one) vouches for every live node.
    fn peer_alive(&mut self, _now: Instant, _peer: NodeAddr) -> bool {
        true
    }

    fn peer_vouched(&mut self, _now: Instant, peer: NodeAddr) -> bool {
        let n = self.net.0.borrow();
        n.vouch && n.dead.get(peer.0 as usize) == Some(&false)
    }
}

/// The virtual clock every simulated node reads.
#[derive(Debug, Clone, Default)]
pub struct SimClock(Rc<Cell<Instant>>);

impl SimClock {
    /// Moves the clock.
    pub fn set(&self, t: Instant) {
        self.0.set(t);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.0.get()
    }
}

/// A simulated node's device: its port behind a seeded fault injector.
pub type SimDevice = FaultInjector<SimPort, 2048>;

/// A GAMMA process inside the simulator.
pub type SimGamma<'a, S> = Gamma<'a, SimDevice, SimClock, S>;

/// When a node whose engine next needs a poll at `poll_at` must run: then, when a
/// held-back frame is released, or when a frame arrives.
fn wake_at(poll_at: Option<Instant>, dev: &SimDevice) -> Option<Instant> {
    let me = dev.inner().me;
    [poll_at, dev.held_until(), dev.inner().net.next_arrival(me)]
        .into_iter()
        .flatten()
        .min()
}

/// Something the simulator can drive.
pub trait SimNode {
    /// Makes progress at the current virtual time; true if anything happened.
    fn poll(&mut self) -> bool;
    /// When the node next needs a poll, frames arriving included.
    fn wake_at(&self) -> Option<Instant>;
}

impl<S> SimNode for SimGamma<'_, S> {
    fn poll(&mut self) -> bool {
        Gamma::poll(self)
    }
    fn wake_at(&self) -> Option<Instant> {
        wake_at(self.poll_at(), self.device())
    }
}

/// An LFC process inside the simulator.
pub type SimLfc<'a, S> = crate::lfc::Lfc<'a, SimDevice, SimClock, S>;

impl<S> SimNode for SimLfc<'_, S> {
    fn poll(&mut self) -> bool {
        // A failed send is the test's to look at (`take_packet_failure`), not the poll's.
        let busy = self.poll_network();
        busy | (self.run_upcalls() > 0)
    }
    fn wake_at(&self) -> Option<Instant> {
        wake_at(self.poll_at(), self.device())
    }
}

/// A Cheetah context inside the simulator, serving memory `M`.
pub type SimCheetah<'a, M> = crate::cheetah::Cheetah<'a, SimDevice, SimClock, M>;

impl<M: crate::engine::Memory> SimNode for SimCheetah<'_, M> {
    fn poll(&mut self) -> bool {
        // Failures wait for the test's next call to the context.
        let busy = self.poll_network();
        busy | (self.run_handlers() > 0)
    }
    fn wake_at(&self) -> Option<Instant> {
        wake_at(self.poll_at(), self.device())
    }
}

/// A QNIX process inside the simulator, reaching memory `M`.
pub type SimQnix<'a, M> = crate::qnix::Qnix<'a, SimDevice, SimClock, M>;

impl<M: crate::engine::Memory> SimNode for SimQnix<'_, M> {
    fn poll(&mut self) -> bool {
        self.step()
    }
    fn wake_at(&self) -> Option<Instant> {
        wake_at(self.poll_at(), self.device())
    }
}

/// A run that did not reach its goal in virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimTimeout {
    /// The seed to reproduce it.
    pub seed: u64,
    /// Virtual time when it gave up.
    pub at: Instant,
}

/// Many nodes on one simulated fabric and one virtual clock.
#[derive(Debug)]
pub struct Sim<N> {
    /// The nodes, indexed by fabric address.
    pub nodes: Vec<N>,
    /// The fabric.
    pub net: SimNet,
    /// The clock.
    pub clock: SimClock,
    seed: u64,
}

impl<N: SimNode> Sim<N> {
    /// `n` nodes made by `make(index, device, clock)`.
    pub fn new(
        n: usize,
        cfg: SimConfig,
        mut make: impl FnMut(usize, SimDevice, SimClock) -> N,
    ) -> Self {
        let net = SimNet::new(n, cfg);
        let clock = SimClock::default();
        let nodes = (0..n)
            .map(|i| {
                let seed = cfg.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                make(
                    i,
                    FaultInjector::new(net.port(i), cfg.faults, seed),
                    clock.clone(),
                )
            })
            .collect();
        Sim {
            nodes,
            net,
            clock,
            seed: cfg.seed,
        }
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Polls the nodes and advances the clock, event to event, until `goal` holds
    /// (checked after every round of polls, and free to start work on the nodes) or
    /// the clock reaches `limit`: then `Err` with the time and the seed. The clock
    /// never jumps past `limit`, so a caller can stop at a chosen time, act, and go on.
    pub fn run_until(
        &mut self,
        limit: Instant,
        mut goal: impl FnMut(&mut [N], Instant) -> bool,
    ) -> Result<Instant, SimTimeout> {
        loop {
            let now = self.clock.now();
            if goal(&mut self.nodes, now) {
                return Ok(now);
            }
            let mut progress = false;
            for n in self.nodes.iter_mut() {
                if n.wake_at().is_some_and(|t| t <= now) {
                    progress |= n.poll();
                }
            }
            if progress {
                continue;
            }
            // Timers may have changed state without sending anything.
            if goal(&mut self.nodes, now) {
                return Ok(now);
            }
            if now >= limit {
                return Err(SimTimeout {
                    seed: self.seed,
                    at: now,
                });
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.wake_at())
                .min()
                .unwrap_or(limit);
            // Nothing more happens at `now`: jump to the next event, at least 1 ns on.
            self.clock
                .set(next.min(limit).max(now + Duration::from_nanos(1)));
        }
    }
}

/// A lossless fabric of in-memory queues that threads share.
#[derive(Debug, Clone)]
pub struct ThreadFabric {
    queues: Arc<Vec<Mutex<VecDeque<Vec<u8>>>>>,
    mtu: usize,
}

impl ThreadFabric {
    /// A fabric of `n` nodes carrying frames of up to `mtu` bytes.
    pub fn new(n: usize, mtu: usize) -> Self {
        ThreadFabric {
            queues: Arc::new((0..n).map(|_| Mutex::new(VecDeque::new())).collect()),
            mtu,
        }
    }

    /// Node `i`'s device.
    pub fn port(&self, i: usize) -> ThreadPort {
        ThreadPort {
            fabric: self.clone(),
            me: i,
        }
    }
}

/// One thread's view of a [`ThreadFabric`].
#[derive(Debug)]
pub struct ThreadPort {
    fabric: ThreadFabric,
    me: usize,
}

/// Room for a frame on a [`ThreadFabric`].
#[derive(Debug)]
pub struct ThreadTx<'a> {
    fabric: &'a ThreadFabric,
    dst: usize,
}

impl TxToken for ThreadTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = std::vec![0u8; len.min(self.fabric.mtu)];
        let r = f(&mut buf);
        if let Ok(mut q) = self.fabric.queues[self.dst].lock() {
            q.push_back(buf);
        }
        r
    }
}

impl Device for ThreadPort {
    type RxToken<'a> = SimRx;
    type TxToken<'a> = ThreadTx<'a>;

    fn receive(&mut self, _now: Instant) -> Option<SimRx> {
        self.fabric.queues[self.me]
            .lock()
            .ok()?
            .pop_front()
            .map(|f| SimRx(f, None))
    }

    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<ThreadTx<'_>> {
        let dst = dst.0 as usize;
        (dst < self.fabric.queues.len()).then_some(ThreadTx {
            fabric: &self.fabric,
            dst,
        })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(self.fabric.mtu, true, true)
    }
}

/// Two engines, instances 0 and 1 of group 1, set up to move one reliable message
/// from instance 0's port 0 to instance 1's port 1 (which keeps it in `received`)
/// over any pair of devices: the drivers' common test harness.
#[derive(Debug)]
pub struct Pair {
    /// Instance 0, the sender.
    pub a: crate::engine::Engine<'static>,
    /// Instance 1, the receiver.
    pub b: crate::engine::Engine<'static>,
    /// The last message `b` received.
    pub received: Vec<u8>,
}

impl Pair {
    /// The two engines, with `eager` eager buffers each and a receive buffer of `max_len`.
    pub fn new(job_key: u32, eager: usize, max_len: usize) -> Pair {
        use crate::engine::{
            Capacity, Config, Dest, Engine, Fill, Group, Members, PortSetup, Storage,
        };
        static GROUPS: &[Group<'static>] = &[Group {
            id: 1,
            members: Members::Range { first: 0, count: 2 },
        }];
        let cap = Capacity {
            ports: 4,
            channels: 2,
            fabric_nodes: 2,
            ops: 4,
            assemblies: 2,
            eager,
        };
        let engine = |node| {
            Engine::new(
                Config::new(job_key, 1, node),
                GROUPS,
                Storage::with_capacity(cap),
            )
            .expect("a valid two-node configuration")
        };
        let (mut a, mut b) = (engine(0), engine(1));
        let out = PortSetup {
            dest: Some(Dest {
                group: 1,
                node: 1,
                port: 1,
            }),
            input: false,
            recv: false,
            err: false,
            sem: 0,
            kind: Fill::Restart,
            buffer: None,
        };
        a.bind_port(0, out).expect("port 0 binds");
        let input = PortSetup {
            dest: None,
            input: true,
            recv: true,
            err: false,
            sem: 0,
            kind: Fill::Restart,
            buffer: Some(Vec::leak(std::vec![0u8; max_len])),
        };
        b.bind_port(1, input).expect("port 1 binds");
        Pair {
            a,
            b,
            received: Vec::new(),
        }
    }

    /// Keeps the last message `b`'s notices report (call after each of `b`'s polls).
    pub fn take_notices(&mut self) {
        while let Some((n, view)) = self.b.next_notice() {
            self.received = view.data(&n).to_vec();
        }
    }

    /// Sends `msg` reliably and polls: `a` over `da`, `b` over `db`, then `between`
    /// (a model of the wire or of the NICs), `step` of virtual time per round, for at
    /// most `rounds` rounds. True once the send has completed.
    pub fn transfer<DA: Device, DB: Device>(
        &mut self,
        msg: &'static [u8],
        da: &mut DA,
        db: &mut DB,
        mut between: impl FnMut(&mut DA, &mut DB),
        rounds: usize,
        step: Duration,
    ) -> bool {
        use crate::engine::{Body, SendRequest, SendStatus};
        let h = self
            .a
            .start_send(SendRequest {
                port: 0,
                head: b"",
                body: Body::Borrowed(msg),
                reliable: true,
            })
            .expect("the send starts");
        let mut now = Instant::ZERO;
        for _ in 0..rounds {
            self.a.poll(now, da, None);
            self.b.poll(now, db, None);
            self.take_notices();
            between(da, db);
            if self.a.send_status(h) == Ok(SendStatus::Done) {
                return true;
            }
            now += step;
        }
        false
    }
}
