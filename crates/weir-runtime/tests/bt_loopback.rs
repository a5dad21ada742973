//! weir seeds to weir over 127.0.0.1 in one process: whole downloads of a
//! multi-file torrent, and resume after a stop.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir_bt::create::{TorrentBuilder, hash_pieces};
use weir_bt::metainfo::Metainfo;
use weir_core::policy::NetPolicy;
use weir_runtime::bt::{self, BtConfig, Phase};

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-bt-loop-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A multi-file torrent "set" under `dir`: odd sizes and an empty file.
fn make(dir: &Path, piece: u32) -> Arc<Metainfo> {
    let files: Vec<(Vec<&str>, usize)> = vec![
        (vec!["a.bin"], 3_000_001),
        (vec!["empty"], 0),
        (vec!["sub", "b.bin"], 1_234_567),
        (vec!["sub", "deeper", "c.bin"], 777),
    ];
    let mut all = Vec::new();
    let mut b = TorrentBuilder::multi_file("set", piece);
    for (i, (path, len)) in files.iter().enumerate() {
        let data = payload(*len, i as u64 + 11);
        let p: PathBuf = std::iter::once("set").chain(path.iter().copied()).collect();
        std::fs::create_dir_all(dir.join(&p).parent().unwrap()).unwrap();
        std::fs::write(dir.join(&p), &data).unwrap();
        all.extend_from_slice(&data);
        b.add_file(path.iter().map(|s| s.to_string()).collect(), *len as u64);
    }
    b.pieces(hash_pieces(&all, piece));
    Arc::new(b.build().unwrap().metainfo)
}

fn same_tree(a: &Path, b: &Path) {
    for rel in [
        "set/a.bin",
        "set/empty",
        "set/sub/b.bin",
        "set/sub/deeper/c.bin",
    ] {
        let x = std::fs::read(a.join(rel)).unwrap();
        let y = std::fs::read(b.join(rel)).unwrap();
        assert!(x == y, "{rel} differs");
    }
}

async fn seeder(meta: Arc<Metainfo>, dir: &Path) -> bt::BtHandle {
    let mut cfg = BtConfig::new(NetPolicy::loopback(), dir.to_path_buf());
    cfg.listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.seed = true;
    cfg.use_trackers = false;
    let h = bt::start(meta, cfg).await.unwrap();
    let mut p = h.progress.clone();
    p.wait_for(|p| p.phase == Phase::Seeding).await.unwrap();
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_downloads_from_weir() {
    let src = tmp("src");
    let dst = tmp("dst");
    let meta = make(&src, 64 * 1024);
    let seed = seeder(meta.clone(), &src).await;
    let mut cfg = BtConfig::new(NetPolicy::loopback(), dst.clone());
    cfg.peers = vec![seed.local_addr.unwrap()];
    cfg.use_trackers = false;
    let leech = bt::start(meta.clone(), cfg).await.unwrap();
    let summary = leech.wait().await.unwrap();
    assert!(summary.complete);
    assert_eq!(summary.stats.downloaded, meta.info.total_length());
    same_tree(&src, &dst);
    seed.stop().await;
    seed.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_download_resumes_without_refetching_verified_pieces() {
    let src = tmp("rsrc");
    let dst = tmp("rdst");
    let meta = make(&src, 32 * 1024);
    let total = meta.info.total_length();
    let seed = seeder(meta.clone(), &src).await;
    let addr = seed.local_addr.unwrap();
    let start = |down: u64| {
        let mut cfg = BtConfig::new(NetPolicy::loopback(), dst.clone());
        cfg.peers = vec![addr];
        cfg.use_trackers = false;
        if down > 0 {
            cfg.down =
                weir_runtime::bandwidth::Limiter::new(vec![weir_runtime::bandwidth::bucket(down)]);
        }
        bt::start(meta.clone(), cfg)
    };
    // First run: slowed to 2 MB/s, stopped once about half is verified.
    let first = start(2_000_000).await.unwrap();
    let mut p = first.progress.clone();
    p.wait_for(|p| p.stats.bytes_had > total / 2).await.unwrap();
    first.stop().await;
    let s1 = first.wait().await.unwrap();
    assert!(!s1.complete);
    let had = s1.stats.bytes_had;
    // Second run: only what was missing comes over the wire.
    let second = start(0).await.unwrap();
    let s2 = second.wait().await.unwrap();
    assert!(s2.complete);
    assert!(
        s2.stats.downloaded <= total - had + 256 * 1024,
        "re-downloaded {} of {} with {} verified before",
        s2.stats.downloaded,
        total,
        had
    );
    same_tree(&src, &dst);
    // A third run on the complete download starts complete: nothing fetched.
    let third = start(0).await.unwrap();
    let s3 = third.wait().await.unwrap();
    assert!(s3.complete);
    assert_eq!(s3.stats.downloaded, 0);
    seed.stop().await;
    seed.wait().await.unwrap();
}
