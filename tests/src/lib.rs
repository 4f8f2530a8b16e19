//! The QEMU harness of Volley's integration tests.
//!
//! [`image`] builds the unikernel (once per process); [`Boot`] describes one node;
//! [`run`] boots it under QEMU with its serial console captured, enforces a timeout,
//! kills QEMU whatever happens, and turns the `isa-debug-exit` status into a
//! [`Verdict`]. The accelerator is TCG unless hardware virtualisation is really there
//! (`vmx`/`svm` in `/proc/cpuinfo` and no `kvm_pvm` module, which emulates KVM in
//! software, slower than TCG); the
//! variable `VOLLEY_QEMU_ACCEL` overrides the choice.

use std::io::Read;
use std::path::{Path, PathBuf};

mod doorbell;
pub use doorbell::DoorbellServer;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How a node's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The kernel reported success (QEMU status 33).
    Success,
    /// The kernel reported failure (QEMU status 35).
    Failure,
    /// The timeout passed first; QEMU was killed.
    Timeout,
    /// QEMU ended some other way (its own error, a signal): the status, if any.
    Other(Option<i32>),
}

/// What a node did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The verdict.
    pub verdict: Verdict,
    /// Everything the node wrote on its serial console (and QEMU on stderr).
    pub console: String,
    /// Wall time from start to end.
    pub took: Duration,
    /// Each console line with the time it arrived, from the start of QEMU.
    pub lines: Vec<(Duration, String)>,
}

impl Outcome {
    /// When the first console line containing `needle` arrived, from QEMU's start.
    pub fn when(&self, needle: &str) -> Option<Duration> {
        self.lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
    }

    /// The number after `prefix` on the console (up to a comma or a space); panics,
    /// showing the console, if there is none.
    pub fn count(&self, prefix: &str) -> u64 {
        self.console
            .lines()
            .find_map(|l| {
                l.split(prefix)
                    .nth(1)?
                    .split([',', ' '])
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {prefix:?} in:\n{}", self.console))
    }
}

/// One node to boot.
#[derive(Debug, Clone)]
pub struct Boot {
    /// Kernel command line (`-append`).
    pub cmdline: String,
    /// Give up after this long.
    pub timeout: Duration,
    /// Extra QEMU arguments (devices, netdevs).
    pub extra: Vec<String>,
    /// Attach `isa-debug-exit` at 0xf4 (the kernel's way to report); off only to
    /// test the harness's own timeout.
    pub exit_device: bool,
    /// The file QEMU hands the node as its job key (fw_cfg `opt/volley/key`); `None`
    /// for this process's shared one ([`job_key_file`]).
    pub key_file: Option<PathBuf>,
    /// A command QEMU runs under (`ip netns exec NS`, for a node whose tap device
    /// lives in a network namespace); empty for none.
    pub prefix: Vec<String>,
    /// How long after the others (once the image is built) this node's QEMU starts:
    /// nodes of one job booting seconds apart.
    pub start_after: Duration,
}

impl Boot {
    /// A node with `cmdline` and a 60 s timeout.
    pub fn new(cmdline: &str) -> Boot {
        Boot {
            cmdline: cmdline.to_owned(),
            timeout: Duration::from_secs(60),
            extra: Vec::new(),
            exit_device: true,
            key_file: None,
            prefix: Vec::new(),
            start_after: Duration::ZERO,
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Builds the unikernel image (release) once and returns its path.
pub fn image() -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = repo_root().join("unikernel");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // Run inside unikernel/ so its .cargo/config.toml (target, static relocation) applies.
        let out = Command::new(cargo)
            .current_dir(&dir)
            .args(["build", "--release"])
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building the unikernel failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir.join("target/x86_64-unknown-none/release/volley-unikernel")
    })
}

/// The accelerator to use: `VOLLEY_QEMU_ACCEL`, else KVM on real hardware
/// virtualisation, else TCG.
pub fn accel() -> String {
    if let Ok(a) = std::env::var("VOLLEY_QEMU_ACCEL") {
        return a;
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let hw = cpuinfo.split_whitespace().any(|w| w == "vmx" || w == "svm");
    let pvm = Path::new("/sys/module/kvm_pvm").exists();
    let kvm = Path::new("/dev/kvm").exists();
    if hw && kvm && !pvm {
        "kvm".into()
    } else {
        "tcg".into()
    }
}

/// The QEMU command line for a node (without starting it).
pub fn command(boot: &Boot) -> Command {
    let mut c = match boot.prefix.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg("qemu-system-x86_64");
            c
        }
        None => Command::new("qemu-system-x86_64"),
    };
    c.args([
        "-machine",
        "pc",
        "-bios",
        "/usr/share/qemu/qboot.rom",
        "-accel",
        &accel(),
    ])
    .args([
        "-m",
        "128M",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
    ]);
    if boot.exit_device {
        c.args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"]);
    }
    // The job key reaches the node as a file, never on the command line.
    let key = boot
        .key_file
        .clone()
        .unwrap_or_else(|| job_key_file().to_path_buf());
    c.arg("-fw_cfg")
        .arg(format!("name=opt/volley/key,file={}", key.display()));
    c.arg("-kernel")
        .arg(image())
        .args(["-append", &boot.cmdline])
        .args(&boot.extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A new key file: 32 random hex digits, mode 0600, in a private (0700) directory of
/// its own under the workspace's `target/` (so `cargo clean` removes it).
pub fn new_key_file() -> PathBuf {
    use std::io::{Read, Write};
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let mut raw = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .expect("random bytes");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let parent = repo_root().join("target").join("volley-qemu-keys");
    std::fs::create_dir_all(&parent).expect("target/volley-qemu-keys");
    let dir = parent.join(hex(&raw[16..]));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .expect("a private directory for the key");
    let path = dir.join("key");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("the key file");
    f.write_all(hex(&raw[..16]).as_bytes())
        .expect("key written");
    path
}

/// This process's job key file, shared by every node it boots (one job).
pub fn job_key_file() -> &'static Path {
    static KEY: OnceLock<PathBuf> = OnceLock::new();
    KEY.get_or_init(new_key_file)
}

/// Kills the child QEMU when dropped, whatever happened.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Boots one node and waits for its verdict.
pub fn run(boot: &Boot) -> Outcome {
    // Build first: the node's timeout is for the node, not for compiling its image.
    image();
    std::thread::sleep(boot.start_after);
    let start = Instant::now();
    let mut child = Guard(
        command(boot)
            .spawn()
            .expect("qemu-system-x86_64 is installed (.ci/run installs it)"),
    );
    let mut out = child.0.stdout.take().expect("piped");
    let mut err = child.0.stderr.take().expect("piped");
    // Console lines are timestamped as they arrive (boot-time benchmarks); stderr
    // (QEMU's own messages) is appended at the end.
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        let mut console = String::new();
        for line in std::io::BufReader::new(&mut out).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).into_owned();
            console.push_str(&line);
            console.push('\n');
            lines.push((start.elapsed(), line));
        }
        let mut e = Vec::new();
        let _ = err.read_to_end(&mut e);
        console.push_str(&String::from_utf8_lossy(&e));
        (console, lines)
    });
    let verdict = loop {
        match child.0.try_wait() {
            Ok(Some(status)) => {
                break match status.code() {
                    Some(33) => Verdict::Success,
                    Some(35) => Verdict::Failure,
                    c => Verdict::Other(c),
                }
            }
            Ok(None) if start.elapsed() > boot.timeout => {
                let _ = child.0.kill();
                break Verdict::Timeout;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break Verdict::Other(None),
        }
    };
    drop(child);
    let (console, lines) = reader.join().unwrap_or_default();
    Outcome {
        verdict,
        console,
        took: start.elapsed(),
        lines,
    }
}

/// The verdict of the `barrier`-family apps (`collectives`, `irqbarrier`, ...): node 0
/// reports its 20 barriers and every other node the broadcast it got.
pub fn assert_barriers_and_broadcast(out: &[Outcome]) {
    assert!(
        out[0].console.contains("20 barriers ok"),
        "{}",
        out[0].console
    );
    for (i, o) in out.iter().enumerate().skip(1) {
        assert!(
            o.console.contains(&format!("node {i} got the broadcast")),
            "{}",
            o.console
        );
    }
}

/// Boots every node at once and waits for all their verdicts.
pub fn run_all(boots: &[Boot]) -> Vec<Outcome> {
    let handles: Vec<_> = boots
        .iter()
        .cloned()
        .map(|b| std::thread::spawn(move || run(&b)))
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a node's runner panicked"))
        .collect()
}

/// Boots a latency pair (`app` on instances 0 and 1), insists both succeed, and
/// returns instance 0's median in ns (`... median N ns`) and the boot time in ms: from
/// the start of the QEMU processes to the first completed barrier (`first sync`) on
/// both nodes, as the harness saw the console lines arrive.
pub fn latency_pair(app: &str, boots: &[Boot]) -> (Option<f64>, Option<f64>) {
    let out = run_all(boots);
    for (i, o) in out.iter().enumerate() {
        assert_eq!(
            o.verdict,
            Verdict::Success,
            "{app} node {i}:\n{}",
            o.console
        );
    }
    let find = |prefix: &str, suffix: &str| {
        out[0].console.lines().find_map(|l| {
            l.split(prefix)
                .nth(1)?
                .strip_suffix(suffix)?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    let boot = out
        .iter()
        .map(|o| {
            o.when("first sync after ")
                .map(|t| t.as_secs_f64() * 1000.0)
        })
        .collect::<Option<Vec<f64>>>()
        .map(|v| v.into_iter().fold(0.0, f64::max));
    (find("median ", " ns"), boot)
}

/// The median of `v` (not empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The MAC address of node `i` in these tests.
pub fn mac(i: usize) -> String {
    format!("52:54:00:56:00:{:02x}", i + 1)
}

/// `macs=` for `n` nodes.
pub fn macs(n: usize) -> String {
    (0..n).map(mac).collect::<Vec<_>>().join(",")
}

/// A base UDP port for this process's test networks (loopback only), distinct per call.
pub fn ports() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    41_000 + (std::process::id() % 300) as u16 * 16 + (n % 16)
}

/// The Ethernet cards a node can have: QEMU's device model names.
pub const E1000: &str = "e1000";
/// DEC 21143, the 3c905-class Fast Ethernet card.
pub const TULIP: &str = "tulip";
/// Intel 82574L, the PCIe member of the e1000 family.
pub const E1000E: &str = "e1000e";

/// QEMU arguments for node `i`'s e1000 on a point-to-point UDP link (`-netdev dgram`)
/// between ports `base` and `base + 1000` on 127.0.0.1: two nodes.
pub fn dgram_nic(i: usize, base: u16) -> Vec<String> {
    dgram_card(i, base, E1000)
}

/// As [`dgram_nic`], with card `model` ([`E1000`] or [`TULIP`]).
pub fn dgram_card(i: usize, base: u16, model: &str) -> Vec<String> {
    let (me, peer) = if i == 0 {
        (base, base + 1000)
    } else {
        (base + 1000, base)
    };
    vec![
        "-netdev".into(),
        format!(
            "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port={me},remote.type=inet,remote.host=127.0.0.1,remote.port={peer}"
        ),
        "-device".into(),
        format!("{model},netdev=n0,mac={},romfile=", mac(i)),
    ]
}

/// QEMU arguments for node `i`'s card `model` ([`E1000`] or [`TULIP`]) on a loopback
/// multicast hub shared by all nodes using the same `port` (every node sees every
/// frame; the card filters by MAC).
pub fn hub_card(i: usize, port: u16, model: &str) -> Vec<String> {
    vec![
        "-netdev".into(),
        format!("socket,id=n0,mcast=230.0.0.1:{port},localaddr=127.0.0.1"),
        "-device".into(),
        format!("{model},netdev=n0,mac={},romfile=", mac(i)),
    ]
}

/// A file of shared memory for QEMU's `ivshmem-plain`, in a private (0700) directory of
/// its own under `/dev/shm` (the temporary directory where there is none), created
/// fresh and zeroed, mode 0600; removed with its directory when dropped. The name is
/// random, so another local user can neither guess it nor plant a link there.
#[derive(Debug)]
pub struct SharedRegion {
    dir: PathBuf,
    path: PathBuf,
    size: u64,
}

impl SharedRegion {
    /// A zeroed region of `size` bytes (QEMU wants a power of two).
    pub fn new(size: u64) -> SharedRegion {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let mut raw = [0u8; 12];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut raw))
            .expect("random bytes");
        let name: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let parent = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = parent.join(format!("volley-qemu-{name}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .expect("a private directory for the shared region");
        let path = dir.join("region");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("the region file");
        f.set_len(size).expect("region sized");
        SharedRegion { dir, path, size }
    }

    /// Writes `bytes` at `offset` (a test planting stale or garbage contents).
    pub fn write_at(&self, offset: u64, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .expect("the region file");
        f.write_all_at(bytes, offset).expect("written");
    }

    /// QEMU arguments that give a node this region as its `ivshmem-plain` BAR2.
    ///
    /// TCG translates a guest's locked read-modify-write (`lock xadd`, `cmpxchg`) into
    /// a host atomic only when the machine could have more than one vCPU; with one it
    /// is a plain load and store, which is atomic inside that VM but not against the
    /// other VMs sharing the region: fetch-and-adds were lost (counter 3956 of 4000).
    /// `maxcpus=2` makes the translation parallel-safe; the node still runs on one.
    pub fn qemu_args(&self) -> Vec<String> {
        vec![
            "-smp".into(),
            "1,maxcpus=2".into(),
            "-object".into(),
            format!(
                "memory-backend-file,id=hm,mem-path={},size={},share=on",
                self.path.display(),
                self.size
            ),
            "-device".into(),
            "ivshmem-plain,memdev=hm".into(),
        ]
    }
}

impl SharedRegion {
    /// An ivshmem server handing this region to `ivshmem-doorbell` devices.
    pub fn doorbell_server(&self) -> DoorbellServer {
        DoorbellServer::new(&self.path, &self.dir, 1)
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A job id for a test cluster: distinct per call and per process, so no node ever
/// joins a region laid out for another run.
pub fn job_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (std::process::id() as u64) << 20 | NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accelerator_can_be_forced() {
        // Only this test touches the variable in this process.
        std::env::set_var("VOLLEY_QEMU_ACCEL", "tcg,thread=single");
        assert_eq!(accel(), "tcg,thread=single");
        std::env::remove_var("VOLLEY_QEMU_ACCEL");
        let a = accel();
        assert!(a == "tcg" || a == "kvm", "{a}");
        if Path::new("/sys/module/kvm_pvm").exists() {
            assert_eq!(a, "tcg", "kvm_pvm is not hardware virtualisation");
        }
    }
}
