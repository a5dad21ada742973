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

    /// Whether it serves no peer and has nothing queued.
    pub fn is_idle(&self) -> bool {
        self.peers.is_empty() && self.out.is_empty()
    }

    /// The info dictionary's bytes it held.
    pub fn into_info(self) -> Option<Bytes> {
        self.info
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

/// A [`MetadataServer`] made only while a peer may ask it for something:
/// until a peer advertising ut_metadata arrives, and again once the last
/// one has gone with nothing queued, it is the info dictionary's bytes (a
/// shared view) alone, not a 144-byte server in every idle torrent. It
/// serves with [`ServerConfig::default`]; its counters start again with
/// each server.
#[derive(Debug)]
pub enum LazyServer {
    /// No peer to serve: the info dictionary's bytes, when we have them.
    Idle(Option<Bytes>),
    /// Serving.
    Serving(Box<MetadataServer>),
}

impl LazyServer {
    /// Idle, with `info` when we have it.
    pub fn new(info: Option<Bytes>) -> Self {
        LazyServer::Idle(info)
    }

    /// `metadata_size` for our extension handshake.
    pub fn metadata_size(&self) -> Option<u64> {
        match self {
            LazyServer::Idle(info) => info.as_ref().map(|i| i.len() as u64),
            LazyServer::Serving(s) => s.metadata_size(),
        }
    }

    /// A peer's extension handshake: a server is made for a peer that
    /// advertises ut_metadata (see [`MetadataServer::add_peer`]).
    pub fn add_peer(&mut self, peer: ConnId, ext: &ExtHandshake, now: Instant) {
        if let LazyServer::Idle(info) = self {
            if ext.ext_id(UT_METADATA).is_none() {
                return;
            }
            let server = MetadataServer::new(ServerConfig::default(), info.take());
            *self = LazyServer::Serving(Box::new(server));
        }
        if let LazyServer::Serving(s) = self {
            s.add_peer(peer, ext, now);
            self.settle();
        }
    }

    /// A connection closed: idle again if it was the last peer served.
    pub fn remove_peer(&mut self, peer: ConnId) {
        if let LazyServer::Serving(s) = self {
            s.remove_peer(peer);
            self.settle();
        }
    }

    /// A decoded ut_metadata message (ignored while idle: from no peer it
    /// serves, as [`MetadataServer::handle_message`] does).
    pub fn handle_message(&mut self, peer: ConnId, msg: &MetadataMsg, now: Instant) {
        if let LazyServer::Serving(s) = self {
            s.handle_message(peer, msg, now);
        }
    }

    /// The next frame to write: `(connection, bytes)`.
    pub fn poll_send(&mut self) -> Option<(ConnId, Bytes)> {
        let LazyServer::Serving(s) = self else {
            return None;
        };
        let next = s.poll_send();
        self.settle();
        next
    }

    /// Whether a server is held (for tests and memory accounting).
    pub fn is_serving(&self) -> bool {
        matches!(self, LazyServer::Serving(_))
    }

    /// Gives the server up when it serves no one and has nothing queued.
    fn settle(&mut self) {
        if matches!(self, LazyServer::Serving(s) if s.is_idle())
            && let LazyServer::Serving(s) = std::mem::replace(self, LazyServer::Idle(None))
        {
            *self = LazyServer::Idle(s.into_info());
        }
    }
}
