use proptest::prelude::*;

use super::*;

const HEX: &str = "c12fe1c06bba254a9dc9f519b335aa7c1367a88a";

fn ih() -> [u8; 20] {
    hex_decode::<20>(HEX, "urn:btih:", "").unwrap()
}

#[test]
fn typical_magnet() {
    let m = Magnet::parse(&format!(
        "magnet:?xt=urn:btih:{}&dn=Some+File%20%C3%A9.iso&tr=udp%3A%2F%2Ftracker.example.org%3A6969%2Fannounce\
         &tr=http://t.example/ann?k=1+2&x.pe=127.0.0.1:6881&x.pe=[::1]:51413&x.pe=Peer.Example:80\
         &so=0,2,4-6&xl=1024&ws=http://ws.example/f&unknown=zzz&tr=wss://wt.example",
        HEX.to_uppercase()
    ))
    .unwrap();
    assert_eq!(m.info_hash, Some(ih()));
    assert_eq!(m.name.as_deref(), Some("Some File é.iso"));
    assert_eq!(
        m.trackers,
        [
            "udp://tracker.example.org:6969/announce",
            "http://t.example/ann?k=1+2"
        ]
    );
    assert_eq!(m.unsupported_trackers, ["wss://wt.example"]);
    assert_eq!(
        m.peers,
        [
            PeerAddr::Ip("127.0.0.1:6881".parse().unwrap()),
            PeerAddr::Ip("[::1]:51413".parse().unwrap()),
            PeerAddr::Name {
                host: "peer.example".into(),
                port: 80
            },
        ]
    );
    let so = m.select.as_ref().unwrap();
    assert_eq!(so.ranges(), [(0, 0), (2, 2), (4, 6)]);
    assert!(so.contains(5) && !so.contains(3) && !so.contains(7));
    assert_eq!(m.length, Some(1024));
    assert_eq!(m.web_seeds, ["http://ws.example/f"]);
    assert_eq!(Magnet::parse(&m.to_uri()).unwrap(), m);
}

#[test]
fn base32_equals_hex() {
    // RFC 4648 base32 of the same 20 bytes.
    let b32 = "YEX6DQDLXISUVHOJ6UM3GNNKPQJWPKEK";
    let a = Magnet::parse(&format!("magnet:?xt=urn:btih:{b32}")).unwrap();
    let b = Magnet::parse(&format!("magnet:?xt=urn:btih:{}", b32.to_lowercase())).unwrap();
    assert_eq!(a.info_hash, Some(ih()));
    assert_eq!(b.info_hash, Some(ih()));
}

#[test]
fn ed2k_and_btih_together() {
    let ed = "31d6cfe0d16ae931b73c59d7e0c089c0";
    let m = Magnet::parse(&format!(
        "magnet:?xt=urn:btih:{HEX}&xt.2=urn:ed2k:{ed}&xl=9728000&dn=a.bin"
    ))
    .unwrap();
    assert_eq!(m.info_hash, Some(ih()));
    let f = m.ed2k_file().unwrap();
    assert_eq!(f.size, 9_728_000);
    assert_eq!(f.name.as_deref(), Some("a.bin"));
    assert_eq!(f.hash[0], 0x31);
    // eD2k only is a valid magnet; without xl it names no eD2k file.
    let m = Magnet::parse(&format!("magnet:?xt=urn:ed2khash:{ed}")).unwrap();
    assert!(m.info_hash.is_none() && m.ed2k.is_some() && m.ed2k_file().is_none());
}

#[test]
fn v2_magnets() {
    let v2 = "1220".to_string() + &"ab".repeat(32);
    assert_eq!(
        Magnet::parse(&format!("magnet:?xt=urn:btmh:{v2}")).unwrap_err(),
        MagnetError::V2Only
    );
    let e = Magnet::parse(&format!("magnet:?xt=urn:btmh:{v2}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("v2") && e.contains("urn:btmh:"), "{e}");
    let hybrid = Magnet::parse(&format!("magnet:?xt=urn:btih:{HEX}&xt=urn:btmh:{v2}")).unwrap();
    assert_eq!(hybrid.info_hash_v2, Some([0xab; 32]));
    assert_eq!(Magnet::parse(&hybrid.to_uri()).unwrap(), hybrid);
    assert_eq!(
        Magnet::parse(&format!("magnet:?xt=urn:btmh:1114{}", "ab".repeat(32))).unwrap_err(),
        MagnetError::BadMultihash
    );
}

#[test]
fn errors_name_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        (
            "magnet:?xt=urn:btih:c12fe1c06bba254a9dc9f519b335aa7c1367a88",
            "magnet: xt=urn:btih: has 39 hex digits, expected 40 hex or 32 base32",
        ),
        (
            "magnet:?xt=urn:btih:c12fe1c06bba254a9dc9f519b335aa7c1367a88aa",
            "magnet: xt=urn:btih: has 41 hex digits, expected 40 hex or 32 base32",
        ),
        (
            "magnet:?xt=urn:btih:g12fe1c06bba254a9dc9f519b335aa7c1367a88a",
            "magnet: xt=urn:btih: has 'g' at position 0, which is not hex",
        ),
        (
            "magnet:?xt=urn:btih:YEX6DQDLXISUVHOJ6UM3GNNKPQJWPKE1",
            "magnet: xt=urn:btih: has '1' at position 31, which is not base32",
        ),
        (
            "magnet:?dn=x",
            "magnet: no xt=urn:btih: (or urn:ed2k:) exact topic",
        ),
        ("http://x", "magnet: does not start with `magnet:?`"),
    ];
    for (uri, msg) in cases {
        assert_eq!(Magnet::parse(uri).unwrap_err().to_string(), *msg, "{uri}");
    }
    let x = format!("magnet:?xt=urn:btih:{HEX}");
    let kind = |extra: &str| Magnet::parse(&format!("{x}&{extra}")).unwrap_err();
    assert!(matches!(
        kind("dn=%4"),
        MagnetError::BadEscape { at: 0, .. }
    ));
    assert!(matches!(kind("dn=%zz"), MagnetError::BadEscape { .. }));
    assert!(matches!(kind("dn=%ff"), MagnetError::BadValue { .. }));
    assert!(matches!(
        kind("tr=ftp://x/"),
        MagnetError::BadTracker { .. }
    ));
    assert!(matches!(kind("tr=tracker"), MagnetError::BadTracker { .. }));
    assert!(matches!(
        kind("tr=http:///a"),
        MagnetError::BadTracker { .. }
    ));
    assert!(matches!(kind("x.pe=1.2.3.4"), MagnetError::BadPeer { .. }));
    assert!(matches!(
        kind("x.pe=1.2.3.4:0"),
        MagnetError::BadPeer { .. }
    ));
    assert!(matches!(
        kind("x.pe=1.2.3.4:70000"),
        MagnetError::BadPeer { .. }
    ));
    assert!(matches!(kind("x.pe=::1:80"), MagnetError::BadPeer { .. }));
    assert!(matches!(kind("x.pe=[zz]:80"), MagnetError::BadPeer { .. }));
    assert!(matches!(kind("x.pe=1.2.3:80"), MagnetError::BadPeer { .. }));
    assert!(matches!(kind("x.pe=a_b:80"), MagnetError::BadPeer { .. }));
    assert!(matches!(kind("so=3-1"), MagnetError::BadSelect { .. }));
    assert!(matches!(kind("so=1,,2"), MagnetError::BadSelect { .. }));
    assert!(matches!(kind("so=x"), MagnetError::BadSelect { .. }));
    assert!(matches!(kind("xl=-1"), MagnetError::BadLength(_)));
    assert!(matches!(
        kind("xl=1&xl=2"),
        MagnetError::Conflicting { param: "xl" }
    ));
    assert!(matches!(
        kind("xt=urn:btih:0000000000000000000000000000000000000000"),
        MagnetError::ConflictingXt { kind: "btih" }
    ));
    // The same xt twice, and unknown URNs, are fine.
    let m = Magnet::parse(&format!(
        "{x}&xt=urn:btih:{}&xt=urn:sha1:ABC",
        HEX.to_uppercase()
    ));
    assert_eq!(m.unwrap().info_hash, Some(ih()));
}

#[test]
fn bounds() {
    let x = format!("magnet:?xt=urn:btih:{HEX}");
    let long = format!("{x}&dn={}", "a".repeat(MAX_URI_LEN));
    assert!(matches!(
        Magnet::parse(&long).unwrap_err(),
        MagnetError::TooLong { .. }
    ));
    let value = format!("{x}&dn={}", "a".repeat(MAX_VALUE_LEN + 1));
    assert!(matches!(
        Magnet::parse(&value).unwrap_err(),
        MagnetError::BadValue { .. }
    ));
    let mut many = x.clone();
    for i in 0..=MAX_TRACKERS {
        many.push_str(&format!("&tr=http://t{i}.example/a"));
    }
    assert_eq!(
        Magnet::parse(&many).unwrap_err(),
        MagnetError::TooMany {
            what: "tr",
            max: MAX_TRACKERS
        }
    );
    let mut many = x.clone();
    for i in 0..=MAX_PEERS {
        many.push_str(&format!("&x.pe=10.0.{}.{}:1", i / 256, i % 256));
    }
    assert!(matches!(
        Magnet::parse(&many).unwrap_err(),
        MagnetError::TooMany { what: "x.pe", .. }
    ));
    let so = (0..=MAX_SELECT_RANGES)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert!(matches!(
        Magnet::parse(&format!("{x}&so={so}")).unwrap_err(),
        MagnetError::TooMany {
            what: "so ranges",
            ..
        }
    ));
    let params = "&a=1".repeat(MAX_PARAMS);
    assert!(matches!(
        Magnet::parse(&format!("{x}{params}")).unwrap_err(),
        MagnetError::TooMany {
            what: "parameters",
            ..
        }
    ));
    // Just within: the maximum number of trackers parses.
    let mut ok = x.clone();
    for i in 0..MAX_TRACKERS {
        ok.push_str(&format!("&tr=udp://t{i}.example:1"));
    }
    assert_eq!(Magnet::parse(&ok).unwrap().trackers.len(), MAX_TRACKERS);
}

fn arb_peer() -> impl Strategy<Value = PeerAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), 1u16..)
            .prop_map(|(ip, p)| PeerAddr::Ip(SocketAddr::new(IpAddr::from(ip), p))),
        (any::<[u8; 16]>(), 1u16..)
            .prop_map(|(ip, p)| PeerAddr::Ip(SocketAddr::new(IpAddr::from(ip), p))),
        ("[a-z][a-z0-9-]{0,10}[a-z0-9](\\.[a-z]{1,8}){0,3}", 1u16..)
            .prop_map(|(host, port)| PeerAddr::Name { host, port }),
    ]
}

fn arb_magnet() -> impl Strategy<Value = Magnet> {
    (
        proptest::option::of(any::<[u8; 20]>()),
        proptest::option::of(any::<[u8; 32]>()),
        proptest::option::of(any::<[u8; 16]>()),
        proptest::option::of("\\PC{1,40}"),
        proptest::option::of(any::<u64>()),
        proptest::collection::btree_set(
            "(http|https|udp)://[a-z0-9.]{1,20}(:[0-9]{1,5})?(/[a-zA-Z0-9?=&%+._~-]{0,30})?",
            0..5,
        ),
        proptest::collection::btree_set(arb_peer(), 0..5),
        proptest::option::of(proptest::collection::vec((0u32..1000, 0u32..50), 1..6)),
        proptest::collection::btree_set("https://[a-z]{1,10}/[a-z ]{0,10}", 0..3),
    )
        .prop_filter("some hash", |t| t.0.is_some() || t.2.is_some())
        .prop_map(|(ih, v2, ed, dn, xl, tr, pe, so, ws)| Magnet {
            info_hash: ih,
            info_hash_v2: v2,
            ed2k: ed,
            name: dn.filter(|s| !s.is_empty()),
            length: xl,
            trackers: tr.into_iter().collect(),
            unsupported_trackers: Vec::new(),
            peers: pe.into_iter().collect(),
            select: so.map(|r| {
                FileSelection::new(r.into_iter().map(|(a, n)| (a, a + n)).collect()).unwrap()
            }),
            web_seeds: ws.into_iter().collect(),
        })
}

proptest! {
    #[test]
    fn to_uri_parses_back(m in arb_magnet()) {
        let uri = m.to_uri();
        prop_assert_eq!(Magnet::parse(&uri).unwrap(), m);
    }

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC{0,300}") {
        let _ = Magnet::parse(&s);
        let _ = Magnet::parse(&format!("magnet:?{s}"));
        let _ = Magnet::parse(&format!("magnet:?xt=urn:btih:{s}"));
        let _ = Magnet::parse(&format!("magnet:?xt=urn:btih:{HEX}&x.pe={s}&so={s}&tr={s}"));
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Magnet::parse_bytes(&b);
        let mut m = b"magnet:?xt=urn:btih:".to_vec();
        m.extend_from_slice(&b);
        let _ = Magnet::parse_bytes(&m);
    }
}

#[test]
fn a_selection_becomes_one_flag_per_file_and_names_indices_past_the_end() {
    let s = FileSelection::parse("0,2-3,9").unwrap();
    assert_eq!(s.to_string(), "0,2-3,9");
    let (flags, past) = s.flags(4);
    assert_eq!(flags, [true, false, true, true]);
    assert_eq!(past, [(9, 9)]);
    let (flags, past) = s.flags(3);
    assert_eq!(flags, [true, false, true]);
    assert_eq!(past, [(3, 3), (9, 9)]);
    // A huge range costs nothing beyond the file count.
    let (flags, past) = FileSelection::parse("1-4294967295").unwrap().flags(2);
    assert_eq!(flags, [false, true]);
    assert_eq!(past, [(2, u32::MAX)]);
    let (flags, past) = s.flags(0);
    assert!(flags.is_empty());
    assert_eq!(past.len(), 3);
    assert!(FileSelection::parse("").is_err());
}

proptest::proptest! {
    /// A flag is set exactly for the selected indices below the count, and
    /// every selected index at or past it is reported.
    #[test]
    fn flags_match_contains(ranges in proptest::collection::vec((0u32..40, 0u32..8), 1..6), files in 0usize..40) {
        let ranges: Vec<(u32, u32)> = ranges.into_iter().map(|(a, n)| (a, a + n)).collect();
        let s = FileSelection::new(ranges).unwrap();
        let (flags, past) = s.flags(files);
        proptest::prop_assert_eq!(flags.len(), files);
        for (i, f) in flags.iter().enumerate() {
            proptest::prop_assert_eq!(*f, s.contains(i as u32));
        }
        for i in files as u32..60 {
            let reported = past.iter().any(|&(a, b)| (a..=b).contains(&i));
            proptest::prop_assert_eq!(reported, s.contains(i));
        }
    }
}
