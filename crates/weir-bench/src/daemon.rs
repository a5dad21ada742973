//! Scenario `daemon`: the Transmission RPC of transmission-daemon 3.00 and
//! of the real `weir daemon`, side by side: N torrents (default 1,000)
//! added over RPC (`torrent-add` with base64 `metainfo`), then `torrent-get`
//! of all of them with the fields `transmission-remote -l` asks, timed from
//! the request to the last byte of the answer (median of `gets`, default
//! 20), the answer's size, and the server process's RSS (`VmRSS` after the
//! gets, `VmHWM` peak), CPU (utime + stime from `/proc/<pid>/stat`, over
//! the adds and gets) and thread count (`Threads:`).
//!
//! Both daemons are separate processes listening on 127.0.0.1 inside one
//! namespace holding only `lo`. Transmission has DHT, LSD, PEX, uTP,
//! UPnP/NAT-PMP and the blocklist off; weir runs with `--no-dht
//! --no-trackers` under `--allow 127.0.0.0/8`. The torrents name no
//! tracker and have no data on disk: they sit incomplete with no peers.
//!
//! Extra rows, labelled "weir front end (fake backend)": weir's RPC front
//! end with `weir_daemon::fake::FakeBackend` (in-memory transfers, no
//! engine) inside this process, for the same N and for `big` (default
//! 10,000) synthetic transfers: what the RPC layer alone costs.
//!
//! Each torrent has `pieces` pieces of 16 KiB (default 2); a real torrent
//! has hundreds to thousands (`--set pieces=1024`: a 16 MiB torrent's
//! count, or 1 GiB in 1 MiB pieces), which is where per-piece state shows.
//!
//! `--set trackers=N` (default 0) gives every torrent an announce list of N
//! tiers, the same N URLs for all, as real torrents name the same public
//! trackers: `http://127.0.0.1:<1..=N>/announce`, loopback ports nothing
//! listens on (an announce is refused at once; nothing leaves the
//! namespace). weir then runs with its trackers on (no `--no-trackers`),
//! as Transmission does.
//!
//! Options: `torrents`, `gets`, `big`, `pieces`, `trackers`; `--runs`
//! (default 3).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};
use weir_daemon::client::RpcClient;
use weir_daemon::fake::FakeBackend;
use weir_daemon::{RpcConfig, RpcServer};
use weir_lab::{Netns, Proc, TempDir};

use crate::BenchConfig;
use crate::bt_setup::weir_in;
use crate::common::proc_status_field;
use crate::report::{Metric, Report};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["torrents", "gets", "big", "pieces", "trackers"];

/// The fields `transmission-remote -l` (3.00) asks for.
pub const LIST_FIELDS: [&str; 14] = [
    "error",
    "errorString",
    "eta",
    "id",
    "isFinished",
    "leftUntilDone",
    "name",
    "peersGettingFromUs",
    "peersSendingToUs",
    "rateDownload",
    "rateUpload",
    "sizeWhenDone",
    "status",
    "uploadRatio",
];

const TR_RPC: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9191);
const WEIR_RPC: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9192);
/// Where the weir daemon listens for peers (eD2k on the next port).
/// Below the ephemeral range (32768-60999): the 10,000 RPC connections
/// each run makes take ephemeral ports, and one of them still held when the
/// next daemon starts made its listen fail with "port in use".
const WEIR_PEERS: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 21616);

/// What one server did.
struct Measured {
    add_s: f64,
    gets: Gets,
}

/// The server process's figures, NaN where not known.
struct Usage {
    rss_mib: f64,
    /// RSS the transfers added, per transfer (KiB): RSS after the gets less
    /// RSS before the adds, over the number added.
    kib_per_transfer: f64,
    peak_rss_mib: f64,
    cpu_s: f64,
    threads: f64,
    /// A restart on the state the adds left: from the spawn to the first
    /// `torrent-get` listing every transfer, and the RSS then.
    restart_s: f64,
    restart_rss_mib: f64,
}

/// `n` distinct single-file torrents of two 16 KiB pieces (no tracker,
/// no data needed).
pub fn make_torrents(n: usize) -> Vec<Vec<u8>> {
    make_torrents_of(n, 2)
}

/// `n` distinct single-file torrents of `pieces` (at least 1) pieces of
/// 16 KiB, the last one short.
pub fn make_torrents_of(n: usize, pieces: usize) -> Vec<Vec<u8>> {
    make_torrents_with(n, pieces, 0)
}

/// As [`make_torrents_of`], each naming `trackers` tiers of one tracker,
/// `http://127.0.0.1:<k>/announce` for k in `1..=trackers` (ports nothing
/// listens on), the same for every torrent.
pub fn make_torrents_with(n: usize, pieces: usize, trackers: u16) -> Vec<Vec<u8>> {
    let pieces = pieces.max(1);
    let mut announce = Vec::new();
    if trackers > 0 {
        let url = |k: u16| format!("http://127.0.0.1:{k}/announce");
        let first = url(1);
        let _ = write!(
            announce,
            "8:announce{}:{first}13:announce-listl",
            first.len()
        );
        for k in 1..=trackers {
            let u = url(k);
            let _ = write!(announce, "l{}:{u}e", u.len());
        }
        announce.push(b'e');
    }
    (0..n)
        .map(|i| {
            let name = format!("bench-{i:05}.bin");
            let hashes: Vec<u8> = (0..pieces * 20)
                .map(|j| ((i * 131 + j * 7) % 251) as u8 ^ (i >> 8) as u8)
                .collect();
            let length = (pieces as u64 - 1) * 16_384 + 1 + (i as u64 % 16_383);
            let mut t = b"d".to_vec();
            t.extend_from_slice(&announce);
            let _ = write!(
                t,
                "10:created by10:weir-bench4:infod6:lengthi{length}e4:name{}:{name}12:piece lengthi16384e6:pieces{}:",
                name.len(),
                hashes.len(),
            );
            t.extend_from_slice(&hashes);
            t.extend_from_slice(b"ee");
            t
        })
        .collect()
}

async fn measure(addr: SocketAddr, torrents: &[Vec<u8>], gets: usize) -> anyhow::Result<Measured> {
    let c = RpcClient::new(addr);
    c.call("session-get", json!({"fields": ["version"]}))
        .await?;
    let t0 = Instant::now();
    for t in torrents {
        let b64 = base64::engine::general_purpose::STANDARD.encode(t);
        let r = c.call("torrent-add", json!({"metainfo": b64})).await?;
        if r.get("torrent-added").is_none() {
            bail!("torrent-add answered {r}");
        }
    }
    let add_s = t0.elapsed().as_secs_f64();
    let gets = get_times(&c, addr, torrents.len(), gets).await?;
    Ok(Measured { add_s, gets })
}

/// `gets` timed `torrent-get`s of all `n` transfers, each through the lean
/// blocking client ([`crate::http_timer`], the figure the bench compares)
/// and then through [`RpcClient`] (hyper, as the tests use it: kept to show
/// what a heavier client adds). The times in ms (lean, hyper), the answer's
/// size and the transfers per status in the last answer.
async fn get_times(c: &RpcClient, addr: SocketAddr, n: usize, gets: usize) -> anyhow::Result<Gets> {
    let body = serde_json::to_vec(
        &json!({"method": "torrent-get", "arguments": {"fields": LIST_FIELDS}, "tag": 4}),
    )?;
    let id = c.session_id().context("no session id")?;
    let mut g = Gets {
        lean_ms: Vec::with_capacity(gets),
        hyper_ms: Vec::with_capacity(gets),
        size: 0,
        statuses: BTreeMap::new(),
    };
    let mut buf = Vec::new();
    let check = |status: u16, body: &[u8], statuses: &mut BTreeMap<i64, usize>| {
        if status != 200 {
            bail!("torrent-get: HTTP {status}");
        }
        let v: Value = serde_json::from_slice(body)?;
        let list = v["arguments"]["torrents"].as_array();
        let got = list.map_or(0, Vec::len);
        if got != n {
            bail!("torrent-get listed {got} transfers, expected {n}");
        }
        statuses.clear();
        for t in list.into_iter().flatten() {
            *statuses
                .entry(t["status"].as_i64().unwrap_or(-1))
                .or_insert(0) += 1;
        }
        anyhow::Ok(())
    };
    for _ in 0..gets {
        // Blocking on this runtime's one thread is what is wanted here:
        // nothing else runs on it while a get is timed.
        let t = crate::http_timer::post(addr, "/transmission/rpc", &id, &body, &mut buf)?;
        g.lean_ms.push(t.elapsed.as_secs_f64() * 1e3);
        check(t.status, &t.body, &mut g.statuses)?;
        g.size = t.body.len();
        let start = Instant::now();
        let r = c.post(Bytes::from(body.clone()), Some(&id)).await?;
        g.hyper_ms.push(start.elapsed().as_secs_f64() * 1e3);
        check(r.status, &r.body, &mut g.statuses)?;
    }
    Ok(g)
}

/// What [`get_times`] measured.
struct Gets {
    lean_ms: Vec<f64>,
    hyper_ms: Vec<f64>,
    size: usize,
    statuses: BTreeMap<i64, usize>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        f64::NAN
    } else {
        s[s.len() / 2]
    }
}

fn p90(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        f64::NAN
    } else {
        s[(s.len() * 9 / 10).min(s.len() - 1)]
    }
}

fn rss_mib(pid: u32) -> f64 {
    proc_status_field(pid, "VmRSS:") / 1024.0
}

/// CPU seconds of threads `tids` of this process.
fn threads_cpu_s(tids: &[i32]) -> f64 {
    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    tids.iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/stat")).ok())
        .filter_map(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .sum::<u64>() as f64
        / tck
}

fn start_transmission(ns: &Netns, work: &TempDir) -> anyhow::Result<Proc> {
    let cfg = work.subdir("transmission")?;
    let dl = work.subdir("transmission-downloads")?;
    let settings = json!({
        "bind-address-ipv4": "127.0.0.1", "bind-address-ipv6": "::1",
        "dht-enabled": false, "lpd-enabled": false, "pex-enabled": false, "utp-enabled": false,
        "port-forwarding-enabled": false, "blocklist-enabled": false,
        "blocklist-url": "http://127.0.0.1:1/disabled",
        "peer-port": 21515, "peer-port-random-on-start": false,
        "rpc-enabled": true, "rpc-bind-address": "127.0.0.1", "rpc-port": TR_RPC.port(),
        "rpc-whitelist": "127.0.0.1", "rpc-whitelist-enabled": true,
        "rpc-host-whitelist-enabled": true, "rpc-authentication-required": false,
        "download-dir": dl, "incomplete-dir-enabled": false, "watch-dir-enabled": false,
        "start-added-torrents": true, "download-queue-enabled": false,
        "seed-queue-enabled": false, "queue-stalled-enabled": false,
        "message-level": 1,
    });
    std::fs::write(
        cfg.join("settings.json"),
        serde_json::to_vec_pretty(&settings)?,
    )?;
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
        ])
        .env("HOME", &cfg);
    let mut p = Proc::spawn_logged("transmission-daemon", &mut c, work.path())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ns
        .wait_port(SocketAddr::V4(TR_RPC), Duration::from_millis(200))
        .is_err()
    {
        if p.try_wait()?.is_some() {
            return Err(p.failure("transmission-daemon exited"));
        }
        if Instant::now() >= deadline {
            return Err(p.failure("transmission RPC did not come up"));
        }
    }
    Ok(p)
}

/// Starts `weir daemon` in `ns` on [`WEIR_RPC`] / [`WEIR_PEERS`], off the
/// network beyond loopback (`--no-dht`, and `--no-trackers` unless
/// `trackers`: the torrents' trackers are then on loopback), its state and
/// downloads under `work`; waits for its RPC port.
fn start_weir_daemon(
    cfg: &BenchConfig,
    ns: &Netns,
    work: &TempDir,
    trackers: bool,
) -> anyhow::Result<Proc> {
    let state = work.subdir("weir-state")?;
    let dl = work.subdir("weir-downloads")?;
    let home = work.subdir("weir-home")?;
    let mut c = weir_in(cfg, ns);
    c.env("WEIR_ED2K_HOME", &home)
        .env("HOME", &home)
        .env_remove("WEIR_ED2K_USER_HASH")
        .env("RUST_LOG", "warn")
        .arg("daemon")
        .arg("--rpc")
        .arg(WEIR_RPC.to_string())
        .arg("--listen")
        .arg(WEIR_PEERS.to_string())
        .arg("--download-dir")
        .arg(&dl)
        .arg("--state")
        .arg(&state)
        .arg("--no-dht");
    if !trackers {
        c.arg("--no-trackers");
    }
    let mut p = Proc::spawn_logged("weir-daemon", &mut c, work.path())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ns
        .wait_port(SocketAddr::V4(WEIR_RPC), Duration::from_millis(200))
        .is_err()
    {
        if p.try_wait()?.is_some() {
            return Err(p.failure("weir daemon exited"));
        }
        if Instant::now() >= deadline {
            return Err(p.failure("weir daemon RPC did not come up"));
        }
    }
    Ok(p)
}

/// Adds and gets on the daemon `p` (RPC at `addr`), then reads its RSS,
/// peak RSS, threads and the CPU it used meanwhile; stops it (SIGTERM, as
/// a service manager does), times a restart by `start` on the same state
/// (see [`restarted`]) and ends that one.
fn run_process(
    ns: &Netns,
    mut p: Proc,
    addr: SocketAddrV4,
    torrents: &[Vec<u8>],
    gets: usize,
    start: impl FnOnce() -> anyhow::Result<Proc>,
) -> anyhow::Result<(Measured, Usage)> {
    let cpu0 = weir_lab::process::tree_cpu_s(p.pid());
    let rss0 = rss_mib(p.pid());
    let m = ns.try_run_in(|| -> anyhow::Result<Measured> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(measure(SocketAddr::V4(addr), torrents, gets))
    })?;
    let rss = rss_mib(p.pid());
    let mut usage = Usage {
        cpu_s: weir_lab::process::tree_cpu_s(p.pid()) - cpu0,
        rss_mib: rss,
        kib_per_transfer: (rss - rss0) * 1024.0 / torrents.len().max(1) as f64,
        peak_rss_mib: proc_status_field(p.pid(), "VmHWM:") / 1024.0,
        threads: proc_status_field(p.pid(), "Threads:"),
        restart_s: f64::NAN,
        restart_rss_mib: f64::NAN,
    };
    let m = match m {
        Ok(m) => m,
        Err(e) => return Err(p.failure(&format!("{e:#}"))),
    };
    p.signal(nix::sys::signal::Signal::SIGTERM)?;
    if p.wait_timeout(Duration::from_secs(60))?.is_none() {
        return Err(p.failure("did not stop within 60 s of SIGTERM"));
    }
    let mut again = start()?;
    match ns.try_run_in(|| restarted(&again, SocketAddr::V4(addr), torrents.len()))? {
        Ok(s) => {
            usage.restart_s = s;
            usage.restart_rss_mib = rss_mib(again.pid());
        }
        Err(e) => return Err(again.failure(&format!("after the restart: {e:#}"))),
    }
    again.kill_tree()?;
    Ok((m, usage))
}

/// Seconds from `p`'s spawn to the first `torrent-get` that lists all `n`
/// transfers (asked every 10 ms, at most 120 s).
fn restarted(p: &Proc, addr: SocketAddr, n: usize) -> anyhow::Result<f64> {
    let body = serde_json::to_vec(
        &json!({"method": "torrent-get", "arguments": {"fields": ["id", "status"]}}),
    )?;
    let mut id = String::new();
    let mut buf = Vec::new();
    let mut last = String::from("no answer");
    while p.started().elapsed() < Duration::from_secs(120) {
        match crate::http_timer::post(addr, "/transmission/rpc", &id, &body, &mut buf) {
            Ok(t) if t.status == 409 => id = t.session_id.unwrap_or_default(),
            Ok(t) if t.status == 200 => {
                let v: Value = serde_json::from_slice(&t.body)?;
                let got = v["arguments"]["torrents"].as_array().map_or(0, Vec::len);
                if got == n {
                    return Ok(p.started().elapsed().as_secs_f64());
                }
                last = format!("{got} of {n} listed");
            }
            Ok(t) => last = format!("HTTP {}", t.status),
            Err(e) => last = format!("{e:#}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("not all {n} transfers listed 120 s after the restart ({last})")
}

/// weir's front end with the fake backend on a runtime of its own (two
/// worker threads, whose ids are kept for CPU accounting).
fn run_fake(
    ns: &Netns,
    torrents: &[Vec<u8>],
    synthetic: usize,
    gets: usize,
) -> anyhow::Result<(Measured, Usage)> {
    ns.try_run_in(|| -> anyhow::Result<(Measured, Usage)> {
        let tids = Arc::new(Mutex::new(Vec::new()));
        let t2 = tids.clone();
        let server_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                if let Ok(mut v) = t2.lock() {
                    v.push(nix::unistd::gettid().as_raw());
                }
            })
            .build()?;
        let rss0 = rss_mib(std::process::id());
        let backend = Arc::new(FakeBackend::new("/nonexistent/weir-bench"));
        backend.insert_synthetic(synthetic);
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let server = {
            let _g = server_rt.enter();
            RpcServer::from_listener(
                listener,
                RpcConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
                backend,
            )?
        };
        let addr = server.local_addr();
        let handle = {
            let _g = server_rt.enter();
            server.spawn()
        };
        let tids_now = || tids.lock().map(|v| v.clone()).unwrap_or_default();
        let cpu0 = threads_cpu_s(&tids_now());
        let client_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let m = if synthetic > 0 {
            client_rt.block_on(async {
                let c = RpcClient::new(addr);
                c.call("session-get", json!({"fields": ["version"]}))
                    .await?;
                let gets = get_times(&c, addr, synthetic, gets).await?;
                anyhow::Ok(Measured {
                    add_s: f64::NAN,
                    gets,
                })
            })?
        } else {
            client_rt.block_on(measure(addr, torrents, gets))?
        };
        let usage = Usage {
            cpu_s: threads_cpu_s(&tids_now()) - cpu0,
            rss_mib: rss_mib(std::process::id()) - rss0,
            kib_per_transfer: f64::NAN,
            peak_rss_mib: f64::NAN,
            threads: f64::NAN,
            restart_s: f64::NAN,
            restart_rss_mib: f64::NAN,
        };
        server_rt.block_on(handle.stop())?;
        Ok((m, usage))
    })?
}

fn row(m: &Measured, u: &Usage) -> [f64; 12] {
    [
        m.add_s,
        median(&m.gets.lean_ms),
        p90(&m.gets.lean_ms),
        median(&m.gets.hyper_ms),
        m.gets.size as f64 / 1024.0,
        u.rss_mib,
        u.kib_per_transfer,
        u.peak_rss_mib,
        u.cpu_s,
        u.threads,
        u.restart_s,
        u.restart_rss_mib,
    ]
}

fn statuses_text(s: &BTreeMap<i64, usize>) -> String {
    s.iter()
        .map(|(k, v)| format!("{v} x status {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let n: usize = cfg.get_or("torrents", 1000usize)?.max(1);
    let gets: usize = cfg.get_or("gets", 20usize)?.max(1);
    let big: usize = cfg.get_or("big", 10_000usize)?;
    let pieces: usize = cfg.get_or("pieces", 2usize)?.clamp(1, 1 << 20);
    let trackers: u16 = cfg.get_or("trackers", 0u16)?.min(1000);
    let ns = Netns::new("daemon")?;
    let torrents = make_torrents_with(n, pieces, trackers);
    let mut rep = Report::new(
        "daemon",
        cfg,
        &["server", "transfers"],
        vec![
            Metric::new("add all s", 2),
            Metric::new("get ms (median)", 2),
            Metric::new("get ms (p90)", 2),
            Metric::new("get ms hyper client (median)", 2),
            Metric::new("answer KiB", 0),
            Metric::new("RSS MiB", 1),
            Metric::new("KiB/transfer", 1),
            Metric::new("peak RSS MiB", 1),
            Metric::new("server CPU s", 2),
            Metric::new("threads", 0),
            Metric::new("restart s", 2),
            Metric::new("RSS after restart MiB", 1),
        ],
    );
    let tr = "transmission-daemon 3.00";
    let weir = "weir daemon";
    let fake = "weir front end (fake backend)";
    let n_label = n.to_string();
    let mut ratios = Vec::new();
    let mut rss_ratios = Vec::new();
    let mut restart_ratios = Vec::new();
    let mut restart_rss_ratios = Vec::new();
    let mut statuses = Vec::new();
    for run in 0..cfg.runs.max(1) {
        eprintln!("daemon: run {}/{}", run + 1, cfg.runs.max(1));
        let work = TempDir::new("bench-daemon")?;
        let t = start_transmission(&ns, &work).and_then(|p| {
            run_process(&ns, p, TR_RPC, &torrents, gets, || {
                start_transmission(&ns, &work)
            })
        });
        let w = start_weir_daemon(cfg, &ns, &work, trackers > 0).and_then(|p| {
            run_process(&ns, p, WEIR_RPC, &torrents, gets, || {
                start_weir_daemon(cfg, &ns, &work, trackers > 0)
            })
        });
        let f = run_fake(&ns, &torrents, 0, gets);
        for (label, r) in [(tr, &t), (weir, &w), (fake, &f)] {
            match r {
                Ok((m, u)) => {
                    rep.add_run(&[label, &n_label], &row(m, u));
                    if run == 0 {
                        statuses.push(format!("{label}: {}", statuses_text(&m.gets.statuses)));
                    }
                }
                Err(e) => rep.add_failure(&[label, &n_label], &format!("{e:#}")),
            }
        }
        if let (Ok((t, tu)), Ok((w, wu))) = (&t, &w) {
            ratios.push(median(&t.gets.lean_ms) / median(&w.gets.lean_ms));
            rss_ratios.push(wu.rss_mib / tu.rss_mib);
            restart_ratios.push(wu.restart_s / tu.restart_s);
            restart_rss_ratios.push(wu.restart_rss_mib / tu.restart_rss_mib);
        }
        if big > 0 {
            match run_fake(&ns, &[], big, gets) {
                Ok((m, u)) => rep.add_run(&[fake, &big.to_string()], &row(&m, &u)),
                Err(e) => rep.add_failure(&[fake, &big.to_string()], &format!("{e:#}")),
            }
        }
    }
    rep.note(&format!(
        "torrent-get with transmission-remote -l's {} fields, timed from the connect to the last byte (the server's close) by a blocking client (one write, reads into one buffer); the hyper client column times the same get through weir's RpcClient right after each; \
         median of {gets} per run",
        LIST_FIELDS.len()
    ));
    rep.note(
        "transmission-daemon and weir daemon rows: separate processes in one namespace holding \
         only lo; RSS is VmRSS after the gets, KiB/transfer that less VmRSS before the adds, \
         over the transfers added (each idle: no peer, no data), peak RSS VmHWM, CPU utime+stime over the adds \
         and gets, threads from /proc/<pid>/status; synthetic torrents with no data on disk \
         and no tracker (weir: --no-dht --no-trackers); restart: SIGTERM after the gets, \
         wait for the exit, start again on the same state, spawn to the first torrent-get \
         listing every transfer (asked every 10 ms), RSS read then",
    );
    rep.note(&format!(
        "each torrent: one file of {pieces} pieces of 16 KiB (the last one short)"
    ));
    if trackers > 0 {
        rep.note(&format!(
            "each torrent names {trackers} trackers (one per tier, the same for all): \
             http://127.0.0.1:1..={trackers}/announce, ports nothing listens on; weir runs \
             with its trackers on (no --no-trackers)"
        ));
    }
    rep.note(
        "fake backend rows: weir's RPC front end with weir_daemon::fake::FakeBackend \
         (in-memory transfers, no engine) inside this process; RSS is this process's growth \
         while the server holds the transfers, CPU the server runtime's threads",
    );
    if !statuses.is_empty() {
        rep.note(&format!(
            "transfer statuses after the adds (run 1): {}",
            statuses.join("; ")
        ));
    }
    if !ratios.is_empty() {
        let speed = median(&ratios);
        let rss = median(&rss_ratios);
        rep.note(&format!(
            "weir daemon vs Transmission (median of runs): torrent-get {speed:.1}x faster \
             (goal >= 5x: {}), RSS {rss:.2}x Transmission's (goal <= 1x: {}); restart to all \
             listed {:.2}x Transmission's time (issue 13 goal <= 0.5x: {}), RSS after the \
             restart {:.2}x Transmission's",
            if speed >= 5.0 { "met" } else { "NOT met" },
            if rss <= 1.0 { "met" } else { "NOT met" },
            median(&restart_ratios),
            if median(&restart_ratios) <= 0.5 {
                "met"
            } else {
                "NOT met"
            },
            median(&restart_rss_ratios),
        ));
    }
    rep.print();
    let (json, md) = rep.write()?;
    println!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torrents_are_distinct_and_parse() {
        let t = make_torrents(3);
        assert_eq!(t.len(), 3);
        assert_ne!(t[0], t[1]);
        for b in &t {
            assert!(b.starts_with(b"d10:created by") && b.ends_with(b"ee"));
        }
        for pieces in [1, 2, 1024] {
            for b in make_torrents_of(3, pieces) {
                let m = weir_bt::metainfo::Metainfo::from_bytes(&b).unwrap();
                assert_eq!(m.info.piece_count() as usize, pieces);
            }
        }
        for b in make_torrents_with(2, 2, 3) {
            let m = weir_bt::metainfo::Metainfo::from_bytes(&b).unwrap();
            assert_eq!(
                m.trackers(),
                (1..=3)
                    .map(|k| vec![format!("http://127.0.0.1:{k}/announce")])
                    .collect::<Vec<_>>()
            );
        }
        assert!((median(&[3.0, 1.0, 2.0]) - 2.0).abs() < 1e-9);
        assert!((p90(&[1.0; 10]) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn proc_status_fields() {
        let me = std::process::id();
        let threads = proc_status_field(me, "Threads:");
        assert!((1.0..100_000.0).contains(&threads), "{threads}");
        let rss = rss_mib(me);
        assert!(rss > 0.1 && rss < 100_000.0, "{rss}");
        assert!(proc_status_field(me, "NoSuchKey:").is_nan());
        let mut s = BTreeMap::new();
        s.insert(4, 3);
        s.insert(1, 2);
        assert_eq!(statuses_text(&s), "2 x status 1, 3 x status 4");
    }
}
