//! `announce_peer` tokens (BEP 5): a `get_peers` answer carries a token
//! tied to the querier's IP address, which it must present to announce.
//! A token is the first 8 bytes of SHA-1(secret, IP); the secret is
//! replaced every rotation interval (5 minutes) and tokens made with the
//! current or the previous secret are accepted, so a token lives 5 to 10
//! minutes and nobody can announce for an address it does not receive at.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use sha1::{Digest, Sha1};

/// Token length in bytes.
pub const TOKEN_LEN: usize = 8;

/// The token secrets.
#[derive(Clone, Debug)]
pub(crate) struct Tokens {
    current: [u8; 16],
    previous: [u8; 16],
    rotated: Instant,
    interval: Duration,
}

impl Tokens {
    pub(crate) fn new(rng: &mut fastrand::Rng, interval: Duration, now: Instant) -> Self {
        let mut current = [0u8; 16];
        let mut previous = [0u8; 16];
        rng.fill(&mut current);
        rng.fill(&mut previous);
        Self {
            current,
            previous,
            rotated: now,
            interval,
        }
    }

    fn make(secret: &[u8; 16], ip: IpAddr) -> [u8; TOKEN_LEN] {
        let mut h = Sha1::new();
        h.update(secret);
        match ip {
            IpAddr::V4(v4) => h.update(v4.octets()),
            IpAddr::V6(v6) => h.update(v6.octets()),
        }
        let d = h.finalize();
        let mut t = [0u8; TOKEN_LEN];
        t.copy_from_slice(&d[..TOKEN_LEN]);
        t
    }

    /// The token to hand to `ip` now.
    pub(crate) fn token_for(&self, ip: IpAddr) -> [u8; TOKEN_LEN] {
        Self::make(&self.current, ip)
    }

    /// Whether `token` is valid for `ip` (current or previous secret).
    pub(crate) fn check(&self, token: &[u8], ip: IpAddr) -> bool {
        token == Self::make(&self.current, ip) || token == Self::make(&self.previous, ip)
    }

    /// Rotates the secret if the interval has passed.
    pub(crate) fn maybe_rotate(&mut self, rng: &mut fastrand::Rng, now: Instant) {
        if now.saturating_duration_since(self.rotated) >= self.interval {
            self.previous = self.current;
            rng.fill(&mut self.current);
            self.rotated = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_rotate_and_bind_to_ip() {
        let t0 = Instant::now(); // test-epoch
        let mut rng = fastrand::Rng::with_seed(1);
        let five = Duration::from_secs(300);
        let mut t = Tokens::new(&mut rng, five, t0);
        let ip: IpAddr = "1.2.3.4".parse().unwrap();
        let other: IpAddr = "1.2.3.5".parse().unwrap();
        let tok = t.token_for(ip);
        assert!(t.check(&tok, ip));
        assert!(!t.check(&tok, other));
        assert!(!t.check(&tok[..4], ip));
        t.maybe_rotate(&mut rng, t0 + Duration::from_secs(299));
        assert!(t.check(&tok, ip));
        t.maybe_rotate(&mut rng, t0 + five);
        assert!(t.check(&tok, ip), "previous secret still accepted");
        assert_ne!(t.token_for(ip), tok);
        t.maybe_rotate(&mut rng, t0 + five * 2);
        assert!(!t.check(&tok, ip), "two rotations later it is refused");
    }
}
