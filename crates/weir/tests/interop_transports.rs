//! weir with its defaults (`--transports tcp,utp`, `--encryption prefer`)
//! against real clients that speak only encrypted (MSE/PE) or only uTP,
//! each test in a network namespace it creates (only `lo`), files compared
//! byte for byte:
//!
//! - weir downloads from a libtorrent seeder that accepts only encrypted
//!   connections (`out_enc_policy`/`in_enc_policy` = forced,
//!   `allowed_enc_level` = rc4), and from one that speaks only uTP (TCP off
//!   both ways; weir prefers uTP, as libtorrent does);
//! - libtorrent leechers that only speak encrypted, or only uTP (dialling
//!   weir's UDP socket, the BitTorrent port), download from weir;
//! - Transmission with encryption required downloads from weir (weir
//!   dials it: Transmission 3.00 refuses 127/8 peers a tracker hands it).
//!
//! Without root or the programs the tests skip, unless `CI` is set: then
//! they fail.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use weir_lab::bt::{self, Client, CommandClient, Options};
use weir_lab::process::Proc;
use weir_lab::{Netns, TempDir, ci, payload};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const SEED: &str = "127.0.0.1:6881";
const LEECH: &str = "127.0.0.2:6882";
/// Small: each test stays well under 30 s.
const SIZE: u64 = 16 << 20;

fn addr(s: &str) -> SocketAddrV4 {
    s.parse().expect("literal address")
}

fn ready(client: &Client) -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? {
        return Ok(false);
    }
    for p in client.programs() {
        if !ci::require_program(&p)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `dir/seed/m.bin` and a torrent of it by `weir create` (its tracker
/// leads nowhere: peers are given by address).
struct Fixture {
    dir: TempDir,
    data: PathBuf,
    torrent: PathBuf,
}

fn fixture() -> anyhow::Result<Fixture> {
    let dir = TempDir::new("interop-transports")?;
    let data = dir.subdir("seed")?;
    payload::write_tree(&data, &[("m.bin", SIZE)], 12)?;
    let t = dir.path().join("m.torrent");
    let out = weir_lab::process::run(
        Command::new(WEIR)
            .args(["--allow", "127.0.0.0/8", "create"])
            .arg(data.join("m.bin"))
            .arg("-o")
            .arg(&t)
            .args(["-t", "http://127.0.0.1:1/announce"]),
        Duration::from_secs(60),
    )?;
    if !out.success() {
        bail!("weir create failed: {}", out.stderr_text());
    }
    Ok(Fixture {
        dir,
        data,
        torrent: t,
    })
}

fn same_file(f: &Fixture, out: &std::path::Path) -> anyhow::Result<()> {
    payload::files_equal(&f.data.join("m.bin"), &out.join("m.bin"))
}

/// `weir seed` with its defaults (and `extra`) as a lab client.
fn weir_seeder(extra: &[&str]) -> Client {
    let extra: Vec<&str> = ["-q"].iter().chain(extra).copied().collect();
    CommandClient::weir_seed(&[WEIR, "--allow", "127.0.0.0/8"], &extra)
}

/// A libtorrent that speaks only one way, as its lab script names it.
#[derive(Clone, Copy)]
enum Only {
    /// `--forced-enc`: encrypted connections only, both ways.
    Encrypted,
    /// `--utp-only`: uTP only, TCP off both ways.
    Utp,
}

impl Only {
    fn flag(self) -> &'static str {
        match self {
            Only::Encrypted => "--forced-enc",
            Only::Utp => "--utp-only",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Only::Encrypted => "encryption-only",
            Only::Utp => "uTP-only",
        }
    }
}

/// weir, with its defaults, downloads from a libtorrent seeder that speaks
/// only `only`.
fn weir_downloads_from_libtorrent(ns_name: &str, only: Only) -> anyhow::Result<()> {
    if !ready(&Client::Libtorrent)? {
        return Ok(());
    }
    let ns = Netns::new(ns_name)?;
    let f = fixture()?;
    let opts = Options {
        extra_args: vec![only.flag().into()],
        ..Options::default()
    };
    let _seed = bt::start_seed_with(
        &ns,
        &Client::Libtorrent,
        &f.torrent,
        &f.data,
        addr(SEED),
        &opts,
    )?;
    let out = f.dir.subdir("weir-out")?;
    let mut cmd = ns.command(WEIR);
    cmd.env("RUST_LOG", "info,weir_runtime=debug");
    cmd.args(["--allow", "127.0.0.0/8", "get"])
        .arg(&f.torrent)
        .arg("-o")
        .arg(&out)
        .args(["--listen", LEECH, "--no-trackers", "-q", "--peer", SEED]);
    let start = Instant::now();
    let mut p = Proc::spawn_logged("weir-get", &mut cmd, f.dir.path())?;
    match p.wait_timeout(Duration::from_secs(25))? {
        Some((st, _)) if st.success() => {}
        Some(_) => return Err(p.failure("weir get failed")),
        None => {
            let _ = p.kill_tree();
            return Err(p.failure("weir get timed out"));
        }
    }
    eprintln!(
        "weir <- {} libtorrent: {:.2} s",
        only.label(),
        start.elapsed().as_secs_f64()
    );
    same_file(&f, &out)
}

/// A libtorrent leecher that speaks only `only` downloads from weir seeding
/// with its defaults.
fn libtorrent_leecher_downloads_from_weir(ns_name: &str, only: Only) -> anyhow::Result<()> {
    if !ready(&Client::Libtorrent)? {
        return Ok(());
    }
    let ns = Netns::new(ns_name)?;
    let f = fixture()?;
    let _seed = bt::start_seed(&ns, &weir_seeder(&[]), &f.torrent, &f.data, addr(SEED))?;
    let out = f.dir.subdir("lt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(addr(SEED))],
        timeout: Duration::from_secs(25),
        extra_args: vec![only.flag().into()],
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
    eprintln!("{} libtorrent <- weir: {:.2} s", only.label(), r.seconds);
    same_file(&f, &out)
}

#[test]
fn weir_downloads_from_an_encryption_only_libtorrent_seeder() -> anyhow::Result<()> {
    weir_downloads_from_libtorrent("imse-lts", Only::Encrypted)
}

#[test]
fn weir_downloads_from_a_utp_only_libtorrent_seeder() -> anyhow::Result<()> {
    weir_downloads_from_libtorrent("iutp-lts", Only::Utp)
}

#[test]
fn an_encryption_only_libtorrent_leecher_downloads_from_weir() -> anyhow::Result<()> {
    libtorrent_leecher_downloads_from_weir("imse-ltl", Only::Encrypted)
}

#[test]
fn a_utp_only_libtorrent_leecher_downloads_from_weir() -> anyhow::Result<()> {
    libtorrent_leecher_downloads_from_weir("iutp-ltl", Only::Utp)
}

#[test]
fn transmission_with_encryption_required_downloads_from_weir() -> anyhow::Result<()> {
    if !ready(&Client::Transmission)? {
        return Ok(());
    }
    let ns = Netns::new("imse-tr")?;
    let f = fixture()?;
    let out = f.dir.subdir("tr-out")?;
    let opts = Options {
        timeout: Duration::from_secs(25),
        extra_args: vec!["--encryption-required".into()],
        ..Options::default()
    };
    std::thread::scope(|s| -> anyhow::Result<()> {
        let leech = s.spawn(|| {
            bt::leech_with(
                &ns,
                &Client::Transmission,
                &f.torrent,
                &out,
                addr(LEECH),
                &opts,
            )
        });
        // Transmission listening: weir dials it.
        ns.wait_port(SocketAddr::V4(addr(LEECH)), Duration::from_secs(20))?;
        let mut seed = bt::start_seed(
            &ns,
            &weir_seeder(&["--peer", LEECH, "--log-verbose", "--log-verbose"]),
            &f.torrent,
            &f.data,
            addr(SEED),
        )?;
        let r = leech
            .join()
            .map_err(|_| anyhow::anyhow!("leech thread panicked"))?
            .map_err(|e| e.context(seed.failure("weir seeder's log")))?;
        eprintln!(
            "transmission (encryption required) <- weir: {:.2} s",
            r.seconds
        );
        Ok(())
    })?;
    same_file(&f, &out)
}
