//! File selection through the whole engine (real storage, loopback
//! peers, a fake HTTP tracker in this test): a download of some files of
//! a torrent fetches them byte-identical, creates no file sharing no
//! piece with them, completes, reports `left=0`, and does not announce
//! `completed` (it is a partial seed, as Transmission counts it); the
//! whole torrent announces `completed` before `stopped`.

mod engine_common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use engine_common::*;
use weir_bt::create::{TorrentBuilder, hash_pieces};
use weir_bt::metainfo::Metainfo;
use weir_runtime::engine::Engine;

const LIMIT: Duration = Duration::from_secs(60);
const PIECE: u32 = 64 * 1024;

/// `dir/set/{a,b}.bin`, two pieces each, and a torrent of them.
fn two_files(dir: &Path, tracker: SocketAddr) -> (Arc<Metainfo>, Vec<u8>) {
    let data = payload(4 * PIECE as usize, 7);
    std::fs::create_dir_all(dir.join("set")).unwrap();
    std::fs::write(dir.join("set/a.bin"), &data[..2 * PIECE as usize]).unwrap();
    std::fs::write(dir.join("set/b.bin"), &data[2 * PIECE as usize..]).unwrap();
    let mut b = TorrentBuilder::multi_file("set", PIECE);
    b.add_file(vec!["a.bin".into()], u64::from(2 * PIECE));
    b.add_file(vec!["b.bin".into()], u64::from(2 * PIECE));
    b.pieces(hash_pieces(&data, PIECE));
    b.trackers(vec![vec![format!("http://{tracker}/announce")]]);
    (Arc::new(b.build().unwrap().metainfo), data)
}

/// Downloads `meta` into a fresh directory from `seed` with `files`
/// selected; the directory, once complete and stopped.
async fn fetch(
    meta: &Arc<Metainfo>,
    seed: SocketAddr,
    files: Option<Vec<bool>>,
    tag: &str,
) -> std::path::PathBuf {
    let dst = tmp(tag);
    let mut cfg = config();
    cfg.use_trackers = true;
    let e = Engine::start(cfg).await.unwrap();
    let mut src = download_source(meta.clone(), &dst, vec![seed]);
    src.files = files.map(Into::into);
    let id = e.add_torrent(src).await.unwrap();
    progress_until(&e, Duration::from_secs(30), "complete", |s| {
        info(s, id).is_some_and(|t| t.complete_at.is_some())
    })
    .await;
    stop(e).await;
    dst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn some_files_are_fetched_and_a_partial_seed_does_not_announce_completed() {
    tokio::time::timeout(LIMIT, async {
        let src = tmp("select-src");
        let (tracker, log) = http_tracker(b"d8:intervali1800e5:peers0:e".to_vec()).await;
        let (meta, data) = two_files(&src, tracker);
        let (seed, _) = seeder(meta.clone(), &src, config()).await;
        let at = seed.bt_addr.unwrap();

        let dst = fetch(&meta, at, Some(vec![false, true]), "select-some").await;
        assert_eq!(
            std::fs::read(dst.join("set/b.bin")).unwrap(),
            &data[2 * PIECE as usize..]
        );
        assert!(
            !dst.join("set/a.bin").exists(),
            "a deselected file was created"
        );
        let partial: Vec<String> = std::mem::take(&mut *log.lock().unwrap());
        assert!(
            partial.iter().any(|l| l.contains("event=started")),
            "{partial:?}"
        );
        assert!(partial.iter().any(|l| l.contains("left=0")), "{partial:?}");
        assert!(
            !partial.iter().any(|l| l.contains("event=completed")),
            "a partial seed announced completed: {partial:?}"
        );

        // The whole torrent: `completed`, then `stopped`, however close
        // the end of the run follows the completion (the engine of a
        // download without --seed stops at once). Several runs, as the
        // race went either way.
        for round in 0..4 {
            fetch(&meta, at, None, &format!("select-all-{round}")).await;
            let whole: Vec<String> = std::mem::take(&mut *log.lock().unwrap());
            let at_event = |e: &str| whole.iter().position(|l| l.contains(e));
            match (at_event("event=completed"), at_event("event=stopped")) {
                (Some(c), Some(s)) => assert!(c < s, "stopped before completed: {whole:?}"),
                _ => panic!("round {round}: completed and stopped not both announced: {whole:?}"),
            }
        }
        stop(seed).await;
    })
    .await
    .unwrap();
}
