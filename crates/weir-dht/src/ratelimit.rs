//! The outgoing query rate limit: a generic cell rate algorithm (one
//! query every `1/rate`, bursts of up to `burst`), in virtual time.

use std::time::{Duration, Instant};

/// A GCRA limiter.
#[derive(Clone, Debug)]
pub(crate) struct RateLimit {
    /// Time one query costs; zero means unlimited.
    interval: Duration,
    /// How far ahead of `now` the theoretical arrival time may run.
    tolerance: Duration,
    /// Theoretical arrival time of the next query.
    tat: Option<Instant>,
}

impl RateLimit {
    /// `rate` queries per second (0 = unlimited), bursts of `burst`.
    pub(crate) fn new(rate: u32, burst: u32) -> Self {
        let interval = if rate == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs(1) / rate
        };
        Self {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            tat: None,
        }
    }

    /// Takes one query's worth if allowed at `now`.
    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        if self.interval.is_zero() {
            return true;
        }
        let tat = self.tat.map_or(now, |t| t.max(now));
        if tat > now + self.tolerance {
            return false;
        }
        self.tat = Some(tat + self.interval);
        true
    }

    /// When the next query will be allowed (`now` if it already is).
    pub(crate) fn next_allowed(&self, now: Instant) -> Instant {
        match self.tat {
            Some(t) if !self.interval.is_zero() => {
                t.checked_sub(self.tolerance).map_or(now, |a| a.max(now))
            }
            _ => now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_burst() {
        let t0 = Instant::now(); // test-epoch
        let mut r = RateLimit::new(100, 10);
        let mut sent = 0;
        let mut now = t0;
        // Over one simulated second, polling every millisecond.
        while now < t0 + Duration::from_secs(1) {
            while r.try_take(now) {
                sent += 1;
            }
            now += Duration::from_millis(1);
        }
        assert!((105..=111).contains(&sent), "{sent}");
        assert!(r.next_allowed(now) >= now);
        assert!(r.next_allowed(now) <= now + Duration::from_millis(10));
        let mut u = RateLimit::new(0, 0);
        assert!((0..10_000).all(|_| u.try_take(t0)));
    }
}
