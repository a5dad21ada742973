//! The daemon's crash-safe state under `--state DIR`: the list of
//! transfers with their settings, and a copy of each .torrent.
//!
//! The state is a snapshot, `transfers.state`, and an append-only log of
//! the changes since, `transfers.log` (see [`super::log`] and
//! [`super::store`]): each acknowledged change is one checksummed record
//! made durable with one `fdatasync`, and once the log has grown past the
//! snapshot's size a new snapshot is written whole (temporary file, fsync,
//! rename, directory fsync) and the log starts again empty. The snapshot
//! carries its length, a CRC-32 of its body and the generation of the log
//! that follows it in a header line, so a file damaged some other way (a
//! torn copy, a disk fault, an editor) is refused with an error naming it,
//! never trusted silently.
//!
//! ```text
//! weir-daemon-state 2 <crc32 hex> <body length> <log generation>\n
//! <body: JSON>
//! ```
//!
//! Version 1 (no generation: 0) is still read, so state directories of
//! earlier weirs load.
//!
//! The verified pieces are not here: each transfer's storage journal keeps
//! them next to its data (see `weir_runtime::storage`).

use std::io::Write;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The state file's name in the state directory.
pub const STATE_FILE: &str = "transfers.state";
/// The directory of .torrent copies in the state directory.
pub const TORRENTS_DIR: &str = "torrents";
/// The first word of the header line.
const MAGIC: &str = "weir-daemon-state";
/// The log of changes since the snapshot, in the state directory.
pub const LOG_FILE: &str = "transfers.log";
/// The format version this code writes (it reads 1 too).
const VERSION: u32 = 2;
/// Largest state file read (a million transfers' records fit).
pub const MAX_STATE: u64 = 512 << 20;

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file could not be read, written or synced.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file is damaged or not a state file: it is not used (move it
    /// away to start with no transfers).
    #[error("{path}: not a valid weir daemon state file ({why}); refusing to use it")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// What a transfer is made from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordSource {
    /// A torrent whose .torrent is `torrents/<info_hash>.torrent`.
    Torrent {
        /// 40 lower-case hex digits.
        info_hash: String,
    },
    /// An eD2k file.
    Ed2k {
        /// Its `ed2k://|file|...|/` link.
        link: String,
    },
    /// A magnet link whose metadata has not arrived yet (once it has, the
    /// record becomes a `Torrent` with the fetched .torrent kept).
    Magnet {
        /// The `magnet:?` link.
        link: String,
    },
}

/// A transfer's own limits (`torrent-set`), as Transmission keeps them:
/// a cap's value is remembered while it is off.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Download cap, kB/s.
    pub down_kbps: u64,
    /// Whether the download cap applies.
    pub down_on: bool,
    /// Upload cap, kB/s.
    pub up_kbps: u64,
    /// Whether the upload cap applies.
    pub up_on: bool,
    /// Seeding ratio goal.
    pub ratio_limit: f64,
    /// Which ratio goal applies: 0 the session's, 1 this one, 2 none.
    pub ratio_mode: u8,
    /// Idle-seeding limit, minutes.
    pub idle_limit: u32,
    /// Which idle limit applies: 0 the session's, 1 this one, 2 none.
    pub idle_mode: u8,
}

impl Default for Limits {
    /// Transmission's defaults for a new torrent.
    fn default() -> Self {
        Limits {
            down_kbps: 100,
            down_on: false,
            up_kbps: 100,
            up_on: false,
            ratio_limit: 2.0,
            ratio_mode: 0,
            idle_limit: 30,
            idle_mode: 0,
        }
    }
}

/// One transfer and its settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The RPC id (stable across restarts, never reused).
    pub id: u64,
    /// What it is.
    pub source: RecordSource,
    /// Its download directory.
    pub download_dir: Folder,
    /// Stopped by the user.
    pub paused: bool,
    /// Labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Unix time added.
    pub added: u64,
    /// Unix time completed, once it has.
    #[serde(default)]
    pub done: Option<u64>,
    /// Payload bytes downloaded over all runs, as of this save.
    #[serde(default)]
    pub downloaded: u64,
    /// Payload bytes uploaded over all runs, as of this save.
    #[serde(default)]
    pub uploaded: u64,
    /// Its own caps and seeding goals.
    #[serde(default)]
    pub limits: Limits,
    /// Stopped because it reached its seeding goal (`isFinished`).
    #[serde(default)]
    pub finished: bool,
    /// Peers to dial besides what trackers say (a magnet's `x.pe`).
    #[serde(default)]
    pub peers: Vec<std::net::SocketAddr>,
    /// Files not wanted (`files-unwanted`), by index, sorted, no
    /// duplicates: their pieces are not fetched and files sharing none
    /// with wanted ones are not created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unwanted: Vec<u32>,
    /// Files not at normal priority (`priority-high` / `priority-low`):
    /// `(index, 1)` high, `(index, -1)` low, sorted by index, one each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priorities: Vec<(u32, i8)>,
}

#[cfg(test)]
impl Record {
    /// A running transfer `id` of `source` in `dir`, added at 1.7e9 + `id`,
    /// every other setting at its default (for tests).
    pub(crate) fn test(id: u64, source: RecordSource, dir: &str) -> Record {
        Record {
            id,
            source,
            download_dir: dir.into(),
            paused: false,
            labels: Vec::new(),
            added: 1_700_000_000 + id,
            done: None,
            downloaded: 0,
            uploaded: 0,
            limits: Limits::default(),
            finished: false,
            peers: Vec::new(),
            unwanted: Vec::new(),
            priorities: Vec::new(),
        }
    }
}

/// A [`Record`] held by both the daemon's entry for a transfer and the
/// store's state: the same allocation while the two agree (an idle
/// transfer's record is kept once, not twice: ~0.4 KB a transfer at
/// 10,000). Writing through it copies the record first if the other side
/// still holds it (copy on write), so neither ever sees the other's edits
/// until they are handed over as a [`super::log::Change`]. Serialized as
/// the record itself.
#[derive(Clone, Debug)]
pub struct SharedRecord(Arc<Record>);

impl PartialEq for SharedRecord {
    /// Equal records (at once when they are one allocation).
    fn eq(&self, other: &SharedRecord) -> bool {
        self.ptr_eq(other) || *self.0 == *other.0
    }
}

impl SharedRecord {
    /// Whether `self` and `other` are the same allocation (not merely
    /// equal).
    pub fn ptr_eq(&self, other: &SharedRecord) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<Record> for SharedRecord {
    fn from(r: Record) -> SharedRecord {
        SharedRecord(Arc::new(r))
    }
}

impl Deref for SharedRecord {
    type Target = Record;

    fn deref(&self) -> &Record {
        &self.0
    }
}

impl DerefMut for SharedRecord {
    /// The record to change: this side's own copy (made now if the other
    /// side holds it too).
    fn deref_mut(&mut self) -> &mut Record {
        Arc::make_mut(&mut self.0)
    }
}

impl Serialize for SharedRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SharedRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SharedRecord, D::Error> {
        Record::deserialize(d).map(SharedRecord::from)
    }
}

/// Session settings that persist (what `session-set` changed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedCaps {
    /// Download cap, kB/s, and whether it applies.
    pub down: Option<(u64, bool)>,
    /// Upload cap, kB/s, and whether it applies.
    pub up: Option<(u64, bool)>,
}

/// The whole state file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The next id to give.
    pub next_id: u64,
    /// Every transfer, in id order.
    pub transfers: Vec<SharedRecord>,
    /// Session caps set over RPC.
    #[serde(default)]
    pub caps: SavedCaps,
    /// Every other session setting `session-set` changed, merged.
    #[serde(default)]
    pub settings: crate::backend::SessionChange,
    /// Queue order: transfer ids, first first (ids missing from it follow
    /// in id order).
    #[serde(default)]
    pub queue: Vec<u64>,
}

impl State {
    /// An empty state (first start).
    pub fn empty() -> State {
        State {
            next_id: 1,
            ..State::default()
        }
    }

    /// The record of transfer `id` (`transfers` is kept in id order).
    pub fn get(&self, id: u64) -> Option<&SharedRecord> {
        self.transfers
            .binary_search_by_key(&id, |r| r.id)
            .ok()
            .map(|i| &self.transfers[i])
    }

    /// Encodes the snapshot file: header line (with `generation`, the log
    /// that follows it) and body.
    pub fn encode(&self, generation: u64) -> Vec<u8> {
        // Serializing plain structs of strings and numbers cannot fail.
        let body = serde_json::to_vec(self).unwrap_or_default();
        let mut out = format!(
            "{MAGIC} {VERSION} {:08x} {} {generation}\n",
            checksum(&body, Some(generation)),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a snapshot file read from `path` (named in errors): the
    /// state and the generation of the log that follows it.
    pub fn decode(data: &[u8], path: &Path) -> Result<(State, u64), StateError> {
        let bad = |why: String| StateError::Corrupt {
            path: path.to_path_buf(),
            why,
        };
        let nl = data
            .iter()
            .take(128)
            .position(|b| *b == b'\n')
            .ok_or_else(|| bad("no header line".into()))?;
        let header =
            std::str::from_utf8(&data[..nl]).map_err(|_| bad("header is not text".into()))?;
        let mut w = header.split(' ');
        if w.next() != Some(MAGIC) {
            return Err(bad("no weir-daemon-state header".into()));
        }
        let version: u32 = w
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad("no version".into()))?;
        if version != 1 && version != VERSION {
            return Err(bad(format!(
                "version {version}; this weir reads versions 1 and {VERSION}"
            )));
        }
        let crc = w
            .next()
            .filter(|c| c.len() == 8)
            .and_then(|c| u32::from_str_radix(c, 16).ok())
            .ok_or_else(|| bad("no checksum".into()))?;
        let len: usize = w
            .next()
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| bad("no length".into()))?;
        let generation: u64 = if version == 1 {
            0
        } else {
            w.next()
                .and_then(|g| g.parse().ok())
                .ok_or_else(|| bad("no log generation".into()))?
        };
        if w.next().is_some() {
            return Err(bad("extra words in the header".into()));
        }
        let body = &data[nl + 1..];
        if body.len() != len {
            return Err(bad(format!(
                "{} bytes of body, the header says {len} (torn or truncated)",
                body.len()
            )));
        }
        if checksum(body, (version > 1).then_some(generation)) != crc {
            return Err(bad("checksum mismatch (damaged)".into()));
        }
        let mut state: State =
            serde_json::from_slice(body).map_err(|e| bad(format!("bad body: {e}")))?;
        state.transfers.sort_by_key(|r| r.id);
        state.check().map_err(bad)?;
        state.complete_queue();
        Ok((state, generation))
    }

    /// Checks what a state must hold: ids unique and below `next_id`,
    /// info-hashes of 40 hex digits (`transfers` in id order).
    pub fn check(&self) -> Result<(), String> {
        for (i, r) in self.transfers.iter().enumerate() {
            if i > 0 && self.transfers[i - 1].id == r.id {
                return Err(format!("transfer id {} appears twice", r.id));
            }
            check_record(r, self.next_id)?;
        }
        Ok(())
    }

    /// Makes the queue name every transfer once: ids of no transfer
    /// dropped, transfers missing from it appended in id order (how a
    /// state written before the queue was kept reads).
    pub fn complete_queue(&mut self) {
        let mut seen = std::collections::BTreeSet::new();
        let queue = std::mem::take(&mut self.queue);
        self.queue = queue
            .into_iter()
            .filter(|id| self.get(*id).is_some() && seen.insert(*id))
            .collect();
        for r in &self.transfers {
            if !seen.contains(&r.id) {
                self.queue.push(r.id);
            }
        }
    }
}

/// The header's CRC-32: of the body, then (version 2) of the generation's
/// 8 little-endian bytes, so that a damaged generation is caught too.
fn checksum(body: &[u8], generation: Option<u64>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(body);
    if let Some(g) = generation {
        h.update(&g.to_le_bytes());
    }
    h.finalize()
}

/// Checks one record: its id inside `1..next_id`, its info-hash (if any)
/// 40 hex digits.
pub fn check_record(r: &Record, next_id: u64) -> Result<(), String> {
    if r.id == 0 || r.id >= next_id {
        return Err(format!("transfer id {} is outside 1..{next_id}", r.id));
    }
    if let RecordSource::Torrent { info_hash } = &r.source {
        if info_hash.len() != 40 || !info_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("transfer {}: bad info-hash", r.id));
        }
    }
    Ok(())
}

/// The state directory: where the snapshot, the log and the .torrent
/// copies are (reading and writing them is [`super::store::Store`]'s).
#[derive(Clone, Debug)]
pub struct StateDir {
    dir: PathBuf,
    names: Arc<Names>,
}

/// Path names the daemon shows for many transfers, one copy: the
/// `torrents/` folder (a transfer's .torrent is named from its hash when
/// shown). Download folders are [`Folder`]s.
#[derive(Debug)]
struct Names {
    torrents: Arc<str>,
}

impl Names {
    fn new(dir: &Path) -> Arc<Names> {
        Arc::new(Names {
            torrents: Arc::from(dir.join(TORRENTS_DIR).to_string_lossy().as_ref()),
        })
    }
}

/// A transfer's download folder, as its record keeps it and its view shows
/// it: one copy of the name for every transfer in the same folder (most
/// share one). Each record held its own path (~60 bytes of heap a
/// transfer) and its view a second copy. Folders made from the same name
/// while it is among the [`SHARED_DIRS`] most recently used share it,
/// whether made by an add, a move or read back from the state.
#[derive(Clone, PartialEq, Eq)]
pub struct Folder(Arc<str>);

/// Download folder names remembered for sharing (the most recently used).
const SHARED_DIRS: usize = 16;

impl Folder {
    /// The folder at `path` (a name that is not UTF-8 is kept lossily, as
    /// the state's JSON would).
    pub fn new(path: &Path) -> Folder {
        static DIRS: std::sync::Mutex<Vec<Arc<str>>> = std::sync::Mutex::new(Vec::new());
        let name = path.to_string_lossy();
        let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = dirs.iter().position(|d| **d == *name) {
            let d = dirs.remove(i);
            dirs.insert(0, d.clone());
            return Folder(d);
        }
        let d: Arc<str> = Arc::from(name.as_ref());
        dirs.insert(0, d.clone());
        dirs.truncate(SHARED_DIRS);
        Folder(d)
    }

    /// The name as shown (the same copy).
    pub(super) fn shown(&self) -> Arc<str> {
        self.0.clone()
    }
}

impl Deref for Folder {
    type Target = Path;

    fn deref(&self) -> &Path {
        Path::new(&*self.0)
    }
}

impl AsRef<Path> for Folder {
    fn as_ref(&self) -> &Path {
        self
    }
}

impl std::fmt::Debug for Folder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Folder {
    fn from(s: &str) -> Folder {
        Folder::new(Path::new(s))
    }
}

impl From<&Path> for Folder {
    fn from(p: &Path) -> Folder {
        Folder::new(p)
    }
}

impl PartialEq<Path> for Folder {
    fn eq(&self, other: &Path) -> bool {
        **self == *other
    }
}

impl PartialEq<PathBuf> for Folder {
    fn eq(&self, other: &PathBuf) -> bool {
        **self == **other
    }
}

impl Serialize for Folder {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Folder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Folder, D::Error> {
        let p = PathBuf::deserialize(d)?;
        Ok(Folder::new(&p))
    }
}

impl StateDir {
    /// Opens (creating) `dir` and its `torrents/` folder.
    pub fn open(dir: &Path) -> Result<StateDir, StateError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StateError::Io { path, source }
        };
        let torrents = dir.join(TORRENTS_DIR);
        std::fs::create_dir_all(&torrents).map_err(io(&torrents))?;
        Ok(Self::at(dir))
    }

    /// The state directory at `dir`, as it is (nothing created).
    pub fn at(dir: &Path) -> StateDir {
        StateDir {
            dir: dir.to_path_buf(),
            names: Names::new(dir),
        }
    }

    /// The `torrents/` folder's name as shown (one copy for every
    /// transfer: see [`StateDir::torrent_path`]).
    pub(super) fn torrents_shown(&self) -> Arc<str> {
        self.names.torrents.clone()
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The state file's path.
    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// Where the .torrent of `info_hash` (hex) is kept.
    pub fn torrent_path(&self, info_hash: &str) -> PathBuf {
        self.dir
            .join(TORRENTS_DIR)
            .join(format!("{info_hash}.torrent"))
    }

    /// The log's path.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// Writes a .torrent copy without waiting for the disk: the log record
    /// that added it holds its bytes until the next snapshot, which makes
    /// the copies durable first.
    pub fn write_torrent(&self, info_hash: &str, data: &[u8]) -> Result<PathBuf, StateError> {
        let path = self.torrent_path(info_hash);
        std::fs::write(&path, data).map_err(|source| StateError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// Reads a kept .torrent.
    pub fn read_torrent(&self, info_hash: &str) -> Result<Vec<u8>, StateError> {
        let path = self.torrent_path(info_hash);
        std::fs::read(&path).map_err(|source| StateError::Io { path, source })
    }

    /// Deletes a kept .torrent (after the state no longer names it).
    pub fn remove_torrent(&self, info_hash: &str) {
        let path = self.torrent_path(info_hash);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("{}: {e}", path.display());
            }
        }
    }
}

/// Writes `data` to `path` so that after a crash `path` holds either its
/// old content or all of `data`.
pub fn write_durably(path: &Path, data: &[u8]) -> Result<(), StateError> {
    let tmp = temp_name(path);
    write_synced(&tmp, data)?;
    std::fs::rename(&tmp, path).map_err(|source| StateError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    sync_dir(parent(path))
}

/// `path` with `.tmp` appended: where [`write_durably`] writes first.
pub fn temp_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    parent(path).join(name)
}

/// The directory `path` is in.
pub fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Creates (truncating) `path` with `data` and fsyncs it.
pub fn write_synced(path: &Path, data: &[u8]) -> Result<(), StateError> {
    let io = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::create(path).map_err(io)?;
    f.write_all(data).map_err(io)?;
    f.sync_all().map_err(io)
}

/// Fsyncs a directory, so that names created or renamed in it last.
pub fn sync_dir(dir: &Path) -> Result<(), StateError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StateError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        State {
            next_id: 4,
            transfers: [
                Record {
                    id: 1,
                    source: RecordSource::Torrent {
                        info_hash: "ab".repeat(20),
                    },
                    download_dir: "/data".into(),
                    paused: false,
                    labels: vec!["tv".into()],
                    added: 1_700_000_000,
                    done: None,
                    downloaded: 5,
                    uploaded: 0,
                    limits: Limits {
                        down_kbps: 50,
                        down_on: true,
                        ratio_limit: 1.5,
                        ratio_mode: 1,
                        ..Limits::default()
                    },
                    finished: false,
                    peers: vec!["127.0.0.1:6881".parse().unwrap()],
                    unwanted: vec![0, 2],
                    priorities: Vec::new(),
                },
                Record {
                    id: 3,
                    source: RecordSource::Ed2k {
                        link: "ed2k://|file|a.bin|10|D3B6B09D73D3FE0DD41DDE5ED244215A|/".into(),
                    },
                    download_dir: "/data".into(),
                    paused: true,
                    labels: vec![],
                    added: 1_700_000_001,
                    done: Some(1_700_000_100),
                    downloaded: 10,
                    uploaded: 1 << 40,
                    limits: Limits::default(),
                    finished: true,
                    peers: Vec::new(),
                    unwanted: Vec::new(),
                    priorities: Vec::new(),
                },
            ]
            .map(SharedRecord::from)
            .into(),
            caps: SavedCaps {
                down: Some((100, true)),
                up: None,
            },
            settings: crate::backend::SessionChange {
                download_dir: Some("/elsewhere".into()),
                seed_ratio_limit: Some(0.5),
                start_added_torrents: Some(false),
                ..Default::default()
            },
            queue: vec![3, 1],
        }
    }

    #[test]
    fn round_trips() {
        let s = sample();
        let p = Path::new("/x/transfers.state");
        assert_eq!(State::decode(&s.encode(7), p).unwrap(), (s, 7));
    }

    #[test]
    fn a_state_written_before_limits_and_settings_reads_with_defaults() {
        let body = br#"{"next_id":2,"transfers":[{"id":1,"source":{"ed2k":{"link":"ed2k://|file|a.bin|10|D3B6B09D73D3FE0DD41DDE5ED244215A|/"}},"download_dir":"/d","paused":true,"added":5}],"caps":{"down":null,"up":[20,true]}}"#;
        let mut data = format!(
            "weir-daemon-state 1 {:08x} {}\n",
            crc32fast::hash(body),
            body.len()
        )
        .into_bytes();
        data.extend_from_slice(body);
        let (s, generation) = State::decode(&data, Path::new("/x")).unwrap();
        assert_eq!(generation, 0);
        assert_eq!(s.transfers[0].limits, Limits::default());
        assert!(!s.transfers[0].finished && s.transfers[0].peers.is_empty());
        assert_eq!(s.settings, crate::backend::SessionChange::default());
        // No queue kept: every transfer in id order.
        assert_eq!(s.queue, vec![1]);
        assert_eq!(s.caps.up, Some((20, true)));
    }

    #[test]
    fn every_truncation_and_flip_is_refused() {
        let data = sample().encode(3);
        let p = Path::new("/x/transfers.state");
        for cut in 0..data.len() {
            match State::decode(&data[..cut], p) {
                Err(StateError::Corrupt { path, .. }) => assert_eq!(path, p),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] ^= 0x01;
            assert!(
                matches!(State::decode(&d, p), Err(StateError::Corrupt { .. })),
                "flip at {i} accepted"
            );
        }
    }

    #[test]
    fn garbage_and_bad_records_are_refused() {
        let p = Path::new("/s/transfers.state");
        for g in [
            &b""[..],
            b"hello\n{}",
            b"weir-daemon-state 3 00000000 2 0\n{}",
            b"weir-daemon-state 2 00000000 2\n{}",
            b"\x00\x01\x02",
        ] {
            let e = State::decode(g, p).unwrap_err();
            assert!(e.to_string().contains("/s/transfers.state"), "{e}");
            assert!(matches!(e, StateError::Corrupt { .. }));
        }
        let mut s = sample();
        s.transfers[1].id = 1;
        assert!(matches!(
            State::decode(&s.encode(0), p),
            Err(StateError::Corrupt { why, .. }) if why.contains("twice")
        ));
        let mut s = sample();
        s.next_id = 2;
        assert!(matches!(
            State::decode(&s.encode(0), p),
            Err(StateError::Corrupt { .. })
        ));
    }
}
