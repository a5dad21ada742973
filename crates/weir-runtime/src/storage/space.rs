//! Free space: the check before a download starts, and the wait while the
//! disk is full.

use std::os::fd::AsFd;
use std::time::Duration;

/// How often a writer that hit a full disk tries again.
pub(crate) const RETRY: Duration = Duration::from_secs(1);

/// Bytes an unprivileged writer may still allocate on the filesystem of
/// `fd` (`None` when the system does not say).
pub(crate) fn free_bytes(fd: impl AsFd) -> Option<u64> {
    let st = nix::sys::statvfs::fstatvfs(fd).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

/// Whether an error means the disk (or the user's quota) is full.
pub(crate) fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}
