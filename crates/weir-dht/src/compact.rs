//! Compact encodings of addresses (BEP 5, BEP 32): peers as 6 bytes (IPv4
//! address, port) or 18 bytes (IPv6), nodes as a 20-byte id followed by
//! the peer form (26 or 38 bytes).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::id::Id;

/// A DHT node: its id and UDP address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeInfo {
    /// The node's id.
    pub id: Id,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// Length of a compact IPv4 peer.
pub const PEER_V4_LEN: usize = 6;
/// Length of a compact IPv6 peer.
pub const PEER_V6_LEN: usize = 18;
/// Length of a compact IPv4 node.
pub const NODE_V4_LEN: usize = 26;
/// Length of a compact IPv6 node.
pub const NODE_V6_LEN: usize = 38;

/// Appends `addr` in compact form (6 or 18 bytes).
pub fn write_addr(addr: &SocketAddr, out: &mut Vec<u8>) {
    match addr.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&addr.port().to_be_bytes());
}

/// Reads a compact address of 6 or 18 bytes (`None` for another length).
pub fn read_addr(b: &[u8]) -> Option<SocketAddr> {
    match b.len() {
        PEER_V4_LEN => {
            let ip = Ipv4Addr::new(b[0], b[1], b[2], b[3]);
            Some(SocketAddr::new(
                IpAddr::V4(ip),
                u16::from_be_bytes([b[4], b[5]]),
            ))
        }
        PEER_V6_LEN => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&b[..16]);
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(ip)),
                u16::from_be_bytes([b[16], b[17]]),
            ))
        }
        _ => None,
    }
}

/// Appends `node` in compact form (26 or 38 bytes).
pub fn write_node(node: &NodeInfo, out: &mut Vec<u8>) {
    out.extend_from_slice(&node.id.0);
    write_addr(&node.addr, out);
}

/// Reads up to `max` nodes of `entry` bytes each (26 or 38) from `b`.
/// Returns `None` if `b` is not a whole number of entries; entries past
/// `max` are not read (the second value says whether any were left).
pub fn read_nodes(b: &[u8], entry: usize, max: usize) -> Option<(Vec<NodeInfo>, bool)> {
    if b.len() % entry != 0 {
        return None;
    }
    let total = b.len() / entry;
    let mut out = Vec::with_capacity(total.min(max));
    for c in b.chunks_exact(entry).take(max) {
        let id = Id::from_slice(&c[..20])?;
        let addr = read_addr(&c[20..])?;
        out.push(NodeInfo { id, addr });
    }
    Some((out, total > max))
}

/// Whether `addr` can be a DHT node or a peer: a unicast address that is
/// not unspecified, with a non-zero port. Everything a stranger hands us
/// passes this before we send anything to it.
pub fn is_usable(addr: &SocketAddr) -> bool {
    if addr.port() == 0 {
        return false;
    }
    match addr.ip() {
        IpAddr::V4(ip) => !(ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast()),
        IpAddr::V6(ip) => !(ip.is_unspecified() || ip.is_multicast()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr_round_trip() {
        for a in ["1.2.3.4:6881", "[2001:db8::7]:51413"] {
            let a: SocketAddr = a.parse().unwrap();
            let mut out = Vec::new();
            write_addr(&a, &mut out);
            assert_eq!(read_addr(&out), Some(a));
        }
        assert_eq!(read_addr(&[0; 7]), None);
    }

    #[test]
    fn nodes_truncate_and_reject_ragged() {
        let mut b = Vec::new();
        for i in 0..10u8 {
            write_node(
                &NodeInfo {
                    id: Id([i; 20]),
                    addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(9, 9, 9, i)), 1000),
                },
                &mut b,
            );
        }
        let (n, more) = read_nodes(&b, NODE_V4_LEN, 4).unwrap();
        assert_eq!(n.len(), 4);
        assert!(more);
        assert_eq!(n[3].id, Id([3; 20]));
        let (n, more) = read_nodes(&b, NODE_V4_LEN, 100).unwrap();
        assert_eq!((n.len(), more), (10, false));
        assert!(read_nodes(&b[..b.len() - 1], NODE_V4_LEN, 100).is_none());
    }

    #[test]
    fn usable_addresses() {
        assert!(is_usable(&"1.2.3.4:1".parse().unwrap()));
        assert!(!is_usable(&"1.2.3.4:0".parse().unwrap()));
        assert!(!is_usable(&"0.0.0.0:10".parse().unwrap()));
        assert!(!is_usable(&"255.255.255.255:10".parse().unwrap()));
        assert!(!is_usable(&"224.0.0.1:10".parse().unwrap()));
        assert!(!is_usable(&"[::]:10".parse().unwrap()));
        assert!(!is_usable(&"[ff02::1]:10".parse().unwrap()));
    }
}
