//! Scenario `transports`: BitTorrent over uTP against TCP, in a namespace
//! holding only `lo`, one file, files compared after each run:
//!
//! - `weir <- weir`: `weir get` from `weir seed`, both with `--transports
//!   tcp`, then both with `--transports utp` (`--size-mib`, default 1024);
//!   goal (issue 12): uTP >= 50% of weir's TCP rate;
//! - `<- libtorrent (uTP only)`: `weir get` with its defaults, then a
//!   libtorrent leecher speaking only uTP, from a libtorrent seeder
//!   speaking only uTP (`--set lt_mib=N`, default 256); goal: weir >= 5x
//!   libtorrent's rate.
//!
//! Seconds are each leecher's own (spawn to its completion report); CPU
//! seconds are the leecher process's, also per GiB. `--runs` (default 3),
//! median reported.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use anyhow::Context;
use weir_lab::bt::{self, Client, CommandClient, Options};
use weir_lab::{Netns, TempDir, payload};

use crate::BenchConfig;
use crate::bt_setup::{Payload, load_average, wait_for_log, weir_leecher};
use crate::report::{Metric, Report};
use crate::sayln;

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["lt_mib", "piece_kib"];

const SEED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 6881);
const LEECH: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6882);
/// Longest one leech may take.
const TIMEOUT: Duration = Duration::from_secs(600);

/// One measured leech.
struct Leech {
    seconds: f64,
    cpu: f64,
}

/// `weir seed` with `--transports t` as a lab client.
fn weir_seeder(cfg: &BenchConfig, t: &str) -> Client {
    let mut args = cfg.weir_argv();
    args.extend(
        [
            "seed",
            "{torrent}",
            "{dir}",
            "--listen",
            "{addr}",
            "--no-trackers",
            "--no-dht",
            "--transports",
            t,
        ]
        .map(String::from),
    );
    Client::Command(CommandClient {
        name: "weir".into(),
        seed: args,
        leech: Vec::new(),
    })
}

fn leech(
    ns: &Netns,
    client: &Client,
    p: &Payload,
    work: &TempDir,
    extra: Vec<String>,
) -> anyhow::Result<Leech> {
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

fn row(rep: &mut Report, label: &[&str], size: u64, r: &anyhow::Result<Leech>) -> f64 {
    match r {
        Ok(l) => {
            let gib = size as f64 / (1u64 << 30) as f64;
            rep.add_run(
                label,
                &[l.seconds, size as f64 / l.seconds / 1e6, l.cpu, l.cpu / gib],
            );
            size as f64 / l.seconds
        }
        Err(e) => {
            rep.add_failure(label, &format!("{e:#}"));
            f64::NAN
        }
    }
}

fn verdict(name: &str, ratio: f64, goal: f64) -> String {
    let met = if ratio.is_nan() {
        "no verdict"
    } else if ratio >= goal {
        "met"
    } else {
        "NOT met"
    };
    format!("{name}: {ratio:.2}x (goal >= {goal}x: {met})")
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let size = cfg.size_bytes(1024);
    let lt_size = cfg.get_or("lt_mib", 256u64)? << 20;
    let piece = cfg.get_or("piece_kib", 1024u64)?.clamp(16, 16 << 10) << 10;
    let load_before = load_average();
    let work = TempDir::new("bench-transports")?;
    let ns = Netns::new("transports")?;
    eprintln!("transports: writing payloads");
    let big = Payload::create(&work.path().join("big"), "big.bin", size, 0x7a11, piece)?;
    let small = Payload::create(
        &work.path().join("small"),
        "small.bin",
        lt_size,
        0x7a12,
        piece,
    )?;
    let mut rep = Report::new(
        "transports",
        cfg,
        &["leecher <- seeder", "transport"],
        vec![
            Metric::new("s", 2),
            Metric::new("MB/s", 1),
            Metric::new("CPU s", 2),
            Metric::new("CPU s/GiB", 2),
        ],
    );
    let mut rates: [Vec<f64>; 4] = Default::default();
    for (i, t) in ["tcp", "utp"].iter().enumerate() {
        let mut seed =
            bt::start_seed(&ns, &weir_seeder(cfg, t), &big.torrent, &big.data_dir, SEED)?;
        wait_for_log(&mut seed, ": seeding ", Duration::from_secs(300))?;
        let client = weir_leecher(
            cfg,
            "weir",
            &["--peer", "{peer}", "--no-dht", "--transports", t, "-q"].map(String::from),
        );
        for run in 0..cfg.runs {
            eprintln!("transports: weir <- weir over {t}, run {}", run + 1);
            let r = leech(&ns, &client, &big, &work, Vec::new());
            rates[i].push(row(&mut rep, &["weir <- weir", t], size, &r));
        }
        seed.kill_tree_with_grace(Duration::from_secs(5))?;
    }
    let lt_opts = Options {
        extra_args: vec!["--utp-only".into()],
        ..Options::default()
    };
    let _lt = bt::start_seed_with(
        &ns,
        &Client::Libtorrent,
        &small.torrent,
        &small.data_dir,
        SEED,
        &lt_opts,
    )?;
    let weir = weir_leecher(cfg, "weir", &["--peer", "{peer}", "-q"].map(String::from));
    for run in 0..cfg.runs {
        eprintln!(
            "transports: from a uTP-only libtorrent seeder, run {}",
            run + 1
        );
        let r = leech(&ns, &weir, &small, &work, Vec::new());
        rates[2].push(row(
            &mut rep,
            &["weir (defaults) <- libtorrent", "utp"],
            lt_size,
            &r,
        ));
        let r = leech(
            &ns,
            &Client::Libtorrent,
            &small,
            &work,
            vec!["--utp-only".into()],
        );
        rates[3].push(row(
            &mut rep,
            &["libtorrent <- libtorrent", "utp"],
            lt_size,
            &r,
        ));
    }
    rep.note(&format!(
        "{} MiB (weir <- weir) and {} MiB (from libtorrent) single files, {} KiB pieces, in a namespace holding only lo; weir seed and weir get with --no-trackers --no-dht --transports T (weir <- weir), weir get with its defaults (from libtorrent: uTP first, MSE preferred); libtorrent (python3-libtorrent 2.0) with TCP off both ways; seconds: each leecher's spawn to its completion report; CPU: the leecher process's user + system; load average before: {load_before}, after: {}",
        size >> 20,
        lt_size >> 20,
        piece >> 10,
        load_average()
    ));
    let m = |i: usize| median(&rates[i]);
    rep.note(&verdict("uTP / TCP, weir <- weir", m(1) / m(0), 0.5));
    rep.note(&verdict(
        "weir / libtorrent, from a uTP-only libtorrent seeder",
        m(2) / m(3),
        5.0,
    ));
    rep.print();
    let (json, md) = rep.write()?;
    sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}
