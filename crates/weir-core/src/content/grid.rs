//! Unit grids: how a verification scheme or a protocol cuts a byte range
//! of the transfer, and how its units map onto the transfer's pieces.
//!
//! The transfer's own pieces (the *primary* grid, the one the picker and
//! storage work in) come from one scheme: a torrent's pieces when there is
//! a torrent, else eD2k parts. Another network attached to the same bytes
//! speaks in its own units (eD2k parts of one file of a multi-file
//! torrent, say), which need not line up with the pieces. A [`UnitGrid`]
//! says where those units are; the mapping functions answer "which pieces
//! does this peer have, given the units it has" (a piece counts only when
//! every byte of it is inside units the peer has) and "which pieces does
//! this unit touch".

use std::ops::Range;

use crate::bitfield::Bitfield;
use crate::geometry::Geometry;

/// Units of `unit_len` bytes over `offset..offset+len` of the transfer
/// (the last unit may be short).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitGrid {
    /// Transfer offset of the first unit's first byte.
    pub offset: u64,
    /// Bytes covered.
    pub len: u64,
    /// Nominal unit length (positive).
    pub unit_len: u64,
}

impl UnitGrid {
    /// A grid, or `None` if `unit_len` is zero.
    pub fn new(offset: u64, len: u64, unit_len: u64) -> Option<Self> {
        (unit_len > 0).then_some(Self {
            offset,
            len,
            unit_len,
        })
    }

    /// Number of units.
    pub fn count(&self) -> u32 {
        u32::try_from(self.len.div_ceil(self.unit_len)).unwrap_or(u32::MAX)
    }

    /// Transfer byte range of unit `i` (empty past the end).
    pub fn range(&self, i: u32) -> Range<u64> {
        let start = (u64::from(i) * self.unit_len).min(self.len);
        let end = (start + self.unit_len).min(self.len);
        self.offset + start..self.offset + end
    }

    /// Units overlapping the transfer byte range `r`.
    pub fn units_overlapping(&self, r: Range<u64>) -> Range<u32> {
        let end = self.offset + self.len;
        let (s, e) = (r.start.max(self.offset), r.end.min(end));
        if s >= e {
            return 0..0;
        }
        let first = ((s - self.offset) / self.unit_len) as u32;
        let last = ((e - 1 - self.offset) / self.unit_len) as u32;
        first..last + 1
    }
}

/// Pieces of `geo` overlapping the transfer byte range `r`.
pub fn pieces_overlapping(geo: &Geometry, r: Range<u64>) -> Range<u32> {
    let (s, e) = (r.start, r.end.min(geo.total_len()));
    if s >= e {
        return 0..0;
    }
    let pl = u64::from(geo.piece_len());
    (s / pl) as u32..((e - 1) / pl) as u32 + 1
}

/// The pieces of `geo` that lie entirely inside units of `grid` set in
/// `units` (what a peer of that grid can send us, in our pieces).
pub fn pieces_covered(geo: &Geometry, grid: &UnitGrid, units: &Bitfield) -> Bitfield {
    let mut out = Bitfield::new(geo.piece_count());
    for p in pieces_overlapping(geo, grid.offset..grid.offset + grid.len) {
        let start = geo.piece_offset(p);
        let r = start..start + u64::from(geo.piece_size(p));
        if r.start < grid.offset || r.end > grid.offset + grid.len {
            continue;
        }
        if grid.units_overlapping(r).all(|u| units.get(u)) {
            out.set(p);
        }
    }
    out
}

/// The units of `grid` whose every byte is in a piece set in `pieces`.
pub fn units_covered(geo: &Geometry, grid: &UnitGrid, pieces: &Bitfield) -> Bitfield {
    let mut out = Bitfield::new(grid.count());
    for u in 0..grid.count() {
        if pieces_overlapping(geo, grid.range(u)).all(|p| pieces.get(p)) {
            out.set(u);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unaligned_units_cover_only_whole_pieces() {
        // 100-byte pieces; units of 150 bytes starting at 30.
        let geo = Geometry::new(1000, 100, 50).unwrap();
        let grid = UnitGrid::new(30, 600, 150).unwrap();
        assert_eq!(grid.count(), 4);
        assert_eq!(grid.range(3), 480..630);
        let mut units = Bitfield::new(4);
        units.set(0); // 30..180
        units.set(1); // 180..330
        let p = pieces_covered(&geo, &grid, &units);
        // Piece 1 (100..200) and 2 (200..300) are inside 30..330; piece 0
        // starts before the grid, piece 3 needs unit 2.
        assert_eq!(p.iter_ones().collect::<Vec<_>>(), [1, 2]);
        let mut pieces = Bitfield::new(10);
        for i in 0..4 {
            pieces.set(i);
        }
        // Unit 0 (30..180) and unit 1 (180..330) lie in pieces 0..=3.
        assert_eq!(
            units_covered(&geo, &grid, &pieces)
                .iter_ones()
                .collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(grid.units_overlapping(0..30), 0..0);
        assert_eq!(grid.units_overlapping(179..181), 0..2);
        assert_eq!(pieces_overlapping(&geo, grid.range(1)), 1..4);
    }

    proptest! {
        #[test]
        fn covered_pieces_are_exactly_those_inside_had_units(
            piece_len in 1u32..64, unit_len in 1u64..100, offset in 0u64..200,
            len in 0u64..400, extra in 0u64..100, bits in proptest::collection::vec(any::<bool>(), 0..400)
        ) {
            let total = offset + len + extra;
            let geo = Geometry::new(total, piece_len, piece_len).unwrap();
            let grid = UnitGrid::new(offset, len, unit_len).unwrap();
            let mut units = Bitfield::new(grid.count());
            for (i, b) in bits.iter().enumerate().take(grid.count() as usize) {
                if *b { units.set(i as u32); }
            }
            let got = pieces_covered(&geo, &grid, &units);
            for p in 0..geo.piece_count() {
                let s = geo.piece_offset(p);
                let e = s + u64::from(geo.piece_size(p));
                let inside = s >= offset && e <= offset + len
                    && (s..e).all(|b| units.get(((b - offset) / unit_len) as u32));
                prop_assert_eq!(got.get(p), inside, "piece {}", p);
            }
        }
    }
}
