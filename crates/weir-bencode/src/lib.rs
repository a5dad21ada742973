//! Strict bencode decoder and encoder for weir.
//!
//! Bencode is the serialisation of BitTorrent (BEP 3): integers `i42e`, byte
//! strings `4:spam`, lists `l...e` and dictionaries `d...e` whose keys are
//! byte strings in sorted order. weir decodes it **strictly**, because the
//! same bytes must always mean the same thing (an info-hash is a SHA-1 over
//! bytes as received) and because every input comes from a stranger:
//!
//! - integers are canonical: no leading zeros, no `-0`, no empty `ie`, and
//!   they fit an `i64`;
//! - string length prefixes are canonical (no leading zeros) and never
//!   exceed the input that is left;
//! - dictionary keys are sorted (raw byte order) and unique;
//! - nesting is limited ([`Limits::max_depth`], 64 by default) and so is the
//!   input length ([`Limits::max_input`]);
//! - data after the top-level value is an error ([`decode`]); use
//!   [`decode_prefix`] for a value followed by raw data (BEP 9 metadata
//!   pieces).
//!
//! Decoding borrows: byte strings are slices of the input, and every list and
//! dictionary keeps the exact byte span it was decoded from
//! ([`Dict::raw`], [`Value::raw`]), so a caller can hash the `info`
//! dictionary exactly as received. Decoding never panics on any input; every
//! error names what is wrong and the byte offset where it was found.
//!
//! Encoding goes through [`OwnedValue`] (keys in a `BTreeMap`, so output is
//! always canonical) or [`Value::encode`] for a decoded value.

mod decode;
mod encode;

pub use decode::{decode, decode_prefix, decode_prefix_with, decode_with};
pub use encode::{OwnedValue, encode_bytes, encode_int};

use std::fmt;

/// Bounds on what the decoder accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of lists and dictionaries (the top-level value is at
    /// depth 1).
    pub max_depth: usize,
    /// Longest input accepted, in bytes.
    pub max_input: usize,
}

impl Limits {
    /// 64 levels of nesting and 64 MiB of input: more than any real torrent
    /// (a 1 TiB payload in 256 KiB pieces has an 80 MiB `pieces` string, and
    /// its owner should choose bigger pieces).
    pub const DEFAULT: Limits = Limits {
        max_depth: 64,
        max_input: 64 << 20,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A decoded bencode value that borrows from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// An integer.
    Int(i64),
    /// A byte string (not necessarily UTF-8).
    Bytes(&'a [u8]),
    /// A list.
    List(List<'a>),
    /// A dictionary.
    Dict(Dict<'a>),
}

/// A decoded list and the bytes it was decoded from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct List<'a> {
    /// The items, in order.
    pub items: Vec<Value<'a>>,
    /// The exact bytes of this list as received, `l` through `e`.
    pub raw: &'a [u8],
}

/// A decoded dictionary and the bytes it was decoded from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dict<'a> {
    /// Key/value pairs, keys strictly ascending (the decoder checks it).
    pub entries: Vec<(&'a [u8], Value<'a>)>,
    /// The exact bytes of this dictionary as received, `d` through `e`:
    /// what an info-hash is computed over.
    pub raw: &'a [u8],
}

impl<'a> Dict<'a> {
    /// The value under `key`, if present (binary search: keys are sorted).
    pub fn get(&self, key: &[u8]) -> Option<&Value<'a>> {
        self.entries
            .binary_search_by(|(k, _)| (*k).cmp(key))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the dictionary is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<'a> Value<'a> {
    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The byte string, if this is one.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The byte string as UTF-8, if this is a byte string holding valid UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The list items, if this is a list.
    pub fn as_list(&self) -> Option<&[Value<'a>]> {
        match self {
            Value::List(l) => Some(&l.items),
            _ => None,
        }
    }

    /// The dictionary, if this is one.
    pub fn as_dict(&self) -> Option<&Dict<'a>> {
        match self {
            Value::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// The name of this value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Int(_) => "integer",
            Value::Bytes(_) => "byte string",
            Value::List(_) => "list",
            Value::Dict(_) => "dictionary",
        }
    }

    /// The exact bytes of a list or dictionary as received (`None` for
    /// integers and strings, whose canonical form is their only form).
    pub fn raw(&self) -> Option<&'a [u8]> {
        match self {
            Value::List(l) => Some(l.raw),
            Value::Dict(d) => Some(d.raw),
            _ => None,
        }
    }

    /// Appends the canonical encoding of this value to `out`. For a value
    /// produced by the strict decoder this reproduces the input exactly.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Int(i) => encode_int(*i, out),
            Value::Bytes(b) => encode_bytes(b, out),
            Value::List(l) => {
                out.push(b'l');
                for v in &l.items {
                    v.encode(out);
                }
                out.push(b'e');
            }
            Value::Dict(d) => {
                out.push(b'd');
                for (k, v) in &d.entries {
                    encode_bytes(k, out);
                    v.encode(out);
                }
                out.push(b'e');
            }
        }
    }

    /// The canonical encoding of this value.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// An owned copy (for keeping a value beyond the input's lifetime).
    pub fn to_owned_value(&self) -> OwnedValue {
        match self {
            Value::Int(i) => OwnedValue::Int(*i),
            Value::Bytes(b) => OwnedValue::Bytes(b.to_vec()),
            Value::List(l) => OwnedValue::List(l.items.iter().map(Value::to_owned_value).collect()),
            Value::Dict(d) => OwnedValue::Dict(
                d.entries
                    .iter()
                    .map(|(k, v)| (k.to_vec(), v.to_owned_value()))
                    .collect(),
            ),
        }
    }
}

/// What is wrong with an input, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bencode error at byte {offset}: {kind}")]
pub struct Error {
    /// Byte offset into the input where the problem was found.
    pub offset: usize,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// The kinds of bencode error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input ended inside a value.
    UnexpectedEof,
    /// A byte that cannot start a value (expected `i`, `l`, `d` or a digit).
    UnexpectedByte(u8),
    /// A byte that is not a digit where a digit was required.
    NotADigit(u8),
    /// `ie` or `i-e`.
    EmptyInteger,
    /// An integer with a leading zero, or `-0`.
    NonCanonicalInteger,
    /// An integer that does not fit a signed 64-bit number.
    IntegerOverflow,
    /// A string length prefix with a leading zero.
    NonCanonicalLength,
    /// A string length that runs past the end of the input.
    LengthPastEnd {
        /// The declared length.
        declared: u64,
        /// Bytes left in the input.
        available: usize,
    },
    /// A dictionary key that is not a byte string.
    KeyNotAString,
    /// A dictionary key not greater than the key before it.
    UnsortedKey,
    /// The same key twice in one dictionary.
    DuplicateKey,
    /// Nesting deeper than the limit.
    TooDeep(usize),
    /// An input longer than the limit.
    InputTooLarge {
        /// The input length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes after the top-level value.
    TrailingData(usize),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::UnexpectedEof => f.write_str("input ends inside a value"),
            ErrorKind::UnexpectedByte(b) => write!(
                f,
                "unexpected byte 0x{b:02x} (expected `i`, `l`, `d` or a string length)"
            ),
            ErrorKind::NotADigit(b) => write!(f, "expected a digit, found byte 0x{b:02x}"),
            ErrorKind::EmptyInteger => f.write_str("empty integer"),
            ErrorKind::NonCanonicalInteger => {
                f.write_str("non-canonical integer (leading zero or -0)")
            }
            ErrorKind::IntegerOverflow => f.write_str("integer does not fit 64 bits"),
            ErrorKind::NonCanonicalLength => {
                f.write_str("non-canonical string length (leading zero)")
            }
            ErrorKind::LengthPastEnd {
                declared,
                available,
            } => write!(
                f,
                "string length {declared} runs past the end of the input ({available} bytes left)"
            ),
            ErrorKind::KeyNotAString => f.write_str("dictionary key is not a byte string"),
            ErrorKind::UnsortedKey => f.write_str("dictionary keys are not in sorted order"),
            ErrorKind::DuplicateKey => f.write_str("duplicate dictionary key"),
            ErrorKind::TooDeep(max) => write!(f, "nesting deeper than {max} levels"),
            ErrorKind::InputTooLarge { len, max } => {
                write!(f, "input of {len} bytes exceeds the limit of {max}")
            }
            ErrorKind::TrailingData(n) => write!(f, "{n} bytes of trailing data after the value"),
        }
    }
}
