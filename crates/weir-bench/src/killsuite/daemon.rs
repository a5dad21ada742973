//! The kill suite's daemon mode: `weir daemon` given the torrent once over
//! RPC, killed with SIGKILL at the suite's random moments (counted from
//! the moment its RPC is up), restarted on the same `--state` each time;
//! the last run is watched over RPC until the transfer is complete, then
//! stopped with SIGTERM (storage flushed) before the file is compared.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use serde_json::{Value, json};
use weir_daemon::client::RpcClient;
use weir_lab::process::Proc;

use super::{KillSuite, log_line, sigkill, weir};

/// What the daemon runs share.
pub(super) struct DaemonRuns<'a> {
    /// The suite.
    pub(super) suite: &'a KillSuite,
    /// The suite's work directory.
    pub(super) work: &'a Path,
    /// Where each run's stdout/stderr go.
    pub(super) logs: &'a Path,
    /// The .torrent (naming the fake tracker).
    pub(super) torrent: &'a Path,
    /// The mean lifetime of a run.
    pub(super) slice: Duration,
    /// When the suite started.
    pub(super) started: Instant,
}

/// One `torrent-get` of the only transfer: `(haveValid, leftUntilDone)`;
/// `None` when the daemon lists no transfer.
async fn progress(c: &RpcClient) -> anyhow::Result<Option<(u64, u64)>> {
    let r = c
        .call(
            "torrent-get",
            json!({"fields": ["id", "haveValid", "leftUntilDone", "error", "errorString"]}),
        )
        .await?;
    let list = r["torrents"].as_array().cloned().unwrap_or_default();
    match list.as_slice() {
        [] => Ok(None),
        [t] => {
            if t["error"].as_i64().unwrap_or(0) != 0 {
                bail!("the transfer has an error: {}", t["errorString"]);
            }
            let n = |k: &str| t[k].as_u64().unwrap_or(u64::MAX);
            Ok(Some((n("haveValid"), n("leftUntilDone"))))
        }
        more => bail!("{} transfers listed, expected 1", more.len()),
    }
}

impl DaemonRuns<'_> {
    fn dirs(&self) -> (PathBuf, PathBuf) {
        (self.work.join("daemon-state"), self.work.join("dl"))
    }

    /// Starts run `n` of the daemon; its RPC address once it is up.
    fn start(&self, n: usize) -> anyhow::Result<(Proc, SocketAddr)> {
        let (state, dl) = self.dirs();
        let home = self.work.join("home-daemon");
        std::fs::create_dir_all(&home)?;
        let mut c = weir(&self.suite.weir, &home);
        c.arg("daemon")
            .args(["--rpc", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
            .arg("--download-dir")
            .arg(&dl)
            .arg("--state")
            .arg(&state)
            .arg("--no-dht")
            .current_dir(self.work);
        let mut p = Proc::spawn_logged(&format!("daemon-{n}"), &mut c, self.logs)?;
        let err = p.stderr_log().context("logged")?.to_path_buf();
        let line = log_line(&mut p, &err, "RPC on http://", Duration::from_secs(120))?;
        let addr: SocketAddr = line
            .split("RPC on http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .context("the RPC address")?
            .parse()
            .context("the RPC address")?;
        Ok((p, addr))
    }

    /// Runs the daemon `kills + 1` times; `(killed, runs, lifetimes)`.
    pub(super) fn run(
        &self,
        rng: &mut fastrand::Rng,
    ) -> anyhow::Result<(usize, usize, Vec<Duration>)> {
        let s = self.suite;
        let (state, dl) = self.dirs();
        std::fs::create_dir_all(&state)?;
        std::fs::create_dir_all(&dl)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let metainfo =
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(self.torrent)?);
        let mut lifetimes = Vec::new();
        let mut killed = 0;
        for i in 0..=s.kills {
            let (mut p, rpc) = self.start(i)?;
            let c = RpcClient::new(rpc);
            let t0 = Instant::now();
            if i == 0 {
                let r: Value = rt.block_on(c.call(
                    "torrent-add",
                    json!({"metainfo": metainfo, "download-dir": dl.to_string_lossy()}),
                ))?;
                if r.get("torrent-added").is_none() {
                    return Err(p.failure(&format!("torrent-add answered {r}")));
                }
            } else if rt.block_on(progress(&c))?.is_none() {
                return Err(p.failure(&format!("the transfer was lost after kill {i}")));
            }
            let last = i == s.kills
                || match rt.block_on(progress(&c))? {
                    Some((_, left)) => left == 0,
                    None => false,
                };
            if !last {
                let life = self
                    .slice
                    .mul_f64(0.5 + rng.f64())
                    .max(Duration::from_millis(100))
                    + Duration::from_millis(150);
                if p.wait_timeout(life)?.is_some() {
                    return Err(p.failure("weir daemon exited by itself"));
                }
                // Complete already: this run is the last (a kill now would
                // test nothing).
                let done = matches!(rt.block_on(progress(&c))?, Some((_, 0)));
                if !done {
                    sigkill(&mut p)?;
                    lifetimes.push(t0.elapsed());
                    killed += 1;
                    if self.started.elapsed() > s.limit {
                        bail!("kill suite over its time limit ({:?})", s.limit);
                    }
                    continue;
                }
            }
            // The last run: until complete, then a clean stop.
            let nap = Duration::from_millis(50);
            loop {
                match rt.block_on(progress(&c))? {
                    Some((have, 0)) if have == s.size => break,
                    Some(_) => {}
                    None => return Err(p.failure("the transfer is gone")),
                }
                if self.started.elapsed() > s.limit {
                    return Err(p.failure("the last run did not finish in time"));
                }
                if p.wait_timeout(nap)?.is_some() {
                    return Err(p.failure("weir daemon exited by itself"));
                }
            }
            lifetimes.push(t0.elapsed());
            p.signal(nix::sys::signal::Signal::SIGTERM)?;
            match p.wait_timeout(Duration::from_secs(60))? {
                Some((st, _)) if st.code() == Some(143) || st.success() => {}
                Some((st, _)) => return Err(p.failure(&format!("weir daemon stopped with {st:?}"))),
                None => return Err(p.failure("weir daemon did not stop on SIGTERM")),
            }
            return Ok((killed, i + 1, lifetimes));
        }
        bail!("the loop returns at its last run")
    }
}
