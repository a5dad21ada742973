//! Scenario `ed2k`: one file moved over eD2k in three pairings, N runs each
//! (interleaved, so machine noise spreads over every pairing):
//!
//! - `weir->weir`: `weir seed --ed2k` to `weir get 'ed2k://...'` on
//!   127.0.0.1 (default 1 GiB of incompressible bytes);
//! - `amule->weir`: a stock amuled (2.3.3) shares a smaller file (default
//!   32 MiB) and `weir get` fetches it through a link naming amuled as the
//!   source, on 127.0.0.1 inside a network namespace the bench creates;
//! - `weir->amule`: amuled downloads the smaller file from `weir seed
//!   --ed2k`. aMule ignores sources in 127.0.0.0/8 and asks none before it
//!   is logged into a server, so both sides sit in two namespaces the bench
//!   creates, joined by a veth pair with private addresses, with `weir
//!   ed2k-server` beside the seeder.
//!
//! Reports MB/s (10^6 bytes per second), CPU seconds and peak RSS of both
//! sides, and checks every received file byte for byte. A downloader's
//! figures are its whole process (`wait4`); an uploader's CPU is what it
//! used while the transfer ran (from `/proc`, so a seeder's start-up
//! hashing is not counted), its RSS the peak over its life (`VmHWM`).
//!
//! `--set` keys: `cases=weir-weir,amule-weir,weir-amule` (which pairings),
//! `amule-mib=N` (the file size for the aMule pairings).
//!
//! Target (issue): weir->weir >= 470 MB/s (4x the 117 MB/s per peer aMule
//! 3.0 reports on Linux); weir->amule bounded only by aMule. The notes under
//! the table say whether the first was met.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::amule::{Amule, AmuleConfig};
use weir_lab::netns::{Netns, VethPair};
use weir_lab::process::{Proc, stdout_lines, tree_cpu_s, wait_line};
use weir_lab::tmpdir::TempDir;

use crate::BenchConfig;
use crate::report::{Metric, Report};

const SEED: u64 = 0xed2c_0001;
/// Longest a single transfer may take before it counts as failed.
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// weir->weir target from the issue, MB/s.
const TARGET_MB_S: f64 = 470.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    WeirWeir,
    AmuleWeir,
    WeirAmule,
}

impl Case {
    const ALL: [Case; 3] = [Case::WeirWeir, Case::AmuleWeir, Case::WeirAmule];

    fn name(self) -> &'static str {
        match self {
            Case::WeirWeir => "weir->weir",
            Case::AmuleWeir => "amule->weir",
            Case::WeirAmule => "weir->amule",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Case::WeirWeir => "weir-weir",
            Case::AmuleWeir => "amule-weir",
            Case::WeirAmule => "weir-amule",
        }
    }

    fn uses_amule(self) -> bool {
        self != Case::WeirWeir
    }
}

/// One run's figures.
struct Measure {
    secs: f64,
    send_cpu: f64,
    send_rss_mib: f64,
    recv_cpu: f64,
    recv_rss_mib: f64,
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(&["cases", "amule-mib"])?;
    let cases: Vec<Case> = match cfg.get("cases") {
        None => Case::ALL.to_vec(),
        Some(s) => s
            .split(',')
            .map(|k| {
                Case::ALL
                    .into_iter()
                    .find(|c| c.key() == k.trim())
                    .with_context(|| {
                        format!("cases: unknown case {k:?} (weir-weir, amule-weir, weir-amule)")
                    })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    if cases.iter().any(|c| c.uses_amule()) && weir_lab::ci::find_program("amuled").is_none() {
        bail!("amuled is not installed (Debian: apt-get install amule-daemon amule-utils)");
    }
    let big = cfg.size_bytes(1024);
    let small = cfg.get_or::<u64>("amule-mib", 32)? << 20;
    let tmp = TempDir::new("ed2k-bench")?;
    let big_src = tmp.path().join("big").join("ed2k-bench-1.bin");
    let small_src = tmp.path().join("small").join("ed2k-bench-2.bin");
    if cases.contains(&Case::WeirWeir) {
        std::fs::create_dir_all(big_src.parent().context("dir")?)?;
        weir_lab::payload::write(&big_src, big, SEED)?;
    }
    if cases.iter().any(|c| c.uses_amule()) {
        std::fs::create_dir_all(small_src.parent().context("dir")?)?;
        weir_lab::payload::write(&small_src, small, SEED + 1)?;
    }
    let mut rep = Report::new(
        "ed2k",
        cfg,
        &["case", "size"],
        vec![
            Metric::new("time s", 2),
            Metric::new("MB/s", 1),
            Metric::new("send CPU s", 2),
            Metric::new("recv CPU s", 2),
            Metric::new("send RSS MiB", 1),
            Metric::new("recv RSS MiB", 1),
        ],
    );
    let load_before = loadavg();
    let ctx = RunCtx { cfg };
    for run in 0..cfg.runs {
        for &case in &cases {
            let (src, size) = if case == Case::WeirWeir {
                (&big_src, big)
            } else {
                (&small_src, small)
            };
            let size_label = format!("{} MiB", size >> 20);
            let labels = [case.name(), size_label.as_str()];
            let got = match case {
                Case::WeirWeir => ctx.weir_weir(src, size),
                Case::AmuleWeir => ctx.amule_weir(src, size),
                Case::WeirAmule => ctx.weir_amule(src, size),
            };
            match got {
                Ok(m) => {
                    let mb_s = size as f64 / m.secs / 1e6;
                    crate::sayln!(
                        "run {}/{} {:<11} {:>8} {:7.2} s {:7.1} MB/s  send {:.2} CPU-s {:.1} MiB  recv {:.2} CPU-s {:.1} MiB",
                        run + 1,
                        cfg.runs,
                        case.name(),
                        size_label,
                        m.secs,
                        mb_s,
                        m.send_cpu,
                        m.send_rss_mib,
                        m.recv_cpu,
                        m.recv_rss_mib
                    );
                    rep.add_run(
                        &labels,
                        &[
                            m.secs,
                            mb_s,
                            m.send_cpu,
                            m.recv_cpu,
                            m.send_rss_mib,
                            m.recv_rss_mib,
                        ],
                    );
                }
                Err(e) => {
                    crate::sayln!(
                        "run {}/{} {}: FAILED: {e:#}",
                        run + 1,
                        cfg.runs,
                        case.name()
                    );
                    rep.add_failure(&labels, &format!("{e:#}"));
                }
            }
        }
    }
    rep.note(
        "incompressible bytes; received files checked byte for byte; time from the downloader's start (weir get) or the link's hand-over (amuled) to the complete file (amuled: the first of 100% in its download list, polled every 250 ms, and the file in Incoming)",
    );
    rep.note(
        "downloader CPU/RSS: its whole process (wait4; amuled: CPU while the transfer ran, RSS VmHWM); uploader CPU: used while the transfer ran (/proc), so weir seed's start-up hashing is not counted; uploader RSS: peak (VmHWM)",
    );
    rep.note(
        "aMule 2.3.3 (Debian amule-daemon), stock settings apart from the lab's (no Kad, no UPnP, upload limit 65534 kB/s, download unlimited); weir->amule runs over a veth pair between two namespaces with weir ed2k-server, since aMule drops 127.0.0.0/8 sources",
    );
    rep.note(&format!(
        "load average before {load_before}, after {} (the machine is shared: compare ratios within one run)",
        loadavg()
    ));
    if let Some(r) = rep
        .rows
        .iter()
        .find(|r| r.labels.first().map(String::as_str) == Some(Case::WeirWeir.name()))
        .and_then(|r| r.median[1])
    {
        rep.note(&format!(
            "weir->weir {r:.1} MB/s = {:.2}x the 117 MB/s aMule 3.0 reports per peer: target (>= {TARGET_MB_S} MB/s) {}",
            r / 117.0,
            if r >= TARGET_MB_S { "MET" } else { "NOT MET" }
        ));
    }
    rep.print();
    let (json, md) = rep.write()?;
    crate::sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Peak resident set of a live process in MiB (`VmHWM`), 0 when unknown.
fn peak_rss_mib(pid: u32) -> f64 {
    match crate::common::proc_status_field(pid, "VmHWM:") {
        kib if kib.is_nan() => 0.0,
        kib => kib / 1024.0,
    }
}

/// The 16 bytes of an ed2k link's file hash.
fn link_hash(link: &str) -> anyhow::Result<[u8; 16]> {
    let hex = link
        .split('|')
        .nth(4)
        .filter(|h| h.len() == 32)
        .with_context(|| format!("no file hash in {link:?}"))?;
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .with_context(|| format!("bad file hash in {link:?}"))?;
    }
    Ok(out)
}

struct RunCtx<'a> {
    cfg: &'a BenchConfig,
}

impl RunCtx<'_> {
    /// weir under the given policy, with its own user-hash home (so two
    /// weirs are two clients, and the user's own hash is not touched).
    fn weir(&self, ns: Option<&Netns>, home: &Path, allow: &str) -> Command {
        let mut c = match ns {
            Some(ns) => ns.command(&self.cfg.weir_exe),
            None => Command::new(&self.cfg.weir_exe),
        };
        c.env("WEIR_ALLOW", allow)
            .env("WEIR_ED2K_HOME", home)
            .env_remove("WEIR_ED2K_USER_HASH")
            .args(["--allow", allow])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        c
    }

    /// Starts `weir seed --ed2k src` and returns it with the link it prints.
    fn seed(
        &self,
        mut cmd: Command,
        src: &Path,
        listen: &str,
        extra: &[&str],
    ) -> anyhow::Result<(Proc, String)> {
        cmd.args(["seed", "--ed2k", "-q", "--listen", listen])
            .args(extra)
            .arg(src)
            .stdout(Stdio::piped());
        let mut seed = Proc::spawn("weir seed", &mut cmd)?;
        let lines = stdout_lines(&mut seed)?;
        let link = wait_line(
            &lines,
            Instant::now() + Duration::from_secs(300),
            "the seeder's link",
            |l| l.starts_with("ed2k://"),
        )?;
        Ok((seed, link))
    }

    /// Runs `weir get link` to completion; checks the file.
    fn get(
        &self,
        mut cmd: Command,
        link: &str,
        out: &Path,
        src: &Path,
    ) -> anyhow::Result<weir_lab::process::Usage> {
        cmd.args(["get", link, "-q", "--listen", "127.0.0.1:0", "-o"])
            .arg(out)
            .stdout(Stdio::null());
        let mut get = Proc::spawn("weir get", &mut cmd)?;
        let Some((status, usage)) = get.wait_timeout(RUN_LIMIT)? else {
            get.kill_tree()?;
            bail!("weir get did not finish in {RUN_LIMIT:?}");
        };
        if !status.success() {
            bail!("weir get: {status}");
        }
        let name = src.file_name().context("file name")?;
        weir_lab::payload::files_equal(src, &out.join(name))?;
        Ok(usage)
    }

    fn weir_weir(&self, src: &Path, size: u64) -> anyhow::Result<Measure> {
        let dir = TempDir::new("ed2k-bench-w2w")?;
        let allow = crate::common::BENCH_ALLOW;
        let (mut seed, link) = self.seed(
            self.weir(None, &dir.path().join("home-seed"), allow),
            src,
            "127.0.0.1:0",
            &[],
        )?;
        crate::common::warm_page_cache(dir.path(), size)?;
        let cpu0 = tree_cpu_s(seed.pid());
        let usage = self.get(
            self.weir(None, &dir.path().join("home-get"), allow),
            &link,
            &dir.path().join("out"),
            src,
        );
        let send_cpu = tree_cpu_s(seed.pid()) - cpu0;
        let send_rss = peak_rss_mib(seed.pid());
        seed.kill_tree()?;
        let usage = usage?;
        Ok(Measure {
            secs: usage.wall_s,
            send_cpu,
            send_rss_mib: send_rss,
            recv_cpu: usage.cpu_s(),
            recv_rss_mib: usage.max_rss_kib as f64 / 1024.0,
        })
    }

    fn amule_weir(&self, src: &Path, _size: u64) -> anyhow::Result<Measure> {
        let dir = TempDir::new("ed2k-bench-a2w")?;
        let ns = Netns::new("ed2kb-a2w")?;
        let mut cfg = AmuleConfig::new("weirbench", Ipv4Addr::LOCALHOST);
        cfg.shared_dirs
            .push(src.parent().context("dir")?.to_path_buf());
        let mut amule = Amule::start(&ns, &dir.path().join("conf"), cfg)?;
        // The link amuled would print, with amuled as its source.
        let out = self
            .weir(None, &dir.path().join("home-hash"), "127.0.0.0/8")
            .args(["hash", "--ed2k"])
            .arg(src)
            .stdout(Stdio::piped())
            .output()?;
        let line = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("ed2k://"))
            .map(str::to_string)
            .context("weir hash --ed2k printed no link")?;
        amule.wait_hashed(&link_hash(&line)?, Duration::from_secs(300))?;
        let link = format!(
            "{}sources,127.0.0.1:4662|/",
            line.trim().trim_end_matches('/')
        );
        let apid = amule.proc().pid();
        let cpu0 = tree_cpu_s(apid);
        let usage = self.get(
            self.weir(Some(&ns), &dir.path().join("home-get"), "127.0.0.0/8"),
            &link,
            &dir.path().join("out"),
            src,
        );
        let send_cpu = tree_cpu_s(apid) - cpu0;
        let send_rss = peak_rss_mib(apid);
        let usage = usage.with_context(|| amule.log_tail(20))?;
        let _ = amule.stop();
        Ok(Measure {
            secs: usage.wall_s,
            send_cpu,
            send_rss_mib: send_rss,
            recv_cpu: usage.cpu_s(),
            recv_rss_mib: usage.max_rss_kib as f64 / 1024.0,
        })
    }

    fn weir_amule(&self, src: &Path, size: u64) -> anyhow::Result<Measure> {
        let dir = TempDir::new("ed2k-bench-w2a")?;
        let pair = VethPair::new("ed2kb-srv", "ed2kb-mule", 150)?;
        let (srv_ns, mule_ns) = (&pair.a, &pair.b);
        let (weir_ip, mule_ip) = (pair.a_ip, pair.b_ip);
        let allow = pair.cidr();
        let server_addr = SocketAddrV4::new(weir_ip, 4661);
        let deadline = Instant::now() + Duration::from_secs(300);

        let mut cmd = self.weir(Some(srv_ns), &dir.path().join("home-srv"), &allow);
        cmd.args(["ed2k-server", "--listen"])
            .arg(server_addr.to_string())
            .stdout(Stdio::piped());
        let mut server = Proc::spawn("weir ed2k-server", &mut cmd)?;
        let lines = stdout_lines(&mut server)?;
        wait_line(&lines, deadline, "the server's listening line", |l| {
            l.starts_with("listening on")
        })?;

        let (mut seed, link) = self.seed(
            self.weir(Some(srv_ns), &dir.path().join("home-seed"), &allow),
            src,
            &format!("{weir_ip}:4662"),
            &["--server", &server_addr.to_string()],
        )?;
        wait_line(&lines, deadline, "weir's file offer", |l| {
            l.starts_with("offer ")
        })?;

        let mut cfg = AmuleConfig::new("weirbenchdl", mule_ip);
        cfg.lab_server = Some(server_addr);
        let mut amule = Amule::start(mule_ns, &dir.path().join("conf"), cfg)?;
        wait_line(&lines, deadline, "amuled's login", |l| {
            l.starts_with("login ") && l.contains(&mule_ip.to_string())
        })?;
        let apid = amule.proc().pid();
        let (a0, s0) = (tree_cpu_s(apid), tree_cpu_s(seed.pid()));
        let started = Instant::now();
        amule.add_link(&link)?;
        let name = src
            .file_name()
            .context("file name")?
            .to_string_lossy()
            .into_owned();
        let got = amule.wait_complete(&name, size, RUN_LIMIT, || match seed.try_wait()? {
            Some((st, _)) => bail!("weir seed exited: {st}"),
            None => Ok(()),
        });
        let secs = got
            .as_ref()
            .map_or(0.0, |g| g.1.duration_since(started).as_secs_f64());
        let (recv_cpu, send_cpu) = (tree_cpu_s(apid) - a0, tree_cpu_s(seed.pid()) - s0);
        let (recv_rss, send_rss) = (peak_rss_mib(apid), peak_rss_mib(seed.pid()));
        let (got, _) = got.with_context(|| amule.log_tail(20))?;
        weir_lab::payload::files_equal(src, &got)?;
        let _ = amule.stop();
        seed.kill_tree()?;
        server.kill_tree()?;
        Ok(Measure {
            secs,
            send_cpu,
            send_rss_mib: send_rss,
            recv_cpu,
            recv_rss_mib: recv_rss,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_hash_reads_the_fifth_field() {
        let h = link_hash("ed2k://|file|a.bin|10|31D6CFE0D16AE931B73C59D7E0C089C0|/").unwrap();
        assert_eq!(h[0], 0x31);
        assert_eq!(h[15], 0xC0);
        assert!(link_hash("ed2k://|file|a.bin|10|XYZ|/").is_err());
        assert!(link_hash("ed2k://|file|a.bin|10|ZZD6CFE0D16AE931B73C59D7E0C089C0|/").is_err());
    }

    #[test]
    fn case_keys_are_unique() {
        for (i, a) in Case::ALL.iter().enumerate() {
            for b in &Case::ALL[i + 1..] {
                assert_ne!(a.key(), b.key());
                assert_ne!(a.name(), b.name());
            }
        }
    }
}
