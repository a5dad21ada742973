//! [`FakeBackend`]: transfers kept in memory, for tests and benches of the
//! RPC server with real clients. It parses real .torrents, magnets and
//! ed2k links, can create (sparse) data files so that removing with data is
//! visible on disk, and moves transfers forward when told to
//! ([`FakeBackend::advance`]). It transfers nothing over any network.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::Notify;
use weir_core::policy::NetPolicy;

use crate::backend::*;

use crate::sources::{WithTrackers, from_ed2k, from_magnet, from_metainfo, read_bounded};

/// Bytes per second a simulated download moves.
pub const FAKE_RATE: u64 = 1_000_000;

use crate::disk::free_space_of;
use crate::sources::MAX_TORRENT;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

struct Entry {
    /// Shared with answers already sent; changed copy-on-write.
    view: Arc<TransferView>,
    files: Vec<FileView>,
    trackers: Vec<TrackerView>,
    materialized: bool,
}

impl From<WithTrackers> for Entry {
    fn from((p, trackers): WithTrackers) -> Self {
        Entry {
            view: Arc::new(p.view),
            files: p.files,
            trackers,
            materialized: false,
        }
    }
}

struct State {
    settings: SessionSettings,
    transfers: BTreeMap<TransferId, Entry>,
    by_hash: HashMap<TransferHash, TransferId>,
    removed: Vec<(TransferId, u64)>,
    next_id: TransferId,
    started: u64,
    files_added: u64,
    port_open: bool,
    closed: bool,
}

/// An in-memory [`Backend`].
pub struct FakeBackend {
    state: Mutex<State>,
    closed: Notify,
    policy: NetPolicy,
    materialize: bool,
}

impl FakeBackend {
    /// A fake with no transfers, downloading into `download_dir`.
    pub fn new(download_dir: impl AsRef<Path>) -> Self {
        let settings = SessionSettings {
            download_dir: Arc::from(download_dir.as_ref().to_string_lossy().as_ref()),
            config_dir: Arc::from("/nonexistent/weir-fake"),
            ..SessionSettings::default()
        };
        FakeBackend {
            state: Mutex::new(State {
                settings,
                transfers: BTreeMap::new(),
                by_hash: HashMap::new(),
                removed: Vec::new(),
                next_id: 1,
                started: now(),
                files_added: 0,
                port_open: false,
                closed: false,
            }),
            closed: Notify::new(),
            policy: NetPolicy::loopback(),
            materialize: false,
        }
    }

    /// Creates each added transfer's files (sparse, full length) under its
    /// download directory, so that `delete-local-data` can be seen.
    pub fn with_files(mut self) -> Self {
        self.materialize = true;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data: go on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `n` synthetic transfers (no files on disk, half of them
    /// downloading with peers and rates), for benches of `torrent-get`.
    pub fn insert_synthetic(&self, n: usize) {
        let mut st = self.lock();
        let dir = st.settings.download_dir.clone();
        for i in 0..n {
            let id = st.next_id;
            st.next_id += 1;
            let mut h = [0u8; 20];
            h[..8].copy_from_slice(&id.to_be_bytes());
            h[8..16].copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
            let hash = TransferHash::Bt(h);
            let mut v = TransferView::new(id, hash, format!("synthetic transfer {id:06}"));
            v.download_dir = dir.clone();
            v.total_size = 1_000_000_000 + id * 4096;
            v.size_when_done = v.total_size;
            v.piece_size = 1 << 20;
            v.piece_count = v.total_size.div_ceil(v.piece_size) as u32;
            v.file_count = 1;
            v.added_date = now();
            v.queue_position = (id - 1) as u32;
            if i % 2 == 0 {
                v.state = TransferState::Downloading;
                v.have_valid = v.total_size / 3;
                v.left_until_done = v.total_size - v.have_valid;
                v.rate_download = 2_500_000;
                v.rate_upload = 300_000;
                v.peers_connected = 12;
                v.peers_sending_to_us = 7;
                v.peers_getting_from_us = 3;
                v.eta = Eta::Secs(v.left_until_done / v.rate_download);
                v.downloaded_ever = v.have_valid;
                v.uploaded_ever = v.have_valid / 10;
                v.upload_ratio = Ratio::Value(0.1);
            } else {
                v.state = TransferState::Seeding;
                v.have_valid = v.total_size;
                v.left_until_done = 0;
                v.done_date = Some(now());
                v.uploaded_ever = v.total_size * 2;
                v.upload_ratio = Ratio::Infinite;
            }
            let files = vec![FileView {
                name: v.name.clone(),
                length: v.total_size,
                bytes_completed: v.have_valid,
                wanted: true,
                priority: Priority::Normal,
                begin_piece: 0,
                end_piece: v.piece_count,
            }];
            st.by_hash.insert(hash, id);
            st.transfers.insert(
                id,
                Entry {
                    view: Arc::new(v),
                    files,
                    trackers: Vec::new(),
                    materialized: false,
                },
            );
        }
    }

    /// Moves every running transfer `secs` seconds forward at
    /// [`FAKE_RATE`]: data arrives (a fake peer sends it), complete ones
    /// start seeding.
    pub fn advance(&self, secs: u64) {
        let mut st = self.lock();
        let t = now();
        for e in st.transfers.values_mut() {
            if e.view.state != TransferState::Downloading || e.view.total_size == 0 {
                continue;
            }
            let v = Arc::make_mut(&mut e.view);
            let step = (FAKE_RATE * secs).min(v.left_until_done);
            v.left_until_done -= step;
            v.have_valid += step;
            v.downloaded_ever += step;
            v.seconds_downloading += secs;
            v.activity_date = Some(t);
            let mut left = step;
            for f in e.files.iter_mut().filter(|f| f.wanted) {
                let take = (f.length - f.bytes_completed).min(left);
                f.bytes_completed += take;
                left -= take;
            }
            if v.left_until_done == 0 {
                v.state = TransferState::Seeding;
                v.done_date = Some(t);
                v.rate_download = 0;
                v.peers_sending_to_us = 0;
                v.peers_connected = 0;
                v.eta = Eta::NotAvailable;
            } else {
                v.rate_download = FAKE_RATE;
                v.peers_connected = 1;
                v.peers_sending_to_us = 1;
                v.eta = Eta::Secs(v.left_until_done / FAKE_RATE);
            }
            v.upload_ratio = ratio(v.uploaded_ever, v.downloaded_ever);
        }
    }

    /// A transfer's full view (files and trackers filled), for assertions.
    pub fn view(&self, id: TransferId) -> Option<TransferView> {
        let st = self.lock();
        st.transfers.get(&id).map(|e| {
            (*full_view(
                e,
                Detail {
                    files: true,
                    peers: true,
                    trackers: true,
                    pieces: true,
                },
            ))
            .clone()
        })
    }

    /// Number of transfers.
    pub fn len(&self) -> usize {
        self.lock().transfers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The session settings now.
    pub fn settings(&self) -> SessionSettings {
        self.lock().settings.clone()
    }

    /// What `port-test` answers.
    pub fn set_port_open(&self, open: bool) {
        self.lock().port_open = open;
    }

    /// Whether `session-close` was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits for `session-close`.
    pub async fn wait_closed(&self) {
        loop {
            let notified = self.closed.notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    fn insert(&self, mut e: Entry, req: &AddRequest) -> Result<AddOutcome, BackendError> {
        let mut st = self.lock();
        let hash = e.view.hash;
        if let Some(id) = st.by_hash.get(&hash) {
            let v = &st.transfers[id].view;
            return Ok(AddOutcome::Duplicate(AddedTransfer {
                id: v.id,
                hash,
                name: v.name.clone(),
            }));
        }
        let id = st.next_id;
        st.next_id += 1;
        let t = now();
        let v = Arc::make_mut(&mut e.view);
        v.id = id;
        v.added_date = t;
        v.edit_date = Some(t);
        v.queue_position = st.transfers.len() as u32;
        v.download_dir = match &req.download_dir {
            Some(d) => Arc::from(d.to_string_lossy().as_ref()),
            None => st.settings.download_dir.clone(),
        };
        v.labels = Arc::from(req.labels.clone());
        if let Some(p) = req.peer_limit {
            v.peer_limit = p;
        }
        if let Some(p) = req.bandwidth_priority {
            v.bandwidth_priority = p;
        }
        for i in &req.files_unwanted {
            if let Some(f) = e.files.get_mut(*i as usize) {
                f.wanted = false;
            }
        }
        for (list, p) in [
            (&req.priority_high, Priority::High),
            (&req.priority_low, Priority::Low),
            (&req.priority_normal, Priority::Normal),
        ] {
            for i in list {
                if let Some(f) = e.files.get_mut(*i as usize) {
                    f.priority = p;
                }
            }
        }
        recompute_wanted(&mut e);
        let paused = req.paused.unwrap_or(!st.settings.start_added_torrents);
        if !paused {
            start(Arc::make_mut(&mut e.view), t);
        }
        if self.materialize {
            materialize(&e)?;
            e.materialized = true;
        }
        st.files_added += 1;
        let added = AddedTransfer {
            id,
            hash,
            name: e.view.name.clone(),
        };
        st.by_hash.insert(hash, id);
        st.transfers.insert(id, e);
        Ok(AddOutcome::Added(added))
    }

    fn selected<'a>(st: &'a mut State, select: &Selection) -> Vec<&'a mut Entry> {
        let cutoff = now().saturating_sub(RECENTLY_ACTIVE_SECS);
        st.transfers
            .values_mut()
            .filter(|e| match select {
                Selection::RecentlyActive => recently_active(&e.view, cutoff),
                s => s.matches(e.view.id, &e.view.hash),
            })
            .collect()
    }
}

fn ratio(up: u64, down: u64) -> Ratio {
    match (up, down) {
        (0, 0) => Ratio::NotAvailable,
        (_, 0) => Ratio::Infinite,
        (u, d) => Ratio::Value(u as f64 / d as f64),
    }
}

fn recently_active(v: &TransferView, cutoff: u64) -> bool {
    [
        v.activity_date,
        v.edit_date,
        v.start_date,
        v.done_date,
        Some(v.added_date),
    ]
    .iter()
    .flatten()
    .any(|t| *t >= cutoff)
}

fn start(v: &mut TransferView, t: u64) {
    v.state = if v.left_until_done == 0 && v.total_size > 0 {
        TransferState::Seeding
    } else {
        TransferState::Downloading
    };
    v.start_date = Some(t);
    v.edit_date = Some(t);
    v.eta = if v.state == TransferState::Downloading {
        Eta::Unknown
    } else {
        Eta::NotAvailable
    };
}

fn stop(v: &mut TransferView, t: u64) {
    v.state = TransferState::Stopped;
    v.rate_download = 0;
    v.rate_upload = 0;
    v.peers_connected = 0;
    v.peers_sending_to_us = 0;
    v.peers_getting_from_us = 0;
    v.eta = Eta::NotAvailable;
    v.edit_date = Some(t);
}

/// Sizes follow the wanted files.
fn recompute_wanted(e: &mut Entry) {
    if e.files.is_empty() {
        return;
    }
    let wanted: u64 = e.files.iter().filter(|f| f.wanted).map(|f| f.length).sum();
    let have: u64 = e
        .files
        .iter()
        .filter(|f| f.wanted)
        .map(|f| f.bytes_completed)
        .sum();
    Arc::make_mut(&mut e.view).size_when_done = wanted;
    Arc::make_mut(&mut e.view).left_until_done = wanted - have.min(wanted);
}

/// The view an answer needs: the shared one when no costly part is asked
/// (an `Arc` clone, no copying), else a copy with those parts filled.
fn full_view(e: &Entry, d: Detail) -> Arc<TransferView> {
    if d == Detail::default() {
        return e.view.clone();
    }
    let mut v = (*e.view).clone();
    if d.files {
        v.files = e.files.clone();
    }
    if d.trackers {
        v.trackers = e.trackers.clone();
    }
    if d.peers && v.state == TransferState::Downloading && v.peers_sending_to_us > 0 {
        v.peers = vec![PeerView {
            address: std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2)),
            port: 51413,
            client_name: Arc::from("weir fake peer"),
            progress: 1.0,
            rate_to_client: v.rate_download,
            rate_to_peer: 0,
            is_encrypted: false,
            is_incoming: false,
            is_utp: false,
            client_is_choked: false,
            client_is_interested: true,
            peer_is_choked: true,
            peer_is_interested: false,
            is_downloading_from: true,
            is_uploading_to: false,
            source: PeerSource::Tracker,
        }];
    }
    if d.pieces && v.piece_count > 0 {
        let mut bits = vec![0u8; (v.piece_count as usize).div_ceil(8)];
        let have = (v.have_valid / v.piece_size.max(1)).min(v.piece_count.into()) as usize;
        for i in 0..have {
            bits[i / 8] |= 0x80 >> (i % 8);
        }
        v.pieces = Bytes::from(bits);
    }
    Arc::new(v)
}

fn file_paths(e: &Entry) -> Vec<PathBuf> {
    let dir = Path::new(&*e.view.download_dir);
    e.files.iter().map(|f| dir.join(&*f.name)).collect()
}

fn materialize(e: &Entry) -> Result<(), BackendError> {
    for (path, f) in file_paths(e).iter().zip(&e.files) {
        let io = |source| BackendError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let file = std::fs::File::create(path).map_err(io)?;
        file.set_len(f.length).map_err(io)?;
    }
    Ok(())
}

fn delete_data(e: &Entry) -> Result<(), BackendError> {
    let dir = PathBuf::from(&*e.view.download_dir);
    for path in file_paths(e) {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(BackendError::Io { path, source }),
        }
        // Remove the directories the transfer made, up to its download dir.
        let mut p = path.parent();
        while let Some(d) = p {
            if d == dir || !d.starts_with(&dir) || std::fs::remove_dir(d).is_err() {
                break;
            }
            p = d.parent();
        }
    }
    Ok(())
}

fn apply_files(
    e: &mut Entry,
    set: &FileSet,
    f: impl Fn(&mut FileView),
) -> Result<(), BackendError> {
    match set {
        FileSet::All => e.files.iter_mut().for_each(f),
        FileSet::Indices(list) => {
            if let Some(bad) = list.iter().find(|i| **i as usize >= e.files.len()) {
                return Err(BackendError::FileIndexOutOfRange(*bad));
            }
            for i in list {
                f(&mut e.files[*i as usize]);
            }
        }
    }
    Ok(())
}

fn apply_change(e: &mut Entry, c: &TransferChange, t: u64) -> Result<(), BackendError> {
    for (set, wanted) in [(&c.files_wanted, true), (&c.files_unwanted, false)] {
        if let Some(set) = set {
            apply_files(e, set, |f| f.wanted = wanted)?;
        }
    }
    for (set, p) in [
        (&c.priority_high, Priority::High),
        (&c.priority_low, Priority::Low),
        (&c.priority_normal, Priority::Normal),
    ] {
        if let Some(set) = set {
            apply_files(e, set, |f| f.priority = p)?;
        }
    }
    recompute_wanted(e);
    let v = Arc::make_mut(&mut e.view);
    if let Some(x) = c.download_limit {
        v.download_limit.kbps = x;
    }
    if let Some(x) = c.download_limited {
        v.download_limit.enabled = x;
    }
    if let Some(x) = c.upload_limit {
        v.upload_limit.kbps = x;
    }
    if let Some(x) = c.upload_limited {
        v.upload_limit.enabled = x;
    }
    if let Some(x) = c.bandwidth_priority {
        v.bandwidth_priority = x;
    }
    if let Some(x) = c.honors_session_limits {
        v.honors_session_limits = x;
    }
    if let Some(x) = &c.labels {
        v.labels = Arc::from(x.clone());
    }
    if let Some(x) = &c.location {
        v.download_dir = Arc::from(x.to_string_lossy().as_ref());
    }
    if let Some(x) = c.peer_limit {
        v.peer_limit = x;
    }
    if let Some(x) = c.seed_idle_limit {
        v.seed_idle_limit = x;
    }
    if let Some(x) = c.seed_idle_mode {
        v.seed_idle_mode = x;
    }
    if let Some(x) = c.seed_ratio_limit {
        v.seed_ratio_limit = x;
    }
    if let Some(x) = c.seed_ratio_mode {
        v.seed_ratio_mode = x;
    }
    if let Some(x) = c.sequential {
        v.sequential = x;
    }
    v.edit_date = Some(t);
    Ok(())
}

impl Backend for FakeBackend {
    async fn session(&self) -> Result<SessionSettings, BackendError> {
        let mut s = self.lock().settings.clone();
        s.download_dir_free_space = free_space_of(Path::new(&*s.download_dir))
            .ok()
            .map(|f| f.free);
        Ok(s)
    }

    async fn set_session(&self, change: SessionChange) -> Result<(), BackendError> {
        self.lock().settings.apply(change);
        Ok(())
    }

    async fn stats(&self) -> Result<SessionStats, BackendError> {
        let st = self.lock();
        let mut s = SessionStats {
            torrent_count: st.transfers.len() as u64,
            ..SessionStats::default()
        };
        for e in st.transfers.values() {
            if e.view.state == TransferState::Stopped {
                s.paused_torrent_count += 1;
            } else {
                s.active_torrent_count += 1;
            }
            s.download_speed += e.view.rate_download;
            s.upload_speed += e.view.rate_upload;
            s.current.downloaded_bytes += e.view.downloaded_ever;
            s.current.uploaded_bytes += e.view.uploaded_ever;
        }
        s.current.files_added = st.files_added;
        s.current.session_count = 1;
        s.current.seconds_active = now().saturating_sub(st.started);
        s.cumulative = s.current;
        Ok(s)
    }

    async fn transfers(&self, query: TransferQuery) -> Result<TransferList, BackendError> {
        let st = self.lock();
        let cutoff = now().saturating_sub(RECENTLY_ACTIVE_SECS);
        let pick = |e: &Entry| full_view(e, query.detail);
        let transfers = match &query.select {
            Selection::All => st.transfers.values().map(pick).collect(),
            Selection::RecentlyActive => st
                .transfers
                .values()
                .filter(|e| recently_active(&e.view, cutoff))
                .map(pick)
                .collect(),
            Selection::Refs(refs) => {
                let mut ids: Vec<TransferId> = refs
                    .iter()
                    .filter_map(|r| match r {
                        TransferRef::Id(i) => st.transfers.contains_key(i).then_some(*i),
                        TransferRef::Hash(h) => st.by_hash.get(h).copied(),
                    })
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                ids.iter().map(|i| pick(&st.transfers[i])).collect()
            }
        };
        let removed = if query.select == Selection::RecentlyActive {
            st.removed
                .iter()
                .filter(|(_, t)| *t >= cutoff)
                .map(|(id, _)| *id)
                .collect()
        } else {
            Vec::new()
        };
        Ok(TransferList {
            transfers,
            removed,
            rows: Vec::new(),
            written: Vec::new(),
        })
    }

    async fn add(&self, req: AddRequest) -> Result<AddOutcome, BackendError> {
        let entry = match &req.source {
            AddSource::Metainfo(b) => from_metainfo(b)?,
            AddSource::Path(p) => {
                let data = read_bounded(p)?;
                from_metainfo(&data)?
            }
            AddSource::Url(url) => {
                let data = crate::client::fetch(
                    &self.policy,
                    url,
                    req.cookies.as_deref(),
                    MAX_TORRENT,
                    Duration::from_secs(20),
                )
                .await
                .map_err(|e| BackendError::Fetch(format!("{url}: {e}")))?;
                from_metainfo(&data)?
            }
            AddSource::Magnet(link) => from_magnet(link)?,
            AddSource::Ed2k(link) => from_ed2k(link)?,
        };
        self.insert(entry.into(), &req)
    }

    async fn change(&self, select: Selection, change: TransferChange) -> Result<(), BackendError> {
        let mut st = self.lock();
        let t = now();
        for e in Self::selected(&mut st, &select) {
            apply_change(e, &change, t)?;
        }
        if let Some(pos) = change.queue_position {
            let ids: Vec<TransferId> = Self::selected(&mut st, &select)
                .iter()
                .map(|e| e.view.id)
                .collect();
            for id in ids {
                move_in_queue(&mut st, id, |_, _| pos as usize);
            }
        }
        Ok(())
    }

    async fn act(&self, select: Selection, action: Action) -> Result<(), BackendError> {
        let mut st = self.lock();
        let t = now();
        let ids: Vec<TransferId> = Self::selected(&mut st, &select)
            .iter()
            .map(|e| e.view.id)
            .collect();
        for id in ids {
            match action {
                Action::Start | Action::StartNow => {
                    if let Some(e) = st.transfers.get_mut(&id) {
                        if e.view.state == TransferState::Stopped {
                            start(Arc::make_mut(&mut e.view), t);
                        }
                    }
                }
                Action::Stop => {
                    if let Some(e) = st.transfers.get_mut(&id) {
                        stop(Arc::make_mut(&mut e.view), t);
                    }
                }
                Action::Verify | Action::Reannounce => {
                    if let Some(e) = st.transfers.get_mut(&id) {
                        Arc::make_mut(&mut e.view).edit_date = Some(t);
                    }
                }
                Action::QueueTop => move_in_queue(&mut st, id, |_, _| 0),
                Action::QueueBottom => move_in_queue(&mut st, id, |_, n| n),
                Action::QueueUp => move_in_queue(&mut st, id, |p, _| p.saturating_sub(1)),
                Action::QueueDown => move_in_queue(&mut st, id, |p, _| p + 1),
            }
        }
        Ok(())
    }

    async fn remove(&self, select: Selection, delete_local_data: bool) -> Result<(), BackendError> {
        let mut st = self.lock();
        let ids: Vec<TransferId> = Self::selected(&mut st, &select)
            .iter()
            .map(|e| e.view.id)
            .collect();
        let t = now();
        for id in ids {
            if let Some(e) = st.transfers.remove(&id) {
                st.by_hash.remove(&e.view.hash);
                st.removed.push((id, t));
                if delete_local_data && e.materialized {
                    delete_data(&e)?;
                }
            }
        }
        // Positions stay 0..n.
        let mut order: Vec<(u32, TransferId)> = st
            .transfers
            .values()
            .map(|e| (e.view.queue_position, e.view.id))
            .collect();
        order.sort_unstable();
        for (pos, (_, id)) in order.into_iter().enumerate() {
            if let Some(e) = st.transfers.get_mut(&id) {
                Arc::make_mut(&mut e.view).queue_position = pos as u32;
            }
        }
        let cutoff = t.saturating_sub(RECENTLY_ACTIVE_SECS);
        st.removed.retain(|(_, when)| *when >= cutoff);
        Ok(())
    }

    async fn set_location(
        &self,
        select: Selection,
        location: PathBuf,
        move_data: bool,
    ) -> Result<(), BackendError> {
        let mut st = self.lock();
        let t = now();
        for e in Self::selected(&mut st, &select) {
            if move_data && e.materialized {
                let old = file_paths(e);
                Arc::make_mut(&mut e.view).download_dir =
                    Arc::from(location.to_string_lossy().as_ref());
                for (from, to) in old.iter().zip(file_paths(e)) {
                    let io = |source| BackendError::Io {
                        path: to.clone(),
                        source,
                    };
                    if let Some(parent) = to.parent() {
                        std::fs::create_dir_all(parent).map_err(io)?;
                    }
                    std::fs::rename(from, &to).map_err(io)?;
                }
            } else {
                Arc::make_mut(&mut e.view).download_dir =
                    Arc::from(location.to_string_lossy().as_ref());
            }
            Arc::make_mut(&mut e.view).edit_date = Some(t);
        }
        Ok(())
    }

    async fn free_space(&self, path: PathBuf) -> Result<FreeSpace, BackendError> {
        free_space_of(&path)
    }

    async fn port_is_open(&self) -> Result<bool, BackendError> {
        Ok(self.lock().port_open)
    }

    async fn close(&self) -> Result<(), BackendError> {
        self.lock().closed = true;
        self.closed.notify_waiters();
        Ok(())
    }
}

/// Moves `id` to the position `to(current, last)` and renumbers the queue.
fn move_in_queue(st: &mut State, id: TransferId, to: impl Fn(usize, usize) -> usize) {
    let mut order: Vec<(u32, TransferId)> = st
        .transfers
        .values()
        .map(|e| (e.view.queue_position, e.view.id))
        .collect();
    order.sort_unstable();
    let mut ids: Vec<TransferId> = order.into_iter().map(|(_, i)| i).collect();
    let Some(cur) = ids.iter().position(|i| *i == id) else {
        return;
    };
    ids.remove(cur);
    let pos = to(cur, ids.len()).min(ids.len());
    ids.insert(pos, id);
    let t = now();
    for (p, i) in ids.into_iter().enumerate() {
        if let Some(e) = st.transfers.get_mut(&i) {
            if e.view.queue_position != p as u32 {
                Arc::make_mut(&mut e.view).queue_position = p as u32;
                Arc::make_mut(&mut e.view).edit_date = Some(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn progress_completes_and_seeds() {
        let f = FakeBackend::new("/tmp");
        let link = "ed2k://|file|a.bin|2500000|D3B6B09D73D3FE0DD41DDE5ED244215A|/";
        let AddOutcome::Added(t) = f
            .add(AddRequest::new(AddSource::Ed2k(link.into())))
            .await
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(t.hash.to_hex(), "d3b6b09d73d3fe0dd41dde5ed244215a");
        f.advance(1);
        let v = f.view(t.id).unwrap();
        assert_eq!(v.left_until_done, 1_500_000);
        assert_eq!(v.state, TransferState::Downloading);
        f.advance(2);
        let v = f.view(t.id).unwrap();
        assert_eq!(v.left_until_done, 0);
        assert_eq!(v.state, TransferState::Seeding);
        assert_eq!(v.files[0].bytes_completed, 2_500_000);
        let again = f
            .add(AddRequest::new(AddSource::Ed2k(link.into())))
            .await
            .unwrap();
        assert!(matches!(again, AddOutcome::Duplicate(_)));
    }

    #[tokio::test]
    async fn queue_moves_keep_positions_dense() {
        let f = FakeBackend::new("/tmp");
        f.insert_synthetic(4);
        f.act(Selection::Refs(vec![TransferRef::Id(4)]), Action::QueueTop)
            .await
            .unwrap();
        let pos: Vec<u32> = (1..=4).map(|i| f.view(i).unwrap().queue_position).collect();
        assert_eq!(pos, vec![1, 2, 3, 0]);
        f.remove(Selection::Refs(vec![TransferRef::Id(1)]), false)
            .await
            .unwrap();
        let pos: Vec<u32> = (2..=4).map(|i| f.view(i).unwrap().queue_position).collect();
        assert_eq!(pos, vec![1, 2, 0]);
    }
}
