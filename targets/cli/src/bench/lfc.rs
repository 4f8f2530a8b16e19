//! LFC rows: packets with and without interrupts.

use super::*;

/// What the LFC upcall in the benchmark shares with the program.
#[derive(Debug, Default)]
pub(super) struct LfcBench {
    pub(super) received: Arc<AtomicU64>,
}

pub(super) fn lfc_count(l: &mut HostLfc<LfcBench>, _r: Received) -> Keep {
    l.state().received.fetch_add(1, Ordering::Release);
    Keep::No
}

pub(super) fn lock_lfc(
    s: &Mutex<HostLfc<LfcBench>>,
) -> std::sync::MutexGuard<'_, HostLfc<LfcBench>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn lfc_interrupt(l: &mut HostLfc<LfcBench>) -> bool {
    l.interrupt();
    l.intr_status()
}

/// LFC on the same device, same run: one-way latency of an 8-byte packet when the
/// receiver polls and when it spins on a counter with interrupts enabled (the
/// guide's chapter-5 program), and the fetch-and-add round trip.
pub(super) fn lfc_rows(
    boot: &Boot,
    fabric: Fabric,
    dev: HostDevice,
    lm: f64,
    sw: Sweep,
) -> Result<(Vec<Row>, HostDevice), HostError> {
    let name = fabric.name();
    let groups = node::groups(boot.size)?;
    let mut cfg = node::engine_config(boot, fabric, groups, &dev)?;
    // Frames the GAMMA engine still had in flight are another job's to this one.
    cfg.job_key ^= 0x1fc;
    let mut l = Lfc::init_alloc(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        LfcOptions::default(),
        lfc_count,
        LfcBench::default(),
    )
    .map_err(|e| HostError::Other(format!("lfc: {e}")))?;
    l.start()?;
    let me = l.my_proc();
    let peer = 1 - me;
    let mut rows = Vec::new();
    let row = |test: &str, bytes, v: Vec<f64>| latency_row(name, test, bytes, v, lm);
    // The program writes the whole payload into the packet, as a real one would.
    let send = |l: &mut HostLfc<LfcBench>, size: usize| -> Result<(), HostError> {
        let p = l.send_alloc(true)?;
        l.packet_mut(p)
            .ok_or_else(|| HostError::Other("lfc packet".into()))?[..size]
            .fill(7);
        l.ucast_launch(peer, p, size, true)?;
        Ok(())
    };

    let count = l.state().received.clone();
    let mut want = 0;
    // 8 bytes, and a full packet (where a copy on the way would show); then 8 bytes
    // with both sides asleep on the wake-up descriptor between polls.
    let psize = l.packet_size();
    for (size, asleep, iters, test) in [
        (8, false, sw.iters(20_000), "lfc latency, one-way, polling"),
        (
            psize,
            false,
            sw.iters(5_000),
            "lfc latency, one-way, polling",
        ),
        (
            8,
            true,
            sw.iters(5_000),
            "lfc latency, one-way, asleep in epoll",
        ),
    ] {
        progress(&format!("{test}, {size} B"));
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters + iters / 10 {
            let t0 = StdInstant::now();
            if me == 0 {
                send(&mut l, size)?;
            }
            want += 1;
            while count.load(Ordering::Acquire) < want {
                l.poll()?;
                if asleep && count.load(Ordering::Acquire) < want {
                    sleep_if_armed(&mut l, t0)?;
                }
            }
            if me == 1 {
                send(&mut l, size)?;
            } else if i >= iters / 10 {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        if me == 0 {
            rows.push(row(test, size, samples));
        }
    }
    let iters = sw.iters(20_000);

    // The same exchange by `lfc_bcast_launch` both ways: on `shm` one write into the
    // root's board in NIC memory, elsewhere down the tree (here one hop).
    progress("lfc broadcast, polling");
    l.barrier()?;
    let bcast = |l: &mut HostLfc<LfcBench>| -> Result<(), HostError> {
        let p = l.send_alloc(true)?;
        l.packet_mut(p)
            .ok_or_else(|| HostError::Other("lfc packet".into()))?[..8]
            .copy_from_slice(&[7; 8]);
        l.bcast_launch(p, 8, true)?;
        Ok(())
    };
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let t0 = StdInstant::now();
        if me == 0 {
            bcast(&mut l)?;
        }
        want += 1;
        while count.load(Ordering::Acquire) < want {
            l.poll()?;
        }
        if me == 1 {
            bcast(&mut l)?;
        } else if i >= iters / 10 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    if me == 0 {
        rows.push(row("lfc broadcast, one-way, polling, 2 ranks", 8, samples));
    }

    progress("lfc latency, interrupts");
    // The interrupt thread takes over; both sides spin on the counter.
    let period = l.options().intr_first.min(l.options().interval);
    l.barrier()?;
    let shared = Arc::new(Mutex::new(l));
    let intr = Interrupts::start(shared.clone(), period, lfc_interrupt);
    lock_lfc(&shared).intr_enable();
    intr.enabled();
    let iters = sw.iters(2_000);
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let t0 = StdInstant::now();
        if me == 0 {
            send(&mut lock_lfc(&shared), 8)?;
        }
        want += 1;
        while count.load(Ordering::Acquire) < want {
            std::hint::spin_loop();
        }
        if me == 1 {
            send(&mut lock_lfc(&shared), 8)?;
        } else if i >= iters / 10 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    lock_lfc(&shared).intr_disable();
    drop(intr);
    let mut l = Arc::into_inner(shared)
        .ok_or_else(|| HostError::Other("lfc: interrupt thread still holds the process".into()))?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    if me == 0 {
        rows.push(row("lfc latency, one-way, interrupts", 8, samples));
    }

    progress("lfc fetch-and-add");
    l.barrier()?;
    let iters = sw.iters(20_000);
    if me == 0 {
        let mut samples = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t0 = StdInstant::now();
            l.fetch_and_add(1, true)?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        rows.push(row("lfc fetch_and_add, round trip", 4, samples));
        send(&mut l, 8)?;
    } else {
        // Served by this process's engine (udp) or its NIC memory (shm) while it
        // waits for the end.
        want += 1;
        while count.load(Ordering::Acquire) < want {
            l.poll()?;
        }
    }
    l.barrier()?;
    let (dev, _) = l.exit();
    Ok((rows, dev))
}
