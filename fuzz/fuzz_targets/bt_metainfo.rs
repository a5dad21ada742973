//! weir-bt `metainfo`: `Metainfo::from_bytes` and `Info::from_bytes`.
//!
//! A torrent that loads must be consistent (info-hash over the raw `info`
//! bytes, one hash per piece, piece lengths summing to the total, safe and
//! distinct paths), and building it again with `create::TorrentBuilder`
//! must give a torrent that loads to the same thing.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use sha1::{Digest, Sha1};
use weir_bt::create::TorrentBuilder;
use weir_bt::metainfo::{Info, MAX_PIECE_LENGTH, Metainfo};
use weir_core::safepath::{self, Platform};

fn check_info(info: &Info) {
    assert!((1..=MAX_PIECE_LENGTH).contains(&info.piece_length));
    let total = info.total_length();
    assert!(total > 0);
    let count = info.piece_count();
    assert_eq!(
        u64::from(count),
        total.div_ceil(u64::from(info.piece_length))
    );
    assert_eq!(count as usize, info.pieces.len());
    let last = info.piece_len(count - 1);
    assert!(last >= 1 && last <= info.piece_length);
    assert_eq!(
        u64::from(count - 1) * u64::from(info.piece_length) + u64::from(last),
        total
    );
    assert_eq!(info.piece_len(count), 0);
    let ok = |c: &str| matches!(safepath::component(c, Platform::current()), Ok(s) if s == c);
    assert!(ok(&info.name), "unsafe name {:?}", info.name);
    if info.single_file {
        assert_eq!(info.files.len(), 1);
        assert_eq!(info.files[0].path, vec![info.name.to_string()]);
    }
    let mut files = HashSet::new();
    for f in &info.files {
        assert!(!f.path.is_empty());
        assert!(f.path.iter().all(|c| ok(c)), "unsafe path {:?}", f.path);
        assert!(files.insert(f.path.clone()), "duplicate path {:?}", f.path);
    }
    for f in &info.files {
        for n in 1..f.path.len() {
            assert!(
                !files.contains(&f.path[..n]),
                "{:?} is a file and a directory",
                &f.path[..n]
            );
        }
    }
}

fn rebuild(m: &Metainfo) {
    let info = &m.info;
    let mut b = if info.single_file {
        TorrentBuilder::single_file(&info.name, info.files[0].length, info.piece_length)
    } else {
        let mut b = TorrentBuilder::multi_file(&info.name, info.piece_length);
        for f in &info.files {
            b.add_file(f.path.clone(), f.length);
        }
        b
    };
    b.pieces(info.pieces.to_vec())
        .trackers(m.trackers())
        .private(info.private)
        .comment(m.comment.clone())
        .created_by(m.created_by.clone())
        .creation_date(m.creation_date);
    let again = b.build().expect("a loaded torrent builds again").metainfo;
    assert_eq!(&again.info, info);
    assert_eq!(again.trackers(), m.trackers());
    assert_eq!(again.comment, m.comment);
    assert_eq!(again.created_by, m.created_by);
    assert_eq!(again.creation_date, m.creation_date);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Metainfo::from_bytes(data) {
        let top = weir_bencode::decode(data).expect("a loaded torrent is bencode");
        let raw = top
            .as_dict()
            .and_then(|d| d.get(b"info"))
            .and_then(|v| v.raw())
            .expect("info dict");
        assert_eq!(<[u8; 20]>::from(Sha1::digest(raw)), m.info_hash);
        assert_eq!(
            Info::from_bytes(raw).expect("the info dict loads alone"),
            m.info
        );
        check_info(&m.info);
        assert!(
            m.trackers()
                .iter()
                .all(|t| !t.is_empty() && t.iter().all(|u| !u.is_empty()))
        );
        rebuild(&m);
    }
    if let Ok(info) = Info::from_bytes(data) {
        check_info(&info);
    }
});
