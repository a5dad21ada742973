//! The progress snapshot the driver publishes.

use std::sync::Arc;
use std::time::Instant;

use weir_session::TransferInfo;

use crate::engine::trackers::Standing;

use super::Driver;
use super::stores::Store;

/// What the progress display reads, a few times a second.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every transfer, in id order (shared: a snapshot of thousands of
    /// idle transfers is handed out again, not copied).
    pub transfers: Arc<Vec<TransferInfo>>,
    /// Connections by stage.
    pub peers: usize,
    /// Dials in progress.
    pub dialing: usize,
    /// The engine has stopped.
    pub done: bool,
    /// MSE/PE handshakes by outcome.
    pub mse: crate::mse::MseStats,
    /// The MSE/PE policy now.
    pub encryption: weir_bt::mse::Encryption,
    /// Established connections carried by uTP (the rest: TCP).
    pub utp_peers: usize,
    /// The uTP endpoint's figures (`None`: no uTP).
    pub utp: Option<crate::utp::UtpStats>,
    /// Local Service Discovery's figures (`None`: LSD is off).
    pub lsd: Option<crate::engine::LsdStatus>,
}

/// Transfers up to which every event publishes at once.
const SMALL_SESSION: usize = 64;
/// Least time between two snapshots published for events in a larger
/// session, and its share per transfer: a snapshot copies an entry per
/// transfer, so the gap grows with them (at most [`MAX_PUBLISH_GAP`]) and
/// their cost stays a small, fixed share of a core however many there
/// are. At 50 ms whatever the size, a daemon given 20,000 torrents one
/// after another (each checked, each publishing) spent a fifth of its
/// CPU copying snapshots.
const PUBLISH_GAP: std::time::Duration = std::time::Duration::from_millis(50);
const PUBLISH_GAP_PER_TRANSFER: std::time::Duration = std::time::Duration::from_micros(10);
const MAX_PUBLISH_GAP: std::time::Duration = std::time::Duration::from_millis(500);

/// The least time between two snapshots published for events in a
/// session of `n` transfers.
fn publish_gap(n: usize) -> std::time::Duration {
    (PUBLISH_GAP_PER_TRANSFER * u32::try_from(n).unwrap_or(u32::MAX))
        .clamp(PUBLISH_GAP, MAX_PUBLISH_GAP)
}

impl Driver {
    /// Every transfer now, with what only the storage knows (the
    /// session's [`weir_session::Session::snapshot`]: idle transfers cost
    /// nothing). Each transfer is asked whether it waits for disk space
    /// only while one of the process's does.
    pub(super) fn infos(&mut self, now: Instant) -> Arc<Vec<TransferInfo>> {
        let mut infos = self.session.snapshot(now);
        if crate::storage::transfers_waiting_for_space() > 0 {
            let stores = &self.stores;
            let full = |t: &TransferInfo| match stores.get(&t.id) {
                Some(Store::Running(d)) => d.disk_full(),
                _ => None,
            };
            if infos.iter().any(|t| full(t).is_some()) {
                for t in Arc::make_mut(&mut infos) {
                    t.disk_full = full(t);
                }
            }
        }
        infos
    }

    /// Publishes after a transfer's event (checked, complete) at once in
    /// a small session; in a large one at most every [`publish_gap`], the
    /// report tick publishing what waits. A snapshot costs a walk over
    /// every transfer, so one per event was quadratic: a daemon restarting
    /// with 5,500 transfers spent half its time building snapshots
    /// (`Session::info` and its copies, perf), and 3,300 took 7.5x as long
    /// to start as 1,100.
    pub(super) fn publish_soon(&mut self, now: Instant) {
        let gap = publish_gap(self.stores.len());
        let due = self
            .last_publish
            .is_none_or(|t| now.saturating_duration_since(t) >= gap);
        if self.stores.len() <= SMALL_SESSION || due {
            self.publish(false);
        }
    }

    pub(super) fn publish(&mut self, done: bool) {
        let now = Instant::now();
        self.last_publish = Some(now);
        let transfers = self.infos(now);
        if self.announces.len() > 0 {
            for t in transfers.iter() {
                let standing = Standing {
                    uploaded: t.uploaded.0,
                    downloaded: t.downloaded.0,
                    left: t.wanted - t.bytes_had.min(t.wanted),
                    complete: t.complete_at.is_some(),
                    seed: t.complete_at.is_some() && t.wanted == t.size,
                    peers: t.peers,
                };
                self.announces.set_standing(t.id, standing, now);
            }
        }
        let c = self.session.counts();
        let _ = self.progress.send(Snapshot {
            transfers,
            peers: c.peers,
            dialing: c.dialing,
            done,
            mse: self.mse.stats(),
            encryption: self.mse.policy,
            utp_peers: self.over_utp.len(),
            utp: self.transports.utp.as_ref().map(crate::utp::Utp::stats),
            lsd: self.lsd.as_ref().map(crate::engine::lsd::LsdGlue::status),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_publish_gap_grows_with_the_session_within_bounds() {
        assert_eq!(publish_gap(65), PUBLISH_GAP);
        assert_eq!(publish_gap(5_000), PUBLISH_GAP);
        assert_eq!(publish_gap(20_000), Duration::from_millis(200));
        assert_eq!(publish_gap(1_000_000), MAX_PUBLISH_GAP);
        assert_eq!(publish_gap(usize::MAX), MAX_PUBLISH_GAP);
    }
}
