//! Scenario `transports`: BitTorrent over uTP against TCP, and MSE/PE
//! against plaintext, in a namespace holding only `lo`, one table, files
//! compared after each complete download. Row groups (`--set
//! rows=weir,udplink,lt-utp,lt-mse`, all by default):
//!
//! - `weir`: `weir get` from `weir seed` (`--size-mib`, default 1024):
//!   over TCP in plaintext (both `--encryption off`), over TCP with RC4
//!   (seeder `--encryption require`, leecher its default `prefer`), and
//!   over uTP with RC4 (both `--transports utp`). Goal (issue 12): uTP >=
//!   50% of weir's TCP rate (both encrypted); encrypted against plaintext
//!   is reported;
//! - `udplink`: `weir get --transports utp` from the uTP seeder above
//!   through the UDP link emulator run in this process (`udplink`: one-way
//!   delay `udp_delay=75ms`, bottleneck `udp_rate=50MB/s` with
//!   `udp_queue=4MiB` of queue, `udp_loss=0`), stopped once the last time
//!   of [`TIMES`] has passed: MiB the emulator delivered toward weir at
//!   each time (sampled every `sample_ms=100`, interpolated) and the share
//!   of what the link could carry by the last one. Goal: >= 80% by 10 s;
//! - `lt-utp`: `weir get` with its defaults, then a libtorrent leecher
//!   speaking only uTP, from a libtorrent seeder speaking only uTP
//!   (`--set lt_mib=N`, default 256); goal: weir >= 5x libtorrent's rate;
//! - `lt-mse`: `weir get` with its defaults, then a libtorrent leecher
//!   with encryption forced, from an encryption-only libtorrent seeder
//!   (RC4 forced both ways, `high_performance_seed`; `mse_mib`, default
//!   `--size-mib`); goal: weir <= 0.75x libtorrent's time.
//!
//! Seconds are each leecher's own (spawn to its completion report); CPU
//! seconds are the leecher process's (`wait4`: user + system), also per
//! GiB it received. `--runs` (default 3), median reported.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use weir_lab::bt::{self, Client, CommandClient, Options};
use weir_lab::{Netns, TempDir, payload};
use weir_runtime::linkem::{self, UdpLinkConfig};

use crate::BenchConfig;
use crate::bt_setup::{
    Payload, Series, load_average, mib, run_weir, value_at, wait_for_log, weir_leecher,
};
use crate::report::{Metric, Report};
use crate::sayln;
use crate::udplink::{delivered, sample_while, with_udp_link};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &[
    "rows",
    "lt_mib",
    "mse_mib",
    "piece_kib",
    "udp_delay",
    "udp_rate",
    "udp_queue",
    "udp_loss",
    "sample_ms",
];

/// Row groups, in the order they run.
pub const ROWS: &[&str] = &["weir", "udplink", "lt-utp", "lt-mse"];

/// Seconds from the leecher's start at which the emulated link's row
/// reports MiB; the last is where its goal is judged.
pub const TIMES: [f64; 4] = [1.0, 2.0, 5.0, 10.0];

/// Share of the link the emulated-link row should reach by the last time.
const LINK_GOAL: f64 = 0.8;

const SEED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 6881);
const LEECH: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6882);
const EMULATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 4), 7001);
/// Longest one leech may take.
const TIMEOUT: Duration = Duration::from_secs(600);

/// One measured leech.
struct Leech {
    seconds: f64,
    cpu: f64,
}

/// `weir seed` with `--transports t --encryption e` as a lab client.
fn weir_seeder(cfg: &BenchConfig, t: &str, e: &str) -> Client {
    let extra = ["--no-dht", "--transports", t, "--encryption", e];
    CommandClient::weir_seed(&cfg.weir_argv(), &extra.map(String::from))
}

fn leech(
    ns: &Netns,
    client: &Client,
    p: &Payload,
    work: &TempDir,
    extra: Vec<String>,
) -> anyhow::Result<Leech> {
    let size = std::fs::metadata(&p.file)?.len();
    crate::common::warm_page_cache(work.path(), size)?;
    let out = work.subdir("out")?;
    let opts = Options {
        peers: vec![SocketAddr::V4(SEED)],
        timeout: TIMEOUT,
        extra_args: extra,
        ..Options::default()
    };
    let r = bt::leech_with(ns, client, &p.torrent, &out, LEECH, &opts)?;
    let name = p.file.file_name().context("payload name")?;
    payload::files_equal(&p.file, &out.join(name)).context("downloaded file differs")?;
    std::fs::remove_dir_all(&out)?;
    Ok(Leech {
        seconds: r.seconds,
        cpu: r.usage.user_s + r.usage.sys_s,
    })
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// The table's columns.
fn metrics() -> Vec<Metric> {
    let mut m = vec![
        Metric::new("s", 2),
        Metric::new("MB/s", 1),
        Metric::new("CPU s", 2),
        Metric::new("CPU s/GiB", 2),
    ];
    m.extend(TIMES.iter().map(|t| Metric::new(&format!("MiB@{t}s"), 1)));
    m.push(Metric::new("% of link", 1));
    m
}

/// A complete download's values (no link columns).
fn leech_values(size: u64, l: &Leech) -> Vec<f64> {
    let mut v = vec![
        l.seconds,
        size as f64 / l.seconds / 1e6,
        l.cpu,
        l.cpu / (size as f64 / GIB),
    ];
    v.resize(metrics().len(), f64::NAN);
    v
}

/// Records a complete download's row; returns its seconds (NaN: failed).
fn row(rep: &mut Report, label: &[&str], size: u64, r: &anyhow::Result<Leech>) -> f64 {
    match r {
        Ok(l) => {
            rep.add_run(label, &leech_values(size, l));
            l.seconds
        }
        Err(e) => {
            rep.add_failure(label, &format!("{e:#}"));
            f64::NAN
        }
    }
}

fn verdict(name: &str, ratio: f64, goal: f64, at_least: bool) -> String {
    let met = if ratio.is_nan() {
        "no verdict"
    } else if (at_least && ratio >= goal) || (!at_least && ratio <= goal) {
        "met"
    } else {
        "NOT met"
    };
    let op = if at_least { ">=" } else { "<=" };
    format!("{name}: {ratio:.2}x (goal {op} {goal}x: {met})")
}

/// The emulated link's settings from `--set`.
fn link_config(cfg: &BenchConfig) -> anyhow::Result<UdpLinkConfig> {
    let p = |key: &str, default: &str| cfg.get(key).unwrap_or(default).to_string();
    let delay =
        linkem::parse::duration(&p("udp_delay", "75ms")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let rate = linkem::parse::rate(&p("udp_rate", "50MB/s")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let queue = linkem::parse::size(&p("udp_queue", "4MiB")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let loss: f64 = p("udp_loss", "0").parse().context("udp_loss")?;
    if rate == 0 || queue == 0 || !(0.0..=1.0).contains(&loss) {
        bail!("udp_rate and udp_queue must be positive, udp_loss within [0, 1]");
    }
    Ok(UdpLinkConfig {
        delay,
        rate: Some(rate),
        queue: usize::try_from(queue).unwrap_or(usize::MAX),
        loss,
        seed: 12,
    })
}

/// What one run through the emulated link measured.
struct LinkRun {
    series: Series,
    cpu: f64,
}

/// `weir get --transports utp` from the seeder at [`SEED`] through an
/// emulated link on [`EMULATOR`], stopped half a second after the last of
/// [`TIMES`].
fn link_once(
    cfg: &BenchConfig,
    ns: &Netns,
    p: &Payload,
    link: &UdpLinkConfig,
    every: Duration,
    out: &Path,
) -> anyhow::Result<LinkRun> {
    let args: Vec<String> = vec![
        "get".into(),
        p.torrent.display().to_string(),
        "-o".into(),
        out.display().to_string(),
        "--listen".into(),
        LEECH.to_string(),
        "--no-trackers".into(),
        "--no-dht".into(),
        "--transports".into(),
        "utp".into(),
        "--peer".into(),
        EMULATOR.to_string(),
    ];
    let logs = TempDir::new("transports-link")?;
    let window = Duration::from_secs_f64(TIMES[TIMES.len() - 1] + 0.5);
    let (r, series) = with_udp_link(
        ns,
        SocketAddr::V4(EMULATOR),
        SocketAddr::V4(SEED),
        link.clone(),
        |stats| {
            sample_while(
                every,
                || delivered(stats),
                || run_weir(cfg, ns, "weir", &args, logs.path(), Some(window), TIMEOUT),
            )
        },
    )?;
    let r = r?;
    if let Some(st) = r.status
        && !st.success()
    {
        bail!(
            "weir get exited with {st}: {}",
            r.stderr
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    Ok(LinkRun {
        series,
        cpu: r.usage.cpu_s(),
    })
}

/// The emulated link's row values: MB/s and CPU over the window, MiB at
/// each of [`TIMES`], the share of the link by the last.
fn link_values(l: &LinkRun, rate: u64) -> Vec<f64> {
    let last = TIMES[TIMES.len() - 1];
    let at: Vec<f64> = TIMES.iter().map(|&t| value_at(&l.series, t)).collect();
    let got = l.series.last().map_or(0, |s| s.1) as f64;
    let mut v = vec![
        f64::NAN,
        at[at.len() - 1] / last / 1e6,
        l.cpu,
        if got > 0.0 {
            l.cpu / (got / GIB)
        } else {
            f64::NAN
        },
    ];
    v.extend(at.iter().map(|&b| mib(b)));
    v.push(100.0 * at[at.len() - 1] / (rate as f64 * last));
    v
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let groups: Vec<String> = cfg
        .get("rows")
        .map(|s| s.split(',').map(|g| g.trim().to_string()).collect())
        .unwrap_or_else(|| ROWS.iter().map(|s| s.to_string()).collect());
    if let Some(g) = groups.iter().find(|g| !ROWS.contains(&g.as_str())) {
        bail!("unknown row group {g:?} (known: {})", ROWS.join(", "));
    }
    let on = |g: &str| groups.iter().any(|x| x == g);
    let size = cfg.size_bytes(1024);
    let lt_size = cfg.get_or("lt_mib", 256u64)? << 20;
    let mse_size = cfg.get_or("mse_mib", size >> 20)? << 20;
    let piece = cfg.get_or("piece_kib", 1024u64)?.clamp(16, 16 << 10) << 10;
    let link = link_config(cfg)?;
    let rate = link.rate.unwrap_or(1);
    let every = Duration::from_millis(cfg.get_or("sample_ms", 100u64)?.max(10));
    let load_before = load_average();
    let work = TempDir::new("bench-transports")?;
    let ns = Netns::new("transports")?;
    eprintln!("transports: writing payloads");
    let big = Payload::create(&work.path().join("big"), "big.bin", size, 0x7a11, piece)?;
    let mse = if on("lt-mse") && mse_size != size {
        Some(Payload::create(
            &work.path().join("mse"),
            "mse.bin",
            mse_size,
            0x7a13,
            piece,
        )?)
    } else {
        None
    };
    let mse = mse.as_ref().unwrap_or(&big);
    let mut rep = Report::new(
        "transports",
        cfg,
        &["leecher <- seeder", "transport", "encryption"],
        metrics(),
    );
    // Seconds per run: plaintext TCP, RC4 TCP, RC4 uTP, weir and
    // libtorrent from uTP libtorrent, weir and libtorrent from MSE
    // libtorrent; the link row's share of the link.
    let mut secs: [Vec<f64>; 7] = Default::default();
    let mut link_share = Vec::new();
    let weir_rows = [
        ("tcp", "off", "off", "off"),
        ("tcp", "require", "prefer", "rc4"),
        ("utp", "require", "prefer", "rc4"),
    ];
    for (i, (t, seed_enc, leech_enc, enc)) in weir_rows.iter().enumerate() {
        let link_here = *t == "utp" && on("udplink");
        if !on("weir") && !link_here {
            continue;
        }
        let mut seed = bt::start_seed(
            &ns,
            &weir_seeder(cfg, t, seed_enc),
            &big.torrent,
            &big.data_dir,
            SEED,
        )?;
        wait_for_log(&mut seed, ": seeding ", Duration::from_secs(300))?;
        if on("weir") {
            let client = weir_leecher(
                cfg,
                "weir",
                &[
                    "--peer",
                    "{peer}",
                    "--no-dht",
                    "--transports",
                    t,
                    "--encryption",
                    leech_enc,
                    "-q",
                ]
                .map(String::from),
            );
            for run in 0..cfg.runs {
                eprintln!(
                    "transports: weir <- weir over {t}, encryption {enc}, run {}",
                    run + 1
                );
                let r = leech(&ns, &client, &big, &work, Vec::new());
                secs[i].push(row(&mut rep, &["weir <- weir", t, enc], size, &r));
            }
        }
        if link_here {
            let label = format!(
                "weir <- weir, UDP emulator {:.0} ms RTT {:.0} MB/s",
                2.0 * link.delay.as_secs_f64() * 1e3,
                rate as f64 / 1e6
            );
            for run in 0..cfg.runs {
                eprintln!("transports: {label}, run {}", run + 1);
                let out = work.subdir("out")?;
                let labels = [label.as_str(), "utp", "rc4"];
                match link_once(cfg, &ns, &big, &link, every, &out) {
                    Ok(l) => {
                        let v = link_values(&l, rate);
                        link_share.push(v[v.len() - 1]);
                        rep.add_run(&labels, &v);
                    }
                    Err(e) => rep.add_failure(&labels, &format!("{e:#}")),
                }
                std::fs::remove_dir_all(&out)?;
            }
        }
        let (_, u) = seed.kill_tree_with_grace(Duration::from_secs(5))?;
        rep.note(&format!(
            "weir seeder ({t}, encryption {seed_enc}): {:.2} CPU s over its lifetime (start-up check of {} MiB included)",
            u.cpu_s(),
            size >> 20
        ));
    }
    if on("lt-utp") {
        let small = Payload::create(
            &work.path().join("small"),
            "small.bin",
            lt_size,
            0x7a12,
            piece,
        )?;
        (secs[3], secs[4]) = lt_pair(cfg, &ns, &work, &small, "--utp-only", "utp", &mut rep)?;
    }
    if on("lt-mse") {
        (secs[5], secs[6]) = lt_pair(cfg, &ns, &work, mse, "--forced-enc", "tcp", &mut rep)?;
    }
    rep.note(&format!(
        "{} MiB (weir <- weir, emulated link), {} MiB (uTP libtorrent) and {} MiB (MSE libtorrent) single files, {} KiB pieces, in a namespace holding only lo; weir seed and weir get with --no-trackers --no-dht --transports T --encryption E (weir <- weir: plaintext = both off, rc4 = seeder require, leecher prefer); weir get with its defaults from libtorrent (uTP and TCP at once, uTP preferred within a round trip of TCP; MSE preferred); libtorrent (python3-libtorrent 2.0): uTP-only = TCP off both ways, MSE = RC4 forced both ways (out_enc_policy/in_enc_policy forced, allowed_enc_level rc4), the seeder with high_performance_seed; seconds: each leecher's spawn to its completion report; CPU: the leecher process's user + system (wait4), per GiB received",
        size >> 20,
        lt_size >> 20,
        mse_size >> 20,
        piece >> 10,
    ));
    if on("udplink") {
        rep.note(&format!(
            "emulated link: udplink (weir_runtime::linkem::udp, as `weir linkem --udp`) in the bench process, {:?} one-way each direction, {} MB/s bottleneck each direction with a {} KiB tail-drop queue, loss {}; weir get dials the emulator, which forwards to the uTP seeder; MiB@t = bytes the emulator delivered toward the leecher by t s from the leecher's spawn (uTP headers included), sampled every {} ms and interpolated; the leecher is stopped at {} s, so s is not measured; % of link = MiB@{}s over what {} MB/s carries in {} s; both ends are weir on loopback addresses, so they send datagrams of up to 64 KiB",
            link.delay,
            rate as f64 / 1e6,
            link.queue >> 10,
            link.loss,
            every.as_millis(),
            TIMES[TIMES.len() - 1] + 0.5,
            TIMES[TIMES.len() - 1],
            rate as f64 / 1e6,
            TIMES[TIMES.len() - 1],
        ));
    }
    rep.note(&format!(
        "load average before: {load_before}, after: {}",
        load_average()
    ));
    let m = |i: usize| median(&secs[i]);
    if on("weir") {
        rep.note(&verdict(
            "uTP / TCP rate, weir <- weir, both RC4",
            m(1) / m(2),
            0.5,
            true,
        ));
        rep.note(&format!(
            "encrypted / plaintext time, weir <- weir over TCP: {:.2}x",
            m(1) / m(0)
        ));
    }
    if on("udplink") {
        let share = median(&link_share);
        let met = if share.is_nan() {
            "no verdict"
        } else if share >= 100.0 * LINK_GOAL {
            "met"
        } else {
            "NOT met"
        };
        rep.note(&format!(
            "weir over uTP through the emulated link: {share:.1}% of the link by {} s (goal >= {:.0}%: {met})",
            TIMES[TIMES.len() - 1],
            100.0 * LINK_GOAL
        ));
    }
    if on("lt-utp") {
        rep.note(&verdict(
            "weir / libtorrent rate, from a uTP-only libtorrent seeder",
            m(4) / m(3),
            5.0,
            true,
        ));
    }
    if on("lt-mse") {
        rep.note(&verdict(
            "weir / libtorrent time, from an encryption-only libtorrent seeder",
            m(5) / m(6),
            0.75,
            false,
        ));
    }
    rep.print();
    let (json, md) = rep.write()?;
    sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// weir (its defaults) and a libtorrent leecher in turn, `--runs` times,
/// from a libtorrent seeder started with `flag` (`--utp-only`,
/// `--forced-enc`); the libtorrent leecher gets the same flag. Returns
/// the seconds of weir's runs and of libtorrent's.
fn lt_pair(
    cfg: &BenchConfig,
    ns: &Netns,
    work: &TempDir,
    p: &Payload,
    flag: &str,
    transport: &str,
    rep: &mut Report,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let opts = Options {
        extra_args: vec![flag.into()],
        ..Options::default()
    };
    let seeder = if flag == "--forced-enc" {
        Client::LibtorrentHps
    } else {
        Client::Libtorrent
    };
    let _lt = bt::start_seed_with(ns, &seeder, &p.torrent, &p.data_dir, SEED, &opts)?;
    let (enc, what) = if flag == "--forced-enc" {
        ("rc4", "encryption-only")
    } else {
        ("-", "uTP-only")
    };
    let weir_label = format!("weir (defaults) <- libtorrent {what}");
    let lt_label = format!("libtorrent <- libtorrent {what}");
    let weir = weir_leecher(cfg, "weir", &["--peer", "{peer}", "-q"].map(String::from));
    let (mut w, mut l) = (Vec::new(), Vec::new());
    for run in 0..cfg.runs {
        eprintln!(
            "transports: from a {what} libtorrent seeder, run {}",
            run + 1
        );
        let r = leech(ns, &weir, p, work, Vec::new());
        w.push(row(rep, &[&weir_label, transport, enc], p.len(), &r));
        let r = leech(ns, &Client::Libtorrent, p, work, vec![flag.into()]);
        l.push(row(rep, &[&lt_label, transport, enc], p.len(), &r));
    }
    Ok((w, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_values_judge_the_last_time() {
        // 50 MB/s for 10 s is 500 MB; 400 MB by 10 s is 80%.
        let l = LinkRun {
            series: vec![(0.0, 0), (10.0, 400_000_000), (10.5, 420_000_000)],
            cpu: 2.0,
        };
        let v = link_values(&l, 50_000_000);
        assert_eq!(v.len(), metrics().len());
        assert!(v[0].is_nan());
        assert!((v[1] - 40.0).abs() < 1e-9, "{v:?}");
        assert!((v[v.len() - 1] - 80.0).abs() < 1e-9, "{v:?}");
        assert!((v[4] - mib(40_000_000.0)).abs() < 1e-9, "{v:?}");
    }

    #[test]
    fn verdicts_read_both_ways() {
        assert!(verdict("a", 0.7, 0.75, false).ends_with("met)"));
        assert!(verdict("a", 0.8, 0.75, false).contains("NOT met"));
        assert!(verdict("a", 5.1, 5.0, true).ends_with(": met)"));
        assert!(verdict("a", f64::NAN, 5.0, true).contains("no verdict"));
    }
}
