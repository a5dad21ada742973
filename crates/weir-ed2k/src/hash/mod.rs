//! ed2k hashing: MD4 part hashes, the file hash, and the AICH tree.
//!
//! The file hash rule (aMule `KnownFile.cpp`, `CreateHashFromHashlist`):
//! each [`PARTSIZE`] part gets an MD4 hash; a file smaller than one part is
//! identified by the MD4 of its data; otherwise the file hash is the MD4 of
//! the concatenated part hashes, and when the size is an exact multiple of
//! the part size one more part hash, MD4 of nothing ([`Md4Hash::EMPTY`]), is
//! appended first. That list is the *hashset* (`OP_HASHSETANSWER`, `p=`).
//!
//! [`Ed2kHasher`] computes all of it, and the AICH tree, in one streaming
//! pass: feed the bytes in order in any chunk sizes.

pub mod aich;

use md4::{Digest, Md4};
use sha1::Sha1;

use crate::{EMBLOCKSIZE, Md4Hash, PARTSIZE};
pub use aich::{AichTree, RecoveryData, RecoveryError};

/// MD4 of `data`.
pub fn md4(data: &[u8]) -> Md4Hash {
    Md4Hash(Md4::digest(data).into())
}

/// The ed2k file hash from a wire hashset (as received in
/// `OP_HASHSETANSWER` or a link's `p=`): MD4 of the concatenated hashes.
/// A single-hash list is the file hash itself.
pub fn file_hash_from_hashset(hashset: &[Md4Hash]) -> Md4Hash {
    match hashset {
        [one] => *one,
        _ => {
            let mut h = Md4::new();
            for p in hashset {
                h.update(p.0);
            }
            Md4Hash(h.finalize().into())
        }
    }
}

/// Everything `weir hash --ed2k` and a seeder need to know about a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHashes {
    /// File size in bytes.
    pub size: u64,
    /// The ed2k file hash.
    pub file_hash: Md4Hash,
    /// The wire hashset: empty below one part, else one hash per data part
    /// plus [`Md4Hash::EMPTY`] when the size is an exact multiple.
    pub hashset: Vec<Md4Hash>,
    /// The AICH tree, when it was computed and the file is not empty.
    pub aich: Option<AichTree>,
}

impl FileHashes {
    /// The MD4 every data part must hash to, for the shared core's
    /// streaming verifier (`weir_core::storage::PieceVerifier` over
    /// [`crate::geometry`]).
    pub fn part_digests(&self) -> Vec<weir_core::storage::Digest> {
        (0..crate::part_count(self.size))
            .filter_map(|i| self.part_hash(i))
            .map(|h| weir_core::storage::Digest::Md4(h.0))
            .collect()
    }

    /// The MD4 hash data part `index` must have (for a file below one part,
    /// the file hash). `None` past the last part.
    pub fn part_hash(&self, index: u64) -> Option<Md4Hash> {
        if index >= crate::part_count(self.size) {
            return None;
        }
        if self.hashset.is_empty() {
            Some(self.file_hash)
        } else {
            self.hashset.get(index as usize).copied()
        }
    }
}

/// Streaming MD4 part hasher (and optional AICH block hasher).
#[derive(Clone)]
pub struct Ed2kHasher {
    part: Md4,
    part_fill: u64,
    parts: Vec<Md4Hash>,
    total: u64,
    aich: Option<AichHasher>,
}

/// Streaming AICH block hasher: feed the file in order, get the tree.
/// Separate from the MD4 side so the two can run on two threads.
#[derive(Clone)]
pub struct AichHasher {
    block: Sha1,
    block_fill: u64,
    /// Bytes of the current part already put in finished blocks + current.
    part_fill: u64,
    leaves: Vec<[u8; 20]>,
    total: u64,
}

impl Default for AichHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl AichHasher {
    /// An empty hasher.
    pub fn new() -> Self {
        AichHasher {
            block: Sha1::new(),
            block_fill: 0,
            part_fill: 0,
            leaves: Vec::new(),
            total: 0,
        }
    }

    /// The tree of the bytes fed so far (`None` for an empty file).
    pub fn finish(mut self) -> Option<AichTree> {
        if self.total == 0 {
            return None;
        }
        if self.block_fill > 0 {
            self.close_block();
        }
        Some(AichTree::from_leaves(self.total, self.leaves))
    }

    /// Feeds the next bytes of the file.
    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        while !data.is_empty() {
            // Blocks never cross a part boundary: the last block of a part
            // is 143,360 bytes.
            let block_start = self.part_fill - self.block_fill;
            let block_len = EMBLOCKSIZE.min(PARTSIZE - block_start);
            let want = (block_len - self.block_fill) as usize;
            let n = want.min(data.len());
            self.block.update(&data[..n]);
            self.block_fill += n as u64;
            self.part_fill += n as u64;
            data = &data[n..];
            if n == want {
                self.close_block();
            }
        }
    }

    fn close_block(&mut self) {
        let h = std::mem::take(&mut self.block).finalize();
        self.leaves.push(h.into());
        self.block_fill = 0;
        if self.part_fill == PARTSIZE {
            self.part_fill = 0;
        }
    }
}

impl Default for Ed2kHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl Ed2kHasher {
    /// A hasher computing MD4 parts and the AICH tree.
    pub fn new() -> Self {
        let mut h = Self::md4_only();
        h.aich = Some(AichHasher::new());
        h
    }

    /// A hasher computing only the MD4 part hashes and file hash.
    pub fn md4_only() -> Self {
        Self {
            part: Md4::new(),
            part_fill: 0,
            parts: Vec::new(),
            total: 0,
            aich: None,
        }
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was fed yet.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Feeds the next bytes of the file.
    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if let Some(a) = &mut self.aich {
            a.update(data);
        }
        while !data.is_empty() {
            let n = ((PARTSIZE - self.part_fill) as usize).min(data.len());
            self.part.update(&data[..n]);
            self.part_fill += n as u64;
            data = &data[n..];
            if self.part_fill == PARTSIZE {
                let h = std::mem::take(&mut self.part).finalize();
                self.parts.push(Md4Hash(h.into()));
                self.part_fill = 0;
            }
        }
    }

    /// The hashes of the file fed so far.
    pub fn finish(mut self) -> FileHashes {
        let size = self.total;
        // The last (possibly empty) part: for exact multiples this is the
        // MD4 of nothing, which is exactly the empty-part rule.
        let last = Md4Hash(self.part.finalize().into());
        let (file_hash, hashset) = if size < PARTSIZE {
            (last, Vec::new())
        } else {
            self.parts.push(last);
            (file_hash_from_hashset(&self.parts), self.parts)
        };
        let aich = self.aich.and_then(AichHasher::finish);
        FileHashes {
            size,
            file_hash,
            hashset,
            aich,
        }
    }
}

#[cfg(test)]
mod tests;
