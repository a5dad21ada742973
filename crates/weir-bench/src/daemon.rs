//! Scenario `daemon`: the Transmission RPC of transmission-daemon 3.00 and
//! of weir's RPC front end, side by side: N torrents (default 1,000) added
//! over RPC (`torrent-add` with base64 `metainfo`), then `torrent-get` of
//! all of them with the fields `transmission-remote -l` asks, timed from
//! the request to the last byte of the answer (median of `gets`, default
//! 20), the answer's size, the server's RSS and CPU.
//!
//! **weir runs with the fake backend** (`weir_daemon::fake::FakeBackend`,
//! transfers kept in memory, no engine), in this process: its CPU is the
//! server's runtime threads only (from `/proc/self/task`), its RSS the
//! growth of this process while the server holds the transfers. This
//! measures the RPC front end; the real daemon replaces the fake later.
//!
//! Both servers listen on 127.0.0.1 inside a namespace holding only `lo`;
//! Transmission has DHT, LSD, PEX, uTP, UPnP/NAT-PMP and the blocklist off,
//! and the torrents name no tracker. A last row times `torrent-get` of
//! `big` (default 10,000) synthetic transfers on weir's front end.
//!
//! Options: `torrents`, `gets`, `big`; `--runs` (default 3).

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
use crate::report::{Metric, Report};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["torrents", "gets", "big"];

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

/// What one server did.
struct Measured {
    add_s: f64,
    get_ms: Vec<f64>,
    answer_bytes: usize,
}

/// `n` distinct single-file torrents (no tracker, no data needed).
pub fn make_torrents(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let name = format!("bench-{i:05}.bin");
            let mut pieces = [0u8; 40];
            for (j, b) in pieces.iter_mut().enumerate() {
                *b = ((i * 131 + j * 7) % 251) as u8 ^ (i >> 8) as u8;
            }
            let mut t = Vec::new();
            let _ = write!(
                t,
                "d10:created by10:weir-bench4:infod6:lengthi{}e4:name{}:{}12:piece lengthi16384e6:pieces40:",
                20_000 + i,
                name.len(),
                name
            );
            t.extend_from_slice(&pieces);
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
    get_times(&c, torrents.len(), gets)
        .await
        .map(|(get_ms, answer_bytes)| Measured {
            add_s,
            get_ms,
            answer_bytes,
        })
}

async fn get_times(c: &RpcClient, n: usize, gets: usize) -> anyhow::Result<(Vec<f64>, usize)> {
    let body = Bytes::from(serde_json::to_vec(
        &json!({"method": "torrent-get", "arguments": {"fields": LIST_FIELDS}, "tag": 4}),
    )?);
    let id = c.session_id().context("no session id")?;
    let mut times = Vec::with_capacity(gets);
    let mut size = 0;
    for _ in 0..gets {
        let t = Instant::now();
        let r = c.post(body.clone(), Some(&id)).await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            bail!("torrent-get: HTTP {}", r.status);
        }
        let v: Value = serde_json::from_slice(&r.body)?;
        let got = v["arguments"]["torrents"].as_array().map_or(0, Vec::len);
        if got != n {
            bail!("torrent-get listed {got} transfers, expected {n}");
        }
        size = r.body.len();
    }
    Ok((times, size))
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
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
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
        "peer-port": 51515, "peer-port-random-on-start": false,
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

fn run_transmission(
    ns: &Netns,
    work: &TempDir,
    torrents: &[Vec<u8>],
    gets: usize,
) -> anyhow::Result<(Measured, f64, f64)> {
    let mut p = start_transmission(ns, work)?;
    let cpu0 = weir_lab::process::tree_cpu_s(p.pid());
    let m = ns.try_run_in(|| -> anyhow::Result<Measured> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(measure(SocketAddr::V4(TR_RPC), torrents, gets))
    })??;
    let cpu = weir_lab::process::tree_cpu_s(p.pid()) - cpu0;
    let rss = rss_mib(p.pid());
    p.kill_tree()?;
    Ok((m, rss, cpu))
}

/// weir's front end with the fake backend on a runtime of its own (two
/// worker threads, whose ids are kept for CPU accounting).
fn run_weir(
    ns: &Netns,
    torrents: &[Vec<u8>],
    synthetic: usize,
    gets: usize,
) -> anyhow::Result<(Measured, f64, f64)> {
    ns.try_run_in(|| -> anyhow::Result<(Measured, f64, f64)> {
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
                let (get_ms, answer_bytes) = get_times(&c, synthetic, gets).await?;
                anyhow::Ok(Measured {
                    add_s: f64::NAN,
                    get_ms,
                    answer_bytes,
                })
            })?
        } else {
            client_rt.block_on(measure(addr, torrents, gets))?
        };
        let cpu = threads_cpu_s(&tids_now()) - cpu0;
        let rss = rss_mib(std::process::id()) - rss0;
        server_rt.block_on(handle.stop())?;
        Ok((m, rss, cpu))
    })?
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let n: usize = cfg.get_or("torrents", 1000usize)?.max(1);
    let gets: usize = cfg.get_or("gets", 20usize)?.max(1);
    let big: usize = cfg.get_or("big", 10_000usize)?;
    let ns = Netns::new("daemon")?;
    let torrents = make_torrents(n);
    let mut rep = Report::new(
        "daemon",
        cfg,
        &["server", "transfers"],
        vec![
            Metric::new("add all s", 2),
            Metric::new("get ms (median)", 2),
            Metric::new("get ms (p90)", 2),
            Metric::new("answer KiB", 0),
            Metric::new("RSS MiB", 1),
            Metric::new("server CPU s", 2),
        ],
    );
    let tr = "transmission-daemon 3.00";
    let weir = "weir RPC, FAKE backend";
    let n_label = n.to_string();
    let mut ratios = Vec::new();
    for run in 0..cfg.runs.max(1) {
        eprintln!("daemon: run {}/{}", run + 1, cfg.runs.max(1));
        let work = TempDir::new("bench-daemon")?;
        let t = run_transmission(&ns, &work, &torrents, gets);
        let w = run_weir(&ns, &torrents, 0, gets);
        for (label, r) in [(tr, &t), (weir, &w)] {
            match r {
                Ok((m, rss, cpu)) => rep.add_run(
                    &[label, &n_label],
                    &[
                        m.add_s,
                        median(&m.get_ms),
                        p90(&m.get_ms),
                        m.answer_bytes as f64 / 1024.0,
                        *rss,
                        *cpu,
                    ],
                ),
                Err(e) => rep.add_failure(&[label, &n_label], &format!("{e:#}")),
            }
        }
        if let (Ok((t, ..)), Ok((w, ..))) = (&t, &w) {
            ratios.push(median(&t.get_ms) / median(&w.get_ms));
        }
        if big > 0 {
            match run_weir(&ns, &[], big, gets) {
                Ok((m, rss, cpu)) => rep.add_run(
                    &[weir, &big.to_string()],
                    &[
                        f64::NAN,
                        median(&m.get_ms),
                        p90(&m.get_ms),
                        m.answer_bytes as f64 / 1024.0,
                        rss,
                        cpu,
                    ],
                ),
                Err(e) => rep.add_failure(&[weir, &big.to_string()], &format!("{e:#}")),
            }
        }
    }
    rep.note(&format!(
        "torrent-get with transmission-remote -l's {} fields, timed from request to last byte; \
         median of {gets} per run",
        LIST_FIELDS.len()
    ));
    rep.note(
        "weir rows: the RPC front end with weir_daemon::fake::FakeBackend (in-memory transfers, \
         no engine) inside this process; its RSS is this process's growth while the server \
         holds the transfers, its CPU the server runtime's threads; the real daemon replaces it",
    );
    if !ratios.is_empty() {
        rep.note(&format!(
            "torrent-get speed-up over Transmission (median of runs): {:.1}x (goal >= 5x)",
            median(&ratios)
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
        assert!((median(&[3.0, 1.0, 2.0]) - 2.0).abs() < 1e-9);
        assert!((p90(&[1.0; 10]) - 1.0).abs() < 1e-9);
    }
}
