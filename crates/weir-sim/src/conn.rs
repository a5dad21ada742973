//! One end of a connection, read and written exactly as the runtime's
//! tasks do (`weir_runtime::peerconn`), for every protocol:
//!
//! - **Reader**: decode every whole message in the buffer with the
//!   protocol's codec (`weir_bt::wire` for BitTorrent,
//!   `weir_ed2k::packet` for eD2k peers and servers) and hand the batch to
//!   the session; if less than 64 KiB of the buffer is free, reserve
//!   512 KiB more; reserve the free space from the download chain
//!   (waiting for the next refill while it grants nothing); then wait for
//!   data and read at most the grant; refund what the read did not use.
//!   Tokens are held while waiting for data, as the runtime holds them
//!   across `read_buf().await`. A BitTorrent connection first reads the
//!   68-byte handshake (not under the cap, as the runtime's handshake is
//!   not); what follows it stays in the buffer for the codec.
//! - **Writer**: runs of control messages (payload 0) never wait for the
//!   upload chain and go ahead of block runs still waiting for tokens; a
//!   block run is paid in full before its first byte is written (credit
//!   accumulates across grants); paid runs are written together (at most
//!   512 slices per write), as much as the send buffer takes; each write is
//!   reported with `Session::sent` (the handshake, written by the runtime's
//!   handshake code, is not).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use weir_bt::wire::{self, BlockRef, Handshake, Limits, Message};
use weir_core::bucket::{TokenBucket, refund_chain, reserve_chain};
use weir_ed2k::client::{emule_op as eop, op};
use weir_ed2k::packet::{self, Decoder, Packet, Protocol};
use weir_session::{ConnId, Established, Proto, TransferId};

use crate::measure::Series;
use crate::world::{BucketId, LinkId, NodeId, SideId, Waiter, Work, World};

/// The runtime's read size (`peerconn::READ_BUF`).
pub const READ_BUF: usize = 512 * 1024;
/// The runtime refills the read buffer when less than this is free.
pub const MIN_FREE: usize = 64 * 1024;
/// Most slices in one vectored write (`peerconn::MAX_IOV`).
pub const MAX_IOV: usize = 512;

/// What one end of a connection saw.
#[derive(Clone, Debug, Default)]
pub struct ConnStats {
    /// Requests this end sent (BitTorrent).
    pub requests_sent: u64,
    /// Cancels this end sent (BitTorrent).
    pub cancels_sent: u64,
    /// Blocks this end received (BitTorrent pieces, eD2k part packets).
    pub blocks_received: u64,
    /// Rejects this end received (BitTorrent).
    pub rejects_received: u64,
    /// Payload bytes this end received (block data, eD2k part data as
    /// carried).
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

/// Where a connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// A dial not connected yet (before the SYN-ACK): nothing is read.
    Connecting,
    /// The BitTorrent handshake; `dialer`: ours went first.
    Handshake { dialer: bool },
    /// A peer (or a server connection): the codec reads.
    Open,
    /// Refused or reset: reads nothing.
    Dead,
}

pub(crate) enum Codec {
    Bt(Limits),
    Ed2k(Decoder),
}

pub(crate) struct Reader {
    buf: BytesMut,
    pub(crate) codec: Codec,
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
    pub(crate) unlimited: bool,
    pub(crate) state: WriteState,
    pub(crate) queued: bool,
    pub(crate) closing: bool,
    /// Bytes written but not reported (the handshake).
    unreported: u64,
}

/// One end of a connection.
pub(crate) struct Side {
    pub(crate) node: NodeId,
    /// The session's id for it (0: a refused connection the session never
    /// named).
    pub(crate) conn: ConnId,
    pub(crate) proto: Proto,
    pub(crate) tx: LinkId,
    pub(crate) rx: LinkId,
    /// The other end.
    pub(crate) peer: SideId,
    pub(crate) open: bool,
    pub(crate) stage: Stage,
    pub(crate) transfer: Option<TransferId>,
    pub(crate) down: Vec<BucketId>,
    pub(crate) up: Vec<BucketId>,
    /// Index of its record in the node's arrivals (accepted connections).
    pub(crate) arrival: Option<usize>,
    pub(crate) reader: Reader,
    pub(crate) writer: Writer,
    pub(crate) stats: ConnStats,
}

impl Side {
    /// A new end of connection `conn` of `node`, writing to `tx` and
    /// reading from `rx`.
    pub(crate) fn new(
        node: NodeId,
        conn: ConnId,
        proto: Proto,
        tx: LinkId,
        rx: LinkId,
        stage: Stage,
    ) -> Self {
        let codec = match proto {
            Proto::Bt => Codec::Bt(Limits::new(0)),
            Proto::Ed2k => Codec::Ed2k(Decoder::new(packet::Limits::CLIENT)),
            Proto::Ed2kServer => Codec::Ed2k(Decoder::new(packet::Limits::SERVER)),
        };
        Self {
            node,
            conn,
            proto,
            tx,
            rx,
            peer: usize::MAX,
            open: stage != Stage::Dead,
            stage,
            transfer: None,
            down: Vec::new(),
            up: Vec::new(),
            arrival: None,
            reader: Reader {
                buf: BytesMut::with_capacity(READ_BUF),
                codec,
                state: ReadState::Ready,
                queued: false,
            },
            writer: Writer {
                queue: VecDeque::new(),
                credit: 0,
                unlimited: true,
                state: WriteState::Idle,
                queued: false,
                closing: false,
                unreported: 0,
            },
            stats: ConnStats::default(),
        }
    }
}

/// Part data bytes an eD2k packet carries (0 for anything else).
fn ed2k_part_data(p: &Packet) -> u64 {
    let head = match (p.protocol, p.opcode) {
        (Protocol::Edonkey, op::SENDINGPART) => 24,
        (Protocol::Emule, eop::SENDINGPART_I64) => 32,
        (Protocol::Emule, eop::COMPRESSEDPART) => 24,
        (Protocol::Emule, eop::COMPRESSEDPART_I64) => 28,
        _ => return 0,
    };
    p.payload.len().saturating_sub(head) as u64
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

enum Batch {
    Bt(Vec<Message>),
    Ed2k(Vec<Packet>),
}

impl World {
    /// Registers a new end of a connection of node `node`.
    pub(crate) fn new_side(
        &mut self,
        node: NodeId,
        conn: ConnId,
        proto: Proto,
        tx: LinkId,
        rx: LinkId,
        stage: Stage,
    ) -> SideId {
        let id = self.sides.len();
        if stage != Stage::Dead {
            let n = &mut self.nodes[node];
            n.conns.insert(conn, id);
            n.all_conns.insert(conn, id);
        }
        self.sides.push(Side::new(node, conn, proto, tx, rx, stage));
        id
    }

    /// The connection became a peer of transfer `t` (or a server
    /// connection): its codec, its bucket chains.
    pub(crate) fn set_open(&mut self, s: SideId, t: Option<TransferId>) {
        let n = self.sides[s].node;
        let (down, up) = self.nodes[n].chains(t);
        let pieces = match t.and_then(|t| self.nodes[n].session.torrent(t)) {
            Some(tor) => tor.geometry().piece_count(),
            None => 0,
        };
        let unlimited = up.iter().all(|&b| self.buckets[b].is_unlimited());
        let side = &mut self.sides[s];
        side.stage = Stage::Open;
        side.transfer = t;
        side.down = down;
        side.up = up;
        side.writer.unlimited = unlimited;
        if let Codec::Bt(l) = &mut side.reader.codec {
            *l = Limits::new(pieces);
        }
        if matches!(side.reader.state, ReadState::WaitData(0)) {
            side.reader.state = ReadState::Ready;
        }
    }

    /// Starts (or wakes) a side's reader.
    pub(crate) fn start_reader(&mut self, s: SideId) {
        let r = &mut self.sides[s].reader;
        if !r.queued {
            r.queued = true;
            self.work.push_back(Work::Reader(s));
        }
    }

    /// Queues bytes on a side's writer. `session`: they come from the
    /// session (counted as messages; reported when written), not from the
    /// handshake code.
    pub(crate) fn queue_send(&mut self, s: SideId, data: Vec<Bytes>, payload: u64, session: bool) {
        let trace = self.trace_blocks;
        let now = self.now();
        let side = &mut self.sides[s];
        if payload == 0 && session && side.proto == Proto::Bt {
            // Count what the control run asks for (a copy: the run itself
            // goes out untouched).
            let mut copy = BytesMut::new();
            for d in &data {
                copy.extend_from_slice(d);
            }
            let limits = match &side.reader.codec {
                Codec::Bt(l) => *l,
                Codec::Ed2k(_) => Limits::new(0),
            };
            while let Ok(Some(m)) = wire::decode(&mut copy, &limits) {
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
        if !session {
            w.unreported += data.iter().map(|b| b.len() as u64).sum::<u64>();
        }
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

    /// The runtime's reader loop (`peerconn::reader`, after the
    /// handshake), run until it waits.
    pub(crate) fn run_reader(&mut self, s: SideId) {
        let now = self.now();
        loop {
            let n = self.sides[s].node;
            if !self.sides[s].open || self.nodes[n].frozen {
                return;
            }
            match self.sides[s].stage {
                Stage::Connecting | Stage::Dead => return,
                Stage::Handshake { dialer } => {
                    if self.read_handshake(s, dialer) {
                        continue;
                    }
                    return;
                }
                Stage::Open => {}
            }
            // Decode every whole message and hand the batch over.
            let mut error = None;
            let batch = {
                let r = &mut self.sides[s].reader;
                match &mut r.codec {
                    Codec::Bt(limits) => {
                        let mut msgs = Vec::new();
                        loop {
                            match wire::decode(&mut r.buf, limits) {
                                Ok(Some(m)) => msgs.push(m),
                                Ok(None) => break,
                                Err(e) => {
                                    error = Some(e.to_string());
                                    break;
                                }
                            }
                        }
                        (!msgs.is_empty()).then_some(Batch::Bt(msgs))
                    }
                    Codec::Ed2k(dec) => {
                        let mut pkts = Vec::new();
                        loop {
                            match dec.decode(&mut r.buf) {
                                Ok(Some(p)) => pkts.push(p),
                                Ok(None) => break,
                                Err(e) => {
                                    error = Some(e.to_string());
                                    break;
                                }
                            }
                        }
                        (!pkts.is_empty()).then_some(Batch::Ed2k(pkts))
                    }
                }
            };
            if let Some(b) = batch {
                self.deliver(s, b);
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
                let grant = reserve(&self.buckets, &side.down, want as u64) as usize;
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
                    refund(&self.buckets, &side.down, grant as u64);
                    side.reader.state = ReadState::Done;
                    return self.peer_gone(s, None);
                }
                return;
            }
            let got = link.read_into(now, &mut side.reader.buf, grant);
            refund(&self.buckets, &side.down, (grant - got) as u64);
            side.reader.state = ReadState::Ready;
            side.stats.bytes_read += got as u64;
            side.stats.reads += 1;
            let rx = side.rx;
            self.touch(rx);
        }
    }

    /// Reads (not under the cap) until the peer's 68-byte handshake is in;
    /// returns whether the connection went on to be a peer.
    fn read_handshake(&mut self, s: SideId, dialer: bool) -> bool {
        let now = self.now();
        loop {
            let side = &mut self.sides[s];
            match Handshake::decode(&side.reader.buf) {
                Ok(Some(h)) => {
                    side.reader.buf.advance(Handshake::LEN);
                    side.reader.state = ReadState::Ready;
                    return self.handshake_done(s, dialer, h);
                }
                Ok(None) => {}
                Err(e) => {
                    self.handshake_failed(s, dialer, e.to_string());
                    return false;
                }
            }
            let link = &mut self.links[side.rx].link;
            let avail = link.readable();
            if avail == 0 {
                if link.is_eof() {
                    self.handshake_failed(
                        s,
                        dialer,
                        "connection closed during the handshake".into(),
                    );
                } else {
                    side.reader.state = ReadState::WaitData(0);
                }
                return false;
            }
            let r = &mut side.reader;
            if r.buf.capacity() - r.buf.len() < MIN_FREE {
                r.buf.reserve(READ_BUF);
            }
            let want = (r.buf.capacity() - r.buf.len()).min(avail);
            let got = link.read_into(now, &mut r.buf, want);
            side.stats.bytes_read += got as u64;
            side.stats.reads += 1;
            let rx = side.rx;
            self.touch(rx);
        }
    }

    /// The peer's handshake arrived.
    fn handshake_done(&mut self, s: SideId, dialer: bool, theirs: Handshake) -> bool {
        let (n, conn) = (self.sides[s].node, self.sides[s].conn);
        let now = self.instant();
        if dialer {
            let Some(d) = self.dialing.remove(&(n, conn)) else {
                self.close_side(s);
                return false;
            };
            let weir_session::Hello::Bt { ours, preamble } = &d.hello else {
                unreachable!("a BitTorrent dial says hello with a handshake")
            };
            if theirs.info_hash != ours.info_hash {
                self.nodes[n]
                    .session
                    .dial_failed(conn, "handshake for another torrent", now);
                self.dial_result(n, d.record, Err("handshake for another torrent".into()));
                self.close_side(s);
                self.drain(n);
                return false;
            }
            let info = Established::Bt {
                theirs,
                preamble_sent: !preamble.is_empty(),
            };
            let r = self.nodes[n].session.established(conn, info, now);
            self.dial_result(n, d.record, r.clone().map_err(|e| e.to_string()));
            self.after_established(s, r, d.transfer)
        } else {
            let Some(ours) = self.nodes[n].session.bt_route(&theirs.info_hash) else {
                let why = "handshake for a torrent not taking peers".to_string();
                self.nodes[n].session.closed(conn, Some(why), now);
                self.arrival_result(s, Err(weir_session::Refused::UnknownTorrent));
                self.close_side(s);
                self.drain(n);
                return false;
            };
            let mut hs = BytesMut::with_capacity(Handshake::LEN);
            ours.encode(&mut hs);
            self.queue_send(s, vec![hs.freeze()], 0, false);
            let t = self.nodes[n].session.find_torrent(&theirs.info_hash);
            let info = Established::Bt {
                theirs,
                preamble_sent: false,
            };
            let r = self.nodes[n].session.established(conn, info, now);
            self.arrival_result(s, r.clone().map(|()| conn));
            self.after_established(s, r, t)
        }
    }

    /// Opens the side on success (else closes it: the session forgot the
    /// connection), then carries out what the session asked.
    pub(crate) fn after_established(
        &mut self,
        s: SideId,
        r: Result<(), weir_session::Refused>,
        t: Option<TransferId>,
    ) -> bool {
        let n = self.sides[s].node;
        let ok = r.is_ok();
        if ok {
            self.set_open(s, t);
        } else {
            let conn = self.sides[s].conn;
            self.drop_conn(n, conn);
        }
        self.drain(n);
        ok && self.sides[s].open
    }

    fn handshake_failed(&mut self, s: SideId, dialer: bool, reason: String) {
        let (n, conn) = (self.sides[s].node, self.sides[s].conn);
        let now = self.instant();
        if dialer {
            if let Some(d) = self.dialing.remove(&(n, conn)) {
                self.nodes[n].session.dial_failed(conn, &reason, now);
                self.dial_result(n, d.record, Err(reason));
            }
        } else {
            self.nodes[n].session.closed(conn, Some(reason), now);
        }
        self.close_side(s);
        self.drain(n);
    }

    pub(crate) fn arrival_result(&mut self, s: SideId, r: Result<ConnId, weir_session::Refused>) {
        let n = self.sides[s].node;
        if let Some(i) = self.sides[s].arrival {
            self.nodes[n].arrivals[i].result = r;
        }
    }

    /// Hands decoded messages to the session (or the node's index
    /// server), counting what they carry.
    fn deliver(&mut self, s: SideId, batch: Batch) {
        let now = self.now();
        let at = self.instant();
        let trace = self.trace_blocks;
        let (n, conn, t) = (
            self.sides[s].node,
            self.sides[s].conn,
            self.sides[s].transfer,
        );
        match batch {
            Batch::Bt(msgs) => {
                for m in &msgs {
                    let stats = &mut self.sides[s].stats;
                    match m {
                        Message::Piece { index, begin, data } => {
                            stats.blocks_received += 1;
                            stats.payload_received += data.len() as u64;
                            stats.payload.add(now, data.len() as u64);
                            if trace {
                                stats.received.push((now, *index, *begin));
                            }
                            self.nodes[n].count_received(Proto::Bt, t, now, data.len() as u64);
                        }
                        Message::Reject(_) => stats.rejects_received += 1,
                        _ => {}
                    }
                }
                self.nodes[n].session.bt_messages(conn, msgs, at);
            }
            Batch::Ed2k(pkts) => {
                if self.nodes[n].server.is_some() && self.sides[s].proto == Proto::Ed2kServer {
                    return self.server_packets(s, pkts);
                }
                for p in &pkts {
                    let len = ed2k_part_data(p);
                    if len == 0 {
                        continue;
                    }
                    let stats = &mut self.sides[s].stats;
                    stats.blocks_received += 1;
                    stats.payload_received += len;
                    stats.payload.add(now, len);
                    let file = p
                        .payload
                        .get(..16)
                        .and_then(|h| <[u8; 16]>::try_from(h).ok())
                        .map(weir_ed2k::Md4Hash);
                    let t = file.and_then(|h| self.nodes[n].ed2k_files.get(&h).copied());
                    self.nodes[n].count_received(Proto::Ed2k, t, now, len);
                }
                self.nodes[n].session.ed2k_packets(conn, pkts, at);
            }
        }
        self.drain(n);
    }

    /// The runtime's writer loop (`peerconn::writer`), run until it waits.
    pub(crate) fn run_writer(&mut self, s: SideId) {
        let now = self.now();
        loop {
            let n = self.sides[s].node;
            if self.nodes[n].frozen {
                return;
            }
            let side = &mut self.sides[s];
            let w = &mut side.writer;
            if w.state == WriteState::Done {
                return;
            }
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
                let g = reserve(&self.buckets, &side.up, need);
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
            let hidden = w.unreported.min(wrote as u64);
            w.unreported -= hidden;
            let report = wrote as u64 - hidden;
            side.stats.bytes_written += wrote as u64;
            side.stats.writes += 1;
            let to_session = side.open && report > 0 && self.nodes[n].server.is_none();
            if to_session {
                let (conn, at) = (side.conn, self.instant());
                self.nodes[n].session.sent(conn, report, at);
                self.drain(n);
            }
        }
    }

    /// The runtime's `drop_conn`: the reader is aborted, the writer flushes
    /// what is queued and then ends the stream.
    pub(crate) fn drop_conn(&mut self, n: NodeId, conn: ConnId) {
        let Some(s) = self.nodes[n].conns.remove(&conn) else {
            return;
        };
        self.close_side(s);
    }

    /// Closes one end in order (FIN after what is queued).
    pub(crate) fn close_side(&mut self, s: SideId) {
        let n = self.sides[s].node;
        let conn = self.sides[s].conn;
        if self.nodes[n].conns.get(&conn) == Some(&s) {
            self.nodes[n].conns.remove(&conn);
        }
        let side = &mut self.sides[s];
        side.open = false;
        if let ReadState::WaitData(grant) = side.reader.state {
            refund(&self.buckets, &side.down, grant as u64);
        }
        side.reader.state = ReadState::Done;
        side.writer.closing = true;
        if !matches!(
            side.writer.state,
            WriteState::WaitWritable | WriteState::Done
        ) && !side.writer.queued
        {
            side.writer.queued = true;
            self.work.push_back(Work::Writer(s));
        }
    }

    /// Aborts one end: nothing more is read or written, no FIN.
    pub(crate) fn reset_side(&mut self, s: SideId) {
        let n = self.sides[s].node;
        let conn = self.sides[s].conn;
        if self.nodes[n].conns.get(&conn) == Some(&s) {
            self.nodes[n].conns.remove(&conn);
        }
        let side = &mut self.sides[s];
        side.open = false;
        side.stage = Stage::Dead;
        if let ReadState::WaitData(grant) = side.reader.state {
            refund(&self.buckets, &side.down, grant as u64);
        }
        side.reader.state = ReadState::Done;
        side.writer.state = WriteState::Done;
        side.writer.queue.clear();
    }

    /// The reader reached the end of the stream or could not decode.
    fn peer_gone(&mut self, s: SideId, error: Option<String>) {
        let (n, conn) = (self.sides[s].node, self.sides[s].conn);
        if self.nodes[n].server.is_some() && self.sides[s].proto == Proto::Ed2kServer {
            self.server_conn_gone(s);
            return;
        }
        let now = self.instant();
        self.nodes[n].session.closed(conn, error, now);
        self.drop_conn(n, conn);
        self.drain(n);
    }
}
