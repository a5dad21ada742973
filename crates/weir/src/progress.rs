//! Progress display shared by every transfer command: an indicatif bar on a
//! terminal, otherwise one plain status line every few seconds on stderr.
