//! The engine's commands, as the driver carries them out.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;
use weir_core::storage::FileLayout;
use weir_session::{AddEd2k, TransferId};

use crate::bandwidth::SharedBucket;
use crate::engine::{Command, EngineError};
use crate::storage::{self, TransferSpec};

use super::stores::{Store, split_path};
use super::{Driver, Pending, torrent_stem};

impl Driver {
    pub(super) fn on_command(&mut self, c: Command, now: Instant) {
        match c {
            Command::AddTorrent(src, reply) => {
                // Paths from the torrent stay below the download directory,
                // the torrent's folder included: it is opened as part of
                // the layout (a link there is refused), never as the root.
                let (root, layout) = (src.dir.clone(), crate::engine::spec::layout(&src.meta));
                let geometry = weir_core::geometry::Geometry::new(
                    src.meta.info.total_length(),
                    src.meta.info.piece_length,
                    weir_bt::wire::BLOCK_LEN,
                )
                .expect("metainfo guarantees a valid geometry");
                let selection = match &src.files {
                    None => None,
                    Some(w) => {
                        match weir_core::selection::Selection::new(&layout, &geometry, w.to_vec()) {
                            Ok(s) => Some(s).filter(|s| !s.is_everything()),
                            Err(source) => {
                                let _ = reply.send(Err(EngineError::Selection {
                                    name: src.meta.info.name.to_string(),
                                    source,
                                }));
                                return;
                            }
                        }
                    }
                };
                let priorities = match &src.priorities {
                    None => None,
                    Some(p) => {
                        match weir_core::selection::piece_priorities(&layout, &geometry, p) {
                            Ok(p) => p,
                            Err(source) => {
                                let _ = reply.send(Err(EngineError::Selection {
                                    name: src.meta.info.name.to_string(),
                                    source,
                                }));
                                return;
                            }
                        }
                    }
                };
                let spec = TransferSpec {
                    dir: root,
                    layout,
                    geometry,
                    digests: Some(weir_bt::torrent::Torrent::digests(&src.meta)),
                    id: src.meta.info_hash.to_vec(),
                    stem: torrent_stem(&src.meta.info_hash),
                    name: src.meta.info.name.to_string(),
                    selection,
                };
                let mut opts = src.open;
                opts.workers = self.cfg.storage_workers;
                self.open_storage(Pending::Torrent(src, reply, priorities), spec, opts, None);
            }
            Command::AddEd2k(src, reply) if self.session.ed2k_joins(&src.link).is_some() => {
                // A file of a torrent here: it joins that transfer and its
                // storage (nothing of its own to open).
                let parts = weir_ed2k::geometry(src.link.size).piece_count();
                let r = self.session.add_ed2k(
                    AddEd2k {
                        link: src.link.clone(),
                        had: weir_core::bitfield::Bitfield::new(parts),
                        check: weir_core::bitfield::Bitfield::new(parts),
                        partial: Vec::new(),
                        peers: src.peers.clone(),
                        paused: false,
                        seed: src.seed,
                    },
                    now,
                );
                let _ = reply.send(r.map_err(EngineError::Add));
            }
            Command::AddEd2k(src, reply) => {
                let l = &src.link;
                let spec = TransferSpec {
                    dir: src.dir.clone(),
                    layout: FileLayout::new([(std::path::PathBuf::from(&l.name), l.size)]),
                    geometry: weir_ed2k::geometry(l.size),
                    digests: crate::engine::spec::link_digests(l),
                    id: l.hash.0.to_vec(),
                    stem: crate::engine::spec::journal_stem(&l.hash),
                    name: l.name.clone(),
                    selection: None,
                };
                let mut opts = src.open;
                opts.workers = self.cfg.storage_workers;
                // Without the part hashes, a file already there proves
                // itself by its file hash.
                let (size, hash) = (l.size, l.hash);
                let derive: storage::DeriveDigests =
                    Box::new(move |r| crate::engine::spec::derive_digests(r, size, hash));
                self.open_storage(Pending::Ed2k(src, reply), spec, opts, Some(derive));
            }
            Command::Share(src, reply) => {
                let h = &src.hashes;
                let (dir, name) = split_path(&src.path);
                let spec = TransferSpec {
                    dir,
                    layout: FileLayout::new([(std::path::PathBuf::from(&name), h.size)]),
                    geometry: weir_ed2k::geometry(h.size),
                    digests: Some(h.part_digests().into()),
                    id: h.file_hash.0.to_vec(),
                    stem: crate::engine::spec::journal_stem(&h.file_hash),
                    name,
                    selection: None,
                };
                // Hashed by the caller just now; shared as it is, read-only.
                let opts = storage::OpenOptions {
                    journal: false,
                    verified_by_caller: true,
                    workers: self.cfg.storage_workers,
                    ..storage::OpenOptions::seed()
                };
                self.open_storage(Pending::Share(src, reply), spec, opts, None);
            }
            Command::AddServer(addr) => self.session.add_ed2k_server(addr, now),
            Command::Pause(id) => self.session.pause(id, now),
            Command::Resume(id) => self.session.resume(id, now),
            Command::Remove(id, reply) => {
                let ok = self.remove(id, now, None);
                let _ = reply.send(ok);
            }
            Command::RemoveClosed(id, reply) => {
                self.remove(id, now, Some(reply));
            }
            Command::Snapshot(reply) => {
                let _ = reply.send(self.infos(now));
            }
            Command::StartAccepting => self.start_accepting(),
            Command::SetEncryption(p) => {
                self.mse.policy = p;
                self.publish(false);
            }
            Command::Pieces(id, reply) => {
                let had = self.session.torrent(id).map(|t| t.had().clone());
                let _ = reply.send(had);
            }
            Command::SetCaps { id, down, up } => {
                let (d, u) = self.caps_of(id);
                d.set_rate_live(down);
                u.set_rate_live(up);
            }
            Command::BtPeers(id, reply) => {
                let _ = reply.send(self.session.bt_peers(id, now));
            }
            Command::Reannounce(id) => {
                self.announces.reannounce(id, now);
            }
            Command::DhtWatch(info_hash, reply) => {
                let r = match &mut self.dht {
                    Some(d) => d.watch(info_hash, &mut self.session),
                    None => Err(crate::engine::DhtError::Off),
                };
                let _ = reply.send(r);
            }
            Command::DhtAddNodes(nodes) => {
                if let Some(d) = &mut self.dht {
                    d.add_nodes(&nodes, &mut self.session);
                }
            }
            Command::DhtStatus(reply) => {
                let _ = reply.send(self.dht.as_ref().map(crate::engine::dht::DhtGlue::status));
            }
            Command::Stop => self.stopping = true,
        }
    }

    /// A transfer's own buckets.
    pub(super) fn caps_of(&mut self, t: TransferId) -> (Arc<SharedBucket>, Arc<SharedBucket>) {
        self.transfer_caps
            .entry(t)
            .or_insert_with(|| (crate::bandwidth::bucket(0), crate::bandwidth::bucket(0)))
            .clone()
    }

    /// Forgets a transfer, closes its storage on a blocking thread and
    /// stops its trackers; `closed` (if any) is answered once the storage
    /// is closed.
    pub(super) fn remove(
        &mut self,
        id: TransferId,
        now: Instant,
        closed: Option<oneshot::Sender<bool>>,
    ) -> bool {
        if let Some(m) = self.session.metainfo(id) {
            self.mse.torrent_removed(&m.info_hash);
        }
        let ok = self.session.remove(id, now);
        if let Some(l) = &mut self.lsd {
            l.remove_torrent(id);
        }
        self.transfer_caps.remove(&id);
        let store = self.stores.remove(&id);
        if let Some(h) = self.announcing.remove(&id) {
            h.abort();
        }
        if let Some(stop) = self.announces.remove(id) {
            tokio::spawn(crate::engine::trackers::stop(
                stop,
                self.announce_ctx.clone(),
            ));
        }
        tokio::task::spawn_blocking(move || {
            // Closed (or, not running, its lock let go: file I/O) before
            // the reply: whoever waits for it may open the download again.
            match store {
                Some(Store::Running(d)) => d.close(),
                other => drop(other),
            }
            if let Some(reply) = closed {
                let _ = reply.send(ok);
            }
        });
        ok
    }
}
