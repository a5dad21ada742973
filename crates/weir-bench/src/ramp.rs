//! Scenario `ramp`: how fast one leecher gets going on a distant peer.
//!
//! One seeder, one leecher at a time, a link emulator (`weir linkem`,
//! default 75 ms one-way = 150 ms RTT, 50 MB/s each way) between them, all
//! inside one namespace holding only `lo`. The table gives each leecher's
//! cumulative MiB at t = 1, 2, 5, 10, 20, 40 s, measured from the moment
//! its process is started (the plain stream: from its `connect`), sampled
//! every 100 ms from the kernel's per-socket `bytes_received` of the
//! leecher's sockets to the emulator (protocol overhead included, about
//! 0.1%), and the payload length from the client's own completion report.
//!
//! Leechers (`--set leechers=tcp,weir,rtorrent,libtorrent,qbittorrent`, the
//! default):
//! - `tcp`: a plain TCP stream of the same length through its own emulator
//!   with the same settings (a sender thread writing 256 KiB buffers, a
//!   receiver thread reading): the link's own ramp, the ceiling;
//! - `weir`: `weir get --peer EMULATOR --no-trackers`;
//! - `rtorrent`: cannot dial a peer by address, so it gets the torrent with
//!   an opentracker announce URL, and the tracker knows one peer: the
//!   emulator's address, announced from a socket bound to the emulator's IP
//!   (the seeder never announces, so nothing hands out its direct address);
//! - `libtorrent` (default settings), `lt-hps`, `aria2c`, `qbittorrent`:
//!   through the `weir_lab::bt` adapters (aria2c also through the tracker;
//!   qBittorrent dials the emulator through its Web API, so its time
//!   includes starting that API).
//!
//! Seeder (`--set seeder=lt-hps`, default; or `weir`, `libtorrent`): one
//! process for the whole bench, dialled by every leecher through the
//! emulator. Other options: `delay=75ms`, `rate=50MB/s`, `queue=4MiB`
//! (linkem's), `sample_ms=100`, `timeout_s=90`, `piece_kib=1024`;
//! `--size-mib` (default 1024), `--runs` (default 3; 1 is enough to see
//! the shape). Writes `ramp-<UTC>.{json,md,png}`, `.first5s.png` (the
//! first seconds enlarged) and `.series.json` (every sample of every run).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::bt::{self, Client, Tracker};
use weir_lab::{Netns, TempDir};

use crate::BenchConfig;
use crate::bt_setup::{
    LinkSpec, Linkem, Payload, SeederKind, Series, accept_within, announce_as, finish_series,
    load_average, mib, run_weir, sample_rx_while, start_seeder, value_at,
};
use crate::chart;
use crate::report::{Metric, Report};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &[
    "seeder",
    "leechers",
    "delay",
    "rate",
    "queue",
    "sample_ms",
    "timeout_s",
    "piece_kib",
];

/// The times (seconds from leecher start) the table reports.
pub const TIMES: [f64; 6] = [1.0, 2.0, 5.0, 10.0, 20.0, 40.0];

/// Seconds shown by the second, zoomed chart.
const ZOOM_S: f64 = 5.0;

const SEEDER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6881);
const LEECHER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const EMULATOR_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);
const TRACKER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 9), 6969);

/// A leecher of the scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leecher {
    /// A plain TCP stream through the same emulated link.
    Tcp,
    /// weir.
    Weir,
    /// A real client.
    Real(Client),
}

impl Leecher {
    /// Parses `tcp`, `weir` or a client name (`rtorrent`, `libtorrent`, ...).
    pub fn parse(s: &str) -> anyhow::Result<Leecher> {
        match s.trim() {
            "tcp" | "plain" => Ok(Leecher::Tcp),
            "weir" => Ok(Leecher::Weir),
            other => Client::parse(other)
                .map(Leecher::Real)
                .with_context(|| format!("unknown leecher {other:?}")),
        }
    }

    /// Label in tables and charts.
    pub fn name(&self) -> &str {
        match self {
            Leecher::Tcp => "plain TCP",
            Leecher::Weir => "weir",
            Leecher::Real(c) => c.name(),
        }
    }
}

/// One leecher run.
struct Outcome {
    /// Cumulative bytes over seconds from start.
    series: Series,
    /// Seconds to completion (None: did not complete).
    done: Option<f64>,
    /// Leecher CPU seconds (NaN: not a process).
    cpu: f64,
}

/// What every leecher run shares.
struct Setup<'a> {
    cfg: &'a BenchConfig,
    ns: &'a Netns,
    work: &'a TempDir,
    link: LinkSpec,
    payload: Payload,
    tracker_torrent: Option<std::path::PathBuf>,
    every: Duration,
    timeout: Duration,
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let size = cfg.size_bytes(1024);
    let seeder_kind = SeederKind::parse(cfg.get("seeder").unwrap_or("lt-hps"))?;
    let leechers = cfg
        .get("leechers")
        .unwrap_or("tcp,weir,rtorrent,libtorrent,qbittorrent")
        .split(',')
        .map(Leecher::parse)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let link = LinkSpec {
        delay: cfg.get("delay").unwrap_or("75ms").to_string(),
        rate: Some(cfg.get("rate").unwrap_or("50MB/s").to_string()),
        queue: cfg.get("queue").map(str::to_string),
    };
    let every = Duration::from_millis(cfg.get_or("sample_ms", 100u64)?.max(10));
    let timeout = Duration::from_secs(cfg.get_or("timeout_s", 90u64)?);
    let piece = cfg.get_or("piece_kib", 1024u64)? * 1024;
    let load_before = load_average();

    let ns = Netns::new("ramp")?;
    let work = TempDir::new("bench-ramp")?;
    eprintln!("ramp: writing a {} MiB payload and its torrent", size >> 20);
    let payload = Payload::create(&work.path().join("seed"), "ramp.bin", size, 0x7a3d, piece)?;
    let needs_tracker = leechers
        .iter()
        .any(|l| matches!(l, Leecher::Real(c) if !c.can_dial_peer()));
    let mut tracker = if needs_tracker {
        Some(Tracker::start(
            &ns,
            TRACKER,
            &[payload.info.info_hash_hex()],
        )?)
    } else {
        None
    };
    let tracker_torrent = match &tracker {
        Some(t) => Some(payload.with_announce(&t.announce_url())?),
        None => None,
    };
    eprintln!("ramp: starting the {} seeder", seeder_kind.name());
    let mut seeder = start_seeder(cfg, &ns, &seeder_kind, &payload, SEEDER, None)?;
    let setup = Setup {
        cfg,
        ns: &ns,
        work: &work,
        link,
        payload,
        tracker_torrent,
        every,
        timeout,
    };

    let mut metrics: Vec<Metric> = TIMES
        .iter()
        .map(|t| Metric::new(&format!("MiB@{t}s"), 1))
        .collect();
    metrics.push(Metric::new("done s", 2));
    metrics.push(Metric::new("CPU s", 2));
    let mut report = Report::new("ramp", cfg, &["leecher", "seeder"], metrics);
    let mut chart_series = Vec::new();
    let mut zoom_series = Vec::new();
    let mut all_series = Vec::new();
    let mut port = 7000u16;
    for run in 0..cfg.runs {
        for l in &leechers {
            port += 1;
            eprintln!("ramp: run {}/{}: {}", run + 1, cfg.runs, l.name());
            let seeder_label = match l {
                Leecher::Tcp => "sender thread",
                _ => seeder_kind.name(),
            };
            if let (Leecher::Real(c), Some(t)) = (l, tracker.as_mut())
                && !c.can_dial_peer()
            {
                // A fresh tracker knowing only the emulator of this run.
                t.restart()?;
                announce_as(
                    &ns,
                    TRACKER,
                    &setup.payload.info.info_hash,
                    EMULATOR_IP,
                    port,
                )?;
            }
            let labels = [l.name(), seeder_label];
            match leech_once(&setup, l, port) {
                Ok(o) => {
                    let mut values: Vec<f64> = TIMES
                        .iter()
                        .map(|&t| mib(value_at(&o.series, t).min(size as f64)))
                        .collect();
                    values.push(o.done.unwrap_or(f64::NAN));
                    values.push(o.cpu);
                    report.add_run(&labels, &values);
                    if o.done.is_none() {
                        let got = o.series.last().map_or(0, |p| p.1);
                        report.note(&format!(
                            "run {}: {} did not complete within {} s ({:.1} of {:.0} MiB received); its MiB columns are what it had",
                            run + 1,
                            l.name(),
                            setup.timeout.as_secs(),
                            mib(got as f64),
                            mib(size as f64)
                        ));
                    }
                    if run == 0 {
                        chart_series.push(chart::Series::cumulative_mib(
                            l.name(),
                            &clip(&o.series, TIMES[TIMES.len() - 1] + 2.0),
                        ));
                        zoom_series.push(chart::Series::cumulative_mib(
                            l.name(),
                            &clip(&o.series, ZOOM_S),
                        ));
                    }
                    all_series.push(serde_json::json!({
                        "run": run + 1,
                        "leecher": l.name(),
                        "done_s": o.done,
                        "samples": o.series,
                    }));
                }
                Err(e) => {
                    eprintln!("ramp: {} failed: {e:#}", l.name());
                    report.add_failure(&labels, &format!("{e:#}"));
                }
            }
            if seeder.try_wait()?.is_some() {
                return Err(seeder.failure("the seeder exited"));
            }
        }
    }
    drop(seeder);

    report.note(&format!(
        "{} MiB payload ({} KiB pieces), one seeder ({}), one leecher at a time; link: weir linkem, {}; every leecher dials the emulator, which forwards to the seeder",
        size >> 20,
        piece / 1024,
        seeder_kind.name(),
        setup.link.describe()
    ));
    report.note(&format!(
        "time from leecher process start (plain TCP: from connect; weir's done s: its own summary time, from its start to the verified last piece); bytes = kernel bytes_received on the leecher's sockets to the emulator, sampled every {} ms, interpolated; after completion the payload length",
        every.as_millis()
    ));
    if needs_tracker {
        report.note(
            "rtorrent/aria2c get the peer from opentracker, which knows only the emulator's address (announced from the emulator's IP); the seeder never announces",
        );
    }
    target_notes(&mut report);
    report.note(&format!(
        "load average (1/5/15 min) before: {load_before}; after: {}",
        load_average()
    ));
    report.print();
    let (json, md) = report.write()?;
    let png = report.path_stem().with_extension("png");
    let series_path = report.path_stem().with_extension("series.json");
    std::fs::write(
        &series_path,
        serde_json::to_string(&serde_json::json!({ "runs": all_series }))?,
    )
    .with_context(|| format!("writing {}", series_path.display()))?;
    if chart_series.is_empty() {
        eprintln!("ramp: nothing to chart");
    } else {
        chart::cumulative_mib(
            &png,
            &format!(
                "ramp: {} MiB, {} (run 1)",
                size >> 20,
                setup.link.describe()
            ),
            &chart_series,
        )?;
        let zoom = report
            .path_stem()
            .with_extension(format!("first{ZOOM_S}s.png"));
        chart::cumulative_mib(
            &zoom,
            &format!(
                "ramp: the first {ZOOM_S} s, {} (run 1)",
                setup.link.describe()
            ),
            &zoom_series,
        )?;
        crate::sayln!("charts: {} and {}", png.display(), zoom.display());
    }
    crate::sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// Points of `s` up to `end` seconds, ending exactly at `end`.
fn clip(s: &Series, end: f64) -> Vec<(f64, u64)> {
    let mut v: Vec<(f64, u64)> = s.iter().copied().filter(|p| p.0 <= end).collect();
    v.push((end, value_at(s, end) as u64));
    v
}

/// Notes whether the targets are met, from the medians.
fn target_notes(report: &mut Report) {
    let med = |name: &str| -> Option<Vec<Option<f64>>> {
        report
            .rows
            .iter()
            .find(|r| r.labels[0] == name)
            .map(|r| r.median.clone())
    };
    let (w, tcp, lt) = (med("weir"), med("plain TCP"), med("libtorrent"));
    let (Some(w), Some(tcp)) = (w, tcp) else {
        return;
    };
    let i10 = TIMES.iter().position(|&t| t == 10.0).unwrap_or(3);
    if let (Some(a), Some(b)) = (w[i10], tcp[i10]) {
        let pct = 100.0 * a / b.max(1e-9);
        report.note(&format!(
            "target weir >= 90% of plain TCP by t=10 s: {:.1} / {:.1} MiB = {pct:.1}% -> {}",
            a,
            b,
            if pct >= 90.0 { "met" } else { "NOT met" }
        ));
    }
    if let Some(lt) = lt {
        let mut short = Vec::new();
        for (i, t) in TIMES.iter().enumerate() {
            if let (Some(a), Some(b)) = (w[i], lt[i])
                && a < b
            {
                short.push(format!("t={t}s {a:.1} < {b:.1}"));
            }
        }
        report.note(&format!(
            "target weir >= libtorrent at every t: {}",
            if short.is_empty() {
                "met".to_string()
            } else {
                format!("NOT met ({})", short.join(", "))
            }
        ));
    }
}

/// One leecher run through a fresh emulator on `127.0.0.4:port`.
fn leech_once(s: &Setup<'_>, l: &Leecher, port: u16) -> anyhow::Result<Outcome> {
    let emu = SocketAddrV4::new(EMULATOR_IP, port);
    let size = s.payload.len();
    if *l == Leecher::Tcp {
        return plain_stream(s, emu, size);
    }
    let linkem = Linkem::start(s.cfg, s.ns, emu, SocketAddr::V4(SEEDER), &s.link)?;
    let out = s.work.subdir(&format!("leech-{port}"))?;
    let leech_addr = SocketAddrV4::new(LEECHER_IP, port + 1000);
    let client = match l {
        Leecher::Weir => {
            let r = weir_once(s, emu, leech_addr, &out);
            drop(linkem);
            let _ = std::fs::remove_dir_all(&out);
            return r;
        }
        Leecher::Real(c) => c.clone(),
        Leecher::Tcp => unreachable!("handled above"),
    };
    let torrent = if client.can_dial_peer() {
        s.payload.torrent.clone()
    } else {
        s.tracker_torrent
            .clone()
            .context("no tracker torrent for a client that needs a tracker")?
    };
    let opts = bt::Options {
        peers: vec![SocketAddr::V4(emu)],
        timeout: s.timeout,
        ..bt::Options::default()
    };
    let (res, mut series) = sample_rx_while(s.ns, &[SocketAddr::V4(emu)], s.every, || {
        bt::leech_with(s.ns, &client, &torrent, &out, leech_addr, &opts)
    })?;
    drop(linkem);
    let _ = std::fs::remove_dir_all(&out);
    let mut series = series.pop().unwrap_or_default();
    match res {
        Ok(r) => {
            finish_series(&mut series, Some(r.seconds), size);
            Ok(Outcome {
                series,
                done: Some(r.seconds),
                cpu: r.usage.cpu_s(),
            })
        }
        // A stalled download still has a ramp to show.
        Err(e) if series.last().is_some_and(|p| p.1 > 0) => {
            eprintln!("ramp: {} did not complete: {e:#}", l.name());
            Ok(Outcome {
                series,
                done: None,
                cpu: f64::NAN,
            })
        }
        Err(e) => Err(e),
    }
}

/// weir leeching through the emulator at `emu`. Its completion time is
/// weir's own (the summary line: from its driver's start, a few ms after
/// the process starts), not its exit: `weir get` notices completion on its
/// 500 ms progress tick, so it exits up to 0.5 s later.
fn weir_once(
    s: &Setup<'_>,
    emu: SocketAddrV4,
    addr: SocketAddrV4,
    out: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let args: Vec<String> = vec![
        "get".into(),
        s.payload.torrent.display().to_string(),
        "-o".into(),
        out.display().to_string(),
        "--listen".into(),
        addr.to_string(),
        "--no-trackers".into(),
        "--peer".into(),
        emu.to_string(),
    ];
    let logs = TempDir::new("ramp-weir")?;
    let (res, mut series) = sample_rx_while(s.ns, &[SocketAddr::V4(emu)], s.every, || {
        run_weir(
            s.cfg,
            s.ns,
            "weir",
            &args,
            logs.path(),
            Some(s.timeout),
            s.timeout,
        )
    })?;
    let r = res?;
    let mut series = series.pop().unwrap_or_default();
    match r.status {
        // Stopped at the timeout: a stalled download still has a ramp.
        None => Ok(Outcome {
            series,
            done: None,
            cpu: r.usage.cpu_s(),
        }),
        Some(st) if st.success() => {
            let done = r.reported_seconds().unwrap_or(r.seconds);
            finish_series(&mut series, Some(done), s.payload.len());
            Ok(Outcome {
                series,
                done: Some(done),
                cpu: r.usage.cpu_s(),
            })
        }
        Some(st) => bail!(
            "weir get exited with {st}: {}",
            r.stderr
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    }
}

/// A plain TCP stream of `size` bytes through an emulator on `emu` with the
/// same link settings: a sender thread behind the emulator, the receiver
/// in this process (both inside the namespace).
fn plain_stream(s: &Setup<'_>, emu: SocketAddrV4, size: u64) -> anyhow::Result<Outcome> {
    let src = SocketAddrV4::new(*SEEDER.ip(), emu.port() + 2000);
    let listener =
        s.ns.try_run_in(|| TcpListener::bind(src))?
            .with_context(|| format!("binding the plain sender on {src}"))?;
    let _linkem = Linkem::start(s.cfg, s.ns, emu, SocketAddr::V4(src), &s.link)?;
    let timeout = s.timeout;
    std::thread::scope(|sc| -> anyhow::Result<Outcome> {
        let sender = sc.spawn(move || send_all(&listener, size, timeout));
        let recv =
            s.ns.try_run_in(|| receive_all(SocketAddr::V4(emu), size, timeout))?;
        let sent = sender
            .join()
            .map_err(|_| anyhow::anyhow!("plain sender panicked"))?;
        let (series, done) = recv?;
        sent?;
        Ok(Outcome {
            series,
            done: Some(done),
            cpu: f64::NAN,
        })
    })
}

/// Accepts one connection (bounded wait) and writes `size` bytes in
/// 256 KiB buffers, then closes its write side.
fn send_all(l: &TcpListener, size: u64, timeout: Duration) -> anyhow::Result<()> {
    let mut c = accept_within(l, timeout).context("plain sender")?;
    c.set_write_timeout(Some(timeout))?;
    let buf = vec![0x5au8; 256 * 1024];
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        c.write_all(&buf[..n]).context("plain sender: write")?;
        left -= n as u64;
    }
    c.shutdown(std::net::Shutdown::Write)?;
    Ok(())
}

/// Connects to `to` and reads until `size` bytes are in or EOF; returns
/// the cumulative series (from just before `connect`) and the completion
/// time.
fn receive_all(to: SocketAddr, size: u64, timeout: Duration) -> anyhow::Result<(Series, f64)> {
    let t0 = Instant::now();
    let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(10))
        .with_context(|| format!("plain receiver: connecting to {to}"))?;
    c.set_read_timeout(Some(timeout))?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    let mut series: Series = vec![(0.0, 0)];
    let mut last_t = 0.0;
    while got < size {
        let n = c.read(&mut buf).context("plain receiver: read")?;
        if n == 0 {
            break;
        }
        got += n as u64;
        let t = t0.elapsed().as_secs_f64();
        if t - last_t >= 0.005 {
            series.push((t, got));
            last_t = t;
        }
        if t0.elapsed() > timeout {
            bail!("plain stream: {got} of {size} bytes after {timeout:?}");
        }
    }
    let done = t0.elapsed().as_secs_f64();
    if got < size {
        bail!("plain stream ended early: {got} of {size} bytes");
    }
    series.push((done, got));
    Ok((series, done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leechers_parse() {
        assert_eq!(Leecher::parse("tcp").unwrap(), Leecher::Tcp);
        assert_eq!(Leecher::parse(" weir").unwrap(), Leecher::Weir);
        assert_eq!(
            Leecher::parse("rtorrent").unwrap(),
            Leecher::Real(Client::Rtorrent)
        );
        assert!(Leecher::parse("nope").is_err());
    }

    #[test]
    fn clip_ends_at_the_limit() {
        let s = vec![(0.0, 0), (10.0, 100), (50.0, 500)];
        assert_eq!(clip(&s, 20.0), vec![(0.0, 0), (10.0, 100), (20.0, 200)]);
    }

    #[test]
    fn target_notes_compare_medians() {
        let cfg = BenchConfig::new("weir".into(), "/nonexistent".into());
        let mut m: Vec<Metric> = TIMES
            .iter()
            .map(|t| Metric::new(&t.to_string(), 1))
            .collect();
        m.push(Metric::new("done", 1));
        m.push(Metric::new("cpu", 1));
        let mut r = Report::new("ramp", &cfg, &["leecher", "seeder"], m);
        r.add_run(
            &["plain TCP", "x"],
            &[45.0, 93.0, 236.0, 474.0, 951.0, 1024.0, 21.0, 0.0],
        );
        r.add_run(
            &["weir", "x"],
            &[40.0, 90.0, 230.0, 440.0, 940.0, 1024.0, 22.0, 1.0],
        );
        r.add_run(
            &["libtorrent", "x"],
            &[1.0, 32.0, 175.0, 413.0, 950.0, 1024.0, 23.0, 1.0],
        );
        target_notes(&mut r);
        assert!(
            r.notes[0].contains("92.8%") && r.notes[0].ends_with("met"),
            "{:?}",
            r.notes
        );
        assert!(
            r.notes[1].contains("NOT met (t=20s 940.0 < 950.0)"),
            "{:?}",
            r.notes
        );
    }
}
