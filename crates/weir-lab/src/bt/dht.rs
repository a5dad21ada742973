//! libtorrent with its DHT on, for magnet tests and benches: a DHT node, a
//! seeder that announces to it, a leecher that starts from a magnet link
//! (see `lt_dht.py` for the settings: only 127.0.0.x nodes, everything
//! else that could reach out off). Run it inside a [`Netns`] holding only
//! `lo`, each instance on its own 127.0.0.x.

use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::netns::Netns;
use crate::process::{Proc, stdout_lines, wait_line};

const SCRIPT: &str = include_str!("lt_dht.py");

/// Whether python3-libtorrent can be used here; when it cannot, the test
/// skips (or fails when `CI` is set, through [`crate::ci::unavailable`]).
pub fn available() -> anyhow::Result<bool> {
    let python = super::clients::PYTHON;
    if !crate::ci::require_program(python)? {
        return Ok(false);
    }
    let ok = std::process::Command::new(python)
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

/// What one instance is.
#[derive(Clone, Copy, Debug)]
pub enum Role<'a> {
    /// A DHT node only.
    Node,
    /// Seeds `torrent` from `dir` (seed mode: no check), announcing to the
    /// DHT every second, starting from the node `boot` (`HOST:PORT`).
    Seed {
        /// The directory holding the torrent's data.
        dir: &'a Path,
        /// The .torrent file.
        torrent: &'a Path,
        /// The DHT node to start from.
        boot: &'a str,
    },
    /// Fetches `magnet` into `dir`, finding peers through the DHT from
    /// `boot`; with `force`, it also forces a DHT announce every second.
    Leech {
        /// Output directory.
        dir: &'a Path,
        /// The magnet link.
        magnet: &'a str,
        /// The DHT node to start from.
        boot: &'a str,
        /// Announce every second (otherwise libtorrent's own schedule).
        force: bool,
    },
}

/// Starts one instance as `name` on `ip:port` in `ns` (the script and its
/// stderr log go to `work`); returns once it printed READY (at most 20 s),
/// with the receiver of the lines it prints after: `ANNOUNCE hash ip
/// port` (a node stored an announce), `METADATA`, `FIRST` (first piece
/// verified), `FINISHED`, each as it happens; a leecher then `FLUSHED`
/// (see [`flushed`]) and exits.
pub fn start(
    ns: &Netns,
    work: &Path,
    name: &str,
    ip: &str,
    port: u16,
    role: Role<'_>,
) -> anyhow::Result<(Proc, Receiver<String>)> {
    let script = work.join("weir_lt_dht.py");
    if !script.exists() {
        super::write_lt_script(work, "weir_lt_dht.py", SCRIPT)?;
    }
    let mut cmd = ns.command(super::clients::PYTHON);
    cmd.arg(&script);
    let port = port.to_string();
    let port = port.as_str();
    let path = |p: &Path| p.as_os_str().to_owned();
    match role {
        Role::Node => {
            cmd.args(["node", ip, port]);
        }
        Role::Seed { dir, torrent, boot } => {
            cmd.args(["seed", ip, port])
                .arg(path(dir))
                .arg(path(torrent))
                .arg(boot);
        }
        Role::Leech {
            dir,
            magnet,
            boot,
            force,
        } => {
            cmd.args(["leech", ip, port])
                .arg(path(dir))
                .args([magnet, boot]);
            if force {
                cmd.arg("force");
            }
        }
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(work.join(format!("{name}.stderr")))?);
    let mut p = Proc::spawn(name, &mut cmd)?;
    let rx = stdout_lines(&mut p)?;
    wait_line(
        &rx,
        Instant::now() + Duration::from_secs(20),
        &format!("{name} READY"),
        |l| l == "READY",
    )
    .map_err(|e| {
        let log = crate::process::tail_file(&work.join(format!("{name}.stderr")), 20);
        anyhow::anyhow!("{e:#}; {}", log)
    })?;
    Ok((p, rx))
}

/// Waits (until `deadline`) for a leecher's `FLUSHED`, printed after
/// `FINISHED` once its session is torn down and its disk threads have
/// written every block: libtorrent 2.0 may call a torrent finished while
/// verified blocks are still in its store buffer, so its file is compared
/// only after this.
pub fn flushed(rx: &Receiver<String>, deadline: Instant) -> anyhow::Result<()> {
    wait_line(rx, deadline, "libtorrent's FLUSHED", |l| l == "FLUSHED").map(drop)
}

/// Waits (at most `timeout`) until the node whose lines are `node` stored
/// an announce of `hash` (hex) from `ip:port`.
pub fn wait_announce(
    node: &Receiver<String>,
    hash: &str,
    ip: &str,
    port: u16,
    timeout: Duration,
) -> anyhow::Result<()> {
    let want = format!("ANNOUNCE {hash} {ip} {port}");
    wait_line(
        node,
        Instant::now() + timeout,
        &format!("{ip}'s announce at the node"),
        |l| l == want,
    )?;
    Ok(())
}
