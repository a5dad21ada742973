//! A transfer's storage, as the driver opens and starts it.

use std::time::Instant;

use weir_session::{AddEd2k, AddTorrent, TransferId};

use crate::engine::EngineError;
use crate::storage::{self, DiskStorage, Opened, TransferSpec};

use super::{Driver, Msg, Pending};

/// A transfer's storage: opened and waiting for its digests, parked until
/// its first operation (see [`storage::Parked`]), or running. Boxed, so
/// the driver's map holds 16 bytes a transfer whatever its state.
pub(super) enum Store {
    Waiting(Box<Opened>),
    Parked(Box<storage::Parked>),
    Running(Box<DiskStorage>),
}

/// Storage openings (journal reads, a recheck's hashing) that run at once
/// on blocking threads: a daemon restarting with 1,000 transfers opened
/// them all together and tokio started 512 threads for it; more than a
/// few at once only makes the disk seek.
pub(super) const OPENS_AT_ONCE: usize = 4;

pub(super) fn split_path(p: &std::path::Path) -> (std::path::PathBuf, String) {
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(
            || std::path::PathBuf::from("."),
            std::path::Path::to_path_buf,
        );
    let name = p
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    (dir, name)
}

impl Driver {
    /// Opens storage on a blocking thread (existing data is hashed there);
    /// the result comes back as [`Msg::Opened`].
    pub(super) fn open_storage(
        &mut self,
        pending: Pending,
        spec: TransferSpec,
        opts: storage::OpenOptions,
        derive: Option<storage::DeriveDigests>,
    ) {
        let tx = self.tx.clone();
        self.opening += 1;
        let slots = self.open_slots.clone();
        tokio::spawn(async move {
            // Never closed: it lives as long as the driver.
            let slot = slots.acquire_owned().await.ok();
            let result = tokio::task::spawn_blocking(move || {
                let _slot = slot;
                storage::open(spec, opts, derive)
            })
            .await
            .unwrap_or_else(|e| {
                Err(storage::OpenError::Io {
                    path: std::path::PathBuf::new(),
                    source: std::io::Error::other(e.to_string()),
                })
            });
            let _ = tx
                .send(Msg::Opened {
                    pending: Box::new(pending),
                    result,
                })
                .await;
        });
    }

    pub(super) fn on_opened(
        &mut self,
        pending: Pending,
        result: Result<Opened, storage::OpenError>,
        now: Instant,
    ) {
        self.opening = self.opening.saturating_sub(1);
        let opened = match result {
            Ok(o) => o,
            Err(e) => {
                let e = EngineError::Open(e);
                match pending {
                    Pending::Torrent(_, r, _) | Pending::Ed2k(_, r) | Pending::Share(_, r) => {
                        let _ = r.send(Err(e));
                    }
                }
                return;
            }
        };
        let (added, reply) = match pending {
            Pending::Torrent(src, reply, priorities) => {
                let r = self.session.add_torrent(
                    AddTorrent {
                        meta: src.meta.clone(),
                        had: opened.had.clone(),
                        check: opened.check.clone(),
                        partial: opened.partial.clone(),
                        peers: src.peers.clone(),
                        paused: src.paused,
                        seed: src.seed,
                        download: src.open.mode == storage::Mode::Download,
                        wanted: opened.wanted.clone(),
                        priorities,
                    },
                    now,
                );
                (r, reply)
            }
            Pending::Ed2k(src, reply) => {
                let r = self.session.add_ed2k(
                    AddEd2k {
                        link: src.link.clone(),
                        had: opened.had.clone(),
                        check: opened.check.clone(),
                        partial: opened.partial.clone(),
                        peers: src.peers.clone(),
                        paused: src.paused,
                        seed: src.seed,
                    },
                    now,
                );
                (r, reply)
            }
            Pending::Share(src, reply) => {
                let name = split_path(&src.path).1;
                let r = self.session.share_ed2k(name, &src.hashes, now);
                (r, reply)
            }
        };
        match added {
            Ok(id) => {
                if let Some(m) = self.session.metainfo(id) {
                    self.mse.torrent_added(m.info_hash);
                }
                // Digests known now start the storage at once (the
                // session's OpenStorage event for it is already queued).
                self.stores.insert(id, Store::Waiting(Box::new(opened)));
                let _ = reply.send(Ok(id));
            }
            Err(e) => {
                let _ = reply.send(Err(EngineError::Add(e)));
            }
        }
    }

    pub(super) fn start_storage(
        &mut self,
        id: TransferId,
        digests: weir_core::storage::Digests,
        resumed: &[(u32, u32)],
    ) {
        let Some(Store::Waiting(opened)) = self.stores.remove(&id) else {
            tracing::debug!("{id}: storage opened twice or unknown");
            return;
        };
        let opened = opened.in_group(&self.backlog);
        if resumed.iter().all(|r| r.1 == 0) {
            // Nothing to do until the transfer reads or writes.
            self.stores
                .insert(id, Store::Parked(Box::new(opened.park(digests))));
            return;
        }
        let events = crate::storage::Events::tagged(self.storage_tx.clone(), id);
        match opened.start(digests, resumed, events) {
            Ok(d) => {
                self.stores.insert(id, Store::Running(Box::new(d)));
            }
            Err(e) => self.fatal = Some(EngineError::Storage(e)),
        }
    }

    /// The running storage of `id`, started now if it was parked; `None`
    /// while it is not open yet, or if starting failed (then the engine
    /// stops with the error).
    pub(super) fn running(&mut self, id: TransferId) -> Option<&DiskStorage> {
        if let Some(Store::Parked(_)) = self.stores.get(&id) {
            let Some(Store::Parked(p)) = self.stores.remove(&id) else {
                unreachable!("just seen parked")
            };
            let events = crate::storage::Events::tagged(self.storage_tx.clone(), id);
            match p.start(events) {
                Ok(d) => {
                    self.stores.insert(id, Store::Running(Box::new(d)));
                }
                Err(e) => {
                    self.fatal = Some(EngineError::Storage(e));
                    return None;
                }
            }
        }
        match self.stores.get(&id) {
            Some(Store::Running(d)) => Some(d),
            _ => None,
        }
    }
}
