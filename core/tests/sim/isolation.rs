//! Groups and jobs that share a fabric stay apart.

use super::*;

#[derive(Default)]
struct Seen(Vec<Vec<u8>>);

fn on_seen(u: &mut Upcall<'_, '_, Seen>) {
    let d = u.data().to_vec();
    u.state().0.push(d);
}

#[test]
fn groups_and_jobs_are_isolated() {
    let seed = seed();
    // Group 1 at addresses 0..2; group 2 at 2..4. Address 4 claims to be group 2's
    // instance 0 but its table points group 2's instance 1 at address 0 (group 1).
    // Address 5 is group 1's instance 1 with another job key.
    let honest: &'static [Group<'static>] = leak(vec![
        Group {
            id: 1,
            members: Members::Range { first: 0, count: 2 },
        },
        Group {
            id: 2,
            members: Members::Range { first: 2, count: 2 },
        },
    ]);
    let rogue: &'static [Group<'static>] = leak(vec![Group {
        id: 2,
        members: Members::List(leak(vec![NodeAddr(4), NodeAddr(0)])),
    }]);
    let other_job: &'static [Group<'static>] = leak(vec![Group {
        id: 1,
        members: Members::List(leak(vec![NodeAddr(0), NodeAddr(5)])),
    }]);
    // Two jobs on one fabric: its devices cannot vouch for a frame's job, so no
    // compact headers (those carry none).
    let sim_cfg = SimConfig {
        names_senders: false,
        ..SimConfig::lan(seed)
    };
    let mut sim = Sim::new(6, sim_cfg, |i, dev, clock| match i {
        0 | 1 => gamma(honest, cfg(1, i as u16), 6, 4, dev, clock, Seen::default()),
        2 | 3 => gamma(
            honest,
            cfg(2, i as u16 - 2),
            6,
            4,
            dev,
            clock,
            Seen::default(),
        ),
        4 => gamma(rogue, cfg(2, 0), 6, 4, dev, clock, Seen::default()),
        _ => {
            let mut c = cfg(1, 1);
            c.job_key = 0x9999;
            gamma(other_job, c, 6, 4, dev, clock, Seen::default())
        }
    });
    sim.nodes[0]
        .set_active_port(
            1,
            1,
            1,
            1,
            Some(on_seen),
            Some(on_seen),
            0,
            GO_BACK,
            Some(leak(vec![0; 64])),
        )
        .unwrap();
    sim.nodes[1]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[2]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, None)
        .unwrap(); // inter-group: to group 1
    sim.nodes[4]
        .set_passive_port(1, 1, 2, 1, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[5]
        .set_passive_port(1, 0, 1, 1, 0, GO_BACK, None)
        .unwrap();
    for (n, msg) in [
        (1usize, &b"member"[..]),
        (2, b"other group, addressed right"),
        (4, b"rogue"),
        (5, b"other job"),
    ] {
        sim.nodes[n].send(1, msg).unwrap();
    }
    sim.run_until(Instant::from_millis(5), |_, _| false)
        .unwrap_err();
    let mut got = sim.nodes[0].state().0.clone();
    got.sort();
    assert_eq!(
        got,
        vec![b"member".to_vec(), b"other group, addressed right".to_vec()],
        "seed {seed}"
    );
    let s = sim.nodes[0].engine().stats();
    assert_eq!(s.rx_foreign_group, 1, "seed {seed}: {s:?}");
    assert_eq!(s.rx_foreign_job, 1, "seed {seed}: {s:?}");
}
