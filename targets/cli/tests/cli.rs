//! The `volley` command as users of mpiexec and UCX's tools expect it to behave:
//! `info` (and `--json`), the settings table and the warning about an unknown
//! setting, `-np`, unknown options, standard input forwarded to rank 0, checks made
//! once before any rank starts, completions and manual pages, and `bench` cut short
//! by a closed pipe or Ctrl-C without a panic or a temporary directory left behind.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use volley_hosted::vars::VARS;

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");

/// `volley ARGS` with `env` added and no `VOLLEY_*` from the caller's environment.
fn volley(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(VOLLEY);
    for (k, _) in std::env::vars() {
        if k.starts_with("VOLLEY_") {
            c.env_remove(k);
        }
    }
    c.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A misspelt setting's name, built so that no source file spells it whole.
fn misspelt() -> String {
    format!("VOLLEY_{}", "FABRICS")
}

#[test]
fn info_says_each_fabric_and_json_carries_every_variable() {
    let out = volley(&["info"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    for f in ["shm", "udp", "eth"] {
        assert!(
            t.lines()
                .any(|l| l.trim_start().starts_with(f) && l.contains("ranks <=")),
            "{f} missing:\n{t}"
        );
    }
    assert!(t.contains(env!("CARGO_PKG_VERSION")), "{t}");
    // eth without VOLLEY_ETH_IF (or without CAP_NET_RAW) is not usable, and says why.
    let eth = t
        .lines()
        .find(|l| l.trim_start().starts_with("eth"))
        .unwrap();
    assert!(
        eth.contains("not usable")
            && (eth.contains("VOLLEY_ETH_IF") || eth.contains("CAP_NET_RAW")),
        "{eth}"
    );

    let out = volley(&["info", "--json"], &[("VOLLEY_UDP_GSO", "0")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = j["fabrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shm", "udp", "eth"]);
    assert_eq!(j["fabrics"][0]["max_ranks"], 256);
    let vars = j["variables"].as_array().unwrap();
    assert_eq!(vars.len(), VARS.len());
    assert!(VARS
        .iter()
        .all(|v| vars.iter().any(|x| x["name"] == v.name)));
    assert_eq!(
        j["settings"],
        serde_json::json!([{"name": "VOLLEY_UDP_GSO", "value": "0"}])
    );
}

#[test]
fn info_shows_a_bad_value_and_an_unknown_name_and_hides_the_secret() {
    let bad = misspelt();
    let out = volley(
        &["info"],
        &[
            (&bad, "udp"),
            ("VOLLEY_UDP_MTU", "9"),
            ("VOLLEY_SECRET", "00112233445566778899aabbccddeeff"),
        ],
    );
    let t = text(&out.stdout);
    assert!(
        t.contains(&format!("unknown: {bad} (did you mean VOLLEY_FABRIC?)")),
        "{t}"
    );
    assert!(t.contains("bad: VOLLEY_UDP_MTU=\"9\""), "{t}");
    assert!(
        t.contains("VOLLEY_SECRET=(hidden)") && !t.contains("00112233"),
        "{t}"
    );
}

#[test]
fn info_help_lists_every_variable() {
    let out = volley(&["info", "--help"], &[]);
    assert!(out.status.success());
    let t = text(&out.stdout);
    for v in VARS {
        assert!(
            t.contains(v.name),
            "{} missing from `volley info --help`",
            v.name
        );
    }
}

#[test]
fn rank_zero_alone_warns_about_an_unknown_setting() {
    let bad = misspelt();
    let out = volley(
        &["run", "-n", "3", "--", VOLLEY, "worker", "attach"],
        &[(&bad, "udp")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("is not a Volley setting"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].starts_with("[0] ") && warnings[0].contains("did you mean VOLLEY_FABRIC?"),
        "{err}"
    );
}

#[test]
fn np_is_taken_as_mpiexec_takes_it() {
    let out = volley(
        &[
            "run",
            "-np",
            "3",
            "--",
            "sh",
            "-c",
            "echo size=$VOLLEY_SIZE",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert_eq!(t.matches("size=3").count(), 3, "{t}");
    // The program's own -np is its own.
    let out = volley(
        &[
            "run",
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            "echo \"$0 $1\"",
            "-np",
            "7",
        ],
        &[],
    );
    assert!(text(&out.stdout).contains("-np 7"), "{}", text(&out.stdout));
}

#[test]
fn an_unknown_option_before_the_program_is_one_line() {
    for args in [
        &["run", "--fabrc", "shm", "--", "true"][..],
        &["run", "-n", "2", "--bogus", "true"],
        &["run", "-x", "2", "true"],
    ] {
        let out = volley(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("unknown option"), "{args:?}: {err}");
    }
    // Known options with values, then the program: no complaint.
    let out = volley(
        &["run", "-n", "1", "--grace", "1", "--fabric=shm", "true"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn standard_input_reaches_rank_zero_only() {
    let mut child = Command::new(VOLLEY)
        .args([
            "run",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            "read l; echo \"got:$l\"",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from the terminal\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let t = text(&out.stdout);
    assert!(t.contains("[0] got:from the terminal"), "{t}");
    assert_eq!(t.matches("got:from the terminal").count(), 1, "{t}");
    // The others read an empty input.
    assert!(t.contains("[1] got:") && t.contains("[2] got:"), "{t}");
}

#[test]
fn what_can_be_checked_before_the_ranks_start_is_said_once() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 3] = [
        (&["demo", "-n", "300"], &[], "at most 256 ranks"),
        (
            &["demo", "-n", "3"],
            &[("VOLLEY_BARRIER", "nope")],
            "VOLLEY_BARRIER",
        ),
        (
            &["demo", "-n", "3", "--fabric", "eth"],
            &[],
            "VOLLEY_ETH_IF",
        ),
    ];
    for (args, env, says) in cases {
        let out = volley(args, env);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains('['), "a rank spoke: {err}");
    }
}

#[test]
fn completions_and_manual_pages_come_from_the_command_line_definition() {
    for shell in ["bash", "zsh", "fish"] {
        let out = volley(&["completions", shell], &[]);
        assert!(out.status.success(), "{shell}");
        let t = text(&out.stdout);
        for sub in ["demo", "run", "bench", "info"] {
            assert!(t.contains(sub), "{shell}: {sub}");
        }
    }
    let out = volley(&["man"], &[]);
    assert!(out.status.success());
    let t = text(&out.stdout);
    assert!(t.contains(".TH volley 1"), "{t}");
    let dir = tempfile::tempdir().unwrap();
    let out = volley(&["man", "--dir", dir.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in [
        "volley.1",
        "volley-run.1",
        "volley-bench.1",
        "volley-info.1",
    ] {
        let p = dir.path().join(page);
        let t = std::fs::read_to_string(&p).unwrap_or_default();
        assert!(t.contains(".TH"), "{page}");
    }
    let run = std::fs::read_to_string(dir.path().join("volley-run.1")).unwrap();
    assert!(run.contains("timeout"), "{run}");
}

/// `volley bench` started with its own temporary directory, its stdout piped.
fn bench_in(tmp: &std::path::Path, args: &[&str]) -> std::process::Child {
    Command::new(VOLLEY)
        .arg("bench")
        .args(args)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn leftovers(tmp: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn bench_whose_reader_has_gone_stops_without_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    // Two fabrics: the reader is gone while the second runs.
    let mut child = bench_in(
        tmp.path(),
        &[
            "--quick",
            "--fabric",
            "shm,udp",
            "-t",
            "collectives",
            "--no-peers",
        ],
    );
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The pipe's reading end is closed here, as `head -1` closes it.
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        first.starts_with('#') || first.starts_with("fab"),
        "{first}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert!(
        matches!(status.code(), Some(0) | Some(141)),
        "{status:?}: {err}"
    );
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

#[test]
fn bench_interrupted_removes_its_temporary_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let child = bench_in(tmp.path(), &["--fabric", "shm,udp", "--no-peers"]);
    // Once the first job runs (its rows file exists), Ctrl-C.
    let start = Instant::now();
    while leftovers(tmp.path()).is_empty() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!leftovers(tmp.path()).is_empty(), "the bench never started");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(!err.contains("step 2 of"), "went on after Ctrl-C: {err}");
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

#[test]
fn bench_checks_the_plot_directory_first_and_keeps_the_sizes_asked_for() {
    let out = volley(
        &["bench", "--quick", "--plot", "/proc/volley-no-such-dir"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--plot"), "{err}");

    let out = volley(
        &[
            "bench",
            "--quick",
            "--fabric",
            "shm",
            "-t",
            "pair",
            "-s",
            "8,4K",
            "--no-peers",
            "--json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = j["rows"].as_array().unwrap();
    assert!(rows.len() > 5);
    for r in rows {
        let bytes = r["bytes"].as_u64().unwrap();
        let reference = r["ratio_to_reference"] == serde_json::json!(1.0);
        assert!(bytes == 8 || bytes == 4096 || reference, "{r}");
    }
    assert!(rows.iter().any(|r| r["bytes"] == 4096));
    // Only the pair part: no barrier row.
    assert!(rows
        .iter()
        .all(|r| !r["test"].as_str().unwrap().contains("barrier, ")));
    // One progress line per step, not one per rank.
    let err = text(&out.stderr);
    assert_eq!(err.matches("bench: reference").count(), 1, "{err}");
}

/// The dissector in the repository, run by `tshark` over `pcap`: one line per
/// record, `fields` separated by `|`.
fn tshark(pcap: &std::path::Path, fields: &[&str]) -> Vec<String> {
    let lua =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../core/wireshark/volley.lua");
    let mut c = Command::new("tshark");
    c.arg("-X")
        .arg(format!("lua_script:{}", lua.display()))
        .arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let out = c
        .output()
        .expect("tshark runs: install Debian's tshark (.ci/run does)");
    assert!(out.status.success(), "tshark: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("Lua: Error"), "{err}");
    text(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn capture_on_each_fabric_decodes_with_the_dissector() {
    use std::os::unix::fs::PermissionsExt;
    for fabric in ["shm", "udp"] {
        let dir = tempfile::tempdir().unwrap();
        let out = volley(
            &[
                "run",
                "-n",
                "2",
                "--fabric",
                fabric,
                "--job",
                "0x5eed",
                "--",
                VOLLEY,
                "worker",
                "flowctl-exact",
            ],
            &[
                ("VOLLEY_PCAP", dir.path().to_str().unwrap()),
                ("VOLLEY_MESSAGES", "20"),
            ],
        );
        assert!(out.status.success(), "{fabric}: {}", text(&out.stderr));
        let mut data = 0;
        for rank in 0..2 {
            let pcap = dir.path().join(format!("{:016x}-{rank}.pcap", 0x5eed));
            let mode = std::fs::metadata(&pcap).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", pcap.display());
            let lines = tshark(
                &pcap,
                &[
                    "volley.kind",
                    "volley.compact.magic",
                    "volley.flags.auth",
                    "volley.tag",
                    "volley.payload_len",
                    "_ws.expert",
                ],
            );
            assert!(
                lines.len() > 20,
                "{fabric} rank {rank}: {} records",
                lines.len()
            );
            for l in &lines {
                let f: Vec<&str> = l.split('|').collect();
                let (kind, compact, auth, tag, expert) = (f[0], f[1], f[2], f[3], f[5]);
                assert!(expert.is_empty(), "{fabric}: malformed: {l}");
                assert!(
                    !kind.is_empty() || compact == "0xc5" || compact == "0xc6",
                    "{fabric}: not decoded: {l}"
                );
                if fabric == "udp" {
                    // Across a network every frame is tagged, and the tag shown.
                    assert!(auth == "1" && tag.len() == 32, "{l}");
                }
                if rank == 0 && (kind == "1" || compact == "0xc5") && f[4] != "0" {
                    data += 1;
                }
            }
            if fabric == "shm" {
                assert!(
                    lines.iter().any(|l| l.contains("0xc5")),
                    "no compact frame on shm"
                );
            }
        }
        assert!(data >= 20, "{fabric}: {data} data frames");
        // The same job again: the files are there, and are not written over.
        let out = volley(
            &[
                "run", "-n", "2", "--fabric", fabric, "--job", "0x5eed", "--", VOLLEY, "worker",
                "attach",
            ],
            &[("VOLLEY_PCAP", dir.path().to_str().unwrap())],
        );
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("VOLLEY_PCAP"),
            "{}",
            text(&out.stderr)
        );
    }
    // A link planted where a capture goes is not followed.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, b"keep").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(format!("{:016x}-0.pcap", 0x77))).unwrap();
    let out = volley(
        &[
            "run", "-n", "1", "--job", "0x77", "--", VOLLEY, "worker", "attach",
        ],
        &[("VOLLEY_PCAP", dir.path().to_str().unwrap())],
    );
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    // Not a directory: said before any rank starts.
    let out = volley(&["demo", "-n", "2"], &[("VOLLEY_PCAP", "/nonexistent/dir")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("VOLLEY_PCAP"),
        "{}",
        text(&out.stderr)
    );
}

/// `volley run --unikernel` has cargo bring the image up to date with the source
/// tree before it boots any node (a stale image is never booted unseen), and says
/// so; a failed build stops the job with one line. A stand-in `cargo` records
/// that it was asked and fails.
#[test]
fn the_unikernel_image_is_brought_up_to_date_before_a_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let asked = dir.path().join("asked");
    let fake = dir.path().join("cargo");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$PWD $*\" > {}\nexit 1\n",
            asked.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = volley(
        &[
            "run",
            "-n",
            "2",
            "--unikernel",
            "1",
            "--timeout",
            "30",
            "--",
            "true",
        ],
        &[("CARGO", fake.to_str().unwrap())],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bringing the unikernel image up to date"),
        "{err}"
    );
    assert!(err.contains("building the unikernel image failed"), "{err}");
    let call = std::fs::read_to_string(&asked).expect("cargo was asked");
    assert!(
        call.trim_end().ends_with("/unikernel build --release"),
        "{call}"
    );
    // Another image, named: no build.
    let image = dir.path().join("image");
    std::fs::write(&image, b"not a kernel").unwrap();
    std::fs::remove_file(&asked).unwrap();
    let out = volley(
        &[
            "run",
            "-n",
            "1",
            "--unikernel",
            "1",
            "--timeout",
            "5",
            "--",
            "true",
        ],
        &[
            ("CARGO", fake.to_str().unwrap()),
            ("VOLLEY_UNIKERNEL_IMAGE", image.to_str().unwrap()),
        ],
    );
    assert!(!asked.exists(), "cargo asked for a named image");
    assert!(!out.status.success());
}
