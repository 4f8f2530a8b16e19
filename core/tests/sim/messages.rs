//! Messages under loss: exactly once, in order, every size.

use super::*;

#[test]
fn test_patterns_tell_messages_apart() {
    assert_ne!(pattern(0, 1, 64), pattern(1, 1, 64));
    assert_ne!(pattern(0, 1, 64), pattern(0, 2, 64));
}

#[test]
fn flowctl_messages_survive_loss_duplication_reordering_corruption() {
    let seed = seed();
    let plans: Vec<(u16, u16, Vec<usize>)> = vec![
        (
            1,
            0,
            vec![
                0,
                1,
                20,
                1443,
                1444,
                1445,
                3000,
                65_536,
                1 << 20,
                16 << 20,
                7,
            ],
        ),
        (2, 0, vec![5, 100_000, 0, 2 << 20, 333]),
        (0, 1, vec![12_345, 0, 1]),
    ];
    let g = groups(3);
    let mut sc = SimConfig::lan(seed);
    sc.faults = lossy();
    let mut sim = Sim::new(3, sc, |i, dev, clock| {
        let mut check = Check::default();
        for (src, dst, sizes) in &plans {
            if *dst as usize == i {
                check.plan.insert(*src, sizes.clone());
            }
        }
        gamma(g, cfg(1, i as u16), 3, 4, dev, clock, check)
    });
    // Ports: node s sends from port 10 + dst; node d receives from s on port 20 + s.
    for (src, dst, sizes) in &plans {
        let biggest = *sizes.iter().max().unwrap();
        let n = &mut sim.nodes[*dst as usize];
        n.set_active_port(
            20 + src,
            *src,
            1,
            0,
            Some(on_message),
            Some(on_message),
            *src,
            GO_BACK,
            Some(leak(vec![0u8; biggest])),
        )
        .unwrap();
        sim.nodes[*src as usize]
            .set_passive_port(10 + dst, *dst, 1, 20 + src, 9, GO_BACK, None)
            .unwrap();
    }
    let mut handles = Vec::new();
    for (src, dst, sizes) in &plans {
        for (k, &len) in sizes.iter().enumerate() {
            let data: &'static [u8] = leak(pattern(*src, k, len));
            handles.push((
                *src,
                sim.nodes[*src as usize]
                    .isend_flowctl(10 + dst, data)
                    .unwrap(),
            ));
        }
    }
    let total: usize = plans.iter().map(|p| p.2.len()).sum();
    let r = sim.run_until(Instant::from_millis(60_000), |nodes, _| {
        nodes
            .iter()
            .map(|n| n.state().got.values().sum::<usize>())
            .sum::<usize>()
            >= total
    });
    if r.is_err() {
        for n in &sim.nodes {
            eprintln!(
                "got {:?} stats {:?} dev {:?}",
                n.state().got,
                n.engine().stats(),
                n.device().stats()
            );
        }
    }
    assert!(r.is_ok(), "seed {seed}: not all delivered by {:?}", r);
    // Senders learn of completion.
    let r = sim.run_until(Instant::from_millis(120_000), |nodes, _| {
        handles.iter().all(|(s, h)| {
            nodes[*s as usize].engine().send_status(*h)
                != Ok(volley_core::engine::SendStatus::Pending)
        })
    });
    assert!(r.is_ok(), "seed {seed}: sends never completed");
    for (s, h) in &handles {
        assert_eq!(sim.nodes[*s as usize].tsend(*h), Ok(true), "seed {seed}");
    }
    for (i, n) in sim.nodes.iter().enumerate() {
        assert!(
            n.state().errors.is_empty(),
            "seed {seed}: node {i}: {:?}",
            n.state().errors
        );
        for (src, count) in &n.state().got {
            assert_eq!(
                *count,
                n.state().plan[src].len(),
                "seed {seed}: node {i} from {src}: exactly once"
            );
        }
    }
    let stats: Vec<_> = sim.nodes.iter().map(|n| *n.engine().stats()).collect();
    let dev: Vec<_> = sim.nodes.iter().map(|n| n.device().stats()).collect();
    assert!(
        stats.iter().map(|s| s.rx_bad_crc).sum::<u64>() > 0,
        "seed {seed}: corruption was injected and caught"
    );
    assert!(
        stats.iter().map(|s| s.rx_duplicates).sum::<u64>() > 0,
        "seed {seed}"
    );
    assert!(
        stats.iter().map(|s| s.retransmits).sum::<u64>() > 0,
        "seed {seed}"
    );
    assert!(
        dev.iter().map(|d| d.reordered).sum::<u64>() > 0,
        "seed {seed}"
    );
    println!(
        "seed {seed}: delivered {total} messages by {}; stats {:?}",
        sim.now(),
        stats[0]
    );
}

/// Short messages sent one after another as the program sends them, each when the
/// one before has left: their copies are the channel's (no operation), and loss,
/// duplication, reordering and corruption still deliver each once, in order, both
/// ways at once.
#[test]
fn short_messages_kept_by_their_channel_survive_loss() {
    let seed = seed();
    let sizes: Vec<usize> = (0..300).map(|k| k % 33).collect();
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    sc.faults = lossy();
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        let mut check = Check::default();
        check.plan.insert(1 - i as u16, sizes.clone());
        gamma(g, cfg(1, i as u16), 2, 4, dev, clock, check)
    });
    for s in 0..2u16 {
        let d = 1 - s;
        sim.nodes[d as usize]
            .set_active_port(
                20 + s,
                s,
                1,
                0,
                Some(on_message),
                Some(on_message),
                s,
                GO_BACK,
                Some(leak(vec![0u8; 64])),
            )
            .unwrap();
        sim.nodes[s as usize]
            .set_passive_port(10 + d, d, 1, 20 + s, 9, GO_BACK, None)
            .unwrap();
    }
    let data: Vec<Vec<&'static [u8]>> = (0..2u16)
        .map(|s| {
            (0..sizes.len())
                .map(|k| &*leak(pattern(s, k, sizes[k])))
                .collect()
        })
        .collect();
    let mut next = [0usize; 2];
    let mut last: [Option<volley_core::engine::SendHandle>; 2] = [None; 2];
    let r = sim.run_until(Instant::from_millis(60_000), |nodes, _| {
        for s in 0..2usize {
            let d = 1 - s as u16;
            // The next message once the one before has left (copied sends
            // complete when on the wire).
            let ready = match last[s] {
                None => true,
                Some(h) => nodes[s].tsend(h) == Ok(true),
            };
            if ready && next[s] < sizes.len() {
                last[s] = Some(nodes[s].isend_flowctl(10 + d, data[s][next[s]]).unwrap());
                next[s] += 1;
            }
        }
        nodes
            .iter()
            .all(|n| n.state().got.values().sum::<usize>() == sizes.len())
    });
    for (i, n) in sim.nodes.iter().enumerate() {
        assert!(
            n.state().errors.is_empty(),
            "seed {seed}: node {i}: {:?}",
            n.state().errors
        );
    }
    assert!(r.is_ok(), "seed {seed}: not all delivered: {next:?}");
    for n in &sim.nodes {
        let st = n.engine().stats();
        assert!(st.tx_short > 100, "seed {seed}: {st:?}");
        assert!(st.retransmits > 0, "seed {seed}: {st:?}");
    }
}
