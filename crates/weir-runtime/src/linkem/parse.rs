//! Parsing of link-emulator quantities: durations (`75ms`), sizes (`4MiB`),
//! rates (`50MB/s`, `400Mbit/s`), offset lists (`10,20`) and drop ranges
//! (`OFF:LEN,...`). Single quantities are [`weir_core::units`]'; the lists
//! are the emulator's own.

use weir_core::units;

/// A malformed link-emulator argument; the message names the bad part.
pub type ParseError = units::UnitError;

fn err(what: &'static str, input: &str, why: &'static str) -> ParseError {
    ParseError::new(what, input, why)
}

/// Durations (`75ms`) and sizes (`4MiB`) are the shared parsers as they are.
pub use units::{duration, size};

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
    fn rates_are_bounded_for_the_emulator() {
        // The shared parser's own cases are in `weir_core::units`; here
        // what the emulator adds: at least 1 byte/s.
        assert_eq!(rate("400Mbit/s").unwrap(), 50_000_000);
        assert_eq!(rate("1000").unwrap(), 1000);
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
