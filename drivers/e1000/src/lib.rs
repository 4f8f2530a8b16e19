//! `volley-e1000`: a driver for the Intel 8254x family (QEMU's `e1000` is an 82540EM),
//! written from Intel's *PCI/PCI-X Family of Gigabit Ethernet Controllers Software
//! Developer's Manual* (8254x SDM; section numbers below), and for the PCIe 82574L
//! (QEMU's `e1000e`), which keeps the 8254x's registers and legacy descriptors
//! (*82574 GbE Controller Family Datasheet*: the few differences are in [`Model`]). It implements the core's
//! device trait: Volley frames travel as the payload of Ethernet frames of type
//! [`ETHERTYPE`], fabric address *n* being the MAC address in slot *n* of the table
//! given at start.
//!
//! Polled, legacy descriptors, one buffer of [`BUF_SIZE`] bytes per descriptor, all
//! allocated once at start from the platform's [`DmaAlloc`]: nothing is allocated or
//! logged per packet. Received frames are lent in place; the receive tail register is
//! written once per batch, the transmit tail once per frame. The receive control
//! register is written once (QEMU's 8254x model holds reception off for about a second
//! after each write, measured with QEMU 7.2; its 82574L model starts receiving at once).
//!
//! Send slots: [`POOL_SLOTS`] more DMA buffers that a program fills itself (LFC's
//! `lfc_send_alloc`). A frame from one goes out as a chain of legacy descriptors (SDM
//! 3.3.3: the packet is the data of every descriptor up to the one with EOP): the
//! Ethernet and Volley headers in the descriptor's own buffer, the payload where the
//! program wrote it, and the tag, so the packet is never copied by the CPU.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

use core::sync::atomic::{fence, Ordering};

use volley_core::phy::{Capabilities, Device, SendPool};
use volley_core::time::Instant;
use volley_core::NodeAddr;

pub use volley_hal::{
    Dma, DmaAlloc, EthernetNic, FrameRing, Mmio, PhysAddr, RingRx, RingTx, RxInterrupt,
};

#[cfg(test)]
mod tests;

use volley_hal::ether;
pub use volley_hal::ether::{ETHERTYPE, MTU};
/// Receive descriptors.
pub const RX_DESCS: usize = 64;
/// Transmit descriptors.
pub const TX_DESCS: usize = 64;
/// Bytes per packet buffer (RCTL.BSIZE = 00b: 2048).
pub const BUF_SIZE: usize = 2048;
/// Send slots a program fills in place ([`volley_core::phy::SendPool::slot`]).
pub const POOL_SLOTS: usize = 64;
/// Bytes per send slot.
pub const POOL_SLOT: usize = 1024;
/// Where a chained frame's tag lies in its descriptor's own buffer (after the headers).
const TAIL_AT: usize = BUF_SIZE / 2;
/// Most peers in the MAC table.
pub const MAX_PEERS: usize = 64;
/// Most multicast groups joined at once.
pub const MAX_GROUPS: usize = 8;
const ETH_HEADER: usize = ether::HEADER;
/// Receive descriptors handed back before the tail register is written.
const RX_BATCH: usize = 16;

/// Register offsets (8254x SDM 13.4).
mod reg {
    pub const CTRL: usize = 0x0000;
    pub const STATUS: usize = 0x0008;
    pub const ICR: usize = 0x00C0;
    pub const IMS: usize = 0x00D0;
    pub const IMC: usize = 0x00D8;
    pub const RCTL: usize = 0x0100;
    pub const TCTL: usize = 0x0400;
    pub const TIPG: usize = 0x0410;
    pub const RDBAL: usize = 0x2800;
    pub const RDBAH: usize = 0x2804;
    pub const RDLEN: usize = 0x2808;
    pub const RDH: usize = 0x2810;
    pub const RDT: usize = 0x2818;
    pub const TDBAL: usize = 0x3800;
    pub const TDBAH: usize = 0x3804;
    pub const TDLEN: usize = 0x3808;
    pub const TDH: usize = 0x3810;
    pub const TDT: usize = 0x3818;
    pub const CRCERRS: usize = 0x4000;
    pub const MPC: usize = 0x4010;
    pub const GPRC: usize = 0x4074;
    pub const GPTC: usize = 0x4080;
    pub const MTA: usize = 0x5200;
    pub const GCR: usize = 0x5B00;
    pub const RAL0: usize = 0x5400;
    pub const RAH0: usize = 0x5404;
}

const CTRL_ASDE: u32 = 1 << 5;
const CTRL_SLU: u32 = 1 << 6;
const CTRL_RST: u32 = 1 << 26;
const RCTL_EN: u32 = 1 << 1;
const RCTL_BAM: u32 = 1 << 15;
const RCTL_SECRC: u32 = 1 << 26;
const TCTL_EN: u32 = 1 << 1;
const TCTL_PSP: u32 = 1 << 3;
/// Collision threshold 0x0F and full-duplex collision distance 0x40 (SDM 13.4.33).
const TCTL_CT_COLD: u32 = (0x0F << 4) | (0x40 << 12);
/// Which member of the family the driver runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// 82540EM and the other PCI/PCI-X 8254x parts (QEMU's `e1000`).
    I8254x,
    /// The PCIe 82574L (QEMU's `e1000e`).
    I82574,
}

impl Model {
    /// Transmit inter-packet gap: IPGT 10 on the 8254x (SDM 13.4.34), 8 on the 82574
    /// (its datasheet's TIPG default); IPGR1 8 and IPGR2 6 on both.
    fn tipg(self) -> u32 {
        let ipgt = match self {
            Model::I8254x => 10,
            Model::I82574 => 8,
        };
        ipgt | (8 << 10) | (6 << 20)
    }
}

/// GCR bit 22: reserved, written as 1b when the 82574 is initialised (datasheet, GCR).
const GCR_82574_INIT: u32 = 1 << 22;
const RX_DD: u8 = 1 << 0;
const RX_EOP: u8 = 1 << 1;
const TX_CMD_EOP: u8 = 1 << 0;
const TX_CMD_IFCS: u8 = 1 << 1;
const TX_CMD_RS: u8 = 1 << 3;
const TX_DD: u8 = 1 << 0;

/// Why the driver could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The device did not come out of reset.
    ResetTimeout,
    /// The platform had no DMA memory left.
    NoDmaMemory,
    /// The receive address register holds no valid MAC address.
    NoMacAddress,
    /// More peers than [`MAX_PEERS`].
    TooManyPeers,
    /// More multicast groups than [`MAX_GROUPS`], or not a multicast address.
    BadGroup,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::ResetTimeout => "e1000 did not come out of reset",
            Error::NoDmaMemory => "no DMA memory for the e1000 rings",
            Error::NoMacAddress => "e1000 has no valid MAC address in RAL0/RAH0",
            Error::TooManyPeers => "too many peers for the MAC table",
            Error::BadGroup => "not a multicast address, or too many groups",
        })
    }
}

impl core::error::Error for Error {}

/// Counters: the driver's own and the NIC's (SDM 13.7, read-to-clear, accumulated here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Volley frames received.
    pub rx_frames: u64,
    /// Volley frames sent.
    pub tx_frames: u64,
    /// Frames dropped: other Ethernet type or destination, or malformed.
    pub rx_filtered: u64,
    /// Frames with receive errors, or not fitting one buffer.
    pub rx_errors: u64,
    /// Transmit attempts with no free descriptor.
    pub tx_ring_full: u64,
    /// Volley frames sent from a send slot (a descriptor chain, no copy).
    pub tx_pooled: u64,
    /// Whole frames received through [`EthernetNic`] (an IP stack's).
    pub rx_raw: u64,
    /// Whole frames sent through [`EthernetNic`].
    pub tx_raw: u64,
    /// NIC: good packets received (GPRC).
    pub hw_rx_good: u64,
    /// NIC: good packets transmitted (GPTC).
    pub hw_tx_good: u64,
    /// NIC: packets missed for want of descriptors (MPC).
    pub hw_rx_missed: u64,
    /// NIC: CRC errors (CRCERRS).
    pub hw_crc_errors: u64,
}

/// An e1000 carrying Volley frames.
#[derive(Debug)]
pub struct E1000<M: Mmio> {
    mmio: M,
    rx_descs: Dma,
    rx_bufs: Dma,
    tx_descs: Dma,
    tx_bufs: Dma,
    tx_pool: Dma,
    rx_next: usize,
    rx_unposted: usize,
    tx_next: usize,
    tx_clean: usize,
    model: Model,
    mac: [u8; 6],
    peers: [[u8; 6]; MAX_PEERS],
    npeers: usize,
    groups: [[u8; 6]; MAX_GROUPS],
    ngroups: usize,
    stats: Stats,
}

// SAFETY: the DMA pointers are owned by this driver alone (DmaAlloc's contract).
unsafe impl<M: Mmio + Send> Send for E1000<M> {}

/// Reads byte `off` of descriptor `i` of a ring.
fn desc_u8(ring: &Dma, i: usize, off: usize) -> u8 {
    // Checked in release builds too: an index past the ring is a driver bug, and a
    // panic is better than a read outside the DMA block.
    assert!(
        off < 16 && i * 16 + off < ring.len,
        "descriptor index out of range"
    );
    // SAFETY: in bounds (checked above) of DMA memory owned by the driver; volatile
    // because the NIC writes it.
    unsafe { core::ptr::read_volatile(ring.virt.as_ptr().add(i * 16 + off)) }
}

fn desc_u16(ring: &Dma, i: usize, off: usize) -> u16 {
    u16::from_le_bytes([desc_u8(ring, i, off), desc_u8(ring, i, off + 1)])
}

/// Writes descriptor `i` of a ring (16 bytes, little-endian as the NIC reads them).
fn desc_write(ring: &Dma, i: usize, bytes: [u8; 16]) {
    assert!(i * 16 + 16 <= ring.len, "descriptor index out of range");
    // SAFETY: in bounds (checked above); the driver owns this descriptor at this point.
    unsafe { core::ptr::write_volatile(ring.virt.as_ptr().add(i * 16) as *mut [u8; 16], bytes) };
}

fn desc_set_u8(ring: &Dma, i: usize, off: usize, v: u8) {
    assert!(
        off < 16 && i * 16 + off < ring.len,
        "descriptor index out of range"
    );
    // SAFETY: in bounds (checked above), as in `desc_u8`.
    unsafe { core::ptr::write_volatile(ring.virt.as_ptr().add(i * 16 + off), v) };
}

/// Packet buffer `i`, for reading. Only for a buffer whose descriptor the driver owns,
/// so nothing writes it meanwhile.
fn buf(bufs: &Dma, i: usize) -> &[u8] {
    // SAFETY: from the driver's DmaAlloc; the NIC does not write a buffer whose
    // descriptor the driver owns (callers' contract).
    unsafe { bufs.slot(i, BUF_SIZE) }
}

/// Packet buffer `i`, for writing.
///
/// # Safety
///
/// The driver must own descriptor `i` (the NIC will not read the buffer before the
/// driver hands it over) and no other slice of this buffer may be alive.
// DMA memory is written through a shared handle by design: ownership comes from the
// descriptor protocol, which the `# Safety` contract hands to the caller.
#[allow(clippy::mut_from_ref)]
unsafe fn buf_mut(bufs: &Dma, i: usize) -> &mut [u8] {
    // SAFETY: the caller's contract is `slot_mut`'s.
    unsafe { bufs.slot_mut(i, BUF_SIZE) }
}

/// A descriptor pointing at buffer `i`, with `status` (the rest zero).
fn desc_for(bufs: &Dma, i: usize, status: u8) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&(bufs.phys.0 + (i * BUF_SIZE) as u64).to_le_bytes());
    d[12] = status;
    d
}

/// Points every descriptor of a ring at its buffer; returns the ring's bus address.
fn init_ring(descs: &Dma, bufs: &Dma, n: usize, status: u8) -> u64 {
    for i in 0..n {
        desc_write(descs, i, desc_for(bufs, i, status));
    }
    descs.phys.0
}

impl<M: Mmio> E1000<M> {
    /// Resets and starts the NIC behind `mmio`, with rings from `dma`. `peers[n]` is
    /// the MAC address of fabric address `n`.
    pub fn new(mmio: M, dma: &mut impl DmaAlloc, peers: &[[u8; 6]]) -> Result<Self, Error> {
        E1000::with_model(Model::I8254x, mmio, dma, peers)
    }

    /// As [`E1000::new`], for family member `model`.
    pub fn with_model(
        model: Model,
        mut mmio: M,
        dma: &mut impl DmaAlloc,
        peers: &[[u8; 6]],
    ) -> Result<Self, Error> {
        if peers.len() > MAX_PEERS {
            return Err(Error::TooManyPeers);
        }
        // Reset (SDM 14.4): mask interrupts, set CTRL.RST, wait for it to clear.
        mmio.write32(reg::IMC, u32::MAX);
        let ctrl = mmio.read32(reg::CTRL);
        mmio.write32(reg::CTRL, ctrl | CTRL_RST);
        let mut spins = 0u32;
        while mmio.read32(reg::CTRL) & CTRL_RST != 0 {
            spins += 1;
            if spins > 1_000_000 {
                return Err(Error::ResetTimeout);
            }
        }
        mmio.write32(reg::IMC, u32::MAX);
        let _ = mmio.read32(reg::ICR);
        if model == Model::I82574 {
            let gcr = mmio.read32(reg::GCR);
            mmio.write32(reg::GCR, gcr | GCR_82574_INIT);
        }
        // Link up, speed detection automatic (SDM 14.5).
        let ctrl = mmio.read32(reg::CTRL);
        mmio.write32(reg::CTRL, ctrl | CTRL_SLU | CTRL_ASDE);
        // The MAC the NIC was given (EEPROM, or QEMU's `mac=`), never a constant.
        let (ral, rah) = (mmio.read32(reg::RAL0), mmio.read32(reg::RAH0));
        let mac = [
            ral as u8,
            (ral >> 8) as u8,
            (ral >> 16) as u8,
            (ral >> 24) as u8,
            rah as u8,
            (rah >> 8) as u8,
        ];
        if rah & (1 << 31) == 0 || mac == [0; 6] {
            return Err(Error::NoMacAddress);
        }
        for i in 0..128 {
            mmio.write32(reg::MTA + 4 * i, 0);
        }
        let rx_descs = dma.alloc(RX_DESCS * 16).ok_or(Error::NoDmaMemory)?;
        let rx_bufs = dma.alloc(RX_DESCS * BUF_SIZE).ok_or(Error::NoDmaMemory)?;
        let tx_descs = dma.alloc(TX_DESCS * 16).ok_or(Error::NoDmaMemory)?;
        let tx_bufs = dma.alloc(TX_DESCS * BUF_SIZE).ok_or(Error::NoDmaMemory)?;
        let tx_pool = dma
            .alloc(POOL_SLOTS * POOL_SLOT)
            .ok_or(Error::NoDmaMemory)?;
        let mut table = [[0u8; 6]; MAX_PEERS];
        table[..peers.len()].copy_from_slice(peers);
        let mut nic = E1000 {
            mmio,
            rx_descs,
            rx_bufs,
            tx_descs,
            tx_bufs,
            tx_pool,
            rx_next: 0,
            rx_unposted: 0,
            tx_next: 0,
            tx_clean: 0,
            model,
            mac,
            peers: table,
            npeers: peers.len(),
            groups: [[0; 6]; MAX_GROUPS],
            ngroups: 0,
            stats: Stats::default(),
        };
        nic.start_rx();
        nic.start_tx();
        Ok(nic)
    }

    /// Receive ring and buffers (SDM 14.4).
    fn start_rx(&mut self) {
        let base = init_ring(&self.rx_descs, &self.rx_bufs, RX_DESCS, 0);
        self.set_ring(
            [reg::RDBAL, reg::RDBAH, reg::RDLEN, reg::RDH],
            base,
            RX_DESCS,
        );
        // All descriptors but one belong to the NIC.
        self.mmio.write32(reg::RDT, (RX_DESCS - 1) as u32);
        fence(Ordering::SeqCst);
        // Once only: every write holds reception off for a while under QEMU.
        self.mmio
            .write32(reg::RCTL, RCTL_EN | RCTL_BAM | RCTL_SECRC);
    }

    /// Transmit ring (SDM 14.5); every descriptor starts done, that is free.
    fn start_tx(&mut self) {
        let base = init_ring(&self.tx_descs, &self.tx_bufs, TX_DESCS, TX_DD);
        self.set_ring(
            [reg::TDBAL, reg::TDBAH, reg::TDLEN, reg::TDH],
            base,
            TX_DESCS,
        );
        self.mmio.write32(reg::TDT, 0);
        self.mmio.write32(reg::TIPG, self.model.tipg());
        self.mmio
            .write32(reg::TCTL, TCTL_EN | TCTL_PSP | TCTL_CT_COLD);
    }

    /// Base address (low, high), length and head registers of a ring.
    fn set_ring(&mut self, [bal, bah, len, head]: [usize; 4], base: u64, descs: usize) {
        self.mmio.write32(bal, base as u32);
        self.mmio.write32(bah, (base >> 32) as u32);
        self.mmio.write32(len, (descs * 16) as u32);
        self.mmio.write32(head, 0);
    }

    /// This NIC's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Accepts frames sent to multicast address `group`: sets its bit in the multicast
    /// table array (SDM 13.4.22 / 13.5.1: with RCTL.MO = 00b the index is bits 47:36
    /// of the address) and in the driver's own filter.
    pub fn join_multicast(&mut self, group: [u8; 6]) -> Result<(), Error> {
        if group[0] & 1 == 0 || self.ngroups == MAX_GROUPS {
            return Err(Error::BadGroup);
        }
        if self.groups[..self.ngroups].contains(&group) {
            return Ok(());
        }
        let index = ((group[5] as usize) << 4) | (group[4] as usize >> 4);
        let off = reg::MTA + 4 * (index >> 5);
        let v = self.mmio.read32(off);
        self.mmio.write32(off, v | 1 << (index & 31));
        self.groups[self.ngroups] = group;
        self.ngroups += 1;
        Ok(())
    }

    /// Whether the link is up (STATUS.LU).
    pub fn link_up(&self) -> bool {
        self.mmio.read32(reg::STATUS) & 2 != 0
    }

    /// Counters, the NIC's read-to-clear ones folded in.
    pub fn stats(&mut self) -> Stats {
        self.stats.hw_rx_good += self.mmio.read32(reg::GPRC) as u64;
        self.stats.hw_tx_good += self.mmio.read32(reg::GPTC) as u64;
        self.stats.hw_rx_missed += self.mmio.read32(reg::MPC) as u64;
        self.stats.hw_crc_errors += self.mmio.read32(reg::CRCERRS) as u64;
        self.stats
    }

    /// Hands the descriptors taken since the last call back to the NIC (one write).
    fn post_rx(&mut self) {
        if self.rx_unposted > 0 {
            self.rx_unposted = 0;
            fence(Ordering::SeqCst);
            // RDT = the last descriptor processed: the NIC owns everything before it.
            let last = (self.rx_next + RX_DESCS - 1) % RX_DESCS;
            self.mmio.write32(reg::RDT, last as u32);
        }
    }

    /// Whether `n` transmit descriptors are free (counting a full ring).
    fn tx_room(&mut self, n: usize) -> bool {
        self.reclaim_tx();
        let used = (self.tx_next + TX_DESCS - self.tx_clean) % TX_DESCS;
        if used + n >= TX_DESCS {
            self.stats.tx_ring_full += 1;
            return false;
        }
        true
    }

    /// Frees transmit descriptors the NIC has finished with.
    fn reclaim_tx(&mut self) {
        while self.tx_clean != self.tx_next
            && desc_u8(&self.tx_descs, self.tx_clean, 12) & TX_DD != 0
        {
            self.tx_clean = (self.tx_clean + 1) % TX_DESCS;
        }
    }
}

impl<M: Mmio> FrameRing for E1000<M> {
    fn address(&self) -> [u8; 6] {
        self.mac
    }

    fn peer(&self, dst: NodeAddr) -> Option<[u8; 6]> {
        self.peers[..self.npeers].get(dst.0 as usize).copied()
    }

    fn rx_buffer(&self, slot: usize) -> &[u8] {
        buf(&self.rx_bufs, slot)
    }

    fn tx_free(&mut self) -> bool {
        self.reclaim_tx();
        if (self.tx_next + 1) % TX_DESCS == self.tx_clean {
            self.stats.tx_ring_full += 1;
            return false;
        }
        true
    }

    fn send<R>(&mut self, raw: bool, fill: impl FnOnce(&mut [u8]) -> (R, usize)) -> R {
        let i = self.tx_next;
        // SAFETY: descriptor `i` is free (the caller checked `tx_free`: the NIC is done
        // with it and gets it back only at the TDT write below); this is the only slice.
        let b = unsafe { buf_mut(&self.tx_bufs, i) };
        let (r, total) = fill(b);
        let mut d = desc_for(&self.tx_bufs, i, 0);
        d[8..10].copy_from_slice(&(total as u16).to_le_bytes());
        d[11] = TX_CMD_EOP | TX_CMD_IFCS | TX_CMD_RS;
        desc_write(&self.tx_descs, i, d);
        self.tx_next = (i + 1) % TX_DESCS;
        // The buffer and descriptor are complete before the NIC may read them.
        fence(Ordering::SeqCst);
        self.mmio.write32(reg::TDT, self.tx_next as u32);
        if raw {
            self.stats.tx_raw += 1;
        } else {
            self.stats.tx_frames += 1;
        }
        r
    }

    fn next_frame(&mut self, raw: bool) -> Option<(usize, usize)> {
        for _ in 0..RX_DESCS {
            let i = self.rx_next;
            let status = desc_u8(&self.rx_descs, i, 12);
            if status & RX_DD == 0 {
                self.post_rx();
                return None;
            }
            // The NIC wrote the descriptor, then the status: read the rest after it.
            fence(Ordering::Acquire);
            let len = desc_u16(&self.rx_descs, i, 8) as usize;
            let errors = desc_u8(&self.rx_descs, i, 13);
            let b = &buf(&self.rx_bufs, i)[..len.min(BUF_SIZE)];
            let ok_shape =
                status & RX_EOP != 0 && errors == 0 && (ETH_HEADER..=BUF_SIZE).contains(&len);
            let groups = &self.groups[..self.ngroups];
            let ours = ok_shape
                && if raw {
                    ether::addressed_to(b, self.mac, groups)
                } else {
                    ether::accepts(b, self.mac, groups)
                };
            if ours {
                return Some((i, len));
            }
            if ok_shape {
                self.stats.rx_filtered += 1;
            } else {
                self.stats.rx_errors += 1;
            }
            self.give_back(i);
        }
        self.post_rx();
        None
    }

    fn release(&mut self, slot: usize, raw: bool) {
        if raw {
            self.stats.rx_raw += 1;
        } else {
            self.stats.rx_frames += 1;
        }
        self.give_back(slot);
    }
}

impl<M: Mmio> E1000<M> {
    /// Hands receive descriptor `i` back (the tail register is written per batch).
    fn give_back(&mut self, i: usize) {
        desc_set_u8(&self.rx_descs, i, 12, 0);
        self.rx_next = (i + 1) % RX_DESCS;
        self.rx_unposted += 1;
        if self.rx_unposted >= RX_BATCH {
            self.post_rx();
        }
    }
}

/// Receiver timer interrupt: a frame arrived (ICR/IMS bit 7, SDM 13.4.17).
const INT_RXT0: u32 = 1 << 7;

impl<M: Mmio> RxInterrupt<M> for E1000<M> {
    fn set_rx_interrupt(mmio: &mut M, on: bool) {
        if on {
            mmio.write32(reg::IMS, INT_RXT0);
        } else {
            mmio.write32(reg::IMC, u32::MAX);
        }
    }

    fn ack_interrupt(mmio: &mut M) -> bool {
        // Reading ICR clears it and deasserts the line (SDM 13.4.17).
        mmio.read32(reg::ICR) != 0
    }
}

impl<M: Mmio> Device for E1000<M> {
    type RxToken<'a>
        = RingRx<'a, Self>
    where
        Self: 'a;
    type TxToken<'a>
        = RingTx<'a, Self>
    where
        Self: 'a;

    fn receive(&mut self, _now: Instant) -> Option<RingRx<'_, Self>> {
        volley_hal::receive(self)
    }

    fn transmit(&mut self, _now: Instant, dst: NodeAddr) -> Option<RingTx<'_, Self>> {
        volley_hal::transmit(self, dst)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            pool_slots: POOL_SLOTS as u16,
            pool_slot_size: POOL_SLOT,
            ..Capabilities::new(MTU, false, false)
        }
    }

    fn send_pool(&self) -> Option<&dyn SendPool> {
        Some(self)
    }

    fn send_pool_mut(&mut self) -> Option<&mut dyn SendPool> {
        Some(self)
    }
}

/// Send slots in DMA memory the NIC gathers from: a packet is sent from where the
/// program wrote it, between a header and a tail in the driver's own buffer.
impl<M: Mmio> SendPool for E1000<M> {
    fn slot(&self, i: usize) -> Option<&[u8]> {
        // SAFETY: a send slot from the driver's DmaAlloc; the NIC only reads it.
        (i < POOL_SLOTS).then(|| unsafe { self.tx_pool.slot(i, POOL_SLOT) })
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        // SAFETY: the NIC never writes a send slot, and `&mut self` keeps any other
        // slice of ours from living meanwhile. The engine rewrites a packet only once
        // it is acknowledged, so sent: at worst a resend still queued reads new bytes,
        // which its CRC or tag then rejects at the receiver.
        (i < POOL_SLOTS).then(|| unsafe { self.tx_pool.slot_mut(i, POOL_SLOT) })
    }

    fn send_slot(
        &mut self,
        _now: Instant,
        dst: NodeAddr,
        head: &[u8],
        slot: usize,
        len: usize,
        tail: &[u8],
    ) -> bool {
        if slot >= POOL_SLOTS
            || len > POOL_SLOT
            || ETH_HEADER + head.len() > TAIL_AT
            || tail.len() > BUF_SIZE - TAIL_AT
            || head.len() + len + tail.len() > MTU
        {
            return false;
        }
        let Some(mac) = self.peer(dst) else {
            return false;
        };
        let own = self.tx_bufs.phys.0 + (self.tx_next * BUF_SIZE) as u64;
        let parts = [
            (own, ETH_HEADER + head.len()),
            (self.tx_pool.phys.0 + (slot * POOL_SLOT) as u64, len),
            (own + TAIL_AT as u64, tail.len()),
        ];
        let n = parts.iter().filter(|p| p.1 > 0).count();
        if !self.tx_room(n) {
            return false;
        }
        let i = self.tx_next;
        // SAFETY: descriptor `i` is free (`tx_room`: the NIC is done with it and gets
        // it back only at the TDT write below); this is the only slice of its buffer.
        let b = unsafe { buf_mut(&self.tx_bufs, i) };
        b[0..6].copy_from_slice(&mac);
        b[6..12].copy_from_slice(&self.mac);
        b[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        b[ETH_HEADER..ETH_HEADER + head.len()].copy_from_slice(head);
        b[TAIL_AT..TAIL_AT + tail.len()].copy_from_slice(tail);
        let mut k = 0;
        for (addr, plen) in parts.into_iter().filter(|p| p.1 > 0) {
            k += 1;
            let mut d = [0u8; 16];
            d[..8].copy_from_slice(&addr.to_le_bytes());
            d[8..10].copy_from_slice(&(plen as u16).to_le_bytes());
            // Every descriptor reports done (reclaim walks them in order); the last
            // ends the packet and has the FCS added (SDM 3.3.3.1).
            d[11] = if k == n {
                TX_CMD_EOP | TX_CMD_IFCS | TX_CMD_RS
            } else {
                TX_CMD_RS
            };
            desc_write(&self.tx_descs, self.tx_next, d);
            self.tx_next = (self.tx_next + 1) % TX_DESCS;
        }
        // Buffers and descriptors are complete before the NIC may read them.
        fence(Ordering::SeqCst);
        self.mmio.write32(reg::TDT, self.tx_next as u32);
        self.stats.tx_frames += 1;
        self.stats.tx_pooled += 1;
        true
    }
}
