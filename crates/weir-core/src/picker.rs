//! Which block to ask which peer for next.
//!
//! Every piece is in exactly one state:
//! - **wanted**: not had, nothing asked yet; kept in buckets by how many
//!   peers have it, each bucket in random order, so "rarest first with a
//!   random tie-break" is a walk from the lowest bucket;
//! - **partial**: some blocks asked or received; each block is free,
//!   requested (by at most [`MAX_REQUESTERS`] peers) or received;
//! - **had**: verified.
//!
//! A pick for a peer first continues partial pieces (so pieces complete and
//! can be verified and shared early), then starts new pieces rarest first
//! (or in index order in sequential mode). When no free block is left
//! anywhere, the picker is in endgame: a block requested from one peer may be
//! requested from a second, never a third, and whoever delivers first wins;
//! the others are told to cancel.
//!
//! The picker is deterministic for a given seed.

use std::collections::BTreeMap;

use crate::bitfield::Bitfield;
use crate::geometry::{BlockSpan, Geometry};

/// A peer connection, as the picker knows it.
pub type PeerKey = u32;

/// At most this many peers are asked for the same block (endgame).
pub const MAX_REQUESTERS: usize = 2;

const NOBODY: PeerKey = PeerKey::MAX;

/// What a peer has.
#[derive(Clone, Copy, Debug)]
pub enum PeerHas<'a> {
    /// Everything (a seed, BitTorrent have-all).
    All,
    /// These pieces.
    Some(&'a Bitfield),
}

impl PeerHas<'_> {
    fn has(&self, piece: u32) -> bool {
        match self {
            PeerHas::All => true,
            PeerHas::Some(b) => b.get(piece),
        }
    }
}

/// How new pieces are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Rarest first, random among equally rare.
    RarestFirst,
    /// Lowest index first (streaming, previews).
    Sequential,
}

/// How soon a piece is wanted, from the priorities of the files under it
/// (Transmission's file priorities: a piece takes the highest of its
/// files'). New pieces are started from the highest priority down, rarest
/// first (or in order) within each; pieces already started are finished
/// whatever their priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// After every other wanted piece.
    Low,
    /// The default.
    #[default]
    Normal,
    /// Before every other wanted piece.
    High,
}

impl Priority {
    /// The bucket set a wanted piece of this priority is kept in (highest
    /// first).
    fn tier(self) -> usize {
        match self {
            Priority::High => 0,
            Priority::Normal => 1,
            Priority::Low => 2,
        }
    }
}

/// What a received block meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// New data. `cancel` lists other peers that were also asked for it;
    /// `piece_complete` is set when this was the piece's last missing block.
    New {
        /// Other requesters to send a cancel to.
        cancel: Vec<PeerKey>,
        /// Every block of the piece is now in.
        piece_complete: bool,
    },
    /// Already had (a late endgame duplicate): drop the data.
    Duplicate,
    /// Not a block of this geometry, or of a piece not being downloaded.
    Unexpected,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Free,
    Requested([PeerKey; MAX_REQUESTERS]),
    Received,
}

#[derive(Clone, Debug)]
struct Partial {
    blocks: Vec<Block>,
    free: u32,
    received: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Wanted,
    Partial,
    Had,
    /// Not wanted at all (deselected file).
    Skipped,
}

/// The piece picker of one transfer.
#[derive(Clone, Debug)]
pub struct Picker {
    geo: Geometry,
    order: Order,
    rng: fastrand::Rng,
    had: Bitfield,
    state: Vec<State>,
    /// Peers with each piece, not counting whole seeds; empty until a peer
    /// that is not a seed announces a piece (an idle torrent, or one among
    /// seeds only, pays nothing per piece).
    avail: Vec<u32>,
    seeds: u32,
    /// `buckets[t][a]` holds wanted pieces of priority tier `t` (see
    /// [`Priority::tier`]) with availability `a`, shuffled.
    buckets: [Vec<Vec<u32>>; 3],
    /// Each piece's priority; empty while every piece is normal (the
    /// usual case costs nothing per piece).
    priority: Vec<Priority>,
    /// Position of each wanted piece in its bucket; empty while no piece
    /// is in a bucket.
    pos: Vec<u32>,
    /// Pieces in the buckets.
    bucketed: u32,
    /// The buckets hold every wanted piece: set at the first rarest-first
    /// pick, which fills them, and kept (never a second scan, as endgame
    /// picks with nothing wanted would cost). Until then only `state` says
    /// what is wanted, so an idle or sequential torrent pays nothing per
    /// piece for them; `pos` and the buckets are given back whenever they
    /// hold nothing (a complete torrent).
    bucketing: bool,
    partial: BTreeMap<u32, Partial>,
    /// Blocks free in partial pieces plus every block of wanted pieces.
    free_blocks: u64,
    seq_cursor: u32,
    /// Pieces of deselected files: they stay skipped when a check fails
    /// or their data is lost, instead of becoming wanted again.
    unwanted: Bitfield,
    /// Bytes of the pieces in [`State::Skipped`].
    skipped_bytes: u64,
}

impl Picker {
    /// A picker with nothing had and every piece wanted.
    pub fn new(geo: Geometry, order: Order, seed: u64) -> Self {
        let n = geo.piece_count();
        let mut p = Self {
            geo,
            order,
            rng: fastrand::Rng::with_seed(seed),
            had: Bitfield::new(n),
            state: vec![State::Wanted; n as usize],
            avail: Vec::new(),
            seeds: 0,
            buckets: [Vec::new(), vec![Vec::new()], Vec::new()],
            priority: Vec::new(),
            pos: Vec::new(),
            bucketed: 0,
            bucketing: false,
            partial: BTreeMap::new(),
            free_blocks: 0,
            seq_cursor: 0,
            unwanted: Bitfield::new(n),
            skipped_bytes: 0,
        };
        for i in 0..n {
            p.free_blocks += u64::from(geo.blocks_in_piece(i));
        }
        p
    }

    /// Sets each piece's priority (`priorities[p]` for piece `p`; pieces
    /// past its end are normal). Wanted pieces move to their new tier;
    /// started ones are finished as before.
    pub fn set_priorities(&mut self, priorities: &[Priority]) {
        let n = self.geo.piece_count();
        let all_normal = priorities.iter().all(|p| *p == Priority::Normal);
        for piece in 0..n {
            let new = priorities.get(piece as usize).copied().unwrap_or_default();
            if new == self.priority_of(piece) {
                continue;
            }
            let wanted = self.state[piece as usize] == State::Wanted;
            if wanted {
                self.bucket_remove(piece);
            }
            if self.priority.is_empty() {
                self.priority = vec![Priority::Normal; n as usize];
            }
            self.priority[piece as usize] = new;
            if wanted {
                self.bucket_insert(piece);
            }
        }
        if all_normal {
            self.priority = Vec::new();
        }
    }

    /// Piece `piece`'s priority.
    pub fn priority_of(&self, piece: u32) -> Priority {
        self.priority
            .get(piece as usize)
            .copied()
            .unwrap_or_default()
    }

    /// The geometry picked over.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Whether nothing is under way: no piece started and no peer counted.
    /// Such a picker is what [`Picker::new`] makes from its had pieces, its
    /// skipped pieces, its priorities and its order (a transfer that
    /// sleeps keeps only those).
    pub fn is_quiet(&self) -> bool {
        self.partial.is_empty() && self.seeds == 0 && self.avail.iter().all(|&a| a == 0)
    }

    /// Rarest first or sequential, as last set.
    pub fn order(&self) -> Order {
        self.order
    }

    /// The pieces not skipped (`None`: none is skipped).
    pub fn wanted(&self) -> Option<Bitfield> {
        if self.unwanted.count() == 0 {
            return None;
        }
        let mut w = Bitfield::new(self.geo.piece_count());
        for p in 0..self.geo.piece_count() {
            if !self.unwanted.get(p) {
                w.set(p);
            }
        }
        Some(w)
    }

    /// Each piece's priority (empty: every piece normal).
    pub fn priorities(&self) -> &[Priority] {
        &self.priority
    }

    /// Pieces verified so far.
    pub fn had(&self) -> &Bitfield {
        &self.had
    }

    /// Whether every wanted piece is verified.
    pub fn is_complete(&self) -> bool {
        self.state
            .iter()
            .all(|s| matches!(s, State::Had | State::Skipped))
    }

    /// Whether no free block is left (endgame duplicates allowed).
    pub fn in_endgame(&self) -> bool {
        self.free_blocks == 0 && !self.is_complete()
    }

    /// Whether `piece` belongs to deselected files only.
    pub fn is_skipped(&self, piece: u32) -> bool {
        self.unwanted.get(piece)
    }

    /// Bytes of the pieces not skipped: what is held once complete
    /// (counted as pieces are skipped, not walked: stats read it for
    /// every transfer at every report).
    pub fn bytes_wanted(&self) -> u64 {
        self.geo.total_len() - self.skipped_bytes
    }

    /// Bytes of wanted pieces not yet verified.
    pub fn bytes_left(&self) -> u64 {
        (0..self.geo.piece_count())
            .filter(|&i| matches!(self.state[i as usize], State::Wanted | State::Partial))
            .map(|i| u64::from(self.geo.piece_size(i)))
            .sum()
    }

    /// How many peers have `piece`.
    pub fn availability(&self, piece: u32) -> u32 {
        if piece >= self.geo.piece_count() {
            return 0;
        }
        self.avail_of(piece) + self.seeds
    }

    /// Peers other than seeds with `piece` (in range).
    fn avail_of(&self, piece: u32) -> u32 {
        self.avail.get(piece as usize).copied().unwrap_or(0)
    }

    /// Switches between rarest-first and sequential.
    pub fn set_order(&mut self, order: Order) {
        self.order = order;
    }

    /// Marks `piece` verified (resume, or a hash check passed).
    pub fn set_had(&mut self, piece: u32) {
        let Some(st) = self.state.get(piece as usize).copied() else {
            return;
        };
        match st {
            State::Had => return,
            State::Wanted | State::Partial => self.take_out(piece, st),
            State::Skipped => self.skipped_bytes -= u64::from(self.geo.piece_size(piece)),
        }
        self.state[piece as usize] = State::Had;
        self.had.set(piece);
    }

    /// Takes a wanted or partial `piece` out of what is picked from (its
    /// bucket, or its partial blocks) and out of the free block count.
    fn take_out(&mut self, piece: u32, st: State) {
        match st {
            State::Wanted => {
                self.bucket_remove(piece);
                self.free_blocks -= u64::from(self.geo.blocks_in_piece(piece));
            }
            State::Partial => {
                if let Some(p) = self.partial.remove(&piece) {
                    self.free_blocks -= u64::from(p.free);
                }
            }
            State::Had | State::Skipped => {}
        }
    }

    /// `piece` (no longer picked from) becomes skipped.
    fn mark_skipped(&mut self, piece: u32) {
        self.state[piece as usize] = State::Skipped;
        self.skipped_bytes += u64::from(self.geo.piece_size(piece));
    }

    /// Marks the first `bytes` of a wanted `piece` received (rounded down to
    /// whole blocks): an earlier run wrote them, and only the rest is asked
    /// for. The piece is hashed as a whole when its last block arrives, so a
    /// bad prefix fails the piece and it is fetched again. Ignored for a
    /// piece that is not wanted, and when the prefix is the whole piece.
    pub fn resume_prefix(&mut self, piece: u32, bytes: u32) {
        if self.state.get(piece as usize) != Some(&State::Wanted) || self.geo.block_len() == 0 {
            return;
        }
        let done = bytes / self.geo.block_len();
        if done == 0 || done >= self.geo.blocks_in_piece(piece) {
            return;
        }
        self.start_piece(piece);
        let p = self.partial.get_mut(&piece).expect("just started");
        for b in &mut p.blocks[..done as usize] {
            *b = Block::Received;
        }
        p.free -= done;
        p.received += done;
        // A wanted piece's blocks were all counted free.
        self.free_blocks -= u64::from(done);
    }

    /// A had piece's data is gone (a read failed, its file was truncated):
    /// it is wanted again.
    pub fn lose(&mut self, piece: u32) {
        if self.state.get(piece as usize) != Some(&State::Had) {
            return;
        }
        self.had.clear(piece);
        if self.unwanted.get(piece) {
            self.mark_skipped(piece);
            return;
        }
        self.state[piece as usize] = State::Wanted;
        self.free_blocks += u64::from(self.geo.blocks_in_piece(piece));
        self.bucket_insert(piece);
    }

    /// Stops wanting `piece` (a deselected file), for good: it stays
    /// skipped if its data is later lost. Had pieces stay had; a piece
    /// started (a resumed prefix) is dropped, blocks in flight to it are
    /// then unexpected and ignored.
    pub fn skip(&mut self, piece: u32) {
        let Some(st) = self.state.get(piece as usize).copied() else {
            return;
        };
        self.unwanted.set(piece);
        if matches!(st, State::Wanted | State::Partial) {
            self.take_out(piece, st);
            self.mark_skipped(piece);
        }
    }

    /// A peer announced one more piece.
    pub fn peer_has(&mut self, piece: u32) {
        if piece >= self.geo.piece_count() {
            return;
        }
        let wanted = self.state[piece as usize] == State::Wanted;
        if wanted {
            self.bucket_remove(piece);
        }
        if self.avail.is_empty() {
            self.avail = vec![0; self.geo.piece_count() as usize];
        }
        self.avail[piece as usize] += 1;
        if wanted {
            self.bucket_insert(piece);
        }
    }

    /// A peer with a bitfield joined.
    pub fn peer_joined(&mut self, has: PeerHas<'_>) {
        match has {
            PeerHas::All => self.seeds += 1,
            PeerHas::Some(b) => {
                for i in b.iter_ones() {
                    self.peer_has(i);
                }
            }
        }
    }

    /// A peer left; `has` is what it had.
    pub fn peer_left(&mut self, has: PeerHas<'_>) {
        match has {
            PeerHas::All => self.seeds = self.seeds.saturating_sub(1),
            PeerHas::Some(b) => {
                for i in b.iter_ones() {
                    if i >= self.geo.piece_count() || self.avail_of(i) == 0 {
                        continue;
                    }
                    let wanted = self.state[i as usize] == State::Wanted;
                    if wanted {
                        self.bucket_remove(i);
                    }
                    self.avail[i as usize] -= 1;
                    if wanted {
                        self.bucket_insert(i);
                    }
                }
            }
        }
    }

    /// Whether the peer has anything we still want.
    pub fn is_interesting(&self, has: PeerHas<'_>) -> bool {
        match has {
            PeerHas::All => !self.is_complete(),
            PeerHas::Some(b) => b.iter_ones().any(|i| {
                matches!(
                    self.state.get(i as usize),
                    Some(State::Wanted | State::Partial)
                )
            }),
        }
    }

    /// Picks up to `max` blocks to request from `peer`, marks them requested
    /// by it, and appends them to `out`. Returns how many were picked.
    pub fn pick(
        &mut self,
        peer: PeerKey,
        has: PeerHas<'_>,
        max: usize,
        out: &mut Vec<BlockSpan>,
    ) -> usize {
        let start = out.len();
        if max == 0 {
            return 0;
        }
        // 1. Continue partial pieces.
        let partial_keys: Vec<u32> = self
            .partial
            .iter()
            .filter(|(i, p)| p.free > 0 && has.has(**i))
            .map(|(i, _)| *i)
            .collect();
        for piece in partial_keys {
            self.take_free(piece, peer, max - (out.len() - start), out);
            if out.len() - start >= max {
                return out.len() - start;
            }
        }
        // 2. Start new pieces.
        while out.len() - start < max {
            let Some(piece) = self.next_new_piece(has) else {
                break;
            };
            self.start_piece(piece);
            self.take_free(piece, peer, max - (out.len() - start), out);
        }
        // 3. Endgame: duplicate blocks asked of exactly one other peer.
        if out.len() - start < max && self.free_blocks == 0 {
            self.pick_endgame(peer, has, max - (out.len() - start), out);
        }
        out.len() - start
    }

    /// A block arrived from `peer`.
    pub fn received(&mut self, peer: PeerKey, piece: u32, begin: u32, len: u32) -> Received {
        let Some(idx) = self.geo.block_index(piece, begin, len) else {
            return Received::Unexpected;
        };
        match self.state.get(piece as usize) {
            Some(State::Had) => return Received::Duplicate,
            Some(State::Partial) => {}
            // Data for a piece nobody asked for: accept it only if we want it
            // (a peer may legitimately answer a request we since forgot).
            Some(State::Wanted) => self.start_piece(piece),
            _ => return Received::Unexpected,
        }
        let p = self
            .partial
            .get_mut(&piece)
            .expect("partial state has an entry");
        let b = &mut p.blocks[idx as usize];
        let cancel = match *b {
            Block::Received => return Received::Duplicate,
            Block::Free => {
                p.free -= 1;
                self.free_blocks -= 1;
                Vec::new()
            }
            Block::Requested(r) => r
                .iter()
                .copied()
                .filter(|&k| k != NOBODY && k != peer)
                .collect(),
        };
        *b = Block::Received;
        p.received += 1;
        let piece_complete = p.received as usize == p.blocks.len();
        Received::New {
            cancel,
            piece_complete,
        }
    }

    /// `peer` will not deliver this block (rejected, cancelled, timed out,
    /// disconnected): it is free again unless someone else was asked too.
    pub fn release(&mut self, peer: PeerKey, piece: u32, begin: u32) {
        let Some(p) = self.partial.get_mut(&piece) else {
            return;
        };
        let idx = (begin / self.geo.block_len()) as usize;
        let Some(Block::Requested(r)) = p.blocks.get_mut(idx) else {
            return;
        };
        for k in r.iter_mut() {
            if *k == peer {
                *k = NOBODY;
            }
        }
        if r.iter().all(|&k| k == NOBODY) {
            p.blocks[idx] = Block::Free;
            p.free += 1;
            self.free_blocks += 1;
        }
    }

    /// The piece's hash matched: it is had.
    pub fn piece_verified(&mut self, piece: u32) {
        self.set_had(piece);
    }

    /// The piece's hash failed: every block is wanted again.
    pub fn piece_failed(&mut self, piece: u32) {
        if let Some(p) = self.partial.remove(&piece) {
            self.free_blocks -= u64::from(p.free);
            if self.unwanted.get(piece) {
                self.mark_skipped(piece);
                return;
            }
            self.state[piece as usize] = State::Wanted;
            self.free_blocks += u64::from(self.geo.blocks_in_piece(piece));
            self.bucket_insert(piece);
        }
    }

    /// Peers asked for `piece`'s outstanding blocks (for cancels and for
    /// telling a peer what it was asked).
    pub fn requesters(&self, piece: u32, begin: u32) -> Vec<PeerKey> {
        let idx = (begin / self.geo.block_len()) as usize;
        match self.partial.get(&piece).and_then(|p| p.blocks.get(idx)) {
            Some(Block::Requested(r)) => r.iter().copied().filter(|&k| k != NOBODY).collect(),
            _ => Vec::new(),
        }
    }

    fn take_free(&mut self, piece: u32, peer: PeerKey, max: usize, out: &mut Vec<BlockSpan>) {
        let geo = self.geo;
        let Some(p) = self.partial.get_mut(&piece) else {
            return;
        };
        let mut taken = 0;
        for (i, b) in p.blocks.iter_mut().enumerate() {
            if taken >= max || p.free == 0 {
                break;
            }
            if *b == Block::Free {
                let mut r = [NOBODY; MAX_REQUESTERS];
                r[0] = peer;
                *b = Block::Requested(r);
                p.free -= 1;
                taken += 1;
                out.push(geo.block(piece, i as u32));
            }
        }
        self.free_blocks -= taken as u64;
    }

    fn pick_endgame(
        &mut self,
        peer: PeerKey,
        has: PeerHas<'_>,
        max: usize,
        out: &mut Vec<BlockSpan>,
    ) {
        let geo = self.geo;
        let mut taken = 0;
        for (&piece, p) in self.partial.iter_mut() {
            if !has.has(piece) {
                continue;
            }
            for (i, b) in p.blocks.iter_mut().enumerate() {
                if taken >= max {
                    return;
                }
                if let Block::Requested(r) = b {
                    if r.contains(&peer) {
                        continue;
                    }
                    if let Some(slot) = r.iter_mut().find(|k| **k == NOBODY) {
                        *slot = peer;
                        taken += 1;
                        out.push(geo.block(piece, i as u32));
                    }
                }
            }
        }
    }

    fn next_new_piece(&mut self, has: PeerHas<'_>) -> Option<u32> {
        match self.order {
            Order::Sequential => {
                while (self.seq_cursor as usize) < self.state.len()
                    && self.state[self.seq_cursor as usize] != State::Wanted
                {
                    self.seq_cursor += 1;
                }
                let from = self.seq_cursor;
                let wanted = |i: u32, t: Priority| {
                    self.state[i as usize] == State::Wanted
                        && self.priority_of(i) == t
                        && has.has(i)
                };
                if self.priority.is_empty() {
                    return (from..self.geo.piece_count()).find(|&i| wanted(i, Priority::Normal));
                }
                [Priority::High, Priority::Normal, Priority::Low]
                    .into_iter()
                    .find_map(|t| (from..self.geo.piece_count()).find(|&i| wanted(i, t)))
            }
            Order::RarestFirst => {
                self.fill_buckets();
                self.buckets
                    .iter()
                    .flat_map(|tier| tier.iter().flat_map(|b| b.iter().copied()))
                    .find(|&i| has.has(i))
            }
        }
    }

    fn start_piece(&mut self, piece: u32) {
        self.bucket_remove(piece);
        self.state[piece as usize] = State::Partial;
        let n = self.geo.blocks_in_piece(piece);
        self.partial.insert(
            piece,
            Partial {
                blocks: vec![Block::Free; n as usize],
                free: n,
                received: 0,
            },
        );
    }

    /// Puts every wanted piece in its bucket, unless they are there.
    fn fill_buckets(&mut self) {
        if self.bucketing {
            return;
        }
        self.bucketing = true;
        for i in 0..self.geo.piece_count() {
            if self.state[i as usize] == State::Wanted {
                self.bucket_insert(i);
            }
        }
    }

    fn bucket_insert(&mut self, piece: u32) {
        self.seq_cursor = self.seq_cursor.min(piece);
        if !self.bucketing {
            return;
        }
        if self.pos.is_empty() {
            self.pos = vec![0; self.geo.piece_count() as usize];
        }
        self.bucketed += 1;
        let a = self.avail_of(piece) as usize;
        let tier = &mut self.buckets[self.priority_of(piece).tier()];
        if tier.len() <= a {
            tier.resize_with(a + 1, Vec::new);
        }
        let bucket = &mut tier[a];
        bucket.push(piece);
        let last = bucket.len() - 1;
        let j = self.rng.usize(..=last);
        bucket.swap(j, last);
        self.pos[bucket[last] as usize] = last as u32;
        self.pos[bucket[j] as usize] = j as u32;
    }

    fn bucket_remove(&mut self, piece: u32) {
        if !self.bucketing {
            return;
        }
        let a = self.avail_of(piece) as usize;
        let bucket = &mut self.buckets[self.priority_of(piece).tier()][a];
        let at = self.pos[piece as usize] as usize;
        debug_assert_eq!(bucket.get(at), Some(&piece));
        bucket.swap_remove(at);
        if let Some(&moved) = bucket.get(at) {
            self.pos[moved as usize] = at as u32;
        }
        self.bucketed -= 1;
        if self.bucketed == 0 {
            // Nothing left to pick: give back the per-piece arrays (made
            // again by the next insert, should a piece be wanted again).
            self.pos = Vec::new();
            self.buckets = Default::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(pieces: u32, blocks: u32) -> Geometry {
        Geometry::new(
            u64::from(pieces) * u64::from(blocks) * 16_384,
            blocks * 16_384,
            16_384,
        )
        .unwrap()
    }

    #[test]
    fn rarest_piece_first() {
        let mut p = Picker::new(geo(8, 2), Order::RarestFirst, 7);
        let mut common = Bitfield::new(8);
        for i in 0..8 {
            common.set(i);
        }
        let mut rare = Bitfield::new(8);
        rare.set(5);
        p.peer_joined(PeerHas::Some(&common));
        p.peer_joined(PeerHas::Some(&common));
        for i in 0..8 {
            if i != 5 {
                p.peer_has(i);
            }
        }
        // Piece 5 is had by 2 peers, every other by 3: 5 goes first.
        let mut out = Vec::new();
        p.pick(1, PeerHas::Some(&common), 2, &mut out);
        assert!(out.iter().all(|b| b.piece == 5), "{out:?}");
    }

    /// The pieces a seed is asked for, one whole piece per pick, in order.
    #[test]
    fn per_piece_tables_are_held_only_while_they_are_needed() {
        let mut p = Picker::new(geo(64, 1), Order::RarestFirst, 1);
        assert!(p.avail.is_empty(), "no availability before any peer");
        assert!(p.pos.is_empty(), "no buckets before a pick");
        p.peer_joined(PeerHas::All);
        assert!(p.avail.is_empty(), "seeds are counted once, not per piece");
        assert_eq!(p.availability(5), 1);
        let mut b = Bitfield::new(64);
        b.set(7);
        p.peer_joined(PeerHas::Some(&b));
        assert_eq!(p.avail.len(), 64);
        assert_eq!((p.availability(7), p.availability(6)), (2, 1));
        assert_eq!(p.availability(64), 0);
        p.set_had(3);
        assert!(p.pos.is_empty());
        // The first pick fills the buckets from the pieces still wanted:
        // the rarest come first.
        let mut out = Vec::new();
        assert_eq!(p.pick(0, PeerHas::All, 1, &mut out), 1);
        assert_eq!(p.pos.len(), 64);
        assert_ne!(out[0].piece, 7, "piece 7 is the most common");
        assert_ne!(out[0].piece, 3, "piece 3 is had");
        assert!(matches!(
            p.received(0, out[0].piece, 0, out[0].len),
            Received::New {
                piece_complete: true,
                ..
            }
        ));
        p.piece_verified(out[0].piece);
        // Every piece had: nothing is left to pick, and the tables go.
        for i in 0..64 {
            p.set_had(i);
        }
        assert!(p.is_complete());
        assert!(p.pos.is_empty() && p.pos.capacity() == 0);
        assert!(p.buckets.iter().all(|t| t.capacity() == 0));
        // A piece lost afterwards is wanted, and picked, again: it goes
        // straight into its bucket (the buckets are never scanned again).
        p.lose(9);
        assert_eq!((p.bucketed, p.pos.len()), (1, 64));
        assert_eq!(pick_order(&mut p), [9]);
        p.peer_left(PeerHas::Some(&b));
        assert_eq!(p.availability(7), 1);
    }

    #[test]
    fn a_sequential_download_never_fills_the_buckets() {
        let mut p = Picker::new(geo(32, 1), Order::Sequential, 1);
        p.peer_joined(PeerHas::All);
        assert_eq!(pick_order(&mut p), (0..32).collect::<Vec<_>>());
        assert!(p.pos.is_empty());
        assert!(p.buckets.iter().flatten().all(Vec::is_empty));
    }

    fn pick_order(p: &mut Picker) -> Vec<u32> {
        let mut order: Vec<u32> = Vec::new();
        let mut out = Vec::new();
        while p.pick(0, PeerHas::All, 1, &mut out) > 0 {
            for b in out.drain(..) {
                if order.last() != Some(&b.piece) {
                    order.push(b.piece);
                }
            }
        }
        order
    }

    #[test]
    fn high_priority_pieces_start_first_and_low_last_rarest_first_within() {
        let mut p = Picker::new(geo(8, 2), Order::RarestFirst, 3);
        let mut prio = vec![Priority::Normal; 8];
        prio[6] = Priority::High;
        prio[2] = Priority::High;
        prio[0] = Priority::Low;
        p.set_priorities(&prio);
        // Piece 2 is rarer than 6 (one peer fewer): first among the highs.
        let mut most = Bitfield::new(8);
        for i in (0..8).filter(|&i| i != 2) {
            most.set(i);
        }
        p.peer_joined(PeerHas::Some(&most));
        p.peer_joined(PeerHas::All);
        let order = pick_order(&mut p);
        assert_eq!(&order[..2], [2, 6], "{order:?}");
        assert_eq!(order[7], 0, "{order:?}");
        let mut normal = order[2..7].to_vec();
        normal.sort_unstable();
        assert_eq!(normal, [1, 3, 4, 5, 7]);
    }

    #[test]
    fn sequential_order_goes_by_priority_then_index() {
        let mut p = Picker::new(geo(6, 2), Order::Sequential, 3);
        p.set_priorities(&[
            Priority::Low,
            Priority::Normal,
            Priority::High,
            Priority::Normal,
            Priority::High,
            Priority::Low,
        ]);
        p.peer_joined(PeerHas::All);
        assert_eq!(pick_order(&mut p), [2, 4, 1, 3, 0, 5]);
    }

    #[test]
    fn priorities_set_back_to_normal_cost_nothing_and_pick_everything() {
        let mut p = Picker::new(geo(16, 1), Order::RarestFirst, 9);
        let mut some = vec![Priority::Normal; 16];
        some[3] = Priority::High;
        some[9] = Priority::Low;
        p.set_priorities(&some);
        assert_eq!(p.priority_of(3), Priority::High);
        p.set_priorities(&[]);
        assert!(
            p.priority.is_empty(),
            "no per-piece table when all are normal"
        );
        assert!(p.buckets[0].iter().chain(&p.buckets[2]).all(Vec::is_empty));
        p.peer_joined(PeerHas::All);
        let mut order = pick_order(&mut p);
        order.sort_unstable();
        assert_eq!(order, (0..16).collect::<Vec<_>>());
    }

    proptest::proptest! {
        /// Whatever the priorities, availability and started pieces, new
        /// pieces start from the highest priority down, and every wanted
        /// piece is picked exactly once.
        #[test]
        fn new_pieces_go_by_priority(
            prio in proptest::collection::vec(0u8..3, 1..40),
            avail in proptest::collection::vec(0u32..4, 40),
            seed in 0u64..1000,
            sequential in proptest::bool::ANY,
        ) {
            let n = prio.len() as u32;
            let order = if sequential { Order::Sequential } else { Order::RarestFirst };
            let mut p = Picker::new(geo(n, 1), order, seed);
            let prio: Vec<Priority> = prio
                .iter()
                .map(|t| [Priority::Low, Priority::Normal, Priority::High][*t as usize])
                .collect();
            for piece in 0..n {
                for _ in 0..avail[piece as usize] {
                    p.peer_has(piece);
                }
            }
            p.set_priorities(&prio);
            p.peer_joined(PeerHas::All);
            let picked = pick_order(&mut p);
            let mut sorted = picked.clone();
            sorted.sort_unstable();
            proptest::prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
            for w in picked.windows(2) {
                proptest::prop_assert!(prio[w[0] as usize] >= prio[w[1] as usize], "{:?}", picked);
            }
        }
    }

    #[test]
    fn ties_are_broken_randomly_but_reproducibly() {
        let first = |seed| {
            let mut p = Picker::new(geo(64, 1), Order::RarestFirst, seed);
            p.peer_joined(PeerHas::All);
            let mut out = Vec::new();
            p.pick(0, PeerHas::All, 1, &mut out);
            out[0].piece
        };
        assert_eq!(first(1), first(1));
        let distinct: std::collections::BTreeSet<_> = (0..20).map(first).collect();
        assert!(distinct.len() > 5, "{distinct:?}");
    }

    #[test]
    fn a_skipped_piece_is_never_picked_and_stays_skipped() {
        let mut p = Picker::new(geo(4, 2), Order::Sequential, 0);
        p.set_had(1);
        // A resumed prefix of piece 2, then its file is deselected.
        p.resume_prefix(2, 16_384);
        for piece in [0, 1, 2] {
            p.skip(piece);
        }
        // Piece 1 stays had (and counted), 0 and 2 are skipped.
        assert_eq!(p.bytes_wanted(), 2 * 32_768);
        assert_eq!(p.bytes_left(), 32_768);
        let mut out = Vec::new();
        p.pick(0, PeerHas::All, 100, &mut out);
        assert!(out.iter().all(|b| b.piece == 3), "{out:?}");
        assert_eq!(out.len(), 2);
        // Its data lost, the had skipped piece is not wanted again.
        p.lose(1);
        assert!(!p.had().get(1));
        assert_eq!(p.bytes_wanted(), 32_768);
        // Another peer gets only endgame duplicates of piece 3.
        let mut more = Vec::new();
        p.pick(1, PeerHas::All, 100, &mut more);
        assert!(more.iter().all(|b| b.piece == 3), "{more:?}");
        for b in &out {
            p.received(0, b.piece, b.begin, b.len);
        }
        p.piece_verified(3);
        assert!(p.is_complete());
        assert!(!p.in_endgame());
    }

    proptest::proptest! {
        /// The wanted bytes kept as a count match a walk of the states,
        /// whatever mix of skips, verifications and losses came before.
        #[test]
        fn wanted_bytes_match_the_states(ops in proptest::collection::vec((0u8..3, 0u32..9), 0..60)) {
            let mut p = Picker::new(geo(9, 2), Order::RarestFirst, 3);
            for (op, piece) in ops {
                match op {
                    0 => p.skip(piece),
                    1 => p.set_had(piece),
                    _ => p.lose(piece),
                }
                let walked: u64 = (0..9)
                    .filter(|&i| p.state[i as usize] != State::Skipped)
                    .map(|i| u64::from(p.geo.piece_size(i)))
                    .sum();
                proptest::prop_assert_eq!(p.bytes_wanted(), walked);
            }
        }
    }

    #[test]
    fn sequential_order() {
        let mut p = Picker::new(geo(4, 2), Order::Sequential, 0);
        let mut out = Vec::new();
        p.pick(0, PeerHas::All, 5, &mut out);
        let got: Vec<_> = out.iter().map(|b| (b.piece, b.begin)).collect();
        assert_eq!(got, [(0, 0), (0, 16_384), (1, 0), (1, 16_384), (2, 0)]);
    }

    #[test]
    fn partial_pieces_are_continued_before_new_ones() {
        // Rarest first, and the partial piece becomes the most common one:
        // it is still continued before any rarer piece is started.
        for seed in 0..20 {
            let mut p = Picker::new(geo(8, 4), Order::RarestFirst, seed);
            let all = Bitfield::full(8);
            p.peer_joined(PeerHas::Some(&all));
            let mut out = Vec::new();
            p.pick(0, PeerHas::Some(&all), 2, &mut out);
            let started = out[0].piece;
            assert!(out.iter().all(|b| b.piece == started), "{out:?}");
            for _ in 0..3 {
                p.peer_has(started);
            }
            assert!((0..8).all(|i| i == started || p.availability(i) < p.availability(started)));
            out.clear();
            p.pick(1, PeerHas::Some(&all), 2, &mut out);
            assert!(
                out.iter().all(|b| b.piece == started),
                "seed {seed}: started {started}, then {out:?}"
            );
            // Once it has no free block left, the rarest pieces come next.
            out.clear();
            p.pick(2, PeerHas::Some(&all), 1, &mut out);
            assert_ne!(out[0].piece, started);
        }
    }

    #[test]
    fn endgame_duplicates_are_bounded_and_cancelled() {
        let mut p = Picker::new(geo(1, 2), Order::RarestFirst, 0);
        let mut out = Vec::new();
        assert_eq!(p.pick(1, PeerHas::All, 10, &mut out), 2);
        assert!(p.in_endgame());
        out.clear();
        assert_eq!(p.pick(2, PeerHas::All, 10, &mut out), 2);
        out.clear();
        // A third peer gets nothing: two requesters per block at most.
        assert_eq!(p.pick(3, PeerHas::All, 10, &mut out), 0);
        // Peer 2 delivers block 0 first: peer 1 must cancel it.
        let r = p.received(2, 0, 0, 16_384);
        assert_eq!(
            r,
            Received::New {
                cancel: vec![1],
                piece_complete: false
            }
        );
        assert_eq!(p.received(1, 0, 0, 16_384), Received::Duplicate);
        let r = p.received(1, 0, 16_384, 16_384);
        assert!(matches!(
            r,
            Received::New {
                piece_complete: true,
                ..
            }
        ));
        p.piece_verified(0);
        assert!(p.is_complete());
        assert_eq!(p.received(1, 0, 0, 16_384), Received::Duplicate);
    }

    #[test]
    fn failed_piece_is_wanted_again_and_released_blocks_are_free() {
        let mut p = Picker::new(geo(2, 2), Order::Sequential, 0);
        let mut out = Vec::new();
        p.pick(1, PeerHas::All, 4, &mut out);
        p.release(1, 1, 0);
        out.clear();
        p.pick(2, PeerHas::All, 1, &mut out);
        assert_eq!(
            out,
            vec![BlockSpan {
                piece: 1,
                begin: 0,
                len: 16_384
            }]
        );
        p.received(1, 0, 0, 16_384);
        p.received(1, 0, 16_384, 16_384);
        p.piece_failed(0);
        assert!(!p.in_endgame());
        out.clear();
        p.pick(3, PeerHas::All, 2, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|b| b.piece == 0));
    }

    #[test]
    fn unexpected_blocks_are_refused() {
        let mut p = Picker::new(geo(2, 2), Order::Sequential, 0);
        assert_eq!(p.received(1, 9, 0, 16_384), Received::Unexpected);
        assert_eq!(p.received(1, 0, 5, 16_384), Received::Unexpected);
        assert_eq!(p.received(1, 0, 0, 100), Received::Unexpected);
    }

    proptest::proptest! {
        /// Random swarm activity never loses or duplicates a block, and the
        /// free-block count always matches the states.
        #[test]
        fn every_block_is_delivered_once(seed in 0u64..1000, ops in proptest::collection::vec((0u32..4, 0u8..3), 1..300)) {
            let g = Geometry::new(10 * 3 * 16_384 + 777, 3 * 16_384, 16_384).unwrap();
            let mut p = Picker::new(g, Order::RarestFirst, seed);
            let mut outstanding: Vec<(u32, BlockSpan)> = Vec::new();
            let mut delivered = std::collections::BTreeSet::new();
            for (peer, op) in ops {
                match op {
                    0 => {
                        let mut out = Vec::new();
                        p.pick(peer, PeerHas::All, 3, &mut out);
                        outstanding.extend(out.into_iter().map(|b| (peer, b)));
                    }
                    1 if !outstanding.is_empty() => {
                        let (k, b) = outstanding.remove(0);
                        if let Received::New { piece_complete, .. } = p.received(k, b.piece, b.begin, b.len) {
                            proptest::prop_assert!(delivered.insert((b.piece, b.begin)));
                            if piece_complete { p.piece_verified(b.piece); }
                        }
                    }
                    _ if !outstanding.is_empty() => {
                        let (k, b) = outstanding.pop().unwrap();
                        p.release(k, b.piece, b.begin);
                    }
                    _ => {}
                }
                let free: u64 = (0..g.piece_count()).map(|i| match p.state[i as usize] {
                    State::Wanted => u64::from(g.blocks_in_piece(i)),
                    State::Partial => u64::from(p.partial[&i].free),
                    _ => 0,
                }).sum();
                proptest::prop_assert_eq!(free, p.free_blocks);
            }
        }
    }

    #[test]
    fn a_resumed_prefix_is_not_asked_again() {
        let mut p = Picker::new(geo(2, 4), Order::Sequential, 1);
        p.resume_prefix(0, 2 * 16_384 + 100);
        let mut out = Vec::new();
        p.pick(1, PeerHas::All, 10, &mut out);
        let asked: Vec<(u32, u32)> = out.iter().map(|s| (s.piece, s.begin)).collect();
        // Piece 0 continues at its third block; piece 1 is whole.
        assert_eq!(asked[..2], [(0, 2 * 16_384), (0, 3 * 16_384)], "{asked:?}");
        assert_eq!(asked.len(), 2 + 4);
        for s in &out {
            p.received(1, s.piece, s.begin, s.len);
        }
        p.piece_verified(0);
        p.piece_verified(1);
        assert!(p.is_complete());
        assert!(!p.in_endgame());
        // A failed resumed piece is wanted whole again.
        let mut p = Picker::new(geo(1, 4), Order::Sequential, 1);
        p.resume_prefix(0, 3 * 16_384);
        p.piece_failed(0);
        let mut out = Vec::new();
        assert_eq!(p.pick(1, PeerHas::All, 10, &mut out), 4);
        // Nothing for a whole piece, an empty prefix, or a had piece.
        let mut p = Picker::new(geo(2, 4), Order::Sequential, 1);
        p.set_had(1);
        p.resume_prefix(0, 4 * 16_384);
        p.resume_prefix(0, 100);
        p.resume_prefix(1, 16_384);
        let mut out = Vec::new();
        assert_eq!(p.pick(1, PeerHas::All, 10, &mut out), 4);
    }

    #[test]
    fn a_lost_piece_is_wanted_again() {
        let mut p = Picker::new(geo(3, 2), Order::Sequential, 1);
        for i in 0..3 {
            p.set_had(i);
        }
        assert!(p.is_complete());
        p.lose(1);
        p.lose(1);
        assert!(!p.is_complete() && !p.had().get(1));
        assert_eq!(p.bytes_left(), 2 * 16_384);
        let mut out = Vec::new();
        assert_eq!(p.pick(1, PeerHas::All, 10, &mut out), 2);
        assert!(out.iter().all(|s| s.piece == 1));
    }
}
