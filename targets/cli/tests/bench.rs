//! `volley bench` output formats: the CSV is RFC 4180 (names with commas quoted) and
//! the JSON one document, both with every row of the run. Formats only: figures are
//! never judged here (a slow machine must not fail a test).

use std::process::Command;

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");

fn bench(args: &[&str]) -> String {
    bench_with(args, &[])
}

/// [`bench`] with `env` added.
fn bench_with(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(VOLLEY)
        .args(["bench", "--quick", "--iters", "40"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "volley bench {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const FIELDS: [&str; 8] = [
    "fabric",
    "test",
    "bytes",
    "unit",
    "median",
    "p90",
    "p99",
    "ratio_to_reference",
];

/// The rows of each API with both ranks asleep on the wake-up descriptor.
const ASLEEP_ROWS: [&str; 4] = [
    "latency, one-way, asleep in epoll",
    "lfc latency, one-way, asleep in epoll",
    "cheetah put, one-way, asleep in epoll",
    "qnix send_short, one-way, asleep in epoll",
];

#[test]
fn csv_is_rfc4180_and_json_one_document_with_the_same_rows() {
    let text = bench(&["--csv"]);
    assert!(text.contains("\r\n"), "RFC 4180 ends records with CRLF");
    let mut r = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    assert_eq!(r.headers().unwrap().iter().collect::<Vec<_>>(), FIELDS);
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert!(rows.len() > 30, "{text}");
    let mut tests = Vec::new();
    for row in &rows {
        assert_eq!(row.len(), 8, "{row:?}");
        assert!(["shm", "udp"].contains(&&row[0]), "{row:?}");
        assert!(["us", "MB/s"].contains(&&row[3]), "{row:?}");
        row[2].parse::<u64>().unwrap();
        for f in 4..7 {
            assert!(row[f].parse::<f64>().unwrap() >= 0.0, "{row:?}");
        }
        if !row[7].is_empty() {
            row[7].parse::<f64>().unwrap();
        }
        tests.push((row[0].to_string(), row[1].to_string()));
    }
    // Names with commas come back whole.
    assert!(tests.contains(&("shm".into(), "latency, one-way, send_flowctl".into())));
    assert!(text.contains("\"latency, one-way, send_flowctl\""));
    // Each API's event-loop row beside its spinning one, on both fabrics.
    for fabric in ["shm", "udp"] {
        for asleep in ASLEEP_ROWS {
            assert!(
                tests.contains(&(fabric.into(), asleep.into())),
                "{fabric}: {asleep}"
            );
        }
    }
    for (fabric, reference) in [
        ("shm", "reference: bare flag ping-pong"),
        ("shm", "reference: memcpy"),
        ("udp", "reference: bare UDP ping-pong"),
        ("udp", "reference: bare TCP stream, loopback"),
    ] {
        assert!(
            tests.contains(&(fabric.into(), reference.into())),
            "{reference}"
        );
    }
    // The 64 KB tag's ratio is to the time the bare stream takes to carry 64 KB.
    let row = |test: &str| {
        rows.iter()
            .find(|r| &r[0] == "udp" && &r[1] == test)
            .unwrap_or_else(|| panic!("no {test}:\n{text}"))
    };
    let (tag, stream) = (
        row("frame tag, AES-GCM-SIV"),
        row("reference: bare TCP stream, loopback"),
    );
    let f = |r: &csv::StringRecord, i: usize| r[i].parse::<f64>().unwrap();
    let implied = 65_000.0 * f(tag, 7) / f(tag, 4);
    assert!(
        (implied / f(stream, 4) - 1.0).abs() < 0.01,
        "{implied} MB/s implied, stream {}",
        f(stream, 4)
    );
    // Collective rows at 2 and 4 ranks on both fabrics (a label says when the ranks
    // outnumber the cores), three broadcast sizes; MPICH beside shm when installed,
    // with Volley's ratio to it.
    let has = |fabric: &str, prefix: &str, bytes: &str| {
        rows.iter()
            .any(|r| &r[0] == fabric && r[1].starts_with(prefix) && &r[2] == bytes)
    };
    for fabric in ["shm", "udp"] {
        for n in ["2 ranks", "4 ranks"] {
            assert!(has(fabric, &format!("barrier, {n}"), "0"), "{fabric} {n}");
            for bytes in ["8", "16384", "1048576"] {
                assert!(
                    has(fabric, &format!("broadcast, {n}"), bytes),
                    "{fabric} {n} {bytes}"
                );
            }
        }
    }
    if volley_cli::peers::on_path("mpiexec.mpich").is_some() {
        for prefix in ["MPICH MPI_Barrier, 2 ranks", "MPICH MPI_Bcast, 4 ranks"] {
            let row = rows
                .iter()
                .find(|r| &r[0] == "shm" && r[1].starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} row:\n{text}"));
            row[7].parse::<f64>().expect("a ratio to MPICH");
        }
    }

    // The JSON run also draws its charts; a saved run drawn again gives the same ones.
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let json = bench(&["--json", "--plot", plots.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let saved = dir.path().join("run.json");
    std::fs::write(&saved, &json).unwrap();
    let again = dir.path().join("again");
    let out = Command::new(VOLLEY)
        .args(["bench", "--from", saved.to_str().unwrap(), "--plot"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for chart in ["latency.svg", "bandwidth.svg"] {
        let svg = std::fs::read_to_string(plots.join(chart)).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}");
        for name in ["shm latency, one-way, send_flowctl", "udp "] {
            if chart == "latency.svg" {
                assert!(svg.contains(name), "{chart}: no {name}");
            }
        }
        assert_eq!(
            std::fs::read_to_string(again.join(chart)).unwrap(),
            svg,
            "{chart} drawn from the saved run"
        );
    }
    let jrows = doc["rows"].as_array().unwrap();
    assert_eq!(
        jrows.len(),
        rows.len(),
        "the same sweep gives the same rows"
    );
    for (j, (fabric, test)) in jrows.iter().zip(&tests) {
        assert_eq!(j["fabric"], fabric.as_str());
        assert_eq!(j["test"], test.as_str());
        assert!(j["median"].as_f64().unwrap() >= 0.0);
    }
    assert!(doc["cpus"].as_u64().unwrap() >= 1);
}

#[test]
fn bad_bench_options_are_one_line() {
    for args in [
        &["bench", "--iters", "0"][..],
        &["bench", "--csv", "--json"],
        &["bench", "--fabric", "tcp"],
        &["bench", "--from", "run.json"],
    ] {
        let out = Command::new(VOLLEY).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

/// `--from` a file that is no saved run is one line, and draws nothing.
#[test]
fn plotting_a_file_that_is_no_run_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"rows\": 3}").unwrap();
    let plots = dir.path().join("plots");
    let out = Command::new(VOLLEY)
        .args(["bench", "--from", bad.to_str().unwrap(), "--plot"])
        .arg(&plots)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not a `volley bench --json` document"),
        "{err}"
    );
    assert!(!plots.join("latency.svg").exists());
}

/// `--fabric eth` as root makes a veth pair for the run, measures the bare
/// AF_PACKET ping-pong and stream as its references and Volley's rows against them,
/// and removes the pair afterwards. With `VOLLEY_ETH_XDP=on` (as here), Volley's
/// frames go by AF_XDP, and a bare AF_XDP ping-pong follows the references, with its
/// ratio to the AF_PACKET one.
#[test]
fn eth_rows_start_with_the_bare_af_packet_reference() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("not root: no veth pair can be made (CI runs as root)");
        return;
    }
    let before = std::fs::read_dir("/sys/class/net").unwrap().count();
    let text = bench_with(&["--fabric", "eth", "--csv"], &[("VOLLEY_ETH_XDP", "on")]);
    let mut r = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert_eq!(&rows[0][0], "eth", "{text}");
    assert_eq!(&rows[0][1], "reference: bare AF_PACKET ping-pong", "{text}");
    let lat = rows
        .iter()
        .find(|r| &r[1] == "latency, one-way, send_flowctl" && &r[2] == "8")
        .unwrap_or_else(|| panic!("no 8-byte latency row:\n{text}"));
    let ratio: f64 = lat[7].parse().unwrap();
    assert!(ratio > 0.0, "{text}");
    assert!(rows.iter().all(|r| &r[0] == "eth"), "{text}");
    for asleep in ASLEEP_ROWS {
        assert!(
            rows.iter().any(|r| &r[1] == asleep),
            "eth: no {asleep}:\n{text}"
        );
    }
    assert_eq!(&rows[1][1], "reference: bare AF_PACKET stream", "{text}");
    let stream: f64 = rows[1][4].parse().unwrap();
    assert!(stream > 0.0, "{text}");
    assert_eq!(&rows[2][1], "reference: bare AF_XDP ping-pong", "{text}");
    let (xdp, xdp_ratio): (f64, f64) = (rows[2][4].parse().unwrap(), rows[2][7].parse().unwrap());
    let af_packet: f64 = rows[0][4].parse().unwrap();
    assert!(
        (xdp / af_packet - xdp_ratio).abs() < 0.01 * xdp_ratio.max(0.1),
        "{text}"
    );
    // Bandwidth against the stream; the barrier against the collective run's own
    // bare ping-pong, which measures what row 0 does (within the noise).
    let ping: f64 = rows[0][4].parse().unwrap();
    for (test, reference, slack) in [
        ("bandwidth, streaming", stream, 1.01),
        ("barrier, 2 ranks", ping, 4.0),
    ] {
        let row = rows
            .iter()
            .find(|r| r[1].starts_with(test))
            .unwrap_or_else(|| panic!("no {test} row:\n{text}"));
        let (median, ratio): (f64, f64) = (row[4].parse().unwrap(), row[7].parse().unwrap());
        let implied = median / ratio;
        assert!(
            implied < reference * slack && implied > reference / slack,
            "{test}: ratio {ratio} means a reference of {implied}, not about {reference}:\n{text}"
        );
    }
    let after = std::fs::read_dir("/sys/class/net").unwrap().count();
    assert_eq!(before, after, "the veth pair must be gone");
}

/// With `--peers`, Volley's rows measured in the peer rounds are named apart from
/// the sweep's: no two rows of the CSV share fabric, test and size, and MPICH's
/// rows carry Volley's ratio to them.
#[test]
fn peer_rounds_rows_are_named_apart_from_the_sweep() {
    if volley_cli::peers::on_path("mpiexec.mpich").is_none() {
        eprintln!("mpiexec.mpich is missing: install Debian's mpich (.ci/run does)");
        return;
    }
    let text = bench(&["--fabric", "shm", "--peers", "--csv"]);
    let mut r = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    let mut keys: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r[0].to_string(), r[1].to_string(), r[2].to_string()))
        .collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "rows named alike:\n{text}");
    let row = |test: &str, bytes: &str| {
        rows.iter()
            .find(|r| &r[1] == test && &r[2] == bytes)
            .unwrap_or_else(|| panic!("no {test} of {bytes} B:\n{text}"))
    };
    let num = |r: &csv::StringRecord, i: usize| r[i].parse::<f64>().unwrap();
    let mib = "1048576";
    let lat = row("Volley in peer rounds: latency, one-way, send_flowctl", "8");
    row(
        "Volley in peer rounds: bandwidth, streaming, isend_flowctl",
        mib,
    );
    // The bare path, measured in the same rounds: Volley's latency carries the
    // median of the rounds' ratios to it.
    let bare = row("Volley in peer rounds: reference: bare flag ping-pong", "8");
    assert_eq!(num(bare, 7), 1.0, "{text}");
    assert!(num(lat, 7) > 0.0, "{text}");
    // Each peer's ratio is to Volley's latency of the same size in the rounds, not
    // to the bare path measured beside it: 8 B and 1 MiB ping-pongs.
    for bytes in ["8", mib] {
        let ours = row(
            "Volley in peer rounds: latency, one-way, send_flowctl",
            bytes,
        );
        let mpich = row("MPICH MPI_Send/MPI_Recv ping-pong", bytes);
        let want = num(ours, 4) / num(mpich, 4);
        assert!((num(mpich, 7) - want).abs() <= want * 1e-3, "{text}");
    }
}
