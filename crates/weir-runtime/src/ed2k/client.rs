//! The eD2k client over tokio: one driver task owns the sans-IO
//! [`Client`] and feeds it; per-connection reader and writer tasks
//! ([`crate::peerconn`]) move bytes; one [`DiskStorage`] per file hashes
//! and writes off the network tasks; an optional server connection finds
//! sources and publishes our files.
//!
//! ```text
//! listener/dialer --TcpStream--> driver: Client::add_conn (hello goes out)
//! reader (512 KiB reads, framed in place) --Vec<Packet>--> driver
//! driver --Send{chunks}--> writer (vectored writes)   --Sent--> driver
//! driver --StorageOp--> DiskStorage (per file) --StorageEvent--> driver
//! server reader --ServerPacket--> driver: ServerSession (sources, callbacks)
//! ```
//!
//! The driver never sleeps in the request path: every input is handled as
//! it arrives and everything it causes goes out before the next input.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use weir_core::peers::{Added, Admit, BookConfig, ConnCounts, ConnLimits, PeerBook, Source};
use weir_core::picker::Order;
use weir_core::policy::NetPolicy;
use weir_core::storage::{Digest, FileLayout, StorageEvent};
use weir_ed2k::Md4Hash;
use weir_ed2k::hash::FileHashes;
use weir_ed2k::link::FileLink;
use weir_ed2k::packet::Packet;
use weir_ed2k::server::ServerSession;
use weir_ed2k::transfer::{Client, ClientConfig, ConnId, Event, FileId, Stats};

mod server_glue;

use super::conn::{self, PeerDecoder, ServerPacket};
use super::userhash::UserHash;
use crate::bandwidth::Limiter;
use crate::peerconn::{self, ConnEvent, Outgoing, WriteQueue};
use crate::storage::{self, DiskStorage, OpenError, OpenOptions, Opened, TransferSpec};

/// How to run the client.
#[derive(Clone, Debug)]
pub struct Ed2kConfig {
    /// Where sockets may go.
    pub policy: NetPolicy,
    /// Where downloads are written.
    pub out_dir: PathBuf,
    /// Address to accept peers on (`None`: accept none).
    pub listen: Option<SocketAddr>,
    /// Peers to dial for downloads (besides the links' sources).
    pub peers: Vec<SocketAddr>,
    /// eD2k servers to log into.
    pub servers: Vec<SocketAddr>,
    /// Keep running (sharing) after every download completes.
    pub seed: bool,
    /// Download cap chain.
    pub down: Limiter,
    /// Upload cap chain.
    pub up: Limiter,
    /// Most connections at once.
    pub max_peers: usize,
    /// Most dials in progress at once (callbacks included).
    pub max_half_open: usize,
    /// Most accepted connections waiting for their hello at once (past
    /// it, a new one replaces the oldest).
    pub max_handshakes: usize,
    /// A dial must connect, and a connection's hello arrive, within this.
    pub handshake_timeout: Duration,
    /// Known-source list caps and dial backoff.
    pub book: BookConfig,
    /// Most bytes queued for one peer and not yet written; a peer that
    /// does not read past it is dropped (`None`: the upload watermark plus
    /// one read plus 1 MiB).
    pub write_queue_limit: Option<u64>,
    /// Hash every part already on disk at start, ignoring resume data.
    pub recheck: bool,
    /// Our user hash, per listen port (keep it stable: see
    /// [`super::userhash`]).
    pub user_hash: UserHash,
    /// Nick shown to peers and servers.
    pub nick: String,
    /// Storage worker threads per file.
    pub storage_workers: usize,
    /// Most blocks pending with one source (`None`: the pipeline decides).
    pub max_requests: Option<u32>,
    /// Upload slots.
    pub upload_slots: usize,
    /// Let peers send us zlib-packed parts.
    pub accept_compressed: bool,
    /// Rarest first or sequential.
    pub order: Order,
    /// Files weir did not create may be written into (`--overwrite`).
    pub overwrite: bool,
    /// Refuse to start a download that does not fit the free space.
    pub space_check: bool,
}

impl Ed2kConfig {
    /// The connection limits these settings give.
    pub fn limits(&self) -> ConnLimits {
        ConnLimits {
            max_peers: self.max_peers,
            max_half_open: self.max_half_open,
            max_handshakes: self.max_handshakes,
        }
    }

    /// Defaults under `policy`, downloading into `out_dir`.
    pub fn new(policy: NetPolicy, out_dir: PathBuf, user_hash: UserHash) -> Self {
        Self {
            policy,
            out_dir,
            listen: None,
            peers: Vec::new(),
            servers: Vec::new(),
            seed: false,
            down: Limiter::unlimited(),
            up: Limiter::unlimited(),
            max_peers: 50,
            max_half_open: ConnLimits::default().max_half_open,
            max_handshakes: ConnLimits::default().max_handshakes,
            handshake_timeout: conn::CONNECT_TIMEOUT,
            book: BookConfig::default(),
            write_queue_limit: None,
            recheck: false,
            user_hash,
            nick: concat!("weir ", env!("CARGO_PKG_VERSION")).to_string(),
            storage_workers: 2,
            max_requests: None,
            upload_slots: 8,
            accept_compressed: true,
            order: Order::RarestFirst,
            overwrite: false,
            space_check: true,
        }
    }
}

/// A complete file to share.
#[derive(Clone, Debug)]
pub struct SharedFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its hashes (`weir hash --ed2k` computes them).
    pub hashes: FileHashes,
}

/// Where the client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Hashing data already on disk.
    Checking,
    /// Downloading.
    Downloading,
    /// Everything complete, sharing.
    Seeding,
    /// Stopped.
    Done,
}

/// What progress displays read.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Where the client is.
    pub phase: Phase,
    /// Counters and rates.
    pub stats: Stats,
    /// Bytes verified over all files.
    pub done: u64,
    /// Bytes over all files.
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
    /// Whether every file is complete.
    pub complete: bool,
    /// Bytes verified.
    pub done: u64,
}

/// A failure of the whole client.
#[derive(Debug, thiserror::Error)]
pub enum Ed2kError {
    /// Files could not be created or written.
    #[error("storage: {0}")]
    Storage(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// A file could not be added.
    #[error("{0}")]
    File(String),
    /// The files cannot be used as asked (links, someone else's data,
    /// another process, no space).
    #[error(transparent)]
    Open(#[from] OpenError),
}

/// A running client.
#[derive(Debug)]
pub struct Ed2kHandle {
    /// Progress, updated a few times a second.
    pub progress: watch::Receiver<Progress>,
    /// The address peers can reach us on, if listening.
    pub local_addr: Option<SocketAddr>,
    halt: Arc<tokio::sync::Notify>,
    task: JoinHandle<Result<Summary, Ed2kError>>,
}

impl Ed2kHandle {
    /// Waits for the client to finish (downloads complete without `seed`,
    /// stopped, or failed).
    pub async fn wait(self) -> Result<Summary, Ed2kError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(Ed2kError::Storage(format!("driver task failed: {e}"))),
        }
    }

    /// A handle that can stop the client after `wait` took this one.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.halt.clone())
    }
}

/// Stops a running client (heard even while the driver leaves its inputs
/// unread: storage behind, or the disk full).
#[derive(Clone, Debug)]
pub struct Stopper(Arc<tokio::sync::Notify>);

impl Stopper {
    /// Asks the client to stop.
    pub async fn stop(&self) {
        self.0.notify_one();
    }
}

/// Inputs of the driver.
#[derive(Debug)]
pub(crate) enum Msg {
    Accepted { stream: TcpStream, addr: SocketAddr },
    Dialed { stream: TcpStream, addr: SocketAddr },
    DialFailed { addr: SocketAddr, error: String },
    Conn(ConnEvent<Packet>),
    ServerUp { stream: TcpStream, addr: SocketAddr },
    ServerDown { addr: SocketAddr, error: String },
    Server(ConnEvent<ServerPacket>),
}

impl From<ConnEvent<Packet>> for Msg {
    fn from(e: ConnEvent<Packet>) -> Self {
        Msg::Conn(e)
    }
}

impl From<ConnEvent<ServerPacket>> for Msg {
    fn from(e: ConnEvent<ServerPacket>) -> Self {
        Msg::Server(e)
    }
}

/// Starts the client: opens (and if needed checks) the files, binds the
/// listener, dials the sources and servers.
pub async fn start(
    cfg: Ed2kConfig,
    downloads: Vec<FileLink>,
    shares: Vec<SharedFile>,
) -> Result<Ed2kHandle, Ed2kError> {
    let listener = match cfg.listen {
        Some(addr) => Some(
            crate::net::listen_tcp(addr)
                .await
                .map_err(|source| Ed2kError::Listen { addr, source })?,
        ),
        None => None,
    };
    let local_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
    let mut ccfg = ClientConfig::new(cfg.user_hash.for_port(local_addr.map_or(0, |a| a.port())));
    ccfg.nick = cfg.nick.clone();
    ccfg.listen_port = local_addr.map_or(0, |a| a.port());
    ccfg.accept_compressed = cfg.accept_compressed;
    ccfg.upload_slots = cfg.upload_slots;
    ccfg.order = cfg.order;
    ccfg.seed = seed_from_clock();
    ccfg.hello_timeout = cfg.handshake_timeout;
    if let Some(m) = cfg.max_requests {
        ccfg.max_requests = m.max(1);
    }
    let write_limit = cfg
        .write_queue_limit
        .unwrap_or(ccfg.upload_watermark + u64::from(ccfg.max_read) + (1 << 20));
    let mut client = Client::new(ccfg);
    let mut places: HashMap<FileId, (Opened, Vec<(u32, u32)>)> = HashMap::new();
    for s in &shares {
        // The user named this file: a link to it is theirs to follow.
        let path = std::fs::canonicalize(&s.path)
            .map_err(|e| Ed2kError::File(format!("{}: {e}", s.path.display())))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| Ed2kError::File(format!("{}: not a file", s.path.display())))?;
        let spec = TransferSpec {
            dir: path
                .parent()
                .map_or_else(|| PathBuf::from("."), |p| p.to_path_buf()),
            layout: FileLayout::new([(PathBuf::from(&name), s.hashes.size)]),
            geometry: weir_ed2k::geometry(s.hashes.size),
            digests: Some(s.hashes.part_digests().into()),
            id: s.hashes.file_hash.0.to_vec(),
            stem: journal_stem(&s.hashes.file_hash),
            name: name.clone(),
        };
        // Hashed by the caller just now; shared as it is, read-only.
        let opts = OpenOptions {
            journal: false,
            verified_by_caller: true,
            workers: cfg.storage_workers,
            ..OpenOptions::seed()
        };
        let opened = open_blocking(spec, opts, None).await?;
        let id = client
            .add_shared(name, &s.hashes)
            .map_err(|e| Ed2kError::File(e.to_string()))?;
        places.insert(id, (opened, Vec::new()));
    }
    let mut sources: Vec<SocketAddr> = cfg.peers.clone();
    for link in &downloads {
        let spec = TransferSpec {
            dir: cfg.out_dir.clone(),
            layout: FileLayout::new([(PathBuf::from(&link.name), link.size)]),
            geometry: weir_ed2k::geometry(link.size),
            digests: link_digests(link),
            id: link.hash.0.to_vec(),
            stem: journal_stem(&link.hash),
            name: link.name.clone(),
        };
        let opts = OpenOptions {
            recheck: cfg.recheck,
            overwrite: cfg.overwrite,
            space_check: cfg.space_check,
            workers: cfg.storage_workers,
            ..OpenOptions::download()
        };
        // Without the part hashes, a file already there proves itself by
        // its file hash.
        let (size, hash) = (link.size, link.hash);
        let derive: storage::DeriveDigests = Box::new(move |r| derive_digests(r, size, hash));
        let opened = open_blocking(spec, opts, Some(derive)).await?;
        let id = client
            .add_download(link, &opened.had, &opened.check)
            .map_err(|e| Ed2kError::File(e.to_string()))?;
        // Partly written parts continue where they stopped; storage hashes
        // their start back first.
        let resumed = opened
            .partial
            .iter()
            .map(|&(piece, bytes)| (piece, client.resume_partial(id, piece, bytes)))
            .collect();
        places.insert(id, (opened, resumed));
        sources.extend(
            link.sources
                .iter()
                .filter_map(|s| s.addr())
                .map(SocketAddr::V4),
        );
    }
    let total = client
        .file_ids()
        .filter_map(|f| client.file_info(f))
        .map(|(_, s)| s)
        .sum();
    let (progress_tx, progress_rx) = watch::channel(Progress {
        phase: Phase::Downloading,
        stats: Stats::default(),
        done: 0,
        total,
        peers_known: 0,
    });
    // Small: each message may carry a 512 KiB read, and while storage is
    // behind (BACKLOG_LIMIT) the readers must stop soon after the driver does.
    let (tx, rx) = mpsc::channel::<Msg>(32);
    let halt = Arc::new(tokio::sync::Notify::new());
    let (storage_tx, storage_rx) = mpsc::unbounded_channel();
    let (cfg_book, policy) = (cfg.book.clone(), cfg.policy.clone());
    let driver = Driver {
        client,
        places,
        storages: HashMap::new(),
        storage_tx,
        cfg,
        tx: tx.clone(),
        conns: HashMap::new(),
        next_conn: 1,
        book: PeerBook::new(cfg_book, policy, seed_from_clock() ^ 0x0b00c),
        write_limit,
        progress: progress_tx,
        started: Instant::now(),
        completed_at: None,
        listen_port: local_addr.map_or(0, |a| a.port()),
        accept_task: None,
        server: None,
        server_retry: HashMap::new(),
        next_source_ask: None,
    };
    let task = tokio::spawn(driver.run(rx, storage_rx, listener, sources, halt.clone()));
    Ok(Ed2kHandle {
        progress: progress_rx,
        local_addr,
        halt,
        task,
    })
}

/// Opens one file's storage on a blocking thread (it may hash).
async fn open_blocking(
    spec: TransferSpec,
    opts: OpenOptions,
    derive: Option<storage::DeriveDigests>,
) -> Result<Opened, Ed2kError> {
    tokio::task::spawn_blocking(move || storage::open(spec, opts, derive))
        .await
        .map_err(|e| Ed2kError::Storage(format!("opening storage: {e}")))?
        .map_err(Ed2kError::Open)
}

/// Names the journal and lock of a file: `.weir-resume-ed2k-<hash>`.
pub(crate) fn journal_stem(hash: &Md4Hash) -> String {
    format!("ed2k-{}", hash.to_hex().to_ascii_lowercase())
}

/// The part digests a link gives (a file below one part: its file hash;
/// otherwise its `p=` part hashes, if any).
pub(crate) fn link_digests(link: &FileLink) -> Option<Arc<[Digest]>> {
    let n = weir_ed2k::geometry(link.size).piece_count() as usize;
    if weir_ed2k::hashset_len(link.size) == 0 {
        return Some(vec![Digest::Md4(link.hash.0); n].into());
    }
    let hs = link.part_hashes.as_ref()?;
    (hs.len() >= n).then(|| hs[..n].iter().map(|h| Digest::Md4(h.0)).collect())
}

/// The part digests of data that hashes to `hash` (`None` otherwise).
pub(crate) fn derive_digests(
    r: &mut dyn std::io::Read,
    size: u64,
    hash: Md4Hash,
) -> Option<Arc<[Digest]>> {
    let mut h = weir_ed2k::hash::Ed2kHasher::md4_only();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(_) => return None,
        }
    }
    let got = h.finish();
    (got.size == size && got.file_hash == hash).then(|| got.part_digests().into())
}

fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x5eed, |d| d.as_nanos() as u64)
}

struct ConnState {
    addr: SocketAddr,
    writer: WriteQueue,
    reader: JoinHandle<()>,
    writer_task: JoinHandle<()>,
    /// We dialled it (it is in the peer book).
    dialled: bool,
}

pub(super) struct ServerConn {
    pub(super) addr: SocketAddr,
    pub(super) session: ServerSession,
    pub(super) writer: WriteQueue,
    pub(super) reader: JoinHandle<()>,
    pub(super) writer_task: JoinHandle<()>,
}

/// How often a server is asked for sources of an incomplete download.
const SOURCE_REASK: Duration = Duration::from_secs(60);
/// How long before a lost server is dialled again.
const SERVER_RETRY: Duration = Duration::from_secs(30);

struct Driver {
    client: Client,
    /// Files whose storage is open but not started (digests unknown), with
    /// the partly written parts the client continues.
    places: HashMap<FileId, (Opened, Vec<(u32, u32)>)>,
    storages: HashMap<FileId, DiskStorage>,
    storage_tx: mpsc::UnboundedSender<(FileId, StorageEvent)>,
    cfg: Ed2kConfig,
    tx: mpsc::Sender<Msg>,
    conns: HashMap<ConnId, ConnState>,
    next_conn: ConnId,
    book: PeerBook,
    write_limit: u64,
    progress: watch::Sender<Progress>,
    started: Instant,
    completed_at: Option<Instant>,
    listen_port: u16,
    accept_task: Option<JoinHandle<()>>,
    server: Option<ServerConn>,
    server_retry: HashMap<SocketAddr, Instant>,
    next_source_ask: Option<Instant>,
}

impl Driver {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut storage_rx: mpsc::UnboundedReceiver<(FileId, StorageEvent)>,
        listener: Option<TcpListener>,
        sources: Vec<SocketAddr>,
        halt: Arc<tokio::sync::Notify>,
    ) -> Result<Summary, Ed2kError> {
        if let Some(l) = listener {
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
        for s in sources {
            self.add_known(s, Source::Manual);
        }
        let now = Instant::now();
        for s in self.cfg.servers.clone() {
            self.server_retry.insert(s, now);
        }
        let mut report = tokio::time::interval(Duration::from_millis(250));
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut fatal = None;
        // A file proven complete by its own data (digests derived, none in
        // the link) gets its storage now: nothing else announces them.
        let derived: Vec<FileId> = self
            .places
            .iter()
            .filter(|(f, (o, _))| self.client.digests(**f).is_none() && o.digests().is_some())
            .map(|(f, _)| *f)
            .collect();
        for f in derived {
            if let Err(e) = self.open_storage(f) {
                fatal = Some(e);
            }
        }
        self.after_input(&mut fatal);
        self.housekeeping();
        loop {
            if let Some(e) = fatal.take() {
                self.shutdown().await;
                return Err(Ed2kError::Storage(e));
            }
            if self.completed_at.is_some() && !self.cfg.seed {
                break;
            }
            let deadline = self
                .client
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            // Hashing behind the network: leave the connections' packets
            // unread (their readers then stop reading, and TCP slows the
            // peers) until the workers catch up; each part they finish
            // wakes this loop.
            let backlogged = self
                .storages
                .values()
                .map(DiskStorage::backlog)
                .sum::<u64>()
                > crate::storage::BACKLOG_LIMIT;
            tokio::select! {
                biased;
                Some((file, ev)) = storage_rx.recv() => {
                    let now = Instant::now();
                    self.client.handle_storage(file, ev, now);
                    while let Ok((file, ev)) = storage_rx.try_recv() {
                        self.client.handle_storage(file, ev, now);
                    }
                }
                m = rx.recv(), if !backlogged => match m {
                    None => break,
                    Some(m) => self.handle(m),
                },
                _ = halt.notified() => break,
                _ = sleep_until(deadline) => {
                    self.client.handle_timeout(Instant::now());
                }
                _ = report.tick() => {
                    self.publish();
                    self.housekeeping();
                }
            }
            self.after_input(&mut fatal);
        }
        self.shutdown().await;
        let now = Instant::now();
        let (done, _) = self.totals();
        Ok(Summary {
            stats: self.client.stats(now),
            elapsed: self.completed_at.unwrap_or(now) - self.started,
            complete: self.all_complete(),
            done,
        })
    }

    fn all_complete(&self) -> bool {
        self.client.file_ids().all(|f| self.client.is_complete(f))
    }

    fn totals(&self) -> (u64, u64) {
        self.client
            .file_ids()
            .map(|f| self.client.progress(f))
            .fold((0, 0), |(d, t), p| (d + p.verified, t + p.size))
    }

    fn handle(&mut self, m: Msg) {
        let now = Instant::now();
        match m {
            Msg::Accepted { stream, addr } => self.on_accepted(stream, addr, now),
            Msg::Dialed { stream, addr } => {
                if self.book.is_banned(addr.ip()) {
                    self.book.dial_failed(addr, now);
                    return;
                }
                self.book.connected(addr, now);
                self.attach(stream, addr, true, now);
            }
            Msg::DialFailed { addr, error } => {
                tracing::debug!("dial {addr}: {error}");
                self.book.dial_failed(addr, now);
            }
            Msg::Conn(ConnEvent::Messages { conn, msgs }) => {
                for p in msgs {
                    if tracing::enabled!(tracing::Level::TRACE) {
                        conn::trace_packet(conn, "in", &p);
                    }
                    self.client.handle_packet(conn, p, now);
                }
            }
            Msg::Conn(ConnEvent::ReadError { conn, reason }) => {
                if let Some(c) = self.conns.get(&conn) {
                    tracing::info!("peer {}: {reason}; disconnected", c.addr);
                }
                self.client.conn_error(conn, reason, now);
                self.drop_conn(conn);
            }
            Msg::Conn(ConnEvent::Closed { conn }) => {
                self.client.remove_conn(conn, now);
                self.drop_conn(conn);
            }
            Msg::Conn(ConnEvent::Sent { conn, bytes }) => self.client.on_sent(conn, bytes, now),
            Msg::ServerUp { stream, addr } => self.server_up(stream, addr),
            Msg::ServerDown { addr, error } => {
                tracing::warn!("eD2k server {addr}: {error}");
                self.server_retry.insert(addr, now + SERVER_RETRY);
            }
            Msg::Server(ev) => self.server_event(ev, now),
        }
    }

    /// Connections by stage: `handshaking` are accepted ones still
    /// waiting for the peer's hello.
    fn counts(&self) -> ConnCounts {
        let handshaking = self
            .conns
            .iter()
            .filter(|(id, c)| !c.dialled && self.client.peer(**id).is_none())
            .count();
        ConnCounts {
            peers: self.conns.len() - handshaking,
            dialing: self.book.counts().dialing,
            handshaking,
        }
    }

    /// An accepted connection: taken up if the limits allow (the oldest
    /// one still waiting for its hello gives way when too many wait).
    fn on_accepted(&mut self, stream: TcpStream, addr: SocketAddr, now: Instant) {
        if self.book.is_banned(addr.ip()) {
            return;
        }
        match self.cfg.limits().admit_incoming(&self.counts()) {
            Admit::Refuse => {
                tracing::debug!("incoming {addr} refused: peer slots full");
                return;
            }
            Admit::ReplaceOldest => {
                let oldest = self
                    .conns
                    .iter()
                    .filter(|(id, c)| !c.dialled && self.client.peer(**id).is_none())
                    .map(|(id, _)| *id)
                    .min();
                if let Some(old) = oldest {
                    self.client.remove_conn(old, now);
                    self.drop_conn(old);
                }
            }
            Admit::Accept => {}
        }
        self.attach(stream, addr, false, now);
    }

    /// Takes over a connected socket: reader and writer tasks, and the
    /// client learns about it (an outgoing one sends its hello at once).
    fn attach(
        &mut self,
        stream: TcpStream,
        addr: SocketAddr,
        outgoing: bool,
        now: Instant,
    ) -> ConnId {
        let local = conn::local_ipv4(&stream);
        let id = self.next_conn;
        self.next_conn += 1;
        let (rd, wr) = stream.into_split();
        let (wtx, wrx) = peerconn::write_queue(self.write_limit);
        let reader = tokio::spawn(peerconn::reader(
            id,
            rd,
            bytes::BytesMut::with_capacity(peerconn::READ_BUF),
            PeerDecoder::new(),
            self.cfg.down.clone(),
            self.tx.clone(),
        ));
        let writer_task = tokio::spawn(peerconn::writer::<Packet, Msg>(
            id,
            wr,
            wrx,
            self.cfg.up.clone(),
            self.tx.clone(),
        ));
        self.conns.insert(
            id,
            ConnState {
                addr,
                writer: wtx,
                reader,
                writer_task,
                dialled: outgoing,
            },
        );
        self.client.add_conn(id, addr, local, outgoing, now);
        id
    }

    /// Carries out everything the client asked for.
    fn after_input(&mut self, fatal: &mut Option<String>) {
        while let Some(ev) = self.client.poll_event() {
            match ev {
                Event::Send {
                    conn,
                    data,
                    payload,
                } => {
                    let Some(c) = self.conns.get(&conn) else {
                        continue;
                    };
                    if tracing::enabled!(tracing::Level::TRACE) {
                        conn::trace_out(conn, &data);
                    }
                    if let Err(e) = c.writer.send(Outgoing { data, payload }) {
                        let reason = e.to_string();
                        tracing::info!("peer {}: {reason}; disconnected", c.addr);
                        // It does not read: nothing more is flushed to it.
                        c.writer_task.abort();
                        self.client.conn_error(conn, reason, Instant::now());
                        self.drop_conn(conn);
                    }
                }
                Event::Storage { file, op } => {
                    if let Some(s) = self.storages.get(&file) {
                        s.submit(op);
                    }
                }
                Event::DigestsKnown { file } => {
                    if let Err(e) = self.open_storage(file) {
                        *fatal = Some(e);
                    }
                }
                Event::Close { conn, reason } => {
                    if let Some(c) = self.conns.get(&conn) {
                        if reason == weir_ed2k::transfer::SELF_CONNECTION {
                            // Never silent: a source that is us, or another
                            // client with our hash, would stall a download.
                            tracing::warn!(
                                "peer {} presents our own user hash: it is this client, or \
                                 another one given the same WEIR_ED2K_USER_HASH (unset it so \
                                 each listen port gets its own); not using it",
                                c.addr
                            );
                            let addr = c.addr;
                            self.book.remove(addr);
                        } else {
                            tracing::debug!("peer {}: {reason}; disconnected", c.addr);
                        }
                    }
                    self.client.remove_conn(conn, Instant::now());
                    self.drop_conn(conn);
                }
                Event::Ban { ip, reason } => {
                    tracing::warn!("banning {ip}: {reason}");
                    self.book.ban(ip);
                }
                Event::PartVerified { .. } => {}
                Event::Connect { addr } => {
                    tracing::info!("connecting to {addr} again");
                    self.callback(addr);
                }
                Event::Complete { file } => {
                    if let Some((name, _)) = self.client.file_info(file) {
                        tracing::info!("{name}: complete");
                    }
                    if self.all_complete() && self.completed_at.is_none() {
                        self.completed_at = Some(Instant::now());
                    }
                    self.offer_files();
                    self.publish();
                }
                Event::Fatal { file, error } => {
                    let name = self.client.file_info(file).map_or("?", |(n, _)| n);
                    *fatal = Some(format!("{name}: {error}"));
                }
            }
        }
        if self.all_complete() && self.completed_at.is_none() {
            self.completed_at = Some(Instant::now());
        }
    }

    fn open_storage(&mut self, file: FileId) -> Result<(), String> {
        if self.storages.contains_key(&file) {
            return Ok(());
        }
        let Some((opened, resumed)) = self.places.remove(&file) else {
            return Err("file without storage".into());
        };
        let Some(digests) = self.client.digests(file).or_else(|| opened.digests()) else {
            self.places.insert(file, (opened, resumed));
            return Err("file without digests".into());
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let storage = opened
            .start(digests, &resumed, tx)
            .map_err(|e| e.to_string())?;
        let merged = self.storage_tx.clone();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                if merged.send((file, ev)).is_err() {
                    return;
                }
            }
        });
        self.storages.insert(file, storage);
        Ok(())
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

    fn is_me(&self, addr: SocketAddr) -> bool {
        let public = self.server.as_ref().and_then(|s| s.session.public_ip());
        addr.port() == self.listen_port
            && (self.cfg.listen.is_some_and(|l| {
                l.ip() == addr.ip() || l.ip().is_unspecified() && addr.ip().is_loopback()
            }) || public.is_some_and(|p| IpAddr::V4(p) == addr.ip()))
    }

    pub(super) fn add_known(&mut self, addr: SocketAddr, source: Source) {
        if self.is_me(addr) {
            return;
        }
        if let Added::Outside = self.book.add(addr, source, Instant::now()) {
            tracing::warn!(
                "source {addr} ignored: outside network policy {}",
                self.cfg.policy
            );
        }
    }

    /// A peer asked (through the server, or by wedging) that we connect
    /// to it: dialled under the same limits and policy as every source.
    pub(super) fn callback(&mut self, addr: SocketAddr) {
        if self.is_me(addr) {
            return;
        }
        match self.book.add(addr, Source::Callback, Instant::now()) {
            Added::New | Added::Known => self.dial_more(Instant::now()),
            refused => tracing::debug!("callback to {addr} not dialled: {refused:?}"),
        }
    }

    /// Periodic: dial sources, (re)connect servers, ask for sources.
    fn housekeeping(&mut self) {
        let now = Instant::now();
        self.dial_more(now);
        if self.server.is_none() {
            let due: Vec<SocketAddr> = self
                .server_retry
                .iter()
                .filter(|(_, t)| **t <= now)
                .map(|(a, _)| *a)
                .collect();
            if let Some(addr) = due.first().copied() {
                self.server_retry.insert(addr, now + SERVER_RETRY * 10);
                tokio::spawn(conn::dial_server(
                    self.cfg.policy.clone(),
                    self.cfg.listen.map(|a| a.ip()),
                    addr,
                    self.tx.clone(),
                ));
            }
        }
        if self.next_source_ask.is_some_and(|t| t <= now) {
            self.ask_sources(now);
        }
    }

    /// Dials known sources while a download is incomplete, and peers that
    /// asked for a callback, while the limits leave room.
    pub(super) fn dial_more(&mut self, now: Instant) {
        let seeking = self.client.downloading().next().is_some();
        let room = self.cfg.limits().dial_room(&self.counts());
        for addr in self.book.next_dials(now, room, seeking) {
            tokio::spawn(conn::dial(
                self.cfg.policy.clone(),
                self.cfg.listen.map(|a| a.ip()),
                addr,
                self.cfg.handshake_timeout,
                self.tx.clone(),
            ));
        }
    }

    fn publish(&mut self) {
        let now = Instant::now();
        let (done, total) = self.totals();
        let checking = self
            .client
            .file_ids()
            .any(|f| self.client.progress(f).checking);
        let phase = if checking {
            Phase::Checking
        } else if self.all_complete() {
            Phase::Seeding
        } else {
            Phase::Downloading
        };
        let _ = self.progress.send(Progress {
            phase,
            stats: self.client.stats(now),
            done,
            total,
            peers_known: self.book.counts().known,
        });
    }

    async fn shutdown(&mut self) {
        if let Some(t) = self.accept_task.take() {
            t.abort();
        }
        self.publish();
        self.progress.send_modify(|p| p.phase = Phase::Done);
        if let Some(s) = self.server.take() {
            s.reader.abort();
            peerconn::linger(s.writer_task);
        }
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for c in conns {
            self.drop_conn(c);
        }
        let storages: Vec<DiskStorage> = self.storages.drain().map(|(_, s)| s).collect();
        let _ = tokio::task::spawn_blocking(move || {
            for s in storages {
                s.close();
            }
        })
        .await;
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
