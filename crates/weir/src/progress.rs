//! Progress display shared by every transfer command: an indicatif bar on a
//! terminal, otherwise one plain status line every few seconds on stderr.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// One sample of a transfer's state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    /// Bytes verified (or received, where nothing is verified).
    pub(crate) done: u64,
    /// Bytes in the whole transfer.
    pub(crate) total: u64,
    /// Download rate, bytes/s.
    pub(crate) down_rate: f64,
    /// Upload rate, bytes/s.
    pub(crate) up_rate: f64,
    /// Connected peers.
    pub(crate) peers: usize,
    /// A word on what is happening ("checking", "seeding", ...).
    pub(crate) phase: &'static str,
}

/// A progress display.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    every: Duration,
    last_line: Option<Instant>,
    quiet: bool,
}

impl Progress {
    /// A display labelled `label`; plain lines every `every` when stderr is
    /// not a terminal; nothing at all when `quiet`.
    #[allow(dead_code)] // for single-transfer commands (eD2k, ZMODEM)
    pub(crate) fn new(label: &str, total: u64, quiet: bool) -> Self {
        Self::new_in(&MultiProgress::new(), label, total, quiet)
    }

    /// A display that shares the terminal with others in `multi` (one bar
    /// each).
    pub(crate) fn new_in(multi: &MultiProgress, label: &str, total: u64, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = multi.add(ProgressBar::new(total));
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {percent:>3}% {bytes}/{total_bytes} {msg} ETA {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b.set_prefix(label.to_string());
            b
        });
        Self {
            bar,
            label: label.to_string(),
            every: Duration::from_secs(5),
            last_line: None,
            quiet,
        }
    }

    /// Shows a new sample.
    pub(crate) fn update(&mut self, s: &Sample) {
        if let Some(b) = &self.bar {
            b.set_length(s.total);
            b.set_position(s.done);
            b.set_message(format!(
                "{} down {} up {} peers {}",
                s.phase,
                rate(s.down_rate),
                rate(s.up_rate),
                s.peers
            ));
            return;
        }
        if self.quiet {
            return;
        }
        let now = Instant::now();
        if self.last_line.is_some_and(|t| now - t < self.every) {
            return;
        }
        self.last_line = Some(now);
        let pct = if s.total == 0 {
            100.0
        } else {
            s.done as f64 * 100.0 / s.total as f64
        };
        let eta = if s.down_rate > 0.0 && s.done < s.total {
            format!(" eta {:.0}s", (s.total - s.done) as f64 / s.down_rate)
        } else {
            String::new()
        };
        crate::out::errln!(
            "{}: {} {:.1}% {}/{} down {} up {} peers {}{}",
            self.label,
            s.phase,
            pct,
            bytes(s.done),
            bytes(s.total),
            rate(s.down_rate),
            rate(s.up_rate),
            s.peers,
            eta
        );
    }

    /// Shows a message line (above the bar on a terminal, which stays);
    /// shown even when quiet: it says what is wrong and what to do.
    pub(crate) fn note(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => crate::out::errln!("{msg}"),
        }
    }

    /// Ends the display with a final line.
    pub(crate) fn finish(&mut self, msg: &str) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if !self.quiet {
            crate::out::errln!("{}: {msg}", self.label);
        }
    }
}

/// `1.5 MB/s` style rate (decimal units, as transfer rates are quoted).
pub(crate) fn rate(r: f64) -> String {
    format!("{}/s", bytes(r as u64))
}

/// `1.5 MB` style size (decimal units).
pub(crate) fn bytes(n: u64) -> String {
    const U: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1000.0 && i < U.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Parses a rate such as `20MB/s`, `20M`, `500k`, `1.5MiB` or a plain
/// number of bytes per second. `0` means unlimited.
pub(crate) fn parse_rate(s: &str) -> Result<u64, String> {
    weir_core::units::rate(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("20MB/s").unwrap(), 20_000_000);
        assert_eq!(parse_rate("500k").unwrap(), 500_000);
        assert_eq!(parse_rate("1.5MiB").unwrap(), 1_572_864);
        assert_eq!(parse_rate("123").unwrap(), 123);
        assert_eq!(parse_rate("0").unwrap(), 0);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10 furlongs").is_err());
        assert_eq!(bytes(1_500_000), "1.5 MB");
    }
}
