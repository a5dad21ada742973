//! Scenario `killsuite`: a download killed with SIGKILL at random moments
//! and restarted each time must end byte-identical, having pulled at most
//! 1.02x the file over the network in all runs together.
//!
//! A local `weir seed` (BitTorrent) or `weir seed --ed2k` serves the file
//! through the link emulator of `weir linkem` (run in this process so every
//! connection is accounted for), which caps the rate (so the kills land all
//! along the transfer) and counts what it delivers to the downloader: the
//! pulled bytes, protocol overhead included, and including whatever was in
//! flight when a run was killed. Each run of `weir get` lives a seeded-random time
//! (uniform over [0.5, 1.5] x the transfer time / (kills + 1), after a
//! start-up allowance), then gets SIGKILL; after the last kill one run
//! completes.
//!
//! The same function runs the CI test at a small size
//! (`crates/weir/tests/killsuite.rs`); the bench default is 1 GiB.
//!
//! Daemon mode (`protocols=daemon`): the downloader is `weir daemon`, given
//! the torrent once over RPC (`torrent-add`), killed the same way after its
//! RPC is up, and restarted on the same `--state` directory each time; the
//! last run is watched over RPC until the transfer is complete, then
//! stopped with SIGTERM. It finds the seeder through the link from a fake
//! tracker the torrent names.
//!
//! `--set` keys: `protocols=bt,ed2k` (or `daemon`, or `bt,ed2k,daemon`), `kills=20`, `rate=40MB/s` (linkem's
//! cap), `seed=N` (kill moments).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::process::{Proc, wait_line};

use weir_lab::tmpdir::TempDir;

use crate::BenchConfig;
use crate::common::{BENCH_ALLOW, log_line, parse_rate};
use crate::report::{Metric, Report};
use crate::tracker::{FakeTracker, compact_answer};

mod daemon;
use daemon::DaemonRuns;

/// The protocol of a kill suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `weir seed x.torrent DIR` -> `weir get x.torrent`.
    Bt,
    /// `weir seed --ed2k FILE` -> `weir get ed2k://...`.
    Ed2k,
    /// `weir seed x.torrent DIR` -> `weir daemon`, given the torrent over
    /// RPC once (`torrent-add`) and restarted on the same `--state` after
    /// each kill; it finds the seeder (through the link) from a fake
    /// tracker named in the torrent.
    Daemon,
}

impl Protocol {
    /// The name in tables and `--set protocols=`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Bt => "bt",
            Protocol::Ed2k => "ed2k",
            Protocol::Daemon => "daemon",
        }
    }
}

/// One kill suite.
#[derive(Clone, Debug)]
pub struct KillSuite {
    /// The weir binary.
    pub weir: PathBuf,
    /// Which protocol.
    pub protocol: Protocol,
    /// File size in bytes.
    pub size: u64,
    /// SIGKILLs before the run that is let finish.
    pub kills: usize,
    /// linkem's rate cap, bytes per second.
    pub rate: u64,
    /// Seed of the kill moments.
    pub seed: u64,
    /// Longest the whole suite may take.
    pub limit: Duration,
}

/// What a kill suite measured.
#[derive(Clone, Debug)]
pub struct KillOutcome {
    /// File size.
    pub size: u64,
    /// Bytes delivered to the downloader over all runs (linkem's count).
    pub pulled: u64,
    /// Runs killed (fewer than asked when the download finished first).
    pub killed: usize,
    /// Runs in all.
    pub runs: usize,
    /// Whether the result is byte-identical to the source.
    pub identical: bool,
    /// From the first start to the end of the last run.
    pub elapsed: Duration,
    /// How long each run lived.
    pub lifetimes: Vec<Duration>,
    /// Bytes delivered on each connection, in order.
    pub per_conn: Vec<u64>,
}

impl KillOutcome {
    /// Pulled bytes over the file size.
    pub fn ratio(&self) -> f64 {
        self.pulled as f64 / self.size.max(1) as f64
    }
}

fn weir(exe: &Path, home: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("WEIR_ALLOW", BENCH_ALLOW)
        .env("WEIR_ED2K_HOME", home)
        .env("RUST_LOG", "warn,weir=info,weir_runtime=info")
        .args(["--allow", BENCH_ALLOW]);
    c
}

fn sigkill(p: &mut Proc) -> anyhow::Result<()> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .context("SIGKILL")?;
    p.wait_with_usage()?;
    Ok(())
}

/// Connections opened, and `(connection, bytes delivered)` for each one
/// that ended.
type Delivered = (u64, Vec<(u64, u64)>);

/// The emulated link between downloader and seeder (the link emulator of
/// `weir linkem`, run here so every connection is accounted for): a rate
/// cap, and the bytes it delivered to the downloader on each connection.
struct Link {
    addr: SocketAddr,
    state: Arc<(Mutex<Delivered>, Condvar)>,
    stop: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Link {
    fn start(target: SocketAddr, rate: u64) -> anyhow::Result<Self> {
        use weir_runtime::linkem::{LinkConfig, proxy};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let policy = weir_core::policy::NetPolicy::loopback();
        let listener = rt.block_on(weir_runtime::net::listen_tcp("127.0.0.1:0".parse()?))?;
        let addr = listener.local_addr()?;
        let cfg = Arc::new(LinkConfig {
            rate: Some(rate),
            queue: 256 << 10,
            ..LinkConfig::default()
        });
        // (accepted, (id, delivered) of each closed connection)
        let state = Arc::new((Mutex::new((0u64, Vec::new())), Condvar::new()));
        let st = state.clone();
        let stop = Arc::new(tokio::sync::Notify::new());
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                loop {
                    let accepted = tokio::select! {
                        a = weir_runtime::net::accept_tcp(&policy, &listener) => a,
                        _ = halt.notified() => return,
                    };
                    let Ok((client, _)) = accepted else {
                        continue;
                    };
                    let id = {
                        let mut g = st.0.lock().unwrap_or_else(|p| p.into_inner());
                        g.0 += 1;
                        g.0
                    };
                    let (cfg, policy, st) = (cfg.clone(), policy.clone(), st.clone());
                    tokio::spawn(async move {
                        let out = match weir_runtime::net::connect_tcp(&policy, target).await {
                            Ok(server) => proxy(id, client, server, &cfg).await.rev.bytes_out,
                            Err(_) => 0,
                        };
                        let mut g = st.0.lock().unwrap_or_else(|p| p.into_inner());
                        g.1.push((id, out));
                        st.1.notify_all();
                    });
                }
            });
        });
        Ok(Self {
            addr,
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// Waits until every accepted connection has closed; the bytes
    /// delivered on each, in accept order.
    fn all_closed(&self, timeout: Duration) -> anyhow::Result<Vec<u64>> {
        let (m, cv) = &*self.state;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        let (g, to) = cv
            .wait_timeout_while(g, timeout, |g| g.1.len() as u64 != g.0)
            .unwrap_or_else(|p| p.into_inner());
        if to.timed_out() {
            bail!(
                "{} of {} connections still open",
                g.0 - g.1.len() as u64,
                g.0
            );
        }
        let mut v = g.1.clone();
        v.sort_unstable();
        Ok(v.into_iter().map(|(_, b)| b).collect())
    }
}

/// Runs one kill suite in a fresh directory.
pub fn run_suite(s: &KillSuite) -> anyhow::Result<KillOutcome> {
    let work = TempDir::new(&format!("killsuite-{}", s.protocol.name()))?;
    let w = work.path();
    let logs = w.join("logs");
    std::fs::create_dir_all(w.join("src"))?;
    std::fs::create_dir_all(&logs)?;
    let src = w.join("src/payload.bin");
    weir_lab::payload::write(&src, s.size, s.seed ^ 0x6b11)?;
    let started = Instant::now();
    // The seeder.
    let seed_home = w.join("home-seed");
    // The daemon finds its peer through a tracker (told the link's address
    // once the link is up).
    let tracker = match s.protocol {
        Protocol::Daemon => Some(FakeTracker::start(Vec::new())?),
        _ => None,
    };
    let (mut seeder, seeder_addr, get_arg) = match s.protocol {
        Protocol::Bt | Protocol::Daemon => {
            let mut create = weir(&s.weir, &seed_home);
            create.args([
                "create",
                "src/payload.bin",
                "-o",
                "payload.torrent",
                "--no-date",
            ]);
            if let Some(t) = &tracker {
                create.args(["--tracker", &t.url()]);
            }
            let st = create.current_dir(w).output()?;
            if !st.status.success() {
                bail!("weir create: {}", String::from_utf8_lossy(&st.stderr));
            }
            let mut p = Proc::spawn_logged(
                "seeder",
                weir(&s.weir, &seed_home)
                    .args(["seed", "payload.torrent", "src", "--listen", "127.0.0.1:0"])
                    .args(["--no-trackers", "-q"])
                    .current_dir(w),
                &logs,
            )?;
            let err = p.stderr_log().context("logged")?.to_path_buf();
            let line = log_line(&mut p, &err, "listening on ", Duration::from_secs(120))?;
            let addr: SocketAddr = line
                .rsplit("listening on ")
                .next()
                .context("address")?
                .trim()
                .parse()?;
            (p, addr, "payload.torrent".to_string())
        }
        Protocol::Ed2k => {
            let mut cmd = weir(&s.weir, &seed_home);
            cmd.args([
                "seed",
                "--ed2k",
                "src/payload.bin",
                "--listen",
                "127.0.0.1:0",
                "-q",
            ])
            .current_dir(w)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(logs.join("seeder.stderr"))?);
            let mut p = Proc::spawn("seeder", &mut cmd)?;
            let rx = weir_lab::process::stdout_lines(&mut p)?;
            // Hashing the file first (MD4 and AICH) takes a while.
            let link = wait_line(
                &rx,
                Instant::now() + Duration::from_secs(600),
                "the ed2k link",
                |l| l.starts_with("ed2k://"),
            )?;
            let (base, sources) = link
                .split_once("|sources,")
                .context("a link naming the seeder")?;
            let addr: SocketAddr = sources.trim_end_matches("|/").parse()?;
            (p, addr, base.to_string())
        }
    };
    // The link: capped, counted.
    let link = Link::start(seeder_addr, s.rate)?;
    let link_addr = link.addr;
    if let (Some(t), SocketAddr::V4(a)) = (&tracker, link_addr) {
        t.set_answer(compact_answer(&[a], 1800));
    }
    let get_target = match s.protocol {
        Protocol::Bt | Protocol::Daemon => get_arg.clone(),
        Protocol::Ed2k => format!("{get_arg}|sources,{link_addr}|/"),
    };
    let leech_home = w.join("home-leech");
    let leech = |n: usize| -> anyhow::Result<Proc> {
        let mut c = weir(&s.weir, &leech_home);
        c.args([
            "get",
            &get_target,
            "-o",
            "dl",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ]);
        if s.protocol == Protocol::Bt {
            c.args(["--no-trackers", "--peer", &link_addr.to_string()]);
        }
        c.current_dir(w);
        Proc::spawn_logged(&format!("leech-{n}"), &mut c, &logs)
    };
    let transfer = Duration::from_secs_f64(s.size as f64 / s.rate.max(1) as f64);
    let slice = transfer.div_f64((s.kills + 1) as f64);
    let mut rng = fastrand::Rng::with_seed(s.seed);
    let mut lifetimes = Vec::new();

    let mut killed = 0;
    let mut runs = 0;
    let mut done = false;
    if s.protocol == Protocol::Daemon {
        let d = DaemonRuns {
            suite: s,
            work: w,
            logs: &logs,
            torrent: &w.join(&get_arg),
            slice,
            started,
        };
        (killed, runs, lifetimes) = d.run(&mut rng)?;
        done = true;
    }
    for i in 0..s.kills {
        if done {
            break;
        }
        let life = slice
            .mul_f64(0.5 + rng.f64())
            .max(Duration::from_millis(100))
            + Duration::from_millis(150);
        let mut p = leech(i)?;
        runs += 1;
        let t0 = Instant::now();
        if let Some((st, _)) = p.wait_timeout(life)? {
            // Finished before its kill: that is the end of the suite.
            lifetimes.push(t0.elapsed());
            if !st.success() {
                return Err(p.failure("a leech run failed"));
            }
            done = true;
            break;
        }
        sigkill(&mut p)?;
        lifetimes.push(t0.elapsed());
        killed += 1;
        if started.elapsed() > s.limit {
            bail!("kill suite over its time limit ({:?})", s.limit);
        }
    }
    if !done {
        let mut p = leech(s.kills)?;
        runs += 1;
        let t0 = Instant::now();
        let left = s.limit.saturating_sub(started.elapsed());
        match p.wait_timeout(left)? {
            Some((st, _)) if st.success() => {}
            Some(_) => return Err(p.failure("the last run failed")),
            None => return Err(p.failure("the last run did not finish in time")),
        }
        lifetimes.push(t0.elapsed());
    }
    let elapsed = started.elapsed();
    // Every connection the runs made has closed and been counted.
    let per_conn = link.all_closed(Duration::from_secs(30))?;
    let pulled = per_conn.iter().sum();
    let _ = seeder.kill_tree();
    let identical = weir_lab::payload::files_equal(&src, &w.join("dl/payload.bin")).is_ok();
    Ok(KillOutcome {
        size: s.size,
        pulled,
        killed,
        runs,
        identical,
        elapsed,
        lifetimes,
        per_conn,
    })
}

/// Runs the scenario: each protocol, `--runs` times.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(&["protocols", "kills", "rate", "seed"])?;
    let size = cfg.size_bytes(1024);
    let kills: usize = cfg.get_or("kills", 20)?;
    let rate = parse_rate(cfg.get("rate").unwrap_or("40MB/s"))?;
    let seed: u64 = cfg.get_or("seed", 20_261_201)?;
    let protocols: Vec<Protocol> = cfg
        .get("protocols")
        .unwrap_or("bt,ed2k")
        .split(',')
        .map(|p| match p.trim() {
            "bt" => Ok(Protocol::Bt),
            "ed2k" => Ok(Protocol::Ed2k),
            "daemon" => Ok(Protocol::Daemon),
            other => Err(anyhow::anyhow!("--set protocols: unknown {other:?}")),
        })
        .collect::<anyhow::Result<_>>()?;
    let mut rep = Report::new(
        "killsuite",
        cfg,
        &["protocol"],
        vec![
            Metric::new("MiB", 0),
            Metric::new("kills", 0),
            Metric::new("pulled MiB", 1),
            Metric::new("pulled/size", 4),
            Metric::new("identical", 0),
            Metric::new("time s", 1),
        ],
    );
    let mut worst: Vec<(Protocol, f64, bool)> = Vec::new();
    for run in 0..cfg.runs {
        for &p in &protocols {
            let s = KillSuite {
                weir: cfg.weir_exe.clone(),
                protocol: p,
                size,
                kills,
                rate,
                seed: seed.wrapping_add(run as u64),
                limit: Duration::from_secs(3600),
            };
            match run_suite(&s) {
                Ok(o) => {
                    println!(
                        "{} run {}: {} kills, pulled {:.4}x, identical {}, {:.1} s",
                        p.name(),
                        run + 1,
                        o.killed,
                        o.ratio(),
                        o.identical,
                        o.elapsed.as_secs_f64()
                    );
                    worst.push((p, o.ratio(), o.identical));
                    rep.add_run(
                        &[p.name()],
                        &[
                            (o.size >> 20) as f64,
                            o.killed as f64,
                            o.pulled as f64 / f64::from(1 << 20),
                            o.ratio(),
                            if o.identical { 1.0 } else { 0.0 },
                            o.elapsed.as_secs_f64(),
                        ],
                    );
                }
                Err(e) => rep.add_failure(&[p.name()], &format!("{e:#}")),
            }
        }
    }
    for &p in &protocols {
        let mine: Vec<&(Protocol, f64, bool)> = worst.iter().filter(|w| w.0 == p).collect();
        if mine.is_empty() {
            continue;
        }
        let max = mine.iter().map(|w| w.1).fold(0.0, f64::max);
        let all_identical = mine.iter().all(|w| w.2);
        rep.note(&format!(
            "{}: target <= 1.02x pulled and byte-identical: {} (worst {:.4}x over {} runs{})",
            p.name(),
            if max <= 1.02 && all_identical {
                "met"
            } else {
                "NOT met"
            },
            max,
            mine.len(),
            if all_identical {
                ""
            } else {
                "; a result differed"
            }
        ));
    }
    rep.note(&format!(
        "{kills} SIGKILLs per suite at seeded-random moments (seed {seed}), linkem cap {} MB/s; pulled = bytes linkem delivered to the downloader over all runs",
        rate as f64 / 1e6
    ));
    rep.print();
    let (json, md) = rep.write()?;
    println!("wrote {} and {}", json.display(), md.display());
    Ok(())
}
