//! Blocks of a piece handed to storage in order, in runs.
//!
//! Storage hashes each piece as it is written, so a piece's bytes must
//! reach it in order from offset 0. Blocks arrive in any order (several
//! peers, several networks, endgame); one that arrives ahead of a gap waits
//! here until the gap is filled. Contiguous data goes out in runs of at
//! least [`WRITE_RUN`] bytes (or at the end of the piece): one vectored
//! write per run, not per block.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::Sender;

/// Contiguous data is handed to storage in runs of at least this much (or
/// at the end of a piece).
pub const WRITE_RUN: u32 = 256 * 1024;

/// Who sent one block of a piece: its offset, length and sender (`None`:
/// data restored from storage, e.g. the good blocks kept by a repair).
pub type Contribution = (u32, u32, Option<Sender>);

/// One piece being assembled.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    /// Bytes handed to storage so far.
    handed: u32,
    /// Contiguous chunks after `handed`, not yet handed over.
    ready: Vec<Bytes>,
    /// End of the contiguous data (`handed` + bytes in `ready`).
    next: u32,
    /// Blocks that arrived ahead of a gap, by offset: (length, chunks).
    ahead: BTreeMap<u32, (u32, Vec<Bytes>)>,
    /// Every block that went into the piece.
    pub(crate) from: Vec<Contribution>,
}

impl Assembly {
    /// A piece whose first `bytes` an earlier run wrote to storage.
    pub(crate) fn resumed(bytes: u32) -> Self {
        Self {
            handed: bytes,
            next: bytes,
            from: vec![(0, bytes, None)],
            ..Self::default()
        }
    }

    /// Adds a block; returns a run to write `(begin, chunks)` when one is
    /// due. `size` is the piece's length.
    pub(crate) fn add(
        &mut self,
        begin: u32,
        len: u32,
        chunks: Vec<Bytes>,
        from: Option<Sender>,
        size: u32,
        run: u32,
    ) -> Option<(u32, Vec<Bytes>)> {
        self.from.push((begin, len, from));
        if begin != self.next {
            self.ahead.insert(begin, (len, chunks));
            return None;
        }
        self.next += len;
        self.ready.extend(chunks);
        while let Some((l, c)) = self.ahead.remove(&self.next) {
            self.next += l;
            self.ready.extend(c);
        }
        if self.next - self.handed >= run || self.next == size {
            let begin = self.handed;
            self.handed = self.next;
            return Some((begin, std::mem::take(&mut self.ready)));
        }
        None
    }

    /// Bytes held in memory (not yet handed to storage).
    pub(crate) fn held(&self) -> u64 {
        let ready: u64 = self.ready.iter().map(|b| b.len() as u64).sum();
        let ahead: u64 = self.ahead.values().map(|(l, _)| u64::from(*l)).sum();
        ready + ahead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: u8, len: usize) -> Vec<Bytes> {
        vec![Bytes::from(vec![n; len])]
    }

    #[test]
    fn out_of_order_blocks_wait_for_the_gap_and_go_out_in_order() {
        let mut a = Assembly::default();
        let size = 3 * 16_384;
        assert!(
            a.add(16_384, 16_384, block(1, 16_384), None, size, WRITE_RUN)
                .is_none()
        );
        assert!(
            a.add(32_768, 16_384, block(2, 16_384), None, size, WRITE_RUN)
                .is_none()
        );
        assert_eq!(a.held(), 32_768);
        let (begin, chunks) = a
            .add(0, 16_384, block(0, 16_384), None, size, WRITE_RUN)
            .unwrap();
        assert_eq!(begin, 0);
        let firsts: Vec<u8> = chunks.iter().map(|c| c[0]).collect();
        assert_eq!(firsts, [0, 1, 2]);
        assert_eq!(a.held(), 0);
        assert_eq!(a.from.len(), 3);
    }

    #[test]
    fn runs_are_at_least_write_run_bytes() {
        let mut a = Assembly::default();
        let size = 64 * 16_384;
        let mut runs = Vec::new();
        for i in 0..64u32 {
            if let Some((b, c)) = a.add(i * 16_384, 16_384, block(0, 16_384), None, size, WRITE_RUN)
            {
                let len: usize = c.iter().map(|x| x.len()).sum();
                runs.push((b, len));
            }
        }
        assert_eq!(runs.len(), 4);
        assert!(runs.iter().all(|&(_, l)| l == WRITE_RUN as usize));
        assert_eq!(runs[3].0, 3 * WRITE_RUN);
    }
}
