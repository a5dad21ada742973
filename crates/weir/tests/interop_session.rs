//! One `weir get` holding several transfers in one session, against real
//! programs in a network namespace the test creates (only `lo`; every
//! client with DHT/LSD/PEX/UPnP/NAT-PMP off, bound to 127.0.0.x):
//!
//! - one file fetched from a libtorrent seeder and an eD2k source at once
//!   (the torrent and an ed2k link of its file), byte-identical, with bytes
//!   from both networks;
//! - a torrent and an ed2k link of different files in one `weir get` under
//!   one download cap: both complete, and together they take at least the
//!   time the cap allows;
//! - two torrents whose libtorrent seeders dial the one weir port;
//! - magnet links: weir fetches one from the libtorrent seeder its x.pe
//!   names; a libtorrent leecher and a Transmission leecher given one get
//!   the metadata (BEP 9) and the data from a weir seeder; weir learns a
//!   seeder only through libtorrent's PEX.
//!
//! Without root or the programs the tests skip, unless `CI` is set: then
//! they fail.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::bt::{self, Client, Options};
use weir_lab::process::{Proc, stdout_lines, wait_line};
use weir_lab::{Netns, TempDir, ci, payload};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const LT_SEED: &str = "127.0.0.1:6881";
const LT_SEED2: &str = "127.0.0.3:6881";
const ED2K_SEED: &str = "127.0.0.4:4662";
const WEIR_ADDR: &str = "127.0.0.2:6882";

fn addr(s: &str) -> SocketAddrV4 {
    s.parse().expect("literal address")
}

fn ready() -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? {
        return Ok(false);
    }
    for p in Client::Libtorrent.programs() {
        if !ci::require_program(&p)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A weir command run in `ns` with its own user hash home.
fn weir(ns: &Netns, home: &Path) -> Command {
    let mut c = ns.command(WEIR);
    c.env("WEIR_ED2K_HOME", home)
        .env_remove("WEIR_ED2K_USER_HASH")
        .args(["--allow", "127.0.0.0/8"]);
    c
}

/// A file of `size` seeded bytes at `dir/name`, and a trackerless torrent
/// of it made by `weir create`.
fn file_and_torrent(dir: &Path, name: &str, size: u64, seed: u64) -> anyhow::Result<PathBuf> {
    payload::write_tree(dir, &[(name, size)], seed)?;
    let t = dir.join(format!("{name}.torrent"));
    let out = weir_lab::process::run(
        Command::new(WEIR)
            .args(["--allow", "127.0.0.0/8", "create"])
            .arg(dir.join(name))
            .arg("-o")
            .arg(&t)
            .args(["--piece-size", "256KiB"]),
        Duration::from_secs(120),
    )?;
    if !out.success() {
        bail!("weir create failed: {}", out.stderr_text());
    }
    Ok(t)
}

/// Starts `weir seed --ed2k FILE` on [`ED2K_SEED`] capped at `max_up`;
/// returns it and the link it prints (naming itself as the source).
fn ed2k_seed(ns: &Netns, home: &Path, file: &Path, max_up: &str) -> anyhow::Result<(Proc, String)> {
    let mut cmd = weir(ns, home);
    cmd.args(["seed", "--ed2k"])
        .arg(file)
        .args(["--listen", ED2K_SEED, "--max-up", max_up, "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut seed = Proc::spawn("weir seed --ed2k", &mut cmd)?;
    let lines = stdout_lines(&mut seed)?;
    let link = wait_line(
        &lines,
        Instant::now() + Duration::from_secs(120),
        "link",
        |l| l.starts_with("ed2k://"),
    )?;
    if !link.contains(&format!("|sources,{ED2K_SEED}|")) {
        bail!("the link names no source at {ED2K_SEED}: {link}");
    }
    Ok((seed, link))
}

/// Runs `weir get ARGS...` in `ns` to its end (at most `limit`); returns
/// its stderr and how long it took.
fn weir_get(
    ns: &Netns,
    home: &Path,
    args: &[&str],
    limit: Duration,
) -> anyhow::Result<(String, f64)> {
    let mut cmd = weir(ns, home);
    cmd.env("RUST_LOG", "info").arg("get").args(args);
    let start = Instant::now();
    let out = weir_lab::process::run(&mut cmd, limit)?;
    let secs = start.elapsed().as_secs_f64();
    let err = out.stderr_text();
    if !out.success() {
        bail!("weir get failed ({}):\n{err}", out.status);
    }
    Ok((err, secs))
}

/// The bytes a final `complete:` line says came from each network.
fn by_network(stderr: &str, name: &str) -> anyhow::Result<(String, String)> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains(name) && l.contains("complete:"))
        .with_context(|| format!("no completion line for {name} in:\n{stderr}"))?;
    let bt = line
        .split("BitTorrent ")
        .nth(1)
        .and_then(|r| r.split(" / ").next())
        .with_context(|| format!("no BitTorrent figure: {line}"))?;
    let ed = line
        .split("eD2k ")
        .nth(1)
        .and_then(|r| r.split(" down").next())
        .with_context(|| format!("no eD2k figure: {line}"))?;
    Ok((bt.to_string(), ed.to_string()))
}

/// A size as the progress display prints it (`12.3 MB`, `0 B`), in bytes
/// (0 when it does not read).
fn parse_size(s: &str) -> f64 {
    weir_core::units::size(s).map_or(0.0, |b| b as f64)
}

#[test]
fn one_file_from_a_libtorrent_seeder_and_an_ed2k_source_at_once() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("isess")?;
    let dir = TempDir::new("session-mixed")?;
    let home = dir.subdir("home")?;
    let data = dir.subdir("data")?;
    let size: u64 = 48 << 20;
    let torrent = file_and_torrent(&data, "both.bin", size, 91)?;
    // Each source alone would take ~8 s: together ~4 s, if both are used.
    let cap = 6_000_000u64;
    let _lt = bt::start_seed_with(
        &ns,
        &Client::Libtorrent,
        &torrent,
        &data,
        addr(LT_SEED),
        &Options {
            upload_limit: Some(cap),
            ..Options::default()
        },
    )?;
    let (_ed, link) = ed2k_seed(&ns, &home, &data.join("both.bin"), "6MB/s")?;
    let out = dir.subdir("out")?;
    let (stderr, secs) = weir_get(
        &ns,
        &home,
        &[
            torrent.to_str().context("utf-8 path")?,
            &link,
            "-o",
            out.to_str().context("utf-8 path")?,
            "--listen",
            WEIR_ADDR,
            "--no-trackers",
            "--peer",
            LT_SEED,
        ],
        Duration::from_secs(240),
    )?;
    payload::files_equal(&data.join("both.bin"), &out.join("both.bin"))?;
    let (bt, ed) = by_network(&stderr, "both.bin")?;
    let (bt, ed) = (parse_size(&bt), parse_size(&ed));
    eprintln!("one file, two networks: {secs:.1} s; BitTorrent {bt:.0} B, eD2k {ed:.0} B");
    // Both networks carried a real share of the file.
    assert!(
        bt >= size as f64 * 0.15 && ed >= size as f64 * 0.15,
        "BitTorrent {bt} B, eD2k {ed} B of {size}:\n{stderr}"
    );
    Ok(())
}

#[test]
fn a_torrent_and_an_ed2k_link_of_other_files_share_one_cap() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("isess")?;
    let dir = TempDir::new("session-cap")?;
    let home = dir.subdir("home")?;
    let data = dir.subdir("data")?;
    let (a, b): (u64, u64) = (20 << 20, 20 << 20);
    let torrent = file_and_torrent(&data, "a.bin", a, 92)?;
    payload::write_tree(&data, &[("b.bin", b)], 93)?;
    let _lt = bt::start_seed(&ns, &Client::Libtorrent, &torrent, &data, addr(LT_SEED))?;
    let (_ed, link) = ed2k_seed(&ns, &home, &data.join("b.bin"), "0")?;
    let out = dir.subdir("out")?;
    let cap = 8_000_000f64;
    let (stderr, secs) = weir_get(
        &ns,
        &home,
        &[
            torrent.to_str().context("utf-8 path")?,
            &link,
            "-o",
            out.to_str().context("utf-8 path")?,
            "--listen",
            WEIR_ADDR,
            "--no-trackers",
            "--peer",
            LT_SEED,
            "--max-down",
            "8MB/s",
        ],
        Duration::from_secs(240),
    )?;
    payload::files_equal(&data.join("a.bin"), &out.join("a.bin"))?;
    payload::files_equal(&data.join("b.bin"), &out.join("b.bin"))?;
    let floor = (a + b) as f64 / cap;
    eprintln!(
        "torrent + ed2k link under 8 MB/s: {secs:.2} s (the cap allows {floor:.2} s at best)"
    );
    // One cap for both: together they cannot beat it (a bucket's first
    // second of burst aside), and the cap is not far from used.
    assert!(
        secs >= floor * 0.85,
        "{secs:.2} s < the {floor:.2} s the cap allows:\n{stderr}"
    );
    assert!(secs <= floor * 3.0, "{secs:.2} s: the cap is far from used");
    Ok(())
}

#[test]
fn two_torrents_whose_libtorrent_seeders_dial_one_weir_port() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("isess")?;
    let dir = TempDir::new("session-dial")?;
    let home = dir.subdir("home")?;
    let data = dir.subdir("data")?;
    let t1 = file_and_torrent(&data, "one.bin", 12 << 20, 94)?;
    let t2 = file_and_torrent(&data, "two.bin", 9 << 20, 95)?;
    let weir_addr: SocketAddr = WEIR_ADDR.parse()?;
    let out = dir.subdir("out")?;
    // weir first: libtorrent gives up on an address after three refused
    // dials (max_failcount), so the seeders start once weir listens.
    // No tracker, no --peer: the seeders must come to weir's one port.
    let mut cmd = weir(&ns, &home);
    cmd.env("RUST_LOG", "info")
        .arg("get")
        .arg(&t1)
        .arg(&t2)
        .arg("-o")
        .arg(&out)
        .args(["--listen", WEIR_ADDR, "--no-trackers", "--peer-wait", "120"]);
    let start = Instant::now();
    let mut get = Proc::spawn_logged("weir get", &mut cmd, dir.path())?;
    ns.wait_port(weir_addr, Duration::from_secs(60))
        .map_err(|e| get.failure(&format!("weir get not listening: {e:#}")))?;
    let dial = Options {
        dial: Some(weir_addr),
        ..Options::default()
    };
    let _s1 = bt::start_seed_with(&ns, &Client::Libtorrent, &t1, &data, addr(LT_SEED), &dial)?;
    let _s2 = bt::start_seed_with(&ns, &Client::Libtorrent, &t2, &data, addr(LT_SEED2), &dial)?;
    match get.wait_timeout(Duration::from_secs(240))? {
        Some((st, _)) if st.success() => {}
        Some(_) => return Err(get.failure("weir get failed")),
        None => {
            let _ = get.kill_tree();
            return Err(get.failure("weir get timed out"));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    payload::files_equal(&data.join("one.bin"), &out.join("one.bin"))?;
    payload::files_equal(&data.join("two.bin"), &out.join("two.bin"))?;
    let log = std::fs::read_to_string(get.stderr_log().context("logged")?)?;
    assert!(
        log.contains(&format!("BitTorrent: listening on {WEIR_ADDR}")),
        "{log}"
    );
    eprintln!("two torrents, seeders dialling one port: {secs:.1} s");
    Ok(())
}

#[test]
fn a_magnet_link_is_fetched_from_a_libtorrent_seeder_it_names() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("isess-mag")?;
    let dir = TempDir::new("session-magnet")?;
    let home = dir.subdir("home")?;
    let data = dir.subdir("data")?;
    let torrent = file_and_torrent(&data, "mag.bin", 9 << 20, 96)?;
    let info = weir_lab::torrent::TorrentInfo::read(&torrent)?;
    let hex: String = info.info_hash.iter().map(|b| format!("{b:02x}")).collect();
    let _lt = bt::start_seed_with(
        &ns,
        &Client::Libtorrent,
        &torrent,
        &data,
        addr(LT_SEED),
        &Options {
            extra_args: vec!["--ut-metadata".into()],
            ..Options::default()
        },
    )?;
    // No tracker, no --peer: only the link's x.pe names the seeder.
    let magnet = format!("magnet:?xt=urn:btih:{hex}&dn=mag.bin&x.pe={LT_SEED}");
    let out = dir.subdir("out")?;
    let args = [
        magnet.as_str(),
        "-o",
        out.to_str().context("utf-8 path")?,
        "--listen",
        WEIR_ADDR,
        "--no-trackers",
    ];
    let (stderr, secs) = weir_get(&ns, &home, &args, Duration::from_secs(120))?;
    payload::files_equal(&data.join("mag.bin"), &out.join("mag.bin"))?;
    assert!(stderr.contains("metadata fetched"), "{stderr}");
    let saved = out.join(format!(".weir-meta-{}.torrent", &hex[..16]));
    let saved_info = weir_lab::torrent::TorrentInfo::read(&saved)?;
    assert_eq!(saved_info.info_hash, info.info_hash, "the saved torrent");
    eprintln!("magnet from libtorrent (metadata and data): {secs:.1} s");
    // Again: the saved metadata is used, nothing fetched, nothing to get.
    let (stderr, _) = weir_get(&ns, &home, &args, Duration::from_secs(120))?;
    assert!(stderr.contains("metadata from"), "{stderr}");
    assert!(!stderr.contains("metadata fetched"), "{stderr}");
    Ok(())
}

#[test]
fn malformed_magnet_links_exit_2_naming_the_problem() -> anyhow::Result<()> {
    let dir = TempDir::new("session-badmag")?;
    for (link, want) in [
        ("magnet:?xt=urn:btih:1234", "btih"),
        ("magnet:?dn=nothing", "btih"),
        (
            "magnet:?xt=urn:btih:zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
            "btih",
        ),
    ] {
        let out = weir_lab::process::run(
            Command::new(WEIR)
                .args(["--allow", "127.0.0.0/8", "get", link, "-o"])
                .arg(dir.path().join("o"))
                .args(["--listen", "127.0.0.1:0"]),
            Duration::from_secs(30),
        )?;
        let err = out.stderr_text();
        assert_eq!(out.status.code(), Some(2), "{link}: {err}");
        assert!(err.to_lowercase().contains(want), "{link}: {err}");
    }
    Ok(())
}

#[test]
fn a_libtorrent_leecher_given_a_magnet_gets_metadata_and_data_from_weir() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("isess-magsrv")?;
    let dir = TempDir::new("session-magsrv")?;
    let home = dir.subdir("home")?;
    let data = dir.subdir("data")?;
    let torrent = file_and_torrent(&data, "served.bin", 7 << 20, 97)?;
    let info = weir_lab::torrent::TorrentInfo::read(&torrent)?;
    let hex: String = info.info_hash.iter().map(|b| format!("{b:02x}")).collect();
    let mut cmd = weir(&ns, &home);
    cmd.arg("seed")
        .arg(&torrent)
        .arg(&data)
        .args(["--listen", LT_SEED2, "--no-trackers", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut seed = Proc::spawn("weir seed", &mut cmd)?;
    ns.wait_port(LT_SEED2.parse()?, Duration::from_secs(60))
        .map_err(|e| seed.failure(&format!("weir seed not listening: {e:#}")))?;
    let out = dir.subdir("lt-out")?;
    let magnet = format!("magnet:?xt=urn:btih:{hex}&dn=served.bin");
    let r = bt::leech_with(
        &ns,
        &Client::Libtorrent,
        &torrent,
        &out,
        addr(LT_SEED),
        &Options {
            peers: vec![LT_SEED2.parse()?],
            extra_args: vec!["--magnet".into(), magnet],
            timeout: Duration::from_secs(120),
            ..Options::default()
        },
    )?;
    payload::files_equal(&data.join("served.bin"), &out.join("served.bin"))?;
    eprintln!(
        "libtorrent from a magnet, metadata and data from weir: {:.1} s",
        r.seconds
    );
    seed.kill_tree()?;
    Ok(())
}

#[test]
fn weir_learns_a_seeder_only_through_pex_from_a_libtorrent_peer() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("isess-pex")?;
    let dir = TempDir::new("session-pex")?;
    let home = dir.subdir("home")?;
    let data = dir.subdir("data")?;
    let size = 8u64 << 20;
    let torrent = file_and_torrent(&data, "pex.bin", size, 98)?;
    let _s = bt::start_seed(&ns, &Client::Libtorrent, &torrent, &data, addr(LT_SEED))?;
    // The middle peer: a libtorrent leecher with ut_pex, connected to the
    // seeder, fetching at 50 kB/s (it can give weir little of the file).
    let middle_out = dir.subdir("middle")?;
    let opts = Options {
        peers: vec![LT_SEED.parse()?],
        download_limit: Some(50_000),
        extra_args: vec!["--ut-pex".into()],
        timeout: Duration::from_secs(25),
        ..Options::default()
    };
    let out = dir.subdir("out")?;
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let middle = sc.spawn(|| {
            bt::leech_with(
                &ns,
                &Client::Libtorrent,
                &torrent,
                &middle_out,
                addr(LT_SEED2),
                &opts,
            )
        });
        ns.wait_port(LT_SEED2.parse()?, Duration::from_secs(20))?;
        // weir is told only of the middle peer: no tracker, --peer middle.
        let (_, secs) = weir_get(
            &ns,
            &home,
            &[
                torrent.to_str().context("utf-8 path")?,
                "-o",
                out.to_str().context("utf-8 path")?,
                "--listen",
                WEIR_ADDR,
                "--no-trackers",
                "--peer",
                LT_SEED2,
            ],
            Duration::from_secs(60),
        )?;
        payload::files_equal(&data.join("pex.bin"), &out.join("pex.bin"))?;
        eprintln!("seeder found through libtorrent's PEX: {secs:.1} s");
        // The middle peer could have given at most ~50 kB/s: the file came
        // from the seeder weir learnt of through PEX.
        assert!(
            secs * 50_000.0 * 4.0 < size as f64,
            "{secs:.1} s: slow enough to have come from the middle peer alone"
        );
        // It ends at its time limit (it is capped): awaited, so it is
        // stopped by PID before the test ends.
        let _ = middle.join();
        Ok(())
    })?;
    Ok(())
}

/// Transmission's address: its own 127.0.0.x, away from weir's.
const TR_LEECH: &str = "127.0.0.5:51413";

#[test]
fn transmission_given_a_magnet_gets_metadata_and_data_from_weir() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    for p in Client::Transmission.programs() {
        if !ci::require_program(&p)? {
            return Ok(());
        }
    }
    let ns = Netns::new("isess-magtr")?;
    let dir = TempDir::new("session-magtr")?;
    let home = dir.subdir("home")?;
    let data = dir.subdir("data")?;
    let torrent = file_and_torrent(&data, "tr.bin", 6 << 20, 99)?;
    let info = weir_lab::torrent::TorrentInfo::read(&torrent)?;
    let hex: String = info.info_hash.iter().map(|b| format!("{b:02x}")).collect();
    // The link names weir (x.pe), but Transmission 3.00 reads no x.pe and
    // drops 127/8 peers a tracker hands it: weir dials it (`--peer`), and
    // it gets the metadata (BEP 9) over that connection, then the data.
    let magnet = format!("magnet:?xt=urn:btih:{hex}&dn=tr.bin&x.pe={LT_SEED2}");
    let out = dir.subdir("tr-out")?;
    let opts = Options {
        magnet: Some(magnet),
        timeout: Duration::from_secs(25),
        ..Options::default()
    };
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let leech = sc.spawn(|| {
            bt::leech_with(
                &ns,
                &Client::Transmission,
                &torrent,
                &out,
                addr(TR_LEECH),
                &opts,
            )
        });
        ns.wait_port(TR_LEECH.parse()?, Duration::from_secs(20))?;
        let mut cmd = weir(&ns, &home);
        cmd.arg("seed")
            .arg(&torrent)
            .arg(&data)
            .args(["--listen", LT_SEED2, "--no-trackers", "--no-dht", "-q"])
            .args(["--peer", TR_LEECH]);
        let mut seed = Proc::spawn_logged("weir seed", &mut cmd, dir.path())?;
        let r = leech
            .join()
            .map_err(|_| anyhow::anyhow!("the leecher thread panicked"))?
            .map_err(|e| anyhow::anyhow!("{e:#}; weir: {}", seed.log_tail(20)))?;
        payload::files_equal(&data.join("tr.bin"), &out.join("tr.bin"))?;
        eprintln!(
            "Transmission from a magnet, metadata and data from weir: {:.1} s",
            r.seconds
        );
        seed.kill_tree()?;
        Ok(())
    })
}
