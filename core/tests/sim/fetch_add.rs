//! Remote fetch-and-add under loss.

use super::*;

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
