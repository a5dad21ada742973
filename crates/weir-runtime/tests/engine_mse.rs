//! The engine with MSE/PE on loopback: engine to engine under each pair of
//! policies that meet (RC4, the fallbacks either way) and one that does
//! not, and hostile initiators against a seeder (padding past the limit,
//! garbage, an initial payload past the bound, a slow sender), each
//! closed and counted by kind.

mod engine_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use engine_common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_bt::metainfo::Metainfo;
use weir_bt::mse::{Encryption, Initiator, MseConfig};
use weir_runtime::engine::{Engine, EngineConfig};
use weir_runtime::mse::MseStats;

/// Every test ends within this, or fails.
const LIMIT: Duration = Duration::from_secs(60);
const SIZE: usize = 3 << 20;

fn with(p: Encryption) -> EngineConfig {
    let mut c = config();
    c.encryption = p;
    c
}

/// Downloads `meta` from `peer` under `cfg` to its end; the download's
/// bytes and the leecher's MSE counts.
async fn fetch(
    meta: &Arc<Metainfo>,
    tag: &str,
    peer: SocketAddr,
    cfg: EngineConfig,
) -> (Vec<u8>, MseStats) {
    let dst = tmp(tag);
    let e = Engine::start(cfg).await.unwrap();
    let p = e.progress();
    e.add_torrent(download_source(meta.clone(), &dst, vec![peer]))
        .await
        .unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(40), e.wait())
        .await
        .expect("the download did not end in time")
        .unwrap();
    assert!(summary.transfers[0].complete_at.is_some());
    let mse = p.borrow().mse;
    (std::fs::read(dst.join("t.bin")).unwrap(), mse)
}

/// Engine to engine under the policies given; the seeder's counts once
/// `seeder_saw` holds of them (they are published a few times a second),
/// and the leecher's.
async fn pair(
    tag: &str,
    seed_p: Encryption,
    leech_p: Encryption,
    seeder_saw: impl Fn(&MseStats) -> bool,
) -> (MseStats, MseStats) {
    let src = tmp(&format!("{tag}-src"));
    let meta = torrent(&src, SIZE);
    let (seed, _) = seeder(meta.clone(), &src, with(seed_p)).await;
    let (got, leech) = fetch(
        &meta,
        &format!("{tag}-dst"),
        seed.bt_addr.unwrap(),
        with(leech_p),
    )
    .await;
    assert!(
        got == std::fs::read(src.join("t.bin")).unwrap(),
        "data differs"
    );
    let seeded = progress_until(&seed, Duration::from_secs(10), "the seeder's counts", |s| {
        seeder_saw(&s.mse)
    })
    .await
    .mse;
    stop(seed).await;
    (seeded, leech)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_engine_to_engine() {
    tokio::time::timeout(LIMIT, async {
        let (s, l) = pair("mse-rc4", Encryption::Require, Encryption::Prefer, |s| {
            s.in_rc4 >= 1
        })
        .await;
        assert_eq!(
            (l.out_rc4, l.out_plaintext, l.fallbacks),
            (1, 0, 0),
            "{l:?}"
        );
        assert_eq!((s.in_rc4, s.in_plaintext), (1, 0), "{s:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_falls_back_to_a_plaintext_only_seeder() {
    tokio::time::timeout(LIMIT, async {
        let (s, l) = pair("mse-fb", Encryption::Off, Encryption::Prefer, |s| {
            s.in_plaintext >= 1
        })
        .await;
        assert_eq!(
            (l.out_plaintext, l.fallbacks, l.out_rc4),
            (1, 1, 0),
            "{l:?}"
        );
        // The seeder refused the MSE attempt, then took plaintext.
        assert_eq!((s.refused, s.in_plaintext, s.in_rc4), (1, 1, 0), "{s:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_upgrades_to_mse_for_an_encryption_only_seeder() {
    tokio::time::timeout(LIMIT, async {
        let (s, l) = pair("mse-up", Encryption::Require, Encryption::Allow, |s| {
            s.in_rc4 >= 1
        })
        .await;
        assert_eq!((l.out_rc4, l.fallbacks), (1, 1), "{l:?}");
        assert_eq!((s.refused, s.in_rc4), (1, 1), "{s:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_never_talks_to_a_plaintext_only_seeder() {
    tokio::time::timeout(LIMIT, async {
        let src = tmp("mse-never-src");
        let meta = torrent(&src, SIZE);
        let (seed, _) = seeder(meta.clone(), &src, with(Encryption::Off)).await;
        let e = Engine::start(with(Encryption::Require)).await.unwrap();
        let id = e
            .add_torrent(download_source(
                meta,
                &tmp("mse-never-dst"),
                vec![seed.bt_addr.unwrap()],
            ))
            .await
            .unwrap();
        progress_until(
            &seed,
            Duration::from_secs(20),
            "the MSE attempt refused",
            |s| s.mse.refused >= 1,
        )
        .await;
        let l = progress_until(&e, Duration::from_secs(20), "the dial failed", |s| {
            s.dialing == 0 && s.mse.other + s.mse.refused >= 1
        })
        .await;
        let t = info(&l, id).unwrap();
        assert_eq!((t.bytes_had, t.peers), (0, 0));
        assert_eq!((l.mse.out_rc4, l.mse.out_plaintext), (0, 0), "{:?}", l.mse);
        assert_eq!(seed.progress().borrow().mse.in_plaintext, 0);
        stop(e).await;
        stop(seed).await;
    })
    .await
    .unwrap();
}

/// A valid Ya (the generator, 2) and then `tail`.
fn ya_then(tail: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 96];
    v[95] = 2;
    v.extend_from_slice(tail);
    v
}

/// Sends `bytes` to `addr` and waits for the close (bounded).
async fn send_and_wait_close(addr: SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The peer may close before taking all of it: that is the point.
    let _ = s.write_all(bytes).await;
    assert!(
        read_to_close(&mut s, Duration::from_secs(10))
            .await
            .is_some(),
        "connection kept after {} hostile bytes",
        bytes.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_initiators_are_closed_and_counted_by_kind() {
    tokio::time::timeout(LIMIT, async {
        let src = tmp("mse-hostile-src");
        let meta = torrent(&src, 1 << 20);
        let (seed, _) = seeder(meta.clone(), &src, with(Encryption::Prefer)).await;
        let addr = seed.bt_addr.unwrap();
        let before = seed.progress().borrow().mse;
        assert_eq!(before, MseStats::default());

        // PadA past 512 bytes: HASH('req1', S) never comes in time.
        send_and_wait_close(addr, &ya_then(&[0x55; 2000])).await;
        progress_until(&seed, Duration::from_secs(10), "pad past the limit", |s| {
            s.mse.sync_not_found == 1
        })
        .await;

        // Garbage: 256 KiB of random bytes.
        let mut rng = fastrand::Rng::with_seed(7);
        let garbage: Vec<u8> = (0..256 * 1024).map(|_| rng.u8(..)).collect();
        send_and_wait_close(addr, &garbage).await;
        progress_until(&seed, Duration::from_secs(10), "garbage", |s| {
            s.mse.sync_not_found + s.mse.other == 2
        })
        .await;

        // A real MSE opening whose initial payload is past the bound
        // (4 KiB): read up to len(IA), refused there.
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut cfg = MseConfig::new(Encryption::Require);
        cfg.max_ia = u16::MAX;
        let mut rng = fastrand::Rng::with_seed(8);
        let ia = vec![0u8; 10_000];
        let mut hs = Initiator::new(cfg, meta.info_hash, &ia, &mut rng, Instant::now()).unwrap();
        s.write_all(&hs.take_output()).await.unwrap();
        let mut buf = BytesMut::with_capacity(4096);
        let mut out = Vec::new();
        use tokio::io::AsyncReadExt;
        // Yb arrives; our answer carries the oversized IA.
        while hs.handle_input(&buf.split(), &mut out).unwrap().is_none() && out.is_empty() {
            if s.read_buf(&mut buf).await.unwrap() == 0 {
                panic!("closed before Yb");
            }
        }
        let _ = s.write_all(&out).await;
        assert!(
            read_to_close(&mut s, Duration::from_secs(10))
                .await
                .is_some()
        );
        progress_until(&seed, Duration::from_secs(10), "IA past the bound", |s| {
            s.mse.too_much == 1
        })
        .await;

        let after = seed.progress().borrow().mse;
        assert_eq!((after.in_rc4, after.in_plaintext), (0, 0), "{after:?}");
        stop(seed).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sender_is_timed_out_and_counted() {
    tokio::time::timeout(LIMIT, async {
        let src = tmp("mse-slow-src");
        let meta = torrent(&src, 1 << 20);
        let mut cfg = with(Encryption::Prefer);
        cfg.handshake_timeout = Duration::from_secs(2);
        let (seed, _) = seeder(meta, &src, cfg).await;
        // Ya and a few pad bytes, then nothing.
        let mut s = TcpStream::connect(seed.bt_addr.unwrap()).await.unwrap();
        s.write_all(&ya_then(&[1, 2, 3])).await.unwrap();
        let t0 = Instant::now();
        assert!(
            read_to_close(&mut s, Duration::from_secs(10))
                .await
                .is_some()
        );
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
            "closed after {took:?}"
        );
        progress_until(&seed, Duration::from_secs(5), "the timeout counted", |s| {
            s.mse.timeouts == 1
        })
        .await;
        stop(seed).await;
    })
    .await
    .unwrap();
}

/// The seeder's peer list says which peers are encrypted (and that they
/// came over TCP, and to it): an MSE peer, then a plaintext one, each
/// connected from a codec-level client that completes the handshakes and
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_list_shows_which_peers_are_encrypted() {
    use tokio::io::AsyncReadExt;
    use weir_bt::wire::Handshake;
    tokio::time::timeout(LIMIT, async {
        let src = tmp("mse-link-src");
        let meta = torrent(&src, 1 << 20);
        let (seed, id) = seeder(meta.clone(), &src, with(Encryption::Prefer)).await;
        let addr = seed.bt_addr.unwrap();
        let mut rng = fastrand::Rng::with_seed(9);
        for encrypted in [true, false] {
            let mut ours = BytesMut::new();
            Handshake::new(meta.info_hash, [u8::from(encrypted) + 1; 20]).encode(&mut ours);
            let s = TcpStream::connect(addr).await.unwrap();
            let mut theirs = [0u8; Handshake::LEN];
            // Held until the peer list is read.
            let _conn: Box<dyn std::any::Any + Send> = if encrypted {
                let mut m = weir_runtime::mse::initiate(
                    s,
                    MseConfig::new(Encryption::Require),
                    meta.info_hash,
                    &ours,
                    &mut rng,
                )
                .await
                .unwrap();
                m.read_exact(&mut theirs).await.unwrap();
                Box::new(m)
            } else {
                let mut s = s;
                s.write_all(&ours).await.unwrap();
                s.read_exact(&mut theirs).await.unwrap();
                Box::new(s)
            };
            progress_until(&seed, Duration::from_secs(10), "the peer listed", |s| {
                info(s, id).is_some_and(|t| t.peers == 1)
            })
            .await;
            let peers = seed.handle().bt_peers(id).await;
            assert_eq!(peers.len(), 1);
            let p = &peers[0];
            assert_eq!(
                (p.link.encrypted, p.link.utp, p.incoming),
                (encrypted, false, true),
                "{:?}",
                p.link
            );
            drop(_conn);
            progress_until(&seed, Duration::from_secs(10), "the peer gone", |s| {
                info(s, id).is_some_and(|t| t.peers == 0)
            })
            .await;
        }
        stop(seed).await;
    })
    .await
    .unwrap();
}
