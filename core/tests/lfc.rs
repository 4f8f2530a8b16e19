//! LFC personality in the simulator: multicast trees of every shape under loss,
//! kept packets, back-pressure, fetch-and-add from every rank, self sends.
//! Every test prints its seed on failure.

use volley_core::engine::Config;
use volley_core::lfc::{Keep, Options, Received, Tree, UPCALL_MCAST};
use volley_core::phy::FaultConfig;
use volley_core::sim::{Sim, SimConfig, SimLfc};
use volley_core::time::{Duration, Instant};

mod common;
use common::groups;

#[derive(Debug, Default)]
struct St {
    /// (src, flags, first 4 bytes as u32) per upcall, in order.
    got: Vec<(u16, u32, u32)>,
    /// Packets kept by the upcall, freed later by the test.
    kept: Vec<volley_core::engine::PacketId>,
    keep: bool,
}

fn upcall(l: &mut SimLfc<'static, St>, r: Received) -> Keep {
    let b = l.packet(r.packet).expect("delivered packet readable");
    assert_eq!(b.len(), r.size);
    let v = if b.len() >= 4 {
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    } else {
        u32::MAX
    };
    let keep = l.state().keep;
    let st = l.state_mut();
    st.got.push((r.src, r.flags, v));
    if keep {
        st.kept.push(r.packet);
        Keep::Yes
    } else {
        Keep::No
    }
}

fn make_sim(n: u16, seed: u64, faults: FaultConfig, opts: Options) -> Sim<SimLfc<'static, St>> {
    make_sim_with(n, seed, faults, opts, true)
}

/// [`make_sim`] with `Config::ack_exchange_ends` set to `ack_ends`.
fn make_sim_with(
    n: u16,
    seed: u64,
    faults: FaultConfig,
    opts: Options,
    ack_ends: bool,
) -> Sim<SimLfc<'static, St>> {
    let g = groups(n);
    let mut cfg = SimConfig::lan(seed);
    cfg.faults = faults;
    Sim::new(n as usize, cfg, |i, dev, clock| {
        let mut c = Config::new(7, 1, i as u16);
        c.ack_exchange_ends = ack_ends;
        SimLfc::init_alloc(c, g, n as usize, dev, clock, opts, upcall, St::default()).unwrap()
    })
}

fn lossy() -> FaultConfig {
    common::faults(0.08, 0.03, 0.05, 0.01)
}

fn start_all(sim: &mut Sim<SimLfc<'static, St>>, seed: u64) {
    // `start` is a barrier: run it as the simulator's goal, one barrier across nodes.
    for n in sim.nodes.iter_mut() {
        n.start_begin().unwrap();
    }
    sim.run_until(Instant::ZERO + Duration::from_secs(5), |nodes, _| {
        nodes.iter_mut().all(|n| {
            n.poll_network();
            n.start_test().unwrap_or(false)
        })
    })
    .unwrap_or_else(|e| panic!("start barrier: seed {seed}: {e:?}"));
}

fn launch(l: &mut SimLfc<'static, St>, to: Target, val: u32, size: usize) -> bool {
    let Ok(p) = l.engine_mut().packet_alloc() else {
        return false;
    };
    let b = l.packet_mut(p).unwrap();
    b[..4].copy_from_slice(&val.to_le_bytes());
    for (i, x) in b[4..size].iter_mut().enumerate() {
        *x = (val as usize + i) as u8;
    }
    let r = match to {
        Target::One(d) => l.engine_mut().launch_unicast(p, d, size),
        Target::Group(g, t) => l.engine_mut().launch_multicast(p, g, size, t),
    };
    match r {
        Ok(()) => true,
        Err(_) => {
            l.packet_free(p).unwrap();
            false
        }
    }
}

#[derive(Clone, Copy)]
enum Target {
    One(u16),
    Group(u16, Tree),
}

/// Every rank multicasts `k` packets to the whole job and to a group of the odd
/// ranks, down each tree shape, on a lossy fabric: every member gets each packet
/// exactly once, flagged as multicast, in the order its root sent them.
#[test]
fn multicast_trees_exactly_once_under_loss() {
    for tree in [Tree::Binary, Tree::Binomial, Tree::Chain] {
        for n in [2u16, 3, 5, 8, 13, 16] {
            let seed = 0x1fc0 + n as u64 * 31 + tree as u64;
            let opts = Options {
                tree,
                ring_frames: 32,
                send_packets: 16,
                ..Options::default()
            };
            let mut sim = make_sim(n, seed, lossy(), opts);
            let odd: Vec<u16> = (0..n).filter(|r| r % 2 == 1).collect();
            let mut gid_odd = 0;
            for node in sim.nodes.iter_mut() {
                assert_eq!(
                    node.group_create(&[]),
                    Err(volley_core::engine::Error::BadConfig)
                );
                gid_odd = node.group_create(&odd).unwrap();
            }
            start_all(&mut sim, seed);
            const K: u32 = 12;
            let mut sent = vec![0u32; n as usize];
            let all = volley_core::engine::MCAST_ALL;
            sim.run_until(Instant::ZERO + Duration::from_secs(60), |nodes, _| {
                for (r, node) in nodes.iter_mut().enumerate() {
                    while sent[r] < 2 * K {
                        let i = sent[r];
                        // Even numbers to everyone, odd ones to the odd ranks.
                        let to = if i.is_multiple_of(2) { all } else { gid_odd };
                        let size = 4 + (i as usize * 37) % 600;
                        if !launch(node, Target::Group(to, tree), (r as u32) << 16 | i, size) {
                            break;
                        }
                        sent[r] += 1;
                    }
                }
                let want = |me: usize| -> usize {
                    let odd_me = me % 2 == 1;
                    (0..n as usize)
                        .filter(|&r| r != me)
                        .map(|_| K as usize + if odd_me { K as usize } else { 0 })
                        .sum()
                };
                sent.iter().all(|&s| s == 2 * K)
                    && nodes
                        .iter()
                        .enumerate()
                        .all(|(me, nd)| nd.state().got.len() >= want(me))
            })
            .unwrap_or_else(|e| panic!("{tree:?} n={n}: seed {seed}: {e:?}"));
            // Forwards still in flight hold their slots until acked: let them settle.
            let t = sim.now() + Duration::from_secs(1);
            let _ = sim.run_until(t, |_, _| false);
            for (me, node) in sim.nodes.iter().enumerate() {
                let got = &node.state().got;
                let mut next = vec![0u32; n as usize * 2];
                for &(src, flags, v) in got {
                    assert_eq!(flags, UPCALL_MCAST, "seed {seed}");
                    assert_eq!(v >> 16, src as u32, "seed {seed}: root is the launcher");
                    assert_ne!(src as usize, me, "seed {seed}: sender excluded");
                    let i = v & 0xFFFF;
                    let stream = src as usize * 2 + (i % 2) as usize;
                    // FIFO per root and group: the stream's values arrive in order.
                    assert_eq!(
                        i,
                        next[stream] * 2 + i % 2,
                        "{tree:?} n={n} seed {seed} at {me}"
                    );
                    next[stream] += 1;
                    if i % 2 == 1 {
                        assert_eq!(me % 2, 1, "seed {seed}: only odd ranks in the odd group");
                    }
                }
                assert_eq!(
                    node.engine().packets_free().1,
                    32,
                    "seed {seed}: receive slots back"
                );
            }
        }
    }
}

/// Kept packets are freed later, over 100 000 packets: no slot leaks, and with the
/// receive ring full the sender is held back instead of anything being lost.
#[test]
fn kept_packets_hold_slots_and_throttle_senders() {
    let seed = 0x6b65;
    // More send packets than receive slots: the sender can overrun a full ring.
    let opts = Options {
        ring_frames: 8,
        send_packets: 32,
        ..Options::default()
    };
    let mut sim = make_sim(2, seed, FaultConfig::default(), opts);
    start_all(&mut sim, seed);
    sim.nodes[1].state_mut().keep = true;
    const TOTAL: u32 = 100_000;
    let mut sent = 0u32;
    let mut max_kept = 0;
    let mut full_since: Option<Instant> = None;
    sim.run_until(Instant::ZERO + Duration::from_secs(600), |nodes, now| {
        let (a, b) = nodes.split_at_mut(1);
        while sent < TOTAL && launch(&mut a[0], Target::One(1), sent, 4 + (sent % 64) as usize) {
            sent += 1;
        }
        // The receiver frees what it kept once it holds the whole ring.
        let r = &mut b[0];
        max_kept = max_kept.max(r.state().kept.len());
        if r.state().kept.len() >= 8 && full_since.is_none() {
            full_since = Some(now);
        }
        // Hold the full ring a while so that the sender runs into it.
        let held = full_since.is_some_and(|t| now.saturating_since(t) >= Duration::from_micros(30));
        if held || (sent == TOTAL && !r.state().kept.is_empty()) {
            full_since = None;
            let kept = std::mem::take(&mut r.state_mut().kept);
            for p in kept {
                r.packet_free(p).unwrap();
            }
        }
        sent == TOTAL && r.state().got.len() == TOTAL as usize && r.state().kept.is_empty()
    })
    .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
    let got = &sim.nodes[1].state().got;
    for (i, &(src, flags, v)) in got.iter().enumerate() {
        assert_eq!((src, flags, v), (0, 0, i as u32), "seed {seed}");
    }
    assert_eq!(max_kept, 8, "the ring filled up");
    assert!(
        sim.nodes[1].engine().stats().rx_refused > 0,
        "senders were refused: max kept {max_kept} {:?}",
        sim.nodes[1].engine().stats()
    );
    assert_eq!(sim.nodes[1].engine().packets_free(), (32, 8));
    // Settle the acks, then every send slot is back too.
    let t = sim.now() + Duration::from_secs(1);
    let _ = sim.run_until(t, |_, _| false);
    assert_eq!(sim.nodes[0].engine().packets_free(), (32, 8));
    // A freed packet cannot be freed again, nor a send packet launched twice.
    let e = sim.nodes[0].engine_mut();
    let p = e.packet_alloc().unwrap();
    e.launch_unicast(p, 1, 4).unwrap();
    assert!(e.launch_unicast(p, 1, 4).is_err());
    assert!(e.packet_free(p).is_err());
    let q = e.packet_alloc().unwrap();
    assert!(
        e.launch_unicast(q, 1, 5000).is_err(),
        "longer than a packet"
    );
    assert!(e.launch_unicast(q, 9, 4).is_err(), "no such rank");
}

/// Every rank asks rank 0 (and rank 1) for fetch-and-adds at once, under loss: all
/// values distinct, final counts exact.
#[test]
fn fetch_and_add_from_every_rank() {
    let seed = 0xfa;
    let n = 6u16;
    let mut sim = make_sim(n, seed, lossy(), Options::default());
    start_all(&mut sim, seed);
    const EACH: usize = 25;
    let mut handles: Vec<Vec<_>> = vec![Vec::new(); n as usize];
    let mut values = vec![Vec::new(); 2];
    sim.run_until(Instant::ZERO + Duration::from_secs(60), |nodes, _| {
        for (r, node) in nodes.iter_mut().enumerate() {
            while handles[r].len() < EACH * 2 {
                let owner = (handles[r].len() % 2) as u16;
                match node.engine_mut().start_fetch_add(1, owner, 0, 1) {
                    Ok(h) => handles[r].push((owner, h, false)),
                    Err(_) => break,
                }
            }
            for (owner, h, done) in handles[r].iter_mut() {
                if !*done {
                    if let Some(v) = node.engine_mut().fetch_add_result(*h).unwrap() {
                        values[*owner as usize].push(v);
                        *done = true;
                    }
                }
            }
        }
        values.iter().all(|v| v.len() == EACH * n as usize)
    })
    .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
    for (owner, v) in values.iter_mut().enumerate() {
        v.sort();
        let want: Vec<u32> = (0..(EACH * n as usize) as u32).collect();
        assert_eq!(*v, want, "seed {seed}: owner {owner}");
        assert_eq!(
            sim.nodes[owner].engine().counter(0).unwrap(),
            EACH as u32 * n as u32
        );
    }
    // The blocking call, including on oneself.
    let l = &mut sim.nodes[3];
    assert_eq!(l.fetch_and_add(3, false).unwrap(), 0);
    assert_eq!(l.fetch_and_add(3, true).unwrap(), 1);
}

/// A packet to oneself is delivered without leaving the process (the seed's
/// one-node latency run), and statistics gather on rank 0.
#[test]
fn self_send_and_statistics() {
    let seed = 0x5e1f;
    let mut sim = make_sim(1, seed, FaultConfig::default(), Options::default());
    start_all(&mut sim, seed);
    let l = &mut sim.nodes[0];
    for i in 0..100u32 {
        let p = l.send_alloc(true).unwrap();
        l.packet_mut(p).unwrap()[..4].copy_from_slice(&i.to_le_bytes());
        l.ucast_launch(0, p, 4, true).unwrap();
        assert_eq!(l.poll().unwrap(), 1);
    }
    let got: Vec<u32> = l.state().got.iter().map(|g| g.2).collect();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    assert_eq!(l.engine().stats().tx_frames, 0, "nothing left the process");
    assert_eq!(l.engine().packets_free().0, Options::default().send_packets);
    let buf = l.stats_create().unwrap();
    l.stats_gather(buf).unwrap();
    let row = l.stats_buffer(buf).unwrap()[0];
    assert_eq!(row[0], 100, "launched");
    assert_eq!(row[1], 100, "upcalls");
}

/// Interrupt state: disabled after start, nested pairs, the polling watchdog.
#[test]
fn interrupt_nesting_and_watchdog() {
    let seed = 0x1;
    let opts = Options {
        intr_first: Duration::from_micros(100),
        interval: Duration::from_micros(100),
        ..Options::default()
    };
    let mut sim = make_sim(2, seed, FaultConfig::default(), opts);
    start_all(&mut sim, seed);
    let l = &mut sim.nodes[1];
    assert!(!l.intr_status(), "disabled when start returns");
    l.intr_enable();
    assert!(l.intr_status());
    l.intr_disable();
    l.intr_disable();
    l.intr_enable();
    assert!(!l.intr_status(), "only the outermost pair acts");
    l.intr_enable();
    assert!(l.intr_status());
    // A packet arrives; the program polled just now, so no interrupt is due yet.
    l.poll().unwrap();
    assert!(launch(&mut sim.nodes[0], Target::One(1), 42, 8));
    // Step the clock by hand: the simulator's own polls would make the upcall.
    let mut t = sim.now();
    for _ in 0..10 {
        t += Duration::from_micros(5);
        sim.clock.set(t);
        sim.nodes[0].poll_network();
        sim.nodes[1].poll_network();
    }
    let l = &mut sim.nodes[1];
    assert_eq!(l.engine().deliveries_pending(), 1);
    assert!(!l.interrupt_due(), "the program polled within intr_first");
    assert_eq!(l.interrupt(), 0);
    sim.clock.set(t + Duration::from_micros(100));
    let l = &mut sim.nodes[1];
    assert!(l.interrupt_due());
    assert_eq!(l.interrupt(), 1);
    assert_eq!(l.state().got, vec![(0, 0, 42)]);
    assert_eq!(l.stats().interrupts, 1);
}

/// A process that only polls, waiting for packets from a peer that died, gets an
/// error once the peer has been silent for the peer timeout (it probes while it
/// waits), instead of waiting forever; a send to the dead peer fails too.
#[test]
fn a_dead_peer_is_an_error_for_a_waiting_receiver() {
    let seed = 0xdead;
    let mut sim = make_sim(3, seed, FaultConfig::default(), Options::default());
    start_all(&mut sim, seed);
    sim.net.kill(2);
    let timeout = Config::new(7, 1, 0).peer_timeout;
    let mut t = sim.now();
    let mut failed_at = None;
    while t < Instant::ZERO + timeout + timeout {
        t += Duration::from_millis(20);
        sim.clock.set(t);
        let _ = sim.nodes[1].poll();
        if sim.nodes[0].poll().is_err() {
            failed_at = Some(t);
            break;
        }
    }
    let at = failed_at.unwrap_or_else(|| panic!("seed {seed}: still waiting at {t:?}"));
    assert_eq!(sim.nodes[0].failed_process(), Some(2), "seed {seed}");
    assert!(
        at.saturating_since(Instant::ZERO) >= timeout,
        "not before the timeout"
    );
    // The live peer is fine; a packet to the dead one is refused at once.
    let l = &mut sim.nodes[0];
    let p = l.send_alloc(false).unwrap();
    assert_eq!(l.ucast_launch(1, p, 4, false), Ok(()));
    let p = l.send_alloc(false).unwrap();
    l.ucast_launch(2, p, 4, false).unwrap();
    assert_eq!(l.poll(), Err(volley_core::engine::Error::SendFailure));
}

/// A process that says goodbye before it goes (`lfc_exit`) is not a process that
/// died: the others stop probing it, never report it, and refuse packets to it
/// ([`Error::PeerLeft`]); one that dies without a word is still reported.
#[test]
fn a_process_that_said_goodbye_is_not_taken_for_dead() {
    use volley_core::engine::Error;
    let seed = 0xb1e;
    let mut sim = make_sim(4, seed, FaultConfig::default(), Options::default());
    start_all(&mut sim, seed);
    // Process 2 says goodbye and stays until every goodbye is acknowledged.
    assert!(sim.nodes[2].engine_mut().say_goodbye());
    sim.run_until(sim.now() + Duration::from_secs(1), |nodes, _| {
        nodes[2].engine().is_quiescent()
            && nodes
                .iter()
                .enumerate()
                .all(|(i, n)| i == 2 || n.engine().stats().peers_left == 1)
    })
    .unwrap_or_else(|e| panic!("seed {seed}: goodbyes: {e:?}"));
    sim.net.kill(2);
    sim.net.kill(3);
    let timeout = Config::new(7, 1, 0).peer_timeout;
    let until = sim.now() + timeout + timeout;
    let mut t = sim.now();
    let mut reported = Vec::new();
    while t < until {
        t += Duration::from_millis(20);
        sim.clock.set(t);
        for i in 0..2 {
            if sim.nodes[i].poll().is_err() {
                reported.push((i, sim.nodes[i].failed_process()));
            }
        }
    }
    reported.sort();
    assert_eq!(
        reported,
        [(0, Some(3)), (1, Some(3))],
        "seed {seed}: only the silent death is reported"
    );
    for i in 0..2 {
        let l = &mut sim.nodes[i];
        let p = l.send_alloc(false).unwrap();
        assert_eq!(l.ucast_launch(2, p, 4, false), Err(Error::PeerLeft));
        assert_eq!(
            l.mcast_launch(volley_core::engine::MCAST_ALL, p, 4, false),
            Err(Error::PeerLeft)
        );
        assert_eq!(l.fetch_and_add(2, false), Err(Error::PeerLeft));
        // The packet is still the program's: it goes to the live peer.
        let peer = 1 - i as u16;
        assert_eq!(l.ucast_launch(peer, p, 4, false), Ok(()), "seed {seed}");
    }
}

/// The personality's own packets (statistics) are found wherever they wait in the
/// delivery queue, so they never wait behind the program's packets; the program's
/// keep their order.
#[test]
fn internal_packets_do_not_wait_behind_the_programs() {
    use volley_core::engine::{Capacity, Engine, Storage};
    use volley_core::phy::{Loopback, Ring};
    use volley_core::NodeAddr;
    let g = groups(2);
    let mk = |node| {
        let cap = Capacity {
            ports: 1,
            channels: 2,
            fabric_nodes: 2,
            ops: 16,
            assemblies: 1,
            eager: 0,
        };
        let st = Storage::with_capacity(cap).with_packets(4, 4, 1, 2);
        Engine::new(Config::new(7, 1, node), g, st).unwrap()
    };
    let (mut a, mut b) = (mk(0), mk(1));
    let mut rings: Vec<Ring<64, 1500>> = (0..2).map(|_| Ring::new()).collect();
    for (i, internal) in [false, true, false].into_iter().enumerate() {
        let p = a.packet_alloc().unwrap();
        a.packet_mut(p).unwrap()[0] = i as u8;
        if internal {
            a.launch_internal(p, 1, 1).unwrap();
        } else {
            a.launch_unicast(p, 1, 1).unwrap();
        }
    }
    let mut now = Instant::ZERO;
    for _ in 0..10 {
        now += Duration::from_micros(10);
        a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        b.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
    }
    assert_eq!(b.deliveries_pending(), 3);
    let d = b.next_internal_delivery().expect("the internal packet");
    assert!(d.internal && d.src == 0);
    assert_eq!(b.packet(d.packet).unwrap(), &[1]);
    b.packet_free(d.packet).unwrap();
    assert_eq!(b.next_internal_delivery(), None);
    for want in [0u8, 2] {
        let d = b.next_delivery().unwrap();
        assert!(!d.internal);
        assert_eq!(b.packet(d.packet).unwrap(), &[want]);
        b.packet_free(d.packet).unwrap();
    }
    assert_eq!(b.packets_free(), (4, 4));
}

/// A process that gets its fetch-and-add value and then computes for longer than
/// the peer timeout without calling in is not declared dead by the counter's owner:
/// the answer was acknowledged in the poll that took it (the default), or, where
/// its ack is left to ride on the next frame (`ack_exchange_ends` false, a frame
/// less per fetch-and-add), the process's host vouches for it (its beacon).
#[test]
fn a_process_that_computes_after_a_fetch_and_add_is_not_declared_dead() {
    let seed = 0xfa2;
    for ack_ends in [true, false] {
        let mut sim = make_sim_with(
            2,
            seed,
            FaultConfig::default(),
            Options::default(),
            ack_ends,
        );
        if !ack_ends {
            sim.net.vouch_for_the_living();
        }
        start_all(&mut sim, seed);
        let frames = |sim: &Sim<SimLfc<'static, St>>| -> u64 {
            sim.nodes.iter().map(|n| n.engine().stats().tx_frames).sum()
        };
        let f0 = frames(&sim);
        let mut h = None;
        sim.run_until(sim.now() + Duration::from_secs(1), |nodes, _| {
            let e = nodes[0].engine_mut();
            let x = *h.get_or_insert_with(|| e.start_fetch_add(1, 1, 0, 1).unwrap());
            e.fetch_add_result(x).unwrap().is_some()
        })
        .unwrap_or_else(|e| panic!("seed {seed:#x}: {e:?}"));
        // Request and answer, and the answer's ack where it goes at once.
        let want = if ack_ends { 3 } else { 2 };
        assert_eq!(
            frames(&sim) - f0,
            want,
            "seed {seed:#x}, ack_ends {ack_ends}"
        );
        // Node 0 computes; node 1, the owner, goes on polling for 40 s.
        common::only(&mut sim, 1, 40);
        let e = sim.nodes[1].engine();
        common::none_taken_for_dead(e, seed, 0);
        if ack_ends {
            assert!(e.is_quiescent(), "seed {seed:#x}");
        } else {
            // Node 0 is back and acks what it owes.
            sim.run_until(sim.now() + Duration::from_secs(5), |n, _| {
                n[1].engine().is_quiescent()
            })
            .unwrap_or_else(|e| panic!("seed {seed:#x}: {e:?}"));
        }
    }
}
