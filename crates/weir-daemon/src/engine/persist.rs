//! How the backend's changes reach the [`Store`]: each RPC that changes
//! the state says what it touched ([`Touch`]); the records are built from
//! the in-memory transfers, compared with what the store holds, and
//! appended (one `fdatasync`) before the RPC answers. Writes are ordered
//! by the store's lock, taken before the records are built, so a later
//! write never carries older values than an earlier one.

use tokio::sync::OwnedMutexGuard;

use super::log::{Change, Entry as LogEntry};
use super::state::StateError;
use super::store::Store;
use super::{EngineBackend, Inner};
use crate::backend::TransferId;

/// What a change touched.
#[derive(Debug)]
pub(crate) enum Touch {
    /// A transfer added (with its .torrent, for a torrent).
    Added(TransferId, Option<Vec<u8>>),
    /// Transfers whose records (settings, paused, done...) changed.
    Transfers(Vec<TransferId>),
    /// A magnet's record became a torrent's: its fetched .torrent.
    Metadata(TransferId, Vec<u8>),
    /// Transfers removed.
    Removed(Vec<TransferId>),
    /// Session settings or caps.
    Session,
    /// The queue order.
    Queue,
    /// Traffic totals of every transfer.
    Traffic,
}

/// The records `touches` make: what differs between `st` and the store's
/// `disk` state. Transfers not yet in the store (their add is on its way)
/// and ones gone from memory (their removal is) are left to those writes.
fn changes(st: &Inner, disk: &super::state::State, touches: Vec<Touch>) -> Vec<LogEntry> {
    let mut out = Vec::new();
    let entry = |change| LogEntry {
        change,
        torrent: None,
    };
    for t in touches {
        match t {
            Touch::Added(id, torrent) => {
                if let (Some(e), None) = (st.entries.get(&id), disk.get(id)) {
                    out.push(LogEntry {
                        change: Change::Add(e.to_record()),
                        torrent,
                    });
                }
            }
            Touch::Transfers(ids) => {
                let set: Vec<_> = ids
                    .iter()
                    .filter_map(|id| {
                        let r = st.entries.get(id)?.to_record();
                        (disk.get(*id)? != &r).then_some(r)
                    })
                    .collect();
                if !set.is_empty() {
                    out.push(entry(Change::Set(set)));
                }
            }
            Touch::Metadata(id, torrent) => {
                if let (Some(e), Some(_)) = (st.entries.get(&id), disk.get(id)) {
                    out.push(LogEntry {
                        change: Change::Set(vec![e.to_record()]),
                        torrent: Some(torrent),
                    });
                }
            }
            Touch::Removed(ids) => {
                let gone: Vec<_> = ids
                    .into_iter()
                    .filter(|id| !st.entries.contains_key(id) && disk.get(*id).is_some())
                    .collect();
                if !gone.is_empty() {
                    out.push(entry(Change::Remove(gone)));
                }
            }
            Touch::Session => {
                if (st.next_id, st.caps, &st.saved) != (disk.next_id, disk.caps, &disk.settings) {
                    out.push(entry(Change::Session {
                        next_id: st.next_id,
                        caps: st.caps,
                        settings: Box::new(st.saved.clone()),
                    }));
                }
            }
            Touch::Queue => {
                let queue: Vec<_> = st
                    .queue
                    .iter()
                    .copied()
                    .filter(|id| disk.get(*id).is_some())
                    .collect();
                if queue != disk.queue {
                    out.push(entry(Change::Queue(queue)));
                }
            }
            Touch::Traffic => {
                let moved: Vec<_> = st
                    .entries
                    .values()
                    .filter_map(|e| {
                        let (down, up) = (e.earlier.0 + e.run.0, e.earlier.1 + e.run.1);
                        let r = disk.get(e.record.id)?;
                        ((r.downloaded, r.uploaded) != (down, up)).then_some((
                            e.record.id,
                            down,
                            up,
                        ))
                    })
                    .collect();
                if !moved.is_empty() {
                    out.push(entry(Change::Traffic(moved)));
                }
            }
        }
    }
    out
}

impl EngineBackend {
    /// Takes the store, ordering writes: the caller changes the
    /// transfers while holding it, then [`write`](Self::write)s.
    pub(crate) async fn store(&self) -> OwnedMutexGuard<Store> {
        self.0.store.clone().lock_owned().await
    }

    /// Writes what `touches` changed durably.
    pub(crate) async fn persist(&self, touches: Vec<Touch>) -> Result<(), StateError> {
        let store = self.store().await;
        self.write(store, touches).await
    }

    /// Writes what `touches` changed durably, with the store taken.
    pub(crate) async fn write(
        &self,
        mut store: OwnedMutexGuard<Store>,
        touches: Vec<Touch>,
    ) -> Result<(), StateError> {
        let batch = changes(&self.lock(), store.state(), touches);
        if batch.is_empty() {
            return Ok(());
        }
        self.blocking(move || store.append(batch)).await
    }

    /// Writes a new snapshot and starts an empty log (a clean stop leaves
    /// one file).
    pub(crate) async fn compact(&self) -> Result<(), StateError> {
        let mut store = self.store().await;
        self.blocking(move || store.compact()).await
    }

    async fn blocking(
        &self,
        f: impl FnOnce() -> Result<(), StateError> + Send + 'static,
    ) -> Result<(), StateError> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| StateError::Io {
                path: self.0.dir.log_path(),
                source: std::io::Error::other(e),
            })?
    }
}
