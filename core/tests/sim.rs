//! Seeded simulations of many engines over a faulty fabric. Every failure message
//! carries the seed; rerun one with `VOLLEY_SEED=<seed> cargo test -p volley-core --test sim`.

use std::collections::HashMap;

use volley_core::engine::{Capacity, Config, Group, Members, Storage};
use volley_core::gamma::{PortHandlers, Upcall, BROADCAST, ERR_SENDFAILURE, GO_BACK, PORTS};
use volley_core::phy::FaultConfig;
use volley_core::sim::{Sim, SimClock, SimConfig, SimDevice, SimGamma};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;

mod common;
use common::groups;

fn seed() -> u64 {
    std::env::var("VOLLEY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0001)
}

fn lossy() -> FaultConfig {
    common::faults(0.20, 0.05, 0.05, 0.01)
}

fn cfg(group: u16, node: u16) -> Config {
    let mut c = Config::new(0x1234, group, node);
    c.rto_initial = Duration::from_micros(200);
    c.rto_max = Duration::from_millis(20);
    c.peer_timeout = Duration::from_millis(100);
    c.ack_delay = Duration::from_micros(10);
    c
}

/// `c` for a test in which nobody dies under heavy loss. A member that refuses a
/// sender's frames for a while (its buffers full) is probed once per `rto_max`, and
/// declared dead when every probe and answer of `peer_timeout` is lost: at 100 ms,
/// five probes, which 20% loss each way defeats about once in 1,500 such waits
/// (found by seeds; `VOLLEY_PEER_TIMEOUT` is 30 s, 150 probes, in a hosted rank).
fn patient(mut c: Config) -> Config {
    c.peer_timeout = Duration::from_secs(2);
    c
}

fn leak<T>(v: Vec<T>) -> &'static mut [T] {
    Vec::leak(v)
}

fn storage(fabric: usize, channels: usize) -> Storage<'static> {
    sized(fabric, channels, 256, 8, 4)
}

/// Storage with every table sized by the caller (the scaling tests keep them small
/// at 1024 nodes).
fn sized(
    fabric: usize,
    channels: usize,
    ops: usize,
    assemblies: usize,
    eager: usize,
) -> Storage<'static> {
    Storage::with_capacity(Capacity {
        ports: PORTS,
        channels,
        fabric_nodes: fabric,
        ops,
        assemblies,
        eager,
    })
}

/// An empty handler table for every GAMMA port.
fn handlers<S>() -> managed::ManagedSlice<'static, PortHandlers<'static, S>> {
    let mut v = Vec::new();
    v.resize_with(PORTS, || PortHandlers::EMPTY);
    v.into()
}

fn gamma<S>(
    groups: &'static [Group<'static>],
    c: Config,
    fabric: usize,
    channels: usize,
    dev: SimDevice,
    clock: SimClock,
    state: S,
) -> SimGamma<'static, S> {
    SimGamma::init(
        c,
        groups,
        storage(fabric, channels),
        handlers(),
        dev,
        clock,
        state,
    )
    .unwrap()
}

// ------------------------------------------------------------------ messages

fn byte(src: u16, k: usize, i: usize) -> u8 {
    // Every input bit reaches the top byte through the multiply.
    let x = (i as u64)
        .wrapping_add((k as u64) << 32)
        .wrapping_add((src as u64) << 52);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

#[test]
fn test_patterns_tell_messages_apart() {
    assert_ne!(pattern(0, 1, 64), pattern(1, 1, 64));
    assert_ne!(pattern(0, 1, 64), pattern(0, 2, 64));
}

fn pattern(src: u16, k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(src, k, i)).collect()
}

#[derive(Default)]
struct Check {
    /// Sizes each source will send to this node, in order.
    plan: HashMap<u16, Vec<usize>>,
    got: HashMap<u16, usize>,
    errors: Vec<String>,
}

fn on_message(u: &mut Upcall<'_, '_, Check>) {
    let src = u.source().node;
    let errno = u.errno();
    let len = u.len();
    // Verify the bytes in place, before the port may take another message.
    let k = u.state().got.get(&src).copied().unwrap_or(0);
    let expect = u.state().plan.get(&src).and_then(|p| p.get(k)).copied();
    let ok = expect == Some(len) && errno.is_none() && {
        let d = u.data();
        d.iter().enumerate().all(|(i, &b)| b == byte(src, k, i))
    };
    let st = u.state();
    if !ok {
        st.errors.push(format!(
            "from {src}: message {k}: {len} bytes, errno {errno:?}, expected {expect:?}"
        ));
    }
    *st.got.entry(src).or_default() += 1;
}

#[test]
fn flowctl_messages_survive_loss_duplication_reordering_corruption() {
    let seed = seed();
    let plans: Vec<(u16, u16, Vec<usize>)> = vec![
        (
            1,
            0,
            vec![
                0,
                1,
                20,
                1443,
                1444,
                1445,
                3000,
                65_536,
                1 << 20,
                16 << 20,
                7,
            ],
        ),
        (2, 0, vec![5, 100_000, 0, 2 << 20, 333]),
        (0, 1, vec![12_345, 0, 1]),
    ];
    let g = groups(3);
    let mut sc = SimConfig::lan(seed);
    sc.faults = lossy();
    let mut sim = Sim::new(3, sc, |i, dev, clock| {
        let mut check = Check::default();
        for (src, dst, sizes) in &plans {
            if *dst as usize == i {
                check.plan.insert(*src, sizes.clone());
            }
        }
        gamma(g, cfg(1, i as u16), 3, 4, dev, clock, check)
    });
    // Ports: node s sends from port 10 + dst; node d receives from s on port 20 + s.
    for (src, dst, sizes) in &plans {
        let biggest = *sizes.iter().max().unwrap();
        let n = &mut sim.nodes[*dst as usize];
        n.set_active_port(
            20 + src,
            *src,
            1,
            0,
            Some(on_message),
            Some(on_message),
            *src,
            GO_BACK,
            Some(leak(vec![0u8; biggest])),
        )
        .unwrap();
        sim.nodes[*src as usize]
            .set_passive_port(10 + dst, *dst, 1, 20 + src, 9, GO_BACK, None)
            .unwrap();
    }
    let mut handles = Vec::new();
    for (src, dst, sizes) in &plans {
        for (k, &len) in sizes.iter().enumerate() {
            let data: &'static [u8] = leak(pattern(*src, k, len));
            handles.push((
                *src,
                sim.nodes[*src as usize]
                    .isend_flowctl(10 + dst, data)
                    .unwrap(),
            ));
        }
    }
    let total: usize = plans.iter().map(|p| p.2.len()).sum();
    let r = sim.run_until(Instant::from_millis(60_000), |nodes, _| {
        nodes
            .iter()
            .map(|n| n.state().got.values().sum::<usize>())
            .sum::<usize>()
            >= total
    });
    if r.is_err() {
        for n in &sim.nodes {
            eprintln!(
                "got {:?} stats {:?} dev {:?}",
                n.state().got,
                n.engine().stats(),
                n.device().stats()
            );
        }
    }
    assert!(r.is_ok(), "seed {seed}: not all delivered by {:?}", r);
    // Senders learn of completion.
    let r = sim.run_until(Instant::from_millis(120_000), |nodes, _| {
        handles.iter().all(|(s, h)| {
            nodes[*s as usize].engine().send_status(*h)
                != Ok(volley_core::engine::SendStatus::Pending)
        })
    });
    assert!(r.is_ok(), "seed {seed}: sends never completed");
    for (s, h) in &handles {
        assert_eq!(sim.nodes[*s as usize].tsend(*h), Ok(true), "seed {seed}");
    }
    for (i, n) in sim.nodes.iter().enumerate() {
        assert!(
            n.state().errors.is_empty(),
            "seed {seed}: node {i}: {:?}",
            n.state().errors
        );
        for (src, count) in &n.state().got {
            assert_eq!(
                *count,
                n.state().plan[src].len(),
                "seed {seed}: node {i} from {src}: exactly once"
            );
        }
    }
    let stats: Vec<_> = sim.nodes.iter().map(|n| *n.engine().stats()).collect();
    let dev: Vec<_> = sim.nodes.iter().map(|n| n.device().stats()).collect();
    assert!(
        stats.iter().map(|s| s.rx_bad_crc).sum::<u64>() > 0,
        "seed {seed}: corruption was injected and caught"
    );
    assert!(
        stats.iter().map(|s| s.rx_duplicates).sum::<u64>() > 0,
        "seed {seed}"
    );
    assert!(
        stats.iter().map(|s| s.retransmits).sum::<u64>() > 0,
        "seed {seed}"
    );
    assert!(
        dev.iter().map(|d| d.reordered).sum::<u64>() > 0,
        "seed {seed}"
    );
    println!(
        "seed {seed}: delivered {total} messages by {}; stats {:?}",
        sim.now(),
        stats[0]
    );
}

// ------------------------------------------------------------------ dead peer

#[derive(Default)]
struct Errors(Vec<(u16, u8)>);

fn on_error(u: &mut Upcall<'_, '_, Errors>) {
    let e = (u.active_port(), u.errno().map_or(0, |e| e as u8));
    u.state().0.push(e);
}

#[test]
fn dead_peer_becomes_sendfailure_in_bounded_time() {
    let seed = seed();
    let g = groups(3);
    let mut sc = SimConfig::lan(seed);
    sc.faults = FaultConfig {
        loss: 0.1,
        ..FaultConfig::default()
    };
    let mut sim = Sim::new(3, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 3, 4, dev, clock, Errors::default())
    });
    sim.nodes[0]
        .set_active_port(1, 1, 1, 1, None, Some(on_error), 3, GO_BACK, None)
        .unwrap();
    sim.nodes[0]
        .set_passive_port(2, 2, 1, 1, 4, GO_BACK, None)
        .unwrap();
    sim.nodes[1]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, Some(leak(vec![0; 64])))
        .unwrap();
    sim.nodes[2]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, Some(leak(vec![0; 64])))
        .unwrap();
    // One message gets through while node 1 lives.
    let h = sim.nodes[0].isend_flowctl(1, b"alive").unwrap();
    sim.run_until(Instant::from_millis(100), |n, _| {
        n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
    })
    .expect("first send");
    assert_eq!(sim.nodes[0].tsend(h), Ok(true));
    sim.net.kill(1);
    sim.net.kill(2);
    let killed_at = sim.now();
    let h1 = sim.nodes[0].isend_flowctl(1, &[7; 5000]).unwrap();
    let h2 = sim.nodes[0].isend_flowctl(2, b"to a passive port").unwrap();
    let r = sim.run_until(Instant::from_millis(10_000), |n, _| {
        n[0].engine().send_status(h1) != Ok(volley_core::engine::SendStatus::Pending)
            && n[0].engine().send_status(h2) != Ok(volley_core::engine::SendStatus::Pending)
    });
    let at = r.unwrap_or_else(|e| panic!("seed {seed}: no failure reported: {e:?}"));
    let took = at - killed_at;
    // 12 retries, back-off from 200 us capped at 20 ms: under 0.2 s of virtual time.
    assert!(
        took < Duration::from_millis(200),
        "seed {seed}: took {took}"
    );
    assert_eq!(
        sim.nodes[0].tsend(h1),
        Err(volley_core::engine::Error::SendFailure)
    );
    assert_eq!(
        sim.nodes[0].tsend(h2),
        Err(volley_core::engine::Error::SendFailure)
    );
    assert_eq!(
        sim.nodes[0].state().0,
        vec![(1, ERR_SENDFAILURE)],
        "seed {seed}: error handler of port 1"
    );
    // The passive port's failure counts on its semaphore: wait reports it.
    sim.nodes[0].signal(4).unwrap();
    assert_eq!(sim.nodes[0].wait(4, 1), Ok(-1));
    println!("seed {seed}: SENDFAILURE {took} after the peer died");
}

// ------------------------------------------------------------ barrier, bcast

#[derive(Default)]
struct Bar {
    entered: Option<Instant>,
    left: Option<Instant>,
    got: Vec<Vec<u8>>,
}

fn on_bcast(u: &mut Upcall<'_, '_, Bar>) {
    let d = u.data().to_vec();
    u.state().got.push(d);
}

#[test]
fn barrier_and_broadcast_under_loss() {
    let base = seed();
    for n in [2u16, 3, 5, 8, 13, 32, 64] {
        let seed = base ^ n as u64;
        let g = groups(n);
        let mut sc = SimConfig::lan(seed);
        sc.faults = FaultConfig {
            loss: 0.15,
            duplicate: 0.02,
            reorder: 0.05,
            ..lossy()
        };
        sc.faults.corrupt = 0.0;
        let mut sim = Sim::new(n as usize, sc, |i, dev, clock| {
            gamma(
                g,
                cfg(1, i as u16),
                n as usize,
                n as usize,
                dev,
                clock,
                Bar::default(),
            )
        });
        for (i, node) in sim.nodes.iter_mut().enumerate() {
            let dest = if i == 0 { BROADCAST } else { 0 };
            node.set_active_port(
                5,
                dest,
                1,
                5,
                Some(on_bcast),
                None,
                0,
                GO_BACK,
                Some(leak(vec![0; 4096])),
            )
            .unwrap();
        }
        let payload: &'static [u8] = leak(pattern(0, 0, 3000));
        let h = sim.nodes[0].isend_flowctl(5, payload).unwrap();
        // Members enter the barrier at staggered, seeded times.
        let mut rng = volley_core::rng::Rng::new(seed);
        let enter: Vec<Instant> = (0..n)
            .map(|_| Instant::from_micros(rng.below(2_000)))
            .collect();
        let record_exits = |nodes: &mut [SimGamma<'static, Bar>], now: Instant| {
            for node in nodes.iter_mut() {
                let st = node.state();
                if st.entered.is_some()
                    && st.left.is_none()
                    && node.engine().barrier_done() == Ok(true)
                {
                    node.state_mut().left = Some(now);
                }
            }
            nodes.iter().all(|x| x.state().left.is_some())
        };
        let mut order: Vec<usize> = (0..n as usize).collect();
        order.sort_by_key(|&i| enter[i]);
        for i in order {
            let _ = sim.run_until(enter[i], record_exits);
            let now = sim.now();
            sim.nodes[i].state_mut().entered = Some(now);
            sim.nodes[i].sync_start().unwrap();
        }
        let r = sim.run_until(Instant::from_millis(30_000), record_exits);
        assert!(r.is_ok(), "seed {seed}: barrier of {n} did not finish");
        let last_in = sim
            .nodes
            .iter()
            .map(|x| x.state().entered.unwrap())
            .max()
            .unwrap();
        let first_out = sim
            .nodes
            .iter()
            .map(|x| x.state().left.unwrap())
            .min()
            .unwrap();
        assert!(
            first_out >= last_in,
            "seed {seed}: n={n}: someone left at {first_out} before the last arrived at {last_in}"
        );
        sim.run_until(Instant::from_millis(60_000), |nodes, _| {
            nodes[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
        })
        .expect("broadcast completes");
        assert_eq!(sim.nodes[0].tsend(h), Ok(true), "seed {seed}");
        // The root is done once its own copies are in; relays may still be
        // passing theirs on down the tree. Then long enough for any duplicate.
        let all = sim.run_until(Instant::from_millis(90_000), |nodes, _| {
            nodes.iter().skip(1).all(|x| !x.state().got.is_empty())
        });
        assert!(all.is_ok(), "seed {seed}: n={n}: a member never got it");
        let _ = sim.run_until(sim.now() + Duration::from_millis(200), |_, _| false);
        for (i, node) in sim.nodes.iter().enumerate().skip(1) {
            assert_eq!(
                node.state().got.len(),
                1,
                "seed {seed}: n={n}: member {i} got the broadcast once"
            );
            assert_eq!(node.state().got[0], payload, "seed {seed}");
        }
        assert!(
            sim.nodes[0].state().got.is_empty(),
            "the sender does not hear itself"
        );
    }
}

// ------------------------------------------------------------------ isolation

#[derive(Default)]
struct Seen(Vec<Vec<u8>>);

fn on_seen(u: &mut Upcall<'_, '_, Seen>) {
    let d = u.data().to_vec();
    u.state().0.push(d);
}

#[test]
fn groups_and_jobs_are_isolated() {
    let seed = seed();
    // Group 1 at addresses 0..2; group 2 at 2..4. Address 4 claims to be group 2's
    // instance 0 but its table points group 2's instance 1 at address 0 (group 1).
    // Address 5 is group 1's instance 1 with another job key.
    let honest: &'static [Group<'static>] = leak(vec![
        Group {
            id: 1,
            members: Members::Range { first: 0, count: 2 },
        },
        Group {
            id: 2,
            members: Members::Range { first: 2, count: 2 },
        },
    ]);
    let rogue: &'static [Group<'static>] = leak(vec![Group {
        id: 2,
        members: Members::List(leak(vec![NodeAddr(4), NodeAddr(0)])),
    }]);
    let other_job: &'static [Group<'static>] = leak(vec![Group {
        id: 1,
        members: Members::List(leak(vec![NodeAddr(0), NodeAddr(5)])),
    }]);
    // Two jobs on one fabric: its devices cannot vouch for a frame's job, so no
    // compact headers (those carry none).
    let sim_cfg = SimConfig {
        names_senders: false,
        ..SimConfig::lan(seed)
    };
    let mut sim = Sim::new(6, sim_cfg, |i, dev, clock| match i {
        0 | 1 => gamma(honest, cfg(1, i as u16), 6, 4, dev, clock, Seen::default()),
        2 | 3 => gamma(
            honest,
            cfg(2, i as u16 - 2),
            6,
            4,
            dev,
            clock,
            Seen::default(),
        ),
        4 => gamma(rogue, cfg(2, 0), 6, 4, dev, clock, Seen::default()),
        _ => {
            let mut c = cfg(1, 1);
            c.job_key = 0x9999;
            gamma(other_job, c, 6, 4, dev, clock, Seen::default())
        }
    });
    sim.nodes[0]
        .set_active_port(
            1,
            1,
            1,
            1,
            Some(on_seen),
            Some(on_seen),
            0,
            GO_BACK,
            Some(leak(vec![0; 64])),
        )
        .unwrap();
    sim.nodes[1]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[2]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, None)
        .unwrap(); // inter-group: to group 1
    sim.nodes[4]
        .set_passive_port(1, 1, 2, 1, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[5]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, None)
        .unwrap();
    for (n, msg) in [
        (1usize, &b"member"[..]),
        (2, b"other group, addressed right"),
        (4, b"rogue"),
        (5, b"other job"),
    ] {
        sim.nodes[n].send(1, msg).unwrap();
    }
    sim.run_until(Instant::from_millis(5), |_, _| false)
        .unwrap_err();
    let mut got = sim.nodes[0].state().0.clone();
    got.sort();
    assert_eq!(
        got,
        vec![b"member".to_vec(), b"other group, addressed right".to_vec()],
        "seed {seed}"
    );
    let s = sim.nodes[0].engine().stats();
    assert_eq!(s.rx_foreign_group, 1, "seed {seed}: {s:?}");
    assert_eq!(s.rx_foreign_job, 1, "seed {seed}: {s:?}");
}

// ------------------------------------------------------------------ scale

/// Runs `count` barriers on every node, one after the other, each to completion
/// before simulated time `limit`.
fn run_barriers(sim: &mut Sim<SimGamma<'static, ()>>, count: usize, limit: Instant, seed: u64) {
    let n = sim.nodes.len();
    for _ in 0..count {
        for node in sim.nodes.iter_mut() {
            node.sync_start().unwrap();
        }
        sim.run_until(limit, |nodes, _| {
            nodes.iter().all(|x| x.engine().barrier_done() == Ok(true))
        })
        .unwrap_or_else(|e| panic!("seed {seed}: barrier of {n} stuck: {e:?}"));
    }
}

fn barrier_cost(n: u16, seed: u64, rounds: usize) -> Duration {
    let g = groups(n);
    let mut sc = SimConfig::lan(seed);
    sc.latency = Duration::from_micros(5);
    let mut sim = Sim::new(n as usize, sc, |i, dev, clock| {
        let mut s = sized(n as usize, 32, 4, 1, 0);
        s.sems = vec![Default::default(); PORTS].into();
        SimGamma::init(cfg(1, i as u16), g, s, handlers(), dev, clock, ()).unwrap()
    });
    let start = sim.now();
    run_barriers(&mut sim, rounds, Instant::from_millis(10_000), seed);
    Duration::from_nanos((sim.now() - start).total_nanos() / rounds as u64)
}

#[test]
fn barrier_of_1024_nodes_costs_log_n() {
    let seed = seed();
    let small = barrier_cost(16, seed, 3);
    let big = barrier_cost(1024, seed, 3);
    println!("virtual time per barrier: 16 nodes {small}, 1024 nodes {big}");
    // log2: 4 rounds against 10. Linear growth would be 64 times.
    let ratio = big.total_nanos() as f64 / small.total_nanos() as f64;
    assert!(
        ratio < 10.0 / 4.0 * 1.3,
        "seed {seed}: ratio {ratio:.2} is not logarithmic"
    );
    assert!(
        ratio > 1.5,
        "seed {seed}: 1024 nodes cannot be as cheap as 16 ({ratio:.2})"
    );
}

// ------------------------------------------------------------ best effort

#[derive(Default)]
struct BeCheck {
    intact: Vec<u32>,
    lost: u32,
    wrong: Vec<String>,
}

fn on_be(u: &mut Upcall<'_, '_, BeCheck>) {
    if u.errno().is_some() {
        u.state().lost += 1;
        return;
    }
    let d = u.data();
    let len = d.len();
    let k = u32::from_be_bytes(d[..4].try_into().unwrap());
    let ok = len == 4 + be_len(k)
        && d[4..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(1, k as usize, i));
    if ok {
        u.state().intact.push(k);
    } else {
        u.state().wrong.push(format!("message {k}: {len} bytes"));
    }
}

/// Node 0 sends best-effort messages to node 1's port 1, checked by `on_be`.
fn be_pair(seed: u64, faults: FaultConfig) -> Sim<SimGamma<'static, BeCheck>> {
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    sc.faults = faults;
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, BeCheck::default())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[1]
        .set_active_port(
            1,
            0,
            1,
            1,
            Some(on_be),
            Some(on_be),
            0,
            GO_BACK,
            Some(leak(vec![0; 40_000])),
        )
        .unwrap();
    sim
}

/// Sends messages `0..n` (sizes from `be_len`) `gap_us` apart, then lets them land.
fn be_stream(sim: &mut Sim<SimGamma<'static, BeCheck>>, seed: u64, n: u32, gap_us: u64) {
    for k in 0..n {
        let body: &'static [u8] = leak(pattern(1, k as usize, be_len(k)));
        let h = sim.nodes[0].isend_2p(1, &k.to_be_bytes(), body).unwrap();
        // Best effort completes once handed to the device.
        assert_eq!(sim.nodes[0].tsend(h), Ok(true), "seed {seed}");
        let until = sim.now() + Duration::from_micros(gap_us);
        let _ = sim.run_until(until, |_, _| false);
    }
    let _ = sim.run_until(sim.now() + Duration::from_millis(500), |_, _| false);
}

fn be_len(k: u32) -> usize {
    [10, 1400, 5000, 30_000][k as usize % 4]
}

#[test]
fn best_effort_loses_visibly_never_silently() {
    let seed = seed();
    let mut sim = be_pair(
        seed,
        FaultConfig {
            loss: 0.05,
            ..lossy()
        },
    );
    let n = 200u32;
    be_stream(&mut sim, seed, n, 60);
    let st = sim.nodes[1].state();
    assert!(
        st.wrong.is_empty(),
        "seed {seed}: wrong data delivered: {:?}",
        st.wrong
    );
    assert!(
        st.lost > 0,
        "seed {seed}: 5% loss and 1% corruption must lose some messages"
    );
    // Any reordered or lost fragment loses its message: about half survive here.
    assert!(
        st.intact.len() > n as usize / 4,
        "seed {seed}: {} intact",
        st.intact.len()
    );
    assert!(
        st.intact.windows(2).all(|w| w[0] < w[1]),
        "seed {seed}: in order, at most once"
    );
    println!(
        "seed {seed}: best effort: {} of {n} intact, {} reported FRAMELOST",
        st.intact.len(),
        st.lost
    );
}

#[test]
fn a_dead_member_fails_the_barrier_everywhere_instead_of_hanging() {
    let seed = seed();
    for (n, dead) in [(8u16, 5usize), (13, 0), (5, 4)] {
        let g = groups(n);
        let mut sc = SimConfig::lan(seed ^ n as u64);
        sc.faults = FaultConfig {
            loss: 0.1,
            ..FaultConfig::default()
        };
        let mut sim = Sim::new(n as usize, sc, |i, dev, clock| {
            gamma(g, cfg(1, i as u16), n as usize, n as usize, dev, clock, ())
        });
        // One barrier with everybody, then a member dies.
        for node in sim.nodes.iter_mut() {
            node.sync_start().unwrap();
        }
        sim.run_until(Instant::from_millis(1_000), |nodes, _| {
            nodes.iter().all(|x| x.engine().barrier_done() == Ok(true))
        })
        .unwrap_or_else(|e| panic!("seed {seed}: first barrier: {e:?}"));
        sim.net.kill(dead);
        let start = sim.now();
        for (i, node) in sim.nodes.iter_mut().enumerate() {
            if i != dead {
                node.sync_start().unwrap();
            }
        }
        let r = sim.run_until(start + Duration::from_secs(10), |nodes, _| {
            nodes
                .iter()
                .enumerate()
                .all(|(i, x)| i == dead || x.engine().barrier_done().is_err())
        });
        let at = r.unwrap_or_else(|e| {
            let stuck: Vec<usize> = (0..n as usize)
                .filter(|&i| i != dead && sim.nodes[i].engine().barrier_done().is_ok())
                .collect();
            panic!("seed {seed}: n={n}: members {stuck:?} still wait: {e:?}")
        });
        for (i, node) in sim.nodes.iter().enumerate().filter(|(i, _)| *i != dead) {
            assert_eq!(
                node.engine().barrier_done(),
                Err(volley_core::engine::Error::SendFailure),
                "seed {seed}: member {i}"
            );
        }
        println!(
            "seed {seed}: n={n}: barrier failed at every survivor {} after member {dead} died",
            at - start
        );
    }
}

// ------------------------------------------------------- GAMMA conformance

#[test]
fn best_effort_multi_frame_messages_arrive_whole_on_a_lossless_fabric() {
    let seed = seed();
    let mut sim = be_pair(seed, FaultConfig::default());
    let n = 40u32;
    for k in 0..n {
        let body = pattern(1, k as usize, be_len(k));
        // Blocking best-effort send and send_2p, alternately.
        if k % 2 == 0 {
            let mut m = k.to_be_bytes().to_vec();
            m.extend_from_slice(&body);
            sim.nodes[0].send(1, &m).unwrap();
        } else {
            sim.nodes[0].send_2p(1, &k.to_be_bytes(), &body).unwrap();
        }
        let until = sim.now() + Duration::from_micros(200);
        let _ = sim.run_until(until, |_, _| false);
    }
    let st = sim.nodes[1].state();
    assert!(st.wrong.is_empty(), "seed {seed}: {:?}", st.wrong);
    assert_eq!(
        st.lost, 0,
        "seed {seed}: nothing is lost on a lossless fabric"
    );
    assert_eq!(st.intact, (0..n).collect::<Vec<_>>(), "seed {seed}");
    // Under odd seeds the fabric names senders: the one-frame messages went compact.
    let compact = sim.nodes[1].engine().stats().rx_compact;
    assert_eq!(compact > 0, seed & 1 == 1, "seed {seed}: {compact} compact");
}

#[test]
fn best_effort_under_loss_accounts_for_every_message() {
    let seed = seed();
    let mut sim = be_pair(
        seed,
        FaultConfig {
            loss: 0.03,
            ..FaultConfig::default()
        },
    );
    let n = 200u32;
    be_stream(&mut sim, seed, n, 200);
    let st = sim.nodes[1].state();
    assert!(st.wrong.is_empty(), "seed {seed}: {:?}", st.wrong);
    let seen = st.intact.len() as u32 + st.lost;
    // Each message is delivered whole or reported FRAMELOST once; only a run of
    // messages vanishing at the very end (nothing after them) goes unreported.
    assert!(
        seen <= n && seen + 3 >= n,
        "seed {seed}: {} intact + {} lost of {n}",
        st.intact.len(),
        st.lost
    );
    assert!(st.intact.len() > n as usize / 2, "seed {seed}");
}

#[derive(Default)]
struct Closed {
    errors: Vec<(u16, u8)>,
    delivered: u32,
}

fn on_closed_err(u: &mut Upcall<'_, '_, Closed>) {
    let e = (u.active_port(), u.errno().map_or(0, |e| e as u8));
    u.state().errors.push(e);
}

fn on_closed_msg(u: &mut Upcall<'_, '_, Closed>) {
    u.state().delivered += 1;
}

#[test]
fn a_reliable_send_to_an_unbound_port_fails_in_bounded_time() {
    use volley_core::engine::Error;
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        let mut c = cfg(1, i as u16);
        c.unbound_grace = Duration::from_millis(50);
        let s = storage(2, 2);
        SimGamma::init(c, g, s, handlers(), dev, clock, Closed::default()).unwrap()
    });
    // Reserved ports are refused as destinations.
    for reserved in [1023, 1024] {
        assert_eq!(
            sim.nodes[0].set_passive_port(1, 1, 1, reserved, 0, GO_BACK, None),
            Err(Error::ReservedPort)
        );
    }
    sim.nodes[0]
        .set_active_port(1, 1, 1, 7, None, Some(on_closed_err), 3, GO_BACK, None)
        .unwrap();
    // Node 1 never binds port 7: a large (non-eager) send fails with PortClosed...
    let big: &'static [u8] = leak(vec![7u8; 64 * 1024]);
    let h = sim.nodes[0].isend_flowctl(1, big).unwrap();
    let at = sim
        .run_until(Instant::from_millis(5000), |n, _| {
            n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
        })
        .unwrap_or_else(|e| panic!("seed {seed}: send to an unbound port hangs: {e:?}"));
    assert!(
        at >= Instant::from_millis(50),
        "seed {seed}: not before the grace"
    );
    assert_eq!(sim.nodes[0].wsend(h), Err(Error::PortClosed), "seed {seed}");
    assert_eq!(
        sim.nodes[0].state().errors,
        [(1, ERR_SENDFAILURE)],
        "seed {seed}: the error handler sees SENDFAILURE"
    );
    assert_eq!(sim.nodes[1].engine().stats().rx_rejected, 1);
    // ... and an eager one is reported to the error handler.
    sim.nodes[0].send_flowctl(1, b"small").unwrap();
    let start = sim.now();
    sim.run_until(start + Duration::from_secs(5), |n, _| {
        n[0].state().errors.len() == 2
    })
    .unwrap_or_else(|e| panic!("seed {seed}: eager send to an unbound port: {e:?}"));
    // The channel still works: bind the port late, within the grace, and it arrives.
    sim.nodes[0].send_flowctl(1, b"late").unwrap();
    let until = sim.now() + Duration::from_millis(20);
    let _ = sim.run_until(until, |_, _| false);
    sim.nodes[1]
        .set_active_port(
            7,
            0,
            1,
            1,
            Some(on_closed_msg),
            None,
            2,
            GO_BACK,
            Some(leak(vec![0; 16])),
        )
        .unwrap();
    sim.run_until(sim.now() + Duration::from_secs(1), |n, _| {
        n[1].state().delivered == 1
    })
    .unwrap_or_else(|e| panic!("seed {seed}: a port bound late gets its message: {e:?}"));
    assert_eq!(sim.nodes[1].buffer(7).map(|b| &b[..4]), Some(&b"late"[..]));
    assert_eq!(sim.nodes[0].state().errors.len(), 2, "seed {seed}");
}

#[test]
fn best_effort_to_an_unbound_port_touches_no_semaphore() {
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, ())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 9, 0, GO_BACK, None)
        .unwrap();
    for _ in 0..5 {
        sim.nodes[0].send(1, &[1u8; 3000]).unwrap();
    }
    let _ = sim.run_until(Instant::from_millis(10), |_, _| false);
    let rx = sim.nodes[1].engine();
    assert!(rx.stats().rx_dropped >= 5, "seed {seed}");
    for sem in [0u16, 9] {
        assert_eq!(
            rx.semaphore(sem).unwrap().errors,
            0,
            "seed {seed}: sem {sem}"
        );
        assert_eq!(
            rx.semaphore(sem).unwrap().count,
            0,
            "seed {seed}: sem {sem}"
        );
    }
}

#[test]
fn the_first_send_uses_the_device_mtu() {
    let seed = seed();
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    sc.mtu = 9000;
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, ())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 0, GO_BACK, None)
        .unwrap();
    // Nothing polled yet: the send frames its 8000 bytes for a 9000-byte MTU at once.
    let h = sim.nodes[0].isend(1, leak(vec![5u8; 8000])).unwrap();
    assert_eq!(sim.nodes[0].engine().stats().tx_frames, 1, "seed {seed}");
    assert_eq!(sim.nodes[0].tsend(h), Ok(true));
}

// Handlers that send and re-post owned buffers (the Pstream pattern).

#[derive(Default)]
struct Relay {
    spare: Vec<Vec<u8>>,
    full: std::collections::VecDeque<(Vec<u8>, usize)>,
    echoed: u32,
    errors: u32,
}

/// Node 1: keeps each message (swapping in a spare buffer) and echoes it back from
/// inside the handler.
fn on_relay(u: &mut Upcall<'_, '_, Relay>) {
    let len = u.len();
    let echo = u.data().to_vec();
    let port = u.active_port();
    if u.send_flowctl(port, &[], &echo).is_err() {
        u.state().errors += 1;
    }
    let next = u.state().spare.pop().unwrap_or_else(|| vec![0; 4096]);
    let prev = u.post_recv(port, next).unwrap();
    let prev = prev.and_then(|b| b.into_owned()).unwrap().into_vec();
    u.state().full.push_back((prev, len));
    u.state().echoed += 1;
}

fn on_echo(u: &mut Upcall<'_, '_, Relay>) {
    u.state().echoed += 1;
}

#[test]
fn handlers_send_and_repost_owned_buffers() {
    let seed = seed();
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    sc.faults = FaultConfig {
        loss: 0.05,
        ..FaultConfig::default()
    };
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, Relay::default())
    });
    sim.nodes[0]
        .set_active_port(1, 1, 1, 1, Some(on_echo), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[0].post_recv(1, vec![0u8; 4096]).unwrap();
    sim.nodes[1]
        .set_active_port(1, 0, 1, 1, Some(on_relay), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[1].post_recv(1, vec![0u8; 4096]).unwrap();
    sim.nodes[1].state_mut().spare.push(vec![0; 4096]);
    let n = 50usize;
    for k in 0..n {
        let m = pattern(0, k, 100 + 37 * k);
        sim.nodes[0].send_flowctl(1, &m).unwrap();
        let want = k as u32 + 1;
        sim.run_until(sim.now() + Duration::from_secs(2), |nodes, _| {
            nodes[0].state().echoed == want
        })
        .unwrap_or_else(|e| panic!("seed {seed}: echo {k}: {e:?}"));
        assert_eq!(sim.nodes[0].buffer(1).map(|b| &b[..m.len()]), Some(&m[..]));
        // The main program reads the message the handler swapped out, then recycles it.
        let (buf, len) = sim.nodes[1].state_mut().full.pop_front().unwrap();
        assert_eq!(&buf[..len], &m[..], "seed {seed}: message {k}");
        sim.nodes[1].state_mut().spare.push(buf);
    }
    assert_eq!(sim.nodes[1].state().errors, 0, "seed {seed}");
}

/// Node 1's handler tries to answer with one byte more than a handler may send.
fn on_too_long(u: &mut Upcall<'_, '_, Vec<Result<usize, volley_core::engine::Error>>>) {
    let port = u.active_port();
    let big = vec![7u8; volley_core::engine::EAGER_MAX + 1];
    let r = u.send_flowctl(port, &[], &big);
    u.state().push(r);
    let r = u.send(port, &[], &big[..16]);
    u.state().push(r);
}

/// A handler's send over 16 KiB is refused with an error that names that limit,
/// and the handler's next, shorter send still goes.
#[test]
fn a_handlers_send_over_the_limit_names_the_limit() {
    use volley_core::engine::{Error, EAGER_MAX};
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, Vec::new())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 1, GO_BACK, Some(leak(vec![0; 64])))
        .unwrap();
    sim.nodes[1]
        .set_active_port(1, 0, 1, 1, Some(on_too_long), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[1].post_recv(1, vec![0u8; 64]).unwrap();
    sim.nodes[0].send_flowctl(1, b"ping").unwrap();
    sim.run_until(sim.now() + Duration::from_secs(2), |nodes, _| {
        nodes[0].engine().semaphore(1).is_ok_and(|s| s.count == 1)
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the short answer never came: {e:?}"));
    let got = sim.nodes[1].state();
    assert_eq!(
        got[..],
        [Err(Error::LongerThan(EAGER_MAX)), Ok(16)],
        "seed {seed}"
    );
    let text = Error::LongerThan(EAGER_MAX).to_string();
    assert!(text.contains("16384 bytes"), "{text}");
}

// Handlers' replies leave when the handler returns, in order.

#[derive(Default)]
struct Replies {
    /// Node 1: whether its handler answers best-effort.
    best_effort: bool,
    /// Node 1: how long the middle one of its three answers is (by ping).
    middle: Vec<usize>,
    /// Node 0: what came back, in order.
    got: Vec<Vec<u8>>,
    errors: u32,
}

/// Node 1: answers ping `k` with three messages from inside its handler: a short
/// one, one `middle[k]` bytes long, another short one.
fn on_ping(u: &mut Upcall<'_, '_, Replies>) {
    let k = u.data()[0] as usize;
    let port = u.active_port();
    let middle = u.state().middle.get(k).copied().unwrap_or(8);
    for (i, len) in [8, middle, 8].into_iter().enumerate() {
        let m = pattern(1, 3 * k + i, len);
        let r = if u.state().best_effort {
            u.send(port, &[], &m)
        } else {
            u.send_flowctl(port, &[], &m)
        };
        if r.is_err() {
            u.state().errors += 1;
        }
    }
}

fn on_reply(u: &mut Upcall<'_, '_, Replies>) {
    let m = u.data().to_vec();
    u.state().got.push(m);
}

/// A pair whose node 1 answers node 0's pings from its handler (`on_ping`).
fn replies_pair(
    sc: SimConfig,
    best_effort: bool,
    middle: Vec<usize>,
) -> Sim<SimGamma<'static, Replies>> {
    let g = groups(2);
    // Eager buffers for a ping's three answers and the three before them, whose
    // ack the ping carries (taken at the poll after its handler).
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        let st = sized(2, 2, 256, 8, 16);
        SimGamma::init(
            cfg(1, i as u16),
            g,
            st,
            handlers(),
            dev,
            clock,
            Replies::default(),
        )
        .unwrap()
    });
    sim.nodes[0]
        .set_active_port(1, 1, 1, 1, Some(on_reply), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[0].post_recv(1, vec![0u8; 8192]).unwrap();
    sim.nodes[1]
        .set_active_port(1, 0, 1, 1, Some(on_ping), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[1].post_recv(1, vec![0u8; 64]).unwrap();
    sim.nodes[1].state_mut().best_effort = best_effort;
    sim.nodes[1].state_mut().middle = middle;
    sim
}

/// Pings `0..n` one at a time; checks the three answers to each, in order.
fn ping_and_check(sim: &mut Sim<SimGamma<'static, Replies>>, n: usize, seed: u64) {
    for k in 0..n {
        sim.nodes[0].send_flowctl(1, &[k as u8]).unwrap();
        let want = 3 * (k + 1);
        sim.run_until(sim.now() + Duration::from_secs(5), |nodes, _| {
            nodes[0].state().got.len() >= want
        })
        .unwrap_or_else(|e| panic!("seed {seed}: answers to ping {k}: {e:?}"));
    }
    // Anything late, twice or out of order would show here.
    sim.run_until(sim.now() + Duration::from_millis(200), |_, _| false)
        .ok();
    let middle = sim.nodes[1].state().middle.clone();
    let got = &sim.nodes[0].state().got;
    assert_eq!(got.len(), 3 * n, "seed {seed}");
    for (j, m) in got.iter().enumerate() {
        let (k, i) = (j / 3, j % 3);
        let len = if i == 1 {
            middle.get(k).copied().unwrap_or(8)
        } else {
            8
        };
        assert_eq!(
            m,
            &pattern(1, j, len),
            "seed {seed}: answer {i} to ping {k}"
        );
    }
    assert_eq!(sim.nodes[1].state().errors, 0, "seed {seed}");
}

#[test]
fn handlers_answers_leave_when_the_handler_returns() {
    let seed = seed();
    // Lossless, short answers: every one leaves at once, best-effort or reliable.
    for best_effort in [false, true] {
        let mut sim = replies_pair(SimConfig::lan(seed), best_effort, vec![8; 20]);
        ping_and_check(&mut sim, 20, seed);
        assert_eq!(
            sim.nodes[1].engine().stats().tx_queued_at_once,
            60,
            "seed {seed}, best effort {best_effort}"
        );
    }
    // A long middle answer (over 1 KiB, or over a frame) waits for the transmit
    // pass, and the short one after it behind it: order kept, under loss too.
    let middle: Vec<usize> = (0..30).map(|k| [8, 1500, 5000, 20][k % 4]).collect();
    let mut sc = SimConfig::lan(seed);
    sc.faults = FaultConfig {
        loss: 0.05,
        ..FaultConfig::default()
    };
    let mut sim = replies_pair(sc, false, middle);
    ping_and_check(&mut sim, 30, seed);
    let at_once = sim.nodes[1].engine().stats().tx_queued_at_once;
    assert!(at_once < 90, "seed {seed}: {at_once} of 90 at once");
}

// -------------------------------------------------- failure judged by time

#[derive(Default)]
struct Quiet {
    errors: Vec<(u16, u8)>,
    got: u32,
}

fn on_quiet_err(u: &mut Upcall<'_, '_, Quiet>) {
    let e = (u.active_port(), u.errno().map_or(0, |e| e as u8));
    u.state().errors.push(e);
}

fn on_quiet_msg(u: &mut Upcall<'_, '_, Quiet>) {
    u.state().got += 1;
}

fn quiet_pair(seed: u64, lossy_link: bool) -> Sim<SimGamma<'static, Quiet>> {
    quiet_pair_keyed(seed, lossy_link, None)
}

fn quiet_pair_keyed(
    seed: u64,
    lossy_link: bool,
    key: Option<[u8; 16]>,
) -> Sim<SimGamma<'static, Quiet>> {
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    if lossy_link {
        sc.faults = FaultConfig {
            loss: 0.2,
            ..FaultConfig::default()
        };
    }
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        // The default failure budget (30 s), not the tests' short one.
        let mut c = Config::new(0x1234, 1, i as u16);
        c.auth_key = key;
        SimGamma::init(
            c,
            g,
            storage(2, 2),
            handlers(),
            dev,
            clock,
            Quiet::default(),
        )
        .unwrap()
    });
    for (me, peer) in [(0u16, 1u16), (1, 0)] {
        sim.nodes[me as usize]
            .set_active_port(
                1,
                peer,
                1,
                1,
                Some(on_quiet_msg),
                Some(on_quiet_err),
                1,
                GO_BACK,
                Some(leak(vec![0; 1 << 16])),
            )
            .unwrap();
    }
    sim
}

#[test]
fn a_peer_silent_for_five_seconds_is_not_declared_dead() {
    let seed = seed();
    let mut sim = quiet_pair(seed, true);
    // Node 1 stops (a debugger, swapping) with a 64 KiB message in flight to it.
    sim.net.kill(1);
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![3u8; 1 << 16]))
        .unwrap();
    let resume = Instant::from_millis(5_000);
    let _ = sim.run_until(resume, |_, _| false);
    assert_eq!(
        sim.nodes[0].engine().send_status(h),
        Ok(volley_core::engine::SendStatus::Pending),
        "seed {seed}: still trying after 5 s of silence"
    );
    sim.net.revive(1);
    sim.run_until(resume + Duration::from_secs(5), |n, _| {
        n[1].state().got == 1
    })
    .unwrap_or_else(|e| panic!("seed {seed}: not delivered after the pause: {e:?}"));
    let _ = sim.run_until(sim.now() + Duration::from_millis(500), |_, _| false);
    assert_eq!(sim.nodes[0].wsend(h), Ok(()), "seed {seed}");
    assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
    assert_eq!(sim.nodes[0].engine().stats().peers_failed, 0);
}

#[test]
fn a_dead_peer_fails_by_the_time_budget() {
    let seed = seed();
    let mut sim = quiet_pair(seed, false);
    sim.net.kill(1);
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![3u8; 1 << 16]))
        .unwrap();
    let at = sim
        .run_until(Instant::from_millis(60_000), |n, _| {
            n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
        })
        .unwrap_or_else(|e| panic!("seed {seed}: never failed: {e:?}"));
    // 30 s of silence, give or take one capped back-off (200 ms).
    assert!(
        at >= Instant::from_millis(30_000) && at <= Instant::from_millis(30_500),
        "seed {seed}: failed at {at}"
    );
    assert_eq!(
        sim.nodes[0].wsend(h),
        Err(volley_core::engine::Error::SendFailure)
    );
}

/// A short reliable non-blocking send with nothing ahead of it leaves in the
/// `isend_flowctl` call, as a blocking one does: its handle reports it done at
/// once, and the receiver gets every one, in order; a long one waits for its ack.
#[test]
fn a_short_isend_leaves_in_the_call() {
    use volley_core::engine::SendStatus;
    let seed = seed();
    let mut sim = quiet_pair(seed, false);
    for k in 0..20u32 {
        let h = sim.nodes[0]
            .isend_flowctl(1, leak(vec![k as u8; 8]))
            .unwrap();
        // The first finds no channel open yet (and the device's size unknown
        // before a poll): it goes the general way.
        if k > 0 {
            assert_eq!(
                sim.nodes[0].engine().send_status(h),
                Ok(SendStatus::Done),
                "seed {seed}: message {k}"
            );
        }
        // Delivered and acked (its eager copy back: this pair has four); only
        // then waited for, as `wsend` here polls this node alone.
        sim.run_until(sim.now() + Duration::from_secs(1), |n, _| {
            n[1].state().got == k + 1 && n[0].engine().is_quiescent()
        })
        .unwrap_or_else(|e| panic!("seed {seed}: message {k}: {e:?}"));
        assert_eq!(sim.nodes[0].wsend(h), Ok(()), "seed {seed}");
    }
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![9u8; 1 << 16]))
        .unwrap();
    assert_eq!(
        sim.nodes[0].engine().send_status(h),
        Ok(SendStatus::Pending),
        "seed {seed}"
    );
    sim.run_until(sim.now() + Duration::from_secs(5), |n, _| {
        n[1].state().got == 21 && n[0].engine().is_quiescent()
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the long one: {e:?}"));
    assert_eq!(sim.nodes[0].wsend(h), Ok(()), "seed {seed}");
    assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
}

/// A short reliable non-blocking send is a copy, complete once it is on the wire
/// (as a blocking `send_flowctl` returns then): it is complete at once, and a
/// peer found dead afterwards is reported on the port's error handler, as for a
/// blocking send. A send to a peer already known dead fails at its `wsend`.
#[test]
fn a_short_isend_completes_on_the_wire_and_a_later_death_reaches_the_handler() {
    use volley_core::gamma::{ERR_SENDFAILURE, ISEND_COPY_MAX};
    let seed = seed();
    let mut sim = quiet_pair(seed, false);
    sim.net.kill(1);
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![3u8; ISEND_COPY_MAX]))
        .unwrap();
    let start = sim.now();
    // `tsend`, which does not wait (a `wsend` here would poll this node alone).
    assert_eq!(sim.nodes[0].tsend(h), Ok(true), "seed {seed}");
    sim.run_until(start + Duration::from_secs(60), |n, _| {
        !n[0].state().errors.is_empty()
    })
    .unwrap_or_else(|e| panic!("seed {seed}: no failure reported: {e:?}"));
    assert_eq!(
        sim.nodes[0].state().errors,
        vec![(1, ERR_SENDFAILURE)],
        "seed {seed}"
    );
    assert!(
        sim.now() - start <= Duration::from_millis(30_500),
        "seed {seed}"
    );
    // Known dead now: the next one fails, and its `wsend` says so.
    let h = sim.nodes[0].isend_flowctl(1, leak(vec![3u8; 64])).unwrap();
    assert_eq!(
        sim.nodes[0].wsend(h),
        Err(volley_core::engine::Error::SendFailure),
        "seed {seed}"
    );
}

/// A receiver that takes a message (its ack left to ride on a reply) and then
/// computes for longer than the peer timeout without calling in: with nothing but
/// silence to go by, its sender takes it for dead; where the device vouches for the
/// process (a host's beacon), the sender waits, the reply comes and nothing fails,
/// while a killed peer still fails by the budget.
#[test]
fn a_receiver_that_computes_is_waited_for_where_its_host_vouches_for_it() {
    let seed = seed();
    for vouch in [false, true] {
        let mut sim = quiet_pair(seed, false);
        if vouch {
            sim.net.vouch_for_the_living();
        }
        sim.nodes[0].send_flowctl(1, &[5u8; 8]).unwrap();
        sim.run_until(Instant::from_millis(100), |n, _| n[1].state().got == 1)
            .unwrap_or_else(|e| panic!("seed {seed}: not delivered: {e:?}"));
        // Node 1 computes for 40 s; node 0 waits, polling.
        common::only(&mut sim, 0, 40);
        let failed = sim.nodes[0].engine().stats().peers_failed;
        if !vouch {
            assert_eq!(failed, 1, "seed {seed}: silence past the timeout is death");
            continue;
        }
        assert_eq!(
            failed, 0,
            "seed {seed}: a vouched-for peer was declared dead"
        );
        assert!(
            sim.nodes[0].engine().stats().peers_vouched >= 1,
            "seed {seed}"
        );
        // Node 1 is back with its answer.
        sim.nodes[1].send_flowctl(1, &[6u8; 8]).unwrap();
        sim.run_until(sim.now() + Duration::from_secs(5), |n, _| {
            n[0].state().got == 1 && n[0].engine().is_quiescent() && n[1].engine().is_quiescent()
        })
        .unwrap_or_else(|e| panic!("seed {seed}: the answer did not come: {e:?}"));
        assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
        // A peer that is really gone is not vouched for. (A send longer than
        // `ISEND_COPY_MAX`, which the receiver's ack completes: its `wsend` gives
        // the failure.)
        sim.net.kill(1);
        let h = sim.nodes[0]
            .isend_flowctl(1, leak(vec![3u8; 1 << 16]))
            .unwrap();
        let start = sim.now();
        let at = sim
            .run_until(start + Duration::from_secs(60), |n, _| {
                n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
            })
            .unwrap_or_else(|e| panic!("seed {seed}: never failed: {e:?}"));
        assert!(
            at - start <= Duration::from_millis(30_500),
            "seed {seed}: failed after {}",
            at - start
        );
        assert_eq!(
            sim.nodes[0].wsend(h),
            Err(volley_core::engine::Error::SendFailure)
        );
    }
}

/// Beacons (what a host's helper sends while the program computes) keep a receiver
/// that computes past the peer timeout from being taken for dead, on a fabric
/// where the device vouches for no one; a beacon under another key is not heard.
#[test]
fn beacons_from_a_computing_receiver_keep_it_alive() {
    use volley_core::engine::{beacon_frame, BEACON_LEN};
    use volley_core::phy::{Device, TxToken};
    let seed = seed();
    for forged in [false, true] {
        let key = *b"beacon test key!";
        let mut sim = quiet_pair_keyed(seed, false, Some(key));
        sim.nodes[0].send_flowctl(1, &[5u8; 8]).unwrap();
        sim.run_until(Instant::from_millis(100), |n, _| n[1].state().got == 1)
            .unwrap_or_else(|e| panic!("seed {seed}: not delivered: {e:?}"));
        let mut cfg = Config::new(0x1234, 1, 1);
        cfg.auth_key = Some(if forged { *b"another job key!" } else { key });
        let before = *sim.nodes[0].engine().stats();
        // Node 1 computes for 40 s; its host sends a beacon every 5 s, each
        // numbered one more than the last.
        let mut port = sim.net.port(1);
        for k in 0..8 {
            let mut frame = [0u8; BEACON_LEN];
            let len = beacon_frame(&cfg, 1, 0, k + 1, &mut frame).unwrap();
            assert_eq!(len, BEACON_LEN);
            let now = sim.now();
            port.transmit(now, NodeAddr(0))
                .unwrap()
                .consume(len, |b| b.copy_from_slice(&frame[..len]));
            common::only(&mut sim, 0, 5);
        }
        let after = *sim.nodes[0].engine().stats();
        if forged {
            assert_eq!(
                after.peers_failed, 1,
                "seed {seed}: a forged beacon was heard"
            );
            assert!(after.rx_unauthenticated >= before.rx_unauthenticated + 8);
            continue;
        }
        assert_eq!(after.peers_failed, 0, "seed {seed}: taken for dead");
        assert_eq!(after.rx_unauthenticated, before.rx_unauthenticated);
        assert_eq!(
            after.delivered, before.delivered,
            "seed {seed}: a beacon delivers nothing"
        );
        sim.nodes[1].send_flowctl(1, &[6u8; 8]).unwrap();
        sim.run_until(sim.now() + Duration::from_secs(5), |n, _| {
            n[0].state().got == 1 && n[0].engine().is_quiescent()
        })
        .unwrap_or_else(|e| panic!("seed {seed}: the answer did not come: {e:?}"));
        assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
    }
}

/// Frames a dead peer sent while it lived, replayed to its sender (its acks, its
/// messages, its standalone acks and beacons, all under the job's key), are no
/// sign of life: only frames that say something new are. The sender still finds
/// the peer dead within its peer timeout and a little more.
#[test]
fn replayed_frames_keep_no_dead_peer_alive() {
    use volley_core::engine::{beacon_frame, BEACON_LEN};
    let seed = seed();
    let key = *b"replay test key!";
    let mut sim = quiet_pair_keyed(seed, false, Some(key));
    sim.net.tap(1, 0);
    // Traffic both ways: node 1's data frames, acks and standalone acks recorded.
    for k in 0..20u8 {
        sim.nodes[0].send_flowctl(1, &[k; 8]).unwrap();
        sim.nodes[1].send_flowctl(1, &[k; 8]).unwrap();
        let want = k as u32 + 1;
        sim.run_until(sim.now() + Duration::from_secs(1), |n, _| {
            n[0].state().got == want && n[1].state().got == want
        })
        .unwrap_or_else(|e| panic!("seed {seed}: message {k}: {e:?}"));
    }
    let _ = sim.run_until(sim.now() + Duration::from_millis(50), |n, _| {
        n.iter().all(|x| x.engine().is_quiescent())
    });
    let mut cfg1 = Config::new(0x1234, 1, 1);
    cfg1.auth_key = Some(key);
    let mut beacon = vec![0u8; BEACON_LEN];
    let n = beacon_frame(&cfg1, 1, 0, 7, &mut beacon).unwrap();
    beacon.truncate(n);
    let mut recorded = sim.net.recorded(1, 0);
    assert!(
        recorded.len() >= 20,
        "seed {seed}: {} frames",
        recorded.len()
    );
    recorded.push(beacon);
    // Node 1 dies; node 0 sends on and is fed the recordings every 300 ms.
    sim.net.kill(1);
    let died = sim.now();
    sim.nodes[0].send_flowctl(1, &[99; 8]).unwrap();
    let timeout = Config::new(0x1234, 1, 0).peer_timeout;
    let mut t = died;
    let give_up = died + timeout + timeout + timeout;
    while t < give_up && sim.nodes[0].engine().stats().peers_failed == 0 {
        for f in &recorded {
            sim.net.inject(1, 0, f.clone(), t);
        }
        t += Duration::from_millis(300);
        let _ = sim.run_until(t, |n, _| n[0].engine().stats().peers_failed > 0);
    }
    let st = sim.nodes[0].engine().stats();
    assert_eq!(st.peers_failed, 1, "seed {seed}: kept alive by replays");
    assert!(st.rx_duplicates > 0, "seed {seed}: the replays were heard");
    let took = sim.now().saturating_since(died);
    assert!(
        took <= timeout + Duration::from_millis(500),
        "seed {seed}: found dead after {took:?}"
    );
}

#[test]
fn a_rank_waiting_for_a_dead_sender_gets_an_error_not_a_hang() {
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        let mut c = cfg(1, i as u16);
        c.keepalive = Duration::from_millis(20);
        SimGamma::init(
            c,
            g,
            storage(2, 2),
            handlers(),
            dev,
            clock,
            Quiet::default(),
        )
        .unwrap()
    });
    sim.nodes[1]
        .set_active_port(
            1,
            0,
            1,
            1,
            None,
            Some(on_quiet_err),
            1,
            GO_BACK,
            Some(leak(vec![0; 64])),
        )
        .unwrap();
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[0].send_flowctl(1, b"one").unwrap();
    let _ = sim.run_until(Instant::from_millis(10), |_, _| false);
    assert_eq!(sim.nodes[1].wait(1, 1), Ok(0), "seed {seed}");
    sim.net.kill(0);
    // Node 1 waits for a second message that will never come: what `wait` does each
    // time round its loop (probe the silent peers of the semaphore), on virtual time.
    let start = sim.now();
    let mut dead_at = None;
    while sim.now() < start + Duration::from_secs(5) {
        let step = sim.now() + Duration::from_millis(5);
        let _ = sim.run_until(step, |_, _| false);
        let now = sim.now();
        sim.nodes[1].engine_mut().keepalive(now, 1);
        if sim.nodes[1].engine().semaphore(1).unwrap().peer_dead {
            dead_at = Some(now);
            break;
        }
    }
    let took = dead_at.unwrap_or_else(|| panic!("seed {seed}: the waiter never learns")) - start;
    // Probed within the keepalive, declared dead after the failure budget (100 ms here).
    assert!(
        took <= Duration::from_millis(200),
        "seed {seed}: took {took}"
    );
    let r = sim.nodes[1].wait(1, 1);
    assert_eq!(
        r,
        Err(volley_core::engine::Error::SendFailure),
        "seed {seed}"
    );
    assert_eq!(
        sim.nodes[1].state().errors,
        [(1, ERR_SENDFAILURE)],
        "seed {seed}: the error handler is told"
    );
}

// ---------------------------------------------------------- authentication

#[test]
fn frames_without_the_jobs_tag_never_reach_a_handler() {
    let seed = seed();
    let g = groups(3);
    let mut sc = SimConfig::lan(seed);
    sc.faults = lossy();
    let mut sim = Sim::new(3, sc, |i, dev, clock| {
        let mut c = cfg(1, i as u16);
        // Node 2 knows the job key and the layout but not the secret.
        c.auth_key = Some(if i == 2 {
            *b"not-the-secret!!"
        } else {
            *b"job-secret-bytes"
        });
        gamma(g, c, 3, 3, dev, clock, Quiet::default())
    });
    sim.nodes[1]
        .set_active_port(
            1,
            0,
            1,
            1,
            Some(on_quiet_msg),
            Some(on_quiet_err),
            1,
            GO_BACK,
            Some(leak(vec![0; 1 << 16])),
        )
        .unwrap();
    sim.nodes[1]
        .set_active_port(
            2,
            2,
            1,
            2,
            Some(on_quiet_msg),
            Some(on_quiet_err),
            2,
            GO_BACK,
            Some(leak(vec![0; 1 << 16])),
        )
        .unwrap();
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[2]
        .set_passive_port(2, 1, 1, 2, 1, GO_BACK, None)
        .unwrap();
    for k in 0..20usize {
        let m: &'static [u8] = leak(pattern(0, k, 3000));
        sim.nodes[0].isend_flowctl(1, m).unwrap();
        let f: &'static [u8] = leak(pattern(2, k, 3000));
        let _ = sim.nodes[2].isend(2, f);
        let _ = sim.nodes[2].isend_flowctl(2, f);
    }
    sim.run_until(Instant::from_millis(2_000), |n, _| n[1].state().got == 20)
        .unwrap_or_else(|e| panic!("seed {seed}: the job's own messages under loss: {e:?}"));
    let _ = sim.run_until(sim.now() + Duration::from_millis(200), |_, _| false);
    let st = sim.nodes[1].state();
    assert_eq!(st.got, 20, "seed {seed}: only the 20 authentic messages");
    assert!(
        st.errors.is_empty(),
        "seed {seed}: no FRAMELOST from forgeries: {:?}",
        st.errors
    );
    let s = sim.nodes[1].engine().stats();
    assert!(s.rx_unauthenticated > 20, "seed {seed}: {s:?}");
    assert_eq!(
        sim.nodes[1].engine().semaphore(2).unwrap(),
        Default::default()
    );
}

// ------------------------------------------------------------ fetch-and-add

#[test]
fn concurrent_fetch_and_adds_get_distinct_values_under_loss() {
    use volley_core::engine::FetchHandle;
    let seed = seed();
    let n = 6usize;
    let per = 40u32;
    let g = groups(n as u16);
    let mut sc = SimConfig::lan(seed);
    sc.faults = lossy();
    let mut sim = Sim::new(n, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), n, n, dev, clock, ())
    });
    // Every node but 0 adds 1 to node 0's counter 3, four requests in flight at a time.
    let mut waiting: Vec<Vec<FetchHandle>> = vec![Vec::new(); n];
    let mut started = vec![0u32; n];
    let mut values: Vec<u32> = Vec::new();
    sim.run_until(Instant::from_millis(20_000), |nodes, _| {
        for i in 1..n {
            let e = nodes[i].engine_mut();
            waiting[i].retain(|&h| match e.fetch_add_result(h) {
                Ok(Some(v)) => {
                    values.push(v);
                    false
                }
                Ok(None) => true,
                Err(err) => panic!("seed {seed}: node {i}: {err:?}"),
            });
            while waiting[i].len() < 4 && started[i] < per {
                match e.start_fetch_add(1, 0, 3, 1) {
                    Ok(h) => {
                        waiting[i].push(h);
                        started[i] += 1;
                    }
                    Err(volley_core::engine::Error::NoResources) => break,
                    Err(err) => panic!("seed {seed}: node {i}: {err:?}"),
                }
            }
        }
        values.len() == (n - 1) * per as usize
    })
    .unwrap_or_else(|e| {
        panic!(
            "seed {seed}: {} of {} answers: {e:?}",
            values.len(),
            (n - 1) * per as usize
        )
    });
    values.sort_unstable();
    let want: Vec<u32> = (0..(n as u32 - 1) * per).collect();
    assert_eq!(values, want, "seed {seed}: every value exactly once");
    assert_eq!(sim.nodes[0].engine().counter(3), Ok((n as u32 - 1) * per));
    assert_eq!(sim.nodes[0].engine().counter(2), Ok(0));
    // The blocking call, to a counter out of range, and to oneself.
    assert_eq!(
        sim.nodes[1].fetch_add(0, 99, 1),
        Err(volley_core::engine::Error::InvalidCounter)
    );
    assert_eq!(sim.nodes[2].fetch_add(2, 0, 5), Ok(0));
    assert_eq!(sim.nodes[2].fetch_add(2, 0, 5), Ok(5));
}

#[test]
fn a_fetch_and_add_to_a_dead_owner_fails() {
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, ())
    });
    sim.net.kill(0);
    let h = sim.nodes[1]
        .engine_mut()
        .start_fetch_add(1, 0, 0, 1)
        .unwrap();
    let mut got = None;
    sim.run_until(Instant::from_millis(5_000), |nodes, _| {
        match nodes[1].engine_mut().fetch_add_result(h) {
            Ok(None) => false,
            r => {
                got = Some(r);
                true
            }
        }
    })
    .unwrap_or_else(|e| panic!("seed {seed}: never failed: {e:?}"));
    assert_eq!(
        got,
        Some(Err(volley_core::engine::Error::SendFailure)),
        "seed {seed}"
    );
}

// ------------------------------------------------------------------ scaling

/// The frame barrier's cost grows as log n up to 1024 nodes (issue: collectives that
/// scale). On a lossless fabric with 2 us links, every member enters at time 0 and the
/// barrier takes ceil(log2 n) dissemination rounds; the time to the last exit is
/// printed per size and must stay within a round trip per round, so 1024 nodes cost
/// about ten times 2 nodes, not 512 times.
#[test]
fn barrier_cost_grows_as_log_n_to_1024_nodes() {
    let seed = seed();
    let mut times = Vec::new();
    for k in 1..=10u32 {
        let n = 1u16 << k;
        let g = groups(n);
        let sc = SimConfig::lan(seed);
        let mut sim = Sim::new(n as usize, sc, |i, dev, clock| {
            // Channels for the 2 log2 n members a node talks to.
            gamma(
                g,
                cfg(1, i as u16),
                n as usize,
                2 * k as usize + 2,
                dev,
                clock,
                (),
            )
        });
        for node in sim.nodes.iter_mut() {
            node.sync_start().unwrap();
        }
        let done = sim.run_until(Instant::from_millis(100), |nodes, _| {
            nodes.iter().all(|x| x.engine().barrier_done() == Ok(true))
        });
        let t = done.unwrap_or_else(|e| panic!("seed {seed}: barrier of {n} stuck at {e:?}"));
        let t = (t - Instant::ZERO).as_micros_f64();
        let frames: u64 = sim.nodes.iter().map(|x| x.engine().stats().tx_frames).sum();
        println!("barrier, {n:>4} nodes: {:>7.1} us, {frames} frames", t);
        assert!(
            frames <= n as u64 * k as u64 * 2,
            "seed {seed}: {n} nodes sent {frames} frames: more than a token and an ack per round"
        );
        // A token asks for no ack of its own, and its ack may wait for the token
        // ack delay (100 us here: half the 200 us first timeout): a barrier that
        // ends within it takes one frame per member and round, where asking would
        // take two.
        assert!(
            t >= 100.0 || frames == n as u64 * k as u64,
            "seed {seed}: {n} nodes sent {frames} frames, not one token per member and round"
        );
        times.push(t);
    }
    let per_round = times[0];
    for (k, t) in times.iter().enumerate() {
        let rounds = (k + 1) as f64;
        assert!(
            *t <= per_round * rounds * 1.5,
            "seed {seed}: {} nodes took {t:.1} us, more than {rounds} rounds of {per_round:.1} us",
            1u32 << (k + 1)
        );
    }
}

/// Back-to-back barriers on 16 nodes: the acks of their tokens wait for the token
/// ack delay (100 us here), so one ack per member and sender covers the tokens of
/// all ten barriers, instead of one ack for each token.
#[test]
fn barrier_token_acks_cover_several_barriers() {
    let seed = seed();
    let (n, k, barriers) = (16u16, 4u64, 10u64);
    let g = groups(n);
    let mut sim = Sim::new(n as usize, SimConfig::lan(seed), |i, dev, clock| {
        gamma(g, cfg(1, i as u16), n as usize, n as usize, dev, clock, ())
    });
    run_barriers(&mut sim, barriers as usize, Instant::from_millis(100), seed);
    let tokens = n as u64 * k * barriers;
    // Let every delayed ack go.
    let _ = sim.run_until(sim.now() + Duration::from_millis(5), |_, _| false);
    let frames: u64 = sim.nodes.iter().map(|x| x.engine().stats().tx_frames).sum();
    let timeouts: u64 = sim.nodes.iter().map(|x| x.engine().stats().timeouts).sum();
    assert_eq!(timeouts, 0, "seed {seed}: no token is sent again");
    assert!(
        frames <= tokens + n as u64 * k,
        "seed {seed}: {frames} frames for {tokens} tokens: more than an ack per member and sender"
    );
}

// ------------------------------------------------------------ tree broadcast

/// Inner members of a binomial broadcast tree of `n` (positions that forward).
fn binomial_inner(n: usize) -> usize {
    (1..n)
        .filter(|&p| p + (p + 1).next_power_of_two() < n)
        .count()
}

#[test]
fn broadcasts_from_every_root_arrive_once_and_in_order_under_loss() {
    let base = seed();
    // Short ones go down the tree whole; longer than 16 KiB ones chunk by chunk
    // where every relay's share of the pool holds all of them (4 eager buffers:
    // 64 KiB at 4 nodes, one level of relays, 32 KiB at 13 nodes, two levels;
    // 48 buffers: 224 KiB, the relays' seven eighths), else straight from the root.
    // Tree ones wait for the longer ones sent before them straight from the root
    // (the other way round: `flat_broadcasts_wait_for_the_roots_tree_ones_under_loss`).
    // Those of up to 4 KiB are sent from a copy in the root's eager buffers where
    // its pool leaves room for the relays below it (32 and 48 buffers), else from
    // the program's buffer.
    let sizes = [200_000usize, 40_000, 20_000, 8, 3000, 100, 16_384, 1];
    for (n, eager, tree_msgs) in [(4u16, 4, 7), (13, 4, 6), (4, 32, 8), (13, 48, 8)] {
        let seed = base ^ (n as u64) << 8 ^ (eager as u64) << 16;
        let roots: Vec<u16> = (0..n).collect();
        let (forwarded, copies) = crossing_broadcasts(seed, n, &|_| eager, &roots, &sizes, true);
        // A root's copy leaves a unit for each level of relays below it: none fits
        // in 4 buffers; in 32 or 48, all four of a root's up to 4 KiB at once (16
        // KiB goes from the program's buffer).
        let want = if eager >= 32 { 4 * n as usize } else { 0 };
        assert_eq!(
            copies, want,
            "seed {seed}: n={n}: broadcasts sent from a copy"
        );
        assert_eq!(
            forwarded as usize,
            n as usize * tree_msgs * binomial_inner(n as usize),
            "seed {seed}: n={n}: every inner member forwards every tree broadcast once"
        );
    }
}

/// Past 256 KiB a broadcast goes down the tree only where that spares the root two
/// thirds of its copies (binomial: from 13 members), and only while every relay's
/// ring holds it (256 eager buffers, as a hosted rank has: 1 MiB up to 16 members);
/// otherwise straight from the root. Under loss every member gets it whole.
#[test]
fn a_long_broadcast_goes_down_the_tree_only_where_that_spares_the_root() {
    let base = seed() ^ 0x10ad;
    let sizes = [1usize << 20, 300_000, 8];
    // Broadcasts that go down the tree: at 16 members all three; at 8 (the root
    // would send 3 of 7 copies) and 4 (2 of 3) only the short one.
    for (n, tree_msgs) in [(16u16, 3), (8, 1), (4, 1)] {
        let seed = base ^ (n as u64) << 8;
        let (forwarded, _) = crossing_broadcasts(seed, n, &|_| 256, &[0], &sizes, false);
        assert_eq!(
            forwarded as usize,
            tree_msgs * binomial_inner(n as usize),
            "seed {seed}: n={n}: every inner member forwards every tree broadcast once"
        );
    }
}

/// Broadcasts too long for the relays' rings go straight from the root, and so
/// would reach a member before a shorter one sent earlier that relays pass on. The
/// root holds each such one until every member has answered its fence (see the
/// engine's `fence`), so every member gets every root's broadcasts in order, with
/// every root broadcasting at once under loss.
#[test]
fn flat_broadcasts_wait_for_the_roots_tree_ones_under_loss() {
    let base = seed() ^ 0xfe;
    // 4 eager buffers: 200,000 bytes go flat at 4 and 13 nodes, the rest by tree.
    let sizes = [8usize, 200_000, 3000, 100, 200_000, 200_000, 1];
    for n in [4u16, 13] {
        let seed = base ^ (n as u64) << 8;
        let roots: Vec<u16> = (0..n).collect();
        let (forwarded, _) = crossing_broadcasts(seed, n, &|_| 4, &roots, &sizes, true);
        assert_eq!(
            forwarded as usize,
            n as usize * 4 * binomial_inner(n as usize),
            "seed {seed}: n={n}: every inner member forwards every tree broadcast once"
        );
    }
}

/// A root's best-effort broadcasts keep their place among its reliable ones
/// whichever way each goes: short reliable ones down the tree through relays, long
/// ones straight from the root, best-effort ones straight from the root too (held
/// in the gate behind the tree ones, as a flat reliable one is). On a lossless
/// fabric every member gets every one, in the order sent.
#[test]
fn best_effort_broadcasts_keep_their_place_among_reliable_ones() {
    let seed = seed() ^ 0xbe;
    let n = 8u16;
    // (length, reliable): 4 eager buffers, so 200,000 bytes go flat.
    let plan = [
        (8usize, true),
        (500, false),
        (1000, true),
        (200_000, true),
        (300, false),
        (8, true),
        (3000, false),
        (100, true),
        (1, false),
    ];
    let sizes: Vec<usize> = plan.iter().map(|p| p.0).collect();
    let mut sim = port5_members(seed, n, &sizes);
    let mut hs = Vec::new();
    for (k, &(len, reliable)) in plan.iter().enumerate() {
        let body: &'static [u8] = leak(pattern(0, k, len));
        let root = &mut sim.nodes[0];
        hs.push(if reliable {
            root.isend_flowctl(5, body).unwrap()
        } else {
            root.isend(5, body).unwrap()
        });
    }
    let r = sim.run_until(Instant::from_millis(10_000), |nodes, _| {
        nodes[1..]
            .iter()
            .all(|x| x.state().got.get(&0) == Some(&plan.len()))
    });
    for (i, node) in sim.nodes.iter().enumerate().skip(1) {
        let st = node.state();
        assert!(
            st.errors.is_empty(),
            "seed {seed}: member {i}: {:?}",
            st.errors
        );
    }
    assert!(r.is_ok(), "seed {seed}: broadcasts did not all arrive");
    assert!(
        sim.nodes
            .iter()
            .map(|x| x.engine().stats().forwarded)
            .sum::<u64>()
            > 0,
        "seed {seed}: some went down the tree"
    );
    for h in hs {
        assert_eq!(sim.nodes[0].tsend(h), Ok(true), "seed {seed}");
    }
}

/// Four members whose port 5 takes broadcasts from member 0 (checked as `Check`
/// does: 8 bytes then 200,000, the first by tree, the second too long for 4 eager
/// buffers, so straight from the root), and those two sizes.
fn relayed_pair_of_broadcasts(seed: u64) -> (Sim<SimGamma<'static, Check>>, [usize; 2]) {
    let sizes = [8usize, 200_000];
    (port5_members(seed, 4, &sizes), sizes)
}

/// `n` members, 4 eager buffers each, whose port 5 takes broadcasts from member 0
/// (checked as `Check` does: messages of `sizes`, in order) into 256 KiB.
fn port5_members(seed: u64, n: u16, sizes: &[usize]) -> Sim<SimGamma<'static, Check>> {
    let g = groups(n);
    let mut sim = Sim::new(n as usize, SimConfig::lan(seed), |i, dev, clock| {
        let mut st = Check::default();
        st.plan.insert(0, sizes.to_vec());
        let store = sized(n as usize, n as usize, 256, 8, 4);
        SimGamma::init(cfg(1, i as u16), g, store, handlers(), dev, clock, st).unwrap()
    });
    for node in sim.nodes.iter_mut() {
        let buf = Some(leak(vec![0; 256 * 1024]));
        node.set_active_port(5, BROADCAST, 1, 5, Some(on_message), None, 0, GO_BACK, buf)
            .unwrap();
    }
    sim
}

/// Member 0 starts broadcasts of `sizes` on port 5, one after the other.
fn root_broadcasts(
    sim: &mut Sim<SimGamma<'static, Check>>,
    sizes: &[usize],
) -> Vec<volley_core::engine::SendHandle> {
    let root = &mut sim.nodes[0];
    let mut hs = Vec::new();
    for (k, &len) in sizes.iter().enumerate() {
        hs.push(root.isend_flowctl(5, leak(pattern(0, k, len))).unwrap());
    }
    hs
}

/// A relay that is dead when the root broadcasts: the root sends the member below
/// it its copy itself, and that member answers the fence of the root's next,
/// flat, broadcast like the others. Both broadcasts fail at the root (the relay
/// never has them); every live member gets both, in order.
#[test]
fn a_dead_relays_children_get_the_roots_broadcasts_from_the_root() {
    let seed = seed() ^ 0xde;
    // Binomial tree from 0: 0 -> 1, 2 and 1 -> 3.
    let (relay, below) = (1usize, 3usize);
    let (mut sim, sizes) = relayed_pair_of_broadcasts(seed);
    sim.net.kill(relay);
    let start = sim.now();
    let hs = root_broadcasts(&mut sim, &sizes);
    sim.run_until(start + Duration::from_secs(5), |nodes, _| {
        hs.iter().all(|&h| {
            nodes[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
        }) && [2, below]
            .iter()
            .all(|&i| nodes[i].state().got.get(&0) == Some(&2))
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the root's broadcasts never finished: {e:?}"));
    let root = sim.nodes[0].engine().stats();
    assert_eq!(root.fences, 1, "seed {seed}");
    assert_eq!(root.rerouted, 1, "seed {seed}: the tree one, to member 3");
    for &h in &hs {
        assert!(
            sim.nodes[0].tsend(h).is_err(),
            "seed {seed}: the relay is dead"
        );
    }
    for i in [2, below] {
        let errors = &sim.nodes[i].state().errors;
        assert!(errors.is_empty(), "seed {seed}: member {i}: {errors:?}");
    }
}

/// A relay that took the root's tree broadcast (so the root's send to it
/// succeeded) and died before its child had it: that member never gets it. It
/// probes the relays above it while it owes the fence of the root's next, flat,
/// broadcast, and answers once it finds one dead: the flat one goes, no hang.
#[test]
fn a_member_below_a_relay_that_died_with_a_broadcast_answers_the_fence() {
    let seed = seed() ^ 0xdf;
    // Binomial tree from 0: 0 -> 1, 2 and 1 -> 3.
    let (relay, below) = (1usize, 3usize);
    let (mut sim, sizes) = relayed_pair_of_broadcasts(seed);
    // The relay's copy never reaches its child.
    sim.net.cut(relay, below);
    let hs = root_broadcasts(&mut sim, &sizes);
    let pending = Ok(volley_core::engine::SendStatus::Pending);
    sim.run_until(Instant::from_millis(1_000), |nodes, _| {
        nodes[0].engine().send_status(hs[0]) != pending
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the tree one never landed: {e:?}"));
    sim.net.kill(relay);
    let start = sim.now();
    sim.run_until(start + Duration::from_secs(5), |nodes, _| {
        nodes[0].engine().send_status(hs[1]) != pending
            && nodes[below].state().got.get(&0) == Some(&1)
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the flat one never went: {e:?}"));
    assert_eq!(sim.nodes[0].engine().stats().fences, 1, "seed {seed}");
    assert_eq!(
        sim.nodes[below].engine().stats().fences_given_up,
        1,
        "seed {seed}"
    );
    assert_eq!(sim.nodes[0].tsend(hs[0]), Ok(true), "seed {seed}");
    assert!(
        sim.nodes[0].tsend(hs[1]).is_err(),
        "seed {seed}: the relay is dead"
    );
    assert!(sim.nodes[2].state().errors.is_empty(), "seed {seed}");
    assert_eq!(sim.nodes[2].state().got.get(&0), Some(&2), "seed {seed}");
    // Member 3's first from root 0 is the flat one.
    let errors = &sim.nodes[below].state().errors;
    assert_eq!(errors.len(), 1, "seed {seed}: {errors:?}");
}

/// A root with a large pool sends a long broadcast down the tree to relays whose
/// rings hold a quarter of it: they pass it on a chunk at a time, taking the next
/// chunk into a buffer once their children have acknowledged the one it held.
#[test]
fn a_relay_with_a_short_ring_passes_a_long_broadcast_on_under_loss() {
    let seed = seed() ^ 0x51;
    let sizes = [200_000usize, 100, 70_000];
    for n in [4u16, 8] {
        let (forwarded, _) = crossing_broadcasts(
            seed,
            n,
            &|i| if i == 0 { 64 } else { 4 },
            &[0],
            &sizes,
            false,
        );
        assert_eq!(
            forwarded as usize,
            sizes.len() * binomial_inner(n as usize),
            "seed {seed}: n={n}: every relay forwards every broadcast once"
        );
    }
}

/// Every root in `roots` broadcasts `sizes` at once from port 5 (so trees of
/// different roots cross) under loss, member `i` having `eager(i)` eager buffers;
/// checks every message's bytes and order per root and every send's outcome, and
/// returns how many forwards the members made and how many sends went from a
/// copy. With `copy`, messages of at most
/// 16 KiB are sent as `gamma_send_flowctl` sends them: from an eager copy where the
/// engine takes one, else from the program's buffer.
fn crossing_broadcasts(
    seed: u64,
    n: u16,
    eager: &dyn Fn(usize) -> usize,
    roots: &[u16],
    sizes: &[usize],
    copy: bool,
) -> (u64, usize) {
    let g = groups(n);
    let mut sc = SimConfig::lan(seed);
    sc.faults = lossy();
    sc.faults.corrupt = 0.0;
    let mut sim = Sim::new(n as usize, sc, |i, dev, clock| {
        let mut st = Check::default();
        for &src in roots {
            if src != i as u16 {
                st.plan.insert(src, sizes.to_vec());
            }
        }
        let store = sized(n as usize, n as usize, 256, 8, eager(i));
        SimGamma::init(
            patient(cfg(1, i as u16)),
            g,
            store,
            handlers(),
            dev,
            clock,
            st,
        )
        .unwrap()
    });
    for node in sim.nodes.iter_mut() {
        node.set_active_port(
            5,
            BROADCAST,
            1,
            5,
            Some(on_message),
            None,
            0,
            GO_BACK,
            Some(leak(vec![
                0;
                sizes
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0)
                    .max(256 * 1024)
            ])),
        )
        .unwrap();
    }
    let mut handles = Vec::new();
    let mut copies = 0;
    for (k, &len) in sizes.iter().enumerate() {
        for &i in roots {
            let body: &'static [u8] = leak(pattern(i, k, len));
            let node = &mut sim.nodes[i as usize];
            let eager = (copy && len <= 16_384)
                .then(|| node.engine_mut().start_send_eager(5, &[], body).ok())
                .flatten();
            copies += eager.is_some() as usize;
            let h = eager.unwrap_or_else(|| node.isend_flowctl(5, body).unwrap());
            handles.push((i as usize, h));
        }
    }
    let want = |i: usize| sizes.len() * roots.iter().filter(|&&r| r as usize != i).count();
    let r = sim.run_until(Instant::from_millis(60_000), |nodes, _| {
        nodes
            .iter()
            .enumerate()
            .all(|(i, x)| x.state().got.values().sum::<usize>() == want(i))
            && handles.iter().all(|&(i, h)| {
                nodes[i].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
            })
    });
    if r.is_err() {
        for (i, node) in sim.nodes.iter().enumerate() {
            eprintln!(
                "member {i}: got {:?} errors {:?}",
                node.state().got,
                node.state().errors
            );
            eprintln!("  {:?}", node.engine().stats());
        }
    }
    assert!(
        r.is_ok(),
        "seed {seed}: n={n}: broadcasts did not all arrive"
    );
    for (i, node) in sim.nodes.iter().enumerate() {
        let st = node.state();
        assert!(
            st.errors.is_empty(),
            "seed {seed}: member {i}: {:?}",
            st.errors
        );
    }
    for &(i, h) in &handles {
        assert_eq!(sim.nodes[i].tsend(h), Ok(true), "seed {seed}: root {i}");
    }
    // Every copy, relay's ring and root's, is given back (and counted back), once
    // the last acks are in (under loss, after some retransmissions).
    let _ = sim.run_until(sim.now() + Duration::from_secs(5), |nodes, _| {
        nodes
            .iter()
            .enumerate()
            .all(|(i, x)| x.engine().eager_free() == eager(i))
    });
    for (i, node) in sim.nodes.iter().enumerate() {
        assert_eq!(
            node.engine().eager_free(),
            eager(i),
            "seed {seed}: member {i}"
        );
    }
    let forwarded = sim.nodes.iter().map(|x| x.engine().stats().forwarded).sum();
    (forwarded, copies)
}

/// Virtual time of one 8-byte broadcast from node 0 to `n` nodes, until the last
/// member has it.
fn broadcast_cost(n: u16, seed: u64, tree: bool) -> f64 {
    let g = groups(n);
    let k = 16 - (n - 1).leading_zeros() as usize;
    let mut sim = Sim::new(n as usize, SimConfig::lan(seed), |i, dev, clock| {
        let mut c = cfg(1, i as u16);
        if !tree {
            c.bcast_tree = None;
        }
        let chans = if i == 0 && !tree { n as usize } else { k + 2 };
        let s = sized(n as usize, chans, 2 * n as usize, 4, 16);
        SimGamma::init(c, g, s, handlers(), dev, clock, Bar::default()).unwrap()
    });
    for (i, node) in sim.nodes.iter_mut().enumerate() {
        let dest = if i == 0 { BROADCAST } else { 0 };
        let buf = Some(leak(vec![0; 64]));
        node.set_active_port(5, dest, 1, 5, Some(on_bcast), None, 0, GO_BACK, buf)
            .unwrap();
    }
    sim.nodes[0].isend_flowctl(5, b"8 bytes!").unwrap();
    let t = sim
        .run_until(Instant::from_millis(1000), |nodes, _| {
            nodes.iter().skip(1).all(|x| x.state().got.len() == 1)
        })
        .unwrap_or_else(|e| panic!("seed {seed}: broadcast to {n} stuck at {e:?}"));
    (t - Instant::ZERO).as_micros_f64()
}

#[test]
fn broadcast_cost_grows_as_log_n_to_1024_nodes() {
    let seed = seed();
    let mut times = Vec::new();
    for k in 1..=10u32 {
        let n = 1u16 << k;
        let t = broadcast_cost(n, seed, true);
        println!("broadcast 8 B, {n:>4} nodes: {t:>7.1} us (tree)");
        times.push(t);
    }
    let hop = times[0];
    for (k, t) in times.iter().enumerate() {
        let hops = (k + 1) as f64;
        assert!(
            *t <= hop * hops * 1.5,
            "seed {seed}: {} nodes took {t:.1} us, more than {hops} hops of {hop:.1} us",
            1u32 << (k + 1)
        );
    }
    // The root sending every copy itself grows with n.
    let flat = broadcast_cost(1024, seed, false);
    println!("broadcast 8 B, 1024 nodes: {flat:>7.1} us (root sends all)");
    assert!(
        flat > times[9] * 2.0,
        "seed {seed}: the tree ({:.1} us) should beat the root alone ({flat:.1} us)",
        times[9]
    );
}

// ------------------------------------------------- senders that die mid-message

/// What reached a node's port 5: source node, length, errno (a dead peer's
/// `SendFailure`, which every port bound to it gets, left out).
type Got = Vec<(u16, usize, Option<volley_core::engine::Errno>)>;

fn on_got(u: &mut Upcall<'_, '_, Got>) {
    let rec = (u.source().node, u.len(), u.errno());
    if rec.2 != Some(volley_core::engine::Errno::SendFailure) {
        u.state().push(rec);
    }
}

/// `n` nodes whose port 5 takes messages from anyone in the group (recorded in
/// `Got`) and sends to port 5 of `dest(i)`; each has `eager` eager buffers.
fn port5_sim(
    seed: u64,
    n: u16,
    dest: impl Fn(u16) -> u16,
    eager: usize,
) -> Sim<SimGamma<'static, Got>> {
    let g = groups(n);
    let mut sim = Sim::new(n as usize, SimConfig::lan(seed), |i, dev, clock| {
        let store = sized(n as usize, n as usize, 256, 8, eager);
        SimGamma::init(
            cfg(1, i as u16),
            g,
            store,
            handlers(),
            dev,
            clock,
            Got::new(),
        )
        .unwrap()
    });
    for (i, node) in sim.nodes.iter_mut().enumerate() {
        let buf = Some(leak(vec![0; 512 * 1024]));
        let h = Some(on_got as fn(&mut Upcall<'_, '_, Got>));
        node.set_active_port(5, dest(i as u16), 1, 5, h, h, 0, GO_BACK, buf)
            .unwrap();
    }
    sim
}

/// A sender that dies half-way through a long message would leave it holding
/// the receiver's port for good, and every other sender's message to that port
/// refused. The receiver probes the silent sender; once it is declared dead the
/// message is handed over as lost, and the next sender's message lands.
#[test]
fn a_message_whose_sender_died_half_way_frees_its_port() {
    let seed = seed() ^ 0x0d;
    let mut sim = port5_sim(seed, 3, |i| if i == 2 { 0 } else { 2 }, 4);
    let long: &'static [u8] = leak(vec![7; 400_000]);
    sim.nodes[0].isend_flowctl(5, long).unwrap();
    sim.run_until(Instant::from_millis(1_000), |nodes, _| {
        nodes[2].engine().stats().rx_frames > 20
    })
    .unwrap_or_else(|e| panic!("seed {seed}: no frame came: {e:?}"));
    sim.net.kill(0);
    sim.nodes[1].send_flowctl(5, b"after").unwrap();
    sim.run_until(sim.now() + Duration::from_secs(10), |nodes, _| {
        nodes[2].state().iter().any(|m| m.0 == 1)
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the port stayed busy: {e:?}"));
    // The lost message's length is what had come of it.
    let got = sim.nodes[2].state();
    assert_eq!(got.len(), 2, "seed {seed}: {got:?}");
    let (src, len, errno) = got[0];
    assert_eq!(
        (src, errno),
        (0, Some(volley_core::engine::Errno::FrameLost))
    );
    assert!(len > 0 && len < long.len(), "seed {seed}: {got:?}");
    assert_eq!(got[1], (1, 5, None), "seed {seed}");
    assert_eq!(sim.nodes[2].engine().stats().rx_orphaned, 1, "seed {seed}");
}

/// A root that dies while a long broadcast goes down the tree chunk by chunk
/// leaves it half-stored at a relay (node 1 of 0 -> 1, 2; 1 -> 3) and at the
/// relay's child. The relay stops passing it on and tells its child, and every
/// survivor's port takes the next broadcast, from another root. The relay's
/// buffers all come back.
#[test]
fn a_long_broadcast_whose_root_died_half_way_is_dropped_down_the_tree() {
    let seed = seed() ^ 0x0e;
    // 48 buffers: a relay's ring holds 256 KiB, so 200,000 bytes go down the tree.
    let mut sim = port5_sim(seed, 4, |_| BROADCAST, 48);
    let long: &'static [u8] = leak(vec![7; 200_000]);
    sim.nodes[0].isend_flowctl(5, long).unwrap();
    sim.run_until(Instant::from_millis(1_000), |nodes, _| {
        nodes[3].engine().stats().rx_frames > 20
    })
    .unwrap_or_else(|e| panic!("seed {seed}: nothing reached node 3: {e:?}"));
    sim.net.kill(0);
    sim.nodes[2].send_flowctl(5, b"after").unwrap();
    sim.run_until(sim.now() + Duration::from_secs(10), |nodes, _| {
        [1, 3]
            .iter()
            .all(|&i| nodes[i].state().iter().any(|m| m.0 == 2))
    })
    .unwrap_or_else(|e| panic!("seed {seed}: a port stayed busy: {e:?}"));
    let lost = Some(volley_core::engine::Errno::FrameLost);
    for i in [1, 3] {
        let got = sim.nodes[i].state();
        assert_eq!(got.len(), 2, "seed {seed}: node {i}: {got:?}");
        assert_eq!((got[0].0, got[0].2), (0, lost), "seed {seed}: node {i}");
        assert!(got[0].1 < long.len(), "seed {seed}: node {i}: {got:?}");
        assert_eq!(got[1], (2, 5, None), "seed {seed}: node {i}");
        assert_eq!(sim.nodes[i].engine().stats().rx_orphaned, 1, "seed {seed}");
    }
    // Node 3 had the long one from relay 1 (told by its ABORT); node 2's goes to
    // node 3 through dead node 0 (root 2's tree: 2 -> 0, 1; 0 -> 3), so node 2
    // sends it to node 3 itself.
    assert_eq!(sim.nodes[2].engine().stats().rerouted, 1, "seed {seed}");
    assert_eq!(sim.nodes[1].engine().eager_free(), 48, "seed {seed}");
}

/// `n` 8-byte reliable messages from node 0 to node 1 (port 5), each checked and
/// exactly once, in order, with at most 16 in flight (eager copies), on a LAN whose
/// links lose `bursts` (`(every, burst)`) if given; the virtual time it took.
fn stream_through_bursts(seed: u64, n: usize, bursts: Option<(u32, u32)>) -> Duration {
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        let mut st = Check::default();
        st.plan.insert(0, vec![8; n]);
        let store = sized(2, 2, 64, 8, 16);
        // Hosted defaults: 30 s to die, timeouts from 0.5 ms doubling to 200 ms.
        let c = Config::new(0x1234, 1, i as u16);
        SimGamma::init(c, g, store, handlers(), dev, clock, st).unwrap()
    });
    sim.nodes[0]
        .set_passive_port(5, 1, 1, 5, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[1]
        .set_active_port(
            5,
            0,
            1,
            5,
            Some(on_message),
            None,
            0,
            GO_BACK,
            Some(leak(vec![0; 64])),
        )
        .unwrap();
    if let Some((every, burst)) = bursts {
        sim.net.drop_bursts(every, burst);
    }
    let start = sim.now();
    let mut sent = 0;
    let limit = start + Duration::from_secs(600);
    while sim.nodes[1].state().got.get(&0).copied().unwrap_or(0) < n {
        while sent < n {
            let body = pattern(0, sent, 8);
            match sim.nodes[0].engine_mut().start_send_eager(5, &[], &body) {
                Ok(h) => {
                    sim.nodes[0].engine_mut().detach(h).unwrap();
                    sent += 1;
                }
                Err(volley_core::engine::Error::NoResources) => break,
                Err(e) => panic!("seed {seed}: send {sent}: {e:?}"),
            }
        }
        let target = sim.nodes[1].state().got.get(&0).copied().unwrap_or(0) + 1;
        sim.run_until(sim.now() + Duration::from_millis(50), |nodes, _| {
            nodes[1].state().got.get(&0).copied().unwrap_or(0) >= target
        })
        .ok();
        assert!(
            sim.now() < limit,
            "seed {seed}: {bursts:?}: stuck at {sent} sent"
        );
    }
    let st = sim.nodes[1].state();
    assert!(st.errors.is_empty(), "seed {seed}: {:?}", st.errors);
    assert_eq!(st.got.get(&0), Some(&n), "seed {seed}: exactly once");
    assert_eq!(sim.nodes[0].engine().stats().peers_failed, 0, "seed {seed}");
    sim.now().saturating_since(start)
}

/// Bursts of 50 consecutive frames lost of every 500, both ways, and of 20 of
/// every 100: every message still arrives exactly once and in order, and the
/// sender never takes its live peer for dead (how fast the bursts are recovered
/// is `cargo bench -p volley-cli --bench burst_loss`'s, on `udp`).
#[test]
fn bursts_of_loss_both_ways_deliver_every_message_once() {
    let seed = seed();
    for bursts in [None, Some((500, 50)), Some((100, 20))] {
        let took = stream_through_bursts(seed, 2000, bursts);
        println!("seed {seed}: 2000 messages, bursts {bursts:?}: {took:?} (virtual)");
    }
}
