//! 160-bit identifiers: node ids and info-hashes, XOR distance, and the
//! BEP 42 rule that ties a node id to its IP address.

use std::fmt;
use std::net::IpAddr;

use crc::{CRC_32_ISCSI, Crc};

/// A 160-bit identifier: a DHT node id or a torrent's info-hash (they live
/// in the same space, which is the point of Kademlia).
///
/// Ordering is numeric (big-endian bytes), so ordering distances orders
/// nodes by closeness.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Id(pub [u8; 20]);

/// A node id.
pub type NodeId = Id;
/// A torrent's info-hash.
pub type InfoHash = Id;

impl Id {
    /// Length in bytes.
    pub const LEN: usize = 20;
    /// Length in bits.
    pub const BITS: usize = 160;

    /// An id from a 20-byte slice (`None` for any other length).
    pub fn from_slice(b: &[u8]) -> Option<Id> {
        <[u8; 20]>::try_from(b).ok().map(Id)
    }

    /// A uniformly random id drawn from `rng`.
    pub fn random(rng: &mut fastrand::Rng) -> Id {
        let mut b = [0u8; 20];
        rng.fill(&mut b);
        Id(b)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// XOR distance to `other`.
    pub fn distance(&self, other: &Id) -> Id {
        let mut d = [0u8; 20];
        for (i, b) in d.iter_mut().enumerate() {
            *b = self.0[i] ^ other.0[i];
        }
        Id(d)
    }

    /// Number of leading zero bits (160 for the zero id). Applied to a
    /// distance, this is the length of the common prefix of two ids.
    pub fn leading_zeros(&self) -> usize {
        for (i, b) in self.0.iter().enumerate() {
            if *b != 0 {
                return i * 8 + b.leading_zeros() as usize;
            }
        }
        Self::BITS
    }

    /// Length of the prefix this id shares with `other`, in bits.
    pub fn common_prefix(&self, other: &Id) -> usize {
        self.distance(other).leading_zeros()
    }

    /// A random id that shares exactly `prefix` leading bits with `self`
    /// (bit `prefix` differs, the rest is random). `prefix >= 160` gives
    /// `self`. Used to refresh a bucket: the bucket at depth `d` holds the
    /// ids sharing exactly `d` bits with our own.
    pub fn random_with_prefix(&self, prefix: usize, rng: &mut fastrand::Rng) -> Id {
        if prefix >= Self::BITS {
            return *self;
        }
        let mut out = Id::random(rng).0;
        let whole = prefix / 8;
        out[..whole].copy_from_slice(&self.0[..whole]);
        let bit = prefix % 8;
        // Keep the `bit` high bits of byte `whole` from self, flip the next.
        let keep: u8 = if bit == 0 { 0 } else { 0xffu8 << (8 - bit) };
        let flip: u8 = 0x80 >> bit;
        let mine = self.0[whole];
        out[whole] = (mine & keep) | (!mine & flip) | (out[whole] & !(keep | flip));
        Id(out)
    }

    /// Whether this id is valid for `ip` under BEP 42: its first 21 bits
    /// match `crc32c` of the masked address and the random `r` kept in the
    /// last byte. Addresses in private and loopback ranges are exempt
    /// ([`bep42_exempt`]) and always valid.
    pub fn is_valid_for(&self, ip: IpAddr) -> bool {
        if bep42_exempt(ip) {
            return true;
        }
        let prefix = bep42_prefix(ip, self.0[19]);
        self.0[0] == (prefix >> 24) as u8
            && self.0[1] == (prefix >> 16) as u8
            && (self.0[2] & 0xf8) == ((prefix >> 8) as u8 & 0xf8)
    }

    /// A BEP 42 id for `ip`: the first 21 bits from `crc32c` of the masked
    /// address and `r = rng`'s choice, the middle random, the last byte
    /// holding `r`. A node should use one once it learns its external
    /// address (see `Event::ExternalAddress`).
    pub fn bep42_for(ip: IpAddr, rng: &mut fastrand::Rng) -> Id {
        let mut id = Id::random(rng);
        let r = id.0[19];
        let prefix = bep42_prefix(ip, r);
        id.0[0] = (prefix >> 24) as u8;
        id.0[1] = (prefix >> 16) as u8;
        id.0[2] = ((prefix >> 8) as u8 & 0xf8) | (id.0[2] & 0x07);
        id
    }
}

/// Addresses BEP 42 exempts from the id rule (a node behind them cannot
/// know an address others would check): 10/8, 172.16/12, 192.168/16,
/// 169.254/16, 127/8, and IPv6 loopback, link-local and unique-local.
pub fn bep42_exempt(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4.is_loopback() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback() || (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xfe00) == 0xfc00
        }
    }
}

/// `crc32c((ip & mask) | (r << shift))` over the big-endian masked address
/// (4 bytes for IPv4, the high 8 bytes for IPv6).
fn bep42_prefix(ip: IpAddr, r: u8) -> u32 {
    static CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);
    let r = u64::from(r & 0x07);
    match ip {
        IpAddr::V4(v4) => {
            let v = (u32::from(v4) & 0x030f_3fff) | ((r as u32) << 29);
            CRC32C.checksum(&v.to_be_bytes())
        }
        IpAddr::V6(v6) => {
            let high = (u128::from(v6) >> 64) as u64;
            let v = (high & 0x0103_070f_1f3f_7fff) | (r << 61);
            CRC32C.checksum(&v.to_be_bytes())
        }
    }
}

impl From<[u8; 20]> for Id {
    fn from(b: [u8; 20]) -> Self {
        Id(b)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({self})")
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_id(s: &str) -> Id {
        let mut b = [0u8; 20];
        for (i, c) in b.iter_mut().enumerate() {
            *c = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).unwrap();
        }
        Id(b)
    }

    #[test]
    fn distance_and_prefix() {
        let a = Id([0u8; 20]);
        let mut b = [0u8; 20];
        b[2] = 0x10;
        let b = Id(b);
        assert_eq!(a.common_prefix(&b), 19);
        assert_eq!(a.common_prefix(&a), 160);
        assert_eq!(a.distance(&b), b);
        assert!(a.distance(&b) < Id([0xff; 20]));
    }

    #[test]
    fn random_with_prefix_shares_exactly() {
        let mut rng = fastrand::Rng::with_seed(7);
        let me = Id::random(&mut rng);
        for p in 0..160 {
            let x = me.random_with_prefix(p, &mut rng);
            assert_eq!(me.common_prefix(&x), p, "prefix {p}");
        }
        assert_eq!(me.random_with_prefix(160, &mut rng), me);
    }

    /// The examples of BEP 42's table.
    #[test]
    fn bep42_vectors() {
        let cases = [
            ("124.31.75.21", "5fbfbff10c5d6a4ec8a88e4c6ab4c28b95eee401"),
            ("21.75.31.124", "5a3ce9c14e7a08645677bbd1cfe7d8f956d53256"),
            ("65.23.51.170", "a5d43220bc8f112a3d426c84764f8c2a1150e616"),
            ("84.124.73.14", "1b0321dd1bb1fe518101ceef99462b947a01ff41"),
            ("43.213.53.83", "e56f6cbf5b7c4be0237986d5243b87aa6d51305a"),
        ];
        for (ip, id) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            let id = hex_id(id);
            assert!(id.is_valid_for(ip), "{ip} {id}");
            let mut bad = id;
            bad.0[0] ^= 0x01;
            assert!(!bad.is_valid_for(ip), "{ip} altered");
        }
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..100 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(rng.u32(..)));
            let id = Id::bep42_for(ip, &mut rng);
            assert!(id.is_valid_for(ip));
        }
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert!(Id::bep42_for(v6, &mut rng).is_valid_for(v6));
        assert!(Id([0; 20]).is_valid_for("192.168.1.1".parse().unwrap()));
        assert!(Id([0; 20]).is_valid_for("127.0.0.5".parse().unwrap()));
    }
}
