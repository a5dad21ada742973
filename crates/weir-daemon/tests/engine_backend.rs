//! [`EngineBackend`] over a real engine in this process (no listener, no
//! peer, no tracker): transfers and their settings come back from the
//! state after the engine and the backend are made again, removal with
//! data deletes a multi-file torrent's folder and its kept .torrent, and a
//! kept .torrent that no longer matches the state is refused naming it.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::{engine, engine_config as config, make_torrent};
use weir_daemon::Backend;
use weir_daemon::backend::*;
use weir_daemon::engine::EngineBackend;
use weir_daemon::engine::state::StateError;
use weir_runtime::engine::Engine;

const LINK: &str = "ed2k://|file|c.bin|5000000|D3B6B09D73D3FE0DD41DDE5ED244215A|/";

async fn all(b: &EngineBackend) -> Vec<std::sync::Arc<TransferView>> {
    b.transfers(TransferQuery {
        select: Selection::All,
        detail: Detail {
            files: true,
            ..Detail::default()
        },
        row_key: None,
    })
    .await
    .expect("torrent-get")
    .transfers
}

/// The list views (no costly parts, as transmission-remote -l asks), each
/// checked against a full view read just before (files left out): the
/// backend reuses an idle transfer's list view, and this is where a reused
/// view that missed a change would show. Then read again: with nothing
/// changed, the same views, not new ones. A transfer may still be settling
/// (a paused add is opened in the engine after `add` returns): the reads
/// are repeated every 20 ms until they agree, for at most 10 s, so only a
/// list that stays wrong fails.
async fn list(b: &EngineBackend) -> Vec<std::sync::Arc<TransferView>> {
    let q = TransferQuery {
        select: Selection::All,
        detail: Detail::default(),
        row_key: None,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let full = all(b).await;
        let listed = b.transfers(q.clone()).await.expect("torrent-get").transfers;
        let again = b.transfers(q.clone()).await.expect("torrent-get").transfers;
        let differs = if full.len() != listed.len() {
            Some((
                format!("{} transfers", full.len()),
                format!("{}", listed.len()),
            ))
        } else {
            full.iter().zip(&listed).find_map(|(f, l)| {
                let mut f = (**f).clone();
                f.files = Vec::new();
                let (f, l) = (format!("{f:?}"), format!("{l:?}"));
                (f != l).then_some((f, l))
            })
        };
        let rebuilt = again.len() != listed.len()
            || again
                .iter()
                .zip(&listed)
                .any(|(a, l)| !std::sync::Arc::ptr_eq(a, l));
        if differs.is_none() && !rebuilt {
            return listed;
        }
        if tokio::time::Instant::now() >= deadline {
            match differs {
                Some((f, l)) => panic!("a list view differs:\n full {f}\n list {l}"),
                None => panic!("an idle view was built again"),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    // A clean stop writes the snapshot: the kept .torrent is then the only
    // copy (before, the log holds its bytes and puts it back).
    b.save_all().await?;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torrent_set_queue_location_and_settings_on_the_engine() -> anyhow::Result<()> {
    let (dir, state, downloads) = tmp("engine-backend-set")?;
    let (one, _) = make_torrent(dir.path(), "one.bin", &[("", 150_000)])?;
    let (two, _) = make_torrent(dir.path(), "two", &[("a", 70_000), ("b/c", 90_000)])?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    for t in [&one, &two] {
        b.add(AddRequest::new(AddSource::Path(t.clone()))).await?;
    }
    // An eD2k link added paused is paused in the engine from the start.
    let mut ed = AddRequest::new(AddSource::Ed2k(LINK.into()));
    ed.paused = Some(true);
    b.add(ed).await?;
    wait(&b, "both torrents seeding", |t| {
        t.len() == 3 && t[..2].iter().all(|v| v.state == TransferState::Seeding)
    })
    .await;
    let snap = e.handle().snapshot().await;
    let c = snap
        .iter()
        .find(|i| &*i.name == "c.bin")
        .expect("in the engine");
    assert_eq!(c.phase, weir_session::Phase::Paused);
    assert_eq!(c.downloaded, (0, 0));

    // Caps, ratio goal and labels read back.
    let one_sel = || Selection::Refs(vec![TransferRef::Id(1)]);
    b.change(
        one_sel(),
        TransferChange {
            download_limit: Some(40),
            download_limited: Some(true),
            upload_limit: Some(30),
            upload_limited: Some(true),
            labels: Some(vec!["x".into()]),
            files_wanted: Some(FileSet::All),
            ..TransferChange::default()
        },
    )
    .await?;
    let v = &list(&b).await[0];
    assert_eq!(
        v.download_limit,
        SpeedLimit {
            kbps: 40,
            enabled: true
        }
    );
    assert_eq!(
        v.upload_limit,
        SpeedLimit {
            kbps: 30,
            enabled: true
        }
    );
    assert_eq!(&*v.labels, &["x".to_string()]);
    // A bandwidth priority is refused naming it, a file index past the
    // last is refused, and nothing changes either time.
    let high = TransferChange {
        bandwidth_priority: Some(Priority::High),
        download_limit: Some(1),
        ..TransferChange::default()
    };
    match b.change(one_sel(), high).await {
        Err(BackendError::Unsupported(m)) => assert!(m.contains("bandwidthPriority"), "{m}"),
        other => panic!("{other:?}"),
    }
    let past = TransferChange {
        files_unwanted: Some(FileSet::Indices(vec![7])),
        download_limit: Some(1),
        ..TransferChange::default()
    };
    match b.change(one_sel(), past).await {
        Err(BackendError::FileIndexOutOfRange(7)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(list(&b).await[0].download_limit.kbps, 40);
    // A ratio goal of 0 is met by a complete torrent: it stops, finished.
    b.change(
        one_sel(),
        TransferChange {
            seed_ratio_limit: Some(0.0),
            seed_ratio_mode: Some(LimitMode::Single),
            ..TransferChange::default()
        },
    )
    .await?;
    let t = wait(&b, "stopped at its ratio goal", |t| {
        t[0].state == TransferState::Stopped && t[0].is_finished
    })
    .await;
    assert_eq!(t[0].seed_ratio_mode, LimitMode::Single);
    assert!(list(&b).await[0].is_finished);
    assert_eq!(t[1].state, TransferState::Seeding, "the other goes on");

    // Queue moves.
    let pos = |t: &[std::sync::Arc<TransferView>]| -> Vec<u32> {
        t.iter().map(|v| v.queue_position).collect()
    };
    assert_eq!(pos(&list(&b).await), vec![0, 1, 2]);
    b.act(Selection::Refs(vec![TransferRef::Id(3)]), Action::QueueTop)
        .await?;
    assert_eq!(pos(&list(&b).await), vec![1, 2, 0]);
    b.act(one_sel(), Action::QueueDown).await?;
    assert_eq!(pos(&list(&b).await), vec![2, 1, 0]);
    b.act(
        Selection::Refs(vec![TransferRef::Id(3)]),
        Action::QueueBottom,
    )
    .await?;
    b.act(Selection::Refs(vec![TransferRef::Id(2)]), Action::QueueUp)
        .await?;
    assert_eq!(pos(&list(&b).await), vec![1, 0, 2]);
    b.act(Selection::All, Action::Reannounce).await?;

    // Moved with its data: the folder leaves, the torrent seeds from there.
    let moved = dir.subdir("moved")?;
    b.set_location(
        Selection::Refs(vec![TransferRef::Id(2)]),
        moved.clone(),
        true,
    )
    .await?;
    assert!(!downloads.join("two").exists());
    assert_eq!(std::fs::read(moved.join("two/b/c"))?.len(), 90_000);
    let t = wait(&b, "seeding from the new place", |t| {
        t[1].state == TransferState::Seeding && t[1].have_valid == 160_000
    })
    .await;
    assert_eq!(&*t[1].download_dir, moved.to_str().unwrap());
    assert_eq!(&*list(&b).await[1].download_dir, moved.to_str().unwrap());

    // Session settings persist.
    let elsewhere = dir.subdir("elsewhere")?;
    b.set_session(SessionChange {
        download_dir: Some(elsewhere.clone()),
        seed_ratio_limit: Some(0.25),
        start_added_torrents: Some(false),
        ..SessionChange::default()
    })
    .await?;
    stop(e).await;
    drop(b);
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    let s = b.session().await?;
    assert_eq!(&*s.download_dir, elsewhere.to_str().unwrap());
    assert_eq!(s.seed_ratio_limit, 0.25);
    assert!(!s.start_added_torrents);
    let back = wait(&b, "back from the state", |t| {
        t.len() == 3 && t[1].state == TransferState::Seeding
    })
    .await;
    assert_eq!(pos(&back), vec![1, 0, 2]);
    assert_eq!(pos(&list(&b).await), vec![1, 0, 2]);
    assert!(back[0].is_finished && back[0].state == TransferState::Stopped);
    assert_eq!(
        back[0].download_limit,
        SpeedLimit {
            kbps: 40,
            enabled: true
        }
    );
    assert_eq!(&*back[1].download_dir, moved.to_str().unwrap());
    assert_eq!(back[2].state, TransferState::Stopped);
    stop(e).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encryption_reaches_the_engine_and_persists() -> anyhow::Result<()> {
    use weir_bt::mse::Encryption as Policy;
    let dir = weir_lab::TempDir::new("eb-encryption")?;
    let (state, downloads) = (dir.subdir("state")?, dir.subdir("downloads")?);
    let engine_policy = |e: &Engine, want: Policy| {
        let mut p = e.progress();
        async move {
            tokio::time::timeout(
                Duration::from_secs(10),
                p.wait_for(|s| s.encryption == want),
            )
            .await
            .map(|_| ())
        }
    };
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    assert_eq!(b.session().await?.encryption, Encryption::Preferred);
    for (rpc, policy) in [
        (Encryption::Tolerated, Policy::Allow),
        (Encryption::Required, Policy::Require),
    ] {
        b.set_session(SessionChange {
            encryption: Some(rpc),
            ..SessionChange::default()
        })
        .await?;
        assert_eq!(b.session().await?.encryption, rpc);
        engine_policy(&e, policy).await?;
    }
    stop(e).await;
    drop(b);
    // Kept: a restart with the default flag applies the session-set value.
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    assert_eq!(b.session().await?.encryption, Encryption::Required);
    engine_policy(&e, Policy::Require).await?;
    stop(e).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed2k_magnet_is_added_as_its_ed2k_link() -> anyhow::Result<()> {
    let (_dir, state, downloads) = tmp("engine-backend-ed2k-magnet")?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    let magnet = "magnet:?xt=urn:ed2k:D3B6B09D73D3FE0DD41DDE5ED244215A&xl=5000000&dn=m%20m.bin";
    let mut add = AddRequest::new(AddSource::Magnet(magnet.into()));
    add.paused = Some(true);
    b.add(add).await?;
    let t = list(&b).await;
    assert_eq!(t.len(), 1);
    assert_eq!(&*t[0].name, "m m.bin");
    assert_eq!(t[0].total_size, 5_000_000);
    assert_eq!(
        t[0].hash,
        TransferHash::Ed2k([
            0xD3, 0xB6, 0xB0, 0x9D, 0x73, 0xD3, 0xFE, 0x0D, 0xD4, 0x1D, 0xDE, 0x5E, 0xD2, 0x44,
            0x21, 0x5A
        ])
    );
    // The same file as its ed2k link is a duplicate of it.
    let again = b
        .add(AddRequest::new(AddSource::Ed2k(
            "ed2k://|file|m m.bin|5000000|D3B6B09D73D3FE0DD41DDE5ED244215A|/".into(),
        )))
        .await?;
    assert!(matches!(again, AddOutcome::Duplicate(_)), "{again:?}");
    // Without its size, or with a name that is a path, it is refused
    // naming what is wrong.
    for (bad, says) in [
        (
            "magnet:?xt=urn:ed2k:D3B6B09D73D3FE0DD41DDE5ED244215A",
            "xl=",
        ),
        (
            "magnet:?xt=urn:ed2k:D3B6B09D73D3FE0DD41DDE5ED244215A&xl=5&dn=..%2Fx",
            "unsafe file name",
        ),
    ] {
        match b.add(AddRequest::new(AddSource::Magnet(bad.into()))).await {
            Err(BackendError::InvalidTorrent(m)) => assert!(m.contains(says), "{bad}: {m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(list(&b).await.len(), 1);
    // An eD2k download is one file: it cannot leave it unwanted.
    let mut add = AddRequest::new(AddSource::Ed2k(
        "ed2k://|file|n.bin|5000|D3B6B09D73D3FE0DD41DDE5ED244215B|/".into(),
    ));
    add.files_unwanted = vec![0];
    match b.add(add).await {
        Err(BackendError::Unsupported(m)) => assert!(m.contains("one file"), "{m}"),
        other => panic!("{other:?}"),
    }
    // A magnet's files are not known yet, but a list longer than any
    // torrent's is refused before anything is kept.
    let mut add = AddRequest::new(AddSource::Magnet(format!(
        "magnet:?xt=urn:btih:{}",
        "ab".repeat(20)
    )));
    add.files_unwanted = (0..(1u32 << 20) + 1).collect();
    match b.add(add).await {
        Err(BackendError::Invalid(m)) => assert!(m.contains("file indices"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(list(&b).await.len(), 1);
    stop(e).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_is_counted_before_the_engine_holds_the_transfer() -> anyhow::Result<()> {
    let (dir, state, downloads) = tmp("engine-backend-select-absent")?;
    let (torrent, _) = make_torrent(dir.path(), "sel", &[("a.txt", 300_000), ("b.txt", 200_000)])?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    // A download directory that is a file: its storage cannot open, so
    // the transfer stays out of the engine, failed.
    let not_a_dir = dir.path().join("not-a-dir");
    std::fs::write(&not_a_dir, b"x")?;
    let mut req = AddRequest::new(AddSource::Metainfo(Bytes::from(std::fs::read(&torrent)?)));
    req.download_dir = Some(not_a_dir);
    req.files_unwanted = vec![1];
    b.add(req).await?;
    let t = wait(&b, "the add failed", |t| {
        t.len() == 1 && !matches!(t[0].error, TransferError::None)
    })
    .await;
    assert_eq!(t[0].total_size, 500_000);
    assert_eq!(t[0].size_when_done, 300_000, "{:?}", t[0]);
    assert_eq!(
        t[0].files.iter().map(|f| f.wanted).collect::<Vec<_>>(),
        [true, false]
    );
    stop(e).await;
    Ok(())
}

/// `torrent-get` over RPC answers an idle transfer from its cached row
/// from the third read on (the backend then keeps the row, not a second
/// full view), and every change still shows: a stop and a start change the
/// status, and another field list is written afresh and right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_rows_follow_every_change_over_rpc() -> anyhow::Result<()> {
    use serde_json::{Value, json};
    use weir_daemon::client::RpcClient;
    use weir_daemon::{RpcConfig, RpcServer};
    let (dir, state, downloads) = tmp("engine-backend-rows")?;
    let (torrent, _) = make_torrent(dir.path(), "rows.bin", &[("", 300_000)])?;
    let e = engine().await;
    let b =
        std::sync::Arc::new(EngineBackend::start(config(&state, &downloads), e.handle()).await?);
    let AddOutcome::Added(t) = b.add(AddRequest::new(AddSource::Path(torrent))).await? else {
        panic!("not added")
    };
    wait(&b, "the torrent seeding", |v| {
        v.len() == 1 && v[0].state == TransferState::Seeding
    })
    .await;
    let server = RpcServer::bind(RpcConfig::new("127.0.0.1:0".parse()?), b.clone()).await?;
    let h = server.spawn();
    let c = RpcClient::new(h.addr());
    let get = |fields: Vec<&'static str>| {
        let c = &c;
        async move {
            let r = c
                .call("torrent-get", json!({ "fields": fields }))
                .await
                .expect("torrent-get");
            r["torrents"][0].clone()
        }
    };
    let list = vec!["id", "name", "status"];
    // Until `want` holds, reading again (bounded): a stale row never does.
    let until = |fields: Vec<&'static str>, want: fn(&Value) -> bool, what: &'static str| {
        let get = &get;
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let row = get(fields.clone()).await;
                if want(&row) {
                    return row;
                }
                assert!(tokio::time::Instant::now() < deadline, "{what}: {row}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    for _ in 0..4 {
        let row = get(list.clone()).await;
        assert_eq!(row, json!({"id": t.id, "name": "rows.bin", "status": 6}));
    }
    c.call("torrent-stop", json!({ "ids": [t.id] })).await?;
    until(list.clone(), |r| r["status"] == 0, "stopped").await;
    for _ in 0..3 {
        assert_eq!(get(list.clone()).await["status"], 0);
    }
    let other = get(vec!["id", "percentDone", "status"]).await;
    assert_eq!((&other["id"], &other["status"]), (&json!(t.id), &json!(0)));
    assert_eq!(other["percentDone"].as_f64(), Some(1.0), "{other}");
    c.call("torrent-start", json!({ "ids": [t.id] })).await?;
    until(list.clone(), |r| r["status"] == 6, "seeding again").await;
    until(
        vec!["id", "percentDone", "status"],
        |r| r["status"] == 6,
        "the other list too",
    )
    .await;
    h.stop().await?;
    stop(e).await;
    Ok(())
}

/// File priorities set at add and by torrent-set show in the files' views,
/// restart the transfer with them (it seeds again from its journal), and
/// come back from the state after a restart of the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_priorities_show_and_persist() -> anyhow::Result<()> {
    let (dir, state, downloads) = tmp("engine-backend-prio")?;
    let (torrent, _) = make_torrent(
        dir.path(),
        "prio",
        &[("a.bin", 100_000), ("b.bin", 60_000), ("c.bin", 40_000)],
    )?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    let mut req = AddRequest::new(AddSource::Path(torrent));
    req.priority_low = vec![2];
    req.priority_high = vec![2, 0];
    let AddOutcome::Added(t) = b.add(req).await? else {
        panic!("not added")
    };
    let prio = |v: &TransferView| v.files.iter().map(|f| f.priority).collect::<Vec<_>>();
    let seen = wait(&b, "seeding with its priorities", |v| {
        v.len() == 1 && v[0].state == TransferState::Seeding
    })
    .await;
    // Added low then high: file 2 named in both ends high.
    assert_eq!(
        prio(&seen[0]),
        [Priority::High, Priority::Normal, Priority::High]
    );
    let sel = || Selection::Refs(vec![TransferRef::Id(t.id)]);
    b.change(
        sel(),
        TransferChange {
            priority_low: Some(FileSet::Indices(vec![0])),
            priority_normal: Some(FileSet::Indices(vec![2])),
            ..TransferChange::default()
        },
    )
    .await?;
    let again = wait(&b, "seeding again after the change", |v| {
        v.len() == 1
            && v[0].state == TransferState::Seeding
            && v[0]
                .files
                .first()
                .is_some_and(|f| f.priority == Priority::Low)
    })
    .await;
    assert_eq!(
        prio(&again[0]),
        [Priority::Low, Priority::Normal, Priority::Normal]
    );
    assert_eq!(again[0].have_valid, 200_000, "nothing fetched again");
    stop(e).await;
    drop(b);
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    let back = wait(&b, "listed again", |v| v.len() == 1).await;
    assert_eq!(
        prio(&back[0]),
        [Priority::Low, Priority::Normal, Priority::Normal]
    );
    stop(e).await;
    Ok(())
}

/// A transfer removed with its data while it is being added again (a
/// priority change takes it out of the engine and back) is gone from the
/// disk when the removal answers, as one removed at rest is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_removed_while_re_added_has_its_data_deleted_by_the_answer() -> anyhow::Result<()>
{
    let (dir, state, downloads) = tmp("engine-backend-remove-adding")?;
    let (torrent, _) = make_torrent(dir.path(), "gone", &[("a.bin", 100_000)])?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    let AddOutcome::Added(t) = b.add(AddRequest::new(AddSource::Path(torrent))).await? else {
        panic!("not added")
    };
    wait(&b, "seeding", |v| {
        v.len() == 1 && v[0].state == TransferState::Seeding
    })
    .await;
    let data = downloads.join("gone");
    assert!(data.exists());
    let sel = || Selection::Refs(vec![TransferRef::Id(t.id)]);
    for round in 0..5 {
        // Out of the engine and being added back when the removal comes.
        b.change(
            sel(),
            TransferChange {
                priority_high: Some(FileSet::Indices(vec![0])),
                ..TransferChange::default()
            },
        )
        .await?;
        if round < 4 {
            b.change(
                sel(),
                TransferChange {
                    priority_normal: Some(FileSet::Indices(vec![0])),
                    ..TransferChange::default()
                },
            )
            .await?;
        }
    }
    b.remove(sel(), true).await?;
    assert!(
        !data.exists(),
        "data still on disk when the removal answered"
    );
    assert!(all(&b).await.is_empty());
    stop(e).await;
    Ok(())
}

/// Removing many transfers at once (no `ids`: all of them) with their
/// data takes each out of the engine and off the disk by the answer
/// (several at a time), the paused ones too, and leaves the others' data
/// alone when only some are named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_transfers_removed_at_once_leave_with_their_data() -> anyhow::Result<()> {
    const N: usize = 40;
    let (dir, state, downloads) = tmp("engine-backend-remove-many")?;
    let e = engine().await;
    let b = EngineBackend::start(config(&state, &downloads), e.handle()).await?;
    for i in 0..N {
        let (torrent, _) = make_torrent(
            dir.path(),
            &format!("many-{i}"),
            &[("a.bin", 20_000 + i as u64)],
        )?;
        let mut req = AddRequest::new(AddSource::Path(torrent));
        req.paused = Some(i % 4 == 0);
        let AddOutcome::Added(_) = b.add(req).await? else {
            panic!("not added")
        };
    }
    wait(&b, "every transfer checked", |v| {
        v.len() == N
            && v.iter()
                .all(|t| t.state == TransferState::Seeding || t.state == TransferState::Stopped)
    })
    .await;
    let data = |i: usize| downloads.join(format!("many-{i}"));
    assert!((0..N).all(|i| data(i).exists()));
    // Two named: only theirs go.
    b.remove(
        Selection::Refs(vec![TransferRef::Id(1), TransferRef::Id(2)]),
        true,
    )
    .await?;
    assert!(!data(0).exists() && !data(1).exists());
    assert!((2..N).all(|i| data(i).exists()));
    // The rest, all at once.
    b.remove(Selection::All, true).await?;
    let left: Vec<usize> = (0..N).filter(|&i| data(i).exists()).collect();
    assert!(left.is_empty(), "data left on disk: {left:?}");
    assert!(all(&b).await.is_empty());
    assert_eq!(std::fs::read_dir(state.join("torrents"))?.count(), 0);
    stop(e).await;
    Ok(())
}
