//! `volley bench`: an OSU-style sweep. Each fabric's table starts with a reference
//! row measured in the same run: the raw limit of the path, with no Volley on it.
//! shm: a bare two-process cache-line flag ping-pong and a `memcpy` of the same size;
//! udp: a bare UDP ping-pong of 8 bytes. Every row reports medians and percentiles
//! and its ratio to the reference.

use std::borrow::Cow;
use std::net::UdpSocket;

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use memmap2::MmapMut;
use volley_core::gamma::{Gamma, BROADCAST, GO_BACK};

use crate::clock::HostClock;

use volley_core::cheetah::{Cheetah, Segments};
use volley_core::engine::{Error, Memory};
use volley_core::lfc::{Keep, Lfc, Options as LfcOptions, Received};

use crate::bootstrap::Boot;
use crate::lfc::{HostLfc, Interrupts};
use crate::node::{self, HostGamma};
use crate::programs::{pattern, percentiles, pin, State};
use crate::{Fabric, HostDevice, HostError};

/// One result row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Fabric.
    pub fabric: Cow<'static, str>,
    /// What was measured.
    pub test: String,
    /// Message size in bytes.
    pub bytes: usize,
    /// Unit of the figures.
    pub unit: Cow<'static, str>,
    /// Median.
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Median divided by the reference's (latency: above 1 is slower; bandwidth: below
    /// 1 is slower).
    #[serde(rename = "ratio_to_reference")]
    pub ratio: Option<f64>,
}

impl Row {
    /// The row as a table line.
    pub fn line(&self) -> String {
        format!(
            "{:<4} {:<38} {:>9} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>7}",
            self.fabric,
            self.test,
            self.bytes,
            self.unit,
            self.median,
            self.p90,
            self.p99,
            self.ratio.map_or("-".into(), ratio_text)
        )
    }
}

/// A ratio as the table shows it: two decimals, and two significant digits below
/// 0.1, so that a peer a thousand times slower does not read `0.00x`.
fn ratio_text(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 || r >= 0.095 {
        return format!("{r:.2}x");
    }
    // Places after the point for two significant digits (0.012 -> 3, 0.0012 -> 4).
    let places = (-r.log10()).ceil() as usize + 1;
    format!("{r:.places$}x")
}

/// Header for [`Row::line`].
pub fn header() -> String {
    format!(
        "{:<4} {:<38} {:>9} {:>6} {:>10} {:>10} {:>10} {:>7}",
        "fab", "test", "bytes", "unit", "median", "p90", "p99", "vs ref"
    )
}

/// Rows as RFC 4180 CSV (fields with commas or quotes quoted), with a header line
/// when `header` is set.
pub fn csv(rows: &[Row], header: bool) -> String {
    let mut w = csv::WriterBuilder::new()
        .has_headers(header)
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    for r in rows {
        // Writing to memory fails only on a serialiser bug: the row would be lost.
        w.serialize(r).expect("a row serialises");
    }
    if rows.is_empty() && header {
        w.write_record(CSV_FIELDS).expect("a header serialises");
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// Column names of [`csv()`].
pub const CSV_FIELDS: [&str; 8] = [
    "fabric",
    "test",
    "bytes",
    "unit",
    "median",
    "p90",
    "p99",
    "ratio_to_reference",
];

/// A whole run as one JSON document: what ran where, then the rows.
pub fn json(rows: &[Row], notes: &[String]) -> String {
    let doc = serde_json::json!({
        "volley": env!("CARGO_PKG_VERSION"),
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "notes": notes,
        "rows": rows,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// The rows of a document [`json`] wrote.
pub fn rows_from_json(text: &str) -> Result<Vec<Row>, HostError> {
    #[derive(Deserialize)]
    struct Doc {
        rows: Vec<Row>,
    }
    serde_json::from_str::<Doc>(text)
        .map(|d| d.rows)
        .map_err(|e| HostError(format!("not a `volley bench --json` document: {e}")))
}

/// Appends rows to the file the `volley bench` command collects them from (one JSON
/// object per line).
pub fn append_rows(path: &std::path::Path, rows: &[Row]) -> Result<(), HostError> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| HostError(format!("bench rows {}: {e}", path.display())))?;
    let mut text = String::new();
    for r in rows {
        text.push_str(&serde_json::to_string(r).unwrap_or_default());
        text.push('\n');
    }
    f.write_all(text.as_bytes())
        .map_err(|e| HostError(format!("bench rows {}: {e}", path.display())))
}

/// Reads the rows [`append_rows`] wrote.
pub fn read_rows(path: &std::path::Path) -> Result<Vec<Row>, HostError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| HostError(format!("bench rows {}: {e}", path.display())))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| HostError(format!("bench row {l:?}: {e}"))))
        .collect()
}

/// How long the sweep runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Ten times fewer iterations, five times fewer bandwidth rounds (a smoke run).
    pub quick: bool,
    /// Iterations of each small-message latency test (`--iters`); the other tests
    /// keep their proportion to it (20000 small : 2000 medium : 200 large, as in the
    /// OSU benchmarks).
    pub iters: Option<usize>,
}

impl Sweep {
    /// Iterations of a test whose full-run count is `default` (of 20000 for small
    /// messages).
    pub fn iters(&self, default: usize) -> usize {
        match self.iters {
            Some(n) => (n as u64 * default as u64 / 20_000).max(1) as usize,
            None if self.quick => (default / 10).max(1),
            None => default,
        }
    }

    /// Bandwidth rounds or repetitions whose full-run count is `default`.
    pub fn rounds(&self, default: usize) -> usize {
        if self.quick {
            (default / 5).max(2)
        } else {
            default
        }
    }
}

fn progress(step: &str) {
    eprintln!("bench: {step}");
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    percentiles(&mut v)
}

/// Time to compute the authentication tag of one frame carrying `len` bytes, in
/// batches of frames (microseconds per frame).
fn tag_cost(len: usize, batches: usize) -> Vec<f64> {
    // As the engines tag (see `node`).
    crate::clmul::install();
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
fn flag_pingpong(boot: &Boot, iters: usize) -> Result<Vec<f64>, HostError> {
    // A private directory of this job, checked like the region's.
    let name = crate::shm::job_dir_name(boot.job, boot.secret.as_ref(), ".bench");
    let (file, dir) = if boot.rank == 0 {
        let dir = crate::shm::PrivateDir::create(&name)?;
        dir.clear();
        (dir.create_file("flag", 4096)?, Some(dir))
    } else {
        let deadline = StdInstant::now() + StdDuration::from_secs(10);
        loop {
            let f = crate::shm::PrivateDir::open(&name)?
                .map(|d| d.open_file("flag"))
                .transpose()?
                .flatten();
            match f {
                Some(f) if f.metadata().map(|m| m.len()).unwrap_or(0) == 4096 => break (f, None),
                _ if StdInstant::now() > deadline => {
                    return Err(HostError("flag file never appeared".into()))
                }
                _ => std::thread::sleep(StdDuration::from_millis(1)),
            }
        }
    };
    // SAFETY: a private file of this job, accessed below only through atomics.
    let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| HostError(e.to_string()))?;
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
fn eth_reference(
    boot: &Boot,
    len: usize,
    iters: usize,
    rounds: usize,
    xdp: crate::eth::XdpSetting,
) -> Result<(Vec<f64>, Vec<f64>, bool), HostError> {
    use volley_core::phy::{Device, RxToken, TxToken};
    let s = boot
        .secret
        .ok_or_else(|| HostError("eth reference: no job secret".into()))?;
    let mut dev = crate::eth::EthDevice::open_with(boot, &s, xdp)?;
    let peer = volley_core::NodeAddr(1 - boot.rank);
    let epoch = StdInstant::now();
    let since = |t: StdInstant| {
        volley_core::time::Instant::from_nanos(t.saturating_duration_since(epoch).as_nanos() as u64)
    };
    // The device is given the time of the last clock read: the loops below read the
    // clock once per ping and once per `SPINS` empty looks, so that the reference is
    // the path's own limit and not the clock's (a read costs about as much as a look).
    let send = |dev: &mut crate::eth::EthDevice, i: u64, t| {
        if let Some(tok) = dev.transmit(t, peer) {
            tok.consume(len.max(8), |b| b[..8].copy_from_slice(&i.to_le_bytes()));
        }
        dev.flush(t);
    };
    // The number in the next frame, if one came.
    let recv = |dev: &mut crate::eth::EthDevice, t| -> Option<u64> {
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
                            return Err(HostError("eth reference: no stop from rank 0".into()));
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
                        return Err(HostError("eth reference: rank 1 does not answer".into()));
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
const ETH_STOP: u64 = u64::MAX;

/// Empty looks between clock reads in the bare references' waiting loops.
const SPINS: u32 = 1024;

/// Bare streaming on an eth device, the same shape as [`tcp_stream`]: per round a
/// stream of `window` times `len` bytes from rank 0 to rank 1 in MTU-sized frames,
/// which rank 1 copies into its `len`-byte buffer; MB/s per round on rank 0 after two
/// warm-up rounds. With the least that keeps it lossless: rank 1 acks every eighth of
/// its ring and rank 0 keeps at most half a ring in flight; should a frame be lost
/// anyway, rank 0 goes back to the last ack after 20 ms without one.
fn eth_stream(
    dev: &mut crate::eth::EthDevice,
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
    let send = |dev: &mut crate::eth::EthDevice,
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
                return Err(HostError("eth reference: the stream did not end".into()));
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
                return Err(HostError("eth reference: rank 1 does not ack".into()));
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
fn udp_pingpong(boot: &Boot, len: usize, iters: usize) -> Result<Vec<f64>, HostError> {
    const STOP: u64 = u64::MAX;
    // Spare ports beside the job's (wrapping below 65536 if the job's are high).
    let base = crate::udp::base_port(boot.job, boot.size)?;
    let base = if base < 60_000 {
        base + 5_000
    } else {
        base - 5_000
    };
    let me = UdpSocket::bind(("127.0.0.1", base + boot.rank))
        .map_err(|e| HostError(format!("udp reference: {e}")))?;
    let peer = ("127.0.0.1", base + 1 - boot.rank);
    me.set_nonblocking(true)
        .map_err(|e| HostError(e.to_string()))?;
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
                return Err(HostError("udp reference: no stop from rank 0".into()));
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
                    return Err(HostError("udp reference: rank 1 does not answer".into()));
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
fn tcp_stream(
    boot: &Boot,
    len: usize,
    window: usize,
    rounds: usize,
) -> Result<Vec<f64>, HostError> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let base = crate::udp::base_port(boot.job, boot.size)?;
    let port = if base < 55_000 {
        base + 7_000
    } else {
        base - 7_000
    };
    let err = |e: std::io::Error| HostError(format!("tcp reference: {e}"));
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
fn memcpy_bw(len: usize, samples: usize) -> Vec<f64> {
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
fn bare_latency(boot: &Boot, fabric: Fabric, sw: Sweep) -> Result<Vec<f64>, HostError> {
    match fabric {
        Fabric::Shm => flag_pingpong(boot, sw.iters(200_000)),
        Fabric::Udp => udp_pingpong(boot, 8, sw.iters(20_000)),
        Fabric::Eth => {
            let off = crate::eth::XdpSetting::Off;
            Ok(eth_reference(boot, 8, sw.iters(20_000), 0, off)?.0)
        }
    }
}

/// The name of [`bare_latency`]'s row.
fn bare_name(fabric: Fabric) -> &'static str {
    match fabric {
        Fabric::Shm => "reference: bare flag ping-pong",
        Fabric::Udp => "reference: bare UDP ping-pong",
        Fabric::Eth => "reference: bare AF_PACKET ping-pong",
    }
}

fn on_count(u: &mut volley_core::gamma::Upcall<'_, '_, State>) {
    u.state().handled += 1;
}

/// Rank 1's port 3: answers each message from inside the handler, as an active
/// message's reply (a send it cannot queue is counted as an error).
fn on_echo(u: &mut volley_core::gamma::Upcall<'_, '_, State>) {
    let mut b = [0u8; 64];
    let n = u.len().min(b.len());
    b[..n].copy_from_slice(&u.data()[..n]);
    let port = u.active_port();
    if u.send_flowctl(port, &[], &b[..n]).is_err() {
        u.state().bad.push("echo not queued".into());
    }
}

/// The 2-rank part of the sweep. Rank 0 returns the rows.
pub fn pair(boot: &Boot, fabric: Fabric, sw: Sweep) -> Result<Vec<Row>, HostError> {
    pin(boot.rank);
    let name = fabric.name();
    let mut rows = Vec::new();
    // References first, before the engine is up, with nothing else running.
    progress("reference");
    let (ref_lat, ref_bw) = match fabric {
        Fabric::Shm => {
            let lat = bare_latency(boot, fabric, sw)?;
            let bw = if boot.rank == 0 {
                memcpy_bw(1 << 20, 15)
            } else {
                vec![0.0]
            };
            (lat, Some(bw))
        }
        Fabric::Udp => {
            let bw = tcp_stream(boot, 1 << 20, 32, sw.rounds(20))?;
            (bare_latency(boot, fabric, sw)?, Some(bw))
        }
        // Both on one opening of the device (the ping-pong as `bare_latency` runs it).
        Fabric::Eth => {
            let off = crate::eth::XdpSetting::Off;
            let (lat, bw, _) = eth_reference(boot, 8, sw.iters(20_000), sw.rounds(20), off)?;
            (lat, Some(bw))
        }
    };
    // With `VOLLEY_ETH_XDP`, the bare ping-pong through `AF_XDP` too: the limit of the
    // path Volley's frames then take. Volley's ratios stay to the packet rings'.
    let xdp_lat = match fabric {
        Fabric::Eth if crate::eth::xdp_setting()? != crate::eth::XdpSetting::Off => {
            let (lat, _, used) =
                eth_reference(boot, 8, sw.iters(20_000), 0, crate::eth::xdp_setting()?)?;
            used.then_some(lat)
        }
        _ => None,
    };
    let me0 = boot.rank == 0;
    let (lm, lp90, lp99) = stats(ref_lat);
    let ref_name = bare_name(fabric);
    rows.push(Row {
        fabric: name.into(),
        test: ref_name.into(),
        bytes: 8,
        unit: "us".into(),
        median: lm,
        p90: lp90,
        p99: lp99,
        ratio: Some(1.0),
    });
    let ref_mbs = ref_bw.filter(|_| me0).map(|bw| {
        let (m, p90, p99) = stats(bw);
        rows.push(Row {
            fabric: name.into(),
            test: match fabric {
                Fabric::Shm => "reference: memcpy",
                Fabric::Udp => "reference: bare TCP stream, loopback",
                Fabric::Eth => "reference: bare AF_PACKET stream",
            }
            .into(),
            bytes: 1 << 20,
            unit: "MB/s".into(),
            median: m,
            p90,
            p99,
            ratio: Some(1.0),
        });
        m
    });
    if let Some(lat) = xdp_lat.filter(|_| me0) {
        let (m, p90, p99) = stats(lat);
        rows.push(Row {
            fabric: name.into(),
            test: "reference: bare AF_XDP ping-pong".into(),
            bytes: 8,
            unit: "us".into(),
            median: m,
            p90,
            p99,
            ratio: Some(m / lm),
        });
    }

    if fabric == Fabric::Udp {
        // What authenticating a frame costs (both ends do it once per frame), in the
        // same run. The 8-byte tag's ratio is to the bare ping-pong; the 64 KB tag's
        // to the time the bare stream takes to carry those bytes (above 1.0x, the tag
        // alone is slower than the path: it bounds bulk transfer).
        for (len, what) in [
            (8, "frame tag, SipHash-2-4"),
            (65_000, "frame tag, AES-GCM-SIV"),
        ] {
            let (m, p90, p99) = stats(tag_cost(len, sw.rounds(100)));
            let ratio = if len == 8 {
                Some(m / lm)
            } else {
                ref_mbs.map(|mbs| m / (len as f64 / mbs))
            };
            rows.push(Row {
                fabric: name.into(),
                test: what.into(),
                bytes: len,
                unit: "us".into(),
                median: m,
                p90,
                p99,
                ratio,
            });
        }
    }

    let mut g = gamma_pair(boot, fabric)?;
    if let (HostDevice::Udp(d), true) = (g.device(), me0) {
        progress(&d.shape().describe());
    }
    if fabric != Fabric::Shm && me0 {
        progress(crate::clmul::describe());
    }
    let me = g.my_node();
    let sizes = [0usize, 8, 64, 512, 4096, 32_768, 262_144, 1 << 20];
    for (reliable, label) in [(true, "send_flowctl"), (false, "send")] {
        for &len in &sizes {
            if !reliable && (fabric == Fabric::Udp || len > 8) {
                // Best effort may lose on UDP; on shm it shows the unacked path (8 B).
                continue;
            }
            progress(&format!("latency {label} {len} B"));
            let iters = sw.iters(if len <= 4096 {
                20_000
            } else if len <= 65_536 {
                2_000
            } else {
                200
            });
            let samples = gamma_latency(&mut g, len, iters, reliable)?;
            if me == 0 {
                let test = format!("latency, one-way, {label}");
                rows.push(latency_row(name, &test, len, samples, lm));
            }
        }
    }
    progress("latency, reply from the handler");
    let samples = handler_echo(&mut g, sw.iters(20_000))?;
    if me == 0 {
        let test = "latency, one-way, reply from the handler";
        rows.push(latency_row(name, test, 8, samples, lm));
    }
    for &len in &[4096usize, 65_536, 1 << 20] {
        progress(&format!("bandwidth {len} B"));
        let rounds = sw.rounds(if len >= 1 << 20 { 20 } else { 50 });
        let samples = gamma_stream(&mut g, len, rounds)?;
        if me == 0 {
            rows.push(bandwidth_row(
                name,
                "bandwidth, streaming, isend_flowctl",
                len,
                samples,
                ref_mbs,
            ));
        }
    }
    g.sync()?;
    let (dev, _) = g.exit();
    let (lrows, dev) = lfc_rows(boot, fabric, dev, lm, sw)?;
    rows.extend(lrows);
    let (crows, dev) = cheetah_rows(boot, fabric, dev, lm, ref_mbs, sw)?;
    rows.extend(crows);
    let (crows, dev) = cheetah_direct_rows(boot, fabric, dev, lm, ref_mbs, sw)?;
    rows.extend(crows);
    rows.extend(qnix_rows(boot, fabric, dev, lm, ref_mbs, sw)?);
    Ok(if me == 0 { rows } else { Vec::new() })
}

/// A GAMMA process of a 2-rank bench job, with port 1 (up to 1 MiB, counted) and
/// port 2 (acks) bound to the other rank, after a barrier.
fn gamma_pair(boot: &Boot, fabric: Fabric) -> Result<HostGamma<State>, HostError> {
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
/// warm-up (microseconds, on rank 0; rank 1 echoes).
fn gamma_latency(
    g: &mut HostGamma<State>,
    len: usize,
    iters: usize,
    reliable: bool,
) -> Result<Vec<f64>, HostError> {
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
            g.wait(1, 1)?;
            if i >= iters / 10 {
                samples.push(Gamma::<HostDevice, HostClock, State>::time_diff(g.time(), t0) / 2.0);
            }
        } else {
            g.wait(1, 1)?;
            if reliable {
                g.send_flowctl(1, &data)?
            } else {
                g.send(1, &data)?
            };
        }
    }
    Ok(samples)
}

/// One-way latency of an active message answered from its handler: rank 0 sends 8
/// bytes to port 3 (`send_flowctl`) and waits for the answer, which rank 1's
/// handler sends while rank 1 waits for all of them (half of each round trip after
/// a tenth as warm-up, microseconds, on rank 0).
fn handler_echo(g: &mut HostGamma<State>, iters: usize) -> Result<Vec<f64>, HostError> {
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
        return Err(HostError(format!("bench: {b}")));
    }
    Ok(samples)
}

/// Streaming bandwidth, OSU style: per round a window of 32 non-blocking sends of
/// `len` bytes, then a short ack; MB/s per round on rank 0, after two warm-up rounds.
fn gamma_stream(
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

/// What Volley's own rows of the peer rounds are named after: the sweep has rows
/// of the same tests, and a reader of the CSV or JSON must tell them apart.
pub const PEER_ROUNDS: &str = "Volley in peer rounds: ";

/// `volley bench --peers`, Volley's part of one round: 8-byte and 1 MiB one-way
/// latency and 1 MiB streaming, the figures the peers' programs measure, after the bare
/// ping-pong of the sweep's reference row: each round's latency row carries its
/// ratio to the reference of the same round, so that drift of the machine between
/// rounds shows as spread of the ratio rather than as bias. Rank 0 returns the rows.
pub fn peer_round(boot: &Boot, fabric: Fabric, sw: Sweep) -> Result<Vec<Row>, HostError> {
    pin(boot.rank);
    let bare = bare_latency(boot, fabric, sw)?;
    let mut g = gamma_pair(boot, fabric)?;
    let lat = gamma_latency(&mut g, 8, sw.iters(20_000), true)?;
    let lat_mib = gamma_latency(&mut g, 1 << 20, sw.iters(200), true)?;
    let bw = gamma_stream(&mut g, 1 << 20, sw.rounds(20))?;
    g.sync()?;
    g.exit();
    if boot.rank != 0 {
        return Ok(Vec::new());
    }
    let name = fabric.name();
    let reference = latency_row(
        name,
        &format!("{PEER_ROUNDS}{}", bare_name(fabric)),
        8,
        bare,
        1.0,
    );
    let reference = Row {
        ratio: Some(1.0),
        ..reference
    };
    let volley = latency_row(
        name,
        &format!("{PEER_ROUNDS}latency, one-way, send_flowctl"),
        8,
        lat,
        reference.median,
    );
    // No bare path of that size is measured: no ratio.
    let volley_mib = Row {
        ratio: None,
        ..latency_row(
            name,
            &format!("{PEER_ROUNDS}latency, one-way, send_flowctl"),
            1 << 20,
            lat_mib,
            1.0,
        )
    };
    // The bare path first, as it was measured.
    Ok(vec![
        reference,
        volley,
        volley_mib,
        bandwidth_row(
            name,
            &format!("{PEER_ROUNDS}bandwidth, streaming, isend_flowctl"),
            1 << 20,
            bw,
            None,
        ),
    ])
}

/// Rows measured in several rounds folded into one per (fabric, test, size): the
/// median, 90th and 99th percentiles of the rounds' medians, in first-seen order;
/// the median of the rounds' ratios where every round has one.
pub fn over_rounds(rows: &[Row]) -> Vec<Row> {
    let mut out: Vec<(Row, Vec<f64>, Option<Vec<f64>>)> = Vec::new();
    for r in rows {
        match out
            .iter_mut()
            .find(|(o, ..)| o.fabric == r.fabric && o.test == r.test && o.bytes == r.bytes)
        {
            Some((_, v, q)) => {
                v.push(r.median);
                match (q.as_mut(), r.ratio) {
                    (Some(q), Some(x)) => q.push(x),
                    _ => *q = None,
                }
            }
            None => out.push((r.clone(), vec![r.median], r.ratio.map(|x| vec![x]))),
        }
    }
    out.into_iter()
        .map(|(r, v, q)| {
            let (median, p90, p99) = stats(v);
            Row {
                median,
                p90,
                p99,
                ratio: q.map(|q| stats(q).0),
                ..r
            }
        })
        .collect()
}

/// On each peer's row (a test not Volley's own), Volley's median over the peer's for
/// the same fabric, unit and size: latency above 1 and bandwidth below 1 mean
/// Volley is behind.
pub fn ratios_to_peers(rows: &mut [Row]) {
    // Per fabric, Volley's rows first.
    rows.sort_by_key(|r| (r.fabric.clone(), !is_volley(r)));
    // Volley's own rows, not the bare references measured in the same rounds.
    let ours: Vec<Row> = rows
        .iter()
        .filter(|r| is_volley(r) && !r.test.contains("reference: "))
        .cloned()
        .collect();
    for r in rows.iter_mut().filter(|r| !is_volley(r)) {
        r.ratio = ours
            .iter()
            .find(|o| o.fabric == r.fabric && o.unit == r.unit && o.bytes == r.bytes)
            .map(|o| o.median / r.median);
    }
}

fn is_volley(r: &Row) -> bool {
    !(r.test.starts_with("MPICH") || r.test.starts_with("UCX"))
}

/// A latency row (microseconds) against the reference median `lm`.
fn latency_row(fabric: &'static str, test: &str, bytes: usize, v: Vec<f64>, lm: f64) -> Row {
    let (m, p90, p99) = stats(v);
    Row {
        fabric: fabric.into(),
        test: test.into(),
        bytes,
        unit: "us".into(),
        median: m,
        p90,
        p99,
        ratio: Some(m / lm),
    }
}

/// A bandwidth row (MB/s) against the reference median `reference`, if any.
fn bandwidth_row(
    fabric: &'static str,
    test: &str,
    bytes: usize,
    v: Vec<f64>,
    reference: Option<f64>,
) -> Row {
    let (m, p90, p99) = stats(v);
    Row {
        fabric: fabric.into(),
        test: test.into(),
        bytes,
        unit: "MB/s".into(),
        median: m,
        p90,
        p99,
        ratio: reference.map(|r| m / r),
    }
}

/// What the LFC upcall in the benchmark shares with the program.
#[derive(Debug, Default)]
struct LfcBench {
    received: Arc<AtomicU64>,
}

fn lfc_count(l: &mut HostLfc<LfcBench>, _r: Received) -> Keep {
    l.state().received.fetch_add(1, Ordering::Release);
    Keep::No
}

fn lock_lfc(s: &Mutex<HostLfc<LfcBench>>) -> std::sync::MutexGuard<'_, HostLfc<LfcBench>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn lfc_interrupt(l: &mut HostLfc<LfcBench>) -> bool {
    l.interrupt();
    l.intr_status()
}

/// LFC on the same device, same run: one-way latency of an 8-byte packet when the
/// receiver polls and when it spins on a counter with interrupts enabled (the
/// guide's chapter-5 program), and the fetch-and-add round trip.
fn lfc_rows(
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
    .map_err(|e| HostError(format!("lfc: {e}")))?;
    l.start()?;
    let me = l.my_proc();
    let peer = 1 - me;
    let mut rows = Vec::new();
    let row = |test: &str, bytes, v: Vec<f64>| latency_row(name, test, bytes, v, lm);
    // The program writes the whole payload into the packet, as a real one would.
    let send = |l: &mut HostLfc<LfcBench>, size: usize| -> Result<(), HostError> {
        let p = l.send_alloc(true)?;
        l.packet_mut(p)
            .ok_or_else(|| HostError("lfc packet".into()))?[..size]
            .fill(7);
        l.ucast_launch(peer, p, size, true)?;
        Ok(())
    };

    progress("lfc latency, polling");
    let count = l.state().received.clone();
    let mut want = 0;
    // 8 bytes, and a full packet (where a copy on the way would show).
    for size in [8, l.packet_size()] {
        let iters = if size == 8 {
            sw.iters(20_000)
        } else {
            sw.iters(5_000)
        };
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters + iters / 10 {
            let t0 = StdInstant::now();
            if me == 0 {
                send(&mut l, size)?;
            }
            want += 1;
            while count.load(Ordering::Acquire) < want {
                l.poll()?;
            }
            if me == 1 {
                send(&mut l, size)?;
            } else if i >= iters / 10 {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        if me == 0 {
            rows.push(row("lfc latency, one-way, polling", size, samples));
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
            .ok_or_else(|| HostError("lfc packet".into()))?[..8]
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
        .ok_or_else(|| HostError("lfc: interrupt thread still holds the process".into()))?
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

type BenchCheetah = Cheetah<'static, HostDevice, HostClock, Segments<'static>>;
/// Bench memory: segment 1 data (2 MiB), segment 2 bells (`BELL_*`, i32 each).
const C_DATA: u64 = 1 << 40;
const C_BELLS: u64 = 2 << 40;
const BELL_PUT: u64 = C_BELLS;
const BELL_LOCAL: u64 = C_BELLS + 4;
const BELL_INVOKE: u64 = C_BELLS + 8;

/// Tag 1 answers with tag 2; tag 2 rings `BELL_INVOKE`.
fn c_echo(c: &mut BenchCheetah, who: u16, _tag: i32, buf: &[u8]) {
    let _ = c.ainvoke(who, 2, buf, 0);
}
fn c_pong(c: &mut BenchCheetah, _who: u16, _tag: i32, _buf: &[u8]) {
    c.memory_mut().ring(BELL_INVOKE);
}

/// Cheetah core on the same device, same run: a put's one-way latency (the
/// receiver waits on the remote bell and puts back), a get's and an ainvoke's
/// round trip, and put bandwidth (1 MiB puts, 8 in flight, against `memcpy` on
/// shm).
fn cheetah_rows(
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
    let e = |e: volley_core::engine::Error| HostError(format!("cheetah: {e}"));
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
    let samples = put_pingpong(&mut c, iters, BELL_PUT, |c| {
        c.put(peer, C_DATA, C_DATA, 8, 0, BELL_PUT)
    })
    .map_err(e)?;
    if me == 0 {
        rows.push(row("cheetah put, one-way (remote bell)", 8, samples));
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
/// tenth of warm-up, none at context 1.
fn put_pingpong<M: Memory>(
    c: &mut Cheetah<'static, HostDevice, HostClock, M>,
    iters: usize,
    bell: u64,
    mut put: impl FnMut(&mut Cheetah<'static, HostDevice, HostClock, M>) -> Result<(), Error>,
) -> Result<Vec<f64>, Error> {
    let me = c.mycontext();
    let mut samples = Vec::with_capacity(iters);
    for i in 0..(iters + iters / 10) as i32 {
        let t0 = StdInstant::now();
        if me == 0 {
            put(c)?;
        }
        c.wait(bell, i + 1)?;
        if me == 1 {
            put(c)?;
        } else if i >= (iters / 10) as i32 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    Ok(samples)
}

/// Put bandwidth in MB/s per round: `window` puts of `len` bytes by `put`, each
/// ringing the local bell at `bell`, then a wait for them all.
fn put_bandwidth<M: Memory>(
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

type DirectCheetah = Cheetah<'static, HostDevice, HostClock, crate::procmem::ProcessMemory>;

/// The peer's data buffer and bell, as its tag-3 invocation said.
static PEER_ADDRS: [std::sync::atomic::AtomicU64; 2] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

fn c_addrs(_: &mut DirectCheetah, _who: u16, _tag: i32, buf: &[u8]) {
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
/// ([`crate::direct`]). Rows: a put's one-way latency (the remote bell rung at the
/// receiver's poll), a get's round trip, and put bandwidth (1 MiB puts, 8 in
/// flight, against the fabric's reference). None on `eth`, or with
/// `VOLLEY_CHEETAH_DIRECT=0`.
fn cheetah_direct_rows(
    boot: &Boot,
    fabric: Fabric,
    dev: HostDevice,
    lm: f64,
    ref_mbs: Option<f64>,
    sw: Sweep,
) -> Result<(Vec<Row>, HostDevice), HostError> {
    use crate::procmem::ProcessMemory;
    use std::sync::atomic::Ordering;
    if !matches!(fabric, Fabric::Shm | Fabric::Udp) || !crate::direct::wanted()? {
        return Ok((Vec::new(), dev));
    }
    let name = fabric.name();
    let groups = node::groups(boot.size)?;
    let mut cfg = node::engine_config(boot, fabric, groups, &dev)?;
    cfg.job_key ^= 0xd1ec;
    let e = |e: volley_core::engine::Error| HostError(format!("cheetah direct: {e}"));
    let mut c: DirectCheetah = Cheetah::setup(
        cfg,
        groups,
        boot.size as usize,
        dev,
        HostClock::default(),
        ProcessMemory::default(),
    )
    .map_err(e)?;
    if !crate::direct::enable(&mut c, boot.job ^ 0xd1ec, 0, true) {
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
        return Err(HostError(
            "cheetah direct: the peer's addresses did not come".into(),
        ));
    }
    let mut rows = Vec::new();
    let row = |test: &str, bytes, v: Vec<f64>| latency_row(name, test, bytes, v, lm);
    let put = crate::direct::put;

    progress("cheetah direct put latency");
    let iters = sw.iters(20_000);
    let samples = put_pingpong(&mut c, iters, bell_put, |c| {
        put(c, peer, their_data, data, 8, 0, their_bell)
    })
    .map_err(e)?;
    if me == 0 {
        rows.push(row("cheetah direct put, one-way (remote bell)", 8, samples));
        let mut samples = Vec::with_capacity(iters);
        let mut rung = c.bell(bell_local).map_err(e)?;
        for _ in 0..iters {
            let t0 = StdInstant::now();
            crate::direct::get(&mut c, peer, their_data, data + 64, 8, bell_local, 0).map_err(e)?;
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
        let d = crate::direct::stats(&c);
        if d.puts == 0 || d.gets == 0 {
            return Err(HostError(format!(
                "cheetah direct: the copies went through the fabric ({d:?})"
            )));
        }
    }
    c.finalize().map_err(e)?;
    Ok((rows, c.into_device()))
}

type BenchQnix = volley_core::qnix::Qnix<'static, HostDevice, HostClock, Segments<'static>>;

/// QNIX on the same device, same run, 2 ranks: `send_short` one-way latency
/// (ping-pong / 2, receives posted first), `send` bandwidth (8 sends of 512 KiB
/// from the pool into posted pool receives, then a short acknowledgement),
/// `qx_barrier`, and `broadcast_short` answered by a `send_short`.
fn qnix_rows(
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
    let e = |e: QxError| HostError(format!("qnix: {e}"));
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

    progress("qnix send_short latency");
    let iters = sw.iters(20_000);
    let mut samples = Vec::with_capacity(iters);
    let mut r = recv(&mut q, 1, 8, 0)?;
    for i in 0..iters + iters / 10 {
        let t0 = StdInstant::now();
        if me == 0 {
            short(&mut q, 1)?;
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
        rows.push(latency_row(
            name,
            "qnix send_short, one-way",
            8,
            samples,
            lm,
        ));
    }
    barrier(&mut q)?;

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

fn barrier_rows(
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

/// ", N ranks", or ", N ranks on C cores" where the ranks outnumber the cores (then
/// busy-polling ranks take turns on a core, and the figures say more about the
/// scheduler than about the path). MPICH's rows use the same label.
pub fn ranks_label(n: u16) -> String {
    let cores = online_cores();
    if n as usize > cores {
        format!(", {n} ranks on {cores} cores")
    } else {
        format!(", {n} ranks")
    }
}

/// CPUs online, whatever this process is pinned to (bench ranks pin themselves).
fn online_cores() -> usize {
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
fn bcast_rows(
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
            return Err(HostError(format!("broadcast of {bytes} B arrived wrong")));
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
            let off = crate::eth::XdpSetting::Off;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(ratio_text(1.0), "1.00x");
        assert_eq!(ratio_text(2.375), "2.38x");
        assert_eq!(ratio_text(0.1), "0.10x");
        assert_eq!(ratio_text(0.07), "0.070x");
        assert_eq!(ratio_text(0.0123), "0.012x");
        assert_eq!(ratio_text(0.00119), "0.0012x");
        assert_eq!(ratio_text(0.0), "0.00x");
        let row = Row {
            fabric: "shm".into(),
            test: "MPICH MPI_Barrier, 4 ranks".into(),
            bytes: 0,
            unit: "us".into(),
            median: 12_000.0,
            p90: 13_000.0,
            p99: 14_000.0,
            ratio: Some(0.0012),
        };
        assert!(row.line().ends_with("0.0012x"), "{}", row.line());
    }
}
