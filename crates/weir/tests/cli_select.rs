//! File selection as the built binary does it: `weir get --files` and a
//! magnet's BEP 53 `so=` fetch only the files asked for (and the boundary
//! bytes their pieces share with neighbours), create no other file, end
//! complete with exit 0, and a later run without a selection fetches the
//! rest keeping what was verified. Bad selections exit 2 naming what is
//! wrong. Seeders are local `weir seed` processes on loopback.

mod cli_support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use cli_support::*;

const T: Duration = Duration::from_secs(90);
const PIECE: usize = 16_384;

/// `src/set/{a,b,c}.bin` (100,000, 50,000 and 200,000 bytes) and
/// `set.torrent` of them in 16 KiB pieces: piece 6 holds the end of a.bin
/// and the start of b.bin, piece 9 the end of b.bin and the start of c.bin.
fn set(d: &Path) -> Vec<Vec<u8>> {
    fs::create_dir_all(d.join("src/set")).unwrap();
    let files = vec![
        payload(100_000, 11),
        payload(50_000, 12),
        payload(200_000, 13),
    ];
    for (name, data) in ["a.bin", "b.bin", "c.bin"].iter().zip(&files) {
        fs::write(d.join("src/set").join(name), data).unwrap();
    }
    create(d, "src/set", "set.torrent", "16KiB");
    files
}

fn get(d: &Path, source: &str, out: &str, peer: std::net::SocketAddr, extra: &[&str]) -> Ran {
    let peer = peer.to_string();
    let mut args = vec![
        "get",
        source,
        "-o",
        out,
        "--peer",
        &peer,
        "--no-trackers",
        "--no-dht",
        "--listen",
        "127.0.0.1:0",
        "-q",
    ];
    args.extend_from_slice(extra);
    run(d, &args, T)
}

#[test]
fn files_selects_what_is_fetched_and_a_later_run_fetches_the_rest() {
    let s = TempDir::new("cli-select").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-select-logs").unwrap();
    let files = set(d);
    let (_seed, addr) = seeder(d, "set.torrent", "src", logs.path(), &[]);
    let r = get(d, "set.torrent", "dl", addr, &["--files", "2"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.contains("fetching 1 of 3 files"), "{}", r.stderr);
    assert_eq!(fs::read(d.join("dl/set/c.bin")).unwrap(), files[2]);
    assert!(
        !d.join("dl/set/a.bin").exists(),
        "a deselected file sharing no piece was created"
    );
    // b.bin shares piece 9 with c.bin: its last bytes are there, the rest
    // is sparse (zeros), never "complete".
    let b = fs::read(d.join("dl/set/b.bin")).unwrap();
    assert_eq!(b.len(), 50_000);
    let from = 9 * PIECE - 100_000;
    assert_eq!(b[from..], files[1][from..]);
    assert_ne!(b, files[1]);
    // The whole torrent now: a.bin and the rest of b.bin come, c.bin is
    // trusted from the journal.
    let r = get(d, "set.torrent", "dl", addr, &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    for (name, data) in ["a.bin", "b.bin", "c.bin"].iter().zip(&files) {
        assert_eq!(
            &fs::read(d.join("dl/set").join(name)).unwrap(),
            data,
            "{name}"
        );
    }
}

#[test]
fn a_magnet_s_so_selects_its_files() {
    let s = TempDir::new("cli-select-so").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-select-so-logs").unwrap();
    let files = set(d);
    let (_seed, addr) = seeder(d, "set.torrent", "src", logs.path(), &[]);
    let meta =
        weir_bt::metainfo::Metainfo::from_bytes(&fs::read(d.join("set.torrent")).unwrap()).unwrap();
    let hex: String = meta.info_hash.iter().map(|b| format!("{b:02x}")).collect();
    // File 0 and an index past the last (ignored, as BEP 53 says, and
    // said).
    let magnet = format!("magnet:?xt=urn:btih:{hex}&x.pe={addr}&so=0,7");
    let r = get(d, &magnet, "dl", addr, &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.contains("7 ignored"), "{}", r.stderr);
    assert_eq!(fs::read(d.join("dl/set/a.bin")).unwrap(), files[0]);
    assert!(!d.join("dl/set/c.bin").exists(), "c.bin was created");
    // `--files` replaces `so=`.
    let r = get(d, &magnet, "dl2", addr, &["--files", "1"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(fs::read(d.join("dl2/set/b.bin")).unwrap(), files[1]);
}

#[test]
fn bad_selections_exit_2_naming_the_problem() {
    let s = TempDir::new("cli-select-bad").unwrap();
    let d = s.path();
    set(d);
    let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--files", "3"],
            "has 3 files (numbered from 0), so there is no file 3",
        ),
        (&["--files", "1-x"], "expected file indices like 0,2,4-6"),
        (&["--files", "2-1"], "a range ends before it starts"),
        (
            &["--files", "0", "set.torrent"],
            "exactly one torrent or magnet (2 given)",
        ),
    ];
    for (extra, want) in cases {
        let r = get(d, "set.torrent", "dl", addr, extra);
        assert_eq!(r.code, Some(2), "{extra:?}: {r:?}");
        assert!(r.stderr.contains(want), "{extra:?}: {}", r.stderr);
    }
    assert!(
        !d.join("dl").exists(),
        "a refused run created its directory"
    );
}
