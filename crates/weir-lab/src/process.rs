//! Child processes started by the harness: kept by PID, waited with
//! `wait4(2)` for CPU/RSS accounting, and ended by PID with their whole
//! process tree (never by name).
//!
//! A [`Proc`] owns its child until it is reaped: the PID cannot be reused
//! while the child is unreaped (a zombie keeps it), so signals sent to it
//! always reach the right process. Descendants are found by scanning
//! `/proc/*/stat` for parent PIDs and are remembered with their start time,
//! so a recycled PID is never signalled either.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
pub use nix::sys::signal::Signal;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// Resource use of one finished process (and every descendant it reaped),
/// as `wait4(2)` reports it, plus the wall time from spawn to reaping.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// User-mode CPU seconds.
    pub user_s: f64,
    /// Kernel-mode CPU seconds.
    pub sys_s: f64,
    /// Peak resident set size in KiB.
    pub max_rss_kib: u64,
    /// Voluntary context switches (the process blocked).
    pub vol_ctx_switches: u64,
    /// Involuntary context switches (the process was preempted).
    pub invol_ctx_switches: u64,
    /// Seconds from spawn until the process was reaped.
    pub wall_s: f64,
}

impl Usage {
    /// User + system CPU seconds.
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.sys_s
    }
}

/// A running (or finished) child process started by the harness.
///
/// Dropping a `Proc` whose process still runs ends its process tree
/// ([`Proc::kill_tree`]) and reaps it.
#[derive(Debug)]
pub struct Proc {
    name: String,
    pid: i32,
    child: Child,
    started: Instant,
    exited: Option<(ExitStatus, Usage)>,
    stdout_log: Option<PathBuf>,
    stderr_log: Option<PathBuf>,
    /// Directories that live as long as the process (config, logs).
    keep: Vec<crate::tmpdir::TempDir>,
}

/// How long [`Proc::kill_tree`] waits after SIGTERM before SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(5);

impl Proc {
    /// Spawns `cmd` as configured by the caller (stdio included). `name`
    /// labels it in messages.
    pub fn spawn(name: &str, cmd: &mut Command) -> anyhow::Result<Proc> {
        let started = Instant::now();
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        let pid = i32::try_from(child.id()).context("pid out of range")?;
        tracing::debug!("started {name} pid {pid}: {cmd:?}");
        Ok(Proc {
            name: name.to_string(),
            pid,
            child,
            started,
            exited: None,
            stdout_log: None,
            stderr_log: None,
            keep: Vec::new(),
        })
    }

    /// Spawns `cmd` with stdin from `/dev/null` and stdout/stderr written to
    /// `log_dir/<name>.stdout` and `log_dir/<name>.stderr` (see
    /// [`Proc::log_tail`]).
    pub fn spawn_logged(name: &str, cmd: &mut Command, log_dir: &Path) -> anyhow::Result<Proc> {
        let base = crate::netns::sanitize(name);
        let out = log_dir.join(format!("{base}.stdout"));
        let err = log_dir.join(format!("{base}.stderr"));
        let fo = File::create(&out).with_context(|| format!("creating {}", out.display()))?;
        let fe = File::create(&err).with_context(|| format!("creating {}", err.display()))?;
        cmd.stdin(Stdio::null()).stdout(fo).stderr(fe);
        let mut p = Proc::spawn(name, cmd)?;
        p.stdout_log = Some(out);
        p.stderr_log = Some(err);
        Ok(p)
    }

    /// Keeps `dir` until this `Proc` is dropped (after its process has
    /// been ended), for a client's config and log directory.
    pub fn attach(&mut self, dir: crate::tmpdir::TempDir) {
        self.keep.push(dir);
    }

    /// Sends `sig` to the process itself (not its descendants), by PID:
    /// the PID is still this child's while it is unreaped.
    pub fn signal(&mut self, sig: Signal) -> anyhow::Result<()> {
        if self.try_wait()?.is_some() {
            anyhow::bail!("{} (pid {}) has already exited", self.name, self.pid);
        }
        kill(Pid::from_raw(self.pid), sig)
            .with_context(|| format!("sending {sig} to {} (pid {})", self.name, self.pid))
    }

    /// The label given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// When the process was spawned.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The child's stdin pipe, if it was configured with `Stdio::piped()`.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The child's stdout pipe, if it was configured with `Stdio::piped()`.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The child's stderr pipe, if it was configured with `Stdio::piped()`.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// Where stdout is logged ([`Proc::spawn_logged`] only).
    pub fn stdout_log(&self) -> Option<&Path> {
        self.stdout_log.as_deref()
    }

    /// Where stderr is logged ([`Proc::spawn_logged`] only).
    pub fn stderr_log(&self) -> Option<&Path> {
        self.stderr_log.as_deref()
    }

    /// Exit status and usage once reaped.
    pub fn exited(&self) -> Option<(ExitStatus, Usage)> {
        self.exited
    }

    /// Reaps the process if it has exited (without blocking).
    pub fn try_wait(&mut self) -> anyhow::Result<Option<(ExitStatus, Usage)>> {
        if self.exited.is_none() {
            self.exited = wait4(self.pid, libc::WNOHANG)
                .with_context(|| format!("waiting for {} (pid {})", self.name, self.pid))?
                .map(|(st, ru)| (st, usage_of(&ru, self.started.elapsed())));
        }
        Ok(self.exited)
    }

    /// Whether the process is still running (not yet exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Blocks until the process exits; returns its status and resource use.
    pub fn wait_with_usage(&mut self) -> anyhow::Result<(ExitStatus, Usage)> {
        if let Some(done) = self.exited {
            return Ok(done);
        }
        drop(self.child.stdin.take());
        let (st, ru) = wait4(self.pid, 0)
            .with_context(|| format!("waiting for {} (pid {})", self.name, self.pid))?
            .context("wait4 returned no child")?;
        let done = (st, usage_of(&ru, self.started.elapsed()));
        self.exited = Some(done);
        Ok(done)
    }

    /// Waits at most `timeout` for the process to exit (polls with short
    /// bounded intervals). `Ok(None)`: still running.
    pub fn wait_timeout(
        &mut self,
        timeout: Duration,
    ) -> anyhow::Result<Option<(ExitStatus, Usage)>> {
        let deadline = Instant::now() + timeout;
        let mut nap = Duration::from_millis(1);
        loop {
            if let Some(done) = self.try_wait()? {
                return Ok(Some(done));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }

    /// Ends the process and all its descendants by PID: SIGTERM to the whole
    /// tree, up to [`TERM_GRACE`] for the process to exit, then SIGKILL to
    /// whatever of the tree remains; reaps the process and returns its status
    /// and usage.
    pub fn kill_tree(&mut self) -> anyhow::Result<(ExitStatus, Usage)> {
        self.kill_tree_with_grace(TERM_GRACE)
    }

    /// [`Proc::kill_tree`] with an explicit SIGTERM grace period.
    pub fn kill_tree_with_grace(&mut self, grace: Duration) -> anyhow::Result<(ExitStatus, Usage)> {
        if let Some(done) = self.try_wait()? {
            return Ok(done);
        }
        let tree = process_tree(self.pid);
        signal_tree(&tree, Signal::SIGTERM);
        if let Some(done) = self.wait_timeout(grace)? {
            // Descendants that ignored SIGTERM still go.
            signal_tree(&tree, Signal::SIGKILL);
            return Ok(done);
        }
        tracing::warn!(
            "{} (pid {}) ignored SIGTERM; sending SIGKILL",
            self.name,
            self.pid
        );
        let mut tree = tree;
        tree.extend(process_tree(self.pid));
        signal_tree(&tree, Signal::SIGKILL);
        self.wait_with_usage()
    }

    /// CPU seconds used so far by the process and its live descendants
    /// (from `/proc/<pid>/stat`), for processes that are still running
    /// (a seeder during one leech run, say). 0 once reaped.
    pub fn tree_cpu_s(&self) -> f64 {
        if self.exited.is_some() {
            return 0.0;
        }
        tree_cpu_s(self.pid as u32)
    }

    /// The last `lines` lines of the stdout and stderr logs, for error
    /// messages (empty when not logged).
    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        for (what, p) in [("stdout", &self.stdout_log), ("stderr", &self.stderr_log)] {
            if let Some(p) = p {
                let t = tail_file(p, lines);
                if !t.trim().is_empty() {
                    s.push_str(&format!("--- {} {what} ({}):\n{t}", self.name, p.display()));
                    if !t.ends_with('\n') {
                        s.push('\n');
                    }
                }
            }
        }
        s
    }

    /// An error describing this process for a failed step: name, PID, exit
    /// status if any, and the tail of its logs.
    pub fn failure(&mut self, what: &str) -> anyhow::Error {
        let st = match self.try_wait() {
            Ok(Some((st, _))) => format!("exited with {st}"),
            Ok(None) => "still running".to_string(),
            Err(e) => format!("state unknown: {e}"),
        };
        anyhow::anyhow!(
            "{what}: {} (pid {}) {st}\n{}",
            self.name,
            self.pid,
            self.log_tail(20)
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited.is_none()
            && let Err(e) = self.kill_tree()
        {
            tracing::warn!("stopping {} (pid {}): {e:#}", self.name, self.pid);
        }
    }
}

/// The lines a process writes on its (piped) stdout, as they come, read by
/// a thread of their own: for waiting on a line such as a printed link or a
/// "listening on" with [`wait_line`].
pub fn stdout_lines(p: &mut Proc) -> anyhow::Result<std::sync::mpsc::Receiver<String>> {
    use std::io::BufRead;
    let out = p.take_stdout().context("stdout not piped")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// Waits (blocking, until `deadline`) for the first line from `rx` that
/// `pred` accepts, and returns it; `what` names it in the error.
pub fn wait_line(
    rx: &std::sync::mpsc::Receiver<String>,
    deadline: Instant,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if pred(&l) => return Ok(l),
            Ok(_) => {}
            Err(_) => anyhow::bail!("timed out waiting for {what}"),
        }
    }
}

/// How a command run by [`run`] ended, and everything it printed.
#[derive(Clone, Debug)]
pub struct Output {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// CPU, RSS and wall time.
    pub usage: Usage,
}

impl Output {
    /// The exit code (`None` when ended by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// stdout as text (lossy UTF-8).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text (lossy UTF-8).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Collects a pipe into a shared buffer on a thread of its own; the
/// buffer can be read before the pipe closes (what a hung process printed).
fn collect(
    mut r: impl Read + Send + 'static,
) -> (Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let b = Arc::clone(&buf);
    let h = std::thread::spawn(move || {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => b
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    (buf, h)
}

/// Runs `cmd` to its end with stdin from `/dev/null`, capturing stdout and
/// stderr, for at most `limit`. See [`run_with_input`].
pub fn run(cmd: &mut Command, limit: Duration) -> anyhow::Result<Output> {
    run_inner(cmd, None, limit)
}

/// Runs `cmd` to its end with `input` on its stdin (then closed),
/// capturing stdout and stderr, for at most `limit`. A process still
/// running at `limit` is ended by PID with its whole process tree
/// ([`Proc::kill_tree`]) and the error names the command and holds
/// everything it printed: a hang fails the test that ran it instead of
/// stalling the run.
pub fn run_with_input(cmd: &mut Command, input: &[u8], limit: Duration) -> anyhow::Result<Output> {
    run_inner(cmd, Some(input), limit)
}

fn run_inner(cmd: &mut Command, input: Option<&[u8]>, limit: Duration) -> anyhow::Result<Output> {
    let name = std::path::Path::new(cmd.get_program())
        .file_name()
        .map_or_else(|| "command".into(), |n| n.to_string_lossy().into_owned());
    let shown = format!("{cmd:?}");
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut p = Proc::spawn(&name, cmd)?;
    let (out, out_h) = collect(p.take_stdout().context("stdout not piped")?);
    let (err, err_h) = collect(p.take_stderr().context("stderr not piped")?);
    let writer = match (input, p.take_stdin()) {
        (Some(data), Some(mut stdin)) => {
            let data = data.to_vec();
            Some(std::thread::spawn(move || {
                use std::io::Write;
                // The program may exit without reading it all.
                let _ = stdin.write_all(&data);
            }))
        }
        _ => None,
    };
    let done = p.wait_timeout(limit)?;
    let timed_out = done.is_none();
    let (status, usage) = match done {
        Some(d) => d,
        None => p.kill_tree()?,
    };
    // The pipes close when the tree is gone; a descendant that escaped
    // could hold them, so the readers get a bounded wait.
    let deadline = Instant::now() + Duration::from_secs(5);
    for h in [out_h, err_h] {
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }
    if let Some(w) = writer.filter(|w| w.is_finished()) {
        let _ = w.join();
    }
    let take = |b: &Arc<Mutex<Vec<u8>>>| b.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let o = Output {
        status,
        stdout: take(&out),
        stderr: take(&err),
        usage,
    };
    if timed_out {
        anyhow::bail!(
            "{name} did not finish in {:.0} s and was killed (pid {}): {shown}\n--- stdout:\n{}\n--- stderr:\n{}",
            limit.as_secs_f64(),
            p.pid(),
            tail_text(&o.stdout_text(), 40),
            tail_text(&o.stderr_text(), 40),
        );
    }
    Ok(o)
}

/// Waits at most `limit` for a child that is not kept in a [`Proc`];
/// `Ok(None)` if it is still running (the caller decides what to do).
pub fn wait_child(child: &mut Child, limit: Duration) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last `lines` lines of `text`.
fn tail_text(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The last `lines` lines of a text file (at most the last 64 KiB are read).
pub fn tail_file(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    let mut out = all[from..].join("\n");
    out.push('\n');
    out
}

/// `wait4(2)` on one PID, retrying on EINTR. `Ok(None)` with `WNOHANG` when
/// the child has not exited.
fn wait4(pid: i32, options: i32) -> io::Result<Option<(ExitStatus, libc::rusage)>> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `rusage` is a plain C struct of integers, for which the
        // all-zero bit pattern is a valid value; `wait4` is given valid,
        // exclusive pointers to a local c_int and that local struct, which
        // live across the call, and writes nothing else. nix has no wait4.
        #[allow(unsafe_code)]
        let (r, ru) = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            let r = libc::wait4(pid, &mut status, options, &mut ru);
            (r, ru)
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Ok(None);
        }
        return Ok(Some((ExitStatus::from_raw(status), ru)));
    }
}

fn tv_s(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

fn usage_of(ru: &libc::rusage, wall: Duration) -> Usage {
    Usage {
        user_s: tv_s(ru.ru_utime),
        sys_s: tv_s(ru.ru_stime),
        // Linux reports ru_maxrss in KiB.
        max_rss_kib: ru.ru_maxrss.max(0) as u64,
        vol_ctx_switches: ru.ru_nvcsw.max(0) as u64,
        invol_ctx_switches: ru.ru_nivcsw.max(0) as u64,
        wall_s: wall.as_secs_f64(),
    }
}

/// One process of a tree: PID and start time (clock ticks since boot), so a
/// recycled PID is recognised and left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Member {
    pid: i32,
    start: u64,
}

/// Fields of `/proc/<pid>/stat` after the command name: (state, ppid,
/// utime+stime ticks, start time ticks).
fn read_stat(pid: i32) -> Option<(char, i32, u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] = state (field 3), [1] = ppid (4), [11] = utime (14),
    // [12] = stime (15), [19] = starttime (22).
    let state = f.first()?.chars().next()?;
    let ppid = f.get(1)?.parse().ok()?;
    let cpu = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let start = f.get(19)?.parse().ok()?;
    Some((state, ppid, cpu, start))
}

/// Every PID on the system with its parent PID.
fn all_ppids() -> Vec<(i32, i32)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| read_stat(pid).map(|(_, ppid, _, _)| (pid, ppid)))
        .collect()
}

/// `root` and all its live descendants, parents first.
fn process_tree(root: i32) -> Vec<Member> {
    let table = all_ppids();
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        if let Some((_, _, _, start)) = read_stat(p) {
            out.push(Member { pid: p, start });
        }
        todo.extend(table.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
    }
    out
}

fn signal_tree(tree: &[Member], sig: Signal) {
    for m in tree {
        // Only if the PID still names the same process.
        if read_stat(m.pid).map(|(_, _, _, s)| s) == Some(m.start) {
            let _ = kill(Pid::from_raw(m.pid), sig);
        }
    }
}

/// Whether `pid` is alive and not a zombie.
pub(crate) fn is_alive(pid: i32) -> bool {
    matches!(read_stat(pid), Some((state, ..)) if state != 'Z' && state != 'X')
}

/// Sends SIGTERM to each PID, waits up to `grace` for all to exit (or turn
/// into zombies), then SIGKILLs the rest. For processes that are not the
/// caller's children (those in a namespace being torn down).
pub(crate) fn terminate_pids(pids: &[i32], grace: Duration) {
    let members: Vec<Member> = pids
        .iter()
        .filter_map(|&pid| read_stat(pid).map(|(_, _, _, start)| Member { pid, start }))
        .collect();
    signal_tree(&members, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while members.iter().any(|m| is_alive(m.pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left: Vec<Member> = members.into_iter().filter(|m| is_alive(m.pid)).collect();
    signal_tree(&left, Signal::SIGKILL);
}

/// CPU seconds (user + system) used so far by `pid` and its live
/// descendants, read from `/proc`.
pub fn tree_cpu_s(pid: u32) -> f64 {
    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    process_tree(pid as i32)
        .iter()
        .filter_map(|m| read_stat(m.pid).map(|(_, _, cpu, _)| cpu))
        .sum::<u64>() as f64
        / tck
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_and_logs() {
        let dir = crate::tmpdir::TempDir::new("proc-test").unwrap();
        let mut p = Proc::spawn_logged(
            "echoer",
            Command::new("sh").args(["-c", "echo out-line; echo err-line >&2; exit 3"]),
            dir.path(),
        )
        .unwrap();
        let (st, u) = p.wait_with_usage().unwrap();
        assert_eq!(st.code(), Some(3));
        assert!(u.wall_s > 0.0);
        assert!(u.max_rss_kib > 0);
        let tail = p.log_tail(5);
        assert!(
            tail.contains("out-line") && tail.contains("err-line"),
            "{tail}"
        );
        assert!(p.failure("step").to_string().contains("exited with"));
    }

    #[test]
    fn kill_tree_ends_children_too() {
        let mut p = Proc::spawn(
            "tree",
            Command::new("sh")
                .args(["-c", "sleep 300 & sleep 300 & echo ready; wait"])
                .stdout(Stdio::piped()),
        )
        .unwrap();
        let mut out = p.take_stdout().unwrap();
        let mut b = [0u8; 6];
        out.read_exact(&mut b).unwrap();
        let kids: Vec<Member> = process_tree(p.pid)
            .into_iter()
            .filter(|m| m.pid != p.pid)
            .collect();
        assert_eq!(kids.len(), 2, "{kids:?}");
        let (st, _) = p.kill_tree().unwrap();
        assert!(st.signal().is_some() || st.code().is_some());
        // The sleeps were not our children: they were reparented and reaped
        // by init, or are zombies awaiting it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while kids.iter().any(|m| is_alive(m.pid)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(kids.iter().all(|m| !is_alive(m.pid)));
    }

    #[test]
    fn run_captures_output_and_kills_a_hung_command() {
        let o = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 4"]),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(o.code(), Some(4));
        assert_eq!(
            (o.stdout_text(), o.stderr_text()),
            ("out\n".into(), "err\n".into())
        );
        let o = run_with_input(
            &mut Command::new("cat"),
            b"piped in",
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(o.stdout, b"piped in");
        let t = Instant::now();
        let e = run(
            Command::new("sh").args(["-c", "echo before-the-hang; sleep 300"]),
            Duration::from_millis(300),
        )
        .unwrap_err()
        .to_string();
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        assert!(
            e.contains("did not finish") && e.contains("before-the-hang"),
            "{e}"
        );
    }

    #[test]
    fn tail_reads_last_lines() {
        let dir = crate::tmpdir::TempDir::new("tail-test").unwrap();
        let f = dir.path().join("t.txt");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&f, text).unwrap();
        assert_eq!(tail_file(&f, 2), "line 98\nline 99\n");
        assert_eq!(tail_file(&dir.path().join("none"), 2), "");
    }
}
