//! weir-bt `AnnounceResponse::from_bytes` (HTTP tracker answers: compact
//! IPv4/IPv6 peers, dictionary peers, failure reasons).
//!
//! An answer that parses is written back as a compact answer (bencode
//! encoder) and must parse to the same response (IPv4 peers first).
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use weir_bencode::OwnedValue;
use weir_bt::tracker::{AnnounceResponse, TrackerError};

fn encode(r: &AnnounceResponse) -> Vec<u8> {
    let mut d = OwnedValue::dict();
    d.insert("interval", OwnedValue::Int(i64::from(r.interval)));
    let opt = |v: Option<u32>| v.map(|n| OwnedValue::Int(i64::from(n)));
    for (k, v) in [
        ("min interval", opt(r.min_interval)),
        ("complete", opt(r.complete)),
        ("incomplete", opt(r.incomplete)),
        ("warning message", r.warning.as_ref().map(OwnedValue::bytes)),
    ] {
        if let Some(v) = v {
            d.insert(k, v);
        }
    }
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for p in &r.peers {
        match p {
            SocketAddr::V4(a) => {
                v4.extend(a.ip().octets().into_iter().chain(a.port().to_be_bytes()))
            }
            SocketAddr::V6(a) => {
                v6.extend(a.ip().octets().into_iter().chain(a.port().to_be_bytes()))
            }
        }
    }
    d.insert("peers", OwnedValue::Bytes(v4));
    d.insert("peers6", OwnedValue::Bytes(v6));
    d.to_vec()
}

fuzz_target!(|data: &[u8]| {
    match AnnounceResponse::from_bytes(data) {
        Ok(r) => {
            let mut want = r.clone();
            want.peers.sort_by_key(|p| p.is_ipv6()); // stable: order within a family kept
            let again =
                AnnounceResponse::from_bytes(&encode(&r)).expect("re-encoded answer parses");
            assert_eq!(again, want);
        }
        Err(TrackerError::Failure(_)) => {
            let v = weir_bencode::decode(data).expect("a failure is a bencoded answer");
            assert!(v.as_dict().and_then(|d| d.get(b"failure reason")).is_some());
        }
        Err(TrackerError::Bencode(_)) => assert!(weir_bencode::decode(data).is_err()),
        Err(
            TrackerError::MissingKey(_)
            | TrackerError::WrongType { .. }
            | TrackerError::BadValue { .. },
        ) => assert!(weir_bencode::decode(data).is_ok()),
        Err(e) => panic!("UDP-only error from an HTTP answer: {e:?}"),
    }
});
