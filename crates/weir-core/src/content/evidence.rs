//! Finding who sent the bad block of a piece that several peers filled
//! ("smart ban"), for any protocol.
//!
//! When such a piece fails its hash, the bytes on disk are read back and a
//! SHA-1 of each sender's block is kept. When the piece later passes, it is
//! read again: every sender whose block differs from the good copy sent bad
//! data, proven. A piece from a single sender needs none of this: that
//! sender is at fault.

use bytes::Bytes;
use sha1::{Digest as _, Sha1};

use super::Sender;
use super::assembly::Contribution;

/// What is known about a piece that failed with several senders.
#[derive(Debug)]
pub(crate) struct Evidence {
    pub(crate) blocks: Vec<Contribution>,
    /// Block hashes of the bad copy, once read back.
    pub(crate) bad: Option<Vec<[u8; 20]>>,
}

/// SHA-1 of each contribution's bytes in `data` (the whole piece).
pub(crate) fn block_hashes(data: &[u8], blocks: &[Contribution]) -> Vec<[u8; 20]> {
    blocks
        .iter()
        .map(|(begin, len, _)| {
            let at = *begin as usize;
            data.get(at..at + *len as usize)
                .map_or([0; 20], |b| Sha1::digest(b).into())
        })
        .collect()
}

/// The senders whose blocks differ between the bad and the good copy.
pub(crate) fn liars(e: &Evidence, good: &Bytes) -> Vec<Sender> {
    let good_hashes = block_hashes(good, &e.blocks);
    let bad = e.bad.as_deref().unwrap_or_default();
    let mut out: Vec<Sender> = Vec::new();
    for (i, (_, _, from)) in e.blocks.iter().enumerate() {
        let Some(s) = from else { continue };
        if bad.get(i) != good_hashes.get(i) && !out.contains(s) {
            out.push(*s);
        }
    }
    out
}

/// The distinct senders of a piece (restored data has none).
pub(crate) fn senders(blocks: &[Contribution]) -> Vec<Sender> {
    let mut out: Vec<Sender> = Vec::new();
    for (_, _, s) in blocks {
        if let Some(s) = s
            && !out.contains(s)
        {
            out.push(*s);
        }
    }
    out
}
