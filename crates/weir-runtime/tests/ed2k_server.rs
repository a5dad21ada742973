//! `weir ed2k-server` (`weir_runtime::ed2k::Ed2kServer`) against hostile
//! clients on loopback: one that floods source requests and reads none of
//! the answers, too many connections from one address, and one that never
//! logs in. (Its listener surviving EMFILE is in `engine_accept_emfile.rs`,
//! which owns the process's descriptor limit.)

mod engine_common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use engine_common::{Log, queued_when_dropped, read_to_close};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;
use weir_ed2k::packet::{Decoder, Limits};
use weir_ed2k::server::{ClientToServer, ServerConfig, ServerToClient};
use weir_runtime::ed2k::{Ed2kServer, ServerOptions};

/// Every test ends within this, or fails.
const LIMIT: Duration = Duration::from_secs(60);

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
        let log = Log::capture();
        let opts = ServerOptions::new(NetPolicy::loopback(), ServerConfig::default());
        let bound = opts.queue_limit;
        let addr = ed2k_server(opts).await;
        // A small receive buffer of our own: the server's writer is stuck
        // soon, and its queue fills.
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(64 * 1024).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        s.write_all(&c2s(&login())).await.unwrap();
        // Each GETSOURCES earns a FOUNDSOURCES; none is read.
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
                // Dropped (reset), or no longer read: stop flooding.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let got = read_to_close(&mut s, Duration::from_secs(20))
            .await
            .expect("a client that does not read was kept");
        assert!(
            got < 16 << 20,
            "{got} bytes of answers for {sent} bytes asked"
        );
        // Dropped for not reading, with its queue at the bound (a reply is
        // tens of bytes), not for anything else.
        let lines = log.lines("ed2k-server: conn");
        let dropped: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("peer is not reading") && l.contains("dropped"))
            .collect();
        assert_eq!(dropped.len(), 1, "{lines:?}");
        let queued = queued_when_dropped(dropped[0]);
        assert!(
            (bound - 4096..=bound).contains(&queued),
            "dropped with {queued} bytes queued (bound {bound})"
        );
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
        // The fourth from the same address is closed at once, unanswered.
        let mut fourth = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            read_to_close(&mut fourth, Duration::from_secs(5)).await,
            Some(0)
        );
        // One that never logs in (from another address) is closed after
        // the login timeout, not before.
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

/// A logged-in client that says nothing more is closed after the idle
/// timeout even while the server keeps writing to it (here another
/// client's callback requests): each write restarted the timer, so such a
/// client held its connection and index entries for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed2k_server_closes_a_silent_client_it_keeps_writing_to() {
    tokio::time::timeout(LIMIT, async {
        let mut opts = ServerOptions::new(NetPolicy::loopback(), ServerConfig::default());
        opts.idle_timeout = Duration::from_secs(1);
        let addr = ed2k_server(opts).await;
        let connect_from = |ip: &str| {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(format!("{ip}:0").parse().unwrap()).unwrap();
            sock.connect(addr)
        };
        let mut silent = connect_from("127.0.0.3").await.unwrap();
        silent.write_all(&c2s(&login())).await.unwrap();
        let mut asker = connect_from("127.0.0.4").await.unwrap();
        asker.write_all(&c2s(&login())).await.unwrap();
        let target = weir_ed2k::client::hello::ip_to_id("127.0.0.3".parse().unwrap());
        let ask = c2s(&ClientToServer::CallbackRequest { id: target });
        // The asker asks for a callback from the silent one every 200 ms
        // (it is active, so it stays); the silent one reads what comes.
        let t = tokio::time::Instant::now();
        let mut dec = Decoder::new(Limits::CLIENT);
        let mut buf = BytesMut::new();
        let mut callbacks = 0;
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let closed_after = loop {
            tokio::select! {
                r = silent.read_buf(&mut buf) => match r {
                    Ok(0) | Err(_) => break t.elapsed(),
                    Ok(_) => {
                        while let Some(p) = dec.decode(&mut buf).unwrap() {
                            if matches!(
                                ServerToClient::decode(&p),
                                Ok(ServerToClient::CallbackRequested { .. })
                            ) {
                                callbacks += 1;
                            }
                        }
                    }
                },
                _ = tick.tick() => {
                    assert!(t.elapsed() < Duration::from_secs(8), "the silent client was kept");
                    asker.write_all(&ask).await.unwrap();
                }
            }
        };
        // It was written to all along, and closed after the idle
        // timeout, not before.
        assert!(callbacks >= 2, "{callbacks} callback requests reached it");
        assert!(
            (Duration::from_millis(900)..Duration::from_secs(4)).contains(&closed_after),
            "{closed_after:?}"
        );
    })
    .await
    .unwrap();
}
