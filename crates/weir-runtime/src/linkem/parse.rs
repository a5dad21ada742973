//! Parsing of link-emulator quantities: durations (`75ms`), sizes (`4MiB`),
//! rates (`50MB/s`, `400Mbit/s`), offset lists (`10,20`) and drop ranges
//! (`OFF:LEN,...`).

use std::time::Duration;

/// A malformed link-emulator argument; the message names the bad part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {input:?}: {why}")]
pub struct ParseError {
    /// What was being parsed (`duration`, `size`, ...).
    pub what: &'static str,
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

fn err(what: &'static str, input: &str, why: &'static str) -> ParseError {
    ParseError {
        what,
        input: input.to_string(),
        why,
    }
}

/// Splits `12.5MiB` into (`12.5`, `MiB`).
fn split_number(s: &str) -> (&str, &str) {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

fn number(what: &'static str, input: &str, n: &str) -> Result<f64, ParseError> {
    if n.is_empty() {
        return Err(err(what, input, "expected a number"));
    }
    let v: f64 = n.parse().map_err(|_| err(what, input, "bad number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(err(what, input, "must be a non-negative number"));
    }
    Ok(v)
}

/// A duration: a number with `s`, `ms`, `us` or `ns` (`0` alone is allowed).
pub fn duration(s: &str) -> Result<Duration, ParseError> {
    let (n, unit) = split_number(s);
    let v = number("duration", s, n)?;
    let secs = match unit.to_ascii_lowercase().as_str() {
        "" if v == 0.0 => 0.0,
        "s" | "sec" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "" => return Err(err("duration", s, "needs a unit: s, ms, us or ns")),
        _ => return Err(err("duration", s, "unknown unit (s, ms, us, ns)")),
    };
    if secs > 3600.0 {
        return Err(err("duration", s, "longer than an hour"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn byte_multiplier(unit: &str) -> Option<f64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

/// A size in bytes: a number with an optional unit `B`, `kB`/`KiB`,
/// `MB`/`MiB`, `GB`/`GiB` (decimal and binary as written).
pub fn size(s: &str) -> Result<u64, ParseError> {
    let (n, unit) = split_number(s);
    let v = number("size", s, n)?;
    let m = byte_multiplier(unit)
        .ok_or_else(|| err("size", s, "unknown unit (B, kB, KiB, MB, MiB, GB, GiB)"))?;
    let b = v * m;
    if b > u64::MAX as f64 / 2.0 {
        return Err(err("size", s, "too large"));
    }
    Ok(b.round() as u64)
}

/// A rate in bytes per second: a size per second (`50MB/s`, `50MiB/s`,
/// `50MB`), or bits per second (`400Mbit/s`, `400Mbps`).
pub fn rate(s: &str) -> Result<u64, ParseError> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    // Bits per second: `400Mbit/s`, `400Mbit`, `400Mbps`.
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
            _ => return Err(err("rate", s, "unknown bit unit (bit, kbit, Mbit, Gbit)")),
        };
        v * m / 8.0
    } else {
        let body = t.strip_suffix("/s").unwrap_or(t);
        let (n, unit) = split_number(body);
        let v = number("rate", s, n)?;
        v * byte_multiplier(unit)
            .ok_or_else(|| err("rate", s, "unknown unit (e.g. 50MB/s, 50MiB/s, 400Mbit/s)"))?
    };
    if bps < 1.0 {
        return Err(err("rate", s, "must be at least 1 byte/s"));
    }
    if bps > 1e12 {
        return Err(err("rate", s, "too large"));
    }
    Ok(bps.round() as u64)
}

/// A comma-separated list of byte offsets (each a [`size`]), e.g. `100,1MiB`.
pub fn offsets(s: &str) -> Result<Vec<u64>, ParseError> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(size)
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| {
            if v.is_empty() {
                Err(err("offsets", s, "empty list"))
            } else {
                Ok(v)
            }
        })
}

/// A comma-separated list of `OFFSET:LENGTH` ranges (each a [`size`]).
pub fn drops(s: &str) -> Result<Vec<(u64, u64)>, ParseError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (o, l) = part
            .split_once(':')
            .ok_or_else(|| err("drop range", part, "expected OFFSET:LENGTH"))?;
        let (o, l) = (size(o)?, size(l)?);
        if l == 0 {
            return Err(err("drop range", part, "length must be > 0"));
        }
        out.push((o, l));
    }
    if out.is_empty() {
        return Err(err("drop ranges", s, "empty list"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn sizes_and_rates() {
        assert_eq!(size("4MiB").unwrap(), 4 << 20);
        assert_eq!(size("4MB").unwrap(), 4_000_000);
        assert_eq!(size("123").unwrap(), 123);
        assert_eq!(size("1.5KiB").unwrap(), 1536);
        assert_eq!(rate("50MB/s").unwrap(), 50_000_000);
        assert_eq!(rate("50MiB/s").unwrap(), 50 << 20);
        assert_eq!(rate("400Mbit/s").unwrap(), 50_000_000);
        assert_eq!(rate("400Mbps").unwrap(), 50_000_000);
        assert_eq!(rate("1000").unwrap(), 1000);
        for bad in ["", "x", "4XB", "-4MB", "1.2.3MB"] {
            assert!(size(bad).is_err(), "{bad}");
        }
        for bad in ["0", "0.1B/s", "5Tbit/s", "fast"] {
            assert!(rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists() {
        assert_eq!(offsets("10, 20,1KiB").unwrap(), vec![10, 20, 1024]);
        assert!(offsets("").is_err());
        assert!(offsets("1,x").is_err());
        assert_eq!(
            drops("100:10,1MiB:1").unwrap(),
            vec![(100, 10), (1 << 20, 1)]
        );
        assert!(drops("100").is_err());
        assert!(drops("100:0").is_err());
        assert!(drops("").is_err());
    }
}
