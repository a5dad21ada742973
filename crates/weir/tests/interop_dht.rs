//! weir's DHT in the engine against libtorrent's (python3-libtorrent),
//! each test in a network namespace it creates (only `lo`), every program
//! on its own 127.0.0.x, no tracker anywhere:
//!
//! - a libtorrent DHT node on 127.0.0.2, a libtorrent seeder on 127.0.0.3
//!   that announces to it, and `weir get MAGNET --dht-bootstrap
//!   127.0.0.2:6881` on 127.0.0.4: weir finds the seeder through the DHT,
//!   fetches the metadata and then the data;
//! - the same node, `weir seed --dht-bootstrap 127.0.0.2:6881` on
//!   127.0.0.3, and a libtorrent leecher on 127.0.0.4 given only the
//!   magnet link: libtorrent finds weir through the DHT and downloads.
//!
//! libtorrent runs with LSD, UPnP, NAT-PMP, uTP and its public DHT routers
//! off, `dht_restrict_routing_ips` and `dht_restrict_search_ips` off (so
//! 127.0.0.x nodes count; `weir_lab::bt::dht`). Without `CI` the tests skip when root,
//! namespaces or python3-libtorrent are missing; with `CI` they fail.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::bt::dht::{self, Role};
use weir_lab::process::{Proc, wait_line};
use weir_lab::{Netns, TempDir, ci, payload};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const PYTHON: &str = "/usr/bin/python3";
const NODE: &str = "127.0.0.2:6881";
const SIZE: u64 = 3_000_017;

fn ready() -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? || !ci::require_program(PYTHON)? {
        return Ok(false);
    }
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        ci::unavailable("python3-libtorrent is not installed")?;
    }
    Ok(ok)
}

/// A payload file `dir/seed/dht.bin` and a trackerless torrent of it made
/// by `weir create`; returns the torrent's path and info-hash (hex).
fn fixture(dir: &TempDir) -> anyhow::Result<(std::path::PathBuf, String)> {
    let seed = dir.subdir("seed")?;
    payload::write(&seed.join("dht.bin"), SIZE, 11)?;
    let t = dir.path().join("dht.torrent");
    let out = weir_lab::process::run(
        Command::new(WEIR)
            .args(["--allow", "127.0.0.0/8", "create"])
            .arg(seed.join("dht.bin"))
            .arg("-o")
            .arg(&t),
        Duration::from_secs(30),
    )?;
    if !out.success() {
        bail!("weir create failed: {}", out.stderr_text());
    }
    let info = weir_lab::torrent::TorrentInfo::read(&t)?;
    Ok((t, info.info_hash_hex()))
}

fn magnet(hash: &str) -> String {
    format!("magnet:?xt=urn:btih:{hash}&dn=dht.bin")
}

/// Waits for the node to store `hash` from `ip`.
fn announced(node: &Receiver<String>, hash: &str, ip: &str, port: u16) -> anyhow::Result<()> {
    dht::wait_announce(node, hash, ip, port, Duration::from_secs(20))
}

fn check(path: &Path) -> anyhow::Result<()> {
    payload::verify(path, SIZE, 11).with_context(|| format!("{}", path.display()))
}

#[test]
fn weir_gets_a_magnet_from_a_libtorrent_seeder_found_through_a_libtorrent_dht_node()
-> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let dir = TempDir::new("interop-dht-a")?;
    let (torrent, hash) = fixture(&dir)?;
    let ns = Netns::new("dht-a")?;
    let t0 = Instant::now();
    let (_node, node_out) = dht::start(&ns, dir.path(), "lt-node", "127.0.0.2", 6881, Role::Node)?;
    let seed_dir = dir.path().join("seed");
    let (_seeder, _seeder_out) = dht::start(
        &ns,
        dir.path(),
        "lt-seeder",
        "127.0.0.3",
        6881,
        Role::Seed {
            dir: &seed_dir,
            torrent: &torrent,
            boot: NODE,
        },
    )?;
    announced(&node_out, &hash, "127.0.0.3", 6881)?;
    let out_dir = dir.subdir("weir-out")?;
    let started = Instant::now();
    let out = weir_lab::process::run(
        ns.command(WEIR)
            .args(["--allow", "127.0.0.0/8", "get", "-q", "--no-trackers"])
            .args(["--listen", "127.0.0.4:6881", "--dht-bootstrap", NODE])
            .arg("-o")
            .arg(&out_dir)
            .arg(magnet(&hash)),
        Duration::from_secs(25),
    )?;
    let secs = started.elapsed().as_secs_f64();
    if !out.success() {
        bail!(
            "weir get failed ({:?}) after {secs:.2} s: {}",
            out.code(),
            out.stderr_text()
        );
    }
    check(&out_dir.join("dht.bin"))?;
    assert!(
        out_dir
            .join(format!(".weir-meta-{}.torrent", &hash[..16]))
            .exists()
    );
    // The routing table is kept next to the resume data.
    let table = std::fs::read(out_dir.join(".weir-dht-table"))?;
    assert!(table.starts_with(b"d") && table.len() > 26, "{table:?}");
    println!(
        "weir: magnet through libtorrent's DHT, {SIZE} B in {secs:.2} s (setup {:.2} s)",
        (started - t0).as_secs_f64()
    );
    Ok(())
}

#[test]
fn libtorrent_finds_a_weir_seeder_through_the_dht() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let dir = TempDir::new("interop-dht-b")?;
    let (torrent, hash) = fixture(&dir)?;
    let ns = Netns::new("dht-b")?;
    let (_node, node_out) = dht::start(&ns, dir.path(), "lt-node", "127.0.0.2", 6881, Role::Node)?;
    let seed_dir = dir.path().join("seed");
    let mut cmd = ns.command(WEIR);
    cmd.args(["--allow", "127.0.0.0/8", "seed", "-q", "--no-trackers"])
        .args(["--listen", "127.0.0.3:6881", "--dht-bootstrap", NODE])
        .arg(&torrent)
        .arg(&seed_dir);
    let mut weir = Proc::spawn_logged("weir-seed", &mut cmd, dir.path())?;
    announced(&node_out, &hash, "127.0.0.3", 6881)
        .map_err(|e| anyhow::anyhow!("{e:#}; {}", weir.log_tail(20)))?;
    let link = magnet(&hash);
    // The script exits by itself only after FINISHED and FLUSHED: a leecher
    // gone before FINISHED is python3-libtorrent crashing (seen once in CI,
    // stdout closed 1 s in).
    // That gets one more try, said on stderr; weir not serving it (the
    // leecher alive at the deadline) fails at once.
    let mut attempt = 0;
    let (leech_dir, started, meta_secs) = loop {
        attempt += 1;
        let leech_dir = dir.subdir(&format!("lt-out-{attempt}"))?;
        let name = format!("lt-leecher-{attempt}");
        let started = Instant::now();
        let (mut leech, leech_out) = dht::start(
            &ns,
            dir.path(),
            &name,
            "127.0.0.4",
            6881,
            Role::Leech {
                dir: &leech_dir,
                magnet: &link,
                boot: NODE,
                force: true,
            },
        )?;
        let deadline = Instant::now() + Duration::from_secs(25);
        let meta = std::cell::Cell::new(None::<f64>);
        let got = wait_line(&leech_out, deadline, "libtorrent's FINISHED", |l| {
            if l == "METADATA" && meta.get().is_none() {
                meta.set(Some(started.elapsed().as_secs_f64()));
            }
            l == "FINISHED"
        });
        let meta_secs = meta.get();
        match got {
            Ok(_) => {
                let m = meta_secs.context("FINISHED without METADATA")?;
                dht::flushed(&leech_out, Instant::now() + Duration::from_secs(20))?;
                break (leech_dir, started, m);
            }
            Err(e) => {
                let lt =
                    weir_lab::process::tail_file(&dir.path().join(format!("{name}.stderr")), 20);
                match leech.try_wait()? {
                    Some((status, _)) if attempt == 1 => {
                        eprintln!("libtorrent's leecher died ({status}): trying once more; {lt}");
                    }
                    _ => anyhow::bail!(
                        "{e:#} (metadata: {meta_secs:?}); libtorrent: {lt}; weir: {}",
                        weir.log_tail(20)
                    ),
                }
            }
        }
    };
    check(&leech_dir.join("dht.bin"))?;
    println!(
        "libtorrent: weir found through the DHT, metadata after {meta_secs:.2} s, \
         {SIZE} B after {:.2} s",
        started.elapsed().as_secs_f64()
    );
    weir.kill_tree()?;
    Ok(())
}
