//! Announcing a torrent to its trackers (BEP 3, BEP 12 tiers, BEP 15 UDP):
//! `started` when the torrent starts, again every interval the tracker
//! asks for, `completed` when the download completes, `stopped` when it
//! stops. Peers the tracker returns go to the driver.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use weir_bt::metainfo::Metainfo;
use weir_bt::tracker::{AnnounceRequest, Event as AnnounceEvent};
use weir_core::policy::NetPolicy;
use weir_session::TransferId;

use super::driver::Msg;

/// Longest wait between retries of a failing announce.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Re-announce after this many seconds while downloading with no peer.
const STARVING_REANNOUNCE: u32 = 15;
/// How long a `stopped` announce may take at shutdown.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What an announce reports of its torrent, kept current by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Standing {
    pub(crate) uploaded: u64,
    pub(crate) downloaded: u64,
    pub(crate) left: u64,
    /// The wanted pieces are all had (not starving).
    pub(crate) complete: bool,
    /// Every piece is had: `completed` is announced (a download of some
    /// files only is a partial seed and does not say it, as Transmission).
    pub(crate) seed: bool,
    pub(crate) peers: usize,
}

/// The announce task of one torrent.
#[derive(Debug)]
pub(crate) struct Announcer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<()>,
    pub(crate) standing: watch::Sender<Standing>,
    /// Wakes the task to announce now (`torrent-reannounce`).
    again: Arc<tokio::sync::Notify>,
}

struct Ctx {
    id: TransferId,
    policy: NetPolicy,
    opts: crate::tracker::Options,
    /// The metainfo's own URLs (shared, not copied).
    tiers: Vec<Vec<Arc<str>>>,
    base: AnnounceRequest,
    tx: mpsc::Sender<Msg>,
    standing: watch::Receiver<Standing>,
    again: Arc<tokio::sync::Notify>,
}

/// Who announces: the session's identity and where it listens.
#[derive(Clone, Debug)]
pub(crate) struct Announcing {
    pub(crate) policy: NetPolicy,
    pub(crate) peer_id: [u8; 20],
    pub(crate) port: u16,
    pub(crate) local_ip: Option<IpAddr>,
}

impl Announcer {
    /// Starts announcing; `None` when the torrent lists no tracker.
    pub(crate) fn start(
        id: TransferId,
        meta: &Arc<Metainfo>,
        me: &Announcing,
        initial: Standing,
        tx: mpsc::Sender<Msg>,
    ) -> Option<Self> {
        let Announcing {
            policy,
            peer_id,
            port,
            local_ip,
        } = me.clone();
        let tiers = meta.tracker_tiers();
        if tiers.iter().all(Vec::is_empty) {
            return None;
        }
        let base = AnnounceRequest {
            info_hash: meta.info_hash,
            peer_id,
            port,
            uploaded: 0,
            downloaded: 0,
            left: meta.info.total_length(),
            event: None,
            numwant: Some(50),
            key: Some(u32::from_le_bytes([
                peer_id[12],
                peer_id[13],
                peer_id[14],
                peer_id[15],
            ])),
            compact: true,
        };
        let opts = crate::tracker::Options {
            local_ip: local_ip.filter(|ip| !ip.is_unspecified()),
            ..Default::default()
        };
        let (standing_tx, standing) = watch::channel(initial);
        let again = Arc::new(tokio::sync::Notify::new());
        let ctx = Ctx {
            again: again.clone(),
            id,
            policy,
            opts,
            tiers,
            base,
            tx,
            standing,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(run(ctx, stop_rx));
        Some(Self {
            stop: Some(stop_tx),
            task,
            standing: standing_tx,
            again,
        })
    }

    /// Announces now instead of at the next interval (a manual
    /// re-announce; the tracker's own minimum interval is the user's
    /// business, as in Transmission).
    pub(crate) fn reannounce(&self) {
        self.again.notify_one();
    }

    /// Announces `stopped` (bounded in time) and ends.
    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(STOP_TIMEOUT + Duration::from_secs(1), &mut self.task).await;
        self.task.abort();
    }
}

async fn run(mut ctx: Ctx, mut stop: tokio::sync::oneshot::Receiver<()>) {
    let mut event = Some(AnnounceEvent::Started);
    let mut completed_sent = ctx.standing.borrow().seed;
    let mut failures = 0u32;
    loop {
        // A stop while an announce is out (a tracker slow to answer, or
        // its peers waiting for room in the driver's channel) ends that
        // announce: the tracker still hears `stopped`, in the stop's time.
        // Announces are boxed: the task lives as long as its torrent and
        // sleeps nearly all of it, and inline its future was as large as
        // the largest announce (~2.3 KB for every idle torrent of a daemon).
        let answer = tokio::select! {
            r = Box::pin(announce(&mut ctx, event)) => r,
            _ = &mut stop => {
                // A `completed` cut short is said again.
                let cut = event == Some(AnnounceEvent::Completed);
                Box::pin(stopping(&mut ctx, completed_sent && !cut)).await;
                return;
            }
        };
        let wait = match answer {
            Ok(interval) => {
                failures = 0;
                event = None;
                interval
            }
            Err(e) => {
                failures += 1;
                tracing::warn!("tracker announce failed: {e}");
                (Duration::from_secs(15) * 2u32.pow(failures.min(5))).min(MAX_BACKOFF)
            }
        };
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                _ = ctx.again.notified() => break,
                _ = &mut stop => {
                    Box::pin(stopping(&mut ctx, completed_sent)).await;
                    return;
                }
                changed = ctx.standing.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let seed = ctx.standing.borrow().seed;
                    if seed && !completed_sent {
                        completed_sent = true;
                        event = Some(AnnounceEvent::Completed);
                        break;
                    }
                }
            }
        }
    }
}

/// The announces of a stop. A download that ends the run completes and
/// stops at once (the engine publishes the completion, then stops its
/// announcers): both wake the task, which may see the stop first. The
/// tracker hears `completed` before `stopped` either way, each bounded by
/// half the stop time.
async fn stopping(ctx: &mut Ctx, completed_sent: bool) {
    let half = STOP_TIMEOUT / 2;
    if ctx.standing.borrow().seed && !completed_sent {
        let _ = tokio::time::timeout(half, announce(ctx, Some(AnnounceEvent::Completed))).await;
    }
    let _ = tokio::time::timeout(half, announce(ctx, Some(AnnounceEvent::Stopped))).await;
}

/// Announces along the tiers (BEP 12): the first tracker that answers is
/// moved to the front of its tier. Returns the interval to wait.
async fn announce(ctx: &mut Ctx, event: Option<AnnounceEvent>) -> Result<Duration, String> {
    let mut req = ctx.base.clone();
    let s = *ctx.standing.borrow();
    req.uploaded = s.uploaded;
    req.downloaded = s.downloaded;
    req.left = s.left;
    req.event = event;
    if event == Some(AnnounceEvent::Stopped) {
        req.numwant = Some(0);
    }
    let mut last_err = String::from("no tracker");
    for t in 0..ctx.tiers.len() {
        for i in 0..ctx.tiers[t].len() {
            let url = ctx.tiers[t][i].clone();
            match crate::tracker::announce_with(&ctx.policy, &url, &req, &ctx.opts).await {
                Ok(resp) => {
                    let u = ctx.tiers[t].remove(i);
                    ctx.tiers[t].insert(0, u);
                    if let Some(w) = &resp.warning {
                        tracing::warn!("tracker {url}: {w}");
                    }
                    tracing::debug!("tracker {url}: {} peers", resp.peers.len());
                    if !resp.peers.is_empty() {
                        let _ = ctx
                            .tx
                            .send(Msg::TrackerPeers {
                                transfer: ctx.id,
                                peers: resp.peers,
                            })
                            .await;
                    }
                    let mut secs = resp.interval.max(resp.min_interval.unwrap_or(0));
                    // Starving (downloading with no peer): ask again as
                    // soon as the tracker allows, not after the full interval.
                    let s = *ctx.standing.borrow();
                    if !s.complete && s.peers == 0 {
                        secs = secs.min(resp.min_interval.unwrap_or(0).max(STARVING_REANNOUNCE));
                    }
                    return Ok(Duration::from_secs(u64::from(secs.clamp(15, 3600))));
                }
                Err(e) => last_err = format!("{url}: {e}"),
            }
        }
    }
    Err(last_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An announcer's task, held for as long as its torrent (asleep
    /// between announces nearly all of it), stays small: its announces
    /// are boxed, not inline in it. It was ~2.3 KB a torrent.
    #[test]
    fn an_announcer_task_stays_small() {
        let (tx, _rx) = mpsc::channel(1);
        let (_standing_tx, standing) = watch::channel(Standing::default());
        let ctx = Ctx {
            id: TransferId(1),
            policy: NetPolicy::loopback(),
            opts: crate::tracker::Options::default(),
            tiers: vec![vec!["http://127.0.0.1:1/announce".into()]],
            base: AnnounceRequest {
                info_hash: [1; 20],
                peer_id: [2; 20],
                port: 1,
                uploaded: 0,
                downloaded: 0,
                left: 0,
                event: None,
                numwant: None,
                key: None,
                compact: true,
            },
            tx,
            standing,
            again: Arc::default(),
        };
        let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let task = run(ctx, stop_rx);
        let size = std::mem::size_of_val(&task);
        assert!(size < 1_024, "an announcer's task is {size} bytes");
    }
}
