//! A download directory whose files are opened without following symbolic
//! links.
//!
//! Names in a transfer come from the wire (checked by `weir_core::safepath`
//! so they never climb out), but the directory itself may hold anything: a
//! link planted where a file or folder of the download goes would make
//! every write land outside. So the directory is opened once (the user's
//! own path, links in it followed) and every file, folder and journal under
//! it is reached from that descriptor one component at a time with
//! `openat(O_NOFOLLOW)`: a link anywhere is refused, naming it, and nothing
//! outside is ever read, written, truncated or extended.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};

use super::error::OpenError;
use super::lock::{self, LockFile};

/// How a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read only.
    Read,
    /// Read and write; the file must exist.
    Write,
    /// Read and write, created (mode 0666 under the umask) if missing.
    Create,
}

/// The download directory, held open.
#[derive(Debug)]
pub(crate) struct SafeDir {
    fd: OwnedFd,
    path: PathBuf,
    /// Its shared lock files while a transfer holds a lock in them (see
    /// [`super::lock`]).
    locks: Mutex<[Option<Arc<LockFile>>; lock::SHARDS]>,
}

fn io_err(path: PathBuf, e: Errno) -> OpenError {
    match e {
        Errno::ELOOP => OpenError::Symlink { path },
        _ => OpenError::Io {
            path,
            source: e.into(),
        },
    }
}

impl SafeDir {
    /// Opens the download directory `path` (created, with its parents, if
    /// `create`). This path is the user's: links in it are followed.
    pub(crate) fn open(path: &Path, create: bool) -> Result<Self, OpenError> {
        if create {
            std::fs::create_dir_all(path).map_err(|source| OpenError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        }
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ENOTDIR => OpenError::NotAFile {
                path: path.to_path_buf(),
                want: "directory",
            },
            e => OpenError::NoDirectory {
                dir: path.to_path_buf(),
                source: e.into(),
            },
        })?;
        Ok(Self {
            fd,
            path: path.to_path_buf(),
            locks: Mutex::new(Default::default()),
        })
    }

    /// The directory's shared lock file `shard`, opened (created) if no
    /// lock of this process holds it open.
    pub(crate) fn lock_file(&self, shard: usize) -> Result<Arc<LockFile>, OpenError> {
        let mut slots = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = slots[shard].as_ref() {
            return Ok(l.clone());
        }
        let l = Arc::new(LockFile::open(self, shard)?);
        slots[shard] = Some(l.clone());
        Ok(l)
    }

    /// Lets `l`, lock file `shard`, go (closed once its last lock is
    /// dropped): the next lock opens the file the name leads to.
    pub(crate) fn forget_lock_file(&self, shard: usize, l: &Arc<LockFile>) {
        let mut slots = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if slots[shard].as_ref().is_some_and(|s| Arc::ptr_eq(s, l)) {
            slots[shard] = None;
        }
    }

    /// The directory `path` opened as [`SafeDir::open`] does, shared with
    /// every other open transfer of this process in the same directory
    /// (same path, same inode): a daemon holding thousands of transfers in
    /// one download directory holds one descriptor for it, not one each.
    /// The descriptor is only ever used as the base of `*at` calls, which
    /// keep no state in it, so sharing it changes nothing else.
    pub(crate) fn shared(path: &Path, create: bool) -> Result<Arc<Self>, OpenError> {
        type Key = (u64, u64, PathBuf);
        static OPEN: Mutex<Option<HashMap<Key, Weak<SafeDir>>>> = Mutex::new(None);
        let fresh = Self::open(path, create)?;
        let Ok(st) = fstat(fresh.fd.as_fd()) else {
            return Ok(Arc::new(fresh));
        };
        let key = (st.st_dev, st.st_ino, fresh.path.clone());
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        let open = open.get_or_insert_with(HashMap::new);
        if let Some(d) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(d);
        }
        // Forget directories no transfer holds any more, now and then
        // (amortised: when the map has doubled).
        if open.len() >= 64 && open.len().is_power_of_two() {
            open.retain(|_, w| w.strong_count() > 0);
        }
        let d = Arc::new(fresh);
        open.insert(key, Arc::downgrade(&d));
        Ok(d)
    }

    /// The directory's path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Walks to the directory holding `rel`, creating missing directories
    /// when `create`. `None`: a directory on the way is missing.
    fn parent<'a>(
        &self,
        rel: &'a Path,
        create: bool,
    ) -> Result<Option<(Option<OwnedFd>, &'a OsStr)>, OpenError> {
        let mut names = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(n),
                _ => {
                    return Err(OpenError::Io {
                        path: self.path.join(rel),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            "not a plain relative path",
                        ),
                    });
                }
            }
        }
        let Some((last, dirs)) = names.split_last() else {
            return Err(OpenError::Io {
                path: self.path.join(rel),
                source: std::io::ErrorKind::InvalidInput.into(),
            });
        };
        let mut cur: Option<OwnedFd> = None;
        let mut shown = self.path.clone();
        for d in dirs {
            shown.push(d);
            let at = cur.as_ref().map_or(self.fd.as_fd(), |f| f.as_fd());
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let next = match openat(at, *d, flags, Mode::empty()) {
                Err(Errno::ENOENT) if create => {
                    match mkdirat(at, *d, Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io_err(shown, e)),
                    }
                    openat(at, *d, flags, Mode::empty())
                }
                r => r,
            };
            match next {
                Ok(fd) => cur = Some(fd),
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ENOTDIR | Errno::ELOOP) => {
                    // O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR: tell
                    // the two apart.
                    let link = fstatat(at, *d, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
                        SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
                    });
                    return Err(if link {
                        OpenError::Symlink { path: shown }
                    } else {
                        OpenError::NotAFile {
                            path: shown,
                            want: "directory",
                        }
                    });
                }
                Err(e) => return Err(io_err(shown, e)),
            }
        }
        Ok(Some((cur, *last)))
    }

    /// What is at `rel`: `None` if nothing. A link is refused, and so is
    /// anything that is not a regular file.
    pub(crate) fn stat(&self, rel: &Path) -> Result<Option<FileStat>, OpenError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(None);
        };
        let at = dir.as_ref().map_or(self.fd.as_fd(), |f| f.as_fd());
        match fstatat(at, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
                if kind == SFlag::S_IFLNK {
                    Err(OpenError::Symlink {
                        path: self.path.join(rel),
                    })
                } else if kind != SFlag::S_IFREG {
                    Err(OpenError::NotAFile {
                        path: self.path.join(rel),
                        want: "file",
                    })
                } else {
                    Ok(Some(st))
                }
            }
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io_err(self.path.join(rel), e)),
        }
    }

    /// Opens the regular file `rel`. `None`: it (or a directory on the way)
    /// does not exist and `access` does not create.
    pub(crate) fn open_file(&self, rel: &Path, access: Access) -> Result<Option<File>, OpenError> {
        let Some((dir, name)) = self.parent(rel, access == Access::Create)? else {
            return Ok(None);
        };
        let at = dir.as_ref().map_or(self.fd.as_fd(), |f| f.as_fd());
        // O_NONBLOCK: a planted FIFO must not block the open (it is refused
        // right after); it changes nothing for a regular file.
        let mut flags = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
        flags |= match access {
            Access::Read => OFlag::O_RDONLY,
            Access::Write => OFlag::O_RDWR,
            Access::Create => OFlag::O_RDWR | OFlag::O_CREAT,
        };
        let fd = match openat(at, name, flags, Mode::from_bits_truncate(0o666)) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => {
                return Err(OpenError::Symlink {
                    path: self.path.join(rel),
                });
            }
            Err(Errno::ENXIO | Errno::EISDIR) => {
                return Err(OpenError::NotAFile {
                    path: self.path.join(rel),
                    want: "file",
                });
            }
            Err(e) => return Err(io_err(self.path.join(rel), e)),
        };
        let st = fstat(&fd).map_err(|e| io_err(self.path.join(rel), e))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(OpenError::NotAFile {
                path: self.path.join(rel),
                want: "file",
            });
        }
        Ok(Some(File::from(fd)))
    }

    /// Renames `from` to `to`, both directly in the directory (a link at
    /// `to` is replaced, never followed).
    pub(crate) fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        nix::fcntl::renameat(self.fd.as_fd(), from, self.fd.as_fd(), to).map_err(Into::into)
    }

    /// Removes the file `name` directly in the directory.
    pub(crate) fn unlink(&self, name: &str) -> std::io::Result<()> {
        nix::unistd::unlinkat(
            self.fd.as_fd(),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(Into::into)
    }

    /// Makes renames and new entries in the directory durable.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        nix::unistd::fsync(self.fd.as_fd()).map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::SafeDir;

    #[test]
    fn transfers_in_one_directory_share_one_descriptor() {
        let t = std::env::temp_dir().join(format!("weir-safedir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let (a, b) = (t.join("a"), t.join("b"));
        let a1 = SafeDir::shared(&a, true).unwrap();
        let a2 = SafeDir::shared(&a, true).unwrap();
        let b1 = SafeDir::shared(&b, true).unwrap();
        assert!(Arc::ptr_eq(&a1, &a2), "same directory opened twice");
        assert!(!Arc::ptr_eq(&a1, &b1), "two directories share a descriptor");
        // Once nothing holds it, a directory replaced under the same path
        // is opened afresh, not served from the old descriptor.
        drop((a1, a2));
        std::fs::remove_dir(&a).unwrap();
        std::fs::create_dir(&a).unwrap();
        let a3 = SafeDir::shared(&a, false).unwrap();
        std::fs::write(a.join("x"), b"1").unwrap();
        assert!(a3.stat(std::path::Path::new("x")).unwrap().is_some());
        drop((a3, b1));
        std::fs::remove_dir_all(&t).unwrap();
    }
}
