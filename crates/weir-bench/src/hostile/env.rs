//! The processes and floods of one row of `weir bench hostile`: the
//! shared files, the target, the honest leecher, the memory sampler.

use super::*;

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
pub(super) struct Env {
    opts: Options,
    work: TempDir,
    shape: TorrentShape,
    tracker: FakeTracker,
    rt: tokio::runtime::Runtime,
    row: std::cell::Cell<usize>,
}

impl Env {
    pub(super) fn new(opts: Options) -> anyhow::Result<Self> {
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
    pub(super) fn run_row(&self, target: Target, flood: Option<Flood>) -> anyhow::Result<Measured> {
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
            Some(Flood::UtpReorder) => {
                tokio::spawn(floods::utp_reorder(
                    seeder_addr,
                    o.utp_conns,
                    4 << 20,
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
