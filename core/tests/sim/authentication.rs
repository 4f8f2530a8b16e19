//! Frames of another job or forged ones are refused.

use super::*;

#[test]
fn frames_without_the_jobs_tag_never_reach_a_handler() {
    let seed = seed();
    let g = groups(3);
    let mut sc = SimConfig::lan(seed);
    sc.faults = lossy();
    let mut sim = Sim::new(3, sc, |i, dev, clock| {
        let mut c = cfg(1, i as u16);
        // Node 2 knows the job key and the layout but not the secret.
        c.auth_key = Some(if i == 2 {
            *b"not-the-secret!!"
        } else {
            *b"job-secret-bytes"
        });
        gamma(g, c, 3, 3, dev, clock, Quiet::default())
    });
    sim.nodes[1]
        .set_active_port(
            1,
            0,
            1,
            1,
            Some(on_quiet_msg),
            Some(on_quiet_err),
            1,
            GO_BACK,
            Some(leak(vec![0; 1 << 16])),
        )
        .unwrap();
    sim.nodes[1]
        .set_active_port(
            2,
            2,
            1,
            2,
            Some(on_quiet_msg),
            Some(on_quiet_err),
            2,
            GO_BACK,
            Some(leak(vec![0; 1 << 16])),
        )
        .unwrap();
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[2]
        .set_passive_port(2, 1, 1, 2, 1, GO_BACK, None)
        .unwrap();
    for k in 0..20usize {
        let m: &'static [u8] = leak(pattern(0, k, 3000));
        sim.nodes[0].isend_flowctl(1, m).unwrap();
        let f: &'static [u8] = leak(pattern(2, k, 3000));
        let _ = sim.nodes[2].isend(2, f);
        let _ = sim.nodes[2].isend_flowctl(2, f);
    }
    sim.run_until(Instant::from_millis(2_000), |n, _| n[1].state().got == 20)
        .unwrap_or_else(|e| panic!("seed {seed}: the job's own messages under loss: {e:?}"));
    let _ = sim.run_until(sim.now() + Duration::from_millis(200), |_, _| false);
    let st = sim.nodes[1].state();
    assert_eq!(st.got, 20, "seed {seed}: only the 20 authentic messages");
    assert!(
        st.errors.is_empty(),
        "seed {seed}: no FRAMELOST from forgeries: {:?}",
        st.errors
    );
    let s = sim.nodes[1].engine().stats();
    assert!(s.rx_unauthenticated > 20, "seed {seed}: {s:?}");
    assert_eq!(
        sim.nodes[1].engine().ports().semaphore(2).unwrap(),
        Default::default()
    );
}
