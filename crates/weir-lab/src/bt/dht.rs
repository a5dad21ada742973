//! libtorrent on the DHT only, inside a [`Netns`]: a DHT node, a seeder
//! that announces itself, or a leecher of a magnet link (the script
//! `lt_dht.py`; its header says the modes and what it prints). One
//! process per 127.0.0.x: libtorrent keeps one node per IP in its table.
//!
//! Settings follow the lab's rules for libtorrent's DHT on loopback:
//! `dht_restrict_routing_ips` and `dht_restrict_search_ips` off, no
//! bootstrap routers, LSD, UPnP, NAT-PMP or uTP.

use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::netns::Netns;
use crate::process::{Proc, stdout_lines, wait_line};
use crate::tmpdir::TempDir;

const SCRIPT: &str = include_str!("lt_dht.py");
/// The interpreter python3-libtorrent is installed for.
pub const PYTHON: &str = "/usr/bin/python3";

/// Whether python3-libtorrent can be used here; when it cannot, the test
/// skips (or fails when `CI` is set, through [`crate::ci::unavailable`]).
pub fn available() -> anyhow::Result<bool> {
    if !crate::ci::require_program(PYTHON)? {
        return Ok(false);
    }
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        crate::ci::unavailable("python3-libtorrent is not installed")?;
    }
    Ok(ok)
}

/// Starts the script in `ns` as `name` with `args` (`node IP PORT
/// [BOOT...]`, `seed IP PORT DIR TORRENT [BOOT...]`, `leech IP PORT DIR
/// MAGNET [BOOT...]`), its stderr kept as `dir/<name>.stderr`; returns
/// once it printed READY (within 20 s), with the lines it prints next.
pub fn start(
    ns: &Netns,
    dir: &TempDir,
    name: &str,
    args: &[&str],
) -> anyhow::Result<(Proc, Receiver<String>)> {
    let script = dir.path().join("lt_dht.py");
    if !script.exists() {
        std::fs::write(&script, SCRIPT)?;
    }
    let mut cmd = ns.command(PYTHON);
    cmd.arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(
            dir.path().join(format!("{name}.stderr")),
        )?);
    let mut p = Proc::spawn(name, &mut cmd)?;
    let rx = stdout_lines(&mut p)?;
    wait_line(
        &rx,
        Instant::now() + Duration::from_secs(20),
        &format!("{name} READY"),
        |l| l == "READY",
    )
    .map_err(|e| anyhow::anyhow!("{e:#}; {}", p.log_tail(20)))?;
    Ok((p, rx))
}

/// Waits up to `timeout` for the node printing `lines` to store an announce
/// of `info_hash` (hex) from `ip:port`.
pub fn wait_announce(
    lines: &Receiver<String>,
    info_hash: &str,
    ip: &str,
    port: u16,
    timeout: Duration,
) -> anyhow::Result<()> {
    let want = format!("ANNOUNCE {info_hash} {ip} {port}");
    wait_line(
        lines,
        Instant::now() + timeout,
        &format!("{ip}:{port}'s announce of {info_hash} at the node"),
        |l| l == want,
    )?;
    Ok(())
}
