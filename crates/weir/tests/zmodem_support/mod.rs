//! Harness for the ZMODEM interop tests: payloads, wiring two programs to
//! each other over a socketpair or two pipes, bounded waits.

#![allow(dead_code)]

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// The weir binary under test.
pub(crate) fn weir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

/// Whether `prog` is on PATH.
pub(crate) fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Under CI a missing prerequisite fails the test; elsewhere it is skipped
/// with the reason printed. Returns true when the test should go on.
pub(crate) fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("CI: {what} is required but unavailable");
    }
    eprintln!("skipped: {what} is unavailable");
    false
}

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("weir-zm-{}-{tag}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Deterministic bytes that exercise the escaper: every byte value, runs of
/// ZDLE/XON/XOFF and their high-bit forms, `@` before CR, then noise.
pub(crate) fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend(0u8..=255);
    v.extend_from_slice(b"@\r@\x8d\xc0\r\x18\x18\x18\x18\x18\x11\x13\x91\x93\x10\x90\x98**\x18B");
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// How two programs are wired to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// One socketpair: each side's stdin and stdout are its end.
    SocketPair,
    /// Two pipes, one per direction.
    Pipes,
}

/// Stdin/stdout for two peers joined by `wire`.
pub(crate) fn wire_pair(wire: Wire) -> io::Result<((Stdio, Stdio), (Stdio, Stdio))> {
    match wire {
        Wire::SocketPair => {
            let (a, b) = UnixStream::pair()?;
            let a2 = a.try_clone()?;
            let b2 = b.try_clone()?;
            Ok((
                (
                    Stdio::from(OwnedFd::from(a)),
                    Stdio::from(OwnedFd::from(a2)),
                ),
                (
                    Stdio::from(OwnedFd::from(b)),
                    Stdio::from(OwnedFd::from(b2)),
                ),
            ))
        }
        Wire::Pipes => {
            let (r1, w1) = io::pipe()?;
            let (r2, w2) = io::pipe()?;
            Ok((
                (
                    Stdio::from(OwnedFd::from(r1)),
                    Stdio::from(OwnedFd::from(w2)),
                ),
                (
                    Stdio::from(OwnedFd::from(r2)),
                    Stdio::from(OwnedFd::from(w1)),
                ),
            ))
        }
    }
}

/// A command for weir with the loopback-only network policy.
pub(crate) fn weir_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(weir());
    c.env("WEIR_ALLOW", "127.0.0.0/8").args(args);
    c
}

/// Waits for `child` at most `limit`; kills it (by its own handle) when the
/// limit passes.
pub(crate) fn wait_bounded(mut child: Child, limit: Duration) -> io::Result<ExitStatus> {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let r = child.wait();
        let _ = tx.send(());
        (child, r)
    });
    match rx.recv_timeout(limit) {
        Ok(()) => h.join().map_err(|_| io::Error::other("wait thread"))?.1,
        Err(_) => {
            // SIGKILL by PID: the child is ours and has not been reaped
            // (the waiting thread is still blocked in wait()).
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let _ = h.join();
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("pid {pid} still running after {limit:?}"),
            ))
        }
    }
}

/// Runs `sender` and `receiver` joined by `wire`; both must exit within
/// `limit`. Returns their exit statuses.
pub(crate) fn run_pair(
    wire: Wire,
    mut sender: Command,
    mut receiver: Command,
    limit: Duration,
) -> (ExitStatus, ExitStatus) {
    let ((s_in, s_out), (r_in, r_out)) = wire_pair(wire).unwrap();
    sender.stdin(s_in).stdout(s_out).stderr(Stdio::inherit());
    receiver.stdin(r_in).stdout(r_out).stderr(Stdio::inherit());
    let s = sender.spawn().expect("spawn sender");
    let r = receiver.spawn().expect("spawn receiver");
    // The parent's copies of the fds were moved into the commands and are
    // closed when the commands drop.
    drop(sender);
    drop(receiver);
    let rs = thread::spawn(move || wait_bounded(r, limit));
    let ss = wait_bounded(s, limit).expect("sender finished in time");
    let rs = rs.join().unwrap().expect("receiver finished in time");
    (ss, rs)
}

/// Asserts that every file of `sent` is in `dir` with identical bytes.
pub(crate) fn assert_received(dir: &Path, sent: &[(String, Vec<u8>)], what: &str) {
    for (name, data) in sent {
        let got = fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        assert!(
            got == *data,
            "{what}: {name} differs ({} bytes received, {} sent)",
            got.len(),
            data.len()
        );
    }
}
