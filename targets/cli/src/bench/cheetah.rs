//! Cheetah rows: puts, gets and invocations, through the engine and direct.

use super::*;

pub(super) type BenchCheetah = Cheetah<'static, HostDevice, HostClock, Segments<'static>>;
/// Bench memory: segment 1 data (2 MiB), segment 2 bells (`BELL_*`, i32 each).
pub(super) const C_DATA: u64 = 1 << 40;
pub(super) const C_BELLS: u64 = 2 << 40;
pub(super) const BELL_PUT: u64 = C_BELLS;
pub(super) const BELL_LOCAL: u64 = C_BELLS + 4;
pub(super) const BELL_INVOKE: u64 = C_BELLS + 8;

/// Tag 1 answers with tag 2; tag 2 rings `BELL_INVOKE`.
pub(super) fn c_echo(c: &mut BenchCheetah, who: u16, _tag: i32, buf: &[u8]) {
    let _ = c.ainvoke(who, 2, buf, 0);
}
pub(super) fn c_pong(c: &mut BenchCheetah, _who: u16, _tag: i32, _buf: &[u8]) {
    c.memory_mut().ring(BELL_INVOKE);
}

/// Cheetah core on the same device, same run: a put's one-way latency (the
/// receiver waits on the remote bell and puts back), a get's and an ainvoke's
/// round trip, and put bandwidth (1 MiB puts, 8 in flight, against `memcpy` on
/// shm).
pub(super) fn cheetah_rows(
    boot: &Boot,
    fabric: Fabric,
    dev: HostDevice,
    lm: f64,
    ref_mbs: Option<f64>,
    sw: Sweep,
) -> Result<(Vec<Row>, HostDevice), HostError> {
    let name = fabric.name();
    let groups = node::groups(boot.size)?;
    let mut cfg = node::engine_config(boot, fabric, groups, &dev)?;
    cfg.job_key ^= 0xc4ee;
    let mut mem = Segments::new();
    mem.expose(Vec::leak(vec![0u8; 2 << 20]));
    mem.expose(Vec::leak(vec![0u8; 64]));
    let e = |e: volley_core::engine::Error| HostError::Other(format!("cheetah: {e}"));
    let mut c: BenchCheetah = Cheetah::setup(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        mem,
    )
    .map_err(e)?;
    c.register(1, c_echo);
    c.register(2, c_pong);
    c.barrier().map_err(e)?;
    let me = c.mycontext();
    let peer = 1 - me;
    let mut rows = Vec::new();
    let row = |test: &str, bytes, v: Vec<f64>| latency_row(name, test, bytes, v, lm);

    progress("cheetah put latency");
    let iters = sw.iters(20_000);
    let samples = put_pingpong(&mut c, iters, BELL_PUT, None, e, |c| {
        c.put(peer, C_DATA, C_DATA, 8, 0, BELL_PUT)
    })?;
    if me == 0 {
        rows.push(row("cheetah put, one-way (remote bell)", 8, samples));
    }

    // The same exchange with both sides asleep on the wake-up descriptor until
    // their bell rings.
    progress("cheetah put latency, asleep in epoll");
    // Read before the barrier: after it the peer's first put may land while this
    // side is still inside the barrier's polls.
    let base = c.bell(BELL_PUT).map_err(e)?;
    c.barrier().map_err(e)?;
    let samples = put_pingpong(&mut c, sw.iters(5_000), BELL_PUT, Some(base), e, |c| {
        c.put(peer, C_DATA, C_DATA, 8, 0, BELL_PUT)
    })?;
    if me == 0 {
        rows.push(row("cheetah put, one-way, asleep in epoll", 8, samples));
    }

    progress("cheetah get and ainvoke round trips");
    c.barrier().map_err(e)?;
    if me == 0 {
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters as i32 {
            let t0 = StdInstant::now();
            c.get(peer, C_DATA, C_DATA + 64, 8, BELL_LOCAL, 0)
                .map_err(e)?;
            c.wait(BELL_LOCAL, i + 1).map_err(e)?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        rows.push(row("cheetah get, round trip", 8, samples));
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters as i32 {
            let t0 = StdInstant::now();
            c.ainvoke(peer, 1, &[7; 8], 0).map_err(e)?;
            c.wait(BELL_INVOKE, i + 1).map_err(e)?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        rows.push(row("cheetah ainvoke, round trip", 8, samples));
    }
    c.barrier().map_err(e)?;

    progress("cheetah put bandwidth");
    let len = 1 << 20;
    let window = 8;
    let reps = sw.rounds(30);
    if me == 0 {
        let samples = put_bandwidth(&mut c, reps, window, len, BELL_LOCAL, |c| {
            c.put(peer, C_DATA, C_DATA + (1 << 20), len, BELL_LOCAL, 0)
        })
        .map_err(e)?;
        rows.push(bandwidth_row(
            name,
            "cheetah put bandwidth, 8 in flight",
            len,
            samples,
            ref_mbs,
        ));
    }
    c.finalize().map_err(e)?;
    Ok((rows, c.into_device()))
}

/// An 8-byte put ping-pong between contexts 0 and 1 (`put` rings the other's
/// `bell`, which each waits for in turn); one-way microseconds at context 0 after a
/// tenth of warm-up, none at context 1. The bell counts from 0, or with `asleep`
/// from that count, each side then asleep on its wake-up descriptor between polls
/// until its bell moves; `e` words an error.
pub(super) fn put_pingpong<M: Memory>(
    c: &mut Cheetah<'static, HostDevice, HostClock, M>,
    iters: usize,
    bell: u64,
    asleep: Option<i32>,
    e: impl Fn(Error) -> HostError,
    mut put: impl FnMut(&mut Cheetah<'static, HostDevice, HostClock, M>) -> Result<(), Error>,
) -> Result<Vec<f64>, HostError> {
    let me = c.mycontext();
    let base = asleep.unwrap_or(0);
    let mut samples = Vec::with_capacity(iters);
    for i in 0..(iters + iters / 10) as i32 {
        let t0 = StdInstant::now();
        if me == 0 {
            put(c).map_err(&e)?;
        }
        if asleep.is_some() {
            loop {
                c.poll().map_err(&e)?;
                if c.bell(bell).map_err(&e)? > base + i {
                    break;
                }
                sleep_if_armed(c, t0)?;
            }
        } else {
            c.wait(bell, i + 1).map_err(&e)?;
        }
        if me == 1 {
            put(c).map_err(&e)?;
        } else if i >= (iters / 10) as i32 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    Ok(samples)
}

/// Put bandwidth in MB/s per round: `window` puts of `len` bytes by `put`, each
/// ringing the local bell at `bell`, then a wait for them all.
pub(super) fn put_bandwidth<M: Memory>(
    c: &mut Cheetah<'static, HostDevice, HostClock, M>,
    reps: usize,
    window: i32,
    len: usize,
    bell: u64,
    mut put: impl FnMut(&mut Cheetah<'static, HostDevice, HostClock, M>) -> Result<(), Error>,
) -> Result<Vec<f64>, Error> {
    let mut samples = Vec::with_capacity(reps);
    let mut rung = c.bell(bell)?;
    for _ in 0..reps {
        let t0 = StdInstant::now();
        for _ in 0..window {
            put(c)?;
        }
        rung += window;
        c.wait(bell, rung)?;
        let secs = t0.elapsed().as_secs_f64();
        samples.push((len * window as usize) as f64 / secs / 1e6);
    }
    Ok(samples)
}

pub(super) type DirectCheetah =
    Cheetah<'static, HostDevice, HostClock, volley_hosted::procmem::ProcessMemory>;

/// The peer's data buffer and bell, as its tag-3 invocation said.
pub(super) static PEER_ADDRS: [std::sync::atomic::AtomicU64; 2] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

pub(super) fn c_addrs(_: &mut DirectCheetah, _who: u16, _tag: i32, buf: &[u8]) {
    for (i, a) in PEER_ADDRS.iter().enumerate() {
        let v = buf
            .get(8 * i..8 * i + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_ne_bytes);
        a.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Cheetah core as the C library runs it on `shm` and `udp`: program memory at its
/// own addresses, puts and gets copied straight between the two processes
/// ([`volley_hosted::direct`]). Rows: a put's one-way latency (the remote bell rung at the
/// receiver's poll), a get's round trip, and put bandwidth (1 MiB puts, 8 in
/// flight, against the fabric's reference). None on `eth`, or with
/// `VOLLEY_CHEETAH_DIRECT=0`.
pub(super) fn cheetah_direct_rows(
    boot: &Boot,
    fabric: Fabric,
    dev: HostDevice,
    lm: f64,
    ref_mbs: Option<f64>,
    sw: Sweep,
) -> Result<(Vec<Row>, HostDevice), HostError> {
    use std::sync::atomic::Ordering;
    use volley_hosted::procmem::ProcessMemory;
    if !matches!(fabric, Fabric::Shm | Fabric::Udp) || !volley_hosted::direct::wanted()? {
        return Ok((Vec::new(), dev));
    }
    let name = fabric.name();
    let groups = node::groups(boot.size)?;
    let mut cfg = node::engine_config(boot, fabric, groups, &dev)?;
    cfg.job_key ^= 0xd1ec;
    let e = |e: volley_core::engine::Error| HostError::Other(format!("cheetah direct: {e}"));
    let mut c: DirectCheetah = Cheetah::setup(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        ProcessMemory::default(),
    )
    .map_err(e)?;
    if !volley_hosted::direct::enable(&mut c, boot.job ^ 0xd1ec, 0, true) {
        return Ok((Vec::new(), c.into_device()));
    }
    c.register(3, c_addrs);
    // Program memory: 2 MiB of data and two bells (put, local), leaked for the run.
    let data = Vec::leak(vec![0u8; 2 << 20]).as_mut_ptr() as u64;
    let bells = Vec::leak(vec![0i32; 2]).as_mut_ptr() as u64;
    let (bell_put, bell_local) = (bells, bells + 4);
    let me = c.mycontext();
    let peer = 1 - me;
    let mut addrs = [0u8; 16];
    addrs[..8].copy_from_slice(&data.to_ne_bytes());
    addrs[8..].copy_from_slice(&bell_put.to_ne_bytes());
    c.ainvoke(peer, 3, &addrs, 0).map_err(e)?;
    c.barrier().map_err(e)?;
    let (their_data, their_bell) = (
        PEER_ADDRS[0].load(Ordering::Relaxed),
        PEER_ADDRS[1].load(Ordering::Relaxed),
    );
    if their_data == 0 {
        return Err(HostError::Other(
            "cheetah direct: the peer's addresses did not come".into(),
        ));
    }
    let mut rows = Vec::new();
    let row = |test: &str, bytes, v: Vec<f64>| latency_row(name, test, bytes, v, lm);
    let put = volley_hosted::direct::put;

    progress("cheetah direct put latency");
    let iters = sw.iters(20_000);
    let samples = put_pingpong(&mut c, iters, bell_put, None, e, |c| {
        put(c, peer, their_data, data, 8, 0, their_bell)
    })?;
    if me == 0 {
        rows.push(row("cheetah direct put, one-way (remote bell)", 8, samples));
        let mut samples = Vec::with_capacity(iters);
        let mut rung = c.bell(bell_local).map_err(e)?;
        for _ in 0..iters {
            let t0 = StdInstant::now();
            volley_hosted::direct::get(&mut c, peer, their_data, data + 64, 8, bell_local, 0)
                .map_err(e)?;
            rung += 1;
            c.wait(bell_local, rung).map_err(e)?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        rows.push(row("cheetah direct get, round trip", 8, samples));
    }
    c.barrier().map_err(e)?;

    progress("cheetah direct put bandwidth");
    let len = 1 << 20;
    let window = 8;
    let reps = sw.rounds(30);
    if me == 0 {
        let samples = put_bandwidth(&mut c, reps, window, len, bell_local, |c| {
            put(c, peer, their_data, data + (1 << 20), len, bell_local, 0)
        })
        .map_err(e)?;
        rows.push(bandwidth_row(
            name,
            "cheetah direct put bandwidth, 8 in flight",
            len,
            samples,
            ref_mbs,
        ));
        let d = volley_hosted::direct::stats(&c);
        if d.puts == 0 || d.gets == 0 {
            return Err(HostError::Other(format!(
                "cheetah direct: the copies went through the fabric ({d:?})"
            )));
        }
    }
    c.finalize().map_err(e)?;
    Ok((rows, c.into_device()))
}
