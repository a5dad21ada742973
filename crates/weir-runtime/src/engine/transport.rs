//! Which transport carries a BitTorrent connection: TCP or uTP
//! (`--transports tcp,utp`, both by default).
//!
//! Outgoing, with both allowed: uTP preferred (cheaper for the peer's
//! network, and what uTP-only peers speak), but TCP dialled beside it,
//! not after it: a TCP connection that is up first waits about one more
//! of its own round trips for uTP's answer ([`TransportCtx::race`]), so a
//! TCP-only peer costs a round trip, not a fixed head start, and a peer
//! that speaks both is reached over uTP. An address remembers what reached
//! it last; one that took TCP is dialled over TCP first, uTP joining only
//! after [`HEAD_START`]. The losing connection is dropped (one connection
//! per dial once it is settled). The MSE attempts that follow (a new
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
use weir_bt::mse::Crypto;
use weir_core::policy::NetPolicy;

use crate::mse::MseStream;
use crate::utp::{Utp, UtpStream};

/// How long an address that last took TCP is dialled over TCP alone before
/// uTP is tried too, and the longest a TCP connection waits for uTP
/// ([`TransportCtx::grace`]): Happy Eyeballs' connection attempt delay (RFC 8305).
/// (Until 2026-12 every dial sent uTP alone for this long first: a
/// TCP-only peer, like libtorrent with uTP off, rtorrent, aria2 or a
/// seedbox behind a TCP proxy, cost 250 ms on every first dial, a sixth of
/// `weir bench bt-single`'s 1 GiB.)
pub const HEAD_START: Duration = Duration::from_millis(250);
/// The least a TCP connection that is up first waits for uTP
/// ([`TransportCtx::grace`]).
pub const MIN_GRACE: Duration = Duration::from_millis(10);
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

impl PeerStream {
    /// What the connection runs over and whether RC4 encrypts it (a peer
    /// list shows both, as other clients flag uTP and encrypted peers).
    pub(crate) fn describe(&self) -> (Transport, Crypto) {
        match self {
            PeerStream::Tcp(s) => (Transport::Tcp, s.crypto()),
            PeerStream::Utp(s) => (Transport::Utp, s.crypto()),
        }
    }
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
    /// The least a connection of the second transport waits for the
    /// first ([`MIN_GRACE`]; tests widen it).
    pub(crate) min_grace: Duration,
}

impl TransportCtx {
    pub(crate) fn new(allowed: Transports, utp: Option<Utp>) -> Self {
        TransportCtx {
            allowed,
            utp,
            worked: Arc::default(),
            head_start: HEAD_START,
            min_grace: MIN_GRACE,
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

    /// How long a connection of the second transport, up after `took`,
    /// waits for the preferred one: as long again as its own connect took
    /// (the preferred one was sent at the same time over the same path,
    /// so it answers within about that round trip if the peer speaks it),
    /// at least [`TransportCtx::min_grace`] (a peer's scheduling on a LAN
    /// or loopback) and at most [`HEAD_START`].
    fn grace(&self, took: Duration) -> Duration {
        took.clamp(self.min_grace, HEAD_START.max(self.min_grace))
    }

    /// The first connection to `addr` (see the module docs).
    ///
    /// uTP preferred (the default, or what reached `addr` last): both
    /// transports start at once; uTP wins the moment it connects, and a
    /// TCP connection that is up first is held for [`TransportCtx::grace`] (about one
    /// more of the round trips its connect took) in case uTP answers
    /// too, then used. TCP preferred (what reached `addr` last): uTP
    /// joins after [`TransportCtx::head_start`] or TCP's failure, and is
    /// held the same way. Either way the other starts at once when one
    /// fails, and the losing connection is dropped.
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
        // uTP first costs a TCP-only peer nothing but the grace: TCP is
        // dialled beside it. TCP first keeps uTP back (a peer known to
        // take TCP is not sent a uTP SYN as well).
        let delay = match first {
            Transport::Utp => Duration::ZERO,
            Transport::Tcp => self.head_start,
        };
        let go = tokio::sync::Notify::new();
        let a = self.open(first, policy, local, addr);
        let b = async {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = go.notified() => {}
            }
            let began = tokio::time::Instant::now();
            let r = self.open(second, policy, local, addr).await;
            (r, began.elapsed())
        };
        tokio::pin!(a, b);
        let mut a_err: Option<std::io::Error> = None;
        let mut b_done = false;
        let mut b_err: Option<std::io::Error> = None;
        // The second's connection, held until its deadline for the first.
        let mut held: Option<(Link, tokio::time::Instant)> = None;
        loop {
            let deadline = held.as_ref().map(|h| h.1);
            tokio::select! {
                r = &mut a, if a_err.is_none() => match r {
                    Ok(l) => { self.remember(addr, first); return Ok(l); }
                    Err(e) => {
                        if let Some((l, _)) = held.take() {
                            self.remember(addr, second);
                            return Ok(l);
                        }
                        if let Some(be) = b_err.take() {
                            return Err(first_error(e, be));
                        }
                        a_err = Some(e);
                        // The second starts at once if it waits.
                        go.notify_one();
                    }
                },
                (r, took) = &mut b, if !b_done => {
                    b_done = true;
                    match r {
                        Ok(l) => {
                            if a_err.is_some() {
                                self.remember(addr, second);
                                return Ok(l);
                            }
                            held = Some((l, tokio::time::Instant::now() + self.grace(took)));
                        }
                        Err(e) => match a_err.take() {
                            Some(ae) => return Err(first_error(ae, e)),
                            None => b_err = Some(e),
                        },
                    }
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)),
                    if deadline.is_some() =>
                {
                    let (l, _) = held.take().expect("a deadline is a held connection");
                    self.remember(addr, second);
                    return Ok(l);
                }
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

    use crate::utp::{UtpConfig, UtpSocket};
    use std::time::Instant;

    /// A TCP listener on loopback.
    async fn tcp_peer() -> (tokio::net::TcpListener, SocketAddr) {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        (tcp, addr)
    }

    /// A dialler's context with its own uTP endpoint.
    async fn dialler() -> (TransportCtx, UtpSocket) {
        let u = UtpSocket::bind(
            &NetPolicy::loopback(),
            "127.0.0.1:0".parse().unwrap(),
            UtpConfig::default(),
        )
        .await
        .unwrap();
        (
            TransportCtx::new(Transports::default(), Some(u.utp().clone())),
            u,
        )
    }

    fn kind(l: &Link) -> Transport {
        match l {
            Link::Tcp(_) => Transport::Tcp,
            Link::Utp(_) => Transport::Utp,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tcp_only_peer_costs_a_round_trip_not_the_head_start() {
        // Its UDP port is open but never answers uTP (libtorrent with uTP
        // off): TCP is dialled beside uTP and taken after its grace. The
        // dial used to wait the whole head start before TCP was even sent.
        let (_tcp, addr) = tcp_peer().await;
        let _silent = tokio::net::UdpSocket::bind(addr).await.unwrap();
        let (ctx, _u) = dialler().await;
        let t = Instant::now();
        let l = ctx.race(&NetPolicy::loopback(), None, addr).await.unwrap();
        let took = t.elapsed();
        assert_eq!(kind(&l), Transport::Tcp);
        assert!(took < HEAD_START, "took {took:?}");
        assert!(took >= MIN_GRACE, "took {took:?}: TCP was not held for uTP");
        // Remembered: the next dial is TCP first (uTP held back).
        assert_eq!(ctx.order(addr), vec![Transport::Tcp, Transport::Utp]);
        let l = ctx.race(&NetPolicy::loopback(), None, addr).await.unwrap();
        assert_eq!(kind(&l), Transport::Tcp);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_speaking_both_is_reached_over_utp() {
        let (_tcp, addr) = tcp_peer().await;
        let _u = UtpSocket::bind(&NetPolicy::loopback(), addr, UtpConfig::default())
            .await
            .unwrap();
        let (mut ctx, _du) = dialler().await;
        // TCP on loopback is up in microseconds, uTP a little later:
        // a grace no loaded machine outruns, so the test says only that
        // uTP is preferred when it answers within it.
        ctx.min_grace = Duration::from_secs(10);
        let l = ctx.race(&NetPolicy::loopback(), None, addr).await.unwrap();
        assert_eq!(kind(&l), Transport::Utp);
        assert_eq!(ctx.order(addr), vec![Transport::Utp, Transport::Tcp]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_utp_only_peer_is_reached_over_utp() {
        // No TCP listener: the refused TCP dial leaves uTP to win.
        let u = UtpSocket::bind(
            &NetPolicy::loopback(),
            "127.0.0.1:0".parse().unwrap(),
            UtpConfig::default(),
        )
        .await
        .unwrap();
        let addr = u.utp().local_addr().unwrap();
        let (ctx, _du) = dialler().await;
        let l = ctx.race(&NetPolicy::loopback(), None, addr).await.unwrap();
        assert_eq!(kind(&l), Transport::Utp);
    }
}
