//! The resume journal on disk (its format is `weir_core::resume`).
//!
//! When a transfer opens, the journal is read and replaced by a compact one
//! (written to a temporary name, flushed, renamed over the old one), so it
//! never grows across runs and a crash while compacting leaves the old one.
//! While the transfer runs:
//! - the writer thread appends a [`Record::Written`] hint right after each
//!   write, with no flush (a hint is never trusted: it only says what to
//!   hash again after a crash, so a piece that was complete is not fetched
//!   again). It does so itself, so a hint never waits behind a flush: a
//!   process killed while the journal thread waits for the disk still
//!   leaves the hints of everything it wrote;
//! - the journal thread holds verified pieces until their data is durable:
//!   at most every [`SYNC_BYTES`] of them or [`SYNC_AFTER`], and when the
//!   transfer closes, it `fdatasync`s the data files, then appends one
//!   [`Record::Verified`] and the files' states, then `fdatasync`s the
//!   journal. A piece is therefore never vouched for before its bytes are
//!   on the disk.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_core::bitfield::Bitfield;
use weir_core::geometry::Geometry;
use weir_core::resume::{JournalId, Record};

use super::dir::{Access, SafeDir};
use super::error::OpenError;
use super::files::Files;

/// Verified bytes that wait for a flush at most.
pub(crate) const SYNC_BYTES: u64 = 32 << 20;
/// How long verified pieces wait for a flush at most.
pub(crate) const SYNC_AFTER: Duration = Duration::from_millis(250);
/// A journal larger than this is not read (it cannot be one weir wrote for
/// a sane transfer; the transfer is then hashed instead).
const MAX_READ: u64 = 256 << 20;

/// What the storage threads tell the journal thread.
#[derive(Debug)]
pub(crate) enum Note {
    /// `piece` was written whole and matched (its hint is appended).
    Written { piece: u32 },
    /// `piece` matched when hashed from what is stored.
    Checked { piece: u32 },
    /// These pieces' stored data is gone.
    Lost(Vec<u32>),
}

/// The journal, appended to by the writer (hints) and the journal thread
/// (vouching); each append is one `write` under a lock, flushes happen
/// outside it.
///
/// It holds a descriptor only while records wait to be made durable: each
/// flush closes it and the next append reopens it (through the download
/// directory, links refused, at its end). An idle transfer, such as each of
/// a daemon's thousands of seeding torrents, then holds none; one
/// `openat` per flush costs nothing beside the flush's `fdatasync`s. The
/// download's lock keeps any other weir from replacing the file meanwhile.
#[derive(Debug)]
pub(crate) struct Journal {
    dir: Arc<SafeDir>,
    /// Names the file ([`name`]); shared with the download's lock.
    stem: Arc<str>,
    file: std::sync::Mutex<Option<File>>,
    warned: std::sync::atomic::AtomicBool,
}

impl Journal {
    /// The journal of `stem` in `dir`, made durable by [`compact`] (so
    /// nothing waits to be flushed yet).
    pub(crate) fn new(dir: Arc<SafeDir>, stem: Arc<str>) -> Self {
        Self {
            dir,
            stem,
            file: std::sync::Mutex::new(None),
            warned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Appends encoded records.
    pub(crate) fn append(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let r = (|| {
            if file.is_none() {
                let mut f = self
                    .dir
                    .open_file(Path::new(&name(&self.stem)), Access::Write)
                    .map_err(|e| std::io::Error::other(e.to_string()))?
                    .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
                f.seek(std::io::SeekFrom::End(0))?;
                *file = Some(f);
            }
            file.as_ref().map_or(Ok(()), |mut f| f.write_all(bytes))
        })();
        if let Err(e) = &r {
            self.warn(e);
        }
        r
    }

    /// Makes what was appended durable, and lets the descriptor go.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        let taken = self.file.lock().unwrap_or_else(|p| p.into_inner()).take();
        // Outside the lock: a hint appended meanwhile reopens the same
        // file, and `fdatasync` flushes the file, whichever descriptor
        // wrote it.
        let r = taken.map_or(Ok(()), |f| f.sync_data());
        if let Err(e) = &r {
            self.warn(e);
        }
        r
    }

    fn warn(&self, e: &std::io::Error) {
        if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                "resume journal {}: {e}; pieces verified meanwhile may be hashed again next time",
                self.dir.path().join(name(&self.stem)).display()
            );
        }
    }

    /// Appends one record (a hint: failures only warn).
    pub(crate) fn hint(&self, r: &Record) {
        let _ = self.append(&r.to_bytes());
    }
}

/// The journal's file name for `stem`.
pub(crate) fn name(stem: &str) -> String {
    format!(".weir-resume-{stem}")
}

/// Reads the journal `name` in `dir` (`None` if there is none).
pub(crate) fn read(dir: &SafeDir, name: &str) -> Result<Option<Vec<u8>>, OpenError> {
    let Some(mut f) = dir.open_file(Path::new(name), Access::Read)? else {
        return Ok(None);
    };
    let shown = dir.path().join(name);
    let len = f
        .metadata()
        .map_err(|source| OpenError::Io {
            path: shown.clone(),
            source,
        })?
        .len();
    if len > MAX_READ {
        tracing::warn!(
            "{}: {len} bytes, too large to be a resume journal; ignored",
            shown.display()
        );
        return Ok(None);
    }
    let mut data = Vec::with_capacity(len as usize);
    f.read_to_end(&mut data).map_err(|source| OpenError::Io {
        path: shown,
        source,
    })?;
    Ok(Some(data))
}

/// Replaces the journal `name` in `dir` with `records` after the header of
/// `id`, durably.
pub(crate) fn compact(
    dir: &SafeDir,
    name: &str,
    id: &JournalId,
    records: &[Record],
) -> Result<(), OpenError> {
    let tmp = format!("{name}.new");
    let shown = dir.path().join(&tmp);
    let io = |source: std::io::Error| OpenError::Io {
        path: shown.clone(),
        source,
    };
    let mut f = dir
        .open_file(Path::new(&tmp), Access::Create)?
        .ok_or_else(|| io(std::io::ErrorKind::NotFound.into()))?;
    f.set_len(0).map_err(io)?;
    let mut buf = weir_core::resume::MAGIC.to_vec();
    Record::Header(id.clone()).encode(&mut buf);
    for r in records {
        r.encode(&mut buf);
    }
    f.write_all(&buf).map_err(io)?;
    f.sync_data().map_err(io)?;
    dir.rename(&tmp, name).map_err(io)?;
    dir.sync().map_err(io)?;
    Ok(())
}

/// The journal thread's state.
pub(crate) struct Appender {
    journal: Arc<Journal>,
    files: Arc<Files>,
    geo: Geometry,
    /// Verified pieces waiting for their data to be durable.
    pending: Vec<u32>,
    pending_bytes: u64,
    since: Option<Instant>,
    /// Files written since the last flush (empty until the first write:
    /// a daemon's idle transfers hold none).
    dirty: Vec<bool>,
    /// Pieces whose flush failed: never vouched for in this run (empty
    /// until the first such failure or loss).
    doubtful: Bitfield,
}

impl Appender {
    /// A journal thread vouching in `journal`.
    pub(crate) fn new(journal: Arc<Journal>, files: Arc<Files>, geo: Geometry) -> Self {
        Self {
            journal,
            files,
            dirty: Vec::new(),
            doubtful: Bitfield::new(0),
            geo,
            pending: Vec::new(),
            pending_bytes: 0,
            since: None,
        }
    }

    /// When the verified pieces waiting must be flushed at the latest
    /// (`None`: nothing waits).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.since.map(|t| t + SYNC_AFTER)
    }

    /// Takes one note; flushes at once when enough verified bytes wait.
    pub(crate) fn handle(&mut self, n: Note) {
        self.note(n);
        if self.pending_bytes >= SYNC_BYTES {
            self.flush(false);
        }
    }

    /// Flushes what waits (its deadline has come).
    pub(crate) fn flush_now(&mut self) {
        self.flush(false);
    }

    /// The transfer closes: a last flush, marked as a clean close.
    pub(crate) fn close(mut self) {
        self.flush(true);
    }

    /// Marks `piece` as failed to flush or lost.
    fn doubt(&mut self, piece: u32) {
        if self.doubtful.is_empty() {
            self.doubtful = Bitfield::new(self.geo.piece_count());
        }
        self.doubtful.set(piece);
    }

    fn touch(&mut self, piece: u32) {
        if self.dirty.is_empty() {
            self.dirty = vec![false; self.files.layout().files().len()];
        }
        let off = self.geo.piece_offset(piece);
        for (fi, _, _) in self
            .files
            .layout()
            .map(off, u64::from(self.geo.piece_size(piece)))
        {
            self.dirty[fi] = true;
        }
    }

    fn note(&mut self, n: Note) {
        match n {
            Note::Written { piece } => {
                self.touch(piece);
                self.vouch_later(piece);
            }
            Note::Checked { piece } => {
                // Its bytes may be another process's, or ours from before a
                // crash and not yet on the disk: flushed first too.
                self.touch(piece);
                self.vouch_later(piece);
            }
            Note::Lost(pieces) => {
                self.pending.retain(|p| !pieces.contains(p));
                for &p in &pieces {
                    self.doubt(p);
                }
                if self
                    .journal
                    .append(&Record::Lost(pieces).to_bytes())
                    .is_ok()
                {
                    let _ = self.journal.sync();
                }
            }
        }
    }

    fn vouch_later(&mut self, piece: u32) {
        if self.doubtful.get(piece) {
            return;
        }
        self.pending.push(piece);
        self.pending_bytes += u64::from(self.geo.piece_size(piece));
        self.since.get_or_insert_with(Instant::now);
    }

    /// Makes the pending pieces' data durable, then vouches for them.
    fn flush(&mut self, closing: bool) {
        self.since = None;
        let mut pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        for fi in 0..self.dirty.len() {
            if !std::mem::take(&mut self.dirty[fi]) {
                continue;
            }
            if let Err(e) = self.files.sync(fi) {
                // After a failed flush the kernel may have dropped the
                // data: what it held is never vouched for in this run.
                tracing::warn!(
                    "{}: flush failed ({e}); its pieces will be hashed again next time",
                    self.files.shown(fi).display()
                );
                for p in self.files.layout().pieces_of_file(fi, &self.geo) {
                    self.doubt(p);
                }
            }
        }
        pending.retain(|p| !self.doubtful.get(*p));
        let mut buf = Vec::new();
        if !pending.is_empty() {
            Record::Verified(pending).encode(&mut buf);
        }
        let n = self.files.layout().files().len();
        Record::Files((0..n).map(|i| self.files.state(i)).collect()).encode(&mut buf);
        if closing {
            Record::Closed.encode(&mut buf);
        }
        if self.journal.append(&buf).is_ok() {
            let _ = self.journal.sync();
        }
    }
}
