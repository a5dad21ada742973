//! The eD2k client state machine: files we download and share, and every
//! connection to other clients, over the shared transfer core.
//!
//! Sans-IO. The runtime opens sockets and tells the client about each
//! connection ([`Client::add_conn`]); after that it feeds framed packets
//! ([`Client::handle_packet`]), storage completions
//! ([`Client::handle_storage`]), write completions ([`Client::on_sent`])
//! and timeouts ([`Client::handle_timeout`]). After each call it drains
//! [`Client::poll_event`], then waits for [`Client::poll_timeout`] or the
//! next input. Time only comes in as the `now` argument.
//!
//! Downloads (see `download.rs`): one local pending list of 180 KiB blocks
//! per source, as deep as the shared [`Pipeline`](weir_core::pipeline)
//! sizes it from the source's recent rate and round trip; the unasked
//! entries go out in `OP_REQUESTPARTS` packets of exactly three ranges
//! (aMule #484), whenever the list has room, never on a timer. Blocks are
//! handed to storage in order within each part and hashed (MD4) as they
//! are written; a part that fails is repaired with AICH (bad blocks found,
//! their sender banned) or fetched again.
//!
//! Uploads (see `upload.rs`): a slot is granted at once when one is free,
//! else the peer waits on a queue; each requested range is read once from
//! storage (adjacent ranges together) and sent as one `OP_SENDINGPART` per
//! block, header plus a slice of the read buffer, or zlib-packed when a
//! sample of the data shows that it pays and the peer accepts it.

mod conn;
mod download;
mod file;
mod repair;
mod upload;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
pub use weir_core::close::{BanReason, CloseReason};
use weir_core::content::Content;
use weir_core::geometry::Geometry;
use weir_core::outbox::Dirty;
use weir_core::picker::Order;
use weir_core::storage::{Digests, StorageEvent, StorageOp};

use crate::client::hello::{OwnHello, ip_to_id};
use crate::client::{ClientMessage, Hello};
use crate::hash::FileHashes;
use crate::link::FileLink;
use crate::packet::Packet;
use crate::{AichHash, Md4Hash};
use conn::{Conn, PeerInfo};
use file::FileState;

/// A connection, as the runtime and the client both name it.
pub type ConnId = u32;
/// A file of the client (index in the order files were added).
pub type FileId = u32;

/// Upload read ids of the eD2k core have this bit set, so the reads of a
/// file attached to another network's content (whose storage that network
/// shares) come back to the right core. (The content's own reads use bit
/// 62, recovery reads bit 63.)
pub const UPLOAD_READ: u64 = 1 << 61;

/// How often pipelines are re-sized and timeouts checked.
const TICK: Duration = Duration::from_millis(250);
/// A source with blocks asked that sent nothing for this long is dropped
/// (aMule's `DOWNLOADTIMEOUT`).
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(100);
/// A connection with nothing going on is closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Most ranges one peer may have queued with us (asked, not yet read for
/// it): more than any honest pending list; past it the peer is dropped.
pub const MAX_QUEUED_RANGES: usize = conn::SERVED_MEMORY;
/// A queued or waiting connection says nothing for a long time: keep it up
/// to this long (aMule re-asks every 29 minutes).
const QUEUED_TIMEOUT: Duration = Duration::from_secs(40 * 60);
/// How long AICH recovery data may take before the part is simply fetched
/// again.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bad parts a peer may contribute to before it is banned (a peer proven
/// to have sent a bad block by AICH is banned at once).
const BAN_STRIKES: u32 = 2;

/// Tunables of a client.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Our user hash: one per installation, stable (aMule bans an address
    /// whose user hash changes).
    pub user_hash: Md4Hash,
    /// Nick shown to peers.
    pub nick: String,
    /// Our TCP listen port (0: not listening).
    pub listen_port: u16,
    /// Announce that peers may send us zlib-packed parts.
    pub accept_compressed: bool,
    /// Pack uploads to peers that accept it, where a sample shows it pays.
    pub compress_uploads: bool,
    /// Peers served at once; others wait on the queue.
    pub upload_slots: usize,
    /// Most blocks in one source's pending list, whatever its rate.
    pub max_requests: u32,
    /// Bytes handed to storage but not verified before new requests wait.
    pub max_unverified: u64,
    /// Bytes of one peer's uploads in flight (reads plus unsent).
    pub upload_watermark: u64,
    /// Largest storage read for uploads (adjacent ranges coalesce).
    pub max_read: u32,
    /// Largest `OP_SENDINGPART` payload (aMule 2.3.3 sends ~10 KiB and
    /// accepts a whole 180 KiB block).
    pub max_part_packet: u32,
    /// Rarest first or sequential.
    pub order: Order,
    /// Seed for the picker's tie-breaks.
    pub seed: u64,
    /// A connection whose peer sent no hello within this is closed.
    pub hello_timeout: Duration,
}

impl ClientConfig {
    /// Defaults for a user hash.
    pub fn new(user_hash: Md4Hash) -> Self {
        Self {
            user_hash,
            nick: concat!("weir ", env!("CARGO_PKG_VERSION")).to_string(),
            listen_port: 0,
            accept_compressed: true,
            compress_uploads: true,
            upload_slots: 8,
            max_requests: 4096,
            max_unverified: 96 << 20,
            upload_watermark: 8 << 20,
            max_read: 1 << 20,
            max_part_packet: crate::EMBLOCKSIZE as u32,
            order: Order::RarestFirst,
            seed: 0x5eed,
            hello_timeout: Duration::from_secs(15),
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
        /// Chunks to write (vectored); whole packets.
        data: Vec<Bytes>,
        /// Part data bytes among them (0: control only), which an upload
        /// cap charges; control packets never wait for a cap.
        payload: u64,
    },
    /// Perform a storage operation on a file.
    Storage {
        /// The file.
        file: FileId,
        /// The operation.
        op: StorageOp,
    },
    /// The part hashes of a file are known: its storage can be opened
    /// ([`Client::digests`]). Comes before any storage operation on it.
    DigestsKnown {
        /// The file.
        file: FileId,
    },
    /// Close the connection (after sending what was queued before it).
    Close {
        /// The connection. [`CloseReason::SelfConnection`] when a peer's
        /// hello carries our own user hash: it is us (or another client
        /// given the same hash), which the runtime reports rather than
        /// dropping quietly.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
    /// Never connect to this address again (and refuse it).
    Ban {
        /// The address.
        ip: IpAddr,
        /// Why.
        reason: BanReason,
    },
    /// Connect to this peer (an uploader reconnecting to a downloader
    /// whose connection wedged); the client takes it up after the hello.
    Connect {
        /// The peer's listen address.
        addr: SocketAddr,
    },
    /// A part passed its MD4 check.
    PartVerified {
        /// The file.
        file: FileId,
        /// The part.
        part: u32,
    },
    /// Every part of a file is verified.
    Complete {
        /// The file.
        file: FileId,
    },
    /// Storage of a file failed: it cannot continue.
    Fatal {
        /// The file.
        file: FileId,
        /// What went wrong.
        error: String,
    },
}

/// Counters and rates for progress displays.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Part data bytes received (verified or not).
    pub downloaded: u64,
    /// Part data bytes sent.
    pub uploaded: u64,
    /// Download rate (display window), bytes/s.
    pub download_rate: f64,
    /// Upload rate (display window), bytes/s.
    pub upload_rate: f64,
    /// Connections with a completed hello.
    pub peers: usize,
    /// Sources we download from right now.
    pub active_sources: usize,
    /// Peers in our upload slots.
    pub uploading_to: usize,
    /// Peers waiting on our queue.
    pub queued: usize,
    /// Parts that failed their MD4 check.
    pub hash_failures: u32,
    /// Failed parts repaired with AICH (only the bad blocks fetched again).
    pub aich_repairs: u32,
    /// Connections dropped for protocol violations.
    pub protocol_errors: u32,
    /// Peers banned for bad data.
    pub banned: u32,
    /// Part data bytes received that nobody was waiting for.
    pub wasted: u64,
}

/// What a file's progress looks like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileProgress {
    /// File size.
    pub size: u64,
    /// Bytes in verified parts.
    pub verified: u64,
    /// Parts verified.
    pub parts_had: u32,
    /// Parts in the file.
    pub parts: u32,
    /// Whether its part hashes are known.
    pub digests_known: bool,
    /// Whether it is complete.
    pub complete: bool,
    /// Whether data already on disk is being hashed.
    pub checking: bool,
}

/// Errors adding a file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// The file is there already.
    #[error("file {0} is already in the client")]
    Duplicate(Md4Hash),
    /// The hashes do not describe a valid eD2k file.
    #[error("file {hash}: {reason}")]
    Invalid {
        /// The file.
        hash: Md4Hash,
        /// Why.
        reason: String,
    },
}

/// The eD2k client: files and connections.
#[derive(Debug)]
pub struct Client {
    cfg: ClientConfig,
    own: OwnHello,
    /// Our id as a server assigned it (0: none; then our address on each
    /// connection is our high id).
    server_id: u32,
    server: Option<(Ipv4Addr, u16)>,
    files: Vec<FileState>,
    conns: BTreeMap<ConnId, Conn>,
    strikes: BTreeMap<IpAddr, u32>,
    banned: BTreeSet<IpAddr>,
    events: VecDeque<Event>,
    dirty: Dirty<ConnId>,
    reads: BTreeMap<u64, upload::Read>,
    next_read: u64,
    next_tick: Option<Instant>,
    callbacks: Vec<upload::Callback>,
    /// The time of the latest input (content events are handled with it).
    now: Option<Instant>,
    stats: Stats,
}

impl Client {
    /// A client with no files and no connections.
    pub fn new(cfg: ClientConfig) -> Self {
        let own = OwnHello::weir(cfg.nick.clone(), 0, cfg.accept_compressed);
        Self {
            cfg,
            own,
            server_id: 0,
            server: None,
            files: Vec::new(),
            conns: BTreeMap::new(),
            strikes: BTreeMap::new(),
            banned: BTreeSet::new(),
            events: VecDeque::new(),
            dirty: Dirty::new(),
            reads: BTreeMap::new(),
            next_read: UPLOAD_READ,
            next_tick: None,
            callbacks: Vec::new(),
            now: None,
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Shares a complete file we hashed ourselves.
    pub fn add_shared(&mut self, name: String, h: &FileHashes) -> Result<FileId, AddError> {
        self.check_new(h.file_hash)?;
        if crate::hashset_len(h.size) as usize != h.hashset.len() {
            return Err(AddError::Invalid {
                hash: h.file_hash,
                reason: "hashset does not match the size".into(),
            });
        }
        let parts = crate::geometry(h.size).piece_count();
        let mut f = FileState::new(
            h.file_hash,
            h.size,
            name,
            Some(h.hashset.clone()),
            (self.cfg.order, self.cfg.seed, self.cfg.max_unverified),
            &Bitfield::full(parts),
        );
        f.complete_announced = true;
        f.aich_master = h.aich.as_ref().map(|t| t.root());
        f.aich_trusted = f.aich_master.is_some();
        f.aich_tree = h.aich.clone();
        self.files.push(f);
        let id = (self.files.len() - 1) as FileId;
        self.events.push_back(Event::DigestsKnown { file: id });
        Ok(id)
    }

    /// Adds a file to download from a link. `had`: parts verified by an
    /// earlier run (resume journal); `check`: parts to hash from storage
    /// before downloading (data found on disk without resume data).
    pub fn add_download(
        &mut self,
        link: &FileLink,
        had: &Bitfield,
        check: &Bitfield,
    ) -> Result<FileId, AddError> {
        self.check_new(link.hash)?;
        let seed =
            self.cfg.seed ^ u64::from_le_bytes(link.hash.0[..8].try_into().unwrap_or([0; 8]));
        let parts = crate::geometry(link.size).piece_count();
        let mut had_parts = Bitfield::new(parts);
        for p in had.iter_ones().filter(|&p| p < parts) {
            had_parts.set(p);
        }
        let mut f = FileState::new(
            link.hash,
            link.size,
            link.name.clone(),
            link.part_hashes.clone(),
            (self.cfg.order, seed, self.cfg.max_unverified),
            &had_parts,
        );
        f.aich_master = link.aich;
        f.aich_trusted = link.aich.is_some();
        for p in check.iter_ones() {
            if p < parts && !had.get(p) {
                f.to_check.set(p);
            }
        }
        let known = f.hashset.is_some();
        self.files.push(f);
        let id = (self.files.len() - 1) as FileId;
        if known {
            self.digests_known(id);
        }
        if self.files[id as usize].is_complete() {
            self.announce_complete(id);
        }
        Ok(id)
    }

    /// Adds a file to download that is one file of another network's
    /// content (a torrent's file with the same bytes): its bytes sit at
    /// `grid` of that content, its parts are the content's scheme `scheme`
    /// (MD4, checked by the content's owner once the hashset is known).
    /// The content is lent for each call with [`Client::lend`] and taken
    /// back with [`Client::take_back`]; its events are its owner's.
    pub fn add_attached(
        &mut self,
        link: &FileLink,
        grid: weir_core::content::grid::UnitGrid,
        scheme: weir_core::content::SchemeId,
    ) -> Result<FileId, AddError> {
        self.check_new(link.hash)?;
        if grid.len != link.size || grid.unit_len != crate::PARTSIZE {
            return Err(AddError::Invalid {
                hash: link.hash,
                reason: format!(
                    "attached at {} bytes of {}-byte units, but the file has {} bytes",
                    grid.len, grid.unit_len, link.size
                ),
            });
        }
        let parts = crate::geometry(link.size).piece_count();
        let mut f = FileState::new(
            link.hash,
            link.size,
            link.name.clone(),
            link.part_hashes.clone(),
            (self.cfg.order, self.cfg.seed, self.cfg.max_unverified),
            &Bitfield::new(parts),
        );
        f.content = Content::placeholder();
        f.shared = Some(file::Shared {
            grid,
            scheme,
            verified: Bitfield::new(parts),
        });
        f.aich_master = link.aich;
        f.aich_trusted = link.aich.is_some();
        let known = f.hashset.is_some();
        self.files.push(f);
        let id = (self.files.len() - 1) as FileId;
        if known {
            self.digests_known(id);
        }
        Ok(id)
    }

    /// Lends an attached file its content for the next calls.
    pub fn lend(&mut self, file: FileId, content: Content) {
        if let Some(f) = self
            .files
            .get_mut(file as usize)
            .filter(|f| f.shared.is_some())
        {
            f.content = content;
        }
    }

    /// Takes back the content lent to an attached file.
    pub fn take_back(&mut self, file: FileId) -> Option<Content> {
        let f = self.files.get_mut(file as usize)?;
        let sh = f.shared.as_mut()?;
        // Progress between calls reads this copy (the placeholder left
        // behind has no schemes).
        if let Some(v) = f.content.scheme_verified(sh.scheme) {
            sh.verified.clone_from(v);
        }
        Some(std::mem::replace(&mut f.content, Content::placeholder()))
    }

    /// The content's owner checked a part of an attached file: it passed.
    /// (The content must be lent.)
    pub fn part_checked(&mut self, file: FileId, part: u32, now: Instant) {
        self.now = Some(now);
        if self
            .files
            .get(file as usize)
            .is_none_or(|f| f.shared.is_none())
        {
            return;
        }
        self.events.push_back(Event::PartVerified { file, part });
        if self.files[file as usize].is_complete() {
            self.announce_complete(file);
        }
        self.kick_file(file, now);
        self.flush();
    }

    fn check_new(&self, hash: Md4Hash) -> Result<(), AddError> {
        if self.files.iter().any(|f| f.hash == hash) {
            return Err(AddError::Duplicate(hash));
        }
        Ok(())
    }

    /// The files, in the order added.
    pub fn file_ids(&self) -> impl Iterator<Item = FileId> + '_ {
        (0..self.files.len()).map(|i| i as FileId)
    }

    /// A file's ed2k hash.
    pub fn file_hash(&self, file: FileId) -> Option<Md4Hash> {
        self.files.get(file as usize).map(|f| f.hash)
    }

    /// A file's name and size.
    pub fn file_info(&self, file: FileId) -> Option<(&str, u64)> {
        self.files
            .get(file as usize)
            .map(|f| (f.name.as_str(), f.size))
    }

    /// A file's geometry (9,728,000-byte parts of 180 KiB blocks).
    pub fn geometry(&self, file: FileId) -> Option<Geometry> {
        self.files.get(file as usize).map(|f| f.geo)
    }

    /// The MD4 of every data part, once known (for the storage verifier).
    pub fn digests(&self, file: FileId) -> Option<Digests> {
        self.files.get(file as usize).and_then(FileState::digests)
    }

    /// The wire hashset, once known.
    pub fn hashset(&self, file: FileId) -> Option<&[Md4Hash]> {
        self.files
            .get(file as usize)
            .and_then(|f| f.hashset.as_deref())
    }

    /// The AICH master hash in use for a file.
    pub fn aich_master(&self, file: FileId) -> Option<AichHash> {
        self.files.get(file as usize).and_then(|f| f.aich_master)
    }

    /// A file's progress.
    pub fn progress(&self, file: FileId) -> FileProgress {
        let Some(f) = self.files.get(file as usize) else {
            return FileProgress::default();
        };
        let had = f.parts_had();
        let verified = if f.shared.is_some() {
            had.iter_ones()
                .map(|p| u64::from(f.geo.piece_size(p)))
                .sum()
        } else {
            f.size - f.content.bytes_left()
        };
        FileProgress {
            size: f.size,
            verified,
            parts_had: had.count(),
            parts: f.geo.piece_count(),
            digests_known: f.hashset.is_some(),
            complete: f.is_complete(),
            checking: f.is_checking(),
        }
    }

    /// Whether a file is complete.
    pub fn is_complete(&self, file: FileId) -> bool {
        self.files
            .get(file as usize)
            .is_some_and(FileState::is_complete)
    }

    /// Files still downloading.
    pub fn downloading(&self) -> impl Iterator<Item = FileId> + '_ {
        self.file_ids().filter(|&f| !self.is_complete(f))
    }

    /// The peer on a connection: its user hash and nick, once its hello
    /// arrived.
    pub fn peer(&self, conn: ConnId) -> Option<(Md4Hash, Option<&str>)> {
        let p = self.conns.get(&conn)?.peer.as_ref()?;
        Some((p.user_hash, p.info.name.as_deref()))
    }

    /// Whether an address is banned.
    pub fn is_banned(&self, ip: IpAddr) -> bool {
        self.banned.contains(&canonical(ip))
    }

    /// The server we are logged into (announced in hellos) and the id it
    /// gave us (a low id means peers cannot connect to us).
    pub fn set_server(&mut self, server: Option<(Ipv4Addr, u16)>, id: u32) {
        self.server = server;
        self.server_id = id;
    }

    /// Counters and rates at `now`.
    pub fn stats(&self, now: Instant) -> Stats {
        let mut s = self.stats.clone();
        s.peers = self.conns.values().filter(|c| c.peer.is_some()).count();
        s.active_sources = self
            .conns
            .values()
            .filter(|c| {
                c.down
                    .as_ref()
                    .is_some_and(|d| d.state == conn::DownState::Active)
            })
            .count();
        s.uploading_to = self
            .conns
            .values()
            .filter(|c| c.up.slot == conn::Slot::Active)
            .count();
        s.queued = self
            .conns
            .values()
            .filter(|c| c.up.slot == conn::Slot::Queued)
            .count();
        s.download_rate = self
            .conns
            .values()
            .filter_map(|c| c.down.as_ref())
            .map(|d| d.meter.display_rate(now))
            .sum();
        s.upload_rate = self
            .conns
            .values()
            .map(|c| c.up.meter.display_rate(now))
            .sum();
        s
    }

    // ---- connections ------------------------------------------------------

    /// A TCP connection is up. `outgoing`: we dialled it, so we speak
    /// first. `local_ip`: our address on it (our high id).
    pub fn add_conn(
        &mut self,
        conn: ConnId,
        addr: SocketAddr,
        local_ip: Option<Ipv4Addr>,
        outgoing: bool,
        now: Instant,
    ) {
        self.now = Some(now);
        if self.is_banned(addr.ip()) {
            self.conns.insert(conn, Conn::new(addr, local_ip, now));
            return self.close(conn, CloseReason::BannedAddress);
        }
        let mut c = Conn::new(addr, local_ip, now);
        if outgoing {
            let hello = self.own_hello(local_ip);
            c.send(&ClientMessage::Hello(hello));
            c.hello_sent = true;
        }
        self.conns.insert(conn, c);
        self.mark_dirty(conn);
        self.ensure_tick(now);
        self.flush();
    }

    /// A connection closed (by either side).
    pub fn remove_conn(&mut self, conn: ConnId, now: Instant) {
        self.now = Some(now);
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.dirty.forget(conn);
        self.reads.retain(|_, r| r.conn != conn);
        if let Some(d) = c.down {
            self.drop_down(conn, d, now);
        }
        if c.up.slot == conn::Slot::Active {
            self.grant_next_slot(now);
        }
        for f in &mut self.files {
            if f.hashset_from == Some(conn) {
                f.hashset_from = None;
            }
        }
        // Someone else may be waiting for the hashset it was to send.
        let others: Vec<ConnId> = self.conns.keys().copied().collect();
        for o in others {
            self.down_advance(o, now);
        }
        self.flush();
    }

    /// The runtime could not frame what the peer sent: drop and count it.
    pub fn conn_error(&mut self, conn: ConnId, reason: String, now: Instant) {
        self.now = Some(now);
        self.stats.protocol_errors += 1;
        let _ = reason;
        self.remove_conn(conn, now);
    }

    /// A framed packet from a peer.
    pub fn handle_packet(&mut self, conn: ConnId, pkt: Packet, now: Instant) {
        self.handle_packets(conn, [pkt], now);
    }

    /// Framed packets from a peer, in order (what one read brought): each
    /// handled as by [`Client::handle_packet`], their output flushed once.
    /// A flood of a peer's smallest packets (6-byte PUBLICIP_REQ, each
    /// answered) then costs one write of all the answers, not one write
    /// (and one pass over every file) per answer.
    pub fn handle_packets(
        &mut self,
        conn: ConnId,
        pkts: impl IntoIterator<Item = Packet>,
        now: Instant,
    ) {
        self.now = Some(now);
        for pkt in pkts {
            self.handle_one(conn, pkt, now);
        }
        self.flush();
    }

    fn handle_one(&mut self, conn: ConnId, pkt: Packet, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.closing) else {
            return;
        };
        c.last_recv_at = now;
        let msg = match ClientMessage::decode(&pkt, &c.ctx) {
            Ok(m) => m,
            Err(e) => return self.fail(conn, e.to_string()),
        };
        self.handle_message(conn, msg, now);
    }

    fn handle_message(&mut self, conn: ConnId, msg: ClientMessage, now: Instant) {
        use ClientMessage as M;
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (hello_sent, local_ip) = (c.hello_sent, c.local_ip);
        match msg {
            M::Hello(h) => {
                if !hello_sent {
                    let answer = self.own_hello(local_ip);
                    let c = self.conns.get_mut(&conn).expect("present");
                    c.send(&M::HelloAnswer(answer));
                    c.hello_sent = true;
                    self.mark_dirty(conn);
                }
                self.on_hello(conn, h, now);
            }
            M::HelloAnswer(h) => self.on_hello(conn, h, now),
            // Nothing but a hello is answered before the hello.
            _ if c.peer.is_none() => self.fail(conn, "message before the hello".into()),
            M::PublicIpReq => {
                let c = self.conns.get_mut(&conn).expect("present");
                if let Some(ip) = c.ip4() {
                    c.send(&M::PublicIpAnswer { ip });
                    self.mark_dirty(conn);
                }
            }
            // Uploader side.
            M::RequestFileName { file, .. } => self.on_file_name_request(conn, file),
            M::SetReqFileId { file } => self.on_status_request(conn, file),
            M::MultiPacket {
                file,
                size,
                entries,
            } => self.on_multipacket(conn, file, size, &entries),
            M::HashSetRequest { file } => self.on_hashset_request(conn, file),
            M::AichFileHashReq { file } => self.on_aich_hash_request(conn, file),
            M::AichRequest { file, part, master } => self.on_aich_request(conn, file, part, master),
            M::StartUploadReq { file } => self.on_start_upload(conn, file, now),
            M::RequestParts { file, ranges } => self.on_request_parts(conn, file, ranges, now),
            M::CancelTransfer | M::EndOfDownload { .. } => self.end_upload(conn, now),
            // Downloader side.
            M::FileReqAnsNoFil { file } => self.on_no_file(conn, file, now),
            M::ReqFileNameAnswer { file, .. } => self.on_name_answer(conn, file, now),
            M::FileStatus { file, status } => self.on_file_status(conn, file, &status, now),
            M::MultiPacketAnswer { file, entries } => {
                self.on_multipacket_answer(conn, file, entries, now)
            }
            M::HashSetAnswer { file, hashes } => self.on_hashset(conn, file, hashes, now),
            M::AichFileHashAns { file, master } => self.on_aich_hash(conn, file, master),
            M::AichAnswer { file, data } => self.on_aich_answer(conn, file, data, now),
            M::AcceptUploadReq => self.on_accept(conn, now),
            M::QueueRanking { rank } => self.on_queued(conn, u32::from(rank)),
            M::QueueRank { rank } => self.on_queued(conn, rank),
            M::OutOfPartReqs => self.on_out_of_parts(conn, now),
            M::SendingPart {
                file,
                start,
                end,
                data,
                ..
            } => self.on_part_data(conn, file, start, end, data, now),
            M::CompressedPart {
                file,
                start,
                packed_len,
                data,
                ..
            } => self.on_packed_data(conn, file, start, packed_len, data, now),
            // Neither: SecIdent (we announce none), source exchange (not
            // offered), chat, comments, ids.
            _ => {}
        }
    }

    fn own_hello(&self, local_ip: Option<Ipv4Addr>) -> Hello {
        let id = if self.server_id != 0 {
            self.server_id
        } else {
            local_ip.map_or(0, ip_to_id)
        };
        let mut h = self.own.hello(self.cfg.user_hash, id, self.cfg.listen_port);
        if let Some((ip, port)) = self.server {
            h.server_ip = ip;
            h.server_port = port;
        }
        h
    }

    fn on_hello(&mut self, conn: ConnId, h: Hello, now: Instant) {
        if h.user_hash == self.cfg.user_hash {
            return self.close(conn, CloseReason::SelfConnection);
        }
        let c = self.conns.get_mut(&conn).expect("caller checked");
        let info = h.info();
        c.ctx.peer_ext_requests = info.misc1.ext_requests;
        let first = c.peer.is_none();
        c.peer = Some(PeerInfo {
            user_hash: h.user_hash,
            info,
        });
        if first {
            self.start_downloads(conn, now);
            self.resume_callback(conn, now);
        }
    }

    // ---- storage and time -------------------------------------------------

    /// Bytes the runtime finished writing to a connection.
    pub fn on_sent(&mut self, conn: ConnId, bytes: u64, now: Instant) {
        self.now = Some(now);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.up.in_flight = c.up.in_flight.saturating_sub(bytes);
            self.serve(conn, now);
            self.flush();
        }
    }

    /// A storage operation of `file` finished.
    pub fn handle_storage(&mut self, file: FileId, ev: StorageEvent, now: Instant) {
        if file as usize >= self.files.len() {
            return;
        }
        self.now = Some(now);
        match self.files[file as usize].content.handle_storage(ev) {
            None | Some(StorageEvent::PieceDone { .. }) => {}
            Some(StorageEvent::ReadDone { id, data }) if id & repair::RECOVERY_READ != 0 => {
                self.on_recovery_read(file, id, data, now)
            }
            Some(StorageEvent::ReadDone { id, data }) => self.on_read_done(id, data, now),
            Some(StorageEvent::ReadFailed { id, fault, .. }) if id & repair::RECOVERY_READ != 0 => {
                self.on_recovery_read(file, id, Err(fault.to_string()), now)
            }
            Some(StorageEvent::ReadFailed { id, fault, .. }) => {
                // The peer it was for is dropped; when it comes back it is
                // told the parts that are left.
                self.on_read_done(id, Err(fault.to_string()), now)
            }
            Some(StorageEvent::Failed { error }) => {
                self.events.push_back(Event::Fatal { file, error })
            }
        }
        self.flush();
    }

    /// An earlier run wrote the first `bytes` of part `piece` of `file`:
    /// only the rest is asked for, from the last whole block the prefix
    /// holds. Returns the bytes taken (0: none), which the storage layer
    /// must hash back before any new write to the part. Call
    /// right after [`Client::add_download`]; nothing is taken of a part
    /// that is had or checked.
    pub fn resume_partial(&mut self, file: FileId, piece: u32, bytes: u32) -> u32 {
        match self.files.get_mut(file as usize) {
            Some(f) => f.content.resume_partial(piece, bytes),
            None => 0,
        }
    }

    /// Periodic work: pipeline sizing, timeouts.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = Some(now);
        if self.next_tick.is_some_and(|t| t <= now) {
            self.next_tick = (!self.conns.is_empty()
                || self.files.iter().any(|f| !f.recovering.is_empty()))
            .then(|| now + TICK);
            self.tick(now);
        }
        self.flush();
    }

    /// When [`Client::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_tick
    }

    /// The next thing the runtime must do.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.flush();
        self.events.pop_front()
    }

    fn ensure_tick(&mut self, now: Instant) {
        if self.next_tick.is_none() {
            self.next_tick = Some(now + TICK);
        }
    }

    fn tick(&mut self, now: Instant) {
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in conns {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            let silent = now.saturating_duration_since(c.last_recv_at);
            let waiting = c.down.as_ref().is_some_and(|d| {
                matches!(d.state, conn::DownState::Queued | conn::DownState::WaitSlot)
            }) || c.up.slot != conn::Slot::None;
            let limit = if waiting {
                QUEUED_TIMEOUT
            } else {
                IDLE_TIMEOUT
            };
            if silent > limit {
                self.close(id, CloseReason::Idle);
                continue;
            }
            if c.peer.is_none()
                && now.saturating_duration_since(c.opened_at) > self.cfg.hello_timeout
            {
                self.close(id, CloseReason::NoHello);
                continue;
            }
            if let Some(d) = c.down.as_mut() {
                let rate = d.meter.recent_rate(now);
                d.pipeline.on_tick(now, rate);
                let stalled = d.pending.iter().any(|p| p.asked)
                    && now.saturating_duration_since(d.last_data_at) > DOWNLOAD_TIMEOUT;
                if stalled {
                    self.close(id, CloseReason::Stalled);
                    continue;
                }
            }
            self.send_block_requests(id, now);
        }
        self.recovery_timeouts(now);
        self.nudge_idle_downloaders(now);
    }

    // ---- helpers ----------------------------------------------------------

    fn mark_dirty(&mut self, conn: ConnId) {
        self.dirty.mark(conn);
    }

    /// Handles the files' content events, then moves queued bytes of every
    /// touched connection into Send events.
    fn flush(&mut self) {
        for file in 0..self.files.len() {
            self.pump(file as FileId);
        }
        for conn in self.dirty.take() {
            if let Some(c) = self.conns.get_mut(&conn)
                && c.has_output()
            {
                for (data, payload) in c.take_output() {
                    self.events.push_back(Event::Send {
                        conn,
                        data,
                        payload,
                    });
                }
            }
        }
    }

    /// Drops a peer that broke the protocol.
    fn fail(&mut self, conn: ConnId, reason: String) {
        self.stats.protocol_errors += 1;
        self.close(conn, CloseReason::Protocol(reason));
    }

    fn close(&mut self, conn: ConnId, reason: CloseReason) {
        if let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.closing) {
            c.closing = true;
            self.mark_dirty(conn);
            self.flush();
            self.events.push_back(Event::Close { conn, reason });
        }
    }

    /// Counts `n` strikes against an address (`proven`: for a block of
    /// its own found bad); at [`BAN_STRIKES`] it is banned and its
    /// connections closed.
    fn strike(&mut self, ip: IpAddr, n: u32, proven: bool) {
        let ip = canonical(ip);
        let s = self.strikes.entry(ip).or_insert(0);
        *s += n;
        if *s >= BAN_STRIKES {
            let strikes = *s;
            self.ban(
                ip,
                if proven {
                    BanReason::BadBlock { strikes }
                } else {
                    BanReason::BadPieces { strikes }
                },
            );
        }
    }

    fn ban(&mut self, ip: IpAddr, reason: BanReason) {
        let ip = canonical(ip);
        if self.banned.insert(ip) {
            self.stats.banned += 1;
            self.events.push_back(Event::Ban { ip, reason });
        }
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| canonical(c.addr.ip()) == ip)
            .map(|(k, _)| *k)
            .collect();
        for c in conns {
            self.close(c, CloseReason::Banned(reason));
        }
    }
}

/// IPv4-mapped IPv6 addresses are their IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests;
