//! Why a transfer's storage could not be opened or used.

use std::path::PathBuf;

/// A failure opening a transfer's files. Each names the path and, where
/// the user can do something about it, says what.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A symbolic link where the transfer's files go: weir never follows
    /// one under the download directory.
    #[error(
        "{path} is a symbolic link (or lies under one); weir does not follow links inside the download directory: remove it or choose another -o"
    )]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// Something that is not a regular file (or not a directory) is there.
    #[error("{path} exists and is not a {want}; move it away or choose another -o")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What was expected there ("file", "directory").
        want: &'static str,
    },
    /// A file weir did not create has another length than the transfer's.
    #[error(
        "{path} already exists with {found} bytes where the download has {want}; weir does not write into files it did not create: move it away, choose another -o, or pass --overwrite"
    )]
    WrongSize {
        /// The file.
        path: PathBuf,
        /// Its length on disk.
        found: u64,
        /// The transfer's length for it.
        want: u64,
    },
    /// Files weir did not create hold data that does not verify: completing
    /// the download would mean writing into them.
    #[error(
        "{} already exist{} and do{} not hold this download's data ({bad} of {checked} pieces checked do not verify); weir does not write into files it did not create: move {} away, choose another -o, or pass --overwrite",
        list(paths), if paths.len() == 1 { "s" } else { "" }, if paths.len() == 1 { "es" } else { "" },
        if paths.len() == 1 { "it" } else { "them" }
    )]
    ExistingData {
        /// The files.
        paths: Vec<PathBuf>,
        /// Pieces over them that failed.
        bad: u32,
        /// Pieces over them that were hashed.
        checked: u32,
    },
    /// Seeding found nothing of the transfer in the directory.
    #[error(
        "nothing in {dir} is this torrent's data ({missing} of {files} files missing, no piece verifies); give the directory that holds {name}"
    )]
    NothingToSeed {
        /// The directory given.
        dir: PathBuf,
        /// Files not found.
        missing: usize,
        /// Files in the transfer.
        files: usize,
        /// What the data is called (the torrent's name).
        name: String,
    },
    /// The directory to seed from does not exist.
    #[error("{dir}: {source}")]
    NoDirectory {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another process holds this download.
    #[error(
        "{dir} is already in use for this download by another weir ({holder}); wait for it to finish or stop it"
    )]
    Locked {
        /// The download directory.
        dir: PathBuf,
        /// Who holds it (`pid N`, or `unknown process`).
        holder: String,
    },
    /// Not enough free space for the missing data.
    #[error(
        "not enough space in {dir}: the download needs {need} more, {free} is free; free some space, choose another -o, or pass --no-space-check (files are sparse: weir then pauses when the disk fills)"
    )]
    NoSpace {
        /// The download directory.
        dir: PathBuf,
        /// Bytes still to write, formatted.
        need: String,
        /// Bytes free, formatted.
        free: String,
    },
    /// Any other system error, with the path it concerns.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl OpenError {
    /// Whether the user's input or data is what is wrong (the CLI exits 2),
    /// rather than a failure that may pass (exit 1). A lock held by another
    /// process is the latter: the same command works once it is done.
    pub fn is_user_error(&self) -> bool {
        !matches!(self, OpenError::Locked { .. } | OpenError::Io { .. })
    }
}

fn list(paths: &[PathBuf]) -> String {
    const SHOWN: usize = 3;
    let mut s: Vec<String> = paths
        .iter()
        .take(SHOWN)
        .map(|p| p.display().to_string())
        .collect();
    if paths.len() > SHOWN {
        s.push(format!("{} more", paths.len() - SHOWN));
    }
    s.join(", ")
}

/// Bytes as a short figure for messages (MB, GB: powers of 1000, as the
/// progress display shows them).
pub(crate) fn human(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n} B")
    }
}
