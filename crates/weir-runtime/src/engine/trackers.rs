//! Announcing torrents to their trackers (BEP 3, BEP 12 tiers, BEP 15 UDP):
//! `started` when a torrent starts, again every interval the tracker asks
//! for, `completed` when the download completes, `stopped` when it stops.
//! Peers the trackers return go to the driver.
//!
//! Every torrent of the engine is announced from one schedule
//! ([`Announces`], decided without I/O: the driver gives it the time and
//! carries out what it returns). Each announce runs as its own short task
//! ([`run_job`]) and reports back ([`Outcome`]); between announces a
//! torrent holds only its [`Slot`] (a ~100-byte entry), not a task, a timer
//! and channels of its own (until 2026-12 each held ~1 KB of them, a daemon
//! of 10,000 tracked torrents ~10 MB). Announces start at most
//! [`STARTS_PER_SEC`] a second: a daemon restarting with 10,000 torrents
//! spreads their first announces over minutes instead of opening thousands
//! of connections to one tracker at once (Transmission starts at most 20
//! every half second).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
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
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// `stopped` announces under way at once at most at shutdown ([`stop_all`]).
pub(crate) const STOPS_AT_ONCE: usize = 50;
/// Announces started per second at most, and the burst allowed at once.
pub(crate) const STARTS_PER_SEC: u32 = 50;

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

/// Who announces: the session's identity and where it listens.
#[derive(Clone, Debug)]
pub(crate) struct Announcing {
    pub(crate) policy: NetPolicy,
    pub(crate) peer_id: [u8; 20],
    pub(crate) port: u16,
    pub(crate) local_ip: Option<IpAddr>,
}

/// What every announce task shares: how to reach trackers and where to
/// report.
#[derive(Debug)]
pub(crate) struct JobCtx {
    pub(crate) policy: NetPolicy,
    pub(crate) opts: crate::tracker::Options,
    pub(crate) tx: mpsc::Sender<Msg>,
}

impl JobCtx {
    pub(crate) fn new(me: &Announcing, tx: mpsc::Sender<Msg>) -> Self {
        JobCtx {
            policy: me.policy.clone(),
            opts: crate::tracker::Options {
                local_ip: me.local_ip.filter(|ip| !ip.is_unspecified()),
                ..Default::default()
            },
            tx,
        }
    }
}

/// One announce to make ([`run_job`]).
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) transfer: TransferId,
    tiers: Vec<Vec<Arc<str>>>,
    req: AnnounceRequest,
    /// Downloading with no peer: ask again as soon as the tracker allows.
    starving: bool,
}

/// What an announce came to, reported to the driver ([`Msg::Announced`]).
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) transfer: TransferId,
    event: Option<AnnounceEvent>,
    /// The wait the tracker asked for, or why every tracker failed.
    result: Result<Duration, String>,
    /// The tracker that answered, `(tier, index)` in the job's tiers.
    answered: Option<(usize, usize)>,
}

/// The announces of a torrent that stops ([`stop`]).
#[derive(Debug)]
pub(crate) struct Stop {
    tiers: Vec<Vec<Arc<str>>>,
    req: AnnounceRequest,
    /// `completed` first: the download completed and no tracker heard it.
    completed: bool,
}

/// A torrent's place in the schedule.
#[derive(Debug)]
struct Slot {
    meta: Arc<Metainfo>,
    /// The tiers once a tracker other than the first of its tier answered
    /// (BEP 12 moves it to the front); `None`: the metainfo's order.
    tiers: Option<Box<[Vec<Arc<str>>]>>,
    standing: Standing,
    /// The event the next announce carries.
    event: Option<AnnounceEvent>,
    /// A tracker heard `completed`.
    completed_told: bool,
    failures: u8,
    /// When the next announce is due (it is in the queue then).
    due: Option<Instant>,
    /// An announce is out.
    running: bool,
    /// An announce was sent (a tracker may know the torrent).
    tried: bool,
}

impl Slot {
    fn tiers(&self) -> Vec<Vec<Arc<str>>> {
        match &self.tiers {
            Some(t) => t.to_vec(),
            None => self.meta.tracker_tiers(),
        }
    }

    fn request(&self, me: &Announcing, event: Option<AnnounceEvent>) -> AnnounceRequest {
        let s = self.standing;
        AnnounceRequest {
            info_hash: self.meta.info_hash,
            peer_id: me.peer_id,
            port: me.port,
            uploaded: s.uploaded,
            downloaded: s.downloaded,
            left: s.left,
            event,
            numwant: Some(if event == Some(AnnounceEvent::Stopped) {
                0
            } else {
                50
            }),
            key: Some(u32::from_le_bytes([
                me.peer_id[12],
                me.peer_id[13],
                me.peer_id[14],
                me.peer_id[15],
            ])),
            compact: true,
        }
    }
}

/// Every torrent's announces: when each is due, what it says, retries and
/// the start rate (see the module docs). Sans-IO: the caller passes the
/// time, starts the [`Job`]s [`Announces::take_due`] returns and hands back
/// their [`Outcome`]s.
#[derive(Debug)]
pub(crate) struct Announces {
    me: Announcing,
    slots: HashMap<TransferId, Slot>,
    queue: BTreeSet<(Instant, TransferId)>,
    /// Announces that may start now (refilled at [`STARTS_PER_SEC`]).
    tokens: f64,
    refilled: Option<Instant>,
}

impl Announces {
    pub(crate) fn new(me: Announcing) -> Self {
        Announces {
            me,
            slots: HashMap::new(),
            queue: BTreeSet::new(),
            tokens: f64::from(STARTS_PER_SEC),
            refilled: None,
        }
    }

    /// Whether `id` is announced.
    pub(crate) fn contains(&self, id: TransferId) -> bool {
        self.slots.contains_key(&id)
    }

    /// How many torrents are announced.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Starts announcing `id` (`started` at once, rate permitting); false
    /// when its metainfo lists no tracker.
    pub(crate) fn add(
        &mut self,
        id: TransferId,
        meta: Arc<Metainfo>,
        standing: Standing,
        now: Instant,
    ) -> bool {
        if meta.tracker_tiers().iter().all(Vec::is_empty) || self.slots.contains_key(&id) {
            return false;
        }
        self.slots.insert(
            id,
            Slot {
                meta,
                tiers: None,
                standing,
                event: Some(AnnounceEvent::Started),
                // A torrent that starts complete says `started`, not `completed`.
                completed_told: standing.seed,
                failures: 0,
                due: None,
                running: false,
                tried: false,
            },
        );
        self.schedule(id, now);
        true
    }

    fn schedule(&mut self, id: TransferId, at: Instant) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if slot.running {
            return;
        }
        if let Some(old) = slot.due.replace(at) {
            self.queue.remove(&(old, id));
        }
        self.queue.insert((at, id));
    }

    /// What the driver last knew of `id`: a download that just completed
    /// announces `completed` now (or as soon as the announce out ends).
    pub(crate) fn set_standing(&mut self, id: TransferId, standing: Standing, now: Instant) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        slot.standing = standing;
        if standing.seed && !slot.completed_told && slot.event != Some(AnnounceEvent::Completed) {
            slot.event = Some(AnnounceEvent::Completed);
            self.schedule(id, now);
        }
    }

    /// Announces `id` now instead of at its next interval (a manual
    /// re-announce; the tracker's own minimum interval is the user's
    /// business, as in Transmission).
    pub(crate) fn reannounce(&mut self, id: TransferId, now: Instant) {
        self.schedule(id, now);
    }

    fn refill(&mut self, now: Instant) {
        let cap = f64::from(STARTS_PER_SEC);
        if let Some(last) = self.refilled {
            let secs = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + secs * cap).min(cap);
        }
        self.refilled = Some(now);
    }

    /// When [`Announces::take_due`] next has something to start.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let &(first, _) = self.queue.first()?;
        if self.tokens >= 1.0 {
            return Some(first);
        }
        let per = Duration::from_secs(1) / STARTS_PER_SEC;
        let refill = self.refilled.map_or(first, |r| r + per);
        Some(first.max(refill))
    }

    /// The announces due by `now`, as many as the start rate allows.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Job> {
        self.refill(now);
        let mut jobs = Vec::new();
        while self.tokens >= 1.0 {
            let Some(&(at, id)) = self.queue.first() else {
                break;
            };
            if at > now {
                break;
            }
            self.queue.pop_first();
            let Some(slot) = self.slots.get_mut(&id) else {
                continue;
            };
            slot.due = None;
            slot.running = true;
            slot.tried = true;
            self.tokens -= 1.0;
            jobs.push(Job {
                transfer: id,
                tiers: slot.tiers(),
                req: slot.request(&self.me, slot.event),
                starving: !slot.standing.complete && slot.standing.peers == 0,
            });
        }
        jobs
    }

    /// An announce ended: the next is scheduled (the tracker's interval,
    /// or a backoff after a failure; at once when `completed` became due
    /// while it was out).
    pub(crate) fn finish(&mut self, out: Outcome, now: Instant) {
        let id = out.transfer;
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        slot.running = false;
        let next = match out.result {
            Ok(wait) => {
                slot.failures = 0;
                if out.event == Some(AnnounceEvent::Completed) {
                    slot.completed_told = true;
                }
                if let Some((t, i)) = out.answered.filter(|&(_, i)| i > 0) {
                    let mut tiers = slot
                        .tiers
                        .take()
                        .map_or_else(|| slot.meta.tracker_tiers(), Vec::from);
                    if let Some(tier) = tiers.get_mut(t)
                        && i < tier.len()
                    {
                        let u = tier.remove(i);
                        tier.insert(0, u);
                    }
                    slot.tiers = Some(tiers.into_boxed_slice());
                }
                if slot.event == out.event {
                    slot.event = None;
                    now + wait
                } else {
                    // `completed` became due while this announce was out.
                    now
                }
            }
            Err(e) => {
                tracing::warn!("tracker announce failed: {e}");
                slot.failures = slot.failures.saturating_add(1);
                now + backoff(slot.failures)
            }
        };
        self.schedule(id, next);
    }

    /// Stops announcing `id`: the announces its stop makes (`completed`
    /// when no tracker heard it yet, then `stopped`), for [`stop`]; none
    /// when it was never announced (still waiting for its first start:
    /// no tracker knows it).
    pub(crate) fn remove(&mut self, id: TransferId) -> Option<Stop> {
        let slot = self.slots.remove(&id)?;
        if let Some(at) = slot.due {
            self.queue.remove(&(at, id));
        }
        if !slot.tried {
            return None;
        }
        Some(Stop {
            tiers: slot.tiers(),
            req: slot.request(&self.me, Some(AnnounceEvent::Stopped)),
            completed: slot.standing.seed && !slot.completed_told,
        })
    }

    /// Stops every torrent (the engine stops).
    pub(crate) fn remove_all(&mut self) -> Vec<(TransferId, Stop)> {
        let ids: Vec<TransferId> = self.slots.keys().copied().collect();
        ids.into_iter()
            .filter_map(|id| self.remove(id).map(|s| (id, s)))
            .collect()
    }
}

/// The wait after `failures` failed announces in a row: 30 s doubling, at
/// most [`MAX_BACKOFF`].
fn backoff(failures: u8) -> Duration {
    (Duration::from_secs(15) * 2u32.pow(u32::from(failures.min(5)))).min(MAX_BACKOFF)
}

/// Carries out one announce and reports it to the driver.
pub(crate) async fn run_job(job: Job, ctx: Arc<JobCtx>) {
    let event = job.req.event;
    let (result, answered) =
        announce(&ctx, &job.tiers, &job.req, Some(job.transfer), job.starving).await;
    let _ = ctx
        .tx
        .send(Msg::Announced(Box::new(Outcome {
            transfer: job.transfer,
            event,
            result,
            answered,
        })))
        .await;
}

/// The announces of a stop, each bounded by half of [`STOP_TIMEOUT`]: the
/// tracker hears `completed` before `stopped`.
pub(crate) async fn stop(s: Stop, ctx: Arc<JobCtx>) {
    let half = STOP_TIMEOUT / 2;
    if s.completed {
        let mut req = s.req.clone();
        req.event = Some(AnnounceEvent::Completed);
        req.numwant = Some(50);
        let _ = tokio::time::timeout(half, announce(&ctx, &s.tiers, &req, None, false)).await;
    }
    let _ = tokio::time::timeout(half, announce(&ctx, &s.tiers, &s.req, None, false)).await;
}

/// Every torrent's stop at shutdown: at most [`STOPS_AT_ONCE`] under way
/// at a time, all within [`STOP_TIMEOUT`]; the ones not yet sent by then
/// are given up (a tracker forgets a peer that stops announcing). All at
/// once, a daemon of 10,000 torrents opened 10,000 connections to its
/// trackers in the same instant.
pub(crate) async fn stop_all(stops: Vec<Stop>, ctx: Arc<JobCtx>) {
    let mut left = stops.into_iter();
    let mut set = tokio::task::JoinSet::new();
    let run = async {
        for s in left.by_ref().take(STOPS_AT_ONCE) {
            set.spawn(stop(s, ctx.clone()));
        }
        while set.join_next().await.is_some() {
            if let Some(s) = left.next() {
                set.spawn(stop(s, ctx.clone()));
            }
        }
    };
    // Dropping the set aborts what is still under way.
    let _ = tokio::time::timeout(STOP_TIMEOUT, run).await;
}

/// Announces along the tiers (BEP 12: each tier's trackers in turn, the
/// next tier when none of one answers; the caller moves the one that
/// answered to the front of its tier). The peers go to `peers_to`'s
/// transfer. Returns the interval to wait and which tracker answered.
async fn announce(
    ctx: &JobCtx,
    tiers: &[Vec<Arc<str>>],
    req: &AnnounceRequest,
    peers_to: Option<TransferId>,
    starving: bool,
) -> (Result<Duration, String>, Option<(usize, usize)>) {
    let mut last_err = String::from("no tracker");
    for (t, tier) in tiers.iter().enumerate() {
        for (i, url) in tier.iter().enumerate() {
            match crate::tracker::announce_with(&ctx.policy, url, req, &ctx.opts).await {
                Ok(resp) => {
                    if let Some(w) = &resp.warning {
                        tracing::warn!("tracker {url}: {w}");
                    }
                    tracing::debug!("tracker {url}: {} peers", resp.peers.len());
                    if let Some(transfer) = peers_to
                        && !resp.peers.is_empty()
                    {
                        let _ = ctx
                            .tx
                            .send(Msg::TrackerPeers {
                                transfer,
                                peers: resp.peers,
                            })
                            .await;
                    }
                    let mut secs = resp.interval.max(resp.min_interval.unwrap_or(0));
                    if starving {
                        secs = secs.min(resp.min_interval.unwrap_or(0).max(STARVING_REANNOUNCE));
                    }
                    return (
                        Ok(Duration::from_secs(u64::from(secs.clamp(15, 3600)))),
                        Some((t, i)),
                    );
                }
                Err(e) => last_err = format!("{url}: {e}"),
            }
        }
    }
    (Err(last_err), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(tiers: &[&[&str]]) -> Arc<Metainfo> {
        let mut t = b"d".to_vec();
        if !tiers.is_empty() {
            t.extend_from_slice(b"13:announce-listl");
            for tier in tiers {
                t.push(b'l');
                for u in *tier {
                    t.extend_from_slice(format!("{}:{u}", u.len()).as_bytes());
                }
                t.push(b'e');
            }
            t.push(b'e');
        }
        t.extend_from_slice(b"4:infod6:lengthi5e4:name1:a12:piece lengthi16384e6:pieces20:");
        t.extend_from_slice(&[7; 20]);
        t.extend_from_slice(b"ee");
        Arc::new(Metainfo::from_bytes(&t).expect("a valid torrent"))
    }

    fn schedule() -> Announces {
        Announces::new(Announcing {
            policy: NetPolicy::loopback(),
            peer_id: [2; 20],
            port: 6881,
            local_ip: None,
        })
    }

    const T: &[&[&str]] = &[&["http://127.0.0.1:1/a"]];

    fn answered(job: &Job, wait: u64) -> Outcome {
        Outcome {
            transfer: job.transfer,
            event: job.req.event,
            result: Ok(Duration::from_secs(wait)),
            answered: Some((0, 0)),
        }
    }

    fn failed(job: &Job) -> Outcome {
        Outcome {
            transfer: job.transfer,
            event: job.req.event,
            result: Err("refused".into()),
            answered: None,
        }
    }

    fn one(a: &mut Announces, now: Instant) -> Job {
        let mut jobs = a.take_due(now);
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        jobs.pop().expect("one")
    }

    #[test]
    fn a_torrent_says_started_then_announces_at_its_trackers_interval() {
        let mut a = schedule();
        let t0 = Instant::now();
        let id = TransferId(1);
        assert!(a.add(id, meta(T), Standing::default(), t0));
        assert!(!a.add(id, meta(T), Standing::default(), t0), "added twice");
        assert_eq!(a.poll_timeout(), Some(t0));
        let job = one(&mut a, t0);
        assert_eq!(job.req.event, Some(AnnounceEvent::Started));
        assert_eq!(job.req.info_hash, meta(T).info_hash);
        assert_eq!(job.req.port, 6881);
        // Out: nothing else is due for it.
        assert_eq!(a.poll_timeout(), None);
        a.finish(answered(&job, 1800), t0);
        let next = t0 + Duration::from_secs(1800);
        assert_eq!(a.poll_timeout(), Some(next));
        assert!(a.take_due(next - Duration::from_millis(1)).is_empty());
        let job = one(&mut a, next);
        assert_eq!(job.req.event, None, "started is said once");
    }

    #[test]
    fn a_torrent_without_trackers_is_not_announced() {
        let mut a = schedule();
        assert!(!a.add(
            TransferId(1),
            meta(&[]),
            Standing::default(),
            Instant::now()
        ));
        assert_eq!(a.len(), 0);
        assert_eq!(a.poll_timeout(), None);
    }

    #[test]
    fn failures_back_off_doubling_to_five_minutes_and_keep_the_event() {
        let mut a = schedule();
        let mut now = Instant::now();
        a.add(TransferId(1), meta(T), Standing::default(), now);
        let mut waits = Vec::new();
        for _ in 0..7 {
            let job = one(&mut a, now);
            assert_eq!(
                job.req.event,
                Some(AnnounceEvent::Started),
                "kept until heard"
            );
            a.finish(failed(&job), now);
            let next = a.poll_timeout().expect("retried");
            waits.push((next - now).as_secs());
            now = next;
        }
        assert_eq!(waits, [30, 60, 120, 240, 300, 300, 300]);
        let job = one(&mut a, now);
        a.finish(answered(&job, 900), now);
        assert_eq!(a.poll_timeout(), Some(now + Duration::from_secs(900)));
    }

    #[test]
    fn a_completed_download_says_so_at_once_and_once() {
        let mut a = schedule();
        let t0 = Instant::now();
        let id = TransferId(3);
        let leeching = Standing {
            left: 5,
            ..Standing::default()
        };
        let seeding = Standing {
            left: 0,
            complete: true,
            seed: true,
            peers: 1,
            ..Standing::default()
        };
        a.add(id, meta(T), leeching, t0);
        let started = one(&mut a, t0);
        assert!(started.starving, "downloading with no peer");
        // Completed while `started` is out: said as soon as it ends.
        a.set_standing(id, seeding, t0);
        assert!(a.take_due(t0).is_empty());
        a.finish(answered(&started, 1800), t0);
        assert_eq!(a.poll_timeout(), Some(t0));
        let completed = one(&mut a, t0);
        assert_eq!(completed.req.event, Some(AnnounceEvent::Completed));
        assert_eq!(completed.req.left, 0);
        assert!(!completed.starving);
        a.finish(answered(&completed, 1800), t0);
        a.set_standing(id, seeding, t0);
        assert_eq!(
            a.poll_timeout(),
            Some(t0 + Duration::from_secs(1800)),
            "completed is said once"
        );
        let stop = a.remove(id).expect("announced");
        assert!(!stop.completed, "a tracker heard it");
        assert_eq!(stop.req.event, Some(AnnounceEvent::Stopped));
        assert_eq!(stop.req.numwant, Some(0));
    }

    #[test]
    fn a_stop_says_completed_first_when_no_tracker_heard_it() {
        let mut a = schedule();
        let t0 = Instant::now();
        let seeding = Standing {
            complete: true,
            seed: true,
            ..Standing::default()
        };
        // Completed, never heard (its trackers refused).
        a.add(TransferId(1), meta(T), Standing::default(), t0);
        let job = one(&mut a, t0);
        a.finish(failed(&job), t0);
        a.set_standing(TransferId(1), seeding, t0);
        assert!(a.remove(TransferId(1)).expect("announced").completed);
        // Started complete: a seed never says completed.
        a.add(TransferId(2), meta(T), seeding, t0);
        assert_eq!(one(&mut a, t0).req.event, Some(AnnounceEvent::Started));
        assert!(!a.remove(TransferId(2)).expect("announced").completed);
        assert!(a.remove(TransferId(2)).is_none());
    }

    #[test]
    fn starts_are_held_to_the_rate_however_many_torrents_start() {
        let mut a = schedule();
        let t0 = Instant::now();
        let n = 4 * STARTS_PER_SEC;
        for i in 0..n {
            a.add(TransferId(i), meta(T), Standing::default(), t0);
        }
        assert_eq!(a.take_due(t0).len(), STARTS_PER_SEC as usize, "a burst");
        assert!(a.take_due(t0).is_empty());
        let next = a.poll_timeout().expect("more to start");
        assert!(
            next > t0 && next <= t0 + Duration::from_millis(20),
            "{:?}",
            next - t0
        );
        let mut started = STARTS_PER_SEC;
        let mut now = t0;
        while started < n {
            now += Duration::from_millis(100);
            let k = a.take_due(now).len() as u32;
            assert!(k <= STARTS_PER_SEC / 10 + 1, "{k} in 100 ms");
            started += k;
        }
        let took = now - t0;
        assert!(
            took >= Duration::from_millis(2900) && took <= Duration::from_millis(3100),
            "{n} started in {took:?}"
        );
    }

    #[test]
    fn the_tracker_that_answers_moves_to_the_front_of_its_tier() {
        let mut a = schedule();
        let t0 = Instant::now();
        let id = TransferId(1);
        let tiers: &[&[&str]] = &[
            &["http://127.0.0.1:1/a", "http://127.0.0.1:2/b"],
            &["http://127.0.0.1:3/c"],
        ];
        a.add(id, meta(tiers), Standing::default(), t0);
        let job = one(&mut a, t0);
        assert_eq!(&*job.tiers[0][0], "http://127.0.0.1:1/a");
        a.finish(
            Outcome {
                answered: Some((0, 1)),
                ..answered(&job, 60)
            },
            t0,
        );
        let job = one(&mut a, t0 + Duration::from_secs(60));
        let names: Vec<Vec<&str>> = job
            .tiers
            .iter()
            .map(|t| t.iter().map(|u| &**u).collect())
            .collect();
        assert_eq!(
            names,
            [
                vec!["http://127.0.0.1:2/b", "http://127.0.0.1:1/a"],
                vec!["http://127.0.0.1:3/c"]
            ]
        );
    }

    #[test]
    fn a_torrent_never_announced_stops_without_a_word() {
        let mut a = schedule();
        let t0 = Instant::now();
        for i in 0..=STARTS_PER_SEC {
            a.add(TransferId(i), meta(T), Standing::default(), t0);
        }
        let started = a.take_due(t0);
        let waiting = (0..=STARTS_PER_SEC)
            .map(TransferId)
            .find(|id| started.iter().all(|j| j.transfer != *id))
            .expect("one left for later");
        assert!(a.remove(waiting).is_none(), "no tracker knows it");
        assert!(
            a.remove(started[0].transfer).is_some(),
            "its started is out"
        );
        assert_eq!(a.len(), STARTS_PER_SEC as usize - 1);
    }

    #[test]
    fn an_announce_ending_after_its_torrent_left_is_ignored() {
        let mut a = schedule();
        let t0 = Instant::now();
        a.add(TransferId(1), meta(T), Standing::default(), t0);
        let job = one(&mut a, t0);
        a.reannounce(TransferId(1), t0);
        assert!(a.take_due(t0).is_empty(), "one announce out at a time");
        assert!(a.remove(TransferId(1)).is_some());
        a.finish(answered(&job, 60), t0);
        assert_eq!(a.len(), 0);
        assert_eq!(a.poll_timeout(), None);
    }

    /// A torrent between announces holds one small entry, not a task.
    #[test]
    fn a_torrent_between_announces_holds_a_small_entry() {
        let size = std::mem::size_of::<Slot>();
        assert!(size <= 96, "a slot is {size} bytes");
    }
}
