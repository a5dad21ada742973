//! Peer wire codec: round trips, length checks before buffering, split
//! buffers, and arbitrary input.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use weir_bt::wire::{
    BLOCK_LEN, BlockRef, Limits, Message, WireError, decode, encode, piece_header,
};

const PIECES: u32 = 1000;

fn limits() -> Limits {
    Limits::new(PIECES)
}

fn enc(m: &Message) -> BytesMut {
    let mut out = BytesMut::new();
    encode(m, &mut out);
    out
}

fn dec_all(buf: &mut BytesMut, l: &Limits) -> Result<Vec<Message>, WireError> {
    let mut out = Vec::new();
    while let Some(m) = decode(buf, l)? {
        out.push(m);
    }
    Ok(out)
}

fn frame(id: u8, payload: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.extend_from_slice(&(1 + payload.len() as u32).to_be_bytes());
    b.extend_from_slice(&[id]);
    b.extend_from_slice(payload);
    b
}

fn all_kinds() -> Vec<Message> {
    let blk = BlockRef {
        index: 7,
        begin: 16384,
        length: BLOCK_LEN,
    };
    vec![
        Message::KeepAlive,
        Message::Choke,
        Message::Unchoke,
        Message::Interested,
        Message::NotInterested,
        Message::Have { index: 999 },
        Message::Bitfield(Bytes::from(vec![0xffu8; 125])),
        Message::Request(blk),
        Message::Piece {
            index: 3,
            begin: 32768,
            data: Bytes::from(vec![0xabu8; 16384]),
        },
        Message::Cancel(blk),
        Message::Port(6881),
        Message::Suggest { index: 4 },
        Message::HaveAll,
        Message::HaveNone,
        Message::Reject(blk),
        Message::AllowedFast { index: 5 },
        Message::Extended {
            id: 0,
            payload: Bytes::from_static(b"d1:md11:ut_metadatai1eee"),
        },
    ]
}

#[test]
fn every_message_round_trips_with_known_bytes() {
    for m in all_kinds() {
        let mut b = enc(&m);
        let got = decode(&mut b, &limits()).unwrap();
        assert_eq!(got.as_ref(), Some(&m), "{}", m.name());
        assert!(b.is_empty());
    }
    assert_eq!(
        &enc(&Message::Have { index: 258 })[..],
        b"\0\0\0\x05\x04\0\0\x01\x02"
    );
    assert_eq!(&enc(&Message::Port(0x1234))[..], b"\0\0\0\x03\x09\x12\x34");
    assert_eq!(&enc(&Message::HaveAll)[..], b"\0\0\0\x01\x0e");
}

#[test]
fn piece_header_matches_encode_and_data_is_zero_copy() {
    let data = Bytes::from(vec![1u8; 1000]);
    let m = Message::Piece {
        index: 9,
        begin: 4,
        data: data.clone(),
    };
    let b = enc(&m);
    assert_eq!(&b[..13], &piece_header(9, 4, 1000));
    let mut b = b;
    let base = b.as_ptr() as usize;
    match decode(&mut b, &limits()).unwrap().unwrap() {
        Message::Piece { data: d, .. } => {
            assert_eq!(d, data);
            // The payload is a slice of the receive buffer, not a copy.
            assert_eq!(d.as_ptr() as usize, base + 13);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn huge_frames_are_refused_before_buffering() {
    // Only the 4-byte length has arrived.
    let mut b = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
    let e = decode(&mut b, &limits()).unwrap_err();
    assert_eq!(
        e,
        WireError::FrameTooLong {
            len: u32::MAX,
            max: limits().max_frame()
        }
    );
    // Length and id: a 4 GiB piece.
    let mut b = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 7][..]);
    assert!(matches!(
        decode(&mut b, &limits()),
        Err(WireError::BlockLength { msg: "piece", .. })
    ));
    // A choke that claims 2 bytes.
    let mut b = BytesMut::from(&[0, 0, 0, 2, 0][..]);
    let e = decode(&mut b, &limits()).unwrap_err();
    assert_eq!(e.to_string(), "choke message of length 2, expected 1");
    // An extended message past the limit.
    let l = Limits {
        max_extended: 100,
        ..limits()
    };
    let mut b = BytesMut::from(&[0, 0, 0, 103, 20][..]);
    let e = decode(&mut b, &l).unwrap_err();
    assert_eq!(
        e.to_string(),
        "extended message of length 103 exceeds the limit of 102"
    );
    let mut b = BytesMut::from(&[0, 0, 0, 102, 20][..]);
    assert_eq!(decode(&mut b, &l).unwrap(), None);
}

#[test]
fn bad_lengths_and_indices_are_named() {
    let l = limits();
    let cases: Vec<(BytesMut, &str)> = vec![
        (
            frame(4, &1000u32.to_be_bytes()),
            "have message for piece 1000, but the torrent has 1000 pieces",
        ),
        (frame(4, &[0, 0, 1]), "have message of length 4, expected 5"),
        (
            frame(5, &[0xff; 124]),
            "bitfield message of length 125, expected 126",
        ),
        (
            frame(5, &[0xff; 126]),
            "bitfield message of length 127, expected 126",
        ),
        (
            frame(6, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]),
            "request message with block length 0, allowed 1..=131072",
        ),
        (
            frame(6, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 1]),
            "request message with block length 131073, allowed 1..=131072",
        ),
        (
            frame(16, &[0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 64, 0]),
            "reject message for piece 1024, but the torrent has 1000 pieces",
        ),
        (
            frame(7, &[0, 0, 0, 1, 0, 0, 0, 0]),
            "piece message with block length 0, allowed 1..=131072",
        ),
        (
            frame(7, &[0, 0, 0, 1]),
            "piece message of length 5, expected 16393",
        ),
        (frame(9, &[1]), "port message of length 2, expected 3"),
        (frame(20, &[]), "extended message of length 1, expected 2"),
        (
            frame(17, &5000u32.to_be_bytes()),
            "allowed fast message for piece 5000, but the torrent has 1000 pieces",
        ),
        (
            frame(99, &vec![0; 40_000]),
            "unknown id 99 message of length 40001 exceeds the limit of 32768",
        ),
    ];
    for (mut b, want) in cases {
        let before = b.len();
        let e = decode(&mut b, &l).unwrap_err();
        assert_eq!(e.to_string(), want);
        assert_eq!(b.len(), before, "buffer untouched after an error");
    }
}

#[test]
fn bitfield_spare_bits() {
    let l = Limits::new(10);
    let mut ok = frame(5, &[0xff, 0xc0]);
    assert!(matches!(
        decode(&mut ok, &l).unwrap(),
        Some(Message::Bitfield(_))
    ));
    let mut bad = frame(5, &[0xff, 0xe0]);
    assert_eq!(
        decode(&mut bad, &l).unwrap_err(),
        WireError::SpareBits { piece_count: 10 }
    );
    // Unknown piece count (magnet): any length up to the cap, no checks.
    let mut any = frame(5, &[0xff; 300]);
    assert!(decode(&mut any, &Limits::default()).unwrap().is_some());
}

#[test]
fn unknown_ids_are_skipped() {
    let mut b = frame(42, b"whatever");
    b.extend_from_slice(&enc(&Message::Unchoke));
    let got = dec_all(&mut b, &limits()).unwrap();
    assert_eq!(got, [Message::Unchoke]);
    // An unknown frame that has not fully arrived is waited for.
    let mut b = frame(42, b"whatever");
    b.truncate(8);
    assert_eq!(decode(&mut b, &limits()).unwrap(), None);
    assert_eq!(b.len(), 8);
}

fn arb_message() -> impl Strategy<Value = Message> {
    let idx = 0..PIECES;
    let blk =
        (0..PIECES, any::<u32>(), 1..=limits().max_block).prop_map(|(index, begin, length)| {
            BlockRef {
                index,
                begin,
                length,
            }
        });
    prop_oneof![
        Just(Message::KeepAlive),
        Just(Message::Choke),
        Just(Message::Unchoke),
        Just(Message::Interested),
        Just(Message::NotInterested),
        idx.clone().prop_map(|index| Message::Have { index }),
        proptest::collection::vec(any::<u8>(), 125).prop_map(|mut v| {
            v[124] &= 0xff; // 1000 pieces = 125 whole bytes, no spare bits
            Message::Bitfield(Bytes::from(v))
        }),
        blk.clone().prop_map(Message::Request),
        (
            idx.clone(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 1..3000)
        )
            .prop_map(|(index, begin, d)| Message::Piece {
                index,
                begin,
                data: Bytes::from(d)
            }),
        blk.clone().prop_map(Message::Cancel),
        any::<u16>().prop_map(Message::Port),
        idx.clone().prop_map(|index| Message::Suggest { index }),
        Just(Message::HaveAll),
        Just(Message::HaveNone),
        blk.prop_map(Message::Reject),
        idx.prop_map(|index| Message::AllowedFast { index }),
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(id, p)| {
            Message::Extended {
                id,
                payload: Bytes::from(p),
            }
        }),
    ]
}

proptest! {
    #[test]
    fn round_trip_sequences_at_any_split(
        msgs in proptest::collection::vec(arb_message(), 1..12),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut all = BytesMut::new();
        for m in &msgs {
            encode(m, &mut all);
        }
        let total = all.len();
        // Whole buffer.
        let mut whole = all.clone();
        prop_assert_eq!(&dec_all(&mut whole, &limits()).unwrap(), &msgs);
        prop_assert!(whole.is_empty());
        // Split at any point: first part, then the rest appended.
        let at = cut.index(total + 1);
        let mut buf = BytesMut::from(&all[..at]);
        let mut got = dec_all(&mut buf, &limits()).unwrap();
        buf.extend_from_slice(&all[at..]);
        got.extend(dec_all(&mut buf, &limits()).unwrap());
        prop_assert_eq!(&got, &msgs);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn byte_at_a_time_gives_the_same_messages(msgs in proptest::collection::vec(arb_message(), 1..4)) {
        let mut all = BytesMut::new();
        for m in &msgs {
            encode(m, &mut all);
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in all.iter() {
            buf.extend_from_slice(&[*b]);
            got.extend(dec_all(&mut buf, &limits()).unwrap());
        }
        prop_assert_eq!(got, msgs);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400), pc in 0u32..50) {
        let l = Limits { piece_count: pc, max_block: 64, max_extended: 64 };
        let mut buf = BytesMut::from(&data[..]);
        for _ in 0..400 {
            match decode(&mut buf, &l) {
                // What decodes is within the limits and re-encodes to itself.
                Ok(Some(m)) => {
                    match &m {
                        Message::Have { index } | Message::Suggest { index } | Message::AllowedFast { index }
                        | Message::Piece { index, .. } => prop_assert!(pc == 0 || *index < pc),
                        Message::Request(b) | Message::Cancel(b) | Message::Reject(b) => {
                            prop_assert!(b.length >= 1 && b.length <= 64);
                            prop_assert!(pc == 0 || b.index < pc);
                        }
                        Message::Extended { payload, .. } => prop_assert!(payload.len() <= 64),
                        _ => {}
                    }
                    prop_assert_eq!(dec_all(&mut enc(&m), &l), Ok(vec![m]));
                }
                Ok(None) => break,
                // Only frame-level errors come out of the message decoder.
                Err(e) => {
                    prop_assert!(
                        !matches!(e, WireError::BadProtocol(_) | WireError::ExtHandshake(_)),
                        "{e:?}"
                    );
                    break;
                }
            }
        }
    }

    #[test]
    fn framed_garbage_never_panics(id in 0u8..=25, payload in proptest::collection::vec(any::<u8>(), 0..40)) {
        for l in [Limits::new(17), Limits::new(u32::MAX)] {
            let mut b = frame(id, &payload);
            let wire = b.clone();
            match decode(&mut b, &l) {
                // A known message is exactly its frame.
                Ok(Some(m)) => {
                    prop_assert_eq!(enc(&m), wire);
                    prop_assert!(b.is_empty());
                }
                // An unknown id of this size is skipped whole.
                Ok(None) => {
                    prop_assert!(matches!(id, 10..=12 | 18 | 19 | 21..), "id {} not decoded", id);
                    prop_assert!(b.is_empty());
                }
                Err(e) => prop_assert!(
                    matches!(
                        e,
                        WireError::BadLength { .. }
                            | WireError::BlockLength { .. }
                            | WireError::IndexOutOfRange { .. }
                            | WireError::SpareBits { .. }
                    ),
                    "id {}: {:?}", id, e
                ),
            }
        }
    }
}
