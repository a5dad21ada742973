//! Nodes: one host each, running a `weir_session::Session` with its
//! transfers (torrents, eD2k shares and downloads), their in-memory
//! storage, the node's bucket chains and its connections, driven as the
//! runtime drives a session: after every input the session's events are
//! drained; sends queue on the connection's writer (`conn.rs` mirrors the
//! runtime's reader and writer tasks), storage operations go to the
//! transfer's storage, dials go to the network (`net.rs`), closes drop the
//! connection (the writer flushes, then ends the stream), and the
//! session's timer is re-armed.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use weir_bt::torrent::TorrentRef;
use weir_core::bitfield::Bitfield;
use weir_core::policy::NetPolicy;
use weir_core::storage::{Digests, StorageEvent, StorageOp};
use weir_ed2k::Md4Hash;
use weir_session::{
    AddEd2k, AddTorrent, ConnId, LogLevel, Proto, Refused, Session, SessionConfig, SessionEvent,
    Source, TransferEvent, TransferId,
};

use crate::content::{Ed2kSpec, Payload, TorrentSpec};
use crate::measure::Series;
use crate::storage::{Disk, MemStorage};
use crate::world::{BucketId, NodeId, SideId, Work, World};

/// The BitTorrent port nodes listen on unless told otherwise.
pub const BT_PORT: u16 = 6881;
/// The eD2k port nodes listen on unless told otherwise.
pub const ED2K_PORT: u16 = 4662;

type Tweak = Box<dyn FnOnce(&mut SessionConfig)>;

#[derive(Clone, Debug)]
enum What {
    Torrent {
        spec: Arc<TorrentSpec>,
        seeder: bool,
    },
    Ed2kShare(Arc<Ed2kSpec>),
    Ed2kGet(Arc<Ed2kSpec>),
}

/// A transfer to add to a node's session.
#[derive(Clone, Debug)]
pub struct TransferConfig {
    what: What,
    peers: Vec<SocketAddr>,
    down: Vec<BucketId>,
    up: Vec<BucketId>,
    paused: bool,
    wanted: Option<Bitfield>,
}

impl TransferConfig {
    fn new(what: What) -> Self {
        Self {
            what,
            peers: Vec::new(),
            down: Vec::new(),
            up: Vec::new(),
            paused: false,
            wanted: None,
        }
    }

    /// Only these pieces of a torrent are wanted (a file selection: see
    /// `weir_core::selection`); the others are never asked for.
    pub fn wanted(mut self, pieces: Bitfield) -> Self {
        self.wanted = Some(pieces);
        self
    }

    /// A torrent the node has whole (it seeds, and never dials: seeds wait
    /// for leechers).
    pub fn seed(spec: &Arc<TorrentSpec>) -> Self {
        Self::new(What::Torrent {
            spec: spec.clone(),
            seeder: true,
        })
    }

    /// A torrent the node downloads (and keeps seeding once complete).
    pub fn leech(spec: &Arc<TorrentSpec>) -> Self {
        Self::new(What::Torrent {
            spec: spec.clone(),
            seeder: false,
        })
    }

    /// An eD2k file the node shares whole.
    pub fn ed2k_share(spec: &Arc<Ed2kSpec>) -> Self {
        Self::new(What::Ed2kShare(spec.clone()))
    }

    /// An eD2k file the node downloads from its link (no part hashes: the
    /// hashset is asked of a source) and the sources given with
    /// [`TransferConfig::peers`]. When its link names a file of a torrent
    /// the node already has (same name and size), it joins that transfer
    /// (`Session::ed2k_joins`): one file from two networks, stored and
    /// counted as the torrent's (this config's own chains are not used).
    pub fn ed2k_get(spec: &Arc<Ed2kSpec>) -> Self {
        Self::new(What::Ed2kGet(spec.clone()))
    }

    /// Peers (eD2k sources) the session knows from the start
    /// (`--peer`: [`Source::Manual`]).
    pub fn peers(mut self, addrs: impl IntoIterator<Item = SocketAddr>) -> Self {
        self.peers.extend(addrs);
        self
    }

    /// The transfer's own download bucket chain, reserved before the
    /// node's (`reserve_chain(per-transfer, then global)`, as the runtime
    /// does) on every connection attached to it: its BitTorrent peers, and
    /// the eD2k connections dialled for it (an accepted eD2k connection
    /// may ask for any file: it reserves from the node's chain only).
    pub fn down(mut self, chain: impl Into<Vec<BucketId>>) -> Self {
        self.down = chain.into();
        self
    }

    /// The transfer's own upload bucket chain.
    pub fn up(mut self, chain: impl Into<Vec<BucketId>>) -> Self {
        self.up = chain.into();
        self
    }

    /// Added paused.
    pub fn paused(mut self) -> Self {
        self.paused = true;
        self
    }
}

/// How to make a node.
pub struct NodeConfig {
    transfers: Vec<TransferConfig>,
    ip: Option<Ipv4Addr>,
    bt_port: Option<u16>,
    ed2k_port: Option<u16>,
    down: Vec<BucketId>,
    up: Vec<BucketId>,
    disk: Disk,
    corrupt_uploads: bool,
    name: Option<String>,
    tweak: Option<Tweak>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("transfers", &self.transfers.len())
            .field("ip", &self.ip)
            .field("down", &self.down)
            .field("up", &self.up)
            .field("disk", &self.disk)
            .finish()
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeConfig {
    /// A node with an empty session, listening for BitTorrent on
    /// [`BT_PORT`] and eD2k on [`ED2K_PORT`], no limiter, an instant disk.
    pub fn new() -> Self {
        Self {
            transfers: Vec::new(),
            ip: None,
            bt_port: Some(BT_PORT),
            ed2k_port: Some(ED2K_PORT),
            down: Vec::new(),
            up: Vec::new(),
            disk: Disk::INSTANT,
            corrupt_uploads: false,
            name: None,
            tweak: None,
        }
    }

    /// A BitTorrent node that has every piece of `spec`.
    pub fn seeder(spec: &Arc<TorrentSpec>) -> Self {
        Self::new().with(TransferConfig::seed(spec))
    }

    /// A BitTorrent node that has nothing of `spec`.
    pub fn leecher(spec: &Arc<TorrentSpec>) -> Self {
        Self::new().with(TransferConfig::leech(spec))
    }

    /// Adds a transfer (transfers get their ids in the order added).
    pub fn with(mut self, t: TransferConfig) -> Self {
        self.transfers.push(t);
        self
    }

    /// The node's address (default: `10.0.0.1` plus its index).
    pub fn ip(mut self, ip: Ipv4Addr) -> Self {
        self.ip = Some(ip);
        self
    }

    /// The BitTorrent listen port (`None`: not listening; dials to it are
    /// refused).
    pub fn listen_bt(mut self, port: Option<u16>) -> Self {
        self.bt_port = port;
        self
    }

    /// The eD2k listen port (`None`: not listening).
    pub fn listen_ed2k(mut self, port: Option<u16>) -> Self {
        self.ed2k_port = port;
        self
    }

    /// The node's download bucket chain (global for the node: every
    /// connection of every transfer and protocol reserves from it). Empty:
    /// no limiter at all.
    pub fn down(mut self, chain: impl Into<Vec<BucketId>>) -> Self {
        self.down = chain.into();
        self
    }

    /// The node's upload bucket chain.
    pub fn up(mut self, chain: impl Into<Vec<BucketId>>) -> Self {
        self.up = chain.into();
        self
    }

    /// A disk model for storage operations (one disk for every transfer
    /// of the node).
    pub fn disk(mut self, disk: Disk) -> Self {
        self.disk = disk;
        self
    }

    /// Flip a byte of every block this node uploads (a lying peer).
    pub fn corrupt_uploads(mut self) -> Self {
        self.corrupt_uploads = true;
        self
    }

    /// A name for messages.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Adjusts the session's configuration (limits, book, timings) after
    /// the world set identities, ports, address and seed.
    pub fn configure(mut self, f: impl FnOnce(&mut SessionConfig) + 'static) -> Self {
        self.tweak = Some(Box::new(f));
        self
    }
}

/// One dial a node's session asked for, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DialRecord {
    /// When the session asked.
    pub at: Duration,
    /// The connection id.
    pub conn: ConnId,
    /// What it speaks.
    pub proto: Proto,
    /// Where to.
    pub addr: SocketAddr,
    /// The transfer it was for.
    pub transfer: Option<TransferId>,
    /// When it ended and how: `Ok` when it became a connection the session
    /// took, `Err(reason)` when it failed or was refused.
    pub result: Option<(Duration, Result<(), String>)>,
}

/// A connection that reached a node's listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When.
    pub at: Duration,
    /// On which listener.
    pub proto: Proto,
    /// From where.
    pub from: SocketAddr,
    /// The session's answer (`Incoming` or after the handshake).
    pub result: Result<ConnId, Refused>,
}

/// One transfer of a node.
#[derive(Debug)]
struct Slot {
    payload: Arc<Payload>,
    seeder: bool,
    down: Vec<BucketId>,
    up: Vec<BucketId>,
    storage: Option<MemStorage>,
    received: Series,
    completed_at: Option<Duration>,
}

/// One host: a session and everything around it.
pub struct Node {
    name: String,
    pub(crate) ip: Ipv4Addr,
    pub(crate) bt_port: Option<u16>,
    pub(crate) ed2k_port: Option<u16>,
    pub(crate) session: Session,
    slots: BTreeMap<TransferId, Slot>,
    pub(crate) ed2k_files: BTreeMap<Md4Hash, TransferId>,
    pub(crate) down: Vec<BucketId>,
    pub(crate) up: Vec<BucketId>,
    disk: Disk,
    disk_free_at: Duration,
    corrupt_uploads: bool,
    /// Open connections.
    pub(crate) conns: BTreeMap<ConnId, SideId>,
    /// Every connection ever made.
    pub(crate) all_conns: BTreeMap<ConnId, SideId>,
    pub(crate) frozen: bool,
    pub(crate) is_down: bool,
    pub(crate) timer: Option<Duration>,
    next_port: u16,
    pub(crate) received: Series,
    pub(crate) received_bt: Series,
    pub(crate) received_ed2k: Series,
    closed: Vec<(Duration, ConnId, weir_session::CloseReason)>,
    banned: Vec<IpAddr>,
    verified: u32,
    pub(crate) dials: Vec<DialRecord>,
    pub(crate) arrivals: Vec<Arrival>,
    logs: Vec<(Duration, LogLevel, String)>,
    pub(crate) server: Option<crate::server::ServerState>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("ip", &self.ip)
            .field("conns", &self.conns.len())
            .field("received", &self.received.total())
            .finish()
    }
}

impl Node {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's IP address.
    pub fn ip(&self) -> IpAddr {
        IpAddr::V4(self.ip)
    }

    /// The address BitTorrent peers know it by (its BitTorrent listen
    /// port, or [`BT_PORT`] when it does not listen).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip(), self.bt_port.unwrap_or(BT_PORT))
    }

    /// Its BitTorrent listen address, if it listens.
    pub fn bt_addr(&self) -> Option<SocketAddr> {
        self.bt_port.map(|p| SocketAddr::new(self.ip(), p))
    }

    /// Its eD2k listen address, if it listens.
    pub fn ed2k_addr(&self) -> Option<SocketAddr> {
        self.ed2k_port.map(|p| SocketAddr::new(self.ip(), p))
    }

    /// The session (for its counts, transfers, torrents and eD2k core).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Its transfers, in the order added.
    pub fn transfers(&self) -> Vec<TransferId> {
        self.slots.keys().copied().collect()
    }

    /// The torrent of its first transfer that has one (for its stats).
    /// Panics when it has none.
    pub fn torrent(&self) -> TorrentRef<'_> {
        self.slots
            .keys()
            .find_map(|&t| self.session.torrent(t))
            .unwrap_or_else(|| panic!("{} has no torrent", self.name))
    }

    /// Part data and block payload received over every protocol,
    /// cumulative over virtual time.
    pub fn received(&self) -> &Series {
        &self.received
    }

    /// The same, for one protocol (BitTorrent blocks or eD2k part data).
    pub fn received_by(&self, proto: Proto) -> &Series {
        match proto {
            Proto::Bt => &self.received_bt,
            _ => &self.received_ed2k,
        }
    }

    /// The same, for one transfer.
    pub fn received_of(&self, t: TransferId) -> &Series {
        &self.slot(t).received
    }

    fn slot(&self, t: TransferId) -> &Slot {
        self.slots
            .get(&t)
            .unwrap_or_else(|| panic!("{} has no transfer {t}", self.name))
    }

    /// When every transfer of the node was complete (`None` while one is
    /// not). Seeded and shared transfers are complete from the start.
    pub fn completed_at(&self) -> Option<Duration> {
        self.slots
            .values()
            .map(|s| s.completed_at)
            .try_fold(Duration::ZERO, |a, b| b.map(|b| a.max(b)))
            .filter(|_| !self.slots.is_empty())
    }

    /// When one transfer completed.
    pub fn completed_at_of(&self, t: TransferId) -> Option<Duration> {
        self.slot(t).completed_at
    }

    /// Connections the session closed: (time, conn, reason).
    pub fn closed(&self) -> &[(Duration, ConnId, weir_session::CloseReason)] {
        &self.closed
    }

    /// Addresses the session banned, in order.
    pub fn banned(&self) -> &[IpAddr] {
        &self.banned
    }

    /// Pieces and parts verified since the start.
    pub fn pieces_verified(&self) -> u32 {
        self.verified
    }

    /// What a leecher of a real payload stored, for its first transfer.
    pub fn stored(&self) -> Option<&[u8]> {
        self.slots.keys().next().and_then(|&t| self.stored_of(t))
    }

    /// What a leecher of a real payload stored, for one transfer.
    pub fn stored_of(&self, t: TransferId) -> Option<&[u8]> {
        self.slot(t).storage.as_ref()?.stored()
    }

    /// Open connections.
    pub fn open_conns(&self) -> Vec<ConnId> {
        self.conns.keys().copied().collect()
    }

    /// Every dial the session asked for, in order.
    pub fn dials(&self) -> &[DialRecord] {
        &self.dials
    }

    /// Every connection that reached its listeners, in order.
    pub fn arrivals(&self) -> &[Arrival] {
        &self.arrivals
    }

    /// The session's log lines.
    pub fn logs(&self) -> &[(Duration, LogLevel, String)] {
        &self.logs
    }

    /// Whether it is down (see [`World::take_down`]).
    pub fn is_down(&self) -> bool {
        self.is_down
    }

    /// The bucket chains a connection of transfer `t` reserves from
    /// (download, upload): the transfer's own, then the node's.
    pub(crate) fn chains(&self, t: Option<TransferId>) -> (Vec<BucketId>, Vec<BucketId>) {
        let (mut d, mut u) = match t.and_then(|t| self.slots.get(&t)) {
            Some(s) => (s.down.clone(), s.up.clone()),
            None => (Vec::new(), Vec::new()),
        };
        d.extend_from_slice(&self.down);
        u.extend_from_slice(&self.up);
        (d, u)
    }

    /// A fresh ephemeral port for a connection this node dials.
    pub(crate) fn ephemeral(&mut self) -> u16 {
        let p = self.next_port;
        self.next_port = if p == u16::MAX { 40_000 } else { p + 1 };
        p
    }

    pub(crate) fn count_received(
        &mut self,
        proto: Proto,
        t: Option<TransferId>,
        at: Duration,
        n: u64,
    ) {
        self.received.add(at, n);
        match proto {
            Proto::Bt => self.received_bt.add(at, n),
            _ => self.received_ed2k.add(at, n),
        }
        if let Some(s) = t.and_then(|t| self.slots.get_mut(&t)) {
            s.received.add(at, n);
        }
    }
}

impl World {
    /// Adds a node (a host running a session with the configured
    /// transfers). Panics if a transfer cannot be added (a scenario
    /// mistake, such as the same torrent twice).
    pub fn add_node(&mut self, cfg: NodeConfig) -> NodeId {
        let id = self.nodes.len();
        let ip = cfg
            .ip
            .unwrap_or_else(|| Ipv4Addr::from(0x0a00_0001 + id as u32));
        assert!(
            !self.hosts.contains_key(&IpAddr::V4(ip)),
            "two nodes at {ip}"
        );
        let mut peer_id = *b"-WS0001-000000000000";
        for (i, b) in format!("{id:012}").bytes().enumerate() {
            peer_id[8 + i] = b;
        }
        let mut user_hash = [0u8; 16];
        user_hash[..8].copy_from_slice(b"weir-sim");
        user_hash[8..].copy_from_slice(&(id as u64).to_be_bytes());
        let name = cfg.name.unwrap_or_else(|| format!("node{id}"));
        let mut scfg = SessionConfig::new(NetPolicy::allow_all(), peer_id, Md4Hash(user_hash));
        scfg.bt_port = cfg.bt_port;
        scfg.ed2k_port = cfg.ed2k_port.unwrap_or(0);
        scfg.own_ips = vec![IpAddr::V4(ip)];
        scfg.nick = name.clone();
        scfg.seed = self.rng.u64(..);
        if let Some(f) = cfg.tweak {
            f(&mut scfg);
        }
        self.hosts.insert(IpAddr::V4(ip), id);
        self.nodes.push(Node {
            name,
            ip,
            bt_port: cfg.bt_port,
            ed2k_port: cfg.ed2k_port,
            session: Session::new(scfg),
            slots: BTreeMap::new(),
            ed2k_files: BTreeMap::new(),
            down: cfg.down,
            up: cfg.up,
            disk: cfg.disk,
            disk_free_at: Duration::ZERO,
            corrupt_uploads: cfg.corrupt_uploads,
            conns: BTreeMap::new(),
            all_conns: BTreeMap::new(),
            frozen: false,
            is_down: false,
            timer: None,
            next_port: 40_000,
            received: Series::default(),
            received_bt: Series::default(),
            received_ed2k: Series::default(),
            closed: Vec::new(),
            banned: Vec::new(),
            verified: 0,
            dials: Vec::new(),
            arrivals: Vec::new(),
            logs: Vec::new(),
            server: None,
        });
        for t in cfg.transfers {
            self.add_transfer_quietly(id, t);
        }
        self.drain(id);
        self.settle();
        id
    }

    /// [`World::add_node`] under its older name (a BitTorrent node is a
    /// node whose session has one torrent).
    pub fn add_bt(&mut self, cfg: NodeConfig) -> NodeId {
        self.add_node(cfg)
    }

    /// A node.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// The nodes, in index order.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Adds a transfer to node `n`'s session now (its dials start at once).
    pub fn add_transfer(&mut self, n: NodeId, t: TransferConfig) -> TransferId {
        let id = self.add_transfer_quietly(n, t);
        self.drain(n);
        self.settle();
        id
    }

    fn add_transfer_quietly(&mut self, n: NodeId, t: TransferConfig) -> TransferId {
        let now = self.instant();
        let at = self.now();
        let node = &mut self.nodes[n];
        let (r, payload, seeder) = match &t.what {
            What::Torrent { spec, seeder } => {
                let np = spec.meta.info.piece_count();
                let had = if *seeder {
                    Bitfield::full(np)
                } else {
                    Bitfield::new(np)
                };
                let r = node.session.add_torrent(
                    AddTorrent {
                        meta: spec.meta.clone(),
                        had,
                        check: Bitfield::new(np),
                        partial: Vec::new(),
                        peers: t.peers.clone(),
                        paused: t.paused,
                        seed: true,
                        download: true,
                        wanted: t.wanted.clone(),
                        priorities: None,
                    },
                    now,
                );
                (r, spec.payload.clone(), *seeder)
            }
            What::Ed2kShare(spec) => {
                let r = node
                    .session
                    .share_ed2k(spec.name.clone(), &spec.hashes, now);
                if let Ok(id) = r {
                    node.ed2k_files.insert(spec.hash(), id);
                    if t.paused {
                        node.session.pause(id, now);
                    }
                }
                (r, spec.payload.clone(), true)
            }
            What::Ed2kGet(spec) => {
                let parts = weir_ed2k::part_count(spec.len()) as u32;
                let r = node.session.add_ed2k(
                    AddEd2k {
                        link: spec.link(&[]),
                        had: Bitfield::new(parts),
                        check: Bitfield::new(parts),
                        partial: Vec::new(),
                        peers: t.peers.clone(),
                        paused: t.paused,
                        seed: true,
                    },
                    now,
                );
                if let Ok(id) = r {
                    node.ed2k_files.insert(spec.hash(), id);
                }
                (r, spec.payload.clone(), false)
            }
        };
        let id = r.unwrap_or_else(|e| panic!("{}: cannot add a transfer: {e}", node.name));
        if node.slots.contains_key(&id) {
            // An ed2k link naming a file of a torrent already in the
            // session joined that transfer (one file from two networks):
            // the torrent's slot (its storage, series and chains) is the
            // transfer's; a second slot would replace it.
            return id;
        }
        node.slots.insert(
            id,
            Slot {
                payload,
                seeder,
                down: t.down,
                up: t.up,
                storage: None,
                received: Series::default(),
                completed_at: seeder.then_some(at),
            },
        );
        id
    }

    /// Tells node `n`'s session of peers of transfer `t` (a tracker
    /// answer, DHT or PEX: what `Session::add_peers` takes); returns how
    /// many were new.
    pub fn add_peers(
        &mut self,
        n: NodeId,
        t: TransferId,
        proto: Proto,
        addrs: &[SocketAddr],
        source: Source,
    ) -> usize {
        let now = self.instant();
        let k = self.nodes[n]
            .session
            .add_peers(t, proto, addrs, source, now);
        self.drain(n);
        self.settle();
        k
    }

    /// Pauses a transfer of node `n` (its connections close).
    pub fn pause(&mut self, n: NodeId, t: TransferId) {
        let now = self.instant();
        self.nodes[n].session.pause(t, now);
        self.drain(n);
        self.settle();
    }

    /// Resumes a paused transfer of node `n`.
    pub fn resume(&mut self, n: NodeId, t: TransferId) {
        let now = self.instant();
        self.nodes[n].session.resume(t, now);
        self.drain(n);
        self.settle();
    }

    /// Carries out everything node `n`'s session asked for, as the
    /// runtime's loop does after each input.
    pub(crate) fn drain(&mut self, n: NodeId) {
        let now = self.now();
        while let Some(ev) = self.nodes[n].session.poll_event() {
            match ev {
                SessionEvent::OpenStorage {
                    transfer, digests, ..
                } => self.open_storage(n, transfer, digests),
                SessionEvent::Storage { transfer, op } => self.execute(n, transfer, op),
                SessionEvent::Dial {
                    conn,
                    proto,
                    addr,
                    hello,
                } => self.start_dial(n, conn, proto, addr, hello),
                SessionEvent::Send {
                    conn,
                    data,
                    payload,
                } => {
                    if let Some(&s) = self.nodes[n].conns.get(&conn) {
                        self.queue_send(s, data, payload, true);
                    }
                }
                SessionEvent::Close { conn, reason } => {
                    self.nodes[n].closed.push((now, conn, reason.clone()));
                    self.cancel_dial(n, conn, &reason.to_string());
                    self.drop_conn(n, conn);
                }
                SessionEvent::CheckRange {
                    transfer,
                    scheme,
                    unit,
                    offset,
                    len,
                    digest,
                } => {
                    // Hashed at once (the simulator's disk takes no time).
                    let node = &mut self.nodes[n];
                    let ok = node
                        .slots
                        .get(&transfer)
                        .and_then(|s| s.storage.as_ref())
                        .and_then(|st| st.read_range(offset, usize::try_from(len).ok()?))
                        .is_some_and(|data| digest.matches(&data));
                    let at = self.instant();
                    self.nodes[n]
                        .session
                        .range_checked(transfer, scheme, unit, ok, at);
                }
                SessionEvent::Banned { ip, .. } => self.nodes[n].banned.push(ip),
                SessionEvent::Transfer { transfer, event } => {
                    let node = &mut self.nodes[n];
                    match event {
                        TransferEvent::Complete => {
                            if let Some(s) = node.slots.get_mut(&transfer) {
                                s.completed_at.get_or_insert(now);
                            }
                        }
                        TransferEvent::Verified(_) => node.verified += 1,
                        TransferEvent::Checked => {}
                        TransferEvent::Failed(e) => {
                            panic!("{}: transfer {transfer} failed: {e}", node.name)
                        }
                    }
                }
                SessionEvent::Log { level, message } => {
                    self.nodes[n].logs.push((now, level, message))
                }
                // The simulated sessions run no DHT node.
                SessionEvent::DhtNode(_) => {}
            }
        }
        self.arm_timer(n);
    }

    fn open_storage(&mut self, n: NodeId, t: TransferId, digests: Digests) {
        let node = &mut self.nodes[n];
        let geo = match node.session.torrent(t) {
            Some(tor) => tor.geometry(),
            None => {
                let (client, file) = node
                    .session
                    .ed2k_file(t)
                    .expect("a transfer is a torrent or an eD2k file");
                client.geometry(file).expect("the file is known")
            }
        };
        let corrupt = node.corrupt_uploads;
        let Some(slot) = node.slots.get_mut(&t) else {
            return;
        };
        if slot.storage.is_none() {
            let mut st = MemStorage::new(slot.payload.clone(), geo, digests, slot.seeder);
            st.corrupt_uploads = corrupt;
            slot.storage = Some(st);
        }
    }

    fn execute(&mut self, n: NodeId, t: TransferId, op: StorageOp) {
        let now = self.now();
        let node = &mut self.nodes[n];
        let st = node
            .slots
            .get_mut(&t)
            .and_then(|s| s.storage.as_mut())
            .unwrap_or_else(|| panic!("{}: storage op for {t} before OpenStorage", node.name));
        let (bytes, ev) = st.execute(op);
        let done = node.disk_free_at.max(now) + node.disk.cost(bytes);
        node.disk_free_at = done;
        if let Some(ev) = ev {
            if done <= now {
                self.work.push_back(Work::Storage(n, t, ev));
            } else {
                self.schedule_storage(done, n, t, ev);
            }
        }
    }

    /// A storage answer is due.
    pub(crate) fn storage_done(&mut self, n: NodeId, t: TransferId, ev: StorageEvent) {
        let now = self.instant();
        self.nodes[n].session.storage(t, ev, now);
        self.drain(n);
    }
}
