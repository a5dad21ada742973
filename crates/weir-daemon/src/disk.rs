//! What backends ask of the file system.

use std::path::Path;

use crate::backend::{BackendError, FreeSpace};

/// Free and total bytes of the file system holding `path` (`free-space`,
/// `download-dir-free-space`).
pub(crate) fn free_space_of(path: &Path) -> Result<FreeSpace, BackendError> {
    let st = nix::sys::statvfs::statvfs(path).map_err(|e| BackendError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(e),
    })?;
    let frag = st.fragment_size() as u64;
    Ok(FreeSpace {
        free: st.blocks_available() as u64 * frag,
        total: st.blocks() as u64 * frag,
    })
}
