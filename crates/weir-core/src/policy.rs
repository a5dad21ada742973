//! The network policy: an allow-list of address ranges.
//!
//! weir checks every address against the policy before it opens a socket to
//! it, accepts a connection from it, or sends a datagram to it; the runtime
//! layer is the only place sockets are made and it calls [`NetPolicy::check`]
//! there. Tests and benches set the policy to loopback.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use ipnet::IpNet;

/// An allow-list of IP ranges. An empty list allows nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetPolicy {
    /// Shared, not copied: every transfer and peer book holds the policy,
    /// and a clone is then a count, not an allocation.
    allow: Arc<[IpNet]>,
}

/// An address the policy refused, with the list it was checked against.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("network policy refuses {addr} (allowed: {allowed})")]
pub struct Refused {
    /// The refused address.
    pub addr: IpAddr,
    /// The allow-list, as given.
    pub allowed: String,
}

/// A malformed policy specification.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad address range {0:?}: expected a CIDR such as 127.0.0.0/8 or ::1, or `any`")]
pub struct BadPolicy(pub String);

impl NetPolicy {
    /// Every address (the default for a user's own runs).
    pub fn allow_all() -> Self {
        Self {
            allow: Arc::new([
                IpNet::from_str("0.0.0.0/0").expect("valid literal"),
                IpNet::from_str("::/0").expect("valid literal"),
            ]),
        }
    }

    /// Loopback only: 127.0.0.0/8 and ::1. What tests, benches and the demo use.
    pub fn loopback() -> Self {
        Self {
            allow: Arc::new([
                IpNet::from_str("127.0.0.0/8").expect("valid literal"),
                IpNet::from_str("::1/128").expect("valid literal"),
            ]),
        }
    }

    /// A policy from explicit ranges.
    pub fn from_ranges(allow: Vec<IpNet>) -> Self {
        Self {
            allow: allow.into(),
        }
    }

    /// Parses a comma-separated list of CIDRs or bare addresses; `any` means
    /// every address and `loopback` means 127.0.0.0/8 and ::1.
    pub fn parse(spec: &str) -> Result<Self, BadPolicy> {
        let mut allow = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "any" => allow.extend_from_slice(&Self::allow_all().allow),
                "loopback" => allow.extend_from_slice(&Self::loopback().allow),
                _ => {
                    let net = IpNet::from_str(part)
                        .or_else(|_| IpAddr::from_str(part).map(IpNet::from))
                        .map_err(|_| BadPolicy(part.to_string()))?;
                    allow.push(net);
                }
            }
        }
        if allow.is_empty() {
            return Err(BadPolicy(spec.to_string()));
        }
        Ok(Self {
            allow: allow.into(),
        })
    }

    /// Whether `ip` is inside one of the allowed ranges. IPv4-mapped IPv6
    /// addresses are checked as the IPv4 address they carry.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.allow.iter().any(|n| n.contains(&ip))
    }

    /// `Ok` if the policy allows `addr`, otherwise the refusal to log and return.
    pub fn check(&self, addr: SocketAddr) -> Result<(), Refused> {
        if self.allows(addr.ip()) {
            Ok(())
        } else {
            Err(Refused {
                addr: addr.ip(),
                allowed: self.to_string(),
            })
        }
    }

    /// Whether weir may resolve host names. Resolving sends a DNS query to
    /// whatever resolver the system uses, which a loopback-only policy must not
    /// do; only a policy that allows every address permits it.
    pub fn allows_name_resolution(&self) -> bool {
        let all = Self::allow_all();
        all.allow.iter().all(|n| self.allow.contains(n))
    }
}

impl fmt::Display for NetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.allow.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every transfer holds the policy: a clone shares the list.
    #[test]
    fn a_clone_shares_the_list() {
        let p = NetPolicy::parse("127.0.0.1,10.0.0.0/8").unwrap();
        let q = p.clone();
        assert!(Arc::ptr_eq(&p.allow, &q.allow));
        assert_eq!(p, q);
    }

    #[test]
    fn loopback_allows_only_loopback() {
        let p = NetPolicy::loopback();
        assert!(p.check("127.0.0.1:80".parse().unwrap()).is_ok());
        assert!(p.check("127.9.9.9:80".parse().unwrap()).is_ok());
        assert!(p.check("[::1]:80".parse().unwrap()).is_ok());
        assert!(p.check("[::ffff:127.0.0.1]:80".parse().unwrap()).is_ok());
        assert!(p.check("10.0.0.1:80".parse().unwrap()).is_err());
        assert!(p.check("[::ffff:8.8.8.8]:53".parse().unwrap()).is_err());
        assert!(p.check("[2001:db8::1]:80".parse().unwrap()).is_err());
        assert!(!p.allows_name_resolution());
    }

    #[test]
    fn parse_lists_and_keywords() {
        let p = NetPolicy::parse("127.0.0.0/8, 10.1.2.3,::1").unwrap();
        assert!(p.allows("10.1.2.3".parse().unwrap()));
        assert!(!p.allows("10.1.2.4".parse().unwrap()));
        assert!(NetPolicy::parse("any").unwrap().allows_name_resolution());
        assert_eq!(NetPolicy::parse("loopback").unwrap(), NetPolicy::loopback());
        assert!(NetPolicy::parse("").is_err());
        assert!(NetPolicy::parse("127.0.0.0/33").is_err());
        assert!(NetPolicy::parse("example.com").is_err());
    }

    #[test]
    fn refusal_names_address_and_list() {
        let e = NetPolicy::loopback()
            .check("192.0.2.7:6881".parse().unwrap())
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("192.0.2.7") && msg.contains("127.0.0.0/8"),
            "{msg}"
        );
    }
}
