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
//! `callbacks=20000`, `tracker-peers=174762`, `malloc-arena-max=N` (run
//! every weir process with `MALLOC_ARENA_MAX=N`: what of a flood's
//! leftovers is freed memory kept by glibc's per-thread arenas).
//! `--size-mib` (default 64).

pub mod eval;
pub mod floods;

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
    pub const ALL: [Flood; 9] = [
        Flood::BtChokedRequests,
        Flood::BtUnrequested,
        Flood::Ed2kBeforeHello,
        Flood::ServerSources,
        Flood::NeverReads,
        Flood::HalfOpen,
        Flood::Tracker,
        Flood::Callbacks,
        Flood::ManyPeers,
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
        }
    }

    /// The flood named `s`.
    pub fn parse(s: &str) -> Option<Flood> {
        Flood::ALL.into_iter().find(|f| f.name() == s.trim())
    }

    /// What it is aimed at.
    pub fn target(self) -> Target {
        match self {
            Flood::BtChokedRequests | Flood::NeverReads | Flood::HalfOpen | Flood::ManyPeers => {
                Target::BtSeed
            }
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
            Flood::ManyPeers => MAX_ADDED_MANY_MIB,
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

/// Samples a process's memory every 10 ms on a thread of its own.
struct Sampler {
    t0: Instant,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut v = Vec::new();
            while !halt.load(Ordering::Relaxed) {
                let text = std::fs::read_to_string(format!("/proc/{pid}/status"));
                match text.ok().as_deref().and_then(eval::parse_status) {
                    Some((rss_kib, hwm_kib)) => v.push(Sample {
                        t: t0.elapsed().as_secs_f64(),
                        rss_kib,
                        hwm_kib,
                    }),
                    None => break,
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            v
        });
        Self { t0, stop, thread }
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Resets the process's `VmHWM` to its current resident size.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The files every row shares, and the fake tracker of `tracker-1mib`.
struct Env {
    opts: Options,
    work: TempDir,
    shape: TorrentShape,
    tracker: FakeTracker,
    rt: tokio::runtime::Runtime,
    row: std::cell::Cell<usize>,
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

impl Env {
    fn new(opts: Options) -> anyhow::Result<Self> {
        let work = TempDir::new("bench-hostile")?;
        let w = work.path();
        std::fs::create_dir_all(w.join("src"))?;
        std::fs::create_dir_all(w.join("logs"))?;
        weir_lab::payload::write(&w.join("src/payload.bin"), opts.size, 0x4057)?;
        // Peers on 127.255/16, port 9: nothing listens there, each dial is
        // refused at once, and none reaches another program.
        let peers: Vec<SocketAddrV4> = (0..opts.tracker_peers)
            .map(|i| SocketAddrV4::new((0x7fff_0000 | (i & 0xffff)).into(), 9))
            .collect();
        let tracker = FakeTracker::start(compact_answer(&peers, 1800))?;
        for (name, tr) in [
            ("payload.torrent", None),
            ("tracked.torrent", Some(tracker.url())),
        ] {
            let mut c = Command::new(&opts.weir);
            c.env("WEIR_ALLOW", BENCH_ALLOW)
                .args([
                    "--allow",
                    BENCH_ALLOW,
                    "create",
                    "src/payload.bin",
                    "-o",
                    name,
                ])
                .args(["--no-date", "--piece-size", "256KiB"])
                .current_dir(w);
            if let Some(u) = &tr {
                c.args(["--tracker", u]);
            }
            let out = weir_lab::process::run(&mut c, Duration::from_secs(120))?;
            if !out.success() {
                bail!("weir create: {}", out.stderr_text());
            }
        }
        let meta =
            weir_bt::metainfo::Metainfo::from_bytes(&std::fs::read(w.join("payload.torrent"))?)?;
        let tracked =
            weir_bt::metainfo::Metainfo::from_bytes(&std::fs::read(w.join("tracked.torrent"))?)?;
        if tracked.info_hash != meta.info_hash {
            bail!("the tracked torrent has another info hash");
        }
        let shape = TorrentShape {
            info_hash: meta.info_hash,
            pieces: meta.info.piece_count(),
            piece_len: meta.info.piece_length,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        Ok(Self {
            opts,
            work,
            shape,
            tracker,
            rt,
            row: std::cell::Cell::new(0),
        })
    }

    fn w(&self) -> &Path {
        self.work.path()
    }

    fn logs(&self) -> PathBuf {
        self.w().join("logs")
    }

    /// A weir command under the bench policy, its eD2k home `home`.
    fn weir(&self, home: &str) -> Command {
        let h = self.w().join(home);
        let _ = std::fs::create_dir_all(&h);
        let mut c = Command::new(&self.opts.weir);
        c.env("WEIR_ALLOW", BENCH_ALLOW)
            .env("WEIR_ED2K_HOME", &h)
            .env("RUST_LOG", "warn,weir=info")
            .args(["--allow", BENCH_ALLOW])
            .current_dir(self.w());
        if let Some(n) = self.opts.malloc_arena_max {
            c.env("MALLOC_ARENA_MAX", n.to_string());
        }
        c
    }

    fn spawn(&self, name: &str, c: &mut Command) -> anyhow::Result<Proc> {
        let n = self.row.get();
        Proc::spawn_logged(&format!("{n:02}-{name}"), c, &self.logs())
    }

    /// `weir seed payload.torrent src`; its address.
    fn bt_seed(&self) -> anyhow::Result<(Proc, SocketAddr)> {
        let mut p = self.spawn(
            "seed",
            self.weir("home-seed")
                .args(["seed", "payload.torrent", "src", "--listen", "127.0.0.1:0"])
                .args(["--no-trackers", "-q"]),
        )?;
        let err = p.stderr_log().context("logged")?.to_path_buf();
        let line = log_line(&mut p, &err, "listening on ", Duration::from_secs(120))?;
        Ok((p, listening_addr(&line)?))
    }

    /// `weir seed --ed2k src/payload.bin [--server S]`; `(proc, link
    /// without sources, its address)`.
    fn ed2k_seed(&self, server: Option<SocketAddr>) -> anyhow::Result<(Proc, String, SocketAddr)> {
        let mut c = self.weir("home-seed");
        c.args([
            "seed",
            "--ed2k",
            "src/payload.bin",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ]);
        if let Some(s) = server {
            c.args(["--server", &s.to_string()]);
        }
        let mut p = self.spawn("seed-ed2k", &mut c)?;
        let out = p.stdout_log().context("logged")?.to_path_buf();
        let link = log_line(&mut p, &out, "ed2k://", Duration::from_secs(300))?;
        let (base, addr) = split_link(&link)?;
        Ok((p, base, addr))
    }

    /// The honest leecher: `weir get ARGS -o dl-ROW --max-down RATE`.
    fn leecher(&self, args: &[String]) -> anyhow::Result<Proc> {
        let dl = format!("dl-{:02}", self.row.get());
        let _ = std::fs::remove_dir_all(self.w().join(&dl));
        let mut c = self.weir(&format!("home-get-{:02}", self.row.get()));
        c.arg("get")
            .args(args)
            .args(["-o", &dl, "--listen", "127.0.0.1:0", "-q"])
            .args(["--max-down", &self.opts.rate.to_string()]);
        self.spawn("get", &mut c)
    }

    /// Waits for the honest leecher: its time, or why it did not finish
    /// (it failed, or was killed at 3x its expected time + 20 s). A
    /// finished download is checked against the source.
    fn finish_leecher(&self, p: &mut Proc) -> anyhow::Result<Result<Duration, String>> {
        let expected = self.opts.size as f64 / self.opts.rate as f64;
        let limit = Duration::from_secs_f64(expected * 3.0 + 20.0);
        let tail = |p: &Proc| {
            p.log_tail(3)
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string()
        };
        match p.wait_timeout(limit)? {
            Some((st, _)) if st.success() => {}
            Some((st, _)) => {
                return Ok(Err(format!(
                    "the honest leecher failed ({st}): {}",
                    tail(p)
                )));
            }
            None => {
                let _ = p.kill_tree();
                return Ok(Err(format!(
                    "the honest leecher did not finish in {:.0} s: {}",
                    limit.as_secs_f64(),
                    tail(p)
                )));
            }
        }
        let elapsed = p.started().elapsed();
        let dl = self
            .w()
            .join(format!("dl-{:02}/payload.bin", self.row.get()));
        weir_lab::payload::files_equal(&self.w().join("src/payload.bin"), &dl)
            .context("the honest leecher's file")?;
        let _ = std::fs::remove_file(dl);
        Ok(Ok(elapsed))
    }

    /// One row: `flood` (none: the baseline) against `target`.
    fn run_row(&self, target: Target, flood: Option<Flood>) -> anyhow::Result<Measured> {
        self.row.set(self.row.get() + 1);
        let (stop_tx, stop) = watch::channel(false);
        let (go_tx, go) = watch::channel(false);
        let stats = Arc::new(FloodStats::default());
        let mut procs: Vec<Proc> = Vec::new();
        let result = self.measure(
            target,
            flood,
            &stats,
            (&stop_tx, stop),
            (go_tx, go),
            &mut procs,
        );
        let _ = stop_tx.send(true);
        for p in procs.iter_mut().rev() {
            let _ = p.kill_tree();
        }
        let rss_etc = result?;
        Ok(Measured {
            flood: stats.snapshot(),
            ..rss_etc
        })
    }

    /// Starts the target and the flood, runs the honest leecher, stops
    /// the flood (`stop_tx`) and reads the target's memory.
    fn measure(
        &self,
        target: Target,
        flood: Option<Flood>,
        stats: &Arc<FloodStats>,
        (stop_tx, stop): (&watch::Sender<bool>, floods::Stop),
        (go_tx, go): (watch::Sender<bool>, floods::Stop),
        procs: &mut Vec<Proc>,
    ) -> anyhow::Result<Measured> {
        let o = &self.opts;
        let st = || stats.clone();
        if target == Target::BtGet {
            return self.measure_get(flood, stats, (stop_tx, stop), procs);
        }
        // The target, and what the honest leecher is given.
        let (measured, leech_args, seeder_addr, file) = match target {
            Target::BtSeed => {
                let (p, addr) = self.bt_seed()?;
                procs.push(p);
                let args = ["payload.torrent", "--no-trackers", "--peer"].map(String::from);
                let mut args = args.to_vec();
                args.push(addr.to_string());
                (procs.len() - 1, args, addr, None)
            }
            Target::Ed2kSeed => {
                let server = if flood == Some(Flood::Callbacks) {
                    let holders = self.rt.block_on(floods::holders(8, st(), stop.clone()))?;
                    let s = self.rt.block_on(floods::ed2k_callback_server(
                        holders,
                        o.callbacks,
                        st(),
                        stop.clone(),
                        go.clone(),
                    ))?;
                    Some(s)
                } else {
                    None
                };
                let (p, link, addr) = self.ed2k_seed(server)?;
                procs.push(p);
                let with = format!("{}|sources,{addr}|/", link.trim_end_matches("|/"));
                (procs.len() - 1, vec![with], addr, None)
            }
            Target::Ed2kServer => {
                let mut sp = self.spawn(
                    "ed2k-server",
                    self.weir("home-server")
                        .args(["ed2k-server", "--listen", "127.0.0.1:0"]),
                )?;
                let out = sp.stdout_log().context("logged")?.to_path_buf();
                let line = log_line(&mut sp, &out, "listening on ", Duration::from_secs(30))?;
                let server = listening_addr(&line)?;
                procs.push(sp);
                let (p, link, _) = self.ed2k_seed(Some(server))?;
                procs.push(p);
                let i = procs.len() - 2;
                log_line(&mut procs[i], &out, "offer conn=", Duration::from_secs(30))?;
                let parsed = weir_ed2k::link::FileLink::parse(&link)?;
                (
                    i,
                    vec![link, "--server".into(), server.to_string()],
                    server,
                    Some((parsed.hash, parsed.size)),
                )
            }
            Target::BtGet => bail!("the downloader is measured by measure_get"),
        };
        let pid = procs[measured].pid();
        let sampler = Sampler::start(pid);
        // A quiet moment for "before".
        std::thread::sleep(Duration::from_millis(300));
        reset_peak(pid);
        let start = sampler.now();
        let _ = go_tx.send(true);
        let shape = self.shape;
        let entered = self.rt.enter();
        match flood {
            None | Some(Flood::Callbacks) => {}
            Some(Flood::BtChokedRequests) => {
                tokio::spawn(floods::bt_choked_requests(
                    seeder_addr,
                    shape,
                    st(),
                    stop.clone(),
                ));
            }
            Some(Flood::Ed2kBeforeHello) => {
                tokio::spawn(floods::ed2k_before_hello(seeder_addr, st(), stop.clone()));
            }
            Some(Flood::ServerSources) => {
                let (hash, size) = file.context("the file")?;
                tokio::spawn(floods::ed2k_server_sources(
                    seeder_addr,
                    hash,
                    size,
                    st(),
                    stop.clone(),
                ));
            }
            Some(Flood::NeverReads) => {
                tokio::spawn(floods::bt_never_reads(
                    seeder_addr,
                    shape,
                    st(),
                    stop.clone(),
                ));
            }
            Some(Flood::HalfOpen) => {
                tokio::spawn(floods::half_open(
                    seeder_addr,
                    o.half_open,
                    st(),
                    stop.clone(),
                ));
            }
            Some(Flood::ManyPeers) => {
                tokio::spawn(floods::many_peers(
                    seeder_addr,
                    shape,
                    o.conns,
                    st(),
                    stop.clone(),
                ));
            }
            Some(Flood::BtUnrequested | Flood::Tracker) => bail!("a flood against a downloader"),
        }
        let mut leech = self.leecher(&leech_args)?;
        let leeched = self.finish_leecher(&mut leech);
        let end = sampler.now();
        // The flood ends; weir gets `settle` to free what it held.
        drop(entered);
        let _ = stop_tx.send(true);
        let leeched = leeched?;
        std::thread::sleep(o.settle);
        let samples = sampler.finish();
        let rss = eval::summarize(&samples, start, end).context("no samples")?;
        Ok(Measured::new(rss, o.size, leeched))
    }

    /// A flood against the downloader: the measured process is the honest
    /// `weir get` itself (from the honest seeder, and the hostile peer or
    /// tracker).
    fn measure_get(
        &self,
        flood: Option<Flood>,
        stats: &Arc<FloodStats>,
        (stop_tx, stop): (&watch::Sender<bool>, floods::Stop),
        procs: &mut Vec<Proc>,
    ) -> anyhow::Result<Measured> {
        let (p, addr) = self.bt_seed()?;
        procs.push(p);
        let mut args: Vec<String> = Vec::new();
        match flood {
            None => args.extend(["payload.torrent".into(), "--no-trackers".into()]),
            Some(Flood::BtUnrequested) => {
                let pusher = self.rt.block_on(floods::bt_unrequested_pieces(
                    self.shape,
                    stats.clone(),
                    stop,
                ))?;
                args.extend([
                    "payload.torrent".into(),
                    "--no-trackers".into(),
                    "--peer".into(),
                    pusher.to_string(),
                ]);
            }
            Some(Flood::Tracker) => args.push("tracked.torrent".into()),
            Some(f) => bail!("{} is not a flood against a downloader", f.name()),
        }
        args.extend(["--peer".into(), addr.to_string()]);
        let announces = self.tracker.announces();
        let mut leech = self.leecher(&args)?;
        let sampler = Sampler::start(leech.pid());
        // "before": once it is up (listening), before it has dialled.
        let err = leech.stderr_log().context("logged")?.to_path_buf();
        let up = log_line(&mut leech, &err, "listening on ", Duration::from_secs(30));
        let start = sampler.now();
        let leeched = up.and_then(|_| self.finish_leecher(&mut leech));
        let end = sampler.now();
        let _ = stop_tx.send(true);
        // Its memory from the moment it is up (the samples before are of
        // a process still exec'ing: 4 KiB).
        let mut samples = sampler.finish();
        samples.retain(|s| s.t >= start);
        let leeched = leeched?;
        let rss = eval::summarize(&samples, start, end).context("no samples")?;
        if flood == Some(Flood::Tracker) {
            stats
                .events
                .fetch_add(self.tracker.announces() - announces, Ordering::Relaxed);
        }
        Ok(Measured::new(rss, self.opts.size, leeched))
    }
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
mod tests {
    use super::*;

    #[test]
    fn flood_names_round_trip_and_aim() {
        for f in Flood::ALL {
            assert_eq!(Flood::parse(f.name()), Some(f));
        }
        assert_eq!(Flood::parse(" half-open "), Some(Flood::HalfOpen));
        assert_eq!(Flood::parse("nope"), None);
        assert_eq!(Flood::ManyPeers.max_added_mib(), MAX_ADDED_MANY_MIB);
        assert_eq!(Flood::NeverReads.max_added_mib(), MAX_ADDED_ONE_MIB);
        assert_eq!(Flood::Tracker.target(), Target::BtGet);
        assert_eq!(Flood::ServerSources.target(), Target::Ed2kServer);
        assert_eq!(Flood::Callbacks.target(), Target::Ed2kSeed);
    }

    #[test]
    fn links_and_listen_lines() {
        let (base, addr) =
            split_link("ed2k://|file|payload.bin|100|0123456789ABCDEF0123456789ABCDEF|sources,127.0.0.1:4662|/")
                .unwrap();
        assert_eq!(
            base,
            "ed2k://|file|payload.bin|100|0123456789ABCDEF0123456789ABCDEF|/"
        );
        assert_eq!(addr, "127.0.0.1:4662".parse().unwrap());
        assert!(split_link("ed2k://|file|x|1|00|/").is_err());
        let a = listening_addr("2026-12-01T20:00:00Z INFO BitTorrent: listening on 127.0.0.1:6881")
            .unwrap();
        assert_eq!(a, "127.0.0.1:6881".parse().unwrap());
        assert!(listening_addr("listening on nowhere").is_err());
    }

    fn run(peak: f64, rate: f64) -> Measured {
        Measured::new(
            RssSummary {
                before: 10.0,
                peak,
                after: 12.0,
            },
            16 << 20,
            if rate > 0.0 {
                Ok(Duration::from_secs_f64((16 << 20) as f64 / rate))
            } else {
                Err("did not finish".into())
            },
        )
    }

    #[test]
    fn verdicts_use_the_baseline_of_the_same_target() {
        let row = |flood, target, runs| RowRuns {
            flood,
            target,
            runs,
            failures: Vec::new(),
        };
        let rows = vec![
            row(
                None,
                Target::BtSeed,
                vec![run(20.0, 16e6), run(22.0, 15e6), run(21.0, 16e6)],
            ),
            row(None, Target::Ed2kSeed, vec![run(40.0, 10e6)]),
            row(
                Some(Flood::BtChokedRequests),
                Target::BtSeed,
                vec![run(23.0, 15e6), run(30.0, 15e6), run(24.0, 14e6)],
            ),
            row(
                Some(Flood::Ed2kBeforeHello),
                Target::Ed2kSeed,
                vec![run(41.0, 0.0)],
            ),
        ];
        let v = verdicts(&rows);
        assert_eq!(v.len(), 2);
        let (f, bt) = &v[0];
        assert_eq!(*f, Flood::BtChokedRequests);
        // Medians: peak 24 over 21; rate 15 over 16 MB/s.
        assert!((bt.added_mib - 3.0).abs() < 1e-9, "{bt:?}");
        assert!(bt.memory_met());
        assert!((bt.rate_kept.unwrap() - 15.0 / 16.0).abs() < 1e-3, "{bt:?}");
        let (_, ed) = &v[1];
        assert!((ed.added_mib - 1.0).abs() < 1e-9);
        // The leecher did not finish: 0% kept, not met.
        assert_eq!(ed.rate_kept, Some(0.0));
        assert_eq!(ed.rate_met(), Some(false));
        assert_eq!(
            rows[3].runs[0].leecher_failed.as_deref(),
            Some("did not finish")
        );
    }
}
