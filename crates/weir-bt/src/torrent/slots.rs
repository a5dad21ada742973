//! Upload slots: who is unchoked, and taking a slot back from a peer that
//! does not use it.
//!
//! A slot is for taking data. A peer holding one is *stalled* when, for
//! [`SLOT_STALL`] since it was unchoked or since it last took upload
//! bytes ([`QUEUED_STALL`] when blocks wait in its connection), it took
//! none and no read of ours for it is in flight: it asked for nothing,
//! or its connection stopped taking what we queued. A
//! stalled holder that is interested is marked `wasted_slot` and, as soon as another
//! interested peer waits, choked in favour of that peer (one never
//! unchoked first). A wasted peer waits behind every other peer for a
//! slot, in the choke rounds too, and gives its connection away when the
//! peer slots are full (`Torrent::evict_idle`). Taking upload bytes again
//! clears the mark. So peers that connect, say they are interested and
//! take nothing cannot keep an honest peer choked, however many they are:
//! the honest peer waits at most [`SLOT_STALL`] plus a tick.
//!
//! The choke round ranks peers by the rate their connection took bytes
//! (seeding) or gave us blocks (downloading): what a peer was handed but
//! did not read is no rate.

use std::time::{Duration, Instant};

use super::{ConnId, OPTIMISTIC_ROUNDS, Torrent};

/// How long an upload slot may go unused (nothing taken, nothing being
/// read) before it is given to a peer that waits. An honest peer asks
/// within a round trip of its unchoke and then takes bytes continuously.
pub(crate) const SLOT_STALL: Duration = Duration::from_millis(500);

/// The same for a holder with blocks waiting in its connection: a
/// connection that takes bytes at all (a full congestion window included)
/// takes some every few milliseconds as acknowledgements come.
pub(crate) const QUEUED_STALL: Duration = Duration::from_millis(250);

impl Torrent {
    /// When `conn`, holding an upload slot, counts as stalled if it takes
    /// nothing meanwhile (`None`: it holds no slot, or a read for it is in
    /// flight).
    fn stall_deadline(&self, conn: ConnId) -> Option<Instant> {
        let p = self.peers.get(&conn)?;
        let unchoked_at = p.unchoked_at?;
        if p.am_choking || p.closing || self.reads.values().any(|r| r.conn == conn) {
            return None;
        }
        let limit = if p.upload_queued > 0 {
            QUEUED_STALL
        } else {
            SLOT_STALL
        };
        Some(unchoked_at.max(p.last_progress_at) + limit)
    }

    /// Whether `conn` holds an upload slot it does not use (see the module
    /// documentation).
    pub(super) fn slot_stalled(&self, conn: ConnId, now: Instant) -> bool {
        self.stall_deadline(conn).is_some_and(|d| d <= now)
    }

    /// Unchoked peers (a closing one's slot is free).
    pub(super) fn unchoked_count(&self) -> usize {
        self.peers
            .values()
            .filter(|p| !p.am_choking && !p.closing)
            .count()
    }

    /// The interested, choked peer to unchoke next: one never unchoked
    /// first, then one that did not waste a slot, each in connection
    /// order; a waster only when nobody else waits.
    pub(super) fn next_waiting(&self) -> Option<ConnId> {
        self.peers
            .iter()
            .filter(|(_, p)| p.peer_interested && p.am_choking && !p.closing)
            .min_by_key(|(c, p)| (p.wasted_slot, p.unchoked_at.is_some(), **c))
            .map(|(c, _)| *c)
    }

    /// Marks stalled slot holders as wasters and gives their slots to the
    /// peers that wait (a waster's slot goes only to a peer that is not
    /// one). Called every tick and when a peer becomes interested.
    pub(super) fn reclaim_slots(&mut self, now: Instant) {
        let stalled: Vec<ConnId> = self
            .peers
            .keys()
            .copied()
            .filter(|c| self.slot_stalled(*c, now))
            .collect();
        for c in stalled {
            // One that wants nothing (unchoked before it said so) only
            // gives its slot back; one that asked and took nothing wasted it.
            if let Some(p) = self.peers.get_mut(&c) {
                p.wasted_slot |= p.peer_interested;
            }
            let Some(next) = self.next_waiting() else {
                continue;
            };
            if self.peers.get(&next).is_some_and(|p| p.wasted_slot) {
                continue;
            }
            self.choke(c, now);
            self.unchoke(next, now);
            self.stats.slots_reclaimed += 1;
        }
        // Someone still waits: look again the moment a holder would
        // stall, not at the next tick.
        let waits = self
            .next_waiting()
            .is_some_and(|c| self.peers.get(&c).is_some_and(|p| !p.wasted_slot));
        self.next_reclaim = if waits {
            self.peers
                .keys()
                .filter_map(|c| self.stall_deadline(*c))
                .filter(|d| *d > now)
                .min()
        } else {
            None
        };
    }

    /// Tit-for-tat: unchoke the peers that give us the most (or, when we
    /// seed, take the most), plus one optimistic unchoke that rotates.
    /// Peers that wasted a slot come last.
    pub(super) fn choke_round(&mut self, now: Instant) {
        self.choke_rounds += 1;
        let seeding = self.content.is_complete();
        let mut ranked: Vec<(ConnId, bool, f64)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.peer_interested && !p.closing)
            .map(|(c, p)| {
                let rate = if seeding {
                    p.taken.rate(now)
                } else {
                    p.down.recent_rate(now)
                };
                (*c, p.wasted_slot, rate)
            })
            .collect();
        ranked.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.total_cmp(&a.2)).then(a.0.cmp(&b.0)));
        let regular = self.cfg.upload_slots.saturating_sub(1).max(1);
        // A regular slot for a peer that takes (or gives) something; one
        // that took nothing keeps no slot by rank alone.
        let keep: Vec<ConnId> = ranked
            .iter()
            .filter(|(_, wasted, rate)| !wasted && *rate > 0.0)
            .take(regular)
            .map(|(c, _, _)| *c)
            .collect();
        let rotate = self.choke_rounds % OPTIMISTIC_ROUNDS == 0;
        let current = self
            .peers
            .iter()
            .find(|(_, p)| p.optimistic && p.peer_interested && !p.closing && !p.wasted_slot)
            .map(|(c, _)| *c)
            .filter(|c| !keep.contains(c) && !rotate);
        let mut unchoke = keep.clone();
        unchoke.extend(current);
        // The other slots (the optimistic one, and regular ones nobody
        // earned): peers never unchoked first, then the others at random,
        // wasters only when nobody else waits.
        let slots = self.cfg.upload_slots.max(1);
        let mut fresh: Vec<ConnId> = Vec::new();
        let mut tried: Vec<ConnId> = Vec::new();
        let mut wasters: Vec<ConnId> = Vec::new();
        for (c, wasted, _) in &ranked {
            if unchoke.contains(c) {
                continue;
            }
            let never = self.peers.get(c).is_some_and(|p| p.unchoked_at.is_none());
            match (wasted, never) {
                (true, _) => wasters.push(*c),
                (false, true) => fresh.push(*c),
                (false, false) => tried.push(*c),
            }
        }
        self.rng.shuffle(&mut tried);
        self.rng.shuffle(&mut wasters);
        let mut optimistic = current;
        for c in fresh.into_iter().chain(tried).chain(wasters) {
            if unchoke.len() >= slots {
                break;
            }
            optimistic.get_or_insert(c);
            unchoke.push(c);
        }
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            if unchoke.contains(&c) {
                self.unchoke(c, now);
                let p = self.peers.get_mut(&c).expect("listed");
                p.optimistic = optimistic == Some(c);
            } else {
                self.choke(c, now);
            }
        }
    }
}
