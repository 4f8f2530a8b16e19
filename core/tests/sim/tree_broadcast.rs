//! Broadcasts down the trees: order, loss, and relays that die.

use super::*;
use volley_core::engine::{Body, SendRequest};

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
                .then(|| {
                    node.engine_mut()
                        .start_send(SendRequest {
                            port: 5,
                            head: &[],
                            body: Body::Copied(body),
                            reliable: true,
                        })
                        .ok()
                })
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
