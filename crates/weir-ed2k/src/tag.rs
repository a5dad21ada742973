//! eD2k tags: typed name/value pairs in hellos, file lists, server idents.
//!
//! Two encodings exist and aMule reads both (`Tag.cpp`, `CTag::CTag`):
//!
//! - **old** (`WriteTagToFile`): `<type u8><name len u16><name><value>`;
//!   a one-byte name is a numeric id. Used in hellos and logins.
//! - **new** (`WriteNewEd2kTag`): for numeric names the type byte carries
//!   0x80 and the name is one byte; integers shrink to the smallest type
//!   that holds them and strings of 1..=16 bytes use types 0x11..=0x20
//!   (length in the type, no length field). Used in file lists to servers
//!   that announce `SRV_TCPFLG_NEWTAGS` and to new clients.
//!
//! Value layouts: hash 16 bytes; string `<len u16><bytes>`; u8/u16/u32/u64
//! little-endian; float 4 bytes; bool 1 byte; bool array
//! `<bits u16><bits/8 + 1 bytes>`; blob `<len u32><bytes>`; bsob
//! `<len u8><bytes>`. Any other type is an error: its length is unknown, so
//! nothing after it can be read.

use bytes::{BufMut, Bytes};

use crate::Md4Hash;
use crate::wire::{Reader, WireError, invalid};

/// Tag type bytes (`TagTypes.h`).
pub mod types {
    /// 16-byte hash.
    pub const HASH16: u8 = 0x01;
    /// String with a u16 length.
    pub const STRING: u8 = 0x02;
    /// u32.
    pub const UINT32: u8 = 0x03;
    /// 32-bit float.
    pub const FLOAT32: u8 = 0x04;
    /// Boolean byte.
    pub const BOOL: u8 = 0x05;
    /// Bit array.
    pub const BOOLARRAY: u8 = 0x06;
    /// Blob with a u32 length.
    pub const BLOB: u8 = 0x07;
    /// u16.
    pub const UINT16: u8 = 0x08;
    /// u8.
    pub const UINT8: u8 = 0x09;
    /// Blob with a u8 length.
    pub const BSOB: u8 = 0x0A;
    /// u64.
    pub const UINT64: u8 = 0x0B;
    /// String of 1 byte; up to `STR16` = 0x20 for 16 bytes.
    pub const STR1: u8 = 0x11;
    /// String of 16 bytes.
    pub const STR16: u8 = 0x20;
}

/// A tag's name: a numeric id (almost always) or a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TagName {
    /// One-byte numeric name (`CT_NAME`, `FT_FILESIZE`, ...).
    Id(u8),
    /// String name (old media tags, Kad).
    Str(Bytes),
}

/// A tag's value, in its wire width.
#[derive(Clone, Debug, PartialEq)]
pub enum TagValue {
    /// 16-byte hash.
    Hash(Md4Hash),
    /// Raw string bytes (UTF-8 from modern clients, else Latin-1; decode
    /// with [`crate::wire::decode_string`]).
    Str(Bytes),
    /// u8.
    U8(u8),
    /// u16.
    U16(u16),
    /// u32.
    U32(u32),
    /// u64.
    U64(u64),
    /// 32-bit float (kept as read).
    Float(f32),
    /// Boolean byte.
    Bool(u8),
    /// Bit array: number of bits and the bytes that hold them.
    BoolArray(u16, Bytes),
    /// Blob (u32 length).
    Blob(Bytes),
    /// Short blob (u8 length).
    Bsob(Bytes),
}

/// A name/value pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Tag {
    /// The name.
    pub name: TagName,
    /// The value.
    pub value: TagValue,
}

/// A tag list holds at most this many tags (a count above it is rejected
/// before anything is allocated).
pub const MAX_TAGS: u32 = 1024;

impl Tag {
    /// A tag with a numeric name.
    pub fn new(id: u8, value: TagValue) -> Self {
        Tag {
            name: TagName::Id(id),
            value,
        }
    }

    /// A u32 tag with a numeric name.
    pub fn u32(id: u8, v: u32) -> Self {
        Self::new(id, TagValue::U32(v))
    }

    /// A string tag with a numeric name.
    pub fn string(id: u8, s: impl Into<Bytes>) -> Self {
        Self::new(id, TagValue::Str(s.into()))
    }

    /// The numeric name, if it has one.
    pub fn id(&self) -> Option<u8> {
        match self.name {
            TagName::Id(i) => Some(i),
            TagName::Str(_) => None,
        }
    }

    /// The value as an integer, for any integer width.
    pub fn as_int(&self) -> Option<u64> {
        match self.value {
            TagValue::U8(v) => Some(v as u64),
            TagValue::U16(v) => Some(v as u64),
            TagValue::U32(v) => Some(v as u64),
            TagValue::U64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as raw string bytes.
    pub fn as_str(&self) -> Option<&Bytes> {
        match &self.value {
            TagValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Reads one tag (either encoding).
    pub fn decode(r: &mut Reader) -> Result<Self, WireError> {
        let raw_type = r.u8("tag type")?;
        let (ty, name) = if raw_type & 0x80 != 0 {
            (raw_type & 0x7f, TagName::Id(r.u8("tag name")?))
        } else {
            let len = r.u16("tag name length")?;
            if len == 1 {
                (raw_type, TagName::Id(r.u8("tag name")?))
            } else {
                (raw_type, TagName::Str(r.bytes(len as usize, "tag name")?))
            }
        };
        use types::*;
        let value = match ty {
            HASH16 => TagValue::Hash(r.md4("hash tag")?),
            STRING => TagValue::Str(r.string16("string tag")?),
            UINT32 => TagValue::U32(r.u32("u32 tag")?),
            UINT64 => TagValue::U64(r.u64("u64 tag")?),
            UINT16 => TagValue::U16(r.u16("u16 tag")?),
            UINT8 => TagValue::U8(r.u8("u8 tag")?),
            FLOAT32 => TagValue::Float(f32::from_le_bytes(r.u32("float tag")?.to_le_bytes())),
            BOOL => TagValue::Bool(r.u8("bool tag")?),
            BOOLARRAY => {
                let bits = r.u16("bool array length")?;
                TagValue::BoolArray(bits, r.bytes(bits as usize / 8 + 1, "bool array")?)
            }
            BLOB => {
                let n = r.u32("blob length")? as usize;
                TagValue::Blob(r.bytes(n, "blob tag")?)
            }
            BSOB => {
                let n = r.u8("bsob length")? as usize;
                TagValue::Bsob(r.bytes(n, "bsob tag")?)
            }
            STR1..=STR16 => TagValue::Str(r.bytes((ty - STR1 + 1) as usize, "string tag")?),
            other => {
                return Err(invalid(
                    "tag type",
                    format!("unknown tag type {other:#04x}"),
                ));
            }
        };
        Ok(Tag { name, value })
    }

    fn type_byte(&self) -> u8 {
        use types::*;
        match &self.value {
            TagValue::Hash(_) => HASH16,
            TagValue::Str(_) => STRING,
            TagValue::U8(_) => UINT8,
            TagValue::U16(_) => UINT16,
            TagValue::U32(_) => UINT32,
            TagValue::U64(_) => UINT64,
            TagValue::Float(_) => FLOAT32,
            TagValue::Bool(_) => BOOL,
            TagValue::BoolArray(..) => BOOLARRAY,
            TagValue::Blob(_) => BLOB,
            TagValue::Bsob(_) => BSOB,
        }
    }

    fn put_value(&self, ty: u8, out: &mut impl BufMut) {
        match &self.value {
            TagValue::Hash(h) => out.put_slice(&h.0),
            TagValue::Str(s) => {
                if ty == types::STRING {
                    crate::wire::put_string16(out, s)
                } else {
                    out.put_slice(s)
                }
            }
            TagValue::U8(v) => out.put_u8(*v),
            TagValue::U16(v) => out.put_u16_le(*v),
            TagValue::U32(v) => out.put_u32_le(*v),
            TagValue::U64(v) => out.put_u64_le(*v),
            TagValue::Float(f) => out.put_slice(&f.to_le_bytes()),
            TagValue::Bool(b) => out.put_u8(*b),
            TagValue::BoolArray(bits, b) => {
                out.put_u16_le(*bits);
                let need = *bits as usize / 8 + 1;
                out.put_slice(&b[..need.min(b.len())]);
                out.put_bytes(0, need.saturating_sub(b.len()));
            }
            TagValue::Blob(b) => {
                out.put_u32_le(b.len() as u32);
                out.put_slice(b);
            }
            TagValue::Bsob(b) => {
                let n = b.len().min(255);
                out.put_u8(n as u8);
                out.put_slice(&b[..n]);
            }
        }
    }

    /// Writes the old encoding (aMule `WriteTagToFile`): values keep their
    /// width, the name always has a length field.
    pub fn encode_old(&self, out: &mut impl BufMut) {
        let ty = self.type_byte();
        out.put_u8(ty);
        match &self.name {
            TagName::Id(i) => {
                out.put_u16_le(1);
                out.put_u8(*i);
            }
            TagName::Str(s) => crate::wire::put_string16(out, s),
        }
        self.put_value(ty, out);
    }

    /// Writes the new, compact encoding (aMule `WriteNewEd2kTag`):
    /// integers in the smallest width, short strings as `STRn`, numeric
    /// names as one byte with the 0x80 type bit.
    pub fn encode_new(&self, out: &mut impl BufMut) {
        let ty = match &self.value {
            TagValue::U8(_) | TagValue::U16(_) | TagValue::U32(_) | TagValue::U64(_) => {
                match self.as_int().unwrap_or(0) {
                    0..=0xff => types::UINT8,
                    0x100..=0xffff => types::UINT16,
                    0x1_0000..=0xffff_ffff => types::UINT32,
                    _ => types::UINT64,
                }
            }
            TagValue::Str(s) if (1..=16).contains(&s.len()) => types::STR1 + s.len() as u8 - 1,
            _ => self.type_byte(),
        };
        match &self.name {
            TagName::Id(i) => {
                out.put_u8(ty | 0x80);
                out.put_u8(*i);
            }
            TagName::Str(s) => {
                out.put_u8(ty);
                crate::wire::put_string16(out, s);
            }
        }
        let v = self.as_int().unwrap_or(0);
        match ty {
            types::UINT8 if self.as_int().is_some() => out.put_u8(v as u8),
            types::UINT16 if self.as_int().is_some() => out.put_u16_le(v as u16),
            types::UINT32 if self.as_int().is_some() => out.put_u32_le(v as u32),
            types::UINT64 if self.as_int().is_some() => out.put_u64_le(v),
            _ => self.put_value(ty, out),
        }
    }

    /// The value the new encoding gives back after a round trip: integers
    /// in their smallest width (what a peer reading our compact tags sees).
    pub fn normalized(&self) -> Tag {
        let value = match self.as_int() {
            Some(v) if v <= 0xff => TagValue::U8(v as u8),
            Some(v) if v <= 0xffff => TagValue::U16(v as u16),
            Some(v) if v <= 0xffff_ffff => TagValue::U32(v as u32),
            Some(v) => TagValue::U64(v),
            None => match &self.value {
                TagValue::Bsob(b) if b.len() > 255 => TagValue::Bsob(b.slice(..255)),
                TagValue::Str(s) if s.len() > 0xffff => TagValue::Str(s.slice(..0xffff)),
                other => other.clone(),
            },
        };
        let name = match &self.name {
            TagName::Str(s) if s.len() == 1 => TagName::Id(s[0]),
            other => other.clone(),
        };
        Tag { name, value }
    }
}

/// Reads a tag list with a u32 count.
pub fn decode_list(r: &mut Reader) -> Result<Vec<Tag>, WireError> {
    let n = r.u32("tag count")?;
    if n > MAX_TAGS {
        return Err(invalid("tag count", format!("{n} tags (limit {MAX_TAGS})")));
    }
    let mut tags = Vec::with_capacity((n as usize).min(r.remaining() / 3));
    for _ in 0..n {
        tags.push(Tag::decode(r)?);
    }
    Ok(tags)
}

/// Writes a tag list with a u32 count, in the old or new encoding.
pub fn encode_list(tags: &[Tag], new: bool, out: &mut impl BufMut) {
    out.put_u32_le(tags.len() as u32);
    for t in tags {
        if new {
            t.encode_new(out)
        } else {
            t.encode_old(out)
        }
    }
}

/// The first tag with numeric name `id`.
pub fn find(tags: &[Tag], id: u8) -> Option<&Tag> {
    tags.iter().find(|t| t.id() == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dec(b: &[u8]) -> Result<Tag, WireError> {
        let mut r = Reader::new(Bytes::copy_from_slice(b));
        let t = Tag::decode(&mut r)?;
        r.finish()?;
        Ok(t)
    }

    #[test]
    fn known_encodings() {
        // Old: CT_NAME "ab" as aMule's hello writes it.
        let t = Tag::string(0x01, &b"ab"[..]);
        let mut v = Vec::new();
        t.encode_old(&mut v);
        assert_eq!(v, [0x02, 1, 0, 0x01, 2, 0, b'a', b'b']);
        assert_eq!(dec(&v).unwrap(), t);
        // New: the same as STR2 with the 0x80 bit.
        let mut v = Vec::new();
        t.encode_new(&mut v);
        assert_eq!(v, [0x12 | 0x80, 0x01, b'a', b'b']);
        assert_eq!(dec(&v).unwrap(), t);
        // New: a u32 holding 300 shrinks to u16.
        let mut v = Vec::new();
        Tag::u32(0x02, 300).encode_new(&mut v);
        assert_eq!(v, [0x88, 0x02, 0x2c, 0x01]);
        assert_eq!(dec(&v).unwrap(), Tag::new(0x02, TagValue::U16(300)));
        // String name.
        let mut v = Vec::new();
        Tag {
            name: TagName::Str(Bytes::from_static(b"Artist")),
            value: TagValue::U32(7),
        }
        .encode_old(&mut v);
        assert_eq!(&v[..3], &[0x03, 6, 0]);
    }

    #[test]
    fn bad_tags_are_errors() {
        let truncated = |b: &[u8], want: &str| {
            assert!(
                matches!(dec(b), Err(WireError::Truncated { field, .. }) if field == want),
                "{b:?}: {:?}",
                dec(b)
            )
        };
        let invalid = |r: Result<(), WireError>, want: &str| {
            assert!(
                matches!(&r, Err(WireError::Invalid { field, .. }) if *field == want),
                "{r:?}"
            )
        };
        truncated(&[], "tag type");
        truncated(&[0x83], "tag name"); // no name
        truncated(&[0x83, 0x01, 1, 2], "u32 tag");
        invalid(dec(&[0x0c | 0x80, 0x01]).map(drop), "tag type"); // unknown type 0x0c
        invalid(dec(&[0x21 | 0x80, 0x01, 0]).map(drop), "tag type"); // STR17 is not accepted (aMule)
        truncated(&[0x87, 0x01, 0xff, 0xff], "blob length"); // no room for the length
        truncated(&[0x87, 0x01, 0xff, 0xff, 0xff, 0xff], "blob tag"); // blob longer than payload
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]));
        invalid(decode_list(&mut r).map(drop), "tag count"); // count over the limit, nothing allocated
        let mut r = Reader::new(Bytes::from_static(&[2, 0, 0, 0, 0x89, 1, 5]));
        assert!(matches!(
            decode_list(&mut r),
            Err(WireError::Truncated {
                field: "tag type",
                ..
            })
        )); // 2 announced, 1 present
    }

    fn value_strategy() -> impl Strategy<Value = TagValue> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from);
        prop_oneof![
            any::<[u8; 16]>().prop_map(|h| TagValue::Hash(Md4Hash(h))),
            bytes().prop_map(TagValue::Str),
            any::<u8>().prop_map(TagValue::U8),
            any::<u16>().prop_map(TagValue::U16),
            any::<u32>().prop_map(TagValue::U32),
            any::<u64>().prop_map(TagValue::U64),
            (-1e30f32..1e30).prop_map(TagValue::Float),
            any::<u8>().prop_map(TagValue::Bool),
            (0u16..100).prop_flat_map(|bits| {
                proptest::collection::vec(any::<u8>(), bits as usize / 8 + 1)
                    .prop_map(move |b| TagValue::BoolArray(bits, Bytes::from(b)))
            }),
            bytes().prop_map(TagValue::Blob),
            bytes().prop_map(TagValue::Bsob),
        ]
    }

    fn tag_strategy() -> impl Strategy<Value = Tag> {
        let name = prop_oneof![
            any::<u8>().prop_map(TagName::Id),
            proptest::collection::vec(any::<u8>(), 2..10)
                .prop_map(|v| TagName::Str(Bytes::from(v))),
        ];
        (name, value_strategy()).prop_map(|(name, value)| Tag { name, value })
    }

    proptest! {
        #[test]
        fn old_round_trip(tags in proptest::collection::vec(tag_strategy(), 0..8)) {
            let mut v = Vec::new();
            encode_list(&tags, false, &mut v);
            let mut r = Reader::new(Bytes::from(v));
            prop_assert_eq!(decode_list(&mut r).unwrap(), tags);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn new_round_trip(tags in proptest::collection::vec(tag_strategy(), 0..8)) {
            let mut v = Vec::new();
            encode_list(&tags, true, &mut v);
            let mut r = Reader::new(Bytes::from(v));
            let want: Vec<Tag> = tags.iter().map(Tag::normalized).collect();
            prop_assert_eq!(decode_list(&mut r).unwrap(), want);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(Bytes::from(b.clone()));
            match decode_list(&mut r) {
                // What decodes re-encodes (old form, widths kept) to the
                // same tags (compared as text: a float may be NaN).
                Ok(tags) => {
                    let mut v = Vec::new();
                    encode_list(&tags, false, &mut v);
                    let again = decode_list(&mut Reader::new(Bytes::from(v))).unwrap();
                    prop_assert_eq!(format!("{again:?}"), format!("{tags:?}"));
                }
                Err(e) => prop_assert!(matches!(e, WireError::Truncated { .. } | WireError::Invalid { .. }), "{:?}", e),
            }
            let mut r = Reader::new(Bytes::from(b));
            if let Err(e) = Tag::decode(&mut r) {
                prop_assert!(matches!(e, WireError::Truncated { .. } | WireError::Invalid { .. }), "{:?}", e);
            }
        }

        #[test]
        fn truncation_is_an_error(t in tag_strategy(), new in any::<bool>()) {
            let mut v = Vec::new();
            if new { t.encode_new(&mut v) } else { t.encode_old(&mut v) }
            for cut in 0..v.len() {
                let mut r = Reader::new(Bytes::copy_from_slice(&v[..cut]));
                let e = Tag::decode(&mut r);
                prop_assert!(matches!(e, Err(WireError::Truncated { .. })), "cut at {}: {:?}", cut, e);
            }
        }
    }
}
