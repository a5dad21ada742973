//! weir over uTP against libtorrent speaking nothing else (TCP off both
//! ways), each test in a network namespace it creates (only `lo`), weir
//! run with its defaults (`--transports tcp,utp`, `--encryption prefer`),
//! files compared byte for byte:
//!
//! - weir downloads from a uTP-only libtorrent seeder (weir dials: uTP
//!   first, as libtorrent does);
//! - a uTP-only libtorrent leecher downloads from weir (it dials weir's
//!   UDP socket, the BitTorrent port).
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
    let dir = TempDir::new("interop-utp")?;
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
    let args = [
        WEIR,
        "--allow",
        "127.0.0.0/8",
        "seed",
        "{torrent}",
        "{dir}",
        "--listen",
        "{addr}",
        "--no-trackers",
        "-q",
    ];
    Client::Command(CommandClient {
        name: "weir".into(),
        seed: args.iter().chain(extra).map(|s| s.to_string()).collect(),
        leech: Vec::new(),
    })
}

#[test]
fn weir_downloads_from_a_utp_only_libtorrent_seeder() -> anyhow::Result<()> {
    if !ready(&Client::Libtorrent)? {
        return Ok(());
    }
    let ns = Netns::new("iutp-lts")?;
    let f = fixture()?;
    let opts = Options {
        extra_args: vec!["--utp-only".into()],
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
        "weir <- uTP-only libtorrent: {:.2} s",
        start.elapsed().as_secs_f64()
    );
    same_file(&f, &out)
}

#[test]
fn a_utp_only_libtorrent_leecher_downloads_from_weir() -> anyhow::Result<()> {
    if !ready(&Client::Libtorrent)? {
        return Ok(());
    }
    let ns = Netns::new("iutp-ltl")?;
    let f = fixture()?;
    let _seed = bt::start_seed(&ns, &weir_seeder(&[]), &f.torrent, &f.data, addr(SEED))?;
    let out = f.dir.subdir("lt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(addr(SEED))],
        timeout: Duration::from_secs(25),
        extra_args: vec!["--utp-only".into()],
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
    eprintln!("uTP-only libtorrent <- weir: {:.2} s", r.seconds);
    same_file(&f, &out)
}
