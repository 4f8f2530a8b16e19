//! Cheetah core on the unikernel (`app=cheetah`): every context puts to the next and
//! gets from the one before with both bells, context 0 invokes handlers in context
//! 1 (a ping-pong through two tags, and a handler that itself puts back), a put to
//! memory context 1 never exposed is refused, then barrier and finalize. Memory is
//! lent to the core as [`Segments`] (safe code); bells are `i32`s in a segment of
//! their own. Prints `cheetah ok: context R of N` when every check passed.

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;

use volley_core::cheetah::{Cheetah, Segments};
use volley_core::engine::{Config, Error, Group, Memory};
use volley_core::phy::Device;
use volley_core::NodeId;

use crate::clock::TscClock;
use crate::println;

type Node<D> = Cheetah<'static, D, TscClock, Segments<'static>>;

/// Segment 1: data; segment 2: bells (16 `i32`s). Fixed by the order of `expose`.
const DATA: u64 = 1 << 40;
const BELLS: u64 = 2 << 40;
const DATA_LEN: usize = 256 * 1024;
/// Bytes each put and get moves.
const LEN: usize = 50_000;
/// Where in the data segment: the source, what a put brings, what a get brings,
/// what a handler puts back.
const SRC: u64 = DATA;
const PUT_AT: u64 = DATA + 64 * 1024;
const GET_AT: u64 = DATA + 128 * 1024;
const BACK_AT: u64 = DATA + 192 * 1024;
const BACK_LEN: usize = 1000;

fn bell(i: u64) -> u64 {
    BELLS + 4 * i
}

/// The bytes context `c` puts and serves.
fn pattern(c: NodeId, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ (c as u8))
        .collect()
}

/// Tag 1: answers with tag 2, same bytes.
fn echo<D: Device>(c: &mut Node<D>, who: NodeId, _tag: i32, buf: &[u8]) {
    if let Err(e) = c.ainvoke(who, 2, buf, 0) {
        println!("volley unikernel: cheetah: echo: {}", e);
    }
}

/// Tag 2: keeps the bytes (bell 4 counts them: one per byte that matched "ping").
fn record<D: Device>(c: &mut Node<D>, _who: NodeId, _tag: i32, buf: &[u8]) {
    if buf == b"ping" {
        c.memory_mut().ring(bell(4));
    }
}

/// Tag 3: a handler that puts: `BACK_LEN` bytes of our source to the invoker's
/// address in the buffer, ringing the invoker's bell 5.
fn put_back<D: Device>(c: &mut Node<D>, who: NodeId, _tag: i32, buf: &[u8]) {
    let Some(at) = buf.get(..8).and_then(|b| b.try_into().ok()) else {
        return;
    };
    if let Err(e) = c.put(who, u64::from_le_bytes(at), SRC, BACK_LEN, 0, bell(5)) {
        println!("volley unikernel: cheetah: put_back: {}", e);
    }
}

fn check(what: &str, r: Result<(), Error>) -> bool {
    if let Err(e) = r {
        println!("volley unikernel: cheetah: {}: {}", what, e);
        return false;
    }
    true
}

/// Runs the program as this context; `stats` prints the card's counters at the end.
pub fn run<D: Device>(
    nic: D,
    groups: &'static [Group<'static>],
    cfg: Config,
    clock: TscClock,
    nodes: u16,
    stats: impl FnOnce(&mut D),
) -> bool {
    let mut mem = Segments::new();
    let data: &'static mut [u8] = Vec::leak(vec![0u8; DATA_LEN]);
    let bells: &'static mut [u8] = Vec::leak(vec![0u8; 64]);
    if mem.expose(data) != DATA || mem.expose(bells) != BELLS {
        return false;
    }
    let mut c: Node<D> = match Cheetah::setup(cfg, groups, nodes as usize, nic, clock, mem) {
        Ok(c) => c,
        Err(e) => {
            println!("volley unikernel: cheetah_core_setup: {}", e);
            return false;
        }
    };
    c.register(1, echo::<D>);
    c.register(2, record::<D>);
    c.register(3, put_back::<D>);
    let (me, n) = (c.mycontext(), c.ncontexts());
    if n < 2 {
        println!("volley unikernel: app=cheetah needs 2 or more instances");
        return false;
    }
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    if let Some(d) = c.memory_mut().segment_mut(DATA) {
        d[..LEN].copy_from_slice(&pattern(me, LEN));
    }
    let mut ok = check("barrier", c.barrier());

    // Put to the next context (local bell 0, its bell 1); get from the one before
    // (local bell 2, its bell 3). Its bell 1 rings here once the previous context's
    // put has landed.
    ok &= check("put", c.put(next, PUT_AT, SRC, LEN, bell(0), bell(1)));
    ok &= check("get", c.get(prev, SRC, GET_AT, LEN, bell(2), bell(3)));
    for b in 0..4 {
        ok &= check("wait", c.wait(bell(b), 1));
    }
    let want_prev = pattern(prev, LEN);
    if let Some(d) = c.memory().segment(DATA) {
        let base = |a: u64| (a - DATA) as usize;
        if d[base(PUT_AT)..base(PUT_AT) + LEN] != want_prev[..] {
            println!("volley unikernel: cheetah: the put from {} differs", prev);
            ok = false;
        }
        if d[base(GET_AT)..base(GET_AT) + LEN] != want_prev[..] {
            println!("volley unikernel: cheetah: the get from {} differs", prev);
            ok = false;
        }
    }
    ok &= check("barrier", c.barrier());

    // Context 0 invokes context 1's handlers; context 1 serves them while it waits
    // for context 0's all-clear (bell 6, rung by a put of no bytes).
    if me == 0 {
        ok &= check("ainvoke ping", c.ainvoke(1, 1, b"ping", 0));
        ok &= check(
            "ainvoke put_back",
            c.ainvoke(1, 3, &BACK_AT.to_le_bytes(), 0),
        );
        ok &= check("wait for the echo", c.wait(bell(4), 1));
        ok &= check("wait for the put back", c.wait(bell(5), 1));
        let want = pattern(1, BACK_LEN);
        if let Some(d) = c.memory().segment(DATA) {
            let at = (BACK_AT - DATA) as usize;
            if d[at..at + BACK_LEN] != want[..] {
                println!("volley unikernel: cheetah: the handler's put differs");
                ok = false;
            }
        }
        // Memory context 1 never exposed: refused there, reported here.
        ok &= check("hostile put", c.put(1, 9 << 40, SRC, 8, bell(7), 0));
        let refused = loop {
            match c.poll() {
                Err(e) => break Some(e),
                Ok(_) if c.engine().rma_pending() == 0 => break None,
                Ok(_) => {}
            }
        };
        if refused != Some(Error::BadAddress) {
            println!("volley unikernel: cheetah: hostile put: {:?}", refused);
            ok = false;
        }
        ok &= check("all-clear", c.ring(1, bell(6)));
    } else if me == 1 {
        ok &= check("serve", c.wait(bell(6), 1));
    }
    ok &= check("barrier", c.barrier());
    let s = c.stats();
    let e = c.engine().stats();
    println!(
        "volley unikernel: cheetah: {} puts, {} gets, {} handlers run; frames {} out ({} resent), {} in; {} denied",
        s.puts,
        s.gets,
        s.handlers,
        e.tx_frames,
        e.retransmits,
        e.rx_frames,
        e.rma_denied
    );
    ok &= check("finalize", c.finalize());
    if ok {
        println!("volley unikernel: cheetah ok: context {} of {}", me, n);
    }
    let mut nic = c.into_device();
    stats(&mut nic);
    ok
}
