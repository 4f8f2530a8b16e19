//! The blocking GAMMA API, one thread per process over a shared in-memory fabric:
//! what a GAMMA program looks like, SPMD style.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use volley_core::engine::{Config, Error, Group, Members};
use volley_core::gamma::{
    Gamma, StdClock, Upcall, BARRIER_PORT, BROADCAST, BROADCAST_PORT, ERR_MSGTOOLONG, GO_AHEAD,
    GO_BACK,
};
use volley_core::sim::{ThreadFabric, ThreadPort};
use volley_core::time::{Duration, Instant};

const GROUPS: &[Group<'static>] = &[Group {
    id: 42,
    members: Members::Range { first: 0, count: 4 },
}];

#[derive(Default)]
struct State {
    handled: u32,
    last_len: usize,
    errnos: Vec<u8>,
    first_byte: u8,
}

fn on_recv(u: &mut Upcall<'_, '_, State>) {
    let len = u.len();
    let first = u.data().first().copied().unwrap_or(0);
    let st = u.state();
    st.handled += 1;
    st.last_len = len;
    st.first_byte = first;
    // The handler tells the main program through a semaphore of its own.
    let _ = u.signal(7);
}

fn on_error(u: &mut Upcall<'_, '_, State>) {
    let e = u.errno().map_or(0, |e| e as u8);
    u.state().errnos.push(e);
    let _ = u.sigerr(8);
}

type G = Gamma<'static, ThreadPort, StdClock, State>;

fn leak(n: usize) -> &'static mut [u8] {
    Vec::leak(vec![0u8; n])
}

fn node(fabric: &ThreadFabric, i: u16) -> G {
    let cfg = Config::new(0xFEED, 42, i);
    Gamma::init_alloc(
        cfg,
        GROUPS,
        4,
        fabric.port(i as usize),
        StdClock::default(),
        State::default(),
    )
    .unwrap()
}

fn deadline(g: &G) -> Instant {
    g.time() + Duration::from_secs(20)
}

fn fill(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(salt))
        .collect()
}

#[test]
fn spmd_program_over_threads() {
    let fabric = ThreadFabric::new(4, 1500);
    let arrived = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..4u16)
        .map(|me| {
            let fabric = fabric.clone();
            let arrived = arrived.clone();
            thread::spawn(move || program(node(&fabric, me), arrived))
        })
        .collect();
    for h in handles {
        h.join().expect("a node failed");
    }
}

fn program(mut g: G, arrived: Arc<AtomicUsize>) {
    let me = g.my_node();
    assert_eq!(g.how_many_nodes(), 4);
    assert_eq!(g.my_par_pid(), 42);
    let sizes = [0usize, 8, 20, 1024, 100_000, 1 << 20];

    // Misuse is a typed error.
    assert_eq!(
        g.set_passive_port(BROADCAST_PORT, 1, 42, 1, 0, GO_BACK, None),
        Err(Error::ReservedPort)
    );
    assert_eq!(
        g.set_passive_port(BARRIER_PORT, 1, 42, 1, 0, GO_BACK, None),
        Err(Error::ReservedPort)
    );
    assert_eq!(
        g.set_passive_port(1, me, 42, 1, 0, GO_BACK, None),
        Err(Error::SelfConnect)
    );
    assert_eq!(g.signal(1024), Err(Error::InvalidSemaphore));

    // Port 1: ping-pong between 0 and 1. Port 2: broadcast from 0. Port 3: 2 -> 3 tests.
    let peer = [1, 0, 3, 2][me as usize];
    g.set_active_port(
        1,
        peer,
        42,
        1,
        Some(on_recv),
        Some(on_error),
        1,
        GO_BACK,
        Some(leak(1 << 20)),
    )
    .unwrap();
    let bdest = if me == 0 { BROADCAST } else { 0 };
    g.set_passive_port(2, bdest, 42, 2, 2, GO_BACK, Some(leak(64)))
        .unwrap();
    g.set_active_port(
        3,
        peer,
        42,
        3,
        None,
        Some(on_error),
        3,
        GO_AHEAD,
        Some(leak(30)),
    )
    .unwrap();
    g.sync().unwrap();

    if me < 2 {
        for (k, &len) in sizes.iter().enumerate() {
            let data = fill(len, k as u8);
            if me == 0 {
                let t0 = g.time();
                g.send_flowctl(1, &data).unwrap();
                assert_eq!(g.wait_deadline(7, 1, deadline(&g)), Ok(0));
                assert!(Gamma::<ThreadPort, StdClock, State>::time_diff(g.time(), t0) >= 0.0);
                assert_eq!(g.state().last_len, len);
                assert_eq!(
                    &g.buffer(1).unwrap()[..len],
                    &data[..],
                    "pong of {len} bytes"
                );
            } else {
                assert_eq!(g.wait_deadline(7, 1, deadline(&g)), Ok(0));
                assert_eq!(
                    &g.buffer(1).unwrap()[..len],
                    &data[..],
                    "ping of {len} bytes"
                );
                g.send_flowctl(1, &data).unwrap();
            }
        }
        assert_eq!(
            g.wait_deadline(1, sizes.len() as u32, deadline(&g)),
            Ok(0),
            "port semaphore counted each message"
        );
    } else if me == 2 {
        // Two pieces, the first at most 20 bytes; then best effort and non-blocking.
        assert_eq!(g.send_2p(3, &[0; 21], b"x"), Err(Error::FirstPieceTooLong));
        g.send_2p_flowctl(3, b"head:", b"body").unwrap();
        g.send(3, b"plain").unwrap();
        let h = g.isend_2p_flowctl(3, b"A", b"BCDEFGHIJ").unwrap();
        g.wsend(h).unwrap();
        // This one overflows the 30-byte GO_AHEAD buffer: MSGTOOLONG at the receiver.
        let big: &'static [u8] = Vec::leak(vec![9u8; 40]);
        let h = g.isend_flowctl(3, big).unwrap();
        while !g.tsend(h).unwrap() {}
    } else {
        // Four messages hit the port; the error went to the error handler, which
        // signalled error semaphore 8: a wait on it returns minus the count.
        assert_eq!(g.wait_deadline(3, 4, deadline(&g)), Ok(0));
        assert_eq!(g.state().errnos, vec![ERR_MSGTOOLONG]);
        assert_eq!(g.wait(8, 0), Ok(-1), "one truncation reported by wait");
        assert_eq!(g.wait(8, 0), Ok(0), "and cleared");
        // GO_AHEAD gathered the messages one after the other.
        assert_eq!(
            &g.buffer(3).unwrap()[..28],
            b"head:bodyplainABCDEFGHIJ\x09\x09\x09\x09"
        );
    }

    // Broadcast from 0 on port 2.
    if me == 0 {
        g.send_flowctl(2, b"to everybody").unwrap();
    } else {
        assert_eq!(g.wait_deadline(2, 1, deadline(&g)), Ok(0));
        assert_eq!(&g.buffer(2).unwrap()[..12], b"to everybody");
    }

    // Barrier: nobody passes before all arrived.
    arrived.fetch_add(1, Ordering::SeqCst);
    g.sync().unwrap();
    assert_eq!(arrived.load(Ordering::SeqCst), 4);
    g.sync().unwrap();
    let handled = g.atomic(|s| s.handled);
    if me < 2 {
        assert_eq!(handled as usize, sizes.len());
    }
    g.sync().unwrap();
    let (_dev, state) = g.exit();
    assert!(state.errnos.is_empty() || me == 3);
    let _ = state.first_byte;
}

/// The idle hook runs after 64 empty polls in a row by default, after every empty poll
/// with `set_idle_after(1)` (a hook that halts until an interrupt).
#[test]
fn the_idle_hook_runs_after_the_configured_number_of_empty_polls() {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    fn hook() {
        CALLS.fetch_add(1, Ordering::SeqCst);
    }
    let fabric = ThreadFabric::new(4, 1500);
    let mut g = node(&fabric, 0);
    g.set_idle(Some(hook));
    let soon = |g: &G| g.time() + Duration::from_millis(30);
    // Nobody signals semaphore 3: the wait polls until its deadline.
    let d = soon(&g);
    assert_eq!(g.wait_deadline(3, 1, d), Err(Error::Timeout));
    let slow = CALLS.swap(0, Ordering::SeqCst);
    g.set_idle_after(1);
    let d = soon(&g);
    assert_eq!(g.wait_deadline(3, 1, d), Err(Error::Timeout));
    let fast = CALLS.swap(0, Ordering::SeqCst);
    assert!(slow > 0, "the hook ran");
    assert!(
        fast > 16 * slow,
        "every empty poll: {fast} calls against {slow}"
    );
    g.set_idle(None);
    let d = soon(&g);
    let _ = g.wait_deadline(3, 1, d);
    assert_eq!(CALLS.load(Ordering::SeqCst), 0, "no hook, no calls");
}
