//! The upload side of a torrent: choking, request queues, storage reads and
//! sending blocks without copying them.
//!
//! Accounting: a peer's `upload_queued` is charged a read's whole length
//! when the read is issued and keeps it until the read is done, whatever
//! happens meanwhile (a choke, a cancel): only then is the part that will
//! not be sent released, and the rest as the writer reports it written. So
//! the watermark bounds the reads in flight for a peer, and a peer is
//! never left charged for reads that were dropped.
//!
//! Answers owed are bounded too: a peer may have at most our advertised
//! `reqq` requests queued, and may send at most that many requests we
//! cannot serve (choked, a piece we lack) between two unchokes; cancels
//! of blocks already being read are allowed up to a margin over what it
//! was sent. Past any of these it is disconnected as a violation.

use std::time::Instant;

use bytes::Bytes;
use weir_core::storage::StorageOp;

use super::{CHOKE_ROUND, ConnId, Event, OPTIMISTIC_ROUNDS, Torrent};
use crate::wire::{BlockRef, Message};

/// A storage read serving one peer's adjacent requests.
#[derive(Debug)]
pub(super) struct Read {
    pub(super) conn: ConnId,
    piece: u32,
    begin: u32,
    /// Bytes read (charged to the peer until the read is done).
    pub(super) len: u32,
    /// The blocks to send from it (fewer after a cancel, none after a
    /// choke).
    pub(super) blocks: Vec<BlockRef>,
}

/// Seconds of the rate a peer's connection takes bytes that its upload
/// window holds (see [`upload_window`]).
pub(crate) const UPLOAD_WINDOW_TIME: f64 = 0.5;

/// A peer's upload window: bytes of its uploads in flight (reads plus
/// unsent) before its next request waits. Sized from the rate its
/// connection took bytes over the last seconds (`SEEDS.md`: queues sized
/// from rate), between the configured minimum and the watermark: a fast
/// honest peer gets the watermark within its first second, a peer that
/// reads nothing has rate zero and holds the minimum.
pub(crate) fn upload_window(cfg: &super::TorrentConfig, taken_rate: f64) -> u64 {
    let by_rate = (taken_rate * UPLOAD_WINDOW_TIME) as u64;
    by_rate.clamp(
        cfg.min_upload_window.min(cfg.upload_watermark),
        cfg.upload_watermark,
    )
}

/// The rate a peer's connection takes bytes, as its window reads it: over
/// at least its first second (what the kernel's buffers swallow in the
/// first few milliseconds is no rate: a peer that reads nothing would
/// otherwise read as fast at first).
fn taken_rate(taken: &weir_core::meter::RateMeter, now: Instant) -> f64 {
    if now.saturating_duration_since(taken.origin()) < std::time::Duration::from_secs(1) {
        taken.total() as f64
    } else {
        taken.rate(now)
    }
}

/// Cancels of blocks already being read that a peer may send beyond the
/// blocks it was sent.
const CANCELLED_READS_MARGIN: u32 = 1024;

impl Torrent {
    pub(super) fn on_interested(&mut self, conn: ConnId, now: Instant) {
        let unchoked = self
            .peers
            .values()
            .filter(|p| !p.am_choking && !p.closing)
            .count();
        let p = self.peers.get_mut(&conn).expect("caller checked");
        if p.am_choking && unchoked < self.cfg.upload_slots {
            self.unchoke(conn, now);
        }
    }

    /// A peer that wants nothing frees its upload slot at once for the
    /// next interested peer, instead of at the next choke round.
    pub(super) fn on_not_interested(&mut self, conn: ConnId, now: Instant) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        if p.am_choking {
            return;
        }
        self.choke(conn, now);
        let waiting = self
            .peers
            .iter()
            .find(|(_, p)| p.peer_interested && p.am_choking && !p.closing)
            .map(|(c, _)| *c);
        if let Some(c) = waiting {
            self.on_interested(c, now);
        }
    }

    pub(super) fn unchoke(&mut self, conn: ConnId, now: Instant) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        if p.am_choking {
            p.am_choking = false;
            p.unanswerable = 0;
            p.unchoked_at = Some(now);
            p.send(&Message::Unchoke, now);
            self.mark_dirty(conn);
        }
    }

    pub(super) fn choke(&mut self, conn: ConnId, now: Instant) {
        let p = self.peers.get_mut(&conn).expect("caller checked");
        if p.am_choking {
            return;
        }
        p.am_choking = true;
        p.optimistic = false;
        p.send(&Message::Choke, now);
        let queued: Vec<BlockRef> = p.requests.drain(..).collect();
        if p.fast {
            for r in &queued {
                p.send(&Message::Reject(*r), now);
            }
        }
        // Reads already in flight send nothing; they stay charged until
        // they complete (`on_read_done` releases them).
        for r in self.reads.values_mut().filter(|r| r.conn == conn) {
            if p.fast {
                for b in &r.blocks {
                    p.send(&Message::Reject(*b), now);
                }
            }
            r.blocks.clear();
        }
        self.mark_dirty(conn);
    }

    pub(super) fn on_request(&mut self, conn: ConnId, r: BlockRef, now: Instant) {
        if !self.geo.contains(r.index, r.begin, r.length) {
            return self.fail(
                conn,
                format!(
                    "request {}:{}+{} outside the piece",
                    r.index, r.begin, r.length
                ),
            );
        }
        let have = self.content.had().get(r.index);
        let limit = self.cfg.max_peer_requests;
        let p = self.peers.get_mut(&conn).expect("caller checked");
        if p.requests.len() >= limit as usize {
            return self.fail(
                conn,
                format!("more than {limit} requests queued (our reqq)"),
            );
        }
        if p.am_choking || !have {
            // An answer we owe only with the fast extension (a reject);
            // either way a peer may send only so many we cannot serve.
            p.unanswerable += 1;
            if p.unanswerable > limit {
                let n = p.unanswerable;
                return self.fail(
                    conn,
                    format!("{n} requests we cannot serve (choked or not had)"),
                );
            }
            if p.fast {
                p.send(&Message::Reject(r), now);
                self.mark_dirty(conn);
            }
            return;
        }
        p.requests.push_back(r);
        self.serve(conn, now);
    }

    pub(super) fn on_cancel(&mut self, conn: ConnId, r: BlockRef) {
        let Some(p) = self.peers.get_mut(&conn) else {
            return;
        };
        if let Some(i) = p.requests.iter().position(|q| *q == r) {
            p.requests.remove(i);
            return;
        }
        for read in self.reads.values_mut().filter(|x| x.conn == conn) {
            if let Some(i) = read.blocks.iter().position(|q| *q == r) {
                // The read goes on and stays charged until it is done.
                read.blocks.remove(i);
                p.cancelled_reads += 1;
                if p.cancelled_reads > p.blocks_sent.saturating_add(CANCELLED_READS_MARGIN) {
                    let n = p.cancelled_reads;
                    self.fail(conn, format!("cancelled {n} blocks already being read"));
                }
                return;
            }
        }
    }

    /// Issues storage reads for the peer's queued requests while its
    /// uploads in flight stay under the watermark. Adjacent requests of one
    /// piece are read together.
    pub(super) fn serve(&mut self, conn: ConnId, now: Instant) {
        let Some(p) = self.peers.get_mut(&conn) else {
            return;
        };
        let window = upload_window(&self.cfg, taken_rate(&p.taken, now));
        while p.upload_queued < window && !p.am_choking && !p.closing {
            let Some(first) = p.requests.pop_front() else {
                break;
            };
            let mut blocks = vec![first];
            let mut len = first.length;
            while let Some(next) = p.requests.front() {
                if next.index != first.index
                    || next.begin != first.begin + len
                    || len + next.length > self.cfg.max_read
                    // A read ends at the window (a first block past it
                    // still goes): what is held stays within one block of
                    // it.
                    || p.upload_queued + u64::from(len + next.length) > window
                {
                    break;
                }
                len += next.length;
                blocks.push(*next);
                p.requests.pop_front();
            }
            let id = self.next_read;
            self.next_read += 1;
            p.upload_queued += u64::from(len);
            self.reads.insert(
                id,
                Read {
                    conn,
                    piece: first.index,
                    begin: first.begin,
                    len,
                    blocks,
                },
            );
            self.events.push_back(Event::Storage(StorageOp::Read {
                id,
                piece: first.index,
                begin: first.begin,
                len,
            }));
        }
    }

    pub(super) fn on_read_done(&mut self, id: u64, data: Result<Bytes, String>, now: Instant) {
        let Some(read) = self.reads.remove(&id) else {
            return;
        };
        let conn = read.conn;
        let Some(p) = self.peers.get_mut(&conn) else {
            return;
        };
        let data = match data {
            Ok(d) => d,
            Err(e) => return self.close(conn, format!("cannot read piece {}: {e}", read.piece)),
        };
        let mut unsent = u64::from(read.len);
        for b in &read.blocks {
            let at = (b.begin - read.begin) as usize;
            let Some(slice) = data.get(at..at + b.length as usize) else {
                continue;
            };
            unsent = unsent.saturating_sub(u64::from(b.length));
            // The one place every uploaded payload byte passes through.
            p.up.record(now, u64::from(b.length));
            self.stats.uploaded += u64::from(b.length);
            p.blocks_sent = p.blocks_sent.saturating_add(1);
            p.send_block(b.index, b.begin, data.slice_ref(slice), now);
        }
        // What this read will not send (choked, cancelled) is released
        // now; the rest as it is written.
        p.upload_queued = p.upload_queued.saturating_sub(unsent);
        self.mark_dirty(conn);
        if unsent > 0 {
            self.serve(conn, now);
        }
    }

    /// Tit-for-tat: unchoke the peers that give us the most (or, when we
    /// seed, take the most), plus one optimistic unchoke that rotates.
    pub(super) fn choke_round(&mut self, now: Instant) {
        self.choke_rounds += 1;
        let seeding = self.content.is_complete();
        let mut ranked: Vec<(ConnId, f64)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.peer_interested && !p.closing)
            .map(|(c, p)| {
                let rate = if seeding {
                    p.up.recent_rate(now)
                } else {
                    p.down.recent_rate(now)
                };
                (*c, rate)
            })
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let regular = self.cfg.upload_slots.saturating_sub(1).max(1);
        let keep: Vec<ConnId> = ranked.iter().take(regular).map(|(c, _)| *c).collect();
        let rotate = self.choke_rounds % OPTIMISTIC_ROUNDS == 0;
        let mut optimistic = self
            .peers
            .iter()
            .find(|(_, p)| p.optimistic && p.peer_interested && !p.closing)
            .map(|(c, _)| *c)
            .filter(|c| !keep.contains(c) && !rotate);
        if optimistic.is_none() {
            let rest: Vec<ConnId> = ranked
                .iter()
                .map(|(c, _)| *c)
                .filter(|c| !keep.contains(c))
                .collect();
            if !rest.is_empty() {
                optimistic = Some(rest[self.rng.usize(..rest.len())]);
            }
        }
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            let unchoke = keep.contains(&c) || optimistic == Some(c);
            if unchoke {
                self.unchoke(c, now);
                let p = self.peers.get_mut(&c).expect("listed");
                p.optimistic = optimistic == Some(c);
            } else {
                self.choke(c, now);
            }
        }
        let _ = CHOKE_ROUND;
    }
}
