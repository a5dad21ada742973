use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::*;
use crate::compact::{NodeInfo, write_node};

fn id(s: &[u8; 20]) -> Id {
    Id(*s)
}

fn kind(data: &[u8]) -> DecodeErrorKind {
    decode(data).unwrap_err().kind
}

/// The examples of BEP 5, byte for byte, both ways.
#[test]
fn bep5_examples() {
    let ping = b"d1:ad2:id20:abcdefghij0123456789e1:q4:ping1:t2:aa1:y1:qe";
    let m = decode(ping).unwrap();
    assert_eq!(m.transaction, b"aa");
    assert_eq!(
        m.body,
        Body::Query(Query::Ping {
            id: id(b"abcdefghij0123456789")
        })
    );
    assert_eq!(m.to_vec(), ping);

    let resp = b"d1:rd2:id20:mnopqrstuvwxyz123456e1:t2:aa1:y1:re";
    let m = decode(resp).unwrap();
    let Body::Response(r) = &m.body else {
        panic!("{m:?}")
    };
    assert_eq!(r.id, id(b"mnopqrstuvwxyz123456"));
    assert_eq!(m.to_vec(), resp);

    let err = b"d1:eli201e23:A Generic Error Ocurrede1:t2:aa1:y1:ee";
    let m = decode(err).unwrap();
    assert_eq!(
        m.body,
        Body::Error(ErrorBody {
            code: 201,
            message: "A Generic Error Ocurred".into()
        })
    );
    assert_eq!(m.to_vec(), err);

    let find = b"d1:ad2:id20:abcdefghij01234567896:target20:mnopqrstuvwxyz123456e1:q9:find_node1:t2:aa1:y1:qe";
    let m = decode(find).unwrap();
    assert!(
        matches!(m.body, Body::Query(Query::FindNode { target, .. }) if target == id(b"mnopqrstuvwxyz123456"))
    );
    assert_eq!(m.to_vec(), find);

    let get = b"d1:ad2:id20:abcdefghij01234567899:info_hash20:mnopqrstuvwxyz123456e1:q9:get_peers1:t2:aa1:y1:qe";
    let m = decode(get).unwrap();
    assert!(matches!(m.body, Body::Query(Query::GetPeers { .. })));
    assert_eq!(m.to_vec(), get);

    let ann = b"d1:ad2:id20:abcdefghij012345678912:implied_porti1e9:info_hash20:mnopqrstuvwxyz1234564:porti6881e5:token8:aoeusnthe1:q13:announce_peer1:t2:aa1:y1:qe";
    let m = decode(ann).unwrap();
    assert_eq!(
        m.body,
        Body::Query(Query::AnnouncePeer {
            id: id(b"abcdefghij0123456789"),
            info_hash: id(b"mnopqrstuvwxyz123456"),
            port: 6881,
            implied_port: true,
            token: b"aoeusnth".to_vec(),
        })
    );
    assert_eq!(m.to_vec(), ann);
}

#[test]
fn get_peers_response_with_values_and_nodes() {
    let mut nodes = Vec::new();
    let n = NodeInfo {
        id: Id([7; 20]),
        addr: "1.2.3.4:5".parse().unwrap(),
    };
    write_node(&n, &mut nodes);
    let mut data = b"d1:rd2:id20:mnopqrstuvwxyz1234565:nodes26:".to_vec();
    data.extend_from_slice(&nodes);
    data.extend_from_slice(b"5:token2:tk6:valuesl6:");
    data.extend_from_slice(&[10, 0, 0, 1, 0x1a, 0xe1]);
    data.extend_from_slice(b"18:");
    data.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    data.extend_from_slice(&[0, 80]);
    data.extend_from_slice(b"ee1:t2:aa1:v4:LT011:y1:re");
    let m = decode(&data).unwrap();
    assert_eq!(m.version.as_deref(), Some(&b"LT01"[..]));
    let Body::Response(r) = &m.body else { panic!() };
    assert_eq!(r.nodes, vec![n]);
    assert_eq!(r.token.as_deref(), Some(&b"tk"[..]));
    assert_eq!(
        r.values,
        vec![
            "10.0.0.1:6881".parse::<SocketAddr>().unwrap(),
            "[::1]:80".parse().unwrap()
        ]
    );
    assert_eq!(m.to_vec(), data);
}

#[test]
fn unknown_keys_ignored_and_informational_keys_lenient() {
    // Extra keys at both levels, `v` of the wrong type, `ro`, `ip`.
    let mut data = b"d1:ad2:id20:abcdefghij01234567894:zzzzi1ee2:ip6:".to_vec();
    data.extend_from_slice(&[1, 2, 3, 4, 0, 80]);
    data.extend_from_slice(b"1:q4:ping2:roi1e1:t1:x1:vi5e1:y1:q3:zzzle");
    data.push(b'e');
    let m = decode(&data).unwrap();
    assert!(m.read_only);
    assert_eq!(m.version, None);
    assert_eq!(m.ip, Some("1.2.3.4:80".parse().unwrap()));
    assert!(matches!(m.body, Body::Query(Query::Ping { .. })));
}

#[test]
fn unknown_method_is_other() {
    let m =
        decode(b"d1:ad2:id20:abcdefghij0123456789e1:q17:sample_infohashes1:t2:aa1:y1:qe").unwrap();
    assert_eq!(
        m.body,
        Body::Query(Query::Other {
            id: Some(id(b"abcdefghij0123456789")),
            method: b"sample_infohashes".to_vec()
        })
    );
}

#[test]
fn typed_errors() {
    assert!(matches!(kind(b"i5e"), DecodeErrorKind::NotADict));
    assert!(matches!(kind(b"d1:y1:qe"), DecodeErrorKind::Missing("t")));
    assert!(matches!(kind(b"d1:t2:aae"), DecodeErrorKind::Missing("y")));
    assert!(matches!(
        kind(b"d1:t2:aa1:y1:xe"),
        DecodeErrorKind::UnknownType
    ));
    assert!(matches!(kind(b"garbage"), DecodeErrorKind::Bencode(_)));
    assert!(matches!(kind(b""), DecodeErrorKind::Bencode(_)));
    // Unsorted keys: the strict decoder refuses them.
    assert!(matches!(
        kind(b"d1:y1:q1:t2:aae"),
        DecodeErrorKind::Bencode(_)
    ));
    // A short id, with the transaction kept so a server can answer 203.
    let e = decode(b"d1:ad2:id3:abce1:q4:ping1:t2:aa1:y1:qe").unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::BadLength { key: "id", len: 3 });
    assert_eq!(e.transaction.as_deref(), Some(&b"aa"[..]));
    assert!(e.query);
    assert!(matches!(
        kind(b"d1:ad2:id20:abcdefghij01234567899:info_hash20:mnopqrstuvwxyz1234564:porti70000e5:token1:xe1:q13:announce_peer1:t2:aa1:y1:qe"),
        DecodeErrorKind::BadPort(70000)
    ));
    assert!(matches!(
        kind(b"d1:ad2:id20:abcdefghij01234567899:info_hash20:mnopqrstuvwxyz1234564:porti0e5:token1:xe1:q13:announce_peer1:t2:aa1:y1:qe"),
        DecodeErrorKind::BadPort(0)
    ));
    assert!(matches!(
        kind(b"d1:rd2:id20:mnopqrstuvwxyz1234565:nodes3:abce1:t2:aa1:y1:re"),
        DecodeErrorKind::BadLength {
            key: "nodes",
            len: 3
        }
    ));
    assert!(matches!(
        kind(b"d1:rd2:id20:mnopqrstuvwxyz1234566:valuesl3:abcee1:t2:aa1:y1:re"),
        DecodeErrorKind::BadLength {
            key: "values",
            len: 3
        }
    ));
    assert!(matches!(
        kind(b"d1:rd2:id20:mnopqrstuvwxyz1234566:valuesi1ee1:t2:aa1:y1:re"),
        DecodeErrorKind::WrongType { key: "values", .. }
    ));
    assert!(matches!(
        kind(b"d1:eli201ee1:t2:aa1:y1:re"),
        DecodeErrorKind::Missing("r")
    ));
    let long_t = format!("d1:t33:{}1:y1:re", "x".repeat(33));
    assert!(matches!(
        kind(long_t.as_bytes()),
        DecodeErrorKind::BadLength { key: "t", len: 33 }
    ));
    // Implied port without a port is fine.
    assert!(decode(b"d1:ad2:id20:abcdefghij012345678912:implied_porti1e9:info_hash20:mnopqrstuvwxyz1234565:token1:xe1:q13:announce_peer1:t2:aa1:y1:qe").is_ok());
}

/// An error text of invalid UTF-8, or valid UTF-8 cut inside a character,
/// is kept within `MAX_ERROR_MESSAGE` bytes after lossy decoding and
/// survives encode/decode unchanged (found by the `dht_krpc` fuzz target:
/// 100 bytes of 0xff decoded to a 300-byte text, which the next decode
/// cut again).
#[test]
fn error_text_bounded_after_lossy_decoding() {
    let datagram = |text: &[u8]| {
        let mut d = format!("d1:eli201e{}:", text.len()).into_bytes();
        d.extend_from_slice(text);
        d.extend_from_slice(b"e1:t2:aa1:y1:ee");
        d
    };
    let invalid = vec![0xffu8; 100];
    let mut cut = "a".repeat(MAX_ERROR_MESSAGE - 1).into_bytes();
    cut.extend_from_slice("\u{e9}\u{e9}".as_bytes());
    for text in [invalid, cut] {
        let m = decode(&datagram(&text)).expect("decodes");
        let Body::Error(e) = &m.body else {
            panic!("not an error: {m:?}");
        };
        assert!(
            e.message.len() <= MAX_ERROR_MESSAGE,
            "{} bytes",
            e.message.len()
        );
        assert!(
            e.message.len() >= MAX_ERROR_MESSAGE - 3,
            "{} bytes",
            e.message.len()
        );
        assert_eq!(decode(&m.to_vec()), Ok(m.clone()));
    }
}

fn response_with(nodes: usize, values: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..nodes {
        write_node(
            &NodeInfo {
                id: Id([(i % 251) as u8; 20]),
                addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::from(i as u32 + 1)), 1),
            },
            &mut b,
        );
    }
    let mut data = b"d1:rd2:id20:mnopqrstuvwxyz123456".to_vec();
    if nodes > 0 {
        data.extend_from_slice(format!("5:nodes{}:", b.len()).as_bytes());
        data.extend_from_slice(&b);
    }
    if values > 0 {
        data.extend_from_slice(b"6:valuesl");
        for i in 0..values {
            data.extend_from_slice(b"6:");
            data.extend_from_slice(&(i as u32 + 1).to_be_bytes());
            data.extend_from_slice(&[0, 1]);
        }
        data.push(b'e');
    }
    data.extend_from_slice(b"e1:t2:aa1:y1:re");
    data
}

/// A response claiming 10,000 nodes or peers is refused by size; one that
/// fits the datagram bound is truncated to the per-response bounds.
#[test]
fn huge_lists_are_refused_or_truncated() {
    let big = response_with(10_000, 0);
    assert!(matches!(
        decode(&big).unwrap_err().kind,
        DecodeErrorKind::TooLarge {
            max: MAX_PACKET,
            ..
        }
    ));
    let big = response_with(0, 10_000);
    assert!(matches!(
        decode(&big).unwrap_err().kind,
        DecodeErrorKind::TooLarge { .. }
    ));
    let fits = response_with(600, 0);
    assert!(fits.len() <= MAX_PACKET);
    let Body::Response(r) = decode(&fits).unwrap().body else {
        panic!()
    };
    assert_eq!(r.nodes.len(), MAX_NODES);
    assert!(r.truncated);
    let fits = response_with(0, 1_900);
    assert!(fits.len() <= MAX_PACKET);
    let Body::Response(r) = decode(&fits).unwrap().body else {
        panic!()
    };
    assert_eq!(r.values.len(), MAX_VALUES);
    assert!(r.truncated);
    let small = response_with(8, 50);
    let Body::Response(r) = decode(&small).unwrap().body else {
        panic!()
    };
    assert_eq!((r.nodes.len(), r.values.len(), r.truncated), (8, 50, false));
}

fn arb_id() -> impl Strategy<Value = Id> {
    any::<[u8; 20]>().prop_map(Id)
}

fn arb_addr(v6: bool) -> BoxedStrategy<SocketAddr> {
    if v6 {
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), p))
            .boxed()
    } else {
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), p))
            .boxed()
    }
}

fn arb_any_addr() -> BoxedStrategy<SocketAddr> {
    prop_oneof![arb_addr(false), arb_addr(true)].boxed()
}

fn arb_node(v6: bool) -> impl Strategy<Value = NodeInfo> {
    (arb_id(), arb_addr(v6)).prop_map(|(id, addr)| NodeInfo { id, addr })
}

fn arb_want() -> impl Strategy<Value = Want> {
    (any::<bool>(), any::<bool>()).prop_map(|(v4, v6)| Want { v4, v6 })
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=max)
}

fn arb_query() -> impl Strategy<Value = Query> {
    prop_oneof![
        arb_id().prop_map(|id| Query::Ping { id }),
        (arb_id(), arb_id(), arb_want()).prop_map(|(id, target, want)| Query::FindNode {
            id,
            target,
            want
        }),
        (arb_id(), arb_id(), arb_want()).prop_map(|(id, info_hash, want)| Query::GetPeers {
            id,
            info_hash,
            want
        }),
        (
            arb_id(),
            arb_id(),
            1u16..,
            any::<bool>(),
            arb_bytes(MAX_TOKEN_LEN)
        )
            .prop_map(
                |(id, info_hash, port, implied_port, token)| Query::AnnouncePeer {
                    id,
                    info_hash,
                    port,
                    implied_port,
                    token
                }
            ),
        (
            proptest::option::of(arb_id()),
            "[a-z_]{1,32}".prop_filter("known method", |m| {
                !["ping", "find_node", "get_peers", "announce_peer"].contains(&m.as_str())
            })
        )
            .prop_map(|(id, m)| Query::Other {
                id,
                method: m.into_bytes()
            }),
    ]
}

fn arb_response() -> impl Strategy<Value = Response> {
    (
        arb_id(),
        proptest::collection::vec(arb_node(false), 0..=MAX_NODES),
        proptest::collection::vec(arb_node(true), 0..=MAX_NODES),
        proptest::collection::vec(arb_any_addr(), 0..40),
        proptest::option::of(arb_bytes(MAX_TOKEN_LEN)),
    )
        .prop_map(|(id, nodes, nodes6, values, token)| Response {
            id,
            nodes,
            nodes6,
            values,
            token,
            truncated: false,
        })
}

fn arb_body() -> impl Strategy<Value = Body> {
    prop_oneof![
        arb_query().prop_map(Body::Query),
        arb_response().prop_map(Body::Response),
        (any::<i64>(), "[ -~]{0,100}")
            .prop_map(|(code, message)| Body::Error(ErrorBody { code, message })),
    ]
}

fn arb_message() -> impl Strategy<Value = Message> {
    (
        arb_bytes(MAX_TRANSACTION_LEN),
        proptest::option::of(arb_bytes(MAX_VERSION_LEN)),
        any::<bool>(),
        proptest::option::of(arb_any_addr()),
        arb_body(),
    )
        .prop_map(|(transaction, version, read_only, ip, body)| Message {
            transaction,
            version,
            read_only,
            ip,
            body,
        })
}

proptest! {
    #[test]
    fn round_trip(m in arb_message()) {
        let bytes = m.to_vec();
        prop_assert!(weir_bencode::decode(&bytes).is_ok(), "not canonical bencode");
        prop_assert_eq!(decode(&bytes).unwrap(), m);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        // Either a message or a typed error; nothing else can happen.
        let _ = decode(&data);
    }

    #[test]
    fn mutated_messages_never_panic(
        m in arb_message(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let original = m.to_vec();
        let mut bytes = original.clone();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let _ = decode(&bytes);
        // Bencode is prefix-free: a cut message is never a message.
        let n = cut.index(original.len());
        prop_assert!(matches!(
            decode(&original[..n]).unwrap_err().kind,
            DecodeErrorKind::Bencode(_)
        ));
    }
}
