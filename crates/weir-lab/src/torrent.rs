//! Minimal .torrent (BitTorrent v1) writer and reader for the harness:
//! [`make`] builds a torrent for a file or directory with an optional
//! announce URL; [`TorrentInfo::read`] extracts the info-hash, name and
//! announce URL of any v1 torrent (one made by `weir create` too), which the
//! tracker whitelist and the adapters need.
//!
//! Own code on purpose: weir-lab depends on none of weir's crates, so a
//! bug in weir's bencode or metainfo code cannot hide in both sides of a test.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sha1::{Digest, Sha1};

/// A bencoded value, as far as the harness needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `i...e`
    Int(i64),
    /// `N:...`
    Bytes(Vec<u8>),
    /// `l...e`
    List(Vec<Value>),
    /// `d...e` (keys sorted, as bencode requires)
    Dict(BTreeMap<Vec<u8>, Value>),
}

impl Value {
    /// Appends the bencoding of `self` to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Int(i) => out.extend_from_slice(format!("i{i}e").as_bytes()),
            Value::Bytes(b) => {
                out.extend_from_slice(format!("{}:", b.len()).as_bytes());
                out.extend_from_slice(b);
            }
            Value::List(l) => {
                out.push(b'l');
                l.iter().for_each(|v| v.encode(out));
                out.push(b'e');
            }
            Value::Dict(d) => {
                out.push(b'd');
                for (k, v) in d {
                    Value::Bytes(k.clone()).encode(out);
                    v.encode(out);
                }
                out.push(b'e');
            }
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(d) => d.get(key.as_bytes()),
            _ => None,
        }
    }
}

/// Decodes one value at `*pos`; returns it and advances `*pos`.
fn decode(b: &[u8], pos: &mut usize, depth: usize) -> anyhow::Result<Value> {
    if depth > 64 {
        bail!("bencode nested too deeply");
    }
    let c = *b.get(*pos).context("bencode: unexpected end")?;
    match c {
        b'i' => {
            let end = b[*pos..]
                .iter()
                .position(|&x| x == b'e')
                .context("bencode: unterminated int")?
                + *pos;
            let s = std::str::from_utf8(&b[*pos + 1..end])?;
            let v = s
                .parse()
                .with_context(|| format!("bencode: bad int {s:?}"))?;
            *pos = end + 1;
            Ok(Value::Int(v))
        }
        b'l' => {
            *pos += 1;
            let mut l = Vec::new();
            while *b.get(*pos).context("bencode: unterminated list")? != b'e' {
                l.push(decode(b, pos, depth + 1)?);
            }
            *pos += 1;
            Ok(Value::List(l))
        }
        b'd' => {
            *pos += 1;
            let mut d = BTreeMap::new();
            while *b.get(*pos).context("bencode: unterminated dict")? != b'e' {
                let Value::Bytes(k) = decode(b, pos, depth + 1)? else {
                    bail!("bencode: dict key is not a string");
                };
                let v = decode(b, pos, depth + 1)?;
                d.insert(k, v);
            }
            *pos += 1;
            Ok(Value::Dict(d))
        }
        b'0'..=b'9' => {
            let colon = b[*pos..]
                .iter()
                .position(|&x| x == b':')
                .context("bencode: bad string")?
                + *pos;
            let n: usize = std::str::from_utf8(&b[*pos..colon])?.parse()?;
            let start = colon + 1;
            let end = start
                .checked_add(n)
                .filter(|&e| e <= b.len())
                .context("bencode: string past end")?;
            *pos = end;
            Ok(Value::Bytes(b[start..end].to_vec()))
        }
        _ => bail!("bencode: unexpected byte {c:#04x} at {}", *pos),
    }
}

/// What the harness needs to know about a torrent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorrentInfo {
    /// SHA-1 of the bencoded info dictionary.
    pub info_hash: [u8; 20],
    /// The `name` of the info dictionary (file or top directory name).
    pub name: String,
    /// Total payload bytes.
    pub length: u64,
    /// `announce`, if any.
    pub announce: Option<String>,
}

impl TorrentInfo {
    /// Reads a v1 .torrent file.
    pub fn read(path: &Path) -> anyhow::Result<TorrentInfo> {
        let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&b).with_context(|| format!("parsing {}", path.display()))
    }

    /// Parses a v1 .torrent from its bytes.
    pub fn parse(b: &[u8]) -> anyhow::Result<TorrentInfo> {
        if b.first() != Some(&b'd') {
            bail!("not a bencoded dictionary");
        }
        // Find the info value's raw span by walking the top dictionary.
        let mut pos = 1;
        let mut info_span = None;
        let mut announce = None;
        while *b.get(pos).context("unterminated dictionary")? != b'e' {
            let Value::Bytes(k) = decode(b, &mut pos, 1)? else {
                bail!("dict key is not a string");
            };
            let start = pos;
            let v = decode(b, &mut pos, 1)?;
            match k.as_slice() {
                b"info" => info_span = Some((start, pos, v)),
                b"announce" => {
                    if let Value::Bytes(a) = v {
                        announce = Some(String::from_utf8_lossy(&a).into_owned());
                    }
                }
                _ => {}
            }
        }
        let (s, e, info) = info_span.context("no info dictionary")?;
        let name = match info.get("name") {
            Some(Value::Bytes(n)) => String::from_utf8_lossy(n).into_owned(),
            _ => bail!("info has no name"),
        };
        let length = match (info.get("length"), info.get("files")) {
            (Some(Value::Int(l)), _) if *l >= 0 => *l as u64,
            (_, Some(Value::List(files))) => files
                .iter()
                .map(|f| match f.get("length") {
                    Some(Value::Int(l)) if *l >= 0 => Ok(*l as u64),
                    _ => bail!("file without length"),
                })
                .sum::<anyhow::Result<u64>>()?,
            _ => bail!("info has neither length nor files"),
        };
        Ok(TorrentInfo {
            info_hash: Sha1::digest(&b[s..e]).into(),
            name,
            length,
            announce,
        })
    }

    /// The info-hash as 40 lowercase hex digits (opentracker's whitelist form).
    pub fn info_hash_hex(&self) -> String {
        self.info_hash.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Files of `root` (a file, or a directory walked in sorted order) with
/// their path components relative to `root`.
fn list_files(root: &Path) -> anyhow::Result<Vec<(PathBuf, Vec<String>, u64)>> {
    fn walk(
        dir: &Path,
        rel: &mut Vec<String>,
        out: &mut Vec<(PathBuf, Vec<String>, u64)>,
    ) -> anyhow::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e
                .file_name()
                .into_string()
                .map_err(|n| anyhow::anyhow!("non-UTF-8 name {n:?}"))?;
            let ft = e.file_type()?;
            rel.push(name);
            if ft.is_dir() {
                walk(&e.path(), rel, out)?;
            } else if ft.is_file() {
                out.push((e.path(), rel.clone(), e.metadata()?.len()));
            }
            rel.pop();
        }
        Ok(())
    }
    let md = std::fs::metadata(root).with_context(|| format!("reading {}", root.display()))?;
    let mut out = Vec::new();
    if md.is_file() {
        out.push((root.to_path_buf(), Vec::new(), md.len()));
    } else {
        walk(root, &mut Vec::new(), &mut out)?;
        if out.is_empty() {
            bail!("{} holds no files", root.display());
        }
    }
    Ok(out)
}

/// Makes a v1 torrent of `root` (a file, or a directory: multi-file torrent
/// named after it) with `piece_len`-byte pieces and an optional announce
/// URL; writes it to `out` and returns its [`TorrentInfo`]. No creation
/// date, so the same input gives the same bytes.
pub fn make(
    root: &Path,
    piece_len: u64,
    announce: Option<&str>,
    out: &Path,
) -> anyhow::Result<TorrentInfo> {
    if piece_len < 16 * 1024 || !piece_len.is_power_of_two() {
        bail!("piece length {piece_len} must be a power of two >= 16 KiB");
    }
    let files = list_files(root)?;
    let name = root
        .file_name()
        .and_then(|n| n.to_str())
        .context("root has no UTF-8 file name")?
        .to_string();
    // Hash the concatenation of the files in piece-sized steps.
    let mut pieces = Vec::new();
    let mut h = Sha1::new();
    let mut in_piece = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for (path, _, _) in &files {
        let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        loop {
            let want = ((piece_len - in_piece) as usize).min(buf.len());
            let n = f.read(&mut buf[..want])?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            in_piece += n as u64;
            if in_piece == piece_len {
                pieces.extend_from_slice(&h.finalize_reset());
                in_piece = 0;
            }
        }
    }
    if in_piece > 0 {
        pieces.extend_from_slice(&h.finalize());
    }
    let mut info = BTreeMap::new();
    info.insert(b"name".to_vec(), Value::Bytes(name.into_bytes()));
    info.insert(b"piece length".to_vec(), Value::Int(piece_len as i64));
    info.insert(b"pieces".to_vec(), Value::Bytes(pieces));
    if files.len() == 1 && files[0].1.is_empty() {
        info.insert(b"length".to_vec(), Value::Int(files[0].2 as i64));
    } else {
        let list = files
            .iter()
            .map(|(_, rel, len)| {
                let mut d = BTreeMap::new();
                d.insert(b"length".to_vec(), Value::Int(*len as i64));
                d.insert(
                    b"path".to_vec(),
                    Value::List(
                        rel.iter()
                            .map(|c| Value::Bytes(c.clone().into_bytes()))
                            .collect(),
                    ),
                );
                Value::Dict(d)
            })
            .collect();
        info.insert(b"files".to_vec(), Value::List(list));
    }
    let mut top = BTreeMap::new();
    if let Some(a) = announce {
        top.insert(b"announce".to_vec(), Value::Bytes(a.as_bytes().to_vec()));
    }
    top.insert(b"created by".to_vec(), Value::Bytes(b"weir-lab".to_vec()));
    top.insert(b"info".to_vec(), Value::Dict(info));
    let mut bytes = Vec::new();
    Value::Dict(top).encode(&mut bytes);
    std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    TorrentInfo::parse(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_file_torrent_round_trips() {
        let dir = crate::tmpdir::TempDir::new("torrent").unwrap();
        let f = dir.path().join("data.bin");
        crate::payload::write(&f, 100_000, 3).unwrap();
        let t = dir.path().join("data.torrent");
        let info = make(&f, 32 * 1024, Some("http://127.0.0.1:6969/announce"), &t).unwrap();
        assert_eq!(info.name, "data.bin");
        assert_eq!(info.length, 100_000);
        assert_eq!(
            info.announce.as_deref(),
            Some("http://127.0.0.1:6969/announce")
        );
        assert_eq!(TorrentInfo::read(&t).unwrap(), info);
        // 4 pieces: 3 full + 1 partial, each 20 bytes of SHA-1.
        let raw = std::fs::read(&t).unwrap();
        let mut pos = 0;
        let v = decode(&raw, &mut pos, 0).unwrap();
        let Some(Value::Bytes(p)) = v.get("info").and_then(|i| i.get("pieces")) else {
            panic!("no pieces");
        };
        assert_eq!(p.len(), 80);
        let data = std::fs::read(&f).unwrap();
        assert_eq!(&p[..20], Sha1::digest(&data[..32 * 1024]).as_slice());
        assert_eq!(&p[60..], Sha1::digest(&data[96 * 1024..]).as_slice());
        assert_eq!(info.info_hash_hex().len(), 40);
    }

    #[test]
    fn multi_file_torrent_lists_files_in_order() {
        let dir = crate::tmpdir::TempDir::new("torrent-multi").unwrap();
        crate::payload::write_tree(
            dir.path(),
            &[("set/b.bin", 5000), ("set/a/x.bin", 40_000)],
            1,
        )
        .unwrap();
        let t = dir.path().join("set.torrent");
        let info = make(&dir.path().join("set"), 16 * 1024, None, &t).unwrap();
        assert_eq!(info.length, 45_000);
        assert_eq!(info.announce, None);
        let raw = std::fs::read(&t).unwrap();
        let s = String::from_utf8_lossy(&raw);
        let a = s.find("1:a5:x.bin").unwrap();
        let b = s.find("5:b.bin").unwrap();
        assert!(a < b);
    }

    #[test]
    fn bad_input_is_an_error() {
        for bad in [
            &b""[..],
            b"i1e",
            b"d4:infoi1ee",
            b"d4:info",
            b"d3:foo5:abce",
            b"d4:infod4:name1:xee",
        ] {
            assert!(
                TorrentInfo::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let dir = crate::tmpdir::TempDir::new("torrent-bad").unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, b"abc").unwrap();
        assert!(make(&f, 1000, None, &dir.path().join("t")).is_err());
    }
}
