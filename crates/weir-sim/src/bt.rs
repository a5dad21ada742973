//! BitTorrent nodes: a [`Torrent`] core, its storage, its bucket chains
//! and its connections, read and written exactly as the runtime does
//! (`weir_runtime::bt::conn`):
//!
//! - **Reader**: decode every whole message in the buffer and hand the
//!   batch to the torrent; if less than 64 KiB of the buffer is free,
//!   reserve 512 KiB more; reserve the free space from the download chain
//!   (waiting for the next refill while it grants nothing); then wait for
//!   data and read at most the grant; refund what the read did not use.
//!   Tokens are held while waiting for data, as the runtime holds them
//!   across `read_buf().await`.
//! - **Writer**: runs of control messages (payload 0) never wait for the
//!   upload chain and go ahead of block runs still waiting for tokens; a
//!   block run is paid in full before its first byte is written (credit
//!   accumulates across grants); paid runs are written together (at most
//!   512 slices per write), as much as the send buffer takes; each write is
//!   reported with [`Torrent::on_sent`].
//! - **Driver**: after every input, the torrent's events are drained:
//!   sends queue on the writer, storage operations go to the node's storage,
//!   closes drop the connection (the writer flushes, then ends the stream),
//!   and the torrent's timer is re-armed.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use weir_bt::torrent::{ConnId, Event, Torrent, TorrentConfig};
use weir_bt::wire::{self, BlockRef, Limits, Message};
use weir_core::bitfield::Bitfield;
use weir_core::bucket::{TokenBucket, refund_chain, reserve_chain};

use crate::content::TorrentSpec;
use crate::link::LinkConfig;
use crate::measure::Series;
use crate::storage::{Disk, MemStorage};
use crate::world::{BucketId, LinkId, NodeId, SideId, Waiter, Work, World};

/// The runtime's read size (`conn::READ_BUF`).
pub const READ_BUF: usize = 512 * 1024;
/// The runtime refills the read buffer when less than this is free.
pub const MIN_FREE: usize = 64 * 1024;
/// Most slices in one vectored write (`conn::MAX_IOV`).
pub const MAX_IOV: usize = 512;

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

/// What one end of a connection saw.
#[derive(Clone, Debug, Default)]
pub struct ConnStats {
    /// Requests this end sent.
    pub requests_sent: u64,
    /// Cancels this end sent.
    pub cancels_sent: u64,
    /// Blocks (piece messages) this end received.
    pub blocks_received: u64,
    /// Rejects this end received.
    pub rejects_received: u64,
    /// Block payload bytes this end received.
    pub payload_received: u64,
    /// The same, cumulative over virtual time.
    pub payload: Series,
    /// Bytes read from the socket.
    pub bytes_read: u64,
    /// Bytes written to the socket.
    pub bytes_written: u64,
    /// Socket reads.
    pub reads: u64,
    /// Socket writes.
    pub writes: u64,
    /// Every request sent, with its time (with [`World::trace_blocks`]).
    pub requested: Vec<(Duration, BlockRef)>,
    /// Every block received, with its time (with [`World::trace_blocks`]).
    pub received: Vec<(Duration, u32, u32)>,
}

impl ConnStats {
    /// Requests in flight as the wire shows them: sent, minus cancelled,
    /// answered or rejected.
    pub fn outstanding(&self) -> u64 {
        self.requests_sent
            .saturating_sub(self.cancels_sent + self.blocks_received + self.rejects_received)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadState {
    /// About to reserve tokens.
    Ready,
    /// The download chain granted nothing: waits for the next refill.
    WaitTokens,
    /// Holds this many tokens and waits for data.
    WaitData(usize),
    /// Aborted.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteState {
    Idle,
    Ready,
    WaitTokens,
    WaitWritable,
    Done,
}

pub(crate) struct Reader {
    buf: BytesMut,
    limits: Limits,
    pub(crate) state: ReadState,
    pub(crate) queued: bool,
}

struct Unit {
    data: VecDeque<Bytes>,
    payload: u64,
    paid: bool,
}

pub(crate) struct Writer {
    queue: VecDeque<Unit>,
    credit: u64,
    unlimited: bool,
    pub(crate) state: WriteState,
    pub(crate) queued: bool,
    closing: bool,
}

/// One end of a connection.
pub(crate) struct Side {
    node: NodeId,
    conn: ConnId,
    tx: LinkId,
    rx: LinkId,
    open: bool,
    pub(crate) reader: Reader,
    pub(crate) writer: Writer,
    stats: ConnStats,
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
    banned: Vec<SocketAddr>,
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
    pub fn banned(&self) -> &[SocketAddr] {
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

fn reserve(buckets: &[TokenBucket], chain: &[BucketId], want: u64) -> u64 {
    if want == 0 {
        return 0;
    }
    let refs: Vec<&TokenBucket> = chain.iter().map(|&b| &buckets[b]).collect();
    if refs.iter().all(|b| b.is_unlimited()) {
        return want;
    }
    reserve_chain(&refs, want)
}

fn refund(buckets: &[TokenBucket], chain: &[BucketId], unused: u64) {
    if unused == 0 {
        return;
    }
    let refs: Vec<&TokenBucket> = chain.iter().map(|&b| &buckets[b]).collect();
    if refs.iter().all(|b| b.is_unlimited()) {
        return;
    }
    refund_chain(&refs, unused);
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
        let limits = Limits::new(n.torrent.geometry().piece_count());
        let id = self.sides.len();
        n.conns.insert(conn, id);
        n.all_conns.insert(conn, id);
        self.sides.push(Side {
            node,
            conn,
            tx,
            rx,
            open: true,
            reader: Reader {
                buf: BytesMut::with_capacity(READ_BUF),
                limits,
                state: ReadState::Ready,
                queued: false,
            },
            writer: Writer {
                queue: VecDeque::new(),
                credit: 0,
                unlimited,
                state: WriteState::Idle,
                queued: false,
                closing: false,
            },
            stats: ConnStats::default(),
        });
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
                Event::Ban { addr, .. } => self.nodes[n].banned.push(addr),
                Event::PieceVerified(_) => self.nodes[n].verified += 1,
                Event::Complete => {
                    self.nodes[n].completed_at.get_or_insert(now);
                }
                Event::CheckDone => {}
                Event::Fatal(e) => panic!("{}: fatal: {e}", self.nodes[n].name),
            }
        }
        self.arm_timer(n);
    }

    fn queue_send(&mut self, s: SideId, data: Vec<Bytes>, payload: u64) {
        let trace = self.trace_blocks;
        let now = self.now();
        let side = &mut self.sides[s];
        if payload == 0 {
            // Count what the control run asks for (a copy: the run itself
            // goes out untouched).
            let mut copy = BytesMut::new();
            for d in &data {
                copy.extend_from_slice(d);
            }
            while let Ok(Some(m)) = wire::decode(&mut copy, &side.reader.limits) {
                match m {
                    Message::Request(r) => {
                        side.stats.requests_sent += 1;
                        if trace {
                            side.stats.requested.push((now, r));
                        }
                    }
                    Message::Cancel(_) => side.stats.cancels_sent += 1,
                    _ => {}
                }
            }
        }
        let w = &mut side.writer;
        let data: VecDeque<Bytes> = data.into_iter().filter(|b| !b.is_empty()).collect();
        if !data.is_empty() {
            w.queue.push_back(Unit {
                data,
                payload,
                paid: w.unlimited || payload == 0,
            });
        }
        // A writer waiting for tokens also wakes for new messages (the
        // runtime's select); one inside a write does not.
        if matches!(w.state, WriteState::Idle | WriteState::WaitTokens) && !w.queued {
            w.queued = true;
            self.work.push_back(Work::Writer(s));
        }
    }

    /// The runtime's `drop_conn`: the reader is aborted, the writer flushes
    /// what is queued and then ends the stream.
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

    pub(crate) fn wake_reader_for_data(&mut self, s: SideId) {
        let r = &mut self.sides[s].reader;
        if matches!(r.state, ReadState::WaitData(_)) && !r.queued {
            r.queued = true;
            self.work.push_back(Work::Reader(s));
        }
    }

    pub(crate) fn wake_reader_for_tokens(&mut self, s: SideId) {
        let r = &mut self.sides[s].reader;
        if r.state == ReadState::WaitTokens {
            r.state = ReadState::Ready;
            if !r.queued {
                r.queued = true;
                self.work.push_back(Work::Reader(s));
            }
        }
    }

    pub(crate) fn wake_writer_for_room(&mut self, s: SideId) {
        let w = &mut self.sides[s].writer;
        if w.state == WriteState::WaitWritable {
            w.state = WriteState::Ready;
            if !w.queued {
                w.queued = true;
                self.work.push_back(Work::Writer(s));
            }
        }
    }

    pub(crate) fn wake_writer_for_tokens(&mut self, s: SideId) {
        let w = &mut self.sides[s].writer;
        if w.state == WriteState::WaitTokens {
            w.state = WriteState::Ready;
            if !w.queued {
                w.queued = true;
                self.work.push_back(Work::Writer(s));
            }
        }
    }

    /// The runtime's reader loop (`conn::reader`), run until it waits.
    pub(crate) fn run_reader(&mut self, s: SideId) {
        let now = self.now();
        loop {
            let n = self.sides[s].node;
            if !self.sides[s].open || self.nodes[n].frozen {
                return;
            }
            // Decode every whole message and hand the batch over.
            let mut msgs = Vec::new();
            let mut error = None;
            {
                let r = &mut self.sides[s].reader;
                loop {
                    match wire::decode(&mut r.buf, &r.limits) {
                        Ok(Some(m)) => msgs.push(m),
                        Ok(None) => break,
                        Err(e) => {
                            error = Some(e.to_string());
                            break;
                        }
                    }
                }
            }
            if !msgs.is_empty() {
                self.deliver(s, msgs);
            }
            if let Some(reason) = error {
                return self.peer_gone(s, Some(reason));
            }
            if !self.sides[s].open {
                return;
            }
            // Reserve the free space from the download chain.
            let side = &mut self.sides[s];
            if matches!(side.reader.state, ReadState::Ready | ReadState::WaitTokens) {
                let r = &mut side.reader;
                if r.buf.capacity() - r.buf.len() < MIN_FREE {
                    r.buf.reserve(READ_BUF);
                }
                let want = r.buf.capacity() - r.buf.len();
                let grant = reserve(&self.buckets, &self.nodes[n].down, want as u64) as usize;
                if grant == 0 {
                    if r.state != ReadState::WaitTokens {
                        r.state = ReadState::WaitTokens;
                        self.waiters.push(Waiter::Reader(s));
                    }
                    return;
                }
                r.state = ReadState::WaitData(grant);
            }
            let ReadState::WaitData(grant) = side.reader.state else {
                return;
            };
            // Wait for data (holding the tokens), read at most the grant.
            let link = &mut self.links[side.rx].link;
            if link.readable() == 0 {
                if link.is_eof() {
                    refund(&self.buckets, &self.nodes[n].down, grant as u64);
                    side.reader.state = ReadState::Done;
                    return self.peer_gone(s, None);
                }
                return;
            }
            let got = link.read_into(now, &mut side.reader.buf, grant);
            refund(&self.buckets, &self.nodes[n].down, (grant - got) as u64);
            side.reader.state = ReadState::Ready;
            side.stats.bytes_read += got as u64;
            side.stats.reads += 1;
            let rx = side.rx;
            self.touch(rx);
        }
    }

    /// Hands decoded messages to the torrent, counting what they carry.
    fn deliver(&mut self, s: SideId, msgs: Vec<Message>) {
        let now = self.now();
        let at = self.instant();
        let trace = self.trace_blocks;
        let (n, conn) = (self.sides[s].node, self.sides[s].conn);
        for m in msgs {
            let stats = &mut self.sides[s].stats;
            match &m {
                Message::Piece { index, begin, data } => {
                    stats.blocks_received += 1;
                    stats.payload_received += data.len() as u64;
                    stats.payload.add(now, data.len() as u64);
                    if trace {
                        stats.received.push((now, *index, *begin));
                    }
                    self.nodes[n].received.add(now, data.len() as u64);
                }
                Message::Reject(_) => stats.rejects_received += 1,
                _ => {}
            }
            self.nodes[n].torrent.handle_message(conn, m, at);
        }
        self.drain(n);
    }

    /// The runtime's writer loop (`conn::writer`), run until it waits.
    pub(crate) fn run_writer(&mut self, s: SideId) {
        let now = self.now();
        loop {
            let n = self.sides[s].node;
            if self.nodes[n].frozen {
                return;
            }
            let side = &mut self.sides[s];
            let w = &mut side.writer;
            if w.queue.is_empty() {
                if w.closing {
                    w.state = WriteState::Done;
                    let tx = side.tx;
                    self.links[tx].link.close(now);
                    self.touch(tx);
                } else {
                    w.state = WriteState::Idle;
                }
                return;
            }
            if !w.queue[0].paid {
                // Control runs queued behind go first.
                if let Some(at) = w.queue.iter().position(|u| u.payload == 0) {
                    let u = w.queue.remove(at).expect("position is valid");
                    w.queue.push_front(u);
                    continue;
                }
                let payload = w.queue[0].payload;
                let need = payload - w.credit.min(payload);
                let g = reserve(&self.buckets, &self.nodes[n].up, need);
                if g == 0 {
                    if w.state != WriteState::WaitTokens {
                        w.state = WriteState::WaitTokens;
                        self.waiters.push(Waiter::Writer(s));
                    }
                    return;
                }
                w.state = WriteState::Ready;
                w.credit += g;
                if w.credit >= payload {
                    w.credit -= payload;
                    w.queue[0].paid = true;
                }
                continue;
            }
            let tx = side.tx;
            let slices = w
                .queue
                .iter()
                .take_while(|u| u.paid)
                .flat_map(|u| u.data.iter())
                .take(MAX_IOV);
            let wrote = self.links[tx].link.write(now, slices);
            self.touch(tx);
            let side = &mut self.sides[s];
            let w = &mut side.writer;
            if wrote == 0 {
                w.state = WriteState::WaitWritable;
                return;
            }
            w.state = WriteState::Ready;
            let mut adv = wrote;
            while adv > 0 {
                let u = w.queue.front_mut().expect("wrote queued bytes");
                let front = u.data.front_mut().expect("units are never empty");
                if adv >= front.len() {
                    adv -= front.len();
                    u.data.pop_front();
                    if u.data.is_empty() {
                        w.queue.pop_front();
                    }
                } else {
                    front.advance(adv);
                    adv = 0;
                }
            }
            side.stats.bytes_written += wrote as u64;
            side.stats.writes += 1;
            if side.open {
                let (conn, at) = (side.conn, self.instant());
                self.nodes[n].torrent.on_sent(conn, wrote as u64, at);
                self.drain(n);
            }
        }
    }
}
