//! Commands: adding, changing, acting on transfers, and their answers.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::{LimitMode, Priority, TransferHash, TransferId};

/// What `torrent-add` adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddSource {
    /// The bytes of a .torrent (`metainfo`, already base64-decoded).
    Metainfo(Bytes),
    /// A .torrent on the daemon's disk (`filename` that is a path).
    Path(PathBuf),
    /// An `http://` or `https://` URL of a .torrent: the backend fetches it
    /// under its network policy, with the request's `cookies`.
    Url(String),
    /// A `magnet:?` link.
    Magnet(String),
    /// An `ed2k://|file|...|/` link.
    Ed2k(String),
}

/// A `torrent-add`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddRequest {
    /// What to add.
    pub source: AddSource,
    /// Start paused (`None`: the session's `start-added-torrents`).
    pub paused: Option<bool>,
    /// Where to put the data (`None`: the session's `download-dir`).
    pub download_dir: Option<PathBuf>,
    /// Labels.
    pub labels: Vec<String>,
    /// `cookies` for a URL fetch (`NAME=VALUE; ...`).
    pub cookies: Option<String>,
    /// Most peers.
    pub peer_limit: Option<u32>,
    /// Bandwidth priority.
    pub bandwidth_priority: Option<Priority>,
    /// Indices of files to download (empty: no change).
    pub files_wanted: Vec<u32>,
    /// Indices of files to skip.
    pub files_unwanted: Vec<u32>,
    /// Indices of high-priority files.
    pub priority_high: Vec<u32>,
    /// Indices of low-priority files.
    pub priority_low: Vec<u32>,
    /// Indices of normal-priority files.
    pub priority_normal: Vec<u32>,
}

impl AddRequest {
    /// A request to add `source` with every option left to the session.
    pub fn new(source: AddSource) -> Self {
        AddRequest {
            source,
            paused: None,
            download_dir: None,
            labels: Vec::new(),
            cookies: None,
            peer_limit: None,
            bandwidth_priority: None,
            files_wanted: Vec::new(),
            files_unwanted: Vec::new(),
            priority_high: Vec::new(),
            priority_low: Vec::new(),
            priority_normal: Vec::new(),
        }
    }
}

/// The transfer an add created or found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedTransfer {
    /// Its id.
    pub id: TransferId,
    /// Its hash.
    pub hash: TransferHash,
    /// Its name.
    pub name: Arc<str>,
}

/// What `torrent-add` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddOutcome {
    /// A new transfer (`torrent-added`).
    Added(AddedTransfer),
    /// The same content was already there (`torrent-duplicate`); nothing
    /// changed.
    Duplicate(AddedTransfer),
}

/// Files a `torrent-set` names: Transmission's empty list means "all".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileSet {
    /// Every file.
    All,
    /// These indices (out-of-range ones are an error).
    Indices(Vec<u32>),
}

/// A `torrent-set`: each `Some` is a setting to change on every selected
/// transfer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransferChange {
    /// `downloadLimit`, kB/s.
    pub download_limit: Option<u64>,
    /// `downloadLimited`.
    pub download_limited: Option<bool>,
    /// `uploadLimit`, kB/s.
    pub upload_limit: Option<u64>,
    /// `uploadLimited`.
    pub upload_limited: Option<bool>,
    /// `bandwidthPriority`.
    pub bandwidth_priority: Option<Priority>,
    /// `honorsSessionLimits`.
    pub honors_session_limits: Option<bool>,
    /// `labels` (replaces them).
    pub labels: Option<Vec<String>>,
    /// `files-wanted`.
    pub files_wanted: Option<FileSet>,
    /// `files-unwanted`.
    pub files_unwanted: Option<FileSet>,
    /// `priority-high`.
    pub priority_high: Option<FileSet>,
    /// `priority-low`.
    pub priority_low: Option<FileSet>,
    /// `priority-normal`.
    pub priority_normal: Option<FileSet>,
    /// `location`: where the data now is (no move; see
    /// [`Backend::set_location`] to move).
    pub location: Option<PathBuf>,
    /// `peer-limit`.
    pub peer_limit: Option<u32>,
    /// `queuePosition`.
    pub queue_position: Option<u32>,
    /// `seedIdleLimit`, minutes.
    pub seed_idle_limit: Option<u32>,
    /// `seedIdleMode`.
    pub seed_idle_mode: Option<LimitMode>,
    /// `seedRatioLimit`.
    pub seed_ratio_limit: Option<f64>,
    /// `seedRatioMode`.
    pub seed_ratio_mode: Option<LimitMode>,
    /// `sequentialDownload`.
    pub sequential: Option<bool>,
    /// `trackerList`: announce URLs, one a line, a blank line between tiers.
    pub tracker_list: Option<String>,
    /// `trackerAdd` (deprecated in 4.0 but sent by older clients).
    pub tracker_add: Vec<String>,
    /// `trackerRemove`: tracker ids.
    pub tracker_remove: Vec<u32>,
}

/// A per-transfer command with no arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `torrent-start`: start (through the queue).
    Start,
    /// `torrent-start-now`: start, ignoring the queue.
    StartNow,
    /// `torrent-stop`.
    Stop,
    /// `torrent-verify`: check the data on disk again.
    Verify,
    /// `torrent-reannounce`: ask trackers (servers) for peers now.
    Reannounce,
    /// `queue-move-top`.
    QueueTop,
    /// `queue-move-up`.
    QueueUp,
    /// `queue-move-down`.
    QueueDown,
    /// `queue-move-bottom`.
    QueueBottom,
}

/// The answer to `free-space`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeSpace {
    /// Bytes available to the daemon.
    pub free: u64,
    /// Bytes of the whole file system.
    pub total: u64,
}

/// The answer to `torrent-rename-path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renamed {
    /// The transfer.
    pub id: TransferId,
    /// The path that was renamed.
    pub path: String,
    /// Its new last component.
    pub name: String,
}
