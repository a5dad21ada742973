//! The pure parts of `weir bench hostile`: reading `/proc/<pid>/status`
//! samples, summarising a run's resident sizes, and judging a row against
//! issue 8's goals. Unit-tested here; the scenario only measures.

use crate::common::status_field;

/// Goal: what one hostile connection may add to weir's resident size, MiB.
pub const MAX_ADDED_ONE_MIB: f64 = 4.0;
/// Goal: what 1,000 hostile connections may add in all, MiB.
pub const MAX_ADDED_MANY_MIB: f64 = 256.0;
/// Goal: the share of its rate an honest leecher keeps under a flood.
pub const MIN_RATE_KEPT: f64 = 0.90;

/// One reading of a process's memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds since sampling began.
    pub t: f64,
    /// `VmRSS`, KiB.
    pub rss_kib: f64,
    /// `VmHWM` (peak since start or the last `clear_refs` reset), KiB.
    pub hwm_kib: f64,
}

/// `(VmRSS, VmHWM)` in KiB from the text of `/proc/<pid>/status`; `None`
/// when either line is missing or garbled (the process is gone, or a
/// zombie without memory lines).
pub fn parse_status(text: &str) -> Option<(f64, f64)> {
    Some((status_field(text, "VmRSS:")?, status_field(text, "VmHWM:")?))
}

/// A run's resident sizes, MiB.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RssSummary {
    /// Just before the flood began.
    pub before: f64,
    /// The highest while it lasted (sampled `VmRSS`, or `VmHWM` when
    /// higher: it catches peaks between samples).
    pub peak: f64,
    /// After it ended (and weir had time to free what it held).
    pub after: f64,
}

/// Summarises `samples` for a flood from `start` to `end` seconds: the
/// last sample at or before `start` (none: the first sample), the peak of
/// the samples in `[start, end]`, and the last sample. `None` without
/// samples.
pub fn summarize(samples: &[Sample], start: f64, end: f64) -> Option<RssSummary> {
    let first = samples.first()?;
    let before = samples
        .iter()
        .rev()
        .find(|s| s.t <= start)
        .unwrap_or(first)
        .rss_kib;
    let during = samples.iter().filter(|s| s.t >= start && s.t <= end);
    let peak = during
        .map(|s| s.rss_kib.max(s.hwm_kib))
        .fold(before, f64::max);
    let after = samples.last()?.rss_kib;
    let mib = |k: f64| k / 1024.0;
    Some(RssSummary {
        before: mib(before),
        peak: mib(peak),
        after: mib(after),
    })
}

/// Whether a row met the goals, with the figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// What the flood added at its peak over the run without it, MiB.
    pub added_mib: f64,
    /// The goal for `added_mib`.
    pub max_added_mib: f64,
    /// The honest leecher's rate under the flood over its rate without
    /// (`None`: not measured).
    pub rate_kept: Option<f64>,
}

impl Verdict {
    /// Memory goal met (a NaN figure is not).
    pub fn memory_met(&self) -> bool {
        self.added_mib <= self.max_added_mib
    }

    /// Rate goal met (`None`: not measured).
    pub fn rate_met(&self) -> Option<bool> {
        self.rate_kept.map(|k| k >= MIN_RATE_KEPT)
    }

    /// One line for the report: each goal, met or NOT met, with the figure.
    pub fn line(&self, flood: &str) -> String {
        let met = |m: bool| if m { "met" } else { "NOT met" };
        let rate = match (self.rate_kept, self.rate_met()) {
            (Some(k), Some(m)) => format!(
                "leecher kept {:.0}% of its rate (goal >= {:.0}%): {}",
                k * 100.0,
                MIN_RATE_KEPT * 100.0,
                met(m)
            ),
            _ => "leecher rate not measured".to_string(),
        };
        format!(
            "{flood}: added {:.1} MiB at peak (goal <= {:.0} MiB): {}; {rate}",
            self.added_mib,
            self.max_added_mib,
            met(self.memory_met())
        )
    }
}

/// Judges a flood's row against the run without a flood on the same
/// target: `peak` and `base_peak` in MiB, rates in bytes/s (NaN or a
/// non-positive baseline: not measured).
pub fn judge(peak: f64, base_peak: f64, rate: f64, base_rate: f64, max_added_mib: f64) -> Verdict {
    let rate_kept =
        (base_rate > 0.0 && rate.is_finite() && base_rate.is_finite()).then(|| rate / base_rate);
    Verdict {
        added_mib: peak - base_peak,
        max_added_mib,
        rate_kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tweir\nUmask:\t0022\nState:\tS (sleeping)\n\
        VmPeak:\t  812345 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t5\n";

    #[test]
    fn status_lines() {
        assert_eq!(parse_status(STATUS), Some((10240.0, 20480.0)));
        assert_eq!(parse_status("Name:\tweir\nState:\tZ (zombie)\n"), None);
        assert_eq!(parse_status("VmRSS:\tx kB\nVmHWM:\t1 kB\n"), None);
        assert_eq!(parse_status(""), None);
    }

    fn s(t: f64, rss: f64, hwm: f64) -> Sample {
        Sample {
            t,
            rss_kib: rss * 1024.0,
            hwm_kib: hwm * 1024.0,
        }
    }

    #[test]
    fn summaries() {
        let v = [
            s(0.0, 5.0, 5.0),
            s(1.0, 6.0, 6.0),
            s(2.0, 9.0, 12.0),
            s(3.0, 8.0, 12.0),
            s(5.0, 7.0, 12.0),
        ];
        let r = summarize(&v, 1.5, 3.5).unwrap();
        assert_eq!(r.before, 6.0);
        assert_eq!(r.peak, 12.0, "VmHWM catches the peak between samples");
        assert_eq!(r.after, 7.0);
        // A flood before any sample: before is the first sample.
        let r = summarize(&v, -1.0, 0.5).unwrap();
        assert_eq!((r.before, r.peak, r.after), (5.0, 5.0, 7.0));
        assert_eq!(summarize(&[], 0.0, 1.0), None);
    }

    #[test]
    fn verdicts() {
        let mb = 1e6;
        let v = judge(30.0, 27.5, 15.0 * mb, 16.0 * mb, MAX_ADDED_ONE_MIB);
        assert!((v.added_mib - 2.5).abs() < 1e-9);
        assert!(v.memory_met());
        assert_eq!(v.rate_met(), Some(true));
        assert!(
            v.line("bt")
                .contains("added 2.5 MiB at peak (goal <= 4 MiB): met"),
            "{}",
            v.line("bt")
        );
        assert!(v.line("bt").contains("kept 94%"), "{}", v.line("bt"));
        let v = judge(40.0, 27.5, 14.0 * mb, 16.0 * mb, MAX_ADDED_ONE_MIB);
        assert!(!v.memory_met());
        assert_eq!(v.rate_met(), Some(false));
        assert_eq!(v.line("x").matches("NOT met").count(), 2, "{}", v.line("x"));
        // At the bounds exactly: met.
        let v = judge(31.5, 27.5, 0.9 * mb, mb, MAX_ADDED_ONE_MIB);
        assert!(v.memory_met());
        assert_eq!(v.rate_met(), Some(true));
        // The many-connections goal.
        let v = judge(300.0, 30.0, f64::NAN, mb, MAX_ADDED_MANY_MIB);
        assert!(!v.memory_met(), "270 MiB added");
        assert_eq!(v.rate_met(), None);
        assert!(v.line("1000").contains("not measured"));
        let v = judge(f64::NAN, 30.0, mb, 0.0, MAX_ADDED_ONE_MIB);
        assert!(!v.memory_met(), "an unmeasured peak is not a met goal");
        assert_eq!(v.rate_kept, None);
    }
}
