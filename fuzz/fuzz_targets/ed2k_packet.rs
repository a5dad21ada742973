//! weir-ed2k `packet::Decoder`: eD2k TCP framing (0xE3 / 0xC5 / 0xD4) with
//! the bounded inflate of packed packets, under client, server and small
//! fuzzer-chosen limits.
//!
//! The packets and whether the stream ends in an error must not depend on
//! how it was cut; each packet stays within the limits and re-frames
//! (`put_packet`, or `put_packed` for packed ones) to a packet that decodes
//! to the same opcode and payload.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_ed2k::packet::{Decoder, Limits, Packet, PacketError, Protocol, put_packed, put_packet};
use weir_fuzz::{Input, chunks};

fn run(pieces: &[&[u8]], limits: Limits) -> (Vec<Packet>, Option<PacketError>) {
    let mut d = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for p in pieces {
        buf.extend_from_slice(p);
        loop {
            match d.decode(&mut buf) {
                Ok(Some(p)) => out.push(p),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let limits = match sel % 3 {
        0 => Limits::CLIENT,
        1 => Limits::SERVER,
        _ => Limits {
            max_packet: u32::from(inp.u16()),
            max_unpacked: usize::from(inp.u16()),
            packed_as: if sel & 4 != 0 {
                Protocol::Edonkey
            } else {
                Protocol::Emule
            },
        },
    };
    let seed = inp.byte();
    let stream = inp.rest();
    let (packets, err) = run(&[stream], limits);
    let (packets2, err2) = run(&chunks(stream, seed), limits);
    assert_eq!(
        packets, packets2,
        "packets depend on how the stream was cut"
    );
    assert_eq!(err, err2);
    let mut consumed = 0;
    for p in &packets {
        let mut out = BytesMut::new();
        if p.packed {
            assert_eq!(p.protocol, limits.packed_as);
            assert!(p.payload.len() <= limits.max_unpacked);
            put_packed(&mut out, p.opcode, &p.payload, 6);
        } else {
            assert!(p.payload.len() < limits.max_packet as usize);
            put_packet(&mut out, p.protocol, p.opcode, &p.payload);
            consumed += out.len();
        }
        let big = Limits {
            max_packet: u32::MAX,
            max_unpacked: p.payload.len(),
            packed_as: p.protocol,
        };
        let q = Decoder::new(big)
            .decode(&mut out)
            .expect("re-framed packet decodes")
            .expect("whole");
        assert!(out.is_empty());
        assert_eq!((q.opcode, &q.payload), (p.opcode, &p.payload));
        if !p.packed {
            assert_eq!(&q, p);
        }
    }
    assert!(consumed <= stream.len());
});
