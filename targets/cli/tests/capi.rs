//! C programs written against GAMMA's headers, compiled with `cc` against libvolley
//! and run under `volley run`, `mpiexec.mpich` and on their own (`-GAMMANP`), on both
//! fabrics. The programs are the ones in `targets/capi/examples/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

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

/// Compiles `targets/capi/examples/<name>.c` once, as a GAMMA user would.
fn program(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("c-{name}"));
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let lib = lib_dir();
        let src = repo().join(format!("targets/capi/examples/{name}.c"));
        let o = Command::new("cc")
            .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(repo().join("targets/capi/include"))
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .arg("-L")
            .arg(&lib)
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
    Command::new(VOLLEY)
        .args(["run", "-n", n, "--fabric", fabric, "--timeout", "120", "--"])
        .arg(prog)
        .args(args)
        .output()
        .expect("volley runs")
}

fn mpiexec(n: &str, fabric: &str, prog: &Path) -> Output {
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
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 3] = [
        (&["-GAMMANP", "lots"], &[], "-GAMMANP \"lots\""),
        (&[], &[("VOLLEY_FABRIC", "carrier-pigeon")], "VOLLEY_FABRIC"),
        (
            &[],
            &[("VOLLEY_RANK", "0"), ("VOLLEY_SIZE", "2")],
            "VOLLEY_JOB is not",
        ),
    ];
    for (args, env, want) in cases {
        let o = Command::new("timeout")
            .arg("60")
            .arg(&prog)
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
