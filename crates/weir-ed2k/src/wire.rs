//! Little-endian field reading and writing, the way every eD2k payload is
//! laid out. Reading past the end is an error naming the field, never a
//! panic.

use bytes::{BufMut, Bytes};

use crate::{AichHash, Md4Hash};

/// A payload ended before a field, or a field holds a value that cannot be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The payload ended inside `field`.
    #[error("truncated: payload ends inside {field} (need {need} bytes, {have} left)")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        need: usize,
        /// Bytes that were left.
        have: usize,
    },
    /// A field holds an impossible value.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Bytes left over after a fixed-layout message.
    #[error("{0} unexpected trailing bytes")]
    Trailing(usize),
}

/// Builds a [`WireError::Invalid`].
pub fn invalid(field: &'static str, reason: impl Into<String>) -> WireError {
    WireError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A cursor over a payload held as [`Bytes`], so that large fields (part
/// data) come out as zero-copy slices.
#[derive(Clone, Debug)]
pub struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    /// A reader at the start of `buf`.
    pub fn new(buf: Bytes) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Fails if anything is left (fixed-layout messages).
    pub fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }

    fn need(&self, n: usize, field: &'static str) -> Result<(), WireError> {
        if self.remaining() < n {
            Err(WireError::Truncated {
                field,
                need: n,
                have: self.remaining(),
            })
        } else {
            Ok(())
        }
    }

    /// The next `n` bytes as a zero-copy slice.
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<Bytes, WireError> {
        self.need(n, field)?;
        let b = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }

    /// Everything not read yet, as a zero-copy slice.
    pub fn rest(&mut self) -> Bytes {
        let b = self.buf.slice(self.pos..);
        self.pos = self.buf.len();
        b
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        self.need(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }

    /// A byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    /// A little-endian u32.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    /// A little-endian u64.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A 16-byte MD4 hash.
    pub fn md4(&mut self, field: &'static str) -> Result<Md4Hash, WireError> {
        Ok(Md4Hash(self.array(field)?))
    }

    /// A 20-byte AICH hash.
    pub fn aich(&mut self, field: &'static str) -> Result<AichHash, WireError> {
        Ok(AichHash(self.array(field)?))
    }

    /// A string with a u16 length prefix, as raw bytes.
    pub fn string16(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        let n = self.u16(field)? as usize;
        self.bytes(n, field)
    }

    /// A string with a u32 length prefix, as raw bytes.
    pub fn string32(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        let n = self.u32(field)? as usize;
        self.bytes(n, field)
    }
}

/// Writes a string with a u16 length prefix; longer strings are cut at
/// 65,535 bytes (as aMule does).
pub fn put_string16(out: &mut impl BufMut, s: &[u8]) {
    let n = s.len().min(u16::MAX as usize);
    out.put_u16_le(n as u16);
    out.put_slice(&s[..n]);
}

/// Decodes a wire string: UTF-8 (an optional BOM is skipped), falling back
/// to Latin-1 as aMule does for strings from old clients.
pub fn decode_string(raw: &[u8]) -> String {
    let raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
    match std::str::from_utf8(raw) {
        Ok(s) => s.to_string(),
        Err(_) => raw.iter().map(|&b| b as char).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_truncation() {
        let mut r = Reader::new(Bytes::from_static(&[1, 2, 0, 3, 0, 0, 0, 9]));
        assert_eq!(r.u8("a").unwrap(), 1);
        assert_eq!(r.u16("b").unwrap(), 2);
        assert_eq!(r.u32("c").unwrap(), 3);
        assert_eq!(r.finish(), Err(WireError::Trailing(1)));
        assert_eq!(
            r.u16("d"),
            Err(WireError::Truncated {
                field: "d",
                need: 2,
                have: 1
            })
        );
        assert_eq!(r.rest().as_ref(), &[9]);
        assert!(r.finish().is_ok());
    }

    #[test]
    fn strings() {
        assert_eq!(decode_string("ünï".as_bytes()), "ünï");
        assert_eq!(decode_string(b"\xEF\xBB\xBFabc"), "abc");
        assert_eq!(decode_string(b"\xFCber"), "über");
        let mut v = Vec::new();
        put_string16(&mut v, b"hi");
        assert_eq!(v, [2, 0, b'h', b'i']);
        let mut r = Reader::new(Bytes::from(v));
        assert_eq!(r.string16("s").unwrap().as_ref(), b"hi");
        let mut r = Reader::new(Bytes::from_static(&[5, 0, b'h']));
        assert_eq!(
            r.string16("s"),
            Err(WireError::Truncated {
                field: "s",
                need: 5,
                have: 1
            })
        );
    }
}
