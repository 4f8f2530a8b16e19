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

use volley_hosted::clock::HostClock;

use volley_core::cheetah::{Cheetah, Segments};
use volley_core::engine::{Error, Memory};
use volley_core::lfc::{Keep, Lfc, Options as LfcOptions, Received};

use crate::programs::{pattern, percentiles, pin, State};
use volley_hosted::bootstrap::Boot;
use volley_hosted::lfc::{HostLfc, Interrupts};
use volley_hosted::node::{self, HostGamma};
use volley_hosted::wakeup::EventLoop;
use volley_hosted::{Fabric, HostDevice, HostError};

mod cheetah;
mod collectives;
mod gamma;
mod lfc;
mod qnix;
mod reference;

use cheetah::*;
use collectives::*;
pub use collectives::{
    across_hosts, collective_iters, collective_ranks, collectives, ratios_to_mpich, BCAST_SIZES,
};
use gamma::*;
use lfc::*;
use qnix::*;
use reference::*;

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
    /// The row as a table line; a test name too long for its column goes on a
    /// line of its own, the figures below it, so that the columns stay aligned.
    pub fn line(&self) -> String {
        let (name, lead) = if self.test.chars().count() > TEST_COLUMN {
            (String::new(), format!("{:<4} {}\n", self.fabric, self.test))
        } else {
            (self.test.clone(), String::new())
        };
        format!(
            "{lead}{:<4} {:<TEST_COLUMN$} {:>9} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>7}",
            self.fabric,
            name,
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

/// Width of the table's test column.
const TEST_COLUMN: usize = 44;

/// Header for [`Row::line`], after a line saying what the ratio column is.
pub fn header() -> String {
    format!(
        "# ratio: the median over the same fabric's reference row, measured in this run (latency: above 1x is slower; bandwidth: below 1x is slower)\n{:<4} {:<TEST_COLUMN$} {:>9} {:>6} {:>10} {:>10} {:>10} {:>7}",
        "fab", "test", "bytes", "unit", "median", "p90", "p99", "ratio"
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
        .map_err(|e| HostError::Other(format!("not a `volley bench --json` document: {e}")))
}

/// Appends rows to the file the `volley bench` command collects them from (one JSON
/// object per line).
pub fn append_rows(path: &std::path::Path, rows: &[Row]) -> Result<(), HostError> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| HostError::Other(format!("bench rows {}: {e}", path.display())))?;
    let mut text = String::new();
    for r in rows {
        text.push_str(&serde_json::to_string(r).unwrap_or_default());
        text.push('\n');
    }
    f.write_all(text.as_bytes())
        .map_err(|e| HostError::Other(format!("bench rows {}: {e}", path.display())))
}

/// Reads the rows [`append_rows`] wrote.
pub fn read_rows(path: &std::path::Path) -> Result<Vec<Row>, HostError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| HostError::Other(format!("bench rows {}: {e}", path.display())))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| HostError::Other(format!("bench row {l:?}: {e}")))
        })
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
    /// Only these message sizes (`-s`), where a test sweeps sizes; every size if
    /// `None`.
    pub sizes: Option<Sizes>,
}

/// A set of message sizes (`volley bench -s`), at most [`Sizes::MAX`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    list: [u64; Sizes::MAX],
    len: usize,
}

impl Sizes {
    /// The most sizes one run takes.
    pub const MAX: usize = 32;

    /// The set of `sizes`; `None` if there are more than [`Sizes::MAX`].
    pub fn new(sizes: &[u64]) -> Option<Sizes> {
        let mut s = Sizes::default();
        for &b in sizes {
            if !s.contains(b as usize) {
                *s.list.get_mut(s.len)? = b;
                s.len += 1;
            }
        }
        Some(s)
    }

    /// Whether `bytes` is in the set.
    pub fn contains(&self, bytes: usize) -> bool {
        self.list[..self.len].contains(&(bytes as u64))
    }

    /// As `volley worker --sizes` takes it.
    pub fn arg(&self) -> String {
        let v: Vec<String> = self.list[..self.len].iter().map(u64::to_string).collect();
        v.join(",")
    }
}

impl Sweep {
    /// Whether a test sweeping sizes measures `bytes`.
    pub fn wants(&self, bytes: usize) -> bool {
        self.sizes.is_none_or(|s| s.contains(bytes))
    }

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

/// Whether this rank says the sweep's progress: rank 0 alone, so that a step is
/// one line on stderr, not one per rank.
static SAYS_PROGRESS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Makes rank 0 alone say the progress of the sweep.
pub fn progress_from(boot: &Boot) {
    SAYS_PROGRESS.store(boot.rank == 0, std::sync::atomic::Ordering::Relaxed);
}

fn progress(step: &str) {
    if SAYS_PROGRESS.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("bench: {step}");
    }
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    percentiles(&mut v)
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
            let off = volley_hosted::eth::XdpSetting::Off;
            let (lat, bw, _) = eth_reference(boot, 8, sw.iters(20_000), sw.rounds(20), off)?;
            (lat, Some(bw))
        }
    };
    // With `VOLLEY_ETH_XDP`, the bare ping-pong through `AF_XDP` too: the limit of the
    // path Volley's frames then take. Volley's ratios stay to the packet rings'.
    let xdp_lat = match fabric {
        Fabric::Eth
            if volley_hosted::eth::xdp_setting()? != volley_hosted::eth::XdpSetting::Off =>
        {
            let (lat, _, used) = eth_reference(
                boot,
                8,
                sw.iters(20_000),
                0,
                volley_hosted::eth::xdp_setting()?,
            )?;
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
        progress(volley_hosted::clmul::describe());
    }
    let me = g.my_node();
    let sizes = [0usize, 8, 64, 512, 4096, 32_768, 262_144, 1 << 20];
    for (reliable, label) in [(true, "send_flowctl"), (false, "send")] {
        for &len in &sizes {
            if !reliable && (fabric == Fabric::Udp || len > 8) {
                // Best effort may lose on UDP; on shm it shows the unacked path (8 B).
                continue;
            }
            if !sw.wants(len) {
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
            let samples = gamma_latency(&mut g, len, iters, reliable, false)?;
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
    progress("latency, receiver asleep on the wake-up descriptor");
    let samples = gamma_latency(&mut g, 8, sw.iters(5_000), true, true)?;
    if me == 0 {
        let test = "latency, one-way, asleep in epoll";
        rows.push(latency_row(name, test, 8, samples, lm));
    }
    for &len in &[4096usize, 65_536, 1 << 20] {
        if !sw.wants(len) {
            continue;
        }
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

/// Sleeps on `ep`'s wake-up descriptor if arming says it may (an event loop's
/// wait between two polls that found nothing), for a message awaited since
/// `since`: 10 s without it is an error (a lost wake-up, or a lost message).
pub(super) fn sleep_if_armed(ep: &mut impl EventLoop, since: StdInstant) -> Result<(), HostError> {
    let limit = StdDuration::from_secs(10);
    let left = limit
        .checked_sub(since.elapsed())
        .ok_or_else(|| HostError::Other("bench: asleep 10 s with a message on its way".into()))?;
    if ep.arm()? && !ep.wakeup()?.wait(Some(left))? {
        return Err(HostError::Other(
            "bench: asleep 10 s with a message on its way".into(),
        ));
    }
    Ok(())
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
    let lat = gamma_latency(&mut g, 8, sw.iters(20_000), true, false)?;
    let lat_mib = gamma_latency(&mut g, 1 << 20, sw.iters(200), true, false)?;
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
