//! Exit-code classification: an error that wraps [`BadInput`] anywhere in its
//! chain exits with 2, any other error with 1.

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
