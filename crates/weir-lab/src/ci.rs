//! Skip-or-fail policy for tests that need root, namespaces or real programs.
//!
//! Without env `CI` a test whose prerequisite is missing prints
//! `SKIP: reason` to stderr and returns early; with `CI` set (the CI run
//! installs everything) the same situation fails the test, so a missing
//! install step can never turn a red run green.
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
    if std::env::var_os("CI").is_some() {
        anyhow::bail!("required for this test under CI: {reason}");
    }
    eprintln!("SKIP: {reason}");
    Ok(())
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
    fn unavailable_follows_ci_env() {
        // Only the branch matching the current environment can be checked
        // without racing other tests on the process environment.
        let r = unavailable("testing");
        assert_eq!(r.is_err(), std::env::var_os("CI").is_some());
    }
}
