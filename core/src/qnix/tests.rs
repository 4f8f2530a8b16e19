use super::*;
use crate::cheetah::Segments;

#[test]
fn peers_reach_only_granted_ranges_and_bells() {
    let mut buf = [0u8; 256];
    let mut mem = Segments::new();
    let base = mem.expose(&mut buf);
    let armed = [Armed {
        ctx: 5,
        src: 1,
        addr: base + 64,
        len: 64,
        total: 64,
    }];
    let mut rung = Vec::new();
    let mut g = Gate {
        mem: &mut mem,
        armed: &armed,
        rung: &mut rung,
    };
    let peer = Access::PeerWrite;
    assert_eq!(g.check(base + 64, 64, peer), Ok(()));
    assert_eq!(g.check(base + 100, 8, peer), Ok(()));
    for (addr, len) in [
        (base + 63, 2),
        (base + 120, 9),
        (base, 8),
        (base + 64, u64::MAX),
    ] {
        assert_eq!(
            g.check(addr, len, peer),
            Err(Error::BadAddress),
            "{addr:#x}+{len}"
        );
    }
    assert_eq!(
        g.check(base + 64, 8, Access::PeerRead),
        Err(Error::BadAddress)
    );
    // The process itself reaches all of its memory.
    assert_eq!(g.check(base, 256, Access::Read), Ok(()));
    assert_eq!(g.check(base, 256, Access::Write), Ok(()));
    // Bells: a granted receive's, for peers; never another context's or a send's.
    assert_eq!(g.check(token(RECV, 5), 4, peer), Ok(()));
    assert_eq!(g.check(token(RECV, 6), 4, peer), Err(Error::BadAddress));
    assert_eq!(g.check(token(SEND, 5), 4, peer), Err(Error::BadAddress));
    assert_eq!(
        g.check(token(RECV, 5), 4, Access::Write),
        Err(Error::BadAddress)
    );
    g.ring(token(SEND, 3));
    g.ring(base + 64);
    assert_eq!(rung, [token(SEND, 3)], "memory is never rung");
    assert_eq!(
        untoken(token(RECV, CONTEXTS - 1)),
        Some((RECV, CONTEXTS - 1))
    );
    assert_eq!(untoken(token(RECV, CONTEXTS - 1) + 4), None);
    assert_eq!(untoken(token(SEND, 0) + 2), None);
}

#[cfg(feature = "sim")]
type SimNode = crate::sim::SimQnix<'static, Segments<'static>>;

/// `n` registered processes of application 5 in the simulator, each with one
/// segment of `len` bytes at `1 << 40` (the first segment exposed).
#[cfg(feature = "sim")]
fn sim_app(n: u16, len: usize, seed: u64) -> crate::sim::Sim<SimNode> {
    use crate::engine::{Group, Members};
    use crate::sim::{Sim, SimConfig};
    let groups: &'static [Group<'static>] = Vec::leak(alloc::vec![Group {
        id: 1,
        members: Members::Range { first: 0, count: n },
    }]);
    let mut sim = Sim::new(n as usize, SimConfig::lan(seed), |i, dev, clock| {
        let mut mem = Segments::new();
        assert_eq!(mem.expose(Vec::leak(alloc::vec![0u8; len])), 1 << 40);
        let c = Config::new(9, 1, i as u16);
        let q: SimNode = Qnix::new(c, groups, n as usize, dev, clock, mem).unwrap();
        q
    });
    for (i, q) in sim.nodes.iter_mut().enumerate() {
        q.register(Name::new(5, i as i32), 5, n as i32).unwrap();
    }
    let limit = sim.now() + Duration::from_secs(10);
    sim.run_until(limit, |n, _| n.iter_mut().all(|q| q.registered().unwrap()))
        .unwrap();
    sim
}

/// A put the receiver refuses (here: its grant moved under it) fails the send
/// at the sender with `Fault`, and the receive with it (`K_FIN`): no hang.
#[cfg(feature = "sim")]
#[test]
fn a_refused_rendezvous_put_fails_both_ends() {
    let len = 64 * 1024;
    let base = 1u64 << 40;
    let mut sim = sim_app(2, len, 0x5e7);
    let seg = Region::Segments(alloc::vec![(base, len)]);
    let r = sim.nodes[1].recv_context(Name::new(5, 0), 1, true, 0, len, seg.clone());
    let r = r.unwrap();
    sim.nodes[1].receive(r).unwrap();
    let s = sim.nodes[0].send_context(Name::new(5, 1), 1, true, 0, len, seg);
    let s = s.unwrap();
    sim.nodes[0].send(s).unwrap();
    let limit = sim.now() + Duration::from_secs(10);
    sim.run_until(limit, |n, _| !n[1].armed.is_empty()).unwrap();
    sim.nodes[1].armed[0].addr += 1;
    let limit = sim.now() + Duration::from_secs(10);
    sim.run_until(limit, |n, _| {
        n[0].send_doorbell(s) != BUSY && n[1].recv_doorbell(r) != BUSY
    })
    .unwrap();
    assert_eq!(sim.nodes[0].poll_for_send(s), Err(QxError::Fault));
    assert_eq!(sim.nodes[1].poll_for_receive(r), Err(QxError::Fault));
    assert!(sim.nodes[1].armed.is_empty());
}

/// Every doorbell write is in the changed masks once, until taken: a facade
/// that copies only those (the C ABI's HPS) misses no change.
#[test]
fn changed_bells_name_every_doorbell_written() {
    let len = 64;
    let mut sim = sim_app(2, len, 0xbe11);
    let data = Region::Data(alloc::vec![9; len]);
    let seg = Region::Segments(alloc::vec![(1u64 << 40, len)]);
    for n in &mut sim.nodes {
        n.take_changed_bells();
    }
    let r = sim.nodes[1].recv_context(Name::new(5, 0), 3, true, 1, len, seg);
    let r = r.unwrap();
    assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "made FREE");
    sim.nodes[1].receive(r).unwrap();
    assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "BUSY");
    assert_eq!(sim.nodes[1].take_changed_bells(), [0, 0], "taken");
    let s = sim.nodes[0].send_context(Name::new(5, 1), 3, true, 1, len, data);
    let s = s.unwrap();
    sim.nodes[0].send_short(s).unwrap();
    assert_eq!(sim.nodes[0].take_changed_bells(), [1 << s, 0]);
    // A short send may be done by the time the call returns.
    let rung = sim.nodes[0].send_doorbell(s) == DONE;
    let limit = sim.now() + Duration::from_secs(10);
    sim.run_until(limit, |n, _| {
        n[0].send_doorbell(s) == DONE && n[1].recv_doorbell(r) == DONE
    })
    .unwrap();
    let changed = [if rung { 0 } else { 1 << s }, 0];
    assert_eq!(sim.nodes[0].take_changed_bells(), changed, "DONE");
    assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "DONE");
    assert_eq!(sim.nodes[1].poll_for_receive(r), Ok(len));
    assert_eq!(sim.nodes[1].take_changed_bells(), [0, 1 << r], "FREE again");
    assert_eq!(sim.nodes[1].recv_doorbell(r), FREE);
}

/// A peer of the application that sends packets with random heads (every kind,
/// random fields and lengths) panics nothing, completes no receive posted for
/// another sender, and leaves the process working: a real message from that
/// sender then lands whole.
#[cfg(feature = "sim")]
#[test]
fn random_heads_from_a_peer_break_nothing() {
    let seed = 0x4ead;
    let len = 64 * 1024;
    let base = 1u64 << 40;
    let mut sim = sim_app(3, len, seed);
    let from2 = Name::new(5, 2);
    let seg = |off: u64, n: usize| Region::Segments(alloc::vec![(base + off, n)]);
    let r = sim.nodes[0].recv_context(from2, 7, true, 0, 20_000, seg(0, 20_000));
    let r = r.unwrap();
    sim.nodes[0].receive(r).unwrap();
    let mut rng = crate::rng::Rng::new(seed);
    for k in 0..3000 {
        let q = &mut sim.nodes[1];
        let Ok(id) = q.engine.packet_alloc() else {
            let limit = sim.now() + Duration::from_millis(1);
            let _ = sim.run_until(limit, |_, _| false);
            continue;
        };
        let size = q.engine.packet_size();
        let n = (rng.below(size as u64 + 1) as usize).max(if k % 2 == 0 { HEAD } else { 0 });
        let p = q.engine.packet_mut(id).unwrap();
        for b in p[..n].iter_mut() {
            *b = rng.next_u64() as u8;
        }
        if n >= 1 {
            // Mostly known kinds, so that every parser is reached.
            p[0] = rng.below(10) as u8;
        }
        if n >= 16 && k % 3 == 0 {
            // Small fields now and then: real context indices and lengths.
            p[8..12].copy_from_slice(&(rng.below(70) as i32 - 3).to_be_bytes());
            p[12..16].copy_from_slice(&(rng.below(100_000) as u32).to_be_bytes());
        }
        q.engine.launch_unicast(id, 0, n).unwrap();
        let limit = sim.now() + Duration::from_micros(50);
        let _ = sim.run_until(limit, |_, _| false);
    }
    let limit = sim.now() + Duration::from_millis(200);
    let _ = sim.run_until(limit, |_, _| false);
    let heard = sim.nodes[0].engine().stats().rx_frames;
    assert!(heard > 2500, "the packets arrived: {heard}");
    assert_eq!(sim.nodes[0].recv_doorbell(r), BUSY, "seed {seed:#x}");
    // Process 2 sends the real message (by rendezvous: 20 KB from one range).
    let data: Vec<u8> = (0..20_000).map(|i| (i * 7 % 251) as u8).collect();
    let q = &mut sim.nodes[2];
    q.memory_mut().segment_mut(base).unwrap()[..20_000].copy_from_slice(&data);
    let s = q.send_context(Name::new(5, 0), 7, true, 0, 20_000, seg(0, 20_000));
    let s = s.unwrap();
    q.send(s).unwrap();
    let limit = sim.now() + Duration::from_secs(10);
    sim.run_until(limit, |n, _| {
        n[0].recv_doorbell(r) != BUSY && n[2].send_doorbell(s) != BUSY
    })
    .unwrap();
    assert_eq!(
        sim.nodes[0].poll_for_receive(r),
        Ok(20_000),
        "seed {seed:#x}"
    );
    assert!(sim.nodes[0].memory().segment(base).unwrap()[..20_000] == data[..]);
    assert_eq!(sim.nodes[2].poll_for_send(s), Ok(()));
}

#[test]
fn only_adjacent_segments_are_one_range() {
    assert_eq!(contiguous(&[(100, 10), (110, 5)]), Some((100, 15)));
    assert_eq!(contiguous(&[(100, 10), (111, 5)]), None);
    assert_eq!(contiguous(&[]), None);
    assert_eq!(contiguous(&[(u64::MAX - 1, 5)]), None);
}
