//! Unit and property tests of the decoder against the encoder.

use bytes::BytesMut;
use proptest::prelude::*;

use super::*;
use crate::escape::Escaper;
use crate::frame::{encode_header, encode_subpacket};

/// Feeds `wire` in chunks of the given sizes (cycled) and collects items.
fn decode_all(dec: &mut Decoder, wire: &[u8], chunks: &[usize], out: &mut BytesMut) -> Vec<Item> {
    let mut items = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < wire.len() {
        let n = chunks[k % chunks.len()].max(1).min(wire.len() - pos);
        k += 1;
        let mut chunk = &wire[pos..pos + n];
        while !chunk.is_empty() {
            let (used, item) = dec.decode(chunk, out);
            chunk = &chunk[used..];
            if let Some(it) = item {
                items.push(it);
            }
        }
        pos += n;
    }
    items
}

fn wire_frame(fmt: HeaderFormat, payloads: &[(&[u8], FrameEnd)], ctl: bool) -> Vec<u8> {
    let mut esc = Escaper::new(ctl);
    let mut w = Vec::new();
    encode_header(&Header::with_pos(frame::ZDATA, 1234), fmt, &mut esc, &mut w);
    for (p, e) in payloads {
        encode_subpacket(p, *e, fmt.data_crc(), &mut esc, &mut w);
    }
    w
}

#[test]
fn header_then_subpackets() {
    let w = wire_frame(
        HeaderFormat::Bin32,
        &[
            (b"hello", FrameEnd::Crcg),
            (b"\x18\x11world\x7f\xff", FrameEnd::Crce),
        ],
        false,
    );
    let mut dec = Decoder::new(false, 8192);
    let mut out = BytesMut::new();
    let items = decode_all(&mut dec, &w, &[3, 1, 7], &mut out);
    assert_eq!(
        items,
        vec![
            Item::Header(Header::with_pos(frame::ZDATA, 1234), HeaderFormat::Bin32),
            Item::Subpacket {
                end: FrameEnd::Crcg,
                len: 5
            },
            Item::Subpacket {
                end: FrameEnd::Crce,
                len: 9
            },
        ]
    );
    assert_eq!(&out[..], b"hello\x18\x11world\x7f\xff");
    assert_eq!(dec.garbage(), 0);
}

#[test]
fn hex_header_followed_by_data_uses_crc16() {
    // lrzsz sends ZSINIT as a hex header when escaping, then a subpacket.
    let mut esc = Escaper::new(true);
    let mut w = Vec::new();
    encode_header(
        &Header::with_flags(frame::ZSINIT, 0x40, 0, 0, 0),
        HeaderFormat::Hex,
        &mut esc,
        &mut w,
    );
    encode_subpacket(b"\0", FrameEnd::Crcw, CrcKind::Crc16, &mut esc, &mut w);
    let mut dec = Decoder::new(false, 8192);
    let mut out = BytesMut::new();
    let items = decode_all(&mut dec, &w, &[1], &mut out);
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[1],
        Item::Subpacket {
            end: FrameEnd::Crcw,
            len: 1
        }
    );
    assert_eq!(&out[..], b"\0");
}

#[test]
fn uppercase_hex_and_noise_are_accepted() {
    let mut w = Vec::new();
    encode_header(
        &Header::with_pos(frame::ZRPOS, 77),
        HeaderFormat::Hex,
        &mut Escaper::new(false),
        &mut w,
    );
    let upper: Vec<u8> = w.iter().map(|b| b.to_ascii_uppercase()).collect();
    let mut noisy = b"garbage\x11\x13".to_vec();
    noisy.extend_from_slice(&upper[..8]);
    noisy.push(0x91); // XOFF|0x80 inside the hex digits is dropped
    noisy.extend_from_slice(&upper[8..]);
    let mut dec = Decoder::new(false, 8192);
    let items = decode_all(&mut dec, &noisy, &[64], &mut BytesMut::new());
    assert_eq!(
        items,
        vec![Item::Header(
            Header::with_pos(frame::ZRPOS, 77),
            HeaderFormat::Hex
        )]
    );
    assert_eq!(dec.garbage(), 7);
}

#[test]
fn bad_crc_is_reported_and_data_removed() {
    let mut w = wire_frame(
        HeaderFormat::Bin32,
        &[(b"0123456789", FrameEnd::Crcg)],
        false,
    );
    // Corrupt a data byte (the header is 3 + 5 + 4 bytes, none escaped here).
    let hdr_len = w.len() - (10 + 2 + 4);
    w[hdr_len + 3] ^= 0x01;
    let mut dec = Decoder::new(false, 8192);
    let mut out = BytesMut::from(&b"kept"[..]);
    let items = decode_all(&mut dec, &w, &[5], &mut out);
    assert_eq!(items[1], Item::Error(DecodeError::SubpacketCrc));
    assert_eq!(&out[..], b"kept");
    assert!(!dec.in_data());
}

#[test]
fn bad_header_crc() {
    let mut w = Vec::new();
    encode_header(
        &Header::with_pos(frame::ZRPOS, 5),
        HeaderFormat::Bin16,
        &mut Escaper::new(false),
        &mut w,
    );
    w[4] ^= 0x02;
    let items = decode_all(
        &mut Decoder::new(false, 8192),
        &w,
        &[2],
        &mut BytesMut::new(),
    );
    assert_eq!(items, vec![Item::Error(DecodeError::HeaderCrc)]);
}

#[test]
fn truncated_frame_yields_nothing_and_recovers() {
    let w = wire_frame(
        HeaderFormat::Bin16,
        &[(b"some data here", FrameEnd::Crce)],
        false,
    );
    let mut dec = Decoder::new(false, 8192);
    let mut out = BytesMut::new();
    let items = decode_all(&mut dec, &w[..w.len() - 3], &[4], &mut out);
    assert_eq!(items.len(), 1, "only the header: {items:?}");
    assert!(dec.in_data());
    // The line drops the rest; the caller abandons and a new frame decodes.
    dec.abandon(&mut out);
    assert!(out.is_empty());
    let again = decode_all(&mut dec, &w, &[9], &mut out);
    assert_eq!(again.len(), 2);
    assert_eq!(&out[..], b"some data here");
}

#[test]
fn five_cans_cancel_anywhere() {
    let mut dec = Decoder::new(false, 8192);
    let cans = [CAN; 5];
    assert_eq!(
        decode_all(&mut dec, &cans, &[1], &mut BytesMut::new()),
        vec![Item::Cancel]
    );
    // Inside a data subpacket too.
    let mut w = wire_frame(HeaderFormat::Bin32, &[], false);
    w.extend_from_slice(b"abc");
    w.extend_from_slice(&[CAN; 5]);
    let mut out = BytesMut::new();
    let items = decode_all(&mut dec, &w, &[2], &mut out);
    assert_eq!(items.last(), Some(&Item::Cancel));
    assert!(out.is_empty());
    // Four are not enough.
    let items = decode_all(
        &mut Decoder::new(false, 8192),
        &[CAN; 4],
        &[1],
        &mut BytesMut::new(),
    );
    assert!(items.is_empty());
}

#[test]
fn bad_escape_and_too_long() {
    let mut w = wire_frame(HeaderFormat::Bin32, &[], false);
    w.extend_from_slice(&[b'a', ZDLE, 0x30]);
    let mut out = BytesMut::new();
    let items = decode_all(&mut Decoder::new(false, 8192), &w, &[100], &mut out);
    assert_eq!(
        items.last(),
        Some(&Item::Error(DecodeError::BadEscape(0x30)))
    );
    assert!(out.is_empty());

    let w = wire_frame(
        HeaderFormat::Bin32,
        &[(&[b'x'; 100], FrameEnd::Crce)],
        false,
    );
    let items = decode_all(&mut Decoder::new(false, 64), &w, &[7], &mut out);
    assert_eq!(
        items.last(),
        Some(&Item::Error(DecodeError::SubpacketTooLong(64)))
    );
    assert!(out.is_empty());
}

#[test]
fn escape_ctl_drops_raw_controls() {
    let mut w = wire_frame(
        HeaderFormat::Bin32,
        &[(b"\x01\x02ab", FrameEnd::Crce)],
        true,
    );
    // Line noise: raw control bytes sprinkled in.
    w.insert(w.len() - 6, 0x05);
    w.insert(3, 0x81);
    let mut out = BytesMut::new();
    let items = decode_all(&mut Decoder::new(true, 8192), &w, &[3], &mut out);
    assert_eq!(
        items.last(),
        Some(&Item::Subpacket {
            end: FrameEnd::Crce,
            len: 4
        })
    );
    assert_eq!(&out[..], b"\x01\x02ab");
}

fn any_end() -> impl Strategy<Value = FrameEnd> {
    prop_oneof![
        Just(FrameEnd::Crce),
        Just(FrameEnd::Crcg),
        Just(FrameEnd::Crcq),
        Just(FrameEnd::Crcw)
    ]
}

fn any_fmt() -> impl Strategy<Value = HeaderFormat> {
    prop_oneof![
        Just(HeaderFormat::Hex),
        Just(HeaderFormat::Bin16),
        Just(HeaderFormat::Bin32)
    ]
}

proptest! {
    #[test]
    fn headers_round_trip(t in 0u8..20, data in any::<[u8; 4]>(), fmt in any_fmt(), ctl in any::<bool>(),
                         chunks in proptest::collection::vec(1usize..20, 1..4)) {
        let h = Header { frame_type: t, data };
        let mut w = Vec::new();
        encode_header(&h, fmt, &mut Escaper::new(ctl), &mut w);
        let mut dec = Decoder::new(ctl, 8192);
        let items = decode_all(&mut dec, &w, &chunks, &mut BytesMut::new());
        prop_assert_eq!(items, vec![Item::Header(h, fmt)]);
    }

    #[test]
    fn subpackets_round_trip(payloads in proptest::collection::vec(
                                 (proptest::collection::vec(any::<u8>(), 0..300), any_end()), 1..5),
                             fmt in any_fmt(), ctl in any::<bool>(),
                             chunks in proptest::collection::vec(1usize..64, 1..4)) {
        // Only the last subpacket may close the frame.
        let n = payloads.len();
        let frames: Vec<(&[u8], FrameEnd)> = payloads.iter().enumerate().map(|(i, (p, e))| {
            let e = if i + 1 < n { if e.continues() { *e } else { FrameEnd::Crcg } } else { *e };
            (&p[..], e)
        }).collect();
        let mut w = Vec::new();
        let mut esc = Escaper::new(ctl);
        encode_header(&Header::with_pos(frame::ZDATA, 0), fmt, &mut esc, &mut w);
        for (p, e) in &frames {
            encode_subpacket(p, *e, fmt.data_crc(), &mut esc, &mut w);
        }
        if ctl {
            // Escaped output never carries a raw control byte except the
            // hex header's trailer and the XON after ZCRCW.
            let body = if fmt == HeaderFormat::Hex { &w[..] } else { &w[3..] };
            for &b in body {
                prop_assert!(b & 0x60 != 0 || b == ZDLE || b == XON || b == b'\r' || b == 0x8a);
            }
        }
        let mut dec = Decoder::new(ctl, 8192);
        let mut out = BytesMut::new();
        let items = decode_all(&mut dec, &w, &chunks, &mut out);
        prop_assert_eq!(items.len(), n + 1);
        let mut expect = Vec::new();
        for (i, (p, e)) in frames.iter().enumerate() {
            prop_assert_eq!(items[i + 1], Item::Subpacket { end: *e, len: p.len() });
            expect.extend_from_slice(p);
        }
        prop_assert_eq!(&out[..], &expect[..]);
    }

    #[test]
    fn corruption_never_yields_wrong_data(payload in proptest::collection::vec(any::<u8>(), 1..2000),
                                          at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let w0 = wire_frame(HeaderFormat::Bin32, &[(&payload, FrameEnd::Crce)], false);
        let mut w = w0.clone();
        let i = at.index(w.len());
        w[i] ^= flip;
        let mut out = BytesMut::new();
        let items = decode_all(&mut Decoder::new(false, 8192), &w, &[17], &mut out);
        for it in &items {
            if let Item::Subpacket { .. } = it {
                prop_assert_eq!(&out[..], &payload[..]);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000), ctl in any::<bool>()) {
        let mut dec = Decoder::new(ctl, 512);
        let mut out = BytesMut::new();
        let items = decode_all(&mut dec, &bytes, &[13], &mut out);
        // Only the data of good subpackets stays, none over the limit.
        dec.abandon(&mut out);
        let mut good = 0;
        for it in &items {
            if let Item::Subpacket { len, .. } = it {
                prop_assert!(*len <= 512);
                good += len;
            }
        }
        prop_assert_eq!(out.len(), good);
        // The same bytes in other reads give the same items.
        let mut dec2 = Decoder::new(ctl, 512);
        let mut out2 = BytesMut::new();
        prop_assert_eq!(decode_all(&mut dec2, &bytes, &[1, 200, 7], &mut out2), items);
    }
}

proptest! {
    #[test]
    fn block_path_round_trips(payloads in proptest::collection::vec(
                                  (proptest::collection::vec(
                                      prop_oneof![any::<u8>(), prop::sample::select(vec![0x18u8, 0x11, 0x13, 0x91, 0x93, 0x7f, 0xff, 0x0d])],
                                      0..3000), any_end()), 1..4),
                              fmt in any_fmt(), ctl in any::<bool>(), noise in any::<bool>(),
                              chunks in proptest::collection::vec(100usize..5000, 1..4)) {
        let n = payloads.len();
        let frames: Vec<(&[u8], FrameEnd)> = payloads.iter().enumerate().map(|(i, (p, e))| {
            let e = if i + 1 < n { if e.continues() { *e } else { FrameEnd::Crcg } } else { *e };
            (&p[..], e)
        }).collect();
        let mut w = Vec::new();
        let mut esc = Escaper::new(ctl);
        encode_header(&Header::with_pos(frame::ZDATA, 0), fmt, &mut esc, &mut w);
        for (p, e) in &frames {
            encode_subpacket(p, *e, fmt.data_crc(), &mut esc, &mut w);
        }
        if noise {
            // Raw XON/XOFF sprinkled in the data are dropped by the receiver.
            let mut v = Vec::with_capacity(w.len() + w.len() / 50);
            for (k, &b) in w.iter().enumerate() {
                v.push(b);
                if k > 20 && k % 97 == 0 && b != ZDLE {
                    v.push(if k % 2 == 0 { XON } else { XOFF | 0x80 });
                }
            }
            w = v;
        }
        let mut dec = Decoder::new(ctl, 8192);
        let mut out = BytesMut::new();
        let items = decode_all(&mut dec, &w, &chunks, &mut out);
        prop_assert_eq!(items.len(), n + 1, "{:?}", items);
        let mut expect = Vec::new();
        for (i, (p, e)) in frames.iter().enumerate() {
            prop_assert_eq!(items[i + 1], Item::Subpacket { end: *e, len: p.len() });
            expect.extend_from_slice(p);
        }
        prop_assert_eq!(&out[..], &expect[..]);
    }

    #[test]
    fn block_path_rejects_corruption(payload in proptest::collection::vec(any::<u8>(), 200..6000),
                                     at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let w0 = wire_frame(HeaderFormat::Bin32, &[(&payload, FrameEnd::Crcg), (b"tail", FrameEnd::Crce)], false);
        let mut w = w0.clone();
        let i = at.index(w.len());
        w[i] ^= flip;
        let mut out = BytesMut::new();
        let items = decode_all(&mut Decoder::new(false, 8192), &w, &[4096], &mut out);
        let mut expect = Vec::new();
        for it in &items {
            if let Item::Subpacket { len, .. } = it {
                if *len == payload.len() { expect.extend_from_slice(&payload); } else { expect.extend_from_slice(b"tail"); }
            }
        }
        // A subpacket still open at the end of input (its end marker was
        // corrupted) leaves unchecked bytes at the tail of the buffer.
        prop_assert_eq!(&out[..expect.len()], &expect[..]);
    }
}
