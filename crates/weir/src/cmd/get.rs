//! `weir get SOURCE`: download a .torrent (BitTorrent) or an `ed2k://` link.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use weir_bt::metainfo::Metainfo;
use weir_core::picker::Order;
use weir_runtime::bandwidth::{Limiter, bucket};
use weir_runtime::bt::{self, BtConfig, Phase};

use crate::cmd::Ctx;
use crate::exit::bad_input;
use crate::progress::{Progress, Sample, parse_rate};

/// Options shared by `weir get` and `weir seed`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct TransferOpts {
    /// Address to accept peers on (`IP:PORT`; port 0 picks one).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:6881")]
    pub(crate) listen: SocketAddr,
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
    /// No progress output.
    #[arg(short, long)]
    pub(crate) quiet: bool,
}

/// Arguments of `weir get`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// .torrent files (several share the bandwidth caps), or one
    /// `ed2k://|file|...|/` link.
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
    if let Some(link) = args.sources.iter().find(|s| s.starts_with("ed2k://")) {
        if args.sources.len() > 1 {
            return Err(bad_input("an ed2k:// link is downloaded on its own"));
        }
        return crate::cmd::ed2k::get(ctx, link, &args.out, args.seed, &args.opts, dir);
    }
    let metas = args
        .sources
        .iter()
        .map(|s| load_torrent(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let order = if args.sequential {
        Order::Sequential
    } else {
        Order::RarestFirst
    };
    run_torrents(ctx, metas, args.out, args.seed, order, &args.opts, dir)
}

/// Reads and checks a .torrent; a bad one exits 2 naming the problem.
pub(crate) fn load_torrent(path: &str) -> anyhow::Result<Arc<Metainfo>> {
    let data = std::fs::read(path).map_err(|e| bad_input(format!("cannot read {path}: {e}")))?;
    let meta = Metainfo::from_bytes(&data)
        .map_err(|e| bad_input(format!("{path} is not a usable torrent: {e}")))?;
    Ok(Arc::new(meta))
}

/// Resolves `HOST:PORT` peers under the policy (names only where the
/// policy allows DNS).
pub(crate) fn resolve_peers(ctx: &Ctx, peers: &[String]) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    for p in peers {
        if let Ok(a) = p.parse::<SocketAddr>() {
            out.push(a);
            continue;
        }
        let (host, port) = p
            .rsplit_once(':')
            .ok_or_else(|| bad_input(format!("--peer {p}: expected HOST:PORT")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad_input(format!("--peer {p}: bad port")))?;
        if host == "localhost" {
            out.push(SocketAddr::from(([127, 0, 0, 1], port)));
        } else if ctx.policy.allows_name_resolution() {
            use std::net::ToSocketAddrs;
            out.extend(
                (host, port)
                    .to_socket_addrs()
                    .with_context(|| format!("resolving {host}"))?,
            );
        } else {
            return Err(bad_input(format!(
                "--peer {p}: host names are not resolved under the network policy {}; give an IP address",
                ctx.policy
            )));
        }
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

/// Downloads (and with `seed`, then seeds) torrents with progress. Every
/// torrent obeys the same download and upload caps (one bucket each, shared
/// by demand); with a fixed `--listen` port, torrent `i` listens on
/// port + i.
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
        let multi = indicatif::MultiProgress::new();
        let mut running = Vec::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(metas.len().max(1));
        for (i, meta) in metas.into_iter().enumerate() {
            let mut cfg = base.clone();
            let port = if opts.listen.port() == 0 {
                0
            } else {
                opts.listen.port().saturating_add(i as u16)
            };
            cfg.listen = Some(SocketAddr::new(opts.listen.ip(), port));
            let handle = match bt::start(meta.clone(), cfg.clone()).await {
                Ok(h) => h,
                Err(bt::BtError::Listen { addr, .. }) if opts.listen.port() == 6881 => {
                    // The default port is taken: let the system pick one.
                    cfg.listen = Some(SocketAddr::new(addr.ip(), 0));
                    bt::start(meta.clone(), cfg).await?
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
            let progress = handle.progress.clone();
            let stopper = handle.stopper();
            let done = done_tx.clone();
            let task = tokio::spawn(async move {
                let r = handle.wait().await;
                let _ = done.send(()).await;
                r
            });
            running.push((meta, progress, stopper, display, task));
        }
        drop(done_tx);
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let mut interrupted = false;
        let mut finished = 0;
        // Ends the moment the last torrent does (not on the next tick).
        while finished < running.len() {
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = done_rx.recv() => finished += 1,
                _ = &mut ctrl_c, if !interrupted => {
                    interrupted = true;
                    eprintln!("stopping (verified pieces are kept for resume)");
                    for r in &running {
                        r.2.stop().await;
                    }
                }
            }
            for (_, rx, _, display, _) in running.iter_mut() {
                let p = rx.borrow_and_update().clone();
                display.update(&Sample {
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
            }
        }
        let mut all_complete = true;
        for (meta, _, _, mut display, task) in running {
            let summary = task.await??;
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
                    "stopped at {:.1}% ({} hash failures, {} peers banned)",
                    summary.stats.bytes_had as f64 * 100.0 / total.max(1) as f64,
                    summary.stats.hash_failures,
                    summary.stats.banned
                ));
            }
        }
        Ok(if all_complete {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}
