//! Property tests: arbitrary and adversarial bytes never panic the parser or the
//! engine, and every well-formed header survives emit -> parse unchanged.

use proptest::prelude::*;
use volley_core::engine::{
    Body, Capacity, Config, Dest, Engine, Fill, Group, Members, NoMemory, PortSetup, Received,
    SendRequest, Storage,
};
use volley_core::phy::{Loopback, Ring};
use volley_core::time::{Duration, Instant};
use volley_core::wire::{
    AckInfo, Endpoints, Flags, Kind, Packet, Repr, COMPACT_LEN, COMPACT_MAGIC, COMPACT_PUT_MAGIC,
    HEADER_LEN,
};
use volley_core::NodeAddr;

const GROUPS: &[Group<'static>] = &[Group {
    id: 3,
    members: Members::Range { first: 0, count: 4 },
}];

/// Takes the engine's notices and reads each one's data, as a handler would.
fn drain(e: &mut Engine<'static>) -> u64 {
    let mut n = 0;
    while let Some((notice, view)) = e.next_notice() {
        n += 1 + view.data(&notice).len() as u64;
    }
    n
}

fn target() -> Engine<'static> {
    target_keyed(None)
}

/// [`target`] with frames tagged under `key`.
fn target_keyed(key: Option<volley_core::wire::AuthKey>) -> Engine<'static> {
    let mut cfg = Config::new(77, 3, 1);
    cfg.auth_key = key;
    cfg.reassembly_timeout = Duration::from_micros(50);
    let cap = Capacity {
        ports: 8,
        channels: 4,
        fabric_nodes: 4,
        ops: 8,
        assemblies: 3,
        eager: 4,
    };
    // Packet pools (two to send, two to receive): packets are delivered too.
    let storage = Storage::with_capacity(cap).with_packets(2, 2, 1, 4);
    let mut e = Engine::new(cfg, GROUPS, storage).unwrap();
    for (port, kind, len) in [
        (0u16, Fill::Restart, 64usize),
        (1, Fill::Append, 100),
        (2, Fill::Restart, 0),
    ] {
        let buffer = (len > 0).then(|| &mut *Vec::leak(vec![0u8; len]));
        e.bind_port(
            port,
            PortSetup {
                dest: Some(Dest {
                    group: 3,
                    node: 0,
                    port,
                }),
                input: true,
                recv: true,
                err: true,
                sem: port,
                kind,
                buffer,
            },
        )
        .unwrap();
    }
    e
}

fn kind() -> impl Strategy<Value = Kind> {
    (1u8..=11).prop_map(|k| Kind::from_u8(k).unwrap())
}

prop_compose! {
    fn frame()(
        kind in kind(),
        flags in any::<u16>(),
        src_node in 0u16..5,
        dst_node in prop_oneof![Just(1u16), any::<u16>()],
        dst_group in prop_oneof![Just(3u16), any::<u16>()],
        job in prop_oneof![Just(77u32), any::<u32>()],
        src_port in 0u16..10,
        dst_port in 0u16..10,
        seq in 0u32..80,
        ack in proptest::option::of((0u32..80, any::<u64>(), any::<u16>())),
        msg_id in 0u32..6,
        offset in 0u32..300,
        total in 0u32..400,
        payload in proptest::collection::vec(any::<u8>(), 0..200),
    ) -> Vec<u8> {
        let repr = Repr {
            kind,
            flags: Flags::from_bits_truncate(flags) - Flags::HAS_ACK - Flags::NO_CRC - Flags::AUTH,
            job_key: job,
            ends: Endpoints { src_group: 3, src_node, src_port, dst_group, dst_node, dst_port },
            seq,
            ack: ack.map(|(ack, sack, window)| AckInfo { ack, sack, window }),
            msg_id,
            offset,
            total_len: total,
            payload_len: payload.len() as u16,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit_with_payload(&mut buf, &[&payload], false).unwrap();
        buf
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), trust in any::<bool>()) {
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            if let Ok(r) = Repr::parse(&p, trust) {
                prop_assert!(r.buffer_len() <= bytes.len());
            }
        }
    }

    #[test]
    fn compact_parsers_never_panic_and_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..120), put in any::<bool>(), shaped in any::<bool>()) {
        let mut f = bytes;
        if let Some(b) = f.first_mut() {
            *b = if put { COMPACT_PUT_MAGIC } else { COMPACT_MAGIC };
        }
        // Half the cases near a valid header: flags the header carries, zero
        // padding, the length of what follows.
        if shaped && f.len() >= COMPACT_LEN {
            f[1] &= 0b0110_0011;
            f[26] = 0;
            f[27] = 0;
            let len = (f.len() - COMPACT_LEN) as u16;
            f[10..12].copy_from_slice(&len.to_le_bytes());
        }
        let parsed = if put {
            Repr::parse_compact_put(&f, 9, 1, 2)
        } else {
            Repr::parse_compact(&f, 9, 1, 2)
        };
        if let Ok((r, payload)) = parsed {
            // What parses is a whole message in one frame, and is written back
            // byte for byte.
            prop_assert_eq!(put, r.compact_put());
            prop_assert_eq!(!put, r.compactable());
            let n = COMPACT_LEN + payload.len();
            let mut again = vec![0u8; n];
            let fill = |p: &mut [u8]| p.copy_from_slice(payload);
            let m = if put { r.emit_compact_put(&mut again, fill) } else { r.emit_compact(&mut again, fill) };
            prop_assert_eq!(m, Ok(n));
            prop_assert_eq!(&again[..], &f[..n]);
        }
    }

    #[test]
    fn headers_round_trip(frame in frame()) {
        let p = Packet::new_checked(&frame[..]).unwrap();
        match Repr::parse(&p, false) {
            Ok(r) => {
                let mut again = vec![0u8; r.buffer_len()];
                r.emit_with_payload(&mut again, &[p.payload()], false).unwrap();
                prop_assert_eq!(&again[..HEADER_LEN], &frame[..HEADER_LEN]);
            }
            // Only fragments past their message's end or acks with payload are refused.
            Err(e) => prop_assert_eq!(e, volley_core::wire::WireError::Malformed),
        }
    }

    #[test]
    fn engine_survives_random_bytes(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..20)) {
        let mut e = target();
        for (i, f) in frames.iter().enumerate() {
            e.handle_frame(Instant::from_micros(i as u64), Received::from(&f[..]), &mut NoMemory);
            drain(&mut e);
        }
        prop_assert_eq!(e.stats().rx_frames, frames.len() as u64);
    }

    #[test]
    fn engine_survives_well_formed_adversarial_frames(frames in proptest::collection::vec(frame(), 1..60), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..5)) {
        let mut e = target();
        let mut rings: Vec<Ring<128, 512>> = (0..4).map(|_| Ring::new()).collect();
        let mut now = Instant::ZERO;
        // A send of our own keeps the sending side busy meanwhile.
        e.bind_port(5, PortSetup { dest: Some(Dest { group: 3, node: 2, port: 1 }), input: false, recv: false, err: false, sem: 5, kind: Fill::Restart, buffer: None }).unwrap();
        let h = e.start_send(SendRequest { port: 5, head: b"hello", body: Body::Borrowed(&[1; 700]), reliable: true }).unwrap();
        for (i, mut f) in frames.into_iter().enumerate() {
            if let Some(&(at, x)) = flips.get(i) {
                let n = f.len();
                f[at % n] ^= x;
            }
            e.handle_frame(now, Received::from(&f[..]), &mut NoMemory);
            drain(&mut e);
            now += Duration::from_micros(7);
            e.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
            drain(&mut e);
            for r in rings.iter_mut() {
                *r = Ring::new();
            }
        }
        e.handle_timeout(now + Duration::from_secs(1));
        drain(&mut e);
        let s = e.stats();
        // A frame delivers at most one message (ours adds one); a best-effort frame
        // whose message id jumps reports each vanished message lost, at most a window's
        // worth per frame (engine/rx.rs), so loss reports stay bounded too.
        prop_assert!(s.delivered + s.truncated <= s.rx_frames + 1);
        prop_assert!(s.lost <= (s.rx_frames + 1) * (volley_core::engine::MAX_WINDOW as u64 + 1));
        prop_assert!(e.send_status(h).is_ok());
    }
}

prop_compose! {
    /// Frames from a device that guarantees integrity (`NO_CRC`), mostly in the
    /// shapes header prediction takes (a whole message in one data frame, or a
    /// unicast packet from its root, with an ack), with some of their fields off.
    fn mostly_single()(
        kind in prop_oneof![6 => Just(Kind::Data), 3 => Just(Kind::Packet), 1 => Just(Kind::Multicast)],
        root_is_sender in prop::bool::weighted(0.8),
        unicast in prop::bool::weighted(0.8),
        reliable in any::<bool>(),
        extra in prop_oneof![4 => Just(0u16), 1 => any::<u16>()],
        src_node in 0u16..4,
        dst_node in prop_oneof![8 => Just(1u16), 1 => any::<u16>()],
        job in prop_oneof![8 => Just(77u32), 1 => any::<u32>()],
        dst_port in 0u16..4,
        seq in 0u32..12,
        ack in proptest::option::weighted(0.9, (0u32..12, prop_oneof![Just(0u64), any::<u64>()], any::<u16>())),
        msg_id in 0u32..12,
        whole in prop::bool::weighted(0.8),
        offset in 0u32..100,
        total in 0u32..200,
        payload in proptest::collection::vec(any::<u8>(), 0..80),
    ) -> Vec<u8> {
        let flags = (if reliable { Flags::RELIABLE } else { Flags::empty() })
            | Flags::LAST
            | Flags::from_bits_truncate(extra);
        // A packet's ports are its root and its group (0xFFFF: unicast).
        let (src_port, dst_port) = match kind {
            Kind::Packet => (
                if root_is_sender { src_node } else { src_node ^ 1 },
                if unicast { 0xFFFF } else { dst_port },
            ),
            _ => (0, dst_port),
        };
        let repr = Repr {
            kind,
            flags: flags - Flags::HAS_ACK - Flags::NO_CRC - Flags::AUTH,
            job_key: job,
            ends: Endpoints { src_group: 3, src_node, src_port, dst_group: 3, dst_node, dst_port },
            seq,
            ack: ack.map(|(ack, sack, window)| AckInfo { ack, sack, window }),
            msg_id,
            offset: if whole { 0 } else { offset },
            total_len: if whole { payload.len() as u32 } else { total },
            payload_len: payload.len() as u16,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit_with_payload(&mut buf, &[&payload], true).unwrap();
        buf
    }
}

/// In order (`in_order`), each sender's frames renumbered (its reliable ones by
/// sequence and message, its best-effort ones by message), so that most of them
/// are what header prediction takes; with a key, each frame tagged under it (one
/// that does not parse stays untagged, refused by any receiver).
fn renumbered(
    frames: Vec<Vec<u8>>,
    in_order: bool,
    key: Option<volley_core::wire::AuthKey>,
) -> Vec<Vec<u8>> {
    let mut next = [(0u32, 0u32, 0u32); 256];
    frames
        .into_iter()
        .map(|f| {
            let p = Packet::new_checked(&f[..]).unwrap();
            let Ok(mut r) = Repr::parse(&p, true) else {
                return f;
            };
            if in_order {
                let n = &mut next[r.ends.src_node as usize % 256];
                if r.flags.contains(Flags::RELIABLE) {
                    (r.seq, r.msg_id) = (n.0, n.1);
                    (n.0, n.1) = (n.0 + 1, n.1 + 1);
                } else {
                    r.msg_id = n.2;
                    n.2 += 1;
                }
            }
            let tag = if key.is_some() {
                volley_core::wire::TAG_LEN
            } else {
                0
            };
            let mut t = vec![0u8; r.buffer_len() + tag];
            r.emit_frame(&mut t, &[p.payload()], true, key.as_ref())
                .unwrap();
            t
        })
        .collect()
}

/// `f` under the compact header where it may travel so to the target (node 1 of
/// group 3, job 77): a whole message in one data frame with a plain ack.
fn compacted(f: &[u8]) -> Option<Vec<u8>> {
    let p = Packet::new_checked(f).ok()?;
    let r = Repr::parse(&p, true).ok()?;
    let to_target = r.job_key == 77 && (r.ends.dst_group, r.ends.dst_node) == (3, 1);
    if !(to_target && r.compactable()) {
        return None;
    }
    let mut c = vec![0u8; volley_core::wire::COMPACT_LEN + p.payload().len()];
    r.emit_compact(&mut c, |b| b.copy_from_slice(p.payload()))
        .ok()?;
    Some(c)
}

/// What an engine's notices say: port, data, error; then the packets it
/// received (port `u16::MAX`, and the root), freed once read.
#[allow(clippy::type_complexity)]
fn notices(
    e: &mut Engine<'static>,
) -> Vec<(u16, Vec<u8>, Option<volley_core::engine::Fault>, u16)> {
    let mut v = Vec::new();
    while let Some((n, view)) = e.next_notice() {
        v.push((n.port, view.data(&n).to_vec(), n.fault, 0));
    }
    while let Some(d) = e.next_delivery() {
        let data = e
            .packet(d.packet)
            .map(|p| p[..d.len].to_vec())
            .unwrap_or_default();
        e.packet_free(d.packet).unwrap();
        v.push((u16::MAX, data, None, d.src));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Header prediction's parse reads a frame as the general parse does, or
    /// leaves it to it.
    #[test]
    fn the_predicted_parse_agrees_with_the_general_one(frame in mostly_single(), flip in proptest::option::of((0usize..56, any::<u8>())), keyed in any::<bool>()) {
        let key = *b"job frame key 16";
        let mut f = frame;
        let p = Packet::new_checked(&f[..]).unwrap();
        if let (true, Ok(r)) = (keyed, Repr::parse(&p, true)) {
            // The same frame tagged under the key.
            let mut t = vec![0u8; r.buffer_len() + volley_core::wire::TAG_LEN];
            r.emit_frame(&mut t, &[p.payload()], true, Some(&key)).unwrap();
            f = t;
        }
        if let Some((at, x)) = flip {
            f[at] ^= x;
        }
        let k = keyed.then_some(&key);
        for kind in [Kind::Data, Kind::Packet, Kind::Multicast] {
            if let Some((r, p, ())) = Repr::parse_single(&f, kind, k, |_, _| Some(())) {
                let (g, q) = Repr::parse_frame(&f, !keyed, k).unwrap();
                prop_assert_eq!(g.kind, kind);
                prop_assert_eq!(r, g);
                prop_assert_eq!(p, q);
            }
            // What the receiver would not take is not tagged by the prediction.
            prop_assert!(Repr::parse_single(&f, kind, k, |_, _| None::<()>).is_none());
        }
        // Only data frames and packets are predicted.
        prop_assert!(Repr::parse_single(&f, Kind::Multicast, k, |_, _| Some(())).is_none());
    }

    /// The same frames given to one engine through its device (where header
    /// prediction takes what it can) and to another through `handle_frame` (the
    /// general path alone) raise the same notices and deliver the same packets.
    #[test]
    fn predicted_frames_are_delivered_as_the_general_path_delivers_them(frames in proptest::collection::vec(mostly_single(), 1..40), keyed in any::<bool>(), in_order in any::<bool>()) {
        let key = keyed.then_some(*b"job frame key 16");
        let (mut x, mut y) = (target_keyed(key), target_keyed(key));
        let frames = renumbered(frames, in_order, key);
        // Each engine its own fabric: what one sends (to a sender that claims to
        // be node 1, itself) comes back to it alone.
        let new_rings = || -> Vec<Ring<128, 512>> { (0..4).map(|_| Ring::new()).collect() };
        let (mut rings_x, mut rings) = (new_rings(), new_rings());
        let mut now = Instant::ZERO;
        let (mut seen_x, mut seen_y) = (Vec::new(), Vec::new());
        // A first poll tells both the device's capabilities (integrity).
        x.poll(now, &mut Loopback::new(&mut rings_x, NodeAddr(1)), None);
        y.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
        // The frames each engine counted as received of those given to it (what
        // they send themselves and take back may differ in number: see below).
        let (mut took_x, mut took_y) = (0, 0);
        for f in &frames {
            // `x` takes the frame and sends what it answers in one poll, as `y`
            // does in its first below.
            let before = x.stats().rx_frames;
            x.handle_frame(now, Received::from(&f[..]), &mut NoMemory);
            took_x += x.stats().rx_frames - before;
            x.poll(now, &mut Loopback::new(&mut rings_x, NodeAddr(1)), None);
            let from = f[11] as usize % 4;
            {
                use volley_core::phy::{Device, TxToken};
                let mut d = Loopback::new(&mut rings, NodeAddr(from as u16));
                if let Some(t) = d.transmit(now, NodeAddr(1)) {
                    t.consume(f.len(), |b| b.copy_from_slice(f));
                }
            }
            // Its ring holds this frame alone: this poll takes it, and what it
            // sends comes back only at the next.
            let before = y.stats().rx_frames;
            y.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
            took_y += y.stats().rx_frames - before;
            seen_x.extend(notices(&mut x));
            seen_y.extend(notices(&mut y));
            for _ in 0..2 {
                x.poll(now, &mut Loopback::new(&mut rings_x, NodeAddr(1)), None);
                y.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
                seen_x.extend(notices(&mut x));
                seen_y.extend(notices(&mut y));
            }
            (rings_x, rings) = (new_rings(), new_rings());
            now += Duration::from_micros(3);
        }
        x.handle_timeout(now + Duration::from_secs(1));
        y.handle_timeout(now + Duration::from_secs(1));
        seen_x.extend(notices(&mut x));
        seen_y.extend(notices(&mut y));
        // Notices and packets each in their order (the two queues are read apart:
        // a poll that stored a packet leaves its timers to the next).
        let split = |v: Vec<_>| -> (Vec<_>, Vec<_>) { v.into_iter().partition(|n: &(u16, Vec<u8>, _, u16)| n.0 != u16::MAX) };
        prop_assert_eq!(split(seen_x), split(seen_y));
        prop_assert_eq!(x.stats().delivered, y.stats().delivered);
        // Not all `rx_frames`: frames an engine sends to itself (a sender that
        // claims to be node 1) come back, and their number may differ. A poll that
        // delivered leaves its acks to the next, which may then send one ack with
        // a RETRY where `x`, answering at once, sent an ack and then a RETRY.
        prop_assert_eq!(took_x, took_y);
        prop_assert_eq!(x.stats().rx_predicted, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Frames under the compact header, from a device that names their sender,
    /// raise what the same frames under the full header raise from it: the same
    /// notices, packets and counts, predicted or not.
    #[test]
    fn compact_frames_are_taken_as_their_full_headers_are(frames in proptest::collection::vec(mostly_single(), 1..40), in_order in any::<bool>()) {
        let (mut x, mut y) = (target(), target());
        let frames = renumbered(frames, in_order, None);
        let new_rings = || -> Vec<Ring<128, 512>> { (0..4).map(|_| Ring::new()).collect() };
        let now = Instant::ZERO;
        let (mut seen_x, mut seen_y, mut compact) = (Vec::new(), Vec::new(), 0);
        for (i, f) in frames.iter().enumerate() {
            let now = now + Duration::from_micros(3 * i as u64);
            // Each frame comes from the node its header names (from node 0 when
            // too short to name one), alone in fresh rings.
            let from = NodeAddr(f.get(11).map_or(0, |&n| n as u16 % 4));
            let c = compacted(f);
            compact += u64::from(c.is_some());
            for (e, frame, seen) in [(&mut x, &f[..], &mut seen_x), (&mut y, c.as_deref().unwrap_or(f), &mut seen_y)] {
                let mut rings = new_rings();
                {
                    use volley_core::phy::{Device, TxToken};
                    let mut d = Loopback::vouching(&mut rings, from);
                    if let Some(t) = d.transmit(now, NodeAddr(1)) {
                        t.consume(frame.len(), |b| b.copy_from_slice(frame));
                    }
                }
                for _ in 0..3 {
                    e.poll(now, &mut Loopback::vouching(&mut rings, NodeAddr(1)), None);
                    seen.extend(notices(e));
                }
            }
        }
        for (e, seen) in [(&mut x, &mut seen_x), (&mut y, &mut seen_y)] {
            e.handle_timeout(now + Duration::from_secs(1));
            seen.extend(notices(e));
        }
        let split = |v: Vec<_>| -> (Vec<_>, Vec<_>) { v.into_iter().partition(|n: &(u16, Vec<u8>, _, u16)| n.0 != u16::MAX) };
        prop_assert_eq!(split(seen_x), split(seen_y));
        let (sx, sy) = (x.stats(), y.stats());
        prop_assert_eq!(sx.delivered, sy.delivered);
        prop_assert_eq!(sx.rx_predicted, sy.rx_predicted);
        prop_assert_eq!(sx.rx_malformed + sx.rx_spoofed, sy.rx_malformed + sy.rx_spoofed);
        prop_assert_eq!(sy.rx_compact, compact);
        prop_assert_eq!(sx.rx_compact, 0);
    }
}

/// Memory of 4 KiB at 0x1000 that records the ranges the engine checked and fails
/// the test if it ever writes outside them.
#[derive(Default)]
struct Guarded {
    checked: Vec<(u64, u64)>,
    mem: Vec<u8>,
}

impl volley_core::engine::Memory for Guarded {
    fn check(
        &mut self,
        addr: u64,
        len: u64,
        _: volley_core::engine::Access,
    ) -> Result<(), volley_core::engine::Error> {
        let ok = addr >= 0x1000 && addr.checked_add(len).is_some_and(|e| e <= 0x2000);
        if ok {
            self.checked.push((addr, addr + len));
            Ok(())
        } else {
            Err(volley_core::engine::Error::BadAddress)
        }
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), volley_core::engine::Error> {
        let end = addr + data.len() as u64;
        assert!(
            self.checked.iter().any(|&(s, e)| s <= addr && end <= e),
            "write {addr:#x}..{end:#x} outside every checked range"
        );
        let at = (addr - 0x1000) as usize;
        self.mem.resize(0x1000, 0);
        self.mem[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), volley_core::engine::Error> {
        let end = addr + out.len() as u64;
        assert!(self.checked.iter().any(|&(s, e)| s <= addr && end <= e));
        out.fill(0);
        Ok(())
    }
    fn ring(&mut self, _: u64) {}
}

prop_compose! {
    /// A one-sided frame from node 0 aimed around the exposed range.
    fn rma_frame()(
        kind in (8u8..=10).prop_map(|k| Kind::from_u8(k).unwrap()),
        seq in 0u32..20,
        msg_id in 0u32..4,
        offset in 0u32..5000,
        total in 0u32..5000,
        addr in 0xF00u64..0x2100,
        bell in prop_oneof![Just(0u64), 0xF00u64..0x2100],
        data in proptest::collection::vec(any::<u8>(), 0..100),
    ) -> Vec<u8> {
        let mut payload = Vec::new();
        if kind == Kind::GetRequest {
            payload.extend_from_slice(&addr.to_be_bytes());
            payload.extend_from_slice(&bell.to_be_bytes());
            payload.extend_from_slice(&total.to_be_bytes());
            payload.extend_from_slice(&[0; 4]);
        } else {
            payload.extend_from_slice(&addr.to_be_bytes());
            payload.extend_from_slice(&bell.to_be_bytes());
            payload.extend_from_slice(&data);
        }
        let repr = Repr {
            kind,
            flags: Flags::RELIABLE,
            job_key: 77,
            ends: Endpoints { src_group: 3, src_node: 0, src_port: 0, dst_group: 3, dst_node: 1, dst_port: 0 },
            seq,
            ack: None,
            msg_id,
            offset,
            total_len: total,
            payload_len: payload.len() as u16,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit_with_payload(&mut buf, &[&payload], false).unwrap();
        buf
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Puts, get requests and get replies, well formed or not, never make the engine
    /// write outside a range its memory accepted, nor panic.
    #[test]
    fn one_sided_frames_stay_inside_checked_memory(frames in proptest::collection::vec(rma_frame(), 1..40)) {
        let mut e = target();
        let mut mem = Guarded::default();
        let mut rings: Vec<Ring<128, 512>> = (0..4).map(|_| Ring::new()).collect();
        let mut now = Instant::ZERO;
        for f in frames {
            e.handle_frame(now, Received::from(&f[..]), &mut mem);
            drain(&mut e);
            now += Duration::from_micros(7);
            e.poll_mem(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None, &mut mem);
            for r in rings.iter_mut() {
                *r = Ring::new();
            }
        }
    }
}
