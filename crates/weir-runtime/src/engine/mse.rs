//! MSE/PE in the engine: the session's policy, outgoing BitTorrent
//! connections tried in the policy's order (a peer that refused MSE is
//! tried in plaintext on a new connection, and remembered, the way
//! libtorrent marks such an address), accepted connections told apart
//! (plaintext or MSE, the torrent found by `HASH('req2', SKEY)` among every
//! torrent of the session), and the counts by outcome.
//!
//! Handshakes run in the dial and accept tasks, never on the driver; after
//! them each connection's reader and writer tasks run RC4 over whole
//! buffers ([`crate::mse`]).

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use weir_bt::mse::{Encryption, MseConfig, Outgoing, SkeyLookup, Skeys};
use weir_bt::wire::Handshake;

use super::wire::read_handshake;
use crate::mse::{HandshakeError, MseCounters, MseStats, MseStream, initiate, respond};

/// Addresses remembered as "try plaintext first" at most.
const MAX_REMEMBERED: usize = 4096;
/// MSE attempts again with new keys after libtorrent's short-secret close.
const SHORT_SECRET_RETRIES: usize = 2;

/// The engine's MSE state, cloned into every dial and accept task.
#[derive(Clone, Debug)]
pub(crate) struct MseCtx {
    /// The session's policy (a change applies to connections opened after).
    pub(crate) policy: Encryption,
    /// Every torrent of the session, for incoming SKEY lookups.
    pub(crate) skeys: Arc<RwLock<Skeys>>,
    /// Outcomes by kind.
    pub(crate) counters: Arc<MseCounters>,
    /// Addresses that refused MSE and took plaintext.
    plain_first: Arc<Mutex<BTreeSet<SocketAddr>>>,
    /// Each attempt (connect and both handshakes) must end within this.
    pub(crate) timeout: Duration,
}

impl MseCtx {
    pub(crate) fn new(policy: Encryption, timeout: Duration) -> Self {
        MseCtx {
            policy,
            skeys: Arc::default(),
            counters: Arc::default(),
            plain_first: Arc::default(),
            timeout,
        }
    }

    fn config(&self) -> MseConfig {
        let mut c = MseConfig::new(self.policy);
        c.timeout = self.timeout;
        c
    }

    /// The counts now.
    pub(crate) fn stats(&self) -> MseStats {
        self.counters.snapshot()
    }

    /// A torrent joined the session: MSE peers may ask for it.
    pub(crate) fn torrent_added(&self, info_hash: [u8; 20]) {
        self.skeys
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(info_hash);
    }

    /// A torrent left the session.
    pub(crate) fn torrent_removed(&self, info_hash: &[u8; 20]) {
        self.skeys
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(info_hash);
    }

    /// What to try for `addr`, in order.
    pub(crate) fn attempts(&self, addr: SocketAddr) -> Vec<Outgoing> {
        let mut a = self.policy.outgoing_attempts().to_vec();
        if self.policy == Encryption::Prefer && self.remembered(addr) {
            a.reverse();
        }
        a
    }

    fn remembered(&self, addr: SocketAddr) -> bool {
        self.plain_first
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&addr)
    }

    fn remember(&self, addr: SocketAddr, plain: bool) {
        let mut m = self.plain_first.lock().unwrap_or_else(|e| e.into_inner());
        if !plain {
            m.remove(&addr);
            return;
        }
        if m.len() >= MAX_REMEMBERED {
            m.pop_first();
        }
        m.insert(addr);
    }
}

/// An outgoing BitTorrent connection after both handshakes.
#[derive(Debug)]
pub(crate) struct Connected<S> {
    pub(crate) stream: MseStream<S>,
    pub(crate) theirs: Handshake,
    pub(crate) leftover: BytesMut,
}

/// Why an outgoing connection failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    /// The TCP connection itself failed (nothing else is tried).
    #[error("connect: {0}")]
    Connect(std::io::Error),
    /// The last attempt's handshake failed.
    #[error("{mode:?} attempt: {error}")]
    Handshake {
        /// What it tried.
        mode: Outgoing,
        /// Why it failed.
        error: HandshakeError,
    },
}

/// Opens an outgoing BitTorrent connection: for each of the policy's
/// attempts (see [`MseCtx::attempts`]) a new stream from `connect`, MSE
/// (our handshake as IA) or plaintext, then our `preamble` and their
/// handshake. A connect failure ends it; a handshake failure moves on to
/// the next attempt (after libtorrent's short-secret close, MSE again with
/// new keys first).
pub(crate) async fn connect_bt<S, C, F>(
    ctx: &MseCtx,
    addr: SocketAddr,
    ours: &Handshake,
    preamble: &[u8],
    mut connect: C,
) -> Result<Connected<S>, DialError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: FnMut() -> F,
    F: Future<Output = std::io::Result<S>>,
{
    let attempts = ctx.attempts(addr);
    let mut rng = fastrand::Rng::new();
    let mut last = None;
    let mut short_retries = 0;
    let mut i = 0;
    while i < attempts.len() {
        let mode = attempts[i];
        let s = match tokio::time::timeout(ctx.timeout, connect()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(DialError::Connect(e)),
            Err(_) => {
                return Err(DialError::Connect(std::io::ErrorKind::TimedOut.into()));
            }
        };
        let r = tokio::time::timeout(ctx.timeout, attempt(ctx, s, mode, ours, preamble, &mut rng))
            .await
            .unwrap_or(Err(HandshakeError::Timeout(ctx.timeout)));
        match r {
            Ok(c) => {
                let crypto = c.stream.crypto();
                ctx.counters.established(false, crypto, i > 0);
                if ctx.policy == Encryption::Prefer {
                    ctx.remember(addr, mode == Outgoing::Plaintext && i > 0);
                }
                return Ok(c);
            }
            Err(HandshakeError::ShortSecret) if short_retries < SHORT_SECRET_RETRIES => {
                short_retries += 1;
                tracing::debug!("{addr}: short MSE secret closed by the peer; new keys");
                continue;
            }
            Err(e) => {
                tracing::debug!("{addr}: {mode:?} attempt failed: {e}");
                ctx.counters.failed(&e);
                last = Some(DialError::Handshake { mode, error: e });
            }
        }
        i += 1;
    }
    Err(last.unwrap_or(DialError::Handshake {
        mode: Outgoing::Plaintext,
        error: HandshakeError::Mse(weir_bt::mse::MseError::PolicyForbids(ctx.policy)),
    }))
}

async fn attempt<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: &MseCtx,
    s: S,
    mode: Outgoing,
    ours: &Handshake,
    preamble: &[u8],
    rng: &mut fastrand::Rng,
) -> Result<Connected<S>, HandshakeError> {
    let mut hs = BytesMut::with_capacity(Handshake::LEN + preamble.len());
    ours.encode(&mut hs);
    let mut stream = match mode {
        Outgoing::Plaintext => {
            // Messages valid for any peer ride along with our handshake.
            hs.extend_from_slice(preamble);
            let mut s = MseStream::plain(s, Bytes::new());
            s.write_all(&hs).await?;
            s
        }
        Outgoing::Mse => {
            // IA is the handshake alone (libtorrent drops a longer one).
            let mut s = initiate(s, ctx.config(), ours.info_hash, &hs, rng).await?;
            s.write_all(preamble).await?;
            s
        }
    };
    stream.flush().await?;
    let (theirs, leftover) = read_handshake(&mut stream).await?;
    if theirs.info_hash != ours.info_hash {
        return Err(HandshakeError::OtherTorrent);
    }
    Ok(Connected {
        stream,
        theirs,
        leftover,
    })
}

/// An accepted BitTorrent connection after the peer's handshake (ours not
/// sent yet).
#[derive(Debug)]
pub(crate) struct Accepted<S> {
    pub(crate) stream: MseStream<S>,
    pub(crate) theirs: Handshake,
    pub(crate) leftover: BytesMut,
}

/// Tells plaintext from MSE on an accepted `s` and reads the peer's
/// BitTorrent handshake (which must name the torrent MSE settled on).
pub(crate) async fn accept_bt<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: &MseCtx,
    s: S,
) -> Result<Accepted<S>, HandshakeError> {
    let r = tokio::time::timeout(ctx.timeout, async {
        let mut rng = fastrand::Rng::new();
        let skeys = SharedSkeys(&ctx.skeys);
        let mut r = respond(s, ctx.config(), &skeys, &mut rng).await?;
        let (theirs, leftover) = read_handshake(&mut r.stream).await?;
        if r.info_hash.is_some_and(|h| h != theirs.info_hash) {
            return Err(HandshakeError::OtherTorrent);
        }
        Ok(Accepted {
            stream: r.stream,
            theirs,
            leftover,
        })
    })
    .await
    .unwrap_or(Err(HandshakeError::Timeout(ctx.timeout)));
    match &r {
        Ok(a) => ctx.counters.established(true, a.stream.crypto(), false),
        Err(e) => ctx.counters.failed(e),
    }
    r
}

/// The session's torrents as the responder looks them up (one map access
/// under the lock; torrents added meanwhile are found).
struct SharedSkeys<'a>(&'a RwLock<Skeys>);

impl SkeyLookup for SharedSkeys<'_> {
    fn lookup(&self, req2: &[u8; 20]) -> Option<[u8; 20]> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .lookup(req2)
    }
}

#[cfg(test)]
mod tests;
