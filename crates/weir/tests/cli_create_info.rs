//! `weir create` and `weir info` run as the built binary: a directory with
//! nested directories, odd sizes and an empty file; malformed and hostile
//! torrents exit 2 with a message naming the problem.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha1::{Digest, Sha1};

fn weir(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(cwd)
        .env("WEIR_ALLOW", "loopback")
        .output()
        .expect("run weir")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("weir-cli-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(seed as u32) as u8
        })
        .collect()
}

#[test]
fn create_then_info_directory() {
    let s = Scratch::new("dir");
    let root = s.0.join("payload");
    let files: &[(&str, usize)] = &[
        ("a.bin", 100_001),
        ("empty.txt", 0),
        ("sub/b.dat", 16_383),
        ("sub/deeper/c", 70_000),
        ("z", 1),
    ];
    let mut concat = Vec::new();
    for (i, (name, len)) in files.iter().enumerate() {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let data = pattern(*len, i as u8);
        fs::write(&p, &data).unwrap();
        concat.extend_from_slice(&data);
    }
    let out = weir(
        &[
            "create",
            "payload",
            "-o",
            "p.torrent",
            "--piece-size",
            "32KiB",
            "-t",
            "http://127.0.0.1:6969/announce",
            "--private",
            "--no-date",
        ],
        &s.0,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    for (name, _) in files {
        assert!(stderr.contains(name), "listing lacks {name}: {stderr}");
    }
    assert!(stdout.contains("wrote: p.torrent"), "{stdout}");

    // The info-hash printed is the SHA-1 of the info dictionary, and the
    // piece hashes cover the files in sorted order.
    let torrent = fs::read(s.0.join("p.torrent")).unwrap();
    let m = weir_bt::metainfo::Metainfo::from_bytes(&torrent).unwrap();
    let hex: String = m.info_hash.iter().map(|b| format!("{b:02x}")).collect();
    assert!(stdout.contains(&format!("info-hash: {hex}")), "{stdout}");
    assert_eq!(m.info.piece_length, 32 << 10);
    assert!(m.info.private);
    assert_eq!(m.creation_date, None);
    let want_paths: Vec<String> = files.iter().map(|(n, _)| n.to_string()).collect();
    let got_paths: Vec<String> = m.info.files.iter().map(|f| f.path.join("/")).collect();
    assert_eq!(got_paths, want_paths);
    for (i, chunk) in concat.chunks(32 << 10).enumerate() {
        let h: [u8; 20] = Sha1::digest(chunk).into();
        assert_eq!(m.info.pieces[i], h, "piece {i}");
    }
    assert_eq!(m.info.pieces.len(), concat.len().div_ceil(32 << 10));

    let info = weir(&["info", "p.torrent"], &s.0);
    assert!(info.status.success(), "{}", text(&info.stderr));
    let t = text(&info.stdout);
    assert!(t.contains(&hex), "{t}");
    assert!(t.contains("name:          payload"), "{t}");
    assert!(t.contains("private:       yes"), "{t}");
    assert!(t.contains("tier 1: http://127.0.0.1:6969/announce"), "{t}");
    assert!(t.contains(&format!("({} bytes)", concat.len())), "{t}");
    for (name, len) in files {
        let line = format!("{len:>14}  payload/{name}");
        assert!(t.contains(&line), "missing {line:?} in {t}");
    }

    let json = weir(&["info", "--json", "p.torrent"], &s.0);
    assert!(json.status.success());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["info_hash"], hex);
    assert_eq!(v["files"].as_array().unwrap().len(), files.len());
    assert_eq!(v["files"][1]["length"], 0);
    assert_eq!(v["total_length"], concat.len() as u64);
}

#[test]
fn create_single_file_default_piece_size() {
    let s = Scratch::new("single");
    fs::write(s.0.join("one.bin"), pattern(50_000, 3)).unwrap();
    let out = weir(&["create", "one.bin"], &s.0);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let m =
        weir_bt::metainfo::Metainfo::from_bytes(&fs::read(s.0.join("one.bin.torrent")).unwrap())
            .unwrap();
    assert!(m.info.single_file);
    assert_eq!(m.info.piece_length, 16 << 10);
    assert!(m.creation_date.is_some());
}

#[test]
fn bad_inputs_exit_2_with_a_message() {
    let s = Scratch::new("bad");
    fs::write(s.0.join("f"), b"x").unwrap();

    let out = weir(&["create", "f", "--piece-size", "3 parsecs"], &s.0);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--piece-size"),
        "{}",
        text(&out.stderr)
    );
    let out = weir(&["create", "f", "--piece-size", "1KiB"], &s.0);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("between 16 KiB and 16 MiB"));
    let out = weir(&["create", "missing"], &s.0);
    assert_eq!(out.status.code(), Some(2));

    fs::write(s.0.join("bad.torrent"), b"d4:infod4:name").unwrap();
    let out = weir(&["info", "bad.torrent"], &s.0);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(
        e.contains("bad.torrent") && e.contains("bencode error at byte 14"),
        "{e}"
    );

    let out = weir(&["info", "nonexistent.torrent"], &s.0);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read nonexistent.torrent"));

    // A torrent whose file path climbs out of the download directory.
    let mut evil = Vec::new();
    evil.extend_from_slice(b"d4:infod5:filesld6:lengthi5e4:pathl2:..6:passwdee");
    evil.extend_from_slice(b"e4:name4:evil12:piece lengthi16384e6:pieces20:");
    evil.extend_from_slice(&[0u8; 20]);
    evil.extend_from_slice(b"ee");
    fs::write(s.0.join("evil.torrent"), &evil).unwrap();
    let out = weir(&["info", "evil.torrent"], &s.0);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let e = text(&out.stderr);
    assert!(
        e.contains("unsafe path") && e.contains("../passwd") && e.contains("`..`"),
        "{e}"
    );
}

#[test]
fn symlink_loops_are_refused() {
    let s = Scratch::new("loop");
    let d = s.0.join("d");
    fs::create_dir_all(d.join("sub")).unwrap();
    fs::write(d.join("f"), b"data").unwrap();
    std::os::unix::fs::symlink("..", d.join("sub/up")).unwrap();
    let out = weir(&["create", "d"], &s.0);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("symbolic link loop"),
        "{}",
        text(&out.stderr)
    );
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

/// The same payload and piece size give the same info-hash as mktorrent
/// (which sends nothing on the network, so no namespace is needed).
#[test]
fn info_hash_matches_mktorrent() {
    if !on_path("mktorrent") {
        if std::env::var_os("CI").is_some() {
            panic!("mktorrent is not installed (CI)");
        }
        eprintln!("skipping: mktorrent is not installed");
        return;
    }
    let s = Scratch::new("mktorrent");
    let root = s.0.join("p");
    for (i, (name, len)) in [
        ("a.bin", 70_000),
        ("b/c.bin", 33_333),
        ("b/d/e", 0),
        ("z", 5),
    ]
    .iter()
    .enumerate()
    {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, pattern(*len, i as u8)).unwrap();
    }
    fs::write(s.0.join("one.bin"), pattern(100_000, 9)).unwrap();
    for (input, l, size) in [("p", "15", "32KiB"), ("one.bin", "16", "64KiB")] {
        let m = Command::new("mktorrent")
            .args(["-l", l, "-o", "m.torrent", input])
            .current_dir(&s.0)
            .output()
            .unwrap();
        assert!(m.status.success(), "{}", text(&m.stderr));
        let w = weir(
            &["create", input, "-o", "w.torrent", "--piece-size", size],
            &s.0,
        );
        assert!(w.status.success(), "{}", text(&w.stderr));
        let parse = |f: &str| {
            weir_bt::metainfo::Metainfo::from_bytes(&fs::read(s.0.join(f)).unwrap()).unwrap()
        };
        assert_eq!(
            parse("m.torrent").info_hash,
            parse("w.torrent").info_hash,
            "{input}"
        );
        fs::remove_file(s.0.join("m.torrent")).unwrap();
    }
}
