//! Storage under real faults, weir to weir over 127.0.0.1 in one process,
//! each side an engine (`weir_runtime::engine`, what `weir get` and `weir
//! seed` run): a full disk (a small tmpfs: ENOSPC) pauses a download
//! (BitTorrent or eD2k), bounds what it holds in memory, still obeys a stop,
//! and resumes when space returns; a file
//! truncated under a seeder, and a filesystem failing under it (ext4 shut
//! down: EIO), stop the lost pieces being offered instead of failing the
//! seeder; `recheck` finds a corrupted byte the journal cannot know about.
//!
//! The mounts need root; with `CI` set their absence fails these tests.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_bt::create::{TorrentBuilder, hash_pieces};
use weir_bt::metainfo::Metainfo;
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;
use weir_ed2k::hash::Ed2kHasher;
use weir_ed2k::link::FileLink;
use weir_lab::mounts::{self, Ext4, Tmpfs};
use weir_lab::tmpdir::TempDir;
use weir_runtime::bandwidth::{Limiter, bucket};
use weir_runtime::engine::{
    Ed2kSource, Engine, EngineConfig, EngineError, EngineHandle, SharedSource, Snapshot, Summary,
    TorrentSource,
};
use weir_runtime::storage::{BACKLOG_LIMIT, OpenError, OpenOptions};
use weir_session::{Phase, SessionConfig, TransferId, TransferInfo};

const WAIT: Duration = Duration::from_secs(90);

/// Log lines of every test in this process (searched by path).
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        struct W(&'static Mutex<Vec<u8>>);
        impl Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let _ = tracing_subscriber::fmt()
            .with_env_filter("warn,weir_runtime=info")
            .with_ansi(false)
            .with_writer(move || W(buf))
            .try_init();
        buf
    })
}

/// The first log line holding every one of `needles`.
fn logged(needles: &[&str]) -> Option<String> {
    let l = logs().lock().unwrap();
    String::from_utf8_lossy(&l)
        .lines()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_string)
}

/// Polls the log (every 20 ms, for at most [`WAIT`]) for a line.
async fn wait_logged(needles: &[&str]) -> String {
    within(&format!("a log line with {needles:?}"), async {
        loop {
            if let Some(l) = logged(needles) {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    weir_lab::payload::fill(&mut v, 0, seed);
    v
}

/// `name` of `data` in `dir`, and its torrent.
fn torrent(dir: &Path, name: &str, data: &[u8], piece: u32) -> Arc<Metainfo> {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), data).unwrap();
    let mut b = TorrentBuilder::single_file(name, data.len() as u64, piece);
    b.pieces(hash_pieces(data, piece));
    Arc::new(b.build().unwrap().metainfo)
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// One engine running one torrent.
struct Node {
    handle: EngineHandle,
    progress: watch::Receiver<Snapshot>,
    task: JoinHandle<Result<Summary, EngineError>>,
    addr: SocketAddr,
    id: TransferId,
}

impl Node {
    /// The transfer in the latest snapshot.
    fn info(&self) -> TransferInfo {
        self.progress
            .borrow()
            .transfers
            .iter()
            .find(|t| t.id == self.id)
            .cloned()
            .expect("the transfer is in the snapshot")
    }

    /// Waits for a snapshot in which the transfer satisfies `f`.
    async fn wait_for(&mut self, what: &str, f: impl Fn(&TransferInfo) -> bool) {
        let id = self.id;
        within(
            what,
            self.progress
                .wait_for(|s| s.transfers.iter().any(|t| t.id == id && f(t))),
        )
        .await
        .expect("the engine publishes until it ends");
    }

    /// Waits for the engine to end by itself; its transfer then.
    async fn finish(self, what: &str) -> TransferInfo {
        let s = within(what, self.task).await.unwrap().unwrap();
        s.transfers.into_iter().find(|t| t.id == self.id).unwrap()
    }

    /// Stops the engine; its transfer at the end.
    async fn stop(self, what: &str) -> Result<TransferInfo, EngineError> {
        self.handle.stop().await;
        let s = tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .unwrap_or_else(|_| panic!("{what}: not stopped within 20 s"))
            .unwrap()?;
        Ok(s.transfers.into_iter().find(|t| t.id == self.id).unwrap())
    }
}

/// An engine on 127.0.0.1 without trackers, `keep_running` for a seeder.
async fn engine(keep_running: bool, down: u64) -> Engine {
    // A user hash of its own: two eD2k engines of one process must not
    // take each other for themselves.
    let peer_id = weir_runtime::engine::new_peer_id();
    let mut uh = [0u8; 16];
    uh.copy_from_slice(&peer_id[4..]);
    let session = SessionConfig::new(NetPolicy::loopback(), peer_id, Md4Hash(uh));
    let mut cfg = EngineConfig::new(session);
    cfg.bt_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.ed2k_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.use_trackers = false;
    cfg.keep_running = keep_running;
    cfg.report_every = Duration::from_millis(50);
    if down > 0 {
        cfg.down = Limiter::new(vec![bucket(down)]);
    }
    Engine::start(cfg).await.unwrap()
}

impl Node {
    fn of(e: Engine, id: TransferId, addr: SocketAddr) -> Node {
        Node {
            handle: e.handle(),
            progress: e.progress(),
            addr,
            id,
            task: tokio::spawn(e.wait()),
        }
    }
}

async fn add(
    e: Engine,
    meta: &Arc<Metainfo>,
    dir: &Path,
    open: OpenOptions,
    peers: Vec<SocketAddr>,
    seed: bool,
) -> Result<Node, EngineError> {
    let id = e
        .add_torrent(TorrentSource {
            meta: meta.clone(),
            dir: dir.to_path_buf(),
            open,
            peers,
            seed,
            paused: false,
            files: None,
            priorities: None,
        })
        .await?;
    let addr = e.bt_addr.unwrap();
    Ok(Node::of(e, id, addr))
}

/// `weir seed`: what is in `dir`, read-only, kept running.
async fn seeder(meta: &Arc<Metainfo>, dir: &Path) -> Node {
    let mut n = add(
        engine(true, 0).await,
        meta,
        dir,
        OpenOptions::seed(),
        vec![],
        true,
    )
    .await
    .unwrap();
    n.wait_for("the seeder to be ready", |t| t.phase == Phase::Seeding)
        .await;
    n
}

/// `weir get --peer SEEDER`: ends when complete.
async fn leecher(
    meta: &Arc<Metainfo>,
    dir: &Path,
    seeder: &Node,
    open: OpenOptions,
    down: u64,
) -> Result<Node, EngineError> {
    add(
        engine(false, down).await,
        meta,
        dir,
        open,
        vec![seeder.addr],
        false,
    )
    .await
}

fn no_space_check() -> OpenOptions {
    OpenOptions {
        space_check: false,
        ..OpenOptions::download()
    }
}

fn used_bytes(dir: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    (st.blocks() - st.blocks_free()) as u64 * st.fragment_size() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_pauses_the_download_bounds_memory_and_resumes() {
    logs();
    if !mounts::available(false).unwrap() {
        return;
    }
    let src = TempDir::new("enospc-src").unwrap();
    let data = payload(160 << 20, 21);
    let meta = torrent(src.path(), "big.bin", &data, 256 << 10);
    let seed = seeder(&meta, src.path()).await;
    let fs = Tmpfs::mount(48 << 20).unwrap();
    let dl = fs.path().join("dl");
    // Refused up front: 160 MiB do not fit in 48.
    match leecher(&meta, &dl, &seed, OpenOptions::download(), 0).await {
        Err(EngineError::Open(e @ OpenError::NoSpace { .. })) => {
            assert!(e.to_string().contains("--no-space-check"), "{e}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("started a download that cannot fit"),
    }
    // Files are sparse: without the check it starts, and pauses when full.
    let mut leech = leecher(&meta, &dl, &seed, no_space_check(), 0)
        .await
        .unwrap();
    leech
        .wait_for("the disk to fill", |t| t.disk_full.is_some())
        .await;
    let line = wait_logged(&["disk full:", &format!("at {}", dl.display())]).await;
    assert!(line.contains("waiting for space"), "{line}");
    // While full, what it holds beyond what is written stays bounded (the
    // storage backlog stops the readers): watched for 2 s.
    let t0 = Instant::now();
    let mut held_max = 0u64;
    while t0.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = leech.info();
        assert!(t.disk_full.is_some(), "no longer paused with the disk full");
        assert!(t.phase == Phase::Downloading, "{:?}", t.phase);
        held_max = held_max.max(t.downloaded.0.saturating_sub(used_bytes(fs.path())));
    }
    eprintln!("held beyond the disk while full: {held_max} bytes");
    assert!(
        held_max <= BACKLOG_LIMIT + (8 << 20),
        "held {held_max} bytes beyond the disk's"
    );
    assert!(
        held_max >= 1 << 20,
        "held only {held_max}: did it pause while downloading?"
    );
    // Room again: it resumes and completes, nothing fetched twice.
    fs.resize(256 << 20).unwrap();
    let t = leech.finish("completion").await;
    assert!(t.complete_at.is_some());
    assert_eq!(t.disk_full, None);
    let n = data.len() as u64;
    assert!(
        t.downloaded.0 >= n && t.downloaded.0 <= n + n / 100,
        "downloaded {} for {n}",
        t.downloaded.0
    );
    assert!(std::fs::read(dl.join("big.bin")).unwrap() == data);
    wait_logged(&[&format!("space available again at {}", dl.display())]).await;
    seed.stop("the seeder").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_paused_by_a_full_disk_still_stops() {
    logs();
    if !mounts::available(false).unwrap() {
        return;
    }
    let src = TempDir::new("enospc-stop-src").unwrap();
    let data = payload(64 << 20, 22);
    let meta = torrent(src.path(), "f.bin", &data, 256 << 10);
    let seed = seeder(&meta, src.path()).await;
    let fs = Tmpfs::mount(8 << 20).unwrap();
    let mut leech = leecher(&meta, &fs.path().join("dl"), &seed, no_space_check(), 0)
        .await
        .unwrap();
    leech
        .wait_for("the disk to fill", |t| t.disk_full.is_some())
        .await;
    // Let the network fill the backlog too (the driver stops reading
    // connections above it): a stop must be heard all the same.
    let root = fs.path().to_path_buf();
    leech
        .wait_for("the backlog to fill", |t| {
            t.downloaded.0 >= used_bytes(&root) + BACKLOG_LIMIT
        })
        .await;
    let t = leech
        .stop("a download paused by a full disk")
        .await
        .unwrap();
    assert!(t.complete_at.is_none());
    seed.stop("the seeder").await.unwrap();
}

/// The disk pool is shared by every transfer of the process: a download
/// paused by its full disk must not hold up another one's writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_one_download_does_not_hold_up_another() {
    logs();
    if !mounts::available(false).unwrap() {
        return;
    }
    let src = TempDir::new("enospc-two-src").unwrap();
    let big = payload(64 << 20, 26);
    let small = payload(16 << 20, 27);
    let big_meta = torrent(src.path(), "big.bin", &big, 256 << 10);
    let small_meta = torrent(src.path(), "small.bin", &small, 256 << 10);
    let big_seed = seeder(&big_meta, src.path()).await;
    let small_seed = seeder(&small_meta, src.path()).await;
    let fs = Tmpfs::mount(8 << 20).unwrap();
    let mut full = leecher(
        &big_meta,
        &fs.path().join("dl"),
        &big_seed,
        no_space_check(),
        0,
    )
    .await
    .unwrap();
    full.wait_for("the disk to fill", |t| t.disk_full.is_some())
        .await;
    let dst = TempDir::new("enospc-two-dst").unwrap();
    let other = leecher(
        &small_meta,
        dst.path(),
        &small_seed,
        OpenOptions::download(),
        0,
    )
    .await
    .unwrap();
    let t = other.finish("the download on the other disk").await;
    assert!(t.complete_at.is_some());
    assert!(std::fs::read(dst.path().join("small.bin")).unwrap() == small);
    // The first one is still paused, and still stops.
    let t = full.info();
    assert!(
        t.disk_full.is_some() && t.phase == Phase::Downloading,
        "{t:?}"
    );
    let t = full
        .stop("the download paused by its full disk")
        .await
        .unwrap();
    assert!(t.complete_at.is_none());
    big_seed.stop("a seeder").await.unwrap();
    small_seed.stop("a seeder").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_truncated_under_the_seeder_stops_being_offered() {
    logs();
    let src = TempDir::new("trunc-src").unwrap();
    let dst = TempDir::new("trunc-dst").unwrap();
    let data = payload(8 << 20, 23);
    let meta = torrent(src.path(), "t.bin", &data, 64 << 10);
    let mut seed = seeder(&meta, src.path()).await;
    assert_eq!(seed.info().bytes_had, 8 << 20);
    // Cut inside piece 64, under the running seeder: pieces 64..128 are
    // gone (it finds out when a peer asks for one).
    std::fs::OpenOptions::new()
        .write(true)
        .open(src.path().join("t.bin"))
        .unwrap()
        .set_len((4 << 20) + 100)
        .unwrap();
    let mut leech = leecher(&meta, dst.path(), &seed, OpenOptions::download(), 0)
        .await
        .unwrap();
    seed.wait_for("the seeder to drop what it lost", |t| {
        t.bytes_had == 4 << 20
    })
    .await;
    // The downloader gets all that is still offered, and is refused the rest.
    leech
        .wait_for("the rest of what the seeder has", |t| {
            t.bytes_had >= 4 << 20
        })
        .await;
    let line = wait_logged(&[&src.path().display().to_string(), "no longer readable"]).await;
    assert!(line.contains("64 pieces"), "{line}");
    let t = leech.stop("the downloader").await.unwrap();
    assert_eq!(t.bytes_had, 4 << 20);
    assert!(t.complete_at.is_none());
    assert_eq!(t.hash_failures, 0);
    let s = seed.stop("the seeder").await.unwrap();
    assert_eq!(s.bytes_had, 4 << 20);
    assert_eq!(s.error, None);
    // What was received is the file's first half, exactly.
    let got = std::fs::read(dst.path().join("t.bin")).unwrap();
    assert!(got[..4 << 20] == data[..4 << 20]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_errors_under_the_seeder_stop_the_pieces_not_the_seeder() {
    logs();
    if !mounts::available(true).unwrap() {
        return;
    }
    let fs = Ext4::mount(64 << 20).unwrap();
    let dst = TempDir::new("eio-dst").unwrap();
    let data = payload(16 << 20, 24);
    let src = fs.path().join("src");
    let meta = torrent(&src, "e.bin", &data, 64 << 10);
    let mut seed = seeder(&meta, &src).await;
    // What the seeder wrote (its journal) is on the disk before it fails.
    nix::unistd::sync();
    let mut leech = leecher(&meta, dst.path(), &seed, OpenOptions::download(), 4_000_000)
        .await
        .unwrap();
    leech
        .wait_for("a first MiB", |t| t.bytes_had >= 1 << 20)
        .await;
    fs.shut_down().unwrap();
    seed.wait_for("the seeder to drop unreadable pieces", |t| {
        t.bytes_had < 16 << 20
    })
    .await;
    let line = wait_logged(&[&src.display().to_string(), "no longer readable"]).await;
    assert!(line.contains("Input/output error"), "{line}");
    let s = seed.info();
    assert!(
        s.phase == Phase::Seeding && s.error.is_none(),
        "{:?} {:?}",
        s.phase,
        s.error
    );
    assert!(!seed.task.is_finished(), "the seeder's engine ended");
    let t = leech.stop("the downloader").await.unwrap();
    assert!(t.complete_at.is_none());
    assert_eq!(t.hash_failures, 0);
    let s = seed.stop("the seeder").await;
    assert!(s.is_ok(), "{s:?}");
}

/// A byte changed on disk while the journal still vouches for its piece
/// (the file's mtime put back): only `recheck` can find it, and it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recheck_finds_a_corrupted_byte_and_fetches_it_again() {
    logs();
    let src = TempDir::new("recheck-src").unwrap();
    let dst = TempDir::new("recheck-dst").unwrap();
    let data = payload(4 << 20, 25);
    let meta = torrent(src.path(), "r.bin", &data, 64 << 10);
    let seed = seeder(&meta, src.path()).await;
    let run = |recheck: bool| {
        let open = OpenOptions {
            recheck,
            ..OpenOptions::download()
        };
        leecher(&meta, dst.path(), &seed, open, 0)
    };
    let t = run(false).await.unwrap().finish("a download").await;
    assert!(t.complete_at.is_some());
    assert_eq!(t.downloaded.0, 4 << 20);
    let path: PathBuf = dst.path().join("r.bin");
    let md = std::fs::metadata(&path).unwrap();
    let mut bad = data.clone();
    bad[10 * 65_536 + 3] ^= 0x20;
    std::fs::write(&path, &bad).unwrap();
    let (atime, mtime) = {
        use std::os::unix::fs::MetadataExt;
        (
            nix::sys::time::TimeSpec::new(md.atime(), md.atime_nsec()),
            nix::sys::time::TimeSpec::new(md.mtime(), md.mtime_nsec()),
        )
    };
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        &path,
        &atime,
        &mtime,
        nix::sys::stat::UtimensatFlags::FollowSymlink,
    )
    .unwrap();
    // The journal cannot tell: trusted, nothing fetched.
    let t = run(false).await.unwrap().finish("a trusting run").await;
    assert!(t.complete_at.is_some());
    assert_eq!(t.downloaded.0, 0);
    assert!(std::fs::read(&path).unwrap() == bad);
    // recheck hashes it all: that piece is fetched again, and only it.
    let t = run(true).await.unwrap().finish("a recheck").await;
    assert!(t.complete_at.is_some());
    assert!(
        t.downloaded.0 >= 65_536 && t.downloaded.0 <= 2 * 65_536,
        "{}",
        t.downloaded.0
    );
    assert!(std::fs::read(&path).unwrap() == data);
    seed.stop("the seeder").await.unwrap();
}

/// eD2k too: a full disk pauses a download of a shared file (MD4 parts,
/// 256 KiB runs), what it holds stays bounded, and it resumes and completes
/// when space returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_pauses_an_ed2k_download_and_it_resumes() {
    logs();
    if !mounts::available(false).unwrap() {
        return;
    }
    let src = TempDir::new("enospc-ed2k-src").unwrap();
    let data = payload(48 << 20, 26);
    let path = src.path().join("e.bin");
    std::fs::write(&path, &data).unwrap();
    let mut h = Ed2kHasher::new();
    h.update(&data);
    let hashes = h.finish();
    let e = engine(true, 0).await;
    let seed_addr = e.ed2k_addr.unwrap();
    let id = e
        .share(SharedSource {
            path: path.clone(),
            hashes: hashes.clone(),
        })
        .await
        .unwrap();
    let mut seed = Node::of(e, id, seed_addr);
    seed.wait_for("the share to be ready", |t| t.phase == Phase::Seeding)
        .await;
    let link = FileLink {
        name: "e.bin".into(),
        size: hashes.size,
        hash: hashes.file_hash,
        aich: None,
        part_hashes: None,
        sources: Vec::new(),
    };
    let fs = Tmpfs::mount(16 << 20).unwrap();
    let dl = fs.path().join("dl");
    let e = engine(false, 0).await;
    let addr = e.ed2k_addr.unwrap();
    let id = e
        .add_ed2k(Ed2kSource {
            link,
            dir: dl.clone(),
            open: no_space_check(),
            peers: vec![seed_addr],
            seed: false,
            paused: false,
        })
        .await
        .unwrap();
    let mut leech = Node::of(e, id, addr);
    leech
        .wait_for("the disk to fill", |t| t.disk_full.is_some())
        .await;
    wait_logged(&["disk full:", &format!("at {}", dl.display())]).await;
    let t0 = Instant::now();
    let mut held_max = 0u64;
    while t0.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = leech.info();
        assert!(t.disk_full.is_some(), "no longer paused with the disk full");
        held_max = held_max.max(t.downloaded.1.saturating_sub(used_bytes(fs.path())));
    }
    eprintln!("eD2k: held beyond the disk while full: {held_max} bytes");
    assert!(
        held_max <= BACKLOG_LIMIT + (8 << 20),
        "held {held_max} bytes beyond the disk's"
    );
    assert!(held_max >= 1 << 20, "held only {held_max}");
    fs.resize(128 << 20).unwrap();
    let t = leech.finish("completion").await;
    assert!(t.complete_at.is_some());
    assert_eq!(t.disk_full, None);
    let n = data.len() as u64;
    assert!(
        t.downloaded.1 >= n && t.downloaded.1 <= n + n / 100,
        "downloaded {} for {n}",
        t.downloaded.1
    );
    assert!(std::fs::read(dl.join("e.bin")).unwrap() == data);
    seed.stop("the eD2k seeder").await.unwrap();
}
