//! What the `weir daemon` tests share: a daemon in a namespace the test
//! creates, `transmission-remote` and a small RPC client run inside it,
//! libtorrent seeders that dial the daemon, and waits on conditions read
//! over RPC (each with a deadline).

#![allow(dead_code)] // each test file uses a part

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use weir_lab::bt::{self, Client, Options};
use weir_lab::process::Proc;
use weir_lab::{Netns, ci, payload};

pub(crate) const WEIR: &str = env!("CARGO_BIN_EXE_weir");
/// The daemon's RPC address in the namespace.
pub(crate) const RPC: &str = "127.0.0.2:9091";
/// Where peers reach the daemon (eD2k on the next port).
pub(crate) const PEERS: &str = "127.0.0.2:6881";

/// Root, namespaces, libtorrent and transmission-remote: present, or the
/// test skips (fails with `CI` set).
pub(crate) fn ready() -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? {
        return Ok(false);
    }
    for p in Client::Libtorrent.programs() {
        if !ci::require_program(&p)? {
            return Ok(false);
        }
    }
    ci::require_program("transmission-remote")
}

/// A file of `size` seeded bytes at `dir/name` and a trackerless torrent
/// of it (256 KiB pieces) made by `weir create`.
pub(crate) fn file_and_torrent(
    dir: &Path,
    name: &str,
    size: u64,
    seed: u64,
) -> anyhow::Result<PathBuf> {
    file_and_torrent_with(dir, name, size, seed, None)
}

/// [`file_and_torrent`] announcing to `tracker` (an announce URL).
pub(crate) fn file_and_torrent_with(
    dir: &Path,
    name: &str,
    size: u64,
    seed: u64,
    tracker: Option<&str>,
) -> anyhow::Result<PathBuf> {
    tree_and_torrent(dir, name, &[(name, size)], seed, tracker)
}

/// Files `(path under dir, size)` and a torrent of `dir/name` (a file or
/// a folder of them) announcing to `tracker`, if any.
pub(crate) fn tree_and_torrent(
    dir: &Path,
    name: &str,
    files: &[(&str, u64)],
    seed: u64,
    tracker: Option<&str>,
) -> anyhow::Result<PathBuf> {
    payload::write_tree(dir, files, seed)?;
    let t = dir.join(format!("{name}.torrent"));
    let mut cmd = Command::new(WEIR);
    cmd.args(["--allow", "127.0.0.0/8", "create"])
        .arg(dir.join(name))
        .arg("-o")
        .arg(&t)
        .args(["--piece-size", "256KiB"]);
    if let Some(url) = tracker {
        cmd.args(["--tracker", url]);
    }
    let out = weir_lab::process::run(&mut cmd, Duration::from_secs(120))?;
    if !out.success() {
        bail!("weir create failed: {}", out.stderr_text());
    }
    Ok(t)
}

/// A libtorrent seeder of `torrent` on `addr` that keeps dialling the
/// daemon while no peer is connected (when `dial`; else the daemon finds
/// it through the torrent's tracker), its upload capped at `cap` bytes/s.
pub(crate) fn seeder(
    ns: &Netns,
    torrent: &Path,
    data: &Path,
    addr: &str,
    cap: Option<u64>,
    dial: bool,
) -> anyhow::Result<Proc> {
    let a: SocketAddrV4 = addr.parse().context("seeder address")?;
    bt::start_seed_with(
        ns,
        &Client::Libtorrent,
        torrent,
        data,
        a,
        &Options {
            dial: if dial {
                Some(PEERS.parse().context("daemon address")?)
            } else {
                None
            },
            upload_limit: cap,
            ..Options::default()
        },
    )
}

/// A running `weir daemon` in a namespace.
pub(crate) struct Daemon {
    pub(crate) proc: Proc,
}

impl Daemon {
    /// Starts `weir daemon` on [`RPC`] / [`PEERS`] with the given
    /// directories (logs in `logs`), and waits for its RPC port.
    pub(crate) fn start(
        ns: &Netns,
        downloads: &Path,
        state: &Path,
        logs: &Path,
        name: &str,
        extra: &[&str],
    ) -> anyhow::Result<Daemon> {
        Self::start_under(ns, &[], downloads, state, logs, name, extra)
    }

    /// [`Daemon::start`] run under `wrapper` (e.g. `prlimit --nofile=N`).
    pub(crate) fn start_under(
        ns: &Netns,
        wrapper: &[&str],
        downloads: &Path,
        state: &Path,
        logs: &Path,
        name: &str,
        extra: &[&str],
    ) -> anyhow::Result<Daemon> {
        let home = logs.join("ed2k-home");
        std::fs::create_dir_all(&home)?;
        let mut cmd = match wrapper.split_first() {
            None => ns.command(WEIR),
            Some((prog, args)) => {
                let mut c = ns.command(prog);
                c.args(args).arg(WEIR);
                c
            }
        };
        cmd.env("WEIR_ED2K_HOME", &home)
            .env_remove("WEIR_ED2K_USER_HASH")
            .env("RUST_LOG", "info")
            .args([
                "--allow",
                "127.0.0.0/8",
                "daemon",
                "--rpc",
                RPC,
                "--listen",
                PEERS,
            ])
            .arg("--download-dir")
            .arg(downloads)
            .arg("--state")
            .arg(state)
            .args(extra);
        // No DHT unless the test asks for one (with --dht-bootstrap).
        if !extra.iter().any(|a| a.starts_with("--dht")) {
            cmd.arg("--no-dht");
        }
        let mut proc = Proc::spawn_logged(name, &mut cmd, logs)?;
        let addr: SocketAddr = RPC.parse()?;
        if let Err(e) = ns.wait_port(addr, Duration::from_secs(30)) {
            return Err(proc.failure(&format!("RPC not listening: {e:#}")));
        }
        Ok(Daemon { proc })
    }

    /// SIGTERM, and the exit code within `limit`.
    pub(crate) fn terminate(&mut self, limit: Duration) -> anyhow::Result<i32> {
        self.proc.signal(nix::sys::signal::Signal::SIGTERM)?;
        let Some((status, _)) = self.proc.wait_timeout(limit)? else {
            bail!(
                "weir daemon did not stop within {limit:?} of SIGTERM:\n{}",
                self.proc.log_tail(30)
            );
        };
        status
            .code()
            .with_context(|| format!("weir daemon ended by a signal: {status:?}"))
    }

    /// kill -9, reaped.
    pub(crate) fn kill9(&mut self) -> anyhow::Result<()> {
        self.proc.signal(nix::sys::signal::Signal::SIGKILL)?;
        if self.proc.wait_timeout(Duration::from_secs(10))?.is_none() {
            bail!("weir daemon survived SIGKILL");
        }
        Ok(())
    }
}

/// `transmission-remote RPC ARGS...` in `ns` (at most 30 s); its stdout
/// and stderr. Fails if it fails.
pub(crate) fn remote(ns: &Netns, args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = ns.command("transmission-remote");
    cmd.arg(RPC).args(args);
    let out = weir_lab::process::run(&mut cmd, Duration::from_secs(30))?;
    let text = format!("{}{}", out.stdout_text(), out.stderr_text());
    if !out.success() {
        bail!(
            "transmission-remote {args:?} failed ({}):\n{text}",
            out.status
        );
    }
    Ok(text)
}

/// The `-l` row of transfer `id`: its columns split on white space.
pub(crate) fn list_row(list: &str, id: u64) -> Option<Vec<String>> {
    list.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cols| {
            cols.first()
                .is_some_and(|c| c.trim_end_matches('*') == id.to_string())
        })
}

/// One classic-form RPC call from inside `ns` (10 s at most); the
/// `arguments` of the answer.
pub(crate) fn rpc(ns: &Netns, method: &str, arguments: Value) -> anyhow::Result<Value> {
    let addr: SocketAddr = RPC.parse()?;
    let method = method.to_string();
    ns.run_in(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let c = weir_daemon::client::RpcClient::new(addr)
                .with_policy(weir_core::policy::NetPolicy::loopback());
            tokio::time::timeout(Duration::from_secs(10), c.call(&method, arguments))
                .await
                .context("RPC call timed out")?
                .map_err(|e| anyhow::anyhow!("{method}: {e}"))
        })
    })
}

/// `torrent-get` of every transfer with `fields`, in id order.
pub(crate) fn torrents(ns: &Netns, fields: &[&str]) -> anyhow::Result<Vec<Value>> {
    let v = rpc(ns, "torrent-get", json!({ "fields": fields }))?;
    Ok(v["torrents"].as_array().cloned().unwrap_or_default())
}

/// Reads `torrent-get` until `done` holds for the transfers (every
/// 200 ms, at most `limit`); the last answer.
pub(crate) fn wait_for(
    ns: &Netns,
    fields: &[&str],
    limit: Duration,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let deadline = Instant::now() + limit;
    loop {
        let t = torrents(ns, fields)?;
        if done(&t) {
            return Ok(t);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {limit:?}; last torrent-get: {t:#?}");
        }
        // Polling a daemon in another process: there is no event to wait on.
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A number field of a `torrent-get` object.
pub(crate) fn num(t: &Value, field: &str) -> u64 {
    t[field].as_u64().unwrap_or_else(|| {
        t[field]
            .as_f64()
            .map_or_else(|| panic!("{field} not a number in {t}"), |f| f as u64)
    })
}

/// Starts `weir seed --ed2k FILE` on `addr` in `ns` (its user hash under
/// `home`); returns it and the link it prints, which names it as the
/// source.
pub(crate) fn ed2k_seed(
    ns: &Netns,
    home: &Path,
    file: &Path,
    addr: &str,
) -> anyhow::Result<(Proc, String)> {
    use std::process::Stdio;
    let mut cmd = ns.command(WEIR);
    cmd.env("WEIR_ED2K_HOME", home)
        .env_remove("WEIR_ED2K_USER_HASH")
        .args(["--allow", "127.0.0.0/8", "seed", "--ed2k"])
        .arg(file)
        .args(["--listen", addr, "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut seed = Proc::spawn("weir seed --ed2k", &mut cmd)?;
    let lines = weir_lab::process::stdout_lines(&mut seed)?;
    let link = weir_lab::process::wait_line(
        &lines,
        Instant::now() + Duration::from_secs(120),
        "link",
        |l| l.starts_with("ed2k://"),
    )?;
    if !link.contains(&format!("|sources,{addr}|")) {
        bail!("the link names no source at {addr}: {link}");
    }
    Ok((seed, link))
}
