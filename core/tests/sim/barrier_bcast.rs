//! Barrier and broadcast under loss and failure.

use super::*;

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
