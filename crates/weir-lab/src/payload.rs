//! Deterministic pseudo-random payloads for transfers.
//!
//! Generator: the byte stream of seed `s` is the little-endian bytes of the
//! 64-bit words `w[i] = mix(k + (i + 1) * 0x9E3779B97F4A7C15)` for
//! `i = 0, 1, ...`, where `k = mix(s)` and `mix` is the splitmix64 output
//! function (`z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
//! z *= 0x94D049BB133111EB; z ^= z >> 31`, wrapping). It is counter-based,
//! so any range can be produced without the bytes before it, and runs at
//! several GB/s (two multiplies per 8 bytes); the files' contents are
//! incompressible and the same on every machine.
//!
//! In a tree ([`write_tree`]) each file has its own seed derived from the
//! tree seed and the file's relative path ([`file_seed`]).

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(key: u64, i: u64) -> u64 {
    mix(key.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// Fills `buf` with the payload bytes of `seed` starting at stream byte
/// `offset`.
pub fn fill(buf: &mut [u8], offset: u64, seed: u64) {
    let key = mix(seed);
    let mut pos = 0usize;
    let mut off = offset;
    // Unaligned head.
    let head = (off % 8) as usize;
    if head != 0 && !buf.is_empty() {
        let w = word(key, off / 8).to_le_bytes();
        let n = (8 - head).min(buf.len());
        buf[..n].copy_from_slice(&w[head..head + n]);
        pos = n;
        off += n as u64;
    }
    let mut i = off / 8;
    let mut chunks = buf[pos..].chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&word(key, i).to_le_bytes());
        i += 1;
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let w = word(key, i).to_le_bytes();
        let n = tail.len();
        tail.copy_from_slice(&w[..n]);
    }
}

/// Writes `size` payload bytes of `seed` to `path` (created or truncated).
pub fn write(path: &Path, size: u64, seed: u64) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let n = ((size - off) as usize).min(buf.len());
        fill(&mut buf[..n], off, seed);
        f.write_all(&buf[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        off += n as u64;
    }
    Ok(())
}

/// The seed of file `rel` in a tree of seed `seed`: `seed` XOR the FNV-1a
/// hash of the path's bytes.
pub fn file_seed(seed: u64, rel: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rel.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    seed ^ h
}

/// Writes each `(relative path, size)` under `dir` with [`file_seed`].
/// Relative paths may contain `/` but no `..` or leading `/`.
pub fn write_tree(dir: &Path, files: &[(&str, u64)], seed: u64) -> anyhow::Result<()> {
    for (rel, size) in files {
        let p = Path::new(rel);
        if p.is_absolute()
            || p.components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            bail!("payload path {rel:?} must be relative without `..`");
        }
        write(&dir.join(p), *size, file_seed(seed, rel))?;
    }
    Ok(())
}

/// Checks that `path` holds exactly the `size` payload bytes of `seed`;
/// the error names the first differing offset.
pub fn verify(path: &Path, size: u64, seed: u64) -> anyhow::Result<()> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    if len != size {
        bail!("{}: {len} bytes, expected {size}", path.display());
    }
    let mut got = vec![0u8; 1 << 20];
    let mut want = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let n = ((size - off) as usize).min(got.len());
        f.read_exact(&mut got[..n])
            .with_context(|| format!("reading {}", path.display()))?;
        fill(&mut want[..n], off, seed);
        if got[..n] != want[..n] {
            let i = got[..n]
                .iter()
                .zip(&want[..n])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            bail!(
                "{}: differs from the payload at byte {}",
                path.display(),
                off + i as u64
            );
        }
        off += n as u64;
    }
    Ok(())
}

/// Checks that two files have the same bytes; the error names the first
/// differing offset or the sizes.
pub fn files_equal(a: &Path, b: &Path) -> anyhow::Result<()> {
    let mut fa = File::open(a).with_context(|| format!("opening {}", a.display()))?;
    let mut fb = File::open(b).with_context(|| format!("opening {}", b.display()))?;
    let (la, lb) = (fa.metadata()?.len(), fb.metadata()?.len());
    if la != lb {
        bail!("{} has {la} bytes, {} has {lb}", a.display(), b.display());
    }
    let mut ba = vec![0u8; 1 << 20];
    let mut bb = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < la {
        let n = ((la - off) as usize).min(ba.len());
        fa.read_exact(&mut ba[..n])?;
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            let i = ba[..n]
                .iter()
                .zip(&bb[..n])
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            bail!(
                "{} and {} differ at byte {}",
                a.display(),
                b.display(),
                off + i as u64
            );
        }
        off += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_words() {
        // Fixed values pin the generator: changing it changes every payload.
        let mut b = [0u8; 16];
        fill(&mut b, 0, 0);
        assert_eq!(
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            word(mix(0), 0)
        );
        assert_eq!(mix(0), 0);
        assert_eq!(word(0, 0), mix(GAMMA));
        assert_eq!(mix(GAMMA), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn any_range_matches_the_stream() {
        let mut all = vec![0u8; 1000];
        fill(&mut all, 0, 42);
        for (off, len) in [
            (0, 0),
            (0, 1),
            (3, 5),
            (5, 3),
            (7, 17),
            (8, 8),
            (13, 900),
            (999, 1),
        ] {
            let mut part = vec![0u8; len];
            fill(&mut part, off as u64, 42);
            assert_eq!(part, all[off..off + len], "offset {off} len {len}");
        }
        let mut other = vec![0u8; 1000];
        fill(&mut other, 0, 43);
        assert_ne!(all, other);
    }

    #[test]
    fn write_verify_and_tree() {
        let dir = crate::tmpdir::TempDir::new("payload").unwrap();
        let p = dir.path().join("a.bin");
        write(&p, 3_000_001, 7).unwrap();
        verify(&p, 3_000_001, 7).unwrap();
        assert!(verify(&p, 3_000_001, 8).is_err());
        assert!(verify(&p, 3_000_000, 7).is_err());
        write_tree(dir.path(), &[("t/x.bin", 10), ("t/sub/y.bin", 70_000)], 1).unwrap();
        verify(
            &dir.path().join("t/sub/y.bin"),
            70_000,
            file_seed(1, "t/sub/y.bin"),
        )
        .unwrap();
        assert!(write_tree(dir.path(), &[("../x", 1)], 1).is_err());
        assert!(write_tree(dir.path(), &[("/x", 1)], 1).is_err());
        let q = dir.path().join("b.bin");
        write(&q, 3_000_001, 7).unwrap();
        files_equal(&p, &q).unwrap();
        write(&q, 3_000_001, 9).unwrap();
        assert!(files_equal(&p, &q).is_err());
    }
}
