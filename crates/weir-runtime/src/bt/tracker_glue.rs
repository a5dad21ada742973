//! Announcing a torrent to its trackers (filled in when the tracker client
//! lands; until then no tracker is contacted).

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use weir_bt::metainfo::Metainfo;

use super::{BtConfig, Msg, Progress};

/// The announce task of one torrent.
#[derive(Debug)]
pub(crate) struct Announcer;

impl Announcer {
    /// Starts announcing; `None` when the torrent has no usable tracker.
    pub(crate) fn start(
        _meta: &Arc<Metainfo>,
        _cfg: &BtConfig,
        _tx: mpsc::Sender<Msg>,
        _progress: watch::Receiver<Progress>,
    ) -> Option<Self> {
        None
    }

    /// Announces `stopped` and ends.
    pub(crate) async fn stop(self) {}
}
