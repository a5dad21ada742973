//! What every scenario gets from `weir bench`, and helpers for starting
//! weir under the loopback-only network policy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::process::Proc;

/// The network policy every weir process a bench starts runs under.
pub const BENCH_ALLOW: &str = "127.0.0.0/8";

/// Settings shared by every scenario.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The weir binary to benchmark (normally the running executable).
    pub weir_exe: PathBuf,
    /// Where tables, JSON and charts are written.
    pub out_dir: PathBuf,
    /// Runs per cell (median reported).
    pub runs: usize,
    /// Payload size override in MiB (`None`: the scenario's default).
    pub size_mib: Option<u64>,
    /// Scenario-specific `key=value` options (`--set key=value`).
    pub extra: Vec<(String, String)>,
    /// The command line that started the bench (for the report).
    pub command_line: String,
}

impl BenchConfig {
    /// A configuration with defaults: 3 runs, no size override, no extras,
    /// output under `out_dir`.
    pub fn new(weir_exe: PathBuf, out_dir: PathBuf) -> Self {
        Self {
            weir_exe,
            out_dir,
            runs: 3,
            size_mib: None,
            extra: Vec::new(),
            command_line: String::new(),
        }
    }

    /// A command running the weir binary under the bench network policy
    /// (`--allow 127.0.0.0/8` and `WEIR_ALLOW`); add the subcommand and its
    /// arguments. To run it inside a namespace, use [`BenchConfig::weir_argv`]
    /// with `Netns::command`.
    pub fn weir(&self) -> Command {
        let mut c = Command::new(&self.weir_exe);
        c.env("WEIR_ALLOW", BENCH_ALLOW)
            .args(["--allow", BENCH_ALLOW]);
        c
    }

    /// The weir binary and the policy arguments, to prefix a command line
    /// or a `weir_lab::bt::CommandClient` template:
    /// `[weir_exe, "--allow", "127.0.0.0/8"]`.
    pub fn weir_argv(&self) -> Vec<String> {
        vec![
            self.weir_exe.to_string_lossy().into_owned(),
            "--allow".into(),
            BENCH_ALLOW.into(),
        ]
    }

    /// The value of `--set key=...` (the last one given), if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.extra
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `--set key=...` parsed as `T`, or `default` when absent; a value
    /// that does not parse is an error naming the key.
    pub fn get_or<T: FromStr>(&self, key: &str, default: T) -> anyhow::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|e| anyhow::anyhow!("--set {key}={v}: {e}")),
        }
    }

    /// Payload size in bytes: `--size-mib` or `default_mib`.
    pub fn size_bytes(&self, default_mib: u64) -> u64 {
        self.size_mib.unwrap_or(default_mib) << 20
    }

    /// Errors for `--set` keys the scenario does not know (typos would
    /// otherwise be ignored silently).
    pub fn check_keys(&self, known: &[&str]) -> anyhow::Result<()> {
        for (k, _) in &self.extra {
            if !known.contains(&k.as_str()) {
                anyhow::bail!("unknown --set key {k:?} (known: {})", known.join(", "));
            }
        }
        Ok(())
    }

    /// Creates the output directory.
    pub fn ensure_out_dir(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.out_dir)
            .with_context(|| format!("creating {}", self.out_dir.display()))
    }
}

/// Parses `key=value` (for `--set`).
pub fn parse_set(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected key=value, got {s:?}")),
    }
}

/// The number in line `key` (`"VmRSS:"`, `"VmHWM:"`, `"Threads:"`) of
/// the text of a `/proc/<pid>/status` file; `None` when absent or garbled.
pub fn status_field(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse::<f64>()
        .ok()
}

/// The number in line `key` (`"VmRSS:"`, `"VmHWM:"`, `"Threads:"`) of
/// `/proc/<pid>/status` (KiB for the memory lines); NaN when absent.
pub fn proc_status_field(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| status_field(&s, key))
        .unwrap_or(f64::NAN)
}

/// Median of the values (mean of the middle two for an even count); `None`
/// when empty. NaNs are ignored.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Waits for a line containing `needle` in the log file `log` of `p`
/// (its stderr or stdout log); returns the line. Fails when `p` exits
/// first or after `timeout`, with the log's tail.
pub fn log_line(
    p: &mut Proc,
    log: &Path,
    needle: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + timeout;
    let mut nap = Duration::from_millis(2);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains(needle)) {
            return Ok(l.to_string());
        }
        if Instant::now() >= deadline || !p.is_running() {
            return Err(p.failure(&format!("waiting for {needle:?}")));
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(50));
    }
}

/// `40MB/s`, `20MiB/s`, `500kB/s`, `64KiB/s`, `400Mbit/s` or plain bytes
/// per second (for `--set rate=`), as [`weir_core::units::rate`] reads
/// them; above 0.
pub fn parse_rate(s: &str) -> anyhow::Result<u64> {
    let r = weir_core::units::rate(s).map_err(|e| anyhow::anyhow!("--set rate={s}: {e}"))?;
    if r == 0 {
        bail!("--set rate={s}: must be above 0");
    }
    Ok(r)
}

/// A payload size for `--set size=`: `1GiB`, `256MiB`, `1.5GB`, or a plain
/// number of MiB (`256`), at least 1 MiB.
pub fn parse_payload_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let b = if !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        weir_core::units::size(&format!("{t}MiB"))
    } else {
        weir_core::units::size(t)
    }
    .map_err(|e| anyhow::anyhow!("--set size={s}: {e} (e.g. 1GiB, 256MiB or 256 for MiB)"))?;
    if b < 1 << 20 {
        bail!("--set size={s}: at least 1 MiB");
    }
    Ok(b)
}

/// Writes and deletes a file as large as the payload, right before each
/// timed run: on this kind of virtual machine memory the guest freed is
/// handed back to the host (free page reporting, DAMON pageout) a few
/// seconds later, and the next writer to touch it pays for the host
/// faulting it in again. Measured here: weir's buffered writes into large
/// page-cache folios took 9.3-10.2 s for 1 GiB after a libtorrent run
/// (copy_folio_from_iter_atomic) and 1.5 s right after this warm-up, so
/// without it the bill went to whichever client happened to run next.
pub fn warm_page_cache(dir: &Path, size: u64) -> anyhow::Result<()> {
    let p = dir.join("warm.bin");
    weir_lab::payload::write(&p, size, 2)?;
    std::fs::remove_file(&p)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }

    #[test]
    fn set_options() {
        let mut c = BenchConfig::new("weir".into(), "out".into());
        c.extra = vec![
            parse_set("rtt=150ms").unwrap(),
            parse_set("peers=3").unwrap(),
            parse_set("peers=4").unwrap(),
        ];
        assert_eq!(c.get("rtt"), Some("150ms"));
        assert_eq!(c.get_or("peers", 1u32).unwrap(), 4);
        assert_eq!(c.get_or("absent", 7u32).unwrap(), 7);
        assert!(c.get_or::<u32>("rtt", 0).is_err());
        assert!(c.check_keys(&["rtt", "peers"]).is_ok());
        assert!(c.check_keys(&["rtt"]).is_err());
        assert!(parse_set("novalue").is_err());
        assert!(parse_set("=x").is_err());
        assert_eq!(parse_set("k=a=b").unwrap(), ("k".into(), "a=b".into()));
        assert_eq!(c.size_bytes(256), 256 << 20);
        let argv = c.weir_argv();
        assert_eq!(argv[1..], ["--allow".to_string(), BENCH_ALLOW.to_string()]);
        let cmd = c.weir();
        assert!(cmd.get_args().any(|a| a == BENCH_ALLOW));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("40MB/s").unwrap(), 40_000_000);
        assert_eq!(parse_rate("20MiB/s").unwrap(), 20 << 20);
        assert_eq!(parse_rate("500kB/s").unwrap(), 500_000);
        assert_eq!(parse_rate("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_rate("1234").unwrap(), 1234);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }
}
