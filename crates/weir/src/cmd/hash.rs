//! `weir hash --ed2k FILE...`: prints the ed2k link aMule would print for
//! each file, `ed2k://|file|NAME|SIZE|HASH|h=AICH|/`.
//!
//! One pass over each file with 4 MiB reads: the MD4 part hashes and the
//! AICH SHA-1 tree are computed on two threads fed the same buffers, so
//! hashing runs at the speed of the slower of the two, not their sum.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;

use anyhow::Context;
use weir_ed2k::hash::{AichHasher, Ed2kHasher, FileHashes};
use weir_ed2k::link::FileLink;

use crate::cmd::Ctx;
use crate::exit::bad_input;

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
        println!("{}", link.to_link());
    }
    Ok(ExitCode::SUCCESS)
}

const BUF: usize = 4 << 20;

/// Hashes one file: MD4 parts on this thread, AICH on a helper thread.
pub(crate) fn hash_file(path: &Path) -> anyhow::Result<FileHashes> {
    let mut f = File::open(path).with_context(|| format!("open {}", path.display()))?;
    if f.metadata()?.is_dir() {
        return Err(bad_input(format!("{} is a directory", path.display())));
    }
    let (tx, rx) = sync_channel::<Arc<Vec<u8>>>(2);
    let (ret_tx, ret_rx) = sync_channel::<Arc<Vec<u8>>>(4);
    std::thread::scope(|s| -> anyhow::Result<FileHashes> {
        let aich = s.spawn(move || {
            let mut a = AichHasher::new();
            for buf in rx {
                a.update(&buf);
                let _ = ret_tx.try_send(buf);
            }
            a.finish()
        });
        let mut md4 = Ed2kHasher::md4_only();
        let mut result = Ok(());
        loop {
            // Reuse a buffer the AICH thread is done with, when there is one.
            let mut buf = ret_rx
                .try_recv()
                .ok()
                .and_then(|b| Arc::try_unwrap(b).ok())
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
            md4.update(&buf);
            if tx.send(Arc::new(buf)).is_err() {
                break;
            }
        }
        drop(tx);
        let aich = aich
            .join()
            .map_err(|_| anyhow::anyhow!("AICH thread panicked"))?;
        result?;
        let mut hashes = md4.finish();
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
