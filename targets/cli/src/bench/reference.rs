//! Reference rows: the raw limit of each path, measured with no Volley on it
//! (a cache-line flag ping-pong, `memcpy`, bare UDP, TCP and raw Ethernet), and the
//! cost of a frame tag.

use super::*;

/// Time to compute the authentication tag of one frame carrying `len` bytes, in
/// batches of frames (microseconds per frame).
pub(super) fn tag_cost(len: usize, batches: usize) -> Vec<f64> {
    // As the engines tag (see `node`).
    volley_hosted::clmul::install();
    let key = [7u8; 16];
    let mut h = [0u8; volley_core::wire::HEADER_LEN];
    let payload = pattern(0, 0, len);
    let per = (1 << 20) / (len + 64) + 1;
    (0..batches.max(1))
        .map(|b| {
            let t0 = StdInstant::now();
            for i in 0..per as u32 {
                h[20..24].copy_from_slice(&(i ^ b as u32).to_be_bytes());
                std::hint::black_box(volley_core::wire::tag(&key, &h, &payload));
            }
            t0.elapsed().as_nanos() as f64 / per as f64 / 1000.0
        })
        .collect()
}

/// The bare reference: two processes bounce a counter through two cache lines.
pub(super) fn flag_pingpong(boot: &Boot, iters: usize) -> Result<Vec<f64>, HostError> {
    // A private directory of this job, checked like the region's.
    let name = volley_hosted::shm::job_dir_name(boot.job, boot.secret.as_ref(), ".bench");
    let (file, dir) = if boot.rank == 0 {
        let dir = volley_hosted::shm::PrivateDir::create(&name)?;
        dir.clear();
        (dir.create_file("flag", 4096)?, Some(dir))
    } else {
        let deadline = StdInstant::now() + StdDuration::from_secs(10);
        loop {
            let f = volley_hosted::shm::PrivateDir::open(&name)?
                .map(|d| d.open_file("flag"))
                .transpose()?
                .flatten();
            match f {
                Some(f) if f.metadata().map(|m| m.len()).unwrap_or(0) == 4096 => break (f, None),
                _ if StdInstant::now() > deadline => {
                    return Err(HostError::Other("flag file never appeared".into()))
                }
                _ => std::thread::sleep(StdDuration::from_millis(1)),
            }
        }
    };
    // SAFETY: a private file of this job, accessed below only through atomics.
    let mut map =
        unsafe { MmapMut::map_mut(&file) }.map_err(|e| HostError::Other(e.to_string()))?;
    let base = map.as_mut_ptr();
    // SAFETY: the mapping is 4096 bytes, page-aligned, and outlives these references;
    // both processes touch the two words only atomically.
    let (ping, pong) = unsafe {
        (
            &*(base as *const AtomicU64),
            &*(base.add(128) as *const AtomicU64),
        )
    };
    let mut out = Vec::with_capacity(iters);
    // Both sides start from 0: rank 1 raises `pong` to say it is ready.
    if boot.rank == 1 {
        pong.store(u64::MAX, Ordering::Release);
    } else {
        while pong.load(Ordering::Acquire) != u64::MAX {}
        pong.store(0, Ordering::Release);
        if let Some(d) = dir {
            d.destroy();
        }
    }
    for i in 1..=iters as u64 {
        if boot.rank == 0 {
            let t0 = StdInstant::now();
            ping.store(i, Ordering::Release);
            while pong.load(Ordering::Acquire) != i {}
            out.push(t0.elapsed().as_nanos() as f64 / 2_000.0);
        } else {
            while ping.load(Ordering::Acquire) != i {}
            pong.store(i, Ordering::Release);
        }
    }
    Ok(out)
}

/// The eth fabric's references through the same device the fabric uses, with no
/// protocol on top: `len`-byte frames bounced between ranks 0 and 1 (one-way
/// microseconds), then, when `rounds` > 0, MTU-sized frames streamed from rank 0 to
/// rank 1 ([`eth_stream`]). Packet rings only, or `AF_XDP` as `xdp` says. Rank 0
/// returns the samples; both say whether `AF_XDP` carried them.
pub(super) fn eth_reference(
    boot: &Boot,
    len: usize,
    iters: usize,
    rounds: usize,
    xdp: volley_hosted::eth::XdpSetting,
) -> Result<(Vec<f64>, Vec<f64>, bool), HostError> {
    use volley_core::phy::{Device, RxToken, TxToken};
    let s = boot
        .secret
        .ok_or_else(|| HostError::Other("eth reference: no job secret".into()))?;
    let mut dev = volley_hosted::eth::EthDevice::open_with(boot, &s, xdp)?;
    let peer = volley_core::NodeAddr(1 - boot.rank);
    let epoch = StdInstant::now();
    let since = |t: StdInstant| {
        volley_core::time::Instant::from_nanos(t.saturating_duration_since(epoch).as_nanos() as u64)
    };
    // The device is given the time of the last clock read: the loops below read the
    // clock once per ping and once per `SPINS` empty looks, so that the reference is
    // the path's own limit and not the clock's (a read costs about as much as a look).
    let send = |dev: &mut volley_hosted::eth::EthDevice, i: u64, t| {
        if let Some(tok) = dev.transmit(t, peer) {
            tok.consume(len.max(8), |b| b[..8].copy_from_slice(&i.to_le_bytes()));
        }
        dev.flush(t);
    };
    // The number in the next frame, if one came.
    let recv = |dev: &mut volley_hosted::eth::EthDevice, t| -> Option<u64> {
        let tok = dev.receive(t)?;
        tok.consume(|f| {
            f.get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        })
    };
    let deadline = StdInstant::now() + StdDuration::from_secs(60);
    let mut out = Vec::with_capacity(iters);
    if boot.rank == 1 {
        let mut t = since(StdInstant::now());
        let mut spins = 0u32;
        loop {
            match recv(&mut dev, t) {
                Some(ETH_STOP) => {
                    send(&mut dev, ETH_STOP, t);
                    break;
                }
                Some(i) => send(&mut dev, i, t),
                None => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(SPINS) {
                        let at = StdInstant::now();
                        if at > deadline {
                            return Err(HostError::Other(
                                "eth reference: no stop from rank 0".into(),
                            ));
                        }
                        t = since(at);
                    }
                }
            }
        }
    } else {
        let warm = iters / 10 + 1;
        // Then a stop, which rank 1 echoes.
        for i in (0..(warm + iters) as u64).chain([ETH_STOP]) {
            let t0 = StdInstant::now();
            let mut sent = t0;
            let mut t = since(t0);
            send(&mut dev, i, t);
            let mut spins = 0u32;
            // Frames may be lost: resend after 100 ms.
            while recv(&mut dev, t) != Some(i) {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(SPINS) && sent.elapsed() > StdDuration::from_millis(100) {
                    if StdInstant::now() > deadline {
                        return Err(HostError::Other(
                            "eth reference: rank 1 does not answer".into(),
                        ));
                    }
                    sent = StdInstant::now();
                    t = since(sent);
                    send(&mut dev, i, t);
                }
            }
            if i >= warm as u64 && i != ETH_STOP {
                out.push(t0.elapsed().as_nanos() as f64 / 2_000.0);
            }
        }
    }
    let bw = if rounds > 0 {
        eth_stream(&mut dev, boot.rank, 1 << 20, 32, rounds)?
    } else {
        Vec::new()
    };
    Ok((out, bw, dev.xdp().is_some()))
}

/// The last ping of [`eth_reference`].
pub(super) const ETH_STOP: u64 = u64::MAX;

/// Empty looks between clock reads in the bare references' waiting loops.
pub(super) const SPINS: u32 = 1024;

/// Bare streaming on an eth device, the same shape as [`tcp_stream`]: per round a
/// stream of `window` times `len` bytes from rank 0 to rank 1 in MTU-sized frames,
/// which rank 1 copies into its `len`-byte buffer; MB/s per round on rank 0 after two
/// warm-up rounds. With the least that keeps it lossless: rank 1 acks every eighth of
/// its ring and rank 0 keeps at most half a ring in flight; should a frame be lost
/// anyway, rank 0 goes back to the last ack after 20 ms without one.
pub(super) fn eth_stream(
    dev: &mut volley_hosted::eth::EthDevice,
    rank: u16,
    len: usize,
    window: usize,
    rounds: usize,
) -> Result<Vec<f64>, HostError> {
    use volley_core::phy::{Device, RxToken, TxToken};
    // Every frame: kind, round, then a data frame's sequence number and data, an
    // ack's next expected sequence number. Pings of the ping-pong (a stop rank 0
    // resends) differ in the kind.
    const HEAD: usize = 12;
    const DATA: u32 = 0x5354_524d;
    const ACK: u32 = 0x4143_4b21;
    const DONE: u32 = 0x444f_4e45;
    let word = |f: &[u8], i: usize| -> u32 {
        f.get(i..i + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let peer = volley_core::NodeAddr(1 - rank);
    let chunk = dev.capabilities().mtu - HEAD;
    let total = len * window;
    let frames = total.div_ceil(chunk) as u32;
    let credit = (dev.rx_frames() as u32 / 2).max(2);
    let every = (credit / 4).max(1);
    let epoch = StdInstant::now();
    let now = || volley_core::time::Instant::from_nanos(epoch.elapsed().as_nanos() as u64);
    let deadline = StdInstant::now() + StdDuration::from_secs(120);
    let mut buf = pattern(0, 0, len);
    // Sends a frame; for data, stream bytes `pos..pos + n` from the buffer (wrapping).
    let send = |dev: &mut volley_hosted::eth::EthDevice,
                head: [u32; 3],
                src: &[u8],
                pos: usize,
                n: usize|
     -> bool {
        let Some(tok) = dev.transmit(now(), peer) else {
            return false;
        };
        tok.consume(HEAD + n, |f| {
            for (i, w) in head.iter().enumerate() {
                f[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            let at = pos % src.len().max(1);
            let first = n.min(src.len() - at);
            f[HEAD..HEAD + first].copy_from_slice(&src[at..at + first]);
            f[HEAD + first..HEAD + n].copy_from_slice(&src[..n - first]);
        });
        true
    };
    let mut out = Vec::with_capacity(rounds);
    if rank == 1 {
        let (mut round, mut next) = (0u32, 0u32);
        loop {
            if StdInstant::now() > deadline {
                return Err(HostError::Other(
                    "eth reference: the stream did not end".into(),
                ));
            }
            let Some(tok) = dev.receive(now()) else {
                continue;
            };
            let fresh = next == frames;
            let head = tok.consume(|f| {
                let head = [word(f, 0), word(f, 4), word(f, 8)];
                let expected = (head[1] == round && head[2] == next)
                    || (fresh && head[1] == round.wrapping_add(1) && head[2] == 0);
                if head[0] == DATA && expected {
                    let pos = head[2] as usize * chunk;
                    let n = (f.len().saturating_sub(HEAD)).min(total - pos);
                    let at = pos % len;
                    let first = n.min(len - at);
                    buf[at..at + first].copy_from_slice(&f[HEAD..HEAD + first]);
                    buf[..n - first].copy_from_slice(&f[HEAD + first..HEAD + n]);
                }
                head
            });
            match head {
                [DONE, ..] => return Ok(out),
                [DATA, r, 0] if r == round.wrapping_add(1) && next == frames => {
                    (round, next) = (r, 1);
                }
                [DATA, r, seq] if r == round && seq == next => next += 1,
                [DATA, r, _] if r == round => {
                    // Out of order: say where the stream stands.
                    send(dev, [ACK, round, next], &[], 0, 0);
                    dev.flush(now());
                    continue;
                }
                _ => {
                    // A stop resent by rank 0: echo it.
                    if head[..2] == [u32::MAX, u32::MAX] {
                        let (a, b) = ((ETH_STOP >> 32) as u32, ETH_STOP as u32);
                        send(dev, [b, a, 0], &[], 0, 0);
                        dev.flush(now());
                    }
                    continue;
                }
            }
            if next % every == 0 || next == frames {
                send(dev, [ACK, round, next], &[], 0, 0);
                dev.flush(now());
            }
        }
    }
    for round in 0..(rounds + 2) as u32 {
        let t0 = StdInstant::now();
        let (mut next, mut acked) = (0u32, 0u32);
        let mut acked_at = t0;
        while acked < frames {
            if StdInstant::now() > deadline {
                return Err(HostError::Other(
                    "eth reference: rank 1 does not ack".into(),
                ));
            }
            while next < frames && next - acked < credit {
                let pos = next as usize * chunk;
                let n = chunk.min(total - pos);
                if !send(dev, [DATA, round, next], &buf, pos, n) {
                    break;
                }
                next += 1;
            }
            dev.flush(now());
            while let Some(tok) = dev.receive(now()) {
                let head = tok.consume(|f| [word(f, 0), word(f, 4), word(f, 8)]);
                if head[0] == ACK && head[1] == round && head[2] > acked {
                    acked = head[2].min(frames);
                    acked_at = StdInstant::now();
                }
            }
            if next > acked && acked_at.elapsed() > StdDuration::from_millis(20) {
                next = acked;
                acked_at = StdInstant::now();
            }
        }
        if round >= 2 {
            out.push(total as f64 / t0.elapsed().as_secs_f64() / 1e6);
        }
    }
    buf.clear();
    for _ in 0..20 {
        send(dev, [DONE, 0, 0], &buf, 0, 0);
        dev.flush(now());
        std::thread::sleep(StdDuration::from_micros(200));
    }
    Ok(out)
}

/// The bare reference: a plain UDP ping-pong of `len` bytes on two spare ports. Rank 1
/// echoes whatever arrives; rank 0 numbers its pings, resends one that got no echo
/// within 100 ms (start-up, a lost datagram), and ends with a stop datagram.
pub(super) fn udp_pingpong(boot: &Boot, len: usize, iters: usize) -> Result<Vec<f64>, HostError> {
    const STOP: u64 = u64::MAX;
    // Spare ports beside the job's (wrapping below 65536 if the job's are high).
    let base = volley_hosted::udp::base_port(boot.job, boot.size)?;
    let base = if base < 60_000 {
        base + 5_000
    } else {
        base - 5_000
    };
    let me = UdpSocket::bind(("127.0.0.1", base + boot.rank))
        .map_err(|e| HostError::Other(format!("udp reference: {e}")))?;
    let peer = ("127.0.0.1", base + 1 - boot.rank);
    me.set_nonblocking(true)
        .map_err(|e| HostError::Other(e.to_string()))?;
    let mut buf = vec![1u8; len.max(8)];
    let mut rx = vec![0u8; 65_536];
    let mut out = Vec::with_capacity(iters);
    let deadline = StdInstant::now() + StdDuration::from_secs(60);
    if boot.rank == 1 {
        let mut spins = 0u32;
        loop {
            if let Ok((n, _)) = me.recv_from(&mut rx) {
                if n >= 8 && rx[..8] == STOP.to_le_bytes() {
                    return Ok(out);
                }
                let _ = me.send_to(&rx[..n], peer);
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPINS) && StdInstant::now() > deadline {
                return Err(HostError::Other(
                    "udp reference: no stop from rank 0".into(),
                ));
            }
        }
    }
    let warm = iters / 10 + 1;
    for i in 0..(warm + iters) as u64 {
        buf[..8].copy_from_slice(&i.to_le_bytes());
        let t0 = StdInstant::now();
        let mut sent = t0;
        let _ = me.send_to(&buf[..len.max(8)], peer);
        let mut spins = 0u32;
        loop {
            if let Ok((n, _)) = me.recv_from(&mut rx) {
                if n >= 8 && rx[..8] == i.to_le_bytes() {
                    break;
                }
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPINS) && sent.elapsed() > StdDuration::from_millis(100) {
                if StdInstant::now() > deadline {
                    return Err(HostError::Other(
                        "udp reference: rank 1 does not answer".into(),
                    ));
                }
                sent = StdInstant::now();
                let _ = me.send_to(&buf[..len.max(8)], peer);
            }
        }
        if i >= warm as u64 {
            out.push(t0.elapsed().as_nanos() as f64 / 2_000.0);
        }
    }
    buf[..8].copy_from_slice(&STOP.to_le_bytes());
    for _ in 0..20 {
        let _ = me.send_to(&buf[..8], peer);
    }
    Ok(out)
}

/// The bare bulk reference on `udp`: a TCP stream on loopback (what UCX's and MPICH's
/// TCP transports ride on). Per round rank 0 writes `window` messages of `len` bytes
/// and waits for a one-byte ack, like the streaming rows; MB/s samples on rank 0.
pub(super) fn tcp_stream(
    boot: &Boot,
    len: usize,
    window: usize,
    rounds: usize,
) -> Result<Vec<f64>, HostError> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let base = volley_hosted::udp::base_port(boot.job, boot.size)?;
    let port = if base < 55_000 {
        base + 7_000
    } else {
        base - 7_000
    };
    let err = |e: std::io::Error| HostError::Other(format!("tcp reference: {e}"));
    let deadline = StdInstant::now() + StdDuration::from_secs(10);
    let mut s = if boot.rank == 1 {
        let l = TcpListener::bind(("127.0.0.1", port)).map_err(err)?;
        l.accept().map_err(err)?.0
    } else {
        loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(_) if StdInstant::now() < deadline => {
                    std::thread::sleep(StdDuration::from_millis(2))
                }
                Err(e) => return Err(err(e)),
            }
        }
    };
    s.set_nodelay(true).map_err(err)?;
    let mut buf = pattern(0, 0, len);
    let mut out = Vec::with_capacity(rounds);
    for r in 0..rounds + 2 {
        if boot.rank == 0 {
            let t0 = StdInstant::now();
            for _ in 0..window {
                s.write_all(&buf).map_err(err)?;
            }
            s.read_exact(&mut buf[..1]).map_err(err)?;
            if r >= 2 {
                out.push((len * window) as f64 / t0.elapsed().as_secs_f64() / 1e6);
            }
        } else {
            for _ in 0..window {
                s.read_exact(&mut buf).map_err(err)?;
            }
            s.write_all(&buf[..1]).map_err(err)?;
        }
    }
    Ok(out)
}

/// `memcpy` bandwidth of `len`-byte copies, MB/s samples (rank 0 alone).
pub(super) fn memcpy_bw(len: usize, samples: usize) -> Vec<f64> {
    let src = pattern(0, 0, len);
    let mut dst = vec![0u8; len];
    let reps = (64 << 20) / len.max(1);
    (0..samples)
        .map(|_| {
            let t0 = StdInstant::now();
            for _ in 0..reps {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&mut dst);
            }
            (len * reps) as f64 / t0.elapsed().as_secs_f64() / 1e6
        })
        .collect()
}

/// The sweep's reference: the bare 8-byte ping-pong of `fabric`'s path (one-way
/// microseconds at rank 0), the limit Volley's latency rows are measured against.
pub(super) fn bare_latency(boot: &Boot, fabric: Fabric, sw: Sweep) -> Result<Vec<f64>, HostError> {
    match fabric {
        Fabric::Shm => flag_pingpong(boot, sw.iters(200_000)),
        Fabric::Udp => udp_pingpong(boot, 8, sw.iters(20_000)),
        Fabric::Eth => {
            let off = volley_hosted::eth::XdpSetting::Off;
            Ok(eth_reference(boot, 8, sw.iters(20_000), 0, off)?.0)
        }
    }
}

/// The name of [`bare_latency`]'s row.
pub(super) fn bare_name(fabric: Fabric) -> &'static str {
    match fabric {
        Fabric::Shm => "reference: bare flag ping-pong",
        Fabric::Udp => "reference: bare UDP ping-pong",
        Fabric::Eth => "reference: bare AF_PACKET ping-pong",
    }
}
