//! `weir daemon`: a long-running engine (every transfer of every protocol
//! in one session) driven over Transmission's RPC, with its state under
//! `--state DIR` (see `weir_daemon::engine`).
//!
//! SIGTERM and SIGINT stop it cleanly (trackers get `stopped`, storage is
//! flushed, the state written) and it exits 143 / 130 as every weir command
//! does; `session-close` over RPC stops it the same way with exit 0. SIGHUP
//! reads `--config` again and applies its caps.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use weir_daemon::backend::SpeedLimit;
use weir_daemon::engine::{BackendConfig, EngineBackend};
use weir_daemon::{Credentials, RpcConfig, RpcServer};
use weir_runtime::bandwidth::{Limiter, SharedBucket, bucket};
use weir_runtime::ed2k::userhash;
use weir_runtime::engine::{Engine, EngineConfig, EngineError};
use weir_session::SessionConfig;

use crate::cmd::{Ctx, Signals};
use crate::exit::bad_input;

/// `weir daemon` arguments.
#[derive(Parser, Debug)]
pub(crate) struct Args {
    /// Address of the RPC server and web page (`/transmission/rpc`, `/`).
    /// A non-loopback address needs --rpc-user and --rpc-password.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9091")]
    rpc: SocketAddr,
    /// Where peers reach us: BitTorrent on PORT, eD2k on PORT + 1.
    #[arg(long, value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// Default directory for downloads.
    #[arg(long, value_name = "DIR")]
    download_dir: PathBuf,
    /// Directory of the daemon's state (transfer list, .torrent copies).
    #[arg(long, value_name = "DIR")]
    state: PathBuf,
    /// Settings file (JSON with Transmission's key names; read again on
    /// SIGHUP): `speed-limit-down`, `speed-limit-down-enabled`,
    /// `speed-limit-up`, `speed-limit-up-enabled` (kB/s).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// No DHT (BEP 5): no UDP socket, no lookups, no announces.
    #[arg(long)]
    no_dht: bool,
    /// DHT node to bootstrap from (repeatable; replaces the public
    /// routers, used only when --allow lets weir reach every address).
    /// The routing table is kept in --state (dht.table) and reused.
    #[arg(long = "dht-bootstrap", value_name = "HOST:PORT")]
    dht_bootstrap: Vec<String>,
    /// Do not announce to trackers.
    #[arg(long)]
    no_trackers: bool,
    /// Local Service Discovery (BEP 14): announce torrents to the local
    /// network's multicast groups and connect to local peers announcing
    /// them (`lpd-enabled` in session-get). Needs the groups in --allow.
    #[arg(long)]
    lsd: bool,
    /// Tests only: send LSD announces to this unicast address instead of
    /// the multicast groups.
    #[arg(
        long = "lsd-group",
        value_name = "ADDR:PORT",
        hide = true,
        requires = "lsd"
    )]
    lsd_group: Option<SocketAddr>,
    /// Protocol encryption (MSE/PE) with BitTorrent peers: prefer,
    /// require, allow or off (as `weir get`); `session-set` changes it
    /// (`encryption`: required, preferred, tolerated).
    #[arg(long, value_name = "POLICY", default_value = "prefer")]
    encryption: weir_bt::mse::Encryption,
    /// Transports for BitTorrent peers, both ways: tcp, utp or tcp,utp
    /// (as `weir get`).
    #[arg(long, value_name = "LIST", default_value = "tcp,utp")]
    transports: weir_runtime::engine::Transports,
    /// RPC user name (Basic auth).
    #[arg(long, value_name = "NAME", requires = "rpc_password")]
    rpc_user: Option<String>,
    /// RPC password (Basic auth).
    #[arg(
        long,
        value_name = "PASS",
        env = "WEIR_RPC_PASSWORD",
        requires = "rpc_user"
    )]
    rpc_password: Option<String>,
}

/// What `--config` sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Settings {
    down: Option<SpeedLimit>,
    up: Option<SpeedLimit>,
}

/// Largest settings file read.
const MAX_CONFIG: u64 = 1 << 20;

fn read_config(path: &Path) -> anyhow::Result<Settings> {
    use std::io::Read;
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CONFIG + 1).read_to_end(&mut data))
        .map_err(|e| bad_input(format!("--config {}: {e}", path.display())))?;
    if data.len() as u64 > MAX_CONFIG {
        return Err(bad_input(format!(
            "--config {}: larger than {MAX_CONFIG} bytes",
            path.display()
        )));
    }
    parse_config(&data).map_err(|e| bad_input(format!("--config {}: {e}", path.display())))
}

fn parse_config(data: &[u8]) -> Result<Settings, String> {
    let v: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    let num = |k: &str| -> Result<Option<u64>, String> {
        obj.get(k)
            .map(|x| {
                x.as_u64()
                    .ok_or_else(|| format!("{k}: not a non-negative integer"))
            })
            .transpose()
    };
    let flag = |k: &str| -> Result<Option<bool>, String> {
        obj.get(k)
            .map(|x| x.as_bool().ok_or_else(|| format!("{k}: not true or false")))
            .transpose()
    };
    let limit = |n: &str, e: &str| -> Result<Option<SpeedLimit>, String> {
        Ok(match (num(n)?, flag(e)?) {
            (None, None) => None,
            (kbps, enabled) => Some(SpeedLimit {
                kbps: kbps.unwrap_or(100),
                enabled: enabled.unwrap_or(kbps.is_some()),
            }),
        })
    };
    Ok(Settings {
        down: limit("speed-limit-down", "speed-limit-down-enabled")?,
        up: limit("speed-limit-up", "speed-limit-up-enabled")?,
    })
}

fn engine_error(e: EngineError) -> anyhow::Error {
    match e {
        EngineError::Listen { addr, source } => crate::cmd::listen_error(addr, &source),
        e => anyhow::Error::new(e),
    }
}

/// A bucket whose rate can be set later (the backend caps it with
/// `set_rate_live`, which starts its refill task): unlimited, it costs
/// nothing and wakes nobody.
fn adjustable_bucket() -> Arc<SharedBucket> {
    bucket(0)
}

/// Runs the daemon until a signal or `session-close`.
pub(crate) fn run(ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let download_dir = absolute(&args.download_dir, "--download-dir")?;
    let state_dir = absolute(&args.state, "--state")?;
    std::fs::create_dir_all(&download_dir)
        .map_err(|e| bad_input(format!("--download-dir {}: {e}", download_dir.display())))?;
    let settings = match &args.config {
        Some(p) => read_config(p)?,
        None => Settings::default(),
    };
    if !args.rpc.ip().is_loopback() && args.rpc_user.is_none() {
        return Err(bad_input(format!(
            "--rpc {}: not a loopback address; give --rpc-user and --rpc-password",
            args.rpc
        )));
    }
    let uh_path = userhash::default_path();
    let user_hash =
        userhash::load(&uh_path).with_context(|| format!("user hash ({})", uh_path.display()))?;
    let addrs = crate::cmd::listen_addrs(args.listen, 2);
    let dht = if args.no_dht {
        None
    } else {
        let mut nodes = Vec::new();
        for b in &args.dht_bootstrap {
            nodes.extend(
                weir_runtime::net::resolve_host_port(&ctx.policy, b)
                    .map_err(|e| bad_input(format!("--dht-bootstrap {b}: {e}")))?,
            );
        }
        std::fs::create_dir_all(&state_dir)
            .map_err(|e| bad_input(format!("--state {}: {e}", state_dir.display())))?;
        Some(weir_runtime::engine::DhtSettings::new(
            nodes,
            &ctx.policy,
            Some(state_dir.join("dht.table")),
        ))
    };
    let rt = crate::cmd::runtime()?;
    rt.block_on(async move {
        let mut signals = Signals::new()?;
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let down = adjustable_bucket();
        let up = adjustable_bucket();
        let peer_id = weir_runtime::engine::new_peer_id();
        let mut session = SessionConfig::new(ctx.policy.clone(), peer_id, user_hash.for_port(0));
        session.seed = fastrand::u64(..);
        let mut cfg = EngineConfig::new(session);
        cfg.bt_listen = Some(addrs[0]);
        cfg.ed2k_listen = Some(addrs[1]);
        cfg.ed2k_user_hash = Some(user_hash);
        cfg.use_trackers = !args.no_trackers;
        cfg.keep_running = true;
        cfg.encryption = args.encryption;
        cfg.transports = args.transports;
        cfg.dht = dht;
        cfg.lsd = args.lsd.then_some(weir_runtime::engine::LsdSettings {
            group: args.lsd_group,
        });
        cfg.down = Limiter::new(vec![down.clone()]);
        cfg.up = Limiter::new(vec![up.clone()]);
        let engine = Engine::start(cfg).await.map_err(engine_error)?;
        let bt_addr = engine.bt_addr;
        let backend = match EngineBackend::start(
            BackendConfig {
                state_dir: state_dir.clone(),
                download_dir,
                peer_port: bt_addr.map_or(0, |a| a.port()),
                policy: ctx.policy.clone(),
                down,
                up,
                listen_ip: bt_addr.map(|a| a.ip()),
                use_trackers: !args.no_trackers,
                encryption: args.encryption,
                dht_port: engine.dht_addr.map(|a| a.port()),
                lsd_enabled: !engine.lsd_groups.is_empty(),
            },
            engine.handle(),
        )
        .await
        {
            Ok(b) => b,
            Err(e) => {
                engine.stop().await;
                let _ = engine.wait().await;
                return Err(bad_input(format!("state: {e}")));
            }
        };
        apply(&backend, settings).await;
        let mut rpc = RpcConfig::new(args.rpc);
        rpc.heap = Some(weir_runtime::memory::HeapReleaser::spawn());
        if let (Some(user), Some(password)) = (args.rpc_user.clone(), args.rpc_password.clone()) {
            rpc.credentials = Some(Credentials { user, password });
            if !args.rpc.ip().is_loopback() {
                rpc.clients = weir_core::policy::NetPolicy::allow_all();
            }
        }
        let server = match RpcServer::bind(rpc, Arc::new(backend.clone())).await {
            Ok(s) => s,
            Err(e) => {
                engine.stop().await;
                let _ = engine.wait().await;
                return Err(bad_input(format!("--rpc {}: {e}", args.rpc)));
            }
        };
        tracing::info!(
            "weir daemon: RPC on http://{}/transmission/rpc, BitTorrent on {}, eD2k on {}, {} transfers from {}",
            server.local_addr(),
            bt_addr.map_or_else(|| "-".into(), |a| a.to_string()),
            engine.ed2k_addr.map_or_else(|| "-".into(), |a| a.to_string()),
            backend.len(),
            state_dir.display()
        );
        let server = server.spawn();
        let saver = backend.save_periodically(std::time::Duration::from_secs(30));
        let handle = engine.handle();
        let wait = engine.wait();
        tokio::pin!(wait);
        let stopped_by = loop {
            tokio::select! {
                s = signals.next() => break Some(s),
                _ = hup.recv() => match &args.config {
                    Some(p) => match read_config(p) {
                        Ok(s) => {
                            apply(&backend, s).await;
                            tracing::info!("{}: reloaded", p.display());
                        }
                        Err(e) => tracing::error!("{}; the settings in force stay", crate::exit::describe(&e)),
                    },
                    None => tracing::info!("SIGHUP: no --config to reload"),
                },
                _ = backend.wait_closed() => break None,
                r = &mut wait => {
                    let _ = server.stop().await;
                    r.map_err(engine_error)?;
                    anyhow::bail!("the engine stopped");
                }
            }
        };
        tracing::info!("stopping: announcing stopped, flushing storage");
        let _ = server.stop().await;
        saver.abort();
        if let Err(e) = backend.save_all().await {
            tracing::error!("saving the state: {e}");
        }
        handle.stop().await;
        tokio::select! {
            r = &mut wait => { r.map_err(engine_error)?; }
            s = signals.next() => s.exit_now(),
        }
        Ok(stopped_by.map_or(ExitCode::SUCCESS, |s| s.exit_code()))
    })
}

async fn apply(backend: &EngineBackend, s: Settings) {
    if s == Settings::default() {
        return;
    }
    if let Err(e) = backend.set_caps(s.down, s.up).await {
        tracing::error!("saving the state: {e}");
    }
}

fn absolute(p: &Path, what: &str) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).map_err(|e| bad_input(format!("{what} {}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_caps() {
        let s = parse_config(
            br#"{"speed-limit-down": 500, "speed-limit-down-enabled": true, "rpc-port": 9091}"#,
        )
        .unwrap();
        assert_eq!(
            s.down,
            Some(SpeedLimit {
                kbps: 500,
                enabled: true
            })
        );
        assert_eq!(s.up, None);
        let s = parse_config(br#"{"speed-limit-up": 20}"#).unwrap();
        assert_eq!(
            s.up,
            Some(SpeedLimit {
                kbps: 20,
                enabled: true
            })
        );
        let s = parse_config(br#"{"speed-limit-up-enabled": false}"#).unwrap();
        assert!(!s.up.unwrap().enabled);
        for bad in [
            &br#"{"speed-limit-down": -1}"#[..],
            br#"{"speed-limit-down-enabled": "yes"}"#,
            b"[1]",
            b"{",
        ] {
            assert!(
                parse_config(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(
            parse_config(br#"{"speed-limit-down": "x"}"#)
                .unwrap_err()
                .contains("speed-limit-down")
        );
    }
}
