//! The RPC methods of [`EngineBackend`]: each a few engine commands and a
//! durable state write around the daemon's table of transfers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use weir_session::TransferInfo;

use super::state::{Folder, Record, RecordSource, StateError};
use super::view::{self, Absent};
use super::{
    Content, EngineBackend, EngineId, Entry, Infos, Orphan, Touch, delete_data, entry, magnet,
    unix_now,
};
use crate::backend::*;
use crate::disk::free_space_of;
use crate::sources::{MAX_TORRENT, of_link, of_metainfo, parse_ed2k, parse_metainfo};

pub(super) fn state_err(e: StateError) -> BackendError {
    match e {
        StateError::Io { path, source } => BackendError::Io { path, source },
        e @ StateError::Corrupt { .. } => BackendError::Invalid(e.to_string()),
    }
}

impl Backend for EngineBackend {
    async fn session(&self) -> Result<SessionSettings, BackendError> {
        let mut s = self.lock().settings.clone();
        s.download_dir_free_space = free_space_of(Path::new(&*s.download_dir))
            .ok()
            .map(|f| f.free);
        Ok(s)
    }

    async fn set_session(&self, change: SessionChange) -> Result<(), BackendError> {
        if let Some(d) = &change.download_dir {
            if !d.is_absolute() {
                return Err(BackendError::PathNotAbsolute(d.clone()));
            }
        }
        let caps_changed = change.speed_limit_down.is_some()
            || change.speed_limit_down_enabled.is_some()
            || change.speed_limit_up.is_some()
            || change.speed_limit_up_enabled.is_some();
        if let Some(e) = change.encryption {
            self.0
                .engine
                .set_encryption(super::engine_encryption(e))
                .await;
        }
        let (down, up) = {
            let mut st = self.lock();
            if change.idle_seeding_limit_enabled == Some(true)
                && !st.settings.idle_seeding_limit_enabled
            {
                // Idle time counts from now (activity is only followed
                // while a goal applies).
                let now = unix_now();
                for e in st.entries.values_mut() {
                    e.last_active = now;
                }
            }
            st.saved.merge(change.clone());
            st.settings.apply(change);
            // What weir does not do stays off whatever was asked.
            st.settings.blocklist_enabled = false;
            st.settings.peer_port = self.0.cfg.peer_port;
            st.settings.dht_enabled = self.0.cfg.dht_port.is_some();
            st.settings.lpd_enabled = self.0.cfg.lsd_enabled;
            (st.settings.speed_limit_down, st.settings.speed_limit_up)
        };
        if caps_changed {
            self.set_caps(Some(down), Some(up)).await.map_err(state_err)
        } else {
            self.persist(vec![Touch::Session]).await.map_err(state_err)
        }
    }

    async fn stats(&self) -> Result<SessionStats, BackendError> {
        let infos = self.snapshot().await;
        let st = self.lock();
        let mut s = SessionStats {
            torrent_count: st.entries.len() as u64,
            ..SessionStats::default()
        };
        for e in st.entries.values() {
            if e.record.paused {
                s.paused_torrent_count += 1;
            } else {
                s.active_torrent_count += 1;
            }
        }
        for i in infos.iter() {
            s.download_speed += i.download_rate.max(0.0) as u64;
            s.upload_speed += i.upload_rate.max(0.0) as u64;
            s.current.downloaded_bytes += i.downloaded.0 + i.downloaded.1;
            s.current.uploaded_bytes += i.uploaded.0 + i.uploaded.1;
        }
        s.current.files_added = st.files_added;
        s.current.session_count = 1;
        s.current.seconds_active = unix_now().saturating_sub(st.started);
        // Earlier runs: the traffic of the transfers still here (run counts
        // and times of earlier runs are not kept).
        s.cumulative = s.current;
        for e in st.entries.values() {
            s.cumulative.downloaded_bytes += e.earlier.0;
            s.cumulative.uploaded_bytes += e.earlier.1;
        }
        Ok(s)
    }

    async fn transfers(&self, query: TransferQuery) -> Result<TransferList, BackendError> {
        let infos = self.snapshot().await;
        let by_eid = Infos::new(&infos);
        let now = unix_now();
        let mut pieces = HashMap::new();
        if query.detail.files || query.detail.pieces {
            let torrents: Vec<(TransferId, EngineId)> = {
                let st = self.lock();
                st.selected(&query.select, Some(&by_eid))
                    .into_iter()
                    .filter_map(|id| {
                        let e = &st.entries[&id];
                        matches!(e.content, Content::Torrent(_))
                            .then_some(e.engine_id.map(|eid| (id, eid)))
                            .flatten()
                    })
                    .collect()
            };
            for (id, eid) in torrents {
                if let Some(bits) = self.0.engine.pieces(eid).await {
                    pieces.insert(id, bits);
                }
            }
        }
        let mut peers = HashMap::new();
        if query.detail.peers {
            let torrents: Vec<(TransferId, EngineId)> = {
                let st = self.lock();
                st.selected(&query.select, Some(&by_eid))
                    .into_iter()
                    .filter_map(|id| st.entries[&id].engine_id.map(|eid| (id, eid)))
                    .collect()
            };
            for (id, eid) in torrents {
                peers.insert(id, self.0.engine.bt_peers(eid).await);
            }
        }
        let mut newly_done = Vec::new();
        let list = {
            let mut guard = self.lock();
            let positions = guard.queue_positions();
            let st = &mut *guard;
            let mut out = Vec::with_capacity(st.entries.len());
            let mut rows = Vec::with_capacity(st.entries.len());
            let mut written = Vec::new();
            let cutoff = now.saturating_sub(RECENTLY_ACTIVE_SECS);
            // One walk over the entries in id order (not a search for each
            // selected id).
            for (&id, e) in st.entries.iter_mut() {
                if !super::is_selected(e, &query.select, Some(&by_eid), cutoff) {
                    continue;
                }
                let info = e.engine_id.and_then(|eid| by_eid.get(&eid));
                if let Some(i) = info {
                    e.saw(i);
                }
                let complete = |i: &TransferInfo| i.wanted > 0 && i.bytes_had >= i.wanted;
                if e.record.done.is_none() && info.is_some_and(complete) {
                    e.record.done = Some(now);
                    newly_done.push(id);
                }
                let absent = if let Some(f) = &e.failed {
                    Absent::Failed(f.clone())
                } else if e.adding {
                    Absent::Opening
                } else if e.fetching {
                    Absent::Fetching(e.fetch_error.clone())
                } else {
                    Absent::Stopped
                };
                let position = positions.get(&id).copied().unwrap_or(0);
                if query.detail == Detail::default() {
                    let key = view::fingerprint(e, info, &absent, position, now);
                    let row_key = query.row_key.as_deref();
                    match view::CachedView::get(e, key, row_key) {
                        Some(view::Cached::Row(row)) => {
                            // The row is current: a shared empty view
                            // stands in for the view (see
                            // `TransferList::written`).
                            out.push(view::written_stand_in());
                            rows.push(None);
                            written.resize(out.len() - 1, None);
                            written.push(Some(row));
                            continue;
                        }
                        Some(view::Cached::View(v, r)) => {
                            out.push(v);
                            rows.push(Some(r));
                            continue;
                        }
                        Some(view::Cached::Rebuild) => {
                            let mut v = view::fill(e, info, absent, None, query.detail, now);
                            v.queue_position = position;
                            let v = Arc::new(v);
                            rows.push(view::CachedView::keep(e, v.clone()));
                            out.push(v);
                            continue;
                        }
                        None => {}
                    }
                    let mut v = view::fill(e, info, absent, None, query.detail, now);
                    v.queue_position = position;
                    let v = Arc::new(v);
                    let cached = view::CachedView::new(e.base.clone(), key, v.clone());
                    // A view built for the first time is written once:
                    // its rows are cached from the next answer on.
                    e.list_view = Some(cached);
                    out.push(v);
                    rows.push(None);
                    continue;
                }
                let mut v = view::fill(e, info, absent, pieces.get(&id), query.detail, now);
                v.queue_position = position;
                if let Some(p) = peers.get(&id) {
                    v.peers = p.iter().map(view::peer).collect();
                }
                out.push(Arc::new(v));
                rows.push(None);
            }
            let removed = if query.select == Selection::RecentlyActive {
                let cutoff = now.saturating_sub(RECENTLY_ACTIVE_SECS);
                st.removed
                    .iter()
                    .filter(|(_, t)| *t >= cutoff)
                    .map(|(id, _)| *id)
                    .collect()
            } else {
                Vec::new()
            };
            TransferList {
                transfers: out,
                removed,
                rows,
                written,
            }
        };
        if !newly_done.is_empty() {
            let me = self.clone();
            tokio::spawn(async move {
                if let Err(e) = me.persist(vec![Touch::Transfers(newly_done)]).await {
                    tracing::warn!("saving the state: {e}");
                }
            });
        }
        Ok(list)
    }

    async fn add(&self, req: AddRequest) -> Result<AddOutcome, BackendError> {
        let (content, parsed, torrent) = match &req.source {
            AddSource::Metainfo(b) => {
                let m = parse_metainfo(b)?;
                let p = of_metainfo(&m);
                (Content::Torrent(Arc::new(m)), p, Some(b.to_vec()))
            }
            AddSource::Path(path) => {
                let path = path.clone();
                let data = tokio::task::spawn_blocking(move || crate::sources::read_bounded(&path))
                    .await
                    .map_err(|e| BackendError::Invalid(e.to_string()))??;
                let m = parse_metainfo(&data)?;
                let p = of_metainfo(&m);
                (Content::Torrent(Arc::new(m)), p, Some(data))
            }
            AddSource::Url(url) => {
                let data = crate::client::fetch(
                    &self.0.cfg.policy,
                    url,
                    req.cookies.as_deref(),
                    MAX_TORRENT,
                    Duration::from_secs(20),
                )
                .await
                .map_err(|e| BackendError::Fetch(format!("{url}: {e}")))?;
                let m = parse_metainfo(&data)?;
                let p = of_metainfo(&m);
                (Content::Torrent(Arc::new(m)), p, Some(data.to_vec()))
            }
            AddSource::Magnet(link) => match magnet::ed2k_only(link)? {
                // An eD2k magnet is the ed2k link it stands for.
                Some(l) => {
                    let p = of_link(&l);
                    (Content::Ed2k(Box::new(l)), p, None)
                }
                None => {
                    let (m, p) = magnet::parse(link)?;
                    (Content::Magnet(Arc::new(m)), p, None)
                }
            },
            AddSource::Ed2k(link) => {
                let l = parse_ed2k(link)?;
                let p = of_link(&l);
                (Content::Ed2k(Box::new(l)), p, None)
            }
        };
        if !req.files_unwanted.is_empty() && matches!(content, Content::Ed2k(_)) {
            return Err(BackendError::Unsupported(
                "files-unwanted: an eD2k download is one file; remove it instead",
            ));
        }
        // More files than any torrent's metadata can name (the index
        // lists are otherwise bounded only by the body size).
        const MAX_LISTED: usize = 1 << 20;
        if [
            &req.files_unwanted,
            &req.files_wanted,
            &req.priority_high,
            &req.priority_low,
            &req.priority_normal,
        ]
        .iter()
        .any(|l| l.len() > MAX_LISTED)
        {
            return Err(BackendError::Invalid(format!(
                "files-wanted/files-unwanted/priority-*: more than {MAX_LISTED} file indices"
            )));
        }
        // A magnet's files are known only once its metadata is: indices
        // past them are then ignored (as BEP 53 says of `so=`).
        if let Some(bad) = req
            .files_wanted
            .iter()
            .chain(&req.files_unwanted)
            .chain(&req.priority_high)
            .chain(&req.priority_low)
            .chain(&req.priority_normal)
            .find(|i| {
                !matches!(content, Content::Magnet(_)) && **i >= parsed.view.file_count.max(1)
            })
        {
            return Err(BackendError::FileIndexOutOfRange(*bad));
        }
        let wanted: std::collections::BTreeSet<u32> = req.files_wanted.iter().copied().collect();
        let unwanted: Vec<u32> = req
            .files_unwanted
            .iter()
            .copied()
            .filter(|i| !wanted.contains(i))
            .collect::<std::collections::BTreeSet<u32>>()
            .into_iter()
            .collect();
        // As Transmission's torrent-add: low, then normal, then high (a
        // file named twice ends at the later).
        let mut priorities = Vec::new();
        super::change::set_levels(
            &mut priorities,
            [
                (&req.priority_low[..], -1),
                (&req.priority_normal[..], 0),
                (&req.priority_high[..], 1),
            ],
        );
        let hash = parsed.view.hash;
        let (dir, paused) = {
            let st = self.lock();
            if let Some(id) = st.by_hash.get(&hash) {
                return Ok(AddOutcome::Duplicate(AddedTransfer {
                    id: *id,
                    hash,
                    name: st.entries[id].base.name.clone(),
                }));
            }
            let dir = req
                .download_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(&*st.settings.download_dir));
            let paused = req.paused.unwrap_or(!st.settings.start_added_torrents);
            (dir, paused)
        };
        if !dir.is_absolute() {
            return Err(BackendError::PathNotAbsolute(dir));
        }
        let source = match &content {
            Content::Torrent(_) => RecordSource::Torrent {
                info_hash: hash.to_hex(),
            },
            Content::Ed2k(l) => RecordSource::Ed2k { link: l.to_link() },
            Content::Magnet(m) => RecordSource::Magnet { link: m.to_uri() },
        };
        let link_peers = match &content {
            Content::Magnet(m) => magnet::link_peers(m),
            _ => Vec::new(),
        };
        // Held from the id given to the record written, so that adds reach
        // the log in id order.
        let store = self.store().await;
        let now = unix_now();
        let added = {
            let mut st = self.lock();
            if let Some(id) = st.by_hash.get(&hash) {
                // Added meanwhile by another request.
                return Ok(AddOutcome::Duplicate(AddedTransfer {
                    id: *id,
                    hash,
                    name: st.entries[id].base.name.clone(),
                }));
            }
            let id = st.next_id;
            st.next_id += 1;
            let record = Record {
                id,
                source,
                download_dir: Folder::new(&dir),
                paused,
                labels: req.labels.clone(),
                added: now,
                done: None,
                downloaded: 0,
                uploaded: 0,
                limits: super::state::Limits::default(),
                finished: false,
                peers: link_peers,
                unwanted,
                priorities,
            };
            let e = entry(&self.0.dir, record.into(), content, parsed, now);
            let added = AddedTransfer {
                id,
                hash,
                name: e.base.name.clone(),
            };
            st.by_hash.insert(hash, id);
            st.entries.insert(id, e);
            st.queue.push(id);
            st.files_added += 1;
            added
        };
        // The record carries the .torrent: its copy in `torrents/` is
        // written after, without waiting for the disk.
        if let Err(e) = self
            .write(store, vec![Touch::Added(added.id, torrent)])
            .await
        {
            // Not durable: not added (a restart would not know it).
            let mut st = self.lock();
            st.entries.remove(&added.id);
            st.by_hash.remove(&hash);
            st.queue.retain(|q| *q != added.id);
            st.files_added -= 1;
            return Err(state_err(e));
        }
        self.launch(added.id, false);
        Ok(AddOutcome::Added(added))
    }

    async fn change(&self, select: Selection, change: TransferChange) -> Result<(), BackendError> {
        self.change_transfers(select, change).await
    }

    async fn act(&self, select: Selection, action: Action) -> Result<(), BackendError> {
        let pause = match action {
            Action::Start | Action::StartNow => false,
            Action::Stop => true,
            Action::Verify => return self.verify(select).await,
            Action::Reannounce => {
                let eids: Vec<EngineId> = {
                    let mut st = self.lock();
                    let now = unix_now();
                    let ids = st.selected(&select, None);
                    ids.into_iter()
                        .filter_map(|id| {
                            let e = st.entries.get_mut(&id)?;
                            e.edited = now;
                            e.engine_id
                        })
                        .collect()
                };
                for eid in eids {
                    self.0.engine.reannounce(eid).await;
                }
                return Ok(());
            }
            Action::QueueTop | Action::QueueUp | Action::QueueDown | Action::QueueBottom => {
                return self.queue_move(select, action).await;
            }
        };
        let (targets, restart, changed) = {
            let mut st = self.lock();
            let now = unix_now();
            let mut targets = Vec::new();
            let mut restart = Vec::new();
            let mut changed = Vec::new();
            for id in st.selected(&select, None) {
                let Some(e) = st.entries.get_mut(&id) else {
                    continue;
                };
                if e.record.paused == pause && e.failed.is_none() {
                    continue;
                }
                e.record.paused = pause;
                e.edited = now;
                changed.push(id);
                if !pause {
                    e.started = Some(now);
                    e.record.finished = false;
                }
                match e.engine_id {
                    Some(eid) => targets.push(eid),
                    // Refused before: starting it tries again; a magnet
                    // fetches its metadata.
                    None if !pause
                        && (e.failed.is_some() || matches!(e.content, Content::Magnet(_))) =>
                    {
                        restart.push(id)
                    }
                    None => {}
                }
            }
            (targets, restart, changed)
        };
        for eid in targets {
            if pause {
                self.0.engine.pause(eid).await;
            } else {
                self.0.engine.resume(eid).await;
            }
        }
        for id in restart {
            self.launch(id, false);
        }
        self.persist(vec![Touch::Transfers(changed)])
            .await
            .map_err(state_err)
    }

    async fn remove(&self, select: Selection, delete_local_data: bool) -> Result<(), BackendError> {
        let mut orphans_gone = Vec::new();
        let taken: Vec<(Entry, bool)> = {
            let mut st = self.lock();
            let now = unix_now();
            let ids = st.selected(&select, None);
            let mut taken = Vec::new();
            let first_removed = st.removed.len();
            // How many entries share each engine transfer (an ed2k link
            // that joined a torrent shares its transfer): counted once,
            // not by a walk over every entry per removal (removing all of
            // 10,000 walked 10^8).
            let mut sharing: HashMap<EngineId, u32> = HashMap::new();
            for eid in st.entries.values().filter_map(|e| e.engine_id) {
                *sharing.entry(eid).or_default() += 1;
            }
            let mut gone = std::collections::HashSet::new();
            // From the highest id down: each removal then shifts only the
            // entries above it (removing all 10,000 moves none).
            for id in ids.into_iter().rev() {
                let Some(e) = st.entries.remove(&id) else {
                    continue;
                };
                st.by_hash.remove(&e.base.hash);
                gone.insert(id);
                st.removed.push((id, now));
                if e.adding {
                    let paths = e.content.paths(&e.record.download_dir);
                    let (gone, gone_rx) = tokio::sync::oneshot::channel();
                    orphans_gone.push(gone_rx);
                    st.orphans.insert(
                        id,
                        Orphan {
                            paths,
                            delete: delete_local_data,
                            gone: Some(gone),
                        },
                    );
                }
                // An ed2k link that joined a torrent shares its transfer:
                // it goes with the last entry holding it.
                let shared = e.engine_id.is_some_and(|eid| {
                    let n = sharing.entry(eid).or_default();
                    *n = n.saturating_sub(1);
                    *n > 0
                });
                taken.push((e, shared));
            }
            if !gone.is_empty() {
                st.queue.retain(|q| !gone.contains(q));
            }
            let cutoff = now.saturating_sub(RECENTLY_ACTIVE_SECS);
            st.removed[first_removed..].reverse();
            st.removed.retain(|(_, t)| *t >= cutoff);
            taken.reverse();
            taken
        };
        if taken.is_empty() {
            return Ok(());
        }
        // The store deletes the .torrent copies once the removal is
        // durable.
        let ids = taken.iter().map(|(e, _)| e.record.id).collect();
        self.persist(vec![Touch::Removed(ids)])
            .await
            .map_err(state_err)?;
        // Out of the engine (each answered once its storage is closed)
        // and off the disk, [`REMOVALS_AT_ONCE`] at a time: one after
        // another, removing 10,000 took 21 s of waiting on file closes.
        let mut running = tokio::task::JoinSet::new();
        for (e, shared) in taken {
            if shared {
                continue;
            }
            if running.len() >= super::REMOVALS_AT_ONCE {
                running.join_next().await;
            }
            let engine = self.0.engine.clone();
            let data =
                (delete_local_data && !e.adding).then(|| e.content.paths(&e.record.download_dir));
            let eid = e.engine_id;
            running.spawn(async move {
                if let Some(eid) = eid {
                    engine.remove_closed(eid).await;
                }
                if let Some(paths) = data {
                    delete_data(paths).await;
                }
            });
        }
        while running.join_next().await.is_some() {}
        // Those being added leave once their add completes: answered after
        // that (their data gone, if asked), within a bound.
        let all_gone = async {
            for gone in orphans_gone {
                // An add that failed drops its sender: gone too.
                let _ = gone.await;
            }
        };
        let _ = tokio::time::timeout(super::ORPHANS_WAIT, all_gone).await;
        Ok(())
    }

    async fn set_location(
        &self,
        select: Selection,
        location: PathBuf,
        move_data: bool,
    ) -> Result<(), BackendError> {
        self.move_to(select, location, move_data).await
    }

    async fn free_space(&self, path: PathBuf) -> Result<FreeSpace, BackendError> {
        free_space_of(&path)
    }

    async fn port_is_open(&self) -> Result<bool, BackendError> {
        Ok(self.0.cfg.peer_port != 0)
    }

    async fn close(&self) -> Result<(), BackendError> {
        self.0.closed.store(true, Ordering::Release);
        self.0.close.notify_waiters();
        Ok(())
    }
}
