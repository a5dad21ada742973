//! The HTTP server: Transmission's transport rules in front of [`crate::rpc`]
//! and the web page.
//!
//! Checks run in Transmission's order, each with Transmission's answer:
//! the client address against [`RpcConfig::clients`] (a connection from
//! elsewhere is closed at accept), Basic auth (401), the `Host` header
//! (421, DNS-rebinding protection, skipped when a password is set, as in
//! Transmission), then on the RPC path the `X-Transmission-Session-Id`
//! (409 carrying the id, and `X-Transmission-Rpc-Version` when the 6.0 form
//! is served: Transmission 4.1's clients switch to JSON-RPC on seeing it,
//! 3.00's ignore it), the body size (413) and the time to send it (408).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::BodyExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use weir_core::policy::NetPolicy;

use crate::backend::Backend;
use crate::rpc::{self, Reply, RpcOptions};
use crate::torrents::TorrentsWriter;
use crate::web;

/// The header carrying the CSRF token.
pub const SESSION_ID_HEADER: &str = "X-Transmission-Session-Id";
/// The header by which Transmission 4.1 announces RPC 6.0 on a 409.
pub const RPC_VERSION_HEADER: &str = "X-Transmission-Rpc-Version";

/// Bytes per chunk of a streamed `torrent-get`.
const CHUNK: usize = 256 * 1024;

/// A user name and password for Basic auth.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub user: String,
    /// Password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// How the RPC server listens and whom it serves.
#[derive(Clone, Debug)]
pub struct RpcConfig {
    /// Address to listen on (`127.0.0.1:9091` in Transmission).
    pub addr: SocketAddr,
    /// Basic auth; required when `addr` is not a loopback address.
    pub credentials: Option<Credentials>,
    /// Client addresses served (Transmission's `rpc-whitelist`); others
    /// are disconnected at accept.
    pub clients: NetPolicy,
    /// Check the `Host` header (Transmission's `rpc-host-whitelist-enabled`).
    pub host_check: bool,
    /// Host names accepted besides IP literals and `localhost`
    /// (`rpc-host-whitelist`; `*` and `?` wildcards).
    pub host_whitelist: Vec<String>,
    /// Largest request body, bytes.
    pub max_body: usize,
    /// Most connections open at once; more wait to be accepted.
    pub max_connections: usize,
    /// Longest time a client may take to send its request body.
    pub body_timeout: Duration,
    /// Serve the JSON-RPC 2.0 form (RPC 6.0) besides the classic one.
    pub json_rpc: bool,
    /// Told after every RPC answer and closed connection, so the heap a
    /// burst of requests freed goes back to the system (none: kept).
    pub heap: Option<weir_runtime::memory::HeapReleaser>,
}

impl RpcConfig {
    /// Loopback-only defaults on `addr`: no auth, the Host check on, 32 MiB
    /// bodies, 256 connections, 30 s to send a body, both forms served.
    pub fn new(addr: SocketAddr) -> Self {
        RpcConfig {
            addr,
            credentials: None,
            clients: NetPolicy::loopback(),
            host_check: true,
            host_whitelist: Vec::new(),
            max_body: 32 << 20,
            max_connections: 256,
            body_timeout: Duration::from_secs(30),
            json_rpc: true,
            heap: None,
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A non-loopback RPC address needs a user name and password.
    #[error(
        "the RPC address {0} is not a loopback address: set a user name and password (Basic auth)"
    )]
    AuthRequired(SocketAddr),
    /// Credentials with an empty user name.
    #[error("the RPC user name is empty")]
    EmptyUser,
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Serving failed.
    #[error("RPC server failed: {0}")]
    Serve(#[source] io::Error),
}

struct Shared<B> {
    backend: Arc<B>,
    cfg: RpcConfig,
    opts: RpcOptions,
    /// `Basic <base64>` expected, when auth is on.
    auth: Option<Vec<u8>>,
}

/// A bound RPC server, not yet serving.
pub struct RpcServer<B> {
    listener: TcpListener,
    local: SocketAddr,
    shared: Arc<Shared<B>>,
}

impl<B: Backend> RpcServer<B> {
    /// Binds `cfg.addr`. Refuses a non-loopback address without credentials.
    pub async fn bind(cfg: RpcConfig, backend: Arc<B>) -> Result<Self, ServerError> {
        check(&cfg)?;
        let listener = weir_runtime::net::listen_tcp(cfg.addr)
            .await
            .map_err(|source| ServerError::Bind {
                addr: cfg.addr,
                source,
            })?;
        Self::serve_on(listener, cfg, backend)
    }

    /// Serves on a listener bound elsewhere (e.g. inside a network
    /// namespace); `cfg.addr` is replaced by its address. Must be called
    /// inside a tokio runtime.
    pub fn from_listener(
        listener: std::net::TcpListener,
        mut cfg: RpcConfig,
        backend: Arc<B>,
    ) -> Result<Self, ServerError> {
        cfg.addr = listener.local_addr().map_err(ServerError::Serve)?;
        check(&cfg)?;
        listener.set_nonblocking(true).map_err(ServerError::Serve)?;
        let listener = TcpListener::from_std(listener).map_err(ServerError::Serve)?;
        Self::serve_on(listener, cfg, backend)
    }

    fn serve_on(
        listener: TcpListener,
        cfg: RpcConfig,
        backend: Arc<B>,
    ) -> Result<Self, ServerError> {
        let local = listener.local_addr().map_err(ServerError::Serve)?;
        let auth = cfg.credentials.as_ref().map(|c| {
            let enc = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", c.user, c.password));
            format!("Basic {enc}").into_bytes()
        });
        let opts = RpcOptions {
            json_rpc: cfg.json_rpc,
            session_id: Arc::from(new_session_id()),
        };
        Ok(RpcServer {
            listener,
            local,
            shared: Arc::new(Shared {
                backend,
                cfg,
                opts,
                auth,
            }),
        })
    }

    /// The address it listens on (with the real port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The current `X-Transmission-Session-Id`.
    pub fn session_id(&self) -> &str {
        &self.shared.opts.session_id
    }

    /// Serves until `shutdown` completes, then finishes open requests.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let app = axum::Router::new()
            .fallback(route::<B>)
            .with_state(self.shared.clone());
        let listener = PolicedListener {
            listener: self.listener,
            policy: self.shared.cfg.clients.clone(),
            slots: Arc::new(Semaphore::new(self.shared.cfg.max_connections.max(1))),
            heap: self.shared.cfg.heap.clone(),
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServerError::Serve)
    }

    /// Serves on a task of the current runtime.
    pub fn spawn(self) -> ServerHandle {
        let addr = self.local;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run(async move {
            let _ = rx.await;
        }));
        ServerHandle {
            addr,
            stop: Some(tx),
            task,
        }
    }
}

fn check(cfg: &RpcConfig) -> Result<(), ServerError> {
    if !cfg.addr.ip().is_loopback() && cfg.credentials.is_none() {
        return Err(ServerError::AuthRequired(cfg.addr));
    }
    if cfg.credentials.as_ref().is_some_and(|c| c.user.is_empty()) {
        return Err(ServerError::EmptyUser);
    }
    Ok(())
}

/// A server running on a task; dropping it stops the server.
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, finishes open requests and returns how serving
    /// ended.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(ServerError::Serve(io::Error::other(e))),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// 48 random alphanumerics from the OS (the CSRF token must not be
/// guessable by a page in the browser).
fn new_session_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut raw = [0u8; 48];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut raw))
        .is_ok();
    if !ok {
        // No /dev/urandom: SipHash under the process's random keys.
        use std::hash::{BuildHasher, Hasher};
        let keys = std::collections::hash_map::RandomState::new();
        for (i, b) in raw.iter_mut().enumerate() {
            let mut h = keys.build_hasher();
            h.write_usize(i);
            *b = h.finish() as u8;
        }
    }
    raw.iter()
        .map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char)
        .collect()
}

/// Accepts connections under the client policy, at most `slots` at once.
struct PolicedListener {
    listener: TcpListener,
    policy: NetPolicy,
    slots: Arc<Semaphore>,
    heap: Option<weir_runtime::memory::HeapReleaser>,
}

/// A connection holding its slot until closed.
struct SlotStream {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    heap: Option<weir_runtime::memory::HeapReleaser>,
}

impl Drop for SlotStream {
    fn drop(&mut self) {
        if let Some(h) = &self.heap {
            h.note();
        }
    }
}

impl tokio::io::AsyncRead for SlotStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for SlotStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl axum::serve::Listener for PolicedListener {
    type Io = SlotStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                // The semaphore is never closed; wait and retry anyway.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            match weir_runtime::net::accept_tcp(&self.policy, &self.listener).await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    return (
                        SlotStream {
                            stream,
                            _slot: slot,
                            heap: self.heap.clone(),
                        },
                        addr,
                    );
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off
                    // instead of spinning.
                    tracing::warn!("RPC accept failed: {e}");
                    drop(slot);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

fn html(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=UTF-8")],
        body,
    )
        .into_response()
}

/// Constant-time comparison (the password must not leak through timing).
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn wildcard(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    // Iterative glob with backtracking on the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0usize, 0usize, None, 0usize);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i].eq_ignore_ascii_case(&t[j])) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            i += 1;
            mark = j;
        } else if let Some(si) = star {
            i = si + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

/// Whether a `Host` header value may reach the server (Transmission's
/// rules: any IP literal, `localhost`, or a whitelisted name).
pub(crate) fn host_allowed(host: Option<&str>, whitelist: &[String]) -> bool {
    let Some(host) = host.map(str::trim) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inner, _)) => return inner.parse::<std::net::Ipv6Addr>().is_ok(),
            None => return false,
        }
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let lower = name.to_ascii_lowercase();
    if lower == "localhost" || lower == "localhost." {
        return true;
    }
    whitelist.iter().any(|w| wildcard(w, &lower))
}

fn session_id_ok(headers: &HeaderMap, id: &str) -> bool {
    headers
        .get(SESSION_ID_HEADER)
        .is_some_and(|v| same(v.as_bytes(), id.as_bytes()))
}

async fn route<B: Backend>(State(shared): State<Arc<Shared<B>>>, req: Request<Body>) -> Response {
    let headers = req.headers();
    if let Some(expected) = &shared.auth {
        let ok = headers
            .get(header::AUTHORIZATION)
            .is_some_and(|v| same(v.as_bytes(), expected));
        if !ok {
            let mut r = html(
                StatusCode::UNAUTHORIZED,
                "<h1>401: Unauthorized</h1>Unauthorized User",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"Transmission\""),
            );
            return r;
        }
    } else if shared.cfg.host_check {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        if !host_allowed(host, &shared.cfg.host_whitelist) {
            return html(
                StatusCode::MISDIRECTED_REQUEST,
                "<h1>421: Misdirected Request</h1><p>weir received your request, but the \
                 hostname was unrecognized.</p><p>Use an IP address or localhost, add the \
                 name to the RPC host whitelist, or set a password (then any hostname is \
                 allowed).</p><p>This protects against DNS rebinding attacks.</p>",
            );
        }
    }
    let path = req.uri().path();
    match path {
        "/transmission/rpc" | "/transmission/rpc/" | "/rpc" | "/rpc/" => {
            let answer = rpc_route(shared.clone(), req).await;
            if let Some(h) = &shared.cfg.heap {
                h.note();
            }
            answer
        }
        _ => web::route(req.method(), path),
    }
}

async fn rpc_route<B: Backend>(shared: Arc<Shared<B>>, req: Request<Body>) -> Response {
    let id = &shared.opts.session_id;
    if !session_id_ok(req.headers(), id) {
        let mut r = html(
            StatusCode::CONFLICT,
            "<h1>409: Conflict</h1><p>Your request had an invalid session-id header.</p>\
             <p>To fix this, follow these steps:<ol><li> When reading a response, get its \
             X-Transmission-Session-Id header and remember it<li> Add the updated header to \
             your outgoing requests<li> When you get this 409 error message, resend your \
             request with the updated header</ol></p><p>This requirement has been added to \
             help prevent CSRF attacks.</p>",
        );
        let h = r.headers_mut();
        if let Ok(v) = HeaderValue::from_str(id) {
            h.insert(SESSION_ID_HEADER, v);
        }
        if shared.cfg.json_rpc {
            h.insert(RPC_VERSION_HEADER, HeaderValue::from_static("6.0.0"));
        }
        return r;
    }
    if req.method() != Method::POST {
        return html(
            StatusCode::METHOD_NOT_ALLOWED,
            "<h1>405: Method Not Allowed</h1><p>The RPC takes POST requests.</p>",
        );
    }
    let max = shared.cfg.max_body;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large(max);
    }
    let limited = http_body_util::Limited::new(req.into_body(), max);
    let body = match tokio::time::timeout(shared.cfg.body_timeout, limited.collect()).await {
        Err(_) => {
            return html(
                StatusCode::REQUEST_TIMEOUT,
                "<h1>408: Request Timeout</h1><p>The request body did not arrive in time.</p>",
            );
        }
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return too_large(max);
            }
            return html(
                StatusCode::BAD_REQUEST,
                "<h1>400: Bad Request</h1><p>The request body could not be read.</p>",
            );
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    let reply = rpc::handle(&*shared.backend, &body, &shared.opts).await;
    let session = HeaderValue::from_str(id).ok();
    let mut r = match reply {
        Reply::Empty => StatusCode::NO_CONTENT.into_response(),
        Reply::Bytes(b) => json_response(Body::from(b)),
        Reply::Stream(mut w) => {
            let mut first = Vec::with_capacity(w.size_hint().min(CHUNK + 64 * 1024));
            if w.fill(&mut first, CHUNK) {
                json_response(Body::from(first))
            } else {
                json_response(Body::new(StreamBody {
                    first: Some(Bytes::from(first)),
                    w,
                    done: false,
                }))
            }
        }
    };
    if let Some(s) = session {
        r.headers_mut().insert(SESSION_ID_HEADER, s);
    }
    r
}

fn too_large(max: usize) -> Response {
    let body = format!(
        "<h1>413: Payload Too Large</h1><p>The request body is larger than {max} bytes.</p>"
    );
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [(header::CONTENT_TYPE, "text/html; charset=UTF-8")],
        body,
    )
        .into_response()
}

fn json_response(body: Body) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json; charset=UTF-8")],
        body,
    )
        .into_response()
}

/// A `torrent-get` answer produced chunk by chunk as the socket takes it.
struct StreamBody {
    first: Option<Bytes>,
    w: Box<TorrentsWriter>,
    done: bool,
}

impl http_body::Body for StreamBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(first))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let mut buf = Vec::with_capacity(CHUNK + 64 * 1024);
        self.done = self.w.fill(&mut buf, CHUNK);
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(buf)))))
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.first.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let wl = vec!["*.example.org".to_owned(), "nas".to_owned()];
        assert!(host_allowed(Some("127.0.0.1:9091"), &wl));
        assert!(host_allowed(Some("[::1]:9091"), &wl));
        assert!(host_allowed(Some("localhost:9091"), &wl));
        assert!(host_allowed(Some("LOCALHOST"), &wl));
        assert!(host_allowed(Some("a.example.org:1"), &wl));
        assert!(host_allowed(Some("nas"), &wl));
        assert!(!host_allowed(Some("evil.example.com"), &wl));
        assert!(!host_allowed(Some("example.org.evil.com"), &wl));
        assert!(!host_allowed(Some("[notip]:1"), &wl));
        assert!(!host_allowed(None, &wl));
    }

    #[test]
    fn globs() {
        assert!(wildcard("a*c", "abbbc"));
        assert!(wildcard("a?c", "abc"));
        assert!(!wildcard("a?c", "abbc"));
        assert!(wildcard("*", ""));
        assert!(!wildcard("", "x"));
    }

    #[test]
    fn session_ids_are_long_and_differ() {
        let a = new_session_id();
        let b = new_session_id();
        assert_eq!(a.len(), 48);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }

    #[test]
    fn constant_time_compare() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
