//! `volley bench --plot DIR`: latency-vs-size and bandwidth-vs-size charts of a
//! run's rows, log axes, one line per fabric and test (Volley's and the peers').

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::bench::Row;
use volley_hosted::HostError;

/// One chart: the rows of one unit, collective rows or the others.
struct Chart {
    file: &'static str,
    unit: &'static str,
    collective: bool,
    caption: &'static str,
    y_desc: &'static str,
}

const CHARTS: [Chart; 3] = [
    Chart {
        file: "latency.svg",
        unit: "us",
        collective: false,
        caption: "Point-to-point latency by message size (medians)",
        y_desc: "microseconds",
    },
    Chart {
        file: "collectives.svg",
        unit: "us",
        collective: true,
        caption: "Broadcast by message size (medians)",
        y_desc: "microseconds",
    },
    Chart {
        file: "bandwidth.svg",
        unit: "MB/s",
        collective: false,
        caption: "Bandwidth by message size (medians)",
        y_desc: "MB/s",
    },
];

/// Strong colours that stay apart on white; a test keeps its colour across fabrics.
const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 128),
    RGBColor(0, 100, 0),
];

/// A series: fabric, test and its (bytes, median) points, by size.
#[derive(Debug)]
struct Series {
    fabric: String,
    test: String,
    points: Vec<(f64, f64)>,
}

/// Whether a row is a collective's (its test names a rank count).
fn is_collective(r: &Row) -> bool {
    r.test.contains(" ranks")
}

/// Figures a chart takes: no benchmark gives microseconds or MB/s outside this, and
/// a log axis over hundreds of decades (a forged saved run) would take for ever to draw.
const FIGURES: std::ops::RangeInclusive<f64> = 1e-9..=1e15;

/// The series of the rows `keep` selects, one per fabric and test, points by size.
/// Rows of 0 bytes (barriers, empty messages) and figures outside [`FIGURES`] have no
/// place on a log axis and are left out.
fn series(rows: &[Row], keep: impl Fn(&Row) -> bool) -> Vec<Series> {
    let mut by: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows.iter().filter(|r| keep(r)) {
        if r.bytes == 0 || !FIGURES.contains(&r.median) {
            continue;
        }
        by.entry((r.fabric.to_string(), r.test.clone()))
            .or_default()
            .push((r.bytes as f64, r.median));
    }
    by.into_iter()
        .map(|((fabric, test), mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                fabric,
                test,
                points,
            }
        })
        .collect()
}

/// Writes the charts for `rows` into `dir` (created if missing): `latency.svg`,
/// `collectives.svg` and `bandwidth.svg`; returns the files written. A chart
/// without rows is not written.
pub fn charts(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>, HostError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| HostError::Other(format!("plot: {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for c in &CHARTS {
        let s = series(rows, |r| {
            r.unit == c.unit && is_collective(r) == c.collective
        });
        if s.is_empty() {
            continue;
        }
        let path = dir.join(c.file);
        draw(&path, c, &s)
            .map_err(|e| HostError::Other(format!("plot: {}: {e}", path.display())))?;
        written.push(path);
    }
    Ok(written)
}

/// The widest step between two sizes of one sweep that a line still joins: the
/// sweeps step by 8 (latency) or 16 (bandwidth); a series measured at sizes
/// farther apart (a peer's 8 B and 1 MiB) has no points between them to draw.
const JOINED_STEP: f64 = 16.0;

/// `points` (by size) cut where two neighbours are more than [`JOINED_STEP`]
/// apart: each run is drawn as one line.
fn runs(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    for &p in points {
        match out.last_mut() {
            Some(run) if p.0 <= run[run.len() - 1].0 * JOINED_STEP => run.push(p),
            _ => out.push(vec![p]),
        }
    }
    out
}

/// Draws marker `shape` (0 circle, 1 square, 2 triangle) at `at`.
fn marker<DB: DrawingBackend, C: CoordTranslate>(
    area: &DrawingArea<DB, C>,
    at: C::From,
    shape: usize,
    color: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = color.filled();
    match shape {
        0 => area.draw(&Circle::new(at, 3, style)),
        1 => area.draw(&(EmptyElement::at(at) + Rectangle::new([(-3, -3), (3, 3)], style))),
        _ => area.draw(&TriangleMarker::new(at, 4, style)),
    }
}

/// A size as people write it: 8, 4 KiB, 1 MiB.
fn bytes_label(x: f64) -> String {
    let b = x.round() as u64;
    match b {
        _ if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{} MiB", b >> 20),
        _ if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{} KiB", b >> 10),
        _ => b.to_string(),
    }
}

/// A figure without trailing noise: 1000, 10, 0.5.
fn value_label(y: f64) -> String {
    if y >= 1.0 {
        format!("{y:.0}")
    } else {
        format!("{y:.2}").trim_end_matches('0').to_string()
    }
}

fn draw(path: &Path, c: &Chart, series: &[Series]) -> Result<(), Box<dyn std::error::Error>> {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    // Room around the points, and a range even for a single one.
    let (x0, x1, y0, y1) = (x0 / 2.0, x1 * 2.0, y0 / 1.5, y1 * 1.5);
    // Tall enough for the legend's every line.
    let height = (60 + 20 * series.len() as u32).max(720);
    let root = SVGBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(820);
    let mut chart = ChartBuilder::on(&left)
        .caption(c.caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((x0..x1).log_scale().base(4.0), (y0..y1).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(c.y_desc)
        .x_labels(12)
        .y_labels(10)
        .x_label_formatter(&|x| bytes_label(*x))
        .y_label_formatter(&|y| value_label(*y))
        .draw()?;
    // A colour per line; the first fabric's lines solid, the others' dashed.
    let first = series.first().map(|s| s.fabric.as_str()).unwrap_or("");
    let text = ("sans-serif", 13).into_font();
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let style = color.stroke_width(2);
        let solid = s.fabric == first;
        // A line joins only sizes of one sweep: none is drawn across a gap.
        for run in runs(&s.points) {
            if run.len() < 2 {
                continue;
            }
            if solid {
                chart.draw_series(LineSeries::new(run.iter().copied(), style))?;
            } else {
                chart.draw_series(DashedLineSeries::new(run.iter().copied(), 7, 5, style))?;
            }
        }
        // Past the palette, lines differ by marker as well.
        let shape = i / PALETTE.len() % 3;
        for &p in &s.points {
            marker(chart.plotting_area(), p, shape, color)?;
        }
        // The legend beside the chart, where it hides no line.
        let y = 40 + 20 * i as i32;
        let sample = [(8, y), (36, y)];
        if solid {
            right.draw(&PathElement::new(sample, style))?;
        } else {
            right.draw(&PathElement::new([(8, y), (18, y)], style))?;
            right.draw(&PathElement::new([(26, y), (36, y)], style))?;
        }
        marker(&right, (22, y), shape, color)?;
        right.draw(&Text::new(
            format!("{} {}", s.fabric, s.test),
            (44, y - 7),
            text.clone(),
        ))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fabric: &'static str, test: &str, bytes: usize, unit: &'static str, m: f64) -> Row {
        Row {
            fabric: fabric.into(),
            test: test.into(),
            bytes,
            unit: unit.into(),
            median: m,
            p90: m,
            p99: m,
            ratio: None,
        }
    }

    #[test]
    fn one_line_per_fabric_and_test_with_empty_rows_left_out() {
        let rows = [
            row("shm", "latency, one-way, send", 64, "us", 0.7),
            row("shm", "latency, one-way, send", 8, "us", 0.5),
            row("udp", "latency, one-way, send", 8, "us", 3.0),
            row("shm", "barrier, 2 ranks", 0, "us", 0.6),
            row("shm", "bandwidth, streaming", 4096, "MB/s", 6000.0),
            // Forged figures: no end to the axis, or hundreds of decades of it.
            row("shm", "latency, one-way, send", 512, "us", -1.0),
            row("shm", "latency, one-way, send", 1024, "us", 1e300),
            row("shm", "latency, one-way, send", 2048, "us", 1e-300),
        ];
        let s = series(&rows, |r| r.unit == "us");
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(
            (s[0].fabric.as_str(), s[0].test.as_str()),
            ("shm", "latency, one-way, send")
        );
        assert_eq!(s[0].points, vec![(8.0, 0.5), (64.0, 0.7)]);
        assert_eq!(s[1].points, vec![(8.0, 3.0)]);
        assert_eq!(series(&rows, |r| r.unit == "MB/s").len(), 1);
        assert!(series(&rows, |r| r.unit == "ns").is_empty());
    }

    #[test]
    fn a_line_joins_only_the_steps_of_a_sweep() {
        // A sweep by 8 is one line.
        let sweep = [(8.0, 1.0), (64.0, 2.0), (512.0, 3.0), (4096.0, 4.0)];
        assert_eq!(runs(&sweep).len(), 1);
        // A peer measured at 8 B and 1 MiB only: two points, no line across.
        assert_eq!(runs(&[(8.0, 1.5), (1048576.0, 5.0)]).len(), 2);
        // A gap in a sweep cuts its line there.
        let r = runs(&[(8.0, 1.0), (64.0, 2.0), (32768.0, 4.0), (262144.0, 5.0)]);
        assert_eq!(
            r,
            vec![
                vec![(8.0, 1.0), (64.0, 2.0)],
                vec![(32768.0, 4.0), (262144.0, 5.0)]
            ]
        );
    }

    #[test]
    fn sizes_and_figures_read_as_people_write_them() {
        assert_eq!(bytes_label(8.0), "8");
        assert_eq!(bytes_label(4096.0), "4 KiB");
        assert_eq!(bytes_label(1048576.0), "1 MiB");
        assert_eq!(bytes_label(1000.0), "1000");
        assert_eq!(value_label(1000.0), "1000");
        assert_eq!(value_label(0.5), "0.5");
        assert_eq!(value_label(0.25), "0.25");
    }

    #[test]
    fn charts_are_svg_files_naming_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [
            row("shm", "latency, one-way, send", 8, "us", 0.5),
            row("shm", "latency, one-way, send", 4096, "us", 1.1),
            row("shm", "MPICH ping-pong", 8, "us", 0.4),
            row("shm", "barrier, 2 ranks", 0, "us", 0.6),
            row("udp", "broadcast, 4 ranks", 8, "us", 9.0),
            row("udp", "broadcast, 4 ranks", 1 << 20, "us", 900.0),
        ];
        let out = charts(&rows, &dir.path().join("plots")).unwrap();
        let p = dir.path().join("plots");
        assert_eq!(out, vec![p.join("latency.svg"), p.join("collectives.svg")]);
        let coll = std::fs::read_to_string(&out[1]).unwrap();
        assert!(coll.contains("udp broadcast, 4 ranks") && coll.contains("1 MiB"));
        let svg = std::fs::read_to_string(&out[0]).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.contains("shm latency, one-way, send"));
        assert!(svg.contains("shm MPICH ping-pong"));
        assert!(
            !svg.contains("barrier"),
            "0-byte rows have no place on a log axis"
        );
        assert!(
            !svg.contains("broadcast"),
            "collectives have their own chart"
        );
        assert!(svg.contains("message size (bytes)"));
        // Nothing to draw: no file, no error.
        assert!(charts(&[], &dir.path().join("none")).unwrap().is_empty());
    }
}
