use proptest::prelude::*;

use super::*;

fn epoch() -> Instant {
    Instant::now() // test-epoch
}

fn v4(i: u32, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), port)
}

fn v6(i: u32, port: u16) -> SocketAddr {
    let mut b = [0u8; 16];
    b[0] = 0x20;
    b[1] = 0x01;
    b[12..].copy_from_slice(&i.to_be_bytes());
    SocketAddr::new(IpAddr::V6(Ipv6Addr::from(b)), port)
}

fn peers(n: u32) -> BTreeMap<SocketAddr, PexFlags> {
    (0..n).map(|i| (v4(i + 1, 6881), PexFlags::SEED)).collect()
}

#[test]
fn known_encoding_and_flags() {
    let m = PexMessage {
        added: vec![
            PexPeer {
                addr: "10.0.0.1:6881".parse().unwrap(),
                flags: PexFlags::ENCRYPTION.union(PexFlags::UTP),
            },
            PexPeer {
                addr: "[::1]:80".parse().unwrap(),
                flags: PexFlags::REACHABLE,
            },
        ],
        dropped: vec!["10.0.0.2:1".parse().unwrap()],
    };
    let e = m.encode();
    assert!(
        e.starts_with(b"d5:added6:\x0a\x00\x00\x01\x1a\xe17:added.f1:\x056:added618:"),
        "{e:?}"
    );
    let d = PexMessage::decode(&e, MAX_PER_LIST).unwrap();
    assert_eq!(d.msg, m);
    assert_eq!((d.truncated, d.violations), (0, 0));
    assert!(d.msg.added[0].flags.contains(PexFlags::UTP));
    assert!(!d.msg.added[0].flags.contains(PexFlags::SEED));
    // Missing keys are empty lists.
    assert_eq!(
        PexMessage::decode(b"de", 50).unwrap().msg,
        PexMessage::default()
    );
}

#[test]
fn malformed_messages_are_typed_errors() {
    assert!(matches!(
        PexMessage::decode(b"d5:added5:abcdee", 50),
        Err(PexError::CompactLength {
            key: "added",
            len: 5,
            unit: 6
        })
    ));
    assert!(matches!(
        PexMessage::decode(b"d6:added66:abcdefe", 50),
        Err(PexError::CompactLength { unit: 18, .. })
    ));
    assert!(matches!(
        PexMessage::decode(b"d7:droppedi1ee", 50),
        Err(PexError::Type("dropped"))
    ));
    assert!(matches!(
        PexMessage::decode(b"l", 50),
        Err(PexError::Bencode(_))
    ));
    assert!(matches!(
        PexMessage::decode(b"i1e", 50),
        Err(PexError::Bencode(_))
    ));
}

#[test]
fn oversized_lists_are_truncated_and_counted_and_bad_entries_skipped() {
    let mut added = Vec::new();
    for i in 0..120u32 {
        added.extend_from_slice(&Ipv4Addr::from(0x0a00_0000 + i + 1).octets());
        added.extend_from_slice(&6881u16.to_be_bytes());
    }
    // Port 0 and 0.0.0.0 entries.
    added.extend_from_slice(&[10, 0, 0, 1, 0, 0]);
    let mut d = OwnedValue::dict();
    d.insert("added", OwnedValue::Bytes(added.clone()));
    d.insert("added.f", OwnedValue::Bytes(vec![1, 2, 3]));
    d.insert("dropped", OwnedValue::Bytes(added));
    let e = d.to_vec();
    let got = PexMessage::decode(&e, MAX_PER_LIST).unwrap();
    assert_eq!(got.msg.added.len(), 50);
    assert_eq!(got.msg.dropped.len(), 50);
    assert_eq!(got.truncated, 71 + 71);
    assert_eq!(got.violations, 1, "flags of the wrong length");
    assert!(got.msg.added.iter().all(|p| p.flags == PexFlags(0)));
    // A short message: the port-0 entry is skipped as implausible.
    let mut d = OwnedValue::dict();
    d.insert(
        "added",
        OwnedValue::Bytes(vec![10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1]),
    );
    let got = PexMessage::decode(&d.to_vec(), MAX_PER_LIST).unwrap();
    assert!(got.msg.added.is_empty());
    assert_eq!(got.violations, 2);
}

#[test]
fn sends_what_changed_at_most_once_a_minute() {
    let t0 = epoch();
    let mut s = PexState::new(PexConfig::default(), t0);
    assert_eq!(s.poll_timeout(), Some(t0));
    assert!(
        s.poll_message(t0, &BTreeMap::new()).is_none(),
        "nothing to say"
    );
    assert_eq!(s.poll_timeout(), None, "idle until the peers change");
    let mut cur = peers(3);
    cur.insert(v6(1, 1), PexFlags::default());
    let m = s.poll_message(t0, &cur).unwrap();
    assert_eq!(m.added.len(), 4);
    assert!(m.dropped.is_empty());
    // Too soon, even though something changed.
    cur.remove(&v4(1, 6881));
    cur.insert(v4(9, 1), PexFlags::default());
    let t1 = t0 + Duration::from_secs(59);
    assert!(s.poll_message(t1, &cur).is_none());
    assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(60)));
    let t2 = t0 + Duration::from_secs(60);
    let m = s.poll_message(t2, &cur).unwrap();
    assert_eq!(
        m.added,
        vec![PexPeer {
            addr: v4(9, 1),
            flags: PexFlags(0)
        }]
    );
    assert_eq!(m.dropped, vec![v4(1, 6881)]);
    // A flags change is sent as a new `added`.
    cur.insert(v4(9, 1), PexFlags::SEED);
    let m = s.poll_message(t2 + Duration::from_secs(60), &cur).unwrap();
    assert_eq!(m.added[0].flags, PexFlags::SEED);
    assert_eq!(s.stats().sent, 3);
}

#[test]
fn large_changes_go_out_50_per_list_over_several_messages() {
    let t0 = epoch();
    let mut s = PexState::new(PexConfig::default(), t0);
    let mut cur = peers(120);
    for i in 0..70 {
        cur.insert(v6(i, 1), PexFlags::default());
    }
    let mut told = 0;
    let mut t = t0;
    for round in 0..3 {
        let m = s.poll_message(t, &cur).unwrap();
        let n4 = m.added.iter().filter(|p| p.addr.is_ipv4()).count();
        let n6 = m.added.len() - n4;
        assert!(n4 <= 50 && n6 <= 50, "round {round}: {n4} {n6}");
        told += m.added.len();
        let enc = m.encode();
        assert_eq!(PexMessage::decode(&enc, 50).unwrap().truncated, 0);
        t += Duration::from_secs(60);
    }
    assert_eq!(told, 190);
    assert!(s.poll_message(t, &cur).is_none());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn floods_from_one_peer_are_capped_and_too_frequent_messages_ignored() {
    let t0 = epoch();
    let mut s = PexState::new(PexConfig::default(), t0);
    let msg = |from: u32| {
        PexMessage {
            added: (from..from + 50)
                .map(|i| PexPeer {
                    addr: v4(i + 1, 1),
                    flags: PexFlags::default(),
                })
                .collect(),
            dropped: vec![],
        }
        .encode()
    };
    let r = s.handle_message(&msg(0), t0).unwrap();
    assert_eq!(r.added.len(), 50);
    // 10 s later: ignored entirely, counted.
    let r = s
        .handle_message(&msg(50), t0 + Duration::from_secs(10))
        .unwrap();
    assert!(r.too_soon && r.added.is_empty());
    assert_eq!(s.stats().violations, 1);
    // Every 45 s, 50 new addresses: the bucket (100, refilled 50 a
    // minute, 37.5 per 45 s) runs dry by the sixth message.
    let mut t = t0;
    let mut got = Vec::new();
    for k in 1..=5u32 {
        t += Duration::from_secs(45);
        let r = s.handle_message(&msg(50 * k), t).unwrap();
        got.push((r.added.len(), r.capped));
    }
    assert_eq!(got, [(50, 0), (50, 0), (50, 0), (50, 0), (37, 13)]);
    // Already-known addresses cost nothing and are not reported again.
    t += Duration::from_secs(45);
    let r = s.handle_message(&msg(0), t).unwrap();
    assert!(r.added.is_empty() && r.capped == 0);
    // A flood sustained for an hour learns at most burst + rate * time.
    let mut s = PexState::new(PexConfig::default(), t0);
    let mut learnt = 0;
    for m in 0..60u32 {
        let t = t0 + Duration::from_secs(60) * m;
        learnt += s.handle_message(&msg(m * 1000), t).unwrap().added.len();
    }
    assert!((2900..=3050).contains(&learnt), "{learnt}");
}

#[test]
fn an_address_named_twice_in_one_message_is_learnt_once() {
    // Found by the bt_pex fuzz target: with a short memory (`remember`
    // smaller than the list), the second mention was learnt again.
    let t0 = epoch();
    for remember in [0, 1, 2, 1000] {
        let mut s = PexState::new(
            PexConfig {
                remember,
                ..PexConfig::default()
            },
            t0,
        );
        let peer = |i| PexPeer {
            addr: v4(i, 7000),
            flags: PexFlags::default(),
        };
        let msg = PexMessage {
            added: vec![peer(1), peer(2), peer(1), peer(3), peer(2)],
            dropped: vec![],
        }
        .encode();
        let r = s.handle_message(&msg, t0).unwrap();
        let addrs: Vec<SocketAddr> = r.added.iter().map(|p| p.addr).collect();
        assert_eq!(
            addrs,
            [v4(1, 7000), v4(2, 7000), v4(3, 7000)],
            "remember {remember}"
        );
        assert_eq!(s.stats().learnt, 3);
    }
}

proptest! {
    #[test]
    fn round_trip(added in proptest::collection::vec((any::<[u8; 4]>(), 1u16.., any::<u8>()), 0..50),
                  added6 in proptest::collection::vec((any::<[u8; 16]>(), 1u16.., any::<u8>()), 0..50),
                  dropped in proptest::collection::vec((any::<[u8; 4]>(), any::<u16>()), 0..50)) {
        let mut m = PexMessage::default();
        for (ip, port, f) in added {
            m.added.push(PexPeer { addr: SocketAddr::new(IpAddr::from(ip), port), flags: PexFlags(f) });
        }
        for (ip, port, f) in added6 {
            m.added.push(PexPeer { addr: SocketAddr::new(IpAddr::from(ip), port), flags: PexFlags(f) });
        }
        m.added.retain(plausible);
        m.added.sort_by_key(|p| p.addr.is_ipv6());
        m.dropped = dropped.into_iter().map(|(ip, p)| SocketAddr::new(IpAddr::from(ip), p)).collect();
        let d = PexMessage::decode(&m.encode(), MAX_PER_LIST).unwrap();
        prop_assert_eq!(d.msg, m);
        prop_assert_eq!(d.truncated, 0);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = PexMessage::decode(&b, MAX_PER_LIST);
        let mut s = PexState::new(PexConfig::default(), epoch());
        let _ = s.handle_message(&b, epoch());
    }
}

fn plausible(p: &PexPeer) -> bool {
    super::plausible(&p.addr)
}
