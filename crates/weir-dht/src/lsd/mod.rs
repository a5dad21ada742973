//! Local Service Discovery (BEP 14): announcing our torrents to the local
//! network by multicast and learning the peers that announce theirs.
//!
//! [`Lsd`] is sans-IO like [`crate::Dht`]: the runtime owns the multicast
//! socket (joined to [`GROUP_V4`] and/or [`GROUP_V6`], only when `--lsd` is
//! given), passes each datagram received to [`Lsd::handle_datagram`], sends
//! what [`Lsd::poll_transmit`] returns to the group, and hands each
//! [`LsdEvent::Peer`] to the torrent's dialer (through its network policy).
//!
//! Rates, as BEP 14 asks: each torrent is announced when added and then
//! every 5 minutes, never more often; at most one announce goes out per
//! minute in all (several info-hashes share one datagram of at most 1400
//! bytes, and torrents take turns when there are more). Received announces
//! carrying our own cookie (our own multicast looped back) are ignored, so
//! are info-hashes we do not have; each source address may send a few
//! announces a minute (more are dropped), and a peer is reported at most
//! once per announce interval. Memory is bounded: torrents, remembered
//! peers and sources are capped.

mod codec;

pub use codec::{Announce, LsdError, MAX_COOKIE, MAX_INFOHASHES, MAX_MESSAGE};

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::id::InfoHash;

/// The IPv4 LSD group, 239.192.152.143:6771.
pub const GROUP_V4: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 192, 152, 143)), 6771);
/// The IPv6 LSD group, `[ff15::efc0:988f]:6771`.
pub const GROUP_V6: SocketAddr = SocketAddr::new(
    IpAddr::V6(Ipv6Addr::new(0xff15, 0, 0, 0, 0, 0, 0xefc0, 0x988f)),
    6771,
);

/// How long a new torrent waits for others to share its first announce.
const COALESCE: Duration = Duration::from_secs(1);

/// LSD settings.
#[derive(Clone, Debug)]
pub struct LsdConfig {
    /// Our BitTorrent listen port (the `Port` header).
    pub port: u16,
    /// The group announces go to ([`GROUP_V4`] or [`GROUP_V6`]).
    pub group: SocketAddr,
    /// How often each torrent is announced (5 minutes).
    pub announce_every: Duration,
    /// Least time between two announces in all (1 minute).
    pub min_send_interval: Duration,
    /// Torrents announced at most.
    pub max_torrents: usize,
    /// Announces accepted from one source address per minute.
    pub max_per_source_per_min: u32,
    /// Sources remembered for that limit.
    pub max_sources: usize,
    /// Peers remembered (to report each once per announce interval).
    pub max_peers_remembered: usize,
}

impl Default for LsdConfig {
    fn default() -> Self {
        Self {
            port: 6881,
            group: GROUP_V4,
            announce_every: Duration::from_secs(5 * 60),
            min_send_interval: Duration::from_secs(60),
            max_torrents: 10_000,
            max_per_source_per_min: 6,
            max_sources: 256,
            max_peers_remembered: 4096,
        }
    }
}

/// What LSD reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LsdEvent {
    /// A local peer announced a torrent we have.
    Peer {
        /// The torrent.
        info_hash: InfoHash,
        /// The peer's address (source IP of the announce, its `Port`).
        addr: SocketAddr,
    },
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LsdStats {
    /// Announces sent.
    pub sent: u64,
    /// Announces received and accepted.
    pub received: u64,
    /// Our own announces seen again (ignored).
    pub own: u64,
    /// Datagrams that were not announces.
    pub malformed: u64,
    /// Announces dropped by the per-source limit.
    pub rate_limited: u64,
    /// Peers reported.
    pub peers: u64,
}

/// The LSD state machine.
#[derive(Clone, Debug)]
pub struct Lsd {
    cfg: LsdConfig,
    cookie: String,
    /// Our torrents and when each was last announced.
    torrents: BTreeMap<InfoHash, Option<Instant>>,
    next_send: Instant,
    ready: VecDeque<(SocketAddr, Vec<u8>)>,
    events: VecDeque<LsdEvent>,
    /// (torrent, peer) -> when reported.
    reported: BTreeMap<(InfoHash, SocketAddr), Instant>,
    /// source IP -> (window start, announces in it).
    sources: BTreeMap<IpAddr, (Instant, u32)>,
    stats: LsdStats,
}

impl Lsd {
    /// A new LSD instance; its cookie comes from `seed`.
    pub fn new(cfg: LsdConfig, seed: u64, now: Instant) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let cookie = format!("weir{:08x}", rng.u32(..));
        Self {
            cfg,
            cookie,
            torrents: BTreeMap::new(),
            next_send: now,
            ready: VecDeque::new(),
            events: VecDeque::new(),
            reported: BTreeMap::new(),
            sources: BTreeMap::new(),
            stats: LsdStats::default(),
        }
    }

    /// Our cookie.
    pub fn cookie(&self) -> &str {
        &self.cookie
    }

    /// Counters.
    pub fn stats(&self) -> &LsdStats {
        &self.stats
    }

    /// Starts announcing `ih`: in a second (torrents added together share
    /// one announce), or at the next send slot. Returns false if
    /// `max_torrents` are already announced.
    pub fn add_torrent(&mut self, ih: InfoHash, now: Instant) -> bool {
        if !self.torrents.contains_key(&ih) && self.torrents.len() >= self.cfg.max_torrents {
            return false;
        }
        self.torrents.entry(ih).or_insert(None);
        if self.next_send <= now {
            self.next_send = now + COALESCE;
        }
        true
    }

    /// Stops announcing `ih` and reporting its peers.
    pub fn remove_torrent(&mut self, ih: &InfoHash) {
        self.torrents.remove(ih);
        self.reported.retain(|(t, _), _| t != ih);
    }

    /// Handles a datagram received on the LSD socket from `from`.
    pub fn handle_datagram(
        &mut self,
        from: SocketAddr,
        data: &[u8],
        now: Instant,
    ) -> Result<(), LsdError> {
        let a = match Announce::decode(data) {
            Ok(a) => a,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        if a.cookie.as_deref() == Some(self.cookie.as_str()) {
            self.stats.own += 1;
            return Ok(());
        }
        if !self.source_allows(from.ip(), now) {
            self.stats.rate_limited += 1;
            return Ok(());
        }
        self.stats.received += 1;
        let peer = SocketAddr::new(from.ip(), a.port);
        for ih in a.info_hashes {
            if !self.torrents.contains_key(&ih) {
                continue;
            }
            let key = (ih, peer);
            if let Some(t) = self.reported.get(&key) {
                if now.saturating_duration_since(*t) < self.cfg.announce_every {
                    continue;
                }
            }
            if self.reported.len() >= self.cfg.max_peers_remembered
                && !self.reported.contains_key(&key)
            {
                if let Some(oldest) = self
                    .reported
                    .iter()
                    .min_by_key(|(_, t)| **t)
                    .map(|(k, _)| *k)
                {
                    self.reported.remove(&oldest);
                }
            }
            self.reported.insert(key, now);
            self.stats.peers += 1;
            self.events.push_back(LsdEvent::Peer {
                info_hash: ih,
                addr: peer,
            });
        }
        Ok(())
    }

    fn source_allows(&mut self, ip: IpAddr, now: Instant) -> bool {
        let minute = Duration::from_secs(60);
        if !self.sources.contains_key(&ip) && self.sources.len() >= self.cfg.max_sources {
            // Forget the source whose window is oldest.
            if let Some(old) = self
                .sources
                .iter()
                .min_by_key(|(_, v)| v.0)
                .map(|(k, _)| *k)
            {
                self.sources.remove(&old);
            }
        }
        let e = self.sources.entry(ip).or_insert((now, 0));
        if now.saturating_duration_since(e.0) >= minute {
            *e = (now, 0);
        }
        e.1 += 1;
        e.1 <= self.cfg.max_per_source_per_min
    }

    /// Sends an announce if the send slot has come and a torrent is due.
    fn send_due(&mut self, now: Instant) {
        if now < self.next_send {
            return;
        }
        let host = self.cfg.group.to_string();
        let room = MAX_MESSAGE.saturating_sub(Announce::overhead(&host, Some(&self.cookie)));
        let fit = (room / Announce::PER_HASH).clamp(1, MAX_INFOHASHES);
        // Never announced first, then the longest ago.
        let mut due: Vec<(Option<Instant>, InfoHash)> = self
            .torrents
            .iter()
            .filter(|(_, last)| {
                last.is_none_or(|t| now.saturating_duration_since(t) >= self.cfg.announce_every)
            })
            .map(|(ih, last)| (*last, *ih))
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort();
        due.truncate(fit);
        for (_, ih) in &due {
            self.torrents.insert(*ih, Some(now));
        }
        let a = Announce {
            host,
            port: self.cfg.port,
            info_hashes: due.into_iter().map(|d| d.1).collect(),
            cookie: Some(self.cookie.clone()),
        };
        self.ready.push_back((self.cfg.group, a.encode()));
        self.stats.sent += 1;
        self.next_send = now + self.cfg.min_send_interval;
    }

    /// Handles the timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.send_due(now);
        let keep = self.cfg.announce_every;
        self.reported
            .retain(|_, t| now.saturating_duration_since(*t) < keep);
    }

    /// The next datagram to send: (the group, bytes).
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.ready.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<LsdEvent> {
        self.events.pop_front()
    }

    /// When [`Lsd::handle_timeout`] should be called next (`None` with no
    /// torrent).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next_due = self
            .torrents
            .values()
            .map(|last| last.map_or(self.next_send, |t| t + self.cfg.announce_every))
            .min()?;
        Some(next_due.max(self.next_send))
    }
}
