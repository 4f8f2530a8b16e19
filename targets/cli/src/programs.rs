//! The programs `volley` runs inside each rank: the demo (the main job), the
//! benchmark, and the multi-process test programs. All are ordinary SPMD GAMMA code.

use std::time::{Duration as StdDuration, Instant as StdInstant};

use volley_core::engine::Error as GammaError;
use volley_core::gamma::{Gamma, Upcall, BROADCAST, GO_BACK};

use volley_core::time::{Duration, Instant};
use volley_hosted::clock::HostClock;

use volley_hosted::bootstrap::Boot;
use volley_hosted::node::{self, HostGamma};
use volley_hosted::{Fabric, HostError};

/// State shared with the handlers of these programs.
#[derive(Debug, Default)]
pub struct State {
    /// Messages handled.
    pub handled: u64,
    /// Errors reported to error handlers (`gamma_errno` values).
    pub errnos: Vec<u8>,
    /// Content checks that failed.
    pub bad: Vec<String>,
    /// When set, every message must be `pattern(src, k, len)` with `k` counted here.
    pub check: bool,
    /// Messages checked, per source instance.
    pub seen: Vec<u64>,
    /// Messages handled, per source instance (checked or not).
    pub from: Vec<u64>,
    /// Lengths of the broadcasts taken on port 3 (`ordered_broadcasts`), in order.
    pub ordered: Vec<usize>,
}

/// Test pattern: byte `i` of message `k` from `src`.
pub fn byte(src: u16, k: u64, i: usize) -> u8 {
    // Every input bit reaches the top byte through the multiply.
    let x = (i as u64)
        .wrapping_add(k << 32)
        .wrapping_add((src as u64) << 52);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// A message full of the test pattern.
pub fn pattern(src: u16, k: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(src, k, i)).collect()
}

fn on_recv(u: &mut Upcall<'_, '_, State>) {
    let src = u.source().node as usize;
    let len = u.len();
    if u.active_port() == 3 {
        // Broadcast k of `ORDERED` must be the k-th to arrive, whole.
        let k = u.state().ordered.len();
        let ok = ORDERED.get(k) == Some(&len)
            && u.data()
                .iter()
                .enumerate()
                .all(|(i, &b)| b == byte(0, 1000 + k as u64, i));
        let st = u.state();
        if !ok {
            st.bad.push(format!(
                "broadcast {k} from {src} ({len} bytes) out of order or wrong"
            ));
        }
        st.ordered.push(len);
    }
    // Only the point-to-point port carries numbered test messages.
    let check = u.state().check && u.active_port() == 1;
    if check {
        let k = u.state().seen.get(src).copied().unwrap_or(0);
        let ok = u
            .data()
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(src as u16, k, i));
        let st = u.state();
        if st.seen.len() <= src {
            st.seen.resize(src + 1, 0);
        }
        st.seen[src] += 1;
        if !ok {
            st.bad.push(format!(
                "message {k} from {src} ({len} bytes) has wrong contents"
            ));
        }
    }
    let st = u.state();
    st.handled += 1;
    if st.from.len() <= src {
        st.from.resize(src + 1, 0);
    }
    st.from[src] += 1;
}

fn on_error(u: &mut Upcall<'_, '_, State>) {
    let e = u.errno().map_or(0, |e| e as u8);
    u.state().errnos.push(e);
}

fn leak(len: usize) -> &'static mut [u8] {
    Vec::leak(vec![0u8; len])
}

fn deadline(g: &HostGamma<State>, secs: u64) -> Instant {
    g.time() + Duration::from_secs(secs)
}

fn fail(what: impl Into<String>) -> HostError {
    HostError::Other(what.into())
}

fn wait1(g: &mut HostGamma<State>, sem: u16, secs: u64) -> Result<(), HostError> {
    let d = deadline(g, secs);
    match g.wait_deadline(sem, 1, d) {
        Ok(0) => Ok(()),
        Ok(n) => Err(fail(format!(
            "{} errors on semaphore {sem}: {:?}",
            -n,
            g.state().errnos
        ))),
        Err(e) => Err(fail(format!("waiting on semaphore {sem}: {e}"))),
    }
}

/// Median and percentiles of samples (sorted in place).
pub fn percentiles(v: &mut [f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        // Ranks that only answer collect no samples.
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.9), at(0.99))
}

/// The cores this process may count on, which [`pin`] spreads ranks over.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins the calling process to one core, so ranks do not share one.
pub fn pin(rank: u16) {
    pin_to(rank as usize % cpus());
}

/// Pins the calling process to core `cpu`. Only a set on the stack and
/// `sched_setaffinity` (async-signal-safe): a child may call it between fork and
/// exec.
pub fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it and
    // sched_setaffinity reads it; failure only leaves the process unpinned.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// One ping-pong round trip of `len` bytes between instances 0 and 1 on port 1;
/// returns the round-trip time in microseconds (measured at instance 0).
fn round_trip(g: &mut HostGamma<State>, data: &[u8], reliable: bool) -> Result<f64, HostError> {
    let send = |g: &mut HostGamma<State>| {
        if reliable {
            g.send_flowctl(1, data)
        } else {
            g.send(1, data)
        }
    };
    if g.my_node() == 0 {
        let t0 = g.time();
        send(g)?;
        wait1(g, 1, 30)?;
        Ok(Gamma::<volley_hosted::HostDevice, HostClock, State>::time_diff(g.time(), t0))
    } else {
        wait1(g, 1, 30)?;
        send(g)?;
        Ok(0.0)
    }
}

fn setup_pair(g: &mut HostGamma<State>, max: usize) -> Result<(), HostError> {
    let me = g.my_node();
    let peer = if me == 0 { 1 } else { 0 };
    let pid = g.my_par_pid();
    if me < 2 {
        g.set_active_port(
            1,
            peer,
            pid,
            1,
            Some(on_recv),
            Some(on_error),
            1,
            GO_BACK,
            Some(leak(max.max(1))),
        )?;
    }
    Ok(())
}

/// Port 2 broadcasts from instance 0 to every other member, semaphore 2.
fn setup_bcast(g: &mut HostGamma<State>, max: usize) -> Result<(), HostError> {
    bcast_port(g, 2, max)
}

/// Port `port` broadcasts from instance 0 to every other member, semaphore `port`.
fn bcast_port(g: &mut HostGamma<State>, port: u16, max: usize) -> Result<(), HostError> {
    let dest = if g.my_node() == 0 { BROADCAST } else { 0 };
    let pid = g.my_par_pid();
    g.set_active_port(
        port,
        dest,
        pid,
        port,
        Some(on_recv),
        Some(on_error),
        port,
        GO_BACK,
        Some(leak(max)),
    )?;
    Ok(())
}

// ------------------------------------------------------------------ suite

/// Instances 0 and 1 exchange message k of each size in turn on port 1: instance 0
/// sends, instance 1 answers with its own (checked by `on_recv`).
fn pingpong_sizes(g: &mut HostGamma<State>, sizes: &[usize]) -> Result<(), HostError> {
    let me = g.my_node();
    if me >= 2 {
        return Ok(());
    }
    for (k, &len) in sizes.iter().enumerate() {
        let data = pattern(me, k as u64, len);
        if me == 0 {
            g.send_flowctl(1, &data)?;
            wait1(g, 1, 60)?;
        } else {
            wait1(g, 1, 60)?;
            g.send_flowctl(1, &data)?;
        }
    }
    Ok(())
}

/// Instance 0 broadcasts `data` on port 2; every other instance checks it arrived.
fn broadcast_checked(g: &mut HostGamma<State>, data: &[u8]) -> Result<(), HostError> {
    if g.my_node() == 0 {
        g.send_flowctl(2, data)?;
    } else {
        wait1(g, 2, 60)?;
        if g.buffer(2).map(|b| &b[..data.len()]) != Some(data) {
            return Err(fail("broadcast arrived with wrong contents"));
        }
    }
    Ok(())
}

/// Broadcasts that go different ways, sent back to back from instance 0 on port 3:
/// short ones by board (`shm`) or down the tree, 600,000 bytes (more than the
/// relays' rings hold) straight from the root to each member. Each member must
/// take them whole and in this order.
const ORDERED: [usize; 6] = [8, 600_000, 8, 3000, 600_000, 100];

fn ordered_broadcasts(g: &mut HostGamma<State>) -> Result<(), HostError> {
    bcast_port(g, 3, 600_000)?;
    g.sync()?;
    for (k, &len) in ORDERED.iter().enumerate() {
        if g.my_node() == 0 {
            g.send_flowctl(3, &pattern(0, 1000 + k as u64, len))?;
        } else {
            wait1(g, 3, 60)?;
        }
    }
    Ok(())
}

/// Ping-pong of sizes up to 16 MiB with every byte checked, barriers and broadcasts
/// (one, then `ORDERED`).
pub fn suite(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    let mut g = node::gamma(
        boot,
        fabric,
        State {
            check: true,
            ..State::default()
        },
    )?;
    let n = g.how_many_nodes();
    let me = g.my_node();
    let sizes = [0usize, 1, 8, 1000, 4096, 65_536, 1 << 20, 16 << 20];
    setup_pair(&mut g, 16 << 20)?;
    setup_bcast(&mut g, 100_000)?;
    g.sync()?;
    pingpong_sizes(&mut g, &sizes)?;
    for _ in 0..20 {
        g.sync()?;
    }
    broadcast_checked(&mut g, &pattern(0, 99, 100_000))?;
    ordered_broadcasts(&mut g)?;
    g.sync()?;
    let st = g.state();
    if !st.bad.is_empty() {
        return Err(fail(format!("content errors: {:?}", st.bad)));
    }
    let bcasts = if me == 0 { 0 } else { 1 + ORDERED.len() as u64 };
    let expect = if me < 2 { sizes.len() as u64 } else { 0 } + bcasts;
    if st.handled != expect {
        return Err(fail(format!(
            "handled {} messages, expected {expect}",
            st.handled
        )));
    }
    if me == 0 {
        println!(
            "suite ok: {n} ranks on {}, ping-pong up to 16 MiB, 20 barriers, broadcasts in order",
            fabric.name()
        );
        print_shm_copies(&g);
    }
    if let volley_hosted::HostDevice::Eth(d) = g.device() {
        println!("rank {me} path: {}", d.path());
    }
    g.exit();
    Ok(())
}

/// Joins the job and passes one barrier; rank 0 then prints the wall-clock time
/// (`startup-done NANOS`, since the epoch): how long start-up takes, counted from
/// when the ranks were started (`benches/hosts_scale.rs`).
pub fn startup(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    let mut g = node::gamma(boot, fabric, State::default())?;
    g.sync()?;
    if g.my_node() == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| fail(e.to_string()))?;
        println!("startup-done {}", t.as_nanos());
    }
    g.exit();
    Ok(())
}

// ------------------------------------------------------------------- mixed

/// What the unikernel's `app=mixed` does, step for step, so that processes and
/// unikernel nodes can share one job: instances 0 and 1 ping-pong 8 B to 1 MiB (every
/// byte checked), then everyone runs 20 barriers and instance 0 broadcasts 4 KiB.
pub fn mixed(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    let mut g = node::gamma(
        boot,
        fabric,
        State {
            check: true,
            ..State::default()
        },
    )?;
    let me = g.my_node();
    let sizes = [8usize, 1000, 65_536, 1 << 20];
    setup_pair(&mut g, 1 << 20)?;
    setup_bcast(&mut g, 4096)?;
    g.sync()?;
    pingpong_sizes(&mut g, &sizes)?;
    for _ in 0..20 {
        g.sync()?;
    }
    g.sync()?;
    broadcast_checked(&mut g, &pattern(0, 7, 4096))?;
    g.sync()?;
    let st = g.state();
    if !st.bad.is_empty() {
        return Err(fail(format!("content errors: {:?}", st.bad)));
    }
    println!(
        "mixed ok: rank {me} of {} on {}: ping-pong, 20 barriers, broadcast",
        g.how_many_nodes(),
        fabric.name()
    );
    g.exit();
    Ok(())
}

// -------------------------------------------------------------- intergroup

/// Two groups (`VOLLEY_GROUPS=2,2`) each run their own SPMD program; instance 0 of
/// each sends to instance 0 of the other through the destination triple.
pub fn intergroup(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    let mut g = node::gamma(boot, fabric, State::default())?;
    let (me, pid) = (g.my_node(), g.my_par_pid());
    let other = if pid == 1 { 2 } else { 1 };
    g.set_active_port(
        3,
        0,
        other,
        3,
        Some(on_recv),
        Some(on_error),
        3,
        GO_BACK,
        Some(leak(64)),
    )?;
    g.sync()?; // a barrier of this group only
    if me == 0 {
        let msg = format!("hello from group {pid}");
        g.send_flowctl(3, msg.as_bytes())?;
        wait1(&mut g, 3, 30)?;
        let got = g
            .buffer(3)
            .map(|b| String::from_utf8_lossy(&b[..18]).into_owned())
            .unwrap_or_default();
        let want = format!("hello from group {other}");
        if got != want {
            return Err(fail(format!("group {pid} got {got:?}, expected {want:?}")));
        }
        println!("group {pid} instance 0: got {got:?}");
    }
    g.sync()?;
    g.exit();
    Ok(())
}

// ------------------------------------------------------------------ victim

/// Rank `VOLLEY_VICTIM` (default: the last) kills itself mid-run; every other rank
/// keeps sending to it (or, with `VOLLEY_VICTIM_MODE=sync`, keeps entering barriers)
/// and must get `SENDFAILURE` (exit code 4, GAMMA's number). With
/// `VOLLEY_VICTIM_MODE=bcast`, see `bcast_past_a_death`.
pub fn victim(boot: &Boot, fabric: Fabric) -> Result<i32, HostError> {
    let victim: u16 = std::env::var("VOLLEY_VICTIM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(boot.size - 1);
    // VOLLEY_VICTIM_MODE=sync: the survivors sit in barriers instead of sending;
    // =wait: they wait for a message from the victim that never comes; =early: the
    // victim dies before its first frame, and the survivors sit in barriers.
    let mode = std::env::var("VOLLEY_VICTIM_MODE").unwrap_or_default();
    let early = mode == "early";
    let in_sync = mode == "sync" || early;
    let mut g = node::gamma(boot, fabric, State::default())?;
    let me = g.my_node();
    let pid = g.my_par_pid();
    if mode == "bcast" {
        bcast_past_a_death(&mut g, victim)?;
        return until_failure(&mut g, "in sync after the broadcasts", &mut |g| g.sync());
    }
    if me == victim && early {
        // SAFETY: raising SIGKILL on ourselves has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    }
    if me == victim {
        // Active, so that `on_recv` counts messages per sender.
        let buf = Some(leak(1 << 16));
        g.set_active_port(4, 0, pid, 4, Some(on_recv), None, 4, GO_BACK, buf)?;
    } else {
        g.set_passive_port(4, victim, pid, 4, 4, GO_BACK, None)?;
    }
    if !early {
        g.sync()?;
    }
    if me == victim {
        // Take a few messages (or barriers), then die without a word.
        if mode == "wait" {
            std::thread::sleep(StdDuration::from_millis(200));
        } else if in_sync {
            for _ in 0..3 {
                g.sync()?;
            }
        } else {
            // Die only once every survivor has sent (so has left the first barrier):
            // a survivor still in it could see the death there, not in its sends.
            let heard_all = |st: &State| {
                (0..boot.size)
                    .filter(|&r| r != victim)
                    .all(|r| st.from.get(r as usize).is_some_and(|&n| n > 0))
            };
            while g.test(4)? < 3 || !heard_all(g.state()) {}
        }
        // SAFETY: raising SIGKILL on ourselves has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    }
    if in_sync {
        return until_failure(&mut g, "in sync", &mut |g| g.sync());
    }
    if mode == "wait" {
        return until_failure(&mut g, &format!("waiting for rank {victim}"), &mut |g| {
            g.wait(4, 1).map(|_| ())
        });
    }
    let data = vec![7u8; 10_000];
    until_failure(&mut g, &format!("sending to rank {victim}"), &mut |g| {
        g.send_flowctl(4, &data).map(|_| ())
    })
}

/// Repeats `step` until it reports SENDFAILURE (exit code 4), or gives up after 60 s.
fn until_failure(
    g: &mut HostGamma<State>,
    what: &str,
    step: &mut dyn FnMut(&mut HostGamma<State>) -> Result<(), GammaError>,
) -> Result<i32, HostError> {
    let start = StdInstant::now();
    let me = g.my_node();
    loop {
        match step(g) {
            Ok(()) => {}
            Err(GammaError::SendFailure) => {
                println!(
                    "rank {me}: SENDFAILURE {what} after {:.2} s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(4);
            }
            Err(e) => return Err(e.into()),
        }
        if start.elapsed() > StdDuration::from_secs(60) {
            return Err(fail("the victim never died"));
        }
    }
}

/// `VOLLEY_VICTIM_MODE=bcast`: instance 0 broadcasts [`PAST_DEATH`] messages of
/// 100,000 bytes (on `shm` two frames each through its board) while the victim,
/// which takes the first, dies without reading the rest. The board fills up behind
/// it, the root finds its process gone and passes it over, and every survivor still
/// gets every broadcast, whole and in order. The victim never returns.
fn bcast_past_a_death(g: &mut HostGamma<State>, victim: u16) -> Result<(), HostError> {
    const LEN: usize = 100_000;
    if victim == 0 {
        return Err(fail(
            "VOLLEY_VICTIM_MODE=bcast: the victim must be a member, not the root (0)",
        ));
    }
    let me = g.my_node();
    bcast_port(g, 2, LEN)?;
    g.sync()?;
    for k in 0..PAST_DEATH {
        let data = pattern(0, k, LEN);
        if me == 0 {
            g.send_flowctl(2, &data)?;
            continue;
        }
        wait1(g, 2, 60)?;
        if g.buffer(2).map(|b| &b[..LEN]) != Some(&data[..]) {
            return Err(fail(format!("broadcast {k} arrived with wrong contents")));
        }
        if me == victim {
            // SAFETY: raising SIGKILL on ourselves has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
            unreachable!("SIGKILL returned");
        }
    }
    println!("rank {me}: {PAST_DEATH} broadcasts past the death");
    Ok(())
}

/// How many broadcasts [`bcast_past_a_death`] sends: enough to fill the root's
/// board (16 frames) several times over.
const PAST_DEATH: u64 = 40;

// ----------------------------------------------------------- flowctl-exact

/// Instance 0 sends `VOLLEY_MESSAGES` (default 300) flowctl messages to instance 1,
/// which checks each one's contents and order: exactly once, in order, intact.
pub fn flowctl_exact(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    let count: u64 = std::env::var("VOLLEY_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut g = node::gamma(
        boot,
        fabric,
        State {
            check: true,
            ..State::default()
        },
    )?;
    let me = g.my_node();
    setup_pair(&mut g, 100_000)?;
    g.sync()?;
    let started = std::time::Instant::now();
    if me == 0 {
        for k in 0..count {
            let len = [1usize, 100, 1500, 9000, 100_000][k as usize % 5];
            g.send_flowctl(1, &pattern(0, k, len))?;
        }
    } else if me == 1 {
        let d = deadline(&g, 120);
        g.wait_deadline(1, count as u32, d)
            .map_err(|e| fail(format!("waiting for {count} messages: {e}")))?;
    }
    let took = started.elapsed();
    g.sync()?;
    let st = g.state();
    if !st.bad.is_empty() || !st.errnos.is_empty() || (me == 1 && st.handled != count) {
        return Err(fail(format!(
            "handled {} of {count}; errors {:?}, error upcalls {:?}",
            st.handled, st.bad, st.errnos
        )));
    }
    if me == 0 {
        let (gathered, segmented) = match g.device().fabric_device() {
            volley_hosted::HostDevice::Udp(d) => (d.stats().tx_gathered, d.stats().tx_segmented),
            volley_hosted::HostDevice::Eth(d) => (d.stats().tx_gathered, 0),
            _ => (0, 0),
        };
        let s = g.engine().stats();
        println!(
            "flowctl-exact sender: {gathered} frames sent from where their payload lay, {segmented} sends of several datagrams; {} timeouts, {} frames sent again",
            s.timeouts, s.retransmits
        );
    }
    if me == 0 {
        print_shm_copies(&g);
    }
    if me == 1 {
        let s = g.engine().stats();
        let (strangers, coalesced) = match g.device().fabric_device() {
            volley_hosted::HostDevice::Udp(d) => (d.stats().rx_foreign, d.stats().rx_coalesced),
            volley_hosted::HostDevice::Eth(d) => (d.stats().rx_foreign, 0),
            _ => (0, 0),
        };
        println!(
            "flowctl-exact ok: {count} messages exactly once, in order; {} duplicates and {} bad CRCs dropped; {} unauthenticated frames and {strangers} datagrams from strangers dropped; {coalesced} reads of several datagrams; all in {:.6} s",
            s.rx_duplicates, s.rx_bad_crc, s.rx_unauthenticated, took.as_secs_f64()
        );
    }
    if let volley_hosted::HostDevice::Udp(d) = g.device() {
        println!(
            "rank {me}: {} peers made suspect by ICMP, {} found gone",
            d.stats().suspected,
            d.stats().unreachable
        );
    }
    if let volley_hosted::HostDevice::Eth(d) = g.device() {
        println!("rank {me} path: {}", d.path());
    }
    g.exit();
    Ok(())
}

/// On `shm`, how this rank's long frames were copied (`VOLLEY_SHM_COPY`).
fn print_shm_copies(g: &HostGamma<State>) {
    if let volley_hosted::HostDevice::Shm(d) = g.device() {
        let s = d.stats();
        println!(
            "shm long frames: {} copied through the cache, {} with non-temporal stores, {} into the board",
            s.cached_frames, s.streamed_frames, s.board_frames
        );
    }
}

// ----------------------------------------------------------------- compute

/// A master and its workers: instance 0 sends every other instance a task (a
/// flowctl message, whose ack rides on the answer) and waits for the answers;
/// each worker takes its task and then computes (sleeps) for `VOLLEY_COMPUTE`
/// seconds (default 3) without calling in, then answers. With a peer timeout
/// shorter than that, only the workers' beacons keep the master from taking
/// them for dead ([`volley_hosted::beacon`]). Ends with a barrier.
pub fn compute(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    let secs = volley_hosted::settings::env_seconds("VOLLEY_COMPUTE", 0.0, 3_600.0)?
        .unwrap_or(std::time::Duration::from_secs(3));
    let mut g = node::gamma(boot, fabric, State::default())?;
    let (me, n) = (g.my_node(), g.how_many_nodes());
    let pid = g.my_par_pid();
    // Port and semaphore k carry worker k's task and answer.
    if me == 0 {
        for w in 1..n {
            g.set_passive_port(w, w, pid, w, w, GO_BACK, Some(leak(64)))?;
        }
    } else {
        g.set_passive_port(me, 0, pid, me, me, GO_BACK, Some(leak(64)))?;
    }
    g.sync()?;
    if me == 0 {
        for w in 1..n {
            g.send_flowctl(w, &pattern(0, w as u64, 8))?;
        }
        let d = deadline(&g, 120);
        for w in 1..n {
            g.wait_deadline(w, 1, d)
                .map_err(|e| fail(format!("waiting for worker {w}'s answer: {e}")))?;
            if g.buffer(w).map(|b| &b[..8]) != Some(&pattern(w, 0, 8)[..]) {
                return Err(fail(format!("worker {w}'s answer arrived wrong")));
            }
        }
    } else {
        let d = deadline(&g, 120);
        g.wait_deadline(me, 1, d)
            .map_err(|e| fail(format!("waiting for the task: {e}")))?;
        std::thread::sleep(secs);
        g.send_flowctl(me, &pattern(me, 0, 8))?;
    }
    g.sync()?;
    let beats = match g.device().fabric_device() {
        volley_hosted::HostDevice::Shm(d) => d.beacons_sent(),
        volley_hosted::HostDevice::Udp(d) => d.beacons_sent(),
        volley_hosted::HostDevice::Eth(d) => d.beacons_sent(),
        // `fabric_device` unwraps a capture.
        volley_hosted::HostDevice::Captured(_) => 0,
    };
    let s = g.engine().stats();
    println!(
        "compute ok: rank {me} of {n}, beacons {beats}, peers waited for {}, peers failed {}",
        s.peers_vouched, s.peers_failed
    );
    g.exit();
    Ok(())
}

/// Every rank adds 1 to rank 0's counter 1, 200 times, all at once; rank 0 gathers
/// the values everyone got and checks that each of 0..200n came out exactly once.
pub fn fetch_add(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    const PER: u32 = 200;
    const VAR: u16 = 1;
    let mut g = node::gamma(boot, fabric, State::default())?;
    let (me, n, pid) = (g.my_node(), g.how_many_nodes(), g.my_par_pid());
    let bytes = PER as usize * 4;
    if me == 0 {
        for r in 1..n {
            g.set_passive_port(100 + r, r, pid, 100, 100 + r, GO_BACK, Some(leak(bytes)))?;
        }
    } else {
        g.set_passive_port(100, 0, pid, 100 + me, 100, GO_BACK, None)?;
    }
    g.sync()?;
    let mut mine = Vec::with_capacity(PER as usize);
    for _ in 0..PER {
        mine.push(g.fetch_add(0, VAR, 1)?);
    }
    if !mine.windows(2).all(|w| w[0] < w[1]) {
        return Err(fail(format!("rank {me}: values not increasing: {mine:?}")));
    }
    if me != 0 {
        let raw: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
        g.send_flowctl(100, &raw)?;
    } else {
        let mut all = mine;
        for r in 1..n {
            wait1(&mut g, 100 + r, 60)?;
            let b = g.buffer(100 + r).unwrap_or(&[]);
            all.extend(
                b.chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
        }
        all.sort_unstable();
        let total = PER * n as u32;
        if all != (0..total).collect::<Vec<u32>>() {
            return Err(fail(format!(
                "fetch-add: {} values, not each of 0..{total} once",
                all.len()
            )));
        }
        let now = g.fetch_add(0, VAR, 0)?;
        if now != total {
            return Err(fail(format!("fetch-add: counter {now}, expected {total}")));
        }
        println!("fetch-add ok: {total} values from {n} ranks, each exactly once");
    }
    g.sync()?;
    g.exit();
    Ok(())
}

/// Joins the fabric and leaves: used to test start-up errors.
pub fn attach(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    let g = node::gamma(boot, fabric, State::default())?;
    g.exit();
    Ok(())
}

// -------------------------------------------------------------------- demo

/// The main job: ping-pong, barriers and a broadcast, checked, with a latency table.
pub fn demo(boot: &Boot, fabric: Fabric) -> Result<(), HostError> {
    pin(boot.rank);
    let mut g = node::gamma(boot, fabric, State::default())?;
    let (me, n) = (g.my_node(), g.how_many_nodes());
    if n < 2 {
        return Err(fail("the demo needs at least 2 ranks"));
    }
    setup_pair(&mut g, 1 << 20)?;
    setup_bcast(&mut g, 16 << 10)?;
    g.sync()?;
    let mut rows: Vec<(String, &str, f64, f64)> = Vec::new();
    for (len, iters) in [(8usize, 2000), (4096, 1000), (65_536, 200), (1 << 20, 30)] {
        let data = pattern(me, 0, len);
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters + iters / 10 {
            if me < 2 {
                let rtt = round_trip(&mut g, &data, true)?;
                if me == 0 && i >= iters / 10 {
                    samples.push(rtt / 2.0);
                }
            }
        }
        if me == 0 {
            let ok = g
                .buffer(1)
                .is_some_and(|b| b[..len] == pattern(1, 0, len)[..]);
            let (m, p90, _) = percentiles(&mut samples);
            rows.push((
                format!("ping-pong {} (one-way)", size_name(len)),
                if ok { "ok" } else { "WRONG" },
                m,
                p90,
            ));
        }
    }
    let mut bar = Vec::new();
    for i in 0..600 {
        let t0 = g.time();
        g.sync()?;
        if i >= 100 {
            bar.push(Gamma::<volley_hosted::HostDevice, HostClock, State>::time_diff(g.time(), t0));
        }
    }
    if me == 0 {
        let (m, p90, _) = percentiles(&mut bar);
        rows.push((format!("barrier, {n} ranks"), "ok", m, p90));
    }
    // Timed as the barrier is, many times over: one broadcast is at the mercy of
    // the scheduler where the ranks outnumber the cores. Each ends with a barrier,
    // so that the next starts once every member has checked this one.
    let mut bc = Vec::new();
    for i in 0..220 {
        let data = pattern(0, i, 16 << 10);
        let t0 = g.time();
        if me == 0 {
            g.send_flowctl(2, &data)?;
        } else {
            wait1(&mut g, 2, 30)?;
            if g.buffer(2).map(|b| &b[..data.len()]) != Some(&data[..]) {
                return Err(fail("broadcast arrived with wrong contents"));
            }
        }
        g.sync()?;
        if i >= 20 {
            bc.push(Gamma::<volley_hosted::HostDevice, HostClock, State>::time_diff(g.time(), t0));
        }
    }
    if me == 0 {
        let (m, p90, _) = percentiles(&mut bc);
        rows.push((
            format!("broadcast 16 KiB to {} + barrier", n - 1),
            "ok",
            m,
            p90,
        ));
        println!(
            "Volley demo: {n} ranks on the {} fabric (GAMMA API, _flowctl sends)",
            fabric.name()
        );
        println!(
            "{:<34} {:>6} {:>12} {:>12}",
            "check", "result", "median us", "p90 us"
        );
        for (name, res, m, p) in &rows {
            println!("{name:<34} {res:>6} {m:>12.2} {p:>12.2}");
        }
        if rows.iter().any(|r| r.1 != "ok") {
            return Err(fail("a check failed"));
        }
    }
    g.exit();
    Ok(())
}

fn size_name(len: usize) -> String {
    match len {
        l if l >= 1 << 20 => format!("{} MiB", l >> 20),
        l if l >= 1024 => format!("{} KiB", l >> 10),
        l => format!("{l} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_sorted_ranks() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentiles(&mut v), (51.0, 90.0, 99.0));
        assert_eq!(percentiles(&mut []), (0.0, 0.0, 0.0));
        assert_eq!(size_name(8), "8 B");
        assert_eq!(size_name(4096), "4 KiB");
        assert_eq!(size_name(1 << 20), "1 MiB");
        assert_ne!(pattern(0, 1, 64), pattern(1, 1, 64), "sources differ");
        assert_ne!(pattern(0, 1, 64), pattern(0, 2, 64), "messages differ");
    }
}
