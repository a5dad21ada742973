//! Whom a transfer knows and whom it dials next, sans-IO: known-peer lists
//! with a cap and pruning, per-peer dial state with exponential backoff,
//! bans by IP that outlive connections, and the limits on connections,
//! half-open dials and handshakes in progress.
//!
//! Protocol-neutral: a BitTorrent swarm's tracker answers and an eD2k
//! server's source lists go into the same [`PeerBook`]; the runtime asks it
//! for [`PeerBook::next_dials`] with the room [`ConnLimits::dial_room`]
//! leaves, and tells it what became of each dial
//! ([`PeerBook::dial_failed`], [`PeerBook::connected`],
//! [`PeerBook::disconnected`]). Time only comes in as `now` arguments and
//! every choice between equals is drawn from a seeded generator, so a seed
//! reproduces a run (the simulator can test dialling in virtual time).
//!
//! Every size a peer or a source controls is bounded:
//! - the book holds at most [`BookConfig::max_known`] addresses, and each
//!   [`Source`] at most its quota ([`BookConfig::quota`]); when full, the
//!   worst idle entry of that source goes first (most failures, then the
//!   oldest), and when nothing idle can go the newcomer is refused;
//! - one answer (a tracker response, a server's source list, later a PEX
//!   message or DHT reply) adds at most [`BookConfig::max_per_answer`]
//!   addresses ([`PeerBook::add_answer`]);
//! - peers a server asks us to connect to ([`Source::Callback`]) are at
//!   most [`BookConfig::max_callbacks`] at once, and each is dialled once;
//! - bans are at most [`BookConfig::max_bans`] addresses (the oldest goes).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::policy::NetPolicy;

/// Where a known address came from. Quotas and pruning are per source, so
/// one flooding source cannot push out the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// Given by the user (`--peer`, sources in a link): never pruned for
    /// failing, only backed off.
    Manual,
    /// A BitTorrent tracker's answer.
    Tracker,
    /// An eD2k server's source list.
    Server,
    /// Peer exchange.
    Pex,
    /// The DHT.
    Dht,
    /// Local Service Discovery (BEP 14): a peer on the local network
    /// announced the torrent.
    Lsd,
    /// A peer asked (through a server, or by wedging) that we connect to
    /// it: dialled once, as soon as the limits allow, even when we are not
    /// looking for data.
    Callback,
}

impl Source {
    /// Every source, in index order.
    pub const ALL: [Source; 7] = [
        Source::Manual,
        Source::Tracker,
        Source::Server,
        Source::Pex,
        Source::Dht,
        Source::Lsd,
        Source::Callback,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Caps, quotas and timings of a [`PeerBook`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookConfig {
    /// Most addresses known at once (all sources together).
    pub max_known: usize,
    /// Most addresses from one source (except [`Source::Manual`], bounded
    /// by `max_known` only, and [`Source::Callback`], by `max_callbacks`).
    pub max_per_source: usize,
    /// Most new addresses taken from one answer.
    pub max_per_answer: usize,
    /// Most pending callbacks.
    pub max_callbacks: usize,
    /// Wait after the first failed dial; doubles with each failure.
    pub retry_base: Duration,
    /// Longest wait between dials of one address.
    pub retry_max: Duration,
    /// Wait before dialling again a peer whose connection ended.
    pub reconnect_after: Duration,
    /// A connection shorter than this counts as a failure (a peer that
    /// accepts and drops us at once is not dialled every few seconds).
    pub short_lived: Duration,
    /// Failures after which an address is forgotten (not [`Source::Manual`]).
    pub max_failures: u32,
    /// Most banned addresses remembered.
    pub max_bans: usize,
}

impl Default for BookConfig {
    fn default() -> Self {
        Self {
            max_known: 2000,
            max_per_source: 1000,
            max_per_answer: 200,
            max_callbacks: 16,
            retry_base: Duration::from_secs(2),
            retry_max: Duration::from_secs(120),
            reconnect_after: Duration::from_secs(5),
            short_lived: Duration::from_secs(30),
            max_failures: 6,
            max_bans: 4096,
        }
    }
}

impl BookConfig {
    /// The most entries `source` may hold.
    pub fn quota(&self, source: Source) -> usize {
        match source {
            Source::Manual => self.max_known,
            Source::Callback => self.max_callbacks.min(self.max_known),
            _ => self.max_per_source.min(self.max_known),
        }
    }
}

/// Where one known address stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// Not connected, not being dialled.
    Idle,
    /// A dial (connect and handshake) is in progress.
    Dialing,
    /// Connected.
    Connected,
}

/// What [`PeerBook::add`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// A new entry.
    New,
    /// Known already (a callback for it is noted).
    Known,
    /// Its IP is banned.
    Banned,
    /// Outside the network policy.
    Outside,
    /// The book (or the source's quota) is full of entries that cannot go.
    Full,
}

#[derive(Clone, Debug)]
struct Entry {
    source: Source,
    state: PeerState,
    failures: u32,
    next_try: Instant,
    connected_at: Option<Instant>,
    /// A peer asked us to connect: dial it even when not seeking data.
    asked: bool,
    /// Insertion order (older entries are pruned first).
    seq: u64,
    /// Seeded tie-break among equally good candidates.
    tie: u64,
}

/// Counts of a book's entries by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BookCounts {
    /// Entries known.
    pub known: usize,
    /// Dials in progress.
    pub dialing: usize,
    /// Connected.
    pub connected: usize,
    /// Pending callbacks.
    pub asked: usize,
}

/// The known peers of one transfer, with their dial state and the bans.
#[derive(Clone, Debug)]
pub struct PeerBook {
    /// Shared by every book of a session (one copy, not one a transfer).
    cfg: std::sync::Arc<BookConfig>,
    policy: NetPolicy,
    peers: BTreeMap<SocketAddr, Entry>,
    /// Entries by source (`u32`: a quota is far below it).
    per_source: [u32; Source::ALL.len()],
    /// Made at the first ban: most books never hold one.
    bans: Option<Box<Bans>>,
    rng: fastrand::Rng,
    seq: u64,
    dialing: usize,
    connected: usize,
    asked: usize,
}

impl PeerBook {
    /// An empty book under `policy`, its tie-breaks drawn from `seed`.
    pub fn new(cfg: impl Into<std::sync::Arc<BookConfig>>, policy: NetPolicy, seed: u64) -> Self {
        let cfg = cfg.into();
        Self {
            cfg,
            policy,
            peers: BTreeMap::new(),
            per_source: [0; Source::ALL.len()],
            bans: None,
            rng: fastrand::Rng::with_seed(seed),
            seq: 0,
            dialing: 0,
            connected: 0,
            asked: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &BookConfig {
        &self.cfg
    }

    /// Learns `addr` from `source`. A [`Source::Callback`] for a known
    /// address marks it to be dialled at once.
    pub fn add(&mut self, addr: SocketAddr, source: Source, now: Instant) -> Added {
        let addr = canonical_addr(addr);
        if self.is_banned(addr.ip()) {
            return Added::Banned;
        }
        if !self.policy.allows(addr.ip()) {
            return Added::Outside;
        }
        if let Some(e) = self.peers.get_mut(&addr) {
            if source == Source::Callback && !e.asked {
                if self.asked >= self.cfg.max_callbacks {
                    return Added::Full;
                }
                e.asked = true;
                e.next_try = e.next_try.min(now);
                self.asked += 1;
            }
            return Added::Known;
        }
        if source == Source::Callback && self.asked >= self.cfg.max_callbacks {
            return Added::Full;
        }
        if self.count_from(source) >= self.cfg.quota(source) && !self.prune(Some(source)) {
            return Added::Full;
        }
        if self.peers.len() >= self.cfg.max_known && !self.prune(None) {
            return Added::Full;
        }
        self.seq += 1;
        let asked = source == Source::Callback;
        self.peers.insert(
            addr,
            Entry {
                source,
                state: PeerState::Idle,
                failures: 0,
                next_try: now,
                connected_at: None,
                asked,
                seq: self.seq,
                tie: self.rng.u64(..),
            },
        );
        self.per_source[source.index()] += 1;
        if asked {
            self.asked += 1;
        }
        Added::New
    }

    /// Learns the addresses of one answer from `source`: at most
    /// [`BookConfig::max_per_answer`] new ones are taken, the rest of the
    /// answer is ignored. Returns how many were new.
    pub fn add_answer<I>(&mut self, addrs: I, source: Source, now: Instant) -> usize
    where
        I: IntoIterator<Item = SocketAddr>,
    {
        let mut new = 0;
        for a in addrs {
            if new >= self.cfg.max_per_answer {
                break;
            }
            match self.add(a, source, now) {
                Added::New => new += 1,
                Added::Full => break,
                _ => {}
            }
        }
        new
    }

    /// Forgets `addr` (unless connected or being dialled).
    pub fn remove(&mut self, addr: SocketAddr) -> bool {
        let addr = canonical_addr(addr);
        match self.peers.get(&addr) {
            Some(e) if e.state == PeerState::Idle => {
                self.forget(addr);
                true
            }
            _ => false,
        }
    }

    /// Chooses up to `room` addresses to dial now and marks them dialling.
    /// `seeking`: the transfer wants data, so any known peer is worth a
    /// dial; otherwise only peers that asked us to connect, and peers the
    /// user gave ([`Source::Manual`]: a seed given `--peer` dials it, as
    /// libtorrent's `connect_peer` does), are dialled.
    /// Callbacks go first, then addresses that failed least, ties broken by
    /// the seeded generator.
    pub fn next_dials(&mut self, now: Instant, room: usize, seeking: bool) -> Vec<SocketAddr> {
        if room == 0 {
            return Vec::new();
        }
        let mut cands: Vec<(bool, u32, u64, SocketAddr)> = self
            .peers
            .iter()
            .filter(|(a, e)| {
                e.state == PeerState::Idle
                    && e.next_try <= now
                    && (seeking || e.asked || e.source == Source::Manual)
                    && !self.is_banned(a.ip())
            })
            .map(|(a, e)| (!e.asked, e.failures, e.tie, *a))
            .collect();
        cands.sort_unstable();
        cands.truncate(room);
        let out: Vec<SocketAddr> = cands.into_iter().map(|c| c.3).collect();
        for a in &out {
            let e = self.peers.get_mut(a).expect("candidate is known");
            e.state = PeerState::Dialing;
            self.dialing += 1;
        }
        out
    }

    /// The earliest time an idle entry becomes due (`None`: nothing to
    /// wait for). `seeking` as for [`PeerBook::next_dials`].
    pub fn next_due(&self, seeking: bool) -> Option<Instant> {
        self.peers
            .values()
            .filter(|e| {
                e.state == PeerState::Idle && (seeking || e.asked || e.source == Source::Manual)
            })
            .map(|e| e.next_try)
            .min()
    }

    /// A dial the runtime started on its own (not from
    /// [`PeerBook::next_dials`]): `addr` is learnt if new and marked
    /// dialling. Returns false if it must not be dialled (banned, outside
    /// the policy, already dialling or connected, or the book is full).
    pub fn dial_started(&mut self, addr: SocketAddr, source: Source, now: Instant) -> bool {
        let addr = canonical_addr(addr);
        match self.add(addr, source, now) {
            Added::New | Added::Known => {}
            _ => return false,
        }
        let e = self.peers.get_mut(&addr).expect("just added");
        if e.state != PeerState::Idle {
            return false;
        }
        e.state = PeerState::Dialing;
        self.dialing += 1;
        true
    }

    /// The dial of `addr` failed (refused, timed out, bad handshake): it
    /// waits [`BookConfig::retry_base`] doubled per failure, and is
    /// forgotten after [`BookConfig::max_failures`] (callbacks at once).
    pub fn dial_failed(&mut self, addr: SocketAddr, now: Instant) {
        let addr = canonical_addr(addr);
        let Some(e) = self
            .peers
            .get_mut(&addr)
            .filter(|e| e.state == PeerState::Dialing)
        else {
            return;
        };
        e.state = PeerState::Idle;
        self.dialing -= 1;
        self.failed(addr, now);
    }

    /// The dial of `addr` became a connection.
    pub fn connected(&mut self, addr: SocketAddr, now: Instant) {
        let addr = canonical_addr(addr);
        let Some(e) = self.peers.get_mut(&addr) else {
            return;
        };
        match e.state {
            PeerState::Dialing => self.dialing -= 1,
            PeerState::Connected => return,
            PeerState::Idle => {}
        }
        e.state = PeerState::Connected;
        e.connected_at = Some(now);
        if e.asked {
            e.asked = false;
            self.asked -= 1;
        }
        self.connected += 1;
    }

    /// The connection to `addr` ended. A connection that lasted less than
    /// [`BookConfig::short_lived`] counts as a failure; a longer one waits
    /// [`BookConfig::reconnect_after`]. A callback is forgotten, unless the
    /// peer asked again while it was connected.
    pub fn disconnected(&mut self, addr: SocketAddr, now: Instant) {
        let addr = canonical_addr(addr);
        let Some(e) = self.peers.get_mut(&addr) else {
            return;
        };
        match e.state {
            PeerState::Connected => self.connected -= 1,
            PeerState::Dialing => self.dialing -= 1,
            PeerState::Idle => return,
        }
        e.state = PeerState::Idle;
        let lasted = e
            .connected_at
            .take()
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        if self.bans.as_ref().is_some_and(|b| b.contains(addr.ip()))
            || (e.source == Source::Callback && !e.asked)
        {
            self.forget(addr);
        } else if e.asked {
            // Asked again while connected (a callback connection that
            // wedged in turn): the new request is dialled at once, not
            // lost with the old connection.
            e.failures = 0;
            e.next_try = now;
        } else if lasted < self.cfg.short_lived {
            self.failed(addr, now);
        } else {
            e.failures = 0;
            e.next_try = now + self.cfg.reconnect_after;
        }
    }

    /// Bans `ip` (v4-mapped addresses count as their IPv4 address): no
    /// entry of it is dialled, and new ones are refused. Returns whether it
    /// was new.
    pub fn ban(&mut self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let max = self.cfg.max_bans;
        let new = self
            .bans
            .get_or_insert_with(|| Box::new(Bans::new(max)))
            .insert(ip);
        let idle: Vec<SocketAddr> = self
            .peers
            .iter()
            .filter(|(a, e)| a.ip() == ip && e.state == PeerState::Idle)
            .map(|(a, _)| *a)
            .collect();
        for a in idle {
            self.forget(a);
        }
        new
    }

    /// Whether `ip` is banned.
    pub fn is_banned(&self, ip: IpAddr) -> bool {
        self.bans.as_ref().is_some_and(|b| b.contains(ip))
    }

    /// Where `addr` stands, if known.
    pub fn state(&self, addr: SocketAddr) -> Option<PeerState> {
        self.peers.get(&canonical_addr(addr)).map(|e| e.state)
    }

    /// Consecutive failures of `addr`, if known.
    pub fn failures(&self, addr: SocketAddr) -> Option<u32> {
        self.peers.get(&canonical_addr(addr)).map(|e| e.failures)
    }

    /// Entries by state.
    pub fn counts(&self) -> BookCounts {
        BookCounts {
            known: self.peers.len(),
            dialing: self.dialing,
            connected: self.connected,
            asked: self.asked,
        }
    }

    /// Entries from `source`.
    pub fn count_from(&self, source: Source) -> usize {
        self.per_source[source.index()] as usize
    }

    /// Banned addresses remembered.
    pub fn ban_count(&self) -> usize {
        self.bans.as_ref().map_or(0, |b| b.len())
    }

    fn failed(&mut self, addr: SocketAddr, now: Instant) {
        let (max_failures, base, max) = (
            self.cfg.max_failures,
            self.cfg.retry_base,
            self.cfg.retry_max,
        );
        let e = self.peers.get_mut(&addr).expect("caller checked");
        e.failures = e.failures.saturating_add(1);
        let forget = e.source == Source::Callback
            || (e.source != Source::Manual && e.failures >= max_failures);
        if forget {
            self.forget(addr);
            return;
        }
        let shift = (e.failures - 1).min(20);
        let wait = base.saturating_mul(1u32 << shift).min(max);
        e.next_try = now + wait;
    }

    fn forget(&mut self, addr: SocketAddr) {
        if let Some(e) = self.peers.remove(&addr) {
            self.per_source[e.source.index()] -= 1;
            match e.state {
                PeerState::Dialing => self.dialing -= 1,
                PeerState::Connected => self.connected -= 1,
                PeerState::Idle => {}
            }
            if e.asked {
                self.asked -= 1;
            }
        }
    }

    /// Drops the worst idle entry (of `source`, or of any source but
    /// [`Source::Manual`] and pending callbacks): most failures first,
    /// then the oldest. Returns whether one went.
    fn prune(&mut self, source: Option<Source>) -> bool {
        let victim = self
            .peers
            .iter()
            .filter(|(_, e)| {
                e.state == PeerState::Idle
                    && match source {
                        Some(s) => e.source == s,
                        None => e.source != Source::Manual && !e.asked,
                    }
            })
            .min_by_key(|(_, e)| (std::cmp::Reverse(e.failures), e.seq))
            .map(|(a, _)| *a);
        match victim {
            Some(a) => {
                self.forget(a);
                true
            }
            None => false,
        }
    }
}

/// Banned IP addresses, bounded: past the cap the oldest ban goes.
#[derive(Clone, Debug)]
pub struct Bans {
    max: usize,
    by_ip: BTreeMap<IpAddr, u64>,
    by_age: BTreeMap<u64, IpAddr>,
    seq: u64,
}

impl Bans {
    /// An empty list holding at most `max` addresses.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            by_ip: BTreeMap::new(),
            by_age: BTreeMap::new(),
            seq: 0,
        }
    }

    /// Bans `ip`; returns whether it was new.
    pub fn insert(&mut self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        if self.by_ip.contains_key(&ip) {
            return false;
        }
        if self.by_ip.len() >= self.max
            && let Some((_, old)) = self.by_age.pop_first()
        {
            self.by_ip.remove(&old);
        }
        self.seq += 1;
        self.by_ip.insert(ip, self.seq);
        self.by_age.insert(self.seq, ip);
        true
    }

    /// Whether `ip` is banned.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.by_ip.contains_key(&canonical(ip))
    }

    /// Addresses banned.
    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }
}

/// Limits on connections of one scope (the whole process, or one
/// transfer: a session checks both and takes the smaller room).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most peer connections (handshake done).
    pub max_peers: usize,
    /// Most dials in progress (connect and handshake), counted against
    /// `max_peers` too.
    pub max_half_open: usize,
    /// Most accepted connections still in their handshake.
    pub max_handshakes: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_peers: 50,
            max_half_open: 16,
            max_handshakes: 32,
        }
    }
}

/// Connections of one scope by stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounts {
    /// Peer connections (handshake done).
    pub peers: usize,
    /// Dials in progress.
    pub dialing: usize,
    /// Accepted connections in their handshake.
    pub handshaking: usize,
}

/// What to do with a connection that was just accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Start its handshake.
    Accept,
    /// Start its handshake and drop the oldest one in progress: a peer that
    /// connects and says nothing cannot hold the door shut (an honest
    /// handshake takes a round trip, an idle one its whole timeout).
    ReplaceOldest,
    /// Close it at once: the peer slots are full.
    Refuse,
}

impl ConnLimits {
    /// How many new dials may start: pending dials count against both the
    /// peer limit and the half-open limit.
    pub fn dial_room(&self, c: &ConnCounts) -> usize {
        let peers = self.max_peers.saturating_sub(c.peers + c.dialing);
        let half_open = self.max_half_open.saturating_sub(c.dialing);
        peers.min(half_open)
    }

    /// Whether a newly accepted connection may start its handshake.
    pub fn admit_incoming(&self, c: &ConnCounts) -> Admit {
        if c.peers >= self.max_peers {
            Admit::Refuse
        } else {
            self.admit_handshake(c)
        }
    }

    /// [`ConnLimits::admit_incoming`] without the peer limit: for a
    /// connection that may take the place of a peer once its handshake is
    /// done.
    pub fn admit_handshake(&self, c: &ConnCounts) -> Admit {
        if self.max_handshakes == 0 {
            Admit::Refuse
        } else if c.handshaking >= self.max_handshakes {
            Admit::ReplaceOldest
        } else {
            Admit::Accept
        }
    }

    /// Whether a connection whose handshake finished may become a peer.
    pub fn admit_peer(&self, c: &ConnCounts) -> bool {
        c.peers < self.max_peers
    }
}

/// IPv4-mapped IPv6 addresses are their IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// [`canonical`] for a socket address: what a dual-stack socket reports
/// for an IPv4 peer, as that peer's plain address.
pub fn canonical_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical(a.ip()), a.port())
}

#[cfg(test)]
mod tests;
