//! weir-zmodem encode -> decode round trip: headers (`frame::encode_header`
//! in hex, CRC-16 and CRC-32 binary) and data subpackets
//! (`frame::encode_subpacket`, every frame end) built from the fuzzer's
//! bytes, escaped by one `escape::Escaper` (normal or ESCCTL), with line
//! noise (raw XON/XOFF, garbage between frames) added, then decoded in
//! pieces: the decoder must give back exactly the frames and the data.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::{Input, chunks};
use weir_zmodem::consts::frame;
use weir_zmodem::decode::{Decoder, Item};
use weir_zmodem::escape::Escaper;
use weir_zmodem::frame::{FrameEnd, Header, HeaderFormat, encode_header, encode_subpacket};

const NOISE: [u8; 4] = [0x11, 0x13, 0x91, 0x93];

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let ctl = sel & 1 != 0;
    let noisy = sel & 2 != 0;
    let seed = inp.byte();
    let max = 1024;
    let mut esc = Escaper::new(ctl);
    let mut wire = Vec::new();
    let mut want_items = Vec::new();
    let mut want_data = Vec::new();
    let mut frames = 0;
    while !inp.is_empty() && frames < 16 {
        frames += 1;
        let fmt = [HeaderFormat::Hex, HeaderFormat::Bin16, HeaderFormat::Bin32]
            [usize::from(inp.byte()) % 3];
        let t = inp.byte() % 24;
        let d = inp.u32().to_le_bytes();
        let h = Header {
            frame_type: t,
            data: d,
        };
        if noisy && inp.byte() & 1 == 1 {
            // Garbage before a header: neither ZPAD nor CAN.
            let g = inp.byte();
            if g & 0x7f != b'*' && g != 0x18 {
                wire.push(g);
            }
        }
        encode_header(&h, fmt, &mut esc, &mut wire);
        want_items.push(Item::Header(h, fmt));
        if !frame::has_data(t) {
            continue;
        }
        let subs = 1 + inp.byte() % 4;
        for k in 0..subs {
            let len = usize::from(inp.u16()) % (max + 1);
            let body = inp.take(len);
            let e = inp.byte();
            let end = if k + 1 < subs {
                [FrameEnd::Crcg, FrameEnd::Crcq][usize::from(e & 1)]
            } else {
                [FrameEnd::Crce, FrameEnd::Crcw][usize::from(e & 1)]
            };
            let at = wire.len();
            encode_subpacket(body, end, fmt.data_crc(), &mut esc, &mut wire);
            if noisy && e & 2 != 0 && wire.len() > at {
                // Flow control noise inside the escaped subpacket.
                let pos = at + usize::from(e >> 2) % (wire.len() - at);
                wire.insert(pos, NOISE[usize::from(e >> 6)]);
            }
            want_items.push(Item::Subpacket {
                end,
                len: body.len(),
            });
            want_data.extend_from_slice(body);
        }
    }

    let mut dec = Decoder::new(ctl, max);
    let mut out = BytesMut::new();
    let mut items = Vec::new();
    for c in chunks(&wire, seed) {
        let mut rest = c;
        while !rest.is_empty() {
            let (used, item) = dec.decode(rest, &mut out);
            rest = &rest[used..];
            items.extend(item);
        }
    }
    assert_eq!(items, want_items);
    assert_eq!(&out[..], &want_data[..]);
});
