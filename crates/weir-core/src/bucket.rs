//! Token buckets for literal bandwidth caps (`SEEDS.md` section 2).
//!
//! One bucket is shared by every socket it governs: a reader reserves before
//! it reads and refunds what the read did not use; a writer reserves before
//! it writes. The bucket is refilled once per tick with `rate * tick`, and
//! what is left over carries into the next tick only up to twice the tick's
//! budget: without carry TCP starves and the rate is noisy, with unbounded
//! carry a quiet period bursts past the cap.
//!
//! There is no per-peer share: demand decides, so a slow peer takes what it
//! can and a fast one takes the rest. A rate of 0 means unlimited and every
//! call short-circuits. Asking for 0 bytes (control traffic) returns 0 and
//! never touches the bucket, so it can never be mistaken for "empty".
//!
//! The bucket is lock-free (atomics only): the hot path is one
//! compare-and-swap.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// A shared token bucket. `rate` is bytes per second, 0 = unlimited.
#[derive(Debug, Default)]
pub struct TokenBucket {
    rate: AtomicU64,
    tokens: AtomicI64,
    /// Twice the last tick's budget (at least one byte): the ceiling
    /// refills and refunds obey.
    ceiling: AtomicI64,
    /// The fraction of a byte `rate * tick` left over at the last refill,
    /// in billionths: carried into the next, so a cap of fewer bytes a
    /// second than ticks a second still grants its rate.
    owed: AtomicU64,
}

impl TokenBucket {
    /// A bucket capping at `rate` bytes per second (0 = unlimited). It starts
    /// empty and fills at the first [`refill`](Self::refill).
    pub fn new(rate: u64) -> Self {
        Self {
            rate: AtomicU64::new(rate),
            tokens: AtomicI64::new(0),
            ceiling: AtomicI64::new(0),
            owed: AtomicU64::new(0),
        }
    }

    /// An unlimited bucket.
    pub fn unlimited() -> Self {
        Self::new(0)
    }

    /// Changes the cap; takes effect at the next refill. The fraction of a
    /// byte the old rate left is dropped (under a new cap of 1 B/s it was
    /// a byte granted at once).
    pub fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Ordering::Relaxed);
        self.owed.store(0, Ordering::Relaxed);
    }

    /// The cap in bytes per second (0 = unlimited).
    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Whether the bucket limits anything.
    pub fn is_unlimited(&self) -> bool {
        self.rate() == 0
    }

    /// Adds one tick's budget, `rate * tick`, keeping at most twice that
    /// (at least one byte). The fraction of a byte a tick leaves carries
    /// into the next: rounded each tick, a cap under 50 B/s (half a byte
    /// per 10 ms tick) granted nothing at all, and a connection under it
    /// (`--max-down 40`, or the daemon's 0 kB/s limit, one byte a second)
    /// stalled for good. Called by one refiller at a time.
    pub fn refill(&self, tick: Duration) {
        let rate = self.rate();
        if rate == 0 {
            return;
        }
        let owed =
            u128::from(rate) * tick.as_nanos() + u128::from(self.owed.load(Ordering::Relaxed));
        let budget = i64::try_from(owed / 1_000_000_000).unwrap_or(i64::MAX);
        self.owed
            .store((owed % 1_000_000_000) as u64, Ordering::Relaxed);
        let ceiling = ((rate as f64 * tick.as_secs_f64()).round() as i64)
            .saturating_mul(2)
            .max(1);
        self.ceiling.store(ceiling, Ordering::Relaxed);
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(budget).min(ceiling))
            });
    }

    /// Takes up to `want` bytes and returns how many were granted: `want`
    /// when unlimited, 0 when `want` is 0 or the bucket is empty (wait for the
    /// next refill), otherwise `min(want, available)`.
    pub fn reserve(&self, want: u64) -> u64 {
        if want == 0 {
            return 0;
        }
        if self.is_unlimited() {
            return want;
        }
        let want = i64::try_from(want).unwrap_or(i64::MAX);
        let mut granted = 0;
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                if t <= 0 {
                    granted = 0;
                    return None;
                }
                granted = want.min(t);
                Some(t - granted)
            });
        granted as u64
    }

    /// Gives back bytes reserved but not used (a read that returned less).
    pub fn refund(&self, unused: u64) {
        if unused == 0 || self.is_unlimited() {
            return;
        }
        let unused = i64::try_from(unused).unwrap_or(i64::MAX);
        let ceiling = self.ceiling.load(Ordering::Relaxed);
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(unused).min(ceiling.max(t)))
            });
    }

    /// Whether it holds all it can carry (nothing taken since a refill
    /// that reached the ceiling); false before the first refill.
    pub fn is_full(&self) -> bool {
        let ceiling = self.ceiling.load(Ordering::Relaxed);
        ceiling > 0 && self.available() >= ceiling
    }

    /// Tokens available now (may be 0; never meaningful when unlimited).
    pub fn available(&self) -> i64 {
        self.tokens.load(Ordering::Acquire)
    }
}

/// Reserves from a chain of buckets (e.g. per-transfer then global) and
/// returns the amount every one of them granted, refunding the excess to
/// those that granted more. Unlimited buckets in the chain cost nothing.
pub fn reserve_chain(chain: &[&TokenBucket], want: u64) -> u64 {
    reserve_chain_or_refuser(chain, want).unwrap_or(0)
}

/// [`reserve_chain`], saying which bucket granted nothing when the chain
/// grants nothing: `Err(i)` for `chain[i]`, the first empty one met (always
/// a capped one, since an unlimited bucket grants whatever is asked). A
/// task that must wait for tokens waits for that bucket's refill: any
/// other may never refill (an unlimited one has no ticker) or not be what
/// stops it. `Ok(0)` only for `want == 0`.
pub fn reserve_chain_or_refuser(chain: &[&TokenBucket], want: u64) -> Result<u64, usize> {
    let mut granted = want;
    let mut refuser = None;
    // What each bucket granted, on the stack for the chains weir builds (a
    // transfer's bucket, then the global one), not allocated per read.
    let mut stack = [0u64; 4];
    let mut heap;
    let taken: &mut [u64] = if chain.len() <= stack.len() {
        &mut stack[..chain.len()]
    } else {
        heap = vec![0u64; chain.len()];
        &mut heap
    };
    for (i, b) in chain.iter().enumerate() {
        taken[i] = b.reserve(granted);
        granted = granted.min(taken[i]);
        if granted == 0 {
            refuser = Some(i);
            break;
        }
    }
    for (b, t) in chain.iter().zip(taken.iter()) {
        b.refund(t - granted.min(*t));
    }
    match refuser {
        Some(i) if want > 0 => Err(i),
        _ => Ok(granted),
    }
}

/// Refunds `unused` bytes to every bucket of a chain.
pub fn refund_chain(chain: &[&TokenBucket], unused: u64) {
    for b in chain {
        b.refund(unused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(10);

    #[test]
    fn unlimited_and_zero_short_circuit() {
        let b = TokenBucket::unlimited();
        assert_eq!(b.reserve(1 << 40), 1 << 40);
        let capped = TokenBucket::new(1000);
        assert_eq!(capped.reserve(0), 0);
        // Zero-length asks leave the bucket alone.
        capped.refill(Duration::from_secs(1));
        assert_eq!(capped.reserve(0), 0);
        assert_eq!(capped.available(), 1000);
    }

    #[test]
    fn carry_over_is_capped_at_two_ticks() {
        let b = TokenBucket::new(1_000_000); // 10_000 per 10 ms tick
        for _ in 0..100 {
            b.refill(TICK);
        }
        assert_eq!(b.available(), 20_000);
        assert_eq!(b.reserve(50_000), 20_000);
        assert_eq!(b.reserve(1), 0);
        b.refill(TICK);
        assert_eq!(b.reserve(50_000), 10_000);
    }

    /// Every rate grants what it promises over time, including rates of
    /// fewer bytes a second than ticks a second (which rounding per tick
    /// made grant nothing).
    #[test]
    fn slow_caps_grant_their_rate() {
        for rate in [1u64, 7, 40, 49, 50, 149, 1_000_003] {
            let b = TokenBucket::new(rate);
            let mut granted = 0u64;
            for _ in 0..1000 {
                b.refill(TICK);
                granted += b.reserve(1 << 30);
            }
            // 1,000 ticks of 10 ms: 10 s.
            let want = rate * 10;
            assert!(
                granted.abs_diff(want) <= 1,
                "{rate} B/s: {granted} vs {want}"
            );
        }
        // Not drained, a slow cap still fills to one byte and no more.
        let b = TokenBucket::new(1);
        for _ in 0..1000 {
            b.refill(TICK);
        }
        assert_eq!(b.available(), 1);
        assert!(b.is_full());
    }

    #[test]
    fn refund_returns_unused() {
        let b = TokenBucket::new(1_000_000);
        b.refill(TICK);
        assert_eq!(b.reserve(8_000), 8_000);
        b.refund(5_000);
        assert_eq!(b.available(), 7_000);
    }

    #[test]
    fn saturated_bucket_grants_the_rate_exactly() {
        // Demand far above the cap for 30 s of ticks: granted = cap * 30 s,
        // give or take the two-tick carry.
        let rate = 20_000_000u64;
        let b = TokenBucket::new(rate);
        let mut granted = 0u64;
        for _ in 0..3000 {
            b.refill(TICK);
            while let g @ 1.. = b.reserve(256 * 1024) {
                granted += g;
            }
        }
        let want = rate * 30;
        assert!(
            granted.abs_diff(want) <= 2 * rate / 100,
            "{granted} vs {want}"
        );
    }

    #[test]
    fn demand_decides_the_split() {
        // A slow consumer that only wants 5 kB per tick leaves the rest to a
        // greedy one: the total still reaches the cap.
        let b = TokenBucket::new(2_000_000); // 20 kB per tick
        let (mut slow, mut fast) = (0, 0);
        for _ in 0..1000 {
            b.refill(TICK);
            slow += b.reserve(5_000);
            fast += b.reserve(1 << 20);
        }
        assert_eq!(slow, 5_000 * 1000);
        assert!(slow + fast >= 2_000_000 * 10 - 20_000, "{}", slow + fast);
    }

    #[test]
    fn chain_grants_the_minimum_and_refunds_the_rest() {
        let global = TokenBucket::new(1_000_000);
        let per = TokenBucket::new(100_000);
        global.refill(TICK);
        per.refill(TICK);
        assert_eq!(reserve_chain(&[&per, &global], 50_000), 1_000);
        assert_eq!(global.available(), 9_000);
        assert_eq!(per.available(), 0);
        let unlimited = TokenBucket::unlimited();
        assert_eq!(reserve_chain(&[&unlimited, &global], 4_000), 4_000);
    }

    #[test]
    fn an_empty_chain_names_the_bucket_that_refused() {
        let unlimited = TokenBucket::unlimited();
        let global = TokenBucket::new(1_000_000);
        let per = TokenBucket::new(1_000_000);
        // The global bucket empty: it refused, whatever comes before it.
        assert_eq!(reserve_chain_or_refuser(&[&unlimited, &global], 1), Err(1));
        per.refill(TICK);
        assert_eq!(reserve_chain_or_refuser(&[&per, &global], 500), Err(1));
        // What the first granted went back.
        assert_eq!(per.available(), 10_000);
        global.refill(TICK);
        assert_eq!(
            reserve_chain_or_refuser(&[&unlimited, &global], 4_000),
            Ok(4_000)
        );
        while per.reserve(1 << 30) > 0 {}
        assert_eq!(reserve_chain_or_refuser(&[&per, &global], 500), Err(0));
        assert_eq!(global.available(), 6_000);
        assert_eq!(reserve_chain_or_refuser(&[&per, &global], 0), Ok(0));
    }

    proptest::proptest! {
        /// Whatever the buckets hold, a chain grants the least any grants
        /// (up to the ask), takes exactly that from each, and names an
        /// empty capped bucket exactly when it grants nothing.
        #[test]
        fn a_chain_takes_the_same_from_every_bucket(
            holds in proptest::collection::vec(proptest::option::of(0u64..50_000), 1..5),
            want in 1u64..60_000,
        ) {
            let buckets: Vec<TokenBucket> = holds
                .iter()
                .map(|h| match h {
                    None => TokenBucket::unlimited(),
                    Some(n) => {
                        let b = TokenBucket::new(1_000_000_000);
                        b.refill(TICK);
                        while b.reserve(1 << 40) > 0 {}
                        b.refund(*n);
                        b
                    }
                })
                .collect();
            let refs: Vec<&TokenBucket> = buckets.iter().collect();
            let least = holds.iter().flatten().copied().min().unwrap_or(u64::MAX).min(want);
            match reserve_chain_or_refuser(&refs, want) {
                Ok(g) => {
                    proptest::prop_assert_eq!(g, least);
                    proptest::prop_assert!(g > 0);
                    for (b, h) in buckets.iter().zip(&holds) {
                        if let Some(n) = h {
                            proptest::prop_assert_eq!(b.available() as u64, n - g);
                        }
                    }
                }
                Err(i) => {
                    proptest::prop_assert_eq!(least, 0);
                    proptest::prop_assert_eq!(holds[i], Some(0));
                    proptest::prop_assert!(holds[..i].iter().all(|h| *h != Some(0)));
                    for (b, h) in buckets.iter().zip(&holds) {
                        if let Some(n) = h {
                            proptest::prop_assert_eq!(b.available() as u64, *n);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn concurrent_reservations_never_overdraw() {
        let b = std::sync::Arc::new(TokenBucket::new(10_000_000));
        b.refill(Duration::from_millis(100)); // 1_000_000 tokens
        let got: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let b = b.clone();
                    s.spawn(move || {
                        let mut n = 0;
                        while let g @ 1.. = b.reserve(1_000) {
                            n += g;
                        }
                        n
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(got, 1_000_000);
    }
}
