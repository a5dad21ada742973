//! weir-ed2k `server`: `ClientToServer::decode` (what `weir ed2k-server`
//! reads: login, offered files, source and callback requests) and
//! `ServerToClient::decode` (what the client reads: id change, server list
//! and ident, found sources, callbacks, messages).
//!
//! What decodes encodes to a packet that decodes to the same message (an
//! offered-file list in compact tags comes back with its integer tags in
//! their smallest width, `Tag::normalized`).
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use weir_ed2k::packet::{Decoder, Limits, Packet, Protocol};
use weir_ed2k::server::{ClientToServer, ServerToClient};
use weir_ed2k::tag::Tag;
use weir_fuzz::Input;

fn reframe(out: &mut BytesMut) -> Packet {
    let limits = Limits {
        max_packet: u32::MAX,
        max_unpacked: 0,
        packed_as: Protocol::Edonkey,
    };
    let q = Decoder::new(limits)
        .decode(out)
        .expect("an encoded message frames")
        .expect("whole");
    assert!(out.is_empty());
    assert_eq!(q.protocol, Protocol::Edonkey);
    q
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    // Mostly eDonkey packets, as servers send them; eMule ones must be refused.
    let protocol = if sel & 6 == 6 {
        Protocol::Emule
    } else {
        Protocol::Edonkey
    };
    let opcode = inp.byte();
    let p = Packet {
        protocol,
        opcode,
        payload: Bytes::copy_from_slice(inp.rest()),
        packed: sel & 8 != 0,
    };
    if sel & 1 == 0 {
        match ClientToServer::decode(&p) {
            Ok(m) => {
                assert_eq!(protocol, Protocol::Edonkey);
                let mut out = BytesMut::new();
                m.encode(&mut out);
                let q = reframe(&mut out);
                assert_eq!(q.opcode, opcode);
                let m2 = ClientToServer::decode(&q).expect("an encoded message decodes");
                let want = match &m {
                    ClientToServer::OfferFiles {
                        files,
                        new_tags: true,
                    } => {
                        let mut files = files.clone();
                        for f in &mut files {
                            f.tags = f.tags.iter().map(Tag::normalized).collect();
                        }
                        ClientToServer::OfferFiles {
                            files,
                            new_tags: true,
                        }
                    }
                    m => m.clone(),
                };
                assert_eq!(format!("{m2:?}"), format!("{want:?}"));
            }
            Err(e) => assert_eq!(e.opcode, opcode),
        }
    } else {
        match ServerToClient::decode(&p) {
            Ok(m) => {
                assert_eq!(protocol, Protocol::Edonkey);
                let mut out = BytesMut::new();
                m.encode(&mut out);
                let q = reframe(&mut out);
                assert_eq!(q.opcode, opcode);
                let m2 = ServerToClient::decode(&q).expect("an encoded message decodes");
                assert_eq!(format!("{m2:?}"), format!("{m:?}"));
            }
            Err(e) => assert_eq!(e.opcode, opcode),
        }
    }
});
