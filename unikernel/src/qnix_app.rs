//! QNIX on the unikernel (`app=qnix`): every process sends to the next a short
//! message (its receive posted late: kept early) and a 64 KB message out of the
//! buffer pool into a receive posted first (a rendezvous: one put straight into
//! the pool), every byte checked; then a group of all joins and meets in barriers,
//! and process 0 broadcasts. Memory is lent to the core as [`Segments`] (safe code).
//! Prints `qnix ok: process R of N` when every check passed.

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;

use volley_core::cheetah::Segments;
use volley_core::engine::{Config, Group};
use volley_core::phy::Device;
use volley_core::qnix::{Name, Qnix, QxError, Region, PAGE};

use crate::clock::TscClock;
use crate::println;

type Node<D> = Qnix<'static, D, TscClock, Segments<'static>>;

/// Segment 1: the buffer pool. Fixed by the order of `expose`.
const POOL: u64 = 1 << 40;
const POOL_PAGES: usize = 64;
/// The long message: from pool page 0, into pool page 16 of the next process.
const LONG: usize = 64 * 1024;
const SHORT: usize = 100;
const AI: i32 = 1;

fn pattern(from: i32, tag: i32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_246_822_519) >> 24) as u8 ^ (from * 16 + tag) as u8)
        .collect()
}

fn check<T>(what: &str, r: Result<T, QxError>) -> Option<T> {
    r.map_err(|e| println!("volley unikernel: qnix: {}: {}", what, e.message()))
        .ok()
}

/// Runs the program as this process; `stats` prints the card's counters at the end.
pub fn run<D: Device>(
    nic: D,
    groups: &'static [Group<'static>],
    cfg: Config,
    clock: TscClock,
    nodes: u16,
    stats: impl FnOnce(&mut D),
) -> bool {
    let mut mem = Segments::new();
    let pool: &'static mut [u8] = Vec::leak(vec![0u8; POOL_PAGES * PAGE]);
    if mem.expose(pool) != POOL {
        return false;
    }
    let me = cfg.node as i32;
    let n = nodes as i32;
    let mut q: Node<D> = match Qnix::new(cfg, groups, nodes as usize, nic, clock, mem) {
        Ok(q) => q,
        Err(e) => {
            println!("volley unikernel: qnix: {}", e.message());
            return false;
        }
    };
    let ok = program(&mut q, me, n).is_some();
    let s = q.stats();
    let e = q.engine().stats();
    println!(
        "volley unikernel: qnix: {} sent ({} by rendezvous), {} received ({} early), {} barriers; frames {} out ({} resent), {} in",
        s.messages_sent,
        s.rendezvous,
        s.messages_received,
        s.unexpected,
        s.barriers,
        e.tx_frames,
        e.retransmits,
        e.rx_frames
    );
    let ok = ok && check("qx_end", q.end()).is_some();
    if ok {
        println!("volley unikernel: qnix ok: process {} of {}", me, n);
    }
    stats(q.device_mut());
    ok
}

fn program<D: Device>(q: &mut Node<D>, me: i32, n: i32) -> Option<()> {
    check("qx_buffer_pool", q.set_pool(POOL, POOL_PAGES * PAGE))?;
    check("qx_init", q.init(Name::new(AI, me), AI, n))?;
    let (next, prev) = (Name::new(AI, (me + 1) % n), Name::new(AI, (me + n - 1) % n));
    let long = pattern(me, 20, LONG);
    q.memory_mut().segment_mut(POOL)?[..LONG].copy_from_slice(&long);
    // The long message's receive first, then everyone is ready.
    let rl = check(
        "recv_context",
        q.recv_context(prev, 20, true, 16, LONG, Region::Pool(16)),
    )?;
    check("qx_receive", q.receive(rl))?;
    barrier(q, AI, n)?;
    let short = pattern(me, 10, SHORT);
    let ss = check(
        "send_context",
        q.send_context(next, 10, true, 1, SHORT, Region::Data(short)),
    )?;
    check("qx_send_short", q.send_short(ss))?;
    let sl = check(
        "send_context",
        q.send_context(next, 20, true, 16, LONG, Region::Pool(0)),
    )?;
    check("qx_send", q.send(sl))?;
    check("long send", q.poll_for_send(sl))?;
    check("short send", q.poll_for_send(ss))?;
    let rs = check(
        "recv_context",
        q.recv_context(prev, 10, true, 1, SHORT, Region::Pool(40)),
    )?;
    check("qx_receive", q.receive(rs))?;
    let got_long = check("long receive", q.poll_for_receive(rl))?;
    let got_short = check("short receive", q.poll_for_receive(rs))?;
    let p = q.memory().segment(POOL)?;
    let (from, page) = (prev.pi, |k: usize| k * PAGE);
    if got_long != LONG || p[page(16)..page(16) + LONG] != pattern(from, 20, LONG)[..] {
        println!(
            "volley unikernel: qnix: the long message from {} differs",
            from
        );
        return None;
    }
    if got_short != SHORT || p[page(40)..page(40) + SHORT] != pattern(from, 10, SHORT)[..] {
        println!(
            "volley unikernel: qnix: the short message from {} differs",
            from
        );
        return None;
    }
    // A group of everyone, three barriers in it, and a broadcast from process 0.
    let j = check(
        "send_context",
        q.send_context(next, 0, true, 0, 0, Region::None),
    )?;
    check("qx_join_group", q.join_group(j, 50, n))?;
    check("qx_join_group", q.poll_for_send(j))?;
    for _ in 0..3 {
        barrier(q, 50, n)?;
    }
    let word = pattern(0, 30, 64);
    if me == 0 {
        let b = check(
            "send_context",
            q.send_context(next, 30, true, 1, 64, Region::Data(word)),
        )?;
        check("qx_broadcast_short", q.broadcast_short(b, 50))?;
        check("broadcast", q.poll_for_send(b))?;
    } else {
        let from0 = Name::new(AI, 0);
        let r = check(
            "recv_context",
            q.recv_context(from0, 30, true, 1, 64, Region::Pool(41)),
        )?;
        check("qx_receive", q.receive(r))?;
        check("broadcast received", q.poll_for_receive(r))?;
        if q.memory().segment(POOL)?[page(41)..page(41) + 64] != word[..] {
            println!("volley unikernel: qnix: the broadcast differs");
            return None;
        }
    }
    barrier(q, AI, n)
}

/// `qx_barrier` on `group` of `size`, waited for.
fn barrier<D: Device>(q: &mut Node<D>, group: i32, size: i32) -> Option<()> {
    let me = q.name();
    let b = check(
        "send_context",
        q.send_context(me, 0, true, 0, 0, Region::None),
    )?;
    check("qx_barrier", q.barrier(b, group, size))?;
    check("qx_barrier", q.poll_for_send(b))
}
