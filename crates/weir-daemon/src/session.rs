//! `session-get`, `session-set` and `session-stats`: the session keys in
//! both spellings.

use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::backend::{Encryption, SessionChange, SessionSettings, SessionStats, StatsTotals};
use crate::rpc::{Form, RpcError};

fn encryption_name(e: Encryption) -> &'static str {
    match e {
        Encryption::Required => "required",
        Encryption::Preferred => "preferred",
        Encryption::Tolerated => "tolerated",
    }
}

/// Every `session-get` key: `(classic, snake, value)`.
fn entries(
    s: &SessionSettings,
    form: Form,
    session_id: &str,
) -> Vec<(&'static str, &'static str, Value)> {
    let v = form.versions();
    let units = match form {
        Form::Classic => json!({
            "memory-bytes": 1024, "memory-units": ["KiB", "MiB", "GiB", "TiB"],
            "size-bytes": 1000, "size-units": ["kB", "MB", "GB", "TB"],
            "speed-bytes": 1000, "speed-units": ["kB/s", "MB/s", "GB/s", "TB/s"],
        }),
        Form::JsonRpc => json!({
            "memory_bytes": 1024, "memory_units": ["KiB", "MiB", "GiB", "TiB"],
            "size_bytes": 1000, "size_units": ["kB", "MB", "GB", "TB"],
            "speed_bytes": 1000, "speed_units": ["kB/s", "MB/s", "GB/s", "TB/s"],
        }),
    };
    let mut e = vec![
        ("alt-speed-down", "alt_speed_down", json!(s.alt_speed_down)),
        (
            "alt-speed-enabled",
            "alt_speed_enabled",
            json!(s.alt_speed_enabled),
        ),
        (
            "alt-speed-time-begin",
            "alt_speed_time_begin",
            json!(s.alt_speed_time_begin),
        ),
        (
            "alt-speed-time-day",
            "alt_speed_time_day",
            json!(s.alt_speed_time_day),
        ),
        (
            "alt-speed-time-enabled",
            "alt_speed_time_enabled",
            json!(s.alt_speed_time_enabled),
        ),
        (
            "alt-speed-time-end",
            "alt_speed_time_end",
            json!(s.alt_speed_time_end),
        ),
        ("alt-speed-up", "alt_speed_up", json!(s.alt_speed_up)),
        (
            "blocklist-enabled",
            "blocklist_enabled",
            json!(s.blocklist_enabled),
        ),
        ("blocklist-size", "blocklist_size", json!(s.blocklist_size)),
        ("blocklist-url", "blocklist_url", json!(&*s.blocklist_url)),
        ("cache-size-mb", "cache_size_mb", json!(s.cache_size_mb)),
        ("config-dir", "config_dir", json!(&*s.config_dir)),
        (
            "default-trackers",
            "default_trackers",
            json!(&*s.default_trackers),
        ),
        ("dht-enabled", "dht_enabled", json!(s.dht_enabled)),
        ("download-dir", "download_dir", json!(&*s.download_dir)),
        (
            "download-queue-enabled",
            "download_queue_enabled",
            json!(s.download_queue_enabled),
        ),
        (
            "download-queue-size",
            "download_queue_size",
            json!(s.download_queue_size),
        ),
        (
            "encryption",
            "encryption",
            json!(encryption_name(s.encryption)),
        ),
        (
            "idle-seeding-limit",
            "idle_seeding_limit",
            json!(s.idle_seeding_limit),
        ),
        (
            "idle-seeding-limit-enabled",
            "idle_seeding_limit_enabled",
            json!(s.idle_seeding_limit_enabled),
        ),
        (
            "incomplete-dir",
            "incomplete_dir",
            json!(&*s.incomplete_dir),
        ),
        (
            "incomplete-dir-enabled",
            "incomplete_dir_enabled",
            json!(s.incomplete_dir_enabled),
        ),
        ("lpd-enabled", "lpd_enabled", json!(s.lpd_enabled)),
        (
            "peer-limit-global",
            "peer_limit_global",
            json!(s.peer_limit_global),
        ),
        (
            "peer-limit-per-torrent",
            "peer_limit_per_torrent",
            json!(s.peer_limit_per_torrent),
        ),
        ("peer-port", "peer_port", json!(s.peer_port)),
        (
            "peer-port-random-on-start",
            "peer_port_random_on_start",
            json!(s.peer_port_random_on_start),
        ),
        ("pex-enabled", "pex_enabled", json!(s.pex_enabled)),
        (
            "port-forwarding-enabled",
            "port_forwarding_enabled",
            json!(s.port_forwarding_enabled),
        ),
        (
            "queue-stalled-enabled",
            "queue_stalled_enabled",
            json!(s.queue_stalled_enabled),
        ),
        (
            "queue-stalled-minutes",
            "queue_stalled_minutes",
            json!(s.queue_stalled_minutes),
        ),
        (
            "rename-partial-files",
            "rename_partial_files",
            json!(s.rename_partial_files),
        ),
        ("rpc-version", "rpc_version", json!(v.rpc_version)),
        (
            "rpc-version-minimum",
            "rpc_version_minimum",
            json!(v.rpc_version_minimum),
        ),
        (
            "rpc-version-semver",
            "rpc_version_semver",
            json!(v.rpc_version_semver),
        ),
        (
            "script-torrent-added-enabled",
            "script_torrent_added_enabled",
            json!(s.script_torrent_added_enabled),
        ),
        (
            "script-torrent-added-filename",
            "script_torrent_added_filename",
            json!(&*s.script_torrent_added_filename),
        ),
        (
            "script-torrent-done-enabled",
            "script_torrent_done_enabled",
            json!(s.script_torrent_done_enabled),
        ),
        (
            "script-torrent-done-filename",
            "script_torrent_done_filename",
            json!(&*s.script_torrent_done_filename),
        ),
        (
            "script-torrent-done-seeding-enabled",
            "script_torrent_done_seeding_enabled",
            json!(s.script_torrent_done_seeding_enabled),
        ),
        (
            "script-torrent-done-seeding-filename",
            "script_torrent_done_seeding_filename",
            json!(&*s.script_torrent_done_seeding_filename),
        ),
        (
            "seed-queue-enabled",
            "seed_queue_enabled",
            json!(s.seed_queue_enabled),
        ),
        (
            "seed-queue-size",
            "seed_queue_size",
            json!(s.seed_queue_size),
        ),
        (
            "seedRatioLimit",
            "seed_ratio_limit",
            json!(s.seed_ratio_limit),
        ),
        (
            "seedRatioLimited",
            "seed_ratio_limited",
            json!(s.seed_ratio_limited),
        ),
        ("session-id", "session_id", json!(session_id)),
        (
            "speed-limit-down",
            "speed_limit_down",
            json!(s.speed_limit_down.kbps),
        ),
        (
            "speed-limit-down-enabled",
            "speed_limit_down_enabled",
            json!(s.speed_limit_down.enabled),
        ),
        (
            "speed-limit-up",
            "speed_limit_up",
            json!(s.speed_limit_up.kbps),
        ),
        (
            "speed-limit-up-enabled",
            "speed_limit_up_enabled",
            json!(s.speed_limit_up.enabled),
        ),
        (
            "start-added-torrents",
            "start_added_torrents",
            json!(s.start_added_torrents),
        ),
        (
            "trash-original-torrent-files",
            "trash_original_torrent_files",
            json!(s.trash_original_torrent_files),
        ),
        ("units", "units", units),
        ("utp-enabled", "utp_enabled", json!(s.utp_enabled)),
        ("version", "version", json!(v.version)),
    ];
    if let Some(free) = s.download_dir_free_space {
        e.push((
            "download-dir-free-space",
            "download_dir_free_space",
            json!(free),
        ));
    }
    e
}

/// The `session-get` answer, limited to `fields` when given (any spelling;
/// unknown names are ignored; an empty list means all, as in Transmission).
pub(crate) fn get(
    s: &SessionSettings,
    form: Form,
    session_id: &str,
    fields: Option<&[String]>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (classic, snake, value) in entries(s, form, session_id) {
        let wanted = match fields {
            None | Some([]) => true,
            Some(f) => f.iter().any(|n| n == classic || n == snake),
        };
        if wanted {
            out.insert(form.key(classic, snake).to_owned(), value);
        }
    }
    out
}

fn path(a: &Args<'_>, names: &[&'static str]) -> Result<Option<std::path::PathBuf>, RpcError> {
    Ok(a.str(names)?.map(std::path::PathBuf::from))
}

fn owned(a: &Args<'_>, names: &[&'static str]) -> Result<Option<String>, RpcError> {
    Ok(a.str(names)?.map(str::to_owned))
}

/// Reads a `session-set`.
pub(crate) fn change(a: &Args<'_>) -> Result<SessionChange, RpcError> {
    let encryption = match a.str(&["encryption"])? {
        None => None,
        Some("required") => Some(Encryption::Required),
        Some("preferred") => Some(Encryption::Preferred),
        Some("tolerated") => Some(Encryption::Tolerated),
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "invalid argument 'encryption': {other:?} is not required, preferred or tolerated"
            )));
        }
    };
    Ok(SessionChange {
        download_dir: path(a, &["download-dir", "download_dir"])?,
        incomplete_dir: path(a, &["incomplete-dir", "incomplete_dir"])?,
        incomplete_dir_enabled: a.bool(&["incomplete-dir-enabled", "incomplete_dir_enabled"])?,
        speed_limit_down: a.uint(&["speed-limit-down", "speed_limit_down"])?,
        speed_limit_down_enabled: a
            .bool(&["speed-limit-down-enabled", "speed_limit_down_enabled"])?,
        speed_limit_up: a.uint(&["speed-limit-up", "speed_limit_up"])?,
        speed_limit_up_enabled: a.bool(&["speed-limit-up-enabled", "speed_limit_up_enabled"])?,
        alt_speed_down: a.uint(&["alt-speed-down", "alt_speed_down"])?,
        alt_speed_up: a.uint(&["alt-speed-up", "alt_speed_up"])?,
        alt_speed_enabled: a.bool(&["alt-speed-enabled", "alt_speed_enabled"])?,
        alt_speed_time_enabled: a.bool(&["alt-speed-time-enabled", "alt_speed_time_enabled"])?,
        alt_speed_time_begin: a.uint(&["alt-speed-time-begin", "alt_speed_time_begin"])?,
        alt_speed_time_end: a.uint(&["alt-speed-time-end", "alt_speed_time_end"])?,
        alt_speed_time_day: a.uint(&["alt-speed-time-day", "alt_speed_time_day"])?,
        peer_limit_global: a.uint(&["peer-limit-global", "peer_limit_global"])?,
        peer_limit_per_torrent: a.uint(&["peer-limit-per-torrent", "peer_limit_per_torrent"])?,
        peer_port: a.uint(&["peer-port", "peer_port"])?,
        peer_port_random_on_start: a
            .bool(&["peer-port-random-on-start", "peer_port_random_on_start"])?,
        dht_enabled: a.bool(&["dht-enabled", "dht_enabled"])?,
        pex_enabled: a.bool(&["pex-enabled", "pex_enabled"])?,
        lpd_enabled: a.bool(&["lpd-enabled", "lpd_enabled"])?,
        utp_enabled: a.bool(&["utp-enabled", "utp_enabled"])?,
        port_forwarding_enabled: a.bool(&["port-forwarding-enabled", "port_forwarding_enabled"])?,
        encryption,
        seed_ratio_limit: a.f64(&["seedRatioLimit", "seed_ratio_limit"])?,
        seed_ratio_limited: a.bool(&["seedRatioLimited", "seed_ratio_limited"])?,
        idle_seeding_limit: a.uint(&["idle-seeding-limit", "idle_seeding_limit"])?,
        idle_seeding_limit_enabled: a
            .bool(&["idle-seeding-limit-enabled", "idle_seeding_limit_enabled"])?,
        download_queue_enabled: a.bool(&["download-queue-enabled", "download_queue_enabled"])?,
        download_queue_size: a.uint(&["download-queue-size", "download_queue_size"])?,
        seed_queue_enabled: a.bool(&["seed-queue-enabled", "seed_queue_enabled"])?,
        seed_queue_size: a.uint(&["seed-queue-size", "seed_queue_size"])?,
        queue_stalled_enabled: a.bool(&["queue-stalled-enabled", "queue_stalled_enabled"])?,
        queue_stalled_minutes: a.uint(&["queue-stalled-minutes", "queue_stalled_minutes"])?,
        start_added_torrents: a.bool(&["start-added-torrents", "start_added_torrents"])?,
        trash_original_torrent_files: a.bool(&[
            "trash-original-torrent-files",
            "trash_original_torrent_files",
        ])?,
        rename_partial_files: a.bool(&["rename-partial-files", "rename_partial_files"])?,
        cache_size_mb: a.uint(&["cache-size-mb", "cache_size_mb"])?,
        blocklist_enabled: a.bool(&["blocklist-enabled", "blocklist_enabled"])?,
        blocklist_url: owned(a, &["blocklist-url", "blocklist_url"])?,
        script_torrent_done_enabled: a
            .bool(&["script-torrent-done-enabled", "script_torrent_done_enabled"])?,
        script_torrent_done_filename: owned(
            a,
            &[
                "script-torrent-done-filename",
                "script_torrent_done_filename",
            ],
        )?,
        script_torrent_added_enabled: a.bool(&[
            "script-torrent-added-enabled",
            "script_torrent_added_enabled",
        ])?,
        script_torrent_added_filename: owned(
            a,
            &[
                "script-torrent-added-filename",
                "script_torrent_added_filename",
            ],
        )?,
        script_torrent_done_seeding_enabled: a.bool(&[
            "script-torrent-done-seeding-enabled",
            "script_torrent_done_seeding_enabled",
        ])?,
        script_torrent_done_seeding_filename: owned(
            a,
            &[
                "script-torrent-done-seeding-filename",
                "script_torrent_done_seeding_filename",
            ],
        )?,
        default_trackers: owned(a, &["default-trackers", "default_trackers"])?,
    })
}

fn totals(t: &StatsTotals, form: Form) -> Value {
    let mut m = Map::new();
    let items = [
        ("downloadedBytes", "downloaded_bytes", t.downloaded_bytes),
        ("filesAdded", "files_added", t.files_added),
        ("secondsActive", "seconds_active", t.seconds_active),
        ("sessionCount", "session_count", t.session_count),
        ("uploadedBytes", "uploaded_bytes", t.uploaded_bytes),
    ];
    for (c, s, v) in items {
        m.insert(form.key(c, s).to_owned(), json!(v));
    }
    Value::Object(m)
}

/// The `session-stats` answer.
pub(crate) fn stats(s: &SessionStats, form: Form) -> Map<String, Value> {
    let mut m = Map::new();
    let items = [
        (
            "activeTorrentCount",
            "active_torrent_count",
            s.active_torrent_count,
        ),
        ("downloadSpeed", "download_speed", s.download_speed),
        (
            "pausedTorrentCount",
            "paused_torrent_count",
            s.paused_torrent_count,
        ),
        ("torrentCount", "torrent_count", s.torrent_count),
        ("uploadSpeed", "upload_speed", s.upload_speed),
    ];
    for (c, sn, v) in items {
        m.insert(form.key(c, sn).to_owned(), json!(v));
    }
    m.insert(
        form.key("cumulative-stats", "cumulative_stats").to_owned(),
        totals(&s.cumulative, form),
    );
    m.insert(
        form.key("current-stats", "current_stats").to_owned(),
        totals(&s.current, form),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_the_form() {
        let s = SessionSettings::default();
        let c = get(&s, Form::Classic, "sid", None);
        assert_eq!(c["rpc-version"], 17);
        assert_eq!(c["rpc-version-semver"], "5.3.0");
        assert!(c["version"].as_str().unwrap().starts_with("4.0.6 (weir "));
        assert_eq!(c["session-id"], "sid");
        let j = get(&s, Form::JsonRpc, "sid", None);
        assert_eq!(j["rpc_version"], 18);
        assert_eq!(j["rpc_version_semver"], "6.0.0");
        assert!(j.get("rpc-version").is_none());
        assert_eq!(j["units"]["speed_bytes"], 1000);
    }

    #[test]
    fn fields_filter_in_any_spelling() {
        let s = SessionSettings::default();
        let f = vec![
            "version".to_owned(),
            "download_dir".to_owned(),
            "nope".to_owned(),
        ];
        let c = get(&s, Form::Classic, "sid", Some(&f));
        assert_eq!(c.len(), 2);
        assert!(c.contains_key("download-dir"));
    }

    #[test]
    fn set_reads_both_spellings_and_rejects_bad_encryption() {
        let m = json!({"speed-limit-down": 100, "speed_limit_up_enabled": true, "encryption": "required"});
        let m = m.as_object().unwrap();
        let c = change(&Args::new(m)).unwrap();
        assert_eq!(c.speed_limit_down, Some(100));
        assert_eq!(c.speed_limit_up_enabled, Some(true));
        assert_eq!(c.encryption, Some(Encryption::Required));
        let m = json!({"encryption": "always"});
        assert!(change(&Args::new(m.as_object().unwrap())).is_err());
    }
}
