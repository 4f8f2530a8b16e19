//! The Myrinet-like NIC model (`volley-myri`) on QEMU's `ivshmem-plain` device: BAR2 is
//! a host file every node's QEMU maps, so the nodes share the region exactly as hosted
//! ranks share a `/dev/shm` file.
//!
//! Instance 0 lays the region out for the job (`job=` is its generation) and the others
//! join it; a region holding another job's layout, or garbage, is never joined: the
//! joining node waits for instance 0 to lay it out and says why it gave up.

use core::sync::atomic::{AtomicU64, Ordering};

use volley_core::gamma::Clock;
use volley_core::phy::{
    BarrierMembers, BarrierPoll, Board, Capabilities, Device, Liveness, NicAtomics, NicBarrier,
    SendPool,
};
use volley_core::time::{Duration, Instant};
use volley_core::NodeAddr;
use volley_myri::{Geometry, MyriError, MyriNic, NicConfig, NodeState, Region};

use crate::clock::TscClock;
use crate::{boot, pci, println};

/// QEMU's `ivshmem-plain` (Red Hat vendor id, 1af4:1110).
const IVSHMEM: (u16, u16) = (0x1AF4, 0x1110);
/// Slots per ring: frames in flight between a pair of nodes.
const SLOTS: u32 = 16;

/// The shared memory behind the first ivshmem device (`ivshmem-plain`, or
/// `ivshmem-doorbell`, whose region comes from an ivshmem server): (address, length),
/// BAR2 assigned, decoded and mapped write-back; and the device.
pub fn find() -> Option<((u64, u64), pci::Function)> {
    let mut bar = None;
    pci::scan(|f| {
        if (f.vendor, f.device) == IVSHMEM && bar.is_none() {
            if let Some(b) = pci::memory_bar(&f, 2) {
                pci::enable_memory(&f);
                bar = Some((b, f));
            }
        }
    });
    let ((base, len), function) = bar?;
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
    Some(((base, len), function))
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
        // VMs share no clock: no beacons, heartbeats alone.
        host_clock: None,
        // No doorbell interrupts between VMs: programs poll.
        interrupt: None,
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

// ------------------------------------------------------------------ doorbells

/// `ivshmem-doorbell` registers in BAR0 (QEMU's ivshmem spec): this VM's peer id, and
/// the doorbell, written `peer << 16 | vector` to raise that vector in that peer.
const IVPOSITION: u64 = 8;
const DOORBELL: u64 = 12;
/// Marks a node's host word (see `volley_myri`'s host words) as its doorbell id: the
/// ivshmem server numbers VMs in connection order, not by rank.
const ID_TAG: u64 = 0x4442_0000_0000_0000;

/// The doorbell device's register BAR. Only [`doorbell`] makes one, from the BAR it
/// assigned, so every access through it is to that device's registers.
#[derive(Debug, Clone, Copy)]
pub struct DoorbellRegs(u64);

impl DoorbellRegs {
    fn read(self, off: u64) -> u32 {
        // SAFETY: a register of the doorbell device's BAR0 (the type's invariant),
        // identity-mapped in the uncached PCI hole; reads have no side effect here.
        unsafe { core::ptr::read_volatile((self.0 + off) as *const u32) }
    }

    fn write(self, off: u64, v: u32) {
        // SAFETY: as in `read`; the doorbell register only signals the peer.
        unsafe { core::ptr::write_volatile((self.0 + off) as *mut u32, v) }
    }
}

/// The MSI-X table entry of the doorbell's vector 0 (0: none), for [`doorbell_irq`].
static MSIX_ENTRY: AtomicU64 = AtomicU64::new(0);

/// The interrupt side of `ivshmem-doorbell`: its BAR0 registers and vector 0 through
/// MSI-X at `vector` on this CPU (QEMU's doorbell device interrupts only by MSI-X).
/// `None` for an `ivshmem-plain` device (no MSI-X) or a table that cannot be placed.
pub fn doorbell(function: &pci::Function, apic_id: u8, vector: u8) -> Option<DoorbellRegs> {
    if !pci::has_msix(function) {
        return None;
    }
    let (regs, len) = pci::memory_bar(function, 0)?;
    if len < 16 {
        return None;
    }
    let entry = pci::enable_msix(function, apic_id, vector)?;
    MSIX_ENTRY.store(entry, Ordering::SeqCst);
    Some(DoorbellRegs(regs))
}

/// The doorbell's interrupt control for `intr` (op 0 mask, 1 unmask, 2 acknowledge):
/// the MSI-X entry's mask bit. A doorbell rung while masked stays pending in the
/// device and is delivered on unmasking, so none is lost; MSI needs no acknowledge.
pub fn doorbell_irq(op: u8) -> bool {
    let entry = MSIX_ENTRY.load(Ordering::SeqCst);
    if entry == 0 {
        return false;
    }
    if op < 2 {
        // SAFETY: the vector control word of the entry `doorbell` programmed.
        unsafe { core::ptr::write_volatile((entry + 12) as *mut u32, (op == 0) as u32) };
    }
    true
}

/// The Myrinet-like model with doorbells: after each transmit pass it rings every
/// node it wrote a frame to (a broadcast board frame: every node), so a node halted
/// in interrupt mode wakes for it. A node whose doorbell id is not published yet is
/// rung at a later pass (until then it finds the frame when it polls).
#[derive(Debug)]
pub struct Doorbells {
    nic: MyriNic,
    regs: DoorbellRegs,
    /// Peers' doorbell ids by rank, once read from their host words.
    ids: alloc::vec::Vec<Option<u16>>,
    due: alloc::vec::Vec<bool>,
    any_due: bool,
    /// Doorbells rung.
    pub rung: u64,
}

impl Doorbells {
    /// `nic` with the doorbell registers at `regs`; publishes this VM's doorbell id in
    /// its host word for the other nodes.
    pub fn new(nic: MyriNic, regs: DoorbellRegs) -> Doorbells {
        let me = regs.read(IVPOSITION) as u16;
        nic.publish_host(ID_TAG | me as u64, 0);
        let n = nic.geometry().nodes as usize;
        println!("volley unikernel: ivshmem doorbell id {}", me);
        Doorbells {
            nic,
            regs,
            ids: alloc::vec![None; n],
            due: alloc::vec![false; n],
            any_due: false,
            rung: 0,
        }
    }

    /// The model underneath.
    pub fn nic(&mut self) -> &mut MyriNic {
        &mut self.nic
    }

    fn mark(&mut self, node: usize) {
        if let Some(d) = self.due.get_mut(node) {
            *d = true;
            self.any_due = true;
        }
    }

    fn ring_due(&mut self) {
        self.any_due = false;
        for node in 0..self.due.len() {
            if !self.due[node] {
                continue;
            }
            if self.ids[node].is_none() {
                let (word, _) = self.nic.host(node as u32);
                if word & !0xFFFF == ID_TAG {
                    self.ids[node] = Some(word as u16);
                }
            }
            match self.ids[node] {
                Some(id) => {
                    self.due[node] = false;
                    self.regs.write(DOORBELL, (id as u32) << 16);
                    self.rung += 1;
                }
                None => self.any_due = true,
            }
        }
    }
}

impl Doorbells {
    /// After a board write: every other node has a frame to read.
    fn board_written(&mut self, written: bool) -> bool {
        if written {
            let me = self.nic.node() as usize;
            for node in (0..self.due.len()).filter(|&n| n != me) {
                self.mark(node);
            }
            // Board frames may be written by a pass with no channel to flush.
            self.ring_due();
        }
        written
    }
}

impl Device for Doorbells {
    type RxToken<'a> = <MyriNic as Device>::RxToken<'a>;
    type TxToken<'a> = <MyriNic as Device>::TxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
        self.nic.receive(now)
    }
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<Self::TxToken<'_>> {
        // Marked before the frame is written: a bell too many costs a wake-up, one
        // too few a wait for the watchdog.
        self.mark(dst.0 as usize);
        self.nic.transmit(now, dst)
    }
    fn capabilities(&self) -> Capabilities {
        self.nic.capabilities()
    }
    fn flush(&mut self, now: Instant) {
        self.nic.flush(now);
        if self.any_due {
            self.ring_due();
        }
    }
    fn transmit_parts(&mut self, now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        self.mark(dst.0 as usize);
        self.nic.transmit_parts(now, dst, parts)
    }
    fn liveness(&mut self) -> Option<&mut dyn Liveness> {
        Some(self)
    }
    fn nic_atomics(&mut self) -> Option<&mut dyn NicAtomics> {
        self.nic.nic_atomics()
    }
    fn nic_barrier(&mut self) -> Option<&mut dyn NicBarrier> {
        Some(self)
    }
    fn board(&mut self) -> Option<&mut dyn Board> {
        Some(self)
    }
    fn send_pool(&self) -> Option<&dyn SendPool> {
        Some(self)
    }
    fn send_pool_mut(&mut self) -> Option<&mut dyn SendPool> {
        Some(self)
    }
}

/// The NIC's liveness words; a node seen only through them is never vouched for.
impl Liveness for Doorbells {
    fn peer_alive(&mut self, now: Instant, peer: NodeAddr) -> bool {
        self.nic.peer_alive(now, peer)
    }
}

impl NicBarrier for Doorbells {
    fn barrier(&mut self, now: Instant, members: &BarrierMembers<'_>) -> BarrierPoll {
        // The barrier in NIC memory writes words, not frames: ring whoever waits on
        // what this call wrote. An arrival wakes the parent in the combining tree
        // (volley_myri's layout: position p's parent is (p - 1) / fan-in); a release
        // wakes every member.
        let before = self.nic.stats();
        let poll = NicBarrier::barrier(&mut self.nic, now, members);
        let after = self.nic.stats();
        if after.barrier_releases != before.barrier_releases {
            for i in (0..members.n).filter(|&i| i != members.me) {
                if let Some(a) = (members.addr)(i) {
                    self.mark(a.0 as usize);
                }
            }
        } else if after.barrier_arrivals != before.barrier_arrivals && members.me > 0 {
            let parent = (members.me - 1) / volley_myri::BARRIER_FANIN;
            if let Some(a) = (members.addr)(parent) {
                self.mark(a.0 as usize);
            }
        }
        if self.any_due {
            self.ring_due();
        }
        poll
    }
}

/// The NIC's board: every reader is rung once a frame is written.
impl Board for Doorbells {
    fn write(&mut self, now: Instant, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let written = self.nic.write(now, len, fill);
        self.board_written(written)
    }
    fn write_pooled(
        &mut self,
        now: Instant,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        let written = self.nic.write_pooled(now, head, slot, len, tail);
        self.board_written(written)
    }
    fn read(
        &mut self,
        now: Instant,
        take: &mut dyn FnMut(NodeAddr, &[u8]) -> volley_core::phy::BoardTake,
    ) -> bool {
        self.nic.read(now, take)
    }
    fn unread(&mut self, now: Instant) -> bool {
        self.nic.unread(now)
    }
}

/// The NIC's send slots: the destination is rung once a frame is sent from one.
impl SendPool for Doorbells {
    fn slot(&self, i: usize) -> Option<&[u8]> {
        self.nic.slot(i)
    }
    fn slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        self.nic.slot_mut(i)
    }
    fn send_slot(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        self.mark(dst.0 as usize);
        self.nic.send_slot(now, dst, head, slot, len, tail)
    }
}
