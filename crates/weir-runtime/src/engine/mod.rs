//! The engine: one session (`weir_session::Session`) over tokio, for every
//! transfer of every protocol in the process.
//!
//! ```text
//! listeners (one per protocol) --accept--> Session::incoming --> handshake task
//!   (BitTorrent: routed by info-hash through Session::bt_route)
//! Session Dial --> dial task (connect, handshake) --> Session::established
//! reader (512 KiB reads, decode in place) --Vec<Wire>--> driver --> Session
//! Session Send --> writer (vectored writes, bounded queue) --Sent--> Session
//! Session Storage{transfer} --> that transfer's storage --StorageEvent--> Session
//! trackers (per torrent) --peers--> Session::add_peers
//! ```
//!
//! One task (the driver) owns the session and is the only one that decides
//! anything; every other task moves bytes. Nothing in the request path
//! sleeps or polls: every input is handled as it arrives and everything it
//! causes goes out before the next input. A CLI run, `weir seed` and the
//! daemon all drive the same engine; the simulator drives the same session
//! in virtual time.

pub mod dht;
mod driver;
pub mod lsd;
mod mse;
mod spec;
mod trackers;
pub mod transport;
pub mod udp;
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use weir_bt::metainfo::Metainfo;
use weir_ed2k::hash::FileHashes;
use weir_ed2k::link::FileLink;
use weir_session::{SessionConfig, TransferId, TransferInfo};

use crate::bandwidth::Limiter;
use crate::storage::{OpenError, OpenOptions};

pub use dht::{DhtError, DhtSettings, DhtStatus};
pub use driver::Snapshot;
pub use lsd::{LsdSettings, LsdStatus};
pub use transport::{Transport, Transports, TransportsError};

/// How to run an engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The session's settings (limits, identities, policy).
    pub session: SessionConfig,
    /// Where BitTorrent peers reach us (`None`: accept none).
    pub bt_listen: Option<SocketAddr>,
    /// Where eD2k clients reach us (`None`: accept none).
    pub ed2k_listen: Option<SocketAddr>,
    /// The global download cap chain (every connection obeys it).
    pub down: Limiter,
    /// The global upload cap chain.
    pub up: Limiter,
    /// Connect and handshake must finish within this.
    pub handshake_timeout: Duration,
    /// Announce torrents to their trackers.
    pub use_trackers: bool,
    /// Keep running when every transfer is done (seeding, the daemon).
    pub keep_running: bool,
    /// Threads hashing a transfer's data while it opens (a recheck); a
    /// running transfer uses the process's one disk pool.
    pub storage_workers: usize,
    /// How often progress snapshots are published.
    pub report_every: Duration,
    /// Accept connections from the start (off: the listeners are bound, so
    /// the ports are ours and errors show at once, but connections wait in
    /// the kernel's backlog until [`EngineHandle::start_accepting`]: a CLI
    /// adds its transfers first, so an early peer is not turned away for a
    /// torrent not added yet).
    pub accept_at_start: bool,
    /// The eD2k user hash source: the session's hash is this one's for the
    /// eD2k port bound (`None`: the session configuration's as given).
    pub ed2k_user_hash: Option<crate::ed2k::userhash::UserHash>,
    /// MSE/PE policy for BitTorrent connections (`--encryption`): what
    /// outgoing connections try, what incoming ones may be.
    pub encryption: weir_bt::mse::Encryption,
    /// The DHT node (BEP 5) on the engine's UDP socket (`None`: no DHT).
    pub dht: Option<DhtSettings>,
    /// Transports of BitTorrent connections (`--transports`): with uTP on
    /// the engine has a UDP socket even without the DHT.
    pub transports: Transports,
    /// The uTP endpoint's settings (buffers, bounds, seed).
    pub utp: crate::utp::UtpConfig,
    /// Local Service Discovery (BEP 14, `--lsd`; `None`: off): torrents
    /// announced to the groups the policy allows, peers heard learnt.
    pub lsd: Option<LsdSettings>,
}

impl EngineConfig {
    /// Defaults around a session configuration.
    pub fn new(session: SessionConfig) -> Self {
        Self {
            session,
            bt_listen: None,
            ed2k_listen: None,
            down: Limiter::unlimited(),
            up: Limiter::unlimited(),
            handshake_timeout: Duration::from_secs(15),
            use_trackers: true,
            keep_running: false,
            storage_workers: crate::storage::hash_threads(),
            report_every: Duration::from_millis(250),
            ed2k_user_hash: None,
            accept_at_start: true,
            encryption: weir_bt::mse::Encryption::default(),
            dht: None,
            transports: Transports::default(),
            utp: crate::utp::UtpConfig::default(),
            lsd: None,
        }
    }
}

/// A fresh BitTorrent peer id (for [`SessionConfig::peer_id`]):
/// `-WR0100-` and 12 characters drawn from the clock and the process's
/// hash seed, so two engines started together differ.
pub fn new_peer_id() -> [u8; 20] {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    let rng = h.finish();
    let mut id = *b"-WR0100-000000000000";
    for (i, b) in id[8..].iter_mut().enumerate() {
        let x = (rng >> ((i % 8) * 8)) as u8 ^ (rng >> 40) as u8 ^ i as u8;
        *b = b"0123456789abcdefghijklmnopqrstuvwxyz"[(x % 36) as usize];
    }
    id
}

/// A torrent to add.
#[derive(Clone, Debug)]
pub struct TorrentSource {
    /// The torrent.
    pub meta: Arc<Metainfo>,
    /// The download directory (a multi-file torrent goes in a subdirectory
    /// named after it).
    pub dir: PathBuf,
    /// How storage is opened (download or seed, recheck, overwrite, ...).
    pub open: OpenOptions,
    /// Peers to dial.
    pub peers: Vec<SocketAddr>,
    /// Keep seeding when complete.
    pub seed: bool,
    /// Start paused.
    pub paused: bool,
    /// The files wanted, one flag per file of the torrent (`None`: all):
    /// only the pieces of those are fetched, and files sharing none of
    /// them are not created (BEP 53 `so=`, `--files`, `files-unwanted`).
    pub files: Option<Arc<[bool]>>,
    /// Each file's priority, one per file of the torrent (`None`: all
    /// normal): a piece takes the highest of its files', and new pieces are
    /// started from the highest down (Transmission's `priority-high` /
    /// `priority-low`).
    pub priorities: Option<Arc<[weir_core::picker::Priority]>>,
}

/// An eD2k download to add.
#[derive(Clone, Debug)]
pub struct Ed2kSource {
    /// The file.
    pub link: FileLink,
    /// The download directory.
    pub dir: PathBuf,
    /// How storage is opened.
    pub open: OpenOptions,
    /// Sources to dial besides the link's.
    pub peers: Vec<SocketAddr>,
    /// Keep sharing when complete.
    pub seed: bool,
    /// Start paused.
    pub paused: bool,
}

/// A complete file to share on eD2k (hashed by the caller).
#[derive(Clone, Debug)]
pub struct SharedSource {
    /// The file.
    pub path: PathBuf,
    /// Its hashes.
    pub hashes: FileHashes,
}

/// Why the engine or one of its commands failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A transfer's storage could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Storage could not be started.
    #[error("storage: {0}")]
    Storage(std::io::Error),
    /// The session refused the transfer.
    #[error(transparent)]
    Add(#[from] weir_session::AddError),
    /// The file selection does not fit the torrent.
    #[error("{name}: {source}")]
    Selection {
        /// The torrent's name.
        name: String,
        /// What is wrong.
        source: weir_core::selection::SelectionError,
    },
    /// A transfer failed (its storage).
    #[error("{name}: {error}")]
    Transfer {
        /// The transfer's name.
        name: String,
        /// What went wrong.
        error: String,
    },
    /// The engine has stopped.
    #[error("the engine has stopped")]
    Stopped,
}

/// What a finished run reports.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Every transfer at the end.
    pub transfers: Vec<TransferInfo>,
    /// From start to the last completion (or to the stop).
    pub elapsed: Duration,
}

/// Where a transfer keeps its data: the directory storage opens (a
/// multi-file torrent's own folder under the download directory), its
/// files in it, and the files storage keeps beside them (journal, lock).
/// A front end that removes a transfer with its data deletes these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataPaths {
    /// The directory storage opens.
    pub root: PathBuf,
    /// The data files, relative to `root`.
    pub files: Vec<PathBuf>,
    /// The journal and the lock, relative to `root`.
    pub side: Vec<PathBuf>,
    /// Whether `root` is the transfer's own folder (made for it, removed
    /// with its data when empty), not the download directory itself.
    pub own_root: bool,
}

impl DataPaths {
    /// A torrent's under the download directory `dir`.
    pub fn torrent(meta: &Metainfo, dir: &std::path::Path) -> Self {
        // Storage opens the download directory itself; a multi-file
        // torrent's folder is part of its files' paths (removed once empty
        // with them).
        DataPaths {
            own_root: false,
            root: dir.to_path_buf(),
            files: spec::layout(meta)
                .files()
                .iter()
                .map(|f| f.path.clone())
                .collect(),
            side: side(&driver::torrent_stem(&meta.info_hash)),
        }
    }

    /// An eD2k file's under the download directory `dir`.
    pub fn ed2k(link: &FileLink, dir: &std::path::Path) -> Self {
        DataPaths {
            root: dir.to_path_buf(),
            files: vec![PathBuf::from(&link.name)],
            side: side(&spec::journal_stem(&link.hash)),
            own_root: false,
        }
    }
}

fn side(stem: &str) -> Vec<PathBuf> {
    crate::storage::side_files(stem)
        .into_iter()
        .map(PathBuf::from)
        .collect()
}

/// Commands to the driver.
#[derive(Debug)]
pub(crate) enum Command {
    AddTorrent(
        Box<TorrentSource>,
        oneshot::Sender<Result<TransferId, EngineError>>,
    ),
    AddEd2k(
        Box<Ed2kSource>,
        oneshot::Sender<Result<TransferId, EngineError>>,
    ),
    Share(
        Box<SharedSource>,
        oneshot::Sender<Result<TransferId, EngineError>>,
    ),
    AddServer(SocketAddr),
    Pause(TransferId),
    Resume(TransferId),
    Remove(TransferId, oneshot::Sender<bool>),
    /// As `Remove`, answered once the storage is closed.
    RemoveClosed(TransferId, oneshot::Sender<bool>),
    Snapshot(oneshot::Sender<Arc<Vec<TransferInfo>>>),
    StartAccepting,
    Pieces(
        TransferId,
        oneshot::Sender<Option<weir_core::bitfield::Bitfield>>,
    ),
    /// A transfer's own caps, bytes/s (0: none).
    SetCaps {
        id: TransferId,
        down: u64,
        up: u64,
    },
    BtPeers(TransferId, oneshot::Sender<Vec<weir_session::BtPeer>>),
    Reannounce(TransferId),
    /// The MSE/PE policy for connections opened from now on.
    SetEncryption(weir_bt::mse::Encryption),
    /// Peers of an info-hash from the DHT, for a magnet (see `dht.rs`).
    DhtWatch(
        [u8; 20],
        oneshot::Sender<Result<mpsc::Receiver<Vec<SocketAddr>>, DhtError>>,
    ),
    DhtAddNodes(Vec<SocketAddr>),
    DhtStatus(oneshot::Sender<Option<DhtStatus>>),
    Stop,
}

/// A running engine. Dropping it stops nothing; call [`Engine::stop`].
#[derive(Debug)]
pub struct Engine {
    tx: mpsc::Sender<driver::Msg>,
    progress: watch::Receiver<Snapshot>,
    task: JoinHandle<Result<Summary, EngineError>>,
    /// The address BitTorrent peers reach us on, if listening.
    pub bt_addr: Option<SocketAddr>,
    /// The address eD2k clients reach us on, if listening.
    pub ed2k_addr: Option<SocketAddr>,
    /// The UDP address of the DHT node, if running.
    pub dht_addr: Option<SocketAddr>,
    /// The UDP address uTP peers reach us on, if uTP runs.
    pub utp_addr: Option<SocketAddr>,
    /// The groups LSD announces to (empty: LSD is off, or the policy
    /// allows none of them).
    pub lsd_groups: Vec<SocketAddr>,
}

/// Sends commands to a running engine (cloneable; for signal handlers and
/// front ends).
#[derive(Clone, Debug)]
pub struct EngineHandle {
    tx: mpsc::Sender<driver::Msg>,
}

impl Engine {
    /// Binds the listeners and starts the driver.
    pub async fn start(mut cfg: EngineConfig) -> Result<Engine, EngineError> {
        let bt = match cfg.bt_listen {
            Some(addr) => Some(
                crate::net::listen_tcp_all(addr)
                    .await
                    .map_err(|source| EngineError::Listen { addr, source })?,
            ),
            None => None,
        };
        let ed2k = match cfg.ed2k_listen {
            Some(addr) => Some(
                crate::net::listen_tcp(addr)
                    .await
                    .map_err(|source| EngineError::Listen { addr, source })?,
            ),
            None => None,
        };
        // As asked: 0.0.0.0 stays 0.0.0.0 when `[::]` was bound for it.
        let bt_addr = bt
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| match cfg.bt_listen {
                Some(asked) if a.is_ipv6() && asked.is_ipv4() => {
                    SocketAddr::new(asked.ip(), a.port())
                }
                _ => a,
            });
        let ed2k_addr = ed2k.as_ref().and_then(|l| l.local_addr().ok());
        cfg.session.bt_port = bt_addr.map(|a| a.port());
        cfg.session.ed2k_port = ed2k_addr.map_or(0, |a| a.port());
        // The session sees an accepted eD2k connection's handshake (its
        // hello): the same timeout as every other handshake.
        cfg.session.ed2k_hello_timeout = cfg.handshake_timeout;
        if let Some(h) = &cfg.ed2k_user_hash {
            cfg.session.user_hash = h.for_port(cfg.session.ed2k_port);
        }
        for a in [bt_addr, ed2k_addr].into_iter().flatten() {
            if !cfg.session.own_ips.contains(&a.ip()) {
                cfg.session.own_ips.push(a.ip());
            }
        }
        // One UDP socket for the DHT and uTP, when either runs.
        let want_utp = cfg.transports.utp && bt_addr.is_some();
        let udp = if cfg.dht.is_some() || want_utp {
            let listen = cfg.dht.as_ref().and_then(|s| s.listen);
            let mut ucfg = cfg.utp.clone();
            ucfg.seed ^= cfg.session.seed;
            Some(
                udp::Udp::bind_beside(
                    &cfg.session.policy,
                    listen,
                    bt_addr,
                    want_utp.then_some(ucfg),
                )
                .await
                .map_err(|source| EngineError::Listen {
                    addr: listen.or(bt_addr).unwrap_or(SocketAddr::from(([0; 4], 0))),
                    source,
                })?,
            )
        } else {
            None
        };
        let utp = udp.as_ref().and_then(udp::Udp::utp);
        let (dht, udp) = match (&cfg.dht, udp) {
            (Some(s), Some(u)) => (
                Some(
                    dht::DhtGlue::start(
                        s,
                        &cfg.session.policy,
                        u,
                        cfg.session.bt_port,
                        cfg.session.seed ^ 0x0d47_5eed,
                    )
                    .await
                    .map_err(|source| EngineError::Listen {
                        addr: s
                            .listen
                            .or(bt_addr)
                            .unwrap_or(SocketAddr::from(([0; 4], 0))),
                        source,
                    })?,
                ),
                None,
            ),
            (_, u) => (None, u),
        };
        let utp_addr = utp.as_ref().and_then(|u| u.local_addr().ok());
        let dht_addr = dht.as_ref().map(dht::DhtGlue::local_addr);
        // Torrents advertise the DHT node to their peers (BEP 5 `port`).
        cfg.session.dht_port = dht_addr.map(|a| a.port());
        let routers = cfg
            .dht
            .as_ref()
            .map(|s| s.routers.clone())
            .unwrap_or_default();
        let policy = cfg.session.policy.clone();
        let lsd = match &cfg.lsd {
            Some(s) => {
                lsd::LsdGlue::start(
                    s,
                    &policy,
                    bt_addr,
                    cfg.session.bt_port,
                    cfg.session.seed ^ 0x15d0_5eed,
                )
                .await
            }
            None => None,
        };
        let lsd_groups = lsd.as_ref().map(lsd::LsdGlue::groups).unwrap_or_default();
        let (tx, progress, task) = driver::spawn(cfg, bt, ed2k, dht, udp, utp, lsd);
        dht::resolve_routers(&policy, routers, tx.clone());
        Ok(Engine {
            tx,
            progress,
            task,
            bt_addr,
            ed2k_addr,
            dht_addr,
            utp_addr,
            lsd_groups,
        })
    }

    /// A handle that sends commands after [`Engine::wait`] took this.
    pub fn handle(&self) -> EngineHandle {
        EngineHandle {
            tx: self.tx.clone(),
        }
    }

    /// Progress, published a few times a second.
    pub fn progress(&self) -> watch::Receiver<Snapshot> {
        self.progress.clone()
    }

    /// Waits for the engine to end: every transfer done (unless
    /// `keep_running`), stopped, or failed.
    pub async fn wait(self) -> Result<Summary, EngineError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(EngineError::Transfer {
                name: "engine".into(),
                error: format!("driver task failed: {e}"),
            }),
        }
    }

    /// Adds a torrent (opens its storage first: existing data is checked).
    pub async fn add_torrent(&self, src: TorrentSource) -> Result<TransferId, EngineError> {
        self.handle().add_torrent(src).await
    }

    /// Adds an eD2k download.
    pub async fn add_ed2k(&self, src: Ed2kSource) -> Result<TransferId, EngineError> {
        self.handle().add_ed2k(src).await
    }

    /// Shares a complete file on eD2k.
    pub async fn share(&self, src: SharedSource) -> Result<TransferId, EngineError> {
        self.handle().share(src).await
    }

    /// Adds an eD2k server to log into.
    pub async fn add_server(&self, addr: SocketAddr) {
        self.handle().command(Command::AddServer(addr)).await;
    }

    /// Asks the engine to stop (trackers get `stopped`, state is flushed).
    pub async fn stop(&self) {
        self.handle().stop().await;
    }
}

impl EngineHandle {
    async fn command(&self, c: Command) {
        let _ = self.tx.send(driver::Msg::Command(c)).await;
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, EngineError>>) -> Command,
    ) -> Result<T, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.command(make(tx)).await;
        rx.await.map_err(|_| EngineError::Stopped)?
    }

    /// See [`Engine::add_torrent`].
    pub async fn add_torrent(&self, src: TorrentSource) -> Result<TransferId, EngineError> {
        self.ask(|r| Command::AddTorrent(Box::new(src), r)).await
    }

    /// See [`Engine::add_ed2k`].
    pub async fn add_ed2k(&self, src: Ed2kSource) -> Result<TransferId, EngineError> {
        self.ask(|r| Command::AddEd2k(Box::new(src), r)).await
    }

    /// See [`Engine::share`].
    pub async fn share(&self, src: SharedSource) -> Result<TransferId, EngineError> {
        self.ask(|r| Command::Share(Box::new(src), r)).await
    }

    /// Pauses a transfer.
    pub async fn pause(&self, id: TransferId) {
        self.command(Command::Pause(id)).await;
    }

    /// Resumes a paused transfer.
    pub async fn resume(&self, id: TransferId) {
        self.command(Command::Resume(id)).await;
    }

    /// Removes a transfer (its files stay).
    pub async fn remove(&self, id: TransferId) -> bool {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Remove(id, tx)).await;
        rx.await.unwrap_or(false)
    }

    /// Removes a transfer and answers once its storage is closed (its
    /// writes done, its journal and lock released), so that the caller may
    /// then delete or move its files ([`DataPaths`]).
    pub async fn remove_closed(&self, id: TransferId) -> bool {
        let (tx, rx) = oneshot::channel();
        self.command(Command::RemoveClosed(id, tx)).await;
        rx.await.unwrap_or(false)
    }

    /// A torrent transfer's verified pieces now (`None`: no such
    /// transfer, or no BitTorrent side).
    pub async fn pieces(&self, id: TransferId) -> Option<weir_core::bitfield::Bitfield> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Pieces(id, tx)).await;
        rx.await.ok().flatten()
    }

    /// Caps one transfer's connections at `down` / `up` bytes/s (0: no
    /// cap of its own), besides the global caps. Applies at once to its
    /// connections (each obeys its transfer's buckets from the start).
    /// Accepted eD2k connections, which may ask for any file, obey only
    /// the global caps.
    pub async fn set_caps(&self, id: TransferId, down: u64, up: u64) {
        self.command(Command::SetCaps { id, down, up }).await;
    }

    /// A transfer's connected BitTorrent peers now.
    pub async fn bt_peers(&self, id: TransferId) -> Vec<weir_session::BtPeer> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::BtPeers(id, tx)).await;
        rx.await.unwrap_or_default()
    }

    /// Announces a torrent to its trackers now.
    pub async fn reannounce(&self, id: TransferId) {
        self.command(Command::Reannounce(id)).await;
    }

    /// Sets the MSE/PE policy; connections opened from now on follow it
    /// (open ones stay as they are).
    pub async fn set_encryption(&self, policy: weir_bt::mse::Encryption) {
        self.command(Command::SetEncryption(policy)).await;
    }

    /// Peers of `info_hash` found through the DHT (for a magnet link before
    /// its metadata), as they come, until the receiver is dropped.
    pub async fn dht_peers(
        &self,
        info_hash: [u8; 20],
    ) -> Result<mpsc::Receiver<Vec<SocketAddr>>, DhtError> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::DhtWatch(info_hash, tx)).await;
        rx.await.map_err(|_| DhtError::Off)?
    }

    /// Asks the DHT node to ping these nodes and keep those that answer.
    pub async fn dht_add_nodes(&self, nodes: Vec<SocketAddr>) {
        self.command(Command::DhtAddNodes(nodes)).await;
    }

    /// The DHT's figures (`None`: no DHT).
    pub async fn dht_status(&self) -> Option<DhtStatus> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::DhtStatus(tx)).await;
        rx.await.ok().flatten()
    }

    /// Every transfer now, in id order (shared with the driver's own copy:
    /// cheap to ask for again).
    pub async fn snapshot(&self) -> Arc<Vec<TransferInfo>> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Snapshot(tx)).await;
        rx.await.unwrap_or_default()
    }

    /// Starts accepting connections (see [`EngineConfig::accept_at_start`]).
    pub async fn start_accepting(&self) {
        self.command(Command::StartAccepting).await;
    }

    /// Asks the engine to stop.
    pub async fn stop(&self) {
        self.command(Command::Stop).await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn peer_ids_are_weirs_and_differ() {
        let (a, b) = (super::new_peer_id(), super::new_peer_id());
        for id in [a, b] {
            assert_eq!(&id[..8], b"-WR0100-");
            assert!(
                id[8..]
                    .iter()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
            );
        }
        assert_ne!(a, b);
    }
}
