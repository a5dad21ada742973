//! The UDP link emulator (`weir_runtime::linkem::udp`, what `weir linkem
//! --udp` runs) in this process, inside a namespace, with its counters at
//! hand: a bench reads the bytes it delivered toward the client as they
//! happen, which the kernel's per-socket counters (`ss`, TCP only) cannot
//! give for UDP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weir_core::policy::NetPolicy;
use weir_lab::Netns;
use weir_runtime::linkem::{UdpLinkConfig, UdpStats, serve_udp_with};
use weir_runtime::net::PolicedUdp;

use crate::bt_setup::Series;

/// Runs `f` while an emulated UDP link listens on `listen` (inside `ns`)
/// and forwards to `target`; `f` gets the link's counters. The emulator
/// runs on a thread of its own (a current-thread runtime inside the
/// namespace) and is stopped when `f` returns.
pub fn with_udp_link<T: Send>(
    ns: &Netns,
    listen: SocketAddr,
    target: SocketAddr,
    cfg: UdpLinkConfig,
    f: impl FnOnce(&UdpStats) -> T,
) -> anyhow::Result<T> {
    let stats = Arc::new(UdpStats::default());
    let (ready_tx, ready_rx) = mpsc::channel::<std::io::Result<()>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let st = stats.clone();
    std::thread::scope(|s| {
        let emu = s.spawn(move || {
            ns.try_run_in(move || -> anyhow::Result<()> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("building the emulator's runtime")?;
                rt.block_on(async move {
                    let policy = NetPolicy::loopback();
                    let sock = match PolicedUdp::bind(&policy, listen).await {
                        Ok(s) => {
                            let _ = ready_tx.send(Ok(()));
                            s
                        }
                        Err(e) => {
                            let msg = format!("binding the UDP emulator on {listen}: {e}");
                            let _ = ready_tx.send(Err(e));
                            anyhow::bail!(msg);
                        }
                    };
                    tokio::select! {
                        r = serve_udp_with(sock, target, cfg, policy, st) => {
                            r.context("UDP emulator")
                        }
                        _ = stop_rx => Ok(()),
                    }
                })
            })?
        });
        let started = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .context("the UDP emulator did not start")?;
        if let Err(e) = started {
            drop(stop_tx);
            let _ = emu.join();
            return Err(anyhow::anyhow!("binding the UDP emulator on {listen}: {e}"));
        }
        let r = f(&stats);
        let _ = stop_tx.send(());
        emu.join()
            .map_err(|_| anyhow::anyhow!("the UDP emulator panicked"))??;
        Ok(r)
    })
}

/// Bytes the link delivered toward the client (target to client) so far.
pub fn delivered(stats: &UdpStats) -> u64 {
    stats.rev.bytes.load(Ordering::Relaxed)
}

/// Runs `f` while sampling `read` every `every`; returns `f`'s result and
/// the samples, time in seconds from just before `f` started.
pub fn sample_while<T>(
    every: Duration,
    read: impl Fn() -> u64 + Sync,
    f: impl FnOnce() -> T,
) -> (T, Series) {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let read = &read;
        let sampler = s.spawn(move || {
            let mut series: Series = Vec::new();
            let mut next = t0;
            loop {
                series.push((t0.elapsed().as_secs_f64(), read()));
                next += every;
                let now = Instant::now();
                if next < now {
                    next = now;
                }
                match stop_rx.recv_timeout(next - now) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return series,
                }
            }
        });
        let r = f();
        drop(stop_tx);
        let series = sampler.join().unwrap_or_default();
        (r, series)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cover_the_run() {
        let n = std::sync::atomic::AtomicU64::new(0);
        let (r, s) = sample_while(
            Duration::from_millis(5),
            || n.load(Ordering::Relaxed),
            || {
                for i in 1..=5 {
                    n.store(i * 100, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
                7
            },
        );
        assert_eq!(r, 7);
        assert!(s.len() >= 2, "{s:?}");
        assert!(s.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!(s.last().unwrap().1 <= 500);
    }
}
