//! eD2k front end: `weir ed2k-server` (a small index server for LAN swarms
//! and tests). `weir get 'ed2k://...'` and `weir seed --ed2k` land here
//! with the client session.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use weir_ed2k::client::hello::id_to_ip;
use weir_ed2k::server::{ServerConfig, ServerEvent};
use weir_runtime::ed2k::{Ed2kServer, ServerOptions};

use crate::cmd::Ctx;

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
/// interrupted. Clients get high ids without a reachability probe.
pub(crate) fn run_server(ctx: &Ctx, args: ServerArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::cmd::runtime()?;
    rt.block_on(async {
        let opts = ServerOptions {
            policy: ctx.policy.clone(),
            config: ServerConfig {
                name: args.name.clone(),
                description: args.description.clone(),
                ..ServerConfig::default()
            },
        };
        let server = Ed2kServer::bind(args.listen, opts)
            .await
            .with_context(|| format!("listen on {}", args.listen))?;
        let addr = server.local_addr()?;
        line(format!("listening on {addr}"));
        tokio::select! {
            r = server.run(|e| line(describe(&e))) => r.context("accept")?,
            r = tokio::signal::ctrl_c() => r.context("signal")?,
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn line(s: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
    let _ = out.flush();
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
        ServerEvent::Offered { conn, files, total } => {
            format!("offer conn={conn} files={files} total={total}")
        }
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

/// `weir get ed2k://...` (placeholder until the eD2k client lands).
pub(crate) fn get(
    _ctx: &Ctx,
    _link: &str,
    _out: &std::path::Path,
    _seed: bool,
    _opts: &crate::cmd::get::TransferOpts,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!("eD2k downloads are not implemented yet")
}

/// `weir seed --ed2k FILE...` (placeholder until the eD2k client lands).
pub(crate) fn seed(
    _ctx: &Ctx,
    _files: &[std::path::PathBuf],
    _opts: &crate::cmd::get::TransferOpts,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!("eD2k seeding is not implemented yet")
}
