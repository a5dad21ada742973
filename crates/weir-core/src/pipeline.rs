//! Request pipeline sizing (`SEEDS.md` sections 1 and 3).
//!
//! How many requests to keep in flight to one peer. The answer is the
//! bandwidth-delay product: the peer's recent rate times the request round
//! trip, where the round trip is measured from request to block, so it
//! includes the peer's disk and queueing time. A new peer starts small and
//! grows by [`SLOW_START_GAIN`] requests per block received (slow start:
//! the depth triples every round trip) until its rate stops rising; from then on the depth follows
//! the rate, read from a short window so it tracks the present.
//!
//! The round trip used is the smallest one seen on the connection: a
//! sample taken while the pipe is full includes the time the request waited
//! behind the others, and sizing from it would feed on itself.
//!
//! The depth is clamped to `[min_depth, min(max_depth, peer's reqq)]`, and
//! the pipe is topped up in batches: nothing is sent until a quarter of the
//! target has drained, then it is filled to the target at once.
//!
//! The same sizing serves BitTorrent blocks, metadata pieces and eD2k
//! blocks; only [`PipelineConfig::block_len`] differs.

use std::time::{Duration, Instant};

/// The largest batch of requests the hysteresis waits for: a deep pipe is
/// refilled every 64 blocks, not every quarter of its depth, so it never
/// runs far below its target.
pub const MAX_BATCH: u32 = 64;

/// Requests added per block received in slow start: the depth triples
/// every round trip. Two per block reach a 150 ms, 50 MB/s path's 460
/// blocks from 64 in two round trips instead of three (the simulator's
/// ramp: 92.9% -> 94.9% of the link at 5 s, 90% of its rate 0.71 -> 0.54 s
/// after the first byte); the overshoot is bounded by the queueing check
/// in [`Pipeline::on_block`], which ends slow start as soon as the peer's
/// round trip grows.
pub const SLOW_START_GAIN: u32 = 2;

/// Queueing delay (beyond twice the smallest round trip) that ends slow
/// start: absorbs ordinary jitter on short paths.
const QUEUE_DELAY_MARGIN: Duration = Duration::from_millis(5);

/// Tunables of a pipeline.
#[derive(Clone, Copy, Debug)]
pub struct PipelineConfig {
    /// Bytes one request asks for.
    pub block_len: u32,
    /// Never fewer requests in flight than this (when there is work).
    pub min_depth: u32,
    /// Never more than this, whatever the peer allows.
    pub max_depth: u32,
    /// Depth at the start of slow start.
    pub initial_depth: u32,
    /// The pipe covers this many round trips at the recent rate.
    pub rtt_factor: f64,
    /// And at least this long at the recent rate: absorbs a peer's bursty
    /// service (disk reads, send buffers) when the round trip is tiny, and
    /// keeps a peer that serves in batches from starving. Transmission
    /// answers requests on its own timers (its bandwidth period is 500 ms),
    /// so its round trip stays long however few requests wait; its rate is
    /// then proportional to our depth, and a depth sized from the smallest
    /// round trip shrank every second (to ~100 kB/s, seen in interop). At
    /// one second of its rate the next depth is larger than the last
    /// whenever the peer answers within a second on average.
    pub min_queue_time: Duration,
    /// Slow start ends when one interval's rate grew by less than this
    /// fraction over the previous interval's.
    pub slow_start_exit_growth: f64,
}

impl PipelineConfig {
    /// Settings for `block_len`-byte requests. Slow start begins with about
    /// 1 MiB asked (64 BitTorrent blocks): a round trip's worth for a peer
    /// of a few MB/s at tens of milliseconds, and a head start of several
    /// doublings for a fast distant one.
    pub fn new(block_len: u32) -> Self {
        Self {
            block_len,
            min_depth: 2,
            max_depth: 4096,
            initial_depth: ((1u32 << 20) / block_len.max(1)).clamp(4, 64),
            rtt_factor: 2.0,
            min_queue_time: Duration::from_secs(1),
            slow_start_exit_growth: 0.10,
        }
    }
}

/// The request pipeline of one peer connection.
#[derive(Clone, Debug)]
pub struct Pipeline {
    cfg: PipelineConfig,
    target: u32,
    peer_limit: u32,
    slow_start: bool,
    min_rtt: Option<Duration>,
    srtt: Option<Duration>,
    interval_start: Option<Instant>,
    interval_bytes: u64,
    last_interval_rate: f64,
}

impl Pipeline {
    /// A pipeline in slow start at the initial depth.
    pub fn new(cfg: PipelineConfig) -> Self {
        Self {
            target: cfg.initial_depth.max(cfg.min_depth),
            cfg,
            peer_limit: u32::MAX,
            slow_start: true,
            min_rtt: None,
            srtt: None,
            interval_start: None,
            interval_bytes: 0,
            last_interval_rate: 0.0,
        }
    }

    /// The most requests the peer says it will queue (BitTorrent `reqq`).
    pub fn set_peer_limit(&mut self, limit: u32) {
        self.peer_limit = limit.max(1);
    }

    /// A requested block arrived, `rtt` after its request was sent.
    pub fn on_block(&mut self, now: Instant, rtt: Duration, bytes: u32) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        // Requests have started to queue at the peer (its round trip grew
        // well past the smallest seen): the pipe is already deeper than the
        // path, so slow start stops here instead of waiting for the rate to
        // stop rising, and the next tick sizes the depth from the rate.
        if self.slow_start
            && self
                .min_rtt
                .is_some_and(|m| rtt > m * 2 + QUEUE_DELAY_MARGIN)
        {
            self.slow_start = false;
        }
        self.srtt = Some(match self.srtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
        if self.interval_start.is_none() {
            self.interval_start = Some(now);
        }
        self.interval_bytes += u64::from(bytes);
        if self.slow_start {
            self.target = self.target.saturating_add(SLOW_START_GAIN);
        }
    }

    /// Periodic re-sizing (about once per second, and once per round trip
    /// during slow start is fine too): `recent_rate` is the peer's rate from
    /// its short-window meter.
    pub fn on_tick(&mut self, now: Instant, recent_rate: f64) {
        let Some(start) = self.interval_start else {
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        let min_interval = self
            .srtt
            .unwrap_or(Duration::ZERO)
            .max(Duration::from_millis(250));
        if elapsed < min_interval {
            return;
        }
        let interval_rate = self.interval_bytes as f64 / elapsed.as_secs_f64();
        self.interval_start = Some(now);
        self.interval_bytes = 0;
        if self.slow_start {
            let grew =
                interval_rate > self.last_interval_rate * (1.0 + self.cfg.slow_start_exit_growth);
            self.last_interval_rate = interval_rate;
            if grew {
                return;
            }
            self.slow_start = false;
        } else {
            self.last_interval_rate = interval_rate;
        }
        // The recent meter averages over seconds and lags a rising rate;
        // the last interval lags nothing. Size from the larger.
        let rate = recent_rate.max(interval_rate);
        self.target = self.bdp_depth(rate);
    }

    /// Requests timed out: the peer is slower than we thought.
    pub fn on_timeout(&mut self) {
        self.slow_start = false;
        self.target = (self.target / 2).max(self.cfg.min_depth);
    }

    /// The peer choked us: whatever we were measuring is over.
    pub fn on_choke(&mut self) {
        self.slow_start = false;
        self.interval_start = None;
        self.interval_bytes = 0;
    }

    /// The number of requests to keep in flight now.
    pub fn depth(&self) -> u32 {
        let hi = self.cfg.max_depth.min(self.peer_limit).max(1);
        let lo = self.cfg.min_depth.min(hi);
        self.target.clamp(lo, hi)
    }

    /// How many requests to send now with `outstanding` in flight: 0 until a
    /// batch has drained (a quarter of the depth, at most [`MAX_BATCH`]:
    /// hysteresis), then enough to refill.
    pub fn top_up(&self, outstanding: u32) -> u32 {
        let depth = self.depth();
        let low_water = depth - (depth / 4).clamp(1, MAX_BATCH);
        if outstanding > low_water {
            0
        } else {
            depth - outstanding
        }
    }

    /// Whether the pipeline is still in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// The smallest request round trip seen.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The smoothed request round trip (queueing included).
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    fn bdp_depth(&self, rate: f64) -> u32 {
        let rtt = self.min_rtt.unwrap_or(Duration::from_millis(100));
        let covered =
            (rtt.as_secs_f64() * self.cfg.rtt_factor).max(self.cfg.min_queue_time.as_secs_f64());
        let blocks = rate * covered / f64::from(self.cfg.block_len);
        (blocks.ceil() as u32).saturating_add(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u32 = 16 * 1024;

    /// A peer serving at `rate` bytes/s with a fixed `rtt`: each round trip
    /// delivers what was asked at its start, at most rate * rtt.
    fn run(rtt: Duration, rate: f64, secs: f64, reqq: u32) -> (Pipeline, Vec<f64>) {
        let t0 = Instant::now(); // test-epoch
        let mut p = Pipeline::new(PipelineConfig::new(BLOCK));
        p.set_peer_limit(reqq);
        let mut meter = crate::meter::TransferMeter::new(t0);
        let mut t = Duration::ZERO;
        let mut per_rtt = Vec::new();
        while t.as_secs_f64() < secs {
            let asked = p.depth();
            let cap = (rate * rtt.as_secs_f64() / f64::from(BLOCK)) as u32;
            let got = asked.min(cap.max(1));
            t += rtt;
            let now = t0 + t;
            for _ in 0..got {
                p.on_block(now, rtt, BLOCK);
                meter.record(now, u64::from(BLOCK));
            }
            p.on_tick(now, meter.recent_rate(now));
            per_rtt.push(f64::from(got * BLOCK) / rtt.as_secs_f64());
        }
        (p, per_rtt)
    }

    #[test]
    fn distant_peer_reaches_link_rate_within_two_seconds() {
        let rtt = Duration::from_millis(150);
        let rate = 50e6;
        let (p, per_rtt) = run(rtt, rate, 6.0, 2000);
        // 2 s is 13 round trips; the 13th must run at >= 90% of the link.
        assert!(per_rtt[12] >= 0.9 * rate, "{:?}", &per_rtt[..14]);
        assert!(!p.in_slow_start());
        // And the steady depth covers the bandwidth-delay product.
        let bdp = (rate * rtt.as_secs_f64() / f64::from(BLOCK)) as u32;
        assert!(p.depth() >= bdp, "depth {} < bdp {bdp}", p.depth());
    }

    #[test]
    fn slow_start_triples_the_depth_every_round_trip() {
        // A fast distant peer: each round trip delivers everything asked.
        let (rtt, rate) = (Duration::from_millis(150), 50e6);
        let start = PipelineConfig::new(BLOCK).initial_depth;
        let (_, per_rtt) = run(rtt, rate, 0.3, 2000);
        let blocks = |r: f64| (r * rtt.as_secs_f64() / f64::from(BLOCK)).round() as u32;
        assert_eq!(blocks(per_rtt[0]), start, "{per_rtt:?}");
        assert_eq!(blocks(per_rtt[1]), start * 3, "{per_rtt:?}");
    }

    #[test]
    fn depth_is_clamped_to_peer_limit_and_minimum() {
        let (p, _) = run(Duration::from_millis(150), 50e6, 4.0, 250);
        assert_eq!(p.depth(), 250);
        let mut q = Pipeline::new(PipelineConfig::new(BLOCK));
        for _ in 0..10 {
            q.on_timeout();
        }
        assert_eq!(q.depth(), 2);
    }

    #[test]
    fn slow_peer_gets_a_shallow_pipe() {
        let (p, _) = run(Duration::from_millis(50), 200e3, 10.0, 2000);
        // The model delivers at least one block per round trip, so the peer
        // runs at 328 kB/s: over max(2 x 50 ms, 1 s) that is 20 blocks (+2),
        // against the 2,000 the peer would accept.
        assert!(p.depth() <= 24, "depth {}", p.depth());
        assert!(!p.in_slow_start());
    }

    #[test]
    fn batching_peer_grows_back_from_a_collapsed_pipe() {
        // A peer that answers everything asked at its next 500 ms pulse
        // (Transmission's pattern): its rate is our depth per pulse. One
        // block once came back after 1 ms, so the smallest round trip says
        // nothing about the pulse. From the minimum depth the pipe must grow
        // back to the peer's limit, not settle at a few blocks.
        let t0 = Instant::now(); // test-epoch
        let mut p = Pipeline::new(PipelineConfig::new(BLOCK));
        p.set_peer_limit(512);
        let mut meter = crate::meter::TransferMeter::new(t0);
        p.on_block(t0, Duration::from_millis(1), BLOCK);
        for _ in 0..10 {
            p.on_timeout();
        }
        assert_eq!(p.depth(), 2);
        let pulse = Duration::from_millis(500);
        let mut t = Duration::ZERO;
        while t < Duration::from_secs(10) {
            let asked = p.depth();
            t += pulse;
            let now = t0 + t;
            for _ in 0..asked {
                p.on_block(now, pulse, BLOCK);
                meter.record(now, u64::from(BLOCK));
            }
            p.on_tick(now, meter.recent_rate(now));
        }
        assert_eq!(p.depth(), 512, "the pipe stayed shallow");
    }

    #[test]
    fn top_up_waits_for_a_quarter_to_drain() {
        let mut p = Pipeline::new(PipelineConfig::new(BLOCK));
        p.target = 100;
        assert_eq!(p.top_up(100), 0);
        assert_eq!(p.top_up(76), 0);
        assert_eq!(p.top_up(75), 25);
        assert_eq!(p.top_up(0), 100);
        p.target = 1000;
        assert_eq!(p.top_up(937), 0);
        assert_eq!(p.top_up(936), 64);
        p.target = 2;
        assert_eq!(p.top_up(2), 0);
        assert_eq!(p.top_up(1), 1);
    }
}
