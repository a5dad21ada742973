//! One piece of content, whoever fetches it: the protocol-neutral transfer.
//!
//! A [`Content`] is the download state of one transfer's bytes, shared by
//! every protocol attached to it (BitTorrent peers, eD2k sources, both at
//! once): which pieces are had, which blocks are asked of whom (the
//! [`Picker`]), the blocks of each piece handed to storage in order
//! ([`assembly`]), the start-up check of data already on disk, the bound on
//! data written but not yet verified, and what happens when a piece fails:
//! who sent what, and which sender lied ([`evidence`]).
//!
//! Pieces here are the transfer's *primary* grid: a torrent's pieces when
//! there is one, else eD2k parts. Every other scheme covering some of the
//! bytes ([`secondary`]: eD2k MD4 parts of one file of a torrent) is
//! checked on top, unit by unit, once the pieces under a unit are verified;
//! a byte is complete only when every scheme covering it agrees.
//!
//! Protocols speak to it in pieces and blocks of the primary grid: they ask
//! [`Content::pick`] for blocks a peer can send (a peer of another grid has
//! its units mapped with [`grid::pieces_covered`]), hand received data to
//! [`Content::received`], and release blocks they will not get. The
//! content answers with [`ContentEvent`]s: storage operations, verdicts,
//! and evidence against senders. Sans-IO like everything in this crate.

pub mod assembly;
mod evidence;
pub mod grid;
pub mod secondary;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;

use crate::bitfield::Bitfield;
use crate::geometry::{BlockSpan, Geometry};
use crate::picker::{Order, PeerHas, PeerKey, Picker, Priority, Received};
use crate::storage::{StorageEvent, StorageOp};
use assembly::Assembly;
use evidence::Evidence;
pub use secondary::SchemeId;
use secondary::Secondary;

/// Storage read ids with this bit set belong to the content (evidence
/// read-backs); protocols use ids without it for their uploads.
pub const CONTENT_READ: u64 = 1 << 62;
const GOOD_COPY: u64 = 1;

/// Start-up checks in flight at once.
const CHECKS_IN_FLIGHT: u32 = 8;

/// Who sent some data: the connection (session-wide id) and its address,
/// kept so a sender that has left can still be banned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sender {
    /// The connection.
    pub conn: PeerKey,
    /// Its address.
    pub ip: IpAddr,
}

/// What a failed piece leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPolicy {
    /// The content handles it: a sole sender gets a strike, several are
    /// investigated (read back, compared when the piece passes), and the
    /// piece is fetched again at once.
    Investigate,
    /// The owner handles it (eD2k repairs with AICH first): the content
    /// reports [`ContentEvent::PieceFailed`] and waits for
    /// [`Content::refetch`], [`Content::investigate`] or
    /// [`Content::restore`].
    Defer,
}

/// Tunables of one content.
#[derive(Clone, Debug)]
pub struct ContentConfig {
    /// Rarest first or sequential.
    pub order: Order,
    /// Seed for the picker's tie-breaks.
    pub seed: u64,
    /// Bytes handed to storage but not yet verified above which no new
    /// blocks are picked (bounds memory when the disk or hashing is slower
    /// than the network).
    pub max_unverified: u64,
    /// What a failed piece leads to.
    pub on_fail: FailPolicy,
    /// Contiguous data goes to storage in runs of at least this many bytes
    /// (or at the end of a piece).
    pub write_run: u32,
    /// Pieces wanted (`None`: all). The others belong to deselected files
    /// only: never picked, never checked, not counted as left (see
    /// [`crate::selection`]).
    pub wanted: Option<Bitfield>,
    /// Each piece's priority (`None` or empty: all normal; see
    /// [`crate::picker::Priority`] and [`crate::selection::piece_priorities`]).
    pub priorities: Option<Arc<[Priority]>>,
}

impl Default for ContentConfig {
    fn default() -> Self {
        Self {
            order: Order::RarestFirst,
            seed: 0x5eed,
            max_unverified: 32 << 20,
            on_fail: FailPolicy::Investigate,
            write_run: assembly::WRITE_RUN,
            wanted: None,
            priorities: None,
        }
    }
}

/// Something the owner of the content must act on.
#[derive(Debug)]
pub enum ContentEvent {
    /// Perform this storage operation.
    Storage(StorageOp),
    /// A piece passed its check (tell peers: BitTorrent `have`).
    PieceVerified(u32),
    /// The start-up check found a piece good on disk.
    PieceFound(u32),
    /// A piece failed its check ([`FailPolicy::Defer`] only): the owner
    /// decides what to do with it.
    PieceFailed {
        /// The piece.
        piece: u32,
        /// Every block that went into it and its sender.
        from: Vec<assembly::Contribution>,
    },
    /// This sender sent data that failed a check. `proven`: block-level
    /// evidence shows its block was the bad one (ban it); otherwise it was
    /// the sole sender of a bad piece (one strike).
    BadData {
        /// Who.
        sender: Sender,
        /// Proven by evidence.
        proven: bool,
    },
    /// A unit of a secondary scheme must be checked from storage.
    CheckUnit {
        /// The scheme.
        scheme: SchemeId,
        /// The unit.
        unit: u32,
    },
    /// A unit of a secondary scheme passed (the other network may offer it).
    UnitVerified {
        /// The scheme.
        scheme: SchemeId,
        /// The unit.
        unit: u32,
    },
    /// A unit of a secondary scheme failed although its pieces passed.
    UnitFailed {
        /// The scheme.
        scheme: SchemeId,
        /// The unit.
        unit: u32,
    },
    /// The start-up check of existing data finished.
    CheckDone,
    /// Every wanted piece is verified (and every secondary unit checked).
    Complete,
}

/// Counters of one content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContentStats {
    /// Pieces that failed their check.
    pub hash_failures: u32,
    /// Blocks received that were had already (endgame duplicates, late
    /// answers).
    pub duplicate_blocks: u32,
    /// Bytes of such blocks.
    pub wasted: u64,
    /// Secondary units that failed.
    pub unit_failures: u32,
}

/// What [`Content::received`] made of a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// New data, handed on. Others asked for the same block (endgame) and
    /// should be told to cancel.
    New {
        /// The other requesters.
        cancel: Vec<PeerKey>,
    },
    /// Had already: dropped.
    Duplicate,
    /// Not a block of the grid, or of a piece not wanted: dropped.
    Unexpected,
}

/// The download state of one transfer's bytes.
#[derive(Debug)]
pub struct Content {
    geo: Geometry,
    cfg: ContentConfig,
    picker: Picker,
    assembly: BTreeMap<u32, Assembly>,
    unverified: u64,
    checking: Bitfield,
    checks_in_flight: u32,
    check_cursor: u32,
    failed: BTreeMap<u32, Vec<assembly::Contribution>>,
    evidence: BTreeMap<u32, Evidence>,
    secondary: Vec<Secondary>,
    events: VecDeque<ContentEvent>,
    stats: ContentStats,
    complete_announced: bool,
    check_done_announced: bool,
}

impl Content {
    /// Content over `geo` having the pieces in `had` (from a trusted
    /// journal), that checks the pieces in `check` from storage first.
    pub fn new(geo: Geometry, mut cfg: ContentConfig, had: &Bitfield, check: &Bitfield) -> Self {
        let mut picker = Picker::new(geo, cfg.order, cfg.seed);
        for p in had.iter_ones() {
            picker.set_had(p);
        }
        if let Some(wanted) = cfg.wanted.take() {
            for p in 0..geo.piece_count() {
                if !wanted.get(p) {
                    picker.skip(p);
                }
            }
        }
        if let Some(prio) = cfg.priorities.take() {
            picker.set_priorities(&prio);
        }
        let mut checking = Bitfield::new(geo.piece_count());
        for p in check.iter_ones() {
            if !had.get(p) && !picker.is_skipped(p) {
                checking.set(p);
            }
        }
        let mut c = Self {
            geo,
            cfg,
            picker,
            assembly: BTreeMap::new(),
            unverified: 0,
            checking,
            checks_in_flight: 0,
            check_cursor: 0,
            failed: BTreeMap::new(),
            evidence: BTreeMap::new(),
            secondary: Vec::new(),
            events: VecDeque::new(),
            stats: ContentStats::default(),
            complete_announced: false,
            check_done_announced: false,
        };
        c.issue_checks();
        c.after_check();
        c
    }

    /// An empty content that holds nothing and asks for nothing: what a
    /// holder keeps while its real content is lent out (see the eD2k
    /// core's attached files). Costs no allocation.
    pub fn placeholder() -> Self {
        let geo = Geometry::new(0, 1, 1).expect("a valid empty geometry");
        let mut c = Self::new(
            geo,
            ContentConfig::default(),
            &Bitfield::new(0),
            &Bitfield::new(0),
        );
        c.events.clear();
        c
    }

    /// The primary grid.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Pieces verified.
    pub fn had(&self) -> &Bitfield {
        self.picker.had()
    }

    /// The picker (read-only: availability, endgame, interest).
    pub fn picker(&self) -> &Picker {
        &self.picker
    }

    /// Counters.
    pub fn stats(&self) -> ContentStats {
        self.stats
    }

    /// Whether the start-up check is still running.
    pub fn is_checking(&self) -> bool {
        self.checking.count() > 0 || self.checks_in_flight > 0
    }

    /// Whether every wanted piece is verified and every secondary unit over
    /// them checked.
    pub fn is_complete(&self) -> bool {
        self.picker.is_complete()
            && !self.is_checking()
            && self.secondary.iter().all(Secondary::settled)
    }

    /// Bytes of wanted pieces not yet verified.
    pub fn bytes_left(&self) -> u64 {
        self.picker.bytes_left()
    }

    /// Bytes handed to storage and not yet verified.
    pub fn unverified(&self) -> u64 {
        self.unverified
    }

    /// Bytes held in memory waiting for a gap in their piece.
    pub fn held(&self) -> u64 {
        self.assembly.values().map(Assembly::held).sum()
    }

    /// Whether blocks of `piece` are held, waiting for the rest of it.
    pub fn is_assembling(&self, piece: u32) -> bool {
        self.assembly.contains_key(&piece)
    }

    /// How many pieces have blocks held waiting for the rest.
    pub fn assembling(&self) -> usize {
        self.assembly.len()
    }

    /// Whether new blocks may be picked now (the unverified bound).
    pub fn can_pick(&self) -> bool {
        self.unverified < self.cfg.max_unverified && !self.is_checking()
    }

    /// Switches between rarest-first and sequential picking.
    pub fn set_order(&mut self, order: Order) {
        self.picker.set_order(order);
    }

    /// Stops wanting `piece` (a deselected file), for good: it is never
    /// picked, and a failed check or lost data does not make it wanted
    /// again. Call before peers are asked for blocks.
    pub fn skip(&mut self, piece: u32) {
        self.picker.skip(piece);
    }

    /// Whether `piece` holds only deselected files (never fetched).
    pub fn is_skipped(&self, piece: u32) -> bool {
        self.picker.is_skipped(piece)
    }

    /// Bytes of the pieces not skipped: what is held once complete.
    pub fn bytes_wanted(&self) -> u64 {
        self.picker.bytes_wanted()
    }

    // ---- availability ------------------------------------------------------

    /// A peer with `has` joined.
    pub fn peer_joined(&mut self, has: PeerHas<'_>) {
        self.picker.peer_joined(has);
    }

    /// A peer with `has` left.
    pub fn peer_left(&mut self, has: PeerHas<'_>) {
        self.picker.peer_left(has);
    }

    /// A peer announced one more piece.
    pub fn peer_has(&mut self, piece: u32) {
        self.picker.peer_has(piece);
    }

    /// Whether a peer with `has` has anything we want.
    pub fn is_interesting(&self, has: PeerHas<'_>) -> bool {
        self.picker.is_interesting(has)
    }

    /// Whether every block is asked of someone (endgame).
    pub fn in_endgame(&self) -> bool {
        self.picker.in_endgame()
    }

    // ---- downloading -------------------------------------------------------

    /// Picks up to `max` blocks for `peer` (nothing while checking or over
    /// the unverified bound). Returns how many were added to `out`.
    pub fn pick(
        &mut self,
        peer: PeerKey,
        has: PeerHas<'_>,
        max: usize,
        out: &mut Vec<BlockSpan>,
    ) -> usize {
        if !self.can_pick() {
            return 0;
        }
        self.picker.pick(peer, has, max, out)
    }

    /// `peer` will not deliver this block (choked, rejected, gone).
    pub fn release(&mut self, peer: PeerKey, piece: u32, begin: u32) {
        self.picker.release(peer, piece, begin);
    }

    /// Who else was asked for a block.
    pub fn requesters(&self, piece: u32, begin: u32) -> Vec<PeerKey> {
        self.picker.requesters(piece, begin)
    }

    /// A block arrived from `from`: one chunk or several (eD2k packets).
    pub fn received(&mut self, from: Sender, span: BlockSpan, chunks: Vec<Bytes>) -> Accepted {
        match self
            .picker
            .received(from.conn, span.piece, span.begin, span.len)
        {
            Received::New { cancel, .. } => {
                self.assemble(span, chunks, Some(from));
                Accepted::New { cancel }
            }
            Received::Duplicate => {
                self.stats.duplicate_blocks += 1;
                self.stats.wasted += u64::from(span.len);
                Accepted::Duplicate
            }
            Received::Unexpected => Accepted::Unexpected,
        }
    }

    /// An earlier run wrote the first `bytes` of `piece` (its journal says
    /// so): only the rest is asked for. Whole blocks are taken; returns how
    /// many bytes were (0: none), which the storage layer must hash back
    /// before any new write to the piece. Call before any peer asks for
    /// blocks. Nothing is taken of a piece that is had, being checked or
    /// already assembling; the piece is hashed whole when its last block
    /// arrives, so a bad prefix fails it and it is fetched again.
    pub fn resume_partial(&mut self, piece: u32, bytes: u32) -> u32 {
        let block = self.geo.block_len();
        if piece >= self.geo.piece_count()
            || block == 0
            || self.picker.had().get(piece)
            || self.picker.is_skipped(piece)
            || self.checking.get(piece)
            || self.assembly.contains_key(&piece)
        {
            return 0;
        }
        let bytes = bytes - bytes % block;
        if bytes == 0 || bytes >= self.geo.piece_size(piece) {
            return 0;
        }
        self.picker.resume_prefix(piece, bytes);
        self.assembly
            .insert(piece, assembly::Assembly::resumed(bytes));
        self.unverified += u64::from(bytes);
        bytes
    }

    /// The stored data of `pieces` is gone (a read failed with EIO, a file
    /// was truncated): those that were had are wanted again and no longer
    /// offered. Returns them.
    pub fn lose(&mut self, pieces: &[u32]) -> Vec<u32> {
        let mut gone = Vec::new();
        for &p in pieces {
            if p < self.geo.piece_count() && self.picker.had().get(p) {
                self.picker.lose(p);
                gone.push(p);
            }
        }
        if !gone.is_empty() {
            self.complete_announced = false;
        }
        gone
    }

    /// Puts back a block whose data is known good (kept by a repair).
    pub fn restore(&mut self, span: BlockSpan, data: Bytes) {
        const KEPT: PeerKey = PeerKey::MAX - 1;
        if let Received::New { .. } = self.picker.received(KEPT, span.piece, span.begin, span.len) {
            self.assemble(span, vec![data], None);
        }
    }

    fn assemble(&mut self, span: BlockSpan, chunks: Vec<Bytes>, from: Option<Sender>) {
        let size = self.geo.piece_size(span.piece);
        let a = self.assembly.entry(span.piece).or_default();
        let run = self.cfg.write_run;
        if let Some((begin, data)) = a.add(span.begin, span.len, chunks, from, size, run) {
            let n: u64 = data.iter().map(|d| d.len() as u64).sum();
            self.unverified += n;
            self.events
                .push_back(ContentEvent::Storage(StorageOp::Write {
                    piece: span.piece,
                    begin,
                    data,
                }));
        }
    }

    /// The piece is wanted again from scratch (after a failure).
    pub fn refetch(&mut self, piece: u32) {
        self.failed.remove(&piece);
        self.picker.piece_failed(piece);
    }

    /// Reads the failed piece back and compares it with the good copy
    /// once that passes, to find which sender lied; fetches it again.
    pub fn investigate(&mut self, piece: u32, from: Vec<assembly::Contribution>) {
        let senders = evidence::senders(&from);
        if senders.len() == 1 {
            self.events.push_back(ContentEvent::BadData {
                sender: senders[0],
                proven: false,
            });
            self.refetch(piece);
            return;
        }
        if senders.is_empty() {
            self.refetch(piece);
            return;
        }
        self.evidence.insert(
            piece,
            Evidence {
                blocks: from,
                bad: None,
            },
        );
        self.read_piece(piece, false);
        // Fetched again once the bad copy is read (before it is overwritten).
    }

    /// [`Content::investigate`] with the bad copy already in hand (read
    /// back for another purpose): no second read.
    pub fn investigate_copy(&mut self, piece: u32, from: Vec<assembly::Contribution>, bad: &[u8]) {
        if evidence::senders(&from).len() > 1 {
            let hashes = evidence::block_hashes(bad, &from);
            self.evidence.insert(
                piece,
                Evidence {
                    blocks: from,
                    bad: Some(hashes),
                },
            );
            self.refetch(piece);
        } else {
            self.investigate(piece, from);
        }
    }

    fn read_piece(&mut self, piece: u32, good: bool) {
        self.events
            .push_back(ContentEvent::Storage(StorageOp::Read {
                id: CONTENT_READ | (u64::from(piece) << 1) | if good { GOOD_COPY } else { 0 },
                piece,
                begin: 0,
                len: self.geo.piece_size(piece),
            }));
    }

    // ---- storage -------------------------------------------------------------

    /// A storage completion. Those that are not the content's (upload
    /// reads) are given back.
    pub fn handle_storage(&mut self, ev: StorageEvent) -> Option<StorageEvent> {
        match ev {
            StorageEvent::PieceDone { piece, ok } => {
                self.on_piece_done(piece, ok);
                None
            }
            StorageEvent::ReadDone { id, data } if id & CONTENT_READ != 0 => {
                self.on_evidence_read(id, data.ok());
                None
            }
            StorageEvent::ReadFailed { id, lost, fault } => {
                // What is gone is no longer had; the caller hears only of
                // pieces that were (and of its own reads).
                let lost = self.lose(&lost);
                if id & CONTENT_READ != 0 {
                    self.on_evidence_read(id, None);
                    if lost.is_empty() {
                        return None;
                    }
                }
                Some(StorageEvent::ReadFailed { id, lost, fault })
            }
            other => Some(other),
        }
    }

    fn on_piece_done(&mut self, piece: u32, ok: bool) {
        if self.checking.get(piece) {
            self.checking.clear(piece);
            self.checks_in_flight = self.checks_in_flight.saturating_sub(1);
            if ok {
                self.picker.set_had(piece);
                self.events.push_back(ContentEvent::PieceFound(piece));
                self.piece_had(piece, false);
            }
            self.issue_checks();
            self.after_check();
            return;
        }
        if piece >= self.geo.piece_count() || self.picker.had().get(piece) {
            return;
        }
        let size = u64::from(self.geo.piece_size(piece));
        self.unverified = self.unverified.saturating_sub(size);
        let a = self.assembly.remove(&piece).unwrap_or_default();
        if ok {
            self.picker.piece_verified(piece);
            if self.evidence.get(&piece).is_some_and(|e| e.bad.is_some()) {
                self.read_piece(piece, true);
            } else {
                self.evidence.remove(&piece);
            }
            self.events.push_back(ContentEvent::PieceVerified(piece));
            self.piece_had(piece, true);
        } else {
            self.stats.hash_failures += 1;
            match self.cfg.on_fail {
                FailPolicy::Investigate => self.investigate(piece, a.from),
                FailPolicy::Defer => {
                    self.failed.insert(piece, a.from.clone());
                    self.events.push_back(ContentEvent::PieceFailed {
                        piece,
                        from: a.from,
                    });
                }
            }
        }
    }

    fn on_evidence_read(&mut self, id: u64, data: Option<Bytes>) {
        let piece = ((id & !CONTENT_READ) >> 1) as u32;
        let good = id & GOOD_COPY != 0;
        if !good {
            match (data, self.evidence.get_mut(&piece)) {
                (Some(d), Some(e)) => e.bad = Some(evidence::block_hashes(&d, &e.blocks)),
                _ => {
                    self.evidence.remove(&piece);
                }
            }
            self.refetch(piece);
            return;
        }
        let Some(e) = self.evidence.remove(&piece) else {
            return;
        };
        let Some(d) = data else { return };
        for sender in evidence::liars(&e, &d) {
            self.events.push_back(ContentEvent::BadData {
                sender,
                proven: true,
            });
        }
    }

    /// A piece became had: secondary units over it may be checkable now,
    /// and the whole may be complete.
    fn piece_had(&mut self, piece: u32, announce: bool) {
        for s in 0..self.secondary.len() {
            let ready = self.secondary[s].on_piece_had(&self.geo, self.picker.had(), piece);
            for unit in ready {
                self.events.push_back(ContentEvent::CheckUnit {
                    scheme: SchemeId(s as u8),
                    unit,
                });
            }
        }
        if announce {
            self.maybe_complete();
        }
    }

    fn maybe_complete(&mut self) {
        if !self.complete_announced && self.is_complete() {
            self.complete_announced = true;
            self.events.push_back(ContentEvent::Complete);
        }
    }

    // ---- start-up check --------------------------------------------------------

    /// Checks these pieces from storage (those not had yet), for a content
    /// whose storage could only be opened after it was made (an eD2k file
    /// whose part hashes arrive from a peer).
    pub fn start_check(&mut self, check: &Bitfield) {
        let mut any = false;
        for p in check.iter_ones() {
            if p < self.geo.piece_count() && !self.picker.had().get(p) && self.checking.set(p) {
                any = true;
            }
        }
        if any {
            self.check_cursor = 0;
            self.check_done_announced = false;
            self.issue_checks();
        }
    }

    fn issue_checks(&mut self) {
        while self.checks_in_flight < CHECKS_IN_FLIGHT && self.check_cursor < self.geo.piece_count()
        {
            let p = self.check_cursor;
            self.check_cursor += 1;
            if self.checking.get(p) {
                self.checks_in_flight += 1;
                self.events
                    .push_back(ContentEvent::Storage(StorageOp::Check { piece: p }));
            }
        }
    }

    fn after_check(&mut self) {
        if !self.is_checking() && !self.check_done_announced {
            self.check_done_announced = true;
            self.events.push_back(ContentEvent::CheckDone);
            if self.is_complete() {
                // Complete from the start: nothing to announce as news.
                self.complete_announced = true;
            }
        }
    }

    // ---- secondary schemes -------------------------------------------------------

    /// Adds a scheme covering `grid` whose unit digests are not known yet
    /// (see [`Content::scheme_known`]).
    pub fn add_scheme(&mut self, grid: grid::UnitGrid) -> SchemeId {
        self.secondary.push(Secondary::new(grid));
        SchemeId((self.secondary.len() - 1) as u8)
    }

    /// The scheme's digests are known to storage: units over verified
    /// pieces can be checked now.
    pub fn scheme_known(&mut self, scheme: SchemeId) {
        let Some(s) = self.secondary.get_mut(scheme.0 as usize) else {
            return;
        };
        for unit in s.set_known(&self.geo, self.picker.had()) {
            self.events
                .push_back(ContentEvent::CheckUnit { scheme, unit });
        }
    }

    /// The scheme's grid.
    pub fn scheme_grid(&self, scheme: SchemeId) -> Option<&grid::UnitGrid> {
        self.secondary.get(scheme.0 as usize).map(Secondary::grid)
    }

    /// Units of the scheme that passed their own check.
    pub fn scheme_verified(&self, scheme: SchemeId) -> Option<&Bitfield> {
        self.secondary
            .get(scheme.0 as usize)
            .map(Secondary::verified)
    }

    /// Storage checked a secondary unit.
    pub fn unit_done(&mut self, scheme: SchemeId, unit: u32, ok: bool) {
        let Some(s) = self.secondary.get_mut(scheme.0 as usize) else {
            return;
        };
        if !s.on_checked(unit, ok) {
            return;
        }
        if ok {
            self.events
                .push_back(ContentEvent::UnitVerified { scheme, unit });
        } else {
            self.stats.unit_failures += 1;
            self.events
                .push_back(ContentEvent::UnitFailed { scheme, unit });
        }
        self.maybe_complete();
    }

    // ---- sleeping ---------------------------------------------------------------

    /// Whether nothing is under way: no check, no piece started or held,
    /// nothing handed to storage unverified, no failed piece under
    /// investigation, no secondary scheme, no event waiting, no peer
    /// counted. Such a content can become a [`Quiet`] and back.
    pub fn is_quiet(&self) -> bool {
        !self.is_checking()
            && self.assembly.is_empty()
            && self.unverified == 0
            && self.failed.is_empty()
            && self.evidence.is_empty()
            && self.secondary.is_empty()
            && self.events.is_empty()
            && self.picker.is_quiet()
    }

    /// What this quiet content is, in a few bytes, and the config that
    /// makes it again (its wanted pieces, priorities and order as they are
    /// now; see [`Content::is_quiet`]: a content that is not quiet loses
    /// what is under way). The owner keeps the config as it likes (a
    /// torrent in its own config) and hands it to [`Quiet::wake`].
    pub fn into_quiet(self) -> (Quiet, ContentConfig) {
        debug_assert!(self.is_quiet(), "only a quiet content sleeps");
        let priorities = self.picker.priorities();
        let priorities = (!priorities.is_empty()).then(|| Arc::from(priorities));
        let quiet = Quiet {
            complete: self.is_complete(),
            bytes_left: self.bytes_left(),
            bytes_wanted: self.bytes_wanted(),
            stats: self.stats,
            complete_announced: self.complete_announced,
            check_done_announced: self.check_done_announced,
            had: self.picker.had().clone(),
        };
        let cfg = ContentConfig {
            order: self.picker.order(),
            wanted: self.picker.wanted(),
            priorities,
            ..self.cfg
        };
        (quiet, cfg)
    }

    // ---- events -----------------------------------------------------------------

    /// The next thing the owner must do.
    pub fn poll_event(&mut self) -> Option<ContentEvent> {
        self.events.pop_front()
    }

    /// Gives back the event queue's buffer if it is empty (an idle
    /// transfer's owner calls this so that thousands of idle transfers do
    /// not each keep one).
    pub fn release_buffers(&mut self) {
        if self.events.is_empty() && self.events.capacity() > 0 {
            self.events = VecDeque::new();
        }
    }
}

/// A quiet content (see [`Content::is_quiet`]) kept as what rebuilds it
/// with its config ([`Content::into_quiet`]): its had pieces, counters and
/// what it has announced. A transfer with no peer and nothing under way
/// keeps this instead of its content, about 80 bytes instead of 600 and
/// the picker's per-piece tables.
#[derive(Clone, Debug)]
pub struct Quiet {
    had: Bitfield,
    stats: ContentStats,
    bytes_left: u64,
    bytes_wanted: u64,
    complete: bool,
    complete_announced: bool,
    check_done_announced: bool,
}

impl Quiet {
    /// The content again, over `geo` (the geometry it had) with `cfg` (the
    /// config [`Content::into_quiet`] gave), as it was: it announces
    /// nothing it announced before.
    pub fn wake(self, geo: Geometry, cfg: ContentConfig) -> Content {
        let mut c = Content::new(geo, cfg, &self.had, &Bitfield::new(0));
        c.events.clear();
        c.stats = self.stats;
        c.complete_announced = self.complete_announced;
        c.check_done_announced = self.check_done_announced;
        c
    }

    /// Pieces verified.
    pub fn had(&self) -> &Bitfield {
        &self.had
    }

    /// Counters.
    pub fn stats(&self) -> ContentStats {
        self.stats
    }

    /// See [`Content::is_complete`].
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// See [`Content::bytes_left`].
    pub fn bytes_left(&self) -> u64 {
        self.bytes_left
    }

    /// See [`Content::bytes_wanted`].
    pub fn bytes_wanted(&self) -> u64 {
        self.bytes_wanted
    }
}

#[cfg(test)]
mod tests;
