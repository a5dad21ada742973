//! The streams over in-memory pipes: both directions encrypted and
//! checked on the wire, plaintext selected, bytes past the handshake,
//! hostile responders' inputs and a slow sender (virtual time).

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
use weir_bt::mse::{Encryption, MseConfig, Skeys};

use super::*;

const IH: [u8; 20] = [0x5a; 20];

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut r = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| r.u8(..)).collect()
}

/// What went one way through a [`tap`].
type Log = Arc<Mutex<Vec<u8>>>;

/// Copies between `a` and `b` both ways, keeping what went each way.
fn tap(a: DuplexStream, b: DuplexStream) -> (Log, Log) {
    let (ab, ba): (Log, Log) = (Arc::default(), Arc::default());
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    for (mut r, mut w, log) in [
        (
            Box::new(ar) as Box<dyn AsyncRead + Unpin + Send>,
            Box::new(bw) as Box<dyn AsyncWrite + Unpin + Send>,
            Arc::clone(&ab),
        ),
        (Box::new(br), Box::new(aw), Arc::clone(&ba)),
    ] {
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            loop {
                let n = match r.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                log.lock().unwrap().extend_from_slice(&buf[..n]);
                if w.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = w.shutdown().await;
        });
    }
    (ab, ba)
}

fn cfg(p: Encryption) -> MseConfig {
    MseConfig::new(p)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

async fn pair(
    out: Encryption,
    inn: Encryption,
    ia: &[u8],
) -> (
    Result<MseStream<DuplexStream>, HandshakeError>,
    Result<Responded<DuplexStream>, HandshakeError>,
) {
    let (a, b) = duplex(1 << 16);
    let skeys = Skeys::from_info_hashes([&[1; 20], &IH]);
    let ia = ia.to_vec();
    let resp = tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(2);
        respond(b, cfg(inn), &skeys, &mut rng).await
    });
    let mut rng = fastrand::Rng::with_seed(1);
    let i = initiate(a, cfg(out), IH, &ia, &mut rng).await;
    (i, resp.await.unwrap())
}

#[tokio::test]
async fn rc4_both_ways_and_ciphertext_on_the_wire() {
    let (a, a2) = duplex(1 << 16);
    let (b2, b) = duplex(1 << 16);
    let (ab, ba) = tap(a2, b2);
    let skeys = Skeys::from_info_hashes([&IH]);
    let resp = tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(2);
        respond(b, cfg(Encryption::Prefer), &skeys, &mut rng).await
    });
    let mut rng = fastrand::Rng::with_seed(1);
    let mut i = initiate(a, cfg(Encryption::Require), IH, b"hello-ia", &mut rng)
        .await
        .unwrap();
    let r = resp.await.unwrap().unwrap();
    assert_eq!(r.info_hash, Some(IH));
    assert_eq!(i.crypto(), Crypto::Rc4);
    let mut r = r.stream;
    assert_eq!(r.crypto(), Crypto::Rc4);
    // IA comes out of the responder's stream first, decrypted.
    let mut got = [0u8; 8];
    r.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"hello-ia");
    // Large buffers both ways (more than a scratch buffer, odd sizes),
    // vectored and not.
    let one = data(3 * SCRATCH + 17, 3);
    let two = data(SCRATCH / 2 + 5, 4);
    let (one2, two2) = (one.clone(), two.clone());
    let w = tokio::spawn(async move {
        let (h, t) = one2.split_at(1000);
        let slices = [IoSlice::new(h), IoSlice::new(t)];
        let mut done = 0;
        while done < one2.len() {
            // Re-slice past what was written.
            let n = if done < h.len() {
                i.write_vectored(&[IoSlice::new(&h[done..]), slices[1]])
                    .await
                    .unwrap()
            } else {
                i.write(&t[done - h.len()..]).await.unwrap()
            };
            assert!(n > 0 && n <= SCRATCH, "one write took {n} bytes");
            done += n;
        }
        i.flush().await.unwrap();
        let mut back = vec![0u8; two2.len()];
        i.read_exact(&mut back).await.unwrap();
        assert_eq!(back, two2);
        i
    });
    let mut got = vec![0u8; one.len()];
    r.read_exact(&mut got).await.unwrap();
    assert!(got == one, "initiator to responder differs");
    r.write_all(&two).await.unwrap();
    r.flush().await.unwrap();
    w.await.unwrap();
    // Neither payload appears in clear on the wire.
    assert!(!contains(&ab.lock().unwrap(), &one[5000..5032]));
    assert!(!contains(&ba.lock().unwrap(), &two[100..132]));
    assert!(!contains(&ab.lock().unwrap(), b"hello-ia"));
}

#[tokio::test]
async fn plaintext_selected_passes_bytes_through() {
    let (i, r) = pair(Encryption::Allow, Encryption::Allow, b"ia").await;
    let mut i = i.unwrap();
    let mut r = r.unwrap();
    assert_eq!(i.crypto(), Crypto::Plaintext);
    assert_eq!(r.stream.crypto(), Crypto::Plaintext);
    let mut ia = [0u8; 2];
    r.stream.read_exact(&mut ia).await.unwrap();
    assert_eq!(&ia, b"ia");
    i.write_all(b"after").await.unwrap();
    i.flush().await.unwrap();
    let mut got = [0u8; 5];
    r.stream.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"after");
}

#[tokio::test]
async fn plaintext_bittorrent_handshake_is_told_apart_with_what_followed() {
    let (mut a, b) = duplex(1 << 16);
    let mut hs = vec![19u8];
    hs.extend_from_slice(b"BitTorrent protocol");
    hs.extend_from_slice(&[0; 48]);
    hs.extend_from_slice(b"then messages");
    a.write_all(&hs).await.unwrap();
    let skeys = Skeys::new();
    let mut rng = fastrand::Rng::with_seed(5);
    let mut r = respond(b, cfg(Encryption::Prefer), &skeys, &mut rng)
        .await
        .unwrap();
    assert_eq!(r.info_hash, None);
    assert_eq!(r.stream.crypto(), Crypto::Plaintext);
    let mut got = vec![0u8; hs.len()];
    r.stream.read_exact(&mut got).await.unwrap();
    assert_eq!(got, hs);
    // The same under `require`: refused, by kind.
    let (mut a, b) = duplex(1 << 16);
    a.write_all(&hs).await.unwrap();
    let e = respond(b, cfg(Encryption::Require), &skeys, &mut rng)
        .await
        .unwrap_err();
    assert!(
        matches!(e, HandshakeError::Mse(MseError::PlaintextRefused)),
        "{e}"
    );
}

#[tokio::test]
async fn bytes_past_the_handshake_reach_the_initiator() {
    // The responder's first payload follows its handshake at once: the
    // initiator's stream hands it out first, whatever the read size.
    let (a, b) = duplex(1 << 16);
    let skeys = Skeys::from_info_hashes([&IH]);
    let resp = tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(9);
        let mut r = respond(b, cfg(Encryption::Prefer), &skeys, &mut rng)
            .await
            .unwrap();
        r.stream.write_all(b"payload right behind").await.unwrap();
        r.stream.flush().await.unwrap();
        r
    });
    let mut rng = fastrand::Rng::with_seed(8);
    let mut i = initiate(a, cfg(Encryption::Prefer), IH, b"x", &mut rng)
        .await
        .unwrap();
    let mut got = [0u8; 20];
    for chunk in got.chunks_mut(3) {
        i.read_exact(chunk).await.unwrap();
    }
    assert_eq!(&got, b"payload right behind");
    drop(resp.await.unwrap());
}

#[tokio::test]
async fn policies_that_do_not_meet_fail_by_kind() {
    // prefer/allow initiator against an `off` responder: refused there,
    // closed here (the engine then falls back to plaintext).
    let (i, r) = pair(Encryption::Prefer, Encryption::Off, b"").await;
    assert!(
        matches!(r, Err(HandshakeError::Mse(MseError::EncryptionRefused))),
        "{r:?}"
    );
    assert!(
        matches!(
            i,
            Err(HandshakeError::Closed { .. } | HandshakeError::ShortSecret)
        ),
        "{i:?}"
    );
    // An `off` initiator does not start MSE at all.
    let (i, _) = pair(Encryption::Off, Encryption::Prefer, b"").await;
    assert!(
        matches!(i, Err(HandshakeError::Mse(MseError::PolicyForbids(_)))),
        "{i:?}"
    );
    // A torrent the responder does not have.
    let (a, b) = duplex(1 << 16);
    let resp = tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(2);
        respond(b, cfg(Encryption::Prefer), &Skeys::new(), &mut rng).await
    });
    let mut rng = fastrand::Rng::with_seed(1);
    let _ = initiate(a, cfg(Encryption::Prefer), IH, b"", &mut rng).await;
    let r = resp.await.unwrap();
    assert!(
        matches!(r, Err(HandshakeError::Mse(MseError::UnknownInfoHash))),
        "{r:?}"
    );
}

/// A valid Ya (the generator, 2) followed by `tail`.
fn ya_then(tail: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 96];
    v[95] = 2;
    v.extend_from_slice(tail);
    v
}

#[tokio::test]
async fn responder_refuses_padding_past_the_limit() {
    let (mut a, b) = duplex(1 << 16);
    let hostile = ya_then(&[0x55; 1200]);
    let w = tokio::spawn(async move {
        let _ = a.write_all(&hostile).await;
        a
    });
    let mut rng = fastrand::Rng::with_seed(3);
    let e = respond(b, cfg(Encryption::Prefer), &Skeys::new(), &mut rng)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            HandshakeError::Mse(MseError::SyncNotFound { limit, .. }) if limit == 96 + 512 + 20
        ),
        "{e}"
    );
    drop(w.await.unwrap());
}

/// A stream that counts the bytes read from it.
#[derive(Debug)]
struct Counting {
    inner: DuplexStream,
    read: Arc<std::sync::atomic::AtomicUsize>,
}

impl AsyncRead for Counting {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        this.read
            .fetch_add(buf.filled().len() - before, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Counting {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn responder_refuses_garbage_and_bounds_bytes_read() {
    // Random bytes: never a plaintext handshake, never a req1 pattern.
    let (mut a, b) = duplex(1 << 20);
    let g = data(512 * 1024, 11);
    a.write_all(&g).await.unwrap();
    let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let b = Counting {
        inner: b,
        read: read.clone(),
    };
    let mut rng = fastrand::Rng::with_seed(4);
    let e = respond(b, cfg(Encryption::Prefer), &Skeys::new(), &mut rng)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            HandshakeError::Mse(MseError::SyncNotFound { .. } | MseError::BadPublicKey)
        ),
        "{e}"
    );
    // It read at most what a handshake may take, though 512 KiB waited.
    let n = read.load(Ordering::Relaxed);
    assert!(n >= 96, "read {n}");
    assert!(n <= MAX_RESPONDER_PREFIX + 4096, "read {n}");
    drop(a);
}

#[tokio::test(start_paused = true)]
async fn slow_sender_times_out() {
    let (mut a, b) = duplex(1 << 16);
    let hello = ya_then(&[]);
    // One byte, then silence: the deadline (virtual time) ends it.
    let w = tokio::spawn(async move {
        a.write_all(&hello[..1]).await.unwrap();
        a
    });
    let mut c = cfg(Encryption::Prefer);
    c.timeout = Duration::from_secs(7);
    let mut rng = fastrand::Rng::with_seed(6);
    let started = tokio::time::Instant::now();
    let e = respond(b, c, &Skeys::new(), &mut rng).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(e, HandshakeError::Timeout(d) if d == c.timeout),
        "{e}"
    );
    assert!(
        took >= c.timeout && took < c.timeout + Duration::from_secs(1),
        "{took:?}"
    );
    drop(w.await.unwrap());
}

#[tokio::test]
async fn counters_sort_failures_by_kind() {
    let c = MseCounters::default();
    c.failed(&HandshakeError::Mse(MseError::PadTooLong {
        which: "PadC",
        len: 600,
    }));
    c.failed(&HandshakeError::Timeout(Duration::from_secs(1)));
    c.failed(&HandshakeError::Mse(MseError::IaTooLong { len: 9, max: 1 }));
    c.failed(&HandshakeError::Closed { read: 0 });
    c.established(true, Crypto::Rc4, false);
    c.established(false, Crypto::Plaintext, true);
    let s = c.snapshot();
    assert_eq!(
        s,
        MseStats {
            pad_too_long: 1,
            timeouts: 1,
            too_much: 1,
            other: 1,
            in_rc4: 1,
            out_plaintext: 1,
            fallbacks: 1,
            ..MseStats::default()
        }
    );
}

#[tokio::test]
async fn the_scratch_buffer_is_reused_across_writes_and_let_go_when_idle() {
    // A pipe large enough that every write drains at once.
    let (a, b) = duplex(4 << 20);
    let skeys = Skeys::from_info_hashes([&IH]);
    let resp = tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(2);
        respond(b, cfg(Encryption::Prefer), &skeys, &mut rng).await
    });
    let mut rng = fastrand::Rng::with_seed(1);
    let mut i = initiate(a, cfg(Encryption::Prefer), IH, b"", &mut rng)
        .await
        .unwrap();
    let _r = resp.await.unwrap().unwrap();
    let block = vec![7u8; SCRATCH];
    let mut ends = Vec::new();
    for _ in 0..4 {
        assert_eq!(i.write(&block).await.unwrap(), SCRATCH);
        assert!(i.wr.scratch.is_empty(), "not drained");
        // Sent through to its end: the same allocation each time.
        ends.push(i.wr.scratch.as_ptr());
    }
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
    i.flush().await.unwrap();
    assert_eq!(i.wr.scratch.capacity(), 0, "kept while idle");
}
