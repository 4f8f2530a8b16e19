use super::*;

/// RFC 5869 appendix A.1 (test case 1): the first 16 bytes of its OKM.
#[test]
fn key_derivation_is_rfc_5869_hkdf_sha256() {
    let ikm = [0x0bu8; 22];
    let salt: [u8; 13] = core::array::from_fn(|i| i as u8);
    let info: [u8; 10] = core::array::from_fn(|i| 0xf0 + i as u8);
    // The OKM's first bytes, given in pieces as the callers give theirs.
    let okm = hkdf16(&salt, [&ikm[..7], &ikm[7..]], &[&info[..3], &info[3..]]);
    let want = [
        0x3c, 0xb2, 0x5f, 0x25, 0xfa, 0xac, 0xd5, 0x7a, 0x90, 0x43, 0x4f, 0x64, 0xd0, 0x36, 0x2f,
        0x2a,
    ];
    assert_eq!(okm, want);
    // Purposes and jobs give unrelated keys.
    let k = [7u8; 16];
    assert_ne!(
        derive_key(&k, b"volley frame key", 1),
        derive_key(&k, b"volley job key", 1)
    );
    assert_ne!(
        derive_key(&k, b"volley frame key", 1),
        derive_key(&k, b"volley frame key", 2)
    );
    assert_eq!(frame_key(&k, 9), derive_key(&k, b"volley frame key", 9));
}

#[test]
fn tags_compare_whole() {
    assert!(same(&[1, 2, 3], &[1, 2, 3]));
    assert!(!same(&[1, 2, 3], &[1, 2, 4]));
    assert!(!same(&[1, 2, 3], &[1, 2]));
    assert!(same(&[], &[]));
}

fn sample() -> Repr {
    Repr {
        kind: Kind::Data,
        flags: Flags::RELIABLE | Flags::LAST,
        job_key: 0xDEAD_BEEF,
        ends: Endpoints {
            src_group: 7,
            src_node: 1,
            src_port: 3,
            dst_group: 7,
            dst_node: 2,
            dst_port: 1024,
        },
        seq: 41,
        ack: Some(AckInfo {
            ack: 9,
            sack: 0b101,
            window: 32,
        }),
        msg_id: 5,
        offset: 100,
        total_len: 104,
        payload_len: 4,
    }
}

/// A frame received in two parts (header and tag, then the payload where its
/// sender left it) parses as the same frame whole, and nothing else does.
#[test]
fn a_frame_in_two_parts_parses_as_the_whole() {
    let key: AuthKey = *b"0123456789abcdef";
    for (k, skip) in [(None, false), (None, true), (Some(&key), true)] {
        let r = sample();
        let (h, t) = r.frame_parts(skip, k, [b"ab", b"cd"]).unwrap();
        let mut head = h.to_vec();
        if k.is_some() {
            head.extend_from_slice(&t);
        }
        let mut whole = h.to_vec();
        whole.extend_from_slice(b"abcd");
        if k.is_some() {
            whole.extend_from_slice(&t);
        }
        let (w, _) = Repr::parse_frame(&whole, skip, k).unwrap();
        assert_eq!(Repr::parse_parts(&head, b"abcd", skip, k), Ok(w));
        assert_eq!(w.payload_len, 4);
        // Wrong payload length, trailing bytes, a changed payload.
        assert!(Repr::parse_parts(&head, b"abc", skip, k).is_err());
        let mut longer = head.clone();
        longer.push(0);
        assert!(Repr::parse_parts(&longer, b"abcd", skip, k).is_err());
        if !skip || k.is_some() {
            assert!(Repr::parse_parts(&head, b"abce", skip, k).is_err());
        }
        assert!(Repr::parse_parts(&head[..10], b"abcd", skip, k).is_err());
    }
}

#[test]
fn byte_fixture() {
    let mut buf = [0u8; 64];
    let n = sample()
        .emit_with_payload(&mut buf, &[b"ab", b"cd"], false)
        .unwrap();
    assert_eq!(n, 60);
    let expect_head: [u8; 52] = [
        1, 1, 0x00, 0x0d, // version, kind, flags = RELIABLE|HAS_ACK|LAST
        0xDE, 0xAD, 0xBE, 0xEF, // job
        0, 7, 0, 1, 0, 7, 0, 2, // src group/node, dst group/node
        0, 3, 0x04, 0x00, // ports
        0, 0, 0, 41, // seq
        0, 0, 0, 9, // ack
        0, 0, 0, 0, 0, 0, 0, 5, // sack
        0, 32, 0, 4, // window, payload len
        0, 0, 0, 5, 0, 0, 0, 100, 0, 0, 0, 104, // msg, offset, total
    ];
    assert_eq!(&buf[..52], &expect_head[..]);
    assert_eq!(&buf[56..60], b"abcd");
    let p = Packet::new_checked(&buf[..n]).unwrap();
    assert_eq!(Repr::parse(&p, false).unwrap(), sample());
    // Both halves of the wide field, and no zero byte hiding a misplaced one.
    let mut r = sample();
    r.ack = Some(AckInfo {
        ack: 0x1122_3344,
        sack: 0x0102_0304_0506_0708,
        window: 0xA1A2,
    });
    r.ends.src_port = 0xB1B2;
    r.seq = 0xC1C2_C3C4;
    r.emit_with_payload(&mut buf, &[b"ab", b"cd"], true)
        .unwrap();
    assert_eq!(
        &buf[16..40],
        &[
            0xB1, 0xB2, 0x04, 0x00, 0xC1, 0xC2, 0xC3, 0xC4, // ports, seq
            0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, // ack, sack
            5, 6, 7, 8, 0xA1, 0xA2, 0, 4, // sack, window, payload len
        ]
    );
    assert_eq!(&buf[52..56], &[0; 4], "no checksum");
}

#[test]
fn corruption_is_detected() {
    let mut buf = [0u8; 60];
    sample()
        .emit_with_payload(&mut buf, &[b"abcd"], false)
        .unwrap();
    for i in 0..60 {
        let mut b = buf;
        b[i] ^= 0x10;
        let r = Packet::new_checked(&b[..]).and_then(|p| Repr::parse(&p, false));
        assert!(r.is_err(), "flip at byte {i} accepted");
    }
}

#[test]
fn no_crc_needs_a_trusting_device() {
    let mut buf = [0u8; 60];
    sample()
        .emit_with_payload(&mut buf, &[b"abcd"], true)
        .unwrap();
    let p = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(Repr::parse(&p, false), Err(WireError::BadChecksum));
    assert_eq!(Repr::parse(&p, true).unwrap(), sample());
}

#[test]
fn rejects_bad_frames() {
    let mut buf = [0u8; 60];
    sample()
        .emit_with_payload(&mut buf, &[b"abcd"], false)
        .unwrap();
    assert_eq!(
        Packet::new_checked(&buf[..59]).err(),
        Some(WireError::Truncated)
    );
    assert_eq!(
        Packet::new_checked(&buf[..10]).err(),
        Some(WireError::Truncated)
    );
    let mut v = buf;
    v[0] = 2;
    assert_eq!(
        Repr::parse(&Packet::new_unchecked(&v[..]), false),
        Err(WireError::BadVersion)
    );
    let mut k = buf;
    k[1] = 99;
    let mut p = Packet::new_unchecked(&mut k[..]);
    p.fill_checksum();
    assert_eq!(Repr::parse(&p, false), Err(WireError::UnknownKind));
    // A fragment that would end past its message.
    let mut r = sample();
    r.offset = 101;
    r.emit_with_payload(&mut buf, &[b"abcd"], false).unwrap();
    assert_eq!(
        Repr::parse(&Packet::new_unchecked(&buf[..]), false),
        Err(WireError::Malformed)
    );
    assert_eq!(
        sample().emit_with_payload(&mut buf, &[b"abc"], false),
        Err(WireError::Malformed)
    );
}

#[test]
fn every_kind_round_trips() {
    for k in 1..=11u8 {
        let mut r = sample();
        r.kind = Kind::from_u8(k).unwrap();
        r.ack = None;
        let pl: &[u8] = match r.kind {
            Kind::Ack => b"",
            // A one-sided frame's prefix, then data; a get request's fields.
            Kind::Put | Kind::GetReply => &[7u8; RMA_PREFIX + 4],
            Kind::GetRequest => &[0u8; GET_REQUEST_LEN],
            _ => b"wxyz",
        };
        r.payload_len = pl.len() as u16;
        let mut buf = [0u8; 120];
        let n = r.emit_with_payload(&mut buf, &[pl], false).unwrap();
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(Repr::parse(&p, false).unwrap(), r);
        assert_eq!(p.payload(), pl);
    }
}

#[test]
fn one_sided_frames_are_checked() {
    let mut buf = [0u8; 120];
    for (kind, len, ok) in [
        (Kind::Put, RMA_PREFIX - 1, false),
        (Kind::Put, RMA_PREFIX, true),
        (Kind::GetReply, RMA_PREFIX + 5, false),
        (Kind::GetRequest, GET_REQUEST_LEN - 1, false),
        (Kind::GetRequest, GET_REQUEST_LEN + 1, false),
    ] {
        let mut r = sample();
        r.kind = kind;
        r.offset = 100;
        r.payload_len = len as u16;
        let pl = [0u8; 64];
        let n = r.emit_with_payload(&mut buf, &[&pl[..len]], false).unwrap();
        let got = Repr::parse(&Packet::new_unchecked(&buf[..n]), false);
        assert_eq!(got.is_ok(), ok, "{kind:?} {len}: {got:?}");
    }
}

#[test]
fn tree_frames_carry_their_prefix_outside_the_message() {
    let mut buf = [0u8; 120];
    for (len, offset, total, ok) in [
        (TREE_PREFIX - 1, 0, 10, false),
        (TREE_PREFIX, 0, 0, true),
        (TREE_PREFIX + 10, 0, 10, true),
        (TREE_PREFIX + 10, 1, 10, false),
        (TREE_PREFIX + 4, 6, 10, true),
    ] {
        let mut r = sample();
        r.kind = Kind::Multicast;
        r.flags |= Flags::TREE;
        r.offset = offset;
        r.total_len = total;
        r.payload_len = len as u16;
        let pl = [0u8; 64];
        let n = r.emit_with_payload(&mut buf, &[&pl[..len]], false).unwrap();
        let got = Repr::parse(&Packet::new_unchecked(&buf[..n]), false);
        assert_eq!(got.is_ok(), ok, "{len} at {offset} of {total}: {got:?}");
    }
}

#[test]
fn authenticated_frames_round_trip_and_anything_else_is_refused() {
    let key: AuthKey = *b"0123456789abcdef";
    let r = sample();
    let mut buf = [0u8; HEADER_LEN + 4 + TAG_LEN];
    let n = r
        .emit_frame(&mut buf, &[b"ab", b"cd"], false, Some(&key))
        .unwrap();
    assert_eq!(n, buf.len());
    let (got, payload) = Repr::parse_frame(&buf, false, Some(&key)).unwrap();
    assert_eq!((got, payload), (r, &b"abcd"[..]));
    // Any byte changed, header, payload or tag: refused before anything else.
    for i in 0..n {
        let mut bad = buf;
        bad[i] ^= 0x01;
        let got = Repr::parse_frame(&bad, true, Some(&key)).map(|_| ());
        // A changed length points the tag elsewhere or past the end.
        let want = if field::PAYLOAD_LEN.contains(&i) {
            got.is_err()
        } else {
            got == Err(WireError::BadTag)
        };
        assert!(want, "byte {i}: {got:?}");
    }
    // Another job's key, a missing tag, an unauthenticated frame.
    let other: AuthKey = *b"fedcba9876543210";
    assert_eq!(
        Repr::parse_frame(&buf, false, Some(&other)).map(|_| ()),
        Err(WireError::BadTag)
    );
    assert_eq!(
        Repr::parse_frame(&buf[..n - 1], false, Some(&key)).map(|_| ()),
        Err(WireError::BadTag)
    );
    let mut plain = [0u8; HEADER_LEN + 4];
    r.emit_with_payload(&mut plain, &[b"abcd"], false).unwrap();
    assert_eq!(
        Repr::parse_frame(&plain, false, Some(&key)).map(|_| ()),
        Err(WireError::BadTag)
    );
    // A receiver without the key cannot vouch for it: no CRC was computed.
    assert_eq!(
        Repr::parse_frame(&buf, false, None).map(|_| ()),
        Err(WireError::BadChecksum)
    );
    assert!(emit_too_short_fails(&r, &key));
}

fn emit_too_short_fails(r: &Repr, key: &AuthKey) -> bool {
    let mut short = [0u8; HEADER_LEN + 4 + TAG_LEN - 1];
    r.emit_frame(&mut short, &[b"abcd"], false, Some(key)) == Err(WireError::Malformed)
}
