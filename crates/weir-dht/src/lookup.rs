//! One iterative lookup (Kademlia's node lookup, BEP 5's `get_peers`
//! traversal): the candidates seen so far, ordered by distance to the
//! target, and what each has done.
//!
//! The lookup queries the closest candidates it has not asked yet, `alpha`
//! at a time; a query that is slow to answer stops counting against
//! `alpha` (another one goes out) but is still waited for until its
//! timeout, so a few dead nodes do not stall a lookup, and a fast network
//! gets `alpha` queries in flight, a slow one more (at most
//! `max_in_flight`). It is **done when the `k` closest candidates that have
//! not failed have all answered**, never on a timer: each answer can only
//! bring nodes that are closer, and none of the `k` closest is left to ask.
//!
//! What a stranger can put here is bounded: candidates (`max_candidates`,
//! the farthest dropped), queries per lookup, peers remembered for
//! de-duplication; one candidate per address and per IP; a node that
//! answers under an id other than the one it was referred with is
//! ignored (a liar, or stale), and with `enforce_node_id` so is a node
//! whose id does not match its IP (BEP 42).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::compact::{NodeInfo, is_usable};
use crate::id::Id;

/// Identifies a lookup started by a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LookupId(pub u64);

/// What a lookup is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupKind {
    /// `get_peers`: find peers of an info-hash.
    GetPeers,
    /// `get_peers`, then `announce_peer` to the closest nodes.
    Announce {
        /// The port announced (ignored with `implied_port`).
        port: u16,
        /// Ask the nodes to use our source port.
        implied_port: bool,
    },
    /// `find_node`: the nodes closest to an id.
    FindNode,
    /// Internal: `find_node` on our own id to fill the table.
    Bootstrap,
    /// Internal: `find_node` on a random id in a stale bucket.
    Refresh,
}

impl LookupKind {
    /// Whether the lookup sends `get_peers` (else `find_node`).
    pub fn wants_peers(&self) -> bool {
        matches!(self, LookupKind::GetPeers | LookupKind::Announce { .. })
    }

    /// Whether a command started it (its progress is reported as events).
    pub fn is_user(&self) -> bool {
        !matches!(self, LookupKind::Bootstrap | LookupKind::Refresh)
    }
}

/// Figures of a finished lookup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LookupStats {
    /// Queries sent.
    pub queries: usize,
    /// Answers received.
    pub responses: usize,
    /// Queries that timed out.
    pub timeouts: usize,
    /// Error answers.
    pub errors: usize,
    /// Answers under an unexpected id (ignored).
    pub mismatched: usize,
    /// Distinct peers reported.
    pub peers: usize,
    /// Referral depth of the deepest of the closest nodes that answered
    /// (0: a node we knew; 1: a node one of those named; ...).
    pub hops: usize,
    /// How long the lookup took.
    pub elapsed: Duration,
    /// When the first peer arrived, from the start.
    pub first_peer_after: Option<Duration>,
    /// The closest nodes that answered (at most `k`), closest first.
    pub closest: Vec<NodeInfo>,
}

/// Which candidate a query went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CandKey {
    /// A candidate known by id, keyed by its distance to the target.
    Node(Id),
    /// A bootstrap address (id unknown until it answers).
    Seed(SocketAddr),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    New,
    Asked { slow: bool },
    Responded { token: Option<Vec<u8>> },
    Failed,
}

#[derive(Clone, Debug)]
struct Cand {
    info: NodeInfo,
    state: State,
    depth: usize,
}

/// Bounds and knobs of lookups.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LookupLimits {
    pub(crate) k: usize,
    pub(crate) alpha: usize,
    pub(crate) max_in_flight: usize,
    pub(crate) max_candidates: usize,
    pub(crate) max_queries: usize,
    pub(crate) max_peers_remembered: usize,
    pub(crate) enforce_node_id: bool,
    pub(crate) one_per_ip: bool,
}

/// A query the lookup wants sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    pub(crate) key: CandKey,
    pub(crate) addr: SocketAddr,
    pub(crate) expected: Option<Id>,
    pub(crate) depth: usize,
}

/// A lookup in progress.
#[derive(Clone, Debug)]
pub(crate) struct Lookup {
    pub(crate) id: LookupId,
    pub(crate) target: Id,
    pub(crate) kind: LookupKind,
    pub(crate) started: Instant,
    our_id: Id,
    limits: LookupLimits,
    cands: BTreeMap<Id, Cand>,
    seeds: Vec<(SocketAddr, State)>,
    queried: BTreeSet<SocketAddr>,
    peers_seen: BTreeSet<SocketAddr>,
    pub(crate) stats: LookupStats,
    pub(crate) done: bool,
}

impl Lookup {
    pub(crate) fn new(
        id: LookupId,
        target: Id,
        kind: LookupKind,
        our_id: Id,
        limits: LookupLimits,
        now: Instant,
    ) -> Self {
        Self {
            id,
            target,
            kind,
            started: now,
            our_id,
            limits,
            cands: BTreeMap::new(),
            seeds: Vec::new(),
            queried: BTreeSet::new(),
            peers_seen: BTreeSet::new(),
            stats: LookupStats::default(),
            done: false,
        }
    }

    /// Adds bootstrap addresses (at most 16 are kept).
    pub(crate) fn add_seeds(&mut self, addrs: &[SocketAddr]) {
        for a in addrs {
            if self.seeds.len() >= 16 {
                break;
            }
            if is_usable(a) && !self.seeds.iter().any(|(s, _)| s == a) && !self.knows_addr(a) {
                self.seeds.push((*a, State::New));
            }
        }
    }

    fn knows_addr(&self, a: &SocketAddr) -> bool {
        self.queried.contains(a) || self.cands.values().any(|c| c.info.addr == *a)
    }

    fn knows_ip(&self, a: &SocketAddr) -> bool {
        self.cands.values().any(|c| c.info.addr.ip() == a.ip())
    }

    /// Offers nodes (from our table, depth 0, or from an answer).
    pub(crate) fn add_nodes(&mut self, nodes: &[NodeInfo], depth: usize) {
        for n in nodes {
            self.add_node(*n, depth, State::New);
        }
    }

    fn add_node(&mut self, n: NodeInfo, depth: usize, state: State) -> bool {
        if n.id == self.our_id || !is_usable(&n.addr) {
            return false;
        }
        if self.limits.enforce_node_id && !n.id.is_valid_for(n.addr.ip()) {
            return false;
        }
        let key = n.id.distance(&self.target);
        if self.cands.contains_key(&key) || self.knows_addr(&n.addr) {
            return false;
        }
        if self.limits.one_per_ip && self.knows_ip(&n.addr) {
            return false;
        }
        if self.cands.len() >= self.limits.max_candidates {
            match self.cands.last_key_value() {
                Some((far, _)) if *far > key => {
                    let far = *far;
                    self.cands.remove(&far);
                }
                _ => return false,
            }
        }
        self.cands.insert(
            key,
            Cand {
                info: n,
                state,
                depth,
            },
        );
        true
    }

    fn in_flight(&self) -> (usize, usize) {
        let mut fast = 0;
        let mut all = 0;
        let states = self
            .cands
            .values()
            .map(|c| &c.state)
            .chain(self.seeds.iter().map(|(_, s)| s));
        for s in states {
            if let State::Asked { slow } = s {
                all += 1;
                if !slow {
                    fast += 1;
                }
            }
        }
        (fast, all)
    }

    /// The queries to send now (marked asked).
    pub(crate) fn pick(&mut self) -> Vec<Ask> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        let (mut fast, mut all) = self.in_flight();
        let room = |fast: usize, all: usize, q: usize, l: &LookupLimits| {
            fast < l.alpha && all < l.max_in_flight && q < l.max_queries
        };
        // Bootstrap addresses first: they are all we have at the start.
        for (addr, state) in &mut self.seeds {
            if *state == State::New && room(fast, all, self.stats.queries, &self.limits) {
                *state = State::Asked { slow: false };
                self.queried.insert(*addr);
                fast += 1;
                all += 1;
                self.stats.queries += 1;
                out.push(Ask {
                    key: CandKey::Seed(*addr),
                    addr: *addr,
                    expected: None,
                    depth: 0,
                });
            }
        }
        // Then the k closest candidates not yet asked.
        let k = self.limits.k;
        for (key, c) in self
            .cands
            .iter_mut()
            .filter(|(_, c)| c.state != State::Failed)
            .take(k)
        {
            if c.state != State::New {
                continue;
            }
            if !room(fast, all, self.stats.queries, &self.limits) {
                break;
            }
            c.state = State::Asked { slow: false };
            self.queried.insert(c.info.addr);
            fast += 1;
            all += 1;
            self.stats.queries += 1;
            out.push(Ask {
                key: CandKey::Node(*key),
                addr: c.info.addr,
                expected: Some(c.info.id),
                depth: c.depth,
            });
        }
        out
    }

    fn state_mut(&mut self, key: &CandKey) -> Option<&mut State> {
        match key {
            CandKey::Node(d) => self.cands.get_mut(d).map(|c| &mut c.state),
            CandKey::Seed(a) => self.seeds.iter_mut().find(|(s, _)| s == a).map(|(_, s)| s),
        }
    }

    /// A query is slow: it stops counting against `alpha`.
    pub(crate) fn on_slow(&mut self, key: &CandKey) {
        if let Some(s @ State::Asked { .. }) = self.state_mut(key) {
            *s = State::Asked { slow: true };
        }
    }

    /// A query failed (given up, timed out, or an error answer). Counted
    /// once per candidate.
    pub(crate) fn on_failure(&mut self, key: &CandKey, timeout: bool) {
        let Some(s) = self.state_mut(key) else {
            return;
        };
        if matches!(s, State::Failed | State::Responded { .. }) {
            return;
        }
        *s = State::Failed;
        if timeout {
            self.stats.timeouts += 1;
        } else {
            self.stats.errors += 1;
        }
    }

    /// An answer arrived from the candidate under `key`, responder id
    /// `from`. Returns the peers not reported before (to report now), or
    /// `None` if the answer was ignored (id mismatch).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_response(
        &mut self,
        key: &CandKey,
        from: NodeInfo,
        depth: usize,
        nodes: &[NodeInfo],
        values: &[SocketAddr],
        token: Option<Vec<u8>>,
        now: Instant,
    ) -> Option<Vec<SocketAddr>> {
        match key {
            CandKey::Node(d) => {
                let Some(c) = self.cands.get_mut(d) else {
                    // Dropped as too far while in flight: its nodes and
                    // peers are still worth having.
                    self.stats.responses += 1;
                    return Some(self.learn(depth, nodes, values, now));
                };
                if c.info.id != from.id {
                    self.stats.mismatched += 1;
                    c.state = State::Failed;
                    return None;
                }
                c.state = State::Responded { token };
            }
            CandKey::Seed(a) => {
                if let Some((_, s)) = self.seeds.iter_mut().find(|(s, _)| s == a) {
                    *s = State::Responded { token: None };
                }
                // The seed is now a candidate with a known id.
                let key = from.id.distance(&self.target);
                self.queried.remove(a);
                let kept = token.clone();
                if !self.add_node(from, depth, State::Responded { token }) {
                    // Already a candidate (a table node and a bootstrap
                    // address at once): it has answered now.
                    if let Some(c) = self.cands.get_mut(&key) {
                        if c.info.addr == from.addr {
                            c.state = State::Responded { token: kept };
                        }
                    }
                }
                self.queried.insert(*a);
            }
        }
        self.stats.responses += 1;
        Some(self.learn(depth, nodes, values, now))
    }

    fn learn(
        &mut self,
        depth: usize,
        nodes: &[NodeInfo],
        values: &[SocketAddr],
        now: Instant,
    ) -> Vec<SocketAddr> {
        self.add_nodes(nodes, depth + 1);
        let mut fresh = Vec::new();
        for p in values {
            if !is_usable(p) {
                continue;
            }
            if self.peers_seen.len() < self.limits.max_peers_remembered {
                if self.peers_seen.insert(*p) {
                    fresh.push(*p);
                }
            } else if !self.peers_seen.contains(p) {
                // Past the bound peers are still reported, without
                // de-duplication: memory stays bounded, no peer is lost.
                fresh.push(*p);
            }
        }
        if !fresh.is_empty() && self.stats.first_peer_after.is_none() {
            self.stats.first_peer_after = Some(now.saturating_duration_since(self.started));
        }
        self.stats.peers += fresh.len();
        fresh
    }

    /// Whether the `k` closest live candidates have all answered (or there
    /// is nothing left to ask).
    pub(crate) fn is_finished(&self) -> bool {
        let k = self.limits.k;
        let mut top = 0;
        for c in self
            .cands
            .values()
            .filter(|c| c.state != State::Failed)
            .take(k)
        {
            if !matches!(c.state, State::Responded { .. }) {
                // Unasked but out of query budget counts as nothing to do.
                if c.state == State::New && self.stats.queries >= self.limits.max_queries {
                    continue;
                }
                return false;
            }
            top += 1;
        }
        if top == k {
            return true;
        }
        // Fewer than k known: wait for the bootstrap addresses still out.
        !self
            .seeds
            .iter()
            .any(|(_, s)| matches!(s, State::New | State::Asked { .. }))
            || self.stats.queries >= self.limits.max_queries && self.in_flight().1 == 0
    }

    /// The closest candidates that answered, with their tokens (at most k).
    pub(crate) fn closest_responded(&self) -> Vec<(NodeInfo, Option<Vec<u8>>, usize)> {
        self.cands
            .values()
            .filter_map(|c| match &c.state {
                State::Responded { token } => Some((c.info, token.clone(), c.depth)),
                _ => None,
            })
            .take(self.limits.k)
            .collect()
    }

    /// Number of candidates held (for memory accounting).
    pub(crate) fn candidates(&self) -> usize {
        self.cands.len() + self.seeds.len()
    }

    /// Marks the lookup done and fills its final figures.
    pub(crate) fn finish(&mut self, now: Instant) {
        self.done = true;
        let closest = self.closest_responded();
        self.stats.hops = closest.iter().map(|c| c.2).max().unwrap_or(0);
        self.stats.closest = closest.into_iter().map(|c| c.0).collect();
        self.stats.elapsed = now.saturating_duration_since(self.started);
    }
}

#[cfg(test)]
#[path = "lookup_tests.rs"]
mod tests;
