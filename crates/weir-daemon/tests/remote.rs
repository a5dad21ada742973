//! Debian's `transmission-remote` (3.00) against the server with the fake
//! backend: each test checks what the client prints and what it did.

mod common;

use common::{Harness, make_torrent};
use weir_daemon::backend::{SpeedLimit, TransferState};

/// The `-l` row of transfer `id`: its columns split on runs of spaces.
fn list_row(list: &str, id: u64) -> Vec<String> {
    list.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cols| {
            cols.first()
                .is_some_and(|c| c.trim_end_matches('*') == id.to_string())
        })
        .unwrap_or_else(|| panic!("no row {id} in:\n{list}"))
}

#[test]
fn add_list_info_and_files() -> anyhow::Result<()> {
    let Some(h) = Harness::start("rpc-remote-add")? else {
        return Ok(());
    };
    let (single, single_info) = make_torrent(h.dir.path(), "single.bin", &[("", 3_000_000)])?;
    let (multi, _) = make_torrent(
        h.dir.path(),
        "multi",
        &[("a.txt", 100_000), ("b.txt", 200_000)],
    )?;
    let out = h.remote_ok(&[
        "-a",
        single.to_str().unwrap(),
        "-a",
        multi.to_str().unwrap(),
    ])?;
    assert_eq!(out.matches("responded: \"success\"").count(), 2, "{out}");
    assert_eq!(h.backend.len(), 2);
    // The same torrent again is a duplicate, not a second transfer.
    h.remote_ok(&["-a", single.to_str().unwrap()])?;
    assert_eq!(h.backend.len(), 2);

    h.backend.advance(1);
    let list = h.remote_ok(&["-l"])?;
    assert!(list.starts_with("    ID   Done       Have  ETA"), "{list}");
    let r1 = list_row(&list, 1);
    assert_eq!(r1[1], "33%", "{list}");
    assert_eq!(r1.last().unwrap(), "single.bin");
    assert!(list.contains("Downloading"), "{list}");
    let r2 = list_row(&list, 2);
    assert_eq!(r2.last().unwrap(), "multi");
    assert!(list.lines().last().unwrap().starts_with("Sum:"), "{list}");

    let info = h.remote_ok(&["-t", "1", "-i"])?;
    for want in [
        "  Id: 1",
        "  Name: single.bin",
        &format!("  Hash: {}", single_info.info_hash_hex()),
        &format!("  Location: {}", h.downloads().display()),
        "  Total size: 3.00 MB (3.00 MB wanted)",
        "  Piece Count: 46",
        "  Piece Size: 64.00 KiB",
        "  State: Downloading",
    ] {
        assert!(info.contains(want), "missing {want:?} in:\n{info}");
    }
    // By hash, as Sonarr and scripts do.
    let by_hash = h.remote_ok(&["-t", &single_info.info_hash_hex(), "-i"])?;
    assert!(by_hash.contains("  Name: single.bin"), "{by_hash}");

    let files = h.remote_ok(&["-t", "2", "-f"])?;
    assert!(files.starts_with("multi (2 files):"), "{files}");
    let a = files
        .lines()
        .find(|l| l.ends_with("multi/a.txt"))
        .unwrap_or_else(|| panic!("{files}"));
    assert!(
        a.contains("Normal") && a.contains("Yes") && a.contains("100.0 kB"),
        "{a}"
    );
    assert!(
        files
            .lines()
            .any(|l| l.ends_with("multi/b.txt") && l.contains("200.0 kB"))
    );
    Ok(())
}

#[test]
fn stop_start_remove_and_remove_with_data() -> anyhow::Result<()> {
    let Some(h) = Harness::start("rpc-remote-rm")? else {
        return Ok(());
    };
    let (one, _) = make_torrent(h.dir.path(), "one.bin", &[("", 200_000)])?;
    let (two, _) = make_torrent(h.dir.path(), "two.bin", &[("", 300_000)])?;
    h.remote_ok(&["-a", one.to_str().unwrap(), "-a", two.to_str().unwrap()])?;
    let data_one = h.downloads().join("one.bin");
    let data_two = h.downloads().join("two.bin");
    assert!(data_one.exists() && data_two.exists());

    h.remote_ok(&["-t", "1", "-S"])?;
    assert_eq!(h.backend.view(1).unwrap().state, TransferState::Stopped);
    let list = h.remote_ok(&["-l"])?;
    assert!(list_row(&list, 1).contains(&"Stopped".to_owned()), "{list}");
    assert!(
        !list_row(&list, 2).contains(&"Stopped".to_owned()),
        "{list}"
    );
    h.remote_ok(&["-t", "1", "-s"])?;
    assert_eq!(h.backend.view(1).unwrap().state, TransferState::Downloading);

    let out = h.remote_ok(&["-t", "1", "-r"])?;
    assert!(out.contains("responded: \"success\""), "{out}");
    assert!(h.backend.view(1).is_none());
    assert!(data_one.exists(), "-r must keep the data");
    h.remote_ok(&["-t", "2", "-rad"])?;
    assert!(h.backend.is_empty());
    assert!(!data_two.exists(), "-rad must delete the data");
    let list = h.remote_ok(&["-l"])?;
    assert_eq!(list.lines().count(), 2, "only the header and Sum: {list}");
    Ok(())
}

#[test]
fn speed_caps_session_info_and_stats() -> anyhow::Result<()> {
    let Some(h) = Harness::start("rpc-remote-caps")? else {
        return Ok(());
    };
    h.remote_ok(&["-d", "100"])?;
    h.remote_ok(&["-u", "200"])?;
    let s = h.backend.settings();
    assert_eq!(
        s.speed_limit_down,
        SpeedLimit {
            kbps: 100,
            enabled: true
        }
    );
    assert_eq!(
        s.speed_limit_up,
        SpeedLimit {
            kbps: 200,
            enabled: true
        }
    );
    let si = h.remote_ok(&["-si"])?;
    for want in [
        "  Daemon version: 4.0.6 (weir ",
        "  RPC version: 17",
        "  RPC minimum version: 14",
        &format!("  Download directory: {}", h.downloads().display()),
        "  Upload speed limit: 200 kB/s",
        "  Download speed limit: 100 kB/s",
        "  Distributed hash table enabled: No",
    ] {
        assert!(si.contains(want), "missing {want:?} in:\n{si}");
    }
    h.remote_ok(&["-D"])?;
    assert!(!h.backend.settings().speed_limit_down.enabled);
    let si = h.remote_ok(&["-si"])?;
    assert!(
        si.contains("  Download speed limit: Unlimited (Disabled limit: 100 kB/s"),
        "{si}"
    );

    let (one, _) = make_torrent(h.dir.path(), "capped.bin", &[("", 100_000)])?;
    h.remote_ok(&["-a", one.to_str().unwrap()])?;
    h.remote_ok(&["-t", "1", "-d", "50", "-u", "70"])?;
    let v = h.backend.view(1).unwrap();
    assert_eq!(
        v.download_limit,
        SpeedLimit {
            kbps: 50,
            enabled: true
        }
    );
    assert_eq!(
        v.upload_limit,
        SpeedLimit {
            kbps: 70,
            enabled: true
        }
    );
    let info = h.remote_ok(&["-t", "1", "-i"])?;
    assert!(info.contains("  Download Limit: 50 kB/s"), "{info}");
    assert!(info.contains("  Upload Limit: 70 kB/s"), "{info}");

    let st = h.remote_ok(&["-st"])?;
    assert!(
        st.contains("CURRENT SESSION") && st.contains("Started 1 times"),
        "{st}"
    );
    Ok(())
}

#[test]
fn peers_magnets_and_ed2k_links() -> anyhow::Result<()> {
    let Some(h) = Harness::start("rpc-remote-peers")? else {
        return Ok(());
    };
    let (one, _) = make_torrent(h.dir.path(), "peered.bin", &[("", 5_000_000)])?;
    h.remote_ok(&["-a", one.to_str().unwrap()])?;
    h.backend.advance(1);
    let pi = h.remote_ok(&["-t", "1", "-pi"])?;
    let row = pi
        .lines()
        .find(|l| l.starts_with("127.0.0.2"))
        .unwrap_or_else(|| panic!("no peer row in:\n{pi}"));
    assert!(row.contains("weir fake peer") && row.contains("D"), "{row}");

    let magnet = "magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=from+magnet";
    h.remote_ok(&["-a", magnet])?;
    let ed2k = "ed2k://|file|from-ed2k.bin|9728000|D3B6B09D73D3FE0DD41DDE5ED244215A|/";
    h.remote_ok(&["-a", ed2k])?;
    let list = h.remote_ok(&["-l"])?;
    let m = list_row(&list, 2);
    assert_eq!(m[1], "n/a", "a magnet without metadata: {list}");
    assert!(list.contains("from magnet"), "{list}");
    assert_eq!(list_row(&list, 3).last().unwrap(), "from-ed2k.bin");
    let info = h.remote_ok(&["-t", "3", "-i"])?;
    assert!(
        info.contains("  Hash: d3b6b09d73d3fe0dd41dde5ed244215a"),
        "{info}"
    );
    assert!(
        info.contains("  Magnet: ed2k://|file|from-ed2k.bin|9728000|"),
        "{info}"
    );
    Ok(())
}
