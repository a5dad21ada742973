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
use weir_runtime::engine::{Engine, EngineConfig, TorrentSource};
use weir_runtime::storage::{Mode, OpenOptions};
use weir_session::{Phase, SessionConfig};

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
        // Every node is an engine of its own, as separate programs would be.
        let node = |policy: &NetPolicy| {
            let session = SessionConfig::new(
                policy.clone(),
                weir_runtime::engine::new_peer_id(),
                weir_ed2k::Md4Hash([0; 16]),
            );
            let mut cfg = EngineConfig::new(session);
            cfg.bt_listen = Some("127.0.0.1:0".parse().expect("literal"));
            cfg.use_trackers = false;
            cfg.keep_running = true;
            cfg
        };
        let source =
            |dir: PathBuf, peers: Vec<std::net::SocketAddr>, seed_only: bool| TorrentSource {
                meta: meta.clone(),
                dir,
                open: OpenOptions {
                    mode: if seed_only {
                        Mode::Seed
                    } else {
                        Mode::Download
                    },
                    ..OpenOptions::download()
                },
                peers,
                seed: true,
                paused: false,
                files: None,
                priorities: None,
            };
        let seeder = Engine::start(node(&policy)).await?;
        let seed_addr = seeder.bt_addr.context("seeder has no address")?;
        seeder
            .add_torrent(source(seed_dir.clone(), Vec::new(), true))
            .await?;
        seeder
            .progress()
            .wait_for(|p| p.transfers.iter().any(|t| t.phase == Phase::Seeding))
            .await?;
        let mut leechers = Vec::new();
        let mut addrs = vec![seed_addr];
        for i in 0..args.leechers {
            let e = Engine::start(node(&policy)).await?;
            let dir = dir.join(format!("leech{}", i + 1));
            e.add_torrent(source(dir, addrs.clone(), false)).await?;
            addrs.push(e.bt_addr.context("leecher has no address")?);
            leechers.push(e);
        }
        let start = Instant::now();
        let watches: Vec<_> = leechers.iter().map(Engine::progress).collect();
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
            let mut all = true;
            for (i, w) in watches.iter().enumerate() {
                let snap = w.borrow().clone();
                let Some(t) = snap.transfers.first() else {
                    all = false;
                    continue;
                };
                if t.complete_at.is_some() {
                    line.push_str(&format!("  leech{}: {:>5} {:>10}", i + 1, "done", ""));
                } else {
                    all = false;
                    let pct = t.bytes_had as f64 * 100.0 / size.max(1) as f64;
                    line.push_str(&format!(
                        "  leech{}: {:5.1}% {:>10}",
                        i + 1,
                        pct,
                        rate(t.download_rate)
                    ));
                }
            }
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
        let mut ok = true;
        for (i, e) in leechers.into_iter().enumerate() {
            e.stop().await;
            let s = e.wait().await?;
            let Some(t) = s.transfers.first() else {
                ok = false;
                continue;
            };
            // The session's own completion time, not this loop's polling.
            let secs = t.complete_at.map_or(f64::NAN, |c| {
                c.saturating_duration_since(t.added_at).as_secs_f64()
            });
            ok &= t.complete_at.is_some();
            outln!(
                "leech{}: {} in {:.2} s = {} (received {}, sent to other leechers {}){}",
                i + 1,
                bytes(size),
                secs,
                rate(size as f64 / secs),
                bytes(t.downloaded.0),
                bytes(t.uploaded.0),
                if t.complete_at.is_some() {
                    ""
                } else {
                    "  INCOMPLETE"
                }
            )?;
        }
        seeder.stop().await;
        let s = seeder.wait().await?;
        let sent: u64 = s.transfers.iter().map(|t| t.uploaded.0).sum();
        outln!("seeder: sent {}", bytes(sent))?;
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
