//! BitTorrent over tokio: one driver task per torrent owns the sans-IO
//! [`Torrent`] and feeds it; per-connection reader and writer tasks move
//! bytes; storage workers hash and write off the network tasks.
//!
//! ```text
//! listener/dialer --handshake--> driver: Torrent::add_peer
//! reader (512 KiB reads, decode in place) --Vec<Message>--> driver
//! driver --Send{chunks}--> writer (vectored writes)   --Sent--> driver
//! driver --StorageOp--> DiskStorage workers --StorageEvent--> driver
//! ```
//!
//! The driver never sleeps in the request path: every input is handled as
//! it arrives and every output it causes goes out before the next input.

mod conn;
mod tracker_glue;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use weir_bt::metainfo::Metainfo;
use weir_bt::torrent::{ConnId, Event, Stats, Torrent, TorrentConfig};
use weir_bt::wire::{Handshake, Limits, Message};
use weir_core::picker::Order;
use weir_core::policy::NetPolicy;
use weir_core::storage::{FileLayout, StorageEvent};

use crate::bandwidth::Limiter;
use crate::peerconn::{self, ConnEvent, Outgoing};
use crate::storage::{self, DiskStorage, Mode, OpenError, OpenOptions, TransferSpec};

/// How to run one torrent.
#[derive(Clone, Debug)]
pub struct BtConfig {
    /// Where sockets may go.
    pub policy: NetPolicy,
    /// The download directory (a multi-file torrent goes in a subdirectory
    /// named after it).
    pub out_dir: PathBuf,
    /// Address to accept peers on (`None`: accept none).
    pub listen: Option<SocketAddr>,
    /// Peers to dial directly.
    pub peers: Vec<SocketAddr>,
    /// Announce to the torrent's trackers.
    pub use_trackers: bool,
    /// Keep running (seeding) after the download completes.
    pub seed: bool,
    /// Download cap chain.
    pub down: Limiter,
    /// Upload cap chain.
    pub up: Limiter,
    /// Rarest first or sequential.
    pub order: Order,
    /// Most connections at once.
    pub max_peers: usize,
    /// Hash every piece already on disk at start, ignoring resume data.
    pub recheck: bool,
    /// Our peer id.
    pub peer_id: [u8; 20],
    /// Storage worker threads.
    pub storage_workers: usize,
    /// Most requests in flight to one peer (`None`: the pipeline decides).
    pub max_requests: Option<u32>,
    /// Upload what is in `out_dir`, never download (`weir seed`): nothing
    /// is created or written, and a directory without the data is refused.
    pub seed_only: bool,
    /// Files weir did not create may be written into (`--overwrite`).
    pub overwrite: bool,
    /// Refuse to start a download that does not fit the free space.
    pub space_check: bool,
}

impl BtConfig {
    /// Defaults for a download into `out_dir` under `policy`.
    pub fn new(policy: NetPolicy, out_dir: PathBuf) -> Self {
        Self {
            policy,
            out_dir,
            listen: None,
            peers: Vec::new(),
            use_trackers: true,
            seed: false,
            down: Limiter::unlimited(),
            up: Limiter::unlimited(),
            order: Order::RarestFirst,
            max_peers: 50,
            recheck: false,
            peer_id: new_peer_id(),
            storage_workers: 2,
            max_requests: None,
            seed_only: false,
            overwrite: false,
            space_check: true,
        }
    }
}

/// A fresh peer id: `-WR0100-` and 12 random characters.
pub fn new_peer_id() -> [u8; 20] {
    let mut id = *b"-WR0100-000000000000";
    let rng = fastrand_seed();
    for (i, b) in id[8..].iter_mut().enumerate() {
        let x = (rng >> ((i % 8) * 8)) as u8 ^ (rng >> 40) as u8 ^ i as u8;
        *b = b"0123456789abcdefghijklmnopqrstuvwxyz"[(x % 36) as usize];
    }
    id
}

fn fastrand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Where a torrent is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Hashing data already on disk.
    Checking,
    /// Downloading.
    Downloading,
    /// Complete, uploading.
    Seeding,
    /// Stopped.
    Done,
}

/// What progress displays read.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Where the torrent is.
    pub phase: Phase,
    /// Counters and rates.
    pub stats: Stats,
    /// Bytes in the torrent.
    pub total: u64,
}

/// What a finished run reports.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Counters at the end.
    pub stats: Stats,
    /// From start to completion (or to stop).
    pub elapsed: Duration,
    /// Whether every piece is verified.
    pub complete: bool,
}

/// A failure of the whole torrent.
#[derive(Debug, thiserror::Error)]
pub enum BtError {
    /// Files could not be created or written.
    #[error("storage: {0}")]
    Storage(String),
    /// The files cannot be used as asked (links, someone else's data, no
    /// data to seed, another process, no space).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

/// A running torrent.
#[derive(Debug)]
pub struct BtHandle {
    /// Progress, updated a few times a second.
    pub progress: watch::Receiver<Progress>,
    /// The address peers can reach us on, if listening.
    pub local_addr: Option<SocketAddr>,
    halt: Arc<tokio::sync::Notify>,
    task: JoinHandle<Result<Summary, BtError>>,
}

impl BtHandle {
    /// Waits for the torrent to finish (complete without `seed`, stopped,
    /// or failed).
    pub async fn wait(self) -> Result<Summary, BtError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(BtError::Storage(format!("driver task failed: {e}"))),
        }
    }

    /// Asks the torrent to stop (announces `stopped`, closes connections).
    /// Heard even while the driver leaves its inputs unread (storage
    /// behind, or the disk full).
    pub async fn stop(&self) {
        self.halt.notify_one();
    }

    /// A handle that can stop the torrent after `wait` took this one.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.halt.clone())
    }
}

/// Stops a running torrent.
#[derive(Clone, Debug)]
pub struct Stopper(Arc<tokio::sync::Notify>);

impl Stopper {
    /// Asks the torrent to stop.
    pub async fn stop(&self) {
        self.0.notify_one();
    }
}

/// Inputs of the driver.
#[derive(Debug)]
pub(crate) enum Msg {
    Handshaked {
        stream: TcpStream,
        addr: SocketAddr,
        theirs: Handshake,
        leftover: BytesMut,
        preamble_sent: bool,
    },
    DialFailed {
        addr: SocketAddr,
        error: String,
    },
    Conn(ConnEvent<Message>),
    TrackerPeers(Vec<SocketAddr>),
}

impl From<ConnEvent<Message>> for Msg {
    fn from(e: ConnEvent<Message>) -> Self {
        Msg::Conn(e)
    }
}

/// The layout of a torrent's files, relative to the download directory (a
/// multi-file torrent's files under a folder named after it).
pub fn layout(meta: &Metainfo) -> FileLayout {
    if meta.info.single_file {
        let f = &meta.info.files[0];
        FileLayout::new([(PathBuf::from(&meta.info.name), f.length)])
    } else {
        let files = meta.info.files.iter().map(|f| {
            let mut p = PathBuf::from(&meta.info.name);
            p.extend(f.path.iter());
            (p, f.length)
        });
        FileLayout::new(files)
    }
}

/// Starts a torrent: opens (and if needed checks) its files, binds the
/// listener, dials the given peers and announces to trackers.
pub async fn start(meta: Arc<Metainfo>, cfg: BtConfig) -> Result<BtHandle, BtError> {
    // Bound first: a port in use fails before the download's lock is taken.
    let listener = match cfg.listen {
        Some(addr) => Some(
            crate::net::listen_tcp(addr)
                .await
                .map_err(|source| BtError::Listen { addr, source })?,
        ),
        None => None,
    };
    let geometry = weir_core::geometry::Geometry::new(
        meta.info.total_length(),
        meta.info.piece_length,
        weir_bt::wire::BLOCK_LEN,
    )
    .map_err(|e| BtError::Storage(e.to_string()))?;
    // Storage is protocol-neutral: the layout, the digests, a journal.
    let digests = Torrent::digests(&meta);
    let spec = TransferSpec {
        dir: cfg.out_dir.clone(),
        layout: layout(&meta),
        geometry,
        digests: Some(digests.clone()),
        id: meta.info_hash.to_vec(),
        stem: hex16(&meta.info_hash),
        name: meta.info.name.clone(),
    };
    let opts = OpenOptions {
        mode: if cfg.seed_only {
            Mode::Seed
        } else {
            Mode::Download
        },
        recheck: cfg.recheck,
        overwrite: cfg.overwrite,
        space_check: cfg.space_check,
        workers: cfg.storage_workers,
        ..OpenOptions::download()
    };
    let opened = tokio::task::spawn_blocking(move || storage::open(spec, opts, None))
        .await
        .map_err(|e| BtError::Storage(format!("opening storage: {e}")))??;

    let local_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
    let mut tcfg = TorrentConfig::new(cfg.peer_id);
    tcfg.order = cfg.order;
    tcfg.listen_port = local_addr.map(|a| a.port());
    tcfg.seed = fastrand_seed();
    if let Some(m) = cfg.max_requests {
        tcfg.max_requests = m;
    }
    tcfg.download = !cfg.seed_only;
    let mut torrent = Torrent::new(&meta, tcfg, &opened.had, &opened.check);
    // Partly written pieces continue where they stopped (as far as the
    // torrent takes them); storage hashes their start back first.
    let resumed: Vec<(u32, u32)> = opened
        .partial
        .iter()
        .map(|&(piece, bytes)| (piece, torrent.resume_partial(piece, bytes)))
        .collect();
    let (storage_tx, storage_rx) = mpsc::unbounded_channel();
    let storage = opened
        .start(digests, &resumed, storage_tx)
        .map_err(|e| BtError::Storage(e.to_string()))?;
    let total = meta.info.total_length();
    let (progress_tx, progress_rx) = watch::channel(Progress {
        phase: if torrent.is_checking() {
            Phase::Checking
        } else {
            Phase::Downloading
        },
        stats: torrent.stats(Instant::now()),
        total,
    });
    // Small: each message may carry a 512 KiB read, and while storage is
    // behind (BACKLOG_LIMIT) the readers must stop soon after the driver does.
    let (tx, rx) = mpsc::channel::<Msg>(32);
    let halt = Arc::new(tokio::sync::Notify::new());
    let driver = Driver {
        meta,
        torrent,
        storage: Some(storage),
        cfg,
        tx: tx.clone(),
        conns: HashMap::new(),
        next_conn: 1,
        known: HashMap::new(),
        banned: HashSet::new(),
        progress: progress_tx,
        started: Instant::now(),
        completed_at: None,
        tracker: None,
        listen_port: local_addr.map_or(0, |a| a.port()),
        listener: None,
        accept_task: None,
    };
    let task = tokio::spawn(driver.run(rx, storage_rx, listener, halt.clone()));
    Ok(BtHandle {
        progress: progress_rx,
        local_addr,
        halt,
        task,
    })
}

fn hex16(h: &[u8; 20]) -> String {
    h.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

struct ConnState {
    addr: SocketAddr,
    peer_id: [u8; 20],
    writer: mpsc::UnboundedSender<Outgoing>,
    reader: JoinHandle<()>,
}

#[derive(Debug)]
struct Known {
    connected: bool,
    dialing: bool,
    failures: u32,
    next_try: Instant,
}

struct Driver {
    meta: Arc<Metainfo>,
    torrent: Torrent,
    storage: Option<DiskStorage>,
    cfg: BtConfig,
    tx: mpsc::Sender<Msg>,
    conns: HashMap<ConnId, ConnState>,
    next_conn: ConnId,
    known: HashMap<SocketAddr, Known>,
    banned: HashSet<IpAddr>,
    progress: watch::Sender<Progress>,
    started: Instant,
    completed_at: Option<Instant>,
    tracker: Option<tracker_glue::Announcer>,
    listen_port: u16,
    listener: Option<TcpListener>,
    accept_task: Option<JoinHandle<()>>,
}

impl Driver {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut storage_rx: mpsc::UnboundedReceiver<StorageEvent>,
        listener: Option<TcpListener>,
        halt: Arc<tokio::sync::Notify>,
    ) -> Result<Summary, BtError> {
        for p in self.cfg.peers.clone() {
            self.add_known(p);
        }
        let mut report = tokio::time::interval(Duration::from_millis(250));
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut fatal = None;
        self.listener = listener;
        self.after_input(&mut fatal);
        if !self.torrent.is_checking() {
            self.begin();
        }
        loop {
            if let Some(e) = fatal.take() {
                self.shutdown().await;
                return Err(BtError::Storage(e));
            }
            if self.finished() {
                break;
            }
            let deadline = self
                .torrent
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            // Hashing or the disk behind the network: leave the peers'
            // messages unread (TCP then slows them) until the workers catch
            // up; each piece they finish wakes this loop.
            let backlogged = self
                .storage
                .as_ref()
                .is_some_and(|s| s.backlog() > crate::storage::BACKLOG_LIMIT);
            tokio::select! {
                biased;
                Some(ev) = storage_rx.recv() => {
                    let now = Instant::now();
                    self.torrent.handle_storage(ev, now);
                    while let Ok(ev) = storage_rx.try_recv() {
                        self.torrent.handle_storage(ev, now);
                    }
                }
                m = rx.recv(), if !backlogged => match m {
                    None => break,
                    Some(m) => self.handle(m),
                },
                _ = halt.notified() => break,
                _ = sleep_until(deadline) => {
                    self.torrent.handle_timeout(Instant::now());
                }
                _ = report.tick() => {
                    self.publish();
                    self.dial_more();
                }
            }
            self.after_input(&mut fatal);
        }
        self.shutdown().await;
        let now = Instant::now();
        Ok(Summary {
            stats: self.torrent.stats(now),
            elapsed: self.completed_at.unwrap_or(now) - self.started,
            complete: self.torrent.is_complete(),
        })
    }

    fn finished(&self) -> bool {
        self.completed_at.is_some() && !self.cfg.seed
    }

    /// Starts peer activity once the start-up check is over: accepting
    /// (connections that arrive while checking wait in the backlog),
    /// announcing, dialling.
    fn begin(&mut self) {
        if let Some(l) = self.listener.take() {
            let tx = self.tx.clone();
            let policy = self.cfg.policy.clone();
            let ours = self.torrent.handshake();
            self.accept_task = Some(tokio::spawn(async move {
                while let Ok((stream, addr)) = crate::net::accept_tcp(&policy, &l).await {
                    tokio::spawn(conn::accept(stream, addr, ours, tx.clone()));
                }
            }));
        }
        if self.torrent.is_complete() && self.completed_at.is_none() {
            self.completed_at = Some(Instant::now());
        }
        if self.cfg.use_trackers && self.tracker.is_none() {
            self.tracker = tracker_glue::Announcer::start(
                &self.meta,
                &self.cfg,
                self.listen_port,
                self.tx.clone(),
                self.progress.subscribe(),
            );
        }
        self.publish();
        self.dial_more();
    }

    fn handle(&mut self, m: Msg) {
        let now = Instant::now();
        match m {
            Msg::Handshaked {
                stream,
                addr,
                theirs,
                leftover,
                preamble_sent,
            } => self.on_handshake(stream, addr, theirs, leftover, preamble_sent, now),
            Msg::DialFailed { addr, error } => {
                tracing::debug!("dial {addr}: {error}");
                if let Some(k) = self.known.get_mut(&addr) {
                    k.dialing = false;
                    k.failures += 1;
                    let backoff = Duration::from_secs(2u64.pow(k.failures.min(6)));
                    k.next_try = now + backoff;
                }
            }
            Msg::Conn(ConnEvent::Messages { conn, msgs }) => {
                for m in msgs {
                    self.torrent.handle_message(conn, m, now);
                }
            }
            Msg::Conn(ConnEvent::ReadError { conn, reason }) => {
                if let Some(c) = self.conns.get(&conn) {
                    tracing::info!("peer {}: {reason}; disconnected", c.addr);
                }
                self.torrent.peer_error(conn, reason, now);
                self.drop_conn(conn);
            }
            Msg::Conn(ConnEvent::Closed { conn }) => {
                self.torrent.remove_peer(conn, now);
                self.drop_conn(conn);
            }
            Msg::Conn(ConnEvent::Sent { conn, bytes }) => self.torrent.on_sent(conn, bytes, now),
            Msg::TrackerPeers(peers) => {
                for p in peers {
                    self.add_known(p);
                }
                self.dial_more();
            }
        }
    }

    fn on_handshake(
        &mut self,
        stream: TcpStream,
        addr: SocketAddr,
        theirs: Handshake,
        leftover: BytesMut,
        preamble_sent: bool,
        now: Instant,
    ) {
        if let Some(k) = self.known.get_mut(&addr) {
            k.dialing = false;
        }
        let ours = self.torrent.handshake();
        let duplicate = self.conns.values().any(|c| c.peer_id == theirs.peer_id);
        if theirs.peer_id == ours.peer_id
            || duplicate
            || self.banned.contains(&addr.ip())
            || self.conns.len() >= self.cfg.max_peers
            || self.torrent.is_checking()
        {
            return;
        }
        if let Some(k) = self.known.get_mut(&addr) {
            k.connected = true;
            k.failures = 0;
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        let (rd, wr) = stream.into_split();
        let (wtx, wrx) = mpsc::unbounded_channel();
        let limits = Limits::new(self.torrent.geometry().piece_count());
        let reader = tokio::spawn(peerconn::reader(
            conn,
            rd,
            leftover,
            conn::WireDecoder(limits),
            self.cfg.down.clone(),
            self.tx.clone(),
        ));
        tokio::spawn(peerconn::writer::<Message, Msg>(
            conn,
            wr,
            wrx,
            self.cfg.up.clone(),
            self.tx.clone(),
        ));
        self.conns.insert(
            conn,
            ConnState {
                addr,
                peer_id: theirs.peer_id,
                writer: wtx,
                reader,
            },
        );
        tracing::debug!(
            "peer {addr} connected ({})",
            String::from_utf8_lossy(&theirs.peer_id[..8])
        );
        self.torrent
            .add_peer_after(conn, addr, &theirs, preamble_sent, now);
    }

    /// Carries out everything the torrent asked for.
    fn after_input(&mut self, fatal: &mut Option<String>) {
        while let Some(ev) = self.torrent.poll_event() {
            match ev {
                Event::Send {
                    conn,
                    data,
                    payload,
                } => {
                    if let Some(c) = self.conns.get(&conn) {
                        let _ = c.writer.send(Outgoing { data, payload });
                    }
                }
                Event::Storage(op) => {
                    if let Some(s) = &self.storage {
                        s.submit(op);
                    }
                }
                Event::Close { conn, reason } => {
                    if let Some(c) = self.conns.get(&conn) {
                        tracing::debug!("peer {}: {reason}; disconnected", c.addr);
                    }
                    self.torrent.remove_peer(conn, Instant::now());
                    self.drop_conn(conn);
                }
                Event::Ban { addr, reason } => {
                    tracing::warn!("banning {addr}: {reason}");
                    self.banned.insert(addr.ip());
                }
                Event::PieceVerified(_) => {}
                Event::Complete => {
                    if self.completed_at.is_none() {
                        self.completed_at = Some(Instant::now());
                    }
                    self.publish();
                }
                Event::CheckDone => self.begin(),
                Event::Fatal(e) => *fatal = Some(e),
            }
        }
    }

    fn drop_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            // Dropping the writer's sender lets it flush and shut down.
            c.reader.abort();
            if let Some(k) = self.known.get_mut(&c.addr) {
                k.connected = false;
                k.next_try = Instant::now() + Duration::from_secs(5);
            }
        }
    }

    fn add_known(&mut self, addr: SocketAddr) {
        let me = self.cfg.listen.map(|l| (l.ip(), self.listen_port));
        if me.is_some_and(|(ip, port)| {
            port == addr.port()
                && (ip == addr.ip() || ip.is_unspecified() && addr.ip().is_loopback())
        }) {
            return; // ourselves, as the tracker saw us
        }
        if !self.cfg.policy.allows(addr.ip()) {
            tracing::warn!(
                "peer {addr} ignored: outside network policy {}",
                self.cfg.policy
            );
            return;
        }
        self.known.entry(addr).or_insert(Known {
            connected: false,
            dialing: false,
            failures: 0,
            next_try: Instant::now(),
        });
    }

    /// Dials known peers while there is room (not while checking, and not
    /// once complete: seeds wait for leechers to come).
    fn dial_more(&mut self) {
        if self.torrent.is_checking() || self.torrent.is_complete() {
            return;
        }
        let now = Instant::now();
        let mut room = self.cfg.max_peers.saturating_sub(self.conns.len());
        let ours = self.torrent.handshake();
        let preamble = self.torrent.preamble();
        for (addr, k) in self.known.iter_mut() {
            if room == 0 {
                break;
            }
            if k.connected || k.dialing || k.next_try > now || self.banned.contains(&addr.ip()) {
                continue;
            }
            if self.conns.values().any(|c| c.addr == *addr) {
                continue;
            }
            k.dialing = true;
            room -= 1;
            tokio::spawn(conn::dial(
                self.cfg.policy.clone(),
                self.cfg.listen.map(|a| a.ip()),
                *addr,
                ours,
                preamble.clone(),
                self.tx.clone(),
            ));
        }
    }

    fn publish(&mut self) {
        let now = Instant::now();
        let phase = if self.torrent.is_checking() {
            Phase::Checking
        } else if self.torrent.is_complete() {
            Phase::Seeding
        } else {
            Phase::Downloading
        };
        let _ = self.progress.send(Progress {
            phase,
            stats: self.torrent.stats(now),
            total: self.meta.info.total_length(),
        });
    }

    async fn shutdown(&mut self) {
        if let Some(t) = self.accept_task.take() {
            t.abort();
        }
        self.publish();
        self.progress.send_modify(|p| p.phase = Phase::Done);
        if let Some(t) = self.tracker.take() {
            t.stop().await;
        }
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for c in conns {
            self.drop_conn(c);
        }
        if let Some(s) = self.storage.take() {
            let _ = tokio::task::spawn_blocking(move || s.close()).await;
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
