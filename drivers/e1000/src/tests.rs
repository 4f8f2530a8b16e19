//! The driver against a fake NIC: registers in memory (with the reset bit clearing
//! itself) and DMA memory from the heap, whose "physical" addresses are its virtual
//! ones. A small model of the hardware's ring walking moves frames between two fakes.

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

#[derive(Default)]
struct Regs {
    r: Vec<u32>,
    writes: Vec<(usize, u32)>,
}

#[derive(Clone)]
struct FakeMmio(Rc<RefCell<Regs>>);

impl FakeMmio {
    fn new(mac: [u8; 6]) -> Self {
        let mut r = std::vec![0u32; 0x6000 / 4];
        r[reg::RAL0 / 4] = u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]);
        r[reg::RAH0 / 4] = u16::from_le_bytes([mac[4], mac[5]]) as u32 | 1 << 31;
        r[reg::STATUS / 4] = 2;
        FakeMmio(Rc::new(RefCell::new(Regs {
            r,
            writes: Vec::new(),
        })))
    }
    fn get(&self, off: usize) -> u32 {
        self.0.borrow().r[off / 4]
    }
    fn set(&self, off: usize, v: u32) {
        self.0.borrow_mut().r[off / 4] = v;
    }
    fn writes_to(&self, off: usize) -> usize {
        self.0.borrow().writes.iter().filter(|w| w.0 == off).count()
    }
}

impl Mmio for FakeMmio {
    fn read32(&self, off: usize) -> u32 {
        let v = self.get(off);
        // Reset completes at once; statistics clear on read.
        match off {
            reg::CTRL => v & !CTRL_RST,
            reg::GPRC | reg::GPTC | reg::MPC | reg::CRCERRS => {
                self.set(off, 0);
                v
            }
            _ => v,
        }
    }
    fn write32(&mut self, off: usize, v: u32) {
        let mut r = self.0.borrow_mut();
        r.r[off / 4] = v;
        r.writes.push((off, v));
    }
}

struct HeapDma;

// SAFETY: zeroed, 4 KiB aligned, leaked (valid forever), used by nothing else; the
// fake NIC reaches it at its virtual address, which is what `phys` says.
unsafe impl DmaAlloc for HeapDma {
    fn alloc(&mut self, len: usize) -> Option<Dma> {
        let layout = Layout::from_size_align(len, 4096).ok()?;
        // SAFETY: non-zero size.
        let p = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(Dma {
            phys: PhysAddr(p.as_ptr() as u64),
            virt: p,
            len,
        })
    }
}

const MAC_A: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xA];
const MAC_B: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xB];

fn nic(mac: [u8; 6]) -> (E1000<FakeMmio>, FakeMmio) {
    let regs = FakeMmio::new(mac);
    let nic = E1000::new(regs.clone(), &mut HeapDma, &[MAC_A, MAC_B]).unwrap();
    (nic, regs)
}

/// Hardware side of the fake: the NIC's own head pointers.
#[derive(Default)]
struct Hw {
    tdh: usize,
    rdh: usize,
}

fn phys_slice<'a>(addr: u64, len: usize) -> &'a mut [u8] {
    // SAFETY: fake DMA: the "physical" address is a live heap address of >= len bytes.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

/// What the NIC does with the frames it sends: walk TDH..TDT, gathering each
/// frame's data up to the descriptor with EOP (SDM 3.3.3), and mark each done.
fn hw_transmit(n: &E1000<FakeMmio>, regs: &FakeMmio, hw: &mut Hw) -> Vec<Vec<u8>> {
    hw_transmit_chains(n, regs, hw)
        .into_iter()
        .map(|c| c.concat())
        .collect()
}

/// [`hw_transmit`], each frame as the pieces its descriptors pointed at.
fn hw_transmit_chains(n: &E1000<FakeMmio>, regs: &FakeMmio, hw: &mut Hw) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut frame = Vec::new();
    let tdt = regs.get(reg::TDT) as usize;
    while hw.tdh != tdt {
        let i = hw.tdh;
        let addr = u64::from_le_bytes(std::array::from_fn(|k| desc_u8(&n.tx_descs, i, k)));
        let len = desc_u16(&n.tx_descs, i, 8) as usize;
        let cmd = desc_u8(&n.tx_descs, i, 11);
        assert!(cmd & TX_CMD_RS != 0, "every descriptor reports done");
        frame.push(phys_slice(addr, len).to_vec());
        if cmd & TX_CMD_EOP != 0 {
            assert!(cmd & TX_CMD_IFCS != 0, "the FCS is added");
            out.push(std::mem::take(&mut frame));
        } else {
            assert_eq!(cmd, TX_CMD_RS, "only the last descriptor ends the frame");
        }
        desc_set_u8(&n.tx_descs, i, 12, TX_DD);
        hw.tdh = (i + 1) % TX_DESCS;
    }
    assert!(frame.is_empty(), "a frame without its end was handed over");
    out
}

/// What the NIC does with an arriving frame: fill RDH if RDT allows, else miss it.
fn hw_receive(n: &E1000<FakeMmio>, regs: &FakeMmio, hw: &mut Hw, frame: &[u8]) -> bool {
    let rdt = regs.get(reg::RDT) as usize;
    if hw.rdh == rdt {
        regs.set(reg::MPC, regs.get(reg::MPC) + 1);
        return false;
    }
    let i = hw.rdh;
    let addr = u64::from_le_bytes(std::array::from_fn(|k| desc_u8(&n.rx_descs, i, k)));
    phys_slice(addr, frame.len()).copy_from_slice(frame);
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..10].copy_from_slice(&(frame.len() as u16).to_le_bytes());
    d[12] = RX_DD | RX_EOP;
    desc_write(&n.rx_descs, i, d);
    hw.rdh = (i + 1) % RX_DESCS;
    true
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
fn start_up_follows_the_manual() {
    let (n, regs) = nic(MAC_A);
    assert_eq!(n.mac(), MAC_A, "read from RAL0/RAH0");
    assert!(n.link_up());
    assert_eq!(regs.writes_to(reg::RCTL), 1, "RCTL is written exactly once");
    assert_eq!(regs.get(reg::RCTL), RCTL_EN | RCTL_BAM | RCTL_SECRC);
    assert_eq!(regs.get(reg::RDT) as usize, RX_DESCS - 1);
    assert_eq!(regs.get(reg::RDLEN) as usize, RX_DESCS * 16);
    assert_eq!(
        regs.get(reg::RDBAL) as u64 | (regs.get(reg::RDBAH) as u64) << 32,
        n.rx_descs.phys.0
    );
    assert_eq!(regs.get(reg::TCTL) & TCTL_EN, TCTL_EN);
    assert_eq!(regs.get(reg::IMC), u32::MAX, "polled: interrupts masked");
    assert!(regs.get(reg::CTRL) & CTRL_SLU != 0);
    // No valid address: refused, not invented.
    let bad = FakeMmio::new(MAC_A);
    bad.set(reg::RAH0, 0);
    assert_eq!(
        E1000::new(bad, &mut HeapDma, &[]).err(),
        Some(Error::NoMacAddress)
    );
}

#[test]
fn frames_are_received_in_place_filtered_and_posted_back_in_batches() {
    let (mut n, regs) = nic(MAC_A);
    let mut hw = Hw::default();
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth(MAC_A, ETHERTYPE, b"volley frame")
    ));
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth(MAC_A, 0x0800, b"an IP packet")
    ));
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth([0xFF; 6], ETHERTYPE, b"broadcast")
    ));
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth(MAC_B, ETHERTYPE, b"not for us")
    ));
    let got = n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
    assert_eq!(&got[..12], b"volley frame");
    assert_eq!(got.len(), 46, "minimum Ethernet payload, padding included");
    let got = n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
    assert_eq!(&got[..9], b"broadcast");
    assert!(n.receive(Instant::ZERO).is_none());
    let s = n.stats();
    assert_eq!((s.rx_frames, s.rx_filtered), (2, 2));
    let rdt_writes = regs.writes_to(reg::RDT);
    assert_eq!(
        rdt_writes, 2,
        "the initial one, then one for the whole batch"
    );
    assert_eq!(regs.get(reg::RDT), 3, "descriptors 0..3 handed back");
    // A flood: 40 frames; the tail is written every 16, not 40 times.
    for k in 0..40u8 {
        assert!(hw_receive(
            &n,
            &regs,
            &mut hw,
            &eth(MAC_A, ETHERTYPE, &[k; 30])
        ));
    }
    for k in 0..40u8 {
        assert_eq!(n.receive(Instant::ZERO).unwrap().consume(|f| f[0]), k);
    }
    assert!(n.receive(Instant::ZERO).is_none());
    assert_eq!(regs.writes_to(reg::RDT) - rdt_writes, 3);
    // A full ring makes the NIC miss frames, counted by the NIC.
    let mut taken = 0;
    while hw_receive(&n, &regs, &mut hw, &eth(MAC_A, ETHERTYPE, b"x")) {
        taken += 1;
    }
    assert_eq!(taken, RX_DESCS - 1);
    assert_eq!(n.stats().hw_rx_missed, 1);
}

#[test]
fn multicast_groups_set_their_hash_bit_and_pass_the_filter() {
    let (mut n, regs) = nic(MAC_A);
    let mut hw = Hw::default();
    let group = [0x01, 0x00, 0x5E, 0x00, 0x12, 0x34];
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth(group, ETHERTYPE, b"early")
    ));
    assert!(n.receive(Instant::ZERO).is_none(), "not joined yet");
    n.join_multicast(group).unwrap();
    // Bits 47:36 of 01:00:5e:00:12:34 are 0x341: MTA[26], bit 1.
    assert_eq!(regs.get(reg::MTA + 4 * 26), 1 << 1);
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth(group, ETHERTYPE, b"group")
    ));
    assert_eq!(
        &n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec())[..5],
        b"group"
    );
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
}

#[test]
fn frames_are_sent_with_an_ethernet_header_and_the_ring_fills_up() {
    let (mut n, regs) = nic(MAC_A);
    let mut hw = Hw::default();
    n.transmit(Instant::ZERO, NodeAddr(1))
        .unwrap()
        .consume(5, |b| b.copy_from_slice(b"hello"));
    assert_eq!(regs.get(reg::TDT), 1);
    let sent = hw_transmit(&n, &regs, &mut hw);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].len(), 60, "padded to the Ethernet minimum");
    assert_eq!(&sent[0][0..6], &MAC_B);
    assert_eq!(&sent[0][6..12], &MAC_A);
    assert_eq!(&sent[0][12..14], &ETHERTYPE.to_be_bytes());
    assert_eq!(&sent[0][14..19], b"hello");
    assert!(
        n.transmit(Instant::ZERO, NodeAddr(7)).is_none(),
        "no MAC for address 7"
    );
    // Without the NIC consuming, the ring fills after TX_DESCS - 1 frames.
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
    assert_eq!(hw_transmit(&n, &regs, &mut hw).len(), TX_DESCS - 1);
    assert!(
        n.transmit(Instant::ZERO, NodeAddr(0)).is_some(),
        "done descriptors are reclaimed"
    );
}

#[test]
fn the_engine_moves_a_message_over_two_fake_nics() {
    let (mut na, ra) = nic(MAC_A);
    let (mut nb, rb) = nic(MAC_B);
    let (mut ha, mut hb) = (Hw::default(), Hw::default());
    let mut p = Pair::new(9, 0, 100_000);
    let msg: &'static [u8] = Vec::leak((0..100_000u32).map(|i| (i % 251) as u8).collect());
    // The wire: what each NIC sent arrives at the other (the NIC's own filter is not
    // modelled: the driver's is).
    let wire = |na: &mut E1000<FakeMmio>, nb: &mut E1000<FakeMmio>| {
        for f in hw_transmit(na, &ra, &mut ha) {
            hw_receive(nb, &rb, &mut hb, &f);
        }
        for f in hw_transmit(nb, &rb, &mut hb) {
            hw_receive(na, &ra, &mut ha, &f);
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
    let (mut n, regs) = nic(MAC_A);
    let mut hw = Hw::default();
    let ip = eth(MAC_A, 0x0800, b"an IP packet");
    assert!(hw_receive(&n, &regs, &mut hw, &ip));
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth(MAC_B, 0x0800, b"not ours")
    ));
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth([0xFF; 6], 0x0806, b"ARP")
    ));
    assert_eq!(n.recv_frame(|f| f.to_vec()), Some(ip));
    assert_eq!(n.recv_frame(|f| f[12..14].to_vec()), Some(std::vec![8, 6]));
    assert_eq!(n.recv_frame(|f| f.len()), None);
    assert!(n.can_send());
    n.send_frame(2000, |b| {
        assert_eq!(b.len(), 1514, "cut to a full Ethernet frame");
        b.fill(0x45);
    })
    .unwrap();
    let sent = hw_transmit(&n, &regs, &mut hw);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].len(), 1514);
    let s = n.stats();
    assert_eq!((s.rx_raw, s.tx_raw, s.rx_filtered), (2, 1, 1));
}

#[test]
fn the_82574_gets_its_own_settings_and_the_8254x_keeps_its_own() {
    let (_, regs) = nic(MAC_A);
    assert_eq!(regs.get(reg::TIPG) & 0x3FF, 10, "IPGT 10 on the 8254x");
    assert_eq!(regs.writes_to(reg::GCR), 0, "the 8254x has no GCR");
    let regs = FakeMmio::new(MAC_B);
    let mut n =
        E1000::with_model(Model::I82574, regs.clone(), &mut HeapDma, &[MAC_A, MAC_B]).unwrap();
    assert_eq!(n.mac(), MAC_B);
    assert_eq!(regs.get(reg::TIPG), 8 | (8 << 10) | (6 << 20));
    assert_eq!(regs.get(reg::GCR), 1 << 22);
    assert_eq!(regs.writes_to(reg::RCTL), 1);
    // The same legacy descriptors carry frames.
    let mut hw = Hw::default();
    assert!(hw_receive(
        &n,
        &regs,
        &mut hw,
        &eth(MAC_B, ETHERTYPE, b"on the 82574")
    ));
    let got = n.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
    assert_eq!(&got[..12], b"on the 82574");
}

/// A frame from a send slot leaves as a chain of descriptors: headers from the
/// descriptor's own buffer, the payload read by the NIC where the program wrote it
/// (the descriptor points into the send slot: no copy), then the tag.
#[test]
fn frames_from_send_slots_go_out_as_descriptor_chains_without_a_copy() {
    let (mut n, regs) = nic(MAC_A);
    let mut hw = Hw::default();
    let caps = n.capabilities();
    assert_eq!(
        (caps.pool_slots as usize, caps.pool_slot_size),
        (POOL_SLOTS, POOL_SLOT)
    );
    let pattern: Vec<u8> = (0..POOL_SLOT).map(|i| (i * 3) as u8).collect();
    n.slot_mut(7).unwrap().copy_from_slice(&pattern);
    let slot_addr = n.slot(7).unwrap().as_ptr() as u64;
    assert!(n.send_slot(Instant::ZERO, NodeAddr(1), b"HEADER", 7, 300, b"TAG"));
    let chains = hw_transmit_chains(&n, &regs, &mut hw);
    assert_eq!(chains.len(), 1);
    let c = &chains[0];
    assert_eq!(c.len(), 3, "headers, payload, tag");
    assert_eq!(&c[0][0..6], &MAC_B);
    assert_eq!(&c[0][6..12], &MAC_A);
    assert_eq!(&c[0][12..14], &ETHERTYPE.to_be_bytes());
    assert_eq!(&c[0][14..], b"HEADER");
    assert_eq!(c[1], pattern[..300]);
    assert_eq!(c[2], b"TAG");
    let payload_desc = (regs.get(reg::TDT) as usize + TX_DESCS - 2) % TX_DESCS;
    let addr = u64::from_le_bytes(std::array::from_fn(|k| {
        desc_u8(&n.tx_descs, payload_desc, k)
    }));
    assert_eq!(addr, slot_addr, "the NIC reads the send slot itself");
    // No tag: two descriptors. Plain frames still go out as one.
    assert!(n.send_slot(Instant::ZERO, NodeAddr(1), b"H", 7, 10, b""));
    n.transmit(Instant::ZERO, NodeAddr(1))
        .unwrap()
        .consume(5, |b| b.copy_from_slice(b"plain"));
    let chains = hw_transmit_chains(&n, &regs, &mut hw);
    assert_eq!(chains.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(
        chains[0].concat()[14..],
        [&b"H"[..], &pattern[..10]].concat()
    );
    assert_eq!(n.stats().tx_pooled, 2);
    assert_eq!(n.stats().tx_frames, 3);
    // Impossible requests are refused.
    assert!(!n.send_slot(Instant::ZERO, NodeAddr(1), b"H", POOL_SLOTS, 1, b""));
    assert!(!n.send_slot(Instant::ZERO, NodeAddr(1), b"H", 0, POOL_SLOT + 1, b""));
    assert!(!n.send_slot(Instant::ZERO, NodeAddr(9), b"H", 0, 1, b""));
    assert!(n.slot(POOL_SLOTS).is_none());
    // A chain needs room for all its descriptors: the ring fills without a torn frame.
    let mut queued = 0;
    while n.send_slot(Instant::ZERO, NodeAddr(1), b"H", 1, 4, b"T") {
        queued += 1;
    }
    assert_eq!(queued, (TX_DESCS - 1) / 3);
    assert_eq!(hw_transmit_chains(&n, &regs, &mut hw).len(), queued);
}

/// LFC packets on the e1000 are its send slots: the engine hands one out, the
/// program fills it in place, and the launch reaches the other NIC whole, in order,
/// over a lossy wire (lost frames are sent again from the same slot).
#[test]
fn engine_packets_are_sent_from_the_nics_send_slots() {
    use volley_core::engine::{Capacity, Config, Engine, Group, Members, Packets, Storage};
    static GROUPS: &[Group<'static>] = &[Group {
        id: 1,
        members: Members::Range { first: 0, count: 2 },
    }];
    let engine = |node| {
        let mut st = Storage::with_capacity(Capacity {
            ports: 2,
            channels: 2,
            fabric_nodes: 2,
            ops: 16,
            assemblies: 2,
            eager: 0,
        });
        st.packets = Packets::with_capacity(8, 8);
        Engine::new(Config::new(5, 1, node), GROUPS, st).unwrap()
    };
    let (mut ea, mut eb) = (engine(0), engine(1));
    let (mut na, ra) = nic(MAC_A);
    let (mut nb, rb) = nic(MAC_B);
    let (mut ha, mut hb) = (Hw::default(), Hw::default());
    let mut now = Instant::ZERO;
    let mut got = Vec::new();
    let mut sent = 0u32;
    let mut wire_frames = 0u32;
    for _ in 0..200_000 {
        if sent < 200 {
            if let Ok(p) = ea.packet_alloc_on(&na) {
                let at = ea.packet_mut_in(&mut na, p).unwrap().as_ptr();
                assert_eq!(Some(at), na.slot(p.index()).map(<[u8]>::as_ptr));
                let b = ea.packet_mut_in(&mut na, p).unwrap();
                b[..4].copy_from_slice(&sent.to_le_bytes());
                b[4..100].fill(sent as u8);
                ea.launch_unicast(p, 1, 100).unwrap();
                sent += 1;
            }
        }
        ea.poll(now, &mut na, None);
        eb.poll(now, &mut nb, None);
        while let Some(d) = eb.next_delivery() {
            let b = eb.packet_in(&nb, d.packet).unwrap();
            let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            assert!(
                b[4..100].iter().all(|&x| x == v as u8),
                "packet {v} garbled"
            );
            got.push(v);
            eb.packet_free(d.packet).unwrap();
        }
        // The wire drops every seventh frame from A.
        for f in hw_transmit(&na, &ra, &mut ha) {
            wire_frames += 1;
            if !wire_frames.is_multiple_of(7) {
                hw_receive(&nb, &rb, &mut hb, &f);
            }
        }
        for f in hw_transmit(&nb, &rb, &mut hb) {
            hw_receive(&na, &ra, &mut ha, &f);
        }
        if got.len() == 200 && ea.packets_free().0 == 8 {
            break;
        }
        now += Duration::from_micros(200);
    }
    assert_eq!(got, (0..200).collect::<Vec<_>>(), "exactly once, in order");
    assert_eq!(ea.packets_free().0, 8, "every send slot came back");
    assert!(na.stats().tx_pooled >= 200);
    assert!(ea.stats().retransmits > 0, "the wire lost some");
}
