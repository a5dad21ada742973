//! A transfer's data files: byte ranges of the transfer read and written
//! across them, files weir may not modify compared instead of written,
//! flushes and recorded states.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use weir_core::geometry::Geometry;
use weir_core::resume::FileState;
use weir_core::storage::{FileLayout, StorageFault};

use super::dir::{Access, SafeDir};
use super::error::OpenError;
use super::fdcache;
use crate::bufpool::BufPool;

/// Buffers of storage reads: a read is at most this large to use one
/// (`max_read` of the cores and 1 MiB pieces).
const READ_POOL_BUF: usize = 1 << 20;
/// Storage read buffers kept at most (16 MiB).
const READ_POOL_MAX: usize = 16;

/// Storage reads' buffers, for every transfer of the process.
fn read_pool() -> &'static BufPool {
    static POOL: OnceLock<BufPool> = OnceLock::new();
    POOL.get_or_init(|| BufPool::new(READ_POOL_BUF, READ_POOL_MAX))
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// The disk (or quota) is full: try again later.
    #[error("{path}: {source}")]
    Full {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file weir may not modify holds other bytes than the transfer's.
    #[error(
        "{path} holds other data than the download at byte {offset}; weir does not write into files it did not create: move it away, choose another -o, or pass --overwrite"
    )]
    Differs {
        /// The file.
        path: PathBuf,
        /// Where in it.
        offset: u64,
    },
    /// Any other failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// A read that failed: the file it concerns and why.
#[derive(Debug)]
pub(crate) struct ReadError {
    pub(crate) file: usize,
    pub(crate) fault: StorageFault,
}

/// The files of one transfer under its download directory.
#[derive(Debug)]
pub(crate) struct Files {
    dir: Arc<SafeDir>,
    layout: FileLayout,
    /// Per file: weir may write it (otherwise writes are compared).
    writable: Vec<bool>,
    access: Access,
    /// This set's key in [`fdcache`], which holds the open files.
    id: u64,
    /// Per file: the inode its first open found (0: not opened yet), so a
    /// reopen after [`fdcache`] closed it can tell a replaced file.
    inodes: Vec<AtomicU64>,
}

impl Drop for Files {
    fn drop(&mut self) {
        fdcache::forget(self.id);
    }
}

impl Files {
    /// The files of `layout` under `dir`, opened when first used; those
    /// not `writable` are never written (opened read-only if none is).
    pub(crate) fn new(dir: Arc<SafeDir>, layout: FileLayout, writable: Vec<bool>) -> Self {
        let access = if writable.iter().any(|w| *w) {
            Access::Write
        } else {
            Access::Read
        };
        Self {
            id: fdcache::next_id(),
            inodes: (0..layout.files().len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            dir,
            layout,
            writable,
            access,
        }
    }

    /// The layout.
    pub(crate) fn layout(&self) -> &FileLayout {
        &self.layout
    }

    /// The download directory.
    pub(crate) fn dir(&self) -> &Arc<SafeDir> {
        &self.dir
    }

    /// File `i`'s path relative to the download directory.
    pub(crate) fn rel(&self, i: usize) -> &Path {
        &self.layout.files()[i].path
    }

    /// File `i`'s full path, for messages.
    pub(crate) fn shown(&self, i: usize) -> PathBuf {
        self.dir.path().join(self.rel(i))
    }

    /// File `i`, opened (without following links) when it is not open
    /// (see [`fdcache`]). A failure is not remembered: a file created
    /// later opens then. A file that is not the one first opened here (another
    /// inode: replaced meanwhile) is an error.
    pub(crate) fn file(&self, i: usize) -> io::Result<Arc<File>> {
        if let Some(f) = fdcache::get((self.id, i)) {
            return Ok(f);
        }
        let access = if self.writable[i] {
            self.access
        } else {
            Access::Read
        };
        let f = match self.dir.open_file(self.rel(i), access) {
            Ok(Some(f)) => f,
            Ok(None) => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
            Err(OpenError::Io { source, .. }) => return Err(source),
            Err(e) => return Err(io::Error::other(e.to_string())),
        };
        let ino = f.metadata()?.ino().max(1);
        match self.inodes[i].compare_exchange(0, ino, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {}
            Err(had) if had == ino => {}
            Err(_) => {
                return Err(io::Error::other(
                    "replaced by another file since weir opened it",
                ));
            }
        }
        Ok(fdcache::insert((self.id, i), f))
    }

    /// Writes `data` (contiguous) at `offset` of the transfer. Ranges of a
    /// file weir may not modify are compared with what is there instead:
    /// equal bytes are left alone, different ones are an error.
    pub(crate) fn write(&self, offset: u64, data: &[Bytes]) -> Result<(), WriteError> {
        let total: u64 = data.iter().map(|d| d.len() as u64).sum();
        let (mut chunk, mut within) = (0usize, 0usize);
        for (fi, mut foff, len) in self.layout.map(offset, total) {
            let io = |source: io::Error| {
                let path = self.shown(fi);
                if super::space::is_full(&source) {
                    WriteError::Full { path, source }
                } else {
                    WriteError::Io { path, source }
                }
            };
            let file = self.file(fi).map_err(io)?;
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
                let n = if self.writable[fi] {
                    nix::sys::uio::pwritev(&*file, &slices, foff as i64)
                        .map_err(io::Error::from)
                        .map_err(io)?
                } else {
                    self.compare(fi, &file, &slices, foff)?;
                    batch
                };
                if n == 0 {
                    return Err(io(io::ErrorKind::WriteZero.into()));
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

    /// Checks that file `fi` holds `slices` at `foff`.
    fn compare(
        &self,
        fi: usize,
        file: &File,
        slices: &[IoSlice<'_>],
        mut foff: u64,
    ) -> Result<(), WriteError> {
        let mut buf = Vec::new();
        for s in slices {
            buf.resize(s.len(), 0);
            let n = read_full_at(file, &mut buf, foff).map_err(|source| WriteError::Io {
                path: self.shown(fi),
                source,
            })?;
            if n < s.len() || buf[..] != s[..] {
                let at = buf[..n]
                    .iter()
                    .zip(s.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(n);
                return Err(WriteError::Differs {
                    path: self.shown(fi),
                    offset: foff + at as u64,
                });
            }
            foff += s.len() as u64;
        }
        Ok(())
    }

    /// Reads `len` bytes at `offset` of the transfer. A file shorter than
    /// it must be is [`StorageFault::Truncated`].
    pub(crate) fn read(&self, offset: u64, len: usize) -> Result<Bytes, ReadError> {
        let pool = read_pool();
        // A block sent from a read keeps the read's whole buffer alive
        // until it is written: a small read in a pool buffer pinned 1 MiB
        // for a few KiB (a peer asking for one piece's blocks at a time
        // held 4 MiB of reads in up to 64 MiB of buffers). Only reads of at
        // least half a pool buffer use one; smaller ones get their size.
        let pooled = (pool.size() / 2..=pool.size()).contains(&len);
        let mut buf = if pooled {
            // Zeroing a mapped buffer costs far less than the page faults
            // of a fresh one (see `crate::bufpool`).
            let mut b = pool.take();
            b.resize(len, 0);
            b
        } else {
            BytesMut::zeroed(len)
        };
        self.read_into(offset, &mut buf[..len])?;
        let out = buf.split_to(len).freeze();
        if pooled {
            // Handed out again once `out` (and every slice of it) is gone;
            // even when the read filled it (no capacity left, the handle
            // still owns the allocation: before, a 1 MiB read never came
            // back and each took a fresh buffer).
            pool.give(buf);
        }
        Ok(out)
    }

    /// Fills `buf` with the transfer's bytes at `offset`: what [`Self::read`]
    /// does, into the caller's buffer (a recheck reuses one buffer for every
    /// run of pieces it reads).
    pub(crate) fn read_into(&self, offset: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let len = buf.len();
        let mut at = 0usize;
        for (fi, foff, n) in self.layout.map(offset, len as u64) {
            let n = n as usize;
            let fault = |e: io::Error| ReadError {
                file: fi,
                fault: StorageFault::Io {
                    path: self.rel(fi).to_path_buf(),
                    errno: e.raw_os_error(),
                    message: e.to_string(),
                },
            };
            let file = self.file(fi).map_err(fault)?;
            let got = read_full_at(&file, &mut buf[at..at + n], foff).map_err(fault)?;
            if got < n {
                let now = file
                    .metadata()
                    .map(|m| m.len())
                    .unwrap_or(foff + got as u64);
                return Err(ReadError {
                    file: fi,
                    fault: StorageFault::Truncated {
                        path: self.rel(fi).to_path_buf(),
                        len: now,
                        want: self.layout.files()[fi].length,
                    },
                });
            }
            at += n;
        }
        if at != len {
            return Err(ReadError {
                file: self.layout.files().len().saturating_sub(1),
                fault: StorageFault::Io {
                    path: PathBuf::new(),
                    errno: None,
                    message: format!("read past the end of the transfer ({at} of {len} bytes)"),
                },
            });
        }
        Ok(())
    }

    /// The pieces a failed read makes unusable: for a truncated file, every
    /// piece past its new end; otherwise the piece read.
    pub(crate) fn lost_by(&self, err: &ReadError, piece: u32, geo: &Geometry) -> Vec<u32> {
        match &err.fault {
            StorageFault::Truncated { len, .. } => {
                let f = &self.layout.files()[err.file];
                let pl = u64::from(geo.piece_len().max(1));
                let from = (f.offset + len.min(&f.length)) / pl;
                let to = self.layout.pieces_of_file(err.file, geo).end;
                let mut v: Vec<u32> = (from as u32..to).collect();
                if !v.contains(&piece) {
                    v.push(piece);
                }
                v
            }
            StorageFault::Io { .. } => vec![piece],
        }
    }

    /// Flushes file `i`'s data to the disk (if it was ever opened; when
    /// [`fdcache`] has closed it since, it is reopened for the flush: its
    /// written pages are the file's, not the descriptor's).
    pub(crate) fn sync(&self, i: usize) -> io::Result<()> {
        if self.inodes[i].load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        self.file(i)?.sync_data()
    }

    /// File `i`'s state now (zeros when it is missing).
    pub(crate) fn state(&self, i: usize) -> FileState {
        let md = fdcache::get((self.id, i)).and_then(|f| f.metadata().ok());
        match md {
            Some(m) => state_of(m.ino(), m.len(), m.mtime(), m.mtime_nsec()),
            None => match self.dir.stat(self.rel(i)) {
                // Not the file weir had open (replaced while closed): a
                // state no later run can match, so it is not trusted.
                Ok(Some(st))
                    if ![0, st.st_ino.max(1)].contains(&self.inodes[i].load(Ordering::Relaxed)) =>
                {
                    state_of(0, 0, 0, 0)
                }
                Ok(Some(st)) => {
                    state_of(st.st_ino, st.st_size as u64, st.st_mtime, st.st_mtime_nsec)
                }
                _ => state_of(0, 0, 0, 0),
            },
        }
    }
}

/// Segments shorter than this are read, not mapped (a map costs two
/// system calls and a page table; small files are cheaper to copy).
#[cfg(target_os = "linux")]
const MIN_MAP: u64 = 64 << 10;

/// A range of the transfer mapped for reading, so that a recheck hashes
/// the page cache without copying it (see [`super::mapped`]): per file
/// segment a map of what the file holds now; the rest (small segments,
/// missing or short files, systems that cannot map) is read.
pub(crate) struct MappedRun<'a> {
    files: &'a Files,
    /// Per map: the transfer offset it starts at, its file, the map.
    #[cfg(target_os = "linux")]
    maps: Vec<(u64, usize, super::mapped::Guarded)>,
}

impl Files {
    /// Maps the transfer's bytes `offset..offset + len` for
    /// [`MappedRun::visit`].
    pub(crate) fn map_run(&self, offset: u64, len: u64) -> MappedRun<'_> {
        #[cfg(target_os = "linux")]
        {
            let mut maps = Vec::new();
            for (fi, foff, n) in self.layout.map(offset, len) {
                let Ok(file) = self.file(fi) else { continue };
                let Ok(md) = file.metadata() else { continue };
                // Only what the file holds now: past it, reads fail as
                // they should.
                let n = n.min(md.len().saturating_sub(foff));
                if n < MIN_MAP {
                    continue;
                }
                if let Ok(m) = super::mapped::Guarded::map(&file, foff, n as usize) {
                    maps.push((self.layout.files()[fi].offset + foff, fi, m));
                }
            }
            MappedRun { files: self, maps }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (offset, len);
            MappedRun { files: self }
        }
    }
}

impl MappedRun<'_> {
    /// Calls `f` with the transfer's bytes `offset..offset + len` in
    /// order: straight from the maps where they cover them, read into
    /// `buf` (at most its length at a time) elsewhere. Errors are
    /// [`Files::read_into`]'s; a mapped page that could not be read (its
    /// file shrank after it was mapped, or the disk failed) is one too,
    /// after `f` was given zeros for it: what `f` made of this range must
    /// then be thrown away.
    pub(crate) fn visit(
        &self,
        mut offset: u64,
        len: u64,
        buf: &mut [u8],
        mut f: impl FnMut(&[u8]),
    ) -> Result<(), ReadError> {
        let end = offset + len;
        while offset < end {
            #[cfg(target_os = "linux")]
            if let Some((at, fi, m)) = self
                .maps
                .iter()
                .find(|(at, _, m)| *at <= offset && offset < *at + m.bytes().len() as u64)
            {
                let from = (offset - at) as usize;
                let to = ((end - at) as usize).min(m.bytes().len());
                f(&m.bytes()[from..to]);
                if m.faulted() {
                    return Err(self.files.unreadable(*fi));
                }
                offset = at + to as u64;
                continue;
            }
            #[cfg(target_os = "linux")]
            let next = self
                .maps
                .iter()
                .map(|(at, _, _)| *at)
                .filter(|at| *at > offset)
                .min()
                .unwrap_or(end)
                .min(end);
            #[cfg(not(target_os = "linux"))]
            let next = end;
            let k = ((next - offset) as usize).min(buf.len());
            self.files.read_into(offset, &mut buf[..k])?;
            f(&buf[..k]);
            offset += k as u64;
        }
        Ok(())
    }
}

impl Files {
    /// The error for file `fi` when a mapped page of it could not be read:
    /// truncated if it is shorter now than the transfer says, else an I/O
    /// error.
    #[cfg(target_os = "linux")]
    fn unreadable(&self, fi: usize) -> ReadError {
        let want = self.layout.files()[fi].length;
        let now = self.file(fi).and_then(|f| f.metadata()).map(|m| m.len());
        let fault = match now {
            Ok(len) if len < want => StorageFault::Truncated {
                path: self.rel(fi).to_path_buf(),
                len,
                want,
            },
            _ => StorageFault::Io {
                path: self.rel(fi).to_path_buf(),
                errno: Some(libc::EIO),
                message: "a page of the file could not be read".into(),
            },
        };
        ReadError { file: fi, fault }
    }
}

/// A recorded file state from `stat` fields.
pub(crate) fn state_of(ino: u64, size: u64, mtime: i64, nsec: i64) -> FileState {
    FileState {
        ino,
        size,
        mtime_sec: mtime,
        mtime_nsec: nsec.clamp(0, 999_999_999) as u32,
    }
}

/// `pread` until `buf` is full or the file ends; the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], off) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use weir_core::storage::FileLayout;

    use super::super::dir::SafeDir;
    use super::super::fdcache;
    use super::Files;

    #[test]
    fn a_file_replaced_while_closed_is_refused_and_its_state_not_trusted() {
        let t = std::env::temp_dir().join(format!("weir-files-replaced-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("a"), b"old bytes").unwrap();
        let dir = Arc::new(SafeDir::open(&t, false).unwrap());
        let files = Files::new(dir, FileLayout::new([(PathBuf::from("a"), 9)]), vec![false]);
        assert_eq!(&files.read(0, 9).unwrap()[..], b"old bytes");
        let before = files.state(0);
        // The cache closes it (as it would past its bound), then the file
        // is replaced under the same name.
        fdcache::forget(files.id);
        assert_eq!(files.state(0), before, "state of the same file changed");
        std::fs::write(t.join("b"), b"new bytes").unwrap();
        std::fs::rename(t.join("b"), t.join("a")).unwrap();
        assert!(files.read(0, 9).is_err(), "a replaced file was read");
        assert_eq!(files.state(0).size, 0, "a replaced file's state recorded");
        drop(files);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
