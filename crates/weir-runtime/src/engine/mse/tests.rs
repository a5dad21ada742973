//! Outgoing attempts and fallback, and accepted connections, over
//! in-memory pipes: each "connect" makes a new pipe with a peer of a given
//! policy behind it.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, DuplexStream, duplex};
use weir_bt::mse::Crypto;

use super::*;
use crate::mse::MseStats;

const IH: [u8; 20] = [0x42; 20];

fn ours() -> Handshake {
    Handshake::new(IH, *b"-WR0100-testtesttest")
}

/// A peer with policy `p` on a fresh pipe: answers MSE or plaintext as
/// its policy allows, then the BitTorrent handshake, then echoes "ping".
fn peer(
    p: Encryption,
    tried: Arc<AtomicUsize>,
) -> impl FnMut() -> std::future::Ready<std::io::Result<DuplexStream>> {
    move || {
        tried.fetch_add(1, Ordering::SeqCst);
        let (a, b) = duplex(1 << 16);
        tokio::spawn(async move {
            let ctx = MseCtx::new(p, Duration::from_secs(5));
            ctx.torrent_added(IH);
            let Ok(mut acc) = accept_bt(&ctx, b).await else {
                return;
            };
            let mut out = BytesMut::new();
            Handshake::new(IH, *b"-XX0000-peerpeerpeer").encode(&mut out);
            acc.stream.write_all(&out).await.unwrap();
            acc.stream.write_all(b"pong").await.unwrap();
            acc.stream.flush().await.unwrap();
            let mut got = acc.leftover.to_vec();
            while got.len() < 4 {
                let mut b = [0u8; 4];
                let n = acc.stream.read(&mut b).await.unwrap();
                if n == 0 {
                    return;
                }
                got.extend_from_slice(&b[..n]);
            }
            assert_eq!(&got, b"ping");
        });
        std::future::ready(Ok(a))
    }
}

async fn dial(ctx: &MseCtx, p: Encryption) -> (Result<Connected<DuplexStream>, DialError>, usize) {
    let tried = Arc::new(AtomicUsize::new(0));
    let addr: SocketAddr = "127.0.0.9:6881".parse().unwrap();
    let r = connect_bt(ctx, addr, &ours(), b"ping", peer(p, tried.clone())).await;
    (r, tried.load(Ordering::SeqCst))
}

/// The first bytes after the handshake are the peer's "pong".
async fn pong(c: &mut Connected<DuplexStream>) {
    let mut got = c.leftover.to_vec();
    while got.len() < 4 {
        let mut b = [0u8; 4];
        let n = c.stream.read(&mut b).await.unwrap();
        assert!(n > 0, "closed before pong");
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(&got, b"pong");
}

#[tokio::test]
async fn prefer_falls_back_to_plaintext_and_remembers_the_address() {
    let ctx = MseCtx::new(Encryption::Prefer, Duration::from_secs(5));
    let addr: SocketAddr = "127.0.0.9:6881".parse().unwrap();
    assert_eq!(ctx.attempts(addr), [Outgoing::Mse, Outgoing::Plaintext]);
    let (r, tried) = dial(&ctx, Encryption::Off).await;
    let mut c = r.unwrap();
    assert_eq!(tried, 2, "one refused MSE connection, one plaintext");
    assert_eq!(c.stream.crypto(), Crypto::Plaintext);
    assert_eq!(c.theirs.info_hash, IH);
    pong(&mut c).await;
    let s = ctx.stats();
    assert_eq!(
        (s.out_plaintext, s.fallbacks, s.out_rc4),
        (1, 1, 0),
        "{s:?}"
    );
    // Next time plaintext goes first: one connection.
    assert_eq!(ctx.attempts(addr), [Outgoing::Plaintext, Outgoing::Mse]);
    let (r, tried) = dial(&ctx, Encryption::Off).await;
    assert_eq!(r.unwrap().stream.crypto(), Crypto::Plaintext);
    assert_eq!(tried, 1);
}

#[tokio::test]
async fn prefer_against_an_encryption_only_peer_is_rc4_at_once() {
    let ctx = MseCtx::new(Encryption::Prefer, Duration::from_secs(5));
    let (r, tried) = dial(&ctx, Encryption::Require).await;
    let mut c = r.unwrap();
    assert_eq!((tried, c.stream.crypto()), (1, Crypto::Rc4));
    pong(&mut c).await;
    assert_eq!(
        ctx.stats(),
        MseStats {
            out_rc4: 1,
            ..MseStats::default()
        }
    );
}

#[tokio::test]
async fn allow_tries_plaintext_then_mse() {
    let ctx = MseCtx::new(Encryption::Allow, Duration::from_secs(5));
    let (r, tried) = dial(&ctx, Encryption::Require).await;
    let mut c = r.unwrap();
    assert_eq!((tried, c.stream.crypto()), (2, Crypto::Rc4));
    pong(&mut c).await;
    let s = ctx.stats();
    assert_eq!((s.out_rc4, s.fallbacks), (1, 1), "{s:?}");
    // Against a peer that takes both: plaintext, one connection.
    let (r, tried) = dial(&ctx, Encryption::Prefer).await;
    assert_eq!((tried, r.unwrap().stream.crypto()), (1, Crypto::Plaintext));
}

#[tokio::test]
async fn require_and_off_never_cross() {
    let ctx = MseCtx::new(Encryption::Require, Duration::from_secs(5));
    let (r, tried) = dial(&ctx, Encryption::Off).await;
    assert_eq!(tried, 1);
    assert!(
        matches!(
            r,
            Err(DialError::Handshake {
                mode: Outgoing::Mse,
                ..
            })
        ),
        "{r:?}"
    );
    let ctx = MseCtx::new(Encryption::Off, Duration::from_secs(5));
    let (r, tried) = dial(&ctx, Encryption::Require).await;
    assert_eq!(tried, 1);
    assert!(
        matches!(
            r,
            Err(DialError::Handshake {
                mode: Outgoing::Plaintext,
                ..
            })
        ),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_refused_connect_is_not_retried() {
    let ctx = MseCtx::new(Encryption::Prefer, Duration::from_secs(5));
    let tried = AtomicUsize::new(0);
    let addr: SocketAddr = "127.0.0.9:1".parse().unwrap();
    let r = connect_bt::<DuplexStream, _, _>(&ctx, addr, &ours(), b"", || {
        tried.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Err(std::io::ErrorKind::ConnectionRefused.into()))
    })
    .await;
    assert!(matches!(r, Err(DialError::Connect(_))), "{r:?}");
    assert_eq!(tried.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn skeys_follow_the_session_and_an_unknown_torrent_is_counted() {
    let ctx = MseCtx::new(Encryption::Prefer, Duration::from_secs(5));
    let (a, b) = duplex(1 << 16);
    let dialer = MseCtx::new(Encryption::Require, Duration::from_secs(5));
    let d = tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut hs = BytesMut::new();
        ours().encode(&mut hs);
        crate::mse::initiate(a, dialer.config(), IH, &hs, &mut rng).await
    });
    let r = accept_bt(&ctx, b).await;
    assert!(
        matches!(
            r,
            Err(HandshakeError::Mse(weir_bt::mse::MseError::UnknownInfoHash))
        ),
        "{r:?}"
    );
    let _ = d.await;
    assert_eq!(ctx.stats().unknown_torrent, 1);
    // Added: found.
    ctx.torrent_added(IH);
    let (a, b) = duplex(1 << 16);
    let dialer = MseCtx::new(Encryption::Require, Duration::from_secs(5));
    tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut hs = BytesMut::new();
        ours().encode(&mut hs);
        let s = crate::mse::initiate(a, dialer.config(), IH, &hs, &mut rng).await;
        // Keep the pipe open until the test ends.
        std::future::pending::<()>().await;
        drop(s);
    });
    let acc = accept_bt(&ctx, b).await.unwrap();
    assert_eq!(acc.theirs.info_hash, IH);
    assert_eq!(acc.stream.crypto(), Crypto::Rc4);
    assert_eq!(ctx.stats().in_rc4, 1);
    // Removed: unknown again.
    ctx.torrent_removed(&IH);
    assert!(ctx.skeys.read().unwrap().is_empty());
}
