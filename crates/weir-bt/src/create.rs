//! Building `.torrent` files, sans-IO: the caller lists the files, supplies
//! the data (through [`PieceHasher`] or [`hash_pieces`], or its own piece
//! hashes) and the metadata, and [`TorrentBuilder::build`] returns the
//! encoded torrent together with its parsed, checked [`Metainfo`].

use sha1::{Digest, Sha1};
use weir_bencode::OwnedValue;
use weir_core::safepath::{self, Platform};

use crate::metainfo::{FileEntry, MAX_PIECE_LENGTH, Metainfo, MetainfoError};

/// Smallest piece length [`default_piece_length`] picks (16 KiB).
pub const MIN_DEFAULT_PIECE: u32 = 16 << 10;
/// Largest piece length [`default_piece_length`] picks (16 MiB).
pub const MAX_DEFAULT_PIECE: u32 = 16 << 20;

/// A sensible piece length for `total` bytes: the smallest power of two that
/// keeps the torrent at or under 2048 pieces (so about 1000-2000), clamped
/// to 16 KiB..=16 MiB. A 1 GiB payload gets 512 KiB.
pub fn default_piece_length(total: u64) -> u32 {
    let mut p = MIN_DEFAULT_PIECE;
    while p < MAX_DEFAULT_PIECE && total.div_ceil(u64::from(p)) > 2048 {
        p *= 2;
    }
    p
}

/// SHA-1 of each `piece_length` piece of `data` (the last may be short).
/// For data that starts on a piece boundary; threads can hash disjoint
/// piece-aligned chunks in parallel and concatenate the results.
pub fn hash_pieces(data: &[u8], piece_length: u32) -> Vec<[u8; 20]> {
    data.chunks(piece_length.max(1) as usize)
        .map(|c| Sha1::digest(c).into())
        .collect()
}

/// Streaming piece hasher: feed the concatenated file data in any chunk
/// sizes, then [`PieceHasher::finish`].
#[derive(Clone, Debug)]
pub struct PieceHasher {
    piece_length: u32,
    current: Sha1,
    filled: u32,
    hashes: Vec<[u8; 20]>,
}

impl PieceHasher {
    /// A hasher for pieces of `piece_length` bytes (must be > 0).
    pub fn new(piece_length: u32) -> Self {
        Self {
            piece_length: piece_length.max(1),
            current: Sha1::new(),
            filled: 0,
            hashes: Vec::new(),
        }
    }

    /// Hashes the next bytes of the payload.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = (self.piece_length - self.filled) as usize;
            let n = room.min(data.len());
            self.current.update(&data[..n]);
            self.filled += n as u32;
            data = &data[n..];
            if self.filled == self.piece_length {
                self.hashes.push(
                    std::mem::replace(&mut self.current, Sha1::new())
                        .finalize()
                        .into(),
                );
                self.filled = 0;
            }
        }
    }

    /// The hashes of every piece, including a short last piece.
    pub fn finish(mut self) -> Vec<[u8; 20]> {
        if self.filled > 0 {
            self.hashes.push(self.current.finalize().into());
        }
        self.hashes
    }
}

/// Why a torrent cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Piece length 0 or above 64 MiB.
    #[error("bad piece length {0}: must be 1 B to 64 MiB")]
    BadPieceLength(u32),
    /// The number of hashes does not fit the data.
    #[error(
        "{found} piece hashes given but {total} bytes in pieces of {piece_length} need {expected}"
    )]
    PieceCount {
        /// Hashes needed.
        expected: u64,
        /// Hashes given.
        found: usize,
        /// Total length.
        total: u64,
        /// Piece length.
        piece_length: u32,
    },
    /// A name weir would refuse to download.
    #[error("unsafe name {name:?}: {reason}")]
    UnsafeName {
        /// The name.
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// No data.
    #[error("nothing to put in the torrent (no files, or only empty ones)")]
    Empty,
    /// The result did not parse back (a bug, or two files with one path).
    #[error("built torrent does not check: {0}")]
    Check(#[from] MetainfoError),
}

/// The built torrent.
#[derive(Clone, Debug)]
pub struct Created {
    /// The `.torrent` file's bytes.
    pub bytes: Vec<u8>,
    /// Those bytes parsed back (info-hash included).
    pub metainfo: Metainfo,
}

/// Collects what goes into a `.torrent` and encodes it.
#[derive(Clone, Debug)]
pub struct TorrentBuilder {
    name: String,
    piece_length: u32,
    files: Vec<FileEntry>,
    single_file: bool,
    pieces: Vec<[u8; 20]>,
    trackers: Vec<Vec<String>>,
    private: bool,
    comment: Option<String>,
    created_by: Option<String>,
    creation_date: Option<i64>,
}

impl TorrentBuilder {
    /// A single-file torrent of `length` bytes named `name`.
    pub fn single_file(name: &str, length: u64, piece_length: u32) -> Self {
        let mut b = Self::multi_file(name, piece_length);
        b.single_file = true;
        b.files.push(FileEntry {
            path: vec![name.to_string()],
            length,
            ed2k: None,
        });
        b
    }

    /// A multi-file torrent in directory `name`; add files in data order
    /// with [`TorrentBuilder::add_file`].
    pub fn multi_file(name: &str, piece_length: u32) -> Self {
        Self {
            name: name.to_string(),
            piece_length,
            files: Vec::new(),
            single_file: false,
            pieces: Vec::new(),
            trackers: Vec::new(),
            private: false,
            comment: None,
            created_by: None,
            creation_date: None,
        }
    }

    /// Adds a file (path components under the torrent's directory).
    pub fn add_file(&mut self, path: Vec<String>, length: u64) -> &mut Self {
        self.files.push(FileEntry {
            path,
            length,
            ed2k: None,
        });
        self
    }

    /// Records each file's eD2k hash (BitComet's per-file `ed2k` key), in
    /// file order, so the torrent also finds eD2k sources. Extra entries
    /// are ignored.
    pub fn ed2k_hashes(&mut self, hashes: &[[u8; 16]]) -> &mut Self {
        for (f, h) in self.files.iter_mut().zip(hashes) {
            f.ed2k = Some(*h);
        }
        self
    }

    /// The piece hashes (from [`PieceHasher`], [`hash_pieces`] or elsewhere).
    pub fn pieces(&mut self, pieces: Vec<[u8; 20]>) -> &mut Self {
        self.pieces = pieces;
        self
    }

    /// Tracker URLs by tier (BEP 12). The first URL also goes in `announce`.
    pub fn trackers(&mut self, tiers: Vec<Vec<String>>) -> &mut Self {
        self.trackers = tiers.into_iter().filter(|t| !t.is_empty()).collect();
        self
    }

    /// BEP 27 private flag.
    pub fn private(&mut self, private: bool) -> &mut Self {
        self.private = private;
        self
    }

    /// A comment.
    pub fn comment(&mut self, comment: Option<String>) -> &mut Self {
        self.comment = comment;
        self
    }

    /// The creating program.
    pub fn created_by(&mut self, created_by: Option<String>) -> &mut Self {
        self.created_by = created_by;
        self
    }

    /// Creation time, seconds since the Unix epoch (the caller reads the
    /// clock; `None` leaves it out, making the output reproducible).
    pub fn creation_date(&mut self, date: Option<i64>) -> &mut Self {
        self.creation_date = date;
        self
    }

    /// Total payload length.
    pub fn total_length(&self) -> u64 {
        self.files.iter().map(|f| f.length).sum()
    }

    fn check_name(name: &str) -> Result<(), CreateError> {
        // The rules a downloader on this platform applies: a name it would
        // refuse (or rename) is refused here, so the torrent loads as made.
        match safepath::component(name, Platform::current()) {
            Ok(c) if c == name => Ok(()),
            Ok(_) => Err(CreateError::UnsafeName {
                name: name.to_string(),
                reason: "would be renamed by the safe-path rules",
            }),
            Err(e) => Err(CreateError::UnsafeName {
                name: name.to_string(),
                reason: e.reason,
            }),
        }
    }

    /// Encodes the torrent and parses it back as a check.
    pub fn build(&self) -> Result<Created, CreateError> {
        if self.piece_length == 0 || self.piece_length > MAX_PIECE_LENGTH {
            return Err(CreateError::BadPieceLength(self.piece_length));
        }
        Self::check_name(&self.name)?;
        for f in &self.files {
            for c in &f.path {
                Self::check_name(c)?;
            }
        }
        let total = self.total_length();
        if total == 0 {
            return Err(CreateError::Empty);
        }
        let expected = total.div_ceil(u64::from(self.piece_length));
        if expected != self.pieces.len() as u64 {
            return Err(CreateError::PieceCount {
                expected,
                found: self.pieces.len(),
                total,
                piece_length: self.piece_length,
            });
        }

        let mut info = OwnedValue::dict();
        info.insert("name", OwnedValue::bytes(&self.name))
            .insert(
                "piece length",
                OwnedValue::Int(i64::from(self.piece_length)),
            )
            .insert("pieces", OwnedValue::Bytes(self.pieces.concat()));
        if self.private {
            info.insert("private", OwnedValue::Int(1));
        }
        if self.single_file {
            info.insert("length", OwnedValue::Int(total as i64));
            if let Some(h) = self.files.first().and_then(|f| f.ed2k) {
                info.insert("ed2k", OwnedValue::Bytes(h.to_vec()));
            }
        } else {
            let files = self
                .files
                .iter()
                .map(|f| {
                    let mut d = OwnedValue::dict();
                    d.insert("length", OwnedValue::Int(f.length as i64)).insert(
                        "path",
                        OwnedValue::List(f.path.iter().map(OwnedValue::bytes).collect()),
                    );
                    if let Some(h) = f.ed2k {
                        d.insert("ed2k", OwnedValue::Bytes(h.to_vec()));
                    }
                    d
                })
                .collect();
            info.insert("files", OwnedValue::List(files));
        }

        let mut top = OwnedValue::dict();
        top.insert("info", info);
        if let Some(first) = self.trackers.first().and_then(|t| t.first()) {
            top.insert("announce", OwnedValue::bytes(first));
        }
        if self.trackers.iter().map(Vec::len).sum::<usize>() > 1 {
            let tiers = self
                .trackers
                .iter()
                .map(|t| OwnedValue::List(t.iter().map(OwnedValue::bytes).collect()))
                .collect();
            top.insert("announce-list", OwnedValue::List(tiers));
        }
        if let Some(c) = &self.comment {
            top.insert("comment", OwnedValue::bytes(c));
        }
        if let Some(c) = &self.created_by {
            top.insert("created by", OwnedValue::bytes(c));
        }
        if let Some(d) = self.creation_date {
            top.insert("creation date", OwnedValue::Int(d));
        }
        let bytes = top.to_vec();
        let metainfo = Metainfo::from_bytes(&bytes)?;
        Ok(Created { bytes, metainfo })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_piece_lengths() {
        assert_eq!(default_piece_length(0), 16 << 10);
        assert_eq!(default_piece_length(1), 16 << 10);
        assert_eq!(default_piece_length(32 << 20), 16 << 10);
        assert_eq!(default_piece_length((32 << 20) + 1), 32 << 10);
        assert_eq!(default_piece_length(1 << 30), 512 << 10);
        assert_eq!(default_piece_length(4 << 30), 2 << 20);
        assert_eq!(default_piece_length(1 << 50), 16 << 20);
        for t in [1u64, 1000, 1 << 20, 123_456_789, 1 << 30, 7 << 33] {
            let p = default_piece_length(t);
            assert!(p.is_power_of_two());
            assert!((16 << 10..=16 << 20).contains(&p));
        }
    }

    #[test]
    fn streaming_hasher_matches_whole_hash() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let want = hash_pieces(&data, 16384);
        assert_eq!(want.len(), 7);
        for chunk in [1usize, 100, 16384, 20_000, 100_000] {
            let mut h = PieceHasher::new(16384);
            for c in data.chunks(chunk) {
                h.feed(c);
            }
            assert_eq!(h.finish(), want, "{chunk}");
        }
        let mut exact = PieceHasher::new(10);
        exact.feed(&[0; 20]);
        assert_eq!(exact.finish().len(), 2);
    }

    #[test]
    fn builds_multi_file_and_parses_back() {
        let data = vec![5u8; 40_000];
        let mut b = TorrentBuilder::multi_file("top", 16384);
        b.add_file(vec!["a".into(), "b.txt".into()], 30_000)
            .add_file(vec!["empty".into()], 0)
            .add_file(vec!["c".into()], 10_000)
            .pieces(hash_pieces(&data, 16384))
            .trackers(vec![
                vec!["http://127.0.0.1:1/a".into()],
                vec![],
                vec!["udp://127.0.0.1:2".into()],
            ])
            .private(true)
            .comment(Some("c".into()))
            .created_by(Some("weir".into()));
        let c = b.build().unwrap();
        let m = &c.metainfo;
        assert_eq!(&*m.info.name, "top");
        assert!(m.info.private && !m.info.single_file);
        assert_eq!(m.info.files.len(), 3);
        assert_eq!(m.total_length(), 40_000);
        assert_eq!(m.announce.as_deref(), Some("http://127.0.0.1:1/a"));
        assert_eq!(m.announce_list.len(), 2);
        assert_eq!(m.creation_date, None);
        // Reproducible: same input, same bytes.
        assert_eq!(b.build().unwrap().bytes, c.bytes);
    }

    #[test]
    fn builds_single_file() {
        let data = vec![1u8; 16385];
        let mut b = TorrentBuilder::single_file("f.bin", 16385, 16384);
        b.pieces(hash_pieces(&data, 16384)).creation_date(Some(5));
        let c = b.build().unwrap();
        assert!(c.metainfo.info.single_file);
        assert_eq!(c.metainfo.info.files[0].path, ["f.bin"]);
        assert_eq!(c.metainfo.creation_date, Some(5));
        assert!(c.metainfo.announce.is_none());
        assert!(!String::from_utf8_lossy(&c.bytes).contains("announce"));
    }

    #[test]
    fn refuses_bad_input() {
        let mut b = TorrentBuilder::single_file("f", 10, 16384);
        assert!(matches!(
            b.build(),
            Err(CreateError::PieceCount {
                expected: 1,
                found: 0,
                ..
            })
        ));
        b.pieces(vec![[0; 20]]);
        assert!(b.build().is_ok());
        let mut z = TorrentBuilder::single_file("f", 10, 0);
        z.pieces(vec![[0; 20]]);
        assert!(matches!(z.build(), Err(CreateError::BadPieceLength(0))));
        let mut e = TorrentBuilder::multi_file("d", 16384);
        e.add_file(vec!["x".into()], 0);
        assert!(matches!(e.build(), Err(CreateError::Empty)));
        for bad in ["..", ".", "a/b", "a\\b", "nul\0", ""] {
            let mut u = TorrentBuilder::multi_file("d", 16384);
            u.add_file(vec![bad.into()], 1).pieces(vec![[0; 20]]);
            assert!(
                matches!(u.build(), Err(CreateError::UnsafeName { .. })),
                "{bad:?}"
            );
        }
        let mut dup = TorrentBuilder::multi_file("d", 16384);
        dup.add_file(vec!["x".into()], 1)
            .add_file(vec!["x".into()], 1)
            .pieces(vec![[0; 20]]);
        assert!(matches!(dup.build(), Err(CreateError::Check(_))));
    }
}

#[cfg(test)]
mod ed2k_tests {
    use super::*;

    #[test]
    fn per_file_ed2k_hashes_are_written_and_read_back() {
        let mut b = TorrentBuilder::multi_file("dir", 16_384);
        b.add_file(vec!["a".into()], 10_000)
            .add_file(vec!["b".into()], 30_000);
        let data = vec![7u8; 40_000];
        b.pieces(hash_pieces(&data, 16_384));
        let plain = b.build().unwrap();
        assert!(plain.metainfo.info.files.iter().all(|f| f.ed2k.is_none()));
        b.ed2k_hashes(&[[1; 16], [2; 16]]);
        let c = b.build().unwrap();
        let got: Vec<_> = c.metainfo.info.files.iter().map(|f| f.ed2k).collect();
        assert_eq!(got, [Some([1; 16]), Some([2; 16])]);
        // The hashes are part of the info dictionary: a different torrent.
        assert_ne!(c.metainfo.info_hash, plain.metainfo.info_hash);

        let mut s = TorrentBuilder::single_file("one", 40_000, 16_384);
        s.pieces(hash_pieces(&data, 16_384)).ed2k_hashes(&[[3; 16]]);
        let one = s.build().unwrap();
        assert_eq!(one.metainfo.info.files[0].ed2k, Some([3; 16]));
    }

    #[test]
    fn an_ed2k_key_of_the_wrong_length_is_ignored() {
        let pieces = hash_pieces(&[0u8; 100], 16_384);
        let mut info = OwnedValue::dict();
        info.insert("ed2k", OwnedValue::Bytes(vec![1; 15]))
            .insert("length", OwnedValue::Int(100))
            .insert("name", OwnedValue::bytes("x"))
            .insert("piece length", OwnedValue::Int(16_384))
            .insert("pieces", OwnedValue::Bytes(pieces.concat()));
        let mut top = OwnedValue::dict();
        top.insert("info", info);
        let m = Metainfo::from_bytes(&top.to_vec()).unwrap();
        assert_eq!(m.info.files[0].ed2k, None);
    }
}
