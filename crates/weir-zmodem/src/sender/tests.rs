//! Sender unit tests against a scripted receiver.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::*;
use crate::decode::{Decoder, Item};

fn take(s: &mut Sender) -> Vec<u8> {
    let v = s.pending_output().to_vec();
    s.consume_output(v.len());
    v
}

fn items(wire: &[u8]) -> (Vec<Item>, BytesMut) {
    let mut d = Decoder::new(false, 64 * 1024);
    let mut out = BytesMut::new();
    let mut v = Vec::new();
    let mut rest = wire;
    while !rest.is_empty() {
        let (n, it) = d.decode(rest, &mut out);
        rest = &rest[n..];
        v.extend(it);
    }
    (v, out)
}

fn hex(h: Header) -> Vec<u8> {
    let mut v = Vec::new();
    encode_header(&h, HeaderFormat::Hex, &mut Escaper::new(false), &mut v);
    v
}

fn zrinit(flags: u8, buf: u16) -> Vec<u8> {
    let [lo, hi] = buf.to_le_bytes();
    hex(Header {
        frame_type: frame::ZRINIT,
        data: [lo, hi, 0, flags],
    })
}

const LRZSZ_FLAGS: u8 = zrinit::CANFDX | zrinit::CANOVIO | zrinit::CANFC32;

fn offer(size: u64) -> FileOffer {
    FileOffer {
        name: b"a.bin".to_vec(),
        size,
        mtime: 0,
        mode: 0o644,
    }
}

fn headers(v: &[Item]) -> Vec<(u8, u32)> {
    v.iter()
        .filter_map(|i| match i {
            Item::Header(h, _) => Some((h.frame_type, h.pos())),
            _ => None,
        })
        .collect()
}

fn ends(v: &[Item]) -> Vec<FrameEnd> {
    v.iter()
        .filter_map(|i| match i {
            Item::Subpacket { end, .. } => Some(*end),
            _ => None,
        })
        .collect()
}

/// Runs the sender up to streaming the file (ZRPOS 0 answered).
fn started(cfg: SenderConfig, size: u64, t: Instant) -> Sender {
    let mut s = Sender::new(cfg, vec![offer(size)], t).unwrap();
    take(&mut s);
    s.handle_input(t, &zrinit(LRZSZ_FLAGS, 0)).unwrap();
    take(&mut s);
    s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 0)))
        .unwrap();
    s
}

#[test]
fn opens_like_sz_and_absorbs_the_second_zrinit() {
    let t = Instant::now(); // test-epoch
    let mut s = Sender::new(SenderConfig::default(), vec![offer(10)], t).unwrap();
    let first = take(&mut s);
    assert!(first.starts_with(b"rz\r**\x18B00"));
    s.handle_input(t, &zrinit(LRZSZ_FLAGS, 0)).unwrap();
    let (it, block) = items(&take(&mut s));
    assert_eq!(headers(&it), vec![(frame::ZFILE, 0x0100_0000)]); // ZF0 = ZCBIN
    assert_eq!(ends(&it), vec![FrameEnd::Crcw]);
    assert!(block.starts_with(b"a.bin\x0010 0 644 0 1 10\x00"));
    // rz's second ZRINIT (answer to our ZRQINIT) must not resend ZFILE.
    s.handle_input(t, &zrinit(LRZSZ_FLAGS, 0)).unwrap();
    assert!(take(&mut s).is_empty());
    // But a lost ZFILE is resent when the timer runs out.
    let d = s.poll_timeout().unwrap();
    s.handle_timeout(d).unwrap();
    assert_eq!(
        headers(&items(&take(&mut s)).0),
        vec![(frame::ZFILE, 0x0100_0000)]
    );
}

#[test]
fn streams_8k_zcrcg_blocks_then_zcrce_and_zeof() {
    let t = Instant::now(); // test-epoch
    let mut s = started(SenderConfig::default(), 20_000, t);
    let req = s.poll_data_request().unwrap();
    assert_eq!((req.offset, req.len), (0, 20_000));
    s.supply_data(t, 0, 0, &vec![7u8; 20_000]).unwrap();
    let (it, data) = items(&take(&mut s));
    assert_eq!(headers(&it), vec![(frame::ZDATA, 0), (frame::ZEOF, 20_000)]);
    assert_eq!(
        ends(&it),
        vec![FrameEnd::Crcg, FrameEnd::Crcg, FrameEnd::Crce]
    );
    assert_eq!(data.len(), 20_000);
    s.handle_input(t, &zrinit(LRZSZ_FLAGS, 0)).unwrap();
    assert_eq!(headers(&items(&take(&mut s)).0), vec![(frame::ZFIN, 0)]);
    s.handle_input(t, &hex(Header::with_pos(frame::ZFIN, 0)))
        .unwrap();
    assert_eq!(take(&mut s), b"OO");
    assert!(s.is_finished());
}

#[test]
fn zrpos_drops_pending_output_and_syncs_with_zcrcw() {
    let t = Instant::now(); // test-epoch
    let mut s = started(SenderConfig::default(), 100_000, t);
    s.supply_data(t, 0, 0, &vec![1u8; 65_536]).unwrap();
    assert!(s.pending_output().len() > 65_536);
    s.consume_output(1000); // only part of it reached the line
    s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 8192)))
        .unwrap();
    assert!(s.pending_output().len() < 100, "stale data dropped");
    let req = s.poll_data_request().unwrap();
    assert_eq!(req.offset, 8192);
    s.supply_data(t, 0, 8192, &vec![1u8; 40_000]).unwrap();
    let (it, _) = items(&take(&mut s));
    assert_eq!(headers(&it), vec![(frame::ZDATA, 8192)]);
    assert_eq!(
        ends(&it),
        vec![FrameEnd::Crcw],
        "one block, then wait for ZACK"
    );
    assert!(s.poll_data_request().is_none());
    s.handle_input(t, &hex(Header::with_pos(frame::ZACK, 16_384)))
        .unwrap();
    assert_eq!(s.poll_data_request().unwrap().offset, 16_384);
    assert_eq!(s.restarts(), 1);
    // A position past the end is refused.
    let e = s
        .handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 200_000)))
        .unwrap_err();
    assert_eq!(
        e,
        SendError::BadPosition {
            pos: 200_000,
            size: 100_000
        }
    );
}

#[test]
fn the_same_position_again_and_again_gives_up() {
    let t = Instant::now(); // test-epoch
    let cfg = SenderConfig {
        retries: 3,
        ..Default::default()
    };
    let mut s = started(cfg, 100_000, t);
    s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 0)))
        .unwrap();
    // The resync block never gets its ZACK: resent on every timeout, until
    // the same position has failed too often.
    let mut res = Ok(());
    for _ in 0..10 {
        if let Some(req) = s.poll_data_request() {
            s.supply_data(t, 0, req.offset, &vec![0u8; req.len])
                .unwrap();
        }
        take(&mut s);
        let d = s.poll_timeout().unwrap();
        res = s.handle_timeout(d);
        if res.is_err() {
            break;
        }
    }
    assert_eq!(res, Err(SendError::TooManyErrors(0)));
    assert!(s.pending_output().starts_with(&[CAN; 10]));
}

#[test]
fn window_asks_for_acks_every_quarter_and_stops_when_full() {
    let t = Instant::now(); // test-epoch
    let cfg = SenderConfig {
        window: Some(32_768),
        ..Default::default()
    };
    let mut s = started(cfg, 1_000_000, t);
    assert_eq!(s.block_size(), 8192);
    let req = s.poll_data_request().unwrap();
    assert_eq!(req.len, 32_768, "no more than the window");
    s.supply_data(t, 0, 0, &vec![0u8; req.len]).unwrap();
    let (it, _) = items(&take(&mut s));
    assert_eq!(ends(&it), vec![FrameEnd::Crcq; 4]);
    assert!(s.poll_data_request().is_none(), "window full");
    s.handle_input(t, &hex(Header::with_pos(frame::ZACK, 8192)))
        .unwrap();
    assert_eq!(s.poll_data_request().unwrap().len, 8192);
}

#[test]
fn receiver_buffer_size_means_segments() {
    let t = Instant::now(); // test-epoch
    let mut s = Sender::new(SenderConfig::default(), vec![offer(10_000)], t).unwrap();
    take(&mut s);
    s.handle_input(t, &zrinit(LRZSZ_FLAGS, 2048)).unwrap();
    take(&mut s);
    s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 0)))
        .unwrap();
    assert_eq!(s.block_size(), 2048);
    let req = s.poll_data_request().unwrap();
    assert_eq!(req.len, 2048);
    s.supply_data(t, 0, 0, &vec![0u8; 2048]).unwrap();
    assert_eq!(ends(&items(&take(&mut s)).0), vec![FrameEnd::Crcw]);
}

#[test]
fn escape_ctl_sends_zsinit_and_escapes_everything() {
    let t = Instant::now(); // test-epoch
    let cfg = SenderConfig {
        escape_ctl: true,
        ..Default::default()
    };
    let mut s = Sender::new(cfg, vec![offer(256)], t).unwrap();
    take(&mut s);
    s.handle_input(t, &zrinit(LRZSZ_FLAGS, 0)).unwrap();
    let (it, _) = items(&take(&mut s));
    assert_eq!(headers(&it), vec![(frame::ZSINIT, 0x4000_0000)]);
    s.handle_input(t, &hex(Header::with_pos(frame::ZACK, 1)))
        .unwrap();
    take(&mut s);
    s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 0)))
        .unwrap();
    let all: Vec<u8> = (0..=255).collect();
    s.supply_data(t, 0, 0, &all).unwrap();
    let wire = take(&mut s);
    // No raw control byte but ZDLE (and the XON that lrzsz also sends).
    assert!(
        wire.iter()
            .all(|&b| b & 0x60 != 0 || b == 0x18 || b == 0x11)
    );
    let mut d = Decoder::new(true, 8192);
    let mut out = BytesMut::new();
    let mut rest = &wire[..];
    while !rest.is_empty() {
        let (n, _) = d.decode(rest, &mut out);
        rest = &rest[n..];
    }
    assert_eq!(&out[..], &all[..]);
}

#[test]
fn skip_moves_to_the_next_file_and_cancel_stops() {
    let t = Instant::now(); // test-epoch
    let mut s = Sender::new(SenderConfig::default(), vec![offer(5), offer(6)], t).unwrap();
    take(&mut s);
    s.handle_input(t, &zrinit(LRZSZ_FLAGS, 0)).unwrap();
    take(&mut s);
    s.handle_input(t, &hex(Header::with_pos(frame::ZSKIP, 0)))
        .unwrap();
    assert_eq!(
        s.poll_event(),
        Some(SendEvent::ReceiverReady {
            flags: LRZSZ_FLAGS,
            flags1: 0,
            buffer: 0
        })
    );
    assert_eq!(s.poll_event(), Some(SendEvent::FileSkipped { file: 0 }));
    assert_eq!(
        headers(&items(&take(&mut s)).0),
        vec![(frame::ZFILE, 0x0100_0000)]
    );
    assert_eq!(s.handle_input(t, &[CAN; 5]), Err(SendError::Cancelled));
    assert!(s.is_done() && !s.is_finished());
    let _ = Duration::ZERO;
}

#[test]
fn repeated_and_outdated_zrpos_are_ignored() {
    let t = Instant::now(); // test-epoch
    let mut s = started(SenderConfig::default(), 200_000, t);
    s.supply_data(t, 0, 0, &vec![1u8; 65_536]).unwrap();
    take(&mut s);
    // Several in one read: one restart.
    let mut twice = hex(Header::with_pos(frame::ZRPOS, 8192));
    twice.extend(hex(Header::with_pos(frame::ZRPOS, 8192)));
    s.handle_input(t, &twice).unwrap();
    s.supply_data(t, 0, 8192, &vec![1u8; 8192]).unwrap();
    assert_eq!(ends(&items(&take(&mut s)).0), vec![FrameEnd::Crcw]);
    // rz repeats its ZRPOS while it skips stale data: no second restart.
    for _ in 0..5 {
        s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 8192)))
            .unwrap();
    }
    assert!(take(&mut s).is_empty());
    assert_eq!((s.restarts(), s.stale_zrpos()), (1, 6));
    s.handle_input(t, &hex(Header::with_pos(frame::ZACK, 16_384)))
        .unwrap();
    // A late ZRPOS below what was acknowledged is history too.
    s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 8192)))
        .unwrap();
    assert_eq!(s.restarts(), 1);
    assert_eq!(s.poll_data_request().unwrap().offset, 16_384);
    // A new error at or after the acknowledged position restarts.
    s.handle_input(t, &hex(Header::with_pos(frame::ZRPOS, 16_384)))
        .unwrap();
    assert_eq!(s.restarts(), 2);
}

#[test]
fn streaming_asks_for_acks_and_bounds_what_is_in_flight() {
    let t = Instant::now(); // test-epoch
    let mut s = started(SenderConfig::default(), 1 << 20, t);
    assert!(s.streaming() && s.wants_acks());
    let req = s.poll_data_request().unwrap();
    assert_eq!(req.len, 256 * 1024);
    s.supply_data(t, 0, 0, &vec![5u8; req.len]).unwrap();
    let e = ends(&items(&take(&mut s)).0);
    assert_eq!(e.len(), 32);
    for (k, end) in e.iter().enumerate() {
        let want = if k % 8 == 7 {
            FrameEnd::Crcq
        } else {
            FrameEnd::Crcg
        };
        assert_eq!(*end, want, "subpacket {k}");
    }
    assert!(s.poll_data_request().is_none(), "256 KiB unacknowledged");
    s.handle_input(t, &hex(Header::with_pos(frame::ZACK, 65_536)))
        .unwrap();
    assert_eq!(s.poll_data_request().unwrap().len, 65_536);
    // Unbounded streaming when asked.
    let cfg = SenderConfig {
        stream_window: None,
        ..Default::default()
    };
    let s = started(cfg, 1 << 20, t);
    assert!(s.streaming() && !s.wants_acks());
}

#[test]
fn a_receiver_that_skips_stale_data_gets_a_larger_bound() {
    let t = Instant::now(); // test-epoch
    let mut s = Sender::new(SenderConfig::default(), vec![offer(1 << 24)], t).unwrap();
    take(&mut s);
    let [lo, hi] = 0u16.to_le_bytes();
    let weir_zrinit = hex(Header {
        frame_type: frame::ZRINIT,
        data: [lo, hi, crate::consts::zrinit1::STALE_OK, LRZSZ_FLAGS],
    });
    s.handle_input(t, &weir_zrinit).unwrap();
    assert_eq!(s.in_flight_bound(), Some(4 << 20));
    let mut lrz = Sender::new(SenderConfig::default(), vec![offer(1 << 24)], t).unwrap();
    take(&mut lrz);
    lrz.handle_input(t, &zrinit(LRZSZ_FLAGS, 0)).unwrap();
    assert_eq!(lrz.in_flight_bound(), Some(256 << 10));
}
