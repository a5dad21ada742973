//! Command lines and config files of each real client (settings mirror
//! `shared/lab/bt/clients`, written anew here).

use std::net::SocketAddrV4;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::{Client, CommandClient, Launched, Options};
use crate::netns::Netns;
use crate::process::Proc;
use crate::tmpdir::TempDir;
use crate::torrent::TorrentInfo;

/// The Python that has Debian's libtorrent bindings (a pyenv shim on PATH
/// may shadow it).
pub(crate) const PYTHON: &str = "/usr/bin/python3";

const LT_ADAPTER: &str = include_str!("lt_adapter.py");
const QBT_ADAPTER: &str = include_str!("qbt_adapter.py");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Seed,
    Leech,
}

pub(crate) fn abs(p: &Path) -> anyhow::Result<PathBuf> {
    std::fs::canonicalize(p).with_context(|| format!("resolving {}", p.display()))
}

fn s(p: &Path) -> anyhow::Result<String> {
    p.to_str()
        .map(str::to_string)
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// A `#!/bin/sh` hook that creates `flag` (arguments ignored).
pub(crate) fn write_hook(work: &TempDir, name: &str, flag: &Path) -> anyhow::Result<PathBuf> {
    let hook = work.path().join(name);
    let flag = s(flag)?;
    if flag.contains('\'') {
        bail!("flag path {flag:?} contains a quote");
    }
    std::fs::write(&hook, format!("#!/bin/sh\n: > '{flag}'\n"))?;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))?;
    Ok(hook)
}

/// aria2c with every discovery feature off, bound to `addr`, saving into
/// `dir`, running `hook` when a download completes (before any seeding);
/// the role's options and the torrent are added by the caller.
pub(crate) fn aria2_command(
    ns: &Netns,
    addr: SocketAddrV4,
    work: &TempDir,
    hook: &Path,
    dir: &Path,
) -> anyhow::Result<Command> {
    let mut c = ns.command("aria2c");
    c.args([
        "--no-conf=true",
        "--enable-dht=false",
        "--enable-dht6=false",
        "--bt-enable-lpd=false",
        "--enable-peer-exchange=false",
        "--disable-ipv6=true",
        "--enable-rpc=false",
        "--bt-save-metadata=false",
        "--bt-metadata-only=false",
        "--follow-torrent=false",
        "--summary-interval=0",
        "--console-log-level=notice",
        "--show-console-readout=false",
        "--bt-stop-timeout=0",
    ])
    .arg(format!("--listen-port={}", addr.port()))
    .arg(format!("--interface={}", addr.ip()))
    .arg(format!(
        "--dht-file-path={}",
        s(&work.path().join("dht.dat"))?
    ))
    .arg(format!("--on-bt-download-complete={}", s(hook)?))
    .arg("-d")
    .arg(dir);
    Ok(c)
}

/// A lab adapter script's command in `ns` (under `wrapper`): `python3
/// SCRIPT seed|leech --torrent T --dir D --ip IP --port PORT`.
fn adapter_command(
    ns: &Netns,
    wrapper: &[String],
    script: &Path,
    role: Role,
    torrent: &Path,
    dir: &Path,
    addr: SocketAddrV4,
) -> Command {
    let mut c = wrapped(ns, wrapper, PYTHON);
    c.arg(script)
        .arg(if role == Role::Seed { "seed" } else { "leech" })
        .arg("--torrent")
        .arg(torrent)
        .arg("--dir")
        .arg(dir)
        .args(["--ip", &addr.ip().to_string()])
        .args(["--port", &addr.port().to_string()]);
    c
}

/// What every adapter takes after its own options: `--timeout`, the
/// flag it touches (`--ready` seeding, `--done` leeching) and `--peer`s.
fn adapter_tail(c: &mut Command, role: Role, opts: &Options, flag: &Path) {
    c.args(["--timeout", &opts.timeout.as_secs_f64().to_string()]);
    c.arg(if role == Role::Seed {
        "--ready"
    } else {
        "--done"
    })
    .arg(flag);
    for p in &opts.peers {
        c.arg("--peer").arg(p.to_string());
    }
}

/// A command running `program` inside `ns`, under `wrapper` when it is
/// not empty (`ip netns exec NAME wrapper... program`).
fn wrapped(ns: &Netns, wrapper: &[String], program: impl AsRef<std::ffi::OsStr>) -> Command {
    match wrapper.split_first() {
        None => ns.command(program),
        Some((first, rest)) => {
            let mut c = ns.command(first);
            c.args(rest).arg(program);
            c
        }
    }
}

/// Starts `client` for `role`. `dir` is the data dir (seed) or output dir
/// (leech).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    ns: &Netns,
    client: &Client,
    role: Role,
    torrent: &Path,
    info: &TorrentInfo,
    dir: &Path,
    addr: SocketAddrV4,
    opts: &Options,
    work: &TempDir,
) -> anyhow::Result<Launched> {
    let torrent = abs(torrent)?;
    let dir = abs(dir)?;
    let flag = work.path().join(match role {
        Role::Seed => "ready.flag",
        Role::Leech => "done.flag",
    });
    let label = format!(
        "{}-{}",
        client.name(),
        if role == Role::Seed { "seed" } else { "leech" }
    );
    let logs = work.path();
    let wraps = matches!(
        client,
        Client::Libtorrent | Client::LibtorrentHps | Client::Command(_)
    );
    if !opts.wrapper.is_empty() && !wraps {
        bail!(
            "{}: a wrapper is supported for libtorrent and command clients only",
            client.name()
        );
    }
    match client {
        Client::Libtorrent | Client::LibtorrentHps => {
            let script = super::write_lt_script(work.path(), "weir_lt_adapter.py", LT_ADAPTER)?;
            let mut c = adapter_command(ns, &opts.wrapper, &script, role, &torrent, &dir, addr);
            c.args([
                "--preset",
                if *client == Client::LibtorrentHps {
                    "hps"
                } else {
                    "default"
                },
            ]);
            adapter_tail(&mut c, role, opts, &flag);
            if let Some(d) = opts.dial {
                c.arg("--dial").arg(d.to_string());
            }
            if let Some(l) = opts.download_limit {
                c.arg("--dl-limit").arg(l.to_string());
            }
            if let Some(l) = opts.upload_limit {
                c.arg("--ul-limit").arg(l.to_string());
            }
            if let (Role::Leech, Some(m)) = (role, &opts.magnet) {
                c.arg("--magnet").arg(m);
            }
            c.args(&opts.extra_args);
            let proc = Proc::spawn_logged(&label, &mut c, logs)?;
            Ok(Launched {
                proc,
                flag: Some(flag),
                rpc: None,
            })
        }
        Client::Aria2 => {
            let hook = write_hook(work, "aria2-hook.sh", &flag)?;
            let mut c = aria2_command(ns, addr, work, &hook, &dir)?;
            match role {
                Role::Seed => c.args([
                    "--check-integrity=true",
                    "--bt-seed-unverified=false",
                    "--seed-ratio=0.0",
                ]),
                Role::Leech => c.args(["--seed-time=0"]),
            };
            c.args(&opts.extra_args).arg(&torrent);
            let proc = Proc::spawn_logged(&label, &mut c, logs)?;
            Ok(Launched {
                proc,
                flag: Some(flag),
                rpc: None,
            })
        }
        Client::Transmission => {
            launch_transmission(ns, role, &torrent, &dir, addr, opts, work, &flag, &label)
        }
        Client::Qbittorrent => {
            let script = work.path().join("weir_qbt_adapter.py");
            std::fs::write(&script, QBT_ADAPTER)?;
            let profile = work.subdir("qbittorrent")?;
            let mut c = adapter_command(ns, &[], &script, role, &torrent, &dir, addr);
            c.args(["--webui", &webui_port(addr.port()).to_string()])
                .arg("--profile")
                .arg(&profile)
                .args(["--protocol", if opts.utp { "both" } else { "tcp" }])
                .env("HOME", &profile);
            adapter_tail(&mut c, role, opts, &flag);
            c.args(&opts.extra_args);
            let proc = Proc::spawn_logged(&label, &mut c, logs)?;
            Ok(Launched {
                proc,
                flag: Some(flag),
                rpc: None,
            })
        }
        Client::Rtorrent => {
            let cfg = work.subdir("rtorrent")?;
            let event = match role {
                Role::Seed => "event.download.hash_done",
                Role::Leech => "event.download.finished",
            };
            let rc = format!(
                "system.daemon.set = true\n\
                 network.bind_address.set = {ip}\n\
                 network.local_address.set = {ip}\n\
                 network.port_range.set = {port}-{port}\n\
                 network.port_random.set = no\n\
                 dht.mode.set = disable\n\
                 protocol.pex.set = no\n\
                 trackers.use_udp.set = no\n\
                 directory.default.set = {dir}\n\
                 session.path.set =\n\
                 throttle.global_down.max_rate.set = 0\n\
                 throttle.global_up.max_rate.set = 0\n\
                 pieces.memory.max.set = 2048M\n\
                 pieces.hash.on_completion.set = no\n\
                 method.set_key = {event}, weirlab, \"execute.nothrow=touch,{flag}\"\n\
                 load.start = {torrent}\n",
                ip = addr.ip(),
                port = addr.port(),
                dir = s(&dir)?,
                flag = s(&flag)?,
                torrent = s(&torrent)?,
            );
            let rcpath = cfg.join("rtorrent.rc");
            std::fs::write(&rcpath, rc)?;
            let mut c = ns.command("rtorrent");
            c.arg("-n")
                .arg("-o")
                .arg(format!("import={}", s(&rcpath)?))
                .env("HOME", &cfg);
            c.args(&opts.extra_args);
            let proc = Proc::spawn_logged(&label, &mut c, logs)?;
            Ok(Launched {
                proc,
                flag: Some(flag),
                rpc: None,
            })
        }
        Client::Command(cc) => launch_command(
            ns, cc, role, &torrent, info, &dir, addr, opts, &flag, logs, &label,
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn launch_command(
    ns: &Netns,
    cc: &CommandClient,
    role: Role,
    torrent: &Path,
    info: &TorrentInfo,
    dir: &Path,
    addr: SocketAddrV4,
    opts: &Options,
    flag: &Path,
    logs: &Path,
    label: &str,
) -> anyhow::Result<Launched> {
    let tpl = match role {
        Role::Seed => &cc.seed,
        Role::Leech => &cc.leech,
    };
    let Some((prog, args)) = tpl.split_first() else {
        bail!("command client {} has no {role:?} command", cc.name);
    };
    let peers: Vec<String> = opts.peers.iter().map(|p| p.to_string()).collect();
    let subst = |a: &str| -> anyhow::Result<String> {
        Ok(a.replace("{torrent}", &s(torrent)?)
            .replace("{dir}", &s(dir)?)
            .replace("{ip}", &addr.ip().to_string())
            .replace("{port}", &addr.port().to_string())
            .replace("{addr}", &addr.to_string())
            .replace("{peers}", &peers.join(","))
            .replace("{peer}", peers.first().map(String::as_str).unwrap_or(""))
            .replace("{ready}", &s(flag)?)
            .replace("{tracker}", info.announce.as_deref().unwrap_or("")))
    };
    let mut c = wrapped(ns, &opts.wrapper, subst(prog)?);
    for a in args {
        c.arg(subst(a)?);
    }
    c.args(&opts.extra_args);
    let uses_ready = tpl.iter().any(|a| a.contains("{ready}"));
    let proc = Proc::spawn_logged(label, &mut c, logs)?;
    let flag = (role == Role::Seed && uses_ready).then(|| flag.to_path_buf());
    Ok(Launched {
        proc,
        flag,
        rpc: None,
    })
}

/// Web API port of a qBittorrent instance: its peer port +/- 3100 (beside
/// Transmission's +/- 3000 in one namespace).
fn webui_port(peer_port: u16) -> u16 {
    if peer_port <= 62_435 {
        peer_port + 3100
    } else {
        peer_port - 3100
    }
}

/// RPC port of a Transmission instance: its peer port +/- 3000, so two
/// instances with different peer ports never share it.
fn rpc_port(peer_port: u16) -> u16 {
    if peer_port <= 62_535 {
        peer_port + 3000
    } else {
        peer_port - 3000
    }
}

#[allow(clippy::too_many_arguments)]
fn launch_transmission(
    ns: &Netns,
    role: Role,
    torrent: &Path,
    dir: &Path,
    addr: SocketAddrV4,
    opts: &Options,
    work: &TempDir,
    flag: &Path,
    label: &str,
) -> anyhow::Result<Launched> {
    let cfg = work.subdir("transmission")?;
    let rpc = SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, rpc_port(addr.port()));
    let done = write_hook(work, "transmission-done.sh", flag)?;
    let settings = format!(
        r#"{{
  "bind-address-ipv4": "{ip}",
  "bind-address-ipv6": "::1",
  "dht-enabled": false,
  "lpd-enabled": false,
  "pex-enabled": false,
  "utp-enabled": {utp},
  "port-forwarding-enabled": false,
  "blocklist-enabled": false,
  "blocklist-url": "http://127.0.0.1:1/disabled",
  "peer-port": {port},
  "peer-port-random-on-start": false,
  "rpc-enabled": true,
  "rpc-bind-address": "127.0.0.1",
  "rpc-port": {rpcport},
  "rpc-whitelist": "127.0.0.1",
  "rpc-whitelist-enabled": true,
  "rpc-host-whitelist-enabled": false,
  "rpc-authentication-required": false,
  "download-dir": "{dir}",
  "incomplete-dir-enabled": false,
  "watch-dir-enabled": false,
  "start-added-torrents": true,
  "download-queue-enabled": false,
  "seed-queue-enabled": false,
  "queue-stalled-enabled": false,
  "ratio-limit-enabled": false,
  "idle-seeding-limit-enabled": false,
  "speed-limit-down-enabled": false,
  "speed-limit-up-enabled": false,
  "alt-speed-enabled": false,
  "alt-speed-time-enabled": false,
  "script-torrent-done-enabled": {script},
  "script-torrent-done-filename": "{done}",
  "message-level": 1
}}
"#,
        ip = addr.ip(),
        port = addr.port(),
        rpcport = rpc.port(),
        dir = s(dir)?,
        script = role == Role::Leech,
        done = s(&done)?,
        utp = opts.utp,
    );
    std::fs::write(cfg.join("settings.json"), settings)?;
    let mut c = ns.command("transmission-daemon");
    c.arg("-f")
        .arg("-g")
        .arg(&cfg)
        .args([
            "--no-dht",
            "--no-lpd",
            "--no-portmap",
            "--no-blocklist",
            "-T",
            "--no-incomplete-dir",
        ])
        .args(["-i", &addr.ip().to_string(), "-r", "127.0.0.1"])
        .args([
            "-p",
            &rpc.port().to_string(),
            "-P",
            &addr.port().to_string(),
        ])
        .arg("-w")
        .arg(dir)
        .env("HOME", &cfg);
    c.args(&opts.extra_args);
    let mut proc = Proc::spawn_logged(label, &mut c, work.path())?;
    let up = Instant::now() + Duration::from_secs(30);
    wait_rpc(ns, &mut proc, rpc, up)?;
    let what = match (role, &opts.magnet) {
        (Role::Leech, Some(m)) => OsArg::S(m.as_str()),
        _ => OsArg::P(torrent),
    };
    let out = remote(
        ns,
        rpc,
        &[OsArg::S("-a"), what, OsArg::S("-w"), OsArg::P(dir)],
    )?;
    if !out.contains("success") {
        return Err(proc.failure(&format!("transmission-remote -a said: {}", out.trim())));
    }
    Ok(Launched {
        proc,
        flag: (role == Role::Leech).then(|| flag.to_path_buf()),
        rpc: (role == Role::Seed).then_some(rpc),
    })
}

enum OsArg<'a> {
    S(&'a str),
    P(&'a Path),
}

/// Runs `transmission-remote RPC ARGS` in `ns` (bounded to 20 s); its stdout.
fn remote(ns: &Netns, rpc: SocketAddrV4, args: &[OsArg<'_>]) -> anyhow::Result<String> {
    let mut c: Command = ns.command("transmission-remote");
    c.arg(rpc.to_string());
    for a in args {
        match a {
            OsArg::S(s) => c.arg(s),
            OsArg::P(p) => c.arg(p),
        };
    }
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut p = Proc::spawn("transmission-remote", &mut c)?;
    let mut out = p.take_stdout().context("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    if p.wait_timeout(Duration::from_secs(20))?.is_none() {
        p.kill_tree()?;
        bail!("transmission-remote timed out");
    }
    Ok(reader.join().unwrap_or_default())
}

fn wait_rpc(
    ns: &Netns,
    proc: &mut Proc,
    rpc: SocketAddrV4,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        if proc.try_wait()?.is_some() {
            return Err(proc.failure("transmission-daemon exited"));
        }
        if ns
            .wait_port(std::net::SocketAddr::V4(rpc), Duration::from_millis(200))
            .is_ok()
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(proc.failure("transmission RPC did not come up"));
        }
    }
}

/// Has Transmission verify the seed data, then waits until it shows 100%.
pub(crate) fn transmission_seed_ready(
    ns: &Netns,
    proc: &mut Proc,
    rpc: SocketAddrV4,
    deadline: Instant,
) -> anyhow::Result<()> {
    remote(ns, rpc, &[OsArg::S("-t"), OsArg::S("all"), OsArg::S("-v")])?;
    loop {
        let info = remote(ns, rpc, &[OsArg::S("-t"), OsArg::S("all"), OsArg::S("-i")])?;
        if info.contains("Percent Done: 100%") && !info.contains("Verif") {
            return Ok(());
        }
        if proc.try_wait()?.is_some() {
            return Err(proc.failure("transmission-daemon exited before seeding"));
        }
        if Instant::now() >= deadline {
            return Err(proc.failure(&format!(
                "transmission not seeding in time; last status:\n{info}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapper_goes_between_the_namespace_and_the_program() {
        if !crate::ci::require_root_and_netns().unwrap() {
            return;
        }
        let ns = Netns::new("wrap").unwrap();
        let args = |c: &Command| -> Vec<String> {
            c.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let plain = wrapped(&ns, &[], "prog");
        assert_eq!(args(&plain), ["netns", "exec", ns.name(), "prog"]);
        let w = ["valgrind".to_string(), "--tool=callgrind".to_string()];
        let under = wrapped(&ns, &w, "prog");
        assert_eq!(
            args(&under),
            [
                "netns",
                "exec",
                ns.name(),
                "valgrind",
                "--tool=callgrind",
                "prog"
            ]
        );
    }
}
