//! Scenario `magnet`: weir and a libtorrent leecher in turn fetch the same
//! magnet link (no tracker, no `x.pe`) from the same libtorrent seeder,
//! found through the same libtorrent DHT node, in one namespace holding
//! only `lo`:
//!
//! - `127.0.0.2:6881` a libtorrent DHT node, `127.0.0.3:6881` a libtorrent
//!   seeder (seed mode) announcing to it; the bench waits until the node
//!   holds the seeder's announce, then times the fetches;
//! - weir on `127.0.0.4:6881`: `weir get MAGNET --no-trackers
//!   --dht-bootstrap 127.0.0.2:6881` (`RUST_LOG=info`), its milestones
//!   read from its log lines as they come: `metadata fetched`, `first
//!   piece verified`, `every piece verified` (the engine's `milestone`
//!   target);
//! - libtorrent on `127.0.0.5:6881` (`weir_lab::bt::dht`, default
//!   settings and extensions, its own DHT schedule): `METADATA`
//!   (metadata_received_alert), `FIRST` (the first piece_finished_alert),
//!   `FINISHED`.
//!
//! Every time is from the leecher's spawn; libtorrent's include Python's
//! start and `import libtorrent` (the `ready` column: spawn to session up
//! and the magnet added). Each fetch starts cold (a fresh directory: no
//! saved routing table, no metadata). Runs alternate which client goes
//! first. The node keeps the announces of earlier runs' leechers (gone by
//! then; both clients meet the same stale entries).
//!
//! Goals (issue 11): weir's median time to metadata <= 0.5x libtorrent's,
//! to complete <= 0.6x.
//!
//! `--size-mib` (default 256), `--runs` (default 3), `--set piece_kib=N`
//! (default 256), `--set timeout_s=N` (per fetch, default 120).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::bt::dht::{self, Role};
use weir_lab::process::Proc;
use weir_lab::{Netns, TempDir, payload};

use crate::BenchConfig;
use crate::bt_setup::{Payload, load_average, weir_in};
use crate::common::median;
use crate::report::{Metric, Report};
use crate::sayln;

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["piece_kib", "timeout_s"];

/// Goal: weir's time to metadata at most this times libtorrent's.
pub const GOAL_METADATA: f64 = 0.5;
/// Goal: weir's time to complete at most this times libtorrent's.
pub const GOAL_COMPLETE: f64 = 0.6;

const PORT: u16 = 6881;
const NODE_IP: &str = "127.0.0.2";
const SEED_IP: &str = "127.0.0.3";
const WEIR_IP: &str = "127.0.0.4";
const LT_IP: &str = "127.0.0.5";
const NODE: &str = "127.0.0.2:6881";

/// The two leechers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leecher {
    /// `weir get MAGNET`.
    Weir,
    /// The libtorrent leecher of `weir_lab::bt::dht`.
    Libtorrent,
}

impl Leecher {
    /// Its row label.
    pub fn name(self) -> &'static str {
        match self {
            Leecher::Weir => "weir",
            Leecher::Libtorrent => "libtorrent",
        }
    }
}

/// A point a fetch passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Milestone {
    /// The process is up with the link added (libtorrent only).
    Ready,
    /// The info dictionary is fetched and verified.
    Metadata,
    /// The first piece is verified.
    FirstPiece,
    /// Every piece is verified.
    Complete,
}

/// Which milestone a line of weir's stderr (with `RUST_LOG=info`) marks.
pub fn weir_milestone(line: &str) -> Option<Milestone> {
    if line.contains(": metadata fetched (") {
        Some(Milestone::Metadata)
    } else if line.contains(": first piece verified") {
        Some(Milestone::FirstPiece)
    } else if line.contains(": every piece verified") {
        Some(Milestone::Complete)
    } else {
        None
    }
}

/// Which milestone a line of the libtorrent script marks.
pub fn lt_milestone(line: &str) -> Option<Milestone> {
    match line.trim() {
        "READY" => Some(Milestone::Ready),
        "METADATA" => Some(Milestone::Metadata),
        "FIRST" => Some(Milestone::FirstPiece),
        "FINISHED" => Some(Milestone::Complete),
        _ => None,
    }
}

/// Seconds from a leecher's spawn to each milestone (NaN: not seen).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Milestones {
    /// Up, link added (libtorrent only).
    pub ready: f64,
    /// Metadata fetched.
    pub metadata: f64,
    /// First piece verified.
    pub first_piece: f64,
    /// Every piece verified.
    pub complete: f64,
}

impl Milestones {
    /// The first time of each milestone among `lines` (seconds since the
    /// spawn, and the line), as `parse` reads them.
    pub fn from_lines(lines: &[(f64, String)], parse: fn(&str) -> Option<Milestone>) -> Self {
        let mut m = Milestones {
            ready: f64::NAN,
            metadata: f64::NAN,
            first_piece: f64::NAN,
            complete: f64::NAN,
        };
        for (t, l) in lines {
            let slot = match parse(l) {
                Some(Milestone::Ready) => &mut m.ready,
                Some(Milestone::Metadata) => &mut m.metadata,
                Some(Milestone::FirstPiece) => &mut m.first_piece,
                Some(Milestone::Complete) => &mut m.complete,
                None => continue,
            };
            if slot.is_nan() {
                *slot = *t;
            }
        }
        m
    }

    /// What is missing or out of order, if anything (a fetch is only
    /// counted with metadata <= first piece <= complete, all seen).
    pub fn problem(&self) -> Option<&'static str> {
        let seen = |x: f64| x.is_finite() && x >= 0.0;
        if !seen(self.metadata) {
            Some("no metadata milestone")
        } else if !seen(self.first_piece) {
            Some("no first-piece milestone")
        } else if !seen(self.complete) {
            Some("no completion milestone")
        } else if self.metadata > self.first_piece || self.first_piece > self.complete {
            Some("milestones out of order")
        } else {
            None
        }
    }
}

/// Medians of each leecher's fetches and weir's ratios to libtorrent's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    /// weir's medians.
    pub weir: Milestones,
    /// libtorrent's medians.
    pub lt: Milestones,
    /// weir / libtorrent, time to metadata.
    pub metadata_ratio: f64,
    /// weir / libtorrent, time to first piece.
    pub first_piece_ratio: f64,
    /// weir / libtorrent, time to complete.
    pub complete_ratio: f64,
}

impl Verdict {
    /// Whether weir's time to metadata meets [`GOAL_METADATA`].
    pub fn metadata_met(&self) -> bool {
        self.metadata_ratio <= GOAL_METADATA
    }

    /// Whether weir's time to complete meets [`GOAL_COMPLETE`].
    pub fn complete_met(&self) -> bool {
        self.complete_ratio <= GOAL_COMPLETE
    }
}

fn medians(runs: &[Milestones]) -> Milestones {
    let m = |f: fn(&Milestones) -> f64| {
        median(&runs.iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
    };
    Milestones {
        ready: m(|r| r.ready),
        metadata: m(|r| r.metadata),
        first_piece: m(|r| r.first_piece),
        complete: m(|r| r.complete),
    }
}

/// The verdict over the fetches each leecher completed; `None` when
/// either has none.
pub fn verdict(weir: &[Milestones], lt: &[Milestones]) -> Option<Verdict> {
    if weir.is_empty() || lt.is_empty() {
        return None;
    }
    let (w, l) = (medians(weir), medians(lt));
    Some(Verdict {
        weir: w,
        lt: l,
        metadata_ratio: w.metadata / l.metadata,
        first_piece_ratio: w.first_piece / l.first_piece,
        complete_ratio: w.complete / l.complete,
    })
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// The weir binary.
    pub weir_exe: PathBuf,
    /// Payload bytes.
    pub size: u64,
    /// Piece length.
    pub piece: u64,
    /// Fetches per leecher.
    pub runs: usize,
    /// Limit of one fetch.
    pub timeout: Duration,
}

/// What [`measure`] saw.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// weir's completed fetches.
    pub weir: Vec<Milestones>,
    /// libtorrent's completed fetches.
    pub lt: Vec<Milestones>,
    /// Failed fetches.
    pub failures: Vec<(Leecher, String)>,
    /// Seconds from the start to the seeder's announce held by the node.
    pub setup_s: f64,
}

/// The magnet link of `hash` (hex): no tracker, no peer.
fn link(hash: &str, name: &str) -> String {
    format!("magnet:?xt=urn:btih:{hash}&dn={name}")
}

/// Reads `p`'s stderr lines as they come, each with its time since `t0`;
/// every line also goes to `log`.
fn timed_stderr(
    p: &mut Proc,
    t0: Instant,
    log: PathBuf,
) -> anyhow::Result<std::thread::JoinHandle<Vec<(f64, String)>>> {
    let err = p.take_stderr().context("stderr not piped")?;
    Ok(std::thread::spawn(move || {
        use std::io::Write;
        let mut out = std::fs::File::create(&log).ok();
        let mut lines = Vec::new();
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let t = t0.elapsed().as_secs_f64();
            if let Some(f) = &mut out {
                let _ = writeln!(f, "{t:9.4} {l}");
            }
            lines.push((t, l));
        }
        lines
    }))
}

/// One `weir get MAGNET` into a fresh directory under `work`.
fn fetch_weir(
    o: &Options,
    ns: &Netns,
    work: &Path,
    p: &Payload,
    magnet: &str,
    run: usize,
) -> anyhow::Result<Milestones> {
    let out = work.join(format!("weir-{run}"));
    let cfg = BenchConfig::new(o.weir_exe.clone(), PathBuf::new());
    let mut cmd = weir_in(&cfg, ns);
    cmd.env("RUST_LOG", "info")
        .arg("get")
        .arg(magnet)
        .arg("-o")
        .arg(&out)
        .args(["--no-trackers", "-q", "--dht-bootstrap", NODE])
        .args(["--listen", &format!("{WEIR_IP}:{PORT}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut proc = Proc::spawn("weir get (magnet)", &mut cmd)?;
    let t0 = proc.started();
    let reader = timed_stderr(&mut proc, t0, work.join(format!("weir-{run}.log")))?;
    let ended = proc.wait_timeout(o.timeout)?;
    if ended.is_none() {
        proc.kill_tree()?;
    }
    let lines = reader.join().unwrap_or_default();
    let tail = || {
        let n = lines.len().saturating_sub(12);
        lines[n..]
            .iter()
            .map(|(t, l)| format!("{t:.3} {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match ended {
        None => bail!("timed out after {:?}:\n{}", o.timeout, tail()),
        Some((st, _)) if !st.success() => bail!("{st}:\n{}", tail()),
        Some(_) => {}
    }
    let m = Milestones::from_lines(&lines, weir_milestone);
    if let Some(why) = m.problem() {
        bail!("{why}:\n{}", tail());
    }
    payload::files_equal(&p.file, &out.join(file_name(p)?))?;
    std::fs::remove_dir_all(&out).ok();
    Ok(m)
}

/// One libtorrent fetch of the link into a fresh directory under `work`.
fn fetch_lt(
    o: &Options,
    ns: &Netns,
    work: &Path,
    p: &Payload,
    magnet: &str,
    run: usize,
) -> anyhow::Result<Milestones> {
    let out = work.join(format!("lt-{run}"));
    std::fs::create_dir_all(&out)?;
    let name = format!("lt-leech-{run}");
    let (mut proc, rx): (Proc, Receiver<String>) = dht::start(
        ns,
        work,
        &name,
        LT_IP,
        PORT,
        Role::Leech {
            dir: &out,
            magnet,
            boot: NODE,
            force: false,
        },
    )?;
    let t0 = proc.started();
    let mut lines = vec![(t0.elapsed().as_secs_f64(), "READY".to_string())];
    let deadline = t0 + o.timeout;
    let got = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                let done = lt_milestone(&l) == Some(Milestone::Complete);
                lines.push((t0.elapsed().as_secs_f64(), l));
                if done {
                    break Ok(());
                }
            }
            Err(_) => break Err(anyhow::anyhow!("no FINISHED within {:?}", o.timeout)),
        }
    };
    // The file is compared below: only once libtorrent wrote all of it.
    let got = got.and_then(|()| dht::flushed(&rx, Instant::now() + Duration::from_secs(20)));
    proc.kill_tree_with_grace(Duration::from_secs(3))?;
    if let Err(e) = got {
        let log = weir_lab::process::tail_file(&work.join(format!("{name}.stderr")), 12);
        bail!("{e:#}; seen {lines:?}; {log}");
    }
    let m = Milestones::from_lines(&lines, lt_milestone);
    if let Some(why) = m.problem() {
        bail!("{why}: {lines:?}");
    }
    payload::files_equal(&p.file, &out.join(file_name(p)?))?;
    std::fs::remove_dir_all(&out).ok();
    Ok(m)
}

fn file_name(p: &Payload) -> anyhow::Result<&std::ffi::OsStr> {
    p.file.file_name().context("payload file name")
}

/// Sets up the node and the seeder, then runs `o.runs` fetches of each
/// leecher in turn (alternating which goes first).
pub fn measure(o: &Options) -> anyhow::Result<Measured> {
    let t0 = Instant::now();
    let work = TempDir::new("bench-magnet")?;
    let p = Payload::create(
        &work.path().join("seed"),
        "magnet.bin",
        o.size,
        0x6d61,
        o.piece,
    )?;
    let hash = p.info.info_hash_hex();
    let magnet = link(&hash, "magnet.bin");
    let ns = Netns::new("magnet")?;
    let (_node, node_rx) = dht::start(&ns, work.path(), "lt-node", NODE_IP, PORT, Role::Node)?;
    let (_seeder, _seeder_rx) = dht::start(
        &ns,
        work.path(),
        "lt-seeder",
        SEED_IP,
        PORT,
        Role::Seed {
            dir: &p.data_dir,
            torrent: &p.torrent,
            boot: NODE,
        },
    )?;
    dht::wait_announce(&node_rx, &hash, SEED_IP, PORT, Duration::from_secs(30))?;
    let mut m = Measured {
        setup_s: t0.elapsed().as_secs_f64(),
        ..Measured::default()
    };
    for run in 0..o.runs {
        let order = if run % 2 == 0 {
            [Leecher::Weir, Leecher::Libtorrent]
        } else {
            [Leecher::Libtorrent, Leecher::Weir]
        };
        for who in order {
            eprintln!("magnet: run {}/{}, {}", run + 1, o.runs, who.name());
            let r = match who {
                Leecher::Weir => fetch_weir(o, &ns, work.path(), &p, &magnet, run),
                Leecher::Libtorrent => fetch_lt(o, &ns, work.path(), &p, &magnet, run),
            };
            match (who, r) {
                (Leecher::Weir, Ok(x)) => m.weir.push(x),
                (Leecher::Libtorrent, Ok(x)) => m.lt.push(x),
                (_, Err(e)) => m.failures.push((who, format!("{e:#}"))),
            }
        }
    }
    Ok(m)
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let o = Options {
        weir_exe: cfg.weir_exe.clone(),
        size: cfg.size_bytes(256),
        piece: cfg.get_or("piece_kib", 256u64)?.clamp(16, 16 << 10) << 10,
        runs: cfg.runs,
        timeout: Duration::from_secs(cfg.get_or("timeout_s", 120u64)?.max(5)),
    };
    let load_before = load_average();
    let m = measure(&o)?;
    let mut rep = Report::new(
        "magnet",
        cfg,
        &["leecher"],
        vec![
            Metric::new("metadata s", 3),
            Metric::new("first piece s", 3),
            Metric::new("complete s", 3),
            Metric::new("MB/s after metadata", 1),
            Metric::new("ready s", 3),
        ],
    );
    let row = |r: &Milestones| {
        [
            r.metadata,
            r.first_piece,
            r.complete,
            o.size as f64 / (r.complete - r.metadata).max(1e-9) / 1e6,
            r.ready,
        ]
    };
    for r in &m.weir {
        rep.add_run(&["weir"], &row(r));
    }
    for r in &m.lt {
        rep.add_run(&["libtorrent"], &row(r));
    }
    for (who, e) in &m.failures {
        eprintln!("magnet: {} failed: {e}", who.name());
        rep.add_failure(&[who.name()], e);
    }
    rep.note(&format!(
        "{} MiB file, {} KiB pieces, magnet link with no tracker and no peer; one libtorrent DHT node (127.0.0.2) and one libtorrent seeder (127.0.0.3, seed mode, default settings, announcing every second), set up once in {:.1} s and shared by every fetch; weir (127.0.0.4): `weir get MAGNET --no-trackers --dht-bootstrap 127.0.0.2:6881`, milestones from its log lines; libtorrent (127.0.0.5): python3-libtorrent 2.0 with default settings and extensions, LSD/UPnP/NAT-PMP/uTP off, alerts; times from each leecher's spawn (libtorrent's include Python and the import: the `ready` column); first piece = first piece verified; runs alternate which leecher goes first; namespace holding only lo; load average before: {load_before}, after: {}",
        o.size >> 20,
        o.piece >> 10,
        m.setup_s,
        load_average()
    ));
    match verdict(&m.weir, &m.lt) {
        Some(v) => rep.note(&format!(
            "weir / libtorrent (medians): metadata {:.3} / {:.3} s = {:.2}x (goal <= {GOAL_METADATA}x: {}); first piece {:.3} / {:.3} s = {:.2}x; complete {:.3} / {:.3} s = {:.2}x (goal <= {GOAL_COMPLETE}x: {}); against libtorrent's times less its start-up ({:.3} s): metadata {:.2}x, complete {:.2}x",
            v.weir.metadata,
            v.lt.metadata,
            v.metadata_ratio,
            if v.metadata_met() { "met" } else { "NOT met" },
            v.weir.first_piece,
            v.lt.first_piece,
            v.first_piece_ratio,
            v.weir.complete,
            v.lt.complete,
            v.complete_ratio,
            if v.complete_met() { "met" } else { "NOT met" },
            v.lt.ready,
            v.weir.metadata / (v.lt.metadata - v.lt.ready),
            v.weir.complete / (v.lt.complete - v.lt.ready),
        )),
        None => rep.note("a leecher completed no fetch: no verdict"),
    }
    rep.print();
    let (json, md) = rep.write()?;
    sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[(f64, &str)]) -> Vec<(f64, String)> {
        v.iter().map(|(t, l)| (*t, l.to_string())).collect()
    }

    #[test]
    fn weirs_log_lines_give_its_milestones() {
        let log = lines(&[
            (
                0.01,
                "INFO weir::cmd::multi: magnet.bin: fetching the metadata (BEP 9) from the link's peers",
            ),
            (0.05, "INFO DHT: bootstrapped, 3 nodes in the table"),
            (
                0.21,
                "INFO magnet.bin: metadata fetched (5186 bytes), saved as /x/.weir-meta-0011223344556677.torrent",
            ),
            (0.35, " INFO magnet.bin: first piece verified"),
            (0.36, " INFO magnet.bin: first piece verified"),
            (1.90, " INFO magnet.bin: every piece verified"),
        ]);
        let m = Milestones::from_lines(&log, weir_milestone);
        assert_eq!((m.metadata, m.first_piece, m.complete), (0.21, 0.35, 1.90));
        assert!(m.ready.is_nan());
        assert_eq!(m.problem(), None);
        // Metadata from a saved file is no fetch.
        assert_eq!(
            weir_milestone("INFO magnet.bin: metadata from /x/y.torrent"),
            None
        );
    }

    #[test]
    fn libtorrents_lines_give_its_milestones_and_gaps_are_problems() {
        let log = lines(&[
            (0.4, "READY"),
            (1.2, "METADATA"),
            (1.3, "ANNOUNCE 00 127.0.0.5 6881"),
            (1.5, "FIRST"),
            (3.0, "FINISHED"),
        ]);
        let m = Milestones::from_lines(&log, lt_milestone);
        assert_eq!(
            (m.ready, m.metadata, m.first_piece, m.complete),
            (0.4, 1.2, 1.5, 3.0)
        );
        assert_eq!(m.problem(), None);
        let no_meta = Milestones::from_lines(&log[3..], lt_milestone);
        assert_eq!(no_meta.problem(), Some("no metadata milestone"));
        let odd = Milestones::from_lines(
            &lines(&[(2.0, "METADATA"), (1.0, "FIRST"), (3.0, "FINISHED")]),
            lt_milestone,
        );
        assert_eq!(odd.problem(), Some("milestones out of order"));
    }

    #[test]
    fn the_verdict_compares_medians_with_the_goals() {
        let m = |meta, first, done| Milestones {
            ready: f64::NAN,
            metadata: meta,
            first_piece: first,
            complete: done,
        };
        let weir = [m(0.2, 0.3, 1.0), m(0.4, 0.5, 1.2), m(0.3, 0.35, 5.0)];
        let lt = [m(1.0, 1.1, 2.0), m(0.8, 0.9, 2.5), m(0.6, 0.7, 1.5)];
        let v = verdict(&weir, &lt).unwrap();
        assert!((v.metadata_ratio - 0.3 / 0.8).abs() < 1e-12, "{v:?}");
        assert!((v.complete_ratio - 1.2 / 2.0).abs() < 1e-12, "{v:?}");
        assert!(v.metadata_met() && v.complete_met());
        let slow = [m(0.5, 0.6, 1.3)];
        let v = verdict(&slow, &lt).unwrap();
        assert!(!v.metadata_met() && !v.complete_met(), "{v:?}");
        assert_eq!(verdict(&[], &lt), None);
        assert_eq!(verdict(&weir, &[]), None);
    }
}
