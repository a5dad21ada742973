//! A transfer's [`TransferView`] from what the engine says of it
//! ([`TransferInfo`]) over what its content and the daemon's record say.

use std::sync::Arc;

use weir_session::{Phase, TransferInfo};

use super::Entry;
use crate::backend::*;

/// What the view of a transfer not (yet) in the engine says.
pub(super) enum Absent {
    /// Its storage is being opened (data on disk hashed).
    Opening,
    /// The engine refused it; why.
    Failed(Arc<str>),
    /// Stopped before it was started.
    Stopped,
}

/// The view of `e` at `now` (Unix seconds), with the parts `detail` asks.
pub(super) fn fill(
    e: &Entry,
    info: Option<&TransferInfo>,
    absent: Absent,
    detail: Detail,
    now: u64,
) -> TransferView {
    let mut v = (*e.base).clone();
    v.labels = Arc::from(e.record.labels.clone());
    v.added_date = e.record.added;
    v.done_date = e.record.done;
    v.start_date = e.started;
    v.edit_date = Some(e.edited);
    let size = v.total_size;
    match info {
        Some(i) => {
            v.state = match i.phase {
                Phase::Checking => TransferState::Verifying,
                Phase::Downloading => TransferState::Downloading,
                Phase::Seeding => TransferState::Seeding,
                Phase::Paused | Phase::Failed => TransferState::Stopped,
            };
            if let Some(err) = &i.error {
                v.error = TransferError::Local(Arc::from(err.as_str()));
            }
            v.have_valid = i.bytes_had.min(size);
            v.left_until_done = size - v.have_valid;
            v.size_when_done = size;
            v.downloaded_ever = i.downloaded.0 + i.downloaded.1;
            v.uploaded_ever = i.uploaded.0 + i.uploaded.1;
            let running = matches!(v.state, TransferState::Downloading | TransferState::Seeding);
            if running {
                v.rate_download = i.download_rate.max(0.0) as u64;
                v.rate_upload = i.upload_rate.max(0.0) as u64;
                v.peers_connected = i.peers as u32;
            }
            // The session counts connections, not who sends what: a peer
            // counts as sending while data arrives, as getting while data
            // leaves.
            if v.rate_download > 0 {
                v.peers_sending_to_us = v.peers_connected;
            }
            if v.rate_upload > 0 {
                v.peers_getting_from_us = v.peers_connected;
            }
            v.eta = match v.state {
                TransferState::Downloading if v.rate_download > 0 => {
                    Eta::Secs(v.left_until_done / v.rate_download)
                }
                TransferState::Downloading => Eta::Unknown,
                _ => Eta::NotAvailable,
            };
            v.upload_ratio = match (v.uploaded_ever, v.downloaded_ever) {
                (0, 0) => Ratio::NotAvailable,
                (_, 0) => Ratio::Infinite,
                (u, d) => Ratio::Value(u as f64 / d as f64),
            };
            if v.rate_download > 0 || v.rate_upload > 0 {
                v.activity_date = Some(now);
            }
        }
        None => {
            v.state = match &absent {
                Absent::Opening => TransferState::Verifying,
                Absent::Failed(_) | Absent::Stopped => TransferState::Stopped,
            };
            if let Absent::Failed(why) = absent {
                v.error = TransferError::Local(why);
            }
        }
    }
    if detail.files {
        v.files = e.files.clone();
        let complete = size > 0 && v.have_valid == size;
        if let [only] = v.files.as_mut_slice() {
            only.bytes_completed = v.have_valid;
        } else if complete {
            for f in &mut v.files {
                f.bytes_completed = f.length;
            }
        }
        // Several files of a transfer in progress: the engine reports the
        // transfer's verified bytes, not each file's; they read 0 until
        // the transfer completes.
    }
    if detail.trackers {
        v.trackers = e.trackers.clone();
    }
    v
}
