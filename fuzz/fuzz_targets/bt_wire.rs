//! weir-bt `wire::decode` (BEP 3/6/10 messages) with default and with
//! fuzzer-chosen `Limits`.
//!
//! The stream is decoded whole and again cut into pieces: the messages and
//! whether it ends in an error must not depend on the cuts. Every message
//! decoded re-encodes (`wire::encode`) to a frame that decodes to itself
//! under the same limits, within `Limits::max_frame`.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_bt::wire::{Limits, Message, WireError, decode, encode};
use weir_fuzz::{Input, chunks};

fn run(pieces: &[&[u8]], limits: &Limits) -> (Vec<Message>, Option<WireError>) {
    let mut buf = BytesMut::new();
    let mut msgs = Vec::new();
    for p in pieces {
        buf.extend_from_slice(p);
        loop {
            let before = buf.len();
            match decode(&mut buf, limits) {
                Ok(Some(m)) => {
                    assert!(buf.len() < before, "a message that consumed nothing");
                    msgs.push(m)
                }
                Ok(None) => break,
                Err(e) => return (msgs, Some(e)),
            }
        }
    }
    (msgs, None)
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let limits = match inp.byte() % 4 {
        0 => Limits::default(),
        1 => Limits::new(u32::from(inp.u16())),
        2 => Limits {
            piece_count: u32::from(inp.byte()),
            max_block: u32::from(inp.u16()),
            max_extended: u32::from(inp.u16()),
        },
        _ => Limits {
            piece_count: inp.u32(),
            max_block: inp.u32(),
            max_extended: inp.u32(),
        },
    };
    let seed = inp.byte();
    let stream = inp.rest();
    let (msgs, err) = run(&[stream], &limits);
    let (msgs2, err2) = run(&chunks(stream, seed), &limits);
    assert_eq!(msgs, msgs2, "messages depend on how the stream was cut");
    assert_eq!(err.is_some(), err2.is_some(), "{err:?} vs {err2:?}");
    for m in &msgs {
        let mut out = BytesMut::new();
        encode(m, &mut out);
        let frame = u32::from_be_bytes([out[0], out[1], out[2], out[3]]);
        assert_eq!(frame as usize + 4, out.len());
        assert!(
            frame <= limits.max_frame(),
            "{} frame {frame} > max {}",
            m.name(),
            limits.max_frame()
        );
        let again = decode(&mut out, &limits);
        assert_eq!(
            again.as_ref(),
            Ok(&Some(m.clone())),
            "{} does not round-trip",
            m.name()
        );
        assert!(out.is_empty());
    }
});
