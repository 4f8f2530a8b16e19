//! Two endpoints of each personality on one Myrinet-like region, as two ranks of
//! hosted `shm` would be: shared by the `engine_cost` and `cross_core` benches
//! (`#[path]`) and the
//! `steady_state_allocs` test. Not a test target of its own (Cargo takes only
//! `tests/*.rs`).

use std::alloc::{alloc_zeroed, Layout};

use volley_core::cheetah::{Cheetah, Segments};
use volley_core::engine::{Config, Group, Members};
use volley_core::gamma::{Gamma, Upcall, GO_BACK};
use volley_core::lfc::{Keep, Lfc, Options, Received};
use volley_core::qnix::{Name, Qnix};
use volley_core::time::StdClock;
use volley_myri::{Geometry, MyriNic, NicConfig, Region};

/// A GAMMA endpoint counting the messages its port 1 handler saw.
pub type G = Gamma<'static, MyriNic, StdClock, u64>;
/// An LFC endpoint counting its upcalls.
pub type L = Lfc<'static, MyriNic, StdClock, u64>;
/// A QNIX process with a 64 KiB pool.
pub type Q = Qnix<'static, MyriNic, StdClock, Segments<'static>>;
/// A Cheetah context exposing a 4 KiB segment (data at [`C_DATA`], bells at
/// [`C_BELL`]).
pub type C = Cheetah<'static, MyriNic, StdClock, Segments<'static>>;
/// Where each Cheetah context of [`cheetahs`] keeps data.
pub const C_DATA: u64 = 1 << 40;
/// A bell of each Cheetah context of [`cheetahs`].
pub const C_BELL: u64 = C_DATA + 2048;
/// The bell [`C_TAG`]'s handler rings.
pub const C_INVOKED: u64 = C_DATA + 2052;
/// The tag of the handler each context of [`cheetahs`] registers.
pub const C_TAG: i32 = 1;

/// The group of both endpoints.
pub static GROUPS: &[Group<'static>] = &[Group {
    id: 1,
    members: Members::Range { first: 0, count: 2 },
}];

/// The region's node count: `VOLLEY_BENCH_NODES` (2 to 64), else 2. Only nodes 0
/// and 1 take part; the others' rings and boards are there to be looked at, as a
/// poll in a larger job looks at every node's.
pub fn region_nodes() -> u32 {
    region_nodes_or(2)
}

/// [`region_nodes`] with another default.
pub fn region_nodes_or(default: u32) -> u32 {
    let Ok(v) = std::env::var("VOLLEY_BENCH_NODES") else {
        return default;
    };
    match v.parse() {
        Ok(n) if (2..=64).contains(&n) => n,
        _ => {
            eprintln!("VOLLEY_BENCH_NODES: {v:?} is not a node count from 2 to 64");
            std::process::exit(2)
        }
    }
}

/// The hosted `shm` fabric's geometry for [`region_nodes`] ranks.
pub fn geometry() -> Geometry {
    geometry_for(region_nodes())
}

/// The hosted `shm` fabric's geometry for `nodes` ranks (its ring sizes,
/// targets/hosted/src/shm.rs).
pub fn geometry_for(nodes: u32) -> Geometry {
    let (slots, slot_size) = if nodes <= 8 {
        (32, 64 * 1024 + 64)
    } else {
        (16, 16 * 1024 + 64)
    };
    // As hosted `shm`, `VOLLEY_SHM_SLOT_SIZE` overrides the slot size.
    let slot_size = std::env::var("VOLLEY_SHM_SLOT_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(slot_size);
    Geometry::new(nodes, slots, slot_size)
        .unwrap_or_else(|e| panic!("{nodes} nodes, {slots} slots of {slot_size} bytes: {e}"))
}

/// The NICs of nodes `0..count` on a fresh region of geometry `geo` (node 0 makes
/// it).
pub fn nics_on(geo: Geometry, count: u32) -> Vec<MyriNic> {
    let len = geo.region_len().unwrap();
    let layout = Layout::from_size_align(len, 4096).unwrap();
    // SAFETY: non-zero size; the memory is leaked, so it outlives every NIC.
    let ptr = unsafe { alloc_zeroed(layout) };
    assert!(!ptr.is_null());
    // SAFETY: a fresh allocation, never freed, touched only through these views
    // (standing for the processes' mappings).
    let r = || unsafe { Region::new(ptr, len) }.unwrap();
    (0..count.min(geo.nodes))
        .map(|me| match me {
            0 => MyriNic::create(r(), geo, 0, 9, NicConfig::default()).unwrap(),
            _ => MyriNic::attach(r(), me, 9, NicConfig::default()).unwrap(),
        })
        .collect()
}

/// Two NICs on a fresh region of [`geometry`].
pub fn nics() -> (MyriNic, MyriNic) {
    let mut n = nics_on(geometry(), 2).into_iter();
    (n.next().unwrap(), n.next().unwrap())
}

/// A handler that counts the messages.
pub fn on_msg(u: &mut Upcall<'_, '_, u64>) {
    *u.state() += 1;
}

/// Two GAMMA endpoints whose port 1 is bound to the other's, with a 4 KiB
/// buffer and a handler that counts.
pub fn gammas() -> (G, G) {
    gammas_with(None)
}

/// [`gammas`] whose frames carry a tag under `key`, as on the fabrics that cross a
/// network (`udp`, `eth`).
pub fn gammas_with(key: Option<[u8; 16]>) -> (G, G) {
    let (a, b) = nics();
    (gamma(a, 0, key), gamma(b, 1, key))
}

/// Instance `me` (0 or 1) of the pair on `nic`: port 1 bound to the other's, as
/// [`gammas_with`] makes them (for benches that make each end on its own thread).
pub fn gamma(nic: MyriNic, me: u16, key: Option<[u8; 16]>) -> G {
    let mut cfg = Config::new(9, 1, me);
    cfg.auth_key = key;
    let mut g = Gamma::init_alloc(cfg, GROUPS, 2, nic, StdClock::default(), 0).unwrap();
    let buf: &'static mut [u8] = Vec::leak(vec![0u8; 4096]);
    g.set_active_port(1, 1 - me, 1, 1, Some(on_msg), None, 1, GO_BACK, Some(buf))
        .unwrap();
    g
}

fn on_packet(l: &mut L, _r: Received) -> Keep {
    *l.state_mut() += 1;
    Keep::No
}

/// Two started LFC endpoints (the start-up barrier needs them taking turns).
pub fn lfcs() -> (L, L) {
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
    (a, b)
}

/// Two QNIX processes of application 1, registered, each with a 64 KiB pool, and
/// barriers in NIC memory as on `shm`.
pub fn qnixes() -> (Q, Q) {
    let (a, b) = nics();
    let mk = |nic, me: u16| -> Q {
        let mut mem = Segments::new();
        let pool = mem.expose(Vec::leak(vec![0u8; 64 * 1024]));
        let mut cfg = Config::new(9, 1, me);
        cfg.device_barrier = true;
        let mut q = Qnix::new(cfg, GROUPS, 2, nic, StdClock::default(), mem).unwrap();
        q.set_pool(pool, 64 * 1024).unwrap();
        q.register(Name::new(1, me as i32), 1, 2).unwrap();
        q
    };
    let (mut a, mut b) = (mk(a, 0), mk(b, 1));
    while !(a.registered().unwrap() & b.registered().unwrap()) {}
    (a, b)
}

/// Two Cheetah contexts as [`cheetah`] makes them.
pub fn cheetahs() -> (C, C) {
    let (a, b) = nics();
    (cheetah(a, 0), cheetah(b, 1))
}

/// Context `me` (0 or 1) on `nic`, exposing a zeroed 4 KiB segment at [`C_DATA`],
/// its acks riding on the next frame back as on hosted `shm` (a beacon vouches).
pub fn cheetah(nic: MyriNic, me: u16) -> C {
    let mut mem = Segments::new();
    assert_eq!(mem.expose(Vec::leak(vec![0u8; 4096])), C_DATA);
    let mut cfg = Config::new(9, 1, me);
    // As a hosted rank, whose beacon speaks for it while it computes.
    cfg.ack_exchange_ends = false;
    let mut c = Cheetah::setup(cfg, GROUPS, 2, nic, StdClock::default(), mem).unwrap();
    c.register(C_TAG, on_invoke);
    c
}

/// [`C_TAG`]'s handler: rings [`C_INVOKED`].
fn on_invoke(c: &mut C, _who: u16, _tag: i32, _data: &[u8]) {
    use volley_core::engine::Memory;
    c.memory_mut().ring(C_INVOKED);
}
