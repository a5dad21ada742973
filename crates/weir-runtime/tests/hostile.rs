//! The drivers against hostile peers and servers on loopback (small tokio
//! programs in this test): a peer that does not read its answers, dials
//! and handshakes past the limits, callbacks from a server, a tracker's
//! huge answer, and `weir ed2k-server` against floods.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_bt::create::{TorrentBuilder, hash_pieces};
use weir_bt::metainfo::Metainfo;
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;
use weir_ed2k::client::{ClientMessage, OwnHello};
use weir_ed2k::hash::Ed2kHasher;
use weir_ed2k::packet::{Decoder, Limits};
use weir_ed2k::server::{ClientToServer, ServerConfig, ServerToClient};
use weir_runtime::bt::{self, BtConfig, Phase};
use weir_runtime::ed2k::{self as ed2k, Ed2kConfig, Ed2kServer, ServerOptions, SharedFile};

/// Every test ends within this, or fails.
const LIMIT: Duration = Duration::from_secs(60);

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn payload(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn torrent(dir: &std::path::Path, len: usize) -> Arc<Metainfo> {
    let data = payload(len);
    std::fs::write(dir.join("t.bin"), &data).unwrap();
    let piece = 64 * 1024;
    let mut b = TorrentBuilder::single_file("t.bin", len as u64, piece);
    b.pieces(hash_pieces(&data, piece));
    Arc::new(b.build().unwrap().metainfo)
}

/// Listeners that accept and then say nothing; counts connections.
async fn silent_peers(n: usize) -> (Vec<SocketAddr>, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let mut addrs = Vec::new();
    for _ in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(l.local_addr().unwrap());
        let count = count.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(s);
            }
        });
    }
    (addrs, count)
}

/// Waits until `f` holds, or fails after `limit`.
async fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let r = tokio::time::timeout(limit, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "timed out waiting for {what}");
}

/// Reads and discards until EOF or an error; returns the bytes read, or
/// `None` if the connection is still open after `limit`.
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> Option<u64> {
    let mut n = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    let r = tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(k) => n += k as u64,
            }
        }
    })
    .await;
    r.ok().map(|()| n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dials_in_progress_are_limited() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("dials");
        let meta = torrent(&dir, 256 * 1024);
        // 40 peers that accept and never shake hands: every dial stays in
        // progress until its timeout.
        let (peers, count) = silent_peers(40).await;
        let mut cfg = BtConfig::new(NetPolicy::loopback(), tmp("dials-dst"));
        cfg.peers = peers;
        cfg.use_trackers = false;
        cfg.max_peers = 50;
        cfg.max_half_open = 8;
        let h = bt::start(meta, cfg).await.unwrap();
        until(Duration::from_secs(10), "8 dials", || {
            count.load(Ordering::SeqCst) >= 8
        })
        .await;
        // No more while those are in progress (the handshake timeout is
        // 15 s): pending dials count against the limit.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(count.load(Ordering::SeqCst), 8);
        h.stop().await;
        h.wait().await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_incoming_connections_give_way_and_time_out_and_honest_peers_get_in() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("idle-src");
        let meta = torrent(&dir, 1 << 20);
        let mut cfg = BtConfig::new(NetPolicy::loopback(), dir.clone());
        cfg.listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.seed = true;
        cfg.use_trackers = false;
        cfg.max_handshakes = 4;
        cfg.handshake_timeout = Duration::from_secs(3);
        let seed = bt::start(meta.clone(), cfg).await.unwrap();
        let mut p = seed.progress.clone();
        p.wait_for(|p| p.phase == Phase::Seeding).await.unwrap();
        let addr = seed.local_addr.unwrap();
        // Ten connections that never say a word.
        let mut idle = Vec::new();
        for _ in 0..10 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // The six oldest were dropped for newer ones at once.
        for (i, s) in idle.iter_mut().take(6).enumerate() {
            assert!(
                read_to_close(s, Duration::from_secs(2)).await.is_some(),
                "idle connection {i} kept past the handshake limit"
            );
        }
        // An honest leecher still gets in and downloads.
        let mut lc = BtConfig::new(NetPolicy::loopback(), tmp("idle-dst"));
        lc.peers = vec![addr];
        lc.use_trackers = false;
        let leech = bt::start(meta.clone(), lc).await.unwrap();
        assert!(leech.wait().await.unwrap().complete);
        // The others go after the handshake timeout.
        for s in idle.iter_mut().skip(6) {
            assert!(read_to_close(s, Duration::from_secs(6)).await.is_some());
        }
        seed.stop().await;
        seed.wait().await.unwrap();
    })
    .await
    .unwrap();
}

/// A fake HTTP tracker answering every announce with `peers` compact
/// IPv4 peers on 127.0.0.0/8.
async fn huge_tracker(peers: u32) -> SocketAddr {
    let mut compact = Vec::with_capacity(peers as usize * 6);
    for i in 0..peers {
        let ip = Ipv4Addr::from(0x7f00_0000 | (i + 2));
        compact.extend_from_slice(&ip.octets());
        compact.extend_from_slice(&(6000u16 + (i % 1000) as u16).to_be_bytes());
    }
    let mut body = format!("d8:intervali1800e5:peers{}:", compact.len()).into_bytes();
    body.extend_from_slice(&compact);
    body.push(b'e');
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
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
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
            let _ = s.write_all(&body).await;
            let _ = s.shutdown().await;
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_tracker_answer_adds_a_bounded_number_of_peers() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("tracker");
        let tracker = huge_tracker(170_000).await;
        let data = payload(256 * 1024);
        let mut b = TorrentBuilder::single_file("t.bin", data.len() as u64, 64 * 1024);
        b.pieces(hash_pieces(&data, 64 * 1024));
        b.trackers(vec![vec![format!("http://{tracker}/announce")]]);
        let meta = Arc::new(b.build().unwrap().metainfo);
        let mut cfg = BtConfig::new(NetPolicy::loopback(), dir);
        cfg.use_trackers = true;
        let h = bt::start(meta, cfg).await.unwrap();
        let mut p = h.progress.clone();
        p.wait_for(|p| p.peers_known > 0).await.unwrap();
        // Wait for the whole answer to be taken in (one message).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let known = h.progress.borrow().peers_known;
        let max = weir_core::peers::BookConfig::default().max_per_answer;
        assert!((1..=max).contains(&known), "{known} peers known");
        h.stop().await;
        h.wait().await.unwrap();
    })
    .await
    .unwrap();
}

fn share(dir: &std::path::Path, len: usize) -> SharedFile {
    let data = payload(len);
    let path = dir.join("s.bin");
    std::fs::write(&path, &data).unwrap();
    let mut h = Ed2kHasher::new();
    h.update(&data);
    SharedFile {
        path,
        hashes: h.finish(),
    }
}

fn encode(m: &ClientMessage) -> BytesMut {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed2k_peer_that_does_not_read_is_dropped_at_the_queue_bound() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("noread");
        let mut cfg = Ed2kConfig::new(
            NetPolicy::loopback(),
            dir.clone(),
            weir_runtime::ed2k::userhash::UserHash::Fixed(Md4Hash([5; 16])),
        );
        cfg.listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.seed = true;
        cfg.write_queue_limit = Some(256 * 1024);
        let h = ed2k::client::start(cfg, vec![], vec![share(&dir, 100_000)])
            .await
            .unwrap();
        let addr = h.local_addr.unwrap();
        let mut s = TcpStream::connect(addr).await.unwrap();
        let hello = OwnHello::weir("hostile", 0, false).hello(Md4Hash([9; 16]), 1, 4662);
        s.write_all(&encode(&ClientMessage::Hello(hello)))
            .await
            .unwrap();
        // Each 6-byte PUBLICIP_REQ earns a 10-byte answer; none is read.
        let one = encode(&ClientMessage::PublicIpReq);
        let mut burst = BytesMut::new();
        for _ in 0..10_000 {
            burst.extend_from_slice(&one);
        }
        let mut sent = 0u64;
        let limit = 30u64 << 20;
        while sent < limit {
            match tokio::time::timeout(Duration::from_secs(5), s.write_all(&burst)).await {
                Ok(Ok(())) => sent += burst.len() as u64,
                // Dropped (reset), or no longer read: stop flooding.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        // Weir closed it: what it still had queued comes, then the end;
        // far less than the 50 MiB of answers owed.
        let got = read_to_close(&mut s, Duration::from_secs(20)).await;
        let got = got.expect("a peer that does not read was kept");
        assert!(
            got < 16 << 20,
            "{got} bytes of answers for {sent} bytes asked"
        );
        h.stopper().stop().await;
        h.wait().await.unwrap();
    })
    .await
    .unwrap();
}

/// A fake eD2k server: takes the login, gives a high id, then asks for
/// `n` callbacks to the addresses in `to`, in turn.
async fn callback_server(to: Vec<SocketAddr>, n: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let mut out = BytesMut::new();
        ServerToClient::IdChange {
            id: 0x0100_007f,
            flags: 0,
        }
        .encode(&mut out);
        for i in 0..n {
            let SocketAddr::V4(a) = to[i % to.len()] else {
                unreachable!()
            };
            ServerToClient::CallbackRequested {
                ip: *a.ip(),
                port: a.port(),
            }
            .encode(&mut out);
        }
        let _ = s.write_all(&out).await;
        // Keep the session open.
        while let Ok(k) = s.read(&mut buf).await {
            if k == 0 {
                break;
            }
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_callbacks_go_through_the_dial_limits() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("callbacks");
        let (peers, count) = silent_peers(20).await;
        let server = callback_server(peers, 2000).await;
        let mut cfg = Ed2kConfig::new(
            NetPolicy::loopback(),
            dir.clone(),
            weir_runtime::ed2k::userhash::UserHash::Fixed(Md4Hash([6; 16])),
        );
        cfg.servers = vec![server];
        cfg.seed = true;
        cfg.max_peers = 5;
        let h = ed2k::client::start(cfg, vec![], vec![share(&dir, 10_000)])
            .await
            .unwrap();
        until(Duration::from_secs(10), "a callback", || {
            count.load(Ordering::SeqCst) >= 1
        })
        .await;
        // 2,000 callbacks asked: at most --max-peers dialled (the silent
        // peers never answer the hello, so none finishes within 2 s).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let n = count.load(Ordering::SeqCst);
        assert!((1..=5).contains(&n), "{n} connections for 2,000 callbacks");
        h.stopper().stop().await;
        h.wait().await.unwrap();
    })
    .await
    .unwrap();
}

async fn ed2k_server(opts: ServerOptions) -> SocketAddr {
    let server = Ed2kServer::bind("127.0.0.1:0".parse().unwrap(), opts)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run(|_| {}));
    addr
}

fn c2s(m: &ClientToServer) -> BytesMut {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b
}

fn login() -> ClientToServer {
    ClientToServer::Login {
        user_hash: Md4Hash([3; 16]),
        client_id: 0,
        port: 4662,
        tags: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed2k_server_drops_a_client_that_floods_getsources_without_reading() {
    tokio::time::timeout(LIMIT, async {
        let addr = ed2k_server(ServerOptions::new(
            NetPolicy::loopback(),
            ServerConfig::default(),
        ))
        .await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&c2s(&login())).await.unwrap();
        let one = c2s(&ClientToServer::GetSources {
            file: Md4Hash([1; 16]),
            size: Some(1000),
            obfu: false,
        });
        let mut burst = BytesMut::new();
        for _ in 0..5_000 {
            burst.extend_from_slice(&one);
        }
        let mut sent = 0u64;
        while sent < 64 << 20 {
            match tokio::time::timeout(Duration::from_secs(5), s.write_all(&burst)).await {
                Ok(Ok(())) => sent += burst.len() as u64,
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let got = read_to_close(&mut s, Duration::from_secs(20))
            .await
            .expect("a client that does not read was kept");
        assert!(got < 16 << 20, "{got}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed2k_server_limits_connections_per_ip_and_logins_in_time() {
    tokio::time::timeout(LIMIT, async {
        let mut opts = ServerOptions::new(
            NetPolicy::loopback(),
            ServerConfig {
                max_clients_per_ip: 3,
                ..ServerConfig::default()
            },
        );
        opts.login_timeout = Duration::from_secs(1);
        let addr = ed2k_server(opts).await;
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&c2s(&login())).await.unwrap();
            // Logged in: the answer comes.
            let mut dec = Decoder::new(Limits::CLIENT);
            let mut buf = BytesMut::new();
            while dec.decode(&mut buf).unwrap().is_none() {
                assert!(s.read_buf(&mut buf).await.unwrap() > 0);
            }
            held.push(s);
        }
        // The fourth from the same address is closed at once.
        let mut fourth = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            read_to_close(&mut fourth, Duration::from_secs(5)).await,
            Some(0)
        );
        // One that never logs in (from another address) is closed after
        // the login timeout.
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut silent = sock.connect(addr).await.unwrap();
        let t = tokio::time::Instant::now();
        assert_eq!(
            read_to_close(&mut silent, Duration::from_secs(10)).await,
            Some(0)
        );
        let took = t.elapsed();
        assert!(
            (Duration::from_millis(900)..Duration::from_secs(5)).contains(&took),
            "{took:?}"
        );
    })
    .await
    .unwrap();
}
