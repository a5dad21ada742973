//! weir-bt `Handshake::decode`: the 68-byte handshake, refused as soon as
//! the protocol string differs. A decoded handshake re-encodes to the
//! input's first 68 bytes; `None` only for a correct but short prefix.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_bt::wire::{Handshake, PROTOCOL, WireError};

fuzz_target!(|data: &[u8]| {
    let mut want = vec![PROTOCOL.len() as u8];
    want.extend_from_slice(PROTOCOL);
    let n = data.len().min(20);
    match Handshake::decode(data) {
        Ok(Some(h)) => {
            assert!(data.len() >= Handshake::LEN);
            let mut out = BytesMut::new();
            h.encode(&mut out);
            assert_eq!(&out[..], &data[..Handshake::LEN]);
        }
        Ok(None) => {
            assert!(data.len() < Handshake::LEN);
            assert_eq!(&data[..n], &want[..n]);
        }
        Err(WireError::BadProtocol(got)) => {
            assert_eq!(got, &data[..n]);
            assert_ne!(&data[..n], &want[..n]);
        }
        Err(e) => panic!("unexpected error {e:?}"),
    }
});
