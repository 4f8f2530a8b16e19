//! `gamma_init` and the job's start: by a launcher, or `-GAMMANP N` copies of the
//! program started here; `gamma_exit` and `gamma_abort`.

use super::*;

/// `-GAMMANP N` (or `-GAMMANP=N`) from the command line.
/// How many processes a job asks for: the seed's `num_nodes` (or `-GAMMANP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Processes {
    N(u32),
    /// "Less than or equal to zero": every workstation of the cluster.
    All,
}

/// The processes "all" means for a job this program starts itself: the seed's
/// cluster is the machines of `/etc/gamma.conf`; here it is this machine, one
/// process per processor the program may run on.
pub(super) fn all_processes() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() as u32)
        .min(u16::MAX as u32)
}

pub(super) fn gammanp(args: &[String]) -> Option<Result<Processes, String>> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = if a == "-GAMMANP" {
            it.next().map(String::as_str).unwrap_or("")
        } else if let Some(v) = a.strip_prefix("-GAMMANP=") {
            v
        } else {
            continue;
        };
        // As for `num_nodes`, zero or less means every workstation of the cluster.
        return Some(match v.parse::<i64>() {
            Ok(n) if n <= 0 => Ok(Processes::All),
            Ok(n) if n <= u16::MAX as i64 => Ok(Processes::N(n as u32)),
            _ => Err(format!(
                "gamma_init: -GAMMANP {v:?}: expected a number of processes, up to 65535 \
                 (0: one per processor of this machine)"
            )),
        });
    }
    None
}

/// Whether a launcher or a hosts list gives this process its rank.
pub(super) fn launched() -> bool {
    [
        "VOLLEY_RANK",
        "PMI_RANK",
        "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID",
        "VOLLEY_HOSTS",
    ]
    .iter()
    .any(|k| std::env::var_os(k).is_some())
}

/// Starts `n - 1` more copies of this program (ranks 1..n) for a job of `n`.
pub(super) fn spawn_copies(
    n: u16,
    job: u64,
    fabric: Fabric,
    secret: &Secret,
    args: &[String],
) -> Vec<Child> {
    use std::os::unix::process::CommandExt;
    let mut children = Vec::new();
    for rank in 1..n {
        let mut cmd = Command::new("/proc/self/exe");
        if let Some(a0) = args.first() {
            cmd.arg0(a0);
        }
        cmd.args(args.iter().skip(1))
            .env("VOLLEY_RANK", rank.to_string())
            .env("VOLLEY_SIZE", n.to_string())
            .env("VOLLEY_JOB", format!("{job:#x}"))
            .env("VOLLEY_FABRIC", fabric.name())
            // In the environment, which only this user can read; never in argv.
            .env(volley_hosted::secret::ENV, secret.to_hex());
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // A copy does not outlive the process that started it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => die(&format!("gamma_init: cannot start rank {rank}: {e}")),
        }
    }
    children
}

pub(super) fn init(num_nodes: c_int, args: Vec<String>) -> c_int {
    if INSTANCE.with(|c| c.try_borrow().map_or(true, |i| i.is_some())) {
        eprintln!("volley: gamma_init: already called in this process");
        return code(Error::BadConfig);
    }
    let wanted = match gammanp(&args) {
        Some(Ok(n)) => n,
        Some(Err(msg)) => die(&msg),
        None if num_nodes > 0 => Processes::N(num_nodes as u32),
        None => Processes::All,
    };
    let fabric = Fabric::from_env().unwrap_or_else(|e| die(&format!("gamma_init: {e}")));
    let (boot, children) = if launched() {
        let boot = bootstrap::from_env(None).unwrap_or_else(|e| die(&e.to_string()));
        // The seed: more than there are is the same as all of them.
        if let Processes::N(w) = wanted {
            if w < boot.size as u32 {
                die(&format!(
                    "gamma_init: {w} processes requested (-GAMMANP or num_nodes) but {} started {}",
                    boot.source, boot.size
                ));
            }
        }
        (boot, Vec::new())
    } else {
        let n = match wanted {
            Processes::N(n) => n,
            Processes::All => all_processes(),
        };
        let n = u16::try_from(n).unwrap_or_else(|_| die("gamma_init: at most 65535 processes"));
        let job = launcher::new_job_id();
        let secret = Secret::generate().unwrap_or_else(|e| die(&format!("gamma_init: {e}")));
        let boot = Boot {
            rank: 0,
            size: n,
            job,
            source: Source::Launcher,
            hosts: Vec::new(),
            secret: Some(secret),
            said: None,
        };
        (boot, spawn_copies(n, job, fabric, &secret, &args))
    };
    let g = node::gamma(&boot, fabric, CState::new())
        .unwrap_or_else(|e| die(&format!("gamma_init (rank {}): {e}", boot.rank)));
    IDS.set((
        g.my_par_pid() as c_int,
        g.my_node() as c_int,
        g.how_many_nodes() as c_int,
    ));
    INSTANCE.with(|c| {
        *c.borrow_mut() = Some(Box::new(Instance {
            g,
            handles: Handles::default(),
            children,
        }))
    });
    0
}

/// `gamma_init`: joins (or, started by no launcher, starts) the parallel job.
///
/// # Safety
/// `argv` is null or holds `argc` valid C strings.
#[no_mangle]
pub unsafe extern "C" fn gamma_init(
    num_nodes: c_int,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    let args = unsafe { args_of(argc, argv) };
    guard("gamma_init", E_USAGE, || init(num_nodes, args))
}

pub(super) fn wait_children(children: Vec<Child>) -> c_int {
    let mut rc = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, mut c) in children.into_iter().enumerate() {
        let status = loop {
            match c.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = c.kill();
                    break c.wait().ok();
                }
            }
        };
        if !status.is_some_and(|s| s.success()) {
            eprintln!("volley: gamma_exit: rank {} ended badly: {status:?}", i + 1);
            rc = code(Error::SendFailure);
        }
    }
    rc
}

/// `gamma_exit`: finishes what is in flight (at most 10 s), leaves the job; rank 0 of
/// a job `gamma_init` started waits for the copies it started.
#[no_mangle]
pub extern "C" fn gamma_exit() -> c_int {
    guard("gamma_exit", E_USAGE, || {
        if !CURRENT.get().is_null() || ATOMIC.get() {
            return code(Error::InHandler);
        }
        let inst = INSTANCE.with(|c| c.try_borrow_mut().ok().and_then(|mut i| i.take()));
        let Some(inst) = inst else { return E_USAGE };
        let Instance { g, children, .. } = *inst;
        drop(g.exit());
        IDS.set((-1, -1, -1));
        wait_children(children)
    })
}

/// `gamma_abort`: ends the whole job now (this process exits with status 1; the
/// launcher stops the others).
#[no_mangle]
pub extern "C" fn gamma_abort() {
    let rank = IDS.get().1;
    eprintln!("volley: gamma_abort called by instance {rank}");
    INSTANCE.with(|c| {
        if let Ok(mut i) = c.try_borrow_mut() {
            for ch in i
                .as_mut()
                .map(|i| i.children.iter_mut())
                .into_iter()
                .flatten()
            {
                let _ = ch.kill();
            }
        }
    });
    std::process::exit(1)
}

// ---------------------------------------------------------------------- ports
