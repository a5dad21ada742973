//! The boundary between the RPC front end and the engine's session.
//!
//! The server never touches the engine: it calls a [`Backend`] and gets Rust
//! values back. Everything about Transmission's JSON (key spellings, status
//! numbers, the `-1`/`-2` ETA conventions, kB/s units of limits, the order of
//! `flagStr` letters) lives in this crate; a backend only says what is true
//! of its transfers.
//!
//! # Implementing it on the session
//!
//! Each method is `async` and must not block the server's runtime: the real
//! backend sends a command to the session task over a channel and awaits its
//! answer. A method that reaches a session that has stopped returns
//! [`BackendError::Unavailable`]. Every method may be called concurrently
//! from several connections.
//!
//! Transfers are named by [`TransferRef`]s (the small integer id the backend
//! assigned, or the info-hash / ed2k hash); [`Selection`] is what a request
//! names: all transfers, a list of refs (unknown ones are skipped, as
//! Transmission does), or the recently active ones. Ids must stay stable for
//! the life of the process and must not be reused for another transfer.
//!
//! `torrent-get` is the hot path (clients poll it every second or two with
//! hundreds or thousands of transfers): [`Backend::transfers`] receives a
//! [`Detail`] saying which costly parts (files, peers, trackers, pieces) the
//! request needs, and should fill only those; names and paths are `Arc<str>`
//! so a view can be cloned out of the session without copying strings.

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

/// A transfer's id: a small integer the backend assigns when the transfer is
/// added, stable while the process runs (Transmission's `id`).
pub type TransferId = u64;

/// The content hash that names a transfer across restarts: a BitTorrent v1
/// info-hash or an eD2k file hash (`hashString` in the RPC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransferHash {
    /// SHA-1 of the torrent's info dictionary (40 hex digits).
    Bt([u8; 20]),
    /// MD4 ed2k file hash (32 hex digits).
    Ed2k([u8; 16]),
}

impl TransferHash {
    /// Parses 40 hex digits (BitTorrent) or 32 (eD2k), either case; `None`
    /// for anything else.
    pub fn parse_hex(s: &str) -> Option<Self> {
        fn fill<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
            let mut out = [0u8; N];
            for (i, pair) in s.chunks_exact(2).enumerate() {
                out[i] = (hex_val(pair[0])? << 4) | hex_val(pair[1])?;
            }
            Some(out)
        }
        let b = s.as_bytes();
        match b.len() {
            40 => fill::<20>(b).map(TransferHash::Bt),
            32 => fill::<16>(b).map(TransferHash::Ed2k),
            _ => None,
        }
    }

    /// The hash's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            TransferHash::Bt(h) => h,
            TransferHash::Ed2k(h) => h,
        }
    }

    /// Lower-case hex, as Transmission prints `hashString`.
    pub fn to_hex(&self) -> String {
        let mut out = Vec::with_capacity(40);
        self.write_hex(&mut out);
        // Hex digits are ASCII.
        String::from_utf8(out).unwrap_or_default()
    }

    /// Appends lower-case hex to `out` (no allocation on the hot path).
    pub fn write_hex(&self, out: &mut Vec<u8>) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for b in self.as_bytes() {
            out.push(DIGITS[(b >> 4) as usize]);
            out.push(DIGITS[(b & 15) as usize]);
        }
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// One transfer named in a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferRef {
    /// By id.
    Id(TransferId),
    /// By content hash.
    Hash(TransferHash),
}

/// Which transfers a request is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Every transfer (the request had no `ids`).
    All,
    /// These (unknown ones are skipped; the list may be empty).
    Refs(Vec<TransferRef>),
    /// Transfers whose state or figures changed in the last
    /// [`RECENTLY_ACTIVE_SECS`] seconds (Transmission's `recently-active`).
    RecentlyActive,
}

impl Selection {
    /// Whether a transfer with this id and hash is selected, for backends
    /// that filter by scanning (`RecentlyActive` is the backend's to decide
    /// and answers `true` here).
    pub fn matches(&self, id: TransferId, hash: &TransferHash) -> bool {
        match self {
            Selection::All | Selection::RecentlyActive => true,
            Selection::Refs(refs) => refs.iter().any(|r| match r {
                TransferRef::Id(i) => *i == id,
                TransferRef::Hash(h) => h == hash,
            }),
        }
    }
}

/// How far back `recently-active` looks, as Transmission (60 s).
pub const RECENTLY_ACTIVE_SECS: u64 = 60;

/// The costly parts of a [`TransferView`] a `torrent-get` needs; the
/// backend leaves the others empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Detail {
    /// [`TransferView::files`].
    pub files: bool,
    /// [`TransferView::peers`].
    pub peers: bool,
    /// [`TransferView::trackers`].
    pub trackers: bool,
    /// [`TransferView::pieces`] and [`TransferView::availability`].
    pub pieces: bool,
}

/// A `torrent-get`: which transfers, and which costly parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferQuery {
    /// Which transfers.
    pub select: Selection,
    /// Which costly parts to fill.
    pub detail: Detail,
}

/// The answer to a [`TransferQuery`].
#[derive(Clone, Debug, Default)]
pub struct TransferList {
    /// The selected transfers, in id order.
    pub transfers: Vec<TransferView>,
    /// For [`Selection::RecentlyActive`]: ids of transfers removed in the
    /// last [`RECENTLY_ACTIVE_SECS`] seconds (empty otherwise).
    pub removed: Vec<TransferId>,
}

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
        let empty: Arc<str> = Arc::from("");
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

/// Peer encryption policy (`encryption`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encryption {
    /// Only encrypted connections.
    Required,
    /// Encrypted when the peer can.
    #[default]
    Preferred,
    /// Plain text preferred.
    Tolerated,
}

/// The session's settings, as `session-get` reports them.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSettings {
    /// Default directory for new transfers.
    pub download_dir: Arc<str>,
    /// Free bytes in it, if known (`download-dir-free-space`).
    pub download_dir_free_space: Option<u64>,
    /// Directory for incomplete data, when used.
    pub incomplete_dir: Arc<str>,
    /// Whether `incomplete_dir` is used.
    pub incomplete_dir_enabled: bool,
    /// Directory of the daemon's state.
    pub config_dir: Arc<str>,
    /// Global download limit.
    pub speed_limit_down: SpeedLimit,
    /// Global upload limit.
    pub speed_limit_up: SpeedLimit,
    /// Alternative ("turtle") download limit, kB/s.
    pub alt_speed_down: u64,
    /// Alternative upload limit, kB/s.
    pub alt_speed_up: u64,
    /// Alternative limits in force.
    pub alt_speed_enabled: bool,
    /// Alternative limits follow a schedule.
    pub alt_speed_time_enabled: bool,
    /// Schedule start, minutes after midnight.
    pub alt_speed_time_begin: u32,
    /// Schedule end, minutes after midnight.
    pub alt_speed_time_end: u32,
    /// Schedule days, a bit per day from Sunday (127 = every day).
    pub alt_speed_time_day: u32,
    /// Most peers in all.
    pub peer_limit_global: u32,
    /// Most peers per transfer.
    pub peer_limit_per_torrent: u32,
    /// Port peers connect to.
    pub peer_port: u16,
    /// Pick a random peer port at start.
    pub peer_port_random_on_start: bool,
    /// DHT in use.
    pub dht_enabled: bool,
    /// Peer exchange in use.
    pub pex_enabled: bool,
    /// Local peer discovery in use.
    pub lpd_enabled: bool,
    /// uTP in use.
    pub utp_enabled: bool,
    /// UPnP / NAT-PMP port mapping in use.
    pub port_forwarding_enabled: bool,
    /// Encryption policy.
    pub encryption: Encryption,
    /// Default seeding ratio goal.
    pub seed_ratio_limit: f64,
    /// Whether the ratio goal applies by default.
    pub seed_ratio_limited: bool,
    /// Default idle-seeding limit, minutes.
    pub idle_seeding_limit: u32,
    /// Whether the idle limit applies by default.
    pub idle_seeding_limit_enabled: bool,
    /// Download queue in use.
    pub download_queue_enabled: bool,
    /// Transfers downloading at once.
    pub download_queue_size: u32,
    /// Seed queue in use.
    pub seed_queue_enabled: bool,
    /// Transfers seeding at once.
    pub seed_queue_size: u32,
    /// Idle transfers leave the queue.
    pub queue_stalled_enabled: bool,
    /// Minutes before a transfer counts as idle.
    pub queue_stalled_minutes: u32,
    /// New transfers start at once.
    pub start_added_torrents: bool,
    /// Delete a .torrent from the watch folder once added.
    pub trash_original_torrent_files: bool,
    /// Incomplete files end in `.part`.
    pub rename_partial_files: bool,
    /// Memory cache, MiB.
    pub cache_size_mb: u32,
    /// Blocklist in use (weir has none: false).
    pub blocklist_enabled: bool,
    /// Rules in the blocklist.
    pub blocklist_size: u64,
    /// Where the blocklist would come from.
    pub blocklist_url: Arc<str>,
    /// Run a script when a transfer completes.
    pub script_torrent_done_enabled: bool,
    /// That script.
    pub script_torrent_done_filename: Arc<str>,
    /// Run a script when a transfer is added.
    pub script_torrent_added_enabled: bool,
    /// That script.
    pub script_torrent_added_filename: Arc<str>,
    /// Run a script when a transfer stops seeding.
    pub script_torrent_done_seeding_enabled: bool,
    /// That script.
    pub script_torrent_done_seeding_filename: Arc<str>,
    /// Trackers added to every public torrent, one URL a line.
    pub default_trackers: Arc<str>,
}

impl Default for SessionSettings {
    /// Transmission's defaults, with weir's discovery features off.
    fn default() -> Self {
        let empty: Arc<str> = Arc::from("");
        SessionSettings {
            download_dir: empty.clone(),
            download_dir_free_space: None,
            incomplete_dir: empty.clone(),
            incomplete_dir_enabled: false,
            config_dir: empty.clone(),
            speed_limit_down: SpeedLimit {
                kbps: 100,
                enabled: false,
            },
            speed_limit_up: SpeedLimit {
                kbps: 100,
                enabled: false,
            },
            alt_speed_down: 50,
            alt_speed_up: 50,
            alt_speed_enabled: false,
            alt_speed_time_enabled: false,
            alt_speed_time_begin: 540,
            alt_speed_time_end: 1020,
            alt_speed_time_day: 127,
            peer_limit_global: 200,
            peer_limit_per_torrent: 50,
            peer_port: 51413,
            peer_port_random_on_start: false,
            dht_enabled: false,
            pex_enabled: false,
            lpd_enabled: false,
            utp_enabled: false,
            port_forwarding_enabled: false,
            encryption: Encryption::Preferred,
            seed_ratio_limit: 2.0,
            seed_ratio_limited: false,
            idle_seeding_limit: 30,
            idle_seeding_limit_enabled: false,
            download_queue_enabled: false,
            download_queue_size: 5,
            seed_queue_enabled: false,
            seed_queue_size: 10,
            queue_stalled_enabled: true,
            queue_stalled_minutes: 30,
            start_added_torrents: true,
            trash_original_torrent_files: false,
            rename_partial_files: false,
            cache_size_mb: 4,
            blocklist_enabled: false,
            blocklist_size: 0,
            blocklist_url: empty.clone(),
            script_torrent_done_enabled: false,
            script_torrent_done_filename: empty.clone(),
            script_torrent_added_enabled: false,
            script_torrent_added_filename: empty.clone(),
            script_torrent_done_seeding_enabled: false,
            script_torrent_done_seeding_filename: empty.clone(),
            default_trackers: empty,
        }
    }
}

/// A `session-set`: each `Some` is a setting to change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionChange {
    /// `download-dir`.
    pub download_dir: Option<PathBuf>,
    /// `incomplete-dir`.
    pub incomplete_dir: Option<PathBuf>,
    /// `incomplete-dir-enabled`.
    pub incomplete_dir_enabled: Option<bool>,
    /// `speed-limit-down`, kB/s.
    pub speed_limit_down: Option<u64>,
    /// `speed-limit-down-enabled`.
    pub speed_limit_down_enabled: Option<bool>,
    /// `speed-limit-up`, kB/s.
    pub speed_limit_up: Option<u64>,
    /// `speed-limit-up-enabled`.
    pub speed_limit_up_enabled: Option<bool>,
    /// `alt-speed-down`, kB/s.
    pub alt_speed_down: Option<u64>,
    /// `alt-speed-up`, kB/s.
    pub alt_speed_up: Option<u64>,
    /// `alt-speed-enabled`.
    pub alt_speed_enabled: Option<bool>,
    /// `alt-speed-time-enabled`.
    pub alt_speed_time_enabled: Option<bool>,
    /// `alt-speed-time-begin`.
    pub alt_speed_time_begin: Option<u32>,
    /// `alt-speed-time-end`.
    pub alt_speed_time_end: Option<u32>,
    /// `alt-speed-time-day`.
    pub alt_speed_time_day: Option<u32>,
    /// `peer-limit-global`.
    pub peer_limit_global: Option<u32>,
    /// `peer-limit-per-torrent`.
    pub peer_limit_per_torrent: Option<u32>,
    /// `peer-port`.
    pub peer_port: Option<u16>,
    /// `peer-port-random-on-start`.
    pub peer_port_random_on_start: Option<bool>,
    /// `dht-enabled`.
    pub dht_enabled: Option<bool>,
    /// `pex-enabled`.
    pub pex_enabled: Option<bool>,
    /// `lpd-enabled`.
    pub lpd_enabled: Option<bool>,
    /// `utp-enabled`.
    pub utp_enabled: Option<bool>,
    /// `port-forwarding-enabled`.
    pub port_forwarding_enabled: Option<bool>,
    /// `encryption`.
    pub encryption: Option<Encryption>,
    /// `seedRatioLimit`.
    pub seed_ratio_limit: Option<f64>,
    /// `seedRatioLimited`.
    pub seed_ratio_limited: Option<bool>,
    /// `idle-seeding-limit`.
    pub idle_seeding_limit: Option<u32>,
    /// `idle-seeding-limit-enabled`.
    pub idle_seeding_limit_enabled: Option<bool>,
    /// `download-queue-enabled`.
    pub download_queue_enabled: Option<bool>,
    /// `download-queue-size`.
    pub download_queue_size: Option<u32>,
    /// `seed-queue-enabled`.
    pub seed_queue_enabled: Option<bool>,
    /// `seed-queue-size`.
    pub seed_queue_size: Option<u32>,
    /// `queue-stalled-enabled`.
    pub queue_stalled_enabled: Option<bool>,
    /// `queue-stalled-minutes`.
    pub queue_stalled_minutes: Option<u32>,
    /// `start-added-torrents`.
    pub start_added_torrents: Option<bool>,
    /// `trash-original-torrent-files`.
    pub trash_original_torrent_files: Option<bool>,
    /// `rename-partial-files`.
    pub rename_partial_files: Option<bool>,
    /// `cache-size-mb`.
    pub cache_size_mb: Option<u32>,
    /// `blocklist-enabled`.
    pub blocklist_enabled: Option<bool>,
    /// `blocklist-url`.
    pub blocklist_url: Option<String>,
    /// `script-torrent-done-enabled`.
    pub script_torrent_done_enabled: Option<bool>,
    /// `script-torrent-done-filename`.
    pub script_torrent_done_filename: Option<String>,
    /// `script-torrent-added-enabled`.
    pub script_torrent_added_enabled: Option<bool>,
    /// `script-torrent-added-filename`.
    pub script_torrent_added_filename: Option<String>,
    /// `script-torrent-done-seeding-enabled`.
    pub script_torrent_done_seeding_enabled: Option<bool>,
    /// `script-torrent-done-seeding-filename`.
    pub script_torrent_done_seeding_filename: Option<String>,
    /// `default-trackers`.
    pub default_trackers: Option<String>,
}

/// Traffic figures for `session-stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsTotals {
    /// Payload bytes uploaded.
    pub uploaded_bytes: u64,
    /// Payload bytes downloaded.
    pub downloaded_bytes: u64,
    /// Transfers added.
    pub files_added: u64,
    /// Times the daemon started.
    pub session_count: u64,
    /// Seconds the daemon ran.
    pub seconds_active: u64,
}

/// `session-stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Transfers not stopped.
    pub active_torrent_count: u64,
    /// Transfers stopped.
    pub paused_torrent_count: u64,
    /// All transfers.
    pub torrent_count: u64,
    /// Global download rate, bytes per second.
    pub download_speed: u64,
    /// Global upload rate, bytes per second.
    pub upload_speed: u64,
    /// Since the daemon started.
    pub current: StatsTotals,
    /// Over all runs.
    pub cumulative: StatsTotals,
}

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

/// Why a backend call failed. Each maps to Transmission's result string
/// (classic form) and a JSON-RPC error code (6.0 form) in this crate.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The .torrent (or link) could not be parsed.
    #[error("invalid or corrupt torrent file ({0})")]
    InvalidTorrent(String),
    /// A URL could not be fetched (or its policy refused it).
    #[error("http error: {0}")]
    Fetch(String),
    /// A path argument must be absolute.
    #[error("path is not absolute: {0}")]
    PathNotAbsolute(PathBuf),
    /// A file index is past the transfer's last file.
    #[error("file index out of range: {0}")]
    FileIndexOutOfRange(u32),
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// weir does not do this (e.g. blocklists, renaming a path).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The request is valid JSON but asks for something impossible.
    #[error("{0}")]
    Invalid(String),
    /// The session is gone (shutting down or stopped).
    #[error("the session is not running")]
    Unavailable,
}

/// The engine side of the RPC server. See the [module docs](self) for the
/// contract.
pub trait Backend: Send + Sync + 'static {
    /// `session-get`.
    fn session(&self) -> impl Future<Output = Result<SessionSettings, BackendError>> + Send;

    /// `session-set`: applies every `Some` in `change`.
    fn set_session(
        &self,
        change: SessionChange,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `session-stats`.
    fn stats(&self) -> impl Future<Output = Result<SessionStats, BackendError>> + Send;

    /// `torrent-get`: the selected transfers with the asked-for detail.
    fn transfers(
        &self,
        query: TransferQuery,
    ) -> impl Future<Output = Result<TransferList, BackendError>> + Send;

    /// `torrent-add`.
    fn add(&self, req: AddRequest)
    -> impl Future<Output = Result<AddOutcome, BackendError>> + Send;

    /// `torrent-set` on every selected transfer.
    fn change(
        &self,
        select: Selection,
        change: TransferChange,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Start, stop, verify, re-announce or move in the queue.
    fn act(
        &self,
        select: Selection,
        action: Action,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `torrent-remove`, deleting the data too when `delete_local_data`.
    fn remove(
        &self,
        select: Selection,
        delete_local_data: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `torrent-set-location`: the data is now under `location`; with
    /// `move_data` the backend moves it there first.
    fn set_location(
        &self,
        select: Selection,
        location: PathBuf,
        move_data: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `torrent-rename-path`. The default refuses.
    fn rename_path(
        &self,
        target: TransferRef,
        path: String,
        name: String,
    ) -> impl Future<Output = Result<Renamed, BackendError>> + Send {
        let _ = (target, path, name);
        async {
            Err(BackendError::Unsupported(
                "torrent-rename-path is not supported by weir",
            ))
        }
    }

    /// `free-space` of a directory.
    fn free_space(
        &self,
        path: PathBuf,
    ) -> impl Future<Output = Result<FreeSpace, BackendError>> + Send;

    /// `port-test`: whether the peer port is listening. It must answer from
    /// what the session knows; weir never asks an outside service.
    fn port_is_open(&self) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// `session-close`: the daemon should stop (cleanly) after answering.
    fn close(&self) -> impl Future<Output = Result<(), BackendError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_parse_and_print() {
        let h = TransferHash::parse_hex("266A2DB8C22953C39FA5F3D73001D11CB5571ABB").unwrap();
        assert!(matches!(h, TransferHash::Bt(_)));
        assert_eq!(h.to_hex(), "266a2db8c22953c39fa5f3d73001d11cb5571abb");
        let e = TransferHash::parse_hex("d3b6b09d73d3fe0dd41dde5ed244215a").unwrap();
        assert!(matches!(e, TransferHash::Ed2k(_)));
        assert_eq!(e.to_hex(), "d3b6b09d73d3fe0dd41dde5ed244215a");
        assert_eq!(TransferHash::parse_hex("xyz"), None);
        assert_eq!(TransferHash::parse_hex(&"g".repeat(40)), None);
        assert_eq!(TransferHash::parse_hex(""), None);
    }

    #[test]
    fn selection_matches_ids_and_hashes() {
        let h = TransferHash::Bt([7; 20]);
        let other = TransferHash::Bt([8; 20]);
        let s = Selection::Refs(vec![TransferRef::Id(3), TransferRef::Hash(h)]);
        assert!(s.matches(3, &other));
        assert!(s.matches(9, &h));
        assert!(!s.matches(9, &other));
        assert!(Selection::All.matches(1, &other));
        assert!(!Selection::Refs(vec![]).matches(1, &other));
    }

    #[test]
    fn percent_done_handles_zero_sizes() {
        let mut v = TransferView::new(1, TransferHash::Bt([0; 20]), "x");
        assert_eq!(v.percent_done(), 0.0);
        v.size_when_done = 200;
        v.left_until_done = 50;
        assert!((v.percent_done() - 0.75).abs() < 1e-9);
        v.total_size = 400;
        v.have_valid = 150;
        assert!((v.percent_complete() - 0.375).abs() < 1e-9);
    }
}
