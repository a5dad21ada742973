//! Sockets under the network policy.
//!
//! Nothing in weir opens a socket, accepts a connection or sends a datagram
//! except through these functions; each checks the address against the
//! [`NetPolicy`] first and logs every refusal with the address and the list.
//!
//! Names are turned into addresses here too, and only here ([`resolve`],
//! [`resolve_blocking`]): resolving a name sends a DNS query to whatever
//! resolver the system uses, so it is itself traffic the policy governs.
//! IP literals (and `localhost`, which is loopback by definition) need no
//! query; any other name is resolved only when the policy allows every
//! address ([`NetPolicy::allows_name_resolution`]), since the resolver and
//! the answer could be anywhere. The system resolver can only be reached
//! with a [`LookupAllowed`] token, which only [`plan`] makes, after that
//! check.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use weir_core::peers::canonical_addr;
use weir_core::policy::NetPolicy;

/// Why a host could not be turned into socket addresses.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Not `HOST:PORT`.
    #[error("{input:?}: expected HOST:PORT (an IP address or host name, a colon, a port)")]
    BadAddress {
        /// What was given.
        input: String,
    },
    /// A host name under a policy that does not allow every address.
    #[error(
        "{host:?} is a host name, and the network policy ({policy}) does not allow resolving \
         names (a DNS query could go anywhere); give an IP address, or allow every address \
         with --allow any"
    )]
    Forbidden {
        /// The name.
        host: String,
        /// The policy in force.
        policy: String,
    },
    /// The resolver failed.
    #[error("cannot resolve {host:?}: {error}")]
    Lookup {
        /// The name.
        host: String,
        /// What the resolver said.
        error: io::Error,
    },
    /// The resolver answered with no address.
    #[error("{host:?} has no address")]
    NoAddress {
        /// The name.
        host: String,
    },
}

/// Proof that [`plan`] allowed a query to the system resolver; the only
/// way to reach it.
#[derive(Debug)]
pub struct LookupAllowed(());

/// What resolving a host takes.
#[derive(Debug)]
pub enum Plan {
    /// The addresses are known without asking anyone.
    Known(Vec<SocketAddr>),
    /// A name to look up; the policy allows the query.
    Lookup(LookupAllowed),
}

/// Decides how `host` becomes addresses under `policy`: IP literals
/// (bracketed IPv6 too) and `localhost` directly, other names only when
/// the policy allows every address. Sends nothing.
pub fn plan(policy: &NetPolicy, host: &str, port: u16) -> Result<Plan, ResolveError> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(Plan::Known(vec![SocketAddr::new(ip, port)]));
    }
    if bare.eq_ignore_ascii_case("localhost") {
        return Ok(Plan::Known(vec![SocketAddr::new(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
        )]));
    }
    if bare.is_empty() {
        return Err(ResolveError::BadAddress {
            input: format!("{host}:{port}"),
        });
    }
    if !policy.allows_name_resolution() {
        tracing::warn!("not resolving {bare:?}: the network policy {policy} forbids DNS");
        return Err(ResolveError::Forbidden {
            host: bare.to_string(),
            policy: policy.to_string(),
        });
    }
    Ok(Plan::Lookup(LookupAllowed(())))
}

/// Splits `HOST:PORT` (`[v6]:PORT` for IPv6 literals) without resolving
/// anything.
pub fn parse_host_port(s: &str) -> Result<(String, u16), ResolveError> {
    let bad = || ResolveError::BadAddress {
        input: s.to_string(),
    };
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
        (h, p)
    } else {
        let (h, p) = s.rsplit_once(':').ok_or_else(bad)?;
        if h.contains(':') {
            // An IPv6 literal without brackets is ambiguous.
            return Err(bad());
        }
        (h, p)
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = port.parse::<u16>().map_err(|_| bad())?;
    Ok((host.to_string(), port))
}

#[cfg(test)]
thread_local! {
    /// System resolver queries made by this thread (tests prove none).
    static LOOKUPS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

fn counted(_token: &LookupAllowed) {
    #[cfg(test)]
    LOOKUPS.with(|n| n.set(n.get() + 1));
}

fn non_empty(host: &str, addrs: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, ResolveError> {
    if addrs.is_empty() {
        return Err(ResolveError::NoAddress {
            host: host.to_string(),
        });
    }
    Ok(addrs)
}

/// Addresses of `host` under `policy` (see [`plan`]); a name is looked up
/// with the system resolver only when the policy allows every address.
pub async fn resolve(
    policy: &NetPolicy,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, ResolveError> {
    match plan(policy, host, port)? {
        Plan::Known(a) => Ok(a),
        Plan::Lookup(token) => {
            counted(&token);
            let addrs = tokio::net::lookup_host((host, port))
                .await
                .map_err(|error| ResolveError::Lookup {
                    host: host.to_string(),
                    error,
                })?;
            non_empty(host, addrs.collect())
        }
    }
}

/// [`resolve`] for code outside a tokio runtime (blocks on the lookup).
pub fn resolve_blocking(
    policy: &NetPolicy,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, ResolveError> {
    use std::net::ToSocketAddrs;
    match plan(policy, host, port)? {
        Plan::Known(a) => Ok(a),
        Plan::Lookup(token) => {
            counted(&token);
            let addrs = (host, port)
                .to_socket_addrs()
                .map_err(|error| ResolveError::Lookup {
                    host: host.to_string(),
                    error,
                })?;
            non_empty(host, addrs.collect())
        }
    }
}

/// [`parse_host_port`] then [`resolve_blocking`]: `HOST:PORT` to addresses.
pub fn resolve_host_port(policy: &NetPolicy, s: &str) -> Result<Vec<SocketAddr>, ResolveError> {
    let (host, port) = parse_host_port(s)?;
    resolve_blocking(policy, &host, port)
}

fn refuse(policy: &NetPolicy, addr: SocketAddr, what: &str) -> io::Result<()> {
    match policy.check(addr) {
        Ok(()) => Ok(()),
        Err(e) => {
            tracing::warn!("{what} {addr} refused: {e}");
            Err(io::Error::new(io::ErrorKind::PermissionDenied, e))
        }
    }
}

/// Connects to `addr` if the policy allows it.
pub async fn connect_tcp(policy: &NetPolicy, addr: SocketAddr) -> io::Result<TcpStream> {
    refuse(policy, addr, "connect to")?;
    TcpStream::connect(addr).await
}

/// Connects to `addr` from `local` (when given and not unspecified), so
/// the peer and trackers see the address we listen on, if the policy
/// allows `addr`.
pub async fn connect_tcp_from(
    policy: &NetPolicy,
    local: Option<std::net::IpAddr>,
    addr: SocketAddr,
) -> io::Result<TcpStream> {
    refuse(policy, addr, "connect to")?;
    let Some(ip) = local.filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == addr.is_ipv4()) else {
        return TcpStream::connect(addr).await;
    };
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.bind(SocketAddr::new(ip, 0))?;
    sock.connect(addr).await
}

/// Whether a TCP listener could be bound on `addr` now (it is bound and
/// closed at once; nothing is sent). For choosing a free default port.
pub fn port_is_free(addr: SocketAddr) -> bool {
    std::net::TcpListener::bind(addr).is_ok()
}

/// Binds a listener on `addr`. Binding sends nothing; connections it
/// accepts are checked by [`accept_tcp`].
pub async fn listen_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// [`listen_tcp`], except that the unspecified IPv4 address binds `[::]`
/// for IPv6 and IPv4 alike (`IPV6_V6ONLY` off) where the host has IPv6,
/// as libtorrent and Transmission listen on both: a peer reachable only
/// over IPv6 can then reach us. IPv4 peers are accepted at their plain
/// IPv4 addresses ([`accept_loop`], [`accept_tcp`]).
pub async fn listen_tcp_all(addr: SocketAddr) -> io::Result<TcpListener> {
    if addr.ip() == IpAddr::V4(Ipv4Addr::UNSPECIFIED) {
        match listen_dual(addr.port()) {
            Ok(l) => return Ok(l),
            Err(e) => tracing::debug!("TCP on [::]:{}: {e}; IPv4 only", addr.port()),
        }
    }
    listen_tcp(addr).await
}

fn listen_dual(port: u16) -> io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    s.set_only_v6(false)?;
    // As tokio's own bind: a restarted client takes its port back at once.
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    TcpListener::from_std(s.into())
}

/// Accepts the next connection whose peer address the policy allows;
/// connections from other addresses are closed at once and logged.
pub async fn accept_tcp(
    policy: &NetPolicy,
    listener: &TcpListener,
) -> io::Result<(TcpStream, SocketAddr)> {
    loop {
        let (stream, addr) = listener.accept().await?;
        let addr = canonical_addr(addr);
        if refuse(policy, addr, "incoming connection from").is_ok() {
            return Ok((stream, addr));
        }
        drop(stream);
    }
}

/// First wait after an accept error that is not about the connection
/// itself (out of descriptors, buffers or memory).
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest wait between accept attempts while such errors last.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(100);

/// What an accept error means for the listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptError {
    /// The connection went away before we took it (aborted, reset,
    /// interrupted): take the next at once.
    Connection,
    /// Out of descriptors, buffers or memory (EMFILE, ENFILE, ENOBUFS,
    /// ENOMEM): the pending connection stays queued, so retrying at once
    /// would spin; wait a little, longer while it lasts.
    Resources,
    /// Anything else: wait as for [`AcceptError::Resources`], and log it.
    Other,
}

/// Sorts an accept error (see [`AcceptError`]).
pub fn classify_accept_error(e: &io::Error) -> AcceptError {
    match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => AcceptError::Resources,
        Some(
            libc::ECONNABORTED
            | libc::ECONNRESET
            | libc::EINTR
            | libc::EAGAIN
            | libc::EPROTO
            | libc::EPERM
            | libc::ETIMEDOUT
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::ENETDOWN
            | libc::ENONET
            | libc::EOPNOTSUPP,
        ) => AcceptError::Connection,
        _ => match e.kind() {
            io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock => AcceptError::Connection,
            _ => AcceptError::Other,
        },
    }
}

/// The one accept loop every listener runs: hands each connection the
/// policy allows to `on_conn` (others are closed at once and logged) until
/// `on_conn` returns false. It never ends on an accept error: errors about
/// one connection are skipped, and running out of descriptors or memory
/// waits [`ACCEPT_BACKOFF_MIN`], doubling up to [`ACCEPT_BACKOFF_MAX`],
/// and tries again (connections freed meanwhile are then taken).
pub async fn accept_loop<F, Fut>(policy: &NetPolicy, listener: &TcpListener, mut on_conn: F)
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut backoff = Duration::ZERO;
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                let addr = canonical_addr(addr);
                backoff = Duration::ZERO;
                if refuse(policy, addr, "incoming connection from").is_err() {
                    drop(stream);
                    continue;
                }
                if !on_conn(stream, addr).await {
                    return;
                }
            }
            Err(e) => match classify_accept_error(&e) {
                AcceptError::Connection => continue,
                kind => {
                    if backoff.is_zero() {
                        tracing::warn!("accept on {:?}: {e}; retrying", listener.local_addr());
                        backoff = ACCEPT_BACKOFF_MIN;
                    } else {
                        tracing::debug!("accept: {e} ({kind:?}); retrying in {backoff:?}");
                        backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    }
                    tokio::time::sleep(backoff).await;
                }
            },
        }
    }
}

/// A UDP socket that checks every destination and every source against the
/// policy.
///
/// On an IPv6 socket that also carries IPv4 (bound on `[::]`, see
/// [`PolicedUdp::bind_dual`]) IPv4 peers are IPv4 addresses to the
/// callers both ways: a destination is written in its IPv4-mapped form
/// ([`PolicedUdp::wire`]) and a source read back in its plain one, so a
/// peer has one address whichever socket it came through.
#[derive(Debug)]
pub struct PolicedUdp {
    sock: UdpSocket,
    policy: NetPolicy,
    /// An IPv6 socket: IPv4 destinations are mapped.
    v6: bool,
}

impl PolicedUdp {
    /// Binds a UDP socket on `addr`.
    pub async fn bind(policy: &NetPolicy, addr: SocketAddr) -> io::Result<Self> {
        Ok(Self {
            sock: UdpSocket::bind(addr).await?,
            policy: policy.clone(),
            v6: addr.is_ipv6(),
        })
    }

    /// Binds `[::]:port` for IPv6 and IPv4 alike (`IPV6_V6ONLY` off):
    /// what an unspecified IPv4 address means for a socket that must
    /// reach every peer, as libtorrent and Transmission listen on both.
    /// Fails where the host has no IPv6 (the caller then binds IPv4).
    pub fn bind_dual(policy: &NetPolicy, port: u16) -> io::Result<Self> {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_only_v6(false)?;
        s.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
        s.set_nonblocking(true)?;
        Ok(Self {
            sock: UdpSocket::from_std(s.into())?,
            policy: policy.clone(),
            v6: true,
        })
    }

    /// `to` as this socket's family writes it: an IPv4 address becomes
    /// IPv4-mapped on an IPv6 socket (Linux also takes it plain on a
    /// dual-stack socket; other systems refuse it).
    pub fn wire(&self, to: SocketAddr) -> SocketAddr {
        match to {
            SocketAddr::V4(a) if self.v6 => {
                SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port())
            }
            a => a,
        }
    }

    /// Binds the port of the multicast `group` (with `SO_REUSEADDR` and
    /// `SO_REUSEPORT`, so other clients on this host share it, as BEP 14
    /// expects) and joins the group: on the interface of `iface` (IPv4;
    /// `None` or an unspecified address: the system's choice), with a
    /// hop limit of 1 and our own datagrams looped back (other programs
    /// on this host hear us). Refused, without a socket made, if the
    /// policy does not allow the group.
    pub async fn bind_multicast(
        policy: &NetPolicy,
        group: SocketAddr,
        iface: Option<IpAddr>,
    ) -> io::Result<Self> {
        use socket2::{Domain, Protocol, Socket, Type};
        refuse(policy, group, "multicast group")?;
        if !group.ip().is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a multicast address", group.ip()),
            ));
        }
        let domain = if group.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        match group.ip() {
            IpAddr::V4(g) => {
                let ifv4 = match iface {
                    Some(IpAddr::V4(a)) => a,
                    _ => Ipv4Addr::UNSPECIFIED,
                };
                s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, group.port())).into())?;
                s.join_multicast_v4(&g, &ifv4)?;
                if !ifv4.is_unspecified() {
                    s.set_multicast_if_v4(&ifv4)?;
                }
                s.set_multicast_ttl_v4(1)?;
                s.set_multicast_loop_v4(true)?;
            }
            IpAddr::V6(g) => {
                s.set_only_v6(true)?;
                s.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, group.port())).into())?;
                s.join_multicast_v6(&g, 0)?;
                s.set_multicast_hops_v6(1)?;
                s.set_multicast_loop_v6(true)?;
            }
        }
        s.set_nonblocking(true)?;
        Ok(Self {
            sock: UdpSocket::from_std(s.into())?,
            policy: policy.clone(),
            // IPv6 groups are joined on an IPv6-only socket.
            v6: false,
        })
    }

    /// Sends a datagram now if the policy allows its destination and the
    /// socket has room (`WouldBlock` otherwise: never waits).
    pub fn try_send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        refuse(&self.policy, to, "datagram to")?;
        // Straight to the (non-blocking) socket: tokio's `try_send_to`
        // answers WouldBlock until the reactor has seen the socket
        // writable once, which drops a fresh socket's first datagram.
        socket2::SockRef::from(&self.sock).send_to(buf, &self.wire(to).into())
    }

    /// Sends a datagram if the policy allows its destination.
    pub async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        refuse(&self.policy, to, "datagram to")?;
        self.sock.send_to(buf, self.wire(to)).await
    }

    /// Receives the next datagram from an allowed source (others are dropped).
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        loop {
            let (n, from) = self.sock.recv_from(buf).await?;
            let from = canonical_addr(from);
            if self.policy.allows(from.ip()) {
                return Ok((n, from));
            }
            tracing::warn!(
                "datagram from {from} dropped: outside network policy {}",
                self.policy
            );
        }
    }

    /// Waits until a datagram may be read without blocking (then
    /// [`PolicedUdp::try_recv_from`] drains what is there, for batches).
    pub async fn readable(&self) -> io::Result<()> {
        self.sock.readable().await
    }

    /// Reads one waiting datagram without blocking: `Ok(Some((len,
    /// from)))` from an allowed source, `Ok(None)` for one from outside the
    /// policy (dropped quietly: a flood of them must not flood the log
    /// either), `Err(WouldBlock)` when none is waiting.
    pub fn try_recv_from(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        let (n, from) = self.sock.try_recv_from(buf)?;
        let from = canonical_addr(from);
        if self.policy.allows(from.ip()) {
            Ok(Some((n, from)))
        } else {
            tracing::debug!("datagram from {from} dropped: outside network policy");
            Ok(None)
        }
    }

    /// Whether the policy lets a datagram go to `to` (what
    /// [`PolicedUdp::send_to`] checks first).
    pub fn allows(&self, to: SocketAddr) -> bool {
        self.policy.allows(to.ip())
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The socket itself, for options (buffer sizes); sending and
    /// receiving go through the checked methods.
    pub fn as_socket(&self) -> &UdpSocket {
        &self.sock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_outside_policy_is_refused_without_a_packet() {
        let err = connect_tcp(&NetPolicy::loopback(), "192.0.2.1:9".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        let udp = PolicedUdp::bind(&NetPolicy::loopback(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let err = udp
            .send_to(b"x", "198.51.100.1:53".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn host_port_parsing() {
        let ok = |s: &str| parse_host_port(s).unwrap();
        assert_eq!(ok("127.0.0.1:80"), ("127.0.0.1".into(), 80));
        assert_eq!(ok("[::1]:6881"), ("::1".into(), 6881));
        assert_eq!(ok("tracker.example:443"), ("tracker.example".into(), 443));
        for bad in [
            "",
            "noport",
            ":80",
            "host:",
            "host:99999",
            "::1:80",
            "[::1]80",
            "h:-1",
        ] {
            assert!(
                matches!(parse_host_port(bad), Err(ResolveError::BadAddress { .. })),
                "{bad:?}"
            );
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_name_under_a_narrow_policy_never_reaches_the_resolver() {
        let before = LOOKUPS.with(|n| n.get());
        for policy in [
            NetPolicy::loopback(),
            NetPolicy::parse("0.0.0.0/0").unwrap(), // every IPv4 but no IPv6
        ] {
            for name in ["vm", "example.invalid", "LOCALHOST.localdomain"] {
                let e = resolve_blocking(&policy, name, 80).unwrap_err();
                assert!(matches!(e, ResolveError::Forbidden { .. }), "{e}");
                let e = resolve(&policy, name, 80).await.unwrap_err();
                assert!(matches!(e, ResolveError::Forbidden { .. }), "{e}");
                assert!(e.to_string().contains("--allow any"), "{e}");
            }
            // Literals and localhost need no query at all.
            assert_eq!(
                resolve_blocking(&policy, "127.0.0.2", 9).unwrap(),
                vec!["127.0.0.2:9".parse::<SocketAddr>().unwrap()]
            );
            assert_eq!(
                resolve(&policy, "[::1]", 9).await.unwrap(),
                vec!["[::1]:9".parse::<SocketAddr>().unwrap()]
            );
            assert_eq!(
                resolve_host_port(&policy, "localhost:7").unwrap(),
                vec!["127.0.0.1:7".parse::<SocketAddr>().unwrap()]
            );
        }
        assert_eq!(
            LOOKUPS.with(|n| n.get()),
            before,
            "no resolver query was made"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_open_policy_resolves_names_from_the_hosts_file() {
        // A name /etc/hosts holds is answered without a DNS query.
        let Some(name) = std::fs::read_to_string("/etc/hosts").ok().and_then(|h| {
            h.lines()
                .filter(|l| l.starts_with("127."))
                .flat_map(|l| l.split_whitespace().skip(1))
                .find(|n| !n.eq_ignore_ascii_case("localhost") && !n.starts_with('#'))
                .map(str::to_string)
        }) else {
            let why = "/etc/hosts names no loopback host besides localhost";
            eprintln!("SKIP: {why}");
            weir_lab::ci::record_skip(why);
            return;
        };
        let before = LOOKUPS.with(|n| n.get());
        let any = NetPolicy::allow_all();
        let a = resolve_blocking(&any, &name, 80).unwrap();
        assert!(a.iter().any(|a| a.ip().is_loopback()), "{name}: {a:?}");
        let b = resolve(&any, &name, 81).await.unwrap();
        assert!(b.iter().all(|a| a.port() == 81), "{b:?}");
        assert_eq!(LOOKUPS.with(|n| n.get()), before + 2);
    }

    #[test]
    fn accept_errors_are_sorted() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(
            classify_accept_error(&e(libc::EMFILE)),
            AcceptError::Resources
        );
        assert_eq!(
            classify_accept_error(&e(libc::ENFILE)),
            AcceptError::Resources
        );
        assert_eq!(
            classify_accept_error(&e(libc::ENOBUFS)),
            AcceptError::Resources
        );
        assert_eq!(
            classify_accept_error(&e(libc::ECONNABORTED)),
            AcceptError::Connection
        );
        assert_eq!(classify_accept_error(&e(libc::EBADF)), AcceptError::Other);
    }

    #[tokio::test]
    async fn accept_from_outside_the_policy_is_closed_and_the_loop_goes_on() {
        // Only 127.0.0.2 is allowed: a connection from 127.0.0.1 is closed
        // at once, one from 127.0.0.2 is handed over.
        let policy = NetPolicy::parse("127.0.0.2/32").unwrap();
        let l = listen_tcp("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            accept_loop(&policy, &l, |s, a| {
                let _ = tx.send((s, a));
                async { true }
            })
            .await;
        });
        let mut outside = TcpStream::connect(addr).await.unwrap();
        let mut b = [0u8; 1];
        use tokio::io::AsyncReadExt;
        let r = tokio::time::timeout(Duration::from_secs(10), outside.read(&mut b))
            .await
            .expect("an outside connection is closed, not left open");
        assert!(matches!(r, Ok(0)) || r.is_err(), "{r:?}");
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let _inside = sock.connect(addr).await.unwrap();
        let (_, from) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(from.ip(), "127.0.0.2".parse::<std::net::IpAddr>().unwrap());
        assert!(rx.try_recv().is_err(), "the refused one was handed over");
    }

    #[tokio::test]
    async fn udp_from_outside_the_policy_is_dropped() {
        let policy = NetPolicy::parse("127.0.0.2/32").unwrap();
        let udp = PolicedUdp::bind(&policy, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let to = udp.local_addr().unwrap();
        let outside = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        outside.send_to(b"outside", to).await.unwrap();
        let inside = UdpSocket::bind("127.0.0.2:0").await.unwrap();
        inside.send_to(b"inside", to).await.unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = tokio::time::timeout(Duration::from_secs(10), udp.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        // The first datagram (from outside) was dropped, not returned.
        assert_eq!(&buf[..n], b"inside");
        assert_eq!(from, inside.local_addr().unwrap());
    }

    #[tokio::test]
    async fn loopback_connect_and_accept_work() {
        let policy = NetPolicy::loopback();
        let l = listen_tcp("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, a) = tokio::join!(connect_tcp(&policy, addr), accept_tcp(&policy, &l));
        assert!(c.is_ok());
        assert!(a.unwrap().1.ip().is_loopback());
    }

    /// The unspecified IPv4 address listens for both families; an IPv4
    /// peer is accepted at its plain address, not `::ffff:127.0.0.1`.
    #[tokio::test]
    async fn the_unspecified_address_accepts_ipv6_and_ipv4_at_plain_addresses() {
        let policy = NetPolicy::loopback();
        let l = listen_tcp_all("0.0.0.0:0".parse().unwrap()).await.unwrap();
        let port = l.local_addr().unwrap().port();
        for ip in ["::1", "127.0.0.1"] {
            let to = SocketAddr::new(ip.parse().unwrap(), port);
            let (c, a) = tokio::join!(connect_tcp(&policy, to), accept_tcp(&policy, &l));
            let c = c.unwrap();
            assert_eq!(a.unwrap().1, c.local_addr().unwrap());
        }
    }
}
