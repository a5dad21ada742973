//! Which transport carries a BitTorrent connection: TCP or uTP
//! (`--transports tcp,utp`, both by default).
//!
//! Outgoing, with both allowed, the way libtorrent does it: uTP first
//! (cheaper for the peer's network, and what uTP-only peers speak), TCP
//! as well once uTP has had [`HEAD_START`] without an answer or failed;
//! the first to connect wins and the other is dropped (one connection per
//! dial, never two). An address remembers what reached it last and is
//! tried that way first next time. The MSE attempts that follow (a new
//! connection each) use the transport that won. Incoming: both listeners
//! (the TCP one and the engine's UDP socket) accept, through the same
//! handshake routing.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use weir_core::policy::NetPolicy;

use crate::mse::MseStream;
use crate::utp::{Utp, UtpStream};

/// How long uTP is tried alone before TCP is tried too: Happy Eyeballs'
/// connection attempt delay (RFC 8305). A uTP peer within a 250 ms round
/// trip has answered by then; a TCP-only peer (rtorrent, aria2, most
/// seedboxes behind a TCP proxy) costs 250 ms, not the 1 s of uTP's first
/// SYN timeout (it was 1 s: `weir bench ramp` through a TCP-only link had
/// 0.0 MiB at 1 s and 10.2 at 2 s against plain TCP's 44.4 and 92.1). On
/// a longer path both are tried and the first to connect wins.
pub const HEAD_START: Duration = Duration::from_millis(250);
/// Addresses whose working transport is remembered, at most.
const MAX_REMEMBERED: usize = 4096;

/// One transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// TCP.
    Tcp,
    /// uTP over the engine's UDP socket.
    Utp,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::Utp => "utp",
        })
    }
}

/// The transports BitTorrent connections may use, both ways
/// ([`super::EngineConfig::transports`]). At least one is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transports {
    /// TCP dials and the TCP listener's connections.
    pub tcp: bool,
    /// uTP dials and incoming uTP connections.
    pub utp: bool,
}

impl Default for Transports {
    fn default() -> Self {
        Transports {
            tcp: true,
            utp: true,
        }
    }
}

impl fmt::Display for Transports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tcp, self.utp) {
            (true, true) => f.write_str("tcp,utp"),
            (true, false) => f.write_str("tcp"),
            _ => f.write_str("utp"),
        }
    }
}

/// Why a `--transports` list was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportsError {
    /// A name other than `tcp` or `utp`.
    #[error("unknown transport {0:?} (tcp, utp)")]
    Unknown(String),
    /// Nothing listed.
    #[error("no transport listed (tcp, utp, or tcp,utp)")]
    Empty,
}

impl FromStr for Transports {
    type Err = TransportsError;

    /// `tcp`, `utp`, or both separated by commas (any order).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut t = Transports {
            tcp: false,
            utp: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.to_ascii_lowercase().as_str() {
                "tcp" => t.tcp = true,
                "utp" => t.utp = true,
                _ => return Err(TransportsError::Unknown(part.to_string())),
            }
        }
        if !t.tcp && !t.utp {
            return Err(TransportsError::Empty);
        }
        Ok(t)
    }
}

/// A connected stream of either transport, before MSE.
pub(crate) enum Link {
    Tcp(TcpStream),
    Utp(UtpStream),
}

/// A BitTorrent connection after its handshakes, on either transport.
#[derive(Debug)]
pub(crate) enum PeerStream {
    Tcp(MseStream<TcpStream>),
    Utp(MseStream<UtpStream>),
}

impl From<MseStream<TcpStream>> for PeerStream {
    fn from(s: MseStream<TcpStream>) -> Self {
        PeerStream::Tcp(s)
    }
}

impl From<MseStream<UtpStream>> for PeerStream {
    fn from(s: MseStream<UtpStream>) -> Self {
        PeerStream::Utp(s)
    }
}

/// What dial tasks need to pick and open a transport (cloned into each).
#[derive(Clone, Debug)]
pub(crate) struct TransportCtx {
    pub(crate) allowed: Transports,
    /// The engine's uTP endpoint (`None`: no UDP socket, TCP only).
    pub(crate) utp: Option<Utp>,
    worked: Arc<Mutex<BTreeMap<SocketAddr, Transport>>>,
    pub(crate) head_start: Duration,
}

impl TransportCtx {
    pub(crate) fn new(allowed: Transports, utp: Option<Utp>) -> Self {
        TransportCtx {
            allowed,
            utp,
            worked: Arc::default(),
            head_start: HEAD_START,
        }
    }

    /// The transports to try for `addr`, first one first.
    pub(crate) fn order(&self, addr: SocketAddr) -> Vec<Transport> {
        let mut v = Vec::with_capacity(2);
        if self.allowed.utp && self.utp.is_some() {
            v.push(Transport::Utp);
        }
        if self.allowed.tcp {
            v.push(Transport::Tcp);
        }
        let last = self
            .worked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&addr)
            .copied();
        if last == Some(Transport::Tcp) {
            v.reverse();
        }
        v
    }

    fn remember(&self, addr: SocketAddr, t: Transport) {
        let mut m = self.worked.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_REMEMBERED && !m.contains_key(&addr) {
            m.pop_first();
        }
        m.insert(addr, t);
    }

    /// Opens one connection over `t`.
    pub(crate) async fn open(
        &self,
        t: Transport,
        policy: &NetPolicy,
        local: Option<IpAddr>,
        addr: SocketAddr,
    ) -> std::io::Result<Link> {
        match t {
            Transport::Tcp => {
                let s = crate::net::connect_tcp_from(policy, local, addr).await?;
                s.set_nodelay(true)?;
                Ok(Link::Tcp(s))
            }
            Transport::Utp => match &self.utp {
                Some(u) => Ok(Link::Utp(u.connect(addr).await?)),
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "no uTP endpoint",
                )),
            },
        }
    }

    /// The first connection to `addr` (see the module docs): the order's
    /// first transport, the second joining after [`TransportCtx::head_start`]
    /// or the first's failure; the first to connect wins.
    pub(crate) async fn race(
        &self,
        policy: &NetPolicy,
        local: Option<IpAddr>,
        addr: SocketAddr,
    ) -> std::io::Result<Link> {
        let order = self.order(addr);
        let (first, second) = match order.as_slice() {
            [] => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "no transport allowed",
                ));
            }
            [one] => {
                let l = self.open(*one, policy, local, addr).await?;
                self.remember(addr, *one);
                return Ok(l);
            }
            [a, b, ..] => (*a, *b),
        };
        let go = tokio::sync::Notify::new();
        let a = self.open(first, policy, local, addr);
        let b = async {
            tokio::select! {
                _ = tokio::time::sleep(self.head_start) => {}
                _ = go.notified() => {}
            }
            self.open(second, policy, local, addr).await
        };
        tokio::pin!(a, b);
        let mut a_err: Option<std::io::Error> = None;
        let mut b_err: Option<std::io::Error> = None;
        loop {
            tokio::select! {
                r = &mut a, if a_err.is_none() => match r {
                    Ok(l) => { self.remember(addr, first); return Ok(l); }
                    Err(e) => match b_err.take() {
                        Some(be) => return Err(first_error(e, be)),
                        None => {
                            a_err = Some(e);
                            // The second starts at once if it waits.
                            go.notify_one();
                        }
                    },
                },
                r = &mut b, if b_err.is_none() => match r {
                    Ok(l) => { self.remember(addr, second); return Ok(l); }
                    Err(e) => match a_err.take() {
                        Some(ae) => return Err(first_error(ae, e)),
                        None => b_err = Some(e),
                    },
                },
            }
        }
    }
}

fn first_error(a: std::io::Error, b: std::io::Error) -> std::io::Error {
    std::io::Error::new(a.kind(), format!("{a}; then {b}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_parse_and_print() {
        let both: Transports = "tcp,utp".parse().unwrap();
        assert_eq!(both, Transports::default());
        assert_eq!("utp, tcp".parse::<Transports>().unwrap(), both);
        assert_eq!(
            "utp".parse::<Transports>().unwrap(),
            Transports {
                tcp: false,
                utp: true
            }
        );
        assert_eq!("TCP".parse::<Transports>().unwrap().to_string(), "tcp");
        assert_eq!(both.to_string(), "tcp,utp");
        assert_eq!(
            "quic".parse::<Transports>(),
            Err(TransportsError::Unknown("quic".into()))
        );
        assert_eq!("".parse::<Transports>(), Err(TransportsError::Empty));
    }
}
