//! A bounded mutation fuzzer for the parser and the engine, one for a broadcast
//! relay, and a replay test.
//!
//! Seeds are real frames (data, acks, barrier tokens, rejections, LFC packets to one
//! peer, to a multicast group and to all) that two engines
//! exchange; each round mutates some (bit flips, byte writes, truncation, splices,
//! length and offset fields pushed to extremes) and feeds them to a receiving engine,
//! half the time re-signed with the job's key so that the mutations reach past the
//! authentication check. Nothing may panic, and the counters must add up.
//!
//! It runs for `VOLLEY_FUZZ_SECS` seconds (10 by default, 60 when `CI` is set; the
//! relay's 5 and 30). Run it
//! longer, optimised, with another seed:
//! `VOLLEY_FUZZ_SECS=3600 VOLLEY_SEED=7 cargo test --release -p volley-core --test fuzz_engine`.

use volley_core::engine::{
    Body, Capacity, Config, Dest, Engine, Fill, Group, Members, NoMemory, PortSetup, Received,
    RecvBuf, SendRequest, Storage, Tree, BROADCAST, MCAST_ALL,
};
use volley_core::phy::{Device, Loopback, Ring, RxToken};
use volley_core::rng::Rng;
use volley_core::time::{Duration, Instant};
use volley_core::wire::{self, AuthKey, Flags, HEADER_LEN, TAG_LEN};
use volley_core::NodeAddr;

const GROUPS: &[Group<'static>] = &[Group {
    id: 1,
    members: Members::Range { first: 0, count: 2 },
}];
const KEY: AuthKey = *b"fuzzing-job-key!";

fn seed() -> u64 {
    std::env::var("VOLLEY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xF022_0001)
}

/// Takes the engine's notices (what a personality's handlers would be given),
/// reading each one's data; returns how many.
fn notices(e: &mut Engine<'static>) -> u64 {
    let mut n = 0;
    while let Some((notice, view)) = e.next_notice() {
        let _ = view.data(&notice);
        n += 1;
    }
    n
}

fn engine(node: u16, key: Option<AuthKey>) -> Engine<'static> {
    let mut cfg = Config::new(9, 1, node);
    cfg.auth_key = key;
    cfg.reassembly_timeout = Duration::from_micros(200);
    cfg.unbound_grace = Duration::from_micros(500);
    let cap = Capacity {
        ports: 1025,
        channels: 2,
        fabric_nodes: 2,
        ops: 16,
        assemblies: 4,
        eager: 4,
    };
    let storage = Storage::with_capacity(cap).with_packets(8, 8, 4, 16);
    let mut e = Engine::new(cfg, GROUPS, storage).unwrap();
    e.create_multicast_group(&[1, 0]).unwrap();
    for (port, kind) in [(1u16, Fill::Restart), (2, Fill::Append)] {
        e.bind_port(
            port,
            PortSetup {
                dest: Some(Dest {
                    group: 1,
                    node: 1 - node,
                    port,
                }),
                input: true,
                recv: true,
                err: true,
                sem: port,
                kind,
                buffer: Some(Vec::leak(vec![0u8; 5000])),
            },
        )
        .unwrap();
    }
    e
}

/// Node `n`'s view of `rings`: one that names each frame's sender where
/// `vouching` (short messages travel compact there, see `wire::compact`).
fn view(rings: &mut [Ring<64, 1500>], n: u16, vouching: bool) -> Loopback<'_, 64, 1500> {
    if vouching {
        Loopback::vouching(rings, NodeAddr(n))
    } else {
        Loopback::new(rings, NodeAddr(n))
    }
}

/// One round of `a` talking to `b` over loopback rings (`vouching` ones, see
/// [`view`]), every frame `b` receives recorded as it is handled; `b`'s notices
/// are counted in `handled`.
fn step(
    a: &mut Engine<'static>,
    b: &mut Engine<'static>,
    (rings, vouching): (&mut [Ring<64, 1500>], bool),
    now: Instant,
    recorded: &mut Vec<Vec<u8>>,
    handled: &mut u64,
) {
    a.poll(now, &mut view(rings, 0, vouching), None);
    let mut lb = view(rings, 1, vouching);
    b.set_capabilities(lb.capabilities());
    let from = vouching.then_some(NodeAddr(0));
    while let Some(t) = lb.receive(now) {
        t.consume(|f| {
            recorded.push(f.to_vec());
            b.handle_frame(
                now,
                Received {
                    source: from,
                    ..Received::from(f)
                },
                &mut NoMemory,
            )
        });
        *handled += notices(b);
    }
    b.handle_timeout(now);
    b.poll_transmit(now, &mut lb, None);
    *handled += notices(b);
    drain(b);
}

/// Takes every packet delivered and gives it back, reading it first.
fn drain(e: &mut Engine<'static>) -> usize {
    let mut n = 0;
    while let Some(d) = e.next_delivery() {
        assert_eq!(e.packet(d.packet).map(<[u8]>::len), Some(d.len));
        e.packet_free(d.packet).unwrap();
        n += 1;
    }
    n
}

/// Launches packets from `a` to node 1: one unicast, one to the group, one to all.
fn launch_packets(a: &mut Engine<'static>, i: usize) {
    let size = (i * 301) % a.packet_size();
    for to in 0..3 {
        let Ok(p) = a.packet_alloc() else { return };
        a.packet_mut(p).unwrap()[..size].fill(i as u8);
        let r = match to {
            0 => a.launch_unicast(p, 1, size),
            1 => a.launch_multicast(p, 0, size, Tree::Chain),
            _ => a.launch_multicast(p, MCAST_ALL, size, Tree::Binomial),
        };
        if r.is_err() {
            a.packet_free(p).unwrap();
        }
    }
}

/// Frames two engines really exchange: the corpus the mutations start from.
fn corpus(key: Option<AuthKey>, vouching: bool) -> Vec<Vec<u8>> {
    let mut a = engine(0, key);
    let mut b = engine(1, key);
    let mut rings: Vec<Ring<64, 1500>> = (0..2).map(|_| Ring::new()).collect();
    let mut frames = Vec::new();
    let mut now = Instant::ZERO;
    for (i, len) in [0usize, 10, 1400, 4000, 20_000].into_iter().enumerate() {
        let body: &'static [u8] = Vec::leak(vec![i as u8; len]);
        let _ = a.start_send(SendRequest {
            port: 1,
            head: b"hd",
            body: Body::Borrowed(body),
            reliable: i % 2 == 0,
        });
        // And a short one of the other service (compact on vouching rings).
        let _ = a.start_send(SendRequest {
            port: 2,
            head: b"",
            body: Body::Borrowed(&body[..len.min(9)]),
            reliable: i % 2 == 1,
        });
        let _ = a.start_send(SendRequest {
            port: 7,
            head: b"",
            body: Body::Borrowed(body),
            reliable: true,
        }); // unbound: rejected
        let _ = a.start_barrier();
        let _ = b.start_barrier();
        launch_packets(&mut a, i);
        for _ in 0..50 {
            now += Duration::from_micros(50);
            step(
                &mut a,
                &mut b,
                (&mut rings, vouching),
                now,
                &mut frames,
                &mut 0,
            );
        }
    }
    frames
}

/// Re-signs a (mutated) frame with the key, so that the engine looks past the tag.
fn resign(f: &mut [u8]) {
    if f.len() < HEADER_LEN {
        return;
    }
    let plen = u16::from_be_bytes([f[38], f[39]]) as usize;
    let end = HEADER_LEN + plen;
    if f.len() < end + TAG_LEN {
        return;
    }
    let flags = u16::from_be_bytes([f[2], f[3]]) | Flags::AUTH.bits();
    f[2..4].copy_from_slice(&flags.to_be_bytes());
    let mut h = [0u8; HEADER_LEN];
    h.copy_from_slice(&f[..HEADER_LEN]);
    let t = wire::tag(&KEY, &h, &f[HEADER_LEN..end]);
    f[end..end + TAG_LEN].copy_from_slice(&t);
}

fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut f = corpus[rng.below(corpus.len() as u64) as usize].clone();
    for _ in 0..=rng.below(4) {
        let n = f.len().max(1);
        match rng.below(8) {
            0 => {
                let i = rng.below(n as u64) as usize;
                if let Some(b) = f.get_mut(i) {
                    *b ^= 1 << rng.below(8);
                }
            }
            1 => {
                let i = rng.below(n as u64) as usize;
                if let Some(b) = f.get_mut(i) {
                    *b = rng.next_u64() as u8;
                }
            }
            2 => f.truncate(rng.below(n as u64 + 1) as usize),
            3 => {
                // Splice the tail of another frame.
                let other = &corpus[rng.below(corpus.len() as u64) as usize];
                let at = rng.below(n as u64) as usize;
                f.truncate(at);
                f.extend_from_slice(&other[at.min(other.len())..]);
            }
            4 if f.len() >= HEADER_LEN => {
                // A length, offset, message or sequence field pushed to an extreme.
                let fields = [
                    (38usize, 2usize),
                    (44, 4),
                    (48, 4),
                    (40, 4),
                    (20, 4),
                    (24, 4),
                ];
                let (at, w) = fields[rng.below(fields.len() as u64) as usize];
                let v: u64 = [0, 1, u64::MAX, rng.next_u64()][rng.below(4) as usize];
                f[at..at + w].copy_from_slice(&v.to_be_bytes()[8 - w..]);
            }
            5 if f.len() >= HEADER_LEN => {
                // Another kind, another port.
                f[1] = rng.below(13) as u8;
                f[18..20].copy_from_slice(&(rng.below(1100) as u16).to_be_bytes());
            }
            6 => f.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8)),
            _ => {}
        }
    }
    f
}

#[test]
fn mutated_frames_never_panic_the_engine() {
    let seed = seed();
    // A minute in CI (which sets CI=true), ten seconds on a developer's machine.
    let default = if std::env::var_os("CI").is_some() {
        60
    } else {
        10
    };
    let secs: u64 = std::env::var("VOLLEY_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    // Shown with the output of a test that panics: how to repeat it.
    eprintln!("fuzzing with VOLLEY_SEED={seed}");
    let keyed = corpus(Some(KEY), false);
    let plain = corpus(None, false);
    // Frames of a job without a key on rings that name their sender: short
    // messages compact.
    let vouched = corpus(None, true);
    let compact = vouched
        .iter()
        .filter(|f| f.first() == Some(&wire::COMPACT_MAGIC))
        .count();
    assert!(
        keyed.len() > 20 && plain.len() > 20 && compact >= 5,
        "a corpus to start from: {} keyed, {} plain, {} vouched ({compact} compact)",
        keyed.len(),
        plain.len(),
        vouched.len()
    );
    let mut rng = Rng::new(seed);
    let start = std::time::Instant::now();
    let (mut frames, mut rounds) = (0u64, 0u64);
    let mut deep = 0u64;
    while start.elapsed().as_secs() < secs {
        rounds += 1;
        // A third of the rounds keyed, a third plain, a third on vouching rings
        // (frames from node 0, as the rings name it).
        let (with_key, vouching) = match rng.below(3) {
            0 => (true, false),
            1 => (false, false),
            _ => (false, true),
        };
        let from = vouching.then_some(NodeAddr(0));
        let start_from = match (with_key, vouching) {
            (true, _) => &keyed,
            (_, true) => &vouched,
            _ => &plain,
        };
        let mut e = engine(1, with_key.then_some(KEY));
        let mut rings: Vec<Ring<64, 1500>> = (0..2).map(|_| Ring::new()).collect();
        // The device's capabilities from the first frame on, not the first poll.
        e.set_capabilities(view(&mut rings, 1, vouching).capabilities());
        let mut now = Instant::ZERO;
        for _ in 0..200 {
            let mut f = mutate(&mut rng, start_from);
            if with_key && rng.chance(0.7) {
                resign(&mut f);
            }
            if rng.chance(0.3) && f.len() >= HEADER_LEN {
                // As a device that sends payloads from where they lie hands it over:
                // header and tag here, the payload there (or a cut anywhere).
                let tag = if with_key && f.len() >= HEADER_LEN + TAG_LEN {
                    TAG_LEN
                } else {
                    0
                };
                let (head, payload) = if rng.chance(0.8) {
                    let end = f.len() - tag;
                    let mut head = f[..HEADER_LEN].to_vec();
                    head.extend_from_slice(&f[end..]);
                    (head, f[HEADER_LEN..end].to_vec())
                } else {
                    let k = rng.below(f.len() as u64 + 1) as usize;
                    (f[..k].to_vec(), f[k..].to_vec())
                };
                e.handle_frame(
                    now,
                    Received {
                        bytes: &head,
                        payload: Some(&payload),
                        source: from,
                    },
                    &mut NoMemory,
                );
            } else {
                e.handle_frame(
                    now,
                    Received {
                        source: from,
                        ..Received::from(&f[..])
                    },
                    &mut NoMemory,
                );
            }
            notices(&mut e);
            drain(&mut e);
            frames += 1;
            now += Duration::from_micros(rng.below(300));
            e.poll(now, &mut view(&mut rings, 1, vouching), None);
            for r in rings.iter_mut() {
                *r = Ring::new();
            }
        }
        e.handle_timeout(now + Duration::from_secs(1));
        let s = e.stats();
        assert_eq!(s.rx_frames, 200, "seed {seed} round {rounds}");
        assert!(
            s.delivered + s.truncated <= s.rx_frames,
            "seed {seed} round {rounds}: {s:?}"
        );
        deep += s.rx_frames - s.rx_malformed - s.rx_bad_crc - s.rx_unauthenticated;
    }
    println!(
        "seed {seed}: {frames} mutated frames in {rounds} rounds, {deep} past the parser, in {secs} s"
    );
    assert!(
        deep > frames / 10,
        "seed {seed}: the mutations must reach the engine"
    );
}

/// Frames recorded on the wire and replayed after the exchange: nothing is delivered
/// twice, with or without the job's key.
#[test]
fn replayed_frames_are_rejected() {
    for (key, vouching) in [(Some(KEY), false), (None, false), (None, true)] {
        let from = vouching.then_some(NodeAddr(0));
        let mut a = engine(0, key);
        let mut b = engine(1, key);
        let mut rings: Vec<Ring<64, 1500>> = (0..2).map(|_| Ring::new()).collect();
        let mut recorded = Vec::new();
        let mut handled = 0;
        let mut now = Instant::ZERO;
        for (i, len) in [10usize, 3000, 0, 4000].into_iter().enumerate() {
            let body: &'static [u8] = Vec::leak(vec![i as u8; len]);
            a.start_send(SendRequest {
                port: 1,
                head: b"",
                body: Body::Borrowed(body),
                reliable: i % 2 == 0,
            })
            .unwrap();
            launch_packets(&mut a, i + 1);
            for _ in 0..40 {
                now += Duration::from_micros(50);
                step(
                    &mut a,
                    &mut b,
                    (&mut rings, vouching),
                    now,
                    &mut recorded,
                    &mut handled,
                );
            }
        }
        assert_eq!(handled, 4, "{key:?}: four messages");
        assert_eq!(
            b.stats().delivered,
            4 + 4 * 3,
            "{key:?}: and twelve packets"
        );
        let before = b.stats().delivered;
        for f in &recorded {
            now += Duration::from_micros(10);
            b.handle_frame(
                now,
                Received {
                    source: from,
                    ..Received::from(&f[..])
                },
                &mut NoMemory,
            );
            handled += notices(&mut b);
            assert_eq!(
                drain(&mut b),
                0,
                "{key:?}: a replayed packet is delivered again"
            );
        }
        b.handle_timeout(now + Duration::from_secs(1));
        handled += notices(&mut b);
        assert_eq!(handled, 4, "{key:?}: a replay delivers nothing");
        assert_eq!(b.stats().delivered, before);
        assert!(b.stats().rx_duplicates + b.stats().rx_dropped >= recorded.len() as u64 / 2);
    }
}

const GROUP4: &[Group<'static>] = &[Group {
    id: 1,
    members: Members::Range { first: 0, count: 4 },
}];

/// One of four engines with a broadcast port (3): the binomial tree from root 0
/// makes node 2 relay to node 3, and roots send long broadcasts flat after a fence.
fn bcast_engine(node: u16, key: Option<AuthKey>) -> Engine<'static> {
    let mut cfg = Config::new(9, 1, node);
    cfg.auth_key = key;
    cfg.reassembly_timeout = Duration::from_micros(200);
    cfg.peer_timeout = Duration::from_millis(20);
    cfg.keepalive = Duration::from_millis(2);
    let cap = Capacity {
        ports: 8,
        channels: 4,
        fabric_nodes: 4,
        ops: 32,
        assemblies: 8,
        // Few enough that the longest broadcasts go flat, after a fence.
        eager: 4,
    };
    let mut e = Engine::new(cfg, GROUP4, Storage::with_capacity(cap)).unwrap();
    e.bind_port(
        3,
        PortSetup {
            dest: Some(Dest {
                group: 1,
                node: BROADCAST,
                port: 3,
            }),
            input: true,
            recv: true,
            err: true,
            sem: 3,
            kind: Fill::Restart,
            buffer: None,
        },
    )
    .unwrap();
    // Owned, so that it goes with the engine: rounds make thousands of them.
    let buf = vec![0u8; 250_000].into_boxed_slice();
    e.ports_mut().post_recv(3, RecvBuf::Owned(buf)).unwrap();
    e
}

/// Polls every engine of `es` once over `rings`; what node `target` receives is
/// handed to it here (and recorded), with `extra` frames of the fuzzer's after it.
fn bcast_step(
    es: &mut [Engine<'static>],
    rings: &mut [Ring<64, 1500>],
    now: Instant,
    target: usize,
    recorded: &mut Vec<Vec<u8>>,
    extra: &mut dyn FnMut(&mut Engine<'static>),
) {
    for (i, e) in es.iter_mut().enumerate() {
        let mut lb = Loopback::new(rings, NodeAddr(i as u16));
        if i != target {
            e.poll(now, &mut lb, None);
        } else {
            e.set_capabilities(lb.capabilities());
            while let Some(t) = lb.receive(now) {
                t.consume(|f| {
                    recorded.push(f.to_vec());
                    e.handle_frame(now, Received::from(f), &mut NoMemory)
                });
                notices(e);
            }
            extra(e);
            e.handle_timeout(now);
            e.poll_transmit(now, &mut lb, None);
        }
        notices(e);
    }
}

/// Broadcast frames (tree fragments with their prefix, flat ones, fences and their
/// answers, aborts) mutated and fed to a relay between real traffic, the roots
/// broadcasting and the clock jumping past the liveness timers: nothing panics.
#[test]
fn mutated_broadcast_frames_never_panic_a_relay() {
    let seed = seed();
    eprintln!("fuzzing with VOLLEY_SEED={seed}");
    let secs: u64 = std::env::var("VOLLEY_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if std::env::var_os("CI").is_some() {
            30
        } else {
            5
        });
    let sizes = [0usize, 10, 3000, 16_384, 40_000, 200_000];
    let bodies: Vec<&'static [u8]> = sizes
        .iter()
        .map(|&n| &*Vec::leak((0..n).map(|i| i as u8).collect()))
        .collect();
    // The corpus: what relay 2 receives while roots 0 and 1 broadcast every size.
    let mut corpus = [Vec::new(), Vec::new()];
    for (k, key) in [Some(KEY), None].into_iter().enumerate() {
        let mut es: Vec<_> = (0..4).map(|i| bcast_engine(i, key)).collect();
        let mut rings: Vec<Ring<64, 1500>> = (0..4).map(|_| Ring::new()).collect();
        let mut now = Instant::ZERO;
        for (i, body) in bodies.iter().enumerate() {
            let _ = es[0].start_send(SendRequest {
                port: 3,
                head: b"",
                body: Body::Borrowed(body),
                reliable: true,
            });
            let _ = es[1].start_send(SendRequest {
                port: 3,
                head: b"hd",
                body: Body::Borrowed(bodies[i / 2]),
                reliable: true,
            });
            for _ in 0..400 {
                now += Duration::from_micros(20);
                bcast_step(&mut es, &mut rings, now, 2, &mut corpus[k], &mut |_| {});
            }
        }
        let s = es[0].stats();
        assert!(s.fences > 0, "the corpus has fences: {s:?}");
        // Broadcast fragments (tree and flat ones alike carry the root's prefix),
        // and a fence asked of the relay before a flat one.
        let kind = |f: &Vec<u8>, k: u8| f[1] == k;
        let frags = corpus[k].iter().filter(|f| kind(f, 4)).count();
        let fences = corpus[k]
            .iter()
            .filter(|f| kind(f, 5) && f[44..48] == 4u32.to_be_bytes())
            .count();
        assert!(
            frags > 100 && fences > 0,
            "corpus: {frags} fragments, {fences} fences"
        );
    }
    assert!(
        corpus.iter().all(|c| c.len() > 100),
        "a corpus to start from"
    );
    let mut rng = Rng::new(seed ^ 0xBCA5);
    let start = std::time::Instant::now();
    let (mut frames, mut rounds, mut deep, mut passed_on) = (0u64, 0u64, 0u64, 0u64);
    while start.elapsed().as_secs() < secs {
        rounds += 1;
        let with_key = rng.chance(0.5);
        let key = with_key.then_some(KEY);
        let c = &corpus[usize::from(!with_key)];
        let mut es: Vec<_> = (0..4).map(|i| bcast_engine(i, key)).collect();
        let mut rings: Vec<Ring<64, 1500>> = (0..4).map(|_| Ring::new()).collect();
        let mut now = Instant::ZERO;
        let mut seen = Vec::new();
        for _ in 0..300 {
            for root in [0, 1, 3] {
                if rng.chance(0.05) {
                    let b = bodies[rng.below(bodies.len() as u64) as usize];
                    let _ = es[root].start_send(SendRequest {
                        port: 3,
                        head: b"",
                        body: Body::Borrowed(b),
                        reliable: true,
                    });
                }
            }
            // Now and then a long silence: probes, fences given up, peers declared dead.
            now += if rng.chance(0.02) {
                Duration::from_millis(rng.below(40))
            } else {
                Duration::from_micros(rng.below(60))
            };
            let mut fed = 0;
            bcast_step(&mut es, &mut rings, now, 2, &mut seen, &mut |e| {
                for _ in 0..rng.below(4) {
                    let mut f = mutate(&mut rng, c);
                    if with_key && rng.chance(0.8) {
                        resign(&mut f);
                    }
                    e.handle_frame(now, Received::from(&f[..]), &mut NoMemory);
                    notices(e);
                    fed += 1;
                }
            });
            frames += fed;
            seen.clear();
        }
        let s = es[2].stats();
        deep += s.rx_frames - s.rx_malformed - s.rx_bad_crc - s.rx_unauthenticated;
        // What reached node 3 came through relay 2 (or, around it, from the roots).
        passed_on += es[3].stats().delivered;
    }
    println!(
        "seed {seed}: {frames} mutated broadcast frames in {rounds} rounds, {deep} frames past \
         the relay's parser, {passed_on} broadcasts delivered below it, {secs} s"
    );
    assert!(frames > rounds * 100, "seed {seed}: frames were fed");
    assert!(
        passed_on > rounds,
        "seed {seed}: the relay kept passing broadcasts on"
    );
}
