//! The line a ZMODEM session runs over: stdin/stdout (a terminal, pipes, a
//! socketpair or a TCP socket handed over by a parent), or a TCP connection
//! weir opens itself. Input is read by a thread in large chunks and handed
//! to the driver through a channel, so the driver can wait for input and
//! for its protocol timer at once, and never reads a byte at a time.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::thread;
use std::time::Duration;

use weir_core::policy::NetPolicy;

/// Size of each read from the line.
pub(crate) const READ_CHUNK: usize = 256 * 1024;

/// One end of a ZMODEM session: where bytes come from and go to.
pub struct Line {
    input: Box<dyn Read + Send>,
    output: File,
}

impl Line {
    /// The process's stdin and stdout, as lrzsz uses them.
    pub fn stdio() -> io::Result<Line> {
        let input = File::from(io::stdin().as_fd().try_clone_to_owned()?);
        let output = File::from(io::stdout().as_fd().try_clone_to_owned()?);
        Ok(Line {
            input: Box::new(input),
            output,
        })
    }

    /// Any pair of file descriptors (pipes, socketpair ends, a socket twice).
    pub fn from_fds(input: OwnedFd, output: OwnedFd) -> Line {
        Line {
            input: Box::new(File::from(input)),
            output: File::from(output),
        }
    }

    /// A connected TCP socket.
    pub fn from_tcp(stream: TcpStream) -> io::Result<Line> {
        stream.set_nonblocking(false)?;
        let output = File::from(OwnedFd::from(stream.try_clone()?));
        Ok(Line {
            input: Box::new(stream),
            output,
        })
    }

    /// Connects to `addr` (checked against `policy`).
    pub fn connect(policy: &NetPolicy, addr: SocketAddr) -> io::Result<Line> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let stream = rt
            .block_on(crate::net::connect_tcp(policy, addr))?
            .into_std()?;
        Line::from_tcp(stream)
    }

    /// Listens on `addr`, accepts one connection allowed by `policy`.
    pub fn listen(policy: &NetPolicy, addr: SocketAddr) -> io::Result<Line> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let stream = rt.block_on(async {
            let l = crate::net::listen_tcp(addr).await?;
            tracing::info!("zmodem: listening on {}", l.local_addr()?);
            crate::net::accept_tcp(policy, &l).await.map(|(s, _)| s)
        })?;
        Line::from_tcp(stream.into_std()?)
    }

    /// Splits the line into its reader thread and writer.
    pub(crate) fn start(self) -> (LineReader, File) {
        let (tx, rx) = mpsc::sync_channel::<Chunk>(8);
        let (back_tx, back_rx) = mpsc::channel::<Vec<u8>>();
        let mut input = self.input;
        let handle = thread::Builder::new()
            .name("zmodem-read".into())
            .spawn(move || read_loop(&mut *input, &tx, &back_rx));
        if let Err(e) = &handle {
            tracing::error!("zmodem: cannot start the reader thread: {e}");
        }
        (LineReader { rx, back: back_tx }, self.output)
    }
}

/// What the reader thread delivers.
pub(crate) enum Chunk {
    /// Bytes read.
    Data(Vec<u8>),
    /// End of input.
    Eof,
    /// A read error.
    Err(io::Error),
}

/// The receiving end of the reader thread.
pub(crate) struct LineReader {
    rx: Receiver<Chunk>,
    back: mpsc::Sender<Vec<u8>>,
}

impl LineReader {
    /// The next chunk if one is ready.
    pub(crate) fn try_next(&self) -> Option<Chunk> {
        match self.rx.try_recv() {
            Ok(c) => Some(c),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Chunk::Eof),
        }
    }

    /// Waits up to `timeout` (forever if `None`) for the next chunk.
    pub(crate) fn next(&self, timeout: Option<Duration>) -> Option<Chunk> {
        match timeout {
            None => Some(self.rx.recv().unwrap_or(Chunk::Eof)),
            Some(t) => match self.rx.recv_timeout(t) {
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(Chunk::Eof),
            },
        }
    }

    /// Gives a buffer back for reuse.
    pub(crate) fn recycle(&self, buf: Vec<u8>) {
        let _ = self.back.send(buf);
    }
}

fn read_loop(input: &mut dyn Read, tx: &SyncSender<Chunk>, back: &Receiver<Vec<u8>>) {
    loop {
        let mut buf = back.try_recv().unwrap_or_default();
        buf.resize(READ_CHUNK, 0);
        match input.read(&mut buf) {
            Ok(0) => {
                let _ = tx.send(Chunk::Eof);
                return;
            }
            Ok(n) => {
                buf.truncate(n);
                if tx.send(Chunk::Data(buf)).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = tx.send(Chunk::Err(e));
                return;
            }
        }
    }
}

/// Writes all of `data`, retrying on interruption.
pub(crate) fn write_some(out: &mut File, data: &[u8]) -> io::Result<usize> {
    loop {
        match out.write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Tunes a line's output. `sndbuf`: bound on what the kernel holds
/// unacknowledged (socket send buffer, or pipe size); `nodelay`: send small
/// writes at once (acknowledged modes). Failures are ignored: a terminal
/// has neither knob.
pub(crate) fn tune_output(fd: BorrowedFd<'_>, sndbuf: Option<usize>, nodelay: bool) {
    let sock = socket2::SockRef::from(&fd);
    let is_socket = sock.r#type().is_ok();
    if is_socket {
        if let Some(n) = sndbuf {
            // Linux doubles the value for its bookkeeping; ask for half.
            if let Err(e) = sock.set_send_buffer_size((n / 2).max(4096)) {
                tracing::debug!("zmodem: SO_SNDBUF: {e}");
            }
        }
        if nodelay {
            // Fails on a Unix socket, which has no Nagle to turn off.
            let _ = sock.set_tcp_nodelay(true);
        }
    } else if let Some(n) = sndbuf {
        set_pipe_size(fd, n);
    }
}

/// Sizes a pipe to `n` bytes (Linux `F_SETPIPE_SZ`); ignored elsewhere.
#[cfg(target_os = "linux")]
fn set_pipe_size(fd: BorrowedFd<'_>, n: usize) {
    use std::os::fd::AsRawFd;
    let n = libc::c_int::try_from(n.max(4096)).unwrap_or(libc::c_int::MAX);
    #[allow(unsafe_code)]
    // SAFETY: `fd` is a valid open descriptor borrowed for the duration of
    // the call; F_SETPIPE_SZ takes an int argument, touches no memory of
    // ours, and fails with EBADF/EINVAL (ignored) on anything not a pipe.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, n) };
    if r < 0 {
        tracing::debug!("zmodem: F_SETPIPE_SZ: {}", io::Error::last_os_error());
    }
}

#[cfg(not(target_os = "linux"))]
fn set_pipe_size(_fd: BorrowedFd<'_>, _n: usize) {}
