//! A torrent asleep: what an idle torrent (no peer, nothing under way)
//! keeps so that it can be rebuilt, and what it answers meanwhile.
//!
//! A daemon holds thousands of torrents and most of them sit idle: no
//! peer connected, nothing being checked, fetched or served. A live
//! [`Torrent`] holds ~1.2 KB inline plus its picker's per-piece tables
//! for that; a [`Dormant`] holds its settings, had pieces, wanted pieces,
//! priorities and counters (~400 bytes) and wakes into a torrent that
//! behaves as the one that slept: the same pieces had, wanted and
//! prioritised, the same counters and banned addresses, nothing announced
//! again.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Instant;

use weir_core::bitfield::Bitfield;
use weir_core::content::Quiet;
use weir_core::geometry::Geometry;

use super::{Stats, Torrent, TorrentConfig};

/// The counters a torrent keeps itself (the rest of [`Stats`] is read
/// from its content and peers).
#[derive(Debug)]
pub(super) struct Counters {
    downloaded: u64,
    uploaded: u64,
    protocol_errors: u32,
    banned: u32,
    unrequested_blocks: u32,
    slots_reclaimed: u32,
}

impl Counters {
    pub(super) fn of(s: &Stats) -> Self {
        Self {
            downloaded: s.downloaded,
            uploaded: s.uploaded,
            protocol_errors: s.protocol_errors,
            banned: s.banned,
            unrequested_blocks: s.unrequested_blocks,
            slots_reclaimed: s.slots_reclaimed,
        }
    }

    fn stats(&self, geo: &Geometry) -> Stats {
        Stats {
            downloaded: self.downloaded,
            uploaded: self.uploaded,
            protocol_errors: self.protocol_errors,
            banned: self.banned,
            unrequested_blocks: self.unrequested_blocks,
            slots_reclaimed: self.slots_reclaimed,
            pieces: geo.piece_count(),
            ..Stats::default()
        }
    }
}
use crate::metainfo::Metainfo;
use crate::wire::Handshake;

/// An idle torrent kept small (see the module docs): made by
/// [`Torrent::sleep`], made a torrent again by [`Dormant::wake`].
#[derive(Debug)]
pub struct Dormant {
    pub(super) cfg: TorrentConfig,
    pub(super) content: Quiet,
    pub(super) geo: Geometry,
    pub(super) info_hash: [u8; 20],
    pub(super) counters: Counters,
    pub(super) banned: BTreeSet<IpAddr>,
    pub(super) rng: fastrand::Rng,
    pub(super) choke_rounds: u32,
    pub(super) next_read: u64,
}

impl Dormant {
    /// The torrent again, for `meta` (the metainfo it was made from).
    pub fn wake(self, meta: &Metainfo) -> Torrent {
        debug_assert_eq!(
            meta.info_hash, self.info_hash,
            "woken with its own metainfo"
        );
        let mut cfg = self.cfg;
        let content = self
            .content
            .wake(self.geo, Torrent::content_config(&mut cfg));
        let stats = self.counters.stats(&self.geo);
        let mut t = Torrent::with_content(meta, cfg, content, stats);
        t.banned = self.banned;
        t.rng = self.rng;
        t.choke_rounds = self.choke_rounds;
        t.next_read = self.next_read;
        t
    }

    /// Counters at any time (no peer: no rate).
    pub fn stats(&self) -> Stats {
        let mut s = self.counters.stats(&self.geo);
        let c = &self.content;
        s.of_content(c.had(), c.bytes_left(), c.bytes_wanted(), c.stats());
        s
    }

    /// Pieces verified.
    pub fn had(&self) -> &Bitfield {
        self.content.had()
    }

    /// Whether every wanted piece is verified.
    pub fn is_complete(&self) -> bool {
        self.content.is_complete()
    }

    /// Pieces and blocks.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The torrent's info-hash.
    pub fn info_hash(&self) -> [u8; 20] {
        self.info_hash
    }

    /// See [`Torrent::deselected`].
    pub fn deselected(&self, offset: u64, len: u64) -> bool {
        let wanted = self.cfg.wanted.as_ref();
        super::spans_skipped(&self.geo, offset, len, |p| {
            wanted.is_some_and(|w| !w.get(p))
        })
    }

    /// Our handshake for this torrent (what [`Torrent::handshake`] says).
    pub fn handshake(&self) -> Handshake {
        let h = Handshake::new(self.info_hash, self.cfg.peer_id);
        if self.cfg.dht_port.is_some() {
            h.with_dht()
        } else {
            h
        }
    }
}

/// A torrent awake or asleep, read-only: what a runtime or a front end
/// reads of a transfer without waking it.
#[derive(Clone, Copy, Debug)]
pub enum TorrentRef<'a> {
    /// Live.
    Awake(&'a Torrent),
    /// Asleep.
    Asleep(&'a Dormant),
}

impl<'a> TorrentRef<'a> {
    /// Counters and rates at `now`.
    pub fn stats(self, now: Instant) -> Stats {
        match self {
            TorrentRef::Awake(t) => t.stats(now),
            TorrentRef::Asleep(d) => d.stats(),
        }
    }

    /// Pieces verified.
    pub fn had(self) -> &'a Bitfield {
        match self {
            TorrentRef::Awake(t) => t.had(),
            TorrentRef::Asleep(d) => d.had(),
        }
    }

    /// Whether every wanted piece is verified.
    pub fn is_complete(self) -> bool {
        match self {
            TorrentRef::Awake(t) => t.is_complete(),
            TorrentRef::Asleep(d) => d.is_complete(),
        }
    }

    /// Pieces and blocks.
    pub fn geometry(self) -> &'a Geometry {
        match self {
            TorrentRef::Awake(t) => t.geometry(),
            TorrentRef::Asleep(d) => d.geometry(),
        }
    }

    /// The torrent's info-hash.
    pub fn info_hash(self) -> [u8; 20] {
        match self {
            TorrentRef::Awake(t) => t.info_hash(),
            TorrentRef::Asleep(d) => d.info_hash(),
        }
    }

    /// Our handshake for this torrent.
    pub fn handshake(self) -> Handshake {
        match self {
            TorrentRef::Awake(t) => t.handshake(),
            TorrentRef::Asleep(d) => d.handshake(),
        }
    }

    /// See [`Torrent::deselected`].
    pub fn deselected(self, offset: u64, len: u64) -> bool {
        match self {
            TorrentRef::Awake(t) => t.deselected(offset, len),
            TorrentRef::Asleep(d) => d.deselected(offset, len),
        }
    }

    /// The live torrent, if awake.
    pub fn awake(self) -> Option<&'a Torrent> {
        match self {
            TorrentRef::Awake(t) => Some(t),
            TorrentRef::Asleep(_) => None,
        }
    }
}
