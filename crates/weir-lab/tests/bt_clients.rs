//! Real BitTorrent clients through the harness, each test in its own
//! namespace: a libtorrent seeder and one leecher per client, 16 MiB,
//! byte-identical. Skip without root/programs unless CI is set.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_lab::bt::{self, Client, Options, Tracker};
use weir_lab::{Netns, TempDir, ci, payload, torrent};

const SIZE: u64 = 16 << 20;

fn ready(clients: &[&Client]) -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? {
        return Ok(false);
    }
    for c in clients {
        for p in c.programs() {
            if !ci::require_program(&p)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Payload + torrent announcing to `tracker` in a fresh temp dir.
fn setup(tracker: &str) -> anyhow::Result<(TempDir, PathBuf, PathBuf, torrent::TorrentInfo)> {
    let dir = TempDir::new("bt-clients")?;
    let data = dir.subdir("seed")?;
    let file = data.join("payload.bin");
    payload::write(&file, SIZE, 11)?;
    let t = dir.path().join("payload.torrent");
    let info = torrent::make(&file, 256 * 1024, Some(tracker), &t)?;
    Ok((dir, data, t, info))
}

fn addr(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}

fn check_download(out: &Path, data: &Path) -> anyhow::Result<()> {
    payload::files_equal(&out.join("payload.bin"), &data.join("payload.bin"))
}

#[test]
fn aria2c_downloads_from_libtorrent_via_opentracker() -> anyhow::Result<()> {
    if !ready(&[&Client::Libtorrent, &Client::Aria2])? || !ci::require_program("opentracker")? {
        return Ok(());
    }
    let ns = Netns::new("bt-aria2")?;
    let tr_addr = addr("127.0.0.1:6969");
    let (dir, data, t, info) = setup(&format!("http://{tr_addr}/announce"))?;
    let _tracker = Tracker::start(&ns, tr_addr, &[info.info_hash_hex()])?;
    let _seed = bt::start_seed(&ns, &Client::Libtorrent, &t, &data, addr("127.0.0.1:6881"))?;
    let out = dir.subdir("aria2-out")?;
    let r = bt::leech(
        &ns,
        &Client::Aria2,
        &t,
        &out,
        addr("127.0.0.2:6882"),
        None,
        Duration::from_secs(120),
    )?;
    eprintln!(
        "aria2c <- libtorrent: {:.3} s, {:.1} MB/s, cpu {:.2} s",
        r.seconds,
        r.rate(SIZE) / 1e6,
        r.usage.cpu_s()
    );
    assert!(r.seconds > 0.0 && r.usage.cpu_s() > 0.0);
    check_download(&out, &data)
}

#[test]
fn libtorrent_downloads_from_libtorrent_hps_by_direct_peer() -> anyhow::Result<()> {
    if !ready(&[&Client::Libtorrent])? {
        return Ok(());
    }
    let ns = Netns::new("bt-lt")?;
    // No tracker at all: the torrent's announce URL points at nothing.
    let (dir, data, t, _) = setup("http://127.0.0.1:1/announce")?;
    let seed_addr = addr("127.0.0.1:6881");
    let _seed = bt::start_seed(&ns, &Client::LibtorrentHps, &t, &data, seed_addr)?;
    let out = dir.subdir("lt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(seed_addr)],
        timeout: Duration::from_secs(120),
        progress_every: Some(Duration::from_millis(50)),
        ..Options::default()
    };
    let r = bt::leech_with(
        &ns,
        &Client::Libtorrent,
        &t,
        &out,
        addr("127.0.0.2:6882"),
        &opts,
    )?;
    eprintln!(
        "libtorrent <- libtorrent-hps: {:.3} s, progress samples {:?}",
        r.seconds,
        r.progress.len()
    );
    check_download(&out, &data)?;
    // Samples saw bytes arriving before the completion report.
    assert!(r.progress.len() >= 2, "{:?}", r.progress);
    assert!(
        r.progress.iter().any(|p| p.1 > 0 && p.1 < SIZE + SIZE / 10),
        "{:?}",
        r.progress
    );
    assert_eq!(r.progress.last().map(|p| p.1), Some(SIZE));
    Ok(())
}

#[test]
fn rtorrent_downloads_from_libtorrent_via_opentracker() -> anyhow::Result<()> {
    if !ready(&[&Client::Libtorrent, &Client::Rtorrent])? || !ci::require_program("opentracker")? {
        return Ok(());
    }
    let ns = Netns::new("bt-rt")?;
    let tr_addr = addr("127.0.0.1:6969");
    let (dir, data, t, info) = setup(&format!("http://{tr_addr}/announce"))?;
    let _tracker = Tracker::start(&ns, tr_addr, &[info.info_hash_hex()])?;
    let _seed = bt::start_seed(&ns, &Client::Libtorrent, &t, &data, addr("127.0.0.1:6881"))?;
    let out = dir.subdir("rt-out")?;
    let r = bt::leech(
        &ns,
        &Client::Rtorrent,
        &t,
        &out,
        addr("127.0.0.2:6882"),
        None,
        Duration::from_secs(120),
    )?;
    eprintln!("rtorrent <- libtorrent: {:.3} s", r.seconds);
    check_download(&out, &data)
}

#[test]
fn transmission_downloads_from_a_libtorrent_seeder_that_dials_it() -> anyhow::Result<()> {
    if !ready(&[&Client::Libtorrent, &Client::Transmission])?
        || !ci::require_program("opentracker")?
    {
        return Ok(());
    }
    let ns = Netns::new("bt-tr")?;
    let tr_addr = addr("127.0.0.1:6969");
    let (dir, data, t, info) = setup(&format!("http://{tr_addr}/announce"))?;
    let _tracker = Tracker::start(&ns, tr_addr, &[info.info_hash_hex()])?;
    let leech_addr = addr("127.0.0.2:6882");
    let seed_opts = Options {
        dial: Some(SocketAddr::V4(leech_addr)),
        ..Options::default()
    };
    let _seed = bt::start_seed_with(
        &ns,
        &Client::Libtorrent,
        &t,
        &data,
        addr("127.0.0.1:6881"),
        &seed_opts,
    )?;
    let out = dir.subdir("tr-out")?;
    let r = bt::leech(
        &ns,
        &Client::Transmission,
        &t,
        &out,
        leech_addr,
        None,
        Duration::from_secs(180),
    )?;
    eprintln!("transmission <- libtorrent (dialling): {:.3} s", r.seconds);
    check_download(&out, &data)
}

#[test]
fn libtorrent_downloads_from_transmission_rtorrent_and_aria2_seeders() -> anyhow::Result<()> {
    if !ready(&[
        &Client::Libtorrent,
        &Client::Transmission,
        &Client::Rtorrent,
        &Client::Aria2,
    ])? {
        return Ok(());
    }
    for seeder in [Client::Transmission, Client::Rtorrent, Client::Aria2] {
        let ns = Netns::new("bt-seeders")?;
        let (dir, data, t, _) = setup("http://127.0.0.1:1/announce")?;
        let seed_addr = addr("127.0.0.1:6881");
        let seed = bt::start_seed(&ns, &seeder, &t, &data, seed_addr)?;
        let out = dir.subdir("lt-out")?;
        let r = bt::leech(
            &ns,
            &Client::Libtorrent,
            &t,
            &out,
            addr("127.0.0.2:6882"),
            Some(SocketAddr::V4(seed_addr)),
            Duration::from_secs(120),
        )?;
        eprintln!("libtorrent <- {}: {:.3} s", seeder.name(), r.seconds);
        check_download(&out, &data)?;
        drop(seed);
    }
    Ok(())
}

/// The qBittorrent adapter both ways against libtorrent, by direct peer
/// (its Web API's addPeers): qBittorrent leeches from a libtorrent seeder,
/// then seeds to a libtorrent leecher.
#[test]
fn qbittorrent_downloads_from_libtorrent_and_seeds_to_it() -> anyhow::Result<()> {
    if !ready(&[&Client::Libtorrent, &Client::Qbittorrent])? {
        return Ok(());
    }
    let ns = Netns::new("bt-qbt")?;
    let (dir, data, t, _) = setup("http://127.0.0.1:1/announce")?;
    let lt_seed = addr("127.0.0.1:6881");
    let _seed = bt::start_seed(&ns, &Client::LibtorrentHps, &t, &data, lt_seed)?;
    let qbt_out = dir.subdir("qbt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(lt_seed)],
        timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let r = bt::leech_with(
        &ns,
        &Client::Qbittorrent,
        &t,
        &qbt_out,
        addr("127.0.0.2:6882"),
        &opts,
    )?;
    eprintln!("qbittorrent <- libtorrent-hps: {:.3} s", r.seconds);
    check_download(&qbt_out, &data)?;
    let qbt_seed = addr("127.0.0.3:6883");
    let _qseed = bt::start_seed(&ns, &Client::Qbittorrent, &t, &qbt_out, qbt_seed)?;
    let lt_out = dir.subdir("lt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(qbt_seed)],
        timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let r = bt::leech_with(
        &ns,
        &Client::Libtorrent,
        &t,
        &lt_out,
        addr("127.0.0.4:6884"),
        &opts,
    )?;
    eprintln!("libtorrent <- qbittorrent: {:.3} s", r.seconds);
    check_download(&lt_out, &data)
}

#[test]
fn a_leecher_without_peer_or_tracker_is_refused() -> anyhow::Result<()> {
    let dir = TempDir::new("bt-refuse")?;
    let f = dir.path().join("x.bin");
    payload::write(&f, 100_000, 1)?;
    let t = dir.path().join("x.torrent");
    torrent::make(&f, 16 * 1024, None, &t)?;
    // Refused before any namespace or program is needed.
    let ns_free = || -> anyhow::Result<()> {
        let ns = Netns::new("bt-refuse")?;
        let e = bt::leech(
            &ns,
            &Client::Aria2,
            &t,
            dir.path(),
            addr("127.0.0.2:6882"),
            None,
            Duration::from_secs(5),
        );
        assert!(e.is_err());
        let e = bt::leech(
            &ns,
            &Client::Libtorrent,
            &t,
            dir.path(),
            addr("10.0.0.1:6882"),
            None,
            Duration::from_secs(5),
        );
        assert!(e.is_err());
        Ok(())
    };
    if ci::require_root_and_netns()? {
        ns_free()?;
    }
    Ok(())
}
