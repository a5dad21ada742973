//! Files on disk under the storage contract of `weir_core::storage`.
//!
//! A transfer's storage is opened with [`open`] (protocol-neutral: a
//! layout of files under a download directory, the pieces' digests, a
//! resume journal), which decides what is had, what must be hashed again
//! and which files weir may not touch; [`Opened::start`] then gives a
//! [`DiskStorage`], which executes a protocol core's [`StorageOp`]s on the
//! process's one disk pool ([`pool`]), so hashing and disk I/O never run on
//! a network task and threads do not grow with the number of transfers.
//!
//! - Paths: every file, folder and journal is opened from the download
//!   directory's descriptor one component at a time without following
//!   links ([`dir`]); nothing outside the directory is ever touched.
//! - Workers: each piece of a transfer is routed to one of the pool's
//!   hashing workers, which hashes its data in order as it arrives
//!   ([`PieceVerifier`]) and passes it on to the one writer thread;
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
//! - A full disk pauses that transfer's writing (the data waits in
//!   memory, and the backlog bound stops the network; other transfers keep
//!   writing): the writer retries every [`space::RETRY`] and says so once
//!   in each direction.
//! - A failed upload read (EIO, a truncated file) is reported as
//!   [`StorageEvent::ReadFailed`] with the pieces it destroyed: the core
//!   stops offering them instead of the whole transfer failing.

mod dir;
mod error;
mod fdcache;
mod files;
mod journal;
mod lock;
#[cfg(target_os = "linux")]
mod mapped;
mod open;
mod pool;
mod space;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use tokio::sync::mpsc::UnboundedSender;
use weir_core::geometry::Geometry;
use weir_core::storage::{Digests, PieceVerifier, StorageEvent, StorageOp};

pub use error::OpenError;
pub use open::{DeriveDigests, OpenOptions, Opened, TransferSpec, open};
pub use pool::{Closing, hash_threads};
pub use weir_core::resume::Mode;

use files::{Files, WriteError};
use journal::{Journal, Note};
use pool::{Ctx, DiskPool, Job, JournalMsg, WriteJob};
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
pub const BACKLOG_LIMIT: u64 = 16 << 20;

/// A transfer's files, served by the process's disk pool ([`pool`]).
pub struct DiskStorage {
    pool: Arc<DiskPool>,
    ctx: Arc<Ctx>,
    lock: Option<lock::DownloadLock>,
    closed: bool,
}

impl std::fmt::Debug for DiskStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStorage")
            .field("id", &self.ctx.id)
            .field("backlog", &self.backlog())
            .finish()
    }
}

/// What a group of transfers (an engine's) submitted for writing and has
/// not written yet, kept as they submit and write: a driver checks it on
/// each turn of its loop in one load (it summed its transfers'
/// [`DiskStorage::backlog`], and a daemon with 1,000 idle torrents read
/// 1,000 counters for each batch of messages). Join a transfer to a group
/// with [`Opened::in_group`]; alone it has a group of its own.
#[derive(Clone, Debug, Default)]
pub struct Backlog(Arc<GroupBacklog>);

#[derive(Debug, Default)]
struct GroupBacklog {
    bytes: AtomicU64,
    /// Told when the count falls from above [`BACKLOG_LIMIT`] to it or
    /// below.
    drained: tokio::sync::Notify,
}

impl Backlog {
    /// Bytes the group's transfers submitted and have not written.
    pub fn get(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Returns once the count has fallen from above [`BACKLOG_LIMIT`] to it
    /// or below (at once if it did since the last wait): a driver that
    /// stopped reading its connections at the limit reads again the moment
    /// the writers catch up. Only a write that completes a piece reported
    /// anything, so a backlog drained by other writes was noticed at the
    /// driver's next timer or report tick (up to 250 ms later).
    pub async fn drained(&self) {
        self.0.drained.notified().await;
    }

    fn add(&self, n: u64) {
        self.0.bytes.fetch_add(n, Ordering::Relaxed);
    }

    fn sub(&self, n: u64) {
        let before = self.0.bytes.fetch_sub(n, Ordering::Relaxed);
        if before > BACKLOG_LIMIT && before.saturating_sub(n) <= BACKLOG_LIMIT {
            self.0.drained.notify_one();
        }
    }
}

/// Transfers of this process whose writes wait for disk space now: while
/// none does, a driver need not ask each transfer ([`transfers_waiting_for_space`]).
static WAITING_FOR_SPACE: AtomicUsize = AtomicUsize::new(0);

/// How many transfers of this process wait for disk space now (0: every
/// [`DiskStorage::disk_full`] is `None`).
pub fn transfers_waiting_for_space() -> usize {
    WAITING_FOR_SPACE.load(Ordering::Relaxed)
}

/// State the threads share.
#[derive(Debug)]
struct Shared {
    files: Arc<Files>,
    geo: Geometry,
    /// Free bytes + 1 while the writer waits for space, 0 otherwise.
    full: AtomicU64,
    /// Pieces already reported lost (each is logged once).
    lost: Mutex<std::collections::BTreeSet<u32>>,
}

impl Drop for Shared {
    /// A transfer closed while it waited for space waits no more.
    fn drop(&mut self) {
        if *self.full.get_mut() != 0 {
            WAITING_FOR_SPACE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Where a transfer's storage events go (from the pool's threads): a
/// channel of its own, or one channel shared by every transfer of an
/// engine with each event tagged ([`Events::tagged`]). The shared form
/// costs a transfer no task and no channel buffer of its own: a daemon
/// holding 10,000 idle torrents kept a forwarding task and a 32-slot
/// channel block (about 3.4 KB) for each.
pub struct Events(Box<dyn Fn(StorageEvent) + Send + Sync>);

impl Events {
    /// Events sent to `tx` as `(key, event)`. An event sent after the
    /// receiver is gone is dropped (the engine is closing).
    pub fn tagged<K: Copy + Send + Sync + 'static>(
        tx: UnboundedSender<(K, StorageEvent)>,
        key: K,
    ) -> Self {
        Events(Box::new(move |ev| {
            let _ = tx.send((key, ev));
        }))
    }
}

impl From<UnboundedSender<StorageEvent>> for Events {
    /// Events sent to a channel of the transfer's own.
    fn from(tx: UnboundedSender<StorageEvent>) -> Self {
        Events(Box::new(move |ev| {
            let _ = tx.send(ev);
        }))
    }
}

impl Opened {
    /// Hands the transfer to the process's disk pool: `digests` (all
    /// pieces) verify what is written; events go to `events`. `resumed`
    /// are the partly written pieces the core continues, `(piece, bytes)`
    /// as it accepted them (at most what [`Opened::partial`] offered):
    /// their stored start is fed to the verifiers before any write. The
    /// pool's threads start with the first transfer (an error only then).
    pub fn start(
        self,
        digests: Digests,
        resumed: &[(u32, u32)],
        events: impl Into<Events>,
    ) -> std::io::Result<DiskStorage> {
        self.park(digests).start_resuming(resumed, events.into())
    }

    /// Keeps what starting needs, and only that (see [`Parked`]): the
    /// pieces had, to check and partly written are the core's now.
    pub fn park(self, digests: Digests) -> Parked {
        Parked {
            files: self.files,
            geometry: self.geometry,
            digests,
            journal: self.journal,
            lock: self.lock,
            group: self.group,
        }
    }
}

/// A transfer's storage opened (its lock held, its journal read) and not
/// yet on the disk pool: what a transfer that has read and written
/// nothing since it opened costs, until [`Parked::start`] at its first
/// operation. A daemon's idle torrent kept a running storage's context,
/// journal, journal appender and event sink (~400 bytes in four
/// allocations) for no work at all; parked it keeps one of ~120 bytes.
/// Only a transfer that continues no partly written piece parks: one that
/// does has its stored starts to hash at once.
pub struct Parked {
    files: Arc<Files>,
    geometry: Geometry,
    digests: Digests,
    journal: Option<Arc<str>>,
    lock: Option<lock::DownloadLock>,
    group: Backlog,
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked")
            .field("dir", &self.files.dir().path())
            .finish_non_exhaustive()
    }
}

impl Parked {
    /// Hands the transfer to the process's disk pool, as [`Opened::start`]
    /// with no partly written piece to continue.
    pub fn start(self, events: impl Into<Events>) -> std::io::Result<DiskStorage> {
        self.start_resuming(&[], events.into())
    }

    fn start_resuming(
        self,
        resumed: &[(u32, u32)],
        events: Events,
    ) -> std::io::Result<DiskStorage> {
        let pool = DiskPool::get()?;
        let geo = self.geometry;
        let shared = Shared {
            files: self.files.clone(),
            geo,
            full: AtomicU64::new(0),
            lost: Mutex::new(Default::default()),
        };
        let id = pool.next_id();
        let hints = self.journal.map(|stem| {
            let j = Arc::new(Journal::new(self.files.dir().clone(), stem));
            let app = journal::Appender::new(j.clone(), self.files.clone(), geo);
            pool.journal(JournalMsg::Open(id, Box::new(app)));
            j
        });
        let ctx = Arc::new(Ctx {
            id,
            shared,
            digests: self.digests,
            events,
            backlog: AtomicU64::new(0),
            group: self.group,
            hints,
        });
        for &(piece, len) in resumed.iter().filter(|r| r.1 > 0) {
            pool.send(
                pool.worker_of(id, piece),
                Job::Resume {
                    ctx: ctx.clone(),
                    piece,
                    len,
                },
            );
        }
        Ok(DiskStorage {
            pool,
            ctx,
            lock: self.lock,
            closed: false,
        })
    }
}

impl DiskStorage {
    /// Bytes handed to [`DiskStorage::submit`] for writing that are not
    /// written yet (waiting for hashing, for the writer, or for space). A
    /// driver whose network outruns hashing and writing (eD2k's MD4 and
    /// AICH on two cores) stops reading its sockets while this is high, so
    /// memory stays bounded and TCP slows the sender.
    pub fn backlog(&self) -> u64 {
        self.ctx.backlog.load(Ordering::Relaxed)
    }

    /// `Some(free bytes)` while writing waits for the disk to have space.
    pub fn disk_full(&self) -> Option<u64> {
        match self.ctx.shared.full.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n - 1),
        }
    }

    /// Hashes `len` stored bytes at transfer offset `offset` against
    /// `digest` on a pool worker and calls `done` there with the verdict
    /// (a read that fails is a mismatch). For a secondary scheme's unit,
    /// e.g. the eD2k part of a torrent's file; `len` is bounded by the
    /// caller (one unit).
    pub fn check_range(
        &self,
        offset: u64,
        len: u64,
        digest: weir_core::storage::Digest,
        done: impl FnOnce(bool) + Send + 'static,
    ) {
        let w = self.pool.worker_of(self.ctx.id, (offset >> 20) as u32);
        self.pool.send(
            w,
            Job::CheckRange {
                ctx: self.ctx.clone(),
                offset,
                len,
                digest,
                done: Box::new(done),
            },
        );
    }

    /// Queues an operation. Never blocks.
    pub fn submit(&self, op: StorageOp) {
        // Every operation on a piece goes to one worker, in order: writes
        // must (the piece is hashed as written), and reads then come back
        // in the order they were asked, so a peer receives each piece's
        // blocks in order and can store it as it arrives.
        let piece = match &op {
            StorageOp::Write { piece, .. }
            | StorageOp::Abandon { piece }
            | StorageOp::Check { piece }
            | StorageOp::Read { piece, .. } => *piece,
        };
        self.ctx.add_backlog(write_len(&op));
        self.pool.send(
            self.pool.worker_of(self.ctx.id, piece),
            Job::Op(self.ctx.clone(), op),
        );
    }

    /// Starts closing: what is queued is finished (writes waiting for
    /// space are dropped: their pieces were never verified), then the
    /// journal is made durable; [`Closing::wait`] waits for that and
    /// releases the download's lock. Many transfers closing at once (a
    /// session shutting down) begin all their closes before waiting.
    pub fn begin_close(mut self) -> Closing {
        self.closed = true;
        Closing {
            done: Some(self.send_close()),
            lock: self.lock.take(),
        }
    }

    /// Closes and waits ([`DiskStorage::begin_close`]).
    pub fn close(self) {
        self.begin_close().wait();
    }

    fn send_close(&self) -> Arc<pool::Done> {
        let done = Arc::new(pool::Done::default());
        for w in 0..self.pool.width() {
            self.pool
                .send(w, Job::Close(self.ctx.clone(), done.clone()));
        }
        done
    }
}

impl Drop for DiskStorage {
    /// A storage dropped without a close still finishes its queued work
    /// and leaves its journal durable (nobody waits for it).
    fn drop(&mut self) {
        if !self.closed {
            self.closed = true;
            let _ = self.send_close();
        }
    }
}

/// The data bytes an operation carries (0 but for a write).
fn write_len(op: &StorageOp) -> u64 {
    match op {
        StorageOp::Write { data, .. } => data.iter().map(|d| d.len() as u64).sum(),
        _ => 0,
    }
}

/// Writes one hashed job; gives it back when the disk is full (the writer
/// parks it and tries again: [`pool`]).
fn write_job(
    ctx: &Ctx,
    journal: &mpsc::Sender<JournalMsg>,
    job: WriteJob,
) -> Result<Option<StorageEvent>, WriteJob> {
    let shared = &ctx.shared;
    match shared.files.write(job.offset, &job.data) {
        Ok(()) => {}
        Err(WriteError::Full { .. }) => {
            let free = space::free_bytes(shared.files.dir().fd()).unwrap_or(0);
            if shared.full.swap(free + 1, Ordering::Relaxed) == 0 {
                WAITING_FOR_SPACE.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "disk full: {} free at {}; waiting for space",
                    error::human(free),
                    shared.files.dir().path().display()
                );
            }
            return Err(job);
        }
        Err(e) => {
            return Ok(Some(StorageEvent::Failed {
                error: format!("write: {e}"),
            }));
        }
    }
    if shared.full.swap(0, Ordering::Relaxed) != 0 {
        WAITING_FOR_SPACE.fetch_sub(1, Ordering::Relaxed);
        tracing::warn!(
            "space available again at {}; writing resumed",
            shared.files.dir().path().display()
        );
    }
    if let Some(h) = &ctx.hints {
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
    if job.verdict == Some(true) && ctx.hints.is_some() {
        let _ = journal.send(JournalMsg::Note(ctx.id, Note::Written { piece: job.piece }));
    }
    let Some(ok) = job.verdict else {
        return Ok(None);
    };
    if ok {
        // Readable again (fetched anew after it was lost).
        shared
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&job.piece);
    }
    Ok(Some(StorageEvent::PieceDone {
        piece: job.piece,
        ok,
    }))
}

fn execute(
    ctx: &Arc<Ctx>,
    verifier: &mut PieceVerifier,
    writer: &mpsc::Sender<pool::WriteMsg>,
    journal: &mpsc::Sender<JournalMsg>,
    op: StorageOp,
) -> Option<StorageEvent> {
    let shared = &ctx.shared;
    let geo = &shared.geo;
    let note = |n: Note| {
        if ctx.hints.is_some() {
            let _ = journal.send(JournalMsg::Note(ctx.id, n));
        }
    };
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
                    pool::to_writer(writer, ctx, job);
                    None
                }
                Err(e) => {
                    ctx.sub_backlog(len);
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
                        note(Note::Lost(fresh));
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
            if ok {
                note(Note::Checked { piece });
            }
            Some(StorageEvent::PieceDone { piece, ok })
        }
    }
}

#[cfg(test)]
mod tests;
