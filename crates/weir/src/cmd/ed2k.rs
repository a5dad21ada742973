//! eD2k front end: `weir seed --ed2k FILE...` (share, on the engine like
//! every transfer: see `multi.rs`) and `weir ed2k-server` (a small index
//! server for LAN swarms and tests). `weir get 'ed2k://...'` is `multi.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use weir_ed2k::client::hello::id_to_ip;
use weir_ed2k::link::FileLink;
use weir_ed2k::server::{ServerConfig, ServerEvent};
use weir_runtime::ed2k::{Ed2kServer, ServerOptions};
use weir_runtime::engine::SharedSource;

use crate::cmd::get::TransferOpts;
use crate::cmd::{Ctx, Signals};
use crate::exit::bad_input;

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
        shares.push(SharedSource {
            path: path.clone(),
            hashes,
        });
    }
    crate::cmd::multi::run(
        ctx,
        crate::cmd::multi::Sources {
            torrents: Vec::new(),
            magnets: Vec::new(),
            links: Vec::new(),
            shares,
            select: None,
        },
        crate::cmd::multi::RunOpts {
            out: PathBuf::from("."),
            seed: true,
            order: weir_core::picker::Order::RarestFirst,
            opts,
            dir: crate::cmd::get::DirPolicy {
                seed_only: true,
                overwrite: false,
                space_check: false,
            },
        },
    )
}

/// The link of a shared file, naming this client as its source when it
/// listens on a specific address.
pub(crate) fn share_link(s: &SharedSource, local: Option<SocketAddr>) -> String {
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
