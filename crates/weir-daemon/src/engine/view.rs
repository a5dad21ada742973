//! A transfer's [`TransferView`] from what the engine says of it
//! ([`TransferInfo`]) over what its content and the daemon's record say.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use weir_core::bitfield::Bitfield;
use weir_session::{Phase, TransferInfo};

use super::Entry;
use crate::backend::*;

/// What the view of a transfer not (yet) in the engine says.
pub(super) enum Absent {
    /// Its storage is being opened (data on disk hashed).
    Opening,
    /// The engine refused it; why.
    Failed(Arc<str>),
    /// Stopped before it was started.
    Stopped,
    /// A magnet fetching its metadata; why the last try failed, if one did.
    Fetching(Option<Arc<str>>),
}

/// A fingerprint of everything [`fill`] reads besides the entry's base
/// view, for a list without the costly parts: equal fingerprints give equal
/// views, so an idle transfer's view is built once and shared by every
/// `torrent-get` after (building and dropping 1,000 views, a clone of the
/// base and an `Arc` each, was a quarter of a 1,000-torrent get's CPU).
///
/// A 64-bit hash with this process's random keys (std's SipHash) rather than
/// a copy of the fields: the copy was 280 bytes per transfer, the hash costs
/// ~35 µs per 1,000 transfers per `torrent-get`. Two different states share
/// a fingerprint with odds of 2^-64 per comparison, and nobody outside the
/// process knows the keys to aim for one.
pub(super) fn fingerprint(
    e: &Entry,
    info: Option<&TransferInfo>,
    absent: &Absent,
    queue_position: u32,
    now: u64,
) -> u64 {
    static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    match info {
        Some(i) => {
            h.write_u8(1);
            (i.phase as u8).hash(&mut h);
            i.error.hash(&mut h);
            i.bytes_had.hash(&mut h);
            i.downloaded.hash(&mut h);
            i.uploaded.hash(&mut h);
            (i.download_rate.max(0.0) as u64).hash(&mut h);
            (i.upload_rate.max(0.0) as u64).hash(&mut h);
            i.peers.hash(&mut h);
        }
        None => h.write_u8(0),
    }
    match absent {
        Absent::Opening => h.write_u8(0),
        Absent::Failed(why) => {
            h.write_u8(1);
            why.hash(&mut h);
        }
        Absent::Stopped => h.write_u8(2),
        Absent::Fetching(why) => {
            h.write_u8(3);
            why.hash(&mut h);
        }
    }
    let r = &e.record;
    r.labels.hash(&mut h);
    r.added.hash(&mut h);
    r.done.hash(&mut h);
    r.finished.hash(&mut h);
    let l = &r.limits;
    (l.down_kbps, l.down_on, l.up_kbps, l.up_on).hash(&mut h);
    (
        l.ratio_limit.to_bits(),
        l.ratio_mode,
        l.idle_limit,
        l.idle_mode,
    )
        .hash(&mut h);
    e.started.hash(&mut h);
    e.edited.hash(&mut h);
    e.earlier.hash(&mut h);
    e.run.hash(&mut h);
    queue_position.hash(&mut h);
    moving(info).then_some(now).hash(&mut h);
    h.finish()
}

/// What a transfer's content and directory say of it: the parts of its
/// view that change only when its metadata comes or its data moves. Kept
/// instead of a whole [`TransferView`] with the rest at its defaults (704
/// bytes inline, against these ~220): at 10,000 idle torrents the whole
/// view was 8 MB of a daemon's heap.
#[derive(Clone, Debug)]
pub(super) struct Base {
    pub(super) id: TransferId,
    pub(super) hash: TransferHash,
    pub(super) name: Arc<str>,
    pub(super) download_dir: Arc<str>,
    /// The folder its .torrent is kept in, named `<hash>.torrent` (`None`:
    /// none kept). Shared by every transfer: the whole path, one per
    /// transfer, was ~100 bytes of each one's heap.
    pub(super) torrents_dir: Option<Arc<str>>,
    pub(super) comment: Arc<str>,
    pub(super) creator: Arc<str>,
    pub(super) link: Arc<str>,
    pub(super) total_size: u64,
    pub(super) size_when_done: u64,
    pub(super) left_until_done: u64,
    pub(super) piece_size: u64,
    pub(super) date_created: Option<u64>,
    pub(super) metadata_percent_complete: f64,
    pub(super) piece_count: u32,
    pub(super) file_count: u32,
    pub(super) is_private: bool,
}

impl Base {
    /// The parts of `v` (a view a source made: a torrent's, a magnet's, an
    /// eD2k link's) that a base keeps.
    pub(super) fn of(v: &TransferView) -> Base {
        Base {
            id: v.id,
            hash: v.hash,
            name: v.name.clone(),
            download_dir: v.download_dir.clone(),
            torrents_dir: None,
            comment: v.comment.clone(),
            creator: v.creator.clone(),
            link: v.link.clone(),
            total_size: v.total_size,
            size_when_done: v.size_when_done,
            left_until_done: v.left_until_done,
            piece_size: v.piece_size,
            date_created: v.date_created,
            metadata_percent_complete: v.metadata_percent_complete,
            piece_count: v.piece_count,
            file_count: v.file_count,
            is_private: v.is_private,
        }
    }

    /// The base of a torrent whose .torrent is kept in `torrents_dir`: its
    /// path, its magnet link, comment and creator are made when shown from
    /// its metainfo (see [`fill`]), not held (~250 bytes a transfer).
    pub(super) fn kept_torrent(mut self, torrents_dir: Arc<str>) -> Base {
        self.torrents_dir = Some(torrents_dir);
        self.link = Arc::default();
        self.comment = Arc::default();
        self.creator = Arc::default();
        self
    }

    /// The view it stands for, every other field at its default.
    pub(super) fn view(&self) -> TransferView {
        let mut v = TransferView::new(self.id, self.hash, self.name.clone());
        v.download_dir = self.download_dir.clone();
        if let Some(d) = &self.torrents_dir {
            v.torrent_file = Arc::from(format!("{d}/{}.torrent", self.hash.to_hex()));
        }
        v.comment = self.comment.clone();
        v.creator = self.creator.clone();
        v.link = self.link.clone();
        v.total_size = self.total_size;
        v.size_when_done = self.size_when_done;
        v.left_until_done = self.left_until_done;
        v.piece_size = self.piece_size;
        v.date_created = self.date_created;
        v.metadata_percent_complete = self.metadata_percent_complete;
        v.piece_count = self.piece_count;
        v.file_count = self.file_count;
        v.is_private = self.is_private;
        v
    }
}

/// What stands in the answer list for a transfer whose row is already
/// written (see [`TransferList::written`]): the writer copies the row and
/// never reads the view, so one shared empty view serves every such
/// transfer.
pub(super) fn written_stand_in() -> Arc<TransferView> {
    static EMPTY: std::sync::OnceLock<Arc<TransferView>> = std::sync::OnceLock::new();
    EMPTY
        .get_or_init(|| Arc::new(TransferView::new(0, TransferHash::Bt([0; 20]), "")))
        .clone()
}

/// An entry's last list view and what it was built from.
pub(super) struct CachedView {
    /// The base it was built over (held, so a new base is never mistaken
    /// for it by address).
    base: Arc<Base>,
    /// The [`fingerprint`] of what it was built from.
    key: u64,
    /// The view, until a row of it is cached for the field list asked: a
    /// request answered from a cached row lets it go (an idle transfer then
    /// keeps its rows, not a second full view), and a request for another
    /// field list builds it again.
    view: Option<Arc<TransferView>>,
    /// The answer rows written from the view: valid exactly as long as
    /// `key` and `base` hold. Made at the second request that finds the
    /// view unchanged, not with the view: made with it, each idle
    /// transfer's small cache sat between the views of the first answer,
    /// and the views, once let go, left holes the allocator could not give
    /// back (~0.9 KB of RSS a transfer at 10,000).
    rows: Option<Arc<RowCache>>,
}

/// What [`CachedView::get`] found for a transfer whose list view is still
/// valid.
pub(super) enum Cached {
    /// The row for the request's key, written before.
    Row(Arc<[u8]>),
    /// The view and its rows (none for this key yet).
    View(Arc<TransferView>, Arc<RowCache>),
    /// Valid rows but no view kept and none for this key: the caller builds
    /// the view again and gives it back with [`CachedView::keep`].
    Rebuild,
}

impl CachedView {
    /// What is cached for `e` if its base and the [`fingerprint`] of the
    /// other arguments (`key`) are what it was built from: the row for
    /// `row_key` if there is one (and then the view is let go), else the
    /// view.
    pub(super) fn get(e: &mut Entry, key: u64, row_key: Option<&[u8]>) -> Option<Cached> {
        let valid = e
            .list_view
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c.base, &e.base) && c.key == key);
        let c = e.list_view.as_mut().filter(|_| valid)?;
        if let Some(row) = row_key.and_then(|k| c.rows.as_ref()?.get(k)) {
            c.view = None;
            return Some(Cached::Row(row));
        }
        Some(match &c.view {
            Some(v) => Cached::View(v.clone(), c.rows.get_or_insert_with(Arc::default).clone()),
            None => Cached::Rebuild,
        })
    }

    /// Keeps `view`, built again for an entry whose cached rows are valid
    /// (after [`Cached::Rebuild`]); its rows.
    pub(super) fn keep(e: &mut Entry, view: Arc<TransferView>) -> Option<Arc<RowCache>> {
        let c = e.list_view.as_mut()?;
        c.view = Some(view);
        Some(c.rows.get_or_insert_with(Arc::default).clone())
    }

    /// Remembers `view`, built over `base` from what has fingerprint `key`.
    pub(super) fn new(base: Arc<Base>, key: u64, view: Arc<TransferView>) -> CachedView {
        CachedView {
            base,
            key,
            view: Some(view),
            rows: None,
        }
    }
}

fn moving(info: Option<&TransferInfo>) -> bool {
    info.is_some_and(|i| i.download_rate >= 1.0 || i.upload_rate >= 1.0)
}

/// The view of `e` at `now` (Unix seconds), with the parts `detail` asks.
pub(super) fn fill(
    e: &Entry,
    info: Option<&TransferInfo>,
    absent: Absent,
    pieces: Option<&Bitfield>,
    detail: Detail,
    now: u64,
) -> TransferView {
    let mut v = e.base.view();
    if let super::Content::Torrent(m) = &e.content {
        // What a kept torrent's base leaves to its metainfo.
        if v.link.is_empty() {
            v.link = Arc::from(crate::sources::magnet_link_of(m).as_str());
        }
        if v.comment.is_empty() {
            v.comment = crate::sources::shown_text(&m.comment);
        }
        if v.creator.is_empty() {
            v.creator = crate::sources::shown_text(&m.created_by);
        }
    }
    v.labels = Arc::from(e.record.labels.clone());
    v.added_date = e.record.added;
    v.done_date = e.record.done;
    v.start_date = e.started;
    v.edit_date = Some(e.edited);
    let l = e.record.limits;
    v.download_limit = SpeedLimit {
        kbps: l.down_kbps,
        enabled: l.down_on,
    };
    v.upload_limit = SpeedLimit {
        kbps: l.up_kbps,
        enabled: l.up_on,
    };
    v.seed_ratio_limit = l.ratio_limit;
    v.seed_ratio_mode = super::change::mode_of(l.ratio_mode);
    v.seed_idle_limit = l.idle_limit;
    v.seed_idle_mode = super::change::mode_of(l.idle_mode);
    v.is_finished = e.record.finished;
    let size = v.total_size;
    match info {
        Some(i) => {
            v.state = match i.phase {
                Phase::Checking => TransferState::Verifying,
                // Complete from the start (its journal says so), the
                // session has no completion time for it: it seeds.
                Phase::Downloading if i.wanted > 0 && i.bytes_had >= i.wanted => {
                    TransferState::Seeding
                }
                Phase::Downloading => TransferState::Downloading,
                Phase::Seeding => TransferState::Seeding,
                Phase::Paused | Phase::Failed => TransferState::Stopped,
            };
            if let Some(err) = &i.error {
                v.error = TransferError::Local(Arc::from(err.as_str()));
            }
            // Of the wanted pieces only (`files-unwanted`), as Transmission.
            let wanted = i.wanted.min(size);
            v.have_valid = i.bytes_had.min(wanted);
            v.left_until_done = wanted - v.have_valid;
            v.size_when_done = wanted;
            v.downloaded_ever = e.earlier.0 + i.downloaded.0 + i.downloaded.1;
            v.uploaded_ever = e.earlier.1 + i.uploaded.0 + i.uploaded.1;
            let running = matches!(v.state, TransferState::Downloading | TransferState::Seeding);
            if running {
                v.rate_download = i.download_rate.max(0.0) as u64;
                v.rate_upload = i.upload_rate.max(0.0) as u64;
                v.peers_connected = i.peers as u32;
            }
            // The session counts connections, not who sends what: a peer
            // counts as sending while data arrives, as getting while data
            // leaves.
            if v.rate_download > 0 {
                v.peers_sending_to_us = v.peers_connected;
            }
            if v.rate_upload > 0 {
                v.peers_getting_from_us = v.peers_connected;
            }
            v.eta = match v.state {
                TransferState::Downloading if v.rate_download > 0 => {
                    Eta::Secs(v.left_until_done / v.rate_download)
                }
                TransferState::Downloading => Eta::Unknown,
                _ => Eta::NotAvailable,
            };
            v.upload_ratio = match (v.uploaded_ever, v.downloaded_ever) {
                (0, 0) => Ratio::NotAvailable,
                (_, 0) => Ratio::Infinite,
                (u, d) => Ratio::Value(u as f64 / d as f64),
            };
            if v.rate_download > 0 || v.rate_upload > 0 {
                v.activity_date = Some(now);
            }
        }
        None => {
            v.downloaded_ever = e.earlier.0 + e.run.0;
            v.uploaded_ever = e.earlier.1 + e.run.1;
            // Not in the engine (opening, failed): the wanted files' bytes
            // until the engine counts the pieces.
            if !e.record.unwanted.is_empty() {
                let wanted: u64 = e.files.iter().filter(|f| f.wanted).map(|f| f.length).sum();
                v.size_when_done = wanted;
                v.left_until_done = v.left_until_done.min(wanted);
            }
            v.state = match &absent {
                Absent::Opening => TransferState::Verifying,
                // Transmission lists a magnet fetching its metadata as
                // downloading.
                Absent::Fetching(_) => TransferState::Downloading,
                Absent::Failed(_) | Absent::Stopped => TransferState::Stopped,
            };
            match absent {
                Absent::Failed(why) => v.error = TransferError::Local(why),
                Absent::Fetching(Some(why)) => v.error = TransferError::TrackerWarning(why),
                Absent::Fetching(None) => v.eta = Eta::Unknown,
                Absent::Opening | Absent::Stopped => {}
            }
        }
    }
    if detail.files {
        v.files = e.files.clone();
        match (v.files.as_mut_slice(), pieces) {
            ([only], _) => only.bytes_completed = v.have_valid,
            (files, Some(bits)) => file_progress(files, bits, v.piece_size, size),
            (files, None) => {
                // No piece map (not in the engine yet): complete or nothing.
                let complete = size > 0 && v.have_valid == size;
                for f in files {
                    f.bytes_completed = if complete { f.length } else { 0 };
                }
            }
        }
    }
    if detail.pieces {
        if let Some(bits) = pieces {
            v.pieces = bytes::Bytes::copy_from_slice(bits.as_bytes());
        }
    }
    if detail.trackers {
        v.trackers = match &e.content {
            super::Content::Torrent(m) => crate::sources::tracker_views(m),
            super::Content::Magnet(m) => crate::sources::magnet_tracker_views(&m.trackers),
            super::Content::Ed2k(_) => Vec::new(),
        };
    }
    v
}

/// The view of one connected BitTorrent peer.
pub(super) fn peer(p: &weir_session::BtPeer) -> PeerView {
    let s = &p.stats;
    let client = match &s.client {
        Some(c) if !c.is_empty() => c.clone(),
        _ => client_of_peer_id(&s.peer_id),
    };
    let rate_to_client = s.download_rate.max(0.0) as u64;
    let rate_to_peer = s.upload_rate.max(0.0) as u64;
    PeerView {
        address: s.addr.ip(),
        port: s.addr.port(),
        client_name: Arc::from(client.as_str()),
        progress: if s.pieces == 0 {
            0.0
        } else {
            f64::from(s.pieces_had.min(s.pieces)) / f64::from(s.pieces)
        },
        rate_to_client,
        rate_to_peer,
        is_encrypted: p.link.encrypted,
        is_incoming: p.incoming,
        is_utp: p.link.utp,
        client_is_choked: s.peer_choking,
        client_is_interested: s.am_interested,
        peer_is_choked: s.am_choking,
        peer_is_interested: s.peer_interested,
        is_downloading_from: s.am_interested && !s.peer_choking,
        is_uploading_to: s.peer_interested && !s.am_choking,
        source: if p.incoming {
            PeerSource::Incoming
        } else {
            PeerSource::Tracker
        },
    }
}

/// A client name from an Azureus-style peer id (`-LT2090-...` reads
/// `LT 2090`), or its printable prefix.
fn client_of_peer_id(id: &[u8; 20]) -> String {
    if id[0] == b'-' && id[7] == b'-' && id[1..7].iter().all(u8::is_ascii_alphanumeric) {
        let code = String::from_utf8_lossy(&id[1..3]);
        let version = String::from_utf8_lossy(&id[3..7]);
        return format!("{code} {version}");
    }
    id.iter()
        .take_while(|b| b.is_ascii_graphic())
        .map(|b| *b as char)
        .collect()
}

/// Each file's verified bytes: the parts of its range in verified pieces
/// (files are in content order, so their offsets add up).
fn file_progress(files: &mut [FileView], bits: &Bitfield, piece: u64, total: u64) {
    if piece == 0 || bits.is_empty() {
        for f in files {
            f.bytes_completed = 0;
        }
        return;
    }
    let mut offset = 0u64;
    for f in files {
        let (start, end) = (offset, offset + f.length);
        offset = end;
        f.bytes_completed = 0;
        if f.length == 0 {
            continue;
        }
        let first = (start / piece) as u32;
        let last = ((end - 1) / piece) as u32;
        for p in first..=last.min(bits.len().saturating_sub(1)) {
            if bits.get(p) {
                let ps = u64::from(p) * piece;
                let pe = (ps + piece).min(total);
                f.bytes_completed += pe.min(end).saturating_sub(ps.max(start));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(length: u64) -> FileView {
        FileView {
            name: Arc::from("f"),
            length,
            bytes_completed: 0,
            wanted: true,
            priority: Priority::Normal,
            begin_piece: 0,
            end_piece: 0,
        }
    }

    fn info() -> TransferInfo {
        TransferInfo {
            size: 1000,
            wanted: 1000,
            bytes_had: 10,
            downloaded: (5, 6),
            uploaded: (7, 8),
            download_rate: 2.5,
            peers: 1,
            known: 4,
            ..super::super::tests::info(3)
        }
    }

    /// An idle eD2k entry with a label and its own limits.
    fn entry() -> Entry {
        let link = format!("ed2k://|file|a.bin|1000|{}|/", "11".repeat(16));
        let parsed = crate::sources::of_link(&crate::sources::parse_ed2k(&link).unwrap());
        let source = crate::engine::state::RecordSource::Ed2k { link: link.clone() };
        let record = crate::engine::state::Record {
            labels: vec!["tv".into()],
            added: 1_700_000_000,
            downloaded: 5,
            ..crate::engine::state::Record::test(3, source, "/data")
        };
        let dir = weir_lab::TempDir::new("view-entry").unwrap();
        let state = crate::engine::state::StateDir::open(dir.path()).unwrap();
        let content =
            super::super::Content::Ed2k(Box::new(crate::sources::parse_ed2k(&link).unwrap()));
        super::super::entry(&state, record.into(), content, parsed, 1_700_000_100)
    }

    /// A base keeps every field a source sets: the view rebuilt from it is
    /// the one the source made, for a torrent with every optional field,
    /// a magnet and an eD2k link (the entry's id and paths set as
    /// [`super::super::entry`] sets them).
    #[test]
    fn a_base_gives_back_the_view_its_source_made() {
        let mut t = Vec::new();
        t.extend_from_slice(b"d8:announce27:http://127.0.0.1:1/announce7:comment3:hey");
        t.extend_from_slice(b"10:created by4:weir13:creation datei1700000000e4:infod");
        t.extend_from_slice(b"6:lengthi40000e4:name5:a.bin12:piece lengthi16384e6:pieces60:");
        t.extend_from_slice(&[7u8; 60]);
        t.extend_from_slice(b"7:privatei1eee");
        let meta = crate::sources::parse_metainfo(&t).unwrap();
        let torrent = crate::sources::of_metainfo(&meta).view;
        assert!(torrent.is_private && torrent.date_created.is_some());
        assert_eq!(&*torrent.comment, "hey");
        let (_, magnet) = super::super::magnet::parse(
            "magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=m",
        )
        .unwrap();
        let link = "ed2k://|file|b.bin|20000000|31D6CFE0D16AE931B73C59D7E0C089C0|/";
        let ed2k = crate::sources::of_link(&crate::sources::parse_ed2k(link).unwrap()).view;
        for mut v in [torrent, magnet.view, ed2k] {
            v.id = 7;
            v.download_dir = Arc::from("/data");
            v.torrent_file = Arc::from(format!("/state/torrents/{}.torrent", v.hash.to_hex()));
            let mut base = Base::of(&v);
            base.torrents_dir = Some(Arc::from("/state/torrents"));
            let again = base.view();
            assert_eq!(format!("{again:?}"), format!("{v:?}"));
        }
    }

    /// Every input the list view shows changes the fingerprint; inputs it
    /// does not show leave it. (A fingerprint missing a field serves a
    /// stale row for a transfer whose that field changed.)
    /// The first view of a transfer is kept without a row cache (made at
    /// the second request, so the first answer's views free as one run);
    /// a row stored then answers the third request and lets the view go.
    #[test]
    fn rows_are_cached_from_the_second_request_then_the_view_goes() {
        let mut e = entry();
        let v = Arc::new(e.base.view());
        e.list_view = Some(CachedView::new(e.base.clone(), 7, v.clone()));
        let cached = |e: &Entry| {
            e.list_view
                .as_ref()
                .map(|c| (c.view.is_some(), c.rows.is_some()))
        };
        assert_eq!(
            cached(&e),
            Some((true, false)),
            "no row cache with the first view"
        );
        let k: Arc<[u8]> = Arc::from(&b"fields"[..]);
        let Some(Cached::View(got, rows)) = CachedView::get(&mut e, 7, Some(&k)) else {
            panic!("the kept view, second request")
        };
        assert!(Arc::ptr_eq(&got, &v));
        assert_eq!(cached(&e), Some((true, true)));
        rows.store(&k, b"{row}");
        let Some(Cached::Row(row)) = CachedView::get(&mut e, 7, Some(&k)) else {
            panic!("the stored row, third request")
        };
        assert_eq!(&*row, b"{row}");
        assert_eq!(cached(&e), Some((false, true)), "the view is let go");
        assert!(
            CachedView::get(&mut e, 8, Some(&k)).is_none(),
            "another fingerprint"
        );
    }

    #[test]
    fn fingerprints_change_with_what_the_view_shows() {
        let e = entry();
        let i = info();
        let now = 1_700_000_200;
        let key = |e: &Entry, i: Option<&TransferInfo>, a: &Absent, q: u32, now: u64| {
            fingerprint(e, i, a, q, now)
        };
        let base = key(&e, Some(&i), &Absent::Stopped, 2, now);
        assert_eq!(base, key(&e, Some(&i), &Absent::Stopped, 2, now));
        let infos: [&dyn Fn(&mut TransferInfo); 8] = [
            &|i| i.phase = Phase::Seeding,
            &|i| i.error = Some("x".into()),
            &|i| i.bytes_had += 1,
            &|i| i.downloaded.1 += 1,
            &|i| i.uploaded.0 += 1,
            &|i| i.download_rate = 3.5,
            &|i| i.upload_rate = 1.0,
            &|i| i.peers = 0,
        ];
        for (n, change) in infos.iter().enumerate() {
            let mut j = info();
            change(&mut j);
            assert_ne!(
                base,
                key(&e, Some(&j), &Absent::Stopped, 2, now),
                "info change {n}"
            );
        }
        assert_ne!(base, key(&e, None, &Absent::Stopped, 2, now));
        assert_ne!(base, key(&e, Some(&i), &Absent::Stopped, 3, now));
        let entries: [&dyn Fn(&mut Entry); 12] = [
            &|e| e.record.labels.push("x".into()),
            &|e| e.record.added += 1,
            &|e| e.record.done = Some(1),
            &|e| e.record.finished = true,
            &|e| e.record.limits.down_on = true,
            &|e| e.record.limits.up_kbps += 1,
            &|e| e.record.limits.ratio_limit = 1.5,
            &|e| e.record.limits.idle_mode = 2,
            &|e| e.started = None,
            &|e| e.edited += 1,
            &|e| e.earlier.0 += 1,
            &|e| e.run.1 += 1,
        ];
        for (n, change) in entries.iter().enumerate() {
            let mut f = entry();
            change(&mut f);
            assert_ne!(
                base,
                key(&f, Some(&i), &Absent::Stopped, 2, now),
                "entry change {n}"
            );
        }
        // Not shown in a list view: the count of known peers, a rate's
        // fraction.
        let mut j = info();
        j.known = 9;
        j.download_rate = 2.9;
        assert_eq!(base, key(&e, Some(&j), &Absent::Stopped, 2, now));
        // While data moves, `now` is its activity date; idle, time does not
        // show.
        assert_ne!(base, key(&e, Some(&i), &Absent::Stopped, 2, now + 1));
        let mut idle = info();
        idle.download_rate = 0.0;
        let still = key(&e, Some(&idle), &Absent::Stopped, 2, now);
        assert_eq!(still, key(&e, Some(&idle), &Absent::Stopped, 2, now + 60));
        let why: Arc<str> = Arc::from("gone");
        let absents = [
            Absent::Opening,
            Absent::Stopped,
            Absent::Failed(why.clone()),
            Absent::Fetching(None),
            Absent::Fetching(Some(why)),
            Absent::Failed(Arc::from("other")),
        ];
        for (x, a) in absents.iter().enumerate() {
            for (y, b) in absents.iter().enumerate() {
                let same = key(&e, None, a, 0, now) == key(&e, None, b, 0, now);
                assert_eq!(same, x == y, "{x} {y}");
            }
        }
    }

    #[test]
    fn peer_ids_name_clients() {
        let mut id = [b'x'; 20];
        id[..8].copy_from_slice(b"-LT2090-");
        assert_eq!(client_of_peer_id(&id), "LT 2090");
        let mut id = [0u8; 20];
        id[..4].copy_from_slice(b"M4-4");
        assert_eq!(client_of_peer_id(&id), "M4-4");
        assert_eq!(client_of_peer_id(&[0xff; 20]), "");
    }

    #[test]
    fn files_count_the_verified_pieces_under_them() {
        // Pieces of 100 bytes; files of 150, 0, 100 and 55 bytes (305).
        let mut files = vec![file(150), file(0), file(100), file(55)];
        let mut bits = Bitfield::new(4);
        bits.set(1); // 100..200: 50 of file 0, 50 of file 2
        bits.set(3); // 300..305: the last 5 of file 3
        file_progress(&mut files, &bits, 100, 305);
        let got: Vec<u64> = files.iter().map(|f| f.bytes_completed).collect();
        assert_eq!(got, vec![50, 0, 50, 5]);
        for i in 0..4 {
            bits.set(i);
        }
        file_progress(&mut files, &bits, 100, 305);
        let got: Vec<u64> = files.iter().map(|f| f.bytes_completed).collect();
        assert_eq!(got, vec![150, 0, 100, 55]);
        // A map shorter than the files (bad input) does not panic.
        file_progress(&mut files, &Bitfield::new(1), 100, 305);
        assert!(files.iter().all(|f| f.bytes_completed == 0));
        file_progress(&mut files, &Bitfield::new(0), 100, 305);
        file_progress(&mut files, &Bitfield::full(4), 0, 305);
        assert!(files.iter().all(|f| f.bytes_completed == 0));
    }
}
