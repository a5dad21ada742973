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

use super::{CloseReason, ConnId, Event, Torrent};
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

/// Requests a peer we never unchoked may send before it is dropped as a
/// violation (a few, for a client that asks early; we send no AllowedFast).
pub(crate) const PREMATURE_REQUESTS: u32 = 32;

/// Cancels of blocks already being read that a peer may send beyond the
/// blocks it was sent.
const CANCELLED_READS_MARGIN: u32 = 1024;

impl Torrent {
    /// An interested peer gets a free upload slot at once, or the slot of
    /// a holder that does not use it (`slots`).
    pub(super) fn on_interested(&mut self, conn: ConnId, now: Instant) {
        let p = self.peers.get(&conn).expect("caller checked");
        if !p.am_choking {
            return;
        }
        if self.unchoked_count() < self.cfg.upload_slots {
            self.unchoke(conn, now);
        } else {
            self.reclaim_slots(now);
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
        if let Some(c) = self.next_waiting() {
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
        if p.unchoked_at.is_none() {
            // Never unchoked and no AllowedFast sent: no request can have
            // crossed an unchoke, so a peer that keeps asking is not
            // waiting for one.
            p.premature_requests += 1;
            if p.premature_requests > PREMATURE_REQUESTS {
                return self.fail(
                    conn,
                    format!("more than {PREMATURE_REQUESTS} requests before it was ever unchoked"),
                );
            }
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
            Err(e) => {
                return self.close(
                    conn,
                    CloseReason::Storage(format!("cannot read piece {}: {e}", read.piece)),
                );
            }
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
}
