//! weir-dht `krpc::decode` (BEP 5 KRPC datagrams).
//!
//! Any datagram gives a message or a typed error. An accepted message
//! keeps every bound the codec documents (transaction id, token, version,
//! method name, error text, nodes per family, peers), is a KRPC datagram by
//! the shared-socket rule (`is_krpc`, never uTP), and `encode` writes
//! canonical bencode that decodes to the same message (`truncated` aside,
//! which is never encoded) and encodes to the same bytes again. A refused
//! query with a readable transaction id says so, for the error-203 reply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_dht::krpc::{
    Body, MAX_ERROR_MESSAGE, MAX_METHOD_LEN, MAX_NODES, MAX_PACKET, MAX_TOKEN_LEN,
    MAX_TRANSACTION_LEN, MAX_VALUES, MAX_VERSION_LEN, Query, decode,
};

fuzz_target!(|data: &[u8]| {
    let m = match decode(data) {
        Ok(m) => m,
        Err(e) => {
            if let Some(t) = &e.transaction {
                assert!(t.len() <= MAX_TRANSACTION_LEN);
            }
            if e.query {
                assert!(
                    e.transaction.is_some(),
                    "a query error without its transaction"
                );
            }
            return;
        }
    };
    assert!(data.len() <= MAX_PACKET);
    assert!(
        weir_dht::is_krpc(data),
        "accepted a datagram is_krpc refuses"
    );
    assert!(!weir_utp::is_utp(data), "a KRPC datagram looks like uTP");
    assert!(m.transaction.len() <= MAX_TRANSACTION_LEN);
    assert!(
        m.version
            .as_ref()
            .is_none_or(|v| v.len() <= MAX_VERSION_LEN)
    );
    let mut norm = m.clone();
    match &m.body {
        Body::Query(q) => {
            assert!(q.method().len() <= MAX_METHOD_LEN);
            if let Query::AnnouncePeer {
                token,
                port,
                implied_port,
                ..
            } = q
            {
                assert!(token.len() <= MAX_TOKEN_LEN);
                assert!(*port != 0 || *implied_port);
            }
            if let Query::Other { method, .. } = q {
                let known: [&[u8]; 4] = [b"ping", b"find_node", b"get_peers", b"announce_peer"];
                assert!(!known.contains(&method.as_slice()));
            }
        }
        Body::Response(r) => {
            assert!(r.nodes.len() <= MAX_NODES && r.nodes6.len() <= MAX_NODES);
            assert!(r.nodes.iter().all(|n| n.addr.is_ipv4()));
            assert!(r.nodes6.iter().all(|n| n.addr.is_ipv6()));
            assert!(r.values.len() <= MAX_VALUES);
            assert!(r.token.as_ref().is_none_or(|t| t.len() <= MAX_TOKEN_LEN));
            if let Body::Response(n) = &mut norm.body {
                n.truncated = false;
            }
        }
        Body::Error(e) => {
            assert!(
                e.message.len() <= MAX_ERROR_MESSAGE,
                "error text of {} bytes",
                e.message.len()
            );
        }
    }
    let enc = m.to_vec();
    assert!(enc.len() <= MAX_PACKET, "re-encoded to {} bytes", enc.len());
    let back = decode(&enc).unwrap_or_else(|e| panic!("own encoding refused: {e:?}"));
    assert_eq!(back, norm, "does not round-trip");
    assert_eq!(back.to_vec(), enc, "encoding not stable");
});
