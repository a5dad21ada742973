//! The torrent state machine: one torrent, all its peer connections.
//!
//! Sans-IO. The runtime does the handshake on a socket and then tells the
//! torrent about the connection ([`Torrent::add_peer`]); after that it feeds
//! decoded messages ([`Torrent::handle_message`]), storage completions
//! ([`Torrent::handle_storage`]), write completions ([`Torrent::on_sent`])
//! and timeouts ([`Torrent::handle_timeout`]). After each call it drains
//! [`Torrent::poll_event`] until it returns `None`, then sleeps until
//! [`Torrent::poll_timeout`] or the next input. Every decision (what to ask
//! whom, whom to serve, whom to drop) is made here; time only comes in as
//! the `now` argument.
//!
//! Downloads: requests go out at once whenever a peer's pipeline has room
//! (never on a timer); each block's payload is a `Bytes` slice of the
//! receive buffer, fed to the peer's meters, handed to storage in order
//! within its piece, and hashed there as it is written. Uploads: a request
//! becomes a storage read (adjacent requests are read together), and the
//! data goes back as a header plus a slice of the read buffer.

mod lost;
mod peer;
mod smartban;
mod upload;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
use weir_core::geometry::{BlockSpan, Geometry};
use weir_core::picker::{Order, Picker, Received};
use weir_core::storage::{Digest, StorageEvent, StorageOp};

use crate::metainfo::Metainfo;
use crate::wire::{BLOCK_LEN, BlockRef, ExtHandshake, Handshake, Message};
use peer::{Has, Outstanding, Peer};

/// A connection, as the runtime and the torrent both name it.
pub type ConnId = u32;

/// Stands for the sender of data an earlier run wrote (a resumed piece).
const EARLIER_RUN: ConnId = ConnId::MAX;

/// How often the torrent re-sizes pipelines and checks timeouts.
const TICK: Duration = Duration::from_millis(250);
/// A request unanswered this long means the peer is not serving us.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Close a connection that has said nothing for this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(180);
/// Send a keep-alive after this much silence.
const KEEPALIVE: Duration = Duration::from_secs(90);
/// Re-rank unchoked peers this often.
const CHOKE_ROUND: Duration = Duration::from_secs(10);
/// Rotate the optimistic unchoke every third round.
const OPTIMISTIC_ROUNDS: u32 = 3;
/// In endgame a peer duplicates requests only while it has fewer than this
/// in flight.
const ENDGAME_DEPTH: usize = 8;
/// Bad pieces a peer may contribute to before it is banned.
const BAN_STRIKES: u32 = 2;

/// Tunables of one torrent.
#[derive(Clone, Debug)]
pub struct TorrentConfig {
    /// Our peer id.
    pub peer_id: [u8; 20],
    /// The port we listen on (sent in the extension handshake).
    pub listen_port: Option<u16>,
    /// Rarest first or sequential.
    pub order: Order,
    /// Peers we upload to at once (including the optimistic unchoke).
    pub upload_slots: usize,
    /// Requests we accept queued from one peer (advertised as `reqq`).
    pub max_peer_requests: u32,
    /// Bytes of one peer's uploads in flight (reads plus unsent).
    pub upload_watermark: u64,
    /// Largest storage read for uploads (adjacent requests coalesce).
    pub max_read: u32,
    /// Bytes handed to storage but not yet verified before new requests
    /// wait (bounds memory when the disk is slower than the network).
    pub max_unverified: u64,
    /// Seed for the picker's tie-breaks and the optimistic unchoke.
    pub seed: u64,
    /// Client name sent in the extension handshake.
    pub client_name: String,
    /// Most requests in flight to one peer, whatever its rate (the
    /// pipeline sizes below this; 1 makes every block a round trip).
    pub max_requests: u32,
    /// Download missing pieces (off: only upload what is had, as `weir
    /// seed` does; the torrent is then never interested).
    pub download: bool,
}

impl TorrentConfig {
    /// Defaults for a peer id.
    pub fn new(peer_id: [u8; 20]) -> Self {
        Self {
            peer_id,
            listen_port: None,
            order: Order::RarestFirst,
            upload_slots: 8,
            max_peer_requests: 4096,
            upload_watermark: 4 << 20,
            max_read: 1 << 20,
            max_unverified: 32 << 20,
            seed: 0x5eed,
            client_name: concat!("weir ", env!("CARGO_PKG_VERSION")).to_string(),
            max_requests: 4096,
            download: true,
        }
    }
}

/// Something the runtime must do.
#[derive(Debug)]
pub enum Event {
    /// Write these bytes to the connection, in order.
    Send {
        /// The connection.
        conn: ConnId,
        /// Chunks to write (vectored); whole messages.
        data: Vec<Bytes>,
        /// Block data bytes among them (0: control messages only), which an
        /// upload cap charges; control messages never wait for a cap.
        payload: u64,
    },
    /// Perform a storage operation.
    Storage(StorageOp),
    /// Close the connection (after sending what was queued before it).
    Close {
        /// The connection.
        conn: ConnId,
        /// Why, for the log.
        reason: String,
    },
    /// Never connect to this address again.
    Ban {
        /// The address.
        addr: SocketAddr,
        /// Why, for the log.
        reason: String,
    },
    /// A piece passed its hash check.
    PieceVerified(u32),
    /// Every piece is verified: the download is complete.
    Complete,
    /// The start-up check of existing data finished.
    CheckDone,
    /// Storage failed: the torrent cannot continue.
    Fatal(String),
}

/// Counters and rates for progress displays.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Payload bytes received (verified or not).
    pub downloaded: u64,
    /// Payload bytes sent.
    pub uploaded: u64,
    /// Download rate (display window), bytes/s.
    pub download_rate: f64,
    /// Upload rate (display window), bytes/s.
    pub upload_rate: f64,
    /// Connected peers.
    pub peers: usize,
    /// Pieces verified.
    pub pieces_had: u32,
    /// Pieces in the torrent.
    pub pieces: u32,
    /// Bytes still to download.
    pub bytes_left: u64,
    /// Bytes of verified data.
    pub bytes_had: u64,
    /// Pieces that failed their hash check.
    pub hash_failures: u32,
    /// Peers dropped for protocol violations.
    pub protocol_errors: u32,
    /// Peers banned for bad data.
    pub banned: u32,
    /// Blocks received twice (endgame duplicates).
    pub duplicate_blocks: u32,
}

/// A piece's blocks waiting to be handed to storage in order.
#[derive(Debug, Default)]
struct Assembly {
    /// Bytes handed to storage so far.
    handed: u32,
    /// Contiguous blocks after `handed`, not yet handed over.
    ready: Vec<Bytes>,
    /// End of the contiguous data (`handed` + bytes in `ready`).
    next: u32,
    /// Blocks that arrived ahead of a gap.
    pending: BTreeMap<u32, Bytes>,
    /// (offset, length, sender) of every block that went into it.
    blocks_from: Vec<(u32, u32, ConnId)>,
}

/// Contiguous data is handed to storage in runs of at least this much (or
/// at the end of a piece): one vectored write per run, not per block.
const WRITE_RUN: u32 = 256 * 1024;

/// One torrent and its peers.
#[derive(Debug)]
pub struct Torrent {
    info_hash: [u8; 20],
    geo: Geometry,
    cfg: TorrentConfig,
    picker: Picker,
    peers: BTreeMap<ConnId, Peer>,
    assembly: BTreeMap<u32, Assembly>,
    unverified: u64,
    events: VecDeque<Event>,
    dirty: Vec<ConnId>,
    reads: BTreeMap<u64, upload::Read>,
    evidence: BTreeMap<u32, smartban::Evidence>,
    banned: std::collections::BTreeSet<SocketAddr>,
    next_read: u64,
    checking: Bitfield,
    checks_in_flight: u32,
    check_cursor: u32,
    next_tick: Option<Instant>,
    next_choke: Option<Instant>,
    choke_rounds: u32,
    rng: fastrand::Rng,
    stats: Stats,
    complete_announced: bool,
}

impl Torrent {
    /// A torrent for `meta`, having the pieces in `had` (from resume), and
    /// to check the pieces in `check` from storage before it starts.
    pub fn new(meta: &Metainfo, cfg: TorrentConfig, had: &Bitfield, check: &Bitfield) -> Self {
        let geo = Geometry::new(meta.info.total_length(), meta.info.piece_length, BLOCK_LEN)
            .expect("metainfo guarantees a valid geometry");
        let mut picker = Picker::new(geo, cfg.order, cfg.seed);
        for p in had.iter_ones() {
            picker.set_had(p);
        }
        let mut checking = Bitfield::new(geo.piece_count());
        for p in check.iter_ones() {
            if !had.get(p) {
                checking.set(p);
            }
        }
        let stats = Stats {
            pieces: geo.piece_count(),
            ..Stats::default()
        };
        let mut t = Self {
            info_hash: meta.info_hash,
            rng: fastrand::Rng::with_seed(cfg.seed ^ 0x9e37_79b9),
            geo,
            cfg,
            picker,
            peers: BTreeMap::new(),
            assembly: BTreeMap::new(),
            unverified: 0,
            events: VecDeque::new(),
            dirty: Vec::new(),
            reads: BTreeMap::new(),
            evidence: BTreeMap::new(),
            banned: std::collections::BTreeSet::new(),
            next_read: 0,
            checking,
            checks_in_flight: 0,
            check_cursor: 0,
            next_tick: None,
            next_choke: None,
            choke_rounds: 0,
            stats,
            complete_announced: false,
        };
        t.issue_checks();
        t
    }

    /// The expected SHA-1 of every piece, for the storage layer.
    pub fn digests(meta: &Metainfo) -> Arc<[Digest]> {
        meta.info.pieces.iter().map(|h| Digest::Sha1(*h)).collect()
    }

    /// Our handshake.
    pub fn handshake(&self) -> Handshake {
        Handshake::new(self.info_hash, self.cfg.peer_id)
    }

    /// The torrent's info-hash.
    pub fn info_hash(&self) -> [u8; 20] {
        self.info_hash
    }

    /// Pieces and blocks.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Whether the start-up check is still running (connect no peers yet).
    pub fn is_checking(&self) -> bool {
        self.checking.count() > 0 || self.checks_in_flight > 0
    }

    /// Whether every piece is verified.
    pub fn is_complete(&self) -> bool {
        self.picker.is_complete() && !self.is_checking()
    }

    /// Pieces verified so far.
    pub fn had(&self) -> &Bitfield {
        self.picker.had()
    }

    /// Counters and rates at `now`.
    pub fn stats(&self, now: Instant) -> Stats {
        let mut s = self.stats.clone();
        s.peers = self.peers.len();
        s.pieces_had = self.picker.had().count();
        s.bytes_left = self.picker.bytes_left();
        s.bytes_had = self.geo.total_len() - s.bytes_left;
        s.download_rate = self.peers.values().map(|p| p.down.display_rate(now)).sum();
        s.upload_rate = self.peers.values().map(|p| p.up.display_rate(now)).sum();
        s
    }

    /// An earlier run wrote the first `bytes` of `piece`: only the rest is
    /// asked for. Whole blocks are resumed; returns how many bytes were
    /// taken (0: none), which the storage layer must hash back before any
    /// new write to the piece. Call before any peer is added. Nothing is
    /// taken of a piece that is had or being checked.
    pub fn resume_partial(&mut self, piece: u32, bytes: u32) -> u32 {
        if piece >= self.geo.piece_count()
            || self.picker.had().get(piece)
            || self.checking.get(piece)
            || self.assembly.contains_key(&piece)
        {
            return 0;
        }
        let bytes = bytes - bytes % BLOCK_LEN;
        if bytes == 0 || bytes >= self.geo.piece_size(piece) {
            return 0;
        }
        self.picker.resume_prefix(piece, bytes);
        let a = self.assembly.entry(piece).or_default();
        a.handed = bytes;
        a.next = bytes;
        // Blamed on nobody in particular if the piece fails.
        a.blocks_from.push((0, bytes, EARLIER_RUN));
        self.unverified += u64::from(bytes);
        bytes
    }

    /// Switches between rarest-first and sequential picking.
    pub fn set_order(&mut self, order: Order) {
        self.picker.set_order(order);
    }

    /// A connection finished its handshake: from now on it is a peer.
    pub fn add_peer(&mut self, conn: ConnId, addr: SocketAddr, theirs: &Handshake, now: Instant) {
        self.add_peer_after(conn, addr, theirs, false, now);
    }

    /// Messages to send right behind our handshake when we dial, before the
    /// peer's handshake arrives: `interested`, when we have no piece yet (so
    /// there is no bitfield to send first, and any peer with data is worth
    /// asking). Sent with the handshake it saves a round trip before the
    /// first request. Empty when there is nothing to say ahead.
    pub fn preamble(&self) -> Bytes {
        if !self.cfg.download
            || self.is_checking()
            || self.picker.had().count() > 0
            || self.picker.is_complete()
        {
            return Bytes::new();
        }
        let mut out = bytes::BytesMut::new();
        crate::wire::encode(&Message::Interested, &mut out);
        out.freeze()
    }

    /// [`Torrent::add_peer`] for a connection on which [`Torrent::preamble`]
    /// was sent (when `preamble_sent`): the bitfield and interest it carried
    /// are not sent again.
    pub fn add_peer_after(
        &mut self,
        conn: ConnId,
        addr: SocketAddr,
        theirs: &Handshake,
        preamble_sent: bool,
        now: Instant,
    ) {
        let mut p = Peer::new(
            addr,
            theirs.supports_fast(),
            theirs.supports_extended(),
            self.geo.piece_count(),
            self.cfg.max_requests,
            now,
        );
        if p.extended {
            let ext = ExtHandshake {
                reqq: Some(self.cfg.max_peer_requests),
                v: Some(self.cfg.client_name.clone()),
                p: self.cfg.listen_port,
                ..ExtHandshake::default()
            };
            let payload = Bytes::from(ext.encode());
            p.send(&Message::Extended { id: 0, payload }, now);
        }
        let had = self.picker.had();
        if preamble_sent {
            p.am_interested = true;
            // Pieces verified since the preamble went out (no bitfield may
            // follow other messages): one `have` each.
            for index in had.iter_ones() {
                p.send(&Message::Have { index }, now);
            }
        } else if p.fast && had.is_full() {
            p.send(&Message::HaveAll, now);
        } else if p.fast && had.count() == 0 {
            p.send(&Message::HaveNone, now);
        } else if had.count() > 0 {
            p.send(
                &Message::Bitfield(Bytes::copy_from_slice(had.as_bytes())),
                now,
            );
        }
        let have_any = had.count() > 0;
        self.peers.insert(conn, p);
        // A free upload slot is given at once, before the peer even says it
        // is interested: its first request then needs no extra round trip.
        let unchoked = self.peers.values().filter(|p| !p.am_choking).count();
        if have_any && unchoked < self.cfg.upload_slots {
            self.unchoke(conn, now);
        }
        self.mark_dirty(conn);
        self.ensure_tick(now);
        self.flush();
    }

    /// A connection closed (by either side).
    pub fn remove_peer(&mut self, conn: ConnId, _now: Instant) {
        let Some(p) = self.peers.remove(&conn) else {
            return;
        };
        for &(piece, begin) in p.outstanding.keys() {
            self.picker.release(conn, piece, begin);
        }
        if !matches!(p.has, Has::Nothing(_)) {
            self.picker.peer_left(p.has.as_peer_has());
        }
        self.reads.retain(|_, r| r.conn != conn);
        self.dirty.retain(|c| *c != conn);
        // Blocks it freed may be wanted by someone else now.
        let others: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in others {
            self.fill_requests(c, _now);
        }
        self.flush();
    }

    /// The runtime could not decode what the peer sent: drop and count it.
    pub fn peer_error(&mut self, conn: ConnId, reason: String, now: Instant) {
        self.protocol_error(conn, reason);
        self.remove_peer(conn, now);
    }

    /// A message from a peer.
    pub fn handle_message(&mut self, conn: ConnId, msg: Message, now: Instant) {
        let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) else {
            return;
        };
        p.last_recv_at = now;
        // Clients differ in when they send a bitfield: after the extension
        // handshake and allowed-fast messages, after haves, and aria2 even
        // sends one again mid-session. A bitfield is accepted whenever it
        // comes and merged with what the peer was known to have.
        match msg {
            Message::KeepAlive | Message::Port(_) | Message::Suggest { .. } => {}
            Message::AllowedFast { .. } => {}
            Message::Choke => self.on_choke(conn),
            Message::Unchoke => {
                p.peer_choking = false;
                self.fill_requests(conn, now);
            }
            Message::Interested => {
                p.peer_interested = true;
                self.on_interested(conn, now);
            }
            Message::NotInterested => {
                p.peer_interested = false;
                p.requests.clear();
                self.on_not_interested(conn, now);
            }
            Message::Have { index } => self.on_have(conn, index, now),
            Message::Bitfield(bits) => match Bitfield::from_bytes(&bits, self.geo.piece_count()) {
                Ok(b) => self.on_bitfield(conn, b, now),
                Err(e) => self.fail(conn, e.to_string()),
            },
            Message::HaveAll | Message::HaveNone if !p.fast => {
                self.fail(conn, "fast-extension message without the fast bit".into())
            }
            Message::HaveAll => self.on_bitfield(conn, Bitfield::full(self.geo.piece_count()), now),
            Message::HaveNone => {}
            Message::Request(r) => self.on_request(conn, r, now),
            Message::Cancel(r) => self.on_cancel(conn, r),
            Message::Reject(r) => {
                if !p.fast {
                    return self.fail(conn, "reject without the fast extension".into());
                }
                if p.outstanding.remove(&(r.index, r.begin)).is_some() {
                    self.picker.release(conn, r.index, r.begin);
                }
                self.fill_requests(conn, now);
            }
            Message::Piece { index, begin, data } => self.on_block(conn, index, begin, data, now),
            Message::Extended { id: 0, payload } => match ExtHandshake::decode(&payload) {
                Ok(ext) => {
                    if let Some(q) = ext.reqq {
                        p.pipeline.set_peer_limit(q);
                    }
                    p.client = ext.v;
                }
                Err(e) => self.fail(conn, e.to_string()),
            },
            Message::Extended { .. } => {}
        }
        self.flush();
    }

    /// Bytes the runtime finished writing to a connection.
    pub fn on_sent(&mut self, conn: ConnId, bytes: u64, now: Instant) {
        if let Some(p) = self.peers.get_mut(&conn) {
            p.upload_queued = p.upload_queued.saturating_sub(bytes);
            self.serve(conn, now);
            self.flush();
        }
    }

    /// A storage operation finished.
    pub fn handle_storage(&mut self, ev: StorageEvent, now: Instant) {
        match ev {
            StorageEvent::PieceDone { piece, ok } => self.on_piece_done(piece, ok, now),
            StorageEvent::ReadDone { id, data } if id & smartban::SMARTBAN_READ != 0 => {
                self.on_smartban_read(id, data, now)
            }
            StorageEvent::ReadDone { id, data } => self.on_read_done(id, data, now),
            StorageEvent::ReadFailed { id, lost, fault } if id & smartban::SMARTBAN_READ != 0 => {
                self.on_smartban_read(id, Err(fault.to_string()), now);
                self.on_pieces_lost(&lost, now);
            }
            StorageEvent::ReadFailed { id, lost, .. } => {
                self.on_pieces_lost(&lost, now);
                self.on_read_failed(id, now);
            }
            StorageEvent::Failed { error } => self.events.push_back(Event::Fatal(error)),
        }
        self.flush();
    }

    /// Periodic work: pipeline sizing, timeouts, choking, keep-alives.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.next_tick.is_some_and(|t| t <= now) {
            self.next_tick = (!self.peers.is_empty()).then(|| now + TICK);
            self.tick(now);
        }
        if self.next_choke.is_some_and(|t| t <= now) {
            self.next_choke = (!self.peers.is_empty()).then(|| now + CHOKE_ROUND);
            self.choke_round(now);
        }
        self.flush();
    }

    /// When [`Torrent::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.next_tick, self.next_choke) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next thing the runtime must do.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.flush();
        self.events.pop_front()
    }

    // ---- download side -------------------------------------------------

    fn on_bitfield(&mut self, conn: ConnId, mut bits: Bitfield, now: Instant) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        if p.has.is_seed() {
            return;
        }
        if let Has::Some(before) = &p.has {
            // Haves (or an earlier bitfield) came first: forget them and
            // count the union once.
            self.picker
                .peer_left(weir_core::picker::PeerHas::Some(before));
            for i in before.iter_ones() {
                bits.set(i);
            }
        }
        p.has = if bits.is_full() {
            Has::All
        } else {
            Has::Some(bits)
        };
        self.picker.peer_joined(p.has.as_peer_has());
        if p.has.is_seed() && self.picker.is_complete() {
            return self.close(conn, "both seeds".into());
        }
        self.update_interest(conn, now);
    }

    fn on_have(&mut self, conn: ConnId, index: u32, now: Instant) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        let newly = match &mut p.has {
            Has::All => false,
            Has::Nothing(b) => {
                let mut b = std::mem::take(b);
                let newly = b.set(index);
                p.has = Has::Some(b);
                newly
            }
            Has::Some(b) => b.set(index),
        };
        if !newly {
            return;
        }
        if let Has::Some(b) = &p.has
            && b.is_full()
        {
            let b = b.clone();
            p.has = Has::All;
            self.picker.peer_left(weir_core::picker::PeerHas::Some(&b));
            self.picker.peer_joined(weir_core::picker::PeerHas::All);
        } else {
            self.picker.peer_has(index);
        }
        if !self.picker.had().get(index) {
            self.update_interest(conn, now);
        }
    }

    fn update_interest(&mut self, conn: ConnId, now: Instant) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        let want = self.cfg.download && self.picker.is_interesting(p.has.as_peer_has());
        if want != p.am_interested {
            p.am_interested = want;
            p.send(
                &if want {
                    Message::Interested
                } else {
                    Message::NotInterested
                },
                now,
            );
            self.mark_dirty(conn);
        }
        if want {
            self.fill_requests(conn, now);
        }
    }

    fn on_choke(&mut self, conn: ConnId) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        p.peer_choking = true;
        p.pipeline.on_choke();
        // Without the fast extension a choke cancels every request; with it
        // the peer rejects each one explicitly.
        if !p.fast {
            for (piece, begin) in std::mem::take(&mut p.outstanding).into_keys() {
                self.picker.release(conn, piece, begin);
            }
        }
    }

    /// Asks the peer for as many blocks as its pipeline has room for.
    fn fill_requests(&mut self, conn: ConnId, now: Instant) {
        let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) else {
            return;
        };
        if p.peer_choking || !p.am_interested || self.unverified >= self.cfg.max_unverified {
            return;
        }
        let mut n = p.pipeline.top_up(p.outstanding.len() as u32) as usize;
        if p.snubbed {
            // A snubbed peer gets nothing others could deliver: only an
            // endgame duplicate, one at a time, to see if it came back.
            if !self.picker.in_endgame() {
                return;
            }
            n = n.min(1usize.saturating_sub(p.outstanding.len()));
        }
        if self.picker.in_endgame() {
            // Endgame: every block is already asked of someone. A peer with
            // little in flight may duplicate a few, not a whole pipeline.
            n = n.min(ENDGAME_DEPTH.saturating_sub(p.outstanding.len()));
        }
        if n == 0 {
            return;
        }
        let mut spans: Vec<BlockSpan> = Vec::with_capacity(n);
        self.picker.pick(conn, p.has.as_peer_has(), n, &mut spans);
        for s in &spans {
            p.outstanding.insert(
                (s.piece, s.begin),
                Outstanding {
                    len: s.len,
                    sent_at: now,
                },
            );
            p.send(
                &Message::Request(BlockRef {
                    index: s.piece,
                    begin: s.begin,
                    length: s.len,
                }),
                now,
            );
        }
        if !spans.is_empty() {
            self.mark_dirty(conn);
        } else if p.outstanding.is_empty() && !self.picker.is_interesting(p.has.as_peer_has()) {
            p.am_interested = false;
            p.send(&Message::NotInterested, now);
            self.mark_dirty(conn);
        }
    }

    fn on_block(&mut self, conn: ConnId, index: u32, begin: u32, data: Bytes, now: Instant) {
        let len = data.len() as u32;
        let p = self.peers.get_mut(&conn).expect("caller checked");
        // The one place every downloaded payload byte passes through.
        p.down.record(now, u64::from(len));
        self.stats.downloaded += u64::from(len);
        p.last_block_at = now;
        p.snubbed = false;
        if let Some(o) = p.outstanding.remove(&(index, begin)) {
            let _ = o.len;
            p.pipeline
                .on_block(now, now.saturating_duration_since(o.sent_at), len);
        }
        match self.picker.received(conn, index, begin, len) {
            Received::New {
                cancel,
                piece_complete: _,
            } => {
                for other in cancel {
                    if let Some(o) = self.peers.get_mut(&other)
                        && o.outstanding.remove(&(index, begin)).is_some()
                    {
                        o.send(
                            &Message::Cancel(BlockRef {
                                index,
                                begin,
                                length: len,
                            }),
                            now,
                        );
                        self.mark_dirty(other);
                    }
                }
                self.assemble(conn, index, begin, data);
            }
            Received::Duplicate => self.stats.duplicate_blocks += 1,
            Received::Unexpected => {
                return self.fail(conn, format!("unrequested block {index}:{begin}+{len}"));
            }
        }
        self.fill_requests(conn, now);
    }

    /// Hands the piece's contiguous data to storage in runs.
    fn assemble(&mut self, conn: ConnId, piece: u32, begin: u32, data: Bytes) {
        let size = self.geo.piece_size(piece);
        let a = self.assembly.entry(piece).or_default();
        a.blocks_from.push((begin, data.len() as u32, conn));
        if begin != a.next {
            a.pending.insert(begin, data);
            return;
        }
        a.next += data.len() as u32;
        a.ready.push(data);
        while let Some(d) = a.pending.remove(&a.next) {
            a.next += d.len() as u32;
            a.ready.push(d);
        }
        if a.next - a.handed >= WRITE_RUN || a.next == size {
            let begin = a.handed;
            self.unverified += u64::from(a.next - a.handed);
            a.handed = a.next;
            let data = std::mem::take(&mut a.ready);
            self.events
                .push_back(Event::Storage(StorageOp::Write { piece, begin, data }));
        }
    }

    fn on_piece_done(&mut self, piece: u32, ok: bool, now: Instant) {
        if self.checking.get(piece) {
            return self.on_check_done(piece, ok);
        }
        let size = u64::from(self.geo.piece_size(piece));
        self.unverified = self.unverified.saturating_sub(size);
        let a = self.assembly.remove(&piece).unwrap_or_default();
        if ok {
            self.picker.piece_verified(piece);
            self.piece_passed(piece);
            self.events.push_back(Event::PieceVerified(piece));
            let conns: Vec<ConnId> = self.peers.keys().copied().collect();
            for c in conns {
                let p = self.peers.get_mut(&c).expect("listed");
                p.send(&Message::Have { index: piece }, now);
                self.mark_dirty(c);
            }
            if self.picker.is_complete() && !self.complete_announced {
                self.complete_announced = true;
                self.events.push_back(Event::Complete);
                self.drop_seeds();
            }
        } else {
            self.piece_failed(piece, a, now);
        }
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            self.fill_requests(c, now);
        }
    }

    fn drop_seeds(&mut self) {
        let seeds: Vec<ConnId> = self
            .peers
            .iter()
            .filter(|(_, p)| p.has.is_seed())
            .map(|(c, _)| *c)
            .collect();
        for c in seeds {
            self.close(c, "download complete; peer is a seed".into());
        }
    }

    // ---- start-up check --------------------------------------------------

    fn issue_checks(&mut self) {
        const IN_FLIGHT: u32 = 8;
        while self.checks_in_flight < IN_FLIGHT && self.check_cursor < self.geo.piece_count() {
            let p = self.check_cursor;
            self.check_cursor += 1;
            if self.checking.get(p) {
                self.checks_in_flight += 1;
                self.events
                    .push_back(Event::Storage(StorageOp::Check { piece: p }));
            }
        }
    }

    fn on_check_done(&mut self, piece: u32, ok: bool) {
        self.checking.clear(piece);
        self.checks_in_flight = self.checks_in_flight.saturating_sub(1);
        if ok {
            self.picker.set_had(piece);
        }
        self.issue_checks();
        if !self.is_checking() {
            self.events.push_back(Event::CheckDone);
            if self.picker.is_complete() {
                self.complete_announced = true;
            }
        }
    }

    // ---- timers -----------------------------------------------------------

    fn ensure_tick(&mut self, now: Instant) {
        if self.next_tick.is_none() {
            self.next_tick = Some(now + TICK);
        }
        if self.next_choke.is_none() {
            self.next_choke = Some(now + CHOKE_ROUND);
        }
    }

    fn tick(&mut self, now: Instant) {
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            let p = self.peers.get_mut(&c).expect("listed");
            let rate = p.down.recent_rate(now);
            p.pipeline.on_tick(now, rate);
            if now.saturating_duration_since(p.last_recv_at) > IDLE_TIMEOUT {
                self.close(c, "idle".into());
                continue;
            }
            let keepalive = now.saturating_duration_since(p.last_send_at) > KEEPALIVE;
            if keepalive {
                p.send(&Message::KeepAlive, now);
            }
            let timed_out = p
                .outstanding
                .values()
                .any(|o| now.saturating_duration_since(o.sent_at) > REQUEST_TIMEOUT);
            let snubbed_now =
                timed_out && now.saturating_duration_since(p.last_block_at) > REQUEST_TIMEOUT;
            if snubbed_now {
                // Snubbed: its blocks go to others; until it delivers again
                // it is asked only for endgame duplicates.
                p.snubbed = true;
                p.pipeline.on_timeout();
                let keys: Vec<(u32, u32)> = p.outstanding.keys().copied().collect();
                p.outstanding.clear();
                for (piece, begin) in keys {
                    self.picker.release(c, piece, begin);
                }
            }
            if keepalive {
                self.mark_dirty(c);
            }
            if !snubbed_now {
                self.fill_requests(c, now);
            }
        }
    }

    // ---- helpers ------------------------------------------------------------

    fn mark_dirty(&mut self, conn: ConnId) {
        if !self.dirty.contains(&conn) {
            self.dirty.push(conn);
        }
    }

    /// Moves queued bytes of every touched peer into Send events.
    fn flush(&mut self) {
        for conn in std::mem::take(&mut self.dirty) {
            if let Some(p) = self.peers.get_mut(&conn)
                && p.has_output()
            {
                for (data, payload) in p.take_output() {
                    self.events.push_back(Event::Send {
                        conn,
                        data,
                        payload,
                    });
                }
            }
        }
    }

    fn protocol_error(&mut self, conn: ConnId, reason: String) {
        self.stats.protocol_errors += 1;
        if let Some(p) = self.peers.get(&conn) {
            tracing_free_log(p.addr, &reason);
        }
    }

    /// Drops a peer that broke the protocol.
    fn fail(&mut self, conn: ConnId, reason: String) {
        self.protocol_error(conn, reason.clone());
        self.close(conn, reason);
    }

    fn close(&mut self, conn: ConnId, reason: String) {
        if let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) {
            p.closing = true;
            self.mark_dirty(conn);
            self.flush();
            self.events.push_back(Event::Close { conn, reason });
        }
    }
}

/// The core does not log (no I/O); the runtime logs the Close reason.
fn tracing_free_log(_addr: SocketAddr, _reason: &str) {}

#[cfg(test)]
mod tests;
