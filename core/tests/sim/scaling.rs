//! How barrier and broadcast cost grow with the number of nodes.

use super::*;

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
