//! weir-ed2k `tag`: `Tag::decode` and `decode_list` (old and compact
//! encodings). A decoded list written back in the old encoding decodes to
//! the same tags; in the new (compact) encoding to the same tags
//! normalised (`Tag::normalized`). Errors are `Truncated` or `Invalid`,
//! never a panic or a huge allocation.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use weir_ed2k::tag::{MAX_TAGS, Tag, decode_list, encode_list};
use weir_ed2k::wire::{Reader, WireError};

fn dbg(tags: &[Tag]) -> String {
    format!("{tags:?}")
}

fn reread(tags: &[Tag], new: bool) -> Vec<Tag> {
    let mut out = BytesMut::new();
    encode_list(tags, new, &mut out);
    let mut r = Reader::new(out.freeze());
    let again = decode_list(&mut r).expect("re-encoded tags decode");
    assert!(r.is_empty());
    again
}

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let mut r = Reader::new(bytes.clone());
    match decode_list(&mut r) {
        Ok(tags) => {
            assert!(tags.len() as u32 <= MAX_TAGS);
            assert_eq!(dbg(&reread(&tags, false)), dbg(&tags));
            let norm: Vec<Tag> = tags.iter().map(Tag::normalized).collect();
            assert_eq!(dbg(&reread(&tags, true)), dbg(&norm));
            assert_eq!(dbg(&reread(&norm, true)), dbg(&norm));
        }
        Err(WireError::Truncated { need, have, .. }) => assert!(need > have),
        Err(WireError::Invalid { .. }) => {}
        Err(e) => panic!("unexpected error {e:?}"),
    }
    // One tag at a time, as a hello's reader sees them.
    let mut r = Reader::new(bytes);
    while !r.is_empty() {
        let left = r.remaining();
        match Tag::decode(&mut r) {
            Ok(t) => {
                assert!(r.remaining() < left);
                let mut old = BytesMut::new();
                t.encode_old(&mut old);
                let mut rr = Reader::new(old.freeze());
                let t2 = Tag::decode(&mut rr).expect("re-encoded tag decodes");
                assert!(rr.is_empty());
                assert_eq!(format!("{t2:?}"), format!("{t:?}"));
            }
            Err(_) => break,
        }
    }
});
