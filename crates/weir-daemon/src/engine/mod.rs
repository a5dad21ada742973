//! [`EngineBackend`]: the daemon's [`Backend`] over the engine
//! (`weir_runtime::engine`), every transfer of every protocol in its one
//! session, with crash-safe state ([`state`]).
//!
//! - RPC ids are the daemon's own, kept in the state file: stable across
//!   restarts, never reused. Each maps to the engine's transfer once its
//!   storage is open.
//! - `torrent-add` appends the transfer (with its .torrent) to the state's
//!   log durably before it answers ([`store`]); the engine then opens the
//!   storage in the background (data already on disk is checked there) and
//!   the transfer reads as verifying meanwhile.
//! - At start every transfer of the state comes back (paused ones paused);
//!   the storage journals say which pieces are verified.
//! - Session caps are shared token buckets the engine's connections obey:
//!   `session-set` (and the daemon's config reload) change their rates.

mod change;
mod entries;
pub mod log;
mod magnet;
mod methods;
mod persist;
pub mod state;
pub mod store;
mod view;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use weir_bt::magnet::Magnet;
use weir_bt::metainfo::Metainfo;
use weir_core::policy::NetPolicy;
use weir_ed2k::link::FileLink;
use weir_runtime::bandwidth::SharedBucket;
use weir_runtime::engine::{DataPaths, Ed2kSource, EngineHandle, TorrentSource};
use weir_runtime::storage::OpenOptions;
use weir_session::TransferInfo;

use crate::backend::*;
use crate::sources::{Parsed, of_link, of_metainfo, parse_ed2k, parse_metainfo};
use persist::Touch;
use state::{Record, RecordSource, SavedCaps, SharedRecord, StateDir, StateError};
use store::Store;

/// The engine's name for a transfer.
type EngineId = weir_session::TransferId;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How the backend runs.
#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// The state directory (`--state`).
    pub state_dir: PathBuf,
    /// The default download directory (`--download-dir`), absolute.
    pub download_dir: PathBuf,
    /// The port BitTorrent peers reach us on (0: not listening).
    pub peer_port: u16,
    /// Where URL fetches may go.
    pub policy: NetPolicy,
    /// The engine's global download bucket (its rate is the session cap).
    pub down: Arc<SharedBucket>,
    /// The engine's global upload bucket.
    pub up: Arc<SharedBucket>,
    /// The address BitTorrent connections are made from (a magnet's
    /// metadata is fetched from it too); `None`: the system's choice.
    pub listen_ip: Option<IpAddr>,
    /// Ask a magnet's trackers for peers to fetch its metadata from.
    pub use_trackers: bool,
    /// The UDP port of the engine's DHT node, if it runs one
    /// (`dht-enabled` in session-get; fixed at start: a session-set cannot
    /// change it). A magnet's metadata fetch advertises it (BEP 5).
    pub dht_port: Option<u16>,
    /// The engine runs Local Service Discovery (`lpd-enabled` in
    /// session-get; `--lsd`, fixed at start like the DHT).
    pub lsd_enabled: bool,
    /// The engine's MSE/PE policy at start (`--encryption`); a
    /// `session-set` of `encryption` changes it (and is kept).
    pub encryption: weir_bt::mse::Encryption,
}

impl BackendConfig {
    /// A backend over `state_dir` and `download_dir` on loopback with no
    /// listener, trackers, DHT or LSD, uncapped: where a test or an
    /// in-process tool starts (the daemon fills every field from its
    /// flags).
    pub fn local(state_dir: &std::path::Path, download_dir: &std::path::Path) -> BackendConfig {
        BackendConfig {
            state_dir: state_dir.to_path_buf(),
            download_dir: download_dir.to_path_buf(),
            peer_port: 0,
            policy: NetPolicy::loopback(),
            down: weir_runtime::bandwidth::bucket(0),
            up: weir_runtime::bandwidth::bucket(0),
            listen_ip: None,
            use_trackers: false,
            dht_port: None,
            lsd_enabled: false,
            encryption: weir_bt::mse::Encryption::Prefer,
        }
    }
}

/// The engine's policy for Transmission's `encryption` value.
pub fn engine_encryption(e: Encryption) -> weir_bt::mse::Encryption {
    match e {
        Encryption::Required => weir_bt::mse::Encryption::Require,
        Encryption::Preferred => weir_bt::mse::Encryption::Prefer,
        Encryption::Tolerated => weir_bt::mse::Encryption::Allow,
    }
}

/// Transmission's value for the engine's policy. `off` has none (every
/// Transmission policy accepts encrypted peers): it reads as `tolerated`,
/// the nearest.
pub fn rpc_encryption(p: weir_bt::mse::Encryption) -> Encryption {
    match p {
        weir_bt::mse::Encryption::Require => Encryption::Required,
        weir_bt::mse::Encryption::Prefer => Encryption::Preferred,
        weir_bt::mse::Encryption::Allow | weir_bt::mse::Encryption::Off => Encryption::Tolerated,
    }
}

/// What a transfer is made of.
#[derive(Clone, Debug)]
enum Content {
    Torrent(Arc<Metainfo>),
    /// Boxed: inline, the link (120 bytes) sized every entry.
    Ed2k(Box<FileLink>),
    /// A magnet whose metadata is not here yet: no data of its own.
    Magnet(Arc<Magnet>),
}

impl Content {
    fn paths(&self, dir: &Path) -> DataPaths {
        match self {
            Content::Torrent(m) => DataPaths::torrent(m, dir),
            Content::Ed2k(l) => DataPaths::ed2k(l, dir),
            Content::Magnet(_) => DataPaths {
                root: dir.to_path_buf(),
                files: Vec::new(),
                side: Vec::new(),
                own_root: false,
            },
        }
    }
}

/// One transfer of the daemon.
pub(crate) struct Entry {
    /// Its settings, shared with the store's state while the two agree.
    record: SharedRecord,
    content: Content,
    /// What the content says (name, sizes, pieces, link), id and directory
    /// set.
    base: Arc<view::Base>,
    files: Vec<FileView>,
    engine_id: Option<EngineId>,
    /// Its storage is being opened.
    adding: bool,
    /// A magnet's metadata is being fetched.
    fetching: bool,
    /// Why the last metadata fetch failed, if it did (shown while the
    /// next one runs).
    fetch_error: Option<Arc<str>>,
    /// Unix time data last moved (the idle-seeding limit counts from it).
    last_active: u64,
    /// The engine refused it.
    failed: Option<Arc<str>>,
    started: Option<u64>,
    edited: u64,
    /// Payload bytes of earlier runs (download, upload).
    earlier: (u64, u64),
    /// Payload bytes of this run, as last read from the engine.
    run: (u64, u64),
    /// The last list view (`torrent-get` without files, peers, trackers
    /// or pieces), reused while nothing it shows changed.
    list_view: Option<view::CachedView>,
}

impl Entry {
    /// Takes this run's traffic from the engine's figures.
    fn saw(&mut self, i: &TransferInfo) {
        self.run = (i.downloaded.0 + i.downloaded.1, i.uploaded.0 + i.uploaded.1);
    }

    /// One flag per file of its torrent, from the record's `unwanted`
    /// (`None`: every file wanted, or not a torrent yet). Indices past the
    /// torrent's files (given with a magnet before its metadata) are
    /// ignored.
    fn wanted_files(&self) -> Option<Arc<[bool]>> {
        let Content::Torrent(meta) = &self.content else {
            return None;
        };
        if self.record.unwanted.is_empty() {
            return None;
        }
        let mut flags = vec![true; meta.info.files.len()];
        for &i in &self.record.unwanted {
            if let Some(f) = flags.get_mut(i as usize) {
                *f = false;
            }
        }
        Some(flags.into())
    }

    /// Marks its file views wanted or not, from the record.
    fn mark_wanted(&mut self) {
        for (i, f) in self.files.iter_mut().enumerate() {
            f.wanted = self.record.unwanted.binary_search(&(i as u32)).is_err();
            f.priority = match self
                .record
                .priorities
                .binary_search_by_key(&(i as u32), |(f, _)| *f)
            {
                Ok(at) if self.record.priorities[at].1 > 0 => Priority::High,
                Ok(_) => Priority::Low,
                Err(_) => Priority::Normal,
            };
        }
        self.list_view = None;
    }

    /// One priority per file of its torrent, from the record (`None`:
    /// every file normal, or not a torrent yet). Indices past the torrent's
    /// files are ignored.
    fn file_priorities(&self) -> Option<Arc<[weir_core::picker::Priority]>> {
        use weir_core::picker::Priority as P;
        let Content::Torrent(meta) = &self.content else {
            return None;
        };
        if self.record.priorities.is_empty() {
            return None;
        }
        let mut out = vec![P::Normal; meta.info.files.len()];
        for &(i, level) in &self.record.priorities {
            if let Some(p) = out.get_mut(i as usize) {
                *p = if level > 0 { P::High } else { P::Low };
            }
        }
        Some(out.into())
    }

    /// The record as it is to be saved: traffic of every run so far. The
    /// entry's own record (shared, not copied) when its traffic figures
    /// are still those.
    fn to_record(&self) -> SharedRecord {
        let traffic = (self.earlier.0 + self.run.0, self.earlier.1 + self.run.1);
        let mut r = self.record.clone();
        if (r.downloaded, r.uploaded) != traffic {
            (r.downloaded, r.uploaded) = traffic;
        }
        r
    }
}

/// Engine adds a restart keeps in flight (see
/// [`EngineBackend::launch_all`]): enough to keep the engine's storage
/// openings busy.
const LAUNCHES_AT_ONCE: usize = 16;
/// Transfers a `torrent-remove` takes out of the engine (and off the
/// disk) at once.
const REMOVALS_AT_ONCE: usize = 16;

/// What an engine add of a transfer takes (see
/// [`EngineBackend::prepare_launch`]).
struct Launch {
    content: Content,
    dir: PathBuf,
    paused: bool,
    peers: Vec<std::net::SocketAddr>,
    files: Option<Arc<[bool]>>,
    priorities: Option<Arc<[weir_core::picker::Priority]>>,
    recheck: bool,
}

/// A transfer removed while its storage was being opened: removed from the
/// engine once the add completes (and its data deleted, if asked), then
/// `gone` is told.
struct Orphan {
    paths: DataPaths,
    delete: bool,
    gone: Option<tokio::sync::oneshot::Sender<()>>,
}

/// How long a `torrent-remove` waits for transfers it removed while they
/// were being added to leave the engine (and their data the disk) before
/// it answers; past it they still go, after the answer. A re-add (a
/// priority or file change) takes milliseconds; only one hashing a large
/// download again takes longer.
const ORPHANS_WAIT: Duration = Duration::from_secs(10);

struct Inner {
    settings: SessionSettings,
    entries: entries::Entries,
    by_hash: HashMap<TransferHash, TransferId>,
    orphans: HashMap<TransferId, Orphan>,
    removed: Vec<(TransferId, u64)>,
    next_id: TransferId,
    caps: SavedCaps,
    started: u64,
    files_added: u64,
    /// Queue order (`queuePosition` is the index).
    queue: Queue,
    /// What `session-set` changed, merged (kept in the state).
    saved: SessionChange,
}

/// The queue order, and every transfer's place in it built when first
/// asked after a change (a search of the queue per transfer made a get of
/// 10,000 quadratic; a map built per `torrent-get` was a tenth of one at
/// 1,000 idle transfers). Changing the order goes through `DerefMut`,
/// which forgets the places.
#[derive(Default)]
pub(super) struct Queue {
    ids: Vec<TransferId>,
    positions: Option<Arc<HashMap<TransferId, u32>>>,
}

impl std::ops::Deref for Queue {
    type Target = Vec<TransferId>;

    fn deref(&self) -> &Vec<TransferId> {
        &self.ids
    }
}

impl std::ops::DerefMut for Queue {
    fn deref_mut(&mut self) -> &mut Vec<TransferId> {
        self.positions = None;
        &mut self.ids
    }
}

impl Inner {
    /// Every transfer's place in the queue, from 0.
    fn queue_positions(&mut self) -> Arc<HashMap<TransferId, u32>> {
        let q = &mut self.queue;
        q.positions
            .get_or_insert_with(|| {
                Arc::new(
                    q.ids
                        .iter()
                        .enumerate()
                        .map(|(i, id)| (*id, i as u32))
                        .collect(),
                )
            })
            .clone()
    }

    fn selected(&self, select: &Selection, infos: Option<&Infos<'_>>) -> Vec<TransferId> {
        let cutoff = unix_now().saturating_sub(RECENTLY_ACTIVE_SECS);
        self.entries
            .values()
            .filter(|e| is_selected(e, select, infos, cutoff))
            .map(|e| e.record.id)
            .collect()
    }
}

/// Whether `e` is in `select` (`cutoff`: the Unix time from which a change
/// makes it recently active).
fn is_selected(e: &Entry, select: &Selection, infos: Option<&Infos<'_>>, cutoff: u64) -> bool {
    match select {
        Selection::RecentlyActive => {
            e.edited >= cutoff
                || e.record.done.is_some_and(|d| d >= cutoff)
                || e.engine_id
                    .and_then(|id| infos.and_then(|m| m.get(&id)))
                    .is_some_and(|i| i.download_rate > 0.0 || i.upload_rate > 0.0)
        }
        s => s.matches(e.record.id, &e.base.hash),
    }
}

/// The engine's snapshot by engine id. The snapshot comes in id order
/// (the session keeps its transfers sorted), so lookups are a binary
/// search over it as it is, with nothing built per request; an unsorted
/// one (never made by the engine) is indexed by a sorted list of
/// references first.
pub(super) enum Infos<'a> {
    /// Sorted as it came, with where the last lookup found its id (a walk
    /// of the entries in id order finds the engine's ids in the same
    /// order: the next one is usually just after).
    Sorted(&'a [TransferInfo], std::cell::Cell<usize>),
    Indexed(Vec<&'a TransferInfo>),
}

impl<'a> Infos<'a> {
    /// The snapshot `infos`, ready for lookups.
    pub(super) fn new(infos: &'a [TransferInfo]) -> Self {
        if infos.is_sorted_by_key(|i| i.id) {
            return Infos::Sorted(infos, std::cell::Cell::new(0));
        }
        let mut v: Vec<&TransferInfo> = infos.iter().collect();
        v.sort_unstable_by_key(|i| i.id);
        Infos::Indexed(v)
    }

    /// The info of transfer `id`, if the snapshot has it.
    pub(super) fn get(&self, id: &EngineId) -> Option<&'a TransferInfo> {
        match self {
            Infos::Sorted(s, last) => {
                let at = last.get();
                let k = (at..s.len().min(at + 2))
                    .find(|&k| s[k].id == *id)
                    .or_else(|| s.binary_search_by_key(id, |i| i.id).ok())?;
                last.set(k);
                Some(&s[k])
            }
            Infos::Indexed(v) => v.binary_search_by_key(id, |i| i.id).ok().map(|k| v[k]),
        }
    }
}

struct Shared {
    engine: EngineHandle,
    cfg: BackendConfig,
    dir: StateDir,
    inner: Mutex<Inner>,
    /// The durable state; its lock orders state writes (each writes the
    /// transfers as they are when it starts, so a later write never loses
    /// an earlier change).
    store: Arc<tokio::sync::Mutex<Store>>,
    closed: AtomicBool,
    close: Notify,
}

/// The daemon's backend over a running engine.
#[derive(Clone)]
pub struct EngineBackend(Arc<Shared>);

impl std::fmt::Debug for EngineBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBackend")
            .field("state_dir", &self.0.cfg.state_dir)
            .finish_non_exhaustive()
    }
}

/// Rate of a cap in bytes/s (0: unlimited).
fn cap_rate(l: SpeedLimit) -> u64 {
    cap_of(l.kbps, l.enabled)
}

/// Rate of a cap of `kbps` kB/s in bytes/s when `on` (0: unlimited; a cap
/// of 0 kB/s is one byte a second, the least a bucket can grant).
fn cap_of(kbps: u64, on: bool) -> u64 {
    if on {
        kbps.saturating_mul(1000).max(1)
    } else {
        0
    }
}

impl EngineBackend {
    /// Loads the state under `cfg.state_dir` and starts every transfer it
    /// lists in `engine`. A damaged state file, or a kept .torrent that is
    /// missing or does not match, is refused with an error naming it.
    pub async fn start(cfg: BackendConfig, engine: EngineHandle) -> Result<Self, StateError> {
        let path = cfg.state_dir.clone();
        let (store, state, contents) = tokio::task::spawn_blocking(move || {
            let store = Store::open(&path)?;
            let state = store.state().clone();
            let mut contents = Vec::with_capacity(state.transfers.len());
            for r in &state.transfers {
                contents.push(restore(store.dir(), r)?);
            }
            Ok::<_, StateError>((store, state, contents))
        })
        .await
        .map_err(|e| StateError::Io {
            path: cfg.state_dir.clone(),
            source: std::io::Error::other(e),
        })??;
        let settings = SessionSettings {
            download_dir: Arc::from(cfg.download_dir.to_string_lossy().as_ref()),
            config_dir: Arc::from(cfg.state_dir.to_string_lossy().as_ref()),
            peer_port: cfg.peer_port,
            encryption: rpc_encryption(cfg.encryption),
            ..SessionSettings::default()
        };
        let mut inner = Inner {
            settings,
            entries: entries::Entries::default(),
            by_hash: HashMap::new(),
            orphans: HashMap::new(),
            removed: Vec::new(),
            next_id: state.next_id.max(1),
            caps: state.caps,
            started: unix_now(),
            files_added: 0,
            queue: Queue::default(),
            saved: state.settings.clone(),
        };
        // Settings of earlier session-sets, then the caps (the latest of
        // session-set and the config file).
        inner.settings.apply(state.settings.clone());
        if let Some(e) = state.settings.encryption {
            engine.set_encryption(engine_encryption(e)).await;
        }
        inner.settings.blocklist_enabled = false;
        inner.settings.peer_port = cfg.peer_port;
        inner.settings.dht_enabled = cfg.dht_port.is_some();
        inner.settings.lpd_enabled = cfg.lsd_enabled;
        if let Some((kbps, enabled)) = state.caps.down {
            inner.settings.speed_limit_down = SpeedLimit { kbps, enabled };
        }
        if let Some((kbps, enabled)) = state.caps.up {
            inner.settings.speed_limit_up = SpeedLimit { kbps, enabled };
        }
        let now = unix_now();
        let dir = store.dir().clone();
        for (r, (content, parsed)) in state.transfers.into_iter().zip(contents) {
            let e = entry(&dir, r, content, parsed, now);
            inner.by_hash.insert(e.base.hash, e.record.id);
            inner.entries.insert(e.record.id, e);
        }
        let mut queued = std::collections::HashSet::new();
        *inner.queue = state
            .queue
            .iter()
            .copied()
            .filter(|id| inner.entries.contains_key(id) && queued.insert(*id))
            .collect();
        // Those the saved order lacks go last (a set: checking the queue
        // for each made a restart with 10,000 transfers quadratic).
        for id in inner.entries.keys() {
            if !queued.contains(id) {
                inner.queue.push(*id);
            }
        }
        let ids: Vec<TransferId> = inner.entries.keys().copied().collect();
        let backend = EngineBackend(Arc::new(Shared {
            engine,
            cfg,
            dir,
            inner: Mutex::new(inner),
            store: Arc::new(tokio::sync::Mutex::new(store)),
            closed: AtomicBool::new(false),
            close: Notify::new(),
        }));
        backend.apply_caps();
        backend.launch_all(ids);
        backend.watch_limits(Duration::from_secs(1));
        Ok(backend)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data: go on.
        self.0.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of transfers.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets the session caps (bytes/s of 1000-byte kB, `None`: leave as
    /// is), as a config reload does; they persist like `session-set`.
    pub async fn set_caps(
        &self,
        down: Option<SpeedLimit>,
        up: Option<SpeedLimit>,
    ) -> Result<(), StateError> {
        {
            let mut st = self.lock();
            if let Some(d) = down {
                st.settings.speed_limit_down = d;
                st.caps.down = Some((d.kbps, d.enabled));
            }
            if let Some(u) = up {
                st.settings.speed_limit_up = u;
                st.caps.up = Some((u.kbps, u.enabled));
            }
        }
        self.apply_caps();
        self.persist(vec![Touch::Session]).await
    }

    fn apply_caps(&self) {
        let (down, up) = {
            let st = self.lock();
            (st.settings.speed_limit_down, st.settings.speed_limit_up)
        };
        // Live: an unlimited bucket has no refill task until capped.
        self.0.cfg.down.set_rate_live(cap_rate(down));
        self.0.cfg.up.set_rate_live(cap_rate(up));
    }

    /// Waits for `session-close`.
    pub async fn wait_closed(&self) {
        loop {
            let notified = self.0.close.notified();
            if self.0.closed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Reads every transfer's traffic from the engine, then writes the
    /// state: its totals, then a new snapshot (what a clean stop does).
    pub async fn save_all(&self) -> Result<(), StateError> {
        let infos = self.snapshot().await;
        {
            let by_eid = Infos::new(&infos);
            let mut st = self.lock();
            for e in st.entries.values_mut() {
                if let Some(i) = e.engine_id.and_then(|eid| by_eid.get(&eid)) {
                    e.saw(i);
                }
            }
        }
        self.persist(vec![Touch::Traffic]).await?;
        self.compact().await
    }

    /// Saves the traffic totals every `every` while they change (one small
    /// log record of the totals that moved), so that a kill -9 loses at
    /// most that much of them.
    pub fn save_periodically(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t.tick().await;
            let mut last = Vec::new();
            loop {
                t.tick().await;
                let totals: Vec<(TransferId, u64, u64)> = {
                    let infos = me.snapshot().await;
                    let by_eid = Infos::new(&infos);
                    let mut st = me.lock();
                    st.entries
                        .values_mut()
                        .map(|e| {
                            if let Some(i) = e.engine_id.and_then(|eid| by_eid.get(&eid)) {
                                e.saw(i);
                            }
                            (e.record.id, e.run.0, e.run.1)
                        })
                        .collect()
                };
                if totals != last {
                    if let Err(e) = me.persist(vec![Touch::Traffic]).await {
                        tracing::warn!("saving the state: {e}");
                    }
                    last = totals;
                }
            }
        })
    }

    /// Starts transfer `id` in the engine (its storage opens in the
    /// background; with `recheck` every piece on disk is hashed again
    /// instead of trusting the journal).
    fn launch(&self, id: TransferId, recheck: bool) {
        if let Some(l) = self.prepare_launch(id, recheck) {
            tokio::spawn(self.clone().run_launch(id, l));
        }
    }

    /// Starts every transfer of `ids`, at most [`LAUNCHES_AT_ONCE`] in
    /// flight (each is marked as being added at once), then gives the
    /// memory this freed back to the system. One task, not one
    /// per transfer: a daemon restarting with 10,000 transfers spawned
    /// 10,000 tasks (~1.5 KB each) that waited on the engine's four
    /// storage openings, and the heap they grew stayed held once they
    /// were done (15 MB of the restarted daemon's RSS).
    fn launch_all(&self, ids: Vec<TransferId>) {
        let launches: Vec<(TransferId, Launch)> = ids
            .into_iter()
            .filter_map(|id| Some((id, self.prepare_launch(id, false)?)))
            .collect();
        let me = self.clone();
        tokio::spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            for (id, l) in launches {
                if running.len() >= LAUNCHES_AT_ONCE {
                    running.join_next().await;
                }
                running.spawn(me.clone().run_launch(id, l));
            }
            while running.join_next().await.is_some() {}
            // The restore's short-lived allocations (the state read, every
            // .torrent parsed, the engine's openings) are gone: their holes
            // among what stays are given back.
            let _ = tokio::task::spawn_blocking(weir_runtime::memory::release_free_heap).await;
        });
    }

    /// Marks `id` as being added and takes what its engine add needs
    /// (`None`: gone, or a magnet, whose metadata is fetched instead).
    fn prepare_launch(&self, id: TransferId, recheck: bool) -> Option<Launch> {
        let mut st = self.lock();
        let e = st.entries.get_mut(&id)?;
        if let Content::Magnet(_) = e.content {
            drop(st);
            self.fetch_metadata(id);
            return None;
        }
        e.adding = true;
        e.failed = None;
        Some(Launch {
            content: e.content.clone(),
            dir: e.record.download_dir.to_path_buf(),
            paused: e.record.paused,
            peers: e.record.peers.clone(),
            files: e.wanted_files(),
            priorities: e.file_priorities(),
            recheck,
        })
    }

    /// Adds a prepared transfer to the engine and takes its answer.
    async fn run_launch(self, id: TransferId, l: Launch) {
        let open = OpenOptions {
            recheck: l.recheck,
            ..OpenOptions::download()
        };
        let Launch {
            content,
            dir,
            paused,
            peers,
            files,
            priorities,
            ..
        } = l;
        let r = match content {
            Content::Torrent(meta) => {
                self.0
                    .engine
                    .add_torrent(TorrentSource {
                        meta,
                        dir,
                        open,
                        peers,
                        seed: true,
                        paused,
                        files,
                        priorities,
                    })
                    .await
            }
            Content::Ed2k(link) => {
                self.0
                    .engine
                    .add_ed2k(Ed2kSource {
                        link: *link,
                        dir,
                        open,
                        peers,
                        seed: true,
                        paused,
                    })
                    .await
            }
            Content::Magnet(_) => return,
        };
        self.added(id, paused, r).await;
    }

    /// The engine's answer to [`launch`](Self::launch).
    async fn added(
        &self,
        id: TransferId,
        passed_paused: bool,
        r: Result<EngineId, weir_runtime::engine::EngineError>,
    ) {
        enum Then {
            Nothing,
            Pause(EngineId),
            Resume(EngineId),
            Drop(EngineId, Orphan),
        }
        let mut caps = None;
        let then = {
            let mut st = self.lock();
            if let Some(o) = st.orphans.remove(&id) {
                match r {
                    Ok(eid) => Then::Drop(eid, o),
                    Err(_) => Then::Nothing,
                }
            } else if let Some(e) = st.entries.get_mut(&id) {
                e.adding = false;
                match r {
                    Ok(eid) => {
                        e.engine_id = Some(eid);
                        let l = e.record.limits;
                        if l.down_on || l.up_on {
                            caps = Some((eid, l));
                        }
                        if e.record.paused && !passed_paused {
                            Then::Pause(eid)
                        } else if !e.record.paused && passed_paused {
                            Then::Resume(eid)
                        } else {
                            Then::Nothing
                        }
                    }
                    Err(err) => {
                        tracing::warn!("{}: {err}", e.base.name);
                        e.failed = Some(Arc::from(err.to_string().as_str()));
                        Then::Nothing
                    }
                }
            } else {
                Then::Nothing
            }
        };
        if let Some((eid, l)) = caps {
            self.0
                .engine
                .set_caps(
                    eid,
                    cap_of(l.down_kbps, l.down_on),
                    cap_of(l.up_kbps, l.up_on),
                )
                .await;
        }
        match then {
            Then::Nothing => {}
            Then::Pause(eid) => self.0.engine.pause(eid).await,
            Then::Resume(eid) => self.0.engine.resume(eid).await,
            Then::Drop(eid, o) => {
                self.0.engine.remove_closed(eid).await;
                if o.delete {
                    delete_data(o.paths).await;
                }
                if let Some(gone) = o.gone {
                    let _ = gone.send(());
                }
            }
        }
    }

    /// `torrent-verify`: each selected transfer leaves the engine (its
    /// storage closed) and comes back with every piece on disk hashed
    /// again; it reads as verifying meanwhile.
    async fn verify(&self, select: Selection) -> Result<(), BackendError> {
        let infos = self.snapshot().await;
        let by_eid = Infos::new(&infos);
        let targets: Vec<(TransferId, EngineId)> = {
            let mut st = self.lock();
            let now = unix_now();
            let ids = st.selected(&select, None);
            let mut out = Vec::new();
            for id in ids {
                let Some(e) = st.entries.get_mut(&id) else {
                    continue;
                };
                if e.adding {
                    continue;
                }
                e.edited = now;
                if let Some(i) = e.engine_id.and_then(|eid| by_eid.get(&eid)) {
                    e.saw(i);
                }
                if let Some(eid) = e.engine_id.take() {
                    e.adding = true;
                    // The engine's counters restart with the new transfer.
                    e.earlier = (e.earlier.0 + e.run.0, e.earlier.1 + e.run.1);
                    e.run = (0, 0);
                    out.push((id, eid));
                }
            }
            out
        };
        for (id, eid) in targets {
            self.0.engine.remove_closed(eid).await;
            self.launch(id, true);
        }
        Ok(())
    }

    async fn snapshot(&self) -> Arc<Vec<TransferInfo>> {
        self.0.engine.snapshot().await
    }
}

/// A record's content from the state directory.
fn restore(dir: &StateDir, r: &Record) -> Result<(Content, Parsed), StateError> {
    match &r.source {
        RecordSource::Torrent { info_hash } => {
            let path = dir.torrent_path(info_hash);
            let data = dir.read_torrent(info_hash)?;
            let meta = parse_metainfo(&data).map_err(|e| StateError::Corrupt {
                path: path.clone(),
                why: e.to_string(),
            })?;
            if TransferHash::Bt(meta.info_hash).to_hex() != info_hash.to_ascii_lowercase() {
                return Err(StateError::Corrupt {
                    path,
                    why: format!("its info-hash is not {info_hash}"),
                });
            }
            let parsed = of_metainfo(&meta);
            Ok((Content::Torrent(Arc::new(meta)), parsed))
        }
        RecordSource::Ed2k { link } => {
            let l = parse_ed2k(link).map_err(|e| StateError::Corrupt {
                path: dir.state_path(),
                why: format!("transfer {}: {e}", r.id),
            })?;
            let parsed = of_link(&l);
            Ok((Content::Ed2k(Box::new(l)), parsed))
        }
        RecordSource::Magnet { link } => {
            let (m, parsed) = magnet::parse(link).map_err(|e| StateError::Corrupt {
                path: dir.state_path(),
                why: format!("transfer {}: {e}", r.id),
            })?;
            Ok((Content::Magnet(Arc::new(m)), parsed))
        }
    }
}

fn entry(
    dir: &StateDir,
    record: SharedRecord,
    content: Content,
    parsed: Parsed,
    now: u64,
) -> Entry {
    let mut view = parsed.view;
    view.id = record.id;
    view.download_dir = record.download_dir.shown();
    let mut base = view::Base::of(&view);
    if let RecordSource::Torrent { .. } = &record.source {
        base = base.kept_torrent(dir.torrents_shown());
    }
    let mut e = Entry {
        started: (!record.paused).then_some(now),
        edited: now,
        earlier: (record.downloaded, record.uploaded),
        run: (0, 0),
        list_view: None,
        base: Arc::new(base),
        files: parsed.files,
        engine_id: None,
        adding: false,
        fetching: false,
        fetch_error: None,
        last_active: now,
        failed: None,
        content,
        record,
    };
    e.mark_wanted();
    e
}

/// Deletes a transfer's files, its journal and lock, and the folder made
/// for it once empty. Never follows a link out of the folder: a data path
/// that is a link is removed as a link.
async fn delete_data(p: DataPaths) {
    let _ = tokio::task::spawn_blocking(move || {
        for rel in p.files.iter().chain(&p.side) {
            let path = p.root.join(rel);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("{}: {e}", path.display()),
            }
            // Folders inside the transfer's root, once empty.
            let mut d = path.parent();
            while let Some(dir) = d {
                if dir == p.root || !dir.starts_with(&p.root) || std::fs::remove_dir(dir).is_err() {
                    break;
                }
                d = dir.parent();
            }
        }
        if p.own_root {
            let _ = std::fs::remove_dir(&p.root);
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A downloading transfer's info with `bytes_had` = `id`, for the
    /// engine's tests (the view tests change what they compare).
    pub(super) fn info(id: u32) -> TransferInfo {
        TransferInfo {
            id: weir_session::TransferId(id),
            name: Arc::from("t"),
            size: 1,
            wanted: 1,
            phase: weir_session::Phase::Downloading,
            info_hash: None,
            ed2k_hash: None,
            bytes_had: u64::from(id),
            downloaded: (0, 0),
            uploaded: (0, 0),
            download_rate: 0.0,
            upload_rate: 0.0,
            peers: 0,
            known: 0,
            hash_failures: 0,
            protocol_errors: 0,
            banned: 0,
            added_at: std::time::Instant::now(), // test-epoch
            complete_at: None,
            error: None,
            disk_full: None,
        }
    }

    /// A torrent of two 16 KiB pieces named after `i` (no data needed).
    fn tiny_torrent(i: usize) -> bytes::Bytes {
        let name = format!("t-{i:04}.bin");
        let mut t = format!(
            "d7:comment2:hi10:created by10:weir-bench4:infod6:lengthi20000e4:name{}:{name}12:piece lengthi16384e6:pieces40:",
            name.len()
        )
        .into_bytes();
        t.extend((0..40).map(|j| (i * 7 + j) as u8));
        t.extend_from_slice(b"ee");
        t.into()
    }

    /// How many entries hold the very record the store's state holds, and
    /// how many entries there are.
    async fn shared_records(b: &EngineBackend) -> (usize, usize) {
        let store = b.0.store.clone().lock_owned().await;
        let st = b.lock();
        let same = st
            .entries
            .values()
            .filter(|e| {
                store
                    .state()
                    .get(e.record.id)
                    .is_some_and(|r| r.ptr_eq(&e.record))
            })
            .count();
        (same, st.entries.len())
    }

    /// An idle transfer's record is held once, by its entry and the store
    /// together: after its add, after a change to it (the changed record is
    /// handed over, not copied) and after a restart from the state. Fails
    /// if either side keeps a copy of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_transfers_record_is_held_once() {
        use crate::backend::{Action, AddOutcome, AddRequest, AddSource, Backend, Selection};
        let tmp = weir_lab::TempDir::new("shared-record").unwrap();
        let cfg = || BackendConfig::local(&tmp.path().join("state"), &tmp.path().join("dl"));
        let engine = || async {
            let s = weir_session::SessionConfig::new(
                NetPolicy::loopback(),
                [7; 20],
                weir_ed2k::Md4Hash([9; 16]),
            );
            let mut c = weir_runtime::engine::EngineConfig::new(s);
            c.keep_running = true;
            c.use_trackers = false;
            weir_runtime::engine::Engine::start(c).await.unwrap()
        };
        let e1 = engine().await;
        let b = EngineBackend::start(cfg(), e1.handle()).await.unwrap();
        let mut ids = Vec::new();
        for i in 0..3 {
            let r = b
                .add(AddRequest::new(AddSource::Metainfo(tiny_torrent(i))))
                .await;
            let Ok(AddOutcome::Added(t)) = r else {
                panic!("add {i}: {r:?}")
            };
            ids.push(t.id);
        }
        assert_eq!(shared_records(&b).await, (3, 3), "after the adds");
        let one = Selection::Refs(vec![crate::backend::TransferRef::Id(ids[1])]);
        b.act(one, Action::Stop).await.unwrap();
        assert!(b.lock().entries[&ids[1]].record.paused);
        assert_eq!(shared_records(&b).await, (3, 3), "after a stop");
        b.save_all().await.unwrap();
        drop(b);
        e1.stop().await;
        let e2 = engine().await;
        let b = EngineBackend::start(cfg(), e2.handle()).await.unwrap();
        assert!(b.lock().entries[&ids[1]].record.paused, "the stop was kept");
        assert_eq!(shared_records(&b).await, (3, 3), "after a restart");
        drop(b);
        e2.stop().await;
    }

    /// A torrent's and a magnet's trackers are shown when asked for, in
    /// tier order with their scrape addresses, made from the source then
    /// (an entry holds no views of them).
    #[test]
    fn trackers_are_shown_from_the_source_when_asked_for() {
        let tmp = weir_lab::TempDir::new("tracker-views").unwrap();
        let dir = StateDir::open(&tmp.path().join("state")).unwrap();
        let t = b"d8:announce20:http://a.example/ann13:announce-listll25:http://a.example/announceel27:udp://b.example:80/announceee4:infod6:lengthi5e4:name1:x12:piece lengthi16384e6:pieces20:aaaaaaaaaaaaaaaaaaaaee";
        let m = parse_metainfo(t).unwrap();
        let source = RecordSource::Torrent {
            info_hash: TransferHash::Bt(m.info_hash).to_hex(),
        };
        let parsed = of_metainfo(&m);
        let torrent = entry(
            &dir,
            Record::test(1, source, "/data").into(),
            Content::Torrent(Arc::new(m)),
            parsed,
            1,
        );
        let link = "magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&tr=http%3A%2F%2Fc.example%2Fannounce";
        let (mg, parsed) = magnet::parse(link).unwrap();
        let source = RecordSource::Magnet { link: link.into() };
        let magnet = entry(
            &dir,
            Record::test(2, source, "/data").into(),
            Content::Magnet(Arc::new(mg)),
            parsed,
            1,
        );
        let shown = |e: &Entry, trackers: bool| {
            let detail = Detail {
                trackers,
                ..Detail::default()
            };
            view::fill(e, None, view::Absent::Stopped, None, detail, 1).trackers
        };
        assert!(shown(&torrent, false).is_empty());
        let v = shown(&torrent, true);
        let got: Vec<(u32, &str, &str)> = v
            .iter()
            .map(|t| (t.tier, &*t.announce, &*t.scrape))
            .collect();
        assert_eq!(
            got,
            [
                (0, "http://a.example/announce", "http://a.example/scrape"),
                (
                    1,
                    "udp://b.example:80/announce",
                    "udp://b.example:80/scrape"
                ),
            ]
        );
        let v = shown(&magnet, true);
        assert_eq!(v.len(), 1);
        assert_eq!(&*v[0].announce, "http://c.example/announce");
    }

    /// Transfers in one download folder show one copy of its name, and a
    /// torrent shows the path its .torrent is kept at, its magnet link,
    /// comment and creator, made when shown (no copy of any per transfer).
    #[test]
    fn transfers_share_their_folder_s_name_and_show_their_torrent_s_path() {
        let tmp = weir_lab::TempDir::new("shared-names").unwrap();
        let dir = StateDir::open(&tmp.path().join("state")).unwrap();
        let entries: Vec<Entry> = (0..3)
            .map(|i| {
                let m = parse_metainfo(&tiny_torrent(i)).unwrap();
                let hash = TransferHash::Bt(m.info_hash);
                let source = RecordSource::Torrent {
                    info_hash: hash.to_hex(),
                };
                let dir_of = if i < 2 { "/data/a" } else { "/data/b" };
                let record = Record::test(i as u64 + 1, source, dir_of);
                let parsed = of_metainfo(&m);
                entry(
                    &dir,
                    record.into(),
                    Content::Torrent(Arc::new(m)),
                    parsed,
                    1,
                )
            })
            .collect();
        let dirs: Vec<&Arc<str>> = entries.iter().map(|e| &e.base.download_dir).collect();
        assert!(Arc::ptr_eq(dirs[0], dirs[1]), "one copy for one folder");
        // The records hold that copy too, and so does one read back.
        assert!(Arc::ptr_eq(
            &entries[0].record.download_dir.shown(),
            dirs[0]
        ));
        let back: super::state::Folder = serde_json::from_str("\"/data/a\"").unwrap();
        assert!(Arc::ptr_eq(&back.shown(), dirs[0]));
        assert_eq!(serde_json::to_string(&back).unwrap(), "\"/data/a\"");
        assert_eq!((&**dirs[1], &**dirs[2]), ("/data/a", "/data/b"));
        for (i, e) in entries.iter().enumerate() {
            let shown = view::fill(e, None, view::Absent::Stopped, None, Detail::default(), 1);
            let kept = dir.torrent_path(&e.base.hash.to_hex());
            assert_eq!(&*shown.torrent_file, kept.to_string_lossy().as_ref());
            // The magnet link is made when shown, as the source made it.
            assert!(e.base.link.is_empty());
            let m = parse_metainfo(&tiny_torrent(i)).unwrap();
            let source = of_metainfo(&m).view;
            assert_eq!(shown.link, source.link);
            // So are its comment and creator.
            assert!(e.base.creator.is_empty() && e.base.comment.is_empty());
            assert_eq!(
                (&shown.creator, &shown.comment),
                (&source.creator, &source.comment)
            );
            assert_eq!((&*shown.creator, &*shown.comment), ("weir-bench", "hi"));
            assert!(shown.link.starts_with("magnet:?xt=urn:btih:"));
        }
    }

    /// Entries sit side by side, one per transfer: the record and an eD2k
    /// link are held behind pointers, so an entry stays small (560 bytes
    /// with both inline).
    #[test]
    fn an_entry_stays_small() {
        let size = std::mem::size_of::<Entry>();
        assert!(size <= 224, "an Entry is {size} bytes");
    }

    #[test]
    fn infos_are_found_in_any_order_sorted_or_not() {
        let ids = [2u32, 3, 5, 8, 13, 21, 34];
        let sorted: Vec<TransferInfo> = ids.iter().map(|&i| info(i)).collect();
        let mut shuffled = sorted.clone();
        shuffled.reverse();
        shuffled.swap(1, 4);
        for snap in [&sorted, &shuffled] {
            let m = Infos::new(snap);
            // In order, backwards, jumping, repeated, and absent ids.
            let asks = [2, 3, 5, 8, 13, 21, 34, 34, 21, 2, 34, 1, 4, 35, 5, 13, 8];
            for a in asks {
                let got = m.get(&weir_session::TransferId(a)).map(|i| i.bytes_had);
                let want = ids.contains(&a).then_some(u64::from(a));
                assert_eq!(got, want, "id {a}");
            }
        }
        assert!(Infos::new(&[]).get(&weir_session::TransferId(1)).is_none());
    }
}
