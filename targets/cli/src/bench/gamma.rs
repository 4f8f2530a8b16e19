//! GAMMA rows: one-way latency (plain and from a handler) and streaming bandwidth.

use super::*;

pub(super) fn on_count(u: &mut volley_core::gamma::Upcall<'_, '_, State>) {
    u.state().handled += 1;
}

/// Rank 1's port 3: answers each message from inside the handler, as an active
/// message's reply (a send it cannot queue is counted as an error).
pub(super) fn on_echo(u: &mut volley_core::gamma::Upcall<'_, '_, State>) {
    let mut b = [0u8; 64];
    let n = u.len().min(b.len());
    b[..n].copy_from_slice(&u.data()[..n]);
    let port = u.active_port();
    if u.send_flowctl(port, &[], &b[..n]).is_err() {
        u.state().bad.push("echo not queued".into());
    }
}

/// A GAMMA process of a 2-rank bench job, with port 1 (up to 1 MiB, counted) and
/// port 2 (acks) bound to the other rank, after a barrier.
pub(super) fn gamma_pair(boot: &Boot, fabric: Fabric) -> Result<HostGamma<State>, HostError> {
    let mut g: HostGamma<State> = node::gamma(boot, fabric, State::default())?;
    let peer = 1 - g.my_node();
    let pid = g.my_par_pid();
    for (port, size) in [(1u16, 1usize << 20), (2, 64), (3, 64)] {
        let h = if port == 3 && g.my_node() == 1 {
            on_echo
        } else {
            on_count
        };
        g.set_active_port(
            port,
            peer,
            pid,
            port,
            Some(h),
            None,
            port,
            GO_BACK,
            Some(Vec::leak(vec![0u8; size])),
        )?;
    }
    g.sync()?;
    Ok(g)
}

/// One-way latency of `len`-byte messages, half of each ping-pong after a tenth as
/// warm-up (microseconds, on rank 0; rank 1 echoes); with `asleep`, both ranks
/// wait asleep on their wake-up descriptors ([`volley_hosted::wakeup`]), as a
/// program in an event loop does.
pub(super) fn gamma_latency(
    g: &mut HostGamma<State>,
    len: usize,
    iters: usize,
    reliable: bool,
    asleep: bool,
) -> Result<Vec<f64>, HostError> {
    let wait = |g: &mut HostGamma<State>| -> Result<(), HostError> {
        if asleep {
            wait_asleep(g)
        } else {
            g.wait(1, 1)?;
            Ok(())
        }
    };
    let me = g.my_node();
    let data = pattern(me, 0, len);
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let t0 = g.time();
        if me == 0 {
            if reliable {
                g.send_flowctl(1, &data)?
            } else {
                g.send(1, &data)?
            };
            wait(g)?;
            if i >= iters / 10 {
                samples.push(Gamma::<HostDevice, HostClock, State>::time_diff(g.time(), t0) / 2.0);
            }
        } else {
            wait(g)?;
            if reliable {
                g.send_flowctl(1, &data)?
            } else {
                g.send(1, &data)?
            };
        }
    }
    Ok(samples)
}

/// Waits for one message on port 1 as an event loop does: polls, and between two
/// polls that find nothing arms the wake-up descriptor and sleeps on it.
fn wait_asleep(g: &mut HostGamma<State>) -> Result<(), HostError> {
    let since = StdInstant::now();
    loop {
        if g.test(1)? > 0 {
            g.wait(1, 1)?;
            return Ok(());
        }
        sleep_if_armed(g, since)?;
    }
}

/// One-way latency of an active message answered from its handler: rank 0 sends 8
/// bytes to port 3 (`send_flowctl`) and waits for the answer, which rank 1's
/// handler sends while rank 1 waits for all of them (half of each round trip after
/// a tenth as warm-up, microseconds, on rank 0).
pub(super) fn handler_echo(g: &mut HostGamma<State>, iters: usize) -> Result<Vec<f64>, HostError> {
    let total = iters + iters / 10;
    let data = pattern(g.my_node(), 0, 8);
    let mut samples = Vec::with_capacity(iters);
    if g.my_node() == 1 {
        g.wait(3, total as u32)?;
    } else {
        for i in 0..total {
            let t0 = g.time();
            g.send_flowctl(3, &data)?;
            g.wait(3, 1)?;
            if i >= iters / 10 {
                samples.push(Gamma::<HostDevice, HostClock, State>::time_diff(g.time(), t0) / 2.0);
            }
        }
    }
    if let Some(b) = g.state().bad.first() {
        return Err(HostError::Other(format!("bench: {b}")));
    }
    Ok(samples)
}

/// Streaming bandwidth, OSU style: per round a window of 32 non-blocking sends of
/// `len` bytes, then a short ack; MB/s per round on rank 0, after two warm-up rounds.
pub(super) fn gamma_stream(
    g: &mut HostGamma<State>,
    len: usize,
    rounds: usize,
) -> Result<Vec<f64>, HostError> {
    const WINDOW: usize = 32;
    let me = g.my_node();
    let msg: &'static [u8] = Vec::leak(pattern(me, 0, len));
    let mut samples = Vec::new();
    for r in 0..rounds + 2 {
        let t0 = g.time();
        if me == 0 {
            let hs: Vec<_> = (0..WINDOW)
                .map(|_| g.isend_flowctl(1, msg))
                .collect::<Result<_, _>>()?;
            for h in hs {
                g.wsend(h)?;
            }
            g.wait(2, 1)?;
            if r >= 2 {
                let secs = Gamma::<HostDevice, HostClock, State>::time_diff(g.time(), t0) / 1e6;
                samples.push((len * WINDOW) as f64 / secs / 1e6);
            }
        } else {
            g.wait(1, WINDOW as u32)?;
            g.send_flowctl(2, b"ack")?;
        }
    }
    Ok(samples)
}
