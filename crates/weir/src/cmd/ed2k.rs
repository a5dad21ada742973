//! eD2k front end: `weir get 'ed2k://...'` (download), `weir seed --ed2k
//! FILE...` (share) and `weir ed2k-server` (a small index server for LAN
//! swarms and tests).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use weir_ed2k::client::hello::id_to_ip;
use weir_ed2k::link::FileLink;
use weir_ed2k::server::{ServerConfig, ServerEvent};
use weir_runtime::bandwidth::{Limiter, bucket};
use weir_runtime::ed2k::client as ed2k_client;
use weir_runtime::ed2k::{
    Ed2kConfig, Ed2kError, Ed2kServer, Phase, ServerOptions, SharedFile, userhash,
};

use crate::cmd::get::{TransferOpts, open_error};
use crate::cmd::peers::{PeerWatch, Verdict};
use crate::cmd::{Ctx, Signals, Stop};
use crate::exit::bad_input;
use crate::progress::{Progress, Sample, parse_rate};

/// Arguments of `weir ed2k-server`.
#[derive(clap::Args)]
pub(crate) struct ServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:4661", value_name = "IP:PORT")]
    listen: SocketAddr,
    /// Server name shown by clients.
    #[arg(long, default_value = "weir ed2k-server")]
    name: String,
    /// Server description shown by clients.
    #[arg(long, default_value = "weir's small index server")]
    description: String,
}

/// Runs `weir ed2k-server`: prints `listening on ADDR`, then one line per
/// login, file offer, source request, callback and departure, until
/// interrupted (exit 130 for SIGINT, 143 for SIGTERM). Clients get high ids without a reachability probe.
pub(crate) fn run_server(ctx: &Ctx, args: ServerArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::cmd::runtime()?;
    rt.block_on(async {
        let opts = ServerOptions::new(
            ctx.policy.clone(),
            ServerConfig {
                name: args.name.clone(),
                description: args.description.clone(),
                ..ServerConfig::default()
            },
        );
        let mut signals = Signals::new()?;
        let server = Ed2kServer::bind(args.listen, opts)
            .await
            .map_err(|e| crate::cmd::listen_error(args.listen, &e))?;
        let addr = server.local_addr()?;
        line(format!("listening on {addr}"));
        tokio::select! {
            r = server.run(|e| line(describe(&e))) => {
                r.context("accept")?;
                Ok(ExitCode::SUCCESS)
            }
            s = signals.next() => Ok(s.exit_code()),
        }
    })
}

/// One event line on stdout; a closed stdout ends the server quietly.
fn line(s: String) {
    crate::out::write_or_exit(format_args!("{s}\n"));
}

fn describe(e: &ServerEvent) -> String {
    match e {
        ServerEvent::LoggedIn {
            conn,
            id,
            user_hash,
            name,
            port,
        } => format!(
            "login conn={conn} id={id} addr={}:{port} user={user_hash} name={:?}",
            id_to_ip(*id),
            name.as_deref().unwrap_or("")
        ),
        ServerEvent::Offered {
            conn,
            files,
            total,
            refused,
        } => format!("offer conn={conn} files={files} total={total} refused={refused}"),
        ServerEvent::SourcesAsked { conn, file, found } => {
            format!("sources conn={conn} file={file} found={found}")
        }
        ServerEvent::Callback {
            conn,
            target,
            forwarded,
        } => format!("callback conn={conn} target={target} forwarded={forwarded}"),
        ServerEvent::Left { conn } => format!("left conn={conn}"),
    }
}

/// `weir seed --ed2k FILE...`: hashes the files, prints one ed2k link per
/// file on stdout (with this client as a source when the listen address is
/// a specific one) and shares them until interrupted.
pub(crate) fn seed(ctx: &Ctx, files: &[PathBuf], opts: &TransferOpts) -> anyhow::Result<ExitCode> {
    let mut shares = Vec::new();
    for path in files {
        let md =
            std::fs::metadata(path).map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
        if !md.is_file() {
            return Err(bad_input(format!("{} is not a file", path.display())));
        }
        if md.len() == 0 {
            return Err(bad_input(format!(
                "{}: eD2k cannot share an empty file",
                path.display()
            )));
        }
        let hashes = crate::cmd::hash::hash_file(path)?;
        shares.push(SharedFile {
            path: path.clone(),
            hashes,
        });
    }
    let total = shares.iter().map(|s| s.hashes.size).sum();
    let label = match shares.as_slice() {
        [one] => one
            .path
            .file_name()
            .map_or_else(|| "ed2k".into(), |n| n.to_string_lossy().into_owned()),
        many => format!("{} files", many.len()),
    };
    let cfg = config(ctx, PathBuf::from("."), true, opts)?;
    run(cfg, opts, Vec::new(), shares, &label, total, None)
}

fn limiter(spec: &str, what: &str) -> anyhow::Result<Limiter> {
    let r = parse_rate(spec).map_err(|e| bad_input(format!("{what}: {e}")))?;
    Ok(if r == 0 {
        Limiter::unlimited()
    } else {
        Limiter::new(vec![bucket(r)])
    })
}

fn config(ctx: &Ctx, out: PathBuf, seed: bool, opts: &TransferOpts) -> anyhow::Result<Ed2kConfig> {
    let path = userhash::default_path();
    let user_hash =
        userhash::load(&path).with_context(|| format!("user hash ({})", path.display()))?;
    let mut cfg = Ed2kConfig::new(ctx.policy.clone(), out, user_hash);
    cfg.listen = crate::cmd::listen_addrs(opts.listen, 1).first().copied();
    cfg.peers = crate::cmd::get::resolve_peers(ctx, &opts.peers)?;
    for s in &opts.servers {
        if !ctx.policy.allows(s.ip()) {
            return Err(bad_input(format!(
                "--server {s}: outside the network policy {}",
                ctx.policy
            )));
        }
    }
    cfg.servers = opts.servers.clone();
    cfg.seed = seed;
    cfg.max_peers = opts.max_peers;
    cfg.recheck = opts.recheck;
    cfg.max_requests = opts.max_requests;
    Ok(cfg)
}

/// Runs the client with progress until done (or, sharing, interrupted).
/// A download is watched for peers (`watch`, given the listen address);
/// without one the client shares `shares` and prints their links.
fn run(
    mut cfg: Ed2kConfig,
    opts: &TransferOpts,
    downloads: Vec<FileLink>,
    shares: Vec<SharedFile>,
    label: &str,
    total: u64,
    watch: Option<&dyn Fn(Option<SocketAddr>) -> PeerWatch>,
) -> anyhow::Result<ExitCode> {
    let print_links = watch.is_none();
    let quiet = opts.quiet;
    let rt = crate::cmd::runtime()?;
    rt.block_on(async move {
        // Buckets run a refill task: made inside the runtime.
        cfg.down = limiter(&opts.max_down, "--max-down")?;
        cfg.up = limiter(&opts.max_up, "--max-up")?;
        let mut signals = Signals::new()?;
        let handle = match ed2k_client::start(cfg, downloads, shares.clone()).await {
            Ok(h) => h,
            Err(Ed2kError::Listen { addr, source }) => {
                return Err(crate::cmd::listen_error(addr, &source));
            }
            Err(Ed2kError::Open(e)) => return Err(open_error(e)),
            Err(e) => return Err(e.into()),
        };
        if let Some(a) = handle.local_addr {
            tracing::info!("listening on {a}");
        }
        if print_links {
            for s in &shares {
                crate::out::outln!("{}", share_link(s, handle.local_addr))?;
            }
            if handle.local_addr.is_some_and(|a| a.ip().is_unspecified()) {
                tracing::warn!(
                    "the links name no source: weir listens on every address and cannot know \
                     which one others reach; give --listen IP:PORT to put that address in \
                     them, or add |sources,IP:PORT| to a link yourself"
                );
            }
        }
        let mut watch = watch.map(|w| w(handle.local_addr));
        let mut gave_up = None;
        let mut display = Progress::new(label, total, quiet);
        let mut rx = handle.progress.clone();
        let stopper = handle.stopper();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut stopped_by: Option<Stop> = None;
        // The run's end is awaited, not polled: `weir get` exits the moment
        // the file is complete, not at the next display tick.
        let mut summary_task = tokio::spawn(handle.wait());
        let summary = loop {
            tokio::select! {
                s = &mut summary_task => break s,
                _ = tick.tick() => {}
                s = signals.next() => {
                    if stopped_by.is_some() {
                        s.exit_now();
                    }
                    stopped_by = Some(s);
                    crate::out::errln!(
                        "{label}: stopping (verified parts are kept for resume; again to quit at once)"
                    );
                    stopper.stop().await;
                }
            }
            let p = rx.borrow_and_update().clone();
            display.update(&Sample {
                done: p.done,
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
            if let Some(w) = watch.as_mut().filter(|_| stopped_by.is_none() && gave_up.is_none()) {
                let downloading = p.phase == Phase::Downloading;
                match w.tick(std::time::Instant::now(), downloading, p.stats.peers) {
                    Verdict::Wait => {}
                    Verdict::Note(n) => display.note(&n),
                    Verdict::GiveUp(why) => {
                        gave_up = Some(why);
                        stopper.stop().await;
                    }
                }
            }
        };
        let summary = summary??;
        let secs = summary.elapsed.as_secs_f64();
        let st = &summary.stats;
        if print_links {
            display.finish(&format!(
                "stopped; uploaded {} to {} peers' requests",
                crate::progress::bytes(st.uploaded),
                st.peers
            ));
            return Ok(stopped_by.map_or(ExitCode::SUCCESS, Stop::exit_code));
        }
        if summary.complete {
            // After a resume, say how much this run fetched (the rate's bytes).
            let fetched = if st.downloaded < summary.done {
                format!(", {} fetched", crate::progress::bytes(st.downloaded))
            } else {
                String::new()
            };
            display.finish(&format!(
                "complete: {} in {:.2} s ({}{fetched}), uploaded {}{}",
                crate::progress::bytes(summary.done),
                secs,
                crate::progress::rate(st.downloaded as f64 / secs.max(1e-9)),
                crate::progress::bytes(st.uploaded),
                repairs(st),
            ));
            Ok(stopped_by.map_or(ExitCode::SUCCESS, Stop::exit_code))
        } else {
            display.finish(&format!(
                "stopped at {:.1}%; what is verified is kept: the same command resumes ({} hash failures, {} peers banned)",
                summary.done as f64 * 100.0 / total.max(1) as f64,
                st.hash_failures,
                st.banned
            ));
            if let Some(s) = stopped_by {
                return Ok(s.exit_code());
            }
            match gave_up {
                Some(why) => Err(bad_input(why)),
                None => Ok(ExitCode::from(1)),
            }
        }
    })
}

fn repairs(st: &weir_ed2k::transfer::Stats) -> String {
    if st.hash_failures == 0 {
        return String::new();
    }
    format!(
        "; {} bad parts ({} repaired with AICH), {} peers banned",
        st.hash_failures, st.aich_repairs, st.banned
    )
}

/// The link of a shared file, naming this client as a source when it
/// listens on a specific IPv4 address.
fn share_link(s: &SharedFile, local: Option<SocketAddr>) -> String {
    let name = s
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let link = FileLink {
        name,
        size: s.hashes.size,
        hash: s.hashes.file_hash,
        aich: s.hashes.aich.as_ref().map(|a| a.root()),
        part_hashes: None,
        sources: Vec::new(),
    };
    let base = link.to_link();
    match local {
        Some(SocketAddr::V4(a)) if !a.ip().is_unspecified() => {
            format!("{base}|sources,{}:{}|/", a.ip(), a.port())
        }
        _ => base,
    }
}
