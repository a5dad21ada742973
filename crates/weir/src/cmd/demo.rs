//! `weir demo`: a seeder and a few leechers in this process, on loopback,
//! with no network and no arguments needed. Shows each one's progress and
//! the rate it reached.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weir_bt::create::{PieceHasher, TorrentBuilder, default_piece_length};
use weir_core::policy::NetPolicy;
use weir_runtime::bt::{self, BtConfig, Phase};

use crate::cmd::Ctx;
use crate::out::{out, outln};
use crate::progress::{bytes, rate};

/// Arguments of `weir demo`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Payload size in MiB.
    #[arg(long, default_value_t = 256)]
    size_mib: u64,
    /// Number of leechers.
    #[arg(long, default_value_t = 3)]
    leechers: usize,
    /// Keep the demo directory instead of deleting it.
    #[arg(long)]
    keep: bool,
}

/// Runs `weir demo`.
pub(crate) fn run(_ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("weir-demo-{}", std::process::id()));
    let result = demo(&dir, &args);
    if !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        crate::out::errln!("demo files kept in {}", dir.display());
    }
    result
}

fn demo(dir: &Path, args: &Args) -> anyhow::Result<ExitCode> {
    // The demo never leaves loopback, whatever --allow says.
    let policy = NetPolicy::loopback();
    let size = args.size_mib << 20;
    let seed_dir = dir.join("seed");
    std::fs::create_dir_all(&seed_dir)
        .with_context(|| format!("creating {}", seed_dir.display()))?;
    let t0 = Instant::now();
    let piece = default_piece_length(size);
    let pieces = write_payload(&seed_dir.join("demo.bin"), size, piece)?;
    let mut b = TorrentBuilder::single_file("demo.bin", size, piece);
    b.pieces(pieces);
    let meta = Arc::new(b.build()?.metainfo);
    outln!(
        "weir demo: {} payload in {} KiB pieces, made and hashed in {:.2} s; 1 seeder, {} leechers on 127.0.0.1",
        bytes(size),
        piece / 1024,
        t0.elapsed().as_secs_f64(),
        args.leechers
    )?;
    let rt = crate::cmd::runtime()?;
    rt.block_on(async {
        let mut cfg = BtConfig::new(policy.clone(), seed_dir.clone());
        cfg.listen = Some("127.0.0.1:0".parse().expect("literal"));
        cfg.seed = true;
        cfg.use_trackers = false;
        let seeder = bt::start(meta.clone(), cfg).await?;
        let seed_addr = seeder.local_addr.context("seeder has no address")?;
        seeder
            .progress
            .clone()
            .wait_for(|p| p.phase == Phase::Seeding)
            .await?;
        let mut leechers = Vec::new();
        let mut addrs = vec![seed_addr];
        for i in 0..args.leechers {
            let mut cfg = BtConfig::new(policy.clone(), dir.join(format!("leech{}", i + 1)));
            cfg.listen = Some("127.0.0.1:0".parse().expect("literal"));
            cfg.peers = addrs.clone();
            cfg.seed = true;
            cfg.use_trackers = false;
            let h = bt::start(meta.clone(), cfg).await?;
            addrs.push(h.local_addr.context("leecher has no address")?);
            leechers.push(h);
        }
        let start = Instant::now();
        let mut watches: Vec<_> = leechers.iter().map(|h| h.progress.clone()).collect();
        let mut done_at = vec![None; leechers.len()];
        let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
        let mut last_print = Instant::now() - Duration::from_secs(10);
        let mut signals = crate::cmd::Signals::new()?;
        let mut stopped_by = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                s = signals.next() => {
                    stopped_by = Some(s);
                    break;
                }
            }
            let mut line = String::new();
            for (i, w) in watches.iter_mut().enumerate() {
                let p = w.borrow().clone();
                if done_at[i].is_none() && matches!(p.phase, Phase::Seeding | Phase::Done) {
                    done_at[i] = Some(start.elapsed());
                }
                let pct = p.stats.bytes_had as f64 * 100.0 / size.max(1) as f64;
                if done_at[i].is_some() {
                    line.push_str(&format!("  leech{}: {:>5} {:>10}", i + 1, "done", ""));
                } else {
                    line.push_str(&format!(
                        "  leech{}: {:5.1}% {:>10}",
                        i + 1,
                        pct,
                        rate(p.stats.download_rate)
                    ));
                }
            }
            let all = done_at.iter().all(Option::is_some);
            if tty {
                out!("\r{line}")?;
            } else if last_print.elapsed() >= Duration::from_millis(250) || all {
                outln!("{line}")?;
                last_print = Instant::now();
            }
            if all || start.elapsed() > Duration::from_secs(300) {
                break;
            }
        }
        if tty {
            outln!()?;
        }
        for h in &leechers {
            h.stop().await;
        }
        let mut ok = true;
        for (i, h) in leechers.into_iter().enumerate() {
            let s = h.wait().await?;
            // The runtime's own completion time, not this loop's polling.
            let secs = if s.complete {
                s.elapsed.as_secs_f64()
            } else {
                f64::NAN
            };
            ok &= s.complete;
            outln!(
                "leech{}: {} in {:.2} s = {} (received {}, sent to other leechers {}){}",
                i + 1,
                bytes(size),
                secs,
                rate(size as f64 / secs),
                bytes(s.stats.downloaded),
                bytes(s.stats.uploaded),
                if s.complete { "" } else { "  INCOMPLETE" }
            )?;
        }
        seeder.stop().await;
        let s = seeder.wait().await?;
        outln!("seeder: sent {}", bytes(s.stats.uploaded))?;
        if let Some(s) = stopped_by {
            return Ok(s.exit_code());
        }
        Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// Writes `size` pseudo-random bytes (xorshift64*) and returns the piece
/// hashes, hashing as it writes.
fn write_payload(path: &PathBuf, size: u64, piece: u32) -> anyhow::Result<Vec<[u8; 20]>> {
    let mut f = std::io::BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut hasher = PieceHasher::new(piece);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for chunk in buf.chunks_exact_mut(8) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            chunk.copy_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
        }
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n])?;
        hasher.feed(&buf[..n]);
        left -= n as u64;
    }
    f.flush()?;
    Ok(hasher.finish())
}
