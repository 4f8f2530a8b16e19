//! The application linked into the image: ordinary GAMMA code, SPMD style, running
//! over the e1000, the 21143 or the Myrinet-like model on ivshmem. `app=pingpong` bounces messages
//! of 8 B to 1 MiB between instances 0 and 1 with every byte checked; `app=barrier`
//! runs barriers and a broadcast; `app=mixed` both, as `volley worker mixed` does in
//! processes that share the job; `app=fetchadd` has every instance add to counters of
//! instance 0 and checks the totals; `app=collectives` barriers, broadcast and
//! fetch-and-adds; `app=latency` prints the 8-byte one-way median;
//! `app=crash`: the last instance stops dead, the others go on and notice;
//! `app=sendfail`: every instance sends to the last one (a process that kills itself)
//! until SENDFAILURE. With `irq=on`: `app=irqpong`, `app=irqbarrier`, `app=watchdog`
//! (interrupt mode, intr.rs) and `app=lfclatency` (LFC's latency program, lfc_app.rs).
//! `app=cheetah`: Cheetah core's puts, gets, bells and handlers (cheetah_app.rs);
//! `app=qnix`: QNIX contexts, a rendezvous, groups and barriers (qnix_app.rs).

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use volley_core::engine::{Config, Group, Members};
use volley_core::gamma::{Gamma, Upcall, GO_BACK};
use volley_core::phy::Device;
use volley_core::time::Duration;
use volley_e1000::E1000;
use volley_tulip::Tulip;

use crate::clock::TscClock;
use crate::hal::MemBar;
use crate::{print, println};

type Node<D> = Gamma<'static, D, TscClock, u64>;

fn on_msg(u: &mut Upcall<'_, '_, u64>) {
    *u.state() += 1;
    HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// Messages the port-1 handler has seen: read by a program that computes while
/// handlers run at interrupt time.
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Interrupt mode's settings: the card's interrupt control, the watchdog's delay.
#[derive(Debug, Clone, Copy)]
pub struct Irq {
    /// Masks, unmasks or acknowledges the card's receive interrupt.
    pub card: crate::intr::CardOp,
    /// The polling watchdog's delay, microseconds.
    pub interval_us: u64,
    /// TSC ticks per second.
    pub tsc_hz: u64,
}

fn pattern(src: u16, k: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_add((k as u64) << 32)
                .wrapping_add((src as u64) << 52)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                >> 56) as u8
        })
        .collect()
}

/// The fw_cfg file holding the job's key.
const KEY_FILE: &str = "opt/volley/key";
/// The fw_cfg file a launcher may give a node's start-up nonce in (32 hex digits).
const NONCE_FILE: &str = "opt/volley/nonce";

/// 16 bytes from 32 hex digits.
fn hex16(text: &[u8]) -> Option<[u8; 16]> {
    let hex = core::str::from_utf8(text).ok()?.trim();
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The CMOS real-time clock's seconds, minutes, hours, day, month and year (as the
/// chip holds them: BCD or binary), read once it is not updating.
fn rtc() -> [u8; 6] {
    use crate::port::{inb, outb};
    let reg = |r: u8| {
        outb(0x70, r);
        inb(0x71)
    };
    // Register A bit 7: an update is in progress.
    for _ in 0..100_000 {
        if reg(0x0A) & 0x80 == 0 {
            break;
        }
    }
    [
        reg(0x00),
        reg(0x02),
        reg(0x04),
        reg(0x07),
        reg(0x08),
        reg(0x09),
    ]
}

/// This node's start-up nonce (see `volley_core::session`): the launcher's, from
/// fw_cfg, where it gave one; else a hash, under the job's key, of the wall-clock
/// time (the RTC) and the time-stamp counter, which no two runs share.
fn start_nonce(key: &[u8; 16], rank: u16) -> [u8; 16] {
    let mut text = [0u8; 64];
    if let Some(n) = crate::fwcfg::file(NONCE_FILE, &mut text) {
        if let Some(nonce) = hex16(&text[..n]) {
            return nonce;
        }
    }
    let mut seed = [0u8; 32];
    seed[..6].copy_from_slice(&rtc());
    seed[8..16].copy_from_slice(&crate::tsc::rdtsc().to_le_bytes());
    seed[16..18].copy_from_slice(&rank.to_le_bytes());
    volley_core::wire::derive_key(key, &seed, crate::tsc::rdtsc())
}

/// Meets every other rank in the start-up exchange (`volley_core::session`) and
/// makes `cfg`'s frame key this run's: frames of another run of the job never
/// verify. False (and a message) if some rank gave no answer within `startup`.
fn start_session<D: Device>(
    nic: &mut D,
    clock: &TscClock,
    cfg: &mut Config,
    rank: u16,
    nodes: u16,
    startup: Duration,
) -> bool {
    use volley_core::time::Clock;
    let (Some(frame_key), Some(key)) = (cfg.auth_key, job_key()) else {
        return true;
    };
    let nonce = start_nonce(&key, rank);
    let mut s = volley_core::session::Session::with_ranks(
        rank,
        nodes as usize,
        cfg.job_key,
        frame_key,
        nonce,
    );
    let start = clock.now();
    while !s.complete() {
        let now = clock.now();
        s.poll(now, nic);
        if now.saturating_since(start) > startup {
            // As a first sync that gave up would say it (a dead peer is GAMMA's
            // SENDFAILURE), naming whom it waited for.
            let (st, secs) = (s.stats(), startup.total_micros() / 1_000_000);
            println!("volley unikernel: first sync: SENDFAILURE");
            for heard in [false, true] {
                let mut who = s.waiting_for().filter(|&r| s.heard_from(r) == heard);
                let Some(first) = who.next() else { continue };
                print!("volley unikernel: node {}", first);
                for r in who {
                    print!(", {}", r);
                }
                if heard {
                    println!(
                        " gave no answer with this run's nonce within startup={} s",
                        secs
                    );
                } else {
                    println!(" never heard from within startup={} s", secs);
                }
            }
            println!(
                "volley unikernel: start-up: {} HELLOs sent, {} taken, {} with an earlier nonce",
                st.sent, st.taken, st.stale_echo
            );
            println!(
                "volley unikernel: {} frames failed authentication",
                st.bad_tag
            );
            return false;
        }
    }
    cfg.auth_key = s.run_key();
    cfg.hello = Some(s.hello_config());
    true
}

/// The job's 128-bit key, from 32 hex digits in the fw_cfg file.
fn job_key() -> Option<[u8; 16]> {
    let mut text = [0u8; 64];
    let n = crate::fwcfg::file(KEY_FILE, &mut text)?;
    hex16(&text[..n])
}

/// How a node reaches the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    /// Frames that cross a network (Ethernet, UDP/IPv4): authenticated; QEMU's e1000
    /// model holds reception off for a second at start-up.
    Network,
    /// Shared memory private to the job's user: no one else can write a frame.
    SharedMemory,
}

/// Runs `app` as instance `rank` of `nodes` of job `job` over `nic`; returns whether
/// every check passed. `stats` prints the device's counters at the end.
#[allow(clippy::too_many_arguments)]
pub fn run<D: Device>(
    app: &str,
    nic: D,
    fabric: Fabric,
    clock: TscClock,
    rank: u16,
    nodes: u16,
    job: u64,
    device_barrier: bool,
    startup: Duration,
    irq: Option<Irq>,
    stats: impl FnOnce(&mut D),
) -> bool {
    let Some((groups, mut cfg)) = engine_config(fabric, rank, nodes, job, device_barrier, startup)
    else {
        return false;
    };
    let mut nic = nic;
    // The first sync's time counts from here: the start-up exchange is its first part.
    let booted = {
        use volley_core::time::Clock;
        clock.now()
    };
    if fabric == Fabric::Network && !start_session(&mut nic, &clock, &mut cfg, rank, nodes, startup)
    {
        return false;
    }
    if app == "lfclatency" {
        return crate::lfc_app::latency(nic, groups, cfg, clock, nodes, irq, stats);
    }
    if app == "cheetah" {
        return crate::cheetah_app::run(nic, groups, cfg, clock, nodes, stats);
    }
    if app == "qnix" {
        return crate::qnix_app::run(nic, groups, cfg, clock, nodes, stats);
    }
    let mut g: Node<D> = match Gamma::init_alloc(cfg, groups, nodes as usize, nic, clock, 0) {
        Ok(g) => g,
        Err(e) => {
            println!("volley unikernel: gamma init: {}", e);
            return false;
        }
    };
    let peer = if rank == 0 { 1 } else { 0 };
    let buf: &'static mut [u8] = Vec::leak(vec![0u8; 1 << 20]);
    if let Err(e) = g.set_active_port(1, peer, 1, 1, Some(on_msg), None, 1, GO_BACK, Some(buf)) {
        println!("volley unikernel: port: {}", e);
        return false;
    }
    let t0 = booted;
    if let Err(e) = g.sync() {
        report("first sync", e);
        report_peers(g.engine(), rank, nodes, startup);
        println!(
            "volley unikernel: {} frames failed authentication",
            g.engine().stats().rx_unauthenticated
        );
        return false;
    }
    println!(
        "volley unikernel: node {} of {}: first sync after {} ms",
        rank,
        nodes,
        (g.time() - t0).total_micros() / 1000
    );
    let ok = match app {
        "pingpong" => pingpong(&mut g, rank),
        "barrier" => barriers(&mut g, rank),
        // Processes on the same LAN run `volley worker mixed`, the same steps.
        "mixed" => pingpong(&mut g, rank) && barriers(&mut g, rank),
        "latency" => latency(&mut g, rank),
        "fetchadd" => fetch_adds(&mut g, rank, nodes),
        "collectives" => barriers(&mut g, rank) && fetch_adds(&mut g, rank, nodes),
        "crash" => crash(&mut g, rank, nodes),
        "sendfail" => sendfail(&mut g, rank, nodes),
        "irqpong" | "irqbarrier" | "watchdog" => match irq {
            Some(irq) => in_irq_mode(&mut g, irq, || match app {
                "irqpong" => irq_pong::<D>(rank),
                // The barrier app's waits halt until the card's interrupt.
                "irqbarrier" => with::<D, _>(|g| barriers(g, rank)),
                _ => watchdog::<D>(rank, irq.tsc_hz),
            }),
            None => {
                println!("volley unikernel: app={} needs irq=on", app);
                false
            }
        },
        other => {
            println!("volley unikernel: unknown app {:?}", other);
            false
        }
    };
    // A crashed peer cannot take part in a closing barrier.
    let ok = ok && (app == "crash" || app == "sendfail" || g.sync().is_ok());
    let st = g.engine().stats();
    println!(
        "volley unikernel: barriers {} ({} in device memory)",
        st.barriers, st.device_barriers
    );
    let (mut nic, _) = g.exit();
    stats(&mut nic);
    ok
}

/// The engine's settings for instance `rank` of `nodes` of job `job`: the group of all
/// instances, keys derived from the job's secret as hosted ranks derive them, so both
/// kinds of node can share one job. `None` (and a message) without a key.
pub(crate) fn engine_config(
    fabric: Fabric,
    rank: u16,
    nodes: u16,
    job: u64,
    device_barrier: bool,
    startup: Duration,
) -> Option<(&'static [Group<'static>], Config)> {
    let groups: &'static [Group<'static>] = Vec::leak(vec![Group {
        id: 1,
        members: Members::Range {
            first: 0,
            count: nodes,
        },
    }]);
    // The job's key comes through fw_cfg (a file on the host), never the command
    // line: every frame on a network is authenticated under it.
    let Some(key) = job_key() else {
        println!(
            "volley unikernel: no job key: start QEMU with -fw_cfg name={},file=KEYFILE (32 hex digits, mode 0600)",
            KEY_FILE
        );
        return None;
    };
    // `job=` on the command line names the job.
    let mut cfg = Config::new(volley_core::wire::job_key(&key, job), 1, rank);
    if fabric == Fabric::Network {
        cfg.auth_key = Some(volley_core::wire::frame_key(&key, job));
    }
    // QEMU holds reception off for about a second after RCTL is written: the first
    // frames are retransmitted, so allow a few seconds before declaring a peer dead.
    cfg.peer_timeout = volley_core::time::Duration::from_secs(4);
    // Nodes booted at once on a busy host come up seconds apart (a CI run saw more
    // than 4 s): a node not heard from yet is waited for `startup=` (20 s).
    cfg.first_contact = startup;
    // Barriers in NIC memory where the device has them (the Myrinet-like model), as
    // hosted ranks do by default; frames elsewhere.
    cfg.device_barrier = device_barrier;
    Some((groups, cfg))
}

/// The e1000's counters.
pub fn e1000_stats(nic: &mut E1000<MemBar>) {
    let s = nic.stats();
    println!(
        "volley unikernel: e1000 rx {} tx {} from send slots {} whole frames rx {} tx {} filtered {} missed {}",
        s.rx_frames,
        s.tx_frames,
        s.tx_pooled,
        s.rx_raw,
        s.tx_raw,
        s.rx_filtered,
        s.hw_rx_missed
    );
}

/// The 21143's counters.
pub fn tulip_stats(nic: &mut Tulip<MemBar>) {
    let s = nic.stats();
    println!(
        "volley unikernel: tulip rx {} tx {} whole frames rx {} tx {} filtered {} errors {} missed {} resumed {}",
        s.rx_frames,
        s.tx_frames,
        s.rx_raw,
        s.tx_raw,
        s.rx_filtered,
        s.rx_errors,
        s.hw_rx_missed,
        s.rx_resumed
    );
}

fn pingpong<D: Device>(g: &mut Node<D>, rank: u16) -> bool {
    if rank > 1 {
        return true;
    }
    for (k, &len) in [8usize, 1000, 65_536, 1 << 20].iter().enumerate() {
        let mine = pattern(rank, k, len);
        let theirs = pattern(1 - rank, k, len);
        let t0 = g.time();
        // The contents are checked as soon as the message is in, before instance 1
        // answers: once it has, instance 0 may send the next message into the same
        // buffer while instance 1 is still sending.
        let check = |g: &Node<D>| -> bool {
            if g.buffer(1).map(|b| &b[..len]) == Some(&theirs[..]) {
                return true;
            }
            let got = g.buffer(1).map(|b| &b[..len.min(8)]);
            println!(
                "volley unikernel: pingpong {} B: wrong contents ({:02x?}, expected {:02x?})",
                len,
                got,
                &theirs[..len.min(8)]
            );
            false
        };
        let deadline = g.time() + Duration::from_secs(30);
        let r = if rank == 0 {
            g.send_flowctl(1, &mine)
                .and_then(|_| g.wait_deadline(1, 1, deadline))
                .map(|_| check(g))
        } else {
            g.wait_deadline(1, 1, deadline)
                .map(|_| check(g))
                .and_then(|ok| g.send_flowctl(1, &mine).map(|_| ok))
        };
        let rtt = g.time() - t0;
        match r {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => {
                report("pingpong", e);
                return false;
            }
        }
        if rank == 0 {
            println!(
                "volley unikernel: pingpong {} B ok, round trip {} us",
                len,
                rtt.total_micros()
            );
        }
    }
    true
}

/// Runs `f` in interrupt mode (intr.rs): `g` attached for the interrupt handler, the
/// APIC timer driving the watchdog, waits halting between interrupts. `f` reaches the
/// node only through [`with`].
fn in_irq_mode<D: Device>(g: &mut Node<D>, irq: Irq, f: impl FnOnce() -> bool) -> bool {
    /// Polls the attached node: handlers run.
    ///
    /// # Safety
    ///
    /// `p` is the attached `Node<D>`, held by the caller (intr.rs's rule).
    unsafe fn poll<D: Device>(p: *mut ()) {
        // SAFETY: the caller's contract.
        let g = unsafe { &mut *(p as *mut Node<D>) };
        g.poll();
    }
    g.set_idle(Some(crate::intr::idle));
    g.set_idle_after(1);
    let interval = irq.interval_us * irq.tsc_hz / 1_000_000;
    // The timer first (its calibration takes 2 ms, which must not count as silence).
    crate::intr::start_timer((irq.interval_us / 2).max(20), irq.tsc_hz);
    // SAFETY: `g` outlives the attachment (detached below, before `g` is used again),
    // and `f` reaches it only through `with`.
    unsafe { crate::intr::attach(g as *mut Node<D> as *mut (), poll::<D>, irq.card, interval) };
    crate::intr::enable();
    let ok = f();
    crate::intr::detach();
    g.set_idle(None);
    g.set_idle_after(64);
    println!(
        "volley unikernel: interrupts: card {}, timer {}, polls at interrupt time {}",
        crate::intr::NIC_INTERRUPTS.load(Ordering::SeqCst),
        crate::intr::TIMER_INTERRUPTS.load(Ordering::SeqCst),
        crate::intr::POLLS_AT_INTERRUPT.load(Ordering::SeqCst)
    );
    ok
}

/// The program's way to the node in interrupt mode (a poll, for the watchdog).
fn with<D: Device, R>(f: impl FnOnce(&mut Node<D>) -> R) -> R {
    // SAFETY: only called inside `in_irq_mode`, where a `Node<D>` is attached.
    unsafe { crate::intr::with_node::<Node<D>, R>(f) }
}

/// Interrupt-mode 8-byte ping-pong: each side waits halted until the card's interrupt
/// wakes it. Instance 0 prints the median one-way latency.
fn irq_pong<D: Device>(rank: u16) -> bool {
    if rank > 1 {
        return true;
    }
    let msg = [7u8; 8];
    let mut samples = Vec::with_capacity(2000);
    for i in 0..2200 {
        let t0 = with::<D, _>(|g| g.time());
        let deadline = t0 + Duration::from_secs(10);
        let r = if rank == 0 {
            with::<D, _>(|g| g.send(1, &msg))
                .and_then(|_| with::<D, _>(|g| g.wait_deadline(1, 1, deadline)).map(|_| 0))
        } else {
            with::<D, _>(|g| g.wait_deadline(1, 1, deadline))
                .and_then(|_| with::<D, _>(|g| g.send(1, &msg)))
        };
        if let Err(e) = r {
            report("interrupt-mode ping-pong", e);
            return false;
        }
        if i >= 200 {
            samples.push((with::<D, _>(|g| g.time()) - t0).total_nanos() / 2);
        }
    }
    if rank == 0 {
        println!(
            "volley unikernel: interrupt-mode one-way median {} ns",
            median(&mut samples)
        );
    }
    true
}

/// Messages per phase of the watchdog app.
const WATCHED: u64 = 100;

/// The polling watchdog, both ways. Instance 0 sends [`WATCHED`] messages to instance
/// 1, a barrier, then as many again. Instance 1 first polls without pause (its card's
/// interrupt must stay masked: at most one card interrupt per ten messages, for the
/// times the host stops the VM longer than the delay), then computes and never polls (the
/// seed's interrupt-mode pattern: every message must reach the handler from the
/// interrupt, within the watchdog's delay).
fn watchdog<D: Device>(rank: u16, tsc_hz: u64) -> bool {
    let spin_us = |us: u64| {
        let t = with::<D, _>(|g| g.time()) + Duration::from_micros(us);
        while with::<D, _>(|g| g.time()) < t {}
    };
    if rank != 1 {
        for phase in 0..2 {
            for k in 0..WATCHED {
                if rank == 0 {
                    if let Err(e) = with::<D, _>(|g| g.send(1, &[k as u8; 8])) {
                        report("watchdog send", e);
                        return false;
                    }
                    spin_us(200);
                }
            }
            if let Err(e) = with::<D, _>(|g| g.sync()) {
                report(
                    if phase == 0 {
                        "barrier after polling"
                    } else {
                        "barrier after computing"
                    },
                    e,
                );
                return false;
            }
        }
        return true;
    }
    let card = || crate::intr::NIC_INTERRUPTS.load(Ordering::SeqCst);
    let at_irq = || crate::intr::POLLS_AT_INTERRUPT.load(Ordering::SeqCst);
    // Phase 1: polling without pause (counted from the first poll, which masks the
    // card's interrupt).
    if let Err(e) = with::<D, _>(|g| g.test(1)) {
        report("watchdog poll", e);
        return false;
    }
    let card0 = card();
    while HANDLED.load(Ordering::SeqCst) < WATCHED {
        if let Err(e) = with::<D, _>(|g| g.test(1)) {
            report("watchdog poll", e);
            return false;
        }
    }
    let polled = card() - card0;
    if let Err(e) = with::<D, _>(|g| g.sync()) {
        report("barrier after polling", e);
        return false;
    }
    // Phase 2: computing, never polling, for 30 s at most (the TSC read directly:
    // asking the node the time would be polling).
    let (card1, at1) = (card(), at_irq());
    let limit = crate::tsc::rdtsc() + 30 * tsc_hz;
    while HANDLED.load(Ordering::SeqCst) < 2 * WATCHED && crate::tsc::rdtsc() < limit {
        core::hint::spin_loop();
    }
    let (computed, ran) = (card() - card1, at_irq() - at1);
    let got = HANDLED.load(Ordering::SeqCst) - WATCHED;
    println!(
        "volley unikernel: watchdog: polling took {} card interrupts for {} messages; computing, {} of {} messages reached the handler at interrupt time ({} card interrupts, {} polls at interrupt time)",
        polled, WATCHED, got, WATCHED, computed, ran
    );
    if let Err(e) = with::<D, _>(|g| g.sync()) {
        report("barrier after computing", e);
        return false;
    }
    // Silence is wall time: a host that stops the VM for longer than the delay lets
    // the watchdog fire once per stop, so a loaded host may see a few.
    polled * 10 <= WATCHED && got == WATCHED && computed > 0 && ran > 0
}

/// Median of `v` (sorted in place).
pub(crate) fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// 8-byte GAMMA ping-pong, 2000 round trips after 200 warm-up ones; instance 0 prints
/// the median one-way latency in nanoseconds.
fn latency<D: Device>(g: &mut Node<D>, rank: u16) -> bool {
    if rank > 1 {
        return true;
    }
    let msg = [7u8; 8];
    let mut samples = Vec::with_capacity(2000);
    for i in 0..2200 {
        let t0 = g.time();
        let deadline = t0 + Duration::from_secs(10);
        let r = if rank == 0 {
            g.send(1, &msg)
                .and_then(|_| g.wait_deadline(1, 1, deadline).map(|_| ()))
        } else {
            g.wait_deadline(1, 1, deadline)
                .and_then(|_| g.send(1, &msg).map(|_| ()))
        };
        if let Err(e) = r {
            report("latency", e);
            return false;
        }
        if i >= 200 {
            samples.push((g.time() - t0).total_nanos() / 2);
        }
    }
    if rank == 0 {
        println!(
            "volley unikernel: gamma one-way median {} ns",
            median(&mut samples)
        );
    }
    true
}

/// The reference: the same two images bounce a raw Ethernet frame through the driver,
/// no protocol on top. Instance 0 prints the median one-way latency in nanoseconds.
pub fn rawpong<D: Device>(nic: &mut D, clock: &TscClock, rank: u16) -> bool {
    use volley_core::gamma::Clock;
    use volley_core::phy::{RxToken, TxToken};
    use volley_core::NodeAddr;
    let peer = NodeAddr(1 - rank);
    let send = |nic: &mut D, seq: u32| loop {
        if let Some(t) = nic.transmit(clock.now(), peer) {
            t.consume(8, |b| b[..4].copy_from_slice(&seq.to_le_bytes()));
            return;
        }
    };
    // Wait for a frame numbered `seq` (or later); false after 5 s of silence.
    let recv = |nic: &mut D, seq: u32| -> bool {
        let until = clock.now() + Duration::from_secs(5);
        while clock.now() < until {
            if let Some(t) = nic.receive(clock.now()) {
                let got = t.consume(|f| u32::from_le_bytes([f[0], f[1], f[2], f[3]]));
                if got >= seq {
                    return true;
                }
            }
        }
        false
    };
    // Start-up: QEMU drops frames for about a second after RCTL is written, so the
    // first exchange is retried until it goes through (frame 0 = hello).
    let start = clock.now();
    loop {
        if rank == 0 {
            send(nic, 0);
            let until = clock.now() + Duration::from_millis(50);
            let mut answered = false;
            while clock.now() < until && !answered {
                if let Some(t) = nic.receive(clock.now()) {
                    answered = t.consume(|f| f[..4] == 0u32.to_le_bytes());
                }
            }
            if answered {
                break;
            }
        } else if recv(nic, 0) {
            send(nic, 0);
            break;
        }
        if clock.now() - start > Duration::from_secs(20) {
            println!("volley unikernel: rawpong: no peer");
            return false;
        }
    }
    let mut samples = Vec::with_capacity(2000);
    for i in 1..=2200u32 {
        let t0 = clock.now();
        if rank == 0 {
            send(nic, i);
            if !recv(nic, i) {
                println!("volley unikernel: rawpong: frame {} lost", i);
                return false;
            }
        } else {
            if !recv(nic, i) {
                println!("volley unikernel: rawpong: frame {} lost", i);
                return false;
            }
            send(nic, i);
        }
        if i > 200 {
            samples.push((clock.now() - t0).total_nanos() / 2);
        }
    }
    if rank == 0 {
        println!(
            "volley unikernel: raw one-way median {} ns",
            median(&mut samples)
        );
    }
    true
}

/// Adds per instance on each of instance 0's counters 0 and 1.
const ADDS: u32 = 1000;

/// Every instance adds 1 to counter 0 and `rank + 1` to counter 1 of instance 0,
/// [`ADDS`] times each, checking that the values it gets back only grow; after a
/// barrier, instance 0 checks both totals. Also prints how many frames the engine
/// sent for the adds: none where the NIC serves them in its memory.
fn fetch_adds<D: Device>(g: &mut Node<D>, rank: u16, nodes: u16) -> bool {
    let frames = g.engine().stats().tx_frames;
    let mut last = [None::<u32>; 2];
    for _ in 0..ADDS {
        for (var, delta) in [(0u16, 1u32), (1, rank as u32 + 1)] {
            match g.fetch_add(0, var, delta) {
                Ok(v) => {
                    if last[var as usize].is_some_and(|l| v <= l) {
                        println!(
                            "volley unikernel: fetchadd: counter {} went back to {} after {:?}",
                            var, v, last[var as usize]
                        );
                        return false;
                    }
                    last[var as usize] = Some(v);
                }
                Err(e) => {
                    report("fetchadd", e);
                    return false;
                }
            }
        }
    }
    let sent = g.engine().stats().tx_frames - frames;
    println!(
        "volley unikernel: node {} did {} fetch-and-adds, engine frames sent {}",
        rank,
        2 * ADDS,
        sent
    );
    if let Err(e) = g.sync() {
        report("barrier after the adds", e);
        return false;
    }
    if rank != 0 {
        return true;
    }
    let n = nodes as u32;
    let want = [n * ADDS, ADDS * n * (n + 1) / 2];
    for (var, want) in [0u16, 1].into_iter().zip(want) {
        match g.fetch_add(0, var, 0) {
            Ok(v) if v == want => {}
            Ok(v) => {
                println!(
                    "volley unikernel: fetchadd: counter {} holds {}, expected {}",
                    var, v, want
                );
                return false;
            }
            Err(e) => {
                report("fetchadd", e);
                return false;
            }
        }
    }
    println!(
        "volley unikernel: fetchadd ok: counters {} and {}",
        want[0], want[1]
    );
    true
}

/// Against a process rank running `volley worker victim` (the last rank, which takes
/// three messages and kills itself): every other instance sends 10 kB messages to its
/// port 4 until the send reports SENDFAILURE, within 60 s, as the worker's survivors
/// do. The seed's failure contract across a mixed job: the unikernel side learns that
/// a process died.
fn sendfail<D: Device>(g: &mut Node<D>, rank: u16, nodes: u16) -> bool {
    let victim = nodes - 1;
    if rank == victim {
        println!("volley unikernel: sendfail: the victim is a process (volley worker victim)");
        return false;
    }
    if let Err(e) = g.set_passive_port(4, victim, 1, 4, 4, GO_BACK, None) {
        report("port to the victim", e);
        return false;
    }
    let t0 = g.time();
    let data = vec![7u8; 10_000];
    let mut sent = 0u32;
    loop {
        match g.send_flowctl(4, &data) {
            Ok(_) => sent += 1,
            Err(volley_core::engine::Error::SendFailure) => {
                println!(
                    "volley unikernel: node {} found dead after {} messages, {} ms: SENDFAILURE",
                    victim,
                    sent,
                    (g.time() - t0).total_micros() / 1000
                );
                return true;
            }
            Err(e) => {
                report("sending to the victim", e);
                return false;
            }
        }
        if g.time() - t0 > Duration::from_secs(60) {
            println!("volley unikernel: node {} never died", victim);
            return false;
        }
    }
}

/// Broadcasts the root sends after a member died.
const AFTER_DEATH: usize = 20;

/// The last instance stops dead after a barrier (its QEMU ends without leaving the
/// job, as a powered-off node would). Instance 0 then broadcasts [`AFTER_DEATH`]
/// short messages, more than the broadcast board holds while the dead node does not
/// read it, which the other survivors must all get; then it sends to the dead node
/// and must be told SENDFAILURE, not hang.
fn crash<D: Device>(g: &mut Node<D>, rank: u16, nodes: u16) -> bool {
    let victim = nodes - 1;
    let buf: &'static mut [u8] = Vec::leak(vec![0u8; 64]);
    let dest = if rank == 0 {
        volley_core::gamma::BROADCAST
    } else {
        0
    };
    if let Err(e) = g.set_active_port(2, dest, 1, 2, Some(on_msg), None, 2, GO_BACK, Some(buf)) {
        report("broadcast port", e);
        return false;
    }
    // Instance 0's port 3 leads to the victim (on 2 nodes port 1 does too).
    if rank == 0 {
        let buf: &'static mut [u8] = Vec::leak(vec![0u8; 8]);
        if let Err(e) =
            g.set_active_port(3, victim, 1, 3, Some(on_msg), None, 3, GO_BACK, Some(buf))
        {
            report("port to the victim", e);
            return false;
        }
    }
    if let Err(e) = g.sync() {
        report("barrier before the crash", e);
        return false;
    }
    if rank == victim {
        println!("volley unikernel: node {} stops dead", rank);
        crate::exit::exit(crate::exit::Verdict::Success)
    }
    let t0 = g.time();
    let deadline = t0 + Duration::from_secs(30);
    if rank != 0 {
        // Every broadcast arrives; the semaphore counts them, the buffer holds the last.
        if let Err(e) = g.wait_deadline(2, AFTER_DEATH as u32, deadline) {
            report("broadcasts after the death", e);
            return false;
        }
        let last = pattern(0, AFTER_DEATH - 1, 64);
        if g.buffer(2) != Some(&last[..]) {
            println!("volley unikernel: the last broadcast arrived with wrong contents");
            return false;
        }
        println!(
            "volley unikernel: node {} got {} broadcasts after node {} died",
            rank, AFTER_DEATH, victim
        );
        return true;
    }
    for k in 0..AFTER_DEATH {
        if let Err(e) = g.send_flowctl(2, &pattern(0, k, 64)) {
            report("broadcast after the death", e);
            return false;
        }
    }
    let r = g
        .send_flowctl(3, &[1u8; 8])
        .and_then(|_| g.wait_deadline(3, 1, deadline));
    println!(
        "volley unikernel: {} broadcasts written to the board",
        g.engine().stats().board_tx
    );
    match r {
        Err(volley_core::engine::Error::SendFailure) => {
            println!(
                "volley unikernel: node {} found dead after {} ms: SENDFAILURE",
                victim,
                (g.time() - t0).total_micros() / 1000
            );
            true
        }
        other => {
            println!(
                "volley unikernel: sending to a dead node gave {:?}, not SENDFAILURE",
                other
            );
            false
        }
    }
}

fn barriers<D: Device>(g: &mut Node<D>, rank: u16) -> bool {
    let t0 = g.time();
    for _ in 0..20 {
        if let Err(e) = g.sync() {
            report("barrier", e);
            return false;
        }
    }
    if rank == 0 {
        println!(
            "volley unikernel: 20 barriers ok, {} us each",
            (g.time() - t0).total_micros() / 20
        );
    }
    // A broadcast from instance 0 on port 2, every byte checked by the others.
    let data = pattern(0, 7, 4096);
    let dest = if rank == 0 {
        volley_core::gamma::BROADCAST
    } else {
        0
    };
    let buf: &'static mut [u8] = Vec::leak(vec![0u8; 4096]);
    if let Err(e) = g.set_active_port(2, dest, 1, 2, Some(on_msg), None, 2, GO_BACK, Some(buf)) {
        report("broadcast port", e);
        return false;
    }
    if let Err(e) = g.sync() {
        report("barrier", e);
        return false;
    }
    if rank == 0 {
        if let Err(e) = g.send_flowctl(2, &data) {
            report("broadcast", e);
            return false;
        }
        println!("volley unikernel: broadcast sent");
    } else {
        let deadline = g.time() + Duration::from_secs(30);
        if let Err(e) = g.wait_deadline(2, 1, deadline) {
            report("broadcast", e);
            return false;
        }
        if g.buffer(2) != Some(&data[..]) {
            println!("volley unikernel: broadcast arrived with wrong contents");
            return false;
        }
        println!("volley unikernel: node {} got the broadcast", rank);
    }
    true
}

/// Names the nodes given up: those never heard from within `startup` (not booted,
/// or holding another job's key) and those that went silent after.
fn report_peers(e: &volley_core::engine::Engine<'_>, rank: u16, nodes: u16, startup: Duration) {
    for heard in [false, true] {
        let mut given_up = (0..nodes).filter(|&n| n != rank).filter(|&n| {
            let s = e.peer_status(n);
            s.failed && s.heard_from == heard
        });
        let Some(first) = given_up.next() else {
            continue;
        };
        print!("volley unikernel: node {}", first);
        for n in given_up {
            print!(", {}", n);
        }
        if heard {
            println!(" went silent");
        } else {
            println!(
                " never heard from within startup={} s",
                startup.total_micros() / 1_000_000
            );
        }
    }
}

/// Prints an error; a dead peer is spelled as GAMMA does.
fn report(what: &str, e: volley_core::engine::Error) {
    if e == volley_core::engine::Error::SendFailure {
        println!("volley unikernel: {}: SENDFAILURE", what);
    } else {
        println!("volley unikernel: {}: {}", what, e);
    }
}
