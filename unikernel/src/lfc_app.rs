//! The LFC User Guide's chapter-5 latency program (`latency_simple.c`, figures 5.1 to
//! 5.4) on the unikernel, over the core's LFC personality: the same steps, first in
//! polling mode, then in interrupt mode, where the program spins on its counter and
//! never polls, and every upcall runs from an interrupt (intr.rs). `app=lfclatency
//! irq=on`; prints the seed's line for each mode.

use core::sync::atomic::{AtomicU32, Ordering};

use volley_core::engine::{Config, Error, Group};
use volley_core::lfc::{Keep, Lfc, Options, Received};
use volley_core::phy::Device;
use volley_core::time::Duration;

use crate::app::Irq;
use crate::clock::TscClock;
use crate::println;

type Node<D> = Lfc<'static, D, TscClock, ()>;

/// Round trips per mode (the seed's `-nsend`, 10000 by default; fewer under TCG).
const NSEND: u32 = 2000;
/// The seed's default message size.
const MSGSIZE: usize = 16;
/// The seed's `UPCALLS_ALLOWED`.
const UPCALLS_ALLOWED: bool = true;

/// The seed's `nreceived`, counted by the upcall, read by the spinning program.
static NRECEIVED: AtomicU32 = AtomicU32::new(0);

/// The seed's `lfc_upcall`: count the packet, free it ourselves, and say so.
fn upcall<D: Device>(l: &mut Node<D>, r: Received) -> Keep {
    NRECEIVED.fetch_add(1, Ordering::SeqCst);
    let _ = l.packet_free(r.packet);
    Keep::Yes
}

/// The program's way to its node while it is attached for interrupts.
fn with<D: Device, R>(f: impl FnOnce(&mut Node<D>) -> R) -> R {
    // SAFETY: only called while `latency` has the node attached as a `Node<D>`.
    unsafe { crate::intr::with_node::<Node<D>, R>(f) }
}

/// Runs the program as this instance; `stats` prints the card's counters at the end.
pub fn latency<D: Device>(
    nic: D,
    groups: &'static [Group<'static>],
    cfg: Config,
    clock: TscClock,
    nodes: u16,
    irq: Option<Irq>,
    stats: impl FnOnce(&mut D),
) -> bool {
    let Some(irq) = irq else {
        println!(
            "volley unikernel: app=lfclatency needs irq=on (its second half is interrupt mode)"
        );
        return false;
    };
    // The polling watchdog's delays (`-lfc-intr-first`, `-lfc-interval`) are the
    // kernel's `irq_interval`.
    let delay = Duration::from_micros(irq.interval_us);
    let opts = Options {
        intr_first: delay,
        interval: delay,
        ..Options::default()
    };
    let mut l: Node<D> = match Lfc::init_alloc(
        cfg,
        groups,
        nodes as usize,
        nic,
        clock,
        opts,
        upcall::<D>,
        (),
    ) {
        Ok(l) => l,
        Err(e) => {
            println!("volley unikernel: lfc_init: {}", e);
            return false;
        }
    };
    if let Err(e) = l.start() {
        println!("volley unikernel: lfc_start: {}", e);
        return false;
    }
    /// An interrupt's poll of the attached node: LFC's own rule decides whether one
    /// is due (interrupts enabled, the program silent for `intr_first`).
    ///
    /// # Safety
    ///
    /// `p` is the attached `Node<D>`, held by the caller (intr.rs's rule).
    unsafe fn interrupt<D: Device>(p: *mut ()) {
        // SAFETY: the caller's contract.
        let l = unsafe { &mut *(p as *mut Node<D>) };
        l.interrupt();
    }
    // Halt at the first poll that finds nothing: the interrupt wakes the program.
    l.set_idle(Some(crate::intr::idle));
    l.set_idle_after(1);
    crate::intr::start_timer((irq.interval_us / 2).max(20), irq.tsc_hz);
    let interval = irq.interval_us * irq.tsc_hz / 1_000_000;
    // SAFETY: `l` outlives the attachment (detached below before it is used again)
    // and the program reaches it only through `with`.
    unsafe {
        crate::intr::attach(
            &mut l as *mut Node<D> as *mut (),
            interrupt::<D>,
            irq.card,
            interval,
        )
    };
    crate::intr::enable();
    let limit = crate::tsc::rdtsc() + 60 * irq.tsc_hz;
    let pktsize = with::<D, _>(|l| l.packet_size());
    let sendbuf = [0x5Au8; MSGSIZE];
    // The seed's `last_nr_received`, kept across both modes.
    let mut last = 0;
    let ok = do_test::<D>(&sendbuf, pktsize, true, &mut last, limit)
        && do_test::<D>(&sendbuf, pktsize, false, &mut last, limit)
        && with::<D, _>(|l| l.barrier()).is_ok();
    crate::intr::detach();
    l.set_idle(None);
    let s = l.stats();
    let e = l.engine().stats();
    println!(
        "volley unikernel: lfc: {} upcalls, {} at interrupt time; card interrupts {}; frames {} out ({} resent, {} acks), {} in, {} refused, {} duplicates",
        s.upcalls,
        s.interrupts,
        crate::intr::NIC_INTERRUPTS.load(Ordering::SeqCst),
        e.tx_frames,
        e.retransmits,
        e.tx_acks,
        e.rx_frames,
        e.rx_refused,
        e.rx_duplicates
    );
    let (mut nic, ()) = l.exit();
    stats(&mut nic);
    ok
}

/// The seed's `await_messages`: until `n` more have arrived, polling or (interrupt
/// mode) just spinning on the counter. False past `limit` (TSC).
fn await_messages<D: Device>(last: &mut u32, n: u32, poll: bool, limit: u64) -> bool {
    while NRECEIVED.load(Ordering::SeqCst).wrapping_sub(*last) < n {
        if poll {
            if let Err(e) = with::<D, _>(|l| l.poll()) {
                println!("volley unikernel: lfc_poll: {}", e);
                return false;
            }
        } else {
            core::hint::spin_loop();
        }
        if crate::tsc::rdtsc() > limit {
            println!("volley unikernel: lfclatency: messages stopped arriving");
            return false;
        }
    }
    *last = last.wrapping_add(n);
    true
}

/// The seed's `send_large`: the message in packets of at most `pktsize` bytes.
fn send_large<D: Device>(dest: u16, msg: &[u8], pktsize: usize) -> Result<(), Error> {
    with::<D, _>(|l| {
        let mut chunks = msg.chunks(pktsize.max(1)).peekable();
        if chunks.peek().is_none() {
            let pkt = l.send_alloc(UPCALLS_ALLOWED)?;
            return l.ucast_launch(dest, pkt, 0, UPCALLS_ALLOWED);
        }
        for chunk in chunks {
            let pkt = l.send_alloc(UPCALLS_ALLOWED)?;
            // The seed's `lfc_memcpy` into the packet.
            if let Some(p) = l.packet_mut(pkt) {
                p[..chunk.len()].copy_from_slice(chunk);
            }
            l.ucast_launch(dest, pkt, chunk.len(), UPCALLS_ALLOWED)?;
        }
        Ok(())
    })
}

/// The seed's `do_test`: instance 1 says it is ready, then NSEND round trips; instance
/// 0 prints the one-way latency.
fn do_test<D: Device>(msg: &[u8], pktsize: usize, poll: bool, last: &mut u32, limit: u64) -> bool {
    if !poll {
        with::<D, _>(|l| l.intr_enable());
    }
    let (me, procs) = with::<D, _>(|l| (l.my_proc(), l.nr_procs()));
    let dest = u16::from(me == 0 && procs > 1);
    let nr_packets = msg.len().div_ceil(pktsize.max(1)).max(1) as u32;
    let ok = if me == 0 {
        let mut ok = procs < 2 || await_messages::<D>(last, 1, poll, limit);
        with::<D, _>(|l| l.timer_start());
        for _ in 0..NSEND {
            ok = ok
                && send_large::<D>(dest, msg, pktsize).is_ok()
                && await_messages::<D>(last, nr_packets, poll, limit);
        }
        with::<D, _>(|l| l.timer_stop());
        let mut elapsed = with::<D, _>(|l| l.timer_elapsed()) / NSEND as f64;
        if procs > 1 {
            elapsed /= 2.0;
        }
        if ok {
            println!(
                "volley unikernel: Size {:4} polling {} latency {:.1} microseconds",
                msg.len(),
                poll as u8,
                elapsed
            );
        }
        ok
    } else if me == 1 {
        let ready = with::<D, _>(|l| {
            let pkt = l.send_alloc(UPCALLS_ALLOWED)?;
            l.ucast_launch(dest, pkt, 0, UPCALLS_ALLOWED)
        });
        let mut ok = ready.is_ok();
        for _ in 0..NSEND {
            ok = ok
                && await_messages::<D>(last, nr_packets, poll, limit)
                && send_large::<D>(dest, msg, pktsize).is_ok();
        }
        ok
    } else {
        true
    };
    if !poll {
        with::<D, _>(|l| l.intr_disable());
    }
    ok
}
