//! Scenario `multi`: one `weir get` fed by BitTorrent and eD2k at once.
//!
//! Everything runs over loopback inside one namespace holding only `lo`;
//! the leecher is `weir get` on 127.0.0.3. One table, two parts:
//!
//! 1. **One file, two networks.** The same file (default 256 MiB) from a
//!    libtorrent seeder (127.0.0.2, `upload_limit` `source_mb` = 10 MB/s)
//!    alone (`weir get TORRENT`), then with `weir seed --ed2k` of the same
//!    file (127.0.0.4, `--max-up` 10 MB/s) beside it (`weir get TORRENT
//!    LINK`: the link joins the torrent's transfer). Reports weir's own time
//!    to completion, the ratio to the time alone in the same run (goal:
//!    <= 0.55x), and the bytes received from each network. (Both run on
//!    the engine, as every `weir get` does; the committed table of
//!    2026-12-01 15:07 was taken while one torrent alone still ran on the
//!    old driver.)
//! 2. **Two files, one cap.** A torrent (unlimited libtorrent seeder,
//!    127.0.0.5) and an ed2k link of another file (unlimited `weir seed
//!    --ed2k`, 127.0.0.6) in one `weir get --max-down cap_mb` (20 MB/s):
//!    the total rate over the steady part (from `steady_from_s` after the
//!    start until 0.3 s before the first of the two files is complete;
//!    goal: within 1% of the cap) and each network's share of it.
//!
//! Bytes per network over a whole run are weir's own (its summary lines,
//! payload). Rates are the kernel's counters of the leecher's sockets to
//! each seeder's IP (`ss`, wire bytes: protocol overhead included),
//! sampled every `sample_ms`; each run's wire totals are noted under the
//! table. Every received file is checked byte for byte.
//!
//! Options (`--set`): `seeder` (default `lt-hps`), `source_mb` (10),
//! `cap_mb` (20), `mixed_mib` (file size of part 2, default `--size-mib`),
//! `steady_from_s` (1.0), `sample_ms` (100), `parts` (`1,2`),
//! `link_first` (false: part 2 runs `weir get TORRENT LINK`; true: `weir
//! get LINK TORRENT`);
//! `--size-mib` (256), `--runs` (3).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::process::{stdout_lines, wait_line};
use weir_lab::{Netns, Proc, TempDir};

use crate::BenchConfig;
use crate::bt_setup::{
    Payload, SeederKind, Series, WeirRun, load_average, run_weir_cmd, sample_rx_while,
    start_seeder, value_at, weir_in,
};
use crate::report::{Metric, Report};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &[
    "seeder",
    "source_mb",
    "cap_mb",
    "mixed_mib",
    "steady_from_s",
    "sample_ms",
    "parts",
    "link_first",
];

/// Part 1: the capped libtorrent seeder and the capped eD2k seeder.
const BT_CAPPED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6881);
const ED2K_CAPPED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 4), 4662);
/// Part 2: unlimited seeders of two different files.
const BT_FREE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 5), 6881);
const ED2K_FREE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 6), 4662);
/// The two seeders a `weir get` reads from: a BitTorrent one it dials,
/// an eD2k one its link names.
#[derive(Clone, Copy, Debug)]
struct Seeders {
    bt: SocketAddrV4,
    ed2k: SocketAddrV4,
}
const CAPPED: Seeders = Seeders {
    bt: BT_CAPPED,
    ed2k: ED2K_CAPPED,
};
const FREE: Seeders = Seeders {
    bt: BT_FREE,
    ed2k: ED2K_FREE,
};
const LEECHER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// Longest one `weir get` may run.
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// Goal of part 1: time with both sources over time alone.
const RATIO_GOAL: f64 = 0.55;
/// Goal of part 2: largest distance of the total from the cap, percent.
const CAP_GOAL_PCT: f64 = 1.0;

const PART1: &str = "1 same file";
const PART2: &str = "2 other files, one cap";
const ALONE: &str = "BitTorrent alone";
const BOTH: &str = "BitTorrent + eD2k";

/// Columns of the table (see the notes the scenario writes).
fn metrics() -> Vec<Metric> {
    vec![
        Metric::new("s", 2),
        Metric::new("x alone", 3),
        Metric::new("MB/s", 2),
        Metric::new("% of cap", 2),
        Metric::new("BT MB", 1),
        Metric::new("eD2k MB", 1),
        Metric::new("BT %", 1),
        Metric::new("CPU s", 2),
    ]
}

/// One row's values, in [`metrics`] order (NaN: not measured).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Values {
    secs: f64,
    ratio: f64,
    rate: f64,
    pct_cap: f64,
    bt: f64,
    ed2k: f64,
    bt_pct: f64,
    cpu: f64,
}

impl Values {
    fn row(&self) -> [f64; 8] {
        [
            self.secs,
            self.ratio,
            self.rate / 1e6,
            self.pct_cap,
            self.bt / 1e6,
            self.ed2k / 1e6,
            self.bt_pct,
            self.cpu,
        ]
    }
}

/// The bytes one `complete:` line of weir's summary gives per network
/// (`... (BitTorrent 12.3 MB / eD2k 4.5 MB down)`), for the transfer whose
/// name the line holds.
fn summary_split(stderr: &str, name: &str) -> Option<(f64, f64)> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains(name) && l.contains("complete: "))?;
    let bt = line.split("(BitTorrent ").nth(1)?.split(" / ").next()?;
    let ed = line.split(" / eD2k ").nth(1)?.split(" down").next()?;
    Some((parse_size(bt)?, parse_size(ed)?))
}

/// Seconds in the `complete:` line of the transfer `name`.
fn summary_secs(stderr: &str, name: &str) -> Option<f64> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains(name) && l.contains("complete: "))?;
    let rest = &line[line.find("complete: ")?..];
    rest[rest.find(" in ")? + 4..]
        .split(" s")
        .next()?
        .trim()
        .parse()
        .ok()
}

/// A size as weir prints it (`0 B`, `12.3 MB`, decimal units), in bytes.
fn parse_size(s: &str) -> Option<f64> {
    weir_core::units::size(s).ok().map(|b| b as f64)
}

/// The steady part of part 2's run: from `from` seconds until 0.3 s
/// before the first of the two transfers completes (`done`: weir's own
/// times, counted from when it added the transfer, a little after the
/// process started, so the window ends early rather than late; after that
/// one transfer is done and the shares change). `None` when the run is too
/// short to have one (at least 1 s).
fn steady_window(done: &[f64], from: f64) -> Option<(f64, f64)> {
    let end = done.iter().copied().reduce(f64::min)? - 0.3;
    (end - from >= 1.0).then_some((from, end))
}

/// The payload a `complete:` line says the transfer holds (`complete:
/// 268.4 MB in ...`).
fn summary_size(stderr: &str, name: &str) -> Option<f64> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains(name) && l.contains("complete: "))?;
    let rest = &line[line.find("complete: ")? + 10..];
    parse_size(rest.split(" in ").next()?)
}

/// Percent of `part` in `part + other`.
fn pct(part: f64, other: f64) -> f64 {
    100.0 * part / (part + other)
}

/// What every run shares.
struct Setup<'a> {
    cfg: &'a BenchConfig,
    ns: &'a Netns,
    work: &'a TempDir,
    every: Duration,
}

impl Setup<'_> {
    /// weir inside the namespace with its own user-hash home `home` (so the
    /// leecher and the eD2k seeders are different eD2k clients).
    fn weir(&self, home: &str) -> anyhow::Result<Command> {
        let mut c = weir_in(self.cfg, self.ns);
        c.env("WEIR_ED2K_HOME", self.work.subdir(home)?)
            .env_remove("WEIR_ED2K_USER_HASH");
        Ok(c)
    }

    /// Starts `weir seed --ed2k FILE` on `addr` (`max_up`: bytes/s, 0 for
    /// none) and returns it with the link it prints.
    fn ed2k_seed(
        &self,
        file: &Path,
        addr: SocketAddrV4,
        max_up: u64,
        home: &str,
    ) -> anyhow::Result<(Proc, String)> {
        let mut cmd = self.weir(home)?;
        let log = self.work.path().join(format!("{home}.stderr"));
        cmd.args(["seed", "--ed2k", "-q", "--listen", &addr.to_string()])
            .args(["--max-up", &max_up.to_string()])
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).context("seeder log")?);
        let mut seed = Proc::spawn("weir seed --ed2k", &mut cmd)?;
        let lines = stdout_lines(&mut seed)?;
        let link = wait_line(
            &lines,
            Instant::now() + Duration::from_secs(300),
            "the eD2k seeder's link",
            |l| l.starts_with("ed2k://"),
        )
        .with_context(|| weir_lab::process::tail_file(&log, 20))?;
        if !link.contains(&format!("|sources,{addr}|")) {
            bail!("the eD2k seeder's link names no source at {addr}: {link}");
        }
        Ok((seed, link))
    }

    /// Runs `weir get SOURCES...` to completion on `port`, dialling the
    /// BitTorrent seeder, sampling the bytes from each seeder's IP. Checks
    /// that it succeeded and that every file in `check` (the seeders'
    /// copies) arrived intact.
    fn get(
        &self,
        name: &str,
        sources: &[String],
        extra: &[String],
        port: u16,
        seeders: Seeders,
        check: &[&Path],
    ) -> anyhow::Result<(WeirRun, Series, Series)> {
        let out = self.work.subdir(&format!("out-{name}-{port}"))?;
        let logs = TempDir::new("multi-get")?;
        let mut cmd = self.weir(&format!("home-get-{port}"))?;
        cmd.env("RUST_LOG", "info")
            .arg("get")
            .args(sources)
            .arg("-o")
            .arg(&out)
            .args(["--listen", &SocketAddrV4::new(LEECHER_IP, port).to_string()])
            .args(["--no-trackers", "--peer", &seeders.bt.to_string()])
            .args(extra);
        // By IP (port 0): a seeder may also dial the leecher's port.
        let peers = [
            SocketAddr::V4(SocketAddrV4::new(*seeders.bt.ip(), 0)),
            SocketAddr::V4(SocketAddrV4::new(*seeders.ed2k.ip(), 0)),
        ];
        let (r, mut series) = sample_rx_while(self.ns, &peers, self.every, || {
            run_weir_cmd(&mut cmd, name, logs.path(), None, RUN_LIMIT)
        })?;
        let r = r?;
        if !r.succeeded() {
            let tail: Vec<&str> = r.stderr.lines().rev().take(8).collect();
            bail!(
                "weir get exited with {:?}: {}",
                r.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        for src in check {
            let file = src.file_name().context("file name")?;
            weir_lab::payload::files_equal(src, &out.join(file))?;
        }
        let _ = std::fs::remove_dir_all(&out);
        let ed = series.pop().unwrap_or_default();
        let bt = series.pop().unwrap_or_default();
        Ok((r, bt, ed))
    }
}

/// Which parts to run (`parts=1,2`).
fn parts(cfg: &BenchConfig) -> anyhow::Result<(bool, bool)> {
    let s = cfg.get("parts").unwrap_or("1,2");
    let mut p = (false, false);
    for k in s.split(',') {
        match k.trim() {
            "1" => p.0 = true,
            "2" => p.1 = true,
            o => bail!("parts: unknown part {o:?} (1, 2)"),
        }
    }
    Ok(p)
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let (part1, part2) = parts(cfg)?;
    let size = cfg.size_bytes(256);
    let mixed = cfg.get_or::<u64>("mixed_mib", size >> 20)? << 20;
    let seeder = SeederKind::parse(cfg.get("seeder").unwrap_or("lt-hps"))?;
    let source_mb: f64 = cfg.get_or("source_mb", 10.0)?;
    let cap_mb: f64 = cfg.get_or("cap_mb", 20.0)?;
    let from: f64 = cfg.get_or("steady_from_s", 1.0)?;
    let every = Duration::from_millis(cfg.get_or("sample_ms", 100u64)?.max(10));
    let link_first: bool = cfg.get_or("link_first", false)?;
    if !(source_mb > 0.0 && cap_mb > 0.0 && from >= 0.0) || mixed == 0 {
        bail!("source_mb, cap_mb and mixed_mib must be positive, steady_from_s >= 0");
    }
    let source_rate = (source_mb * 1e6).round() as u64;
    let cap = (cap_mb * 1e6).round() as u64;
    let load_before = load_average();
    let ns = Netns::new("multi")?;
    let work = TempDir::new("bench-multi")?;
    let s = Setup {
        cfg,
        ns: &ns,
        work: &work,
        every,
    };
    eprintln!("multi: writing payloads");
    let p = Payload::create(&work.path().join("bt"), "multi.bin", size, 0x3a17, 1 << 20)?;
    let mut rep = Report::new("multi", cfg, &["part", "case"], metrics());
    let mut port = 7000u16;
    let mut next_port = || {
        port += 2;
        port
    };

    if part1 {
        eprintln!(
            "multi: part 1: seeders of {} MiB at {source_mb} MB/s each",
            size >> 20
        );
        let _bt = start_seeder(cfg, &ns, &seeder, &p, BT_CAPPED, Some(source_rate))?;
        // The eD2k seeder reads its own hard link of the file (no shared
        // side files with the BitTorrent seeder).
        let ed_file = work.subdir("ed")?.join("multi.bin");
        std::fs::hard_link(&p.file, &ed_file).context("linking the payload")?;
        let (_ed, link) = s.ed2k_seed(&ed_file, ED2K_CAPPED, source_rate, "home-seed1")?;
        let torrent = p.torrent.display().to_string();
        for run in 0..cfg.runs {
            eprintln!("multi: part 1, run {}/{}", run + 1, cfg.runs);
            part1_run(&s, &mut rep, run, &p, &torrent, &link, &mut next_port);
        }
    }
    if part2 {
        eprintln!(
            "multi: part 2: {} MiB over BitTorrent + {} MiB over eD2k under {cap_mb} MB/s",
            size >> 20,
            mixed >> 20
        );
        // The BitTorrent file: a torrent of its own size (mixed_mib).
        let pb = if mixed == size {
            let dir = work.subdir("bt2")?;
            std::fs::hard_link(&p.file, dir.join("multi.bin")).context("linking the payload")?;
            Payload {
                data_dir: dir.clone(),
                file: dir.join("multi.bin"),
                ..p.clone()
            }
        } else {
            Payload::create(
                &work.path().join("bt2"),
                "multi.bin",
                mixed,
                0x3a17,
                1 << 20,
            )?
        };
        let ed_file = work.subdir("ed2")?.join("multi-ed2k.bin");
        weir_lab::payload::write(&ed_file, mixed, 0x3a18)?;
        let _bt = start_seeder(cfg, &ns, &seeder, &pb, BT_FREE, None)?;
        let (_ed, link) = s.ed2k_seed(&ed_file, ED2K_FREE, 0, "home-seed2")?;
        let torrent = pb.torrent.display().to_string();
        for run in 0..cfg.runs {
            eprintln!("multi: part 2, run {}/{}", run + 1, cfg.runs);
            let port = next_port();
            let labels = [PART2, BOTH];
            let r = part2_run(
                &s,
                &if link_first {
                    [link.clone(), torrent.clone()]
                } else {
                    [torrent.clone(), link.clone()]
                },
                port,
                cap,
                from,
                &[pb.file.as_path(), ed_file.as_path()],
            );
            match r {
                Ok((v, summary)) => {
                    eprintln!(
                        "multi: part 2: {:.3} MB/s ({:+.2}% of the cap), BitTorrent {:.1}%",
                        v.rate / 1e6,
                        v.pct_cap - 100.0,
                        v.bt_pct
                    );
                    rep.add_run(&labels, &v.row());
                    rep.note(&format!("part 2, run {}: {summary}", run + 1));
                }
                Err(e) => {
                    eprintln!("multi: part 2 failed: {e:#}");
                    rep.add_failure(&labels, &format!("{e:#}"));
                }
            }
        }
    }

    rep.note(&format!(
        "part 1: {} MiB (1 MiB pieces) from {} with upload_limit {source_mb} MB/s, alone (`weir get T`), then with `weir seed --ed2k` --max-up {source_mb} MB/s beside it (`weir get T LINK`: the link joins the torrent's transfer); s: weir's own time to completion (its summary line); x alone: that time over the time alone in the same run",
        size >> 20,
        seeder.name()
    ));
    rep.note(
        "both halves of part 1 run on the engine (weir_runtime::engine), as every weir get does",
    );
    rep.note(&format!(
        "part 2: a torrent ({} MiB, unlimited {}) and an ed2k link of another file ({} MiB, unlimited `weir seed --ed2k`) in one `weir get {} --max-down {cap}`; MB/s and BT %: over the steady part, from t = {from} s after the leecher started until 0.3 s before the first of the two transfers completes (weir's own time); s: until both are complete (the later summary line)",
        mixed >> 20,
        seeder.name(),
        mixed >> 20,
        if link_first { "LINK T" } else { "T LINK" }
    ));
    rep.note(&format!(
        "BT MB / eD2k MB: payload bytes per network over the whole run, from weir's summary lines (part 1 alone: the whole file over BitTorrent); BT %: BitTorrent's share of them in part 1, of the steady part's wire bytes in part 2; wire bytes and part 2's rates: the kernel's bytes_received on the leecher's sockets to each seeder's IP (ss, protocol overhead included), sampled every {} ms; a socket's bytes after its last sample before it closes are not counted, and libtorrent's capped upload comes in bursts of up to ~9 MB about once a second, so part 1's wire totals can fall short of the payload by up to a burst",
        every.as_millis()
    ));
    target_notes(&mut rep, cap_mb);
    rep.note(&format!(
        "load average (1/5/15 min) before: {load_before}; after: {} (the machine is shared with other builds)",
        load_average()
    ));
    rep.print();
    let (json, md) = rep.write()?;
    crate::sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// One run of part 1: the file alone from BitTorrent, then with eD2k (the
/// order alternates between runs, so drift in the machine's load is
/// shared); records both rows and weir's own split.
fn part1_run(
    s: &Setup<'_>,
    rep: &mut Report,
    run: usize,
    p: &Payload,
    torrent: &str,
    link: &str,
    next_port: &mut impl FnMut() -> u16,
) {
    let name = p
        .file
        .file_name()
        .map_or_else(|| "multi.bin".into(), |n| n.to_string_lossy().into_owned());
    let one = |both: bool, port: u16| -> anyhow::Result<(Values, String)> {
        let mut sources = vec![torrent.to_string()];
        if both {
            sources.push(link.to_string());
        }
        let (r, bt, ed) = s.get(
            if both { "get-both" } else { "get-alone" },
            &sources,
            &[],
            port,
            CAPPED,
            &[p.file.as_path()],
        )?;
        if both && !r.stderr.contains("fetched from both networks") {
            bail!("the ed2k link did not join the torrent's transfer");
        }
        let secs = summary_secs(&r.stderr, &name)
            .or_else(|| r.reported_seconds())
            .context("no completion line")?;
        // Bytes per network as weir counts them (payload); one torrent
        // alone has only BitTorrent, and its summary gives no split.
        let (b, e) = if both {
            summary_split(&r.stderr, &name).context("no per-network split in the summary")?
        } else {
            (
                summary_size(&r.stderr, &name).context("no size in the summary")?,
                0.0,
            )
        };
        let split = format!(
            "wire bytes (ss) BitTorrent {:.1} MB / eD2k {:.1} MB",
            last(&bt) / 1e6,
            last(&ed) / 1e6
        );
        Ok((
            Values {
                secs,
                ratio: f64::NAN,
                rate: p.len() as f64 / secs,
                pct_cap: f64::NAN,
                bt: b,
                ed2k: e,
                bt_pct: pct(b, e),
                cpu: r.usage.cpu_s(),
            },
            split,
        ))
    };
    let order = if run % 2 == 0 {
        [false, true]
    } else {
        [true, false]
    };
    let mut got: [Option<Values>; 2] = [None, None];
    for both in order {
        let labels = [PART1, if both { BOTH } else { ALONE }];
        match one(both, next_port()) {
            Ok((v, split)) => {
                eprintln!(
                    "multi: part 1, {}: {:.2} s, BitTorrent {:.1} MB, eD2k {:.1} MB",
                    labels[1],
                    v.secs,
                    v.bt / 1e6,
                    v.ed2k / 1e6
                );
                rep.note(&format!("part 1, run {}, {}: {split}", run + 1, labels[1]));
                got[usize::from(both)] = Some(v);
            }
            Err(e) => {
                eprintln!("multi: part 1, {} failed: {e:#}", labels[1]);
                rep.add_failure(&labels, &format!("{e:#}"));
            }
        }
    }
    // The ratio needs both halves of the same run.
    let alone_secs = got[0].map(|v| v.secs);
    for (i, v) in got.iter().enumerate() {
        let Some(mut v) = *v else { continue };
        v.ratio = match (i, alone_secs) {
            (0, _) => 1.0,
            (_, Some(a)) => v.secs / a,
            _ => f64::NAN,
        };
        rep.add_run(&[PART1, if i == 1 { BOTH } else { ALONE }], &v.row());
    }
}

/// One run of part 2; returns the values and weir's own summary of it.
fn part2_run(
    s: &Setup<'_>,
    sources: &[String],
    port: u16,
    cap: u64,
    from: f64,
    check: &[&Path],
) -> anyhow::Result<(Values, String)> {
    let (r, bt, ed) = s.get(
        "get-cap",
        sources,
        &["--max-down".into(), cap.to_string()],
        port,
        FREE,
        check,
    )?;
    let names: Vec<String> = check
        .iter()
        .map(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    let secs: Vec<f64> = names
        .iter()
        .map(|n| summary_secs(&r.stderr, n).with_context(|| format!("no completion line for {n}")))
        .collect::<anyhow::Result<_>>()?;
    let (t0, t1) = steady_window(&secs, from).with_context(|| {
        format!(
            "no steady part of at least 1 s after t = {from} s (the run took {:.2} s: use a larger mixed_mib)",
            r.seconds
        )
    })?;
    let db = value_at(&bt, t1) - value_at(&bt, t0);
    let de = value_at(&ed, t1) - value_at(&ed, t0);
    let rate = (db + de) / (t1 - t0);
    let mut split = (0.0, 0.0);
    for n in &names {
        let (b, e) =
            summary_split(&r.stderr, n).with_context(|| format!("no per-network split for {n}"))?;
        split = (split.0 + b, split.1 + e);
    }
    let summary = names
        .iter()
        .zip(&secs)
        .map(|(n, t)| format!("{n} complete in {t:.2} s"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok((
        Values {
            secs: secs.iter().copied().fold(0.0, f64::max),
            ratio: f64::NAN,
            rate,
            pct_cap: 100.0 * rate / cap as f64,
            bt: split.0,
            ed2k: split.1,
            bt_pct: pct(db, de),
            cpu: r.usage.cpu_s(),
        },
        format!(
            "steady part t = {t0:.2}..{t1:.2} s: BitTorrent {:.3} MB/s + eD2k {:.3} MB/s (wire); {summary}",
            db / (t1 - t0) / 1e6,
            de / (t1 - t0) / 1e6
        ),
    ))
}

/// The last value of a cumulative series (0 when empty).
fn last(s: &Series) -> f64 {
    s.last().map_or(0.0, |p| p.1 as f64)
}

/// Whether the goals are met, from the medians.
fn target_notes(rep: &mut Report, cap_mb: f64) {
    let med = |case: [&str; 2], col: usize| {
        rep.rows
            .iter()
            .find(|r| r.labels == case)
            .and_then(|r| r.median[col])
    };
    let ratio = med([PART1, BOTH], 1);
    let rate = med([PART2, BOTH], 2);
    let n1 = match ratio {
        Some(x) => format!(
            "goal part 1, time with eD2k <= {RATIO_GOAL}x the time alone: {x:.3}x -> {}",
            if x <= RATIO_GOAL { "met" } else { "NOT met" }
        ),
        None => "goal part 1: not measured (see failures)".into(),
    };
    let n2 = match rate {
        Some(v) => {
            let err = 100.0 * (v - cap_mb) / cap_mb;
            format!(
                "goal part 2, total within {CAP_GOAL_PCT}% of the {cap_mb} MB/s cap: {v:.3} MB/s ({err:+.2}%) -> {}",
                if err.abs() <= CAP_GOAL_PCT {
                    "met"
                } else {
                    "NOT met"
                }
            )
        }
        None => "goal part 2: not measured (see failures)".into(),
    };
    rep.note(&n1);
    rep.note(&n2);
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH_LINE: &str = "x: downloading 50%\n\
        multi.bin: complete: 268.4 MB in 14.02 s (19.1 MB/s), uploaded 0 B (BitTorrent 131.2 MB / eD2k 137.3 MB down)\n";

    #[test]
    fn reads_weirs_summary() {
        assert_eq!(summary_secs(BOTH_LINE, "multi.bin"), Some(14.02));
        let (b, e) = summary_split(BOTH_LINE, "multi.bin").unwrap();
        assert!((b - 131.2e6).abs() < 1.0 && (e - 137.3e6).abs() < 1.0);
        assert_eq!(summary_secs(BOTH_LINE, "other.bin"), None);
        let alone = "multi.bin: complete: 268.4 MB in 26.90 s (10.0 MB/s), uploaded 0 B\n";
        assert_eq!(summary_secs(alone, "multi.bin"), Some(26.9));
        assert_eq!(summary_split(alone, "multi.bin"), None);
        assert_eq!(parse_size("0 B"), Some(0.0));
        assert_eq!(parse_size("1.5 kB"), Some(1500.0));
        assert_eq!(parse_size("many"), None);
        assert_eq!(parse_size("3 parsecs"), None);
    }

    #[test]
    fn steady_window_ends_before_the_first_file_is_done() {
        let (t0, t1) = steady_window(&[5.0, 4.0], 1.0).unwrap();
        assert_eq!(t0, 1.0);
        assert!((t1 - 3.7).abs() < 1e-9, "{t1}");
        // Too short, or nothing complete: no window.
        assert_eq!(steady_window(&[5.0, 4.0], 3.0), None);
        assert_eq!(steady_window(&[], 1.0), None);
        assert_eq!(pct(1.0, 3.0), 25.0);
        let size = summary_size(BOTH_LINE, "multi.bin").unwrap();
        assert!((size - 268.4e6).abs() < 1.0, "{size}");
        assert_eq!(summary_size("x: stopped at 5%", "x"), None);
    }

    #[test]
    fn goals_read_the_medians() {
        let cfg = BenchConfig::new("weir".into(), "/nonexistent".into());
        let mut r = Report::new("multi", &cfg, &["part", "case"], metrics());
        let v = Values {
            ratio: 0.56,
            ..Values::default()
        };
        r.add_run(&[PART1, BOTH], &v.row());
        let v = Values {
            rate: 19.9e6,
            ..Values::default()
        };
        r.add_run(&[PART2, BOTH], &v.row());
        target_notes(&mut r, 20.0);
        assert!(
            r.notes[0].contains("0.560x") && r.notes[0].ends_with("NOT met"),
            "{:?}",
            r.notes
        );
        assert!(
            r.notes[1].contains("-0.50%") && r.notes[1].ends_with("-> met"),
            "{:?}",
            r.notes
        );
        let mut empty = Report::new("multi", &cfg, &["part", "case"], metrics());
        target_notes(&mut empty, 20.0);
        assert!(empty.notes.iter().all(|n| n.contains("not measured")));
    }

    #[test]
    fn parts_option() {
        let mut cfg = BenchConfig::new("weir".into(), "/nonexistent".into());
        assert_eq!(parts(&cfg).unwrap(), (true, true));
        cfg.extra = vec![("parts".into(), "2".into())];
        assert_eq!(parts(&cfg).unwrap(), (false, true));
        cfg.extra = vec![("parts".into(), "3".into())];
        assert!(parts(&cfg).is_err());
    }
}
