//! Seeded simulations of many engines over a faulty fabric. Every failure message
//! carries the seed; rerun one with `VOLLEY_SEED=<seed> cargo test -p volley-core --test sim`.

use std::collections::HashMap;

use volley_core::engine::{Capacity, Config, Group, Members, Storage};
use volley_core::gamma::{PortHandlers, Upcall, BROADCAST, ERR_SENDFAILURE, GO_BACK, PORTS};
use volley_core::phy::FaultConfig;
use volley_core::sim::{Sim, SimClock, SimConfig, SimDevice, SimGamma};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;

#[path = "../common/mod.rs"]
mod common;
use common::groups;

fn seed() -> u64 {
    std::env::var("VOLLEY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0001)
}

fn lossy() -> FaultConfig {
    common::faults(0.20, 0.05, 0.05, 0.01)
}

fn cfg(group: u16, node: u16) -> Config {
    let mut c = Config::new(0x1234, group, node);
    c.rto_initial = Duration::from_micros(200);
    c.rto_max = Duration::from_millis(20);
    c.peer_timeout = Duration::from_millis(100);
    c.ack_delay = Duration::from_micros(10);
    c
}

/// `c` for a test in which nobody dies under heavy loss. A member that refuses a
/// sender's frames for a while (its buffers full) is probed once per `rto_max`, and
/// declared dead when every probe and answer of `peer_timeout` is lost: at 100 ms,
/// five probes, which 20% loss each way defeats about once in 1,500 such waits
/// (found by seeds; `VOLLEY_PEER_TIMEOUT` is 30 s, 150 probes, in a hosted rank).
fn patient(mut c: Config) -> Config {
    c.peer_timeout = Duration::from_secs(2);
    c
}

fn leak<T>(v: Vec<T>) -> &'static mut [T] {
    Vec::leak(v)
}

fn storage(fabric: usize, channels: usize) -> Storage<'static> {
    sized(fabric, channels, 256, 8, 4)
}

/// Storage with every table sized by the caller (the scaling tests keep them small
/// at 1024 nodes).
fn sized(
    fabric: usize,
    channels: usize,
    ops: usize,
    assemblies: usize,
    eager: usize,
) -> Storage<'static> {
    Storage::with_capacity(Capacity {
        ports: PORTS,
        channels,
        fabric_nodes: fabric,
        ops,
        assemblies,
        eager,
    })
}

/// An empty handler table for every GAMMA port.
fn handlers<S>() -> managed::ManagedSlice<'static, PortHandlers<'static, S>> {
    let mut v = Vec::new();
    v.resize_with(PORTS, || PortHandlers::EMPTY);
    v.into()
}

fn gamma<S>(
    groups: &'static [Group<'static>],
    c: Config,
    fabric: usize,
    channels: usize,
    dev: SimDevice,
    clock: SimClock,
    state: S,
) -> SimGamma<'static, S> {
    SimGamma::init(
        c,
        groups,
        storage(fabric, channels),
        handlers(),
        dev,
        clock,
        state,
    )
    .unwrap()
}

mod authentication;
#[derive(Default)]
struct Bar {
    entered: Option<Instant>,
    left: Option<Instant>,
    got: Vec<Vec<u8>>,
}

fn on_bcast(u: &mut Upcall<'_, '_, Bar>) {
    let d = u.data().to_vec();
    u.state().got.push(d);
}

/// Node 0 sends best-effort messages to node 1's port 1, checked by `on_be`.
fn be_pair(seed: u64, faults: FaultConfig) -> Sim<SimGamma<'static, BeCheck>> {
    let g = groups(2);
    let mut sc = SimConfig::lan(seed);
    sc.faults = faults;
    let mut sim = Sim::new(2, sc, |i, dev, clock| {
        gamma(g, cfg(1, i as u16), 2, 2, dev, clock, BeCheck::default())
    });
    sim.nodes[0]
        .set_passive_port(1, 1, 1, 1, 0, GO_BACK, None)
        .unwrap();
    sim.nodes[1]
        .set_active_port(
            1,
            0,
            1,
            1,
            Some(on_be),
            Some(on_be),
            0,
            GO_BACK,
            Some(leak(vec![0; 40_000])),
        )
        .unwrap();
    sim
}

/// Sends messages `0..n` (sizes from `be_len`) `gap_us` apart, then lets them land.
fn be_stream(sim: &mut Sim<SimGamma<'static, BeCheck>>, seed: u64, n: u32, gap_us: u64) {
    for k in 0..n {
        let body: &'static [u8] = leak(pattern(1, k as usize, be_len(k)));
        let h = sim.nodes[0].isend_2p(1, &k.to_be_bytes(), body).unwrap();
        // Best effort completes once handed to the device.
        assert_eq!(sim.nodes[0].tsend(h), Ok(true), "seed {seed}");
        let until = sim.now() + Duration::from_micros(gap_us);
        let _ = sim.run_until(until, |_, _| false);
    }
    let _ = sim.run_until(sim.now() + Duration::from_millis(500), |_, _| false);
}

fn be_len(k: u32) -> usize {
    [10, 1400, 5000, 30_000][k as usize % 4]
}

#[derive(Default)]
struct Quiet {
    errors: Vec<(u16, u8)>,
    got: u32,
}

fn on_quiet_err(u: &mut Upcall<'_, '_, Quiet>) {
    let e = (u.active_port(), u.errno().map_or(0, |e| e as u8));
    u.state().errors.push(e);
}

fn on_quiet_msg(u: &mut Upcall<'_, '_, Quiet>) {
    u.state().got += 1;
}

fn byte(src: u16, k: usize, i: usize) -> u8 {
    // Every input bit reaches the top byte through the multiply.
    let x = (i as u64)
        .wrapping_add((k as u64) << 32)
        .wrapping_add((src as u64) << 52);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

fn pattern(src: u16, k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(src, k, i)).collect()
}

#[derive(Default)]
struct Check {
    /// Sizes each source will send to this node, in order.
    plan: HashMap<u16, Vec<usize>>,
    got: HashMap<u16, usize>,
    errors: Vec<String>,
}

fn on_message(u: &mut Upcall<'_, '_, Check>) {
    let src = u.source().node;
    let errno = u.errno();
    let len = u.len();
    // Verify the bytes in place, before the port may take another message.
    let k = u.state().got.get(&src).copied().unwrap_or(0);
    let expect = u.state().plan.get(&src).and_then(|p| p.get(k)).copied();
    let ok = expect == Some(len) && errno.is_none() && {
        let d = u.data();
        d.iter().enumerate().all(|(i, &b)| b == byte(src, k, i))
    };
    let st = u.state();
    if !ok {
        st.errors.push(format!(
            "from {src}: message {k}: {len} bytes, errno {errno:?}, expected {expect:?}"
        ));
    }
    *st.got.entry(src).or_default() += 1;
}

/// Runs `count` barriers on every node, one after the other, each to completion
/// before simulated time `limit`.
fn run_barriers(sim: &mut Sim<SimGamma<'static, ()>>, count: usize, limit: Instant, seed: u64) {
    let n = sim.nodes.len();
    for _ in 0..count {
        for node in sim.nodes.iter_mut() {
            node.sync_start().unwrap();
        }
        sim.run_until(limit, |nodes, _| {
            nodes.iter().all(|x| x.engine().barrier_done() == Ok(true))
        })
        .unwrap_or_else(|e| panic!("seed {seed}: barrier of {n} stuck: {e:?}"));
    }
}

#[derive(Default)]
struct BeCheck {
    intact: Vec<u32>,
    lost: u32,
    wrong: Vec<String>,
}

fn on_be(u: &mut Upcall<'_, '_, BeCheck>) {
    if u.errno().is_some() {
        u.state().lost += 1;
        return;
    }
    let d = u.data();
    let len = d.len();
    let k = u32::from_be_bytes(d[..4].try_into().unwrap());
    let ok = len == 4 + be_len(k)
        && d[4..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(1, k as usize, i));
    if ok {
        u.state().intact.push(k);
    } else {
        u.state().wrong.push(format!("message {k}: {len} bytes"));
    }
}

mod barrier_bcast;
mod best_effort;
mod dead_peer;
mod dying_senders;
mod failure_by_time;
mod fetch_add;
mod gamma_conformance;
mod isolation;
mod messages;
mod scale;
mod scaling;
mod tree_broadcast;
