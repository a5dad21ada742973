//! The tracker client: one announce over HTTP (BEP 3, hyper 1 over a socket
//! opened through [`crate::net`]) or UDP (BEP 15 over
//! [`crate::net::PolicedUdp`]), using the sans-IO codecs of
//! [`weir_bt::tracker`].
//!
//! Host names go through [`crate::net::resolve`], resolved only when the
//! policy allows it ([`NetPolicy::allows_name_resolution`]); otherwise only
//! IP literals and `localhost` (taken as 127.0.0.1) are accepted, so no DNS
//! query ever leaves a loopback-only run. `https://` trackers are not supported.
//!
//! UDP: connect, then announce; a lost packet is retransmitted after
//! `base * 2^n` (BEP 15 says 15 s * 2^n; [`Options`] can make it shorter),
//! and a connection id is reused for 60 s per tracker address.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use weir_bt::tracker::{AnnounceRequest, AnnounceResponse, udp};
use weir_core::policy::NetPolicy;

use crate::net::{PolicedUdp, connect_tcp_from};

/// How long to wait and how much to accept.
#[derive(Clone, Debug)]
pub struct Options {
    /// Whole-announce time limit for HTTP (connect, request, response).
    pub http_timeout: Duration,
    /// Largest HTTP response body accepted.
    pub max_response: usize,
    /// UDP retransmission timeout for the first try; doubles per try.
    pub udp_base_timeout: Duration,
    /// UDP tries before giving up (the last waits `base * 2^(tries-1)`).
    pub udp_tries: u32,
    /// How long a UDP connection id stays valid (BEP 15: one minute).
    pub udp_connection_ttl: Duration,
    /// Send from this address (the one we listen on), so the tracker
    /// records the address peers can reach.
    pub local_ip: Option<IpAddr>,
}

impl Default for Options {
    /// 30 s for HTTP, 1 MiB bodies, UDP 15 s doubling over 4 tries
    /// (15 + 30 + 60 + 120 s; BEP 15's 8 tries would take an hour).
    fn default() -> Self {
        Self {
            http_timeout: Duration::from_secs(30),
            max_response: 1 << 20,
            udp_base_timeout: Duration::from_secs(15),
            udp_tries: 4,
            udp_connection_ttl: Duration::from_secs(60),
            local_ip: None,
        }
    }
}

/// Why an announce failed.
#[derive(Debug, thiserror::Error)]
pub enum TrackerError {
    /// The URL cannot be used.
    #[error("bad tracker URL {url:?}: {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A scheme weir does not speak.
    #[error("{scheme}:// trackers are not supported (only http:// and udp://)")]
    Unsupported {
        /// The scheme.
        scheme: String,
    },
    /// A host name under a policy that forbids DNS.
    #[error(
        "tracker host {host:?} is a name, and the network policy ({policy}) does not allow \
         resolving names (use an IP address, or allow every address)"
    )]
    NameResolutionForbidden {
        /// The host.
        host: String,
        /// The policy in force.
        policy: String,
    },
    /// DNS failed.
    #[error("cannot resolve tracker host {host:?}: {source}")]
    Resolve {
        /// The host.
        host: String,
        /// Why.
        source: io::Error,
    },
    /// No address could be reached (or the policy refused them).
    #[error("cannot reach tracker {addr}: {source}")]
    Connect {
        /// The last address tried.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// An HTTP protocol failure.
    #[error("HTTP tracker {addr}: {reason}")]
    Http {
        /// The tracker address.
        addr: SocketAddr,
        /// What failed.
        reason: String,
    },
    /// A non-success HTTP status without a bencoded failure reason.
    #[error("HTTP tracker {addr} answered status {status}")]
    Status {
        /// The tracker address.
        addr: SocketAddr,
        /// The status code.
        status: u16,
    },
    /// The response body exceeded [`Options::max_response`].
    #[error("HTTP tracker {addr} sent more than {max} bytes")]
    TooLarge {
        /// The tracker address.
        addr: SocketAddr,
        /// The limit.
        max: usize,
    },
    /// No answer in time.
    #[error("tracker {target} did not answer within {after:?}")]
    Timeout {
        /// The tracker (URL or address).
        target: String,
        /// Time waited.
        after: Duration,
    },
    /// The tracker's answer is a failure or malformed (codec error).
    #[error(transparent)]
    Response(#[from] weir_bt::tracker::TrackerError),
    /// A socket error.
    #[error("tracker I/O: {0}")]
    Io(#[from] io::Error),
}

/// Announces to the tracker at `url` with the default [`Options`].
pub async fn announce(
    policy: &NetPolicy,
    url: &str,
    req: &AnnounceRequest,
) -> Result<AnnounceResponse, TrackerError> {
    announce_with(policy, url, req, &Options::default()).await
}

/// Announces to the tracker at `url` (`http://` or `udp://`).
pub async fn announce_with(
    policy: &NetPolicy,
    url: &str,
    req: &AnnounceRequest,
    opts: &Options,
) -> Result<AnnounceResponse, TrackerError> {
    let parsed = TrackerUrl::parse(url)?;
    let addrs = resolve(policy, &parsed.host, parsed.port).await?;
    match parsed.scheme {
        Scheme::Http => {
            let deadline = opts.http_timeout;
            match tokio::time::timeout(
                deadline,
                http_announce(policy, &parsed, url, &addrs, req, opts),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(TrackerError::Timeout {
                    target: url.to_string(),
                    after: deadline,
                }),
            }
        }
        Scheme::Udp => udp_announce(policy, &addrs, req, opts).await,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Http,
    Udp,
}

/// The parts of a tracker URL weir uses.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TrackerUrl {
    scheme: Scheme,
    /// Host without brackets.
    host: String,
    port: u16,
    /// `scheme://authority`, the prefix of the URL before the path.
    prefix_len: usize,
    /// The authority as written (for the Host header).
    authority: String,
}

impl TrackerUrl {
    fn parse(url: &str) -> Result<Self, TrackerError> {
        let bad = |reason: &str| TrackerError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (scheme_s, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = match scheme_s.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "udp" => Scheme::Udp,
            other => {
                return Err(TrackerError::Unsupported {
                    scheme: other.to_string(),
                });
            }
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        let (host, port) = if let Some(r) = authority.strip_prefix('[') {
            let (h, after) = r.split_once(']').ok_or_else(|| bad("unclosed `[`"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match (port, scheme) {
            (Some(p), _) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
            (None, Scheme::Http) => 80,
            (None, Scheme::Udp) => return Err(bad("udp:// needs a port")),
        };
        if port == 0 {
            return Err(bad("port 0"));
        }
        Ok(TrackerUrl {
            scheme,
            host: host.to_string(),
            port,
            prefix_len: scheme_s.len() + 3 + authority.len(),
            authority: authority.to_string(),
        })
    }
}

/// Addresses for `host` through the one policy-checked resolver
/// ([`crate::net::resolve`]).
async fn resolve(
    policy: &NetPolicy,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, TrackerError> {
    use crate::net::ResolveError as R;
    crate::net::resolve(policy, host, port)
        .await
        .map_err(|e| match e {
            R::Forbidden { host, policy } => TrackerError::NameResolutionForbidden { host, policy },
            R::Lookup { host, error } => TrackerError::Resolve {
                host,
                source: error,
            },
            R::NoAddress { host } | R::BadAddress { input: host } => TrackerError::Resolve {
                host,
                source: io::Error::new(io::ErrorKind::NotFound, "no addresses"),
            },
        })
}

/// Aborts a spawned task when dropped (the HTTP connection driver).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn http_announce(
    policy: &NetPolicy,
    url: &TrackerUrl,
    raw_url: &str,
    addrs: &[SocketAddr],
    req: &AnnounceRequest,
    opts: &Options,
) -> Result<AnnounceResponse, TrackerError> {
    let full = req.url(raw_url);
    let mut path = full[url.prefix_len..].to_string();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let mut last: Option<(SocketAddr, io::Error)> = None;
    let mut stream = None;
    for &addr in addrs {
        match connect_tcp_from(policy, opts.local_ip, addr).await {
            Ok(s) => {
                stream = Some((addr, s));
                break;
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    let (addr, stream) = match (stream, last) {
        (Some(s), _) => s,
        (None, Some((addr, source))) => return Err(TrackerError::Connect { addr, source }),
        (None, None) => unreachable!("resolve returns at least one address"),
    };
    let _ = stream.set_nodelay(true);
    let herr = |e: hyper::Error| TrackerError::Http {
        addr,
        reason: e.to_string(),
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(herr)?;
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let request = hyper::Request::get(path.as_str())
        .header(hyper::header::HOST, url.authority.as_str())
        .header(
            hyper::header::USER_AGENT,
            concat!("weir/", env!("CARGO_PKG_VERSION")),
        )
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| TrackerError::Http {
            addr,
            reason: format!("cannot build request for {path:?}: {e}"),
        })?;
    let resp = sender.send_request(request).await.map_err(herr)?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), opts.max_response)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                TrackerError::TooLarge {
                    addr,
                    max: opts.max_response,
                }
            } else {
                TrackerError::Http {
                    addr,
                    reason: e.to_string(),
                }
            }
        })?
        .to_bytes();
    match AnnounceResponse::from_bytes(&body) {
        Ok(r) if status.is_success() => Ok(r),
        // A failure reason is the tracker's own words, whatever the status.
        Err(e @ weir_bt::tracker::TrackerError::Failure(_)) => Err(e.into()),
        Err(e) if status.is_success() => Err(e.into()),
        _ => Err(TrackerError::Status {
            addr,
            status: status.as_u16(),
        }),
    }
}

/// Connection ids per UDP tracker address, with the time they were issued.
fn connection_ids() -> &'static Mutex<HashMap<SocketAddr, (u64, Instant)>> {
    static IDS: OnceLock<Mutex<HashMap<SocketAddr, (u64, Instant)>>> = OnceLock::new();
    IDS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn cached_id(addr: SocketAddr, ttl: Duration) -> Option<u64> {
    let ids = connection_ids().lock().ok()?;
    ids.get(&addr)
        .filter(|(_, at)| at.elapsed() < ttl)
        .map(|(id, _)| *id)
}

fn forget_id(addr: SocketAddr) {
    if let Ok(mut ids) = connection_ids().lock() {
        ids.remove(&addr);
    }
}

/// Receives until a datagram from `from` decodes under `parse` with our
/// transaction id, or `deadline` passes (`Ok(None)`). Datagrams from other
/// sources or for other transactions are ignored.
async fn recv_matching<T>(
    sock: &PolicedUdp,
    from: SocketAddr,
    deadline: Instant,
    parse: impl Fn(&[u8]) -> Result<T, weir_bt::tracker::TrackerError>,
) -> Result<Option<T>, TrackerError> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let r = tokio::time::timeout_at(deadline, sock.recv_from(&mut buf)).await;
        let (n, src) = match r {
            Err(_) => return Ok(None),
            Ok(r) => r?,
        };
        if src != from {
            continue;
        }
        match parse(&buf[..n]) {
            Ok(v) => return Ok(Some(v)),
            Err(weir_bt::tracker::TrackerError::TransactionId { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

async fn udp_announce(
    policy: &NetPolicy,
    addrs: &[SocketAddr],
    req: &AnnounceRequest,
    opts: &Options,
) -> Result<AnnounceResponse, TrackerError> {
    // The first address the policy allows (the socket checks again).
    let addr = addrs
        .iter()
        .copied()
        .find(|a| policy.allows(a.ip()))
        .unwrap_or(addrs[0]);
    let local: SocketAddr = match opts.local_ip {
        Some(ip) if !ip.is_unspecified() && ip.is_ipv4() == addr.is_ipv4() => {
            SocketAddr::new(ip, 0)
        }
        _ if addr.is_ipv6() => "[::]:0".parse().expect("literal"),
        _ => "0.0.0.0:0".parse().expect("literal"),
    };
    let sock = PolicedUdp::bind(policy, local).await?;
    let ipv6 =
        addr.is_ipv6() && !matches!(addr.ip(), IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
    let started = Instant::now();
    for n in 0..opts.udp_tries.max(1) {
        let wait = opts.udp_base_timeout * 2u32.saturating_pow(n);
        let deadline = Instant::now() + wait;
        let conn_id = match cached_id(addr, opts.udp_connection_ttl) {
            Some(id) => id,
            None => {
                let tx = fastrand::u32(..);
                sock.send_to(&udp::connect_request(tx), addr)
                    .await
                    .map_err(|source| TrackerError::Connect { addr, source })?;
                match recv_matching(&sock, addr, deadline, |b| {
                    udp::parse_connect_response(b, tx)
                })
                .await?
                {
                    Some(id) => {
                        if let Ok(mut ids) = connection_ids().lock() {
                            ids.insert(addr, (id, Instant::now()));
                        }
                        id
                    }
                    None => continue,
                }
            }
        };
        let tx = fastrand::u32(..);
        sock.send_to(&udp::announce_request(conn_id, tx, req), addr)
            .await
            .map_err(|source| TrackerError::Connect { addr, source })?;
        match recv_matching(&sock, addr, deadline, |b| {
            udp::parse_announce_response(b, tx, ipv6)
        })
        .await
        {
            Ok(Some(r)) => return Ok(r),
            // No answer: the connection id may have expired; get a new one.
            Ok(None) => forget_id(addr),
            Err(e) => {
                forget_id(addr);
                return Err(e);
            }
        }
    }
    Err(TrackerError::Timeout {
        target: format!("udp://{addr}"),
        after: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = TrackerUrl::parse("http://127.0.0.1:6969/announce?x=1").unwrap();
        assert_eq!(
            (u.scheme, u.host.as_str(), u.port, u.authority.as_str()),
            (Scheme::Http, "127.0.0.1", 6969, "127.0.0.1:6969")
        );
        assert_eq!(
            &"http://127.0.0.1:6969/announce?x=1"[u.prefix_len..],
            "/announce?x=1"
        );
        let u = TrackerUrl::parse("udp://[::1]:1337/announce").unwrap();
        assert_eq!(
            (u.scheme, u.host.as_str(), u.port),
            (Scheme::Udp, "::1", 1337)
        );
        let u = TrackerUrl::parse("HTTP://tracker.example/ann").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("tracker.example", 80));
        let u = TrackerUrl::parse("http://h?q").unwrap();
        assert_eq!(u.host, "h");
        for bad in [
            "tracker",
            "http://",
            "udp://host/ann",
            "http://h:99999/",
            "http://u:p@h/",
            "http://[::1/",
            "udp://h:0",
        ] {
            assert!(
                matches!(TrackerUrl::parse(bad), Err(TrackerError::BadUrl { .. })),
                "{bad}"
            );
        }
        let e = TrackerUrl::parse("https://t/ann").unwrap_err();
        assert_eq!(
            e.to_string(),
            "https:// trackers are not supported (only http:// and udp://)"
        );
    }

    #[tokio::test]
    async fn names_are_not_resolved_under_a_loopback_policy() {
        let p = NetPolicy::loopback();
        assert_eq!(
            resolve(&p, "localhost", 80).await.unwrap(),
            ["127.0.0.1:80".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(
            resolve(&p, "::1", 80).await.unwrap(),
            ["[::1]:80".parse::<SocketAddr>().unwrap()]
        );
        let e = resolve(&p, "tracker.example.org", 80).await.unwrap_err();
        assert!(matches!(e, TrackerError::NameResolutionForbidden { .. }));
        assert!(e.to_string().contains("127.0.0.0/8"), "{e}");
    }
}
