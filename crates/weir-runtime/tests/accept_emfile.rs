//! Listeners keep accepting after running out of descriptors: `weir
//! ed2k-server` and a seeding torrent each hit EMFILE on accept (this
//! process's descriptor limit lowered and filled), then, once descriptors
//! are free again, take the connection that waited and new ones.
//!
//! One test in its own process: the descriptor limit is process-wide.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_bt::create::{TorrentBuilder, hash_pieces};
use weir_bt::wire::Handshake;
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;
use weir_ed2k::packet::{Decoder, Limits};
use weir_ed2k::server::{ClientToServer, ServerConfig};
use weir_runtime::bt::{self, BtConfig, Phase};
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

async fn login_answered(s: &mut TcpStream) -> bool {
    let mut b = BytesMut::new();
    ClientToServer::Login {
        user_hash: Md4Hash([4; 16]),
        client_id: 0,
        port: 4662,
        tags: vec![],
    }
    .encode(&mut b);
    if s.write_all(&b).await.is_err() {
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
fn listeners_survive_running_out_of_descriptors() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Everything that needs descriptors is set up first.
        let server = Ed2kServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::new(NetPolicy::loopback(), ServerConfig::default()),
        )
        .await
        .unwrap();
        let server_addr = server.local_addr().unwrap();
        let server_task = tokio::spawn(server.run(|_| {}));

        let dir = std::env::temp_dir().join(format!("weir-emfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data = vec![7u8; 128 * 1024];
        std::fs::write(dir.join("t.bin"), &data).unwrap();
        let mut b = TorrentBuilder::single_file("t.bin", data.len() as u64, 64 * 1024);
        b.pieces(hash_pieces(&data, 64 * 1024));
        let meta = Arc::new(b.build().unwrap().metainfo);
        let mut cfg = BtConfig::new(NetPolicy::loopback(), dir.clone());
        cfg.listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.seed = true;
        cfg.use_trackers = false;
        let seed = bt::start(meta.clone(), cfg).await.unwrap();
        let mut p = seed.progress.clone();
        p.wait_for(|p| p.phase == Phase::Seeding).await.unwrap();
        let seed_addr: SocketAddr = seed.local_addr.unwrap();
        let ours = Handshake::new(meta.info_hash, *b"-XX0000-emfile-test0");

        // A low limit, filled.
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, open_fds() + 64, hard).unwrap();
        let mut held = exhaust();
        // One descriptor for each client socket: the connections complete
        // in the listeners' backlogs, and accept fails with EMFILE.
        held.pop();
        let mut a = TcpStream::connect(server_addr).await.unwrap();
        held.extend(exhaust());
        held.pop();
        let mut b = TcpStream::connect(seed_addr).await.unwrap();
        held.extend(exhaust());
        // Let both accept loops meet the error a few times.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!server_task.is_finished(), "ed2k-server stopped on EMFILE");

        // Descriptors free again: the waiting connections are taken.
        drop(held);
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
        assert!(
            login_answered(&mut a).await,
            "ed2k-server stopped accepting"
        );
        assert!(
            handshake_answered(&mut b, &ours).await,
            "the seeder stopped accepting"
        );
        // And new ones.
        let mut c = TcpStream::connect(server_addr).await.unwrap();
        assert!(login_answered(&mut c).await);
        let mut d = TcpStream::connect(seed_addr).await.unwrap();
        assert!(handshake_answered(&mut d, &ours).await);
        seed.stop().await;
        seed.wait().await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    });
}
