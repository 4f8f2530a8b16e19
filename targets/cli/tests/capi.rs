//! C programs written against GAMMA's and LFC's headers, compiled with `cc` against
//! libvolley and run under `volley run`, `mpiexec.mpich` and on their own
//! (`-GAMMANP`, `HOSTS`), on both fabrics. The programs are the ones in
//! `targets/capi/examples/`; `latency.c` is the LFC guide's chapter-5 program.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, OnceLock};

mod relay;
use relay::{free_port, Relay};

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where cargo put `libvolley.so` (built as this package's dev-dependency).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    assert!(
        deps.join("libvolley.so").exists(),
        "libvolley.so not found in {}",
        deps.display()
    );
    deps
}

/// Compiles `targets/capi/examples/<name>.c` once, as strict C99 with every warning an error.
fn program(name: &str) -> PathBuf {
    build(name, &["-std=c99", "-Wall", "-Wextra", "-Werror"])
}

/// Compiles a program as its authors wrote it (GNU C of the 1990s: `void *`
/// arithmetic, unused upcall parameters): default dialect, warnings shown, not fatal.
fn seed_program(name: &str) -> PathBuf {
    build(name, &[])
}

fn build(name: &str, flags: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("c-{name}"));
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let lib = lib_dir();
        let src = repo().join(format!("targets/capi/examples/{name}.c"));
        let o = Command::new("cc")
            .args(flags)
            .args(["-O1", "-I"])
            .arg(repo().join("targets/capi/include"))
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .arg("-L")
            .arg(&lib)
            // DT_RPATH, not RUNPATH: it comes before cargo's LD_LIBRARY_PATH, which
            // may hold an older libvolley.so uplifted by an earlier partial build.
            .arg("-Wl,--disable-new-dtags")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lvolley")
            .output()
            .expect("cc runs");
        assert!(o.status.success(), "cc {name}.c:\n{}", text(&o));
        built.push(name.to_owned());
    }
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn launch(n: &str, fabric: &str, prog: &Path, args: &[&str]) -> Output {
    launch_env(n, fabric, "120", prog, args, &[])
}

/// [`launch`] with a time limit (seconds) and settings in the environment.
fn launch_env(
    n: &str,
    fabric: &str,
    timeout: &str,
    prog: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    Command::new(VOLLEY)
        .args([
            "run",
            "-n",
            n,
            "--fabric",
            fabric,
            "--timeout",
            timeout,
            "--",
        ])
        .arg(prog)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("volley runs")
}

fn mpiexec(n: &str, fabric: &str, prog: &Path) -> Output {
    mpiexec_args(n, fabric, prog, &[])
}

fn mpiexec_args(n: &str, fabric: &str, prog: &Path, args: &[&str]) -> Output {
    let m = "mpiexec.mpich";
    assert!(
        Command::new(m)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "{m} is missing: install Debian's mpich (.ci/run does)"
    );
    Command::new("timeout")
        .args(["120", m, "-n", n])
        .arg(prog)
        .args(args)
        .env("VOLLEY_FABRIC", fabric)
        .env_remove("VOLLEY_RANK")
        .output()
        .expect("mpiexec runs")
}

#[test]
fn c_pingpong_to_1mib_with_handler_echoes() {
    let prog = program("pingpong");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("2", fabric, &prog, &[]);
        let t = text(&o);
        assert!(o.status.success(), "volley run {fabric}:\n{t}");
        assert!(t.contains("pingpong ok: 2 processes"), "{fabric}:\n{t}");
        assert!(t.contains("1048576 bytes: round trip"), "{t}");
        let o = mpiexec("2", fabric, &prog);
        let t = text(&o);
        assert!(o.status.success(), "mpiexec {fabric}:\n{t}");
        assert!(
            t.contains("pingpong ok: 2 processes"),
            "mpiexec {fabric}:\n{t}"
        );
    }
}

#[test]
fn c_ring_and_reduce_with_two_buffers_rearmed_in_the_handler() {
    let prog = program("ring");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("4", fabric, &prog, &[]);
        let t = text(&o);
        assert!(o.status.success(), "volley run {fabric}:\n{t}");
        assert_eq!(t.matches("ring ok").count(), 4, "{fabric}:\n{t}");
        assert!(t.contains("sum 15"), "{t}");
        let o = mpiexec("4", fabric, &prog);
        let t = text(&o);
        assert!(o.status.success(), "mpiexec {fabric}:\n{t}");
        assert_eq!(t.matches("ring ok").count(), 4, "mpiexec {fabric}:\n{t}");
    }
}

#[test]
fn c_killed_rank_is_sendfailure_in_the_return_value_and_the_error_handler() {
    let prog = program("victim");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let t0 = std::time::Instant::now();
        let o = launch("3", fabric, &prog, &[]);
        let t = text(&o);
        assert!(!o.status.success(), "{fabric}: the job must fail:\n{t}");
        assert_eq!(
            t.matches("saw SENDFAILURE").count(),
            2,
            "{fabric}: both survivors see it:\n{t}"
        );
        assert!(t.contains("error handler ran"), "{t}");
        assert!(
            t0.elapsed().as_secs() < 60,
            "{fabric}: took {:?}",
            t0.elapsed()
        );
    }
}

/// Misuse of the GAMMA API returns an error and changes nothing (`misuse.c`
/// checks each call: before `gamma_init` and after `gamma_exit`, NULL data with a
/// length, lengths no memory has, unknown ports, instances, programs, buffer kinds
/// and handles, waiting inside a handler); the job then still carries a message
/// each way.
#[test]
fn c_misuse_is_an_error_and_the_job_goes_on() {
    let prog = program("misuse");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("2", fabric, &prog, &[]);
        let t = text(&o);
        assert!(o.status.success(), "{fabric}:\n{t}");
        assert_eq!(t.matches("misuse ok").count(), 2, "{fabric}:\n{t}");
        assert!(!t.contains("panicked"), "{fabric}:\n{t}");
    }
}

#[test]
fn c_gammanp_starts_the_job_itself() {
    let prog = program("pingpong");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = Command::new("timeout")
            .args(["120"])
            .arg(&prog)
            .args(["-GAMMANP", "2"])
            .env("VOLLEY_FABRIC", fabric)
            .output()
            .expect("runs");
        let t = text(&o);
        assert!(o.status.success(), "-GAMMANP 2 on {fabric}:\n{t}");
        assert!(t.contains("pingpong ok: 2 processes"), "{t}");
    }
    // By hand, num_nodes <= 0 (pingpong.c passes 0) and -GAMMANP 0 mean "all of the
    // cluster": here, one process per processor the program may use (two, by
    // `taskset`).
    for args in [&[][..], &["-GAMMANP", "0"][..]] {
        let o = Command::new("timeout")
            .args(["120", "taskset", "-c", "0,1"])
            .arg(&prog)
            .args(args)
            .output()
            .expect("runs");
        let t = text(&o);
        assert!(o.status.success(), "{args:?}:\n{t}");
        assert!(t.contains("pingpong ok: 2 processes"), "{args:?}:\n{t}");
    }
    // The same program under a launcher: -GAMMANP above the launcher's count means
    // "all of them" (the seed's rule); below it is an error.
    let o = launch("2", "shm", &prog, &["-GAMMANP", "8"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = launch("3", "shm", &prog, &["-GAMMANP", "2"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("2 processes requested"), "{t}");
}

#[test]
fn c_startup_errors_are_one_line_without_a_panic() {
    let prog = program("pingpong");
    let _g = serial();
    let cases: [Case; 3] = [
        (&["-GAMMANP", "lots"], &[], "-GAMMANP \"lots\""),
        (&[], &[("VOLLEY_FABRIC", "carrier-pigeon")], "VOLLEY_FABRIC"),
        (
            &[],
            &[("VOLLEY_RANK", "0"), ("VOLLEY_SIZE", "2")],
            "VOLLEY_JOB is not",
        ),
    ];
    one_line_errors(&prog, &cases);
}

/// A bad start: `args` and `env`, the text the one line must hold.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// Each case fails with exactly one line on stderr holding its text, and no panic.
fn one_line_errors(prog: &Path, cases: &[Case]) {
    for &(args, env, want) in cases {
        let o = Command::new("timeout")
            .arg("60")
            .arg(prog)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} {env:?}: {err}");
        assert!(err.contains(want), "{args:?} {env:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn c_ranks_started_as_srun_starts_them() {
    // No Slurm here: start the ranks with the environment srun gives each task. srun
    // hands out no secret: the job's key file does (0600, as documented).
    let prog = program("ring");
    let _g = serial();
    let job = std::process::id().to_string();
    let key = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("key-{job}"));
    let _ = std::fs::remove_file(&key);
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)
            .unwrap();
        std::io::Write::write_all(&mut f, b"00112233445566778899aabbccddeeff\n").unwrap();
    }
    for fabric in ["shm", "udp"] {
        let children: Vec<_> = (0..3)
            .map(|rank| {
                Command::new("timeout")
                    .arg("120")
                    .arg(&prog)
                    .env("SLURM_PROCID", rank.to_string())
                    .env("SLURM_NTASKS", "3")
                    .env("SLURM_JOB_ID", &job)
                    .env("SLURM_STEP_ID", if fabric == "shm" { "0" } else { "1" })
                    .env("VOLLEY_FABRIC", fabric)
                    .env("VOLLEY_KEY_FILE", &key)
                    .env_remove("VOLLEY_RANK")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("rank starts")
            })
            .collect();
        for (rank, c) in children.into_iter().enumerate() {
            let o = c.wait_with_output().expect("rank ends");
            let t = text(&o);
            assert!(o.status.success(), "{fabric} rank {rank}:\n{t}");
            assert!(t.contains(&format!("ring ok: instance {rank} of 3")), "{t}");
        }
    }
    // A key file other users can read is refused, in one line.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let o = Command::new("timeout")
        .arg("60")
        .arg(&prog)
        .env("SLURM_PROCID", "0")
        .env("SLURM_NTASKS", "2")
        .env("VOLLEY_FABRIC", "udp")
        .env("VOLLEY_KEY_FILE", &key)
        .env_remove("VOLLEY_RANK")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Without any secret the udp fabric refuses to start, saying how to give one.
    let o = Command::new("timeout")
        .arg("60")
        .arg(&prog)
        .env("SLURM_PROCID", "0")
        .env("SLURM_NTASKS", "2")
        .env("VOLLEY_FABRIC", "udp")
        .env_remove("VOLLEY_KEY_FILE")
        .env_remove("VOLLEY_RANK")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("needs a job secret"), "{err}");
    std::fs::remove_file(&key).unwrap();
}

/// The LFC guide's latency program, compiled unchanged but for one include: both of
/// its modes (polling, then interrupts while it spins on a counter and never
/// polls), on both fabrics, under both launchers, alone (it sends to itself), and
/// with the guide's own start-up (`HOSTS`, rank and count as `argv[1]`, `argv[2]`).
#[test]
fn lfc_latency_program_from_the_guide() {
    let prog = seed_program("latency");
    let _g = serial();
    let both = |t: &str, what: &str| {
        for mode in ["polling 1 latency", "polling 0 latency"] {
            assert_eq!(t.matches(mode).count(), 1, "{what}: {mode}:\n{t}");
        }
    };
    for fabric in ["shm", "udp"] {
        for size in ["16", "3000"] {
            let o = launch("2", fabric, &prog, &["-nsend", "300", "-size", size]);
            let t = text(&o);
            assert!(o.status.success(), "volley run {fabric} {size}:\n{t}");
            assert!(t.contains(&format!("Size {size:>4} polling 1")), "{t}");
            both(&t, fabric);
        }
    }
    let o = mpiexec_args("2", "udp", &prog, &["-nsend", "200", "-lfc-tree", "chain"]);
    let t = text(&o);
    assert!(o.status.success(), "mpiexec:\n{t}");
    both(&t, "mpiexec");
    // No launcher, no hosts: one process sending to itself.
    let o = Command::new("timeout")
        .args(["60"])
        .arg(&prog)
        .args(["-nsend", "200"])
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "alone:\n{t}");
    both(&t, "alone");
    // The guide's way: HOSTS set, rank and number of processes as argv[1], argv[2].
    let job = format!("{:#x}", 0x1fc_0000_0000u64 | std::process::id() as u64);
    let start = |rank: &str| {
        Command::new("timeout")
            .arg("60")
            .arg(&prog)
            .args([rank, "2", "-nsend", "200"])
            .env("HOSTS", "localhost localhost")
            .env("VOLLEY_JOB", &job)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (one, zero) = (start("1"), start("0"));
    let (t1, t0) = (
        text(&one.wait_with_output().unwrap()),
        text(&zero.wait_with_output().unwrap()),
    );
    both(&t0, "HOSTS rank 0");
    assert!(!t1.contains("latency"), "rank 1 prints nothing: {t1}");
}

/// Multicast to a group and broadcast down each tree shape, kept packets freed
/// later, fetch-and-add from every process at once (every value exactly once),
/// the LFC heap and statistics, on both fabrics and with `LFC_*` variables.
#[test]
fn lfc_multicast_fetch_and_add_and_kept_packets() {
    let prog = program("lfc_groups");
    let _g = serial();
    for (fabric, n, tree) in [
        ("shm", "4", "binary"),
        ("shm", "6", "chain"),
        ("udp", "5", "binomial"),
        ("udp", "3", "chain"),
        ("udp", "7", "binary"),
    ] {
        let o = launch(n, fabric, &prog, &["-lfc-tree", tree, "-lfc-verbose"]);
        let t = text(&o);
        assert!(o.status.success(), "{fabric} {n} {tree}:\n{t}");
        assert!(t.contains(&format!("lfc_groups ok: {n} processes")), "{t}");
        let shape = format!("tree {}{}", tree[..1].to_uppercase(), &tree[1..]);
        assert!(t.contains(&shape), "-lfc-tree reached the config: {t}");
        // The statistics table has a row per process.
        assert!(t.contains("lfc statistics"), "{t}");
    }
    let o = Command::new(VOLLEY)
        .args(["run", "-n", "3", "--timeout", "120", "--"])
        .arg(&prog)
        .env("LFC_TREE", "binomial")
        .env("LFC_VERBOSE", "1")
        .env("LFC_RING_FRAMES", "4")
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "LFC_* variables:\n{t}");
    assert!(
        t.contains("tree Binomial") && t.contains("/ 4 receive packets"),
        "{t}"
    );
    assert!(t.contains("lfc_groups ok: 3 processes"), "{t}");
}

/// A bad option or value is one line naming it, and exit 1.
#[test]
fn lfc_bad_options_are_one_line() {
    let prog = program("lfc_groups");
    let _g = serial();
    let cases: [Case; 5] = [
        (&["-lfc-tree", "star"], &[], "-lfc-tree \"star\""),
        (&["-lfc-ring-frames", "0"], &[], "-lfc-ring-frames"),
        (&["-lfc-frobnicate"], &[], "unknown option -lfc-frobnicate"),
        (&[], &[("LFC_INTERVAL", "soon")], "LFC_INTERVAL"),
        (&["x", "2"], &[("HOSTS", "a b")], "argv[1] must be the rank"),
    ];
    one_line_errors(&prog, &cases);
}

/// Misuse of LFC's calls (`lfc_misuse.c`, one case a run, on 2 ranks): each stops
/// every rank with one line naming the call and what was wrong, exit status 1, no
/// panic and no hang; a packet to oneself and an extra `lfc_intr_enable` go on.
#[test]
fn lfc_misuse_is_one_line_naming_the_call() {
    let prog = program("lfc_misuse");
    let _g = serial();
    let fatal: [(&str, &str); 12] = [
        ("before_init", "lfc_poll: called before lfc_init"),
        (
            "group_after_start",
            "lfc_group_create: groups must be created before lfc_start",
        ),
        ("bogus_launch", "is not an LFC packet"),
        (
            "too_big",
            "lfc_ucast_launch: size larger than lfc_packet_size()",
        ),
        (
            "bad_dest",
            "lfc_ucast_launch: destination instance not in its group",
        ),
        ("bad_group", "lfc_mcast_launch: unknown destination group"),
        ("neg_group", "lfc_mcast_launch: no group -3"),
        (
            "launch_twice",
            "lfc_ucast_launch: packet not from lfc_send_alloc, or launched already",
        ),
        ("bogus_free", "lfc_packet_free: 0x1234 is not an LFC packet"),
        ("null_free", "lfc_packet_free: 0x0 is not an LFC packet"),
        (
            "free_twice",
            "lfc_packet_free: packet not held by the program (freed twice?)",
        ),
        ("exit_in_upcall", "lfc_exit: not allowed inside lfc_upcall"),
    ];
    for (case, line) in fatal {
        let o = launch("2", "shm", &prog, &[case]);
        let t = text(&o);
        assert!(!o.status.success(), "{case} went on:\n{t}");
        assert!(!t.contains("panick"), "{case}:\n{t}");
        for r in 0..2 {
            let said: Vec<&str> = t
                .lines()
                .filter(|l| l.starts_with(&format!("[{r}] ")))
                .collect();
            assert_eq!(said.len(), 1, "{case}, rank {r}:\n{t}");
            assert!(said[0].contains(line), "{case}, rank {r}:\n{t}");
            assert!(
                t.contains(&format!("rank {r} failed (exit code 1)")),
                "{case}:\n{t}"
            );
        }
    }
    for case in ["self_dest", "extra_enable"] {
        let o = launch("2", "shm", &prog, &[case]);
        let t = text(&o);
        assert!(o.status.success(), "{case}:\n{t}");
        for r in 0..2 {
            assert!(
                t.contains(&format!("[{r}] rank {r}: {case} went on")),
                "{t}"
            );
        }
    }
}

/// Processes with nothing to do call `lfc_exit` and return 0 while others still
/// work (`lfc_leave.c`; the guide's latency program on 4 processes, whose 2 and 3
/// only start and exit): the leavers' goodbyes keep their silence from being taken
/// for deaths, so every process exits 0, on both fabrics and under `mpiexec`. A
/// packet to a process that left stops the sender with one line naming the call.
#[test]
fn lfc_processes_that_leave_early_are_not_taken_for_dead() {
    let prog = program("lfc_leave");
    let latency = seed_program("latency");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("4", fabric, &prog, &[]);
        let t = text(&o);
        assert!(o.status.success(), "{fabric}:\n{t}");
        for r in 0..2 {
            assert!(t.contains(&format!("lfc_leave ok: process {r}")), "{t}");
        }
        assert!(!t.contains("died"), "{fabric}:\n{t}");
        let o = launch("4", fabric, &latency, &["-nsend", "3000"]);
        let t = text(&o);
        assert!(o.status.success(), "latency on 4, {fabric}:\n{t}");
        assert_eq!(t.matches("polling 1 latency").count(), 1, "{t}");
    }
    let o = mpiexec("5", "udp", &prog);
    let t = text(&o);
    assert!(o.status.success(), "mpiexec:\n{t}");
    let o = launch("4", "shm", &prog, &["send_to_left"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("[0] volley: lfc_ucast_launch: process 2 has left (it called lfc_exit)"),
        "{t}"
    );
    assert!(!t.contains("was taken"), "{t}");
}

/// Multicast trees, broadcast and fetch-and-add through a relay that drops 10% of
/// the datagrams and duplicates and reorders others: every packet still reaches
/// every member exactly once and in order (the program checks), every value once.
#[test]
fn lfc_over_a_lossy_udp_relay() {
    let prog = program("lfc_groups");
    let _g = serial();
    for (n, tree, seed) in [(4usize, "binomial", 0x1fc1u64), (3, "chain", 0x1fc2)] {
        let real: Vec<_> = (0..n).map(|_| free_port()).collect();
        let relay = Relay::start(real.clone(), seed);
        let list = |v: &[std::net::SocketAddr]| {
            v.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let (peers, binds) = (list(&relay.relay_addrs), list(&real));
        let o = Command::new(VOLLEY)
            .args([
                "run",
                "-n",
                &n.to_string(),
                "--fabric",
                "udp",
                "--timeout",
                "120",
                "--",
            ])
            .arg(&prog)
            .args(["-lfc-tree", tree])
            .env("VOLLEY_UDP_PEERS", &peers)
            .env("VOLLEY_UDP_BIND", &binds)
            .output()
            .unwrap();
        let t = text(&o);
        assert!(
            o.status.success(),
            "{n} ranks, {tree}, relay seed {seed:#x}:\n{t}"
        );
        assert!(t.contains(&format!("lfc_groups ok: {n} processes")), "{t}");
        let d = relay.dropped.load(Ordering::Relaxed);
        assert!(d > 100, "the relay must have dropped datagrams: {d}");
    }
}

#[test]
fn cheetah_put_get_ainvoke_ring_on_both_fabrics() {
    let prog = program("cheetah_ring");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        // Started by hand with -np, the program launches its own job.
        let o = Command::new("timeout")
            .arg("120")
            .arg(&prog)
            .args(["-np", "3"])
            .env("VOLLEY_FABRIC", fabric)
            .output()
            .expect("runs");
        let t = text(&o);
        assert!(o.status.success(), "-np 3 {fabric}:\n{t}");
        for c in 0..3 {
            assert!(t.contains(&format!("context {c} of 3: put ring ok")), "{t}");
            assert!(t.contains(&format!("context {c}: get 16 MiB ok")), "{t}");
            assert!(t.contains(&format!("context {c}: done")), "{t}");
        }
        assert!(t.contains("200 ping-pongs, handler put ok"), "{t}");
    }
    // Under a launcher, and under mpiexec (where -np must agree with it).
    let o = launch("4", "shm", &prog, &["-np", "4"]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("context 3: done"), "{t}");
    let o = mpiexec("2", "udp", &prog);
    let t = text(&o);
    assert!(o.status.success() && t.contains("handler put ok"), "{t}");
}

/// A C put ping-pong with remote bells (`cheetah_pingpong.c`, 20,000 round trips),
/// each put checked where it lands, by direct copy and through the fabric. Through
/// the fabric a reply comes well within a microsecond, so a waiting
/// `cheetah_core_wait` should keep polling rather than give the processor away:
/// fewer `sched_yield`s than half the round trips (when each empty round yielded,
/// each context counted more than one a round trip). Counts, not times: a context
/// kept waiting by the scheduler yields a few thousand times at most.
#[test]
fn cheetah_waits_poll_rather_than_yield_while_a_reply_is_near() {
    let prog = program("cheetah_pingpong");
    let _g = serial();
    let rounds = 20_000;
    for direct in ["0", "1"] {
        let env = [
            ("VOLLEY_CHEETAH_DIRECT", direct),
            ("VOLLEY_CHEETAH_STATS", "1"),
        ];
        let o = launch_env("2", "shm", "120", &prog, &[&rounds.to_string()], &env);
        let t = text(&o);
        assert!(o.status.success(), "direct={direct}:\n{t}");
        for c in 0..2 {
            assert!(t.contains(&format!("context {c}: pingpong ok")), "{t}");
        }
        if direct == "1" {
            continue;
        }
        let yields: Vec<u64> = t
            .lines()
            .filter_map(|l| l.split("gave the processor away ").nth(1))
            .filter_map(|r| r.split(' ').next()?.parse::<u64>().ok())
            .collect();
        assert_eq!(yields.len(), 2, "{t}");
        for y in yields {
            assert!(y < rounds / 2, "{y} yields in {rounds} round trips:\n{t}");
        }
    }
}

/// A program that puts into and gets from peers' static variables by their own
/// addresses (`&in` here names `in` there, as where Cheetah ran): the contexts'
/// executables are loaded at different addresses, yet every put, get and remote
/// bell lands on the same variable, copied directly and through the fabric.
#[test]
fn cheetah_static_variables_name_the_same_variable_in_every_context() {
    let prog = program("cheetah_statics");
    let _g = serial();
    for (fabric, direct) in [("shm", "1"), ("udp", "1"), ("shm", "0"), ("udp", "0")] {
        let env = [
            ("VOLLEY_CHEETAH_DIRECT", direct),
            ("VOLLEY_CHEETAH_STATS", "1"),
        ];
        let o = launch_env("3", fabric, "60", &prog, &[], &env);
        let t = text(&o);
        let at = format!("{fabric}, direct copies {direct}");
        assert!(o.status.success(), "{at}: {t}");
        for c in 0..3 {
            let left = (c + 2) % 3;
            assert!(
                t.contains(&format!("[{c}] context {c}: put from {left} ok")),
                "{at}: {t}"
            );
            assert!(
                t.contains(&format!("[{c}] context {c}: get from {left} ok")),
                "{at}: {t}"
            );
        }
        assert!(
            t.contains("[0] context 0: counter rung 3 times"),
            "{at}: {t}"
        );
        // The copies went the way the setting says; the library's own invocations
        // are not counted as the program's.
        let on = if direct == "1" {
            "on (puts 1,"
        } else {
            "off (puts 0,"
        };
        for c in 0..3 {
            let line = t
                .lines()
                .find(|l| l.starts_with(&format!("[{c}] volley: cheetah: context {c}: ")))
                .unwrap_or_else(|| panic!("{at}: no counters of {c}: {t}"));
            assert!(line.contains(&format!("direct copies {on}")), "{at}: {t}");
            assert!(line.contains("ainvokes 0, handlers 0;"), "{at}: {t}");
        }
    }
    // The library's own tag is not the program's (a job of one each: nothing
    // else can end it first).
    for (op, call) in [("put", "register"), ("get", "ainvoke")] {
        let o = launch("1", "shm", &program("cheetah_hostile"), &[op, "imagetag"]);
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        assert!(!t.contains("was taken"), "{t}");
        assert!(
            t.contains(&format!(
                "[0] volley: cheetah_core_{call}: tag -2147483648 is the library's own\n"
            )),
            "{t}"
        );
    }
}

/// Cheetah contexts that compute for 2 s between puts and gets through the fabric,
/// under a 1 s peer timeout, each owing the other an ack meanwhile: their beacons
/// keep both alive (without them each takes the other for dead), on both fabrics.
#[test]
fn cheetah_contexts_that_compute_past_the_peer_timeout_are_not_taken_for_dead() {
    let prog = program("cheetah_compute");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let env = [("VOLLEY_CHEETAH_DIRECT", "0"), ("VOLLEY_PEER_TIMEOUT", "1")];
        let o = launch_env("2", fabric, "60", &prog, &["2000"], &env);
        let t = text(&o);
        assert!(o.status.success(), "{fabric}: {t}");
        assert!(
            t.contains("[0] context 0: answer came after context 1 computed 2000 ms"),
            "{fabric}: {t}"
        );
        for c in 0..2 {
            assert!(
                t.contains(&format!("[{c}] context {c}: nobody was taken for dead")),
                "{fabric}: {t}"
            );
        }
    }
}

#[test]
fn cheetah_puts_and_gets_complete_while_the_target_never_polls() {
    let prog = program("cheetah_onesided");
    let _g = serial();
    // On shm the target publishes in the region; on udp in a memfd page of its own.
    for fabric in ["shm", "udp"] {
        let env = [("VOLLEY_CHEETAH_STATS", "1")];
        let o = launch_env("2", fabric, "60", &prog, &[], &env);
        let t = text(&o);
        assert!(o.status.success(), "{fabric}: {t}");
        assert!(
            t.contains("[0] 16 puts and a get done while context 1 never polled"),
            "{fabric}: {t}"
        );
        assert!(
            t.contains("[1] data in place before any poll"),
            "{fabric}: {t}"
        );
        assert!(t.contains("[1] remote bells rung: 16"), "{fabric}: {t}");
        assert!(
            t.contains("[0] volley: cheetah: context 0: direct copies on (puts 17, gets 1, 2097156 bytes, 0 refused;"),
            "{fabric}: {t}"
        );
    }
    // Through the fabric the same program waits for polls that never come: the
    // test above can fail.
    let o = Command::new(VOLLEY)
        .args(["run", "-n", "2", "--fabric", "shm", "--timeout", "4", "--"])
        .arg(&prog)
        .env("VOLLEY_CHEETAH_DIRECT", "0")
        .output()
        .expect("volley runs");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(!t.contains("never polled"), "{t}");
    assert!(t.contains("timeout after 4s"), "{t}");
    let o = Command::new(VOLLEY)
        .args(["run", "-n", "2", "--fabric", "shm", "--timeout", "20", "--"])
        .arg(&prog)
        .env("VOLLEY_CHEETAH_DIRECT", "yes")
        .output()
        .expect("volley runs");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    // Said once, by the launcher, before any rank starts.
    assert_eq!(
        t,
        "volley run: VOLLEY_CHEETAH_DIRECT=\"yes\": expected 0 (off) or 1 (on)\n",
    );
    // A rank started by another launcher says it itself.
    let o = Command::new(&prog)
        .env("VOLLEY_CHEETAH_DIRECT", "yes")
        .env("VOLLEY_RANK", "0")
        .env("VOLLEY_SIZE", "1")
        .env("VOLLEY_JOB", "0x77")
        .env("VOLLEY_FABRIC", "shm")
        .output()
        .expect("the program runs");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("volley: VOLLEY_CHEETAH_DIRECT=\"yes\": expected 0 (off) or 1 (on)\n"),
        "{t}"
    );
}

#[test]
fn cheetah_falls_back_to_the_fabric_in_one_line_where_copies_are_not_permitted() {
    let prog = program("cheetah_ring");
    let _g = serial();
    // Non-dumpable processes, and no CAP_SYS_PTRACE even for root: the kernel
    // refuses process_vm_readv between them.
    let o = Command::new("setpriv")
        .args([
            "--bounding-set=-sys_ptrace",
            "--inh-caps=-sys_ptrace",
            VOLLEY,
        ])
        .args(["run", "-n", "3", "--fabric", "shm", "--timeout", "60", "--"])
        .arg(&prog)
        .arg("nodump")
        .env("VOLLEY_CHEETAH_STATS", "1")
        .output()
        .expect("setpriv runs");
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for c in 0..3 {
        assert!(t.contains(&format!("context {c}: done")), "{t}");
        let line = t
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "[{c}] volley: cheetah: no direct copies to context "
                ))
            })
            .unwrap_or_else(|| panic!("no notice from context {c}:\n{t}"));
        assert!(
            line.contains("(process_vm_readv: Operation not permitted")
                && line.ends_with("its puts and gets go through the fabric, served at its polls"),
            "{t}"
        );
        assert!(
            t.contains(&format!("[{c}] volley: cheetah: context {c}: direct copies on (puts 0, gets 0, 0 bytes, 0 refused;")),
            "{t}"
        );
        assert_eq!(
            t.matches(&format!("[{c}] volley: cheetah: no direct copies"))
                .count(),
            1,
            "one line per process:\n{t}"
        );
    }
    assert!(!t.contains("panicked"), "{t}");
}

/// An active message invoked with a NULL buffer and a length stops the caller with
/// one line naming the call; it is never sent as an empty invocation.
#[test]
fn cheetah_a_null_invocation_buffer_with_a_length_is_one_line() {
    let prog = program("cheetah_hostile");
    let _g = serial();
    let o = launch("2", "shm", &prog, &["put", "nullinvoke"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("[0] volley: cheetah_core_ainvoke: a NULL buffer of 8 bytes"),
        "{t}"
    );
    assert!(!t.contains("[0] context 0: null invocation passed"), "{t}");
    assert!(!t.contains("panicked"), "{t}");
}

#[test]
fn cheetah_hostile_addresses_are_refused_and_the_target_unharmed() {
    let prog = program("cheetah_hostile");
    let _g = serial();
    for (op, mode, fabric) in [
        ("put", "hidden", "shm"),
        ("get", "hidden", "udp"),
        ("get", "hidden", "shm"),
        ("put", "text", "shm"),
        ("put", "unmapped", "udp"),
        ("get", "unmapped", "shm"),
    ] {
        let o = launch("2", fabric, &prog, &[op, mode]);
        let t = text(&o);
        assert!(
            !o.status.success(),
            "{op} {mode}: the attacker must fail:\n{t}"
        );
        assert!(t.contains("[0] allowed put done"), "{op} {mode}:\n{t}");
        assert!(
            t.contains("refused an address of a put or get"),
            "{op} {mode}:\n{t}"
        );
        assert!(!t.contains("hostile operation completed"), "{t}");
        assert!(
            t.contains("[1] target unharmed: allowed"),
            "{op} {mode}:\n{t}"
        );
        assert!(!t.contains("panicked"), "{t}");
    }
}

#[test]
fn cheetah_bad_np_is_one_line() {
    let prog = program("cheetah_ring");
    let _g = serial();
    let cases: [Case; 3] = [
        (&["-np", "zero"], &[], "-np \"zero\""),
        (&["-np"], &[], "-np needs a number"),
        (
            &["-np", "3"],
            &[
                ("VOLLEY_RANK", "0"),
                ("VOLLEY_SIZE", "2"),
                ("VOLLEY_JOB", "0x1234"),
            ],
            "-np 3, but the job was started with 2 contexts",
        ),
    ];
    one_line_errors(&prog, &cases);
}

/// QNIX (`qnix_test.c`): contexts and tags across five processes with short and
/// long sends (page tables where the kernel gives physical addresses, the pool
/// otherwise), early messages, broadcast, multicast to three, join_group and
/// barriers, misuse; on both fabrics, under both launchers.
#[test]
fn qnix_contexts_tags_broadcast_multicast_groups() {
    let prog = program("qnix_test");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("5", fabric, &prog, &[]);
        let t = text(&o);
        assert!(o.status.success(), "volley run {fabric}:\n{t}");
        assert_eq!(t.matches("qnix ok").count(), 5, "{fabric}:\n{t}");
        assert!(t.contains("translate: "), "{fabric}:\n{t}");
    }
    let o = mpiexec("5", "shm", &prog);
    let t = text(&o);
    assert!(o.status.success(), "mpiexec:\n{t}");
    assert_eq!(t.matches("qnix ok").count(), 5, "mpiexec:\n{t}");
}

/// Two applications (AI 7 and 9, process ids swapped) in one job, using the same
/// tags: each process hears only its own application, and cannot reach the other.
#[test]
fn qnix_two_applications_on_one_host_are_apart() {
    let prog = program("qnix_test");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("4", fabric, &prog, &["apps"]);
        let t = text(&o);
        assert!(o.status.success(), "{fabric}:\n{t}");
        for (ai, pi) in [(7, 0), (7, 1), (9, 0), (9, 1)] {
            assert!(
                t.contains(&format!("apps ok: application {ai} process {pi}")),
                "{fabric}: {ai}:{pi}\n{t}"
            );
        }
    }
}

/// Started by hand, a QNIX program is a job of one: asking for two processes is
/// one line saying how to start the job, and qx_init returns NULL.
#[test]
fn qnix_group_larger_than_the_job_is_one_line() {
    let prog = program("qnix_test");
    let _g = serial();
    let o = Command::new(&prog)
        .arg("alone")
        .env_remove("VOLLEY_RANK")
        .env_remove("VOLLEY_SIZE")
        .output()
        .expect("runs");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("volley run -n 2"), "{t}");
    assert!(t.contains("qx_init: group size disagrees"), "{t}");
    assert!(!t.contains("panicked"), "{t}");
}

/// The library's NIC thread moves a 64 KB message (a rendezvous) while both
/// processes only watch their doorbells in the HPS, calling nothing, on both
/// fabrics. With the thread off the same program sees no progress (the test can
/// fail), and a bad setting is one line.
#[test]
fn qnix_doorbells_ring_while_the_program_calls_nothing() {
    let prog = program("qnix_test");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("2", fabric, &prog, &["spin"]);
        let t = text(&o);
        assert!(o.status.success(), "{fabric}:\n{t}");
        assert_eq!(t.matches("spin ok").count(), 2, "{fabric}:\n{t}");
    }
    let run = |value: &str| {
        Command::new(VOLLEY)
            .args(["run", "-n", "2", "--fabric", "shm", "--timeout", "30", "--"])
            .arg(&prog)
            .arg("spin")
            .env("VOLLEY_QNIX_NIC", value)
            .output()
            .expect("volley runs")
    };
    let o = run("0");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("spin: no progress in 5 s"), "{t}");
    let o = run("fast");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    // Said once, by the launcher, before any rank starts.
    assert_eq!(
        t,
        "volley run: VOLLEY_QNIX_NIC=\"fast\": expected 0 (off) or 1 (on)\n",
    );
    // A rank started by another launcher says it itself.
    let o = Command::new(&prog)
        .arg("spin")
        .env("VOLLEY_QNIX_NIC", "fast")
        .env("VOLLEY_RANK", "0")
        .env("VOLLEY_SIZE", "1")
        .env("VOLLEY_JOB", "0x78")
        .env("VOLLEY_FABRIC", "shm")
        .output()
        .expect("the program runs");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("volley: qx_init: VOLLEY_QNIX_NIC=\"fast\": expected 0 (off) or 1 (on)\n"),
        "{t}"
    );
    assert!(!t.contains("panicked"), "{t}");
}

/// Another user's process that names a page like a Volley process's (same job,
/// same node, a table valid in form) is never taken for the peer, although root
/// can read every process's map: the puts land in the real target, on `udp`.
#[test]
fn cheetah_never_takes_another_users_page_for_a_peer() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("not root: no other user to run the forger as (CI runs as root)");
        return;
    }
    let forger = program("forged_page");
    let prog = program("cheetah_onesided");
    let _g = serial();
    // Where user nobody can run it.
    let dir = std::env::temp_dir().join(format!("volley-forger-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join("forged_page");
    std::fs::copy(&forger, &copy).unwrap();
    let job = format!(
        "0x{:x}",
        0x7e57_0000_0000u64 + u64::from(std::process::id())
    );
    let mut f = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&copy)
        .args([job.as_str(), "1", "60"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv runs");
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(f.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("ready"), "forger: {line}");
    let o = Command::new(VOLLEY)
        .args(["run", "-n", "2", "--fabric", "udp", "--timeout", "60"])
        .args(["--job", job.as_str(), "--"])
        .arg(&prog)
        .env("VOLLEY_CHEETAH_STATS", "1")
        .output()
        .expect("volley runs");
    let _ = f.kill();
    let _ = f.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("[1] data in place before any poll"), "{t}");
    assert!(
        t.contains("[0] volley: cheetah: context 0: direct copies on (puts 17, gets 1,"),
        "{t}"
    );
}

/// The sleeps the event-loop programs report ("slept N times"), all ranks'.
fn slept(t: &str) -> u64 {
    t.lines()
        .filter_map(|l| {
            l.split_once("slept ")?
                .1
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The event-loop program (`event_loop.c`): a GAMMA server and three clients, each
/// sleeping in `epoll_wait` on `volley_wakeup_fd` after `volley_arm`, 2,000
/// requests a client, with no wake-up lost (a sleep of 10 s fails the run).
#[test]
fn c_event_loop_sleeps_on_the_wakeup_descriptor() {
    let prog = program("event_loop");
    let _g = serial();
    for fabric in ["shm", "udp"] {
        let o = launch("4", fabric, &prog, &[]);
        let t = text(&o);
        assert!(o.status.success(), "volley run {fabric}:\n{t}");
        assert!(
            t.contains("event_loop ok: served 6000 requests from 3 clients"),
            "{fabric}:\n{t}"
        );
        assert_eq!(t.matches("ok: 2000 answers").count(), 3, "{fabric}:\n{t}");
        // The loops slept: a program that spun would not have armed.
        let slept = slept(&t);
        assert!(slept > 1000, "{fabric}: slept {slept} times:\n{t}");
    }
}

/// LFC, Cheetah core and QNIX programs that sleep in `poll(2)` on
/// `volley_wakeup_fd` while they wait (`lfc_sleep.c`, `cheetah_sleep.c`,
/// `qnix_sleep.c`, 2,000 round trips each, a sleep of 10 s failing the run), on
/// both fabrics; QNIX with its NIC thread on, as by default.
#[test]
fn c_lfc_cheetah_and_qnix_programs_sleep_on_the_wakeup_descriptor() {
    let _g = serial();
    for (name, ok) in [
        ("lfc_sleep", "lfc_sleep ok, 2000 packets"),
        ("cheetah_sleep", "cheetah_sleep ok, 2000 puts"),
        ("qnix_sleep", "qnix_sleep ok, 2000 sends"),
    ] {
        let prog = program(name);
        for fabric in ["shm", "udp"] {
            let o = launch("2", fabric, &prog, &[]);
            let t = text(&o);
            assert!(o.status.success(), "{name} on {fabric}:\n{t}");
            assert_eq!(t.matches(ok).count(), 2, "{name} on {fabric}:\n{t}");
            let slept = slept(&t);
            assert!(slept > 500, "{name} on {fabric}: slept {slept} times:\n{t}");
        }
    }
}

/// `volley install --prefix`: the library under its SONAME with the usual links,
/// the headers and a `volley.pc` for that prefix, such that a GAMMA program built
/// with `pkg-config` alone, against the shared or the static library, runs.
#[test]
fn the_installed_library_builds_and_runs_a_program() {
    let prefix =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let o = Command::new(VOLLEY)
        .args(["install", "--prefix"])
        .arg(&prefix)
        .arg("--from")
        .arg(lib_dir())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let lib = prefix.join("lib");
    let version = env!("CARGO_PKG_VERSION");
    let soname = format!("libvolley.so.0.{}", env!("CARGO_PKG_VERSION_MINOR"));
    let real = format!("libvolley.so.{version}");
    for link in [&soname, "libvolley.so"] {
        assert_eq!(
            std::fs::read_link(lib.join(link)).unwrap(),
            Path::new(&real)
        );
    }
    let dynamic = Command::new("objdump")
        .arg("-p")
        .arg(lib.join(&real))
        .output()
        .unwrap();
    assert!(
        text(&dynamic).contains(&format!("SONAME               {soname}")),
        "{}",
        text(&dynamic)
    );
    for h in [
        "gamma.h",
        "linux/gamma/libgamma.h",
        "lfc.h",
        "cheetah_core.h",
        "qnix.h",
        "volley.h",
    ] {
        assert!(prefix.join("include").join(h).is_file(), "{h}");
    }
    assert!(prefix.join("share/man/man1/volley-run.1").is_file());
    let pc = |args: &[&str]| {
        let o = Command::new("pkg-config")
            .args(args)
            .arg("volley")
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let flags = pc(&["--cflags", "--libs"]);
    assert!(
        flags.contains(&format!("-I{}", prefix.join("include").display())),
        "{flags}"
    );
    let src = repo().join("targets/capi/examples/pingpong.c");
    let shared = prefix.join("pingpong-shared");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cc -O1 {} -o {} {flags}",
            src.display(),
            shared.display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let needed = Command::new("objdump")
        .arg("-p")
        .arg(&shared)
        .output()
        .unwrap();
    assert!(
        text(&needed).contains(&format!("NEEDED               {soname}")),
        "{}",
        text(&needed)
    );
    // The static library, with what `pkg-config --static` adds.
    let statik = prefix.join("pingpong-static");
    let private = pc(&["--static", "--libs-only-l"]).replace("-lvolley", "");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cc -O1 {} -o {} -I{} {} {private}",
            src.display(),
            statik.display(),
            prefix.join("include").display(),
            lib.join("libvolley.a").display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for prog in [&shared, &statik] {
        let o = launch_env(
            "2",
            "shm",
            "60",
            prog,
            &[],
            &[("LD_LIBRARY_PATH", lib.to_str().unwrap())],
        );
        assert!(o.status.success(), "{}: {}", prog.display(), text(&o));
    }
    let _ = std::fs::remove_dir_all(&prefix);
}
