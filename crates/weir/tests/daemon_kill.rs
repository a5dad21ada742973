//! kill -9 of the real `weir daemon` in the middle of two downloads (from
//! two libtorrent seeders in a namespace the test creates), restarted on
//! the same `--state`: both transfers are listed again with their ids,
//! names and settings (a paused one stays paused), the verified data is
//! kept (progress not below what RPC read before the kill), the rest is
//! fetched without fetching verified data again, and both end
//! byte-identical.
//!
//! Without root or the programs the test skips, unless `CI` is set: then
//! it fails.

mod daemon_support;

use std::time::Duration;

use daemon_support::*;
use weir_lab::bt::Tracker;
use weir_lab::torrent::TorrentInfo;
use weir_lab::{Netns, TempDir, payload};

const TRACKER: &str = "127.0.0.5:6969";

const FIELDS: &[&str] = &[
    "id",
    "name",
    "hashString",
    "haveValid",
    "totalSize",
    "downloadedEver",
    "status",
    "labels",
];

#[test]
fn killed_mid_download_the_daemon_resumes_both_transfers() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmkill")?;
    let dir = TempDir::new("daemon-kill")?;
    let data = dir.subdir("data")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let size: u64 = 32 << 20;
    // The daemon finds the seeders through a tracker, before and after
    // the restart (libtorrent waits a minute before it dials a peer that
    // went away again).
    let url = format!("http://{TRACKER}/announce");
    let a = file_and_torrent_with(&data, "a.bin", size, 11, Some(&url))?;
    // The second a folder of two files: per-file progress is read too.
    let b_files = [("b/x.bin", 20u64 << 20), ("b/y.bin", 12u64 << 20)];
    let b = tree_and_torrent(&data, "b", &b_files, 12, Some(&url))?;
    let hashes = [TorrentInfo::read(&a)?, TorrentInfo::read(&b)?].map(|i| i.info_hash_hex());
    let tracker = Tracker::start(&ns, TRACKER.parse()?, &hashes)?;
    // 4 MB/s each: about 8 s per file, time to kill in the middle.
    let cap = Some(4_000_000);
    let _sa = seeder(&ns, &a, &data, "127.0.0.1:6881", cap, false)?;
    let _sb = seeder(&ns, &b, &data, "127.0.0.3:6881", cap, false)?;
    for h in &hashes {
        tracker.wait_seeder(h, Duration::from_secs(30))?;
    }

    let mut daemon = Daemon::start(&ns, &downloads, &state, &logs, "weir-daemon-1", &[])?;
    remote(&ns, &["-a", a.to_str().unwrap()])?;
    remote(&ns, &["-a", b.to_str().unwrap()])?;
    let labels = rpc(
        &ns,
        "torrent-set",
        serde_json::json!({ "ids": [2], "labels": ["kept"] }),
    )?;
    assert!(labels.is_object(), "{labels}");
    // A third, paused: it must come back paused.
    let added = rpc(
        &ns,
        "torrent-add",
        serde_json::json!({
            "filename": "ed2k://|file|c.bin|5000000|D3B6B09D73D3FE0DD41DDE5ED244215A|/",
            "paused": true,
        }),
    )?;
    assert_eq!(added["torrent-added"]["id"], 3, "{added}");
    let before = wait_for(
        &ns,
        FIELDS,
        Duration::from_secs(90),
        "both a quarter done",
        |t| t.len() == 3 && t[..2].iter().all(|t| num(t, "haveValid") >= size / 4),
    )?;
    assert_eq!(num(&before[2], "status"), 0, "{:?}", before[2]);
    let t0 = std::time::Instant::now();
    // The files of the folder add up to what is verified.
    let files = torrents(&ns, &["id", "haveValid", "files"])?;
    let sum: u64 = files[1]["files"]
        .as_array()
        .map(|f| f.iter().map(|f| num(f, "bytesCompleted")).sum())
        .unwrap_or(0);
    assert!(
        sum >= num(&before[1], "haveValid") && sum <= num(&files[1], "haveValid"),
        "files of b: {sum} verified, the transfer {} then {}",
        num(&before[1], "haveValid"),
        num(&files[1], "haveValid")
    );
    daemon.kill9()?;
    // Traffic totals as last saved: what downloadedEver starts from.
    let saved = saved_downloaded(&state)?;
    for t in &before {
        let have = num(t, "haveValid");
        assert!(
            have < size,
            "{} completed before the kill: raise the size or lower the cap",
            t["name"]
        );
    }

    let mut daemon = Daemon::start(&ns, &downloads, &state, &logs, "weir-daemon-2", &[])?;
    // Listed again as they were: ids, names, hashes, labels.
    let after = wait_for(
        &ns,
        FIELDS,
        Duration::from_secs(60),
        "storage checked after the restart",
        // 2 = verifying: wait for both to be past their check.
        |t| t.len() == 3 && t.iter().all(|t| num(t, "status") != 2),
    )?;
    assert_eq!(
        num(&after[2], "status"),
        0,
        "the paused one: {:?}",
        after[2]
    );
    for (x, y) in before.iter().zip(&after) {
        for f in ["id", "name", "hashString", "totalSize", "labels"] {
            assert_eq!(x[f], y[f], "{f} changed over the restart");
        }
    }
    assert_eq!(after[1]["labels"], serde_json::json!(["kept"]));
    eprintln!(
        "checked after the restart: {:.1} s after the kill",
        t0.elapsed().as_secs_f64()
    );
    let list = remote(&ns, &["-l"])?;
    for (id, name) in [(1, "a.bin"), (2, "b")] {
        let row = list_row(&list, id).unwrap_or_else(|| panic!("no row {id}:\n{list}"));
        assert_eq!(row.last().map(String::as_str), Some(name), "{list}");
    }
    let restart_have: Vec<u64> = after[..2].iter().map(|t| num(t, "haveValid")).collect();
    for (x, have) in before.iter().zip(&restart_have) {
        let had = num(x, "haveValid");
        assert!(
            *have >= had,
            "{}: {have} verified after the restart, {had} before the kill",
            x["name"]
        );
    }

    let done = wait_for(
        &ns,
        FIELDS,
        Duration::from_secs(120),
        "both complete after the restart",
        |t| t.len() == 3 && t[..2].iter().all(|t| num(t, "haveValid") == size),
    )?;
    eprintln!(
        "complete {:.1} s after the kill",
        t0.elapsed().as_secs_f64()
    );
    for (((t, have), name), x) in done
        .iter()
        .zip(&restart_have)
        .zip(["a.bin", "b"])
        .zip(&before)
    {
        let fetched = num(t, "downloadedEver") - saved[&num(t, "id")];
        // What was verified when the run began lies between what RPC read
        // before the kill and what it read after the restart (downloading
        // may have begun before that read).
        let (had_then, had_after) = (num(x, "haveValid"), *have);
        // Blocks of pieces in flight at the kill come again; 1 MiB of
        // slack is four 256 KiB pieces.
        assert!(
            fetched >= size - had_after && fetched < size - had_then + (1 << 20),
            "{name}: fetched {fetched} after the restart; {had_then} verified before the \
             kill, {had_after} read after the restart"
        );
        if name == "b" {
            for (f, _) in b_files {
                payload::files_equal(&data.join(f), &downloads.join(f))?;
            }
        } else {
            payload::files_equal(&data.join(name), &downloads.join(name))?;
        }
        eprintln!(
            "{name}: {had_then} of {size} verified at the kill, {had_after} read after the restart, {fetched} fetched after it"
        );
    }
    // The daemon announced its completion: two seeders of each torrent.
    for h in &hashes {
        tracker.wait_seeders(h, Duration::from_secs(30), |n| n == 2)?;
    }
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    // SIGTERM announced `stopped`: the tracker forgot the daemon at once.
    for h in &hashes {
        assert_eq!(tracker.seeders(h)?, 1, "seeders of {h} after SIGTERM");
    }

    // A clean stop keeps the traffic totals: a third start reads them back,
    // both transfers complete and seeding (6) straight from their journals.
    let totals: Vec<u64> = done[..2].iter().map(|t| num(t, "downloadedEver")).collect();
    let mut daemon = Daemon::start(&ns, &downloads, &state, &logs, "weir-daemon-3", &[])?;
    let third = wait_for(
        &ns,
        FIELDS,
        Duration::from_secs(30),
        "seeding after a clean restart",
        |t| t.len() == 3 && t[..2].iter().all(|t| num(t, "status") == 6),
    )?;
    for (t, total) in third.iter().zip(&totals) {
        assert_eq!(num(t, "haveValid"), size);
        let d = num(t, "downloadedEver");
        assert!(
            (*total..total + (1 << 20)).contains(&d),
            "downloadedEver {d} after the clean restart, {total} before"
        );
    }
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}

/// `downloaded` of each transfer in a state file, by id.
fn saved_downloaded(
    state: &std::path::Path,
) -> anyhow::Result<std::collections::HashMap<u64, u64>> {
    // The snapshot and the log of changes since, as a restart reads them.
    let s = weir_daemon::engine::store::read(state)?;
    Ok(s.transfers.iter().map(|r| (r.id, r.downloaded)).collect())
}
