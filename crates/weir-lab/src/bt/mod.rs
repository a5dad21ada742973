//! Real BitTorrent clients as seeders and leechers inside a [`Netns`].
//!
//! Every client is started with DHT, LSD, PEX, UPnP/NAT-PMP, uTP,
//! blocklist and update checks off, listening and dialling only on the
//! given 127.0.0.x address, inside a namespace that holds only `lo`. The
//! contract is the same for all of them:
//!
//! - [`start_seed`] returns once the client reports that it is seeding
//!   (a ready file its hook touches, or its status), bounded by
//!   [`Options::ready_timeout`];
//! - [`leech`] times one download from process start to the client's own
//!   completion report (a file its completion hook touches; its mtime is
//!   the completion time), then stops the client by PID and returns the
//!   time and its `wait4` resource use.
//!
//! Quirks the adapters follow (found in the lab, see `shared/lab`):
//! Transmission 3.00 refuses 127/8 peers a tracker hands it, so as a leecher
//! it needs a seeder that dials it ([`Options::dial`], libtorrent only);
//! rtorrent keeps one peer per IP, so its seeder and leecher need different
//! 127.0.0.x addresses; aria2c, Transmission and rtorrent cannot add a peer
//! by address and need a tracker ([`Tracker`]: opentracker with a
//! whitelist); libtorrent's rate caps skip loopback peers unless every
//! address is put in the global peer class (the adapter does so).
//!
//! Torrents: pass any v1 .torrent (made with `weir create`, or with
//! [`crate::torrent::make`], which this crate provides without weir).

mod clients;
pub mod dht;
pub mod swarm;
mod tracker;

use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};

use crate::netns::Netns;
use crate::process::{Proc, Usage};
use crate::tmpdir::TempDir;
use crate::torrent::TorrentInfo;

pub use tracker::Tracker;

/// A BitTorrent client the harness can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Client {
    /// libtorrent-rasterbar (python3-libtorrent) with default settings.
    Libtorrent,
    /// libtorrent with `high_performance_seed()` settings.
    LibtorrentHps,
    /// aria2c.
    Aria2,
    /// transmission-daemon driven by transmission-remote.
    Transmission,
    /// rtorrent (headless, `system.daemon`).
    Rtorrent,
    /// qBittorrent (`qbittorrent-nox`, libtorrent 2.0 inside) driven
    /// through its Web API by a lab script.
    Qbittorrent,
    /// Any program (weir itself, say), from argument templates.
    Command(CommandClient),
}

/// A client given by argument templates. Placeholders replaced in each
/// argument: `{torrent}`, `{dir}`, `{ip}`, `{port}`, `{addr}` (ip:port),
/// `{peer}` (first peer or empty), `{peers}` (comma-separated),
/// `{ready}` (file to touch when seeding), `{tracker}` (the torrent's
/// announce URL or empty).
///
/// Seeding: ready when the `{ready}` file appears if the seed template uses
/// it, otherwise when `{addr}` accepts TCP connections. Leeching: done when
/// the program exits with status 0 (that moment is the completion time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandClient {
    /// Label used in logs and tables.
    pub name: String,
    /// Program and arguments for seeding.
    pub seed: Vec<String>,
    /// Program and arguments for leeching.
    pub leech: Vec<String>,
}

impl CommandClient {
    /// `weir seed` as a seeding lab client: `program` (the weir binary and
    /// its global flags, e.g. `--allow`), then `seed {torrent} {dir}
    /// --listen {addr} --no-trackers`, then `extra`. It does not leech.
    pub fn weir_seed<S: AsRef<str>>(program: &[S], extra: &[S]) -> Client {
        let seed = program
            .iter()
            .map(|s| s.as_ref().to_string())
            .chain(
                [
                    "seed",
                    "{torrent}",
                    "{dir}",
                    "--listen",
                    "{addr}",
                    "--no-trackers",
                ]
                .map(String::from),
            )
            .chain(extra.iter().map(|s| s.as_ref().to_string()))
            .collect();
        Client::Command(CommandClient {
            name: "weir".into(),
            seed,
            leech: Vec::new(),
        })
    }
}

impl Client {
    /// The real clients, for loops over "every client".
    pub const REAL: [Client; 6] = [
        Client::Libtorrent,
        Client::LibtorrentHps,
        Client::Aria2,
        Client::Transmission,
        Client::Rtorrent,
        Client::Qbittorrent,
    ];

    /// Short label: `libtorrent`, `libtorrent-hps`, `aria2c`,
    /// `transmission`, `rtorrent`, `qbittorrent` or the command's name.
    pub fn name(&self) -> &str {
        match self {
            Client::Libtorrent => "libtorrent",
            Client::LibtorrentHps => "libtorrent-hps",
            Client::Aria2 => "aria2c",
            Client::Transmission => "transmission",
            Client::Rtorrent => "rtorrent",
            Client::Qbittorrent => "qbittorrent",
            Client::Command(c) => &c.name,
        }
    }

    /// Parses a label as printed by [`Client::name`] (also `lt`, `lt-hps`,
    /// `aria2`, `qbt`). Not for [`Client::Command`].
    pub fn parse(s: &str) -> Option<Client> {
        Some(match s {
            "libtorrent" | "lt" => Client::Libtorrent,
            "libtorrent-hps" | "lt-hps" => Client::LibtorrentHps,
            "aria2c" | "aria2" => Client::Aria2,
            "transmission" => Client::Transmission,
            "rtorrent" => Client::Rtorrent,
            "qbittorrent" | "qbt" => Client::Qbittorrent,
            _ => return None,
        })
    }

    /// Programs that must be installed to run this client (for
    /// [`crate::ci::require_program`]).
    pub fn programs(&self) -> Vec<String> {
        match self {
            Client::Libtorrent | Client::LibtorrentHps => vec![clients::PYTHON.to_string()],
            Client::Aria2 => vec!["aria2c".into()],
            Client::Transmission => {
                vec!["transmission-daemon".into(), "transmission-remote".into()]
            }
            Client::Rtorrent => vec!["rtorrent".into()],
            Client::Qbittorrent => vec!["qbittorrent-nox".into(), clients::PYTHON.to_string()],
            Client::Command(c) => c
                .seed
                .first()
                .into_iter()
                .chain(c.leech.first())
                .cloned()
                .collect(),
        }
    }

    /// Whether, as a leecher, it can dial a peer given by address (without
    /// a tracker).
    pub fn can_dial_peer(&self) -> bool {
        matches!(
            self,
            Client::Libtorrent | Client::LibtorrentHps | Client::Qbittorrent | Client::Command(_)
        )
    }
}

/// Settings beyond the common contract.
#[derive(Clone, Debug)]
pub struct Options {
    /// Leech: peers to dial directly (clients that can, see
    /// [`Client::can_dial_peer`]; others use the torrent's tracker).
    pub peers: Vec<SocketAddr>,
    /// Seed (libtorrent only): keep dialling this leecher while no peer is
    /// connected (for Transmission, which refuses tracker-given 127/8 peers).
    pub dial: Option<SocketAddr>,
    /// Download cap in bytes/s (libtorrent only; also for loopback peers).
    pub download_limit: Option<u64>,
    /// Upload cap in bytes/s (libtorrent only; also for loopback peers).
    pub upload_limit: Option<u64>,
    /// Leech: give up after this long.
    pub timeout: Duration,
    /// Seed: give up if not seeding after this long (initial hash check).
    pub ready_timeout: Duration,
    /// Leech: sample the bytes the leecher has received every this often
    /// ([`LeechResult::progress`]).
    pub progress_every: Option<Duration>,
    /// Leech (libtorrent, Transmission): start from this magnet link, not
    /// the torrent file (which then only names the run and the output);
    /// the metadata comes from the peers (BEP 9). Transmission 3.00 reads
    /// no `x.pe` and drops tracker-given 127/8 peers, so its peer must dial
    /// it.
    pub magnet: Option<String>,
    /// Extra arguments appended to the client's command line
    /// (libtorrent: `--forced-enc` for MSE/PE with RC4 only, both ways,
    /// `--utp-only` for uTP with TCP off both ways;
    /// transmission-daemon: its own flags, e.g. `--encryption-required`;
    /// qBittorrent: `--encryption prefer|require|off` and `--protocol
    /// both|tcp|utp`, its Allow/Require/Disable encryption and peer
    /// transports).
    pub extra_args: Vec<String>,
    /// Transmission and qBittorrent: uTP on beside TCP (Transmission's
    /// `utp-enabled`, qBittorrent's protocol "TCP and uTP"; off by default,
    /// as every other client here runs TCP only unless a test asks).
    pub utp: bool,
    /// Run the client's program under this one: the command line becomes
    /// `wrapper... program args...` (e.g. `valgrind --tool=callgrind
    /// ...`). libtorrent and command clients only; others refuse it. A
    /// leecher under a wrapper gets the rest of [`Options::timeout`] to
    /// exit by itself after its completion report (a wrapper such as
    /// valgrind writes its results at the exit), not the usual 3 s.
    pub wrapper: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            dial: None,
            download_limit: None,
            upload_limit: None,
            timeout: Duration::from_secs(600),
            ready_timeout: Duration::from_secs(120),
            progress_every: None,
            magnet: None,
            extra_args: Vec::new(),
            utp: false,
            wrapper: Vec::new(),
        }
    }
}

/// One timed download.
#[derive(Clone, Debug)]
pub struct LeechResult {
    /// Seconds from process start to the client's completion report.
    pub seconds: f64,
    /// CPU, RSS and context switches of the leecher process (its whole run,
    /// including shutdown after completion).
    pub usage: Usage,
    /// How the leecher process ended (after being stopped by PID, for
    /// clients that keep running).
    pub status: ExitStatus,
    /// `(seconds since start, bytes received on the leecher's TCP
    /// sockets)` samples, when [`Options::progress_every`] was set. The
    /// bytes count every open connection of the leecher's address
    /// (`ss` `bytes_received`), so they include protocol overhead; the last
    /// point is the completion report with the payload length.
    pub progress: Vec<(f64, u64)>,
}

impl LeechResult {
    /// Payload bytes per second over [`LeechResult::seconds`].
    pub fn rate(&self, bytes: u64) -> f64 {
        bytes as f64 / self.seconds.max(1e-9)
    }
}

/// What an adapter launched: the process, and how it reports.
pub(crate) struct Launched {
    pub(crate) proc: Proc,
    /// File the client's hook touches when seeding (seed) or done (leech).
    pub(crate) flag: Option<PathBuf>,
    /// Transmission: the RPC address to drive it through.
    pub(crate) rpc: Option<SocketAddrV4>,
}

/// Starts `client` seeding `torrent` from `data_dir` (the directory that
/// holds the torrent's file or top directory) on `addr`, inside `ns`;
/// returns once it reports seeding. The returned [`Proc`] stops the client
/// (by PID) when dropped.
pub fn start_seed(
    ns: &Netns,
    client: &Client,
    torrent: &Path,
    data_dir: &Path,
    addr: SocketAddrV4,
) -> anyhow::Result<Proc> {
    start_seed_with(ns, client, torrent, data_dir, addr, &Options::default())
}

/// [`start_seed`] with [`Options`].
pub fn start_seed_with(
    ns: &Netns,
    client: &Client,
    torrent: &Path,
    data_dir: &Path,
    addr: SocketAddrV4,
    opts: &Options,
) -> anyhow::Result<Proc> {
    check_addr(addr)?;
    let info = TorrentInfo::read(torrent)?;
    let work = TempDir::new(&format!("bt-seed-{}", client.name()))?;
    let deadline = Instant::now() + opts.ready_timeout;
    let mut l = clients::launch(
        ns,
        client,
        clients::Role::Seed,
        torrent,
        &info,
        data_dir,
        addr,
        opts,
        &work,
    )?;
    l.proc.attach(work);
    if let Some(rpc) = l.rpc {
        clients::transmission_seed_ready(ns, &mut l.proc, rpc, deadline)?;
    } else if let Some(flag) = &l.flag {
        wait_flag(&mut l.proc, flag, deadline, "seeding")?;
    } else {
        // A command without {ready}: its listening port.
        let left = deadline.saturating_duration_since(Instant::now());
        ns.wait_port(SocketAddr::V4(addr), left)
            .map_err(|e| l.proc.failure(&format!("seeder not listening: {e:#}")))?;
    }
    tracing::info!(
        "{} seeding {} on {addr} (pid {})",
        client.name(),
        info.name,
        l.proc.pid()
    );
    Ok(l.proc)
}

/// Downloads `torrent` into `out_dir` with `client` on `addr` inside `ns`,
/// dialling `peer` if given (clients that can; the others use the
/// torrent's tracker); returns the time to completion and resource use.
pub fn leech(
    ns: &Netns,
    client: &Client,
    torrent: &Path,
    out_dir: &Path,
    addr: SocketAddrV4,
    peer: Option<SocketAddr>,
    timeout: Duration,
) -> anyhow::Result<LeechResult> {
    let opts = Options {
        peers: peer.into_iter().collect(),
        timeout,
        ..Options::default()
    };
    leech_with(ns, client, torrent, out_dir, addr, &opts)
}

/// [`leech`] with [`Options`].
pub fn leech_with(
    ns: &Netns,
    client: &Client,
    torrent: &Path,
    out_dir: &Path,
    addr: SocketAddrV4,
    opts: &Options,
) -> anyhow::Result<LeechResult> {
    check_addr(addr)?;
    let info = TorrentInfo::read(torrent)?;
    // With a magnet link a leecher that cannot dial may be dialled.
    if !client.can_dial_peer() && info.announce.is_none() && opts.magnet.is_none() {
        bail!(
            "{} cannot dial a peer by address and {} has no tracker",
            client.name(),
            torrent.display()
        );
    }
    if client.can_dial_peer()
        && opts.peers.is_empty()
        && info.announce.is_none()
        && opts.magnet.is_none()
    {
        bail!("no peer given and {} has no tracker", torrent.display());
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let work = TempDir::new(&format!("bt-leech-{}", client.name()))?;
    let t0_wall = SystemTime::now();
    let t0 = Instant::now();
    let deadline = t0 + opts.timeout;
    let mut l = clients::launch(
        ns,
        client,
        clients::Role::Leech,
        torrent,
        &info,
        out_dir,
        addr,
        opts,
        &work,
    )?;
    l.proc.attach(work);
    let mut progress = Vec::new();
    let mut next_sample = t0;
    let mut nap = Duration::from_millis(1);
    let seconds = loop {
        if let Some(every) = opts.progress_every
            && Instant::now() >= next_sample
        {
            progress.push((t0.elapsed().as_secs_f64(), rx_bytes(ns, *addr.ip())));
            next_sample += every;
        }
        if let Some(flag) = &l.flag
            && let Some(at) = flag_time(flag)
        {
            break at
                .duration_since(t0_wall)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
        }
        if let Some((st, _)) = l.proc.try_wait()? {
            let end = t0.elapsed().as_secs_f64();
            match &l.flag {
                None if st.success() => break end,
                Some(flag) if st.success() => {
                    // The hook may run just after the client exits.
                    if let Some(at) = wait_flag_after_exit(flag) {
                        break at
                            .duration_since(t0_wall)
                            .map(|d| d.as_secs_f64())
                            .unwrap_or(end);
                    }
                    break end;
                }
                _ => return Err(l.proc.failure(&format!("{} leech failed", client.name()))),
            }
        }
        if Instant::now() >= deadline {
            return Err(l.proc.failure(&format!(
                "{} leech timed out after {:?}",
                client.name(),
                opts.timeout
            )));
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(5));
    };
    if opts.progress_every.is_some() {
        // The completion report: the whole payload is in.
        progress.push((seconds, info.length));
    }
    // Clients that exit by themselves after completion get a moment to do
    // so; under a wrapper, what is left of the timeout.
    let grace = if opts.wrapper.is_empty() {
        Duration::from_secs(3)
    } else {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(3))
    };
    let (status, usage) = match l.proc.wait_timeout(grace)? {
        Some(done) => done,
        None => l.proc.kill_tree()?,
    };
    tracing::info!("{} leeched {} in {seconds:.3} s", client.name(), info.name);
    Ok(LeechResult {
        seconds,
        usage,
        status,
        progress,
    })
}

fn check_addr(addr: SocketAddrV4) -> anyhow::Result<()> {
    if !addr.ip().is_loopback() {
        bail!("BitTorrent clients are bound to 127.0.0.0/8 only, not {addr}");
    }
    if addr.port() == 0 {
        bail!("a port is needed (clients are given it explicitly)");
    }
    Ok(())
}

/// The modification time of `flag`, if it exists.
fn flag_time(flag: &Path) -> Option<SystemTime> {
    std::fs::metadata(flag).ok()?.modified().ok()
}

fn wait_flag_after_exit(flag: &Path) -> Option<SystemTime> {
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(t) = flag_time(flag) {
            return Some(t);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `flag` exists, failing if the process exits or `deadline`
/// passes first.
fn wait_flag(proc: &mut Proc, flag: &Path, deadline: Instant, what: &str) -> anyhow::Result<()> {
    let mut nap = Duration::from_millis(1);
    loop {
        if flag.exists() {
            return Ok(());
        }
        if proc.try_wait()?.is_some() {
            return Err(proc.failure(&format!("exited before {what}")));
        }
        if Instant::now() >= deadline {
            return Err(proc.failure(&format!("not {what} in time")));
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}

/// Bytes received so far on the TCP connections whose local address is
/// `ip`, inside `ns` (from `ss -tin`). Connections that have closed no
/// longer count.
pub fn rx_bytes(ns: &Netns, ip: std::net::Ipv4Addr) -> u64 {
    let out = ns
        .command("ss")
        .args(["-tinH", "state", "established", "src"])
        .arg(format!("{ip}/32"))
        .output();
    let Ok(out) = out else { return 0 };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_received:"))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

/// The module every libtorrent adapter script imports (its lockdown
/// settings and helpers), written beside each one.
const LT_COMMON: &str = include_str!("lt_common.py");

/// Writes a libtorrent adapter script `name` holding `body` into `dir`,
/// with `lt_common.py` beside it (Python finds it in the script's own
/// directory), and returns the script's path.
pub(crate) fn write_lt_script(dir: &Path, name: &str, body: &str) -> std::io::Result<PathBuf> {
    std::fs::write(dir.join("lt_common.py"), LT_COMMON)?;
    let script = dir.join(name);
    std::fs::write(&script, body)?;
    Ok(script)
}
