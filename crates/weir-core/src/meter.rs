//! Rate meters.
//!
//! A [`RateMeter`] keeps one-second buckets over a span and reads the bytes
//! in its window divided by the time it has actually observed,
//! `min(age, span)`. A meter with a 30 s span therefore reads a new
//! connection's true rate from its first second, where a meter that divides
//! by the whole span (rtorrent's, see `SEEDS.md` section 3) reads 1/30 of it.
//!
//! [`TransferMeter`] pairs a short meter (pipe sizing) with a longer one
//! (display) and a byte total. Both are fed by one [`TransferMeter::record`]
//! call, made from the one place every payload byte passes through, so no
//! path can feed one and miss the other.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The window the request pipeline reads: short, so it tracks the present.
pub const RECENT_SPAN: Duration = Duration::from_secs(5);
/// The window displays read: long enough to be steady.
pub const DISPLAY_SPAN: Duration = Duration::from_secs(20);
/// The shortest observation a reading divides by: one early burst does not
/// read as an absurd rate.
const MIN_OBSERVED: Duration = Duration::from_millis(100);

/// Bytes per second over a sliding window of one-second buckets.
#[derive(Clone, Debug)]
pub struct RateMeter {
    span_secs: u64,
    origin: Instant,
    /// (second index since origin, bytes in that second), oldest first.
    buckets: VecDeque<(u64, u64)>,
    total: u64,
}

impl RateMeter {
    /// A meter that starts observing at `now` with a window of `span`
    /// (rounded up to whole seconds, at least one).
    pub fn new(now: Instant, span: Duration) -> Self {
        let span_secs = span.as_secs() + u64::from(span.subsec_nanos() > 0);
        Self {
            span_secs: span_secs.max(1),
            origin: now,
            buckets: VecDeque::with_capacity(span_secs as usize + 1),
            total: 0,
        }
    }

    /// Adds `bytes` observed at `now`.
    pub fn record(&mut self, now: Instant, bytes: u64) {
        let sec = self.second(now);
        self.total += bytes;
        match self.buckets.back_mut() {
            Some((s, b)) if *s == sec => *b += bytes,
            _ => self.buckets.push_back((sec, bytes)),
        }
        self.expire(sec);
    }

    /// The rate in bytes per second at `now`: the bytes inside the window
    /// divided by the time observed, `min(age, span)`.
    pub fn rate(&self, now: Instant) -> f64 {
        let age = now.saturating_duration_since(self.origin);
        let sec = self.second(now);
        let oldest = sec.saturating_sub(self.span_secs - 1);
        let bytes: u64 = self
            .buckets
            .iter()
            .filter(|(s, _)| *s >= oldest)
            .map(|(_, b)| *b)
            .sum();
        // The window covers the current partial second and the span-1 whole
        // seconds before it; a meter younger than that has seen only `age`.
        let frac = age.saturating_sub(Duration::from_secs(sec));
        let window = Duration::from_secs(self.span_secs - 1) + frac;
        let observed = age.min(window).max(MIN_OBSERVED);
        bytes as f64 / observed.as_secs_f64()
    }

    /// Every byte ever recorded.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// When the meter started observing.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    fn expire(&mut self, sec: u64) {
        let oldest = sec.saturating_sub(self.span_secs - 1);
        while matches!(self.buckets.front(), Some((s, _)) if *s < oldest) {
            self.buckets.pop_front();
        }
    }
}

/// The meters of one direction of one peer (or transfer): a recent meter for
/// pipe sizing, a display meter, and the total, all fed by one call.
#[derive(Clone, Debug)]
pub struct TransferMeter {
    recent: RateMeter,
    display: RateMeter,
}

impl TransferMeter {
    /// Meters that start observing at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            recent: RateMeter::new(now, RECENT_SPAN),
            display: RateMeter::new(now, DISPLAY_SPAN),
        }
    }

    /// Records payload bytes. The only way bytes reach either meter.
    pub fn record(&mut self, now: Instant, bytes: u64) {
        self.recent.record(now, bytes);
        self.display.record(now, bytes);
    }

    /// The recent rate (bytes/s over at most [`RECENT_SPAN`]): what pipe
    /// sizing reads.
    pub fn recent_rate(&self, now: Instant) -> f64 {
        self.recent.rate(now)
    }

    /// The display rate (bytes/s over at most [`DISPLAY_SPAN`]).
    pub fn display_rate(&self, now: Instant) -> f64 {
        self.display.rate(now)
    }

    /// Every byte recorded.
    pub fn total(&self) -> u64 {
        self.recent.total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(m: &mut RateMeter, t0: Instant, rate: u64, from_ms: u64, to_ms: u64) {
        // 10 ms ticks of rate/100 bytes.
        let mut t = from_ms;
        while t < to_ms {
            m.record(t0 + Duration::from_millis(t), rate / 100);
            t += 10;
        }
    }

    #[test]
    fn new_connection_reads_true_rate_in_first_second() {
        let t0 = Instant::now(); // test-epoch
        let mut m = RateMeter::new(t0, Duration::from_secs(30));
        feed(&mut m, t0, 10_000_000, 0, 1000);
        let r = m.rate(t0 + Duration::from_millis(1000));
        // A divide-by-span meter would read 1/30 of it (333 kB/s).
        assert!((r - 10e6).abs() / 10e6 < 0.02, "read {r}");
        let mut half = RateMeter::new(t0, Duration::from_secs(30));
        feed(&mut half, t0, 10_000_000, 0, 500);
        let r = half.rate(t0 + Duration::from_millis(500));
        assert!((r - 10e6).abs() / 10e6 < 0.05, "read {r} at 0.5 s");
    }

    #[test]
    fn steady_rate_over_many_spans() {
        let t0 = Instant::now(); // test-epoch
        let mut m = RateMeter::new(t0, RECENT_SPAN);
        let mut from = 0;
        for at in [10_000u64, 30_000, 59_990] {
            feed(&mut m, t0, 5_000_000, from, at);
            from = at;
            let r = m.rate(t0 + Duration::from_millis(at));
            assert!((r - 5e6).abs() / 5e6 < 0.05, "read {r} at {at} ms");
        }
    }

    #[test]
    fn rate_falls_to_zero_after_span_of_silence() {
        let t0 = Instant::now(); // test-epoch
        let mut m = RateMeter::new(t0, RECENT_SPAN);
        feed(&mut m, t0, 1_000_000, 0, 3000);
        assert!(m.rate(t0 + Duration::from_secs(3)) > 900_000.0);
        assert_eq!(m.rate(t0 + Duration::from_secs(9)), 0.0);
        assert_eq!(m.total(), 3 * 1_000_000);
    }

    #[test]
    fn recent_meter_tracks_a_change_within_its_span() {
        let t0 = Instant::now(); // test-epoch
        let mut tm = TransferMeter::new(t0);
        let mut t = 0;
        while t < 30_000 {
            let rate = if t < 20_000 { 1_000_000 } else { 4_000_000 };
            tm.record(t0 + Duration::from_millis(t), rate / 100);
            t += 10;
        }
        let now = t0 + Duration::from_millis(30_000);
        let recent = tm.recent_rate(now);
        let display = tm.display_rate(now);
        assert!((recent - 4e6).abs() / 4e6 < 0.05, "recent {recent}");
        // The display meter still remembers the slower half of its window.
        assert!(display < 3.0e6 && display > 2.0e6, "display {display}");
    }

    proptest::proptest! {
        #[test]
        fn reading_never_exceeds_bytes_over_min_observed(
            events in proptest::collection::vec((0u64..20_000, 0u64..1_000_000), 0..200),
            span in 1u64..40,
        ) {
            let t0 = Instant::now(); // test-epoch
            let mut m = RateMeter::new(t0, Duration::from_secs(span));
            let mut events = events;
            events.sort();
            let mut sum = 0u64;
            for (ms, b) in &events {
                m.record(t0 + Duration::from_millis(*ms), *b);
                sum += b;
            }
            let r = m.rate(t0 + Duration::from_millis(20_000));
            proptest::prop_assert!(r >= 0.0);
            proptest::prop_assert!(r <= sum as f64 / MIN_OBSERVED.as_secs_f64() + 1.0);
            proptest::prop_assert_eq!(m.total(), sum);
        }
    }
}
