use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sha1::{Digest as _, Sha1};
use weir_core::geometry::Geometry;
use weir_core::storage::{Digest, FileLayout, StorageEvent, StorageFault, StorageOp};

use super::*;

struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("weir-storage-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const PIECE: u32 = 32_768;

fn data() -> Vec<u8> {
    (0..100_000u32)
        .map(|i| (i % 251) as u8 ^ (i >> 9) as u8)
        .collect()
}

/// A 100,000-byte transfer over three files (one empty) under `d/`.
fn spec(dir: &Path) -> TransferSpec {
    let data = data();
    let geometry = Geometry::new(100_000, PIECE, 16_384).unwrap();
    let digests: Vec<Digest> = data
        .chunks(PIECE as usize)
        .map(|c| Digest::Sha1(Sha1::digest(c).into()))
        .collect();
    TransferSpec {
        dir: dir.to_path_buf(),
        layout: FileLayout::new([
            (PathBuf::from("d/a.bin"), 30_000),
            (PathBuf::from("d/empty"), 0),
            (PathBuf::from("d/e/b.bin"), 70_000),
        ]),
        geometry,
        digests: Some(digests.into()),
        id: b"id".to_vec(),
        stem: "test".into(),
        name: "d".into(),
        selection: None,
    }
}

fn digests(s: &TransferSpec) -> Digests {
    s.digests.clone().unwrap()
}

fn write_tree(root: &Path, data: &[u8]) {
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::write(root.join("d/a.bin"), &data[..30_000]).unwrap();
    fs::write(root.join("d/empty"), b"").unwrap();
    fs::write(root.join("d/e/b.bin"), &data[30_000..]).unwrap();
}

fn read_tree(root: &Path) -> Vec<u8> {
    let mut v = fs::read(root.join("d/a.bin")).unwrap();
    v.extend(fs::read(root.join("d/e/b.bin")).unwrap());
    v
}

/// Hands piece `p` of `data` to storage in two runs.
fn submit_piece(s: &DiskStorage, g: &Geometry, data: &[u8], p: u32, corrupt: bool) {
    let off = g.piece_offset(p) as usize;
    let len = g.piece_size(p) as usize;
    let mut v = data[off..off + len].to_vec();
    if corrupt {
        v[100] ^= 0xff;
    }
    let piece = Bytes::from(v);
    let half = len / 2;
    s.submit(StorageOp::Write {
        piece: p,
        begin: 0,
        data: vec![piece.slice(..half)],
    });
    s.submit(StorageOp::Write {
        piece: p,
        begin: half as u32,
        data: vec![piece.slice(half..half + 10), piece.slice(half + 10..)],
    });
}

async fn verdicts(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<StorageEvent>,
    n: usize,
) -> std::collections::BTreeMap<u32, bool> {
    let mut v = std::collections::BTreeMap::new();
    while v.len() < n {
        match rx.recv().await.unwrap() {
            StorageEvent::PieceDone { piece, ok } => {
                v.insert(piece, ok);
            }
            other => panic!("{other:?}"),
        }
    }
    v
}

#[tokio::test]
async fn a_group_counts_the_backlog_of_all_its_transfers() {
    let (a, b) = (Tmp::new("group-a"), Tmp::new("group-b"));
    let group = Backlog::default();
    let data = data();
    let mut stores = Vec::new();
    for t in [&a, &b] {
        let spec = spec(&t.0);
        let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let s = opened
            .in_group(&group)
            .start(digests(&spec), &[], tx)
            .unwrap();
        stores.push((s, rx, spec.geometry));
    }
    for (s, _, g) in &stores {
        for p in 0..g.piece_count() {
            submit_piece(s, g, &data, p, false);
        }
    }
    // At least what the two still hold (read after it: backlogs only
    // shrink once everything is submitted), no more than both submitted.
    let total = group.get();
    let held: u64 = stores.iter().map(|(s, _, _)| s.backlog()).sum();
    assert!(total >= held, "{total} < {held}");
    assert!(total <= 2 * data.len() as u64, "{total}");
    for (_, rx, g) in &mut stores {
        verdicts(rx, g.piece_count() as usize).await;
    }
    assert_eq!(
        group.get(),
        0,
        "everything written leaves the group's count"
    );
}

/// A group whose backlog falls from above the limit to it wakes a waiting
/// driver at once, and only then.
#[tokio::test]
async fn a_backlog_falling_to_the_limit_wakes_its_waiter() {
    let group = Backlog::default();
    group.add(BACKLOG_LIMIT + (4 << 20));
    let waiter = tokio::spawn({
        let group = group.clone();
        async move { group.drained().await }
    });
    tokio::task::yield_now().await;
    group.sub(2 << 20);
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "woken while still above the limit");
    group.sub(2 << 20);
    tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
        .await
        .expect("not woken at the limit")
        .unwrap();
    assert_eq!(group.get(), BACKLOG_LIMIT);
}

#[tokio::test]
async fn writes_verify_read_back_and_resume_from_the_journal() {
    let t = Tmp::new("rw");
    let spec = spec(&t.0);
    let g = spec.geometry;
    let data = data();
    let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert_eq!(opened.had.count() + opened.check.count(), 0);
    // Created at their lengths, sparse.
    assert_eq!(fs::metadata(t.0.join("d/empty")).unwrap().len(), 0);
    assert_eq!(fs::metadata(t.0.join("d/e/b.bin")).unwrap().len(), 70_000);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = opened.start(digests(&spec), &[], tx).unwrap();
    for p in 0..g.piece_count() {
        submit_piece(&s, &g, &data, p, p == 1);
    }
    assert!(s.backlog() <= data.len() as u64, "{}", s.backlog());
    let v = verdicts(&mut rx, 4).await;
    assert_eq!(
        v.values().copied().collect::<Vec<_>>(),
        [true, false, true, true]
    );
    // Every byte was written before its piece's verdict.
    assert_eq!(s.backlog(), 0);
    s.submit(StorageOp::Read {
        id: 9,
        piece: 2,
        begin: 100,
        len: 20_000,
    });
    match rx.recv().await.unwrap() {
        StorageEvent::ReadDone { id: 9, data: Ok(d) } => {
            let at = 2 * PIECE as usize + 100;
            assert_eq!(&d[..], &data[at..at + 20_000]);
        }
        other => panic!("{other:?}"),
    }
    s.close();
    let on_disk = read_tree(&t.0);
    assert_eq!(on_disk[..32_768], data[..32_768]);
    assert_ne!(on_disk[32_768..65_536], data[32_768..65_536]);
    // The next run trusts what was verified (nothing to hash): the files
    // are unchanged since the last flush.
    let again = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert_eq!(again.had.iter_ones().collect::<Vec<_>>(), [0, 2, 3]);
    assert_eq!(again.check.count(), 0);
    drop(again);
    // A file changed since: its pieces are hashed, not trusted.
    fs::OpenOptions::new()
        .write(true)
        .open(t.0.join("d/e/b.bin"))
        .unwrap()
        .set_len(10)
        .unwrap();
    // (Piece 0 ends in it too.)
    let again = open(spec, OpenOptions::download(), None).unwrap();
    assert_eq!(again.had.count(), 0);
    assert_eq!(again.check.iter_ones().collect::<Vec<_>>(), [0, 2, 3]);
    // It was weir's: set back to its exact length.
    assert_eq!(fs::metadata(t.0.join("d/e/b.bin")).unwrap().len(), 70_000);
}

#[test]
fn data_already_there_is_verified_before_anything_is_written() {
    let t = Tmp::new("existing");
    let spec = spec(&t.0);
    let data = data();
    write_tree(&t.0, &data);
    let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert!(opened.had.is_full());
    drop(opened);
    // Someone else's data that does not verify: refused, untouched.
    let t = Tmp::new("existing-bad");
    let spec = TransferSpec {
        dir: t.0.clone(),
        ..spec
    };
    let mut bad = data.clone();
    bad[50_000] ^= 1;
    write_tree(&t.0, &bad);
    match open(spec.clone(), OpenOptions::download(), None) {
        Err(OpenError::ExistingData { paths, bad, .. }) => {
            assert_eq!(paths, [t.0.join("d/e/b.bin")]);
            assert_eq!(bad, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(read_tree(&t.0), bad);
    // With --overwrite it is weir's: the good pieces count, the bad one is
    // to be fetched (it is not had, nor to be checked again).
    let opened = open(
        spec.clone(),
        OpenOptions {
            overwrite: true,
            ..OpenOptions::download()
        },
        None,
    )
    .unwrap();
    assert_eq!(opened.had.count(), 0);
    assert_eq!(opened.check.count(), 4);
    drop(opened);
    // A longer file of the same name: refused before anything is hashed.
    let t = Tmp::new("existing-long");
    let spec = TransferSpec {
        dir: t.0.clone(),
        ..spec
    };
    write_tree(&t.0, &data);
    fs::write(t.0.join("d/a.bin"), vec![0u8; 30_002]).unwrap();
    match open(spec, OpenOptions::download(), None) {
        Err(e @ OpenError::WrongSize { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("d/a.bin") && m.contains("30002") && m.contains("--overwrite"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::metadata(t.0.join("d/a.bin")).unwrap().len(), 30_002);
}

#[test]
fn links_under_the_directory_are_refused_and_nothing_outside_changes() {
    let t = Tmp::new("links");
    let outside = t.0.join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("target"), b"precious").unwrap();
    let dl = t.0.join("dl");
    // (where the link is, what it points to)
    let target = outside.join("target");
    let cases = [
        ("d/a.bin", &target),
        ("d", &outside),
        (".weir-resume-test", &target),
        (".weir-lock-test", &target),
        (".weir-resume-test.new", &target),
    ];
    for (rel, to) in cases {
        let _ = fs::remove_dir_all(&dl);
        let at = dl.join(rel);
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        symlink(to, &at).unwrap();
        let spec = TransferSpec {
            dir: dl.clone(),
            ..spec(&dl)
        };
        // (Seeding never writes the temporary journal: it refuses the
        // empty directory before.)
        let modes = if rel.ends_with(".new") {
            vec![OpenOptions::download()]
        } else {
            vec![OpenOptions::download(), OpenOptions::seed()]
        };
        for opts in modes {
            match open(spec.clone(), opts, None) {
                Err(e @ OpenError::Symlink { .. }) => {
                    let OpenError::Symlink { path } = &e else {
                        unreachable!()
                    };
                    assert_eq!(path, &dl.join(rel), "{e}");
                    assert!(e.to_string().contains("symbolic link"), "{e}");
                    assert!(e.is_user_error());
                }
                other => panic!("{rel} ({:?}): {other:?}", opts.mode),
            }
        }
        assert_eq!(
            fs::read(outside.join("target")).unwrap(),
            b"precious",
            "{rel}"
        );
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1, "{rel}");
    }
}

#[test]
fn a_second_process_on_the_same_download_is_refused() {
    let t = Tmp::new("lock");
    let spec = spec(&t.0);
    let first = open(spec.clone(), OpenOptions::download(), None).unwrap();
    match open(spec.clone(), OpenOptions::download(), None) {
        Err(e @ OpenError::Locked { .. }) => {
            let m = e.to_string();
            assert!(m.contains(&format!("pid {}", std::process::id())), "{m}");
            assert!(!e.is_user_error());
        }
        other => panic!("{other:?}"),
    }
    // Another transfer in the same directory is not in the way.
    let other = open(
        TransferSpec {
            stem: "other".into(),
            layout: FileLayout::new([(PathBuf::from("x"), 5)]),
            geometry: Geometry::new(5, PIECE, 16_384).unwrap(),
            digests: Some(vec![Digest::Sha1([0; 20])].into()),
            ..spec.clone()
        },
        OpenOptions::download(),
        None,
    );
    assert!(other.is_ok(), "{other:?}");
    drop(first);
    assert!(!t.0.join(".weir-lock-test").exists());
    assert!(open(spec, OpenOptions::download(), None).is_ok());
}

#[test]
fn seeding_refuses_a_directory_without_the_data_and_seeds_what_verifies() {
    let t = Tmp::new("seed");
    let spec = spec(&t.0);
    match open(spec.clone(), OpenOptions::seed(), None) {
        Err(e @ OpenError::NothingToSeed { .. }) => {
            assert!(e.to_string().contains("3 files missing"), "{e}");
            assert!(e.is_user_error());
        }
        other => panic!("{other:?}"),
    }
    // Nothing was created.
    assert_eq!(fs::read_dir(&t.0).unwrap().count(), 0);
    match open(
        TransferSpec {
            dir: t.0.join("nope"),
            ..spec.clone()
        },
        OpenOptions::seed(),
        None,
    ) {
        Err(e @ OpenError::NoDirectory { .. }) => assert!(e.is_user_error()),
        other => panic!("{other:?}"),
    }
    // Only `d/e/b.bin` (bytes 30,000..), one byte wrong in piece 2: piece 0
    // (it starts in the missing `d/a.bin`) and 2 are not seeded.
    let data = data();
    fs::create_dir_all(t.0.join("d/e")).unwrap();
    let mut b = data[30_000..].to_vec();
    b[40_000] ^= 1;
    fs::write(t.0.join("d/e/b.bin"), &b).unwrap();
    let opened = open(spec, OpenOptions::seed(), None).unwrap();
    assert_eq!(opened.had.iter_ones().collect::<Vec<_>>(), [1, 3]);
    assert!(!t.0.join("d/a.bin").exists());
}

#[test]
fn no_download_starts_without_room_for_it() {
    let t = Tmp::new("space");
    let big = 1u64 << 46;
    let spec = TransferSpec {
        layout: FileLayout::new([(PathBuf::from("huge"), big)]),
        geometry: Geometry::new(big, 1 << 30, 16_384).unwrap(),
        digests: Some(vec![Digest::Sha1([0; 20]); 1 << 16].into()),
        ..spec(&t.0)
    };
    match open(spec, OpenOptions::download(), None) {
        Err(e @ OpenError::NoSpace { .. }) => {
            let m = e.to_string();
            assert!(m.contains("70368.74 GB more") && m.contains("free"), "{m}");
            assert!(m.contains("--no-space-check"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!t.0.join("huge").exists());
}

#[tokio::test]
async fn a_partly_written_piece_continues_where_it_stopped() {
    let t = Tmp::new("partial");
    let spec = spec(&t.0);
    let g = spec.geometry;
    let data = data();
    let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let s = opened.start(digests(&spec), &[], tx).unwrap();
    // The first 16 KiB of piece 2, then the run ends.
    let at = 2 * PIECE as usize;
    s.submit(StorageOp::Write {
        piece: 2,
        begin: 0,
        data: vec![Bytes::copy_from_slice(&data[at..at + 16_384])],
    });
    s.close();
    let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert_eq!(opened.partial, [(2, 16_384)]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = opened.start(digests(&spec), &[(2, 16_384)], tx).unwrap();
    s.submit(StorageOp::Write {
        piece: 2,
        begin: 16_384,
        data: vec![Bytes::copy_from_slice(
            &data[at + 16_384..at + PIECE as usize],
        )],
    });
    assert_eq!(verdicts(&mut rx, 1).await.get(&2), Some(&true));
    s.close();
    let _ = g;
}

#[tokio::test]
async fn a_truncated_file_loses_its_pieces_and_reads_fail_typed() {
    let t = Tmp::new("trunc");
    let spec = spec(&t.0);
    write_tree(&t.0, &data());
    let opened = open(spec.clone(), OpenOptions::seed(), None).unwrap();
    assert!(opened.had.is_full());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = opened.start(digests(&spec), &[], tx).unwrap();
    // `d/e/b.bin` (bytes 30,000..100,000) cut to 40,000 bytes: the
    // transfer now ends at 70,000, inside piece 2.
    fs::OpenOptions::new()
        .write(true)
        .open(t.0.join("d/e/b.bin"))
        .unwrap()
        .set_len(40_000)
        .unwrap();
    s.submit(StorageOp::Read {
        id: 7,
        piece: 3,
        begin: 0,
        len: 100,
    });
    match rx.recv().await.unwrap() {
        StorageEvent::ReadFailed {
            id: 7,
            lost,
            fault: StorageFault::Truncated { path, len, want },
        } => {
            assert_eq!(lost, [2, 3]);
            assert_eq!(path, Path::new("d/e/b.bin"));
            assert_eq!((len, want), (40_000, 70_000));
        }
        other => panic!("{other:?}"),
    }
    // What is still there is still served.
    s.submit(StorageOp::Read {
        id: 8,
        piece: 0,
        begin: 0,
        len: 100,
    });
    assert!(matches!(
        rx.recv().await.unwrap(),
        StorageEvent::ReadDone { id: 8, data: Ok(_) }
    ));
    s.close();
}

#[tokio::test]
async fn a_file_weir_did_not_create_is_compared_never_written() {
    // `a.bin` (40,000 bytes) is someone else's, with the right data;
    // `b.bin` is new. Piece 0 lies in `a.bin` and verifies at once; piece 1
    // covers both, so its bytes in `a.bin` are compared when it arrives.
    let t = Tmp::new("compare");
    let base = spec(&t.0);
    let spec = TransferSpec {
        layout: FileLayout::new([
            (PathBuf::from("a.bin"), 40_000),
            (PathBuf::from("b.bin"), 60_000),
        ]),
        ..base
    };
    let g = spec.geometry;
    let data = data();
    fs::write(t.0.join("a.bin"), &data[..40_000]).unwrap();
    let before = fs::metadata(t.0.join("a.bin")).unwrap().modified().unwrap();
    let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert_eq!(opened.had.iter_ones().collect::<Vec<_>>(), [0]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = opened.start(digests(&spec), &[], tx).unwrap();
    submit_piece(&s, &g, &data, 1, false);
    assert_eq!(verdicts(&mut rx, 1).await.get(&1), Some(&true));
    s.close();
    assert_eq!(read_ab(&t.0)[..65_536], data[..65_536]);
    // Piece 1 from a peer that differs inside `a.bin`: a clear failure,
    // and `a.bin` is untouched.
    let mut other = data.clone();
    other[PIECE as usize + 5] ^= 1;
    fs::write(t.0.join("b.bin"), b"").unwrap(); // lose piece 1
    let opened = open(
        spec.clone(),
        OpenOptions {
            space_check: false,
            ..OpenOptions::download()
        },
        None,
    );
    // `b.bin` is weir's (journal), so it is set back to its length.
    let opened = opened.unwrap();
    assert!(!opened.had.get(1));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = opened.start(digests(&spec), &[], tx).unwrap();
    submit_piece(&s, &g, &other, 1, false);
    match rx.recv().await.unwrap() {
        StorageEvent::Failed { error } => {
            assert!(
                error.contains("a.bin") && error.contains("--overwrite"),
                "{error}"
            );
        }
        e => panic!("{e:?}"),
    }
    s.close();
    assert_eq!(fs::read(t.0.join("a.bin")).unwrap(), &data[..40_000]);
    assert_eq!(
        fs::metadata(t.0.join("a.bin")).unwrap().modified().unwrap(),
        before
    );
}

fn read_ab(root: &Path) -> Vec<u8> {
    let mut v = fs::read(root.join("a.bin")).unwrap();
    v.extend(fs::read(root.join("b.bin")).unwrap());
    v
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|n| n.starts_with(prefix))
        .count()
}

#[tokio::test]
async fn many_transfers_share_one_pool_of_threads_and_close_durably() {
    const N: usize = 48;
    let dirs: Vec<Tmp> = (0..N).map(|i| Tmp::new(&format!("pool{i}"))).collect();
    let data = data();
    let mut running = Vec::new();
    for t in &dirs {
        let spec = spec(&t.0);
        let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let s = opened.start(digests(&spec), &[], tx).unwrap();
        running.push((s, rx, spec.geometry));
    }
    // Threads do not grow with transfers: the pool's workers, one writer,
    // one journal thread, whatever else runs in this test process.
    let width = pool::DiskPool::get().unwrap().width();
    assert!((2..=8).contains(&width), "{width}");
    assert_eq!(threads_named("weir-hash-"), width);
    assert_eq!(threads_named("weir-write"), 1);
    assert_eq!(threads_named("weir-journal"), 1);
    for (s, _, g) in &running {
        for p in 0..g.piece_count() {
            submit_piece(s, g, &data, p, p == 3);
        }
    }
    let mut closes = Vec::new();
    for (s, mut rx, _) in running {
        let v = verdicts(&mut rx, 4).await;
        assert_eq!(
            v.values().copied().collect::<Vec<_>>(),
            [true, true, true, false]
        );
        closes.push(s.begin_close());
    }
    for c in closes {
        c.wait();
    }
    // Every journal was made durable by its close: each next run trusts
    // its verified pieces and hashes nothing.
    for t in &dirs {
        let again = open(spec(&t.0), OpenOptions::download(), None).unwrap();
        assert_eq!(again.had.iter_ones().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(again.check.count(), 0);
        assert_eq!(read_tree(&t.0)[..98_304], data[..98_304]);
    }
}

#[tokio::test]
async fn a_clean_journal_that_says_nothing_new_is_kept_not_rewritten() {
    use std::os::unix::fs::MetadataExt;
    let t = Tmp::new("keep");
    let spec = spec(&t.0);
    let g = spec.geometry;
    let data = data();
    let journal = t.0.join(".weir-resume-test");
    let ino = || fs::metadata(&journal).unwrap().ino();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = open(spec.clone(), OpenOptions::download(), None)
        .unwrap()
        .start(digests(&spec), &[], tx)
        .unwrap();
    for p in 0..g.piece_count() {
        submit_piece(&s, &g, &data, p, false);
    }
    verdicts(&mut rx, 4).await;
    s.close();
    // The first reopen compacts (the journal holds the run's records).
    let first = ino();
    let again = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert_eq!(again.had.count(), 4);
    let compacted = ino();
    assert_ne!(compacted, first, "a journal with the run's records kept");
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    again.start(digests(&spec), &[], tx).unwrap().close();
    // A clean close after nothing new: the next opens keep it as it is and
    // trust the same pieces.
    for _ in 0..2 {
        let again = open(spec.clone(), OpenOptions::download(), None).unwrap();
        assert_eq!(again.had.count(), 4);
        assert_eq!(again.check.count(), 0);
        assert_eq!(ino(), compacted, "an unchanged clean journal was rewritten");
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        again.start(digests(&spec), &[], tx).unwrap().close();
    }
    // A file changed since: compacted again, its pieces not trusted.
    fs::write(t.0.join("d/a.bin"), vec![0u8; 30_000]).unwrap();
    let again = open(spec, OpenOptions::download(), None).unwrap();
    assert!(again.had.count() < 4);
    assert_ne!(ino(), compacted);
}

/// The files of [`spec`]'s data laid out so that the first file is
/// exactly piece 0: selecting it touches no other file.
fn aligned_spec(dir: &Path, wanted: Option<Vec<bool>>) -> TransferSpec {
    let layout = FileLayout::new([
        (PathBuf::from("d/first.bin"), u64::from(PIECE)),
        (PathBuf::from("d/empty"), 0),
        (PathBuf::from("d/rest.bin"), 100_000 - u64::from(PIECE)),
    ]);
    let base = spec(dir);
    let selection = wanted.map(|w| {
        weir_core::selection::Selection::new(&layout, &base.geometry, w).expect("a selection")
    });
    TransferSpec {
        layout,
        selection,
        ..base
    }
}

#[tokio::test]
async fn deselected_files_are_not_created_and_a_later_run_can_fetch_them() {
    let t = Tmp::new("select");
    let data = data();
    // Someone's file of the name of a deselected one, of another size: not
    // a conflict when the download will not write it, and left alone.
    fs::create_dir_all(t.0.join("d")).unwrap();
    fs::write(t.0.join("d/rest.bin"), b"not mine").unwrap();
    let spec = aligned_spec(&t.0, Some(vec![true, false, false]));
    let g = spec.geometry;
    let opened = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert_eq!(
        opened
            .wanted
            .as_ref()
            .map(|w| w.iter_ones().collect::<Vec<_>>()),
        Some(vec![0])
    );
    assert_eq!(fs::metadata(t.0.join("d/first.bin")).unwrap().len(), 32_768);
    assert!(
        !t.0.join("d/empty").exists(),
        "a deselected empty file was created"
    );
    assert_eq!(fs::read(t.0.join("d/rest.bin")).unwrap(), b"not mine");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = opened.start(digests(&spec), &[], tx).unwrap();
    submit_piece(&s, &g, &data, 0, false);
    assert_eq!(verdicts(&mut rx, 1).await.get(&0), Some(&true));
    s.close();
    assert_eq!(fs::read(t.0.join("d/first.bin")).unwrap(), &data[..32_768]);
    assert_eq!(fs::read(t.0.join("d/rest.bin")).unwrap(), b"not mine");
    // The same download with every file wanted: what was verified is
    // kept, and the foreign file is now in the way, as it would be for a
    // download that never deselected it.
    fs::remove_file(t.0.join("d/rest.bin")).unwrap();
    let all = aligned_spec(&t.0, None);
    let again = open(all, OpenOptions::download(), None).unwrap();
    assert_eq!(again.had.iter_ones().collect::<Vec<_>>(), [0]);
    assert_eq!(again.wanted, None);
    assert_eq!(fs::metadata(t.0.join("d/rest.bin")).unwrap().len(), 67_232);
    assert!(t.0.join("d/empty").exists());
}

#[test]
fn a_deselected_file_in_the_way_still_blocks_a_file_that_is_written() {
    // rest.bin shares no piece with first.bin but is itself wanted: its
    // wrong size is refused as without a selection.
    let t = Tmp::new("select-conflict");
    fs::create_dir_all(t.0.join("d")).unwrap();
    fs::write(t.0.join("d/rest.bin"), b"not mine").unwrap();
    let spec = aligned_spec(&t.0, Some(vec![false, false, true]));
    match open(spec, OpenOptions::download(), None) {
        Err(OpenError::WrongSize { path, .. }) => assert!(path.ends_with("d/rest.bin")),
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(t.0.join("d/rest.bin")).unwrap(), b"not mine");
    assert!(!t.0.join("d/first.bin").exists());
}

/// A parked storage holds its download as an opened one does (the lock: a
/// second open is refused until it goes) and, started at its first
/// operation, writes, verifies and journals as one started at once.
#[tokio::test]
async fn a_parked_storage_holds_its_lock_and_starts_on_demand() {
    let t = Tmp::new("parked");
    let spec = spec(&t.0);
    let g = spec.geometry;
    let data = data();
    let parked = open(spec.clone(), OpenOptions::download(), None)
        .unwrap()
        .park(digests(&spec));
    assert!(
        matches!(
            open(spec.clone(), OpenOptions::download(), None),
            Err(OpenError::Locked { .. })
        ),
        "a parked download is still locked"
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = parked.start(tx).unwrap();
    for p in 0..g.piece_count() {
        submit_piece(&s, &g, &data, p, p == 3);
    }
    let v = verdicts(&mut rx, 4).await;
    assert_eq!(
        v.values().copied().collect::<Vec<_>>(),
        [true, true, true, false]
    );
    s.close();
    let again = open(spec.clone(), OpenOptions::download(), None).unwrap();
    assert_eq!(again.had.iter_ones().collect::<Vec<_>>(), [0, 1, 2]);
    drop(again);
    // Dropped parked, it lets the download go and writes nothing.
    let parked = open(spec.clone(), OpenOptions::download(), None)
        .unwrap()
        .park(digests(&spec));
    drop(parked);
    assert!(!t.0.join(".weir-lock-test").exists());
    let again = open(spec, OpenOptions::download(), None).unwrap();
    assert_eq!(again.had.iter_ones().collect::<Vec<_>>(), [0, 1, 2]);
}
