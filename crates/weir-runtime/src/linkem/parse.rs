//! Parsing of link-emulator quantities: durations (`75ms`), sizes (`4MiB`),
//! rates (`50MB/s`, `400Mbit/s`), offset lists (`10,20`) and drop ranges
//! (`OFF:LEN,...`). Single quantities are [`weir_core::units`]'; the lists
//! are the emulator's own.

use std::time::Duration;

use weir_core::units;

/// A malformed link-emulator argument; the message names the bad part.
pub type ParseError = units::UnitError;

fn err(what: &'static str, input: &str, why: &'static str) -> ParseError {
    ParseError::new(what, input, why)
}

/// A duration: a number with `s`, `ms`, `us` or `ns` (`0` alone is allowed).
pub fn duration(s: &str) -> Result<Duration, ParseError> {
    units::duration(s)
}

/// A size in bytes: a number with an optional unit `B`, `kB`/`KiB`,
/// `MB`/`MiB`, `GB`/`GiB` (decimal and binary as written).
pub fn size(s: &str) -> Result<u64, ParseError> {
    units::size(s)
}

/// A rate in bytes per second: a size per second (`50MB/s`, `50MiB/s`,
/// `50MB`), or bits per second (`400Mbit/s`, `400Mbps`); at least 1 byte/s
/// and at most 1 TB/s.
pub fn rate(s: &str) -> Result<u64, ParseError> {
    let r = units::rate(s)?;
    if r < 1 {
        return Err(err("rate", s, "must be at least 1 byte/s"));
    }
    if r > 1_000_000_000_000 {
        return Err(err("rate", s, "too large"));
    }
    Ok(r)
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
