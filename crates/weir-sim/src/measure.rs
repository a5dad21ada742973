//! Measurements: cumulative bytes over virtual time.

use std::time::Duration;

/// A cumulative byte count sampled whenever it changes.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// (time, total bytes up to and including that time), time ascending.
    points: Vec<(Duration, u64)>,
}

impl Series {
    /// Adds `bytes` observed at `at` (not earlier than the last point).
    pub fn add(&mut self, at: Duration, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let total = self.total() + bytes;
        match self.points.last_mut() {
            Some((t, b)) if *t == at => *b = total,
            _ => self.points.push((at, total)),
        }
    }

    /// Every byte counted.
    pub fn total(&self) -> u64 {
        self.points.last().map_or(0, |p| p.1)
    }

    /// The bytes counted up to and including `t`.
    pub fn at(&self, t: Duration) -> u64 {
        let i = self.points.partition_point(|p| p.0 <= t);
        if i == 0 { 0 } else { self.points[i - 1].1 }
    }

    /// Bytes per second between `from` and `to`.
    pub fn rate(&self, from: Duration, to: Duration) -> f64 {
        let secs = to.saturating_sub(from).as_secs_f64();
        if secs == 0.0 {
            return 0.0;
        }
        (self.at(to) - self.at(from)) as f64 / secs
    }

    /// When the first byte was counted.
    pub fn first(&self) -> Option<Duration> {
        self.points.first().map(|p| p.0)
    }

    /// When the count first reached `bytes`.
    pub fn reached(&self, bytes: u64) -> Option<Duration> {
        let i = self.points.partition_point(|p| p.1 < bytes);
        self.points.get(i).map(|p| p.0)
    }

    /// The samples.
    pub fn points(&self) -> &[(Duration, u64)] {
        &self.points
    }
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_reads() {
        let s_ = Duration::from_secs;
        let mut s = Series::default();
        s.add(s_(1), 100);
        s.add(s_(1), 50);
        s.add(s_(3), 150);
        assert_eq!(s.at(s_(0)), 0);
        assert_eq!(s.at(s_(1)), 150);
        assert_eq!(s.at(s_(2)), 150);
        assert_eq!(s.at(s_(9)), 300);
        assert_eq!(s.rate(s_(1), s_(3)), 75.0);
        assert_eq!(s.first(), Some(s_(1)));
        assert_eq!(s.reached(151), Some(s_(3)));
        assert_eq!(s.reached(301), None);
    }
}
