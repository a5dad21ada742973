//! `weir get` / `weir seed` exit codes and messages as the built binary:
//! bad input exits 2 naming the problem, a finished download exits 0, and a
//! complete download run again starts complete from its resume journal
//! (nothing fetched, no peer needed).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn weir(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(cwd)
        .env("WEIR_ALLOW", "loopback")
        .output()
        .expect("run weir")
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("weir-cli-get-{tag}-{}", std::process::id()));
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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let s = Scratch::new("bad");
    let d = &s.0;
    fs::write(d.join("junk.torrent"), b"d4:infoi3ee").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["get", "missing.torrent"],
            "cannot read missing.torrent",
        ),
        (
            vec!["get", "junk.torrent"],
            "junk.torrent is not a usable torrent",
        ),
        (
            vec!["seed", "junk.torrent", "."],
            "junk.torrent is not a usable torrent",
        ),
        (
            vec!["--allow", "10.0.0.0/99", "get", "junk.torrent"],
            "--allow",
        ),
    ];
    for (args, want) in cases {
        let o = weir(&args, d);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    // A rate that is not one.
    let t = d.join("ok.torrent");
    fs::write(d.join("f.bin"), vec![7u8; 100_000]).unwrap();
    let o = weir(&["create", "f.bin", "-o", t.to_str().unwrap()], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = weir(
        &["get", "ok.torrent", "--max-down", "fast", "--no-trackers"],
        d,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-down"), "{}", stderr(&o));
}

#[test]
fn a_complete_download_restarts_complete_from_resume_data() {
    let s = Scratch::new("resume");
    let d = &s.0;
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
    fs::create_dir_all(d.join("src")).unwrap();
    fs::write(d.join("src/f.bin"), &data).unwrap();
    let o = weir(&["create", "src/f.bin", "-o", "f.torrent"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    // Seeding the source checks it (no resume journal yet) and completes at
    // once; `get` into the same directory then has nothing to fetch.
    let o = weir(
        &[
            "get",
            "f.torrent",
            "-o",
            "src",
            "--no-trackers",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The check left a journal: this run trusts it and fetches nothing
    // (there is no peer to fetch from).
    let journal = fs::read_dir(d.join("src"))
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().starts_with(".weir-resume-"));
    assert!(journal, "no resume journal written");
    let o = weir(
        &[
            "get",
            "f.torrent",
            "-o",
            "src",
            "--no-trackers",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(d.join("src/f.bin")).unwrap(), data);
}
