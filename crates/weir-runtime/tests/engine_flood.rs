//! A BitTorrent peer floods the engine with its smallest messages (4-byte
//! keep-alives and 5-byte NOT_INTERESTED), then an eD2k peer with its
//! smallest packets (6-byte PUBLICIP_REQ, each answered) and reads the
//! answers: the engine's memory stays bounded (until the peer is dropped,
//! if its answers fall behind). Alone in its process: the figure is the
//! process's peak resident size (`VmHWM`, reset before the flood).

mod engine_common;

use std::time::Duration;

use bytes::BytesMut;
use engine_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_bt::wire::Handshake;
use weir_ed2k::Md4Hash;
use weir_ed2k::client::{ClientMessage, OwnHello};
use weir_runtime::engine::Engine;

/// A field of `/proc/self/status`, in bytes.
fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with(field)).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn encode(m: &ClientMessage) -> BytesMut {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b
}

/// What a flood that needs no answers may add to the process at its peak
/// (issue 8's goal per hostile connection): its read buffer and its
/// `BATCHES_IN_FLIGHT` batches of decoded messages (measured: 1 MiB; 6 MiB
/// before readers had credits of their own, 480 MiB before batches were
/// capped).
const MAX_GROWTH: u64 = 4 << 20;
/// The same for a flood of requests that are answered: the answers the
/// connection's write queue may hold besides (measured: 3 MiB; 8 MiB
/// before readers had credits).
const MAX_GROWTH_ANSWERED: u64 = 16 << 20;

#[test]
fn floods_of_tiny_messages_cost_bounded_memory() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        bt_flood().await;
        let dir = tmp("flood");
        let mut cfg = config();
        cfg.ed2k_listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.keep_running = true;
        let e = Engine::start(cfg).await.unwrap();
        e.share(share(&dir, 100_000)).await.unwrap();
        let s = tokio::net::TcpStream::connect(e.ed2k_addr.unwrap())
            .await
            .unwrap();
        let (mut rd, mut wr) = s.into_split();
        let hello = OwnHello::weir("flood", 0, false).hello(Md4Hash([9; 16]), 1, 4662);
        wr.write_all(&encode(&ClientMessage::Hello(hello)))
            .await
            .unwrap();
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            while let Ok(k) = rd.read(&mut buf).await {
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
            n
        });
        let one = encode(&ClientMessage::PublicIpReq);
        let mut burst = BytesMut::new();
        for _ in 0..10_000 {
            burst.extend_from_slice(&one);
        }
        // Peak resident size from here on.
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let base = status("VmRSS:");
        let mut sent = 0u64;
        while sent < 64 << 20 {
            match tokio::time::timeout(Duration::from_secs(10), wr.write_all(&burst)).await {
                Ok(Ok(())) => sent += burst.len() as u64,
                // Dropped (its answers fell behind the queue's bound).
                Ok(Err(_)) => break,
                Err(_) => panic!("weir stopped reading after {sent} bytes"),
            }
        }
        assert!(sent >= 16 << 20, "dropped after {sent} bytes");
        let peak = status("VmHWM:");
        drop(wr);
        let answers = tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .expect("the answers did not end")
            .unwrap();
        let growth = peak.saturating_sub(base);
        eprintln!(
            "{sent} bytes of PUBLICIP_REQ, {answers} bytes of answers read; \
             resident {} MiB before, peak {} MiB",
            base >> 20,
            peak >> 20
        );
        assert!(
            growth <= MAX_GROWTH_ANSWERED,
            "the flood grew the process by {} MiB (bound {} MiB)",
            growth >> 20,
            MAX_GROWTH_ANSWERED >> 20
        );
        stop(e).await;
    });
}

/// The BitTorrent half: 64 MiB of keep-alives and NOT_INTERESTED to a
/// seeder, which answers none of them.
async fn bt_flood() {
    let dir = tmp("bt-flood");
    let meta = torrent(&dir, 256 * 1024);
    let (e, _) = seeder(meta.clone(), &dir, config()).await;
    let mut s = tokio::net::TcpStream::connect(e.bt_addr.unwrap())
        .await
        .unwrap();
    let mut b = BytesMut::new();
    Handshake::new(meta.info_hash, *b"-XX0000-flood-test00").encode(&mut b);
    s.write_all(&b).await.unwrap();
    let mut theirs = [0u8; Handshake::LEN];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut theirs))
        .await
        .expect("no handshake")
        .unwrap();
    let (mut rd, mut wr) = s.into_split();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(k) = rd.read(&mut buf).await {
            if k == 0 {
                break;
            }
        }
    });
    let mut burst = BytesMut::new();
    for _ in 0..10_000 {
        burst.extend_from_slice(&[0, 0, 0, 0]);
        burst.extend_from_slice(&[0, 0, 0, 1, 3]);
    }
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let base = status("VmRSS:");
    let mut sent = 0u64;
    while sent < 64 << 20 {
        match tokio::time::timeout(Duration::from_secs(10), wr.write_all(&burst)).await {
            Ok(Ok(())) => sent += burst.len() as u64,
            Ok(Err(e)) => panic!("dropped after {sent} bytes: {e}"),
            Err(_) => panic!("weir stopped reading after {sent} bytes"),
        }
    }
    let peak = status("VmHWM:");
    let growth = peak.saturating_sub(base);
    eprintln!(
        "{sent} bytes of keep-alives and NOT_INTERESTED; resident {} MiB before, peak {} MiB",
        base >> 20,
        peak >> 20
    );
    assert!(
        growth <= MAX_GROWTH,
        "the BitTorrent flood grew the process by {} MiB (bound {} MiB)",
        growth >> 20,
        MAX_GROWTH >> 20
    );
    drop(wr);
    stop(e).await;
    let _ = reader.await;
}
