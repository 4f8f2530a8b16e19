//! Engine cost of an 8-byte active message: `send` call -> in-memory loopback ->
//! handler, one message at a time, in one thread. The reference row moves the same
//! frame bytes through the same loopback rings with no engine at all, so the
//! difference is the engine's own overhead.
//!
//! Run: `cargo bench -p volley-core --bench am_latency`. Medians of 31 trials.

use std::hint::black_box;
use std::time::Instant as WallClock;

use volley_core::engine::{
    Body, Capacity, Config, Dest, Engine, Fill, Group, Members, PortSetup, SendRequest, Storage,
};
use volley_core::phy::{Device, Loopback, Ring, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::wire::HEADER_LEN;
use volley_core::NodeAddr;

const MSGS: u32 = 20_000;
const TRIALS: usize = 31;
const GROUPS: &[Group<'static>] = &[Group {
    id: 1,
    members: Members::Range { first: 0, count: 2 },
}];

/// What a handler does with each message: adds its word to `sum`.
fn on_msgs(e: &mut Engine<'static>, sum: &mut u64) {
    while let Some((n, view)) = e.next_notice() {
        *sum += u64::from_le_bytes(view.data(&n).try_into().unwrap_or_default());
    }
}

fn engine(node: u16) -> Engine<'static> {
    let cap = Capacity {
        ports: 1025,
        channels: 4,
        fabric_nodes: 2,
        ops: 64,
        assemblies: 16,
        eager: 4,
    };
    Engine::new(Config::new(1, 1, node), GROUPS, Storage::with_capacity(cap)).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// ns per message through the engines, best-effort or reliable.
fn engine_trial(reliable: bool) -> f64 {
    let mut rings: Vec<Ring<64, 1500>> = (0..2).map(|_| Ring::new()).collect();
    let (mut a, mut b) = (engine(0), engine(1));
    let dest = Some(Dest {
        group: 1,
        node: 1,
        port: 2,
    });
    a.bind_port(
        1,
        PortSetup {
            dest,
            input: false,
            recv: false,
            err: false,
            sem: 0,
            kind: Fill::Restart,
            buffer: None,
        },
    )
    .unwrap();
    let buf = Vec::leak(vec![0u8; 8]);
    b.bind_port(
        2,
        PortSetup {
            dest: None,
            input: true,
            recv: true,
            err: false,
            sem: 0,
            kind: Fill::Restart,
            buffer: Some(buf),
        },
    )
    .unwrap();
    let now = Instant::ZERO;
    // Warm up: learn capabilities, open channels.
    a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
    b.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
    let mut sum = 0;
    let t = WallClock::now();
    for i in 0..MSGS {
        let word = (i as u64).to_le_bytes();
        let h = a
            .start_send(SendRequest {
                port: 1,
                head: &word,
                body: Body::Borrowed(&[]),
                reliable,
            })
            .unwrap();
        a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        b.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
        on_msgs(&mut b, &mut sum);
        if reliable {
            // The ack (credit return) completes the send.
            a.poll(now, &mut Loopback::new(&mut rings, NodeAddr(0)), None);
        }
        a.release(h).unwrap();
    }
    let ns = t.elapsed().as_nanos() as f64 / MSGS as f64;
    let n = MSGS as u64;
    assert_eq!(sum, n * (n - 1) / 2, "every message handled once");
    ns
}

/// ns per message for the same 64-byte frame copied into and out of the rings.
fn reference_trial() -> f64 {
    let mut rings: Vec<Ring<64, 1500>> = (0..2).map(|_| Ring::new()).collect();
    let frame_len = HEADER_LEN + 8;
    let mut src = vec![0u8; frame_len];
    let mut sink = 0u64;
    let now = Instant::ZERO;
    let t = WallClock::now();
    for i in 0..MSGS {
        src[HEADER_LEN..].copy_from_slice(&(i as u64).to_le_bytes());
        Loopback::new(&mut rings, NodeAddr(0))
            .transmit(now, NodeAddr(1))
            .unwrap()
            .consume(frame_len, |b| b.copy_from_slice(black_box(&src)));
        let v = Loopback::new(&mut rings, NodeAddr(1))
            .receive(now)
            .unwrap()
            .consume(|f| u64::from_le_bytes(f[HEADER_LEN..].try_into().unwrap()));
        sink += v;
    }
    let ns = t.elapsed().as_nanos() as f64 / MSGS as f64;
    let n = MSGS as u64;
    assert_eq!(sink, n * (n - 1) / 2);
    ns
}

fn main() {
    let reference = median((0..TRIALS).map(|_| reference_trial()).collect());
    let best_effort = median((0..TRIALS).map(|_| engine_trial(false)).collect());
    let reliable = median((0..TRIALS).map(|_| engine_trial(true)).collect());
    println!("8-byte active message, send call -> loopback -> handler ({MSGS} msgs x {TRIALS} trials, medians)");
    println!(
        "{:<44} {:>10} {:>8} {:>14}",
        "path", "ns/msg", "ratio", "overhead ns"
    );
    println!(
        "{:<44} {:>10.1} {:>8.2} {:>14}",
        "reference: bare frame copy through the ring", reference, 1.0, "-"
    );
    for (name, v) in [
        ("engine, best-effort (gamma send)", best_effort),
        ("engine, reliable + ack (gamma send_flowctl)", reliable),
    ] {
        println!(
            "{:<44} {:>10.1} {:>8.2} {:>14.1}",
            name,
            v,
            v / reference,
            v - reference
        );
    }
}
