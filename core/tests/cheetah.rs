//! Cheetah core in the simulator: puts and gets with both bells under loss, hostile
//! addresses refused with the target untouched, invocations short and long, a
//! handler that puts, self operations, a dead peer, contexts sending garbage. Every
//! test prints its seed.

use volley_core::cheetah::{Segments, AINVOKE_MAX};
use volley_core::engine::{Config, Error, NoMemory, Received};
use volley_core::phy::FaultConfig;
use volley_core::sim::{Sim, SimCheetah, SimConfig};
use volley_core::time::{Duration, Instant};

type Node = SimCheetah<'static, Segments<'static>>;

/// Segment 1 of every context: data; segment 2: bells (16 i32 counters).
const DATA: u64 = 1 << 40;
const BELLS: u64 = 2 << 40;
const DATA_LEN: usize = 256 * 1024;

fn bell(i: u64) -> u64 {
    BELLS + 4 * i
}

fn lossy() -> FaultConfig {
    common::faults(0.08, 0.03, 0.05, 0.01)
}

fn make_sim(n: u16, seed: u64, faults: FaultConfig) -> Sim<Node> {
    make_sim_with(n, seed, faults, true)
}

/// [`make_sim`] with `Config::ack_exchange_ends` set to `ack_ends`.
fn make_sim_with(n: u16, seed: u64, faults: FaultConfig, ack_ends: bool) -> Sim<Node> {
    let g = groups(n);
    let mut cfg = SimConfig::lan(seed);
    cfg.faults = faults;
    Sim::new(n as usize, cfg, |i, dev, clock| {
        let mut mem = Segments::new();
        assert_eq!(mem.expose(Vec::leak(vec![0u8; DATA_LEN])), DATA);
        assert_eq!(mem.expose(Vec::leak(vec![0u8; 64])), BELLS);
        let mut c = Config::new(9, 1, i as u16);
        c.ack_exchange_ends = ack_ends;
        let mut node = SimCheetah::setup(c, g, n as usize, dev, clock, mem).unwrap();
        node.register(1, echo);
        node.register(2, record);
        node.register(3, put_back);
        node
    })
}

fn bell_of(n: &mut Node, i: u64) -> i32 {
    n.bell(bell(i)).unwrap()
}

fn data(n: &Node) -> &[u8] {
    n.memory().segment(DATA).unwrap()
}

fn data_mut(n: &mut Node) -> &mut [u8] {
    n.memory_mut().segment_mut(DATA).unwrap()
}

fn until(sim: &mut Sim<Node>, secs: u64, goal: impl FnMut(&mut [Node], Instant) -> bool) {
    let limit = sim.now() + Duration::from_secs(secs);
    if let Err(t) = sim.run_until(limit, goal) {
        panic!("no progress: seed {:#x} at {:?}", t.seed, t.at);
    }
}

/// Tag 1: answers with an invocation of tag 2 carrying the same bytes.
fn echo(c: &mut Node, who: u16, _tag: i32, buf: &[u8]) {
    c.ainvoke(who, 2, buf, 0).unwrap();
}

/// Tag 2: stores the buffer at the start of the data segment and rings bell 5.
fn record(c: &mut Node, _who: u16, _tag: i32, buf: &[u8]) {
    data_mut(c)[..buf.len()].copy_from_slice(buf);
    c.memory_mut().ring(bell(5));
}

/// Tag 3: a handler that itself puts: the first 8 bytes of the buffer name where
/// (in the invoker) 1000 bytes of our data go, and the invoker's bell 6 rings.
fn put_back(c: &mut Node, who: u16, _tag: i32, buf: &[u8]) {
    let at = u64::from_le_bytes(buf[..8].try_into().unwrap());
    c.put(who, at, DATA + 100_000, 1000, 0, bell(6)).unwrap();
}

use volley_core::engine::Memory;

mod common;
use common::{groups, launch_garbage, xorshift as pattern};

#[test]
fn put_ring_under_loss_rings_both_bells() {
    for seed in [0x7e11_u64, 0xc4ee] {
        let n = 4u16;
        let mut sim = make_sim(n, seed, lossy());
        let len = 100_000;
        for (i, node) in sim.nodes.iter_mut().enumerate() {
            let p = pattern(seed ^ i as u64, len);
            data_mut(node)[..len].copy_from_slice(&p);
            let next = (i as u16 + 1) % n;
            // To the upper half of the next context, remote bell 1, local bell 0.
            node.put(next, DATA + 128 * 1024, DATA, len, bell(0), bell(1))
                .unwrap();
        }
        until(&mut sim, 60, |nodes, _| {
            nodes
                .iter_mut()
                .all(|c| bell_of(c, 0) == 1 && bell_of(c, 1) == 1)
        });
        for i in 0..n as usize {
            let prev = (i + n as usize - 1) % n as usize;
            let want = pattern(seed ^ prev as u64, len);
            let got = &data(&sim.nodes[i])[128 * 1024..128 * 1024 + len];
            assert!(got == want, "seed {seed:#x}: put into {i} differs");
        }
        assert_eq!(sim.nodes[0].engine().rma_pending(), 0);
    }
}

#[test]
fn get_in_pieces_under_loss() {
    let seed = 0x6e7;
    let n = 3u16;
    let mut sim = make_sim(n, seed, lossy());
    let len = 200_000;
    let src = pattern(seed, len);
    data_mut(&mut sim.nodes[2])[..len].copy_from_slice(&src);
    // Node 0 gets node 2's data in 4 pieces, each ringing local bell 2 and remote bell 3.
    let piece = len / 4;
    for k in 0..4 {
        let off = (k * piece) as u64;
        sim.nodes[0]
            .get(2, DATA + off, DATA + off, piece, bell(2), bell(3))
            .unwrap();
    }
    until(&mut sim, 60, |nodes, _| {
        bell_of(&mut nodes[0], 2) == 4 && bell_of(&mut nodes[2], 3) == 4
    });
    assert!(data(&sim.nodes[0])[..len] == src[..], "seed {seed:#x}");
    assert!(sim.nodes[2].engine().stats().rma_served >= 4);
}

#[test]
fn hostile_addresses_are_refused_and_the_target_untouched() {
    let seed = 0xbad;
    let mut sim = make_sim(2, seed, FaultConfig::default());
    data_mut(&mut sim.nodes[0])[..4].copy_from_slice(b"mine");
    let before: Vec<u8> = data(&sim.nodes[1]).to_vec();
    // Unexposed, past the end of a segment, straddling the end, and address 0.
    let bad = [
        5 << 40,
        DATA + DATA_LEN as u64,
        DATA + DATA_LEN as u64 - 2,
        0,
        u64::MAX - 1,
    ];
    for (k, &addr) in bad.iter().enumerate() {
        sim.nodes[0]
            .put(1, addr, DATA, 4, bell(0), bell(1))
            .unwrap();
        let mut err = None;
        until(&mut sim, 5, |nodes, _| {
            if err.is_none() {
                err = nodes[0].poll().err();
            }
            err.is_some()
        });
        assert_eq!(err, Some(Error::BadAddress), "seed {seed:#x}: put #{k}");
        sim.nodes[0]
            .get(1, addr, DATA, 4, bell(0), bell(1))
            .unwrap();
        let mut err = None;
        until(&mut sim, 5, |nodes, _| {
            if err.is_none() {
                err = nodes[0].poll().err();
            }
            err.is_some()
        });
        assert_eq!(err, Some(Error::BadAddress), "seed {seed:#x}: get #{k}");
    }
    assert!(data(&sim.nodes[1]) == &before[..], "target memory changed");
    assert_eq!(bell_of(&mut sim.nodes[1], 1), 0, "target bell rung");
    assert_eq!(
        bell_of(&mut sim.nodes[0], 0),
        0,
        "local bell rung for a refused op"
    );
    assert!(sim.nodes[1].engine().stats().rma_denied >= 10);
    // A local source or destination outside our own memory is refused at the call.
    assert_eq!(
        sim.nodes[0].put(1, DATA, 7 << 40, 4, 0, 0),
        Err(Error::BadAddress)
    );
    assert_eq!(
        sim.nodes[0].get(1, DATA, 7 << 40, 4, 0, 0),
        Err(Error::BadAddress)
    );
    assert_eq!(
        sim.nodes[0].put(9, DATA, DATA, 4, 0, 0),
        Err(Error::UnknownNode)
    );
    // And the pair still works afterwards.
    sim.nodes[0].put(1, DATA + 8, DATA, 4, 0, bell(1)).unwrap();
    until(&mut sim, 5, |nodes, _| bell_of(&mut nodes[1], 1) == 1);
    assert_eq!(&data(&sim.nodes[1])[8..12], b"mine");
}

#[test]
fn ainvoke_ping_pong_long_buffers_and_a_handler_that_puts() {
    let seed = 0xa1;
    let mut sim = make_sim(2, seed, lossy());
    // Short, empty, one just over a packet, and the longest.
    // (A blocking call cannot wait for another simulated node: at most 64 packets.)
    for len in [5usize, 0, 1500, 40_000] {
        let buf = pattern(len as u64, len);
        let before = bell_of(&mut sim.nodes[0], 5);
        sim.nodes[0].ainvoke(1, 1, &buf, bell(4)).unwrap();
        until(&mut sim, 60, |nodes, _| {
            bell_of(&mut nodes[0], 5) == before + 1
        });
        assert!(
            data(&sim.nodes[0])[..len] == buf[..],
            "seed {seed:#x}: {len}"
        );
    }
    assert_eq!(
        bell_of(&mut sim.nodes[0], 4),
        4,
        "local bell once per ainvoke"
    );
    // Too long for an invocation: a typed error, nothing sent.
    let huge = vec![0u8; AINVOKE_MAX + 1];
    assert_eq!(
        sim.nodes[0].ainvoke(1, 1, &huge, 0),
        Err(Error::LongerThan(AINVOKE_MAX))
    );
    assert_eq!(
        Error::LongerThan(AINVOKE_MAX).to_string(),
        "longer than 1048576 bytes, the most this call takes"
    );
    // Handler that puts: node 1 puts 1000 bytes of its data into node 0 at +50_000.
    let src = pattern(77, 1000);
    data_mut(&mut sim.nodes[1])[100_000..101_000].copy_from_slice(&src);
    let at = (DATA + 50_000).to_le_bytes();
    sim.nodes[0].ainvoke(1, 3, &at, 0).unwrap();
    until(&mut sim, 30, |nodes, _| bell_of(&mut nodes[0], 6) == 1);
    assert!(data(&sim.nodes[0])[50_000..51_000] == src[..]);
    // A tag nobody registered is counted and dropped.
    sim.nodes[0].ainvoke(1, 99, b"x", 0).unwrap();
    until(&mut sim, 5, |nodes, _| nodes[1].stats().unhandled == 1);
}

#[test]
fn operations_on_ourselves() {
    let mut sim = make_sim(2, 0x5e1f, FaultConfig::default());
    let c = &mut sim.nodes[1];
    data_mut(c)[..6].copy_from_slice(b"abcdef");
    c.put(1, DATA + 2, DATA, 6, bell(0), bell(1)).unwrap();
    assert_eq!(
        &data(c)[..8],
        b"ababcdef",
        "overlapping put copies like memmove"
    );
    c.get(1, DATA + 2, DATA + 20, 6, bell(2), bell(3)).unwrap();
    assert_eq!(&data(c)[20..26], b"abcdef");
    for b in 0..4 {
        assert_eq!(bell_of(c, b), 1);
    }
    c.ainvoke(1, 2, b"self", 0).unwrap();
    assert_eq!(c.poll().unwrap(), 1);
    assert_eq!(&data(c)[..4], b"self");
    assert_eq!(c.put(1, 9 << 40, DATA, 4, 0, 0), Err(Error::BadAddress));
}

#[test]
fn a_dead_context_fails_the_initiator() {
    let seed = 0xdead;
    let mut sim = make_sim(3, seed, FaultConfig::default());
    sim.net.kill(2);
    sim.nodes[0].put(2, DATA, DATA, 10_000, bell(0), 0).unwrap();
    sim.nodes[1].get(2, DATA, DATA, 10_000, bell(0), 0).unwrap();
    let mut errs = [None, None];
    until(&mut sim, 120, |nodes, _| {
        for (i, e) in errs.iter_mut().enumerate() {
            if e.is_none() {
                *e = nodes[i].poll().err();
            }
        }
        errs.iter().all(Option::is_some)
    });
    assert_eq!(errs, [Some(Error::SendFailure); 2], "seed {seed:#x}");
    assert_eq!(bell_of(&mut sim.nodes[0], 0), 0);
    assert_eq!(sim.nodes[0].failure(), Some((2, Error::SendFailure)));
}

#[test]
fn a_denial_arriving_after_the_put_completed_is_still_reported() {
    use volley_core::wire::{Endpoints, Flags, Kind, Repr};
    let mut sim = make_sim(2, 0x1a7e, FaultConfig::default());
    sim.nodes[0].put(1, DATA, DATA, 16, bell(0), 0).unwrap();
    until(&mut sim, 5, |nodes, _| bell_of(&mut nodes[0], 0) == 1);
    // The target's first reliable frame to us (seq 0): DENY_PUT for our message 0,
    // as it would come when a bare ack had travelled ahead of it.
    let repr = Repr {
        kind: Kind::Control,
        flags: Flags::RELIABLE,
        job_key: 9,
        ends: Endpoints {
            src_group: 1,
            src_node: 1,
            src_port: 0,
            dst_group: 1,
            dst_node: 0,
            dst_port: 0,
        },
        seq: 0,
        ack: None,
        msg_id: 0,
        offset: 2,
        total_len: 0,
        payload_len: 0,
    };
    let mut f = vec![0u8; repr.buffer_len()];
    repr.emit_with_payload(&mut f, &[], false).unwrap();
    let now = sim.now();
    sim.nodes[0]
        .engine_mut()
        .handle_frame(now, Received::from(&f[..]), &mut NoMemory);
    assert_eq!(sim.nodes[0].poll(), Err(Error::BadAddress));
    // Once: the same denial again is a duplicate.
    sim.nodes[0]
        .engine_mut()
        .handle_frame(now, Received::from(&f[..]), &mut NoMemory);
    assert_eq!(sim.nodes[0].poll(), Ok(0));
}

#[test]
fn a_ring_of_no_bytes_rings_the_remote_bell_once_in_order_and_is_checked() {
    let seed = 0x0b11;
    let mut sim = make_sim(3, seed, lossy());
    let len = 50_000;
    let p = pattern(seed, len);
    data_mut(&mut sim.nodes[0])[..len].copy_from_slice(&p);
    // A put without a remote bell, then the bell rung on its own: when it rings,
    // the data is there (same channel, in order).
    sim.nodes[0].put(1, DATA, DATA, len, 0, 0).unwrap();
    for _ in 0..3 {
        sim.nodes[0].ring(1, bell(7)).unwrap();
    }
    sim.nodes[0].ring(0, bell(8)).unwrap();
    assert_eq!(
        bell_of(&mut sim.nodes[0], 8),
        1,
        "a ring of oneself is at once"
    );
    sim.nodes[0].ring(2, 0).unwrap();
    until(&mut sim, 60, |nodes, _| bell_of(&mut nodes[1], 7) == 3);
    assert!(data(&sim.nodes[1])[..len] == p[..], "seed {seed:#x}");
    assert_eq!(
        sim.nodes[0].stats().puts,
        1,
        "rings are not counted as puts"
    );
    // A bell the target does not expose is refused there and reported here.
    sim.nodes[0].ring(2, 7 << 40).unwrap();
    let mut refused = false;
    until(&mut sim, 60, |nodes, _| {
        refused |= nodes[0].poll() == Err(Error::BadAddress);
        refused
    });
    assert_eq!(sim.nodes[0].failure(), Some((2, Error::BadAddress)));
    assert_eq!(bell_of(&mut sim.nodes[2], 7), 0, "seed {seed:#x}");
    assert_eq!(sim.nodes[0].ring(0, 7 << 40), Err(Error::BadAddress));
    assert_eq!(sim.nodes[0].ring(9, bell(7)), Err(Error::UnknownNode));
}

/// Contexts that send garbage straight through their engines: invocation packets
/// with any tag but the handlers' (those are the program's to check), lengths at
/// their extremes (0, one packet, over `AINVOKE_MAX`, 4 GiB), starts of long
/// invocations never finished, continuation bytes with no invocation, truncated
/// heads. The target never panics, and a third context's invocation and put still
/// land whole after each burst.
#[test]
fn garbage_from_contexts_never_panics_a_target() {
    let seed = std::env::var("VOLLEY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xc4a1_u64);
    eprintln!("VOLLEY_SEED={seed}");
    let mut sim = make_sim(4, seed, FaultConfig::default());
    let mut rng = volley_core::rng::Rng::new(seed);
    let mut sent = 0;
    for round in 0..30u64 {
        for k in 0..40 {
            let e = sim.nodes[if k % 2 == 0 { 0 } else { 3 }].engine_mut();
            let size = e.packet_size();
            let tag = match rng.below(3) {
                0 => 99,
                1 => i32::MIN,
                _ => (rng.next_u64() as i32) | 0x100,
            };
            let want: u32 = match rng.below(5) {
                0 => 0,
                1 => rng.below(size as u64) as u32,
                2 => rng.below(AINVOKE_MAX as u64) as u32,
                3 => AINVOKE_MAX as u32 + 1,
                _ => u32::MAX,
            };
            let mut head = [0u8; 8];
            head[..4].copy_from_slice(&tag.to_be_bytes());
            head[4..].copy_from_slice(&want.to_be_bytes());
            match launch_garbage(e, &mut rng, Some(1), &head) {
                None => break,
                Some(ok) => sent += u64::from(ok),
            }
        }
        let later = sim.now() + Duration::from_millis(5);
        let _ = sim.run_until(later, |_, _| false);
        // Context 2's invocation (tag 2 stores it at the target and rings bell 5)
        // and a put into the target land whole.
        let buf = pattern(seed ^ round, 3000);
        let before = bell_of(&mut sim.nodes[1], 5);
        sim.nodes[2].ainvoke(1, 2, &buf, 0).unwrap();
        let src = pattern(round, 500);
        data_mut(&mut sim.nodes[2])[200_000..200_500].copy_from_slice(&src);
        let put_bell = bell_of(&mut sim.nodes[1], 7);
        sim.nodes[2]
            .put(1, DATA + 10_000, DATA + 200_000, 500, 0, bell(7))
            .unwrap();
        until(&mut sim, 30, |nodes, _| {
            bell_of(&mut nodes[1], 5) == before + 1 && bell_of(&mut nodes[1], 7) == put_bell + 1
        });
        assert!(data(&sim.nodes[1])[..3000] == buf[..], "round {round}");
        assert!(
            data(&sim.nodes[1])[10_000..10_500] == src[..],
            "round {round}"
        );
    }
    assert!(sent > 600, "garbage sent: {sent}");
    // Every garbage packet reached the target's invocation reassembly.
    let got = sim.nodes[1].engine().stats().delivered;
    assert!(got >= sent, "{got} of {sent} garbage packets delivered");
}

/// A context that takes a put (no local bell there to wait on, the remote bell rung)
/// or serves a get and then computes for longer than the peer timeout without
/// calling in is not declared dead: the frames it took were acknowledged in the
/// poll that took them, not left to ride on an answer that never comes.
#[test]
fn a_target_that_computes_after_a_put_or_a_get_is_not_declared_dead() {
    let seed = 0x9e7;
    let mut sim = make_sim(2, seed, FaultConfig::default());
    sim.nodes[0].put(1, DATA, DATA, 8, 0, bell(1)).unwrap();
    until(&mut sim, 1, |nodes, _| bell_of(&mut nodes[1], 1) == 1);
    // Node 1 saw its bell and computes; node 0 goes on polling.
    common::only(&mut sim, 0, 40);
    let e = sim.nodes[0].engine();
    common::none_taken_for_dead(e, seed, 1);
    assert_eq!(e.rma_pending(), 0, "seed {seed:#x}");
    // A get: node 0 has its data and computes; node 1, which served it, polls on.
    sim.nodes[0].get(1, DATA, DATA + 64, 8, bell(2), 0).unwrap();
    until(&mut sim, 1, |nodes, _| bell_of(&mut nodes[0], 2) == 1);
    common::only(&mut sim, 1, 40);
    let e = sim.nodes[1].engine();
    common::none_taken_for_dead(e, seed, 0);
    assert!(e.is_quiescent(), "seed {seed:#x}");
}

/// Frames per operation of a put ping-pong (remote bells only) and of gets (a local
/// bell only): where the end of an exchange is acked at once (the default) a put
/// costs its frame and an ack, a get its request, its reply and an ack; where a host
/// speaks for its processes (`ack_exchange_ends` false), the acks ride on the next
/// frame back. Puts with a local bell are acked at once either way.
#[test]
fn the_ack_of_an_exchange_end_rides_where_the_host_speaks_for_its_processes() {
    for ack_ends in [true, false] {
        let seed = 0x51;
        let mut sim = make_sim_with(2, seed, FaultConfig::default(), ack_ends);
        let frames = |sim: &Sim<Node>| -> u64 {
            sim.nodes.iter().map(|n| n.engine().stats().tx_frames).sum()
        };
        let iters = 200;
        let f0 = frames(&sim);
        for i in 0..iters {
            sim.nodes[0].put(1, DATA, DATA, 8, 0, bell(1)).unwrap();
            until(&mut sim, 5, |n, _| bell_of(&mut n[1], 1) > i);
            sim.nodes[1].put(0, DATA, DATA, 8, 0, bell(1)).unwrap();
            until(&mut sim, 5, |n, _| bell_of(&mut n[0], 1) > i);
        }
        let per_put = (frames(&sim) - f0) as f64 / (2 * iters) as f64;
        let f0 = frames(&sim);
        for i in 0..iters {
            sim.nodes[0].get(1, DATA, DATA + 64, 8, bell(2), 0).unwrap();
            until(&mut sim, 5, |n, _| bell_of(&mut n[0], 2) > i);
        }
        let per_get = (frames(&sim) - f0) as f64 / iters as f64;
        let want = if ack_ends { (2.0, 3.0) } else { (1.0, 2.0) };
        assert!(
            (per_put - want.0).abs() < 0.02 && (per_get - want.1).abs() < 0.02,
            "seed {seed:#x}, ack_exchange_ends {ack_ends}: {per_put} frames a put, {per_get} a get"
        );
        // A put with a local bell asks for its ack: the bell rings at once.
        let t0 = sim.now();
        sim.nodes[0].put(1, DATA, DATA, 8, bell(3), 0).unwrap();
        until(&mut sim, 1, |n, _| bell_of(&mut n[0], 3) == 1);
        assert!(
            sim.now() - t0 < Duration::from_micros(15),
            "seed {seed:#x}: the local bell waited {}",
            sim.now() - t0
        );
        // Everything settles: no op is left waiting for an ack.
        until(&mut sim, 1, |n, _| {
            n.iter()
                .all(|c| c.engine().rma_pending() == 0 && c.engine().is_quiescent())
        });
    }
}

/// With acks left to ride (`ack_exchange_ends` false), a target that takes a put
/// and computes past the peer timeout owes its ack: its initiator takes it for dead
/// unless the target's host vouches for it (its beacon), as the hosted one does.
#[test]
fn a_computing_target_owing_an_ack_lives_by_its_beacon() {
    for vouch in [false, true] {
        let seed = 0xbea;
        let mut sim = make_sim_with(2, seed, FaultConfig::default(), false);
        if vouch {
            sim.net.vouch_for_the_living();
        }
        sim.nodes[0].put(1, DATA, DATA, 8, 0, bell(1)).unwrap();
        until(&mut sim, 1, |nodes, _| bell_of(&mut nodes[1], 1) == 1);
        common::only(&mut sim, 0, 40);
        let failed = sim.nodes[0].engine().stats().peers_failed;
        assert_eq!(failed, u64::from(!vouch), "seed {seed:#x}, vouched {vouch}");
        if vouch {
            // Back from computing, the target acks what it owes.
            until(&mut sim, 5, |n, _| n[0].engine().rma_pending() == 0);
        }
    }
}

/// Every context `h` holds, in its 64-byte slot `k` of each other context `o`
/// (at `DATA + 1024`), the first `len(k, h, o)` bytes of `o`'s pattern and zeros
/// after them.
fn assert_landed(sim: &Sim<Node>, seed: u64, per_peer: u64, len: impl Fn(u64, u16, u16) -> usize) {
    let n = sim.nodes.len() as u16;
    for h in 0..n {
        for o in (0..n).filter(|&o| o != h) {
            let p = pattern(seed ^ u64::from(o), 64);
            for k in 0..per_peer {
                let len = len(k, h, o);
                let at = 1024 + ((u64::from(o) * per_peer + k) * 64) as usize;
                let got = &data(&sim.nodes[h as usize])[at..at + 64];
                assert!(got[..len] == p[..len], "seed {seed:#x}: {k} of {o} at {h}");
                assert!(
                    got[len..].iter().all(|&b| b == 0),
                    "seed {seed:#x}: past {k} of {o} at {h}"
                );
            }
        }
    }
}

/// Short puts, each whole in one frame (taken at the target without an assembly),
/// from every context to every other, many in flight, under loss: every byte lands,
/// every remote bell rings once per put and every local bell once per put, however
/// the acks interleave (finished operations are settled from a list, oldest first).
#[test]
fn many_short_puts_in_flight_ring_every_bell_exactly_once() {
    for (seed, ack_ends) in [(0x5107_u64, true), (0x5108, false)] {
        let n = 3u16;
        let per_peer = 60u64;
        let mut sim = make_sim_with(n, seed, lossy(), ack_ends);
        for (i, node) in sim.nodes.iter_mut().enumerate() {
            let p = pattern(seed ^ i as u64, 64);
            data_mut(node)[..64].copy_from_slice(&p);
        }
        for k in 0..per_peer {
            for i in 0..n {
                for j in (0..n).filter(|&j| j != i) {
                    // 1 to 64 bytes, to a slot of 64 that is context i's at j.
                    let len = 1 + ((k as usize * 7 + j as usize) % 64);
                    let at = DATA + 1024 + (u64::from(i) * per_peer + k) * 64;
                    sim.nodes[i as usize]
                        .put(j, at, DATA, len, bell(2), bell(3))
                        .unwrap();
                }
            }
        }
        let want = (per_peer * u64::from(n - 1)) as i32;
        until(&mut sim, 60, |nodes, _| {
            nodes
                .iter_mut()
                .all(|c| bell_of(c, 2) == want && bell_of(c, 3) == want)
        });
        // Exactly once: nothing rings again once the resends have settled.
        let later = sim.now() + Duration::from_secs(2);
        let _ = sim.run_until(later, |_, _| false);
        for (j, c) in sim.nodes.iter_mut().enumerate() {
            assert_eq!(bell_of(c, 2), want, "seed {seed:#x}: local bells of {j}");
            assert_eq!(bell_of(c, 3), want, "seed {seed:#x}: remote bells of {j}");
            assert_eq!(c.engine().rma_pending(), 0, "seed {seed:#x}");
        }
        // Context `i`'s puts to `j` lie in `j`'s slots of `i`.
        assert_landed(&sim, seed, per_peer, |k, j, _| {
            1 + (k as usize * 7 + j as usize) % 64
        });
    }
}

/// Short gets, each answered in one frame (taken without an assembly), from every
/// context to every other, many in flight, under loss: every byte lands where its
/// get asked, every local bell rings once per get, and the tables empty.
#[test]
fn many_short_gets_in_flight_ring_every_bell_exactly_once() {
    for (seed, ack_ends) in [(0x6e71_u64, true), (0x6e72, false)] {
        let n = 3u16;
        let per_peer = 8u64;
        let mut sim = make_sim_with(n, seed, lossy(), ack_ends);
        for (i, node) in sim.nodes.iter_mut().enumerate() {
            let p = pattern(seed ^ i as u64, 64);
            data_mut(node)[..64].copy_from_slice(&p);
        }
        for k in 0..per_peer {
            for i in 0..n {
                for j in (0..n).filter(|&j| j != i) {
                    let len = 1 + ((k as usize * 5 + j as usize) % 64);
                    let at = DATA + 1024 + (u64::from(j) * per_peer + k) * 64;
                    sim.nodes[i as usize]
                        .get(j, DATA, at, len, bell(4), 0)
                        .unwrap();
                }
            }
        }
        let want = (per_peer * u64::from(n - 1)) as i32;
        until(&mut sim, 60, |nodes, _| {
            nodes.iter_mut().all(|c| bell_of(c, 4) == want)
        });
        let later = sim.now() + Duration::from_secs(2);
        let _ = sim.run_until(later, |_, _| false);
        for (i, c) in sim.nodes.iter_mut().enumerate() {
            assert_eq!(bell_of(c, 4), want, "seed {seed:#x}: local bells of {i}");
            assert_eq!(c.engine().rma_pending(), 0, "seed {seed:#x}");
        }
        // Context `i`'s gets from `j` lie in `i`'s slots of `j`.
        assert_landed(&sim, seed, per_peer, |k, _, j| {
            1 + (k as usize * 5 + j as usize) % 64
        });
    }
}

/// `invocations_waiting` (which lets the C ABI skip its handler loop's lock) is
/// true whenever `next_invocation` may find one: an invocation of oneself, and a
/// peer's packet that the network poll took and no handler has run yet.
#[test]
fn invocations_waiting_tells_when_one_may_be_there() {
    let mut sim = make_sim(2, 0x1a17, FaultConfig::default());
    let c = &mut sim.nodes[0];
    assert!(!c.invocations_waiting());
    c.ainvoke(0, 2, b"own", 0).unwrap();
    assert!(c.invocations_waiting(), "an invocation of oneself");
    let inv = c.next_invocation().unwrap();
    c.invocation_done(inv);
    assert!(!c.invocations_waiting());
    sim.nodes[1].ainvoke(0, 2, b"peer", 0).unwrap();
    let mut seen = false;
    for _ in 0..10_000 {
        sim.nodes[1].poll_network();
        sim.nodes[0].poll_network();
        if sim.nodes[0].invocations_waiting() {
            seen = true;
            break;
        }
        let t = sim.now() + Duration::from_micros(1);
        sim.clock.set(t);
    }
    assert!(seen, "the peer's invocation never waited");
    let inv = sim.nodes[0]
        .next_invocation()
        .expect("the peer's invocation");
    assert_eq!(sim.nodes[0].invocation_data(&inv), b"peer");
    sim.nodes[0].invocation_done(inv);
    assert!(!sim.nodes[0].invocations_waiting());
}
