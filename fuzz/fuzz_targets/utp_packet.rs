//! weir-utp `packet::decode` and `packet::encode` (BEP 29 headers and
//! extension chains).
//!
//! Any datagram gives a packet or a typed error (`TooShort`, `Version`,
//! `Type`, `Extension`) matching what is wrong with it; an accepted one
//! passes `is_utp` and is never taken for KRPC, its payload is the tail of
//! the datagram at `payload_offset`, and re-encoding its header, selective
//! ACK and payload gives a packet that decodes to the same header and
//! payload, with the ACK padded to a multiple of 4 (at most
//! `MAX_SACK_LEN`). A packet encoded from fuzzed fields, padding and payload
//! decodes back to them, with the padding extensions skipped.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::Input;
use weir_utp::packet::{
    DecodeError, HEADER_LEN, Header, MAX_SACK_LEN, PacketType, decode, encode, sack_ext_len,
};

fn check_encoded(h: &Header, sack: Option<&[u8]>, pad: usize, payload: &[u8]) {
    let mut out = BytesMut::new();
    encode(h, sack, pad, payload, &mut out);
    let p = decode(&out).unwrap_or_else(|e| panic!("own packet refused: {e}"));
    assert_eq!(p.header, *h);
    assert_eq!(p.payload, payload);
    let sack = sack.filter(|s| !s.is_empty());
    let sack_len = sack.map_or(0, |s| (s.len().div_ceil(4) * 4).min(MAX_SACK_LEN));
    match (sack, p.sack) {
        (None, None) => {}
        (Some(s), Some(got)) => {
            assert_eq!(got.len(), sack_len);
            let n = s.len().min(sack_len);
            assert_eq!(&got[..n], &s[..n]);
            assert!(got[n..].iter().all(|&b| b == 0));
        }
        (want, got) => panic!("sack {want:?} came back as {got:?}"),
    }
    let pad = if pad == 1 { 2 } else { pad };
    assert_eq!(p.payload_offset, HEADER_LEN + sack_ext_len(sack_len) + pad);
    assert_eq!(out.len(), p.payload_offset + payload.len());
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let mode = inp.byte();
    if mode & 1 == 0 {
        let buf = inp.rest();
        match decode(buf) {
            Err(DecodeError::TooShort { len }) => {
                assert_eq!(len, buf.len());
                assert!(len < HEADER_LEN);
            }
            Err(DecodeError::Version(v)) => assert_eq!(v, buf[0] & 0x0f),
            Err(DecodeError::Type(t)) => {
                assert_eq!(t, buf[0] >> 4);
                assert!(t > 4);
            }
            Err(DecodeError::Extension { at }) => assert!(at >= HEADER_LEN && at <= buf.len()),
            Ok(p) => {
                assert!(weir_utp::is_utp(buf));
                assert!(!weir_dht::is_krpc(buf));
                assert!(p.payload_offset >= HEADER_LEN && p.payload_offset <= buf.len());
                assert_eq!(p.payload, &buf[p.payload_offset..]);
                assert!(p.sack.is_none_or(|s| !s.is_empty() && s.len() <= 255));
                check_encoded(&p.header, p.sack, 0, p.payload);
            }
        }
        return;
    }
    let ptype = [
        PacketType::Data,
        PacketType::Fin,
        PacketType::State,
        PacketType::Reset,
        PacketType::Syn,
    ][usize::from(mode >> 1) % 5];
    let h = Header {
        ptype,
        conn_id: inp.u16(),
        timestamp_us: inp.u32(),
        timestamp_diff_us: inp.u32(),
        wnd_size: inp.u32(),
        seq_nr: inp.u16(),
        ack_nr: inp.u16(),
    };
    let sack_n = usize::from(inp.byte());
    let sack = inp.take(sack_n % 160);
    let pad = usize::from(inp.u16() % 1500);
    let sack = (mode & 0x80 != 0).then_some(sack);
    check_encoded(&h, sack, pad, inp.rest());
});
