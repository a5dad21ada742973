//! In-memory storage that executes a session's [`StorageOp`]s, and the
//! disk model of a node (a serial queue with a per-operation delay and a
//! transfer rate).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use weir_core::geometry::Geometry;
use weir_core::storage::{Digests, PieceVerifier, StorageEvent, StorageOp};

use crate::content::Payload;

/// How long storage takes. Operations run one at a time, in order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Disk {
    /// Fixed cost of every operation (seek, syscall, queueing).
    pub per_op: Duration,
    /// Bytes per second moved; 0 means infinitely fast.
    pub rate: u64,
}

impl Disk {
    /// A disk that costs nothing: every operation completes at once (after
    /// the input that caused it has been handled, as a worker thread would
    /// answer).
    pub const INSTANT: Disk = Disk {
        per_op: Duration::ZERO,
        rate: 0,
    };

    /// How long an operation moving `bytes` takes.
    pub(crate) fn cost(&self, bytes: u64) -> Duration {
        let t = if self.rate == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(bytes as f64 / self.rate as f64)
        };
        self.per_op + t
    }
}

enum Verify {
    /// Hash as the bytes are written (the runtime's verifier: SHA-1 pieces,
    /// MD4 parts).
    Hash(PieceVerifier),
    /// Compare every write with the payload: (next offset, all equal).
    Compare(BTreeMap<u32, (u32, bool)>),
}

/// One transfer's storage on one node: its bytes addressed in the
/// transfer's grid (a torrent's pieces, eD2k parts), whatever the
/// payload's own piece length. Timing (the disk model) is the node's: one
/// disk serves every transfer of a node.
pub(crate) struct MemStorage {
    payload: Arc<Payload>,
    geo: Geometry,
    /// A leecher of a real payload keeps what it receives here.
    store: Option<Vec<u8>>,
    verify: Verify,
    /// Flip the first byte of every upload read (a lying peer).
    pub(crate) corrupt_uploads: bool,
}

impl std::fmt::Debug for MemStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStorage")
            .field("geometry", &self.geo)
            .field("stored", &self.store.as_ref().map(Vec::len))
            .finish()
    }
}

impl MemStorage {
    /// Storage for `payload` in grid `geo` whose pieces hash to `digests`;
    /// a seeder serves the payload itself.
    pub(crate) fn new(
        payload: Arc<Payload>,
        geo: Geometry,
        digests: Digests,
        seeder: bool,
    ) -> Self {
        assert_eq!(
            geo.total_len(),
            payload.len(),
            "a transfer's grid covers its payload"
        );
        let (store, verify) = if payload.is_real() {
            (
                (!seeder).then(|| vec![0u8; geo.total_len() as usize]),
                Verify::Hash(PieceVerifier::new(geo, digests)),
            )
        } else {
            (None, Verify::Compare(BTreeMap::new()))
        };
        Self {
            payload,
            geo,
            store,
            verify,
            corrupt_uploads: false,
        }
    }

    /// The bytes a leecher stored (`None` for seeders and synthetic
    /// payloads).
    pub(crate) fn stored(&self) -> Option<&[u8]> {
        self.store.as_deref()
    }

    /// Executes `op`; returns the bytes it moved (what the disk model
    /// charges) and its answer.
    pub(crate) fn execute(&mut self, op: StorageOp) -> (u64, Option<StorageEvent>) {
        let geo = self.geo;
        match op {
            StorageOp::Write { piece, begin, data } => {
                let len: usize = data.iter().map(Bytes::len).sum();
                (len as u64, self.write(piece, begin, &data))
            }
            StorageOp::Abandon { piece } => {
                match &mut self.verify {
                    Verify::Hash(v) => v.abandon(piece),
                    Verify::Compare(m) => {
                        m.remove(&piece);
                    }
                }
                (0, None)
            }
            StorageOp::Read {
                id,
                piece,
                begin,
                len,
            } => {
                // By byte offset, as the runtime reads (an eD2k read may
                // run across parts).
                let offset = geo.piece_offset(piece) + u64::from(begin);
                let data =
                    if piece < geo.piece_count() && offset + u64::from(len) <= geo.total_len() {
                        Ok(self.read(offset, len as usize))
                    } else {
                        Err(format!("read {piece}:{begin}+{len} outside the transfer"))
                    };
                (u64::from(len), Some(StorageEvent::ReadDone { id, data }))
            }
            StorageOp::Check { piece } => {
                let size = geo.piece_size(piece);
                let ok = match (&self.store, &self.verify) {
                    (Some(s), Verify::Hash(v)) => {
                        let at = geo.piece_offset(piece) as usize;
                        v.check(piece, &s[at..at + size as usize])
                    }
                    _ => false,
                };
                (u64::from(size), Some(StorageEvent::PieceDone { piece, ok }))
            }
        }
    }

    /// The stored bytes at `offset` (as a check reads them back: never
    /// corrupted on purpose), or `None` past the end.
    pub(crate) fn read_range(&self, offset: u64, len: usize) -> Option<Bytes> {
        let end = offset.checked_add(len as u64)?;
        match &self.store {
            Some(s) => s
                .get(offset as usize..end as usize)
                .map(Bytes::copy_from_slice),
            None => (end <= self.payload.len()).then(|| self.payload.range(offset, len)),
        }
    }

    fn read(&self, offset: u64, len: usize) -> Bytes {
        let data = match &self.store {
            Some(s) => Bytes::copy_from_slice(&s[offset as usize..offset as usize + len]),
            None => self.payload.range(offset, len),
        };
        if self.corrupt_uploads && !data.is_empty() {
            let mut m = BytesMut::from(&data[..]);
            m[0] ^= 0x55;
            return m.freeze();
        }
        data
    }

    fn write(&mut self, piece: u32, begin: u32, data: &[Bytes]) -> Option<StorageEvent> {
        let geo = self.geo;
        if piece >= geo.piece_count() {
            return Some(StorageEvent::Failed {
                error: format!("write to piece {piece} of {}", geo.piece_count()),
            });
        }
        if let Some(s) = &mut self.store {
            let mut at = (geo.piece_offset(piece) + u64::from(begin)) as usize;
            for d in data {
                let Some(dst) = s.get_mut(at..at + d.len()) else {
                    return Some(StorageEvent::Failed {
                        error: format!("write {piece}:{begin} past the end"),
                    });
                };
                dst.copy_from_slice(d);
                at += d.len();
            }
        }
        let verdict = match &mut self.verify {
            Verify::Hash(v) => v.write(piece, begin, data).map_err(|e| e.to_string()),
            Verify::Compare(m) => {
                let (next, ok) = m.entry(piece).or_insert((0, true));
                if begin != *next {
                    let e = format!(
                        "piece {piece}: write at {begin} but {} bytes were handed over so far",
                        *next
                    );
                    Err(e)
                } else {
                    let base = geo.piece_offset(piece);
                    for d in data {
                        let len = d.len() as u32;
                        let fits =
                            u64::from(*next) + u64::from(len) <= u64::from(geo.piece_size(piece));
                        *ok &= fits && self.payload.matches(base + u64::from(*next), d);
                        *next += len;
                    }
                    if *next >= geo.piece_size(piece) {
                        let ok = *ok && *next == geo.piece_size(piece);
                        m.remove(&piece);
                        Ok(Some(ok))
                    } else {
                        Ok(None)
                    }
                }
            }
        };
        match verdict {
            Ok(Some(ok)) => Some(StorageEvent::PieceDone { piece, ok }),
            Ok(None) => None,
            Err(error) => Some(StorageEvent::Failed { error }),
        }
    }
}
