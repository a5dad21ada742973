//! A small JSON writer for the hot path: values are appended to a byte
//! buffer directly, with no intermediate tree and no per-value allocation.

/// Appends `s` as a JSON string (quoted, escaped).
pub(crate) fn str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&b[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(c >> 4) as usize]);
                out.push(HEX[(c & 15) as usize]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&b[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&b[start..]);
    out.push(b'"');
}

/// Appends an unsigned integer.
pub(crate) fn u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Appends a signed integer.
pub(crate) fn i64(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Appends a number; integral values print without a fraction (as
/// Transmission prints `2` for a ratio of 2), non-finite ones as 0.
pub(crate) fn f64(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        out.push(b'0');
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        i64(out, v as i64);
    } else {
        let mut buf = ryu::Buffer::new();
        out.extend_from_slice(buf.format_finite(v).as_bytes());
    }
}

/// Appends `true` or `false`.
pub(crate) fn bool(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

/// Appends `"key":` (the key is escaped).
pub(crate) fn key(out: &mut Vec<u8>, k: &str) {
    str(out, k);
    out.push(b':');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    fn s(v: &str) -> String {
        let mut out = Vec::new();
        super::str(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes() {
        assert_eq!(s("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"");
        let mut out = Vec::new();
        super::f64(&mut out, 2.0);
        out.push(b' ');
        super::f64(&mut out, 0.25);
        out.push(b' ');
        super::f64(&mut out, f64::NAN);
        out.push(b' ');
        super::i64(&mut out, -2);
        assert_eq!(String::from_utf8(out).unwrap(), "2 0.25 0 -2");
    }

    proptest! {
        #[test]
        fn strings_round_trip(v in any::<String>()) {
            let back: String = serde_json::from_str(&s(&v)).unwrap();
            prop_assert_eq!(back, v);
        }

        #[test]
        fn floats_round_trip(v in -1e12f64..1e12) {
            let mut out = Vec::new();
            super::f64(&mut out, v);
            let back: f64 = serde_json::from_slice(&out).unwrap();
            prop_assert!((back - v).abs() <= v.abs() * 1e-15);
        }
    }
}
