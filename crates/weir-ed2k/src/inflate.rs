//! zlib, bounded: packed packets (`0xD4`) and compressed part data
//! (`OP_COMPRESSEDPART`) are inflated into at most a known number of bytes,
//! so a zip bomb is an error and never an allocation.

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Why inflation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    /// The data inflates to more than allowed.
    #[error("compressed data inflates to more than {limit} bytes (zip bomb?)")]
    TooLarge {
        /// The bound.
        limit: u64,
    },
    /// Not a valid zlib stream.
    #[error("corrupt zlib data: {0}")]
    Corrupt(String),
    /// The stream ended before all its data.
    #[error("zlib stream is incomplete")]
    Incomplete,
    /// Data after the end of the stream.
    #[error("{0} bytes after the end of the zlib stream")]
    Trailing(usize),
}

fn corrupt(e: flate2::DecompressError) -> InflateError {
    InflateError::Corrupt(e.to_string())
}

/// Inflates one complete zlib stream into at most `limit` bytes.
pub fn inflate_bounded(data: &[u8], limit: usize) -> Result<Bytes, InflateError> {
    let mut inf = BlockInflater::new(limit as u64);
    let out = inf.feed(data)?;
    if !inf.is_done() {
        return Err(InflateError::Incomplete);
    }
    Ok(out)
}

/// One zlib stream arriving in pieces (the packets of one compressed
/// block), inflated into at most the expected number of bytes.
pub struct BlockInflater {
    z: Decompress,
    limit: u64,
    done: bool,
}

impl std::fmt::Debug for BlockInflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockInflater")
            .field("out", &self.z.total_out())
            .field("limit", &self.limit)
            .field("done", &self.done)
            .finish()
    }
}

impl BlockInflater {
    /// A stream that may produce at most `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            z: Decompress::new(true),
            limit,
            done: false,
        }
    }

    /// Bytes produced so far.
    pub fn total_out(&self) -> u64 {
        self.z.total_out()
    }

    /// Whether the stream has ended.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds the next compressed piece and returns what it inflates to.
    pub fn feed(&mut self, input: &[u8]) -> Result<Bytes, InflateError> {
        if self.done {
            return if input.is_empty() {
                Ok(Bytes::new())
            } else {
                Err(InflateError::Trailing(input.len()))
            };
        }
        let r = self.feed_inner(input);
        if r.is_err() {
            // A failed stream stays failed.
            self.done = true;
            self.limit = self.z.total_out();
        }
        r
    }

    fn feed_inner(&mut self, mut input: &[u8]) -> Result<Bytes, InflateError> {
        let room = self.limit.saturating_sub(self.z.total_out());
        // Start at 4x the input (bounded); grow while the output is full.
        let mut out: Vec<u8> =
            Vec::with_capacity((input.len() * 4).clamp(64, 1 << 20).min(room as usize + 1));
        loop {
            let room = self.limit.saturating_sub(self.z.total_out()) as usize;
            if out.capacity() - out.len() == 0 {
                // Allow one byte past the limit to detect overflow.
                out.reserve_exact(out.capacity().max(4096).min(room + 1));
            }
            let before_in = self.z.total_in();
            let before_out = self.z.total_out();
            let status = self
                .z
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
                .map_err(corrupt)?;
            let used = (self.z.total_in() - before_in) as usize;
            input = &input[used..];
            if self.z.total_out() > self.limit {
                return Err(InflateError::TooLarge { limit: self.limit });
            }
            match status {
                Status::StreamEnd => {
                    self.done = true;
                    if !input.is_empty() {
                        return Err(InflateError::Trailing(input.len()));
                    }
                    break;
                }
                _ if input.is_empty() && out.len() < out.capacity() => break,
                _ if used == 0
                    && self.z.total_out() == before_out
                    && out.len() < out.capacity() =>
                {
                    // No progress with room left: input exhausted mid-symbol.
                    break;
                }
                _ => {}
            }
        }
        Ok(Bytes::from(out))
    }
}

/// zlib-compresses `data` (as aMule's `compress2`) when that makes it
/// smaller; `None` when it does not pay.
pub fn deflate_if_smaller(data: &[u8], level: u32) -> Option<Vec<u8>> {
    let mut z = Compress::new(Compression::new(level), true);
    let mut out = Vec::with_capacity(data.len());
    match z.compress_vec(data, &mut out, FlushCompress::Finish) {
        Ok(Status::StreamEnd) if out.len() < data.len() => Some(out),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut z = Compress::new(Compression::new(9), true);
        let mut out = Vec::with_capacity(data.len() + 64);
        z.compress_vec(data, &mut out, FlushCompress::Finish)
            .unwrap();
        out
    }

    #[test]
    fn zip_bomb_is_an_error_not_an_allocation() {
        // 64 MiB of zeros compresses to ~64 KiB.
        let bomb = zlib(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 100_000);
        assert_eq!(
            inflate_bounded(&bomb, 50_000),
            Err(InflateError::TooLarge { limit: 50_000 })
        );
        let mut b = BlockInflater::new(184_320);
        let mut err = None;
        for chunk in bomb.chunks(10_240) {
            match b.feed(chunk) {
                Ok(out) => assert!(out.len() <= 184_320),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert_eq!(err, Some(InflateError::TooLarge { limit: 184_320 }));
    }

    #[test]
    fn corrupt_incomplete_and_trailing() {
        assert!(matches!(
            inflate_bounded(b"not zlib at all", 100),
            Err(InflateError::Corrupt(_))
        ));
        let z = zlib(b"hello hello hello");
        assert_eq!(
            inflate_bounded(&z[..z.len() - 3], 100),
            Err(InflateError::Incomplete)
        );
        let mut t = z.clone();
        t.extend_from_slice(b"xx");
        assert_eq!(inflate_bounded(&t, 100), Err(InflateError::Trailing(2)));
        assert_eq!(
            inflate_bounded(&z, 100).unwrap().as_ref(),
            b"hello hello hello"
        );
        // Exactly at the limit is fine, one byte more is not.
        assert!(inflate_bounded(&z, 17).is_ok());
        assert_eq!(
            inflate_bounded(&z, 16),
            Err(InflateError::TooLarge { limit: 16 })
        );
    }

    #[test]
    fn deflate_only_when_it_pays() {
        assert!(deflate_if_smaller(&[7u8; 10_000], 1).is_some());
        let noise: Vec<u8> = (0..10_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let _ = deflate_if_smaller(&noise, 1); // may or may not pay; must not panic
        assert!(deflate_if_smaller(&[], 1).is_none());
    }

    proptest! {
        #[test]
        fn pieces_reassemble(data in proptest::collection::vec(0u8..4, 0..50_000), cut in 1usize..5000) {
            let z = zlib(&data);
            let mut b = BlockInflater::new(data.len() as u64);
            let mut out = Vec::new();
            for c in z.chunks(cut) {
                out.extend_from_slice(&b.feed(c).unwrap());
            }
            prop_assert!(b.is_done());
            prop_assert_eq!(out, data);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2000), limit in 0usize..100_000) {
            match inflate_bounded(&data, limit) {
                // Within the limit, and the same when fed in two pieces.
                Ok(out) => {
                    prop_assert!(out.len() <= limit);
                    let mut b = BlockInflater::new(limit as u64);
                    let (x, y) = data.split_at(data.len() / 2);
                    let mut two = b.feed(x).unwrap().to_vec();
                    two.extend_from_slice(&b.feed(y).unwrap());
                    prop_assert!(b.is_done());
                    prop_assert_eq!(two, out.to_vec());
                }
                Err(InflateError::TooLarge { limit: l }) => prop_assert_eq!(l, limit as u64),
                Err(InflateError::Trailing(n)) => prop_assert!(n > 0 && n < data.len()),
                Err(InflateError::Corrupt(_) | InflateError::Incomplete) => {}
            }
        }
    }
}
