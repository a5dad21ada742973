//! Stored data that went away while the torrent runs (an upload read failed
//! with EIO, a file was truncated under it): the pieces are no longer had,
//! no longer offered, and fetched again when the torrent downloads.

use std::time::Instant;

use super::{ConnId, Torrent};
use crate::wire::Message;

impl Torrent {
    /// `lost` pieces' stored data is gone (the content no longer has them:
    /// they are wanted again), and every queued request for them is
    /// refused (a reject with the fast extension; without it a choke, which
    /// cancels the peer's requests).
    pub(super) fn on_pieces_lost(&mut self, lost: &[u32], now: Instant) {
        if lost.is_empty() {
            return;
        }
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            let p = self.peers.get_mut(&c).expect("listed");
            let (gone, keep): (Vec<_>, Vec<_>) =
                p.requests.drain(..).partition(|r| lost.contains(&r.index));
            p.requests = keep.into();
            if gone.is_empty() {
                continue;
            }
            if p.fast {
                for r in &gone {
                    p.send(&Message::Reject(*r), now);
                }
                self.mark_dirty(c);
            } else {
                self.choke(c, now);
            }
        }
        // Peers that have them are worth asking again.
        let conns: Vec<ConnId> = self.peers.keys().copied().collect();
        for c in conns {
            self.update_interest(c, now);
        }
    }

    /// Upload read `id` failed: nothing is sent for it; its blocks are
    /// refused and no longer count against the peer's uploads in flight.
    pub(super) fn on_read_failed(&mut self, id: u64, now: Instant) {
        let Some(read) = self.reads.remove(&id) else {
            return;
        };
        let conn = read.conn;
        let Some(p) = self.peers.get_mut(&conn) else {
            return;
        };
        // The whole read was charged; none of it will be sent.
        p.upload_queued = p.upload_queued.saturating_sub(u64::from(read.len));
        if p.fast {
            for b in &read.blocks {
                p.send(&Message::Reject(*b), now);
            }
            self.mark_dirty(conn);
        } else if !read.blocks.is_empty() {
            self.choke(conn, now);
        }
        self.serve(conn, now);
    }
}
