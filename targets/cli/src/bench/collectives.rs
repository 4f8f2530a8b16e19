//! Collective rows: barrier and broadcast over every rank, beside MPICH's.

use super::*;

pub(super) fn barrier_rows(
    g: &mut HostGamma<State>,
    name: &'static str,
    n: u16,
    reference: f64,
    sw: Sweep,
) -> Result<Vec<Row>, HostError> {
    progress(&format!("barrier {n} ranks"));
    let iters = collective_iters(sw)[0];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let t0 = g.time();
        g.sync()?;
        if i >= iters / 10 {
            samples.push(Gamma::<HostDevice, HostClock, State>::time_diff(
                g.time(),
                t0,
            ));
        }
    }
    Ok(vec![latency_row(
        name,
        &format!("barrier{}", ranks_label(n)),
        0,
        samples,
        reference,
    )])
}

/// CPUs online, whatever this process is pinned to (bench ranks pin themselves).
pub(super) fn online_cores() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |c| c.get())
    }
}

/// Broadcast sizes of the collective rows, with their full-run iteration counts.
pub const BCAST_SIZES: [(usize, usize); 3] = [(8, 2_000), (16 << 10, 1_000), (1 << 20, 100)];

/// Iterations of the collective rows: barrier, then each broadcast size. MPICH's
/// rows run the same counts.
pub fn collective_iters(sw: Sweep) -> [usize; 4] {
    let b = |(bytes, full): (usize, usize)| {
        if bytes > 64 << 10 {
            sw.rounds(full)
        } else {
            sw.iters(full)
        }
    };
    [
        sw.iters(5_000),
        b(BCAST_SIZES[0]),
        b(BCAST_SIZES[1]),
        b(BCAST_SIZES[2]),
    ]
}

/// Rank counts of the collective rows: 2, 4, 8 and 16, as far as the machine has
/// cores, and at least 2 and 4.
pub fn collective_ranks() -> Vec<u16> {
    let cores = online_cores();
    [2u16, 4, 8, 16]
        .into_iter()
        .filter(|&r| r <= 4 || r as usize <= cores)
        .collect()
}

/// On each MPICH collective row, Volley's median over MPICH's for the same
/// collective, rank count and size (below 1: Volley is ahead).
pub fn ratios_to_mpich(volley: &[Row], mpich: &mut [Row]) {
    for r in mpich.iter_mut() {
        let ours = if let Some(rest) = r.test.strip_prefix("MPICH MPI_Barrier") {
            format!("barrier{rest}")
        } else if let Some(rest) = r.test.strip_prefix("MPICH MPI_Bcast") {
            format!("broadcast{rest}")
        } else {
            continue;
        };
        r.ratio = volley
            .iter()
            .find(|o| o.fabric == r.fabric && o.bytes == r.bytes && o.test == ours)
            .map(|o| o.median / r.median);
    }
}

/// Broadcast rows: GAMMA's `BROADCAST` port from instance 0, each call after a
/// barrier and timed on every rank from the call to its return (the root) or to the
/// message having landed (the others). Each rank's median, p90 and p99 are averaged
/// over the ranks, as OSU's `osu_bcast` reports; the sums travel as fetch-and-adds
/// (nanoseconds) to rank 0's counters 0-2.
pub(super) fn bcast_rows(
    g: &mut HostGamma<State>,
    name: &'static str,
    n: u16,
    reference: f64,
    sw: Sweep,
) -> Result<Vec<Row>, HostError> {
    let me = g.my_node();
    let dest = if me == 0 { BROADCAST } else { 0 };
    let largest = BCAST_SIZES[BCAST_SIZES.len() - 1].0;
    let buf: &'static mut [u8] = Vec::leak(vec![0u8; largest]);
    let pid = g.my_par_pid();
    g.set_active_port(2, dest, pid, 2, None, None, 2, GO_BACK, Some(buf))?;
    let data = pattern(0, 1, largest);
    let mut rows = Vec::new();
    let mut totals = [0u32; 3];
    for (k, (bytes, _)) in BCAST_SIZES.into_iter().enumerate() {
        // Every rank skips alike: the sizes reach them all on the command line.
        if !sw.wants(bytes) {
            continue;
        }
        progress(&format!("broadcast {bytes} B, {n} ranks"));
        let iters = collective_iters(sw)[1 + k];
        let warm = iters / 10;
        let mut samples = Vec::with_capacity(iters);
        for i in 0..warm + iters {
            g.sync()?;
            let t0 = StdInstant::now();
            if me == 0 {
                g.send_flowctl(2, &data[..bytes])?;
            } else {
                g.wait(2, 1)?;
            }
            if i >= warm {
                samples.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        if me != 0 && g.buffer(2).map(|b| &b[..bytes]) != Some(&data[..bytes]) {
            return Err(HostError::Other(format!(
                "broadcast of {bytes} B arrived wrong"
            )));
        }
        let (m, p90, p99) = stats(samples);
        for (var, v) in [m, p90, p99].into_iter().enumerate() {
            let ns = (v * 1e3).round().clamp(0.0, (u32::MAX / n as u32) as f64) as u32;
            g.fetch_add(0, var as u16, ns)?;
        }
        g.sync()?;
        if me == 0 {
            let mut avg = [0f64; 3];
            for (var, a) in avg.iter_mut().enumerate() {
                let now = g.fetch_add(0, var as u16, 0)?;
                *a = now.wrapping_sub(totals[var]) as f64 / 1e3 / n as f64;
                totals[var] = now;
            }
            rows.push(Row {
                fabric: name.into(),
                test: format!("broadcast{}", ranks_label(n)),
                bytes,
                unit: "us".into(),
                median: avg[0],
                p90: avg[1],
                p99: avg[2],
                ratio: Some(avg[0] / reference),
            });
        }
    }
    Ok(rows)
}

/// Barrier and broadcast (8 B, 16 KiB, 1 MiB) over every rank of a job across
/// hosts, with no reference row (a pair's raw limit says little of a collective
/// over many hosts; `benches/hosts_scale.rs` sets MPICH beside it instead).
pub fn across_hosts(boot: &Boot, fabric: Fabric, sw: Sweep) -> Result<Vec<Row>, HostError> {
    let mut g: HostGamma<State> = node::gamma(boot, fabric, State::default())?;
    let mut rows = barrier_rows(&mut g, fabric.name(), boot.size, 1.0, sw)?;
    rows.extend(bcast_rows(&mut g, fabric.name(), boot.size, 1.0, sw)?);
    g.sync()?;
    g.exit();
    for r in &mut rows {
        r.ratio = None;
    }
    Ok(if boot.rank == 0 { rows } else { Vec::new() })
}

/// The collective part of the sweep with every rank of the job (`volley bench` runs
/// it at 2, 4, 8 and 16 ranks, as far as the machine has cores and at least to 4):
/// barrier, then broadcast of 8 B, 16 KiB and 1 MiB.
pub fn collectives(boot: &Boot, fabric: Fabric, sw: Sweep) -> Result<Vec<Row>, HostError> {
    pin(boot.rank);
    let reference = match fabric {
        Fabric::Shm if boot.rank < 2 => {
            stats(flag_pingpong(
                &Boot {
                    size: 2,
                    ..boot.clone()
                },
                20_000,
            )?)
            .0
        }
        Fabric::Udp if boot.rank < 2 => {
            stats(udp_pingpong(
                &Boot {
                    size: 2,
                    ..boot.clone()
                },
                8,
                5_000,
            )?)
            .0
        }
        Fabric::Eth if boot.rank < 2 => {
            let pair = Boot {
                size: 2,
                ..boot.clone()
            };
            let off = volley_hosted::eth::XdpSetting::Off;
            stats(eth_reference(&pair, 8, 5_000, 0, off)?.0).0
        }
        _ => 1.0,
    };
    let mut g: HostGamma<State> = node::gamma(boot, fabric, State::default())?;
    let mut rows = barrier_rows(&mut g, fabric.name(), boot.size, reference, sw)?;
    if fabric == Fabric::Shm {
        // The other barrier on the same rings, same run.
        let on = g.engine().config().device_barrier;
        g.engine_mut().set_device_barrier(!on)?;
        let mut other = barrier_rows(&mut g, fabric.name(), boot.size, reference, sw)?;
        g.engine_mut().set_device_barrier(on)?;
        let name = if on {
            "barrier over frames"
        } else {
            "barrier in NIC memory"
        };
        for r in &mut other {
            r.test = r.test.replacen("barrier", name, 1);
        }
        rows.extend(other);
    }
    rows.extend(bcast_rows(&mut g, fabric.name(), boot.size, reference, sw)?);
    g.sync()?;
    g.exit();
    Ok(if boot.rank == 0 { rows } else { Vec::new() })
}
