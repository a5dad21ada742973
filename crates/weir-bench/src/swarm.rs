//! Scenario `swarm`: a swarm of mixed real clients through a tracker, in a
//! namespace holding only `lo`, each peer on its own 127.0.0.x: opentracker,
//! one libtorrent seeder (`high_performance_seed`, upload capped at
//! `rate=50MB/s` for loopback peers too, DHT/LSD/UPnP/NAT-PMP/PEX/uTP
//! off), and leechers started together on the same torrent (`size=1GiB`,
//! or `--size-mib`; `piece_kib=1024`): libtorrent x3 (default settings),
//! aria2c, Transmission and weir x2 (`weir get --seed --no-dht --no-pex
//! --transports tcp`, the loopback policy). Then the same swarm with each
//! weir replaced by a libtorrent leecher on its address, in the same run.
//! Every leecher stays in the swarm (seeding) until the last one is done.
//!
//! Measured per leecher: completion time from the moment the leechers
//! were started (t0), bytes it received from the seeder and from the other
//! leechers and bytes it sent to them: the kernel's per-socket counters
//! (`ss -ti` `bytes_received` on both ends of every connection, sampled
//! every `sample_ms=200`), so every client is measured the same way
//! (BitTorrent framing included, about 0.1%). Cross-checks: libtorrent's
//! own payload totals and weir's summary line (`own up`). The seeder's
//! copies (payload bytes it sent / size) and utilisation (those bytes /
//! (rate x swarm time)); the swarm's completion time (last leecher done).
//! Goals (issue 13): weir finishes first and within 1.15x of the floor
//! (size / rate); each weir uploads at least what it downloads from the
//! other leechers; the swarm with weir finishes no later than without.
//! Every leecher's file is compared with the payload after each swarm.
//! `--runs` (default 3): median of each cell; a PNG chart per swarm (the
//! first run) of every leecher's bytes received over time.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use weir_lab::bt::swarm::{self, Member, SeedOptions};
use weir_lab::bt::{Client, CommandClient, Options, Tracker};
use weir_lab::{Netns, TempDir, payload};

use crate::BenchConfig;
use crate::bt_setup::{Payload, finish_series, load_average, mib, parse_ss};
use crate::chart;
use crate::report::{Metric, Report};
use crate::sayln;

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["size", "piece_kib", "rate", "sample_ms", "timeout"];

const TRACKER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6969);
const SEED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), 6881);
const PORT: u16 = 6881;
const PAYLOAD_SEED: u64 = 0x5a42;
/// The most weir may take against the floor (issue 13).
const FLOOR_GOAL: f64 = 1.15;
/// What weir logs (target `milestone`) once every piece is verified.
const WEIR_DONE: &str = ": every piece verified";
const WEIR_LOG: &str = "warn,weir=info,weir_runtime=info,milestone=info";

/// Which program a leecher is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Libtorrent,
    Aria2,
    Transmission,
    Weir,
}

/// One leecher's place in a swarm.
#[derive(Clone, Debug)]
struct Slot {
    label: String,
    kind: Kind,
    addr: SocketAddrV4,
}

fn leecher_addr(i: u8) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 10 + i), PORT)
}

/// The leechers of a swarm: Transmission first (it must be dialled, so it
/// is started and announced before the others), then libtorrent x3,
/// aria2c, and weir x2 or two more libtorrent leechers on their addresses.
fn slots(with_weir: bool) -> Vec<Slot> {
    let mut v = vec![Slot {
        label: "transmission".into(),
        kind: Kind::Transmission,
        addr: leecher_addr(0),
    }];
    for i in 1..=3u8 {
        v.push(Slot {
            label: format!("libtorrent {i}"),
            kind: Kind::Libtorrent,
            addr: leecher_addr(i),
        });
    }
    v.push(Slot {
        label: "aria2c".into(),
        kind: Kind::Aria2,
        addr: leecher_addr(4),
    });
    for i in 1..=2u8 {
        v.push(if with_weir {
            Slot {
                label: format!("weir {i}"),
                kind: Kind::Weir,
                addr: leecher_addr(4 + i),
            }
        } else {
            Slot {
                label: format!("libtorrent {} (for weir {i})", 3 + i),
                kind: Kind::Libtorrent,
                addr: leecher_addr(4 + i),
            }
        });
    }
    v
}

/// Cumulative bytes between addresses: `(from, to)` -> bytes `to`
/// received from `from`.
type Matrix = HashMap<(Ipv4Addr, Ipv4Addr), u64>;

fn v4(a: SocketAddr) -> Option<Ipv4Addr> {
    match a.ip() {
        IpAddr::V4(ip) => Some(ip),
        IpAddr::V6(ip) => ip.to_ipv4_mapped(),
    }
}

/// Folds `ss` snapshots: each socket's last counter is kept after it
/// closes, so a matrix never goes down.
#[derive(Debug, Default)]
struct Sockets {
    last: HashMap<(SocketAddr, SocketAddr), u64>,
}

impl Sockets {
    fn update(&mut self, text: &str) {
        for s in parse_ss(text) {
            let e = self.last.entry((s.local, s.peer)).or_insert(0);
            *e = (*e).max(s.rx);
        }
    }

    fn matrix(&self) -> Matrix {
        let mut m = Matrix::new();
        for ((local, peer), rx) in &self.last {
            if let (Some(to), Some(from)) = (v4(*local), v4(*peer)) {
                *m.entry((from, to)).or_insert(0) += rx;
            }
        }
        m
    }
}

/// Runs `f` while a thread inside `ns` samples every socket's counters
/// every `every` (and once more when `f` returns); the matrices over time
/// (seconds from `t0`).
fn sample_while<T>(
    ns: &Netns,
    t0: Instant,
    every: Duration,
    f: impl FnOnce() -> T,
) -> anyhow::Result<(T, Vec<(f64, Matrix)>)> {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let sampler = s.spawn(move || {
            ns.try_run_in(move || -> anyhow::Result<Vec<(f64, Matrix)>> {
                let mut socks = Sockets::default();
                let mut out = Vec::new();
                let mut next = Instant::now();
                loop {
                    let o = std::process::Command::new("ss")
                        .args(["-tinH", "state", "established"])
                        .stdin(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .output()
                        .context("running ss")?;
                    socks.update(&String::from_utf8_lossy(&o.stdout));
                    out.push((t0.elapsed().as_secs_f64(), socks.matrix()));
                    next += every;
                    let now = Instant::now();
                    let wait = next.saturating_duration_since(now);
                    match stop_rx.recv_timeout(wait) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        // One last sample after the stop.
                        _ => {
                            let o = std::process::Command::new("ss")
                                .args(["-tinH", "state", "established"])
                                .output()
                                .context("running ss")?;
                            socks.update(&String::from_utf8_lossy(&o.stdout));
                            out.push((t0.elapsed().as_secs_f64(), socks.matrix()));
                            return Ok(out);
                        }
                    }
                }
            })
        });
        let r = f();
        drop(stop_tx);
        let series = sampler
            .join()
            .map_err(|_| anyhow::anyhow!("socket sampler panicked"))???;
        Ok((r, series))
    })
}

/// What one leecher did in one swarm.
#[derive(Clone, Debug)]
struct LeechFig {
    done_s: f64,
    from_seeder: u64,
    from_leechers: u64,
    to_leechers: u64,
    own_up: Option<u64>,
    cpu_s: f64,
    /// Bytes of blocks the seeder sent this leecher that it had already
    /// sent (to anyone).
    seeder_repeats: Option<u64>,
    /// Bytes received over time (seconds from t0).
    received: Vec<(f64, u64)>,
}

/// What one swarm did.
#[derive(Clone, Debug)]
struct SwarmFig {
    leechers: Vec<(Slot, LeechFig)>,
    last_done_s: f64,
    /// Payload bytes the seeder sent (its own count; the kernel's if none).
    seeder_sent: u64,
    seeder_kernel: u64,
    seeder_cpu_s: f64,
    /// Bytes of blocks the seeder sent more than once.
    seeder_repeats: Option<u64>,
}

/// Sum of `m[(from, to)]` over `froms`.
fn sum_from(m: &Matrix, froms: &[Ipv4Addr], to: Ipv4Addr) -> u64 {
    froms
        .iter()
        .map(|f| m.get(&(*f, to)).copied().unwrap_or(0))
        .sum()
}

/// weir's `uploaded X` from its summary line (`complete: ... uploaded
/// 1.2 GB`), in bytes (its decimal units, one decimal).
fn weir_uploaded(stderr: &str) -> Option<u64> {
    let line = stderr.lines().rev().find(|l| l.contains("complete: "))?;
    let rest = &line[line.rfind("uploaded ")? + 9..];
    let mut f = rest.split_whitespace();
    let v: f64 = f.next()?.parse().ok()?;
    let unit = f.next().unwrap_or("B").trim_end_matches(',');
    let mul = match unit {
        "B" => 1.0,
        "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return None,
    };
    Some((v * mul) as u64)
}

/// The settings of one bench.
struct Setup {
    size: u64,
    rate: u64,
    every: Duration,
    timeout: Duration,
}

/// The payload size: `--set size=` (`1GiB`, `256MiB`, `256` MiB), else
/// `--size-mib`, else 1 GiB.
fn size_of(cfg: &BenchConfig) -> anyhow::Result<u64> {
    let Some(s) = cfg.get("size") else {
        return Ok(cfg.size_bytes(1024));
    };
    crate::common::parse_payload_size(s)
}

/// Starts one leecher of `slot`.
fn start(
    cfg: &BenchConfig,
    ns: &Netns,
    slot: &Slot,
    torrent: &Path,
    out: &Path,
    timeout: Duration,
) -> anyhow::Result<Member> {
    let opts = Options {
        timeout,
        ..Options::default()
    };
    match slot.kind {
        Kind::Libtorrent => {
            swarm::start_leecher(ns, &Client::Libtorrent, torrent, out, slot.addr, &opts)
        }
        Kind::Aria2 => swarm::start_leecher(ns, &Client::Aria2, torrent, out, slot.addr, &opts),
        Kind::Transmission => {
            swarm::start_leecher(ns, &Client::Transmission, torrent, out, slot.addr, &opts)
        }
        Kind::Weir => {
            let mut leech = cfg.weir_argv();
            leech.extend(
                [
                    "get",
                    "{torrent}",
                    "-o",
                    "{dir}",
                    "--listen",
                    "{addr}",
                    "--seed",
                    "--no-dht",
                    "--no-pex",
                    "--transports",
                    "tcp",
                ]
                .map(String::from),
            );
            let cc = CommandClient {
                name: slot.label.clone(),
                seed: Vec::new(),
                leech,
            };
            swarm::start_command_leecher(
                ns,
                &cc,
                torrent,
                out,
                slot.addr,
                &[("RUST_LOG", WEIR_LOG)],
                WEIR_DONE,
            )
        }
    }
}

/// One swarm: seeder, Transmission, then every other leecher at once;
/// waits for the last to complete, stops everyone, checks every file.
#[allow(clippy::too_many_arguments)]
fn swarm_once(
    cfg: &BenchConfig,
    ns: &Netns,
    tracker: &mut Tracker<'_>,
    p: &Payload,
    torrent: &Path,
    slots: &[Slot],
    st: &Setup,
    work: &Path,
) -> anyhow::Result<SwarmFig> {
    tracker.restart()?;
    let hex = p.info.info_hash_hex();
    let dial = work.join("dial.txt");
    let _ = std::fs::remove_file(&dial);
    let mut seeder = swarm::start_seeder(
        ns,
        torrent,
        &p.data_dir,
        SEED,
        &SeedOptions {
            hps: true,
            upload_limit: Some(st.rate),
            dial_file: Some(dial.clone()),
            timeout: st.timeout * 2,
            ..SeedOptions::default()
        },
    )?;
    tracker.wait_seeder(&hex, Duration::from_secs(60))?;
    let member_timeout = st.timeout + Duration::from_secs(60);
    let outs: Vec<PathBuf> = (0..slots.len())
        .map(|i| work.join(format!("leecher-{i}")))
        .collect();
    let mut members: Vec<Member> = Vec::new();
    // Transmission first, announced before the others start.
    let first = &slots[0];
    members.push(start(cfg, ns, first, torrent, &outs[0], member_timeout)?);
    let deadline = Instant::now() + Duration::from_secs(60);
    while tracker.leechers(&hex)? < 1 {
        if Instant::now() >= deadline {
            bail!("{} never announced", first.label);
        }
        members[0].poll()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0_wall = SystemTime::now();
    let t0 = Instant::now();
    std::fs::write(&dial, format!("{}\n", first.addr))?;
    let ((), series) = sample_while(ns, t0, st.every, || -> anyhow::Result<()> {
        for (i, s) in slots.iter().enumerate().skip(1) {
            members.push(start(cfg, ns, s, torrent, &outs[i], member_timeout)?);
        }
        let end = t0 + st.timeout;
        loop {
            let mut all = true;
            for m in members.iter_mut() {
                all &= m.poll()?.is_some();
            }
            if all {
                return Ok(());
            }
            if Instant::now() >= end {
                let late: Vec<&str> = members
                    .iter()
                    .filter(|m| m.done_at().is_none())
                    .map(|m| m.name())
                    .collect();
                bail!("not done after {:?}: {}", st.timeout, late.join(", "));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .and_then(|(r, s)| r.map(|()| ((), s)))?;
    let done: Vec<f64> = members
        .iter()
        .map(|m| {
            m.done_at()
                .and_then(|d| d.duration_since(t0_wall).ok())
                .map_or(f64::NAN, |d| d.as_secs_f64())
        })
        .collect();
    let mut stopped = Vec::new();
    for m in members {
        stopped.push(m.stop(Duration::from_secs(5))?);
    }
    let (seed_usage, seed_stats) = swarm::stop_seeder(&mut seeder, Duration::from_secs(5))?;
    let uploads = swarm::seeder_uploads(&seeder);
    let block = crate::bt_setup::BLOCK;
    let repeats_of = |ip: Ipv4Addr| {
        (!uploads.is_empty()).then(|| {
            uploads
                .iter()
                .filter(|u| u.ip == ip.to_string())
                .map(|u| u.repeats * block)
                .sum::<u64>()
        })
    };
    for (i, s) in slots.iter().enumerate() {
        let file = outs[i].join(&p.info.name);
        payload::verify(&file, p.len(), PAYLOAD_SEED)
            .with_context(|| format!("{}'s download", s.label))?;
        std::fs::remove_dir_all(&outs[i])?;
    }
    let last = series.last().map(|x| x.1.clone()).unwrap_or_default();
    let ips: Vec<Ipv4Addr> = slots.iter().map(|s| *s.addr.ip()).collect();
    let seed_ip = *SEED.ip();
    let mut leechers = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        let me = ips[i];
        let others: Vec<Ipv4Addr> = ips.iter().copied().filter(|ip| *ip != me).collect();
        let mut froms = others.clone();
        froms.push(seed_ip);
        let mut received: Vec<(f64, u64)> = series
            .iter()
            .map(|(t, m)| (*t, sum_from(m, &froms, me)))
            .collect();
        finish_series(
            &mut received,
            done[i].is_finite().then_some(done[i]),
            p.len(),
        );
        let own_up = match s.kind {
            Kind::Libtorrent => stopped[i].stats.map(|x| x.up),
            Kind::Weir => weir_uploaded(&stopped[i].stderr),
            _ => None,
        };
        leechers.push((
            s.clone(),
            LeechFig {
                done_s: done[i],
                from_seeder: last.get(&(seed_ip, me)).copied().unwrap_or(0),
                from_leechers: sum_from(&last, &others, me),
                to_leechers: others
                    .iter()
                    .map(|o| last.get(&(me, *o)).copied().unwrap_or(0))
                    .sum(),
                own_up,
                cpu_s: stopped[i].usage.cpu_s(),
                seeder_repeats: repeats_of(me),
                received,
            },
        ));
    }
    let seeder_kernel: u64 = ips
        .iter()
        .map(|ip| last.get(&(seed_ip, *ip)).copied().unwrap_or(0))
        .sum();
    Ok(SwarmFig {
        last_done_s: done.iter().copied().fold(f64::NAN, f64::max),
        seeder_sent: seed_stats.map_or(seeder_kernel, |s| s.up),
        seeder_kernel,
        seeder_cpu_s: seed_usage.cpu_s(),
        seeder_repeats: (!uploads.is_empty())
            .then(|| uploads.iter().map(|u| u.repeats * block).sum()),
        leechers,
    })
}

/// The table's columns.
fn metrics() -> Vec<Metric> {
    vec![
        Metric::new("done s", 2),
        Metric::new("x floor", 2),
        Metric::new("from seeder MiB", 1),
        Metric::new("from leechers MiB", 1),
        Metric::new("to leechers MiB", 1),
        Metric::new("up/down leechers", 2),
        Metric::new("own up MiB", 1),
        Metric::new("CPU s", 1),
        Metric::new("copies", 2),
        Metric::new("util %", 1),
        Metric::new("seeder repeats MiB", 1),
    ]
}

const SWARMS: [&str; 2] = ["with weir", "without weir"];
const SWARM_ROW: &str = "swarm (last done)";
const SEEDER_ROW: &str = "seeder";

/// Records one swarm's rows.
fn record(rep: &mut Report, swarm: &str, f: &SwarmFig, floor: f64, size: u64, rate: u64) {
    let n = metrics().len();
    for (s, l) in &f.leechers {
        let ratio = if l.from_leechers > 0 {
            l.to_leechers as f64 / l.from_leechers as f64
        } else {
            f64::NAN
        };
        let mut v = vec![
            l.done_s,
            l.done_s / floor,
            mib(l.from_seeder as f64),
            mib(l.from_leechers as f64),
            mib(l.to_leechers as f64),
            ratio,
            l.own_up.map_or(f64::NAN, |b| mib(b as f64)),
            l.cpu_s,
        ];
        v.resize(n, f64::NAN);
        v[10] = l.seeder_repeats.map_or(f64::NAN, |b| mib(b as f64));
        rep.add_run(&[swarm, &s.label], &v);
    }
    let mut v = vec![f.last_done_s, f.last_done_s / floor];
    v.resize(n, f64::NAN);
    rep.add_run(&[swarm, SWARM_ROW], &v);
    let mut v = vec![f64::NAN; n];
    v[4] = mib(f.seeder_kernel as f64);
    v[6] = mib(f.seeder_sent as f64);
    v[7] = f.seeder_cpu_s;
    v[8] = f.seeder_sent as f64 / size as f64;
    v[9] = 100.0 * f.seeder_sent as f64 / (rate as f64 * f.last_done_s);
    v[10] = f.seeder_repeats.map_or(f64::NAN, |b| mib(b as f64));
    rep.add_run(&[swarm, SEEDER_ROW], &v);
}

/// The median of metric `i` of row `(swarm, leecher)` (NaN: none).
fn med(rep: &Report, swarm: &str, leecher: &str, i: usize) -> f64 {
    rep.rows
        .iter()
        .find(|r| r.labels[0] == swarm && r.labels[1] == leecher)
        .and_then(|r| r.median[i])
        .unwrap_or(f64::NAN)
}

fn met(ok: Option<bool>) -> &'static str {
    match ok {
        None => "no verdict",
        Some(true) => "met",
        Some(false) => "NOT met",
    }
}

/// The goals' notes, from the medians.
fn verdicts(rep: &Report, floor: f64) -> Vec<String> {
    let a = SWARMS[0];
    let weirs: Vec<String> = slots(true)
        .into_iter()
        .filter(|s| s.kind == Kind::Weir)
        .map(|s| s.label)
        .collect();
    let others: Vec<String> = slots(true)
        .into_iter()
        .filter(|s| s.kind != Kind::Weir)
        .map(|s| s.label)
        .collect();
    let slowest_weir = weirs
        .iter()
        .map(|w| med(rep, a, w, 0))
        .fold(f64::NAN, f64::max);
    let fastest_other = others
        .iter()
        .map(|o| med(rep, a, o, 0))
        .fold(f64::NAN, f64::min);
    let known = |x: f64| x.is_finite().then_some(x);
    let first = known(slowest_weir)
        .zip(known(fastest_other))
        .map(|(w, o)| w < o);
    let within = known(slowest_weir).map(|w| w <= FLOOR_GOAL * floor);
    let mut out = vec![format!(
        "goal: weir finishes first: slowest weir {slowest_weir:.2} s, fastest other leecher {fastest_other:.2} s ({}); within {FLOOR_GOAL}x of the floor {floor:.2} s: {:.2}x ({})",
        met(first),
        slowest_weir / floor,
        met(within)
    )];
    for w in &weirs {
        let up = med(rep, a, w, 4);
        let down = med(rep, a, w, 3);
        let ok = known(up).zip(known(down)).map(|(u, d)| u >= d);
        out.push(format!(
            "goal: {w} uploads at least what it downloads from the other leechers: {up:.1} MiB up, {down:.1} MiB down ({})",
            met(ok)
        ));
    }
    let with = med(rep, a, SWARM_ROW, 0);
    let without = med(rep, SWARMS[1], SWARM_ROW, 0);
    let ok = known(with).zip(known(without)).map(|(x, y)| x <= y);
    out.push(format!(
        "goal: the swarm with weir finishes no later than without: {with:.2} s against {without:.2} s ({})",
        met(ok)
    ));
    out
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let size = size_of(cfg)?;
    let piece = cfg.get_or("piece_kib", 1024u64)?.clamp(16, 16 << 10) << 10;
    let rate = crate::common::parse_rate(cfg.get("rate").unwrap_or("50MB/s"))?;
    let st = Setup {
        size,
        rate,
        every: Duration::from_millis(cfg.get_or("sample_ms", 200u64)?.max(20)),
        timeout: Duration::from_secs(cfg.get_or("timeout", 600u64)?.max(10)),
    };
    let floor = size as f64 / rate as f64;
    let load_before = load_average();
    let work = TempDir::new("bench-swarm")?;
    eprintln!("swarm: writing the {} MiB payload", size >> 20);
    let p = Payload::create(
        &work.path().join("seed"),
        "swarm.bin",
        size,
        PAYLOAD_SEED,
        piece,
    )?;
    let ns = Netns::new("swarm")?;
    let mut tracker = Tracker::start(&ns, TRACKER, &[p.info.info_hash_hex()])?;
    let torrent = p.with_announce(&tracker.announce_url())?;
    let mut rep = Report::new("swarm", cfg, &["swarm", "leecher"], metrics());
    let mut charts: Vec<Option<Vec<chart::Series>>> = vec![None, None];
    for run in 0..cfg.runs {
        for (k, name) in SWARMS.iter().enumerate() {
            eprintln!("swarm: run {} of {}, {name}", run + 1, cfg.runs);
            let sl = slots(k == 0);
            let dir = work.subdir(&format!("run-{run}-{k}"))?;
            match swarm_once(cfg, &ns, &mut tracker, &p, &torrent, &sl, &st, &dir) {
                Ok(f) => {
                    for (s, l) in &f.leechers {
                        eprintln!(
                            "swarm:   {:<28} done {:6.2} s, from seeder {:7.1} MiB (repeats {:6.1}), from leechers {:7.1} MiB, to leechers {:7.1} MiB",
                            s.label,
                            l.done_s,
                            mib(l.from_seeder as f64),
                            l.seeder_repeats.map_or(f64::NAN, |b| mib(b as f64)),
                            mib(l.from_leechers as f64),
                            mib(l.to_leechers as f64)
                        );
                    }
                    record(&mut rep, name, &f, floor, st.size, st.rate);
                    if charts[k].is_none() {
                        charts[k] = Some(
                            f.leechers
                                .iter()
                                .map(|(s, l)| chart::Series::cumulative_mib(&s.label, &l.received))
                                .collect(),
                        );
                    }
                }
                Err(e) => {
                    eprintln!("swarm: {name} failed: {e:#}");
                    for s in &sl {
                        rep.add_failure(&[name, &s.label], &format!("{e:#}"));
                    }
                    rep.add_failure(&[name, SWARM_ROW], &format!("{e:#}"));
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    rep.note(&format!(
        "{} MiB single file, {} KiB pieces, one torrent through opentracker (127.0.0.2), in a namespace holding only lo, each peer on its own 127.0.0.x; seeder: libtorrent 2.0 (python3-libtorrent) high_performance_seed, upload_rate_limit {:.0} MB/s applied to loopback peers (every address in the global peer class), DHT/LSD/UPnP/NAT-PMP/PEX/uTP off; leechers started together at t0 (Transmission 3.00 first and announced before t0, since it dials no 127/8 peer a tracker gives it: the others and the seeder dial it), each staying in the swarm (seeding) until the last is done: libtorrent 2.0 default settings, aria2c (--seed-ratio=0.0), Transmission 3.00, weir (`weir get --seed --no-dht --no-pex --transports tcp`, encryption its default prefer, --allow 127.0.0.0/8); the same swarm without weir has libtorrent leechers on weir's addresses",
        size >> 20,
        piece >> 10,
        rate as f64 / 1e6
    ));
    rep.note(&format!(
        "done s: t0 to the leecher's own completion report (libtorrent: finished alert; aria2c: --on-bt-download-complete; Transmission: script-torrent-done; weir: its `every piece verified` log line, seen within 20 ms); x floor: over the floor size / rate = {floor:.2} s; from/to MiB: the kernel's per-socket bytes_received on each end of every TCP connection (`ss -ti`, sampled every {} ms and once after the last completion; BitTorrent framing included), to leechers = what the other leechers received from this one; own up: the client's own count of payload it uploaded (libtorrent: total_payload_upload; weir: its summary line, 3 significant digits; seeder: libtorrent's, which copies and util use); copies = seeder payload sent / size; seeder repeats: blocks the seeder sent this leecher that it had already sent to some leecher (libtorrent block_uploaded alerts, 16 KiB each), total on the seeder's row; util = seeder payload sent / (rate x swarm time); every leecher's file compared with the payload after each swarm",
        st.every.as_millis()
    ));
    for v in verdicts(&rep, floor) {
        rep.note(&v);
    }
    rep.note(&format!(
        "load average before: {load_before}, after: {}",
        load_average()
    ));
    rep.print();
    let (json, md) = rep.write()?;
    sayln!("wrote {} and {}", json.display(), md.display());
    let stem = rep.path_stem();
    for (k, c) in charts.iter().enumerate() {
        let Some(series) = c else { continue };
        let path = if k == 0 {
            stem.with_extension("png")
        } else {
            PathBuf::from(format!("{}-without-weir.png", stem.display()))
        };
        let title = format!(
            "swarm {}: bytes received by each leecher ({} MiB, seeder {:.0} MB/s)",
            SWARMS[k],
            size >> 20,
            rate as f64 / 1e6
        );
        match chart::cumulative_mib(&path, &title, series) {
            Ok(()) => sayln!("wrote {}", path.display()),
            Err(e) => eprintln!("swarm: no chart: {e:#}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_fold_into_a_matrix() {
        let ss = "0 0 127.0.0.10:6881 127.0.0.3:6881 \n\t cubic bytes_received:1000\n\
0 0 127.0.0.3:6881 127.0.0.10:6881 \n\t cubic bytes_received:50\n\
0 0 127.0.0.11:40000 127.0.0.10:6881 \n\t cubic bytes_received:300\n";
        let mut s = Sockets::default();
        s.update(ss);
        // A closed socket keeps its count; a new one adds.
        s.update("0 0 127.0.0.11:40001 127.0.0.10:6881 \n\t cubic bytes_received:7\n");
        let m = s.matrix();
        let (seed, a, b) = (
            Ipv4Addr::new(127, 0, 0, 3),
            Ipv4Addr::new(127, 0, 0, 10),
            Ipv4Addr::new(127, 0, 0, 11),
        );
        assert_eq!(m[&(seed, a)], 1000);
        assert_eq!(m[&(a, seed)], 50);
        assert_eq!(m[&(a, b)], 307);
        assert_eq!(sum_from(&m, &[seed, b], a), 1000);
    }

    #[test]
    fn reads_weirs_upload_and_sizes() {
        let e = "x: seeding 100.0%\nswarm.bin: complete: 1.1 GB in 30.12 s (35.6 MB/s), uploaded 1.2 GB\n";
        assert_eq!(weir_uploaded(e), Some(1_200_000_000));
        assert_eq!(weir_uploaded("uploaded 5 B"), None);
        assert_eq!(
            weir_uploaded("a: complete: 1 B in 1 s (1 B/s), uploaded 0 B"),
            Some(0)
        );
        let mut c = BenchConfig::new("weir".into(), "out".into());
        assert_eq!(size_of(&c).unwrap(), 1 << 30);
        c.extra = vec![("size".into(), "256MiB".into())];
        assert_eq!(size_of(&c).unwrap(), 256 << 20);
        c.extra = vec![("size".into(), "2GiB".into())];
        assert_eq!(size_of(&c).unwrap(), 2 << 30);
        c.extra = vec![("size".into(), "64".into())];
        assert_eq!(size_of(&c).unwrap(), 64 << 20);
        c.extra = vec![("size".into(), "big".into())];
        assert!(size_of(&c).is_err());
    }

    #[test]
    fn swarms_swap_weir_for_libtorrent_on_the_same_addresses() {
        let a = slots(true);
        let b = slots(false);
        assert_eq!(a.len(), 7);
        assert_eq!(a.iter().filter(|s| s.kind == Kind::Weir).count(), 2);
        assert_eq!(b.iter().filter(|s| s.kind == Kind::Weir).count(), 0);
        assert_eq!(b.iter().filter(|s| s.kind == Kind::Libtorrent).count(), 5);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.addr, y.addr);
        }
        assert_eq!(a[0].kind, Kind::Transmission);
    }
}
