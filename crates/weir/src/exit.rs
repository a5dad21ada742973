//! Exit-code classification: an error that wraps [`BadInput`] anywhere in its
//! chain exits with 2, any other error with 1; a command stopped by a
//! signal exits 128 + its number ([`signal_code`]).

use std::fmt;

/// The user gave something weir cannot use (a malformed torrent or link, a
/// bad argument). The message names what is wrong.
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Shorthand: an `anyhow::Error` that exits with code 2.
pub(crate) fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

/// The code a command stopped cleanly by signal `signo` exits with, as a
/// shell reports a process the signal ended: 128 + N (130 for SIGINT,
/// 143 for SIGTERM).
pub(crate) fn signal_code(signo: i32) -> std::process::ExitCode {
    std::process::ExitCode::from(u8::try_from(128 + signo).unwrap_or(u8::MAX))
}

/// An error and its causes on one line, each said once: a cause whose
/// text the line already holds (`cannot listen on X: Address in use` over
/// `Address in use`) is not repeated.
pub(crate) fn describe(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if s.is_empty() || line.contains(&s) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&s);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address in use");
        let e = anyhow::Error::new(io).context("cannot listen on 0.0.0.0:6881: Address in use");
        assert_eq!(
            describe(&e),
            "cannot listen on 0.0.0.0:6881: Address in use"
        );
        let e = anyhow::anyhow!("disk full")
            .context("writing x")
            .context("weir get");
        assert_eq!(describe(&e), "weir get: writing x: disk full");
        assert_eq!(signal_code(2), std::process::ExitCode::from(130));
    }
}
