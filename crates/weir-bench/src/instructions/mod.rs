//! Scenario `instructions`: CPU cost counted in instructions, not seconds
//! (issue 13), so a change can be judged on a noisy, shared machine. One
//! payload (default 256 MiB of incompressible bytes) is received once by
//! each receiver of each protocol, the receiver alone run under `valgrind
//! --tool=callgrind` (the sender runs natively), and the table gives the
//! instructions executed (Ir) in all and per payload byte, split into the
//! protocol's hash (SHA-1, MD4, CRC), memcpy and the rest, from
//! `callgrind_annotate` output:
//!
//! - BitTorrent: `weir get` and libtorrent (python3-libtorrent through the
//!   lab's adapter; the python process is counted) each download a
//!   single-file torrent (256 KiB pieces) from one `weir seed` in plaintext
//!   over TCP (`--encryption off --transports tcp --no-dht --no-trackers`);
//! - eD2k: `weir get` of the link `weir seed --ed2k` prints, and amuled
//!   (aMule 2.3.3) fetching the same link from `weir seed --ed2k` logged
//!   into `weir ed2k-server`, over a veth pair between two namespaces (aMule
//!   drops 127.0.0.0/8 sources). amuled is a daemon: only what it executes
//!   from the moment the link is added to the file's completion is counted
//!   (started with callgrind's instrumentation off, switched on and off
//!   with `callgrind_control -i`), not its start-up;
//! - ZMODEM: `weir rz --listen` and lrzsz `rz` (a TCP connection on its
//!   stdin/stdout) each receive the file from `weir sz --tcp`.
//!
//! Everything runs in network namespaces the bench creates (loopback, or
//! the veth pair), every weir under `--allow` for that range only. Every
//! received file is compared with the payload before its row counts.
//!
//! Instruction counts do not depend on the machine's load, but a
//! receiver's own timers and polling do run in wall time, which valgrind
//! stretches some 50x: counts move by a few percent between runs.
//!
//! `--size-mib` (default 256), `--runs` (default 1 for this scenario),
//! `--set protocols=bt,ed2k,zmodem`, `--set receivers=weir,libtorrent,
//! amule,lrzsz` (a subset; `weir` selects weir's receiver of every
//! protocol), `--set amule-mib=N` (aMule's payload, default the same),
//! `--set keep=DIR` (copy the callgrind profiles there).
//!
//! `profile` reads `callgrind_annotate`'s output and splits it into hash,
//! memcpy and the rest; `callgrind` runs a receiver under valgrind.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_lab::amule::{Amule, AmuleConfig};
use weir_lab::bt::{self, Client, CommandClient, Options};
use weir_lab::netns::{Netns, VethPair};
use weir_lab::process::{Proc, stdout_lines, wait_line};
use weir_lab::{TempDir, ci, payload};

use crate::BenchConfig;
use crate::bt_setup::{load_average, wait_for_log, weir_leecher};
use crate::common::BENCH_ALLOW;
use crate::report::{Metric, Report};
use crate::sayln;

mod callgrind;
mod profile;

use callgrind::{Callgrind, callgrind_instrument, limit, wait_ok};
pub use profile::{
    Breakdown, Call, FnCost, HashFamily, Part, Profile, family_by_constants, fde_ranges,
    identify_by_code, is_hash, is_memcpy, parse_annotate, per_block,
};

/// `--set` keys this scenario knows.
pub const KEYS: &[&str] = &["protocols", "receivers", "amule-mib", "keep"];

/// Runs per row when `--runs` is not given: a callgrind run is slow.
pub const DEFAULT_RUNS: usize = 1;

const SEED: u64 = 0x1257_0013;
const FILE: &str = "payload.bin";
const PIECE: u64 = 256 << 10;
const BT_SEED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 6881);
const BT_WEIR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 6882);
const BT_LT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), 6882);
/// The veth network (`10.231.N.0/24`) of the aMule run.
const AMULE_NET: u8 = 152;

// ---------------------------------------------------------------------
// The scenario

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Bt,
    Ed2k,
    Zmodem,
}

impl Protocol {
    const ALL: [Protocol; 3] = [Protocol::Bt, Protocol::Ed2k, Protocol::Zmodem];

    fn key(self) -> &'static str {
        match self {
            Protocol::Bt => "bt",
            Protocol::Ed2k => "ed2k",
            Protocol::Zmodem => "zmodem",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Protocol::Bt => "BitTorrent",
            Protocol::Ed2k => "eD2k",
            Protocol::Zmodem => "ZMODEM",
        }
    }

    fn hashes(self) -> &'static [HashFamily] {
        match self {
            Protocol::Bt => &[HashFamily::Sha1],
            Protocol::Ed2k => &[HashFamily::Md4, HashFamily::Sha1],
            Protocol::Zmodem => &[HashFamily::Crc],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Receiver {
    WeirBt,
    Libtorrent,
    WeirEd2k,
    Amule,
    WeirRz,
    LrzszRz,
}

impl Receiver {
    const ALL: [Receiver; 6] = [
        Receiver::WeirBt,
        Receiver::Libtorrent,
        Receiver::WeirEd2k,
        Receiver::Amule,
        Receiver::WeirRz,
        Receiver::LrzszRz,
    ];

    fn protocol(self) -> Protocol {
        match self {
            Receiver::WeirBt | Receiver::Libtorrent => Protocol::Bt,
            Receiver::WeirEd2k | Receiver::Amule => Protocol::Ed2k,
            Receiver::WeirRz | Receiver::LrzszRz => Protocol::Zmodem,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Receiver::WeirBt | Receiver::WeirEd2k => "weir",
            Receiver::Libtorrent => "libtorrent",
            Receiver::Amule => "aMule",
            Receiver::WeirRz => "weir rz",
            Receiver::LrzszRz => "lrzsz rz",
        }
    }

    /// Its `--set receivers=` key.
    fn key(self) -> &'static str {
        match self {
            Receiver::WeirBt | Receiver::WeirEd2k | Receiver::WeirRz => "weir",
            Receiver::Libtorrent => "libtorrent",
            Receiver::Amule => "amule",
            Receiver::LrzszRz => "lrzsz",
        }
    }

    /// Programs it needs besides weir and valgrind.
    fn programs(self) -> &'static [&'static str] {
        match self {
            Receiver::WeirBt | Receiver::WeirEd2k | Receiver::WeirRz => &[],
            Receiver::Libtorrent => &["/usr/bin/python3"],
            Receiver::Amule => &["amuled", "amulecmd"],
            Receiver::LrzszRz => &["rz"],
        }
    }
}

/// Parses a comma-separated `--set` list against `known` keys.
fn pick<T: Copy>(
    cfg: &BenchConfig,
    key: &str,
    all: &[T],
    key_of: impl Fn(T) -> &'static str,
) -> anyhow::Result<Vec<T>> {
    let Some(list) = cfg.get(key) else {
        return Ok(all.to_vec());
    };
    let mut names: Vec<&str> = Vec::new();
    for t in all {
        if !names.contains(&key_of(*t)) {
            names.push(key_of(*t));
        }
    }
    let mut out = Vec::new();
    for w in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if !names.contains(&w) {
            bail!("--set {key}: unknown {w:?} (known: {})", names.join(", "));
        }
    }
    for t in all {
        if list.split(',').any(|w| w.trim() == key_of(*t)) {
            out.push(*t);
        }
    }
    if out.is_empty() {
        bail!("--set {key}={list}: nothing selected");
    }
    Ok(out)
}

/// One receiver's counted run.
struct Counted {
    profile: Profile,
    /// The payload bytes it received.
    bytes: u64,
    /// Seconds it ran under valgrind (or the counted window, for aMule).
    wall_s: f64,
}

/// Everything the receivers share.
struct Ctx<'a> {
    cfg: &'a BenchConfig,
    /// The payload every receiver gets (`FILE` in its own directory).
    src: PathBuf,
    size: u64,
    /// aMule's payload (the same file unless `amule-mib` differs).
    amule_src: PathBuf,
    amule_size: u64,
    profiles: PathBuf,
}

/// Runs the scenario.
pub fn run(cfg: &BenchConfig) -> anyhow::Result<()> {
    cfg.check_keys(KEYS)?;
    let protocols = pick(cfg, "protocols", &Protocol::ALL, Protocol::key)?;
    let receivers: Vec<Receiver> = pick(cfg, "receivers", &Receiver::ALL, Receiver::key)?
        .into_iter()
        .filter(|r| protocols.contains(&r.protocol()))
        .collect();
    if receivers.is_empty() {
        bail!("no receiver of the protocols chosen was selected");
    }
    if !ci::require_root_and_netns()? {
        bail!("instructions needs root (network namespaces)");
    }
    for p in ["valgrind", "callgrind_annotate", "callgrind_control"]
        .iter()
        .chain(receivers.iter().flat_map(|r| r.programs()))
    {
        if ci::find_program(p).is_none() {
            bail!("{p} is not installed");
        }
    }
    let size = cfg.size_bytes(256);
    let amule_size = cfg.get_or::<u64>("amule-mib", size >> 20)? << 20;
    if amule_size == 0 {
        bail!("--set amule-mib: at least 1");
    }
    let keep = cfg.get("keep").map(PathBuf::from);
    let load_before = load_average();
    let work = TempDir::new("bench-instructions")?;
    let src = work.subdir("src")?.join(FILE);
    eprintln!("instructions: writing a {} MiB payload", size >> 20);
    payload::write(&src, size, SEED)?;
    let amule_src = if amule_size == size {
        src.clone()
    } else {
        let p = work.subdir("amule-src")?.join(FILE);
        payload::write(&p, amule_size, SEED + 1)?;
        p
    };
    let ctx = Ctx {
        cfg,
        src,
        size,
        amule_src,
        amule_size,
        profiles: work.subdir("profiles")?,
    };
    let mut rep = Report::new(
        "instructions",
        cfg,
        &["receiver", "protocol"],
        vec![
            Metric::new("MiB", 0),
            Metric::new("Ir total", 0),
            Metric::new("Ir/B", 2),
            Metric::new("hash Ir/B", 2),
            Metric::new("memcpy Ir/B", 2),
            Metric::new("rest Ir/B", 2),
            Metric::new("valgrind s", 0),
        ],
    );
    let started = Instant::now();
    // Per receiver, the last run's breakdown, for the notes.
    let mut details: Vec<(Receiver, Breakdown, u64)> = Vec::new();
    for run in 0..cfg.runs {
        for &r in &receivers {
            let labels = [r.name(), r.protocol().name()];
            eprintln!(
                "instructions: run {}/{}: {} ({}) under callgrind",
                run + 1,
                cfg.runs,
                r.name(),
                r.protocol().name()
            );
            let tag = format!("{}-{}-{}", r.protocol().key(), r.key(), run + 1);
            match ctx.count(r, &tag) {
                Ok(mut c) => {
                    if let Err(e) = identify_by_code(&mut c.profile, 0.005) {
                        eprintln!("instructions: reading stripped code: {e:#}");
                    }
                    let b = Breakdown::of(&c.profile, r.protocol().hashes());
                    let per = |x: u64| x as f64 / c.bytes as f64;
                    // lrzsz is stripped and computes its CRC inline: no
                    // hash function to count.
                    let hash = if b.hash_fns.is_empty() {
                        f64::NAN
                    } else {
                        per(b.hash)
                    };
                    sayln!(
                        "{:<10} {:<10} {:>14} Ir  {:6.2} Ir/B  hash {:>6}  memcpy {:5.2}  rest {:6.2}  ({:.0} s)",
                        r.name(),
                        r.protocol().name(),
                        b.total,
                        per(b.total),
                        if hash.is_nan() {
                            "-".to_string()
                        } else {
                            format!("{hash:.2}")
                        },
                        per(b.memcpy),
                        per(b.rest()),
                        c.wall_s
                    );
                    rep.add_run(
                        &labels,
                        &[
                            (c.bytes >> 20) as f64,
                            b.total as f64,
                            per(b.total),
                            hash,
                            per(b.memcpy),
                            per(b.rest()),
                            c.wall_s,
                        ],
                    );
                    details.retain(|d| d.0 != r);
                    details.push((r, b, c.bytes));
                }
                Err(e) => {
                    sayln!("{} ({}): FAILED: {e:#}", r.name(), r.protocol().name());
                    rep.add_failure(&labels, &format!("{e:#}"));
                }
            }
        }
    }
    if let Some(dir) = &keep {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for e in std::fs::read_dir(&ctx.profiles)? {
            let e = e?;
            std::fs::copy(e.path(), dir.join(e.file_name()))
                .with_context(|| format!("copying {} to {}", e.path().display(), dir.display()))?;
        }
    }
    notes(&mut rep, &ctx, &details, &receivers);
    rep.note(&format!(
        "took {:.0} s in all; load average before {load_before}, after {} (instruction counts do not depend on it)",
        started.elapsed().as_secs_f64(),
        load_average()
    ));
    rep.print();
    let (json, md) = rep.write()?;
    sayln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// `name Ir/B` for the first `n` of `fns` (those that round to 0.00
/// left out, the first always kept), with the calls of a function called
/// once per 64-byte block.
fn top(fns: &[Part], n: usize, bytes: u64) -> String {
    fns.iter()
        .take(n)
        .enumerate()
        .filter(|(i, f)| *i == 0 || f.ir as f64 / bytes as f64 >= 0.005)
        .map(|(_, f)| {
            let mut s = format!("{} {:.2}", f.label, f.ir as f64 / bytes as f64);
            if let Some(k) = per_block(f.calls, bytes) {
                s.push_str(&format!(
                    " ({} calls: {k} per 64-byte block of the payload)",
                    f.calls
                ));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The notes under the table: how it was measured, what each receiver's
/// hash was and where the rest went.
fn notes(rep: &mut Report, ctx: &Ctx<'_>, details: &[(Receiver, Breakdown, u64)], rs: &[Receiver]) {
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "valgrind".into());
    rep.note(&format!(
        "Ir: instructions the receiver process executed under {valgrind} --tool=callgrind, from exec to exit (threads summed); per byte of the {} MiB payload{}; the sender runs natively. Every received file was compared with the payload.",
        ctx.size >> 20,
        if rs.contains(&Receiver::Amule) && ctx.amule_size != ctx.size {
            format!(" ({} MiB for aMule)", ctx.amule_size >> 20)
        } else {
            String::new()
        }
    ));
    rep.note(
        "hash: functions named sha1 (BitTorrent; eD2k's AICH too), md4 (eD2k) or crc (ZMODEM), and functions without a symbol that such functions call for more than half of their cost (libcrypto's SHA-1 block function is stripped; SHA1_Update calls it) or whose machine code holds SHA-1's four round constants (MD4's two and not SHA-1's other two), the function's extent taken from the object's unwind table (readelf) and its code from objdump; memcpy: memcpy/memmove/mempcpy; rest: everything else.",
    );
    rep.note(
        "Under valgrind the CPU reports no SHA extensions, so the sha1 crate runs its portable code (natively it uses SHA-NI where the CPU has it: see weir bench recheck), while OpenSSL runs its x86-64 assembly (SSSE3/AVX2 paths), about 1.8x fewer instructions per byte than the portable code: compare the columns other than hash across clients. The md4 crate is portable code either way; crc32fast uses PCLMULQDQ, which valgrind runs.",
    );
    if rs.contains(&Receiver::Libtorrent) {
        rep.note(
            "BitTorrent: weir seed --encryption off --transports tcp --no-dht --no-trackers seeds a 256 KiB-piece torrent on 127.0.0.1 in a namespace holding only lo; weir get (--encryption off --transports tcp --no-dht) and libtorrent-rasterbar (python3-libtorrent, lab adapter: DHT, LSD, UPnP, NAT-PMP, uTP and PEX off, polling every 50 ms) each dial it once. libtorrent's count is the python3 process: interpreter start-up, import and its polling loop included. libtorrent-rasterbar and libcrypto are stripped: their functions show as addresses.",
        );
    }
    if rs.contains(&Receiver::Amule) {
        rep.note(&format!(
            "eD2k: aMule 2.3.3 (amuled, stock settings apart from the lab's: no Kad, no UPnP) drops 127.0.0.0/8 sources, so it downloads from weir seed --ed2k logged into weir ed2k-server over a veth pair between two namespaces (10.231.{AMULE_NET}.0/24). amuled is a daemon: it starts with callgrind's instrumentation off, which is switched on (callgrind_control -i on) as the link is added and off once the file is complete, so only that window is counted (its 4 amulecmd polls a second included; start-up, login and shutdown not). amuled is stripped: its own functions show as addresses (its SHA-1 for AICH is found by its constants; its MD4 is Crypto++'s, named). A function called once per 64-byte block of the payload is a hash's block function (SHA-1 and MD4 work on 64-byte blocks): the notes below say so where the call counts show it.",
        ));
    }
    if rs.contains(&Receiver::LrzszRz) {
        rep.note(
            "ZMODEM: weir sz --tcp sends to weir rz --listen, or to lrzsz rz holding the accepted TCP connection on stdin/stdout, on 127.0.0.1 in a namespace. lrzsz's rz is stripped and computes CRC-32 inline in its receive loop, so its hash share cannot be told apart (-).",
        );
    }
    for (r, b, bytes) in details {
        let hash = if b.hash_fns.is_empty() {
            "none named".to_string()
        } else {
            top(&b.hash_fns, 3, *bytes)
        };
        rep.note(&format!(
            "{} ({}), Ir/B: hash: {hash}; memcpy {:.2}; top of the rest: {}",
            r.name(),
            r.protocol().name(),
            b.memcpy as f64 / *bytes as f64,
            top(&b.others, 4, *bytes)
        ));
    }
}

impl Ctx<'_> {
    fn count(&self, r: Receiver, tag: &str) -> anyhow::Result<Counted> {
        let cg = Callgrind::new(&self.profiles, tag);
        match r {
            Receiver::WeirBt => self.bt(&cg, None),
            Receiver::Libtorrent => self.bt(&cg, Some(Client::Libtorrent)),
            Receiver::WeirEd2k => self.weir_ed2k(&cg),
            Receiver::Amule => self.amule(&cg),
            Receiver::WeirRz => self.weir_rz(&cg),
            Receiver::LrzszRz => self.lrzsz_rz(&cg),
        }
    }

    /// A weir command inside `ns` under the network policy `allow`, with
    /// its own eD2k identity in `home`.
    fn weir_in(&self, ns: &Netns, allow: &str, home: &Path) -> Command {
        let mut c = ns.command(&self.cfg.weir_exe);
        c.env("WEIR_ALLOW", allow)
            .env("WEIR_ED2K_HOME", home)
            .env_remove("WEIR_ED2K_USER_HASH")
            .args(["--allow", allow])
            .stdin(Stdio::null());
        c
    }

    /// The same under callgrind.
    fn weir_under(&self, cg: &Callgrind, ns: &Netns, allow: &str, home: &Path) -> Command {
        let mut c = cg.command(ns, &self.cfg.weir_exe);
        c.env("WEIR_ALLOW", allow)
            .env("WEIR_ED2K_HOME", home)
            .env_remove("WEIR_ED2K_USER_HASH")
            .args(["--allow", allow])
            .stdin(Stdio::null());
        c
    }

    /// BitTorrent: weir (`client` None) or a real client downloads from
    /// one `weir seed`.
    fn bt(&self, cg: &Callgrind, client: Option<Client>) -> anyhow::Result<Counted> {
        let dir = TempDir::new("instr-bt")?;
        let data = dir.subdir("seed")?;
        std::fs::hard_link(&self.src, data.join(FILE))
            .or_else(|_| std::fs::copy(&self.src, data.join(FILE)).map(|_| ()))
            .context("putting the payload in the seed's directory")?;
        let torrent = dir.path().join("payload.torrent");
        weir_lab::torrent::make(&data.join(FILE), PIECE, None, &torrent)?;
        let ns = Netns::new("instr-bt")?;
        let plain = ["--no-dht", "--transports", "tcp", "--encryption", "off"];
        let seeder = CommandClient::weir_seed(&self.cfg.weir_argv(), &plain.map(String::from));
        let mut seed = bt::start_seed(&ns, &seeder, &torrent, &data, BT_SEED)?;
        wait_for_log(&mut seed, ": seeding ", Duration::from_secs(300))?;
        let (client, addr) = match client {
            Some(c) => (c, BT_LT),
            None => {
                let mut extra = vec!["--peer".to_string(), "{peer}".into(), "-q".into()];
                extra.extend(plain.iter().map(|s| s.to_string()));
                (weir_leecher(self.cfg, "weir", &extra), BT_WEIR)
            }
        };
        let out = dir.subdir("out")?;
        let opts = Options {
            peers: vec![SocketAddr::V4(BT_SEED)],
            timeout: limit(self.size),
            wrapper: cg.wrapper(),
            ..Options::default()
        };
        let got = bt::leech_with(&ns, &client, &torrent, &out, addr, &opts)
            .with_context(|| format!("valgrind's log:\n{}", cg.log_tail()))?;
        if !got.status.success() {
            bail!("{} exited with {}", client.name(), got.status);
        }
        drop(seed);
        payload::files_equal(&self.src, &out.join(FILE))
            .context("the downloaded file differs from the payload")?;
        Ok(Counted {
            profile: cg.profile()?,
            bytes: self.size,
            wall_s: got.usage.wall_s,
        })
    }

    /// eD2k: `weir get` of the link `weir seed --ed2k` prints.
    fn weir_ed2k(&self, cg: &Callgrind) -> anyhow::Result<Counted> {
        let dir = TempDir::new("instr-ed2k")?;
        let ns = Netns::new("instr-ed2k")?;
        let mut seed_cmd = self.weir_in(&ns, BENCH_ALLOW, &dir.path().join("home-seed"));
        seed_cmd
            .args(["seed", "--ed2k", "-q", "--listen", "127.0.0.1:0"])
            .arg(&self.src)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut seed = Proc::spawn("weir seed --ed2k", &mut seed_cmd)?;
        let lines = stdout_lines(&mut seed)?;
        let link = wait_line(
            &lines,
            Instant::now() + Duration::from_secs(300),
            "the seeder's ed2k link",
            |l| l.starts_with("ed2k://"),
        )?;
        let out = dir.subdir("out")?;
        let mut get = self.weir_under(cg, &ns, BENCH_ALLOW, &dir.path().join("home-get"));
        get.args(["get", link.trim(), "-q", "--listen", "127.0.0.1:0", "-o"])
            .arg(&out);
        let mut p = Proc::spawn_logged("weir get ed2k", &mut get, dir.path())?;
        let wall_s = wait_ok(&mut p, limit(self.size))
            .with_context(|| format!("valgrind's log:\n{}", cg.log_tail()))?;
        seed.kill_tree()?;
        payload::files_equal(&self.src, &out.join(FILE))
            .context("the downloaded file differs from the payload")?;
        Ok(Counted {
            profile: cg.profile()?,
            bytes: self.size,
            wall_s,
        })
    }

    /// eD2k: amuled downloads from `weir seed --ed2k` over a veth pair,
    /// counted from adding the link to completion.
    fn amule(&self, cg: &Callgrind) -> anyhow::Result<Counted> {
        let dir = TempDir::new("instr-amule")?;
        let pair = VethPair::new("instr-srv", "instr-mule", AMULE_NET)?;
        let (srv_ns, mule_ns) = (&pair.a, &pair.b);
        let allow = pair.cidr();
        let server_addr = SocketAddrV4::new(pair.a_ip, 4661);
        let deadline = Instant::now() + Duration::from_secs(900);

        let mut cmd = self.weir_in(srv_ns, &allow, &dir.path().join("home-srv"));
        cmd.args(["ed2k-server", "--listen"])
            .arg(server_addr.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut server = Proc::spawn("weir ed2k-server", &mut cmd)?;
        let lines = stdout_lines(&mut server)?;
        wait_line(&lines, deadline, "the server's listening line", |l| {
            l.starts_with("listening on")
        })?;
        let mut cmd = self.weir_in(srv_ns, &allow, &dir.path().join("home-seed"));
        cmd.args(["seed", "--ed2k", "-q", "--listen"])
            .arg(format!("{}:4662", pair.a_ip))
            .args(["--server", &server_addr.to_string()])
            .arg(&self.amule_src)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut seed = Proc::spawn("weir seed --ed2k", &mut cmd)?;
        let seed_lines = stdout_lines(&mut seed)?;
        let link = wait_line(&seed_lines, deadline, "the seeder's ed2k link", |l| {
            l.starts_with("ed2k://")
        })?;
        wait_line(&lines, deadline, "weir's file offer", |l| {
            l.starts_with("offer ")
        })?;

        let mut acfg = AmuleConfig::new("weirinstr", pair.b_ip);
        acfg.lab_server = Some(server_addr);
        acfg.wrapper = cg.wrapper();
        acfg.wrapper.push("--instr-atstart=no".into());
        let mut amule = Amule::start(mule_ns, &dir.path().join("conf"), acfg)
            .with_context(|| format!("valgrind's log:\n{}", cg.log_tail()))?;
        wait_line(&lines, deadline, "amuled's login", |l| {
            l.starts_with("login ") && l.contains(&pair.b_ip.to_string())
        })?;
        let pid = amule.proc().pid();
        callgrind_instrument(true, pid)?;
        let t0 = Instant::now();
        amule.add_link(link.trim())?;
        let got = amule.wait_complete(FILE, self.amule_size, limit(self.amule_size), || match seed
            .try_wait(
        )? {
            Some((st, _)) => bail!("weir seed exited: {st}"),
            None => Ok(()),
        });
        let wall_s = t0.elapsed().as_secs_f64();
        let off = callgrind_instrument(false, pid);
        let (file, _) = got.with_context(|| amule.log_tail(20))?;
        off?;
        payload::files_equal(&self.amule_src, &file)
            .context("aMule's file differs from the payload")?;
        // callgrind writes the profile as amuled exits: SIGTERM, and time
        // to shut down under valgrind.
        let (st, _) = amule
            .proc()
            .kill_tree_with_grace(Duration::from_secs(300))?;
        if st.signal() == Some(9) {
            bail!("amuled did not exit after SIGTERM: no profile");
        }
        seed.kill_tree()?;
        server.kill_tree()?;
        let profile = cg.profile()?;
        Ok(Counted {
            profile,
            bytes: self.amule_size,
            wall_s,
        })
    }

    /// `weir sz --tcp addr FILE` inside `ns`, from the payload's directory.
    fn sender(&self, ns: &Netns, addr: SocketAddr, logs: &Path) -> anyhow::Result<Proc> {
        let mut c = self.weir_in(ns, BENCH_ALLOW, &logs.join("home"));
        c.args(["sz", "-q", "--tcp", &addr.to_string(), FILE])
            .current_dir(self.src.parent().context("payload directory")?);
        Proc::spawn_logged("weir sz", &mut c, logs)
    }

    /// ZMODEM: `weir rz --listen` receives from `weir sz --tcp`.
    fn weir_rz(&self, cg: &Callgrind) -> anyhow::Result<Counted> {
        let dir = TempDir::new("instr-rz")?;
        let ns = Netns::new("instr-zm")?;
        let out = dir.subdir("out")?;
        let mut rz = self.weir_under(cg, &ns, BENCH_ALLOW, &dir.path().join("home"));
        rz.args(["rz", "-q", "--listen", "127.0.0.1:0"]).arg(&out);
        let mut p = Proc::spawn_logged("weir rz", &mut rz, dir.path())?;
        let log = p.stderr_log().context("no stderr log")?.to_path_buf();
        let line = crate::common::log_line(&mut p, &log, "listening on ", Duration::from_secs(300))
            .with_context(|| format!("valgrind's log:\n{}", cg.log_tail()))?;
        let addr: SocketAddr = line
            .rsplit("listening on ")
            .next()
            .map(str::trim)
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("no address in {line:?}"))?;
        let mut sz = self.sender(&ns, addr, dir.path())?;
        let wall_s = wait_ok(&mut p, limit(self.size))
            .with_context(|| format!("valgrind's log:\n{}", cg.log_tail()))?;
        wait_ok(&mut sz, Duration::from_secs(60))?;
        payload::files_equal(&self.src, &out.join(FILE))
            .context("the received file differs from the payload")?;
        Ok(Counted {
            profile: cg.profile()?,
            bytes: self.size,
            wall_s,
        })
    }

    /// ZMODEM: lrzsz `rz` with the TCP connection `weir sz --tcp` made on
    /// its stdin/stdout.
    fn lrzsz_rz(&self, cg: &Callgrind) -> anyhow::Result<Counted> {
        let dir = TempDir::new("instr-lrz")?;
        let ns = Netns::new("instr-zm")?;
        let out = dir.subdir("out")?;
        let l = ns.try_run_in(|| std::net::TcpListener::bind("127.0.0.1:0"))??;
        let addr = l.local_addr()?;
        let mut sz = self.sender(&ns, addr, dir.path())?;
        let conn = crate::bt_setup::accept_within(&l, Duration::from_secs(60))
            .map_err(|e| sz.failure(&format!("no connection from weir sz: {e:#}")))?;
        let conn = OwnedFd::from(conn);
        let err_log = dir.path().join("rz.stderr");
        let mut rz = cg.command(&ns, "rz");
        rz.arg("-q")
            .current_dir(&out)
            .stdin(Stdio::from(conn.try_clone()?))
            .stdout(Stdio::from(conn))
            .stderr(std::fs::File::create(&err_log)?);
        let mut p = Proc::spawn("lrzsz rz", &mut rz)?;
        // The command holds the socket's copies: drop them, so the line
        // closes when both ends are done.
        drop(rz);
        let wall_s = wait_ok(&mut p, limit(self.size)).with_context(|| {
            format!(
                "rz's stderr:\n{}\nvalgrind's log:\n{}",
                weir_lab::process::tail_file(&err_log, 10),
                cg.log_tail()
            )
        })?;
        wait_ok(&mut sz, Duration::from_secs(60))?;
        payload::files_equal(&self.src, &out.join(FILE))
            .context("the received file differs from the payload")?;
        Ok(Counted {
            profile: cg.profile()?,
            bytes: self.size,
            wall_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_marks_the_block_functions() {
        let bytes = 8 << 20;
        let f = |label: &str, ir, calls| Part {
            label: label.into(),
            ir,
            calls,
        };
        let t = top(
            &[
                f("0x1bc110@amuled", 300 << 20, 131_072),
                f("b", 1 << 20, 0),
                f("tiny", 1, 0),
            ],
            3,
            bytes,
        );
        assert_eq!(
            t,
            "0x1bc110@amuled 37.50 (131072 calls: 1 per 64-byte block of the payload), b 0.12"
        );
    }

    #[test]
    fn sets_pick_protocols_and_receivers() {
        let mut cfg = BenchConfig::new("weir".into(), "out".into());
        let all = pick(&cfg, "receivers", &Receiver::ALL, Receiver::key).unwrap();
        assert_eq!(all, Receiver::ALL);
        cfg.extra = vec![
            ("protocols".into(), "zmodem, bt".into()),
            ("receivers".into(), "weir,lrzsz".into()),
        ];
        let p = pick(&cfg, "protocols", &Protocol::ALL, Protocol::key).unwrap();
        assert_eq!(p, [Protocol::Bt, Protocol::Zmodem]);
        let r = pick(&cfg, "receivers", &Receiver::ALL, Receiver::key).unwrap();
        assert_eq!(
            r,
            [
                Receiver::WeirBt,
                Receiver::WeirEd2k,
                Receiver::WeirRz,
                Receiver::LrzszRz
            ]
        );
        cfg.extra = vec![("protocols".into(), "bt,gopher".into())];
        assert!(pick(&cfg, "protocols", &Protocol::ALL, Protocol::key).is_err());
        cfg.extra = vec![("protocols".into(), ",".into())];
        assert!(pick(&cfg, "protocols", &Protocol::ALL, Protocol::key).is_err());
    }
}
