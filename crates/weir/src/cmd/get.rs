//! `weir get SOURCE`: download a .torrent (BitTorrent) or an `ed2k://` link.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use weir_bt::metainfo::Metainfo;
use weir_core::picker::Order;
use weir_runtime::bandwidth::{Limiter, bucket};
use weir_runtime::bt::{self, BtConfig, Phase};

use crate::cmd::peers::{PeerWatch, Verdict};
use crate::cmd::{Ctx, Signals, Stop};
use crate::exit::bad_input;
use crate::progress::{Progress, Sample, parse_rate};

/// Options shared by `weir get` and `weir seed`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct TransferOpts {
    /// Address to accept peers on (`IP:PORT`; port 0 picks one). Default
    /// 0.0.0.0:6881, or the next free port up to 6889 (said when it moves);
    /// a port given here that is taken is an error.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// Dial this peer directly (repeatable).
    #[arg(long = "peer", value_name = "HOST:PORT")]
    pub(crate) peers: Vec<String>,
    /// Do not contact the torrent's trackers.
    #[arg(long)]
    pub(crate) no_trackers: bool,
    /// eD2k server to log into, to find sources and be found (repeatable).
    #[arg(long = "server", value_name = "IP:PORT")]
    pub(crate) servers: Vec<SocketAddr>,
    /// Download cap, e.g. 20MB/s (0: unlimited).
    #[arg(long, value_name = "RATE", default_value = "0")]
    pub(crate) max_down: String,
    /// Upload cap, e.g. 5MB/s (0: unlimited).
    #[arg(long, value_name = "RATE", default_value = "0")]
    pub(crate) max_up: String,
    /// Most peer connections.
    #[arg(long, default_value_t = 50)]
    pub(crate) max_peers: usize,
    /// Hash all data already on disk instead of trusting resume data.
    #[arg(long)]
    pub(crate) recheck: bool,
    /// Most requests in flight to one peer (default: sized from its rate
    /// and round trip; 1 makes every block a round trip).
    #[arg(long, value_name = "N")]
    pub(crate) max_requests: Option<u32>,
    /// With no way to find peers (no tracker, no --peer; for eD2k no
    /// source, --peer or --server), wait this long for one to connect
    /// before giving up with exit 2 (0: wait forever).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) peer_wait: u64,
    /// No progress output.
    #[arg(short, long)]
    pub(crate) quiet: bool,
}

/// Arguments of `weir get`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// .torrent files and `ed2k://|file|...|/` links, in any mix: several
    /// run in one session (one port per protocol, shared caps), and a link
    /// naming a torrent's file fetches that file from both networks.
    #[arg(required = true, num_args = 1..)]
    sources: Vec<String>,
    /// Download directory.
    #[arg(short = 'o', long = "out", default_value = ".")]
    out: PathBuf,
    /// Keep seeding after the download completes.
    #[arg(long)]
    seed: bool,
    /// Download pieces in order (for streaming and previews).
    #[arg(long)]
    sequential: bool,
    /// Let the download write into files weir did not create (files of the
    /// same names already in the directory are otherwise only verified,
    /// and a download that would change them is refused).
    #[arg(long)]
    overwrite: bool,
    /// Start even if the missing data exceeds the free space (files are
    /// sparse; the download then pauses when the disk fills).
    #[arg(long)]
    no_space_check: bool,
    #[command(flatten)]
    opts: TransferOpts,
}

/// What a transfer may do to its directory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirPolicy {
    /// Upload what is there; never create or write (`weir seed`).
    pub(crate) seed_only: bool,
    /// Write into files weir did not create (`--overwrite`).
    pub(crate) overwrite: bool,
    /// Refuse a download larger than the free space.
    pub(crate) space_check: bool,
}

/// A storage refusal the user can act on exits 2 (its message says what
/// to do); others (another process holds the download) exit 1.
pub(crate) fn open_error(e: weir_runtime::storage::OpenError) -> anyhow::Error {
    if e.is_user_error() {
        bad_input(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// Runs `weir get`.
pub(crate) fn run(ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let dir = DirPolicy {
        seed_only: false,
        overwrite: args.overwrite,
        space_check: !args.no_space_check,
    };
    let order = if args.sequential {
        Order::Sequential
    } else {
        Order::RarestFirst
    };
    let mut torrents = Vec::new();
    let mut links = Vec::new();
    for s in &args.sources {
        if is_ed2k_link(s) {
            links.push(
                weir_ed2k::link::FileLink::parse(s).map_err(|e| bad_input(format!("{s}: {e}")))?,
            );
        } else {
            torrents.push(load_torrent(s)?);
        }
    }
    // Every source, of either network, in one engine.
    crate::cmd::multi::run(
        ctx,
        crate::cmd::multi::Sources { torrents, links },
        crate::cmd::multi::RunOpts {
            out: args.out,
            seed: args.seed,
            order,
            opts: &args.opts,
            dir,
        },
    )
}

/// Whether a source is an eD2k link rather than a .torrent path.
fn is_ed2k_link(s: &str) -> bool {
    s.get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("ed2k://"))
}

/// Reads and checks a .torrent; a bad one exits 2 naming the problem.
pub(crate) fn load_torrent(path: &str) -> anyhow::Result<Arc<Metainfo>> {
    let data = std::fs::read(path).map_err(|e| bad_input(format!("cannot read {path}: {e}")))?;
    let meta = Metainfo::from_bytes(&data)
        .map_err(|e| bad_input(format!("{path} is not a usable torrent: {e}")))?;
    Ok(Arc::new(meta))
}

/// Resolves `HOST:PORT` peers through the one policy-checked resolver
/// (`weir_runtime::net`): IP literals and `localhost` directly, names only
/// when the policy allows every address. Anything unusable is bad input.
pub(crate) fn resolve_peers(ctx: &Ctx, peers: &[String]) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    for p in peers {
        let addrs = weir_runtime::net::resolve_host_port(&ctx.policy, p)
            .map_err(|e| bad_input(format!("--peer {p}: {e}")))?;
        out.extend(addrs);
    }
    Ok(out)
}

fn limiter(spec: &str, what: &str) -> anyhow::Result<Limiter> {
    let r = parse_rate(spec).map_err(|e| bad_input(format!("{what}: {e}")))?;
    Ok(if r == 0 {
        Limiter::unlimited()
    } else {
        Limiter::new(vec![bucket(r)])
    })
}

/// Why weir has no way to find peers for `meta` (`None`: it has some).
pub(crate) fn no_source(meta: &Metainfo, opts: &TransferOpts) -> Option<String> {
    if !opts.peers.is_empty() {
        return None;
    }
    let has_trackers = meta.trackers().iter().any(|t| !t.is_empty());
    match (has_trackers, opts.no_trackers) {
        (true, false) => None,
        (true, true) => Some("--no-trackers was given and no --peer".into()),
        (false, _) => Some("the torrent lists no tracker and no --peer was given".into()),
    }
}

/// What to check when a torrent's sources give no peer.
pub(crate) fn source_hint(opts: &TransferOpts) -> &'static str {
    if opts.no_trackers {
        "check that the --peer addresses run a client that has this torrent and let it in"
    } else {
        "check that the trackers answer (their errors are logged above) and that a seeder \
         announced there, or give --peer HOST:PORT"
    }
}

/// Downloads (and with `seed`, then seeds) torrents with progress. Every
/// torrent obeys the same download and upload caps (one bucket each, shared
/// by demand); with a fixed `--listen` port, torrent `i` listens on
/// port + i. Exit codes: 0 complete, 1 stopped incomplete, 2 bad input
/// (no peer could ever be found included), 130/143 stopped by a signal.
pub(crate) fn run_torrents(
    ctx: &Ctx,
    metas: Vec<Arc<Metainfo>>,
    out: PathBuf,
    seed: bool,
    order: Order,
    opts: &TransferOpts,
    dir: DirPolicy,
) -> anyhow::Result<ExitCode> {
    let peers = resolve_peers(ctx, &opts.peers)?;
    let rt = crate::cmd::runtime()?;
    rt.block_on(async move {
        let mut base = BtConfig::new(ctx.policy.clone(), out);
        base.peers = peers;
        base.use_trackers = !opts.no_trackers;
        base.seed = seed;
        base.order = order;
        base.max_peers = opts.max_peers;
        base.recheck = opts.recheck;
        base.max_requests = opts.max_requests;
        base.seed_only = dir.seed_only;
        base.overwrite = dir.overwrite;
        base.space_check = dir.space_check;
        base.down = limiter(&opts.max_down, "--max-down")?;
        base.up = limiter(&opts.max_up, "--max-up")?;
        let mut signals = Signals::new()?;
        let multi = indicatif::MultiProgress::new();
        let mut running = Vec::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(metas.len().max(1));
        let addrs = crate::cmd::listen_addrs(opts.listen, metas.len());
        for (meta, addr) in metas.into_iter().zip(addrs) {
            let mut cfg = base.clone();
            cfg.listen = Some(addr);
            let handle = match bt::start(meta.clone(), cfg).await {
                Ok(h) => h,
                Err(bt::BtError::Listen { addr, source }) => {
                    return Err(crate::cmd::listen_error(addr, &source));
                }
                Err(bt::BtError::Open(e)) => return Err(open_error(e)),
                Err(e) => return Err(e.into()),
            };
            if let Some(a) = handle.local_addr {
                tracing::info!("{}: listening on {a}", meta.info.name);
            }
            let display = Progress::new_in(
                &multi,
                &meta.info.name,
                meta.info.total_length(),
                opts.quiet,
            );
            let watch = PeerWatch::new(
                &meta.info.name,
                no_source(&meta, opts),
                source_hint(opts),
                opts.peer_wait,
                handle.local_addr,
            );
            let progress = handle.progress.clone();
            let stopper = handle.stopper();
            let done = done_tx.clone();
            let task = tokio::spawn(async move {
                let r = handle.wait().await;
                let _ = done.send(()).await;
                r
            });
            running.push(Running {
                meta,
                progress,
                stopper,
                display,
                watch,
                gave_up: None,
                task,
            });
        }
        drop(done_tx);
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut stopped_by: Option<Stop> = None;
        let mut finished = 0;
        // Ends the moment the last torrent does (not on the next tick).
        while finished < running.len() {
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = done_rx.recv() => finished += 1,
                s = signals.next() => {
                    if stopped_by.is_some() {
                        s.exit_now();
                    }
                    stopped_by = Some(s);
                    crate::out::errln!(
                        "stopping (verified pieces are kept for resume; again to quit at once)"
                    );
                    for r in &running {
                        r.stopper.stop().await;
                    }
                }
            }
            let now = std::time::Instant::now();
            for r in running.iter_mut() {
                let p = r.progress.borrow_and_update().clone();
                r.display.update(&Sample {
                    done: p.stats.bytes_had,
                    total: p.total,
                    down_rate: p.stats.download_rate,
                    up_rate: p.stats.upload_rate,
                    peers: p.stats.peers,
                    phase: match p.phase {
                        Phase::Checking => "checking",
                        Phase::Downloading => "downloading",
                        Phase::Seeding => "seeding",
                        Phase::Done => "done",
                    },
                });
                if stopped_by.is_some() || r.gave_up.is_some() {
                    continue;
                }
                match r
                    .watch
                    .tick(now, p.phase == Phase::Downloading, p.stats.peers)
                {
                    Verdict::Wait => {}
                    Verdict::Note(n) => r.display.note(&n),
                    Verdict::GiveUp(why) => {
                        r.gave_up = Some(why);
                        r.stopper.stop().await;
                    }
                }
            }
        }
        let mut all_complete = true;
        let mut gave_up = None;
        for r in running {
            let (meta, mut display) = (r.meta, r.display);
            let summary = r.task.await??;
            let total = meta.info.total_length();
            let secs = summary.elapsed.as_secs_f64();
            if summary.complete {
                // After a resume, say how much this run fetched: the rate is
                // of those bytes, not of the whole file.
                let fetched = if summary.stats.downloaded < summary.stats.bytes_had {
                    format!(
                        ", {} fetched",
                        crate::progress::bytes(summary.stats.downloaded)
                    )
                } else {
                    String::new()
                };
                display.finish(&format!(
                    "complete: {} in {:.2} s ({}{fetched}), uploaded {}",
                    crate::progress::bytes(summary.stats.bytes_had),
                    secs,
                    crate::progress::rate(summary.stats.downloaded as f64 / secs.max(1e-9)),
                    crate::progress::bytes(summary.stats.uploaded)
                ));
            } else {
                all_complete = false;
                display.finish(&format!(
                    "stopped at {:.1}%; what is verified is kept: the same command resumes ({} hash failures, {} peers banned)",
                    summary.stats.bytes_had as f64 * 100.0 / total.max(1) as f64,
                    summary.stats.hash_failures,
                    summary.stats.banned
                ));
                gave_up = gave_up.or(r.gave_up);
            }
        }
        if let Some(s) = stopped_by {
            return Ok(s.exit_code());
        }
        if let Some(why) = gave_up {
            return Err(bad_input(why));
        }
        Ok(if all_complete {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// One torrent of a `weir get` run.
struct Running {
    meta: Arc<Metainfo>,
    progress: tokio::sync::watch::Receiver<bt::Progress>,
    stopper: bt::Stopper,
    display: Progress,
    watch: PeerWatch,
    gave_up: Option<String>,
    task: tokio::task::JoinHandle<Result<bt::Summary, bt::BtError>>,
}
