//! The session: transfers by id, connections by id, and the commands that
//! add, pause, resume and remove transfers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use weir_bt::metainfo::Metainfo;
use weir_bt::torrent::{Torrent, TorrentConfig, TorrentRef};
use weir_bt::wire::Handshake;
use weir_core::bitfield::Bitfield;
use weir_core::close::{BanReason, CloseReason};
use weir_core::peers::{Bans, ConnCounts, PeerBook, Source};
use weir_ed2k::hash::FileHashes;
use weir_ed2k::link::FileLink;
use weir_ed2k::transfer::{Client, ClientConfig, FileId};

use crate::config::SessionConfig;
use crate::server::Server;
use crate::transfer::{BtSide, Ed2kSide, RunState, Transfer, TransferInfo, Transfers};
use crate::types::{
    AddError, ConnId, Link, LogLevel, Proto, SessionEvent, TransferEvent, TransferId,
};

/// Where a connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// We are dialling it (connect and handshake).
    Dialing,
    /// It connected to us; its handshake is not done.
    Handshaking,
    /// A peer of a protocol core.
    Peer,
}

/// A connection the session knows.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    pub(crate) proto: Proto,
    pub(crate) addr: SocketAddr,
    /// The transfer it is for (an incoming eD2k connection may ask for any
    /// file: none).
    pub(crate) transfer: Option<TransferId>,
    pub(crate) stage: Stage,
    pub(crate) outgoing: bool,
    pub(crate) since: Instant,
    /// Transport and encryption, once the runtime says.
    pub(crate) link: Link,
}

/// Options of a torrent added to the session.
#[derive(Clone, Debug)]
pub struct AddTorrent {
    /// The torrent.
    pub meta: Arc<Metainfo>,
    /// Pieces a trusted journal vouches for.
    pub had: Bitfield,
    /// Pieces to hash from storage first (data found without a journal).
    pub check: Bitfield,
    /// Pieces an earlier run wrote the start of, `(piece, bytes)`: only the
    /// rest is asked for (see [`SessionEvent::OpenStorage`]'s `resumed`).
    pub partial: Vec<(u32, u32)>,
    /// Peers to dial (`--peer`).
    pub peers: Vec<SocketAddr>,
    /// Start paused.
    pub paused: bool,
    /// Keep seeding once complete.
    pub seed: bool,
    /// Fetch missing pieces (off: only serve what is had, as `weir seed`
    /// does: never interested, never asking).
    pub download: bool,
    /// Pieces wanted (`None`: all): the others hold only deselected files
    /// and are never asked for ([`weir_core::selection::Selection::pieces`]).
    pub wanted: Option<Bitfield>,
    /// Each piece's priority (`None`: all normal; see
    /// [`weir_core::selection::piece_priorities`]).
    pub priorities: Option<Arc<[weir_core::picker::Priority]>>,
}

/// Options of an eD2k download added to the session.
#[derive(Clone, Debug)]
pub struct AddEd2k {
    /// The file.
    pub link: FileLink,
    /// Parts a trusted journal vouches for.
    pub had: Bitfield,
    /// Parts to hash from storage once the part hashes are known.
    pub check: Bitfield,
    /// Parts an earlier run wrote the start of, `(part, bytes)`.
    pub partial: Vec<(u32, u32)>,
    /// Sources to dial besides the link's.
    pub peers: Vec<SocketAddr>,
    /// Start paused.
    pub paused: bool,
    /// Keep sharing once complete.
    pub seed: bool,
}

/// One BitTorrent peer of a transfer ([`Session::bt_peers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BtPeer {
    /// What the torrent knows of it.
    pub stats: weir_bt::torrent::PeerStats,
    /// It connected to us.
    pub incoming: bool,
    /// What the connection runs over.
    pub link: Link,
}

/// Every transfer of every protocol, sans-IO. See the crate docs.
#[derive(Debug)]
pub struct Session {
    pub(crate) cfg: SessionConfig,
    /// `cfg.book`, shared by every transfer's peer book.
    pub(crate) book_cfg: std::sync::Arc<weir_core::peers::BookConfig>,
    pub(crate) transfers: Transfers,
    /// The settings its sleeping torrents share.
    pub(crate) sleeping: weir_bt::torrent::SharedConfigs,
    /// The last [`Session::snapshot`].
    pub(crate) snap: Snap,
    pub(crate) by_info_hash: BTreeMap<[u8; 20], TransferId>,
    pub(crate) by_file: BTreeMap<FileId, TransferId>,
    pub(crate) ed2k: Client,
    /// Peers an eD2k server or a wedged downloader asked us to connect to,
    /// for no particular transfer.
    pub(crate) callbacks: PeerBook,
    pub(crate) servers: Vec<Server>,
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    pub(crate) counts: ConnCounts,
    pub(crate) bans: Bans,
    pub(crate) events: VecDeque<SessionEvent>,
    /// When each transfer's torrent wants its timeout handled.
    pub(crate) timers: BTreeSet<(Instant, TransferId)>,
    pub(crate) timer_of: BTreeMap<TransferId, Instant>,
    pub(crate) next_dial: Option<Instant>,
    /// Transfers that asked for a dial pass of their own (see
    /// [`Session::ask_dial`]), and since when.
    pub(crate) dial_asked: BTreeSet<TransferId>,
    pub(crate) dial_asked_at: Option<Instant>,
    /// A transfer had a peer to dial now and the session-wide limits had
    /// no room for it (since the last full pass): a freed slot then needs
    /// a pass over every transfer, not only over the one whose connection
    /// closed.
    pub(crate) global_starved: bool,
    /// Transfers visited by dial passes (tests count the work).
    #[cfg(test)]
    pub(crate) dial_visits: u64,
    pub(crate) dial_cursor: u32,
    pub(crate) next_conn: ConnId,
    next_id: u32,
    pub(crate) rng: fastrand::Rng,
    pub(crate) now: Option<Instant>,
    /// Transfers with an eD2k file attached to their torrent's content:
    /// (transfer, eD2k file, the content's scheme for its parts).
    pub(crate) mixed: Vec<(TransferId, FileId, weir_core::content::SchemeId)>,
    /// The attached files' contents are lent to the eD2k core right now.
    pub(crate) lending: bool,
    /// BitTorrent connections to forget once the contents are back.
    pub(crate) deferred: Vec<(ConnId, Option<String>)>,
    /// Strikes of senders on no network a torrent speaks.
    pub(crate) strikes: BTreeMap<IpAddr, u32>,
}

impl Session {
    /// An empty session.
    pub fn new(cfg: SessionConfig) -> Self {
        let mut ccfg = ClientConfig::new(cfg.user_hash);
        ccfg.nick = cfg.nick.clone();
        ccfg.listen_port = cfg.ed2k_port;
        ccfg.order = cfg.order;
        ccfg.seed = cfg.seed ^ 0xed2c;
        ccfg.upload_slots = cfg.ed2k_upload_slots;
        ccfg.accept_compressed = cfg.ed2k_accept_compressed;
        ccfg.hello_timeout = cfg.ed2k_hello_timeout;
        if let Some(m) = cfg.max_requests {
            ccfg.max_requests = m;
        }
        let callbacks = PeerBook::new(cfg.book.clone(), cfg.policy.clone(), cfg.seed ^ 0xca11);
        Self {
            book_cfg: std::sync::Arc::new(cfg.book.clone()),
            ed2k: Client::new(ccfg),
            callbacks,
            servers: Vec::new(),
            transfers: Transfers::default(),
            sleeping: Default::default(),
            snap: Snap::default(),
            by_info_hash: BTreeMap::new(),
            by_file: BTreeMap::new(),
            conns: BTreeMap::new(),
            counts: ConnCounts::default(),
            bans: Bans::new(cfg.book.max_bans),
            events: VecDeque::new(),
            timers: BTreeSet::new(),
            timer_of: BTreeMap::new(),
            next_dial: None,
            dial_asked: BTreeSet::new(),
            dial_asked_at: None,
            global_starved: false,
            #[cfg(test)]
            dial_visits: 0,
            dial_cursor: 0,
            next_conn: 1,
            next_id: 1,
            rng: fastrand::Rng::with_seed(cfg.seed),
            now: None,
            mixed: Vec::new(),
            lending: false,
            deferred: Vec::new(),
            strikes: BTreeMap::new(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// Most block data a protocol core queues for one connection of
    /// `proto` before it stops serving it: its upload watermark plus the
    /// one read that may cross it (0 for a server, which gets no blocks).
    /// A runtime bounds each connection's write queue a little above this
    /// and drops a peer that lets it fill: that peer does not read.
    pub fn upload_bound(&self, proto: Proto) -> u64 {
        match proto {
            Proto::Bt => {
                let t = TorrentConfig::new(self.cfg.peer_id);
                t.upload_watermark + u64::from(t.max_read)
            }
            Proto::Ed2k => {
                let c = self.ed2k.config();
                c.upload_watermark + u64::from(c.max_read)
            }
            Proto::Ed2kServer => 0,
        }
    }

    fn new_id(&mut self) -> TransferId {
        let id = TransferId(self.next_id);
        self.next_id += 1;
        id
    }

    fn book(&mut self, salt: u64) -> PeerBook {
        PeerBook::new(
            self.book_cfg.clone(),
            self.cfg.policy.clone(),
            self.cfg.seed ^ salt ^ self.rng.u64(..),
        )
    }

    /// Adds a torrent. Its storage must be opened
    /// ([`SessionEvent::OpenStorage`] comes at once) before its checks run.
    pub fn add_torrent(&mut self, spec: AddTorrent, now: Instant) -> Result<TransferId, AddError> {
        self.now = Some(now);
        let meta = spec.meta;
        if let Some(&id) = self.by_info_hash.get(&meta.info_hash) {
            return Err(AddError::Duplicate(id));
        }
        let id = self.new_id();
        let mut tcfg = TorrentConfig::new(self.cfg.peer_id);
        tcfg.order = self.cfg.order;
        tcfg.listen_port = self.cfg.bt_port;
        tcfg.seed = self.cfg.seed ^ u64::from(id.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        if let Some(m) = self.cfg.max_requests {
            tcfg.max_requests = m;
        }
        tcfg.download = spec.download;
        tcfg.wanted = spec.wanted;
        tcfg.priorities = spec.priorities;
        tcfg.pex = self.cfg.pex;
        tcfg.dht_port = self.cfg.dht_port.filter(|_| !meta.info.private);
        let digests = Torrent::digests(&meta);
        let mut torrent = Torrent::new(&meta, tcfg, &spec.had, &spec.check);
        let resumed = spec
            .partial
            .iter()
            .map(|&(piece, bytes)| (piece, torrent.resume_partial(piece, bytes)))
            .filter(|&(_, taken)| taken > 0)
            .collect();
        self.events.push_back(SessionEvent::OpenStorage {
            transfer: id,
            digests,
            resumed,
        });
        let mut book = self.book(u64::from(id.0));
        for p in spec.peers {
            self.learn(&mut book, p, Source::Manual, now);
        }
        self.by_info_hash.insert(meta.info_hash, id);
        self.transfers.insert(
            id,
            Box::new(Transfer {
                name: meta.info.name.clone(),
                size: meta.info.total_length(),
                bt: Some(BtSide::new(torrent, meta, book)),
                ed2k: None,
                run: if spec.paused {
                    RunState::Paused
                } else {
                    RunState::Running
                },
                seed: spec.seed,
                added_at: now,
                checked: false,
                complete_at: None,
                failed: None,
                counts: ConnCounts::default(),
                ed2k_mismatch: false,
                touched: false,
            }),
        );
        self.pump_bt(id, now);
        self.ask_dial(id, now);
        Ok(id)
    }

    /// Adds an eD2k download. Its storage opens once the part hashes are
    /// known ([`SessionEvent::OpenStorage`]: at once when the link carries
    /// them, else after a source sent the hashset).
    pub fn add_ed2k(&mut self, spec: AddEd2k, now: Instant) -> Result<TransferId, AddError> {
        self.now = Some(now);
        if let Some(id) = self.find_ed2k(&spec.link.hash) {
            return Err(AddError::Duplicate(id));
        }
        if let Some((id, index)) = self.matching_torrent_file(&spec.link) {
            // One file from two networks: the eD2k side joins the torrent.
            self.attach_ed2k(id, index, &spec.link, now)?;
            for p in spec.peers {
                self.add_peers(id, Proto::Ed2k, &[p], Source::Manual, now);
            }
            self.ask_sources(now);
            self.ask_dial(id, now);
            return Ok(id);
        }
        // The client's events (DigestsKnown at once when the link has the
        // part hashes) are pumped only once the transfer is in place.
        self.lend();
        let file = match self.ed2k.add_download(&spec.link, &spec.had, &spec.check) {
            Ok(f) => f,
            Err(e) => {
                self.pump_ed2k(now);
                self.unlend(now);
                return Err(e.into());
            }
        };
        let resumed: Vec<(u32, u32)> = spec
            .partial
            .iter()
            .map(|&(part, bytes)| (part, self.ed2k.resume_partial(file, part, bytes)))
            .filter(|&(_, taken)| taken > 0)
            .collect();
        let id = self.new_id();
        let mut book = self.book(u64::from(id.0) << 8);
        for s in &spec.link.sources {
            // Names are the runtime's to resolve (under the policy); it
            // passes what they resolve to in `peers`.
            if let weir_ed2k::link::SourceHost::Ip(ip) = s.host {
                let a = SocketAddr::from((ip, s.port));
                self.learn(&mut book, a, Source::Manual, now);
            }
        }
        for p in spec.peers {
            self.learn(&mut book, p, Source::Manual, now);
        }
        self.by_file.insert(file, id);
        self.transfers.insert(
            id,
            Box::new(Transfer {
                name: spec.link.name.as_str().into(),
                size: spec.link.size,
                bt: None,
                ed2k: Some(Box::new(Ed2kSide {
                    file,
                    hash: spec.link.hash,
                    book,
                    resumed,
                })),
                run: if spec.paused {
                    RunState::Paused
                } else {
                    RunState::Running
                },
                seed: spec.seed,
                added_at: now,
                checked: false,
                complete_at: None,
                failed: None,
                counts: ConnCounts::default(),
                ed2k_mismatch: false,
                touched: false,
            }),
        );
        self.pump_ed2k(now);
        self.unlend(now);
        self.ask_sources(now);
        self.ask_dial(id, now);
        Ok(id)
    }

    /// Shares a complete file on eD2k (hashed by the caller).
    pub fn share_ed2k(
        &mut self,
        name: String,
        hashes: &FileHashes,
        now: Instant,
    ) -> Result<TransferId, AddError> {
        self.now = Some(now);
        if let Some(id) = self.find_ed2k(&hashes.file_hash) {
            return Err(AddError::Duplicate(id));
        }
        // Pumped once the transfer is in place (DigestsKnown comes at once).
        self.lend();
        let file = match self.ed2k.add_shared(name.clone(), hashes) {
            Ok(f) => f,
            Err(e) => {
                self.pump_ed2k(now);
                self.unlend(now);
                return Err(e.into());
            }
        };
        let id = self.new_id();
        let book = self.book(u64::from(id.0) << 8);
        self.by_file.insert(file, id);
        self.transfers.insert(
            id,
            Box::new(Transfer {
                name: name.into(),
                size: hashes.size,
                bt: None,
                ed2k: Some(Box::new(Ed2kSide {
                    file,
                    hash: hashes.file_hash,
                    book,
                    resumed: Vec::new(),
                })),
                run: RunState::Running,
                seed: true,
                added_at: now,
                checked: true,
                complete_at: Some(now),
                failed: None,
                counts: ConnCounts::default(),
                ed2k_mismatch: false,
                touched: false,
            }),
        );
        self.pump_ed2k(now);
        self.unlend(now);
        self.offer_files();
        Ok(id)
    }

    fn find_ed2k(&self, hash: &weir_ed2k::Md4Hash) -> Option<TransferId> {
        self.transfers
            .iter()
            .find(|(_, t)| t.ed2k.as_ref().is_some_and(|e| e.hash == *hash))
            .map(|(id, _)| *id)
    }

    /// Adds an eD2k server to log into (one is used at a time).
    pub fn add_ed2k_server(&mut self, addr: SocketAddr, now: Instant) {
        self.now = Some(now);
        if !self.servers.iter().any(|s| s.addr == addr) {
            self.servers.push(Server::new(addr, now));
            self.next_dial = Some(now);
        }
    }

    /// Asks for a dial pass over transfer `id` alone, at the next
    /// [`Session::handle_timeout`] (now).
    pub(crate) fn ask_dial(&mut self, id: TransferId, now: Instant) {
        self.dial_asked.insert(id);
        self.dial_asked_at = Some(self.dial_asked_at.map_or(now, |t| t.min(now)));
    }

    /// Learns peers of a transfer from a source (a tracker answer, `--peer`,
    /// later the DHT or PEX). At most one answer's worth is taken.
    pub fn add_peers(
        &mut self,
        id: TransferId,
        proto: Proto,
        addrs: &[SocketAddr],
        source: Source,
        now: Instant,
    ) -> usize {
        self.now = Some(now);
        let own = self.own_filter();
        let Some(t) = self.transfers.get_mut(&id) else {
            return 0;
        };
        let book = match proto {
            Proto::Bt => t.bt.as_mut().map(|b| &mut b.book),
            Proto::Ed2k => t.ed2k.as_mut().map(|e| &mut e.book),
            Proto::Ed2kServer => None,
        };
        let Some(book) = book else { return 0 };
        let bans = &self.bans;
        let n = book.add_answer(
            addrs
                .iter()
                .copied()
                .filter(|a| !own(a) && !bans.contains(a.ip())),
            source,
            now,
        );
        if n > 0 {
            self.ask_dial(id, now);
        }
        n
    }

    /// A predicate telling our own listen addresses (as a tracker or a
    /// server saw us).
    fn own_filter(&self) -> impl Fn(&SocketAddr) -> bool + use<> {
        let ports: Vec<u16> = self
            .cfg
            .bt_port
            .into_iter()
            .chain((self.cfg.ed2k_port != 0).then_some(self.cfg.ed2k_port))
            .collect();
        let ips = self.cfg.own_ips.clone();
        move |a: &SocketAddr| {
            ports.contains(&a.port())
                && (ips.contains(&a.ip())
                    || ips.iter().any(IpAddr::is_unspecified) && a.ip().is_loopback())
        }
    }

    fn learn(&self, book: &mut PeerBook, addr: SocketAddr, source: Source, now: Instant) {
        // A book made after a ban does not know it: the session's bans
        // keep banned addresses out of every book.
        if !(self.own_filter())(&addr) && !self.bans.contains(addr.ip()) {
            book.add(addr, source, now);
        }
    }

    /// Stops a transfer's connections and dials until resumed.
    pub fn pause(&mut self, id: TransferId, now: Instant) {
        self.now = Some(now);
        let Some(t) = self.transfers.get_mut(&id) else {
            return;
        };
        t.run = RunState::Paused;
        self.close_transfer_conns(id, CloseReason::TransferPaused, now);
    }

    /// Lets a paused transfer run again.
    pub fn resume(&mut self, id: TransferId, now: Instant) {
        self.now = Some(now);
        if let Some(t) = self.transfers.get_mut(&id) {
            t.run = RunState::Running;
            self.ask_dial(id, now);
        }
    }

    /// Forgets a transfer (its storage is the runtime's to close). eD2k
    /// files stay known to the eD2k core, paused, until the session ends.
    pub fn remove(&mut self, id: TransferId, now: Instant) -> bool {
        self.now = Some(now);
        if !self.transfers.contains_key(&id) {
            return false;
        }
        self.pause(id, now);
        let t = self.transfers.remove(&id).expect("checked");
        if let Some(b) = &t.bt {
            self.by_info_hash.remove(&b.meta.info_hash);
        }
        if let Some(e) = &t.ed2k {
            self.by_file.remove(&e.file);
        }
        if let Some(at) = self.timer_of.remove(&id) {
            self.timers.remove(&(at, id));
        }
        true
    }

    /// Whether every transfer is complete (or failed, or paused) and none
    /// wants to keep serving: a CLI run can end.
    pub fn is_done(&self) -> bool {
        self.transfers
            .values()
            .all(|t| !t.running() || (t.complete_at.is_some() && !t.seed))
    }

    /// The transfers, in id order.
    pub fn transfer_ids(&self) -> impl Iterator<Item = TransferId> + '_ {
        self.transfers.keys().copied()
    }

    /// The transfer of a torrent.
    pub fn find_torrent(&self, info_hash: &[u8; 20]) -> Option<TransferId> {
        self.by_info_hash.get(info_hash).copied()
    }

    /// What displays read of a transfer at `now`.
    pub fn info(&self, id: TransferId, now: Instant) -> Option<TransferInfo> {
        let t = self.transfers.get(&id)?;
        Some(self.info_of(id, t, now))
    }

    /// Every transfer's [`TransferInfo`] at `now`, in id order (one walk of
    /// the map, not a lookup per transfer).
    pub fn infos(&self, now: Instant) -> impl Iterator<Item = TransferInfo> + '_ {
        self.transfers
            .iter()
            .map(move |(id, t)| self.info_of(*id, t, now))
    }

    /// Every transfer's [`TransferInfo`] at `now`, in id order, as
    /// [`Session::infos`] gives them, but kept between calls and
    /// recomputed only where something may have changed: the transfers
    /// touched since (every mutable access to a transfer notes it), those
    /// with peers at the last call (their rates move with time) and those
    /// with an eD2k side (the session's one eD2k client moves them). A
    /// session of idle transfers answers with the vector it gave last
    /// (a daemon with 1,000 idle torrents spent a third of each
    /// `torrent-get` walking every transfer's torrent, content and books).
    /// The vector is changed in place when the caller has dropped the last
    /// one, copied otherwise.
    pub fn snapshot(&mut self, now: Instant) -> Arc<Vec<TransferInfo>> {
        let touched = self.transfers.take_touched();
        let version = self.transfers.version();
        if self.snap.version != Some(version) {
            // Transfers came or went: a new vector, in which every entry
            // the last one holds for an untouched, quiet transfer is
            // kept, not computed again (a daemon given 20,000 torrents
            // walked them all at every snapshot between two adds: 0.66 ms
            // of CPU an add at the end, quadratic in all).
            let old = std::mem::take(&mut self.snap.infos);
            let mut again: Vec<TransferId> = touched;
            again.extend(self.snap.live.iter().map(|&k| old[k].id));
            again.sort_unstable();
            let mut infos = Vec::with_capacity(self.transfers.len());
            let mut j = 0;
            for (&id, t) in self.transfers.iter() {
                while j < old.len() && old[j].id < id {
                    j += 1;
                }
                if j < old.len() && old[j].id == id && again.binary_search(&id).is_err() {
                    infos.push(old[j].clone());
                } else {
                    infos.push(self.info_of(id, t, now));
                }
            }
            self.snap.live = live(&infos, 0..infos.len());
            self.snap.infos = Arc::new(infos);
            self.snap.version = Some(version);
            return self.snap.infos.clone();
        }
        let mut stale: Vec<usize> = touched
            .iter()
            .filter_map(|id| self.snap.infos.binary_search_by_key(id, |i| i.id).ok())
            .collect();
        stale.extend_from_slice(&self.snap.live);
        if !stale.is_empty() {
            stale.sort_unstable();
            stale.dedup();
            let mut infos = std::mem::take(&mut self.snap.infos);
            let v = Arc::make_mut(&mut infos);
            for &k in &stale {
                let id = v[k].id;
                if let Some(t) = self.transfers.get(&id) {
                    v[k] = self.info_of(id, t, now);
                }
            }
            self.snap.live = live(&infos, stale);
            self.snap.infos = infos;
        }
        self.snap.infos.clone()
    }

    fn info_of(&self, id: TransferId, t: &Transfer, now: Instant) -> TransferInfo {
        #[cfg(test)]
        self.snap.made.set(self.snap.made.get() + 1);
        let mut info = TransferInfo {
            id,
            name: t.name.clone(),
            size: t.size,
            wanted: t.size,
            phase: t.phase(),
            info_hash: t.bt.as_ref().map(|b| b.meta.info_hash),
            ed2k_hash: t.ed2k.as_ref().map(|e| e.hash),
            bytes_had: 0,
            downloaded: (0, 0),
            uploaded: (0, 0),
            download_rate: 0.0,
            upload_rate: 0.0,
            peers: 0,
            known: 0,
            hash_failures: 0,
            protocol_errors: 0,
            banned: 0,
            added_at: t.added_at,
            complete_at: t.complete_at,
            error: t.failed.clone(),
            disk_full: None,
        };
        if let Some(b) = &t.bt {
            let s = b.view().stats(now);
            info.bytes_had = s.bytes_had;
            info.wanted = s.bytes_wanted;
            info.downloaded.0 = s.downloaded;
            info.uploaded.0 = s.uploaded;
            info.download_rate += s.download_rate;
            info.upload_rate += s.upload_rate;
            info.peers += s.peers;
            info.known += b.book.counts().known;
            info.hash_failures += s.hash_failures;
            info.protocol_errors += s.protocol_errors;
            info.banned += s.banned;
        }
        if let Some(e) = &t.ed2k {
            let p = self.ed2k.progress(e.file);
            if t.bt.is_none() {
                info.bytes_had = p.verified;
            }
            // The eD2k core counts for all its files; a session with one
            // eD2k file reads its own figures.
            let s = self.ed2k.stats(now);
            info.downloaded.1 = s.downloaded;
            info.uploaded.1 = s.uploaded;
            info.download_rate += s.download_rate;
            info.upload_rate += s.upload_rate;
            info.peers += t.counts.peers;
            info.known += e.book.counts().known;
            info.hash_failures += s.hash_failures;
            info.protocol_errors += s.protocol_errors;
            info.banned += s.banned;
        }
        info
    }

    /// The BitTorrent peers of a transfer at `now`, each with whether it
    /// connected to us (empty: no such transfer, or no BitTorrent side).
    pub fn bt_peers(&self, id: TransferId, now: Instant) -> Vec<BtPeer> {
        let Some(b) = self.transfers.get(&id).and_then(|t| t.bt.as_ref()) else {
            return Vec::new();
        };
        let Some(t) = b.view().awake() else {
            return Vec::new();
        };
        t.peer_stats(now)
            .into_iter()
            .map(|stats| {
                let c = self.conns.get(&stats.conn);
                BtPeer {
                    incoming: c.is_some_and(|c| !c.outgoing),
                    link: c.map(|c| c.link).unwrap_or_default(),
                    stats,
                }
            })
            .collect()
    }

    /// Records what connection `conn` runs over (see [`Link`]); a
    /// connection the session does not know is ignored.
    pub fn set_link(&mut self, conn: ConnId, link: Link) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.link = link;
        }
    }

    /// Connections by stage over the whole session.
    pub fn counts(&self) -> ConnCounts {
        self.counts
    }

    /// Connections of one transfer by stage (the counts its per-transfer
    /// limits are checked against).
    pub fn transfer_counts(&self, id: TransferId) -> Option<ConnCounts> {
        self.transfers.get(&id).map(|t| t.counts)
    }

    /// The transfer a connection is attached to: the one it was dialled
    /// for, or routed to by its handshake (`None`: unknown connection, an
    /// eD2k server, or an accepted eD2k connection, which may ask for any
    /// file). A runtime picks the connection's per-transfer caps with it.
    pub fn conn_transfer(&self, conn: ConnId) -> Option<TransferId> {
        self.conns.get(&conn)?.transfer
    }

    /// A torrent transfer's metainfo (for its trackers, saving it).
    pub fn metainfo(&self, id: TransferId) -> Option<Arc<Metainfo>> {
        self.transfers
            .get(&id)
            .and_then(|t| t.bt.as_ref())
            .map(|b| b.meta.clone())
    }

    /// A torrent transfer's state machine, read-only: awake or asleep
    /// (an idle torrent sleeps, see [`weir_bt::torrent::Dormant`]; reading
    /// does not wake it).
    pub fn torrent(&self, id: TransferId) -> Option<TorrentRef<'_>> {
        self.transfers.get(&id)?.bt.as_ref().map(|b| b.view())
    }

    /// The transfer's eD2k file in the eD2k core, and the core.
    pub fn ed2k_file(&self, id: TransferId) -> Option<(&Client, FileId)> {
        let f = self.transfers.get(&id)?.ed2k.as_ref()?.file;
        Some((&self.ed2k, f))
    }

    /// Bans `ip` everywhere: no dial, no connection accepted, the
    /// transfers' books forget it, and its connections close.
    pub(crate) fn ban(&mut self, ip: IpAddr, reason: BanReason) {
        let ip = weir_core::peers::canonical(ip);
        if !self.bans.insert(ip) {
            return;
        }
        for t in self.transfers.values_mut() {
            if let Some(b) = &mut t.bt {
                b.book.ban(ip);
            }
            if let Some(e) = &mut t.ed2k {
                e.book.ban(ip);
            }
        }
        self.callbacks.ban(ip);
        self.events.push_back(SessionEvent::Banned { ip, reason });
        // Its connections of every transfer and protocol end too (the
        // transfer that caught it closed its own already).
        let Some(now) = self.now else {
            return;
        };
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.proto != Proto::Ed2kServer && weir_core::peers::canonical(c.addr.ip()) == ip
            })
            .map(|(k, _)| *k)
            .collect();
        for conn in conns {
            self.forget_conn(conn, now, None);
            self.events.push_back(SessionEvent::Close {
                conn,
                reason: CloseReason::Banned(reason),
            });
        }
    }

    pub(crate) fn log(&mut self, level: LogLevel, message: String) {
        self.events.push_back(SessionEvent::Log { level, message });
    }

    pub(crate) fn transfer_event(&mut self, transfer: TransferId, event: TransferEvent) {
        self.events
            .push_back(SessionEvent::Transfer { transfer, event });
    }

    /// The next thing the runtime must do.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// Our handshake for an incoming BitTorrent connection whose peer asked
    /// for `info_hash`, if we have that torrent and it takes peers now.
    pub fn bt_route(&self, info_hash: &[u8; 20]) -> Option<Handshake> {
        let id = self.by_info_hash.get(info_hash)?;
        let t = self.transfers.get(id)?;
        if !t.running() || !t.checked {
            return None;
        }
        t.bt.as_ref().map(|b| b.view().handshake())
    }
}

/// What [`Session::snapshot`] keeps between calls.
#[derive(Debug, Default)]
pub(crate) struct Snap {
    infos: Arc<Vec<TransferInfo>>,
    /// The transfers' version it was built at (`None`: never built).
    version: Option<u64>,
    /// Indices of the entries that change with time alone (peers, an eD2k
    /// side).
    live: Vec<usize>,
    /// Infos computed (tests count them).
    #[cfg(test)]
    pub(crate) made: std::cell::Cell<u64>,
}

/// The indices among `ks` of infos that change with time alone.
fn live(infos: &[TransferInfo], ks: impl IntoIterator<Item = usize>) -> Vec<usize> {
    ks.into_iter()
        .filter(|&k| infos[k].peers > 0 || infos[k].ed2k_hash.is_some())
        .collect()
}
