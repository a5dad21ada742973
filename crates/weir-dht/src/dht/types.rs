//! The types a runtime uses with [`Dht`](super::Dht): its settings, the
//! events it reports, command errors and counters.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::id::{Id, InfoHash};
use crate::lookup::{LookupId, LookupKind, LookupStats};
use crate::store::StoreConfig;
use crate::table::TableConfig;

/// Settings of a DHT node. `Config::default()` is what a client on the
/// public DHT should use.
#[derive(Clone, Debug)]
pub struct Config {
    /// Routing table: `k`, liveness timings, one node per IP.
    pub table: TableConfig,
    /// Stored peers: bounds and TTL.
    pub store: StoreConfig,
    /// Queries a lookup keeps in flight that are not slow (`alpha`).
    pub alpha: usize,
    /// Queries a lookup keeps in flight, slow ones included.
    pub max_in_flight: usize,
    /// A query not answered by then has failed.
    pub query_timeout: Duration,
    /// A lookup query not answered by then is slow: it stops counting
    /// against `alpha` and is sent once more; after twice that its lookup
    /// gives up on it (its answer is still taken until `query_timeout`).
    /// The node uses `min(this, max(3 * smoothed RTT, 100 ms))`.
    pub slow_after: Duration,
    /// Outgoing queries per second (0: unlimited). Queries over the rate
    /// wait in a queue; answers to others are not limited.
    pub queries_per_sec: u32,
    /// Queries that may go out back to back.
    pub query_burst: u32,
    /// Queries waiting for the rate limit, at most.
    pub max_queued: usize,
    /// Answers waiting for `poll_transmit`, at most (more are dropped).
    pub max_replies_queued: usize,
    /// Lookups started by commands, at once.
    pub max_lookups: usize,
    /// Candidates one lookup holds.
    pub max_candidates: usize,
    /// Queries one lookup sends, at most.
    pub max_queries_per_lookup: usize,
    /// Peers one lookup remembers to report each only once.
    pub max_peers_per_lookup: usize,
    /// A lookup still running after this is finished with what it has.
    pub lookup_timeout: Duration,
    /// Peers listed in one `get_peers` answer (50 keep it under 1500 bytes).
    pub max_values_per_reply: usize,
    /// BEP 43 read-only: send `ro=1`, answer no query, and so stay out of
    /// other nodes' tables (for a node that cannot receive unsolicited
    /// datagrams, or that does not want to serve).
    pub read_only: bool,
    /// Nodes to bootstrap from (the runtime resolves `--dht-bootstrap
    /// HOST:PORT`); also used whenever the table runs dry.
    pub bootstrap: Vec<SocketAddr>,
    /// BEP 42: ignore nodes whose id does not match their IP (private and
    /// loopback addresses exempt). Off by default, like libtorrent: many
    /// nodes do not comply.
    pub enforce_node_id: bool,
    /// How often the `announce_peer` token secret changes.
    pub token_rotation: Duration,
    /// A bucket nothing touched for this long is refreshed.
    pub bucket_refresh: Duration,
    /// Client version sent as `v` (BEP 5: two letters and two bytes).
    pub version: Option<[u8; 4]>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            table: TableConfig::default(),
            store: StoreConfig::default(),
            alpha: 3,
            max_in_flight: 8,
            query_timeout: Duration::from_secs(4),
            slow_after: Duration::from_millis(1000),
            queries_per_sec: 100,
            query_burst: 10,
            max_queued: 1024,
            max_replies_queued: 256,
            max_lookups: 64,
            max_candidates: 64,
            max_queries_per_lookup: 128,
            max_peers_per_lookup: 4096,
            lookup_timeout: Duration::from_secs(60),
            max_values_per_reply: 50,
            read_only: false,
            bootstrap: Vec::new(),
            enforce_node_id: false,
            token_rotation: Duration::from_secs(5 * 60),
            bucket_refresh: Duration::from_secs(15 * 60),
            version: Some(*b"WR\x00\x01"),
        }
    }
}

/// What the node reports to the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Peers found by a `get_peers` or `announce` lookup, reported as they
    /// arrive (each peer once per lookup, as long as the lookup remembers).
    Peers {
        /// The lookup.
        lookup: LookupId,
        /// The torrent.
        info_hash: InfoHash,
        /// New peers.
        peers: Vec<SocketAddr>,
    },
    /// A lookup finished (for `announce`, before the announces go out).
    LookupDone {
        /// The lookup.
        lookup: LookupId,
        /// Its target.
        target: Id,
        /// What it was.
        kind: LookupKind,
        /// Its figures, including the closest nodes that answered.
        stats: LookupStats,
    },
    /// The `announce_peer` queries of an `announce` were answered or
    /// timed out.
    Announced {
        /// The lookup.
        lookup: LookupId,
        /// The torrent.
        info_hash: InfoHash,
        /// Nodes asked to store us.
        sent: usize,
        /// Nodes that confirmed.
        acked: usize,
    },
    /// A bootstrap (our own id looked up) finished.
    Bootstrapped {
        /// Nodes in the table afterwards.
        nodes: usize,
    },
    /// Several nodes agree on our external IP address (BEP 42 `ip`); a
    /// runtime may pick a BEP 42 id for it at its next start.
    ExternalAddress(IpAddr),
}

/// Why a command could not start a lookup.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// `Config::max_lookups` lookups are already running.
    #[error("{0} DHT lookups already running")]
    TooManyLookups(usize),
    /// A port of 0 to announce without `implied_port`.
    #[error("cannot announce port 0")]
    BadPort,
}

/// Counters and sizes, for the runtime's status and for memory checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Nodes in the routing table.
    pub nodes: usize,
    /// Of which good.
    pub good_nodes: usize,
    /// Nodes in replacement caches.
    pub replacements: usize,
    /// Buckets.
    pub buckets: usize,
    /// Lookups running (user and internal).
    pub lookups: usize,
    /// Candidates held by all lookups.
    pub lookup_candidates: usize,
    /// Candidates held by the largest lookup.
    pub largest_lookup: usize,
    /// Transactions waiting for an answer (or for the rate limit).
    pub transactions: usize,
    /// Queries waiting for the rate limit.
    pub queued: usize,
    /// Datagrams waiting for `poll_transmit`.
    pub ready: usize,
    /// Peers stored for others.
    pub stored_peers: usize,
    /// Info-hashes stored for others.
    pub stored_hashes: usize,
    /// Queries sent.
    pub queries_sent: u64,
    /// Queries answered.
    pub queries_answered: u64,
    /// Queries received.
    pub queries_received: u64,
    /// Datagrams that did not decode.
    pub malformed: u64,
    /// Answers matching no transaction, or from the wrong address.
    pub unexpected: u64,
    /// Queries that timed out.
    pub timeouts: u64,
    /// Answers dropped because the reply queue was full.
    pub replies_dropped: u64,
    /// `announce_peer` refused for a bad token.
    pub bad_tokens: u64,
}
