//! How a session runs.

use std::time::Duration;

use weir_core::peers::{BookConfig, ConnLimits};
use weir_core::picker::Order;
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;

/// Settings of one session (a CLI run, the daemon, a simulated node).
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Where connections may go and come from.
    pub policy: NetPolicy,
    /// Limits over every transfer together.
    pub global: ConnLimits,
    /// Limits of each transfer (the smaller room of the two is used).
    pub per_transfer: ConnLimits,
    /// Known-peer lists of each transfer.
    pub book: BookConfig,
    /// Our BitTorrent peer id.
    pub peer_id: [u8; 20],
    /// The port BitTorrent peers reach us on (`None`: not listening).
    pub bt_port: Option<u16>,
    /// The port eD2k clients reach us on (0: not listening).
    pub ed2k_port: u16,
    /// The addresses we listen on (a tracker or server handing us our own
    /// address back is not dialled; an unspecified address stands for
    /// loopback too).
    pub own_ips: Vec<std::net::IpAddr>,
    /// Our eD2k user hash (stable per installation).
    pub user_hash: Md4Hash,
    /// Nick shown to eD2k peers and servers.
    pub nick: String,
    /// Rarest first or sequential, for new transfers.
    pub order: Order,
    /// Seed of every random choice (tie-breaks, optimistic unchokes).
    pub seed: u64,
    /// Peer exchange (BEP 11) on torrents that are not private.
    pub pex: bool,
    /// The UDP port of the runtime's DHT node (`None`: no DHT): torrents
    /// that are not private advertise it to peers (BEP 5 `port`).
    pub dht_port: Option<u16>,
    /// Most requests in flight to one peer (`None`: the pipeline decides).
    pub max_requests: Option<u32>,
    /// How often the session looks for dials to start (besides after each
    /// input that may free room).
    pub dial_interval: Duration,
    /// How often an eD2k server is asked for sources of an incomplete file.
    pub source_reask: Duration,
    /// How long before a lost eD2k server is dialled again.
    pub server_retry: Duration,
    /// eD2k upload slots.
    pub ed2k_upload_slots: usize,
    /// Let eD2k peers send us zlib-packed parts.
    pub ed2k_accept_compressed: bool,
    /// An accepted eD2k connection whose hello has not come within this is
    /// closed (the runtime's handshake timeout, for the handshake the
    /// session sees).
    pub ed2k_hello_timeout: Duration,
}

impl SessionConfig {
    /// Defaults under `policy` with the given identities.
    pub fn new(policy: NetPolicy, peer_id: [u8; 20], user_hash: Md4Hash) -> Self {
        Self {
            policy,
            global: ConnLimits {
                max_peers: 200,
                max_half_open: 32,
                max_handshakes: 64,
            },
            per_transfer: ConnLimits::default(),
            book: BookConfig::default(),
            peer_id,
            bt_port: None,
            ed2k_port: 0,
            own_ips: Vec::new(),
            user_hash,
            nick: concat!("weir ", env!("CARGO_PKG_VERSION")).to_string(),
            order: Order::RarestFirst,
            seed: 0x5eed,
            pex: true,
            dht_port: None,
            max_requests: None,
            dial_interval: Duration::from_millis(500),
            source_reask: Duration::from_secs(20 * 60),
            server_retry: Duration::from_secs(30),
            ed2k_upload_slots: 8,
            ed2k_accept_compressed: true,
            ed2k_hello_timeout: Duration::from_secs(15),
        }
    }
}
