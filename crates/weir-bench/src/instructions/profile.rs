//! Reading a callgrind profile: `callgrind_annotate`'s text parsed into
//! functions with their callers ([`Profile`]), the hash block functions
//! of stripped objects recognised by their callers, their round constants
//! and their extent in the unwind table, and a profile split into hash,
//! memcpy and the rest ([`Breakdown`]). Text processing only, apart from
//! [`identify_by_code`] running binutils on the objects named.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use weir_lab::ci;

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
}
