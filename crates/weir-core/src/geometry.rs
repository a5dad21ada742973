//! Piece and block arithmetic, in one place, for any protocol.
//!
//! A transfer of `total_len` bytes is cut into pieces of `piece_len` bytes
//! (the last may be short) and each piece into blocks of `block_len` bytes
//! (the last block of a piece may be short). BitTorrent uses its torrent's
//! piece length and 16 KiB blocks; eD2k uses 9,728,000-byte parts and
//! 184,320-byte blocks.

/// A geometry that cannot describe any transfer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// Piece length is zero.
    #[error("piece length must be positive")]
    ZeroPiece,
    /// Block length is zero.
    #[error("block length must be positive")]
    ZeroBlock,
    /// More pieces than a u32 can count.
    #[error("{total} bytes in {piece}-byte pieces is more than 2^32 pieces")]
    TooManyPieces {
        /// Total bytes.
        total: u64,
        /// Piece length.
        piece: u64,
    },
}

/// One block of one piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockSpan {
    /// Piece index.
    pub piece: u32,
    /// Offset of the block inside the piece.
    pub begin: u32,
    /// Length of the block.
    pub len: u32,
}

/// Piece and block layout of one transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    total_len: u64,
    piece_len: u32,
    block_len: u32,
    piece_count: u32,
}

impl Geometry {
    /// A geometry of `total_len` bytes in `piece_len`-byte pieces of
    /// `block_len`-byte blocks.
    pub fn new(total_len: u64, piece_len: u32, block_len: u32) -> Result<Self, GeometryError> {
        if piece_len == 0 {
            return Err(GeometryError::ZeroPiece);
        }
        if block_len == 0 {
            return Err(GeometryError::ZeroBlock);
        }
        let count = total_len.div_ceil(u64::from(piece_len));
        let piece_count = u32::try_from(count).map_err(|_| GeometryError::TooManyPieces {
            total: total_len,
            piece: u64::from(piece_len),
        })?;
        Ok(Self {
            total_len,
            piece_len,
            block_len: block_len.min(piece_len),
            piece_count,
        })
    }

    /// Bytes in the whole transfer.
    pub fn total_len(&self) -> u64 {
        self.total_len
    }

    /// Nominal piece length (every piece but possibly the last).
    pub fn piece_len(&self) -> u32 {
        self.piece_len
    }

    /// Nominal block length.
    pub fn block_len(&self) -> u32 {
        self.block_len
    }

    /// Number of pieces.
    pub fn piece_count(&self) -> u32 {
        self.piece_count
    }

    /// Byte offset of `piece` in the transfer.
    pub fn piece_offset(&self, piece: u32) -> u64 {
        u64::from(piece) * u64::from(self.piece_len)
    }

    /// Length of `piece` (0 when out of range).
    pub fn piece_size(&self, piece: u32) -> u32 {
        if piece >= self.piece_count {
            return 0;
        }
        let rest = self.total_len - self.piece_offset(piece);
        rest.min(u64::from(self.piece_len)) as u32
    }

    /// Number of blocks in `piece`.
    pub fn blocks_in_piece(&self, piece: u32) -> u32 {
        self.piece_size(piece).div_ceil(self.block_len)
    }

    /// The `block`-th block of `piece`.
    pub fn block(&self, piece: u32, block: u32) -> BlockSpan {
        let begin = block * self.block_len;
        let len = self
            .piece_size(piece)
            .saturating_sub(begin)
            .min(self.block_len);
        BlockSpan { piece, begin, len }
    }

    /// The block index that starts at `begin` in `piece` with length `len`,
    /// if that is exactly one of this geometry's blocks.
    pub fn block_index(&self, piece: u32, begin: u32, len: u32) -> Option<u32> {
        if piece >= self.piece_count || begin % self.block_len != 0 {
            return None;
        }
        let idx = begin / self.block_len;
        (idx < self.blocks_in_piece(piece) && self.block(piece, idx).len == len).then_some(idx)
    }

    /// Whether `begin..begin+len` lies inside `piece` (for serving requests
    /// of any alignment).
    pub fn contains(&self, piece: u32, begin: u32, len: u32) -> bool {
        len > 0 && u64::from(begin) + u64::from(len) <= u64::from(self.piece_size(piece))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_last_piece_and_block() {
        let g = Geometry::new(100_000, 32_768, 16_384).unwrap();
        assert_eq!(g.piece_count(), 4);
        assert_eq!(g.piece_size(3), 100_000 - 3 * 32_768);
        assert_eq!(g.blocks_in_piece(3), 1);
        assert_eq!(g.block(3, 0).len, 1_696);
        assert_eq!(g.piece_size(4), 0);
        assert_eq!(g.block_index(3, 0, 1_696), Some(0));
        assert_eq!(g.block_index(3, 0, 16_384), None);
        assert_eq!(g.block_index(0, 100, 16_384), None);
    }

    #[test]
    fn ed2k_parts() {
        let g = Geometry::new(9_728_000 * 2 + 1, 9_728_000, 184_320).unwrap();
        assert_eq!(g.piece_count(), 3);
        assert_eq!(g.blocks_in_piece(0), 53);
        assert_eq!(g.block(0, 52).len, 9_728_000 - 52 * 184_320);
        assert_eq!(g.piece_size(2), 1);
    }

    #[test]
    fn empty_and_invalid() {
        assert_eq!(Geometry::new(0, 16_384, 16_384).unwrap().piece_count(), 0);
        assert!(Geometry::new(1, 0, 1).is_err());
        assert!(Geometry::new(1, 1, 0).is_err());
        assert!(Geometry::new(u64::MAX, 1, 1).is_err());
    }

    proptest::proptest! {
        #[test]
        fn blocks_tile_every_piece(total in 0u64..10_000_000, piece in 1u32..3_000_000, block in 1u32..300_000) {
            let g = Geometry::new(total, piece, block).unwrap();
            let mut sum = 0u64;
            for p in 0..g.piece_count() {
                let mut at = 0;
                for b in 0..g.blocks_in_piece(p) {
                    let s = g.block(p, b);
                    proptest::prop_assert_eq!(s.begin, at);
                    proptest::prop_assert!(s.len > 0);
                    proptest::prop_assert_eq!(g.block_index(p, s.begin, s.len), Some(b));
                    at += s.len;
                }
                proptest::prop_assert_eq!(at, g.piece_size(p));
                sum += u64::from(at);
            }
            proptest::prop_assert_eq!(sum, total);
        }
    }
}
