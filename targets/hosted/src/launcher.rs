//! `volley run -n N -- PROGRAM ARGS...`: starts N ranks on this machine.
//!
//! Each rank gets `VOLLEY_RANK`, `VOLLEY_SIZE`, `VOLLEY_JOB` and `VOLLEY_FABRIC`; its
//! output comes back line by line with a `[rank]` prefix. When a rank fails, the others
//! get a grace period to notice and report it (a dead peer is an error at the sender),
//! then they are killed; the launcher exits non-zero. The shared-memory directory of
//! the job is removed at the end whatever happened.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::secret::Secret;
use crate::{shm, Fabric};

/// What `volley run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Ranks.
    pub ranks: u16,
    /// Fabric.
    pub fabric: Fabric,
    /// Give up (and fail) after this long.
    pub timeout: Duration,
    /// After a rank fails, how long the others may take to notice and exit.
    pub grace: Duration,
    /// Job id (random if `None`).
    pub job: Option<u64>,
    /// Program and its arguments.
    pub command: Vec<String>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// Print rank 0's standard output as it is and drop the others' (reports);
    /// otherwise every line gets its `[rank]` prefix.
    pub rank0_only: bool,
}

/// A fresh job id.
pub fn new_job_id() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

fn forward(
    rank: u16,
    from: impl Read + Send + 'static,
    to_stderr: bool,
    plain: Option<bool>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            match plain {
                Some(true) => {
                    let _ = writeln!(std::io::stdout().lock(), "{line}");
                    continue;
                }
                Some(false) => continue,
                None => {}
            }
            if to_stderr {
                let _ = writeln!(std::io::stderr().lock(), "[{rank}] {line}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "[{rank}] {line}");
            }
        }
    })
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "unknown status".into(),
    }
}

/// Runs the job; returns the launcher's exit code.
pub fn run(opts: &RunOptions) -> i32 {
    let Some((program, args)) = opts.command.split_first() else {
        eprintln!("volley run: no program given (volley run -n N -- PROGRAM ARGS...)");
        return 2;
    };
    let job = opts.job.unwrap_or_else(new_job_id);
    // The job secret reaches the ranks in their environment, which only this user can
    // read; never on a command line.
    let secret = match Secret::generate() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("volley run: {e}");
            return 2;
        }
    };
    let mut children: Vec<(u16, Child)> = Vec::new();
    let mut pumps = Vec::new();
    for rank in 0..opts.ranks {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("VOLLEY_RANK", rank.to_string())
            .env("VOLLEY_SIZE", opts.ranks.to_string())
            .env("VOLLEY_JOB", format!("0x{job:016x}"))
            .env("VOLLEY_FABRIC", opts.fabric.name())
            .env(crate::secret::ENV, secret.to_hex())
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match cmd.spawn() {
            Ok(mut child) => {
                let plain = opts.rank0_only.then_some(rank == 0);
                if let Some(o) = child.stdout.take() {
                    pumps.push(forward(rank, o, false, plain));
                }
                if let Some(e) = child.stderr.take() {
                    pumps.push(forward(rank, e, true, None));
                }
                children.push((rank, child));
            }
            Err(e) => {
                eprintln!("volley run: cannot start {program}: {e}");
                for (_, c) in children.iter_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                shm::remove_job_dir(job, Some(&secret));
                return 2;
            }
        }
    }
    let code = supervise(&mut children, opts);
    for p in pumps {
        let _ = p.join();
    }
    shm::remove_job_dir(job, Some(&secret));
    code
}

fn supervise(children: &mut [(u16, Child)], opts: &RunOptions) -> i32 {
    let start = Instant::now();
    let mut done: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut failed: Option<(u16, Instant)> = None;
    let mut code = 0;
    loop {
        for (i, (rank, child)) in children.iter_mut().enumerate() {
            if done[i].is_some() {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                done[i] = Some(status);
                if !status.success() {
                    eprintln!("volley run: rank {rank} failed ({})", describe(status));
                    if failed.is_none() {
                        failed = Some((*rank, Instant::now()));
                        code = status.code().filter(|&c| c != 0).unwrap_or(1);
                    }
                }
            }
        }
        if done.iter().all(Option::is_some) {
            return code;
        }
        let kill_reason = if start.elapsed() > opts.timeout {
            Some(format!("timeout after {:?}", opts.timeout))
        } else {
            match failed {
                Some((rank, at)) if at.elapsed() > opts.grace => {
                    Some(format!("rank {rank} failed {:?} ago", opts.grace))
                }
                _ => None,
            }
        };
        if let Some(reason) = kill_reason {
            eprintln!("volley run: {reason}; stopping the remaining ranks");
            for (i, (_, child)) in children.iter_mut().enumerate() {
                if done[i].is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            return if code == 0 { 124 } else { code };
        }
        thread::sleep(Duration::from_millis(5));
    }
}
