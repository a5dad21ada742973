//! `weir hash --ed2k FILE...`: prints the ed2k link aMule would print for
//! each file, `ed2k://|file|NAME|SIZE|HASH|h=AICH|/`.
//!
//! One pass over each file with 4 MiB reads: the MD4 part hashes and the
//! AICH SHA-1 tree are computed on two threads fed the same buffers while
//! this thread reads ahead, so hashing runs at the speed of the slowest of
//! the three, not their sum.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;

use weir_ed2k::hash::{AichHasher, Ed2kHasher, FileHashes};
use weir_ed2k::link::FileLink;

use crate::cmd::Ctx;
use crate::exit::bad_input;
use crate::out::outln;

/// Arguments of `weir hash`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Print eD2k links (MD4 file hash and AICH master hash).
    #[arg(long)]
    ed2k: bool,
    /// Also print the part hashes (`p=`), as `alcc -p` does.
    #[arg(long)]
    parts: bool,
    /// Files to hash.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<std::path::PathBuf>,
}

/// Runs `weir hash`.
pub(crate) fn run(_ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    if !args.ed2k {
        return Err(bad_input(
            "weir hash: choose a hash kind (--ed2k); torrents are made with `weir create`",
        ));
    }
    for path in &args.files {
        let hashes = hash_file(path)?;
        let name = path
            .file_name()
            .ok_or_else(|| bad_input(format!("{}: not a file name", path.display())))?
            .to_string_lossy()
            .into_owned();
        let link = FileLink {
            name,
            size: hashes.size,
            hash: hashes.file_hash,
            aich: hashes.aich.as_ref().map(|a| a.root()),
            part_hashes: (args.parts && !hashes.hashset.is_empty()).then(|| hashes.hashset.clone()),
            sources: Vec::new(),
        };
        outln!("{}", link.to_link())?;
    }
    Ok(ExitCode::SUCCESS)
}

const BUF: usize = 4 << 20;

/// Hashes one file: this thread reads, one thread computes the MD4 parts
/// and one the AICH tree, all three on the same 4 MiB buffers (each buffer
/// is reused once both hashers are done with it).
pub(crate) fn hash_file(path: &Path) -> anyhow::Result<FileHashes> {
    // A file the user names that cannot be opened is bad input (exit 2),
    // as for every subcommand; a read failing later is a failure (1).
    let mut f =
        File::open(path).map_err(|e| bad_input(format!("cannot read {}: {e}", path.display())))?;
    if f.metadata()?.is_dir() {
        return Err(bad_input(format!("{} is a directory", path.display())));
    }
    let (md4_tx, md4_rx) = sync_channel::<Arc<Vec<u8>>>(2);
    let (aich_tx, aich_rx) = sync_channel::<Arc<Vec<u8>>>(2);
    let (pool_tx, pool_rx) = sync_channel::<Arc<Vec<u8>>>(8);
    std::thread::scope(|s| -> anyhow::Result<FileHashes> {
        let pool = pool_tx.clone();
        let md4 = s.spawn(move || {
            let mut h = Ed2kHasher::md4_only();
            for buf in md4_rx {
                h.update(&buf);
                let _ = pool.try_send(buf);
            }
            h.finish()
        });
        let pool = pool_tx;
        let aich = s.spawn(move || {
            let mut a = AichHasher::new();
            for buf in aich_rx {
                a.update(&buf);
                let _ = pool.try_send(buf);
            }
            a.finish()
        });
        let mut result = Ok(());
        loop {
            // A buffer both hashers are done with, else a new one.
            let mut buf = std::iter::from_fn(|| pool_rx.try_recv().ok())
                .find_map(|b| Arc::try_unwrap(b).ok())
                .unwrap_or_else(|| Vec::with_capacity(BUF));
            buf.resize(BUF, 0);
            let n = match read_full(&mut f, &mut buf) {
                Ok(n) => n,
                Err(e) => {
                    result = Err(anyhow::Error::new(e).context(format!("read {}", path.display())));
                    break;
                }
            };
            if n == 0 {
                break;
            }
            buf.truncate(n);
            let buf = Arc::new(buf);
            if md4_tx.send(buf.clone()).is_err() || aich_tx.send(buf).is_err() {
                break;
            }
        }
        drop((md4_tx, aich_tx));
        let md4 = md4
            .join()
            .map_err(|_| anyhow::anyhow!("MD4 thread panicked"))?;
        let aich = aich
            .join()
            .map_err(|_| anyhow::anyhow!("AICH thread panicked"))?;
        result?;
        let mut hashes = md4;
        hashes.aich = aich;
        Ok(hashes)
    })
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
