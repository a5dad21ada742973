//! Shared plumbing of the BitTorrent bench scenarios (`ramp`, `cap`, `rtt`,
//! and any other that needs it): deterministic payloads and their torrents,
//! seeders (weir or libtorrent) that leechers dial directly, weir leecher
//! command templates, the link emulator (`weir linkem`) as a process,
//! a fake tracker announce (so a tracker hands out an address of our
//! choosing, e.g. the emulator's), and sampling of the bytes a leecher has
//! received over time from the kernel's per-socket counters (`ss`).
//!
//! Everything runs inside one [`Netns`] that holds only `lo`; every weir
//! process gets the loopback-only policy from [`BenchConfig::weir_argv`].

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::bt::{self, Client, CommandClient};
use weir_lab::torrent::{self, TorrentInfo};
use weir_lab::{Netns, Proc, TempDir};

use crate::BenchConfig;
use crate::common::BENCH_ALLOW;

/// BitTorrent block size: what one request asks for.
pub const BLOCK: u64 = 16 * 1024;

/// A deterministic payload file and a v1 torrent of it (no announce URL).
#[derive(Clone, Debug)]
pub struct Payload {
    /// The directory holding the file (a seeder's data directory).
    pub data_dir: PathBuf,
    /// The payload file.
    pub file: PathBuf,
    /// Its torrent, without an announce URL (leechers dial peers directly).
    pub torrent: PathBuf,
    /// What the torrent says.
    pub info: TorrentInfo,
}

impl Payload {
    /// Writes `size` bytes of payload `seed` to `dir/name` and a torrent of
    /// it with `piece_len`-byte pieces beside `dir` (`<dir>.<name>.torrent`),
    /// so the data directory holds only the payload.
    pub fn create(
        dir: &Path,
        name: &str,
        size: u64,
        seed: u64,
        piece_len: u64,
    ) -> anyhow::Result<Payload> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = dir.join(name);
        weir_lab::payload::write(&file, size, seed)?;
        let torrent = sibling(dir, &format!("{name}.torrent"))?;
        let info = torrent::make(&file, piece_len, None, &torrent)?;
        Ok(Payload {
            data_dir: dir.to_path_buf(),
            file,
            torrent,
            info,
        })
    }

    /// A copy of the torrent with `announce` as its tracker, written next to
    /// the plain one: same info dictionary, so the same info-hash (checked).
    pub fn with_announce(&self, announce: &str) -> anyhow::Result<PathBuf> {
        let name = self
            .torrent
            .file_stem()
            .and_then(|s| s.to_str())
            .context("torrent file name")?;
        let out = self
            .torrent
            .with_file_name(format!("{name}.tracker.torrent"));
        let info = torrent::make(&self.file, self.piece_len()?, Some(announce), &out)?;
        if info.info_hash != self.info.info_hash {
            bail!("torrent with announce has another info-hash");
        }
        Ok(out)
    }

    /// The piece length recorded in the torrent.
    fn piece_len(&self) -> anyhow::Result<u64> {
        let raw = std::fs::read(&self.torrent)?;
        let key = b"12:piece lengthi";
        let at = raw
            .windows(key.len())
            .position(|w| w == key)
            .context("torrent has no piece length")?
            + key.len();
        let end = raw[at..]
            .iter()
            .position(|&b| b == b'e')
            .context("bad piece length")?
            + at;
        Ok(std::str::from_utf8(&raw[at..end])?.parse()?)
    }

    /// Payload length in bytes.
    pub fn len(&self) -> u64 {
        self.info.length
    }

    /// Whether the payload is empty (never, for payloads this module makes).
    pub fn is_empty(&self) -> bool {
        self.info.length == 0
    }
}

/// `<parent of dir>/<dir name>.<file>`: a file beside `dir`, not in it.
fn sibling(dir: &Path, file: &str) -> anyhow::Result<PathBuf> {
    let base = dir
        .file_name()
        .and_then(|n| n.to_str())
        .context("data directory has no name")?;
    let parent = dir.parent().unwrap_or(Path::new("."));
    Ok(parent.join(format!("{base}.{file}")))
}

/// Which program seeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeederKind {
    /// `weir seed`.
    Weir,
    /// A real client through the `weir_lab::bt` adapter (libtorrent:
    /// default or high-performance-seed settings).
    Real(Client),
}

impl SeederKind {
    /// Parses `weir`, `lt-hps`/`libtorrent-hps`, `lt`/`libtorrent`,
    /// `rtorrent`, `aria2c`, `transmission`.
    pub fn parse(s: &str) -> anyhow::Result<SeederKind> {
        if s == "weir" {
            return Ok(SeederKind::Weir);
        }
        Client::parse(s).map(SeederKind::Real).with_context(|| {
            format!(
                "unknown seeder {s:?} (weir, lt-hps, libtorrent, rtorrent, aria2c, transmission)"
            )
        })
    }

    /// Short label for tables.
    pub fn name(&self) -> &str {
        match self {
            SeederKind::Weir => "weir",
            SeederKind::Real(c) => c.name(),
        }
    }
}

/// Starts a seeder of `payload` on `addr` inside `ns` and returns once it
/// is seeding. `max_up`: upload cap in bytes/s (weir `--max-up`; libtorrent
/// `upload_limit`, applied to loopback peers too; others: refused).
pub fn start_seeder(
    cfg: &BenchConfig,
    ns: &Netns,
    kind: &SeederKind,
    payload: &Payload,
    addr: SocketAddrV4,
    max_up: Option<u64>,
) -> anyhow::Result<Proc> {
    match kind {
        SeederKind::Weir => {
            let mut extra = Vec::new();
            if let Some(r) = max_up {
                extra.extend(["--max-up".to_string(), r.to_string()]);
            }
            let client = CommandClient::weir_seed(&cfg.weir_argv(), &extra);
            let mut p = bt::start_seed(ns, &client, &payload.torrent, &payload.data_dir, addr)?;
            // weir listens before its data check ends: wait for its
            // "seeding" progress line (printed every 5 s when not a tty).
            wait_for_log(&mut p, ": seeding ", Duration::from_secs(120))?;
            Ok(p)
        }
        SeederKind::Real(c) => {
            let is_lt = matches!(c, Client::Libtorrent | Client::LibtorrentHps);
            if max_up.is_some() && !is_lt {
                bail!(
                    "{}: an upload cap is supported for weir and libtorrent only",
                    c.name()
                );
            }
            let opts = bt::Options {
                upload_limit: max_up,
                ..bt::Options::default()
            };
            bt::start_seed_with(ns, c, &payload.torrent, &payload.data_dir, addr, &opts)
        }
    }
}

/// Waits until `proc`'s stderr log holds a line containing `needle`;
/// fails if it exits first or after `timeout`.
pub fn wait_for_log(proc: &mut Proc, needle: &str, timeout: Duration) -> anyhow::Result<()> {
    let path = proc
        .stderr_log()
        .map(Path::to_path_buf)
        .context("process has no stderr log")?;
    let deadline = Instant::now() + timeout;
    loop {
        if std::fs::read_to_string(&path).is_ok_and(|s| s.contains(needle)) {
            return Ok(());
        }
        if proc.try_wait()?.is_some() {
            return Err(proc.failure(&format!("exited before printing {needle:?}")));
        }
        if Instant::now() >= deadline {
            return Err(proc.failure(&format!("no {needle:?} within {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// weir as a leecher for `weir_lab::bt::leech_with`: `weir get {torrent} -o
/// {dir} --listen {addr} --no-trackers` plus `extra` (e.g. `--peer A`,
/// `--max-down 20MB/s`). Done when it exits 0.
pub fn weir_leecher(cfg: &BenchConfig, name: &str, extra: &[String]) -> Client {
    let mut leech = cfg.weir_argv();
    leech.extend(
        [
            "get",
            "{torrent}",
            "-o",
            "{dir}",
            "--listen",
            "{addr}",
            "--no-trackers",
        ]
        .map(String::from),
    );
    leech.extend(extra.iter().cloned());
    Client::Command(CommandClient {
        name: name.into(),
        seed: Vec::new(),
        leech,
    })
}

/// A weir command line inside `ns` (policy arguments and `WEIR_ALLOW`
/// included): add the subcommand and its arguments.
pub fn weir_in(cfg: &BenchConfig, ns: &Netns) -> std::process::Command {
    let mut c = ns.command(&cfg.weir_exe);
    c.env("WEIR_ALLOW", BENCH_ALLOW)
        .args(["--allow", BENCH_ALLOW]);
    c
}

/// How a weir process run by [`run_weir`] ended.
#[derive(Debug)]
pub struct WeirRun {
    /// Exit status; `None` when it was stopped at `stop_after`.
    pub status: Option<std::process::ExitStatus>,
    /// CPU, RSS and context switches (`wait4`).
    pub usage: weir_lab::Usage,
    /// Seconds from spawn to exit (or to the stop).
    pub seconds: f64,
    /// Its stderr (progress and summary lines).
    pub stderr: String,
}

impl WeirRun {
    /// Whether it exited by itself with status 0.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Seconds in weir's own summary line (`... complete: SIZE in 3.21 s
    /// (...)`), measured by weir from its start to completion.
    pub fn reported_seconds(&self) -> Option<f64> {
        let line = self
            .stderr
            .lines()
            .rev()
            .find(|l| l.contains("complete: "))?;
        let rest = &line[line.find("complete: ")?..];
        let after = &rest[rest.find(" in ")? + 4..];
        after.split(" s").next()?.trim().parse().ok()
    }
}

/// Runs `weir ARGS` inside `ns` (loopback policy added), logging to
/// `log_dir`. With `stop_after`, ends it by PID at that moment if it is
/// still running (a measurement window, not a failure); otherwise waits
/// for it to exit, at most `timeout` (then it is ended and this fails).
pub fn run_weir(
    cfg: &BenchConfig,
    ns: &Netns,
    name: &str,
    args: &[String],
    log_dir: &Path,
    stop_after: Option<Duration>,
    timeout: Duration,
) -> anyhow::Result<WeirRun> {
    let mut c = weir_in(cfg, ns);
    c.args(args);
    run_weir_cmd(&mut c, name, log_dir, stop_after, timeout)
}

/// [`run_weir`] for a command the caller built (e.g. with [`weir_in`] and
/// extra environment): spawned logged to `log_dir`, stopped at
/// `stop_after` or waited for at most `timeout`, its stderr read back.
pub fn run_weir_cmd(
    c: &mut std::process::Command,
    name: &str,
    log_dir: &Path,
    stop_after: Option<Duration>,
    timeout: Duration,
) -> anyhow::Result<WeirRun> {
    let mut p = Proc::spawn_logged(name, c, log_dir)?;
    let limit = stop_after.unwrap_or(timeout).min(timeout);
    let (status, usage) = match p.wait_timeout(limit)? {
        Some((st, u)) => (Some(st), u),
        None if stop_after.is_some_and(|s| s <= timeout) => {
            let (_, u) = p.kill_tree()?;
            (None, u)
        }
        None => return Err(p.failure(&format!("{name} did not finish within {timeout:?}"))),
    };
    let stderr = p
        .stderr_log()
        .and_then(|l| std::fs::read_to_string(l).ok())
        .unwrap_or_default();
    Ok(WeirRun {
        status,
        seconds: usage.wall_s,
        usage,
        stderr,
    })
}

/// An emulated link: one-way delay per direction, rate cap per direction
/// and queue bound, as `weir linkem` takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// One-way delay (`75ms`).
    pub delay: String,
    /// Rate per direction (`50MB/s`), or none.
    pub rate: Option<String>,
    /// Queue per direction (`4MiB`), or linkem's default.
    pub queue: Option<String>,
}

impl LinkSpec {
    /// A short description: `150 ms RTT, 50MB/s`.
    pub fn describe(&self) -> String {
        let rtt = parse_ms(&self.delay)
            .map(|d| format!("{} ms RTT", 2.0 * d))
            .unwrap_or_else(|| format!("{} one-way", self.delay));
        let mut s = rtt;
        if let Some(r) = &self.rate {
            s.push_str(&format!(", {r} each way"));
        }
        if let Some(q) = &self.queue {
            s.push_str(&format!(", queue {q}"));
        }
        s
    }
}

/// `75ms` / `0.075s` / `75` (ms) in milliseconds.
pub fn parse_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Some(v) = s.strip_suffix("ms") {
        v.trim().parse().ok()
    } else if let Some(v) = s.strip_suffix('s') {
        v.trim().parse::<f64>().ok().map(|x| x * 1000.0)
    } else {
        s.parse().ok()
    }
}

/// A running `weir linkem` (ended by PID on drop).
#[derive(Debug)]
pub struct Linkem {
    /// The process.
    pub proc: Proc,
    /// Where it accepts connections (dial this to reach the target).
    pub addr: SocketAddr,
    _logs: TempDir,
}

impl Linkem {
    /// Starts `weir linkem --listen listen --connect target` with `link`
    /// inside `ns`; returns once it prints that it listens.
    pub fn start(
        cfg: &BenchConfig,
        ns: &Netns,
        listen: SocketAddrV4,
        target: SocketAddr,
        link: &LinkSpec,
    ) -> anyhow::Result<Linkem> {
        let logs = TempDir::new("linkem")?;
        let mut c = weir_in(cfg, ns);
        c.arg("linkem")
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--connect")
            .arg(target.to_string())
            .arg("--delay")
            .arg(&link.delay);
        if let Some(r) = &link.rate {
            c.arg("--rate").arg(r);
        }
        if let Some(q) = &link.queue {
            c.arg("--queue").arg(q);
        }
        let mut proc = Proc::spawn_logged("linkem", &mut c, logs.path())?;
        let out = proc
            .stdout_log()
            .map(Path::to_path_buf)
            .context("linkem has no stdout log")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::fs::read_to_string(&out).is_ok_and(|s| s.contains("linkem listening on")) {
                break;
            }
            if proc.try_wait()?.is_some() {
                return Err(proc.failure("linkem exited"));
            }
            if Instant::now() >= deadline {
                return Err(proc.failure("linkem not listening after 20 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Linkem {
            proc,
            addr: SocketAddr::V4(listen),
            _logs: logs,
        })
    }
}

/// Announces to the HTTP tracker at `tracker` (inside `ns`) that a seeder
/// of `info_hash` listens on `ip:port`: the request comes from a socket
/// bound to `ip`, which is the address trackers record. Lets a tracker hand
/// out an address nothing announces by itself (the link emulator's).
pub fn announce_as(
    ns: &Netns,
    tracker: SocketAddrV4,
    info_hash: &[u8; 20],
    ip: Ipv4Addr,
    port: u16,
) -> anyhow::Result<String> {
    let mut q = String::from("/announce?info_hash=");
    for b in info_hash {
        q.push_str(&format!("%{b:02X}"));
    }
    q.push_str(&format!(
        "&peer_id=-WB0001-{:012}&port={port}&uploaded=0&downloaded=0&left=0&event=started&compact=1&numwant=0",
        u64::from(port) * 7919
    ));
    let req = format!("GET {q} HTTP/1.0\r\nHost: {tracker}\r\nConnection: close\r\n\r\n");
    let resp = ns.try_run_in(move || -> anyhow::Result<String> {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        s.bind(&SocketAddr::from((ip, 0)).into())?;
        s.connect_timeout(&SocketAddr::V4(tracker).into(), Duration::from_secs(5))?;
        let mut s: std::net::TcpStream = s.into();
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(req.as_bytes())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    })??;
    if !resp.starts_with("HTTP/1.") || !resp.contains(" 200 ") || resp.contains("failure reason") {
        bail!(
            "tracker refused the announce: {}",
            resp.chars().take(300).collect::<String>()
        );
    }
    Ok(resp)
}

/// One TCP socket's receive counter, as `ss -ti` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SockRx {
    /// The socket's own address.
    pub local: SocketAddr,
    /// The address it is connected to.
    pub peer: SocketAddr,
    /// `bytes_received`.
    pub rx: u64,
}

/// Parses `ss -tinH state established` output (one line per socket with
/// `Recv-Q Send-Q Local Peer`, then an indented line of details). IPv4
/// addresses mapped into IPv6 are given back as IPv4.
pub fn parse_ss(text: &str) -> Vec<SockRx> {
    let mut out = Vec::new();
    let mut cur: Option<(SocketAddr, SocketAddr)> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            let f: Vec<&str> = line.split_whitespace().collect();
            cur = match (f.get(2), f.get(3)) {
                (Some(l), Some(p)) => match (parse_sock(l), parse_sock(p)) {
                    (Some(l), Some(p)) => Some((l, p)),
                    _ => None,
                },
                _ => None,
            };
            continue;
        }
        if let Some((local, peer)) = cur.take()
            && let Some(rx) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("bytes_received:"))
                .and_then(|n| n.parse().ok())
        {
            out.push(SockRx { local, peer, rx });
        }
    }
    out
}

fn parse_sock(s: &str) -> Option<SocketAddr> {
    // ss may append an interface: `127.0.0.1%lo:80`.
    let s = match (s.find('%'), s.rfind(':')) {
        (Some(p), Some(c)) if p < c => format!("{}{}", &s[..p], &s[c..]),
        _ => s.to_string(),
    };
    let a: SocketAddr = s.parse().ok()?;
    Some(match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => a,
        },
        v4 => v4,
    })
}

/// Cumulative bytes received over time: `(seconds, bytes)` in time order.
pub type Series = Vec<(f64, u64)>;

/// Folds `ss` snapshots into per-peer cumulative byte counts: each socket's
/// last counter is kept after it closes, so a reconnect never makes the
/// total go down.
#[derive(Debug, Default)]
pub struct RxTotals {
    last: HashMap<(SocketAddr, SocketAddr), u64>,
}

impl RxTotals {
    /// Takes a snapshot into account.
    pub fn update(&mut self, socks: &[SockRx]) {
        for s in socks {
            let e = self.last.entry((s.local, s.peer)).or_insert(0);
            *e = (*e).max(s.rx);
        }
    }

    /// Bytes received so far, summed over sockets connected to `peer`
    /// (port 0: to any port of its IP, e.g. a peer that dials in from
    /// ephemeral ports as well as being dialled).
    pub fn to_peer(&self, peer: SocketAddr) -> u64 {
        self.last
            .iter()
            .filter(|((_, p), _)| *p == peer || (peer.port() == 0 && p.ip() == peer.ip()))
            .map(|(_, v)| v)
            .sum()
    }
}

/// Runs `f` while a helper thread inside `ns` samples, every `every`, the
/// bytes received by the sockets connected to each of `peers` (the
/// leecher's side: its sockets' peer address is the seeder's, or the link
/// emulator's). Returns `f`'s result and one series per peer, with time in
/// seconds from just before `f` started. The sampler runs `ss` directly in
/// the namespace (no `ip netns exec` per sample).
pub fn sample_rx_while<T>(
    ns: &Netns,
    peers: &[SocketAddr],
    every: Duration,
    f: impl FnOnce() -> T,
) -> anyhow::Result<(T, Vec<Series>)> {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let sampler = s.spawn(move || {
            ns.try_run_in(move || -> anyhow::Result<Vec<Series>> {
                let mut totals = RxTotals::default();
                let mut series: Vec<Series> = vec![Vec::new(); peers.len()];
                let mut next = t0;
                loop {
                    let out = std::process::Command::new("ss")
                        .args(["-tinH", "state", "established"])
                        .stdin(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .output()
                        .context("running ss")?;
                    let t = t0.elapsed().as_secs_f64();
                    totals.update(&parse_ss(&String::from_utf8_lossy(&out.stdout)));
                    for (i, p) in peers.iter().enumerate() {
                        series[i].push((t, totals.to_peer(*p)));
                    }
                    next += every;
                    let now = Instant::now();
                    if next < now {
                        next = now;
                    }
                    match stop_rx.recv_timeout(next - now) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return Ok(series),
                    }
                }
            })
        });
        let r = f();
        drop(stop_tx);
        let series = sampler
            .join()
            .map_err(|_| anyhow::anyhow!("rx sampler panicked"))???;
        Ok((r, series))
    })
}

/// The value of a cumulative series at time `t` (linear between samples;
/// 0 before the first; the last value after the last).
pub fn value_at(series: &[(f64, u64)], t: f64) -> f64 {
    let Some(first) = series.first() else {
        return 0.0;
    };
    if t <= first.0 {
        return if t == first.0 { first.1 as f64 } else { 0.0 };
    }
    for w in series.windows(2) {
        let ((t0, v0), (t1, v1)) = (w[0], w[1]);
        if t <= t1 {
            if t1 <= t0 {
                return v1 as f64;
            }
            let f = (t - t0) / (t1 - t0);
            return v0 as f64 + f * (v1 as f64 - v0 as f64);
        }
    }
    series.last().map_or(0.0, |p| p.1 as f64)
}

/// Bytes per second between `t1` and `t2` of a cumulative series.
pub fn rate_between(series: &[(f64, u64)], t1: f64, t2: f64) -> f64 {
    if t2 <= t1 {
        return f64::NAN;
    }
    (value_at(series, t2) - value_at(series, t1)) / (t2 - t1)
}

/// The first time a cumulative series reaches `bytes` (interpolated), if it
/// does.
pub fn time_reaching(series: &[(f64, u64)], bytes: u64) -> Option<f64> {
    let mut prev: Option<(f64, u64)> = None;
    for &(t, v) in series {
        if v >= bytes {
            return Some(match prev {
                Some((pt, pv)) if v > pv => pt + (t - pt) * (bytes - pv) as f64 / (v - pv) as f64,
                _ => t,
            });
        }
        prev = Some((t, v));
    }
    None
}

/// Truncates a sampled series at `done` seconds and ends it with the
/// payload length there (the client's completion report), so counters of
/// closed sockets or protocol overhead do not show past completion.
pub fn finish_series(series: &mut Series, done: Option<f64>, payload: u64) {
    if let Some(d) = done {
        series.retain(|p| p.0 < d);
        series.push((d, payload));
    }
}

/// Accepts one connection on `l` within `timeout` (the listener is made
/// non-blocking and polled every millisecond, so a peer that never comes
/// cannot hang the bench); the connection is returned blocking.
pub fn accept_within(
    l: &std::net::TcpListener,
    timeout: Duration,
) -> anyhow::Result<std::net::TcpStream> {
    l.set_nonblocking(true)?;
    let deadline = Instant::now() + timeout;
    loop {
        match l.accept() {
            Ok((c, _)) => {
                c.set_nonblocking(false)?;
                return Ok(c);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!("no connection within {timeout:?}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e).context("accept"),
        }
    }
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), as text.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// Bytes as MiB.
pub fn mib(b: f64) -> f64 {
    b / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SS: &str = "0      0      127.0.0.1:43210      127.0.0.4:7000 \n\
\t cubic wscale:7,7 rto:201 bytes_sent:68 bytes_acked:69 bytes_received:1048576 segs_out:10\n\
0      0      127.0.0.4:7000      127.0.0.1:43210 \n\
\t cubic bytes_sent:1048576 bytes_received:68\n\
0      0      [::ffff:127.0.0.3]:6882      [::ffff:127.0.0.2]:6881 \n\
\t cubic bytes_received:500\n\
0      0      127.0.0.1%lo:5000      127.0.0.9:6969 \n\
\t cubic bytes_acked:1\n";

    #[test]
    fn parses_ss_output() {
        let v = parse_ss(SS);
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(v[0].peer, "127.0.0.4:7000".parse().unwrap());
        assert_eq!(v[0].rx, 1_048_576);
        assert_eq!(v[1].local, "127.0.0.4:7000".parse().unwrap());
        assert_eq!(v[1].rx, 68);
        assert_eq!(v[2].local, "127.0.0.3:6882".parse().unwrap());
        assert_eq!(v[2].peer, "127.0.0.2:6881".parse().unwrap());
        assert!(parse_ss("garbage\n\tbytes_received:5\n").is_empty());
        assert!(parse_ss("").is_empty());
    }

    #[test]
    fn totals_survive_a_closed_socket() {
        let emu: SocketAddr = "127.0.0.4:7000".parse().unwrap();
        let mut t = RxTotals::default();
        t.update(&parse_ss(SS));
        assert_eq!(t.to_peer(emu), 1_048_576);
        // The socket closed; a new one to the same peer has 10 bytes.
        t.update(&[SockRx {
            local: "127.0.0.1:43999".parse().unwrap(),
            peer: emu,
            rx: 10,
        }]);
        assert_eq!(t.to_peer(emu), 1_048_586);
        assert_eq!(t.to_peer("127.0.0.9:1".parse().unwrap()), 0);
        // Port 0: every socket to that IP, whatever its port.
        t.update(&[SockRx {
            local: "127.0.0.1:43998".parse().unwrap(),
            peer: "127.0.0.4:7001".parse().unwrap(),
            rx: 5,
        }]);
        assert_eq!(t.to_peer(emu), 1_048_586);
        assert_eq!(t.to_peer("127.0.0.4:0".parse().unwrap()), 1_048_591);
        assert_eq!(t.to_peer("127.0.0.5:0".parse().unwrap()), 0);
    }

    #[test]
    fn interpolates_series() {
        let s = vec![(0.5, 0), (1.5, 100), (2.5, 300)];
        assert_eq!(value_at(&s, 0.0), 0.0);
        assert_eq!(value_at(&s, 1.0), 50.0);
        assert_eq!(value_at(&s, 2.0), 200.0);
        assert_eq!(value_at(&s, 9.0), 300.0);
        assert_eq!(value_at(&[], 1.0), 0.0);
        assert_eq!(rate_between(&s, 1.0, 2.0), 150.0);
        assert!(rate_between(&s, 2.0, 1.0).is_nan());
        assert_eq!(time_reaching(&s, 200), Some(2.0));
        assert_eq!(time_reaching(&s, 301), None);
        let mut f = s.clone();
        finish_series(&mut f, Some(2.0), 250);
        assert_eq!(f, vec![(0.5, 0), (1.5, 100), (2.0, 250)]);
        let mut g = s.clone();
        finish_series(&mut g, None, 250);
        assert_eq!(g, s);
    }

    #[test]
    fn parses_summaries() {
        let r = WeirRun {
            status: None,
            usage: weir_lab::Usage::default(),
            seconds: 1.0,
            stderr: "x: downloading 5%\nramp.bin: complete: 268.4 MB in 3.21 s (83.6 MB/s), uploaded 0 B\n".into(),
        };
        assert_eq!(r.reported_seconds(), Some(3.21));
        assert!(!r.succeeded());
        let none = WeirRun {
            stderr: "stopped at 5%".into(),
            ..r
        };
        assert_eq!(none.reported_seconds(), None);
    }

    #[test]
    fn parses_durations_and_kinds() {
        assert_eq!(parse_ms("75ms"), Some(75.0));
        assert_eq!(parse_ms("0.5s"), Some(500.0));
        assert_eq!(parse_ms("x"), None);
        let l = LinkSpec {
            delay: "75ms".into(),
            rate: Some("50MB/s".into()),
            queue: None,
        };
        assert_eq!(l.describe(), "150 ms RTT, 50MB/s each way");
        assert_eq!(SeederKind::parse("weir").unwrap(), SeederKind::Weir);
        assert_eq!(
            SeederKind::parse("lt-hps").unwrap(),
            SeederKind::Real(Client::LibtorrentHps)
        );
        assert!(SeederKind::parse("nope").is_err());
    }

    #[test]
    fn payload_torrents_share_the_info_hash() {
        let dir = TempDir::new("bt-setup-test").unwrap();
        let p = Payload::create(&dir.path().join("seed"), "x.bin", 100_000, 3, 32 * 1024).unwrap();
        assert_eq!(p.len(), 100_000);
        assert!(!p.torrent.starts_with(&p.data_dir));
        assert_eq!(p.piece_len().unwrap(), 32 * 1024);
        let t = p.with_announce("http://127.0.0.9:6969/announce").unwrap();
        let info = TorrentInfo::read(&t).unwrap();
        assert_eq!(info.info_hash, p.info.info_hash);
        assert_eq!(
            info.announce.as_deref(),
            Some("http://127.0.0.9:6969/announce")
        );
    }
}
