//! Quantities as people type them: sizes (`4MiB`, `1.5 GB`), rates
//! (`50MB/s`, `400Mbit/s`) and durations (`75ms`).
//!
//! One parser for every front end (the CLI's caps and piece sizes, the link
//! emulator, the benches), so `--max-down 20MB/s` means the same thing
//! everywhere and a typo gets the same clear error. Decimal and binary
//! units are taken as written (`kB` = 1000, `KiB` = 1024); only
//! [`binary_size`], for piece sizes, reads `k`/`M`/`G` as powers of two the
//! way mktorrent does.

use std::time::Duration;

/// A malformed quantity; the message names what was parsed, the text and
/// what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {input:?}: {why}")]
pub struct UnitError {
    /// What was being parsed (`size`, `rate`, `duration`, ...).
    pub what: &'static str,
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl UnitError {
    /// An error for `input`, parsed as `what`.
    pub fn new(what: &'static str, input: &str, why: &'static str) -> Self {
        UnitError {
            what,
            input: input.to_string(),
            why,
        }
    }
}

/// The largest quantity accepted: far above any real size or rate, and far
/// below where `f64` stops holding whole bytes.
const MAX: f64 = (1u64 << 52) as f64;

/// Splits `12.5MiB` into (`12.5`, `MiB`), spaces around either trimmed.
fn split_number(s: &str) -> (&str, &str) {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

fn number(what: &'static str, input: &str, n: &str) -> Result<f64, UnitError> {
    if n.is_empty() {
        return Err(UnitError::new(what, input, "expected a number"));
    }
    let v: f64 = n
        .parse()
        .map_err(|_| UnitError::new(what, input, "bad number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(UnitError::new(what, input, "must be a non-negative number"));
    }
    Ok(v)
}

/// How bare prefixes (`k`, `M`, `G`, and `kB`, `MB`, `GB`) are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prefixes {
    Decimal,
    Binary,
}

fn byte_multiplier(unit: &str, bare: Prefixes) -> Option<f64> {
    let (k, m, g, t) = match bare {
        Prefixes::Decimal => (1e3, 1e6, 1e9, 1e12),
        Prefixes::Binary => (1024.0, 1048576.0, 1073741824.0, 1099511627776.0),
    };
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => k,
        "kib" => 1024.0,
        "m" | "mb" => m,
        "mib" => 1048576.0,
        "g" | "gb" => g,
        "gib" => 1073741824.0,
        "t" | "tb" => t,
        "tib" => 1099511627776.0,
        _ => return None,
    })
}

fn bytes(what: &'static str, s: &str, bare: Prefixes) -> Result<u64, UnitError> {
    let (n, unit) = split_number(s);
    let v = number(what, s, n)?;
    let m = byte_multiplier(unit, bare).ok_or_else(|| {
        UnitError::new(
            what,
            s,
            "unknown unit (B, kB, KiB, MB, MiB, GB, GiB, TB, TiB)",
        )
    })?;
    let b = v * m;
    if b > MAX {
        return Err(UnitError::new(what, s, "too large"));
    }
    Ok(b.round() as u64)
}

/// A size in bytes: a number with an optional unit, decimal and binary as
/// written (`4MB` = 4,000,000, `4MiB` = 4,194,304, `123` bytes; `12.3 MB`
/// as weir prints sizes reads back).
pub fn size(s: &str) -> Result<u64, UnitError> {
    bytes("size", s, Prefixes::Decimal)
}

/// A size where `k`, `M`, `G` (with or without `B`) are powers of two, as
/// piece sizes are given (`256K`, `1M`, `4MiB`).
pub fn binary_size(s: &str) -> Result<u64, UnitError> {
    bytes("size", s, Prefixes::Binary)
}

/// A rate in bytes per second: a [`size`] with an optional `/s` (`50MB/s`,
/// `50MiB/s`, `20M`, `500k`), or bits per second (`400Mbit/s`, `400Mbps`).
/// `0` is allowed (callers for which it means "unlimited" or "wrong" say
/// so).
pub fn rate(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let bits = lower
        .strip_suffix("bit/s")
        .or_else(|| lower.strip_suffix("bps"))
        .or_else(|| lower.strip_suffix("bit"));
    let bps = if let Some(body) = bits {
        let (n, prefix) = split_number(body);
        let v = number("rate", s, n)?;
        let m = match prefix {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            _ => {
                return Err(UnitError::new(
                    "rate",
                    s,
                    "unknown bit unit (bit, kbit, Mbit, Gbit)",
                ));
            }
        };
        v * m / 8.0
    } else {
        let body = t.strip_suffix("/s").unwrap_or(t);
        let (n, unit) = split_number(body);
        let v = number("rate", s, n)?;
        v * byte_multiplier(unit, Prefixes::Decimal).ok_or_else(|| {
            UnitError::new("rate", s, "unknown unit (e.g. 50MB/s, 50MiB/s, 400Mbit/s)")
        })?
    };
    if bps > MAX {
        return Err(UnitError::new("rate", s, "too large"));
    }
    Ok(bps.round() as u64)
}

/// A duration: a number with `s`, `ms`, `us` or `ns` (`0` alone is
/// allowed), at most an hour.
pub fn duration(s: &str) -> Result<Duration, UnitError> {
    let (n, unit) = split_number(s);
    let v = number("duration", s, n)?;
    let secs = match unit.to_ascii_lowercase().as_str() {
        "" if v == 0.0 => 0.0,
        "s" | "sec" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "" => {
            return Err(UnitError::new(
                "duration",
                s,
                "needs a unit: s, ms, us or ns",
            ));
        }
        _ => {
            return Err(UnitError::new(
                "duration",
                s,
                "unknown unit (s, ms, us, ns)",
            ));
        }
    };
    if secs > 3600.0 {
        return Err(UnitError::new("duration", s, "longer than an hour"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        assert_eq!(size("4MiB").unwrap(), 4 << 20);
        assert_eq!(size("4MB").unwrap(), 4_000_000);
        assert_eq!(size("123").unwrap(), 123);
        assert_eq!(size("1.5KiB").unwrap(), 1536);
        assert_eq!(size("12.3 MB").unwrap(), 12_300_000);
        assert_eq!(size(" 2 GiB ").unwrap(), 2 << 30);
        assert_eq!(binary_size("256K").unwrap(), 256 << 10);
        assert_eq!(binary_size("1MB").unwrap(), 1 << 20);
        assert_eq!(binary_size("16384").unwrap(), 16384);
        for bad in ["", "x", "4XB", "-4MB", "1.2.3MB", "MiB", "99999999TiB"] {
            assert!(size(bad).is_err(), "{bad}");
        }
        let e = size("4 parsecs").unwrap_err();
        assert_eq!(e.what, "size");
        assert!(e.to_string().contains("4 parsecs"), "{e}");
    }

    #[test]
    fn rates() {
        assert_eq!(rate("50MB/s").unwrap(), 50_000_000);
        assert_eq!(rate("50MiB/s").unwrap(), 50 << 20);
        assert_eq!(rate("20M").unwrap(), 20_000_000);
        assert_eq!(rate("500k").unwrap(), 500_000);
        assert_eq!(rate("1.5MiB").unwrap(), 1_572_864);
        assert_eq!(rate("400Mbit/s").unwrap(), 50_000_000);
        assert_eq!(rate("400Mbps").unwrap(), 50_000_000);
        assert_eq!(rate("1000").unwrap(), 1000);
        assert_eq!(rate("0").unwrap(), 0);
        for bad in ["fast", "5Tbit/s", "10 furlongs", "-1MB/s", "/s"] {
            assert!(rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(duration("75ms").unwrap(), Duration::from_millis(75));
        assert_eq!(duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(duration("0").unwrap(), Duration::ZERO);
        for bad in ["75", "ms", "-1ms", "1h", "1e3ms", "2 weeks", "99999s"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// Any text: an answer or an error, never a panic.
        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = size(&s);
            let _ = binary_size(&s);
            let _ = rate(&s);
            let _ = duration(&s);
        }

        /// A whole number of any unit reads back as that many units.
        #[test]
        fn whole_numbers_read_back(n in 0u64..1_000_000, u in 0usize..5) {
            let (unit, mul) = [("B", 1u64), ("kB", 1000), ("KiB", 1024), ("MB", 1_000_000), ("MiB", 1 << 20)][u];
            prop_assert_eq!(size(&format!("{n}{unit}")).unwrap(), n * mul);
            prop_assert_eq!(size(&format!("{n} {unit}")).unwrap(), n * mul);
            prop_assert_eq!(rate(&format!("{n}{unit}/s")).unwrap(), n * mul);
        }
    }
}
