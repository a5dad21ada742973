//! Helpers shared by the engine's runtime tests: payloads and torrents,
//! engines configured for loopback, seeders, peers that accept and hold,
//! and waiting on conditions with time limits (nothing here sleeps to
//! measure).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use weir_bt::create::{TorrentBuilder, hash_pieces};
use weir_bt::metainfo::Metainfo;
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;
use weir_ed2k::hash::Ed2kHasher;
use weir_runtime::engine::{Engine, EngineConfig, SharedSource, Snapshot, TorrentSource};
use weir_runtime::storage::OpenOptions;
use weir_session::{Phase, SessionConfig, TransferId, TransferInfo};

/// A fresh directory under the system's temporary directory.
pub(crate) fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-engine-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Deterministic bytes (xorshift), different per `seed`.
pub(crate) fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A single-file torrent of `len` bytes written as `dir/t.bin`, with the
/// given trackers.
pub(crate) fn torrent_with(dir: &Path, len: usize, trackers: Vec<Vec<String>>) -> Arc<Metainfo> {
    let data = payload(len, 1);
    std::fs::write(dir.join("t.bin"), &data).unwrap();
    let piece = 64 * 1024;
    let mut b = TorrentBuilder::single_file("t.bin", len as u64, piece);
    b.pieces(hash_pieces(&data, piece));
    if !trackers.is_empty() {
        b.trackers(trackers);
    }
    Arc::new(b.build().unwrap().metainfo)
}

/// A single-file torrent of `len` bytes written as `dir/t.bin`.
pub(crate) fn torrent(dir: &Path, len: usize) -> Arc<Metainfo> {
    torrent_with(dir, len, Vec::new())
}

/// A complete file `dir/s.bin` to share on eD2k, hashed.
pub(crate) fn share(dir: &Path, len: usize) -> SharedSource {
    let data = payload(len, 2);
    let path = dir.join("s.bin");
    std::fs::write(&path, &data).unwrap();
    let mut h = Ed2kHasher::new();
    h.update(&data);
    SharedSource {
        path,
        hashes: h.finish(),
    }
}

/// An engine configuration for loopback: identities of its own (two
/// engines of one test must not take each other for themselves), no
/// trackers, quick progress reports.
pub(crate) fn config() -> EngineConfig {
    static N: AtomicU32 = AtomicU32::new(1);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let mut peer_id = *b"-WT0000-enginetests0";
    peer_id[12..16].copy_from_slice(&n.to_be_bytes());
    peer_id[16..20].copy_from_slice(&std::process::id().to_be_bytes());
    let mut hash = [0x77u8; 16];
    hash[..4].copy_from_slice(&n.to_be_bytes());
    let mut session = SessionConfig::new(NetPolicy::loopback(), peer_id, Md4Hash(hash));
    session.seed = u64::from(n) ^ 0x5eed_7e57;
    let mut cfg = EngineConfig::new(session);
    cfg.use_trackers = false;
    cfg.report_every = Duration::from_millis(50);
    cfg
}

/// Listening for BitTorrent peers on 127.0.0.1.
pub(crate) fn listening_bt(mut cfg: EngineConfig) -> EngineConfig {
    cfg.bt_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg
}

/// A torrent in `dir` to seed.
pub(crate) fn seed_source(meta: Arc<Metainfo>, dir: &Path) -> TorrentSource {
    TorrentSource {
        meta,
        dir: dir.to_path_buf(),
        open: OpenOptions::seed(),
        peers: Vec::new(),
        seed: true,
        paused: false,
        files: None,
        priorities: None,
    }
}

/// A torrent to download into `dir` from `peers`.
pub(crate) fn download_source(
    meta: Arc<Metainfo>,
    dir: &Path,
    peers: Vec<SocketAddr>,
) -> TorrentSource {
    TorrentSource {
        meta,
        dir: dir.to_path_buf(),
        open: OpenOptions::download(),
        peers,
        seed: false,
        paused: false,
        files: None,
        priorities: None,
    }
}

/// The transfer `id` in a snapshot.
pub(crate) fn info(s: &Snapshot, id: TransferId) -> Option<&TransferInfo> {
    s.transfers.iter().find(|t| t.id == id)
}

/// Waits (bounded) until the progress of `e` satisfies `f`.
pub(crate) async fn progress_until(
    e: &Engine,
    limit: Duration,
    what: &str,
    f: impl FnMut(&Snapshot) -> bool,
) -> Snapshot {
    let mut p = e.progress();
    let r = tokio::time::timeout(limit, async { p.wait_for(f).await.map(|s| s.clone()) }).await;
    match r {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => panic!("the engine stopped before {what}"),
        Err(_) => panic!("timed out waiting for {what}: {:?}", *e.progress().borrow()),
    }
}

/// A seeding engine (listening for BitTorrent on 127.0.0.1) for `meta`,
/// its data in `dir`; returns once the torrent seeds.
pub(crate) async fn seeder(
    meta: Arc<Metainfo>,
    dir: &Path,
    cfg: EngineConfig,
) -> (Engine, TransferId) {
    let mut cfg = listening_bt(cfg);
    cfg.keep_running = true;
    let e = Engine::start(cfg).await.unwrap();
    let id = e.add_torrent(seed_source(meta, dir)).await.unwrap();
    progress_until(&e, Duration::from_secs(20), "seeding", |s| {
        info(s, id).is_some_and(|t| t.phase == Phase::Seeding)
    })
    .await;
    (e, id)
}

/// Stops an engine and waits for it (bounded).
pub(crate) async fn stop(e: Engine) {
    e.stop().await;
    tokio::time::timeout(Duration::from_secs(20), e.wait())
        .await
        .expect("the engine did not stop in time")
        .expect("the engine failed");
}

/// Waits until `f` holds, or fails after `limit`.
pub(crate) async fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let r = tokio::time::timeout(limit, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "timed out waiting for {what}");
}

/// Reads and discards until EOF or an error; returns the bytes read, or
/// `None` if the connection is still open after `limit`.
pub(crate) async fn read_to_close(s: &mut TcpStream, limit: Duration) -> Option<u64> {
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

/// Listeners that accept connections, never say a word and hold them
/// until the test closes them (oldest first): each close frees exactly
/// one of weir's slots, so how many connections follow shows the limit.
pub(crate) struct Holders {
    /// Where they listen.
    pub(crate) addrs: Vec<SocketAddr>,
    accepted: Arc<AtomicUsize>,
    held: Arc<Mutex<VecDeque<TcpStream>>>,
}

impl Holders {
    /// `n` listeners on 127.0.0.1.
    pub(crate) async fn start(n: usize) -> Self {
        let accepted = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(Mutex::new(VecDeque::new()));
        let mut addrs = Vec::new();
        for _ in 0..n {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(l.local_addr().unwrap());
            let (accepted, held) = (accepted.clone(), held.clone());
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    let mut h = held.lock().unwrap();
                    h.push_back(s);
                    accepted.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        Self {
            addrs,
            accepted,
            held,
        }
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Closes the oldest connection still held.
    pub(crate) fn close_oldest(&self) -> bool {
        self.held.lock().unwrap().pop_front().is_some()
    }

    /// Waits for `n` connections (bounded).
    pub(crate) async fn wait_for(&self, n: usize, limit: Duration) {
        until(limit, &format!("{n} connections"), || self.accepted() >= n).await;
    }

    /// Closes one held connection at a time, `cycles` times, and checks
    /// that each close lets exactly one more connection in: weir holds at
    /// most `limit` at once (the first `limit` came at once, and a weir
    /// without the limit would have dialled every address in that burst).
    pub(crate) async fn cycle(&self, limit: usize, cycles: usize) {
        self.wait_for(limit, Duration::from_secs(10)).await;
        assert_eq!(self.accepted(), limit, "more than {limit} at once");
        for k in 1..=cycles {
            assert!(self.close_oldest());
            self.wait_for(limit + k, Duration::from_secs(10)).await;
            assert_eq!(
                self.accepted(),
                limit + k,
                "more than one new connection for one closed (cycle {k})"
            );
        }
    }
}

/// What the engine logs (info and up), kept for the tests that check why
/// something happened: every test of the process writes here.
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    /// The process's log (installed on first use).
    pub(crate) fn capture() -> Log {
        static LOG: OnceLock<Log> = OnceLock::new();
        LOG.get_or_init(|| {
            let log = Log::default();
            let writer = log.clone();
            tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .init();
            log
        })
        .clone()
    }

    /// The lines containing `needle`.
    pub(crate) fn lines(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

/// The bytes that were queued for a connection dropped for not reading,
/// from its log line (`peer is not reading: N bytes queued for it (limit
/// L)`, what `peerconn::QueueError::Full` says).
pub(crate) fn queued_when_dropped(line: &str) -> u64 {
    line.split("reading: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {line}"))
}

/// A fake HTTP tracker on 127.0.0.1 answering every announce with `body`
/// (a bencoded response); the request lines it got, in order.
pub(crate) async fn http_tracker(body: Vec<u8>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    http_tracker_holding(body, None).await
}

/// [`http_tracker`], except that requests whose line holds `hold_if` are
/// logged and never answered (their connections kept open).
pub(crate) async fn http_tracker_holding(
    body: Vec<u8>,
    hold_if: Option<&'static str>,
) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    use tokio::io::AsyncWriteExt;
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let kept = log.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            let hold = hold_if.is_some_and(|h| line.contains(h));
            kept.lock().unwrap().push(line);
            if hold {
                held.push(s);
                continue;
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
    (addr, log)
}
