//! Members of a swarm that stay in it: leechers that keep seeding after
//! they complete (so they go on uploading to the others) until they are
//! stopped, and a libtorrent seeder that reports what it sent.
//!
//! Unlike [`super::leech_with`], starting a member returns at once (so a
//! whole swarm starts together); [`Member::poll`] tells when it completed
//! and [`Member::stop`] ends it by PID. Peers come from the torrent's
//! tracker (start one with [`super::Tracker`]); Transmission 3.00 dials
//! none of the 127/8 peers a tracker gives it, so it must be dialled: start
//! it first (the others then find it at the tracker) and name it in the
//! seeder's dial file ([`SeedOptions::dial_file`]).
//!
//! libtorrent members (the `lt_swarm.py` adapter) print `STATS <unix time>
//! <payload down> <payload up> <progress>` every 0.5 s and when stopped:
//! [`Member::stop`] and [`stop_seeder`] return the last one.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};

use super::clients::{self, PYTHON, Role};
use super::{Client, CommandClient, Options};
use crate::netns::Netns;
use crate::process::{Proc, Usage};
use crate::tmpdir::TempDir;
use crate::torrent::TorrentInfo;

const LT_SWARM: &str = include_str!("lt_swarm.py");

/// How a member says it completed.
#[derive(Debug)]
enum Done {
    /// A file its completion hook creates (the file's mtime is the time).
    Flag(PathBuf),
    /// A line containing the needle in its stderr log (the time it is
    /// first seen by [`Member::poll`]).
    Line { log: PathBuf, needle: String },
}

/// One running member of a swarm.
#[derive(Debug)]
pub struct Member {
    name: String,
    addr: SocketAddrV4,
    proc: Proc,
    done: Done,
    done_at: Option<SystemTime>,
}

/// A libtorrent member's last `STATS` line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// When it was printed (Unix seconds).
    pub at: f64,
    /// Payload bytes downloaded this session.
    pub down: u64,
    /// Payload bytes uploaded this session.
    pub up: u64,
    /// Fraction of the torrent it has, 0 to 1.
    pub progress: f64,
}

/// The last `STATS` line in `text` (a libtorrent member's stdout).
pub fn last_stats(text: &str) -> Option<Stats> {
    text.lines().rev().find_map(|l| {
        let mut f = l.strip_prefix("STATS ")?.split_whitespace();
        Some(Stats {
            at: f.next()?.parse().ok()?,
            down: f.next()?.parse().ok()?,
            up: f.next()?.parse().ok()?,
            progress: f.next()?.parse().ok()?,
        })
    })
}

fn stdout_stats(p: &Proc) -> Option<Stats> {
    let text = std::fs::read_to_string(p.stdout_log()?).ok()?;
    last_stats(&text)
}

impl Member {
    /// The label given at start.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address it listens and dials from.
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// The process.
    pub fn proc_mut(&mut self) -> &mut Proc {
        &mut self.proc
    }

    /// When it completed, once [`Member::poll`] has seen it.
    pub fn done_at(&self) -> Option<SystemTime> {
        self.done_at
    }

    /// Checks whether it has completed; the completion time once it has.
    /// Fails if the process exited (members run until stopped).
    pub fn poll(&mut self) -> anyhow::Result<Option<SystemTime>> {
        if self.done_at.is_none() {
            self.done_at = match &self.done {
                Done::Flag(f) => std::fs::metadata(f).ok().and_then(|m| m.modified().ok()),
                Done::Line { log, needle } => std::fs::read_to_string(log)
                    .is_ok_and(|t| t.contains(needle.as_str()))
                    .then(SystemTime::now),
            };
        }
        if self.proc.try_wait()?.is_some() {
            return Err(self
                .proc
                .failure(&format!("{} exited in the swarm", self.name)));
        }
        Ok(self.done_at)
    }

    /// Ends it by PID (SIGTERM, then SIGKILL after `grace`); its resource
    /// use, its last `STATS` line (libtorrent) and the tail of its logs.
    pub fn stop(mut self, grace: Duration) -> anyhow::Result<Stopped> {
        let (_, usage) = self.proc.kill_tree_with_grace(grace)?;
        Ok(Stopped {
            stats: stdout_stats(&self.proc),
            stderr: self
                .proc
                .stderr_log()
                .and_then(|l| std::fs::read_to_string(l).ok())
                .unwrap_or_default(),
            usage,
        })
    }
}

/// What a stopped member left.
#[derive(Clone, Debug)]
pub struct Stopped {
    /// CPU, RSS and wall time (`wait4`).
    pub usage: Usage,
    /// Its last `STATS` line (libtorrent members).
    pub stats: Option<Stats>,
    /// Its stderr log.
    pub stderr: String,
}

/// The adapter script written into `work`.
fn lt_script(work: &TempDir) -> anyhow::Result<PathBuf> {
    Ok(super::write_lt_script(
        work.path(),
        "weir_lt_swarm.py",
        LT_SWARM,
    )?)
}

#[allow(clippy::too_many_arguments)]
fn lt_command(
    ns: &Netns,
    script: &Path,
    mode: &str,
    preset: &str,
    torrent: &Path,
    dir: &Path,
    addr: SocketAddrV4,
    timeout: Duration,
) -> std::process::Command {
    let mut c = ns.command(PYTHON);
    c.arg(script)
        .arg(mode)
        .arg("--torrent")
        .arg(torrent)
        .arg("--dir")
        .arg(dir)
        .args(["--ip", &addr.ip().to_string()])
        .args(["--port", &addr.port().to_string()])
        .args(["--preset", preset])
        .args(["--timeout", &timeout.as_secs_f64().to_string()]);
    c
}

/// Starts `client` leeching `torrent` into `out_dir` on `addr` inside
/// `ns` (peers from the torrent's tracker), staying after completion;
/// returns at once. libtorrent (default or high-performance settings),
/// aria2c (`--seed-ratio=0.0`: seeds until stopped) and Transmission;
/// for a command, see [`start_command_leecher`]. `opts.timeout` bounds a
/// libtorrent member's life; `opts.extra_args` are appended.
pub fn start_leecher(
    ns: &Netns,
    client: &Client,
    torrent: &Path,
    out_dir: &Path,
    addr: SocketAddrV4,
    opts: &Options,
) -> anyhow::Result<Member> {
    super::check_addr(addr)?;
    let info = TorrentInfo::read(torrent)?;
    if info.announce.is_none() {
        bail!("{} has no tracker for the swarm", torrent.display());
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let torrent = clients::abs(torrent)?;
    let dir = clients::abs(out_dir)?;
    let work = TempDir::new(&format!("bt-swarm-{}", client.name()))?;
    let flag = work.path().join("done.flag");
    let label = format!("{}-swarm", client.name());
    let mut proc = match client {
        Client::Libtorrent | Client::LibtorrentHps => {
            let script = lt_script(&work)?;
            let preset = if *client == Client::LibtorrentHps {
                "hps"
            } else {
                "default"
            };
            let mut c = lt_command(
                ns,
                &script,
                "leech",
                preset,
                &torrent,
                &dir,
                addr,
                opts.timeout,
            );
            c.arg("--done").arg(&flag).args(&opts.extra_args);
            Proc::spawn_logged(&label, &mut c, work.path())?
        }
        Client::Aria2 => {
            let hook = clients::write_hook(&work, "aria2-hook.sh", &flag)?;
            let mut c = clients::aria2_command(ns, addr, &work, &hook, &dir)?;
            c.arg("--seed-ratio=0.0")
                .args(&opts.extra_args)
                .arg(&torrent);
            Proc::spawn_logged(&label, &mut c, work.path())?
        }
        Client::Transmission => {
            let l = clients::launch(
                ns,
                client,
                Role::Leech,
                &torrent,
                &info,
                &dir,
                addr,
                opts,
                &work,
            )?;
            let f = l.flag.context("transmission leecher without a done hook")?;
            if f != flag {
                bail!("transmission's done hook writes {}", f.display());
            }
            l.proc
        }
        other => bail!("{}: not supported as a swarm member", other.name()),
    };
    proc.attach(work);
    Ok(Member {
        name: client.name().to_string(),
        addr,
        proc,
        done: Done::Flag(flag),
        done_at: None,
    })
}

/// Starts a command (weir, say) from its leech template (placeholders as
/// for [`CommandClient`]: `{torrent}`, `{dir}`, `{addr}`, `{ip}`,
/// `{port}`, `{tracker}`) with `env` added, on `addr` inside `ns`;
/// returns at once. It has completed when its stderr holds a line
/// containing `done_line`; it must keep running after that.
pub fn start_command_leecher(
    ns: &Netns,
    cc: &CommandClient,
    torrent: &Path,
    out_dir: &Path,
    addr: SocketAddrV4,
    env: &[(&str, &str)],
    done_line: &str,
) -> anyhow::Result<Member> {
    super::check_addr(addr)?;
    let info = TorrentInfo::read(torrent)?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let torrent = clients::abs(torrent)?;
    let dir = clients::abs(out_dir)?;
    let utf8 = |p: &Path| {
        p.to_str()
            .map(str::to_string)
            .with_context(|| format!("{} is not UTF-8", p.display()))
    };
    let (t, d) = (utf8(&torrent)?, utf8(&dir)?);
    let subst = |a: &str| {
        a.replace("{torrent}", &t)
            .replace("{dir}", &d)
            .replace("{ip}", &addr.ip().to_string())
            .replace("{port}", &addr.port().to_string())
            .replace("{addr}", &addr.to_string())
            .replace("{tracker}", info.announce.as_deref().unwrap_or(""))
    };
    let Some((prog, args)) = cc.leech.split_first() else {
        bail!("command client {} has no leech command", cc.name);
    };
    let work = TempDir::new(&format!("bt-swarm-{}", cc.name))?;
    let mut c = ns.command(subst(prog));
    for a in args {
        c.arg(subst(a));
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let mut proc = Proc::spawn_logged(&format!("{}-swarm", cc.name), &mut c, work.path())?;
    let log = proc
        .stderr_log()
        .map(Path::to_path_buf)
        .context("no stderr log")?;
    proc.attach(work);
    Ok(Member {
        name: cc.name.clone(),
        addr,
        proc,
        done: Done::Line {
            log,
            needle: done_line.to_string(),
        },
        done_at: None,
    })
}

/// How the swarm's libtorrent seeder runs.
#[derive(Clone, Debug)]
pub struct SeedOptions {
    /// `high_performance_seed()` settings (else libtorrent's defaults).
    pub hps: bool,
    /// Upload cap in bytes/s, loopback peers included.
    pub upload_limit: Option<u64>,
    /// Once this file exists, the seeder dials every `ip:port` line in it
    /// (again every 2 s while one is not connected).
    pub dial_file: Option<PathBuf>,
    /// Give up if not seeding after this long.
    pub ready_timeout: Duration,
    /// The most it lives.
    pub timeout: Duration,
}

impl Default for SeedOptions {
    fn default() -> Self {
        Self {
            hps: true,
            upload_limit: None,
            dial_file: None,
            ready_timeout: Duration::from_secs(120),
            timeout: Duration::from_secs(3600),
        }
    }
}

/// Starts a libtorrent seeder of `torrent` from `data_dir` on `addr`
/// inside `ns` (announcing to the torrent's tracker); returns once it
/// reports seeding. Stop it with [`stop_seeder`] for its figures.
pub fn start_seeder(
    ns: &Netns,
    torrent: &Path,
    data_dir: &Path,
    addr: SocketAddrV4,
    opts: &SeedOptions,
) -> anyhow::Result<Proc> {
    super::check_addr(addr)?;
    let torrent = clients::abs(torrent)?;
    let dir = clients::abs(data_dir)?;
    let work = TempDir::new("bt-swarm-seed")?;
    let script = lt_script(&work)?;
    let ready = work.path().join("ready.flag");
    let preset = if opts.hps { "hps" } else { "default" };
    let mut c = lt_command(
        ns,
        &script,
        "seed",
        preset,
        &torrent,
        &dir,
        addr,
        opts.timeout,
    );
    c.arg("--ready").arg(&ready);
    if let Some(l) = opts.upload_limit {
        c.arg("--ul-limit").arg(l.to_string());
    }
    if let Some(f) = &opts.dial_file {
        c.arg("--dial-file").arg(f);
    }
    let mut proc = Proc::spawn_logged("libtorrent-swarm-seed", &mut c, work.path())?;
    proc.attach(work);
    let deadline = Instant::now() + opts.ready_timeout;
    super::wait_flag(&mut proc, &ready, deadline, "seeding")?;
    Ok(proc)
}

/// Blocks a seeder from [`start_seeder`] sent one peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uploaded {
    /// The peer's IP address.
    pub ip: String,
    /// Blocks sent to it.
    pub blocks: u64,
    /// How many of them the seeder had already sent (to anyone).
    pub repeats: u64,
}

/// The `UPLOADED <ip> <blocks> <repeats>` lines in `text` (a stopped
/// seeder's stdout).
pub fn parse_uploaded(text: &str) -> Vec<Uploaded> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("UPLOADED ")?.split_whitespace();
            Some(Uploaded {
                ip: f.next()?.to_string(),
                blocks: f.next()?.parse().ok()?,
                repeats: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// What a seeder from [`start_seeder`] sent each peer, once it is
/// stopped ([`stop_seeder`]).
pub fn seeder_uploads(proc: &Proc) -> Vec<Uploaded> {
    proc.stdout_log()
        .and_then(|l| std::fs::read_to_string(l).ok())
        .map(|t| parse_uploaded(&t))
        .unwrap_or_default()
}

/// Stops a seeder from [`start_seeder`] by PID; its resource use and its
/// last `STATS` line.
pub fn stop_seeder(proc: &mut Proc, grace: Duration) -> anyhow::Result<(Usage, Option<Stats>)> {
    let (_, usage) = proc.kill_tree_with_grace(grace)?;
    Ok((usage, stdout_stats(proc)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_last_stats_line() {
        let t = "seeding x\nSTATS 10.5 0 100 1.000000\nnoise\nSTATS 11.0 5 200 0.5\n";
        assert_eq!(
            last_stats(t),
            Some(Stats {
                at: 11.0,
                down: 5,
                up: 200,
                progress: 0.5
            })
        );
        assert_eq!(last_stats("STATS 1 2\n"), None);
        let u = parse_uploaded("STATS 1 2 3 1\nUPLOADED 127.0.0.10 640 12\nUPLOADED x\n");
        assert_eq!(
            u,
            [Uploaded {
                ip: "127.0.0.10".into(),
                blocks: 640,
                repeats: 12
            }]
        );
        assert_eq!(last_stats(""), None);
    }
}
