extern crate std;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::vec;
use std::vec::Vec;

use super::*;
use volley_core::engine::{NoMemory, Received, SendRequest};
use volley_core::phy::{Board, Liveness, SendPool};
use volley_core::sim::Pair;

/// 64-aligned zeroed memory standing for a shared mapping.
struct Mem {
    ptr: *mut u8,
    layout: Layout,
}

impl Mem {
    fn new(len: usize) -> Mem {
        let layout = Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Mem { ptr, layout }
    }
    fn region(&self) -> Region {
        // SAFETY: the allocation outlives every NIC in these tests (each test drops
        // its NICs before `Mem`), and it is only touched through regions.
        unsafe { Region::new(self.ptr, self.layout.size()) }.unwrap()
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: valid allocation; callers hold no NIC over it while scribbling.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// `VOLLEY_SEED` if set (to rerun a failure), else `default`.
fn seed_or(default: u64) -> u64 {
    std::env::var("VOLLEY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn geo() -> Geometry {
    Geometry::new(3, 4, 256).unwrap()
}

fn pair(mem: &Mem) -> (MyriNic, MyriNic) {
    let a = MyriNic::create(mem.region(), geo(), 0, 7, NicConfig::default()).unwrap();
    let b = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap();
    (a, b)
}

fn send(nic: &mut MyriNic, dst: u16, bytes: &[u8]) -> bool {
    match nic.transmit(Instant::ZERO, NodeAddr(dst)) {
        Some(t) => {
            t.consume(bytes.len(), |b| b.copy_from_slice(bytes));
            true
        }
        None => false,
    }
}

fn recv(nic: &mut MyriNic) -> Option<Vec<u8>> {
    nic.receive(Instant::ZERO)
        .map(|t| t.consume(|f| f.to_vec()))
}

#[test]
fn layout_is_cache_line_aligned_and_fits() {
    let g = geo();
    assert_eq!(g.mtu(), 240);
    assert_eq!(g.header_len(), 4096);
    assert_eq!(g.ring(0, 0) % 64, 0);
    assert_eq!(g.slot(2, 1, 3) % 64, 0);
    assert_eq!(g.slot(1, 2, 4), g.slot(1, 2, 0), "slot index wraps");
    let b = g.boards();
    assert_eq!(b.slot(2, 0) % 64, 0);
    assert_eq!(b.head(1, 0) % 64, 0, "a reader's words start a line");
    assert_eq!(b.slot(2, BOARD_SLOTS), b.slot(2, 0), "board index wraps");
    assert!(b.head(2, 2) < b.slot(2, 0), "heads before the board");
    assert!(
        g.slot(2, 2, 3) + 256 <= b.head(2, 0),
        "rings before the heads"
    );
    let r = g.rings();
    assert_eq!(
        r.pool_slot(2, 0),
        b.slot(2, BOARD_SLOTS - 1) + 256,
        "send slots after the board"
    );
    assert_eq!(r.pool_slot(1, 0) % 64, 0);
    assert!(r.pool_slot(1, POOL_SLOTS - 1) + POOL_SLOT <= g.ring(2, 0));
    let end = r.pool_slot(2, POOL_SLOTS - 1) + POOL_SLOT;
    assert_eq!(end, g.region_len().unwrap());
    let r = g.rings();
    for (dst, src, i) in [(0, 1, 0), (2, 1, 3), (1, 2, 7), (2, 0, u64::MAX)] {
        assert_eq!(r.ring(dst, src), g.ring(dst, src), "cached ring offsets");
        assert_eq!(r.slot(r.ring(dst, src), i), g.slot(dst, src, i));
    }
    assert!(Geometry::new(3, 6, 256).is_err());
    assert!(Geometry::new(3, 4, 100).is_err());
    assert!(Geometry::new(0, 4, 256).is_err());
}

#[test]
fn frames_flow_in_order_and_credits_run_out() {
    let mem = Mem::new(geo().region_len().unwrap());
    let (mut a, mut b) = pair(&mem);
    assert!(!a.all_joined(), "node 2 has not joined");
    let c = MyriNic::attach(mem.region(), 2, 7, NicConfig::default()).unwrap();
    assert!(a.all_joined() && b.all_joined());
    let caps = a.capabilities();
    assert!(caps.reliable && caps.integrity);
    for i in 0..4u8 {
        assert!(send(&mut a, 1, &[i; 100]));
    }
    assert!(!send(&mut a, 1, b"fifth"), "4 slots: no credit left");
    assert_eq!(a.stats().no_credit, 1);
    assert!(send(&mut a, 2, b"other ring"), "credits are per ring");
    assert_eq!(recv(&mut b).unwrap(), [0u8; 100]);
    assert!(send(&mut a, 1, b"fifth"), "a slot came back");
    for i in 1..4u8 {
        assert_eq!(recv(&mut b).unwrap(), [i; 100]);
    }
    assert_eq!(recv(&mut b).unwrap(), b"fifth");
    assert!(recv(&mut b).is_none());
    assert!(send(&mut b, 0, b"back"));
    assert_eq!(recv(&mut a).unwrap(), b"back");
    assert!(
        a.transmit(Instant::ZERO, NodeAddr(0)).is_none(),
        "not to itself"
    );
    assert!(a.transmit(Instant::ZERO, NodeAddr(9)).is_none());
    drop(c);
}

/// The receiver keeps its ring positions to itself between polls: a token dropped
/// unread leaves its frame for the next poll, and a node attached again on the same
/// region goes on from the frames its predecessor took.
#[test]
fn a_receiver_goes_on_where_it_stopped() {
    let mem = Mem::new(geo().region_len().unwrap());
    let (mut a, mut b) = pair(&mem);
    for i in 0..3u8 {
        assert!(send(&mut a, 1, &[i; 40]));
    }
    assert_eq!(recv(&mut b).unwrap(), [0u8; 40]);
    assert!(b.receive(Instant::ZERO).is_some(), "frame 1 is there");
    assert_eq!(
        recv(&mut b).unwrap(),
        [1u8; 40],
        "a dropped token takes nothing"
    );
    drop(b);
    let mut b = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap();
    assert_eq!(recv(&mut b).unwrap(), [2u8; 40], "not frame 0 or 1 again");
    assert!(recv(&mut b).is_none());
    // The ring wraps past its 4 slots with the new receiver.
    for i in 3..9u8 {
        assert!(send(&mut a, 1, &[i; 40]));
        assert_eq!(recv(&mut b).unwrap(), [i; 40]);
    }
    assert!(recv(&mut b).is_none());
}

#[test]
fn a_stale_region_is_not_joined_until_recreated() {
    let mem = Mem::new(geo().region_len().unwrap());
    let old = MyriNic::create(mem.region(), geo(), 0, 1, NicConfig::default()).unwrap();
    drop(old);
    match MyriNic::attach(mem.region(), 1, 2, NicConfig::default()) {
        Err(MyriError::NotReady { magic, generation }) => {
            assert_eq!((magic, generation), (MAGIC, 1));
        }
        other => panic!("joined a stale region: {other:?}"),
    }
    let _new = MyriNic::create(mem.region(), geo(), 0, 2, NicConfig::default()).unwrap();
    let b = MyriNic::attach(mem.region(), 1, 2, NicConfig::default()).unwrap();
    assert_eq!(b.state(0), NodeState::Alive);
}

#[test]
fn garbage_regions_are_rejected_with_a_reason() {
    let mut mem = Mem::new(geo().region_len().unwrap());
    let mut x = 0x1234_5678u32;
    for b in mem.bytes().iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let e = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap_err();
    assert!(matches!(e, MyriError::NotReady { .. }));
    assert!(std::format!("{e}").contains("stale or garbage"));
    // Valid magic and generation but an impossible geometry.
    mem.bytes()[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    mem.bytes()[8..12].copy_from_slice(&VERSION.to_le_bytes());
    mem.bytes()[24..32].copy_from_slice(&7u64.to_le_bytes());
    mem.bytes()[12..16].copy_from_slice(&3u32.to_le_bytes());
    mem.bytes()[16..20].copy_from_slice(&4u32.to_le_bytes());
    mem.bytes()[32..36].copy_from_slice(&256u32.to_le_bytes());
    mem.bytes()[20..24].copy_from_slice(&1_000_001u32.to_le_bytes());
    let e = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap_err();
    assert!(
        matches!(e, MyriError::Corrupt(w) if w.contains("slot size")),
        "{e:?}"
    );
    mem.bytes()[20..24].copy_from_slice(&(1u32 << 20).to_le_bytes());
    let e = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap_err();
    assert!(matches!(e, MyriError::TooSmall { .. }), "{e:?}");
    mem.bytes()[20..24].copy_from_slice(&256u32.to_le_bytes());
    // A board slot that is not a multiple of 64, or holds more than a frame.
    for bad in [100u32, 0, BOARD_SLOT_LIMIT + 64] {
        mem.bytes()[32..36].copy_from_slice(&bad.to_le_bytes());
        let e = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap_err();
        assert!(
            matches!(e, MyriError::Corrupt(w) if w.contains("board slot")),
            "{bad}: {e:?}"
        );
    }
    mem.bytes()[32..36].copy_from_slice(&256u32.to_le_bytes());
    assert!(
        MyriNic::attach(mem.region(), 3, 7, NicConfig::default()).is_err(),
        "node 3 of 3"
    );
}

#[test]
fn corrupt_slots_and_rings_are_skipped_without_panic() {
    let mut mem = Mem::new(geo().region_len().unwrap());
    let g = geo();
    {
        let (mut a, b) = pair(&mem);
        assert!(send(&mut a, 1, b"ok-1"));
        assert!(send(&mut a, 1, b"bad"));
        assert!(send(&mut a, 1, b"ok-2"));
        drop((a, b));
    }
    // A peer scribbles a length past the slot into the second frame.
    let slot = g.slot(1, 0, 1);
    mem.bytes()[slot + 8..slot + 12].copy_from_slice(&100_000u32.to_le_bytes());
    let mut b = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap();
    assert_eq!(recv(&mut b).unwrap(), b"ok-1");
    assert_eq!(recv(&mut b).unwrap(), b"ok-2");
    assert_eq!(b.stats().corrupt, 1);
    assert!(recv(&mut b).is_none());
    drop(b);
    // A sequence word from the future (or the past) is not a frame: nothing delivered.
    let slot = g.slot(1, 2, 0);
    mem.bytes()[slot..slot + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    mem.bytes()[slot + 8..slot + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut b = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap();
    assert!(recv(&mut b).is_none());
    assert_eq!(b.stats().corrupt, 0);
}

/// A frame of `len` bytes whose elided bytes (4..16, 52..56) are `t` and the others
/// count from `k`.
fn frame_with(len: usize, t: u8, k: u8) -> Vec<u8> {
    (0..len)
        .map(|i| match i {
            4..16 | 52..56 => t.wrapping_add(i as u8),
            _ => k.wrapping_add(i as u8),
        })
        .collect()
}

#[test]
fn short_frames_travel_compact_in_one_cache_line() {
    let mut mem = Mem::new(geo().region_len().unwrap());
    let g = geo();
    let (mut a, mut b) = pair(&mem);
    // 56 to 64 bytes with the ring's template: compact, the slot's second line
    // untouched; 113 to 128 bytes: compact, its third line untouched; shorter and
    // longer frames, and those that fill as many lines whole, as they are.
    let mut sent = Vec::new();
    // How far into each slot earlier frames wrote (the check of a line left
    // untouched holds where none did).
    let mut written = [0usize; 4];
    let lens = [56, 60, 64, 55, 65, 112, 113, 120, 128, 129, 200, 57];
    for (i, len) in lens.into_iter().enumerate() {
        let f = frame_with(len, 1, i as u8);
        assert!(send(&mut a, 1, &f));
        let slot = g.slot(1, 0, i as u64 % 4);
        let word = u32::from_le_bytes(mem.bytes()[slot + 8..slot + 12].try_into().unwrap());
        let before = std::mem::replace(&mut written[i % 4], 0);
        if (56..=64).contains(&len) || (113..=128).contains(&len) {
            assert_eq!(word, COMPACT | (len - ELIDED) as u32, "{len} bytes");
            let beyond = if len <= 64 { 64 } else { 128 };
            if before <= beyond {
                let untouched = &mem.bytes()[slot + beyond..slot + beyond + 64];
                assert!(untouched.iter().all(|&x| x == 0), "{len} bytes");
            }
            written[i % 4] = before.max(beyond);
        } else {
            assert_eq!(word, len as u32, "{len} bytes");
            written[i % 4] = before.max(16 + len);
        }
        sent.push(f);
        if i % 4 == 3 {
            for f in sent.drain(..) {
                assert_eq!(recv(&mut b).unwrap(), f);
            }
        }
    }
    for f in sent.drain(..) {
        assert_eq!(recv(&mut b).unwrap(), f);
    }
    assert_eq!(b.stats().rx_compact, 7);
    // Other elided bytes while a compact frame is unread: this one goes whole, and
    // the unread one still reads back with the template it was sent under.
    let (x, y) = (frame_with(64, 1, 9), frame_with(120, 2, 10));
    assert!(send(&mut a, 1, &x) && send(&mut a, 1, &y));
    assert_eq!(recv(&mut b).unwrap(), x);
    assert_eq!(recv(&mut b).unwrap(), y);
    assert_eq!(b.stats().rx_compact, 8);
    // Once everything was read, the template follows the new bytes.
    let z = frame_with(60, 2, 11);
    assert!(send(&mut a, 1, &z));
    assert_eq!(recv(&mut b).unwrap(), z);
    assert_eq!(b.stats().rx_compact, 9);
    // A compact length that no frame can have is a corrupt slot, skipped: one
    // between the classes, one past them.
    // (frames 15 to 18 of the ring; 16 and 17 are then scribbled on)
    for f in [&z, &z, &z, &x] {
        assert!(send(&mut a, 1, f));
    }
    drop((a, b));
    for (k, n) in [(16u64, 60u32), (17, 113)] {
        let slot = g.slot(1, 0, k % 4);
        mem.bytes()[slot + 8..slot + 12].copy_from_slice(&(COMPACT | n).to_le_bytes());
    }
    let mut b = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap();
    assert_eq!(recv(&mut b).unwrap(), z);
    assert_eq!(recv(&mut b).unwrap(), x);
    assert_eq!(b.stats().corrupt, 2);
    assert!(recv(&mut b).is_none());
}

/// The engine sends a short message over the rings under the compact header: the
/// frame, its slot's sequence and length words fit the slot's first line (up to 20
/// bytes of message), and the receiver knows its sender from the ring.
#[test]
fn short_messages_go_under_the_compact_header_in_one_line() {
    let mut mem = Mem::new(geo().region_len().unwrap());
    let (mut na, mut nb) = pair(&mem);
    let mut p = Pair::new(7, 4, 64);
    for (i, len) in [8usize, 20, 21].into_iter().enumerate() {
        let msg: &'static [u8] = Vec::leak(vec![i as u8 + 1; len]);
        let done = p.transfer(
            msg,
            &mut na,
            &mut nb,
            |_, _| {},
            50,
            Duration::from_micros(1),
        );
        assert!(done, "{len} bytes");
        assert_eq!(p.received, msg);
        // The ring slot still holds the frame as the sender wrote it: its length
        // word, then the frame after the slot's 16-byte header.
        let slot = geo().slot(1, 0, i as u64);
        let b = mem.bytes();
        let word = u32::from_le_bytes(b[slot + 8..slot + 12].try_into().unwrap());
        let frame = volley_core::wire::COMPACT_LEN + len;
        assert_eq!(
            (word, b[slot + 16]),
            (frame as u32, volley_core::wire::COMPACT_MAGIC)
        );
        assert_eq!(16 + frame <= 64, len <= 20, "{len} bytes");
    }
    assert_eq!(p.a.stats().tx_compact, 3);
    assert_eq!(p.b.stats().rx_compact, 3);
    assert_eq!(p.b.stats().rx_predicted, 2, "the channel's first opens it");
    assert_eq!(nb.stats().rx_compact, 0, "no template needed");
}

#[test]
fn fetch_and_add_lives_in_the_owners_nic_memory() {
    let mem = Mem::new(geo().region_len().unwrap());
    let (a, b) = pair(&mem);
    assert_eq!(a.fetch_and_add(1, 0, 1), Ok(0));
    assert_eq!(b.fetch_and_add(1, 0, 1), Ok(1));
    assert_eq!(a.fetch_and_add(1, 0, 5), Ok(2));
    assert_eq!(a.fetch_and_add(1, 3, 1), Ok(0), "counters are separate");
    assert_eq!(b.fetch_and_add(0, 0, 1), Ok(0), "and per node");
    assert_eq!(a.fetch_and_add(1, COUNTERS, 1), Err(MyriError::OutOfBounds));
    assert_eq!(a.fetch_and_add(5, 0, 1), Err(MyriError::BadNode));
}

/// The host's clock of the beacon test (nanoseconds), set by the test.
static HOST_NOW: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

fn host_now() -> u64 {
    HOST_NOW.load(Ordering::Relaxed)
}

/// A process whose program computes (no receive poll, so no heartbeat) while its
/// beacon beats is vouched for and stays alive past `dead_after`; once the beacon
/// stops it is neither after the vouching window; a node that left is never, and
/// without a shared clock no beacon counts.
#[test]
fn a_beacon_vouches_for_a_node_that_does_not_poll() {
    let mem = Mem::new(geo().region_len().unwrap());
    let cfg = NicConfig {
        dead_after: Duration::from_millis(10),
        pid: 1,
        host_clock: Some(host_now),
        interrupt: None,
    };
    let mut a = MyriNic::create(mem.region(), geo(), 0, 7, cfg).unwrap();
    let b = MyriNic::attach(mem.region(), 1, 7, cfg).unwrap();
    let c = MyriNic::attach(mem.region(), 2, 7, cfg).unwrap();
    let t = |ms| Instant::from_millis(ms);
    let ms = |ms: u64| ms * 1_000_000;
    let peer = NodeAddr(1);
    HOST_NOW.store(ms(1_000), Ordering::Relaxed);
    assert!(!a.peer_vouched(t(0), peer), "no beacon yet");
    assert!(a.peer_alive(t(0), peer));
    assert!(!a.peer_alive(t(20), peer), "no heartbeat, no beacon: dead");
    assert!(
        Beacon::new(mem.region(), 3).is_err(),
        "node 3 is not in the region"
    );
    let mut beacon = Beacon::new(mem.region(), 1).unwrap();
    for k in 0..30 {
        // The host's clock and the engine's run apart; only the host's counts.
        HOST_NOW.store(ms(1_000 + 100 * k), Ordering::Relaxed);
        beacon.beat(host_now());
        HOST_NOW.store(ms(1_050 + 100 * k), Ordering::Relaxed);
        assert!(a.peer_vouched(t(100 * k), peer), "beating, at {k}");
        assert!(
            a.peer_alive(t(100 * k + 30), peer),
            "alive past dead_after at {k}"
        );
    }
    // The process stops (killed without cleanup, its state still alive).
    let last = ms(1_000 + 100 * 29);
    HOST_NOW.store(last + VOUCH_WINDOW.total_nanos() - 1, Ordering::Relaxed);
    assert!(a.peer_vouched(t(5_000), peer), "within the window");
    HOST_NOW.store(last + VOUCH_WINDOW.total_nanos(), Ordering::Relaxed);
    assert!(!a.peer_vouched(t(5_000), peer), "still for the window");
    assert!(!a.peer_alive(t(5_000), peer), "and for dead_after");
    // A node that left is not vouched for, whatever its beacon says.
    let mut gone = Beacon::new(mem.region(), 2).unwrap();
    drop(c);
    gone.beat(host_now());
    assert!(!a.peer_vouched(t(5_000), NodeAddr(2)));
    // Without a shared clock the beacon says nothing.
    let mem2 = Mem::new(geo().region_len().unwrap());
    let plain = NicConfig {
        host_clock: None,
        ..cfg
    };
    let mut x = MyriNic::create(mem2.region(), geo(), 0, 8, plain).unwrap();
    let _y = MyriNic::attach(mem2.region(), 1, 8, plain).unwrap();
    let mut yb = Beacon::new(mem2.region(), 1).unwrap();
    yb.beat(host_now());
    assert!(!x.peer_vouched(t(0), peer));
    drop(b);
}

#[test]
fn dead_and_departed_peers_are_reported() {
    let mem = Mem::new(geo().region_len().unwrap());
    let cfg = NicConfig {
        dead_after: Duration::from_millis(10),
        pid: 1,
        host_clock: None,
        interrupt: None,
    };
    let mut a = MyriNic::create(mem.region(), geo(), 0, 7, cfg).unwrap();
    let mut b = MyriNic::attach(mem.region(), 1, 7, cfg).unwrap();
    let c = MyriNic::attach(mem.region(), 2, 7, cfg).unwrap();
    let t = |ms| Instant::from_millis(ms);
    assert!(a.peer_alive(t(0), NodeAddr(1)));
    b.receive(t(5)); // a heartbeat
    assert!(a.peer_alive(t(8), NodeAddr(1)));
    assert!(
        a.peer_alive(t(17), NodeAddr(1)),
        "10 ms since the beat was seen at 8"
    );
    assert!(
        !a.peer_alive(t(19), NodeAddr(1)),
        "silent for more than 10 ms"
    );
    b.receive(t(20));
    assert!(a.peer_alive(t(21), NodeAddr(1)), "beating again");
    assert!(send(&mut b, 0, b"x"), "a node that only sends beats too");
    assert!(a.peer_alive(t(30), NodeAddr(1)));
    assert!(
        a.peer_alive(t(39), NodeAddr(1)),
        "10 ms since the beat was seen at 30"
    );
    drop(c);
    assert_eq!(a.state(2), NodeState::Exited);
    assert!(a.all_joined(), "a node that left had joined");
    assert!(!a.peer_alive(t(21), NodeAddr(2)));
    a.mark_dead(1);
    assert_eq!(a.state(1), NodeState::Dead);
    assert!(!a.peer_alive(t(21), NodeAddr(1)));
    assert_eq!(a.pid(1), 1);
}

fn board_send(nic: &mut MyriNic, bytes: &[u8]) -> bool {
    nic.write(Instant::ZERO, bytes.len(), &mut |b| {
        b.copy_from_slice(bytes)
    })
}

/// Every frame `nic` takes from the boards now, with its writer.
fn board_take(nic: &mut MyriNic) -> Vec<(u16, Vec<u8>)> {
    let mut got = Vec::new();
    nic.read(Instant::ZERO, &mut |from, f| {
        got.push((from.0, f.to_vec()));
        BoardTake::Taken
    });
    got
}

/// A reader among several writers (not the first node, so its own ring and board
/// lie inside the scan) takes their frames looking first at the last sender's
/// ring, for at most `RX_BURST` frames in a row, then round the nodes from the
/// next; never one of its own. Its look sees a frame waiting until the last is
/// taken; its boards are read in node order, its own never, a refused frame again.
#[test]
fn a_reader_takes_every_writer_in_turn_and_never_itself() {
    let geo = Geometry::new(5, 32, 256).unwrap();
    let mem = Mem::new(geo.region_len().unwrap());
    let mut nics = vec![MyriNic::create(mem.region(), geo, 0, 7, NicConfig::default()).unwrap()];
    for n in 1..5 {
        nics.push(MyriNic::attach(mem.region(), n, 7, NicConfig::default()).unwrap());
    }
    let mut reader = nics.remove(2);
    assert!(!reader.rx_pending());
    assert!(recv(&mut reader).is_none());
    // Writers 4 and 1 send first, then 0 and 3; two frames each.
    for k in 0..2u8 {
        for (i, n) in [(3, 4u8), (1, 1), (0, 0), (2, 3)] {
            assert!(send(&mut nics[i], 2, &[n, k, 0, 0]));
        }
    }
    assert!(reader.rx_pending());
    let mut order = Vec::new();
    while let Some(f) = recv(&mut reader) {
        order.push((f[0], f[1]));
    }
    assert_eq!(
        order,
        [
            (0, 0),
            (0, 1),
            (1, 0),
            (1, 1),
            (3, 0),
            (3, 1),
            (4, 0),
            (4, 1)
        ]
    );
    assert!(!reader.rx_pending());
    // After a frame from 3, the next look begins there: 4 comes before 1.
    assert!(send(&mut nics[2], 2, b"3"));
    assert_eq!(recv(&mut reader).as_deref(), Some(&b"3"[..]));
    assert!(send(&mut nics[1], 2, b"1"));
    assert!(send(&mut nics[3], 2, b"4"));
    assert_eq!(recv(&mut reader).as_deref(), Some(&b"4"[..]));
    assert_eq!(recv(&mut reader).as_deref(), Some(&b"1"[..]));
    // A writer that keeps its ring full is taken from `RX_BURST` times in a row,
    // then another's frame comes.
    assert!(send(&mut nics[0], 2, &[0]));
    assert_eq!(recv(&mut reader).as_deref(), Some(&[0][..]));
    for i in 1..=20u8 {
        assert!(send(&mut nics[0], 2, &[i]));
    }
    assert!(send(&mut nics[1], 2, b"b"));
    for i in 1..RX_BURST as u8 {
        assert_eq!(recv(&mut reader).as_deref(), Some(&[i][..]));
    }
    assert_eq!(recv(&mut reader).as_deref(), Some(&b"b"[..]));
    for i in RX_BURST as u8..=20 {
        assert_eq!(recv(&mut reader).as_deref(), Some(&[i][..]));
    }
    assert!(recv(&mut reader).is_none());
    // Boards: the last node's and the first's, read in node order.
    assert!(board_send(&mut nics[3], b"from 4"));
    assert!(board_send(&mut nics[0], b"from 0"));
    assert!(reader.rx_pending(), "a board frame waits");
    let got = board_take(&mut reader);
    assert_eq!(got, [(0, b"from 0".to_vec()), (4, b"from 4".to_vec())]);
    assert!(!reader.rx_pending());
    // The reader's own board is not read back by itself.
    assert!(board_send(&mut reader, b"mine"));
    assert!(!reader.rx_pending());
    assert!(board_take(&mut reader).is_empty());
    assert_eq!(
        board_take(&mut nics[0]),
        [(2, b"mine".to_vec()), (4, b"from 4".to_vec())]
    );
    // A frame refused stays waiting, and is offered again.
    assert!(board_send(&mut nics[2], b"later"));
    let mut offered = 0;
    reader.read(Instant::ZERO, &mut |_, _| {
        offered += 1;
        BoardTake::Later
    });
    assert_eq!(offered, 1);
    assert!(reader.rx_pending(), "the refused frame still waits");
    assert_eq!(board_take(&mut reader), [(3, b"later".to_vec())]);
    assert!(!reader.rx_pending());
    assert!(board_take(&mut reader).is_empty());
}

/// A board frame is written once and read by every other node, in order; the
/// writer waits for the slowest reader still in the job, a refused frame stays
/// (holding back its writer's later ones), and a reader that left is passed over.
#[test]
fn board_frames_reach_every_reader_once_and_wait_for_the_slowest() {
    let mem = Mem::new(geo().region_len().unwrap());
    let (mut a, mut b) = pair(&mem);
    let mut c = MyriNic::attach(mem.region(), 2, 7, NicConfig::default()).unwrap();
    assert_eq!(a.capabilities().board_nodes, 3);
    assert_eq!(a.capabilities().board_mtu, 240);
    assert!(!board_send(&mut a, &[0; 241]), "longer than a board slot");
    for i in 0..BOARD_SLOTS as u8 {
        assert!(board_send(&mut a, &[i; 5]));
    }
    assert!(!board_send(&mut a, b"full"), "nobody has read yet");
    assert_eq!(a.stats().board_full, 1);
    // b refuses its third frame: it stays, and so does everything behind it.
    let mut seen = 0;
    b.read(Instant::ZERO, &mut |from, f| {
        assert_eq!((from, f), (NodeAddr(0), &[seen as u8; 5][..]));
        seen += 1;
        if seen < 3 {
            BoardTake::Taken
        } else {
            BoardTake::Later
        }
    });
    assert_eq!(seen, 3);
    let rest = board_take(&mut b);
    assert_eq!(rest.len(), BOARD_SLOTS as usize - 2);
    assert_eq!(rest[0].1, [2; 5], "the refused frame is offered again");
    assert!(!board_send(&mut a, b"full"), "c has read nothing");
    let got = board_take(&mut c);
    assert_eq!(got.len(), BOARD_SLOTS as usize, "c reads all of them once");
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, (from, f))| *from == 0 && f == &[i as u8; 5]));
    assert!(board_take(&mut c).is_empty());
    for _ in 0..BOARD_SLOTS {
        assert!(board_send(&mut a, b"lap 2"));
    }
    assert!(!board_send(&mut a, b"full"));
    // c leaves without reading lap 2; b reads it.
    drop(c);
    assert!(!board_send(&mut a, b"full"), "b is still behind");
    assert_eq!(board_take(&mut b).len(), BOARD_SLOTS as usize);
    assert!(
        board_send(&mut a, b"two"),
        "the departed reader is passed over"
    );
    assert_eq!(board_take(&mut b), vec![(0, b"two".to_vec())]);
    // Both ways at once: b's board is its own.
    assert!(board_send(&mut b, b"from b"));
    assert_eq!(board_take(&mut a), vec![(1, b"from b".to_vec())]);
    assert!(
        board_take(&mut a).is_empty(),
        "a's own frames are not offered to it"
    );
}

/// A reader whose heartbeat stops (its VM died: nobody marks it dead) holds the board
/// full only until `dead_after`; then the writer declares it dead and goes on.
#[test]
fn a_reader_whose_heartbeat_stops_is_declared_dead_by_a_full_board() {
    let mem = Mem::new(geo().region_len().unwrap());
    let (mut a, mut b) = pair(&mem);
    let c = MyriNic::attach(mem.region(), 2, 7, NicConfig::default()).unwrap();
    let dead_after = NicConfig::default().dead_after;
    let send_at = |nic: &mut MyriNic, t: Instant, bytes: &[u8]| {
        nic.write(t, bytes.len(), &mut |buf| buf.copy_from_slice(bytes))
    };
    let t0 = Instant::ZERO + Duration::from_secs(1);
    for i in 0..BOARD_SLOTS as u8 {
        assert!(send_at(&mut a, t0, &[i; 3]));
    }
    // b keeps reading (its heartbeat moves); c never polls again.
    assert_eq!(board_take(&mut b).len(), BOARD_SLOTS as usize);
    assert!(!send_at(&mut a, t0, b"full"), "c has read nothing");
    assert!(
        !send_at(
            &mut a,
            t0 + Duration::from_micros(dead_after.total_micros() - 1),
            b"full"
        ),
        "a stopped heartbeat is not death before dead_after"
    );
    assert_eq!(a.state(2), NodeState::Alive);
    assert!(send_at(&mut a, t0 + dead_after, b"on"));
    assert_eq!(a.state(2), NodeState::Dead);
    assert_eq!(board_take(&mut b), vec![(0, b"on".to_vec())]);
    drop(c);
}

/// A board slot with an impossible length or garbage bytes is skipped or
/// dropped by the engine, never a panic, and the frames behind it still come.
#[test]
fn garbage_on_a_board_is_skipped() {
    let mut mem = Mem::new(geo().region_len().unwrap());
    let g = geo();
    let (mut a, mut b) = pair(&mem);
    assert!(board_send(&mut a, b"one"));
    assert!(board_send(&mut a, b"two"));
    let slot = g.boards().slot(0, 0);
    mem.bytes()[slot + 8..slot + 12].copy_from_slice(&10_000u32.to_le_bytes());
    assert_eq!(board_take(&mut b), vec![(0, b"two".to_vec())]);
    assert_eq!(b.stats().corrupt, 1);
    drop((a, b));
}

#[test]
fn the_engine_takes_its_credit_only_path_over_the_nic() {
    let g = Geometry::new(2, 16, 2048).unwrap();
    let mem = Mem::new(g.region_len().unwrap());
    let mut na = MyriNic::create(mem.region(), g, 0, 9, NicConfig::default()).unwrap();
    let mut nb = MyriNic::attach(mem.region(), 1, 9, NicConfig::default()).unwrap();
    let mut p = Pair::new(5, 4, 1 << 20);
    let msg: &'static [u8] = Vec::leak((0..1u32 << 20).map(|i| (i % 251) as u8).collect());
    let done = p.transfer(
        msg,
        &mut na,
        &mut nb,
        |_, _| {},
        10_000,
        Duration::from_micros(1),
    );
    let (a, b) = (&p.a, &p.b);
    assert!(done, "the send did not complete");
    assert_eq!(p.received.as_slice(), msg);
    assert_eq!(a.stats().retransmits, 0);
    assert!(a.stats().tx_frames >= 530, "1 MiB in 1984-byte frames");
    assert!(
        b.stats().tx_acks < 100,
        "credits come back in batches, not per frame"
    );
    assert_eq!(nb.stats().rx_frames, a.stats().tx_frames);
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

        /// A valid header over scribbled rings and node table: attaching, receiving,
        /// transmitting and liveness checks never panic or leave the region.
        #[test]
        fn scribbled_regions_never_panic(
            scribbles in proptest::collection::vec((0usize..1 << 20, any::<u64>()), 0..300),
            header in proptest::collection::vec((8usize..64, any::<u8>()), 0..4),
        ) {
            let g = geo();
            let mut mem = Mem::new(g.region_len().unwrap());
            {
                let (mut a, _b) = pair(&mem);
                for i in 0..3u8 {
                    send(&mut a, 1, &[i; 50]);
                }
            }
            let len = mem.layout.size();
            for (at, v) in scribbles {
                let at = (at % (len - 8)) & !7;
                mem.bytes()[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            for (at, v) in header {
                mem.bytes()[at] = v;
            }
            if let Ok(mut b) = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()) {
                for _ in 0..10 {
                    if let Some(t) = b.receive(Instant::ZERO) {
                        let n = t.consume(|f| f.len());
                        prop_assert!(n <= b.geometry().mtu());
                    }
                    let _ = send(&mut b, 0, b"reply");
                    let _ = b.peer_alive(Instant::from_millis(1), NodeAddr(0));
                    let _ = b.fetch_and_add(2, 1, 1);
                }
            }
        }
    }
}

/// Another process writing into the ring *while* the receiver parses a frame (here a
/// thread stands for it): headers, lengths and payloads change under the engine. It
/// may see wrong frames, dropped as malformed or bad, but never panics or reads out
/// of range: the slot length and the frame header are read once into private memory.
#[test]
fn a_concurrent_writer_never_panics_the_receiver() {
    use core::sync::atomic::{AtomicBool, AtomicU8};
    use std::sync::Arc;
    use volley_core::rng::Rng;

    let seed = seed_or(0xC0C0_0001);
    let g = Geometry::new(2, 4, 1024).unwrap();
    let mem = Mem::new(g.region_len().unwrap());
    let mut a = MyriNic::create(mem.region(), g, 0, 7, NicConfig::default()).unwrap();
    let mut b = MyriNic::attach(mem.region(), 1, 7, NicConfig::default()).unwrap();
    let mut pair = Pair::new(7, 2, 4096);
    pair.a.set_capabilities(a.capabilities());
    pair.b.set_capabilities(b.capabilities());
    // The sending engine's frames are real (valid headers), so the receiver parses
    // them deep before the scribbles make them inconsistent.
    let send = |e: &mut volley_core::engine::Engine<'static>| {
        let body = volley_core::engine::Body::Borrowed(&[0x5A; 3000]);
        if let Ok(h) = e.start_send(SendRequest {
            port: 0,
            head: &[],
            body,
            reliable: false,
        }) {
            let _ = e.detach(h);
        }
    };
    send(&mut pair.a);
    let stop = Arc::new(AtomicBool::new(false));
    let (base, len) = (mem.ptr as usize, mem.layout.size());
    let ring = g.slot(1, 0, 0);
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut rng = Rng::new(seed);
        let mut writes = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            // The frame headers and first payload bytes in the slots of ring 0 -> 1
            // (scribbles over the ring's own words are the proptest's business).
            let slot = rng.below(4) as usize * 1024;
            let at = ring + slot + SLOT_HEADER + rng.below(80) as usize;
            debug_assert!(at < len);
            // SAFETY: `at` is inside the allocation, which outlives this thread (it is
            // joined before `mem` drops); byte stores race with the reader on purpose,
            // as a foreign process's would.
            unsafe { AtomicU8::from_ptr((base + at) as *mut u8) }
                .store(rng.next_u64() as u8, Ordering::Relaxed);
            writes += 1;
        }
        writes
    });
    let mut seen = 0u64;
    for i in 0..200_000u64 {
        let now = Instant::from_micros(i);
        // Keep the ring full of fresh, valid frames.
        let _ = pair.a.poll_transmit(now, &mut a, None);
        if pair.a.is_quiescent() {
            send(&mut pair.a);
        }
        while let Some(t) = b.receive(now) {
            t.consume(|f| pair.b.handle_frame(now, Received::from(f), &mut NoMemory));
            seen += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().expect("the writer does not panic");
    std::println!(
        "seed {seed}: {seen} frames received under {writes} concurrent writes; {:?}",
        pair.b.stats()
    );
    assert!(seen > 1000, "seed {seed}: the receiver saw frames");
}

/// `n` NICs on one fresh region with the smallest rings.
fn cluster(n: u32) -> (Mem, Vec<MyriNic>) {
    cluster_on(Geometry::new(n, 2, 128).unwrap())
}

/// A NIC for each node of `g`, on one fresh region (node 0 creates it).
fn cluster_on(g: Geometry) -> (Mem, Vec<MyriNic>) {
    let mem = Mem::new(g.region_len().unwrap());
    let mut nics = vec![MyriNic::create(mem.region(), g, 0, 3, NicConfig::default()).unwrap()];
    for i in 1..g.nodes {
        nics.push(MyriNic::attach(mem.region(), i, 3, NicConfig::default()).unwrap());
    }
    (mem, nics)
}

fn step(nic: &mut MyriNic, n: u32) -> bool {
    let me = nic.node() as u16;
    nic.barrier_step(me, n as u16, |i| Some(i as u32)).unwrap()
}

/// Nobody leaves barrier `e` before the last member has arrived, whoever is last and
/// however often the others poll; then everybody does. Over several epochs, because
/// the words are never reset.
#[test]
fn the_nic_barrier_waits_for_every_member() {
    for n in [1u32, 2, 3, 5, 6, 17, 64] {
        let (_mem, mut nics) = cluster(n);
        for epoch in 0..(n + 2) {
            let late = (epoch * 7 + 3) % n;
            for _ in 0..3 {
                for nic in nics.iter_mut().filter(|c| c.node() != late) {
                    assert!(
                        !step(nic, n),
                        "n {n} epoch {epoch}: node {} left before node {late} arrived",
                        nic.node()
                    );
                }
            }
            // Leaves arrive at once; inner members need their subtree, so the
            // release takes as many sweeps as the tree is deep.
            let mut done = vec![false; n as usize];
            done[late as usize] = step(&mut nics[late as usize], n);
            for _ in 0..8 {
                for nic in nics.iter_mut().rev() {
                    let i = nic.node() as usize;
                    if !done[i] {
                        done[i] = step(nic, n);
                    }
                }
            }
            assert!(done.iter().all(|&d| d), "n {n} epoch {epoch}: {done:?}");
        }
    }
}

/// Words near `u32::MAX` wrap without a false release.
#[test]
fn the_nic_barrier_counts_through_the_wrap() {
    let (mut mem, nics) = cluster(6);
    let g = nics[0].geometry();
    drop(nics);
    let start = u32::MAX - 2;
    for node in 0..6 {
        for field in [off::BARRIER_ARRIVED, off::BARRIER_RELEASED] {
            let at = g.barrier_entry(node) + field;
            mem.bytes()[at..at + 4].copy_from_slice(&start.to_le_bytes());
        }
    }
    // Attaching picks the count up from the node's own word.
    let mut nics: Vec<_> = (0..6)
        .map(|i| MyriNic::attach(mem.region(), i, 3, NicConfig::default()).unwrap())
        .collect();
    for epoch in 0..6 {
        assert!(!step(&mut nics[0], 6) && !step(&mut nics[1], 6));
        let mut done = [false; 6];
        for _ in 0..4 {
            for (i, nic) in nics.iter_mut().enumerate().rev() {
                done[i] = done[i] || step(nic, 6);
            }
        }
        assert!(
            done.iter().all(|&d| d),
            "barrier {epoch} after the start: {done:?}"
        );
    }
    assert_eq!(nics[3].barriers, 3, "went through 0");
}

/// Threads standing for processes: whatever the interleaving, no member passes
/// barrier `e` before every member has done its work for `e`.
#[test]
fn the_nic_barrier_separates_phases_across_threads() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    const N: u32 = 6;
    const BARRIERS: u32 = 300;
    let (_mem, nics) = cluster(N);
    let work = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = nics
        .into_iter()
        .map(|mut nic| {
            let work = Arc::clone(&work);
            std::thread::spawn(move || {
                for e in 0..BARRIERS {
                    work.fetch_add(1, Ordering::SeqCst);
                    while !step(&mut nic, N) {
                        std::thread::yield_now();
                    }
                    let seen = work.load(Ordering::SeqCst);
                    assert!(
                        seen >= ((e + 1) * N) as usize,
                        "node {} left barrier {e} having seen {seen} arrivals",
                        nic.node()
                    );
                }
                nic
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a member failed");
    }
}

#[test]
fn host_words_are_each_nodes_own_and_start_cleared() {
    let mem = Mem::new(geo().region_len().unwrap());
    let cfg = NicConfig::default();
    let a = MyriNic::create(mem.region(), geo(), 0, 7, cfg).unwrap();
    let b = MyriNic::attach(mem.region(), 1, 7, cfg).unwrap();
    assert_eq!(a.host(1), (0, 0), "nothing published yet");
    b.publish_host(0xdead_b000, 2);
    assert_eq!(a.host(1), (0xdead_b000, 2));
    assert_eq!(a.host(0), (0, 0), "a node writes only its own words");
    b.set_host_version(3);
    assert_eq!(a.host(1), (0xdead_b000, 3), "a change begun");
    assert_eq!(a.host(9), (0, 0), "a node out of range has none");
    // A rank restarted on the region starts without its predecessor's words.
    drop(b);
    let b2 = MyriNic::attach(mem.region(), 1, 7, cfg).unwrap();
    assert_eq!(b2.host(1), (0, 0));
    assert_eq!(a.host(1), (0, 0));
}

/// A frame sent from a send slot carries a descriptor in the ring, and the receiver
/// reads the payload where the sender wrote it: same bytes, same address.
#[test]
fn frames_from_send_slots_are_read_where_the_sender_wrote_them() {
    let mem = Mem::new(geo().region_len().unwrap());
    let (mut a, mut b) = pair(&mem);
    let pattern: Vec<u8> = (0..POOL_SLOT).map(|i| (i * 7) as u8).collect();
    a.slot_mut(3).unwrap().copy_from_slice(&pattern);
    let at = a.slot(3).unwrap().as_ptr();
    let n = POOL_INLINE + 1;
    assert!(a.send_slot(Instant::ZERO, NodeAddr(1), b"HEAD", 3, n, b"TAIL"));
    let (head, body, addr) = b
        .receive(Instant::ZERO)
        .unwrap()
        .consume_parts(|h, p| (h.to_vec(), p.to_vec(), p.as_ptr()));
    assert_eq!(head, b"HEADTAIL");
    assert_eq!(body, pattern[..n]);
    assert_eq!(
        addr, at,
        "the payload is read in the sender's slot, not a copy"
    );
    // A reader that wants the frame whole gets it joined.
    assert!(a.send_slot(Instant::ZERO, NodeAddr(1), b"H", 3, POOL_SLOT, b"T"));
    let whole = [&b"H"[..], &pattern[..], &b"T"[..]].concat();
    // (header, payload, tag: the frame as it would lie in one piece)
    assert_eq!(recv(&mut b).unwrap(), whole);
    // A short payload rides in the ring slot: one frame, read in one place.
    assert!(a.send_slot(Instant::ZERO, NodeAddr(1), b"HEAD", 3, 5, b"TAIL"));
    let (head, body) = b
        .receive(Instant::ZERO)
        .unwrap()
        .consume_parts(|h, p| (h.to_vec(), p.to_vec()));
    assert_eq!(head, [&b"HEAD"[..], &pattern[..5], &b"TAIL"[..]].concat());
    assert!(body.is_empty());
    assert_eq!((a.stats().tx_pooled, a.stats().tx_pool_inline), (3, 1));
    assert_eq!(b.stats().rx_pooled, 2);
    assert_eq!(a.stats().tx_frames, 3);
    // Impossible requests are refused at the sender.
    assert!(!a.send_slot(Instant::ZERO, NodeAddr(1), b"H", POOL_SLOTS, 5, b""));
    assert!(!a.send_slot(Instant::ZERO, NodeAddr(1), b"H", 0, POOL_SLOT + 1, b""));
    let big = [0u8; INDIRECT_INLINE_MAX + 1];
    assert!(!a.send_slot(Instant::ZERO, NodeAddr(1), &big, 0, 5, b""));
    assert!(!a.send_slot(Instant::ZERO, NodeAddr(0), b"H", 0, 5, b""));
    assert!(a.slot(POOL_SLOTS).is_none());
    assert!(a.slot_mut(POOL_SLOTS).is_none());
}

/// Descriptors are untrusted: one naming a slot past the pool, a payload longer
/// than a slot, or an inline part too long is skipped and counted, never followed;
/// the frames around it arrive.
#[test]
fn forged_send_slot_descriptors_are_skipped() {
    let mut mem = Mem::new(geo().region_len().unwrap());
    let (mut a, mut b) = pair(&mem);
    let g = geo();
    // (slot index, bytes before the payload, payload length, length word) of each.
    let forged: [(u16, u16, u32, u32); 5] = [
        (POOL_SLOTS as u16, 4, 8, INDIRECT | 4),
        (u16::MAX, 4, 8, INDIRECT | 4),
        (0, 4, POOL_SLOT as u32 + 1, INDIRECT | 4),
        (0, 4, 8, INDIRECT | (INDIRECT_INLINE_MAX as u32 + 1)),
        (0, 5, 8, INDIRECT | 4),
    ];
    for (k, (slot, split, len, word)) in forged.into_iter().enumerate() {
        assert!(a.send_slot(Instant::ZERO, NodeAddr(1), b"GOOD", 0, 300, b""));
        // Scribble over the descriptor in place, as a hostile peer could.
        let at = g.slot(1, 0, k as u64);
        let bytes = mem.bytes();
        bytes[at + 8..at + 12].copy_from_slice(&word.to_le_bytes());
        bytes[at + 16..at + 18].copy_from_slice(&slot.to_le_bytes());
        bytes[at + 18..at + 20].copy_from_slice(&split.to_le_bytes());
        bytes[at + 20..at + 24].copy_from_slice(&len.to_le_bytes());
        assert!(b.receive(Instant::ZERO).is_none(), "forgery {k} was taken");
        assert_eq!(b.stats().corrupt, k as u64 + 1);
    }
    a.slot_mut(1).unwrap()[..3].copy_from_slice(b"abc");
    assert!(a.send_slot(Instant::ZERO, NodeAddr(1), b"ok:", 1, 3, b""));
    assert_eq!(recv(&mut b).unwrap(), b"ok:abc");
}

/// The board's `unread`: a writer waits for a live reader that has not read its board,
/// not for one that holds the next frame back for its program, nor for a node not
/// in the job, nor for a `heads` word that cannot be true.
#[test]
fn board_unread_waits_only_for_live_readers_behind() {
    let mem = Mem::new(geo().region_len().unwrap());
    let (mut a, mut b) = pair(&mem);
    let now = Instant::ZERO;
    assert!(!a.unread(now), "nothing written");
    assert!(board_send(&mut a, b"one"));
    assert!(board_send(&mut a, b"two"));
    assert!(a.unread(now), "b has read nothing (node 2 never joined)");
    b.read(now, &mut |_, _| BoardTake::Held);
    assert!(!a.unread(now), "b holds the first back");
    b.read(now, &mut |_, _| BoardTake::Later);
    assert!(a.unread(now), "refused for a moment: waited for again");
    assert_eq!(board_take(&mut b).len(), 2);
    assert!(!a.unread(now), "all read");
    assert!(board_send(&mut a, b"three"));
    assert!(a.unread(now));
    let heads = a.geometry().boards().head(1, 0);
    mem.region()
        .u64_at(heads)
        .unwrap()
        .store(99, Ordering::Release);
    assert!(!a.unread(now), "a head ahead of the tail is garbage");
}

/// The ring access that skips `Region`'s check per access (`Rings::words`,
/// `slot_words`, `template`, and the frame bytes after them) stays inside the region
/// and aligned for every ring and slot of geometries at the edges of what
/// `Geometry::check` allows, in a region exactly `region_len` long: the proof in
/// `Rings`' comment, checked. Fails if the layout arithmetic changes under it.
#[test]
fn unchecked_ring_access_stays_inside_every_valid_geometry() {
    let shapes = [
        (1, 2, 128, 128),
        (2, 2, 192, 4224),
        (3, 4, 256, 128),
        (7, 8, 4160, 192),
        (MAX_NODES as u32, 2, 128, 128),
    ];
    for (nodes, slots, slot_size, board_slot) in shapes {
        let geo = Geometry {
            nodes,
            slots,
            slot_size,
            board_slot,
        };
        geo.validate().unwrap();
        let len = geo.region_len().unwrap();
        // SAFETY: the region is never read or written here, only its length is
        // looked at (the address is aligned and not null, as `new` asks).
        let region = unsafe { Region::new(core::ptr::without_provenance_mut(64), len) }.unwrap();
        let rings = geo.rings();
        let inside = |off: usize, n: usize, align: usize| {
            assert!(
                off + n <= region.len() && off.is_multiple_of(align),
                "{off}+{n} of {len} ({nodes} nodes, {slots}x{slot_size})"
            );
        };
        for dst in 0..nodes {
            inside(geo.node_entry(dst) + off::NODE_HEARTBEAT, 8, 8);
            for src in 0..nodes {
                let ring = rings.ring(dst, src);
                assert_eq!(ring, geo.ring(dst, src));
                inside(ring + off::RING_TAIL, 8, 8);
                inside(ring + off::RING_HEAD, 8, 8);
                inside(ring + off::RING_TEMPLATE, ELIDED, 1);
                let ring_end = ring + geo.ring_len().unwrap();
                assert!(ring_end <= geo.nic(dst) + geo.nic_len().unwrap());
                for index in 0..u64::from(slots) * 2 {
                    let slot = rings.slot(ring, index);
                    assert_eq!(slot, geo.slot(dst, src, index));
                    assert!(
                        slot >= ring + off::RING_SLOTS
                            && slot + geo.mtu() + SLOT_HEADER <= ring_end
                    );
                    inside(slot, 8, 8);
                    inside(slot + 8, 4, 4);
                    inside(slot + SLOT_HEADER, geo.mtu(), 1);
                }
            }
        }
    }
}

static RAISED: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

fn count_raise(_: &AtomicU32) {
    RAISED.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn an_armed_node_is_interrupted_once_by_the_next_frame() {
    let mem = Mem::new(geo().region_len().unwrap());
    let cfg = NicConfig {
        interrupt: Some(count_raise),
        ..NicConfig::default()
    };
    let mut a = MyriNic::create(mem.region(), geo(), 0, 7, cfg).unwrap();
    let mut b = MyriNic::attach(mem.region(), 1, 7, cfg).unwrap();
    let before = RAISED.load(Ordering::SeqCst);
    // Not armed: a frame raises nothing.
    assert!(send(&mut a, 1, &[1; 8]));
    assert_eq!(RAISED.load(Ordering::SeqCst), before);
    // A frame waits: arming refuses, and leaves the word quiet.
    assert!(!b.arm_interrupt());
    assert_eq!(
        b.interrupt_word().unwrap().load(Ordering::SeqCst),
        IRQ_QUIET
    );
    assert_eq!(recv(&mut b).unwrap(), [1; 8]);
    // Armed: the next frame raises it once; the one after finds it raised.
    assert!(b.arm_interrupt());
    assert!(send(&mut a, 1, &[2; 8]));
    assert!(send(&mut a, 1, &[3; 8]));
    assert_eq!(RAISED.load(Ordering::SeqCst), before + 1);
    assert_eq!(
        b.interrupt_word().unwrap().load(Ordering::SeqCst),
        IRQ_RAISED
    );
    // A board frame raises an armed reader too.
    assert_eq!(recv(&mut b).unwrap(), [2; 8]);
    assert_eq!(recv(&mut b).unwrap(), [3; 8]);
    assert!(b.arm_interrupt());
    assert!(board_send(&mut a, &[4; 8]));
    assert_eq!(RAISED.load(Ordering::SeqCst), before + 2);
    // Disarmed: nothing raised.
    assert_eq!(board_take(&mut b).len(), 1);
    assert!(b.arm_interrupt());
    b.disarm_interrupt();
    assert!(send(&mut a, 1, &[5; 8]));
    assert_eq!(RAISED.load(Ordering::SeqCst), before + 2);
    assert_eq!(
        b.interrupt_word().unwrap().load(Ordering::SeqCst),
        IRQ_QUIET
    );
}
