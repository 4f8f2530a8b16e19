//! The whole stack over the Myrinet-like NIC model: GAMMA, LFC, QNIX and Cheetah
//! endpoints on one region in one process, standing for separate processes, using
//! what the NIC does in its own memory (the broadcast board, the barrier, the send
//! slots, fetch-and-add) through the device's services. The NIC's own tests are in
//! `src/tests.rs`.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::Ordering;

use volley_core::phy::{Board, BoardTake, Capabilities, Device, SendPool};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;
use volley_myri::*;

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

fn board_send(nic: &mut MyriNic, bytes: &[u8]) -> bool {
    nic.write(Instant::ZERO, bytes.len(), &mut |b| {
        b.copy_from_slice(bytes)
    })
}

/// LFC's fetch-and-add served in NIC memory: the owner never polls (its CPU takes no
/// part) and every caller gets the next value.
#[test]
fn fetch_and_add_is_served_in_nic_memory_without_the_owner() {
    use volley_core::engine::{Config, Group, Members};
    use volley_core::gamma::{Clock, Gamma};
    #[derive(Debug, Clone, Copy)]
    struct Zero;
    impl Clock for Zero {
        fn now(&self) -> Instant {
            Instant::ZERO
        }
    }
    static GROUPS: &[Group<'static>] = &[Group {
        id: 1,
        members: Members::Range { first: 0, count: 3 },
    }];
    let mem = Mem::new(geo().region_len().unwrap());
    let (_owner, b) = pair(&mem);
    let c = MyriNic::attach(mem.region(), 2, 7, NicConfig::default()).unwrap();
    let mut gb = Gamma::init_alloc(Config::new(7, 1, 1), GROUPS, 3, b, Zero, ()).unwrap();
    let mut gc = Gamma::init_alloc(Config::new(7, 1, 2), GROUPS, 3, c, Zero, ()).unwrap();
    let mut seen = Vec::new();
    for k in 0..10 {
        let g = if k % 2 == 0 { &mut gb } else { &mut gc };
        seen.push(g.fetch_add(0, 5, 3).unwrap());
    }
    assert_eq!(seen, (0..10).map(|k| 3 * k).collect::<Vec<u32>>());
    assert_eq!(gb.engine().stats().tx_frames, 0, "no frame: the NIC did it");
    assert_eq!(
        gb.fetch_add(0, 8, 1),
        Err(volley_core::engine::Error::InvalidCounter)
    );
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

/// GAMMA on each of `nics`, one group of them all, every barrier in NIC memory.
fn gammas(
    nics: Vec<MyriNic>,
    flat: bool,
) -> Vec<volley_core::gamma::Gamma<'static, MyriNic, volley_core::time::StdClock>> {
    use volley_core::engine::{Config, Group, Members};
    let n = nics.len() as u16;
    let groups: &'static [Group<'static>] = Vec::leak(vec![Group {
        id: 1,
        members: Members::Range { first: 0, count: n },
    }]);
    nics.into_iter()
        .enumerate()
        .map(|(i, nic)| {
            let mut cfg = Config::new(7, 1, i as u16);
            cfg.device_barrier = true;
            if flat {
                cfg.bcast_tree = None;
            }
            let clock = volley_core::time::StdClock::default();
            volley_core::gamma::Gamma::init_alloc(cfg, groups, n as usize, nic, clock, ()).unwrap()
        })
        .collect()
}

/// GAMMA's `gamma_sync` over the NIC: no frame sent, every barrier counted as the
/// device's; a member that leaves makes the others' barrier fail, not hang.
#[test]
fn gamma_sync_runs_in_nic_memory_and_fails_on_a_departed_member() {
    use volley_core::engine::Error;
    let (_mem, nics) = cluster(5);
    let mut gs = gammas(nics, false);
    for _ in 0..50 {
        for g in gs.iter_mut() {
            g.sync_start().unwrap();
        }
        let mut done = [false; 5];
        for _ in 0..100 {
            for (i, g) in gs.iter_mut().enumerate() {
                done[i] |= g.sync_test().unwrap();
            }
        }
        assert!(done.iter().all(|&d| d), "{done:?}");
    }
    for g in &gs {
        let s = g.engine().stats();
        assert_eq!((s.barriers, s.device_barriers, s.tx_frames), (50, 50, 0));
    }
    // The frame barrier on the same rings when asked (`Config::device_barrier`).
    for g in gs.iter_mut() {
        g.engine_mut().set_device_barrier(false).unwrap();
        g.sync_start().unwrap();
    }
    let mut done = [false; 5];
    for _ in 0..1000 {
        for (i, g) in gs.iter_mut().enumerate() {
            done[i] |= g.sync_test().unwrap();
        }
    }
    assert!(done.iter().all(|&d| d), "frame barrier: {done:?}");
    for g in gs.iter_mut() {
        let s = g.engine().stats();
        assert_eq!((s.barriers, s.device_barriers), (51, 50));
        assert!(s.tx_frames > 0, "tokens went as frames");
        g.engine_mut().set_device_barrier(true).unwrap();
    }
    // New engines on the same NICs (another personality, say) continue the NICs'
    // count: the first barrier still waits for the last member.
    let mut gs = gammas(gs.into_iter().map(|g| g.exit().0).collect(), false);
    for g in gs.iter_mut().take(4) {
        g.sync_start().unwrap();
    }
    for _ in 0..20 {
        for g in gs.iter_mut().take(4) {
            assert!(!g.sync_test().unwrap(), "passed without node 4");
        }
    }
    gs[4].sync_start().unwrap();
    let mut done = [false; 5];
    for _ in 0..100 {
        for (i, g) in gs.iter_mut().enumerate() {
            done[i] |= g.sync_test().unwrap();
        }
    }
    assert!(done.iter().all(|&d| d), "{done:?}");
    drop(gs.pop()); // leaves the region: its state word says so
    for g in gs.iter_mut() {
        g.sync_start().unwrap();
    }
    let t0 = std::time::Instant::now();
    let mut failed = [false; 4];
    while !failed.iter().all(|&f| f) {
        assert!(t0.elapsed().as_secs() < 10, "a barrier hung: {failed:?}");
        for (i, g) in gs.iter_mut().enumerate() {
            if !failed[i] {
                match g.sync_test() {
                    Ok(done) => assert!(!done, "node {i} passed a barrier without node 4"),
                    Err(e) => {
                        assert_eq!(e, Error::SendFailure);
                        failed[i] = true;
                    }
                }
            }
        }
    }
}

type MyriQnix = volley_core::qnix::Qnix<
    'static,
    MyriNic,
    volley_core::time::StdClock,
    volley_core::cheetah::Segments<'static>,
>;

/// Memory every QNIX process of [`qnixes`] exposes (receive regions start here).
const QNIX_MEM: u64 = 1 << 40;

/// `n` QNIX processes of application 5 on one region, registered, barriers in NIC
/// memory, each with 64 KiB at [`QNIX_MEM`].
fn qnixes(n: u16) -> (Mem, Vec<MyriQnix>) {
    use volley_core::cheetah::Segments;
    use volley_core::engine::{Config, Group, Members};
    use volley_core::qnix::{Name, Qnix};
    let (mem, nics) = cluster_on(Geometry::new(n as u32, 8, 2048).unwrap());
    let groups: &'static [Group<'static>] = Vec::leak(vec![Group {
        id: 1,
        members: Members::Range { first: 0, count: n },
    }]);
    let mut qs: Vec<MyriQnix> = nics
        .into_iter()
        .enumerate()
        .map(|(i, nic)| {
            let mut cfg = Config::new(7, 1, i as u16);
            cfg.device_barrier = true;
            let clock = volley_core::time::StdClock::default();
            let mut seg = Segments::new();
            assert_eq!(seg.expose(Vec::leak(vec![0u8; 64 * 1024])), QNIX_MEM);
            let mut q = Qnix::new(cfg, groups, n as usize, nic, clock, seg).unwrap();
            q.register(Name::new(5, i as i32), 5, n as i32).unwrap();
            q
        })
        .collect();
    let mut reg = vec![false; n as usize];
    qnix_steps(&mut qs, "registration", &mut |qs| {
        for (r, q) in reg.iter_mut().zip(qs.iter_mut()) {
            *r = *r || q.registered().unwrap();
        }
        reg.iter().all(|&r| r)
    });
    (mem, qs)
}

/// Steps every process in turn until `done`, failing after 20 s.
fn qnix_steps(qs: &mut [MyriQnix], what: &str, done: &mut dyn FnMut(&mut [MyriQnix]) -> bool) {
    let t0 = std::time::Instant::now();
    while !done(qs) {
        assert!(t0.elapsed().as_secs() < 20, "{what}");
        for q in qs.iter_mut() {
            q.step();
        }
    }
}

/// A posting call runs only the transmit half of the NIC step, but every eighth
/// post in a row runs all of it: a program that spins on a receive's doorbell
/// calling only posting functions (no NIC thread) still gets its message.
#[test]
fn a_qnix_process_spinning_on_a_doorbell_while_posting_still_receives() {
    use volley_core::qnix::{Name, Region, BUSY, DONE};
    let (_mem, mut qs) = qnixes(2);
    let (from, to) = (Name::new(5, 0), Name::new(5, 1));
    let r = qs[1]
        .recv_context(from, 1, true, 0, 8, Region::Segments(vec![(QNIX_MEM, 8)]))
        .unwrap();
    qs[1].receive(r).unwrap();
    let s = qs[0]
        .send_context(to, 1, false, 0, 8, Region::Data(b"doorbell".to_vec()))
        .unwrap();
    qs[0].send_short(s).unwrap();
    let mut posts = 0;
    while qs[1].recv_doorbell(r) == BUSY && posts < 40 {
        // Only posting calls: receives for messages that never come.
        let other = qs[1]
            .recv_context(
                from,
                100 + posts,
                false,
                0,
                8,
                Region::Segments(vec![(QNIX_MEM + 64, 8)]),
            )
            .unwrap();
        qs[1].receive(other).unwrap();
        posts += 1;
    }
    assert_eq!(qs[1].recv_doorbell(r), DONE, "after {posts} posts");
    assert!(posts <= 8, "{posts} posts");
    assert_eq!(qs[1].poll_for_receive(r), Ok(8));
    assert_eq!(&qs[1].memory().segment(QNIX_MEM).unwrap()[..8], b"doorbell");
}

/// QNIX's broadcast to the whole application (and a multicast to every other
/// process) is written once on the sender's board in NIC memory, not sent to each
/// member, and every member still matches the sender's messages in the order sent:
/// the sends before it (more than a ring holds, so some still wait at the sender
/// when the board is written), the broadcast, the send after it (which the ring
/// hands over before the board is read). A multicast to some members goes there
/// too and only they take it; a broadcast too long for the board goes member by
/// member.
#[test]
fn qnix_broadcast_to_the_whole_application_goes_once_through_the_board_in_order() {
    use volley_core::qnix::{Name, Region, DONE};
    const N: u16 = 4;
    const ROUNDS: u32 = 30;
    let (_mem, mut qs) = qnixes(N);
    let tag = 3;
    let others: Vec<Name> = (1..N as i32).map(|m| Name::new(5, m)).collect();
    let msg = |k: usize, round: u32| std::format!("{k:08}{round:08}").into_bytes();
    let send = |q: &mut MyriQnix, to: Name, data: Vec<u8>| {
        let len = data.len();
        q.send_context(to, tag, true, 0, len, Region::Data(data))
            .unwrap()
    };
    for round in 0..ROUNDS {
        // Sends before the broadcast: more than a ring's 8 frames every other
        // pair of rounds (the broadcast comes early), one otherwise (the send
        // after it comes first).
        let before = if round % 4 < 2 { 12 } else { 1 };
        // Every member posts its receives from process 0, all with one tag.
        let mut rc = vec![vec![]; N as usize];
        for (m, q) in qs.iter_mut().enumerate().skip(1) {
            for k in 0..before + 2 {
                let region = Region::Segments(vec![(QNIX_MEM + k as u64 * 64, 16)]);
                let r = q
                    .recv_context(Name::new(5, 0), tag, true, 0, 16, region)
                    .unwrap();
                q.receive(r).unwrap();
                rc[m].push(r);
            }
        }
        let mut sc = vec![];
        for k in 0..before + 2 {
            if k == before {
                let c = send(&mut qs[0], Name::new(5, 0), msg(k, round));
                if round % 2 == 0 {
                    qs[0].broadcast_short(c, 5).unwrap();
                } else {
                    qs[0].multicast_short(c, &others).unwrap();
                }
                sc.push(c);
                continue;
            }
            for &to in &others {
                let c = send(&mut qs[0], to, msg(k, round));
                qs[0].send_short(c).unwrap();
                sc.push(c);
            }
        }
        qnix_steps(&mut qs, "every message", &mut |qs| {
            (1..N as usize).all(|m| rc[m].iter().all(|&r| qs[m].recv_doorbell(r) == DONE))
                && sc.iter().all(|&c| qs[0].send_doorbell(c) == DONE)
        });
        for (m, q) in qs.iter_mut().enumerate().skip(1) {
            for (k, &r) in rc[m].iter().enumerate() {
                assert_eq!(q.poll_for_receive(r), Ok(16));
                let seg = q.memory().segment(QNIX_MEM).unwrap();
                let got = &seg[k * 64..k * 64 + 16];
                assert_eq!(
                    got,
                    &msg(k, round)[..],
                    "round {round}, member {m}, receive {k}: {}",
                    std::string::String::from_utf8_lossy(got)
                );
            }
        }
        for c in sc {
            qs[0].poll_for_send(c).unwrap();
        }
    }
    let st = qs[0].stats();
    assert_eq!(st.board_broadcasts, ROUNDS as u64, "{st:?}");
    assert_eq!(qs[0].engine().stats().board_tx, ROUNDS as u64);
    assert!(
        qs[0].engine().stats().board_now > 0,
        "written in the NIC step that launched them"
    );
    let parked: u64 = qs.iter().map(|q| q.stats().parked).sum();
    assert!(
        parked > 0,
        "no message ever overtook a broadcast: the wait went untested"
    );
    let early: u64 = qs.iter().map(|q| q.stats().early_boards).sum();
    assert!(
        early > 0,
        "no broadcast ever came before the sends ahead of it"
    );
    // After a broadcast, a long send by rendezvous: its request, which the ring
    // hands over before the board is read, waits for the broadcast too.
    let long = 20_000;
    let mut rc = vec![];
    for (m, q) in qs.iter_mut().enumerate().skip(1) {
        let mut r = vec![];
        for (at, len) in [(0u64, 16), (64, 16), (32768, long)] {
            let region = Region::Segments(vec![(QNIX_MEM + at, len)]);
            let c = q
                .recv_context(Name::new(5, 0), tag, true, 0, len, region)
                .unwrap();
            q.receive(c).unwrap();
            r.push(c);
        }
        rc.push((m, r));
    }
    let mut sc = vec![];
    for &to in &others {
        let c = send(&mut qs[0], to, msg(0, 99));
        qs[0].send_short(c).unwrap();
        sc.push(c);
    }
    let c = send(&mut qs[0], Name::new(5, 0), msg(1, 99));
    qs[0].broadcast_short(c, 5).unwrap();
    sc.push(c);
    qs[0].memory_mut().segment_mut(QNIX_MEM).unwrap()[..long].fill(0x5a);
    let rendezvous = qs[0].stats().rendezvous;
    for &to in &others {
        let region = Region::Segments(vec![(QNIX_MEM, long)]);
        let c = qs[0].send_context(to, tag, true, 0, long, region).unwrap();
        qs[0].send(c).unwrap();
        sc.push(c);
    }
    qnix_steps(&mut qs, "a long send after a broadcast", &mut |qs| {
        rc.iter()
            .all(|(m, r)| r.iter().all(|&c| qs[*m].recv_doorbell(c) == DONE))
            && sc.iter().all(|&c| qs[0].send_doorbell(c) == DONE)
    });
    for (m, r) in rc {
        let q = &mut qs[m];
        assert_eq!(q.poll_for_receive(r[0]), Ok(16));
        assert_eq!(q.poll_for_receive(r[1]), Ok(16));
        assert_eq!(q.poll_for_receive(r[2]), Ok(long), "member {m}");
        let seg = q.memory().segment(QNIX_MEM).unwrap();
        assert_eq!(&seg[..16], &msg(0, 99)[..], "member {m}");
        assert_eq!(
            &seg[64..80],
            &msg(1, 99)[..],
            "member {m}: the broadcast second"
        );
        assert!(seg[32768..32768 + long].iter().all(|&x| x == 0x5a));
    }
    for c in sc {
        qs[0].poll_for_send(c).unwrap();
    }
    assert_eq!(
        qs[0].stats().rendezvous,
        rendezvous + 3,
        "the long sends' way"
    );
    // To some of the processes: through the board, which the one left out reads
    // and counts but does not take (its receive waits for a message of its own).
    let boards = qs[0].stats().board_broadcasts;
    let mut rc = vec![];
    for (m, q) in qs.iter_mut().enumerate().skip(1) {
        let region = Region::Segments(vec![(QNIX_MEM + 1024, 16)]);
        let r = q
            .recv_context(Name::new(5, 0), tag, true, 0, 16, region)
            .unwrap();
        q.receive(r).unwrap();
        rc.push((m, r));
    }
    let c = send(&mut qs[0], Name::new(5, 0), msg(1, 1));
    qs[0].multicast_short(c, &others[..2]).unwrap();
    qnix_steps(&mut qs, "a multicast to two", &mut |qs| {
        rc[..2].iter().all(|&(m, r)| qs[m].recv_doorbell(r) == DONE)
    });
    assert_eq!(qs[0].stats().board_broadcasts, boards + 1);
    for _ in 0..100 {
        for q in qs.iter_mut() {
            q.step();
        }
    }
    let (left_out, r3) = rc[2];
    assert_ne!(qs[left_out].recv_doorbell(r3), DONE, "not for it");
    let c3 = send(&mut qs[0], others[2], msg(3, 3));
    qs[0].send_short(c3).unwrap();
    qnix_steps(&mut qs, "its own message", &mut |qs| {
        qs[left_out].recv_doorbell(r3) == DONE
    });
    for (m, r) in rc {
        assert_eq!(qs[m].poll_for_receive(r), Ok(16));
        let want = if m == left_out { msg(3, 3) } else { msg(1, 1) };
        assert_eq!(
            &qs[m].memory().segment(QNIX_MEM).unwrap()[1024..1040],
            &want[..]
        );
    }
    qs[0].poll_for_send(c).unwrap();
    qs[0].poll_for_send(c3).unwrap();
    // Too long for a board slot: member by member.
    let long = vec![7u8; 3000];
    let mut rc = vec![];
    for (m, q) in qs.iter_mut().enumerate().skip(1) {
        let region = Region::Segments(vec![(QNIX_MEM + 1024, long.len())]);
        let r = q
            .recv_context(Name::new(5, 0), tag, true, 0, long.len(), region)
            .unwrap();
        q.receive(r).unwrap();
        rc.push((m, r));
    }
    let c = send(&mut qs[0], Name::new(5, 0), long.clone());
    qs[0].broadcast_short(c, 5).unwrap();
    qnix_steps(&mut qs, "member by member", &mut |qs| {
        rc.iter().all(|&(m, r)| qs[m].recv_doorbell(r) == DONE)
    });
    for (m, r) in rc {
        assert_eq!(qs[m].poll_for_receive(r), Ok(long.len()));
        let seg = qs[m].memory().segment(QNIX_MEM).unwrap();
        assert_eq!(&seg[1024..1024 + long.len()], &long[..]);
    }
    qs[0].poll_for_send(c).unwrap();
    assert_eq!(qs[0].stats().board_broadcasts, boards + 1);
}

/// Two processes that take turns, each posting a broadcast and then only the other
/// stepping: the board needs nothing more from its sender (no wait for acks).
#[test]
fn a_qnix_board_broadcast_needs_no_further_step_of_its_sender() {
    use volley_core::qnix::Region;
    let (_mem, mut qs) = qnixes(2);
    let b = qs.pop().unwrap();
    let a = qs.pop().unwrap();
    let mut pair = [a, b];
    for i in 0..200 {
        let (from, to) = (i % 2, 1 - i % 2);
        let (me, peer) = (pair[to].name(), pair[from].name());
        let region = Region::Segments(vec![(QNIX_MEM, 8)]);
        let r = pair[to].recv_context(peer, 1, true, 0, 8, region).unwrap();
        pair[to].receive(r).unwrap();
        let s = pair[from]
            .send_context(me, 1, false, 0, 8, Region::Data(vec![i as u8; 8]))
            .unwrap();
        pair[from].broadcast_short(s, 5).unwrap();
        assert_eq!(pair[to].poll_for_receive(r), Ok(8), "broadcast {i}");
        assert_eq!(
            pair[to].memory().segment(QNIX_MEM).unwrap()[..8],
            [i as u8; 8]
        );
    }
    assert_eq!(pair[0].stats().board_broadcasts, 100);
}

/// QNIX's `qx_barrier` on the application's group, the whole fabric, runs in NIC
/// memory: nobody's doorbell rings before the last member has arrived, and no frame
/// carries a token. A group formed with `join_group` keeps its own barrier over
/// packets (its barriers may interleave with others' differently at each member).
#[test]
fn qx_barrier_on_the_whole_application_runs_in_nic_memory() {
    use volley_core::qnix::{Name, Region, BUSY, DONE};
    type Q = MyriQnix;
    const N: u16 = 4;
    let (_mem, mut qs) = qnixes(N);
    let poll_until = |qs: &mut [Q], what: &str, done: &dyn Fn(&[Q]) -> bool| {
        qnix_steps(qs, what, &mut |qs| done(qs))
    };
    let ctx = |q: &mut Q| {
        q.send_context(Name::new(5, 0), 0, true, 0, 0, Region::None)
            .unwrap()
    };
    let mut frames = vec![];
    for round in 0..20u32 {
        if round == 1 {
            // The first barrier sent the acks registration owed (a member arriving
            // at the NIC barrier waits for its sends to be acknowledged).
            frames = qs.iter().map(|q| q.engine().stats().tx_frames).collect();
        }
        let late = (round % N as u32) as usize;
        let mut c = [0; N as usize];
        for (i, q) in qs.iter_mut().enumerate().filter(|&(i, _)| i != late) {
            c[i] = ctx(q);
            q.barrier(c[i], 5, N as i32).unwrap();
        }
        for _ in 0..50 {
            for q in qs.iter_mut() {
                q.step();
            }
        }
        for (i, q) in qs.iter().enumerate().filter(|&(i, _)| i != late) {
            assert_eq!(q.send_doorbell(c[i]), BUSY, "round {round}: {i} left early");
        }
        c[late] = ctx(&mut qs[late]);
        qs[late].barrier(c[late], 5, N as i32).unwrap();
        poll_until(&mut qs, "barrier", &|qs| {
            qs.iter()
                .enumerate()
                .all(|(i, q)| q.send_doorbell(c[i]) == DONE)
        });
        for (i, q) in qs.iter_mut().enumerate() {
            q.poll_for_send(c[i]).unwrap();
        }
    }
    for (q, f) in qs.iter().zip(&frames) {
        let (s, e) = (q.stats(), q.engine().stats());
        assert_eq!((s.barriers, s.engine_barriers), (20, 20));
        assert_eq!(e.device_barriers, 20);
        assert_eq!(e.tx_frames, *f, "a barrier after the first sent a frame");
    }
    // Members 0, 1 and 2 form group 77: its barrier goes over packets.
    let mut c = [0; 3];
    for (i, q) in qs.iter_mut().take(3).enumerate() {
        c[i] = ctx(q);
        q.join_group(c[i], 77, 3).unwrap();
    }
    poll_until(&mut qs, "join", &|qs| {
        (0..3).all(|i| qs[i].send_doorbell(c[i]) == DONE)
    });
    for (i, q) in qs.iter_mut().take(3).enumerate() {
        q.poll_for_send(c[i]).unwrap();
        c[i] = ctx(q);
        q.barrier(c[i], 77, 3).unwrap();
    }
    poll_until(&mut qs, "group barrier", &|qs| {
        (0..3).all(|i| qs[i].send_doorbell(c[i]) == DONE)
    });
    for q in qs.iter().take(3) {
        let (s, e) = (q.stats(), q.engine().stats());
        assert_eq!((s.barriers, s.engine_barriers), (21, 20));
        assert_eq!(e.device_barriers, 20);
    }
}

/// The NIC barrier sends no token behind earlier frames, so a member arrives only
/// once its own sends have landed: a message sent before `gamma_sync` is whole in
/// every receiver's port when the barrier ends anywhere.
#[test]
fn a_message_sent_before_a_nic_barrier_has_landed_when_it_ends() {
    use volley_core::engine::BROADCAST;
    use volley_core::gamma::GO_BACK;
    // Many times the window of 128-byte slots: it cannot leave in one poll.
    let msg: &'static [u8] = Vec::leak((0..64 * 1024).map(|i| (i * 7 % 251) as u8).collect());
    let (_mem, nics) = cluster(4);
    // Sent by the root to every member itself: the drain covers the frames a
    // member sends, not those its relays pass on down a broadcast tree.
    let mut gs = gammas(nics, true);
    gs[0]
        .set_passive_port(5, BROADCAST, 1, 5, 5, GO_BACK, None)
        .unwrap();
    for g in &mut gs[1..] {
        let buf = Vec::leak(vec![0u8; msg.len()]);
        g.set_passive_port(5, 0, 1, 5, 5, GO_BACK, Some(buf))
            .unwrap();
    }
    gs[0].isend_flowctl(5, msg).unwrap();
    for g in gs.iter_mut() {
        g.sync_start().unwrap();
    }
    let mut done = [false; 4];
    let t0 = std::time::Instant::now();
    while !done.iter().all(|&d| d) {
        assert!(t0.elapsed().as_secs() < 20, "the barrier hung: {done:?}");
        for i in 0..4 {
            if done[i] || !gs[i].sync_test().unwrap() {
                continue;
            }
            done[i] = true;
            // Whoever leaves first: every receiver has the whole message by now.
            for (k, g) in gs.iter().enumerate().skip(1) {
                let count = g.engine().ports().semaphore(5).unwrap().count;
                assert_eq!(count, 1, "member {i} left while {k} had not got it");
                assert_eq!(g.buffer(5).unwrap(), msg, "member {k}'s copy");
            }
        }
    }
    for g in &gs {
        assert_eq!(g.engine().stats().device_barriers, 1);
    }
}

/// A message its receiver refuses for now (here: the port is not bound yet) does not
/// hold the NIC barrier up: the receiver's program decides when it lands, perhaps
/// only after the barrier, as it does here.
#[test]
fn a_refused_message_does_not_hold_the_nic_barrier() {
    use volley_core::gamma::GO_BACK;
    let (_mem, nics) = cluster(2);
    let mut gs = gammas(nics, false);
    gs[0]
        .set_passive_port(5, 1, 1, 5, 5, GO_BACK, None)
        .unwrap();
    gs[0].isend_flowctl(5, b"after the barrier").unwrap();
    for g in gs.iter_mut() {
        g.sync_start().unwrap();
    }
    let mut done = [false; 2];
    let t0 = std::time::Instant::now();
    while !done.iter().all(|&d| d) {
        assert!(t0.elapsed().as_secs() < 5, "the barrier waited: {done:?}");
        for (i, g) in gs.iter_mut().enumerate() {
            done[i] |= g.sync_test().unwrap();
        }
    }
    assert!(gs[1].engine().stats().rx_refused > 0, "it was refused");
    gs[1]
        .set_passive_port(5, 0, 1, 5, 5, GO_BACK, Some(Vec::leak(vec![0; 64])))
        .unwrap();
    while gs[1].engine().ports().semaphore(5).unwrap().count == 0 {
        assert!(t0.elapsed().as_secs() < 10, "the message never landed");
        gs[0].poll();
        gs[1].poll();
    }
    assert_eq!(&gs[1].buffer(5).unwrap()[..17], b"after the barrier");
}

/// Records each broadcast's length and first byte.
fn on_bcast(up: &mut volley_core::gamma::Upcall<'_, 'static, Vec<(usize, u8)>>) {
    let rec = (up.msg_len(), up.data().first().copied().unwrap_or(0));
    up.state().push(rec);
}

type BcastGamma =
    volley_core::gamma::Gamma<'static, MyriNic, volley_core::time::StdClock, Vec<(usize, u8)>>;

/// `n` GAMMA instances on a fresh region of 1 KiB slots: instance 0 broadcasts
/// from its port 5, the others record what reaches their port 5.
fn bcast_group(n: u16) -> (Mem, Vec<BcastGamma>) {
    bcast_group_with(n, None, None)
}

/// [`bcast_group`] with another unbound-port grace, and one member that leaves
/// its port 5 unbound.
fn bcast_group_with(
    n: u16,
    grace: Option<Duration>,
    unbound: Option<usize>,
) -> (Mem, Vec<BcastGamma>) {
    bcast_group_on(Geometry::new(n as u32, 8, 1024).unwrap(), grace, unbound)
}

/// [`bcast_group_with`] on a region of geometry `geo`.
fn bcast_group_on(
    geo: Geometry,
    grace: Option<Duration>,
    unbound: Option<usize>,
) -> (Mem, Vec<BcastGamma>) {
    use volley_core::engine::{Config, Group, Members, BROADCAST};
    use volley_core::gamma::{Gamma, GO_BACK};
    let n = geo.nodes as u16;
    let (mem, nics) = cluster_on(geo);
    let groups: &'static [Group<'static>] = Vec::leak(vec![Group {
        id: 1,
        members: Members::Range { first: 0, count: n },
    }]);
    let mut gs: Vec<BcastGamma> = (0..n)
        .zip(nics)
        .map(|(i, nic)| {
            let clock = volley_core::time::StdClock::default();
            let mut cfg = Config::new(7, 1, i);
            cfg.unbound_grace = grace.unwrap_or(cfg.unbound_grace);
            Gamma::init_alloc(cfg, groups, n as usize, nic, clock, Vec::new()).unwrap()
        })
        .collect();
    gs[0]
        .set_passive_port(5, BROADCAST, 1, 5, 5, GO_BACK, None)
        .unwrap();
    for (i, g) in gs.iter_mut().enumerate().skip(1) {
        if unbound != Some(i) {
            bind_bcast(g);
        }
        g.poll();
    }
    gs[0].poll();
    (mem, gs)
}

fn bind_bcast(g: &mut BcastGamma) {
    let buf = Vec::leak(vec![0u8; 8192]);
    g.set_active_port(
        5,
        0,
        1,
        5,
        Some(on_bcast),
        None,
        5,
        volley_core::gamma::GO_BACK,
        Some(buf),
    )
    .unwrap();
}

/// Polls every instance until `done`, failing with `what` after `secs` seconds
/// from `t0`.
fn poll_until(
    gs: &mut [BcastGamma],
    t0: std::time::Instant,
    secs: u64,
    what: &str,
    done: impl Fn(&[BcastGamma]) -> bool,
) {
    while !done(gs) {
        assert!(t0.elapsed().as_secs() < secs, "{what}");
        for g in gs.iter_mut() {
            g.poll();
        }
    }
}

/// Polls every instance until each member has recorded `want` broadcasts.
fn poll_until_recorded(gs: &mut [BcastGamma], want: usize, t0: std::time::Instant) {
    poll_until(gs, t0, 20, "broadcasts stuck", |gs| {
        gs[1..].iter().all(|g| g.state().len() >= want)
    });
}

/// Frames a `len`-byte broadcast takes on a board of `board_slot`-byte slots
/// (untagged): one if it fits, else pieces of the largest multiple of 64 a frame
/// holds after the 16-byte slot header, the 56-byte frame header and the 8-byte
/// tree prefix, within the 16-bit payload length.
fn board_frames(board_slot: usize, len: usize) -> u64 {
    let piece = (board_slot - 16 - 56 - 8).min(u16::MAX as usize - 8);
    if len <= piece {
        1
    } else {
        len.div_ceil(piece & !63) as u64
    }
}

/// GAMMA broadcasts are written once into the root's board and read by every
/// member there, in the root's order, a long one in several frames between short
/// ones, and with more of them in flight than the board has slots.
#[test]
fn broadcasts_go_through_the_board_in_the_roots_order() {
    let (_mem, mut gs) = bcast_group(4);
    let long: &'static [u8] = Vec::leak(vec![5u8; 5000]);
    let mut sent = Vec::new();
    let mut pending = None;
    // As many as the eager buffers take while nobody reads (one thread here).
    for k in 0..24u8 {
        if k == 5 {
            pending = Some(gs[0].isend_flowctl(5, long).unwrap());
            sent.push((long.len(), 5));
        } else {
            let len = 1 + k as usize * 30;
            gs[0].send_flowctl(5, &vec![k; len]).unwrap();
            sent.push((len, k));
        }
    }
    let t0 = std::time::Instant::now();
    poll_until_recorded(&mut gs, sent.len(), t0);
    let h = pending.unwrap();
    poll_until(&mut gs, t0, 20, "the long broadcast never finished", |gs| {
        gs[0].engine().send_status(h).unwrap() != volley_core::engine::SendStatus::Pending
    });
    assert_eq!(
        gs[0].engine().send_status(h),
        Ok(volley_core::engine::SendStatus::Done)
    );
    let frames = 23 + board_frames(1024, long.len());
    assert!(frames > 24, "the long one takes several");
    for (i, g) in gs.iter().enumerate().skip(1) {
        assert_eq!(g.state(), &sent, "member {i}'s broadcasts");
        assert_eq!(
            g.engine().stats().board_rx,
            frames,
            "member {i} read them off the board"
        );
    }
    assert_eq!(
        gs[0].engine().stats().board_tx,
        frames,
        "one write per frame"
    );
    assert!(
        gs[0].device().stats().board_full > 0,
        "more in flight than the board holds"
    );
    // Most short ones go from the sending call; behind a full board or a
    // broadcast queued before them, they take the queue.
    let now = gs[0].engine().stats().board_now;
    assert!(now > 0 && now < 23, "{now} written at once");
}

/// A board broadcast waits on the board while its member's port is not bound, is
/// dropped (counted) once the grace has passed, and the root's later ones reach
/// that member once it binds; the other members get every one meanwhile.
#[test]
fn a_board_broadcast_to_an_unbound_port_is_dropped_after_the_grace() {
    let grace = Duration::from_millis(50);
    let (_mem, mut gs) = bcast_group_with(3, Some(grace), Some(2));
    gs[0].send_flowctl(5, &[1; 8]).unwrap();
    let t0 = std::time::Instant::now();
    poll_until(&mut gs, t0, 10, "never dropped", |gs| {
        gs[2].engine().stats().rx_rejected > 0
    });
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(50),
        "not before the grace"
    );
    bind_bcast(&mut gs[2]);
    gs[0].send_flowctl(5, &[2; 8]).unwrap();
    poll_until(&mut gs, t0, 10, "the later broadcast never came", |gs| {
        !gs[2].state().is_empty() && gs[1].state().len() >= 2
    });
    assert_eq!(gs[1].state(), &vec![(8, 1), (8, 2)]);
    assert_eq!(gs[2].state(), &vec![(8, 2)]);
    assert_eq!(gs[2].engine().stats().rx_rejected, 1);
}

/// What an LFC instance on the model recorded: (root, multicast flag, value) per
/// upcall, and the packets it kept.
#[derive(Debug, Default)]
struct LfcSeen {
    got: Vec<(u16, bool, u32)>,
    keep: bool,
    kept: Vec<volley_core::engine::PacketId>,
}

type MyriLfc = volley_core::lfc::Lfc<'static, MyriNic, volley_core::time::StdClock, LfcSeen>;

fn lfc_upcall(l: &mut MyriLfc, r: volley_core::lfc::Received) -> volley_core::lfc::Keep {
    let b = l.packet(r.packet).unwrap();
    let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let ok = b[4..]
        .iter()
        .enumerate()
        .all(|(i, &x)| x == (v as usize + i) as u8);
    assert!(ok, "packet {v} from {} has wrong contents", r.src);
    let st = l.state_mut();
    st.got
        .push((r.src, r.flags & volley_core::lfc::UPCALL_MCAST != 0, v));
    if st.keep {
        st.kept.push(r.packet);
        volley_core::lfc::Keep::Yes
    } else {
        volley_core::lfc::Keep::No
    }
}

/// `n` LFC instances on one fresh region, chain trees (every hop a member), a
/// receive ring of 4 packets, and a group of the odd ranks.
fn lfcs(n: u16) -> (Mem, Vec<MyriLfc>, u16) {
    lfcs_keyed(n, None)
}

/// [`lfcs`], frames authenticated under `key` if given.
fn lfcs_keyed(n: u16, key: Option<[u8; 16]>) -> (Mem, Vec<MyriLfc>, u16) {
    use volley_core::engine::{Config, Group, Members};
    use volley_core::lfc::{Lfc, Options, Tree};
    let (mem, nics) = cluster_on(Geometry::new(n as u32, 8, 2048).unwrap());
    let groups: &'static [Group<'static>] = Vec::leak(vec![Group {
        id: 1,
        members: Members::Range { first: 0, count: n },
    }]);
    let opts = Options {
        tree: Tree::Chain,
        ring_frames: 4,
        send_packets: 8,
        ..Options::default()
    };
    let odd: Vec<u16> = (0..n).filter(|r| r % 2 == 1).collect();
    let mut gid = 0;
    let ls = (0..n)
        .zip(nics)
        .map(|(i, nic)| {
            let clock = volley_core::time::StdClock::default();
            let mut cfg = Config::new(7, 1, i);
            cfg.auth_key = key;
            let mut l = Lfc::init_alloc(
                cfg,
                groups,
                n as usize,
                nic,
                clock,
                opts,
                lfc_upcall,
                LfcSeen::default(),
            )
            .unwrap();
            gid = l.group_create(&odd).unwrap();
            l
        })
        .collect();
    (mem, ls, gid)
}

/// Launches packet `v` (value, then a pattern) of `size` bytes from `l` to group `gid`.
fn lfc_mcast(l: &mut MyriLfc, gid: u16, v: u32, size: usize) {
    let p = l.send_alloc(false).unwrap();
    let b = l.packet_mut(p).unwrap();
    b[..4].copy_from_slice(&v.to_le_bytes());
    for (i, x) in b[4..size].iter_mut().enumerate() {
        *x = (v as usize + i) as u8;
    }
    l.mcast_launch(gid, p, size, false).unwrap();
}

/// Polls the instances `which` until `done`, failing after 20 s.
fn lfc_poll_until(
    ls: &mut [MyriLfc],
    which: &[usize],
    what: &str,
    done: impl Fn(&[MyriLfc]) -> bool,
) {
    let t0 = std::time::Instant::now();
    while !done(ls) {
        assert!(
            t0.elapsed().as_secs() < 20,
            "{what}: {:?}",
            ls.iter()
                .map(|l| (
                    l.state().got.clone(),
                    l.engine().stats().rx_malformed,
                    l.engine().stats().board_rx
                ))
                .collect::<Vec<_>>()
        );
        for &i in which {
            ls[i].poll().unwrap();
        }
    }
}

/// LFC multicast on the Myrinet-like model is forwarded by the device, below the
/// program: the root writes each packet once into its board and every member takes
/// it there. So with a chain tree (0 → 1 → 2 → 3) members 2 and 3 get every packet
/// while member 1 never polls, each member gets its packets exactly once, in launch
/// order, flagged as multicast; and a member that keeps its packets holds the board
/// (its receive slots are its credits) without losing any.
#[test]
fn lfc_multicast_is_forwarded_by_the_device_without_the_members() {
    use volley_core::engine::MCAST_ALL;
    let (_mem, mut ls, odd) = lfcs(4);
    ls[3].state_mut().keep = true;
    // Ten to everybody and five to the odd ranks, interleaved: fewer than the board's
    // slots, since member 1 reads nothing for now.
    let mut want = vec![Vec::new(); 4];
    for v in 0..15u32 {
        let (gid, to): (u16, &[usize]) = if v % 3 == 2 {
            (odd, &[1, 3])
        } else {
            (MCAST_ALL, &[1, 2, 3])
        };
        lfc_mcast(&mut ls[0], gid, v, 4 + v as usize * 60);
        for &m in to {
            want[m].push((0, true, v));
        }
    }
    // Member 3 keeps everything: 4 slots, then the board holds the rest for it.
    lfc_poll_until(
        &mut ls,
        &[0, 2, 3],
        "member 2 never got its packets",
        |ls| ls[2].state().got.len() == want[2].len() && ls[3].state().got.len() == 4,
    );
    assert_eq!(
        ls[2].state().got,
        want[2],
        "member 2: every packet once, in order"
    );
    assert!(ls[1].state().got.is_empty());
    for _ in 0..1000 {
        ls[3].poll().unwrap();
    }
    assert_eq!(
        ls[3].state().got.len(),
        4,
        "no slot free: the rest stay on the board"
    );
    let kept = std::mem::take(&mut ls[3].state_mut().kept);
    ls[3].state_mut().keep = false;
    for p in kept {
        ls[3].packet_free(p).unwrap();
    }
    lfc_poll_until(
        &mut ls,
        &[0, 1, 2, 3],
        "members 1 and 3 never got theirs",
        |ls| (1..4).all(|m| ls[m].state().got.len() == want[m].len()),
    );
    for m in 1..4 {
        assert_eq!(ls[m].state().got, want[m], "member {m}");
        assert_eq!(
            ls[m].engine().stats().board_rx,
            want[m].len() as u64,
            "member {m}"
        );
        assert_eq!(
            ls[m].engine().packets_free(),
            (8, 4),
            "member {m}: every slot back"
        );
    }
    assert_eq!(ls[0].engine().stats().board_tx, 15, "one write per packet");
    // The board never filled: each went in its launch, and its packet came back.
    assert_eq!(ls[0].engine().stats().board_now, 15);
    assert_eq!(ls[0].engine().packets_free(), (8, 4), "the root's packets");
    // A later packet goes on once every reader has taken the earlier ones.
    lfc_mcast(&mut ls[0], MCAST_ALL, 99, 4);
    lfc_poll_until(&mut ls, &[0, 1, 2, 3], "the last packet never came", |ls| {
        (1..4).all(|m| ls[m].state().got.last() == Some(&(0, true, 99)))
    });
}

/// Packet frames on a board are untrusted: one that claims another root, names an
/// unknown group, asks for acks, lacks the board's mark or is longer than a packet
/// is dropped and counted at every reader, never delivered or a panic; the root's
/// real packets around them arrive.
#[test]
fn forged_board_packets_are_dropped() {
    use volley_core::engine::{BROADCAST, MCAST_ALL};
    use volley_core::wire::{Endpoints, Flags, Kind, Repr};
    let (_mem, mut ls, _) = lfcs(3);
    let forged = |f: &dyn Fn(&mut Repr), len: usize| {
        let mut r = Repr {
            kind: Kind::Packet,
            flags: Flags::TREE | Flags::LAST,
            job_key: 7,
            ends: Endpoints {
                src_group: 1,
                src_node: 0,
                src_port: 0,
                dst_group: 1,
                dst_node: BROADCAST,
                dst_port: MCAST_ALL,
            },
            seq: 0,
            ack: None,
            msg_id: 0,
            offset: 4, // the board's mark (WIRE.md)
            total_len: len as u32,
            payload_len: len as u16,
        };
        f(&mut r);
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit_frame_with(&mut buf, false, None, |p| p.fill(0))
            .unwrap();
        buf
    };
    let good = forged(&|_| {}, 4);
    assert!(board_send(ls[0].device_mut(), &good), "the control frame");
    let bad = [
        forged(&|r| r.ends.src_port = 2, 4),
        forged(&|r| r.ends.dst_port = 77, 4),
        forged(&|r| r.flags |= Flags::RELIABLE, 4),
        forged(&|r| r.offset = 1, 4),
        forged(&|_| {}, volley_core::engine::PACKET_MAX + 1),
    ];
    for f in &bad {
        assert!(board_send(ls[0].device_mut(), f));
    }
    lfc_mcast(&mut ls[0], MCAST_ALL, 5, 8);
    lfc_poll_until(&mut ls, &[0, 1, 2], "the real packet never came", |ls| {
        ls[1..].iter().all(|l| l.state().got.len() == 2)
    });
    for l in &ls[1..] {
        let st = l.engine().stats();
        assert_eq!(l.state().got, vec![(0, true, 0), (0, true, 5)]);
        assert_eq!(st.rx_malformed, bad.len() as u64);
        assert_eq!(st.board_rx, 2);
    }
}

/// LFC's send packets are the NIC's send slots: `lfc_send_alloc` hands out NIC
/// memory, a launch sends from it with no copy (a descriptor in the receiver's
/// ring), and the receiver reads it there. Kept packets are freed later, and after
/// many packets every send and receive slot is back.
#[test]
fn lfc_packets_are_written_in_nic_memory_and_sent_from_there() {
    // Plain, and with every frame authenticated (as on ivshmem): the tag then
    // covers a payload read in the sender's NIC memory.
    for key in [None, Some(*b"0123456789abcdef")] {
        lfc_packets_from_nic_memory(key);
    }
}

fn lfc_packets_from_nic_memory(key: Option<[u8; 16]>) {
    let (_mem, mut ls, _) = lfcs_keyed(2, key);
    let p = ls[0].send_alloc(false).unwrap();
    let at = ls[0].packet_mut(p).unwrap().as_mut_ptr() as usize;
    let slot = ls[0].device().slot(p.index()).unwrap().as_ptr() as usize;
    assert_eq!(at, slot, "lfc_send_alloc hands out the NIC's send slot");
    assert_eq!(ls[0].packet_at(at), Some(p));
    assert_eq!(ls[0].packet_at(at + 1), None);
    ls[0].packet_free(p).unwrap();
    // Packets longer than the ring slot's inline room, so each is read in place.
    let size = 600;
    let total = 10_000u32;
    let mut sent = 0;
    let t0 = std::time::Instant::now();
    while ls[1].state().got.len() < total as usize {
        assert!(t0.elapsed().as_secs() < 60, "stuck at {sent} sent");
        // Both ends run in this thread: `lfc_send_alloc` would wait for a packet
        // that only the receiver's acks (sent while it polls) can free.
        if sent < total && ls[0].engine().packets_free().0 > 0 {
            let p = ls[0].send_alloc(false).unwrap();
            let b = ls[0].packet_mut(p).unwrap();
            b[..4].copy_from_slice(&sent.to_le_bytes());
            for (i, x) in b[4..size].iter_mut().enumerate() {
                *x = (sent as usize + i) as u8;
            }
            ls[0].ucast_launch(1, p, size, false).unwrap();
            sent += 1;
        }
        // The receiver keeps every tenth packet for a while.
        let keep = ls[1].state().got.len() % 10 == 0;
        ls[1].state_mut().keep = keep;
        ls[1].poll().unwrap();
        if ls[1].state().kept.len() >= 3 {
            let kept = std::mem::take(&mut ls[1].state_mut().kept);
            for k in kept {
                ls[1].packet_free(k).unwrap();
            }
        }
        ls[0].poll().unwrap();
    }
    let kept = std::mem::take(&mut ls[1].state_mut().kept);
    for k in kept {
        ls[1].packet_free(k).unwrap();
    }
    let got: Vec<u32> = ls[1].state().got.iter().map(|g| g.2).collect();
    assert_eq!(
        got,
        (0..total).collect::<Vec<_>>(),
        "in order, exactly once"
    );
    assert_eq!(
        ls[0].device().stats().tx_pooled,
        total as u64 + ls[0].engine().stats().retransmits
    );
    assert!(ls[1].device().stats().rx_pooled >= total as u64);
    let s = ls[1].engine().stats();
    assert_eq!((s.rx_unauthenticated, s.rx_malformed), (0, 0));
    // Every slot comes back once the last acks are in.
    let t0 = std::time::Instant::now();
    while ls[0].engine().packets_free().0 < 8 {
        assert!(t0.elapsed().as_secs() < 20, "send slots leaked");
        ls[1].poll().unwrap();
        ls[0].poll().unwrap();
    }
    assert_eq!(ls[1].engine().packets_free().1, 4, "receive slots leaked");
    assert_eq!(ls[0].device().stats().tx_pool_inline, 0);
    // A short packet rides inline in the ring slot.
    lfc_short_unicast(&mut ls);
}

/// One 8-byte packet from 0 to 1: sent from its send slot, its payload inline.
fn lfc_short_unicast(ls: &mut [MyriLfc]) {
    let before = ls[1].state().got.len();
    let p = ls[0].send_alloc(false).unwrap();
    let b = ls[0].packet_mut(p).unwrap();
    b[..4].copy_from_slice(&77u32.to_le_bytes());
    for (i, x) in b[4..8].iter_mut().enumerate() {
        *x = (77 + i) as u8;
    }
    ls[0].ucast_launch(1, p, 8, false).unwrap();
    lfc_poll_until(ls, &[0, 1], "short packet", |ls| {
        ls[1].state().got.len() > before
    });
    assert_eq!(ls[1].state().got.last().map(|g| g.2), Some(77));
    assert_eq!(ls[0].device().stats().tx_pool_inline, 1);
}

/// A 1 MiB broadcast goes through the board too, frame after frame, between the
/// short ones before and after it: each member gets them all in the root's order,
/// with no fence (nothing went another way) and no frame of another broadcast
/// between a long one's.
#[test]
fn long_broadcasts_take_the_board_between_short_ones() {
    use volley_core::engine::SendStatus;
    use volley_core::gamma::GO_BACK;
    let (_mem, mut gs) = bcast_group(4);
    for g in gs.iter_mut().skip(1) {
        let buf = Vec::leak(vec![0u8; 2 << 20]);
        g.set_active_port(5, 0, 1, 5, Some(on_bcast), None, 5, GO_BACK, Some(buf))
            .unwrap();
    }
    let long: &'static [u8] = Vec::leak(vec![200u8; 1 << 20]);
    let mut sent = Vec::new();
    let mut hs = Vec::new();
    for k in 0..3u8 {
        gs[0].send_flowctl(5, &[k; 8]).unwrap();
        sent.push((8, k));
        hs.push(gs[0].isend_flowctl(5, long).unwrap());
        sent.push((long.len(), 200));
        gs[0].send_flowctl(5, &[k + 100; 8]).unwrap();
        sent.push((8, k + 100));
    }
    let t0 = std::time::Instant::now();
    poll_until_recorded(&mut gs, sent.len(), t0);
    let frames = 6 + 3 * board_frames(1024, long.len());
    for (i, g) in gs.iter().enumerate().skip(1) {
        assert_eq!(g.state(), &sent, "member {i}'s broadcasts");
        let st = g.engine().stats();
        assert_eq!(st.board_rx, frames, "member {i}");
        assert_eq!((st.delivered, st.lost, st.rx_malformed), (9, 0, 0));
    }
    let st = gs[0].engine().stats();
    assert_eq!(st.fences, 0);
    assert_eq!(st.board_tx, frames);
    for h in hs {
        assert_eq!(gs[0].engine().send_status(h), Ok(SendStatus::Done));
    }
}

/// Byte `i` of the `len`-byte broadcasts of `board_slots_carry_broadcasts_up_to_a_frame`.
fn slot_byte(len: usize, i: usize) -> u8 {
    (i.wrapping_mul(7) ^ len) as u8
}

/// Records each broadcast's length and whether every byte is right.
fn on_checked_bcast(up: &mut volley_core::gamma::Upcall<'_, 'static, Vec<(usize, u8)>>) {
    let len = up.msg_len();
    let ok = up.data().len() == len
        && up
            .data()
            .iter()
            .enumerate()
            .all(|(i, &b)| b == slot_byte(len, i));
    up.state().push((len, ok as u8));
}

/// With board slots for a 64 KiB frame (what hosted `shm` makes) and with the
/// default ones (the ring slot's 1 KiB here), every broadcast goes through the
/// board: one that a frame holds is written once from the sending call, a longer
/// one frame by frame (on big slots a frame holds 65,527 bytes, and 65,528 go
/// as 65,472 and 56); each member reads every byte, in the root's order.
#[test]
fn board_slots_carry_broadcasts_of_any_length() {
    use volley_core::engine::SendStatus;
    use volley_core::gamma::GO_BACK;
    let lens = [
        8usize,
        5000,
        16 << 10,
        60_000,
        65_400,
        65_527,
        65_528,
        70_000,
        100,
    ];
    for big in [true, false] {
        let geo = Geometry::new(4, 8, 1024).unwrap();
        let geo = if big {
            geo.with_board_slot(BOARD_SLOT_LIMIT).unwrap()
        } else {
            geo
        };
        let slot = geo.board_slot as usize;
        let (_mem, mut gs) = bcast_group_on(geo, None, None);
        for g in gs.iter_mut().skip(1) {
            let buf = Vec::leak(vec![0u8; 128 << 10]);
            g.set_active_port(
                5,
                0,
                1,
                5,
                Some(on_checked_bcast),
                None,
                5,
                GO_BACK,
                Some(buf),
            )
            .unwrap();
            g.poll();
        }
        let t0 = std::time::Instant::now();
        let mut frames = 0;
        for &len in &lens {
            let data: &'static [u8] =
                Vec::leak((0..len).map(|i| slot_byte(len, i)).collect::<Vec<u8>>());
            let n = board_frames(slot, len);
            frames += n;
            let before = gs[0].engine().stats().board_now;
            if n == 1 {
                // Written at once: the call returns with nobody else polled.
                gs[0].send_flowctl(5, data).unwrap();
            } else {
                let h = gs[0].isend_flowctl(5, data).unwrap();
                poll_until(&mut gs, t0, 30, "a long broadcast never finished", |gs| {
                    gs[0].engine().send_status(h).unwrap() != SendStatus::Pending
                });
                assert_eq!(gs[0].engine().send_status(h), Ok(SendStatus::Done));
            }
            let now = gs[0].engine().stats().board_now;
            assert_eq!(
                now - before,
                (n == 1) as u64,
                "{len} bytes, big slots {big}"
            );
        }
        poll_until_recorded(&mut gs, lens.len(), t0);
        let want: Vec<(usize, u8)> = lens.iter().map(|&l| (l, 1)).collect();
        for (i, g) in gs.iter().enumerate().skip(1) {
            assert_eq!(g.state(), &want, "member {i}, big slots {big}");
            assert_eq!(g.engine().stats().board_rx, frames, "member {i}");
        }
        assert_eq!(gs[0].engine().stats().board_tx, frames);
        // Small slots: 896 bytes a frame.
        let want = if big {
            11
        } else {
            1 + 6 + 19 + 67 + 73 + 74 + 74 + 79 + 1
        };
        assert_eq!(frames, want, "big slots {big}");
    }
}

/// A board frame of a GAMMA broadcast (shape `BOARD`) from node 0's port 5 to
/// every member's port 5: `data` at `offset` of a `total`-byte message `bseq`.
fn board_piece_frame(bseq: u32, offset: u32, total: u32, data: &[u8], last: bool) -> Vec<u8> {
    use volley_core::engine::BROADCAST;
    use volley_core::wire::{Endpoints, Flags, Kind, Repr, TREE_PREFIX};
    let mut flags = Flags::TREE;
    if last {
        flags |= Flags::LAST;
    }
    let r = Repr {
        kind: Kind::Multicast,
        flags,
        job_key: 7,
        ends: Endpoints {
            src_group: 1,
            src_node: 0,
            src_port: 5,
            dst_group: 1,
            dst_node: BROADCAST,
            dst_port: 5,
        },
        seq: 0,
        ack: None,
        msg_id: bseq,
        offset,
        total_len: total,
        payload_len: (TREE_PREFIX + data.len()) as u16,
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit_frame_with(&mut buf, false, None, |p| {
        // Root 0, shape BOARD (4), broadcast number (WIRE.md).
        p[..TREE_PREFIX].copy_from_slice(
            &[0, 0, 4, 0]
                .into_iter()
                .chain(bseq.to_be_bytes())
                .collect::<Vec<u8>>(),
        );
        p[TREE_PREFIX..].copy_from_slice(data);
    })
    .unwrap();
    buf
}

/// The frames of a board broadcast that takes several are untrusted too: a later
/// frame of a message never begun is dropped; a gap, a change of length or the
/// start of another message ends the message begun as lost (its port free again,
/// no hang); the root's real broadcasts around them arrive whole.
#[test]
fn forged_pieces_of_a_long_board_broadcast_end_it_as_lost() {
    let (_mem, mut gs) = bcast_group(2);
    gs[0].send_flowctl(5, &[1; 8]).unwrap();
    let forged = [
        // A piece of message 7, never begun.
        board_piece_frame(7, 100, 300, &[9; 100], false),
        // Message 1 begins, then a gap: lost.
        board_piece_frame(1, 0, 300, &[9; 100], false),
        board_piece_frame(1, 200, 300, &[9; 100], true),
        // Message 2 begins, then its length changes: lost.
        board_piece_frame(2, 0, 300, &[9; 100], false),
        board_piece_frame(2, 100, 400, &[9; 100], false),
        // Message 3 begins, then message 4 does: 3 is lost (its rest can never
        // come), and so is 4 when the root's real next one begins.
        board_piece_frame(3, 0, 300, &[9; 100], false),
        board_piece_frame(4, 0, 300, &[9; 100], false),
    ];
    for f in &forged {
        assert!(board_send(gs[0].device_mut(), f));
    }
    gs[0].send_flowctl(5, &[2; 8]).unwrap();
    let t0 = std::time::Instant::now();
    poll_until_recorded(&mut gs, 2, t0);
    let st = gs[1].engine().stats();
    assert_eq!(st.rx_dropped, 1, "the piece of nothing");
    assert_eq!(st.rx_malformed, 4, "the gap, the new length, two cut short");
    assert_eq!(st.lost, 4);
    assert_eq!(gs[1].state(), &vec![(8, 1), (8, 2)]);
}

/// A board broadcast that a member holds back because its port is not bound yet
/// does not hold up the root's NIC barrier (the member's program decides when it
/// lands, here after the barrier), while the members that are bound have it when
/// anyone leaves; the held one lands once the port is bound.
#[test]
fn a_board_broadcast_held_by_an_unbound_port_does_not_hold_the_nic_barrier() {
    let grace = Duration::from_secs(30);
    let (_mem, mut gs) = bcast_group_with(3, Some(grace), Some(2));
    for g in gs.iter_mut() {
        g.engine_mut().set_device_barrier(true).unwrap();
    }
    let msg: &'static [u8] = Vec::leak(vec![3u8; 3000]);
    let h = gs[0].isend_flowctl(5, msg).unwrap();
    for g in gs.iter_mut() {
        g.sync_start().unwrap();
    }
    let t0 = std::time::Instant::now();
    let mut done = [false; 3];
    while !done.iter().all(|&d| d) {
        assert!(t0.elapsed().as_secs() < 10, "the barrier waited: {done:?}");
        for i in 0..3 {
            if done[i] || !gs[i].sync_test().unwrap() {
                continue;
            }
            done[i] = true;
            assert_eq!(gs[1].state(), &vec![(3000, 3)], "member {i} left first");
        }
    }
    assert!(gs[2].state().is_empty(), "held until bound");
    assert_eq!(
        gs[0].engine().send_status(h),
        Ok(volley_core::engine::SendStatus::Done)
    );
    bind_bcast(&mut gs[2]);
    poll_until_recorded(&mut gs, 1, t0);
    assert_eq!(gs[2].state(), &vec![(3000, 3)]);
    assert_eq!(gs[2].engine().stats().rx_rejected, 0);
}

/// A root that dies in the middle of a broadcast that takes several board frames:
/// each member ends the message begun as lost once it finds the root gone, its
/// port free again, rather than waiting for the rest.
#[test]
fn a_long_board_broadcast_whose_root_dies_midway_ends_as_lost() {
    let (_mem, mut gs) = bcast_group(3);
    // Half the board, then a message of 12 frames: 8 fit, 4 wait for room.
    for k in 0..8u8 {
        gs[0].send_flowctl(5, &[k; 8]).unwrap();
    }
    let long: &'static [u8] = Vec::leak(vec![7u8; 12 * 896]);
    let h = gs[0].isend_flowctl(5, long).unwrap();
    assert_eq!(gs[0].engine().stats().board_tx, 16, "the board is full");
    for g in gs.iter_mut().skip(1) {
        g.poll();
    }
    // The root dies with 4 frames unwritten.
    gs[1].device().mark_dead(0);
    let t0 = std::time::Instant::now();
    while gs[1..].iter().any(|g| g.engine().stats().lost == 0) {
        assert!(
            t0.elapsed().as_secs() < 10,
            "a member still waits for the rest"
        );
        for g in gs.iter_mut().skip(1) {
            g.poll();
        }
    }
    for (i, g) in gs.iter().enumerate().skip(1) {
        let st = g.engine().stats();
        assert_eq!((st.delivered, st.lost), (8, 1), "member {i}");
        assert_eq!(g.state().len(), 8, "member {i}: the short ones");
    }
    assert_eq!(
        gs[0].engine().send_status(h),
        Ok(volley_core::engine::SendStatus::Pending),
        "nobody polled the dead root"
    );
}

/// A reader that stops for good (it never polls again, and never leaves) holds the
/// root's NIC barrier only until its heartbeat has stood still for `dead_after`:
/// then the root stops waiting for it to read the board and arrives, and the
/// barrier fails with SENDFAILURE at every live member instead of hanging.
#[test]
fn a_stopped_reader_holds_the_barrier_only_until_it_is_found_dead() {
    use volley_core::engine::Error;
    let (_mem, mut gs) = bcast_group(3);
    for g in gs.iter_mut() {
        g.engine_mut().set_device_barrier(true).unwrap();
    }
    gs[0].send_flowctl(5, &[4; 8]).unwrap();
    let t0 = std::time::Instant::now();
    let mut ended: [Option<Result<bool, Error>>; 2] = [None, None];
    for g in gs.iter_mut().take(2) {
        g.sync_start().unwrap();
    }
    while ended.iter().any(|e| e.is_none()) {
        assert!(t0.elapsed().as_secs() < 30, "the barrier hung: {ended:?}");
        for (i, e) in ended.iter_mut().enumerate() {
            if e.is_none() {
                match gs[i].sync_test() {
                    Ok(false) => {}
                    r => *e = Some(r),
                }
            }
        }
    }
    assert_eq!(ended, [Some(Err(Error::SendFailure)); 2]);
    assert_eq!(gs[1].state(), &vec![(8, 4)], "the live member has it");
}

/// Random pieces of board broadcasts (mostly in order, now and then at another
/// offset, of another total, cut short or with the wrong last flag; numbered as
/// the root's next one) before each of a root's real broadcasts, some
/// of which take several frames: no panic, no member's port left taken, and every
/// real broadcast reaches every member whole and in order. A piece that happens to
/// be a whole message is delivered like one (its bytes are 0xEE). Seeded
/// (`VOLLEY_SEED`); the seed is in every failure.
#[test]
fn random_board_pieces_never_wedge_a_member() {
    use volley_core::engine::SendStatus;
    use volley_core::rng::Rng;
    let seed = seed_or(0xB0A2_D001);
    let mut rng = Rng::new(seed);
    let (_mem, mut gs) = bcast_group(3);
    let t0 = std::time::Instant::now();
    let mut want = Vec::new();
    for k in 1..=40u8 {
        // The root's next broadcast number: the real one below takes it too.
        let bseq = u32::from(k) - 1;
        // Mostly a message's pieces in order, now and then one out of place,
        // of another length, or cut short.
        let total = 1 + rng.below(3000) as u32;
        let mut at = 0u32;
        for _ in 0..rng.below(6) {
            let off = if rng.below(4) == 0 {
                rng.below(u64::from(total) + 1) as u32
            } else {
                at
            };
            let room = u64::from(total.saturating_sub(off)).min(900);
            let len = match rng.below(4) {
                0 => rng.below(900),
                1 => room,
                _ => rng.below(room + 1),
            } as usize;
            let end = off + len as u32;
            let last = if rng.below(4) == 0 {
                rng.below(2) == 0
            } else {
                end >= total
            };
            let t = if rng.below(8) == 0 { total + 1 } else { total };
            at = end;
            let f = board_piece_frame(bseq, off, t, &vec![0xEE; len], last);
            while !board_send(gs[0].device_mut(), &f) {
                assert!(
                    t0.elapsed().as_secs() < 30,
                    "seed {seed}: the board stays full"
                );
                for g in gs.iter_mut().skip(1) {
                    g.poll();
                }
            }
        }
        let len = 1 + rng.below(5000) as usize;
        let data: &'static [u8] = Vec::leak(vec![k; len]);
        let h = gs[0].isend_flowctl(5, data).unwrap();
        want.push((len, k));
        poll_until(
            &mut gs,
            t0,
            30,
            &std::format!("seed {seed}: broadcast {k} stuck"),
            |gs| {
                gs[0].engine().send_status(h).unwrap() != SendStatus::Pending
                    && gs[1..]
                        .iter()
                        .all(|g| g.state().iter().filter(|r| r.1 != 0xEE).count() >= k as usize)
            },
        );
        assert_eq!(
            gs[0].engine().send_status(h),
            Ok(SendStatus::Done),
            "seed {seed}"
        );
    }
    for (i, g) in gs.iter().enumerate().skip(1) {
        let real: Vec<(usize, u8)> = g.state().iter().copied().filter(|r| r.1 != 0xEE).collect();
        assert_eq!(real, want, "seed {seed}: member {i}");
    }
}

/// What [`Spy`] and [`Ticks`] saw, in order: `frame` for a frame handed to the
/// NIC, `clock` for a clock read.
type Log = std::rc::Rc<std::cell::RefCell<Vec<&'static str>>>;

/// A clock that logs its reads.
struct Ticks(Log);

impl volley_core::time::Clock for Ticks {
    fn now(&self) -> Instant {
        let mut l = self.0.borrow_mut();
        l.push("clock");
        Instant::from_nanos(1000 * l.len() as u64)
    }
}

/// A NIC that logs each frame handed to it; `timed`: its transmit says it reads
/// the time.
struct Spy {
    nic: MyriNic,
    log: Log,
    timed: bool,
}

impl Device for Spy {
    type RxToken<'a> = MyriRx<'a>;
    type TxToken<'a> = MyriTx<'a>;
    fn receive(&mut self, now: Instant) -> Option<MyriRx<'_>> {
        self.nic.receive(now)
    }
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<MyriTx<'_>> {
        self.log.borrow_mut().push("frame");
        self.nic.transmit(now, dst)
    }
    fn capabilities(&self) -> Capabilities {
        self.nic.capabilities()
    }
    fn transmit_reads_time(&self) -> bool {
        self.timed || self.nic.transmit_reads_time()
    }
}

/// Two nodes' [`Spy`] NICs on one region, logging to one [`Log`].
fn spies(mem: &Mem) -> (Spy, Spy, Log) {
    let (a, b) = pair(mem);
    let log = Log::default();
    let spy = |nic| Spy {
        nic,
        log: log.clone(),
        timed: false,
    };
    (spy(a), spy(b), log)
}

static SPY_GROUPS: &[volley_core::engine::Group<'static>] = &[volley_core::engine::Group {
    id: 1,
    members: volley_core::engine::Members::Range { first: 0, count: 2 },
}];

/// GAMMA on `a` (node 0) and `b` (node 1) of `groups`, port 1 of each bound to
/// the other's with a 64-byte buffer, after one message from `a` to `b` (it opens
/// the channel and tells the engines the MTU).
fn warm_gammas<D: Device, C: volley_core::time::Clock>(
    groups: &'static [volley_core::engine::Group<'static>],
    (a, b): (D, D),
    clock: impl Fn() -> C,
) -> [volley_core::gamma::Gamma<'static, D, C, ()>; 2] {
    use volley_core::engine::Config;
    use volley_core::gamma::{Gamma, GO_BACK};
    let mk = |dev, me: u16| {
        let mut g = Gamma::init_alloc(Config::new(7, 1, me), groups, 3, dev, clock(), ()).unwrap();
        let buf: &'static mut [u8] = Vec::leak(vec![0u8; 64]);
        g.set_active_port(1, 1 - me, 1, 1, None, None, 1, GO_BACK, Some(buf))
            .unwrap();
        g
    };
    let (mut ga, mut gb) = (mk(a, 0), mk(b, 1));
    ga.send_flowctl(1, b"warm").unwrap();
    gb.wait(1, 1).unwrap();
    ga.poll();
    [ga, gb]
}

/// A send that leaves at once reads the clock only after its frame is in the ring
/// on this NIC, whose transmit reads no time: a best-effort send reads none, a
/// reliable one reads it once, after (its retransmission timer starts then). A
/// device whose transmit reads the time still gets it first.
#[test]
fn sends_that_leave_at_once_read_the_clock_after_the_frame() {
    use volley_core::gamma::Gamma;

    let mem = Mem::new(geo().region_len().unwrap());
    let (a, b, log) = spies(&mem);
    let [mut ga, mut gb] = warm_gammas(SPY_GROUPS, (a, b), || Ticks(log.clone()));
    let mut sent = |ga: &mut Gamma<'static, Spy, Ticks, ()>, reliable: bool, data: &[u8]| {
        log.borrow_mut().clear();
        if reliable {
            ga.send_flowctl(1, data).unwrap();
        } else {
            ga.send(1, data).unwrap();
        }
        let seen = log.borrow().clone();
        gb.wait(1, 1).unwrap();
        assert_eq!(&gb.buffer(1).unwrap()[..data.len()], data);
        seen
    };
    assert_eq!(sent(&mut ga, false, b"best effort"), ["frame"]);
    assert_eq!(sent(&mut ga, true, b"reliable"), ["frame", "clock"]);
    ga.device_mut().timed = true;
    assert_eq!(sent(&mut ga, false, b"timed"), ["clock", "frame"]);
    assert_eq!(sent(&mut ga, true, b"timed, reliable"), ["clock", "frame"]);
}

/// LFC's `ucast_launch` likewise: the clock is read once, after the frame, on this
/// NIC; before it where the transmit reads the time.
#[test]
fn a_packet_launched_at_once_reads_the_clock_after_the_frame() {
    use volley_core::engine::Config;
    use volley_core::lfc::{Keep, Lfc, Options, Received};

    fn count(l: &mut Lfc<'static, Spy, Ticks, u32>, _r: Received) -> Keep {
        *l.state_mut() += 1;
        Keep::No
    }
    let mem = Mem::new(geo().region_len().unwrap());
    let (a, b, log) = spies(&mem);
    let mk = |dev, me: u16| {
        let clock = Ticks(log.clone());
        let opts = Options::default();
        let mut l = Lfc::init_alloc(
            Config::new(7, 1, me),
            SPY_GROUPS,
            3,
            dev,
            clock,
            opts,
            count,
            0,
        )
        .unwrap();
        l.set_idle(None);
        l
    };
    let (mut la, mut lb) = (mk(a, 0), mk(b, 1));
    la.start_begin().unwrap();
    lb.start_begin().unwrap();
    let mut turns = 0;
    while !(la.start_test().unwrap() & lb.start_test().unwrap()) {
        la.poll_network();
        lb.poll_network();
        turns += 1;
        assert!(turns < 100_000, "the start-up barrier ends");
    }
    for timed in [false, true] {
        la.device_mut().timed = timed;
        let p = la.send_alloc(false).unwrap();
        la.packet_mut(p).unwrap()[..4].copy_from_slice(b"pkt!");
        let before = *lb.state();
        log.borrow_mut().clear();
        la.ucast_launch(1, p, 4, false).unwrap();
        let seen = log.borrow().clone();
        let want: &[&str] = if timed {
            &["clock", "frame"]
        } else {
            &["frame", "clock"]
        };
        assert_eq!(seen, want, "timed {timed}");
        for _ in 0..100_000 {
            if *lb.state() > before {
                break;
            }
            lb.poll().unwrap();
            la.poll().unwrap();
        }
        assert_eq!(*lb.state(), before + 1, "timed {timed}: the packet came");
    }
}

/// A waiting call that found nothing looks at the device between polls
/// (`rx_pending`, a few loads) and polls as soon as a frame is there: here the NIC
/// shows its frame only from the 1000th look on, and the wait ends at the first
/// poll after it, having polled about once per `LOOKS` looks with one peer, once
/// per `LOOKS / 2` with two (each look loads twice as much), and once per
/// `LOOKS_SENDING` (`/ 2`) while a send of its own waits for the NIC.
#[test]
fn a_waiting_call_looks_at_the_nic_between_polls() {
    static THREE: &[volley_core::engine::Group<'static>] = &[volley_core::engine::Group {
        id: 1,
        members: volley_core::engine::Members::Range { first: 0, count: 3 },
    }];
    use volley_core::gamma::{LOOKS, LOOKS_SENDING};
    waits_looking(SPY_GROUPS, LOOKS, false, false);
    waits_looking(THREE, LOOKS / 2, false, false);
    // With a send of its own queued (the NIC takes none until the frame shows),
    // fewer looks per poll: the credits it waits for show only to a poll.
    waits_looking(SPY_GROUPS, LOOKS_SENDING, true, false);
    waits_looking(THREE, LOOKS_SENDING / 2, true, false);
    // An idle hook after every empty poll (a `hlt`): the time read before it may be
    // long past, so the poll after the look reads the clock again.
    waits_looking(SPY_GROUPS, LOOKS, false, true);
}

fn waits_looking(
    groups: &'static [volley_core::engine::Group<'static>],
    per_poll: u32,
    sending: bool,
    hook: bool,
) {
    use std::cell::Cell;

    /// The NIC, its frames hidden from receive until `from` looks.
    struct Hider {
        nic: MyriNic,
        looks: Cell<u32>,
        polls: u32,
        from: u32,
        /// Nothing sent either until then.
        hold_tx: bool,
        /// The clock's reads, the look that saw the frame, and the frame taken.
        log: Log,
    }
    impl Device for Hider {
        type RxToken<'a> = MyriRx<'a>;
        type TxToken<'a> = MyriTx<'a>;
        fn receive(&mut self, now: Instant) -> Option<MyriRx<'_>> {
            self.polls += 1;
            if self.looks.get() < self.from {
                return None;
            }
            let f = self.nic.receive(now);
            if f.is_some() {
                self.log.borrow_mut().push("frame");
            }
            f
        }
        fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<MyriTx<'_>> {
            if self.hold_tx && self.looks.get() < self.from {
                return None;
            }
            self.nic.transmit(now, dst)
        }
        fn capabilities(&self) -> Capabilities {
            self.nic.capabilities()
        }
        fn rx_pending(&self) -> bool {
            self.looks.set(self.looks.get() + 1);
            let seen = self.looks.get() >= self.from && self.nic.rx_pending();
            if seen && self.from > 0 {
                self.log.borrow_mut().push("seen");
            }
            seen
        }
    }
    let mem = Mem::new(geo().region_len().unwrap());
    let (a, b) = pair(&mem);
    let log = Log::default();
    let hide = |nic| Hider {
        nic,
        looks: Cell::new(0),
        polls: 0,
        from: 0,
        hold_tx: false,
        log: log.clone(),
    };
    let [mut ga, mut gb] = warm_gammas(groups, (hide(a), hide(b)), || Ticks(log.clone()));
    ga.send(1, b"hidden").unwrap();
    if hook {
        gb.set_idle(Some(|| {}));
        gb.set_idle_after(1);
    }
    let d = gb.device_mut();
    d.from = 1000;
    d.looks.set(0);
    d.polls = 0;
    d.hold_tx = sending;
    if sending {
        gb.isend(1, b"queued").unwrap();
        assert!(gb.engine().sends_waiting());
    }
    let deadline = gb.time() + volley_core::time::Duration::from_secs(10);
    log.borrow_mut().clear();
    assert_eq!(gb.wait_deadline(1, 1, deadline), Ok(0));
    assert_eq!(gb.buffer(1).unwrap()[..6], *b"hidden");
    // The poll after the look that saw the frame reads no clock before taking it,
    // unless the hook ran since the last read.
    let seen = log.borrow().clone();
    let at = seen
        .iter()
        .position(|&e| e == "seen")
        .expect("a look saw the frame");
    let want: &[&str] = if hook {
        &["seen", "clock", "frame"]
    } else {
        &["seen", "frame"]
    };
    assert_eq!(&seen[at..], want, "after the look");
    assert!(
        seen[..at].contains(&"clock"),
        "the empty polls read the clock"
    );
    let d = gb.device();
    // The look that found the frame ended the looking: a poll took it at once.
    assert_eq!(d.looks.get(), 1000, "looks");
    let polls = 1000 / per_poll + 1;
    assert!(
        (polls..=polls + 2).contains(&d.polls),
        "{} polls for 1000 looks",
        d.polls
    );
    if sending {
        // Out at the next poll, now that the NIC takes it.
        assert_eq!(ga.wait(1, 1), Ok(0));
        assert_eq!(ga.buffer(1).unwrap()[..6], *b"queued");
        assert!(!gb.engine().sends_waiting());
    }
}

/// Cheetah puts between two contexts on the NIC: a whole put in one frame goes
/// under the compact put header and is taken by prediction (written, bell rung, no
/// assembly); a longer one goes in full frames; a put to memory the target does
/// not expose is refused there, untouched, and reported here.
#[test]
fn cheetah_puts_in_one_frame_travel_compact_and_land_once() {
    use volley_core::cheetah::{Cheetah, Segments};
    use volley_core::engine::{Config, Error, Group, Members, Memory};
    type C = Cheetah<'static, MyriNic, volley_core::time::StdClock, Segments<'static>>;
    const DATA: u64 = 1 << 40;
    const BELLS: u64 = 2 << 40;
    // 4 KiB slots: every put but the 100,000-byte one fits one frame.
    let (_mem, nics) = cluster_on(Geometry::new(2, 16, 4096).unwrap());
    let groups: &'static [Group<'static>] = Vec::leak(vec![Group {
        id: 1,
        members: Members::Range { first: 0, count: 2 },
    }]);
    let mut cs: Vec<C> = nics
        .into_iter()
        .enumerate()
        .map(|(i, nic)| {
            let mut mem = Segments::new();
            assert_eq!(mem.expose(Vec::leak(vec![0u8; 256 * 1024])), DATA);
            assert_eq!(mem.expose(Vec::leak(vec![0u8; 64])), BELLS);
            let mut cfg = Config::new(7, 1, i as u16);
            cfg.ack_exchange_ends = false;
            let clock = volley_core::time::StdClock::default();
            Cheetah::setup(cfg, groups, 2, nic, clock, mem).unwrap()
        })
        .collect();
    let (mut a, mut b) = {
        let b = cs.pop().unwrap();
        (cs.pop().unwrap(), b)
    };
    let pattern: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    a.memory_mut().write(DATA, &pattern).unwrap();
    let (lens, mut at) = ([1usize, 8, 200, 100_000, 0, 64], 0u64);
    for (k, &len) in lens.iter().enumerate() {
        let to = DATA + 128 * 1024 + at;
        a.put(1, to, DATA, len, BELLS, BELLS + 4).unwrap();
        let rung = k as i32 + 1;
        let (mut local, mut remote) = (0, 0);
        for _ in 0..100_000 {
            b.poll().unwrap();
            a.poll().unwrap();
            (local, remote) = (a.bell(BELLS).unwrap(), b.bell(BELLS + 4).unwrap());
            if local == rung && remote == rung {
                break;
            }
        }
        assert_eq!((local, remote), (rung, rung), "put {k} of {len} bytes");
        let got = &b.memory().segment(DATA).unwrap()[(to - DATA) as usize..][..len];
        assert!(got == &pattern[..len], "put {k} of {len} bytes");
        at += len as u64 + 8;
    }
    // The long put went in full frames, every other one compact and predicted.
    let (sa, sb) = (a.engine().stats(), b.engine().stats());
    assert_eq!(sa.tx_compact, 5, "{sa:?}");
    assert_eq!(sb.rx_compact, 5, "{sb:?}");
    assert!(sb.rx_predicted >= 4, "{sb:?}");
    // Refused at the target (not exposed there), its memory untouched; the
    // initiator hears of it and its local bell does not ring.
    let before = b.memory().segment(DATA).unwrap().to_vec();
    a.put(1, 7 << 40, DATA, 8, BELLS, BELLS + 4).unwrap();
    let mut refused = false;
    for _ in 0..100_000 {
        b.poll().unwrap();
        if a.poll() == Err(Error::BadAddress) {
            refused = true;
            break;
        }
    }
    assert!(refused, "{:?}", a.engine().stats());
    assert_eq!(a.bell(BELLS).unwrap(), lens.len() as i32);
    assert_eq!(b.bell(BELLS + 4).unwrap(), lens.len() as i32);
    assert!(b.memory().segment(DATA).unwrap() == &before[..]);
}

/// Reliable and best-effort broadcasts from one port, short and long, reach each
/// member's handler in the order the root sent them (members poll in threads of
/// their own, as processes would, so that the root's blocking sends return).
#[test]
fn best_effort_broadcasts_keep_their_place_behind_reliable_ones() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use volley_core::gamma::GO_BACK;
    let (_mem, mut gs) = bcast_group(3);
    let long: &'static [u8] = Vec::leak(vec![150u8; 150_000]);
    let mut sent = Vec::new();
    for k in 0..6u8 {
        sent.push((1000, k));
        sent.push((long.len(), 150));
        sent.push((500, k + 100));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let members: Vec<_> = gs
        .drain(1..)
        .map(|mut g| {
            let (want, stop) = (sent.len(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let buf = Vec::leak(vec![0u8; 1 << 20]);
                g.set_active_port(5, 0, 1, 5, Some(on_bcast), None, 5, GO_BACK, Some(buf))
                    .unwrap();
                let t0 = std::time::Instant::now();
                while g.state().len() < want && !stop.load(Ordering::Relaxed) {
                    assert!(t0.elapsed().as_secs() < 30, "broadcasts stuck");
                    g.poll();
                }
                // Stay for the root's last acks.
                let t1 = std::time::Instant::now();
                while t1.elapsed().as_millis() < 200 {
                    g.poll();
                }
                g
            })
        })
        .collect();
    // Every member has bound its port before the first broadcast.
    std::thread::sleep(std::time::Duration::from_millis(100));
    for k in 0..6u8 {
        gs[0].send_flowctl(5, &[k; 1000]).unwrap();
        gs[0].send_flowctl(5, long).unwrap();
        gs[0].send(5, &[k + 100; 500]).unwrap();
    }
    let t0 = std::time::Instant::now();
    while t0.elapsed().as_millis() < 500 {
        gs[0].poll();
    }
    stop.store(true, Ordering::Relaxed);
    for (i, m) in members.into_iter().enumerate() {
        let g = m.join().expect("a member failed");
        assert_eq!(g.state(), &sent, "member {}'s broadcasts", i + 1);
    }
}

/// Frames on a board are untrusted like any: garbage, a truncated frame, one that
/// claims another writer and one of another shape are dropped and counted, never
/// delivered or a panic, and the root's real broadcasts around them still arrive.
#[test]
fn forged_board_frames_are_dropped() {
    let (_mem, mut gs) = bcast_group(2);
    gs[0].send_flowctl(5, &[1; 8]).unwrap();
    // The frame the engine wrote, as bytes: looked at on node 1's side and left
    // there for its engine.
    let mut frame = Vec::new();
    gs[1].device_mut().read(Instant::ZERO, &mut |_, f| {
        frame = f.to_vec();
        BoardTake::Later
    });
    assert!(!frame.is_empty(), "the broadcast is on the board");
    let mut claims_other = frame.clone();
    claims_other[10..12].copy_from_slice(&1u16.to_be_bytes());
    let mut other_shape = frame.clone();
    other_shape[volley_core::wire::HEADER_LEN + 2] = 1;
    let garbage: Vec<u8> = (0..200u32).map(|i| (i * 97 % 251) as u8).collect();
    for f in [&garbage[..], &frame[..30], &claims_other, &other_shape] {
        assert!(board_send(gs[0].device_mut(), f));
    }
    gs[0].send_flowctl(5, &[2; 8]).unwrap();
    poll_until_recorded(&mut gs, 2, std::time::Instant::now());
    let st = gs[1].engine().stats();
    assert_eq!(gs[1].state(), &vec![(8, 1), (8, 2)]);
    assert_eq!(st.board_rx, 2);
    assert_eq!(st.rx_malformed, 3, "garbage, truncated, other shape");
    assert_eq!(st.rx_spoofed, 1);
}
