//! One transfer of a session: the content and the networks attached to it.

use std::sync::Arc;
use std::time::Instant;

use weir_bt::metainfo::Metainfo;
use weir_bt::torrent::Torrent;
use weir_core::peers::{ConnCounts, PeerBook};
use weir_ed2k::Md4Hash;
use weir_ed2k::transfer::FileId;

use crate::types::TransferId;

/// Whether a transfer is wanted to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Downloading or seeding as it can.
    Running,
    /// Stopped by the user: no connections.
    Paused,
}

/// Where a transfer is, for displays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Hashing data found on disk.
    Checking,
    /// Fetching.
    Downloading,
    /// Complete and serving.
    Seeding,
    /// Paused by the user.
    Paused,
    /// Storage failed.
    Failed,
}

/// The BitTorrent side of a transfer.
#[derive(Debug)]
pub(crate) struct BtSide {
    pub(crate) torrent: Torrent,
    pub(crate) meta: Arc<Metainfo>,
    pub(crate) book: PeerBook,
}

/// The eD2k side of a transfer (its file in the session's eD2k client).
#[derive(Debug)]
pub(crate) struct Ed2kSide {
    pub(crate) file: FileId,
    pub(crate) hash: Md4Hash,
    pub(crate) book: PeerBook,
    /// Parts resumed from an earlier run's partial writes, for the
    /// storage's OpenStorage.
    pub(crate) resumed: Vec<(u32, u32)>,
}

/// One transfer.
#[derive(Debug)]
pub(crate) struct Transfer {
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) size: u64,
    pub(crate) bt: Option<BtSide>,
    pub(crate) ed2k: Option<Ed2kSide>,
    pub(crate) run: RunState,
    /// Keep serving once complete.
    pub(crate) seed: bool,
    pub(crate) added_at: Instant,
    pub(crate) checked: bool,
    pub(crate) complete_at: Option<Instant>,
    pub(crate) failed: Option<String>,
    /// Its connections by stage.
    pub(crate) counts: ConnCounts,
    /// Its eD2k side turned out to be another file: not used.
    pub(crate) ed2k_mismatch: bool,
}

impl Transfer {
    pub(crate) fn phase(&self) -> Phase {
        if self.failed.is_some() {
            Phase::Failed
        } else if self.run == RunState::Paused {
            Phase::Paused
        } else if !self.checked {
            Phase::Checking
        } else if self.complete_at.is_some() {
            Phase::Seeding
        } else {
            Phase::Downloading
        }
    }

    pub(crate) fn running(&self) -> bool {
        self.run == RunState::Running && self.failed.is_none()
    }
}

/// What displays and the daemon read of a transfer.
#[derive(Clone, Debug)]
pub struct TransferInfo {
    /// Its id.
    pub id: TransferId,
    /// Its name (torrent name, or eD2k file name).
    pub name: std::sync::Arc<str>,
    /// Bytes in it.
    pub size: u64,
    /// Bytes it holds once done: `size` unless files were deselected
    /// (then the pieces of the selected files; Transmission's
    /// `sizeWhenDone`). Progress is `bytes_had` of this.
    pub wanted: u64,
    /// Where it is.
    pub phase: Phase,
    /// The torrent's info-hash, when it has a BitTorrent side.
    pub info_hash: Option<[u8; 20]>,
    /// The eD2k file hash, when it has an eD2k side.
    pub ed2k_hash: Option<Md4Hash>,
    /// Bytes verified.
    pub bytes_had: u64,
    /// Payload bytes received, by network: (BitTorrent, eD2k).
    pub downloaded: (u64, u64),
    /// Payload bytes sent, by network.
    pub uploaded: (u64, u64),
    /// Download rate (display window), bytes/s, both networks.
    pub download_rate: f64,
    /// Upload rate, bytes/s.
    pub upload_rate: f64,
    /// Connected peers, both networks.
    pub peers: usize,
    /// Known addresses, both networks.
    pub known: usize,
    /// Pieces (parts) that failed their check.
    pub hash_failures: u32,
    /// Peers dropped for protocol violations.
    pub protocol_errors: u32,
    /// Peers banned for bad data.
    pub banned: u32,
    /// When it was added.
    pub added_at: Instant,
    /// When it completed.
    pub complete_at: Option<Instant>,
    /// Why it failed.
    pub error: Option<String>,
    /// `Some(free bytes)` while its writes wait for the disk to have space
    /// (the download is paused, not failed). The session does no I/O and
    /// leaves this `None`; the runtime that owns the storage fills it in.
    pub disk_full: Option<u64>,
}
