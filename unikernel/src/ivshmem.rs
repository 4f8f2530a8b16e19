//! The Myrinet-like NIC model (`volley-myri`) on QEMU's `ivshmem-plain` device: BAR2 is
//! a host file every node's QEMU maps, so the nodes share the region exactly as hosted
//! ranks share a `/dev/shm` file (PLATFORM.md).
//!
//! Instance 0 lays the region out for the job (`job=` is its generation) and the others
//! join it; a region holding another job's layout, or garbage, is never joined: the
//! joining node waits for instance 0 to lay it out and says why it gave up.

use volley_core::gamma::Clock;
use volley_core::time::{Duration, Instant};
use volley_myri::{Geometry, MyriError, MyriNic, NicConfig, NodeState, Region};

use crate::clock::TscClock;
use crate::{boot, pci, println};

/// QEMU's `ivshmem-plain` (Red Hat vendor id, 1af4:1110).
const IVSHMEM: (u16, u16) = (0x1AF4, 0x1110);
/// Slots per ring: frames in flight between a pair of nodes.
const SLOTS: u32 = 16;

/// The shared memory behind the first `ivshmem-plain` device: (address, length), BAR2
/// assigned, decoded and mapped write-back.
pub fn find() -> Option<(u64, u64)> {
    let mut bar = None;
    pci::scan(|f| {
        if (f.vendor, f.device) == IVSHMEM && bar.is_none() {
            if let Some(b) = pci::memory_bar(&f, 2) {
                pci::enable_memory(&f);
                bar = Some(b);
            }
        }
    });
    let (base, len) = bar?;
    println!(
        "volley unikernel: ivshmem BAR2 at {:#x}, {} KiB",
        base,
        len >> 10
    );
    if !boot::map_write_back(base, len) {
        println!(
            "volley unikernel: ivshmem region of {} KiB is not made of 2 MiB pages: left uncached",
            len >> 10
        );
    }
    Some((base, len))
}

/// The largest slot (a power of two from 1 KiB to 64 KiB) with which `nodes` nodes fit
/// in `len` bytes: few large slots while the region allows, as hosted `shm` does.
pub fn geometry(nodes: u32, len: u64) -> Result<Geometry, MyriError> {
    let mut slot_size = 64 * 1024;
    loop {
        let geo = Geometry::new(nodes, SLOTS, slot_size)?;
        let needed = geo.region_len().unwrap_or(usize::MAX);
        if needed as u64 <= len {
            return Ok(geo);
        }
        if slot_size == 1024 {
            return Err(MyriError::TooSmall {
                needed,
                have: len as usize,
            });
        }
        slot_size /= 2;
    }
}

/// The region as the NIC model sees it.
fn region(base: u64, len: u64) -> Result<Region, MyriError> {
    // SAFETY: BAR2 of the ivshmem device, identity-mapped, used only through the NIC
    // model from here on (each `open` call is the kernel's only one); other VMs write
    // it too, which `Region` is built for.
    unsafe { Region::new(base as *mut u8, len as usize) }
}

/// Opens the job's region as instance `rank` of `nodes`: instance 0 creates it, the
/// others join it; then waits until all have joined. Gives up after `wait`, naming
/// what it waited for.
pub fn open(
    (base, len): (u64, u64),
    rank: u16,
    nodes: u16,
    job: u64,
    clock: &TscClock,
    wait: Duration,
) -> Result<MyriNic, ()> {
    let cfg = NicConfig {
        // A node whose heartbeat stops for this long is dead (its QEMU ended or hung).
        dead_after: Duration::from_secs(2),
        pid: 0,
    };
    let deadline = clock.now() + wait;
    let nic = if rank == 0 {
        let geo = geometry(nodes as u32, len).map_err(|e| {
            println!("volley unikernel: ivshmem: {}", e);
        })?;
        println!(
            "volley unikernel: ivshmem {} KiB: {} nodes, {} slots of {} B per ring",
            len >> 10,
            geo.nodes,
            geo.slots,
            geo.slot_size
        );
        MyriNic::create(region(base, len).map_err(|_| ())?, geo, 0, job, cfg).map_err(|e| {
            println!("volley unikernel: ivshmem: {}", e);
        })?
    } else {
        loop {
            match MyriNic::attach(region(base, len).map_err(|_| ())?, rank as u32, job, cfg) {
                Ok(nic) => break nic,
                Err(e @ MyriError::NotReady { .. }) if clock.now() > deadline => {
                    println!(
                        "volley unikernel: ivshmem: {} (gave up waiting for instance 0)",
                        e
                    );
                    return Err(());
                }
                Err(MyriError::NotReady { .. }) => spin(clock, Duration::from_micros(200)),
                Err(e) => {
                    println!("volley unikernel: ivshmem: {}", e);
                    return Err(());
                }
            }
        }
    };
    if nic.geometry().nodes != nodes as u32 {
        println!(
            "volley unikernel: ivshmem: the region holds {} nodes, not nodes={}",
            nic.geometry().nodes,
            nodes
        );
        return Err(());
    }
    while !nic.all_joined() {
        if clock.now() > deadline {
            println!("volley unikernel: ivshmem: instances never joined:");
            for n in 0..nodes as u32 {
                if nic.state(n) == NodeState::Absent {
                    println!("volley unikernel:   instance {}", n);
                }
            }
            return Err(());
        }
        spin(clock, Duration::from_micros(200));
    }
    Ok(nic)
}

fn spin(clock: &TscClock, d: Duration) {
    let until: Instant = clock.now() + d;
    while clock.now() < until {
        core::hint::spin_loop();
    }
}

/// The reference for the latency benchmark: instances 0 and 1 bounce a counter through
/// two words of the same region (one cache line each), no NIC model, no protocol.
/// Instance 0 prints the median one-way latency. The region must start zeroed.
pub fn flagpong((base, len): (u64, u64), clock: &TscClock, rank: u16) -> bool {
    let Ok(r) = region(base, len) else {
        return false;
    };
    let (Ok(ping), Ok(pong)) = (r.u64_at(0), r.u64_at(64)) else {
        println!("volley unikernel: flagpong: region too small");
        return false;
    };
    let (mine, theirs) = if rank == 0 {
        (ping, pong)
    } else {
        (pong, ping)
    };
    let wait = |v: u64| -> bool {
        let until = clock.now() + Duration::from_secs(20);
        let mut spins = 0u32;
        while theirs.load(core::sync::atomic::Ordering::Acquire) < v {
            spins = spins.wrapping_add(1);
            // Read the clock only now and then: the reference is the bare flag.
            if spins.is_multiple_of(1024) && clock.now() > until {
                return false;
            }
            core::hint::spin_loop();
        }
        true
    };
    let mut samples = alloc::vec::Vec::with_capacity(2000);
    for i in 1..=2200u64 {
        let t0 = clock.now();
        let ok = if rank == 0 {
            mine.store(i, core::sync::atomic::Ordering::Release);
            wait(i)
        } else {
            let ok = wait(i);
            mine.store(i, core::sync::atomic::Ordering::Release);
            ok
        };
        if !ok {
            println!("volley unikernel: flagpong: no answer to {}", i);
            return false;
        }
        if i > 200 {
            samples.push((clock.now() - t0).total_nanos() / 2);
        }
    }
    if rank == 0 {
        println!(
            "volley unikernel: flag one-way median {} ns",
            crate::app::median(&mut samples)
        );
    }
    true
}
