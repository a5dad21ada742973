//! The canonical encoder.

use std::collections::BTreeMap;

/// An owned bencode value. Dictionary keys live in a `BTreeMap`, so they are
/// unique and encode in sorted order: whatever is built encodes canonically.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OwnedValue {
    /// An integer.
    Int(i64),
    /// A byte string.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<OwnedValue>),
    /// A dictionary.
    Dict(BTreeMap<Vec<u8>, OwnedValue>),
}

impl OwnedValue {
    /// A byte string from anything byte-like (`&str`, `&[u8]`, `Vec<u8>`).
    pub fn bytes(b: impl AsRef<[u8]>) -> Self {
        OwnedValue::Bytes(b.as_ref().to_vec())
    }

    /// An empty dictionary, to fill with [`OwnedValue::insert`].
    pub fn dict() -> Self {
        OwnedValue::Dict(BTreeMap::new())
    }

    /// Inserts `key -> value` if this is a dictionary (does nothing
    /// otherwise) and returns `self` for chaining.
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: OwnedValue) -> &mut Self {
        if let OwnedValue::Dict(d) = self {
            d.insert(key.as_ref().to_vec(), value);
        }
        self
    }

    /// Appends the canonical encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            OwnedValue::Int(i) => encode_int(*i, out),
            OwnedValue::Bytes(b) => encode_bytes(b, out),
            OwnedValue::List(l) => {
                out.push(b'l');
                for v in l {
                    v.encode(out);
                }
                out.push(b'e');
            }
            OwnedValue::Dict(d) => {
                out.push(b'd');
                for (k, v) in d {
                    encode_bytes(k, out);
                    v.encode(out);
                }
                out.push(b'e');
            }
        }
    }

    /// The canonical encoding.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Appends `i<n>e`.
pub fn encode_int(n: i64, out: &mut Vec<u8>) {
    out.push(b'i');
    out.extend_from_slice(n.to_string().as_bytes());
    out.push(b'e');
}

/// Appends `<len>:<bytes>`.
pub fn encode_bytes(b: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_sorted() {
        let mut d = OwnedValue::dict();
        d.insert("zeta", OwnedValue::Int(-3))
            .insert("alpha", OwnedValue::bytes("x"))
            .insert(
                "list",
                OwnedValue::List(vec![OwnedValue::Int(0), OwnedValue::bytes(b"")]),
            );
        assert_eq!(d.to_vec(), b"d5:alpha1:x4:listli0e0:e4:zetai-3ee");
        assert_eq!(
            OwnedValue::Int(i64::MIN).to_vec(),
            b"i-9223372036854775808e"
        );
    }
}
