//! Scenario `hostile`: the floods of issue 8 against the real `weir`
//! binary on loopback, each for as long as an honest download lasts. For
//! each flood: weir's resident size before, at its peak during (sampled
//! from `/proc/<pid>/status` every 10 ms, and `VmHWM` after resetting it
//! through `clear_refs` at the flood's start) and after (`settle` seconds
//! after the flood ended), and the rate of an honest leecher meanwhile
//! (a second `weir get` of the same file from the same weir seeder, its
//! download capped with `--max-down` so the rate is stable) against the
//! same run without a flood.
//!
//! The floods (the hostile peers are in [`floods`]):
//!
//! | flood | target | what |
//! |---|---|---|
//! | `bt-choked-requests` | `weir seed` | requests while choked, fast extension: one Reject each |
//! | `bt-unrequested` | `weir get` | a "seeder" pushing Piece messages nobody asked for |
//! | `ed2k-before-hello` | `weir seed --ed2k` | PUBLICIP_REQ before any hello |
//! | `server-sources` | `weir ed2k-server` | GETSOURCES from a client that does not read |
//! | `never-reads` | `weir seed` | a peer that asks for everything and reads nothing |
//! | `half-open` | `weir seed` | `half-open` (200) connections never finishing a handshake |
//! | `tracker-1mib` | `weir get` | a tracker answering 1 MiB of peers (174,762) |
//! | `callbacks` | `weir seed --ed2k` | a server asking for `callbacks` (20,000) CALLBACKREQUESTED |
//! | `1000-peers` | `weir seed` | `conns` (1,000) peers at once, each asking while choked, none reading |
//! | `utp-reorder` | `weir seed` | `utp-conns` (100) uTP connections, each sending 4 MiB after a gap that never fills |
//!
//! For a flood against a downloader (`bt-unrequested`, `tracker-1mib`) the
//! measured process is that `weir get` (from the honest seeder and the
//! hostile peer or tracker at once), and the honest rate is its own: its
//! "before" is its first sample once it listens (before it dials), its
//! "after" its last (it exits when complete). For `server-sources` the honest leecher finds the honest
//! seeder through the flooded server. "added" is the flood's peak over
//! the peak of the run without a flood on the same target (the honest
//! transfer costs memory too).
//!
//! Goals (issue 8): one hostile connection adds <= 4 MiB; 1,000 at once
//! <= 256 MiB in all; the honest leecher keeps >= 90% of its rate.
//!
//! `--set` keys: `floods=a,b,...` (default all), `rate=16MB/s` (the honest
//! leecher's cap), `settle=2` (seconds), `conns=1000`, `half-open=200`,
//! `utp-conns=100`,
//! `callbacks=20000`, `tracker-peers=174762`, `malloc-arena-max=N` (run
//! every weir process with `MALLOC_ARENA_MAX=N`: what of a flood's
//! leftovers is freed memory kept by glibc's per-thread arenas).
//! `--size-mib` (default 64).

mod env;
pub mod eval;
pub mod floods;

use env::Env;

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::watch;
use weir_lab::process::Proc;
use weir_lab::tmpdir::TempDir;

use crate::BenchConfig;
use crate::common::{BENCH_ALLOW, log_line, median, parse_rate};
use crate::report::{Metric, Report};
use crate::sayln;
use crate::tracker::{FakeTracker, compact_answer};
use eval::{MAX_ADDED_MANY_MIB, MAX_ADDED_ONE_MIB, RssSummary, Sample};
use floods::{FloodStats, TorrentShape};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &[
    "floods",
    "rate",
    "settle",
    "conns",
    "half-open",
    "utp-conns",
    "callbacks",
    "tracker-peers",
    "malloc-arena-max",
];

/// A flood of issue 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flood {
    /// BitTorrent requests while choked, with the fast extension.
    BtChokedRequests,
    /// BitTorrent Piece messages nobody asked for, to a downloader.
    BtUnrequested,
    /// eD2k PUBLICIP_REQ before any hello.
    Ed2kBeforeHello,
    /// eD2k server GETSOURCES from a client that does not read.
    ServerSources,
    /// A BitTorrent peer that asks for everything and never reads.
    NeverReads,
    /// Connections that never finish their handshake.
    HalfOpen,
    /// A tracker answering 1 MiB of peers, to a downloader.
    Tracker,
    /// An eD2k server asking for callbacks, to a client.
    Callbacks,
    /// Many BitTorrent peers at once (1,000 by default).
    ManyPeers,
    /// uTP connections sending data after a gap that never fills (100 by
    /// default, 4 MiB each).
    UtpReorder,
}

/// What a flood is aimed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `weir seed x.torrent DIR`.
    BtSeed,
    /// `weir seed --ed2k FILE`.
    Ed2kSeed,
    /// `weir ed2k-server`.
    Ed2kServer,
    /// `weir get x.torrent` (the downloader itself).
    BtGet,
}

impl Target {
    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Target::BtSeed => "weir seed",
            Target::Ed2kSeed => "weir seed --ed2k",
            Target::Ed2kServer => "weir ed2k-server",
            Target::BtGet => "weir get",
        }
    }
}

impl Flood {
    /// Every flood, in table order.
    pub const ALL: [Flood; 10] = [
        Flood::BtChokedRequests,
        Flood::BtUnrequested,
        Flood::Ed2kBeforeHello,
        Flood::ServerSources,
        Flood::NeverReads,
        Flood::HalfOpen,
        Flood::Tracker,
        Flood::Callbacks,
        Flood::ManyPeers,
        Flood::UtpReorder,
    ];

    /// The name in tables and `--set floods=`.
    pub fn name(self) -> &'static str {
        match self {
            Flood::BtChokedRequests => "bt-choked-requests",
            Flood::BtUnrequested => "bt-unrequested",
            Flood::Ed2kBeforeHello => "ed2k-before-hello",
            Flood::ServerSources => "server-sources",
            Flood::NeverReads => "never-reads",
            Flood::HalfOpen => "half-open",
            Flood::Tracker => "tracker-1mib",
            Flood::Callbacks => "callbacks",
            Flood::ManyPeers => "1000-peers",
            Flood::UtpReorder => "utp-reorder",
        }
    }

    /// The flood named `s`.
    pub fn parse(s: &str) -> Option<Flood> {
        Flood::ALL.into_iter().find(|f| f.name() == s.trim())
    }

    /// What it is aimed at.
    pub fn target(self) -> Target {
        match self {
            Flood::BtChokedRequests
            | Flood::NeverReads
            | Flood::HalfOpen
            | Flood::ManyPeers
            | Flood::UtpReorder => Target::BtSeed,
            Flood::BtUnrequested | Flood::Tracker => Target::BtGet,
            Flood::Ed2kBeforeHello | Flood::Callbacks => Target::Ed2kSeed,
            Flood::ServerSources => Target::Ed2kServer,
        }
    }

    /// The goal: the most it may add to the target's resident size, MiB
    /// (one hostile source, or 1,000 connections; the half-open flood's
    /// connections are each cut off before a handshake, judged as one).
    pub fn max_added_mib(self) -> f64 {
        match self {
            Flood::ManyPeers | Flood::UtpReorder => MAX_ADDED_MANY_MIB,
            _ => MAX_ADDED_ONE_MIB,
        }
    }
}

/// The scenario's settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// The weir binary.
    pub weir: PathBuf,
    /// File size, bytes.
    pub size: u64,
    /// The honest leecher's download cap, bytes/s.
    pub rate: u64,
    /// How long after a flood "after" is read.
    pub settle: Duration,
    /// Connections of `1000-peers`.
    pub conns: usize,
    /// Connections of `half-open`.
    pub half_open: usize,
    /// Connections of `utp-reorder`.
    pub utp_conns: usize,
    /// Callbacks `callbacks` asks for.
    pub callbacks: u64,
    /// Peers in the tracker's answer.
    pub tracker_peers: u32,
    /// `MALLOC_ARENA_MAX` for every weir process (`None`: glibc's
    /// default, 8 per core): shows how much of what a flood leaves behind
    /// is freed memory the allocator's per-thread arenas keep.
    pub malloc_arena_max: Option<u32>,
}

impl Options {
    /// The bench defaults for `weir`.
    pub fn new(weir: PathBuf) -> Self {
        Self {
            weir,
            size: 64 << 20,
            rate: 16_000_000,
            settle: Duration::from_secs(2),
            conns: 1000,
            half_open: 200,
            utp_conns: 100,
            callbacks: 20_000,
            // 6 bytes each: 1 MiB of compact peers.
            tracker_peers: (1 << 20) / 6,
            malloc_arena_max: None,
        }
    }
}

/// What one run of one row measured.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The target's resident sizes.
    pub rss: RssSummary,
    /// The honest leecher's rate, bytes/s (0 when it did not finish).
    pub rate: f64,
    /// The honest leecher's time, start to exit.
    pub elapsed: Duration,
    /// Why the honest leecher did not finish, if it did not.
    pub leecher_failed: Option<String>,
    /// What the flood did: `(sent bytes, connections, dropped, events)`.
    pub flood: (u64, u64, u64, u64),
}

impl Measured {
    /// A run of a `size`-byte download that took `leeched` (or did not
    /// finish, for the reason given); the flood's figures are added later.
    fn new(rss: RssSummary, size: u64, leeched: Result<Duration, String>) -> Self {
        let (rate, elapsed, leecher_failed) = match leeched {
            Ok(d) => (size as f64 / d.as_secs_f64(), d, None),
            Err(why) => (0.0, Duration::ZERO, Some(why)),
        };
        Self {
            rss,
            rate,
            elapsed,
            leecher_failed,
            flood: (0, 0, 0, 0),
        }
    }
}

fn listening_addr(line: &str) -> anyhow::Result<SocketAddr> {
    line.rsplit("listening on ")
        .next()
        .context("an address")?
        .trim()
        .parse()
        .with_context(|| format!("the address in {line:?}"))
}

/// `(the link without sources, the seeder's address)` from a link `weir
/// seed --ed2k` printed.
fn split_link(link: &str) -> anyhow::Result<(String, SocketAddr)> {
    let (base, sources) = link
        .trim()
        .split_once("|sources,")
        .context("a link naming the seeder")?;
    Ok((format!("{base}|/"), sources.trim_end_matches("|/").parse()?))
}

/// One row's result over the runs: its labels and each run's figures.
#[derive(Clone, Debug)]
pub struct RowRuns {
    /// The flood (`None`: the baseline of its target).
    pub flood: Option<Flood>,
    /// Its target.
    pub target: Target,
    /// Each successful run.
    pub runs: Vec<Measured>,
    /// Each failed run's error.
    pub failures: Vec<String>,
}

/// Measures `floods` (and the baseline of each target they use) `runs`
/// times; rows in order, baselines first.
pub fn measure(opts: &Options, floods: &[Flood], runs: usize) -> anyhow::Result<Vec<RowRuns>> {
    let env = Env::new(opts.clone())?;
    let mut rows: Vec<RowRuns> = Vec::new();
    let mut targets: Vec<Target> = Vec::new();
    for f in floods {
        if !targets.contains(&f.target()) {
            targets.push(f.target());
        }
    }
    for t in &targets {
        rows.push(RowRuns {
            flood: None,
            target: *t,
            runs: Vec::new(),
            failures: Vec::new(),
        });
    }
    for f in floods {
        rows.push(RowRuns {
            flood: Some(*f),
            target: f.target(),
            runs: Vec::new(),
            failures: Vec::new(),
        });
    }
    for run in 0..runs {
        for row in rows.iter_mut() {
            let name = row.flood.map_or("none", Flood::name);
            match env.run_row(row.target, row.flood) {
                Ok(m) => {
                    sayln!(
                        "run {}: {name} -> {}: RSS {:.1} / peak {:.1} / after {:.1} MiB, leecher {:.2} MB/s, flood sent {:.1} MiB on {} conns ({} dropped, {} events)",
                        run + 1,
                        row.target.name(),
                        m.rss.before,
                        m.rss.peak,
                        m.rss.after,
                        m.rate / 1e6,
                        m.flood.0 as f64 / f64::from(1 << 20),
                        m.flood.1,
                        m.flood.2,
                        m.flood.3
                    );
                    if let Some(why) = &m.leecher_failed {
                        sayln!("  (the honest leecher: {why})");
                    }
                    row.runs.push(m);
                }
                Err(e) => {
                    sayln!(
                        "run {}: {name} -> {}: FAILED {e:#}",
                        run + 1,
                        row.target.name()
                    );
                    row.failures.push(format!("{e:#}"));
                }
            }
        }
    }
    Ok(rows)
}

/// The median of `f` over a row's runs (NaN without runs).
fn med(r: &RowRuns, f: impl Fn(&Measured) -> f64) -> f64 {
    median(&r.runs.iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
}

/// Each flood row's verdict against its target's baseline (medians).
pub fn verdicts(rows: &[RowRuns]) -> Vec<(Flood, eval::Verdict)> {
    rows.iter()
        .filter_map(|r| {
            let f = r.flood?;
            let base = rows
                .iter()
                .find(|b| b.flood.is_none() && b.target == r.target)?;
            Some((
                f,
                eval::judge(
                    med(r, |m| m.rss.peak),
                    med(base, |m| m.rss.peak),
                    med(r, |m| m.rate),
                    med(base, |m| m.rate),
                    f.max_added_mib(),
                ),
            ))
        })
        .collect()
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let mut o = Options::new(cfg.weir_exe.clone());
    o.size = cfg.size_bytes(64);
    o.rate = parse_rate(cfg.get("rate").unwrap_or("16MB/s"))?;
    o.settle = Duration::from_secs_f64(cfg.get_or("settle", 2.0)?);
    o.conns = cfg.get_or("conns", o.conns)?;
    o.half_open = cfg.get_or("half-open", o.half_open)?;
    o.utp_conns = cfg.get_or("utp-conns", o.utp_conns)?;
    o.callbacks = cfg.get_or("callbacks", o.callbacks)?;
    o.tracker_peers = cfg.get_or("tracker-peers", o.tracker_peers)?;
    o.malloc_arena_max = cfg
        .get("malloc-arena-max")
        .map(|v| {
            v.parse()
                .with_context(|| format!("--set malloc-arena-max={v}"))
        })
        .transpose()?;
    let floods: Vec<Flood> = match cfg.get("floods") {
        None => Flood::ALL.to_vec(),
        Some(list) => list
            .split(',')
            .map(|s| {
                Flood::parse(s).with_context(|| {
                    format!(
                        "--set floods: unknown {s:?} (known: {})",
                        Flood::ALL.map(Flood::name).join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let rows = measure(&o, &floods, cfg.runs.max(1))?;
    let mut rep = Report::new(
        "hostile",
        cfg,
        &["flood", "target"],
        vec![
            Metric::new("before MiB", 1),
            Metric::new("peak MiB", 1),
            Metric::new("after MiB", 1),
            Metric::new("added MiB", 1),
            Metric::new("goal MiB", 0),
            Metric::new("leecher MB/s", 2),
            Metric::new("kept %", 0),
            Metric::new("sent MiB", 1),
            Metric::new("conns", 0),
            Metric::new("dropped", 0),
            Metric::new("events", 0),
        ],
    );
    for r in &rows {
        let base = rows
            .iter()
            .find(|b| b.flood.is_none() && b.target == r.target);
        let labels = [r.flood.map_or("none", Flood::name), r.target.name()];
        for (k, m) in r.runs.iter().enumerate() {
            // Against the same run's baseline.
            let b = base.and_then(|b| b.runs.get(k));
            let (added, kept) = match (r.flood, b) {
                (Some(_), Some(b)) => (m.rss.peak - b.rss.peak, m.rate / b.rate * 100.0),
                (None, _) => (f64::NAN, 100.0),
                _ => (f64::NAN, f64::NAN),
            };
            rep.add_run(
                &labels,
                &[
                    m.rss.before,
                    m.rss.peak,
                    m.rss.after,
                    added,
                    r.flood.map_or(f64::NAN, Flood::max_added_mib),
                    m.rate / 1e6,
                    kept,
                    m.flood.0 as f64 / f64::from(1 << 20),
                    m.flood.1 as f64,
                    m.flood.2 as f64,
                    m.flood.3 as f64,
                ],
            );
        }
        for e in &r.failures {
            rep.add_failure(&labels, e);
        }
        for (k, m) in r.runs.iter().enumerate() {
            if let Some(why) = &m.leecher_failed {
                rep.note(&format!("{} run {}: {why}", labels[0], k + 1));
            }
        }
    }
    for (f, v) in verdicts(&rows) {
        rep.note(&v.line(f.name()));
    }
    if let Some(n) = o.malloc_arena_max {
        rep.note(&format!("every weir process ran with MALLOC_ARENA_MAX={n}"));
    }
    rep.note(&format!(
        "{} MiB file; honest leecher capped at {:.1} MB/s (--max-down); RSS sampled every 10 ms (and VmHWM, reset at the flood's start); after = {:.1} s after the flood; added = peak - peak of the run without a flood on the same target (medians over runs); downloader targets: before = once it listens, after = at completion",
        o.size >> 20,
        o.rate as f64 / 1e6,
        o.settle.as_secs_f64()
    ));
    rep.print();
    let (json, md) = rep.write()?;
    sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

#[cfg(test)]
mod tests;
