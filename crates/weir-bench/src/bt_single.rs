//! Scenario `bt-single`: one 1 GiB single-file torrent (1 MiB pieces), one
//! libtorrent-rasterbar seeder with its high-performance seed settings, and
//! weir, libtorrent, aria2c, Transmission and qBittorrent as leechers in
//! turn, N runs
//! each, round-robin so machine noise spreads over every client. Prints the
//! median time, MB/s, CPU seconds and peak RSS of each, and weir's ratios:
//! time against the fastest real leecher, CPU against libtorrent's.
//!
//! Everything runs in a network namespace holding only `lo`. aria2c and
//! Transmission cannot be given a peer, so an opentracker on loopback
//! introduces them; Transmission 3.00 refuses 127/8 peers from a tracker,
//! so for it a second seeder with the same settings dials the leecher once
//! it listens. Leech time runs from the leecher's process start to
//! its own completion report (weir: its exit once every piece is verified).
//!
//! qBittorrent (qbittorrent-nox, driven through its Web API) dials the
//! seeder itself; its time includes starting its Web API.
//!
//! Options: `--set clients=weir,libtorrent,aria2c,transmission,qbittorrent`
//! (a subset),
//! `--set baseline_weir=PATH` (another weir build, e.g. from before a
//! change, run as leecher `weir-base` in the same rounds), `--size-mib N`
//! (default 1024), `--runs N` (default 3).

use std::net::{SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use weir_lab::bt::{self, Client, Options, Tracker};
use weir_lab::{Netns, TempDir, ci, payload};

use crate::BenchConfig;
use crate::report::{Metric, Report};

const SEED: &str = "127.0.0.1:6881";
const SEED_DIALLING: &str = "127.0.0.1:6883";
const LEECH: &str = "127.0.0.2:6882";
const TRACKER: &str = "127.0.0.1:6969";

fn a(s: &str) -> SocketAddrV4 {
    s.parse().expect("literal address")
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(&["clients", "baseline_weir"])?;
    if !ci::require_root_and_netns()? {
        bail!("bt-single needs root (network namespaces)");
    }
    let size = cfg.size_bytes(1024);
    let wanted = cfg
        .get("clients")
        .unwrap_or("weir,libtorrent,aria2c,transmission,qbittorrent");
    let weir =
        crate::bt_setup::weir_leecher(cfg, "weir", &["--peer", "{peer}", "-q"].map(String::from));
    let mut clients = Vec::new();
    for name in wanted.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        clients.push(match name {
            "weir" => weir.clone(),
            other => Client::parse(other)
                .with_context(|| format!("unknown client {other:?} in --set clients"))?,
        });
    }
    if let Some(path) = cfg.get("baseline_weir") {
        let exe = std::path::PathBuf::from(path);
        if !exe.is_file() {
            bail!("--set baseline_weir={path}: no such file");
        }
        let mut base_cfg = cfg.clone();
        base_cfg.weir_exe = exe;
        clients.push(crate::bt_setup::weir_leecher(
            &base_cfg,
            "weir-base",
            &["--peer", "{peer}", "-q"].map(String::from),
        ));
    }
    for c in clients.iter().chain([&Client::LibtorrentHps]) {
        for p in c.programs() {
            if !ci::require_program(&p)? {
                bail!("{p} is not installed");
            }
        }
    }

    let dir = TempDir::new("bench-bt-single")?;
    let data = dir.subdir("seed")?;
    let file = data.join("payload.bin");
    eprintln!("bt-single: writing a {} MiB payload", size >> 20);
    payload::write(&file, size, 1)?;
    let torrent = dir.path().join("payload.torrent");
    let st = cfg
        .weir()
        .arg("create")
        .arg(&file)
        .arg("-o")
        .arg(&torrent)
        .args([
            "--piece-size",
            "1048576",
            "-t",
            &format!("http://{TRACKER}/announce"),
        ])
        .output()?;
    if !st.status.success() {
        bail!("weir create: {}", String::from_utf8_lossy(&st.stderr));
    }
    let info = weir_lab::torrent::TorrentInfo::read(&torrent)?;

    let ns = Netns::new("bench-bt")?;
    let tracker = Tracker::start(&ns, a(TRACKER), &[info.info_hash_hex()])?;
    let seeder = bt::start_seed(&ns, &Client::LibtorrentHps, &torrent, &data, a(SEED))?;
    // The seeder announces once at start and then every half hour: the
    // tracker must keep knowing it, so it is never restarted in between.
    tracker.wait_seeder(&info.info_hash_hex(), Duration::from_secs(60))?;
    let mut report = Report::new(
        "bt-single",
        cfg,
        &["leecher"],
        vec![
            Metric::new("s", 2),
            Metric::new("MB/s", 1),
            Metric::new("CPU s", 2),
            Metric::new("peak RSS MiB", 1),
        ],
    );
    for round in 0..cfg.runs {
        for c in &clients {
            eprintln!(
                "bt-single: round {} of {}: {}",
                round + 1,
                cfg.runs,
                c.name()
            );
            let r = leech_once(&ns, c, &torrent, &data, &dir, size);
            match r {
                Ok(r) => report.add_run(
                    &[c.name()],
                    &[
                        r.seconds,
                        r.rate(size) / 1e6,
                        r.usage.cpu_s(),
                        r.usage.max_rss_kib as f64 / 1024.0,
                    ],
                ),
                Err(e) => {
                    eprintln!("bt-single: {} failed: {e:#}", c.name());
                    report.add_failure(&[c.name()], &format!("{e:#}"));
                }
            }
        }
    }
    drop(seeder);
    add_ratios(&mut report);
    report.note(&format!(
        "seeder: libtorrent-rasterbar {} with high_performance_seed(), 1 MiB pieces, {} MiB payload; \
         load average at the end: {}",
        "(python3-libtorrent)",
        size >> 20,
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    ));
    report.print();
    let (json, md) = report.write()?;
    eprintln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// One timed download by `client` into a fresh directory; the file is
/// compared with the seed's before the run counts.
fn leech_once(
    ns: &Netns,
    client: &Client,
    torrent: &Path,
    data: &Path,
    dir: &TempDir,
    size: u64,
) -> anyhow::Result<bt::LeechResult> {
    let out = dir.path().join(format!("out-{}", client.name()));
    let _ = std::fs::remove_dir_all(&out);
    crate::common::warm_page_cache(dir.path(), size)?;
    std::fs::create_dir_all(&out)?;
    let timeout = Duration::from_secs(60 + size / 5_000_000);
    let lopts = Options {
        peers: if client.can_dial_peer() {
            vec![SocketAddr::V4(a(SEED))]
        } else {
            Vec::new()
        },
        timeout,
        ..Options::default()
    };
    let result = if *client == Client::Transmission {
        // Transmission 3.00 refuses 127/8 peers from a tracker: a second
        // seeder with the same settings dials it, started only once
        // Transmission listens (libtorrent stops dialling an address after
        // a few refusals).
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let dialler = scope.spawn(move || -> anyhow::Result<()> {
                ns.wait_port(SocketAddr::V4(a(LEECH)), timeout)?;
                let opts = Options {
                    dial: Some(SocketAddr::V4(a(LEECH))),
                    ..Options::default()
                };
                let _p = bt::start_seed_with(
                    ns,
                    &Client::LibtorrentHps,
                    torrent,
                    data,
                    a(SEED_DIALLING),
                    &opts,
                )?;
                let _ = stop_rx.recv();
                Ok(())
            });
            let r = bt::leech_with(ns, client, torrent, &out, a(LEECH), &lopts);
            let _ = stop_tx.send(());
            match dialler.join() {
                Ok(Err(e)) if r.is_err() => Err(e.context("dialling seeder")),
                _ => r,
            }
        })?
    } else {
        bt::leech_with(ns, client, torrent, &out, a(LEECH), &lopts)?
    };
    payload::files_equal(&data.join("payload.bin"), &out.join("payload.bin"))
        .context("downloaded file differs from the seed's")?;
    let _ = std::fs::remove_dir_all(&out);
    Ok(result)
}

/// Notes weir's time against the fastest real leecher and its CPU against
/// "met" or "NOT met".
fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// libtorrent's, with the goals: issue 9's time (<= 0.6x the fastest real
/// leecher), CPU no more than libtorrent's, and issue 13's peak RSS
/// (<= 48 MiB for 1 GiB).
fn add_ratios(report: &mut Report) {
    let rows = report.rows.clone();
    let med = |name: &str, i: usize| {
        rows.iter()
            .find(|r| r.labels[0] == name)
            .and_then(|r| r.median[i])
    };
    let Some(weir_s) = med("weir", 0) else {
        return;
    };
    let fastest = ["libtorrent", "aria2c", "transmission"]
        .iter()
        .filter_map(|n| med(n, 0).map(|s| (*n, s)))
        .min_by(|x, y| x.1.total_cmp(&y.1));
    if let Some((name, s)) = fastest {
        let r = weir_s / s;
        report.note(&format!(
            "weir time / fastest real leecher ({name}): {r:.2} (goal <= 0.60: {})",
            verdict(r <= 0.60)
        ));
    }
    if let (Some(w), Some(l)) = (med("weir", 2), med("libtorrent", 2)) {
        report.note(&format!(
            "weir CPU s / libtorrent CPU s: {:.2} (goal <= 1.00: {})",
            w / l,
            verdict(w <= l)
        ));
    }
    if let Some(rss) = med("weir", 3) {
        report.note(&format!(
            "weir peak RSS: {rss:.1} MiB (goal <= 48: {})",
            verdict(rss <= 48.0)
        ));
    }
    if let (Some(w), Some(b)) = (med("weir", 0), med("weir-base", 0)) {
        report.note(&format!(
            "weir time / weir-base (the baseline_weir build) time: {:.2}; CPU: {}",
            w / b,
            match (med("weir", 2), med("weir-base", 2)) {
                (Some(wc), Some(bc)) => format!("{:.2}", wc / bc),
                _ => "n/a".into(),
            }
        ));
    }
}
