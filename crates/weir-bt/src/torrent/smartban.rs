//! Who sent the bad block? When a piece that several peers contributed to
//! fails its hash, the piece's bytes are read back and each block's SHA-1
//! is kept; when the piece later passes, the good bytes are read back too,
//! and a peer whose block differs sent bad data: it is banned at once. A
//! piece that one peer sent alone is that peer's strike without any of this.
//! (libtorrent calls this "smart ban".) Honest peers that happened to share
//! a piece with a liar are never blamed.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use sha1::{Digest as _, Sha1};
use weir_core::storage::StorageOp;

use super::{Assembly, BAN_STRIKES, ConnId, Event, Torrent};

/// Read ids with this bit set belong to smart ban, not to uploads.
pub(super) const SMARTBAN_READ: u64 = 1 << 63;
const GOOD: u64 = 1;

/// What is known about a failed piece from several peers.
#[derive(Debug, Default)]
pub(super) struct Evidence {
    /// (offset, length, sender, sender's address) of every block.
    blocks: Vec<(u32, u32, ConnId, Option<SocketAddr>)>,
    /// SHA-1 of each block as it failed, once read back.
    bad: Option<Vec<[u8; 20]>>,
}

fn block_hashes(data: &[u8], blocks: &[(u32, u32, ConnId, Option<SocketAddr>)]) -> Vec<[u8; 20]> {
    blocks
        .iter()
        .map(|(begin, len, _, _)| {
            let at = *begin as usize;
            data.get(at..at + *len as usize)
                .map_or([0; 20], |b| Sha1::digest(b).into())
        })
        .collect()
}

impl Torrent {
    /// A downloaded piece failed its hash.
    pub(super) fn piece_failed(&mut self, piece: u32, a: Assembly, _now: Instant) {
        self.stats.hash_failures += 1;
        let mut senders: Vec<ConnId> = a.blocks_from.iter().map(|(_, _, c)| *c).collect();
        senders.sort_unstable();
        senders.dedup();
        if senders.len() == 1 {
            self.strike(senders[0], 1, "sent a piece that failed its hash");
            self.picker.piece_failed(piece);
            return;
        }
        let blocks = a
            .blocks_from
            .iter()
            .map(|&(b, l, c)| (b, l, c, self.peers.get(&c).map(|p| p.addr)))
            .collect();
        self.evidence.insert(piece, Evidence { blocks, bad: None });
        // Read the bad bytes back before the piece is fetched again over them.
        self.events.push_back(Event::Storage(StorageOp::Read {
            id: SMARTBAN_READ | (u64::from(piece) << 1),
            piece,
            begin: 0,
            len: self.geo.piece_size(piece),
        }));
    }

    /// A piece passed: if it failed before with several senders, read the
    /// good bytes back to find who sent the bad ones.
    pub(super) fn piece_passed(&mut self, piece: u32) {
        if self.evidence.get(&piece).is_some_and(|e| e.bad.is_some()) {
            self.events.push_back(Event::Storage(StorageOp::Read {
                id: SMARTBAN_READ | (u64::from(piece) << 1) | GOOD,
                piece,
                begin: 0,
                len: self.geo.piece_size(piece),
            }));
        } else {
            self.evidence.remove(&piece);
        }
    }

    pub(super) fn on_smartban_read(&mut self, id: u64, data: Result<Bytes, String>, now: Instant) {
        let piece = ((id & !SMARTBAN_READ) >> 1) as u32;
        let good = id & GOOD != 0;
        let Ok(data) = data else {
            // Cannot compare: forget the evidence, download the piece again.
            self.evidence.remove(&piece);
            if !good {
                self.picker.piece_failed(piece);
            }
            return;
        };
        if !good {
            if let Some(e) = self.evidence.get_mut(&piece) {
                e.bad = Some(block_hashes(&data, &e.blocks));
            }
            self.picker.piece_failed(piece);
            let conns: Vec<ConnId> = self.peers.keys().copied().collect();
            for c in conns {
                self.fill_requests(c, now);
            }
            return;
        }
        let Some(e) = self.evidence.remove(&piece) else {
            return;
        };
        let good_hashes = block_hashes(&data, &e.blocks);
        let bad = e.bad.unwrap_or_default();
        let mut liars: Vec<(ConnId, Option<SocketAddr>)> = Vec::new();
        for (i, (_, _, conn, addr)) in e.blocks.iter().enumerate() {
            if bad.get(i) != good_hashes.get(i) && !liars.iter().any(|(c, _)| c == conn) {
                liars.push((*conn, *addr));
            }
        }
        for (conn, addr) in liars {
            let still_here = self.peers.get(&conn).is_some_and(|p| Some(p.addr) == addr);
            if still_here {
                self.strike(conn, BAN_STRIKES, "sent a block that failed the piece hash");
            } else if let Some(addr) = addr {
                self.ban(addr, "sent a block that failed the piece hash".into());
            }
        }
    }

    /// Counts `n` strikes against a peer; at [`BAN_STRIKES`] it is banned.
    pub(super) fn strike(&mut self, conn: ConnId, n: u32, why: &str) {
        let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) else {
            return;
        };
        p.strikes += n;
        if p.strikes >= BAN_STRIKES {
            let addr = p.addr;
            let reason = format!("{why} ({} strikes)", p.strikes);
            self.ban(addr, reason.clone());
            self.close(conn, reason);
        }
    }

    /// Bans an address (once).
    fn ban(&mut self, addr: SocketAddr, reason: String) {
        if self.banned.insert(addr) {
            self.stats.banned += 1;
            self.events.push_back(Event::Ban { addr, reason });
        }
    }
}
