//! Metainfo parsing: good torrents of every shape, and one test per kind of
//! malformed torrent.

use sha1::{Digest, Sha1};
use weir_bencode::OwnedValue as V;
use weir_bt::metainfo::{Metainfo, MetainfoError};

fn b(s: impl AsRef<[u8]>) -> V {
    V::bytes(s)
}

fn pieces(n: usize) -> V {
    V::Bytes((0..n * 20).map(|i| i as u8).collect())
}

fn single(len: i64, pl: i64, n: usize) -> V {
    let mut info = V::dict();
    info.insert("name", b("file.bin"))
        .insert("length", V::Int(len))
        .insert("piece length", V::Int(pl))
        .insert("pieces", pieces(n));
    info
}

fn file(path: &[&str], len: i64) -> V {
    let mut f = V::dict();
    f.insert("length", V::Int(len))
        .insert("path", V::List(path.iter().map(b).collect()));
    f
}

fn multi(files: Vec<V>, pl: i64, n: usize) -> V {
    let mut info = V::dict();
    info.insert("name", b("dir"))
        .insert("files", V::List(files))
        .insert("piece length", V::Int(pl))
        .insert("pieces", pieces(n));
    info
}

fn torrent(info: V) -> Vec<u8> {
    let mut t = V::dict();
    t.insert("announce", b("http://127.0.0.1:6969/announce"))
        .insert("info", info);
    t.to_vec()
}

fn err(data: &[u8]) -> MetainfoError {
    Metainfo::from_bytes(data).unwrap_err()
}

#[test]
fn single_file_with_short_last_piece() {
    let data = torrent(single(100_000, 32768, 4));
    let m = Metainfo::from_bytes(&data).unwrap();
    assert!(m.info.single_file);
    assert_eq!(&*m.info.name, "file.bin");
    assert_eq!(m.info.files.len(), 1);
    assert_eq!(m.info.files[0].path, ["file.bin"]);
    assert_eq!(m.total_length(), 100_000);
    assert_eq!(m.info.piece_count(), 4);
    assert_eq!(m.info.piece_len(3), 100_000 - 3 * 32768);
    assert_eq!(m.info.piece_len(4), 0);
    assert_eq!(
        m.announce.as_deref(),
        Some("http://127.0.0.1:6969/announce")
    );
    assert_eq!(m.trackers(), [["http://127.0.0.1:6969/announce"]]);
    assert!(!m.info.private);
}

#[test]
fn info_hash_is_sha1_of_info_bytes_as_received() {
    let info = single(16384, 16384, 1);
    let info_bytes = info.to_vec();
    let data = torrent(info);
    let m = Metainfo::from_bytes(&data).unwrap();
    let want: [u8; 20] = Sha1::digest(&info_bytes).into();
    assert_eq!(m.info_hash, want);
    // The span is located in the file, not re-encoded: check by position.
    let at = data
        .windows(info_bytes.len())
        .position(|w| w == info_bytes)
        .unwrap();
    assert!(at > 0);
}

/// Whether `part` lies inside `whole`'s buffer (shared, not copied).
fn inside(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

#[test]
fn piece_hashes_are_one_shared_copy_of_the_info_dictionary_bytes() {
    let data = torrent(single(5 * 16384 - 3, 16384, 5));
    let m = Metainfo::from_bytes(&data).unwrap();
    let info = m.info_bytes.as_ref().unwrap();
    let hashes = m.info.pieces.as_bytes();
    assert_eq!(hashes.len(), 100);
    assert!(inside(hashes, info), "the hashes are a copy");
    let want: Vec<u8> = (0..100).map(|i| i as u8).collect();
    assert_eq!(&hashes[..], &want[..]);
    // Storage's digests are the same bytes again.
    let d = m.info.pieces.digests();
    assert_eq!(d.len(), 5);
    for i in 0..5 {
        let h: [u8; 20] = want[i * 20..i * 20 + 20].try_into().unwrap();
        assert_eq!(m.info.pieces[i], h);
        assert_eq!(m.info.pieces.get(i), Some(&h));
        assert_eq!(d.get(i), Some(weir_core::storage::Digest::Sha1(h)));
    }
    assert_eq!(m.info.pieces.get(5), None);
    assert_eq!(d.get(5), None);
    assert_eq!(d.get(usize::MAX), None);
    assert_eq!(m.info.pieces.iter().count(), 5);
    // A bare info dictionary (BEP 9) parses to the same hashes.
    let again = weir_bt::metainfo::Info::from_bytes(info).unwrap();
    assert_eq!(again, m.info);
}

#[test]
fn multi_file_nested_zero_length_and_metadata() {
    let info = multi(
        vec![
            file(&["a", "b", "c.txt"], 5),
            file(&["empty"], 0),
            file(&["a", "d.bin"], 40_000),
        ],
        16384,
        3,
    );
    let mut info = info;
    info.insert("private", V::Int(1));
    let mut t = V::dict();
    t.insert("info", info)
        .insert(
            "announce-list",
            V::List(vec![
                V::List(vec![b("http://a/ann"), b("udp://b:1")]),
                V::List(vec![]),
                V::List(vec![b("http://c/ann")]),
            ]),
        )
        .insert("comment", b("hello"))
        .insert("created by", b("weir"))
        .insert("creation date", V::Int(1_700_000_000));
    let m = Metainfo::from_bytes(&t.to_vec()).unwrap();
    assert!(!m.info.single_file);
    assert!(m.info.private);
    assert_eq!(&*m.info.name, "dir");
    let paths: Vec<_> = m.info.files.iter().map(|f| f.path.join("/")).collect();
    assert_eq!(paths, ["a/b/c.txt", "empty", "a/d.bin"]);
    assert_eq!(m.info.files[1].length, 0);
    assert_eq!(m.total_length(), 40_005);
    assert_eq!(
        m.trackers(),
        vec![vec!["http://a/ann", "udp://b:1"], vec!["http://c/ann"]]
    );
    let listed: Vec<Vec<&str>> = m
        .announce_list
        .iter()
        .map(|t| t.iter().map(|u| &**u).collect())
        .collect();
    assert_eq!(m.trackers(), listed);
    // Shared: each URL becomes the copy given, the text unchanged.
    let mut shared = m.clone();
    let kept: std::sync::Arc<str> = "udp://b:1".into();
    shared.share_trackers(|u| {
        if **u == *kept {
            kept.clone()
        } else {
            u.clone()
        }
    });
    assert!(std::sync::Arc::ptr_eq(&shared.announce_list[0][1], &kept));
    assert_eq!(shared.trackers(), m.trackers());
    // The tiers to announce along are the metainfo's own copies.
    let tiers = shared.tracker_tiers();
    assert!(std::sync::Arc::ptr_eq(&tiers[0][1], &kept));
    let text: Vec<Vec<String>> = tiers
        .iter()
        .map(|t| t.iter().map(|u| u.to_string()).collect())
        .collect();
    assert_eq!(text, m.trackers());
    assert_eq!(m.announce, None);
    assert_eq!(m.comment.as_deref(), Some("hello"));
    assert_eq!(m.created_by.as_deref(), Some("weir"));
    assert_eq!(m.creation_date, Some(1_700_000_000));
}

#[test]
fn utf8_keys_are_preferred_and_legacy_bytes_are_lossy() {
    let mut info = multi(vec![file(&["x"], 1)], 16384, 1);
    info.insert("name", V::Bytes(vec![b'n', 0xff, b'm']));
    let m = Metainfo::from_bytes(&torrent(info.clone())).unwrap();
    assert_eq!(&*m.info.name, "n\u{fffd}m");
    info.insert("name.utf-8", b("näme"));
    let mut f = file(&["legacy"], 1);
    f.insert("path.utf-8", V::List(vec![b("ünï")]));
    info.insert("files", V::List(vec![f]));
    let m = Metainfo::from_bytes(&torrent(info)).unwrap();
    assert_eq!(&*m.info.name, "näme");
    assert_eq!(m.info.files[0].path, ["ünï"]);
}

#[test]
fn piece_lengths_accepted_and_rejected() {
    for pl in [16384i64, 1 << 20, 16 << 20, 3 * 16384 + 7] {
        let len = pl * 3 + 1;
        assert!(
            Metainfo::from_bytes(&torrent(single(len, pl, 4))).is_ok(),
            "{pl}"
        );
    }
    assert!(matches!(
        err(&torrent(single(10, 0, 1))),
        MetainfoError::BadPieceLength(0)
    ));
    assert!(matches!(
        err(&torrent(single(10, -16384, 1))),
        MetainfoError::BadPieceLength(-16384)
    ));
    assert!(matches!(
        err(&torrent(single(1 << 28, 128 << 20, 2))),
        MetainfoError::BadPieceLength(_)
    ));
}

#[test]
fn pieces_must_match_the_length() {
    let mut info = single(100, 16384, 1);
    info.insert("pieces", V::Bytes(vec![0; 21]));
    assert!(matches!(
        err(&torrent(info)),
        MetainfoError::BadPiecesLength(21)
    ));
    let e = err(&torrent(single(100_000, 16384, 6)));
    assert!(
        matches!(
            e,
            MetainfoError::PieceCount {
                expected: 7,
                found: 6,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("6 hashes"), "{e}");
    assert!(matches!(
        err(&torrent(single(16384, 16384, 2))),
        MetainfoError::PieceCount {
            expected: 1,
            found: 2,
            ..
        }
    ));
}

#[test]
fn missing_and_wrong_keys() {
    let e = err(&V::dict().to_vec());
    assert_eq!(e.to_string(), "missing key `info`");
    let mut info = single(10, 16384, 1);
    if let V::Dict(d) = &mut info {
        d.remove(b"name".as_slice());
    }
    assert_eq!(err(&torrent(info)).to_string(), "missing key `info.name`");
    let mut info = single(10, 16384, 1);
    info.insert("length", b("ten"));
    assert_eq!(
        err(&torrent(info)).to_string(),
        "`info.length`: expected integer, found byte string"
    );
    let mut info = multi(vec![file(&["a"], 1)], 16384, 1);
    info.insert("files", V::List(vec![file(&["a"], 1), V::Int(3)]));
    let e = err(&torrent(info));
    assert!(
        matches!(&e, MetainfoError::WrongType { key, .. } if key == "info.files[1]"),
        "{e}"
    );
    let mut info = single(10, 16384, 1);
    info.insert("files", V::List(vec![file(&["a"], 1)]));
    assert!(matches!(
        err(&torrent(info)),
        MetainfoError::BadValue { .. }
    ));
    let mut t = V::dict();
    t.insert("info", single(10, 16384, 1))
        .insert("announce-list", b("http://x"));
    assert!(matches!(err(&t.to_vec()), MetainfoError::WrongType { .. }));
    let mut info = single(10, 16384, 1);
    info.insert("private", V::Int(2));
    assert!(matches!(
        err(&torrent(info)),
        MetainfoError::BadValue { .. }
    ));
    let mut info = single(-1, 16384, 1);
    info.insert("length", V::Int(-1));
    let e = err(&torrent(info));
    assert!(e.to_string().contains("negative length -1"), "{e}");
    let mut info = multi(vec![], 16384, 0);
    info.insert("files", V::List(vec![]));
    assert!(matches!(
        err(&torrent(info)),
        MetainfoError::BadValue { .. }
    ));
    assert!(matches!(
        err(&torrent(single(0, 16384, 0))),
        MetainfoError::Empty
    ));
}

#[test]
fn v2_only_is_refused() {
    let mut info = V::dict();
    info.insert("name", b("x"))
        .insert("piece length", V::Int(16384))
        .insert("file tree", V::dict())
        .insert("meta version", V::Int(2));
    assert!(matches!(err(&torrent(info)), MetainfoError::V2Only));
}

#[test]
fn bencode_errors_carry_the_offset() {
    let mut data = torrent(single(10, 16384, 1));
    data.push(b'x');
    let e = err(&data);
    assert!(matches!(e, MetainfoError::Bencode(_)));
    assert!(
        e.to_string().contains(&format!("byte {}", data.len() - 1)),
        "{e}"
    );
    let e = err(b"d4:infoi1e");
    assert!(e.to_string().contains("bencode error at byte 10"), "{e}");
    let e = err(b"i1e");
    assert!(e.to_string().contains("(top level)"), "{e}");
}

#[test]
fn path_escapes_are_refused_with_the_path_and_rule() {
    let cases: &[(&[&str], &str)] = &[
        (&["..", "etc", "passwd"], "`.` or `..` component"),
        (&["a", "..", "..", "x"], "`.` or `..` component"),
        (&["/etc/passwd"], "path separator inside a component"),
        (&["a/b"], "path separator inside a component"),
        (&["a\\b"], "path separator inside a component"),
        (&["nul\0byte"], "contains a NUL byte"),
        (&["a", ""], "empty path component"),
        (&["."], "`.` or `..` component"),
    ];
    for (path, reason) in cases {
        let e = err(&torrent(multi(vec![file(path, 1)], 16384, 1)));
        match &e {
            MetainfoError::UnsafePath {
                key,
                path: p,
                reason: r,
            } => {
                assert_eq!(key, "info.files[0].path");
                assert_eq!(p, &path.join("/"));
                assert_eq!(r, reason);
            }
            other => panic!("{path:?}: {other}"),
        }
        assert!(e.to_string().contains("unsafe path"), "{e}");
    }
    let e = err(&torrent(multi(vec![file(&[], 1)], 16384, 1)));
    assert!(
        matches!(
            e,
            MetainfoError::UnsafePath {
                reason: "empty path",
                ..
            }
        ),
        "{e}"
    );
    for name in ["..", "/", "a/b", ""] {
        let mut info = single(10, 16384, 1);
        info.insert("name", b(name));
        let e = err(&torrent(info));
        assert!(
            matches!(&e, MetainfoError::UnsafePath { key, .. } if key == "info.name"),
            "{name:?}: {e}"
        );
    }
}

#[test]
fn conflicting_paths_are_refused() {
    for files in [
        vec![file(&["a"], 1), file(&["a"], 2)],
        vec![file(&["a"], 1), file(&["a", "b"], 2)],
        vec![file(&["a", "b"], 1), file(&["a"], 2)],
    ] {
        let e = err(&torrent(multi(files, 16384, 1)));
        assert!(matches!(e, MetainfoError::ConflictingPaths(_)), "{e}");
    }
}

#[test]
fn unsorted_keys_are_malformed() {
    // Strict bencode: a torrent with keys out of order is rejected, with
    // the offset of the offending key.
    let data = b"d4:infod4:name1:x6:lengthi1eee";
    let e = err(data);
    assert!(e.to_string().contains("not in sorted order"), "{e}");
}

/// What can be checked of any parse result: the torrent's own consistency
/// when it loads, and a bencode error exactly when the bytes are not
/// (strict) bencode.
fn check_parse(data: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
    let r = Metainfo::from_bytes(data);
    proptest::prop_assert_eq!(
        matches!(r, Err(MetainfoError::Bencode(_))),
        weir_bencode::decode(data).is_err(),
        "{:?}",
        r
    );
    if let Ok(m) = r {
        let info = &m.info;
        proptest::prop_assert_eq!(
            info.pieces.len() as u64,
            m.total_length().div_ceil(u64::from(info.piece_length))
        );
        let top = weir_bencode::decode(data).unwrap();
        let info_d = top.as_dict().unwrap().get(b"info").unwrap();
        let raw = info_d.raw().unwrap();
        proptest::prop_assert_eq!(<[u8; 20]>::from(Sha1::digest(raw)), m.info_hash);
        // The hashes are the `pieces` string, held inside the kept info bytes.
        let want = info_d
            .as_dict()
            .unwrap()
            .get(b"pieces")
            .unwrap()
            .as_bytes()
            .unwrap();
        proptest::prop_assert_eq!(&info.pieces.as_bytes()[..], want);
        proptest::prop_assert!(inside(
            info.pieces.as_bytes(),
            m.info_bytes.as_ref().unwrap()
        ));
        proptest::prop_assert_eq!(info.pieces.digests().len(), info.pieces.len());
    }
    Ok(())
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        check_parse(&data)?;
    }

    #[test]
    fn mutated_torrents_never_panic(idx in 0usize..200, byte in proptest::prelude::any::<u8>()) {
        let mut data = torrent(multi(vec![file(&["a", "b"], 70000), file(&["c"], 3)], 32768, 3));
        let i = idx % data.len();
        data[i] = byte;
        check_parse(&data)?;
    }
}
