//! Tests of [`Store`]: torn tails, damage, compaction, old state
//! directories, and random change sequences against a model.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::engine::state::{LOG_FILE, Record, STATE_FILE, SavedCaps};

fn rec(id: u64) -> Record {
    let info_hash = format!("{id:040x}");
    Record::test(id, RecordSource::Torrent { info_hash }, "/data")
}

fn torrent(id: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 7 + id) as u8).collect()
}

fn add(id: u64, len: usize) -> Entry {
    Entry {
        change: Change::Add(rec(id).into()),
        torrent: Some(torrent(id, len)),
    }
}

fn plain(change: Change) -> Entry {
    Entry {
        change,
        torrent: None,
    }
}

/// A few changes, each appended alone: the log's length and the state
/// after each.
fn history(dir: &Path) -> Vec<(u64, State)> {
    let mut s = Store::open(dir).unwrap();
    let mut out = vec![(s.log_len(), s.state().clone())];
    let mut paused = rec(2);
    paused.paused = true;
    paused.labels = vec!["tv".into()];
    for e in [
        add(1, 300),
        add(2, 200),
        plain(Change::Set(vec![paused.into()])),
        plain(Change::Traffic(vec![(1, 10, 20)])),
        add(3, 100),
        plain(Change::Remove(vec![1])),
        plain(Change::Queue(vec![3, 2])),
    ] {
        s.append(vec![e]).unwrap();
        out.push((s.log_len(), s.state().clone()));
    }
    out
}

#[test]
fn a_log_cut_at_every_offset_loads_exactly_the_acknowledged_prefix() {
    let tmp = weir_lab::TempDir::new("store-cut").unwrap();
    let src = tmp.subdir("src").unwrap();
    let steps = history(&src);
    let log = std::fs::read(src.join(LOG_FILE)).unwrap();
    assert_eq!(log.len() as u64, steps.last().unwrap().0);
    let dir = tmp.path().join("cut");
    // Every offset of the last four records (and the very first bytes).
    let from = steps[steps.len() - 5].0 as usize;
    for cut in (log::HEADER_LEN..log::HEADER_LEN + 3).chain(from..=log.len()) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(LOG_FILE), &log[..cut]).unwrap();
        let (end, want) = steps
            .iter()
            .rev()
            .find(|(end, _)| *end as usize <= cut)
            .unwrap();
        assert_eq!(&read(&dir).unwrap(), want, "read, cut at {cut}");
        let s = Store::open(&dir).unwrap();
        assert_eq!(s.state(), want, "cut at {cut}");
        // The torn bytes are gone: what follows lands after the prefix.
        assert_eq!(std::fs::metadata(dir.join(LOG_FILE)).unwrap().len(), *end);
        // The .torrent copies of what is there are written from the log.
        for r in &want.transfers {
            let kept = std::fs::read(s.dir().torrent_path(&format!("{:040x}", r.id))).unwrap();
            assert_eq!(kept.len(), [0, 300, 200, 100][r.id as usize]);
        }
    }
    // Cut inside the last record, then a new change: both load.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(LOG_FILE), &log[..log.len() - 3]).unwrap();
    let mut s = Store::open(&dir).unwrap();
    s.append(vec![plain(Change::Traffic(vec![(2, 1, 1)]))])
        .unwrap();
    let want = s.state().clone();
    drop(s);
    assert_eq!(Store::open(&dir).unwrap().state(), &want);
    assert_eq!(want.get(2).unwrap().downloaded, 1);
}

#[test]
fn a_flipped_byte_before_the_last_record_is_refused_naming_file_and_offset() {
    let tmp = weir_lab::TempDir::new("store-flip").unwrap();
    let src = tmp.subdir("src").unwrap();
    let steps = history(&src);
    let log = std::fs::read(src.join(LOG_FILE)).unwrap();
    let dir = tmp.path().join("flip");
    let last = steps[steps.len() - 2].0 as usize;
    // Every byte of the header and of the record before the last.
    let middle = steps[steps.len() - 3].0 as usize..last;
    for i in (0..log::HEADER_LEN).chain(middle) {
        let mut d = log.clone();
        d[i] ^= 0x10;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(LOG_FILE);
        std::fs::write(&path, &d).unwrap();
        match Store::open(&dir) {
            Err(StateError::Corrupt { path: p, why }) => {
                assert_eq!(p, path);
                assert!(why.contains("offset"), "flip at {i}: {why}");
            }
            other => panic!("flip at {i}: {other:?}"),
        }
        // Nothing was changed.
        assert_eq!(std::fs::read(&path).unwrap(), d);
    }
}

#[test]
fn compaction_keeps_everything_and_drops_the_log() {
    let tmp = weir_lab::TempDir::new("store-compact").unwrap();
    let dir = tmp.path().join("state");
    let mut s = Store::open(&dir).unwrap();
    // 100 KiB torrents: the log passes 1 MiB at the eleventh.
    for id in 1..=10 {
        s.append(vec![add(id, 100 << 10)]).unwrap();
    }
    assert!(!dir.join(STATE_FILE).exists());
    s.append(vec![add(11, 100 << 10)]).unwrap();
    assert_eq!(s.log_len(), log::HEADER_LEN as u64, "compacted");
    s.append(vec![plain(Change::Traffic(vec![(3, 5, 6)]))])
        .unwrap();
    let want = s.state().clone();
    assert_eq!(want.transfers.len(), 11);
    drop(s);
    let snap = std::fs::read(dir.join(STATE_FILE)).unwrap();
    assert!(snap.starts_with(b"weir-daemon-state 2 "));
    let s = Store::open(&dir).unwrap();
    assert_eq!(s.state(), &want);
    for id in 1..=11 {
        let kept = std::fs::read(s.dir().torrent_path(&format!("{id:040x}"))).unwrap();
        assert_eq!(kept, torrent(id, 100 << 10));
    }
    // An explicit one (a clean stop): the log is its header alone.
    let mut s = s;
    s.compact().unwrap();
    drop(s);
    let log = std::fs::read(dir.join(LOG_FILE)).unwrap();
    assert_eq!(log, log::header(2));
    assert_eq!(Store::open(&dir).unwrap().state(), &want);
}

#[test]
fn a_log_older_than_the_snapshot_is_what_a_cut_compaction_left() {
    let tmp = weir_lab::TempDir::new("store-stale").unwrap();
    let dir = tmp.path().join("state");
    let mut s = Store::open(&dir).unwrap();
    s.append(vec![add(1, 10), add(2, 10)]).unwrap();
    let old_log = std::fs::read(dir.join(LOG_FILE)).unwrap();
    s.compact().unwrap();
    let want = s.state().clone();
    drop(s);
    // The snapshot renamed, the empty log not yet: the old one is ignored.
    std::fs::write(dir.join(LOG_FILE), &old_log).unwrap();
    assert_eq!(read(&dir).unwrap(), want);
    let mut s = Store::open(&dir).unwrap();
    assert_eq!(s.state(), &want);
    s.append(vec![plain(Change::Remove(vec![1]))]).unwrap();
    drop(s);
    assert_eq!(Store::open(&dir).unwrap().state().transfers.len(), 1);
    // A log newer than its snapshot is refused.
    std::fs::write(dir.join(LOG_FILE), log::header(9)).unwrap();
    assert!(matches!(
        Store::open(&dir),
        Err(StateError::Corrupt { why, .. }) if why.contains("generation")
    ));
}

#[test]
fn a_state_directory_of_an_earlier_weir_loads() {
    let tmp = weir_lab::TempDir::new("store-v1").unwrap();
    let dir = tmp.path().join("state");
    std::fs::create_dir_all(dir.join("torrents")).unwrap();
    let body = format!(
        r#"{{"next_id":3,"transfers":[{{"id":2,"source":{{"torrent":{{"info_hash":"{:040x}"}}}},"download_dir":"/d","paused":true,"added":5,"downloaded":7}}],"caps":{{"down":[10,true],"up":null}},"queue":[2]}}"#,
        2
    );
    let mut v1 = format!(
        "weir-daemon-state 1 {:08x} {}\n",
        crc32fast::hash(body.as_bytes()),
        body.len()
    )
    .into_bytes();
    v1.extend_from_slice(body.as_bytes());
    std::fs::write(dir.join(STATE_FILE), &v1).unwrap();
    let mut s = Store::open(&dir).unwrap();
    let r = s.state().get(2).unwrap().clone();
    assert!(r.paused && r.downloaded == 7);
    assert_eq!(s.state().caps.down, Some((10, true)));
    // The snapshot is left as it was until a compaction.
    assert_eq!(std::fs::read(dir.join(STATE_FILE)).unwrap(), v1);
    s.append(vec![add(3, 10)]).unwrap();
    drop(s);
    let s = Store::open(&dir).unwrap();
    assert_eq!(s.state().next_id, 4);
    assert_eq!(s.state().queue, vec![2, 3]);
}

#[test]
fn a_change_that_does_not_apply_is_refused_and_nothing_is_written() {
    let tmp = weir_lab::TempDir::new("store-refuse").unwrap();
    let dir = tmp.path().join("state");
    let mut s = Store::open(&dir).unwrap();
    s.append(vec![add(1, 10)]).unwrap();
    let len = s.log_len();
    for bad in [
        add(1, 10),
        plain(Change::Set(vec![rec(5).into()])),
        plain(Change::Remove(vec![9])),
        plain(Change::Traffic(vec![(9, 1, 1)])),
    ] {
        assert!(matches!(
            s.append(vec![bad]),
            Err(StateError::Corrupt { .. })
        ));
        assert_eq!(s.log_len(), len);
    }
    assert_eq!(std::fs::metadata(dir.join(LOG_FILE)).unwrap().len(), len);
}

/// What a random sequence does.
#[derive(Clone, Debug)]
enum Op {
    Add(usize),
    Pause(usize, bool),
    Label(usize, String),
    Remove(usize),
    Traffic(usize, u64, u64),
    Caps(Option<(u64, bool)>),
    Queue(usize),
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..3000).prop_map(Op::Add),
        1 => (0usize..100, any::<bool>()).prop_map(|(i, p)| Op::Pause(i, p)),
        1 => (0usize..100, "[a-z]{0,6}").prop_map(|(i, l)| Op::Label(i, l)),
        1 => (0usize..100).prop_map(Op::Remove),
        1 => (0usize..100, any::<u64>(), any::<u64>()).prop_map(|(i, d, u)| Op::Traffic(i, d, u)),
        1 => proptest::option::of((0u64..10_000, any::<bool>())).prop_map(Op::Caps),
        1 => (0usize..100).prop_map(Op::Queue),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

/// The model: records by id, the next id, the queue, the caps.
#[derive(Default)]
struct Model {
    records: BTreeMap<u64, Record>,
    next_id: u64,
    queue: Vec<u64>,
    caps: SavedCaps,
    /// Length of each transfer's .torrent.
    torrents: BTreeMap<u64, usize>,
}

impl Model {
    fn state(&self) -> State {
        State {
            next_id: self.next_id,
            transfers: self.records.values().cloned().map(Into::into).collect(),
            caps: self.caps,
            settings: Default::default(),
            queue: self.queue.clone(),
        }
    }

    fn pick(&self, i: usize) -> Option<u64> {
        let n = self.records.len();
        (n > 0).then(|| *self.records.keys().nth(i % n).unwrap())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_changes_saved_and_reloaded_are_the_same_state(
        ops in proptest::collection::vec(op(), 1..24)
    ) {
        let tmp = weir_lab::TempDir::new("store-prop").unwrap();
        let dir = tmp.path().join("state");
        let mut s = Store::open(&dir).unwrap();
        let mut m = Model { next_id: 1, ..Model::default() };
        for op in ops {
            let change = match op {
                Op::Add(len) => {
                    let id = m.next_id;
                    m.next_id += 1;
                    m.records.insert(id, rec(id));
                    m.torrents.insert(id, len);
                    m.queue.push(id);
                    Some(Entry { change: Change::Add(rec(id).into()), torrent: Some(torrent(id, len)) })
                }
                Op::Pause(i, p) => m.pick(i).map(|id| {
                    let r = m.records.get_mut(&id).unwrap();
                    r.paused = p;
                    plain(Change::Set(vec![r.clone().into()]))
                }),
                Op::Label(i, l) => m.pick(i).map(|id| {
                    let r = m.records.get_mut(&id).unwrap();
                    r.labels.push(l);
                    plain(Change::Set(vec![r.clone().into()]))
                }),
                Op::Remove(i) => m.pick(i).map(|id| {
                    m.records.remove(&id);
                    m.queue.retain(|q| *q != id);
                    plain(Change::Remove(vec![id]))
                }),
                Op::Traffic(i, d, u) => m.pick(i).map(|id| {
                    let r = m.records.get_mut(&id).unwrap();
                    (r.downloaded, r.uploaded) = (d, u);
                    plain(Change::Traffic(vec![(id, d, u)]))
                }),
                Op::Caps(c) => {
                    m.caps.down = c;
                    Some(plain(Change::Session {
                        next_id: m.next_id,
                        caps: m.caps,
                        settings: Default::default(),
                    }))
                }
                Op::Queue(k) => {
                    let n = m.queue.len().max(1);
                    m.queue.rotate_left(k % n);
                    Some(plain(Change::Queue(m.queue.clone())))
                }
                Op::Compact => {
                    s.compact().unwrap();
                    None
                }
                Op::Reopen => {
                    drop(s);
                    s = Store::open(&dir).unwrap();
                    None
                }
            };
            if let Some(c) = change {
                s.append(vec![c]).unwrap();
            }
            prop_assert_eq!(s.state(), &m.state());
        }
        drop(s);
        prop_assert_eq!(read(&dir).unwrap(), m.state());
        let s = Store::open(&dir).unwrap();
        prop_assert_eq!(s.state(), &m.state());
        for r in m.records.values() {
            let kept = std::fs::read(s.dir().torrent_path(&format!("{:040x}", r.id))).unwrap();
            prop_assert_eq!(kept, torrent(r.id, m.torrents[&r.id]));
        }
    }
}

/// The state layer's cost of `torrent-add`, before (the .torrent written
/// durably, then the whole state rewritten durably) and after (one log
/// record, one `fdatasync`): `cargo test --profile ci -p weir-daemon
/// --features engine,fake --lib bench_adds -- --ignored --nocapture`.
/// Prints the time of adds `from+1..=to` in a directory already holding
/// `from` transfers.
#[test]
#[ignore = "a measurement, not a test: run by hand"]
fn bench_adds() {
    use std::time::Instant;
    let tmp = weir_lab::TempDir::new("store-bench").unwrap();
    let bench_torrent = |id: u64| torrent(id, 130);
    let before = |from: u64, to: u64| {
        let dir = StateDir::open(&tmp.path().join(format!("before-{from}-{to}"))).unwrap();
        let mut st = State::empty();
        for id in 1..=from {
            st.transfers.push(rec(id).into());
            st.queue.push(id);
            st.next_id = id + 1;
        }
        let t0 = Instant::now();
        for id in from + 1..=to {
            let hash = format!("{id:040x}");
            write_durably(&dir.torrent_path(&hash), &bench_torrent(id)).unwrap();
            st.transfers.push(rec(id).into());
            st.queue.push(id);
            st.next_id = id + 1;
            write_durably(&dir.state_path(), &st.encode(0)).unwrap();
        }
        t0.elapsed().as_secs_f64()
    };
    let after = |from: u64, to: u64| {
        let path = tmp.path().join(format!("after-{from}-{to}"));
        let mut s = Store::open(&path).unwrap();
        let (mut t, all) = (0.0, Instant::now());
        for id in 1..=to {
            let t0 = Instant::now();
            s.append(vec![Entry {
                change: Change::Add(rec(id).into()),
                torrent: Some(bench_torrent(id)),
            }])
            .unwrap();
            if id > from {
                t += t0.elapsed().as_secs_f64();
            }
        }
        (t, all.elapsed().as_secs_f64())
    };
    println!("| transfers added | before s | after s | before ms/add | after ms/add |");
    println!("|---|---|---|---|---|");
    for (from, to) in [(0, 1_000), (9_900, 10_000)] {
        let (b, (a, all)) = (before(from, to), after(from, to));
        let n = (to - from) as f64;
        println!(
            "| {}..={to} | {b:.2} | {a:.2} | {:.2} | {:.2} |",
            from + 1,
            b * 1e3 / n,
            a * 1e3 / n
        );
        println!("after: all {to} adds from an empty state: {all:.2} s");
    }
}
