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

use std::collections::BTreeMap;
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
// callgrind_annotate output

/// One function of a callgrind profile, as `callgrind_annotate
/// --tree=caller --inclusive=no` prints it (its lines for every source
/// file merged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FnCost {
    /// The function's name without callgrind's recursion suffix (`'2`);
    /// code without a symbol (a stripped library) is named by address and
    /// object, `0x28dd00@libcrypto.so.3`.
    pub name: String,
    /// The object file holding it, when the output names one.
    pub object: Option<String>,
    /// For code without a symbol: the hash its machine code was found to
    /// be ([`identify_by_code`]).
    pub identified: Option<HashFamily>,
    /// Instructions executed in the function itself (not its callees).
    pub ir: u64,
    /// Its callers, each with the instructions of its calls into it
    /// (inclusive) and how many calls it made.
    pub callers: Vec<Call>,
}

/// One caller of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The caller's name (as [`FnCost::name`]).
    pub caller: String,
    /// Instructions of its calls, callees included.
    pub ir: u64,
    /// How many calls (0 when not printed).
    pub calls: u64,
}

impl FnCost {
    /// Whether the function has no symbol (named by its address).
    pub fn is_anonymous(&self) -> bool {
        self.name.starts_with("0x")
    }

    /// The caller whose calls cost the most, if any.
    pub fn main_caller(&self) -> Option<&str> {
        self.callers
            .iter()
            .max_by_key(|c| c.ir)
            .map(|c| c.caller.as_str())
    }

    /// How many times it was called, over every caller listed.
    pub fn calls(&self) -> u64 {
        self.callers.iter().map(|c| c.calls).sum()
    }
}

/// A parsed profile: the program's total and its functions, most
/// expensive first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// `PROGRAM TOTALS`: instructions executed in all.
    pub total: u64,
    /// Every function, merged by name, by `ir` descending.
    pub functions: Vec<FnCost>,
}

/// `1,234,567` as a number.
fn count(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit() || b == b',') {
        return None;
    }
    s.replace(',', "").parse().ok()
}

/// The last path component of an object file.
fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// What a line of the function list is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// `<`: a caller of the function that follows.
    Caller,
    /// `*`, or a line of the flat list: the function itself.
    Function,
    /// `>`: a callee (only with `--tree=calling`/`both`): ignored.
    Callee,
}

/// One line of the function list.
struct Entry {
    ir: u64,
    mark: Mark,
    name: String,
    object: Option<String>,
    /// A caller's call count.
    calls: u64,
}

/// One line of the function list: `IR (PCT%)  [MARK] FILE:FUNCTION
/// [(Nx)] [[OBJECT]]`.
fn parse_entry(line: &str) -> Option<Entry> {
    let t = line.trim_start();
    let (num, rest) = t.split_once(char::is_whitespace)?;
    let ir = count(num)?;
    let mut rest = rest.trim_start();
    if rest.starts_with('(') {
        rest = rest[rest.find(')')? + 1..].trim_start();
    }
    let mark = match rest.chars().next()? {
        '<' => Mark::Caller,
        '*' => Mark::Function,
        '>' => Mark::Callee,
        _ => Mark::Function,
    };
    if matches!(rest.chars().next(), Some('<' | '*' | '>')) {
        rest = rest[1..].trim_start();
    }
    let mut body = rest.trim_end();
    let mut object = None;
    if body.ends_with(']')
        && let Some(at) = body.rfind(" [")
        && body[at + 2..].starts_with('/')
    {
        object = Some(body[at + 2..body.len() - 1].to_string());
        body = body[..at].trim_end();
    }
    // A call count, `(1,027x)`, after a caller's name.
    let mut calls = 0;
    if body.ends_with("x)")
        && let Some(at) = body.rfind(" (")
        && let Some(n) = count(&body[at + 2..body.len() - 2])
    {
        calls = n;
        body = body[..at].trim_end();
    }
    let (_file, func) = body.split_once(':')?;
    let mut name = func.trim();
    // Recursion depth: `name'2`.
    if let Some((base, depth)) = name.rsplit_once('\'')
        && !depth.is_empty()
        && depth.bytes().all(|b| b.is_ascii_digit())
    {
        name = base;
    }
    if name.is_empty() {
        return None;
    }
    let name = match (&object, name.strip_prefix("0x")) {
        (Some(obj), Some(hex)) => {
            let hex = hex.trim_start_matches('0');
            format!(
                "0x{}@{}",
                if hex.is_empty() { "0" } else { hex },
                basename(obj)
            )
        }
        _ => name.to_string(),
    };
    Some(Entry {
        ir,
        mark,
        name,
        object,
        calls,
    })
}

/// Parses what `callgrind_annotate --inclusive=no` prints (the flat list,
/// or `--tree=caller`): the program's total and every function's own
/// instructions, with its callers when the tree is shown. Fails on output
/// that is not an `Ir` profile or has a line it cannot read.
pub fn parse_annotate(text: &str) -> anyhow::Result<Profile> {
    let events = text
        .lines()
        .find_map(|l| l.strip_prefix("Events shown:"))
        .context("no \"Events shown:\" line: not callgrind_annotate output")?;
    if events.split_whitespace().next() != Some("Ir") {
        bail!("the first event shown is not Ir: {:?}", events.trim());
    }
    let total_line = text
        .lines()
        .find(|l| l.trim_end().ends_with("PROGRAM TOTALS"))
        .context("no PROGRAM TOTALS line")?;
    let total = total_line
        .split_whitespace()
        .next()
        .and_then(count)
        .with_context(|| format!("bad PROGRAM TOTALS line {total_line:?}"))?;
    let mut lines = text.lines().enumerate();
    lines
        .by_ref()
        .find(|(_, l)| l.trim_end().ends_with("file:function"))
        .context("no function list (\"file:function\" header)")?;
    let mut merged: BTreeMap<String, FnCost> = BTreeMap::new();
    let mut callers: Vec<Call> = Vec::new();
    for (i, line) in lines {
        let l = line.trim();
        if l.is_empty() {
            callers.clear();
            continue;
        }
        if l.starts_with("---") {
            continue;
        }
        let Entry {
            ir,
            mark,
            name,
            object,
            calls,
        } = parse_entry(line).with_context(|| format!("line {}: cannot read {line:?}", i + 1))?;
        match mark {
            Mark::Caller => callers.push(Call {
                caller: name,
                ir,
                calls,
            }),
            Mark::Callee => {}
            Mark::Function => {
                let f = merged.entry(name.clone()).or_insert_with(|| FnCost {
                    name,
                    object: None,
                    identified: None,
                    ir: 0,
                    callers: Vec::new(),
                });
                f.ir += ir;
                if f.object.is_none() {
                    f.object = object;
                }
                for c in callers.drain(..) {
                    match f.callers.iter_mut().find(|x| x.caller == c.caller) {
                        Some(x) => {
                            x.ir += c.ir;
                            x.calls += c.calls;
                        }
                        None => f.callers.push(c),
                    }
                }
            }
        }
    }
    let mut functions: Vec<FnCost> = merged.into_values().collect();
    functions.sort_by(|a, b| b.ir.cmp(&a.ir).then_with(|| a.name.cmp(&b.name)));
    let listed: u64 = functions.iter().map(|f| f.ir).sum();
    if listed > total {
        bail!("the functions add up to {listed} Ir, more than the total {total}");
    }
    Ok(Profile { total, functions })
}

// ---------------------------------------------------------------------
// What the instructions were spent on

/// A family of hash functions, recognised by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashFamily {
    /// SHA-1 (BitTorrent pieces; eD2k's AICH).
    Sha1,
    /// MD4 (eD2k parts).
    Md4,
    /// CRC-16/CRC-32 (ZMODEM frames).
    Crc,
}

impl HashFamily {
    /// How people write it.
    pub fn name(self) -> &'static str {
        match self {
            HashFamily::Sha1 => "SHA-1",
            HashFamily::Md4 => "MD4",
            HashFamily::Crc => "CRC",
        }
    }

    /// Whether a function's name says it belongs to this family.
    pub fn matches(self, name: &str) -> bool {
        let needle = match self {
            HashFamily::Sha1 => "sha1",
            HashFamily::Md4 => "md4",
            HashFamily::Crc => "crc",
        };
        name.to_ascii_lowercase().contains(needle)
    }
}

/// SHA-1's four round constants; MD4 adds the first two in its rounds 2
/// and 3 (and has no others).
const SHA1_K: [u32; 4] = [0x5a82_7999, 0x6ed9_eba1, 0x8f1b_bcdc, 0xca62_c1d6];

/// Whether `objdump -d` text holds the 32-bit constant `k` as an
/// immediate or a displacement: `0x5a827999`, or for a constant with its
/// top bit set `-0x70e44324` or `0xffffffff8f1bbcdc`.
fn holds_constant(disasm: &str, k: u32) -> bool {
    let mut forms = vec![format!("0x{k:x}"), format!("0xffffffff{k:08x}")];
    if (k as i32) < 0 {
        forms.push(format!("-0x{:x}", (k as i32).unsigned_abs()));
    }
    let text = disasm.to_ascii_lowercase();
    forms.iter().any(|f| {
        text.match_indices(f.as_str()).any(|(at, m)| {
            !text[at + m.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_hexdigit())
        })
    })
}

/// Which hash a block function is, from its disassembly: SHA-1 when it
/// holds all four of SHA-1's round constants, MD4 when it holds the two
/// MD4 shares with SHA-1 and not the other two.
pub fn family_by_constants(disasm: &str) -> Option<HashFamily> {
    match SHA1_K.map(|k| holds_constant(disasm, k)) {
        [true, true, true, true] => Some(HashFamily::Sha1),
        [true, true, false, false] => Some(HashFamily::Md4),
        _ => None,
    }
}

/// Function ranges `(start, end)` from `readelf --debug-dump=frames`
/// output: every FDE's `pc=START..END` (stripped objects keep them).
pub fn fde_ranges(text: &str) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = text
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| {
            let pc = l.split_whitespace().find_map(|w| w.strip_prefix("pc="))?;
            let (a, b) = pc.split_once("..")?;
            let a = u64::from_str_radix(a, 16).ok()?;
            let b = u64::from_str_radix(b, 16).ok()?;
            (a < b).then_some((a, b))
        })
        .collect();
    v.sort_unstable();
    v
}

/// Looks at the machine code of the costly functions of `p` that have no
/// symbol (at least `min_share` of the total) and marks those that are a
/// SHA-1 or MD4 block function ([`family_by_constants`]); the function's
/// extent comes from the object's unwind table (`readelf`), its code from
/// `objdump`. Does nothing when binutils is not installed.
pub fn identify_by_code(p: &mut Profile, min_share: f64) -> anyhow::Result<()> {
    if ci::find_program("objdump").is_none() || ci::find_program("readelf").is_none() {
        return Ok(());
    }
    let mut frames: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let floor = (p.total as f64 * min_share) as u64;
    for f in p.functions.iter_mut().filter(|f| f.ir >= floor.max(1)) {
        let (true, Some(obj)) = (f.is_anonymous(), f.object.clone()) else {
            continue;
        };
        let Some(addr) = f
            .name
            .strip_prefix("0x")
            .and_then(|s| s.split('@').next())
            .and_then(|h| u64::from_str_radix(h, 16).ok())
        else {
            continue;
        };
        if !Path::new(&obj).is_file() {
            continue;
        }
        if !frames.contains_key(&obj) {
            let out = weir_lab::process::run(
                Command::new("readelf").args(["--debug-dump=frames", &obj]),
                Duration::from_secs(120),
            )
            .with_context(|| format!("readelf {obj}"))?;
            frames.insert(obj.clone(), fde_ranges(&out.stdout_text()));
        }
        let Some(&(start, end)) = frames[&obj].iter().find(|(a, b)| (*a..*b).contains(&addr))
        else {
            continue;
        };
        let out = weir_lab::process::run(
            Command::new("objdump")
                .args(["-d", "--no-show-raw-insn"])
                .arg(format!("--start-address=0x{start:x}"))
                .arg(format!("--stop-address=0x{end:x}"))
                .arg(&obj),
            Duration::from_secs(120),
        )
        .with_context(|| format!("objdump {obj}"))?;
        f.identified = family_by_constants(&out.stdout_text());
    }
    Ok(())
}

/// Whether a function's name is one of libc's copy routines.
pub fn is_memcpy(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("memcpy") || n.contains("memmove") || n.contains("mempcpy")
}

/// Whether `f` is hashing of one of `families`: its name says so, or it
/// has no symbol and more than half of what its callers spent in it came
/// from functions whose names say so (libcrypto's SHA-1 block function,
/// stripped, is called by `SHA1_Update`).
pub fn is_hash(f: &FnCost, families: &[HashFamily]) -> bool {
    let named = |n: &str| families.iter().any(|h| h.matches(n));
    if named(&f.name) || f.identified.is_some_and(|h| families.contains(&h)) {
        return true;
    }
    if !f.is_anonymous() {
        return false;
    }
    let all: u64 = f.callers.iter().map(|c| c.ir).sum();
    let hashing: u64 = f
        .callers
        .iter()
        .filter(|c| named(&c.caller))
        .map(|c| c.ir)
        .sum();
    all > 0 && hashing * 2 > all
}

/// A profile split into the protocol's hashing, memcpy and the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breakdown {
    /// Instructions in all.
    pub total: u64,
    /// In hash functions.
    pub hash: u64,
    /// In memcpy/memmove.
    pub memcpy: u64,
    /// The hash functions found, most first.
    pub hash_fns: Vec<Part>,
    /// The other functions (neither hash nor memcpy), most first.
    pub others: Vec<Part>,
}

/// One function in a [`Breakdown`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Its name, with its main caller when it has no symbol of its own.
    pub label: String,
    /// Its own instructions.
    pub ir: u64,
    /// How many times it was called (0: unknown).
    pub calls: u64,
}

impl Breakdown {
    /// Splits `p`, counting `families` as the hash.
    pub fn of(p: &Profile, families: &[HashFamily]) -> Breakdown {
        let mut b = Breakdown {
            total: p.total,
            hash: 0,
            memcpy: 0,
            hash_fns: Vec::new(),
            others: Vec::new(),
        };
        for f in &p.functions {
            if is_hash(f, families) {
                b.hash += f.ir;
                let label = match (f.is_anonymous(), f.identified, f.main_caller()) {
                    (true, Some(h), _) => format!("{} ({} by its code)", f.name, h.name()),
                    (true, None, Some(c)) => format!("{} (called by {c})", f.name),
                    _ => f.name.clone(),
                };
                b.hash_fns.push(Part {
                    label,
                    ir: f.ir,
                    calls: f.calls(),
                });
            } else if is_memcpy(&f.name) {
                b.memcpy += f.ir;
            } else {
                b.others.push(Part {
                    label: f.name.clone(),
                    ir: f.ir,
                    calls: f.calls(),
                });
            }
        }
        b
    }

    /// Instructions that are neither hash nor memcpy.
    pub fn rest(&self) -> u64 {
        self.total.saturating_sub(self.hash + self.memcpy)
    }
}

// ---------------------------------------------------------------------
// Running a receiver under callgrind

/// Where one callgrind run writes its profile and valgrind's messages.
struct Callgrind {
    out: PathBuf,
    log: PathBuf,
}

impl Callgrind {
    fn new(dir: &Path, tag: &str) -> Self {
        Callgrind {
            out: dir.join(format!("{tag}.callgrind")),
            log: dir.join(format!("{tag}.valgrind.log")),
        }
    }

    /// `valgrind --tool=callgrind --callgrind-out-file=... --log-file=...`,
    /// to put before the receiver's command line.
    fn wrapper(&self) -> Vec<String> {
        vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", self.out.display()),
            format!("--log-file={}", self.log.display()),
        ]
    }

    /// A command running `program` under callgrind inside `ns`.
    fn command(&self, ns: &Netns, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let w = self.wrapper();
        let mut c = ns.command(&w[0]);
        c.args(&w[1..]).arg(program);
        c
    }

    /// The last lines of valgrind's log, for errors.
    fn log_tail(&self) -> String {
        weir_lab::process::tail_file(&self.log, 15)
    }

    /// The profile written at the receiver's exit.
    fn profile(&self) -> anyhow::Result<Profile> {
        annotate(&self.out).with_context(|| format!("valgrind's log:\n{}", self.log_tail()))
    }
}

/// `callgrind_annotate --tree=caller --inclusive=no` of `file`, parsed.
fn annotate(file: &Path) -> anyhow::Result<Profile> {
    let out = weir_lab::process::run(
        Command::new("callgrind_annotate")
            .args([
                "--tree=caller",
                "--inclusive=no",
                "--threshold=100",
                "--auto=no",
            ])
            .arg(file),
        Duration::from_secs(600),
    )
    .with_context(|| format!("callgrind_annotate {}", file.display()))?;
    if !out.success() {
        bail!(
            "callgrind_annotate {}: {} {}",
            file.display(),
            out.status,
            out.stderr_text().lines().next().unwrap_or("")
        );
    }
    let p = parse_annotate(&out.stdout_text())
        .with_context(|| format!("reading callgrind_annotate's output for {}", file.display()))?;
    if p.total == 0 {
        bail!("{}: no instructions counted", file.display());
    }
    Ok(p)
}

/// `callgrind_control -i on|off PID`: switches the instrumentation of a
/// process under callgrind on or off (it was started with
/// `--instr-atstart=no`). A window counted this way is exact when the
/// profile is written at the process's exit; a mid-run `--dump` (or
/// `--zero`) is not: the functions active at that moment get their
/// callees' cost as their own in `callgrind_annotate`'s output.
fn callgrind_instrument(on: bool, pid: u32) -> anyhow::Result<()> {
    let action = if on { "on" } else { "off" };
    let out = weir_lab::process::run(
        Command::new("callgrind_control").args(["-i", action, &pid.to_string()]),
        Duration::from_secs(120),
    )?;
    let text = out.stdout_text() + &out.stderr_text();
    if !out.success() || !text.contains("OK") {
        bail!(
            "callgrind_control -i {action} {pid}: {} {}",
            out.status,
            text.trim()
        );
    }
    Ok(())
}

/// How long one receiver may take under valgrind.
fn limit(size: u64) -> Duration {
    Duration::from_secs(300 + size / 250_000)
}

/// Waits for a receiver run by `Proc` to exit 0 within `limit`.
fn wait_ok(p: &mut Proc, limit: Duration) -> anyhow::Result<f64> {
    match p.wait_timeout(limit)? {
        Some((st, usage)) if st.success() => Ok(usage.wall_s),
        Some((st, _)) => Err(p.failure(&format!("exited with {st}"))),
        None => {
            p.kill_tree()?;
            bail!("{} did not finish within {limit:?}", p.name())
        }
    }
}

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

/// Whether `calls` is one call per 64-byte block of `bytes`, once or a
/// few times over (within 0.3%): the mark of a hash's block function
/// (SHA-1 and MD4 work on 64-byte blocks).
pub fn per_block(calls: u64, bytes: u64) -> Option<u64> {
    let blocks = bytes / 64;
    if calls == 0 || blocks == 0 {
        return None;
    }
    let k = (calls as f64 / blocks as f64).round();
    if !(1.0..=4.0).contains(&k) {
        return None;
    }
    let off = (calls as f64 - k * blocks as f64).abs() / (k * blocks as f64);
    (off <= 0.003).then_some(k as u64)
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

    /// Trimmed `callgrind_annotate --tree=caller --inclusive=no` output
    /// of a libtorrent download (valgrind 3.19): a stripped SHA-1 block
    /// function called by SHA1_Update, memcpy, a function split over two
    /// source files, and a recursion suffix.
    const TREE: &str = "\
--------------------------------------------------------------------------------
Profile data file 'lt.cg' (creator: callgrind-3.19.0)
--------------------------------------------------------------------------------
Events recorded:  Ir
Events shown:     Ir
Event sort order: Ir
Thresholds:       100

--------------------------------------------------------------------------------
Ir                   
--------------------------------------------------------------------------------
1,000,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                    file:function
--------------------------------------------------------------------------------

  399,000 (39.90%)  < ???:SHA1_Update (1,027x) [/usr/lib/x86_64-linux-gnu/libcrypto.so.3]
    1,000 ( 0.10%)  < ???:SHA1_Final (68x) [/usr/lib/x86_64-linux-gnu/libcrypto.so.3]
  400,000 (40.00%)  *  ???:0x000000000028dd00 [/usr/lib/x86_64-linux-gnu/libcrypto.so.3]

  100,000 (10.00%)  < ???:0x000000000019d5c0 (1,024x) [/usr/lib/x86_64-linux-gnu/libtorrent-rasterbar.so.2.0.8]
  100,000 (10.00%)  *  ./string/../sysdeps/x86_64/multiarch/memmove-vec-unaligned-erms.S:__memcpy_avx_unaligned_erms [/usr/lib/x86_64-linux-gnu/libc.so.6]

  150,000 (15.00%)  *  /src/sha1-0.11.0/src/compress/soft.rs:sha1::compress::soft::compress [/work/target/release/weir]
   50,000 ( 5.00%)  *  /rustc/abc/library/core/src/num/uint_macros.rs:sha1::compress::soft::compress

  200,000 (20.00%)  *  ???:0x00000000003a1f10 [/usr/lib/x86_64-linux-gnu/libtorrent-rasterbar.so.2.0.8]

   30,000 ( 3.00%)  < ???:_PyEval_EvalFrameDefault'2 (10x) [/usr/bin/python3.11]
   40,000 ( 4.00%)  *  ???:_PyEval_EvalFrameDefault'2 [/usr/bin/python3.11]
";

    #[test]
    fn parses_totals_functions_and_callers() {
        let p = parse_annotate(TREE).unwrap();
        assert_eq!(p.total, 1_000_000);
        let names: Vec<&str> = p.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "0x28dd00@libcrypto.so.3",
                "0x3a1f10@libtorrent-rasterbar.so.2.0.8",
                "sha1::compress::soft::compress",
                "__memcpy_avx_unaligned_erms",
                "_PyEval_EvalFrameDefault",
            ]
        );
        let sha = &p.functions[0];
        assert_eq!(sha.ir, 400_000);
        assert!(sha.is_anonymous());
        assert_eq!(
            sha.object.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libcrypto.so.3")
        );
        assert_eq!(
            sha.callers,
            [
                Call {
                    caller: "SHA1_Update".into(),
                    ir: 399_000,
                    calls: 1_027
                },
                Call {
                    caller: "SHA1_Final".into(),
                    ir: 1_000,
                    calls: 68
                }
            ]
        );
        assert_eq!(sha.calls(), 1_095);
        assert_eq!(sha.main_caller(), Some("SHA1_Update"));
        // Two source files, one function.
        assert_eq!(p.functions[2].ir, 200_000);
        assert!(p.functions[2].callers.is_empty());
        // Callers belong to the next function only.
        assert_eq!(p.functions[1].callers, []);
        assert_eq!(p.functions[3].callers.len(), 1);
        assert_eq!(p.functions[4].callers[0].caller, "_PyEval_EvalFrameDefault");
    }

    #[test]
    fn splits_hash_memcpy_and_the_rest() {
        let p = parse_annotate(TREE).unwrap();
        let b = Breakdown::of(&p, &[HashFamily::Sha1]);
        assert_eq!(b.total, 1_000_000);
        assert_eq!(b.hash, 600_000);
        assert_eq!(b.memcpy, 100_000);
        assert_eq!(b.rest(), 300_000);
        assert_eq!(
            b.hash_fns[0].label,
            "0x28dd00@libcrypto.so.3 (called by SHA1_Update)"
        );
        assert_eq!(b.hash_fns[0].calls, 1_095);
        assert_eq!(b.hash_fns[1].label, "sha1::compress::soft::compress");
        assert_eq!(b.others[0].label, "0x3a1f10@libtorrent-rasterbar.so.2.0.8");
        // Counted as MD4, SHA-1 is the rest.
        let m = Breakdown::of(&p, &[HashFamily::Md4]);
        assert_eq!(m.hash, 0);
        assert!(m.hash_fns.is_empty());
        assert_eq!(m.rest(), 900_000);
    }

    #[test]
    fn reads_the_flat_list_too() {
        let flat = "Events shown:     Ir\n\
             369,224,729 (100.0%)  PROGRAM TOTALS\n\
             Ir                    file:function\n\
             --------------------------------------------------------------------------------\n\
             139,783,306 (37.86%)  /src/compress/soft.rs:sha1::compress::soft::compress\n\
               1,075,107 ( 0.29%)  ./string/memmove-vec-unaligned-erms.S:__memcpy_avx_unaligned_erms [/usr/lib/x86_64-linux-gnu/libc.so.6]\n\
                  57,678 ( 0.02%)  /lib/node.rs:Handle<NodeRef<Mut,K,V,Leaf>,Edge>::insert_recursing [/w/weir]\n\
                   1,000  ???:operator[] [/usr/bin/x]\n";
        let p = parse_annotate(flat).unwrap();
        assert_eq!(p.total, 369_224_729);
        assert_eq!(p.functions.len(), 4);
        assert_eq!(
            p.functions[2].name,
            "Handle<NodeRef<Mut,K,V,Leaf>,Edge>::insert_recursing"
        );
        assert_eq!(p.functions[3].name, "operator[]");
        let b = Breakdown::of(&p, &[HashFamily::Sha1]);
        assert_eq!(b.hash, 139_783_306);
        assert_eq!(b.memcpy, 1_075_107);
    }

    #[test]
    fn refuses_what_is_not_an_ir_profile() {
        assert!(parse_annotate("").is_err());
        assert!(parse_annotate("hello\nworld\n").is_err());
        // Another event first.
        let other = TREE.replace("Events shown:     Ir", "Events shown:     Dr");
        assert!(parse_annotate(&other).is_err());
        // No totals.
        let no_total = TREE.replace("PROGRAM TOTALS", "");
        assert!(parse_annotate(&no_total).is_err());
        // A garbled line in the function list.
        let garbled = format!("{TREE}  12x4 (1.0%)  * ???:f\n");
        assert!(parse_annotate(&garbled).is_err());
        let no_colon = format!("{TREE}  1,000 (0.1%)  *  nofunction\n");
        assert!(parse_annotate(&no_colon).is_err());
        // Functions adding up to more than the total.
        let over = TREE.replace(
            "1,000,000 (100.0%)  PROGRAM TOTALS",
            "10 (100.0%)  PROGRAM TOTALS",
        );
        assert!(parse_annotate(&over).is_err());
    }

    #[test]
    fn an_anonymous_function_is_a_hash_only_when_hashing_calls_it() {
        let f = |name: &str, callers: &[(&str, u64)]| FnCost {
            name: name.into(),
            object: None,
            identified: None,
            ir: 10,
            callers: callers
                .iter()
                .map(|(c, n)| Call {
                    caller: c.to_string(),
                    ir: *n,
                    calls: 1,
                })
                .collect(),
        };
        let fam = [HashFamily::Md4];
        assert!(is_hash(&f("md4::compress::compress", &[]), &fam));
        assert!(is_hash(
            &f("0x10@a.so", &[("MD4_Update", 60), ("x", 40)]),
            &fam
        ));
        assert!(!is_hash(
            &f("0x10@a.so", &[("MD4_Update", 40), ("x", 60)]),
            &fam
        ));
        assert!(!is_hash(&f("0x10@a.so", &[]), &fam));
        // A named function is judged by its own name only.
        assert!(!is_hash(&f("parse", &[("MD4_Update", 100)]), &fam));
        assert!(HashFamily::Crc.matches("crc32fast::specialized::pclmulqdq::calculate"));
        assert!(HashFamily::Sha1.matches("SHA1_Update"));
        assert!(is_memcpy("__memmove_avx_unaligned_erms"));
        assert!(is_memcpy("__mempcpy_avx_unaligned_erms"));
        assert!(!is_memcpy("__memset_avx2_unaligned_erms"));
    }

    #[test]
    fn block_functions_are_called_once_per_64_bytes() {
        let bytes = 8 << 20;
        assert_eq!(per_block(131_072, bytes), Some(1));
        assert_eq!(per_block(262_148, bytes), Some(2));
        assert_eq!(per_block(131_072 + 2_000, bytes), None);
        assert_eq!(per_block(1_000, bytes), None);
        assert_eq!(per_block(0, bytes), None);
        assert_eq!(per_block(5, 10), None);
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
    fn block_functions_are_known_by_their_constants() {
        // Trimmed objdump -d of amuled's stripped SHA-1 block function.
        let sha1 = "\
  1bc13c:\tlea    0x5a827999(%rdi,%rax,1),%eax
  1bc1d0:\tlea    0x6ed9eba1(%rax,%rdx,1),%eax
  1bc240:\tlea    -0x70e44324(%rdx,%rax,1),%eax
  1bc2b8:\tlea    -0x359d3e2a(%rcx,%rax,1),%eax
  1bc379:\tret";
        assert_eq!(family_by_constants(sha1), Some(HashFamily::Sha1));
        let md4 = "  10:\tadd    $0x5a827999,%eax\n  20:\tadd    $0x6ed9eba1,%ecx\n";
        assert_eq!(family_by_constants(md4), Some(HashFamily::Md4));
        let sign_extended = "mov $0xffffffff8f1bbcdc,%rax 0x5a827999 0x6ed9eba1 0xca62c1d6";
        assert_eq!(family_by_constants(sign_extended), Some(HashFamily::Sha1));
        // A longer number that starts with a constant is not it.
        assert_eq!(family_by_constants("0x5a8279990 0x6ed9eba1"), None);
        assert_eq!(family_by_constants("mov $0x10,%eax"), None);
        let frames = "\
00000018 0000000000000024 0000001c FDE cie=00000000 pc=00000000000c5020..00000000000d0bf0
00000030 0000000000000014 00000000 CIE
0002a0ac 0000000000000044 0002a080 FDE cie=00000030 pc=00000000001bc110..00000000001bc37a
  DW_CFA_advance_loc: 4 to 00000000001bc114
00000099 0000000000000010 00000000 FDE cie=00000030 pc=zz..00000000001bc37a
";
        assert_eq!(
            fde_ranges(frames),
            [(0xc5020, 0xd0bf0), (0x1bc110, 0x1bc37a)]
        );
        let mut f = FnCost {
            name: "0x1bc110@amuled".into(),
            object: Some("/usr/bin/amuled".into()),
            identified: Some(HashFamily::Sha1),
            ir: 5,
            callers: Vec::new(),
        };
        assert!(is_hash(&f, &[HashFamily::Md4, HashFamily::Sha1]));
        assert!(!is_hash(&f, &[HashFamily::Md4]));
        f.identified = None;
        assert!(!is_hash(&f, &[HashFamily::Md4, HashFamily::Sha1]));
    }

    #[test]
    fn counts_and_names() {
        assert_eq!(count("1,234,567"), Some(1_234_567));
        assert_eq!(count("12"), Some(12));
        assert_eq!(count(""), None);
        assert_eq!(count("1.5"), None);
        assert_eq!(basename("/usr/lib/libc.so.6"), "libc.so.6");
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
