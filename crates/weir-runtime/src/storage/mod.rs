//! Files on disk under the storage contract of `weir_core::storage`.
//!
//! A transfer's storage is opened with [`open`] (protocol-neutral: a
//! layout of files under a download directory, the pieces' digests, a
//! resume journal), which decides what is had, what must be hashed again
//! and which files weir may not touch; [`Opened::start`] then gives a
//! [`DiskStorage`], which executes a protocol core's [`StorageOp`]s on
//! dedicated threads, so hashing and disk I/O never run on a network task.
//!
//! - Paths: every file, folder and journal is opened from the download
//!   directory's descriptor one component at a time without following
//!   links ([`dir`]); nothing outside the directory is ever touched.
//! - Workers: each piece is routed to one hashing worker (piece index
//!   modulo the worker count), which hashes its data in order as it
//!   arrives ([`PieceVerifier`]) and passes it on to the one writer thread;
//!   nothing is read back to verify a download. One writer, because
//!   buffered writes to a file serialize on its inode lock anyway, while
//!   hashing runs in parallel with writing. A piece's verdict is reported
//!   only after its last byte is written.
//! - Files weir did not create are never written: their ranges are
//!   compared instead ([`files`]).
//! - The journal ([`journal`]) vouches for a piece only after its data was
//!   flushed to the disk; hints written after every write let a killed
//!   download hash (not fetch) what it had finished, and continue pieces it
//!   had started.
//! - A full disk pauses writing (the data waits in memory, and the
//!   backlog bound stops the network): [`space`] retries every second and
//!   says so once in each direction.
//! - A failed upload read (EIO, a truncated file) is reported as
//!   [`StorageEvent::ReadFailed`] with the pieces it destroyed: the core
//!   stops offering them instead of the whole transfer failing.

mod dir;
mod error;
mod files;
mod journal;
mod lock;
mod open;
mod space;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedSender;
use weir_core::geometry::Geometry;
use weir_core::storage::{Digest, PieceVerifier, StorageEvent, StorageOp};

pub use error::OpenError;
pub use open::{DeriveDigests, OpenOptions, Opened, TransferSpec, open};
pub use weir_core::resume::Mode;

use files::{Files, WriteError};
use journal::{Journal, Note};
use weir_core::resume::Record;

/// The names of the files storage keeps next to a transfer's data in its
/// directory (the resume journal and the lock), for a transfer named
/// `stem` ([`TransferSpec::stem`]): what removing a transfer's data must
/// delete besides its files.
pub fn side_files(stem: &str) -> [String; 2] {
    [journal::name(stem), lock::name(stem)]
}

/// Bytes submitted and not yet written (see [`DiskStorage::backlog`]) above
/// which a driver stops reading its connections' packets: a few pieces or
/// eD2k parts' worth, so memory stays bounded when hashing or the disk is
/// slower than the network (or full).
pub const BACKLOG_LIMIT: u64 = 32 << 20;

/// A transfer's files, served by worker threads.
#[derive(Debug)]
pub struct DiskStorage {
    senders: Vec<mpsc::Sender<Job>>,
    handles: Vec<thread::JoinHandle<()>>,
    writer: Option<thread::JoinHandle<()>>,
    journal: Option<thread::JoinHandle<()>>,
    /// Bytes submitted for writing and not yet written.
    backlog: Arc<AtomicU64>,
    shared: Arc<Shared>,
    lock: Option<lock::DownloadLock>,
}

/// What a hashing worker does.
enum Job {
    Op(StorageOp),
    /// Feed the stored first `len` bytes of `piece` to the verifier.
    Resume {
        piece: u32,
        len: u32,
    },
}

/// Hashed data on its way to the writer thread.
struct WriteJob {
    piece: u32,
    offset: u64,
    /// Offset in the piece where the data ends.
    end: u32,
    data: Vec<Bytes>,
    /// The piece's verdict, when this run completed it.
    verdict: Option<bool>,
}

/// State the threads share.
#[derive(Debug)]
struct Shared {
    files: Arc<Files>,
    geo: Geometry,
    /// Free bytes + 1 while the writer waits for space, 0 otherwise.
    full: AtomicU64,
    /// Set when closing: a writer waiting for space gives up.
    closing: (Mutex<bool>, Condvar),
    /// Pieces already reported lost (each is logged once).
    lost: Mutex<std::collections::BTreeSet<u32>>,
}

impl Shared {
    /// Waits `d` unless the storage closes meanwhile; whether it closes.
    fn wait_unless_closing(&self, d: std::time::Duration) -> bool {
        let (m, cv) = &self.closing;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        if *g {
            return true;
        }
        let (g, _) = cv.wait_timeout(g, d).unwrap_or_else(|p| p.into_inner());
        *g
    }
}

impl Opened {
    /// Starts the workers: `digests` (all pieces) verify what is written;
    /// events go to `events`. `resumed` are the partly written pieces the
    /// core continues, `(piece, bytes)` as it accepted them (at most what
    /// [`Opened::partial`] offered): their stored start is fed to the
    /// verifiers before any write.
    pub fn start(
        self,
        digests: Arc<[Digest]>,
        resumed: &[(u32, u32)],
        events: UnboundedSender<StorageEvent>,
    ) -> std::io::Result<DiskStorage> {
        let geo = self.geometry;
        let shared = Arc::new(Shared {
            files: self.files.clone(),
            geo,
            full: AtomicU64::new(0),
            closing: (Mutex::new(false), Condvar::new()),
            lost: Mutex::new(Default::default()),
        });
        let (jtx, jfile, journal) = match self.journal {
            Some((file, shown)) => {
                let (tx, rx) = mpsc::channel::<Note>();
                let j = Arc::new(Journal::new(file, shown));
                let app = journal::Appender::new(j.clone(), self.files.clone(), geo);
                let h = thread::Builder::new()
                    .name("weir-journal".into())
                    .spawn(move || app.run(rx))?;
                (Some(tx), Some(j), Some(h))
            }
            None => (None, None, None),
        };
        let (wtx, wrx) = mpsc::channel::<WriteJob>();
        let backlog = Arc::new(AtomicU64::new(0));
        let writer = {
            let shared = shared.clone();
            let events = events.clone();
            let backlog = backlog.clone();
            let jtx = jtx.clone();
            let jfile = jfile.clone();
            thread::Builder::new()
                .name("weir-write".into())
                .spawn(move || {
                    for job in wrx {
                        let len = job.data.iter().map(|d| d.len() as u64).sum();
                        let ev = write_job(&shared, jfile.as_deref(), jtx.as_ref(), job);
                        backlog.fetch_sub(len, Ordering::Relaxed);
                        if let Some(ev) = ev
                            && events.send(ev).is_err()
                        {
                            break;
                        }
                    }
                })?
        };
        let workers = self.workers;
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = mpsc::channel::<Job>();
            let shared = shared.clone();
            let events = events.clone();
            let wtx = wtx.clone();
            let backlog = backlog.clone();
            let jtx = jtx.clone();
            let mut verifier = PieceVerifier::new(geo, digests.clone());
            let h = thread::Builder::new()
                .name(format!("weir-hash-{w}"))
                .spawn(move || {
                    for job in rx {
                        let ev = match job {
                            Job::Op(op) => {
                                execute(&shared, &mut verifier, &wtx, jtx.as_ref(), &backlog, op)
                            }
                            Job::Resume { piece, len } => {
                                let data = shared
                                    .files
                                    .read(geo.piece_offset(piece), len as usize)
                                    .ok();
                                verifier.resume(piece, data.as_deref(), len);
                                None
                            }
                        };
                        if let Some(ev) = ev
                            && events.send(ev).is_err()
                        {
                            break;
                        }
                    }
                })?;
            senders.push(tx);
            handles.push(h);
        }
        let s = DiskStorage {
            senders,
            handles,
            writer: Some(writer),
            journal,
            backlog,
            shared,
            lock: self.lock,
        };
        for &(piece, len) in resumed.iter().filter(|r| r.1 > 0) {
            let n = s.senders.len() as u64;
            let _ = s.senders[(u64::from(piece) % n) as usize].send(Job::Resume { piece, len });
        }
        Ok(s)
    }
}

impl DiskStorage {
    /// Bytes handed to [`DiskStorage::submit`] for writing that are not
    /// written yet (waiting for hashing, for the writer, or for space). A
    /// driver whose network outruns hashing and writing (eD2k's MD4 and
    /// AICH on two cores) stops reading its sockets while this is high, so
    /// memory stays bounded and TCP slows the sender.
    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Relaxed)
    }

    /// `Some(free bytes)` while writing waits for the disk to have space.
    pub fn disk_full(&self) -> Option<u64> {
        match self.shared.full.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n - 1),
        }
    }

    /// Hashes `len` stored bytes at transfer offset `offset` against
    /// `digest` on a blocking thread and calls `done` with the verdict (a
    /// read that fails is a mismatch). For a secondary scheme's unit, e.g.
    /// the eD2k part of a torrent's file; `len` is bounded by the caller
    /// (one unit).
    pub fn check_range(
        &self,
        offset: u64,
        len: u64,
        digest: weir_core::storage::Digest,
        done: impl FnOnce(bool) + Send + 'static,
    ) {
        let files = self.shared.files.clone();
        std::thread::spawn(move || {
            let ok = usize::try_from(len)
                .ok()
                .and_then(|n| files.read(offset, n).ok())
                .is_some_and(|data| digest.matches(&data));
            done(ok);
        });
    }

    /// Queues an operation. Never blocks.
    pub fn submit(&self, op: StorageOp) {
        let n = self.senders.len() as u64;
        // Every operation on a piece goes to one worker, in order: writes
        // must (the piece is hashed as written), and reads then come back
        // in the order they were asked, so a peer receives each piece's
        // blocks in order and can store it as it arrives.
        let w = match &op {
            StorageOp::Write { piece, .. }
            | StorageOp::Abandon { piece }
            | StorageOp::Check { piece }
            | StorageOp::Read { piece, .. } => u64::from(*piece) % n,
        };
        self.backlog.fetch_add(write_len(&op), Ordering::Relaxed);
        // A closed worker means the transfer is shutting down.
        let _ = self.senders[w as usize].send(Job::Op(op));
    }

    /// Stops the workers after they finish what is queued (writes waiting
    /// for space are dropped: their pieces were never verified), makes the
    /// journal durable, and releases the download's lock.
    pub fn close(mut self) {
        drop(std::mem::take(&mut self.senders));
        {
            let (m, cv) = &self.shared.closing;
            *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cv.notify_all();
        }
        for h in std::mem::take(&mut self.handles) {
            let _ = h.join();
        }
        // The hashers held the writer's senders: it ends once they are gone.
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        if let Some(j) = self.journal.take() {
            let _ = j.join();
        }
        drop(self.lock.take());
    }
}

/// The data bytes an operation carries (0 but for a write).
fn write_len(op: &StorageOp) -> u64 {
    match op {
        StorageOp::Write { data, .. } => data.iter().map(|d| d.len() as u64).sum(),
        _ => 0,
    }
}

fn write_job(
    shared: &Shared,
    hints: Option<&Journal>,
    journal: Option<&mpsc::Sender<Note>>,
    job: WriteJob,
) -> Option<StorageEvent> {
    let mut waited = false;
    loop {
        match shared.files.write(job.offset, &job.data) {
            Ok(()) => break,
            Err(WriteError::Full { .. }) => {
                if !waited {
                    waited = true;
                    let free = space::free_bytes(shared.files.dir().fd()).unwrap_or(0);
                    if shared.full.swap(free + 1, Ordering::Relaxed) == 0 {
                        tracing::warn!(
                            "disk full: {} free at {}; waiting for space",
                            error::human(free),
                            shared.files.dir().path().display()
                        );
                    }
                }
                if shared.wait_unless_closing(space::RETRY) {
                    return None;
                }
            }
            Err(e) => {
                return Some(StorageEvent::Failed {
                    error: format!("write: {e}"),
                });
            }
        }
    }
    if shared.full.swap(0, Ordering::Relaxed) != 0 {
        tracing::warn!(
            "space available again at {}; writing resumed",
            shared.files.dir().path().display()
        );
    }
    if let Some(h) = hints {
        // A piece that failed holds nothing worth hashing again.
        h.hint(&Record::Written {
            piece: job.piece,
            end: if job.verdict == Some(false) {
                0
            } else {
                job.end
            },
        });
    }
    if job.verdict == Some(true)
        && let Some(j) = journal
    {
        let _ = j.send(Note::Written { piece: job.piece });
    }
    let ok = job.verdict?;
    if ok {
        // Readable again (fetched anew after it was lost).
        shared
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&job.piece);
    }
    Some(StorageEvent::PieceDone {
        piece: job.piece,
        ok,
    })
}

fn execute(
    shared: &Shared,
    verifier: &mut PieceVerifier,
    writer: &mpsc::Sender<WriteJob>,
    journal: Option<&mpsc::Sender<Note>>,
    backlog: &AtomicU64,
    op: StorageOp,
) -> Option<StorageEvent> {
    let geo = &shared.geo;
    match op {
        StorageOp::Write { piece, begin, data } => {
            let offset = geo.piece_offset(piece) + u64::from(begin);
            let len: u64 = data.iter().map(|d| d.len() as u64).sum();
            match verifier.write(piece, begin, &data) {
                Ok(verdict) => {
                    let job = WriteJob {
                        piece,
                        offset,
                        end: begin + len as u32,
                        data,
                        verdict,
                    };
                    // The writer only stops when storage is closing.
                    let _ = writer.send(job);
                    None
                }
                Err(e) => {
                    backlog.fetch_sub(len, Ordering::Relaxed);
                    Some(StorageEvent::Failed {
                        error: e.to_string(),
                    })
                }
            }
        }
        StorageOp::Abandon { piece } => {
            verifier.abandon(piece);
            None
        }
        StorageOp::Read {
            id,
            piece,
            begin,
            len,
        } => {
            let offset = geo.piece_offset(piece) + u64::from(begin);
            match shared.files.read(offset, len as usize) {
                Ok(d) => Some(StorageEvent::ReadDone { id, data: Ok(d) }),
                Err(e) => {
                    let lost = shared.files.lost_by(&e, piece, geo);
                    let fresh: Vec<u32> = {
                        let mut seen = shared.lost.lock().unwrap_or_else(|p| p.into_inner());
                        lost.iter().copied().filter(|p| seen.insert(*p)).collect()
                    };
                    if !fresh.is_empty() {
                        tracing::warn!(
                            "{}: {} piece{} no longer readable ({}); not offered any more",
                            shared.files.dir().path().display(),
                            fresh.len(),
                            if fresh.len() == 1 { "" } else { "s" },
                            e.fault
                        );
                        if let Some(j) = journal {
                            let _ = j.send(Note::Lost(fresh));
                        }
                    }
                    Some(StorageEvent::ReadFailed {
                        id,
                        lost,
                        fault: e.fault,
                    })
                }
            }
        }
        StorageOp::Check { piece } => {
            let ok = shared
                .files
                .read(geo.piece_offset(piece), geo.piece_size(piece) as usize)
                .map(|d| verifier.check(piece, &d))
                .unwrap_or(false);
            if ok && let Some(j) = journal {
                let _ = j.send(Note::Checked { piece });
            }
            Some(StorageEvent::PieceDone { piece, ok })
        }
    }
}

#[cfg(test)]
mod tests;
