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

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
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
use weir_core::peers::{Admit, BookConfig, ConnCounts, ConnLimits, PeerBook, Source};
use weir_core::picker::Order;
use weir_core::policy::NetPolicy;
use weir_core::storage::{FileLayout, StorageEvent};

use crate::bandwidth::Limiter;
use crate::peerconn::{self, ConnEvent, Outgoing, WriteQueue};
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
    /// Most dials in progress (connect and handshake) at once.
    pub max_half_open: usize,
    /// Most accepted connections in their handshake at once (past it, a
    /// new one replaces the oldest).
    pub max_handshakes: usize,
    /// A connection's handshake (and connect, when dialled) must finish
    /// within this.
    pub handshake_timeout: Duration,
    /// Known-peer list caps and dial backoff.
    pub book: BookConfig,
    /// Most bytes queued for one peer and not yet written; a peer that
    /// does not read past it is dropped (`None`: the upload watermark plus
    /// one read plus 1 MiB).
    pub write_queue_limit: Option<u64>,
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
    /// The connection limits these settings give.
    pub fn limits(&self) -> ConnLimits {
        ConnLimits {
            max_peers: self.max_peers,
            max_half_open: self.max_half_open,
            max_handshakes: self.max_handshakes,
        }
    }

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
            max_half_open: ConnLimits::default().max_half_open,
            max_handshakes: ConnLimits::default().max_handshakes,
            handshake_timeout: conn::HANDSHAKE_TIMEOUT,
            book: BookConfig::default(),
            write_queue_limit: None,
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
    /// Peer addresses known (the bounded peer book).
    pub peers_known: usize,
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
    Accepted {
        stream: TcpStream,
        addr: SocketAddr,
    },
    Handshaked {
        stream: TcpStream,
        addr: SocketAddr,
        theirs: Handshake,
        leftover: BytesMut,
        preamble_sent: bool,
        /// The accepted connection's handshake id (`None`: we dialled).
        incoming: Option<u64>,
    },
    HandshakeFailed {
        id: u64,
        addr: SocketAddr,
        error: String,
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
    // Most block data the torrent queues for one peer: its upload
    // watermark plus the one read that may cross it.
    let upload_bound = tcfg.upload_watermark + u64::from(tcfg.max_read);
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
        peers_known: 0,
    });
    // Small: each message may carry a 512 KiB read, and while storage is
    // behind (BACKLOG_LIMIT) the readers must stop soon after the driver does.
    let (tx, rx) = mpsc::channel::<Msg>(32);
    let write_limit = cfg.write_queue_limit.unwrap_or(upload_bound + (1 << 20));
    let book = PeerBook::new(cfg.book.clone(), cfg.policy.clone(), fastrand_seed());
    let halt = Arc::new(tokio::sync::Notify::new());
    let driver = Driver {
        meta,
        torrent,
        storage: Some(storage),
        cfg,
        tx: tx.clone(),
        conns: HashMap::new(),
        next_conn: 1,
        book,
        handshakes: BTreeMap::new(),
        next_handshake: 0,
        write_limit,
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
    writer: WriteQueue,
    reader: JoinHandle<()>,
    writer_task: JoinHandle<()>,
    /// We dialled it (it is in the peer book).
    dialled: bool,
}

/// An accepted connection in its handshake.
struct Handshaking {
    task: tokio::task::AbortHandle,
}

struct Driver {
    meta: Arc<Metainfo>,
    torrent: Torrent,
    storage: Option<DiskStorage>,
    cfg: BtConfig,
    tx: mpsc::Sender<Msg>,
    conns: HashMap<ConnId, ConnState>,
    next_conn: ConnId,
    book: PeerBook,
    /// Accepted connections in their handshake, oldest first.
    handshakes: BTreeMap<u64, Handshaking>,
    next_handshake: u64,
    write_limit: u64,
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
            self.add_known(p, Source::Manual);
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
            self.accept_task = Some(tokio::spawn(async move {
                crate::net::accept_loop(&policy, &l, |stream, addr| {
                    let tx = tx.clone();
                    async move { tx.send(Msg::Accepted { stream, addr }).await.is_ok() }
                })
                .await;
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
            Msg::Accepted { stream, addr } => self.on_accepted(stream, addr),
            Msg::Handshaked {
                stream,
                addr,
                theirs,
                leftover,
                preamble_sent,
                incoming,
            } => {
                if let Some(id) = incoming
                    && self.handshakes.remove(&id).is_none()
                {
                    return; // replaced by a newer one meanwhile
                }
                self.on_handshake(stream, addr, theirs, leftover, preamble_sent, incoming, now)
            }
            Msg::HandshakeFailed { id, addr, error } => {
                tracing::debug!("incoming {addr}: {error}");
                self.handshakes.remove(&id);
            }
            Msg::DialFailed { addr, error } => {
                tracing::debug!("dial {addr}: {error}");
                self.book.dial_failed(addr, now);
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
                let me = self.me();
                let n = self.book.add_answer(
                    peers.into_iter().filter(|a| !is_me(me, *a)),
                    Source::Tracker,
                    now,
                );
                tracing::debug!("tracker: {n} new peers");
                self.dial_more();
            }
        }
    }

    fn counts(&self) -> ConnCounts {
        ConnCounts {
            peers: self.conns.len(),
            dialing: self.book.counts().dialing,
            handshaking: self.handshakes.len(),
        }
    }

    /// An accepted connection: its handshake starts if the limits allow
    /// (the oldest handshake in progress gives way when too many are).
    fn on_accepted(&mut self, stream: TcpStream, addr: SocketAddr) {
        if self.book.is_banned(addr.ip()) {
            return;
        }
        match self.cfg.limits().admit_incoming(&self.counts()) {
            Admit::Refuse => {
                tracing::debug!("incoming {addr} refused: peer slots full");
                return;
            }
            Admit::ReplaceOldest => {
                if let Some((_, old)) = self.handshakes.pop_first() {
                    old.task.abort();
                }
            }
            Admit::Accept => {}
        }
        let id = self.next_handshake;
        self.next_handshake += 1;
        let task = tokio::spawn(conn::accept(
            stream,
            addr,
            id,
            self.torrent.handshake(),
            self.cfg.handshake_timeout,
            self.tx.clone(),
        ));
        self.handshakes.insert(
            id,
            Handshaking {
                task: task.abort_handle(),
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn on_handshake(
        &mut self,
        stream: TcpStream,
        addr: SocketAddr,
        theirs: Handshake,
        leftover: BytesMut,
        preamble_sent: bool,
        incoming: Option<u64>,
        now: Instant,
    ) {
        let dialled = incoming.is_none();
        let ours = self.torrent.handshake();
        let duplicate = self.conns.values().any(|c| c.peer_id == theirs.peer_id);
        if theirs.peer_id == ours.peer_id
            || duplicate
            || self.book.is_banned(addr.ip())
            || !self.cfg.limits().admit_peer(&self.counts())
            || self.torrent.is_checking()
        {
            if dialled {
                if theirs.peer_id == ours.peer_id {
                    // Ourselves under another address: never again.
                    self.book.dial_failed(addr, now);
                    self.book.remove(addr);
                } else {
                    self.book.dial_failed(addr, now);
                }
            }
            return;
        }
        if dialled {
            self.book.connected(addr, now);
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        let (rd, wr) = stream.into_split();
        let (wtx, wrx) = peerconn::write_queue(self.write_limit);
        let limits = Limits::new(self.torrent.geometry().piece_count());
        let reader = tokio::spawn(peerconn::reader(
            conn,
            rd,
            leftover,
            conn::WireDecoder(limits),
            self.cfg.down.clone(),
            self.tx.clone(),
        ));
        let writer_task = tokio::spawn(peerconn::writer::<Message, Msg>(
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
                writer_task,
                dialled,
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
                    let Some(c) = self.conns.get(&conn) else {
                        continue;
                    };
                    if let Err(e) = c.writer.send(Outgoing { data, payload }) {
                        let reason = e.to_string();
                        tracing::info!("peer {}: {reason}; disconnected", c.addr);
                        // It does not read: nothing more is flushed to it.
                        c.writer_task.abort();
                        self.torrent.peer_error(conn, reason, Instant::now());
                        self.drop_conn(conn);
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
                Event::Ban { ip, reason } => {
                    tracing::warn!("banning {ip}: {reason}");
                    self.book.ban(ip);
                }
                // The old driver does no peer exchange.
                Event::PieceVerified(_) | Event::Content(_) | Event::PexPeers(_) => {}
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
            // Dropping the writer's sender lets it flush and shut down,
            // within the linger time.
            c.reader.abort();
            peerconn::linger(c.writer_task);
            if c.dialled {
                self.book.disconnected(c.addr, Instant::now());
            }
        }
    }

    /// Our listen address as peers and trackers see it.
    fn me(&self) -> Option<(std::net::IpAddr, u16)> {
        self.cfg.listen.map(|l| (l.ip(), self.listen_port))
    }

    fn add_known(&mut self, addr: SocketAddr, source: Source) {
        if is_me(self.me(), addr) {
            return; // ourselves, as the tracker saw us
        }
        if let weir_core::peers::Added::Outside = self.book.add(addr, source, Instant::now()) {
            tracing::warn!(
                "peer {addr} ignored: outside network policy {}",
                self.cfg.policy
            );
        }
    }

    /// Dials known peers while the limits leave room (not while checking,
    /// and not once complete: seeds wait for leechers to come).
    fn dial_more(&mut self) {
        if self.torrent.is_checking() || self.torrent.is_complete() {
            return;
        }
        let now = Instant::now();
        let room = self.cfg.limits().dial_room(&self.counts());
        let ours = self.torrent.handshake();
        let preamble = self.torrent.preamble();
        for addr in self.book.next_dials(now, room, true) {
            tokio::spawn(conn::dial(
                self.cfg.policy.clone(),
                self.cfg.listen.map(|a| a.ip()),
                addr,
                ours,
                preamble.clone(),
                self.cfg.handshake_timeout,
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
            peers_known: self.book.counts().known,
        });
    }

    async fn shutdown(&mut self) {
        if let Some(t) = self.accept_task.take() {
            t.abort();
        }
        for (_, h) in std::mem::take(&mut self.handshakes) {
            h.task.abort();
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

/// Whether `addr` is us (`me`: our listen address and port), as a tracker
/// or a source list may name us.
fn is_me(me: Option<(std::net::IpAddr, u16)>, addr: SocketAddr) -> bool {
    me.is_some_and(|(ip, port)| {
        port == addr.port() && (ip == addr.ip() || ip.is_unspecified() && addr.ip().is_loopback())
    })
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
