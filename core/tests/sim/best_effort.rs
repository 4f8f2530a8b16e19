//! Best-effort sends: never retransmitted, never misordered against reliable ones.

use super::*;

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
