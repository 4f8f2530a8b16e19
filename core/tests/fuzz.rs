//! Property tests: arbitrary and adversarial bytes never panic the parser or the
//! engine, and every well-formed header survives emit -> parse unchanged.

use proptest::prelude::*;
use volley_core::engine::{
    Body, BufferKind, Capacity, Config, Dest, Engine, Group, Members, PortSetup, Storage, Upcall,
};
use volley_core::phy::{Loopback, Ring};
use volley_core::time::{Duration, Instant};
use volley_core::wire::{AckInfo, Endpoints, Flags, Kind, Packet, Repr, HEADER_LEN};
use volley_core::NodeAddr;

const GROUPS: &[Group<'static>] = &[Group {
    id: 3,
    members: Members::Range { first: 0, count: 4 },
}];

fn count(u: &mut Upcall<'_, '_, u64>) {
    let n = u.data().len() as u64;
    *u.state() += 1 + n;
}

fn target() -> Engine<'static, u64> {
    let mut cfg = Config::new(77, 3, 1);
    cfg.reassembly_timeout = Duration::from_micros(50);
    let cap = Capacity {
        ports: 8,
        channels: 4,
        fabric_nodes: 4,
        ops: 8,
        assemblies: 3,
        eager: 4,
    };
    let mut e = Engine::new(cfg, GROUPS, Storage::with_capacity(cap), 0).unwrap();
    for (port, kind, len) in [
        (0u16, BufferKind::GoBack, 64usize),
        (1, BufferKind::GoAhead, 100),
        (2, BufferKind::GoBack, 0),
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
                recv: Some(count),
                err: Some(count),
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
            e.handle_frame(Instant::from_micros(i as u64), f);
        }
        prop_assert_eq!(e.stats().rx_frames, frames.len() as u64);
    }

    #[test]
    fn engine_survives_well_formed_adversarial_frames(frames in proptest::collection::vec(frame(), 1..60), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..5)) {
        let mut e = target();
        let mut rings: Vec<Ring<128, 512>> = (0..4).map(|_| Ring::new()).collect();
        let mut now = Instant::ZERO;
        // A send of our own keeps the sending side busy meanwhile.
        e.bind_port(5, PortSetup { dest: Some(Dest { group: 3, node: 2, port: 1 }), input: false, recv: None, err: None, sem: 5, kind: BufferKind::GoBack, buffer: None }).unwrap();
        let h = e.start_send(5, b"hello", Body::Borrowed(&[1; 700]), true).unwrap();
        for (i, mut f) in frames.into_iter().enumerate() {
            if let Some(&(at, x)) = flips.get(i) {
                let n = f.len();
                f[at % n] ^= x;
            }
            e.handle_frame(now, &f);
            now += Duration::from_micros(7);
            e.poll(now, &mut Loopback::new(&mut rings, NodeAddr(1)), None);
            for r in rings.iter_mut() {
                *r = Ring::new();
            }
        }
        e.handle_timeout(now + Duration::from_secs(1));
        let s = e.stats();
        prop_assert!(s.delivered + s.lost + s.truncated <= s.rx_frames + 1);
        prop_assert!(e.send_status(h).is_ok());
    }
}
