//! Running a receiver under `valgrind --tool=callgrind`: where a run
//! writes its profile and log, the wrapper command line, reading the
//! profile back through `callgrind_annotate`, and switching a daemon's
//! instrumentation on and off with `callgrind_control`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use weir_lab::netns::Netns;
use weir_lab::process::Proc;

use super::profile::{Profile, parse_annotate};

/// Where one callgrind run writes its profile and valgrind's messages.
pub(super) struct Callgrind {
    out: PathBuf,
    log: PathBuf,
}

impl Callgrind {
    pub(super) fn new(dir: &Path, tag: &str) -> Self {
        Callgrind {
            out: dir.join(format!("{tag}.callgrind")),
            log: dir.join(format!("{tag}.valgrind.log")),
        }
    }

    /// `valgrind --tool=callgrind --callgrind-out-file=... --log-file=...`,
    /// to put before the receiver's command line.
    pub(super) fn wrapper(&self) -> Vec<String> {
        vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", self.out.display()),
            format!("--log-file={}", self.log.display()),
        ]
    }

    /// A command running `program` under callgrind inside `ns`.
    pub(super) fn command(&self, ns: &Netns, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let w = self.wrapper();
        let mut c = ns.command(&w[0]);
        c.args(&w[1..]).arg(program);
        c
    }

    /// The last lines of valgrind's log, for errors.
    pub(super) fn log_tail(&self) -> String {
        weir_lab::process::tail_file(&self.log, 15)
    }

    /// The profile written at the receiver's exit.
    pub(super) fn profile(&self) -> anyhow::Result<Profile> {
        annotate(&self.out).with_context(|| format!("valgrind's log:\n{}", self.log_tail()))
    }
}

/// `callgrind_annotate --tree=caller --inclusive=no` of `file`, parsed.
fn annotate(file: &Path) -> anyhow::Result<Profile> {
    let out = weir_lab::process::run(
        Command::new("callgrind_annotate")
            .args([
                "--tree=caller",
                "--inclusive=no",
                "--threshold=100",
                "--auto=no",
            ])
            .arg(file),
        Duration::from_secs(600),
    )
    .with_context(|| format!("callgrind_annotate {}", file.display()))?;
    if !out.success() {
        bail!(
            "callgrind_annotate {}: {} {}",
            file.display(),
            out.status,
            out.stderr_text().lines().next().unwrap_or("")
        );
    }
    let p = parse_annotate(&out.stdout_text())
        .with_context(|| format!("reading callgrind_annotate's output for {}", file.display()))?;
    if p.total == 0 {
        bail!("{}: no instructions counted", file.display());
    }
    Ok(p)
}

/// `callgrind_control -i on|off PID`: switches the instrumentation of a
/// process under callgrind on or off (it was started with
/// `--instr-atstart=no`). A window counted this way is exact when the
/// profile is written at the process's exit; a mid-run `--dump` (or
/// `--zero`) is not: the functions active at that moment get their
/// callees' cost as their own in `callgrind_annotate`'s output.
pub(super) fn callgrind_instrument(on: bool, pid: u32) -> anyhow::Result<()> {
    let action = if on { "on" } else { "off" };
    let out = weir_lab::process::run(
        Command::new("callgrind_control").args(["-i", action, &pid.to_string()]),
        Duration::from_secs(120),
    )?;
    let text = out.stdout_text() + &out.stderr_text();
    if !out.success() || !text.contains("OK") {
        bail!(
            "callgrind_control -i {action} {pid}: {} {}",
            out.status,
            text.trim()
        );
    }
    Ok(())
}

/// How long one receiver may take under valgrind.
pub(super) fn limit(size: u64) -> Duration {
    Duration::from_secs(300 + size / 250_000)
}

/// Waits for a receiver run by `Proc` to exit 0 within `limit`.
pub(super) fn wait_ok(p: &mut Proc, limit: Duration) -> anyhow::Result<f64> {
    match p.wait_timeout(limit)? {
        Some((st, usage)) if st.success() => Ok(usage.wall_s),
        Some((st, _)) => Err(p.failure(&format!("exited with {st}"))),
        None => {
            p.kill_tree()?;
            bail!("{} did not finish within {limit:?}", p.name())
        }
    }
}
