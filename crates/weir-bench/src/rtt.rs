//! Scenario `rtt`: request -> response round trips per second with one
//! block in flight, on loopback, to show that nothing in weir's request
//! loop sleeps, backs off or polls: with one 16 KiB block per round trip,
//! a 1 ms sleep anywhere in the loop would cap it near 1,000 round trips
//! per second, whatever the machine.
//!
//! Inside a namespace holding only `lo`: a seeder (`weir seed`, or
//! `--set seeder=lt-hps`) on 127.0.0.2 and `weir get --max-requests 1` on
//! 127.0.0.3. Round trips per second = 16 KiB blocks / seconds, the
//! seconds being weir's own (its summary line: from its start to
//! completion, connection set-up included). Rows for contrast:
//!
//! - `weir` with its normal pipeline (blocks per second, not round trips);
//! - `TCP ping-pong`: the floor without any BitTorrent, two threads in
//!   this process exchanging a 17-byte request and a 16,397-byte reply
//!   (a BitTorrent `request` and `piece` message) over loopback with
//!   TCP_NODELAY, as many times as the payload has blocks.
//!
//! A weir download still running after `limit_s` (60) seconds is stopped
//! and its rate taken from the socket counters (`ss`) after t = 1 s.
//!
//! Options: `seeder`, `limit_s`; `--size-mib` (default 256), `--runs`
//! (default 3).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::{Netns, TempDir};

use crate::BenchConfig;
use crate::bt_setup::{
    BLOCK, Payload, SeederKind, accept_within, load_average, run_weir, sample_rx_while,
    start_seeder, value_at,
};
use crate::report::{Metric, Report};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["seeder", "limit_s"];

const SEEDER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6881);
const LEECHER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// BitTorrent `request` message: length prefix, id, index, begin, length.
const REQUEST_LEN: usize = 4 + 1 + 12;
/// BitTorrent `piece` message header: length prefix, id, index, begin.
const PIECE_HEADER: usize = 4 + 1 + 8;

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let size = cfg.size_bytes(256);
    let seeder_kind = SeederKind::parse(cfg.get("seeder").unwrap_or("weir"))?;
    let blocks = size.div_ceil(BLOCK);
    let limit = Duration::from_secs(cfg.get_or("limit_s", 60u64)?.max(5));
    let load_before = load_average();
    let ns = Netns::new("rtt")?;
    let work = TempDir::new("bench-rtt")?;
    eprintln!("rtt: writing a {} MiB payload", size >> 20);
    let p = Payload::create(&work.path().join("seed"), "rtt.bin", size, 0x4771, 1 << 20)?;
    eprintln!("rtt: starting the {} seeder", seeder_kind.name());
    let mut seeder = start_seeder(cfg, &ns, &seeder_kind, &p, SEEDER, None)?;

    let mut rep = Report::new(
        "rtt",
        cfg,
        &["leecher", "in flight"],
        vec![
            Metric::new("round trips/s", 0),
            Metric::new("us/round trip", 1),
            Metric::new("s", 3),
            Metric::new("MB/s", 1),
            Metric::new("CPU s", 2),
            Metric::new("vol ctx sw/block", 2),
        ],
    );
    let mut port = 6900u16;
    for run in 0..cfg.runs {
        eprintln!("rtt: run {}/{}", run + 1, cfg.runs);
        for (label, max_req) in [("1", Some(1u32)), ("pipeline", None)] {
            port += 1;
            let labels = ["weir", label];
            match weir_once(cfg, &ns, &work, &p, port, max_req, limit) {
                Ok(m) => {
                    let rps = m.blocks / m.secs;
                    rep.add_run(
                        &labels,
                        &[
                            rps,
                            1e6 / rps,
                            m.secs,
                            m.blocks * BLOCK as f64 / m.secs / 1e6,
                            m.cpu,
                            m.vcsw_per_block,
                        ],
                    );
                    if m.stopped {
                        rep.note(&format!(
                            "run {}: weir, {label} in flight: stopped at the {} s limit, rate from the socket counters after t = 1 s",
                            run + 1,
                            limit.as_secs()
                        ));
                    }
                    eprintln!("rtt: weir, {label} in flight: {rps:.0} blocks/s");
                }
                Err(e) => rep.add_failure(&labels, &format!("{e:#}")),
            }
            if seeder.try_wait()?.is_some() {
                return Err(seeder.failure("the seeder exited"));
            }
        }
        port += 1;
        let labels = ["TCP ping-pong", "1"];
        match ping_pong(&ns, SocketAddrV4::new(LEECHER_IP, port), blocks) {
            Ok(secs) => {
                let rps = blocks as f64 / secs;
                rep.add_run(
                    &labels,
                    &[
                        rps,
                        1e6 / rps,
                        secs,
                        (blocks * BLOCK) as f64 / secs / 1e6,
                        f64::NAN,
                        f64::NAN,
                    ],
                );
                eprintln!("rtt: TCP ping-pong: {rps:.0} round trips/s");
            }
            Err(e) => rep.add_failure(&labels, &format!("{e:#}")),
        }
    }
    drop(seeder);
    rep.note(&format!(
        "{} MiB = {blocks} blocks of 16 KiB from a {} seeder on loopback; weir get --max-requests 1 (every block a round trip) and without it (normal pipeline)",
        size >> 20,
        seeder_kind.name()
    ));
    rep.note("weir rows: blocks / weir's own elapsed time (its summary line, from its start to completion); CPU s and voluntary context switches of the leecher process");
    rep.note("TCP ping-pong: 17-byte request, 16,397-byte reply, TCP_NODELAY, two threads of the bench process: the loopback floor with no BitTorrent at all");
    rep.note(&format!(
        "load average (1/5/15 min) before: {load_before}; after: {}",
        load_average()
    ));
    rep.print();
    let (json, md) = rep.write()?;
    crate::sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// What one weir download measured.
struct Measured {
    /// Blocks counted over `secs`.
    blocks: f64,
    /// Seconds they took.
    secs: f64,
    /// Leecher CPU seconds.
    cpu: f64,
    /// Leecher voluntary context switches per block received.
    vcsw_per_block: f64,
    /// Whether it was stopped at the time limit (rate from the samples).
    stopped: bool,
}

/// One weir download from the seeder. Complete: every block over weir's
/// own elapsed time. Stopped at `limit` (a slow peer): the blocks received
/// between t = 1 s and the stop, from the socket counters.
fn weir_once(
    cfg: &BenchConfig,
    ns: &Netns,
    work: &TempDir,
    p: &Payload,
    port: u16,
    max_requests: Option<u32>,
    limit: Duration,
) -> anyhow::Result<Measured> {
    let out = work.subdir(&format!("out-{port}"))?;
    let mut args: Vec<String> = vec![
        "get".into(),
        p.torrent.display().to_string(),
        "-o".into(),
        out.display().to_string(),
        "--listen".into(),
        SocketAddrV4::new(LEECHER_IP, port).to_string(),
        "--no-trackers".into(),
        "--peer".into(),
        SEEDER.to_string(),
    ];
    if let Some(m) = max_requests {
        args.push("--max-requests".into());
        args.push(m.to_string());
    }
    let logs = TempDir::new("rtt-weir")?;
    let (r, series) = sample_rx_while(
        ns,
        &[SocketAddr::V4(SEEDER)],
        Duration::from_millis(100),
        || run_weir(cfg, ns, "weir-get", &args, logs.path(), Some(limit), limit),
    )?;
    let _ = std::fs::remove_dir_all(&out);
    let r = r?;
    let cpu = r.usage.cpu_s();
    let vcsw = r.usage.vol_ctx_switches as f64;
    match r.status {
        None => {
            let s = series.first().map(Vec::as_slice).unwrap_or(&[]);
            let end = s.last().map_or(0.0, |p| p.0);
            if end <= 2.0 {
                bail!("stopped with too few samples");
            }
            let got = s.last().map_or(0, |p| p.1) as f64;
            let bytes = value_at(s, end) - value_at(s, 1.0);
            Ok(Measured {
                blocks: bytes / BLOCK as f64,
                secs: end - 1.0,
                cpu,
                vcsw_per_block: vcsw / (got / BLOCK as f64).max(1.0),
                stopped: true,
            })
        }
        Some(st) if st.success() => {
            let secs = r
                .reported_seconds()
                .context("weir printed no `complete: ... in N s` line")?;
            let blocks = p.len().div_ceil(BLOCK) as f64;
            Ok(Measured {
                blocks,
                secs,
                cpu,
                vcsw_per_block: vcsw / blocks,
                stopped: false,
            })
        }
        Some(st) => bail!("weir get exited with {st}: {}", r.stderr.trim()),
    }
}

/// `n` request -> reply round trips between two threads over loopback in
/// `ns` (server on `addr`); returns the seconds they took.
fn ping_pong(ns: &Netns, addr: SocketAddrV4, n: u64) -> anyhow::Result<f64> {
    let listener = ns
        .try_run_in(|| TcpListener::bind(addr))?
        .with_context(|| format!("binding {addr}"))?;
    std::thread::scope(|s| -> anyhow::Result<f64> {
        let server = s.spawn(move || -> anyhow::Result<()> {
            let mut c = accept_within(&listener, Duration::from_secs(10))?;
            c.set_nodelay(true)?;
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            let reply = vec![7u8; PIECE_HEADER + BLOCK as usize];
            let mut req = [0u8; REQUEST_LEN];
            for _ in 0..n {
                c.read_exact(&mut req)?;
                c.write_all(&reply)?;
            }
            Ok(())
        });
        let client = ns.try_run_in(|| -> anyhow::Result<f64> {
            let mut c = TcpStream::connect_timeout(&SocketAddr::V4(addr), Duration::from_secs(5))?;
            c.set_nodelay(true)?;
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            let req = [1u8; REQUEST_LEN];
            let mut reply = vec![0u8; PIECE_HEADER + BLOCK as usize];
            let t0 = Instant::now();
            for _ in 0..n {
                c.write_all(&req)?;
                c.read_exact(&mut reply)?;
            }
            Ok(t0.elapsed().as_secs_f64())
        })?;
        let served = server
            .join()
            .map_err(|_| anyhow::anyhow!("ping-pong server panicked"))?;
        let secs = client?;
        served?;
        Ok(secs)
    })
}
