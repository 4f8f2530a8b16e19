//! Many nodes at once.

use super::*;

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
