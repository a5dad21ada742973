//! What the client keeps about one file: its identity and hashes, which
//! parts it has, and the parts being assembled, verified or repaired.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
use weir_core::geometry::Geometry;
use weir_core::picker::{Order, Picker};
use weir_core::storage::Digest;

use super::ConnId;
use crate::client::PartStatus;
use crate::hash::AichTree;
use crate::{AichHash, Md4Hash};

/// A part's blocks on their way to storage, in order.
#[derive(Debug, Default)]
pub(super) struct Assembly {
    /// Bytes handed to storage so far.
    pub(super) handed: u32,
    /// Contiguous blocks after `handed`, not yet handed over.
    pub(super) ready: Vec<Bytes>,
    /// End of the contiguous data.
    pub(super) next: u32,
    /// Blocks that arrived ahead of a gap: offset -> (length, chunks).
    pub(super) ahead: BTreeMap<u32, (u32, Vec<Bytes>)>,
    /// Every block that went in.
    pub(super) from: Vec<Sender>,
}

/// (offset in the part, length, sender) of a block; the sender is `None`
/// for blocks kept from an earlier attempt at the part.
pub(super) type Sender = (u32, u32, Option<(ConnId, IpAddr)>);

/// A part that failed its MD4 check, being repaired with AICH: its bytes
/// read back and the peer's block hashes, compared block by block.
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

/// A part that failed with several senders and no AICH: the SHA-1 of each
/// block as it failed, compared with the good part once it passes.
#[derive(Debug)]
pub(super) struct Evidence {
    pub(super) from: Vec<Sender>,
    pub(super) bad: Option<Vec<[u8; 20]>>,
}

/// One shared or downloading file.
#[derive(Debug)]
pub(super) struct FileState {
    pub(super) hash: Md4Hash,
    pub(super) size: u64,
    pub(super) name: String,
    pub(super) geo: Geometry,
    pub(super) picker: Picker,
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
    pub(super) assembly: BTreeMap<u32, Assembly>,
    pub(super) recovering: BTreeMap<u32, Recovery>,
    pub(super) evidence: BTreeMap<u32, Evidence>,
    /// Bytes handed to storage and not yet verified.
    pub(super) unverified: u64,
    /// Parts to hash from storage before downloading (resume/recheck).
    pub(super) checking: Bitfield,
    pub(super) checks_in_flight: u32,
    pub(super) check_cursor: u32,
    /// `Complete` was reported.
    pub(super) complete_announced: bool,
}

impl FileState {
    pub(super) fn new(
        hash: Md4Hash,
        size: u64,
        name: String,
        hashset: Option<Vec<Md4Hash>>,
        order: Order,
        seed: u64,
    ) -> Self {
        let geo = crate::geometry(size);
        let parts = geo.piece_count();
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
            picker: Picker::new(geo, order, seed),
            hashset,
            aich_tree: None,
            aich_master: None,
            aich_trusted: false,
            hashset_from: None,
            assembly: BTreeMap::new(),
            recovering: BTreeMap::new(),
            evidence: BTreeMap::new(),
            unverified: 0,
            checking: Bitfield::new(parts),
            checks_in_flight: 0,
            check_cursor: 0,
            complete_announced: false,
        }
    }

    /// The MD4 every data part must hash to, once the hashset is known.
    pub(super) fn digests(&self) -> Option<Arc<[Digest]>> {
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
        self.picker.is_complete() && !self.is_checking()
    }

    /// Whether the start-up check is running.
    pub(super) fn is_checking(&self) -> bool {
        self.checking.count() > 0 || self.checks_in_flight > 0
    }

    /// The part status we announce.
    pub(super) fn part_status(&self) -> PartStatus {
        if self.is_complete() {
            return PartStatus::complete();
        }
        let had = self.picker.had();
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
        let had = self.picker.had();
        (start / pl..=(end - 1) / pl).all(|p| had.get(p as u32))
    }

    /// Whether we can serve anything of it.
    pub(super) fn shareable(&self) -> bool {
        self.picker.had().count() > 0
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
