//! `volley`: the command of the hosted deployment.
//!
//! With no arguments it runs the main job: `volley demo`, a 4-rank local cluster on
//! the shared-memory fabric. See `volley --help`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use volley_cli::{bench, info, programs};
use volley_hosted::bootstrap::{self, parse_hosts, Boot};
use volley_hosted::launcher::{self, RunOptions, UnikernelRanks};
use volley_hosted::{settings, Fabric, HostError};

#[derive(Parser, Debug)]
#[command(
    name = "volley",
    version,
    about = "Volley cluster messaging: launcher, demo, benchmark and test programs"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The main job: a local cluster (4 ranks on shared memory by default) runs GAMMA
    /// ping-pong, barriers and a broadcast, checks them and prints a latency table.
    Demo {
        /// Number of ranks (1 to 65535).
        #[arg(short = 'n', long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
        ranks: u16,
        /// Fabric: shm (Myrinet-like NIC model on /dev/shm), udp (loopback sockets) or
        /// eth (raw Ethernet: VOLLEY_ETH_IF names each rank's interface). Default:
        /// VOLLEY_FABRIC, else shm.
        #[arg(long, value_enum)]
        fabric: Option<FabricArg>,
    },
    /// Starts N ranks of PROGRAM on this machine, with VOLLEY_RANK, VOLLEY_SIZE,
    /// VOLLEY_JOB and VOLLEY_FABRIC set; forwards their output, each line behind its rank in brackets;
    /// exits non-zero (stopping the rest) when a rank fails or the timeout passes.
    Run {
        /// Number of ranks (1 to 65535).
        #[arg(short = 'n', long, value_parser = clap::value_parser!(u16).range(1..))]
        ranks: u16,
        /// Fabric the ranks should use (sets VOLLEY_FABRIC). Default: VOLLEY_FABRIC,
        /// else shm (udp with --unikernel).
        #[arg(long, value_enum)]
        fabric: Option<FabricArg>,
        /// The last K ranks are unikernel nodes (one QEMU each, the image built if
        /// missing) on the udp fabric, running --unikernel-app.
        #[arg(long, value_name = "K", default_value_t = 0)]
        unikernel: u16,
        /// The application linked in the image the unikernel ranks run, the
        /// counterpart of PROGRAM (mixed, barrier, pingpong, fetchadd, ...).
        #[arg(long, value_name = "APP", default_value = "mixed")]
        unikernel_app: String,
        /// The unikernel ranks' Ethernet card.
        #[arg(long, value_enum, default_value_t = NicArg::Tulip)]
        unikernel_nic: NicArg,
        /// Seconds before the whole job is stopped as failed (0.001 to 1000000).
        #[arg(long, default_value = "600", value_parser = timeout_secs)]
        timeout: Duration,
        /// Seconds the other ranks get to notice a failed rank before they are stopped
        /// (0 to 3600).
        #[arg(long, default_value = "10", value_parser = grace_secs)]
        grace: Duration,
        /// Job id (decimal or 0x-hex); random by default.
        #[arg(long, value_parser = parse_job)]
        job: Option<u64>,
        /// Seconds a rank may stay silent before its peers declare it dead (sets
        /// VOLLEY_PEER_TIMEOUT; 0.1 to 86400, default 30). A dead process on this
        /// machine is noticed at once whatever this says.
        #[arg(long, value_parser = peer_secs)]
        peer_timeout: Option<Duration>,
        /// The program and its arguments, after `--`.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// OSU-style sweep: one-way latency 0 B to 1 MiB, streaming bandwidth, barrier
    /// latency for 2 and 4 ranks; medians and percentiles, each fabric starting with a
    /// reference row (the bare path) measured in the same run, and the ratio to it.
    Bench {
        /// Which fabrics, comma-separated (`eth,udp`).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
        fabric: Vec<BenchFabric>,
        /// CSV (RFC 4180, with a header line) instead of a table.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
        /// One JSON document (machine, notes, rows) instead of a table.
        #[arg(long)]
        json: bool,
        /// Ten times fewer iterations (a smoke run).
        #[arg(long)]
        quick: bool,
        /// Iterations of each small-message latency test (1 to 10000000); larger
        /// messages and the other tests keep their proportion to it.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        iters: Option<u64>,
        /// Also measure MPICH (a bundled MPI ping-pong) and UCX (ucx_perftest) where
        /// installed, in rounds interleaved with Volley's, and print Volley's ratio to
        /// each.
        #[arg(long, conflicts_with = "no_peers")]
        peers: bool,
        /// No peer at all: not even MPICH's collectives beside shm's.
        #[arg(long)]
        no_peers: bool,
        /// Only these parts, comma-separated: pair (the 2-rank latency and
        /// bandwidth tests of every API), collectives (barrier and broadcast).
        #[arg(short = 't', long = "tests", value_enum, value_delimiter = ',')]
        tests: Vec<BenchPart>,
        /// Only these message sizes in bytes, comma-separated (`-s 8,1024,1M`;
        /// K and M are binary): rows of other sizes are dropped, except the
        /// reference rows.
        #[arg(short = 's', long = "sizes", value_delimiter = ',', value_parser = parse_size)]
        sizes: Vec<u64>,
        /// Also draw the run as charts in DIR (created if missing): latency.svg and
        /// bandwidth.svg, by message size on log axes, a line per fabric and test.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
        /// Draw a run saved with `--json` instead of measuring one (with `--plot`).
        #[arg(long, value_name = "FILE", requires = "plot")]
        from: Option<PathBuf>,
    },
    /// What this machine and build offer: the fabrics usable here (and why not),
    /// their limits, the unikernel's image and QEMU, the version, and the VOLLEY_*
    /// variables in effect. `volley info --help` lists every variable.
    Info {
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Shell completions for volley, on standard output
    /// (`volley completions bash > /etc/bash_completion.d/volley`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The manual page (roff), on standard output (`volley man > volley.1`), or
    /// with `--dir` a page per subcommand too, written there.
    Man {
        /// Write volley.1 and volley-SUBCOMMAND.1 into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Installs the C library under a prefix: headers, libvolley.so (with its
    /// SONAME and links), libvolley.a, lib/pkgconfig/volley.pc, this command and
    /// its manual pages.
    Install {
        /// Where (`/usr/local`, `$HOME/.local`).
        #[arg(long, value_name = "DIR")]
        prefix: PathBuf,
        /// Stage the files under this root instead (for a package), as `make
        /// DESTDIR=...` does; volley.pc still names PREFIX.
        #[arg(long, value_name = "DIR")]
        destdir: Option<PathBuf>,
        /// The directory holding libvolley.so and libvolley.a (default: this
        /// command's own, where `cargo build --release -p libvolley -p volley-cli`
        /// puts all three).
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
    /// Runs one program inside a rank (under `volley run`, mpiexec or srun).
    Worker {
        /// What to run.
        #[arg(value_enum)]
        program: Program,
        /// Fabric (default: VOLLEY_FABRIC, else shm).
        #[arg(long, value_enum)]
        fabric: Option<FabricArg>,
        /// Hosts list, comma-separated: the rank is this host's index (UDP peers live there).
        #[arg(long)]
        hosts: Option<String>,
        /// Hosts file, one host per line.
        #[arg(long)]
        hostfile: Option<PathBuf>,
        /// CSV output (bench programs).
        #[arg(long)]
        csv: bool,
        /// Fewer iterations (bench programs).
        #[arg(long)]
        quick: bool,
        /// Iterations of small-message latency tests (bench programs).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        iters: Option<u64>,
        /// Rank 0 appends its rows to this file as JSON lines instead of printing
        /// them (bench programs; what `volley bench` collects).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only these message sizes, comma-separated (bench programs).
        #[arg(long, value_delimiter = ',', value_parser = parse_size)]
        sizes: Vec<u64>,
    },
}

/// A unikernel node's Ethernet card.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum NicArg {
    /// The DEC 21143 (QEMU's `tulip`): starts in milliseconds.
    Tulip,
    /// The Intel 82540EM (QEMU's `e1000`): QEMU holds its reception off for 1 s.
    E1000,
    /// The Intel 82574L (QEMU's `e1000e`).
    E1000e,
}

impl NicArg {
    fn name(self) -> &'static str {
        match self {
            NicArg::Tulip => "tulip",
            NicArg::E1000 => "e1000",
            NicArg::E1000e => "e1000e",
        }
    }
}

/// A fabric on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum FabricArg {
    /// The Myrinet-like NIC model on shared memory (one machine).
    Shm,
    /// UDP sockets (loopback or across machines).
    Udp,
    /// Raw Ethernet frames (VOLLEY_ETH_IF; each rank its own interface).
    Eth,
}

impl From<FabricArg> for Fabric {
    fn from(f: FabricArg) -> Fabric {
        match f {
            FabricArg::Shm => Fabric::Shm,
            FabricArg::Udp => Fabric::Udp,
            FabricArg::Eth => Fabric::Eth,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BenchFabric {
    /// shm and udp.
    All,
    Shm,
    Udp,
    /// On the interfaces VOLLEY_ETH_IF lists, or a veth pair made for the run (root).
    Eth,
}

/// A part of `volley bench`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BenchPart {
    /// The 2-rank latency and bandwidth tests of every API, with the reference rows.
    Pair,
    /// Barrier and broadcast at several rank counts.
    Collectives,
}

/// A size in bytes: `4096`, `4K`, `1M`.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a size in bytes (8, 4K, 1M)"))
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Program {
    /// The main job's work (what `volley demo` runs in each rank).
    Demo,
    /// Ping-pong up to 16 MiB with contents checked, barriers, broadcast.
    Suite,
    /// Two groups (VOLLEY_GROUPS=2,2) sending to each other.
    Intergroup,
    /// What the unikernel's app=mixed does, for jobs of processes and unikernel nodes.
    Mixed,
    /// The last rank kills itself; the others must see SENDFAILURE (exit code 4).
    Victim,
    /// Instance 0 sends VOLLEY_MESSAGES flowctl messages; instance 1 checks each once.
    FlowctlExact,
    /// Instance 0 hands every other instance a task; each computes for
    /// VOLLEY_COMPUTE seconds without calling in, then answers (a master and its
    /// workers).
    Compute,
    /// Joins the fabric and leaves.
    Attach,
    /// Joins, passes one barrier; rank 0 prints when (the start-up benchmark).
    Startup,
    /// Every rank fetch-and-adds rank 0's counter; rank 0 checks the values.
    FetchAdd,
    /// The 2-rank part of `volley bench`.
    BenchPair,
    /// The collective part of `volley bench` (barrier, broadcast).
    BenchCollectives,
    /// Barrier and broadcast over a job across hosts, no reference row (the
    /// benchmark across hosts).
    BenchHosts,
    /// Volley's part of a `volley bench --peers` round.
    BenchPeer,
}

fn timeout_secs(s: &str) -> Result<Duration, String> {
    settings::seconds("--timeout", s, 0.001, 1e6)
}

fn grace_secs(s: &str) -> Result<Duration, String> {
    settings::seconds("--grace", s, 0.0, 3600.0)
}

fn peer_secs(s: &str) -> Result<Duration, String> {
    settings::seconds("--peer-timeout", s, 0.1, 86_400.0)
}

fn parse_job(s: &str) -> Result<u64, String> {
    bootstrap::parse_job(s).ok_or_else(|| format!("{s:?} is not a job id"))
}

fn self_exe() -> String {
    std::env::current_exe().map_or_else(|_| "volley".into(), |p| p.display().to_string())
}

fn launch(ranks: u16, fabric: Fabric, args: &[&str], rank0_only: bool) -> i32 {
    let mut command = vec![self_exe()];
    command.extend(args.iter().map(|s| s.to_string()));
    launcher::run(&RunOptions {
        ranks,
        fabric,
        timeout: Duration::from_secs(900),
        grace: Duration::from_secs(10),
        job: None,
        command,
        env: Vec::new(),
        rank0_only,
        unikernel: None,
        stdin: false,
    })
}

/// Set once standard output's reader has gone (`volley bench | head -2`): what
/// follows is dropped, and the command stops at its next step, cleaning up, where
/// `println!` would panic.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output, unless its reader has gone.
fn out(text: &str) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if o.write_all(text.as_bytes())
        .and_then(|()| o.flush())
        .is_err()
    {
        STDOUT_GONE.store(true, Ordering::Relaxed);
    }
}

/// [`out`] of a line.
macro_rules! outln {
    ($($t:tt)*) => { out(&format!("{}\n", format_args!($($t)*))) };
}

/// Whether standard output is a pipe whose reader has gone: `poll` reports an
/// error on a pipe's writing end with no reader left.
fn stdout_reader_gone() -> bool {
    let mut p = libc::pollfd {
        fd: 1,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLERR != 0
}

/// Watches standard output while a long command runs: once its reader has gone,
/// the job in progress is stopped (as by SIGTERM), so that the command ends soon
/// after `head` has what it wanted.
fn watch_stdout() {
    std::thread::spawn(|| loop {
        if stdout_reader_gone() {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            launcher::request_stop(libc::SIGTERM);
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    });
}

/// Why a command running several jobs should stop now: its output's reader has
/// gone (exit code 141, as a tool killed by SIGPIPE) or a signal asked it to (128
/// plus the signal).
fn must_stop() -> Option<i32> {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return Some(128 + libc::SIGPIPE);
    }
    launcher::stop_requested().map(|s| 128 + s)
}

/// How a worker reports bench rows.
#[derive(Debug, Clone, Default)]
struct RowSink {
    csv: bool,
    out: Option<PathBuf>,
}

fn worker(
    program: Program,
    fabric: Option<Fabric>,
    hosts: Option<Vec<String>>,
    sink: RowSink,
    sweep: bench::Sweep,
) -> Result<i32, HostError> {
    let boot: Boot = bootstrap::from_env(hosts).map_err(|e| HostError::Other(e.to_string()))?;
    bench::progress_from(&boot);
    let fabric = match fabric {
        Some(f) => f,
        None => Fabric::from_env()?,
    };
    let print = |rows: Vec<bench::Row>| -> Result<(), HostError> {
        match &sink.out {
            Some(path) => bench::append_rows(path, &rows)?,
            None if sink.csv => print!("{}", bench::csv(&rows, false)),
            None => rows.iter().for_each(|r| println!("{}", r.line())),
        }
        Ok(())
    };
    match program {
        Program::Demo => programs::demo(&boot, fabric)?,
        Program::Suite => programs::suite(&boot, fabric)?,
        Program::Intergroup => programs::intergroup(&boot, fabric)?,
        Program::Mixed => programs::mixed(&boot, fabric)?,
        Program::Victim => return programs::victim(&boot, fabric),
        Program::FlowctlExact => programs::flowctl_exact(&boot, fabric)?,
        Program::Compute => programs::compute(&boot, fabric)?,
        Program::Attach => programs::attach(&boot, fabric)?,
        Program::Startup => programs::startup(&boot, fabric)?,
        Program::FetchAdd => programs::fetch_add(&boot, fabric)?,
        Program::BenchPair => print(bench::pair(&boot, fabric, sweep)?)?,
        Program::BenchCollectives => print(bench::collectives(&boot, fabric, sweep)?)?,
        Program::BenchHosts => print(bench::across_hosts(&boot, fabric, sweep)?)?,
        Program::BenchPeer => print(bench::peer_round(&boot, fabric, sweep)?)?,
    }
    Ok(0)
}

/// How `volley bench` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Table,
    Csv,
    Json,
}

/// A fresh temporary directory only this user may enter (0700), and in it the empty
/// file (0600) the bench's ranks append their rows to.
fn private_rows_file() -> Result<(tempfile::TempDir, PathBuf), String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = tempfile::Builder::new()
        .prefix("volley-bench-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| format!("cannot create a private directory: {e}"))?;
    let path = dir.path().join("rows.jsonl");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((dir, path))
}

/// What `volley bench` measures besides Volley.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerChoice {
    /// MPICH's collectives beside shm's, where MPICH is installed.
    Default,
    /// `--peers`: also MPICH and UCX in interleaved rounds.
    All,
    /// `--no-peers`.
    None,
}

/// What one `volley bench` run does.
#[derive(Debug, Clone)]
struct BenchPlan<'p> {
    fabrics: Vec<Fabric>,
    format: Format,
    sweep: bench::Sweep,
    peers: PeerChoice,
    plot: Option<&'p Path>,
    pair: bool,
    collectives: bool,
}

/// Whether `dir` can take the charts: made if missing, and a file can be created
/// in it. Checked before the sweep, not after it.
fn check_plot_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--plot {}: {e}", dir.display()))?;
    tempfile::tempfile_in(dir)
        .map(drop)
        .map_err(|e| format!("--plot {}: cannot write there: {e}", dir.display()))
}

/// `volley bench`: runs each part as a local job whose rank 0 appends its rows to a
/// file in a private temporary directory, and prints them as they come (table, CSV)
/// or at the end (JSON). A line on stderr says each step. Ctrl-C, or standard
/// output's reader going away, stops the run after the job in progress; the
/// temporary directory and the veth pair are removed either way.
fn bench_command(plan: &BenchPlan<'_>) -> i32 {
    let BenchPlan {
        ref fabrics,
        format,
        sweep,
        peers,
        plot,
        ..
    } = *plan;
    if let Some(dir) = plot {
        if let Err(e) = check_plot_dir(dir) {
            eprintln!("volley: bench: {e}");
            return 2;
        }
    }
    launcher::catch_stop_signals();
    watch_stdout();
    let (dir, path) = match private_rows_file() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("volley: bench: {e}");
            return 1;
        }
    };
    match format {
        Format::Table => outln!("{}", bench::header()),
        Format::Csv => out(&bench::csv(&[], true)),
        Format::Json => {}
    }
    let keep = |r: &bench::Row| sweep.wants(r.bytes) || r.ratio == Some(1.0);
    let (iters, sizes, out_path) = (
        sweep.iters.map(|n| n.to_string()),
        sweep.sizes.map(|s| s.arg()),
        path.display().to_string(),
    );
    let found = volley_cli::peers::Peers::find(dir.path());
    let mut notes = Vec::new();
    let mut code = 0;
    let mut seen = 0;
    let mut all: Vec<bench::Row> = Vec::new();
    let show = |rows: &[bench::Row]| match format {
        Format::Table => rows.iter().for_each(|r| outln!("{}", r.line())),
        Format::Csv => out(&bench::csv(rows, false)),
        Format::Json => {}
    };
    // The eth fabric needs an interface per rank: those VOLLEY_ETH_IF lists, else a
    // veth pair made for this run (and removed after it).
    let mut _veth = None;
    let mut eth_ifs = usize::MAX;
    if fabrics.contains(&Fabric::Eth) {
        match std::env::var("VOLLEY_ETH_IF") {
            Ok(list) => eth_ifs = list.split(',').count(),
            Err(_) => match VethPair::create() {
                Ok(v) => {
                    // Single-threaded here: the ranks inherit it.
                    std::env::set_var("VOLLEY_ETH_IF", format!("{},{}", v.a, v.b));
                    notes.push(format!(
                        "eth: on a veth pair made for the run ({} and {}, MTU {VETH_MTU}); VOLLEY_ETH_IF picks other interfaces",
                        v.a, v.b
                    ));
                    eth_ifs = 2;
                    _veth = Some(v);
                }
                Err(e) => {
                    eprintln!("volley: bench: eth: {e}");
                    return 1;
                }
            },
        }
    }
    let mut parts: Vec<(u16, &str)> = Vec::new();
    if plan.pair {
        parts.push((2, "bench-pair"));
    }
    if plan.collectives {
        parts.extend(
            bench::collective_ranks()
                .into_iter()
                .map(|r| (r, "bench-collectives")),
        );
    }
    let steps = fabrics.len() * parts.len();
    let mut step = 0;
    for &f in fabrics {
        for &(ranks, prog) in &parts {
            step += 1;
            if f == Fabric::Eth && ranks as usize > eth_ifs {
                notes.push(format!(
                    "eth: {ranks}-rank collectives skipped: VOLLEY_ETH_IF lists {eth_ifs} interfaces"
                ));
                continue;
            }
            let what = if prog == "bench-pair" {
                "latency and bandwidth, every API"
            } else {
                "barrier and broadcast"
            };
            eprintln!(
                "volley bench: step {step} of {steps}: {}, {ranks} ranks, {what}",
                f.name()
            );
            let mut args = vec!["worker", prog, "--out", &out_path];
            if sweep.quick {
                args.push("--quick");
            }
            if let Some(n) = &iters {
                args.extend(["--iters", n]);
            }
            if let Some(s) = &sizes {
                args.extend(["--sizes", s]);
            }
            code = code.max(launch(ranks, f, &args, true));
            if let Some(stop) = must_stop() {
                return stop;
            }
            let rows = match bench::read_rows(&path) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("volley: {e}");
                    return 1;
                }
            };
            let new: Vec<bench::Row> = rows[seen.min(rows.len())..]
                .iter()
                .filter(|r| keep(r))
                .cloned()
                .collect();
            seen = rows.len();
            show(&new);
            all.extend(new.iter().cloned());
            // MPICH's collectives beside Volley's, same run: on one host MPICH
            // always takes its own shared memory, so only beside shm.
            let mpich = prog == "bench-collectives" && f == Fabric::Shm;
            if mpich && peers != PeerChoice::None && found.has_mpich() {
                eprintln!("volley bench: step {step} of {steps}: MPICH's barrier and broadcast, {ranks} ranks");
                match found.mpich_collectives(ranks, bench::collective_iters(sweep)) {
                    Ok(m) => {
                        let mut m: Vec<bench::Row> = m.into_iter().filter(|r| keep(r)).collect();
                        bench::ratios_to_mpich(&new, &mut m);
                        show(&m);
                        all.extend(m);
                    }
                    Err(e) => {
                        eprintln!("volley: bench: MPICH collectives, {ranks} ranks: {e}");
                        notes.push(format!("MPICH collectives, {ranks} ranks: {e}"));
                    }
                }
                if let Some(stop) = must_stop() {
                    return stop;
                }
            }
        }
    }
    if peers == PeerChoice::All {
        eprintln!(
            "volley bench: peers: {} interleaved rounds of Volley, MPICH and UCX",
            sweep.rounds(5)
        );
        let (rows, n, c) = peer_rounds(dir.path(), &found, fabrics, sweep);
        if let Some(stop) = must_stop() {
            return stop;
        }
        code = code.max(c);
        match format {
            Format::Table => {
                outln!("# peers, {} interleaved rounds: figures over the rounds' medians; on a peer's row, ratio = Volley's median over the peer's (Volley's latency: median of the rounds' ratios to the bare path)", sweep.rounds(5));
                rows.iter().for_each(|r| outln!("{}", r.line()));
            }
            Format::Csv => out(&bench::csv(&rows, false)),
            Format::Json => {}
        }
        for m in &n {
            eprintln!("volley: bench --peers: {m}");
        }
        notes.extend(n);
        all.extend(rows);
    } else if peers == PeerChoice::Default && plan.collectives && !found.has_mpich() {
        for m in found.missing.iter().filter(|m| m.starts_with("MPICH")) {
            eprintln!("volley: bench: no MPICH rows: {m}");
            notes.push(m.clone());
        }
    }
    if format == Format::Json {
        outln!("{}", bench::json(&all, &notes));
    }
    if let Some(dir) = plot {
        if !draw(&all, dir) {
            code = code.max(1);
        }
    }
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return 128 + libc::SIGPIPE;
    }
    code
}

/// Draws `rows` into `dir`, saying which files it wrote; false on failure.
fn draw(rows: &[bench::Row], dir: &Path) -> bool {
    match volley_cli::plot::charts(rows, dir) {
        Ok(files) if files.is_empty() => {
            eprintln!("volley: bench: nothing to plot (no row with a size and a figure a log axis can show)");
            true
        }
        Ok(files) => {
            for f in files {
                eprintln!("volley: bench: wrote {}", f.display());
            }
            true
        }
        Err(e) => {
            eprintln!("volley: bench: {e}");
            false
        }
    }
}

/// `volley bench --from FILE --plot DIR`: charts of a run saved with `--json`.
fn plot_saved(from: &Path, dir: &Path) -> u8 {
    let rows = std::fs::read_to_string(from)
        .map_err(|e| HostError::Other(format!("{}: {e}", from.display())))
        .and_then(|t| bench::rows_from_json(&t));
    match rows {
        Ok(rows) if draw(&rows, dir) => 0,
        Ok(_) => 1,
        Err(e) => {
            eprintln!("volley: bench --from: {e}");
            1
        }
    }
}

/// A veth pair made for a benchmark of the eth fabric, deleted when dropped.
/// MTU of the veth pair `volley bench --fabric eth` makes (the kernel's largest).
const VETH_MTU: u32 = 65_535;

struct VethPair {
    a: String,
    b: String,
}

impl VethPair {
    fn create() -> Result<VethPair, String> {
        let id = std::process::id();
        let (a, b) = (format!("vlyb{id}a"), format!("vlyb{id}b"));
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("cannot run ip: {e}"))
                .and_then(|o| {
                    if o.status.success() {
                        Ok(())
                    } else {
                        Err(String::from_utf8_lossy(&o.stderr).trim().to_owned())
                    }
                })
        };
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]).map_err(|e| {
            format!("cannot create a veth pair ({e}): run as root, or set VOLLEY_ETH_IF to two interfaces joined by a link, one per rank")
        })?;
        let v = VethPair { a, b };
        for end in [&v.a, &v.b] {
            // The largest frames a veth carries, as loopback carries the udp fabric's
            // 64 KiB datagrams: the two fabrics are compared at the same frame size.
            ip(&["link", "set", end, "mtu", &VETH_MTU.to_string()])?;
            ip(&["link", "set", end, "up"])?;
        }
        // Carrier comes up a moment after both ends are up.
        for _ in 0..200 {
            let up = [&v.a, &v.b].iter().all(|n| {
                std::fs::read_to_string(format!("/sys/class/net/{n}/operstate"))
                    .is_ok_and(|s| s.trim() == "up")
            });
            if up {
                return Ok(v);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!("the veth pair {} / {} did not come up", v.a, v.b))
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting one end deletes both.
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.a])
            .output();
    }
}

/// `--peers`: rounds of Volley's 8-byte latency and 1 MiB streaming on each fabric,
/// each followed by the peers beside it; per test the median (p90, p99) of the rounds'
/// medians, and on each peer's row Volley's ratio to it. Returns rows, notes (peers
/// missing) and the worst exit code.
fn peer_rounds(
    dir: &std::path::Path,
    found: &volley_cli::peers::Peers,
    fabrics: &[Fabric],
    sweep: bench::Sweep,
) -> (Vec<bench::Row>, Vec<String>, i32) {
    let path = dir.join("peers.jsonl");
    let mut code = 0;
    if let Err(e) = std::fs::File::create(&path) {
        return (Vec::new(), vec![format!("{}: {e}", path.display())], 1);
    }
    let out = path.display().to_string();
    let iters = sweep.iters(20_000).to_string();
    let mut per_round: Vec<bench::Row> = Vec::new();
    for _ in 0..sweep.rounds(5) {
        for &f in fabrics {
            let mut args = vec!["worker", "bench-peer", "--out", &out, "--iters", &iters];
            if sweep.quick {
                args.push("--quick");
            }
            code = code.max(launch(2, f, &args, true));
            if must_stop().is_some() {
                return (Vec::new(), Vec::new(), code);
            }
            per_round.extend(found.round(f.name(), sweep.iters(20_000), sweep.rounds(20)));
        }
    }
    match bench::read_rows(&path) {
        Ok(r) => per_round.extend(r),
        Err(e) => return (Vec::new(), vec![e.to_string()], 1),
    }
    let mut rows = bench::over_rounds(&per_round);
    bench::ratios_to_peers(&mut rows);
    (rows, found.missing.clone(), code)
}

/// The fabric `--fabric` names, else the one `VOLLEY_FABRIC` names, else
/// `default`; a `VOLLEY_FABRIC` that names none is one line on stderr and exit
/// code 2 (as clap's own errors).
fn chosen_fabric(arg: Option<FabricArg>, default: Fabric) -> Result<Fabric, i32> {
    if let Some(f) = arg {
        return Ok(f.into());
    }
    if std::env::var_os("VOLLEY_FABRIC").is_none() {
        return Ok(default);
    }
    Fabric::from_env().map_err(|e| {
        eprintln!("volley: {e}");
        2
    })
}

/// The command line as clap should see it, or one line saying what is wrong:
/// `-np N` (mpiexec's spelling) becomes `-n N` before the program; and before
/// `volley run`'s program an option-like word that is no option of `run` is an
/// unknown option, not the program (`volley run --fabrc shm -- prog`).
fn normalise_args(mut args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let cmd = Cli::command();
    let Some(at) = args
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .map(|i| i + 1)
    else {
        return Ok(args);
    };
    let name = args[at].to_string_lossy().into_owned();
    let Some(sub) = cmd.find_subcommand(&name) else {
        return Ok(args);
    };
    // Only `run` takes a program: elsewhere clap reports unknown options itself.
    let takes_program = sub.get_arguments().any(|a| a.is_trailing_var_arg_set());
    let mut i = at + 1;
    while i < args.len() {
        let a = args[i].to_string_lossy().into_owned();
        if a == "--" {
            break;
        }
        if a == "-np" {
            args[i] = "-n".into();
            i += 2;
            continue;
        }
        if !a.starts_with('-') || a == "-" {
            if takes_program {
                break;
            }
            i += 1;
            continue;
        }
        if !takes_program {
            i += 1;
            continue;
        }
        let unknown = || {
            format!("volley {name}: unknown option '{a}' (options come before the program; `volley {name} --help` lists them)")
        };
        let takes_value = if let Some(long) = a.strip_prefix("--") {
            let (opt, inline) = long
                .split_once('=')
                .map_or((long, false), |(o, _)| (o, true));
            match sub.get_arguments().find(|x| x.get_long() == Some(opt)) {
                Some(x) => !inline && x.get_action().takes_values(),
                None if opt == "help" => false,
                None => return Err(unknown()),
            }
        } else {
            let c = a[1..].chars().next().unwrap_or('-');
            match sub.get_arguments().find(|x| x.get_short() == Some(c)) {
                Some(x) => a.len() == 2 && x.get_action().takes_values(),
                None if c == 'h' => false,
                None => return Err(unknown()),
            }
        };
        i += if takes_value { 2 } else { 1 };
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match normalise_args(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let matches = Cli::command()
        .mut_subcommand("info", |c| c.after_long_help(info::variables_help()))
        .get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let code = match cli.command.unwrap_or(Cmd::Demo {
        ranks: 4,
        fabric: None,
    }) {
        Cmd::Demo { ranks, fabric } => match chosen_fabric(fabric, Fabric::Shm) {
            Ok(f) => launch(ranks, f, &["worker", "demo"], true),
            Err(code) => code,
        },
        Cmd::Run {
            ranks,
            fabric,
            unikernel,
            unikernel_app,
            unikernel_nic,
            timeout,
            grace,
            job,
            peer_timeout,
            command,
        } => {
            let default = if unikernel > 0 {
                Fabric::Udp
            } else {
                Fabric::Shm
            };
            let from_env = fabric.is_none() && std::env::var_os("VOLLEY_FABRIC").is_some();
            let fabric = match chosen_fabric(fabric, default) {
                Ok(f) => f,
                Err(code) => return ExitCode::from(code as u8),
            };
            if unikernel > 0 && fabric != Fabric::Udp && from_env {
                eprintln!(
                    "volley run: --unikernel needs the udp fabric, and VOLLEY_FABRIC says {} (unset it or give --fabric udp)",
                    fabric.name()
                );
                return ExitCode::from(2);
            }
            launcher::run(&RunOptions {
                ranks,
                fabric,
                timeout,
                grace,
                job,
                command,
                env: peer_timeout
                    .map(|d| {
                        (
                            "VOLLEY_PEER_TIMEOUT".to_owned(),
                            d.as_secs_f64().to_string(),
                        )
                    })
                    .into_iter()
                    .collect(),
                rank0_only: false,
                unikernel: (unikernel > 0).then(|| UnikernelRanks {
                    count: unikernel,
                    app: unikernel_app,
                    nic: unikernel_nic.name().into(),
                }),
                stdin: true,
            })
        }
        Cmd::Info { json } => {
            let found = info::gather();
            if json {
                outln!("{}", info::json(&found));
            } else {
                out(&info::text(&found));
            }
            0
        }
        Cmd::Install {
            prefix,
            destdir,
            from,
        } => {
            let from = from.unwrap_or_else(|| {
                std::env::current_exe()
                    .ok()
                    .and_then(|e| e.parent().map(Path::to_path_buf))
                    .unwrap_or_default()
            });
            let mut man = |dir: &Path| clap_mangen::generate_to(Cli::command(), dir);
            match volley_cli::install::install(&prefix, destdir.as_deref(), &from, &mut man) {
                Ok(files) => {
                    for f in files {
                        eprintln!("volley install: {}", f.display());
                    }
                    0
                }
                Err(e) => {
                    eprintln!("volley install: {e}");
                    1
                }
            }
        }
        Cmd::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "volley", &mut buf);
            out(&String::from_utf8_lossy(&buf));
            0
        }
        Cmd::Man { dir } => match dir {
            Some(dir) => match std::fs::create_dir_all(&dir)
                .and_then(|()| clap_mangen::generate_to(Cli::command(), &dir))
            {
                Ok(()) => {
                    eprintln!("volley man: wrote the pages into {}", dir.display());
                    0
                }
                Err(e) => {
                    eprintln!("volley man: {}: {e}", dir.display());
                    1
                }
            },
            None => {
                let mut buf = Vec::new();
                match clap_mangen::Man::new(Cli::command()).render(&mut buf) {
                    Ok(()) => {
                        out(&String::from_utf8_lossy(&buf));
                        0
                    }
                    Err(e) => {
                        eprintln!("volley man: {e}");
                        1
                    }
                }
            }
        },
        Cmd::Bench {
            fabric,
            csv,
            json,
            quick,
            iters,
            peers,
            no_peers,
            tests,
            sizes,
            plot,
            from,
        } => {
            if let (Some(from), Some(dir)) = (&from, &plot) {
                return ExitCode::from(plot_saved(from, dir));
            }
            let mut fabrics: Vec<Fabric> = Vec::new();
            for f in fabric {
                let add: &[Fabric] = match f {
                    BenchFabric::All => &[Fabric::Shm, Fabric::Udp],
                    BenchFabric::Shm => &[Fabric::Shm],
                    BenchFabric::Udp => &[Fabric::Udp],
                    BenchFabric::Eth => &[Fabric::Eth],
                };
                for &a in add {
                    if !fabrics.contains(&a) {
                        fabrics.push(a);
                    }
                }
            }
            let format = match (csv, json) {
                (true, _) => Format::Csv,
                (_, true) => Format::Json,
                _ => Format::Table,
            };
            let Some(sizes) = bench::Sizes::new(&sizes) else {
                eprintln!("volley bench: -s takes at most {} sizes", bench::Sizes::MAX);
                return ExitCode::from(2);
            };
            let sweep = bench::Sweep {
                quick,
                iters: iters.map(|n| n as usize),
                sizes: (!sizes.arg().is_empty()).then_some(sizes),
            };
            let all = tests.is_empty();
            bench_command(&BenchPlan {
                fabrics,
                format,
                sweep,
                peers: match (peers, no_peers) {
                    (true, _) => PeerChoice::All,
                    (_, true) => PeerChoice::None,
                    _ => PeerChoice::Default,
                },
                plot: plot.as_deref(),
                pair: all || tests.contains(&BenchPart::Pair),
                collectives: all || tests.contains(&BenchPart::Collectives),
            })
        }
        Cmd::Worker {
            program,
            fabric,
            hosts,
            hostfile,
            csv,
            quick,
            iters,
            out,
            sizes,
        } => {
            let hosts = match (hosts, hostfile) {
                (Some(h), _) => Some(parse_hosts(&h)),
                (None, Some(f)) => match std::fs::read_to_string(&f) {
                    Ok(t) => Some(parse_hosts(&t)),
                    Err(e) => {
                        eprintln!("volley: cannot read hosts file {}: {e}", f.display());
                        return ExitCode::from(2);
                    }
                },
                (None, None) => None,
            };
            let sweep = bench::Sweep {
                quick,
                iters: iters.map(|n| n as usize),
                sizes: if sizes.is_empty() {
                    None
                } else {
                    match bench::Sizes::new(&sizes) {
                        Some(s) => Some(s),
                        None => {
                            eprintln!("volley worker: --sizes takes at most {}", bench::Sizes::MAX);
                            return ExitCode::from(2);
                        }
                    }
                },
            };
            match worker(
                program,
                fabric.map(Fabric::from),
                hosts,
                RowSink { csv, out },
                sweep,
            ) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("volley: {e}");
                    1
                }
            }
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

#[cfg(test)]
mod tests;
