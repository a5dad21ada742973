//! The routing table: k-buckets over the XOR distance to our id (BEP 5).
//!
//! Bucket `i` (all but the last) holds nodes whose id shares exactly `i`
//! leading bits with ours; the last bucket holds every node sharing at
//! least `len - 1` bits, which includes our own id. Only that last bucket
//! splits when full, so the table keeps many nodes near us and few far
//! away, at most 160 buckets of `k` nodes.
//!
//! Liveness follows BEP 5: a node is **good** if it answered one of our
//! queries in the last 15 minutes, or answered once and queried us in the
//! last 15 minutes; **questionable** after that; **bad** once it failed to
//! answer `bad_after` queries in a row (a node that never answered, such as
//! one loaded from a saved table, is bad after its first failure). A new
//! node for a full bucket replaces a bad node, or else waits in the
//! bucket's replacement cache (at most `k`, newest kept) while the least
//! recently seen questionable node is pinged; if that ping fails, the
//! newest replacement takes its place.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::compact::NodeInfo;
use crate::id::Id;

/// How good a node is, per BEP 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Answered recently.
    Good,
    /// Not heard from for a while, or never answered.
    Questionable,
    /// Failed to answer several queries in a row.
    Bad,
}

/// Routing table settings.
#[derive(Clone, Copy, Debug)]
pub struct TableConfig {
    /// Nodes per bucket (`k`, 8 in BEP 5).
    pub k: usize,
    /// How long an answer keeps a node good (15 minutes in BEP 5).
    pub good_for: Duration,
    /// Failed queries in a row after which an answering node is bad.
    pub bad_after: u8,
    /// At most one node per IP address (a host cannot fill a bucket with
    /// many ports). Off for tests where every node shares one address.
    pub one_per_ip: bool,
}

impl Default for TableConfig {
    fn default() -> Self {
        Self {
            k: 8,
            good_for: Duration::from_secs(15 * 60),
            bad_after: 2,
            one_per_ip: true,
        }
    }
}

/// One node in a bucket.
#[derive(Clone, Debug)]
pub struct Node {
    /// Id and address.
    pub info: NodeInfo,
    /// When it last answered one of our queries.
    pub last_response: Option<Instant>,
    /// When it last sent us a query.
    pub last_query: Option<Instant>,
    /// Queries in a row it failed to answer.
    pub failures: u8,
    /// When we last pinged it to check it (so one ping is in flight at a time).
    pub pinged: Option<Instant>,
}

impl Node {
    fn new(info: NodeInfo, responded: Option<Instant>) -> Self {
        Self {
            info,
            last_response: responded,
            last_query: None,
            failures: 0,
            pinged: None,
        }
    }

    /// This node's liveness at `now`.
    pub fn liveness(&self, now: Instant, cfg: &TableConfig) -> Liveness {
        let Some(resp) = self.last_response else {
            return if self.failures > 0 {
                Liveness::Bad
            } else {
                Liveness::Questionable
            };
        };
        if self.failures >= cfg.bad_after {
            return Liveness::Bad;
        }
        let recent = |t: Instant| now.saturating_duration_since(t) < cfg.good_for;
        if recent(resp) || self.last_query.is_some_and(recent) {
            Liveness::Good
        } else {
            Liveness::Questionable
        }
    }

    /// The latest sign of life from this node.
    fn last_seen(&self) -> Option<Instant> {
        self.last_response.max(self.last_query)
    }
}

#[derive(Clone, Debug)]
struct Bucket {
    nodes: Vec<Node>,
    /// Candidates for when a node goes bad: verified nodes (they answered),
    /// newest last.
    replacements: Vec<(NodeInfo, Instant)>,
    /// Last time a node of this bucket answered, or the bucket was refreshed.
    last_changed: Instant,
}

impl Bucket {
    fn new(now: Instant) -> Self {
        Self {
            nodes: Vec::new(),
            replacements: Vec::new(),
            last_changed: now,
        }
    }
}

/// What became of a node offered to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// It is in the table (new or refreshed).
    Inserted,
    /// Its bucket is full of live nodes: it waits in the replacement cache,
    /// and the node given (questionable, least recently seen) should be
    /// pinged; if that ping fails, a replacement takes its place.
    Full(Option<NodeInfo>),
    /// Refused (our own id, an address already used by another node, or a
    /// full bucket with no room in its replacement cache).
    Rejected,
}

/// The routing table.
#[derive(Clone, Debug)]
pub struct RoutingTable {
    our_id: Id,
    cfg: TableConfig,
    buckets: Vec<Bucket>,
}

impl RoutingTable {
    /// An empty table around `our_id`.
    pub fn new(our_id: Id, cfg: TableConfig, now: Instant) -> Self {
        Self {
            our_id,
            cfg,
            buckets: vec![Bucket::new(now)],
        }
    }

    /// Our id.
    pub fn our_id(&self) -> Id {
        self.our_id
    }

    /// The settings.
    pub fn config(&self) -> &TableConfig {
        &self.cfg
    }

    /// Number of buckets (1 to 160).
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Number of nodes in buckets.
    pub fn len(&self) -> usize {
        self.buckets.iter().map(|b| b.nodes.len()).sum()
    }

    /// Whether no node is in the table.
    pub fn is_empty(&self) -> bool {
        self.buckets.iter().all(|b| b.nodes.is_empty())
    }

    /// Number of nodes in replacement caches.
    pub fn replacement_count(&self) -> usize {
        self.buckets.iter().map(|b| b.replacements.len()).sum()
    }

    /// Counts of (good, questionable, bad) nodes at `now`.
    pub fn liveness_counts(&self, now: Instant) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for n in self.nodes() {
            match n.liveness(now, &self.cfg) {
                Liveness::Good => c.0 += 1,
                Liveness::Questionable => c.1 += 1,
                Liveness::Bad => c.2 += 1,
            }
        }
        c
    }

    /// Every node, bucket by bucket.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.buckets.iter().flat_map(|b| b.nodes.iter())
    }

    /// Whether no node that is not bad is left (time to bootstrap again).
    pub fn has_no_live_nodes(&self, now: Instant) -> bool {
        self.nodes()
            .all(|n| n.liveness(now, &self.cfg) == Liveness::Bad)
    }

    fn index(&self, id: &Id) -> usize {
        self.our_id.common_prefix(id).min(self.buckets.len() - 1)
    }

    /// The node with this id, if present.
    pub fn get(&self, id: &Id) -> Option<&Node> {
        let b = &self.buckets[self.index(id)];
        b.nodes.iter().find(|n| n.info.id == *id)
    }

    fn get_mut(&mut self, id: &Id) -> Option<&mut Node> {
        let i = self.index(id);
        self.buckets[i].nodes.iter_mut().find(|n| n.info.id == *id)
    }

    /// The id the table holds for `addr`, if any.
    pub fn id_at(&self, addr: &SocketAddr) -> Option<Id> {
        self.nodes()
            .find(|n| n.info.addr == *addr)
            .map(|n| n.info.id)
    }

    /// A node answered one of our queries: refresh it, or offer it.
    pub fn heard_response(&mut self, info: NodeInfo, now: Instant) -> Insert {
        if let Some(n) = self.get_mut(&info.id) {
            if n.info.addr == info.addr {
                n.last_response = Some(now);
                n.failures = 0;
                n.pinged = None;
                let i = self.index(&info.id);
                self.buckets[i].last_changed = now;
                return Insert::Inserted;
            }
        }
        self.insert(info, Some(now), now)
    }

    /// A node sent us a query. Returns whether it is already in the table;
    /// if not, the caller may ping it and offer it once it answers (a query
    /// alone proves nothing: its source address may be forged).
    pub fn heard_query(&mut self, info: &NodeInfo, now: Instant) -> bool {
        match self.get_mut(&info.id) {
            Some(n) if n.info.addr == info.addr => {
                n.last_query = Some(now);
                true
            }
            _ => false,
        }
    }

    /// Whether a new node with this id would get a place now (its bucket has
    /// room, holds a bad node, or can split), so pinging it is worth it.
    pub fn has_room_for(&self, id: &Id, now: Instant) -> bool {
        if *id == self.our_id {
            return false;
        }
        let i = self.index(id);
        let b = &self.buckets[i];
        b.nodes.len() < self.cfg.k
            || (i == self.buckets.len() - 1 && self.buckets.len() < Id::BITS)
            || b.nodes
                .iter()
                .any(|n| n.liveness(now, &self.cfg) == Liveness::Bad)
    }

    /// Adds a node that has not answered us yet (from a saved table); it
    /// takes a free place only, never a live node's or a cache slot.
    pub fn insert_unverified(&mut self, info: NodeInfo, now: Instant) -> bool {
        if self.get(&info.id).is_some() || self.addr_taken(&info, now) {
            return false;
        }
        loop {
            let i = self.index(&info.id);
            if self.buckets[i].nodes.len() < self.cfg.k {
                self.buckets[i].nodes.push(Node::new(info, None));
                return true;
            }
            if !self.try_split(i, now) {
                return false;
            }
        }
    }

    /// Whether another node (not bad) already uses this address, or this IP
    /// when one node per IP is enforced.
    fn addr_taken(&self, info: &NodeInfo, now: Instant) -> bool {
        self.nodes().any(|n| {
            n.info.id != info.id
                && n.liveness(now, &self.cfg) != Liveness::Bad
                && (n.info.addr == info.addr
                    || (self.cfg.one_per_ip && n.info.addr.ip() == info.addr.ip()))
        })
    }

    fn remove_addr(&mut self, addr: &SocketAddr) {
        for b in &mut self.buckets {
            b.nodes.retain(|n| n.info.addr != *addr);
        }
    }

    fn try_split(&mut self, i: usize, now: Instant) -> bool {
        if i != self.buckets.len() - 1 || self.buckets.len() >= Id::BITS {
            return false;
        }
        let depth = self.buckets.len();
        let last = &mut self.buckets[i];
        let (stay, go): (Vec<Node>, Vec<Node>) = std::mem::take(&mut last.nodes)
            .into_iter()
            .partition(|n| self.our_id.common_prefix(&n.info.id) < depth);
        let (rstay, rgo): (Vec<_>, Vec<_>) = std::mem::take(&mut last.replacements)
            .into_iter()
            .partition(|(n, _)| self.our_id.common_prefix(&n.id) < depth);
        last.nodes = stay;
        last.replacements = rstay;
        let mut next = Bucket::new(now);
        next.nodes = go;
        next.replacements = rgo;
        next.last_changed = last.last_changed;
        self.buckets.push(next);
        true
    }

    fn insert(&mut self, info: NodeInfo, responded: Option<Instant>, now: Instant) -> Insert {
        if info.id == self.our_id {
            return Insert::Rejected;
        }
        // The same address under a new id: the node restarted. It answered
        // from that address, so the old entry is stale.
        if responded.is_some() {
            self.remove_addr(&info.addr);
        }
        if self.addr_taken(&info, now) {
            return Insert::Rejected;
        }
        let cfg = self.cfg;
        if let Some(n) = self.get_mut(&info.id) {
            // Same id at another address: keep the one we know unless it is bad.
            if n.liveness(now, &cfg) != Liveness::Bad {
                return Insert::Rejected;
            }
            *n = Node::new(info, responded);
            return Insert::Inserted;
        }
        loop {
            let i = self.index(&info.id);
            let b = &mut self.buckets[i];
            if b.nodes.len() < cfg.k {
                b.nodes.push(Node::new(info, responded));
                b.last_changed = now;
                return Insert::Inserted;
            }
            if let Some(bad) = b
                .nodes
                .iter_mut()
                .find(|n| n.liveness(now, &cfg) == Liveness::Bad)
            {
                *bad = Node::new(info, responded);
                b.last_changed = now;
                return Insert::Inserted;
            }
            if self.try_split(i, now) {
                continue;
            }
            let b = &mut self.buckets[i];
            let Some(seen) = responded else {
                return Insert::Rejected;
            };
            b.replacements
                .retain(|(n, _)| n.id != info.id && n.addr != info.addr);
            if b.replacements.len() >= cfg.k {
                b.replacements.remove(0);
            }
            b.replacements.push((info, seen));
            // Ping the questionable node heard from least recently, unless a
            // ping to one is already out.
            let ping = b
                .nodes
                .iter_mut()
                .filter(|n| n.liveness(now, &cfg) == Liveness::Questionable && n.pinged.is_none())
                .min_by_key(|n| n.last_seen())
                .map(|n| {
                    n.pinged = Some(now);
                    n.info
                });
            return Insert::Full(ping);
        }
    }

    /// A query to this node went unanswered. When that makes it bad and a
    /// replacement waits, the replacement takes its place.
    pub fn failed(&mut self, id: &Id, addr: &SocketAddr, now: Instant) {
        let cfg = self.cfg;
        let i = self.index(id);
        let b = &mut self.buckets[i];
        let Some(pos) = b
            .nodes
            .iter()
            .position(|n| n.info.id == *id && n.info.addr == *addr)
        else {
            return;
        };
        let n = &mut b.nodes[pos];
        n.failures = n.failures.saturating_add(1);
        n.pinged = None;
        if n.liveness(now, &cfg) == Liveness::Bad {
            if let Some((rep, seen)) = b.replacements.pop() {
                b.nodes[pos] = Node::new(rep, Some(seen));
            } else if n.last_response.is_none() {
                // Never answered and nothing better: drop it now.
                b.nodes.remove(pos);
            }
        }
    }

    /// The `n` nodes closest to `target` that are not bad. With
    /// `verified_only`, only nodes that have answered us (what we hand to
    /// others); without, also nodes not yet checked (to start a lookup).
    pub fn closest(
        &self,
        target: &Id,
        n: usize,
        verified_only: bool,
        now: Instant,
    ) -> Vec<NodeInfo> {
        self.closest_where(target, n, verified_only, now, |_| true)
    }

    /// [`RoutingTable::closest`] among the nodes `keep` accepts (an address
    /// family, say).
    ///
    /// Buckets are visited in order of distance to the target, so only a
    /// few are read: with `i` the target's bucket, nodes of bucket `i`
    /// share more than `i` bits with the target, nodes of the buckets after
    /// it exactly `i`, nodes of a bucket `j < i` exactly `j`.
    pub fn closest_where(
        &self,
        target: &Id,
        n: usize,
        verified_only: bool,
        now: Instant,
        keep: impl Fn(&NodeInfo) -> bool,
    ) -> Vec<NodeInfo> {
        let last = self.buckets.len() - 1;
        let i = self.our_id.common_prefix(target).min(last);
        let mut all: Vec<(Id, NodeInfo)> = Vec::new();
        let take = |b: &Bucket, all: &mut Vec<(Id, NodeInfo)>| {
            for x in &b.nodes {
                if (!verified_only || x.last_response.is_some())
                    && keep(&x.info)
                    && x.liveness(now, &self.cfg) != Liveness::Bad
                {
                    all.push((x.info.id.distance(target), x.info));
                }
            }
        };
        take(&self.buckets[i], &mut all);
        if all.len() < n {
            for b in &self.buckets[i + 1..] {
                take(b, &mut all);
            }
        }
        for j in (0..i).rev() {
            if all.len() >= n {
                break;
            }
            take(&self.buckets[j], &mut all);
        }
        if all.len() > n && n > 0 {
            all.select_nth_unstable_by_key(n - 1, |a| a.0);
        }
        all.truncate(n);
        all.sort_unstable_by_key(|a| a.0);
        all.into_iter().map(|(_, i)| i).collect()
    }

    /// Targets for bucket refreshes: one random id in each of at most `max`
    /// buckets that nothing has touched for `interval` (those buckets are
    /// marked refreshed; the others wait for the next call).
    pub fn refresh_targets(
        &mut self,
        interval: Duration,
        now: Instant,
        rng: &mut fastrand::Rng,
        max: usize,
    ) -> Vec<Id> {
        let mut out = Vec::new();
        for (i, b) in self.buckets.iter_mut().enumerate() {
            if out.len() >= max {
                break;
            }
            if now.saturating_duration_since(b.last_changed) >= interval {
                b.last_changed = now;
                out.push(self.our_id.random_with_prefix(i, rng));
            }
        }
        out
    }

    /// One random id in each bucket but the last (the one holding our id,
    /// which a bootstrap has just covered): what a node looks up right
    /// after joining, to fill its far buckets (Kademlia's join).
    pub fn all_refresh_targets(&mut self, now: Instant, rng: &mut fastrand::Rng) -> Vec<Id> {
        let last = self.buckets.len() - 1;
        let mut out = Vec::with_capacity(last);
        for (i, b) in self.buckets.iter_mut().enumerate().take(last) {
            b.last_changed = now;
            out.push(self.our_id.random_with_prefix(i, rng));
        }
        out
    }

    /// Questionable nodes to ping now: in each bucket, the one heard from
    /// least recently, if no ping to it is out.
    pub fn to_ping(&mut self, now: Instant, ping_timeout: Duration) -> Vec<NodeInfo> {
        let cfg = self.cfg;
        let mut out = Vec::new();
        for b in &mut self.buckets {
            let pending = b.nodes.iter().any(|n| {
                n.pinged
                    .is_some_and(|t| now.saturating_duration_since(t) < ping_timeout)
            });
            if pending {
                continue;
            }
            if let Some(n) = b
                .nodes
                .iter_mut()
                .filter(|n| n.liveness(now, &cfg) == Liveness::Questionable)
                .min_by_key(|n| n.last_seen())
            {
                n.pinged = Some(now);
                out.push(n.info);
            }
        }
        out
    }

    /// Rough base-2 logarithm of the network size, from how deep our table
    /// splits: the last bucket at depth `d` holds about `k` nodes out of
    /// `2^d * k`.
    pub fn depth(&self) -> usize {
        self.buckets.len() - 1
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
