//! Failure judged by time: slow peers are not dead, dead ones are found.

use super::*;

fn quiet_pair(seed: u64, lossy_link: bool) -> Sim<SimGamma<'static, Quiet>> {
    quiet_pair_keyed(seed, lossy_link, None)
}

fn quiet_pair_keyed(
    seed: u64,
    lossy_link: bool,
    key: Option<[u8; 16]>,
) -> Sim<SimGamma<'static, Quiet>> {
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    if lossy_link {
        sc.faults = FaultConfig {
            loss: 0.2,
            ..FaultConfig::default()
        };
    }
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        // The default failure budget (30 s), not the tests' short one.
        let mut c = Config::new(0x1234, 1, i as u16);
        c.auth_key = key;
        SimGamma::init(
            c,
            g,
            storage(2, 2),
            handlers(),
            dev,
            clock,
            Quiet::default(),
        )
        .unwrap()
    });
    for (me, peer) in [(0u16, 1u16), (1, 0)] {
        sim.nodes[me as usize]
            .set_active_port(
                1,
                peer,
                1,
                1,
                Some(on_quiet_msg),
                Some(on_quiet_err),
                1,
                GO_BACK,
                Some(leak(vec![0; 1 << 16])),
            )
            .unwrap();
    }
    sim
}

#[test]
fn a_peer_silent_for_five_seconds_is_not_declared_dead() {
    let seed = seed();
    let mut sim = quiet_pair(seed, true);
    // Node 1 stops (a debugger, swapping) with a 64 KiB message in flight to it.
    sim.net.kill(1);
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![3u8; 1 << 16]))
        .unwrap();
    let resume = Instant::from_millis(5_000);
    let _ = sim.run_until(resume, |_, _| false);
    assert_eq!(
        sim.nodes[0].engine().send_status(h),
        Ok(volley_core::engine::SendStatus::Pending),
        "seed {seed}: still trying after 5 s of silence"
    );
    sim.net.revive(1);
    sim.run_until(resume + Duration::from_secs(5), |n, _| {
        n[1].state().got == 1
    })
    .unwrap_or_else(|e| panic!("seed {seed}: not delivered after the pause: {e:?}"));
    let _ = sim.run_until(sim.now() + Duration::from_millis(500), |_, _| false);
    assert_eq!(sim.nodes[0].wsend(h), Ok(()), "seed {seed}");
    assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
    assert_eq!(sim.nodes[0].engine().stats().peers_failed, 0);
}

#[test]
fn a_dead_peer_fails_by_the_time_budget() {
    let seed = seed();
    let mut sim = quiet_pair(seed, false);
    sim.net.kill(1);
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![3u8; 1 << 16]))
        .unwrap();
    let at = sim
        .run_until(Instant::from_millis(60_000), |n, _| {
            n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
        })
        .unwrap_or_else(|e| panic!("seed {seed}: never failed: {e:?}"));
    // 30 s of silence, give or take one capped back-off (200 ms).
    assert!(
        at >= Instant::from_millis(30_000) && at <= Instant::from_millis(30_500),
        "seed {seed}: failed at {at}"
    );
    assert_eq!(
        sim.nodes[0].wsend(h),
        Err(volley_core::engine::Error::SendFailure)
    );
}

/// A short reliable non-blocking send with nothing ahead of it leaves in the
/// `isend_flowctl` call, as a blocking one does: its handle reports it done at
/// once, and the receiver gets every one, in order; a long one waits for its ack.
#[test]
fn a_short_isend_leaves_in_the_call() {
    use volley_core::engine::SendStatus;
    let seed = seed();
    let mut sim = quiet_pair(seed, false);
    for k in 0..20u32 {
        let h = sim.nodes[0]
            .isend_flowctl(1, leak(vec![k as u8; 8]))
            .unwrap();
        // The first finds no channel open yet (and the device's size unknown
        // before a poll): it goes the general way.
        if k > 0 {
            assert_eq!(
                sim.nodes[0].engine().send_status(h),
                Ok(SendStatus::Done),
                "seed {seed}: message {k}"
            );
        }
        // Delivered and acked (its eager copy back: this pair has four); only
        // then waited for, as `wsend` here polls this node alone.
        sim.run_until(sim.now() + Duration::from_secs(1), |n, _| {
            n[1].state().got == k + 1 && n[0].engine().is_quiescent()
        })
        .unwrap_or_else(|e| panic!("seed {seed}: message {k}: {e:?}"));
        assert_eq!(sim.nodes[0].wsend(h), Ok(()), "seed {seed}");
    }
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![9u8; 1 << 16]))
        .unwrap();
    assert_eq!(
        sim.nodes[0].engine().send_status(h),
        Ok(SendStatus::Pending),
        "seed {seed}"
    );
    sim.run_until(sim.now() + Duration::from_secs(5), |n, _| {
        n[1].state().got == 21 && n[0].engine().is_quiescent()
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the long one: {e:?}"));
    assert_eq!(sim.nodes[0].wsend(h), Ok(()), "seed {seed}");
    assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
}

/// A short reliable non-blocking send is a copy, complete once it is on the wire
/// (as a blocking `send_flowctl` returns then): it is complete at once, and a
/// peer found dead afterwards is reported on the port's error handler, as for a
/// blocking send. A send to a peer already known dead fails at its `wsend`.
#[test]
fn a_short_isend_completes_on_the_wire_and_a_later_death_reaches_the_handler() {
    use volley_core::gamma::{ERR_SENDFAILURE, ISEND_COPY_MAX};
    let seed = seed();
    let mut sim = quiet_pair(seed, false);
    sim.net.kill(1);
    let h = sim.nodes[0]
        .isend_flowctl(1, leak(vec![3u8; ISEND_COPY_MAX]))
        .unwrap();
    let start = sim.now();
    // `tsend`, which does not wait (a `wsend` here would poll this node alone).
    assert_eq!(sim.nodes[0].tsend(h), Ok(true), "seed {seed}");
    sim.run_until(start + Duration::from_secs(60), |n, _| {
        !n[0].state().errors.is_empty()
    })
    .unwrap_or_else(|e| panic!("seed {seed}: no failure reported: {e:?}"));
    assert_eq!(
        sim.nodes[0].state().errors,
        vec![(1, ERR_SENDFAILURE)],
        "seed {seed}"
    );
    assert!(
        sim.now() - start <= Duration::from_millis(30_500),
        "seed {seed}"
    );
    // Known dead now: the next one fails, and its `wsend` says so.
    let h = sim.nodes[0].isend_flowctl(1, leak(vec![3u8; 64])).unwrap();
    assert_eq!(
        sim.nodes[0].wsend(h),
        Err(volley_core::engine::Error::SendFailure),
        "seed {seed}"
    );
}

/// A receiver that takes a message (its ack left to ride on a reply) and then
/// computes for longer than the peer timeout without calling in: with nothing but
/// silence to go by, its sender takes it for dead; where the device vouches for the
/// process (a host's beacon), the sender waits, the reply comes and nothing fails,
/// while a killed peer still fails by the budget.
#[test]
fn a_receiver_that_computes_is_waited_for_where_its_host_vouches_for_it() {
    let seed = seed();
    for vouch in [false, true] {
        let mut sim = quiet_pair(seed, false);
        if vouch {
            sim.net.vouch_for_the_living();
        }
        sim.nodes[0].send_flowctl(1, &[5u8; 8]).unwrap();
        sim.run_until(Instant::from_millis(100), |n, _| n[1].state().got == 1)
            .unwrap_or_else(|e| panic!("seed {seed}: not delivered: {e:?}"));
        // Node 1 computes for 40 s; node 0 waits, polling.
        common::only(&mut sim, 0, 40);
        let failed = sim.nodes[0].engine().stats().peers_failed;
        if !vouch {
            assert_eq!(failed, 1, "seed {seed}: silence past the timeout is death");
            continue;
        }
        assert_eq!(
            failed, 0,
            "seed {seed}: a vouched-for peer was declared dead"
        );
        assert!(
            sim.nodes[0].engine().stats().peers_vouched >= 1,
            "seed {seed}"
        );
        // Node 1 is back with its answer.
        sim.nodes[1].send_flowctl(1, &[6u8; 8]).unwrap();
        sim.run_until(sim.now() + Duration::from_secs(5), |n, _| {
            n[0].state().got == 1 && n[0].engine().is_quiescent() && n[1].engine().is_quiescent()
        })
        .unwrap_or_else(|e| panic!("seed {seed}: the answer did not come: {e:?}"));
        assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
        // A peer that is really gone is not vouched for. (A send longer than
        // `ISEND_COPY_MAX`, which the receiver's ack completes: its `wsend` gives
        // the failure.)
        sim.net.kill(1);
        let h = sim.nodes[0]
            .isend_flowctl(1, leak(vec![3u8; 1 << 16]))
            .unwrap();
        let start = sim.now();
        let at = sim
            .run_until(start + Duration::from_secs(60), |n, _| {
                n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
            })
            .unwrap_or_else(|e| panic!("seed {seed}: never failed: {e:?}"));
        assert!(
            at - start <= Duration::from_millis(30_500),
            "seed {seed}: failed after {}",
            at - start
        );
        assert_eq!(
            sim.nodes[0].wsend(h),
            Err(volley_core::engine::Error::SendFailure)
        );
    }
}

/// Beacons (what a host's helper sends while the program computes) keep a receiver
/// that computes past the peer timeout from being taken for dead, on a fabric
/// where the device vouches for no one; a beacon under another key is not heard.
#[test]
fn beacons_from_a_computing_receiver_keep_it_alive() {
    use volley_core::engine::{beacon_frame, BEACON_LEN};
    use volley_core::phy::{Device, TxToken};
    let seed = seed();
    for forged in [false, true] {
        let key = *b"beacon test key!";
        let mut sim = quiet_pair_keyed(seed, false, Some(key));
        sim.nodes[0].send_flowctl(1, &[5u8; 8]).unwrap();
        sim.run_until(Instant::from_millis(100), |n, _| n[1].state().got == 1)
            .unwrap_or_else(|e| panic!("seed {seed}: not delivered: {e:?}"));
        let mut cfg = Config::new(0x1234, 1, 1);
        cfg.auth_key = Some(if forged { *b"another job key!" } else { key });
        let before = *sim.nodes[0].engine().stats();
        // Node 1 computes for 40 s; its host sends a beacon every 5 s, each
        // numbered one more than the last.
        let mut port = sim.net.port(1);
        for k in 0..8 {
            let mut frame = [0u8; BEACON_LEN];
            let len = beacon_frame(&cfg, 1, 0, k + 1, &mut frame).unwrap();
            assert_eq!(len, BEACON_LEN);
            let now = sim.now();
            port.transmit(now, NodeAddr(0))
                .unwrap()
                .consume(len, |b| b.copy_from_slice(&frame[..len]));
            common::only(&mut sim, 0, 5);
        }
        let after = *sim.nodes[0].engine().stats();
        if forged {
            assert_eq!(
                after.peers_failed, 1,
                "seed {seed}: a forged beacon was heard"
            );
            assert!(after.rx_unauthenticated >= before.rx_unauthenticated + 8);
            continue;
        }
        assert_eq!(after.peers_failed, 0, "seed {seed}: taken for dead");
        assert_eq!(after.rx_unauthenticated, before.rx_unauthenticated);
        assert_eq!(
            after.delivered, before.delivered,
            "seed {seed}: a beacon delivers nothing"
        );
        sim.nodes[1].send_flowctl(1, &[6u8; 8]).unwrap();
        sim.run_until(sim.now() + Duration::from_secs(5), |n, _| {
            n[0].state().got == 1 && n[0].engine().is_quiescent()
        })
        .unwrap_or_else(|e| panic!("seed {seed}: the answer did not come: {e:?}"));
        assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
    }
}

/// Frames a dead peer sent while it lived, replayed to its sender (its acks, its
/// messages, its standalone acks and beacons, all under the job's key), are no
/// sign of life: only frames that say something new are. The sender still finds
/// the peer dead within its peer timeout and a little more.
#[test]
fn replayed_frames_keep_no_dead_peer_alive() {
    use volley_core::engine::{beacon_frame, BEACON_LEN};
    let seed = seed();
    let key = *b"replay test key!";
    let mut sim = quiet_pair_keyed(seed, false, Some(key));
    sim.net.tap(1, 0);
    // Traffic both ways: node 1's data frames, acks and standalone acks recorded.
    for k in 0..20u8 {
        sim.nodes[0].send_flowctl(1, &[k; 8]).unwrap();
        sim.nodes[1].send_flowctl(1, &[k; 8]).unwrap();
        let want = k as u32 + 1;
        sim.run_until(sim.now() + Duration::from_secs(1), |n, _| {
            n[0].state().got == want && n[1].state().got == want
        })
        .unwrap_or_else(|e| panic!("seed {seed}: message {k}: {e:?}"));
    }
    let _ = sim.run_until(sim.now() + Duration::from_millis(50), |n, _| {
        n.iter().all(|x| x.engine().is_quiescent())
    });
    let mut cfg1 = Config::new(0x1234, 1, 1);
    cfg1.auth_key = Some(key);
    let mut beacon = vec![0u8; BEACON_LEN];
    let n = beacon_frame(&cfg1, 1, 0, 7, &mut beacon).unwrap();
    beacon.truncate(n);
    let mut recorded = sim.net.recorded(1, 0);
    assert!(
        recorded.len() >= 20,
        "seed {seed}: {} frames",
        recorded.len()
    );
    recorded.push(beacon);
    // Node 1 dies; node 0 sends on and is fed the recordings every 300 ms.
    sim.net.kill(1);
    let died = sim.now();
    sim.nodes[0].send_flowctl(1, &[99; 8]).unwrap();
    let timeout = Config::new(0x1234, 1, 0).peer_timeout;
    let mut t = died;
    let give_up = died + timeout + timeout + timeout;
    while t < give_up && sim.nodes[0].engine().stats().peers_failed == 0 {
        for f in &recorded {
            sim.net.inject(1, 0, f.clone(), t);
        }
        t += Duration::from_millis(300);
        let _ = sim.run_until(t, |n, _| n[0].engine().stats().peers_failed > 0);
    }
    let st = sim.nodes[0].engine().stats();
    assert_eq!(st.peers_failed, 1, "seed {seed}: kept alive by replays");
    assert!(st.rx_duplicates > 0, "seed {seed}: the replays were heard");
    let took = sim.now().saturating_since(died);
    assert!(
        took <= timeout + Duration::from_millis(500),
        "seed {seed}: found dead after {took:?}"
    );
}

#[test]
fn a_rank_waiting_for_a_dead_sender_gets_an_error_not_a_hang() {
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        let mut c = cfg(1, i as u16);
        c.keepalive = Duration::from_millis(20);
        SimGamma::init(
            c,
            g,
            storage(2, 2),
            handlers(),
            dev,
            clock,
            Quiet::default(),
        )
        .unwrap()
    });
    sim.nodes[1]
        .set_active_port(
            1,
            0,
            1,
            1,
            None,
            Some(on_quiet_err),
            1,
            GO_BACK,
            Some(leak(vec![0; 64])),
        )
        .unwrap();
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[0].send_flowctl(1, b"one").unwrap();
    let _ = sim.run_until(Instant::from_millis(10), |_, _| false);
    assert_eq!(sim.nodes[1].wait(1, 1), Ok(0), "seed {seed}");
    sim.net.kill(0);
    // Node 1 waits for a second message that will never come: what `wait` does each
    // time round its loop (probe the silent peers of the semaphore), on virtual time.
    let start = sim.now();
    let mut dead_at = None;
    while sim.now() < start + Duration::from_secs(5) {
        let step = sim.now() + Duration::from_millis(5);
        let _ = sim.run_until(step, |_, _| false);
        let now = sim.now();
        sim.nodes[1].engine_mut().keepalive(now, 1);
        if sim.nodes[1]
            .engine()
            .ports()
            .semaphore(1)
            .unwrap()
            .peer_dead
        {
            dead_at = Some(now);
            break;
        }
    }
    let took = dead_at.unwrap_or_else(|| panic!("seed {seed}: the waiter never learns")) - start;
    // Probed within the keepalive, declared dead after the failure budget (100 ms here).
    assert!(
        took <= Duration::from_millis(200),
        "seed {seed}: took {took}"
    );
    let r = sim.nodes[1].wait(1, 1);
    assert_eq!(
        r,
        Err(volley_core::engine::Error::SendFailure),
        "seed {seed}"
    );
    assert_eq!(
        sim.nodes[1].state().errors,
        [(1, ERR_SENDFAILURE)],
        "seed {seed}: the error handler is told"
    );
}

/// Ranks that outnumber their host's cores wait their turn, both ends of a channel
/// at once: a sender whose message's frames were lost, and whose receiver then did
/// not run either, is not declared dead for the time neither ran (here 40 s,
/// past the 30 s peer timeout). Its timers are taken late; the lateness is not
/// counted as the peer's silence. A peer that is really gone is still found within
/// the peer timeout of time the sender does run.
#[test]
fn time_a_rank_did_not_run_is_no_peers_silence() {
    let seed = seed();
    for dead in [false, true] {
        let mut sim = quiet_pair(seed, false);
        // The frames are lost; the sender times out and resends for a second.
        sim.net.kill(1);
        let h = sim.nodes[0]
            .isend_flowctl(1, leak(vec![3u8; 1 << 16]))
            .unwrap();
        let _ = sim.run_until(Instant::from_millis(1_000), |_, _| false);
        assert!(
            sim.nodes[0].engine().stats().timeouts > 0,
            "seed {seed}: no timeout before the pause"
        );
        // Neither node runs for 40 s.
        let back = sim.now() + Duration::from_secs(40);
        sim.clock.set(back);
        if !dead {
            sim.net.revive(1);
            sim.run_until(back + Duration::from_secs(5), |n, _| n[1].state().got == 1)
                .unwrap_or_else(|e| panic!("seed {seed}: not delivered after the pause: {e:?}"));
            let _ = sim.run_until(sim.now() + Duration::from_millis(500), |_, _| false);
            let st = sim.nodes[0].engine().stats();
            assert_eq!(st.peers_failed, 0, "seed {seed}: taken for dead");
            assert!(
                st.resumed >= 1,
                "seed {seed}: the late timers were not seen"
            );
            assert_eq!(sim.nodes[0].wsend(h), Ok(()), "seed {seed}");
            assert!(sim.nodes[0].state().errors.is_empty(), "seed {seed}");
            continue;
        }
        // Gone for good: found once the sender has run for the peer timeout (the
        // second before the pause counts), not at its first poll after it.
        let at = sim
            .run_until(back + Duration::from_secs(60), |n, _| {
                n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
            })
            .unwrap_or_else(|e| panic!("seed {seed}: never failed: {e:?}"));
        let ran = at - back;
        assert!(
            ran >= Duration::from_millis(28_500) && ran <= Duration::from_millis(29_500),
            "seed {seed}: failed after {ran} of running"
        );
    }
}
