//! A peer that dies: sends to it fail, nobody hangs.

use super::*;

#[derive(Default)]
struct Errors(Vec<(u16, u8)>);

fn on_error(u: &mut Upcall<'_, '_, Errors>) {
    let e = (u.active_port(), u.errno().map_or(0, |e| e as u8));
    u.state().0.push(e);
}

#[test]
fn dead_peer_becomes_sendfailure_in_bounded_time() {
    let seed = seed();
    let g = groups(3);
    let mut sc = SimConfig::lan(seed);
    sc.faults = FaultConfig {
        loss: 0.1,
        ..FaultConfig::default()
    };
    let mut sim = Sim::new(3, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 3, 4, dev, clock, Errors::default())
    });
    sim.nodes[0]
        .set_active_port(1, 1, 1, 1, None, Some(on_error), 3, GO_BACK, None)
        .unwrap();
    sim.nodes[0]
        .set_passive_port(2, 2, 1, 1, 4, GO_BACK, None)
        .unwrap();
    sim.nodes[1]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, Some(leak(vec![0; 64])))
        .unwrap();
    sim.nodes[2]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, Some(leak(vec![0; 64])))
        .unwrap();
    // One message gets through while node 1 lives.
    let h = sim.nodes[0].isend_flowctl(1, b"alive").unwrap();
    sim.run_until(Instant::from_millis(100), |n, _| {
        n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
    })
    .expect("first send");
    assert_eq!(sim.nodes[0].tsend(h), Ok(true));
    sim.net.kill(1);
    sim.net.kill(2);
    let killed_at = sim.now();
    let h1 = sim.nodes[0].isend_flowctl(1, &[7; 5000]).unwrap();
    let h2 = sim.nodes[0].isend_flowctl(2, b"to a passive port").unwrap();
    let r = sim.run_until(Instant::from_millis(10_000), |n, _| {
        n[0].engine().send_status(h1) != Ok(volley_core::engine::SendStatus::Pending)
            && n[0].engine().send_status(h2) != Ok(volley_core::engine::SendStatus::Pending)
    });
    let at = r.unwrap_or_else(|e| panic!("seed {seed}: no failure reported: {e:?}"));
    let took = at - killed_at;
    // 12 retries, back-off from 200 us capped at 20 ms: under 0.2 s of virtual time.
    assert!(
        took < Duration::from_millis(200),
        "seed {seed}: took {took}"
    );
    assert_eq!(
        sim.nodes[0].tsend(h1),
        Err(volley_core::engine::Error::SendFailure)
    );
    assert_eq!(
        sim.nodes[0].tsend(h2),
        Err(volley_core::engine::Error::SendFailure)
    );
    assert_eq!(
        sim.nodes[0].state().0,
        vec![(1, ERR_SENDFAILURE)],
        "seed {seed}: error handler of port 1"
    );
    // The passive port's failure counts on its semaphore: wait reports it.
    sim.nodes[0].signal(4).unwrap();
    assert_eq!(sim.nodes[0].wait(4, 1), Ok(-1));
    println!("seed {seed}: SENDFAILURE {took} after the peer died");
}
