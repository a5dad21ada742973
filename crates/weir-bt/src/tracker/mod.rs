//! Tracker codecs, sans-IO: the HTTP announce (BEP 3, compact peers BEP 23,
//! IPv6 peers BEP 7) in [`http`] and the UDP tracker protocol (BEP 15) in
//! [`udp`]. `weir-runtime` sends and receives the bytes.

pub mod http;
pub mod udp;

use std::net::SocketAddr;

/// The announce event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The first announce of a download.
    Started,
    /// The download finished.
    Completed,
    /// The client is leaving the swarm.
    Stopped,
}

impl Event {
    /// The HTTP `event` parameter value.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Started => "started",
            Event::Completed => "completed",
            Event::Stopped => "stopped",
        }
    }
}

/// One announce: who we are and how far along.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceRequest {
    /// The torrent.
    pub info_hash: [u8; 20],
    /// Our peer id.
    pub peer_id: [u8; 20],
    /// Our listen port.
    pub port: u16,
    /// Bytes uploaded so far.
    pub uploaded: u64,
    /// Bytes downloaded so far.
    pub downloaded: u64,
    /// Bytes still wanted.
    pub left: u64,
    /// The event, if this announce marks one.
    pub event: Option<Event>,
    /// How many peers we want (tracker default if `None`).
    pub numwant: Option<u32>,
    /// A random number identifying this client across IP changes.
    pub key: Option<u32>,
    /// Ask for the compact peer list (BEP 23).
    pub compact: bool,
}

/// What a tracker answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnnounceResponse {
    /// Seconds until the next regular announce.
    pub interval: u32,
    /// Seconds the client must wait at least before announcing again.
    pub min_interval: Option<u32>,
    /// Peers (IPv4 and IPv6).
    pub peers: Vec<SocketAddr>,
    /// Seeders.
    pub complete: Option<u32>,
    /// Leechers.
    pub incomplete: Option<u32>,
    /// A warning to show the user.
    pub warning: Option<String>,
}

/// A tracker response that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrackerError {
    /// The tracker refused the announce (`failure reason`, or a UDP error
    /// response); the text is the tracker's own.
    #[error("tracker failure: {0}")]
    Failure(String),
    /// The body is not valid bencode.
    #[error("malformed tracker response: {0}")]
    Bencode(#[from] weir_bencode::Error),
    /// A required key is missing.
    #[error("tracker response lacks `{0}`")]
    MissingKey(&'static str),
    /// A key holds the wrong type.
    #[error("tracker response `{key}`: expected {expected}, found {found}")]
    WrongType {
        /// Which key.
        key: &'static str,
        /// The type required.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// A value out of range or of the wrong size.
    #[error("tracker response `{key}`: {reason}")]
    BadValue {
        /// Which key or field.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A UDP packet shorter than its kind requires.
    #[error("UDP tracker {what} of {len} bytes, need at least {min}")]
    TooShort {
        /// Which packet.
        what: &'static str,
        /// Its length.
        len: usize,
        /// Minimum length.
        min: usize,
    },
    /// A UDP packet with an unexpected action.
    #[error("UDP tracker packet with action {found}, expected {expected}")]
    Action {
        /// The action wanted.
        expected: u32,
        /// The action received.
        found: u32,
    },
    /// A UDP packet answering some other request.
    #[error("UDP tracker packet with transaction id {found:#010x}, expected {expected:#010x}")]
    TransactionId {
        /// Ours.
        expected: u32,
        /// Theirs.
        found: u32,
    },
}
