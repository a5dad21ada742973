//! Listeners keep accepting after running out of descriptors: an engine
//! seeding a torrent (BitTorrent listener) and sharing a file (eD2k
//! listener), and `weir ed2k-server`, hit EMFILE on their accepts (this
//! process's descriptor limit lowered and filled), then, once descriptors
//! are free again, take the connections that waited and new ones.
//!
//! One test in its own process: the descriptor limit is process-wide.

mod engine_common;

use std::time::Duration;

use bytes::BytesMut;
use engine_common::*;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_bt::wire::Handshake;
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;
use weir_ed2k::client::{ClientMessage, OwnHello};
use weir_ed2k::packet::{Decoder, Limits};
use weir_ed2k::server::{ClientToServer, ServerConfig};
use weir_runtime::ed2k::{Ed2kServer, ServerOptions};

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

/// Opens files until the limit refuses one; returns them.
fn exhaust() -> Vec<std::fs::File> {
    let mut held = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                return held;
            }
        }
        assert!(held.len() < 100_000, "the limit did not hold");
    }
}

/// Sends `b` (an eD2k client's hello or a server login) and waits for a
/// whole packet back.
async fn ed2k_answered(s: &mut TcpStream, b: &[u8]) -> bool {
    if s.write_all(b).await.is_err() {
        return false;
    }
    let mut dec = Decoder::new(Limits::CLIENT);
    let mut buf = BytesMut::new();
    let r = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Ok(Some(_)) = dec.decode(&mut buf) {
                return true;
            }
            match s.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    })
    .await;
    r.unwrap_or(false)
}

async fn ed2k_hello_answered(s: &mut TcpStream) -> bool {
    let hello = OwnHello::weir("emfile", 0, false).hello(Md4Hash([9; 16]), 1, 4662);
    let mut b = BytesMut::new();
    ClientMessage::Hello(hello).encode(&mut b);
    ed2k_answered(s, &b).await
}

async fn login_answered(s: &mut TcpStream) -> bool {
    let mut b = BytesMut::new();
    ClientToServer::Login {
        user_hash: Md4Hash([4; 16]),
        client_id: 0,
        port: 4662,
        tags: vec![],
    }
    .encode(&mut b);
    ed2k_answered(s, &b).await
}

async fn handshake_answered(s: &mut TcpStream, ours: &Handshake) -> bool {
    let mut b = BytesMut::new();
    ours.encode(&mut b);
    if s.write_all(&b).await.is_err() {
        return false;
    }
    let mut got = [0u8; Handshake::LEN];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got)).await,
        Ok(Ok(_))
    )
}

#[test]
fn engine_listeners_survive_running_out_of_descriptors() {
    let log = Log::capture();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Everything that needs descriptors is set up first.
        let dir = tmp("emfile");
        let meta = torrent(&dir, 128 * 1024);
        let mut cfg = config();
        cfg.ed2k_listen = Some("127.0.0.1:0".parse().unwrap());
        let (engine, _) = seeder(meta.clone(), &dir, cfg).await;
        engine.share(share(&dir, 100_000)).await.unwrap();
        let bt_addr = engine.bt_addr.unwrap();
        let ed2k_addr = engine.ed2k_addr.unwrap();
        let ours = Handshake::new(meta.info_hash, *b"-XX0000-emfile-test0");
        let server = Ed2kServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::new(NetPolicy::loopback(), ServerConfig::default()),
        )
        .await
        .unwrap();
        let server_addr = server.local_addr().unwrap();
        let server_task = tokio::spawn(server.run(|_| {}));

        // A low limit, filled.
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, open_fds() + 64, hard).unwrap();
        let mut held = exhaust();
        // One descriptor for each client socket: the connections complete
        // in the listeners' backlogs, and accept fails with EMFILE.
        held.pop();
        let mut a = TcpStream::connect(ed2k_addr).await.unwrap();
        held.extend(exhaust());
        held.pop();
        let mut b = TcpStream::connect(bt_addr).await.unwrap();
        held.extend(exhaust());
        held.pop();
        let mut e = TcpStream::connect(server_addr).await.unwrap();
        held.extend(exhaust());
        // The three accept loops meet the error (and each says so, naming
        // its address).
        let seen = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let lines = log.lines("Too many open files");
                let named =
                    |a: std::net::SocketAddr| lines.iter().any(|l| l.contains(&a.to_string()));
                if [ed2k_addr, bt_addr, server_addr].into_iter().all(named) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(seen.is_ok(), "the accept loops did not meet EMFILE");
        assert!(!server_task.is_finished(), "ed2k-server stopped on EMFILE");

        // Descriptors free again: the waiting connections are taken.
        drop(held);
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
        assert!(
            ed2k_hello_answered(&mut a).await,
            "the eD2k listener stopped accepting"
        );
        assert!(
            handshake_answered(&mut b, &ours).await,
            "the BitTorrent listener stopped accepting"
        );
        assert!(
            login_answered(&mut e).await,
            "ed2k-server stopped accepting"
        );
        // And new ones.
        let mut c = TcpStream::connect(ed2k_addr).await.unwrap();
        assert!(ed2k_hello_answered(&mut c).await);
        let mut d = TcpStream::connect(bt_addr).await.unwrap();
        assert!(handshake_answered(&mut d, &ours).await);
        let mut f = TcpStream::connect(server_addr).await.unwrap();
        assert!(login_answered(&mut f).await);
        stop(engine).await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}
