//! Round-trip time, LEDBAT congestion control and pacing for one connection.
//!
//! - [`Rtt`]: BEP 29's estimator (`rtt += (sample - rtt) / 8`,
//!   `rtt_var += (|rtt - sample| - rtt_var) / 4`, `timeout = max(rtt +
//!   4 rtt_var, 500 ms)`), 1 s before the first sample, doubled per timeout.
//! - [`Ledbat`]: the congestion window. The one-way delay of our packets
//!   comes back in the peer's `timestamp_difference_microseconds`; the
//!   *base delay* is the minimum over the last two minutes (kept as per-minute
//!   minima), the *queuing delay* is the minimum of the last three samples
//!   minus the base (and never more than the round trip). With
//!   `off_target = (target - queuing) / target` clamped to `[-1, 1]`, each
//!   ACK of `acked` bytes moves the window by
//!   `off_target * max_increase_per_rtt * acked / cwnd`, where
//!   `max_increase_per_rtt = max(3000 B, cwnd / 8)`: BEP 29's 3000 bytes per
//!   round trip on slow links, and at most an eighth of the window per round
//!   trip on fast, long ones (a fixed 3000 B would take minutes to fill a
//!   50 MB/s, 150 ms path after one loss). Growth happens only while the
//!   window is what limits the sender; shrinking always. Slow start (window
//!   += bytes acked) runs until the queuing delay passes half the target, a
//!   loss, or the slow-start threshold. A loss halves the window at most once
//!   per round trip (per window of packets sent before the loss); a timeout
//!   collapses it to one packet and restarts slow start.
//! - [`Pacer`]: spreads a window over the round trip (rate `cwnd / rtt`,
//!   twice that in slow start) with a burst allowance of 2 ms of data (at
//!   least 8 packets), so a window is not sent in one burst into a queue.

use std::time::{Duration, Instant};

/// BEP 29's minimum window growth per round trip at zero queuing delay.
pub const MIN_GAIN_PER_RTT: f64 = 3000.0;

/// Share of the window it may grow by per round trip at zero queuing delay.
pub const GAIN_FRACTION: f64 = 1.0 / 8.0;

/// The RTT estimator and retransmission timeout.
#[derive(Clone, Debug)]
pub struct Rtt {
    srtt_us: f64,
    var_us: f64,
    has_sample: bool,
    min_rto: Duration,
    backoff: u32,
    latest_us: f64,
}

impl Rtt {
    /// An estimator with no samples (timeout 1 s) and the given floor.
    pub fn new(min_rto: Duration) -> Self {
        Self {
            srtt_us: 0.0,
            var_us: 0.0,
            has_sample: false,
            min_rto,
            backoff: 0,
            latest_us: 0.0,
        }
    }

    /// Adds one round-trip sample (from a packet sent once) and ends any
    /// timeout backoff.
    pub fn sample(&mut self, rtt: Duration) {
        let s = rtt.as_secs_f64() * 1e6;
        self.latest_us = s;
        if self.has_sample {
            let delta = self.srtt_us - s;
            self.var_us += (delta.abs() - self.var_us) / 4.0;
            self.srtt_us += (s - self.srtt_us) / 8.0;
        } else {
            self.srtt_us = s;
            self.var_us = s / 2.0;
            self.has_sample = true;
        }
        self.backoff = 0;
    }

    /// Smoothed round trip, if there was a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.has_sample
            .then(|| Duration::from_secs_f64(self.srtt_us / 1e6))
    }

    /// The latest sample in microseconds (0 before any).
    pub fn latest_us(&self) -> f64 {
        self.latest_us
    }

    /// Current retransmission timeout: `max(rtt + 4 rtt_var, min)` (1 s
    /// before any sample), doubled per consecutive timeout, at most 60 s.
    pub fn rto(&self) -> Duration {
        let base = if self.has_sample {
            Duration::from_secs_f64((self.srtt_us + 4.0 * self.var_us) / 1e6).max(self.min_rto)
        } else {
            Duration::from_secs(1).max(self.min_rto)
        };
        base.saturating_mul(1 << self.backoff.min(7))
            .min(Duration::from_secs(60))
    }

    /// Doubles the timeout (after a timeout).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(7);
    }
}

/// Minimum of the one-way delay over the last minutes, one bucket a minute.
#[derive(Clone, Debug)]
struct BaseDelay {
    /// Minima of the previous two whole minutes (`None`: no sample).
    past: [Option<u32>; 2],
    current: Option<u32>,
    minute_start: Option<Instant>,
}

/// `a` is below `b` on the wrapping 32-bit microsecond clock.
fn wrap_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

fn wrap_min(a: Option<u32>, b: u32) -> u32 {
    match a {
        Some(a) if wrap_lt(a, b) => a,
        _ => b,
    }
}

impl BaseDelay {
    fn new() -> Self {
        Self {
            past: [None; 2],
            current: None,
            minute_start: None,
        }
    }

    fn add(&mut self, sample: u32, now: Instant) {
        match self.minute_start {
            None => self.minute_start = Some(now),
            Some(start) if now.saturating_duration_since(start) >= Duration::from_secs(60) => {
                self.past = [self.past[1], self.current];
                self.current = None;
                self.minute_start = Some(now);
            }
            Some(_) => {}
        }
        self.current = Some(wrap_min(self.current, sample));
    }

    fn base(&self) -> Option<u32> {
        let mut b = self.current?;
        for p in self.past.into_iter().flatten() {
            b = wrap_min(Some(p), b);
        }
        Some(b)
    }
}

/// LEDBAT congestion window (bytes).
#[derive(Clone, Debug)]
pub struct Ledbat {
    cwnd: f64,
    ssthresh: f64,
    slow_start: bool,
    min_cwnd: f64,
    max_cwnd: f64,
    target_us: f64,
    base: BaseDelay,
    recent: [u32; 3],
    recent_n: usize,
    queuing_us: Option<f64>,
}

impl Ledbat {
    /// A window of `initial` bytes in slow start, never below `min` nor
    /// above `max`, aiming at `target` queuing delay.
    pub fn new(initial: usize, min: usize, max: usize, target: Duration) -> Self {
        let min_cwnd = min as f64;
        let max_cwnd = (max as f64).max(min_cwnd);
        Self {
            cwnd: (initial as f64).clamp(min_cwnd, max_cwnd),
            ssthresh: f64::INFINITY,
            slow_start: true,
            min_cwnd,
            max_cwnd,
            target_us: (target.as_secs_f64() * 1e6).max(1.0),
            base: BaseDelay::new(),
            recent: [0; 3],
            recent_n: 0,
            queuing_us: None,
        }
    }

    /// The window in bytes.
    pub fn window(&self) -> usize {
        self.cwnd as usize
    }

    /// Whether slow start is on.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// The latest queuing delay estimate.
    pub fn queuing_delay(&self) -> Option<Duration> {
        self.queuing_us
            .map(|us| Duration::from_secs_f64(us.max(0.0) / 1e6))
    }

    /// Changes the packet-size-derived floor (after an MTU change).
    pub fn set_min(&mut self, min: usize) {
        self.min_cwnd = (min as f64).min(self.max_cwnd);
        self.cwnd = self.cwnd.max(self.min_cwnd);
    }

    /// Records a one-way delay sample (the peer's
    /// `timestamp_difference_microseconds`, nonzero).
    pub fn delay_sample(&mut self, sample: u32, now: Instant) {
        self.base.add(sample, now);
        self.recent[self.recent_n % 3] = sample;
        self.recent_n += 1;
    }

    fn queuing_now(&self, rtt_us: f64) -> Option<f64> {
        let base = self.base.base()?;
        let n = self.recent_n.min(3);
        let cur = self.recent[..n]
            .iter()
            .copied()
            .reduce(|a, b| if wrap_lt(a, b) { a } else { b })?;
        let q = f64::from(cur.wrapping_sub(base) as i32).max(0.0);
        // The one-way queuing delay cannot exceed the round trip.
        Some(if rtt_us > 0.0 { q.min(rtt_us) } else { q })
    }

    /// An ACK of `acked` new bytes; `cwnd_limited` says whether the window
    /// (not the application or the peer's window) was what held the sender
    /// back; `rtt_us` is this ACK's round-trip sample (0 if none).
    pub fn on_ack(&mut self, acked: usize, cwnd_limited: bool, rtt_us: f64) {
        if acked == 0 {
            return;
        }
        let acked = acked as f64;
        let q = self.queuing_now(rtt_us);
        self.queuing_us = q;
        let off = q.map_or(1.0, |q| {
            ((self.target_us - q) / self.target_us).clamp(-1.0, 1.0)
        });
        if self.slow_start {
            if q.is_some_and(|q| q > self.target_us / 2.0) {
                self.slow_start = false;
                self.ssthresh = self.cwnd;
            } else if cwnd_limited {
                self.cwnd += acked;
                if self.cwnd >= self.ssthresh {
                    self.slow_start = false;
                }
            }
        }
        if !self.slow_start && (off < 0.0 || cwnd_limited) {
            let per_rtt = (self.cwnd * GAIN_FRACTION).max(MIN_GAIN_PER_RTT);
            self.cwnd += off * per_rtt * acked / self.cwnd.max(1.0);
        }
        self.cwnd = self.cwnd.clamp(self.min_cwnd, self.max_cwnd);
    }

    /// Multiplies the window by `factor` (within its bounds): packets grew
    /// by that much in slow start, where the window counts packets.
    pub fn scale(&mut self, factor: f64) {
        if factor.is_finite() && factor > 0.0 {
            self.cwnd = (self.cwnd * factor).clamp(self.min_cwnd, self.max_cwnd);
        }
    }

    /// A loss (not an MTU probe): halves the window and ends slow start.
    /// The caller limits this to once per round trip.
    pub fn on_loss(&mut self) {
        self.cwnd = (self.cwnd / 2.0).max(self.min_cwnd);
        self.ssthresh = self.cwnd;
        self.slow_start = false;
    }

    /// A retransmission timeout: the window collapses to `one_packet` and
    /// slow start begins again up to half the old window.
    pub fn on_timeout(&mut self, one_packet: usize) {
        self.ssthresh = (self.cwnd / 2.0).max(self.min_cwnd);
        self.cwnd = (one_packet as f64).clamp(1.0, self.max_cwnd);
        self.slow_start = true;
    }
}

/// Token-bucket pacing of new packets.
#[derive(Clone, Debug)]
pub struct Pacer {
    tokens: f64,
    last: Option<Instant>,
    rate: f64,
    burst: f64,
}

impl Default for Pacer {
    fn default() -> Self {
        Self {
            tokens: 0.0,
            last: None,
            rate: f64::INFINITY,
            burst: f64::INFINITY,
        }
    }
}

impl Pacer {
    /// Sets the rate from the window, the smoothed round trip and the
    /// packet size.
    pub fn set(&mut self, cwnd: usize, srtt: Option<Duration>, slow_start: bool, packet: usize) {
        let Some(srtt) = srtt.filter(|d| !d.is_zero()) else {
            self.rate = f64::INFINITY;
            self.burst = f64::INFINITY;
            return;
        };
        let gain = if slow_start { 2.0 } else { 1.25 };
        self.rate = gain * cwnd as f64 / srtt.as_secs_f64();
        self.burst = (self.rate * 0.002).max(8.0 * packet as f64);
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        } else {
            self.tokens = self.burst;
        }
        self.last = Some(now);
    }

    /// When a packet may leave: `None` now, else the instant.
    pub fn wait(&mut self, now: Instant) -> Option<Instant> {
        if self.rate.is_infinite() {
            return None;
        }
        self.refill(now);
        if self.tokens >= 0.0 {
            None
        } else {
            // Rounded up, so that at that instant the tokens are there.
            let ns = (-self.tokens / self.rate * 1e9).ceil() as u64 + 1;
            Some(now + Duration::from_nanos(ns))
        }
    }

    /// Charges a packet of `bytes` that left at `now`.
    pub fn sent(&mut self, bytes: usize, now: Instant) {
        if self.rate.is_infinite() {
            return;
        }
        self.refill(now);
        self.tokens -= bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now() // test-epoch
    }

    #[test]
    fn rto_follows_bep29_with_floor_and_backoff() {
        let mut r = Rtt::new(Duration::from_millis(500));
        assert_eq!(r.rto(), Duration::from_secs(1));
        r.sample(Duration::from_millis(100));
        // rtt 100, var 50: 100 + 200 = 300 -> floor 500.
        assert_eq!(r.rto(), Duration::from_millis(500));
        for _ in 0..50 {
            r.sample(Duration::from_millis(400));
        }
        let rto = r.rto();
        assert!(
            rto > Duration::from_millis(400) && rto < Duration::from_millis(600),
            "{rto:?}"
        );
        r.back_off();
        r.back_off();
        assert!(r.rto() >= rto * 4 - Duration::from_millis(1) && r.rto() <= rto * 4);
        r.sample(Duration::from_millis(400));
        assert!(r.rto() < rto * 2);
        for _ in 0..20 {
            r.back_off();
        }
        assert_eq!(r.rto(), Duration::from_secs(60));
    }

    #[test]
    fn slow_start_doubles_then_delay_ends_it() {
        let now = t0();
        let mut l = Ledbat::new(10_000, 2_800, 10 << 20, Duration::from_millis(100));
        l.delay_sample(1_000, now);
        l.on_ack(10_000, true, 50_000.0);
        assert_eq!(l.window(), 20_000);
        assert!(l.in_slow_start());
        // Queuing delay of 60 ms (> target / 2) ends slow start.
        l.delay_sample(61_000, now);
        l.delay_sample(61_000, now);
        l.delay_sample(61_000, now);
        l.on_ack(1_000, true, 200_000.0);
        assert!(!l.in_slow_start());
    }

    #[test]
    fn window_grows_below_target_and_shrinks_above() {
        let now = t0();
        let mut l = Ledbat::new(100_000, 2_800, 10 << 20, Duration::from_millis(100));
        l.on_loss(); // leave slow start: 50_000
        assert_eq!(l.window(), 50_000);
        l.delay_sample(5_000, now);
        // Zero queuing: one window of ACKs grows it by max(3000, w/8).
        let w0 = l.window() as f64;
        for _ in 0..50 {
            l.on_ack(1_000, true, 50_000.0);
        }
        let w1 = l.window() as f64;
        assert!(w1 > w0 + 2_500.0 && w1 < w0 + 7_000.0, "{w0} -> {w1}");
        // Not window-limited: no growth.
        l.on_ack(10_000, false, 50_000.0);
        assert_eq!(l.window() as f64, w1.floor());
        // 200 ms queuing (off_target -1): shrinks even when app-limited.
        for _ in 0..3 {
            l.delay_sample(205_000, now);
        }
        for _ in 0..50 {
            l.on_ack(1_000, false, 400_000.0);
        }
        let w2 = l.window() as f64;
        assert!(w2 < w1 - 2_500.0, "{w1} -> {w2}");
        for _ in 0..10_000 {
            l.on_ack(1_000, false, 400_000.0);
        }
        assert_eq!(l.window(), 2_800);
    }

    #[test]
    fn scaling_follows_the_packets_within_the_bounds() {
        let mut c = Ledbat::new(14_000, 2_800, 1 << 20, Duration::from_millis(100));
        c.scale(65_000.0 / 1_400.0);
        assert_eq!(c.window(), 650_000);
        c.scale(100.0);
        assert_eq!(c.window(), 1 << 20, "capped at the most");
        c.scale(f64::NAN);
        c.scale(0.0);
        assert_eq!(c.window(), 1 << 20, "nonsense factors change nothing");
    }

    #[test]
    fn timeout_collapses_to_one_packet() {
        let mut l = Ledbat::new(100_000, 2_800, 10 << 20, Duration::from_millis(100));
        l.on_timeout(1_400);
        assert_eq!(l.window(), 1_400);
        assert!(l.in_slow_start());
        l.on_ack(1_400, true, 0.0);
        assert_eq!(l.window(), 2_800);
    }

    #[test]
    fn base_delay_forgets_after_two_minutes() {
        let now = t0();
        let mut b = BaseDelay::new();
        b.add(1_000, now);
        b.add(5_000, now + Duration::from_secs(61));
        assert_eq!(b.base(), Some(1_000));
        b.add(6_000, now + Duration::from_secs(122));
        assert_eq!(b.base(), Some(1_000));
        b.add(7_000, now + Duration::from_secs(183));
        assert_eq!(b.base(), Some(5_000));
        // Wrapping clock.
        let mut w = BaseDelay::new();
        w.add(u32::MAX - 10, now);
        w.add(5, now);
        assert_eq!(w.base(), Some(u32::MAX - 10));
    }

    #[test]
    fn pacer_spreads_packets() {
        let now = t0();
        let mut p = Pacer::default();
        assert_eq!(p.wait(now), None);
        // 1 MB window over 100 ms in congestion avoidance: 12.5 MB/s.
        p.set(1_000_000, Some(Duration::from_millis(100)), false, 1_000);
        let mut sent = 0usize;
        let mut t = now;
        let end = now + Duration::from_millis(100);
        while t < end {
            match p.wait(t) {
                None => {
                    p.sent(1_000, t);
                    sent += 1_000;
                }
                Some(at) => t = at,
            }
        }
        // 100 ms at 12.5 MB/s plus the 25 KB burst.
        assert!((1_200_000..=1_300_000).contains(&sent), "{sent}");
    }
}
