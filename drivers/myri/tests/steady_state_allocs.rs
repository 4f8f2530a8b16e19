//! The core's data path allocates nothing once warm (the brief: "no allocation on
//! the data path"): GAMMA, LFC, QNIX and Cheetah endpoints on one Myrinet-like
//! region exchange short messages under a counting allocator, and after a warm-up
//! round (pools and spare buffers filled) a thousand more allocate nothing.

use std::alloc::{alloc_zeroed, GlobalAlloc, Layout, System};
use std::cell::Cell;

use volley_core::cheetah::{Cheetah, Segments};
use volley_core::engine::{Config, Group, Members, NO_BELL};
use volley_core::gamma::{Gamma, GO_BACK};
use volley_core::lfc::{Keep, Lfc, Options, Received};
use volley_core::qnix::{Name, Qnix, Region as QxRegion};
use volley_core::time::StdClock;
use volley_myri::{Geometry, MyriNic, NicConfig, Region};

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

static GROUPS: &[Group<'static>] = &[Group {
    id: 1,
    members: Members::Range { first: 0, count: 2 },
}];

fn nics() -> (MyriNic, MyriNic) {
    let geo = Geometry::new(2, 32, 64 * 1024).unwrap();
    let len = geo.region_len().unwrap();
    let layout = Layout::from_size_align(len, 4096).unwrap();
    // SAFETY: non-zero size; leaked, so it outlives both NICs.
    let ptr = unsafe { alloc_zeroed(layout) };
    assert!(!ptr.is_null());
    // SAFETY: a fresh allocation, never freed, touched only through these two
    // views (standing for two processes' mappings).
    let r = || unsafe { Region::new(ptr, len) }.unwrap();
    let a = MyriNic::create(r(), geo, 0, 9, NicConfig::default()).unwrap();
    let b = MyriNic::attach(r(), 1, 9, NicConfig::default()).unwrap();
    (a, b)
}

type G = Gamma<'static, MyriNic, StdClock, u64>;

fn on_msg(u: &mut volley_core::gamma::Upcall<'_, '_, u64>) {
    *u.state() += 1;
}

#[test]
fn gamma_sends_allocate_nothing_once_warm() {
    let (a, b) = nics();
    let mk = |nic, me: u16| -> G {
        let mut g = Gamma::init_alloc(
            Config::new(9, 1, me),
            GROUPS,
            2,
            nic,
            StdClock::default(),
            0,
        )
        .unwrap();
        let buf: &'static mut [u8] = Vec::leak(vec![0u8; 4096]);
        g.set_active_port(1, 1 - me, 1, 1, Some(on_msg), None, 1, GO_BACK, Some(buf))
            .unwrap();
        g
    };
    let (mut a, mut b) = (mk(a, 0), mk(b, 1));
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

type L = Lfc<'static, MyriNic, StdClock, u64>;

fn on_packet(l: &mut L, _r: Received) -> Keep {
    *l.state_mut() += 1;
    Keep::No
}

#[test]
fn lfc_packets_allocate_nothing_once_warm() {
    let (a, b) = nics();
    let mk = |nic, me: u16| -> L {
        let mut l = Lfc::init_alloc(
            Config::new(9, 1, me),
            GROUPS,
            2,
            nic,
            StdClock::default(),
            Options::default(),
            on_packet,
            0,
        )
        .unwrap();
        l.set_idle(None);
        l
    };
    let (mut a, mut b) = (mk(a, 0), mk(b, 1));
    a.start_begin().unwrap();
    b.start_begin().unwrap();
    while !(a.start_test().unwrap() & b.start_test().unwrap()) {
        a.poll_network();
        b.poll_network();
    }
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

type Q = Qnix<'static, MyriNic, StdClock, Segments<'static>>;

#[test]
fn qnix_short_sends_allocate_nothing_once_warm() {
    let (a, b) = nics();
    let mk = |nic, me: u16| -> Q {
        let mut mem = Segments::new();
        let pool = mem.expose(Vec::leak(vec![0u8; 64 * 1024]));
        let mut q = Qnix::new(
            Config::new(9, 1, me),
            GROUPS,
            2,
            nic,
            StdClock::default(),
            mem,
        )
        .unwrap();
        q.set_pool(pool, 64 * 1024).unwrap();
        q.register(Name::new(1, me as i32), 1, 2).unwrap();
        q
    };
    let (mut a, mut b) = (mk(a, 0), mk(b, 1));
    while !(a.registered().unwrap() & b.registered().unwrap()) {}
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
}

type C = Cheetah<'static, MyriNic, StdClock, Segments<'static>>;

fn on_invoke(_c: &mut C, _who: u16, _tag: i32, data: &[u8]) {
    assert_eq!(data, [7u8; 8]);
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
}
