//! One process per download: an exclusive `flock` on `.weir-lock-<name>`
//! in the download directory, holding the owner's pid so a second process
//! can say who is in the way.
//!
//! The lock file is removed when the download closes. A process killed
//! with SIGKILL leaves it behind unlocked (the kernel drops the lock), and
//! the next run takes it over. Taking a lock on a file another process is
//! removing could leave two owners of two different inodes; so after the
//! lock is taken, the path is checked to still name the locked inode, and
//! the attempt is repeated if not.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use nix::fcntl::{Flock, FlockArg};

use super::dir::{Access, SafeDir};
use super::error::OpenError;

/// The held lock; released (and its file removed) on drop.
#[derive(Debug)]
pub(crate) struct DownloadLock {
    dir: Arc<SafeDir>,
    name: String,
    file: Option<Flock<File>>,
}

impl DownloadLock {
    /// Takes the lock `.weir-lock-<stem>` in `dir`, or says who holds it.
    pub(crate) fn take(dir: Arc<SafeDir>, stem: &str) -> Result<Self, OpenError> {
        let name = name(stem);
        let shown = dir.path().join(&name);
        for _ in 0..8 {
            let f = dir
                .open_file(Path::new(&name), Access::Create)?
                .ok_or_else(|| OpenError::Io {
                    path: shown.clone(),
                    source: std::io::ErrorKind::NotFound.into(),
                })?;
            let mut locked = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Ok(l) => l,
                Err((mut f, nix::errno::Errno::EWOULDBLOCK)) => {
                    let mut pid = String::new();
                    let _ = f.read_to_string(&mut pid);
                    let pid = pid.trim();
                    let holder = if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
                        format!("pid {pid}")
                    } else {
                        "another process".to_string()
                    };
                    return Err(OpenError::Locked {
                        dir: dir.path().to_path_buf(),
                        holder,
                    });
                }
                Err((_, e)) => {
                    return Err(OpenError::Io {
                        path: shown,
                        source: e.into(),
                    });
                }
            };
            // Still the file at that name (not one a finishing owner just
            // removed)?
            let ours = locked.metadata().map(|m| (m.dev(), m.ino()));
            let now = dir.stat(Path::new(&name))?.map(|s| (s.st_dev, s.st_ino));
            if ours.ok() != now {
                continue;
            }
            let pid = format!("{}\n", std::process::id());
            let written = locked
                .set_len(0)
                .and_then(|()| locked.rewind())
                .and_then(|()| locked.write_all(pid.as_bytes()));
            if let Err(source) = written {
                return Err(OpenError::Io {
                    path: shown,
                    source,
                });
            }
            return Ok(Self {
                dir,
                name,
                file: Some(locked),
            });
        }
        Err(OpenError::Locked {
            dir: dir.path().to_path_buf(),
            holder: "another process (the lock file keeps changing)".into(),
        })
    }
}

impl Drop for DownloadLock {
    fn drop(&mut self) {
        // Removed while still held: whoever opens the name next gets a new
        // file, and one that raced in sees it is stale and retries.
        let _ = self.dir.unlink(&self.name);
        drop(self.file.take());
    }
}

/// The lock's file name for `stem`.
pub(crate) fn name(stem: &str) -> String {
    format!(".weir-lock-{stem}")
}
