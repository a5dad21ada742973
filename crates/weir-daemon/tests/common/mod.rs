//! The RPC server with the fake backend, listening on 127.0.0.1 inside a
//! network namespace that has only `lo`, where the real clients run.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use weir_daemon::fake::FakeBackend;
use weir_daemon::{RpcConfig, RpcServer, ServerHandle};
use weir_lab::{Netns, TempDir};

/// A running server and its namespace.
pub struct Harness {
    pub backend: Arc<FakeBackend>,
    pub addr: std::net::SocketAddr,
    pub ns: Netns,
    pub dir: TempDir,
    handle: Option<ServerHandle>,
    rt: tokio::runtime::Runtime,
}

impl Harness {
    /// Starts the server (files materialised under the temp dir's
    /// `downloads`); `None` when namespaces are unavailable outside CI.
    pub fn start(tag: &str) -> anyhow::Result<Option<Harness>> {
        Self::start_with(tag, |c| c)
    }

    /// [`Harness::start`] with a changed config.
    pub fn start_with(
        tag: &str,
        cfg: impl FnOnce(RpcConfig) -> RpcConfig,
    ) -> anyhow::Result<Option<Harness>> {
        if !weir_lab::ci::require_root_and_netns()? {
            return Ok(None);
        }
        let dir = TempDir::new(tag)?;
        let downloads = dir.subdir("downloads")?;
        let ns = Netns::new(tag)?;
        let listener = ns
            .try_run_in(|| std::net::TcpListener::bind(("127.0.0.1", 0)))?
            .context("binding the RPC listener in the namespace")?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let backend = Arc::new(FakeBackend::new(&downloads).with_files());
        let config = cfg(RpcConfig::new("127.0.0.1:0".parse()?));
        let server = {
            let _g = rt.enter();
            RpcServer::from_listener(listener, config, backend.clone())?
        };
        let addr = server.local_addr();
        let handle = {
            let _g = rt.enter();
            server.spawn()
        };
        Ok(Some(Harness {
            backend,
            addr,
            ns,
            dir,
            handle: Some(handle),
            rt,
        }))
    }

    /// The download directory.
    pub fn downloads(&self) -> PathBuf {
        self.dir.path().join("downloads")
    }

    /// Runs a future on the harness's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs `transmission-remote ADDR ARGS...` in the namespace (at most
    /// 30 s).
    pub fn remote(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut c = self.ns.command("transmission-remote");
        c.arg(self.addr.to_string()).args(args);
        run_bounded(c, self.dir.path(), Duration::from_secs(30))
    }

    /// [`Harness::remote`] that must exit 0; its stdout.
    pub fn remote_ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.remote(args)?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "transmission-remote {args:?} failed ({}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = self.rt.block_on(h.stop());
        }
    }
}

/// What a finished program printed.
pub struct Output {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs `c` with its output logged under `logs`, ending it (by PID) after
/// `limit`.
pub fn run_bounded(mut c: Command, logs: &Path, limit: Duration) -> anyhow::Result<Output> {
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut p = weir_lab::Proc::spawn_logged(&format!("run-{n}"), &mut c, logs)?;
    let Some((status, _)) = p.wait_timeout(limit)? else {
        p.kill_tree()?;
        bail!("{c:?} timed out after {limit:?}");
    };
    let read = |p: Option<&Path>| {
        p.map(std::fs::read)
            .transpose()
            .map(Option::unwrap_or_default)
    };
    Ok(Output {
        status,
        stdout: read(p.stdout_log())?,
        stderr: read(p.stderr_log())?,
    })
}

/// A deterministic payload and its .torrent under `dir`.
pub fn make_torrent(
    dir: &Path,
    name: &str,
    files: &[(&str, u64)],
) -> anyhow::Result<(PathBuf, weir_lab::torrent::TorrentInfo)> {
    let root = dir.join("src").join(name);
    if files.len() == 1 && files[0].0.is_empty() {
        std::fs::create_dir_all(root.parent().context("parent")?)?;
        weir_lab::payload::write(&root, files[0].1, 7)?;
    } else {
        std::fs::create_dir_all(&root)?;
        weir_lab::payload::write_tree(&root, files, 7)?;
    }
    let out = dir.join(format!("{name}.torrent"));
    let info = weir_lab::torrent::make(
        &root,
        64 * 1024,
        Some("http://127.0.0.1:6969/announce"),
        &out,
    )?;
    Ok((out, info))
}

/// An engine in this process: no listener, no tracker, loopback only.
pub async fn engine() -> weir_runtime::engine::Engine {
    let s = weir_session::SessionConfig::new(
        weir_core::policy::NetPolicy::loopback(),
        [7; 20],
        weir_ed2k::Md4Hash([9; 16]),
    );
    let mut cfg = weir_runtime::engine::EngineConfig::new(s);
    cfg.keep_running = true;
    cfg.use_trackers = false;
    weir_runtime::engine::Engine::start(cfg)
        .await
        .expect("an engine without listeners starts")
}

/// An engine backend's config over `state` and `downloads`: no peer port,
/// DHT, LSD or trackers, loopback only, uncapped.
pub fn engine_config(state: &Path, downloads: &Path) -> weir_daemon::engine::BackendConfig {
    weir_daemon::engine::BackendConfig::local(state, downloads)
}
