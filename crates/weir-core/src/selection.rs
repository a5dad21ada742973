//! File selection: which files of a multi-file transfer the user wants
//! (BEP 53's `so=` in a magnet, `weir get --files`, Transmission's
//! `files-unwanted`), and what follows from it for pieces and files.
//!
//! Pieces are the unit of transfer and verification, so a wanted file
//! needs every piece holding one of its bytes, and a piece on a boundary
//! also holds bytes of its unwanted neighbour: that neighbour is written
//! (its few boundary bytes, sparse elsewhere) but never completed. Every
//! other unwanted file is neither created nor counted against free space.

use std::sync::Arc;

use crate::bitfield::Bitfield;
use crate::geometry::Geometry;
use crate::picker::Priority;
use crate::storage::FileLayout;

/// A file selection resolved against a transfer's layout. (Which files a
/// list of indices names is `weir_bt::magnet::FileSelection::flags`.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    touched: Arc<[bool]>,
    pieces: Bitfield,
    everything: bool,
}

/// A selection that does not fit the transfer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// The selection names another number of files than the transfer has.
    #[error("the selection covers {given} files but the transfer has {files}")]
    FileCount {
        /// Files in the selection.
        given: usize,
        /// Files in the transfer.
        files: usize,
    },
}

impl Selection {
    /// Resolves `wanted` (one flag per file of `layout`). Nothing wanted is
    /// a selection too (Transmission allows it: the transfer is done at
    /// once, holding nothing); callers that want to refuse it do.
    pub fn new(
        layout: &FileLayout,
        geo: &Geometry,
        wanted: Vec<bool>,
    ) -> Result<Self, SelectionError> {
        let files = layout.files().len();
        if wanted.len() != files {
            return Err(SelectionError::FileCount {
                given: wanted.len(),
                files,
            });
        }
        let mut pieces = Bitfield::new(geo.piece_count());
        for (i, _) in wanted.iter().enumerate().filter(|(_, w)| **w) {
            for p in layout.pieces_of_file(i, geo) {
                pieces.set(p);
            }
        }
        let everything = wanted.iter().all(|&w| w);
        let mut touched = wanted;
        for p in pieces.iter_ones() {
            for (fi, _, _) in layout.map(geo.piece_offset(p), u64::from(geo.piece_size(p))) {
                touched[fi] = true;
            }
        }
        Ok(Self {
            touched: touched.into(),
            pieces,
            everything,
        })
    }

    /// One flag per file: written by the download (wanted, or sharing a
    /// needed piece with a wanted file). The others are never created.
    pub fn touched(&self) -> &Arc<[bool]> {
        &self.touched
    }

    /// The pieces the download needs.
    pub fn pieces(&self) -> &Bitfield {
        &self.pieces
    }

    /// Whether every file is wanted (nothing to skip).
    pub fn is_everything(&self) -> bool {
        self.everything
    }
}

/// Each piece's priority from its files' (`files[i]` for file `i` of
/// `layout`; files past its end are normal): the highest of the files
/// holding a byte of the piece, as Transmission does. `None` when every
/// piece is normal. A count that does not match the layout is an error.
pub fn piece_priorities(
    layout: &FileLayout,
    geo: &Geometry,
    files: &[Priority],
) -> Result<Option<Arc<[Priority]>>, SelectionError> {
    if files.len() != layout.files().len() {
        return Err(SelectionError::FileCount {
            given: files.len(),
            files: layout.files().len(),
        });
    }
    if files.iter().all(|p| *p == Priority::Normal) {
        return Ok(None);
    }
    // Each piece takes the highest priority of the files holding a byte
    // of it (a piece no file holds, which files covering the transfer
    // leave none of, stays normal).
    let mut out: Vec<Option<Priority>> = vec![None; geo.piece_count() as usize];
    for (i, &prio) in files.iter().enumerate() {
        for p in layout.pieces_of_file(i, geo) {
            let slot = &mut out[p as usize];
            *slot = Some(slot.map_or(prio, |had| had.max(prio)));
        }
    }
    Ok(Some(
        out.into_iter().map(Option::unwrap_or_default).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::*;

    /// The selection of the files at `indices`.
    fn of(l: &FileLayout, geo: &Geometry, indices: &[usize]) -> Selection {
        let mut wanted = vec![false; l.files().len()];
        for &i in indices {
            wanted[i] = true;
        }
        Selection::new(l, geo, wanted).expect("one flag per file")
    }

    /// Bytes of the needed pieces.
    fn bytes(s: &Selection, geo: &Geometry) -> u64 {
        s.pieces()
            .iter_ones()
            .map(|p| u64::from(geo.piece_size(p)))
            .sum()
    }

    fn layout(lens: &[u64]) -> FileLayout {
        FileLayout::new(
            lens.iter()
                .enumerate()
                .map(|(i, &l)| (PathBuf::from(format!("f{i}")), l)),
        )
    }

    #[test]
    fn a_wanted_file_needs_its_pieces_and_touches_boundary_neighbours() {
        // Pieces of 100: f0 0..150, f1 150..160, f2 160..400, f3 400..1000.
        let l = layout(&[150, 10, 240, 600]);
        let geo = Geometry::new(1000, 100, 16).expect("geometry");
        let s = of(&l, &geo, &[1]);
        assert_eq!(s.pieces().iter_ones().collect::<Vec<_>>(), vec![1]);
        assert_eq!(&s.touched()[..], &[true, true, true, false]);
        assert_eq!(bytes(&s, &geo), 100);
        assert!(!s.is_everything());
        let all = of(&l, &geo, &[0, 1, 2, 3]);
        assert!(all.is_everything());
        assert!(all.pieces().is_full());
        assert_eq!(bytes(&all, &geo), 1000);
    }

    #[test]
    fn bad_selections_are_named() {
        let l = layout(&[10, 10]);
        let geo = Geometry::new(20, 16, 16).expect("geometry");
        let none = of(&l, &geo, &[]);
        assert_eq!((none.pieces().count(), bytes(&none, &geo)), (0, 0));
        assert!(none.touched().iter().all(|&t| !t));
        assert_eq!(
            Selection::new(&l, &geo, vec![true]),
            Err(SelectionError::FileCount { given: 1, files: 2 })
        );
        assert!(
            Selection::new(&l, &geo, vec![true; 3])
                .unwrap_err()
                .to_string()
                .contains("covers 3 files but the transfer has 2")
        );
    }

    #[test]
    fn an_empty_wanted_file_needs_no_piece_but_is_touched() {
        let l = layout(&[0, 50]);
        let geo = Geometry::new(50, 32, 16).expect("geometry");
        let s = of(&l, &geo, &[0]);
        assert_eq!(s.pieces().count(), 0);
        assert_eq!(&s.touched()[..], &[true, false]);
        assert_eq!(bytes(&s, &geo), 0);
    }

    proptest! {
        /// Every byte of a wanted file lies in a needed piece, every
        /// needed piece holds a byte of a wanted file, and a file with a
        /// byte in a needed piece is touched; untouched files share no
        /// needed piece.
        #[test]
        fn needed_pieces_cover_exactly_the_wanted_files(
            lens in proptest::collection::vec(0u64..300, 1..12),
            picks in proptest::collection::vec(any::<bool>(), 12),
            piece in 1u32..200,
        ) {
            let total: u64 = lens.iter().sum();
            prop_assume!(total > 0);
            let l = layout(&lens);
            let geo = Geometry::new(total, piece, 16).expect("geometry");
            let wanted: Vec<bool> = picks[..lens.len()].to_vec();
            let s = Selection::new(&l, &geo, wanted.clone()).expect("one flag per file");
            for p in 0..geo.piece_count() {
                let files: Vec<usize> = l
                    .map(geo.piece_offset(p), u64::from(geo.piece_size(p)))
                    .map(|(f, _, _)| f)
                    .collect();
                let needed = files.iter().any(|&f| wanted[f]);
                prop_assert_eq!(s.pieces().get(p), needed);
                if needed {
                    for f in files {
                        prop_assert!(s.touched()[f]);
                    }
                }
            }
            for (i, w) in wanted.iter().enumerate() {
                if *w {
                    prop_assert!(s.touched()[i]);
                }
            }
            prop_assert_eq!(s.is_everything(), wanted.iter().all(|&w| w));
        }
    }

    #[test]
    fn a_piece_takes_the_highest_priority_of_its_files() {
        // 10-byte pieces; files of 15, 10 and 5 bytes: pieces 0 (f0),
        // 1 (f0 + f1), 2 (f1 + f2).
        let l = FileLayout::new([
            (PathBuf::from("a"), 15),
            (PathBuf::from("b"), 10),
            (PathBuf::from("c"), 5),
        ]);
        let geo = Geometry::new(30, 10, 10).unwrap();
        use Priority::*;
        let got = |f: &[Priority]| piece_priorities(&l, &geo, f).unwrap().map(|p| p.to_vec());
        assert_eq!(got(&[Normal, Normal, Normal]), None);
        assert_eq!(got(&[Low, High, Normal]), Some(vec![Low, High, High]));
        assert_eq!(got(&[Low, Low, Normal]), Some(vec![Low, Low, Normal]));
        assert_eq!(got(&[High, Low, Low]), Some(vec![High, High, Low]));
        assert!(piece_priorities(&l, &geo, &[High]).is_err(), "one per file");
    }
}
