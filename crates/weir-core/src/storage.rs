//! The storage contract between protocol cores and the storage layer.
//!
//! A core never touches a file. It emits [`StorageOp`]s and receives
//! [`StorageEvent`]s; the runtime executes the ops on worker threads against
//! real files (`weir-runtime`), the simulator against memory (`weir-sim`).
//!
//! Downloaded data is handed over **in order within each piece**: a core
//! buffers a block that arrives ahead of a gap until the gap is filled. That
//! lets the storage layer hash each piece as it writes it ([`PieceVerifier`])
//! and report the verdict when the last byte lands, without ever reading the
//! piece back. A piece that fails is simply downloaded again over the same
//! bytes; only pieces reported good are recorded as had.
//!
//! [`FileLayout`] maps a byte range of the transfer onto the files that hold
//! it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use md4::Md4;
use sha1::{Digest as _, Sha1};

use crate::geometry::Geometry;

/// A piece hash, in the algorithm its protocol uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Digest {
    /// BitTorrent v1 pieces.
    Sha1([u8; 20]),
    /// eD2k parts.
    Md4([u8; 16]),
}

impl Digest {
    /// Whether `data` hashes to this digest (in its algorithm).
    pub fn matches(&self, data: &[u8]) -> bool {
        let mut h = Hasher::for_digest(self);
        h.update(data);
        h.matches(self)
    }
}

/// The expected digest of every piece of a transfer, cheap to clone and
/// share between the session and the storage threads.
///
/// BitTorrent's SHA-1 pieces are a view of the torrent's own `pieces`
/// string ([`Digests::sha1_concat`]): a torrent of 2,000 pieces kept them
/// three times over (40 KB parsed, 42 KB as a list of digests, 40 KB in
/// the info dictionary), which made weir's daemon hold 2.3x
/// Transmission's memory per torrent. eD2k's few part digests stay a list.
#[derive(Clone)]
pub struct Digests(DigestsRepr);

#[derive(Clone)]
enum DigestsRepr {
    /// SHA-1 digests back to back (length a multiple of 20).
    Sha1(Bytes),
    /// Any digests, one by one.
    List(Arc<[Digest]>),
}

impl Digests {
    /// SHA-1 digests held back to back in `bytes` (as in a torrent's
    /// `pieces`); `None` when its length is not a multiple of 20.
    pub fn sha1_concat(bytes: Bytes) -> Option<Self> {
        (bytes.len() % 20 == 0).then_some(Self(DigestsRepr::Sha1(bytes)))
    }

    /// How many pieces have a digest.
    pub fn len(&self) -> usize {
        match &self.0 {
            DigestsRepr::Sha1(b) => b.len() / 20,
            DigestsRepr::List(l) => l.len(),
        }
    }

    /// No digest at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The digest of piece `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<Digest> {
        match &self.0 {
            DigestsRepr::Sha1(b) => {
                let at = i.checked_mul(20)?;
                let h: [u8; 20] = b.get(at..at.checked_add(20)?)?.try_into().ok()?;
                Some(Digest::Sha1(h))
            }
            DigestsRepr::List(l) => l.get(i).copied(),
        }
    }

    /// Every digest, in piece order.
    pub fn iter(&self) -> impl Iterator<Item = Digest> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Every digest, in piece order, as a list.
    pub fn to_vec(&self) -> Vec<Digest> {
        self.iter().collect()
    }
}

/// Equal when they hold the same digests, however they are held.
impl PartialEq for Digests {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Digests {}

impl From<Vec<Digest>> for Digests {
    fn from(v: Vec<Digest>) -> Self {
        Self(DigestsRepr::List(v.into()))
    }
}

impl FromIterator<Digest> for Digests {
    fn from_iter<I: IntoIterator<Item = Digest>>(iter: I) -> Self {
        Self(DigestsRepr::List(iter.into_iter().collect()))
    }
}

impl std::fmt::Debug for Digests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// An operation a protocol core asks the storage layer to perform.
#[derive(Clone, Debug)]
pub enum StorageOp {
    /// Write `data` (contiguous) at offset `begin` of `piece`. For each
    /// piece, writes come in order starting at 0 with no gaps; when the last
    /// byte of the piece is written the storage layer answers
    /// [`StorageEvent::PieceDone`].
    Write {
        /// Piece index.
        piece: u32,
        /// Offset inside the piece; equals the bytes already handed over.
        begin: u32,
        /// The bytes, as shared slices of the receive buffers.
        data: Vec<Bytes>,
    },
    /// Forget what was handed over of `piece` so far (it will be started
    /// again from offset 0).
    Abandon {
        /// Piece index.
        piece: u32,
    },
    /// Read `len` bytes at `begin` of `piece` for an upload; answered by
    /// [`StorageEvent::ReadDone`] with the same `id`.
    Read {
        /// The caller's token.
        id: u64,
        /// Piece index.
        piece: u32,
        /// Offset inside the piece.
        begin: u32,
        /// Bytes to read.
        len: u32,
    },
    /// Hash `piece` from what is stored (resume and seeding checks);
    /// answered by [`StorageEvent::PieceDone`].
    Check {
        /// Piece index.
        piece: u32,
    },
}

/// The storage layer's answer to a [`StorageOp`].
#[derive(Clone, Debug)]
pub enum StorageEvent {
    /// A piece was completely written (or checked): whether its hash matched.
    PieceDone {
        /// Piece index.
        piece: u32,
        /// The digest matched the expected one.
        ok: bool,
    },
    /// An upload read finished.
    ReadDone {
        /// The caller's token.
        id: u64,
        /// The bytes, or what went wrong.
        data: Result<Bytes, String>,
    },
    /// An upload read failed (an I/O error, or a file shorter than it
    /// should be): nothing is sent for request `id`, and the pieces in
    /// `lost` (the read's own, and any others the same fault destroyed)
    /// are no longer had and must not be offered.
    ReadFailed {
        /// The read's token.
        id: u64,
        /// Pieces whose stored data is gone.
        lost: Vec<u32>,
        /// What went wrong.
        fault: StorageFault,
    },
    /// A write failed: the transfer cannot continue (permissions, an I/O
    /// error; a full disk only pauses writing).
    Failed {
        /// What went wrong, naming the file.
        error: String,
    },
}

/// Why stored data could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageFault {
    /// The system call failed (EIO, a file removed, ...).
    #[error("{path}: {message}")]
    Io {
        /// The file, relative to the transfer's directory.
        path: PathBuf,
        /// The error number, when the system gave one.
        errno: Option<i32>,
        /// The system's message.
        message: String,
    },
    /// The file is shorter than the transfer says (truncated under weir).
    #[error("{path} is {len} bytes, shorter than the {want} it must hold")]
    Truncated {
        /// The file, relative to the transfer's directory.
        path: PathBuf,
        /// Its length now.
        len: u64,
        /// The length it must have.
        want: u64,
    },
}

/// One file of a transfer and where it sits in the transfer's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpan {
    /// Path relative to the transfer's root directory, already checked by
    /// [`crate::safepath`].
    pub path: PathBuf,
    /// Offset of the file's first byte in the transfer.
    pub offset: u64,
    /// File length.
    pub length: u64,
}

/// The files of a transfer, back to back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileLayout {
    files: Vec<FileSpan>,
    total: u64,
}

impl FileLayout {
    /// Lays out `files` (relative path, length) in order.
    pub fn new(files: impl IntoIterator<Item = (PathBuf, u64)>) -> Self {
        let mut offset = 0;
        let files = files
            .into_iter()
            .map(|(path, length)| {
                let f = FileSpan {
                    path,
                    offset,
                    length,
                };
                offset += length;
                f
            })
            .collect();
        Self {
            files,
            total: offset,
        }
    }

    /// The files.
    pub fn files(&self) -> &[FileSpan] {
        &self.files
    }

    /// Total bytes.
    pub fn total_len(&self) -> u64 {
        self.total
    }

    /// The pieces (of a geometry) that overlap file `index`.
    pub fn pieces_of_file(&self, index: usize, geo: &Geometry) -> std::ops::Range<u32> {
        let f = &self.files[index];
        if f.length == 0 || geo.piece_len() == 0 {
            return 0..0;
        }
        let pl = u64::from(geo.piece_len());
        let first = (f.offset / pl) as u32;
        let last = ((f.offset + f.length - 1) / pl) as u32;
        first..last + 1
    }

    /// Splits `offset..offset+len` of the transfer into
    /// `(file index, offset in file, length)` runs, skipping empty files.
    pub fn map(&self, offset: u64, len: u64) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        let end = offset.saturating_add(len).min(self.total);
        // First file whose end is past `offset`.
        let start = self
            .files
            .partition_point(|f| f.offset + f.length <= offset);
        self.files[start..]
            .iter()
            .enumerate()
            .map(move |(i, f)| (start + i, f))
            .take_while(move |(_, f)| f.offset < end)
            .filter(|(_, f)| f.length > 0)
            .map(move |(i, f)| {
                let from = offset.max(f.offset);
                let to = end.min(f.offset + f.length);
                (i, from - f.offset, to - from)
            })
    }
}

/// A write that broke the in-order contract.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("piece {piece}: write at {begin} but {expected} bytes were handed over so far")]
pub struct OutOfOrder {
    /// Piece index.
    pub piece: u32,
    /// Offset of the rejected write.
    pub begin: u32,
    /// Where the next write had to start.
    pub expected: u32,
}

/// How a piece's hash stands while its bytes come in.
struct Running {
    hasher: Hasher,
    next: u32,
    /// The start of the piece could not be read back: it cannot verify.
    poisoned: bool,
}

/// A piece's hash computed as its bytes come, in the algorithm of the
/// digest it will be compared with (a recheck streams each piece through
/// one in small reads that stay in the CPU's cache).
pub enum Hasher {
    /// BitTorrent v1.
    Sha1(Sha1),
    /// eD2k.
    Md4(Md4),
}

impl Hasher {
    /// A hasher for comparing with `d`.
    pub fn for_digest(d: &Digest) -> Self {
        match d {
            Digest::Sha1(_) => Hasher::Sha1(Sha1::new()),
            Digest::Md4(_) => Hasher::Md4(Md4::new()),
        }
    }

    /// Hashes the next bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha1(h) => h.update(data),
            Hasher::Md4(h) => h.update(data),
        }
    }

    /// Whether everything hashed matches `want` (false across algorithms).
    pub fn matches(self, want: &Digest) -> bool {
        match (self, want) {
            (Hasher::Sha1(h), Digest::Sha1(w)) => h.finalize().as_slice() == w,
            (Hasher::Md4(h), Digest::Md4(w)) => h.finalize().as_slice() == w,
            _ => false,
        }
    }
}

/// Hashes each piece as its bytes are written, in order, and says whether
/// it matched when the last byte arrives. One verifier holds the state of
/// the pieces routed to it; a runtime with several workers gives each its
/// own and routes every piece to one worker.
pub struct PieceVerifier {
    geo: Geometry,
    expected: Digests,
    running: HashMap<u32, Running>,
}

impl std::fmt::Debug for PieceVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceVerifier")
            .field("pieces_in_progress", &self.running.len())
            .finish()
    }
}

impl PieceVerifier {
    /// A verifier for `geo` whose piece `i` must hash to `expected[i]`.
    pub fn new(geo: Geometry, expected: Digests) -> Self {
        Self {
            geo,
            expected,
            running: HashMap::new(),
        }
    }

    /// Feeds the next bytes of `piece` starting at `begin`. Returns
    /// `Ok(Some(ok))` when the piece is complete, `Ok(None)` while it is not.
    pub fn write(
        &mut self,
        piece: u32,
        begin: u32,
        data: &[Bytes],
    ) -> Result<Option<bool>, OutOfOrder> {
        let want = self.expected.get(piece as usize);
        let r = self.running.entry(piece).or_insert_with(|| Running {
            hasher: want
                .as_ref()
                .map_or(Hasher::Sha1(Sha1::new()), Hasher::for_digest),
            next: 0,
            poisoned: false,
        });
        if begin != r.next {
            let expected = r.next;
            if expected == 0 {
                self.running.remove(&piece);
            }
            return Err(OutOfOrder {
                piece,
                begin,
                expected,
            });
        }
        for d in data {
            r.hasher.update(d);
            r.next += d.len() as u32;
        }
        if r.next < self.geo.piece_size(piece) {
            return Ok(None);
        }
        let r = self.running.remove(&piece).expect("entry exists");
        let ok = r.next == self.geo.piece_size(piece)
            && !r.poisoned
            && want.is_some_and(|w| r.hasher.matches(&w));
        Ok(Some(ok))
    }

    /// Starts `piece` from bytes already stored (a partly written piece of
    /// an earlier run): `prefix` is fed as if written, and the next write
    /// continues at its end. `None` means the prefix of `len` bytes could
    /// not be read: the writes continue there but the piece fails.
    pub fn resume(&mut self, piece: u32, prefix: Option<&[u8]>, len: u32) {
        let want = self.expected.get(piece as usize);
        let mut hasher = want
            .as_ref()
            .map_or(Hasher::Sha1(Sha1::new()), Hasher::for_digest);
        if let Some(p) = prefix {
            hasher.update(p);
        }
        self.running.insert(
            piece,
            Running {
                hasher,
                next: len,
                poisoned: prefix.is_none_or(|p| p.len() != len as usize),
            },
        );
    }

    /// Drops the running hash of `piece`.
    pub fn abandon(&mut self, piece: u32) {
        self.running.remove(&piece);
    }

    /// Hashes a whole piece read back from storage.
    pub fn check(&self, piece: u32, data: &[u8]) -> bool {
        let Some(want) = self.expected.get(piece as usize) else {
            return false;
        };
        if data.len() != self.geo.piece_size(piece) as usize {
            return false;
        }
        let mut h = Hasher::for_digest(&want);
        h.update(data);
        h.matches(&want)
    }

    /// The geometry verified.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_held_back_to_back_read_as_a_list() {
        assert!(Digests::sha1_concat(Bytes::from(vec![0u8; 39])).is_none());
        let raw: Vec<u8> = (0..60).collect();
        let d = Digests::sha1_concat(Bytes::from(raw.clone())).unwrap();
        let list: Vec<Digest> = raw
            .chunks(20)
            .map(|c| Digest::Sha1(c.try_into().unwrap()))
            .collect();
        assert_eq!(d.len(), 3);
        assert_eq!(d.to_vec(), list);
        assert_eq!(d, Digests::from(list.clone()));
        assert_ne!(d, Digests::from(list[..2].to_vec()));
        assert_eq!(d.get(3), None);
        assert_eq!(d.get(usize::MAX / 10), None);
        assert!(Digests::sha1_concat(Bytes::new()).unwrap().is_empty());
    }

    #[test]
    fn layout_maps_ranges_across_files() {
        let l = FileLayout::new([
            (PathBuf::from("a"), 10),
            (PathBuf::from("empty"), 0),
            (PathBuf::from("b"), 5),
            (PathBuf::from("c"), 20),
        ]);
        assert_eq!(l.total_len(), 35);
        let runs: Vec<_> = l.map(8, 10).collect();
        assert_eq!(runs, [(0, 8, 2), (2, 0, 5), (3, 0, 3)]);
        assert_eq!(l.map(34, 10).collect::<Vec<_>>(), [(3, 19, 1)]);
        assert_eq!(l.map(35, 10).count(), 0);
        let g = Geometry::new(35, 16, 16).unwrap();
        assert_eq!(l.pieces_of_file(3, &g), 0..3);
        assert_eq!(l.pieces_of_file(1, &g), 0..0);
    }

    #[test]
    fn verifier_hashes_in_order_and_reports_once() {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
        let geo = Geometry::new(data.len() as u64, 32_768, 16_384).unwrap();
        let digests: Vec<Digest> = data
            .chunks(32_768)
            .map(|c| Digest::Sha1(Sha1::digest(c).into()))
            .collect();
        let mut v = PieceVerifier::new(geo, digests.into());
        let b = Bytes::from(data.clone());
        assert_eq!(v.write(0, 0, &[b.slice(0..16_384)]), Ok(None));
        assert!(v.write(0, 0, &[b.slice(0..16_384)]).is_err());
        assert_eq!(
            v.write(0, 16_384, &[b.slice(16_384..32_768)]),
            Ok(Some(true))
        );
        // Last, short piece; corrupted.
        let mut bad = data[32_768..].to_vec();
        bad[3] ^= 1;
        assert_eq!(v.write(1, 0, &[Bytes::from(bad)]), Ok(Some(false)));
        assert!(v.check(1, &data[32_768..]));
        assert!(!v.check(1, &data[32_767..]));
    }

    #[test]
    fn a_resumed_piece_verifies_only_with_its_true_prefix() {
        let data: Vec<u8> = (0..32_768u32).map(|i| (i * 13) as u8).collect();
        let geo = Geometry::new(data.len() as u64, 32_768, 16_384).unwrap();
        let digests: Vec<Digest> = vec![Digest::Sha1(Sha1::digest(&data).into())];
        let mut v = PieceVerifier::new(geo, digests.into());
        let rest = Bytes::copy_from_slice(&data[16_384..]);
        v.resume(0, Some(&data[..16_384]), 16_384);
        assert_eq!(
            v.write(0, 16_384, std::slice::from_ref(&rest)),
            Ok(Some(true))
        );
        let mut bad = data[..16_384].to_vec();
        bad[5] ^= 1;
        v.resume(0, Some(&bad), 16_384);
        assert_eq!(
            v.write(0, 16_384, std::slice::from_ref(&rest)),
            Ok(Some(false))
        );
        // An unreadable prefix: the writes go on, the piece fails.
        v.resume(0, None, 16_384);
        assert_eq!(v.write(0, 16_384, &[rest]), Ok(Some(false)));
    }

    #[test]
    fn md4_parts() {
        let geo = Geometry::new(3, 9_728_000, 184_320).unwrap();
        let want = Digest::Md4(Md4::digest(b"abc").into());
        let mut v = PieceVerifier::new(geo, vec![want].into());
        assert_eq!(v.write(0, 0, &[Bytes::from_static(b"abc")]), Ok(Some(true)));
    }
}
