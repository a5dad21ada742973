//! The methods: each reads its arguments, calls the backend and builds its
//! answer.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::backend::{
    Action, AddOutcome, AddRequest, AddSource, Backend, Selection, TransferChange, TransferQuery,
};
use crate::fields::FieldList;
use crate::rpc::{ErrorKind, Form, Payload, RpcError, TorrentsRequest};
use crate::session;

/// Longest label accepted, in bytes.
const MAX_LABEL: usize = 256;

/// A method the server knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    SessionGet,
    SessionSet,
    SessionStats,
    SessionClose,
    TorrentGet,
    TorrentAdd,
    TorrentSet,
    TorrentRemove,
    TorrentSetLocation,
    TorrentRenamePath,
    Act(Action),
    FreeSpace,
    PortTest,
    BlocklistUpdate,
    GroupGet,
    GroupSet,
}

impl Method {
    /// A method by name: kebab-case, or also snake_case when `snake` (as
    /// Transmission 4.1 accepts in both forms; 4.0 knew only kebab-case).
    pub(crate) fn parse(name: &str, snake: bool) -> Option<Method> {
        if name.len() > 32 || (!snake && name.contains('_')) {
            return None;
        }
        let n = name.replace('_', "-");
        Some(match n.as_str() {
            "session-get" => Method::SessionGet,
            "session-set" => Method::SessionSet,
            "session-stats" => Method::SessionStats,
            "session-close" => Method::SessionClose,
            "torrent-get" => Method::TorrentGet,
            "torrent-add" => Method::TorrentAdd,
            "torrent-set" => Method::TorrentSet,
            "torrent-remove" => Method::TorrentRemove,
            "torrent-set-location" => Method::TorrentSetLocation,
            "torrent-rename-path" => Method::TorrentRenamePath,
            "torrent-start" => Method::Act(Action::Start),
            "torrent-start-now" => Method::Act(Action::StartNow),
            "torrent-stop" => Method::Act(Action::Stop),
            "torrent-verify" => Method::Act(Action::Verify),
            "torrent-reannounce" => Method::Act(Action::Reannounce),
            "queue-move-top" => Method::Act(Action::QueueTop),
            "queue-move-up" => Method::Act(Action::QueueUp),
            "queue-move-down" => Method::Act(Action::QueueDown),
            "queue-move-bottom" => Method::Act(Action::QueueBottom),
            "free-space" => Method::FreeSpace,
            "port-test" => Method::PortTest,
            "blocklist-update" => Method::BlocklistUpdate,
            "group-get" => Method::GroupGet,
            "group-set" => Method::GroupSet,
            _ => return None,
        })
    }
}

fn empty() -> Result<Payload, RpcError> {
    Ok(Payload::Map(Map::new()))
}

/// Runs `method` with `args`.
pub(crate) async fn run<B: Backend>(
    backend: &B,
    method: Method,
    args: &Map<String, Value>,
    form: Form,
    session_id: &str,
) -> Result<Payload, RpcError> {
    let a = Args::new(args);
    match method {
        Method::SessionGet => {
            let fields = a.strings(&["fields"])?;
            let s = backend.session().await?;
            Ok(Payload::Map(session::get(
                &s,
                form,
                session_id,
                fields.as_deref(),
            )))
        }
        Method::SessionSet => {
            let change = session::change(&a)?;
            backend.set_session(change).await?;
            empty()
        }
        Method::SessionStats => {
            let s = backend.stats().await?;
            Ok(Payload::Map(session::stats(&s, form)))
        }
        Method::SessionClose => {
            backend.close().await?;
            empty()
        }
        Method::TorrentGet => torrent_get(backend, &a, form).await,
        Method::TorrentAdd => torrent_add(backend, &a, form).await,
        Method::TorrentSet => {
            let select = a.selection()?;
            let change = transfer_change(&a)?;
            backend.change(select, change).await?;
            empty()
        }
        Method::TorrentRemove => {
            let select = a.selection()?;
            let delete = a
                .bool(&["delete-local-data", "delete_local_data"])?
                .unwrap_or(false);
            backend.remove(select, delete).await?;
            empty()
        }
        Method::TorrentSetLocation => {
            let select = a.selection()?;
            let Some(location) = a.str(&["location"])? else {
                return Err(RpcError::invalid_params("no location"));
            };
            let location = absolute(location)?;
            let move_data = a.bool(&["move"])?.unwrap_or(false);
            backend.set_location(select, location, move_data).await?;
            empty()
        }
        Method::TorrentRenamePath => {
            let target = match a.selection()? {
                Selection::Refs(r) if r.len() == 1 => r[0],
                _ => {
                    return Err(RpcError::invalid_params(
                        "torrent-rename-path requires 1 torrent",
                    ));
                }
            };
            let (Some(path), Some(name)) = (a.str(&["path"])?, a.str(&["name"])?) else {
                return Err(RpcError::invalid_params(
                    "torrent-rename-path needs 'path' and 'name'",
                ));
            };
            let r = backend
                .rename_path(target, path.to_owned(), name.to_owned())
                .await?;
            let mut m = Map::new();
            m.insert("id".into(), json!(r.id));
            m.insert("name".into(), json!(r.name));
            m.insert("path".into(), json!(r.path));
            Ok(Payload::Map(m))
        }
        Method::Act(action) => {
            let select = a.selection()?;
            backend.act(select, action).await?;
            empty()
        }
        Method::FreeSpace => {
            let Some(path) = a.str(&["path"])? else {
                return Err(RpcError::invalid_params(
                    "directory path argument is missing",
                ));
            };
            let dir = absolute(path)?;
            let f = backend.free_space(dir).await?;
            let mut m = Map::new();
            m.insert("path".into(), json!(path));
            m.insert(form.key("size-bytes", "size_bytes").into(), json!(f.free));
            m.insert("total_size".into(), json!(f.total));
            Ok(Payload::Map(m))
        }
        Method::PortTest => {
            let protocol = a.str(&["ipProtocol", "ip_protocol"])?;
            let open = backend.port_is_open().await?;
            let mut m = Map::new();
            m.insert(form.key("port-is-open", "port_is_open").into(), json!(open));
            if let Some(p) = protocol {
                m.insert(form.key("ipProtocol", "ip_protocol").into(), json!(p));
            }
            Ok(Payload::Map(m))
        }
        Method::BlocklistUpdate => Err(RpcError::new(
            ErrorKind::HttpError,
            "blocklist-update: weir has no blocklist and fetches none",
        )),
        Method::GroupGet => {
            let mut m = Map::new();
            m.insert("group".into(), json!([]));
            Ok(Payload::Map(m))
        }
        Method::GroupSet => Err(RpcError::new(
            ErrorKind::InvalidParams,
            "group-set: weir has no bandwidth groups",
        )),
    }
}

fn absolute(p: &str) -> Result<PathBuf, RpcError> {
    let path = PathBuf::from(p);
    if !path.is_absolute() {
        return Err(RpcError::new(
            ErrorKind::PathNotAbsolute,
            format!("path is not absolute: {p}"),
        ));
    }
    Ok(path)
}

async fn torrent_get<B: Backend>(
    backend: &B,
    a: &Args<'_>,
    form: Form,
) -> Result<Payload, RpcError> {
    let Some((_, Value::Array(names))) = a.get(&["fields"]) else {
        return Err(RpcError::invalid_params("no fields specified"));
    };
    if names.len() > 1000 {
        return Err(RpcError::invalid_params("too many fields"));
    }
    let fields = FieldList::parse(names.iter().filter_map(Value::as_str));
    let table = match a.str(&["format"])? {
        None | Some("objects") => false,
        Some("table") => true,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "invalid argument 'format': {other:?} is not objects or table"
            )));
        }
    };
    let select = a.selection()?;
    let with_removed = select == Selection::RecentlyActive;
    let list = backend
        .transfers(TransferQuery {
            select,
            detail: fields.detail(),
            row_key: Some(crate::torrents::row_key(&fields, form, table)),
        })
        .await?;
    Ok(Payload::Torrents(TorrentsRequest {
        list,
        fields,
        table,
        with_removed,
    }))
}

fn labels(a: &Args<'_>) -> Result<Option<Vec<String>>, RpcError> {
    let Some(labels) = a.strings(&["labels"])? else {
        return Ok(None);
    };
    for l in &labels {
        if l.contains(',') || l.len() > MAX_LABEL || l.trim().is_empty() {
            return Err(RpcError::invalid_params(format!(
                "invalid label {l:?}: labels are 1-{MAX_LABEL} bytes without commas"
            )));
        }
    }
    Ok(Some(labels))
}

/// What `filename` names.
fn source_of(filename: &str) -> AddSource {
    let lower = filename
        .get(..8)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    if lower.starts_with("magnet:") {
        AddSource::Magnet(filename.to_owned())
    } else if lower.starts_with("ed2k://") {
        AddSource::Ed2k(filename.to_owned())
    } else if lower.starts_with("http://") || lower.starts_with("https://") {
        AddSource::Url(filename.to_owned())
    } else if let Some(m) = base64_torrent(filename) {
        // Transmission falls back to reading `filename` as base64
        // metainfo, and the transmission-rpc library relies on it.
        AddSource::Metainfo(m)
    } else {
        AddSource::Path(Path::new(filename).to_path_buf())
    }
}

/// `s` as base64 of a bencoded dictionary (not a path: those start with `/`
/// or hold characters base64 has not).
fn base64_torrent(s: &str) -> Option<bytes::Bytes> {
    if s.starts_with('/') || s.len() < 8 {
        return None;
    }
    let b = decode_metainfo(s).ok()?;
    (b.first() == Some(&b'd') && b.last() == Some(&b'e')).then_some(b)
}

fn decode_metainfo(b64: &str) -> Result<bytes::Bytes, RpcError> {
    let engine = &base64::engine::general_purpose::STANDARD;
    let decoded = engine.decode(b64).or_else(|_| {
        let clean: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        engine.decode(clean.as_bytes()).or_else(|_| {
            base64::engine::general_purpose::STANDARD_NO_PAD.decode(clean.trim_end_matches('='))
        })
    });
    decoded.map(bytes::Bytes::from).map_err(|e| {
        RpcError::new(
            ErrorKind::CorruptTorrent,
            format!("invalid or corrupt torrent file (metainfo is not base64: {e})"),
        )
    })
}

async fn torrent_add<B: Backend>(
    backend: &B,
    a: &Args<'_>,
    form: Form,
) -> Result<Payload, RpcError> {
    let source = match (a.str(&["metainfo"])?, a.str(&["filename"])?) {
        (Some(m), _) if !m.is_empty() => AddSource::Metainfo(decode_metainfo(m)?),
        (_, Some(f)) if !f.is_empty() => source_of(f),
        _ => {
            return Err(RpcError::invalid_params(
                "no filename or metainfo specified",
            ));
        }
    };
    let mut req = AddRequest::new(source);
    req.paused = a.bool(&["paused"])?;
    req.download_dir = a.str(&["download-dir", "download_dir"])?.map(PathBuf::from);
    req.labels = labels(a)?.unwrap_or_default();
    req.cookies = a.str(&["cookies"])?.map(str::to_owned);
    req.peer_limit = a.uint(&["peer-limit", "peer_limit"])?;
    req.bandwidth_priority = a.priority(&["bandwidthPriority", "bandwidth_priority"])?;
    req.files_wanted = a
        .indices(&["files-wanted", "files_wanted"])?
        .unwrap_or_default();
    req.files_unwanted = a
        .indices(&["files-unwanted", "files_unwanted"])?
        .unwrap_or_default();
    req.priority_high = a
        .indices(&["priority-high", "priority_high"])?
        .unwrap_or_default();
    req.priority_low = a
        .indices(&["priority-low", "priority_low"])?
        .unwrap_or_default();
    req.priority_normal = a
        .indices(&["priority-normal", "priority_normal"])?
        .unwrap_or_default();
    let (key, t) = match backend.add(req).await? {
        AddOutcome::Added(t) => (form.key("torrent-added", "torrent_added"), t),
        AddOutcome::Duplicate(t) => (form.key("torrent-duplicate", "torrent_duplicate"), t),
    };
    let mut obj = Map::new();
    obj.insert(
        form.key("hashString", "hash_string").into(),
        json!(t.hash.to_hex()),
    );
    obj.insert("id".into(), json!(t.id));
    obj.insert("name".into(), json!(&*t.name));
    let mut m = Map::new();
    m.insert(key.into(), Value::Object(obj));
    Ok(Payload::Map(m))
}

fn transfer_change(a: &Args<'_>) -> Result<TransferChange, RpcError> {
    let tracker_remove = a
        .indices(&["trackerRemove", "tracker_remove"])?
        .unwrap_or_default();
    Ok(TransferChange {
        download_limit: a.uint(&["downloadLimit", "download_limit"])?,
        download_limited: a.bool(&["downloadLimited", "download_limited"])?,
        upload_limit: a.uint(&["uploadLimit", "upload_limit"])?,
        upload_limited: a.bool(&["uploadLimited", "upload_limited"])?,
        bandwidth_priority: a.priority(&["bandwidthPriority", "bandwidth_priority"])?,
        honors_session_limits: a.bool(&["honorsSessionLimits", "honors_session_limits"])?,
        labels: labels(a)?,
        files_wanted: a.file_set(&["files-wanted", "files_wanted"])?,
        files_unwanted: a.file_set(&["files-unwanted", "files_unwanted"])?,
        priority_high: a.file_set(&["priority-high", "priority_high"])?,
        priority_low: a.file_set(&["priority-low", "priority_low"])?,
        priority_normal: a.file_set(&["priority-normal", "priority_normal"])?,
        location: match a.str(&["location"])? {
            Some(l) => Some(absolute(l)?),
            None => None,
        },
        peer_limit: a.uint(&["peer-limit", "peer_limit"])?,
        queue_position: a.uint(&["queuePosition", "queue_position"])?,
        seed_idle_limit: a.uint(&["seedIdleLimit", "seed_idle_limit"])?,
        seed_idle_mode: a.mode(&["seedIdleMode", "seed_idle_mode"])?,
        seed_ratio_limit: a.f64(&["seedRatioLimit", "seed_ratio_limit"])?,
        seed_ratio_mode: a.mode(&["seedRatioMode", "seed_ratio_mode"])?,
        sequential: a.bool(&["sequentialDownload", "sequential_download"])?,
        tracker_list: a.str(&["trackerList", "tracker_list"])?.map(str::to_owned),
        tracker_add: a
            .strings(&["trackerAdd", "tracker_add"])?
            .unwrap_or_default(),
        tracker_remove,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_in_both_spellings() {
        assert_eq!(Method::parse("torrent-get", true), Some(Method::TorrentGet));
        assert_eq!(Method::parse("torrent_get", true), Some(Method::TorrentGet));
        assert_eq!(
            Method::parse("queue_move_top", true),
            Some(Method::Act(Action::QueueTop))
        );
        assert_eq!(Method::parse("torrent-gets", true), None);
        assert_eq!(Method::parse("torrent_get", false), None);
        assert_eq!(
            Method::parse("torrent-get", false),
            Some(Method::TorrentGet)
        );
        assert_eq!(Method::parse(&"x".repeat(10_000), true), None);
    }

    #[test]
    fn filename_kinds() {
        assert!(matches!(
            source_of("magnet:?xt=urn:btih:00"),
            AddSource::Magnet(_)
        ));
        assert!(matches!(
            source_of("ED2K://|file|a|1|00|/"),
            AddSource::Ed2k(_)
        ));
        assert!(matches!(
            source_of("https://x/y.torrent"),
            AddSource::Url(_)
        ));
        assert!(matches!(source_of("/tmp/x.torrent"), AddSource::Path(_)));
        assert!(matches!(source_of("x"), AddSource::Path(_)));
        assert!(matches!(source_of("ZDE6YWkxZWU="), AddSource::Metainfo(_)));
        assert!(matches!(
            source_of("downloads/x.torrent"),
            AddSource::Path(_)
        ));
    }

    #[test]
    fn metainfo_base64_with_newlines() {
        assert_eq!(&decode_metainfo("ZDRl\nZQ==").unwrap()[..], b"d4ee");
        let e = decode_metainfo("!!!").unwrap_err();
        assert_eq!(e.kind, ErrorKind::CorruptTorrent);
    }
}
