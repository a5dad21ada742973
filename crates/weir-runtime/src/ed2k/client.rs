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

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use weir_core::picker::Order;
use weir_core::policy::NetPolicy;
use weir_core::storage::{Digest, FileLayout, StorageEvent};
use weir_ed2k::Md4Hash;
use weir_ed2k::hash::FileHashes;
use weir_ed2k::link::FileLink;
use weir_ed2k::packet::{Decoder, Limits, Packet};
use weir_ed2k::server::{ServerSession, SessionEvent, SharedInfo};
use weir_ed2k::transfer::{Client, ClientConfig, ConnId, Event, FileId, Stats};

use super::conn::{self, PeerDecoder, ServerDecoder, ServerPacket};
use crate::bandwidth::Limiter;
use crate::peerconn::{self, ConnEvent, Outgoing};
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
    /// Hash every part already on disk at start, ignoring resume data.
    pub recheck: bool,
    /// Our user hash (keep it stable: see [`super::userhash`]).
    pub user_hash: Md4Hash,
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
    /// Defaults under `policy`, downloading into `out_dir`.
    pub fn new(policy: NetPolicy, out_dir: PathBuf, user_hash: Md4Hash) -> Self {
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
    let mut ccfg = ClientConfig::new(cfg.user_hash);
    ccfg.nick = cfg.nick.clone();
    ccfg.listen_port = local_addr.map_or(0, |a| a.port());
    ccfg.accept_compressed = cfg.accept_compressed;
    ccfg.upload_slots = cfg.upload_slots;
    ccfg.order = cfg.order;
    ccfg.seed = seed_from_clock();
    if let Some(m) = cfg.max_requests {
        ccfg.max_requests = m.max(1);
    }
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
    });
    // Small: each message may carry a 512 KiB read, and while storage is
    // behind (BACKLOG_LIMIT) the readers must stop soon after the driver does.
    let (tx, rx) = mpsc::channel::<Msg>(32);
    let halt = Arc::new(tokio::sync::Notify::new());
    let (storage_tx, storage_rx) = mpsc::unbounded_channel();
    let driver = Driver {
        client,
        places,
        storages: HashMap::new(),
        storage_tx,
        cfg,
        tx: tx.clone(),
        conns: HashMap::new(),
        next_conn: 1,
        known: HashMap::new(),
        banned: HashSet::new(),
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
fn journal_stem(hash: &Md4Hash) -> String {
    format!("ed2k-{}", hash.to_hex().to_ascii_lowercase())
}

/// The part digests a link gives (a file below one part: its file hash;
/// otherwise its `p=` part hashes, if any).
fn link_digests(link: &FileLink) -> Option<Arc<[Digest]>> {
    let n = weir_ed2k::geometry(link.size).piece_count() as usize;
    if weir_ed2k::hashset_len(link.size) == 0 {
        return Some(vec![Digest::Md4(link.hash.0); n].into());
    }
    let hs = link.part_hashes.as_ref()?;
    (hs.len() >= n).then(|| hs[..n].iter().map(|h| Digest::Md4(h.0)).collect())
}

/// The part digests of data that hashes to `hash` (`None` otherwise).
fn derive_digests(r: &mut dyn std::io::Read, size: u64, hash: Md4Hash) -> Option<Arc<[Digest]>> {
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
    writer: mpsc::UnboundedSender<Outgoing>,
    reader: JoinHandle<()>,
}

#[derive(Debug)]
struct Known {
    connected: Option<ConnId>,
    dialing: bool,
    failures: u32,
    next_try: Instant,
}

struct ServerConn {
    addr: SocketAddr,
    session: ServerSession,
    writer: mpsc::UnboundedSender<Outgoing>,
    reader: JoinHandle<()>,
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
    known: HashMap<SocketAddr, Known>,
    banned: HashSet<IpAddr>,
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
                while let Ok((stream, addr)) = crate::net::accept_tcp(&policy, &l).await {
                    if tx.send(Msg::Accepted { stream, addr }).await.is_err() {
                        return;
                    }
                }
            }));
        }
        for s in sources {
            self.add_known(s);
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
            Msg::Accepted { stream, addr } => {
                if self.banned.contains(&canonical(addr.ip()))
                    || self.conns.len() >= self.cfg.max_peers
                {
                    return;
                }
                self.attach(stream, addr, false, now);
            }
            Msg::Dialed { stream, addr } => {
                if let Some(k) = self.known.get_mut(&addr) {
                    k.dialing = false;
                    k.failures = 0;
                }
                if self.banned.contains(&canonical(addr.ip())) {
                    return;
                }
                let conn = self.attach(stream, addr, true, now);
                if let Some(k) = self.known.get_mut(&addr) {
                    k.connected = Some(conn);
                }
            }
            Msg::DialFailed { addr, error } => {
                tracing::debug!("dial {addr}: {error}");
                if let Some(k) = self.known.get_mut(&addr) {
                    k.dialing = false;
                    k.failures += 1;
                    k.next_try = now + Duration::from_secs(2u64.pow(k.failures.min(6)));
                }
            }
            Msg::Conn(ConnEvent::Messages { conn, msgs }) => {
                for p in msgs {
                    if tracing::enabled!(tracing::Level::TRACE) {
                        trace_packet(conn, "in", &p);
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
        let (wtx, wrx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(peerconn::reader(
            id,
            rd,
            bytes::BytesMut::with_capacity(peerconn::READ_BUF),
            PeerDecoder::new(),
            self.cfg.down.clone(),
            self.tx.clone(),
        ));
        tokio::spawn(peerconn::writer::<Packet, Msg>(
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
                    if let Some(c) = self.conns.get(&conn) {
                        if tracing::enabled!(tracing::Level::TRACE) {
                            trace_out(conn, &data);
                        }
                        let _ = c.writer.send(Outgoing { data, payload });
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
                        tracing::debug!("peer {}: {reason}; disconnected", c.addr);
                    }
                    self.client.remove_conn(conn, Instant::now());
                    self.drop_conn(conn);
                }
                Event::Ban { ip, reason } => {
                    tracing::warn!("banning {ip}: {reason}");
                    self.banned.insert(canonical(ip));
                }
                Event::PartVerified { .. } => {}
                Event::Connect { addr } => {
                    if self.cfg.policy.allows(addr.ip())
                        && !self.banned.contains(&canonical(addr.ip()))
                    {
                        tracing::info!("connecting to {addr} again");
                        tokio::spawn(conn::dial(
                            self.cfg.policy.clone(),
                            self.cfg.listen.map(|a| a.ip()),
                            addr,
                            self.tx.clone(),
                        ));
                    }
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
            // Dropping the writer's sender lets it flush and shut down.
            c.reader.abort();
            for k in self.known.values_mut() {
                if k.connected == Some(conn) {
                    k.connected = None;
                    k.next_try = Instant::now() + Duration::from_secs(5);
                }
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

    fn add_known(&mut self, addr: SocketAddr) {
        if self.is_me(addr) {
            return;
        }
        if !self.cfg.policy.allows(addr.ip()) {
            tracing::warn!(
                "source {addr} ignored: outside network policy {}",
                self.cfg.policy
            );
            return;
        }
        self.known.entry(addr).or_insert(Known {
            connected: None,
            dialing: false,
            failures: 0,
            next_try: Instant::now(),
        });
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

    /// Dials known sources while a download is incomplete and there is room.
    fn dial_more(&mut self, now: Instant) {
        if self.client.downloading().next().is_none() {
            return;
        }
        let mut room = self.cfg.max_peers.saturating_sub(self.conns.len());
        let mut go = Vec::new();
        for (addr, k) in self.known.iter_mut() {
            if room == 0 {
                break;
            }
            if k.connected.is_some() || k.dialing || k.next_try > now {
                continue;
            }
            if self.banned.contains(&canonical(addr.ip())) {
                continue;
            }
            k.dialing = true;
            room -= 1;
            go.push(*addr);
        }
        for addr in go {
            tokio::spawn(conn::dial(
                self.cfg.policy.clone(),
                self.cfg.listen.map(|a| a.ip()),
                addr,
                self.tx.clone(),
            ));
        }
    }

    fn server_up(&mut self, stream: TcpStream, addr: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let (wtx, wrx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(peerconn::reader(
            0,
            rd,
            bytes::BytesMut::with_capacity(64 << 10),
            ServerDecoder(Decoder::new(Limits::SERVER)),
            Limiter::unlimited(),
            self.tx.clone(),
        ));
        tokio::spawn(peerconn::writer::<ServerPacket, Msg>(
            0,
            wr,
            wrx,
            Limiter::unlimited(),
            self.tx.clone(),
        ));
        let session = ServerSession::new(self.cfg.user_hash, self.listen_port, &self.cfg.nick);
        self.server = Some(ServerConn {
            addr,
            session,
            writer: wtx,
            reader,
        });
        self.flush_server();
    }

    fn flush_server(&mut self) {
        if let Some(s) = &mut self.server
            && let Some(b) = s.session.take_output()
        {
            let _ = s.writer.send(Outgoing {
                data: vec![b],
                payload: 0,
            });
        }
    }

    fn server_event(&mut self, ev: ConnEvent<ServerPacket>, now: Instant) {
        match ev {
            ConnEvent::Messages { msgs, .. } => {
                for ServerPacket(p) in msgs {
                    let Some(s) = &mut self.server else {
                        return;
                    };
                    match s.session.handle(&p) {
                        Ok(evs) => {
                            for e in evs {
                                self.on_session_event(e, now);
                            }
                        }
                        Err(e) => tracing::debug!("eD2k server {}: {e}", s.addr),
                    }
                }
                self.flush_server();
            }
            ConnEvent::ReadError { reason, .. } => self.server_lost(reason, now),
            ConnEvent::Closed { .. } => self.server_lost("closed".into(), now),
            ConnEvent::Sent { .. } => {}
        }
    }

    fn server_lost(&mut self, why: String, now: Instant) {
        if let Some(s) = self.server.take() {
            tracing::warn!("eD2k server {}: {why}", s.addr);
            s.reader.abort();
            self.server_retry.insert(s.addr, now + SERVER_RETRY);
            self.client.set_server(None, 0);
            self.next_source_ask = None;
        }
    }

    fn on_session_event(&mut self, e: SessionEvent, now: Instant) {
        match e {
            SessionEvent::Connected { id, .. } => {
                let (addr, low) = match &self.server {
                    Some(s) => (s.addr, s.session.is_low_id()),
                    None => return,
                };
                tracing::info!(
                    "logged into eD2k server {addr} with a {} id",
                    if low { "low" } else { "high" }
                );
                let ip = match addr {
                    SocketAddr::V4(a) => *a.ip(),
                    SocketAddr::V6(a) => a
                        .ip()
                        .to_ipv4_mapped()
                        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
                };
                self.client.set_server(Some((ip, addr.port())), id);
                self.offer_files();
                self.ask_sources(now);
            }
            SessionEvent::Sources {
                file,
                reachable,
                low_ids,
            } => {
                tracing::debug!(
                    "server: {} sources for {file} ({} low id)",
                    reachable.len(),
                    low_ids.len()
                );
                for a in reachable {
                    self.add_known(SocketAddr::V4(a));
                }
                if let Some(s) = &mut self.server {
                    for id in low_ids {
                        s.session.callback(id);
                    }
                }
                self.dial_more(now);
            }
            SessionEvent::CallbackRequested { addr } => {
                let addr = SocketAddr::V4(addr);
                if self.cfg.policy.allows(addr.ip()) && !self.banned.contains(&addr.ip()) {
                    tokio::spawn(conn::dial(
                        self.cfg.policy.clone(),
                        self.cfg.listen.map(|a| a.ip()),
                        addr,
                        self.tx.clone(),
                    ));
                }
            }
            SessionEvent::CallbackFailed | SessionEvent::Rejected => {}
            SessionEvent::Message(m) => tracing::debug!("eD2k server says: {}", m.trim()),
        }
    }

    fn offer_files(&mut self) {
        let files: Vec<SharedInfo> = self
            .client
            .file_ids()
            .filter_map(|f| {
                let (name, size) = self.client.file_info(f)?;
                let hash = self.client.file_hash(f)?;
                let p = self.client.progress(f);
                (p.parts_had > 0 || p.complete).then(|| SharedInfo {
                    hash,
                    name: name.to_string(),
                    size,
                    complete: p.complete,
                })
            })
            .collect();
        if let Some(s) = &mut self.server {
            s.session.offer(&files);
        }
        self.flush_server();
    }

    fn ask_sources(&mut self, now: Instant) {
        let wanted: Vec<(Md4Hash, u64)> = self
            .client
            .downloading()
            .filter_map(|f| Some((self.client.file_hash(f)?, self.client.file_info(f)?.1)))
            .collect();
        if let Some(s) = &mut self.server {
            for (h, size) in &wanted {
                s.session.get_sources(*h, *size);
            }
        }
        self.next_source_ask = (!wanted.is_empty()).then_some(now + SOURCE_REASK);
        self.flush_server();
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

/// Logs a packet's opcode, size and (for part requests and part data)
/// its ranges, at trace level: the interop debugging aid.
fn trace_packet(conn: ConnId, dir: &str, p: &Packet) {
    let ranges = match (p.protocol, p.opcode) {
        (weir_ed2k::packet::Protocol::Edonkey, 0x47)
        | (weir_ed2k::packet::Protocol::Edonkey, 0x46)
            if p.payload.len() >= 24 =>
        {
            let w: Vec<u32> = p.payload[16..]
                .chunks_exact(4)
                .take(if p.opcode == 0x47 { 6 } else { 2 })
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            format!(" {w:?}")
        }
        _ => String::new(),
    };
    tracing::trace!(
        "conn {conn} {dir}: {:?} {:#04x} ({} bytes){ranges}",
        p.protocol,
        p.opcode,
        p.payload.len()
    );
}

fn trace_out(conn: ConnId, data: &[bytes::Bytes]) {
    let mut buf = bytes::BytesMut::new();
    for d in data {
        buf.extend_from_slice(d);
    }
    let mut dec = Decoder::new(Limits::CLIENT);
    while let Ok(Some(p)) = dec.decode(&mut buf) {
        trace_packet(conn, "out", &p);
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
