//! Scenario `many`: one `weir daemon` seeding many transfers (issue 9).
//!
//! For each count N of `counts` (default `100,1000`): N torrents of one
//! file each (`file_kib`, default 1,024 KiB, random bytes) and N / 10 eD2k
//! files of the same size, all in one download directory. A first daemon
//! is given them over RPC (`torrent-add`: base64 `metainfo`, `ed2k://`
//! links) and hashes the data; once every transfer is seeding it is
//! stopped (SIGTERM), which leaves its state and resume journals behind.
//! The figures are of the second start on that state:
//!
//! - **start-up**: from the process start to every transfer seeding
//!   (`torrent-get` `status` 6 for all N + N / 10, polled every 20 ms);
//!   goal <= 2 s at 1,000;
//! - **RSS** (`VmRSS`) and **threads** (`/proc/PID/status`), read once
//!   every transfer seeds; goals: RSS <= 100 MiB, threads the same at 100
//!   and 1,000 transfers;
//! - **get**: `weir get --peer` of one of the torrents (the middle one)
//!   from the daemon's BitTorrent port, timed from spawn to exit, the file
//!   compared byte for byte.
//!
//! Every process listens on 127.0.0.1 (the daemon under `--allow
//! 127.0.0.0/8`, no DHT, no trackers; the torrents name none). HOME is the
//! scenario's temporary directory (the daemon's eD2k user hash goes there).
//!
//! Options (`--set`): `counts` (`100,1000`), `file_kib` (1024); `--runs`
//! (default 3: restarts on the same state, the median reported).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use serde_json::{Value, json};
use weir_daemon::client::RpcClient;
use weir_lab::{Proc, TempDir};

use crate::BenchConfig;
use crate::common::proc_status_field;
use crate::report::{Metric, Report};
use crate::sayln;

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["counts", "file_kib"];

const START_GOAL_S: f64 = 2.0;
const RSS_GOAL_MIB: f64 = 100.0;
/// Longest the first start (hashing everything) may take.
const FIRST_LIMIT: Duration = Duration::from_secs(600);
/// Longest a restart may take to seed everything.
const RESTART_LIMIT: Duration = Duration::from_secs(120);
const SEEDING: i64 = 6;

/// What one set of transfers is.
struct Set {
    torrents: Vec<Vec<u8>>,
    links: Vec<String>,
    /// The file of each torrent, in order.
    data: Vec<Vec<u8>>,
}

fn make_set(dir: &Path, n: usize, file_len: usize) -> anyhow::Result<Set> {
    let mut rng = fastrand::Rng::with_seed(n as u64);
    let mut set = Set {
        torrents: Vec::with_capacity(n),
        links: Vec::new(),
        data: Vec::with_capacity(n),
    };
    let piece = 256 << 10;
    for i in 0..n {
        let name = format!("many-{i:05}.bin");
        let mut data = vec![0u8; file_len];
        rng.fill(&mut data);
        std::fs::write(dir.join(&name), &data)?;
        let created = weir_bt::create::TorrentBuilder::single_file(&name, file_len as u64, piece)
            .pieces(weir_bt::create::hash_pieces(&data, piece))
            .build()
            .context("torrent")?;
        set.torrents.push(created.bytes);
        set.data.push(data);
    }
    for i in 0..n / 10 {
        let name = format!("many-ed2k-{i:05}.bin");
        let mut data = vec![0u8; file_len];
        rng.fill(&mut data);
        std::fs::write(dir.join(&name), &data)?;
        let mut h = weir_ed2k::hash::Ed2kHasher::new();
        h.update(&data);
        let hashes = h.finish();
        let link = weir_ed2k::link::FileLink {
            name,
            size: file_len as u64,
            hash: hashes.file_hash,
            aich: hashes.aich.as_ref().map(|t| t.root()),
            part_hashes: None,
            sources: Vec::new(),
        };
        set.links.push(link.to_string());
    }
    Ok(set)
}

struct Daemon {
    proc: Proc,
    rpc: SocketAddr,
}

fn start_daemon(
    cfg: &BenchConfig,
    work: &TempDir,
    rpc: SocketAddr,
    bt: SocketAddr,
) -> anyhow::Result<Daemon> {
    let mut c = cfg.weir();
    c.arg("daemon")
        .arg("--rpc")
        .arg(rpc.to_string())
        .arg("--listen")
        .arg(bt.to_string())
        .arg("--download-dir")
        .arg(work.path().join("data"))
        .arg("--state")
        .arg(work.path().join("state"))
        .args(["--no-dht", "--no-trackers"])
        .env("HOME", work.path())
        .env("RUST_LOG", "warn");
    let proc = Proc::spawn_logged("weir-daemon", &mut c, work.path())?;
    Ok(Daemon { proc, rpc })
}

/// Statuses of every transfer, or `None` while the RPC is not up.
async fn statuses(c: &RpcClient) -> Option<Vec<i64>> {
    let r = c
        .call("torrent-get", json!({"fields": ["id", "status"]}))
        .await
        .ok()?;
    Some(
        r["torrents"]
            .as_array()?
            .iter()
            .map(|t| t["status"].as_i64().unwrap_or(-1))
            .collect(),
    )
}

/// Polls until `want` transfers all seed; the time from the daemon's
/// start.
async fn wait_seeding(d: &mut Daemon, want: usize, limit: Duration) -> anyhow::Result<f64> {
    let c = RpcClient::new(d.rpc);
    let started = d.proc.started();
    loop {
        let s = statuses(&c).await.unwrap_or_default();
        if s.len() == want && s.iter().all(|&x| x == SEEDING) {
            return Ok(started.elapsed().as_secs_f64());
        }
        if d.proc.try_wait()?.is_some() {
            return Err(d.proc.failure("weir daemon exited"));
        }
        if started.elapsed() > limit {
            let s = statuses(&c).await.unwrap_or_default();
            let seeding = s.iter().filter(|&&x| x == SEEDING).count();
            bail!(
                "after {:.0} s, {seeding} of {} transfers seed ({want} wanted)",
                limit.as_secs_f64(),
                s.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn add_all(rpc: SocketAddr, set: &Set, dir: &Path) -> anyhow::Result<()> {
    let c = RpcClient::new(rpc);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c
        .call("session-get", json!({"fields": ["version"]}))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("the daemon's RPC did not come up");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dir = dir.to_string_lossy();
    for t in &set.torrents {
        let b64 = base64::engine::general_purpose::STANDARD.encode(t);
        let r: Value = c
            .call("torrent-add", json!({"metainfo": b64, "download-dir": dir}))
            .await?;
        if r.get("torrent-added").is_none() {
            bail!("torrent-add answered {r}");
        }
    }
    for l in &set.links {
        let r: Value = c
            .call("torrent-add", json!({"filename": l, "download-dir": dir}))
            .await?;
        if r.get("torrent-added").is_none() {
            bail!("torrent-add of {l} answered {r}");
        }
    }
    Ok(())
}

fn stop(d: &mut Daemon) -> anyhow::Result<()> {
    d.proc.signal(nix::sys::signal::Signal::SIGTERM)?;
    if d.proc.wait_timeout(Duration::from_secs(30))?.is_none() {
        d.proc.kill_tree()?;
        bail!("weir daemon did not stop within 30 s of SIGTERM");
    }
    Ok(())
}

/// One restart's figures: start-up s, RSS MiB, threads, get s.
fn restart_run(
    cfg: &BenchConfig,
    work: &TempDir,
    rt: &tokio::runtime::Runtime,
    set: &Set,
    ports: (SocketAddr, SocketAddr),
    run: usize,
) -> anyhow::Result<[f64; 4]> {
    let want = set.torrents.len() + set.links.len();
    let mut d = start_daemon(cfg, work, ports.0, ports.1)?;
    let startup = rt.block_on(wait_seeding(&mut d, want, RESTART_LIMIT))?;
    let pid = d.proc.pid();
    let rss = proc_status_field(pid, "VmRSS:") / 1024.0;
    let threads = proc_status_field(pid, "Threads:");
    // A leecher fetches the middle torrent.
    let k = set.torrents.len() / 2;
    let get_dir = work.subdir(&format!("get-{run}"))?;
    let tfile = get_dir.join("one.torrent");
    std::fs::write(&tfile, &set.torrents[k])?;
    let out = get_dir.join("out");
    std::fs::create_dir_all(&out)?;
    let mut g = cfg.weir();
    g.arg("get")
        .arg("--peer")
        .arg(ports.1.to_string())
        .arg("--listen")
        .arg("127.0.0.1:0")
        .args(["--no-trackers", "-q", "-o"])
        .arg(&out)
        .arg(&tfile)
        .env("HOME", work.path());
    let t = Instant::now();
    let o = weir_lab::process::run(&mut g, Duration::from_secs(60))?;
    let get_s = t.elapsed().as_secs_f64();
    let got = std::fs::read(out.join(format!("many-{k:05}.bin")));
    let r = stop(&mut d);
    if !o.success() {
        bail!("weir get failed: {}", o.stderr_text());
    }
    if got.ok().as_deref() != Some(&set.data[k][..]) {
        bail!("weir get: the file differs");
    }
    r?;
    Ok([startup, rss, threads, get_s])
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let counts: Vec<usize> = cfg
        .get("counts")
        .unwrap_or("100,1000")
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .context("counts: a list of numbers")?;
    if counts.iter().any(|&n| n == 0 || n > 20_000) {
        bail!("counts: each between 1 and 20000");
    }
    let file_kib: usize = cfg.get_or("file_kib", 1024)?;
    if !(1..=65_536).contains(&file_kib) {
        bail!("file_kib: between 1 and 65536");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut report = Report::new(
        "many",
        cfg,
        &["transfers"],
        vec![
            Metric::new("start-up s", 3),
            Metric::new("RSS MiB", 1),
            Metric::new("threads", 0),
            Metric::new("get s", 3),
            Metric::new("first start s", 2),
        ],
    );
    let mut threads_seen: Vec<(usize, f64)> = Vec::new();
    for (i, &n) in counts.iter().enumerate() {
        let label = format!("{n} torrents + {} eD2k", n / 10);
        let work = TempDir::new("weir-bench-many")?;
        let data = work.subdir("data")?;
        work.subdir("state")?;
        sayln!("many: {label}: writing {} files", n + n / 10);
        let set = make_set(&data, n, file_kib << 10)?;
        let base = 19_300 + 10 * i as u16;
        let rpc = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, base));
        let bt = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, base + 1));
        // First start: add everything, hash it, seed, stop.
        let mut d = start_daemon(cfg, &work, rpc, bt)?;
        let first = rt.block_on(async {
            add_all(rpc, &set, &data).await?;
            wait_seeding(&mut d, n + n / 10, FIRST_LIMIT).await
        });
        let stopped = stop(&mut d);
        let first = match first.and_then(|f| stopped.map(|()| f)) {
            Ok(f) => f,
            Err(e) => {
                sayln!("many: {label}: first start failed: {e:#}");
                report.add_failure(&[&label], &format!("first start: {e:#}"));
                continue;
            }
        };
        sayln!("many: {label}: first start (hashing) {first:.2} s");
        for run in 0..cfg.runs {
            match restart_run(cfg, &work, &rt, &set, (rpc, bt), run) {
                Ok(v) => {
                    sayln!(
                        "many: {label}: restart {}: start-up {:.3} s, RSS {:.1} MiB, {} threads, get {:.3} s",
                        run + 1,
                        v[0],
                        v[1],
                        v[2],
                        v[3]
                    );
                    threads_seen.push((n, v[2]));
                    report.add_run(&[&label], &[v[0], v[1], v[2], v[3], first]);
                }
                Err(e) => {
                    sayln!("many: {label}: restart {} failed: {e:#}", run + 1);
                    report.add_failure(&[&label], &format!("{e:#}"));
                }
            }
        }
    }
    report.note(&format!(
        "Goals (issue 9): start-up <= {START_GOAL_S} s and RSS <= {RSS_GOAL_MIB} MiB at 1,000 \
         torrents + 100 eD2k files; threads independent of the number of transfers. \
         start-up: process start to every transfer seeding (torrent-get status 6) on the state \
         and resume journals a first start left; first start s: adding everything over RPC and \
         hashing it; get s: weir get --peer of one torrent from the daemon, spawn to exit; \
         {file_kib} KiB per file."
    ));
    let mut t: Vec<f64> = threads_seen.iter().map(|x| x.1).collect();
    t.sort_by(f64::total_cmp);
    if let (Some(lo), Some(hi)) = (t.first(), t.last()) {
        report.note(&format!(
            "threads over every run and count: {lo} to {hi} ({})",
            if lo == hi {
                "the same whatever the number of transfers"
            } else {
                "they differ"
            }
        ));
    }
    report.print();
    let (json, md) = report.write()?;
    sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}
