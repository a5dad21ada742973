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

mod dormant;
mod lost;
mod peer;
mod slots;
mod smartban;
mod upload;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
pub use weir_core::close::{BanReason, CloseReason};
use weir_core::content::{
    Accepted, CONTENT_READ, Content, ContentConfig, ContentEvent, ContentStats, Sender,
};
use weir_core::geometry::{BlockSpan, Geometry};
use weir_core::outbox::Dirty;
use weir_core::picker::Order;
use weir_core::storage::{Digests, StorageEvent, StorageOp};

use crate::metainfo::Metainfo;
use crate::wire::{BLOCK_LEN, BlockRef, ExtHandshake, Handshake, Message};
pub use dormant::{Dormant, SharedConfigs, TorrentRef};
use peer::{Has, Outstanding, Peer};

/// A connection, as the runtime and the torrent both name it.
pub type ConnId = u32;

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
/// Blocks nobody asked a peer for that it may send (dropped, each a
/// violation) before it is disconnected.
const UNREQUESTED_ALLOWANCE: u32 = 8;

/// One connected peer of a torrent, as [`Torrent::peer_stats`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerStats {
    /// Its connection.
    pub conn: ConnId,
    /// Its address.
    pub addr: SocketAddr,
    /// The peer id from its handshake.
    pub peer_id: [u8; 20],
    /// Its client name from its extension handshake (`v`), if it sent one.
    pub client: Option<String>,
    /// Pieces it says it has.
    pub pieces_had: u32,
    /// Pieces of the torrent.
    pub pieces: u32,
    /// We choke it.
    pub am_choking: bool,
    /// We are interested in it.
    pub am_interested: bool,
    /// It chokes us.
    pub peer_choking: bool,
    /// It is interested in us.
    pub peer_interested: bool,
    /// Bytes/s it sends us (display window).
    pub download_rate: f64,
    /// Bytes/s we send it (display window).
    pub upload_rate: f64,
}

/// Whether a piece under the bytes `offset..offset + len` of `geo` is
/// skipped (see [`Torrent::deselected`]).
fn spans_skipped(geo: &Geometry, offset: u64, len: u64, skipped: impl Fn(u32) -> bool) -> bool {
    let pl = u64::from(geo.piece_len()).max(1);
    if len == 0 {
        return false;
    }
    let (first, last) = (offset / pl, (offset + len - 1) / pl);
    (first..=last).any(|p| u32::try_from(p).is_ok_and(&skipped))
}

/// Tunables of one torrent.
#[derive(Clone, Debug, PartialEq)]
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
    /// Most bytes of one peer's uploads in flight (reads plus unsent): its
    /// window grows to this as it takes them fast enough.
    pub upload_watermark: u64,
    /// Bytes of uploads in flight for a peer whose connection takes
    /// nothing (or takes slowly): each peer's window is
    /// half a second of the rate its connection takes bytes,
    /// between this and `upload_watermark`. A peer that asks for
    /// everything and reads nothing holds this much, not the watermark.
    pub min_upload_window: u64,
    /// Largest storage read for uploads (adjacent requests coalesce).
    pub max_read: u32,
    /// Bytes handed to storage but not yet verified before new requests
    /// wait (bounds memory when the disk is slower than the network).
    pub max_unverified: u64,
    /// Seed for the picker's tie-breaks and the optimistic unchoke.
    pub seed: u64,
    /// Client name sent in the extension handshake (shared: the default
    /// is one string for every torrent, not a copy in each).
    pub client_name: Arc<str>,
    /// Most requests in flight to one peer, whatever its rate (the
    /// pipeline sizes below this; 1 makes every block a round trip).
    pub max_requests: u32,
    /// Download missing pieces (off: only upload what is had, as `weir
    /// seed` does; the torrent is then never interested).
    pub download: bool,
    /// Exchange peers with peers (BEP 11, ut_pex); never for a private
    /// torrent (BEP 27).
    pub pex: bool,
    /// The UDP port of the session's DHT node (BEP 5), when it runs one
    /// and the torrent is not private: advertised in the handshake, sent
    /// to peers that run one too (`port` message), and the ports they send
    /// become [`Event::DhtNode`]. `None`: no DHT bit, `port` ignored.
    pub dht_port: Option<u16>,
    /// Pieces wanted (`None`: every one): the others hold only files the
    /// user deselected and are never asked for (see
    /// [`weir_core::selection`]).
    pub wanted: Option<Bitfield>,
    /// Each piece's priority (`None`: all normal): new pieces are started
    /// from the highest down (see [`weir_core::picker::Priority`]).
    pub priorities: Option<Arc<[weir_core::picker::Priority]>>,
}

/// weir's name and version, one string shared by every default config.
fn default_client_name() -> Arc<str> {
    static NAME: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    NAME.get_or_init(|| Arc::from(concat!("weir ", env!("CARGO_PKG_VERSION"))))
        .clone()
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
            min_upload_window: 1 << 20,
            max_read: 1 << 20,
            max_unverified: 32 << 20,
            seed: 0x5eed,
            client_name: default_client_name(),
            max_requests: 4096,
            download: true,
            pex: true,
            dht_port: None,
            wanted: None,
            priorities: None,
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
        /// Why.
        reason: CloseReason,
    },
    /// Never connect to this address again.
    Ban {
        /// The address (every port of it).
        ip: std::net::IpAddr,
        /// Why.
        reason: BanReason,
    },
    /// A piece passed its hash check.
    PieceVerified(u32),
    /// Every piece is verified: the download is complete.
    Complete,
    /// The start-up check of existing data finished.
    CheckDone,
    /// Storage failed: the torrent cannot continue.
    Fatal(String),
    /// Peers a peer told us of (PEX), for the session's peer list (which
    /// applies the policy, bans and its own limits).
    PexPeers(Vec<SocketAddr>),
    /// A peer's DHT node (its address with the port of its BEP 5 `port`
    /// message), for the session's DHT to ping and keep if it answers. At
    /// most one per connection.
    DhtNode(SocketAddr),
    /// Something of the content the torrent does not handle itself (a
    /// secondary scheme's unit to check or its verdict), for the owner of
    /// the transfer.
    Content(ContentEvent),
}

impl Stats {
    /// Takes what the content knows: pieces and bytes had, left and
    /// wanted, failed checks and duplicate blocks.
    fn of_content(&mut self, had: &Bitfield, left: u64, wanted: u64, c: ContentStats) {
        self.pieces_had = had.count();
        self.bytes_left = left;
        self.hash_failures = c.hash_failures;
        self.duplicate_blocks = c.duplicate_blocks;
        self.bytes_wanted = wanted;
        self.bytes_had = wanted - left;
    }
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
    /// Bytes of verified data (of the wanted pieces).
    pub bytes_had: u64,
    /// Bytes of the wanted pieces: what is held once complete (the whole
    /// torrent unless files were deselected).
    pub bytes_wanted: u64,
    /// Pieces that failed their hash check.
    pub hash_failures: u32,
    /// Peers dropped for protocol violations.
    pub protocol_errors: u32,
    /// Peers banned for bad data.
    pub banned: u32,
    /// Blocks received twice (endgame duplicates).
    pub duplicate_blocks: u32,
    /// Blocks received that nobody asked that peer for (dropped).
    pub unrequested_blocks: u32,
    /// Upload slots taken back from peers that took nothing in them and
    /// given to peers that waited.
    pub slots_reclaimed: u32,
}

/// One torrent and its peers.
#[derive(Debug)]
pub struct Torrent {
    info_hash: [u8; 20],
    /// Peer exchange allowed (configured, and the torrent not private).
    pex: bool,
    /// Serves the info dictionary to peers that ask (BEP 9).
    metadata: crate::metadata::LazyServer,
    geo: Geometry,
    cfg: TorrentConfig,
    content: Content,
    peers: BTreeMap<ConnId, Peer>,
    events: VecDeque<Event>,
    dirty: Dirty<ConnId>,
    reads: BTreeMap<u64, upload::Read>,
    banned: std::collections::BTreeSet<std::net::IpAddr>,
    next_read: u64,
    next_tick: Option<Instant>,
    next_choke: Option<Instant>,
    /// When a slot holder would stall while a peer waits (`slots`).
    next_reclaim: Option<Instant>,
    choke_rounds: u32,
    rng: fastrand::Rng,
    stats: Stats,
    /// The time of the latest input (content events are handled with it).
    now: Option<Instant>,
    /// A storage verdict came in: every peer's requests are topped up.
    refill: bool,
}

impl Torrent {
    /// A torrent for `meta`, having the pieces in `had` (from resume), and
    /// to check the pieces in `check` from storage before it starts.
    /// The wanted pieces and priorities are handed to the content, which
    /// keeps them: the torrent's own config keeps no second copy.
    pub fn new(meta: &Metainfo, mut cfg: TorrentConfig, had: &Bitfield, check: &Bitfield) -> Self {
        let geo = Self::geometry_of(meta);
        let content = Content::new(geo, Self::content_config(&mut cfg), had, check);
        let stats = Stats {
            pieces: geo.piece_count(),
            ..Stats::default()
        };
        let mut t = Self::with_content(meta, cfg, content, stats);
        t.pump();
        t
    }

    /// The content's config from the torrent's, the wanted pieces and
    /// priorities moved (the torrent's config keeps no second copy).
    fn content_config(cfg: &mut TorrentConfig) -> ContentConfig {
        ContentConfig {
            order: cfg.order,
            seed: cfg.seed,
            max_unverified: cfg.max_unverified,
            wanted: cfg.wanted.take(),
            priorities: cfg.priorities.take(),
            ..ContentConfig::default()
        }
    }

    fn geometry_of(meta: &Metainfo) -> Geometry {
        Geometry::new(meta.info.total_length(), meta.info.piece_length, BLOCK_LEN)
            .expect("metainfo guarantees a valid geometry")
    }

    /// A torrent over `content` with no peer, nothing queued.
    fn with_content(meta: &Metainfo, cfg: TorrentConfig, content: Content, stats: Stats) -> Self {
        Self {
            pex: cfg.pex && !meta.info.private,
            info_hash: meta.info_hash,
            metadata: crate::metadata::LazyServer::new(meta.info_bytes.clone()),
            rng: fastrand::Rng::with_seed(cfg.seed ^ 0x9e37_79b9),
            geo: *content.geometry(),
            cfg,
            content,
            peers: BTreeMap::new(),
            events: VecDeque::new(),
            dirty: Dirty::new(),
            reads: BTreeMap::new(),
            banned: std::collections::BTreeSet::new(),
            next_read: 0,
            next_tick: None,
            next_choke: None,
            next_reclaim: None,
            choke_rounds: 0,
            stats,
            now: None,
            refill: false,
        }
    }

    /// Whether this torrent can sleep (see [`Dormant`]): no peer, nothing
    /// queued for the runtime, no read or timer pending, no metadata being
    /// served, its content quiet ([`Content::is_quiet`]).
    pub fn can_sleep(&self) -> bool {
        self.peers.is_empty()
            && self.events.is_empty()
            && self.reads.is_empty()
            && self.dirty.is_empty()
            && self.poll_timeout().is_none()
            && !self.metadata.is_serving()
            && !self.refill
            && self.content.is_quiet()
    }

    /// This torrent as a [`Dormant`] (call only when
    /// [`Torrent::can_sleep`]): what it had, wanted and counted, without
    /// the tables a swarm needs.
    pub fn sleep(self, shared: &mut SharedConfigs) -> Dormant {
        debug_assert!(self.can_sleep(), "only an idle torrent sleeps");
        let (content, now) = self.content.into_quiet();
        // The content's wanted pieces, priorities and order as they are
        // now, kept where a new torrent takes them from.
        let mut cfg = self.cfg;
        cfg.wanted = now.wanted;
        cfg.priorities = now.priorities;
        cfg.order = now.order;
        Dormant {
            cfg: shared.keep(cfg),
            content,
            counters: dormant::Counters::of(&self.stats),
            banned: (!self.banned.is_empty()).then(|| Box::new(self.banned)),
            rng: self.rng,
            choke_rounds: self.choke_rounds,
            next_read: self.next_read,
        }
    }

    /// The expected SHA-1 of every piece, for the storage layer.
    pub fn digests(meta: &Metainfo) -> Digests {
        meta.info.pieces.digests()
    }

    /// Our handshake.
    pub fn handshake(&self) -> Handshake {
        let h = Handshake::new(self.info_hash, self.cfg.peer_id);
        if self.cfg.dht_port.is_some() {
            h.with_dht()
        } else {
            h
        }
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
        self.content.is_checking()
    }

    /// Whether every piece is verified.
    pub fn is_complete(&self) -> bool {
        self.content.is_complete()
    }

    /// Pieces verified so far.
    pub fn had(&self) -> &Bitfield {
        self.content.had()
    }

    /// The transfer's content (another network attached to the same bytes
    /// picks and delivers through it).
    pub fn content(&self) -> &Content {
        &self.content
    }

    /// The transfer's content, mutably (see [`Torrent::content`]). Events
    /// it queues are handled at the torrent's next input or poll.
    pub fn content_mut(&mut self) -> &mut Content {
        &mut self.content
    }

    /// Lends the content to another network attached to the same bytes
    /// (an eD2k source of one of the torrent's files) for the length of
    /// one call; the torrent holds a placeholder meanwhile and must get it
    /// back with [`Torrent::return_content`] before its next input. What
    /// the borrower did (blocks received, pieces written) produces events
    /// the torrent handles at its next poll.
    pub fn lend_content(&mut self) -> Content {
        std::mem::replace(&mut self.content, Content::placeholder())
    }

    /// Takes back the content lent with [`Torrent::lend_content`].
    pub fn return_content(&mut self, content: Content) {
        self.content = content;
        // Blocks the borrower freed or pieces it completed may be wanted
        // by our peers now.
        self.refill = true;
    }

    /// Counters and rates at `now`.
    pub fn stats(&self, now: Instant) -> Stats {
        let mut s = self.stats.clone();
        s.peers = self.peers.len();
        s.of_content(
            self.content.had(),
            self.content.bytes_left(),
            self.content.bytes_wanted(),
            self.content.stats(),
        );
        s.download_rate = self.peers.values().map(|p| p.down.display_rate(now)).sum();
        s.upload_rate = self.peers.values().map(|p| p.up.display_rate(now)).sum();
        s
    }

    /// Each connected peer at `now`, in connection order (what a front
    /// end lists: `transmission-remote -pi`).
    pub fn peer_stats(&self, now: Instant) -> Vec<PeerStats> {
        let pieces = self.geo.piece_count();
        self.peers
            .iter()
            .map(|(conn, p)| PeerStats {
                conn: *conn,
                addr: p.addr,
                peer_id: p.peer_id,
                client: p.client.clone(),
                pieces_had: match &p.has {
                    Has::Nothing(b) | Has::Some(b) => b.count(),
                    Has::All => pieces,
                },
                pieces,
                am_choking: p.am_choking,
                am_interested: p.am_interested,
                peer_choking: p.peer_choking,
                peer_interested: p.peer_interested,
                download_rate: p.down.display_rate(now),
                upload_rate: p.up.display_rate(now),
            })
            .collect()
    }

    /// An earlier run wrote the first `bytes` of `piece`: only the rest is
    /// asked for. Whole blocks are resumed; returns how many bytes were
    /// taken (0: none), which the storage layer must hash back before any
    /// new write to the piece. Call before any peer is added. Nothing is
    /// taken of a piece that is had or being checked.
    pub fn resume_partial(&mut self, piece: u32, bytes: u32) -> u32 {
        self.content.resume_partial(piece, bytes)
    }

    /// Switches between rarest-first and sequential picking.
    pub fn set_order(&mut self, order: Order) {
        self.content.set_order(order);
    }

    /// Whether the bytes `offset..offset + len` are deselected (some piece
    /// under them is skipped: a wanted file's pieces never are).
    pub fn deselected(&self, offset: u64, len: u64) -> bool {
        spans_skipped(&self.geo, offset, len, |p| self.content.is_skipped(p))
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
            || self.content.had().count() > 0
            || self.content.is_complete()
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
        p.peer_id = theirs.peer_id;
        if p.extended {
            let mut ext = ExtHandshake {
                reqq: Some(self.cfg.max_peer_requests),
                v: Some(self.cfg.client_name.to_string()),
                p: self.cfg.listen_port,
                metadata_size: self.metadata.metadata_size(),
                ..ExtHandshake::default()
            };
            if self.pex {
                ext.m.insert("ut_pex".into(), crate::pex::LOCAL_ID);
            }
            if ext.metadata_size.is_some() {
                // Peers that came by a magnet link fetch the metadata here.
                ext.m
                    .insert(crate::wire::UT_METADATA.into(), crate::metadata::LOCAL_ID);
            }
            let payload = Bytes::from(ext.encode());
            p.send(&Message::Extended { id: 0, payload }, now);
        }
        self.now = Some(now);
        let had = self.content.had();
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
        if let Some(port) = self.cfg.dht_port.filter(|_| theirs.supports_dht()) {
            p.send(&Message::Port(port), now);
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

    /// Whether a peer with this peer id is connected (a second connection
    /// to the same peer is refused).
    pub fn has_peer_id(&self, peer_id: &[u8; 20]) -> bool {
        self.peers
            .values()
            .any(|p| &p.peer_id == peer_id && !p.closing)
    }

    /// Queues the metadata server's answers on their connections.
    fn send_metadata(&mut self, now: Instant) {
        while let Some((conn, frame)) = self.metadata.poll_send() {
            if let Some(p) = self.peers.get_mut(&conn) {
                p.send_frame(&frame, now);
                self.dirty.mark(conn);
            }
        }
    }

    /// Closes one peer to make room for a newcomer when the peer slots are
    /// full: one that held an upload slot and took nothing in it
    /// (`slots`), else the peer connected longest among those that have
    /// exchanged no block either way for at least `idle` since they
    /// connected (peers that hold a connection and are of no use: without
    /// this, a thousand peers that connect and sit there lock every honest
    /// one out). Whether one was closed (its `Close` event follows).
    pub fn evict_idle(&mut self, idle: Duration, now: Instant) -> bool {
        let Some((c, wasted)) = self.eviction_victim(idle, now) else {
            return false;
        };
        self.close(
            c,
            CloseReason::Evicted {
                took_nothing: wasted,
                idle,
            },
        );
        true
    }

    /// The peer `evict_idle` closes, and whether it wasted a slot.
    fn eviction_victim(&self, idle: Duration, now: Instant) -> Option<(ConnId, bool)> {
        let wasted = self
            .peers
            .iter()
            .filter(|(_, p)| !p.closing && p.wasted_slot && p.down.recent_rate(now) == 0.0)
            .min_by_key(|(c, p)| (p.connected_at, **c))
            .map(|(c, _)| (*c, true));
        wasted.or_else(|| {
            self.peers
                .iter()
                .filter(|(_, p)| {
                    !p.closing
                        && p.blocks_sent == 0
                        && p.down.total() == 0
                        && now.saturating_duration_since(p.connected_at) >= idle
                })
                .min_by_key(|(c, p)| (p.connected_at, **c))
                .map(|(c, _)| (*c, false))
        })
    }

    /// A connection closed (by either side).
    pub fn remove_peer(&mut self, conn: ConnId, _now: Instant) {
        let Some(p) = self.peers.remove(&conn) else {
            return;
        };
        self.metadata.remove_peer(conn);
        for &(piece, begin) in p.outstanding.keys() {
            self.content.release(conn, piece, begin);
        }
        if !matches!(p.has, Has::Nothing(_)) {
            self.content.peer_left(p.has.as_peer_has());
        }
        self.reads.retain(|_, r| r.conn != conn);
        self.dirty.forget(conn);
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
        self.now = Some(now);
        let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) else {
            return;
        };
        p.last_recv_at = now;
        // Clients differ in when they send a bitfield: after the extension
        // handshake and allowed-fast messages, after haves, and aria2 even
        // sends one again mid-session. A bitfield is accepted whenever it
        // comes and merged with what the peer was known to have.
        match msg {
            Message::KeepAlive | Message::Suggest { .. } => {}
            Message::Port(port) => {
                // One node per connection: a peer repeating `port` cannot
                // make the DHT ping on its behalf.
                if self.cfg.dht_port.is_some() && port != 0 && !p.told_dht_port {
                    p.told_dht_port = true;
                    let node = SocketAddr::new(p.addr.ip(), port);
                    self.events.push_back(Event::DhtNode(node));
                }
            }
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
                    self.content.release(conn, r.index, r.begin);
                }
                self.fill_requests(conn, now);
            }
            Message::Piece { index, begin, data } => self.on_block(conn, index, begin, data, now),
            Message::Extended { id: 0, payload } => match ExtHandshake::decode(&payload) {
                Ok(ext) => {
                    if let Some(q) = ext.reqq {
                        p.pipeline.set_peer_limit(q);
                    }
                    self.metadata.add_peer(conn, &ext, now);
                    let pex = self.pex;
                    let p = self.peers.get_mut(&conn).expect("caller checked");
                    p.listen_port = ext.p.filter(|&port| port != 0);
                    if pex
                        && p.pex.is_none()
                        && let Some(id) = ext.ext_id("ut_pex")
                    {
                        p.pex = Some((crate::pex::PexState::new(Default::default(), now), id));
                    }
                    p.client = ext.v;
                }
                Err(e) => self.fail(conn, e.to_string()),
            },
            Message::Extended { id, payload } if id == crate::pex::LOCAL_ID && self.pex => {
                let p = self.peers.get_mut(&conn).expect("caller checked");
                let Some((state, _)) = p.pex.as_mut() else {
                    return self.protocol_error(conn, "ut_pex before offering it".into());
                };
                match state.handle_message(&payload, now) {
                    Ok(got) => {
                        let addrs: Vec<SocketAddr> = got.added.iter().map(|p| p.addr).collect();
                        if !addrs.is_empty() {
                            self.events.push_back(Event::PexPeers(addrs));
                        }
                    }
                    Err(e) => self.protocol_error(conn, format!("ut_pex: {e}")),
                }
            }
            Message::Extended { id, payload } if id == crate::metadata::LOCAL_ID => {
                match crate::metadata::MetadataMsg::decode(
                    &payload,
                    &crate::metadata::MetadataLimits::default(),
                ) {
                    Ok(m) => {
                        self.metadata.handle_message(conn, &m, now);
                        self.send_metadata(now);
                    }
                    Err(e) => self.protocol_error(conn, format!("ut_metadata: {e}")),
                }
            }
            Message::Extended { .. } => {}
        }
        self.flush();
    }

    /// Bytes the runtime finished writing to a connection.
    pub fn on_sent(&mut self, conn: ConnId, bytes: u64, now: Instant) {
        if let Some(p) = self.peers.get_mut(&conn) {
            if bytes > 0 && p.upload_queued > 0 {
                // It takes what we queued: its upload slot is in use.
                p.last_progress_at = now;
                p.wasted_slot = false;
            }
            p.upload_queued = p.upload_queued.saturating_sub(bytes);
            p.taken.record(now, bytes);
            self.serve(conn, now);
            self.flush();
        }
    }

    /// A storage operation finished.
    pub fn handle_storage(&mut self, ev: StorageEvent, now: Instant) {
        self.now = Some(now);
        self.refill = true;
        match self.content.handle_storage(ev) {
            None | Some(StorageEvent::PieceDone { .. }) => {}
            Some(StorageEvent::ReadDone { id, data }) => self.on_read_done(id, data, now),
            Some(StorageEvent::ReadFailed { id, lost, .. }) => {
                self.on_pieces_lost(&lost, now);
                if id & CONTENT_READ == 0 {
                    self.on_read_failed(id, now);
                }
            }
            Some(StorageEvent::Failed { error }) => self.events.push_back(Event::Fatal(error)),
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
        if self.next_reclaim.is_some_and(|t| t <= now) {
            self.reclaim_slots(now);
        }
        self.flush();
    }

    /// When [`Torrent::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.next_tick, self.next_choke, self.next_reclaim]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next thing the runtime must do.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.flush();
        let ev = self.events.pop_front();
        if ev.is_none() && self.peers.is_empty() {
            // Idle (no connection): give back the event queues' buffers,
            // which an idle transfer would otherwise keep for good (a
            // daemon holds thousands); a busy one keeps reusing them.
            if self.events.capacity() > 0 {
                self.events = VecDeque::new();
            }
            self.content.release_buffers();
        }
        ev
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
            self.content
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
        self.content.peer_joined(p.has.as_peer_has());
        if p.has.is_seed() && self.content.is_complete() {
            return self.close(conn, CloseReason::BothSeeds);
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
            self.content.peer_left(weir_core::picker::PeerHas::Some(&b));
            self.content.peer_joined(weir_core::picker::PeerHas::All);
        } else {
            self.content.peer_has(index);
        }
        if !self.content.had().get(index) {
            self.update_interest(conn, now);
        }
    }

    fn update_interest(&mut self, conn: ConnId, now: Instant) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        let want = self.cfg.download && self.content.is_interesting(p.has.as_peer_has());
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
                self.content.release(conn, piece, begin);
                // Blocks already on the way may still come.
                p.forget_request(piece, begin);
            }
        }
    }

    /// Asks the peer for as many blocks as its pipeline has room for.
    fn fill_requests(&mut self, conn: ConnId, now: Instant) {
        let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) else {
            return;
        };
        if p.peer_choking || !p.am_interested || !self.content.can_pick() {
            return;
        }
        let mut n = p.pipeline.top_up(p.outstanding.len() as u32) as usize;
        if p.snubbed {
            // A snubbed peer gets nothing others could deliver: only an
            // endgame duplicate, one at a time, to see if it came back.
            if !self.content.in_endgame() {
                return;
            }
            n = n.min(1usize.saturating_sub(p.outstanding.len()));
        }
        if self.content.in_endgame() {
            // Endgame: every block is already asked of someone. A peer with
            // little in flight may duplicate a few, not a whole pipeline.
            n = n.min(ENDGAME_DEPTH.saturating_sub(p.outstanding.len()));
        }
        if n == 0 {
            return;
        }
        let mut spans: Vec<BlockSpan> = Vec::with_capacity(n);
        self.content.pick(conn, p.has.as_peer_has(), n, &mut spans);
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
        } else if p.outstanding.is_empty() && !self.content.is_interesting(p.has.as_peer_has()) {
            p.am_interested = false;
            p.send(&Message::NotInterested, now);
            self.mark_dirty(conn);
        }
    }

    fn on_block(&mut self, conn: ConnId, index: u32, begin: u32, data: Bytes, now: Instant) {
        let len = data.len() as u32;
        let p = self.peers.get_mut(&conn).expect("caller checked");
        let asked = match p.outstanding.remove(&(index, begin)) {
            Some(o) => {
                p.pipeline
                    .on_block(now, now.saturating_duration_since(o.sent_at), len);
                o.len == len
            }
            // Asked before and dropped (a cancel or choke crossed it).
            None => p.take_late(index, begin),
        };
        if !asked {
            // Data nobody asked this peer for is not kept (a peer must not
            // be able to fill memory with pieces we never requested).
            p.unrequested += 1;
            self.stats.unrequested_blocks += 1;
            let n = p.unrequested;
            if n > UNREQUESTED_ALLOWANCE {
                return self.fail(
                    conn,
                    format!("{n} blocks we did not ask for (last {index}:{begin}+{len})"),
                );
            }
            return;
        }
        // The one place every downloaded payload byte passes through.
        p.down.record(now, u64::from(len));
        self.stats.downloaded += u64::from(len);
        p.last_block_at = now;
        p.snubbed = false;
        let from = Sender {
            conn,
            ip: p.addr.ip(),
        };
        let span = BlockSpan {
            piece: index,
            begin,
            len,
        };
        match self.content.received(from, span, vec![data]) {
            Accepted::New { cancel } => {
                for other in cancel {
                    if let Some(o) = self.peers.get_mut(&other)
                        && o.outstanding.remove(&(index, begin)).is_some()
                    {
                        o.forget_request(index, begin);
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
            }
            Accepted::Duplicate => {}
            Accepted::Unexpected => {
                return self.fail(conn, format!("unrequested block {index}:{begin}+{len}"));
            }
        }
        self.fill_requests(conn, now);
    }

    /// Handles what the content asked for or reported.
    fn pump(&mut self) {
        while let Some(ev) = self.content.poll_event() {
            match ev {
                ContentEvent::Storage(op) => self.events.push_back(Event::Storage(op)),
                ContentEvent::PieceVerified(piece) => self.on_piece_verified(piece),
                ContentEvent::BadData { sender, proven } => self.on_bad_data(sender, proven),
                ContentEvent::CheckDone => self.events.push_back(Event::CheckDone),
                ContentEvent::PieceFound(_) => {}
                ContentEvent::Complete => {
                    self.events.push_back(Event::Complete);
                    self.drop_seeds();
                }
                ContentEvent::PieceFailed { piece, from } => {
                    // Only under FailPolicy::Defer, which a torrent does not
                    // use; investigate like the default.
                    self.content.investigate(piece, from);
                }
                ev @ (ContentEvent::CheckUnit { .. }
                | ContentEvent::UnitVerified { .. }
                | ContentEvent::UnitFailed { .. }) => self.events.push_back(Event::Content(ev)),
            }
        }
        if std::mem::take(&mut self.refill)
            && let Some(now) = self.now
        {
            // A verdict may have freed blocks or made peers uninteresting.
            let conns: Vec<ConnId> = self.peers.keys().copied().collect();
            for c in conns {
                self.fill_requests(c, now);
            }
        }
    }

    fn on_piece_verified(&mut self, piece: u32) {
        self.events.push_back(Event::PieceVerified(piece));
        let Some(now) = self.now else { return };
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            let p = self.peers.get_mut(&c).expect("listed");
            p.send(&Message::Have { index: piece }, now);
            self.mark_dirty(c);
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
            self.close(c, CloseReason::PeerIsSeed);
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

    /// Sends each PEX peer what changed in our peer set, at most once a
    /// minute (the state keeps the pace).
    fn pex_round(&mut self, now: Instant) {
        if !self.pex {
            return;
        }
        let known: BTreeMap<ConnId, SocketAddr> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.closing)
            .map(|(c, p)| {
                // Where it can be reached: its listen port (extension
                // handshake) on its address, else the port it came from
                // (right for the peers we dialled).
                let port = p.listen_port.unwrap_or(p.addr.port());
                (*c, SocketAddr::new(p.addr.ip(), port))
            })
            .collect();
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            let p = self.peers.get_mut(&c).expect("listed");
            let Some((state, id)) = p.pex.as_mut() else {
                continue;
            };
            if state.poll_timeout().is_some_and(|t| t > now) {
                continue;
            }
            let current: BTreeMap<SocketAddr, crate::pex::PexFlags> = known
                .iter()
                .filter(|(k, _)| **k != c)
                .map(|(_, a)| (*a, crate::pex::PexFlags::default()))
                .collect();
            if let Some(msg) = state.poll_message(now, &current) {
                let frame = crate::pex::frame(*id, &msg);
                p.send_frame(&frame, now);
                self.dirty.mark(c);
            }
        }
    }

    fn tick(&mut self, now: Instant) {
        self.pex_round(now);
        self.reclaim_slots(now);
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            let p = self.peers.get_mut(&c).expect("listed");
            let rate = p.down.recent_rate(now);
            p.pipeline.on_tick(now, rate);
            if now.saturating_duration_since(p.last_recv_at) > IDLE_TIMEOUT {
                self.close(c, CloseReason::Idle);
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
                    self.content.release(c, piece, begin);
                    p.forget_request(piece, begin);
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
        self.dirty.mark(conn);
    }

    /// Handles the content's events, then moves queued bytes of every
    /// touched peer into Send events.
    fn flush(&mut self) {
        self.pump();
        for conn in self.dirty.take() {
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
        self.close(conn, CloseReason::Protocol(reason));
    }

    fn close(&mut self, conn: ConnId, reason: CloseReason) {
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
