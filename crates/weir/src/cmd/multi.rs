//! `weir get` / `weir seed` with several sources, or a mix of .torrent
//! files and `ed2k://` links: every transfer in one engine
//! (`weir_runtime::engine`), one listener per protocol, one disk pool, one
//! pair of caps across both networks. An ed2k link that names a torrent's
//! file (by its eD2k hash, or by size and name) joins that torrent's
//! transfer: the file is fetched from both networks at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weir_bt::metainfo::Metainfo;
use weir_core::picker::Order;
use weir_ed2k::link::FileLink;
use weir_runtime::bandwidth::{Limiter, bucket};
use weir_runtime::ed2k::userhash;
use weir_runtime::engine::{
    Ed2kSource, Engine, EngineConfig, EngineError, EngineHandle, SharedSource, TorrentSource,
};
use weir_runtime::storage::{Mode, OpenOptions};
use weir_session::{Phase, SessionConfig, TransferId, TransferInfo};

use crate::cmd::get::{DirPolicy, TransferOpts, open_error, resolve_peers};
use crate::cmd::peers::{PeerWatch, Verdict};
use crate::cmd::{Ctx, Signals, Stop};
use crate::exit::bad_input;
use crate::progress::{Progress, Sample, parse_rate};

/// What to fetch or serve.
pub(crate) struct Sources {
    /// Torrents.
    pub(crate) torrents: Vec<Arc<Metainfo>>,
    /// Magnet links (with a BitTorrent info-hash): their metadata is
    /// fetched from their peers and trackers, then they run as torrents.
    pub(crate) magnets: Vec<weir_bt::magnet::Magnet>,
    /// eD2k links.
    pub(crate) links: Vec<FileLink>,
    /// Complete files to share on eD2k (their links are printed).
    pub(crate) shares: Vec<SharedSource>,
    /// `--files`: the files to fetch of the run's one torrent or magnet
    /// (over a magnet's `so=`).
    pub(crate) select: Option<weir_bt::magnet::FileSelection>,
}

/// How the run goes.
pub(crate) struct RunOpts<'a> {
    pub(crate) out: PathBuf,
    pub(crate) seed: bool,
    pub(crate) order: Order,
    pub(crate) opts: &'a TransferOpts,
    pub(crate) dir: DirPolicy,
}

fn limiter(spec: &str, what: &str) -> anyhow::Result<Limiter> {
    let r = parse_rate(spec).map_err(|e| bad_input(format!("{what}: {e}")))?;
    Ok(if r == 0 {
        Limiter::unlimited()
    } else {
        Limiter::new(vec![bucket(r)])
    })
}

fn engine_error(e: EngineError) -> anyhow::Error {
    match e {
        EngineError::Listen { addr, source } => crate::cmd::listen_error(addr, &source),
        EngineError::Open(e) => open_error(e),
        EngineError::Add(e) => bad_input(e.to_string()),
        e @ EngineError::Selection { .. } => bad_input(e.to_string()),
        e => anyhow::Error::new(e),
    }
}

/// One transfer's display and peer watch.
struct Shown {
    display: Progress,
    watch: PeerWatch,
    gave_up: Option<String>,
}

/// Runs every source in one engine with progress. Exit codes as for one
/// torrent: 0 all complete, 1 stopped incomplete, 2 bad input (no peer
/// could ever be found included), 130/143 stopped by a signal.
pub(crate) fn run(ctx: &Ctx, sources: Sources, run: RunOpts<'_>) -> anyhow::Result<ExitCode> {
    let opts = run.opts;
    let peers = resolve_peers(ctx, &opts.peers)?;
    for s in &opts.servers {
        if !ctx.policy.allows(s.ip()) {
            return Err(bad_input(format!(
                "--server {s}: outside the network policy {}",
                ctx.policy
            )));
        }
    }
    let uh_path = userhash::default_path();
    let user_hash =
        userhash::load(&uh_path).with_context(|| format!("user hash ({})", uh_path.display()))?;
    let addrs = crate::cmd::listen_addrs(opts.listen, 2);
    let rt = crate::cmd::runtime()?;
    rt.block_on(async move {
        let peer_id = weir_runtime::engine::new_peer_id();
        let mut session = SessionConfig::new(ctx.policy.clone(), peer_id, user_hash.for_port(0));
        session.global.max_peers = opts.max_peers;
        session.order = run.order;
        session.max_requests = opts.max_requests;
        session.seed = fastrand::u64(..);
        session.pex = !opts.no_pex;
        let mut cfg = EngineConfig::new(session);
        // One port per protocol in use: BitTorrent's is --listen, eD2k's
        // the next (or --listen itself when there is no torrent).
        let mut ports = addrs.iter().copied();
        cfg.bt_listen = if sources.torrents.is_empty() && sources.magnets.is_empty() {
            None
        } else {
            ports.next()
        };
        let ed2k_magnets = sources.magnets.iter().any(|m| m.ed2k.is_some());
        cfg.ed2k_listen = if sources.links.is_empty() && sources.shares.is_empty() && !ed2k_magnets
        {
            None
        } else {
            ports.next()
        };
        cfg.ed2k_user_hash = Some(user_hash);
        // Peers that connect early wait in the backlog until every source
        // is added (not refused for a torrent not added yet).
        cfg.accept_at_start = false;
        cfg.use_trackers = !opts.no_trackers;
        cfg.keep_running = run.seed;
        cfg.encryption = opts.encryption;
        cfg.transports = opts.transports;
        // The DHT finds torrents' peers (magnets included); the routing
        // table is kept next to the resume data, never in a directory
        // being seeded (weir seed writes nothing there).
        if cfg.bt_listen.is_some() {
            let table = (!run.dir.seed_only).then(|| run.out.join(".weir-dht-table"));
            cfg.dht = crate::cmd::get::dht_settings(ctx, opts, table)?;
            cfg.lsd = crate::cmd::get::lsd_settings(opts);
            if cfg.dht.as_ref().is_some_and(|d| d.table.is_some()) {
                std::fs::create_dir_all(&run.out)
                    .with_context(|| format!("creating {}", run.out.display()))?;
            }
        }
        cfg.down = limiter(&opts.max_down, "--max-down")?;
        cfg.up = limiter(&opts.max_up, "--max-up")?;
        let mut signals = Signals::new()?;
        let engine = Engine::start(cfg).await.map_err(engine_error)?;
        if let Some(a) = engine.bt_addr {
            tracing::info!("BitTorrent: listening on {a}");
        }
        if let Some(a) = engine.ed2k_addr {
            tracing::info!("eD2k: listening on {a}");
        }
        if let Some(a) = engine.dht_addr {
            tracing::info!("DHT: UDP {a}");
        }
        let open = OpenOptions {
            mode: if run.dir.seed_only {
                Mode::Seed
            } else {
                Mode::Download
            },
            recheck: opts.recheck,
            overwrite: run.dir.overwrite,
            space_check: run.dir.space_check,
            ..OpenOptions::download()
        };
        let mut torrents = sources.torrents.clone();
        let mut torrent_peers: Vec<Vec<std::net::SocketAddr>> = vec![peers.clone(); torrents.len()];
        let mut torrent_files: Vec<Option<Arc<[bool]>>> = Vec::new();
        for meta in &torrents {
            torrent_files.push(wanted_files(meta, sources.select.as_ref(), "--files")?);
        }
        let mut links = sources.links.clone();
        for m in &sources.magnets {
            let (meta, extra) = magnet_torrent(ctx, m, &run, &peers, &engine).await?;
            let files = match (&sources.select, &m.select) {
                (Some(s), _) => wanted_files(&meta, Some(s), "--files")?,
                (None, Some(s)) => wanted_files(&meta, Some(s), "the magnet's so=")?,
                (None, None) => None,
            };
            // `xt=urn:ed2k:` beside the info-hash: the same file on eD2k,
            // fetched from both networks once its torrent is known (not
            // when that file is deselected).
            if let Some(link) = magnet_ed2k_side(m, &meta) {
                let index = meta.info.files.iter().position(|f| f.length == link.size);
                match (&files, index) {
                    (Some(w), Some(i)) if !w[i] => tracing::info!(
                        "{}: the magnet's eD2k file is not among the files selected: not fetched from eD2k",
                        meta.info.name
                    ),
                    _ => links.push(link),
                }
            }
            torrents.push(meta);
            torrent_peers.push(extra);
            torrent_files.push(files);
        }
        let multi = indicatif::MultiProgress::new();
        let mut shown: HashMap<TransferId, Shown> = HashMap::new();
        for ((meta, peers), files) in torrents.iter().zip(torrent_peers).zip(torrent_files) {
            // Peers to dial (--peer, a magnet's x.pe) are a way to find some.
            let why = if peers.is_empty() {
                crate::cmd::get::no_source(
                    meta,
                    opts,
                    crate::cmd::get::dht_finds(ctx, opts) || crate::cmd::get::lsd_finds(ctx, opts),
                )
            } else {
                None
            };
            let id = engine
                .add_torrent(TorrentSource {
                    meta: meta.clone(),
                    dir: run.out.clone(),
                    open,
                    peers,
                    seed: run.seed,
                    paused: false,
                    files,
                    priorities: None,
                })
                .await
                .map_err(engine_error)?;
            shown.insert(
                id,
                Shown {
                    display: Progress::new_in(
                        &multi,
                        &meta.info.name,
                        meta.info.total_length(),
                        opts.quiet,
                    ),
                    watch: PeerWatch::new(
                        &meta.info.name,
                        why,
                        crate::cmd::get::source_hint(opts),
                        opts.peer_wait,
                        engine.bt_addr,
                    ),
                    gave_up: None,
                },
            );
        }
        // A --peer is a BitTorrent peer when there is a torrent (an eD2k
        // hello sent to a BitTorrent client hangs until the handshake
        // timeout), an eD2k source otherwise.
        let ed2k_peers = if torrents.is_empty() {
            peers.clone()
        } else {
            Vec::new()
        };
        for link in &links {
            let id = engine
                .add_ed2k(Ed2kSource {
                    link: link.clone(),
                    dir: run.out.clone(),
                    open,
                    peers: ed2k_peers.clone(),
                    seed: run.seed,
                    paused: false,
                })
                .await
                .map_err(engine_error)?;
            if shown.contains_key(&id) {
                // Joined a torrent's transfer: one file, two networks.
                tracing::info!(
                    "{}: the ed2k link names a file of a torrent given; fetched from both networks",
                    link.name
                );
                continue;
            }
            let why = (link.sources.is_empty() && ed2k_peers.is_empty() && opts.servers.is_empty())
                .then(|| "the link names no source and no --peer or --server was given".into());
            shown.insert(
                id,
                Shown {
                    display: Progress::new_in(&multi, &link.name, link.size, opts.quiet),
                    watch: PeerWatch::new(
                        &link.name,
                        why,
                        "check that the link's sources, --peer and --server addresses are \
                         reachable and have the file",
                        opts.peer_wait,
                        engine.ed2k_addr,
                    ),
                    gave_up: None,
                },
            );
        }
        for f in &sources.shares {
            let name = f
                .path
                .file_name()
                .map_or_else(|| "ed2k".into(), |n| n.to_string_lossy().into_owned());
            let id = engine.share(f.clone()).await.map_err(engine_error)?;
            crate::out::outln!("{}", crate::cmd::ed2k::share_link(f, engine.ed2k_addr))?;
            shown.insert(
                id,
                Shown {
                    display: Progress::new_in(&multi, &name, f.hashes.size, opts.quiet),
                    watch: PeerWatch::new(&name, None, "", 0, engine.ed2k_addr),
                    gave_up: None,
                },
            );
        }
        if !sources.shares.is_empty() && engine.ed2k_addr.is_some_and(|a| a.ip().is_unspecified()) {
            tracing::warn!(
                "the links name no source: weir listens on every address and cannot know \
                 which one others reach; give --listen IP:PORT to put that address in \
                 them, or add |sources,IP:PORT| to a link yourself"
            );
        }
        for s in &opts.servers {
            engine.add_server(*s).await;
        }
        let handle = engine.handle();
        handle.start_accepting().await;
        let mut progress = engine.progress();
        let wait = engine.wait();
        tokio::pin!(wait);
        let mut stopped_by: Option<Stop> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let summary = loop {
            tokio::select! {
                r = &mut wait => break r.map_err(engine_error)?,
                _ = tick.tick() => {}
                _ = progress.changed() => {}
                s = signals.next() => {
                    if stopped_by.is_some() {
                        s.exit_now();
                    }
                    stopped_by = Some(s);
                    crate::out::errln!(
                        "stopping (verified pieces are kept for resume; again to quit at once)"
                    );
                    handle.stop().await;
                }
            }
            let snap = progress.borrow_and_update().clone();
            update(&handle, &mut shown, &snap.transfers, stopped_by.is_some()).await;
        };
        finish(summary.transfers, summary.elapsed, shown, stopped_by)
    })
}

/// The torrent of a magnet link: the one saved next to the resume data by
/// an earlier run, or its metadata fetched from the link's peers and
/// trackers (then saved). Also the peers to dial for it.
async fn magnet_torrent(
    ctx: &Ctx,
    m: &weir_bt::magnet::Magnet,
    run: &RunOpts<'_>,
    peers: &[std::net::SocketAddr],
    engine: &Engine,
) -> anyhow::Result<(Arc<Metainfo>, Vec<std::net::SocketAddr>)> {
    let ih = m.info_hash.expect("checked when parsed");
    let hex: String = ih.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let saved = run.out.join(format!(".weir-meta-{hex}.torrent"));
    let mut dial: Vec<std::net::SocketAddr> = peers.to_vec();
    for p in &m.peers {
        if let weir_bt::magnet::PeerAddr::Ip(a) = p {
            dial.push(*a);
        }
    }
    if let Ok(bytes) = std::fs::read(&saved)
        && let Ok(meta) = Metainfo::from_bytes(&bytes)
        && meta.info_hash == ih
    {
        tracing::info!("{}: metadata from {}", meta.info.name, saved.display());
        return Ok((Arc::new(meta), dial));
    }
    let label = m.name.clone().unwrap_or_else(|| hex.clone());
    tracing::info!("{label}: fetching the metadata (BEP 9) from the link's peers");
    // The DHT's peers for the info-hash too, as they are found.
    // (Only when it has a node to start from: a DHT with none would only
    // make a magnet with no other source wait for nothing.)
    let from_dht = if crate::cmd::get::dht_finds(ctx, run.opts) {
        engine.handle().dht_peers(ih).await.ok()
    } else {
        None
    };
    let opts = weir_runtime::magnet::FetchOptions {
        policy: ctx.policy.clone(),
        peers: peers.to_vec(),
        peer_id: weir_runtime::engine::new_peer_id(),
        port: engine.bt_addr.map_or(0, |a| a.port()),
        local_ip: engine.bt_addr.map(|a| a.ip()),
        use_trackers: !run.opts.no_trackers,
        timeout: Duration::from_secs(run.opts.peer_wait.max(10)),
        max_dials: 8,
        dht_port: engine.dht_addr.map(|a| a.port()),
    };
    let got = weir_runtime::magnet::fetch_with(m, &opts, from_dht)
        .await
        .map_err(|e| match e {
            weir_runtime::magnet::FetchFailure::NoPeers
            | weir_runtime::magnet::FetchFailure::NoInfoHash
            | weir_runtime::magnet::FetchFailure::Invalid(_) => bad_input(format!("{label}: {e}")),
            e => anyhow::anyhow!("{label}: {e}"),
        })?;
    std::fs::create_dir_all(&run.out).with_context(|| format!("creating {}", run.out.display()))?;
    // Written aside and renamed: a torn file is never read as the torrent.
    let tmp = saved.with_extension("torrent.tmp");
    std::fs::write(&tmp, &got.torrent_file)
        .and_then(|()| std::fs::rename(&tmp, &saved))
        .with_context(|| format!("saving {}", saved.display()))?;
    tracing::info!(
        "{}: metadata fetched ({} bytes), saved as {}",
        got.metainfo.info.name,
        got.info_bytes.len(),
        saved.display()
    );
    Ok((Arc::new(got.metainfo), dial))
}

/// The files of `meta` that `select` (from `what`) wants, one flag each
/// (`None`: all of them). Indices past its files are ignored with a
/// warning, as BEP 53 says; a selection of none of its files is bad input.
fn wanted_files(
    meta: &Metainfo,
    select: Option<&weir_bt::magnet::FileSelection>,
    what: &str,
) -> anyhow::Result<Option<Arc<[bool]>>> {
    let Some(select) = select else {
        return Ok(None);
    };
    let name = &meta.info.name;
    let n = meta.info.files.len();
    let (flags, past) = select.flags(n);
    if !past.is_empty() {
        let list: Vec<String> = past
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        tracing::warn!(
            "{name}: {what} {select}: the torrent has {n} files (numbered from 0); {} ignored",
            list.join(",")
        );
    }
    let count = flags.iter().filter(|&&f| f).count();
    if count == 0 {
        return Err(bad_input(format!(
            "{name}: {what} {select} selects none of its {n} files (numbered from 0)"
        )));
    }
    if count == n {
        return Ok(None);
    }
    let bytes: u64 = meta
        .info
        .files
        .iter()
        .zip(&flags)
        .filter(|(_, w)| **w)
        .map(|(f, _)| f.length)
        .sum();
    tracing::info!(
        "{name}: fetching {count} of {n} files ({} of {})",
        crate::progress::bytes(bytes),
        crate::progress::bytes(meta.info.total_length())
    );
    Ok(Some(flags.into()))
}

/// The eD2k side of a magnet that names its file on both networks
/// (`xt=urn:ed2k:` and `xl` beside `xt=urn:btih:`): a link to the torrent's
/// file of that size, named as the torrent names it, so that it joins the
/// torrent's transfer (`Session::ed2k_joins`) rather than becoming a
/// second download of the same file. `None`, said in the log, when the
/// magnet has no size or the torrent no single file of that size.
pub(crate) fn magnet_ed2k_side(m: &weir_bt::magnet::Magnet, meta: &Metainfo) -> Option<FileLink> {
    let hash = m.ed2k?;
    let label = &meta.info.name;
    let Some(f) = m.ed2k_file() else {
        tracing::warn!(
            "{label}: the magnet's eD2k hash comes without its size (xl): fetched from BitTorrent only"
        );
        return None;
    };
    let mut same = meta.info.files.iter().filter(|x| x.length == f.size);
    let (Some(file), None) = (same.next(), same.next()) else {
        tracing::warn!(
            "{label}: the magnet's eD2k file ({} bytes) is not one file of the torrent: fetched from BitTorrent only",
            f.size
        );
        return None;
    };
    let name = file.path.last()?.clone();
    tracing::info!("{label}: the magnet names {name} on eD2k too: fetched from both networks");
    FileLink::new(name, f.size, weir_ed2k::Md4Hash(hash))
        .map_err(|e| tracing::warn!("{label}: the magnet's eD2k side: {e}"))
        .ok()
}

/// Updates the displays; a transfer with no way to find peers is paused
/// once its watch gives up.
async fn update(
    handle: &EngineHandle,
    shown: &mut HashMap<TransferId, Shown>,
    transfers: &[TransferInfo],
    stopping: bool,
) {
    let now = Instant::now();
    for t in transfers {
        let Some(s) = shown.get_mut(&t.id) else {
            continue;
        };
        s.display.update(&sample(t));
        if stopping || s.gave_up.is_some() {
            continue;
        }
        match s.watch.tick(now, t.phase == Phase::Downloading, t.peers) {
            Verdict::Wait => {}
            Verdict::Note(n) => s.display.note(&n),
            Verdict::GiveUp(why) => {
                s.gave_up = Some(why);
                handle.pause(t.id).await;
            }
        }
    }
}

fn sample(t: &TransferInfo) -> Sample {
    Sample {
        done: t.bytes_had,
        total: t.wanted,
        down_rate: t.download_rate,
        up_rate: t.upload_rate,
        peers: t.peers,
        phase: match t.phase {
            Phase::Checking => "checking",
            // Paused by the disk, not failed: it goes on when space returns.
            Phase::Downloading if t.disk_full.is_some() => "disk full, waiting for space",
            Phase::Downloading => "downloading",
            Phase::Seeding => "seeding",
            Phase::Paused => "paused",
            Phase::Failed => "failed",
        },
    }
}

/// Final lines and the exit code.
fn finish(
    transfers: Vec<TransferInfo>,
    elapsed: Duration,
    mut shown: HashMap<TransferId, Shown>,
    stopped_by: Option<Stop>,
) -> anyhow::Result<ExitCode> {
    let mut all_complete = true;
    let mut gave_up = None;
    let mut failed = None;
    for t in transfers {
        let Some(mut s) = shown.remove(&t.id) else {
            continue;
        };
        s.display.update(&sample(&t));
        let downloaded = t.downloaded.0 + t.downloaded.1;
        let uploaded = t.uploaded.0 + t.uploaded.1;
        if let Some(done) = t.complete_at {
            let secs = done
                .saturating_duration_since(t.added_at)
                .as_secs_f64()
                .max(elapsed.as_secs_f64().min(1e-9));
            let fetched = if downloaded < t.bytes_had {
                format!(", {} fetched", crate::progress::bytes(downloaded))
            } else {
                String::new()
            };
            // One file from both networks: what each gave.
            let split = if t.info_hash.is_some() && t.ed2k_hash.is_some() {
                format!(
                    " (BitTorrent {} / eD2k {} down)",
                    crate::progress::bytes(t.downloaded.0),
                    crate::progress::bytes(t.downloaded.1),
                )
            } else {
                String::new()
            };
            s.display.finish(&format!(
                "complete: {} in {:.2} s ({}{fetched}), uploaded {}{split}",
                crate::progress::bytes(t.bytes_had),
                secs,
                crate::progress::rate(downloaded as f64 / secs.max(1e-9)),
                crate::progress::bytes(uploaded),
            ));
        } else {
            all_complete = false;
            if let Some(e) = &t.error {
                failed = failed.or_else(|| Some(format!("{}: {e}", t.name)));
            }
            s.display.finish(&format!(
                "stopped at {:.1}%; what is verified is kept: the same command resumes ({} hash failures, {} peers banned)",
                t.bytes_had as f64 * 100.0 / t.wanted.max(1) as f64,
                t.hash_failures,
                t.banned
            ));
            gave_up = gave_up.or(s.gave_up);
        }
    }
    if let Some(s) = stopped_by {
        return Ok(s.exit_code());
    }
    if let Some(why) = gave_up {
        return Err(bad_input(why));
    }
    if let Some(e) = failed {
        return Err(anyhow::anyhow!(e));
    }
    Ok(if all_complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED2K: &str = "D3B6B09D73D3FE0DD41DDE5ED244215A";

    /// A torrent of `files` (path components, length).
    fn torrent(files: &[(&[&str], u64)]) -> Metainfo {
        let mut list = String::new();
        for (path, len) in files {
            let p: String = path.iter().map(|c| format!("{}:{c}", c.len())).collect();
            list.push_str(&format!("d6:lengthi{len}e4:pathl{p}ee"));
        }
        let info = format!(
            "d5:filesl{list}e4:name3:dir12:piece lengthi16384e6:pieces20:aaaaaaaaaaaaaaaaaaaae"
        );
        Metainfo::from_bytes(format!("d4:info{info}e").as_bytes()).expect("a valid torrent")
    }

    fn magnet(extra: &str) -> weir_bt::magnet::Magnet {
        let uri = format!(
            "magnet:?xt=urn:btih:{}&xt=urn:ed2k:{ED2K}{extra}",
            "ab".repeat(20)
        );
        weir_bt::magnet::Magnet::parse(&uri).expect("a valid magnet")
    }

    #[test]
    fn a_magnet_s_ed2k_side_names_the_torrent_s_file_of_its_size() {
        let meta = torrent(&[(&["a", "one.bin"], 1000), (&["two.bin"], 5000)]);
        let link = magnet_ed2k_side(&magnet("&xl=5000&dn=other"), &meta).expect("joins");
        // Named as the torrent names the file, so the session joins it.
        assert_eq!(link.name, "two.bin");
        assert_eq!(link.size, 5000);
        assert_eq!(link.hash.to_hex().to_ascii_uppercase(), ED2K);
        assert!(link.sources.is_empty() && link.part_hashes.is_none());
    }

    #[test]
    fn no_ed2k_side_without_a_size_or_a_single_file_of_it() {
        let meta = torrent(&[(&["x.bin"], 1000), (&["y.bin"], 1000), (&["z.bin"], 7)]);
        // No xl: nothing to match.
        assert!(magnet_ed2k_side(&magnet(""), &meta).is_none());
        // Two files of the size: which one is unknown.
        assert!(magnet_ed2k_side(&magnet("&xl=1000"), &meta).is_none());
        // No file of the size.
        assert!(magnet_ed2k_side(&magnet("&xl=8"), &meta).is_none());
        assert!(magnet_ed2k_side(&magnet("&xl=7"), &meta).is_some());
        // No eD2k hash at all.
        let plain = weir_bt::magnet::Magnet::parse(&format!(
            "magnet:?xt=urn:btih:{}&xl=7",
            "ab".repeat(20)
        ))
        .expect("a valid magnet");
        assert!(magnet_ed2k_side(&plain, &meta).is_none());
    }
}
