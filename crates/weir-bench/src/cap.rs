//! Scenario `cap`: weir's global download cap (`--max-down`) as a literal
//! ceiling, and how it shares out between peers that cannot all deliver.
//!
//! Over loopback inside a namespace holding only `lo`; seeders are
//! `lt-hps` (libtorrent, high-performance-seed settings; `--set seeder=weir`
//! for `weir seed`). Seeder A (127.0.0.2) is unlimited; seeder B
//! (127.0.0.5) uploads at most `slow_mb` (5) MB/s (libtorrent
//! `upload_limit`, applied to loopback peers too, or `weir seed --max-up`).
//! The weir leecher (127.0.0.3) runs under `--max-down cap_mb` (20) MB/s;
//! its received bytes per seeder are sampled from the kernel's socket
//! counters (`ss`, protocol overhead included, about 0.1%) every 100 ms,
//! and the rate is taken between t = 1 s and t = 1 s + `window_s` (30) from
//! the leecher's start, after which it is stopped. Cases:
//!
//! 1. `1 torrent, A`: the cap alone;
//! 2. `1 torrent, A + B`: both seeders of the same torrent: the total should
//!    stay at the cap, A making up what B cannot send;
//! 3. `2 torrents, A + B`: torrent 1 from A, torrent 2 from B, both in ONE
//!    weir process under one cap (`weir get T1 T2 ...`);
//! 4. `libtorrent, A` (reference, `--set lt=0` to skip): libtorrent as the
//!    leecher with `download_limit` at the cap.
//!
//! A second table (`cap-unlimited`) times whole downloads from A without a
//! cap, with a cap far above what loopback carries (the bucket consulted on
//! every read but never binding), and with another weir binary given as
//! `--set baseline_weir=PATH` (e.g. a build from before a limiter change).
//!
//! Options: `seeder`, `cap_mb`, `slow_mb`, `window_s`, `sample_ms`, `lt`,
//! `baseline_weir`; `--size-mib` (default 1024: more than `window_s` at
//! the cap), `--runs` (default 3).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use weir_lab::bt::{self, Client};
use weir_lab::{Netns, TempDir};

use crate::BenchConfig;
use crate::bt_setup::{
    Payload, SeederKind, load_average, rate_between, run_weir, sample_rx_while, start_seeder,
};
use crate::report::{Metric, Report};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &[
    "seeder",
    "cap_mb",
    "slow_mb",
    "window_s",
    "sample_ms",
    "lt",
    "baseline_weir",
];

const SEED_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6881);
const SEED_B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 5), 6881);
const LEECHER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// The measured part of one capped run.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Split {
    /// Bytes/s from A over the window.
    a: f64,
    /// Bytes/s from B over the window (NaN: not a peer).
    b: f64,
    /// Leecher CPU seconds over its run.
    cpu: f64,
}

impl Split {
    fn total(&self) -> f64 {
        self.a + if self.b.is_nan() { 0.0 } else { self.b }
    }
}

/// Settings of one bench invocation.
struct Setup<'a> {
    cfg: &'a BenchConfig,
    ns: &'a Netns,
    work: &'a TempDir,
    cap: u64,
    /// Measurement window: from `start` s for `window` s.
    start: f64,
    window: f64,
    every: Duration,
}

impl Setup<'_> {
    /// Warms as much guest memory as one capped run writes (the cap over
    /// the run, plus a tenth), so no run pays for the host faulting it in
    /// (see [`crate::common::warm_page_cache`]).
    fn warm(&self) -> anyhow::Result<()> {
        let bytes = self.cap as f64 * (self.start + self.window + 0.3) * 1.1;
        crate::common::warm_page_cache(self.work.path(), bytes as u64)
    }

    /// Runs `weir ARGS` (a capped leecher dialling `peers`), stops it at the
    /// end of the window and returns the per-seeder rates over the window.
    fn capped_weir(
        &self,
        name: &str,
        args: &[String],
        peers: &[SocketAddr],
    ) -> anyhow::Result<Split> {
        let logs = TempDir::new("cap-weir")?;
        self.warm()?;
        let stop = Duration::from_secs_f64(self.start + self.window + 0.3);
        let (res, series) = sample_rx_while(self.ns, peers, self.every, || {
            run_weir(
                self.cfg,
                self.ns,
                name,
                args,
                logs.path(),
                Some(stop),
                stop + Duration::from_secs(5),
            )
        })?;
        let r = res?;
        if let Some(st) = r.status {
            let first = r
                .stderr
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_string();
            if st.success() {
                bail!(
                    "weir finished before the {} s window ended (use a larger --size-mib)",
                    self.window
                );
            }
            bail!("weir exited with {st} after {:.2} s: {first}", r.seconds);
        }
        Ok(self.split(&series, r.usage.cpu_s()))
    }

    fn split(&self, series: &[Vec<(f64, u64)>], cpu: f64) -> Split {
        let rate = |i: usize| -> f64 {
            series.get(i).map_or(f64::NAN, |s| {
                rate_between(s, self.start, self.start + self.window)
            })
        };
        Split {
            a: rate(0),
            b: rate(1),
            cpu,
        }
    }

    /// The weir leecher's command line for `torrents`, dialling `peers`,
    /// with the cap (`None`: no `--max-down`).
    fn weir_args(
        &self,
        torrents: &[&Path],
        out: &Path,
        port: u16,
        peers: &[SocketAddr],
        cap: Option<&str>,
    ) -> Vec<String> {
        let mut a = vec!["get".to_string()];
        a.extend(torrents.iter().map(|t| t.display().to_string()));
        a.extend([
            "-o".into(),
            out.display().to_string(),
            "--listen".into(),
            SocketAddrV4::new(LEECHER_IP, port).to_string(),
            "--no-trackers".into(),
        ]);
        for p in peers {
            a.push("--peer".into());
            a.push(p.to_string());
        }
        if let Some(c) = cap {
            a.push("--max-down".into());
            a.push(c.into());
        }
        a
    }
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let size = cfg.size_bytes(1024);
    let seeder_kind = SeederKind::parse(cfg.get("seeder").unwrap_or("lt-hps"))?;
    let cap_mb: f64 = cfg.get_or("cap_mb", 20.0)?;
    let slow_mb: f64 = cfg.get_or("slow_mb", 5.0)?;
    let window: f64 = cfg.get_or("window_s", 30.0)?;
    let every = Duration::from_millis(cfg.get_or("sample_ms", 100u64)?.max(10));
    let with_lt: bool = cfg.get_or("lt", true)?;
    let baseline = cfg.get("baseline_weir").map(PathBuf::from);
    if !(cap_mb > 0.0 && slow_mb > 0.0 && window > 0.0) {
        bail!("cap_mb, slow_mb and window_s must be positive");
    }
    let cap = (cap_mb * 1e6).round() as u64;
    let slow = (slow_mb * 1e6).round() as u64;
    if (size as f64) < cap as f64 * (window + 2.0) {
        bail!(
            "--size-mib {} is too small to last {window} s at {cap_mb} MB/s",
            size >> 20
        );
    }
    let load_before = load_average();
    let ns = Netns::new("cap")?;
    let work = TempDir::new("bench-cap")?;
    eprintln!("cap: writing payloads");
    let p1 = Payload::create(&work.path().join("a"), "cap1.bin", size, 0xca91, 1 << 20)?;
    // Seeder B of the same torrent gets its own directory (a hard link to
    // the same file), so seeders never share resume files.
    let b1_dir = work.subdir("b1")?;
    std::fs::hard_link(&p1.file, b1_dir.join("cap1.bin")).context("linking the payload for B")?;
    let p1_b = Payload {
        data_dir: b1_dir,
        file: work.path().join("b1/cap1.bin"),
        ..p1.clone()
    };
    let size2 = size.min(256 << 20);
    let p2 = Payload::create(&work.path().join("b2"), "cap2.bin", size2, 0xca92, 1 << 20)?;
    let s = Setup {
        cfg,
        ns: &ns,
        work: &work,
        cap,
        start: 1.0,
        window,
        every,
    };
    let a_addr = SocketAddr::V4(SEED_A);
    let b_addr = SocketAddr::V4(SEED_B);
    let cap_arg = cap.to_string();
    eprintln!("cap: starting seeder A ({})", seeder_kind.name());
    let _seed_a = start_seeder(cfg, &ns, &seeder_kind, &p1, SEED_A, None)?;

    let mut rep = Report::new(
        "cap",
        cfg,
        &["case", "leecher"],
        vec![
            Metric::new("MB/s", 3),
            Metric::new("% of cap", 2),
            Metric::new("A MB/s", 3),
            Metric::new("B MB/s", 3),
            Metric::new("CPU s", 2),
        ],
    );
    let record = |rep: &mut Report, labels: [&str; 2], r: anyhow::Result<Split>| match r {
        Ok(sp) => {
            let t = sp.total();
            rep.add_run(
                &labels,
                &[
                    t / 1e6,
                    100.0 * t / cap as f64,
                    sp.a / 1e6,
                    sp.b / 1e6,
                    sp.cpu,
                ],
            );
            eprintln!(
                "cap: {}: {:.3} MB/s (A {:.3}, B {:.3})",
                labels[0],
                t / 1e6,
                sp.a / 1e6,
                sp.b / 1e6
            );
        }
        Err(e) => {
            eprintln!("cap: {} failed: {e:#}", labels[0]);
            rep.add_failure(&labels, &format!("{e:#}"));
        }
    };
    let mut port = 6900u16;
    // Steps of 2: with two torrents, weir listens on port and port + 1.
    let mut next_port = || {
        port += 2;
        port
    };
    for run in 0..cfg.runs {
        eprintln!("cap: run {}/{}", run + 1, cfg.runs);
        // 1. The cap alone.
        let out = work.subdir(&format!("out-{run}-1"))?;
        let args = s.weir_args(&[&p1.torrent], &out, next_port(), &[a_addr], Some(&cap_arg));
        let r = s.capped_weir("weir-cap", &args, &[a_addr]);
        record(
            &mut rep,
            ["1 torrent, A", "weir"],
            r.map(|sp| Split { b: f64::NAN, ..sp }),
        );
        let _ = std::fs::remove_dir_all(&out);

        // 2. Two seeders of the same torrent, B slow.
        let r = (|| {
            let _b = start_seeder(cfg, &ns, &seeder_kind, &p1_b, SEED_B, Some(slow))?;
            let out = work.subdir(&format!("out-{run}-2"))?;
            let args = s.weir_args(
                &[&p1.torrent],
                &out,
                next_port(),
                &[a_addr, b_addr],
                Some(&cap_arg),
            );
            let r = s.capped_weir("weir-cap2", &args, &[a_addr, b_addr]);
            let _ = std::fs::remove_dir_all(&out);
            r
        })();
        record(&mut rep, ["1 torrent, A + B", "weir"], r);

        // 3. Two torrents, one from each seeder, one process, one cap.
        let r = (|| {
            let _b = start_seeder(cfg, &ns, &seeder_kind, &p2, SEED_B, Some(slow))?;
            let out = work.subdir(&format!("out-{run}-3"))?;
            let args = s.weir_args(
                &[&p1.torrent, &p2.torrent],
                &out,
                next_port(),
                &[a_addr, b_addr],
                Some(&cap_arg),
            );
            let r = s.capped_weir("weir-cap3", &args, &[a_addr, b_addr]);
            let _ = std::fs::remove_dir_all(&out);
            r
        })();
        record(&mut rep, ["2 torrents, A + B", "weir"], r);

        // 4. Reference: libtorrent's own download cap.
        if with_lt {
            let r = lt_capped(&s, &p1.torrent, next_port(), a_addr);
            record(
                &mut rep,
                ["1 torrent, A", "libtorrent"],
                r.map(|sp| Split { b: f64::NAN, ..sp }),
            );
        }
    }
    rep.note(&format!(
        "cap {cap_mb} MB/s (--max-down {cap}); seeders {} on loopback: A unlimited, B --max-up/upload_limit {slow_mb} MB/s; payload {} MiB (torrent 2: {} MiB), 1 MiB pieces",
        seeder_kind.name(),
        size >> 20,
        size2 >> 20
    ));
    rep.note(&format!(
        "rate = kernel bytes_received on the leecher's sockets to each seeder (wire bytes, ~0.1% protocol overhead) between t={} s and t={} s after the leecher started, sampled every {} ms; the leecher is then stopped",
        s.start,
        s.start + window,
        every.as_millis()
    ));
    rep.note("case 3: one process, one global cap: `weir get T1 T2 --peer A --peer B --max-down R`; each torrent dials both seeders, each seeder has only its own torrent");
    cap_target_notes(&mut rep, cap_mb);
    rep.note(&format!(
        "load average (1/5/15 min) before: {load_before}; after: {}",
        load_average()
    ));
    rep.print();
    let (json, md) = rep.write()?;
    crate::sayln!("wrote {} and {}", json.display(), md.display());

    unlimited(
        &s,
        &p1,
        a_addr,
        baseline.as_deref(),
        next_port,
        &seeder_kind,
    )?;
    Ok(())
}

/// libtorrent (default settings) leeching from A under `download_limit`.
fn lt_capped(s: &Setup<'_>, torrent: &Path, port: u16, a: SocketAddr) -> anyhow::Result<Split> {
    let out = s.work.subdir(&format!("out-lt-{port}"))?;
    s.warm()?;
    let opts = bt::Options {
        peers: vec![a],
        download_limit: Some(s.cap),
        timeout: Duration::from_secs_f64(s.start + s.window + 0.3),
        ..bt::Options::default()
    };
    let addr = SocketAddrV4::new(LEECHER_IP, port);
    let (res, series) = sample_rx_while(s.ns, &[a], s.every, || {
        bt::leech_with(s.ns, &Client::Libtorrent, torrent, &out, addr, &opts)
    })?;
    let _ = std::fs::remove_dir_all(&out);
    match res {
        // Stopped at the end of the window, as intended.
        Err(e) if format!("{e:#}").contains("timed out") => Ok(s.split(&series, f64::NAN)),
        Err(e) => Err(e),
        Ok(_) => bail!("libtorrent finished before the window ended"),
    }
}

/// Notes whether the targets are met, from the medians.
fn cap_target_notes(rep: &mut Report, cap_mb: f64) {
    let med = |case: &str| {
        rep.rows
            .iter()
            .find(|r| r.labels[0] == case && r.labels[1] == "weir")
            .and_then(|r| r.median[0])
    };
    let (one, two, files) = (
        med("1 torrent, A"),
        med("1 torrent, A + B"),
        med("2 torrents, A + B"),
    );
    let mut notes = Vec::new();
    match one {
        Some(v) => {
            let err = 100.0 * (v - cap_mb) / cap_mb;
            notes.push(format!(
                "target within 1% of the cap: {v:.3} MB/s ({err:+.2}%) -> {}",
                if err.abs() <= 1.0 { "met" } else { "NOT met" }
            ));
        }
        None => notes.push("target within 1% of the cap: not measured".into()),
    }
    for (what, v) in [("two seeders", two), ("two torrents", files)] {
        notes.push(match v {
            Some(v) => {
                let pct = 100.0 * v / cap_mb;
                format!(
                    "target >= 98% of the cap, {what}: {v:.3} MB/s = {pct:.1}% -> {}",
                    if pct >= 98.0 { "met" } else { "NOT met" }
                )
            }
            None => format!("target >= 98% of the cap, {what}: not measured (see failures)"),
        });
    }
    for n in notes {
        rep.note(&n);
    }
}

/// The `cap-unlimited` table: whole downloads from A with no cap, with a
/// cap that never binds, and with a baseline binary.
fn unlimited(
    s: &Setup<'_>,
    p: &Payload,
    a: SocketAddr,
    baseline: Option<&Path>,
    mut next_port: impl FnMut() -> u16,
    seeder: &SeederKind,
) -> anyhow::Result<()> {
    let mut rep = Report::new(
        "cap-unlimited",
        s.cfg,
        &["leecher", "--max-down"],
        vec![
            Metric::new("s", 3),
            Metric::new("MB/s", 1),
            Metric::new("exit s", 3),
            Metric::new("CPU s", 2),
        ],
    );
    let high = "100GB/s";
    let mut variants: Vec<(String, PathBuf, Option<&str>)> = vec![
        ("weir".into(), s.cfg.weir_exe.clone(), None),
        ("weir".into(), s.cfg.weir_exe.clone(), Some(high)),
    ];
    if let Some(b) = baseline {
        variants.push(("baseline".into(), b.to_path_buf(), None));
    }
    for run in 0..s.cfg.runs {
        // Alternate the order so drift in the machine's load is shared.
        let order: Vec<usize> = if run % 2 == 0 {
            (0..variants.len()).collect()
        } else {
            (0..variants.len()).rev().collect()
        };
        for i in order {
            let (name, exe, cap) = &variants[i];
            let labels = [name.as_str(), cap.unwrap_or("none")];
            let out = s.work.subdir(&format!("out-unl-{run}-{i}"))?;
            let args = s.weir_args(&[&p.torrent], &out, next_port(), &[a], *cap);
            let mut cfg = s.cfg.clone();
            cfg.weir_exe = exe.clone();
            let logs = TempDir::new("cap-unl")?;
            let r = run_weir(
                &cfg,
                s.ns,
                name,
                &args,
                logs.path(),
                None,
                Duration::from_secs(600),
            );
            let _ = std::fs::remove_dir_all(&out);
            match r {
                Ok(r) if r.succeeded() => {
                    let secs = r.reported_seconds().unwrap_or(r.seconds);
                    rep.add_run(
                        &labels,
                        &[
                            secs,
                            p.len() as f64 / secs / 1e6,
                            r.seconds,
                            r.usage.cpu_s(),
                        ],
                    );
                    eprintln!("cap-unlimited: {} {}: {secs:.3} s", labels[0], labels[1]);
                }
                Ok(r) => rep.add_failure(
                    &labels,
                    &format!("exited {:?}: {}", r.status, r.stderr.trim()),
                ),
                Err(e) => rep.add_failure(&labels, &format!("{e:#}")),
            }
        }
    }
    rep.note(&format!(
        "whole {} MiB download from A ({}, loopback); s: weir's own time to completion (its summary line, 2 decimals); exit s: process start to exit (start-up, resume check and shutdown included)",
        p.len() >> 20,
        seeder.name()
    ));
    rep.note(&format!(
        "--max-down {high} is far above what loopback carries: the bucket is consulted on every read but never binds; `none` short-circuits it"
    ));
    rep.note("the limiter landed with the BitTorrent driver itself (commit 23f45c2): no weir build without it exists to compare with; give one as --set baseline_weir=PATH if wanted");
    rep.note(&format!(
        "load average (1/5/15 min) after: {}",
        load_average()
    ));
    rep.print();
    let (json, md) = rep.write()?;
    crate::sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_notes_read_the_medians() {
        let cfg = BenchConfig::new("weir".into(), "/nonexistent".into());
        let m = ["MB/s", "%", "A", "B", "cpu"]
            .iter()
            .map(|n| Metric::new(n, 2))
            .collect();
        let mut r = Report::new("cap", &cfg, &["case", "leecher"], m);
        r.add_run(
            &["1 torrent, A", "weir"],
            &[19.9, 99.5, 19.9, f64::NAN, 1.0],
        );
        r.add_run(&["1 torrent, A + B", "weir"], &[19.5, 97.5, 14.5, 5.0, 1.0]);
        r.add_failure(&["2 torrents, A + B", "weir"], "exit 2");
        cap_target_notes(&mut r, 20.0);
        assert!(
            r.notes[0].contains("-0.50%") && r.notes[0].ends_with("met"),
            "{:?}",
            r.notes
        );
        assert!(
            r.notes[1].contains("97.5%") && r.notes[1].ends_with("NOT met"),
            "{:?}",
            r.notes
        );
        assert!(r.notes[2].contains("not measured"), "{:?}", r.notes);
        let sp = Split {
            a: 15.0,
            b: f64::NAN,
            cpu: 0.0,
        };
        assert_eq!(sp.total(), 15.0);
    }
}
