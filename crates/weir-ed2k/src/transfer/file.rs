//! What the client keeps about one file: its identity and hashes, which
//! parts it has, and the parts being assembled, verified or repaired.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
use weir_core::content::assembly::Contribution;
use weir_core::content::grid::{UnitGrid, pieces_covered};
use weir_core::content::{Content, ContentConfig, FailPolicy, SchemeId};
use weir_core::geometry::{BlockSpan, Geometry};
use weir_core::picker::Order;
use weir_core::storage::{Digest, Digests, StorageOp};

use super::ConnId;
use crate::client::PartStatus;
use crate::hash::AichTree;
use crate::{AichHash, Md4Hash};

/// One block of a part and who sent it (`None`: kept from a repair).
pub(super) type Sender = Contribution;

/// Contiguous data goes to storage in runs of at least this much (or at
/// the end of a part). Below one eD2k block (180 KiB), so every block that
/// continues its part is written as it completes: a killed download loses
/// at most the blocks still arriving (the kill -9 suite: 1.028x the file
/// pulled over 20 kills with 256 KiB runs).
const WRITE_RUN: u32 = 64 * 1024;

#[derive(Debug)]
pub(super) struct Recovery {
    pub(super) from: Vec<Sender>,
    pub(super) data: Option<Bytes>,
    pub(super) blocks: Option<Vec<[u8; 20]>>,
    /// The peer asked for the recovery data.
    pub(super) asked: Option<ConnId>,
    pub(super) deadline: Instant,
    /// Recovery failed; the read-back in flight decides what happens.
    pub(super) abandoned: bool,
}

/// Where an attached file's bytes and parts sit in the content it shares.
#[derive(Clone, Debug)]
pub(super) struct Shared {
    /// The file's parts, in the content's byte coordinates.
    pub(super) grid: UnitGrid,
    /// The content's scheme that checks the parts (MD4).
    pub(super) scheme: SchemeId,
    /// The parts that passed, as of the last time the content was lent:
    /// what the file reports while the content is with its owner
    /// (between calls), when the file holds only a placeholder.
    pub(super) verified: Bitfield,
}

#[derive(Debug)]
pub(super) struct FileState {
    pub(super) hash: Md4Hash,
    pub(super) size: u64,
    pub(super) name: String,
    pub(super) geo: Geometry,
    /// Parts had, blocks asked, assembly, checks: the shared content. For
    /// an attached file ([`FileState::shared`]) it is another network's
    /// content, lent for the length of each call (a placeholder between).
    pub(super) content: Content,
    /// The file is part of another transfer's content (one file of a
    /// torrent): its bytes sit at `grid` in that content, its parts are
    /// that content's secondary scheme `scheme`.
    pub(super) shared: Option<Shared>,
    /// The wire hashset (empty for a file below one part), once known.
    pub(super) hashset: Option<Vec<Md4Hash>>,
    /// The whole AICH tree (files we hashed ourselves).
    pub(super) aich_tree: Option<AichTree>,
    /// The AICH master hash used to locate bad blocks (from the link, our
    /// own tree, or the first peer that announced one).
    pub(super) aich_master: Option<AichHash>,
    /// Whether the master hash came from a trusted place (link or tree).
    pub(super) aich_trusted: bool,
    /// The hashset request in flight, and to whom.
    pub(super) hashset_from: Option<ConnId>,
    pub(super) recovering: BTreeMap<u32, Recovery>,
    /// Parts to hash from storage once the part hashes are known (data
    /// found on disk without resume data).
    pub(super) to_check: Bitfield,
    /// `Complete` was reported.
    pub(super) complete_announced: bool,
}

impl FileState {
    /// A file having the parts in `had` (a trusted journal, or everything
    /// for a file we share).
    pub(super) fn new(
        hash: Md4Hash,
        size: u64,
        name: String,
        hashset: Option<Vec<Md4Hash>>,
        cfg: (Order, u64, u64),
        had: &Bitfield,
    ) -> Self {
        let (order, seed, max_unverified) = cfg;
        let geo = crate::geometry(size);
        let parts = geo.piece_count();
        let content = Content::new(
            geo,
            ContentConfig {
                order,
                seed,
                max_unverified,
                // AICH repairs first: the client decides.
                on_fail: FailPolicy::Defer,
                write_run: WRITE_RUN,
                wanted: None,
                priorities: None,
            },
            had,
            &Bitfield::new(parts),
        );
        // Below one part the file hash is the only part hash.
        let hashset = if crate::hashset_len(size) == 0 {
            Some(Vec::new())
        } else {
            hashset
        };
        Self {
            hash,
            size,
            name,
            geo,
            content,
            shared: None,
            hashset,
            aich_tree: None,
            aich_master: None,
            aich_trusted: false,
            hashset_from: None,
            recovering: BTreeMap::new(),
            to_check: Bitfield::new(parts),
            complete_announced: false,
        }
    }

    /// The MD4 every data part must hash to, once the hashset is known.
    pub(super) fn digests(&self) -> Option<Digests> {
        let hs = self.hashset.as_ref()?;
        let n = self.geo.piece_count() as usize;
        if hs.is_empty() {
            return Some(
                (0..n)
                    .map(|_| Digest::Md4(self.hash.0))
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
        Some(hs[..n].iter().map(|h| Digest::Md4(h.0)).collect())
    }

    /// Whether every part is verified.
    pub(super) fn is_complete(&self) -> bool {
        match &self.shared {
            Some(_) => self.parts_had().is_full(),
            None => self.content.is_complete() && self.to_check.count() == 0,
        }
    }

    /// Whether the start-up check is running.
    pub(super) fn is_checking(&self) -> bool {
        match &self.shared {
            // The content's owner checks its data.
            Some(_) => false,
            None => self.content.is_checking() || self.to_check.count() > 0,
        }
    }

    /// The parts verified (by MD4, for an attached file).
    pub(super) fn parts_had(&self) -> Bitfield {
        match &self.shared {
            Some(sh) => self
                .content
                .scheme_verified(sh.scheme)
                .cloned()
                .unwrap_or_else(|| sh.verified.clone()),
            None => self.content.had().clone(),
        }
    }

    /// What a peer with these parts can send us, in the content's pieces.
    pub(super) fn to_primary(&self, parts: Bitfield) -> Bitfield {
        match &self.shared {
            Some(sh) => pieces_covered(self.content.geometry(), &sh.grid, &parts),
            None => parts,
        }
    }

    /// What a peer with every part can send us, in the content's pieces.
    pub(super) fn all_primary(&self) -> Bitfield {
        self.to_primary(Bitfield::full(self.geo.piece_count()))
    }

    /// The file offset of a block the content picked.
    pub(super) fn file_offset(&self, s: &BlockSpan) -> u64 {
        let at = self.content.geometry().piece_offset(s.piece) + u64::from(s.begin);
        at - self.shared.as_ref().map_or(0, |sh| sh.grid.offset)
    }

    /// A storage read of `len` bytes at file offset `start`, addressed in
    /// the content's pieces.
    pub(super) fn read_op(&self, id: u64, start: u64, len: u32) -> StorageOp {
        let at = start + self.shared.as_ref().map_or(0, |sh| sh.grid.offset);
        let geo = self.content.geometry();
        let pl = u64::from(geo.piece_len().max(1));
        let (piece, begin) = ((at / pl) as u32, (at % pl) as u32);
        StorageOp::Read {
            id,
            piece,
            begin,
            len,
        }
    }

    /// The part status we announce.
    pub(super) fn part_status(&self) -> PartStatus {
        if self.is_complete() {
            return PartStatus::complete();
        }
        let had = self.parts_had();
        PartStatus::from_fn(crate::ed2k_part_count(self.size) as u16, |i| {
            had.get(i as u32)
        })
    }

    /// Whether `[start, end)` lies in verified parts.
    pub(super) fn has_range(&self, start: u64, end: u64) -> bool {
        if end <= start || end > self.size {
            return false;
        }
        let pl = u64::from(self.geo.piece_len());
        let had = self.parts_had();
        (start / pl..=(end - 1) / pl).all(|p| had.get(p as u32))
    }

    /// Whether we can serve anything of it.
    pub(super) fn shareable(&self) -> bool {
        self.parts_had().count() > 0
    }

    /// Reads a peer's part status as a bitfield over the data parts
    /// (`None` when the count does not match the file).
    pub(super) fn status_bits(&self, s: &PartStatus) -> Option<Bitfield> {
        let n = self.geo.piece_count();
        if s.count == 0 {
            return Some(Bitfield::full(n));
        }
        if u64::from(s.count) != crate::ed2k_part_count(self.size) {
            return None;
        }
        let mut b = Bitfield::new(n);
        for i in 0..n {
            if s.has(i as usize) {
                b.set(i);
            }
        }
        Some(b)
    }
}
