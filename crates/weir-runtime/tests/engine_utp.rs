//! The engine over uTP on loopback: engine to engine over uTP only (MSE
//! included, as by default), a leecher allowing both transports that
//! reaches a TCP-only seeder and a uTP-only one, and a SYN flood at a
//! seeder's UDP socket that leaves its connection count bounded and its
//! honest leecher served.

mod engine_common;

use std::sync::Arc;
use std::time::Duration;

use engine_common::*;
use weir_bt::metainfo::Metainfo;
use weir_runtime::engine::{Engine, EngineConfig, Snapshot, Transports};

/// Every test ends within this, or fails.
const LIMIT: Duration = Duration::from_secs(30);
const SIZE: usize = 8 << 20;

fn over(t: &str) -> EngineConfig {
    let mut c = listening_bt(config());
    c.transports = t.parse::<Transports>().unwrap();
    c
}

/// Downloads `meta` from `peer` under `cfg`; the bytes and the leecher's
/// last snapshot before it ended (while it still had its peer).
async fn fetch(
    meta: &Arc<Metainfo>,
    tag: &str,
    peer: std::net::SocketAddr,
    cfg: EngineConfig,
) -> (Vec<u8>, Snapshot) {
    let dst = tmp(tag);
    let e = Engine::start(cfg).await.unwrap();
    let mut p = e.progress();
    e.add_torrent(download_source(meta.clone(), &dst, vec![peer]))
        .await
        .unwrap();
    // The largest uTP peer count seen, from the published snapshots.
    let watch = tokio::spawn(async move {
        let mut best = Snapshot::default();
        while p.changed().await.is_ok() {
            let s = p.borrow().clone();
            if s.utp_peers >= best.utp_peers && s.peers >= best.peers {
                best = s;
            }
        }
        best
    });
    let summary = tokio::time::timeout(LIMIT, e.wait())
        .await
        .expect("the download did not end in time")
        .unwrap();
    assert!(summary.transfers[0].complete_at.is_some());
    let best = watch.await.unwrap();
    (std::fs::read(dst.join("t.bin")).unwrap(), best)
}

async fn pair(tag: &str, seed_t: &str, leech_t: &str) -> (Snapshot, Snapshot) {
    let src = tmp(&format!("{tag}-src"));
    let meta = torrent(&src, SIZE);
    let (seed, _) = seeder(meta.clone(), &src, over(seed_t)).await;
    let (got, leech) = fetch(
        &meta,
        &format!("{tag}-dst"),
        seed.bt_addr.unwrap(),
        over(leech_t),
    )
    .await;
    assert!(
        got == std::fs::read(src.join("t.bin")).unwrap(),
        "data differs"
    );
    let seeded = seed.progress().borrow().clone();
    stop(seed).await;
    (seeded, leech)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_to_engine_over_utp_only() {
    tokio::time::timeout(LIMIT, async {
        // Counters, not the live peer count: the leecher may already have
        // dropped its seeder (both complete) when its last snapshot is
        // taken. Both ends speak only uTP, so the data came over it.
        let (s, l) = pair("utp-only", "utp", "utp").await;
        let u = s.utp.expect("the seeder runs uTP");
        assert!(u.endpoint.accepted >= 1, "{u:?}");
        // Prefer (the default) got RC4 over uTP.
        assert_eq!(l.mse.out_rc4, 1, "{:?}", l.mse);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_transports_reach_a_tcp_only_seeder() {
    tokio::time::timeout(LIMIT, async {
        let (s, l) = pair("utp-to-tcp", "tcp", "tcp,utp").await;
        // The data came (checked in `pair`) over the one handshake made,
        // on TCP: no uTP peer at any time (the live count may already be
        // zero once both are complete, so the handshake counters say it).
        assert_eq!(l.utp_peers, 0, "{l:?}");
        assert!(l.mse.out_rc4 + l.mse.out_plaintext >= 1, "{:?}", l.mse);
        assert!(s.utp.is_none(), "a TCP-only seeder without DHT runs no uTP");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_transports_reach_a_utp_only_seeder() {
    tokio::time::timeout(LIMIT, async {
        // The seeder speaks only uTP: the data came over it.
        let (s, l) = pair("tcp-to-utp", "utp", "tcp,utp").await;
        let u = s.utp.expect("the seeder runs uTP");
        assert!(u.endpoint.accepted >= 1, "{u:?}; leecher {l:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syn_flood_leaves_the_seeder_bounded_and_serving() {
    tokio::time::timeout(LIMIT, async {
        let src = tmp("utp-flood-src");
        let meta = torrent(&src, SIZE);
        let (seed, _) = seeder(meta.clone(), &src, over("utp")).await;
        let to = seed.utp_addr.unwrap();
        let bound = EngineConfig::new(config().session)
            .utp
            .endpoint
            .max_half_open;
        let flood = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        for i in 0..10_000u16 {
            // A SYN: type 4, version 1, connection id i*2, seq i.
            let mut p = vec![0x41, 0];
            p.extend_from_slice(&(i.wrapping_mul(2)).to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0x10, 0, 0]);
            p.extend_from_slice(&i.to_be_bytes());
            p.extend_from_slice(&[0, 0]);
            let _ = flood.send_to(&p, to).await;
            if i % 1000 == 999 {
                tokio::task::yield_now().await;
            }
        }
        let s = progress_until(&seed, LIMIT, "the flood read", |s| {
            s.utp.as_ref().is_some_and(|u| u.endpoint.accepted >= 1000)
        })
        .await;
        let u = s.utp.unwrap();
        assert!(
            u.connections <= bound && u.endpoint.half_open_evicted > 0,
            "{u:?}"
        );
        assert_eq!(
            (s.peers, u.backlog),
            (0, 0),
            "unconfirmed SYNs became peers"
        );
        // An honest leecher is still served over uTP.
        let (got, l) = fetch(&meta, "utp-flood-dst", seed.bt_addr.unwrap(), over("utp")).await;
        assert!(got == std::fs::read(src.join("t.bin")).unwrap());
        // The leecher speaks only uTP, so the data came over it; its one
        // outgoing handshake says it connected (the live peer count may
        // be gone before a snapshot with it was published).
        assert_eq!(l.mse.out_rc4 + l.mse.out_plaintext, 1, "{:?}", l.mse);
        stop(seed).await;
    })
    .await
    .unwrap();
}
