//! `volley-unikernel`: Volley as a single-application x86_64 kernel, one image per node,
//! booted by QEMU straight from `-kernel` through the PVH entry point.
//!
//! This first part boots to long mode, talks on COM1, catches CPU exceptions and ends
//! QEMU through `isa-debug-exit` with a verdict. The kernel command line (`-append`)
//! chooses what to run: `test=ok` (default), `test=panic`, `test=fault`, `test=guard`
//! (write to the stack's guard page: must fault), `test=tsc` (calibrate the TSC
//! against the PIT), `test=pci` (enumerate PCI, map an e1000's BAR0 and read its MAC
//! address from RAL0/RAH0). `app=...` runs a GAMMA application over an
//! Ethernet card (e1000 or DEC 21143) or over the Myrinet-like model on ivshmem (see
//! `net_app`).
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

extern crate alloc;

mod app;
mod boot;
mod cheetah_app;
mod clock;
mod exit;
mod fwcfg;
mod hal;
mod heap;
mod idt;
mod intr;
mod ivshmem;
mod lfc_app;
mod pci;
mod port;
mod pvh;
mod qnix_app;
mod serial;
mod tsc;
mod udp;

use exit::{exit, Verdict};

/// Entered from the boot code in long mode with the `hvm_start_info` address.
#[no_mangle]
extern "C" fn rust_main(start_info: u32) -> ! {
    boot::guard_stack();
    serial::init();
    idt::init();
    let cmdline = pvh::cmdline(start_info).unwrap_or("");
    println!("volley unikernel: booted, cmdline {:?}", cmdline);
    let mut ram = 0;
    pvh::memmap(start_info, |r| {
        if r.kind == 1 {
            ram += r.size;
        }
    });
    match heap::init(start_info) {
        Some((start, size)) => println!(
            "volley unikernel: {} MiB of RAM, heap {} MiB at {:#x}",
            ram >> 20,
            size >> 20,
            start
        ),
        None => println!("volley unikernel: no usable RAM in the memory map: no heap"),
    }
    if let Some(app) = pvh::arg(cmdline, "app") {
        exit(if net_app(app, cmdline) {
            Verdict::Success
        } else {
            Verdict::Failure
        });
    }
    match pvh::arg(cmdline, "test").unwrap_or("ok") {
        "ok" => {
            println!("volley unikernel: test ok");
            exit(Verdict::Success)
        }
        "panic" => panic!("deliberate panic requested on the command line"),
        "tsc" => match tsc::calibrate() {
            Some(hz) => {
                println!("volley unikernel: tsc {} MHz", hz / 1_000_000);
                // Anything from 100 MHz to 20 GHz is a clock; outside, calibration broke.
                exit(if (100_000_000..20_000_000_000).contains(&hz) {
                    Verdict::Success
                } else {
                    Verdict::Failure
                })
            }
            None => {
                println!("volley unikernel: PIT never reached terminal count");
                exit(Verdict::Failure)
            }
        },
        "pci" => {
            let mut nics = 0;
            pci::scan(|f| {
                let intr = pci::read(&f, 0x3C);
                println!(
                    "volley unikernel: pci {:02x}:{:02x}.{} {:04x}:{:04x} class {:02x} irq line {} pin {}",
                    f.bus,
                    f.dev,
                    f.func,
                    f.vendor,
                    f.device,
                    f.class,
                    intr & 0xFF,
                    (intr >> 8) & 0xFF
                );
                // Intel 82540EM (QEMU's `e1000`): map BAR0 and read the MAC from RAL0/RAH0.
                if (f.vendor, f.device) == (0x8086, 0x100E) {
                    if let Some((base, size)) = pci::memory_bar(&f, 0) {
                        pci::enable(&f);
                        let reg = |off: u64| {
                            // SAFETY: BAR0 is mapped (identity, uncached PCI hole) and
                            // RAL0/RAH0 are 32-bit registers inside it (8254x manual 13.4.62).
                            unsafe { core::ptr::read_volatile((base + off) as *const u32) }
                        };
                        let (ral, rah) = (reg(0x5400), reg(0x5404));
                        println!(
                            "volley unikernel: e1000 bar0 {:#x} ({} KiB) mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                            base,
                            size >> 10,
                            ral as u8,
                            (ral >> 8) as u8,
                            (ral >> 16) as u8,
                            (ral >> 24) as u8,
                            rah as u8,
                            (rah >> 8) as u8
                        );
                        nics += 1;
                    }
                }
            });
            exit(if nics > 0 {
                Verdict::Success
            } else {
                Verdict::Failure
            })
        }
        "guard" => {
            let guard = boot::stack_guard();
            println!(
                "volley unikernel: writing to the stack guard page at {:#x}",
                guard
            );
            // SAFETY: deliberately faulting: the page is unmapped (boot::guard_stack),
            // so the write raises #PF and the exception handler ends the run.
            unsafe { core::ptr::write_volatile(guard as *mut u64, 1) };
            println!("volley unikernel: the stack guard page is writable");
            exit(Verdict::Failure)
        }
        "fault" => {
            // SAFETY: ud2 raises #UD on purpose; the exception handler ends the run.
            unsafe { core::arch::asm!("ud2") };
            unreachable!("ud2 returned")
        }
        other => {
            println!("volley unikernel: unknown test {:?}", other);
            exit(Verdict::Failure)
        }
    }
}

/// Parses a job id: decimal, or hexadecimal after `0x`.
fn parse_job(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The number given as `name=` on the command line, `default` when absent; `None`,
/// after saying why, when it is not a number in `range` (of `unit`).
fn bounded_arg(
    cmdline: &str,
    name: &str,
    default: u64,
    range: core::ops::RangeInclusive<u64>,
    unit: &str,
) -> Option<u64> {
    match pvh::arg(cmdline, name).map(|s| s.parse::<u64>()) {
        None => Some(default),
        Some(Ok(v)) if range.contains(&v) => Some(v),
        Some(_) => {
            println!(
                "volley unikernel: {}= takes {}, {} to {}",
                name,
                unit,
                range.start(),
                range.end()
            );
            None
        }
    }
}

/// Parses a MAC address `aa:bb:cc:dd:ee:ff`.
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in mac.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// `app=NAME rank=R [job=ID]` and, for the fabric: `fabric=ethernet macs=M0,M1,...`
/// (the default: the first e1000, 82574L or 21143 found; `fabric=e1000|e1000e|tulip`
/// for one kind) or `fabric=ivshmem nodes=N`; `startup=SECONDS` how long the job
/// may take to start (20 s); `barrier=frames` keeps barriers out of NIC memory;
/// `fabric=udp` for UDP/IPv4 (see `udp_app`). Brings the NIC up and runs the
/// application.
fn net_app(app: &str, cmdline: &str) -> bool {
    let rank: u16 = match pvh::arg(cmdline, "rank").and_then(|r| r.parse().ok()) {
        Some(r) => r,
        None => {
            println!("volley unikernel: app needs rank=N");
            return false;
        }
    };
    // The job id (`job=`, decimal or 0x-hex, as VOLLEY_JOB for hosted ranks): the
    // keys are derived per job. 0 when absent.
    let job = match pvh::arg(cmdline, "job") {
        None => 0,
        Some(j) => match parse_job(j) {
            Some(j) => j,
            None => {
                println!("volley unikernel: job={:?} is not a job id", j);
                return false;
            }
        },
    };
    let Some(hz) = tsc::calibrate() else {
        println!("volley unikernel: TSC calibration failed");
        return false;
    };
    let clock = clock::TscClock::new(hz);
    // `barrier=device` (the default: in NIC memory where the device can) or `frames`;
    // every instance must agree.
    let device_barrier = match pvh::arg(cmdline, "barrier").unwrap_or("device") {
        "device" => true,
        "frames" => false,
        other => {
            println!(
                "volley unikernel: barrier={:?}: expected device or frames",
                other
            );
            return false;
        }
    };
    // `irq=on`: interrupt mode (intr.rs) on a card; `irq_interval=US` the polling
    // watchdog's delay.
    // `irq=on` takes MSI where the card has it; `irq=intx` the INTx line always.
    let (irq, msi) = match pvh::arg(cmdline, "irq").unwrap_or("off") {
        "on" => (true, true),
        "intx" => (true, false),
        "off" => (false, false),
        other => {
            println!(
                "volley unikernel: irq={:?}: expected on, intx or off",
                other
            );
            return false;
        }
    };
    // 1 ms: the APIC timer ticks at half the delay, and under TCG every tick costs tens
    // of microseconds of the program's time (a 100 µs delay made LFC's polled latency
    // 8x worse); on real hardware a shorter delay costs little.
    let Some(irq_interval_us) = bounded_arg(
        cmdline,
        "irq_interval",
        1000,
        10..=1_000_000,
        "microseconds",
    ) else {
        return false;
    };
    // How long the job may take to start: on ivshmem, for the region to be laid out
    // and every node to join; on a network, how long a node never heard from is
    // waited for (nodes booting seconds apart) before it counts as dead.
    let Some(startup) = bounded_arg(cmdline, "startup", 20, 1..=3600, "seconds") else {
        return false;
    };
    let startup = volley_core::time::Duration::from_secs(startup);
    let args = NetArgs {
        app,
        cmdline,
        rank,
        job,
        clock,
        device_barrier,
        startup,
        irq: irq.then_some((irq_interval_us, hz, msi)),
    };
    match pvh::arg(cmdline, "fabric").unwrap_or("ethernet") {
        "ethernet" => ethernet_app(args, None),
        "e1000" => ethernet_app(args, Some(Card::E1000)),
        "e1000e" => ethernet_app(args, Some(Card::E1000e)),
        "tulip" => ethernet_app(args, Some(Card::Tulip)),
        "udp" => udp_app(args),
        "ivshmem" => ivshmem_app(args),
        other => {
            println!(
                "volley unikernel: fabric {:?} is not available (ethernet, e1000, e1000e, tulip, udp and ivshmem are)",
                other
            );
            false
        }
    }
}

/// What every fabric's start-up needs from the command line.
struct NetArgs<'a> {
    app: &'a str,
    cmdline: &'a str,
    rank: u16,
    job: u64,
    clock: clock::TscClock,
    device_barrier: bool,
    /// `startup=`: how long the job may take to start.
    startup: volley_core::time::Duration,
    /// Interrupt mode: the watchdog's delay (µs), the TSC frequency, whether MSI may
    /// be used.
    irq: Option<(u64, u64, bool)>,
}

/// The Ethernet cards the kernel drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Card {
    /// Intel 82540EM (QEMU's `e1000`).
    E1000,
    /// DEC 21143 (QEMU's `tulip`), the 3c905-class Fast Ethernet card.
    Tulip,
    /// Intel 82574L (QEMU's `e1000e`): the 8254x's legacy descriptors still work.
    E1000e,
}

impl Card {
    /// PCI vendor and device id.
    fn ids(self) -> (u16, u16) {
        match self {
            Card::E1000 => (0x8086, 0x100E),
            Card::Tulip => (0x1011, 0x0019),
            Card::E1000e => (0x8086, 0x10D3),
        }
    }

    /// The memory BAR holding the registers: the 21143's BAR0 is the same CSRs in
    /// I/O space, its BAR1 in memory.
    fn bar(self) -> u8 {
        match self {
            Card::E1000 | Card::E1000e => 0,
            Card::Tulip => 1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Card::E1000 => "e1000",
            Card::Tulip => "tulip",
            Card::E1000e => "e1000e",
        }
    }
}

/// What travels over the card.
enum Over {
    /// Volley frames in Ethernet frames, addressed by the `macs=` table.
    Ethernet(alloc::vec::Vec<[u8; 6]>),
    /// Volley frames in UDP/IPv4 datagrams (smoltcp), as hosted `udp` ranks send them.
    Udp(udp::UdpArgs),
}

/// `fabric=ethernet|e1000|tulip`: raw Ethernet frames on the first card found (`want`:
/// only that kind), addressed by the `macs=` table; e1000 and 21143 nodes share one
/// LAN and one job.
fn ethernet_app(a: NetArgs<'_>, want: Option<Card>) -> bool {
    let mut macs = alloc::vec::Vec::new();
    for m in pvh::arg(a.cmdline, "macs").unwrap_or("").split(',') {
        match parse_mac(m) {
            Some(mac) => macs.push(mac),
            None => {
                println!("volley unikernel: bad MAC {:?} in macs=", m);
                return false;
            }
        }
    }
    card_app(a, want, Over::Ethernet(macs))
}

/// `fabric=udp ip=A.B.C.D/P [gw=A.B.C.D] peers=IP:PORT,... [nic=e1000|tulip]`: UDP/IPv4
/// on the first card found; `peers=` lists every rank's address in rank order, ours
/// included (we bind its port).
fn udp_app(a: NetArgs<'_>) -> bool {
    let (ip, prefix) = match pvh::arg(a.cmdline, "ip")
        .and_then(|s| s.split_once('/'))
        .and_then(|(ip, p)| Some((udp::parse_ipv4(ip)?, p.parse::<u8>().ok()?)))
    {
        Some((ip, p)) if (1..=32).contains(&p) => (ip, p),
        _ => {
            println!("volley unikernel: fabric=udp needs ip=A.B.C.D/PREFIX");
            return false;
        }
    };
    let gateway = match pvh::arg(a.cmdline, "gw").map(udp::parse_ipv4) {
        None => None,
        Some(Some(g)) => Some(g),
        Some(None) => {
            println!("volley unikernel: gw= is not an IPv4 address");
            return false;
        }
    };
    let mut peers = alloc::vec::Vec::new();
    for p in pvh::arg(a.cmdline, "peers").unwrap_or("").split(',') {
        match udp::parse_endpoint(p) {
            Some(e) => peers.push(e),
            None => {
                println!("volley unikernel: bad peer {:?} in peers= (IP:PORT)", p);
                return false;
            }
        }
    }
    if a.rank as usize >= peers.len() {
        println!(
            "volley unikernel: rank={} but peers= lists {} ranks",
            a.rank,
            peers.len()
        );
        return false;
    }
    let want = match pvh::arg(a.cmdline, "nic") {
        None => None,
        Some("e1000") => Some(Card::E1000),
        Some("tulip") => Some(Card::Tulip),
        Some("e1000e") => Some(Card::E1000e),
        Some(other) => {
            println!(
                "volley unikernel: nic={:?}: expected e1000, e1000e or tulip",
                other
            );
            return false;
        }
    };
    card_app(
        a,
        want,
        Over::Udp(udp::UdpArgs {
            ip,
            prefix,
            gateway,
            peers,
        }),
    )
}

/// Finds the card (`want`: only that kind), starts its driver and runs the application
/// over it as `over` says.
fn card_app(a: NetArgs<'_>, want: Option<Card>, over: Over) -> bool {
    let mut found = None;
    pci::scan(|f| {
        for card in [Card::E1000, Card::E1000e, Card::Tulip] {
            if found.is_none()
                && want.is_none_or(|w| w == card)
                && (f.vendor, f.device) == card.ids()
            {
                if let Some(bar) = pci::memory_bar(&f, card.bar()) {
                    pci::enable(&f);
                    found = Some((card, bar, f));
                }
            }
        }
    });
    let Some((card, (base, size), function)) = found else {
        println!(
            "volley unikernel: no {} found",
            want.map_or("e1000, e1000e or tulip", Card::name)
        );
        return false;
    };
    // SAFETY: the card's register BAR just enabled, inside the mapped PCI hole, used
    // only by its driver from here on (and its interrupt registers by `card_irq`).
    let mmio = unsafe { hal::MemBar::new(base, size) };
    let irq = match a.irq {
        None => None,
        Some((interval_us, tsc_hz, msi)) => {
            if !intr::init() {
                println!("volley unikernel: irq=on: no usable local APIC");
                return false;
            }
            IRQ_CARD.store(
                base << 8 | card as u64,
                core::sync::atomic::Ordering::SeqCst,
            );
            IRQ_SIZE.store(size, core::sync::atomic::Ordering::SeqCst);
            // MSI where the card has it (the 82574L), else its INTx line through the
            // I/O APIC.
            let how = if msi && pci::enable_msi(&function, intr::apic_id(), intr::NIC_VECTOR) {
                alloc::format!("MSI, vector {:#x}", intr::NIC_VECTOR)
            } else {
                let Some(line) = pci::intx_irq(&function) else {
                    println!("volley unikernel: irq=on: the card has no interrupt line");
                    return false;
                };
                intr::route(line, intr::NIC_VECTOR);
                alloc::format!("I/O APIC pin {}", line)
            };
            println!(
                "volley unikernel: interrupt mode: {} on {}, watchdog {} us",
                card.name(),
                how,
                interval_us
            );
            Some(app::Irq {
                card: card_irq,
                interval_us,
                tsc_hz,
            })
        }
    };
    let mut dma = hal::BumpDma::default();
    let macs: &[[u8; 6]] = match &over {
        Over::Ethernet(m) => m,
        Over::Udp(_) => &[],
    };
    match card {
        Card::E1000 | Card::E1000e => {
            let model = if card == Card::E1000e {
                volley_e1000::Model::I82574
            } else {
                volley_e1000::Model::I8254x
            };
            match volley_e1000::E1000::with_model(model, mmio, &mut dma, macs) {
                Ok(nic) => over_card(a, nic, card, over, irq, app::e1000_stats),
                Err(e) => {
                    println!("volley unikernel: {}: {}", card.name(), e);
                    false
                }
            }
        }
        Card::Tulip => match volley_tulip::Tulip::new(mmio, &mut dma, macs) {
            Ok(nic) => over_card(a, nic, card, over, irq, app::tulip_stats),
            Err(e) => {
                println!("volley unikernel: tulip: {}", e);
                false
            }
        },
    }
}

/// The card in interrupt mode: its register BAR (base << 8 | `Card`) and size, for
/// the interrupt handler's `card_irq`.
static IRQ_CARD: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static IRQ_SIZE: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The card's receive interrupt (intr.rs's `CardOp`): 0 masks, 1 unmasks, 2
/// acknowledges (and says whether a cause was pending).
fn card_irq(op: u8) -> bool {
    use volley_hal::RxInterrupt;
    let v = IRQ_CARD.load(core::sync::atomic::Ordering::SeqCst);
    let size = IRQ_SIZE.load(core::sync::atomic::Ordering::SeqCst);
    // SAFETY: the card's mapped register BAR; only its interrupt mask and cause
    // registers are touched here, which the driver leaves alone after start-up.
    let mut bar = unsafe { hal::MemBar::new(v >> 8, size) };
    fn drive<T: RxInterrupt<hal::MemBar>>(bar: &mut hal::MemBar, op: u8) -> bool {
        match op {
            0 | 1 => {
                T::set_rx_interrupt(bar, op == 1);
                true
            }
            _ => T::ack_interrupt(bar),
        }
    }
    if v as u8 == Card::Tulip as u8 {
        drive::<volley_tulip::Tulip<hal::MemBar>>(&mut bar, op)
    } else {
        drive::<volley_e1000::E1000<hal::MemBar>>(&mut bar, op)
    }
}

/// Runs the application over a started card whose counters `stats` prints.
fn over_card<N: volley_core::phy::Device + volley_hal::EthernetNic>(
    a: NetArgs<'_>,
    mut nic: N,
    card: Card,
    over: Over,
    irq: Option<app::Irq>,
    stats: fn(&mut N),
) -> bool {
    let mac = nic.mac();
    let (nodes, udp) = match over {
        Over::Ethernet(macs) => {
            println!(
                "volley unikernel: {} mac {:02x?}, rank {} of {}",
                card.name(),
                mac,
                a.rank,
                macs.len()
            );
            if macs.get(a.rank as usize) != Some(&mac) {
                println!(
                    "volley unikernel: my MAC {:02x?} is not entry {} of macs=",
                    mac, a.rank
                );
                return false;
            }
            (macs.len() as u16, None)
        }
        Over::Udp(u) => {
            println!(
                "volley unikernel: {} mac {:02x?}, udp {}/{} port {}, rank {} of {}",
                card.name(),
                mac,
                u.ip,
                u.prefix,
                u.peers[a.rank as usize].1,
                a.rank,
                u.peers.len()
            );
            (u.peers.len() as u16, Some(u))
        }
    };
    let Some(u) = udp else {
        if a.app == "rawpong" {
            return app::rawpong(&mut nic, &a.clock, a.rank);
        }
        return app::run(
            a.app,
            nic,
            app::Fabric::Network,
            a.clock,
            a.rank,
            nodes,
            a.job,
            a.device_barrier,
            a.startup,
            irq,
            stats,
        );
    };
    use volley_core::gamma::Clock;
    let Some(mut fabric) = udp::UdpFabric::new(nic, &u, a.rank, a.clock.now()) else {
        println!("volley unikernel: udp: cannot bind the port or set the route");
        return false;
    };
    if a.app == "rawpong" {
        return app::rawpong(&mut fabric, &a.clock, a.rank);
    }
    app::run(
        a.app,
        fabric,
        app::Fabric::Network,
        a.clock,
        a.rank,
        nodes,
        a.job,
        a.device_barrier,
        a.startup,
        irq,
        move |f: &mut udp::UdpFabric<N>| {
            let s = f.stats();
            println!(
                "volley unikernel: udp rx {} tx {} foreign {} socket full {} card full {}",
                s.rx, s.tx, s.rx_foreign, s.tx_full, s.tx_dropped
            );
            stats(f.nic_mut());
        },
    )
}

fn ivshmem_app(a: NetArgs<'_>) -> bool {
    let NetArgs {
        app,
        cmdline,
        rank,
        job,
        clock,
        device_barrier,
        startup,
        irq,
    } = a;
    let nodes: u16 = match pvh::arg(cmdline, "nodes").and_then(|n| n.parse().ok()) {
        Some(n) if (1..=volley_myri::MAX_NODES as u16).contains(&n) && rank < n => n,
        _ => {
            println!(
                "volley unikernel: fabric=ivshmem needs nodes=N (1 to {}) above rank={}",
                volley_myri::MAX_NODES,
                rank
            );
            return false;
        }
    };
    let Some((shared, function)) = ivshmem::find() else {
        println!("volley unikernel: no ivshmem-plain device (-device ivshmem-plain,memdev=...)");
        return false;
    };
    // Interrupt mode: the doorbell device's MSI-X vector wakes a halted wait.
    let doorbell = match irq {
        None => None,
        Some((interval_us, tsc_hz, _)) => {
            if !intr::init() {
                println!("volley unikernel: irq=on: no usable local APIC");
                return false;
            }
            let Some(regs) = ivshmem::doorbell(&function, intr::apic_id(), intr::NIC_VECTOR) else {
                println!(
                    "volley unikernel: irq=on over ivshmem needs -device ivshmem-doorbell (an ivshmem server's region with MSI-X), not ivshmem-plain"
                );
                return false;
            };
            println!(
                "volley unikernel: interrupt mode: ivshmem doorbell on MSI-X, vector {:#x}, watchdog {} us",
                intr::NIC_VECTOR,
                interval_us
            );
            Some((
                regs,
                app::Irq {
                    card: ivshmem::doorbell_irq,
                    interval_us,
                    tsc_hz,
                },
            ))
        }
    };
    if app == "flagpong" {
        return ivshmem::flagpong(shared, &clock, rank);
    }
    let Ok(nic) = ivshmem::open(shared, rank, nodes, job, &clock, startup) else {
        return false;
    };
    if let Some((regs, irq)) = doorbell {
        return app::run(
            app,
            ivshmem::Doorbells::new(nic, regs),
            app::Fabric::SharedMemory,
            clock,
            rank,
            nodes,
            job,
            device_barrier,
            startup,
            Some(irq),
            |d: &mut ivshmem::Doorbells| {
                ivshmem_stats(d.nic());
                println!(" doorbells rung {}", d.rung);
            },
        );
    }
    app::run(
        app,
        nic,
        app::Fabric::SharedMemory,
        clock,
        rank,
        nodes,
        job,
        device_barrier,
        startup,
        None,
        |nic: &mut volley_myri::MyriNic| {
            ivshmem_stats(nic);
            println!();
        },
    )
}

/// The NIC model's counters, the start of a console line the caller ends.
fn ivshmem_stats(nic: &volley_myri::MyriNic) {
    let s = nic.stats();
    print!(
        "volley unikernel: ivshmem tx {} from send slots {} rx {} no-credit {} corrupt {} board tx {} rx {}",
        s.tx_frames, s.tx_pooled, s.rx_frames, s.no_credit, s.corrupt, s.board_tx, s.board_rx
    );
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("volley unikernel: PANIC: {}", info);
    exit(Verdict::Failure)
}
