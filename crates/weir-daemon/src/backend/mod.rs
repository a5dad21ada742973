//! The boundary between the RPC front end and the engine's session.
//!
//! The server never touches the engine: it calls a [`Backend`] and gets Rust
//! values back. Everything about Transmission's JSON (key spellings, status
//! numbers, the `-1`/`-2` ETA conventions, kB/s units of limits, the order of
//! `flagStr` letters) lives in this crate; a backend only says what is true
//! of its transfers.
//!
//! # Implementing it on the session
//!
//! Each method is `async` and must not block the server's runtime: the real
//! backend sends a command to the session task over a channel and awaits its
//! answer. A method that reaches a session that has stopped returns
//! [`BackendError::Unavailable`]. Every method may be called concurrently
//! from several connections.
//!
//! Transfers are named by [`TransferRef`]s (the small integer id the backend
//! assigned, or the info-hash / ed2k hash); [`Selection`] is what a request
//! names: all transfers, a list of refs (unknown ones are skipped, as
//! Transmission does), or the recently active ones. Ids must stay stable for
//! the life of the process and must not be reused for another transfer.
//!
//! `torrent-get` is the hot path (clients poll it every second or two with
//! hundreds or thousands of transfers): [`Backend::transfers`] receives a
//! [`Detail`] saying which costly parts (files, peers, trackers, pieces) the
//! request needs, and should fill only those; names and paths are `Arc<str>`
//! so a view can be cloned out of the session without copying strings.

use std::future::Future;
use std::path::PathBuf;

mod command;
mod session;
mod view;

pub use command::*;
pub use session::*;
pub use view::*;

/// A transfer's id: a small integer the backend assigns when the transfer is
/// added, stable while the process runs (Transmission's `id`).
pub type TransferId = u64;

/// The content hash that names a transfer across restarts: a BitTorrent v1
/// info-hash or an eD2k file hash (`hashString` in the RPC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransferHash {
    /// SHA-1 of the torrent's info dictionary (40 hex digits).
    Bt([u8; 20]),
    /// MD4 ed2k file hash (32 hex digits).
    Ed2k([u8; 16]),
}

impl TransferHash {
    /// Parses 40 hex digits (BitTorrent) or 32 (eD2k), either case; `None`
    /// for anything else.
    pub fn parse_hex(s: &str) -> Option<Self> {
        fn fill<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
            let mut out = [0u8; N];
            for (i, pair) in s.chunks_exact(2).enumerate() {
                out[i] = (hex_val(pair[0])? << 4) | hex_val(pair[1])?;
            }
            Some(out)
        }
        let b = s.as_bytes();
        match b.len() {
            40 => fill::<20>(b).map(TransferHash::Bt),
            32 => fill::<16>(b).map(TransferHash::Ed2k),
            _ => None,
        }
    }

    /// The hash's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            TransferHash::Bt(h) => h,
            TransferHash::Ed2k(h) => h,
        }
    }

    /// Lower-case hex, as Transmission prints `hashString`.
    pub fn to_hex(&self) -> String {
        let mut out = Vec::with_capacity(40);
        self.write_hex(&mut out);
        // Hex digits are ASCII.
        String::from_utf8(out).unwrap_or_default()
    }

    /// Appends lower-case hex to `out` (no allocation on the hot path).
    pub fn write_hex(&self, out: &mut Vec<u8>) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for b in self.as_bytes() {
            out.push(DIGITS[(b >> 4) as usize]);
            out.push(DIGITS[(b & 15) as usize]);
        }
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// One transfer named in a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferRef {
    /// By id.
    Id(TransferId),
    /// By content hash.
    Hash(TransferHash),
}

/// Which transfers a request is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Every transfer (the request had no `ids`).
    All,
    /// These (unknown ones are skipped; the list may be empty).
    Refs(Vec<TransferRef>),
    /// Transfers whose state or figures changed in the last
    /// [`RECENTLY_ACTIVE_SECS`] seconds (Transmission's `recently-active`).
    RecentlyActive,
}

impl Selection {
    /// Whether a transfer with this id and hash is selected, for backends
    /// that filter by scanning (`RecentlyActive` is the backend's to decide
    /// and answers `true` here).
    pub fn matches(&self, id: TransferId, hash: &TransferHash) -> bool {
        match self {
            Selection::All | Selection::RecentlyActive => true,
            Selection::Refs(refs) => refs.iter().any(|r| match r {
                TransferRef::Id(i) => *i == id,
                TransferRef::Hash(h) => h == hash,
            }),
        }
    }
}

/// How far back `recently-active` looks, as Transmission (60 s).
pub const RECENTLY_ACTIVE_SECS: u64 = 60;

/// The costly parts of a [`TransferView`] a `torrent-get` needs; the
/// backend leaves the others empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Detail {
    /// [`TransferView::files`].
    pub files: bool,
    /// [`TransferView::peers`].
    pub peers: bool,
    /// [`TransferView::trackers`].
    pub trackers: bool,
    /// [`TransferView::pieces`] and [`TransferView::availability`].
    pub pieces: bool,
}

/// A `torrent-get`: which transfers, and which costly parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferQuery {
    /// Which transfers.
    pub select: Selection,
    /// Which costly parts to fill.
    pub detail: Detail,
    /// The key of the rows the answer will be written with (see
    /// [`RowCache`]), if the caller writes rows: a backend that caches rows
    /// may answer a transfer whose row for this key it holds with that row
    /// alone ([`TransferList::written`]), and need not keep the view it
    /// was written from.
    pub row_key: Option<std::sync::Arc<[u8]>>,
}

/// The answer to a [`TransferQuery`].
#[derive(Clone, Debug, Default)]
pub struct TransferList {
    /// The selected transfers, in id order. `Arc`s, so that a backend can
    /// keep the last view of each transfer and answer without copying it.
    pub transfers: Vec<std::sync::Arc<TransferView>>,
    /// For [`Selection::RecentlyActive`]: ids of transfers removed in the
    /// last [`RECENTLY_ACTIVE_SECS`] seconds (empty otherwise).
    pub removed: Vec<TransferId>,
    /// Optional, beside `transfers` (same order; shorter or empty means
    /// none for the rest): a cache of the answer rows already written
    /// for that view, which a backend keeps for as long as the view it
    /// hands out is unchanged. The writer copies a cached row of the same
    /// fields instead of writing it again.
    pub rows: Vec<Option<std::sync::Arc<RowCache>>>,
    /// Optional, beside `transfers` (same order; shorter or empty means
    /// none for the rest): the row already written for the query's
    /// [`TransferQuery::row_key`], current for that transfer. Where one is
    /// given, the writer copies it, and `transfers` may hold the
    /// transfer's base view (what its content says, without its current
    /// state), so that a backend need not keep a full view for rows it
    /// already has.
    pub written: Vec<Option<std::sync::Arc<[u8]>>>,
}

/// `torrent-get` rows written for one view that has not changed since, by
/// the request's field list and form (at most [`RowCache::SLOTS`] of
/// them: a web page and a remote polling with different fields).
#[derive(Default)]
pub struct RowCache(std::sync::Mutex<[Option<CachedRow>; RowCache::SLOTS]>);

/// One cached row: the key it was written for (see
/// [`RowCache::append`]) and its bytes.
type CachedRow = (std::sync::Arc<[u8]>, std::sync::Arc<[u8]>);

impl RowCache {
    /// Field lists remembered per view (held inline: a `Vec` of them cost
    /// each idle transfer a second allocation, with room for four).
    pub const SLOTS: usize = 2;

    /// The row written for `key`, appended to `out`; `false` if none is
    /// cached.
    pub(crate) fn append(&self, key: &std::sync::Arc<[u8]>, out: &mut Vec<u8>) -> bool {
        match self.get(key) {
            Some(row) => {
                out.extend_from_slice(&row);
                true
            }
            None => false,
        }
    }

    /// The row written for `key`, if one is cached.
    pub fn get(&self, key: &[u8]) -> Option<std::sync::Arc<[u8]>> {
        let rows = self.0.lock().unwrap_or_else(|e| e.into_inner());
        rows.iter()
            .flatten()
            .find(|(k, _)| **k == *key)
            .map(|(_, row)| row.clone())
    }

    /// Remembers `row` for `key`, in place of the oldest when full.
    pub(crate) fn store(&self, key: &std::sync::Arc<[u8]>, row: &[u8]) {
        let mut rows = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Slots fill front to back; when full the oldest (first) goes.
        if rows.iter().all(Option::is_some) {
            rows.rotate_left(1);
            rows[Self::SLOTS - 1] = None;
        }
        if let Some(free) = rows.iter_mut().find(|r| r.is_none()) {
            *free = Some((key.clone(), row.into()));
        }
    }
}

impl std::fmt::Debug for RowCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RowCache(..)")
    }
}

/// Why a backend call failed. Each maps to Transmission's result string
/// (classic form) and a JSON-RPC error code (6.0 form) in this crate.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The .torrent (or link) could not be parsed.
    #[error("invalid or corrupt torrent file ({0})")]
    InvalidTorrent(String),
    /// A URL could not be fetched (or its policy refused it).
    #[error("http error: {0}")]
    Fetch(String),
    /// A path argument must be absolute.
    #[error("path is not absolute: {0}")]
    PathNotAbsolute(PathBuf),
    /// A file index is past the transfer's last file.
    #[error("file index out of range: {0}")]
    FileIndexOutOfRange(u32),
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// weir does not do this (e.g. blocklists, renaming a path).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The request is valid JSON but asks for something impossible.
    #[error("{0}")]
    Invalid(String),
    /// The session is gone (shutting down or stopped).
    #[error("the session is not running")]
    Unavailable,
}

/// The engine side of the RPC server. See the [module docs](self) for the
/// contract.
pub trait Backend: Send + Sync + 'static {
    /// `session-get`.
    fn session(&self) -> impl Future<Output = Result<SessionSettings, BackendError>> + Send;

    /// `session-set`: applies every `Some` in `change`.
    fn set_session(
        &self,
        change: SessionChange,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `session-stats`.
    fn stats(&self) -> impl Future<Output = Result<SessionStats, BackendError>> + Send;

    /// `torrent-get`: the selected transfers with the asked-for detail.
    fn transfers(
        &self,
        query: TransferQuery,
    ) -> impl Future<Output = Result<TransferList, BackendError>> + Send;

    /// `torrent-add`.
    fn add(&self, req: AddRequest)
    -> impl Future<Output = Result<AddOutcome, BackendError>> + Send;

    /// `torrent-set` on every selected transfer.
    fn change(
        &self,
        select: Selection,
        change: TransferChange,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Start, stop, verify, re-announce or move in the queue.
    fn act(
        &self,
        select: Selection,
        action: Action,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `torrent-remove`, deleting the data too when `delete_local_data`.
    fn remove(
        &self,
        select: Selection,
        delete_local_data: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `torrent-set-location`: the data is now under `location`; with
    /// `move_data` the backend moves it there first.
    fn set_location(
        &self,
        select: Selection,
        location: PathBuf,
        move_data: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// `torrent-rename-path`. The default refuses.
    fn rename_path(
        &self,
        target: TransferRef,
        path: String,
        name: String,
    ) -> impl Future<Output = Result<Renamed, BackendError>> + Send {
        let _ = (target, path, name);
        async {
            Err(BackendError::Unsupported(
                "torrent-rename-path is not supported by weir",
            ))
        }
    }

    /// `free-space` of a directory.
    fn free_space(
        &self,
        path: PathBuf,
    ) -> impl Future<Output = Result<FreeSpace, BackendError>> + Send;

    /// `port-test`: whether the peer port is listening. It must answer from
    /// what the session knows; weir never asks an outside service.
    fn port_is_open(&self) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// `session-close`: the daemon should stop (cleanly) after answering.
    fn close(&self) -> impl Future<Output = Result<(), BackendError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_parse_and_print() {
        let h = TransferHash::parse_hex("266A2DB8C22953C39FA5F3D73001D11CB5571ABB").unwrap();
        assert!(matches!(h, TransferHash::Bt(_)));
        assert_eq!(h.to_hex(), "266a2db8c22953c39fa5f3d73001d11cb5571abb");
        let e = TransferHash::parse_hex("d3b6b09d73d3fe0dd41dde5ed244215a").unwrap();
        assert!(matches!(e, TransferHash::Ed2k(_)));
        assert_eq!(e.to_hex(), "d3b6b09d73d3fe0dd41dde5ed244215a");
        assert_eq!(TransferHash::parse_hex("xyz"), None);
        assert_eq!(TransferHash::parse_hex(&"g".repeat(40)), None);
        assert_eq!(TransferHash::parse_hex(""), None);
    }

    #[test]
    fn selection_matches_ids_and_hashes() {
        let h = TransferHash::Bt([7; 20]);
        let other = TransferHash::Bt([8; 20]);
        let s = Selection::Refs(vec![TransferRef::Id(3), TransferRef::Hash(h)]);
        assert!(s.matches(3, &other));
        assert!(s.matches(9, &h));
        assert!(!s.matches(9, &other));
        assert!(Selection::All.matches(1, &other));
        assert!(!Selection::Refs(vec![]).matches(1, &other));
    }

    #[test]
    fn percent_done_handles_zero_sizes() {
        let mut v = TransferView::new(1, TransferHash::Bt([0; 20]), "x");
        assert_eq!(v.percent_done(), 0.0);
        v.size_when_done = 200;
        v.left_until_done = 50;
        assert!((v.percent_done() - 0.75).abs() < 1e-9);
        v.total_size = 400;
        v.have_valid = 150;
        assert!((v.percent_complete() - 0.375).abs() < 1e-9);
    }

    #[test]
    fn a_row_cache_keeps_the_two_newest_field_lists() {
        let c = RowCache::default();
        let key = |k: &str| -> std::sync::Arc<[u8]> { k.as_bytes().into() };
        let got = |k: &str| {
            let mut out = Vec::new();
            c.append(&key(k), &mut out).then_some(out)
        };
        assert_eq!(got("a"), None);
        c.store(&key("a"), b"row a");
        c.store(&key("b"), b"row b");
        assert_eq!(got("a").as_deref(), Some(&b"row a"[..]));
        assert_eq!(got("b").as_deref(), Some(&b"row b"[..]));
        c.store(&key("c"), b"row c");
        assert_eq!(got("a"), None, "the oldest goes");
        assert_eq!(got("b").as_deref(), Some(&b"row b"[..]));
        assert_eq!(got("c").as_deref(), Some(&b"row c"[..]));
    }
}
