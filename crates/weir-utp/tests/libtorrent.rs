//! Wire compatibility with libtorrent-rasterbar's uTP (python3-libtorrent
//! with TCP off), in a network namespace the test creates: weir-utp dials a
//! uTP-only libtorrent seeder and downloads the whole file with a minimal
//! BitTorrent request loop; then a uTP-only libtorrent leecher dials
//! weir-utp and downloads the file from it. Both byte-identical.
//!
//! Without root, namespaces or libtorrent the tests skip, unless `CI` is
//! set (then they fail).

mod driver;

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::process::Proc;
use weir_lab::{Netns, TempDir, ci, payload, torrent};
use weir_utp::{Config, Endpoint};

const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = include_str!("lt_utp.py");
const SIZE: u64 = 3 << 20;
const PIECE: u64 = 256 * 1024;

fn ready() -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? || !ci::require_program(PYTHON)? {
        return Ok(false);
    }
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        ci::unavailable("python3-libtorrent is not installed")?;
        return Ok(false);
    }
    Ok(true)
}

struct Setup {
    dir: TempDir,
    data: PathBuf,
    file: PathBuf,
    torrent: PathBuf,
    info: torrent::TorrentInfo,
    script: PathBuf,
}

fn setup(tag: &str) -> anyhow::Result<Setup> {
    let dir = TempDir::new(tag)?;
    let data = dir.subdir("seed")?;
    let file = data.join("payload.bin");
    payload::write(&file, SIZE, 29)?;
    let t = dir.path().join("payload.torrent");
    let info = torrent::make(&file, PIECE, None, &t)?;
    let script = dir.path().join("lt_utp.py");
    std::fs::write(&script, SCRIPT)?;
    Ok(Setup {
        data,
        file,
        torrent: t,
        info,
        script,
        dir,
    })
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn start_lt(ns: &Netns, st: &Setup, args: &[String], name: &str) -> anyhow::Result<Proc> {
    let mut cmd = ns.command(PYTHON);
    cmd.arg(&st.script).args(args);
    Proc::spawn_logged(name, &mut cmd, st.dir.path())
}

fn wait_file(p: &mut Proc, flag: &Path, timeout: Duration, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !flag.exists() {
        if let Some((st, _)) = p.try_wait()? {
            bail!("libtorrent exited ({st}) before {what}: {}", p.log_tail(30));
        }
        if Instant::now() > deadline {
            bail!(
                "libtorrent not {what} after {timeout:?}: {}",
                p.log_tail(30)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

#[test]
fn weir_utp_downloads_from_utp_only_libtorrent() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("utp-lt-seed")?;
    let st = setup("utp-lt-seed")?;
    let lt_addr: SocketAddrV4 = "127.0.0.1:6881".parse()?;
    let flag = st.dir.path().join("seeding");
    let mut lt = start_lt(
        &ns,
        &st,
        &[
            "seed".into(),
            s(&st.torrent),
            s(&st.data),
            lt_addr.ip().to_string(),
            lt_addr.port().to_string(),
            s(&flag),
        ],
        "lt-seed",
    )?;
    wait_file(&mut lt, &flag, Duration::from_secs(30), "seeding")?;

    let info_hash = st.info.info_hash;
    let leech = ns.try_run_in(move || -> anyhow::Result<driver::Leech> {
        runtime()?.block_on(async move {
            let sock = tokio::net::UdpSocket::bind("127.0.0.2:0").await?;
            let mut ep = Endpoint::new(Config::default(), 7);
            let mut app = driver::Leech::new(info_hash, PIECE, SIZE, SocketAddr::V4(lt_addr));
            app.start(&mut ep, Instant::now())?;
            driver::run(&sock, &mut ep, &mut app, Duration::from_secs(60)).await?;
            if let Some(h) = app.s.conn {
                eprintln!("weir-utp leech stats: {:?}", ep.conn_stats(h));
            }
            Ok::<_, anyhow::Error>(app)
        })
    })??;
    if let Some(e) = &leech.error {
        bail!("{e}; libtorrent log: {}", lt.log_tail(30));
    }
    let hs = leech
        .their_handshake
        .as_ref()
        .with_context(|| format!("no handshake from libtorrent: {}", lt.log_tail(30)))?;
    assert_eq!(&hs[..20], b"\x13BitTorrent protocol");
    assert_eq!(&hs[28..48], &info_hash);
    let pieces = SIZE.div_ceil(PIECE) as usize;
    let bf = leech
        .bitfield
        .as_ref()
        .context("no bitfield from libtorrent")?;
    assert_eq!(bf.len(), pieces.div_ceil(8));
    assert!(
        (0..pieces).all(|i| bf[i / 8] & (0x80 >> (i % 8)) != 0),
        "{bf:02x?}"
    );
    assert_eq!(
        leech.received,
        SIZE,
        "closed: {:?}; {}",
        leech.s.closed,
        lt.log_tail(30)
    );
    let want = std::fs::read(&st.file)?;
    assert!(
        leech.data == want,
        "downloaded bytes differ from the seeded file"
    );
    Ok(())
}

#[test]
fn utp_only_libtorrent_downloads_from_weir_utp() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let ns = Netns::new("utp-lt-leech")?;
    let st = setup("utp-lt-leech")?;
    let ours: SocketAddrV4 = "127.0.0.2:7881".parse()?;
    let out = st.dir.subdir("lt-out")?;
    let flag = st.dir.path().join("finished");
    let data = std::fs::read(&st.file)?;
    let info_hash = st.info.info_hash;

    // Our endpoint listens first; then libtorrent dials it.
    let sock = ns.try_run_in(|| std::net::UdpSocket::bind(ours))??;
    sock.set_nonblocking(true)?;
    let mut lt = start_lt(
        &ns,
        &st,
        &[
            "leech".into(),
            s(&st.torrent),
            s(&out),
            "127.0.0.1".into(),
            "6882".into(),
            s(&flag),
            ours.to_string(),
        ],
        "lt-leech",
    )?;
    let flag2 = flag.clone();
    let seed = runtime()?.block_on(async move {
        let sock = tokio::net::UdpSocket::from_std(sock)?;
        let mut ep = Endpoint::new(Config::default(), 8);
        let mut app = driver::Seed {
            info_hash,
            piece_len: PIECE,
            data,
            s: driver::Stream::default(),
            their_handshake: None,
            served: 0,
            error: None,
            until: move || flag2.exists(),
        };
        let r = driver::run(&sock, &mut ep, &mut app, Duration::from_secs(60)).await;
        if let Some(h) = app.s.conn {
            eprintln!("weir-utp seed stats: {:?}", ep.conn_stats(h));
        }
        r.map(|()| app)
    });
    let seed = match seed {
        Ok(s) => s,
        Err(e) => bail!("{e:#}; libtorrent log: {}", lt.log_tail(30)),
    };
    if let Some(e) = &seed.error {
        bail!("{e}; libtorrent log: {}", lt.log_tail(30));
    }
    wait_file(&mut lt, &flag, Duration::from_secs(5), "finished")?;
    let hs = seed
        .their_handshake
        .as_ref()
        .context("no handshake from libtorrent")?;
    assert_eq!(&hs[28..48], &info_hash);
    assert!(seed.served >= SIZE, "served {}", seed.served);
    payload::files_equal(&out.join("payload.bin"), &st.file)?;
    Ok(())
}
