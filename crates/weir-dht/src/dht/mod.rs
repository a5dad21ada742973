//! The DHT node: the state machine the runtime drives (see the crate
//! documentation for the calling contract).

mod client;
mod server;
mod types;

pub use types::{CommandError, Config, Event, Stats};

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::compact::NodeInfo;
use crate::id::{Id, InfoHash};
use crate::krpc::{self, Body, Message};
use crate::lookup::{CandKey, Lookup, LookupId, LookupKind};
use crate::ratelimit::RateLimit;
use crate::save::SavedTable;
use crate::store::PeerStore;
use crate::table::RoutingTable;
use crate::token::Tokens;

/// How often the node checks its table, tokens and stored peers.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(10);
/// Pings outstanding at once to check nodes that queried us.
const MAX_VERIFY_PINGS: usize = 32;
/// Internal lookups (bootstrap and bucket refresh) at once.
const MAX_INTERNAL_LOOKUPS: usize = 4;
/// Voters remembered for our external address.
const MAX_VOTERS: usize = 64;
/// Distinct voters needed to report an external address.
const VOTES_NEEDED: usize = 3;

/// Why a transaction was started.
#[derive(Clone, Copy, Debug)]
enum Purpose {
    /// A step of a lookup.
    Lookup {
        lookup: LookupId,
        key: CandKey,
        depth: usize,
    },
    /// A ping: to check a table node, or to verify a node that queried us.
    Ping { verify: bool },
    /// An `announce_peer` after a lookup.
    Announce { lookup: LookupId },
}

#[derive(Clone, Debug)]
struct Tx {
    serial: u64,
    addr: SocketAddr,
    expected: Option<Id>,
    purpose: Purpose,
    /// When it went out (`None` while it waits for the rate limit).
    sent: Option<Instant>,
    /// Sent a second time (after it turned slow); its RTT is not measured.
    retried: bool,
    /// The datagram (kept for that one retransmission).
    data: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A lookup query is slow: another may go out, and it is sent again.
    Slow,
    /// A lookup query is given up by its lookup (two slow periods): the
    /// lookup moves on; the answer is still taken until the timeout.
    GiveUp,
    /// The query failed.
    Timeout,
}

/// What is left of an `announce` after its lookup: the `announce_peer`
/// queries out.
#[derive(Clone, Debug)]
struct Announcing {
    info_hash: InfoHash,
    sent: usize,
    answered: usize,
    acked: usize,
}

/// A DHT node (BEP 5), sans-IO. `Clone` copies the whole state (a
/// simulation can fork a network).
#[derive(Clone, Debug)]
pub struct Dht {
    cfg: Config,
    id: Id,
    rng: fastrand::Rng,
    now: Instant,
    table: RoutingTable,
    store: PeerStore,
    tokens: Tokens,
    limiter: RateLimit,
    /// Queries waiting for the rate limit: (tid, serial).
    queue: VecDeque<(u16, u64)>,
    ready: VecDeque<(SocketAddr, Vec<u8>)>,
    txs: BTreeMap<u16, Tx>,
    timers: BTreeSet<(Instant, u64, u16, Timer)>,
    next_serial: u64,
    lookups: BTreeMap<LookupId, Lookup>,
    announcing: BTreeMap<LookupId, Announcing>,
    next_lookup: u64,
    events: VecDeque<Event>,
    next_maintenance: Instant,
    bootstrap_lookup: Option<LookupId>,
    /// Buckets to refresh after a bootstrap, started a few at a time.
    refresh_queue: VecDeque<Id>,
    next_bootstrap: Instant,
    bootstrap_backoff: Duration,
    verify_pings: usize,
    srtt: Option<Duration>,
    votes: VecDeque<(IpAddr, IpAddr)>,
    external: Option<IpAddr>,
    stats: Stats,
}

impl Dht {
    /// A node with id `our_id`, randomness from `seed` (transaction ids,
    /// token secrets, refresh targets), started at `now`. If the config
    /// names bootstrap nodes it starts bootstrapping at once; so does
    /// [`Dht::load_table`] with saved nodes.
    pub fn new(cfg: Config, our_id: Id, seed: u64, now: Instant) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let tokens = Tokens::new(&mut rng, cfg.token_rotation, now);
        let mut dht = Self {
            table: RoutingTable::new(our_id, cfg.table, now),
            store: PeerStore::new(cfg.store),
            limiter: RateLimit::new(cfg.queries_per_sec, cfg.query_burst),
            tokens,
            id: our_id,
            rng,
            now,
            queue: VecDeque::new(),
            ready: VecDeque::new(),
            txs: BTreeMap::new(),
            timers: BTreeSet::new(),
            next_serial: 0,
            lookups: BTreeMap::new(),
            announcing: BTreeMap::new(),
            next_lookup: 1,
            events: VecDeque::new(),
            next_maintenance: now + MAINTENANCE_EVERY,
            bootstrap_lookup: None,
            refresh_queue: VecDeque::new(),
            next_bootstrap: now,
            bootstrap_backoff: Duration::from_secs(5),
            verify_pings: 0,
            srtt: None,
            votes: VecDeque::new(),
            external: None,
            stats: Stats::default(),
            cfg,
        };
        dht.maybe_bootstrap(now, false);
        dht.pump(now);
        dht
    }

    /// Our node id.
    pub fn id(&self) -> Id {
        self.id
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The routing table (read-only view).
    pub fn table(&self) -> &RoutingTable {
        &self.table
    }

    /// Handles one datagram received from `from` (the runtime passes only
    /// datagrams for which [`crate::is_krpc`] is true).
    pub fn handle_datagram(&mut self, from: SocketAddr, data: &[u8], now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        match krpc::decode(data) {
            Ok(msg) => match &msg.body {
                Body::Query(q) => self.on_query(from, &msg, q, now),
                Body::Response(_) | Body::Error(_) => self.on_answer(from, msg, now),
            },
            Err(e) => {
                self.stats.malformed += 1;
                if let (true, Some(t)) = (e.query, e.transaction) {
                    self.reply_error(from, t, krpc::ERROR_PROTOCOL, "malformed query");
                }
            }
        }
        self.pump(now);
    }

    /// Handles timers due at `now`: query timeouts, slow queries, the rate
    /// limit, maintenance (table checks, bucket refresh, token rotation,
    /// peer expiry, bootstrap when the table is empty).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        while let Some(&(at, serial, tid, kind)) = self.timers.iter().next() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, serial, tid, kind));
            if self.txs.get(&tid).is_none_or(|t| t.serial != serial) {
                continue;
            }
            match kind {
                Timer::Slow => self.on_slow(tid),
                Timer::GiveUp => self.on_give_up(tid),
                Timer::Timeout => self.on_tx_timeout(tid, now),
            }
        }
        let overdue: Vec<LookupId> = self
            .lookups
            .values()
            .filter(|l| {
                !l.done && now.saturating_duration_since(l.started) >= self.cfg.lookup_timeout
            })
            .map(|l| l.id)
            .collect();
        for id in overdue {
            self.finish_lookup(id, now);
        }
        if now >= self.next_maintenance {
            self.next_maintenance = now + MAINTENANCE_EVERY;
            self.maintenance(now);
        }
        self.pump(now);
    }

    /// The next datagram to send: `(destination, bytes)`.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.ready.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Dht::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.next_maintenance;
        if let Some(&(at, ..)) = self.timers.iter().next() {
            t = t.min(at);
        }
        if !self.queue.is_empty() {
            t = t.min(self.limiter.next_allowed(self.now));
        }
        if let Some(l) = self
            .lookups
            .values()
            .filter(|l| !l.done)
            .map(|l| l.started)
            .min()
        {
            t = t.min(l + self.cfg.lookup_timeout);
        }
        Some(t)
    }

    /// Starts a `get_peers` lookup for `info_hash`; peers come as
    /// [`Event::Peers`], the end as [`Event::LookupDone`].
    pub fn get_peers(
        &mut self,
        info_hash: InfoHash,
        now: Instant,
    ) -> Result<LookupId, CommandError> {
        self.start_user_lookup(info_hash, LookupKind::GetPeers, now)
    }

    /// Looks up `info_hash` (peers reported as for [`Dht::get_peers`]) and
    /// then announces us on `port` to the closest nodes; `None` announces
    /// with `implied_port` (the source port of our datagrams, for uTP on
    /// the DHT socket). Ends with [`Event::Announced`]. Re-announce every
    /// 15 to 30 minutes: stored peers expire after 30.
    pub fn announce(
        &mut self,
        info_hash: InfoHash,
        port: Option<u16>,
        now: Instant,
    ) -> Result<LookupId, CommandError> {
        let kind = match port {
            Some(0) => return Err(CommandError::BadPort),
            Some(p) => LookupKind::Announce {
                port: p,
                implied_port: false,
            },
            None => LookupKind::Announce {
                port: 0,
                implied_port: true,
            },
        };
        self.start_user_lookup(info_hash, kind, now)
    }

    /// Starts a `find_node` lookup for `target` (the closest nodes come in
    /// [`Event::LookupDone`]).
    pub fn find_node(&mut self, target: Id, now: Instant) -> Result<LookupId, CommandError> {
        self.start_user_lookup(target, LookupKind::FindNode, now)
    }

    /// Stops a lookup (no more events for it).
    pub fn cancel(&mut self, lookup: LookupId) {
        self.lookups.remove(&lookup);
        self.announcing.remove(&lookup);
    }

    /// Pings `addr` and adds it to the table if it answers: for the DHT
    /// port a peer sent (BEP 5 `PORT` message) or a node given by hand.
    pub fn add_node(&mut self, addr: SocketAddr, now: Instant) {
        self.now = self.now.max(now);
        if crate::compact::is_usable(&addr) && !self.txs.values().any(|t| t.addr == addr) {
            self.send_ping(addr, None, false);
        }
        self.pump(self.now);
    }

    /// The routing table as a blob for the state directory (our id and the
    /// nodes that are not bad, good ones first). See [`SavedTable`].
    pub fn save_table(&self) -> Vec<u8> {
        self.saved_table().encode()
    }

    /// The routing table as a [`SavedTable`].
    pub fn saved_table(&self) -> SavedTable {
        let cfg = *self.table.config();
        let mut nodes: Vec<(u8, NodeInfo)> = self
            .table
            .nodes()
            .filter_map(|n| match n.liveness(self.now, &cfg) {
                crate::table::Liveness::Good => Some((0, n.info)),
                crate::table::Liveness::Questionable => Some((1, n.info)),
                crate::table::Liveness::Bad => None,
            })
            .collect();
        nodes.sort_by_key(|n| n.0);
        SavedTable {
            id: self.id,
            nodes: nodes.into_iter().map(|n| n.1).collect(),
        }
    }

    /// Puts the nodes of a saved table in the routing table (unchecked: the
    /// first lookups check them) and bootstraps from them. The runtime
    /// creates the node with the saved id: `Dht::new(cfg, saved.id, ..)`.
    /// Returns how many nodes were taken.
    pub fn load_table(&mut self, saved: &SavedTable, now: Instant) -> usize {
        self.now = self.now.max(now);
        let mut n = 0;
        for node in &saved.nodes {
            if self.cfg.enforce_node_id && !node.id.is_valid_for(node.addr.ip()) {
                continue;
            }
            if crate::compact::is_usable(&node.addr)
                && self.table.insert_unverified(*node, self.now)
            {
                n += 1;
            }
        }
        if n > 0 {
            if let Some(l) = self
                .bootstrap_lookup
                .and_then(|id| self.lookups.get_mut(&id))
            {
                let nodes = self
                    .table
                    .closest(&self.id, self.cfg.table.k * 2, false, self.now);
                l.add_nodes(&nodes, 0);
                let id = l.id;
                self.drive_lookup(id, self.now);
            } else {
                self.next_bootstrap = self.now;
                self.maybe_bootstrap(self.now, true);
            }
        }
        self.pump(self.now);
        n
    }

    /// Counters and sizes.
    pub fn stats(&self) -> Stats {
        let (good, _, _) = self.table.liveness_counts(self.now);
        Stats {
            nodes: self.table.len(),
            good_nodes: good,
            replacements: self.table.replacement_count(),
            buckets: self.table.bucket_count(),
            lookups: self.lookups.len(),
            lookup_candidates: self.lookups.values().map(Lookup::candidates).sum(),
            largest_lookup: self
                .lookups
                .values()
                .map(Lookup::candidates)
                .max()
                .unwrap_or(0),
            transactions: self.txs.len(),
            queued: self.queue.len(),
            ready: self.ready.len(),
            stored_peers: self.store.len(),
            stored_hashes: self.store.hashes(),
            ..self.stats.clone()
        }
    }

    // ----- internals shared by the client and server halves -----

    fn base_message(&self, transaction: Vec<u8>, body: Body) -> Message {
        Message {
            transaction,
            version: self.cfg.version.map(|v| v.to_vec()),
            read_only: self.cfg.read_only,
            ip: None,
            body,
        }
    }

    /// Queues an answer (not rate-limited, but bounded).
    fn push_reply(&mut self, to: SocketAddr, data: Vec<u8>) {
        if self.ready.len() >= self.cfg.max_replies_queued + self.cfg.max_queued {
            self.stats.replies_dropped += 1;
            return;
        }
        self.ready.push_back((to, data));
    }

    /// Moves queries the rate limit allows from the queue to `ready`.
    fn pump(&mut self, now: Instant) {
        while let Some(&(tid, serial)) = self.queue.front() {
            let live = match self.txs.get(&tid) {
                Some(tx) if tx.serial == serial => match tx.purpose {
                    Purpose::Lookup { lookup, .. } => {
                        self.lookups.get(&lookup).is_some_and(|l| !l.done)
                    }
                    _ => true,
                },
                _ => false,
            };
            if !live {
                self.queue.pop_front();
                if self.txs.get(&tid).is_some_and(|t| t.serial == serial) {
                    self.drop_tx(tid);
                }
                continue;
            }
            if !self.limiter.try_take(now) {
                break;
            }
            self.queue.pop_front();
            let slow = self.slow_after();
            let timeout = self.cfg.query_timeout;
            let Some(tx) = self.txs.get_mut(&tid) else {
                continue;
            };
            if tx.sent.is_none() {
                tx.sent = Some(now);
                if matches!(tx.purpose, Purpose::Lookup { .. }) {
                    self.timers.insert((now + slow, serial, tid, Timer::Slow));
                    self.timers
                        .insert((now + slow * 2, serial, tid, Timer::GiveUp));
                }
                self.timers
                    .insert((now + timeout, serial, tid, Timer::Timeout));
            }
            self.stats.queries_sent += 1;
            self.ready.push_back((tx.addr, tx.data.clone()));
        }
    }

    /// Sends a slow lookup query once more (a lost datagram then costs a
    /// slow period, not a whole timeout). The timeout still counts from the
    /// first send.
    fn retransmit(&mut self, tid: u16) {
        let Some(tx) = self.txs.get_mut(&tid) else {
            return;
        };
        if tx.retried || self.queue.len() >= self.cfg.max_queued {
            return;
        }
        tx.retried = true;
        self.queue.push_back((tid, tx.serial));
    }

    fn slow_after(&self) -> Duration {
        let adaptive = self.srtt.map_or(self.cfg.slow_after, |s| {
            (s * 3).max(Duration::from_millis(100))
        });
        adaptive.min(self.cfg.slow_after)
    }

    fn drop_tx(&mut self, tid: u16) -> Option<Tx> {
        let tx = self.txs.remove(&tid)?;
        if let Purpose::Ping { verify: true } = tx.purpose {
            self.verify_pings = self.verify_pings.saturating_sub(1);
        }
        Some(tx)
    }

    /// Registers a query and queues it; `None` if the queue is full.
    fn send_query(
        &mut self,
        addr: SocketAddr,
        expected: Option<Id>,
        purpose: Purpose,
        query: krpc::Query,
    ) -> Option<u16> {
        if self.queue.len() >= self.cfg.max_queued || self.txs.len() >= u16::MAX as usize / 2 {
            return None;
        }
        let tid = loop {
            let t = self.rng.u16(..);
            if !self.txs.contains_key(&t) {
                break t;
            }
        };
        self.next_serial += 1;
        let serial = self.next_serial;
        let msg = self.base_message(tid.to_be_bytes().to_vec(), Body::Query(query));
        self.txs.insert(
            tid,
            Tx {
                serial,
                addr,
                expected,
                purpose,
                sent: None,
                retried: false,
                data: msg.to_vec(),
            },
        );
        if let Purpose::Ping { verify: true } = purpose {
            self.verify_pings += 1;
        }
        self.queue.push_back((tid, serial));
        Some(tid)
    }

    fn send_ping(&mut self, addr: SocketAddr, expected: Option<Id>, verify: bool) {
        let q = krpc::Query::Ping { id: self.id };
        self.send_query(addr, expected, Purpose::Ping { verify }, q);
    }
}
