//! The driver task: owns the session, carries out its events, feeds it
//! every input.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};
use weir_bt::wire::{Handshake, Limits as BtLimits};
use weir_core::peers::Source;
use weir_core::storage::{FileLayout, StorageEvent};
use weir_session::{
    AddEd2k, AddTorrent, ConnId, Established, LogLevel, Proto, Session, SessionEvent,
    TransferEvent, TransferId, TransferInfo,
};

use super::mse::MseCtx;
use super::trackers::{Announcer, Standing};
use super::transport::{PeerStream, TransportCtx};
use super::wire::{self, BtDecoder, Ed2kDecoder, Wire, WireError};
use super::{Command, Ed2kSource, EngineConfig, EngineError, SharedSource, Summary, TorrentSource};
use crate::bandwidth::SharedBucket;
use crate::mse::MseStream;
use crate::peerconn::{self, ConnEvent, Outgoing, QueueError, WriteQueue};
use crate::storage::{self, DiskStorage, Opened, TransferSpec};

/// Bytes of control messages one connection may have queued besides the
/// block data its core bounds (`Session::upload_bound`) before it is
/// dropped for not reading.
const CONTROL_ROOM: u64 = 1 << 20;
/// Bytes an eD2k server connection may have queued.
const SERVER_WRITE_LIMIT: u64 = 4 << 20;

/// What the progress display reads, a few times a second.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every transfer.
    pub transfers: Vec<TransferInfo>,
    /// Connections by stage.
    pub peers: usize,
    /// Dials in progress.
    pub dialing: usize,
    /// The engine has stopped.
    pub done: bool,
    /// MSE/PE handshakes by outcome.
    pub mse: crate::mse::MseStats,
    /// The MSE/PE policy now.
    pub encryption: weir_bt::mse::Encryption,
    /// Established connections carried by uTP (the rest: TCP).
    pub utp_peers: usize,
    /// The uTP endpoint's figures (`None`: no uTP).
    pub utp: Option<crate::utp::UtpStats>,
}

/// Inputs of the driver.
#[derive(Debug)]
pub(crate) enum Msg {
    Accepted {
        proto: Proto,
        stream: TcpStream,
        addr: SocketAddr,
    },
    BtRoute {
        info_hash: [u8; 20],
        reply: oneshot::Sender<Option<Handshake>>,
    },
    /// A uTP connection a peer opened (BitTorrent only).
    AcceptedUtp {
        stream: crate::utp::UtpStream,
        addr: SocketAddr,
    },
    Handshaked {
        conn: ConnId,
        /// Boxed: it carries both RC4 states.
        stream: Box<PeerStream>,
        established: Established,
        leftover: BytesMut,
    },
    Failed {
        conn: ConnId,
        error: String,
    },
    Conn(ConnEvent<Wire, WireError>),
    Opened {
        pending: Box<Pending>,
        result: Result<Opened, storage::OpenError>,
    },
    TrackerPeers {
        transfer: TransferId,
        peers: Vec<SocketAddr>,
    },
    RangeChecked {
        transfer: TransferId,
        scheme: weir_core::content::SchemeId,
        unit: u32,
        ok: bool,
    },
    Command(Command),
}

impl From<ConnEvent<Wire, WireError>> for Msg {
    fn from(e: ConnEvent<Wire, WireError>) -> Self {
        Msg::Conn(e)
    }
}

/// A transfer whose storage is being opened.
#[derive(Debug)]
pub(crate) enum Pending {
    Torrent(
        Box<TorrentSource>,
        oneshot::Sender<Result<TransferId, EngineError>>,
    ),
    Ed2k(
        Box<Ed2kSource>,
        oneshot::Sender<Result<TransferId, EngineError>>,
    ),
    Share(
        Box<SharedSource>,
        oneshot::Sender<Result<TransferId, EngineError>>,
    ),
}

/// What a connection's tasks are started with (see `Driver::spawn_io`).
struct Io {
    conn: ConnId,
    proto: Proto,
    leftover: BytesMut,
    pieces: Option<u32>,
    down: crate::bandwidth::Limiter,
    up: crate::bandwidth::Limiter,
    wrx: peerconn::WriteRx,
}

struct ConnState {
    proto: Proto,
    writer: WriteQueue,
    reader: JoinHandle<()>,
    writer_task: JoinHandle<()>,
}

/// A transfer's storage: opened and waiting for its digests, or running.
enum Store {
    Waiting(Box<Opened>),
    Running(DiskStorage),
}

/// Storage openings (journal reads, a recheck's hashing) that run at once
/// on blocking threads: a daemon restarting with 1,000 transfers opened
/// them all together and tokio started 512 threads for it; more than a
/// few at once only makes the disk seek.
const OPENS_AT_ONCE: usize = 4;
/// Log target of a transfer's milestones (its first piece verified, every
/// piece verified): hidden under the default filter, shown by
/// `RUST_LOG=info`; `weir bench magnet` times them.
const MILESTONE: &str = "milestone";

struct Driver {
    cfg: EngineConfig,
    session: Session,
    /// Everything but what connections read: always heard.
    tx: mpsc::Sender<Msg>,
    /// What connections' readers decode: left unread while storage is
    /// behind (see `run`), so the peers' data waits in their sockets.
    data_tx: mpsc::Sender<Msg>,
    storage_tx: mpsc::UnboundedSender<(TransferId, StorageEvent)>,
    conns: HashMap<ConnId, ConnState>,
    /// Dials and handshakes in progress.
    pending: HashMap<ConnId, AbortHandle>,
    stores: HashMap<TransferId, Store>,
    forwarders: HashMap<TransferId, JoinHandle<()>>,
    announcers: HashMap<TransferId, Announcer>,
    progress: watch::Sender<Snapshot>,
    started: Instant,
    last_complete: Option<Instant>,
    /// Transfers whose first verified piece was logged ([`MILESTONE`]).
    first_piece_said: std::collections::HashSet<TransferId>,
    fatal: Option<EngineError>,
    accept_tasks: Vec<JoinHandle<()>>,
    /// Bound listeners not accepting yet (see `EngineConfig::accept_at_start`).
    listeners: Vec<(Proto, TcpListener)>,
    stopping: bool,
    /// Transfers whose storage is being opened (not in the session yet).
    opening: usize,
    /// Storage openings running at once ([`OPENS_AT_ONCE`]).
    open_slots: Arc<tokio::sync::Semaphore>,
    /// Each transfer's own (download, upload) buckets, made with its
    /// first connection (unlimited until capped: no refill task).
    transfer_caps: HashMap<TransferId, (Arc<SharedBucket>, Arc<SharedBucket>)>,
    /// MSE/PE: the policy, the session's SKEYs, counts.
    mse: MseCtx,
    /// The DHT node and the UDP socket (`engine/dht.rs`, `engine/udp.rs`).
    dht: Option<super::dht::DhtGlue>,
    /// The UDP socket when it runs without a DHT (for uTP): held, its
    /// tasks stop when it is dropped.
    _udp: Option<super::udp::Udp>,
    /// Which transports connections may use, and uTP's endpoint.
    transports: TransportCtx,
    /// Established connections carried by uTP.
    over_utp: std::collections::HashSet<ConnId>,
    /// Local Service Discovery (`engine/lsd.rs`), if on.
    lsd: Option<super::lsd::LsdGlue>,
}

pub(super) fn spawn(
    cfg: EngineConfig,
    bt: Option<TcpListener>,
    ed2k: Option<TcpListener>,
    dht: Option<super::dht::DhtGlue>,
    udp: Option<super::udp::Udp>,
    utp: Option<crate::utp::Utp>,
    lsd: Option<super::lsd::LsdGlue>,
) -> (
    mpsc::Sender<Msg>,
    watch::Receiver<Snapshot>,
    JoinHandle<Result<Summary, EngineError>>,
) {
    // Small: each message may carry a 512 KiB read, and while storage is
    // behind the readers must stop soon after the driver does.
    let (data_tx, data_rx) = mpsc::channel::<Msg>(64);
    // Commands, handshakes, storage openings, writers' reports: never
    // held back by the storage backlog (a stop is heard on a full disk).
    let (tx, rx) = mpsc::channel::<Msg>(64);
    let (storage_tx, storage_rx) = mpsc::unbounded_channel();
    let (progress, progress_rx) = watch::channel(Snapshot::default());
    let listeners: Vec<(Proto, TcpListener)> = [(Proto::Bt, bt), (Proto::Ed2k, ed2k)]
        .into_iter()
        .filter_map(|(p, l)| l.map(|l| (p, l)))
        .collect();
    let session = Session::new(cfg.session.clone());
    let mse = MseCtx::new(cfg.encryption, cfg.handshake_timeout);
    let transports = TransportCtx::new(cfg.transports, utp);
    let mut driver = Driver {
        cfg,
        session,
        tx: tx.clone(),
        data_tx,
        storage_tx,
        conns: HashMap::new(),
        pending: HashMap::new(),
        stores: HashMap::new(),
        forwarders: HashMap::new(),
        announcers: HashMap::new(),
        progress,
        started: Instant::now(),
        last_complete: None,
        first_piece_said: Default::default(),
        fatal: None,
        accept_tasks: Vec::new(),
        listeners,
        stopping: false,
        opening: 0,
        open_slots: Arc::new(tokio::sync::Semaphore::new(OPENS_AT_ONCE)),
        transfer_caps: HashMap::new(),
        mse,
        dht,
        _udp: udp,
        transports,
        over_utp: std::collections::HashSet::new(),
        lsd,
    };
    if driver.cfg.accept_at_start {
        driver.start_accepting();
    }
    let task = tokio::spawn(driver.run(rx, data_rx, storage_rx));
    (tx, progress_rx, task)
}

impl Driver {
    /// Starts the accept loops of the bound listeners (once).
    fn start_accepting(&mut self) {
        if let (true, Some(utp)) = (self.accept_tasks.is_empty(), &self.transports.utp)
            && self.transports.allowed.utp
            && self.cfg.bt_listen.is_some()
        {
            let (utp, tx) = (utp.clone(), self.tx.clone());
            self.accept_tasks.push(tokio::spawn(async move {
                while let Some(stream) = utp.accept().await {
                    let addr = stream.peer_addr();
                    if tx.send(Msg::AcceptedUtp { stream, addr }).await.is_err() {
                        return;
                    }
                }
            }));
        }
        for (proto, l) in std::mem::take(&mut self.listeners) {
            let tx = self.tx.clone();
            let policy = self.cfg.session.policy.clone();
            self.accept_tasks.push(tokio::spawn(async move {
                crate::net::accept_loop(&policy, &l, |stream, addr| {
                    let tx = tx.clone();
                    async move {
                        tx.send(Msg::Accepted {
                            proto,
                            stream,
                            addr,
                        })
                        .await
                        .is_ok()
                    }
                })
                .await;
            }));
        }
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut data_rx: mpsc::Receiver<Msg>,
        mut storage_rx: mpsc::UnboundedReceiver<(TransferId, StorageEvent)>,
    ) -> Result<Summary, EngineError> {
        let mut report = tokio::time::interval(self.cfg.report_every);
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut added_any = false;
        loop {
            if self.stopping || self.fatal.is_some() {
                break;
            }
            if added_any && self.opening == 0 && !self.cfg.keep_running && self.session.is_done() {
                break;
            }
            let deadline = self
                .session
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            // Hashing or the disk behind the network (or full): leave the
            // peers' messages unread (TCP then slows them) until the
            // workers catch up; each piece they finish wakes this loop.
            // Everything else is still heard.
            let backlogged = self.backlog() > storage::BACKLOG_LIMIT;
            let dht_wake = self
                .dht
                .as_ref()
                .map(|d| tokio::time::Instant::from_std(d.poll_timeout()));
            let lsd_wake = self
                .lsd
                .as_ref()
                .and_then(super::lsd::LsdGlue::poll_timeout)
                .map(tokio::time::Instant::from_std);
            tokio::select! {
                biased;
                Some((t, ev)) = storage_rx.recv() => {
                    let now = Instant::now();
                    self.session.storage(t, ev, now);
                    while let Ok((t, ev)) = storage_rx.try_recv() {
                        self.session.storage(t, ev, now);
                    }
                }
                m = rx.recv() => match m {
                    Some(Msg::Command(Command::Stop)) | None => self.stopping = true,
                    Some(m) => {
                        if matches!(m, Msg::Command(Command::AddTorrent(..) | Command::AddEd2k(..) | Command::Share(..))) {
                            added_any = true;
                        }
                        self.handle(m);
                    }
                },
                Some(m) = data_rx.recv(), if !backlogged => self.handle(m),
                _ = sleep_until(deadline) => self.session.handle_timeout(Instant::now()),
                Some(batch) = dht_recv(&mut self.dht) => {
                    if let Some(d) = &mut self.dht {
                        d.on_datagrams(batch, &mut self.session);
                    }
                }
                _ = sleep_until(dht_wake) => {
                    if let Some(d) = &mut self.dht {
                        d.handle_timeout(&mut self.session);
                    }
                }
                Some((group, from, data)) = lsd_recv(&mut self.lsd) => {
                    if let Some(l) = &mut self.lsd {
                        l.on_datagram(group, from, &data, &mut self.session);
                    }
                }
                _ = sleep_until(lsd_wake) => {
                    if let Some(l) = &mut self.lsd {
                        l.handle_timeout(&mut self.session);
                    }
                }
                _ = report.tick() => self.publish(false),
            }
            self.carry_out();
        }
        self.shutdown().await;
        let now = Instant::now();
        let transfers = self.infos(now);
        if let Some(e) = self.fatal.take() {
            return Err(e);
        }
        Ok(Summary {
            transfers,
            elapsed: self.last_complete.unwrap_or(now) - self.started,
        })
    }

    fn backlog(&self) -> u64 {
        self.stores
            .values()
            .map(|s| match s {
                Store::Running(d) => d.backlog(),
                Store::Waiting(_) => 0,
            })
            .sum()
    }

    fn handle(&mut self, m: Msg) {
        let now = Instant::now();
        match m {
            Msg::Accepted {
                proto,
                stream,
                addr,
            } => match self.session.incoming(proto, addr, now) {
                Ok(conn) => match proto {
                    Proto::Bt if !self.transports.allowed.tcp => {
                        tracing::debug!("TCP connection from {addr} refused: uTP only");
                        self.session.dial_failed(conn, "TCP is not allowed", now);
                    }
                    Proto::Bt => {
                        let _ = stream.set_nodelay(true);
                        let t = tokio::spawn(wire::accept_bt(
                            conn,
                            stream,
                            self.mse.clone(),
                            self.tx.clone(),
                        ));
                        self.pending.insert(conn, t.abort_handle());
                    }
                    _ => {
                        let _ = stream.set_nodelay(true);
                        let local_ip = match stream.local_addr().map(|a| a.ip()) {
                            Ok(std::net::IpAddr::V4(v4)) => Some(v4),
                            Ok(std::net::IpAddr::V6(v6)) => v6.to_ipv4_mapped(),
                            Err(_) => None,
                        };
                        self.on_handshaked(
                            conn,
                            PeerStream::Tcp(MseStream::plain(stream, bytes::Bytes::new())),
                            Established::Ed2k { local_ip },
                            BytesMut::new(),
                            now,
                        );
                    }
                },
                Err(e) => tracing::debug!("{proto} connection from {addr} refused: {e}"),
            },
            Msg::AcceptedUtp { stream, addr } => {
                match self.session.incoming(Proto::Bt, addr, now) {
                    Ok(conn) => {
                        let t = tokio::spawn(wire::accept_bt(
                            conn,
                            stream,
                            self.mse.clone(),
                            self.tx.clone(),
                        ));
                        self.pending.insert(conn, t.abort_handle());
                    }
                    Err(e) => tracing::debug!("uTP connection from {addr} refused: {e}"),
                }
            }
            Msg::BtRoute { info_hash, reply } => {
                let _ = reply.send(self.session.bt_route(&info_hash));
            }
            Msg::Handshaked {
                conn,
                stream,
                established,
                leftover,
            } => {
                self.pending.remove(&conn);
                self.on_handshaked(conn, *stream, established, leftover, now);
            }
            Msg::Failed { conn, error } => {
                self.pending.remove(&conn);
                tracing::debug!("connection {conn}: {error}");
                self.session.dial_failed(conn, &error, now);
            }
            Msg::Conn(ev) => self.on_conn_event(ev, now),
            Msg::Opened { pending, result } => self.on_opened(*pending, result, now),
            Msg::TrackerPeers { transfer, peers } => {
                self.session
                    .add_peers(transfer, Proto::Bt, &peers, Source::Tracker, now);
            }
            Msg::RangeChecked {
                transfer,
                scheme,
                unit,
                ok,
            } => self.session.range_checked(transfer, scheme, unit, ok, now),
            Msg::Command(c) => self.on_command(c, now),
        }
    }

    fn on_handshaked(
        &mut self,
        conn: ConnId,
        stream: PeerStream,
        established: Established,
        leftover: BytesMut,
        now: Instant,
    ) {
        let proto = match &established {
            Established::Bt { .. } => Proto::Bt,
            Established::Ed2k { .. } => Proto::Ed2k,
            Established::Ed2kServer => Proto::Ed2kServer,
        };
        let their_id = match &established {
            Established::Bt { theirs, .. } => Some(theirs.peer_id),
            _ => None,
        };
        let pieces = match &established {
            Established::Bt { theirs, .. } => self
                .session
                .find_torrent(&theirs.info_hash)
                .and_then(|id| self.session.torrent(id))
                .map(|t| t.geometry().piece_count()),
            _ => None,
        };
        if let Err(e) = self.session.established(conn, established, now) {
            tracing::debug!("connection {conn} refused: {e}");
            return;
        }
        let limit = if proto == Proto::Ed2kServer {
            SERVER_WRITE_LIMIT
        } else {
            self.session.upload_bound(proto) + CONTROL_ROOM
        };
        let (writer, wrx) = peerconn::write_queue(limit);
        let (down, up) = if proto == Proto::Ed2kServer {
            (
                crate::bandwidth::Limiter::unlimited(),
                crate::bandwidth::Limiter::unlimited(),
            )
        } else if let Some(t) = self.session.conn_transfer(conn) {
            let (d, u) = self.caps_of(t);
            (self.cfg.down.with(d), self.cfg.up.with(u))
        } else {
            (self.cfg.down.clone(), self.cfg.up.clone())
        };
        let io = Io {
            conn,
            proto,
            leftover,
            pieces,
            down,
            up,
            wrx,
        };
        if let PeerStream::Utp(s) = &stream {
            self.over_utp.insert(conn);
            // Large datagrams on loopback, toward weir only (see
            // `UtpStream::set_max_packet_size`).
            if their_id.is_some_and(|id| id.starts_with(b"-WR"))
                && s.get_ref().peer_addr().ip().is_loopback()
            {
                s.get_ref().set_max_packet_size(crate::utp::LOOPBACK_PACKET);
            }
        }
        let (reader, writer_task) = match stream {
            PeerStream::Tcp(s) => {
                let (rd, wr) = s.into_split();
                self.spawn_io(io, rd, wr)
            }
            PeerStream::Utp(s) => {
                let (rd, wr) = tokio::io::split(s);
                self.spawn_io(io, rd, wr)
            }
        };
        self.conns.insert(
            conn,
            ConnState {
                proto,
                writer,
                reader,
                writer_task,
            },
        );
    }

    /// A connection's reader and writer tasks over its two halves.
    fn spawn_io<R, W>(&self, io: Io, rd: R, wr: W) -> (JoinHandle<()>, JoinHandle<()>)
    where
        R: peerconn::PeerRead,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Io {
            conn,
            proto,
            leftover,
            pieces,
            down,
            up,
            wrx,
        } = io;
        let reader = match proto {
            Proto::Bt => tokio::spawn(peerconn::reader(
                conn,
                rd,
                leftover,
                BtDecoder(BtLimits::new(pieces.unwrap_or(0))),
                down,
                self.data_tx.clone(),
            )),
            Proto::Ed2k => tokio::spawn(peerconn::reader(
                conn,
                rd,
                leftover,
                Ed2kDecoder::peer(),
                down,
                self.data_tx.clone(),
            )),
            Proto::Ed2kServer => tokio::spawn(peerconn::reader(
                conn,
                rd,
                BytesMut::with_capacity(64 << 10),
                Ed2kDecoder::server(),
                down,
                self.data_tx.clone(),
            )),
        };
        let writer_task = tokio::spawn(peerconn::writer::<Wire, WireError, Msg>(
            conn,
            wr,
            wrx,
            up,
            self.tx.clone(),
        ));
        (reader, writer_task)
    }

    fn on_conn_event(&mut self, ev: ConnEvent<Wire, WireError>, now: Instant) {
        match ev {
            ConnEvent::Messages { conn, msgs, .. } => {
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                match c.proto {
                    Proto::Bt => {
                        let m = msgs
                            .into_iter()
                            .filter_map(|w| match w {
                                Wire::Bt(m) => Some(m),
                                Wire::Ed2k(_) => None,
                            })
                            .collect();
                        self.session.bt_messages(conn, m, now);
                    }
                    _ => {
                        let p = msgs
                            .into_iter()
                            .filter_map(|w| match w {
                                Wire::Ed2k(p) => Some(p),
                                Wire::Bt(_) => None,
                            })
                            .collect();
                        self.session.ed2k_packets(conn, p, now);
                    }
                }
            }
            ConnEvent::ReadError { conn, error } => {
                tracing::debug!("connection {conn}: {error}; closed");
                self.drop_conn(conn, false);
                self.session.closed(conn, Some(error.to_string()), now);
            }
            ConnEvent::Closed { conn } => {
                self.drop_conn(conn, false);
                self.session.closed(conn, None, now);
            }
            ConnEvent::Sent { conn, bytes } => self.session.sent(conn, bytes, now),
        }
    }

    /// Forgets a connection's tasks: the writer flushes for a bounded time
    /// (not at all when `now`), the reader stops.
    fn drop_conn(&mut self, conn: ConnId, now: bool) {
        if let Some(a) = self.pending.remove(&conn) {
            a.abort();
        }
        self.over_utp.remove(&conn);
        if let Some(c) = self.conns.remove(&conn) {
            c.reader.abort();
            drop(c.writer);
            if now {
                c.writer_task.abort();
            } else {
                peerconn::linger(c.writer_task);
            }
        }
    }

    /// Carries out everything the session asked for.
    fn carry_out(&mut self) {
        while let Some(ev) = self.session.poll_event() {
            let now = Instant::now();
            match ev {
                SessionEvent::OpenStorage {
                    transfer,
                    digests,
                    resumed,
                } => self.start_storage(transfer, digests, &resumed),
                SessionEvent::Storage { transfer, op } => match self.stores.get(&transfer) {
                    Some(Store::Running(d)) => d.submit(op),
                    _ => tracing::debug!("storage op for {transfer} before its storage opened"),
                },
                SessionEvent::Dial {
                    conn,
                    proto,
                    addr,
                    hello,
                } => {
                    let local = match proto {
                        Proto::Bt => self.cfg.bt_listen.map(|a| a.ip()),
                        _ => self.cfg.ed2k_listen.map(|a| a.ip()),
                    };
                    let t = tokio::spawn(wire::dial(
                        conn,
                        self.cfg.session.policy.clone(),
                        local,
                        addr,
                        hello,
                        self.cfg.handshake_timeout,
                        self.mse.clone(),
                        self.transports.clone(),
                        self.tx.clone(),
                    ));
                    self.pending.insert(conn, t.abort_handle());
                }
                SessionEvent::Send {
                    conn,
                    data,
                    payload,
                } => {
                    let Some(c) = self.conns.get(&conn) else {
                        continue;
                    };
                    match c.writer.send(Outgoing { data, payload }) {
                        Ok(()) => {}
                        Err(e @ QueueError::Full { .. }) => {
                            tracing::info!("connection {conn}: {e}; dropped");
                            self.drop_conn(conn, true);
                            self.session.closed(conn, Some(e.to_string()), now);
                        }
                        Err(QueueError::Closed) => {}
                    }
                }
                SessionEvent::Close { conn, reason } => {
                    if reason == weir_ed2k::transfer::SELF_CONNECTION {
                        // Never silent: a source that is us, or another
                        // client with our hash, would stall a download.
                        tracing::warn!(
                            "eD2k connection {conn}: the peer presents our own user hash: it is \
                             this client, or another one given the same WEIR_ED2K_USER_HASH \
                             (unset it so each listen port gets its own); not using it"
                        );
                    }
                    tracing::debug!("connection {conn}: {reason}; disconnected");
                    self.drop_conn(conn, false);
                }
                SessionEvent::CheckRange {
                    transfer,
                    scheme,
                    unit,
                    offset,
                    len,
                    digest,
                } => match self.stores.get(&transfer) {
                    Some(Store::Running(d)) => {
                        let tx = self.tx.clone();
                        d.check_range(offset, len, digest, move |ok| {
                            let _ = tx.blocking_send(Msg::RangeChecked {
                                transfer,
                                scheme,
                                unit,
                                ok,
                            });
                        });
                    }
                    _ => tracing::debug!("range check for {transfer} before its storage opened"),
                },
                SessionEvent::Banned { ip, reason } => tracing::warn!("banning {ip}: {reason}"),
                SessionEvent::Transfer { transfer, event } => {
                    self.on_transfer_event(transfer, event, now)
                }
                SessionEvent::Log { level, message } => match level {
                    LogLevel::Debug => tracing::debug!("{message}"),
                    LogLevel::Info => tracing::info!("{message}"),
                    LogLevel::Warn => tracing::warn!("{message}"),
                },
            }
        }
    }

    fn on_transfer_event(&mut self, id: TransferId, event: TransferEvent, now: Instant) {
        match event {
            TransferEvent::Complete => {
                self.last_complete = Some(now);
                // Milestones (here and the first piece below) are timed by
                // `weir bench magnet`; off by default (RUST_LOG=info shows them).
                tracing::info!(target: MILESTONE, "{}: every piece verified", self.transfer_name(id, now));
                self.publish(false);
            }
            TransferEvent::Failed(error) => {
                let name = self
                    .session
                    .info(id, now)
                    .map_or_else(|| id.to_string(), |i| i.name);
                tracing::error!("{name}: {error}");
                if !self.cfg.keep_running {
                    self.fatal = Some(EngineError::Transfer { name, error });
                }
            }
            TransferEvent::Checked => {
                self.start_trackers(id);
                if let Some(d) = &mut self.dht {
                    d.add_torrent(id, &mut self.session);
                }
                if let Some(l) = &mut self.lsd {
                    l.add_torrent(id, &mut self.session);
                }
                self.publish(false);
            }
            TransferEvent::Verified(_) => {
                // The first this run (a piece verified at the start-up
                // check counts too: it is data there).
                if self.first_piece_said.insert(id) {
                    tracing::info!(target: MILESTONE, "{}: first piece verified", self.transfer_name(id, now));
                }
            }
        }
    }

    /// A transfer's name for the log (its id once it is gone).
    fn transfer_name(&self, id: TransferId, now: Instant) -> String {
        self.session
            .info(id, now)
            .map_or_else(|| id.to_string(), |i| i.name)
    }

    fn start_trackers(&mut self, id: TransferId) {
        if !self.cfg.use_trackers || self.announcers.contains_key(&id) {
            return;
        }
        let Some(t) = self.session.torrent(id) else {
            return;
        };
        let Some(meta) = self.session.metainfo(id) else {
            return;
        };
        let standing = Standing {
            left: t.stats(Instant::now()).bytes_left,
            complete: t.is_complete(),
            ..Standing::default()
        };
        let me = super::trackers::Announcing {
            policy: self.cfg.session.policy.clone(),
            peer_id: self.cfg.session.peer_id,
            port: self.cfg.session.bt_port.unwrap_or(0),
            local_ip: self.cfg.bt_listen.map(|a| a.ip()),
        };
        if let Some(a) = Announcer::start(id, &meta, &me, standing, self.tx.clone()) {
            self.announcers.insert(id, a);
        }
    }

    fn on_command(&mut self, c: Command, now: Instant) {
        match c {
            Command::AddTorrent(src, reply) => {
                // Paths from the torrent stay below the download directory,
                // the torrent's folder included: it is opened as part of
                // the layout (a link there is refused), never as the root.
                let (root, layout) = (src.dir.clone(), super::spec::layout(&src.meta));
                let geometry = weir_core::geometry::Geometry::new(
                    src.meta.info.total_length(),
                    src.meta.info.piece_length,
                    weir_bt::wire::BLOCK_LEN,
                )
                .expect("metainfo guarantees a valid geometry");
                let spec = TransferSpec {
                    dir: root,
                    layout,
                    geometry,
                    digests: Some(weir_bt::torrent::Torrent::digests(&src.meta)),
                    id: src.meta.info_hash.to_vec(),
                    stem: torrent_stem(&src.meta.info_hash),
                    name: src.meta.info.name.clone(),
                };
                let mut opts = src.open;
                opts.workers = self.cfg.storage_workers;
                self.open_storage(Pending::Torrent(src, reply), spec, opts, None);
            }
            Command::AddEd2k(src, reply) if self.session.ed2k_joins(&src.link).is_some() => {
                // A file of a torrent here: it joins that transfer and its
                // storage (nothing of its own to open).
                let parts = weir_ed2k::geometry(src.link.size).piece_count();
                let r = self.session.add_ed2k(
                    AddEd2k {
                        link: src.link.clone(),
                        had: weir_core::bitfield::Bitfield::new(parts),
                        check: weir_core::bitfield::Bitfield::new(parts),
                        partial: Vec::new(),
                        peers: src.peers.clone(),
                        paused: false,
                        seed: src.seed,
                    },
                    now,
                );
                let _ = reply.send(r.map_err(EngineError::Add));
            }
            Command::AddEd2k(src, reply) => {
                let l = &src.link;
                let spec = TransferSpec {
                    dir: src.dir.clone(),
                    layout: FileLayout::new([(std::path::PathBuf::from(&l.name), l.size)]),
                    geometry: weir_ed2k::geometry(l.size),
                    digests: super::spec::link_digests(l),
                    id: l.hash.0.to_vec(),
                    stem: super::spec::journal_stem(&l.hash),
                    name: l.name.clone(),
                };
                let mut opts = src.open;
                opts.workers = self.cfg.storage_workers;
                // Without the part hashes, a file already there proves
                // itself by its file hash.
                let (size, hash) = (l.size, l.hash);
                let derive: storage::DeriveDigests =
                    Box::new(move |r| super::spec::derive_digests(r, size, hash));
                self.open_storage(Pending::Ed2k(src, reply), spec, opts, Some(derive));
            }
            Command::Share(src, reply) => {
                let h = &src.hashes;
                let (dir, name) = split_path(&src.path);
                let spec = TransferSpec {
                    dir,
                    layout: FileLayout::new([(std::path::PathBuf::from(&name), h.size)]),
                    geometry: weir_ed2k::geometry(h.size),
                    digests: Some(h.part_digests().into()),
                    id: h.file_hash.0.to_vec(),
                    stem: super::spec::journal_stem(&h.file_hash),
                    name,
                };
                // Hashed by the caller just now; shared as it is, read-only.
                let opts = storage::OpenOptions {
                    journal: false,
                    verified_by_caller: true,
                    workers: self.cfg.storage_workers,
                    ..storage::OpenOptions::seed()
                };
                self.open_storage(Pending::Share(src, reply), spec, opts, None);
            }
            Command::AddServer(addr) => self.session.add_ed2k_server(addr, now),
            Command::Pause(id) => self.session.pause(id, now),
            Command::Resume(id) => self.session.resume(id, now),
            Command::Remove(id, reply) => {
                let ok = self.remove(id, now, None);
                let _ = reply.send(ok);
            }
            Command::RemoveClosed(id, reply) => {
                self.remove(id, now, Some(reply));
            }
            Command::Snapshot(reply) => {
                let _ = reply.send(self.infos(now));
            }
            Command::StartAccepting => self.start_accepting(),
            Command::SetEncryption(p) => {
                self.mse.policy = p;
                self.publish(false);
            }
            Command::Pieces(id, reply) => {
                let had = self.session.torrent(id).map(|t| t.content().had().clone());
                let _ = reply.send(had);
            }
            Command::SetCaps { id, down, up } => {
                let (d, u) = self.caps_of(id);
                d.set_rate_live(down);
                u.set_rate_live(up);
            }
            Command::BtPeers(id, reply) => {
                let _ = reply.send(self.session.bt_peers(id, now));
            }
            Command::Reannounce(id) => {
                if let Some(a) = self.announcers.get(&id) {
                    a.reannounce();
                }
            }
            Command::DhtWatch(info_hash, reply) => {
                let r = match &mut self.dht {
                    Some(d) => d.watch(info_hash, &mut self.session),
                    None => Err(super::DhtError::Off),
                };
                let _ = reply.send(r);
            }
            Command::DhtAddNodes(nodes) => {
                if let Some(d) = &mut self.dht {
                    d.add_nodes(&nodes, &mut self.session);
                }
            }
            Command::DhtStatus(reply) => {
                let _ = reply.send(self.dht.as_ref().map(super::dht::DhtGlue::status));
            }
            Command::Stop => self.stopping = true,
        }
    }

    /// A transfer's own buckets.
    fn caps_of(&mut self, t: TransferId) -> (Arc<SharedBucket>, Arc<SharedBucket>) {
        self.transfer_caps
            .entry(t)
            .or_insert_with(|| (crate::bandwidth::bucket(0), crate::bandwidth::bucket(0)))
            .clone()
    }

    /// Forgets a transfer, closes its storage on a blocking thread and
    /// stops its trackers; `closed` (if any) is answered once the storage
    /// is closed.
    fn remove(
        &mut self,
        id: TransferId,
        now: Instant,
        closed: Option<oneshot::Sender<bool>>,
    ) -> bool {
        if let Some(m) = self.session.metainfo(id) {
            self.mse.torrent_removed(&m.info_hash);
        }
        let ok = self.session.remove(id, now);
        if let Some(l) = &mut self.lsd {
            l.remove_torrent(id);
        }
        self.transfer_caps.remove(&id);
        let store = self.stores.remove(&id);
        if let Some(f) = self.forwarders.remove(&id) {
            f.abort();
        }
        if let Some(a) = self.announcers.remove(&id) {
            tokio::spawn(a.stop());
        }
        tokio::task::spawn_blocking(move || {
            if let Some(Store::Running(d)) = store {
                d.close();
            }
            if let Some(reply) = closed {
                let _ = reply.send(ok);
            }
        });
        ok
    }

    /// Opens storage on a blocking thread (existing data is hashed there);
    /// the result comes back as [`Msg::Opened`].
    fn open_storage(
        &mut self,
        pending: Pending,
        spec: TransferSpec,
        opts: storage::OpenOptions,
        derive: Option<storage::DeriveDigests>,
    ) {
        let tx = self.tx.clone();
        self.opening += 1;
        let slots = self.open_slots.clone();
        tokio::spawn(async move {
            // Never closed: it lives as long as the driver.
            let slot = slots.acquire_owned().await.ok();
            let result = tokio::task::spawn_blocking(move || {
                let _slot = slot;
                storage::open(spec, opts, derive)
            })
            .await
            .unwrap_or_else(|e| {
                Err(storage::OpenError::Io {
                    path: std::path::PathBuf::new(),
                    source: std::io::Error::other(e.to_string()),
                })
            });
            let _ = tx
                .send(Msg::Opened {
                    pending: Box::new(pending),
                    result,
                })
                .await;
        });
    }

    fn on_opened(
        &mut self,
        pending: Pending,
        result: Result<Opened, storage::OpenError>,
        now: Instant,
    ) {
        self.opening = self.opening.saturating_sub(1);
        let opened = match result {
            Ok(o) => o,
            Err(e) => {
                let e = EngineError::Open(e);
                match pending {
                    Pending::Torrent(_, r) | Pending::Ed2k(_, r) | Pending::Share(_, r) => {
                        let _ = r.send(Err(e));
                    }
                }
                return;
            }
        };
        let (added, reply) = match pending {
            Pending::Torrent(src, reply) => {
                let r = self.session.add_torrent(
                    AddTorrent {
                        meta: src.meta.clone(),
                        had: opened.had.clone(),
                        check: opened.check.clone(),
                        partial: opened.partial.clone(),
                        peers: src.peers.clone(),
                        paused: src.paused,
                        seed: src.seed,
                        download: src.open.mode == storage::Mode::Download,
                    },
                    now,
                );
                (r, reply)
            }
            Pending::Ed2k(src, reply) => {
                let r = self.session.add_ed2k(
                    AddEd2k {
                        link: src.link.clone(),
                        had: opened.had.clone(),
                        check: opened.check.clone(),
                        partial: opened.partial.clone(),
                        peers: src.peers.clone(),
                        paused: src.paused,
                        seed: src.seed,
                    },
                    now,
                );
                (r, reply)
            }
            Pending::Share(src, reply) => {
                let name = split_path(&src.path).1;
                let r = self.session.share_ed2k(name, &src.hashes, now);
                (r, reply)
            }
        };
        match added {
            Ok(id) => {
                if let Some(m) = self.session.metainfo(id) {
                    self.mse.torrent_added(m.info_hash);
                }
                // Digests known now start the storage at once (the
                // session's OpenStorage event for it is already queued).
                self.stores.insert(id, Store::Waiting(Box::new(opened)));
                let _ = reply.send(Ok(id));
            }
            Err(e) => {
                let _ = reply.send(Err(EngineError::Add(e)));
            }
        }
    }

    fn start_storage(
        &mut self,
        id: TransferId,
        digests: Arc<[weir_core::storage::Digest]>,
        resumed: &[(u32, u32)],
    ) {
        let Some(Store::Waiting(opened)) = self.stores.remove(&id) else {
            tracing::debug!("{id}: storage opened twice or unknown");
            return;
        };
        let (etx, mut erx) = mpsc::unbounded_channel();
        match opened.start(digests, resumed, etx) {
            Ok(d) => {
                self.stores.insert(id, Store::Running(d));
                let fwd = self.storage_tx.clone();
                self.forwarders.insert(
                    id,
                    tokio::spawn(async move {
                        while let Some(ev) = erx.recv().await {
                            if fwd.send((id, ev)).is_err() {
                                return;
                            }
                        }
                    }),
                );
            }
            Err(e) => self.fatal = Some(EngineError::Storage(e)),
        }
    }

    /// Every transfer now, with what only the storage knows.
    fn infos(&self, now: Instant) -> Vec<TransferInfo> {
        self.session
            .transfer_ids()
            .filter_map(|id| self.session.info(id, now))
            .map(|mut t| {
                if let Some(Store::Running(d)) = self.stores.get(&t.id) {
                    t.disk_full = d.disk_full();
                }
                t
            })
            .collect()
    }

    fn publish(&mut self, done: bool) {
        let now = Instant::now();
        let transfers = self.infos(now);
        for t in &transfers {
            if let Some(a) = self.announcers.get(&t.id) {
                a.standing.send_if_modified(|s| {
                    let new = Standing {
                        uploaded: t.uploaded.0,
                        downloaded: t.downloaded.0,
                        left: t.size - t.bytes_had.min(t.size),
                        complete: t.complete_at.is_some(),
                        peers: t.peers,
                    };
                    let changed = *s != new;
                    *s = new;
                    changed
                });
            }
        }
        let c = self.session.counts();
        let _ = self.progress.send(Snapshot {
            transfers,
            peers: c.peers,
            dialing: c.dialing,
            done,
            mse: self.mse.stats(),
            encryption: self.mse.policy,
            utp_peers: self.over_utp.len(),
            utp: self.transports.utp.as_ref().map(crate::utp::Utp::stats),
        });
    }

    async fn shutdown(&mut self) {
        for t in self.accept_tasks.drain(..) {
            t.abort();
        }
        if let Some(u) = &self.transports.utp {
            u.shutdown();
        }
        self.publish(true);
        let stops: Vec<Announcer> = self.announcers.drain().map(|(_, a)| a).collect();
        for a in stops {
            a.stop().await;
        }
        let conns: Vec<ConnId> = self
            .conns
            .keys()
            .copied()
            .chain(self.pending.keys().copied())
            .collect();
        for c in conns {
            self.drop_conn(c, false);
        }
        let stores: Vec<DiskStorage> = self
            .stores
            .drain()
            .filter_map(|(_, s)| match s {
                Store::Running(d) => Some(d),
                Store::Waiting(_) => None,
            })
            .collect();
        let _ = tokio::task::spawn_blocking(move || {
            // Every close begins before any is waited for: the journals of
            // a thousand transfers flush together, not one after another.
            let closing: Vec<_> = stores.into_iter().map(DiskStorage::begin_close).collect();
            for c in closing {
                c.wait();
            }
        })
        .await;
        for (_, f) in self.forwarders.drain() {
            f.abort();
        }
        if let Some(d) = self.dht.take() {
            d.close().await;
        }
        self.lsd = None;
    }
}

/// A torrent's storage stem (journal and lock names).
pub(crate) fn torrent_stem(h: &[u8; 20]) -> String {
    h.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn split_path(p: &std::path::Path) -> (std::path::PathBuf, String) {
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(
            || std::path::PathBuf::from("."),
            std::path::Path::to_path_buf,
        );
    let name = p
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    (dir, name)
}

/// The DHT socket's next batch (never, without a DHT).
async fn dht_recv(dht: &mut Option<super::dht::DhtGlue>) -> Option<Vec<super::udp::Datagram>> {
    match dht {
        Some(d) => d.recv().await,
        None => std::future::pending().await,
    }
}

/// LSD's next datagram (never, without LSD).
async fn lsd_recv(lsd: &mut Option<super::lsd::LsdGlue>) -> Option<(usize, SocketAddr, Vec<u8>)> {
    match lsd {
        Some(l) => l.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Msg>();
    let _ = Duration::ZERO;
}
