//! A torrent asleep: what an idle torrent (no peer, nothing under way)
//! keeps so that it can be rebuilt, and what it answers meanwhile.
//!
//! A daemon holds thousands of torrents and most of them sit idle: no
//! peer connected, nothing being checked, fetched or served. A live
//! [`Torrent`] holds ~1.2 KB inline plus its picker's per-piece tables
//! for that; a [`Dormant`] holds its own settings (the session's it shares
//! with the other sleepers: [`SharedConfigs`]), had pieces, wanted pieces,
//! priorities and counters (~200 bytes) and wakes into a torrent that
//! behaves as the one that slept: the same pieces had, wanted and
//! prioritised, the same counters and banned addresses, nothing announced
//! again.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use weir_core::bitfield::Bitfield;
use weir_core::content::Quiet;
use weir_core::geometry::Geometry;
use weir_core::picker::{Order, Priority};

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

/// What a sleeping torrent keeps of its [`TorrentConfig`]: its own
/// choices, and the rest (the session's settings: peer id, ports, slots,
/// windows, the same for all its torrents) in a config shared with every
/// sleeper that has the same ([`SharedConfigs`]). 152 bytes a torrent
/// were ~70.
#[derive(Debug)]
pub(super) struct KeptConfig {
    /// The config with this torrent's own fields at their defaults.
    pub(super) shared: Arc<TorrentConfig>,
    order: Order,
    seed: u64,
    download: bool,
    wanted: Option<Bitfield>,
    priorities: Option<Arc<[Priority]>>,
}

impl KeptConfig {
    /// The whole config again.
    pub(super) fn config(&self) -> TorrentConfig {
        let mut cfg = (*self.shared).clone();
        cfg.order = self.order;
        cfg.seed = self.seed;
        cfg.download = self.download;
        cfg.wanted = self.wanted.clone();
        cfg.priorities = self.priorities.clone();
        cfg
    }
}

/// The configs sleeping torrents share (see [`KeptConfig`]): the few most
/// recently kept, each without any torrent's own fields. A session keeps
/// one for all its torrents; torrents whose settings differ (a private
/// one has no DHT port) share with those alike.
#[derive(Debug, Default)]
pub struct SharedConfigs(Vec<Arc<TorrentConfig>>);

impl SharedConfigs {
    /// Configs remembered (more distinct ones than this in one session is
    /// unusual: each torrent still keeps one, only less shared).
    const KEPT: usize = 4;

    /// `cfg` kept: its own fields, and the rest shared.
    pub(super) fn keep(&mut self, mut cfg: TorrentConfig) -> KeptConfig {
        let blank = TorrentConfig::new(cfg.peer_id);
        let order = std::mem::replace(&mut cfg.order, blank.order);
        let seed = std::mem::replace(&mut cfg.seed, blank.seed);
        let download = std::mem::replace(&mut cfg.download, blank.download);
        let (wanted, priorities) = (cfg.wanted.take(), cfg.priorities.take());
        let shared = match self.0.iter().position(|c| **c == cfg) {
            Some(i) => {
                let c = self.0.remove(i);
                self.0.insert(0, c.clone());
                c
            }
            None => {
                let c = Arc::new(cfg);
                self.0.insert(0, c.clone());
                self.0.truncate(Self::KEPT);
                c
            }
        };
        KeptConfig {
            shared,
            order,
            seed,
            download,
            wanted,
            priorities,
        }
    }
}

/// An idle torrent kept small (see the module docs): made by
/// [`Torrent::sleep`], made a torrent again by [`Dormant::wake`]. Its
/// geometry and info-hash are its metainfo's.
#[derive(Debug)]
pub struct Dormant {
    pub(super) cfg: KeptConfig,
    pub(super) content: Quiet,
    pub(super) counters: Counters,
    /// Made only when some address is banned: 8 bytes inline, not a
    /// set's 24, for the torrents (nearly all) that banned no one.
    #[allow(clippy::box_collection)]
    pub(super) banned: Option<Box<BTreeSet<IpAddr>>>,
    pub(super) rng: fastrand::Rng,
    pub(super) choke_rounds: u32,
    pub(super) next_read: u64,
}

impl Dormant {
    /// The torrent again, for `meta` (the metainfo it was made from).
    pub fn wake(self, meta: &Metainfo) -> Torrent {
        let mut cfg = self.cfg.config();
        let geo = Torrent::geometry_of(meta);
        let content = self.content.wake(geo, Torrent::content_config(&mut cfg));
        let stats = self.counters.stats(&geo);
        let mut t = Torrent::with_content(meta, cfg, content, stats);
        t.banned = self.banned.map(|b| *b).unwrap_or_default();
        t.rng = self.rng;
        t.choke_rounds = self.choke_rounds;
        t.next_read = self.next_read;
        t
    }

    /// Counters at any time (no peer: no rate), for `meta` (its own).
    pub fn stats(&self, meta: &Metainfo) -> Stats {
        let mut s = self.counters.stats(&Torrent::geometry_of(meta));
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

    /// See [`Torrent::deselected`], for `meta` (its own).
    pub fn deselected(&self, meta: &Metainfo, offset: u64, len: u64) -> bool {
        let wanted = self.cfg.wanted.as_ref();
        super::spans_skipped(&Torrent::geometry_of(meta), offset, len, |p| {
            wanted.is_some_and(|w| !w.get(p))
        })
    }

    /// Our handshake for this torrent (what [`Torrent::handshake`] says),
    /// for `meta` (its own).
    pub fn handshake(&self, meta: &Metainfo) -> Handshake {
        let h = Handshake::new(meta.info_hash, self.cfg.shared.peer_id);
        if self.cfg.shared.dht_port.is_some() {
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
    /// Asleep, with its metainfo (where its geometry and info-hash are).
    Asleep(&'a Dormant, &'a Metainfo),
}

impl<'a> TorrentRef<'a> {
    /// Counters and rates at `now`.
    pub fn stats(self, now: Instant) -> Stats {
        match self {
            TorrentRef::Awake(t) => t.stats(now),
            TorrentRef::Asleep(d, m) => d.stats(m),
        }
    }

    /// Pieces verified.
    pub fn had(self) -> &'a Bitfield {
        match self {
            TorrentRef::Awake(t) => t.had(),
            TorrentRef::Asleep(d, _) => d.had(),
        }
    }

    /// Whether every wanted piece is verified.
    pub fn is_complete(self) -> bool {
        match self {
            TorrentRef::Awake(t) => t.is_complete(),
            TorrentRef::Asleep(d, _) => d.is_complete(),
        }
    }

    /// Pieces and blocks.
    pub fn geometry(self) -> Geometry {
        match self {
            TorrentRef::Awake(t) => *t.geometry(),
            TorrentRef::Asleep(_, m) => Torrent::geometry_of(m),
        }
    }

    /// The torrent's info-hash.
    pub fn info_hash(self) -> [u8; 20] {
        match self {
            TorrentRef::Awake(t) => t.info_hash(),
            TorrentRef::Asleep(_, m) => m.info_hash,
        }
    }

    /// Our handshake for this torrent.
    pub fn handshake(self) -> Handshake {
        match self {
            TorrentRef::Awake(t) => t.handshake(),
            TorrentRef::Asleep(d, m) => d.handshake(m),
        }
    }

    /// See [`Torrent::deselected`].
    pub fn deselected(self, offset: u64, len: u64) -> bool {
        match self {
            TorrentRef::Awake(t) => t.deselected(offset, len),
            TorrentRef::Asleep(d, m) => d.deselected(m, offset, len),
        }
    }

    /// The live torrent, if awake.
    pub fn awake(self) -> Option<&'a Torrent> {
        match self {
            TorrentRef::Awake(t) => Some(t),
            TorrentRef::Asleep(..) => None,
        }
    }
}
