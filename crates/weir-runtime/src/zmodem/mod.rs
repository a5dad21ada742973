//! ZMODEM over a real line: the driver around the sans-IO
//! [`weir_zmodem::Sender`] and [`weir_zmodem::Receiver`].
//!
//! One thread runs the protocol core and does the writing and the file I/O
//! (256 KiB `pread`s for sending, `pwrite`s of checked 256 KiB chunks for
//! receiving); a second thread reads the line in 256 KiB chunks
//! ([`line`]). Nothing sleeps or polls: the protocol thread blocks on the
//! line's channel with the core's next timer as the timeout.
//!
//! In-flight data is bounded so a line error costs a bounded ZRPOS
//! retransmission: the sender core frames data only while less than 128 KiB
//! of output is unwritten, and in streaming mode the line's kernel buffer is
//! capped ([`SendOptions::sndbuf`], default 256 KiB: `SO_SNDBUF` on a
//! socket, `F_SETPIPE_SZ` on a pipe). Acknowledged modes (window,
//! segments) set `TCP_NODELAY` so the acknowledgements are not held back.

mod line;
mod recv;
mod send;

use std::time::Duration;

pub use line::{Line, LineListener, StopRequest};
pub use recv::{RecvOptions, RecvReport, receive_files};
pub use send::{SendOptions, SendReport, send_files};

/// Progress of a transfer, for display (on stderr: stdout is the line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A file starts (at `offset` when resuming).
    FileStarted {
        /// Its name.
        name: String,
        /// Its size, if known.
        size: Option<u64>,
        /// Where the transfer starts.
        offset: u64,
    },
    /// Bytes of the current file so far (sent: framed; received: checked).
    Bytes {
        /// Position in the file.
        pos: u64,
        /// Its size, if known.
        size: Option<u64>,
    },
    /// A line error: the transfer goes back to `pos`.
    Retransmit {
        /// Position resent from.
        pos: u64,
    },
    /// A file is complete.
    FileDone {
        /// Its name.
        name: String,
        /// Bytes transferred in this session (without a resumed prefix).
        bytes: u64,
        /// Time it took.
        elapsed: Duration,
    },
    /// A file was skipped.
    FileSkipped {
        /// Its name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Why a ZMODEM transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum ZmodemError {
    /// The sending protocol failed.
    #[error(transparent)]
    Send(#[from] weir_zmodem::SendError),
    /// The receiving protocol failed.
    #[error(transparent)]
    Recv(#[from] weir_zmodem::RecvError),
    /// Reading or writing the line failed.
    #[error("line: {0}")]
    Line(std::io::Error),
    /// The sender sent more data than the size it announced for the file;
    /// the announced bytes are kept and the session cancelled.
    #[error(
        "{path}: the sender announced {announced} bytes and sent more; \
         kept the {announced} bytes and cancelled (send the file again if it changed)"
    )]
    Oversize {
        /// The file.
        path: String,
        /// The size the sender announced.
        announced: u64,
    },
    /// A signal asked the session to stop: it was cancelled (the other side
    /// told), what was checked is kept.
    #[error(
        "stopped by signal {signal}; the other side was told, and a partial file is kept (resume with -r)"
    )]
    Stopped {
        /// The signal number (2: SIGINT, 15: SIGTERM).
        signal: i32,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// How often byte progress is reported at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests;
