//! `weir create`: make a `.torrent` from a file or a directory.
//!
//! A directory is walked recursively in sorted (byte) order; symbolic links
//! to files are followed, links to directories too unless they lead back to
//! an ancestor (a loop, which is refused). Nothing is skipped silently:
//! every file is listed, and anything left out (special files, broken links,
//! empty directories) is named on stderr. The data is read with 4 MiB-class
//! buffers by one thread and hashed by up to two others.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use weir_bt::create::{TorrentBuilder, default_piece_length, hash_pieces};

use crate::cmd::Ctx;
use crate::exit::bad_input;
use crate::out::outln;

/// Arguments of `weir create`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The file or directory to share.
    path: PathBuf,
    /// Where to write the torrent (default: NAME.torrent here). An
    /// existing file is kept unless --force.
    #[arg(short, long, value_name = "OUT.torrent")]
    output: Option<PathBuf>,
    /// Replace the output file if it exists.
    #[arg(long)]
    force: bool,
    /// Piece size: bytes, or with a suffix K/KiB, M/MiB (e.g. 1MiB, 524288).
    /// Default: a power of two giving about 1000-2000 pieces.
    #[arg(long, value_name = "SIZE")]
    piece_size: Option<String>,
    /// Tracker URL (http://, https:// or udp://HOST:PORT); repeat for more
    /// tiers, comma-separate URLs of one tier.
    #[arg(short = 't', long = "tracker", value_name = "URL")]
    trackers: Vec<String>,
    /// Mark the torrent private (BEP 27: peers only from its trackers).
    #[arg(long)]
    private: bool,
    /// A comment stored in the torrent.
    #[arg(long, value_name = "TEXT")]
    comment: Option<String>,
    /// Leave out the creation date (reproducible output).
    #[arg(long)]
    no_date: bool,
}

/// Parses `1MiB`, `512K`, `16384`, ... into bytes (`k`/`M` binary, as
/// piece sizes are given).
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    weir_core::units::binary_size(s).ok()
}

/// Checks a tracker URL the way a client will use it: `http://`,
/// `https://` or `udp://`, a host, a port from 1 to 65535 (required for
/// udp), nothing a URL cannot hold (spaces, control characters).
pub(crate) fn check_tracker(url: &str) -> Result<(), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("not a URL (expected http://, https:// or udp://HOST:PORT/...)")?;
    let scheme = scheme.to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https" | "udp") {
        return Err(format!(
            "{scheme}:// is not a tracker protocol (http://, https:// or udp://)"
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains spaces or control characters".into());
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(r) = host_port.strip_prefix('[') {
        let (h, after) = r.split_once(']').ok_or("unclosed `[` in the host")?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("[{h}] is not an IPv6 address"));
        }
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':').ok_or("junk after `]`")?)),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._~%:".contains(c))
    {
        return Err(format!("{host:?} is not a host name or address"));
    }
    match port {
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => {}
            _ => return Err(format!("port {p:?} is not a number from 1 to 65535")),
        },
        None if scheme == "udp" => return Err("udp:// needs a port (udp://HOST:PORT)".into()),
        None => {}
    }
    Ok(())
}

/// One file of the payload, in data order.
struct Source {
    fs_path: PathBuf,
    components: Vec<String>,
    length: u64,
}

/// Walks `dir` in sorted order, following symlinks, refusing loops.
fn walk(
    dir: &Path,
    rel: &mut Vec<String>,
    ancestors: &mut Vec<(u64, u64)>,
    out: &mut Vec<Source>,
    skipped: &mut Vec<String>,
) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("cannot read directory {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    if entries.is_empty() && !rel.is_empty() {
        skipped.push(format!("{} (empty directory)", dir.display()));
    }
    for e in entries {
        let path = e.path();
        let name = e
            .file_name()
            .into_string()
            .map_err(|n| bad_input(format!("{}: file name {:?} is not UTF-8", dir.display(), n)))?;
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(err) if err.kind() == ErrorKind::NotFound => {
                skipped.push(format!("{} (broken symbolic link)", path.display()));
                continue;
            }
            Err(err) => {
                return Err(err).with_context(|| format!("cannot stat {}", path.display()));
            }
        };
        rel.push(name);
        if meta.is_dir() {
            let id = (meta.dev(), meta.ino());
            if ancestors.contains(&id) {
                return Err(bad_input(format!(
                    "{}: symbolic link loop (leads back to a parent directory)",
                    path.display()
                )));
            }
            ancestors.push(id);
            walk(&path, rel, ancestors, out, skipped)?;
            ancestors.pop();
        } else if meta.is_file() {
            out.push(Source {
                fs_path: path,
                components: rel.clone(),
                length: meta.len(),
            });
        } else {
            skipped.push(format!("{} (not a regular file)", path.display()));
        }
        rel.pop();
    }
    Ok(())
}

/// (sequence number, buffer, bytes filled): buffers stay full length and
/// are reused, so nothing is zeroed per chunk.
type Job = (usize, Vec<u8>, usize);
type Hashed = (usize, Vec<[u8; 20]>, Vec<u8>);

/// The reader's side of the hashing pool: hands out piece-aligned chunks,
/// collects hashes in order, recycles buffers.
struct Pool {
    jobs: Option<SyncSender<Job>>,
    results: Receiver<Hashed>,
    done: BTreeMap<usize, Vec<[u8; 20]>>,
    spare: Vec<Vec<u8>>,
    in_flight: usize,
    seq: usize,
}

impl Pool {
    /// Takes finished chunks; waits for one if `block`.
    fn reap(&mut self, block: bool) -> anyhow::Result<()> {
        while self.in_flight > 0 {
            let r = if block {
                Some(
                    self.results
                        .recv()
                        .map_err(|_| anyhow::anyhow!("hashing thread stopped"))?,
                )
            } else {
                self.results.try_recv().ok()
            };
            let Some((seq, hashes, buf)) = r else {
                break;
            };
            self.spare.push(buf);
            self.done.insert(seq, hashes);
            self.in_flight -= 1;
            if block {
                break;
            }
        }
        Ok(())
    }

    /// Queues a chunk for hashing (blocks while the workers are busy).
    fn submit(&mut self, buf: Vec<u8>, filled: usize) -> anyhow::Result<()> {
        self.reap(false)?;
        let jobs = self.jobs.as_ref().expect("submit before finish");
        jobs.send((self.seq, buf, filled))
            .map_err(|_| anyhow::anyhow!("hashing thread stopped"))?;
        self.seq += 1;
        self.in_flight += 1;
        Ok(())
    }

    fn buffer(&mut self, capacity: usize) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| vec![0; capacity])
    }

    /// Waits for every chunk and returns the hashes in order.
    fn finish(mut self) -> anyhow::Result<Vec<[u8; 20]>> {
        self.jobs = None;
        while self.in_flight > 0 {
            self.reap(true)?;
        }
        Ok(self.done.into_values().flatten().collect())
    }
}

/// Reads all sources in order in piece-aligned chunks of at least 4 MiB and
/// hashes them on `threads` worker threads. Returns the piece hashes.
fn hash_sources(
    sources: &[Source],
    piece_length: u32,
    threads: usize,
) -> anyhow::Result<Vec<[u8; 20]>> {
    let pl = piece_length as usize;
    let chunk = pl * (4usize << 20).div_ceil(pl).max(1);
    let (job_tx, job_rx) = sync_channel::<Job>(threads * 2);
    let (res_tx, res_rx) = sync_channel::<Hashed>(threads * 2 + 2);
    let job_rx = Arc::new(Mutex::new(job_rx));

    std::thread::scope(|s| {
        for _ in 0..threads {
            let rx = Arc::clone(&job_rx);
            let tx = res_tx.clone();
            s.spawn(move || {
                loop {
                    // One lock per multi-MiB chunk.
                    let job = rx.lock().map(|r| r.recv());
                    let Ok(Ok((seq, buf, filled))) = job else {
                        break;
                    };
                    let hashes = hash_pieces(&buf[..filled], piece_length);
                    if tx.send((seq, hashes, buf)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(res_tx);
        let mut pool = Pool {
            jobs: Some(job_tx),
            results: res_rx,
            done: BTreeMap::new(),
            spare: Vec::new(),
            in_flight: 0,
            seq: 0,
        };
        let mut buf = vec![0u8; chunk];
        let mut filled = 0usize;
        for src in sources {
            let mut f = File::open(&src.fs_path)
                .with_context(|| format!("cannot open {}", src.fs_path.display()))?;
            let mut left = src.length;
            while left > 0 {
                let want = (chunk - filled).min(usize::try_from(left).unwrap_or(usize::MAX));
                let n = match f.read(&mut buf[filled..filled + want]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("cannot read {}", src.fs_path.display()));
                    }
                };
                if n == 0 {
                    anyhow::bail!("{} shrank while it was being read", src.fs_path.display());
                }
                filled += n;
                left -= n as u64;
                if filled == chunk {
                    let next = pool.buffer(chunk);
                    pool.submit(std::mem::replace(&mut buf, next), filled)?;
                    filled = 0;
                }
            }
        }
        if filled > 0 {
            pool.submit(buf, filled)?;
        }
        pool.finish()
    })
}

fn fmt_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Runs `weir create`.
pub(crate) fn run(_ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let meta =
        fs::metadata(&args.path).map_err(|e| bad_input(format!("{}: {e}", args.path.display())))?;
    let name = args
        .path
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_owned()))
        .ok_or_else(|| bad_input(format!("{}: has no file name", args.path.display())))?
        .into_string()
        .map_err(|n| bad_input(format!("name {n:?} is not UTF-8")))?;

    let mut sources = Vec::new();
    let mut skipped = Vec::new();
    if meta.is_dir() {
        use std::os::unix::fs::MetadataExt;
        let mut ancestors = vec![(meta.dev(), meta.ino())];
        walk(
            &args.path,
            &mut Vec::new(),
            &mut ancestors,
            &mut sources,
            &mut skipped,
        )?;
    } else if meta.is_file() {
        sources.push(Source {
            fs_path: args.path.clone(),
            components: vec![name.clone()],
            length: meta.len(),
        });
    } else {
        return Err(bad_input(format!(
            "{}: not a regular file or directory",
            args.path.display()
        )));
    }
    let total: u64 = sources.iter().map(|s| s.length).sum();
    if total == 0 {
        return Err(bad_input(format!(
            "{}: nothing to share ({} files, all empty)",
            args.path.display(),
            sources.len()
        )));
    }

    let tiers: Vec<Vec<String>> = args
        .trackers
        .iter()
        .map(|t| {
            t.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(String::from)
                .collect()
        })
        .collect();
    for url in tiers.iter().flatten() {
        check_tracker(url).map_err(|why| bad_input(format!("-t {url}: {why}")))?;
    }
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}.torrent")));
    // Before the hashing: a long hash must not end in a refusal.
    if !args.force && fs::symlink_metadata(&out).is_ok() {
        return Err(exists(&out));
    }

    let piece_length = match &args.piece_size {
        None => default_piece_length(total),
        Some(s) => {
            let n = parse_size(s).ok_or_else(|| {
                bad_input(format!(
                    "--piece-size {s:?}: expected bytes or a size like 512KiB or 1MiB"
                ))
            })?;
            if !(16 << 10..=16 << 20).contains(&n) {
                return Err(bad_input(format!(
                    "--piece-size {s}: must be between 16 KiB and 16 MiB"
                )));
            }
            n as u32
        }
    };

    let mut builder = if meta.is_dir() {
        let mut b = TorrentBuilder::multi_file(&name, piece_length);
        for s in &sources {
            b.add_file(s.components.clone(), s.length);
        }
        b
    } else {
        TorrentBuilder::single_file(&name, total, piece_length)
    };

    for s in &skipped {
        crate::out::errln!("skipped: {s}");
    }
    crate::out::errln!(
        "{} file(s), {} in pieces of {} ({} pieces):",
        sources.len(),
        fmt_size(total),
        fmt_size(u64::from(piece_length)),
        total.div_ceil(u64::from(piece_length))
    );
    const LIST_MAX: usize = 200;
    for s in sources.iter().take(LIST_MAX) {
        crate::out::errln!("  {:>12}  {}", s.length, s.components.join("/"));
    }
    if sources.len() > LIST_MAX {
        crate::out::errln!("  (and {} more files)", sources.len() - LIST_MAX);
    }

    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 2);
    let started = Instant::now();
    let pieces = hash_sources(&sources, piece_length, threads)?;
    let secs = started.elapsed().as_secs_f64();

    let date = if args.no_date {
        None
    } else {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs() as i64)
    };
    builder
        .pieces(pieces)
        .trackers(tiers)
        .private(args.private)
        .comment(args.comment.clone())
        .created_by(Some(format!("weir {}", env!("CARGO_PKG_VERSION"))))
        .creation_date(date);
    let created = builder
        .build()
        .map_err(|e| bad_input(format!("{}: {e}", args.path.display())))?;

    write_output(&out, &created.bytes, args.force)?;
    let hex: String = created
        .metainfo
        .info_hash
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    crate::out::errln!(
        "hashed {} in {secs:.2} s ({:.0} MB/s)",
        fmt_size(total),
        total as f64 / secs.max(1e-9) / 1e6
    );
    outln!("info-hash: {hex}")?;
    outln!("wrote: {}", out.display())?;
    Ok(ExitCode::SUCCESS)
}

fn exists(out: &Path) -> anyhow::Error {
    bad_input(format!(
        "{} already exists; give --force to replace it, or another -o",
        out.display()
    ))
}

/// Writes the torrent: a new file only (never an existing one, even one
/// that appeared during the hashing), or with `force` a replacement
/// written aside and renamed over it (a failed write leaves the old one).
fn write_output(out: &Path, bytes: &[u8], force: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let cannot = || format!("cannot write {}", out.display());
    if !force {
        let mut f = match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Err(exists(out)),
            Err(e) => return Err(e).with_context(cannot),
        };
        return f.write_all(bytes).with_context(cannot);
    }
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(format!(".weir-tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let r = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, out));
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r.with_context(cannot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_urls() {
        for ok in [
            "http://127.0.0.1:6969/announce",
            "https://tracker.example.org/announce?passkey=ab%20c",
            "udp://tracker.example:1337",
            "udp://[::1]:6969/announce",
            "HTTP://t.example/a",
        ] {
            assert_eq!(check_tracker(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("notaurl", "not a URL"),
            ("ftp://t.example/a", "not a tracker protocol"),
            ("udp://t.example/announce", "needs a port"),
            ("http:///announce", "no host"),
            ("http://t.example:0/a", "1 to 65535"),
            ("http://t.example:99999/a", "1 to 65535"),
            ("http://t ex/a", "spaces"),
            ("http://[::1/a", "unclosed"),
            ("http://[zz]:80/a", "IPv6"),
            ("http://a<b>/", "not a host"),
        ] {
            let e = check_tracker(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("2 M"), Some(2 << 20));
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size("MiB"), None);
        assert_eq!(parse_size(""), None);
    }
}
