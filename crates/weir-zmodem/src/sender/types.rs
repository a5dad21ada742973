//! The sender's public vocabulary: configuration, the files it is given,
//! the data it asks for, the events it reports and the errors it fails with.

use std::time::Duration;

/// How the sender behaves.
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// Largest data subpacket in bytes (lrzsz `rz` accepts up to 8192).
    pub block_size: usize,
    /// Windowed mode: at most this many bytes unacknowledged, with a ZCRCQ
    /// (acknowledgement request) every window/4 bytes. `None` streams.
    pub window: Option<u32>,
    /// Segmented mode: a ZCRCW (stop and wait for ZACK) every this many bytes.
    pub segment: Option<u32>,
    /// Streaming mode (no `window`): still ask for an acknowledgement
    /// (ZCRCQ, which does not stop the stream) every quarter of this and keep
    /// at most this many bytes unacknowledged, so the stale data a receiver
    /// must skip after a line error stays bounded whatever buffers sit on the
    /// line (pipes, relays, ssh). `None`: pure streaming, bounded only by the
    /// driver's kernel buffer cap (for a high bandwidth-delay link).
    pub stream_window: Option<u32>,
    /// The streaming bound used instead when the receiver says it skips any
    /// amount of stale data (weir's `rz`, ZRINIT ZF1 `STALE_OK`).
    pub stream_window_stale_ok: Option<u32>,
    /// Use CRC-32 when the receiver can.
    pub crc32: bool,
    /// Escape every control byte (and tell the receiver with ZSINIT).
    pub escape_ctl: bool,
    /// Ask the receiver to resume a partial file (ZCRESUM).
    pub resume: bool,
    /// Ask the receiver to replace an existing file (ZMCLOB).
    pub overwrite: bool,
    /// How long to wait for an answer before resending.
    pub timeout: Duration,
    /// Resends of one frame (and restarts at one position) before giving up.
    pub retries: u32,
    /// Ask for more file data only while less than this much output is pending.
    pub low_water: usize,
    /// Largest chunk of file data asked for at once.
    pub chunk: usize,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            block_size: crate::consts::LRZSZ_MAX_BLOCK,
            window: None,
            segment: None,
            stream_window: Some(256 * 1024),
            stream_window_stale_ok: Some(4 * 1024 * 1024),
            crc32: true,
            escape_ctl: false,
            resume: false,
            overwrite: false,
            timeout: Duration::from_secs(10),
            retries: 10,
            low_water: 128 * 1024,
            chunk: 256 * 1024,
        }
    }
}

/// A file to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileOffer {
    /// The name the receiver is told (normally the base name).
    pub name: Vec<u8>,
    /// Length in bytes (at most 4 GiB - 1).
    pub size: u64,
    /// Modification time, Unix seconds.
    pub mtime: u64,
    /// Unix mode bits.
    pub mode: u32,
}

/// The sender wants file data: `len` bytes of file `file` from `offset`
/// (fewer at the end of the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataRequest {
    /// Index of the file in the batch.
    pub file: usize,
    /// Where to read.
    pub offset: u64,
    /// How much to read at most.
    pub len: usize,
}

/// Something the driver may want to show or act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendEvent {
    /// The receiver answered ZRINIT with these capabilities.
    ReceiverReady {
        /// ZF0 capability flags.
        flags: u8,
        /// ZF1 flags (`consts::zrinit1`).
        flags1: u8,
        /// Receiver buffer size (0: full streaming).
        buffer: u16,
    },
    /// The receiver accepted a file and wants it from `offset` (non-zero
    /// when it resumes a partial file).
    FileStarted {
        /// Index in the batch.
        file: usize,
        /// Starting position.
        offset: u64,
    },
    /// The receiver skipped a file.
    FileSkipped {
        /// Index in the batch.
        file: usize,
    },
    /// The receiver has the whole file.
    FileDone {
        /// Index in the batch.
        file: usize,
        /// Its length.
        size: u64,
    },
    /// The receiver asked to resend from `pos` (a line error).
    Retransmit {
        /// Index in the batch.
        file: usize,
        /// Position sending restarts from.
        pos: u64,
    },
    /// The session ended cleanly.
    Finished,
}

/// Why a send failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// A file is larger than ZMODEM's 32-bit positions can describe.
    #[error(
        "{name}: {size} bytes is over ZMODEM's limit of 4294967295 bytes (positions are 32-bit)"
    )]
    FileTooLarge {
        /// The file's name.
        name: String,
        /// Its size.
        size: u64,
    },
    /// The receiver cancelled (CAN*5 or ZCAN).
    #[error("the receiver cancelled the transfer")]
    Cancelled,
    /// The receiver aborted with a frame.
    #[error("the receiver aborted with {0}")]
    Aborted(&'static str),
    /// No answer after every retry.
    #[error("no answer from the receiver to {0} after {1} tries")]
    Timeout(&'static str, u32),
    /// The receiver kept asking for the same position.
    #[error("too many errors: the receiver asked for position {0} again and again")]
    TooManyErrors(u64),
    /// The receiver asked for a position past the end of the file.
    #[error("the receiver asked for position {pos} of a {size}-byte file")]
    BadPosition {
        /// The position asked for.
        pos: u64,
        /// The file's size.
        size: u64,
    },
    /// The file ended before its announced size.
    #[error("file {file} ended at {at} bytes, {size} were announced")]
    FileShrank {
        /// Index in the batch.
        file: usize,
        /// Where it ended.
        at: u64,
        /// The size announced.
        size: u64,
    },
    /// The other side is a sender too.
    #[error("the other side is sending too (got ZRQINIT)")]
    BothSenders,
}
