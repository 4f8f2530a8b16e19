//! `volley-tulip`: a driver for the DEC 21143 "Tulip" PCI Fast Ethernet controller
//! (QEMU's `-device tulip`), written from Digital's *21143 PCI/CardBus 10/100-Mb/s
//! Ethernet LAN Controller Hardware Reference Manual* (HRM; chapter names below).
//!
//! It stands in for GAMMA's first card, 3Com's 3c905: QEMU has no 3Com model, and the
//! 21143 is the same class of device, a 100 Mb/s PCI bus master that walks descriptor
//! lists in host memory. Like `volley-e1000` it implements the core's device trait,
//! Volley frames travelling as the payload of Ethernet frames of type [`ETHERTYPE`],
//! fabric address *n* being the MAC address in slot *n* of the table given at start;
//! nodes with either card share one LAN and one job.
//!
//! Polled (interrupts masked in CSR7), descriptor rings in ring mode, one buffer per
//! descriptor, everything allocated once at start from the platform's [`DmaAlloc`]:
//! nothing is allocated or logged per packet. The MAC address comes from the serial
//! ROM, checked against its CRC; the receive filter is programmed with a setup frame
//! (perfect filtering: own address, broadcast, joined groups). Received frames are
//! lent in place and their descriptors handed back one by one (the 21143 has no tail
//! register: ownership is the OWN bit); each transmit ends with a poll demand (CSR1).
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

use core::sync::atomic::{fence, Ordering};

use volley_core::phy::{Capabilities, Device};
use volley_core::time::Instant;
use volley_core::NodeAddr;
use volley_hal::ether;

pub use volley_hal::ether::{ETHERTYPE, MTU};
pub use volley_hal::{
    Dma, DmaAlloc, EthernetNic, FrameRing, Mmio, PhysAddr, RingRx, RingTx, RxInterrupt,
};

#[cfg(test)]
mod tests;

/// Receive descriptors.
pub const RX_DESCS: usize = 64;
/// Transmit descriptors.
pub const TX_DESCS: usize = 64;
/// Bytes per packet buffer: a full frame and its CRC, a multiple of a longword.
pub const BUF_SIZE: usize = 1536;
/// Most peers in the MAC table.
pub const MAX_PEERS: usize = 64;
/// Most multicast groups joined at once (the perfect filter holds 16 addresses: our
/// own, broadcast, and the groups).
pub const MAX_GROUPS: usize = 8;
/// Receive descriptors handed back before the driver checks whether reception
/// stalled for want of them.
const RX_BATCH: usize = 16;
/// Register polls before giving up on the chip (reset, setup frame).
const SPINS: u32 = 1_000_000;

/// Control and status registers: CSR*n* at byte offset 8*n* of the memory BAR (HRM,
/// "Control and Status Registers").
mod csr {
    pub const BUS_MODE: usize = 0x00; // CSR0
    pub const TX_POLL: usize = 0x08; // CSR1
    pub const RX_POLL: usize = 0x10; // CSR2
    pub const RX_LIST: usize = 0x18; // CSR3
    pub const TX_LIST: usize = 0x20; // CSR4
    pub const STATUS: usize = 0x28; // CSR5
    pub const MODE: usize = 0x30; // CSR6 (operation mode)
    pub const INTR: usize = 0x38; // CSR7 (interrupt enable)
    pub const MISSED: usize = 0x40; // CSR8 (missed frames and overflow counter)
    pub const ROM: usize = 0x48; // CSR9 (boot ROM, serial ROM and MII management)
    pub const SIA_STATUS: usize = 0x60; // CSR12
}

/// CSR0: software reset.
const BUS_SWR: u32 = 1 << 0;
/// CSR0: programmable burst length 8 longwords, cache alignment 8 longwords; descriptor
/// skip length 0 (the rings are contiguous 16-byte descriptors); little-endian.
const BUS_MODE_VALUE: u32 = (8 << 8) | (1 << 14);
/// CSR5: receive buffer unavailable (reception suspended for want of descriptors).
const STATUS_RU: u32 = 1 << 7;
/// CSR6 bits: start receive, full duplex, start transmit, port select MII/SYM,
/// heartbeat disable, store and forward, and bit 25 which must be one.
const MODE_SR: u32 = 1 << 1;
const MODE_FD: u32 = 1 << 9;
const MODE_ST: u32 = 1 << 13;
const MODE_PS: u32 = 1 << 18;
const MODE_HBD: u32 = 1 << 19;
const MODE_SF: u32 = 1 << 21;
const MODE_MBO: u32 = 1 << 25;
/// CSR9 serial-ROM lines (HRM, "Serial ROM Port"): chip select, clock, data to the
/// ROM, data from it; serial ROM selected; read operation.
const ROM_CS: u32 = 1 << 0;
const ROM_SK: u32 = 1 << 1;
const ROM_DI: u32 = 1 << 2;
const ROM_DO: u32 = 1 << 3;
const ROM_SEL: u32 = (1 << 11) | (1 << 14);
/// CSR12: 100 and 10 Mb/s link failure.
const SIA_LS100: u32 = 1 << 1;
const SIA_LS10: u32 = 1 << 2;
/// Descriptor word 0 (status): owned by the chip.
const DES0_OWN: u32 = 1 << 31;
/// RDES0: error summary, first and last descriptor of a frame; frame length (with CRC).
const RDES0_ES: u32 = 1 << 15;
const RDES0_FS: u32 = 1 << 9;
const RDES0_LS: u32 = 1 << 8;
const RDES0_FL_SHIFT: u32 = 16;
const RDES0_FL_MASK: u32 = 0x3FFF;
/// RDES1 / TDES1: end of ring.
const RDES1_RER: u32 = 1 << 25;
const TDES1_TER: u32 = 1 << 25;
/// TDES1: last and first segment, setup frame.
const TDES1_LS: u32 = 1 << 30;
const TDES1_FS: u32 = 1 << 29;
const TDES1_SET: u32 = 1 << 27;
/// TDES0: error summary.
const TDES0_ES: u32 = 1 << 15;
/// A perfect-filtering setup frame: 16 addresses of three longwords each.
const SETUP_LEN: usize = 192;
const CRC_LEN: usize = 4;
/// The serial ROM's CRC covers its first 126 bytes and sits in word 63 (HRM, "Serial
/// ROM"; the Ethernet CRC-32, its low 16 bits).
const SROM_WORDS: usize = 64;
/// Byte offset of the IEEE address in the serial ROM.
const SROM_MAC: usize = 20;

/// Why the driver could not start or change its filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The chip did not come out of software reset.
    ResetTimeout,
    /// The platform had no DMA memory left.
    NoDmaMemory,
    /// DMA memory above 4 GiB: the 21143 addresses 32 bits.
    DmaAbove4GiB,
    /// The serial ROM's CRC did not match (at 6- and at 8-bit addressing).
    BadSrom,
    /// The serial ROM holds no usable unicast MAC address.
    NoMacAddress,
    /// More peers than [`MAX_PEERS`].
    TooManyPeers,
    /// More multicast groups than [`MAX_GROUPS`], or not a multicast address.
    BadGroup,
    /// The chip did not take the setup frame (the receive filter).
    SetupTimeout,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::ResetTimeout => "21143 did not come out of reset",
            Error::NoDmaMemory => "no DMA memory for the 21143 rings",
            Error::DmaAbove4GiB => "DMA memory above 4 GiB: the 21143 addresses 32 bits",
            Error::BadSrom => "21143 serial ROM fails its CRC",
            Error::NoMacAddress => "21143 serial ROM holds no unicast MAC address",
            Error::TooManyPeers => "too many peers for the MAC table",
            Error::BadGroup => "not a multicast address, or too many groups",
            Error::SetupTimeout => "21143 did not take the setup frame",
        })
    }
}

impl core::error::Error for Error {}

/// The driver's counters, and the chip's missed-frame counter accumulated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Volley frames received.
    pub rx_frames: u64,
    /// Volley frames sent.
    pub tx_frames: u64,
    /// Frames dropped: other Ethernet type or destination.
    pub rx_filtered: u64,
    /// Frames with receive errors, or not fitting one buffer.
    pub rx_errors: u64,
    /// Transmit attempts with no free descriptor.
    pub tx_ring_full: u64,
    /// Whole frames received through [`EthernetNic`] (an IP stack's).
    pub rx_raw: u64,
    /// Whole frames sent through [`EthernetNic`].
    pub tx_raw: u64,
    /// Frames the chip reported as not sent (TDES0 error summary).
    pub tx_errors: u64,
    /// Times reception had stopped for want of descriptors and was resumed.
    pub rx_resumed: u64,
    /// Setup frames (receive filter updates) taken by the chip.
    pub setup_frames: u64,
    /// Chip: frames missed for want of descriptors (CSR8).
    pub hw_rx_missed: u64,
}

/// A 21143 carrying Volley frames.
#[derive(Debug)]
pub struct Tulip<M: Mmio> {
    mmio: M,
    rx_descs: Dma,
    rx_bufs: Dma,
    tx_descs: Dma,
    tx_bufs: Dma,
    rx_next: usize,
    rx_unchecked: usize,
    tx_next: usize,
    tx_clean: usize,
    mac: [u8; 6],
    peers: [[u8; 6]; MAX_PEERS],
    npeers: usize,
    groups: [[u8; 6]; MAX_GROUPS],
    ngroups: usize,
    stats: Stats,
}

// SAFETY: the DMA pointers are owned by this driver alone (DmaAlloc's contract).
unsafe impl<M: Mmio + Send> Send for Tulip<M> {}

/// Reads longword `word` (0..4) of descriptor `i` of a ring.
fn des_read(ring: &Dma, i: usize, word: usize) -> u32 {
    // Checked in release builds too: an index past the ring is a driver bug, and a
    // panic is better than a read outside the DMA block.
    assert!(
        word < 4 && i * 16 + word * 4 + 4 <= ring.len,
        "descriptor index out of range"
    );
    // SAFETY: in bounds (checked above) of DMA memory owned by the driver, 4-aligned
    // (4 KiB ring, 16-byte descriptors); volatile because the chip writes it.
    let v = unsafe {
        core::ptr::read_volatile(ring.virt.as_ptr().add(i * 16 + word * 4) as *const u32)
    };
    u32::from_le(v)
}

/// Writes longword `word` of descriptor `i` (little-endian, as CSR0.DBO = 0 says).
fn des_write(ring: &Dma, i: usize, word: usize, v: u32) {
    assert!(
        word < 4 && i * 16 + word * 4 + 4 <= ring.len,
        "descriptor index out of range"
    );
    // SAFETY: in bounds and aligned (as in `des_read`); the driver owns the descriptor
    // (OWN clear) or is handing it over with this very write.
    unsafe {
        core::ptr::write_volatile(
            ring.virt.as_ptr().add(i * 16 + word * 4) as *mut u32,
            v.to_le(),
        )
    };
}

/// Packet buffer `i`, for reading. Only for a buffer whose descriptor the driver owns,
/// so nothing writes it meanwhile.
fn buf(bufs: &Dma, i: usize) -> &[u8] {
    // SAFETY: from the driver's DmaAlloc; the chip does not write a buffer whose
    // descriptor the driver owns (callers' contract).
    unsafe { bufs.slot(i, BUF_SIZE) }
}

/// Packet buffer `i`, for writing.
///
/// # Safety
///
/// The driver must own descriptor `i` (the chip will not read the buffer before the
/// driver hands it over) and no other slice of this buffer may be alive.
// DMA memory is written through a shared handle by design: ownership comes from the
// descriptor protocol, which the `# Safety` contract hands to the caller.
#[allow(clippy::mut_from_ref)]
unsafe fn buf_mut(bufs: &Dma, i: usize) -> &mut [u8] {
    // SAFETY: the caller's contract is `slot_mut`'s.
    unsafe { bufs.slot_mut(i, BUF_SIZE) }
}

/// The bus address of byte `off` of a DMA block, which the chip reaches with 32 bits.
fn bus32(d: &Dma, off: usize) -> Result<u32, Error> {
    u32::try_from(d.phys.0 + off as u64).map_err(|_| Error::DmaAbove4GiB)
}

/// A 32-bit bus address known to fit (checked at start for the whole block).
fn bus(d: &Dma, off: usize) -> u32 {
    (d.phys.0 + off as u64) as u32
}

/// The serial ROM contents (`SROM_WORDS` words) read with `addr_bits`-bit addresses:
/// a 93C46-type part takes 6, a 93C66 8 (HRM, "Serial ROM Port").
fn read_srom<M: Mmio>(mmio: &mut M, addr_bits: u32) -> [u8; 2 * SROM_WORDS] {
    let mut rom = [0u8; 2 * SROM_WORDS];
    // Each write is followed by a read of CSR9: a PCI read takes longer than the
    // part's shortest clock phase.
    let put = |mmio: &mut M, v: u32| {
        mmio.write32(csr::ROM, v);
        let _ = mmio.read32(csr::ROM);
    };
    for w in 0..SROM_WORDS {
        put(mmio, ROM_SEL);
        put(mmio, ROM_SEL | ROM_CS);
        // Start bit, READ opcode 10b, then the address, most significant bit first,
        // each taken on a rising clock edge.
        let cmd = (0b110u32 << addr_bits) | w as u32;
        for bit in (0..3 + addr_bits).rev() {
            let di = if cmd >> bit & 1 != 0 { ROM_DI } else { 0 };
            put(mmio, ROM_SEL | ROM_CS | di);
            put(mmio, ROM_SEL | ROM_CS | di | ROM_SK);
            put(mmio, ROM_SEL | ROM_CS | di);
        }
        // A dummy 0, then 16 data bits, most significant first, after each rising edge.
        let mut v = 0u16;
        for _ in 0..16 {
            mmio.write32(csr::ROM, ROM_SEL | ROM_CS | ROM_SK);
            v = v << 1 | (mmio.read32(csr::ROM) & ROM_DO != 0) as u16;
            put(mmio, ROM_SEL | ROM_CS);
        }
        put(mmio, ROM_SEL);
        rom[2 * w..2 * w + 2].copy_from_slice(&v.to_le_bytes());
    }
    rom
}

/// Whether a serial ROM image carries its CRC: the Ethernet CRC-32 of bytes 0..126,
/// low 16 bits, in word 63.
fn srom_ok(rom: &[u8; 2 * SROM_WORDS]) -> bool {
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&rom[..126]);
    u16::from_le_bytes([rom[126], rom[127]]) == crc as u16
}

impl<M: Mmio> Tulip<M> {
    /// Resets and starts the chip behind `mmio` (its memory BAR), with rings from `dma`.
    /// `peers[n]` is the MAC address of fabric address `n`.
    pub fn new(mut mmio: M, dma: &mut impl DmaAlloc, peers: &[[u8; 6]]) -> Result<Self, Error> {
        if peers.len() > MAX_PEERS {
            return Err(Error::TooManyPeers);
        }
        // Software reset (HRM, CSR0): the bit reads back clear once the chip is done.
        mmio.write32(csr::BUS_MODE, BUS_SWR);
        let mut spins = 0u32;
        while mmio.read32(csr::BUS_MODE) & BUS_SWR != 0 {
            spins += 1;
            if spins > SPINS {
                return Err(Error::ResetTimeout);
            }
        }
        mmio.write32(csr::BUS_MODE, BUS_MODE_VALUE);
        // Polled: every interrupt source masked, stale status cleared.
        mmio.write32(csr::INTR, 0);
        mmio.write32(csr::STATUS, u32::MAX);
        // The MAC the card was given (its serial ROM, or QEMU's `mac=`), never a constant.
        let rom = [6, 8]
            .into_iter()
            .map(|bits| read_srom(&mut mmio, bits))
            .find(srom_ok)
            .ok_or(Error::BadSrom)?;
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&rom[SROM_MAC..SROM_MAC + 6]);
        if mac == [0; 6] || mac[0] & 1 != 0 {
            return Err(Error::NoMacAddress);
        }
        let rx_descs = dma.alloc(RX_DESCS * 16).ok_or(Error::NoDmaMemory)?;
        let rx_bufs = dma.alloc(RX_DESCS * BUF_SIZE).ok_or(Error::NoDmaMemory)?;
        let tx_descs = dma.alloc(TX_DESCS * 16).ok_or(Error::NoDmaMemory)?;
        let tx_bufs = dma.alloc(TX_DESCS * BUF_SIZE).ok_or(Error::NoDmaMemory)?;
        for d in [&rx_descs, &rx_bufs, &tx_descs, &tx_bufs] {
            bus32(d, d.len)?;
        }
        let mut table = [[0u8; 6]; MAX_PEERS];
        table[..peers.len()].copy_from_slice(peers);
        let mut nic = Tulip {
            mmio,
            rx_descs,
            rx_bufs,
            tx_descs,
            tx_bufs,
            rx_next: 0,
            rx_unchecked: 0,
            tx_next: 0,
            tx_clean: 0,
            mac,
            peers: table,
            npeers: peers.len(),
            groups: [[0; 6]; MAX_GROUPS],
            ngroups: 0,
            stats: Stats::default(),
        };
        nic.start();
        nic.load_filter()?;
        Ok(nic)
    }

    /// Lays out both rings and starts the receive and transmit processes (HRM,
    /// "Descriptor Lists": ring mode, the last descriptor marked end of ring).
    fn start(&mut self) {
        for i in 0..RX_DESCS {
            let end = if i == RX_DESCS - 1 { RDES1_RER } else { 0 };
            des_write(&self.rx_descs, i, 1, end | BUF_SIZE as u32);
            des_write(&self.rx_descs, i, 2, bus(&self.rx_bufs, i * BUF_SIZE));
            des_write(&self.rx_descs, i, 3, 0);
            des_write(&self.rx_descs, i, 0, DES0_OWN);
        }
        for i in 0..TX_DESCS {
            let end = if i == TX_DESCS - 1 { TDES1_TER } else { 0 };
            des_write(&self.tx_descs, i, 1, end);
            des_write(&self.tx_descs, i, 2, bus(&self.tx_bufs, i * BUF_SIZE));
            des_write(&self.tx_descs, i, 3, 0);
            des_write(&self.tx_descs, i, 0, 0);
        }
        fence(Ordering::SeqCst);
        self.mmio.write32(csr::RX_LIST, bus(&self.rx_descs, 0));
        self.mmio.write32(csr::TX_LIST, bus(&self.tx_descs, 0));
        self.mmio.write32(
            csr::MODE,
            MODE_SR | MODE_ST | MODE_FD | MODE_PS | MODE_HBD | MODE_SF | MODE_MBO,
        );
    }

    /// Sends a setup frame (HRM, "Setup Frame", perfect filtering) naming our address,
    /// broadcast and the joined groups; the unused entries repeat our address. Waits
    /// until the chip has taken it.
    fn load_filter(&mut self) -> Result<(), Error> {
        self.reclaim_tx();
        if (self.tx_next + 1) % TX_DESCS == self.tx_clean {
            return Err(Error::SetupTimeout);
        }
        let i = self.tx_next;
        // SAFETY: descriptor `i` is free (checked above: the chip is done with it and
        // gets it only at the OWN write below); this is the only slice of the buffer.
        let b = unsafe { buf_mut(&self.tx_bufs, i) };
        b[..SETUP_LEN].fill(0);
        let mut entries = [self.mac; 16];
        entries[1] = ether::BROADCAST;
        entries[2..2 + self.ngroups].copy_from_slice(&self.groups[..self.ngroups]);
        for (k, addr) in entries.iter().enumerate() {
            // Each address is three longwords, two address bytes in the low half of each.
            for j in 0..3 {
                b[k * 12 + j * 4] = addr[2 * j];
                b[k * 12 + j * 4 + 1] = addr[2 * j + 1];
            }
        }
        let end = if i == TX_DESCS - 1 { TDES1_TER } else { 0 };
        des_write(&self.tx_descs, i, 1, end | TDES1_SET | SETUP_LEN as u32);
        fence(Ordering::SeqCst);
        des_write(&self.tx_descs, i, 0, DES0_OWN);
        self.tx_next = (i + 1) % TX_DESCS;
        fence(Ordering::SeqCst);
        self.mmio.write32(csr::TX_POLL, 1);
        let mut spins = 0u32;
        while des_read(&self.tx_descs, i, 0) & DES0_OWN != 0 {
            spins += 1;
            if spins > SPINS {
                return Err(Error::SetupTimeout);
            }
        }
        self.stats.setup_frames += 1;
        Ok(())
    }

    /// This NIC's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Accepts frames sent to multicast address `group`: adds it to the perfect filter
    /// (a new setup frame) and to the driver's own.
    pub fn join_multicast(&mut self, group: [u8; 6]) -> Result<(), Error> {
        if group[0] & 1 == 0 || self.ngroups == MAX_GROUPS {
            return Err(Error::BadGroup);
        }
        if self.groups[..self.ngroups].contains(&group) {
            return Ok(());
        }
        self.groups[self.ngroups] = group;
        self.ngroups += 1;
        self.load_filter()
    }

    /// Whether the serial interface reports a link at 100 or 10 Mb/s (CSR12).
    pub fn link_up(&self) -> bool {
        self.mmio.read32(csr::SIA_STATUS) & (SIA_LS100 | SIA_LS10) != SIA_LS100 | SIA_LS10
    }

    /// Counters, the chip's missed-frame counter (CSR8, read-to-clear) folded in.
    pub fn stats(&mut self) -> Stats {
        self.stats.hw_rx_missed += (self.mmio.read32(csr::MISSED) & 0xFFFF) as u64;
        self.stats
    }

    /// After a batch of descriptors went back: if reception had stopped for want of
    /// them (CSR5.RU), clear the status and issue a receive poll demand (CSR2).
    fn check_rx(&mut self) {
        if self.rx_unchecked > 0 {
            self.rx_unchecked = 0;
            if self.mmio.read32(csr::STATUS) & STATUS_RU != 0 {
                self.mmio.write32(csr::STATUS, STATUS_RU);
                self.mmio.write32(csr::RX_POLL, 1);
                self.stats.rx_resumed += 1;
            }
        }
    }

    /// Hands receive descriptor `i` back to the chip.
    fn give_back(&mut self, i: usize) {
        // The buffer has been read before the chip may write it again.
        fence(Ordering::SeqCst);
        des_write(&self.rx_descs, i, 0, DES0_OWN);
        self.rx_next = (i + 1) % RX_DESCS;
        self.rx_unchecked += 1;
        if self.rx_unchecked >= RX_BATCH {
            self.check_rx();
        }
    }

    /// Frees transmit descriptors the chip has finished with.
    fn reclaim_tx(&mut self) {
        while self.tx_clean != self.tx_next {
            let status = des_read(&self.tx_descs, self.tx_clean, 0);
            if status & DES0_OWN != 0 {
                break;
            }
            // A setup frame's status is not a transmission's: only frames count.
            let control = des_read(&self.tx_descs, self.tx_clean, 1);
            if control & TDES1_SET == 0 && status & TDES0_ES != 0 {
                self.stats.tx_errors += 1;
            }
            self.tx_clean = (self.tx_clean + 1) % TX_DESCS;
        }
    }
}

impl<M: Mmio> FrameRing for Tulip<M> {
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
        // SAFETY: descriptor `i` is free (the caller checked `tx_free`: OWN clear, and
        // the chip gets it back only at the OWN write below); this is the only slice.
        let b = unsafe { buf_mut(&self.tx_bufs, i) };
        let (r, total) = fill(b);
        let end = if i == TX_DESCS - 1 { TDES1_TER } else { 0 };
        // One segment, the whole frame; the chip appends the CRC (TDES1.AC clear).
        des_write(
            &self.tx_descs,
            i,
            1,
            end | TDES1_FS | TDES1_LS | total as u32,
        );
        // Buffer and control are complete before the chip may see OWN.
        fence(Ordering::SeqCst);
        des_write(&self.tx_descs, i, 0, DES0_OWN);
        self.tx_next = (i + 1) % TX_DESCS;
        fence(Ordering::SeqCst);
        self.mmio.write32(csr::TX_POLL, 1);
        if raw {
            self.stats.tx_raw += 1;
        } else {
            self.stats.tx_frames += 1;
        }
        r
    }

    fn release(&mut self, slot: usize, raw: bool) {
        if raw {
            self.stats.rx_raw += 1;
        } else {
            self.stats.rx_frames += 1;
        }
        self.give_back(slot);
    }

    fn next_frame(&mut self, raw: bool) -> Option<(usize, usize)> {
        for _ in 0..RX_DESCS {
            let i = self.rx_next;
            let status = des_read(&self.rx_descs, i, 0);
            if status & DES0_OWN != 0 {
                self.check_rx();
                return None;
            }
            // The chip wrote the buffer, then the status: read the buffer after it.
            fence(Ordering::Acquire);
            let fl = ((status >> RDES0_FL_SHIFT) & RDES0_FL_MASK) as usize;
            let whole = status & (RDES0_FS | RDES0_LS) == RDES0_FS | RDES0_LS;
            let ok_shape = whole
                && status & RDES0_ES == 0
                && (ether::HEADER + CRC_LEN..=BUF_SIZE).contains(&fl);
            let len = fl.saturating_sub(CRC_LEN);
            let b = &buf(&self.rx_bufs, i)[..len.min(BUF_SIZE)];
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
        self.check_rx();
        None
    }
}

/// CSR5/CSR7: receive interrupt, and the normal interrupt summary that gates it.
const INT_RI: u32 = 1 << 6;
const INT_NIS: u32 = 1 << 16;
/// CSR5's write-one-to-clear status bits (0..16).
const STATUS_W1C: u32 = 0x1_FFFF;

impl<M: Mmio> RxInterrupt<M> for Tulip<M> {
    fn set_rx_interrupt(mmio: &mut M, on: bool) {
        mmio.write32(csr::INTR, if on { INT_RI | INT_NIS } else { 0 });
    }

    fn ack_interrupt(mmio: &mut M) -> bool {
        let s = mmio.read32(csr::STATUS);
        // Clearing the causes deasserts INTA (HRM, CSR5); RU stays for `check_rx`.
        mmio.write32(csr::STATUS, s & STATUS_W1C & !STATUS_RU);
        s & INT_RI != 0
    }
}

impl<M: Mmio> Device for Tulip<M> {
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
        Capabilities::new(MTU, false, false)
    }
}
