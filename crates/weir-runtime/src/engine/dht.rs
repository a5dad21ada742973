//! The engine's DHT node (BEP 5): the sans-IO [`weir_dht::Dht`] on the
//! engine's UDP socket ([`super::udp`]), driven by the driver task with
//! `now` and a seed drawn from the session's.
//!
//! - Every torrent that is not private is looked up once checked:
//!   `announce` (a `get_peers` lookup, then `announce_peer` to the closest
//!   nodes with our BitTorrent port) again every [`SEEDING_EVERY`] while
//!   seeding, [`DOWNLOADING_EVERY`] while downloading, and
//!   [`STARVED_EVERY`] while downloading with no peer. Peers found go into
//!   the session's peer book of that transfer (`Source::Dht`; the book
//!   checks the policy, the session's dial limits apply).
//! - A magnet before its metadata: [`super::EngineHandle::dht_peers`]
//!   watches an info-hash (a `get_peers` lookup again [`WATCH_EVERY`]
//!   after each ends) and hands the peers found to the caller until it
//!   drops the receiver.
//! - The node answers other nodes' queries (it serves as a DHT node).
//! - The routing table is read from [`DhtSettings::table`] at start and
//!   written there every [`SAVE_EVERY`] and at the stop.
//! - Every datagram out goes through the socket's policy check (a refused
//!   destination is counted, never sent).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use weir_core::peers::Source;
use weir_dht::{Config, Dht, Event, Id, LookupId, SavedTable};
use weir_session::{Phase, Proto, Session, TransferId};

use super::udp::{Datagram, Udp, UdpStats};

/// Re-announce a seeding torrent this often.
pub const SEEDING_EVERY: Duration = Duration::from_secs(15 * 60);
/// Look a downloading torrent up again this often.
pub const DOWNLOADING_EVERY: Duration = Duration::from_secs(5 * 60);
/// Look a downloading torrent with no peer up again this often.
pub const STARVED_EVERY: Duration = Duration::from_secs(15);
/// A watched info-hash (a magnet) is looked up again this long after its
/// last lookup ended.
pub const WATCH_EVERY: Duration = Duration::from_secs(3);
/// Info-hashes watched at once, at most (more are refused).
pub const MAX_WATCHES: usize = 64;
/// Peer lists a watcher may leave unread before more are dropped.
const WATCH_QUEUE: usize = 64;
/// The routing table is saved this often (and at the stop).
pub const SAVE_EVERY: Duration = Duration::from_secs(10 * 60);

/// The usual public DHT routers, used only when no `--dht-bootstrap` is
/// given and the network policy allows every address.
pub const DEFAULT_ROUTERS: [(&str, u16); 4] = [
    ("router.bittorrent.com", 6881),
    ("router.utorrent.com", 6881),
    ("dht.transmissionbt.com", 6881),
    ("dht.libtorrent.org", 25401),
];

/// How the engine runs its DHT node ([`super::EngineConfig::dht`]).
#[derive(Clone, Debug, Default)]
pub struct DhtSettings {
    /// Nodes to bootstrap from (`--dht-bootstrap`, resolved); also used
    /// whenever the table runs dry.
    pub bootstrap: Vec<SocketAddr>,
    /// Host names to resolve (under the policy, off the driver) and add as
    /// nodes: the public routers, for a policy that allows every address.
    pub routers: Vec<(String, u16)>,
    /// Where the routing table is kept (`None`: not kept).
    pub table: Option<PathBuf>,
    /// The UDP address (`None`: the BitTorrent listener's address and
    /// port, or any port if that one is taken for UDP).
    pub listen: Option<SocketAddr>,
    /// BEP 43 read-only: answer no query (stay out of others' tables).
    pub read_only: bool,
}

impl DhtSettings {
    /// Settings for a CLI or the daemon: `bootstrap` as given; with none
    /// and a policy that allows every address, [`DEFAULT_ROUTERS`]; with
    /// none under a narrower policy, no node at all (the DHT then only
    /// answers, and finds nothing until a node reaches it).
    pub fn new(
        bootstrap: Vec<SocketAddr>,
        policy: &weir_core::policy::NetPolicy,
        table: Option<PathBuf>,
    ) -> Self {
        let routers = if bootstrap.is_empty() && policy.allows_name_resolution() {
            DEFAULT_ROUTERS
                .iter()
                .map(|(h, p)| (h.to_string(), *p))
                .collect()
        } else {
            Vec::new()
        };
        Self {
            bootstrap,
            routers,
            table,
            listen: None,
            read_only: false,
        }
    }
}

/// What the DHT is doing ([`super::EngineHandle::dht_status`]).
#[derive(Clone, Debug, Default)]
pub struct DhtStatus {
    /// Our node id.
    pub id: [u8; 20],
    /// The UDP socket's figures.
    pub udp: UdpStats,
    /// The node's figures (table, lookups, queries, bounds).
    pub node: weir_dht::Stats,
    /// Torrents looked up and announced.
    pub torrents: usize,
    /// Info-hashes watched for magnets.
    pub watches: usize,
    /// Peers the DHT found (each once per lookup).
    pub peers_found: u64,
    /// `announce_peer` confirmations received.
    pub announces_acked: u64,
    /// Nodes taken from the saved table at start.
    pub loaded_nodes: usize,
}

/// Why a command to the DHT was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DhtError {
    /// The engine runs no DHT (`--no-dht`).
    #[error("the DHT is off")]
    Off,
    /// [`MAX_WATCHES`] info-hashes are watched already.
    #[error("{MAX_WATCHES} info-hashes are watched already")]
    TooManyWatches,
}

/// A torrent the DHT looks up.
#[derive(Debug)]
struct Tracked {
    info_hash: [u8; 20],
    next: Instant,
    lookup: Option<LookupId>,
}

/// An info-hash watched for a caller (a magnet before its metadata).
#[derive(Debug)]
struct Watch {
    info_hash: [u8; 20],
    tx: mpsc::Sender<Vec<SocketAddr>>,
    next: Instant,
    lookup: Option<LookupId>,
}

/// Whom a lookup is for.
#[derive(Clone, Copy, Debug)]
enum For {
    Torrent(TransferId),
    Watch(u64),
}

/// The DHT node, its socket and what it looks up for the session.
pub(crate) struct DhtGlue {
    node: Dht,
    udp: Udp,
    /// The BitTorrent port announced (`None`: not listening: looked up
    /// only).
    port: Option<u16>,
    table: Option<PathBuf>,
    torrents: BTreeMap<TransferId, Tracked>,
    watches: BTreeMap<u64, Watch>,
    next_watch: u64,
    lookups: BTreeMap<LookupId, For>,
    next_save: Instant,
    peers_found: u64,
    announces_acked: u64,
    loaded_nodes: usize,
    /// The table size last logged at info level.
    said_nodes: usize,
}

impl DhtGlue {
    /// Reads the saved table and starts the node on `udp`.
    pub(crate) async fn start(
        settings: &DhtSettings,
        policy: &weir_core::policy::NetPolicy,
        udp: Udp,
        port: Option<u16>,
        seed: u64,
    ) -> std::io::Result<DhtGlue> {
        let saved = match &settings.table {
            Some(p) => match tokio::fs::read(p).await {
                Ok(blob) => match SavedTable::decode(&blob) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        tracing::warn!("{}: {e}; starting the DHT cold", p.display());
                        None
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    tracing::warn!("{}: {e}; starting the DHT cold", p.display());
                    None
                }
            },
            None => None,
        };
        let now = Instant::now();
        let mut rng = fastrand::Rng::with_seed(seed);
        let id = saved
            .as_ref()
            .map_or_else(|| Id::random(&mut rng), |s| s.id);
        let cfg = Config {
            bootstrap: settings
                .bootstrap
                .iter()
                .copied()
                .filter(|a| policy.allows(a.ip()))
                .collect(),
            read_only: settings.read_only,
            ..Config::default()
        };
        let mut node = Dht::new(cfg, id, rng.u64(..), now);
        let loaded_nodes = saved.as_ref().map_or(0, |s| node.load_table(s, now));
        tracing::info!(
            "DHT: node {id} on UDP {} ({} bootstrap nodes, {loaded_nodes} saved nodes)",
            udp.local_addr(),
            settings.bootstrap.len()
        );
        let mut glue = DhtGlue {
            node,
            udp,
            port,
            table: settings.table.clone(),
            torrents: BTreeMap::new(),
            watches: BTreeMap::new(),
            next_watch: 0,
            lookups: BTreeMap::new(),
            next_save: now + SAVE_EVERY,
            peers_found: 0,
            announces_acked: 0,
            loaded_nodes,
            said_nodes: 0,
        };
        glue.flush_transmits();
        Ok(glue)
    }

    /// The socket's address.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.udp.local_addr()
    }

    /// The next batch of KRPC datagrams (never ends while the socket lives).
    pub(crate) async fn recv(&mut self) -> Option<Vec<Datagram>> {
        self.udp.recv().await
    }

    /// When [`DhtGlue::handle_timeout`] is due.
    pub(crate) fn poll_timeout(&self) -> Instant {
        let mut t = self.node.poll_timeout().unwrap_or(self.next_save);
        t = t.min(self.next_save);
        for x in self.torrents.values().filter(|x| x.lookup.is_none()) {
            t = t.min(x.next);
        }
        for w in self.watches.values().filter(|w| w.lookup.is_none()) {
            t = t.min(w.next);
        }
        t
    }

    /// Feeds received datagrams to the node.
    pub(crate) fn on_datagrams(&mut self, batch: Vec<Datagram>, session: &mut Session) {
        let now = Instant::now();
        for d in batch {
            self.node.handle_datagram(d.from, &d.data, now);
        }
        self.after(session, now);
    }

    /// Timers: the node's, the lookups due, the periodic save.
    pub(crate) fn handle_timeout(&mut self, session: &mut Session) {
        let now = Instant::now();
        self.node.handle_timeout(now);
        self.schedule(session, now);
        if now >= self.next_save {
            self.next_save = now + SAVE_EVERY;
            if let Some(p) = self.table.clone() {
                let blob = self.node.save_table();
                tokio::task::spawn_blocking(move || save(&p, &blob));
            }
        }
        self.after(session, now);
    }

    /// A torrent was checked: look it up and announce it from now on
    /// (private torrents never).
    pub(crate) fn add_torrent(&mut self, id: TransferId, session: &mut Session) {
        let Some(meta) = session.metainfo(id) else {
            return;
        };
        if meta.info.private || self.torrents.contains_key(&id) {
            return;
        }
        let now = Instant::now();
        self.torrents.insert(
            id,
            Tracked {
                info_hash: meta.info_hash,
                next: now,
                lookup: None,
            },
        );
        self.schedule(session, now);
        self.after(session, now);
    }

    /// Watches `info_hash` for a caller: peers found come on the returned
    /// receiver until it is dropped.
    pub(crate) fn watch(
        &mut self,
        info_hash: [u8; 20],
        session: &mut Session,
    ) -> Result<mpsc::Receiver<Vec<SocketAddr>>, DhtError> {
        self.watches.retain(|_, w| !w.tx.is_closed());
        if self.watches.len() >= MAX_WATCHES {
            return Err(DhtError::TooManyWatches);
        }
        let (tx, rx) = mpsc::channel(WATCH_QUEUE);
        let now = Instant::now();
        self.next_watch += 1;
        self.watches.insert(
            self.next_watch,
            Watch {
                info_hash,
                tx,
                next: now,
                lookup: None,
            },
        );
        self.schedule(session, now);
        self.after(session, now);
        Ok(rx)
    }

    /// Pings nodes and adds those that answer (resolved routers, a peer's
    /// DHT port).
    pub(crate) fn add_nodes(&mut self, nodes: &[SocketAddr], session: &mut Session) {
        let now = Instant::now();
        for a in nodes {
            self.node.add_node(*a, now);
        }
        self.after(session, now);
    }

    /// The figures now.
    pub(crate) fn status(&self) -> DhtStatus {
        DhtStatus {
            id: self.node.id().0,
            udp: self.udp.stats(),
            node: self.node.stats(),
            torrents: self.torrents.len(),
            watches: self.watches.len(),
            peers_found: self.peers_found,
            announces_acked: self.announces_acked,
            loaded_nodes: self.loaded_nodes,
        }
    }

    /// Saves the routing table (at the stop).
    pub(crate) async fn close(self) {
        if let Some(p) = self.table.clone() {
            let blob = self.node.save_table();
            let _ = tokio::task::spawn_blocking(move || save(&p, &blob)).await;
        }
    }

    /// Starts the lookups that are due.
    fn schedule(&mut self, session: &mut Session, now: Instant) {
        let due: Vec<TransferId> = self
            .torrents
            .iter()
            .filter(|(_, t)| t.lookup.is_none() && t.next <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(info) = session.info(id, now) else {
                self.torrents.remove(&id);
                continue;
            };
            let t = self.torrents.get_mut(&id).expect("listed above");
            if !matches!(info.phase, Phase::Downloading | Phase::Seeding) {
                t.next = now + STARVED_EVERY;
                continue;
            }
            let r = match self.port {
                Some(p) => self.node.announce(Id(t.info_hash), Some(p), now),
                None => self.node.get_peers(Id(t.info_hash), now),
            };
            match r {
                Ok(l) => {
                    t.lookup = Some(l);
                    self.lookups.insert(l, For::Torrent(id));
                }
                Err(e) => {
                    tracing::debug!("DHT: {e}; {id} waits");
                    t.next = now + STARVED_EVERY;
                }
            }
        }
        self.watches.retain(|_, w| !w.tx.is_closed());
        for (wid, w) in &mut self.watches {
            if w.lookup.is_some() || w.next > now {
                continue;
            }
            match self.node.get_peers(Id(w.info_hash), now) {
                Ok(l) => {
                    w.lookup = Some(l);
                    self.lookups.insert(l, For::Watch(*wid));
                }
                Err(e) => {
                    tracing::debug!("DHT: {e}; a watch waits");
                    w.next = now + WATCH_EVERY;
                }
            }
        }
    }

    /// Sends what the node queued and carries out its events.
    fn after(&mut self, session: &mut Session, now: Instant) {
        self.flush_transmits();
        while let Some(ev) = self.node.poll_event() {
            self.on_event(ev, session, now);
        }
        self.flush_transmits();
    }

    fn flush_transmits(&mut self) {
        while let Some((to, data)) = self.node.poll_transmit() {
            self.udp.send(to, data);
        }
    }

    fn on_event(&mut self, ev: Event, session: &mut Session, now: Instant) {
        match ev {
            Event::Peers { lookup, peers, .. } => {
                self.peers_found += peers.len() as u64;
                match self.lookups.get(&lookup) {
                    Some(For::Torrent(id)) => {
                        let n = session.add_peers(*id, Proto::Bt, &peers, Source::Dht, now);
                        tracing::debug!("DHT: {} peers for {id} ({n} new)", peers.len());
                    }
                    Some(For::Watch(w)) => {
                        let gone = self.watches.get(w).is_none_or(|w| {
                            matches!(
                                w.tx.try_send(peers),
                                Err(mpsc::error::TrySendError::Closed(_))
                            )
                        });
                        if gone {
                            self.watches.remove(w);
                            self.lookups.remove(&lookup);
                            self.node.cancel(lookup);
                        }
                    }
                    None => {}
                }
            }
            Event::LookupDone {
                lookup,
                kind,
                stats,
                ..
            } => {
                tracing::debug!(
                    "DHT: lookup {lookup:?} ({kind:?}) done: {} queries, {} answers, {} peers in {:.3} s",
                    stats.queries,
                    stats.responses,
                    stats.peers,
                    stats.elapsed.as_secs_f64()
                );
                // An announce ends at `Announced`; a get_peers here.
                if !matches!(kind, weir_dht::LookupKind::Announce { .. }) {
                    self.lookup_ended(lookup, session, now);
                }
            }
            Event::Announced {
                lookup,
                sent,
                acked,
                ..
            } => {
                self.announces_acked += acked as u64;
                tracing::debug!("DHT: announced to {acked} of {sent} nodes");
                self.lookup_ended(lookup, session, now);
            }
            Event::Bootstrapped { nodes } => {
                // Said when the table grows; a re-bootstrap of a table
                // that stays as small (every 10 s with no node) is quiet.
                if nodes > self.said_nodes {
                    tracing::info!("DHT: bootstrapped, {nodes} nodes in the table");
                    self.said_nodes = nodes;
                } else {
                    tracing::debug!("DHT: bootstrapped again, {nodes} nodes in the table");
                }
            }
            Event::ExternalAddress(ip) => {
                tracing::debug!("DHT: other nodes see us as {ip}");
            }
        }
    }

    fn lookup_ended(&mut self, lookup: LookupId, session: &mut Session, now: Instant) {
        match self.lookups.remove(&lookup) {
            Some(For::Torrent(id)) => {
                let Some(t) = self.torrents.get_mut(&id) else {
                    return;
                };
                t.lookup = None;
                t.next = now
                    + match session.info(id, now) {
                        Some(i) if i.phase == Phase::Downloading && i.peers == 0 => STARVED_EVERY,
                        Some(i) if i.phase == Phase::Downloading => DOWNLOADING_EVERY,
                        Some(_) => SEEDING_EVERY,
                        None => Duration::ZERO,
                    };
            }
            Some(For::Watch(w)) => {
                if let Some(w) = self.watches.get_mut(&w) {
                    w.lookup = None;
                    w.next = now + WATCH_EVERY;
                }
            }
            None => {}
        }
    }
}

/// Resolves the routers' names under the policy (off the driver: a slow
/// resolver never holds it up) and hands the addresses to the node.
pub(crate) fn resolve_routers(
    policy: &weir_core::policy::NetPolicy,
    routers: Vec<(String, u16)>,
    tx: mpsc::Sender<super::driver::Msg>,
) {
    if routers.is_empty() {
        return;
    }
    let policy = policy.clone();
    tokio::spawn(async move {
        let mut addrs = Vec::new();
        for (host, port) in routers {
            match crate::net::resolve(&policy, &host, port).await {
                Ok(a) => addrs.extend(a.into_iter().filter(SocketAddr::is_ipv4)),
                Err(e) => tracing::info!("DHT router {host}:{port}: {e}"),
            }
        }
        if !addrs.is_empty() {
            let _ = tx
                .send(super::driver::Msg::Command(super::Command::DhtAddNodes(
                    addrs,
                )))
                .await;
        }
    });
}

/// Writes the table aside and renames it over the old one (a torn file is
/// never read back as the table).
fn save(path: &std::path::Path, blob: &[u8]) {
    let tmp = path.with_extension("tmp");
    if let Err(e) = std::fs::write(&tmp, blob).and_then(|()| std::fs::rename(&tmp, path)) {
        tracing::warn!("saving the DHT table to {}: {e}", path.display());
        let _ = std::fs::remove_file(&tmp);
    }
}
