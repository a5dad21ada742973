//! weir-zmodem `decode::Decoder` on arbitrary line bytes: headers (hex,
//! binary CRC-16/32), data subpackets, escapes, noise and cancels, normal
//! and ESCCTL mode, any subpacket limit.
//!
//! The items and the data left in the buffer must not depend on how the
//! input was cut; the buffer holds exactly the data of the good
//! subpackets, none longer than the limit; every call makes progress or
//! reports an error.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::{Input, chunks};
use weir_zmodem::decode::{Decoder, Item};

fn run(pieces: &[&[u8]], ctl: bool, max: usize) -> (Vec<Item>, BytesMut) {
    let mut dec = Decoder::new(ctl, max);
    let mut out = BytesMut::new();
    let mut items = Vec::new();
    let mut good = 0;
    for p in pieces {
        let mut rest = *p;
        while !rest.is_empty() {
            let (used, item) = dec.decode(rest, &mut out);
            assert!(used <= rest.len());
            match item {
                None => assert_eq!(used, rest.len(), "stopped without an item"),
                Some(it) => {
                    // Only an error may come from no input: a plain byte
                    // that overflows a subpacket is left to be read again
                    // as the start of the next header.
                    assert!(
                        used > 0 || matches!(it, Item::Error(_)),
                        "{it:?} from no input"
                    );
                    if let Item::Subpacket { len, .. } = it {
                        assert!(len <= max);
                        good += len;
                    }
                    items.push(it);
                }
            }
            rest = &rest[used..];
            let partial = out.len() - good;
            assert!(
                partial == 0 || dec.in_data(),
                "data left outside a subpacket"
            );
            assert!(partial <= max);
        }
    }
    dec.abandon(&mut out);
    assert_eq!(out.len(), good);
    (items, out)
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let ctl = sel & 1 != 0;
    let max = [1, 2, 64, 127, 1024, 8192][usize::from(sel >> 1) % 6];
    let seed = inp.byte();
    let line = inp.rest();
    let whole = run(&[line], ctl, max);
    let cut = run(&chunks(line, seed), ctl, max);
    assert_eq!(
        whole, cut,
        "the decoder's answer depends on how its input was cut"
    );
});
