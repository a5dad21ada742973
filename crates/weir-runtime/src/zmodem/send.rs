//! Sending files: the driver loop around [`weir_zmodem::Sender`].

use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_zmodem::{FileOffer, SendError, SendEvent, Sender, SenderConfig};

use super::line::{Line, READ_CHUNK, tune_output};
use super::{PROGRESS_EVERY, Progress, ZmodemError};

/// How to send.
#[derive(Clone, Debug)]
pub struct SendOptions {
    /// Protocol settings.
    pub core: SenderConfig,
    /// In streaming mode, cap the line's kernel buffer at this many bytes
    /// (socket send buffer or pipe size) so a line error costs a bounded
    /// retransmission. `None` leaves the kernel's (auto-tuned) buffer, for
    /// a link with a high bandwidth-delay product.
    pub sndbuf: Option<usize>,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            core: SenderConfig::default(),
            sndbuf: Some(256 * 1024),
        }
    }
}

/// What a send did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    /// Files the receiver confirmed.
    pub sent: usize,
    /// Files the receiver skipped.
    pub skipped: usize,
    /// Payload bytes confirmed (without skipped or resumed parts).
    pub bytes: u64,
    /// ZRPOS retransmissions.
    pub restarts: u64,
}

struct Source {
    path: PathBuf,
    file: File,
    name: String,
}

/// Sends `paths` over `line`. Every file is opened and checked first (a
/// file over 4 GiB - 1 is refused before anything is sent).
pub fn send_files(
    line: Line,
    paths: &[PathBuf],
    opts: &SendOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<SendReport, ZmodemError> {
    let mut sources = Vec::with_capacity(paths.len());
    let mut offers = Vec::with_capacity(paths.len());
    for p in paths {
        let (src, offer) = open(p)?;
        if offer.size > weir_zmodem::consts::MAX_FILE_SIZE {
            return Err(SendError::FileTooLarge {
                name: p.display().to_string(),
                size: offer.size,
            }
            .into());
        }
        sources.push(src);
        offers.push(offer);
    }
    let mut line = line;
    let mut s = Sender::new(opts.core.clone(), offers, Instant::now())?;
    let mut buf = vec![0u8; opts.core.chunk.max(READ_CHUNK)];
    let mut inbuf = vec![0u8; READ_CHUNK];
    let mut report = SendReport::default();
    let mut started = (Instant::now(), 0u64);
    let mut last_progress = Instant::now();
    let mut eof = false;
    let result: Result<(), ZmodemError> = 'run: loop {
        if let Some(signal) = line.stop_asked() {
            s.cancel();
            break Err(ZmodemError::Stopped { signal });
        }
        // 1. Whatever the line delivered (without waiting).
        while !eof {
            match line.wait_input(Some(Duration::ZERO)) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => break 'run Err(ZmodemError::Line(e)),
            }
            match line.read(&mut inbuf) {
                Ok(0) => eof = true,
                Ok(n) => {
                    if let Err(e) = s.handle_input(Instant::now(), &inbuf[..n]) {
                        break 'run Err(e.into());
                    }
                }
                Err(e) => break 'run Err(ZmodemError::Line(e)),
            }
        }
        // 2. Events.
        while let Some(ev) = s.poll_event() {
            match ev {
                SendEvent::ReceiverReady { .. } => {
                    // The kernel cap never undercuts the in-flight bound the
                    // core keeps (larger toward a receiver that skips stale
                    // data), and only applies to streaming.
                    let bound = s.in_flight_bound().unwrap_or(0) as usize;
                    let cap = if s.streaming() {
                        opts.sndbuf.map(|c| c.max(bound))
                    } else {
                        None
                    };
                    tune_output(line.output_fd(), cap, s.wants_acks());
                }
                SendEvent::FileStarted { file, offset } => {
                    started = (Instant::now(), offset);
                    progress(Progress::FileStarted {
                        name: sources[file].name.clone(),
                        size: Some(s.position().2),
                        offset,
                    });
                }
                SendEvent::Retransmit { pos, .. } => progress(Progress::Retransmit { pos }),
                SendEvent::FileDone { file, size } => {
                    report.sent += 1;
                    report.bytes += size - started.1;
                    progress(Progress::FileDone {
                        name: sources[file].name.clone(),
                        bytes: size - started.1,
                        elapsed: started.0.elapsed(),
                    });
                }
                SendEvent::FileSkipped { file } => {
                    report.skipped += 1;
                    progress(Progress::FileSkipped {
                        name: sources[file].name.clone(),
                        reason: "the receiver skipped it".into(),
                    });
                }
                SendEvent::Finished => {}
            }
        }
        if s.is_done() {
            break Ok(());
        }
        // 3. File data, read in large chunks, framed at once.
        if let Some(req) = s.poll_data_request() {
            let src = &sources[req.file];
            let n = match read_full_at(&src.file, &mut buf[..req.len], req.offset) {
                Ok(n) => n,
                Err(e) => {
                    break 'run Err(ZmodemError::File {
                        path: src.path.display().to_string(),
                        source: e,
                    });
                }
            };
            if let Err(e) = s.supply_data(Instant::now(), req.file, req.offset, &buf[..n]) {
                break 'run Err(e.into());
            }
            if last_progress.elapsed() >= PROGRESS_EVERY {
                last_progress = Instant::now();
                let (_, pos, size) = s.position();
                progress(Progress::Bytes {
                    pos,
                    size: Some(size),
                });
            }
            continue;
        }
        // 4. Output, in pieces small enough to notice a ZRPOS soon.
        let pending = s.pending_output();
        if !pending.is_empty() {
            let n = pending.len().min(WRITE_PIECE);
            match line.write(&pending[..n]) {
                Ok(n) => s.consume_output(n),
                Err(e) => break 'run Err(ZmodemError::Line(e)),
            }
            continue;
        }
        if eof {
            break Err(ZmodemError::Line(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the receiver closed the line",
            )));
        }
        // 5. Idle: wait for input or the protocol timer.
        let wait = s
            .poll_timeout()
            .map(|d| d.saturating_duration_since(Instant::now()));
        match line.wait_input(wait) {
            Ok(true) => match line.read(&mut inbuf) {
                Ok(0) => eof = true,
                Ok(n) => {
                    if let Err(e) = s.handle_input(Instant::now(), &inbuf[..n]) {
                        break Err(e.into());
                    }
                }
                Err(e) => break Err(ZmodemError::Line(e)),
            },
            Ok(false) => {
                if let Err(e) = s.handle_timeout(Instant::now()) {
                    break Err(e.into());
                }
            }
            Err(e) => break Err(ZmodemError::Line(e)),
        }
    };
    // Whatever is left ("OO", or the cancel sequence after an error).
    let _ = line.write_all(s.pending_output());
    report.restarts = s.restarts();
    result.map(|()| report)
}

/// Largest single write: the core sees a ZRPOS after at most this much.
const WRITE_PIECE: usize = 128 * 1024;

fn open(p: &Path) -> Result<(Source, FileOffer), ZmodemError> {
    let file_err = |e: io::Error| ZmodemError::File {
        path: p.display().to_string(),
        source: e,
    };
    let file = File::open(p).map_err(file_err)?;
    let md = file.metadata().map_err(file_err)?;
    if !md.is_file() {
        return Err(file_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    let base = p.file_name().unwrap_or(p.as_os_str());
    let offer = FileOffer {
        name: base.as_bytes().to_vec(),
        size: md.len(),
        mtime: u64::try_from(md.mtime()).unwrap_or(0),
        mode: md.mode(),
    };
    let src = Source {
        path: p.to_path_buf(),
        file,
        name: base.to_string_lossy().into_owned(),
    };
    Ok((src, offer))
}

/// Reads up to `buf.len()` bytes at `off`, fewer only at end of file.
fn read_full_at(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
