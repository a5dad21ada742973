//! Scenario `zmodem`: one file (default 256 MiB of incompressible bytes)
//! sent with ZMODEM by every sender/receiver pair of lrzsz and weir —
//! lsz->lrz, weir->lrz, lsz->weir, weir->weir — over a socketpair and over
//! TCP on 127.0.0.1 inside a network namespace the bench creates, N runs
//! each (interleaved, so machine noise spreads over every pair). Reports
//! MB/s (decimal), CPU seconds and context switches of each side (from
//! `wait4`), and checks every received file byte for byte.
//!
//! Over TCP lrzsz gets a connected socket on stdin/stdout (it speaks no
//! TCP itself); weir uses its own `--tcp`/`--listen`.
//!
//! `--set` keys: `wires=socketpair,tcp` (which wires), `pairs=lsz-lrz,...`
//! (which pairs), `sz-args=...`/`rz-args=...` (extra weir flags, spaces
//! separate them).
//!
//! Targets (issue): weir->lrz at least as fast as lsz->lrz with at most half
//! of lsz's CPU seconds; weir->weir at least 4x lsz->lrz. The notes under
//! the table say whether each was met, per wire, with the figures.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::netns::Netns;
use weir_lab::process::{Proc, Usage};
use weir_lab::tmpdir::TempDir;

use crate::BenchConfig;
use crate::common::BENCH_ALLOW;
use crate::report::{Metric, Report};

const SEED: u64 = 0x5a4d_4f44;
const FILE: &str = "zmodem-bench.bin";
/// Longest a single transfer may take before it counts as failed.
const RUN_LIMIT: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    SocketPair,
    Tcp,
}

impl Wire {
    fn name(self) -> &'static str {
        match self {
            Wire::SocketPair => "socketpair",
            Wire::Tcp => "tcp",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Weir,
    Lrzsz,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pair {
    sender: Side,
    receiver: Side,
}

impl Pair {
    const ALL: [Pair; 4] = [
        Pair::new(Side::Lrzsz, Side::Lrzsz),
        Pair::new(Side::Weir, Side::Lrzsz),
        Pair::new(Side::Lrzsz, Side::Weir),
        Pair::new(Side::Weir, Side::Weir),
    ];

    const fn new(sender: Side, receiver: Side) -> Self {
        Pair { sender, receiver }
    }

    fn name(self) -> &'static str {
        match (self.sender, self.receiver) {
            (Side::Lrzsz, Side::Lrzsz) => "lsz->lrz",
            (Side::Weir, Side::Lrzsz) => "weir->lrz",
            (Side::Lrzsz, Side::Weir) => "lsz->weir",
            (Side::Weir, Side::Weir) => "weir->weir",
        }
    }

    fn key(self) -> &'static str {
        match (self.sender, self.receiver) {
            (Side::Lrzsz, Side::Lrzsz) => "lsz-lrz",
            (Side::Weir, Side::Lrzsz) => "weir-lrz",
            (Side::Lrzsz, Side::Weir) => "lsz-weir",
            (Side::Weir, Side::Weir) => "weir-weir",
        }
    }
}

/// One run's figures.
struct Measure {
    mb_s: f64,
    send: Usage,
    recv: Usage,
}

fn ctx(u: &Usage) -> f64 {
    (u.vol_ctx_switches + u.invol_ctx_switches) as f64
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(&["wires", "pairs", "sz-args", "rz-args"])?;
    for p in ["sz", "rz"] {
        if weir_lab::ci::find_program(p).is_none() {
            bail!("lrzsz's `{p}` is not installed (Debian: apt-get install lrzsz)");
        }
    }
    let wires: Vec<Wire> = match cfg.get("wires") {
        None => vec![Wire::SocketPair, Wire::Tcp],
        Some(s) => s
            .split(',')
            .map(|w| match w.trim() {
                "socketpair" => Ok(Wire::SocketPair),
                "tcp" => Ok(Wire::Tcp),
                other => bail!("wires: unknown wire {other:?} (socketpair, tcp)"),
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let pairs: Vec<Pair> = match cfg.get("pairs") {
        None => Pair::ALL.to_vec(),
        Some(s) => s
            .split(',')
            .map(|k| {
                Pair::ALL
                    .into_iter()
                    .find(|p| p.key() == k.trim())
                    .with_context(|| {
                        format!(
                            "pairs: unknown pair {k:?} (lsz-lrz, weir-lrz, lsz-weir, weir-weir)"
                        )
                    })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let extra = |k: &str| -> Vec<String> {
        cfg.get(k)
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default()
    };
    let (sz_args, rz_args) = (extra("sz-args"), extra("rz-args"));
    let size = cfg.size_bytes(256);
    let tmp = TempDir::new("zmodem-bench")?;
    let src = tmp.path().join(FILE);
    weir_lab::payload::write(&src, size, SEED)?;
    let ns = if wires.contains(&Wire::Tcp) {
        Some(Netns::new("zmbench").context("the TCP wire needs a network namespace (root)")?)
    } else {
        None
    };
    let mut rep = Report::new(
        "zmodem",
        cfg,
        &["wire", "pair"],
        vec![
            Metric::new("MB/s", 1),
            Metric::new("send CPU s", 2),
            Metric::new("recv CPU s", 2),
            Metric::new("send ctx sw", 0),
            Metric::new("recv ctx sw", 0),
        ],
    );
    let load_before = loadavg();
    let ctx_run = RunCtx {
        cfg,
        ns: ns.as_ref(),
        src: &src,
        size,
        sz_args: &sz_args,
        rz_args: &rz_args,
    };
    for run in 0..cfg.runs {
        for &wire in &wires {
            for &pair in &pairs {
                let labels = [wire.name(), pair.name()];
                match ctx_run.one(wire, pair) {
                    Ok(m) => {
                        crate::sayln!(
                            "run {}/{} {:>10} {:<10} {:7.1} MB/s  send {:.2} CPU-s {} cs  recv {:.2} CPU-s {} cs",
                            run + 1,
                            cfg.runs,
                            wire.name(),
                            pair.name(),
                            m.mb_s,
                            m.send.cpu_s(),
                            ctx(&m.send),
                            m.recv.cpu_s(),
                            ctx(&m.recv)
                        );
                        rep.add_run(
                            &labels,
                            &[
                                m.mb_s,
                                m.send.cpu_s(),
                                m.recv.cpu_s(),
                                ctx(&m.send),
                                ctx(&m.recv),
                            ],
                        );
                    }
                    Err(e) => {
                        crate::sayln!(
                            "run {}/{} {} {}: FAILED: {e:#}",
                            run + 1,
                            cfg.runs,
                            wire.name(),
                            pair.name()
                        );
                        rep.add_failure(&labels, &format!("{e:#}"));
                    }
                }
            }
        }
    }
    rep.note(&format!(
        "{} MiB file of incompressible bytes; received files checked byte for byte; MB/s = 10^6 bytes/s over the wall time from the first spawn (or connect) to both exits; CPU s and context switches (voluntary + involuntary) from wait4",
        size >> 20
    ));
    rep.note(&format!(
        "load average before {load_before}, after {} (the machine is shared: compare ratios within one run)",
        loadavg()
    ));
    for note in targets(&rep, &wires) {
        rep.note(&note);
    }
    rep.print();
    let (json, md) = rep.write()?;
    crate::sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// Target checks, per wire, from the medians.
fn targets(rep: &Report, wires: &[Wire]) -> Vec<String> {
    let med = |wire: Wire, pair: &str, i: usize| {
        rep.rows
            .iter()
            .find(|r| r.labels == [wire.name(), pair])
            .and_then(|r| r.median[i])
    };
    let mut out = Vec::new();
    for &w in wires {
        let (Some(base), Some(base_cpu)) = (med(w, "lsz->lrz", 0), med(w, "lsz->lrz", 1)) else {
            continue;
        };
        if let (Some(r), Some(c)) = (med(w, "weir->lrz", 0), med(w, "weir->lrz", 1)) {
            let ok = r >= base && c <= 0.5 * base_cpu;
            out.push(format!(
                "{}: weir->lrz {:.1} MB/s vs lsz->lrz {:.1} ({:.2}x), sender CPU {:.2} s vs {:.2} s ({:.2}x): target (>= 1x speed, <= 0.5x CPU) {}",
                w.name(),
                r,
                base,
                r / base,
                c,
                base_cpu,
                c / base_cpu,
                if ok { "MET" } else { "NOT MET" }
            ));
        }
        if let Some(r) = med(w, "weir->weir", 0) {
            out.push(format!(
                "{}: weir->weir {:.1} MB/s = {:.2}x lsz->lrz: target (>= 4x) {}",
                w.name(),
                r,
                r / base,
                if r >= 4.0 * base { "MET" } else { "NOT MET" }
            ));
        }
    }
    out
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

struct RunCtx<'a> {
    cfg: &'a BenchConfig,
    ns: Option<&'a Netns>,
    src: &'a Path,
    size: u64,
    sz_args: &'a [String],
    rz_args: &'a [String],
}

impl RunCtx<'_> {
    /// A command for `program` (weir or an lrzsz tool), inside the
    /// namespace when there is one for this wire.
    fn command(&self, wire: Wire, side: Side, tool: &str) -> Command {
        let ns = if wire == Wire::Tcp { self.ns } else { None };
        let mut c = match (side, ns) {
            (Side::Weir, Some(ns)) => ns.command(&self.cfg.weir_exe),
            (Side::Weir, None) => Command::new(&self.cfg.weir_exe),
            (Side::Lrzsz, Some(ns)) => ns.command(tool),
            (Side::Lrzsz, None) => Command::new(tool),
        };
        if side == Side::Weir {
            c.env("WEIR_ALLOW", BENCH_ALLOW)
                .args(["--allow", BENCH_ALLOW, tool, "-q"]);
            c.args(if tool == "sz" {
                self.sz_args
            } else {
                self.rz_args
            });
        } else {
            c.arg("-q");
        }
        c.stderr(Stdio::inherit());
        c
    }

    fn one(&self, wire: Wire, pair: Pair) -> anyhow::Result<Measure> {
        let dst = TempDir::new("zmodem-bench-dst")?;
        let src_dir = self.src.parent().context("source directory")?;
        let mut s = self.command(wire, pair.sender, "sz");
        s.current_dir(src_dir);
        let mut r = self.command(wire, pair.receiver, "rz");
        r.current_dir(dst.path());
        if pair.receiver == Side::Weir {
            r.arg(dst.path());
        }
        let (t0, sp, rp) = match wire {
            Wire::SocketPair => {
                let (a, b) = UnixStream::pair()?;
                let (ai, ao) = stdio(OwnedFd::from(a))?;
                let (bi, bo) = stdio(OwnedFd::from(b))?;
                r.stdin(bi).stdout(bo);
                s.arg(FILE).stdin(ai).stdout(ao);
                let t0 = Instant::now();
                let rp = Proc::spawn("receiver", &mut r)?;
                let sp = Proc::spawn("sender", &mut s)?;
                (t0, sp, rp)
            }
            Wire::Tcp => self.tcp_session(pair, s, r)?,
        };
        let ((ss, su), (rs, ru), end) = wait_both(sp, rp)?;
        let elapsed = end.duration_since(t0).as_secs_f64();
        if !ss.success() || !rs.success() {
            bail!("exit codes: sender {ss}, receiver {rs}");
        }
        weir_lab::payload::verify(&dst.path().join(FILE), self.size, SEED)?;
        Ok(Measure {
            mb_s: self.size as f64 / elapsed / 1e6,
            send: su,
            recv: ru,
        })
    }

    /// Starts both sides over TCP in the namespace; returns the start time
    /// (the moment the sender can begin) and both processes.
    fn tcp_session(
        &self,
        pair: Pair,
        mut s: Command,
        mut r: Command,
    ) -> anyhow::Result<(Instant, Proc, Proc)> {
        let ns = self.ns.context("no namespace")?;
        match (pair.sender, pair.receiver) {
            (Side::Lrzsz, Side::Lrzsz) => {
                let (a, b) = ns.tcp_pair()?;
                let (ai, ao) = stdio(a)?;
                let (bi, bo) = stdio(b)?;
                r.stdin(bi).stdout(bo);
                s.arg(FILE).stdin(ai).stdout(ao);
                let t0 = Instant::now();
                let rp = Proc::spawn("rz", &mut r)?;
                let sp = Proc::spawn("sz", &mut s)?;
                Ok((t0, sp, rp))
            }
            (Side::Weir, Side::Lrzsz) => {
                let l = ns.try_run_in(|| TcpListener::bind("127.0.0.1:0"))??;
                let addr = l.local_addr()?;
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    let _ = tx.send(l.accept().map(|(c, _)| c));
                });
                s.args(["--tcp", &addr.to_string(), FILE])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null());
                let t0 = Instant::now();
                let mut sp = Proc::spawn("weir sz", &mut s)?;
                let conn = match rx.recv_timeout(Duration::from_secs(30)) {
                    Ok(c) => c?,
                    Err(_) => {
                        let _ = sp.kill_tree();
                        bail!("weir sz did not connect to {addr}");
                    }
                };
                let (ci, co) = stdio(OwnedFd::from(conn))?;
                r.stdin(ci).stdout(co);
                let rp = Proc::spawn("rz", &mut r)?;
                Ok((t0, sp, rp))
            }
            (sender, Side::Weir) => {
                r.args(["--listen", "127.0.0.1:0"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null());
                let (rp, addr) = spawn_listening(&mut r)?;
                let t0 = Instant::now();
                let sp = if sender == Side::Weir {
                    s.args(["--tcp", &addr.to_string(), FILE])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null());
                    Proc::spawn("weir sz", &mut s)?
                } else {
                    let c = ns.try_run_in(|| TcpStream::connect(addr))??;
                    let (ci, co) = stdio(OwnedFd::from(c))?;
                    s.arg(FILE).stdin(ci).stdout(co);
                    Proc::spawn("sz", &mut s)?
                };
                Ok((t0, sp, rp))
            }
        }
    }
}

/// Spawns a `weir rz --listen` and reads the address it announces on
/// stderr (`weir: listening on ADDR`); the rest of its stderr is passed on.
fn spawn_listening(cmd: &mut Command) -> anyhow::Result<(Proc, SocketAddr)> {
    let (r, w) = UnixStream::pair()?;
    cmd.stderr(Stdio::from(OwnedFd::from(w)));
    let mut p = Proc::spawn("weir rz", cmd)?;
    // Drop the command's copy of the write end so EOF reaches the reader.
    cmd.stderr(Stdio::inherit());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("weir: listening on ") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(addr.trim().to_string());
                }
                continue;
            }
            eprintln!("{line}");
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(a) => Ok((p, a.parse().with_context(|| format!("address {a:?}"))?)),
        Err(_) => {
            let _ = p.kill_tree();
            bail!("weir rz did not announce its listening address");
        }
    }
}

fn stdio(fd: OwnedFd) -> anyhow::Result<(Stdio, Stdio)> {
    let dup = fd.try_clone()?;
    Ok((Stdio::from(fd), Stdio::from(dup)))
}

/// A reaped process: its status and resource use.
type Done = (std::process::ExitStatus, Usage);

/// Waits for both processes with blocking `wait4` calls (so the end time
/// is exact) on a helper thread, at most [`RUN_LIMIT`]; returns their
/// statuses, usage and the moment the second one ended.
fn wait_both(mut sp: Proc, mut rp: Proc) -> anyhow::Result<(Done, Done, Instant)> {
    let pids = [sp.pid(), rp.pid()];
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let a = sp.wait_with_usage();
        let b = rp.wait_with_usage();
        let _ = tx.send((a, b, Instant::now()));
    });
    match rx.recv_timeout(RUN_LIMIT) {
        Ok((a, b, end)) => Ok((a?, b?, end)),
        Err(_) => {
            // Our own children, by PID, still unreaped (the thread waits).
            for pid in pids {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            bail!("the transfer took longer than {RUN_LIMIT:?}")
        }
    }
}
