//! The engine's own cost per message, without a second core: two GAMMA endpoints on
//! one Myrinet-like region in one thread take turns, so every poll finds its frame
//! and no time goes to waiting. The same for LFC, QNIX, a Cheetah put, get and
//! `ainvoke`, and QNIX's barrier in NIC memory. The reference row is the same
//! region's raw ring (a frame written and read, no engine).
//!
//! `cargo bench -p volley-myri --bench engine_cost [-- ITERS]` prints the median of 9
//! rounds, nanoseconds per one-way message (send + receive + handler, and for GAMMA
//! and LFC one empty poll of the receiver before the message comes, as a waiting
//! receiver makes), and of one empty poll. Under callgrind, with `ITERS ROW` as
//! arguments, where `ROW` is
//! `send`, `flowctl`, `keyed` (`flowctl` with frames tagged under a job key, as on
//! `udp` and `eth`), `lfc`, `qnix`, `qnix_barrier`, `cheetah`, `invoke`, `get` or
//! `idle` (that row alone), and `--toggle-collect='*measured_gamma*'`
//! (`measured_lfc`, `measured_qnix`, `measured_qnix_barrier`, `measured_cheetah`,
//! `measured_invoke`, `measured_get`, `measured_idle`) with `--collect-atstart=no`, the
//! instruction count divided by `18 * ITERS` (9 rounds of `2 * ITERS` messages; of
//! `9 * ITERS` barriers or polls) is the cost per message, both ends included.
//! `--toggle-collect='*engine_cost::hop*'` (`*lfc_hop*`) counts a GAMMA message's
//! (an LFC packet's) path alone: from the send to the end of its handler (upcall),
//! without the receiver's poll before. Adding
//! `--toggle-collect='*sent_eager_single*'` leaves out what a reliable sender of a
//! message over 32 bytes does once its frame is out (the operation filled in, the
//! copy, the timer): what is left is the message's latency path, from the send call
//! to the end of the handler. A shorter one's copy is kept by its channel, inline
//! (out of line, it cost 13 instructions a message more), and counted. `VOLLEY_BENCH_NODES=N` (2 to 64) runs the pair on a region of `N`
//! nodes, as two ranks of a larger `shm` job: every poll looks at each node's ring
//! and board.

use std::hint::black_box;
use std::time::Instant as WallInstant;

use volley_core::phy::{Device, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::NodeAddr;
use volley_myri::MyriNic;

#[path = "../tests/pair/mod.rs"]
mod pair;
use pair::{
    cheetahs, gammas, gammas_with, lfcs, nics, qnixes, C, C_BELL, C_DATA, C_INVOKED, C_TAG, G, L, Q,
};

/// One LFC packet from `from` to `to`: allocated, filled, launched, then `to` polls
/// until its upcall ran.
#[inline(never)]
fn lfc_hop(from: &mut L, to: &mut L, to_rank: u16, data: &[u8]) {
    let p = from.send_alloc(false).unwrap();
    from.packet_mut(p).unwrap()[..data.len()].copy_from_slice(data);
    from.ucast_launch(to_rank, p, data.len(), false).unwrap();
    let want = *to.state() + 1;
    while *to.state() < want {
        to.poll().unwrap();
    }
}

#[inline(never)]
fn measured_lfc(a: &mut L, b: &mut L, iters: usize) {
    let data = [7u8; 8];
    // Its length unknown to the compiler, as a program's messages are.
    let data: &[u8] = black_box(&data);
    for _ in 0..iters {
        // As for GAMMA: the receiver's poll before the packet comes.
        b.poll().unwrap();
        lfc_hop(a, b, 1, data);
        a.poll().unwrap();
        lfc_hop(b, a, 0, data);
    }
}

/// One QNIX short message: `to` posts a receive, `from` sends 8 bytes with
/// `send_short` (a context without a doorbell), `to` polls for the receive.
#[inline(never)]
fn qnix_hop(from: &mut Q, to: &mut Q, data: &[u8]) {
    use volley_core::qnix::Region;
    let (me, peer) = (to.name(), from.name());
    let r = to
        .recv_context(peer, 1, true, 0, 8, Region::Pool(0))
        .unwrap();
    to.receive(r).unwrap();
    // The bytes go into a buffer the process keeps (`short_data`): no allocation.
    let d = from.short_data(data).unwrap();
    let s = from.send_context(me, 1, false, 0, data.len(), d).unwrap();
    from.send_short(s).unwrap();
    to.poll_for_receive(r).unwrap();
}

/// One Cheetah put of 8 bytes from `from` to `to` that rings `to`'s bell (its
/// `want`-th ring), then `to` polls until it has.
#[inline(never)]
fn cheetah_hop(from: &mut C, to: &mut C, want: i32, len: usize) {
    let peer = to.mycontext();
    from.put(peer, C_DATA, C_DATA, len, 0, C_BELL).unwrap();
    to.wait(C_BELL, want).unwrap();
}

#[inline(never)]
fn measured_cheetah(a: &mut C, b: &mut C, iters: usize) {
    // Its length unknown to the compiler, as a program's messages are.
    let len = black_box(8);
    let base = a.bell(C_BELL).unwrap();
    for i in 1..=iters as i32 {
        cheetah_hop(a, b, base + i, len);
        cheetah_hop(b, a, base + i, len);
    }
}

/// One Cheetah `ainvoke` of 8 bytes from `from` to `to`, whose handler rings its
/// bell (the `want`-th time); `to` polls until it has.
#[inline(never)]
fn invoke_hop(from: &mut C, to: &mut C, want: i32, data: &[u8]) {
    from.ainvoke(to.mycontext(), C_TAG, data, 0).unwrap();
    to.wait(C_INVOKED, want).unwrap();
}

#[inline(never)]
fn measured_invoke(a: &mut C, b: &mut C, iters: usize) {
    let data = [7u8; 8];
    let data: &[u8] = black_box(&data);
    let base = a.bell(C_INVOKED).unwrap();
    for i in 1..=iters as i32 {
        invoke_hop(a, b, base + i, data);
        invoke_hop(b, a, base + i, data);
    }
}

/// One Cheetah get of 8 bytes by `from` from `to`, ringing `from`'s bell (the
/// `want`-th time) once they have landed; both poll until it has.
#[inline(never)]
fn get_hop(from: &mut C, to: &mut C, want: i32, len: usize) {
    from.get(to.mycontext(), C_DATA + 64, C_DATA, len, C_BELL, 0)
        .unwrap();
    while from.bell(C_BELL).unwrap() < want {
        to.poll().unwrap();
        from.poll().unwrap();
    }
}

#[inline(never)]
fn measured_get(a: &mut C, b: &mut C, iters: usize) {
    let len = black_box(8);
    let base = a.bell(C_BELL).unwrap();
    for i in 1..=iters as i32 {
        get_hop(a, b, base + i, len);
        get_hop(b, a, base + i, len);
    }
}

#[inline(never)]
fn measured_qnix(a: &mut Q, b: &mut Q, iters: usize) {
    let data = [7u8; 8];
    // Its length unknown to the compiler, as a program's messages are.
    let data: &[u8] = black_box(&data);
    for _ in 0..iters {
        qnix_hop(a, b, data);
        qnix_hop(b, a, data);
    }
}

/// `qx_barrier` on the application's group (the whole fabric: the NIC's barrier),
/// both processes taking turns at their NIC steps until both doorbells rang.
#[inline(never)]
fn measured_qnix_barrier(a: &mut Q, b: &mut Q, iters: usize) {
    use volley_core::qnix::{Region, DONE};
    for _ in 0..iters {
        let peer = b.name();
        let ca = a.send_context(peer, 0, true, 0, 0, Region::None).unwrap();
        let cb = b.send_context(peer, 0, true, 0, 0, Region::None).unwrap();
        a.barrier(ca, 1, 2).unwrap();
        b.barrier(cb, 1, 2).unwrap();
        while a.send_doorbell(ca) != DONE || b.send_doorbell(cb) != DONE {
            a.step();
            b.step();
        }
        a.poll_for_send(ca).unwrap();
        b.poll_for_send(cb).unwrap();
    }
}

/// One message from `from` to `to`: sent, then polled until its handler ran. What
/// a waiting receiver's latency is made of (its empty polls before are not).
#[inline(never)]
fn hop(from: &mut G, to: &mut G, data: &[u8], reliable: bool) {
    if reliable {
        from.send_flowctl(1, data).unwrap();
    } else {
        from.send(1, data).unwrap();
    }
    to.wait(1, 1).unwrap();
}

#[inline(never)]
fn measured_gamma(a: &mut G, b: &mut G, iters: usize, reliable: bool) {
    let data = [7u8; 8];
    // Its length unknown to the compiler, as a program's messages are.
    let data: &[u8] = black_box(&data);
    for _ in 0..iters {
        // The receiver polls once before the message comes, as one that waits for
        // it does: what the previous poll left for later is done there.
        black_box(b.test(1).unwrap());
        hop(a, b, data, reliable);
        black_box(a.test(1).unwrap());
        hop(b, a, data, reliable);
    }
}

#[inline(never)]
fn measured_raw(a: &mut MyriNic, b: &mut MyriNic, iters: usize) {
    let data = [7u8; 8];
    // Its length unknown to the compiler, as a program's messages are.
    let data: &[u8] = black_box(&data);
    let now = Instant::ZERO;
    for _ in 0..iters {
        raw_hop(a, b, 1, data, now);
        raw_hop(b, a, 0, data, now);
    }
}

fn raw_hop(x: &mut MyriNic, y: &mut MyriNic, to: u16, data: &[u8], now: Instant) {
    x.transmit(now, NodeAddr(to))
        .unwrap()
        .consume(data.len(), |f| f.copy_from_slice(data));
    let got = y.receive(now).unwrap().consume(|f| f[0]);
    black_box(got);
}

/// Polls that find nothing: how long a waiting receiver takes to notice a frame.
#[inline(never)]
fn measured_idle(a: &mut G, iters: usize) {
    for _ in 0..iters {
        black_box(a.test(1).unwrap());
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The median over `rounds` runs of `f` of the nanoseconds per unit, where a run
/// does `units` of them (messages, barriers or polls).
fn timed(rounds: usize, units: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let t = WallInstant::now();
                f();
                t.elapsed().as_nanos() as f64 / units as f64
            })
            .collect(),
    )
}

/// A row's measured loop: two endpoints, `ITERS`.
type Measured<E> = fn(&mut E, &mut E, usize);

/// One row: its name, nanoseconds and ratio to the raw ring's.
fn report(name: &str, ns: f64, raw: f64) {
    println!("{:<44} {:>9.1} ns  {:.2}x", name, ns, ns / raw);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    // `send` or `flowctl` measures only that row (for callgrind); cargo's `--bench`
    // flag is ignored.
    let only = args.iter().find(|a| {
        let rows = [
            "send",
            "flowctl",
            "keyed",
            "idle",
            "lfc",
            "qnix",
            "qnix_barrier",
            "cheetah",
            "invoke",
            "get",
        ];
        rows.contains(&a.as_str())
    });
    let row = |name: &str| only.is_none_or(|o| o == name);
    let rounds = 9;
    // Messages in a round of a ping-pong row, and what they all add up to.
    let msgs = 2 * iters;
    let total = 2 * rounds * iters;

    let (mut ra, mut rb) = nics();
    let raw = timed(rounds, msgs, || measured_raw(&mut ra, &mut rb, iters));
    report("reference: raw ring, write + read, 8 B", raw, raw);
    for (reliable, key, name, title) in [
        (false, None, "send", "GAMMA send, 8 B"),
        (true, None, "flowctl", "GAMMA send_flowctl, 8 B"),
        (
            true,
            Some(*b"job frame key 16"),
            "keyed",
            "GAMMA send_flowctl, 8 B, tagged",
        ),
    ] {
        if !row(name) {
            continue;
        }
        let (mut a, mut b) = gammas_with(key);
        let ns = timed(rounds, msgs, || {
            measured_gamma(&mut a, &mut b, iters, reliable)
        });
        assert_eq!(*a.state() + *b.state(), total as u64);
        report(title, ns, raw);
    }
    if row("lfc") {
        let (mut a, mut b) = lfcs();
        let ns = timed(rounds, msgs, || measured_lfc(&mut a, &mut b, iters));
        assert_eq!(*a.state() + *b.state(), total as u64);
        report("LFC ucast_launch + poll, 8 B", ns, raw);
    }
    if row("qnix") {
        let (mut a, mut b) = qnixes();
        let ns = timed(rounds, msgs, || measured_qnix(&mut a, &mut b, iters));
        let got = a.stats().messages_received + b.stats().messages_received;
        assert_eq!(got, total as u64);
        report("QNIX send_short + poll_for_receive, 8 B", ns, raw);
    }
    // Cheetah: what each row's bell counts, both contexts together.
    let cheetah_rows: [(&str, &str, Measured<C>, u64); 3] = [
        (
            "cheetah",
            "Cheetah put (remote bell) + wait, 8 B",
            measured_cheetah,
            C_BELL,
        ),
        (
            "invoke",
            "Cheetah ainvoke + wait for its handler, 8 B",
            measured_invoke,
            C_INVOKED,
        ),
        (
            "get",
            "Cheetah get (round trip, local bell), 8 B",
            measured_get,
            C_BELL,
        ),
    ];
    for (name, title, measured, bell) in cheetah_rows {
        if !row(name) {
            continue;
        }
        let (mut a, mut b) = cheetahs();
        let ns = timed(rounds, msgs, || measured(&mut a, &mut b, iters));
        let rung = a.bell(bell).unwrap() + b.bell(bell).unwrap();
        assert_eq!(rung, total as i32);
        report(title, ns, raw);
    }
    if row("qnix_barrier") {
        let (mut a, mut b) = qnixes();
        let ns = timed(rounds, iters, || {
            measured_qnix_barrier(&mut a, &mut b, iters)
        });
        assert_eq!(a.stats().engine_barriers, (rounds * iters) as u64);
        report("QNIX qx_barrier, 2 processes (both)", ns, raw);
    }
    if !row("idle") {
        return;
    }
    let (mut a, _b) = gammas();
    let ns = timed(rounds, iters, || measured_idle(&mut a, iters));
    report("GAMMA test, nothing arrived (one poll)", ns, raw);
}
