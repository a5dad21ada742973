//! Debian's `transmission-remote` against the real `weir daemon` in a
//! network namespace the test creates (only `lo`): add a torrent, list it,
//! see it complete byte-identical from a libtorrent seeder, stop and start
//! it, verify it after damaging a byte, set a cap, remove it with its data, stop the daemon with SIGTERM;
//! a damaged state file refused at start; and 600 transfers held under a
//! hard limit of 256 descriptors.
//!
//! Without root or the programs the tests skip, unless `CI` is set: then
//! they fail.

mod daemon_support;

use std::time::Duration;

use daemon_support::*;
use weir_lab::{Netns, TempDir, payload};

#[test]
fn transmission_remote_drives_a_download_from_a_libtorrent_seeder() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmremote")?;
    let dir = TempDir::new("daemon-remote")?;
    let data = dir.subdir("data")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let size: u64 = 24 << 20;
    let torrent = file_and_torrent(&data, "movie.bin", size, 7)?;
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon",
        &["--no-trackers"],
    )?;
    let _seed = seeder(&ns, &torrent, &data, "127.0.0.1:6881", None, true)?;

    let out = remote(&ns, &["-a", torrent.to_str().unwrap()])?;
    assert!(out.contains("responded: \"success\""), "{out}");
    // The same torrent again: a duplicate, not a second transfer.
    remote(&ns, &["-a", torrent.to_str().unwrap()])?;
    let list = remote(&ns, &["-l"])?;
    let row = list_row(&list, 1).unwrap_or_else(|| panic!("no row 1:\n{list}"));
    assert_eq!(row.last().map(String::as_str), Some("movie.bin"), "{list}");
    assert!(list_row(&list, 2).is_none(), "{list}");

    let t = wait_for(
        &ns,
        &["id", "percentDone", "haveValid", "status"],
        Duration::from_secs(120),
        "download complete",
        |t| t.len() == 1 && num(&t[0], "haveValid") == size,
    )?;
    assert_eq!(num(&t[0], "id"), 1);
    payload::files_equal(&data.join("movie.bin"), &downloads.join("movie.bin"))?;

    let list = remote(&ns, &["-l"])?;
    let row = list_row(&list, 1).unwrap_or_else(|| panic!("no row 1:\n{list}"));
    assert_eq!(row[1], "100%", "{list}");
    let info = remote(&ns, &["-t", "1", "-i"])?;
    for want in [
        "  Name: movie.bin",
        "  Percent Done: 100%",
        "  Total size: 25.17 MB (25.17 MB wanted)",
        &format!("  Location: {}", downloads.display()),
    ] {
        assert!(info.contains(want), "missing {want:?} in:\n{info}");
    }
    // Downloaded this run: the whole file, not much more.
    let got = torrents(&ns, &["downloadedEver"])?;
    let down = num(&got[0], "downloadedEver");
    assert!(
        (size..size + (2 << 20)).contains(&down),
        "downloadedEver {down} for {size}"
    );

    // Stop, start: the status follows (0 stopped, 6 seeding).
    remote(&ns, &["-t", "1", "-S"])?;
    wait_for(&ns, &["status"], Duration::from_secs(10), "stopped", |t| {
        num(&t[0], "status") == 0
    })?;
    let list = remote(&ns, &["-l"])?;
    assert!(list.contains("Stopped"), "{list}");
    remote(&ns, &["-t", "1", "-s"])?;
    wait_for(&ns, &["status"], Duration::from_secs(10), "seeding", |t| {
        num(&t[0], "status") == 6
    })?;

    // Damage one byte on disk: torrent-verify finds the piece bad (256 KiB
    // pieces), the rest stays verified.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(downloads.join("movie.bin"))?;
        let mut b = [0u8; 1];
        f.read_at(&mut b, 5 << 20)?;
        f.write_at(&[b[0] ^ 0xff], 5 << 20)?;
        f.sync_all()?;
    }
    remote(&ns, &["-t", "1", "--verify"])?;
    let t = wait_for(
        &ns,
        &["haveValid", "status"],
        Duration::from_secs(30),
        "verified again",
        |t| num(&t[0], "status") != 2 && num(&t[0], "haveValid") < size,
    )?;
    assert_eq!(num(&t[0], "haveValid"), size - (256 << 10), "{t:?}");

    // A session cap, read back.
    remote(&ns, &["-d", "250"])?;
    let si = remote(&ns, &["-si"])?;
    assert!(si.contains("Download speed limit: 250 kB/s"), "{si}");
    assert!(
        si.contains(&format!("Download directory: {}", downloads.display())),
        "{si}"
    );
    assert!(si.contains("Listenport: 6881"), "{si}");

    // Removed with its data: gone from the list, the disk and the state.
    let copy = state.join("torrents");
    assert_eq!(std::fs::read_dir(&copy)?.count(), 1);
    remote(&ns, &["-t", "1", "--remove-and-delete"])?;
    let list = remote(&ns, &["-l"])?;
    assert!(list_row(&list, 1).is_none(), "{list}");
    assert!(!downloads.join("movie.bin").exists());
    let left: Vec<_> = std::fs::read_dir(&downloads)?.collect();
    assert!(left.is_empty(), "left in the download directory: {left:?}");
    assert_eq!(std::fs::read_dir(&copy)?.count(), 0);
    let st = weir_daemon::engine::store::read(&state)?;
    assert!(st.transfers.is_empty(), "{st:?}");

    // SIGTERM: a clean stop, 143 as every weir command.
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}

#[test]
fn session_get_reports_the_dht_and_the_daemon_keeps_its_table() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmdht")?;
    let dir = TempDir::new("daemon-dht")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.subdir("state")?;
    let logs = dir.subdir("logs")?;
    // With a DHT (bootstrapped from a node that is not there: loopback only).
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon-dht",
        &["--dht-bootstrap", "127.0.0.9:6881"],
    )?;
    let s = rpc(&ns, "session-get", serde_json::json!({}))?;
    assert_eq!(s["dht-enabled"], serde_json::json!(true), "{s}");
    // A session-set cannot turn it off behind the engine's back.
    rpc(
        &ns,
        "session-set",
        serde_json::json!({"dht-enabled": false}),
    )?;
    let s = rpc(&ns, "session-get", serde_json::json!({}))?;
    assert_eq!(s["dht-enabled"], serde_json::json!(true), "{s}");
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    let table = std::fs::read(state.join("dht.table"))?;
    assert!(
        table.starts_with(b"d") && table.ends_with(b"e"),
        "{table:?}"
    );
    // --no-dht: off.
    let mut daemon = Daemon::start(&ns, &downloads, &state, &logs, "weir-daemon-nodht", &[])?;
    let s = rpc(&ns, "session-get", serde_json::json!({}))?;
    assert_eq!(s["dht-enabled"], serde_json::json!(false), "{s}");
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}

#[test]
fn a_damaged_state_file_is_refused_naming_it() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmstate")?;
    let dir = TempDir::new("daemon-state")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.subdir("state")?;
    let logs = dir.subdir("logs")?;
    // A state with one transfer, then cut short as a torn copy would be.
    let mut daemon = Daemon::start(&ns, &downloads, &state, &logs, "weir-daemon-1", &[])?;
    remote(
        &ns,
        &[
            "-a",
            "ed2k://|file|a.bin|1000000|D3B6B09D73D3FE0DD41DDE5ED244215A|/",
        ],
    )?;
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    let file = state.join("transfers.state");
    let good = std::fs::read(&file)?;
    // A clean stop leaves the state in the snapshot.
    assert!(good.starts_with(b"weir-daemon-state 2 "));
    std::fs::write(&file, &good[..good.len() - 5])?;
    let mut cmd = ns.command(WEIR);
    cmd.env("WEIR_ED2K_HOME", &logs)
        .args([
            "--allow",
            "127.0.0.0/8",
            "daemon",
            "--rpc",
            RPC,
            "--listen",
            PEERS,
        ])
        .arg("--download-dir")
        .arg(&downloads)
        .arg("--state")
        .arg(&state);
    let out = weir_lab::process::run(&mut cmd, Duration::from_secs(30))?;
    let err = out.stderr_text();
    assert_eq!(out.code(), Some(2), "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains("torn or truncated"), "{err}");
    // Nothing was rewritten over it.
    assert_eq!(std::fs::read(&file)?, &good[..good.len() - 5]);
    Ok(())
}

#[test]
fn sighup_reloads_the_config_caps_and_session_close_exits_0() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmhup")?;
    let dir = TempDir::new("daemon-hup")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let config = dir.path().join("settings.json");
    std::fs::write(
        &config,
        r#"{"speed-limit-down": 300, "speed-limit-down-enabled": true, "rpc-port": 9091}"#,
    )?;
    let cfg = config.to_str().unwrap();
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon",
        &["--no-trackers", "--config", cfg],
    )?;
    let si = remote(&ns, &["-si"])?;
    assert!(si.contains("Download speed limit: 300 kB/s"), "{si}");
    assert!(si.contains("Upload speed limit: Unlimited"), "{si}");

    std::fs::write(
        &config,
        r#"{"speed-limit-down": 700, "speed-limit-down-enabled": true, "speed-limit-up": 50}"#,
    )?;
    daemon.proc.signal(nix::sys::signal::Signal::SIGHUP)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let si = loop {
        let si = remote(&ns, &["-si"])?;
        if si.contains("Download speed limit: 700 kB/s") || std::time::Instant::now() > deadline {
            break si;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(si.contains("Download speed limit: 700 kB/s"), "{si}");
    assert!(si.contains("Upload speed limit: 50 kB/s"), "{si}");

    // A bad file on reload: the settings in force stay, the daemon runs.
    std::fs::write(&config, b"{ not json")?;
    daemon.proc.signal(nix::sys::signal::Signal::SIGHUP)?;
    let si = remote(&ns, &["-si"])?;
    assert!(si.contains("Download speed limit: 700 kB/s"), "{si}");

    // session-close over RPC: a clean stop with exit 0.
    rpc(&ns, "session-close", serde_json::json!({}))?;
    let Some((status, _)) = daemon.proc.wait_timeout(Duration::from_secs(30))? else {
        anyhow::bail!("still running 30 s after session-close");
    };
    assert_eq!(status.code(), Some(0), "{}", daemon.proc.log_tail(20));
    let log = std::fs::read_to_string(daemon.proc.stderr_log().expect("logged"))?;
    assert!(log.contains("the settings in force stay"), "{log}");
    Ok(())
}

#[test]
fn an_ed2k_link_added_over_rpc_downloads_and_bad_adds_are_refused() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmed2k")?;
    let dir = TempDir::new("daemon-ed2k")?;
    let data = dir.subdir("data")?;
    let home = dir.subdir("seed-home")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    // Two eD2k parts (9,728,000 bytes each) and a bit.
    let size: u64 = 20_000_000;
    payload::write_tree(&data, &[("show.mkv", size)], 5)?;
    let (_seed, link) = ed2k_seed(&ns, &home, &data.join("show.mkv"), "127.0.0.4:4662")?;
    let hash = link
        .split('|')
        .nth(4)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    assert_eq!(hash.len(), 32, "{link}");
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon",
        &["--no-trackers"],
    )?;

    let out = remote(&ns, &["-a", &link])?;
    assert!(out.contains("responded: \"success\""), "{out}");
    let t = wait_for(
        &ns,
        &["id", "name", "hashString", "totalSize", "haveValid"],
        Duration::from_secs(120),
        "eD2k download complete",
        |t| t.len() == 1 && num(&t[0], "haveValid") == size,
    )?;
    assert_eq!(t[0]["hashString"], hash.as_str());
    assert_eq!(t[0]["name"], "show.mkv");
    assert_eq!(num(&t[0], "totalSize"), size);
    payload::files_equal(&data.join("show.mkv"), &downloads.join("show.mkv"))?;
    let list = remote(&ns, &["-l"])?;
    let row = list_row(&list, 1).unwrap_or_else(|| panic!("no row 1:\n{list}"));
    assert_eq!(row[1], "100%", "{list}");

    // What cannot be added says why, and adds nothing.
    let refused = |args: serde_json::Value| -> String {
        match rpc(&ns, "torrent-add", args) {
            Ok(v) => panic!("accepted: {v}"),
            Err(e) => e.to_string(),
        }
    };
    let e = refused(serde_json::json!({ "metainfo": "bm90IGEgdG9ycmVudA==" }));
    assert!(e.contains("invalid or corrupt torrent file"), "{e}");
    let e = refused(serde_json::json!({ "filename": "magnet:?dn=no-hash" }));
    assert!(e.contains("bad magnet link"), "{e}");
    let e = refused(serde_json::json!({ "filename": "ed2k://|file|x|12|nothex|/" }));
    assert!(e.contains("ed2k"), "{e}");
    let e = refused(serde_json::json!({ "filename": "/nonexistent/x.torrent" }));
    assert!(e.contains("/nonexistent/x.torrent"), "{e}");
    let e = refused(serde_json::json!({
        "filename": link.replace("show.mkv", "other.mkv").replace(&hash.to_ascii_uppercase(), &"0".repeat(32)),
        "download-dir": "relative/dir",
    }));
    assert!(e.contains("not absolute"), "{e}");
    assert_eq!(torrents(&ns, &["id"])?.len(), 1);
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}

/// `data/set/{a,b,c}.bin` and a torrent of them in 256 KiB pieces: a.bin
/// is pieces 0-1, b.bin 2-5, c.bin piece 6, so no file shares a piece.
/// The torrent and the three sizes.
fn three_files(
    data: &std::path::Path,
    seed: u64,
) -> anyhow::Result<(std::path::PathBuf, (u64, u64, u64))> {
    let piece = 256u64 << 10;
    let (a, b, c) = (2 * piece, 4 * piece, 100_000);
    let torrent = tree_and_torrent(
        data,
        "set",
        &[("set/a.bin", a), ("set/b.bin", b), ("set/c.bin", c)],
        seed,
        None,
    )?;
    Ok((torrent, (a, b, c)))
}

#[test]
fn files_unwanted_are_not_fetched_kept_across_a_restart_and_fetched_once_wanted()
-> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmselect")?;
    let dir = TempDir::new("daemon-select")?;
    let data = dir.subdir("data")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let (torrent, (a, b, c)) = three_files(&data, 21)?;
    let piece = 256u64 << 10;
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon",
        &["--no-trackers"],
    )?;
    let _seed = seeder(&ns, &torrent, &data, "127.0.0.1:6881", None, true)?;
    // As a remote's add dialog with a file unticked sends it.
    rpc(
        &ns,
        "torrent-add",
        serde_json::json!({ "filename": torrent.to_str().unwrap(), "files-unwanted": [1] }),
    )?;
    let fields = [
        "id",
        "sizeWhenDone",
        "leftUntilDone",
        "totalSize",
        "wanted",
        "percentDone",
        "status",
    ];
    let t = wait_for(
        &ns,
        &fields,
        Duration::from_secs(120),
        "the wanted files complete",
        |t| t.len() == 1 && num(&t[0], "leftUntilDone") == 0 && num(&t[0], "sizeWhenDone") > 0,
    )?;
    assert_eq!(num(&t[0], "sizeWhenDone"), a + c, "{t:?}");
    assert_eq!(num(&t[0], "totalSize"), a + b + c);
    assert_eq!(t[0]["wanted"], serde_json::json!([1, 0, 1]));
    payload::files_equal(&data.join("set/a.bin"), &downloads.join("set/a.bin"))?;
    payload::files_equal(&data.join("set/c.bin"), &downloads.join("set/c.bin"))?;
    assert!(
        !downloads.join("set/b.bin").exists(),
        "an unwanted file sharing no piece was created"
    );
    let files = remote(&ns, &["-t", "1", "-f"])?;
    let b_row = files
        .lines()
        .find(|l| l.contains("set/b.bin"))
        .unwrap_or_else(|| panic!("no b.bin in:\n{files}"));
    assert!(b_row.contains(" No "), "{files}");

    // The selection is the transfer's: a restart keeps it.
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon-2",
        &["--no-trackers"],
    )?;
    let t = wait_for(
        &ns,
        &fields,
        Duration::from_secs(60),
        "back, done with the wanted files",
        |t| t.len() == 1 && num(&t[0], "sizeWhenDone") == a + c && num(&t[0], "leftUntilDone") == 0,
    )?;
    assert_eq!(t[0]["wanted"], serde_json::json!([1, 0, 1]));
    assert!(!downloads.join("set/b.bin").exists());

    // File priorities (`-ph`, `-pl`) show in `-f` and in torrent-get.
    remote(&ns, &["-t", "1", "-ph", "2"])?;
    remote(&ns, &["-t", "1", "-pl", "0"])?;
    wait_for(
        &ns,
        &["priorities"],
        Duration::from_secs(30),
        "the priorities set",
        |t| t.len() == 1 && t[0]["priorities"] == serde_json::json!([-1, 0, 1]),
    )?;
    let files = remote(&ns, &["-t", "1", "-f"])?;
    let row = |name: &str| {
        files
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{files}"))
            .to_owned()
    };
    assert!(row("set/a.bin").contains("Low"), "{files}");
    assert!(row("set/b.bin").contains("Normal"), "{files}");
    assert!(row("set/c.bin").contains("High"), "{files}");

    // Wanted now (`transmission-remote -g`): the transfer fetches it
    // without fetching again what it has.
    remote(&ns, &["-t", "1", "-g", "1"])?;
    let t = wait_for(
        &ns,
        &["leftUntilDone", "sizeWhenDone", "wanted", "downloadedEver"],
        Duration::from_secs(120),
        "the whole torrent complete",
        |t| num(&t[0], "sizeWhenDone") == a + b + c && num(&t[0], "leftUntilDone") == 0,
    )?;
    assert_eq!(t[0]["wanted"], serde_json::json!([1, 1, 1]));
    for f in ["set/a.bin", "set/b.bin", "set/c.bin"] {
        payload::files_equal(&data.join(f), &downloads.join(f))?;
    }
    let down = num(&t[0], "downloadedEver");
    assert!(
        down < a + b + c + 2 * piece,
        "downloadedEver {down}: fetched again what it had"
    );
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}

#[test]
fn a_magnet_s_so_selects_the_files_once_its_metadata_arrives() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmselso")?;
    let dir = TempDir::new("daemon-select-so")?;
    let data = dir.subdir("data")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let (torrent, (_, b, c)) = three_files(&data, 22)?;
    let hash = weir_lab::torrent::TorrentInfo::read(&torrent)?.info_hash_hex();
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon",
        &["--no-trackers"],
    )?;
    let _seed = weir_lab::bt::start_seed_with(
        &ns,
        &weir_lab::bt::Client::Libtorrent,
        &torrent,
        &data,
        "127.0.0.1:6881".parse()?,
        &weir_lab::bt::Options {
            dial: Some(PEERS.parse()?),
            extra_args: vec!["--ut-metadata".into()],
            ..weir_lab::bt::Options::default()
        },
    )?;
    // Files 1 and 2 (BEP 53 numbers from 0); 9 is past the files.
    let magnet = format!("magnet:?xt=urn:btih:{hash}&dn=set&x.pe=127.0.0.1:6881&so=1-2,9");
    let out = remote(&ns, &["-a", &magnet])?;
    assert!(out.contains("responded: \"success\""), "{out}");
    let t = wait_for(
        &ns,
        &["id", "sizeWhenDone", "leftUntilDone", "wanted"],
        Duration::from_secs(120),
        "the selected files complete",
        |t| {
            t.len() == 1
                && t[0]["wanted"] == serde_json::json!([0, 1, 1])
                && num(&t[0], "leftUntilDone") == 0
        },
    )?;
    assert_eq!(num(&t[0], "sizeWhenDone"), b + c, "{t:?}");
    payload::files_equal(&data.join("set/b.bin"), &downloads.join("set/b.bin"))?;
    payload::files_equal(&data.join("set/c.bin"), &downloads.join("set/c.bin"))?;
    assert!(
        !downloads.join("set/a.bin").exists(),
        "a file left out by so= was created"
    );
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}

/// Descriptors a daemon holds do not grow with its transfers: under a hard
/// limit of 256 descriptors it takes 600 torrents (each with its storage
/// open: journal, download lock) and lists them all without an error.
/// Each transfer held its own lock file before: 362 of the 600 failed with
/// "Too many open files", from the 238th on.
#[test]
fn a_daemon_under_a_low_descriptor_limit_holds_more_transfers_than_descriptors()
-> anyhow::Result<()> {
    if !ready()? || !weir_lab::ci::require_program("prlimit")? {
        return Ok(());
    }
    const N: usize = 600;
    let ns = Netns::new("dmfds")?;
    let dir = TempDir::new("daemon-fds")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let mut daemon = Daemon::start_under(
        &ns,
        &["prlimit", "--nofile=256:256"],
        &downloads,
        &state,
        &logs,
        "weir-daemon",
        &["--no-trackers"],
    )?;
    for (i, t) in weir_bench::daemon::make_torrents(N).iter().enumerate() {
        use base64::Engine as _;
        let meta = base64::engine::general_purpose::STANDARD.encode(t);
        let r = rpc(&ns, "torrent-add", serde_json::json!({ "metainfo": meta }))
            .map_err(|e| e.context(format!("adding torrent {i}")))?;
        assert!(r.get("torrent-added").is_some(), "torrent {i}: {r}");
    }
    let all = torrents(&ns, &["id", "error", "errorString", "status"])?;
    assert_eq!(all.len(), N);
    let failed: Vec<_> = all.iter().filter(|t| num(t, "error") != 0).collect();
    assert!(
        failed.is_empty(),
        "{} failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    let fds = std::fs::read_dir(format!("/proc/{}/fd", daemon.proc.pid()));
    // (The pid is `prlimit`'s, which execs weir: the same process.)
    let fds = fds?.count();
    assert!(fds < 64, "{fds} descriptors for {N} transfers");
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}
