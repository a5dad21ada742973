//! The driver task: owns the session, carries out its events, feeds it
//! every input.
//!
//! This module holds the task itself (its inputs, its state, the loop
//! that waits on every source and the dispatch of each input) and its
//! stop; the rest is split by what it deals with:
//! - `conns`: listeners, handshaked connections' reader and writer tasks,
//!   their events;
//! - `events`: carrying out the session's events (dials, sends, storage
//!   operations, transfer milestones, trackers);
//! - `commands`: the engine's commands (add, pause, remove, caps, DHT);
//! - `stores`: opening a transfer's storage and starting it;
//! - `report`: the progress snapshot.

mod commands;
mod conns;
mod events;
mod report;
mod stores;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};
use weir_bt::wire::Handshake;
use weir_core::peers::Source;
use weir_core::storage::StorageEvent;
use weir_session::{ConnId, Established, Proto, Session, TransferId};

use super::mse::MseCtx;
use super::trackers::{Announces, Announcing, JobCtx, Outcome};
use super::transport::{PeerStream, TransportCtx};
use super::wire::{self, Wire, WireError};
use super::{Command, Ed2kSource, EngineConfig, EngineError, SharedSource, Summary, TorrentSource};
use crate::bandwidth::SharedBucket;
use crate::mse::MseStream;
use crate::peerconn::ConnEvent;
use crate::storage::{self, Opened};

use conns::ConnState;
pub use report::Snapshot;
use stores::{OPENS_AT_ONCE, Store};

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
    /// An announce ended ([`super::trackers::run_job`]).
    Announced(Box<Outcome>),
    Command(Command),
}

/// A range check's verdict, from a hash worker: sent through its own
/// unbounded channel, so the worker (shared by every transfer of the
/// process) never blocks on the driver. Sent through the bounded `tx`, a
/// verdict found it full while the driver was stopping (no longer reading
/// it, but waiting for every storage to close, which waits for that very
/// worker): the engine hung at "stopping".
struct Checked {
    transfer: TransferId,
    scheme: weir_core::content::SchemeId,
    unit: u32,
    ok: bool,
}

impl From<ConnEvent<Wire, WireError>> for Msg {
    fn from(e: ConnEvent<Wire, WireError>) -> Self {
        Msg::Conn(e)
    }
}

/// A transfer whose storage is being opened.
#[derive(Debug)]
pub(crate) enum Pending {
    /// With each piece's priority (resolved from the source's per-file
    /// priorities when the add was asked).
    Torrent(
        Box<TorrentSource>,
        oneshot::Sender<Result<TransferId, EngineError>>,
        Option<Arc<[weir_core::picker::Priority]>>,
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

struct Driver {
    cfg: EngineConfig,
    session: Session,
    /// Everything but what connections read: always heard.
    tx: mpsc::Sender<Msg>,
    /// What connections' readers decode: left unread while storage is
    /// behind (see `run`), so the peers' data waits in their sockets.
    data_tx: mpsc::Sender<Msg>,
    storage_tx: mpsc::UnboundedSender<(TransferId, StorageEvent)>,
    /// Range checks' verdicts (see [`Checked`]).
    checked_tx: mpsc::UnboundedSender<Checked>,
    conns: HashMap<ConnId, ConnState>,
    /// Dials and handshakes in progress.
    pending: HashMap<ConnId, AbortHandle>,
    stores: HashMap<TransferId, Store>,
    /// Every torrent's tracker announces, scheduled in one place.
    announces: Announces,
    announce_ctx: Arc<JobCtx>,
    /// Announces out, by torrent (ended when it is removed).
    announcing: HashMap<TransferId, tokio::task::AbortHandle>,
    progress: watch::Sender<Snapshot>,
    started: Instant,
    last_complete: Option<Instant>,
    /// Transfers whose first verified piece was logged ([`events::MILESTONE`]).
    first_piece_said: std::collections::HashSet<TransferId>,
    /// When the last snapshot was published (see `Driver::publish_soon`).
    last_publish: Option<Instant>,
    /// What this engine's transfers submitted for writing and have not
    /// written (their storage counts it as it goes).
    backlog: storage::Backlog,
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
    let (checked_tx, checked_rx) = mpsc::unbounded_channel();
    let (progress, progress_rx) = watch::channel(Snapshot::default());
    let listeners: Vec<(Proto, TcpListener)> = [(Proto::Bt, bt), (Proto::Ed2k, ed2k)]
        .into_iter()
        .filter_map(|(p, l)| l.map(|l| (p, l)))
        .collect();
    let session = Session::new(cfg.session.clone());
    let mse = MseCtx::new(cfg.encryption, cfg.handshake_timeout);
    let transports = TransportCtx::new(cfg.transports, utp);
    let me = Announcing {
        policy: cfg.session.policy.clone(),
        peer_id: cfg.session.peer_id,
        port: cfg.session.bt_port.unwrap_or(0),
        local_ip: cfg.bt_listen.map(|a| a.ip()),
    };
    let announce_ctx = Arc::new(JobCtx::new(&me, tx.clone()));
    let mut driver = Driver {
        cfg,
        session,
        tx: tx.clone(),
        data_tx,
        storage_tx,
        checked_tx,
        conns: HashMap::new(),
        pending: HashMap::new(),
        stores: HashMap::new(),
        announces: Announces::new(me),
        announce_ctx,
        announcing: HashMap::new(),
        progress,
        started: Instant::now(),
        last_complete: None,
        first_piece_said: Default::default(),
        last_publish: None,
        backlog: storage::Backlog::default(),
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
    let task = tokio::spawn(driver.run(rx, data_rx, storage_rx, checked_rx));
    (tx, progress_rx, task)
}

impl Driver {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut data_rx: mpsc::Receiver<Msg>,
        mut storage_rx: mpsc::UnboundedReceiver<(TransferId, StorageEvent)>,
        mut checked_rx: mpsc::UnboundedReceiver<Checked>,
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
            let backlogged = self.backlog.get() > storage::BACKLOG_LIMIT;
            let backlog = self.backlog.clone();
            let dht_wake = self
                .dht
                .as_ref()
                .map(|d| tokio::time::Instant::from_std(d.poll_timeout()));
            let lsd_wake = self
                .lsd
                .as_ref()
                .and_then(super::lsd::LsdGlue::poll_timeout)
                .map(tokio::time::Instant::from_std);
            let announce_wake = self
                .announces
                .poll_timeout()
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
                Some(c) = checked_rx.recv() => {
                    self.session
                        .range_checked(c.transfer, c.scheme, c.unit, c.ok, Instant::now());
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
                // The writers caught up: read the connections again.
                () = backlog.drained(), if backlogged => {}
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
                _ = sleep_until(announce_wake) => self.start_announces(),
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
            transfers: transfers.to_vec(),
            elapsed: self.last_complete.unwrap_or(now) - self.started,
        })
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
            Msg::Announced(out) => {
                self.announcing.remove(&out.transfer);
                self.announces.finish(*out, now);
            }
            Msg::Command(c) => self.on_command(c, now),
        }
    }

    async fn shutdown(&mut self) {
        for t in self.accept_tasks.drain(..) {
            t.abort();
        }
        if let Some(u) = &self.transports.utp {
            u.shutdown();
        }
        self.publish(true);
        // Every torrent's `stopped`, many at a time and all within the stop
        // timeout: one after another, a tracker that never answers held a
        // daemon of N torrents N times that long.
        for (_, h) in self.announcing.drain() {
            h.abort();
        }
        let stops = self.announces.remove_all().into_iter().map(|(_, s)| s);
        super::trackers::stop_all(stops.collect(), self.announce_ctx.clone()).await;
        let conns: Vec<ConnId> = self
            .conns
            .keys()
            .copied()
            .chain(self.pending.keys().copied())
            .collect();
        for c in conns {
            self.drop_conn(c, false);
        }
        let stores: Vec<Store> = self.stores.drain().map(|(_, s)| s).collect();
        let _ = tokio::task::spawn_blocking(move || {
            // Every close begins before any is waited for: the journals of
            // a thousand transfers flush together, not one after another.
            // The rest (waiting, parked) only let their locks go.
            let closing: Vec<_> = stores
                .into_iter()
                .filter_map(|s| match s {
                    Store::Running(d) => Some(d.begin_close()),
                    Store::Waiting(_) | Store::Parked(_) => None,
                })
                .collect();
            for c in closing {
                c.wait();
            }
        })
        .await;
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
