//! Engine unit tests over the in-memory loopback (a reliable link) and through the
//! fault injector (a lossy one). The multi-node, seeded runs live in `tests/sim.rs`.

use std::vec::Vec;

use super::*;
use crate::phy::{Device, Loopback, Ring, RxToken};

const G: &[Group<'static>] = &[
    Group {
        id: 7,
        members: Members::Range { first: 0, count: 3 },
    },
    Group {
        id: 9,
        members: Members::Range { first: 3, count: 1 },
    },
];

type Log = Vec<(PortId, Vec<u8>, Option<Fault>, NodeId)>;
type Rings = Vec<Ring<64, 512>>;

/// A send request: the arguments in the order a send call takes them.
fn req<'a, 'c>(
    port: PortId,
    head: &'c [u8],
    body: Body<'a, 'c>,
    reliable: bool,
) -> SendRequest<'a, 'c> {
    SendRequest {
        port,
        head,
        body,
        reliable,
    }
}

/// An engine and the log of the notices it raised, as a personality's handlers
/// would see them: taken after every call that can raise one.
struct TE {
    e: Engine<'static>,
    log: Log,
}

impl core::ops::Deref for TE {
    type Target = Engine<'static>;
    fn deref(&self) -> &Engine<'static> {
        &self.e
    }
}

impl core::ops::DerefMut for TE {
    fn deref_mut(&mut self) -> &mut Engine<'static> {
        &mut self.e
    }
}

impl TE {
    fn new(e: Engine<'static>) -> TE {
        TE { e, log: Vec::new() }
    }
    fn state(&self) -> &Log {
        &self.log
    }
    fn record(&mut self) {
        while let Some((n, view)) = self.e.next_notice() {
            let entry = (n.port, view.data(&n).to_vec(), n.fault, n.src.src_node);
            self.log.push(entry);
        }
    }
    fn poll<D: Device>(&mut self, now: Instant, dev: &mut D, ext: Option<&[u8]>) -> bool {
        let busy = self.e.poll(now, dev, ext);
        self.record();
        busy
    }
    fn handle_frame(&mut self, now: Instant, frame: Received<'_>, mem: &mut dyn Memory) {
        self.e.handle_frame(now, frame, mem);
        self.record();
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.e.handle_timeout(now);
        self.record();
    }
}

fn cap() -> Capacity {
    Capacity {
        ports: 16,
        channels: 8,
        fabric_nodes: 8,
        ops: 16,
        assemblies: 4,
        eager: 4,
    }
}

fn engine(group: GroupId, node: NodeId) -> TE {
    let mut cfg = Config::new(0xAB, group, node);
    cfg.rto_initial = Duration::from_micros(50);
    cfg.rto_max = Duration::from_micros(400);
    cfg.peer_timeout = Duration::from_millis(2);
    TE::new(Engine::new(cfg, G, Storage::with_capacity(cap())).unwrap())
}

fn out(dest_node: NodeId, port: PortId) -> PortSetup<'static> {
    PortSetup {
        dest: Some(Dest {
            group: 7,
            node: dest_node,
            port,
        }),
        input: false,
        recv: false,
        err: false,
        sem: 0,
        kind: Fill::Restart,
        buffer: None,
    }
}

fn input(buf: &'static mut [u8], kind: Fill, sem: u16) -> PortSetup<'static> {
    PortSetup {
        dest: None,
        input: true,
        recv: true,
        err: true,
        sem,
        kind,
        buffer: Some(buf),
    }
}

fn leak(n: usize) -> &'static mut [u8] {
    Vec::leak(std::vec![0u8; n])
}

/// Polls every engine over the loopback rings until `done` or 10,000 rounds.
fn run(es: &mut [&mut TE], rings: &mut Rings, done: impl FnMut(&[&mut TE]) -> bool) {
    run_on(es, rings, false, done)
}

/// [`run`] on loopback rings that name each frame's sender (`vouching`): short
/// messages travel compact there.
fn run_on(
    es: &mut [&mut TE],
    rings: &mut Rings,
    vouching: bool,
    mut done: impl FnMut(&[&mut TE]) -> bool,
) {
    let mut now = Instant::ZERO;
    for _ in 0..10_000 {
        for e in es.iter_mut() {
            let me = NodeAddr(e.config().node + if e.config().group == 9 { 3 } else { 0 });
            let mut dev = if vouching {
                Loopback::vouching(rings, me)
            } else {
                Loopback::new(rings, me)
            };
            e.poll(now, &mut dev, None);
        }
        if done(es) {
            return;
        }
        now += Duration::from_micros(10);
    }
    panic!("no progress");
}

fn rings() -> Rings {
    (0..4).map(|_| Ring::new()).collect()
}

/// Node `node` of group 7 with packet pools (4 send, 4 receive), under `key`.
fn packet_engine(node: NodeId, key: Option<wire::AuthKey>) -> TE {
    let mut cfg = Config::new(0xAB, 7, node);
    cfg.auth_key = key;
    cfg.peer_timeout = Duration::from_millis(2);
    let st = Storage::with_capacity(cap()).with_packets(4, 4, 1, 4);
    TE::new(Engine::new(cfg, G, st).unwrap())
}

/// Node `n`'s view of `rings`.
fn view(rings: &mut Rings, n: u16) -> Loopback<'_, 64, 512> {
    Loopback::new(rings, NodeAddr(n))
}

#[test]
fn reliable_message_lands_in_buffer_and_runs_handler() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(4000), Fill::Restart, 3)).unwrap();
    let msg: &'static [u8] = Vec::leak((0..3000u32).map(|i| i as u8).collect());
    let h = a
        .start_send(req(1, b"hdr", Body::Borrowed(msg), true))
        .unwrap();
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[1].state().len() == 1 && es[0].send_status(h) == Ok(SendStatus::Done)
    });
    let (port, data, fault, src) = &b.state()[0];
    assert_eq!((*port, *fault, *src), (2, None, 0));
    assert_eq!(&data[..3], b"hdr");
    assert_eq!(&data[3..], msg);
    assert_eq!(b.ports().semaphore(3).unwrap().count, 1);
    assert_eq!(b.try_take(3, 1), Ok(Some(0)));
    assert_eq!(a.release(h), Ok(SendStatus::Done));
    assert_eq!(a.send_status(h), Err(Error::InvalidHandle));
    assert!(a.stats().tx_frames >= 7, "3003 bytes over a 512-byte MTU");
    assert_eq!(a.stats().retransmits, 0, "nothing is lost on a loopback");
}

#[test]
fn go_ahead_gathers_and_truncation_reports_msgtoolong() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(10), Fill::Append, 0)).unwrap();
    for m in [&b"abcd"[..], b"efgh", b"ijkl"] {
        let h = a.start_send(req(1, m, Body::Borrowed(&[]), true)).unwrap();
        run(&mut [&mut a, &mut b], &mut rings, |es| {
            es[0].send_status(h) != Ok(SendStatus::Pending)
        });
        a.release(h).unwrap();
    }
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[1].state().len() == 3
    });
    let log = b.state();
    assert_eq!((log[0].1.as_slice(), log[0].2), (&b"abcd"[..], None));
    assert_eq!((log[1].1.as_slice(), log[1].2), (&b"efgh"[..], None));
    assert_eq!(
        (log[2].1.as_slice(), log[2].2),
        (&b"ij"[..], Some(Fault::Truncated))
    );
    assert_eq!(b.ports().buffer(2).unwrap(), b"abcdefghij");
    // The buffer stays filled until a fresh one is posted.
    let h = a
        .start_send(req(1, b"zz", Body::Borrowed(&[]), true))
        .unwrap();
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[1].state().len() == 4 && es[0].send_status(h) == Ok(SendStatus::Done)
    });
    assert_eq!(b.state()[3].2, Some(Fault::Truncated));
    assert!(b.state()[3].1.is_empty());
    assert_eq!(a.release(h), Ok(SendStatus::Done));
    let old = b.ports_mut().post_recv(2, leak(4)).unwrap().unwrap();
    assert_eq!(&old[..], b"abcdefghij");
}

#[test]
fn unbound_port_refuses_until_bound_then_delivers() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 5)).unwrap();
    let h = a
        .start_send(req(1, b"early", Body::Borrowed(&[]), true))
        .unwrap();
    let mut now = Instant::ZERO;
    // Long enough for many timeouts: refusals must not count as a dead peer.
    for _ in 0..2_000 {
        a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        b.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
        now += Duration::from_micros(10);
    }
    assert_eq!(a.send_status(h), Ok(SendStatus::Pending));
    assert!(b.stats().rx_refused > 0);
    b.bind_port(5, input(leak(8), Fill::Restart, 0)).unwrap();
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[0].send_status(h) == Ok(SendStatus::Done)
    });
    assert_eq!(b.state()[0].1, b"early");
}

#[test]
fn dead_peer_fails_send_and_runs_error_handler() {
    let mut rings = rings();
    let mut a = engine(7, 0);
    let mut setup = out(1, 2);
    setup.err = true;
    setup.sem = 4;
    a.bind_port(1, setup).unwrap();
    let h = a
        .start_send(req(1, b"x", Body::Borrowed(&[]), true))
        .unwrap();
    let mut now = Instant::ZERO;
    // Node 1 never polls.
    while a.send_status(h) == Ok(SendStatus::Pending) {
        a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        rings[1] = Ring::new();
        now += Duration::from_micros(10);
        assert!(now < Instant::from_millis(100), "no failure reported");
    }
    assert_eq!(a.send_status(h), Ok(SendStatus::Failed));
    assert_eq!(a.state()[0].2, Some(Fault::SendFailed));
    assert_eq!(a.stats().peers_failed, 1, "{:?}", a.stats());
    // Later sends to it fail at once.
    let h2 = a
        .start_send(req(1, b"y", Body::Borrowed(&[]), true))
        .unwrap();
    assert_eq!(a.send_status(h2), Ok(SendStatus::Failed));
}

/// A peer not heard from yet gets `first_contact`, not `peer_timeout`: one that
/// starts late is waited for, one that never starts fails after the longer time,
/// and once heard from, its silence counts against `peer_timeout` again.
#[test]
fn a_peer_never_heard_from_gets_the_first_contact_grace() {
    let start = |first_contact_ms: u64| {
        let mut a = engine(7, 0);
        a.e.cfg.first_contact = Duration::from_millis(first_contact_ms);
        a.bind_port(1, out(1, 2)).unwrap();
        a
    };
    // Node 1 starts after 10 ms, five times `peer_timeout`.
    let mut rings = rings();
    let (mut a, mut b) = (start(20), engine(7, 1));
    b.bind_port(2, input(leak(64), Fill::Restart, 3)).unwrap();
    let h = a
        .start_send(req(1, b"early", Body::Borrowed(&[]), true))
        .unwrap();
    let mut now = Instant::ZERO;
    while a.send_status(h) == Ok(SendStatus::Pending) {
        a.poll(now, &mut view(&mut rings, 0), None);
        if now >= Instant::from_millis(10) {
            b.poll(now, &mut view(&mut rings, 1), None);
        } else {
            rings[1] = Ring::new();
        }
        now += Duration::from_micros(10);
        assert!(now < Instant::from_millis(100), "never done");
    }
    assert_eq!(a.send_status(h), Ok(SendStatus::Done), "{:?}", a.stats());
    assert!(now > Instant::from_millis(10));
    assert_eq!(b.state()[0].1, b"early");
    let alive = PeerStatus {
        heard_from: true,
        failed: false,
    };
    assert_eq!(a.peer_status(1), alive);
    // Now that it has been heard from, 2 ms of silence is death.
    let h = a
        .start_send(req(1, b"late", Body::Borrowed(&[]), true))
        .unwrap();
    let silent_from = now;
    while a.send_status(h) == Ok(SendStatus::Pending) {
        a.poll(now, &mut view(&mut rings, 0), None);
        rings[1] = Ring::new();
        now += Duration::from_micros(10);
        assert!(now < silent_from + Duration::from_millis(10), "no failure");
    }
    assert_eq!(a.send_status(h), Ok(SendStatus::Failed));
    let silent = PeerStatus {
        heard_from: true,
        failed: true,
    };
    assert_eq!(a.peer_status(1), silent);

    // A node that never starts fails once the grace is over, not before.
    let mut rings = self::rings();
    let mut a = start(20);
    // Nothing exchanged yet; node 9 is no member.
    assert_eq!(a.peer_status(1), PeerStatus::default());
    assert_eq!(a.peer_status(9), PeerStatus::default());
    let h = a
        .start_send(req(1, b"x", Body::Borrowed(&[]), true))
        .unwrap();
    let mut now = Instant::ZERO;
    while a.send_status(h) == Ok(SendStatus::Pending) {
        a.poll(now, &mut view(&mut rings, 0), None);
        rings[1] = Ring::new();
        now += Duration::from_micros(10);
        assert!(now < Instant::from_millis(100), "no failure reported");
    }
    assert_eq!(a.send_status(h), Ok(SendStatus::Failed));
    assert!(now >= Instant::from_millis(20), "failed after {now}");
    let never = PeerStatus {
        heard_from: false,
        failed: true,
    };
    assert_eq!(a.peer_status(1), never);
}

#[test]
fn api_misuse_is_a_typed_error() {
    let mut a = engine(7, 0);
    assert_eq!(a.bind_port(1, out(0, 2)), Err(Error::SelfConnect));
    assert_eq!(a.bind_port(99, out(1, 2)), Err(Error::InvalidPort));
    assert_eq!(a.bind_port(1, out(7, 2)), Err(Error::UnknownNode));
    let mut bad = out(1, 2);
    bad.sem = 999;
    assert_eq!(a.bind_port(1, bad), Err(Error::InvalidSemaphore));
    let mut other = out(0, 2);
    other.dest = Some(Dest {
        group: 55,
        node: 0,
        port: 1,
    });
    assert_eq!(a.bind_port(1, other), Err(Error::UnknownGroup));
    assert_eq!(
        a.start_send(req(3, b"", Body::Borrowed(&[]), true)),
        Err(Error::NotBound)
    );
    a.bind_port(1, out(1, 2)).unwrap();
    assert_eq!(
        a.start_send(req(1, &[0; 21], Body::Borrowed(&[]), true)),
        Err(Error::FirstPieceTooLong)
    );
    for _ in 0..16 {
        a.start_send(req(1, b"", Body::Borrowed(&[]), true))
            .unwrap();
    }
    assert_eq!(
        a.start_send(req(1, b"", Body::Borrowed(&[]), true)),
        Err(Error::NoResources)
    );
    assert_eq!(
        a.send_status(SendHandle::from_raw(0xFFFF_0000)),
        Err(Error::InvalidHandle)
    );
    a.start_barrier().unwrap();
    assert_eq!(a.start_barrier(), Err(Error::BarrierInProgress));
    assert_eq!(a.ports_mut().attach_buffer(1, leak(1)), Ok(None));
    a.ports_mut().post_recv(1, leak(8)).unwrap();
    assert_eq!(
        a.ports_mut().attach_buffer(1, leak(4)),
        Err(Error::BufferTooSmall)
    );
    let bad_cfg = Config::new(1, 7, 3);
    assert!(Engine::new(bad_cfg, G, Storage::with_capacity(cap())).is_err());
}

#[test]
fn inter_group_send_and_foreign_frames() {
    let mut rings = rings();
    let (mut a, mut c) = (engine(7, 0), engine(9, 0));
    a.bind_port(
        1,
        PortSetup {
            dest: Some(Dest {
                group: 9,
                node: 0,
                port: 4,
            }),
            ..out(1, 1)
        },
    )
    .unwrap();
    c.bind_port(4, input(leak(16), Fill::Restart, 0)).unwrap();
    let h = a
        .start_send(req(1, b"to group 9", Body::Borrowed(&[]), true))
        .unwrap();
    run(&mut [&mut a, &mut c], &mut rings, |es| {
        es[0].send_status(h) == Ok(SendStatus::Done)
    });
    assert_eq!(
        (c.state()[0].1.as_slice(), c.state()[0].3),
        (&b"to group 9"[..], 0)
    );
    // A frame of another job is dropped and counted.
    let mut other =
        TE::new(Engine::new(Config::new(0xCD, 7, 0), G, Storage::with_capacity(cap())).unwrap());
    other
        .bind_port(
            1,
            PortSetup {
                dest: Some(Dest {
                    group: 9,
                    node: 0,
                    port: 4,
                }),
                ..out(1, 1)
            },
        )
        .unwrap();
    other
        .start_send(req(1, b"intruder", Body::Borrowed(&[]), false))
        .unwrap();
    other.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    c.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(3)),
        None,
    );
    assert_eq!(c.state().len(), 1);
    assert_eq!(c.stats().rx_foreign_job, 1);
}

#[test]
fn best_effort_loss_is_reported_as_framelost() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(4096), Fill::Restart, 0)).unwrap();
    let msg: &'static [u8] = Vec::leak(std::vec![7u8; 2000]);
    let h = a
        .start_send(req(1, b"", Body::Borrowed(msg), false))
        .unwrap();
    a.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    assert_eq!(
        a.send_status(h),
        Ok(SendStatus::Done),
        "best effort completes when sent"
    );
    assert_eq!(rings[1].len(), 5);
    // Lose the second fragment.
    {
        let mut lb = Loopback::new(&mut rings, NodeAddr(1));
        let first = lb.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
        lb.receive(Instant::ZERO).unwrap().consume(|_| ());
        b.handle_frame(Instant::ZERO, Received::from(&first[..]), &mut NoMemory);
    }
    b.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(1)),
        None,
    );
    assert_eq!(b.state().len(), 1);
    assert_eq!(b.state()[0].2, Some(Fault::Lost));
    assert_eq!(b.stats().delivered, 0);
    // A partial message alone is reported once its reassembly times out.
    let h = a
        .start_send(req(1, b"", Body::Borrowed(msg), false))
        .unwrap();
    a.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    a.release(h).unwrap();
    let first = Loopback::new(&mut rings, NodeAddr(1))
        .receive(Instant::ZERO)
        .unwrap()
        .consume(|f| f.to_vec());
    rings[1] = Ring::new();
    b.handle_frame(Instant::ZERO, Received::from(&first[..]), &mut NoMemory);
    b.handle_timeout(Instant::from_millis(50));
    assert_eq!(b.state().len(), 1);
    b.handle_timeout(Instant::from_millis(200));
    assert_eq!(b.state().len(), 2);
    assert_eq!(b.state()[1].2, Some(Fault::Lost));
}

/// Three members of group 7: member 0 broadcasts from port 1 to port 2, which
/// the others bind for input (64-byte GO_BACK buffers).
fn broadcast_group() -> Vec<TE> {
    let mut es: Vec<TE> = (0..3).map(|i| engine(7, i)).collect();
    es[0].bind_port(1, out(BROADCAST, 2)).unwrap();
    for e in es.iter_mut().skip(1) {
        e.bind_port(2, input(leak(64), Fill::Restart, 0)).unwrap();
    }
    es
}

#[test]
fn broadcast_and_barrier() {
    let mut rings = rings();
    let mut es = broadcast_group();
    let h = es[0]
        .start_send(req(1, b"all", Body::Borrowed(&[]), true))
        .unwrap();
    for e in es.iter_mut().skip(1) {
        e.start_barrier().unwrap();
    }
    let mut refs: Vec<&mut TE> = es.iter_mut().collect();
    // Two of three arrived: nobody may leave.
    for _ in 0..100 {
        run(&mut refs, &mut rings, |_| true);
    }
    assert!(refs.iter().skip(1).all(|e| e.barrier_done() == Ok(false)));
    refs[0].start_barrier().unwrap();
    run(&mut refs, &mut rings, |es| {
        es.iter().all(|e| e.barrier_done() == Ok(true))
            && es[0].send_status(h) == Ok(SendStatus::Done)
    });
    for e in &es[1..] {
        assert_eq!(e.state().len(), 1, "exactly once");
        assert_eq!(e.state()[0].1, b"all");
        assert_eq!(e.stats().barriers, 1);
    }
}

/// A barrier waiting for a member that is still starting asks it whether it is
/// alive once at a time, however often its probe period comes round: probes do
/// not pile up in the window to be resent at every timeout. The late member then
/// completes the barrier with the others.
#[test]
fn a_barrier_waiting_for_a_late_member_does_not_pile_up_probes() {
    let mut rings = rings();
    let mut es: Vec<TE> = (0..3)
        .map(|i| {
            let mut e = engine(7, i);
            e.e.cfg.first_contact = Duration::from_millis(100);
            e.e.cfg.barrier_probe = Duration::from_micros(100);
            e
        })
        .collect();
    for e in es.iter_mut() {
        e.start_barrier().unwrap();
    }
    // Node 2 starts after 20 ms: 200 probe periods.
    let mut now = Instant::ZERO;
    while now < Instant::from_millis(20) {
        for (i, e) in es.iter_mut().enumerate().take(2) {
            e.poll(now, &mut view(&mut rings, i as u16), None);
        }
        rings[2] = Ring::new();
        now += Duration::from_micros(10);
    }
    for e in &es[..2] {
        assert_eq!(e.barrier_done(), Ok(false));
        // One frame in flight to it (a probe, or node 1's token, which asks the
        // same), however many periods passed: not a window full, each resent at
        // every timeout.
        let ch = e.e.chans.iter().find(|c| c.in_use && c.peer_node == 2);
        let ch = ch.expect("a channel to node 2");
        assert_eq!(ch.outstanding() + ch.ctrl_len as u32, 1, "{:?}", e.stats());
    }
    while es.iter().any(|e| e.barrier_done() != Ok(true)) {
        for (i, e) in es.iter_mut().enumerate() {
            e.poll(now, &mut view(&mut rings, i as u16), None);
        }
        now += Duration::from_micros(10);
        assert!(now < Instant::from_millis(40), "barrier never completed");
    }
    assert!(es.iter().all(|e| e.stats().barriers == 1));
}

/// A and C, each with port 1 bound to B's GO_BACK port 2 (2000 bytes): the
/// senders and receiver of the refusal tests.
fn refusal_trio() -> (TE, TE, TE) {
    let (mut a, mut b, mut c) = (engine(7, 0), engine(7, 1), engine(7, 2));
    a.bind_port(1, out(1, 2)).unwrap();
    c.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(2000), Fill::Restart, 0)).unwrap();
    (a, b, c)
}

#[test]
fn a_refused_sender_is_told_to_retry_when_the_port_frees() {
    let mut rings = rings();
    let (mut a, mut b, mut c) = refusal_trio();
    let ma: &'static [u8] = Vec::leak(std::vec![0xA; 1500]);
    let mc: &'static [u8] = Vec::leak(std::vec![0xC; 1500]);
    // B learns its device's capabilities (no CRC on a loopback) on its first poll.
    b.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(1)),
        None,
    );
    let ha = a.start_send(req(1, b"", Body::Borrowed(ma), true)).unwrap();
    let hc = c.start_send(req(1, b"", Body::Borrowed(mc), true)).unwrap();
    a.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    c.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(2)),
        None,
    );
    let mut frames = Vec::new();
    while let Some(t) = Loopback::new(&mut rings, NodeAddr(1)).receive(Instant::ZERO) {
        frames.push(t.consume(|f| f.to_vec()));
    }
    assert_eq!(frames.len(), 8);
    // Interleave: A0, C0 (port busy: refused), A1..A3 (A completes), C1..C3.
    for i in [0, 4, 1, 2, 3, 5, 6, 7] {
        b.handle_frame(Instant::ZERO, Received::from(&frames[i][..]), &mut NoMemory);
    }
    assert_eq!(b.stats().rx_refused, 1);
    let mut now = Instant::ZERO;
    // Well within one retransmission timeout (50 us).
    for _ in 0..20 {
        for (e, addr) in [(&mut a, 0), (&mut b, 1), (&mut c, 2)] {
            e.poll(now, &mut Loopback::new(&mut rings, NodeAddr(addr)), None);
        }
        now += Duration::from_nanos(500);
    }
    assert_eq!(c.stats().timeouts, 0);
    assert!(c.stats().retransmits >= 1);
    assert_eq!(a.send_status(ha), Ok(SendStatus::Done));
    assert_eq!(c.send_status(hc), Ok(SendStatus::Done));
    let got: Vec<(u8, usize)> = b.state().iter().map(|e| (e.1[0], e.1.len())).collect();
    assert_eq!(got, [(0xA, 1500), (0xC, 1500)]);
    assert!(
        b.state()[1].1.iter().all(|&x| x == 0xC),
        "no byte of A left in C's message"
    );
}

/// A refusal and the RETRY that follows it count even on a frame whose ack says
/// nothing new (a one-frame message refused while nothing else is in flight: the
/// receiver's ack neither advances nor carries a selective bit): the sender waits
/// for the RETRY instead of its timer and sends again at once.
#[test]
fn a_refusal_with_nothing_new_in_its_ack_still_holds_and_wakes_the_sender() {
    let mut rings = rings();
    let (mut a, mut b, mut c) = refusal_trio();
    let ma: &'static [u8] = Vec::leak(std::vec![0xA; 1500]);
    let mc: &'static [u8] = Vec::leak(std::vec![0xC; 100]);
    b.poll(Instant::ZERO, &mut view(&mut rings, 1), None);
    let ha = a.start_send(req(1, b"", Body::Borrowed(ma), true)).unwrap();
    let hc = c.start_send(req(1, b"", Body::Borrowed(mc), true)).unwrap();
    a.poll(Instant::ZERO, &mut view(&mut rings, 0), None);
    c.poll(Instant::ZERO, &mut view(&mut rings, 2), None);
    let mut frames = Vec::new();
    while let Some(t) = view(&mut rings, 1).receive(Instant::ZERO) {
        frames.push(t.consume(|f| f.to_vec()));
    }
    assert_eq!(frames.len(), 5);
    // A0, then C's only frame (the port is busy with A's message: refused), then
    // A1..A3.
    b.handle_frame(Instant::ZERO, Received::from(&frames[0][..]), &mut NoMemory);
    b.handle_frame(Instant::ZERO, Received::from(&frames[4][..]), &mut NoMemory);
    assert_eq!(b.stats().rx_refused, 1);
    b.poll(Instant::ZERO, &mut view(&mut rings, 1), None);
    // C takes the refusal: its ack says nothing new.
    c.poll(Instant::ZERO, &mut view(&mut rings, 2), None);
    assert!(
        c.chans[c.chans.peer_map[1] as usize].refused,
        "held by the refusal"
    );
    for f in &frames[1..4] {
        b.handle_frame(Instant::ZERO, Received::from(&f[..]), &mut NoMemory);
    }
    let mut now = Instant::ZERO;
    // Well within one retransmission timeout (50 us).
    for _ in 0..20 {
        for (e, addr) in [(&mut a, 0), (&mut b, 1), (&mut c, 2)] {
            e.poll(now, &mut view(&mut rings, addr), None);
        }
        now += Duration::from_nanos(500);
    }
    assert_eq!(c.stats().timeouts, 0);
    assert_eq!(c.stats().retransmits, 1, "sent again on the RETRY");
    assert_eq!(a.send_status(ha), Ok(SendStatus::Done));
    assert_eq!(c.send_status(hc), Ok(SendStatus::Done));
    let got: Vec<(u8, usize)> = b.state().iter().map(|e| (e.1[0], e.1.len())).collect();
    assert_eq!(got, [(0xA, 1500), (0xC, 100)]);
}

/// A loopback with what some devices add: a liveness word that says node 1 is gone
/// (`dead_1`), frames of 100 payload bytes or more taken as parts
/// ([`Device::transmit_parts`], joined here and counted in `gathered`; the most
/// non-empty parts of one frame in `most_parts`).
/// With `barrier_done_at > 0`, a barrier of its own that answers `Done` at that call.
/// `asked` counts the calls for its capabilities.
struct Special<'r> {
    lo: Loopback<'r, 64, 512>,
    asked: core::cell::Cell<u32>,
    dead_1: bool,
    gather: bool,
    gathered: usize,
    most_parts: usize,
    barrier_calls: u32,
    barrier_done_at: u32,
}

impl<'r> Special<'r> {
    fn new(lo: Loopback<'r, 64, 512>) -> Self {
        Special {
            lo,
            asked: core::cell::Cell::new(0),
            dead_1: false,
            gather: false,
            gathered: 0,
            most_parts: 0,
            barrier_calls: 0,
            barrier_done_at: 0,
        }
    }
}

impl Device for Special<'_> {
    type RxToken<'a>
        = <Loopback<'static, 64, 512> as Device>::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = <Loopback<'static, 64, 512> as Device>::TxToken<'a>
    where
        Self: 'a;
    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
        self.lo.receive(now)
    }
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>> {
        self.lo.transmit(now, dst)
    }
    fn capabilities(&self) -> crate::phy::Capabilities {
        self.asked.set(self.asked.get() + 1);
        self.lo.capabilities()
    }
    fn gather_from(&self) -> usize {
        if self.gather {
            100
        } else {
            usize::MAX
        }
    }
    fn liveness(&mut self) -> Option<&mut dyn crate::phy::Liveness> {
        Some(self)
    }
    fn nic_barrier(&mut self) -> Option<&mut dyn crate::phy::NicBarrier> {
        (self.barrier_done_at > 0).then_some(self as &mut dyn crate::phy::NicBarrier)
    }
    fn transmit_parts(&mut self, now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        use crate::phy::TxToken;
        let len = parts.iter().map(|p| p.len()).sum();
        let Some(tok) = self.lo.transmit(now, dst) else {
            return false;
        };
        tok.consume(len, |b| {
            let mut at = 0;
            for p in parts {
                b[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
        });
        self.gathered += 1;
        let n = parts.iter().filter(|p| !p.is_empty()).count();
        self.most_parts = self.most_parts.max(n);
        true
    }
}

impl crate::phy::Liveness for Special<'_> {
    fn peer_alive(&mut self, _now: Instant, peer: NodeAddr) -> bool {
        !(self.dead_1 && peer == NodeAddr(1))
    }
}

impl crate::phy::NicBarrier for Special<'_> {
    fn barrier(
        &mut self,
        _now: Instant,
        _members: &crate::phy::BarrierMembers<'_>,
    ) -> crate::phy::BarrierPoll {
        use crate::phy::BarrierPoll;
        self.barrier_calls += 1;
        if self.barrier_calls >= self.barrier_done_at {
            BarrierPoll::Done
        } else {
            BarrierPoll::Pending
        }
    }
}

/// A member that completes the device's barrier and exits at once looks dead to a
/// member that saw the barrier still pending a moment before: one more look at the
/// barrier tells that finished barrier from one a dead member fails.
#[test]
fn a_member_that_left_a_finished_device_barrier_does_not_fail_it() {
    for (done_at, want) in [(2, Ok(true)), (3, Err(Error::SendFailure))] {
        let mut rings = rings();
        let mut a = engine(7, 0);
        a.set_device_barrier(true).unwrap();
        let mut dev = Special {
            dead_1: true,
            barrier_done_at: done_at,
            ..Special::new(Loopback::new(&mut rings, NodeAddr(0)))
        };
        a.start_barrier().unwrap();
        // Past the probe interval: the first pending look checks the members.
        a.poll(Instant::from_millis(100), &mut dev, None);
        assert_eq!(a.barrier_done(), want, "done at call {done_at}");
        let device = u64::from(want.is_ok());
        assert_eq!(a.stats().device_barriers, device);
    }
}

#[test]
fn a_device_that_knows_a_peer_died_fails_sends_at_the_first_timeout() {
    let mut rings = rings();
    let mut a = engine(7, 0);
    a.bind_port(1, out(1, 2)).unwrap();
    let h = a
        .start_send(req(1, b"x", Body::Borrowed(&[]), true))
        .unwrap();
    let mut now = Instant::ZERO;
    while a.send_status(h) == Ok(SendStatus::Pending) {
        a.poll(
            now,
            &mut Special {
                dead_1: true,
                ..Special::new(Loopback::new(&mut rings, NodeAddr(0)))
            },
            None,
        );
        now += Duration::from_micros(10);
        assert!(
            now < Instant::from_micros(200),
            "not failed at the first timeout"
        );
    }
    assert_eq!(a.send_status(h), Ok(SendStatus::Failed));
    assert_eq!(a.stats().timeouts, 1);
}

/// A (node 0) and B (node 1) of group 7 for a ping-pong: A's port 1 sends to B's
/// GO_BACK port 2 and takes replies into a posted 16-byte buffer; B's port 3 sends
/// to A's port 1.
fn ping_pong_pair() -> (TE, TE) {
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(
        1,
        PortSetup {
            input: true,
            recv: true,
            ..out(1, 2)
        },
    )
    .unwrap();
    a.ports_mut().post_recv(1, leak(16)).unwrap();
    b.bind_port(2, input(leak(16), Fill::Restart, 0)).unwrap();
    b.bind_port(3, out(0, 1)).unwrap();
    (a, b)
}

#[test]
fn eager_sends_copy_the_payload_and_let_the_ack_ride_on_the_reply() {
    let mut rings = rings();
    let (mut a, mut b) = ping_pong_pair();
    let mut payload = *b"ping";
    let h = a
        .start_send(req(1, b"", Body::Copied(&payload), true))
        .unwrap();
    payload.copy_from_slice(b"XXXX"); // the caller's buffer is free at once
    a.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    assert!(a.handed_off(h).unwrap());
    a.detach(h).unwrap();
    b.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(1)),
        None,
    );
    assert_eq!(b.state().len(), 1, "{:?} {:?}", b.stats(), a.stats());
    assert_eq!(b.state()[0].1, b"ping");
    assert_eq!(
        b.stats().tx_acks,
        0,
        "no ack of its own: it waits for a reply"
    );
    let r = b
        .start_send(req(3, b"", Body::Copied(b"pong"), true))
        .unwrap();
    b.poll(
        Instant::from_micros(1),
        &mut Loopback::new(&mut rings, NodeAddr(1)),
        None,
    );
    b.detach(r).unwrap();
    a.poll(
        Instant::from_micros(1),
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    assert_eq!(a.state()[0].1, b"pong");
    assert_eq!(b.stats().tx_acks, 0, "the ack rode on the pong");
    // The pong's handler comes first; the ack it carries is taken at A's next poll.
    assert_eq!(a.send_status(h), Ok(SendStatus::Pending));
    a.poll(
        Instant::from_micros(2),
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    assert_eq!(
        a.send_status(h),
        Err(Error::InvalidHandle),
        "detached and finished: slot freed"
    );
    // Every eager buffer is back: four more sends fit.
    for _ in 0..4 {
        let h = a
            .start_send(req(1, b"", Body::Copied(b"more"), true))
            .unwrap();
        a.detach(h).unwrap();
    }
    assert_eq!(
        a.start_send(req(1, b"", Body::Copied(b"one too many"), true)),
        Err(Error::NoResources)
    );
    assert_eq!(
        a.start_send(req(1, b"", Body::Copied(&[0; EAGER_MAX + 1]), true)),
        Err(Error::NoResources)
    );
    // A lone message gets its ack when the delay runs out.
    let mut now = Instant::from_micros(2);
    for _ in 0..10 {
        a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        b.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
        now += Duration::from_micros(10);
    }
    assert!(b.stats().tx_acks >= 1);
    assert!(a.is_quiescent());
    assert!(
        a.start_send(req(1, b"", Body::Copied(b"again"), true))
            .is_ok(),
        "buffers freed by the acks"
    );
}

/// A broadcast of up to `BCAST_COPY_MAX` bytes is copied once into the root's pool: the
/// caller's buffer is free at once, every member's copy is sent from the one
/// buffer, and the buffer comes back once every member has acknowledged it.
#[test]
fn an_eager_broadcast_goes_from_one_copy_freed_when_every_member_has_it() {
    let mut rings = rings();
    let mut es = broadcast_group();
    let mut payload = *b"to all";
    let first = es[0]
        .start_send(req(1, b"", Body::Copied(&payload), true))
        .unwrap();
    payload.copy_from_slice(b"XXXXXX");
    assert_eq!(
        es[0].handed_off(first),
        Ok(true),
        "the caller's part is over"
    );
    // One buffer per broadcast, not per member: the pool of four holds four.
    let mut hs = std::vec![first];
    for _ in 0..3 {
        hs.push(
            es[0]
                .start_send(req(1, b"", Body::Copied(b"more"), true))
                .unwrap(),
        );
    }
    assert_eq!(
        es[0].start_send(req(1, b"", Body::Copied(b"full"), true)),
        Err(Error::NoResources)
    );
    let mut refs: Vec<&mut TE> = es.iter_mut().collect();
    run(&mut refs, &mut rings, |es| {
        hs.iter()
            .all(|&h| es[0].send_status(h) == Ok(SendStatus::Done))
    });
    for e in &es[1..] {
        let got: Vec<&[u8]> = e.state().iter().map(|m| &m.1[..]).collect();
        assert_eq!(got, [&b"to all"[..], b"more", b"more", b"more"]);
    }
    for h in hs {
        es[0].release(h).unwrap();
    }
    // A longer one goes from the program's buffer (see `BCAST_COPY_MAX`).
    assert_eq!(
        es[0].start_send(req(1, b"", Body::Copied(&[0; 4097]), true)),
        Err(Error::NoResources)
    );
    for _ in 0..4 {
        es[0]
            .start_send(req(1, b"", Body::Copied(b"again"), true))
            .unwrap();
    }
}

/// A handler's broadcast takes its eager copy by the rule a program's does: it
/// leaves a unit of buffers for each level of relays below the root (a chain of
/// three: one level, seven of eight buffers), so that handlers broadcasting from
/// every member at once cannot take the buffers their relays need. Best-effort and
/// unicast sends from a handler are not held to it.
#[test]
fn a_handlers_broadcast_leaves_the_relays_their_buffers() {
    let mk = |node| {
        let mut cfg = Config::new(0xAB, 7, node);
        cfg.bcast_tree = Some(Tree::Chain);
        let c = Capacity { eager: 8, ..cap() };
        TE::new(Engine::new(cfg, G, Storage::with_capacity(c)).unwrap())
    };
    let (mut a, mut b) = (mk(0), mk(1));
    a.bind_port(1, out(BROADCAST, 2)).unwrap();
    a.bind_port(4, out(1, 2)).unwrap();
    a.bind_port(3, input(leak(64), Fill::Restart, 0)).unwrap();
    b.bind_port(1, out(0, 3)).unwrap();
    b.start_send(req(1, b"go", Body::Borrowed(&[]), true))
        .unwrap();
    let mut rings = rings();
    let mut got = None;
    for i in 0..1000 {
        let now = Instant::from_micros(i);
        b.e.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
        a.e.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        if let Some((_, mut view)) = a.e.next_notice() {
            got = Some([
                view.send(1, b"", b"first", true),
                view.send(1, b"", b"second", true),
                view.send(1, b"", b"unreliable", false),
                view.send(4, b"", b"unicast", true),
            ]);
            break;
        }
    }
    let got = got.expect("the message reached the handler");
    assert_eq!(got[0], Ok(5), "all eight free: one taken, seven left");
    assert_eq!(got[1], Err(Error::NoResources), "seven free: none may go");
    assert_eq!(got[2], Ok(10));
    assert_eq!(got[3], Ok(7));
}

/// Frames sent as parts (header, payload where it lies, tag) are the frames the
/// engine would have written: a message with a head and a body arrives whole, with
/// and without a frame key (tag or checksum), and only its long frames go as parts,
/// with the payload in one piece (the first frame's, head and body, is written: a
/// long tag is fastest over one slice).
#[test]
fn frames_sent_as_parts_arrive_like_written_ones() {
    for key in [None, Some(*b"0123456789abcdef")] {
        let mut rings = rings();
        let keyed = |node| {
            let mut cfg = Config::new(0xAB, 7, node);
            cfg.auth_key = key;
            TE::new(Engine::new(cfg, G, Storage::with_capacity(cap())).unwrap())
        };
        let (mut a, mut b): (TE, TE) = (keyed(0), keyed(1));
        a.bind_port(1, out(1, 2)).unwrap();
        b.bind_port(2, input(leak(4000), Fill::Restart, 3)).unwrap();
        let msg: &'static [u8] = Vec::leak((0..3050u32).map(|i| (i * 7) as u8).collect());
        let h = a
            .start_send(req(1, b"head", Body::Borrowed(msg), true))
            .unwrap();
        let tiny = a
            .start_send(req(1, b"tiny", Body::Borrowed(&[]), true))
            .unwrap();
        let (mut gathered, mut most_parts) = (0, 0);
        let mut now = Instant::ZERO;
        for _ in 0..10_000 {
            let mut g = Special {
                gather: true,
                ..Special::new(Loopback::new(&mut rings, NodeAddr(0)))
            };
            a.poll(now, &mut g, None);
            gathered += g.gathered;
            most_parts = most_parts.max(g.most_parts);
            b.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
            let done = |x| a.send_status(x) == Ok(SendStatus::Done);
            if b.state().len() == 2 && done(h) && done(tiny) {
                break;
            }
            now += Duration::from_micros(10);
        }
        let (port, data, fault, _) = &b.state()[0];
        assert_eq!((*port, *fault), (2, None), "key {key:?}");
        assert_eq!(&data[..4], b"head");
        assert_eq!(&data[4..], msg, "key {key:?}");
        assert_eq!(&b.state()[1].1, b"tiny");
        assert_eq!((b.stats().rx_unauthenticated, b.stats().rx_bad_crc), (0, 0));
        assert!(gathered >= 6, "{gathered} frames as parts, key {key:?}");
        let parts = if key.is_some() { 3 } else { 2 };
        assert_eq!(most_parts, parts, "header, payload, tag: key {key:?}");
        assert!(
            (gathered as u64) < a.stats().tx_frames,
            "short frames (the tiny message) are written as before"
        );
    }
}

/// `send_now` sends a short best-effort message at once, but never ahead of a
/// message queued before it, and a device without room leaves no trace (the
/// general path then sends it with the same message id: nothing is reported lost).
#[test]
fn a_short_best_effort_send_goes_at_once_and_never_overtakes() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(4096), Fill::Restart, 0)).unwrap();
    let now = Instant::ZERO;
    let lens = |r: &mut Rings| -> Vec<u8> { r.iter().map(|x| x.len() as u8).collect() };
    a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
    // No channel to node 1 yet: the general path opens it.
    assert!(!a.send_now(
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        OneFrame {
            port: 1,
            head: b"",
            body: b"x",
            reliable: false
        },
        || now
    ));
    assert_eq!(lens(&mut rings), [0, 0, 0, 0]);
    let long: &'static [u8] = Vec::leak(std::vec![9u8; 2000]);
    let h = a
        .start_send(req(1, b"", Body::Borrowed(long), false))
        .unwrap();
    // Queued before it and not yet sent: it must wait its turn.
    assert!(!a.send_now(
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        OneFrame {
            port: 1,
            head: b"",
            body: b"second",
            reliable: false
        },
        || now
    ));
    a.start_send(req(1, b"", Body::Borrowed(b"second"), false))
        .unwrap();
    a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
    assert_eq!(a.send_status(h), Ok(SendStatus::Done));
    let mut want: Vec<Vec<u8>> = std::vec![long.to_vec(), b"second".to_vec()];
    // Nothing queued now: each goes straight into the ring until it is full.
    let mut n = 0;
    loop {
        let m = std::format!("m{n}").into_bytes();
        if !a.send_now(
            &mut Loopback::new(&mut rings, NodeAddr(0)),
            OneFrame {
                port: 1,
                head: b"hd",
                body: &m,
                reliable: false,
            },
            || now,
        ) {
            break;
        }
        want.push([&b"hd"[..], &m].concat());
        n += 1;
    }
    assert_eq!(rings[1].len(), 64, "sent until the ring was full");
    assert_eq!(
        n,
        64 - 6,
        "5 fragments and one short message were there first"
    );
    let last: &'static [u8] = b"last";
    a.start_send(req(1, b"", Body::Borrowed(last), false))
        .unwrap();
    want.push(last.to_vec());
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[1].state().len() == want.len()
    });
    let got: Vec<Vec<u8>> = b.state().iter().map(|e| e.1.clone()).collect();
    assert_eq!(got, want, "every message, in the order sent");
    assert!(b.state().iter().all(|e| e.2.is_none()), "nothing lost");
    assert_eq!(b.stats().lost, 0);
}

/// Single-frame messages to an idle GO_BACK port take the short path (no assembly)
/// on both services, in order, each counted and reported like any; one that does
/// not fit the buffer goes the general way and is reported truncated; and the
/// channel's order goes on after both (the short path keeps the message ids).
#[test]
fn single_frame_messages_skip_the_assembly_and_keep_the_order() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(16), Fill::Restart, 3)).unwrap();
    let mut want = Vec::new();
    for k in 0..12u8 {
        let msg: &'static [u8] = Vec::leak(std::vec![k; 1 + k as usize % 16]);
        let reliable = k % 3 != 0;
        let h = a
            .start_send(req(1, b"", Body::Borrowed(msg), reliable))
            .unwrap();
        run(&mut [&mut a, &mut b], &mut rings, |es| {
            es[1].state().len() == want.len() + 1 && es[0].send_status(h) != Ok(SendStatus::Pending)
        });
        a.release(h).unwrap();
        want.push((2, msg.to_vec(), None, 0));
    }
    assert_eq!(b.state(), &want);
    assert_eq!(b.asms.hwm, 0, "no assembly was taken");
    assert_eq!(b.ports().semaphore(3).unwrap().count, 12);
    // All but the first (which opened the channel) by header prediction.
    assert_eq!(b.stats().rx_predicted, 11, "{:?}", b.stats());
    // Too long for the buffer: the general path, truncated.
    let h = a
        .start_send(req(1, b"", Body::Borrowed(&[9; 20]), true))
        .unwrap();
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[1].state().len() == 13 && es[0].send_status(h) != Ok(SendStatus::Pending)
    });
    assert_eq!(
        b.state()[12],
        (2, std::vec![9; 16], Some(Fault::Truncated), 0)
    );
    assert_eq!(b.asms.hwm, 1);
    // Both services go on in order after it.
    for (k, reliable) in [(20u8, true), (21, false), (22, true)] {
        let h = a
            .start_send(req(1, &[k], Body::Borrowed(&[]), reliable))
            .unwrap();
        run(&mut [&mut a, &mut b], &mut rings, |es| {
            es[0].send_status(h) != Ok(SendStatus::Pending)
                && es[1].state().last().is_some_and(|m| m.1 == [k])
        });
        a.release(h).unwrap();
    }
    assert_eq!(b.state().len(), 16);
    assert_eq!(b.stats().lost, 0);
    // The truncated one was not predicted; the three after it were.
    assert_eq!(b.stats().rx_predicted, 14);
}

/// A reliable `send_now` sends a short message at once from a copy (the
/// caller's buffer is free on return), never ahead of a message queued before it
/// and never without an eager buffer for the copy; a lost frame is sent again from
/// the copy and lands once; a peer that never answers is reported through the port.
#[test]
fn a_short_reliable_send_goes_at_once_from_a_copy_and_survives_loss() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    let mut setup = out(1, 2);
    setup.err = true;
    a.bind_port(1, setup).unwrap();
    b.bind_port(2, input(leak(4096), Fill::Restart, 0)).unwrap();
    let now = Instant::ZERO;
    a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
    let send = |a: &mut TE, rings: &mut Rings, head: &[u8], body: &[u8]| {
        a.e.send_now(
            &mut Loopback::new(rings, NodeAddr(0)),
            OneFrame {
                port: 1,
                head,
                body,
                reliable: true,
            },
            || now,
        )
    };
    // No channel to node 1 yet: the general path opens it.
    assert!(!send(&mut a, &mut rings, b"", b"x"));
    assert_eq!(rings[1].len(), 0);
    let long: &'static [u8] = Vec::leak(std::vec![9u8; 2000]);
    let h = a
        .start_send(req(1, b"", Body::Borrowed(long), true))
        .unwrap();
    // Queued before it and not yet sent: it must wait its turn.
    assert!(!send(&mut a, &mut rings, b"", b"second"));
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[0].send_status(h) == Ok(SendStatus::Done) && es[0].is_quiescent()
    });
    a.release(h).unwrap();
    let mut want: Vec<Vec<u8>> = std::vec![long.to_vec()];
    // Idle channel: the frame is in the ring when the call returns.
    let mut buf = *b"third";
    assert!(send(&mut a, &mut rings, b"hd", &buf));
    assert_eq!(rings[1].len(), 1);
    buf.copy_from_slice(b"XXXXX");
    let mut buf = *b"fourth";
    assert!(send(&mut a, &mut rings, b"", &buf));
    buf.copy_from_slice(b"YYYYYY");
    // Both lost on the way: the timer sends them again from their copies.
    rings[1] = Ring::new();
    want.push(b"hdthird".to_vec());
    want.push(b"fourth".to_vec());
    // Short messages: the channel keeps their copies, up to `SHORTS` of them; then
    // the four eager buffers take theirs; then there is no room for a copy.
    let ci = a.chans.peer_map[1] as usize;
    let more: Vec<Vec<u8>> = (0..channel::SHORTS - 2 + 4)
        .map(|i| std::format!("message {i}").into_bytes())
        .collect();
    for (i, m) in more.iter().enumerate() {
        assert!(send(&mut a, &mut rings, b"", m), "copy {i}");
        want.push(m.clone());
        if i == channel::SHORTS - 3 {
            assert!(a.chans[ci].shorts.iter().all(|s| s.used));
            assert_eq!(a.stats().tx_short, channel::SHORTS as u64);
            assert_eq!(a.bufs.eager_free, 4, "no eager buffer taken yet");
        }
    }
    assert!(
        !send(&mut a, &mut rings, b"", b"seventh"),
        "no copy left, short or eager"
    );
    assert_eq!(a.bufs.eager_free, 0);
    rings[1] = Ring::new();
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[1].state().len() == want.len() && es[0].is_quiescent()
    });
    let got: Vec<Vec<u8>> = b.state().iter().map(|e| e.1.clone()).collect();
    assert_eq!(got, want, "every message once, in the order sent");
    assert!(a.stats().retransmits >= 4, "{:?}", a.stats());
    assert_eq!(a.bufs.eager_free, 4, "the acks freed every copy");
    assert!(a.chans[ci].shorts.iter().all(|s| !s.used));
    assert!(a.ops.iter().all(|o| o.state == OpState::Free));
    // Node 1 goes silent: the detached sends fail through the port, the short
    // one's (a copy in the channel) as the longer one's (an eager buffer).
    assert!(send(&mut a, &mut rings, b"", b"to the dead"));
    assert!(send(
        &mut a,
        &mut rings,
        b"",
        &[7u8; channel::SHORT_MAX + 1]
    ));
    let mut t = Instant::from_millis(1);
    while a.state().len() < 2 {
        a.poll(t, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        rings[1] = Ring::new();
        t += Duration::from_micros(10);
        assert!(t < Instant::from_millis(100), "no failure reported");
    }
    assert_eq!(a.state()[0].2, Some(Fault::SendFailed));
    assert_eq!(a.state()[1].2, Some(Fault::SendFailed));
    assert_eq!(a.bufs.eager_free, 4, "the failed send's copy is back");
    assert!(a.chans[ci].shorts.iter().all(|s| !s.used));
}

/// A multicast packet is taken only from the member that is this one's parent in
/// its root's tree: another member of the job cannot pass its own packets off as
/// another root's (QNIX orders a root's broadcasts by them). The channel's order
/// goes on past the one dropped.
#[test]
fn a_multicast_packet_from_a_member_not_our_parent_is_dropped() {
    let mut rings = rings();
    let with_packets = |node| packet_engine(node, None);
    let (mut b, mut c) = (with_packets(1), with_packets(2));
    let now = Instant::ZERO;
    b.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
    c.poll(now, &mut Loopback::new(&mut rings, NodeAddr(2)), None);
    // Node 2's own packets, down its binomial tree (2 -> 0, 1).
    for word in [b"fake", b"real"] {
        let p = c.packet_alloc().unwrap();
        c.packet_mut(p).unwrap()[..4].copy_from_slice(word);
        c.launch_multicast(p, MCAST_ALL, 4, Tree::Binomial).unwrap();
    }
    c.poll(now, &mut Loopback::new(&mut rings, NodeAddr(2)), None);
    let mut frames = Vec::new();
    let mut at_b = Loopback::new(&mut rings, NodeAddr(1));
    while let Some(tok) = at_b.receive(now) {
        frames.push(tok.consume(|f| f.to_vec()));
    }
    assert_eq!(frames.len(), 2);
    // The first passed off as root 0's: in root 0's tree (0 -> 1, 2), 2 is a leaf.
    let (mut repr, payload) = Repr::parse_frame(&frames[0], true, None).unwrap();
    assert_eq!((repr.kind, repr.ends.src_port), (Kind::Packet, 2));
    repr.ends.src_port = 0;
    let mut forged = std::vec![0u8; frames[0].len()];
    let n = repr
        .emit_frame(&mut forged, &[payload], false, None)
        .unwrap();
    let malformed = b.stats().rx_malformed;
    b.handle_frame(now, Received::from(&forged[..n][..]), &mut NoMemory);
    assert_eq!(b.stats().rx_malformed, malformed + 1);
    assert!(b.next_delivery().is_none(), "taken as root 0's");
    b.handle_frame(now, Received::from(&frames[1][..]), &mut NoMemory);
    let d = b.next_delivery().expect("the next one of 2's own");
    assert_eq!((d.src, d.multicast), (2, true));
    assert_eq!(&b.packet(d.packet).unwrap()[..4], b"real");
}

/// A message sent at once (`send_now`, best effort: no operation, or reliable: one
/// set up in place) is the frame the general path (queue, transmit pass) sends for
/// it, byte for byte, with and without a job key.
#[test]
fn a_message_sent_at_once_is_the_frame_the_queue_would_send() {
    let frame_of = |reliable: bool, key: Option<wire::AuthKey>, at_once: bool| -> Vec<u8> {
        let mut rings = rings();
        let mut cfg = Config::new(0xAB, 7, 0);
        cfg.auth_key = key;
        let mut a = TE::new(Engine::new(cfg, G, Storage::with_capacity(cap())).unwrap());
        a.bind_port(1, out(1, 2)).unwrap();
        let now = Instant::ZERO;
        // A first message opens the channel (and, reliable, stays unacked: the
        // second one has sequence number 1 either way).
        a.start_send(req(1, b"", Body::Borrowed(b"open"), reliable))
            .unwrap();
        a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        rings[1] = Ring::new();
        let dev = &mut Loopback::new(&mut rings, NodeAddr(0));
        if at_once {
            let sent = if reliable {
                a.e.send_now(
                    dev,
                    OneFrame {
                        port: 1,
                        head: b"hd",
                        body: b"payload",
                        reliable: true,
                    },
                    || now,
                )
            } else {
                a.e.send_now(
                    dev,
                    OneFrame {
                        port: 1,
                        head: b"hd",
                        body: b"payload",
                        reliable: false,
                    },
                    || now,
                )
            };
            assert!(sent);
        } else {
            if reliable {
                a.start_send(req(1, b"hd", Body::Copied(b"payload"), true))
                    .unwrap();
            } else {
                a.start_send(req(1, b"hd", Body::Borrowed(b"payload"), false))
                    .unwrap();
            }
            a.poll(now, dev, None);
        }
        let mut rx = Loopback::new(&mut rings, NodeAddr(1));
        let f = rx.receive(now).map(|t| t.consume(|f| f.to_vec()));
        assert!(rx.receive(now).is_none(), "one frame");
        f.expect("a frame")
    };
    for key in [None, Some(*b"0123456789abcdef")] {
        for reliable in [false, true] {
            let general = frame_of(reliable, key, false);
            assert_eq!(
                frame_of(reliable, key, true),
                general,
                "reliable {reliable}, key {key:?}"
            );
            let (repr, payload) = Repr::parse_frame(&general, true, key.as_ref()).unwrap();
            assert_eq!(payload, b"hdpayload");
            assert_eq!(repr.flags.contains(Flags::RELIABLE), reliable);
            assert_eq!(repr.seq, u32::from(reliable));
        }
    }
}

/// An ack that comes on a data frame (a reply's) is kept for the next poll, so the
/// reply's handler comes first: the round trip is still measured to when it came,
/// and a retransmission timer due in the poll that keeps it does not fire. (That
/// poll checks its timers because the one before it delivered too; see
/// `a_delivering_poll_leaves_timers_to_the_next_unless_an_ack_is_asked_for`.)
#[test]
fn an_ack_on_a_reply_is_taken_at_the_next_poll_as_of_its_arrival() {
    for late in [false, true] {
        let mut rings = rings();
        let (mut a, mut b) = ping_pong_pair();
        let at = Instant::from_micros;
        let ca = |a: &TE| a.chans.peer_map[1] as usize;
        a.poll(at(0), &mut view(&mut rings, 0), None);
        let h = a
            .start_send(req(1, b"", Body::Copied(b"ping"), true))
            .unwrap();
        a.poll(at(0), &mut view(&mut rings, 0), None);
        a.detach(h).unwrap();
        b.poll(at(1), &mut view(&mut rings, 1), None);
        let r = b
            .start_send(req(3, b"", Body::Copied(b"pong"), true))
            .unwrap();
        b.poll(at(1), &mut view(&mut rings, 1), None);
        b.detach(r).unwrap();
        // The pong lands 10 us after the ping left, or (late) long after the ping's
        // retransmission timer: in the same poll, the kept ack ends that wait.
        let heard = if late { 50_000 } else { 10 };
        a.progress.upkeep_due = true;
        a.poll(at(heard), &mut view(&mut rings, 0), None);
        assert_eq!(a.state()[0].1, b"pong");
        assert_eq!(a.stats().timeouts, 0, "late {late}");
        assert_eq!(a.stats().retransmits, 0);
        if late {
            // The timer's check took it at once.
            assert_eq!(a.send_status(h), Err(Error::InvalidHandle));
        } else {
            assert_eq!(a.send_status(h), Ok(SendStatus::Pending), "kept");
            assert!(a.chans[ca(&a)].ack_due.is_some());
            assert_eq!(a.poll_at(at(heard)), Some(at(heard)), "a poll is due");
        }
        a.poll(at(heard + 5_000), &mut view(&mut rings, 0), None);
        assert_eq!(a.send_status(h), Err(Error::InvalidHandle), "taken: freed");
        assert_eq!(a.chans.acks_due, 0);
        // Measured to the pong's arrival, not to the poll that took it.
        assert_eq!(a.chans[ca(&a)].srtt, heard * 1000, "late {late}");
        assert!(a.is_quiescent());
    }
}

/// [`ping_pong_pair`] where b has sent a message to node 2 at time 0: node 2
/// never polls, so it waits for its retransmission timer (50 us).
fn pair_with_a_timer_at_b(rings: &mut Rings) -> (TE, TE) {
    let (a, mut b) = ping_pong_pair();
    b.bind_port(4, out(2, 2)).unwrap();
    b.start_send(req(4, b"", Body::Copied(b"to c"), true))
        .unwrap();
    b.poll(Instant::ZERO, &mut view(rings, 1), None);
    (a, b)
}

/// A poll that hands a message over returns without checking timers or
/// transmitting: they come at the next poll (which `poll_at` asks for), after the
/// message's handler and the reply it sends. A frame that asks for an ack at once
/// gets it in the same poll, and so do the timers; two delivering polls in a row
/// never both leave them.
#[test]
fn a_delivering_poll_leaves_timers_to_the_next_unless_an_ack_is_asked_for() {
    for ask in [false, true] {
        let mut rings = rings();
        let (mut a, mut b) = pair_with_a_timer_at_b(&mut rings);
        let at = Instant::from_micros;
        // A send the sender waits for asks for its ack at once; an eager one not.
        let h = if ask {
            a.start_send(req(1, b"", Body::Borrowed(b"ping"), true))
                .unwrap()
        } else {
            a.start_send(req(1, b"", Body::Copied(b"ping"), true))
                .unwrap()
        };
        a.poll(at(0), &mut view(&mut rings, 0), None);
        b.poll(at(60), &mut view(&mut rings, 1), None);
        assert_eq!(b.state().len(), 1);
        assert_eq!(b.stats().tx_acks, u64::from(ask), "ask {ask}");
        assert_eq!(b.stats().timeouts, u64::from(ask), "ask {ask}");
        assert_eq!(b.progress.upkeep_due, !ask);
        b.poll(at(60), &mut view(&mut rings, 1), None);
        assert_eq!(b.stats().timeouts, 1, "ask {ask}");
        assert!(!b.progress.upkeep_due);
        if ask {
            a.poll(at(61), &mut view(&mut rings, 0), None);
            assert_eq!(a.send_status(h), Ok(SendStatus::Done));
        }
    }
    {
        // With no timer running, `poll_at` asks for the poll that does the upkeep
        // (rather than for the delayed ack's deadline).
        let mut rings = rings();
        let (mut a, mut b) = ping_pong_pair();
        let at = Instant::from_micros;
        a.start_send(req(1, b"", Body::Copied(b"ping"), true))
            .unwrap();
        a.poll(at(0), &mut view(&mut rings, 0), None);
        b.poll(at(1), &mut view(&mut rings, 1), None);
        assert_eq!(b.state().len(), 1);
        assert_eq!(b.poll_at(at(1)), Some(at(1)), "a poll is due");
        b.poll(at(1), &mut view(&mut rings, 1), None);
        assert!(
            b.poll_at(at(1)).is_some_and(|t| t > at(1)),
            "the ack's delay"
        );
    }
    // Two messages delivered by two polls in a row: the second does the upkeep.
    {
        let mut rings = rings();
        let (mut a, mut b) = pair_with_a_timer_at_b(&mut rings);
        let at = Instant::from_micros;
        a.start_send(req(1, b"", Body::Copied(b"one"), true))
            .unwrap();
        a.start_send(req(1, b"", Body::Copied(b"two"), true))
            .unwrap();
        a.poll(at(0), &mut view(&mut rings, 0), None);
        b.poll(at(60), &mut view(&mut rings, 1), None);
        assert_eq!((b.state().len(), b.stats().timeouts), (1, 0));
        b.poll(at(60), &mut view(&mut rings, 1), None);
        assert_eq!((b.state().len(), b.stats().timeouts), (2, 1));
    }
}

/// A packet launched at once (`launch_unicast_now`) is the frame the queue and a
/// transmit pass send for it, byte for byte, with and without a job key; where it
/// does not apply (no channel open yet) nothing happens; and its ack completes it
/// as any packet send's does.
#[test]
fn a_packet_launched_at_once_is_the_frame_the_queue_would_send() {
    let with_packets = packet_engine;
    let launch = |a: &mut TE, word: &[u8; 4]| {
        let p = a.packet_alloc().unwrap();
        a.packet_mut(p).unwrap()[..4].copy_from_slice(word);
        p
    };
    let now = Instant::ZERO;
    for key in [None, Some(*b"0123456789abcdef")] {
        let mut frames = Vec::new();
        for at_once in [false, true] {
            let mut rings = rings();
            let mut a = with_packets(0, key);
            let p = launch(&mut a, b"open");
            let dev = &mut view(&mut rings, 0);
            assert_eq!(a.e.launch_unicast_now(dev, p, 1, 4, || now), Ok(false));
            assert!(a.ops.iter().all(|o| o.state == OpState::Free), "untouched");
            // The first packet opens the channel and stays unacked.
            a.launch_unicast(p, 1, 4).unwrap();
            a.poll(now, dev, None);
            rings[1] = Ring::new();
            let p = launch(&mut a, b"next");
            let dev = &mut view(&mut rings, 0);
            if at_once {
                assert_eq!(a.e.launch_unicast_now(dev, p, 1, 3, || now), Ok(true));
            } else {
                a.launch_unicast(p, 1, 3).unwrap();
                a.poll(now, dev, None);
            }
            let mut rx = view(&mut rings, 1);
            frames.push(rx.receive(now).map(|t| t.consume(|f| f.to_vec())));
            assert!(rx.receive(now).is_none(), "one frame");
        }
        assert!(frames[0].is_some());
        assert_eq!(frames[0], frames[1], "key {key:?}");
        let f = frames[0].as_deref().unwrap();
        let (repr, payload) = Repr::parse_frame(f, true, key.as_ref()).unwrap();
        assert_eq!(
            (repr.kind, repr.seq, payload),
            (Kind::Packet, 1, &b"nex"[..])
        );
    }
    // Launched at once to a live peer: delivered, acked, the packet back to the engine.
    let mut rings = rings();
    let (mut a, mut b) = (with_packets(0, None), with_packets(1, None));
    let p = launch(&mut a, b"open");
    a.launch_unicast(p, 1, 4).unwrap();
    let p = launch(&mut a, b"fast");
    run(&mut [&mut a, &mut b], &mut rings, |es| es[0].is_quiescent());
    let at = Instant::from_millis(1);
    assert_eq!(
        a.e.launch_unicast_now(&mut view(&mut rings, 0), p, 1, 4, || at),
        Ok(true)
    );
    assert_eq!(
        a.packet_mut(p).map(|_| ()),
        None,
        "the engine's until acked"
    );
    // And one queued behind it: the two take successive message ids.
    let p = launch(&mut a, b"last");
    a.launch_unicast(p, 1, 4).unwrap();
    let mut got = Vec::new();
    let mut t = at;
    while got.len() < 3 || !a.is_quiescent() {
        a.poll(t, &mut view(&mut rings, 0), None);
        b.poll(t, &mut view(&mut rings, 1), None);
        while let Some(d) = b.next_delivery() {
            got.push(b.packet(d.packet).unwrap()[..4].to_vec());
            b.packet_free(d.packet).unwrap();
        }
        t += Duration::from_micros(10);
        assert!(t < Instant::from_millis(50), "{got:?} {:?}", a.stats());
    }
    assert_eq!(got, [&b"open"[..], b"fast", b"last"]);
    assert!(a.ops.iter().all(|o| o.state == OpState::Free));
    assert_eq!(a.stats().retransmits, 0);
}

/// An ack that comes on a packet (LFC's reply) is kept for the next poll as one on
/// a message is: the reply's upcall comes before freeing what it acknowledges.
#[test]
fn an_ack_on_a_reply_packet_is_taken_at_the_next_poll() {
    let mut rings = rings();
    let with_packets = |node| packet_engine(node, None);
    let (mut a, mut b) = (with_packets(0), with_packets(1));
    let at = Instant::from_micros;
    let p = a.packet_alloc().unwrap();
    a.launch_unicast(p, 1, 4).unwrap();
    a.poll(at(0), &mut view(&mut rings, 0), None);
    b.poll(at(1), &mut view(&mut rings, 1), None);
    let d = b.next_delivery().unwrap();
    b.packet_free(d.packet).unwrap();
    let r = b.packet_alloc().unwrap();
    b.launch_unicast(r, 0, 4).unwrap();
    b.poll(at(1), &mut view(&mut rings, 1), None);
    a.poll(at(10), &mut view(&mut rings, 0), None);
    assert!(a.next_delivery().is_some(), "the reply");
    let ca = a.chans.peer_map[1] as usize;
    assert!(a.chans[ca].ack_due.is_some(), "its ack kept");
    assert_eq!(a.chans.acks_due, 1);
    assert!(a.ops.iter().any(|o| o.state == OpState::Active));
    a.poll(at(12), &mut view(&mut rings, 0), None);
    assert_eq!(a.chans.acks_due, 0);
    assert!(
        a.ops.iter().all(|o| o.state == OpState::Free),
        "taken: freed"
    );
    assert_eq!(a.chans[ca].srtt, 10_000, "measured to the reply's arrival");
}

/// A member that relays a broadcast down its tree (a chain 0 -> 1 -> 2) forwards
/// it in the poll that delivers it: the member below does not wait for the
/// relay's next poll (its handler, its program).
#[test]
fn a_relayed_broadcast_leaves_in_the_poll_that_delivers_it() {
    let mut es: Vec<TE> = (0..3)
        .map(|node| {
            let mut cfg = Config::new(0xAB, 7, node);
            cfg.bcast_tree = Some(Tree::Chain);
            TE::new(Engine::new(cfg, G, Storage::with_capacity(cap())).unwrap())
        })
        .collect();
    es[0].bind_port(1, out(BROADCAST, 2)).unwrap();
    for e in es.iter_mut().skip(1) {
        e.bind_port(2, input(leak(64), Fill::Restart, 0)).unwrap();
    }
    let mut rings = rings();
    let now = Instant::ZERO;
    es[0]
        .start_send(req(1, b"all", Body::Borrowed(&[]), true))
        .unwrap();
    es[0].poll(now, &mut view(&mut rings, 0), None);
    es[1].poll(now, &mut view(&mut rings, 1), None);
    assert_eq!(es[1].state().len(), 1);
    assert_eq!(es[1].stats().forwarded, 1);
    assert!(!es[1].progress.upkeep_due, "a forward to send");
    es[2].poll(now, &mut view(&mut rings, 2), None);
    assert_eq!(es[2].state().len(), 1, "forwarded in node 1's poll");
    assert_eq!(es[2].state()[0].1, b"all");
}

/// A packet stored for the program (LFC's upcall) lets its poll's upkeep wait for
/// the next poll, as a delivered message does; a packet this node forwards down its
/// tree leaves in the same poll, so the next member does not wait for the upcall.
#[test]
fn a_stored_packet_defers_the_upkeep_unless_it_is_forwarded() {
    let mut rings = rings();
    let with_packets = |node| packet_engine(node, None);
    let mut es = [with_packets(0), with_packets(1), with_packets(2)];
    let now = Instant::ZERO;
    for (n, e) in es.iter_mut().enumerate() {
        e.poll(now, &mut view(&mut rings, n as u16), None);
    }
    let [a, b, c] = &mut es;
    let p = a.packet_alloc().unwrap();
    a.packet_mut(p).unwrap()[..4].copy_from_slice(b"solo");
    a.launch_unicast(p, 1, 4).unwrap();
    a.poll(now, &mut view(&mut rings, 0), None);
    b.poll(now, &mut view(&mut rings, 1), None);
    assert_eq!(b.next_delivery().map(|d| d.src), Some(0));
    assert!(
        b.progress.upkeep_due,
        "stored for the program: upkeep at the next poll"
    );
    b.poll(now, &mut view(&mut rings, 1), None);
    assert!(!b.progress.upkeep_due);
    // Down the chain 0 -> 1 -> 2: node 1 forwards in the poll that stores it.
    let p = a.packet_alloc().unwrap();
    a.packet_mut(p).unwrap()[..4].copy_from_slice(b"tree");
    a.launch_multicast(p, MCAST_ALL, 4, Tree::Chain).unwrap();
    a.poll(now, &mut view(&mut rings, 0), None);
    b.poll(now, &mut view(&mut rings, 1), None);
    assert!(!b.progress.upkeep_due, "a forward goes at once");
    assert_eq!(b.stats().forwarded, 1);
    c.poll(now, &mut view(&mut rings, 2), None);
    let d = c.next_delivery().expect("forwarded in node 1's poll");
    assert_eq!((d.src, d.multicast), (0, true));
    assert_eq!(&c.packet(d.packet).unwrap()[..4], b"tree");
}

/// A peer that acknowledged a message on its reply and is then found dead (the
/// device says so when another peer's timer fires, before the kept ack was taken):
/// the acknowledged message counts as done, only what it had not acked fails.
#[test]
fn a_message_acked_on_a_reply_stays_done_when_its_peer_is_found_dead() {
    let mut rings = rings();
    let (mut a, mut b) = ping_pong_pair();
    // Node 2 never polls: a message to it waits for its timer (50 us).
    a.bind_port(4, out(2, 2)).unwrap();
    let at = Instant::from_micros;
    a.poll(at(0), &mut view(&mut rings, 0), None);
    a.start_send(req(4, b"", Body::Copied(b"to c"), true))
        .unwrap();
    a.poll(at(0), &mut view(&mut rings, 0), None);
    let ping = a
        .start_send(req(1, b"", Body::Copied(b"ping"), true))
        .unwrap();
    a.poll(at(40), &mut view(&mut rings, 0), None);
    b.poll(at(45), &mut view(&mut rings, 1), None);
    b.start_send(req(3, b"", Body::Copied(b"pong"), true))
        .unwrap();
    b.poll(at(45), &mut view(&mut rings, 1), None);
    // The pong (and its ack of the ping) lands in the poll where the timer to node
    // 2 fires and the device reports node 1 dead (a poll after a delivering one).
    let mut dev = Special {
        dead_1: true,
        ..Special::new(view(&mut rings, 0))
    };
    a.progress.upkeep_due = true;
    a.poll(at(50), &mut dev, None);
    assert_eq!(a.state()[0].1, b"pong");
    assert_eq!(a.stats().peers_failed, 1, "{:?}", a.stats());
    assert_eq!(a.send_status(ping), Ok(SendStatus::Done));
}

/// The frames waiting in node `at`'s ring, taken out (copies).
fn take_frames(rings: &mut Rings, at: u16) -> Vec<Vec<u8>> {
    let mut d = Loopback::new(rings, NodeAddr(at));
    let mut v = Vec::new();
    while let Some(t) = d.receive(Instant::ZERO) {
        v.push(t.consume(|f| f.to_vec()));
    }
    v
}

/// Frame `f` put into node `to`'s ring as if `from` sent it.
fn put_frame(rings: &mut Rings, from: u16, to: u16, f: &[u8]) {
    use crate::phy::TxToken;
    Loopback::new(rings, NodeAddr(from))
        .transmit(Instant::ZERO, NodeAddr(to))
        .unwrap()
        .consume(f.len(), |b| b.copy_from_slice(f));
}

/// Header prediction takes only the next whole message of a channel in the
/// commonest shape: a frame ahead of a gap, the one that fills it, a duplicate and
/// a frame with another flag go through the general path, which keeps the order
/// and drops the duplicate; in-order frames are predicted again after them.
#[test]
fn header_prediction_takes_only_the_next_message_in_the_common_shape() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(16), Fill::Restart, 3)).unwrap();
    let send = |a: &mut TE, b: &mut TE, rings: &mut Rings, m: &'static [u8]| {
        let h = a.start_send(req(1, m, Body::Borrowed(&[]), true)).unwrap();
        a.detach(h).unwrap();
        let n = b.state().len();
        run(&mut [a, b], rings, |es| {
            es[1].state().len() == n + 1 && es[0].is_quiescent()
        });
    };
    send(&mut a, &mut b, &mut rings, b"warm");
    send(&mut a, &mut b, &mut rings, b"zero");
    let predicted = b.stats().rx_predicted;
    assert_eq!(
        predicted, 1,
        "the first opened the channel, the second predicted"
    );
    // Two frames held back, then given to b the wrong way round.
    for m in [&b"one"[..], b"two", b"three"] {
        let h = a.start_send(req(1, m, Body::Borrowed(&[]), true)).unwrap();
        a.detach(h).unwrap();
    }
    a.poll(
        Instant::ZERO,
        &mut Loopback::new(&mut rings, NodeAddr(0)),
        None,
    );
    let f = take_frames(&mut rings, 1);
    assert_eq!(f.len(), 3);
    let now = Instant::from_micros(1);
    let poll_b = |b: &mut TE, rings: &mut Rings| {
        b.poll(now, &mut Loopback::new(rings, NodeAddr(1)), None);
    };
    // Ahead of a gap: not predicted (this port, one buffer, refuses it for now).
    put_frame(&mut rings, 0, 1, &f[1]);
    poll_b(&mut b, &mut rings);
    assert_eq!(b.state().len(), 2, "\"two\" waits for \"one\"");
    assert_eq!(b.stats().rx_predicted, predicted);
    // The next one, with RETRY set (a peer saying a port freed): not the usual
    // shape, taken by the general path.
    let mut g = f[0].clone();
    g[3] |= wire::Flags::RETRY.bits() as u8;
    put_frame(&mut rings, 0, 1, &g);
    poll_b(&mut b, &mut rings);
    assert_eq!(b.state().len(), 3);
    assert_eq!(b.stats().rx_predicted, predicted);
    // A duplicate: dropped, not predicted.
    put_frame(&mut rings, 0, 1, &f[0]);
    poll_b(&mut b, &mut rings);
    assert_eq!(b.stats().rx_duplicates, 1);
    assert_eq!(b.stats().rx_predicted, predicted);
    // The refused one comes again, and the rest, in order.
    run(&mut [&mut a, &mut b], &mut rings, |es| {
        es[1].state().len() == 5 && es[0].is_quiescent()
    });
    let got: Vec<&[u8]> = b.state().iter().map(|e| &e.1[..]).collect();
    assert_eq!(got, [&b"warm"[..], b"zero", b"one", b"two", b"three"]);
    let predicted = b.stats().rx_predicted;
    // In order again: predicted.
    send(&mut a, &mut b, &mut rings, b"four");
    assert_eq!(b.stats().rx_predicted, predicted + 1);
    assert_eq!(b.state().last().unwrap().1, b"four");
    assert_eq!(b.stats().lost + b.stats().rx_dropped, 0);
}

/// A send at once goes where its port is bound now: the address found at binding
/// follows a new binding.
#[test]
fn a_send_at_once_follows_its_ports_binding() {
    let mut rings = rings();
    let (mut a, mut b, mut c) = (engine(7, 0), engine(7, 1), engine(7, 2));
    for e in [&mut b, &mut c] {
        e.bind_port(2, input(leak(16), Fill::Restart, 0)).unwrap();
    }
    let now = Instant::ZERO;
    for (to, m) in [(1, &b"to b"[..]), (2, b"to c"), (1, b"b again")] {
        a.bind_port(1, out(to, 2)).unwrap();
        // The first message to each opens its channel (the general path).
        let h = a.start_send(req(1, m, Body::Borrowed(&[]), true)).unwrap();
        run(&mut [&mut a, &mut b, &mut c], &mut rings, |es| {
            es[0].send_status(h) == Ok(SendStatus::Done)
        });
        a.release(h).unwrap();
        let at_once = a.e.send_now(
            &mut Loopback::new(&mut rings, NodeAddr(0)),
            OneFrame {
                port: 1,
                head: m,
                body: b"!",
                reliable: true,
            },
            || now,
        );
        assert!(at_once, "sent at once to node {to}");
        run(&mut [&mut a, &mut b, &mut c], &mut rings, |es| {
            es[0].is_quiescent()
        });
    }
    let got = |e: &TE| e.state().iter().map(|n| n.1.clone()).collect::<Vec<_>>();
    assert_eq!(got(&b), [&b"to b"[..], b"to b!", b"b again", b"b again!"]);
    assert_eq!(got(&c), [&b"to c"[..], b"to c!"]);
}

/// The frame waiting first in node `n`'s ring, taken out.
fn take_frame(rings: &mut Rings, n: u16) -> Vec<u8> {
    view(rings, n)
        .receive(Instant::ZERO)
        .expect("a frame")
        .consume(|f| f.to_vec())
}

/// On a device that names each frame's sender and carries one job, a whole
/// message in one frame travels under the compact header, reliable or not, and
/// is taken by header prediction; anything else keeps the full header.
#[test]
fn short_messages_travel_compact_where_the_device_names_their_sender() {
    let mut rings = rings();
    let (mut a, mut b) = ping_pong_pair();
    let now = Instant::ZERO;
    let h = a
        .start_send(req(1, b"", Body::Copied(b"ping"), true))
        .unwrap();
    a.poll(now, &mut Loopback::vouching(&mut rings, NodeAddr(0)), None);
    a.detach(h).unwrap();
    let f = take_frame(&mut rings, 1);
    assert_eq!(f.len(), wire::COMPACT_LEN + 4);
    assert_eq!(
        (f[0], &f[wire::COMPACT_LEN..]),
        (wire::COMPACT_MAGIC, &b"ping"[..])
    );
    assert_eq!(a.stats().tx_compact, 1);

    // Refused without the sender's name, and from a device that does not vouch
    // for it (B's last poll told it its device's capabilities: none yet).
    b.handle_frame(now, Received::from(&f[..]), &mut NoMemory);
    b.handle_frame(
        now,
        Received {
            source: Some(NodeAddr(0)),
            ..Received::from(&f[..])
        },
        &mut NoMemory,
    );
    assert_eq!(b.stats().rx_unauthenticated, 2);
    // Through a vouching device: from a node its header does not name, dropped.
    b.poll(now, &mut Loopback::vouching(&mut rings, NodeAddr(1)), None);
    b.handle_frame(
        now,
        Received {
            source: Some(NodeAddr(2)),
            ..Received::from(&f[..])
        },
        &mut NoMemory,
    );
    assert_eq!(b.stats().rx_spoofed, 1);
    assert!(b.state().is_empty());
    // From its sender: delivered, by prediction; a second copy is a duplicate.
    b.handle_frame(
        now,
        Received {
            source: Some(NodeAddr(0)),
            ..Received::from(&f[..])
        },
        &mut NoMemory,
    );
    b.record();
    b.handle_frame(
        now,
        Received {
            source: Some(NodeAddr(0)),
            ..Received::from(&f[..])
        },
        &mut NoMemory,
    );
    b.record();
    assert_eq!(b.state().len(), 1);
    assert_eq!(b.state()[0].1, b"ping");
    // (The first frame of a channel opens it: the general path.)
    assert_eq!((b.stats().rx_predicted, b.stats().rx_duplicates), (0, 1));
    assert_eq!(b.stats().rx_compact, 5);

    // A ping-pong both ways, then a best-effort message, a message the port
    // cannot hold (the general path, compact too) and one of several frames.
    let r = b
        .start_send(req(3, b"", Body::Copied(b"pong"), true))
        .unwrap();
    b.detach(r).unwrap();
    let be = a
        .start_send(req(1, b"hd", Body::Borrowed(b"best"), false))
        .unwrap();
    run_on(&mut [&mut a, &mut b], &mut rings, true, |es| {
        es[0].state().len() == 1 && es[1].state().len() == 2
    });
    assert_eq!(a.state()[0].1, b"pong");
    assert_eq!(b.state()[1].1, b"hdbest");
    assert_eq!(a.release(be), Ok(SendStatus::Done));
    let long: &'static [u8] = Vec::leak(std::vec![7u8; 20]);
    let big = a
        .start_send(req(1, b"", Body::Borrowed(long), true))
        .unwrap();
    let many: &'static [u8] = Vec::leak((0..1500u32).map(|i| i as u8).collect());
    b.bind_port(4, input(leak(2000), Fill::Restart, 1)).unwrap();
    a.bind_port(5, out(1, 4)).unwrap();
    let frames = a.stats().tx_frames;
    let several = a
        .start_send(req(5, b"", Body::Borrowed(many), true))
        .unwrap();
    run_on(&mut [&mut a, &mut b], &mut rings, true, |es| {
        es[1].state().len() == 4
            && es[0].send_status(big) != Ok(SendStatus::Pending)
            && es[0].send_status(several) == Ok(SendStatus::Done)
    });
    let (port, data, fault, _) = &b.state()[2];
    assert_eq!((*port, *fault, data.len()), (2, Some(Fault::Truncated), 16));
    assert_eq!(b.state()[3].1, many);
    assert!(
        a.stats().tx_frames - frames >= 4,
        "1500 bytes over a 512-byte MTU"
    );
    assert_eq!(b.stats().rx_malformed, 0);
    assert!(b.stats().rx_compact >= 7, "{:?}", b.stats());
}

/// Compact frames are never sent in a job with a key, and one that comes is
/// refused there; garbage behind the compact magics (data and put) never panics the receiver and
/// is counted.
#[test]
fn compact_frames_need_a_vouching_device_and_a_job_without_a_key() {
    let key = Some([5u8; 16]);
    let mut rings = rings();
    let (mut a, mut b) = (packet_engine(0, key), packet_engine(1, key));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(64), Fill::Restart, 0)).unwrap();
    let h = a
        .start_send(req(1, b"", Body::Copied(b"keyed"), true))
        .unwrap();
    a.detach(h).unwrap();
    run_on(&mut [&mut a, &mut b], &mut rings, true, |es| {
        es[1].state().len() == 1
    });
    assert_eq!(a.stats().tx_compact, 0);
    assert_eq!(b.stats().rx_compact, 0);
    let mut f = std::vec![0u8; wire::COMPACT_LEN + 5];
    let repr = Repr {
        kind: wire::Kind::Data,
        flags: wire::Flags::LAST,
        job_key: 0,
        ends: wire::Endpoints {
            src_group: 7,
            src_node: 0,
            src_port: 1,
            dst_group: 7,
            dst_node: 1,
            dst_port: 2,
        },
        seq: 0,
        ack: Some(wire::AckInfo::default()),
        msg_id: 1,
        offset: 0,
        total_len: 5,
        payload_len: 5,
    };
    assert!(repr.compactable());
    repr.emit_compact(&mut f, |p| p.copy_from_slice(b"forge"))
        .unwrap();
    b.handle_frame(
        Instant::ZERO,
        Received {
            source: Some(NodeAddr(0)),
            ..Received::from(&f[..])
        },
        &mut NoMemory,
    );
    b.record();
    assert_eq!(b.stats().rx_unauthenticated, 1);
    // A compact put likewise.
    f[0] = wire::COMPACT_PUT_MAGIC;
    b.handle_frame(
        Instant::ZERO,
        Received {
            source: Some(NodeAddr(0)),
            ..Received::from(&f[..])
        },
        &mut NoMemory,
    );
    assert_eq!(b.stats().rx_unauthenticated, 2);
    assert_eq!(b.state().len(), 1, "only the tagged message");

    // Without a key, on a vouching device: any bytes after the magic.
    let (mut c, mut d) = ping_pong_pair();
    let h = c
        .start_send(req(1, b"", Body::Copied(b"first"), true))
        .unwrap();
    c.detach(h).unwrap();
    run_on(&mut [&mut c, &mut d], &mut rings, true, |es| {
        es[1].state().len() == 1
    });
    let seed = 0xC0C0;
    let mut rng = crate::rng::Rng::new(seed);
    let (frames, compact) = (d.stats().rx_frames, d.stats().rx_compact);
    for _ in 0..20_000 {
        let n = 1 + rng.below(48) as usize;
        let mut g: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        if let Some(b0) = g.first_mut() {
            *b0 = if rng.below(2) == 0 {
                wire::COMPACT_MAGIC
            } else {
                wire::COMPACT_PUT_MAGIC
            };
        }
        d.handle_frame(
            Instant::ZERO,
            Received {
                source: Some(NodeAddr(rng.below(3) as u16)),
                ..Received::from(&g[..])
            },
            &mut NoMemory,
        );
        d.record();
    }
    let st = d.stats();
    assert_eq!(st.rx_compact - compact, 20_000, "seed {seed:#x}");
    assert_eq!(st.rx_frames - frames, 20_000, "seed {seed:#x}");
    assert!(st.rx_malformed > 10_000, "seed {seed:#x}: {st:?}");
    // The channel still works.
    let h = c
        .start_send(req(1, b"", Body::Copied(b"after"), true))
        .unwrap();
    c.detach(h).unwrap();
    let before = d.state().len();
    run_on(&mut [&mut c, &mut d], &mut rings, true, |es| {
        es[1].state().iter().skip(before).any(|e| e.1 == b"after")
    });
}

#[test]
fn short_copies_move_every_byte_and_nothing_else() {
    let src: [u8; 40] = core::array::from_fn(|i| i as u8 + 1);
    for n in 0..=40 {
        let mut dst = [0xEEu8; 48];
        super::copy_short(&mut dst[4..4 + n], &src[..n]);
        assert_eq!(&dst[4..4 + n], &src[..n], "{n} bytes");
        assert!(
            dst[..4].iter().chain(&dst[4 + n..]).all(|&b| b == 0xEE),
            "{n} bytes"
        );
    }
}

#[test]
fn a_device_is_asked_its_capabilities_at_the_first_poll_only() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    b.bind_port(2, input(leak(64), Fill::Restart, 3)).unwrap();
    let mut now = Instant::ZERO;
    let mut asked = [0u32; 2];
    for i in 0..200 {
        if i == 1 {
            a.start_send(req(1, &[], Body::Borrowed(b"hello"), true))
                .unwrap();
        }
        for (k, e) in [&mut a, &mut b].into_iter().enumerate() {
            let mut dev = Special::new(view(&mut rings, k as u16));
            e.poll(now, &mut dev, None);
            asked[k] += dev.asked.get();
        }
        now += Duration::from_micros(10);
    }
    // The message went through: the device's limits were known.
    assert_eq!(b.state().len(), 1);
    assert_eq!(&b.state()[0].1[..], b"hello");
    assert_eq!(asked, [1, 1], "capabilities asked at every poll");
}

/// A rank that lost the end of its start-up exchange (`crate::session`) is answered
/// by its peer's running engine, and gets through to the same run key; a HELLO of
/// another job, or with a bad tag, is dropped.
#[test]
fn a_running_engine_answers_late_hellos() {
    use crate::session::{Hello, Session};
    use crate::time::Instant as I;
    let key = *b"late hello key!!";
    let mut s0 = Session::with_ranks(0, 2, 0xAB, key, [1; 16]);
    let mut s1 = Session::with_ranks(1, 2, 0xAB, key, [2; 16]);
    // Rank 0 gets through, but every HELLO of rank 0's that says DONE is lost.
    for round in 0..20 {
        let now = I::from_millis(round);
        let (mut to0, mut to1) = (Vec::new(), Vec::new());
        s1.poll_transmit(now, |_, f| {
            to0.push(f.to_vec());
            true
        });
        s0.poll_transmit(now, |_, f| {
            to1.push(f.to_vec());
            true
        });
        for f in to0 {
            s0.handle(&f);
        }
        for f in to1.iter().filter(|f| f[1] & 1 == 0) {
            s1.handle(f);
        }
    }
    assert!(s0.complete() && !s1.complete());
    let mut cfg = Config::new(0xAB, 7, 0);
    cfg.auth_key = s0.run_key();
    cfg.hello = Some(s0.hello_config());
    let mut e = Engine::new(cfg, G, Storage::with_capacity(cap())).unwrap();
    let mut rings = rings();
    let mut now = Instant::from_millis(100);
    for _ in 0..50 {
        if s1.complete() {
            break;
        }
        s1.poll(now, &mut view(&mut rings, 1));
        e.poll(now, &mut view(&mut rings, 0), None);
        now += Duration::from_millis(20);
    }
    assert!(s1.complete(), "the straggler got through");
    assert_eq!(s1.run_key(), cfg.auth_key);
    assert!(e.stats().hellos_answered > 0);
    // Another job's HELLO and a forged one: dropped, never answered.
    let h = Hello {
        from: 1,
        to: 0,
        job: 0xAC,
        nonce: [2; 16],
        echo: [1; 16],
        done: false,
        seen: false,
    };
    let hk = crate::session::hello_key(&key);
    let before = e.stats().hellos_answered;
    e.handle_frame(now, Received::from(&h.emit(&hk)[..]), &mut NoMemory);
    let mut bad = Hello { job: 0xAB, ..h }.emit(&hk);
    bad[30] ^= 1;
    e.handle_frame(now, Received::from(&bad[..]), &mut NoMemory);
    e.poll(now, &mut view(&mut rings, 0), None);
    assert_eq!(e.stats().hellos_answered, before);
    assert_eq!(e.stats().hellos_dropped, 2);
}

/// The handlers a test's `poll_with` runs: each logs its notice and answers a
/// message `b"ping"` with `b"pong"` through port 2 of its view.
struct Handlers<'l> {
    log: &'l mut Log,
    replies: Vec<Result<usize, Error>>,
}

impl<'a> Upcalls<'a> for Handlers<'_> {
    fn upcall(&mut self, n: &Notice, mut view: HandlerView<'_, 'a>) {
        let data = view.data(n).to_vec();
        if data == b"ping" {
            self.replies.push(view.send(2, b"", b"pong", true));
        }
        self.log.push((n.port, data, n.fault, n.src.src_node));
    }
}

/// A message that header prediction delivers reaches its handler inside the poll
/// that received its frame, with nothing queued, where no notice waits before it;
/// after a waiting notice it is queued behind it, in order. What the handler sends
/// leaves before that poll returns.
#[test]
fn a_predicted_message_runs_its_handler_inside_the_poll_in_order() {
    let mut rings = rings();
    let (mut a, mut b) = (engine(7, 0), engine(7, 1));
    a.bind_port(1, out(1, 2)).unwrap();
    a.bind_port(2, input(leak(16), Fill::Restart, 3)).unwrap();
    b.bind_port(
        2,
        PortSetup {
            dest: Some(Dest {
                group: 7,
                node: 0,
                port: 2,
            }),
            ..input(leak(16), Fill::Restart, 3)
        },
    )
    .unwrap();
    let mut now = Instant::ZERO;
    // Sends `msg` from a and polls b with handlers (`direct`) or without, until
    // b has its frame; the count of handlers b ran inside its polls.
    let mut exchange = |a: &mut TE, b: &mut TE, msg: &'static [u8], direct: bool| {
        let h = a
            .start_send(req(1, b"", Body::Borrowed(msg), true))
            .unwrap();
        let mut direct_log = Log::new();
        let mut replies = Vec::new();
        for _ in 0..1000 {
            a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
            let mut dev = Loopback::new(&mut rings, NodeAddr(1));
            let got = if direct {
                let mut hs = Handlers {
                    log: &mut direct_log,
                    replies: Vec::new(),
                };
                b.e.poll_with(now, &mut dev, None, &mut NoMemory, Some(&mut hs));
                replies.append(&mut hs.replies);
                b.e.stats().delivered
            } else {
                b.e.poll(now, &mut dev, None);
                b.e.stats().delivered
            };
            now += Duration::from_micros(10);
            if a.send_status(h) != Ok(SendStatus::Pending) && got > 0 {
                a.release(h).unwrap();
                return (direct_log, replies);
            }
        }
        panic!("no progress");
    };
    let delivered = |b: &TE| b.stats().delivered;
    // The first opens the channel: not predicted, queued.
    let (log, _) = exchange(&mut a, &mut b, b"one", true);
    assert!(log.is_empty() && delivered(&b) == 1);
    b.record();
    assert_eq!(b.state().len(), 1);
    // Predicted, nothing waiting: run inside the poll, its reply sent in it.
    let (log, replies) = exchange(&mut a, &mut b, b"ping", true);
    assert_eq!(log, [(2, b"ping".to_vec(), None, 0)]);
    assert_eq!(replies, [Ok(4)]);
    assert_eq!(b.notices_pending(), 0);
    assert_eq!(b.stats().upcalls_in_poll, 1);
    assert_eq!(b.outbox_pending(), 0, "the reply left within the poll");
    assert!(b.stats().tx_queued_at_once >= 1);
    // A notice left waiting (a poll without handlers), then a predicted message:
    // queued behind it.
    exchange(&mut a, &mut b, b"three", false);
    assert_eq!(b.notices_pending(), 1);
    let (log, _) = exchange(&mut a, &mut b, b"four", true);
    assert!(log.is_empty(), "{log:?}");
    assert_eq!(b.notices_pending(), 2);
    assert_eq!(b.stats().upcalls_in_poll, 1);
    // (Taken late, against the contract: the GO_BACK buffer holds "four" by then,
    // so the order shows in the lengths.)
    b.record();
    let got: Vec<_> = b.state().iter().map(|m| m.1.len()).collect();
    assert_eq!(got, [3, 5, 4]);
    // a has the reply.
    let mut dev = Loopback::new(&mut rings, NodeAddr(0));
    a.poll(now, &mut dev, None);
    assert!(a.state().iter().any(|m| m.1 == b"pong"), "{:?}", a.state());
}
