//! One transfer of a session: the content and the networks attached to it.

use std::sync::Arc;
use std::time::Instant;

use weir_bt::metainfo::Metainfo;
use weir_bt::torrent::{Dormant, SharedConfigs, Torrent, TorrentRef};
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
    slot: TorrentSlot,
    pub(crate) meta: Arc<Metainfo>,
    pub(crate) book: PeerBook,
}

/// A torrent awake, or asleep while idle (see [`weir_bt::torrent::Dormant`]):
/// a daemon's idle torrents hold 352 bytes each instead of ~1.2 KB and
/// their pickers' tables.
// Asleep is the larger and, in a big session, the common state: inline,
// it costs no allocation of its own.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum TorrentSlot {
    Awake(Box<Torrent>),
    Asleep(Dormant),
    /// Only while one becomes the other.
    Moving,
}

impl BtSide {
    pub(crate) fn new(torrent: Torrent, meta: Arc<Metainfo>, book: PeerBook) -> Self {
        Self {
            slot: TorrentSlot::Awake(Box::new(torrent)),
            meta,
            book,
        }
    }

    /// The torrent, woken if it sleeps: every input to it comes here.
    pub(crate) fn torrent(&mut self) -> &mut Torrent {
        if matches!(self.slot, TorrentSlot::Asleep(_))
            && let TorrentSlot::Asleep(d) = std::mem::replace(&mut self.slot, TorrentSlot::Moving)
        {
            self.slot = TorrentSlot::Awake(Box::new(d.wake(&self.meta)));
        }
        match &mut self.slot {
            TorrentSlot::Awake(t) => t,
            _ => unreachable!("woken above"),
        }
    }

    /// The torrent as it is, awake or asleep (reading never wakes it).
    pub(crate) fn view(&self) -> TorrentRef<'_> {
        match &self.slot {
            TorrentSlot::Awake(t) => TorrentRef::Awake(t),
            TorrentSlot::Asleep(d) => TorrentRef::Asleep(d, &self.meta),
            TorrentSlot::Moving => unreachable!("a slot is awake or asleep between calls"),
        }
    }

    /// The torrent if it is awake (what has no business with a sleeping
    /// one, such as a peer's message or a timer, does not wake it).
    pub(crate) fn awake_mut(&mut self) -> Option<&mut Torrent> {
        match &mut self.slot {
            TorrentSlot::Awake(t) => Some(t),
            _ => None,
        }
    }

    /// Whether it sleeps.
    #[cfg(test)]
    pub(crate) fn is_asleep(&self) -> bool {
        matches!(self.slot, TorrentSlot::Asleep(_))
    }

    /// Puts the torrent to sleep if it is awake and idle
    /// ([`Torrent::can_sleep`]), its settings shared through `shared`.
    pub(crate) fn try_sleep(&mut self, shared: &mut SharedConfigs) {
        if matches!(&self.slot, TorrentSlot::Awake(t) if t.can_sleep())
            && let TorrentSlot::Awake(t) = std::mem::replace(&mut self.slot, TorrentSlot::Moving)
        {
            self.slot = TorrentSlot::Asleep(t.sleep(shared));
        }
    }
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
    /// Boxed: most transfers have no eD2k side, and inline it cost every
    /// transfer its 368 bytes.
    pub(crate) ed2k: Option<Box<Ed2kSide>>,
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
    /// Handed out mutably since its info was last refreshed (see
    /// [`Transfers`]).
    pub(crate) touched: bool,
}

/// The session's transfers by id. Reading goes through `Deref` to the map;
/// every mutable access goes through [`Transfers::get_mut`],
/// [`Transfers::values_mut`] or [`Transfers::insert`], which note the
/// transfer as touched: what [`crate::Session::refresh_infos`] recomputes.
/// An idle transfer, touched by nothing, costs a refresh nothing (a daemon
/// with 1,000 idle torrents spent a third of each `torrent-get` walking
/// every transfer's torrent, content and books again).
#[derive(Debug, Default)]
pub(crate) struct Transfers {
    /// Boxed: a transfer is about 1.9 KB, and a map node holds eleven
    /// values inline, half empty after in-order inserts; boxed, an idle
    /// transfer costs its own size (about 1.4 KB less each).
    map: std::collections::BTreeMap<TransferId, Box<Transfer>>,
    /// The transfers touched since [`Transfers::take_touched`], each once.
    touched: Vec<TransferId>,
    /// Bumped when a transfer is added or removed.
    version: u64,
}

impl std::ops::Deref for Transfers {
    type Target = std::collections::BTreeMap<TransferId, Box<Transfer>>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Transfers {
    fn touch(touched: &mut Vec<TransferId>, id: TransferId, t: &mut Transfer) {
        if !t.touched {
            t.touched = true;
            touched.push(id);
        }
    }

    /// The transfer, to change (noted as touched).
    pub(crate) fn get_mut(&mut self, id: &TransferId) -> Option<&mut Box<Transfer>> {
        let t = self.map.get_mut(id)?;
        Self::touch(&mut self.touched, *id, t);
        Some(t)
    }

    /// Every transfer, to change (all noted as touched).
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Box<Transfer>> {
        let touched = &mut self.touched;
        self.map.iter_mut().map(move |(id, t)| {
            Self::touch(touched, *id, t);
            t
        })
    }

    /// Adds a transfer (touched).
    pub(crate) fn insert(&mut self, id: TransferId, mut t: Box<Transfer>) {
        Self::touch(&mut self.touched, id, &mut t);
        self.map.insert(id, t);
        self.version += 1;
    }

    /// Removes a transfer.
    pub(crate) fn remove(&mut self, id: &TransferId) -> Option<Box<Transfer>> {
        self.version += 1;
        self.map.remove(id)
    }

    /// Changes when a transfer is added or removed.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The transfers touched since the last call (some may be gone since),
    /// no longer noted.
    pub(crate) fn take_touched(&mut self) -> Vec<TransferId> {
        let ids = std::mem::take(&mut self.touched);
        for id in &ids {
            if let Some(t) = self.map.get_mut(id) {
                t.touched = false;
            }
        }
        ids
    }
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
