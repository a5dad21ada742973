//! Receiving files: the driver loop around [`weir_zmodem::Receiver`], and
//! the file decisions (safe names, no overwriting unless asked, resume).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use weir_core::safepath::{self, Platform};
use weir_zmodem::consts::MAX_FILE_SIZE;
use weir_zmodem::{FileRequest, Receiver, ReceiverConfig, RecvEvent};

use super::line::{Line, READ_CHUNK};
use super::{PROGRESS_EVERY, Progress, ZmodemError};

/// How to receive.
#[derive(Clone, Debug)]
pub struct RecvOptions {
    /// Protocol settings.
    pub core: ReceiverConfig,
    /// Where files go. Names from the wire can never leave it.
    pub dir: PathBuf,
    /// Replace existing files (also when the sender asks with ZMCLOB).
    pub overwrite: bool,
    /// Resume partial files (also when the sender asks with ZCRESUM).
    pub resume: bool,
}

impl Default for RecvOptions {
    fn default() -> Self {
        RecvOptions {
            core: ReceiverConfig::default(),
            dir: PathBuf::from("."),
            overwrite: false,
            resume: false,
        }
    }
}

/// What a receive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecvReport {
    /// Files received completely.
    pub received: Vec<PathBuf>,
    /// Files skipped because they exist (or could not be resumed).
    pub skipped: usize,
    /// Files refused because their name or size was unacceptable.
    pub refused: usize,
    /// Payload bytes written.
    pub bytes: u64,
    /// Retransmissions asked for.
    pub retransmits: u64,
}

struct Current {
    path: PathBuf,
    name: String,
    file: File,
    size: Option<u64>,
    mtime: Option<u64>,
    mode: Option<u32>,
    start: u64,
    started: Instant,
}

enum Decision {
    Accept(Current),
    Skip {
        name: String,
        reason: String,
        refused: bool,
    },
}

/// Receives files over `line` into `opts.dir` until the sender ends the
/// session. A file cut short by an error is kept for a later resume.
pub fn receive_files(
    line: Line,
    opts: &RecvOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<RecvReport, ZmodemError> {
    let mut line = line;
    let mut inbuf = vec![0u8; READ_CHUNK];
    let mut r = Receiver::new(opts.core.clone(), Instant::now());
    let mut report = RecvReport::default();
    let mut cur: Option<Current> = None;
    let mut last_progress = Instant::now();
    let result: Result<(), ZmodemError> = 'run: loop {
        if let Some(signal) = line.stop_asked() {
            // Cancel (the sender is told), then write what was checked.
            r.cancel();
            while let Some(ev) = r.poll_event() {
                if let (RecvEvent::Data { offset, data }, Some(c)) = (ev, cur.as_mut()) {
                    report.bytes += write_data(c, offset, &data).unwrap_or_else(|(n, _)| n);
                }
            }
            break Err(ZmodemError::Stopped { signal });
        }
        // Events first: data to write, offers to decide.
        while let Some(ev) = r.poll_event() {
            match ev {
                RecvEvent::FileOffered(req) => match decide(&req, opts) {
                    Decision::Accept(c) => {
                        progress(Progress::FileStarted {
                            name: c.name.clone(),
                            size: c.size,
                            offset: c.start,
                        });
                        // Positions are 32-bit; decide() refused bigger files.
                        r.accept(Instant::now(), c.start as u32);
                        cur = Some(c);
                    }
                    Decision::Skip {
                        name,
                        reason,
                        refused,
                    } => {
                        if refused {
                            report.refused += 1;
                        } else {
                            report.skipped += 1;
                        }
                        progress(Progress::FileSkipped { name, reason });
                        r.skip(Instant::now());
                    }
                },
                RecvEvent::Data { offset, data } => {
                    let Some(c) = cur.as_mut() else { continue };
                    match write_data(c, offset, &data) {
                        Ok(n) => report.bytes += n,
                        Err((n, e)) => {
                            report.bytes += n;
                            r.cancel();
                            break 'run Err(e);
                        }
                    }
                    if last_progress.elapsed() >= PROGRESS_EVERY {
                        last_progress = Instant::now();
                        progress(Progress::Bytes {
                            pos: offset + data.len() as u64,
                            size: c.size,
                        });
                    }
                }
                RecvEvent::FileDone { size } => {
                    if let Some(c) = cur.take() {
                        finish_file(&c);
                        progress(Progress::FileDone {
                            name: c.name,
                            bytes: size.saturating_sub(c.start),
                            elapsed: c.started.elapsed(),
                        });
                        report.received.push(c.path);
                    }
                }
                RecvEvent::FileAbandoned { .. } => {
                    if let Some(c) = cur.take() {
                        progress(Progress::FileSkipped {
                            name: c.name,
                            reason: "the sender gave it up".into(),
                        });
                    }
                }
                RecvEvent::Retransmit { pos, .. } => progress(Progress::Retransmit { pos }),
                RecvEvent::Finished => {}
            }
        }
        // Answers to the line.
        let pending = r.pending_output();
        if !pending.is_empty() {
            match line.write(pending) {
                Ok(n) => r.consume_output(n),
                Err(e) => break Err(ZmodemError::Line(e)),
            }
            continue;
        }
        if r.is_done() {
            break Ok(());
        }
        let wait = r
            .poll_timeout()
            .map(|d| d.saturating_duration_since(Instant::now()));
        let res = match line.wait_input(wait) {
            Ok(true) => match line.read(&mut inbuf) {
                Ok(0) => r.handle_eof(Instant::now()),
                Ok(n) => r.handle_input(Instant::now(), &inbuf[..n]),
                Err(e) => break Err(ZmodemError::Line(e)),
            },
            Ok(false) => r.handle_timeout(Instant::now()),
            Err(e) => break Err(ZmodemError::Line(e)),
        };
        if let Err(e) = res {
            // Write what was checked before the failure (a partial file to
            // resume), then say why.
            while let Some(ev) = r.poll_event() {
                if let (RecvEvent::Data { offset, data }, Some(c)) = (ev, cur.as_mut()) {
                    report.bytes += write_data(c, offset, &data).unwrap_or_else(|(n, _)| n);
                }
            }
            break Err(e.into());
        }
    };
    let _ = line.write_all(r.pending_output());
    report.retransmits = r.retransmits();
    result.map(|()| report)
}

/// Writes checked data at `offset` of the current file, never past the
/// size the sender announced (a sender that sends more is cut off there:
/// the announced size bounds what an offer can make weir write). Returns
/// the bytes written, or those written and the error.
fn write_data(c: &mut Current, offset: u64, data: &[u8]) -> Result<u64, (u64, ZmodemError)> {
    let room = c
        .size
        .map_or(data.len() as u64, |s| s.saturating_sub(offset));
    let take = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
    if let Err(e) = c.file.write_all_at(&data[..take], offset) {
        let path = c.path.display().to_string();
        return Err((0, ZmodemError::File { path, source: e }));
    }
    if take < data.len() {
        return Err((
            take as u64,
            ZmodemError::Oversize {
                path: c.path.display().to_string(),
                announced: c.size.unwrap_or(0),
            },
        ));
    }
    Ok(take as u64)
}

/// Decides what to do with an offered file: where it goes, whether it may
/// be created, replaced or resumed.
fn decide(req: &FileRequest, opts: &RecvOptions) -> Decision {
    let raw = String::from_utf8_lossy(&req.info.name).into_owned();
    let skip = |reason: String, refused: bool| Decision::Skip {
        name: raw.clone(),
        reason,
        refused,
    };
    // Reject absolute names and `..` anywhere; keep the last component (as
    // lrzsz `rz` does without -p).
    let name = match safepath::relative_components(&raw, Platform::current()) {
        Ok(mut parts) => parts.pop().unwrap_or_default(),
        Err(e) => return skip(format!("refused: {e}"), true),
    };
    if let Some(size) = req.info.size {
        if size > MAX_FILE_SIZE {
            return skip(
                format!("refused: {size} bytes is over ZMODEM's 4 GiB limit"),
                true,
            );
        }
    }
    let path = opts.dir.join(&name);
    let mut start = 0u64;
    let file = match new_file(&path, create_mode(req.info.mode)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let existing = std::fs::symlink_metadata(&path)
                .map(|m| m.len())
                .unwrap_or(0);
            if opts.resume || req.wants_resume() {
                match req.info.size {
                    Some(size) if existing <= size => match open_existing(&path, false) {
                        Ok(f) => {
                            start = existing;
                            f
                        }
                        Err(e) => return skip(format!("cannot open: {e}"), false),
                    },
                    _ => {
                        return skip(
                            "exists and is longer than the offered file; not resumed".into(),
                            false,
                        );
                    }
                }
            } else if opts.overwrite || req.wants_overwrite() {
                match open_existing(&path, true) {
                    Ok(f) => f,
                    Err(e) => return skip(format!("cannot replace: {e}"), false),
                }
            } else {
                return skip("exists (use -y to replace it)".into(), false);
            }
        }
        Err(e) => return skip(format!("cannot create: {e}"), false),
    };
    Decision::Accept(Current {
        path,
        name,
        file,
        size: req.info.size,
        mtime: req.info.mtime,
        mode: req.info.mode,
        start,
        started: Instant::now(),
    })
}

/// Creates a file that does not exist yet (never follows a symlink) with
/// `mode` under the umask.
fn new_file(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
}

/// Opens an existing regular file for writing (not through a symlink).
fn open_existing(path: &Path, truncate: bool) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .truncate(truncate)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(f)
}

/// Applies the sender's modification time and permission bits.
///
/// The time is bounded when parsed ([`weir_zmodem::fileinfo::MAX_MTIME`])
/// and added with `checked_add` here, so no value panics. The mode only
/// ever narrows what the file already allows: a file weir created was
/// opened with the sender's bits (plus owner read/write while it is being
/// written), so the kernel applied the umask then, and `current & sent` is
/// the sender's mode under the umask (a 0777 file becomes 0755 under umask
/// 022). A file that existed before (replaced or resumed) keeps at most its
/// own permissions. Set-user-ID, set-group-ID and sticky bits are never
/// applied.
fn finish_file(c: &Current) {
    if let Some(t) = c
        .mtime
        .filter(|&m| m > 0)
        .and_then(|m| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(m)))
    {
        let _ = c.file.set_modified(t);
    }
    if let Some(sent) = c.mode.map(|m| m & 0o777).filter(|&m| m != 0) {
        if let Ok(md) = c.file.metadata() {
            let now = md.permissions().mode() & 0o777;
            let _ = c
                .file
                .set_permissions(std::fs::Permissions::from_mode(now & sent));
        }
    }
}

/// The bits a new file is created with: the sender's permission bits plus
/// owner read and write (the file is written, and may be resumed), or 0644
/// when the sender gave none; the kernel applies the umask.
fn create_mode(sent: Option<u32>) -> u32 {
    match sent.map(|m| m & 0o777).filter(|&m| m != 0) {
        Some(m) => m | 0o600,
        None => 0o644,
    }
}
