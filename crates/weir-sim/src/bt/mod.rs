//! BitTorrent nodes: a [`Torrent`] core, its storage, its bucket chains
//! and its connections, driven as the runtime's driver drives them
//! (`weir_runtime::bt`): after every input the torrent's events are
//! drained; sends queue on the connection's writer (`bt/conn.rs` mirrors the
//! runtime's reader and writer tasks), storage operations go to the node's
//! storage, closes drop the connection (the writer flushes, then ends the
//! stream), and the torrent's timer is re-armed.

mod conn;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use weir_bt::torrent::{ConnId, Event, Torrent, TorrentConfig};
use weir_core::bitfield::Bitfield;

use crate::content::TorrentSpec;
use crate::link::LinkConfig;
use crate::measure::Series;
use crate::storage::{Disk, MemStorage};
use crate::world::{BucketId, LinkId, NodeId, SideId, Work, World};
use conn::refund;
pub use conn::{ConnStats, MAX_IOV, MIN_FREE, READ_BUF};
pub(crate) use conn::{ReadState, Side, WriteState};

type Tweak = Box<dyn FnOnce(&mut TorrentConfig)>;

/// How to make a BitTorrent node.
pub struct NodeConfig {
    spec: Arc<TorrentSpec>,
    seeder: bool,
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
            .field("seeder", &self.seeder)
            .field("down", &self.down)
            .field("up", &self.up)
            .field("disk", &self.disk)
            .finish()
    }
}

impl NodeConfig {
    /// A node that has every piece of `spec`.
    pub fn seeder(spec: &Arc<TorrentSpec>) -> Self {
        Self::new(spec, true)
    }

    /// A node that has nothing of `spec`.
    pub fn leecher(spec: &Arc<TorrentSpec>) -> Self {
        Self::new(spec, false)
    }

    fn new(spec: &Arc<TorrentSpec>, seeder: bool) -> Self {
        Self {
            spec: spec.clone(),
            seeder,
            down: Vec::new(),
            up: Vec::new(),
            disk: Disk::INSTANT,
            corrupt_uploads: false,
            name: None,
            tweak: None,
        }
    }

    /// The download bucket chain (e.g. per-torrent, then global). Empty:
    /// no limiter at all.
    pub fn down(mut self, chain: impl Into<Vec<BucketId>>) -> Self {
        self.down = chain.into();
        self
    }

    /// The upload bucket chain.
    pub fn up(mut self, chain: impl Into<Vec<BucketId>>) -> Self {
        self.up = chain.into();
        self
    }

    /// A disk model for storage operations.
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

    /// Adjusts the torrent's configuration (peer id and seed are set by the
    /// world first).
    pub fn configure(mut self, f: impl FnOnce(&mut TorrentConfig) + 'static) -> Self {
        self.tweak = Some(Box::new(f));
        self
    }
}

/// One torrent on one host.
pub struct BtNode {
    name: String,
    pub(crate) torrent: Torrent,
    storage: MemStorage,
    addr: SocketAddr,
    down: Vec<BucketId>,
    up: Vec<BucketId>,
    /// Open connections.
    conns: BTreeMap<ConnId, SideId>,
    /// Every connection ever made.
    all_conns: BTreeMap<ConnId, SideId>,
    next_conn: ConnId,
    pub(crate) frozen: bool,
    pub(crate) timer: Option<Duration>,
    received: Series,
    completed_at: Option<Duration>,
    closed: Vec<(Duration, ConnId, String)>,
    banned: Vec<std::net::IpAddr>,
    verified: u32,
}

impl std::fmt::Debug for BtNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BtNode")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .field("conns", &self.conns.len())
            .field("received", &self.received.total())
            .field("completed_at", &self.completed_at)
            .finish()
    }
}

impl BtNode {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address peers know it by.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The torrent core (for its stats).
    pub fn torrent(&self) -> &Torrent {
        &self.torrent
    }

    /// Block payload received, cumulative over virtual time.
    pub fn received(&self) -> &Series {
        &self.received
    }

    /// When the torrent reported completion.
    pub fn completed_at(&self) -> Option<Duration> {
        self.completed_at
    }

    /// Connections closed by this node's torrent: (time, conn, reason).
    pub fn closed(&self) -> &[(Duration, ConnId, String)] {
        &self.closed
    }

    /// Addresses the torrent banned.
    pub fn banned(&self) -> &[std::net::IpAddr] {
        &self.banned
    }

    /// Pieces verified since the start.
    pub fn pieces_verified(&self) -> u32 {
        self.verified
    }

    /// What a leecher of a real payload stored.
    pub fn stored(&self) -> Option<&[u8]> {
        self.storage.stored()
    }

    /// Open connections.
    pub fn open_conns(&self) -> Vec<ConnId> {
        self.conns.keys().copied().collect()
    }
}

/// The two ends of a connection, as each node numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// The connection id on the first node.
    pub a: ConnId,
    /// The connection id on the second node.
    pub b: ConnId,
    /// The link from the first node to the second.
    pub ab: LinkId,
    /// The link from the second node to the first.
    pub ba: LinkId,
}

impl World {
    /// Adds a BitTorrent node.
    pub fn add_bt(&mut self, cfg: NodeConfig) -> NodeId {
        let id = self.nodes.len();
        let mut peer_id = *b"-WS0001-000000000000";
        for (i, b) in format!("{id:012}").bytes().enumerate() {
            peer_id[8 + i] = b;
        }
        let mut tcfg = TorrentConfig::new(peer_id);
        tcfg.seed = self.rng.u64(..);
        if let Some(f) = cfg.tweak {
            f(&mut tcfg);
        }
        let meta = &cfg.spec.meta;
        let n = meta.info.piece_count();
        let had = if cfg.seeder {
            Bitfield::full(n)
        } else {
            Bitfield::new(n)
        };
        let torrent = Torrent::new(meta, tcfg, &had, &Bitfield::new(n));
        let mut storage = MemStorage::new(
            cfg.spec.payload.clone(),
            Torrent::digests(meta),
            cfg.seeder,
            cfg.disk,
        );
        storage.corrupt_uploads = cfg.corrupt_uploads;
        let ip = Ipv4Addr::from(0x0a00_0001 + id as u32);
        self.nodes.push(BtNode {
            name: cfg.name.unwrap_or_else(|| format!("node{id}")),
            torrent,
            storage,
            addr: SocketAddr::new(IpAddr::V4(ip), 6881),
            down: cfg.down,
            up: cfg.up,
            conns: BTreeMap::new(),
            all_conns: BTreeMap::new(),
            next_conn: 1,
            frozen: false,
            timer: None,
            received: Series::default(),
            completed_at: cfg.seeder.then_some(self.now()),
            closed: Vec::new(),
            banned: Vec::new(),
            verified: 0,
        });
        self.drain(id);
        self.settle();
        id
    }

    /// A BitTorrent node.
    pub fn node(&self, id: NodeId) -> &BtNode {
        &self.nodes[id]
    }

    /// Connects `a` and `b` (handshakes assumed done: both torrents learn
    /// of the peer now) over a link `ab` one way and `ba` the other.
    pub fn connect(&mut self, a: NodeId, b: NodeId, ab: LinkConfig, ba: LinkConfig) -> Conn {
        let l_ab = self.add_link(ab);
        let l_ba = self.add_link(ba);
        let ca = self.nodes[a].next_conn;
        self.nodes[a].next_conn += 1;
        let cb = self.nodes[b].next_conn;
        self.nodes[b].next_conn += 1;
        let sa = self.new_side(a, ca, l_ab, l_ba);
        let sb = self.new_side(b, cb, l_ba, l_ab);
        self.links[l_ab].writer = sa;
        self.links[l_ab].reader = sb;
        self.links[l_ba].writer = sb;
        self.links[l_ba].reader = sa;
        let now = self.instant();
        let (ha, hb) = (
            self.nodes[a].torrent.handshake(),
            self.nodes[b].torrent.handshake(),
        );
        let (addr_a, addr_b) = (self.nodes[a].addr, self.nodes[b].addr);
        self.nodes[a].torrent.add_peer(ca, addr_b, &hb, now);
        self.drain(a);
        self.nodes[b].torrent.add_peer(cb, addr_a, &ha, now);
        self.drain(b);
        for s in [sa, sb] {
            self.sides[s].reader.queued = true;
            self.work.push_back(Work::Reader(s));
        }
        self.settle();
        Conn {
            a: ca,
            b: cb,
            ab: l_ab,
            ba: l_ba,
        }
    }

    /// Connects `a` and `b` over the same link shape both ways.
    pub fn connect_sym(&mut self, a: NodeId, b: NodeId, link: LinkConfig) -> Conn {
        self.connect(a, b, link.clone(), link)
    }

    fn new_side(&mut self, node: NodeId, conn: ConnId, tx: LinkId, rx: LinkId) -> SideId {
        let n = &mut self.nodes[node];
        let unlimited = n.up.iter().all(|&b| self.buckets[b].is_unlimited());
        let limits = weir_bt::wire::Limits::new(n.torrent.geometry().piece_count());
        let id = self.sides.len();
        n.conns.insert(conn, id);
        n.all_conns.insert(conn, id);
        self.sides
            .push(Side::new(node, conn, tx, rx, limits, unlimited));
        id
    }
    /// What connection `conn` of node `n` saw (open or closed).
    pub fn conn_stats(&self, n: NodeId, conn: ConnId) -> &ConnStats {
        &self.sides[self.nodes[n].all_conns[&conn]].stats
    }

    /// Stops node `n` answering: it no longer reads, writes or runs its
    /// timers, but keeps its connections open (a hung peer).
    pub fn freeze(&mut self, n: NodeId) {
        self.nodes[n].frozen = true;
    }

    /// Lets a frozen node run again.
    pub fn unfreeze(&mut self, n: NodeId) {
        self.nodes[n].frozen = false;
        let sides: Vec<SideId> = self.nodes[n].conns.values().copied().collect();
        for s in sides {
            if self.sides[s].reader.state == ReadState::WaitTokens {
                self.sides[s].reader.state = ReadState::Ready;
            }
            if self.sides[s].writer.state == WriteState::WaitTokens {
                self.sides[s].writer.state = WriteState::Ready;
            }
            self.work.push_back(Work::Reader(s));
            self.work.push_back(Work::Writer(s));
        }
        self.drain(n);
        self.settle();
    }

    /// Carries out everything node `n`'s torrent asked for, as the
    /// runtime's driver does after each input.
    pub(crate) fn drain(&mut self, n: NodeId) {
        let now = self.now();
        while let Some(ev) = self.nodes[n].torrent.poll_event() {
            match ev {
                Event::Send {
                    conn,
                    data,
                    payload,
                } => {
                    let Some(&s) = self.nodes[n].conns.get(&conn) else {
                        continue;
                    };
                    self.queue_send(s, data, payload);
                }
                Event::Storage(op) => {
                    if let Some((at, ev)) = self.nodes[n].storage.execute(now, op) {
                        if at <= now {
                            self.work.push_back(Work::Storage(n, ev));
                        } else {
                            self.schedule_storage(at, n, ev);
                        }
                    }
                }
                Event::Close { conn, reason } => {
                    self.nodes[n].closed.push((now, conn, reason));
                    let at = self.instant();
                    self.nodes[n].torrent.remove_peer(conn, at);
                    self.drop_conn(n, conn);
                }
                Event::Ban { ip, .. } => self.nodes[n].banned.push(ip),
                Event::PieceVerified(_) => self.nodes[n].verified += 1,
                Event::Complete => {
                    self.nodes[n].completed_at.get_or_insert(now);
                }
                Event::CheckDone | Event::Content(_) => {}
                Event::Fatal(e) => panic!("{}: fatal: {e}", self.nodes[n].name),
            }
        }
        self.arm_timer(n);
    }

    fn drop_conn(&mut self, n: NodeId, conn: ConnId) {
        let Some(s) = self.nodes[n].conns.remove(&conn) else {
            return;
        };
        let side = &mut self.sides[s];
        side.open = false;
        if let ReadState::WaitData(grant) = side.reader.state {
            refund(&self.buckets, &self.nodes[n].down, grant as u64);
        }
        side.reader.state = ReadState::Done;
        side.writer.closing = true;
        if !matches!(side.writer.state, WriteState::WaitWritable) && !side.writer.queued {
            side.writer.queued = true;
            self.work.push_back(Work::Writer(s));
        }
    }

    /// The reader reached the end of the stream or could not decode.
    fn peer_gone(&mut self, s: SideId, error: Option<String>) {
        let (n, conn) = (self.sides[s].node, self.sides[s].conn);
        let now = self.instant();
        match error {
            Some(reason) => self.nodes[n].torrent.peer_error(conn, reason, now),
            None => self.nodes[n].torrent.remove_peer(conn, now),
        }
        self.drop_conn(n, conn);
        self.drain(n);
    }
}
