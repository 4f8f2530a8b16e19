//! The driver against a fake 21143: its CSRs, a serial ROM behind the CSR9 bit-bang
//! port (a 93C46, or a 93C66 with 8-bit addresses), the perfect filter a setup frame
//! loads, and the descriptor walking of the transmit and receive processes, over DMA
//! memory from the heap whose "physical" addresses are its virtual ones.

extern crate std;

use std::alloc::{alloc_zeroed, Layout};
use std::cell::RefCell;
use std::ptr::NonNull;
use std::rc::Rc;
use std::vec::Vec;

use super::*;
use volley_core::phy::{RxToken, TxToken};
use volley_core::sim::Pair;
use volley_core::time::Duration;

const MAC_A: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xA];
const MAC_B: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xB];

/// A serial ROM in the 21143's format: the IEEE address at byte 20, CRC in word 63.
fn srom_image(mac: [u8; 6]) -> [u16; 64] {
    let mut bytes = [0u8; 128];
    bytes[0..4].copy_from_slice(&[0x3C, 0x10, 0x4F, 0x10]);
    bytes[18] = 4; // SROM format version
    bytes[19] = 1; // one controller
    bytes[20..26].copy_from_slice(&mac);
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&bytes[..126]);
    bytes[126..128].copy_from_slice(&(crc as u16).to_le_bytes());
    std::array::from_fn(|w| u16::from_le_bytes([bytes[2 * w], bytes[2 * w + 1]]))
}

/// A 93Cx6 serial EEPROM as the data sheets describe it: on each rising clock edge
/// with chip select high it shifts in a start bit, a 2-bit opcode and the address;
/// for READ it drives a dummy 0, then shifts the word out, most significant bit first.
#[derive(Default)]
struct Eeprom {
    words: Vec<u16>,
    addr_bits: u32,
    cs: bool,
    sk: bool,
    shift: u32,
    count: u32,
    reading: bool,
    data: u16,
    dout: bool,
}

impl Eeprom {
    fn pins(&mut self, cs: bool, sk: bool, di: bool) {
        if cs && !self.cs {
            self.shift = 0;
            self.count = 0;
            self.reading = false;
            self.dout = true;
        }
        if cs && sk && !self.sk {
            if self.reading {
                self.dout = self.data & 0x8000 != 0;
                self.data <<= 1;
            } else if self.count > 0 || di {
                self.shift = self.shift << 1 | di as u32;
                self.count += 1;
                if self.count == 3 + self.addr_bits {
                    let opcode = (self.shift >> self.addr_bits) & 3;
                    let addr = (self.shift & ((1 << self.addr_bits) - 1)) as usize;
                    if opcode == 0b10 {
                        self.reading = true;
                        self.data = self.words.get(addr).copied().unwrap_or(0xFFFF);
                        self.dout = false;
                    }
                }
            }
        }
        if !cs {
            self.dout = true;
        }
        self.cs = cs;
        self.sk = sk;
    }
}

#[derive(Default)]
struct Chip {
    csr: [u32; 16],
    rom: Eeprom,
    /// Polls of CSR0 that still show the reset bit.
    resetting: u32,
    filter: [[u8; 6]; 16],
    cur_rx: u64,
    cur_tx: u64,
    /// Whether the transmit process walks its list on a poll demand (a stalled chip
    /// does not).
    stalled: bool,
    sent: Vec<Vec<u8>>,
    setups: usize,
    missed: u32,
    writes: Vec<(usize, u32)>,
}

std::thread_local! {
    /// The fake bus: (bus address, host address, length) of every DMA block.
    static BUS: RefCell<Vec<(u64, usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// What the chip sees at bus address `addr`: the host memory behind it.
fn mem<'a>(addr: u64, len: usize) -> &'a mut [u8] {
    let host = BUS.with(|b| {
        b.borrow()
            .iter()
            .find(|&&(bus, _, n)| addr >= bus && addr + len as u64 <= bus + n as u64)
            .map(|&(bus, host, _)| host + (addr - bus) as usize)
            .expect("the chip touched memory outside every DMA block")
    });
    // SAFETY: inside a live (leaked) heap block of the fake bus, checked above.
    unsafe { std::slice::from_raw_parts_mut(host as *mut u8, len) }
}

fn des(addr: u64) -> [u32; 4] {
    let b = mem(addr, 16);
    std::array::from_fn(|k| u32::from_le_bytes(b[4 * k..4 * k + 4].try_into().unwrap()))
}

fn set_des0(addr: u64, v: u32) {
    mem(addr, 4).copy_from_slice(&v.to_le_bytes());
}

impl Chip {
    fn walk_tx(&mut self) {
        if self.stalled || self.csr[6] & MODE_ST == 0 {
            return;
        }
        for _ in 0..TX_DESCS {
            let [status, control, buf1, _] = des(self.cur_tx);
            if status & DES0_OWN == 0 {
                self.csr[5] |= 1 << 2; // TU: transmit buffer unavailable
                return;
            }
            let len = (control & 0x7FF) as usize;
            if control & TDES1_SET != 0 {
                assert_eq!(len, SETUP_LEN);
                let b = mem(buf1 as u64, len);
                for (k, e) in self.filter.iter_mut().enumerate() {
                    for j in 0..3 {
                        e[2 * j] = b[k * 12 + j * 4];
                        e[2 * j + 1] = b[k * 12 + j * 4 + 1];
                    }
                }
                self.setups += 1;
            } else {
                assert_eq!(control & (TDES1_FS | TDES1_LS), TDES1_FS | TDES1_LS);
                self.sent.push(mem(buf1 as u64, len).to_vec());
            }
            set_des0(self.cur_tx, 0);
            self.cur_tx = if control & TDES1_TER != 0 {
                self.csr[4] as u64
            } else {
                self.cur_tx + 16
            };
        }
    }

    /// A frame arriving from the wire; whether it was stored in a descriptor.
    fn arrive(&mut self, frame: &[u8], status_extra: u32) -> bool {
        if self.csr[6] & MODE_SR == 0 {
            return false;
        }
        if !self.filter.iter().any(|a| frame[0..6] == *a) && frame[0..6] != [0xFF; 6] {
            return false;
        }
        let [status, control, buf1, _] = des(self.cur_rx);
        if status & DES0_OWN == 0 {
            self.csr[5] |= STATUS_RU;
            self.missed += 1;
            return false;
        }
        assert!(frame.len() + 4 <= (control & 0x7FF) as usize);
        mem(buf1 as u64, frame.len()).copy_from_slice(frame);
        let fl = (frame.len() + CRC_LEN) as u32;
        set_des0(
            self.cur_rx,
            RDES0_FS | RDES0_LS | fl << RDES0_FL_SHIFT | status_extra,
        );
        self.cur_rx = if control & RDES1_RER != 0 {
            self.csr[3] as u64
        } else {
            self.cur_rx + 16
        };
        true
    }
}

#[derive(Clone)]
struct Fake(Rc<RefCell<Chip>>);

impl Fake {
    fn new(rom: Vec<u16>, addr_bits: u32) -> Fake {
        let chip = Chip {
            rom: Eeprom {
                words: rom,
                addr_bits,
                dout: true,
                ..Eeprom::default()
            },
            ..Chip::default()
        };
        Fake(Rc::new(RefCell::new(chip)))
    }
    fn with_mac(mac: [u8; 6]) -> Fake {
        Fake::new(srom_image(mac).to_vec(), 6)
    }
    fn csr(&self, n: usize) -> u32 {
        self.0.borrow().csr[n]
    }
    fn writes_to(&self, off: usize) -> usize {
        self.0.borrow().writes.iter().filter(|w| w.0 == off).count()
    }
    fn sent(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.0.borrow_mut().sent)
    }
    fn arrive(&self, frame: &[u8]) -> bool {
        self.0.borrow_mut().arrive(frame, 0)
    }
}

impl Mmio for Fake {
    fn read32(&self, off: usize) -> u32 {
        let mut c = self.0.borrow_mut();
        match off / 8 {
            0 if c.resetting > 0 => {
                c.resetting -= 1;
                BUS_SWR
            }
            8 => std::mem::take(&mut c.missed),
            9 => (c.csr[9] & !ROM_DO) | if c.rom.dout { ROM_DO } else { 0 },
            n => c.csr[n],
        }
    }
    fn write32(&mut self, off: usize, v: u32) {
        let mut c = self.0.borrow_mut();
        c.writes.push((off, v));
        let n = off / 8;
        match n {
            0 if v & BUS_SWR != 0 => {
                c.csr = [0; 16];
                c.filter = [[0; 6]; 16];
                c.resetting = 3;
            }
            1 => c.walk_tx(),
            3 => {
                c.csr[3] = v;
                c.cur_rx = v as u64;
            }
            4 => {
                c.csr[4] = v;
                c.cur_tx = v as u64;
            }
            5 => c.csr[5] &= !v,
            6 => {
                c.csr[6] = v;
                c.walk_tx();
            }
            9 => {
                c.csr[9] = v;
                if v & ROM_SEL == ROM_SEL {
                    c.rom
                        .pins(v & ROM_CS != 0, v & ROM_SK != 0, v & ROM_DI != 0);
                }
            }
            _ => c.csr[n] = v,
        }
    }
}

/// DMA memory from the heap, at bus addresses below 4 GiB that only the fake chip
/// resolves (the heap itself may lie anywhere): the driver must give the chip bus
/// addresses, never pointers.
struct HeapDma;

// SAFETY: zeroed, 4 KiB aligned, leaked (valid forever), used by nothing else; the
// fake chip reaches it at `phys` through the fake bus.
unsafe impl DmaAlloc for HeapDma {
    fn alloc(&mut self, len: usize) -> Option<Dma> {
        let layout = Layout::from_size_align(len, 4096).ok()?;
        // SAFETY: non-zero size.
        let p = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        let phys = BUS.with(|b| {
            let mut b = b.borrow_mut();
            let next = b.last().map_or(0x1000_0000, |&(bus, _, n)| {
                (bus + n as u64).next_multiple_of(4096)
            });
            b.push((next, p.as_ptr() as usize, len));
            next
        });
        Some(Dma {
            phys: PhysAddr(phys),
            virt: p,
            len,
        })
    }
}

fn nic(mac: [u8; 6]) -> (Tulip<Fake>, Fake) {
    let chip = Fake::with_mac(mac);
    let n = Tulip::new(chip.clone(), &mut HeapDma, &[MAC_A, MAC_B]).unwrap();
    (n, chip)
}

fn eth(dst: [u8; 6], ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&ty.to_be_bytes());
    f.extend_from_slice(payload);
    f.resize(f.len().max(60), 0);
    f
}

#[test]
fn start_up_reads_the_serial_rom_and_loads_the_perfect_filter() {
    let (mut n, chip) = nic(MAC_A);
    assert_eq!(n.mac(), MAC_A, "from the serial ROM");
    assert!(n.link_up());
    let c = chip.0.borrow();
    assert_eq!(c.csr[7], 0, "polled: every interrupt masked");
    assert_eq!(c.csr[6] & (MODE_SR | MODE_ST), MODE_SR | MODE_ST);
    assert_eq!(c.csr[3] as u64, n.rx_descs.phys.0);
    assert_eq!(c.csr[4] as u64, n.tx_descs.phys.0);
    assert_eq!(c.csr[0], BUS_MODE_VALUE);
    assert_eq!(c.setups, 1, "one setup frame");
    assert_eq!(c.filter[0], MAC_A);
    assert_eq!(c.filter[1], [0xFF; 6]);
    assert!(
        c.filter[2..].iter().all(|a| *a == MAC_A),
        "unused entries repeat ours"
    );
    assert!(c.sent.is_empty(), "a setup frame is not sent on the wire");
    drop(c);
    assert_eq!(n.stats().setup_frames, 1);
    // Every receive descriptor belongs to the chip, the last ends the ring.
    for i in 0..RX_DESCS {
        assert_eq!(des_read(&n.rx_descs, i, 0), DES0_OWN);
        let end = if i == RX_DESCS - 1 { RDES1_RER } else { 0 };
        assert_eq!(des_read(&n.rx_descs, i, 1), end | BUF_SIZE as u32);
    }
}

#[test]
fn a_93c66_rom_is_read_with_8_bit_addresses() {
    let chip = Fake::new(srom_image(MAC_B).to_vec(), 8);
    let n = Tulip::new(chip, &mut HeapDma, &[]).unwrap();
    assert_eq!(n.mac(), MAC_B);
}

#[test]
fn a_rom_failing_its_crc_or_holding_no_unicast_address_is_refused() {
    let mut rom = srom_image(MAC_A);
    rom[11] ^= 0x0100; // one bit of the address
    let chip = Fake::new(rom.to_vec(), 6);
    assert_eq!(
        Tulip::new(chip, &mut HeapDma, &[]).err(),
        Some(Error::BadSrom)
    );
    // An absent ROM reads all ones.
    let chip = Fake::new(std::vec![0xFFFF; 64], 6);
    assert_eq!(
        Tulip::new(chip, &mut HeapDma, &[]).err(),
        Some(Error::BadSrom)
    );
    for mac in [[0; 6], [0x01, 0, 0x5E, 0, 0, 1]] {
        let chip = Fake::new(srom_image(mac).to_vec(), 6);
        assert_eq!(
            Tulip::new(chip, &mut HeapDma, &[]).err(),
            Some(Error::NoMacAddress),
            "{mac:02x?}"
        );
    }
    let chip = Fake::with_mac(MAC_A);
    assert_eq!(
        Tulip::new(chip, &mut HeapDma, &[MAC_A; MAX_PEERS + 1]).err(),
        Some(Error::TooManyPeers)
    );
}

#[test]
fn a_chip_stuck_in_reset_or_ignoring_the_setup_frame_is_an_error_not_a_hang() {
    let chip = Fake::with_mac(MAC_A);
    // The fake clears the reset bit after three polls; this chip never does.
    struct Stuck(Fake);
    impl Mmio for Stuck {
        fn read32(&self, off: usize) -> u32 {
            if off == csr::BUS_MODE {
                return BUS_SWR;
            }
            self.0.read32(off)
        }
        fn write32(&mut self, off: usize, v: u32) {
            self.0.write32(off, v)
        }
    }
    assert_eq!(
        Tulip::new(Stuck(chip), &mut HeapDma, &[]).err(),
        Some(Error::ResetTimeout)
    );
    let chip = Fake::with_mac(MAC_A);
    chip.0.borrow_mut().stalled = true;
    assert_eq!(
        Tulip::new(chip, &mut HeapDma, &[]).err(),
        Some(Error::SetupTimeout)
    );
}

#[test]
fn dma_above_4_gib_is_refused() {
    struct High;
    // SAFETY: never dereferenced: the driver refuses the block before using it.
    unsafe impl DmaAlloc for High {
        fn alloc(&mut self, len: usize) -> Option<Dma> {
            Some(Dma {
                phys: PhysAddr(0x1_0000_0000),
                virt: NonNull::dangling(),
                len,
            })
        }
    }
    let chip = Fake::with_mac(MAC_A);
    assert_eq!(
        Tulip::new(chip, &mut High, &[]).err(),
        Some(Error::DmaAbove4GiB)
    );
}

#[test]
fn frames_are_received_in_place_filtered_and_handed_back() {
    let (mut n, chip) = nic(MAC_A);
    assert!(chip.arrive(&eth(MAC_A, ETHERTYPE, b"volley frame")));
    assert!(chip.arrive(&eth(MAC_A, 0x0800, b"an IP packet")));
    assert!(chip.arrive(&eth([0xFF; 6], ETHERTYPE, b"broadcast")));
    assert!(
        !chip.arrive(&eth(MAC_B, ETHERTYPE, b"not for us")),
        "the chip's perfect filter drops it"
    );
    let got = n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
    assert_eq!(&got[..12], b"volley frame");
    assert_eq!(got.len(), 46, "minimum payload, padding in, CRC out");
    let got = n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
    assert_eq!(&got[..9], b"broadcast");
    assert!(n.receive(Instant::ZERO).is_none());
    let s = n.stats();
    assert_eq!((s.rx_frames, s.rx_filtered), (2, 1));
    for i in 0..3 {
        assert_eq!(des_read(&n.rx_descs, i, 0), DES0_OWN, "handed back");
    }
    // Errored frames, and a frame spread over two descriptors, are dropped and their
    // descriptors handed back.
    chip.0
        .borrow_mut()
        .arrive(&eth(MAC_A, ETHERTYPE, b"crc error"), RDES0_ES | 2);
    {
        let mut c = chip.0.borrow_mut();
        c.arrive(&eth(MAC_A, ETHERTYPE, b"first half"), 0);
        let prev = c.cur_rx - 16;
        set_des0(prev, des(prev)[0] & !RDES0_LS);
    }
    assert!(chip.arrive(&eth(MAC_A, ETHERTYPE, b"after")));
    let got = n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
    assert_eq!(&got[..5], b"after");
    assert_eq!(n.stats().rx_errors, 2);
}

#[test]
fn a_full_receive_ring_misses_frames_and_reception_resumes() {
    let (mut n, chip) = nic(MAC_A);
    let mut taken = 0u32;
    while chip.arrive(&eth(MAC_A, ETHERTYPE, &taken.to_le_bytes())) {
        taken += 1;
    }
    assert_eq!(
        taken as usize, RX_DESCS,
        "no tail register: all are the chip's"
    );
    assert!(chip.csr(5) & STATUS_RU != 0);
    for k in 0..taken {
        let got = n
            .receive(Instant::ZERO)
            .unwrap()
            .consume(|f| f[..4].to_vec());
        assert_eq!(got, k.to_le_bytes());
    }
    assert!(n.receive(Instant::ZERO).is_none());
    let s = n.stats();
    assert_eq!(s.hw_rx_missed, 1);
    assert_eq!(s.rx_resumed, 1, "RU seen once, cleared, poll demand issued");
    assert_eq!(chip.csr(5) & STATUS_RU, 0);
    assert_eq!(chip.writes_to(csr::RX_POLL), 1);
    // The ring wraps: another round goes through.
    for k in 0..100u32 {
        assert!(chip.arrive(&eth(MAC_A, ETHERTYPE, &k.to_le_bytes())));
        let got = n
            .receive(Instant::ZERO)
            .unwrap()
            .consume(|f| f[..4].to_vec());
        assert_eq!(got, k.to_le_bytes());
    }
    assert_eq!(
        chip.writes_to(csr::RX_POLL),
        1,
        "no poll demand without need"
    );
}

#[test]
fn multicast_groups_reload_the_filter_and_pass_it() {
    let (mut n, chip) = nic(MAC_A);
    let group = [0x01, 0x00, 0x5E, 0x00, 0x12, 0x34];
    assert!(
        !chip.arrive(&eth(group, ETHERTYPE, b"early")),
        "not joined yet"
    );
    n.join_multicast(group).unwrap();
    assert_eq!(chip.0.borrow().filter[2], group);
    assert!(chip.arrive(&eth(group, ETHERTYPE, b"group")));
    assert_eq!(
        &n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec())[..5],
        b"group"
    );
    n.join_multicast(group).unwrap();
    assert_eq!(n.stats().setup_frames, 2, "joining twice loads nothing");
    assert_eq!(
        n.join_multicast(MAC_B),
        Err(Error::BadGroup),
        "a unicast address"
    );
    for k in 1..MAX_GROUPS as u8 {
        n.join_multicast([0x01, 0, 0x5E, 0, 0, k]).unwrap();
    }
    assert_eq!(
        n.join_multicast([0x01, 0, 0x5E, 0, 1, 0]),
        Err(Error::BadGroup),
        "table full"
    );
    let c = chip.0.borrow();
    assert_eq!(c.filter[0], MAC_A);
    assert_eq!(c.filter[1], [0xFF; 6]);
    assert_eq!(c.filter[2 + MAX_GROUPS - 1], [0x01, 0, 0x5E, 0, 0, 7]);
    assert!(c.sent.is_empty());
}

#[test]
fn frames_are_sent_with_an_ethernet_header_and_the_ring_fills_up() {
    let (mut n, chip) = nic(MAC_A);
    n.transmit(Instant::ZERO, NodeAddr(1))
        .unwrap()
        .consume(5, |b| b.copy_from_slice(b"hello"));
    let sent = chip.sent();
    assert_eq!(sent.len(), 1, "sent at the poll demand");
    assert_eq!(sent[0].len(), 60, "padded to the Ethernet minimum");
    assert_eq!(&sent[0][0..6], &MAC_B);
    assert_eq!(&sent[0][6..12], &MAC_A);
    assert_eq!(&sent[0][12..14], &ETHERTYPE.to_be_bytes());
    assert_eq!(&sent[0][14..19], b"hello");
    assert!(
        n.transmit(Instant::ZERO, NodeAddr(7)).is_none(),
        "no MAC for address 7"
    );
    // 300 frames through the ring: it wraps (TER) and is reclaimed.
    for k in 0..300u32 {
        n.transmit(Instant::ZERO, NodeAddr(1))
            .unwrap()
            .consume(4, |b| b.copy_from_slice(&k.to_le_bytes()));
    }
    let sent = chip.sent();
    assert_eq!(sent.len(), 300);
    assert!(sent
        .iter()
        .enumerate()
        .all(|(k, f)| f[14..18] == (k as u32).to_le_bytes()));
    // A chip that stops transmitting: the ring fills after TX_DESCS - 1 frames.
    chip.0.borrow_mut().stalled = true;
    let mut queued = 0;
    while let Some(t) = n.transmit(Instant::ZERO, NodeAddr(1)) {
        t.consume(MTU + 100, |b| {
            assert_eq!(b.len(), MTU, "longer than the MTU is cut to it");
            b[0] = 1;
        });
        queued += 1;
    }
    assert_eq!(queued, TX_DESCS - 1);
    assert_eq!(n.stats().tx_ring_full, 1);
    // The chip catches up by itself.
    chip.0.borrow_mut().stalled = false;
    chip.0.borrow_mut().walk_tx();
    n.transmit(Instant::ZERO, NodeAddr(0))
        .unwrap()
        .consume(1, |b| b[0] = 2);
    assert_eq!(chip.sent().len(), TX_DESCS);
    // A transmission the chip reports failed is counted.
    let i = n.tx_next;
    n.transmit(Instant::ZERO, NodeAddr(1))
        .unwrap()
        .consume(1, |b| b[0] = 3);
    set_des0(n.tx_descs.phys.0 + 16 * i as u64, TDES0_ES);
    assert!(n.transmit(Instant::ZERO, NodeAddr(1)).is_some());
    assert_eq!(n.stats().tx_errors, 1);
}

#[test]
fn the_engine_moves_a_message_over_two_fake_chips() {
    let (mut na, ca) = nic(MAC_A);
    let (mut nb, cb) = nic(MAC_B);
    let mut p = Pair::new(9, 0, 100_000);
    let msg: &'static [u8] = Vec::leak((0..100_000u32).map(|i| (i % 251) as u8).collect());
    // The wire: what each chip sent arrives at the other, through its filter.
    let wire = |_: &mut Tulip<Fake>, _: &mut Tulip<Fake>| {
        for f in ca.sent() {
            cb.arrive(&f);
        }
        for f in cb.sent() {
            ca.arrive(&f);
        }
    };
    let done = p.transfer(
        msg,
        &mut na,
        &mut nb,
        wire,
        20_000,
        Duration::from_micros(5),
    );
    assert!(done, "the send did not complete");
    assert_eq!(p.received.as_slice(), msg);
    assert!(nb.stats().rx_frames >= 69, "100 kB in 1444-byte payloads");
}

#[test]
fn as_a_plain_ethernet_interface_whole_frames_of_any_type_pass() {
    let (mut n, chip) = nic(MAC_A);
    let ip = eth(MAC_A, 0x0800, b"an IP packet");
    assert!(chip.arrive(&ip));
    assert!(chip.arrive(&eth([0xFF; 6], 0x0806, b"ARP")));
    assert_eq!(n.recv_frame(|f| f.to_vec()), Some(ip));
    assert_eq!(n.recv_frame(|f| f[12..14].to_vec()), Some(std::vec![8, 6]));
    assert_eq!(n.recv_frame(|f| f.len()), None);
    assert!(n.can_send());
    n.send_frame(42, |b| {
        b[..6].copy_from_slice(&MAC_B);
        b[6..12].copy_from_slice(&MAC_A);
        b[12..14].copy_from_slice(&[8, 0]);
        b[14..42].fill(0x45);
    })
    .unwrap();
    let sent = chip.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].len(), 60, "padded");
    assert_eq!(&sent[0][12..14], &[8, 0]);
    assert!(sent[0][14..42].iter().all(|&b| b == 0x45));
    assert!(sent[0][42..].iter().all(|&b| b == 0));
    let s = n.stats();
    assert_eq!((s.rx_raw, s.tx_raw, s.rx_frames, s.tx_frames), (2, 1, 0, 0));
}
