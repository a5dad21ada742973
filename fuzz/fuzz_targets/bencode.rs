//! weir-bencode: `decode`, `decode_prefix`, `decode_with`.
//!
//! The decoder is strict (canonical integers and lengths, sorted unique
//! keys), so whatever it accepts must re-encode to exactly the input, every
//! list/dictionary's raw span must be its own encoding, and small limits
//! must hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_bencode::{ErrorKind, Limits, Value, decode, decode_prefix, decode_with};

fn check_spans(v: &Value<'_>) -> usize {
    match v {
        Value::Int(_) | Value::Bytes(_) => 0,
        Value::List(l) => {
            assert_eq!(l.raw, &v.to_vec()[..]);
            1 + l.items.iter().map(check_spans).max().unwrap_or(0)
        }
        Value::Dict(d) => {
            assert_eq!(d.raw, &v.to_vec()[..]);
            assert!(
                d.entries.windows(2).all(|w| w[0].0 < w[1].0),
                "keys not strictly sorted"
            );
            for (k, x) in &d.entries {
                assert_eq!(d.get(k), Some(x));
            }
            1 + d
                .entries
                .iter()
                .map(|(_, v)| check_spans(v))
                .max()
                .unwrap_or(0)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = decode(data);
    match &whole {
        Ok(v) => {
            assert_eq!(
                v.to_vec(),
                data,
                "accepted input does not re-encode to itself"
            );
            assert_eq!(v.to_owned_value().to_vec(), data);
            assert!(check_spans(v) <= Limits::DEFAULT.max_depth);
        }
        Err(e) => assert!(
            e.offset <= data.len(),
            "error offset {} past the input",
            e.offset
        ),
    }
    match decode_prefix(data) {
        Ok((v, n)) => {
            assert!(n > 0 && n <= data.len());
            assert_eq!(v.to_vec(), &data[..n]);
            assert_eq!(decode(&data[..n]).as_ref(), Ok(&v));
            assert_eq!(whole.is_ok(), n == data.len());
            if n < data.len() {
                let e = whole.as_ref().unwrap_err();
                assert_eq!(e.kind, ErrorKind::TrailingData(data.len() - n));
            }
        }
        Err(e) => assert_eq!(whole.as_ref().unwrap_err(), &e),
    }
    // Tight limits taken from the first byte.
    if let Some((&b, rest)) = data.split_first() {
        let limits = Limits {
            max_depth: usize::from(b % 8),
            max_input: rest.len().saturating_sub(usize::from(b >> 7)),
        };
        match decode_with(rest, &limits) {
            Ok(v) => {
                assert!(rest.len() <= limits.max_input);
                assert!(check_spans(&v) <= limits.max_depth);
                assert_eq!(decode(rest).as_ref(), Ok(&v));
            }
            Err(e) => match e.kind {
                ErrorKind::TooDeep(n) => assert_eq!(n, limits.max_depth),
                ErrorKind::InputTooLarge { len, max } => {
                    assert_eq!((len, max), (rest.len(), limits.max_input))
                }
                // Any other error is the input's own: the default limits see it too.
                _ => assert!(decode(rest).is_err()),
            },
        }
    }
});
