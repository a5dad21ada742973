//! weir-bt `ExtHandshake::decode` (BEP 10 handshake dictionary). What
//! decodes re-encodes (`ExtHandshake::encode`) to a dictionary that decodes
//! to the same value; errors are always `WireError::ExtHandshake`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_bt::wire::{ExtHandshake, WireError};

fuzz_target!(|data: &[u8]| {
    match ExtHandshake::decode(data) {
        Ok(h) => {
            let bytes = h.encode();
            assert_eq!(ExtHandshake::decode(&bytes).as_ref(), Ok(&h));
        }
        Err(WireError::ExtHandshake(why)) => assert!(!why.is_empty()),
        Err(e) => panic!("unexpected error {e:?}"),
    }
});
