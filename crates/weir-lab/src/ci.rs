//! Skip-or-fail policy for tests that need root, namespaces or real programs.
//!
//! Without env `CI` a test whose prerequisite is missing prints
//! `SKIP: reason` to stderr, records the skip ([`record_skip`]) and returns
//! early; with `CI` set (the CI run installs everything) the same situation
//! fails the test, so a missing install step can never turn a red run
//! green. The test harness hides what a passing test prints, so skips are
//! also appended to the file `WEIR_SKIP_LOG` names: `scripts/test.sh` lists
//! them at the end of the run, and a skipped test is never a silent "ok".
//!
//! ```no_run
//! # fn t() -> anyhow::Result<()> {
//! if !weir_lab::ci::require_program("aria2c")? { return Ok(()); }
//! # Ok(()) }
//! ```

use std::path::PathBuf;

/// Reports that a prerequisite is missing. With env `CI` set this is an
/// error carrying `reason` (the test fails); otherwise it prints
/// `SKIP: reason` to stderr and returns `Ok(())` so the test can return early.
pub fn unavailable(reason: &str) -> anyhow::Result<()> {
    let log = std::env::var_os("WEIR_SKIP_LOG").map(PathBuf::from);
    decide(std::env::var_os("CI").is_some(), log.as_deref(), reason)
}

/// [`unavailable`] with the environment passed in.
fn decide(ci: bool, log: Option<&std::path::Path>, reason: &str) -> anyhow::Result<()> {
    if ci {
        anyhow::bail!("required for this test under CI: {reason}");
    }
    eprintln!("SKIP: {reason}");
    if let Some(log) = log {
        record_skip_to(log, reason);
    }
    Ok(())
}

/// Appends `TEST: reason` to the file named by env `WEIR_SKIP_LOG`, if
/// set (one line per skip; the test is named by its thread, as the test
/// harness names it, and its test binary). For skips decided outside
/// [`unavailable`] too.
pub fn record_skip(reason: &str) {
    if let Some(path) = std::env::var_os("WEIR_SKIP_LOG") {
        record_skip_to(std::path::Path::new(&path), reason);
    }
}

fn record_skip_to(path: &std::path::Path, reason: &str) {
    use std::io::Write;
    let binary = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .map(|n| n.rsplit_once('-').map_or(n.clone(), |(b, _)| b.to_string()))
        .unwrap_or_default();
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("?")
        .to_string();
    let line = format!("{binary}::{test}: {}\n", reason.replace('\n', " "));
    // O_APPEND: lines from parallel tests do not interleave.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// `Ok(true)` when the process is root and can create a network namespace
/// (checked by creating and deleting one); otherwise [`unavailable`] decides:
/// `Ok(false)` (skip) or `Err` (under CI).
pub fn require_root_and_netns() -> anyhow::Result<bool> {
    if !nix::unistd::Uid::effective().is_root() {
        unavailable("needs root to create network namespaces")?;
        return Ok(false);
    }
    if find_program("ip").is_none() {
        unavailable("needs `ip` (iproute2) to create network namespaces")?;
        return Ok(false);
    }
    match crate::netns::Netns::new("probe") {
        Ok(ns) => {
            drop(ns);
            Ok(true)
        }
        Err(e) => {
            unavailable(&format!("cannot create a network namespace: {e:#}"))?;
            Ok(false)
        }
    }
}

/// `Ok(true)` when `name` is found (an absolute path that exists, or a file
/// in `$PATH`); otherwise [`unavailable`] decides.
pub fn require_program(name: &str) -> anyhow::Result<bool> {
    if find_program(name).is_some() {
        return Ok(true);
    }
    unavailable(&format!("program `{name}` is not installed"))?;
    Ok(false)
}

/// The full path of `name`: itself if it contains a `/` and exists, else the
/// first `$PATH` entry holding an executable file of that name.
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sh_and_not_a_made_up_name() {
        assert!(find_program("sh").is_some());
        assert!(find_program("/bin/sh").is_some());
        assert!(find_program("weir-no-such-program-xyz").is_none());
        assert!(find_program("/nonexistent/sh").is_none());
    }

    #[test]
    fn skips_are_recorded_where_the_log_says() {
        let log = std::env::temp_dir().join(format!("weir-skip-log-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        record_skip_to(&log, "needs a thing\nand another");
        record_skip_to(&log, "second");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text:?}");
        assert!(
            lines[0].ends_with(": needs a thing and another")
                && lines[0].contains("skips_are_recorded_where_the_log_says"),
            "{text:?}"
        );
    }

    #[test]
    fn unavailable_fails_under_ci_and_records_otherwise() {
        let log = std::env::temp_dir().join(format!("weir-skip-ci-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let e = decide(true, Some(&log), "a program").unwrap_err();
        assert!(e.to_string().contains("under CI: a program"), "{e}");
        assert!(!log.exists(), "a failure is not a skip");
        decide(false, Some(&log), "a program").unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert!(text.trim_end().ends_with(": a program"), "{text:?}");
    }
}
