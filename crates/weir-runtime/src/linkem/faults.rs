//! Fault injection on a byte stream: bit flips at given offsets and removal
//! of given ranges, both in the coordinates of the stream as the sender
//! wrote it. Applied per chunk with a binary search, so bytes away from a
//! fault cost nothing.

use bytes::{Bytes, BytesMut};

/// Faults to apply to one direction of every connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Offsets whose byte is XORed with a nonzero mask ([`corrupt_mask`]).
    pub corrupt_at: Vec<u64>,
    /// `(offset, length)` ranges removed from the stream.
    pub drop: Vec<(u64, u64)>,
}

impl Faults {
    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.corrupt_at.is_empty() && self.drop.is_empty()
    }
}

/// splitmix64: a tiny, well-mixed 64-bit generator (Steele, Lea, Flood
/// 2014); enough for reproducible fault placement.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The nonzero value the byte at `offset` is XORed with (a function of the
/// offset only, so a run is reproducible from its offsets).
pub fn corrupt_mask(offset: u64) -> u8 {
    let mut s = offset;
    (splitmix64(&mut s) % 255) as u8 + 1
}

/// `n` distinct offsets drawn uniformly from `[0, span)` with `seed`,
/// sorted. `None` if `n > span`.
pub fn random_offsets(n: usize, seed: u64, span: u64) -> Option<Vec<u64>> {
    if n as u64 > span {
        return None;
    }
    let mut state = seed;
    let mut set = std::collections::BTreeSet::new();
    while set.len() < n {
        // Multiply-shift maps 64 random bits onto [0, span).
        let x = ((splitmix64(&mut state) as u128 * span as u128) >> 64) as u64;
        set.insert(x);
    }
    Some(set.into_iter().collect())
}

/// [`Faults`] prepared for lookups: sorted offsets, merged half-open ranges.
#[derive(Clone, Debug, Default)]
pub(crate) struct FaultPlan {
    corrupt: Vec<u64>,
    drops: Vec<(u64, u64)>,
}

/// What applying faults to one chunk did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Offsets corrupted (and the mask used), outside dropped ranges.
    pub(crate) corrupted: Vec<(u64, u8)>,
    /// Bytes removed.
    pub(crate) dropped: u64,
}

impl FaultPlan {
    pub(crate) fn new(f: &Faults) -> Self {
        let mut corrupt = f.corrupt_at.clone();
        corrupt.sort_unstable();
        corrupt.dedup();
        let mut r: Vec<(u64, u64)> = f
            .drop
            .iter()
            .filter(|(_, l)| *l > 0)
            .map(|&(o, l)| (o, o.saturating_add(l)))
            .collect();
        r.sort_unstable();
        let mut drops: Vec<(u64, u64)> = Vec::with_capacity(r.len());
        for (s, e) in r {
            match drops.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => drops.push((s, e)),
            }
        }
        Self { corrupt, drops }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.corrupt.is_empty() && self.drops.is_empty()
    }

    fn dropped(&self, off: u64) -> bool {
        let i = self.drops.partition_point(|&(_, e)| e <= off);
        self.drops.get(i).is_some_and(|&(s, _)| s <= off)
    }

    /// Applies the faults to `chunk`, which holds stream bytes
    /// `[start, start + len)`; pushes the bytes to forward onto `out`.
    pub(crate) fn apply(&self, start: u64, mut chunk: BytesMut, out: &mut Vec<Bytes>) -> Applied {
        let mut applied = Applied::default();
        let end = start + chunk.len() as u64;
        let first = self.corrupt.partition_point(|&o| o < start);
        for &o in self.corrupt[first..].iter().take_while(|&&o| o < end) {
            if self.dropped(o) {
                continue;
            }
            let m = corrupt_mask(o);
            chunk[(o - start) as usize] ^= m;
            applied.corrupted.push((o, m));
        }
        let data = chunk.freeze();
        let mut pos = start;
        let first = self.drops.partition_point(|&(_, e)| e <= start);
        for &(s, e) in self.drops[first..].iter().take_while(|&&(s, _)| s < end) {
            if s > pos {
                out.push(data.slice((pos - start) as usize..(s - start) as usize));
            }
            let cut_to = e.min(end);
            applied.dropped += cut_to - s.max(pos);
            pos = cut_to;
        }
        if pos < end {
            out.push(data.slice((pos - start) as usize..));
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(plan: &FaultPlan, data: &[u8], chunk: usize) -> (Vec<u8>, Vec<(u64, u8)>, u64) {
        let mut out = Vec::new();
        let mut corrupted = Vec::new();
        let mut dropped = 0;
        for (i, c) in data.chunks(chunk).enumerate() {
            let mut v = Vec::new();
            let a = plan.apply((i * chunk) as u64, BytesMut::from(c), &mut v);
            corrupted.extend(a.corrupted);
            dropped += a.dropped;
            for b in v {
                out.extend_from_slice(&b);
            }
        }
        (out, corrupted, dropped)
    }

    fn reference(f: &Faults, data: &[u8]) -> Vec<u8> {
        let mut d = data.to_vec();
        for &o in &f.corrupt_at {
            if let Some(b) = d.get_mut(o as usize) {
                *b ^= corrupt_mask(o);
            }
        }
        d.iter()
            .enumerate()
            .filter(|(i, _)| {
                !f.drop
                    .iter()
                    .any(|&(o, l)| (*i as u64) >= o && (*i as u64) < o + l)
            })
            .map(|(_, b)| *b)
            .collect()
    }

    #[test]
    fn masks_are_nonzero() {
        assert!((0..100_000).all(|o| corrupt_mask(o) != 0));
    }

    #[test]
    fn random_offsets_are_distinct_in_range_and_reproducible() {
        let a = random_offsets(50, 7, 1000).unwrap();
        assert_eq!(a.len(), 50);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert!(a.iter().all(|&o| o < 1000));
        assert_eq!(a, random_offsets(50, 7, 1000).unwrap());
        assert_ne!(a, random_offsets(50, 8, 1000).unwrap());
        assert_eq!(random_offsets(5, 1, 5).unwrap(), vec![0, 1, 2, 3, 4]);
        assert!(random_offsets(6, 1, 5).is_none());
    }

    #[test]
    fn matches_a_bytewise_reference_for_any_chunking() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let f = Faults {
            corrupt_at: vec![0, 5, 999, 1000, 4095, 4096, 9999, 20_000, 3000],
            drop: vec![(100, 50), (120, 100), (4090, 10), (9990, 100), (3000, 1)],
        };
        let plan = FaultPlan::new(&f);
        let want = reference(&f, &data);
        for chunk in [1, 7, 100, 4096, 10_000] {
            let (got, corrupted, dropped) = run(&plan, &data, chunk);
            assert_eq!(got, want, "chunk {chunk}");
            assert_eq!(dropped as usize, data.len() - want.len());
            let offs: Vec<u64> = corrupted.iter().map(|c| c.0).collect();
            assert_eq!(offs, vec![0, 5, 999, 1000], "chunk {chunk}");
        }
    }
}
