//! AICH: the SHA-1 tree eMule and aMule use to locate corruption inside a
//! part, in aMule's exact shape (`SHAHashSet.cpp`).
//!
//! Leaves are SHA-1 hashes of 180 KiB blocks ([`EMBLOCKSIZE`]); blocks
//! never cross a part boundary, so each full part has 52 blocks of 184,320
//! bytes and one of 143,360. Inner nodes hash the concatenation of their
//! two children. The tree is not a complete binary tree: a node covering
//! more than one part splits on part boundaries (its "base size" is
//! [`PARTSIZE`]), a node covering at most one part splits on block
//! boundaries. With `n` units of the base size under a node, the left child
//! gets `(n + 1) / 2` units when the node is itself a left child (the root
//! counts as one) and `n / 2` when it is a right child
//! (`CAICHHashTree::FindHash`, `SHAHashSet.cpp:105-107`).
//!
//! Hash identifiers name a node by its path: starting from 0, each node on
//! the way down from the root appends one bit, 1 for a left child and 0 for
//! a right child (the root is a left child, so every identifier starts with
//! a 1 bit). They are 16-bit on the wire for files up to
//! [`OLD_MAX_FILE_SIZE`](crate::OLD_MAX_FILE_SIZE), 32-bit above.
//!
//! The recovery data for one part (`OP_AICHANSWER`) is the sibling hash of
//! every node on the path from the root down to the part, top first, then
//! every block hash of the part left to right, each with its identifier
//! (`CAICHHashTree::CreatePartRecoveryData`, `SHAHashSet.cpp:262-300`).

use std::collections::HashMap;

use bytes::{BufMut, Bytes};
use sha1::{Digest, Sha1};

use crate::wire::{Reader, WireError};
use crate::{AichHash, EMBLOCKSIZE, OLD_MAX_FILE_SIZE, PARTSIZE};

/// Blocks in a full part: 52 of 184,320 bytes and one of 143,360.
pub const BLOCKS_PER_PART: u64 = PARTSIZE.div_ceil(EMBLOCKSIZE);

/// Why recovery data cannot be made, read or trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    /// The part does not exist or has no recovery data (aMule answers
    /// nothing for a part of at most one block).
    #[error("part {part} has no AICH recovery data (file size {size})")]
    NoSuchPart {
        /// The part asked for.
        part: u64,
        /// The file size.
        size: u64,
    },
    /// The packet is malformed.
    #[error("malformed AICH recovery data: {0}")]
    Wire(#[from] WireError),
    /// A hash the tree needs is missing.
    #[error("AICH recovery data lacks hash {ident:#x}")]
    Missing {
        /// Its identifier.
        ident: u32,
    },
    /// The hashes do not lead to the trusted master hash.
    #[error("AICH recovery data does not match the master hash")]
    Mismatch,
}

fn sha1_pair(a: &[u8; 20], b: &[u8; 20]) -> [u8; 20] {
    let mut h = Sha1::new();
    h.update(a);
    h.update(b);
    h.finalize().into()
}

/// A node of the tree: the byte range it covers, and its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Node {
    start: u64,
    size: u64,
    left: bool,
    ident: u32,
}

impl Node {
    fn root(size: u64) -> Self {
        Node {
            start: 0,
            size,
            left: true,
            ident: 1,
        }
    }

    fn is_leaf(&self) -> bool {
        self.size <= EMBLOCKSIZE
    }

    /// The two children (aMule's split rule).
    fn children(&self) -> (Node, Node) {
        let base = if self.size <= PARTSIZE {
            EMBLOCKSIZE
        } else {
            PARTSIZE
        };
        let units = self.size.div_ceil(base);
        let left_units = if self.left { units + 1 } else { units } / 2;
        let left_size = left_units * base;
        let l = Node {
            start: self.start,
            size: left_size,
            left: true,
            ident: self.ident << 1 | 1,
        };
        let r = Node {
            start: self.start + left_size,
            size: self.size - left_size,
            left: false,
            ident: self.ident << 1,
        };
        (l, r)
    }

    /// Hash of this node, asking `leaf` for each leaf (start, ident).
    fn hash<E>(&self, leaf: &mut impl FnMut(&Node) -> Result<[u8; 20], E>) -> Result<[u8; 20], E> {
        if self.is_leaf() {
            return leaf(self);
        }
        let (l, r) = self.children();
        Ok(sha1_pair(&l.hash(leaf)?, &r.hash(leaf)?))
    }

    fn leaves(&self, out: &mut Vec<Node>) {
        if self.is_leaf() {
            out.push(*self);
        } else {
            let (l, r) = self.children();
            l.leaves(out);
            r.leaves(out);
        }
    }
}

/// The path from the root to the node covering exactly part `part`: the
/// siblings met on the way (top first) and the part's node.
fn path_to_part(size: u64, part: u64) -> Option<(Vec<Node>, Node)> {
    let start = part.checked_mul(PARTSIZE)?;
    if start >= size {
        return None;
    }
    let part_size = PARTSIZE.min(size - start);
    let mut node = Node::root(size);
    let mut siblings = Vec::new();
    while !(node.start == start && node.size == part_size) {
        if node.is_leaf() {
            return None;
        }
        let (l, r) = node.children();
        if start < r.start {
            siblings.push(r);
            node = l;
        } else {
            siblings.push(l);
            node = r;
        }
    }
    Some((siblings, node))
}

/// Index of the leaf (block) starting at byte `start`.
fn leaf_index(start: u64) -> usize {
    (start / PARTSIZE * BLOCKS_PER_PART + start % PARTSIZE / EMBLOCKSIZE) as usize
}

/// Number of AICH leaves (blocks) of a file of `size` bytes.
pub fn leaf_count(size: u64) -> u64 {
    let full = size / PARTSIZE;
    full * BLOCKS_PER_PART + (size % PARTSIZE).div_ceil(EMBLOCKSIZE)
}

/// The complete AICH tree of a file: its block hashes and master hash.
#[derive(Clone, PartialEq, Eq)]
pub struct AichTree {
    size: u64,
    leaves: Vec<[u8; 20]>,
    root: AichHash,
}

impl std::fmt::Debug for AichTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AichTree")
            .field("size", &self.size)
            .field("blocks", &self.leaves.len())
            .field("root", &self.root)
            .finish()
    }
}

impl AichTree {
    /// Builds the tree from the SHA-1 of every block in file order.
    ///
    /// # Panics
    /// If `size` is 0 or `leaves.len()` is not [`leaf_count`]`(size)`: the
    /// caller computed the leaves from that very file, so this is a bug.
    pub fn from_leaves(size: u64, leaves: Vec<[u8; 20]>) -> Self {
        assert!(size > 0, "AICH tree of an empty file");
        assert_eq!(leaves.len() as u64, leaf_count(size), "AICH leaf count");
        let root = Node::root(size)
            .hash(&mut |n: &Node| Ok::<_, ()>(leaves[leaf_index(n.start)]))
            .unwrap_or_default();
        AichTree {
            size,
            leaves,
            root: AichHash(root),
        }
    }

    /// The master (root) hash, printed after `h=` in links.
    pub fn root(&self) -> AichHash {
        self.root
    }

    /// File size the tree covers.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The SHA-1 of every block, in file order.
    pub fn leaves(&self) -> &[[u8; 20]] {
        &self.leaves
    }

    /// The block hashes of part `part` (in order).
    pub fn part_leaves(&self, part: u64) -> &[[u8; 20]] {
        let first = (part * BLOCKS_PER_PART) as usize;
        let last = (first + BLOCKS_PER_PART as usize).min(self.leaves.len());
        self.leaves.get(first..last).unwrap_or(&[])
    }

    /// The recovery data that answers an AICH request for `part`: sibling
    /// hashes up the tree and every block hash of the part, each with its
    /// identifier. Like aMule, there is none for a file of at most one
    /// block or a last part of at most one block.
    pub fn recovery_data(&self, part: u64) -> Result<RecoveryData, RecoveryError> {
        let none = RecoveryError::NoSuchPart {
            part,
            size: self.size,
        };
        let start = part.checked_mul(PARTSIZE).ok_or(none.clone())?;
        // ProcessAICHRequest: size > EMBLOCKSIZE && size - PARTSIZE*part > EMBLOCKSIZE.
        if self.size <= EMBLOCKSIZE || start >= self.size || self.size - start <= EMBLOCKSIZE {
            return Err(none);
        }
        let (siblings, target) = path_to_part(self.size, part).ok_or(none)?;
        let mut leaf = |n: &Node| Ok::<_, ()>(self.leaves[leaf_index(n.start)]);
        let mut hashes = Vec::new();
        for s in siblings {
            hashes.push((s.ident, s.hash(&mut leaf).unwrap_or_default()));
        }
        let mut leaves = Vec::new();
        target.leaves(&mut leaves);
        for l in leaves {
            hashes.push((l.ident, self.leaves[leaf_index(l.start)]));
        }
        Ok(RecoveryData {
            wide: self.size > OLD_MAX_FILE_SIZE,
            hashes,
        })
    }
}

/// The hashes of an AICH answer for one part, with their identifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryData {
    /// Whether identifiers are 32-bit (files above
    /// [`OLD_MAX_FILE_SIZE`](crate::OLD_MAX_FILE_SIZE)).
    pub wide: bool,
    /// `(identifier, hash)` in wire order.
    pub hashes: Vec<(u32, [u8; 20])>,
}

/// At most this many hashes are read from one answer (a path of at most 32
/// siblings plus the blocks of one part).
const MAX_RECOVERY_HASHES: usize = 32 + BLOCKS_PER_PART as usize;

impl RecoveryData {
    /// Appends the wire form: `<n16 u16>(<id u16><hash>)*<n32 u16>(<id u32><hash>)*`,
    /// one of the two lists empty (`SHAHashSet.cpp:536-541`).
    pub fn encode(&self, out: &mut impl BufMut) {
        if self.wide {
            out.put_u16_le(0);
        }
        out.put_u16_le(self.hashes.len() as u16);
        for (id, h) in &self.hashes {
            if self.wide {
                out.put_u32_le(*id);
            } else {
                out.put_u16_le(*id as u16);
            }
            out.put_slice(h);
        }
        if !self.wide {
            out.put_u16_le(0);
        }
    }

    /// Reads the wire form (both identifier widths).
    pub fn decode(r: &mut Reader) -> Result<Self, RecoveryError> {
        let n16 = r.u16("AICH 16-bit hash count")? as usize;
        if n16 > MAX_RECOVERY_HASHES {
            return Err(crate::wire::invalid("AICH hash count", format!("{n16} hashes")).into());
        }
        let mut hashes = Vec::with_capacity(n16);
        for _ in 0..n16 {
            let id = r.u16("AICH identifier")? as u32;
            hashes.push((id, r.aich("AICH hash")?.0));
        }
        let mut wide = false;
        if n16 == 0 && r.remaining() >= 2 {
            let n32 = r.u16("AICH 32-bit hash count")? as usize;
            if n32 > MAX_RECOVERY_HASHES {
                return Err(
                    crate::wire::invalid("AICH hash count", format!("{n32} hashes")).into(),
                );
            }
            wide = n32 > 0;
            for _ in 0..n32 {
                let id = r.u32("AICH identifier")?;
                hashes.push((id, r.aich("AICH hash")?.0));
            }
        } else if n16 > 0 && r.remaining() >= 2 {
            // The (empty) 32-bit list.
            r.u16("AICH 32-bit hash count")?;
        }
        Ok(RecoveryData { wide, hashes })
    }

    /// Checks the hashes against the trusted `master` hash for part `part`
    /// of a file of `size` bytes and returns the part's block hashes (in
    /// order), against which the received data can be compared block by
    /// block to find the corrupt ones.
    pub fn verify(
        &self,
        size: u64,
        master: AichHash,
        part: u64,
    ) -> Result<Vec<[u8; 20]>, RecoveryError> {
        let (siblings, target) =
            path_to_part(size, part).ok_or(RecoveryError::NoSuchPart { part, size })?;
        let by_id: HashMap<u32, [u8; 20]> = self
            .hashes
            .iter()
            .filter(|(id, _)| *id != 1) // never accept a master hash
            .copied()
            .collect();
        let get = |n: &Node| {
            by_id
                .get(&n.ident)
                .copied()
                .ok_or(RecoveryError::Missing { ident: n.ident })
        };
        let mut leaves = Vec::new();
        target.leaves(&mut leaves);
        let blocks = leaves.iter().map(get).collect::<Result<Vec<_>, _>>()?;
        let mut hash = target.hash(&mut |n: &Node| get(n))?;
        // Fold back up: each sibling is the other child of the next node up.
        for s in siblings.iter().rev() {
            let sib = get(s)?;
            hash = if s.left {
                sha1_pair(&sib, &hash)
            } else {
                sha1_pair(&hash, &sib)
            };
        }
        if hash != master.0 {
            return Err(RecoveryError::Mismatch);
        }
        Ok(blocks)
    }

    /// The wire form as bytes.
    pub fn to_bytes(&self) -> Bytes {
        let mut v = Vec::new();
        self.encode(&mut v);
        v.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_rule_matches_amule_example() {
        // SHAHashSet.h example: 19,506,000 bytes = 2 full parts + 50,000.
        let root = Node::root(19_506_000);
        let (l, r) = root.children();
        // 3 part units under a left root: left gets (3+1)/2 = 2 parts.
        assert_eq!((l.size, r.size), (2 * PARTSIZE, 50_000));
        let (ll, lr) = l.children();
        assert_eq!((ll.size, lr.size), (PARTSIZE, PARTSIZE));
        // A left part of 53 blocks: left gets 27 blocks (4.75 MB), right 26.
        let (a, b) = ll.children();
        assert_eq!(a.size, 27 * EMBLOCKSIZE);
        assert_eq!(b.size, PARTSIZE - 27 * EMBLOCKSIZE);
        // A right part of 53 blocks: left gets 26 blocks (4.57 MB).
        let (c, _) = lr.children();
        assert_eq!(c.size, 26 * EMBLOCKSIZE);
        // Identifiers from the header's picture.
        assert_eq!(root.ident, 0b1);
        assert_eq!(l.ident, 0b11);
        assert_eq!(lr.ident, 0b110);
    }

    #[test]
    fn leaf_counting() {
        assert_eq!(BLOCKS_PER_PART, 53);
        assert_eq!(leaf_count(1), 1);
        assert_eq!(leaf_count(EMBLOCKSIZE), 1);
        assert_eq!(leaf_count(EMBLOCKSIZE + 1), 2);
        assert_eq!(leaf_count(PARTSIZE), 53);
        assert_eq!(leaf_count(PARTSIZE + 1), 54);
        for size in [1, 5, EMBLOCKSIZE + 1, PARTSIZE, 3 * PARTSIZE + 7] {
            let mut n = Vec::new();
            Node::root(size).leaves(&mut n);
            assert_eq!(n.len() as u64, leaf_count(size), "{size}");
            for (i, l) in n.iter().enumerate() {
                assert_eq!(leaf_index(l.start), i);
            }
        }
    }
}
