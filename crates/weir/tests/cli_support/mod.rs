//! Harness for tests that run the built `weir` binary on loopback: every
//! run has a timeout (a hang fails the test instead of stalling CI),
//! background processes are ended by PID when dropped, and their stderr is
//! logged to files for waiting on a line and for failure messages.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) use weir_lab::process::Proc;
pub(crate) use weir_lab::tmpdir::TempDir;

/// The weir binary under test.
pub(crate) fn weir_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

/// A `weir` command in `cwd`, loopback only, with its eD2k home there too.
pub(crate) fn weir(cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(weir_bin());
    c.args(args)
        .current_dir(cwd)
        .env("WEIR_ALLOW", "loopback")
        .env("WEIR_ED2K_HOME", cwd.join(".ed2k-home"))
        .env("RUST_LOG", "warn,weir=info,weir_runtime=info");
    c
}

/// What a finished run printed.
#[derive(Debug)]
pub(crate) struct Ran {
    /// Exit code (`None`: killed at the timeout, or by a signal).
    pub(crate) code: Option<i32>,
    /// Whether it was still running at the timeout.
    pub(crate) timed_out: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `weir args` in `cwd` for at most `timeout` (killed after).
pub(crate) fn run(cwd: &Path, args: &[&str], timeout: Duration) -> Ran {
    let logs = TempDir::new("cli-run").expect("log dir");
    let mut p = Proc::spawn_logged("weir", &mut weir(cwd, args), logs.path()).expect("spawn weir");
    let done = p.wait_timeout(timeout).expect("wait");
    let timed_out = done.is_none();
    let status = match done {
        Some((st, _)) => st,
        None => {
            p.kill_tree_with_grace(Duration::from_millis(200))
                .expect("kill")
                .0
        }
    };
    let read = |f: Option<&Path>| {
        f.and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    Ran {
        code: status.code(),
        timed_out,
        stdout: read(p.stdout_log()),
        stderr: read(p.stderr_log()),
    }
}

/// Starts `weir args` in `cwd` in the background (logs in `logs`).
pub(crate) fn spawn(name: &str, cwd: &Path, args: &[&str], logs: &Path) -> Proc {
    Proc::spawn_logged(name, &mut weir(cwd, args), logs).expect("spawn weir")
}

/// Waits until `p`'s stderr has a line containing `needle`; returns it.
pub(crate) fn wait_stderr(p: &mut Proc, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    let mut nap = Duration::from_millis(2);
    loop {
        let log = p
            .stderr_log()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .unwrap_or_default();
        if let Some(l) = log.lines().find(|l| l.contains(needle)) {
            return l.to_string();
        }
        if Instant::now() >= deadline || !p.is_running() {
            panic!("no {needle:?} from {}:\n{}", p.name(), p.log_tail(30));
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(50));
    }
}

/// The address a weir process said it listens on.
pub(crate) fn listening(p: &mut Proc) -> SocketAddr {
    let line = wait_stderr(p, "listening on ", Duration::from_secs(60));
    let at = line.rfind("listening on ").expect("found") + "listening on ".len();
    line[at..].trim().parse().expect("an address")
}

/// Deterministic bytes.
pub(crate) fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    weir_lab::payload::fill(&mut v, 0, seed);
    v
}

/// `weir create SRC -o OUT --piece-size PIECE` in `cwd`.
pub(crate) fn create(cwd: &Path, src: &str, out: &str, piece: &str) {
    let r = run(
        cwd,
        &["create", src, "-o", out, "--piece-size", piece, "--no-date"],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "weir create: {}", r.stderr);
}

/// `weir seed TORRENT DIR` listening on loopback; its address.
pub(crate) fn seeder(
    cwd: &Path,
    torrent: &str,
    dir: &str,
    logs: &Path,
    extra: &[&str],
) -> (Proc, SocketAddr) {
    let mut args = vec![
        "seed",
        torrent,
        dir,
        "--listen",
        "127.0.0.1:0",
        "--no-trackers",
        "-q",
    ];
    args.extend_from_slice(extra);
    let mut p = spawn("seeder", cwd, &args, logs);
    let a = listening(&mut p);
    (p, a)
}

/// Sends SIGKILL to `p` and reaps it.
pub(crate) fn kill9(p: &mut Proc) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    p.wait_with_usage().expect("reap");
}
