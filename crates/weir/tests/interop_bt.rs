//! weir against real BitTorrent clients, each test in a network namespace
//! it creates (only `lo`), every client with DHT/LSD/PEX/UPnP/NAT-PMP off
//! and bound to 127.0.0.x, files compared byte for byte.
//!
//! - weir downloads a multi-file torrent (64 MiB and more, odd sizes, an
//!   empty file) from libtorrent and from Transmission, found through
//!   opentracker (HTTP and UDP announce);
//! - aria2c and libtorrent download from a weir seeder;
//! - libtorrent accepts, verifies and seeds a torrent made by `weir create`.
//!
//! Without root or the programs the tests skip, unless `CI` is set: then
//! they fail.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::bt::{self, Client, CommandClient, Options, Tracker};
use weir_lab::process::Proc;
use weir_lab::{Netns, TempDir, ci, payload, torrent};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const SEED: &str = "127.0.0.1:6881";
const LEECH: &str = "127.0.0.2:6882";
const TRACKER: &str = "127.0.0.1:6969";

/// Odd sizes (none a multiple of the piece length), a nested directory and
/// an empty file: 64 MiB + 1,234,567 bytes in all.
const FILES: [(&str, u64); 5] = [
    ("a.bin", 40_000_001),
    ("empty.txt", 0),
    ("sub/b.bin", 27_343_749),
    ("sub/deeper/c.bin", 1_234_567),
    ("z.bin", 333),
];

fn addr(s: &str) -> SocketAddrV4 {
    s.parse().expect("literal address")
}

fn ready(clients: &[Client]) -> anyhow::Result<bool> {
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
    ci::require_program("opentracker")
}

/// A payload tree under `dir/seed/set` and a torrent of it made by
/// `weir create` announcing to `tracker`.
struct Fixture {
    dir: TempDir,
    data: PathBuf,
    torrent: PathBuf,
    info: torrent::TorrentInfo,
}

fn fixture(tracker: &str) -> anyhow::Result<Fixture> {
    let dir = TempDir::new("interop-bt")?;
    let data = dir.subdir("seed")?;
    let files: Vec<(String, u64)> = FILES
        .iter()
        .map(|(p, n)| (format!("set/{p}"), *n))
        .collect();
    let refs: Vec<(&str, u64)> = files.iter().map(|(p, n)| (p.as_str(), *n)).collect();
    payload::write_tree(&data, &refs, 7)?;
    let t = dir.path().join("set.torrent");
    let out = weir_lab::process::run(
        Command::new(WEIR)
            .args(["--allow", "127.0.0.0/8", "create"])
            .arg(data.join("set"))
            .arg("-o")
            .arg(&t)
            .args(["-t", tracker]),
        Duration::from_secs(120),
    )?;
    if !out.success() {
        bail!("weir create failed: {}", out.stderr_text());
    }
    let info = torrent::TorrentInfo::read(&t)?;
    Ok(Fixture {
        dir,
        data,
        torrent: t,
        info,
    })
}

fn same_tree(a: &Path, b: &Path) -> anyhow::Result<()> {
    for (p, n) in FILES {
        let x = a.join("set").join(p);
        let y = b.join("set").join(p);
        let len = std::fs::metadata(&y)
            .with_context(|| format!("{} missing", y.display()))?
            .len();
        if len != n {
            bail!("{} is {len} bytes, expected {n}", y.display());
        }
        payload::files_equal(&x, &y)?;
    }
    Ok(())
}

/// weir as a lab client: seeds with `weir seed`, leeches with `weir get`
/// (exits 0 when complete and verified).
fn weir_client(extra: &[&str]) -> Client {
    let base = |v: &[&str]| -> Vec<String> {
        [WEIR, "--allow", "127.0.0.0/8"]
            .iter()
            .chain(v)
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    Client::Command(CommandClient {
        name: "weir".into(),
        seed: base(&["seed", "{torrent}", "{dir}", "--listen", "{addr}", "-q"]),
        leech: base(&[
            "get",
            "{torrent}",
            "-o",
            "{dir}",
            "--listen",
            "{addr}",
            "-q",
        ]),
    })
}

/// Runs `weir get` in `ns` from the torrent's tracker (and `peers`), and
/// checks the result.
fn weir_leech(ns: &Netns, f: &Fixture, peers: &[&str]) -> anyhow::Result<f64> {
    let out = f.dir.subdir("weir-out")?;
    let mut cmd = ns.command(WEIR);
    // Debug logs go to the file shown when the test fails.
    cmd.env("RUST_LOG", "info,weir_runtime=debug");
    cmd.args(["--allow", "127.0.0.0/8", "get"])
        .arg(&f.torrent)
        .arg("-o")
        .arg(&out)
        .args(["--listen", LEECH, "-q"]);
    for p in peers {
        cmd.args(["--peer", p]);
    }
    let start = Instant::now();
    let mut p = Proc::spawn_logged("weir-get", &mut cmd, f.dir.path())?;
    match p.wait_timeout(Duration::from_secs(180))? {
        Some((st, _)) if st.success() => {}
        Some(_) => return Err(p.failure("weir get failed")),
        None => {
            let _ = p.kill_tree();
            return Err(p.failure("weir get timed out"));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    same_tree(&f.data, &out)?;
    Ok(secs)
}

#[test]
fn weir_downloads_from_libtorrent_found_through_http_tracker() -> anyhow::Result<()> {
    if !ready(&[Client::Libtorrent])? {
        return Ok(());
    }
    let ns = Netns::new("ibt-lt")?;
    let f = fixture(&format!("http://{TRACKER}/announce"))?;
    let tracker = Tracker::start(&ns, addr(TRACKER), &[f.info.info_hash_hex()])?;
    let _seed = bt::start_seed(&ns, &Client::Libtorrent, &f.torrent, &f.data, addr(SEED))?;
    tracker.wait_seeder(&f.info.info_hash_hex(), Duration::from_secs(60))?;
    let secs = weir_leech(&ns, &f, &[])?;
    eprintln!("weir <- libtorrent via HTTP tracker: {secs:.2} s");
    Ok(())
}

#[test]
fn weir_downloads_from_transmission_found_through_udp_tracker() -> anyhow::Result<()> {
    if !ready(&[Client::Transmission])? {
        return Ok(());
    }
    let ns = Netns::new("ibt-tr")?;
    let f = fixture(&format!("udp://{TRACKER}/announce"))?;
    let tracker = Tracker::start(&ns, addr(TRACKER), &[f.info.info_hash_hex()])?;
    let _seed = bt::start_seed(&ns, &Client::Transmission, &f.torrent, &f.data, addr(SEED))?;
    tracker.wait_seeder(&f.info.info_hash_hex(), Duration::from_secs(60))?;
    let secs = weir_leech(&ns, &f, &[])?;
    eprintln!("weir <- transmission via UDP tracker: {secs:.2} s");
    Ok(())
}

#[test]
fn weir_downloads_from_libtorrent_found_through_udp_tracker() -> anyhow::Result<()> {
    if !ready(&[Client::LibtorrentHps])? {
        return Ok(());
    }
    let ns = Netns::new("ibt-ltu")?;
    let f = fixture(&format!("udp://{TRACKER}/announce"))?;
    let tracker = Tracker::start(&ns, addr(TRACKER), &[f.info.info_hash_hex()])?;
    let _seed = bt::start_seed(&ns, &Client::LibtorrentHps, &f.torrent, &f.data, addr(SEED))?;
    tracker.wait_seeder(&f.info.info_hash_hex(), Duration::from_secs(60))?;
    let secs = weir_leech(&ns, &f, &[])?;
    eprintln!("weir <- libtorrent (hps) via UDP tracker: {secs:.2} s");
    Ok(())
}

#[test]
fn aria2c_downloads_from_weir() -> anyhow::Result<()> {
    if !ready(&[Client::Aria2])? {
        return Ok(());
    }
    let ns = Netns::new("ibt-aria")?;
    let f = fixture(&format!("http://{TRACKER}/announce"))?;
    let tracker = Tracker::start(&ns, addr(TRACKER), &[f.info.info_hash_hex()])?;
    let _seed = bt::start_seed(&ns, &weir_client(&[]), &f.torrent, &f.data, addr(SEED))?;
    tracker.wait_seeder(&f.info.info_hash_hex(), Duration::from_secs(60))?;
    let out = f.dir.subdir("aria2-out")?;
    let r = bt::leech(
        &ns,
        &Client::Aria2,
        &f.torrent,
        &out,
        addr(LEECH),
        None,
        Duration::from_secs(180),
    )?;
    eprintln!("aria2c <- weir: {:.2} s", r.seconds);
    same_tree(&f.data, &out)
}

#[test]
fn libtorrent_downloads_from_weir() -> anyhow::Result<()> {
    if !ready(&[Client::Libtorrent])? {
        return Ok(());
    }
    let ns = Netns::new("ibt-ltl")?;
    // Direct peer, no tracker needed (its announce URL leads nowhere).
    let f = fixture("http://127.0.0.1:1/announce")?;
    let _seed = bt::start_seed(
        &ns,
        &weir_client(&["--no-trackers"]),
        &f.torrent,
        &f.data,
        addr(SEED),
    )?;
    let out = f.dir.subdir("lt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(addr(SEED))],
        timeout: Duration::from_secs(180),
        ..Options::default()
    };
    let r = bt::leech_with(
        &ns,
        &Client::Libtorrent,
        &f.torrent,
        &out,
        addr(LEECH),
        &opts,
    )?;
    eprintln!("libtorrent <- weir: {:.2} s", r.seconds);
    same_tree(&f.data, &out)
}

#[test]
fn libtorrent_verifies_and_seeds_a_torrent_made_by_weir_create() -> anyhow::Result<()> {
    if !ready(&[Client::Libtorrent])? {
        return Ok(());
    }
    let ns = Netns::new("ibt-create")?;
    let f = fixture("http://127.0.0.1:1/announce")?;
    // start_seed returns only once libtorrent has hash-checked every piece
    // of the existing data against the weir-made torrent and is seeding...
    let _seed = bt::start_seed(&ns, &Client::Libtorrent, &f.torrent, &f.data, addr(SEED))?;
    // ...and a download from it proves it serves the right bytes.
    let secs = weir_leech(&ns, &f, &[SEED])?;
    eprintln!("weir <- libtorrent seeding a weir-made torrent: {secs:.2} s");
    Ok(())
}
