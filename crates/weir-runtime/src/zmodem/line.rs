//! The line a ZMODEM session runs over: stdin/stdout (a terminal, pipes, a
//! socketpair or a TCP socket handed over by a parent), or a TCP connection
//! weir opens itself.
//!
//! One thread drives a session. It waits for the line with `poll(2)` and
//! the protocol core's next timer as the timeout, reads 256 KiB at a time,
//! and checks for input without blocking between writes, so a ZRPOS is seen
//! after at most one write. No second thread, no channel, no wake-up per
//! chunk.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use weir_core::policy::NetPolicy;

/// Size of each read from the line.
pub(crate) const READ_CHUNK: usize = 256 * 1024;

/// One end of a ZMODEM session: where bytes come from and go to.
pub struct Line {
    input: File,
    output: File,
    /// Wakes the session when a stop is asked for ([`Line::stop_on`]).
    stop: Option<StopRequest>,
    /// Terminal settings to restore when the session ends (stdio on a tty).
    _tty: Option<RawTty>,
}

/// A request to stop a session cleanly: the signal number once asked, and
/// the read end of a pipe that becomes readable then (so a session blocked
/// waiting for the line wakes at once).
#[derive(Debug)]
pub struct StopRequest {
    signal: Arc<AtomicI32>,
    wake: OwnedFd,
}

impl StopRequest {
    /// Stops on SIGINT or SIGTERM: from now on they no longer end the
    /// process; a thread waits for them (tokio's signal handling on a
    /// runtime of its own) and asks the session to stop. A second signal
    /// ends the process at once with 128 + its number.
    pub fn on_signals() -> io::Result<StopRequest> {
        use tokio::signal::unix::{SignalKind, signal};
        let (wake, notify) = nix::unistd::pipe().map_err(io::Error::from)?;
        let sig = Arc::new(AtomicI32::new(0));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // Registered here, before the session starts, not in the thread.
        let (mut int, mut term) = rt.block_on(async {
            Ok::<_, io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        })?;
        let seen = Arc::clone(&sig);
        std::thread::Builder::new()
            .name("weir-zmodem-signals".into())
            .spawn(move || {
                let mut notify = File::from(notify);
                rt.block_on(async {
                    loop {
                        let n = tokio::select! {
                            _ = int.recv() => libc::SIGINT,
                            _ = term.recv() => libc::SIGTERM,
                        };
                        if seen.swap(n, Ordering::SeqCst) != 0 {
                            std::process::exit(128 + n);
                        }
                        let _ = notify.write_all(b"!");
                    }
                });
            })?;
        Ok(StopRequest { signal: sig, wake })
    }

    /// The signal that asked to stop, if one did.
    fn asked(&self) -> Option<i32> {
        Some(self.signal.load(Ordering::SeqCst)).filter(|&n| n != 0)
    }
}

impl Line {
    /// The process's stdin and stdout, as lrzsz uses them. A terminal is put
    /// in raw mode (no echo, no line editing, no CR/LF translation, no
    /// signals from ^C, 8 bits) until the line is dropped, as lrzsz does, so
    /// binary data passes untouched.
    pub fn stdio() -> io::Result<Line> {
        let input = File::from(io::stdin().as_fd().try_clone_to_owned()?);
        let output = File::from(io::stdout().as_fd().try_clone_to_owned()?);
        let tty = RawTty::enter(input.as_fd()).or_else(|| RawTty::enter(output.as_fd()));
        Ok(Line {
            input,
            output,
            stop: None,
            _tty: tty,
        })
    }

    /// Any pair of file descriptors (pipes, socketpair ends, a socket twice).
    pub fn from_fds(input: OwnedFd, output: OwnedFd) -> Line {
        Line {
            input: File::from(input),
            output: File::from(output),
            stop: None,
            _tty: None,
        }
    }

    /// A connected TCP socket.
    pub fn from_tcp(stream: TcpStream) -> io::Result<Line> {
        stream.set_nonblocking(false)?;
        let output = File::from(OwnedFd::from(stream.try_clone()?));
        Ok(Line {
            input: File::from(OwnedFd::from(stream)),
            output,
            stop: None,
            _tty: None,
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

    /// Binds a listener on `addr`; [`LineListener::accept`] then waits for
    /// the one connection the session runs over.
    pub fn bind(addr: SocketAddr) -> io::Result<LineListener> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let listener = rt.block_on(crate::net::listen_tcp(addr))?;
        Ok(LineListener { rt, listener })
    }

    /// Lets `stop` end the session cleanly: the driver then cancels it
    /// (the other side is told), keeps what was checked, and fails with
    /// [`super::ZmodemError::Stopped`].
    pub fn stop_on(mut self, stop: StopRequest) -> Line {
        self.stop = Some(stop);
        self
    }

    /// The signal that asked the session to stop, if one did.
    pub(crate) fn stop_asked(&self) -> Option<i32> {
        self.stop.as_ref().and_then(StopRequest::asked)
    }

    /// Waits until input is readable (or at end), at most `timeout`
    /// (forever if `None`). Returns whether it is; `false` also when a
    /// stop was asked for meanwhile ([`Line::stop_asked`]).
    pub(crate) fn wait_input(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let wake = self.stop.as_ref().map(|s| s.wake.as_fd());
        poll_readable(self.input.as_fd(), wake, timeout)
    }

    /// Reads what is there (blocks if nothing is).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.input.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    /// Writes some of `data` (blocks until at least one byte is taken).
    pub(crate) fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        write_some(&mut self.output, data)
    }

    /// Writes all of `data`.
    pub(crate) fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = self.write(data)?;
            data = &data[n..];
        }
        Ok(())
    }

    /// The output side, for tuning.
    pub(crate) fn output_fd(&self) -> BorrowedFd<'_> {
        self.output.as_fd()
    }
}

/// A bound TCP listener waiting for the session's connection.
pub struct LineListener {
    rt: tokio::runtime::Runtime,
    listener: tokio::net::TcpListener,
}

impl LineListener {
    /// The address actually bound (port 0 picks a free one).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts the first connection `policy` allows; the listener closes.
    pub fn accept(self, policy: &NetPolicy) -> io::Result<Line> {
        let (stream, _) = self
            .rt
            .block_on(crate::net::accept_tcp(policy, &self.listener))?;
        Line::from_tcp(stream.into_std()?)
    }
}

/// A terminal switched to raw mode; its previous settings come back on drop.
struct RawTty {
    fd: OwnedFd,
    saved: libc::termios,
}

impl RawTty {
    /// Raw mode on `fd` if it is a terminal (`None` otherwise).
    fn enter(fd: BorrowedFd<'_>) -> Option<RawTty> {
        let fd = fd.try_clone_to_owned().ok()?;
        #[allow(unsafe_code)]
        // SAFETY: `termios` is a plain C struct of integers and arrays, for
        // which all-zero bytes are a valid value; tcgetattr/cfmakeraw/
        // tcsetattr only read and write the struct we pass by reference,
        // and `fd` is an open descriptor owned here. tcgetattr fails (and we
        // return None) when `fd` is not a terminal.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd.as_raw_fd(), &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            // Reads return what is there, at least one byte.
            raw.c_cc[libc::VMIN] = 1;
            raw.c_cc[libc::VTIME] = 0;
            if libc::tcsetattr(fd.as_raw_fd(), libc::TCSADRAIN, &raw) != 0 {
                return None;
            }
            Some(RawTty { fd, saved })
        }
    }
}

impl Drop for RawTty {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: restores settings read from this same open descriptor;
        // tcsetattr only reads the struct passed by reference.
        unsafe {
            libc::tcsetattr(self.fd.as_raw_fd(), libc::TCSADRAIN, &self.saved);
        }
    }
}

/// `poll(2)` for readability of `fd` (and of `wake`, which only ends the
/// wait: the answer is whether `fd` is readable).
fn poll_readable(
    fd: BorrowedFd<'_>,
    wake: Option<BorrowedFd<'_>>,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    let ms = match timeout {
        None => -1,
        // Round up so a timer is never polled early and spun on.
        Some(t) => libc::c_int::try_from(t.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX),
    };
    let mut pfd = [
        libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            // A negative fd is ignored by poll(2).
            fd: wake.map_or(-1, |w| w.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        #[allow(unsafe_code)]
        // SAFETY: `pfd` is an array of two valid, initialised pollfds that
        // lives on this stack frame for the whole call, and nfds is 2;
        // both descriptors are borrowed and open (or -1, which poll skips).
        // poll(2) only writes the `revents` fields.
        let r = unsafe { libc::poll(pfd.as_mut_ptr(), 2, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // POLLHUP/POLLERR count as readable: the read reports what happened.
        return Ok(r > 0 && pfd[0].revents != 0);
    }
}

/// Writes some of `data`, retrying on interruption.
fn write_some(out: &mut File, data: &[u8]) -> io::Result<usize> {
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
