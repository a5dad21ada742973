//! The engine seeds to the engine over 127.0.0.1 in one process: whole
//! downloads of a multi-file torrent, and resume after a stop.

mod engine_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engine_common::*;
use weir_bt::create::{TorrentBuilder, hash_pieces};
use weir_bt::metainfo::Metainfo;
use weir_runtime::engine::{Engine, EngineConfig};
use weir_session::TransferInfo;

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

/// Runs a download of `meta` into `dst` from `peer` to its end.
async fn download(
    meta: &Arc<Metainfo>,
    dst: &Path,
    peer: std::net::SocketAddr,
    cfg: EngineConfig,
) -> TransferInfo {
    let e = Engine::start(cfg).await.unwrap();
    let id = e
        .add_torrent(download_source(meta.clone(), dst, vec![peer]))
        .await
        .unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(60), e.wait())
        .await
        .expect("the download did not end in time")
        .unwrap();
    summary.transfers.into_iter().find(|t| t.id == id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_downloads_from_the_engine() {
    let src = tmp("loop-src");
    let dst = tmp("loop-dst");
    let meta = make(&src, 64 * 1024);
    let (seed, _) = seeder(meta.clone(), &src, config()).await;
    let t = download(&meta, &dst, seed.bt_addr.unwrap(), config()).await;
    assert!(t.complete_at.is_some());
    assert_eq!(t.bytes_had, meta.info.total_length());
    // Every byte once (an endgame may ask a block twice; none is here: one
    // peer).
    assert_eq!(t.downloaded, (meta.info.total_length(), 0));
    same_tree(&src, &dst);
    stop(seed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_download_resumes_without_refetching_verified_pieces() {
    let src = tmp("resume-src");
    let dst = tmp("resume-dst");
    let meta = make(&src, 32 * 1024);
    let total = meta.info.total_length();
    let (seed, _) = seeder(meta.clone(), &src, config()).await;
    let addr = seed.bt_addr.unwrap();
    // First run: slowed to 2 MB/s, stopped once about half is verified.
    let mut cfg = config();
    cfg.down =
        weir_runtime::bandwidth::Limiter::new(vec![weir_runtime::bandwidth::bucket(2_000_000)]);
    let first = Engine::start(cfg).await.unwrap();
    let id = first
        .add_torrent(download_source(meta.clone(), &dst, vec![addr]))
        .await
        .unwrap();
    progress_until(&first, Duration::from_secs(30), "half verified", |s| {
        info(s, id).is_some_and(|t| t.bytes_had > total / 2)
    })
    .await;
    first.stop().await;
    let s1 = first.wait().await.unwrap();
    let t1 = s1.transfers.iter().find(|t| t.id == id).unwrap();
    assert!(t1.complete_at.is_none(), "the first run completed");
    let had = t1.bytes_had;
    assert!((total / 2..total).contains(&had), "{had} of {total}");
    // Second run: only what was missing comes over the wire (less the
    // whole blocks of unfinished pieces written before the stop).
    let t2 = download(&meta, &dst, addr, config()).await;
    assert!(t2.complete_at.is_some());
    let got = t2.downloaded.0;
    assert!(
        ((total - had).saturating_sub(1 << 20)..=total - had + 256 * 1024).contains(&got),
        "re-downloaded {got} of {total} with {had} verified before"
    );
    same_tree(&src, &dst);
    // A third run on the complete download starts complete: nothing fetched.
    let t3 = download(&meta, &dst, addr, config()).await;
    assert!(t3.complete_at.is_some());
    assert_eq!(t3.downloaded, (0, 0));
    stop(seed).await;
}
