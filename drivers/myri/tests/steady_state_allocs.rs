//! The core's data path allocates nothing once warm (the core's promise: no
//! allocation on the data path): GAMMA, LFC, QNIX and Cheetah endpoints on one Myrinet-like
//! region exchange short messages (and Cheetah long invocations and invocations of
//! oneself) under a counting allocator, and after a warm-up round (pools and spare
//! buffers filled) a thousand more allocate nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use volley_core::cheetah::{Cheetah, Segments};
use volley_core::engine::{Config, Memory, NO_BELL};
use volley_core::qnix::Region as QxRegion;
use volley_core::time::StdClock;

/// Counts this thread's allocations (the test harness runs tests on threads).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is passed to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

mod pair;
use pair::{cheetahs, gammas, lfcs, nics, qnixes, C, C_BELL, C_DATA, G, GROUPS, L, Q};

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

/// Allocations made by `round` the second time it runs (the first warms up).
fn steady(mut round: impl FnMut()) -> u64 {
    round();
    let before = allocs();
    round();
    allocs() - before
}

#[test]
fn gamma_sends_allocate_nothing_once_warm() {
    let (mut a, mut b) = gammas();
    fn hop(from: &mut G, to: &mut G, reliable: bool) {
        let data = [7u8; 8];
        if reliable {
            from.send_flowctl(1, &data).unwrap();
        } else {
            from.send(1, &data).unwrap();
        }
        to.wait(1, 1).unwrap();
    }
    for reliable in [false, true] {
        let n = steady(|| {
            for _ in 0..1000 {
                hop(&mut a, &mut b, reliable);
                hop(&mut b, &mut a, reliable);
            }
        });
        assert_eq!(
            n, 0,
            "GAMMA (reliable: {reliable}): allocations in 2000 messages"
        );
    }
    assert_eq!(*a.state() + *b.state(), 8000);
}

#[test]
fn cheetah_puts_allocate_nothing_once_warm() {
    let (mut a, mut b) = cheetahs();
    fn hop(from: &mut C, to: &mut C) {
        let want = to.bell(C_BELL).unwrap() + 1;
        let peer = to.mycontext();
        from.put(peer, C_DATA, C_DATA, 8, 0, C_BELL).unwrap();
        to.wait(C_BELL, want).unwrap();
    }
    let n = steady(|| {
        for _ in 0..200 {
            hop(&mut a, &mut b);
            hop(&mut b, &mut a);
        }
    });
    assert_eq!(n, 0, "allocations in 400 steady-state puts");
    assert_eq!(a.bell(C_BELL).unwrap(), 400);
}

#[test]
fn lfc_packets_allocate_nothing_once_warm() {
    let (mut a, mut b) = lfcs();
    fn hop(from: &mut L, to: &mut L, rank: u16) {
        let p = from.send_alloc(false).unwrap();
        from.packet_mut(p).unwrap()[..8].copy_from_slice(&[7; 8]);
        from.ucast_launch(rank, p, 8, false).unwrap();
        let want = *to.state() + 1;
        while *to.state() < want {
            to.poll().unwrap();
        }
    }
    let n = steady(|| {
        for _ in 0..1000 {
            hop(&mut a, &mut b, 1);
            hop(&mut b, &mut a, 0);
        }
    });
    assert_eq!(n, 0, "LFC: allocations in 2000 packets");
}

#[test]
fn qnix_short_sends_allocate_nothing_once_warm() {
    let (mut a, mut b) = qnixes();
    /// Sent from page 1 of the pool, received into page 0; bytes received.
    fn hop(from: &mut Q, to: &mut Q) -> usize {
        let (me, peer) = (to.name(), from.name());
        let r = to
            .recv_context(peer, 1, true, 0, 8, QxRegion::Pool(0))
            .unwrap();
        to.receive(r).unwrap();
        let s = from
            .send_context(me, 1, false, 0, 8, QxRegion::Pool(1))
            .unwrap();
        from.send_short(s).unwrap();
        to.poll_for_receive(r).unwrap()
    }
    let mut got = 0;
    let n = steady(|| {
        for _ in 0..1000 {
            got += hop(&mut a, &mut b) + hop(&mut b, &mut a);
        }
    });
    assert_eq!(n, 0, "QNIX: allocations in 2000 messages");
    assert_eq!(got, 4000 * 8);
    // A broadcast to the application (through the NIC's board) and a reply.
    fn bcast(from: &mut Q, to: &mut Q) -> usize {
        let r = to
            .recv_context(from.name(), 2, true, 0, 8, QxRegion::Pool(0))
            .unwrap();
        to.receive(r).unwrap();
        let s = from
            .send_context(to.name(), 2, false, 0, 8, QxRegion::Pool(1))
            .unwrap();
        from.broadcast_short(s, 1).unwrap();
        to.poll_for_receive(r).unwrap()
    }
    let n = steady(|| {
        for _ in 0..1000 {
            assert_eq!(bcast(&mut a, &mut b), 8);
            assert_eq!(hop(&mut b, &mut a), 8);
        }
    });
    assert_eq!(n, 0, "QNIX: allocations in 1000 broadcasts and replies");
    // One short send of 8 bytes with tag `tag`, its data region made by `data`; the
    // first byte that landed in the receiver's pool.
    fn short_send(from: &mut Q, to: &mut Q, tag: i32, data: impl FnOnce(&mut Q) -> QxRegion) -> u8 {
        let (me, peer) = (to.name(), from.name());
        let r = to
            .recv_context(peer, tag, true, 0, 8, QxRegion::Pool(0))
            .unwrap();
        to.receive(r).unwrap();
        let d = data(from);
        let s = from.send_context(me, tag, false, 0, 8, d).unwrap();
        from.send_short(s).unwrap();
        assert_eq!(to.poll_for_receive(r).unwrap(), 8);
        let (base, _) = to.pool().unwrap();
        let mut got = [0u8; 8];
        to.memory_mut().read(base, &mut got).unwrap();
        got[0]
    }
    // A short send's bytes copied when it is posted (`qx_send_short` in C): the
    // copy's buffer comes back with the context.
    fn copied(from: &mut Q, to: &mut Q, word: u8) -> u8 {
        short_send(from, to, 3, |from| {
            let (base, _) = from.pool().unwrap();
            let at = base + volley_core::qnix::PAGE as u64;
            from.memory_mut().write(at, &[word; 8]).unwrap();
            let data = from.data_region(at, 8).unwrap();
            from.memory_mut().write(at, &[0; 8]).unwrap(); // copied: free again
            data
        })
    }
    // The same from bytes the program holds (`short_data`).
    fn held(from: &mut Q, to: &mut Q, word: u8) -> u8 {
        short_send(from, to, 4, |from| from.short_data(&[word; 8]).unwrap())
    }
    for (send, what) in [
        (copied as fn(&mut Q, &mut Q, u8) -> u8, "copied short sends"),
        (held, "short sends of held bytes"),
    ] {
        let n = steady(|| {
            for i in 0..1000 {
                let w = (i % 200) as u8 + 1;
                assert_eq!(send(&mut a, &mut b, w), w);
                assert_eq!(send(&mut b, &mut a, w), w);
            }
        });
        assert_eq!(n, 0, "QNIX: allocations in 2000 {what}");
    }
}

fn on_invoke(_c: &mut C, _who: u16, _tag: i32, data: &[u8]) {
    assert_eq!(data, [7u8; 8]);
}

/// Tag 6: every byte of the buffer is its length modulo 251.
fn on_filled(_c: &mut C, _who: u16, _tag: i32, data: &[u8]) {
    let b = (data.len() % 251) as u8;
    assert!(data.iter().all(|&x| x == b), "{} bytes", data.len());
}

#[test]
fn cheetah_ainvokes_allocate_nothing_once_warm() {
    let (a, b) = nics();
    let mk = |nic, me: u16| -> C {
        let mut c = Cheetah::setup(
            Config::new(9, 1, me),
            GROUPS,
            2,
            nic,
            StdClock::default(),
            Segments::new(),
        )
        .unwrap();
        c.register(5, on_invoke);
        c.register(6, on_filled);
        c
    };
    let (mut a, mut b) = (mk(a, 0), mk(b, 1));
    fn hop(from: &mut C, to: &mut C, ctx: u16) {
        from.ainvoke(ctx, 5, &[7; 8], NO_BELL).unwrap();
        let want = to.stats().handlers + 1;
        while to.stats().handlers < want {
            from.poll().unwrap();
            to.poll().unwrap();
        }
    }
    let n = steady(|| {
        for _ in 0..1000 {
            hop(&mut a, &mut b, 1);
            hop(&mut b, &mut a, 0);
        }
    });
    assert_eq!(n, 0, "Cheetah: allocations in 2000 invocations");
    // Invocations of ourselves (copied at the call, run at the next poll), and
    // long ones put together from several packets: their buffers are kept from
    // finished invocations. 3000 to 3525 bytes, so the kept buffers have grown to
    // the longest in the warm-up round.
    fn filled(len: usize) -> Vec<u8> {
        vec![(len % 251) as u8; len]
    }
    let (short, long): (Vec<_>, Vec<_>) = (0..8)
        .map(|k| (filled(100 + 9 * k), filled(3000 + 75 * k)))
        .unzip();
    let n = steady(|| {
        for _ in 0..125 {
            for (s, l) in short.iter().zip(&long) {
                a.ainvoke(0, 6, s, NO_BELL).unwrap();
                let want = a.stats().handlers + 1;
                while a.stats().handlers < want {
                    a.poll().unwrap();
                }
                a.ainvoke(1, 6, l, NO_BELL).unwrap();
                let want = b.stats().handlers + 1;
                while b.stats().handlers < want {
                    a.poll().unwrap();
                    b.poll().unwrap();
                }
            }
        }
    });
    assert_eq!(
        n, 0,
        "Cheetah: allocations in 1000 invocations of ourselves and 1000 long ones"
    );
}
