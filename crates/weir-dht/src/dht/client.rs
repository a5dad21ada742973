//! The client half: answers to our queries, timeouts, lookups, announces,
//! bootstrap and table maintenance.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::{
    Announcing, CommandError, Dht, Event, MAX_INTERNAL_LOOKUPS, MAX_VOTERS, Purpose, Tx,
    VOTES_NEEDED,
};
use crate::compact::NodeInfo;
use crate::id::Id;
use crate::krpc::{Body, Message, Query, Response, Want};
use crate::lookup::{Lookup, LookupId, LookupKind, LookupLimits};
use crate::table::Insert;

impl Dht {
    pub(super) fn on_answer(&mut self, from: SocketAddr, msg: Message, now: Instant) {
        let tid = match <[u8; 2]>::try_from(msg.transaction.as_slice()) {
            Ok(b) => u16::from_be_bytes(b),
            Err(_) => {
                self.stats.unexpected += 1;
                return;
            }
        };
        // Only the address we asked may answer, and only after we asked.
        match self.txs.get(&tid) {
            Some(tx) if tx.addr == from && tx.sent.is_some() => {}
            _ => {
                self.stats.unexpected += 1;
                return;
            }
        }
        let Some(tx) = self.drop_tx(tid) else {
            return;
        };
        match msg.body {
            Body::Response(r) => self.on_response(tx, from, r, msg.ip, now),
            Body::Error(_) => self.on_error(tx, now),
            Body::Query(_) => {}
        }
    }

    fn on_response(
        &mut self,
        tx: Tx,
        from: SocketAddr,
        r: Response,
        ip: Option<SocketAddr>,
        now: Instant,
    ) {
        if let (Some(sent), false) = (tx.sent, tx.retried) {
            let rtt = now.saturating_duration_since(sent);
            self.srtt = Some(self.srtt.map_or(rtt, |s| (s * 7 + rtt) / 8));
        }
        if let Some(ip) = ip {
            self.vote(from.ip(), ip.ip());
        }
        let node = NodeInfo {
            id: r.id,
            addr: from,
        };
        let id_ok = tx.expected.is_none_or(|e| e == r.id);
        let bep42_ok = !self.cfg.enforce_node_id || r.id.is_valid_for(from.ip());
        if id_ok && bep42_ok && r.id != self.id {
            if let Insert::Full(Some(p)) = self.table.heard_response(node, now) {
                self.send_ping(p.addr, Some(p.id), false);
            }
        }
        match tx.purpose {
            Purpose::Lookup { lookup, key, depth } => {
                let Some(l) = self.lookups.get_mut(&lookup) else {
                    return;
                };
                if l.done || !bep42_ok {
                    return;
                }
                // Only nodes we can reach from this socket's family.
                let nodes = if from.is_ipv4() { &r.nodes } else { &r.nodes6 };
                let fresh = l.on_response(&key, node, depth, nodes, &r.values, r.token, now);
                if let Some(peers) = fresh {
                    if !peers.is_empty() && l.kind.wants_peers() && l.kind.is_user() {
                        self.events.push_back(Event::Peers {
                            lookup,
                            info_hash: l.target,
                            peers,
                        });
                    }
                }
                self.drive_lookup(lookup, now);
            }
            Purpose::Ping { .. } => {}
            Purpose::Announce { lookup } => self.announce_answered(lookup, true),
        }
    }

    fn on_error(&mut self, tx: Tx, now: Instant) {
        match tx.purpose {
            Purpose::Lookup { lookup, key, .. } => {
                if let Some(l) = self.lookups.get_mut(&lookup) {
                    l.on_failure(&key, false);
                }
                self.drive_lookup(lookup, now);
            }
            Purpose::Ping { .. } => {}
            Purpose::Announce { lookup } => self.announce_answered(lookup, false),
        }
    }

    pub(super) fn on_slow(&mut self, tid: u16) {
        let Some(tx) = self.txs.get(&tid) else {
            return;
        };
        if let Purpose::Lookup { lookup, key, .. } = tx.purpose {
            if let Some(l) = self.lookups.get_mut(&lookup) {
                l.on_slow(&key);
            }
            self.retransmit(tid);
            self.drive_lookup(lookup, self.now);
        }
    }

    pub(super) fn on_give_up(&mut self, tid: u16) {
        let Some(tx) = self.txs.get(&tid) else {
            return;
        };
        if let Purpose::Lookup { lookup, key, .. } = tx.purpose {
            if let Some(l) = self.lookups.get_mut(&lookup) {
                l.on_failure(&key, true);
            }
            self.drive_lookup(lookup, self.now);
        }
    }

    pub(super) fn on_tx_timeout(&mut self, tid: u16, now: Instant) {
        let Some(tx) = self.drop_tx(tid) else {
            return;
        };
        self.stats.timeouts += 1;
        if let Some(id) = tx.expected.or_else(|| self.table.id_at(&tx.addr)) {
            self.table.failed(&id, &tx.addr, now);
        }
        match tx.purpose {
            Purpose::Lookup { lookup, key, .. } => {
                if let Some(l) = self.lookups.get_mut(&lookup) {
                    l.on_failure(&key, true);
                }
                self.drive_lookup(lookup, now);
            }
            Purpose::Ping { .. } => {}
            Purpose::Announce { lookup } => self.announce_answered(lookup, false),
        }
    }

    fn vote(&mut self, voter: IpAddr, claimed: IpAddr) {
        self.votes.retain(|(v, _)| *v != voter);
        self.votes.push_back((voter, claimed));
        if self.votes.len() > MAX_VOTERS {
            self.votes.pop_front();
        }
        let n = self.votes.iter().filter(|(_, c)| *c == claimed).count();
        if n >= VOTES_NEEDED && self.external != Some(claimed) {
            self.external = Some(claimed);
            self.events.push_back(Event::ExternalAddress(claimed));
        }
    }

    fn limits(&self) -> LookupLimits {
        LookupLimits {
            k: self.cfg.table.k,
            alpha: self.cfg.alpha.max(1),
            max_in_flight: self.cfg.max_in_flight.max(self.cfg.alpha).max(1),
            max_candidates: self.cfg.max_candidates.max(self.cfg.table.k),
            max_queries: self.cfg.max_queries_per_lookup,
            max_peers_remembered: self.cfg.max_peers_per_lookup,
            enforce_node_id: self.cfg.enforce_node_id,
            one_per_ip: self.cfg.table.one_per_ip,
        }
    }

    pub(super) fn start_user_lookup(
        &mut self,
        target: Id,
        kind: LookupKind,
        now: Instant,
    ) -> Result<LookupId, CommandError> {
        self.now = self.now.max(now);
        let running =
            self.lookups.values().filter(|l| l.kind.is_user()).count() + self.announcing.len();
        if running >= self.cfg.max_lookups {
            return Err(CommandError::TooManyLookups(self.cfg.max_lookups));
        }
        let id = self.start_lookup(target, kind, self.now);
        self.pump(self.now);
        Ok(id)
    }

    fn start_lookup(&mut self, target: Id, kind: LookupKind, now: Instant) -> LookupId {
        let id = LookupId(self.next_lookup);
        self.next_lookup += 1;
        let mut l = Lookup::new(id, target, kind, self.id, self.limits(), now);
        let k = self.cfg.table.k;
        let nodes = self.table.closest(&target, k * 2, false, now);
        l.add_nodes(&nodes, 0);
        if nodes.len() < k {
            l.add_seeds(&self.cfg.bootstrap);
        }
        self.lookups.insert(id, l);
        self.drive_lookup(id, now);
        id
    }

    /// Sends what the lookup wants sent, and finishes it when it is done.
    pub(super) fn drive_lookup(&mut self, id: LookupId, now: Instant) {
        loop {
            let Some(l) = self.lookups.get_mut(&id) else {
                return;
            };
            if l.done {
                return;
            }
            if l.is_finished() {
                self.finish_lookup(id, now);
                return;
            }
            let asks = l.pick();
            if asks.is_empty() {
                return;
            }
            let (target, wants_peers) = (l.target, l.kind.wants_peers());
            for ask in asks {
                let q = if wants_peers {
                    Query::GetPeers {
                        id: self.id,
                        info_hash: target,
                        want: Want::default(),
                    }
                } else {
                    Query::FindNode {
                        id: self.id,
                        target,
                        want: Want::default(),
                    }
                };
                let purpose = Purpose::Lookup {
                    lookup: id,
                    key: ask.key,
                    depth: ask.depth,
                };
                if self
                    .send_query(ask.addr, ask.expected, purpose, q)
                    .is_none()
                {
                    // The queue is full: count it as failed so the lookup
                    // moves on rather than waiting for a query never sent.
                    if let Some(l) = self.lookups.get_mut(&id) {
                        l.on_failure(&ask.key, false);
                    }
                }
            }
        }
    }

    pub(super) fn finish_lookup(&mut self, id: LookupId, now: Instant) {
        let Some(mut l) = self.lookups.remove(&id) else {
            return;
        };
        l.finish(now);
        if l.kind.is_user() {
            self.events.push_back(Event::LookupDone {
                lookup: id,
                target: l.target,
                kind: l.kind,
                stats: l.stats.clone(),
            });
        }
        match l.kind {
            LookupKind::Announce { port, implied_port } => {
                let mut sent = 0;
                for (node, token, _) in l.closest_responded() {
                    let Some(token) = token else {
                        continue;
                    };
                    let q = Query::AnnouncePeer {
                        id: self.id,
                        info_hash: l.target,
                        port,
                        implied_port,
                        token,
                    };
                    let purpose = Purpose::Announce { lookup: id };
                    if self
                        .send_query(node.addr, Some(node.id), purpose, q)
                        .is_some()
                    {
                        sent += 1;
                    }
                }
                if sent == 0 {
                    self.events.push_back(Event::Announced {
                        lookup: id,
                        info_hash: l.target,
                        sent: 0,
                        acked: 0,
                    });
                } else {
                    self.announcing.insert(
                        id,
                        Announcing {
                            info_hash: l.target,
                            sent,
                            answered: 0,
                            acked: 0,
                        },
                    );
                }
            }
            LookupKind::Bootstrap => {
                self.bootstrap_lookup = None;
                if self.table.len() >= self.cfg.table.k {
                    self.bootstrap_backoff = Duration::from_secs(5);
                }
                self.events.push_back(Event::Bootstrapped {
                    nodes: self.table.len(),
                });
                // Fill the far buckets too, as Kademlia's join does.
                self.refresh_queue = self.table.all_refresh_targets(now, &mut self.rng).into();
            }
            _ => {}
        }
        if !l.kind.is_user() {
            self.start_queued_refreshes(now);
        }
    }

    /// Starts queued bucket refreshes while internal lookup slots are free.
    fn start_queued_refreshes(&mut self, now: Instant) {
        loop {
            let internal = self.lookups.values().filter(|l| !l.kind.is_user()).count();
            if internal >= MAX_INTERNAL_LOOKUPS {
                return;
            }
            let Some(t) = self.refresh_queue.pop_front() else {
                return;
            };
            self.start_lookup(t, LookupKind::Refresh, now);
        }
    }

    fn announce_answered(&mut self, lookup: LookupId, ok: bool) {
        let Some(a) = self.announcing.get_mut(&lookup) else {
            return;
        };
        a.answered += 1;
        if ok {
            a.acked += 1;
        }
        if a.answered >= a.sent {
            let a = self
                .announcing
                .remove(&lookup)
                .unwrap_or_else(|| unreachable!());
            self.events.push_back(Event::Announced {
                lookup,
                info_hash: a.info_hash,
                sent: a.sent,
                acked: a.acked,
            });
        }
    }

    /// Starts a bootstrap (a lookup of our own id) when the table holds
    /// fewer than `k` live nodes (or `force`: a table was just loaded) and
    /// the back-off allows (5 s, doubling to 5 minutes while the table
    /// stays short).
    pub(super) fn maybe_bootstrap(&mut self, now: Instant, force: bool) {
        if self.bootstrap_lookup.is_some() || now < self.next_bootstrap {
            return;
        }
        let (good, questionable, _) = self.table.liveness_counts(now);
        if good + questionable >= self.cfg.table.k && !force {
            return;
        }
        if self.cfg.bootstrap.is_empty() && good + questionable == 0 {
            return;
        }
        self.next_bootstrap = now + self.bootstrap_backoff;
        self.bootstrap_backoff = (self.bootstrap_backoff * 2).min(Duration::from_secs(300));
        let id = self.start_lookup(self.id, LookupKind::Bootstrap, now);
        // It may have finished at once (nothing to ask).
        if self.lookups.contains_key(&id) {
            self.bootstrap_lookup = Some(id);
        }
    }

    pub(super) fn maintenance(&mut self, now: Instant) {
        self.tokens.maybe_rotate(&mut self.rng, now);
        self.store.expire(now);
        for n in self.table.to_ping(now, self.cfg.query_timeout) {
            self.send_ping(n.addr, Some(n.id), false);
        }
        self.start_queued_refreshes(now);
        let internal = self.lookups.values().filter(|l| !l.kind.is_user()).count();
        let room = MAX_INTERNAL_LOOKUPS.saturating_sub(internal);
        if room > 0 && !self.table.is_empty() {
            let targets =
                self.table
                    .refresh_targets(self.cfg.bucket_refresh, now, &mut self.rng, room);
            for t in targets {
                self.start_lookup(t, LookupKind::Refresh, now);
            }
        }
        self.maybe_bootstrap(now, false);
    }
}
