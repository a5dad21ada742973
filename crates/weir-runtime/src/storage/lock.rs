//! One process per download, with one descriptor per download directory
//! (not one per transfer).
//!
//! The transfers in a directory share 16 lock files, `.weir-locks-0` to
//! `.weir-locks-f`, each opened at its first lock and closed after its last
//! ([`SafeDir`] keeps them). A transfer holds an exclusive
//! open-file-description lock (`F_OFD_SETLK`) on one byte of one of them,
//! both drawn from its stem's SHA-1 (62 bits for the offset): the kernel
//! keeps a small lock record per transfer instead of an open file. Sixteen
//! files, not one, because the kernel keeps an inode's locks in a list it
//! walks on every lock: taking 10,000 locks in one file took 93 us a lock
//! on average here (20,000: 241 us), in sixteen files 5 us (20,000: 11 us). Each transfer took its own `flock`ed file
//! before, so a daemon holding 20,000 transfers held 20,000 descriptors
//! (and could not add more where the hard `RLIMIT_NOFILE` is low).
//!
//! OFD locks conflict between open file descriptions (another process, or
//! another [`SafeDir`] of this one) and the kernel drops them when the last
//! descriptor of the description closes, so a process killed with SIGKILL
//! frees its downloads, as `flock` did. Two transfers of one [`SafeDir`]
//! share its description, where the kernel would merge their locks: the
//! set of offsets it holds says the second one is in the way.
//!
//! The last lock released in a file removes it if no process holds any
//! lock on it (a whole-file lock is granted), so nothing is left behind.
//! A process that opened it meanwhile and locks the removed file sees that
//! the name no longer leads to it and starts again with a new one: a lock
//! counts only on the file the name leads to, checked after it is taken.
//!
//! Beside the lock, `.weir-lock-<stem>` holds the owner's pid (written
//! after the lock is taken, removed before it is released), so a second
//! process can say who is in the way. The file locks nothing itself, but
//! it is checked with a non-blocking `flock` before it is written: a weir
//! from before this scheme, which locked that file, is still seen.
//!
//! An offset two stems share (a chance of one in 2^62 per pair) makes the
//! second wait as if the same download were open.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, Flock, FlockArg, fcntl};
use nix::sys::stat::fstat;
use sha1::{Digest, Sha1};

use super::dir::{Access, SafeDir};
use super::error::OpenError;

/// Lock files a directory's transfers share (by their stem's hash).
pub(crate) const SHARDS: usize = 16;

/// The name of shared lock file `shard`.
pub(crate) fn shard_name(shard: usize) -> String {
    format!(".weir-locks-{shard:x}")
}

/// One of a directory's shared lock files and the offsets its
/// description holds.
#[derive(Debug)]
pub(crate) struct LockFile {
    file: File,
    name: String,
    held: Mutex<HashSet<i64>>,
}

impl LockFile {
    /// Opens (creating) shared lock file `shard` in `dir`.
    pub(crate) fn open(dir: &SafeDir, shard: usize) -> Result<LockFile, OpenError> {
        let name = shard_name(shard);
        let file = dir
            .open_file(Path::new(&name), Access::Create)?
            .ok_or_else(|| OpenError::Io {
                path: dir.path().join(&name),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
        Ok(LockFile {
            file,
            name,
            held: Mutex::new(HashSet::new()),
        })
    }

    fn held(&self) -> MutexGuard<'_, HashSet<i64>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets (`F_WRLCK`) or clears (`F_UNLCK`) the lock on `len` bytes at
    /// `start` (`len` 0: to the end and beyond), without waiting.
    fn set(&self, start: i64, len: i64, kind: libc::c_int) -> Result<(), Errno> {
        let range = libc::flock {
            l_type: kind as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: start,
            l_len: len,
            // Must be 0 for OFD locks.
            l_pid: 0,
        };
        fcntl(self.file.as_fd(), FcntlArg::F_OFD_SETLK(&range)).map(drop)
    }

    /// Whether its name in `dir` still leads to this file.
    fn current(&self, dir: &SafeDir) -> bool {
        let ours = fstat(self.file.as_fd()).map(|s| (s.st_dev, s.st_ino));
        let named = dir.stat(Path::new(&self.name));
        matches!((ours, named), (Ok(o), Ok(Some(n))) if o == (n.st_dev, n.st_ino))
    }
}

/// The shared file and the byte in it that stand for `stem`: 4 and 62
/// bits of its SHA-1 (an offset the kernel accepts, with room for the
/// byte).
fn offset(stem: &str) -> (usize, i64) {
    let h = Sha1::digest(stem.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[..8]);
    let shard = usize::from(h[8]) % SHARDS;
    (shard, (u64::from_le_bytes(b) >> 2) as i64)
}

/// The held lock; released (and its pid file removed) on drop.
#[derive(Debug)]
pub(crate) struct DownloadLock {
    dir: Arc<SafeDir>,
    locks: Arc<LockFile>,
    shard: usize,
    /// Names its pid file ([`name`]); shared with the download's journal
    /// (one copy a transfer, not a name each).
    stem: Arc<str>,
    at: i64,
}

impl DownloadLock {
    /// Takes the lock of `stem` in `dir`, or says who holds it.
    pub(crate) fn take(dir: Arc<SafeDir>, stem: impl Into<Arc<str>>) -> Result<Self, OpenError> {
        let stem = stem.into();
        let name = name(&stem);
        let (shard, at) = offset(&stem);
        let locked = |holder: String| OpenError::Locked {
            dir: dir.path().to_path_buf(),
            holder,
        };
        for _ in 0..8 {
            let locks = dir.lock_file(shard)?;
            let mut held = locks.held();
            if held.contains(&at) {
                return Err(locked(format!("pid {}", std::process::id())));
            }
            if let Err(e) = locks.set(at, 1, libc::F_WRLCK) {
                return Err(if matches!(e, Errno::EAGAIN | Errno::EACCES) {
                    locked(holder(&dir, &name))
                } else {
                    OpenError::Io {
                        path: dir.path().join(&locks.name),
                        source: e.into(),
                    }
                });
            }
            if !locks.current(&dir) {
                // Removed by a process that saw no lock on it: a lock on
                // it guards nothing. Again, with the file the name leads to.
                let _ = locks.set(at, 1, libc::F_UNLCK);
                drop(held);
                dir.forget_lock_file(shard, &locks);
                continue;
            }
            held.insert(at);
            drop(held);
            return match write_pid(&dir, &name) {
                Ok(()) => Ok(Self {
                    dir,
                    locks,
                    shard,
                    stem,
                    at,
                }),
                Err(e) => {
                    release(&dir, shard, &locks, at);
                    Err(match e {
                        PidError::Old => locked(holder(&dir, &name)),
                        PidError::Open(e) => e,
                    })
                }
            };
        }
        Err(locked(
            "another process (the lock file keeps changing)".into(),
        ))
    }
}

/// Releases the lock at `at`; the last one of this description removes
/// the shared file when no process holds any lock on it.
fn release(dir: &SafeDir, shard: usize, locks: &Arc<LockFile>, at: i64) {
    let mut held = locks.held();
    let _ = locks.set(at, 1, libc::F_UNLCK);
    held.remove(&at);
    if held.is_empty() && locks.set(0, 0, libc::F_WRLCK).is_ok() {
        if locks.current(dir) {
            let _ = dir.unlink(&locks.name);
        }
        let _ = locks.set(0, 0, libc::F_UNLCK);
        dir.forget_lock_file(shard, locks);
    }
}

enum PidError {
    /// An older weir holds the pid file itself with `flock` (its lock).
    Old,
    Open(OpenError),
}

/// Writes this process's pid into `name`, after checking that no older
/// weir (which locked this file with `flock` instead) holds it.
fn write_pid(dir: &SafeDir, name: &str) -> Result<(), PidError> {
    let path = dir.path().join(name);
    let f = dir
        .open_file(Path::new(name), Access::Create)
        .map_err(PidError::Open)?
        .ok_or_else(|| {
            PidError::Open(OpenError::Io {
                path: path.clone(),
                source: std::io::ErrorKind::NotFound.into(),
            })
        })?;
    let mut f = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(f) => f,
        Err((_, Errno::EWOULDBLOCK)) => return Err(PidError::Old),
        Err((_, e)) => {
            return Err(PidError::Open(OpenError::Io {
                path,
                source: e.into(),
            }));
        }
    };
    f.set_len(0)
        .and_then(|()| f.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|source| PidError::Open(OpenError::Io { path, source }))
}

/// Who holds the lock of `name`, from its pid file.
fn holder(dir: &SafeDir, name: &str) -> String {
    let mut pid = String::new();
    if let Ok(Some(mut f)) = dir.open_file(Path::new(name), Access::Read) {
        let _ = f.read_to_string(&mut pid);
    }
    let pid = pid.trim();
    if !pid.is_empty() && pid.len() <= 10 && pid.bytes().all(|b| b.is_ascii_digit()) {
        format!("pid {pid}")
    } else {
        "another process".to_string()
    }
}

impl Drop for DownloadLock {
    fn drop(&mut self) {
        // The pid file goes first: whoever takes the lock next writes its
        // own.
        let _ = self.dir.unlink(&name(&self.stem));
        release(&self.dir, self.shard, &self.locks, self.at);
    }
}

/// The pid file's name for `stem`.
pub(crate) fn name(stem: &str) -> String {
    format!(".weir-lock-{stem}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_lab::TempDir;

    fn pid_in(dir: &Path, stem: &str) -> String {
        std::fs::read_to_string(dir.join(name(stem))).unwrap_or_default()
    }

    /// Open descriptors of this process whose path starts with `prefix`.
    fn descriptors_under(prefix: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|p| p.starts_with(prefix) && p != prefix)
            .count()
    }

    #[test]
    fn a_directory_of_many_transfers_holds_sixteen_descriptors() {
        let t = TempDir::new("lock-many").unwrap();
        let dir = SafeDir::shared(t.path(), false).unwrap();
        let locks: Vec<DownloadLock> = (0..200)
            .map(|i| DownloadLock::take(dir.clone(), format!("s{i}")).unwrap())
            .collect();
        assert_eq!(descriptors_under(t.path()), SHARDS);
        let me = format!("{}\n", std::process::id());
        assert!((0..200).all(|i| pid_in(t.path(), &format!("s{i}")) == me));
        drop(locks);
        assert!(!t.path().join(name("s0")).exists());
        assert!(!t.path().join(name("s199")).exists());
        // The last locks took the shared files with them, and their
        // descriptors.
        assert!((0..SHARDS).all(|i| !t.path().join(shard_name(i)).exists()));
        assert_eq!(descriptors_under(t.path()), 0);
    }

    #[test]
    fn a_second_holder_is_refused_and_the_first_named() {
        let t = TempDir::new("lock-second").unwrap();
        let shared = SafeDir::shared(t.path(), false).unwrap();
        let first = DownloadLock::take(shared.clone(), "x").unwrap();
        let me = format!("pid {}", std::process::id());
        // The same description (a transfer of this process) and another
        // one (as another process has): both refused, the holder named.
        let other = Arc::new(SafeDir::open(t.path(), false).unwrap());
        for dir in [shared.clone(), other.clone()] {
            match DownloadLock::take(dir, "x") {
                Err(OpenError::Locked { holder, .. }) => assert_eq!(holder, me),
                r => panic!("{r:?}"),
            }
        }
        // Another stem is not in the way, from either.
        let y = DownloadLock::take(other.clone(), "y").unwrap();
        assert!(DownloadLock::take(shared.clone(), "y").is_err());
        drop(first);
        let again = DownloadLock::take(other.clone(), "x").unwrap();
        assert!(DownloadLock::take(shared.clone(), "x").is_err());
        drop((again, y));
        DownloadLock::take(shared, "x").unwrap();
    }

    #[test]
    fn a_weir_that_locks_the_pid_file_itself_is_still_seen() {
        let t = TempDir::new("lock-old").unwrap();
        std::fs::write(t.path().join(name("old")), "4242\n").unwrap();
        let f = File::options()
            .read(true)
            .write(true)
            .open(t.path().join(name("old")))
            .unwrap();
        let held = Flock::lock(f, FlockArg::LockExclusiveNonblock).unwrap();
        let dir = SafeDir::shared(t.path(), false).unwrap();
        match DownloadLock::take(dir.clone(), "old") {
            Err(OpenError::Locked { holder, .. }) => assert_eq!(holder, "pid 4242"),
            r => panic!("{r:?}"),
        }
        // Its file is left as it was, and the refusal held nothing.
        assert_eq!(pid_in(t.path(), "old"), "4242\n");
        drop(held);
        let l = DownloadLock::take(dir, "old").unwrap();
        assert_eq!(pid_in(t.path(), "old"), format!("{}\n", std::process::id()));
        drop(l);
    }

    #[test]
    fn a_planted_link_as_the_shared_file_is_refused() {
        let t = TempDir::new("lock-link").unwrap();
        let outside = t.path().join("outside");
        std::fs::write(&outside, b"precious").unwrap();
        let dl = t.path().join("dl");
        std::fs::create_dir(&dl).unwrap();
        for i in 0..SHARDS {
            std::os::unix::fs::symlink(&outside, dl.join(shard_name(i))).unwrap();
        }
        let dir = SafeDir::shared(&dl, false).unwrap();
        match DownloadLock::take(dir, "x") {
            Err(e @ OpenError::Symlink { .. }) => {
                assert!(e.to_string().contains(".weir-locks-"), "{e}")
            }
            r => panic!("{r:?}"),
        }
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
    }

    #[test]
    fn offsets_fit_the_kernel_and_differ() {
        let all: Vec<(usize, i64)> = (0..10_000).map(|i| offset(&format!("{i:016x}"))).collect();
        let a: HashSet<i64> = all.iter().map(|&(_, o)| o).collect();
        assert_eq!(a.len(), 10_000);
        assert!(a.iter().all(|&o| (0..i64::MAX).contains(&o)));
        // Every shard gets its share (625 each if even).
        let mut per = [0usize; SHARDS];
        all.iter().for_each(|&(s, _)| per[s] += 1);
        assert!(per.iter().all(|&n| (500..750).contains(&n)), "{per:?}");
    }
}
