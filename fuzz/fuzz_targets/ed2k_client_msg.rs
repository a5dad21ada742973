//! weir-ed2k `client::ClientMessage::decode`: every client-to-client
//! message (hello, file requests, multipackets, hashsets, AICH, part
//! requests and data, SecIdent, ...), under each extended-requests version.
//!
//! A message that decodes is encoded (`ClientMessage::encode`), framed
//! under the opcode `opcode()` names, and must decode to the same message.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use weir_ed2k::client::{ClientMessage, DecodeCtx};
use weir_ed2k::packet::{Decoder, Limits, Packet, Protocol};
use weir_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let protocol = if sel & 1 == 0 {
        Protocol::Edonkey
    } else {
        Protocol::Emule
    };
    let ctx = DecodeCtx {
        peer_ext_requests: (sel >> 1) % 4,
    };
    let opcode = inp.byte();
    let p = Packet {
        protocol,
        opcode,
        payload: Bytes::copy_from_slice(inp.rest()),
        packed: false,
    };
    match ClientMessage::decode(&p, &ctx) {
        Ok(m) => {
            let mut out = BytesMut::new();
            m.encode(&mut out);
            let limits = Limits {
                max_packet: u32::MAX,
                max_unpacked: 0,
                packed_as: Protocol::Emule,
            };
            let q = Decoder::new(limits)
                .decode(&mut out)
                .expect("an encoded message frames")
                .expect("whole");
            assert!(out.is_empty());
            assert_eq!((q.protocol, q.opcode), m.opcode());
            let m2 = ClientMessage::decode(&q, &ctx)
                .unwrap_or_else(|e| panic!("{m:?} encodes to something that does not decode: {e}"));
            assert_eq!(format!("{m2:?}"), format!("{m:?}"));
        }
        Err(e) => assert_eq!((e.protocol, e.opcode), (protocol, opcode)),
    }
});
