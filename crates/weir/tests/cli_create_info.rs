//! `weir create` and `weir info` run as the built binary: a directory with
//! nested directories, odd sizes and an empty file; malformed and hostile
//! torrents exit 2 with a message naming the problem; an existing output
//! is kept unless `--force`; bad tracker URLs are refused; a reader that
//! closes the pipe early ends `weir info` quietly. Every run has a time
//! limit.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sha1::{Digest, Sha1};
use weir_lab::process::{Output, Proc, run};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn weir(args: &[&str], cwd: &Path) -> Output {
    run(
        Command::new(WEIR)
            .args(args)
            .current_dir(cwd)
            .env("WEIR_ALLOW", "loopback"),
        Duration::from_secs(120),
    )
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

/// The same payload and piece size give the same info-hash as mktorrent
/// (which sends nothing on the network, so no namespace is needed).
#[test]
fn info_hash_matches_mktorrent() {
    if !weir_lab::ci::require_program("mktorrent").unwrap() {
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
        let m = run(
            Command::new("mktorrent")
                .args(["-l", l, "-o", "m.torrent", input])
                .current_dir(&s.0),
            Duration::from_secs(120),
        )
        .unwrap();
        assert!(m.status.success(), "{}", text(&m.stderr));
        let w = weir(
            &[
                "create",
                input,
                "-o",
                "w.torrent",
                "--piece-size",
                size,
                "--force",
            ],
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

#[test]
fn create_keeps_an_existing_output_unless_forced() {
    let s = Scratch::new("force");
    fs::write(s.0.join("f"), pattern(20_000, 1)).unwrap();
    fs::write(s.0.join("mine.torrent"), b"not yours").unwrap();
    let out = weir(&["create", "f", "-o", "mine.torrent"], &s.0);
    assert_eq!(out.code(), Some(2), "{}", out.stderr_text());
    let e = out.stderr_text();
    assert!(
        e.contains("mine.torrent already exists") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(fs::read(s.0.join("mine.torrent")).unwrap(), b"not yours");
    // The default name too.
    fs::write(s.0.join("f.torrent"), b"also mine").unwrap();
    let out = weir(&["create", "f"], &s.0);
    assert_eq!(out.code(), Some(2), "{}", out.stderr_text());
    assert_eq!(fs::read(s.0.join("f.torrent")).unwrap(), b"also mine");
    // --force replaces it with a torrent.
    let out = weir(&["create", "f", "-o", "mine.torrent", "--force"], &s.0);
    assert!(out.success(), "{}", out.stderr_text());
    let m = weir_bt::metainfo::Metainfo::from_bytes(&fs::read(s.0.join("mine.torrent")).unwrap())
        .unwrap();
    assert_eq!(&*m.info.name, "f");
    let leftovers: Vec<_> = fs::read_dir(&s.0)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("weir-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn create_refuses_tracker_urls_clients_cannot_use() {
    let s = Scratch::new("trackers");
    fs::write(s.0.join("f"), pattern(20_000, 2)).unwrap();
    for (url, why) in [
        ("notaurl", "not a URL"),
        ("ftp://t.example/announce", "not a tracker protocol"),
        ("udp://t.example/announce", "needs a port"),
        ("http://t.example:70000/announce", "1 to 65535"),
    ] {
        let out = weir(&["create", "f", "-o", "t.torrent", "-t", url], &s.0);
        let e = out.stderr_text();
        assert_eq!(out.code(), Some(2), "{url}: {e}");
        assert!(e.contains(url) && e.contains(why), "{url}: {e}");
        assert!(
            !s.0.join("t.torrent").exists(),
            "{url}: a torrent was written"
        );
    }
    // One bad URL in a tier list is enough to refuse.
    let out = weir(
        &[
            "create",
            "f",
            "-o",
            "t.torrent",
            "-t",
            "http://127.0.0.1:6969/announce,bogus",
        ],
        &s.0,
    );
    assert_eq!(out.code(), Some(2), "{}", out.stderr_text());
    let out = weir(
        &[
            "create",
            "f",
            "-o",
            "t.torrent",
            "-t",
            "https://t.example/announce",
            "-t",
            "udp://[::1]:6969",
        ],
        &s.0,
    );
    assert!(out.success(), "{}", out.stderr_text());
}

#[test]
fn info_into_a_closed_pipe_ends_quietly() {
    let s = Scratch::new("epipe");
    // 1,500 files: the listing (and the JSON) is well over a pipe's 64 KiB,
    // so weir is still writing when the reader goes.
    let root = s.0.join("many");
    fs::create_dir_all(&root).unwrap();
    for i in 0..1500 {
        fs::write(
            root.join(format!("file-with-a-long-name-{i:05}.dat")),
            [i as u8],
        )
        .unwrap();
    }
    let out = weir(&["create", "many", "-o", "many.torrent"], &s.0);
    assert!(out.success(), "{}", out.stderr_text());
    for json in [false, true] {
        let mut cmd = Command::new(WEIR);
        cmd.args(["info", "many.torrent"]);
        if json {
            cmd.arg("--json");
        }
        cmd.current_dir(&s.0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut p = Proc::spawn("weir info", &mut cmd).unwrap();
        let mut err = p.take_stderr().unwrap();
        {
            // What `head -c 200` does: read a little, then close.
            let mut stdout = p.take_stdout().unwrap();
            let mut first = [0u8; 200];
            stdout.read_exact(&mut first).unwrap();
        }
        let Some((st, _)) = p.wait_timeout(Duration::from_secs(60)).unwrap() else {
            panic!("{}", p.failure("weir info still running"));
        };
        let mut text = String::new();
        err.read_to_string(&mut text).unwrap();
        assert_eq!(st.code(), Some(0), "json={json}: {st}: {text}");
        assert!(text.is_empty(), "json={json}: quiet: {text}");
    }
}

#[test]
fn create_with_stderr_gone_still_works() {
    let s = Scratch::new("stderr-gone");
    fs::write(s.0.join("f"), pattern(50_000, 4)).unwrap();
    // A stderr whose reader is already gone: every write to it fails with
    // EPIPE (what `2>&1 | head -1` leads to once head exits).
    let (gone, stderr) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(gone);
    let mut cmd = Command::new(WEIR);
    cmd.args(["create", "f", "-o", "f.torrent"])
        .current_dir(&s.0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::os::fd::OwnedFd::from(stderr)));
    let mut p = Proc::spawn("weir create", &mut cmd).unwrap();
    let mut out = String::new();
    p.take_stdout().unwrap().read_to_string(&mut out).unwrap();
    let Some((st, _)) = p.wait_timeout(Duration::from_secs(60)).unwrap() else {
        panic!("{}", p.failure("weir create still running"));
    };
    assert_eq!(st.code(), Some(0), "{st}: {out}");
    assert!(out.contains("wrote: f.torrent"), "{out}");
    assert!(s.0.join("f.torrent").exists());
}
