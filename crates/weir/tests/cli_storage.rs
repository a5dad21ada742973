//! The download directory as the built binary treats it (issue 8, defects
//! 7 to 10): links are never followed, files weir did not create are
//! verified and never overwritten, a damaged or outdated journal costs a
//! recheck and never trust, `weir seed` never turns into a download, one
//! process per download, and no download starts without room for it.
//! Every run has a timeout; seeders are local `weir seed` processes.

mod cli_support;

use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::Path;
use std::time::Duration;

use cli_support::*;

const T: Duration = Duration::from_secs(90);

fn hex16(torrent: &Path) -> String {
    let m = weir_bt::metainfo::Metainfo::from_bytes(&fs::read(torrent).unwrap()).unwrap();
    m.info_hash
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn addr(a: std::net::SocketAddr) -> String {
    a.to_string()
}

#[test]
fn downloads_refuse_links_and_touch_nothing_outside() {
    let s = TempDir::new("cli-links").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-links-logs").unwrap();
    fs::create_dir_all(d.join("src/set")).unwrap();
    fs::write(d.join("src/payload.bin"), payload(300_000, 1)).unwrap();
    fs::write(d.join("src/set/a.bin"), payload(100_000, 2)).unwrap();
    fs::write(d.join("src/set/b.bin"), payload(50_000, 3)).unwrap();
    create(d, "src/payload.bin", "one.torrent", "16KiB");
    create(d, "src/set", "set.torrent", "16KiB");
    let (_s1, one) = seeder(d, "one.torrent", "src", logs.path(), &[]);
    let (_s2, set) = seeder(d, "set.torrent", "src", logs.path(), &[]);
    fs::create_dir_all(d.join("outside")).unwrap();
    let target = d.join("outside/target");
    let journal = format!(".weir-resume-{}", hex16(&d.join("one.torrent")));
    // (download dir, link in it, where it points, torrent, seeder)
    let cases = [
        (
            "a",
            "payload.bin".to_string(),
            "../outside/target",
            "one.torrent",
            one,
        ),
        ("b", "set".to_string(), "../outside", "set.torrent", set),
        ("c", journal, "../outside/target", "one.torrent", one),
    ];
    for (dl, link, to, torrent, peer) in cases {
        fs::write(&target, b"precious").unwrap();
        fs::create_dir_all(d.join(dl)).unwrap();
        symlink(to, d.join(dl).join(&link)).unwrap();
        let r = run(
            d,
            &[
                "get",
                torrent,
                "-o",
                dl,
                "--peer",
                &addr(peer),
                "--no-trackers",
                "--listen",
                "127.0.0.1:0",
                "-q",
            ],
            T,
        );
        assert_eq!(r.code, Some(2), "{dl}: {r:?}");
        assert!(
            r.stderr.contains(&format!("{dl}/{link}")) && r.stderr.contains("symbolic link"),
            "{dl}: {}",
            r.stderr
        );
        assert_eq!(
            fs::read(&target).unwrap(),
            b"precious",
            "{dl}: the link's target changed"
        );
        assert_eq!(
            fs::read_dir(d.join("outside")).unwrap().count(),
            1,
            "{dl}: files appeared outside"
        );
    }
}

#[test]
fn files_weir_did_not_create_are_verified_never_overwritten() {
    let s = TempDir::new("cli-existing").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-existing-logs").unwrap();
    // A torrent named `.ssh` fetched with -o from a home directory.
    fs::create_dir_all(d.join("src/.ssh")).unwrap();
    fs::write(
        d.join("src/.ssh/authorized_keys"),
        b"ssh-ed25519 AAAAevil evil@attacker\n",
    )
    .unwrap();
    create(d, "src/.ssh", "ssh.torrent", "16KiB");
    fs::create_dir_all(d.join("home/.ssh")).unwrap();
    let mine = b"ssh-ed25519 AAAAmine mine@my-host1\n";
    assert_eq!(mine.len(), 35);
    fs::write(d.join("home/.ssh/authorized_keys"), mine).unwrap();
    let (_s1, ssh) = seeder(d, "ssh.torrent", "src", logs.path(), &[]);
    let get = |t: &str, out: &str, peer: std::net::SocketAddr, extra: &[&str]| {
        let p = addr(peer);
        let mut a = vec![
            "get",
            t,
            "-o",
            out,
            "--peer",
            &p,
            "--no-trackers",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ];
        a.extend_from_slice(extra);
        run(d, &a, T)
    };
    let r = get("ssh.torrent", "home", ssh, &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("home/.ssh/authorized_keys") && r.stderr.contains("--overwrite"),
        "{}",
        r.stderr
    );
    assert_eq!(fs::read(d.join("home/.ssh/authorized_keys")).unwrap(), mine);

    // Older, longer files of the same names: refused, then --overwrite
    // leaves exactly the torrent's sizes.
    fs::create_dir_all(d.join("src/set")).unwrap();
    fs::write(d.join("src/set/x.txt"), b"hello, world\n").unwrap();
    fs::write(d.join("src/set/y.txt"), payload(40_000, 9)).unwrap();
    create(d, "src/set", "set.torrent", "16KiB");
    let (_s2, set) = seeder(d, "set.torrent", "src", logs.path(), &[]);
    fs::create_dir_all(d.join("old/set")).unwrap();
    fs::write(d.join("old/set/x.txt"), b"hello, world!!\n").unwrap();
    let r = get("set.torrent", "old", set, &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("old/set/x.txt") && r.stderr.contains("15 bytes"),
        "{}",
        r.stderr
    );
    assert_eq!(
        fs::read(d.join("old/set/x.txt")).unwrap(),
        b"hello, world!!\n"
    );
    let r = get("set.torrent", "old", set, &["--overwrite"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(
        fs::read(d.join("old/set/x.txt")).unwrap(),
        b"hello, world\n"
    );
    assert_eq!(
        fs::read(d.join("old/set/y.txt")).unwrap(),
        payload(40_000, 9)
    );
}

/// A killed download's journal with one stray byte: the old format read
/// every later record shifted and trusted pieces nobody fetched (zeros).
#[test]
fn a_garbled_journal_costs_a_recheck_never_trust() {
    let s = TempDir::new("cli-garbled").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-garbled-logs").unwrap();
    let data = payload(16 << 20, 4);
    fs::create_dir_all(d.join("src")).unwrap();
    fs::write(d.join("src/f.bin"), &data).unwrap();
    create(d, "src/f.bin", "f.torrent", "16KiB");
    let (_seed, peer) = seeder(d, "f.torrent", "src", logs.path(), &[]);
    let p = addr(peer);
    let base = [
        "get",
        "f.torrent",
        "-o",
        "dl",
        "--peer",
        &p,
        "--no-trackers",
        "--listen",
        "127.0.0.1:0",
        "-q",
    ];
    let mut first = base.to_vec();
    first.extend_from_slice(&["--sequential", "--max-down", "4MB/s"]);
    let mut leech = spawn("leech", d, &first, logs.path());
    // Killed once about 3 MiB (of 1,024 pieces) is on disk.
    let deadline = std::time::Instant::now() + T;
    while fs::metadata(d.join("dl/f.bin")).map_or(0, |m| m.blocks() * 512) < 3 << 20 {
        assert!(
            std::time::Instant::now() < deadline && leech.is_running(),
            "{}",
            leech.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    kill9(&mut leech);
    let jpath = d.join(format!("dl/.weir-resume-{}", hex16(&d.join("f.torrent"))));
    let mut j = fs::read(&jpath).unwrap();
    // Right after the first 4-byte record of the old format (magic, id
    // length, 20-byte id: 32 bytes); in the new one, inside the header.
    j.insert(36, 0);
    fs::write(&jpath, &j).unwrap();
    let r = run(d, &base, T);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        fs::read(d.join("dl/f.bin")).unwrap() == data,
        "the download is not byte-identical"
    );
}

/// Files changed between runs are hashed again, not trusted: by `weir get`
/// (fetched again) and by `weir seed` (not offered).
#[test]
fn files_changed_since_the_journal_are_rehashed() {
    let s = TempDir::new("cli-changed").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-changed-logs").unwrap();
    let data = payload(4 << 20, 5);
    fs::create_dir_all(d.join("src")).unwrap();
    fs::write(d.join("src/f.bin"), &data).unwrap();
    create(d, "src/f.bin", "f.torrent", "16KiB");
    let (_seed, peer) = seeder(d, "f.torrent", "src", logs.path(), &[]);
    let p = addr(peer);
    let get = [
        "get",
        "f.torrent",
        "-o",
        "dl",
        "--peer",
        &p,
        "--no-trackers",
        "--listen",
        "127.0.0.1:0",
        "-q",
    ];
    assert_eq!(run(d, &get, T).code, Some(0));
    // One byte changed in piece 100: `weir get` fetches it again.
    let mut changed = data.clone();
    changed[100 * 16_384 + 7] ^= 0x40;
    fs::write(d.join("dl/f.bin"), &changed).unwrap();
    let r = run(d, &get, T);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        fs::read(d.join("dl/f.bin")).unwrap() == data,
        "the changed piece was trusted"
    );
    // And `weir seed` does not offer it.
    fs::write(d.join("dl/f.bin"), &changed).unwrap();
    let mut seed = spawn(
        "seed-changed",
        d,
        &[
            "seed",
            "f.torrent",
            "dl",
            "--listen",
            "127.0.0.1:0",
            "--no-trackers",
            "-q",
        ],
        logs.path(),
    );
    let line = wait_stderr(&mut seed, "seeding ", T);
    assert!(line.contains("seeding 255 of 256 pieces"), "{line}");
}

#[test]
fn seed_with_the_wrong_directory_is_refused_never_a_download() {
    let s = TempDir::new("cli-seed-dir").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-seed-dir-logs").unwrap();
    fs::create_dir_all(d.join("src/set")).unwrap();
    fs::write(d.join("src/set/a.bin"), payload(200_000, 6)).unwrap();
    fs::write(d.join("src/set/b.bin"), payload(100_000, 7)).unwrap();
    create(d, "src/set", "set.torrent", "16KiB");
    fs::create_dir_all(d.join("wrong")).unwrap();
    let r = run(
        d,
        &[
            "seed",
            "set.torrent",
            "wrong",
            "--listen",
            "127.0.0.1:0",
            "--no-trackers",
            "-q",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("nothing in wrong") && r.stderr.contains("2 of 2 files missing"),
        "{}",
        r.stderr
    );
    assert_eq!(
        fs::read_dir(d.join("wrong")).unwrap().count(),
        0,
        "files were created"
    );
    let r = run(
        d,
        &["seed", "set.torrent", "nowhere", "--no-trackers", "-q"],
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(!d.join("nowhere").exists());
    // Part of the data: seeded as far as it verifies, and said.
    fs::create_dir_all(d.join("part/set")).unwrap();
    fs::copy(d.join("src/set/a.bin"), d.join("part/set/a.bin")).unwrap();
    let mut p = spawn(
        "seed-part",
        d,
        &[
            "seed",
            "set.torrent",
            "part",
            "--listen",
            "127.0.0.1:0",
            "--no-trackers",
            "-q",
        ],
        logs.path(),
    );
    let line = wait_stderr(&mut p, "seeding ", T);
    // a.bin is 200,000 bytes: 12 whole pieces of 16 KiB (the 13th is shared with b.bin).
    assert!(
        line.contains("seeding 12 of 19 pieces") && line.contains("missing: set/b.bin"),
        "{line}"
    );
    assert!(!d.join("part/set/b.bin").exists());
}

#[test]
fn a_second_process_on_the_same_download_is_refused() {
    let s = TempDir::new("cli-lock").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-lock-logs").unwrap();
    fs::create_dir_all(d.join("src")).unwrap();
    fs::write(d.join("src/f.bin"), payload(100_000, 8)).unwrap();
    create(d, "src/f.bin", "f.torrent", "16KiB");
    // No peer: the first waits for one.
    let args = [
        "get",
        "f.torrent",
        "-o",
        "dl",
        "--no-trackers",
        "--listen",
        "127.0.0.1:0",
        "-q",
    ];
    let mut first = spawn("first", d, &args, logs.path());
    wait_stderr(&mut first, "listening on", T);
    let r = run(d, &args, T);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("already in use") && r.stderr.contains(&format!("pid {}", first.pid())),
        "{}",
        r.stderr
    );
    assert!(first.is_running());
}

#[test]
fn no_download_starts_without_room_for_it() {
    let s = TempDir::new("cli-space").unwrap();
    let d = s.path();
    // 16 TiB in 64 MiB pieces (the hashes do not matter: it never starts).
    let len = 1u64 << 44;
    let mut b = weir_bt::create::TorrentBuilder::single_file("huge.bin", len, 64 << 20);
    b.pieces(vec![[7u8; 20]; 1 << 18]);
    fs::write(d.join("huge.torrent"), b.build().unwrap().bytes).unwrap();
    let r = run(
        d,
        &[
            "get",
            "huge.torrent",
            "-o",
            "dl",
            "--no-trackers",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ],
        T,
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("not enough space") && r.stderr.contains("--no-space-check"),
        "{}",
        r.stderr
    );
    assert!(!d.join("dl/huge.bin").exists());
}
