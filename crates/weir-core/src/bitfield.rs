//! A fixed-length set of piece indexes.
//!
//! Stored most-significant-bit first, as BitTorrent sends it (BEP 3); eD2k's
//! part status is least-significant-bit first and converts with
//! [`Bitfield::from_lsb_bytes`] / [`Bitfield::to_lsb_bytes`].

/// A bitfield received with bits set past its length, or of the wrong size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BitfieldError {
    /// The byte count does not match the number of pieces.
    #[error("bitfield of {got} bytes for {pieces} pieces (expected {want} bytes)")]
    WrongLength {
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        want: usize,
        /// Pieces in the torrent.
        pieces: u32,
    },
    /// Bits beyond the last piece are set.
    #[error("bitfield has spare bits set past piece {pieces}")]
    SpareBits {
        /// Pieces in the torrent.
        pieces: u32,
    },
}

/// A set of piece indexes in `0..len`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Bitfield {
    bytes: Vec<u8>,
    len: u32,
    ones: u32,
}

impl Bitfield {
    /// An empty set over `len` pieces.
    pub fn new(len: u32) -> Self {
        Self {
            bytes: vec![0; len.div_ceil(8) as usize],
            len,
            ones: 0,
        }
    }

    /// The full set over `len` pieces.
    pub fn full(len: u32) -> Self {
        let mut b = Self::new(len);
        for i in 0..len {
            b.set(i);
        }
        b
    }

    /// Parses an MSB-first bitfield for `len` pieces, refusing a wrong length
    /// or spare bits set.
    pub fn from_bytes(bytes: &[u8], len: u32) -> Result<Self, BitfieldError> {
        let want = len.div_ceil(8) as usize;
        if bytes.len() != want {
            return Err(BitfieldError::WrongLength {
                got: bytes.len(),
                want,
                pieces: len,
            });
        }
        if len % 8 != 0 {
            let spare_mask = 0xffu8 >> (len % 8);
            if bytes[want - 1] & spare_mask != 0 {
                return Err(BitfieldError::SpareBits { pieces: len });
            }
        }
        let ones = bytes.iter().map(|b| b.count_ones()).sum();
        Ok(Self {
            bytes: bytes.to_vec(),
            len,
            ones,
        })
    }

    /// Parses an LSB-first bitfield (eD2k part status).
    pub fn from_lsb_bytes(bytes: &[u8], len: u32) -> Result<Self, BitfieldError> {
        let flipped: Vec<u8> = bytes.iter().map(|b| b.reverse_bits()).collect();
        Self::from_bytes(&flipped, len)
    }

    /// The LSB-first bytes (eD2k part status).
    pub fn to_lsb_bytes(&self) -> Vec<u8> {
        self.bytes.iter().map(|b| b.reverse_bits()).collect()
    }

    /// The MSB-first bytes (BitTorrent).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Number of pieces the set ranges over.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the set ranges over no pieces at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of pieces in the set.
    pub fn count(&self) -> u32 {
        self.ones
    }

    /// Whether every piece is in the set.
    pub fn is_full(&self) -> bool {
        self.ones == self.len
    }

    /// Whether `i` is in the set (false when out of range).
    pub fn get(&self, i: u32) -> bool {
        i < self.len && self.bytes[(i / 8) as usize] & (0x80 >> (i % 8)) != 0
    }

    /// Adds `i`; returns whether it was newly added. Out of range is ignored.
    pub fn set(&mut self, i: u32) -> bool {
        if i >= self.len || self.get(i) {
            return false;
        }
        self.bytes[(i / 8) as usize] |= 0x80 >> (i % 8);
        self.ones += 1;
        true
    }

    /// Removes `i`; returns whether it was present.
    pub fn clear(&mut self, i: u32) -> bool {
        if !self.get(i) {
            return false;
        }
        self.bytes[(i / 8) as usize] &= !(0x80 >> (i % 8));
        self.ones -= 1;
        true
    }

    /// The indexes in the set, ascending.
    pub fn iter_ones(&self) -> impl Iterator<Item = u32> + '_ {
        self.bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b != 0)
            .flat_map(|(i, b)| {
                (0..8u32)
                    .filter(move |bit| b & (0x80 >> bit) != 0)
                    .map(move |bit| i as u32 * 8 + bit)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_clear_count() {
        let mut b = Bitfield::new(10);
        assert!(b.set(0) && b.set(9) && !b.set(9) && !b.set(10));
        assert_eq!(b.as_bytes(), &[0x80, 0x40]);
        assert_eq!(b.count(), 2);
        assert!(b.clear(0) && !b.clear(0));
        assert_eq!(b.iter_ones().collect::<Vec<_>>(), [9]);
        assert!(Bitfield::full(10).is_full());
    }

    #[test]
    fn parse_rejects_wrong_length_and_spare_bits() {
        assert!(matches!(
            Bitfield::from_bytes(&[0xff], 10),
            Err(BitfieldError::WrongLength { .. })
        ));
        assert!(matches!(
            Bitfield::from_bytes(&[0xff, 0xe0], 10),
            Err(BitfieldError::SpareBits { .. })
        ));
        let b = Bitfield::from_bytes(&[0xff, 0xc0], 10).unwrap();
        assert!(b.is_full());
    }

    #[test]
    fn lsb_round_trip() {
        let b = Bitfield::from_lsb_bytes(&[0b0000_0011], 3).unwrap();
        assert!(b.get(0) && b.get(1) && !b.get(2));
        assert_eq!(b.to_lsb_bytes(), vec![0b0000_0011]);
    }

    proptest::proptest! {
        #[test]
        fn from_bytes_never_panics_and_counts(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40), len in 0u32..320) {
            if let Ok(b) = Bitfield::from_bytes(&bytes, len) {
                proptest::prop_assert_eq!(b.count() as usize, b.iter_ones().count());
                proptest::prop_assert!(b.iter_ones().all(|i| i < len));
            }
        }
    }
}
