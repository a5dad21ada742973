//! weir-zmodem `escape`: the sender's `Escaper::escape_into` (64-byte SSE2
//! block path and scalar path) and the receiver's block unescaper
//! `UnescapeTable::unescape_blocks`, against byte-at-a-time references.
//!
//! Escaped output must be the same however the data is split across calls,
//! must hold no raw byte the receiver would not take as data (ZDLE only as
//! an escape, no raw XON/XOFF/DLE, no raw CR after `@`, no raw control
//! byte under ESCCTL), and must unescape to the data. The block unescaper
//! must produce exactly what the reference does for what it consumes.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::{Input, chunks};
use weir_zmodem::consts::ZDLE;
use weir_zmodem::escape::{Escaper, RxClass, UnescapeTable};

/// Reference unescape of a whole escaped stream (no frame ends in it).
fn unescape(t: &UnescapeTable, wire: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < wire.len() {
        let b = wire[i];
        match t.class(b) {
            RxClass::Data => out.push(b),
            RxClass::Skip => {}
            RxClass::Zdle => {
                i += 1;
                let e = wire[i];
                out.push(match e {
                    b'l' => 0x7f,
                    b'm' => 0xff,
                    _ => {
                        assert_eq!(e & 0x60, 0x40, "ZDLE {e:#x} is not an escape");
                        e ^ 0x40
                    }
                });
            }
        }
        i += 1;
    }
    out
}

/// Reference: what a byte-at-a-time reader makes of `input` up to `used`,
/// for the simple escapes the block path handles.
fn simple(t: &UnescapeTable, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        match t.class(b) {
            RxClass::Data => out.push(b),
            RxClass::Skip => {}
            RxClass::Zdle => {
                let e = *input
                    .get(i + 1)
                    .expect("block path consumed half an escape");
                assert_eq!(e & 0x60, 0x40, "block path consumed ZDLE {e:#x}");
                out.push(e ^ 0x40);
                i += 1;
            }
        }
        i += 1;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let ctl = sel & 1 != 0;
    let seed = inp.byte();
    let room = usize::from(inp.u16());
    let payload = inp.rest();

    // Sender: whole vs in pieces.
    let mut whole = Vec::new();
    Escaper::new(ctl).escape_into(payload, &mut whole);
    let mut cut = Vec::new();
    let mut e = Escaper::new(ctl);
    for c in chunks(payload, seed) {
        e.escape_into(c, &mut cut);
    }
    assert_eq!(whole, cut, "escaping depends on how the data was split");
    let t = UnescapeTable::new(ctl);
    let mut prev = 0u8;
    let mut i = 0;
    while i < whole.len() {
        let b = whole[i];
        if b == ZDLE {
            i += 1;
            prev = whole[i];
        } else {
            assert_eq!(t.class(b), RxClass::Data, "raw {b:#x} on the wire");
            assert!(
                !matches!(b & 0x7f, 0x10 | 0x11 | 0x13),
                "raw {b:#x} on the wire"
            );
            assert!(
                !(b & 0x7f == b'\r' && prev & 0x7f == b'@'),
                "raw CR after @"
            );
            assert!(!(ctl && b & 0x60 == 0), "raw control {b:#x} under ESCCTL");
            prev = b;
        }
        i += 1;
    }
    assert_eq!(unescape(&t, &whole), payload);

    // Receiver's block path on the escaped data and on raw fuzz bytes.
    for input in [&whole[..], payload] {
        let mut out = BytesMut::from(&b"head"[..]);
        let (used, made) = t.unescape_blocks(input, &mut out, room);
        assert!(used <= input.len() && made <= room && made <= used);
        assert_eq!(out.len(), 4 + made);
        assert_eq!(&out[..4], b"head");
        assert_eq!(&out[4..], &simple(&t, &input[..used])[..]);
    }
});
