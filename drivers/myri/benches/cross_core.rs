//! Where a one-way `shm` message's time goes when its two ends run on two cores, as
//! the hosted fabric's ranks do: the bare flag ping-pong (`volley bench`'s `shm`
//! reference: one word written, one read), the NIC model's ring alone (a frame
//! written into a slot and read out, no engine), GAMMA `send_flowctl` + `wait`
//! through the engine on the same kind of region, and a Cheetah 8-byte put that
//! rings the other's bell, which it waits for. `engine_cost` counts the engine's
//! instructions on one core; this says what the line transfers and the ring add.
//!
//! `cargo bench -p volley-myri --bench cross_core [-- CPU_A CPU_B [ITERS]]` (default
//! cores 0 and 1, 20000 round trips a round): two threads pinned to the two cores run
//! 9 rounds of the four tests, interleaved so that drift of the machine shows as
//! spread, and print each test's median over the rounds (one-way nanoseconds), its
//! spread and its ratio to the flag. `VOLLEY_BENCH_NODES=N` (2 to 64) puts the two
//! ends on a region of `N` nodes, whose rings and boards every poll looks at.

use std::alloc::{alloc_zeroed, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant as WallInstant;

use volley_core::phy::{Device, RxToken, TxToken};
use volley_core::time::Instant;
use volley_core::NodeAddr;
use volley_myri::{Geometry, MyriError, MyriNic, NicConfig, Region};

// The pair's other helpers make both ends on one thread; only `gamma`, `cheetah`
// and `geometry` are used here.
#[allow(dead_code)]
#[path = "../tests/pair/mod.rs"]
mod pair;
use pair::{cheetah, gamma, C_BELL, C_DATA};

const ROUNDS: usize = 9;
const TESTS: [&str; 4] = [
    "reference: bare flag ping-pong",
    "raw ring, 8 B frame",
    "GAMMA send_flowctl + wait, 8 B",
    "Cheetah put (remote bell) + wait, 8 B",
];

/// Zeroed, page-aligned memory that lives as long as the program (a region both
/// threads map, as two processes map a `/dev/shm` file).
fn leaked(len: usize) -> usize {
    let layout = Layout::from_size_align(len, 4096).unwrap();
    // SAFETY: non-zero size; never freed.
    let p = unsafe { alloc_zeroed(layout) };
    assert!(!p.is_null());
    p as usize
}

/// Whether this process may run on core `cpu`.
fn allowed(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set that sched_getaffinity fills;
    // CPU_ISSET reads a bit inside it (`cpu` is below CPU_SETSIZE).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0
            && libc::CPU_ISSET(cpu, &set)
    }
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let r = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(r, 0, "cannot pin to core {cpu}");
    }
}

/// Node `me`'s NIC on the region at `base` (node 0 creates it, node 1 waits for it).
fn nic(base: usize, len: usize, geo: Geometry, me: u32) -> MyriNic {
    // SAFETY: `base` is a leaked allocation of `len` bytes, used only through NICs.
    let r = || unsafe { Region::new(base as *mut u8, len) }.unwrap();
    if me == 0 {
        return MyriNic::create(r(), geo, 0, 9, NicConfig::default()).unwrap();
    }
    loop {
        match MyriNic::attach(r(), 1, 9, NicConfig::default()) {
            Ok(n) => return n,
            Err(MyriError::NotReady { .. }) => std::hint::spin_loop(),
            Err(e) => panic!("attach: {e:?}"),
        }
    }
}

/// One side: `me` 0 starts each round trip and times it; returns its per-round
/// one-way times, by test.
#[allow(clippy::too_many_arguments)]
fn side(
    me: u16,
    cpu: usize,
    iters: usize,
    flag: usize,
    ring: (usize, usize),
    gam: (usize, usize),
    chee: (usize, usize),
    geo: Geometry,
    go: &Barrier,
) -> Vec<Vec<f64>> {
    pin(cpu);
    // SAFETY: the flag page is a leaked allocation of 4096 bytes; both threads touch
    // these two words only atomically.
    let (ping, pong) = unsafe {
        (
            &*(flag as *const AtomicU64),
            &*((flag + 128) as *const AtomicU64),
        )
    };
    let mut raw = nic(ring.0, ring.1, geo, me as u32);
    let mut g = gamma(nic(gam.0, gam.1, geo, me as u32), me, None);
    let mut c = cheetah(nic(chee.0, chee.1, geo, me as u32), me);
    let mut rung = 0;
    let peer = NodeAddr(1 - me);
    let now = Instant::ZERO;
    let mut out = vec![Vec::new(); TESTS.len()];
    let mut n = 0u64;
    for _ in 0..ROUNDS {
        for (t, times) in out.iter_mut().enumerate() {
            go.wait();
            let t0 = WallInstant::now();
            for _ in 0..iters {
                n += 1;
                let send_first = me == 0;
                match t {
                    0 => {
                        if send_first {
                            ping.store(n, Ordering::Release);
                            while pong.load(Ordering::Acquire) != n {}
                        } else {
                            while ping.load(Ordering::Acquire) != n {}
                            pong.store(n, Ordering::Release);
                        }
                    }
                    1 => {
                        let send = |raw: &mut MyriNic| {
                            raw.transmit(now, peer)
                                .unwrap()
                                .consume(8, |f| f.copy_from_slice(&n.to_le_bytes()));
                        };
                        let recv = |raw: &mut MyriNic| loop {
                            if let Some(tok) = raw.receive(now) {
                                let got =
                                    tok.consume(|f| u64::from_le_bytes(f[..8].try_into().unwrap()));
                                assert_eq!(got, n);
                                break;
                            }
                        };
                        if send_first {
                            send(&mut raw);
                            recv(&mut raw);
                        } else {
                            recv(&mut raw);
                            send(&mut raw);
                        }
                    }
                    2 => {
                        let data = n.to_le_bytes();
                        if send_first {
                            g.send_flowctl(1, &data).unwrap();
                            g.wait(1, 1).unwrap();
                        } else {
                            g.wait(1, 1).unwrap();
                            g.send_flowctl(1, &data).unwrap();
                        }
                    }
                    _ => {
                        rung += 1;
                        let put = |c: &mut pair::C| {
                            c.put(1 - me, C_DATA, C_DATA, 8, 0, C_BELL).unwrap();
                        };
                        if send_first {
                            put(&mut c);
                            c.wait(C_BELL, rung).unwrap();
                        } else {
                            c.wait(C_BELL, rung).unwrap();
                            put(&mut c);
                        }
                    }
                }
            }
            times.push(t0.elapsed().as_nanos() as f64 / (2 * iters) as f64);
        }
    }
    black_box(*g.state());
    assert_eq!(*g.state(), (ROUNDS * iters) as u64);
    assert_eq!(c.bell(C_BELL).unwrap(), (ROUNDS * iters) as i32);
    out
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (a, b) = (
        args.first().copied().unwrap_or(0),
        args.get(1).copied().unwrap_or(1),
    );
    let iters = args.get(2).copied().unwrap_or(20_000).max(1);
    // Checked before the threads start: one that cannot pin would leave the other
    // waiting at the first round's barrier.
    for cpu in [a, b] {
        if !allowed(cpu) {
            eprintln!("cross_core: core {cpu} is not one this process may run on");
            std::process::exit(2);
        }
    }
    // The hosted `shm` fabric's geometry (as `engine_cost`'s pair).
    let geo = pair::geometry();
    let len = geo.region_len().unwrap();
    let (flag, ring, gam) = (leaked(4096), (leaked(len), len), (leaked(len), len));
    let chee = (leaked(len), len);
    let go = Barrier::new(2);
    let times = std::thread::scope(|s| {
        let other = s.spawn(|| side(1, b, iters, flag, ring, gam, chee, geo, &go));
        let mine = side(0, a, iters, flag, ring, gam, chee, geo, &go);
        other.join().unwrap();
        mine
    });
    println!("cores {a} and {b}, {iters} round trips a round, {ROUNDS} rounds (one-way ns)");
    let mut reference = 0.0;
    for (name, mut v) in TESTS.iter().zip(times) {
        v.sort_by(|x, y| x.total_cmp(y));
        let m = v[v.len() / 2];
        if reference == 0.0 {
            reference = m;
        }
        println!(
            "{name:<34} median {m:>7.1}  min {:>7.1}  max {:>7.1}  {:.2}x",
            v[0],
            v[v.len() - 1],
            m / reference
        );
    }
}
