//! [`EngineBackend`] over a real engine in this process (no listener, no
//! peer, no tracker): transfers and their settings come back from the
//! state after the engine and the backend are made again, removal with
//! data deletes a multi-file torrent's folder and its kept .torrent, and a
//! kept .torrent that no longer matches the state is refused naming it.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::make_torrent;
use weir_core::policy::NetPolicy;
use weir_daemon::Backend;
use weir_daemon::backend::*;
use weir_daemon::engine::state::StateError;
use weir_daemon::engine::{BackendConfig, EngineBackend};
use weir_runtime::bandwidth::bucket;
use weir_runtime::engine::{Engine, EngineConfig};
use weir_session::SessionConfig;

const LINK: &str = "ed2k://|file|c.bin|5000000|D3B6B09D73D3FE0DD41DDE5ED244215A|/";

async fn engine() -> Engine {
    let s = SessionConfig::new(NetPolicy::loopback(), [7; 20], weir_ed2k::Md4Hash([9; 16]));
    let mut cfg = EngineConfig::new(s);
    cfg.keep_running = true;
    cfg.use_trackers = false;
    Engine::start(cfg)
        .await
        .expect("an engine without listeners starts")
}

fn config(state: &Path, downloads: &Path) -> BackendConfig {
    BackendConfig {
        state_dir: state.to_path_buf(),
        download_dir: downloads.to_path_buf(),
        peer_port: 0,
        policy: NetPolicy::loopback(),
        down: bucket(0),
        up: bucket(0),
    }
}

async fn all(b: &EngineBackend) -> Vec<std::sync::Arc<TransferView>> {
    b.transfers(TransferQuery {
        select: Selection::All,
        detail: Detail {
            files: true,
            ..Detail::default()
        },
    })
    .await
    .expect("torrent-get")
    .transfers
}

/// Reads the transfers until `done` (every 20 ms, at most 30 s).
async fn wait(
    b: &EngineBackend,
    what: &str,
    done: impl Fn(&[std::sync::Arc<TransferView>]) -> bool,
) -> Vec<std::sync::Arc<TransferView>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let t = all(b).await;
        if done(&t) {
            return t;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {t:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stop(e: Engine) {
    e.stop().await;
    e.wait().await.expect("a clean stop");
}

fn tmp(tag: &str) -> anyhow::Result<(weir_lab::TempDir, PathBuf, PathBuf)> {
    let dir = weir_lab::TempDir::new(tag)?;
    let state = dir.path().join("state");
    let downloads = dir.subdir("src")?;
    Ok((dir, state, downloads))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_come_back_from_the_state_and_leave_with_their_data() -> anyhow::Result<()> {
    let (dir, state, downloads) = tmp("engine-backend-state")?;
    // The torrent's data is already in the download directory: it checks
    // complete and seeds.
    let (torrent, info) = make_torrent(
        dir.path(),
        "multi",
        &[("a.txt", 300_000), ("d/b.txt", 200_000)],
    )?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    let mut req = AddRequest::new(AddSource::Metainfo(Bytes::from(std::fs::read(&torrent)?)));
    req.labels = vec!["tv".into()];
    let AddOutcome::Added(t) = b.add(req.clone()).await? else {
        panic!("not added")
    };
    assert_eq!(t.id, 1);
    assert!(matches!(b.add(req).await?, AddOutcome::Duplicate(d) if d.id == 1));
    let mut ed = AddRequest::new(AddSource::Ed2k(LINK.into()));
    ed.paused = Some(true);
    let AddOutcome::Added(t2) = b.add(ed).await? else {
        panic!("not added")
    };
    assert_eq!(t2.id, 2);
    let seen = wait(&b, "the torrent seeding", |t| {
        t.len() == 2 && t[0].state == TransferState::Seeding
    })
    .await;
    assert_eq!(seen[0].have_valid, 500_000);
    assert_eq!(
        seen[0].files.iter().map(|f| f.bytes_completed).sum::<u64>(),
        500_000
    );
    assert_eq!(seen[1].state, TransferState::Stopped);
    stop(e).await;
    drop(b);

    // A new engine and backend on the same state.
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    let back = wait(&b, "the torrent seeding again", |t| {
        t.len() == 2 && t[0].state == TransferState::Seeding
    })
    .await;
    assert_eq!(back[0].id, 1);
    assert_eq!(back[0].hash.to_hex(), info.info_hash_hex());
    assert_eq!(&*back[0].labels, &["tv".to_string()]);
    assert_eq!(back[0].added_date, seen[0].added_date);
    assert_eq!(back[1].id, 2);
    assert_eq!(&*back[1].name, "c.bin");
    assert_eq!(back[1].state, TransferState::Stopped, "paused stays paused");

    // Removed with its data: the folder, the kept .torrent, the record.
    b.remove(Selection::Refs(vec![TransferRef::Id(1)]), true)
        .await?;
    assert!(!downloads.join("multi").exists());
    assert_eq!(std::fs::read_dir(state.join("torrents"))?.count(), 0);
    let left = all(&b).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id, 2);
    // A new add never takes a used id.
    let (t3, _) = make_torrent(dir.path(), "one", &[("", 70_000)])?;
    let AddOutcome::Added(t3) = b.add(AddRequest::new(AddSource::Path(t3))).await? else {
        panic!("not added")
    };
    assert_eq!(t3.id, 3);
    stop(e).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_torrent_that_does_not_match_is_refused() -> anyhow::Result<()> {
    let (dir, state, downloads) = tmp("engine-backend-refuse")?;
    let (torrent, info) = make_torrent(dir.path(), "x", &[("", 100_000)])?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    b.add(AddRequest::new(AddSource::Path(torrent))).await?;
    stop(e).await;
    drop(b);
    let kept = state
        .join("torrents")
        .join(format!("{}.torrent", info.info_hash_hex()));
    assert!(kept.exists());
    let (other, _) = make_torrent(dir.path(), "y", &[("", 100_000)])?;
    std::fs::copy(&other, &kept)?;
    let e = engine().await;
    match EngineBackend::start(config(&state, &downloads), e.handle()).await {
        Err(StateError::Corrupt { path, why }) => {
            assert_eq!(path, kept);
            assert!(why.contains("info-hash"), "{why}");
        }
        other => panic!("started: {other:?}"),
    }
    std::fs::remove_file(&kept)?;
    match EngineBackend::start(config(&state, &downloads), e.handle()).await {
        Err(StateError::Io { path, .. }) => assert_eq!(path, kept),
        other => panic!("started: {other:?}"),
    }
    stop(e).await;
    Ok(())
}
