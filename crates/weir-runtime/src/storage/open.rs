//! Opening a transfer's storage, whatever its protocol: a layout of files
//! under a download directory, the pieces' digests, and a resume journal.
//!
//! [`open`] takes the download's lock, reads the journal, looks at what is
//! on disk (never through a link), and decides with
//! [`weir_core::resume::plan`] what is trusted, what is hashed again and
//! which files are someone else's. Data weir did not create is hashed right
//! here, before anything could write into it: a download that would have
//! to write into such a file is refused (unless `overwrite`), and seeding
//! with nothing of the data present is refused. Then files are created or
//! set to their exact lengths, the free space is checked, and the journal
//! is rewritten compactly. [`Opened::start`] starts the workers.
//!
//! With a file selection ([`TransferSpec::selection`]) only the files the
//! download writes are created, counted against free space and held to
//! their sizes; the others are left as they are, or absent.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use weir_core::bitfield::Bitfield;
use weir_core::geometry::Geometry;
use weir_core::resume::{self, FileAction, Found, JournalId, Mode, PlanOptions, Record};
use weir_core::selection::Selection;
use weir_core::storage::{Digests, FileLayout, Hasher};

use super::dir::{Access, SafeDir};
use super::error::{OpenError, human};
use super::files::{Files, state_of};
use super::journal;
use super::lock::DownloadLock;

/// A transfer as storage sees it.
#[derive(Clone, Debug)]
pub struct TransferSpec {
    /// The download directory (the user's path; links in it are followed,
    /// none under it).
    pub dir: PathBuf,
    /// The files, relative to `dir`.
    pub layout: FileLayout,
    /// Pieces and blocks.
    pub geometry: Geometry,
    /// Every piece's digest, when known (eD2k learns them from a peer).
    pub digests: Option<Digests>,
    /// The transfer's identity (info-hash, eD2k file hash).
    pub id: Vec<u8>,
    /// Names the journal (`.weir-resume-<stem>`) and the lock
    /// (`.weir-lock-<stem>`) in `dir`.
    pub stem: String,
    /// What the data is called, for messages.
    pub name: String,
    /// The files the user wants (`None`: all). A download creates only
    /// the files it writes ([`Selection::touched`]); the others are not
    /// created, not counted against free space, and a file of the same
    /// name already there is left as it is.
    pub selection: Option<Selection>,
}

/// Learns the digests from the data itself, when they are not known yet:
/// given the transfer's bytes in order, the digests if the data proves to
/// be the transfer (eD2k: the part hashes of a file whose file hash
/// matches), `None` otherwise.
pub type DeriveDigests = Box<dyn FnOnce(&mut dyn Read) -> Option<Digests> + Send>;

/// How to open a transfer.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Download (create and write) or seed (read what is there).
    pub mode: Mode,
    /// Hash everything on disk instead of trusting the journal.
    pub recheck: bool,
    /// Files weir did not create may be written into and resized.
    pub overwrite: bool,
    /// Refuse a download whose missing data exceeds the free space.
    pub space_check: bool,
    /// Keep a journal and a lock (off: files the caller just hashed, shared
    /// read-only).
    pub journal: bool,
    /// The caller hashed every present file itself just now: trust them.
    pub verified_by_caller: bool,
    /// Threads hashing what is on disk while opening (a recheck); once
    /// started, a transfer uses the process's disk pool.
    pub workers: usize,
}

impl OpenOptions {
    /// A download with a journal, checking free space.
    pub fn download() -> Self {
        Self {
            mode: Mode::Download,
            recheck: false,
            overwrite: false,
            space_check: true,
            journal: true,
            verified_by_caller: false,
            workers: super::hash_threads(),
        }
    }

    /// Seeding what is in the directory, with a journal.
    pub fn seed() -> Self {
        Self {
            mode: Mode::Seed,
            ..Self::download()
        }
    }
}

/// A transfer whose files are ready: what is had, what the core must hash,
/// what it may continue; [`Opened::start`] starts the workers.
#[derive(Debug)]
pub struct Opened {
    /// Pieces trusted (journal) or verified while opening.
    pub had: Bitfield,
    /// Pieces for the core to hash from storage before they count
    /// (`StorageOp::Check`): data of weir's own that may be complete.
    pub check: Bitfield,
    /// Partly written pieces `(piece, bytes)`: the core asks only for the
    /// rest, storage hashes the stored start first.
    pub partial: Vec<(u32, u32)>,
    /// The pieces wanted, when files were deselected
    /// ([`TransferSpec::selection`]).
    pub wanted: Option<Bitfield>,
    pub(super) files: Arc<Files>,
    pub(super) geometry: Geometry,
    pub(super) digests: Option<Digests>,
    /// The journal's stem (see [`super::journal::name`]), when it has one.
    pub(super) journal: Option<Arc<str>>,
    pub(super) lock: Option<DownloadLock>,
    /// The group its backlog counts in.
    pub(super) group: super::Backlog,
}

impl Opened {
    /// Counts the transfer's backlog in `group` too (an engine's one
    /// group for all its transfers).
    pub fn in_group(mut self, group: &super::Backlog) -> Self {
        self.group = group.clone();
        self
    }

    /// The digests, when known now (given, or derived from the data).
    pub fn digests(&self) -> Option<Digests> {
        self.digests.clone()
    }

    /// The download directory.
    pub fn dir(&self) -> &Path {
        self.files.dir().path()
    }
}

/// Opens a transfer's storage (blocking: files are hashed here; call it
/// from a blocking thread). See the module docs.
pub fn open(
    spec: TransferSpec,
    opts: OpenOptions,
    derive: Option<DeriveDigests>,
) -> Result<Opened, OpenError> {
    let dir = SafeDir::shared(&spec.dir, opts.mode == Mode::Download)?;
    // One copy of the stem for the lock and the journal it names.
    let stem: Arc<str> = Arc::from(spec.stem.as_str());
    let lock = if opts.journal {
        Some(DownloadLock::take(dir.clone(), stem.clone())?)
    } else {
        None
    };
    let geo = spec.geometry;
    let id = JournalId::new(&spec.id, &geo, &spec.layout);
    let jname = journal::name(&spec.stem);
    let mut journal_len = 0usize;
    let parsed = if opts.journal {
        journal::read(&dir, &jname)?.and_then(|data| match resume::parse(&data, &id) {
            Ok(r) => {
                journal_len = data.len();
                if r.damaged {
                    tracing::warn!(
                        "{}: damaged after its valid part; what it cannot vouch for is hashed again",
                        dir.path().join(&jname).display()
                    );
                }
                Some(r)
            }
            Err(e) => {
                tracing::warn!("{}: {e}; ignored", dir.path().join(&jname).display());
                None
            }
        })
    } else {
        None
    };
    // What is there now (a link anywhere is refused here).
    let mut found = Vec::with_capacity(spec.layout.files().len());
    let mut allocated = Vec::with_capacity(spec.layout.files().len());
    for f in spec.layout.files() {
        match dir.stat(&f.path)? {
            Some(st) => {
                found.push(Found::File(state_of(
                    st.st_ino,
                    st.st_size as u64,
                    st.st_mtime,
                    st.st_mtime_nsec,
                )));
                allocated.push((st.st_blocks as u64).saturating_mul(512));
            }
            None => {
                found.push(Found::Missing);
                allocated.push(0);
            }
        }
    }
    let mut plan = resume::plan(
        &spec.layout,
        &geo,
        parsed.as_ref(),
        &found,
        PlanOptions {
            mode: opts.mode,
            recheck: opts.recheck,
            overwrite: opts.overwrite,
        },
    );
    // Deselected files the download never writes: not created; one there
    // already is not weir's concern (its size is not held against it).
    let touched = |i: usize| {
        spec.selection
            .as_ref()
            .is_none_or(|s| s.touched().get(i).copied().unwrap_or(true))
    };
    if opts.mode == Mode::Download {
        for (i, a) in plan.files.iter_mut().enumerate() {
            if !touched(i) && *a == FileAction::Create {
                *a = FileAction::Absent;
            }
        }
    }
    let conflict = plan.conflicts.iter().find(|c| match c {
        resume::Conflict::WrongSize { file, .. } => touched(*file),
    });
    if let Some(resume::Conflict::WrongSize { file, found, want }) = conflict {
        return Err(OpenError::WrongSize {
            path: dir.path().join(&spec.layout.files()[*file].path),
            found: *found,
            want: *want,
        });
    }
    let writable: Vec<bool> = (0..plan.files.len())
        .map(|i| opts.mode == Mode::Download && plan.writable(i))
        .collect();
    let files = Arc::new(Files::new(dir.clone(), spec.layout.clone(), writable));
    let mut had = plan.had.clone();
    let mut check = plan.check.clone();
    // Hashed now: someone else's data (it must verify before anything is
    // written), and when seeding everything not trusted (to know at once
    // what can be offered).
    let mut now = plan.foreign.clone();
    if opts.mode == Mode::Seed {
        for p in check.iter_ones() {
            now.set(p);
        }
        check = Bitfield::new(geo.piece_count());
    }
    let mut digests = spec.digests.clone();
    if now.count() > 0 && digests.is_none() && !opts.verified_by_caller {
        if let Some(derive) = derive {
            digests = derive(&mut TransferReader::new(&files, geo.total_len()));
        }
    }
    let verified = if now.count() == 0 {
        Bitfield::new(geo.piece_count())
    } else if opts.verified_by_caller {
        now.clone()
    } else if let Some(d) = &digests {
        let bytes: u64 = now.iter_ones().map(|p| u64::from(geo.piece_size(p))).sum();
        tracing::info!("{}: checking {} of existing data", spec.name, human(bytes));
        hash_pieces(&files, &geo, d, &now, opts.workers)
    } else {
        Bitfield::new(geo.piece_count())
    };
    for p in verified.iter_ones() {
        had.set(p);
    }
    match opts.mode {
        Mode::Download => {
            let mut refused = plan.refused_files(&spec.layout, &geo, &verified);
            refused.retain(|&i| touched(i));
            if !refused.is_empty() {
                let over = |p: u32| {
                    spec.layout
                        .map(geo.piece_offset(p), u64::from(geo.piece_size(p)))
                        .any(|(fi, _, _)| refused.contains(&fi))
                };
                let checked = now.iter_ones().filter(|&p| over(p)).count() as u32;
                let bad = now
                    .iter_ones()
                    .filter(|&p| over(p) && !verified.get(p))
                    .count() as u32;
                return Err(OpenError::ExistingData {
                    paths: refused
                        .iter()
                        .map(|&i| dir.path().join(&spec.layout.files()[i].path))
                        .collect(),
                    bad,
                    checked,
                });
            }
        }
        Mode::Seed => {
            if had.count() == 0 && geo.piece_count() > 0 {
                let missing = plan
                    .files
                    .iter()
                    .filter(|a| **a == FileAction::Absent)
                    .count();
                return Err(OpenError::NothingToSeed {
                    dir: dir.path().to_path_buf(),
                    missing,
                    files: plan.files.len(),
                    name: spec.name.clone(),
                });
            }
            if !had.is_full() {
                let bytes: u64 = had.iter_ones().map(|p| u64::from(geo.piece_size(p))).sum();
                let absent: Vec<String> = plan
                    .files
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| **a == FileAction::Absent)
                    .map(|(i, _)| spec.layout.files()[i].path.display().to_string())
                    .collect();
                let bad = now.count() - verified.count();
                tracing::warn!(
                    "{}: seeding {} of {} pieces ({} of {}){}{}",
                    spec.name,
                    had.count(),
                    geo.piece_count(),
                    human(bytes),
                    human(geo.total_len()),
                    if absent.is_empty() {
                        String::new()
                    } else {
                        format!("; missing: {}", absent.join(", "))
                    },
                    if bad > 0 {
                        format!("; {bad} pieces do not verify")
                    } else {
                        String::new()
                    },
                );
            }
        }
    }
    if opts.mode == Mode::Download {
        if opts.space_check {
            let need: u64 = spec
                .layout
                .files()
                .iter()
                .enumerate()
                .filter(|(i, _)| plan.writable(*i))
                .map(|(i, f)| f.length.saturating_sub(allocated[i]))
                .sum();
            if let Some(free) = super::space::free_bytes(dir.fd())
                && need > free
            {
                return Err(OpenError::NoSpace {
                    dir: dir.path().to_path_buf(),
                    need: human(need),
                    free: human(free),
                });
            }
        }
        // Weir's files at exactly their lengths (sparse where new).
        for (i, f) in spec.layout.files().iter().enumerate() {
            if !plan.writable(i) {
                continue;
            }
            let shown = dir.path().join(&f.path);
            let file = dir
                .open_file(&f.path, Access::Create)?
                .ok_or_else(|| OpenError::Io {
                    path: shown.clone(),
                    source: std::io::ErrorKind::NotFound.into(),
                })?;
            let len = file
                .metadata()
                .map_err(|source| OpenError::Io {
                    path: shown.clone(),
                    source,
                })?
                .len();
            if len != f.length {
                file.set_len(f.length).map_err(|source| OpenError::Io {
                    path: shown,
                    source,
                })?;
            }
        }
    }
    // Foreign data just verified: on the disk before the journal says so.
    for (i, a) in plan.files.iter().enumerate() {
        if *a == FileAction::Foreign
            && let Ok(f) = files.file(i)
            && let Err(e) = f.sync_data()
        {
            tracing::warn!("{}: {e}", files.shown(i).display());
        }
    }
    let journal = if opts.journal {
        let n = spec.layout.files().len();
        let owned = {
            let mut b = Bitfield::new(n as u32);
            for i in 0..n {
                if opts.mode == Mode::Download && plan.writable(i)
                    || parsed.as_ref().is_some_and(|j| j.owned[i])
                        && plan.files[i] == FileAction::Own
                {
                    b.set(i as u32);
                }
            }
            b
        };
        let mut records = vec![Record::Owned(owned.clone()), Record::Have(had.clone())];
        // Keep the hints: a crash before they are hashed loses nothing.
        for p in check.iter_ones() {
            records.push(Record::Written {
                piece: p,
                end: geo.piece_size(p),
            });
        }
        for &(piece, end) in &plan.partial {
            records.push(Record::Written { piece, end });
        }
        let states: Vec<_> = (0..n).map(|i| files.state(i)).collect();
        // A journal a clean run left that says exactly what the compact
        // one would (every piece it vouched for trusted, nothing to hash
        // again, no hints, the same files in the same states) is kept as
        // it is: rewriting it durably costs two fsyncs, and a daemon
        // restarting with 11,000 transfers spent most of two minutes on
        // them. Records appended from now on follow its `Closed`, so a
        // crash leaves it unclean as it should.
        let unchanged = parsed.as_ref().is_some_and(|r| {
            r.clean
                && !r.damaged
                && r.written.is_empty()
                && check.count() == 0
                && plan.partial.is_empty()
                && r.vouched == had
                && r.owned
                    .iter()
                    .enumerate()
                    .all(|(i, o)| *o == owned.get(i as u32))
                && r.files.as_deref() == Some(&states[..])
                && journal_len <= KEEP_JOURNAL_BYTES
        });
        if !unchanged {
            records.push(Record::Files(states));
            journal::compact(&dir, &jname, &id, &records)?;
        }
        Some(stem)
    } else {
        None
    };
    if parsed.is_some() {
        tracing::info!(
            "{}: resuming with {} of {} pieces verified, {} to hash again, {} partly written",
            spec.name,
            had.count(),
            geo.piece_count(),
            check.count(),
            plan.partial.len()
        );
    }
    Ok(Opened {
        had,
        check,
        partial: plan.partial.clone(),
        wanted: spec.selection.as_ref().map(|s| s.pieces().clone()),
        files,
        geometry: geo,
        digests,
        journal,
        lock,
        group: super::Backlog::default(),
    })
}

/// A clean journal larger than this is compacted even when it says
/// nothing new (a header, bitfields and file states take far less).
const KEEP_JOURNAL_BYTES: usize = 64 << 10;

/// How much of the transfer one worker of a recheck takes at a time:
/// whole consecutive pieces up to this many bytes (one piece when a piece
/// is larger), so the file is read front to back.
const RUN_BYTES: u64 = 4 << 20;
/// How much a recheck reads at once, into one reused buffer per worker: it
/// stays in the core's cache while it is hashed (8 MiB reads were half as
/// fast here: read, then hashed again from memory).
const CHUNK: usize = 256 << 10;

/// Runs of consecutive pieces of `pieces`, each at most [`RUN_BYTES`] (or
/// one piece): `(first piece, count)`.
fn runs(geo: &Geometry, pieces: &Bitfield) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut bytes = 0u64;
    for p in pieces.iter_ones() {
        let size = u64::from(geo.piece_size(p));
        match out.last_mut() {
            Some((first, count)) if *first + *count == p && bytes + size <= RUN_BYTES => {
                *count += 1;
                bytes += size;
            }
            _ => {
                out.push((p, 1));
                bytes = size;
            }
        }
    }
    out
}

/// Hashes pieces `first..first + count` (consecutive), pushing those that
/// verify to `good`: from a map of the run where the system allows (no
/// copy of the page cache), else in [`CHUNK`] reads into `buf`. A read that fails
/// stops it: `Err(piece)` names the piece being read, whose verdict is not
/// known; the pieces before it have theirs.
fn hash_run(
    files: &Files,
    geo: &Geometry,
    digests: &Digests,
    (first, count): (u32, u32),
    buf: &mut [u8],
    good: &mut Vec<u32>,
) -> Result<(), u32> {
    if count == 0 {
        return Ok(());
    }
    let start = geo.piece_offset(first);
    let end = geo.piece_offset(first + count - 1) + u64::from(geo.piece_size(first + count - 1));
    let run = files.map_run(start, end - start);
    for p in first..first + count {
        let Some(want) = digests.get(p as usize) else {
            continue;
        };
        let mut h = Hasher::for_digest(&want);
        run.visit(
            geo.piece_offset(p),
            u64::from(geo.piece_size(p)),
            buf,
            |b| h.update(b),
        )
        .map_err(|_| p)?;
        if h.matches(&want) {
            good.push(p);
        }
    }
    Ok(())
}

/// Hashes `pieces` on `workers` threads and returns those that verify.
/// Workers take runs of consecutive pieces in order, so the file is read
/// front to back in [`CHUNK`] reads; a piece that cannot be read does not
/// verify, and the rest of its run is still hashed.
fn hash_pieces(
    files: &Files,
    geo: &Geometry,
    digests: &Digests,
    pieces: &Bitfield,
    workers: usize,
) -> Bitfield {
    let runs = runs(geo, pieces);
    let workers = workers.clamp(1, 8).min(runs.len().max(1));
    let next = AtomicUsize::new(0);
    let mut out = Bitfield::new(geo.piece_count());
    let results: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (runs, next) = (&runs, &next);
                s.spawn(move || {
                    let mut buf = vec![0u8; CHUNK];
                    let mut good = Vec::new();
                    while let Some(&(mut first, mut count)) =
                        runs.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        while let Err(bad) =
                            hash_run(files, geo, digests, (first, count), &mut buf, &mut good)
                        {
                            // Skip the unreadable piece, go on after it.
                            count -= bad + 1 - first;
                            first = bad + 1;
                        }
                    }
                    good
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    for p in results.into_iter().flatten() {
        out.set(p);
    }
    out
}

/// The transfer's bytes in order, read from its files (for
/// [`DeriveDigests`]); a missing or short file ends the stream early.
struct TransferReader<'a> {
    files: &'a Files,
    at: u64,
    total: u64,
}

impl<'a> TransferReader<'a> {
    fn new(files: &'a Files, total: u64) -> Self {
        Self {
            files,
            at: 0,
            total,
        }
    }
}

impl Read for TransferReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.total - self.at).min(4 << 20) as usize;
        if n == 0 {
            return Ok(0);
        }
        let data = self
            .files
            .read(self.at, n)
            .map_err(|e| std::io::Error::other(e.fault.to_string()))?;
        buf[..n].copy_from_slice(&data);
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recheck_reads_runs_of_consecutive_pieces_up_to_the_run_size() {
        // 1.5 MiB pieces: two fit a run of 4 MiB, a third does not.
        let geo = Geometry::new(10 * (3 << 19) + 5, 3 << 19, 16_384).unwrap();
        let mut want = Bitfield::new(geo.piece_count());
        for p in [0, 1, 2, 3, 5, 6, 10] {
            want.set(p);
        }
        assert_eq!(runs(&geo, &want), [(0, 2), (2, 2), (5, 2), (10, 1)]);
        // Pieces larger than a run: one each.
        let big = Geometry::new(3 * (8 << 20), 8 << 20, 16_384).unwrap();
        let mut all = Bitfield::new(big.piece_count());
        for p in 0..3 {
            all.set(p);
        }
        assert_eq!(runs(&big, &all), [(0, 1), (1, 1), (2, 1)]);
        assert!(runs(&geo, &Bitfield::new(geo.piece_count())).is_empty());
    }

    /// A recheck hashes from maps (large files) and reads (small ones, the
    /// rest of a short file) and finds exactly the pieces whose bytes are
    /// right: pieces spanning files, a corrupted piece and a file shorter
    /// than the layout say so, the rest verify.
    #[test]
    fn a_recheck_over_maps_and_reads_verifies_exactly_the_right_pieces() {
        use sha1::Digest as _;
        let t = std::env::temp_dir().join(format!("weir-open-maps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(&t).unwrap();
        // A 40 KiB file (read), a 700 KiB one (mapped), a 3 KiB one, a
        // 1 MiB + 5 one (mapped) that will be short on disk.
        let sizes = [40u64 << 10, 700 << 10, 3 << 10, (1 << 20) + 5];
        let total: u64 = sizes.iter().sum();
        let content: Vec<u8> = (0..total)
            .map(|i| (i % 251) as u8 ^ (i >> 16) as u8)
            .collect();
        let layout = FileLayout::new(
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (PathBuf::from(format!("f{i}")), n)),
        );
        let mut at = 0usize;
        for (i, &n) in sizes.iter().enumerate() {
            let mut bytes = content[at..at + n as usize].to_vec();
            if i == 1 {
                bytes[300 << 10] ^= 1; // corrupts the piece holding it
            }
            if i == 3 {
                bytes.truncate(600 << 10); // short: the end is missing
            }
            std::fs::write(t.join(format!("f{i}")), bytes).unwrap();
            at += n as usize;
        }
        let piece = 64u32 << 10;
        let geo = Geometry::new(total, piece, 16_384).unwrap();
        let digests: Digests = (0..geo.piece_count())
            .map(|p| {
                let o = geo.piece_offset(p) as usize;
                let d = sha1::Sha1::digest(&content[o..o + geo.piece_size(p) as usize]);
                weir_core::storage::Digest::Sha1(d.into())
            })
            .collect();
        let dir = Arc::new(SafeDir::open(&t, false).unwrap());
        let files = Files::new(dir, layout, vec![false; sizes.len()]);
        let mut all = Bitfield::new(geo.piece_count());
        for p in 0..geo.piece_count() {
            all.set(p);
        }
        let got = hash_pieces(&files, &geo, &digests, &all, 2);
        let bad_byte = (40 << 10) + (300 << 10);
        let short_from = total - ((1 << 20) + 5) + (600 << 10);
        for p in 0..geo.piece_count() {
            let (o, e) = (
                geo.piece_offset(p),
                geo.piece_offset(p) + u64::from(geo.piece_size(p)),
            );
            let good = !(o..e).contains(&bad_byte) && e <= short_from;
            assert_eq!(got.get(p), good, "piece {p} ({o}..{e})");
        }
        std::fs::remove_dir_all(&t).unwrap();
    }
}
