//! QNIX rows: short-send latency, send bandwidth, barrier and broadcast.

use super::*;

pub(super) type BenchQnix =
    volley_core::qnix::Qnix<'static, HostDevice, HostClock, Segments<'static>>;

/// QNIX on the same device, same run, 2 ranks: `send_short` one-way latency
/// (ping-pong / 2, receives posted first), `send` bandwidth (8 sends of 512 KiB
/// from the pool into posted pool receives, then a short acknowledgement),
/// `qx_barrier`, and `broadcast_short` answered by a `send_short`.
pub(super) fn qnix_rows(
    boot: &Boot,
    fabric: Fabric,
    dev: HostDevice,
    lm: f64,
    ref_mbs: Option<f64>,
    sw: Sweep,
) -> Result<Vec<Row>, HostError> {
    use volley_core::qnix::{Name, QxError, Region};
    let name = fabric.name();
    let groups = node::groups(boot.size)?;
    let mut cfg = node::engine_config(boot, fabric, groups, &dev)?;
    cfg.job_key ^= 0x9a1c;
    let pool_len = 8 << 20;
    let mut mem = Segments::new();
    let pool = mem.expose(Vec::leak(vec![0u8; pool_len]));
    let e = |e: QxError| HostError::Other(format!("qnix: {e}"));
    let mut q: BenchQnix = volley_core::qnix::Qnix::new(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        mem,
    )
    .map_err(e)?;
    q.set_idle(Some(std::thread::yield_now));
    q.set_pool(pool, pool_len).map_err(e)?;
    let me = boot.rank as i32;
    q.init(Name::new(1, me), 1, boot.size as i32).map_err(e)?;
    let peer = Name::new(1, 1 - me);
    let mut rows = Vec::new();
    let barrier = |q: &mut BenchQnix| -> Result<(), HostError> {
        let c = q
            .send_context(peer, 0, true, 0, 0, Region::None)
            .map_err(e)?;
        q.barrier(c, 1, 2).map_err(e)?;
        q.poll_for_send(c).map_err(e)
    };
    let recv = |q: &mut BenchQnix, tag: i32, len: usize, page: usize| {
        let r = q
            .recv_context(peer, tag, true, 0, len, Region::Pool(page))
            .map_err(e)?;
        q.receive(r).map_err(e)?;
        Ok::<usize, HostError>(r)
    };
    let short = |q: &mut BenchQnix, tag: i32| -> Result<(), HostError> {
        // The bytes in a buffer the process keeps (no allocation once warm).
        let data = q.short_data(&[7; 8]).map_err(e)?;
        let s = q.send_context(peer, tag, false, 1, 8, data).map_err(e)?;
        q.send_short(s).map_err(e)
    };
    barrier(&mut q)?;

    // The exchange spinning in `poll_for_receive`, then with both sides asleep on
    // the wake-up descriptor while their receive context's doorbell is busy.
    let mut r = recv(&mut q, 1, 8, 0)?;
    for (asleep, iters, test) in [
        (false, sw.iters(20_000), "qnix send_short, one-way"),
        (
            true,
            sw.iters(5_000),
            "qnix send_short, one-way, asleep in epoll",
        ),
    ] {
        progress(&format!("{test} latency"));
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters + iters / 10 {
            let t0 = StdInstant::now();
            if me == 0 {
                short(&mut q, 1)?;
            }
            if asleep {
                loop {
                    q.step();
                    if q.recv_doorbell(r) != volley_core::qnix::BUSY {
                        break;
                    }
                    sleep_if_armed(&mut q, t0)?;
                }
            }
            q.poll_for_receive(r).map_err(e)?;
            r = recv(&mut q, 1, 8, 0)?;
            if me == 1 {
                short(&mut q, 1)?;
            } else if i >= iters / 10 {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        if me == 0 {
            rows.push(latency_row(name, test, 8, samples, lm));
        }
        barrier(&mut q)?;
    }

    progress("qnix send bandwidth");
    let len = 512 << 10;
    let window = 8;
    let pages = len / volley_core::qnix::PAGE;
    let reps = sw.rounds(30);
    let mut samples = Vec::with_capacity(reps);
    let mut ack = recv(&mut q, 3, 8, 0)?;
    for _ in 0..reps {
        if me == 1 {
            let rs = (0..window)
                .map(|k| recv(&mut q, 2, len, 1 + k * pages))
                .collect::<Result<Vec<_>, _>>()?;
            short(&mut q, 3)?;
            for r in rs {
                q.poll_for_receive(r).map_err(e)?;
            }
            short(&mut q, 3)?;
        } else {
            // Ready: the receives are posted.
            q.poll_for_receive(ack).map_err(e)?;
            ack = recv(&mut q, 3, 8, 0)?;
            let t0 = StdInstant::now();
            for k in 0..window {
                let s = q
                    .send_context(peer, 2, false, 0, len, Region::Pool(1 + k * pages))
                    .map_err(e)?;
                q.send(s).map_err(e)?;
            }
            q.poll_for_receive(ack).map_err(e)?;
            ack = recv(&mut q, 3, 8, 0)?;
            samples.push((len * window) as f64 / t0.elapsed().as_secs_f64() / 1e6);
        }
    }
    if me == 0 {
        rows.push(bandwidth_row(
            name,
            "qnix send bandwidth, 8 in flight",
            len,
            samples,
            ref_mbs,
        ));
    }
    barrier(&mut q)?;

    // The application's group is the whole fabric here: `qx_barrier` is the
    // engine's barrier (in NIC memory on shm unless VOLLEY_BARRIER=frames).
    progress("qnix barrier");
    let iters = sw.iters(10_000);
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let t0 = StdInstant::now();
        barrier(&mut q)?;
        if i >= iters / 10 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    if me == 0 {
        rows.push(latency_row(
            name,
            "qnix qx_barrier, 2 ranks",
            0,
            samples,
            lm,
        ));
    }
    barrier(&mut q)?;

    // A broadcast to the whole application: on shm written once on the root's
    // board in NIC memory (member by member elsewhere); the member answers with a
    // send_short, and half the round trip is reported.
    progress("qnix broadcast latency");
    let iters = sw.iters(20_000);
    let mut samples = Vec::with_capacity(iters);
    let tag = if me == 0 { 5 } else { 4 };
    let mut r = recv(&mut q, tag, 8, 0)?;
    for i in 0..iters + iters / 10 {
        let t0 = StdInstant::now();
        if me == 0 {
            let data = q.short_data(&[7; 8]).map_err(e)?;
            let s = q.send_context(peer, 4, false, 1, 8, data).map_err(e)?;
            q.broadcast_short(s, 1).map_err(e)?;
        }
        q.poll_for_receive(r).map_err(e)?;
        r = recv(&mut q, tag, 8, 0)?;
        if me == 1 {
            short(&mut q, 5)?;
        } else if i >= iters / 10 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    if me == 0 {
        rows.push(latency_row(
            name,
            "qnix broadcast_short + send_short reply, one-way, 2 ranks",
            8,
            samples,
            lm,
        ));
    }
    barrier(&mut q)?;
    q.end().map_err(e)?;
    Ok(rows)
}
