//! Files on disk under the storage contract of `weir_core::storage`.
//!
//! [`DiskStorage`] executes a protocol core's [`StorageOp`]s on dedicated
//! threads, so hashing and disk I/O never run on a network task. Each piece
//! is routed to one hashing worker (piece index modulo the worker count),
//! which hashes its data in order as it arrives ([`PieceVerifier`]) and
//! passes it on to the one writer thread; nothing is read back to verify a
//! download. One writer, because buffered writes to a file serialize on its
//! inode lock anyway: two writers only spin on it, while hashing runs in
//! parallel with writing. Each run goes out with one `pwritev` per file
//! touched, and a piece's verdict is reported (and journalled) only after
//! its last byte is written.
//!
//! Verified pieces are appended to a small resume journal next to the data
//! (one 4-byte index per piece, written right after the piece's data), so a
//! killed download restarts with every verified piece intact and a complete
//! one starts without re-hashing anything.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::thread;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc::UnboundedSender;
use weir_core::bitfield::Bitfield;
use weir_core::geometry::Geometry;
use weir_core::storage::{Digest, FileLayout, PieceVerifier, StorageEvent, StorageOp};

const JOURNAL_MAGIC: &[u8; 8] = b"weirrsm1";

/// Bytes submitted and not yet written (see [`DiskStorage::backlog`]) above
/// which a driver stops reading its connections' packets: a few pieces or
/// eD2k parts' worth, so memory stays bounded when hashing or the disk is
/// slower than the network.
pub const BACKLOG_LIMIT: u64 = 32 << 20;

/// Where and how a transfer's data is stored.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// Directory the layout's relative paths are under.
    pub root: PathBuf,
    /// The files.
    pub layout: FileLayout,
    /// Pieces and blocks.
    pub geometry: Geometry,
    /// Expected digest of every piece.
    pub digests: Arc<[Digest]>,
    /// The resume journal's path (`None`: no resume).
    pub journal: Option<PathBuf>,
    /// Identifies the transfer in the journal (e.g. the info-hash).
    pub transfer_id: Vec<u8>,
    /// Worker threads (hashing and disk I/O).
    pub workers: usize,
}

/// A transfer's files, served by worker threads.
#[derive(Debug)]
pub struct DiskStorage {
    senders: Vec<mpsc::Sender<StorageOp>>,
    handles: Vec<thread::JoinHandle<()>>,
    writer: Option<thread::JoinHandle<()>>,
    /// Bytes submitted for writing and not yet written.
    backlog: Arc<AtomicU64>,
}

/// Hashed data on its way to the writer thread.
struct WriteJob {
    piece: u32,
    offset: u64,
    data: Vec<Bytes>,
    /// The piece's verdict, when this run completed it.
    verdict: Option<bool>,
}

struct Shared {
    root: PathBuf,
    layout: FileLayout,
    files: Vec<OnceLock<io::Result<File>>>,
    journal: Option<Mutex<File>>,
}

impl Shared {
    fn file(&self, index: usize) -> io::Result<&File> {
        let slot = self.files[index].get_or_init(|| {
            let path = self.root.join(&self.layout.files()[index].path);
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
        });
        slot.as_ref()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))
    }

    fn path(&self, index: usize) -> PathBuf {
        self.root.join(&self.layout.files()[index].path)
    }

    fn write(&self, offset: u64, data: &[Bytes]) -> io::Result<()> {
        let total: u64 = data.iter().map(|d| d.len() as u64).sum();
        // Walk the data chunks alongside the file runs.
        let (mut chunk, mut within) = (0usize, 0usize);
        for (fi, mut foff, len) in self.layout.map(offset, total) {
            let file = self.file(fi)?;
            let mut left = len as usize;
            while left > 0 {
                let mut slices = Vec::with_capacity(64);
                let mut batch = 0usize;
                let (mut c, mut w) = (chunk, within);
                while batch < left && c < data.len() && slices.len() < 512 {
                    let avail = &data[c][w..];
                    let take = avail.len().min(left - batch);
                    slices.push(IoSlice::new(&avail[..take]));
                    batch += take;
                    if take == avail.len() {
                        c += 1;
                        w = 0;
                    } else {
                        w += take;
                    }
                }
                let n = nix::sys::uio::pwritev(file, &slices, foff as i64)
                    .map_err(io::Error::from)
                    .map_err(|e| annotate(e, &self.path(fi)))?;
                if n == 0 {
                    return Err(annotate(io::ErrorKind::WriteZero.into(), &self.path(fi)));
                }
                // Advance by what was written (may be short).
                let mut adv = n;
                while adv > 0 {
                    let rest = data[chunk].len() - within;
                    if adv >= rest {
                        adv -= rest;
                        chunk += 1;
                        within = 0;
                    } else {
                        within += adv;
                        adv = 0;
                    }
                }
                left -= n;
                foff += n as u64;
            }
        }
        Ok(())
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Bytes> {
        let mut buf = BytesMut::zeroed(len);
        let mut at = 0usize;
        for (fi, foff, n) in self.layout.map(offset, len as u64) {
            let n = n as usize;
            let file = self.file(fi)?;
            file.read_exact_at(&mut buf[at..at + n], foff)
                .map_err(|e| annotate(e, &self.path(fi)))?;
            at += n;
        }
        if at != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read past the end of the transfer ({at} of {len} bytes)"),
            ));
        }
        Ok(buf.freeze())
    }

    fn record_verified(&self, piece: u32) {
        if let Some(j) = &self.journal {
            let mut f = j.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = f.write_all(&piece.to_le_bytes()) {
                tracing::warn!("resume journal: {e}");
            }
        }
    }
}

fn annotate(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl DiskStorage {
    /// Creates the directories and files of the layout (sparse, at their
    /// final length; zero-length files exist at once), opens the journal and
    /// starts the workers. Events go to `events`.
    pub fn open(cfg: StorageConfig, events: UnboundedSender<StorageEvent>) -> io::Result<Self> {
        prepare_files(&cfg.root, &cfg.layout)?;
        let journal = match &cfg.journal {
            Some(p) => Some(Mutex::new(open_journal(p, &cfg.transfer_id)?)),
            None => None,
        };
        let shared = Arc::new(Shared {
            files: (0..cfg.layout.files().len())
                .map(|_| OnceLock::new())
                .collect(),
            root: cfg.root.clone(),
            layout: cfg.layout.clone(),
            journal,
        });
        let (wtx, wrx) = mpsc::channel::<WriteJob>();
        let backlog = Arc::new(AtomicU64::new(0));
        let writer = {
            let shared = shared.clone();
            let events = events.clone();
            let backlog = backlog.clone();
            thread::Builder::new()
                .name("weir-write".into())
                .spawn(move || {
                    for job in wrx {
                        let len = job.data.iter().map(|d| d.len() as u64).sum();
                        let ev = write_job(&shared, job);
                        backlog.fetch_sub(len, Ordering::Relaxed);
                        if let Some(ev) = ev
                            && events.send(ev).is_err()
                        {
                            break;
                        }
                    }
                })?
        };
        let workers = cfg.workers.max(1);
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = mpsc::channel::<StorageOp>();
            let shared = shared.clone();
            let events = events.clone();
            let wtx = wtx.clone();
            let backlog = backlog.clone();
            let mut verifier = PieceVerifier::new(cfg.geometry, cfg.digests.clone());
            let geo = cfg.geometry;
            let h = thread::Builder::new()
                .name(format!("weir-hash-{w}"))
                .spawn(move || {
                    for op in rx {
                        if let Some(ev) = execute(&shared, &geo, &mut verifier, &wtx, &backlog, op)
                            && events.send(ev).is_err()
                        {
                            break;
                        }
                    }
                })?;
            senders.push(tx);
            handles.push(h);
        }
        Ok(Self {
            senders,
            handles,
            writer: Some(writer),
            backlog,
        })
    }

    /// Bytes handed to [`DiskStorage::submit`] for writing that are not
    /// written yet (waiting for hashing or for the writer). A driver whose
    /// network outruns hashing and writing (eD2k's MD4 and AICH on two
    /// cores) stops reading its sockets while this is high, so memory stays
    /// bounded and TCP slows the sender.
    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Relaxed)
    }

    /// Queues an operation. Never blocks.
    pub fn submit(&self, op: StorageOp) {
        let n = self.senders.len() as u64;
        let w = match &op {
            StorageOp::Write { piece, .. }
            | StorageOp::Abandon { piece }
            | StorageOp::Check { piece } => u64::from(*piece) % n,
            StorageOp::Read { id, .. } => id % n,
        };
        self.backlog.fetch_add(write_len(&op), Ordering::Relaxed);
        // A closed worker means the transfer is shutting down.
        let _ = self.senders[w as usize].send(op);
    }

    /// Stops the workers after they finish what is queued.
    pub fn close(mut self) {
        drop(std::mem::take(&mut self.senders));
        for h in std::mem::take(&mut self.handles) {
            let _ = h.join();
        }
        // The hashers held the writer's senders: it ends once they are gone.
        if let Some(w) = self.writer.take() {
            let _ = w.join();
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

fn write_job(shared: &Shared, job: WriteJob) -> Option<StorageEvent> {
    if let Err(e) = shared.write(job.offset, &job.data) {
        return Some(StorageEvent::Failed {
            error: format!("write: {e}"),
        });
    }
    let ok = job.verdict?;
    if ok {
        shared.record_verified(job.piece);
    }
    Some(StorageEvent::PieceDone {
        piece: job.piece,
        ok,
    })
}

fn execute(
    shared: &Shared,
    geo: &Geometry,
    verifier: &mut PieceVerifier,
    writer: &mpsc::Sender<WriteJob>,
    backlog: &AtomicU64,
    op: StorageOp,
) -> Option<StorageEvent> {
    match op {
        StorageOp::Write { piece, begin, data } => {
            let offset = geo.piece_offset(piece) + u64::from(begin);
            match verifier.write(piece, begin, &data) {
                Ok(verdict) => {
                    let job = WriteJob {
                        piece,
                        offset,
                        data,
                        verdict,
                    };
                    // The writer only stops when storage is closing.
                    let _ = writer.send(job);
                    None
                }
                Err(e) => {
                    backlog.fetch_sub(data.iter().map(|d| d.len() as u64).sum(), Ordering::Relaxed);
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
            let data = shared.read(offset, len as usize).map_err(|e| e.to_string());
            Some(StorageEvent::ReadDone { id, data })
        }
        StorageOp::Check { piece } => {
            let ok = shared
                .read(geo.piece_offset(piece), geo.piece_size(piece) as usize)
                .map(|d| verifier.check(piece, &d))
                .unwrap_or(false);
            if ok {
                shared.record_verified(piece);
            }
            Some(StorageEvent::PieceDone { piece, ok })
        }
    }
}

/// Creates every directory and file of `layout` under `root`; files shorter
/// than their length are extended (sparse), longer ones are left alone.
pub fn prepare_files(root: &Path, layout: &FileLayout) -> io::Result<()> {
    for f in layout.files() {
        let path = root.join(&f.path);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| annotate(e, dir))?;
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| annotate(e, &path))?;
        let len = file.metadata()?.len();
        if len < f.length {
            file.set_len(f.length).map_err(|e| annotate(e, &path))?;
        }
    }
    Ok(())
}

fn open_journal(path: &Path, id: &[u8]) -> io::Result<File> {
    let mut header = JOURNAL_MAGIC.to_vec();
    header.extend_from_slice(&(id.len() as u32).to_le_bytes());
    header.extend_from_slice(id);
    let existing = fs::read(path).ok();
    let valid = existing.as_ref().is_some_and(|d| d.starts_with(&header));
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    if !valid {
        let mut f = File::create(path).map_err(|e| annotate(e, path))?;
        f.write_all(&header)?;
    }
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| annotate(e, path))
}

/// Reads the resume journal: the pieces verified by an earlier run, if the
/// journal belongs to this transfer and every file is at least as long as
/// the layout says (a shorter file loses the pieces it holds).
pub fn load_resume(
    path: &Path,
    id: &[u8],
    root: &Path,
    layout: &FileLayout,
    geo: &Geometry,
) -> Bitfield {
    let mut had = Bitfield::new(geo.piece_count());
    let mut data = Vec::new();
    let Ok(mut f) = File::open(path) else {
        return had;
    };
    if f.read_to_end(&mut data).is_err() {
        return had;
    }
    let mut header = JOURNAL_MAGIC.to_vec();
    header.extend_from_slice(&(id.len() as u32).to_le_bytes());
    header.extend_from_slice(id);
    let Some(body) = data.strip_prefix(header.as_slice()) else {
        return had;
    };
    for chunk in body.chunks_exact(4) {
        had.set(u32::from_le_bytes(chunk.try_into().expect("4 bytes")));
    }
    for (i, f) in layout.files().iter().enumerate() {
        let len = fs::metadata(root.join(&f.path))
            .map(|m| m.len())
            .unwrap_or(0);
        if len < f.length {
            for p in layout.pieces_of_file(i, geo) {
                had.clear(p);
            }
        }
    }
    had
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha1::{Digest as _, Sha1};

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weir-storage-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn setup(tag: &str) -> (PathBuf, StorageConfig, Vec<u8>) {
        let root = tmpdir(tag);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let layout = FileLayout::new([
            (PathBuf::from("d/a.bin"), 30_000),
            (PathBuf::from("d/empty"), 0),
            (PathBuf::from("d/e/b.bin"), 70_000),
        ]);
        let geometry = Geometry::new(100_000, 32_768, 16_384).unwrap();
        let digests: Vec<Digest> = data
            .chunks(32_768)
            .map(|c| Digest::Sha1(Sha1::digest(c).into()))
            .collect();
        let cfg = StorageConfig {
            root: root.clone(),
            layout,
            geometry,
            digests: digests.into(),
            journal: Some(root.join(".resume")),
            transfer_id: b"id".to_vec(),
            workers: 2,
        };
        (root, cfg, data)
    }

    #[tokio::test]
    async fn writes_verify_read_back_and_resume() {
        let (root, cfg, data) = setup("rw");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let s = DiskStorage::open(cfg.clone(), tx).unwrap();
        assert_eq!(fs::metadata(root.join("d/empty")).unwrap().len(), 0);
        let all = Bytes::from(data.clone());
        for p in 0..cfg.geometry.piece_count() {
            let off = cfg.geometry.piece_offset(p) as usize;
            let len = cfg.geometry.piece_size(p) as usize;
            // Hand each piece over in two runs; corrupt piece 1.
            let mut piece = all.slice(off..off + len);
            if p == 1 {
                let mut v = piece.to_vec();
                v[100] ^= 0xff;
                piece = Bytes::from(v);
            }
            let half = len / 2;
            s.submit(StorageOp::Write {
                piece: p,
                begin: 0,
                data: vec![piece.slice(..half)],
            });
            s.submit(StorageOp::Write {
                piece: p,
                begin: half as u32,
                data: vec![piece.slice(half..half + 10), piece.slice(half + 10..)],
            });
        }
        assert!(s.backlog() <= data.len() as u64, "{}", s.backlog());
        let mut verdicts = std::collections::BTreeMap::new();
        while verdicts.len() < 4 {
            match rx.recv().await.unwrap() {
                StorageEvent::PieceDone { piece, ok } => {
                    verdicts.insert(piece, ok);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            verdicts.values().copied().collect::<Vec<_>>(),
            [true, false, true, true]
        );
        // Every byte was written before its piece's verdict.
        assert_eq!(s.backlog(), 0);
        s.submit(StorageOp::Read {
            id: 9,
            piece: 2,
            begin: 100,
            len: 20_000,
        });
        match rx.recv().await.unwrap() {
            StorageEvent::ReadDone { id: 9, data: Ok(d) } => {
                let at = 2 * 32_768 + 100;
                assert_eq!(&d[..], &data[at..at + 20_000]);
            }
            other => panic!("{other:?}"),
        }
        s.close();
        let mut on_disk = fs::read(root.join("d/a.bin")).unwrap();
        on_disk.extend(fs::read(root.join("d/e/b.bin")).unwrap());
        assert_eq!(on_disk[..32_768], data[..32_768]);
        assert_ne!(on_disk[32_768..65_536], data[32_768..65_536]);
        let had = load_resume(
            &root.join(".resume"),
            b"id",
            &root,
            &cfg.layout,
            &cfg.geometry,
        );
        assert_eq!(had.iter_ones().collect::<Vec<_>>(), [0, 2, 3]);
        // Another transfer's journal is ignored; a truncated file loses its pieces.
        assert_eq!(
            load_resume(
                &root.join(".resume"),
                b"other",
                &root,
                &cfg.layout,
                &cfg.geometry
            )
            .count(),
            0
        );
        File::options()
            .write(true)
            .open(root.join("d/e/b.bin"))
            .unwrap()
            .set_len(10)
            .unwrap();
        let had = load_resume(
            &root.join(".resume"),
            b"id",
            &root,
            &cfg.layout,
            &cfg.geometry,
        );
        assert_eq!(had.count(), 0);
        fs::remove_dir_all(root).unwrap();
    }

    #[tokio::test]
    async fn check_hashes_what_is_on_disk() {
        let (root, cfg, data) = setup("check");
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::write(root.join("d/a.bin"), &data[..30_000]).unwrap();
        fs::write(root.join("d/e/b.bin"), &data[30_000..]).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let s = DiskStorage::open(
            StorageConfig {
                journal: None,
                ..cfg
            },
            tx,
        )
        .unwrap();
        for p in 0..4 {
            s.submit(StorageOp::Check { piece: p });
        }
        let mut ok = 0;
        for _ in 0..4 {
            if let StorageEvent::PieceDone { ok: true, .. } = rx.recv().await.unwrap() {
                ok += 1;
            }
        }
        assert_eq!(ok, 4);
        s.close();
        fs::remove_dir_all(root).unwrap();
    }
}
