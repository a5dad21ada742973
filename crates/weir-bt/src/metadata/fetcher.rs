//! Fetching one info dictionary from many peers: [`MetadataFetcher`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha1::{Digest, Sha1};
use weir_core::pipeline::{Pipeline, PipelineConfig};

use super::{MetadataMsg, PIECE_LEN, frame, piece_count, piece_len};
use crate::metainfo::{Metainfo, MetainfoError};
use crate::torrent::ConnId;
use crate::wire::{ExtHandshake, UT_METADATA};

/// Tunables of a fetch.
#[derive(Clone, Debug)]
pub struct FetcherConfig {
    /// Largest info dictionary fetched; peers claiming more are not asked.
    pub max_size: u64,
    /// A request unanswered this long is given up and asked elsewhere.
    pub request_timeout: Duration,
    /// Most requests in flight to one peer.
    pub max_in_flight: u32,
    /// Most peers taking part (others are ignored).
    pub max_peers: usize,
    /// Timeouts and rejects after which a peer is asked nothing more.
    pub max_failures: u32,
    /// After a reject, the peer is not asked again for this long.
    pub reject_backoff: Duration,
    /// Unsolicited data messages tolerated before a peer is dropped.
    pub max_unsolicited: u32,
    /// Trackers to write into the `.torrent` (from the magnet).
    pub trackers: Vec<String>,
}

impl Default for FetcherConfig {
    fn default() -> Self {
        Self {
            max_size: super::DEFAULT_MAX_SIZE,
            request_timeout: Duration::from_secs(10),
            max_in_flight: 16,
            max_peers: 64,
            max_failures: 4,
            reject_backoff: Duration::from_secs(5),
            max_unsolicited: 8,
            trackers: Vec::new(),
        }
    }
}

/// Why a peer is dropped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FetchDrop {
    /// Its pieces did not hash to the info-hash.
    #[error("ut_metadata: sent metadata that does not match the info-hash")]
    BadData,
    /// A data message's `total_size` differs from its handshake's claim.
    #[error("ut_metadata: total_size {got} differs from its metadata_size {claimed}")]
    SizeMismatch {
        /// Its handshake's `metadata_size`.
        claimed: u64,
        /// The message's `total_size`.
        got: u64,
    },
    /// Too many data messages nobody asked for.
    #[error("ut_metadata: too many unsolicited pieces")]
    Unsolicited,
    /// Its requests failed `max_failures` times, the last by timing out:
    /// nothing more is asked of it, so the connection (and whatever slot
    /// it holds in the runtime) is better given to another peer. Not a
    /// lie: no ban.
    #[error("ut_metadata: {failures} requests timed out or were rejected")]
    Unresponsive {
        /// Requests that timed out or were rejected.
        failures: u32,
    },
}

/// Something the runtime must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchEvent {
    /// Close (and ban, for [`FetchDrop::BadData`]) this peer.
    Drop {
        /// The connection.
        peer: ConnId,
        /// Why.
        reason: FetchDrop,
    },
    /// The metadata is verified: [`MetadataFetcher::result`] holds it.
    Done,
}

/// The verified dictionary turned out not to be a usable torrent: every
/// peer agrees with the info-hash, so the magnet itself names a bad
/// torrent.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The strict metainfo parser refused it.
    #[error("the metadata matches the info-hash but is not a valid torrent: {0}")]
    InvalidInfo(#[from] MetainfoError),
}

/// The outcome of a fetch.
#[derive(Clone, Debug)]
pub struct FetchedMetadata {
    /// The info dictionary exactly as verified.
    pub info_bytes: Bytes,
    /// A `.torrent` file made of it and [`FetcherConfig::trackers`], to save
    /// next to the resume data.
    pub torrent_file: Vec<u8>,
    /// That file, parsed by the strict metainfo parser.
    pub metainfo: Metainfo,
}

/// Counters for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Pieces received and kept.
    pub pieces: u64,
    /// Requests sent.
    pub requests: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Rejects received.
    pub rejects: u64,
    /// Whole copies that failed the hash check.
    pub hash_failures: u64,
    /// Peers convicted of sending bad data.
    pub liars: u64,
    /// Peers not used because their claimed size was 0 or too large.
    pub oversized: u64,
    /// Data messages nobody asked for, or duplicates.
    pub unsolicited: u64,
}

struct FPeer {
    ext_id: u8,
    size: u64,
    pipeline: Pipeline,
    /// Piece -> when it was asked.
    outstanding: BTreeMap<u32, Instant>,
    /// Pieces asked before that timed out (late data is still welcome).
    timed_out: BTreeSet<u32>,
    failures: u32,
    unsolicited: u32,
    benched_until: Option<Instant>,
    /// Asked nothing more (failures, or proven a liar).
    dead: bool,
}

/// Whether all pieces may come from anyone or from one peer only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Any peer of the chosen size may send any piece.
    Mixed,
    /// Only this peer is asked (after a mixed copy failed).
    Single(ConnId),
    /// A mixed copy failed and no peer is left to fetch alone: wait for
    /// new peers.
    Waiting,
}

/// Fetches one info dictionary from many peers.
///
/// # Driving it
///
/// 1. [`MetadataFetcher::new`] for the magnet's info-hash.
/// 2. For each connection whose extension handshake arrived:
///    [`MetadataFetcher::add_peer`]; when it closes,
///    [`MetadataFetcher::remove_peer`].
/// 3. Each decoded `Data`/`Reject` message from a peer:
///    [`MetadataFetcher::handle_message`].
/// 4. After every call, drain [`MetadataFetcher::poll_send`] (frames to
///    write) and [`MetadataFetcher::poll_event`] (peers to drop, done);
///    sleep until [`MetadataFetcher::poll_timeout`] and call
///    [`MetadataFetcher::handle_timeout`].
/// 5. [`MetadataFetcher::result`]: the verified metadata (or why the
///    verified dictionary is unusable).
///
/// # Requests in flight
///
/// Each peer has a [`Pipeline`] for 16 KiB pieces: it starts at 4 requests,
/// grows by one per piece received (slow start), is re-sized from the
/// measured rate and round trip like block pipelines, halves on a timeout,
/// and never exceeds [`FetcherConfig::max_in_flight`] (16). Pieces nobody
/// was asked for go first; when none are left, an idle peer duplicates a
/// piece that is in flight at one other peer (at most two requesters per
/// piece), so a slow peer never holds up the end.
///
/// # Never trusting
///
/// A peer is only asked for the size the most peers agree on (a peer that
/// claims another size waits as a candidate; a `data` message whose
/// `total_size` differs from its peer's claim drops that peer). The whole
/// dictionary is hashed when its last piece arrives. On a mismatch:
/// pieces from one peer only: that peer lied and is dropped. Pieces from
/// several: the mixed copy is kept, and the dictionary is fetched again
/// from one peer at a time; the first copy that verifies convicts every
/// peer whose pieces in the mixed copy differ from it, and a single-peer
/// copy that fails convicts its peer. Convicted peers are dropped
/// ([`FetchEvent::Drop`]) and counted ([`FetchStats::liars`]).
pub struct MetadataFetcher {
    info_hash: [u8; 20],
    cfg: FetcherConfig,
    peers: BTreeMap<ConnId, FPeer>,
    size: Option<u64>,
    buf: Vec<u8>,
    source: Vec<Option<ConnId>>,
    requesters: Vec<u8>,
    mode: Mode,
    /// A mixed copy that failed, with who sent each piece (for blame).
    suspect: Option<(Vec<u8>, Vec<Option<ConnId>>)>,
    out: VecDeque<(ConnId, Bytes)>,
    events: VecDeque<FetchEvent>,
    result: Option<Result<FetchedMetadata, FetchError>>,
    stats: FetchStats,
}

impl MetadataFetcher {
    /// A fetch for `info_hash`.
    pub fn new(info_hash: [u8; 20], cfg: FetcherConfig) -> Self {
        Self {
            info_hash,
            cfg,
            peers: BTreeMap::new(),
            size: None,
            buf: Vec::new(),
            source: Vec::new(),
            requesters: Vec::new(),
            mode: Mode::Mixed,
            suspect: None,
            out: VecDeque::new(),
            events: VecDeque::new(),
            result: None,
            stats: FetchStats::default(),
        }
    }

    /// A peer's extension handshake arrived. Returns whether it takes part
    /// (it must advertise ut_metadata and a `metadata_size` within
    /// bounds, and there must be room).
    pub fn add_peer(&mut self, peer: ConnId, ext: &ExtHandshake, now: Instant) -> bool {
        if self.result.is_some() || self.peers.contains_key(&peer) {
            return false;
        }
        let (Some(ext_id), Some(size)) = (ext.ext_id(UT_METADATA), ext.metadata_size) else {
            return false;
        };
        if size == 0 || size > self.cfg.max_size {
            self.stats.oversized += 1;
            return false;
        }
        if self.peers.len() >= self.cfg.max_peers {
            return false;
        }
        let mut pc = PipelineConfig::new(PIECE_LEN as u32);
        pc.initial_depth = 4;
        pc.min_depth = 1;
        pc.max_depth = self.cfg.max_in_flight.max(1);
        self.peers.insert(
            peer,
            FPeer {
                ext_id,
                size,
                pipeline: Pipeline::new(pc),
                outstanding: BTreeMap::new(),
                timed_out: BTreeSet::new(),
                failures: 0,
                unsolicited: 0,
                benched_until: None,
                dead: false,
            },
        );
        self.choose_size();
        self.fill(now);
        true
    }

    /// A connection closed: its requests go to others.
    pub fn remove_peer(&mut self, peer: ConnId, now: Instant) {
        if let Some(p) = self.peers.remove(&peer) {
            for piece in p.outstanding.keys() {
                self.release(*piece);
            }
            self.choose_size();
            self.fill(now);
        }
    }

    /// A decoded ut_metadata message from `peer` (requests belong to the
    /// [`super::MetadataServer`] and are ignored here).
    pub fn handle_message(&mut self, peer: ConnId, msg: MetadataMsg, now: Instant) {
        if self.result.is_some() || !self.peers.contains_key(&peer) {
            return;
        }
        match msg {
            MetadataMsg::Data {
                piece,
                total_size,
                data,
            } => self.on_data(peer, piece, total_size, &data, now),
            MetadataMsg::Reject { piece } => {
                let Some(p) = self.peers.get_mut(&peer) else {
                    return;
                };
                if p.outstanding.remove(&piece).is_some() {
                    self.stats.rejects += 1;
                    p.failures += 1;
                    p.benched_until = Some(now + self.cfg.reject_backoff);
                    if p.failures >= self.cfg.max_failures {
                        p.dead = true;
                    }
                    self.release(piece);
                    self.fill(now);
                }
            }
            MetadataMsg::Request { .. } | MetadataMsg::Unknown { .. } => {}
        }
    }

    /// The next frame to write: `(connection, bytes)`.
    pub fn poll_send(&mut self) -> Option<(ConnId, Bytes)> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<FetchEvent> {
        self.events.pop_front()
    }

    /// When [`MetadataFetcher::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.result.is_some() {
            return None;
        }
        self.peers
            .values()
            .flat_map(|p| {
                p.outstanding
                    .values()
                    .map(|t| *t + self.cfg.request_timeout)
                    .chain(p.benched_until)
            })
            .min()
    }

    /// Gives up requests older than the timeout and re-asks.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.result.is_some() {
            return;
        }
        let timeout = self.cfg.request_timeout;
        let mut released = Vec::new();
        for (&peer, p) in self.peers.iter_mut() {
            let expired: Vec<u32> = p
                .outstanding
                .iter()
                .filter(|(_, t)| now >= **t + timeout)
                .map(|(k, _)| *k)
                .collect();
            for piece in expired {
                p.outstanding.remove(&piece);
                p.timed_out.insert(piece);
                p.pipeline.on_timeout();
                p.failures += 1;
                self.stats.timeouts += 1;
                released.push(piece);
            }
            if p.failures >= self.cfg.max_failures && !p.dead {
                p.dead = true;
                self.events.push_back(FetchEvent::Drop {
                    peer,
                    reason: FetchDrop::Unresponsive {
                        failures: p.failures,
                    },
                });
            }
            if p.benched_until.is_some_and(|t| now >= t) {
                p.benched_until = None;
            }
        }
        for piece in released {
            self.release(piece);
        }
        self.fill(now);
    }

    /// The outcome once the dictionary verified.
    pub fn result(&self) -> Option<Result<&FetchedMetadata, &FetchError>> {
        self.result.as_ref().map(|r| r.as_ref())
    }

    /// Moves the outcome out.
    pub fn take_result(&mut self) -> Option<Result<FetchedMetadata, FetchError>> {
        self.result.take()
    }

    /// Counters.
    pub fn stats(&self) -> FetchStats {
        self.stats
    }

    /// The size being fetched, once chosen.
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    /// Pieces received of the current copy.
    pub fn pieces_have(&self) -> usize {
        self.source.iter().filter(|s| s.is_some()).count()
    }

    fn on_data(&mut self, peer: ConnId, piece: u32, total: u64, data: &[u8], now: Instant) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if total != p.size {
            let claimed = p.size;
            self.drop_peer(
                peer,
                FetchDrop::SizeMismatch {
                    claimed,
                    got: total,
                },
                now,
            );
            return;
        }
        let asked = p.outstanding.remove(&piece);
        let late = asked.is_none() && p.timed_out.remove(&piece);
        let wanted = Some(total) == self.size
            && (piece as usize) < self.source.len()
            && self.source[piece as usize].is_none()
            && match self.mode {
                Mode::Mixed => true,
                Mode::Single(s) => s == peer,
                Mode::Waiting => false,
            };
        if let Some(sent) = asked {
            p.pipeline
                .on_block(now, now.saturating_duration_since(sent), data.len() as u32);
            p.pipeline.on_tick(now, 0.0);
            p.failures = 0;
            if let Some(r) = self.requesters.get_mut(piece as usize) {
                *r = r.saturating_sub(1);
            }
        }
        if asked.is_none() && !late {
            self.stats.unsolicited += 1;
            p.unsolicited += 1;
            if p.unsolicited > self.cfg.max_unsolicited {
                self.drop_peer(peer, FetchDrop::Unsolicited, now);
                return;
            }
        }
        if wanted && (asked.is_some() || late) && data.len() == piece_len(total, piece) {
            let start = piece as usize * PIECE_LEN;
            self.buf[start..start + data.len()].copy_from_slice(data);
            self.source[piece as usize] = Some(peer);
            self.stats.pieces += 1;
            if self.source.iter().all(|s| s.is_some()) {
                self.verify(now);
                return;
            }
        }
        self.fill(now);
    }

    fn verify(&mut self, now: Instant) {
        let digest: [u8; 20] = Sha1::digest(&self.buf).into();
        if digest == self.info_hash {
            let info = std::mem::take(&mut self.buf);
            let liars = match self.suspect.take() {
                Some((bad, sources)) => blame(&info, &bad, &sources),
                None => BTreeSet::new(),
            };
            self.finish(info);
            for peer in liars {
                self.convict(peer, now);
            }
            return;
        }
        self.stats.hash_failures += 1;
        let contributors: BTreeSet<ConnId> = self.source.iter().flatten().copied().collect();
        let alone = match self.mode {
            Mode::Single(p) => Some(p),
            _ if contributors.len() == 1 => contributors.first().copied(),
            _ => None,
        };
        match alone {
            Some(peer) => self.convict(peer, now),
            None => {
                self.suspect = Some((std::mem::take(&mut self.buf), self.source.clone()));
                self.mode = Mode::Waiting;
            }
        }
        self.reset_copy();
        self.fill(now);
    }

    fn convict(&mut self, peer: ConnId, now: Instant) {
        if self.peers.contains_key(&peer) {
            self.stats.liars += 1;
            self.drop_peer(peer, FetchDrop::BadData, now);
        }
    }

    fn drop_peer(&mut self, peer: ConnId, reason: FetchDrop, now: Instant) {
        self.events.push_back(FetchEvent::Drop { peer, reason });
        self.remove_peer(peer, now);
    }

    /// Starts the copy again: nothing received, every request void (late
    /// answers from the peer asked are still taken).
    fn reset_copy(&mut self) {
        self.buf.clear();
        if let Some(size) = self.size {
            self.buf.resize(size as usize, 0);
        }
        self.source.iter_mut().for_each(|s| *s = None);
        self.void_requests(None);
    }

    /// Forgets the requests in flight (of everyone but `keep`); their late
    /// answers are not counted as unsolicited.
    fn void_requests(&mut self, keep: Option<ConnId>) {
        for (id, p) in self.peers.iter_mut() {
            if Some(*id) == keep {
                continue;
            }
            for (piece, _) in std::mem::take(&mut p.outstanding) {
                p.timed_out.insert(piece);
                if let Some(r) = self.requesters.get_mut(piece as usize) {
                    *r = r.saturating_sub(1);
                }
            }
        }
    }

    /// After a mixed copy failed, whole copies come from one peer at a
    /// time: keeps the current one while it is usable, else picks the next
    /// (lowest id) of the current size, else waits.
    fn check_single(&mut self) {
        let size = self.size;
        let usable = |p: &FPeer| !p.dead && Some(p.size) == size;
        match self.mode {
            Mode::Mixed => return,
            Mode::Single(s) if self.peers.get(&s).is_some_and(usable) => return,
            _ => {}
        }
        let next = self
            .peers
            .iter()
            .find(|(_, p)| usable(p))
            .map(|(id, _)| *id);
        self.mode = match next {
            Some(id) => Mode::Single(id),
            None => Mode::Waiting,
        };
        if let Mode::Single(id) = self.mode {
            // Pieces from anyone else do not belong in a single-peer copy.
            for src in self.source.iter_mut() {
                if src.is_some_and(|p| p != id) {
                    *src = None;
                }
            }
            self.void_requests(Some(id));
        }
    }

    /// Picks the size most usable peers claim (ties: the smallest). The
    /// current size is kept while peers claim it and either pieces have
    /// arrived or no other size has more votes.
    fn choose_size(&mut self) {
        let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
        for p in self.peers.values().filter(|p| !p.dead) {
            *votes.entry(p.size).or_default() += 1;
        }
        let Some((best, best_votes)) = votes
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(s, v)| (*s, *v))
        else {
            return;
        };
        if let Some(cur) = self.size {
            if let Some(&cur_votes) = votes.get(&cur) {
                let started = self.source.iter().any(|s| s.is_some()) || self.suspect.is_some();
                if cur == best || started || cur_votes >= best_votes {
                    return;
                }
            }
        }
        self.void_requests(None);
        self.size = Some(best);
        self.buf = vec![0u8; best as usize];
        let n = piece_count(best) as usize;
        self.source = vec![None; n];
        self.requesters = vec![0; n];
        self.suspect = None;
        self.mode = Mode::Mixed;
    }

    fn release(&mut self, piece: u32) {
        if let Some(r) = self.requesters.get_mut(piece as usize) {
            *r = r.saturating_sub(1);
        }
    }

    /// Sends requests wherever a pipeline has room.
    fn fill(&mut self, now: Instant) {
        let Some(size) = self.size else {
            return;
        };
        if self.result.is_some() {
            return;
        }
        self.check_single();
        let ids: Vec<ConnId> = self.peers.keys().copied().collect();
        for id in ids {
            let mode = self.mode;
            let Some(p) = self.peers.get_mut(&id) else {
                continue;
            };
            let usable = !p.dead
                && p.size == size
                && p.benched_until.is_none_or(|t| now >= t)
                && match mode {
                    Mode::Mixed => true,
                    Mode::Single(s) => s == id,
                    Mode::Waiting => false,
                };
            if !usable {
                continue;
            }
            p.benched_until = None;
            let room = p.pipeline.top_up(p.outstanding.len() as u32) as usize;
            let room =
                room.min((self.cfg.max_in_flight as usize).saturating_sub(p.outstanding.len()));
            if room == 0 {
                continue;
            }
            let mut picks = Vec::with_capacity(room);
            for pass in 0..2u8 {
                for (i, src) in self.source.iter().enumerate() {
                    if picks.len() == room {
                        break;
                    }
                    let piece = i as u32;
                    let r = self.requesters[i];
                    let candidate = src.is_none()
                        && !p.outstanding.contains_key(&piece)
                        && !picks.contains(&piece)
                        && if pass == 0 { r == 0 } else { r == 1 };
                    if candidate {
                        picks.push(piece);
                    }
                }
            }
            for piece in picks {
                p.outstanding.insert(piece, now);
                self.requesters[piece as usize] += 1;
                self.stats.requests += 1;
                self.out
                    .push_back((id, frame(p.ext_id, &MetadataMsg::Request { piece })));
            }
        }
    }

    fn finish(&mut self, info: Vec<u8>) {
        let info = Bytes::from(info);
        let torrent_file = torrent_file(&info, &self.cfg.trackers);
        let result = Metainfo::from_bytes(&torrent_file)
            .map(|metainfo| FetchedMetadata {
                info_bytes: info,
                torrent_file,
                metainfo,
            })
            .map_err(FetchError::from);
        self.result = Some(result);
        self.out.clear();
        for p in self.peers.values_mut() {
            p.outstanding.clear();
        }
        self.events.push_back(FetchEvent::Done);
    }
}

/// Peers whose pieces in the failed copy `bad` differ from `good`.
fn blame(good: &[u8], bad: &[u8], sources: &[Option<ConnId>]) -> BTreeSet<ConnId> {
    let mut liars = BTreeSet::new();
    for (i, src) in sources.iter().enumerate() {
        let start = i * PIECE_LEN;
        let end = (start + PIECE_LEN).min(good.len());
        if let Some(peer) = src {
            if bad.get(start..end) != good.get(start..end) {
                liars.insert(*peer);
            }
        }
    }
    liars
}

/// A `.torrent` file: `announce` (the first tracker), `announce-list` (one
/// tier per tracker, BEP 12) and the info dictionary's bytes as they are.
pub(crate) fn torrent_file(info: &[u8], trackers: &[String]) -> Vec<u8> {
    use weir_bencode::encode_bytes;
    let mut out = Vec::with_capacity(info.len() + 64 + trackers.len() * 64);
    out.push(b'd');
    if let Some(first) = trackers.first() {
        encode_bytes(b"announce", &mut out);
        encode_bytes(first.as_bytes(), &mut out);
        encode_bytes(b"announce-list", &mut out);
        out.push(b'l');
        for t in trackers {
            out.push(b'l');
            encode_bytes(t.as_bytes(), &mut out);
            out.push(b'e');
        }
        out.push(b'e');
    }
    encode_bytes(b"info", &mut out);
    out.extend_from_slice(info);
    out.push(b'e');
    out
}

impl std::fmt::Debug for MetadataFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataFetcher")
            .field("size", &self.size)
            .field("peers", &self.peers.len())
            .field("have", &self.pieces_have())
            .field("mode", &self.mode)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
