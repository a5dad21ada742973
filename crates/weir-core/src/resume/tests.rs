use std::collections::BTreeSet;
use std::path::PathBuf;

use proptest::prelude::*;

use super::*;

fn layout() -> (FileLayout, Geometry) {
    // Three files over 10 pieces of 1000 bytes (blocks of 250).
    let l = FileLayout::new([
        (PathBuf::from("d/a"), 2500),
        (PathBuf::from("d/b"), 0),
        (PathBuf::from("d/c"), 7000),
    ]);
    let g = Geometry::new(9500, 1000, 250).unwrap();
    (l, g)
}

fn id() -> JournalId {
    let (l, g) = layout();
    JournalId::new(b"transfer", &g, &l)
}

fn journal(records: &[Record]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    Record::Header(id()).encode(&mut v);
    for r in records {
        r.encode(&mut v);
    }
    v
}

fn st(ino: u64, size: u64, t: i64) -> FileState {
    FileState {
        ino,
        size,
        mtime_sec: t,
        mtime_nsec: 7,
    }
}

fn bits(n: u32, ones: &[u32]) -> Bitfield {
    let mut b = Bitfield::new(n);
    for &i in ones {
        b.set(i);
    }
    b
}

#[test]
fn records_round_trip_into_a_resume() {
    let states = vec![st(1, 2500, 10), st(2, 0, 10), st(3, 7000, 11)];
    let j = journal(&[
        Record::Owned(bits(3, &[0, 2])),
        Record::Have(bits(10, &[1, 2])),
        Record::Written { piece: 5, end: 500 },
        Record::Written {
            piece: 6,
            end: 1000,
        },
        Record::Verified(vec![6, 9, 3]),
        Record::Lost(vec![3]),
        Record::Files(states.clone()),
        Record::Closed,
    ]);
    let r = parse(&j, &id()).unwrap();
    assert_eq!(r.vouched.iter_ones().collect::<Vec<_>>(), [1, 2, 6, 9]);
    assert_eq!(r.owned, [true, false, true]);
    assert_eq!(r.files, Some(states));
    assert_eq!(r.written.get(&5), Some(&500));
    assert!(r.clean);
    assert!(!r.damaged);
    // A record after the close: no longer clean.
    let mut j2 = j.clone();
    Record::Verified(vec![3]).encode(&mut j2);
    assert!(!parse(&j2, &id()).unwrap().clean);
}

#[test]
fn another_transfer_is_not_ours_and_an_unreadable_start_keeps_ownership_only() {
    let j = journal(&[Record::Have(bits(10, &[0]))]);
    let mut other = id();
    other.transfer = b"else".to_vec();
    assert_eq!(parse(&j, &other), Err(NotOurs::Other));
    let mut relaid = id();
    relaid.files[0].0 = "d/renamed".into();
    assert_eq!(parse(&j, &relaid), Err(NotOurs::Other));
    // Not readable as a header (the old format, a damaged header, nothing
    // at all): still this transfer's journal by its name, so weir's files
    // stay weir's, but nothing is vouched for; records found are hints.
    let mut bad = j.clone();
    bad[12] ^= 1;
    let mut v = MAGIC.to_vec();
    Record::Closed.encode(&mut v);
    for data in [b"weirrsm1\0\0\0\0".to_vec(), Vec::new(), bad.clone(), v] {
        let r = parse(&data, &id()).unwrap();
        assert!(r.damaged && !r.clean);
        assert_eq!(r.owned, [true; 3]);
        assert_eq!(r.vouched.count(), 0);
        assert_eq!(r.files, None);
    }
    assert_eq!(parse(&bad, &id()).unwrap().written.get(&0), Some(&1000));
}

/// The defect of the old format: one stray byte shifted every later record
/// and the next run trusted pieces nobody verified. Now it costs only a
/// recheck of what comes after it.
#[test]
fn a_stray_byte_costs_a_recheck_never_trust() {
    let mut j = journal(&[
        Record::Owned(bits(3, &[0, 2])),
        Record::Verified(vec![0]),
        Record::Files(vec![st(1, 2500, 1), st(2, 0, 1), st(3, 7000, 1)]),
    ]);
    let cut = j.len();
    Record::Verified(vec![4]).encode(&mut j);
    Record::Verified(vec![7]).encode(&mut j);
    j.insert(cut + 3, 0x00);
    let r = parse(&j, &id()).unwrap();
    assert!(r.damaged);
    assert_eq!(r.vouched.iter_ones().collect::<Vec<_>>(), [0]);
    // Piece 7's record, intact after the damage, is only a hint.
    assert_eq!(r.written.get(&7), Some(&1000));
    assert!(!r.vouched.get(4) && !r.vouched.get(7));
    // A truncated last record: the same.
    let r = parse(&j[..j.len() - 3], &id()).unwrap();
    assert!(r.damaged);
    assert_eq!(r.vouched.count(), 1);
}

#[test]
fn out_of_range_records_end_the_valid_prefix() {
    let j = journal(&[
        Record::Verified(vec![1]),
        Record::Verified(vec![10]), // no piece 10
        Record::Verified(vec![2]),
    ]);
    let r = parse(&j, &id()).unwrap();
    assert!(r.damaged);
    assert_eq!(r.vouched.iter_ones().collect::<Vec<_>>(), [1]);
    let j = journal(&[Record::Written {
        piece: 9,
        end: 501, // piece 9 holds 500 bytes
    }]);
    assert!(parse(&j, &id()).unwrap().damaged);
    let j = journal(&[Record::Owned(bits(4, &[0]))]);
    assert!(parse(&j, &id()).unwrap().damaged);
}

fn arb_record() -> impl Strategy<Value = Record> {
    prop_oneof![
        proptest::collection::vec(any::<bool>(), 3).prop_map(|v| {
            let mut b = Bitfield::new(3);
            for (i, x) in v.iter().enumerate() {
                if *x {
                    b.set(i as u32);
                }
            }
            Record::Owned(b)
        }),
        proptest::collection::vec(0u32..10, 0..4).prop_map(Record::Verified),
        (0u32..10, 0u32..=500).prop_map(|(piece, end)| Record::Written { piece, end }),
        proptest::collection::vec(0u32..10, 0..10).prop_map(|v| Record::Have(bits(10, &v))),
        (0u64..4, 0i64..4).prop_map(|(i, t)| Record::Files(vec![st(i, 1, t); 3])),
        proptest::collection::vec(0u32..10, 0..3).prop_map(Record::Lost),
        Just(Record::Closed),
    ]
}

/// What an intact journal of these records must say.
fn truth(records: &[Record]) -> (BTreeSet<u32>, BTreeSet<usize>, Vec<Option<Vec<FileState>>>) {
    let mut vouched = BTreeSet::new();
    let mut owned = BTreeSet::new();
    let mut states = vec![None];
    for r in records {
        match r {
            Record::Verified(v) => vouched.extend(v.iter().copied()),
            Record::Have(b) => vouched.extend(b.iter_ones()),
            Record::Owned(b) => owned.extend(b.iter_ones().map(|i| i as usize)),
            Record::Files(v) => states.push(Some(v.clone())),
            _ => {}
        }
    }
    (vouched, owned, states)
}

#[derive(Clone, Debug)]
enum Damage {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Damage::Flip(i, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Damage::Insert(i, x)),
        (any::<usize>(), 1usize..40).prop_map(|(i, n)| Damage::Delete(i, n)),
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), 1usize..60).prop_map(|(i, n)| Damage::Duplicate(i, n)),
    ]
}

fn apply(j: &mut Vec<u8>, d: &Damage) {
    if j.is_empty() {
        return;
    }
    match *d {
        Damage::Flip(i, x) => {
            let i = i % j.len();
            j[i] ^= x;
        }
        Damage::Insert(i, x) => {
            let i = i % (j.len() + 1);
            j.insert(i, x);
        }
        Damage::Delete(i, n) => {
            let i = i % j.len();
            let e = (i + n).min(j.len());
            j.drain(i..e);
        }
        Damage::Truncate(i) => j.truncate(i % j.len()),
        Damage::Duplicate(i, n) => {
            let i = i % j.len();
            let e = (i + n).min(j.len());
            let copy: Vec<u8> = j[i..e].to_vec();
            j.splice(e..e, copy);
        }
    }
}

proptest! {
    #[test]
    fn an_intact_journal_says_exactly_what_was_recorded(
        records in proptest::collection::vec(arb_record(), 0..30)
    ) {
        let j = journal(&records);
        let r = parse(&j, &id()).unwrap();
        let (_, _, states) = truth(&records);
        let mut exact = BTreeSet::new();
        for x in &records {
            match x {
                Record::Verified(v) => exact.extend(v.iter().copied()),
                Record::Have(b) => exact.extend(b.iter_ones()),
                Record::Lost(v) => {
                    for p in v {
                        exact.remove(p);
                    }
                }
                _ => {}
            }
        }
        prop_assert_eq!(r.vouched.iter_ones().collect::<BTreeSet<_>>(), exact);
        prop_assert!(!r.damaged);
        prop_assert_eq!(&r.files, states.last().unwrap());
        let last_owned = records.iter().rev().find_map(|r| match r {
            Record::Owned(b) => Some(b.clone()),
            _ => None,
        });
        let want: Vec<bool> = (0..3).map(|i| last_owned.as_ref().is_some_and(|b| b.get(i))).collect();
        prop_assert_eq!(&r.owned, &want);
        prop_assert_eq!(r.clean, matches!(records.last(), Some(Record::Closed)));
        for (p, end) in &r.written {
            let last = records.iter().rev().find_map(|x| match x {
                Record::Written { piece, end } if piece == p => Some(*end),
                _ => None,
            });
            prop_assert_eq!(Some(*end), last);
        }
    }

    /// Any corruption yields a subset of the truly verified set: never a
    /// piece that was not recorded, never a file weir did not own, never a
    /// file state that was not recorded.
    #[test]
    fn a_damaged_journal_vouches_for_a_subset_of_the_truth(
        records in proptest::collection::vec(arb_record(), 0..30),
        damage in proptest::collection::vec(arb_damage(), 1..4),
    ) {
        let mut j = journal(&records);
        for d in &damage {
            apply(&mut j, d);
        }
        let (vouched, owned, states) = truth(&records);
        if let Ok(r) = parse(&j, &id()) {
            for p in r.vouched.iter_ones() {
                prop_assert!(vouched.contains(&p), "piece {} was never recorded", p);
            }
            // Ownership is kept whole only when the start is unreadable
            // (and then nothing is vouched for, and no state is trusted).
            let whole = r.owned.iter().all(|o| *o) && r.files.is_none() && r.vouched.count() == 0;
            for (i, o) in r.owned.iter().enumerate() {
                prop_assert!(!o || owned.contains(&i) || whole, "file {} was never owned", i);
            }
            prop_assert!(states.contains(&r.files));
        }
    }

    /// Random bytes after a valid header never vouch for anything that is
    /// not a well-formed, checksummed record.
    #[test]
    fn garbage_after_the_header_vouches_for_nothing(
        junk in proptest::collection::vec(any::<u8>(), 0..400)
    ) {
        let mut j = journal(&[]);
        j.extend_from_slice(&junk);
        let r = parse(&j, &id()).unwrap();
        prop_assert_eq!(r.vouched.count(), 0);
        prop_assert!(r.owned.iter().all(|o| !o));
        prop_assert_eq!(r.files, None);
    }
}

// ---- plan -----------------------------------------------------------------

fn download() -> PlanOptions {
    PlanOptions {
        mode: Mode::Download,
        recheck: false,
        overwrite: false,
    }
}

fn files_as(states: &[FileState]) -> Vec<Found> {
    states.iter().map(|s| Found::File(*s)).collect()
}

fn owned_journal(vouched: &[u32], states: &[FileState]) -> Resume {
    let j = journal(&[
        Record::Owned(bits(3, &[0, 1, 2])),
        Record::Have(bits(10, vouched)),
        Record::Files(states.to_vec()),
    ]);
    parse(&j, &id()).unwrap()
}

#[test]
fn a_fresh_download_creates_every_file_and_hashes_nothing() {
    let (l, g) = layout();
    let p = plan(&l, &g, None, &[Found::Missing; 3], download());
    assert_eq!(p.files, [FileAction::Create; 3]);
    assert_eq!(p.had.count() + p.check.count() + p.foreign.count(), 0);
    assert!(p.conflicts.is_empty());
    assert!(p.partial.is_empty());
}

#[test]
fn files_weir_did_not_create_are_verified_never_written() {
    let (l, g) = layout();
    // `d/a` exists at the right size, nothing else: its pieces (0..=2, the
    // third shared with `d/c`) are hashed first; `d/a` is not writable.
    let found = [Found::File(st(5, 2500, 1)), Found::Missing, Found::Missing];
    let p = plan(&l, &g, None, &found, download());
    assert_eq!(
        p.files,
        [FileAction::Foreign, FileAction::Create, FileAction::Create]
    );
    assert_eq!(p.foreign.iter_ones().collect::<Vec<_>>(), [0, 1, 2]);
    assert!(!p.writable(0) && p.writable(2));
    // Pieces 0 and 1 lie only in `d/a`: if either fails, `d/a` would have
    // to be written. Piece 2 also covers `d/c`, which weir writes: its
    // failure alone refuses nothing.
    assert_eq!(
        p.refused_files(&l, &g, &bits(10, &[0, 1, 2])),
        Vec::<usize>::new()
    );
    assert_eq!(
        p.refused_files(&l, &g, &bits(10, &[0, 1])),
        Vec::<usize>::new()
    );
    assert_eq!(p.refused_files(&l, &g, &bits(10, &[0, 2])), [0]);
    // A longer (or shorter) file of someone else's is a conflict...
    let found = [Found::File(st(5, 2600, 1)), Found::Missing, Found::Missing];
    let p = plan(&l, &g, None, &found, download());
    assert_eq!(
        p.conflicts,
        [Conflict::WrongSize {
            file: 0,
            found: 2600,
            want: 2500
        }]
    );
    // ... unless the user says --overwrite: then it is weir's, resized, and
    // its data is hashed rather than thrown away.
    let p = plan(
        &l,
        &g,
        None,
        &found,
        PlanOptions {
            overwrite: true,
            ..download()
        },
    );
    assert!(p.conflicts.is_empty());
    assert_eq!(p.files[0], FileAction::Own);
    assert!(p.foreign.count() == 0 && p.check.iter_ones().eq([0, 1]));
}

#[test]
fn an_unchanged_journal_is_trusted_and_a_changed_file_is_rechecked() {
    let (l, g) = layout();
    let states = [st(1, 2500, 10), st(2, 0, 10), st(3, 7000, 10)];
    let j = owned_journal(&[0, 1, 5, 9], &states);
    let p = plan(&l, &g, Some(&j), &files_as(&states), download());
    assert_eq!(p.files, [FileAction::Own; 3]);
    assert_eq!(p.had.iter_ones().collect::<Vec<_>>(), [0, 1, 5, 9]);
    assert_eq!(p.check.count(), 0);
    // `d/c` touched since (mtime): its vouched pieces are hashed, not
    // trusted; `d/a`'s still are.
    let mut now = states;
    now[2].mtime_nsec += 1;
    let p = plan(&l, &g, Some(&j), &files_as(&now), download());
    assert_eq!(p.had.iter_ones().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(p.check.iter_ones().collect::<Vec<_>>(), [5, 9]);
    // Shorter: the same (and it is weir's, so it is set to its length).
    let mut now = states;
    now[2].size = 10;
    let p = plan(&l, &g, Some(&j), &files_as(&now), download());
    assert_eq!(p.files[2], FileAction::Own);
    assert_eq!(p.check.iter_ones().collect::<Vec<_>>(), [5, 9]);
    // Replaced by another file (another inode): someone else's now.
    let mut now = states;
    now[2].ino = 99;
    let p = plan(&l, &g, Some(&j), &files_as(&now), download());
    assert_eq!(p.files[2], FileAction::Foreign);
    assert!(p.foreign.get(5) && p.foreign.get(9) && !p.had.get(5));
    // --recheck: everything present is hashed.
    let p = plan(
        &l,
        &g,
        Some(&j),
        &files_as(&states),
        PlanOptions {
            recheck: true,
            ..download()
        },
    );
    assert_eq!(p.had.count(), 0);
    assert_eq!(p.check.count(), 10);
    // A deleted file: its pieces are fetched again.
    let found = [
        Found::File(states[0]),
        Found::File(states[1]),
        Found::Missing,
    ];
    let p = plan(&l, &g, Some(&j), &found, download());
    assert_eq!(p.files[2], FileAction::Create);
    assert_eq!(p.had.iter_ones().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(p.check.count(), 0);
}

#[test]
fn written_hints_become_checks_and_block_aligned_partials() {
    let (l, g) = layout();
    let states = [st(1, 2500, 10), st(2, 0, 10), st(3, 7000, 10)];
    let j = journal(&[
        Record::Owned(bits(3, &[0, 1, 2])),
        Record::Files(states.to_vec()),
        Record::Written {
            piece: 4,
            end: 1000,
        },
        Record::Written { piece: 6, end: 600 },
        Record::Written { piece: 7, end: 200 },
    ]);
    let j = parse(&j, &id()).unwrap();
    let mut now = states;
    now[2].mtime_sec = 11; // written after the last flush, as after a kill
    let p = plan(&l, &g, Some(&j), &files_as(&now), download());
    assert_eq!(p.check.iter_ones().collect::<Vec<_>>(), [4]);
    // Partly written pieces, to the byte (a protocol asking whole blocks
    // takes what it can).
    assert_eq!(p.partial, [(6, 600), (7, 200)]);
    assert_eq!(p.had.count(), 0);
}

#[test]
fn seeding_never_creates_and_skips_what_is_missing() {
    let (l, g) = layout();
    let seed = PlanOptions {
        mode: Mode::Seed,
        ..download()
    };
    let found = [Found::File(st(1, 2500, 1)), Found::Missing, Found::Missing];
    let p = plan(&l, &g, None, &found, seed);
    assert_eq!(
        p.files,
        [FileAction::Foreign, FileAction::Absent, FileAction::Absent]
    );
    // Piece 2 needs `d/c`, which is not there.
    assert_eq!(p.foreign.iter_ones().collect::<Vec<_>>(), [0, 1]);
    assert!(p.conflicts.is_empty());
    let p = plan(&l, &g, None, &[Found::Missing; 3], seed);
    assert_eq!(p.foreign.count() + p.had.count() + p.check.count(), 0);
}

#[test]
fn a_journal_with_an_unreadable_start_costs_a_recheck_of_weirs_own_files() {
    let (l, g) = layout();
    let r = parse(b"garbage", &id()).unwrap();
    let states = [st(1, 2500, 10), st(2, 0, 10), st(3, 7000, 10)];
    let p = plan(&l, &g, Some(&r), &files_as(&states), download());
    assert_eq!(p.files, [FileAction::Own; 3]);
    assert!(p.conflicts.is_empty() && p.foreign.count() == 0);
    assert_eq!(p.had.count(), 0);
    assert_eq!(p.check.count(), 10);
}
