//! The tracker client against fake HTTP and UDP trackers on 127.0.0.1
//! (tokio tasks in this test): query string fields, parsed peers, failure
//! texts, size and time limits, UDP retransmission and connection-id reuse,
//! and the network policy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use weir_bt::tracker::{AnnounceRequest, AnnounceResponse, Event, udp};
use weir_core::policy::NetPolicy;
use weir_runtime::tracker::{Options, TrackerError, announce, announce_with};

fn req() -> AnnounceRequest {
    AnnounceRequest {
        info_hash: [0xab; 20],
        peer_id: *b"-WE0001-0123456789ab",
        port: 51413,
        uploaded: 10,
        downloaded: 20,
        left: 30,
        event: Some(Event::Started),
        numwant: Some(25),
        key: Some(0x1234_5678),
        compact: true,
    }
}

fn opts() -> Options {
    Options {
        http_timeout: Duration::from_secs(5),
        max_response: 4096,
        udp_base_timeout: Duration::from_millis(100),
        udp_tries: 3,
        udp_connection_ttl: Duration::from_secs(60),
        local_ip: None,
    }
}

/// A one-shot HTTP server: answers each connection with `status` and
/// `body`, and reports the request head it received.
async fn http_tracker(status: &'static str, body: Vec<u8>) -> (SocketAddr, mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned()).await;
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
            let _ = s.write_all(&body).await;
            let _ = s.shutdown().await;
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn http_announce_sends_fields_and_parses_peers() {
    let body = b"d8:completei3e10:incompletei1e8:intervali1800e12:min intervali30e\
        5:peers12:\x7f\x00\x00\x01\x1a\xe1\x7f\x00\x00\x05\x00\x50\
        6:peers618:\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x1a\xe2e";
    let (addr, mut heads) = http_tracker("200 OK", body.to_vec()).await;
    let url = format!("http://{addr}/announce?passkey=s3cret");
    let r = announce_with(&NetPolicy::loopback(), &url, &req(), &opts())
        .await
        .unwrap();
    let head = heads.recv().await.unwrap();
    let line = head.lines().next().unwrap();
    assert!(
        line.starts_with("GET /announce?passkey=s3cret&info_hash="),
        "{line}"
    );
    assert!(line.ends_with(" HTTP/1.1"), "{line}");
    for field in [
        "info_hash=%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB%AB",
        "peer_id=-WE0001-0123456789ab",
        "port=51413",
        "uploaded=10",
        "downloaded=20",
        "left=30",
        "compact=1",
        "event=started",
        "numwant=25",
        "key=12345678",
    ] {
        assert!(line.contains(field), "{field} missing from {line}");
    }
    assert!(
        head.to_ascii_lowercase().contains(&format!("host: {addr}")),
        "{head}"
    );
    assert_eq!(r.interval, 1800);
    assert_eq!(r.min_interval, Some(30));
    assert_eq!((r.complete, r.incomplete), (Some(3), Some(1)));
    let want: Vec<SocketAddr> = vec![
        "127.0.0.1:6881".parse().unwrap(),
        "127.0.0.5:80".parse().unwrap(),
        "[::1]:6882".parse().unwrap(),
    ];
    assert_eq!(r.peers, want);
}

#[tokio::test]
async fn http_localhost_maps_to_loopback() {
    let (addr, _heads) = http_tracker("200 OK", b"d8:intervali60ee".to_vec()).await;
    let url = format!("http://localhost:{}/announce", addr.port());
    let r = announce(&NetPolicy::loopback(), &url, &req())
        .await
        .unwrap();
    assert_eq!(r.interval, 60);
    assert!(r.peers.is_empty());
}

#[tokio::test]
async fn http_failure_reason_and_bad_status() {
    let (addr, _h) = http_tracker(
        "200 OK",
        b"d14:failure reason20:unregistered torrente".to_vec(),
    )
    .await;
    let e = announce_with(
        &NetPolicy::loopback(),
        &format!("http://{addr}/a"),
        &req(),
        &opts(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), "tracker failure: unregistered torrent");

    // Some trackers send a failure reason with an error status.
    let (addr, _h) = http_tracker("400 Bad Request", b"d14:failure reason4:nopee".to_vec()).await;
    let e = announce_with(
        &NetPolicy::loopback(),
        &format!("http://{addr}/a"),
        &req(),
        &opts(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), "tracker failure: nope");

    let (addr, _h) = http_tracker("404 Not Found", b"not here".to_vec()).await;
    let e = announce_with(
        &NetPolicy::loopback(),
        &format!("http://{addr}/a"),
        &req(),
        &opts(),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().ends_with("answered status 404"), "{e}");

    let (addr, _h) = http_tracker("200 OK", b"<html>".to_vec()).await;
    let e = announce_with(
        &NetPolicy::loopback(),
        &format!("http://{addr}/a"),
        &req(),
        &opts(),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("malformed tracker response"), "{e}");
}

#[tokio::test]
async fn http_response_size_is_limited() {
    let mut body = b"d8:intervali60e5:peers6000:".to_vec();
    body.extend(std::iter::repeat_n(0u8, 6000));
    body.push(b'e');
    let (addr, _h) = http_tracker("200 OK", body).await;
    let e = announce_with(
        &NetPolicy::loopback(),
        &format!("http://{addr}/a"),
        &req(),
        &opts(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, TrackerError::TooLarge { max: 4096, .. }), "{e}");
}

#[tokio::test]
async fn http_timeout() {
    // Accepts and never answers.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (hold_tx, mut hold_rx) = mpsc::channel::<()>(1);
    tokio::spawn(async move {
        let (_s, _) = l.accept().await.unwrap();
        let _ = hold_rx.recv().await;
    });
    let o = Options {
        http_timeout: Duration::from_millis(200),
        ..opts()
    };
    let e = announce_with(
        &NetPolicy::loopback(),
        &format!("http://{addr}/a"),
        &req(),
        &o,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, TrackerError::Timeout { .. }), "{e}");
    drop(hold_tx);
}

#[tokio::test]
async fn policy_and_scheme_refusals() {
    let p = NetPolicy::loopback();
    let e = announce(&p, "http://192.0.2.1:6969/announce", &req())
        .await
        .unwrap_err();
    match &e {
        TrackerError::Connect { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied)
        }
        other => panic!("{other}"),
    }
    let e = announce(&p, "udp://192.0.2.1:6969", &req())
        .await
        .unwrap_err();
    assert!(matches!(e, TrackerError::Connect { .. }), "{e}");
    let e = announce(&p, "http://tracker.invalid:80/announce", &req())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TrackerError::NameResolutionForbidden { .. }),
        "{e}"
    );
    let e = announce(&p, "https://127.0.0.1/announce", &req())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("https:// trackers are not supported"),
        "{e}"
    );
}

/// A fake UDP tracker. Drops the first `drop_connects` connect requests,
/// counts connects, checks the connection id, answers announces with
/// `peers`, and reports each announce it decoded.
async fn udp_tracker(
    drop_connects: u32,
    peers: Vec<SocketAddr>,
) -> (SocketAddr, Arc<AtomicU32>, mpsc::Receiver<udp::UdpAnnounce>) {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = s.local_addr().unwrap();
    let connects = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&connects);
    let (tx, rx) = mpsc::channel(8);
    const CID: u64 = 0x1122_3344_5566_7788;
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            let pkt = &buf[..n];
            if let Ok(txid) = udp::parse_connect_request(pkt) {
                if c.fetch_add(1, Ordering::SeqCst) < drop_connects {
                    continue;
                }
                let _ = s.send_to(&udp::connect_response(txid, CID), from).await;
            } else if let Ok(a) = udp::parse_announce_request(pkt) {
                let out = if a.connection_id != CID {
                    udp::error_response(a.transaction_id, "bad connection id")
                } else if a.request.info_hash == [0xee; 20] {
                    udp::error_response(a.transaction_id, "torrent not registered")
                } else {
                    // A stray packet for another transaction first: ignored.
                    let stray = udp::error_response(a.transaction_id.wrapping_add(1), "stray");
                    let _ = s.send_to(&stray, from).await;
                    let resp = AnnounceResponse {
                        interval: 900,
                        peers: peers.clone(),
                        complete: Some(2),
                        incomplete: Some(7),
                        ..Default::default()
                    };
                    udp::announce_response(a.transaction_id, &resp, false)
                };
                let _ = tx.send(a).await;
                let _ = s.send_to(&out, from).await;
            }
        }
    });
    (addr, connects, rx)
}

#[tokio::test]
async fn udp_announce_retransmits_and_reuses_the_connection_id() {
    let peers: Vec<SocketAddr> = vec![
        "127.0.0.9:7000".parse().unwrap(),
        "127.1.2.3:1".parse().unwrap(),
    ];
    let (addr, connects, mut seen) = udp_tracker(1, peers.clone()).await;
    let url = format!("udp://{addr}/announce");
    let r = announce_with(&NetPolicy::loopback(), &url, &req(), &opts())
        .await
        .unwrap();
    assert_eq!(r.peers, peers);
    assert_eq!(r.interval, 900);
    assert_eq!((r.complete, r.incomplete), (Some(2), Some(7)));
    // The first connect was dropped, so the client sent a second one.
    assert_eq!(connects.load(Ordering::SeqCst), 2);
    let a = seen.recv().await.unwrap();
    let mut want = req();
    want.compact = true;
    assert_eq!(a.request, want);

    // A second announce within 60 s reuses the connection id: no connect.
    let mut r2 = req();
    r2.event = None;
    announce_with(&NetPolicy::loopback(), &url, &r2, &opts())
        .await
        .unwrap();
    assert_eq!(connects.load(Ordering::SeqCst), 2);
    assert_eq!(seen.recv().await.unwrap().request.event, None);
}

#[tokio::test]
async fn udp_error_response_and_timeout() {
    let (addr, _c, _seen) = udp_tracker(0, vec![]).await;
    let mut r = req();
    r.info_hash = [0xee; 20];
    let e = announce_with(
        &NetPolicy::loopback(),
        &format!("udp://{addr}"),
        &r,
        &opts(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), "tracker failure: torrent not registered");

    // A tracker that never answers: 3 tries of 20, 40, 80 ms.
    let (addr, connects, _seen) = udp_tracker(u32::MAX, vec![]).await;
    let o = Options {
        udp_base_timeout: Duration::from_millis(20),
        ..opts()
    };
    let e = announce_with(&NetPolicy::loopback(), &format!("udp://{addr}"), &req(), &o)
        .await
        .unwrap_err();
    assert!(matches!(e, TrackerError::Timeout { .. }), "{e}");
    assert_eq!(connects.load(Ordering::SeqCst), 3);
}
