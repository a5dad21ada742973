//! weir-bt `MetadataMsg::decode` (BEP 9 ut_metadata messages) with the
//! default and fuzzer-chosen `MetadataLimits`.
//!
//! Accepted messages respect the limits (piece index within the pieces the
//! size allows, `total_size` in `1..=max_size`, a data piece exactly the
//! length its index implies), `decode_slice` agrees with `decode`, and
//! `encode` gives a payload that decodes to the same message (canonical:
//! encoding it again gives the same bytes).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_bt::metadata::{MetadataLimits, MetadataMsg, piece_count, piece_len};
use weir_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let limits = match inp.byte() % 3 {
        0 => MetadataLimits::default(),
        1 => MetadataLimits {
            max_size: u64::from(inp.u32()),
        },
        _ => MetadataLimits {
            max_size: inp.u64(),
        },
    };
    let payload = Bytes::copy_from_slice(inp.rest());
    let r = MetadataMsg::decode(&payload, &limits);
    assert_eq!(MetadataMsg::decode_slice(&payload, &limits), r);
    let Ok(m) = r else { return };
    let max_pieces = u64::from(piece_count(limits.max_size));
    match &m {
        MetadataMsg::Request { piece } | MetadataMsg::Reject { piece } => {
            assert!(u64::from(*piece) < max_pieces);
        }
        MetadataMsg::Data {
            piece,
            total_size,
            data,
        } => {
            assert!(*total_size >= 1 && *total_size <= limits.max_size);
            assert!(*piece < piece_count(*total_size));
            assert_eq!(data.len(), piece_len(*total_size, *piece));
            assert!(data.len() <= 16 * 1024);
        }
        MetadataMsg::Unknown { msg_type } => assert!(!(0..=2).contains(msg_type)),
    }
    let enc = m.encode();
    let back = MetadataMsg::decode(&Bytes::from(enc.clone()), &limits);
    assert_eq!(back.as_ref(), Ok(&m), "does not round-trip");
    assert_eq!(back.unwrap().encode(), enc, "encoding not stable");
});
