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
//!   dials it: Transmission 3.00 refuses 127/8 peers a tracker hands it);
//! - the same class against other implementations: aria2c and rtorrent
//!   requiring encryption (RC4 only) download from weir (through
//!   opentracker) and seed to it; Transmission's uTP (libutp, the
//!   reference implementation, not libtorrent's) seeds to weir and
//!   downloads from it with weir restricted to `--transports utp`.
//!
//! Each test reads weir's debug log for the connection it made (`BitTorrent
//! over tcp, RC4`, `over utp`), so a transfer that fell back to plaintext
//! or to TCP fails.
//!
//! Without root or the programs the tests skip, unless `CI` is set: then
//! they fail.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use weir_lab::bt::{self, Client, CommandClient, Options, Tracker};
use weir_lab::process::Proc;
use weir_lab::{Netns, TempDir, ci, payload};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const SEED: &str = "127.0.0.1:6881";
const LEECH: &str = "127.0.0.2:6882";
const TRACKER: &str = "127.0.0.1:6969";
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

/// `dir/seed/m.bin` and a torrent of it by `weir create`.
struct Fixture {
    dir: TempDir,
    data: PathBuf,
    torrent: PathBuf,
}

fn fixture() -> anyhow::Result<Fixture> {
    // Its tracker leads nowhere: peers are given by address.
    fixture_with("http://127.0.0.1:1/announce")
}

/// [`fixture`] announcing to `tracker`.
fn fixture_with(tracker: &str) -> anyhow::Result<Fixture> {
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
            .args(["-t", tracker]),
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

/// Checks that weir's log (`p`'s stderr, at debug level) shows a
/// BitTorrent connection `what` (e.g. `over tcp, RC4`): what proves the
/// transfer ran encrypted, or over uTP, and not over a fallback.
fn log_shows(p: &Proc, what: &str) -> anyhow::Result<()> {
    let path = p
        .stderr_log()
        .ok_or_else(|| anyhow::anyhow!("{} has no log", p.name()))?;
    let log = std::fs::read_to_string(path)?;
    if !log
        .lines()
        .any(|l| l.contains("BitTorrent over") && l.contains(what))
    {
        bail!(
            "{}'s log shows no BitTorrent connection {what}:\n{}",
            p.name(),
            p.log_tail(30)
        );
    }
    Ok(())
}

/// `weir seed` with its defaults, announcing to the torrent's tracker.
fn weir_tracked_seeder() -> Client {
    let seed = [
        WEIR,
        "--allow",
        "127.0.0.0/8",
        "seed",
        "{torrent}",
        "{dir}",
        "--listen",
        "{addr}",
        "-q",
        "--log-verbose",
        "--log-verbose",
    ];
    Client::Command(CommandClient {
        name: "weir".into(),
        seed: seed.map(String::from).to_vec(),
        leech: Vec::new(),
    })
}

/// A libtorrent that speaks only one way, as its lab script names it.
#[derive(Clone, Copy)]
enum Only {
    /// `--forced-enc`: encrypted connections only, both ways.
    Encrypted,
    /// `--utp-only`: uTP only, TCP off both ways.
    Utp,
    /// Both: RC4 over uTP, nothing else (qBittorrent's "require
    /// encryption" with TCP off).
    EncryptedUtp,
}

impl Only {
    fn flags(self) -> Vec<String> {
        let f: &[&str] = match self {
            Only::Encrypted => &["--forced-enc"],
            Only::Utp => &["--utp-only"],
            Only::EncryptedUtp => &["--forced-enc", "--utp-only"],
        };
        f.iter().map(|s| s.to_string()).collect()
    }

    /// What weir's log shows of a connection to such a peer.
    fn shown(self) -> &'static str {
        match self {
            Only::Encrypted => ", RC4",
            Only::Utp => "over utp",
            Only::EncryptedUtp => "over utp, RC4",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Only::Encrypted => "encryption-only",
            Only::Utp => "uTP-only",
            Only::EncryptedUtp => "encrypted uTP-only",
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
        extra_args: only.flags(),
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
    log_shows(&p, only.shown())?;
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
    let seed = bt::start_seed(
        &ns,
        &weir_seeder(&["--log-verbose", "--log-verbose"]),
        &f.torrent,
        &f.data,
        addr(SEED),
    )?;
    let out = f.dir.subdir("lt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(addr(SEED))],
        timeout: Duration::from_secs(25),
        extra_args: only.flags(),
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
    log_shows(&seed, only.shown())?;
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
fn weir_downloads_from_an_encrypted_utp_only_libtorrent_seeder() -> anyhow::Result<()> {
    weir_downloads_from_libtorrent("iemu-lts", Only::EncryptedUtp)
}

#[test]
fn an_encrypted_utp_only_libtorrent_leecher_downloads_from_weir() -> anyhow::Result<()> {
    libtorrent_leecher_downloads_from_weir("iemu-ltl", Only::EncryptedUtp)
}

#[test]
fn a_utp_only_libtorrent_leecher_downloads_from_weir() -> anyhow::Result<()> {
    libtorrent_leecher_downloads_from_weir("iutp-ltl", Only::Utp)
}

/// Transmission 3.00 (`opts`) downloads from weir seeding with its defaults
/// and `weir_extra` (weir dials it: Transmission refuses 127/8 peers a
/// tracker hands it); weir's log must show a connection `expect`.
fn transmission_downloads_from_weir(
    ns_name: &str,
    opts: Options,
    weir_extra: &[&str],
    label: &str,
    expect: &str,
) -> anyhow::Result<()> {
    if !ready(&Client::Transmission)? {
        return Ok(());
    }
    let ns = Netns::new(ns_name)?;
    let f = fixture()?;
    let out = f.dir.subdir("tr-out")?;
    let opts = Options {
        timeout: Duration::from_secs(25),
        ..opts
    };
    let weir_args: Vec<&str> = ["--peer", LEECH, "--log-verbose", "--log-verbose"]
        .into_iter()
        .chain(weir_extra.iter().copied())
        .collect();
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
            &weir_seeder(&weir_args),
            &f.torrent,
            &f.data,
            addr(SEED),
        )?;
        let r = leech
            .join()
            .map_err(|_| anyhow::anyhow!("leech thread panicked"))?
            .map_err(|e| e.context(seed.failure("weir seeder's log")))?;
        eprintln!("{label} <- weir: {:.2} s", r.seconds);
        log_shows(&seed, expect)
    })?;
    same_file(&f, &out)
}

#[test]
fn transmission_with_encryption_required_downloads_from_weir() -> anyhow::Result<()> {
    let opts = Options {
        extra_args: vec!["--encryption-required".into()],
        ..Options::default()
    };
    transmission_downloads_from_weir(
        "imse-tr",
        opts,
        &[],
        "Transmission (encryption required)",
        ", RC4",
    )
}

/// Runs `weir get` (its defaults and `extra`) in `ns`, dialling `peer`,
/// and checks the file.
/// Its log must show a connection `expect` (see [`log_shows`]).
fn weir_get(
    ns: &Netns,
    f: &Fixture,
    peer: &str,
    extra: &[&str],
    label: &str,
    expect: &str,
) -> anyhow::Result<()> {
    let out = f.dir.subdir("weir-out")?;
    let mut cmd = ns.command(WEIR);
    cmd.env("RUST_LOG", "info,weir_runtime=debug");
    cmd.args(["--allow", "127.0.0.0/8", "get"])
        .arg(&f.torrent)
        .arg("-o")
        .arg(&out)
        .args(["--listen", LEECH, "--no-trackers", "-q", "--peer", peer])
        .args(extra);
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
    eprintln!("weir <- {label}: {:.2} s", start.elapsed().as_secs_f64());
    log_shows(&p, expect)?;
    same_file(f, &out)
}

/// A client set to speak only encrypted (RC4), both ways.
#[derive(Clone, Copy)]
enum Requiring {
    /// aria2c `--bt-require-crypto=true --bt-min-crypto-level=arc4`.
    Aria2,
    /// rtorrent `protocol.encryption.set = allow_incoming,try_outgoing,
    /// require,require_RC4` (an rc file imported after the lab's own).
    Rtorrent,
}

impl Requiring {
    fn client(self) -> Client {
        match self {
            Requiring::Aria2 => Client::Aria2,
            Requiring::Rtorrent => Client::Rtorrent,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Requiring::Aria2 => "aria2c (encryption required)",
            Requiring::Rtorrent => "rtorrent (encryption required)",
        }
    }

    /// Its options, files it needs written in `dir`.
    fn options(self, dir: &TempDir) -> anyhow::Result<Options> {
        let extra_args = match self {
            Requiring::Aria2 => ["--bt-require-crypto=true", "--bt-min-crypto-level=arc4"]
                .map(String::from)
                .to_vec(),
            Requiring::Rtorrent => {
                let rc = dir.path().join("encryption.rc");
                std::fs::write(
                    &rc,
                    "protocol.encryption.set = allow_incoming,try_outgoing,require,require_RC4\n",
                )?;
                vec!["-o".into(), format!("import={}", rc.display())]
            }
        };
        Ok(Options {
            timeout: Duration::from_secs(25),
            extra_args,
            ..Options::default()
        })
    }
}

/// `who`, a leecher (it dials only peers a tracker gives), downloads from
/// weir seeding with its defaults, through opentracker.
fn leecher_requiring_encryption_downloads_from_weir(
    ns_name: &str,
    who: Requiring,
) -> anyhow::Result<()> {
    if !ready(&who.client())? || !ci::require_program("opentracker")? {
        return Ok(());
    }
    let ns = Netns::new(ns_name)?;
    let f = fixture_with(&format!("http://{TRACKER}/announce"))?;
    let hash = weir_lab::torrent::TorrentInfo::read(&f.torrent)?.info_hash_hex();
    let tracker = Tracker::start(&ns, addr(TRACKER), std::slice::from_ref(&hash))?;
    let mut seed = bt::start_seed(&ns, &weir_tracked_seeder(), &f.torrent, &f.data, addr(SEED))?;
    tracker.wait_seeder(&hash, Duration::from_secs(20))?;
    let out = f.dir.subdir("leech-out")?;
    let opts = who.options(&f.dir)?;
    let r = bt::leech_with(&ns, &who.client(), &f.torrent, &out, addr(LEECH), &opts)
        .map_err(|e| e.context(seed.failure("weir seeder's log")))?;
    eprintln!("{} <- weir: {:.2} s", who.label(), r.seconds);
    log_shows(&seed, "over tcp, RC4")?;
    same_file(&f, &out)
}

/// weir, with its defaults, dials `who` seeding and downloads from it.
fn weir_downloads_from_a_seeder_requiring_encryption(
    ns_name: &str,
    who: Requiring,
) -> anyhow::Result<()> {
    if !ready(&who.client())? {
        return Ok(());
    }
    let ns = Netns::new(ns_name)?;
    let f = fixture()?;
    let opts = who.options(&f.dir)?;
    let _seed = bt::start_seed_with(&ns, &who.client(), &f.torrent, &f.data, addr(SEED), &opts)?;
    ns.wait_port(SocketAddr::V4(addr(SEED)), Duration::from_secs(20))?;
    weir_get(&ns, &f, SEED, &[], who.label(), "over tcp, RC4")
}

#[test]
fn aria2c_requiring_encryption_downloads_from_weir() -> anyhow::Result<()> {
    leecher_requiring_encryption_downloads_from_weir("imse-a2l", Requiring::Aria2)
}

#[test]
fn weir_downloads_from_aria2c_requiring_encryption() -> anyhow::Result<()> {
    weir_downloads_from_a_seeder_requiring_encryption("imse-a2s", Requiring::Aria2)
}

#[test]
fn rtorrent_requiring_encryption_downloads_from_weir() -> anyhow::Result<()> {
    leecher_requiring_encryption_downloads_from_weir("imse-rtl", Requiring::Rtorrent)
}

#[test]
fn weir_downloads_from_rtorrent_requiring_encryption() -> anyhow::Result<()> {
    weir_downloads_from_a_seeder_requiring_encryption("imse-rts", Requiring::Rtorrent)
}

#[test]
fn weir_downloads_from_transmission_over_utp() -> anyhow::Result<()> {
    if !ready(&Client::Transmission)? {
        return Ok(());
    }
    let ns = Netns::new("iutp-trs")?;
    let f = fixture()?;
    let opts = Options {
        utp: true,
        ..Options::default()
    };
    let _seed = bt::start_seed_with(
        &ns,
        &Client::Transmission,
        &f.torrent,
        &f.data,
        addr(SEED),
        &opts,
    )?;
    // uTP only: a connection that works proves Transmission's uTP (libutp)
    // and weir's speak to each other.
    weir_get(
        &ns,
        &f,
        SEED,
        &["--transports", "utp"],
        "Transmission over uTP",
        "over utp",
    )
}

#[test]
fn transmission_downloads_from_weir_over_utp() -> anyhow::Result<()> {
    let opts = Options {
        utp: true,
        ..Options::default()
    };
    // weir dials Transmission's UDP port: uTP only.
    transmission_downloads_from_weir(
        "iutp-trl",
        opts,
        &["--transports", "utp"],
        "Transmission over uTP",
        "over utp",
    )
}

/// How qBittorrent 4.5 (`qbittorrent-nox`) is set for a test: its
/// encryption mode and its peer transports, both ways.
#[derive(Clone, Copy)]
struct Qbt {
    /// `prefer`, `require` or `off` (Allow / Require / Disable encryption).
    encryption: &'static str,
    /// `tcp`, `utp` or `both`.
    protocol: &'static str,
}

impl Qbt {
    fn options(self) -> Options {
        Options {
            timeout: Duration::from_secs(25),
            extra_args: ["--encryption", self.encryption, "--protocol", self.protocol]
                .map(String::from)
                .to_vec(),
            ..Options::default()
        }
    }

    fn label(self) -> String {
        format!(
            "qBittorrent (encryption {}, {})",
            self.encryption, self.protocol
        )
    }
}

/// weir, with its defaults, downloads from qBittorrent seeding as `q`
/// says; its log must show a connection `expect`.
fn weir_downloads_from_qbittorrent(ns_name: &str, q: Qbt, expect: &str) -> anyhow::Result<()> {
    if !ready(&Client::Qbittorrent)? {
        return Ok(());
    }
    let ns = Netns::new(ns_name)?;
    let f = fixture()?;
    let _seed = bt::start_seed_with(
        &ns,
        &Client::Qbittorrent,
        &f.torrent,
        &f.data,
        addr(SEED),
        &q.options(),
    )?;
    weir_get(&ns, &f, SEED, &[], &q.label(), expect)
}

/// qBittorrent, set as `q` says, dials weir seeding with its defaults and
/// downloads from it; weir's log must show a connection `expect`.
fn qbittorrent_downloads_from_weir(ns_name: &str, q: Qbt, expect: &str) -> anyhow::Result<()> {
    if !ready(&Client::Qbittorrent)? {
        return Ok(());
    }
    let ns = Netns::new(ns_name)?;
    let f = fixture()?;
    let mut seed = bt::start_seed(
        &ns,
        &weir_seeder(&["--log-verbose", "--log-verbose"]),
        &f.torrent,
        &f.data,
        addr(SEED),
    )?;
    let out = f.dir.subdir("qbt-out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(addr(SEED))],
        ..q.options()
    };
    let r = bt::leech_with(
        &ns,
        &Client::Qbittorrent,
        &f.torrent,
        &out,
        addr(LEECH),
        &opts,
    )
    .map_err(|e| e.context(seed.failure("weir seeder's log")))?;
    eprintln!("{} <- weir: {:.2} s", q.label(), r.seconds);
    log_shows(&seed, expect)?;
    same_file(&f, &out)
}

const QBT_REQUIRE: Qbt = Qbt {
    encryption: "require",
    protocol: "tcp",
};
const QBT_UTP: Qbt = Qbt {
    encryption: "off",
    protocol: "utp",
};
const QBT_REQUIRE_UTP: Qbt = Qbt {
    encryption: "require",
    protocol: "utp",
};

#[test]
fn weir_downloads_from_qbittorrent_requiring_encryption() -> anyhow::Result<()> {
    weir_downloads_from_qbittorrent("imse-qbs", QBT_REQUIRE, "over tcp, RC4")
}

#[test]
fn qbittorrent_requiring_encryption_downloads_from_weir() -> anyhow::Result<()> {
    qbittorrent_downloads_from_weir("imse-qbl", QBT_REQUIRE, "over tcp, RC4")
}

#[test]
fn weir_downloads_from_a_utp_only_qbittorrent() -> anyhow::Result<()> {
    weir_downloads_from_qbittorrent("iutp-qbs", QBT_UTP, "over utp, plaintext")
}

#[test]
fn a_utp_only_qbittorrent_downloads_from_weir() -> anyhow::Result<()> {
    qbittorrent_downloads_from_weir("iutp-qbl", QBT_UTP, "over utp, plaintext")
}

#[test]
fn weir_downloads_from_qbittorrent_requiring_encryption_over_utp() -> anyhow::Result<()> {
    weir_downloads_from_qbittorrent("iemu-qbs", QBT_REQUIRE_UTP, "over utp, RC4")
}

#[test]
fn qbittorrent_requiring_encryption_over_utp_downloads_from_weir() -> anyhow::Result<()> {
    qbittorrent_downloads_from_weir("iemu-qbl", QBT_REQUIRE_UTP, "over utp, RC4")
}
