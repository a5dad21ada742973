//! A temporary directory removed on drop (kept when env `WEIR_LAB_KEEP` is
//! set, for looking at logs after a failure).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh directory under the system temp dir (or `$WEIR_LAB_TMP`),
/// named `weir-<tag>-<pid>-<n>`, removed with its contents on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates the directory. `tag` is only part of its name.
    pub fn new(tag: &str) -> anyhow::Result<Self> {
        let base = std::env::var_os("WEIR_LAB_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = base.join(format!(
            "weir-{}-{}-{n}",
            crate::netns::sanitize(tag),
            std::process::id()
        ));
        if path.exists() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing stale {}", path.display()))?;
        }
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path/rel`, creating it as a directory.
    pub fn subdir(&self, rel: &str) -> anyhow::Result<PathBuf> {
        let p = self.path.join(rel);
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("WEIR_LAB_KEEP").is_some() {
            eprintln!("weir-lab: keeping {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
