//! The process's one disk pool: hash workers, one writer thread and one
//! journal thread shared by every transfer's [`DiskStorage`].
//!
//! Before it each transfer started its own two hash workers, writer and
//! journal thread, so a session seeding 1,000 torrents held 4,000 threads
//! (`weir bench many`). Now the threads are started once, on first use,
//! and live as long as the process; a transfer is a [`Ctx`] its jobs
//! carry.
//!
//! - Hash workers: `available_parallelism` of them (2 to 8). A transfer's
//!   piece always goes to the same worker (`(piece + transfer) mod n`), so
//!   its writes are hashed in order and its reads answered in order, as
//!   before; each worker keeps its own verifier per transfer (no lock).
//! - One writer thread, as before (buffered writes to one file serialize on
//!   its inode lock anyway). A transfer whose disk is full does not hold
//!   it: its writes are parked, in order, and tried again every second
//!   while other transfers (on other disks) keep writing.
//! - One journal thread holds each transfer's [`Appender`], flushing each on
//!   its own deadline.
//! - Closing a transfer sends a marker down the same channels behind its
//!   jobs: once every worker's marker has passed the writer and the journal
//!   thread has made the journal durable, [`Closing::wait`] returns. Nothing
//!   of a transfer is ever dropped from a queue.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Instant;

use weir_core::storage::{Digest, Digests, PieceVerifier, StorageEvent, StorageOp};

use super::Shared;
use super::journal::{Appender, Journal, Note};

/// One transfer as the pool's threads see it.
pub(super) struct Ctx {
    /// Unique in the process (routing and the threads' per-transfer state).
    pub(super) id: u64,
    /// Inline: only the context holds it (one allocation a transfer less).
    pub(super) shared: Shared,
    pub(super) digests: Digests,
    pub(super) events: super::Events,
    /// Bytes submitted for writing and not yet written.
    pub(super) backlog: AtomicU64,
    /// The same, summed over the transfer's group (see
    /// [`super::Backlog`]).
    pub(super) group: super::Backlog,
    /// Where the writer appends its hints (none without a journal).
    pub(super) hints: Option<Arc<Journal>>,
}

impl Ctx {
    /// `n` more bytes to write.
    pub(super) fn add_backlog(&self, n: u64) {
        self.backlog.fetch_add(n, Ordering::Relaxed);
        self.group.add(n);
    }

    /// `n` bytes written (or dropped).
    pub(super) fn sub_backlog(&self, n: u64) {
        self.backlog.fetch_sub(n, Ordering::Relaxed);
        self.group.sub(n);
    }

    /// Reports `ev` (a transfer whose receiver is gone is closing).
    fn emit(&self, ev: Option<StorageEvent>) {
        if let Some(ev) = ev {
            (self.events.0)(ev);
        }
    }
}

/// What a hashing worker does.
pub(super) enum Job {
    Op(Arc<Ctx>, StorageOp),
    /// Feed the stored first `len` bytes of `piece` to the verifier.
    Resume {
        ctx: Arc<Ctx>,
        piece: u32,
        len: u32,
    },
    /// Hash a stored range against a digest of another scheme.
    CheckRange {
        ctx: Arc<Ctx>,
        offset: u64,
        len: u64,
        digest: Digest,
        done: Box<dyn FnOnce(bool) + Send>,
    },
    /// Everything of this transfer queued before has been handled.
    Close(Arc<Ctx>, Arc<Done>),
}

/// Hashed data on its way to the writer thread.
pub(super) struct WriteJob {
    pub(super) piece: u32,
    pub(super) offset: u64,
    /// Offset in the piece where the data ends.
    pub(super) end: u32,
    pub(super) data: Vec<bytes::Bytes>,
    /// The piece's verdict, when this run completed it.
    pub(super) verdict: Option<bool>,
}

pub(super) enum WriteMsg {
    Job(Arc<Ctx>, WriteJob),
    /// One worker's close marker for the transfer.
    Close(Arc<Ctx>, Arc<Done>),
}

/// What the journal thread is told.
pub(super) enum JournalMsg {
    /// Boxed: the journal thread's table holds one per open transfer, most
    /// of them idle, and a table of boxes is 16 bytes a slot, not ~150.
    Open(u64, Box<Appender>),
    Note(u64, Note),
    /// Flush durably and forget the transfer, then signal.
    Close(u64, Arc<Done>),
}

/// A transfer's close, signalled once its last stage is through.
#[derive(Default)]
pub(super) struct Done {
    flag: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Done {
    fn set(&self) {
        *self.flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut g = self.flag.lock().unwrap_or_else(|p| p.into_inner());
        while !*g {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A close under way ([`super::DiskStorage::begin_close`]).
#[must_use = "wait for the close, or the journal may not be durable yet"]
pub struct Closing {
    pub(super) done: Option<Arc<Done>>,
    pub(super) lock: Option<super::lock::DownloadLock>,
}

impl Closing {
    /// Blocks until the transfer's queued work is done and its journal is
    /// durable, then releases the download's lock.
    pub fn wait(mut self) {
        if let Some(d) = self.done.take() {
            d.wait();
        }
        drop(self.lock.take());
    }
}

/// The threads and their queues.
pub(super) struct DiskPool {
    workers: Vec<Mutex<mpsc::Sender<Job>>>,
    journal: Mutex<mpsc::Sender<JournalMsg>>,
    next_id: AtomicU64,
}

static POOL: Mutex<Option<Arc<DiskPool>>> = Mutex::new(None);

impl DiskPool {
    /// The process's pool, started on first use.
    pub(super) fn get() -> std::io::Result<Arc<DiskPool>> {
        let mut g = POOL.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = &*g {
            return Ok(p.clone());
        }
        let p = Arc::new(Self::start(hash_threads())?);
        *g = Some(p.clone());
        Ok(p)
    }

    fn start(n: usize) -> std::io::Result<Self> {
        let (jtx, jrx) = mpsc::channel::<JournalMsg>();
        thread::Builder::new()
            .name("weir-journal".into())
            .spawn(move || journal_thread(jrx))?;
        let (wtx, wrx) = mpsc::channel::<WriteMsg>();
        {
            let jtx = jtx.clone();
            thread::Builder::new()
                .name("weir-write".into())
                .spawn(move || writer_thread(wrx, jtx, n))?;
        }
        let mut workers = Vec::with_capacity(n);
        for w in 0..n {
            let (tx, rx) = mpsc::channel::<Job>();
            let wtx = wtx.clone();
            let jtx = jtx.clone();
            thread::Builder::new()
                .name(format!("weir-hash-{w}"))
                .spawn(move || hash_thread(rx, wtx, jtx))?;
            workers.push(Mutex::new(tx));
        }
        Ok(Self {
            workers,
            journal: Mutex::new(jtx),
            next_id: AtomicU64::new(0),
        })
    }

    /// A fresh transfer id.
    pub(super) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The number of hash workers.
    pub(super) fn width(&self) -> usize {
        self.workers.len()
    }

    /// Queues `job` on worker `w`.
    pub(super) fn send(&self, w: usize, job: Job) {
        let tx = self.workers[w % self.workers.len()]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // The threads never end while the process runs.
        let _ = tx.send(job);
    }

    /// Tells the journal thread.
    pub(super) fn journal(&self, m: JournalMsg) {
        let tx = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let _ = tx.send(m);
    }

    /// The worker that handles `piece` of transfer `id`.
    pub(super) fn worker_of(&self, id: u64, piece: u32) -> usize {
        ((u64::from(piece) + id) % self.workers.len() as u64) as usize
    }
}

fn hash_thread(
    rx: mpsc::Receiver<Job>,
    writer: mpsc::Sender<WriteMsg>,
    jtx: mpsc::Sender<JournalMsg>,
) {
    let mut verifiers: HashMap<u64, PieceVerifier> = HashMap::new();
    for job in rx {
        match job {
            Job::Op(ctx, op) => {
                let v = verifiers
                    .entry(ctx.id)
                    .or_insert_with(|| PieceVerifier::new(ctx.shared.geo, ctx.digests.clone()));
                let ev = super::execute(&ctx, v, &writer, &jtx, op);
                ctx.emit(ev);
            }
            Job::Resume { ctx, piece, len } => {
                let v = verifiers
                    .entry(ctx.id)
                    .or_insert_with(|| PieceVerifier::new(ctx.shared.geo, ctx.digests.clone()));
                let data = ctx
                    .shared
                    .files
                    .read(ctx.shared.geo.piece_offset(piece), len as usize)
                    .ok();
                v.resume(piece, data.as_deref(), len);
            }
            Job::CheckRange {
                ctx,
                offset,
                len,
                digest,
                done,
            } => {
                let ok = usize::try_from(len)
                    .ok()
                    .and_then(|n| ctx.shared.files.read(offset, n).ok())
                    .is_some_and(|data| digest.matches(&data));
                done(ok);
            }
            Job::Close(ctx, done) => {
                verifiers.remove(&ctx.id);
                let _ = writer.send(WriteMsg::Close(ctx, done));
            }
        }
    }
}

/// Sends what a write job leads to: the writer wraps it with its transfer.
pub(super) fn to_writer(writer: &mpsc::Sender<WriteMsg>, ctx: &Arc<Ctx>, job: WriteJob) {
    let _ = writer.send(WriteMsg::Job(ctx.clone(), job));
}

fn writer_thread(rx: mpsc::Receiver<WriteMsg>, jtx: mpsc::Sender<JournalMsg>, width: usize) {
    // Close markers seen per transfer (one comes from every worker).
    let mut markers: BTreeMap<u64, usize> = BTreeMap::new();
    // Transfers whose disk is full: their writes wait here, in order, and
    // are tried again every `space::RETRY`, while other transfers write.
    let mut parked: BTreeMap<u64, (Arc<Ctx>, VecDeque<WriteJob>)> = BTreeMap::new();
    let mut retry_at = Instant::now();
    loop {
        let msg = if parked.is_empty() {
            rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(retry_at.saturating_duration_since(Instant::now()))
        };
        match msg {
            Ok(WriteMsg::Job(ctx, job)) => match parked.get_mut(&ctx.id) {
                Some((_, q)) => q.push_back(job),
                None => {
                    if let Err(job) = write_one(&ctx, &jtx, job) {
                        if parked.is_empty() {
                            retry_at = Instant::now() + super::space::RETRY;
                        }
                        parked.insert(ctx.id, (ctx, VecDeque::from([job])));
                    }
                }
            },
            Ok(WriteMsg::Close(ctx, done)) => {
                let seen = markers.entry(ctx.id).or_insert(0);
                *seen += 1;
                if *seen < width {
                    continue;
                }
                markers.remove(&ctx.id);
                // Writes still waiting for space are dropped: their pieces
                // were never verified.
                if let Some((_, q)) = parked.remove(&ctx.id) {
                    let len: u64 = q.iter().flat_map(|j| &j.data).map(|d| d.len() as u64).sum();
                    ctx.sub_backlog(len);
                }
                if ctx.hints.is_some() {
                    let _ = jtx.send(JournalMsg::Close(ctx.id, done));
                } else {
                    done.set();
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if !parked.is_empty() && Instant::now() >= retry_at {
            parked.retain(|_, (ctx, q)| {
                while let Some(job) = q.pop_front() {
                    if let Err(job) = write_one(ctx, &jtx, job) {
                        q.push_front(job);
                        return true;
                    }
                }
                false
            });
            retry_at = Instant::now() + super::space::RETRY;
        }
    }
}

/// Writes `job` and reports it; gives it back when the disk is full.
fn write_one(ctx: &Ctx, jtx: &mpsc::Sender<JournalMsg>, job: WriteJob) -> Result<(), WriteJob> {
    let len = job.data.iter().map(|d| d.len() as u64).sum();
    let ev = super::write_job(ctx, jtx, job)?;
    ctx.sub_backlog(len);
    ctx.emit(ev);
    Ok(())
}

fn journal_thread(rx: mpsc::Receiver<JournalMsg>) {
    let mut open: HashMap<u64, Box<Appender>> = HashMap::new();
    // Transfers with verified pieces waiting, by their flush deadline.
    let mut due: BTreeMap<(Instant, u64), ()> = BTreeMap::new();
    loop {
        let msg = match due.keys().next() {
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(&(t, _)) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
        };
        match msg {
            Ok(JournalMsg::Open(id, a)) => {
                open.insert(id, a);
            }
            Ok(JournalMsg::Note(id, n)) => {
                if let Some(a) = open.get_mut(&id) {
                    let before = a.deadline();
                    a.handle(n);
                    let after = a.deadline();
                    if before != after {
                        if let Some(t) = before {
                            due.remove(&(t, id));
                        }
                        if let Some(t) = after {
                            due.insert((t, id), ());
                        }
                    }
                }
            }
            Ok(JournalMsg::Close(id, done)) => {
                if let Some(a) = open.remove(&id) {
                    if let Some(t) = a.deadline() {
                        due.remove(&(t, id));
                    }
                    a.close();
                }
                done.set();
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                while let Some((&(t, id), _)) = due.first_key_value() {
                    if t > now {
                        break;
                    }
                    due.remove(&(t, id));
                    if let Some(a) = open.get_mut(&id) {
                        a.flush_now();
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for (_, a) in open {
        a.close();
    }
}

/// How many threads hash: one per core the process may use, 2 to 8 (the
/// pool's hash workers, and a recheck's while a transfer opens).
/// Asked once: the standard library reads the cgroup's files for it, and a
/// daemon opens a storage for every torrent added.
pub fn hash_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(2, 8)
    })
}
