//! What the simulated transfers carry: payloads, torrents and eD2k files.
//!
//! Two kinds of payload:
//! - [`Payload::random`]: real seeded random bytes; leechers store what
//!   they receive and verify it with the real digests (SHA-1 pieces, MD4
//!   parts) through the [`PieceVerifier`] of `weir-core`, so a test can
//!   compare the result byte for byte.
//! - [`Payload::synthetic`]: gigabytes without the memory or the hashing.
//!   Piece `p` (of the payload's own piece length) is a window of one
//!   random pattern starting at `(p % 16) * 4 KiB`, so every block read
//!   inside a piece is a zero-copy slice and misplaced data still differs;
//!   leechers compare each write with the expected bytes (memcmp) instead
//!   of hashing, and keep nothing.
//!
//! A payload is addressed by byte offset ([`Payload::range`]), so the same
//! bytes can be served in any grid: a torrent's pieces, eD2k parts, both.
//! Reads inside one piece of the payload's own length are zero-copy; reads
//! across its pieces are copied (give an eD2k-only payload eD2k's part
//! size, [`ED2K_PART`], to keep its 180 KiB blocks zero-copy).
//!
//! [`PieceVerifier`]: weir_core::storage::PieceVerifier

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use sha1::{Digest as _, Sha1};
use weir_bt::metainfo::{FileEntry, Info, Metainfo};
use weir_bt::wire::BLOCK_LEN;
use weir_core::geometry::Geometry;
use weir_ed2k::Md4Hash;
use weir_ed2k::hash::{Ed2kHasher, FileHashes, file_hash_from_hashset, md4};
use weir_ed2k::link::{FileLink, LinkSource, SourceHost};

/// Distinct piece images of a synthetic payload.
const PERIOD: u32 = 16;
/// Offset between consecutive piece images in the pattern.
const STRIDE: usize = 4096;

/// eD2k's part size (9,728,000 bytes), as a payload piece length.
pub const ED2K_PART: u32 = weir_ed2k::PARTSIZE as u32;

#[derive(Debug)]
enum Data {
    Real(Bytes),
    Pattern(Bytes),
}

/// The bytes of a transfer.
#[derive(Debug)]
pub struct Payload {
    geo: Geometry,
    data: Data,
}

impl Payload {
    /// `len` seeded random bytes in `piece_len`-byte pieces.
    pub fn random(len: u64, piece_len: u32, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut v = vec![0u8; usize::try_from(len).expect("payload fits in memory")];
        rng.fill(&mut v);
        Self {
            geo: geometry(len, piece_len),
            data: Data::Real(Bytes::from(v)),
        }
    }

    /// `len` bytes of a synthetic payload (see the module docs).
    pub fn synthetic(len: u64, piece_len: u32, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut v = vec![0u8; piece_len as usize + (PERIOD as usize - 1) * STRIDE];
        rng.fill(&mut v);
        Self {
            geo: geometry(len, piece_len),
            data: Data::Pattern(Bytes::from(v)),
        }
    }

    /// Its own pieces (the torrent's, for a [`TorrentSpec`]) and 16 KiB
    /// blocks.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Bytes in it.
    pub fn len(&self) -> u64 {
        self.geo.total_len()
    }

    /// Whether it is empty (never: payloads have at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes are real (stored and hash-verified by leechers).
    pub fn is_real(&self) -> bool {
        matches!(self.data, Data::Real(_))
    }

    /// `len` bytes at `begin` of its own piece `piece`, without copying.
    pub fn slice(&self, piece: u32, begin: u32, len: u32) -> Bytes {
        let (begin, len) = (begin as usize, len as usize);
        match &self.data {
            Data::Real(b) => {
                let at = self.geo.piece_offset(piece) as usize + begin;
                b.slice(at..at + len)
            }
            Data::Pattern(p) => {
                let at = (piece % PERIOD) as usize * STRIDE + begin;
                p.slice(at..at + len)
            }
        }
    }

    /// Splits `offset..offset + len` into runs inside its own pieces:
    /// (piece, begin, len).
    fn runs(&self, offset: u64, len: usize) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        let pl = u64::from(self.geo.piece_len());
        let end = offset + len as u64;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let piece = (at / pl) as u32;
            let begin = at % pl;
            let n = (pl - begin).min(end - at);
            at += n;
            Some((piece, begin as u32, n as u32))
        })
    }

    /// `len` bytes at byte `offset` (zero-copy inside one of its pieces).
    /// Panics past the end: callers check ranges first.
    pub fn range(&self, offset: u64, len: usize) -> Bytes {
        assert!(
            offset + len as u64 <= self.len(),
            "range {offset}+{len} past the payload's {} bytes",
            self.len()
        );
        if let Data::Real(b) = &self.data {
            return b.slice(offset as usize..offset as usize + len);
        }
        let mut runs = self.runs(offset, len);
        let Some(first) = runs.next() else {
            return Bytes::new();
        };
        let head = self.slice(first.0, first.1, first.2);
        let mut rest = runs.peekable();
        if rest.peek().is_none() {
            return head;
        }
        let mut out = BytesMut::with_capacity(len);
        out.extend_from_slice(&head);
        for (p, b, n) in rest {
            out.extend_from_slice(&self.slice(p, b, n));
        }
        out.freeze()
    }

    /// Whether `data` equals the payload's bytes at `offset` (no copy).
    pub fn matches(&self, offset: u64, data: &[u8]) -> bool {
        if offset + data.len() as u64 > self.len() {
            return false;
        }
        let mut at = 0usize;
        for (p, b, n) in self.runs(offset, data.len()) {
            let n = n as usize;
            if data[at..at + n] != self.slice(p, b, n as u32)[..] {
                return false;
            }
            at += n;
        }
        true
    }

    /// The whole payload as one buffer (only sensible for small ones).
    pub fn to_vec(&self) -> Vec<u8> {
        match &self.data {
            Data::Real(b) => b.to_vec(),
            Data::Pattern(_) => self.range(0, self.len() as usize).to_vec(),
        }
    }

    /// The SHA-1 of every one of its own pieces.
    fn digests(&self) -> Vec<[u8; 20]> {
        let n = self.geo.piece_count();
        let mut out: Vec<[u8; 20]> = Vec::with_capacity(n as usize);
        for p in 0..n {
            let size = self.geo.piece_size(p);
            let reuse = matches!(self.data, Data::Pattern(_))
                && p >= PERIOD
                && size == self.geo.piece_len();
            if reuse {
                out.push(out[(p % PERIOD) as usize]);
            } else {
                out.push(Sha1::digest(self.slice(p, 0, size)).into());
            }
        }
        out
    }
}

fn geometry(len: u64, piece_len: u32) -> Geometry {
    assert!(len > 0, "an empty payload has no pieces to transfer");
    Geometry::new(len, piece_len, BLOCK_LEN).expect("a valid piece length")
}

/// A torrent: its metainfo and its bytes, shared by every node carrying it.
#[derive(Debug)]
pub struct TorrentSpec {
    /// The metainfo (single file, named after the torrent).
    pub meta: Arc<Metainfo>,
    /// The bytes.
    pub payload: Arc<Payload>,
}

impl TorrentSpec {
    /// A torrent named `name` over `payload` (its pieces are the payload's
    /// own); the info-hash is derived from the name.
    pub fn new(name: &str, payload: Payload) -> Arc<Self> {
        let geo = *payload.geometry();
        let info_hash: [u8; 20] = Sha1::digest(name.as_bytes()).into();
        let meta = Metainfo {
            info_bytes: None,
            info_hash,
            info: Info {
                name: name.into(),
                piece_length: geo.piece_len(),
                pieces: payload.digests().into(),
                files: vec![FileEntry {
                    path: vec![name.to_string()],
                    length: geo.total_len(),
                    ed2k: None,
                }],
                private: false,
                single_file: true,
            },
            announce: None,
            announce_list: Vec::new(),
            comment: None,
            created_by: None,
            creation_date: None,
        };
        Arc::new(Self {
            meta: Arc::new(meta),
            payload: Arc::new(payload),
        })
    }

    /// The info-hash.
    pub fn info_hash(&self) -> [u8; 20] {
        self.meta.info_hash
    }

    /// Bytes in the torrent.
    pub fn len(&self) -> u64 {
        self.payload.len()
    }

    /// Whether the torrent is empty (never: payloads have at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An eD2k file: its hashes, its link and its bytes, shared by every node
/// carrying it.
///
/// A real payload gets its real hashes (MD4 parts, file hash, AICH tree),
/// and leechers verify every part with MD4. A synthetic one gets
/// consistent stand-ins: each part's hash is the MD4 of the file name and
/// the part index, and the file hash is, as eD2k requires, the MD4 of
/// that hashset (a file below one part, which has no hashset, gets the
/// real MD4 of its bytes); leechers of a synthetic payload compare bytes
/// instead of hashing, so the stand-ins are never checked against data.
#[derive(Debug)]
pub struct Ed2kSpec {
    /// The file name.
    pub name: String,
    /// Its hashes, as `weir hash --ed2k` computes them.
    pub hashes: FileHashes,
    /// The bytes.
    pub payload: Arc<Payload>,
}

impl Ed2kSpec {
    /// An eD2k file named `name` over `payload`.
    pub fn new(name: &str, payload: Payload) -> Arc<Self> {
        let hashes = if payload.is_real() {
            let mut h = Ed2kHasher::new();
            h.update(&payload.to_vec());
            h.finish()
        } else {
            fake_hashes(name, &payload)
        };
        Arc::new(Self {
            name: name.to_string(),
            hashes,
            payload: Arc::new(payload),
        })
    }

    /// The file hash.
    pub fn hash(&self) -> Md4Hash {
        self.hashes.file_hash
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.payload.len()
    }

    /// Whether the file is empty (never: payloads have at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file's `ed2k://` link naming `sources` (IPv4 addresses only, as
    /// eD2k links carry): name, size, hash and the AICH root when known;
    /// no part hashes, so a downloader asks a source for the hashset.
    pub fn link(&self, sources: &[SocketAddr]) -> FileLink {
        FileLink {
            name: self.name.clone(),
            size: self.len(),
            hash: self.hashes.file_hash,
            aich: self.hashes.aich.as_ref().map(|t| t.root()),
            part_hashes: None,
            sources: sources
                .iter()
                .filter_map(|a| match a {
                    SocketAddr::V4(v4) => Some(LinkSource {
                        host: SourceHost::Ip(*v4.ip()),
                        port: v4.port(),
                        crypt_options: 0,
                        user_hash: None,
                    }),
                    SocketAddr::V6(_) => None,
                })
                .collect(),
        }
    }
}

fn fake_hashes(name: &str, payload: &Payload) -> FileHashes {
    let size = payload.len();
    if size < weir_ed2k::PARTSIZE {
        return FileHashes {
            size,
            file_hash: md4(&payload.to_vec()),
            hashset: Vec::new(),
            aich: None,
        };
    }
    let mut hashset: Vec<Md4Hash> = (0..weir_ed2k::part_count(size))
        .map(|i| {
            let mut seed = format!("weir-sim {name} part ").into_bytes();
            seed.extend_from_slice(&i.to_le_bytes());
            md4(&seed)
        })
        .collect();
    if size % weir_ed2k::PARTSIZE == 0 {
        hashset.push(Md4Hash::EMPTY);
    }
    FileHashes {
        size,
        file_hash: file_hash_from_hashset(&hashset),
        hashset,
        aich: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_pieces_differ_by_offset_and_hash_right() {
        let p = Payload::synthetic(40 * 65_536 + 1000, 65_536, 3);
        assert_ne!(p.slice(0, 0, 100), p.slice(1, 0, 100));
        assert_eq!(p.slice(0, 0, 100), p.slice(16, 0, 100));
        assert_ne!(p.slice(0, 0, 100), p.slice(0, 16_384, 100));
        let spec = TorrentSpec::new("t", p);
        let all = spec.payload.to_vec();
        assert_eq!(all.len() as u64, spec.len());
        for (i, h) in spec.meta.info.pieces.iter().enumerate() {
            let at = i * 65_536;
            let end = (at + 65_536).min(all.len());
            let want: [u8; 20] = Sha1::digest(&all[at..end]).into();
            assert_eq!(*h, want, "piece {i}");
        }
    }

    #[test]
    fn ranges_across_pieces_are_the_same_bytes() {
        for p in [
            Payload::synthetic(10 * 4096 + 7, 4096, 4),
            Payload::random(10 * 4096 + 7, 4096, 4),
        ] {
            let all = p.to_vec();
            for (off, len) in [
                (0, 10),
                (4000, 200),
                (4096, 4096),
                (100, 9 * 4096),
                (40_960, 7),
            ] {
                let r = p.range(off, len);
                assert_eq!(
                    &r[..],
                    &all[off as usize..off as usize + len],
                    "{off}+{len}"
                );
                assert!(p.matches(off, &r));
                let mut bad = r.to_vec();
                bad[len / 2] ^= 1;
                assert!(!p.matches(off, &bad), "{off}+{len}");
            }
            assert!(!p.matches(all.len() as u64 - 1, &[0, 0]), "past the end");
        }
    }

    #[test]
    fn ed2k_stand_in_hashes_follow_the_file_hash_rule() {
        let big = Ed2kSpec::new(
            "big",
            Payload::synthetic(2 * weir_ed2k::PARTSIZE, ED2K_PART, 1),
        );
        // An exact multiple: two data parts and the empty one.
        assert_eq!(big.hashes.hashset.len(), 3);
        assert_eq!(big.hashes.hashset[2], Md4Hash::EMPTY);
        assert_eq!(big.hash(), file_hash_from_hashset(&big.hashes.hashset));
        assert_eq!(big.hashes.part_digests().len(), 2);
        let small = Ed2kSpec::new("small", Payload::synthetic(100_000, ED2K_PART, 1));
        assert_eq!(small.hash(), md4(&small.payload.to_vec()));
        // Real payloads get real hashes.
        let real = Ed2kSpec::new("real", Payload::random(weir_ed2k::PARTSIZE + 5, 1 << 20, 2));
        let mut h = Ed2kHasher::new();
        h.update(&real.payload.to_vec());
        assert_eq!(real.hashes, h.finish());
        let link = real.link(&["10.0.0.1:4662".parse().unwrap()]);
        assert_eq!(
            (link.size, link.hash, link.sources.len()),
            (real.len(), real.hash(), 1)
        );
        assert!(link.aich.is_some());
    }
}
