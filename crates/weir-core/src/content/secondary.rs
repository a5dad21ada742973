//! Secondary verification schemes: units of another network's hashes over
//! some of the transfer's bytes (eD2k MD4 parts of one file of a torrent).
//!
//! A unit is checked from storage once every primary piece under it is
//! verified and the scheme's digests are known (an eD2k hashset arrives
//! from a peer). A unit that passes may be offered on its network; one
//! that fails although every piece under it passed means the two networks
//! disagree about the bytes: the owner decides (the primary scheme, which
//! verified every byte, wins; the other network's attachment is dropped).

use std::collections::BTreeSet;

use super::grid::{UnitGrid, pieces_overlapping};
use crate::bitfield::Bitfield;
use crate::geometry::Geometry;

/// A secondary scheme of a content, in the order added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchemeId(pub u8);

#[derive(Debug)]
pub(crate) struct Secondary {
    grid: UnitGrid,
    known: bool,
    verified: Bitfield,
    failed: Bitfield,
    checking: BTreeSet<u32>,
}

impl Secondary {
    pub(crate) fn new(grid: UnitGrid) -> Self {
        let n = grid.count();
        Self {
            grid,
            known: false,
            verified: Bitfield::new(n),
            failed: Bitfield::new(n),
            checking: BTreeSet::new(),
        }
    }

    pub(crate) fn grid(&self) -> &UnitGrid {
        &self.grid
    }

    pub(crate) fn verified(&self) -> &Bitfield {
        &self.verified
    }

    /// Nothing left to wait for: every unit checked (passed or failed), or
    /// the digests are not known (they may never be: an eD2k hashset comes
    /// only from an eD2k peer; the primary scheme verified every byte).
    pub(crate) fn settled(&self) -> bool {
        !self.known || self.verified.count() + self.failed.count() == self.grid.count()
    }

    fn ready(&self, geo: &Geometry, had: &Bitfield, unit: u32) -> bool {
        self.known
            && !self.verified.get(unit)
            && !self.failed.get(unit)
            && !self.checking.contains(&unit)
            && pieces_overlapping(geo, self.grid.range(unit)).all(|p| had.get(p))
    }

    /// Units that became checkable now that `piece` is had.
    pub(crate) fn on_piece_had(&mut self, geo: &Geometry, had: &Bitfield, piece: u32) -> Vec<u32> {
        let start = geo.piece_offset(piece);
        let r = start..start + u64::from(geo.piece_size(piece));
        let units: Vec<u32> = self
            .grid
            .units_overlapping(r)
            .filter(|&u| self.ready(geo, had, u))
            .collect();
        self.checking.extend(units.iter().copied());
        units
    }

    /// The digests are known: every unit whose pieces are had is checkable.
    pub(crate) fn set_known(&mut self, geo: &Geometry, had: &Bitfield) -> Vec<u32> {
        self.known = true;
        let units: Vec<u32> = (0..self.grid.count())
            .filter(|&u| self.ready(geo, had, u))
            .collect();
        self.checking.extend(units.iter().copied());
        units
    }

    /// A check finished; false if it was not asked for.
    pub(crate) fn on_checked(&mut self, unit: u32, ok: bool) -> bool {
        if !self.checking.remove(&unit) {
            return false;
        }
        if ok {
            self.verified.set(unit);
        } else {
            self.failed.set(unit);
        }
        true
    }
}
