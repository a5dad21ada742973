//! A small RPC client for tests and benches: the classic form with the
//! session-id handshake, over sockets made under a network policy. Also
//! [`fetch`], a bounded `http://` GET a backend can use for `torrent-add`
//! of a URL.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::header::{self, HeaderValue};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use weir_core::policy::NetPolicy;

use crate::server::SESSION_ID_HEADER;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection (or the policy refused the address).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    /// The request could not be built (a bad header value or URL).
    #[error("bad request: {0}")]
    Request(String),
    /// The server answered with an unexpected status.
    #[error("HTTP status {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The body was larger than allowed.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The answer is not the JSON expected.
    #[error("bad JSON answer: {0}")]
    Json(#[from] serde_json::Error),
    /// The RPC answered with a `result` other than `success`.
    #[error("RPC error: {0}")]
    Rpc(String),
    /// No answer in time.
    #[error("timed out")]
    Timeout,
}

/// One HTTP answer, as received.
#[derive(Clone, Debug)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// Body.
    pub body: Bytes,
}

/// A classic-form client of one server.
pub struct RpcClient {
    addr: SocketAddr,
    path: String,
    policy: NetPolicy,
    auth: Option<HeaderValue>,
    session_id: Mutex<Option<String>>,
    timeout: Duration,
}

impl RpcClient {
    /// A client of `addr` at `/transmission/rpc`, loopback policy, 60 s
    /// timeout.
    pub fn new(addr: SocketAddr) -> Self {
        RpcClient {
            addr,
            path: "/transmission/rpc".to_owned(),
            policy: NetPolicy::loopback(),
            auth: None,
            session_id: Mutex::new(None),
            timeout: Duration::from_secs(60),
        }
    }

    /// Sends Basic auth.
    pub fn with_auth(mut self, user: &str, password: &str) -> Self {
        let enc = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.auth = HeaderValue::from_str(&format!("Basic {enc}")).ok();
        self
    }

    /// Uses `path` instead of `/transmission/rpc`.
    pub fn with_path(mut self, path: &str) -> Self {
        self.path = path.to_owned();
        self
    }

    /// Uses `policy` for its sockets.
    pub fn with_policy(mut self, policy: NetPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The session id learnt so far.
    pub fn session_id(&self) -> Option<String> {
        self.session_id.lock().ok().and_then(|g| g.clone())
    }

    /// Calls `method` with `arguments`; its answer's `arguments`. A 409
    /// is answered by retrying once with the new session id.
    pub async fn call(&self, method: &str, arguments: Value) -> Result<Value, ClientError> {
        let body = serde_json::to_vec(&json!({"method": method, "arguments": arguments}))?;
        let mut last = None;
        for _ in 0..2 {
            let id = self.session_id();
            let r = self.post(Bytes::from(body.clone()), id.as_deref()).await?;
            if r.status == 409 {
                let id = r
                    .headers
                    .get(SESSION_ID_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if let Ok(mut g) = self.session_id.lock() {
                    *g = id;
                }
                last = Some(r);
                continue;
            }
            if r.status != 200 {
                return Err(status_error(&r));
            }
            let v: Value = serde_json::from_slice(&r.body)?;
            return match v.get("result").and_then(Value::as_str) {
                Some("success") => Ok(v.get("arguments").cloned().unwrap_or(json!({}))),
                Some(other) => Err(ClientError::Rpc(other.to_owned())),
                None => Err(ClientError::Rpc("answer without result".to_owned())),
            };
        }
        Err(last.map_or(ClientError::Rpc("no answer".to_owned()), |r| {
            status_error(&r)
        }))
    }

    /// POSTs `body` as is with `session_id` (none: no header); the raw
    /// answer. For tests of what the server does with bad input.
    pub async fn post(
        &self,
        body: Bytes,
        session_id: Option<&str>,
    ) -> Result<RawResponse, ClientError> {
        let mut req = Request::post(self.path.as_str())
            .header(header::HOST, self.addr.to_string())
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(id) = session_id {
            req = req.header(SESSION_ID_HEADER, id);
        }
        if let Some(a) = &self.auth {
            req = req.header(header::AUTHORIZATION, a.clone());
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| ClientError::Request(e.to_string()))?;
        self.send(req).await
    }

    /// Sends any request (its `Host` is the caller's) and reads the answer
    /// (at most 256 MiB).
    pub async fn send(&self, req: Request<Full<Bytes>>) -> Result<RawResponse, ClientError> {
        tokio::time::timeout(
            self.timeout,
            exchange(&self.policy, self.addr, req, 256 << 20),
        )
        .await
        .map_err(|_| ClientError::Timeout)?
    }
}

fn status_error(r: &RawResponse) -> ClientError {
    ClientError::Status {
        status: r.status,
        body: String::from_utf8_lossy(&r.body[..r.body.len().min(300)]).into_owned(),
    }
}

/// Bytes read from the socket at a time: an answer of a few hundred KiB
/// (a `torrent-get` of 1,000 transfers) arrives in a few reads.
const READ_BUF: usize = 256 * 1024;

async fn exchange(
    policy: &NetPolicy,
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
    max: usize,
) -> Result<RawResponse, ClientError> {
    let stream = weir_runtime::net::connect_tcp(policy, addr)
        .await
        .map_err(|source| ClientError::Connect { addr, source })?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .read_buf_exact_size(Some(READ_BUF))
        .handshake(TokioIo::new(stream))
        .await?;
    // The connection is driven in this task beside the exchange, not in a
    // task of its own: each chunk of the answer is then read and collected
    // without a wake-up of another task.
    let exchange = async {
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = http_body_util::Limited::new(resp.into_body(), max)
            .collect()
            .await
            .map_err(|e| match e.downcast::<hyper::Error>() {
                Ok(h) => ClientError::Http(*h),
                Err(_) => ClientError::TooLarge(max),
            })?
            .to_bytes();
        Ok::<_, ClientError>((status, headers, body))
    };
    tokio::pin!(exchange, conn);
    let (status, headers, body) = tokio::select! {
        biased;
        r = &mut exchange => r?,
        c = &mut conn => {
            c?;
            exchange.await?
        }
    };
    Ok(RawResponse {
        status,
        headers,
        body,
    })
}

/// GETs an `http://` URL (no TLS) under `policy`, with `cookies`, reading
/// at most `max` bytes within `timeout`; only a 200 answer is accepted.
/// Host names are resolved only when the policy allows name resolution.
pub async fn fetch(
    policy: &NetPolicy,
    url: &str,
    cookies: Option<&str>,
    max: usize,
    timeout: Duration,
) -> Result<Bytes, ClientError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ClientError::Request(format!("only http:// URLs can be fetched: {url}")))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = resolve(policy, authority).await?;
    let mut req = Request::get(path).header(header::HOST, authority);
    if let Some(c) = cookies {
        req = req.header(header::COOKIE, c);
    }
    let req = req
        .body(Full::new(Bytes::new()))
        .map_err(|e| ClientError::Request(e.to_string()))?;
    let r = tokio::time::timeout(timeout, exchange(policy, addr, req, max))
        .await
        .map_err(|_| ClientError::Timeout)??;
    if r.status != 200 {
        return Err(status_error(&r));
    }
    Ok(r.body)
}

async fn resolve(policy: &NetPolicy, authority: &str) -> Result<SocketAddr, ClientError> {
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    if let Ok(a) = with_port.parse::<SocketAddr>() {
        return Ok(a);
    }
    if !policy.allows_name_resolution() {
        return Err(ClientError::Request(format!(
            "{authority}: host names are not resolved under the network policy {policy}"
        )));
    }
    let mut addrs = tokio::net::lookup_host(with_port.as_str())
        .await
        .map_err(|e| ClientError::Request(format!("{authority}: {e}")))?;
    addrs
        .find(|a| policy.allows(a.ip()))
        .ok_or_else(|| ClientError::Request(format!("{authority}: no allowed address")))
}
