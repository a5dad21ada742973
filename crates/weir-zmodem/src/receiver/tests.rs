//! Receiver unit tests against a scripted sender.

use std::time::Instant;

use super::*;
use crate::consts::{CAN, TESCCTL};
use crate::crc::CrcKind;
use crate::frame::encode_subpacket;

fn take(r: &mut Receiver) -> Vec<u8> {
    let v = r.pending_output().to_vec();
    r.consume_output(v.len());
    v
}

fn decode_headers(wire: &[u8]) -> Vec<(u8, u32)> {
    let mut d = Decoder::new(false, 8192);
    let mut out = BytesMut::new();
    let mut v = Vec::new();
    let mut rest = wire;
    while !rest.is_empty() {
        let (n, it) = d.decode(rest, &mut out);
        rest = &rest[n..];
        if let Some(Item::Header(h, _)) = it {
            v.push((h.frame_type, h.pos()));
        }
    }
    v
}

struct Wire {
    esc: Escaper,
    v: Vec<u8>,
}

impl Wire {
    fn new() -> Self {
        Wire {
            esc: Escaper::new(false),
            v: Vec::new(),
        }
    }
    fn hex(mut self, h: Header) -> Self {
        encode_header(&h, HeaderFormat::Hex, &mut self.esc, &mut self.v);
        self
    }
    fn bin(mut self, h: Header) -> Self {
        encode_header(&h, HeaderFormat::Bin32, &mut self.esc, &mut self.v);
        self
    }
    fn sub(mut self, data: &[u8], end: FrameEnd, crc: CrcKind) -> Self {
        encode_subpacket(data, end, crc, &mut self.esc, &mut self.v);
        self
    }
}

fn zfile(name: &[u8], size: u64) -> Vec<u8> {
    let mut block = Vec::new();
    FileInfo {
        name: name.to_vec(),
        size: Some(size),
        ..Default::default()
    }
    .encode(&mut block);
    Wire::new()
        .bin(Header::with_flags(frame::ZFILE, zconv::ZCBIN, 0, 0, 0))
        .sub(&block, FrameEnd::Crcw, CrcKind::Crc32)
        .v
}

/// A receiver that accepted a file and asked for position 0.
fn receiving(t: Instant) -> Receiver {
    let mut r = Receiver::new(ReceiverConfig::default(), t);
    take(&mut r);
    r.handle_input(t, &zfile(b"x", 100_000)).unwrap();
    match r.poll_event() {
        Some(RecvEvent::FileOffered(f)) => {
            assert_eq!(f.info.name, b"x");
            assert_eq!(f.info.size, Some(100_000));
            assert!(!f.wants_resume() && !f.wants_overwrite());
        }
        e => panic!("{e:?}"),
    }
    r.accept(t, 0);
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZRPOS, 0)]);
    r
}

#[test]
fn announces_like_rz_and_answers_zrqinit() {
    let t = Instant::now(); // test-epoch
    let mut r = Receiver::new(ReceiverConfig::default(), t);
    let w = take(&mut r);
    // flags CANFC32|CANOVIO|CANFDX = 0x23 in ZF0, buffer 0: full streaming;
    // ZF1 carries weir's STALE_OK hint (0x80).
    assert!(w.starts_with(b"**\x18B0100008023"));
    r.handle_input(t, &Wire::new().hex(Header::with_pos(frame::ZRQINIT, 0)).v)
        .unwrap();
    assert_eq!(take(&mut r), w);
}

#[test]
fn data_is_checked_acked_and_flushed_in_order() {
    let t = Instant::now(); // test-epoch
    let mut r = receiving(t);
    let w = Wire::new()
        .bin(Header::with_pos(frame::ZDATA, 0))
        .sub(b"hello ", FrameEnd::Crcg, CrcKind::Crc32)
        .sub(b"world", FrameEnd::Crcq, CrcKind::Crc32)
        .sub(b"!", FrameEnd::Crce, CrcKind::Crc32)
        .bin(Header::with_pos(frame::ZEOF, 12));
    r.handle_input(t, &w.v).unwrap();
    assert_eq!(
        decode_headers(&take(&mut r)),
        vec![(frame::ZACK, 11), (frame::ZRINIT, 0x2380_0000)]
    );
    let Some(RecvEvent::Data { offset: 0, data }) = r.poll_event() else {
        panic!()
    };
    assert_eq!(&data[..], b"hello world!");
    assert_eq!(r.poll_event(), Some(RecvEvent::FileDone { size: 12 }));
}

#[test]
fn bad_crc_asks_once_for_the_last_good_position() {
    let t = Instant::now(); // test-epoch
    let mut r = receiving(t);
    let good = Wire::new()
        .bin(Header::with_pos(frame::ZDATA, 0))
        .sub(&[1u8; 1000], FrameEnd::Crcg, CrcKind::Crc32)
        .v;
    r.handle_input(t, &good).unwrap();
    let mut bad = Wire::new()
        .sub(&[2u8; 1000], FrameEnd::Crcg, CrcKind::Crc32)
        .v;
    bad[10] ^= 0x40;
    r.handle_input(t, &bad).unwrap();
    // More stale subpackets: no second ZRPOS while the first is outstanding.
    let stale = Wire::new()
        .sub(&[3u8; 500], FrameEnd::Crcg, CrcKind::Crc32)
        .sub(&[4u8; 500], FrameEnd::Crcg, CrcKind::Crc32)
        .v;
    r.handle_input(t, &stale).unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZRPOS, 1000)]);
    // A ZDATA for the wrong place is answered with ZRPOS again.
    r.handle_input(t, &Wire::new().bin(Header::with_pos(frame::ZDATA, 3000)).v)
        .unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZRPOS, 1000)]);
    // The resend is accepted.
    let resend = Wire::new()
        .bin(Header::with_pos(frame::ZDATA, 1000))
        .sub(&[2u8; 1000], FrameEnd::Crcw, CrcKind::Crc32)
        .v;
    r.handle_input(t, &resend).unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZACK, 2000)]);
    assert_eq!(r.position(), 2000);
    r.cancel();
    let mut all = Vec::new();
    while let Some(e) = r.poll_event() {
        if let RecvEvent::Data { data, .. } = e {
            all.extend_from_slice(&data);
        }
    }
    assert_eq!(
        all.len(),
        2000,
        "partial file kept up to the last good byte"
    );
    assert!(all[..1000].iter().all(|&b| b == 1) && all[1000..].iter().all(|&b| b == 2));
}

#[test]
fn a_timeout_inside_an_unwanted_subpacket_keeps_the_checked_data() {
    let t = Instant::now(); // test-epoch
    let mut r = receiving(t);
    // Checked data the receiver holds (below its flush size)...
    let w = Wire::new().bin(Header::with_pos(frame::ZDATA, 0)).sub(
        b"0123456789",
        FrameEnd::Crcw,
        CrcKind::Crc32,
    );
    r.handle_input(t, &w.v).unwrap();
    // ...then a ZFILE header in the middle of the file and part of its
    // block, which is not the file's data, and the line goes quiet.
    let z = zfile(b"other", 5);
    r.handle_input(t, &z[..z.len() - 4]).unwrap();
    take(&mut r);
    let d = r.poll_timeout().unwrap();
    r.handle_timeout(d).unwrap();
    // The sender comes back to our position and ends the file.
    let w = Wire::new().bin(Header::with_pos(frame::ZEOF, 10));
    r.handle_input(d, &w.v).unwrap();
    let mut got = Vec::new();
    while let Some(e) = r.poll_event() {
        match e {
            RecvEvent::Data { offset, data } => {
                assert_eq!(offset as usize, got.len());
                got.extend_from_slice(&data);
            }
            RecvEvent::FileDone { size } => assert_eq!(size, 10),
            RecvEvent::Retransmit { .. } => {}
            e => panic!("{e:?}"),
        }
    }
    assert_eq!(got, b"0123456789");
}

#[test]
fn truncated_frame_times_out_into_zrpos() {
    let t = Instant::now(); // test-epoch
    let mut r = receiving(t);
    let w = Wire::new()
        .bin(Header::with_pos(frame::ZDATA, 0))
        .sub(&[9u8; 3000], FrameEnd::Crcg, CrcKind::Crc32)
        .v;
    r.handle_input(t, &w[..w.len() - 100]).unwrap();
    assert!(take(&mut r).is_empty());
    let d = r.poll_timeout().unwrap();
    r.handle_timeout(d).unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZRPOS, 0)]);
}

#[test]
fn zsinit_escctl_and_crc16() {
    let t = Instant::now(); // test-epoch
    let mut r = Receiver::new(ReceiverConfig::default(), t);
    take(&mut r);
    let w = Wire::new()
        .hex(Header::with_flags(frame::ZSINIT, TESCCTL, 0, 0, 0))
        .sub(b"\0", FrameEnd::Crcw, CrcKind::Crc16);
    r.handle_input(t, &w.v).unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZACK, 1)]);
    assert!(r.dec.escape_ctl());
}

#[test]
fn fin_waits_for_oo() {
    let t = Instant::now(); // test-epoch
    let mut r = Receiver::new(ReceiverConfig::default(), t);
    take(&mut r);
    r.handle_input(t, &Wire::new().hex(Header::with_pos(frame::ZFIN, 0)).v)
        .unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZFIN, 0)]);
    assert!(!r.is_done());
    r.handle_input(t, b"O").unwrap();
    assert!(!r.is_done());
    r.handle_input(t, b"O").unwrap();
    assert!(r.is_finished());
}

#[test]
fn hostile_inputs_fail_cleanly() {
    let t = Instant::now(); // test-epoch
    let mut r = Receiver::new(ReceiverConfig::default(), t);
    let cmd = Wire::new().bin(Header::with_pos(frame::ZCOMMAND, 0)).sub(
        b"rm -rf /\0",
        FrameEnd::Crcw,
        CrcKind::Crc32,
    );
    assert_eq!(r.handle_input(t, &cmd.v), Err(RecvError::CommandRefused));

    let mut r = receiving(t);
    assert_eq!(r.handle_input(t, &[CAN; 5]), Err(RecvError::Cancelled));

    let cfg = ReceiverConfig {
        max_garbage: 1000,
        ..Default::default()
    };
    let mut r = Receiver::new(cfg, t);
    assert_eq!(
        r.handle_input(t, &[b'x'; 2000]),
        Err(RecvError::GarbageExceeded(2000))
    );

    // A ZFILE block without a name is skipped.
    let mut r = Receiver::new(ReceiverConfig::default(), t);
    take(&mut r);
    let w = Wire::new()
        .bin(Header::with_flags(frame::ZFILE, 0, 0, 0, 0))
        .sub(b"\0", FrameEnd::Crcw, CrcKind::Crc32);
    r.handle_input(t, &w.v).unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZSKIP, 0)]);
    assert_eq!(r.poll_event(), None);
}

#[test]
fn a_lost_zrpos_is_sent_again_after_much_stale_data() {
    let t = Instant::now(); // test-epoch
    let mut r = receiving(t);
    let mut bad = Wire::new()
        .bin(Header::with_pos(frame::ZDATA, 0))
        .sub(&[1u8; 1000], FrameEnd::Crcg, CrcKind::Crc32)
        .v;
    bad[20] ^= 0x01;
    r.handle_input(t, &bad).unwrap();
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZRPOS, 0)]);
    // The sender never saw it and keeps streaming: 7 MiB pass quietly...
    let chunk = Wire::new()
        .sub(&[7u8; 8192], FrameEnd::Crcg, CrcKind::Crc32)
        .v;
    let mut sent = 0;
    while sent < 7 << 20 {
        r.handle_input(t, &chunk).unwrap();
        sent += chunk.len();
    }
    assert!(take(&mut r).is_empty());
    // ...past 8 MiB the ZRPOS goes out again.
    while sent < 9 << 20 {
        r.handle_input(t, &chunk).unwrap();
        sent += chunk.len();
    }
    assert_eq!(decode_headers(&take(&mut r)), vec![(frame::ZRPOS, 0)]);
}

#[test]
fn data_past_32_bit_positions_is_refused() {
    let t = Instant::now(); // test-epoch
    let mut r = Receiver::new(ReceiverConfig::default(), t);
    take(&mut r);
    r.handle_input(t, &zfile(b"big", u64::from(u32::MAX)))
        .unwrap();
    assert!(matches!(r.poll_event(), Some(RecvEvent::FileOffered(_))));
    // Resuming near the end: what fits below 4 GiB - 1 is taken...
    let start = u32::MAX - 10;
    r.accept(t, start);
    take(&mut r);
    let w = Wire::new()
        .bin(Header::with_pos(frame::ZDATA, start))
        .sub(&[1u8; 5], FrameEnd::Crcg, CrcKind::Crc32)
        .sub(&[2u8; 10], FrameEnd::Crcg, CrcKind::Crc32);
    // ...the subpacket that would cross it cancels the session.
    assert_eq!(
        r.handle_input(t, &w.v),
        Err(RecvError::TooLong(u64::from(start) + 5))
    );
    assert!(r.is_done() && !r.is_finished());
    assert_eq!(
        r.poll_event(),
        Some(RecvEvent::Data {
            offset: u64::from(start),
            data: Bytes::from_static(&[1u8; 5])
        })
    );
    assert!(take(&mut r).starts_with(&[CAN; 10]), "the sender is told");
}
