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

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};

use super::error::OpenError;

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
        })
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
