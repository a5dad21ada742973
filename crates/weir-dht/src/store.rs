//! Peers announced to us (`announce_peer`), kept for `get_peers` answers.
//!
//! Memory is bounded whatever arrives: at most `max_per_hash` peers per
//! info-hash, `max_hashes` info-hashes and `max_total` peers in all. Each
//! entry expires `ttl` (30 minutes) after its last announce. When a bound
//! is hit the oldest entry gives way (the one announced longest ago), so a
//! flood of announces rotates through the store instead of locking real
//! peers out for the whole TTL.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::id::Id;

/// Peer store bounds.
#[derive(Clone, Copy, Debug)]
pub struct StoreConfig {
    /// Peers kept per info-hash.
    pub max_per_hash: usize,
    /// Info-hashes kept.
    pub max_hashes: usize,
    /// Peers kept in all.
    pub max_total: usize,
    /// How long an announce is kept (30 minutes).
    pub ttl: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            max_per_hash: 200,
            max_hashes: 2_000,
            max_total: 20_000,
            ttl: Duration::from_secs(30 * 60),
        }
    }
}

/// The peer store.
#[derive(Clone, Debug)]
pub(crate) struct PeerStore {
    cfg: StoreConfig,
    swarms: BTreeMap<Id, BTreeMap<SocketAddr, Instant>>,
    by_expiry: BTreeSet<(Instant, Id, SocketAddr)>,
}

impl PeerStore {
    pub(crate) fn new(cfg: StoreConfig) -> Self {
        Self {
            cfg,
            swarms: BTreeMap::new(),
            by_expiry: BTreeSet::new(),
        }
    }

    /// Peers stored in all.
    pub(crate) fn len(&self) -> usize {
        self.by_expiry.len()
    }

    /// Info-hashes stored.
    pub(crate) fn hashes(&self) -> usize {
        self.swarms.len()
    }

    fn remove(&mut self, expires: Instant, ih: Id, peer: SocketAddr) {
        self.by_expiry.remove(&(expires, ih, peer));
        if let Some(s) = self.swarms.get_mut(&ih) {
            s.remove(&peer);
            if s.is_empty() {
                self.swarms.remove(&ih);
            }
        }
    }

    fn evict_oldest(&mut self) {
        if let Some(&(t, ih, p)) = self.by_expiry.iter().next() {
            self.remove(t, ih, p);
        }
    }

    /// Records that `peer` is in the swarm of `ih`.
    pub(crate) fn announce(&mut self, ih: Id, peer: SocketAddr, now: Instant) {
        let expires = now + self.cfg.ttl;
        if let Some(old) = self.swarms.get(&ih).and_then(|s| s.get(&peer)).copied() {
            self.by_expiry.remove(&(old, ih, peer));
            self.by_expiry.insert((expires, ih, peer));
            if let Some(s) = self.swarms.get_mut(&ih) {
                s.insert(peer, expires);
            }
            return;
        }
        if let Some(s) = self.swarms.get(&ih) {
            if s.len() >= self.cfg.max_per_hash {
                if let Some((&p, &t)) = s.iter().min_by_key(|(_, t)| **t) {
                    self.remove(t, ih, p);
                }
            }
        } else {
            while self.swarms.len() >= self.cfg.max_hashes && !self.by_expiry.is_empty() {
                // Drop the whole swarm holding the oldest entry.
                let Some(&(_, victim, _)) = self.by_expiry.iter().next() else {
                    break;
                };
                if let Some(s) = self.swarms.remove(&victim) {
                    for (p, t) in s {
                        self.by_expiry.remove(&(t, victim, p));
                    }
                }
            }
        }
        while self.by_expiry.len() >= self.cfg.max_total {
            self.evict_oldest();
        }
        if self.cfg.max_per_hash == 0 || self.cfg.max_hashes == 0 || self.cfg.max_total == 0 {
            return;
        }
        self.swarms.entry(ih).or_default().insert(peer, expires);
        self.by_expiry.insert((expires, ih, peer));
    }

    /// Drops entries that expired by `now`.
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some(&(t, ih, p)) = self.by_expiry.iter().next() {
            if t > now {
                break;
            }
            self.remove(t, ih, p);
        }
    }

    /// Up to `n` peers of `ih` (a random sample when there are more).
    pub(crate) fn peers(&self, ih: &Id, n: usize, rng: &mut fastrand::Rng) -> Vec<SocketAddr> {
        let Some(s) = self.swarms.get(ih) else {
            return Vec::new();
        };
        let mut all: Vec<SocketAddr> = s.keys().copied().collect();
        if all.len() > n {
            rng.shuffle(&mut all);
            all.truncate(n);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn peer(i: u32) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::from(i)), 6881)
    }

    #[test]
    fn expire_after_ttl_and_refresh() {
        let t0 = Instant::now(); // test-epoch
        let mut s = PeerStore::new(StoreConfig::default());
        let ih = Id([1; 20]);
        s.announce(ih, peer(1), t0);
        s.announce(ih, peer(2), t0 + Duration::from_secs(600));
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(s.peers(&ih, 10, &mut rng).len(), 2);
        s.expire(t0 + Duration::from_secs(30 * 60));
        assert_eq!(s.peers(&ih, 10, &mut rng), vec![peer(2)]);
        // A re-announce pushes the expiry back.
        s.announce(ih, peer(2), t0 + Duration::from_secs(35 * 60));
        s.expire(t0 + Duration::from_secs(41 * 60));
        assert_eq!(s.len(), 1);
        s.expire(t0 + Duration::from_secs(65 * 60));
        assert_eq!((s.len(), s.hashes()), (0, 0));
    }

    /// A flood of announces for many hashes and peers never grows the
    /// store past its bounds, and the newest announces are kept.
    #[test]
    fn bounded_under_flood() {
        let t0 = Instant::now(); // test-epoch
        let cfg = StoreConfig {
            max_per_hash: 50,
            max_hashes: 100,
            max_total: 1_000,
            ttl: Duration::from_secs(1800),
        };
        let mut s = PeerStore::new(cfg);
        let mut rng = fastrand::Rng::with_seed(2);
        for i in 0..200_000u32 {
            let ih = Id([(i % 300) as u8; 20]);
            s.announce(ih, peer(i), t0 + Duration::from_millis(u64::from(i)));
            assert!(s.len() <= 1_000);
            assert!(s.hashes() <= 100);
        }
        let ih = Id([(199_999u32 % 300) as u8; 20]);
        assert!(s.peers(&ih, 500, &mut rng).contains(&peer(199_999)));
        for s in s.swarms.values() {
            assert!(s.len() <= 50);
        }
        // One hash flooded with peers: at most 50 of them, the newest.
        let mut s = PeerStore::new(cfg);
        let one = Id([9; 20]);
        for i in 0..10_000u32 {
            s.announce(one, peer(i), t0 + Duration::from_millis(u64::from(i)));
        }
        let got = s.peers(&one, 100, &mut rng);
        assert_eq!(got.len(), 50);
        assert!(got.iter().all(|p| *p >= peer(9_950)));
        assert!(s.peers(&one, 10, &mut rng).len() == 10);
    }
}
