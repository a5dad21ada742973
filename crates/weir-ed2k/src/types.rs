//! Hash value types: MD4 (file and user hashes) and AICH (SHA-1).

use std::fmt;
use std::str::FromStr;

/// A string that is not a valid hash, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseHashError {
    /// Wrong number of characters.
    #[error("hash has {got} characters, expected {expected}")]
    Length {
        /// Characters found.
        got: usize,
        /// Characters expected.
        expected: usize,
    },
    /// A character outside the alphabet.
    #[error("invalid character {0:?} in hash")]
    Char(char),
}

/// A 16-byte MD4 hash: an ed2k file hash, a part hash or a user hash.
/// Printed as 32 upper-case hex digits, as aMule prints it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Md4Hash(pub [u8; 16]);

impl Md4Hash {
    /// MD4 of nothing: the hash of the empty part appended to the hashset
    /// of files whose size is an exact multiple of the part size.
    pub const EMPTY: Md4Hash = Md4Hash([
        0x31, 0xD6, 0xCF, 0xE0, 0xD1, 0x6A, 0xE9, 0x31, 0xB7, 0x3C, 0x59, 0xD7, 0xE0, 0xC0, 0x89,
        0xC0,
    ]);

    /// The hash as upper-case hex.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(32);
        for b in self.0 {
            s.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
            s.push(char::from_digit((b & 15) as u32, 16).unwrap_or('0'));
        }
        s.make_ascii_uppercase();
        s
    }

    /// Parses 32 hex digits (either case).
    pub fn from_hex(s: &str) -> Result<Self, ParseHashError> {
        if s.len() != 32 {
            return Err(ParseHashError::Length {
                got: s.chars().count(),
                expected: 32,
            });
        }
        let mut out = [0u8; 16];
        let b = s.as_bytes();
        for (i, o) in out.iter_mut().enumerate() {
            let hi = hex_val(b[2 * i])?;
            let lo = hex_val(b[2 * i + 1])?;
            *o = hi << 4 | lo;
        }
        Ok(Md4Hash(out))
    }
}

fn hex_val(c: u8) -> Result<u8, ParseHashError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(ParseHashError::Char(c as char)),
    }
}

impl fmt::Display for Md4Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Md4Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Md4Hash({})", self.to_hex())
    }
}

impl FromStr for Md4Hash {
    type Err = ParseHashError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_hex(s)
    }
}

/// A 20-byte AICH (SHA-1 tree) hash. Printed in base32 (RFC 4648 alphabet,
/// no padding, 32 characters), as aMule prints it after `h=` in links.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct AichHash(pub [u8; 20]);

const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

impl AichHash {
    /// The hash in base32 (32 upper-case characters).
    pub fn to_base32(&self) -> String {
        // 160 bits = exactly 32 groups of 5 bits.
        let mut out = String::with_capacity(32);
        let mut acc: u64 = 0;
        let mut bits = 0;
        for &b in &self.0 {
            acc = acc << 8 | b as u64;
            bits += 8;
            while bits >= 5 {
                bits -= 5;
                out.push(B32[((acc >> bits) & 31) as usize] as char);
            }
        }
        out
    }

    /// Parses 32 base32 characters (either case).
    pub fn from_base32(s: &str) -> Result<Self, ParseHashError> {
        if s.len() != 32 {
            return Err(ParseHashError::Length {
                got: s.chars().count(),
                expected: 32,
            });
        }
        let mut out = [0u8; 20];
        let mut acc: u64 = 0;
        let mut bits = 0;
        let mut i = 0;
        for c in s.bytes() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a',
                b'2'..=b'7' => c - b'2' + 26,
                _ => return Err(ParseHashError::Char(c as char)),
            };
            acc = acc << 5 | v as u64;
            bits += 5;
            if bits >= 8 {
                bits -= 8;
                out[i] = (acc >> bits) as u8;
                i += 1;
            }
        }
        Ok(AichHash(out))
    }
}

impl fmt::Display for AichHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base32())
    }
}

impl fmt::Debug for AichHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AichHash({})", self.to_base32())
    }
}

impl FromStr for AichHash {
    type Err = ParseHashError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_base32(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_md4_constant() {
        assert_eq!(Md4Hash::EMPTY.to_hex(), "31D6CFE0D16AE931B73C59D7E0C089C0");
        assert_eq!(
            "31d6cfe0d16ae931b73c59d7e0c089c0".parse::<Md4Hash>(),
            Ok(Md4Hash::EMPTY)
        );
    }

    #[test]
    fn bad_hashes_are_errors() {
        assert!(matches!(
            Md4Hash::from_hex("31D6"),
            Err(ParseHashError::Length { .. })
        ));
        assert_eq!(
            Md4Hash::from_hex("G1D6CFE0D16AE931B73C59D7E0C089C0"),
            Err(ParseHashError::Char('G'))
        );
        // Multi-byte characters never index inside a char.
        assert_eq!(
            Md4Hash::from_hex("ééééééééééééééé"),
            Err(ParseHashError::Length {
                got: 15,
                expected: 32
            })
        );
        assert_eq!(
            AichHash::from_base32("ABCDEFGHIJKLMNOPQRSTUVWXYZ23456!"),
            Err(ParseHashError::Char('!'))
        );
        assert_eq!(
            AichHash::from_base32("AAAA"),
            Err(ParseHashError::Length {
                got: 4,
                expected: 32
            })
        );
    }

    #[test]
    fn base32_known_value() {
        // SHA-1("") = da39a3ee5e6b4b0d3255bfef95601890afd80709
        let h = AichHash([
            0xda, 0x39, 0xa3, 0xee, 0x5e, 0x6b, 0x4b, 0x0d, 0x32, 0x55, 0xbf, 0xef, 0x95, 0x60,
            0x18, 0x90, 0xaf, 0xd8, 0x07, 0x09,
        ]);
        assert_eq!(h.to_base32(), "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ");
    }

    proptest! {
        #[test]
        fn md4_hex_round_trip(b in any::<[u8; 16]>()) {
            let h = Md4Hash(b);
            prop_assert_eq!(Md4Hash::from_hex(&h.to_hex()), Ok(h));
            prop_assert_eq!(Md4Hash::from_hex(&h.to_hex().to_lowercase()), Ok(h));
        }

        #[test]
        fn aich_base32_round_trip(b in any::<[u8; 20]>()) {
            let h = AichHash(b);
            prop_assert_eq!(AichHash::from_base32(&h.to_base32()), Ok(h));
        }

        #[test]
        fn hash_parsers_never_panic(s in ".{0,40}") {
            // What parses prints back (up to case); a wrong length is named
            // as such, anything else is a bad character.
            match Md4Hash::from_hex(&s) {
                Ok(h) => prop_assert!(h.to_hex().eq_ignore_ascii_case(&s)),
                Err(ParseHashError::Length { .. }) => prop_assert_ne!(s.len(), 32),
                Err(ParseHashError::Char(_)) => prop_assert_eq!(s.len(), 32),
            }
            match AichHash::from_base32(&s) {
                Ok(h) => prop_assert!(h.to_base32().eq_ignore_ascii_case(&s)),
                Err(ParseHashError::Length { .. }) => prop_assert_ne!(s.len(), 32),
                Err(ParseHashError::Char(_)) => prop_assert_eq!(s.len(), 32),
            }
        }
    }
}
