//! Property tests: the decoder never panics, what it accepts is canonical,
//! errors point inside the input, and encoding and decoding are inverse on
//! canonical data.

use proptest::prelude::*;
use weir_bencode::{ErrorKind, OwnedValue, decode, decode_prefix};

fn owned() -> impl Strategy<Value = OwnedValue> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(OwnedValue::Int),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(OwnedValue::Bytes),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(OwnedValue::List),
            proptest::collection::btree_map(
                proptest::collection::vec(any::<u8>(), 0..8),
                inner,
                0..6
            )
            .prop_map(OwnedValue::Dict),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let whole = decode(&data);
        match &whole {
            Ok(v) => prop_assert_eq!(v.to_vec(), data.clone()),
            Err(e) => prop_assert!(e.offset <= data.len(), "offset {} past the input", e.offset),
        }
        // `decode` is `decode_prefix` plus "nothing after it".
        match decode_prefix(&data) {
            Ok((v, n)) if n == data.len() => prop_assert_eq!(whole, Ok(v)),
            Ok((_, n)) => prop_assert_eq!(
                whole.map_err(|e| e.kind),
                Err(ErrorKind::TrailingData(data.len() - n))
            ),
            Err(e) => prop_assert_eq!(whole, Err(e)),
        }
    }

    #[test]
    fn bencode_shaped_bytes_never_panic(
        data in proptest::collection::vec(
            prop_oneof![Just(b'i'), Just(b'l'), Just(b'd'), Just(b'e'), Just(b':'),
                        Just(b'-'), Just(b'0'), Just(b'1'), Just(b'9'), any::<u8>()],
            0..128)
    ) {
        if let Ok(v) = decode(&data) {
            // Whatever the strict decoder accepts is canonical.
            prop_assert_eq!(v.to_vec(), data);
        }
    }

    #[test]
    fn decode_of_encode_is_identity(v in owned()) {
        let bytes = v.to_vec();
        let back = decode(&bytes).unwrap();
        prop_assert_eq!(back.to_owned_value(), v);
        // encode(decode(x)) == x for canonical x, and the top span is all of x.
        prop_assert_eq!(back.to_vec(), bytes.clone());
        if let Some(raw) = back.raw() {
            prop_assert_eq!(raw, &bytes[..]);
        }
    }

    #[test]
    fn truncations_are_errors_not_panics(v in owned(), cut in any::<prop::sample::Index>()) {
        let bytes = v.to_vec();
        let n = cut.index(bytes.len());
        let kind = decode(&bytes[..n]).map(|_| ()).map_err(|e| e.kind);
        prop_assert!(
            matches!(kind, Err(ErrorKind::UnexpectedEof | ErrorKind::LengthPastEnd { .. })),
            "cut at {} of {:?}: {:?}", n, bytes, kind
        );
    }
}
