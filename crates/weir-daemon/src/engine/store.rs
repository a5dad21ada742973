//! [`Store`]: the daemon's state as a snapshot and a log of changes
//! ([`super::log`]), so that a change costs one small append and one
//! `fdatasync`, whatever the number of transfers.
//!
//! - [`Store::append`] writes a batch of changes as records at the log's
//!   end and `fdatasync`s it before the change is acknowledged (it then
//!   survives kill -9 and a power cut); the .torrent copies the records
//!   carry are written to `torrents/` after, without waiting for the disk.
//! - Once the log passes `max(1 MiB, the snapshot's size)`,
//!   [`Store::compact`] makes those copies durable, writes a new snapshot
//!   (temporary file, fsync, rename, directory fsync) of the next
//!   generation, and starts an empty log of that generation.
//! - [`Store::open`] reads the snapshot, then the log's records in order;
//!   a torn write at the log's end is cut away, other damage refused.
//!
//! The store keeps the state as it is on disk (the snapshot it would
//! write), which changes are checked against before they are written.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::path::Path;

use super::log::{self, Change, Entry};
use super::state::{
    MAX_STATE, RecordSource, State, StateDir, StateError, sync_dir, temp_name, write_durably,
    write_synced,
};

/// The log is compacted once it is larger than this and the snapshot.
pub const COMPACT_MIN: u64 = 1 << 20;
/// Largest log read: what compaction allows and one record more.
const MAX_LOG: u64 = MAX_STATE + log::MAX_RECORD as u64;

/// The state directory's snapshot and log, open for changes.
#[derive(Debug)]
pub struct Store {
    dir: StateDir,
    /// The state as the snapshot and log say.
    state: State,
    /// The generation of the snapshot and of the log.
    generation: u64,
    log: File,
    log_len: u64,
    snapshot_len: u64,
    /// .torrent copies written since the snapshot without an fsync, by
    /// info-hash (the path is made at the sync: one per added torrent
    /// until the next compaction was ~100 bytes each).
    unsynced: Vec<String>,
    /// Copies that could not be written: their bytes, written (durably)
    /// before the log that holds them is dropped.
    unwritten: Vec<(String, Vec<u8>)>,
    /// A write to the log failed (it may end in part of a record) or a
    /// compaction stopped after the snapshot: a new snapshot and log are
    /// written before the next change.
    broken: bool,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads `path` whole, at most `max` bytes (`None`: it does not exist).
fn read_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>, StateError> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let mut data = Vec::new();
    f.take(max + 1).read_to_end(&mut data).map_err(io(path))?;
    if data.len() as u64 > max {
        return Err(StateError::Corrupt {
            path: path.to_path_buf(),
            why: format!("larger than {max} bytes"),
        });
    }
    Ok(Some(data))
}

/// What the files of a state directory say.
struct Loaded {
    state: State,
    generation: u64,
    snapshot_len: u64,
    /// The log's records were used (it follows the snapshot).
    log_used: bool,
    /// Where the log's last whole record ends, and why what follows was
    /// not used.
    torn: Option<(u64, String)>,
    log_len: u64,
    /// The last .torrent the log holds for each info-hash still named.
    torrents: Vec<(String, Vec<u8>)>,
}

fn load(dir: &StateDir) -> Result<Loaded, StateError> {
    let snap_path = dir.state_path();
    let (mut state, generation, snapshot_len) = match read_bounded(&snap_path, MAX_STATE)? {
        Some(data) => {
            let (s, g) = State::decode(&data, &snap_path)?;
            (s, g, data.len() as u64)
        }
        None => (State::empty(), 0, 0),
    };
    let log_path = dir.log_path();
    let mut out = Loaded {
        state: State::empty(),
        generation,
        snapshot_len,
        log_used: false,
        torn: None,
        log_len: 0,
        torrents: Vec::new(),
    };
    if let Some(data) = read_bounded(&log_path, MAX_LOG)? {
        let r = log::read(&data, &log_path)?;
        if r.generation > generation {
            return Err(StateError::Corrupt {
                path: log_path,
                why: format!(
                    "it follows a snapshot of generation {}, {} is of generation {generation}",
                    r.generation,
                    snap_path.display()
                ),
            });
        }
        if r.generation == generation {
            let mut blobs = std::collections::HashMap::new();
            for (at, e) in r.entries {
                if let Some(blob) = e.torrent {
                    let names = match &e.change {
                        Change::Add(r) => std::slice::from_ref(r),
                        Change::Set(rs) => rs.as_slice(),
                        _ => &[],
                    };
                    for r in names {
                        if let RecordSource::Torrent { info_hash } = &r.source {
                            blobs.insert(info_hash.clone(), blob.clone());
                        }
                    }
                }
                log::apply(&mut state, e.change).map_err(|why| StateError::Corrupt {
                    path: log_path.clone(),
                    why: format!("at offset {at}: {why}"),
                })?;
            }
            for r in &state.transfers {
                if let RecordSource::Torrent { info_hash } = &r.source {
                    if let Some(b) = blobs.remove(info_hash) {
                        out.torrents.push((info_hash.clone(), b));
                    }
                }
            }
            out.log_used = true;
            out.torn = r.torn.map(|why| (r.end, why));
            out.log_len = r.end;
        }
    }
    out.state = state;
    Ok(out)
}

/// Reads the state of `dir` (snapshot and log) without changing a file:
/// for tests and tools looking at a daemon's state.
pub fn read(dir: &Path) -> Result<State, StateError> {
    let d = StateDir::at(dir);
    load(&d).map(|l| l.state)
}

impl Store {
    /// Opens the state under `dir` (creating it): reads the snapshot and
    /// the log, cuts a torn write off the log's end, writes the .torrent
    /// copies the log holds, and starts a log if there is none.
    pub fn open(dir: &Path) -> Result<Store, StateError> {
        let dir = StateDir::open(dir)?;
        let l = load(&dir)?;
        let log_path = dir.log_path();
        let log = if l.log_used {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&log_path)
                .map_err(io(&log_path))?;
            if let Some((end, why)) = &l.torn {
                tracing::warn!(
                    "{}: {why}: a write cut short (never acknowledged); cut away",
                    log_path.display()
                );
                f.set_len(*end).map_err(io(&log_path))?;
                f.sync_data().map_err(io(&log_path))?;
            }
            f
        } else {
            // None yet, or one older than the snapshot (a compaction cut
            // short after its snapshot: its records are in it).
            new_log(&log_path, l.generation)?
        };
        let mut store = Store {
            dir,
            state: l.state,
            generation: l.generation,
            log,
            log_len: if l.log_used {
                l.log_len
            } else {
                log::HEADER_LEN as u64
            },
            snapshot_len: l.snapshot_len,
            unsynced: Vec::new(),
            unwritten: Vec::new(),
            broken: false,
        };
        use std::io::Seek as _;
        store
            .log
            .seek(std::io::SeekFrom::Start(store.log_len))
            .map_err(io(&log_path))?;
        for (hash, data) in l.torrents {
            let same = std::fs::read(store.dir.torrent_path(&hash)).is_ok_and(|d| d == data);
            if same {
                store.unsynced.push(hash);
            } else {
                store.keep_torrent(hash, data);
            }
        }
        Ok(store)
    }

    /// The state directory.
    pub fn dir(&self) -> &StateDir {
        &self.dir
    }

    /// The state as it is on disk.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Bytes in the log now.
    pub fn log_len(&self) -> u64 {
        self.log_len
    }

    /// Writes `changes` durably (one `fdatasync`), then applies them; the
    /// log is compacted when it has grown past the snapshot. Each change is
    /// checked against the state before the batch: one that does not apply
    /// is refused (nothing written).
    pub fn append(&mut self, changes: Vec<Entry>) -> Result<(), StateError> {
        if changes.is_empty() {
            return Ok(());
        }
        let path = self.dir.log_path();
        for e in &changes {
            log::check(&self.state, &e.change).map_err(|why| StateError::Corrupt {
                path: path.clone(),
                why: format!("a change that does not apply: {why}"),
            })?;
        }
        if self.broken {
            self.compact()?;
        }
        let mut buf = Vec::new();
        for e in &changes {
            log::encode(e, &mut buf);
        }
        let written = self.log.write_all(&buf).and_then(|()| self.log.sync_data());
        if let Err(e) = written {
            // Part of a record may be there: cut it off, and start afresh
            // before the next change whatever happens.
            self.broken = true;
            let _ = self.log.set_len(self.log_len);
            return Err(io(&path)(e));
        }
        self.log_len += buf.len() as u64;
        for e in changes {
            let hash = match (&e.change, &e.torrent) {
                (Change::Add(r), Some(_)) => hash_of(r),
                (Change::Set(rs), Some(_)) => rs.iter().find_map(|r| hash_of(r)),
                _ => None,
            };
            let removed: Vec<String> = match &e.change {
                Change::Remove(ids) => ids
                    .iter()
                    .filter_map(|id| self.state.get(*id))
                    .filter_map(|r| hash_of(r))
                    .collect(),
                _ => Vec::new(),
            };
            // Checked above; nothing else changed the state since.
            if let Err(why) = log::apply(&mut self.state, e.change) {
                tracing::error!("{}: applying a change: {why}", path.display());
            }
            for hash in removed {
                self.dir.remove_torrent(&hash);
            }
            if let (Some(hash), Some(data)) = (hash, e.torrent) {
                self.keep_torrent(hash, data);
            }
        }
        if self.log_len > COMPACT_MIN.max(self.snapshot_len) {
            if let Err(e) = self.compact() {
                // The change is durable in the log: only the compaction
                // waits for the next change.
                tracing::warn!("compacting the state: {e}");
            }
        }
        Ok(())
    }

    /// Writes a .torrent copy without an fsync (the log holds its bytes);
    /// one that cannot be written is kept for the next compaction.
    fn keep_torrent(&mut self, hash: String, data: Vec<u8>) {
        match self.dir.write_torrent(&hash, &data) {
            Ok(_) => self.unsynced.push(hash),
            Err(e) => {
                tracing::warn!("{e} (kept in the log)");
                self.unwritten.push((hash, data));
            }
        }
    }

    /// Writes a new snapshot of the state and starts an empty log: the
    /// .torrent copies written since the last snapshot are made durable
    /// first (the log holding their bytes is dropped).
    pub fn compact(&mut self) -> Result<(), StateError> {
        for (hash, data) in std::mem::take(&mut self.unwritten) {
            let named = self
                .state
                .transfers
                .iter()
                .any(|r| hash_of(r).as_ref() == Some(&hash));
            if named {
                if let Err(e) = write_durably(&self.dir.torrent_path(&hash), &data) {
                    self.unwritten.push((hash, data));
                    return Err(e);
                }
            }
        }
        let unsynced = std::mem::take(&mut self.unsynced);
        let synced = unsynced.iter().try_for_each(|hash| {
            let p = self.dir.torrent_path(hash);
            match File::open(&p) {
                Ok(f) => f.sync_all().map_err(io(&p)),
                // Removed since (its transfer was).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io(&p)(e)),
            }
        });
        let synced = synced.and_then(|()| {
            if unsynced.is_empty() {
                Ok(())
            } else {
                sync_dir(&self.dir.path().join(super::state::TORRENTS_DIR))
            }
        });
        if let Err(e) = synced {
            self.unsynced = unsynced;
            return Err(e);
        }
        let generation = self.generation + 1;
        let snap = self.state.encode(generation);
        let snap_path = self.dir.state_path();
        let tmp = temp_name(&snap_path);
        write_synced(&tmp, &snap)?;
        std::fs::rename(&tmp, &snap_path).map_err(io(&snap_path))?;
        // From here the log on disk may be older than the snapshot: no
        // change goes to it any more.
        self.broken = true;
        self.generation = generation;
        self.snapshot_len = snap.len() as u64;
        sync_dir(self.dir.path())?;
        self.log = new_log(&self.dir.log_path(), generation)?;
        self.log_len = log::HEADER_LEN as u64;
        self.broken = false;
        Ok(())
    }
}

/// The info-hash of a torrent's record.
fn hash_of(r: &super::state::Record) -> Option<String> {
    match &r.source {
        RecordSource::Torrent { info_hash } => Some(info_hash.clone()),
        _ => None,
    }
}

/// Starts an empty log of `generation` at `path` durably, open to append.
fn new_log(path: &Path, generation: u64) -> Result<File, StateError> {
    let tmp = temp_name(path);
    write_synced(&tmp, &log::header(generation))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(super::state::parent(path))?;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(io(path))
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
