//! QNIX in the simulator: registration, contexts with tags matched across four
//! processes under loss (receives posted before and after the messages), short and
//! long sends from the pool and from segments, truncation, broadcast and multicast,
//! join_group and barrier, two applications on one fabric, a dead peer, and misuse.
//! Every test prints its seed when it fails.

// Processes are indexed by endpoint throughout.
#![allow(clippy::needless_range_loop)]

use volley_core::cheetah::Segments;
use volley_core::engine::Config;
use volley_core::phy::FaultConfig;
use volley_core::qnix::{Name, QxError, Region, BUSY, DONE, FREE, PAGE, RENDEZVOUS_MIN, SHORT_MAX};
use volley_core::sim::{Sim, SimConfig, SimQnix};
use volley_core::time::{Duration, Instant};

mod common;
use common::{groups, launch_garbage, xorshift as pattern};

type Node = SimQnix<'static, Segments<'static>>;

/// Segment 1 of every process: the buffer pool; segment 2: other memory.
const POOL: u64 = 1 << 40;
const MEM: u64 = 2 << 40;
const POOL_LEN: usize = 256 * PAGE;
const MEM_LEN: usize = 4 << 20;

fn lossy() -> FaultConfig {
    common::faults(0.05, 0.02, 0.05, 0.01)
}

/// One process per `(ai, pi, size)`, registered.
fn make_sim(names: &[(i32, i32, i32)], seed: u64, faults: FaultConfig) -> Sim<Node> {
    let n = names.len() as u16;
    let g = groups(n);
    let mut cfg = SimConfig::lan(seed);
    cfg.faults = faults;
    let mut sim = Sim::new(n as usize, cfg, |i, dev, clock| {
        let mut mem = Segments::new();
        assert_eq!(mem.expose(Vec::leak(vec![0u8; POOL_LEN])), POOL);
        assert_eq!(mem.expose(Vec::leak(vec![0u8; MEM_LEN])), MEM);
        let c = Config::new(9, 1, i as u16);
        let mut q = SimQnix::new(c, g, n as usize, dev, clock, mem).unwrap();
        q.set_pool(POOL, POOL_LEN).unwrap();
        q
    });
    for (q, &(ai, pi, size)) in sim.nodes.iter_mut().zip(names) {
        q.register(Name::new(ai, pi), ai, size).unwrap();
    }
    until(&mut sim, seed, 30, |nodes, _| {
        nodes.iter_mut().all(|q| q.registered().unwrap())
    });
    sim
}

fn app(n: i32) -> Vec<(i32, i32, i32)> {
    (0..n).map(|i| (5, i, n)).collect()
}

fn until(
    sim: &mut Sim<Node>,
    seed: u64,
    secs: u64,
    goal: impl FnMut(&mut [Node], Instant) -> bool,
) {
    let limit = sim.now() + Duration::from_secs(secs);
    if let Err(t) = sim.run_until(limit, goal) {
        panic!(
            "no progress: seed {seed:#x} (sim {:#x}) at {:?}",
            t.seed, t.at
        );
    }
}

fn pool(q: &Node) -> &[u8] {
    q.memory().segment(POOL).unwrap()
}
fn pool_mut(q: &mut Node) -> &mut [u8] {
    q.memory_mut().segment_mut(POOL).unwrap()
}
fn mem(q: &Node) -> &[u8] {
    q.memory().segment(MEM).unwrap()
}
fn mem_mut(q: &mut Node) -> &mut [u8] {
    q.memory_mut().segment_mut(MEM).unwrap()
}

fn recv_done(q: &Node, ctx: usize) -> bool {
    q.recv_doorbell(ctx) != BUSY
}

/// Whether every receive `rc[m]` of processes 1 and up has landed and every
/// send `sc` of process 0 has left.
fn all_landed(nodes: &[Node], rc: &[Vec<usize>], sc: &[usize]) -> bool {
    (1..rc.len()).all(|m| rc[m].iter().all(|&r| recv_done(&nodes[m], r)))
        && sc.iter().all(|&c| nodes[0].send_doorbell(c) != BUSY)
}

#[test]
fn tags_are_matched_across_four_processes_under_loss() {
    for seed in [0x9a1_u64, 0x51d] {
        let n = 4usize;
        let mut sim = make_sim(&app(n as i32), seed, lossy());
        // Every process sends three messages to every other: tag 7 (short), tag 3
        // (from segments, 20 KB) and tag 7 again (from the pool, 9000 bytes).
        // Receivers post slots 1 (tag 3) and 2 (tag 7) first: tag-7 messages match
        // tag-7 receives in posting order, so slot 2 gets the short message and the
        // pooled one arrives early, kept until slot 0 is posted at the end.
        let msg = |from: usize, to: usize, k: usize, len: usize| {
            pattern(seed ^ ((from * 16 + to) * 4 + k) as u64, len)
        };
        let mut recvs = vec![vec![]; n];
        for i in 0..n {
            let q = &mut sim.nodes[i];
            for j in (0..n).filter(|&j| j != i) {
                // Receive side: one 32 KB slot of MEM per sender and message.
                for (k, tag) in [(1, 3), (0, 7), (2, 7)] {
                    let at = MEM + ((j * 3 + k) * 32 * 1024) as u64;
                    let r = q
                        .recv_context(
                            Name::new(5, j as i32),
                            tag,
                            true,
                            8,
                            32 * 1024,
                            Region::Segments(vec![(at, 32 * 1024)]),
                        )
                        .unwrap();
                    recvs[i].push((j, k, r));
                    if k != 0 {
                        q.receive(r).unwrap();
                    }
                }
            }
        }
        let mut sends = vec![vec![]; n];
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                let q = &mut sim.nodes[i];
                let to = Name::new(5, j as i32);
                let short = msg(i, j, 0, 300);
                let s0 = q
                    .send_context(to, 7, true, 1, 300, Region::Data(short))
                    .unwrap();
                q.send_short(s0).unwrap();
                let long = msg(i, j, 1, 20_000);
                let at = MEM + (2 << 20) + (j * 32 * 1024) as u64;
                mem_mut(q)[(at - MEM) as usize..][..20_000].copy_from_slice(&long);
                let s1 = q
                    .send_context(
                        to,
                        3,
                        true,
                        5,
                        20_000,
                        Region::Segments(vec![(at, 12_000), (at + 12_000, 8_000)]),
                    )
                    .unwrap();
                q.send(s1).unwrap();
                let pooled = msg(i, j, 2, 9000);
                let page = j * 4;
                pool_mut(q)[page * PAGE..][..9000].copy_from_slice(&pooled);
                let s2 = q
                    .send_context(to, 7, true, 3, 9000, Region::Pool(page))
                    .unwrap();
                q.send(s2).unwrap();
                sends[i].extend([s0, s1, s2]);
            }
        }
        until(&mut sim, seed, 60, |nodes, _| {
            nodes.iter().enumerate().all(|(i, q)| {
                sends[i].iter().all(|&s| q.send_doorbell(s) == DONE)
                    && q.stats().unexpected == n as u64 - 1
            })
        });
        // The first tag-7 receive is posted only now: its message waited.
        for i in 0..n {
            for &(_, k, r) in &recvs[i] {
                if k == 0 {
                    sim.nodes[i].receive(r).unwrap();
                }
            }
        }
        until(&mut sim, seed, 60, |nodes, _| {
            nodes
                .iter()
                .enumerate()
                .all(|(i, q)| recvs[i].iter().all(|&(_, _, r)| recv_done(q, r)))
        });
        for i in 0..n {
            for &(j, k, r) in &recvs[i] {
                let m = [2, 1, 0][k];
                let len = [300, 20_000, 9000][m];
                let q = &mut sim.nodes[i];
                assert_eq!(
                    q.poll_for_receive(r),
                    Ok(len),
                    "seed {seed:#x}: {j}->{i} #{k}"
                );
                let at = (j * 3 + k) * 32 * 1024;
                assert!(
                    mem(q)[at..at + len] == msg(j, i, m, len),
                    "seed {seed:#x}: message {m} from {j} to {i} differs"
                );
            }
            for &s in &sends[i] {
                assert_eq!(sim.nodes[i].poll_for_send(s), Ok(()));
            }
        }
    }
}

#[test]
fn a_long_message_lands_in_the_pool_and_a_short_buffer_is_truncated() {
    let seed = 0x10c;
    let mut sim = make_sim(&app(2), seed, lossy());
    let len = 600_000;
    let data = pattern(seed, len);
    mem_mut(&mut sim.nodes[0])[..len].copy_from_slice(&data);
    let r = sim.nodes[1]
        .recv_context(Name::new(5, 0), 1, true, 0, len, Region::Pool(10))
        .unwrap();
    sim.nodes[1].receive(r).unwrap();
    let small = sim.nodes[1]
        .recv_context(
            Name::new(5, 0),
            2,
            true,
            0,
            100,
            Region::Segments(vec![(MEM, 100)]),
        )
        .unwrap();
    sim.nodes[1].receive(small).unwrap();
    let q = &mut sim.nodes[0];
    let s = q
        .send_context(
            Name::new(5, 1),
            1,
            true,
            0,
            len,
            Region::Segments(vec![(MEM, len)]),
        )
        .unwrap();
    q.send(s).unwrap();
    let s2 = q
        .send_context(
            Name::new(5, 1),
            2,
            false,
            0,
            1000,
            Region::Segments(vec![(MEM, 1000)]),
        )
        .unwrap();
    q.send(s2).unwrap();
    // The long send goes by rendezvous: it completes once the receiver has acked
    // the put, which takes the receiver's steps.
    until(&mut sim, seed, 60, |nodes, _| {
        recv_done(&nodes[1], r) && recv_done(&nodes[1], small) && nodes[0].send_doorbell(s) != BUSY
    });
    assert_eq!(sim.nodes[0].stats().rendezvous, 1);
    assert_eq!(sim.nodes[1].poll_for_receive(r), Ok(len));
    assert!(pool(&sim.nodes[1])[10 * PAGE..10 * PAGE + len] == data[..]);
    assert_eq!(
        sim.nodes[1].poll_for_receive(small),
        Err(QxError::Truncated)
    );
    assert!(mem(&sim.nodes[1])[..100] == data[..100]);
    assert_eq!(mem(&sim.nodes[1])[100], 0, "nothing past the buffer");
    assert_eq!(sim.nodes[0].poll_for_send(s), Ok(()));
    // No doorbell: the context was freed when the send completed.
    assert_eq!(sim.nodes[0].poll_for_send(s2), Err(QxError::NoContext));
}

/// `short_data` copies a short send's bytes into a buffer the process keeps: the
/// receiver gets them, a finished send's buffer serves the next (eight sends use
/// at most two buffers), and more than `SHORT_MAX` bytes are refused.
#[test]
fn short_data_reuses_the_buffers_of_finished_sends() {
    let seed = 0x5d1;
    let mut sim = make_sim(&app(2), seed, common::faults(0.0, 0.0, 0.0, 0.0));
    let mut buffers = Vec::new();
    for k in 0..8u8 {
        let bytes = [k, k ^ 0x5a, 7, 1, 2, 3, 4, k];
        let r = sim.nodes[1]
            .recv_context(
                Name::new(5, 0),
                1,
                true,
                0,
                8,
                Region::Segments(vec![(MEM, 8)]),
            )
            .unwrap();
        sim.nodes[1].receive(r).unwrap();
        let q = &mut sim.nodes[0];
        let d = q.short_data(&bytes).unwrap();
        let Region::Data(v) = &d else {
            panic!("seed {seed:#x}: not a data region: {d:?}");
        };
        if !buffers.contains(&v.as_ptr()) {
            buffers.push(v.as_ptr());
        }
        let s = q.send_context(Name::new(5, 1), 1, false, 0, 8, d).unwrap();
        q.send_short(s).unwrap();
        until(&mut sim, seed, 10, |nodes, _| recv_done(&nodes[1], r));
        assert_eq!(sim.nodes[1].poll_for_receive(r), Ok(8), "seed {seed:#x}");
        assert_eq!(mem(&sim.nodes[1])[..8], bytes, "seed {seed:#x}, send {k}");
    }
    assert!(
        buffers.len() <= 2,
        "seed {seed:#x}: {} buffers",
        buffers.len()
    );
    assert_eq!(
        sim.nodes[0].short_data(&[0; SHORT_MAX + 1]),
        Err(QxError::TooLong)
    );
}

#[test]
fn broadcast_and_multicast_reach_three_receivers() {
    let seed = 0xb0c;
    let mut sim = make_sim(&app(5), seed, lossy());
    let big = pattern(seed, 50_000);
    let small = pattern(seed + 1, 64);
    pool_mut(&mut sim.nodes[0])[..big.len()].copy_from_slice(&big);
    let mut rs = vec![];
    for i in 1..5 {
        let q = &mut sim.nodes[i];
        let b = q
            .recv_context(
                Name::new(5, 0),
                40,
                true,
                0,
                64 * 1024,
                Region::Segments(vec![(MEM, 64 * 1024)]),
            )
            .unwrap();
        q.receive(b).unwrap();
        let m = q
            .recv_context(
                Name::new(5, 0),
                41,
                true,
                0,
                64,
                Region::Segments(vec![(MEM + 100_000, 64)]),
            )
            .unwrap();
        // Process 4 is not in the multicast: its receive stays posted.
        q.receive(m).unwrap();
        rs.push((b, m));
    }
    let q = &mut sim.nodes[0];
    let b = q
        .send_context(Name::new(5, 0), 40, true, 0, big.len(), Region::Pool(0))
        .unwrap();
    q.broadcast(b, 5).unwrap();
    let m = q
        .send_context(
            Name::new(5, 0),
            41,
            true,
            0,
            64,
            Region::Data(small.clone()),
        )
        .unwrap();
    let to = [Name::new(5, 1), Name::new(5, 2), Name::new(5, 3)];
    q.multicast_short(m, &to).unwrap();
    // The 50 KB broadcast goes to each member by rendezvous: it completes once all
    // four have acknowledged it.
    until(&mut sim, seed, 60, |nodes, _| {
        (1..5).all(|i| recv_done(&nodes[i], rs[i - 1].0))
            && (1..4).all(|i| recv_done(&nodes[i], rs[i - 1].1))
            && nodes[0].send_doorbell(b) != BUSY
    });
    assert_eq!(sim.nodes[0].stats().rendezvous, 4, "one per member");
    for i in 1..5 {
        let (b, m) = rs[i - 1];
        assert_eq!(
            sim.nodes[i].poll_for_receive(b),
            Ok(big.len()),
            "seed {seed:#x}"
        );
        assert!(mem(&sim.nodes[i])[..big.len()] == big[..]);
        if i < 4 {
            assert_eq!(sim.nodes[i].poll_for_receive(m), Ok(64));
            assert!(mem(&sim.nodes[i])[100_000..100_064] == small[..]);
        } else {
            assert_eq!(sim.nodes[i].recv_doorbell(m), BUSY);
        }
    }
    assert_eq!(sim.nodes[0].poll_for_send(b), Ok(()));
    assert_eq!(sim.nodes[0].poll_for_send(m), Ok(()));
}

#[test]
fn join_group_then_barrier_and_broadcast_in_it() {
    let seed = 0x901;
    let mut sim = make_sim(&app(5), seed, lossy());
    // Processes 1, 2 and 4 form group 77.
    let members = [1usize, 2, 4];
    let mut ctx = [0; 5];
    for &i in &members {
        let q = &mut sim.nodes[i];
        ctx[i] = q
            .send_context(Name::new(5, i as i32), 0, true, 0, 0, Region::None)
            .unwrap();
        q.join_group(ctx[i], 77, 3).unwrap();
    }
    until(&mut sim, seed, 30, |nodes, _| {
        members
            .iter()
            .all(|&i| nodes[i].send_doorbell(ctx[i]) == DONE)
    });
    for &i in &members {
        assert_eq!(sim.nodes[i].poll_for_send(ctx[i]), Ok(()));
    }
    // A barrier: nobody's doorbell rings until the last member arrives.
    for round in 0..3 {
        for &i in &members[..2] {
            let q = &mut sim.nodes[i];
            ctx[i] = q
                .send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
                .unwrap();
            q.barrier(ctx[i], 77, 3).unwrap();
        }
        let later = sim.now() + Duration::from_millis(20);
        let _ = sim.run_until(later, |_, _| false);
        for &i in &members[..2] {
            assert_eq!(
                sim.nodes[i].send_doorbell(ctx[i]),
                BUSY,
                "round {round}: left early"
            );
        }
        let q = &mut sim.nodes[4];
        ctx[4] = q
            .send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
            .unwrap();
        q.barrier(ctx[4], 77, 3).unwrap();
        until(&mut sim, seed, 30, |nodes, _| {
            members
                .iter()
                .all(|&i| nodes[i].send_doorbell(ctx[i]) == DONE)
        });
        for &i in &members {
            assert_eq!(sim.nodes[i].poll_for_send(ctx[i]), Ok(()));
        }
    }
    // The whole application is a group too, named by its AI. It is every endpoint
    // of the fabric, so its barrier is the engine's (over frames here).
    for i in 0..5 {
        let q = &mut sim.nodes[i];
        ctx[i] = q
            .send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
            .unwrap();
        q.barrier(ctx[i], 5, 5).unwrap();
        if i == 3 {
            let later = sim.now() + Duration::from_millis(20);
            let _ = sim.run_until(later, |_, _| false);
            for j in 0..4 {
                assert_eq!(sim.nodes[j].send_doorbell(ctx[j]), BUSY, "{j} left early");
            }
        }
    }
    until(&mut sim, seed, 30, |nodes, _| {
        (0..5).all(|i| nodes[i].send_doorbell(ctx[i]) == DONE)
    });
    for i in 0..5 {
        let s = sim.nodes[i].stats();
        let group = if members.contains(&i) { 3 } else { 0 };
        assert_eq!((s.barriers, s.engine_barriers), (group + 1, 1), "{i}");
        assert_eq!(sim.nodes[i].engine().stats().barriers, 1, "{i}");
    }
    // Misuse: a non-member, a wrong size, an unformed group.
    let q = &mut sim.nodes[0];
    let c = q
        .send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
        .unwrap();
    assert_eq!(q.barrier(c, 77, 3), Err(QxError::Unknown));
    assert_eq!(sim.nodes[1].barrier(ctx[1], 77, 4), Err(QxError::Busy));
    let q = &mut sim.nodes[2];
    // Each refusal gives its context back: a new one for each try.
    let fresh = |q: &mut Node| {
        q.send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
            .unwrap()
    };
    let c = fresh(q);
    assert_eq!(q.barrier(c, 77, 4), Err(QxError::Size));
    let c = fresh(q);
    assert_eq!(q.barrier(c, 78, 3), Err(QxError::Unknown));
    let c = fresh(q);
    assert_eq!(q.join_group(c, 77, 3), Err(QxError::Exists));
    // Broadcast in the group: to 1 and 4.
    let r1 = sim.nodes[1]
        .recv_context(
            Name::new(5, 2),
            9,
            true,
            0,
            8,
            Region::Segments(vec![(MEM, 8)]),
        )
        .unwrap();
    sim.nodes[1].receive(r1).unwrap();
    let r4 = sim.nodes[4]
        .recv_context(
            Name::new(5, 2),
            9,
            true,
            0,
            8,
            Region::Segments(vec![(MEM, 8)]),
        )
        .unwrap();
    sim.nodes[4].receive(r4).unwrap();
    let q = &mut sim.nodes[2];
    let s = q
        .send_context(
            Name::new(5, 0),
            9,
            true,
            0,
            8,
            Region::Data(b"group 77".to_vec()),
        )
        .unwrap();
    q.broadcast_short(s, 77).unwrap();
    until(&mut sim, seed, 30, |nodes, _| {
        recv_done(&nodes[1], r1) && recv_done(&nodes[4], r4)
    });
    assert_eq!(&mem(&sim.nodes[4])[..8], b"group 77");
    assert_eq!(sim.nodes[0].stats().messages_received, 0);
}

#[test]
fn two_applications_on_one_fabric_never_see_each_other() {
    let seed = 0xa99;
    // Endpoints 0 and 1 are application 7; 2 and 3 application 9, PIs swapped.
    let mut sim = make_sim(&[(7, 0, 2), (7, 1, 2), (9, 1, 2), (9, 0, 2)], seed, lossy());
    let mut rs = vec![];
    for i in 0..4 {
        let ai = if i < 2 { 7 } else { 9 };
        let me = sim.nodes[i].name();
        let peer = Name::new(ai, 1 - me.pi);
        let q = &mut sim.nodes[i];
        let r = q
            .recv_context(peer, 1, true, 0, 64, Region::Segments(vec![(MEM, 64)]))
            .unwrap();
        q.receive(r).unwrap();
        let text = format!("from {ai}:{}", me.pi).into_bytes();
        let s = q
            .send_context(peer, 1, false, 0, text.len(), Region::Data(text))
            .unwrap();
        q.send_short(s).unwrap();
        // The other application's process of the same PI is out of reach.
        let other = Name::new(if ai == 7 { 9 } else { 7 }, 1 - me.pi);
        let bad = q
            .send_context(other, 1, true, 0, 4, Region::Data(vec![1; 4]))
            .unwrap();
        assert_eq!(q.send_short(bad), Err(QxError::OtherApplication));
        let rbad = q
            .recv_context(other, 1, true, 0, 4, Region::Segments(vec![(MEM + 100, 4)]))
            .unwrap();
        assert_eq!(q.receive(rbad), Err(QxError::OtherApplication));
        rs.push(r);
    }
    until(&mut sim, seed, 30, |nodes, _| {
        (0..4).all(|i| recv_done(&nodes[i], rs[i]))
    });
    for i in 0..4 {
        let ai = if i < 2 { 7 } else { 9 };
        let want = format!("from {ai}:{}", 1 - sim.nodes[i].name().pi);
        let got = sim.nodes[i].poll_for_receive(rs[i]).unwrap();
        assert_eq!(
            &mem(&sim.nodes[i])[..got],
            want.as_bytes(),
            "seed {seed:#x}"
        );
        assert_eq!(sim.nodes[i].app_size(), 2);
    }
    // Each application's group has only its own members.
    for i in 0..4 {
        let ai = if i < 2 { 7 } else { 9 };
        let q = &mut sim.nodes[i];
        let c = q
            .send_context(Name::new(ai, 0), 0, true, 0, 0, Region::None)
            .unwrap();
        q.barrier(c, ai, 2).unwrap();
        rs[i] = c;
    }
    until(&mut sim, seed, 30, |nodes, _| {
        (0..4).all(|i| nodes[i].send_doorbell(rs[i]) == DONE)
    });
    // Neither is the whole fabric: the engine's barrier would wait for the other.
    for q in &sim.nodes {
        assert_eq!((q.stats().barriers, q.stats().engine_barriers), (1, 0));
    }
}

#[test]
fn registration_conflicts_and_sizes_are_errors() {
    let seed = 0xc0f;
    let n = 2u16;
    let g = groups(n);
    let mut sim: Sim<Node> = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        SimQnix::new(
            Config::new(9, 1, i as u16),
            g,
            2,
            dev,
            clock,
            Segments::new(),
        )
        .unwrap()
    });
    assert_eq!(
        sim.nodes[0].register(Name::new(3, 2), 3, 2),
        Err(QxError::Invalid)
    );
    assert_eq!(
        sim.nodes[0].register(Name::new(3, 0), 4, 2),
        Err(QxError::Invalid)
    );
    assert_eq!(
        sim.nodes[0].register(Name::new(3, 0), 3, 3),
        Err(QxError::Size)
    );
    sim.nodes[0].register(Name::new(3, 0), 3, 2).unwrap();
    sim.nodes[1].register(Name::new(3, 0), 3, 2).unwrap();
    let later = sim.now() + Duration::from_millis(50);
    let _ = sim.run_until(later, |_, _| false);
    assert_eq!(sim.nodes[0].registered(), Err(QxError::Exists));
    assert_eq!(sim.nodes[1].registered(), Err(QxError::Exists));
}

#[test]
fn a_dead_peer_fails_receives_sends_and_barriers() {
    let seed = 0xdead;
    let mut sim = make_sim(&app(3), seed, FaultConfig::default());
    let r = sim.nodes[0]
        .recv_context(
            Name::new(5, 2),
            1,
            true,
            0,
            8,
            Region::Segments(vec![(MEM, 8)]),
        )
        .unwrap();
    sim.nodes[0].receive(r).unwrap();
    let c = sim.nodes[0]
        .send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
        .unwrap();
    sim.nodes[0].barrier(c, 5, 3).unwrap();
    sim.net.kill(2);
    until(&mut sim, seed, 120, |nodes, _| {
        recv_done(&nodes[0], r) && nodes[0].send_doorbell(c) != BUSY
    });
    assert_eq!(
        sim.nodes[0].poll_for_receive(r),
        Err(QxError::Dead),
        "seed {seed:#x}"
    );
    assert_eq!(sim.nodes[0].poll_for_send(c), Err(QxError::Dead));
    let s = sim.nodes[0]
        .send_context(Name::new(5, 2), 1, true, 0, 4, Region::Data(vec![0; 4]))
        .unwrap();
    sim.nodes[0].send_short(s).unwrap();
    assert_eq!(sim.nodes[0].poll_for_send(s), Err(QxError::Dead));
}

#[test]
fn misuse_is_a_typed_error() {
    let seed = 0x315;
    let mut sim = make_sim(&app(2), seed, FaultConfig::default());
    let q = &mut sim.nodes[0];
    let to = Name::new(5, 1);
    assert_eq!(q.send(3), Err(QxError::NoContext));
    assert_eq!(q.poll_for_receive(70), Err(QxError::NoContext));
    let big = q
        .send_context(to, 1, true, 0, SHORT_MAX + 1, Region::Pool(0))
        .unwrap();
    assert_eq!(q.send_short(big), Err(QxError::TooLong));
    let outside = q
        .send_context(to, 1, true, 0, 2 * PAGE, Region::Pool(255))
        .unwrap();
    assert_eq!(q.send(outside), Err(QxError::TooLong));
    let unmapped = q
        .send_context(to, 1, true, 0, 10, Region::Segments(vec![(7 << 40, 10)]))
        .unwrap();
    assert_eq!(q.send(unmapped), Err(QxError::Fault));
    let none = q.send_context(to, 1, true, 0, 10, Region::None).unwrap();
    let short_data = q.send_context(to, 1, true, 0, 10, Region::None).unwrap();
    q.set_send_region(short_data, Region::Data(vec![1; 3]))
        .unwrap();
    assert_eq!(
        q.send_short(short_data),
        Err(QxError::Invalid),
        "fewer bytes than len"
    );
    assert_eq!(q.send(none), Err(QxError::Invalid));
    assert_eq!(
        q.poll_for_send(none),
        Err(QxError::NoContext),
        "the refused send gave its context back"
    );
    let idle = q.send_context(to, 1, true, 0, 1, Region::None).unwrap();
    assert_eq!(
        q.poll_for_send(idle),
        Err(QxError::Invalid),
        "nothing posted"
    );
    let nobody = q
        .send_context(Name::new(5, 9), 1, true, 0, 1, Region::Data(vec![1]))
        .unwrap();
    assert_eq!(q.send_short(nobody), Err(QxError::Unknown));
    let ok = q
        .send_context(to, 1, true, 0, 1, Region::Data(vec![1]))
        .unwrap();
    q.send_short(ok).unwrap();
    assert_eq!(q.send_short(ok), Err(QxError::Busy));
    assert_eq!(
        q.send_context(to, 1, true, -1, 1, Region::None),
        Err(QxError::Invalid)
    );
    let quiet = q
        .send_context(to, 1, false, 0, 1, Region::Data(vec![1]))
        .unwrap();
    assert_eq!(q.poll_for_send(quiet), Err(QxError::NoDoorbell));
    assert_eq!(q.send_doorbell(quiet), FREE);
    // The context lists run out.
    let mut n = 0;
    while q.recv_context(to, 1, true, 0, 0, Region::Pool(0)).is_ok() {
        n += 1;
    }
    assert!(n > 10);
    assert_eq!(
        q.recv_context(to, 1, true, 0, 0, Region::Pool(0)),
        Err(QxError::NoContext)
    );
    for code in -17..=-1 {
        let e = QxError::from_code(code).unwrap();
        assert_eq!(e.code(), code);
        assert!(!e.message().is_empty());
    }
    assert_eq!(QxError::from_code(0), None);
}

/// A refused command (unknown receiver or sender, a short send over the limit, a
/// receive from an application that does not exist, a barrier of an unformed
/// group) gives its context back: after 100 refusals of each kind, far more than
/// the 64 contexts of each list, good sends and receives still work.
#[test]
fn refused_commands_give_their_contexts_back() {
    let seed = 0x7ef;
    let mut sim = make_sim(&app(2), seed, FaultConfig::default());
    let (me, to) = (Name::new(5, 0), Name::new(5, 1));
    for k in 0..100 {
        let q = &mut sim.nodes[0];
        let nobody = q
            .send_context(Name::new(5, 40), 1, true, 0, 1, Region::Data(vec![1]))
            .unwrap();
        assert_eq!(q.send_short(nobody), Err(QxError::Unknown), "{k}");
        let long = q
            .send_context(to, 1, true, 0, SHORT_MAX + 1, Region::Pool(0))
            .unwrap();
        assert_eq!(q.send_short(long), Err(QxError::TooLong), "{k}");
        let no_app = q
            .send_context(Name::new(77, 0), 1, true, 0, 1, Region::Data(vec![1]))
            .unwrap();
        assert_eq!(
            q.send(no_app),
            Err(QxError::Unknown),
            "{k}: no application 77"
        );
        let r = q
            .recv_context(Name::new(5, 9), 1, true, 0, 8, Region::Pool(0))
            .unwrap();
        assert_eq!(q.receive(r), Err(QxError::Unknown), "{k}");
        let b = q.send_context(me, 0, true, 0, 0, Region::None).unwrap();
        assert_eq!(q.barrier(b, 99, 2), Err(QxError::Unknown), "{k}");
        assert_eq!(q.send_doorbell(nobody), FREE);
    }
    // Good ones now: 100 short sends, each received.
    for k in 0..100u8 {
        let r = sim.nodes[1]
            .recv_context(me, 2, true, 0, 1, Region::Segments(vec![(MEM, 1)]))
            .unwrap();
        sim.nodes[1].receive(r).unwrap();
        let q = &mut sim.nodes[0];
        let s = q
            .send_context(to, 2, true, 0, 1, Region::Data(vec![k]))
            .unwrap();
        q.send_short(s).unwrap();
        until(&mut sim, seed, 5, |nodes, _| {
            nodes[0].send_doorbell(s) == DONE && recv_done(&nodes[1], r)
        });
        assert_eq!(sim.nodes[0].poll_for_send(s), Ok(()));
        assert_eq!(sim.nodes[1].poll_for_receive(r), Ok(1));
        assert_eq!(mem(&sim.nodes[1])[0], k);
    }
}

/// Long sends: a receive posted before the request gets the data as one put into
/// its range (also truncated); one posted after it gets packets, and the send does
/// not wait for it; a receive that is not one range gets packets addressed to it.
/// Messages with one tag keep their order whichever way each went.
#[test]
fn long_sends_go_by_rendezvous_and_keep_their_order() {
    for seed in [0x7e5_u64, 0xb0b] {
        let mut sim = make_sim(&app(2), seed, lossy());
        let big = 100_000;
        let small = 3_000;
        let data = pattern(seed, 3 * big);
        mem_mut(&mut sim.nodes[0])[..3 * big].copy_from_slice(&data);
        let from = Name::new(5, 0);
        let to = Name::new(5, 1);
        // Posted first: tag 1 (one range of the pool, all of it) and tag 2 (40 KB
        // room for 100 KB: truncated), tag 3 in two pieces of MEM with a gap.
        let r1 = sim.nodes[1]
            .recv_context(from, 1, true, 0, big, Region::Pool(0))
            .unwrap();
        let r2 = sim.nodes[1]
            .recv_context(from, 2, true, 0, 40_000, Region::Pool(40))
            .unwrap();
        let gap = vec![(MEM, 60_000), (MEM + 70_000, 60_000)];
        let r3 = sim.nodes[1]
            .recv_context(from, 3, true, 0, big, Region::Segments(gap))
            .unwrap();
        for r in [r1, r2, r3] {
            sim.nodes[1].receive(r).unwrap();
        }
        // Sent: tags 1, 2, 3 (100 KB each), then tag 4: big, small, big, with no
        // receive posted for tag 4 yet.
        let q = &mut sim.nodes[0];
        let mut sends = vec![];
        let msgs = [
            (1, 0, big),
            (2, big, big),
            (3, 2 * big, big),
            (4, 0, big),
            (4, big, small),
            (4, 2 * big, big),
        ];
        for &(tag, at, len) in &msgs {
            let region = Region::Segments(vec![(MEM + at as u64, len)]);
            let s = q.send_context(to, tag, true, 0, len, region).unwrap();
            q.send(s).unwrap();
            sends.push(s);
        }
        // Every send completes, the tag-4 ones with no receive posted.
        until(&mut sim, seed, 60, |nodes, _| {
            sends.iter().all(|&s| nodes[0].send_doorbell(s) != BUSY)
                && [r1, r2, r3].iter().all(|&r| recv_done(&nodes[1], r))
        });
        for &s in &sends {
            assert_eq!(sim.nodes[0].poll_for_send(s), Ok(()), "seed {seed:#x}");
        }
        assert_eq!(sim.nodes[0].stats().rendezvous, 2, "tags 1 and 2 by put");
        let n1 = &mut sim.nodes[1];
        assert_eq!(n1.poll_for_receive(r1), Ok(big));
        assert!(pool(n1)[..big] == data[..big], "seed {seed:#x}");
        assert_eq!(n1.poll_for_receive(r2), Err(QxError::Truncated));
        assert!(pool(n1)[40 * PAGE..40 * PAGE + 40_000] == data[big..big + 40_000]);
        assert_eq!(pool(n1)[40 * PAGE + 40_000], 0, "nothing past the receive");
        assert_eq!(n1.poll_for_receive(r3), Ok(big));
        assert!(mem(n1)[..60_000] == data[2 * big..2 * big + 60_000]);
        assert!(mem(n1)[60_000..70_000].iter().all(|&b| b == 0), "the gap");
        assert!(mem(n1)[70_000..110_000] == data[2 * big + 60_000..3 * big]);
        // Tag 4, posted now: in sending order.
        let mut got = vec![];
        for (k, &(_, at, len)) in msgs[3..].iter().enumerate() {
            let region = Region::Segments(vec![(MEM + (1 << 20) + (k * big) as u64, big)]);
            let r = n1.recv_context(from, 4, true, 0, big, region).unwrap();
            n1.receive(r).unwrap();
            got.push((r, at, len));
        }
        until(&mut sim, seed, 60, |nodes, _| {
            got.iter().all(|&(r, _, _)| recv_done(&nodes[1], r))
        });
        for (k, &(r, at, len)) in got.iter().enumerate() {
            let n1 = &mut sim.nodes[1];
            assert_eq!(
                n1.poll_for_receive(r),
                Ok(len),
                "tag 4 #{k}, seed {seed:#x}"
            );
            let place = (1 << 20) + k * big;
            assert!(
                mem(n1)[place..place + len] == data[at..at + len],
                "tag 4 #{k}"
            );
        }
    }
}

/// A receiver dies while a rendezvous put is under way: the send fails at the
/// sender, not a hang.
#[test]
fn a_rendezvous_with_a_dead_receiver_fails() {
    let seed = 0xd1e;
    let mut sim = make_sim(&app(2), seed, FaultConfig::default());
    let len = 4 << 20;
    let r = sim.nodes[1]
        .recv_context(
            Name::new(5, 0),
            1,
            true,
            0,
            len,
            Region::Segments(vec![(MEM, len)]),
        )
        .unwrap();
    sim.nodes[1].receive(r).unwrap();
    let q = &mut sim.nodes[0];
    let region = Region::Segments(vec![(MEM, len)]);
    let s = q
        .send_context(Name::new(5, 1), 1, true, 0, len, region)
        .unwrap();
    q.send(s).unwrap();
    // Until the put has begun to land.
    until(&mut sim, seed, 30, |nodes, _| {
        nodes[1].engine().stats().rx_frames > 40
    });
    sim.net.kill(1);
    until(&mut sim, seed, 120, |nodes, _| {
        nodes[0].send_doorbell(s) != BUSY
    });
    assert_eq!(sim.nodes[0].poll_for_send(s), Err(QxError::Dead));
}

/// A broadcast to a group whose only member is the sender reaches nobody and
/// completes at once, long (rendezvous-sized) or short.
#[test]
fn a_broadcast_to_a_group_of_one_completes() {
    let seed = 0x10e;
    let mut sim = make_sim(&app(2), seed, FaultConfig::default());
    let q = &mut sim.nodes[0];
    let j = q
        .send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
        .unwrap();
    q.join_group(j, 60, 1).unwrap();
    assert_eq!(q.poll_for_send(j), Ok(()));
    let b = q
        .send_context(Name::new(5, 0), 9, true, 0, 50_000, Region::Pool(0))
        .unwrap();
    q.broadcast(b, 60).unwrap();
    let s = q
        .send_context(Name::new(5, 0), 9, true, 0, 8, Region::Data(vec![1; 8]))
        .unwrap();
    q.broadcast_short(s, 60).unwrap();
    // Bounded: a send that never completes fails here instead of hanging.
    until(&mut sim, seed, 5, |nodes, _| {
        nodes[0].send_doorbell(b) != BUSY && nodes[0].send_doorbell(s) != BUSY
    });
    assert_eq!(sim.nodes[0].poll_for_send(b), Ok(()), "seed {seed:#x}");
    assert_eq!(sim.nodes[0].poll_for_send(s), Ok(()));
}

/// Processes of the job that speak garbage: packets with every kind of QNIX head
/// (tags, contexts, lengths and granted addresses at their extremes, continuation
/// bytes with no message, truncated heads) sent straight through their engines. The
/// receiver drops or keeps them by its rules and never panics; a third process's
/// messages still land whole.
#[test]
fn garbage_from_processes_of_the_job_never_panics_a_receiver() {
    let seed = std::env::var("VOLLEY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6a7b_u64);
    eprintln!("VOLLEY_SEED={seed}");
    let mut sim = make_sim(&app(4), seed, FaultConfig::default());
    let mut rng = volley_core::rng::Rng::new(seed);
    // Receives posted at process 1, from 0 (garbage, as is 3) and from 2 (good).
    let post = |q: &mut Node, from: i32, tag: i32, at: usize| {
        let r = q
            .recv_context(
                Name::new(5, from),
                tag,
                true,
                0,
                4096,
                Region::Segments(vec![(MEM + at as u64, 4096)]),
            )
            .unwrap();
        q.receive(r).unwrap();
        r
    };
    let extreme = |rng: &mut volley_core::rng::Rng| -> i32 {
        let v = [0, 1, -1, 63, 64, 1 << 20, i32::MIN, i32::MAX];
        if rng.chance(0.6) {
            v[rng.below(v.len() as u64) as usize]
        } else {
            rng.next_u64() as i32
        }
    };
    let mut sent = 0;
    for round in 0..40 {
        let garbage_rx = post(&mut sim.nodes[1], 0, 7, 0);
        for k in 0..50 {
            let mut head = [0u8; 16];
            head[0] = rng.below(11) as u8;
            for i in 0..3 {
                let v = extreme(&mut rng);
                head[4 + 4 * i..8 + 4 * i].copy_from_slice(&v.to_be_bytes());
            }
            if rng.chance(0.7) {
                // A length a message could have: the packets after it are its body.
                let c = rng.below(5000) as u32;
                head[12..16].copy_from_slice(&c.to_be_bytes());
            }
            let e = sim.nodes[if k % 2 == 0 { 0 } else { 3 }].engine_mut();
            // A fifth as multicasts to everyone: what a board broadcast looks like.
            let to = if rng.chance(0.2) { None } else { Some(1) };
            match launch_garbage(e, &mut rng, to, &head) {
                None => break,
                Some(ok) => sent += u64::from(ok),
            }
        }
        let later = sim.now() + Duration::from_millis(5);
        let _ = sim.run_until(later, |_, _| false);
        // The good process's message lands whole whatever the garbage did.
        let good = post(&mut sim.nodes[1], 2, 9, 8192);
        let text = pattern(seed ^ round, 3000);
        let q = &mut sim.nodes[2];
        let s = q
            .send_context(
                Name::new(5, 1),
                9,
                true,
                0,
                text.len(),
                Region::Data(text.clone()),
            )
            .unwrap();
        q.send_short(s).unwrap();
        until(&mut sim, seed, 30, |nodes, _| recv_done(&nodes[1], good));
        assert_eq!(
            sim.nodes[1].poll_for_receive(good),
            Ok(3000),
            "round {round}"
        );
        assert!(
            mem(&sim.nodes[1])[8192..8192 + 3000] == text[..],
            "round {round}"
        );
        assert_eq!(sim.nodes[2].poll_for_send(s), Ok(()));
        // Whatever the garbage receive got is the garbage's business.
        let _ = recv_done(&sim.nodes[1], garbage_rx);
    }
    assert!(sent > 1000, "garbage sent: {sent}");
    let s = sim.nodes[1].stats();
    // Kept as early messages or dropped as from nobody or too long: QNIX's rules,
    // not a panic, decided.
    assert!(
        s.unexpected + s.dropped > 0,
        "garbage reached QNIX's rules: {s:?}"
    );
}

/// An application of one process is the whole fabric: its barrier is the engine's,
/// and it completes at once.
#[test]
fn a_barrier_of_one_process_completes() {
    let seed = 0x1b1;
    let mut sim = make_sim(&app(1), seed, FaultConfig::default());
    let q = &mut sim.nodes[0];
    for _ in 0..3 {
        let c = q
            .send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
            .unwrap();
        q.barrier(c, 5, 1).unwrap();
        assert_eq!(q.poll_for_send(c), Ok(()), "seed {seed:#x}");
    }
    assert_eq!((q.stats().barriers, q.stats().engine_barriers), (3, 3));
}

/// With no board (the simulator's fabric, like `udp` and `eth`), a short broadcast
/// or multicast to the whole application goes once, as one packet down the
/// engine's binomial tree that the other processes relay, not from the root to
/// each member; under loss every member still takes the root's messages exactly
/// once and in the order sent: the sends before it (some overtaken by the
/// broadcast's relays), the broadcast, the send after it (which may overtake it).
/// A multicast to some members reaches them through relays that only count it.
#[test]
fn a_broadcast_goes_once_down_a_tree_and_keeps_its_place_under_loss() {
    for seed in [0x7ee, 0x7ef, 0x5eed] {
        tree_broadcasts_in_order(seed);
    }
}

fn tree_broadcasts_in_order(seed: u64) {
    const N: usize = 7;
    const ROUNDS: usize = 12;
    let mut sim = make_sim(&app(N as i32), seed, lossy());
    let tag = 4;
    let others: Vec<Name> = (1..N as i32).map(|m| Name::new(5, m)).collect();
    let msg = |k: usize, round: usize| format!("{k:08}{round:08}").into_bytes();
    let send = |q: &mut Node, to: Name, data: Vec<u8>| {
        let len = data.len();
        q.send_context(to, tag, true, 0, len, Region::Data(data))
            .unwrap()
    };
    for round in 0..ROUNDS {
        let before = if round % 3 == 0 { 6 } else { 1 };
        let mut rc = vec![vec![]; N];
        for m in 1..N {
            let q = &mut sim.nodes[m];
            for k in 0..before + 2 {
                let region = Region::Segments(vec![(MEM + k as u64 * 64, 16)]);
                let r = q
                    .recv_context(Name::new(5, 0), tag, true, 0, 16, region)
                    .unwrap();
                q.receive(r).unwrap();
                rc[m].push(r);
            }
        }
        let mut sc = vec![];
        for k in 0..before + 2 {
            let q = &mut sim.nodes[0];
            if k == before {
                let c = send(q, Name::new(5, 0), msg(k, round));
                if round % 2 == 0 {
                    q.broadcast_short(c, 5).unwrap();
                } else {
                    q.multicast_short(c, &others).unwrap();
                }
                sc.push(c);
                continue;
            }
            for &to in &others {
                let c = send(q, to, msg(k, round));
                q.send_short(c).unwrap();
                sc.push(c);
            }
        }
        until(&mut sim, seed, 60, |nodes, _| all_landed(nodes, &rc, &sc));
        for m in 1..N {
            for (k, &r) in rc[m].iter().enumerate() {
                let q = &mut sim.nodes[m];
                assert_eq!(q.poll_for_receive(r), Ok(16), "seed {seed:#x}");
                let got = &mem(q)[k * 64..k * 64 + 16];
                assert_eq!(
                    got,
                    &msg(k, round)[..],
                    "seed {seed:#x}, round {round}, member {m}, receive {k}: {}",
                    String::from_utf8_lossy(got)
                );
            }
        }
        for c in sc {
            assert_eq!(sim.nodes[0].poll_for_send(c), Ok(()));
        }
    }
    assert_eq!(sim.nodes[0].stats().board_broadcasts, ROUNDS as u64);
    // Root 0's binomial tree over 7: 0 -> 1, 2, 4; 1 -> 3, 5; 2 -> 6.
    for (m, relays) in [(1, true), (2, true), (3, false), (4, false)] {
        let f = sim.nodes[m].engine().stats().forwarded;
        assert_eq!(f > 0, relays, "member {m} forwarded {f}");
    }
    let parked: u64 = sim.nodes.iter().map(|q| q.stats().parked).sum();
    let early: u64 = sim.nodes.iter().map(|q| q.stats().early_boards).sum();
    assert!(
        parked > 0,
        "no send overtook a broadcast: the wait went untested"
    );
    assert!(early > 0, "no broadcast overtook the sends before it");
    // To 3 and 5, below relay 1, which counts it but does not take it: its receive
    // waits for a message of its own.
    let mut rc = vec![];
    for m in [1, 3, 5] {
        let region = Region::Segments(vec![(MEM + 4096, 16)]);
        let q = &mut sim.nodes[m];
        let r = q
            .recv_context(Name::new(5, 0), tag, true, 0, 16, region)
            .unwrap();
        q.receive(r).unwrap();
        rc.push((m, r));
    }
    let c = send(&mut sim.nodes[0], Name::new(5, 0), msg(1, 99));
    let to = [Name::new(5, 3), Name::new(5, 5)];
    sim.nodes[0].multicast_short(c, &to).unwrap();
    until(&mut sim, seed, 30, |nodes, _| {
        rc[1..].iter().all(|&(m, r)| recv_done(&nodes[m], r))
    });
    let _ = sim.run_until(sim.now() + Duration::from_millis(20), |_, _| false);
    assert_eq!(sim.nodes[1].recv_doorbell(rc[0].1), BUSY, "not for 1");
    for &(m, r) in &rc[1..] {
        assert_eq!(sim.nodes[m].poll_for_receive(r), Ok(16));
        assert_eq!(&mem(&sim.nodes[m])[4096..4112], &msg(1, 99)[..]);
    }
    assert_eq!(sim.nodes[0].stats().board_broadcasts, ROUNDS as u64 + 1);
}

/// A broadcast longer than one packet (up to the rendezvous size) goes down the tree
/// too: its first packet carries the order and recipients, the rest follow as
/// `K_MORE` parts, and each member takes it whole, once, between the unicasts its
/// root sent before and after it. Under loss, and then without loss to count the
/// root's bytes: a tree's three children, not six members.
#[test]
fn a_broadcast_longer_than_a_packet_goes_down_the_tree_in_parts() {
    for seed in [0x10b, 0x10c] {
        long_tree_broadcasts(seed, lossy());
    }
    long_tree_broadcasts(0x10d, FaultConfig::default());
}

fn long_tree_broadcasts(seed: u64, faults: FaultConfig) {
    const N: usize = 7;
    let lossless = faults == FaultConfig::default();
    let mut sim = make_sim(&app(N as i32), seed, faults);
    let size = sim.nodes[0].engine().packet_size();
    let tag = 6;
    let body = |len: usize, round: usize| -> Vec<u8> {
        (0..len).map(|i| (i * 31 + round * 7 + len) as u8).collect()
    };
    // Past one packet, to just below the rendezvous size; short and not.
    let lens = [size + 1, 3000, SHORT_MAX, 9000, RENDEZVOUS_MIN - 1];
    for (round, &len) in lens.iter().enumerate() {
        // Each member: the unicast before, the broadcast, the unicast after,
        // all from 0 with one tag (matched in the order sent).
        let mut rc = vec![vec![]; N];
        for m in 1..N {
            let q = &mut sim.nodes[m];
            for (k, n) in [(0u64, 16), (1, len), (2, 16)] {
                let region = Region::Segments(vec![(MEM + k * 32768, n)]);
                let r = q
                    .recv_context(Name::new(5, 0), tag, true, 0, n, region)
                    .unwrap();
                q.receive(r).unwrap();
                rc[m].push(r);
            }
        }
        let q = &mut sim.nodes[0];
        let mut sc = vec![];
        for m in 1..N {
            let to = Name::new(5, m as i32);
            let c = q
                .send_context(to, tag, true, 0, 16, Region::Data(vec![1; 16]))
                .unwrap();
            q.send_short(c).unwrap();
            sc.push(c);
        }
        let before = q.engine().stats().tx_bytes;
        let c = q
            .send_context(
                Name::new(5, 0),
                tag,
                true,
                0,
                len,
                Region::Data(body(len, round)),
            )
            .unwrap();
        if len <= SHORT_MAX {
            q.broadcast_short(c, 5).unwrap();
        } else {
            q.broadcast(c, 5).unwrap();
        }
        sc.push(c);
        until(&mut sim, seed, 60, |nodes, _| {
            nodes[0].send_doorbell(c) != BUSY
        });
        let sent = sim.nodes[0].engine().stats().tx_bytes - before;
        if lossless {
            assert!(
                sent < 4 * len as u64,
                "round {round}: the root sent {sent} bytes for a broadcast of {len}"
            );
        }
        let q = &mut sim.nodes[0];
        for m in 1..N {
            let to = Name::new(5, m as i32);
            let c = q
                .send_context(to, tag, true, 0, 16, Region::Data(vec![3; 16]))
                .unwrap();
            q.send_short(c).unwrap();
            sc.push(c);
        }
        until(&mut sim, seed, 60, |nodes, _| all_landed(nodes, &rc, &sc));
        for m in 1..N {
            let q = &mut sim.nodes[m];
            for (k, &r) in rc[m].iter().enumerate() {
                let want = [16, len, 16][k];
                assert_eq!(
                    q.poll_for_receive(r),
                    Ok(want),
                    "seed {seed:#x}, round {round}"
                );
            }
            let got = mem(q);
            assert_eq!(
                &got[..16],
                &[1; 16],
                "seed {seed:#x}, round {round}, member {m}"
            );
            assert!(
                got[32768..32768 + len] == body(len, round)[..],
                "seed {seed:#x}, round {round}, member {m}: the broadcast's bytes"
            );
            assert_eq!(
                &got[65536..65552],
                &[3; 16],
                "seed {seed:#x}, round {round}, member {m}"
            );
        }
        for c in sc {
            assert_eq!(sim.nodes[0].poll_for_send(c), Ok(()));
        }
    }
    assert_eq!(sim.nodes[0].stats().board_broadcasts, lens.len() as u64);
    for (m, relays) in [(1, true), (2, true), (3, false), (6, false)] {
        let f = sim.nodes[m].engine().stats().forwarded;
        assert_eq!(f > 0, relays, "member {m} forwarded {f}");
    }
}

/// A relay that dies cuts its subtree off from the root's tree broadcasts: the
/// broadcast it did not pass on never comes, and what the root sends afterwards
/// is not held back waiting for it. Once the root knows, its broadcasts go member
/// by member.
#[test]
fn a_dead_relay_does_not_hold_back_what_its_root_sends_after_a_broadcast() {
    let seed = 0xd1e;
    let mut sim = make_sim(&app(4), seed, FaultConfig::default());
    // Root 0's binomial tree over 4: 0 -> 1, 2; 1 -> 3.
    let post = |q: &mut Node, tag: i32, at: u64| {
        let region = Region::Segments(vec![(MEM + at, 16)]);
        let r = q
            .recv_context(Name::new(5, 0), tag, true, 0, 16, region)
            .unwrap();
        q.receive(r).unwrap();
        r
    };
    let lost = post(&mut sim.nodes[3], 1, 0);
    let after = post(&mut sim.nodes[3], 2, 64);
    let got = post(&mut sim.nodes[2], 1, 0);
    sim.net.kill(1);
    let q = &mut sim.nodes[0];
    let b = q
        .send_context(Name::new(5, 0), 1, true, 0, 16, Region::Data(vec![1; 16]))
        .unwrap();
    q.broadcast_short(b, 5).unwrap();
    let u = q
        .send_context(Name::new(5, 3), 2, true, 0, 16, Region::Data(vec![2; 16]))
        .unwrap();
    q.send_short(u).unwrap();
    until(&mut sim, seed, 120, |nodes, _| {
        recv_done(&nodes[3], after) && recv_done(&nodes[2], got)
    });
    assert_eq!(
        sim.nodes[3].stats().parked,
        1,
        "it waited for the broadcast"
    );
    assert_eq!(sim.nodes[3].poll_for_receive(after), Ok(16));
    assert_eq!(&mem(&sim.nodes[3])[64..80], &[2; 16]);
    assert_eq!(sim.nodes[2].poll_for_receive(got), Ok(16));
    assert_eq!(&mem(&sim.nodes[2])[..16], &[1; 16]);
    assert_eq!(
        sim.nodes[3].recv_doorbell(lost),
        BUSY,
        "1 did not pass it on"
    );
    // The root finds 1 dead too; its next broadcast goes to each live member.
    until(&mut sim, seed, 120, |nodes, _| nodes[0].is_dead(1));
    let boards = sim.nodes[0].stats().board_broadcasts;
    let q = &mut sim.nodes[0];
    let b2 = q
        .send_context(Name::new(5, 0), 1, true, 0, 16, Region::Data(vec![3; 16]))
        .unwrap();
    q.broadcast_short(b2, 5).unwrap();
    until(&mut sim, seed, 60, |nodes, _| {
        recv_done(&nodes[3], lost) && nodes[0].send_doorbell(b2) != BUSY
    });
    assert_eq!(sim.nodes[3].poll_for_receive(lost), Ok(16));
    assert_eq!(&mem(&sim.nodes[3])[..16], &[3; 16]);
    assert_eq!(
        sim.nodes[0].poll_for_send(b2),
        Err(QxError::Dead),
        "1 is in it"
    );
    assert_eq!(sim.nodes[0].stats().board_broadcasts, boards);
}

/// Two processes that die together are both reported: receives posted from each
/// fail with `QX_EDEAD`, none waits for good.
#[test]
fn two_peers_that_die_together_both_fail_their_receives() {
    let seed = 0xd2d;
    let mut sim = make_sim(&app(4), seed, FaultConfig::default());
    let mut rs = vec![];
    for from in [2, 3] {
        let r = sim.nodes[0]
            .recv_context(
                Name::new(5, from),
                1,
                true,
                0,
                8,
                Region::Segments(vec![(MEM + from as u64 * 64, 8)]),
            )
            .unwrap();
        sim.nodes[0].receive(r).unwrap();
        rs.push(r);
    }
    sim.net.kill(2);
    sim.net.kill(3);
    until(&mut sim, seed, 120, |nodes, _| {
        rs.iter().all(|&r| recv_done(&nodes[0], r))
    });
    for r in rs {
        assert_eq!(sim.nodes[0].poll_for_receive(r), Err(QxError::Dead));
    }
    assert!(sim.nodes[0].is_dead(2) && sim.nodes[0].is_dead(3));
}
