//! Transmission's clients against the real `weir daemon` (the engine
//! backend) in a namespace the test creates (only `lo`): the
//! transmission-rpc Python library adding by metainfo and by magnet (its
//! metadata and data from libtorrent seeders, byte-identical, the fetched
//! .torrent kept so a restart does not fetch it again); transmission-remote
//! setting a transfer's caps (obeyed), reading its peers, removing it, and
//! session settings that survive a restart; the web page in Chromium.
//!
//! Without root or the programs the tests skip, unless `CI` is set: then
//! they fail.

mod daemon_support;

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use daemon_support::*;
use serde_json::json;
use weir_lab::bt::{self, Client, Options};
use weir_lab::process::Proc;
use weir_lab::{Netns, TempDir, ci, payload};

/// A libtorrent seeder of `torrent` on `addr` that dials the daemon while
/// no peer is connected, with `extra` arguments (`--ut-metadata`).
fn lt_seeder(
    ns: &Netns,
    torrent: &Path,
    data: &Path,
    addr: &str,
    extra: &[&str],
) -> anyhow::Result<Proc> {
    let a: SocketAddrV4 = addr.parse().context("seeder address")?;
    bt::start_seed_with(
        ns,
        &Client::Libtorrent,
        torrent,
        data,
        a,
        &Options {
            dial: Some(PEERS.parse()?),
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            ..Options::default()
        },
    )
}

#[test]
fn transmission_rpc_adds_by_metainfo_and_by_magnet() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let probe = weir_lab::process::run(
        std::process::Command::new("python3").args(["-c", "import transmission_rpc"]),
        Duration::from_secs(30),
    )?;
    if !probe.success() {
        ci::unavailable("the transmission-rpc Python library is not installed")?;
        return Ok(());
    }
    let ns = Netns::new("dmpython")?;
    let dir = TempDir::new("daemon-python")?;
    let data = dir.subdir("data")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let (size, msize): (u64, u64) = (3 << 20, 5 << 20);
    let torrent = file_and_torrent(&data, "meta.bin", size, 11)?;
    let mtorrent = file_and_torrent(&data, "mag.bin", msize, 12)?;
    let minfo = weir_lab::torrent::TorrentInfo::read(&mtorrent)?;
    let mhash = minfo.info_hash_hex();
    let magnet = format!("magnet:?xt=urn:btih:{mhash}&dn=mag.bin&x.pe=127.0.0.3:6881");
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon-1",
        &["--no-trackers"],
    )?;
    let _seed = lt_seeder(&ns, &torrent, &data, "127.0.0.1:6881", &[])?;
    let mseed = lt_seeder(&ns, &mtorrent, &data, "127.0.0.3:6881", &["--ut-metadata"])?;

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/daemon_support/trpc_engine.py"
    );
    let mut c = ns.command("python3");
    let rpc: std::net::SocketAddr = RPC.parse()?;
    c.arg(script)
        .arg(rpc.ip().to_string())
        .arg(rpc.port().to_string())
        .arg(&downloads)
        .arg(&torrent)
        .args(["meta.bin", &size.to_string()])
        .args([magnet.as_str(), &mhash, "mag.bin", &msize.to_string()]);
    let out = weir_lab::process::run(&mut c, Duration::from_secs(90))?;
    let stdout = out.stdout_text();
    assert!(
        out.success() && stdout.lines().last() == Some("OK"),
        "python failed ({}):\n{stdout}\n{}\ndaemon:\n{}",
        out.status,
        out.stderr_text(),
        daemon.proc.log_tail(40)
    );
    payload::files_equal(&data.join("mag.bin"), &downloads.join("mag.bin"))?;
    assert!(
        !downloads.join("meta.bin").exists(),
        "removed with its data"
    );
    // The fetched metadata is kept; the record names the torrent, not the link.
    let kept = state.join("torrents").join(format!("{mhash}.torrent"));
    let kept_meta = weir_lab::torrent::TorrentInfo::read(&kept)?;
    assert_eq!(kept_meta.info_hash_hex(), mhash);
    let st = weir_daemon::engine::store::read(&state)?;
    use weir_daemon::engine::state::RecordSource;
    let sources: Vec<_> = st.transfers.iter().map(|r| &r.source).collect();
    assert!(
        !sources
            .iter()
            .any(|s| matches!(s, RecordSource::Magnet { .. })),
        "{st:?}"
    );
    let named = RecordSource::Torrent {
        info_hash: mhash.clone(),
    };
    assert!(sources.contains(&&named), "{st:?}");

    // Restarted with the seeder gone: the torrent is back complete at once,
    // its metadata read from the state, not fetched.
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    drop(mseed);
    let daemon2 = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon-2",
        &["--no-trackers"],
    )?;
    let t = wait_for(
        &ns,
        &[
            "id",
            "name",
            "totalSize",
            "haveValid",
            "metadataPercentComplete",
        ],
        Duration::from_secs(20),
        "the magnet's torrent back",
        |t| t.len() == 1 && num(&t[0], "haveValid") == msize,
    )?;
    assert_eq!(t[0]["name"], "mag.bin");
    assert_eq!(num(&t[0], "totalSize"), msize);
    let log = std::fs::read_to_string(daemon2.proc.stderr_log().context("logged")?)?;
    assert!(
        !log.contains("metadata arrived") && !log.contains("metadata: "),
        "fetched again:\n{log}"
    );
    Ok(())
}

#[test]
fn transmission_remote_caps_a_transfer_reads_its_peers_and_settings_persist() -> anyhow::Result<()>
{
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("dmcaps")?;
    let dir = TempDir::new("daemon-caps")?;
    let data = dir.subdir("data")?;
    let downloads = dir.subdir("downloads")?;
    let other = dir.subdir("other")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    let size: u64 = 6 << 20;
    let torrent = file_and_torrent(&data, "capped.bin", size, 21)?;
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon-1",
        &["--no-trackers"],
    )?;
    let _seed = lt_seeder(&ns, &torrent, &data, "127.0.0.1:6881", &[])?;
    // Added paused, capped before it starts.
    rpc(
        &ns,
        "torrent-add",
        json!({ "filename": torrent.to_str().unwrap(), "paused": true }),
    )?;
    remote(&ns, &["-t", "1", "-d", "400", "-u", "300"])?;
    let info = remote(&ns, &["-t", "1", "-i"])?;
    assert!(info.contains("  Download Limit: 400 kB/s"), "{info}");
    assert!(info.contains("  Upload Limit: 300 kB/s"), "{info}");
    remote(&ns, &["-t", "1", "-s"])?;
    let have = |ns: &Netns| -> anyhow::Result<u64> {
        Ok(num(
            &torrents(ns, &["downloadedEver"])?[0],
            "downloadedEver",
        ))
    };
    wait_for(
        &ns,
        &["downloadedEver"],
        Duration::from_secs(20),
        "data arriving",
        |t| num(&t[0], "downloadedEver") > 200_000,
    )?;
    let (t0, d0) = (Instant::now(), have(&ns)?);
    // The peer list while it downloads.
    let pi = remote(&ns, &["-t", "1", "-pi"])?;
    let row = pi
        .lines()
        .find(|l| l.starts_with("127.0.0.1"))
        .unwrap_or_else(|| panic!("no peer row in:\n{pi}"));
    assert!(row.contains("100.0"), "the seeder has everything: {row}");
    std::thread::sleep(Duration::from_secs(3));
    let rate = (have(&ns)? - d0) as f64 / t0.elapsed().as_secs_f64();
    assert!(
        (200_000.0..=500_000.0).contains(&rate),
        "{rate:.0} B/s under a 400 kB/s cap"
    );
    // Uncapped, it completes byte-identical.
    remote(&ns, &["-t", "1", "-D"])?;
    wait_for(
        &ns,
        &["haveValid"],
        Duration::from_secs(30),
        "complete",
        |t| num(&t[0], "haveValid") == size,
    )?;
    payload::files_equal(&data.join("capped.bin"), &downloads.join("capped.bin"))?;
    remote(&ns, &["-t", "1", "--reannounce"])?;

    // Session settings: caps and the download directory survive a restart.
    remote(&ns, &["-d", "300", "-u", "200"])?;
    rpc(
        &ns,
        "session-set",
        json!({
            "download-dir": other.to_str().unwrap(),
            "seedRatioLimit": 3.5,
            "seedRatioLimited": true,
        }),
    )?;
    // -r keeps the data.
    remote(&ns, &["-t", "1", "-r"])?;
    let list = remote(&ns, &["-l"])?;
    assert!(list_row(&list, 1).is_none(), "{list}");
    assert!(downloads.join("capped.bin").exists(), "-r keeps the data");
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon-2",
        &["--no-trackers"],
    )?;
    let si = remote(&ns, &["-si"])?;
    for want in [
        "  Download speed limit: 300 kB/s",
        "  Upload speed limit: 200 kB/s",
        &format!("  Download directory: {}", other.display()),
        "  Default seed ratio limit: 3.5",
    ] {
        assert!(si.contains(want), "missing {want:?} after a restart:\n{si}");
    }
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}

#[test]
fn the_web_page_in_chromium_on_the_engine() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let webtest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weir-daemon/webtest");
    for (what, ok) in [
        ("node", ci::find_program("node").is_some()),
        ("/usr/bin/chromium", Path::new("/usr/bin/chromium").exists()),
        (
            "playwright-core (npm ci in crates/weir-daemon/webtest)",
            webtest.join("node_modules/playwright-core").exists(),
        ),
    ] {
        if !ok {
            ci::unavailable(&format!("{what} is not installed"))?;
            return Ok(());
        }
    }
    let ns = Netns::new("dmweb")?;
    let dir = TempDir::new("daemon-web")?;
    let data = dir.subdir("data")?;
    let downloads = dir.subdir("downloads")?;
    let state = dir.path().join("state");
    let logs = dir.subdir("logs")?;
    // The uploaded torrent's data is already in the download directory: it
    // seeds, and removing it with its data deletes the file.
    let torrent = file_and_torrent(&data, "uploaded.bin", 400_000, 31)?;
    std::fs::copy(data.join("uploaded.bin"), downloads.join("uploaded.bin"))?;
    let mut daemon = Daemon::start(
        &ns,
        &downloads,
        &state,
        &logs,
        "weir-daemon",
        &["--no-trackers"],
    )?;
    for (name, hash) in [
        ("first.bin", "D3B6B09D73D3FE0DD41DDE5ED244215A"),
        ("second.bin", "0123456789ABCDEF0123456789ABCDEF"),
    ] {
        rpc(
            &ns,
            "torrent-add",
            json!({ "filename": format!("ed2k://|file|{name}|1000000|{hash}|/") }),
        )?;
    }
    let profile = dir.subdir("chromium-profile")?;
    let mut c = ns.command("node");
    c.arg(webtest.join("page.mjs"))
        .current_dir(&webtest)
        .env("WEIR_URL", format!("http://{RPC}/"))
        .env("WEIR_TORRENT", &torrent)
        .env("WEIR_TORRENT_NAME", "uploaded.bin")
        .env("WEIR_EXPECT_ROWS", "2")
        .env("WEIR_FIRST_NAME", "first.bin")
        .env("WEIR_FIRST_STATE", "Downloading")
        .env("WEIR_PROFILE", &profile)
        .env("HOME", dir.path());
    let out = weir_lab::process::run(&mut c, Duration::from_secs(120))?;
    let stdout = out.stdout_text();
    assert!(
        out.success() && stdout.lines().last() == Some("OK"),
        "the page test failed ({}):\n{stdout}\n{}",
        out.status,
        out.stderr_text()
    );
    // What the clicks did, read back over RPC.
    let t = torrents(&ns, &["id", "name", "status"])?;
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["name"], "second.bin");
    assert_eq!(num(&t[0], "status"), 0, "paused");
    assert!(!downloads.join("uploaded.bin").exists(), "data deleted");
    let s = rpc(&ns, "session-get", json!({}))?;
    assert_eq!(s["speed-limit-down"], 123);
    assert_eq!(s["speed-limit-down-enabled"], true);
    assert_eq!(s["speed-limit-up"], 45);
    assert_eq!(daemon.terminate(Duration::from_secs(30))?, 143);
    Ok(())
}
