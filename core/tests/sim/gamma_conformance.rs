//! GAMMA's semantics as its documents state them: ports, buffers, handlers, flow control.

use super::*;

#[test]
fn best_effort_multi_frame_messages_arrive_whole_on_a_lossless_fabric() {
    let seed = seed();
    let mut sim = be_pair(seed, FaultConfig::default());
    let n = 40u32;
    for k in 0..n {
        let body = pattern(1, k as usize, be_len(k));
        // Blocking best-effort send and send_2p, alternately.
        if k % 2 == 0 {
            let mut m = k.to_be_bytes().to_vec();
            m.extend_from_slice(&body);
            sim.nodes[0].send(1, &m).unwrap();
        } else {
            sim.nodes[0].send_2p(1, &k.to_be_bytes(), &body).unwrap();
        }
        let until = sim.now() + Duration::from_micros(200);
        let _ = sim.run_until(until, |_, _| false);
    }
    let st = sim.nodes[1].state();
    assert!(st.wrong.is_empty(), "seed {seed}: {:?}", st.wrong);
    assert_eq!(
        st.lost, 0,
        "seed {seed}: nothing is lost on a lossless fabric"
    );
    assert_eq!(st.intact, (0..n).collect::<Vec<_>>(), "seed {seed}");
    // Under odd seeds the fabric names senders: the one-frame messages went compact.
    let compact = sim.nodes[1].engine().stats().rx_compact;
    assert_eq!(compact > 0, seed & 1 == 1, "seed {seed}: {compact} compact");
}

#[test]
fn best_effort_under_loss_accounts_for_every_message() {
    let seed = seed();
    let mut sim = be_pair(
        seed,
        FaultConfig {
            loss: 0.03,
            ..FaultConfig::default()
        },
    );
    let n = 200u32;
    be_stream(&mut sim, seed, n, 200);
    let st = sim.nodes[1].state();
    assert!(st.wrong.is_empty(), "seed {seed}: {:?}", st.wrong);
    let seen = st.intact.len() as u32 + st.lost;
    // Each message is delivered whole or reported FRAMELOST once; only a run of
    // messages vanishing at the very end (nothing after them) goes unreported.
    assert!(
        seen <= n && seen + 3 >= n,
        "seed {seed}: {} intact + {} lost of {n}",
        st.intact.len(),
        st.lost
    );
    assert!(st.intact.len() > n as usize / 2, "seed {seed}");
}

#[derive(Default)]
struct Closed {
    errors: Vec<(u16, u8)>,
    delivered: u32,
}

fn on_closed_err(u: &mut Upcall<'_, '_, Closed>) {
    let e = (u.active_port(), u.errno().map_or(0, |e| e as u8));
    u.state().errors.push(e);
}

fn on_closed_msg(u: &mut Upcall<'_, '_, Closed>) {
    u.state().delivered += 1;
}

#[test]
fn a_reliable_send_to_an_unbound_port_fails_in_bounded_time() {
    use volley_core::engine::Error;
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        let mut c = cfg(1, i as u16);
        c.unbound_grace = Duration::from_millis(50);
        let s = storage(2, 2);
        SimGamma::init(c, g, s, handlers(), dev, clock, Closed::default()).unwrap()
    });
    // Reserved ports are refused as destinations.
    for reserved in [1023, 1024] {
        assert_eq!(
            sim.nodes[0].set_passive_port(1, 1, 1, reserved, 0, GO_BACK, None),
            Err(Error::ReservedPort)
        );
    }
    sim.nodes[0]
        .set_active_port(1, 1, 1, 7, None, Some(on_closed_err), 3, GO_BACK, None)
        .unwrap();
    // Node 1 never binds port 7: a large (non-eager) send fails with PortClosed...
    let big: &'static [u8] = leak(vec![7u8; 64 * 1024]);
    let h = sim.nodes[0].isend_flowctl(1, big).unwrap();
    let at = sim
        .run_until(Instant::from_millis(5000), |n, _| {
            n[0].engine().send_status(h) != Ok(volley_core::engine::SendStatus::Pending)
        })
        .unwrap_or_else(|e| panic!("seed {seed}: send to an unbound port hangs: {e:?}"));
    assert!(
        at >= Instant::from_millis(50),
        "seed {seed}: not before the grace"
    );
    assert_eq!(sim.nodes[0].wsend(h), Err(Error::PortClosed), "seed {seed}");
    assert_eq!(
        sim.nodes[0].state().errors,
        [(1, ERR_SENDFAILURE)],
        "seed {seed}: the error handler sees SENDFAILURE"
    );
    assert_eq!(sim.nodes[1].engine().stats().rx_rejected, 1);
    // ... and an eager one is reported to the error handler.
    sim.nodes[0].send_flowctl(1, b"small").unwrap();
    let start = sim.now();
    sim.run_until(start + Duration::from_secs(5), |n, _| {
        n[0].state().errors.len() == 2
    })
    .unwrap_or_else(|e| panic!("seed {seed}: eager send to an unbound port: {e:?}"));
    // The channel still works: bind the port late, within the grace, and it arrives.
    sim.nodes[0].send_flowctl(1, b"late").unwrap();
    let until = sim.now() + Duration::from_millis(20);
    let _ = sim.run_until(until, |_, _| false);
    sim.nodes[1]
        .set_active_port(
            7,
            0,
            1,
            1,
            Some(on_closed_msg),
            None,
            2,
            GO_BACK,
            Some(leak(vec![0; 16])),
        )
        .unwrap();
    sim.run_until(sim.now() + Duration::from_secs(1), |n, _| {
        n[1].state().delivered == 1
    })
    .unwrap_or_else(|e| panic!("seed {seed}: a port bound late gets its message: {e:?}"));
    assert_eq!(sim.nodes[1].buffer(7).map(|b| &b[..4]), Some(&b"late"[..]));
    assert_eq!(sim.nodes[0].state().errors.len(), 2, "seed {seed}");
}

#[test]
fn best_effort_to_an_unbound_port_touches_no_semaphore() {
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, ())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 9, 0, GO_BACK, None)
        .unwrap();
    for _ in 0..5 {
        sim.nodes[0].send(1, &[1u8; 3000]).unwrap();
    }
    let _ = sim.run_until(Instant::from_millis(10), |_, _| false);
    let rx = sim.nodes[1].engine();
    assert!(rx.stats().rx_dropped >= 5, "seed {seed}");
    for sem in [0u16, 9] {
        assert_eq!(
            rx.ports().semaphore(sem).unwrap().errors,
            0,
            "seed {seed}: sem {sem}"
        );
        assert_eq!(
            rx.ports().semaphore(sem).unwrap().count,
            0,
            "seed {seed}: sem {sem}"
        );
    }
}

#[test]
fn the_first_send_uses_the_device_mtu() {
    let seed = seed();
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    sc.mtu = 9000;
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, ())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 0, GO_BACK, None)
        .unwrap();
    // Nothing polled yet: the send frames its 8000 bytes for a 9000-byte MTU at once.
    let h = sim.nodes[0].isend(1, leak(vec![5u8; 8000])).unwrap();
    assert_eq!(sim.nodes[0].engine().stats().tx_frames, 1, "seed {seed}");
    assert_eq!(sim.nodes[0].tsend(h), Ok(true));
}

// Handlers that send and re-post owned buffers (the Pstream pattern).

#[derive(Default)]
struct Relay {
    spare: Vec<Vec<u8>>,
    full: std::collections::VecDeque<(Vec<u8>, usize)>,
    echoed: u32,
    errors: u32,
}

/// Node 1: keeps each message (swapping in a spare buffer) and echoes it back from
/// inside the handler.
fn on_relay(u: &mut Upcall<'_, '_, Relay>) {
    let len = u.len();
    let echo = u.data().to_vec();
    let port = u.active_port();
    if u.send_flowctl(port, &[], &echo).is_err() {
        u.state().errors += 1;
    }
    let next = u.state().spare.pop().unwrap_or_else(|| vec![0; 4096]);
    let prev = u.post_recv(port, next).unwrap();
    let prev = prev.and_then(|b| b.into_owned()).unwrap().into_vec();
    u.state().full.push_back((prev, len));
    u.state().echoed += 1;
}

fn on_echo(u: &mut Upcall<'_, '_, Relay>) {
    u.state().echoed += 1;
}

#[test]
fn handlers_send_and_repost_owned_buffers() {
    let seed = seed();
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    sc.faults = FaultConfig {
        loss: 0.05,
        ..FaultConfig::default()
    };
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, Relay::default())
    });
    sim.nodes[0]
        .set_active_port(1, 1, 1, 1, Some(on_echo), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[0].post_recv(1, vec![0u8; 4096]).unwrap();
    sim.nodes[1]
        .set_active_port(1, 0, 1, 1, Some(on_relay), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[1].post_recv(1, vec![0u8; 4096]).unwrap();
    sim.nodes[1].state_mut().spare.push(vec![0; 4096]);
    let n = 50usize;
    for k in 0..n {
        let m = pattern(0, k, 100 + 37 * k);
        sim.nodes[0].send_flowctl(1, &m).unwrap();
        let want = k as u32 + 1;
        sim.run_until(sim.now() + Duration::from_secs(2), |nodes, _| {
            nodes[0].state().echoed == want
        })
        .unwrap_or_else(|e| panic!("seed {seed}: echo {k}: {e:?}"));
        assert_eq!(sim.nodes[0].buffer(1).map(|b| &b[..m.len()]), Some(&m[..]));
        // The main program reads the message the handler swapped out, then recycles it.
        let (buf, len) = sim.nodes[1].state_mut().full.pop_front().unwrap();
        assert_eq!(&buf[..len], &m[..], "seed {seed}: message {k}");
        sim.nodes[1].state_mut().spare.push(buf);
    }
    assert_eq!(sim.nodes[1].state().errors, 0, "seed {seed}");
}

/// Node 1's handler tries to answer with one byte more than a handler may send.
fn on_too_long(u: &mut Upcall<'_, '_, Vec<Result<usize, volley_core::engine::Error>>>) {
    let port = u.active_port();
    let big = vec![7u8; volley_core::engine::EAGER_MAX + 1];
    let r = u.send_flowctl(port, &[], &big);
    u.state().push(r);
    let r = u.send(port, &[], &big[..16]);
    u.state().push(r);
}

/// A handler's send over 16 KiB is refused with an error that names that limit,
/// and the handler's next, shorter send still goes.
#[test]
fn a_handlers_send_over_the_limit_names_the_limit() {
    use volley_core::engine::{Error, EAGER_MAX};
    let seed = seed();
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, Vec::new())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 1, GO_BACK, Some(leak(vec![0; 64])))
        .unwrap();
    sim.nodes[1]
        .set_active_port(1, 0, 1, 1, Some(on_too_long), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[1].post_recv(1, vec![0u8; 64]).unwrap();
    sim.nodes[0].send_flowctl(1, b"ping").unwrap();
    sim.run_until(sim.now() + Duration::from_secs(2), |nodes, _| {
        nodes[0]
            .engine()
            .ports()
            .semaphore(1)
            .is_ok_and(|s| s.count == 1)
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the short answer never came: {e:?}"));
    let got = sim.nodes[1].state();
    assert_eq!(
        got[..],
        [Err(Error::LongerThan(EAGER_MAX)), Ok(16)],
        "seed {seed}"
    );
    let text = Error::LongerThan(EAGER_MAX).to_string();
    assert!(text.contains("16384 bytes"), "{text}");
}

// Handlers' replies leave when the handler returns, in order.

#[derive(Default)]
struct Replies {
    /// Node 1: whether its handler answers best-effort.
    best_effort: bool,
    /// Node 1: how long the middle one of its three answers is (by ping).
    middle: Vec<usize>,
    /// Node 0: what came back, in order.
    got: Vec<Vec<u8>>,
    errors: u32,
}

/// Node 1: answers ping `k` with three messages from inside its handler: a short
/// one, one `middle[k]` bytes long, another short one.
fn on_ping(u: &mut Upcall<'_, '_, Replies>) {
    let k = u.data()[0] as usize;
    let port = u.active_port();
    let middle = u.state().middle.get(k).copied().unwrap_or(8);
    for (i, len) in [8, middle, 8].into_iter().enumerate() {
        let m = pattern(1, 3 * k + i, len);
        let r = if u.state().best_effort {
            u.send(port, &[], &m)
        } else {
            u.send_flowctl(port, &[], &m)
        };
        if r.is_err() {
            u.state().errors += 1;
        }
    }
}

fn on_reply(u: &mut Upcall<'_, '_, Replies>) {
    let m = u.data().to_vec();
    u.state().got.push(m);
}

/// A pair whose node 1 answers node 0's pings from its handler (`on_ping`).
fn replies_pair(
    sc: SimConfig,
    best_effort: bool,
    middle: Vec<usize>,
) -> Sim<SimGamma<'static, Replies>> {
    let g = groups(2);
    // Eager buffers for a ping's three answers and the three before them, whose
    // ack the ping carries (taken at the poll after its handler).
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        let st = sized(2, 2, 256, 8, 16);
        SimGamma::init(
            cfg(1, i as u16),
            g,
            st,
            handlers(),
            dev,
            clock,
            Replies::default(),
        )
        .unwrap()
    });
    sim.nodes[0]
        .set_active_port(1, 1, 1, 1, Some(on_reply), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[0].post_recv(1, vec![0u8; 8192]).unwrap();
    sim.nodes[1]
        .set_active_port(1, 0, 1, 1, Some(on_ping), None, 1, GO_BACK, None)
        .unwrap();
    sim.nodes[1].post_recv(1, vec![0u8; 64]).unwrap();
    sim.nodes[1].state_mut().best_effort = best_effort;
    sim.nodes[1].state_mut().middle = middle;
    sim
}

/// Pings `0..n` one at a time; checks the three answers to each, in order.
fn ping_and_check(sim: &mut Sim<SimGamma<'static, Replies>>, n: usize, seed: u64) {
    for k in 0..n {
        sim.nodes[0].send_flowctl(1, &[k as u8]).unwrap();
        let want = 3 * (k + 1);
        sim.run_until(sim.now() + Duration::from_secs(5), |nodes, _| {
            nodes[0].state().got.len() >= want
        })
        .unwrap_or_else(|e| panic!("seed {seed}: answers to ping {k}: {e:?}"));
    }
    // Anything late, twice or out of order would show here.
    sim.run_until(sim.now() + Duration::from_millis(200), |_, _| false)
        .ok();
    let middle = sim.nodes[1].state().middle.clone();
    let got = &sim.nodes[0].state().got;
    assert_eq!(got.len(), 3 * n, "seed {seed}");
    for (j, m) in got.iter().enumerate() {
        let (k, i) = (j / 3, j % 3);
        let len = if i == 1 {
            middle.get(k).copied().unwrap_or(8)
        } else {
            8
        };
        assert_eq!(
            m,
            &pattern(1, j, len),
            "seed {seed}: answer {i} to ping {k}"
        );
    }
    assert_eq!(sim.nodes[1].state().errors, 0, "seed {seed}");
}

#[test]
fn handlers_answers_leave_when_the_handler_returns() {
    let seed = seed();
    // Lossless, short answers: every one leaves at once, best-effort or reliable.
    for best_effort in [false, true] {
        let mut sim = replies_pair(SimConfig::lan(seed), best_effort, vec![8; 20]);
        ping_and_check(&mut sim, 20, seed);
        assert_eq!(
            sim.nodes[1].engine().stats().tx_queued_at_once,
            60,
            "seed {seed}, best effort {best_effort}"
        );
    }
    // A long middle answer (over 1 KiB, or over a frame) waits for the transmit
    // pass, and the short one after it behind it: order kept, under loss too.
    let middle: Vec<usize> = (0..30).map(|k| [8, 1500, 5000, 20][k % 4]).collect();
    let mut sc = SimConfig::lan(seed);
    sc.faults = FaultConfig {
        loss: 0.05,
        ..FaultConfig::default()
    };
    let mut sim = replies_pair(sc, false, middle);
    ping_and_check(&mut sim, 30, seed);
    let at_once = sim.nodes[1].engine().stats().tx_queued_at_once;
    assert!(at_once < 90, "seed {seed}: {at_once} of 90 at once");
}
