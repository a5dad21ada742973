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
use crate::storage::FileLayout;

/// A file selection resolved against a transfer's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    wanted: Arc<[bool]>,
    touched: Arc<[bool]>,
    pieces: Bitfield,
    bytes: u64,
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
    /// A file index past the last file.
    #[error("file {index} does not exist: the transfer has {files} files (numbered from 0)")]
    NoSuchFile {
        /// The index given.
        index: u64,
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
        let mut touched = wanted.clone();
        for p in pieces.iter_ones() {
            for (fi, _, _) in layout.map(geo.piece_offset(p), u64::from(geo.piece_size(p))) {
                touched[fi] = true;
            }
        }
        let bytes = pieces
            .iter_ones()
            .map(|p| u64::from(geo.piece_size(p)))
            .sum();
        Ok(Self {
            wanted: wanted.into(),
            touched: touched.into(),
            pieces,
            bytes,
        })
    }

    /// Resolves a list of wanted file indices (0-based, as BEP 53 numbers
    /// them); an index past the last file is an error.
    pub fn from_indices(
        layout: &FileLayout,
        geo: &Geometry,
        indices: impl IntoIterator<Item = u64>,
    ) -> Result<Self, SelectionError> {
        let files = layout.files().len();
        let mut wanted = vec![false; files];
        for index in indices {
            let i = usize::try_from(index)
                .ok()
                .filter(|&i| i < files)
                .ok_or(SelectionError::NoSuchFile { index, files })?;
            wanted[i] = true;
        }
        Self::new(layout, geo, wanted)
    }

    /// Whether file `i` is wanted.
    pub fn wants(&self, i: usize) -> bool {
        self.wanted.get(i).copied().unwrap_or(false)
    }

    /// One flag per file: wanted.
    pub fn wanted(&self) -> &Arc<[bool]> {
        &self.wanted
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

    /// Bytes of the needed pieces: what the transfer holds once done.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether every file is wanted (nothing to skip).
    pub fn is_everything(&self) -> bool {
        self.wanted.iter().all(|&w| w)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::*;

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
        let s = Selection::from_indices(&l, &geo, [1]).expect("valid");
        assert_eq!(s.pieces().iter_ones().collect::<Vec<_>>(), vec![1]);
        assert_eq!(&s.touched()[..], &[true, true, true, false]);
        assert_eq!(s.bytes(), 100);
        assert!(!s.is_everything());
        let all = Selection::from_indices(&l, &geo, 0..4).expect("valid");
        assert!(all.is_everything());
        assert!(all.pieces().is_full());
        assert_eq!(all.bytes(), 1000);
    }

    #[test]
    fn bad_selections_are_named() {
        let l = layout(&[10, 10]);
        let geo = Geometry::new(20, 16, 16).expect("geometry");
        assert_eq!(
            Selection::from_indices(&l, &geo, [2]),
            Err(SelectionError::NoSuchFile { index: 2, files: 2 })
        );
        let none = Selection::from_indices(&l, &geo, []).expect("valid");
        assert_eq!((none.pieces().count(), none.bytes()), (0, 0));
        assert!(none.touched().iter().all(|&t| !t));
        assert_eq!(
            Selection::new(&l, &geo, vec![true]),
            Err(SelectionError::FileCount { given: 1, files: 2 })
        );
        assert!(
            Selection::from_indices(&l, &geo, [u64::MAX])
                .unwrap_err()
                .to_string()
                .contains("numbered from 0")
        );
    }

    #[test]
    fn an_empty_wanted_file_needs_no_piece_but_is_touched() {
        let l = layout(&[0, 50]);
        let geo = Geometry::new(50, 32, 16).expect("geometry");
        let s = Selection::from_indices(&l, &geo, [0]).expect("valid");
        assert_eq!(s.pieces().count(), 0);
        assert_eq!(&s.touched()[..], &[true, false]);
        assert_eq!(s.bytes(), 0);
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
                prop_assert_eq!(s.wants(i), *w);
                if *w {
                    prop_assert!(s.touched()[i]);
                }
            }
            let bytes: u64 = s.pieces().iter_ones().map(|p| u64::from(geo.piece_size(p))).sum();
            prop_assert_eq!(s.bytes(), bytes);
        }
    }
}
