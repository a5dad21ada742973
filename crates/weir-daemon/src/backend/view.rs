//! What `torrent-get` reports: a transfer and its files, peers and trackers.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;

use super::{TransferHash, TransferId};

/// What a transfer is doing (Transmission's `status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TransferState {
    /// Paused or finished seeding.
    #[default]
    Stopped,
    /// Waiting for its turn to check data on disk.
    QueuedToVerify,
    /// Checking data on disk.
    Verifying,
    /// Waiting for a download slot.
    QueuedToDownload,
    /// Downloading (also fetching metadata of a magnet).
    Downloading,
    /// Waiting for a seeding slot.
    QueuedToSeed,
    /// Complete and uploading.
    Seeding,
}

/// What is wrong with a transfer, if anything (`error` / `errorString`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TransferError {
    /// Nothing.
    #[default]
    None,
    /// A tracker answered with a warning.
    TrackerWarning(Arc<str>),
    /// A tracker answered with an error.
    TrackerError(Arc<str>),
    /// A local problem: disk full, missing files, a write error.
    Local(Arc<str>),
}

/// A time estimate (`eta`, `etaIdle`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Eta {
    /// Not applicable: not downloading (or no seeding goal).
    #[default]
    NotAvailable,
    /// Applicable but unknown: downloading with no data arriving.
    Unknown,
    /// This many seconds.
    Secs(u64),
}

/// A transfer's share ratio (`uploadRatio`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Ratio {
    /// Nothing downloaded or uploaded yet.
    #[default]
    NotAvailable,
    /// Uploaded without having downloaded (a seed from the start).
    Infinite,
    /// Uploaded / downloaded.
    Value(f64),
}

/// A per-transfer or per-file priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Priority {
    /// Last.
    Low,
    /// The default.
    #[default]
    Normal,
    /// First.
    High,
}

/// Which limit a transfer follows for a seeding goal (ratio or idle time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LimitMode {
    /// The session's default.
    #[default]
    Global,
    /// This transfer's own value.
    Single,
    /// None: seed for ever.
    Unlimited,
}

/// A speed limit as Transmission keeps it: the value is remembered while
/// the limit is off. Units are kB/s of 1000 bytes, as the RPC counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeedLimit {
    /// The limit in kB/s (1000 bytes per second).
    pub kbps: u64,
    /// Whether it applies.
    pub enabled: bool,
}

/// Where a transfer's peers came from (`peersFrom`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeersFrom {
    /// A cache of earlier sessions.
    pub cache: u32,
    /// The DHT (or Kad).
    pub dht: u32,
    /// Connections they made to us.
    pub incoming: u32,
    /// Local peer discovery.
    pub lpd: u32,
    /// Extension messages.
    pub ltep: u32,
    /// Peer exchange.
    pub pex: u32,
    /// Trackers (or eD2k servers).
    pub tracker: u32,
}

/// Everything `torrent-get` can report about one transfer, BitTorrent or
/// eD2k. Build one with [`TransferView::new`] and set what you know; the
/// defaults are what Transmission reports for "nothing yet".
#[derive(Clone, Debug)]
pub struct TransferView {
    /// Id (see [`TransferId`]).
    pub id: TransferId,
    /// Info-hash or ed2k hash.
    pub hash: TransferHash,
    /// Display name (the torrent's name, the file name of an eD2k link, or
    /// the magnet's `dn` until metadata arrives).
    pub name: Arc<str>,
    /// Directory the data is in.
    pub download_dir: Arc<str>,
    /// What it is doing.
    pub state: TransferState,
    /// What is wrong, if anything.
    pub error: TransferError,
    /// Bytes of the whole content; 0 while a magnet has no metadata.
    pub total_size: u64,
    /// Bytes of the wanted files.
    pub size_when_done: u64,
    /// Wanted bytes not yet verified.
    pub left_until_done: u64,
    /// Verified bytes on disk.
    pub have_valid: u64,
    /// Bytes received but not yet verified.
    pub have_unchecked: u64,
    /// Wanted bytes that connected peers have and we do not.
    pub desired_available: u64,
    /// Bytes thrown away because their piece failed its hash.
    pub corrupt_ever: u64,
    /// Payload bytes downloaded, all sessions.
    pub downloaded_ever: u64,
    /// Payload bytes uploaded, all sessions.
    pub uploaded_ever: u64,
    /// Current download rate, bytes per second.
    pub rate_download: u64,
    /// Current upload rate, bytes per second.
    pub rate_upload: u64,
    /// Time until complete (or until the seeding ratio goal).
    pub eta: Eta,
    /// Time until the idle-seeding limit stops it.
    pub eta_idle: Eta,
    /// Share ratio.
    pub upload_ratio: Ratio,
    /// Fraction of metadata received (1.0 for torrents and eD2k links).
    pub metadata_percent_complete: f64,
    /// Fraction of a running verification done.
    pub recheck_progress: f64,
    /// Peers connected.
    pub peers_connected: u32,
    /// Peers we upload to.
    pub peers_getting_from_us: u32,
    /// Peers that send us data.
    pub peers_sending_to_us: u32,
    /// Web seeds sending us data.
    pub webseeds_sending_to_us: u32,
    /// Where peers came from.
    pub peers_from: PeersFrom,
    /// Most peers this transfer may connect.
    pub peer_limit: u32,
    /// Unix time it was added.
    pub added_date: u64,
    /// Unix time it completed, if it has.
    pub done_date: Option<u64>,
    /// Unix time it was last started, if ever.
    pub start_date: Option<u64>,
    /// Unix time data last moved, if ever.
    pub activity_date: Option<u64>,
    /// Unix time its settings or data last changed, if ever.
    pub edit_date: Option<u64>,
    /// Unix time the torrent was created (from the metainfo), if known.
    pub date_created: Option<u64>,
    /// Unix time a manual re-announce becomes allowed, if it is not now.
    pub manual_announce_time: Option<u64>,
    /// Seconds spent downloading, all sessions.
    pub seconds_downloading: u64,
    /// Seconds spent seeding, all sessions.
    pub seconds_seeding: u64,
    /// BEP 27 private torrent.
    pub is_private: bool,
    /// Running but nothing moved for a while.
    pub is_stalled: bool,
    /// Reached its seeding goal (ratio or idle limit) and stopped
    /// (`isFinished`; Sonarr and Radarr may remove such a transfer).
    pub is_finished: bool,
    /// Position in the queue, from 0.
    pub queue_position: u32,
    /// Bandwidth priority.
    pub bandwidth_priority: Priority,
    /// Per-transfer download limit.
    pub download_limit: SpeedLimit,
    /// Per-transfer upload limit.
    pub upload_limit: SpeedLimit,
    /// Whether the session's limits apply too.
    pub honors_session_limits: bool,
    /// Which ratio limit applies.
    pub seed_ratio_mode: LimitMode,
    /// This transfer's own ratio limit.
    pub seed_ratio_limit: f64,
    /// Which idle limit applies.
    pub seed_idle_mode: LimitMode,
    /// This transfer's own idle limit, minutes.
    pub seed_idle_limit: u32,
    /// Download pieces in order.
    pub sequential: bool,
    /// Free-form labels.
    pub labels: Arc<[String]>,
    /// The metainfo's comment.
    pub comment: Arc<str>,
    /// The metainfo's `created by`.
    pub creator: Arc<str>,
    /// A link that adds the same transfer elsewhere: a magnet for
    /// BitTorrent, an `ed2k://` link for eD2k.
    pub link: Arc<str>,
    /// Path of the kept copy of the .torrent, if any.
    pub torrent_file: Arc<str>,
    /// Number of pieces (eD2k: parts), 0 without metadata.
    pub piece_count: u32,
    /// Bytes per piece (eD2k: 9,728,000), 0 without metadata.
    pub piece_size: u64,
    /// Number of files (known without [`Detail::files`]).
    pub file_count: u32,
    /// Web seed URLs.
    pub webseeds: Arc<[String]>,
    /// Files ([`Detail::files`] only).
    pub files: Vec<FileView>,
    /// Connected peers ([`Detail::peers`] only).
    pub peers: Vec<PeerView>,
    /// Trackers, or eD2k servers ([`Detail::trackers`] only).
    pub trackers: Vec<TrackerView>,
    /// Bitfield of verified pieces, most significant bit first
    /// ([`Detail::pieces`] only).
    pub pieces: Bytes,
    /// Per piece: how many connected peers have it, or -1 if we do
    /// ([`Detail::pieces`] only; may be left empty).
    pub availability: Vec<i32>,
}

impl TransferView {
    /// A view with Transmission's "nothing yet" values for everything but
    /// the id, hash and name.
    pub fn new(id: TransferId, hash: TransferHash, name: impl Into<Arc<str>>) -> Self {
        let empty: Arc<str> = Arc::default();
        TransferView {
            id,
            hash,
            name: name.into(),
            download_dir: empty.clone(),
            state: TransferState::Stopped,
            error: TransferError::None,
            total_size: 0,
            size_when_done: 0,
            left_until_done: 0,
            have_valid: 0,
            have_unchecked: 0,
            desired_available: 0,
            corrupt_ever: 0,
            downloaded_ever: 0,
            uploaded_ever: 0,
            rate_download: 0,
            rate_upload: 0,
            eta: Eta::NotAvailable,
            eta_idle: Eta::NotAvailable,
            upload_ratio: Ratio::NotAvailable,
            metadata_percent_complete: 1.0,
            recheck_progress: 0.0,
            peers_connected: 0,
            peers_getting_from_us: 0,
            peers_sending_to_us: 0,
            webseeds_sending_to_us: 0,
            peers_from: PeersFrom::default(),
            peer_limit: 50,
            added_date: 0,
            done_date: None,
            start_date: None,
            activity_date: None,
            edit_date: None,
            date_created: None,
            manual_announce_time: None,
            seconds_downloading: 0,
            seconds_seeding: 0,
            is_private: false,
            is_stalled: false,
            is_finished: false,
            queue_position: 0,
            bandwidth_priority: Priority::Normal,
            download_limit: SpeedLimit::default(),
            upload_limit: SpeedLimit::default(),
            honors_session_limits: true,
            seed_ratio_mode: LimitMode::Global,
            seed_ratio_limit: 2.0,
            seed_idle_mode: LimitMode::Global,
            seed_idle_limit: 30,
            sequential: false,
            labels: Arc::from(Vec::new()),
            comment: empty.clone(),
            creator: empty.clone(),
            link: empty.clone(),
            torrent_file: empty,
            piece_count: 0,
            piece_size: 0,
            file_count: 0,
            webseeds: Arc::from(Vec::new()),
            files: Vec::new(),
            peers: Vec::new(),
            trackers: Vec::new(),
            pieces: Bytes::new(),
            availability: Vec::new(),
        }
    }

    /// Fraction of the wanted bytes verified (`percentDone`).
    pub fn percent_done(&self) -> f64 {
        if self.size_when_done == 0 {
            return 0.0;
        }
        let done = self.size_when_done.saturating_sub(self.left_until_done);
        done as f64 / self.size_when_done as f64
    }

    /// Fraction of all bytes verified (`percentComplete`).
    pub fn percent_complete(&self) -> f64 {
        if self.total_size == 0 {
            return 0.0;
        }
        (self.have_valid as f64 / self.total_size as f64).min(1.0)
    }
}

/// One file of a transfer.
#[derive(Clone, Debug, PartialEq)]
pub struct FileView {
    /// Path relative to the download directory, `/`-separated (for a
    /// multi-file torrent it starts with the torrent's name).
    pub name: Arc<str>,
    /// Length in bytes.
    pub length: u64,
    /// Verified bytes of this file.
    pub bytes_completed: u64,
    /// Whether it is to be downloaded.
    pub wanted: bool,
    /// Its priority.
    pub priority: Priority,
    /// First piece holding part of it.
    pub begin_piece: u32,
    /// One past the last piece holding part of it.
    pub end_piece: u32,
}

/// One connected peer.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerView {
    /// Its address.
    pub address: IpAddr,
    /// Its port.
    pub port: u16,
    /// Its client, as its handshake or peer id says.
    pub client_name: Arc<str>,
    /// Fraction of the content it has.
    pub progress: f64,
    /// Bytes per second it sends us.
    pub rate_to_client: u64,
    /// Bytes per second we send it.
    pub rate_to_peer: u64,
    /// The connection is encrypted.
    pub is_encrypted: bool,
    /// It connected to us.
    pub is_incoming: bool,
    /// Over uTP.
    pub is_utp: bool,
    /// It chokes us.
    pub client_is_choked: bool,
    /// We are interested in it.
    pub client_is_interested: bool,
    /// We choke it.
    pub peer_is_choked: bool,
    /// It is interested in us.
    pub peer_is_interested: bool,
    /// We are receiving data from it now.
    pub is_downloading_from: bool,
    /// We are sending data to it now.
    pub is_uploading_to: bool,
    /// Where we learnt of it.
    pub source: PeerSource,
}

/// Where a peer came from (one letter of `flagStr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PeerSource {
    /// A tracker, an eD2k server, or the link itself.
    #[default]
    Tracker,
    /// DHT or Kad.
    Dht,
    /// Peer exchange.
    Pex,
    /// Local peer discovery.
    Lpd,
    /// It connected to us.
    Incoming,
}

/// State of a tracker's announce or scrape (`announceState`, `scrapeState`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TrackerState {
    /// Not in use.
    #[default]
    Inactive,
    /// Waiting for its next time.
    Waiting,
    /// Due, waiting for a slot.
    Queued,
    /// In progress.
    Active,
}

/// One tracker (or eD2k server).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrackerView {
    /// Stable id within the transfer.
    pub id: u32,
    /// BEP 12 tier, from 0.
    pub tier: u32,
    /// Announce URL (or `ed2k://|server|IP|PORT|/`).
    pub announce: Arc<str>,
    /// Scrape URL, if it has one.
    pub scrape: Arc<str>,
    /// Whether another tracker of its tier is in use instead.
    pub is_backup: bool,
    /// Announce state.
    pub announce_state: TrackerState,
    /// Scrape state.
    pub scrape_state: TrackerState,
    /// Whether an announce was made this session.
    pub has_announced: bool,
    /// Whether a scrape was made this session.
    pub has_scraped: bool,
    /// Unix time of the last announce answer, if any.
    pub last_announce_time: Option<u64>,
    /// Unix time the last announce started, if any.
    pub last_announce_start_time: Option<u64>,
    /// The last announce succeeded.
    pub last_announce_succeeded: bool,
    /// The last announce timed out.
    pub last_announce_timed_out: bool,
    /// What the last announce said ("Success", or the error).
    pub last_announce_result: Arc<str>,
    /// Peers the last announce gave.
    pub last_announce_peer_count: u32,
    /// Unix time of the next announce, if planned.
    pub next_announce_time: Option<u64>,
    /// Unix time of the last scrape answer, if any.
    pub last_scrape_time: Option<u64>,
    /// Unix time the last scrape started, if any.
    pub last_scrape_start_time: Option<u64>,
    /// The last scrape succeeded.
    pub last_scrape_succeeded: bool,
    /// The last scrape timed out.
    pub last_scrape_timed_out: bool,
    /// What the last scrape said.
    pub last_scrape_result: Arc<str>,
    /// Unix time of the next scrape, if planned.
    pub next_scrape_time: Option<u64>,
    /// Seeders it reports, if known.
    pub seeder_count: Option<u64>,
    /// Leechers it reports, if known.
    pub leecher_count: Option<u64>,
    /// Completed downloads it reports, if known.
    pub download_count: Option<u64>,
}
