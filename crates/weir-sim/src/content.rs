//! What the simulated torrents carry, and their metainfo.
//!
//! Two kinds of payload:
//! - [`Payload::random`]: real seeded random bytes; leechers store what
//!   they receive and verify it with SHA-1 (the [`PieceVerifier`] of
//!   `weir-core`), so a test can compare the result byte for byte.
//! - [`Payload::synthetic`]: gigabytes without the memory or the hashing.
//!   Piece `p` is a window of one random pattern starting at
//!   `(p % 16) * 4 KiB`, so every block read is a zero-copy slice and
//!   misplaced data still differs; leechers compare each write with the
//!   expected bytes (memcmp) instead of hashing, and keep nothing.
//!
//! [`PieceVerifier`]: weir_core::storage::PieceVerifier

use std::sync::Arc;

use bytes::Bytes;
use sha1::{Digest as _, Sha1};
use weir_bt::metainfo::{FileEntry, Info, Metainfo};
use weir_bt::wire::BLOCK_LEN;
use weir_core::geometry::Geometry;

/// Distinct piece images of a synthetic payload.
const PERIOD: u32 = 16;
/// Offset between consecutive piece images in the pattern.
const STRIDE: usize = 4096;

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

    /// Pieces and blocks.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Whether the bytes are real (stored and SHA-1 verified by leechers).
    pub fn is_real(&self) -> bool {
        matches!(self.data, Data::Real(_))
    }

    /// `len` bytes at `begin` of `piece`, without copying.
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

    /// The whole payload as one buffer (only sensible for small ones).
    pub fn to_vec(&self) -> Vec<u8> {
        match &self.data {
            Data::Real(b) => b.to_vec(),
            Data::Pattern(_) => {
                let mut v = Vec::with_capacity(self.geo.total_len() as usize);
                for p in 0..self.geo.piece_count() {
                    v.extend_from_slice(&self.slice(p, 0, self.geo.piece_size(p)));
                }
                v
            }
        }
    }

    /// The SHA-1 of every piece.
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
    pub meta: Metainfo,
    /// The bytes.
    pub payload: Arc<Payload>,
}

impl TorrentSpec {
    /// A torrent named `name` over `payload`; the info-hash is derived from
    /// the name.
    pub fn new(name: &str, payload: Payload) -> Arc<Self> {
        let geo = *payload.geometry();
        let info_hash: [u8; 20] = Sha1::digest(name.as_bytes()).into();
        let meta = Metainfo {
            info_hash,
            info: Info {
                name: name.to_string(),
                piece_length: geo.piece_len(),
                pieces: payload.digests(),
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
            meta,
            payload: Arc::new(payload),
        })
    }

    /// Bytes in the torrent.
    pub fn len(&self) -> u64 {
        self.payload.geometry().total_len()
    }

    /// Whether the torrent is empty (never: payloads have at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
}
