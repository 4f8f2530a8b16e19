//! Senders that die in the middle of a message.

use super::*;
use volley_core::engine::{Body, SendRequest};

/// What reached a node's port 5: source node, length, errno (a dead peer's
/// `SendFailure`, which every port bound to it gets, left out).
type Got = Vec<(u16, usize, Option<volley_core::gamma::Errno>)>;

fn on_got(u: &mut Upcall<'_, '_, Got>) {
    let rec = (u.source().node, u.len(), u.errno());
    if rec.2 != Some(volley_core::gamma::Errno::SendFailure) {
        u.state().push(rec);
    }
}

/// `n` nodes whose port 5 takes messages from anyone in the group (recorded in
/// `Got`) and sends to port 5 of `dest(i)`; each has `eager` eager buffers.
fn port5_sim(
    seed: u64,
    n: u16,
    dest: impl Fn(u16) -> u16,
    eager: usize,
) -> Sim<SimGamma<'static, Got>> {
    let g = groups(n);
    let mut sim = Sim::new(n as usize, SimConfig::lan(seed), |i, dev, clock| {
        let store = sized(n as usize, n as usize, 256, 8, eager);
        SimGamma::init(
            cfg(1, i as u16),
            g,
            store,
            handlers(),
            dev,
            clock,
            Got::new(),
        )
        .unwrap()
    });
    for (i, node) in sim.nodes.iter_mut().enumerate() {
        let buf = Some(leak(vec![0; 512 * 1024]));
        let h = Some(on_got as fn(&mut Upcall<'_, '_, Got>));
        node.set_active_port(5, dest(i as u16), 1, 5, h, h, 0, GO_BACK, buf)
            .unwrap();
    }
    sim
}

/// A sender that dies half-way through a long message would leave it holding
/// the receiver's port for good, and every other sender's message to that port
/// refused. The receiver probes the silent sender; once it is declared dead the
/// message is handed over as lost, and the next sender's message lands.
#[test]
fn a_message_whose_sender_died_half_way_frees_its_port() {
    let seed = seed() ^ 0x0d;
    let mut sim = port5_sim(seed, 3, |i| if i == 2 { 0 } else { 2 }, 4);
    let long: &'static [u8] = leak(vec![7; 400_000]);
    sim.nodes[0].isend_flowctl(5, long).unwrap();
    sim.run_until(Instant::from_millis(1_000), |nodes, _| {
        nodes[2].engine().stats().rx_frames > 20
    })
    .unwrap_or_else(|e| panic!("seed {seed}: no frame came: {e:?}"));
    sim.net.kill(0);
    sim.nodes[1].send_flowctl(5, b"after").unwrap();
    sim.run_until(sim.now() + Duration::from_secs(10), |nodes, _| {
        nodes[2].state().iter().any(|m| m.0 == 1)
    })
    .unwrap_or_else(|e| panic!("seed {seed}: the port stayed busy: {e:?}"));
    // The lost message's length is what had come of it.
    let got = sim.nodes[2].state();
    assert_eq!(got.len(), 2, "seed {seed}: {got:?}");
    let (src, len, errno) = got[0];
    assert_eq!(
        (src, errno),
        (0, Some(volley_core::gamma::Errno::FrameLost))
    );
    assert!(len > 0 && len < long.len(), "seed {seed}: {got:?}");
    assert_eq!(got[1], (1, 5, None), "seed {seed}");
    assert_eq!(sim.nodes[2].engine().stats().rx_orphaned, 1, "seed {seed}");
}

/// A root that dies while a long broadcast goes down the tree chunk by chunk
/// leaves it half-stored at a relay (node 1 of 0 -> 1, 2; 1 -> 3) and at the
/// relay's child. The relay stops passing it on and tells its child, and every
/// survivor's port takes the next broadcast, from another root. The relay's
/// buffers all come back.
#[test]
fn a_long_broadcast_whose_root_died_half_way_is_dropped_down_the_tree() {
    let seed = seed() ^ 0x0e;
    // 48 buffers: a relay's ring holds 256 KiB, so 200,000 bytes go down the tree.
    let mut sim = port5_sim(seed, 4, |_| BROADCAST, 48);
    let long: &'static [u8] = leak(vec![7; 200_000]);
    sim.nodes[0].isend_flowctl(5, long).unwrap();
    sim.run_until(Instant::from_millis(1_000), |nodes, _| {
        nodes[3].engine().stats().rx_frames > 20
    })
    .unwrap_or_else(|e| panic!("seed {seed}: nothing reached node 3: {e:?}"));
    sim.net.kill(0);
    sim.nodes[2].send_flowctl(5, b"after").unwrap();
    sim.run_until(sim.now() + Duration::from_secs(10), |nodes, _| {
        [1, 3]
            .iter()
            .all(|&i| nodes[i].state().iter().any(|m| m.0 == 2))
    })
    .unwrap_or_else(|e| panic!("seed {seed}: a port stayed busy: {e:?}"));
    let lost = Some(volley_core::gamma::Errno::FrameLost);
    for i in [1, 3] {
        let got = sim.nodes[i].state();
        assert_eq!(got.len(), 2, "seed {seed}: node {i}: {got:?}");
        assert_eq!((got[0].0, got[0].2), (0, lost), "seed {seed}: node {i}");
        assert!(got[0].1 < long.len(), "seed {seed}: node {i}: {got:?}");
        assert_eq!(got[1], (2, 5, None), "seed {seed}: node {i}");
        assert_eq!(sim.nodes[i].engine().stats().rx_orphaned, 1, "seed {seed}");
    }
    // Node 3 had the long one from relay 1 (told by its ABORT); node 2's goes to
    // node 3 through dead node 0 (root 2's tree: 2 -> 0, 1; 0 -> 3), so node 2
    // sends it to node 3 itself.
    assert_eq!(sim.nodes[2].engine().stats().rerouted, 1, "seed {seed}");
    assert_eq!(sim.nodes[1].engine().eager_free(), 48, "seed {seed}");
}

/// `n` 8-byte reliable messages from node 0 to node 1 (port 5), each checked and
/// exactly once, in order, with at most 16 in flight (eager copies), on a LAN whose
/// links lose `bursts` (`(every, burst)`) if given; the virtual time it took.
fn stream_through_bursts(seed: u64, n: usize, bursts: Option<(u32, u32)>) -> Duration {
    let g = groups(2);
    let mut sim = Sim::new(2, SimConfig::lan(seed), |i, dev, clock| {
        let mut st = Check::default();
        st.plan.insert(0, vec![8; n]);
        let store = sized(2, 2, 64, 8, 16);
        // Hosted defaults: 30 s to die, timeouts from 0.5 ms doubling to 200 ms.
        let c = Config::new(0x1234, 1, i as u16);
        SimGamma::init(c, g, store, handlers(), dev, clock, st).unwrap()
    });
    sim.nodes[0]
        .set_passive_port(5, 1, 1, 5, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[1]
        .set_active_port(
            5,
            0,
            1,
            5,
            Some(on_message),
            None,
            0,
            GO_BACK,
            Some(leak(vec![0; 64])),
        )
        .unwrap();
    if let Some((every, burst)) = bursts {
        sim.net.drop_bursts(every, burst);
    }
    let start = sim.now();
    let mut sent = 0;
    let limit = start + Duration::from_secs(600);
    while sim.nodes[1].state().got.get(&0).copied().unwrap_or(0) < n {
        while sent < n {
            let body = pattern(0, sent, 8);
            match sim.nodes[0].engine_mut().start_send(SendRequest {
                port: 5,
                head: &[],
                body: Body::Copied(&body),
                reliable: true,
            }) {
                Ok(h) => {
                    sim.nodes[0].engine_mut().detach(h).unwrap();
                    sent += 1;
                }
                Err(volley_core::engine::Error::NoResources) => break,
                Err(e) => panic!("seed {seed}: send {sent}: {e:?}"),
            }
        }
        let target = sim.nodes[1].state().got.get(&0).copied().unwrap_or(0) + 1;
        sim.run_until(sim.now() + Duration::from_millis(50), |nodes, _| {
            nodes[1].state().got.get(&0).copied().unwrap_or(0) >= target
        })
        .ok();
        assert!(
            sim.now() < limit,
            "seed {seed}: {bursts:?}: stuck at {sent} sent"
        );
    }
    let st = sim.nodes[1].state();
    assert!(st.errors.is_empty(), "seed {seed}: {:?}", st.errors);
    assert_eq!(st.got.get(&0), Some(&n), "seed {seed}: exactly once");
    assert_eq!(sim.nodes[0].engine().stats().peers_failed, 0, "seed {seed}");
    sim.now().saturating_since(start)
}

/// Bursts of 50 consecutive frames lost of every 500, both ways, and of 20 of
/// every 100: every message still arrives exactly once and in order, and the
/// sender never takes its live peer for dead (how fast the bursts are recovered
/// is `cargo bench -p volley-cli --bench burst_loss`'s, on `udp`).
#[test]
fn bursts_of_loss_both_ways_deliver_every_message_once() {
    let seed = seed();
    for bursts in [None, Some((500, 50)), Some((100, 20))] {
        let took = stream_through_bursts(seed, 2000, bursts);
        println!("seed {seed}: 2000 messages, bursts {bursts:?}: {took:?} (virtual)");
    }
}
