//! The session: its settings (`session-get` / `session-set`) and figures
//! (`session-stats`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::SpeedLimit;

/// Peer encryption policy (`encryption`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
        let empty: Arc<str> = Arc::default();
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

impl SessionSettings {
    /// Applies every `Some` of a `session-set` to these settings (what a
    /// backend reports back; which ones it acts on is its own business).
    pub fn apply(&mut self, c: SessionChange) {
        let s = self;
        macro_rules! set {
        ($($f:ident),*) => { $( if let Some(x) = c.$f { s.$f = x; } )* };
    }
        set!(
            incomplete_dir_enabled,
            alt_speed_down,
            alt_speed_up,
            alt_speed_enabled,
            alt_speed_time_enabled,
            alt_speed_time_begin,
            alt_speed_time_end,
            alt_speed_time_day,
            peer_limit_global,
            peer_limit_per_torrent,
            peer_port,
            peer_port_random_on_start,
            dht_enabled,
            pex_enabled,
            lpd_enabled,
            utp_enabled,
            port_forwarding_enabled,
            encryption,
            seed_ratio_limit,
            seed_ratio_limited,
            idle_seeding_limit,
            idle_seeding_limit_enabled,
            download_queue_enabled,
            download_queue_size,
            seed_queue_enabled,
            seed_queue_size,
            queue_stalled_enabled,
            queue_stalled_minutes,
            start_added_torrents,
            trash_original_torrent_files,
            rename_partial_files,
            cache_size_mb,
            blocklist_enabled,
            script_torrent_done_enabled,
            script_torrent_added_enabled,
            script_torrent_done_seeding_enabled
        );
        let arc = |p: &Path| Arc::from(p.to_string_lossy().as_ref());
        if let Some(d) = &c.download_dir {
            s.download_dir = arc(d);
        }
        if let Some(d) = &c.incomplete_dir {
            s.incomplete_dir = arc(d);
        }
        if let Some(x) = c.speed_limit_down {
            s.speed_limit_down.kbps = x;
        }
        if let Some(x) = c.speed_limit_down_enabled {
            s.speed_limit_down.enabled = x;
        }
        if let Some(x) = c.speed_limit_up {
            s.speed_limit_up.kbps = x;
        }
        if let Some(x) = c.speed_limit_up_enabled {
            s.speed_limit_up.enabled = x;
        }
        for (src, dst) in [
            (&c.blocklist_url, &mut s.blocklist_url),
            (
                &c.script_torrent_done_filename,
                &mut s.script_torrent_done_filename,
            ),
            (
                &c.script_torrent_added_filename,
                &mut s.script_torrent_added_filename,
            ),
            (
                &c.script_torrent_done_seeding_filename,
                &mut s.script_torrent_done_seeding_filename,
            ),
            (&c.default_trackers, &mut s.default_trackers),
        ] {
            if let Some(x) = src {
                *dst = Arc::from(x.as_str());
            }
        }
    }
}

/// A `session-set`: each `Some` is a setting to change. Serializable so
/// that a backend can keep what was changed (merged with
/// [`SessionChange::merge`]) and apply it again at its next start, as
/// Transmission keeps `settings.json`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
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

impl SessionChange {
    /// Takes every `Some` of `later` over this one's (what a backend keeps
    /// after several `session-set`s).
    pub fn merge(&mut self, later: SessionChange) {
        macro_rules! take {
            ($($f:ident),*) => { $( if later.$f.is_some() { self.$f = later.$f; } )* };
        }
        take!(
            download_dir,
            incomplete_dir,
            incomplete_dir_enabled,
            speed_limit_down,
            speed_limit_down_enabled,
            speed_limit_up,
            speed_limit_up_enabled,
            alt_speed_down,
            alt_speed_up,
            alt_speed_enabled,
            alt_speed_time_enabled,
            alt_speed_time_begin,
            alt_speed_time_end,
            alt_speed_time_day,
            peer_limit_global,
            peer_limit_per_torrent,
            peer_port,
            peer_port_random_on_start,
            dht_enabled,
            pex_enabled,
            lpd_enabled,
            utp_enabled,
            port_forwarding_enabled,
            encryption,
            seed_ratio_limit,
            seed_ratio_limited,
            idle_seeding_limit,
            idle_seeding_limit_enabled,
            download_queue_enabled,
            download_queue_size,
            seed_queue_enabled,
            seed_queue_size,
            queue_stalled_enabled,
            queue_stalled_minutes,
            start_added_torrents,
            trash_original_torrent_files,
            rename_partial_files,
            cache_size_mb,
            blocklist_enabled,
            blocklist_url,
            script_torrent_done_enabled,
            script_torrent_done_filename,
            script_torrent_added_enabled,
            script_torrent_added_filename,
            script_torrent_done_seeding_enabled,
            script_torrent_done_seeding_filename,
            default_trackers
        );
    }
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
