//! Client message codec tests: round trips for every variant, arbitrary
//! bytes never panic, truncated fixed-layout messages are errors, and
//! byte-exact layouts of the packets aMule sends.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::hello::{Hello, OwnHello, user_hash_from_random};
use super::*;
use crate::hash::RecoveryData;
use crate::packet::{Decoder, Limits, Packet, Protocol};
use crate::tag::Tag;
use crate::wire::WireError;
use crate::{AichHash, Md4Hash};

const CTX: DecodeCtx = DecodeCtx {
    peer_ext_requests: 2,
};

fn round(m: &ClientMessage) -> ClientMessage {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    let p = Decoder::new(Limits::CLIENT)
        .decode(&mut b)
        .expect("frame")
        .expect("whole");
    assert!(b.is_empty());
    ClientMessage::decode(&p, &CTX).expect("decode")
}

/// The payload error of a failed decode (`None` if it decoded).
fn wire_err<T>(r: Result<T, DecodeError>) -> Option<WireError> {
    r.err().map(|e| e.err)
}

fn pkt(proto: Protocol, opcode: u8, payload: &[u8]) -> Packet {
    Packet {
        protocol: proto,
        opcode,
        payload: Bytes::copy_from_slice(payload),
        packed: false,
    }
}

#[test]
fn request_parts_layout_is_exactly_three_ranges() {
    let f = Md4Hash([7; 16]);
    let m = ClientMessage::RequestParts {
        file: f,
        ranges: [(0, 184_320), (184_320, 368_640), (0, 0)],
    };
    let mut b = BytesMut::new();
    m.encode(&mut b);
    // 6 header + 16 hash + 3 starts + 3 ends (u32 each).
    assert_eq!(b.len(), 6 + 16 + 24);
    assert_eq!(&b[..6], &[0xE3, 41, 0, 0, 0, 0x47]);
    assert_eq!(&b[22..26], &0u32.to_le_bytes());
    assert_eq!(&b[26..30], &184_320u32.to_le_bytes());
    assert_eq!(&b[34..38], &184_320u32.to_le_bytes()); // first end
    assert_eq!(round(&m), m);
    // A range past 4 GiB switches the whole packet to 64-bit offsets.
    let big = ClientMessage::RequestParts {
        file: f,
        ranges: [(5 << 30, (5 << 30) + 10), (0, 0), (0, 0)],
    };
    let mut b = BytesMut::new();
    big.encode(&mut b);
    assert_eq!((b[0], b[5]), (0xC5, 0xA3));
    assert_eq!(b.len(), 6 + 16 + 48);
    assert_eq!(round(&big), big);
    // Four ranges' worth of bytes is not a request-parts packet.
    let mut payload = vec![0u8; 16 + 32];
    payload[0] = 1;
    assert_eq!(
        wire_err(ClientMessage::decode(
            &pkt(Protocol::Edonkey, 0x47, &payload),
            &CTX
        )),
        Some(WireError::Trailing(8))
    );
}

#[test]
fn deep_pending_lists_go_out_three_ranges_per_packet() {
    let f = Md4Hash([1; 16]);
    let b = crate::EMBLOCKSIZE;
    let pending: Vec<(u64, u64)> = (0..7).map(|i| (i * b, (i + 1) * b)).collect();
    let packets: Vec<ClientMessage> = request_parts(f, &pending).collect();
    assert_eq!(packets.len(), 3);
    let mut asked = Vec::new();
    for p in &packets {
        let ClientMessage::RequestParts { ranges, .. } = p else {
            panic!()
        };
        asked.extend(ranges.iter().filter(|r| r.0 < r.1).copied());
        let mut w = BytesMut::new();
        p.encode(&mut w);
        assert_eq!(w.len(), 6 + 16 + 24);
    }
    assert_eq!(asked, pending);
    assert!(request_parts(f, &[]).next().is_none());
}

#[test]
fn sending_part_head_matches_full_encoding() {
    let f = Md4Hash([3; 16]);
    let data = Bytes::from(vec![5u8; 10_240]);
    for (start, wide) in [(9_000_000u64, false), (6 << 30, true)] {
        let m = ClientMessage::SendingPart {
            file: f,
            start,
            end: start + data.len() as u64,
            data: data.clone(),
            wide,
        };
        let mut full = BytesMut::new();
        m.encode(&mut full);
        let mut head = BytesMut::new();
        sending_part_head(&mut head, &f, start, start + data.len() as u64);
        head.extend_from_slice(&data);
        assert_eq!(head, full);
        assert_eq!(round(&m), m);
    }
}

#[test]
fn sending_part_length_must_match() {
    let mut p = vec![0u8; 16];
    p.extend_from_slice(&100u32.to_le_bytes());
    p.extend_from_slice(&110u32.to_le_bytes());
    p.extend_from_slice(&[1; 9]);
    assert!(matches!(
        wire_err(ClientMessage::decode(
            &pkt(Protocol::Edonkey, 0x46, &p),
            &CTX
        )),
        Some(WireError::Invalid {
            field: "part data",
            ..
        })
    ));
    p.push(1);
    assert!(ClientMessage::decode(&pkt(Protocol::Edonkey, 0x46, &p), &CTX).is_ok());
    // end <= start
    let mut q = vec![0u8; 16];
    q.extend_from_slice(&100u32.to_le_bytes());
    q.extend_from_slice(&100u32.to_le_bytes());
    assert!(matches!(
        wire_err(ClientMessage::decode(
            &pkt(Protocol::Edonkey, 0x46, &q),
            &CTX
        )),
        Some(WireError::Invalid {
            field: "part data",
            ..
        })
    ));
}

#[test]
fn amule_multipacket_ext_as_sent_by_2_3_3() {
    // Built from DownloadClient.cpp SendFileRequest for a 2-part file:
    // hash, size u64, 0x58 + part status (3 parts, none) + complete
    // sources, 0x4F, 0x83 v4 opts 0, 0x9E.
    let f = Md4Hash([9; 16]);
    let mut p = f.0.to_vec();
    p.extend_from_slice(&19_456_001u64.to_le_bytes());
    p.extend_from_slice(&[0x58, 3, 0, 0b000, 0, 0]);
    p.extend_from_slice(&[0x4F, 0x83, 4, 0, 0, 0x9E]);
    let m = ClientMessage::decode(&pkt(Protocol::Emule, 0xA4, &p), &CTX).unwrap();
    let ClientMessage::MultiPacket {
        file,
        size,
        entries,
    } = &m
    else {
        panic!("{m:?}")
    };
    assert_eq!((*file, *size), (f, Some(19_456_001)));
    assert_eq!(
        entries,
        &vec![
            MultiRequest::RequestFileName(Some(ExtInfo {
                part_status: PartStatus::from_fn(3, |_| false),
                complete_sources: Some(0),
            })),
            MultiRequest::SetReqFileId,
            MultiRequest::RequestSources2 {
                version: 4,
                options: 0
            },
            MultiRequest::AichFileHashReq,
        ]
    );
    assert_eq!(round(&m), m);
    // With a peer that announced extended requests v0, the same bytes do
    // not parse (the part status is read as entries).
    let v0 = DecodeCtx {
        peer_ext_requests: 0,
    };
    assert!(matches!(
        wire_err(ClientMessage::decode(&pkt(Protocol::Emule, 0xA4, &p), &v0)),
        Some(WireError::Invalid {
            field: "multipacket entry",
            ..
        })
    ));
}

#[test]
fn part_status_bits_are_lsb_first() {
    let s = PartStatus::from_fn(10, |i| i == 0 || i == 9);
    assert_eq!(s.bits.as_ref(), &[0b0000_0001, 0b0000_0010]);
    assert!(s.has(0) && s.has(9) && !s.has(1) && !s.has(10));
    assert!(PartStatus::complete().has(12345));
}

#[test]
fn queue_ranking_needs_twelve_bytes() {
    let m = ClientMessage::QueueRanking { rank: 7 };
    let mut b = BytesMut::new();
    m.encode(&mut b);
    assert_eq!(b.len(), 6 + 12);
    assert!(matches!(
        wire_err(ClientMessage::decode(
            &pkt(Protocol::Emule, 0x60, &[7, 0]),
            &CTX
        )),
        Some(WireError::Invalid {
            field: "queue ranking",
            ..
        })
    ));
}

#[test]
fn unknown_opcodes_are_kept_raw() {
    let m = ClientMessage::decode(&pkt(Protocol::Emule, 0xB1, b"xyz"), &CTX).unwrap();
    assert_eq!(
        m,
        ClientMessage::Unknown {
            protocol: Protocol::Emule,
            opcode: 0xB1,
            payload: Bytes::from_static(b"xyz")
        }
    );
}

#[test]
fn hashset_count_must_match() {
    let mut p = vec![0u8; 16];
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&[0; 16]);
    assert!(matches!(
        wire_err(ClientMessage::decode(
            &pkt(Protocol::Edonkey, 0x52, &p),
            &CTX
        )),
        Some(WireError::Invalid {
            field: "hashset",
            ..
        })
    ));
    p.extend_from_slice(&[0; 16]);
    assert!(ClientMessage::decode(&pkt(Protocol::Edonkey, 0x52, &p), &CTX).is_ok());
}

fn md4() -> impl Strategy<Value = Md4Hash> {
    any::<[u8; 16]>().prop_map(Md4Hash)
}

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn part_status() -> impl Strategy<Value = PartStatus> {
    (0u16..40).prop_flat_map(|n| {
        proptest::collection::vec(any::<bool>(), n as usize)
            .prop_map(move |v| PartStatus::from_fn(n, |i| v[i]))
    })
}

fn ext_info() -> impl Strategy<Value = ExtInfo> {
    (part_status(), any::<u16>()).prop_map(|(s, c)| ExtInfo {
        complete_sources: (s.count > 0).then_some(c),
        part_status: s,
    })
}

fn hello() -> impl Strategy<Value = Hello> {
    (
        any::<[u8; 16]>(),
        any::<u32>(),
        any::<u16>(),
        "[a-z]{0,12}",
        any::<[u8; 4]>(),
        any::<u16>(),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(h, id, port, name, sip, sport, trailer)| {
            let mut hello =
                OwnHello::weir(name, port, true).hello(user_hash_from_random(h), id, port);
            hello.server_ip = sip.into();
            hello.server_port = sport;
            hello.trailer = trailer;
            hello
        })
}

fn message() -> impl Strategy<Value = ClientMessage> {
    use ClientMessage as M;
    let small_u32 = 0u64..=0xFFFF_FFFF;
    prop_oneof![
        hello().prop_map(M::Hello),
        hello().prop_map(M::HelloAnswer),
        (any::<u8>(), any::<u32>()).prop_map(|(v, x)| M::EmuleInfo(EmuleInfo {
            version: v,
            protocol: 1,
            tags: vec![Tag::u32(0x20, x), Tag::string(0x55, &b"weir"[..])],
        })),
        (md4(), proptest::option::of(ext_info()))
            .prop_map(|(file, ext)| M::RequestFileName { file, ext }),
        (md4(), bytes(50)).prop_map(|(file, name)| M::ReqFileNameAnswer { file, name }),
        md4().prop_map(|file| M::SetReqFileId { file }),
        (md4(), part_status()).prop_map(|(file, status)| M::FileStatus { file, status }),
        md4().prop_map(|file| M::FileReqAnsNoFil { file }),
        md4().prop_map(|file| M::HashSetRequest { file }),
        (md4(), proptest::collection::vec(md4(), 0..10))
            .prop_map(|(file, hashes)| M::HashSetAnswer { file, hashes }),
        (
            md4(),
            proptest::option::of(any::<u64>()),
            proptest::collection::vec(
                prop_oneof![
                    // With extended requests v2 on both sides the ext info is always there.
                    ext_info().prop_map(|e| MultiRequest::RequestFileName(Some(e))),
                    Just(MultiRequest::SetReqFileId),
                    Just(MultiRequest::RequestSources),
                    (any::<u8>(), any::<u16>()).prop_map(|(version, options)| {
                        MultiRequest::RequestSources2 { version, options }
                    }),
                    Just(MultiRequest::AichFileHashReq),
                ],
                0..6
            )
        )
            .prop_map(|(file, size, entries)| M::MultiPacket {
                file,
                size,
                entries
            }),
        (
            md4(),
            proptest::collection::vec(
                prop_oneof![
                    bytes(30).prop_map(MultiAnswer::FileName),
                    part_status().prop_map(MultiAnswer::FileStatus),
                    any::<[u8; 20]>().prop_map(|h| MultiAnswer::AichFileHash(AichHash(h))),
                ],
                0..4
            )
        )
            .prop_map(|(file, entries)| M::MultiPacketAnswer { file, entries }),
        md4().prop_map(|file| M::AichFileHashReq { file }),
        (md4(), any::<[u8; 20]>()).prop_map(|(file, h)| M::AichFileHashAns {
            file,
            master: AichHash(h)
        }),
        (md4(), any::<u16>(), any::<[u8; 20]>()).prop_map(|(file, part, h)| M::AichRequest {
            file,
            part,
            master: AichHash(h)
        }),
        (
            md4(),
            proptest::option::of((
                any::<u16>(),
                any::<[u8; 20]>(),
                any::<bool>(),
                proptest::collection::vec((any::<u16>(), any::<[u8; 20]>()), 1..5)
            ))
        )
            .prop_map(|(file, d)| M::AichAnswer {
                file,
                data: d.map(|(part, m, wide, hs)| (
                    part,
                    AichHash(m),
                    RecoveryData {
                        wide,
                        hashes: hs.into_iter().map(|(i, h)| (i as u32, h)).collect()
                    }
                )),
            }),
        md4().prop_map(|file| M::StartUploadReq { file }),
        Just(M::AcceptUploadReq),
        any::<u16>().prop_map(|rank| M::QueueRanking { rank }),
        any::<u32>().prop_map(|rank| M::QueueRank { rank }),
        (md4(), any::<[(u64, u64); 3]>())
            .prop_map(|(file, ranges)| M::RequestParts { file, ranges }),
        (md4(), small_u32.clone(), 1u64..2000, any::<bool>()).prop_map(
            |(file, start, len, wide)| {
                let wide = wide || start + len > 0xFFFF_FFFF;
                M::SendingPart {
                    file,
                    start,
                    end: start + len,
                    data: Bytes::from(vec![0xAB; len as usize]),
                    wide,
                }
            }
        ),
        (
            md4(),
            small_u32,
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 1..100),
            any::<bool>()
        )
            .prop_map(|(file, start, packed_len, d, wide)| M::CompressedPart {
                file,
                start,
                packed_len,
                data: d.into(),
                wide
            }),
        Just(M::CancelTransfer),
        Just(M::OutOfPartReqs),
        md4().prop_map(|file| M::EndOfDownload { file }),
        (any::<u8>(), any::<u32>())
            .prop_map(|(state, challenge)| M::SecIdentState { state, challenge }),
        bytes(100).prop_map(|key| M::PublicKey { key }),
        (bytes(100), proptest::option::of(any::<u8>()))
            .prop_map(|(signature, ip_kind)| M::Signature { signature, ip_kind }),
        md4().prop_map(|file| M::RequestSources { file }),
        (md4(), any::<u8>(), any::<u16>()).prop_map(|(file, version, options)| {
            M::RequestSources2 {
                file,
                version,
                options,
            }
        }),
        Just(M::PublicIpReq),
        any::<[u8; 4]>().prop_map(|ip| M::PublicIpAnswer { ip: ip.into() }),
        bytes(60).prop_map(|text| M::Message { text }),
        (any::<u32>(), any::<[u8; 4]>()).prop_map(|(id, ip)| M::ChangeClientId {
            id,
            server_ip: ip.into()
        }),
        (any::<u8>(), bytes(60)).prop_map(|(rating, comment)| M::FileDesc { rating, comment }),
        (
            prop_oneof![
                Just((Protocol::Emule, 0xB1u8)),
                Just((Protocol::Edonkey, 0x4Au8)),
                Just((Protocol::Emule, 0xA9u8))
            ],
            bytes(50)
        )
            .prop_map(|((protocol, opcode), payload)| M::Unknown {
                protocol,
                opcode,
                payload
            }),
    ]
}

/// Messages whose every strict prefix must fail to decode.
fn is_fixed_layout(m: &ClientMessage) -> bool {
    use ClientMessage as M;
    match m {
        M::ReqFileNameAnswer { .. }
        | M::SetReqFileId { .. }
        | M::FileStatus { .. }
        | M::FileReqAnsNoFil { .. }
        | M::HashSetRequest { .. }
        | M::HashSetAnswer { .. }
        | M::AichFileHashReq { .. }
        | M::AichFileHashAns { .. }
        | M::AichRequest { .. }
        | M::StartUploadReq { .. }
        | M::QueueRanking { .. }
        | M::QueueRank { .. }
        | M::RequestParts { .. }
        | M::SendingPart { .. }
        | M::EndOfDownload { .. }
        | M::SecIdentState { .. }
        | M::PublicKey { .. }
        | M::RequestSources { .. }
        | M::RequestSources2 { .. }
        | M::PublicIpAnswer { .. }
        | M::Message { .. }
        | M::ChangeClientId { .. }
        | M::FileDesc { .. }
        | M::EmuleInfo(_) => true,
        M::Hello(h) | M::HelloAnswer(h) => h.trailer.is_none(),
        _ => false,
    }
}

proptest! {
    #[test]
    fn every_message_round_trips(m in message()) {
        prop_assert_eq!(round(&m), m);
    }

    #[test]
    fn truncated_messages_are_errors(m in message()) {
        prop_assume!(is_fixed_layout(&m));
        let mut b = BytesMut::new();
        m.encode(&mut b);
        let (proto, opcode) = m.opcode();
        for cut in 6..b.len() {
            let p = pkt(proto, opcode, &b[6..cut]);
            // Truncated, or for layouts whose length is checked up front
            // (a hashset's count, a queue ranking's 12 bytes, part data
            // against its range) invalid.
            let r = ClientMessage::decode(&p, &CTX);
            prop_assert!(
                matches!(
                    wire_err(r.clone()),
                    Some(WireError::Truncated { .. } | WireError::Invalid { field: "hashset" | "queue ranking" | "part data", .. })
                ),
                "{:?} cut at {}: {:?}", m, cut, r
            );
        }
    }

    #[test]
    fn arbitrary_payloads_never_panic(
        opcode in any::<u8>(),
        emule in any::<bool>(),
        payload in proptest::collection::vec(any::<u8>(), 0..120),
        ext in 0u8..3,
    ) {
        let proto = if emule { Protocol::Emule } else { Protocol::Edonkey };
        let ctx = DecodeCtx { peer_ext_requests: ext };
        match ClientMessage::decode(&pkt(proto, opcode, &payload), &ctx) {
            // What decodes encodes to a packet that decodes the same
            // (compared as bytes: float tags may be NaN).
            Ok(m) => {
                let mut b = BytesMut::new();
                m.encode(&mut b);
                let p = Decoder::new(Limits::CLIENT).decode(&mut b).unwrap().unwrap();
                let again = ClientMessage::decode(&p, &ctx).unwrap();
                let mut b2 = BytesMut::new();
                again.encode(&mut b2);
                let mut b1 = BytesMut::new();
                m.encode(&mut b1);
                prop_assert_eq!(b1, b2);
            }
            // The error names the packet it came from.
            Err(e) => prop_assert_eq!((e.protocol, e.opcode), (proto, opcode)),
        }
    }
}
