//! Serving our info dictionary to peers that ask for it.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use super::{MetadataMsg, PIECE_LEN, frame, piece_count, piece_len};
use crate::torrent::ConnId;
use crate::wire::{ExtHandshake, UT_METADATA};

/// Tunables of the server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerConfig {
    /// Pieces one peer may be sent per second, sustained.
    pub rate: f64,
    /// Pieces one peer may be sent in a burst (a whole small dictionary at
    /// once: 64 pieces is 1 MiB).
    pub burst: f64,
    /// Replies queued for one peer (not yet taken by `poll_send`) beyond
    /// which its requests are rejected.
    pub max_queued: usize,
    /// Most peers tracked.
    pub max_peers: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            rate: 16.0,
            burst: 64.0,
            max_queued: 64,
            max_peers: 4096,
        }
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Pieces sent.
    pub served: u64,
    /// Rejects sent: we have no metadata, the piece does not exist.
    pub rejected: u64,
    /// Rejects sent because the peer asked too fast.
    pub rate_limited: u64,
}

struct SPeer {
    ext_id: u8,
    tokens: f64,
    last: Instant,
    queued: usize,
}

/// Answers ut_metadata requests. See the [module docs](super).
pub struct MetadataServer {
    cfg: ServerConfig,
    info: Option<Bytes>,
    peers: BTreeMap<ConnId, SPeer>,
    out: VecDeque<(ConnId, Bytes)>,
    stats: ServerStats,
}

impl MetadataServer {
    /// A server; `info` is the info dictionary's bytes when we have them.
    pub fn new(cfg: ServerConfig, info: Option<Bytes>) -> Self {
        Self {
            cfg,
            info,
            peers: BTreeMap::new(),
            out: VecDeque::new(),
            stats: ServerStats::default(),
        }
    }

    /// The metadata arrived (a magnet download finished fetching it).
    pub fn set_metadata(&mut self, info: Bytes) {
        self.info = Some(info);
    }

    /// `metadata_size` for our extension handshake.
    pub fn metadata_size(&self) -> Option<u64> {
        self.info.as_ref().map(|i| i.len() as u64)
    }

    /// A peer's extension handshake arrived; it is served if it advertises
    /// ut_metadata.
    pub fn add_peer(&mut self, peer: ConnId, ext: &ExtHandshake, now: Instant) {
        match ext.ext_id(UT_METADATA) {
            Some(ext_id) if self.peers.len() < self.cfg.max_peers => {
                self.peers.insert(
                    peer,
                    SPeer {
                        ext_id,
                        tokens: self.cfg.burst,
                        last: now,
                        queued: 0,
                    },
                );
            }
            // Disabled (id 0) in a later handshake: stop serving it.
            _ => {
                self.peers.remove(&peer);
            }
        }
    }

    /// A connection closed.
    pub fn remove_peer(&mut self, peer: ConnId) {
        self.peers.remove(&peer);
        self.out.retain(|(p, _)| *p != peer);
    }

    /// A decoded ut_metadata message (only requests concern the server).
    pub fn handle_message(&mut self, peer: ConnId, msg: &MetadataMsg, now: Instant) {
        let MetadataMsg::Request { piece } = *msg else {
            return;
        };
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let elapsed = now.saturating_duration_since(p.last).as_secs_f64();
        p.last = now;
        p.tokens = (p.tokens + elapsed * self.cfg.rate).min(self.cfg.burst);
        let reject = MetadataMsg::Reject { piece };
        let reply = match &self.info {
            _ if p.queued >= self.cfg.max_queued || p.tokens < 1.0 => {
                self.stats.rate_limited += 1;
                reject
            }
            Some(info) if piece < piece_count(info.len() as u64) => {
                p.tokens -= 1.0;
                self.stats.served += 1;
                let start = piece as usize * PIECE_LEN;
                let len = piece_len(info.len() as u64, piece);
                MetadataMsg::Data {
                    piece,
                    total_size: info.len() as u64,
                    data: info.slice(start..start + len),
                }
            }
            _ => {
                self.stats.rejected += 1;
                reject
            }
        };
        p.queued += 1;
        self.out.push_back((peer, frame(p.ext_id, &reply)));
    }

    /// The next frame to write: `(connection, bytes)`.
    pub fn poll_send(&mut self) -> Option<(ConnId, Bytes)> {
        let (peer, b) = self.out.pop_front()?;
        if let Some(p) = self.peers.get_mut(&peer) {
            p.queued = p.queued.saturating_sub(1);
        }
        Some((peer, b))
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }
}

impl std::fmt::Debug for MetadataServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataServer")
            .field("metadata_size", &self.metadata_size())
            .field("peers", &self.peers.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
