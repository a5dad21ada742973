//! `.torrent` files (BEP 3 metainfo, BEP 12 announce lists, BEP 27 private).
//!
//! [`Metainfo::from_bytes`] checks everything a hostile torrent could get
//! wrong before any of it is used: types, piece geometry (the `pieces`
//! string must hold exactly one SHA-1 per piece of the total length), and
//! every name and path component, which goes through
//! [`weir_core::safepath::component`] for the platform weir runs on (so
//! `..`, absolute paths, NUL bytes and separators inside a component are
//! errors naming the path and the rule; Windows reserved names are
//! sanitised).
//!
//! The info-hash is the SHA-1 of the `info` dictionary's bytes exactly as
//! they appear in the file.
//!
//! Names: `name.utf-8` and `path.utf-8` (written by some clients when the
//! plain keys are in a legacy encoding) are preferred when present and
//! valid UTF-8. Names that are not UTF-8 are converted lossily (invalid
//! sequences become U+FFFD), so such a torrent still loads but its file
//! names may differ from what its creator saw. Other text fields
//! (`comment`, `created by`, tracker URLs) are converted the same way.
//!
//! v2-only torrents (BEP 52, no `pieces`) are refused; hybrid torrents load
//! through their v1 part.

use std::collections::HashSet;
use std::sync::Arc;

use sha1::{Digest, Sha1};
use weir_bencode::{Dict, Value};
use weir_core::safepath::{self, Platform};

/// Smallest piece length accepted. Real torrents use 16 KiB or more; a
/// smaller piece still works (its one block is short).
pub const MIN_PIECE_LENGTH: u32 = 1;
/// Largest piece length accepted (64 MiB); anything bigger is absurd and
/// would make one piece a memory hazard.
pub const MAX_PIECE_LENGTH: u32 = 64 << 20;

/// A parsed, checked `.torrent`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metainfo {
    /// The info dictionary exactly as in the file (what the info-hash is
    /// of): served to peers that fetch the metadata (BEP 9). `None` for a
    /// metainfo made in memory.
    pub info_bytes: Option<bytes::Bytes>,
    /// SHA-1 of the `info` dictionary exactly as received.
    pub info_hash: [u8; 20],
    /// The `info` dictionary.
    pub info: Info,
    /// The `announce` URL, if any. Tracker URLs are `Arc<str>` so that a
    /// program holding many torrents can share one copy of each (see
    /// [`Metainfo::share_trackers`]): most torrents name the same few.
    pub announce: Option<Arc<str>>,
    /// BEP 12 tiers of tracker URLs (empty tiers dropped), in file order.
    pub announce_list: Vec<Vec<Arc<str>>>,
    /// Free-text comment.
    pub comment: Option<String>,
    /// The program that made the torrent.
    pub created_by: Option<String>,
    /// Creation time, seconds since the Unix epoch.
    pub creation_date: Option<i64>,
}

/// The `info` dictionary: what the info-hash covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// The suggested name (checked and sanitised as one path component):
    /// the file name of a single-file torrent, the directory of a
    /// multi-file one.
    pub name: std::sync::Arc<str>,
    /// Bytes per piece (the last piece may be shorter).
    pub piece_length: u32,
    /// SHA-1 of each piece: a view of the info dictionary's own bytes when
    /// parsed (one copy of the hashes per torrent, shared with storage).
    pub pieces: PieceHashes,
    /// The files, in torrent order (which is the order of the data).
    pub files: Vec<FileEntry>,
    /// BEP 27: only the torrent's trackers may be used to find peers.
    pub private: bool,
    /// A single-file torrent (`length` key) rather than a `files` list.
    pub single_file: bool,
}

/// The SHA-1 of every piece, back to back in one shared buffer (a view of
/// the `pieces` string of the info dictionary it was parsed from).
///
/// Cloning shares the buffer; [`PieceHashes::digests`] hands storage the
/// same bytes. Indexing past the end panics, as for a slice.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PieceHashes(bytes::Bytes);

impl PieceHashes {
    /// Number of hashes.
    pub fn len(&self) -> usize {
        self.0.len() / 20
    }

    /// No hash at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The hash of piece `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&[u8; 20]> {
        let at = i.checked_mul(20)?;
        self.0.get(at..at.checked_add(20)?)?.try_into().ok()
    }

    /// Every hash, in piece order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8; 20]> + '_ {
        // Every chunk is 20 bytes long; the fallback is never taken.
        self.0
            .chunks_exact(20)
            .map(|c| c.try_into().unwrap_or(&[0; 20]))
    }

    /// The hashes as a list of their own.
    pub fn to_vec(&self) -> Vec<[u8; 20]> {
        self.iter().copied().collect()
    }

    /// The hashes back to back.
    pub fn as_bytes(&self) -> &bytes::Bytes {
        &self.0
    }

    /// The digests storage checks pieces against, sharing these bytes.
    pub fn digests(&self) -> weir_core::storage::Digests {
        weir_core::storage::Digests::sha1_concat(self.0.clone())
            .expect("PieceHashes holds whole 20-byte hashes")
    }
}

impl std::ops::Index<usize> for PieceHashes {
    type Output = [u8; 20];
    fn index(&self, i: usize) -> &[u8; 20] {
        match self.get(i) {
            Some(h) => h,
            None => panic!("piece {i} out of range: {} hashes", self.len()),
        }
    }
}

impl From<Vec<[u8; 20]>> for PieceHashes {
    fn from(v: Vec<[u8; 20]>) -> Self {
        Self(bytes::Bytes::from(v.as_flattened().to_vec()))
    }
}

impl FromIterator<[u8; 20]> for PieceHashes {
    fn from_iter<I: IntoIterator<Item = [u8; 20]>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<_>>().into()
    }
}

impl std::fmt::Debug for PieceHashes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PieceHashes({} hashes)", self.len())
    }
}

/// One file of a torrent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    /// Checked path components, relative to the torrent's directory (for a
    /// single-file torrent, `[name]`; for a multi-file torrent the
    /// components under `name`).
    pub path: Vec<String>,
    /// Length in bytes (may be 0).
    pub length: u64,
    /// The file's eD2k hash (BitComet's per-file `ed2k` key, 16 bytes), so
    /// the file can also be found on eD2k. A value of another length is
    /// ignored.
    pub ed2k: Option<[u8; 16]>,
}

/// The `ed2k` key of a file dictionary, when it holds 16 bytes.
fn ed2k_key(d: &weir_bencode::Dict<'_>) -> Option<[u8; 16]> {
    match d.get(b"ed2k") {
        Some(Value::Bytes(b)) => (*b).try_into().ok(),
        _ => None,
    }
}

/// What is wrong with a torrent.
#[derive(Debug, thiserror::Error)]
pub enum MetainfoError {
    /// The bytes are not valid (strict) bencode.
    #[error("malformed torrent: {0}")]
    Bencode(#[from] weir_bencode::Error),
    /// A required key is absent.
    #[error("missing key `{0}`")]
    MissingKey(String),
    /// A key holds the wrong type.
    #[error("`{key}`: expected {expected}, found {found}")]
    WrongType {
        /// Where, e.g. `info.files[2].length`.
        key: String,
        /// The type required.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// A key's value is out of range or contradictory.
    #[error("bad `{key}`: {reason}")]
    BadValue {
        /// Where.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// `piece length` outside what weir accepts.
    #[error("bad piece length {0}: must be 1 B to 64 MiB")]
    BadPieceLength(i64),
    /// `pieces` is not a whole number of 20-byte hashes.
    #[error("`pieces` length {0} is not a multiple of 20")]
    BadPiecesLength(usize),
    /// The number of hashes does not match the total length.
    #[error(
        "`pieces` holds {found} hashes but {total} bytes in pieces of {piece_length} need {expected}"
    )]
    PieceCount {
        /// Hashes needed.
        expected: u64,
        /// Hashes present.
        found: usize,
        /// Total payload length.
        total: u64,
        /// Piece length.
        piece_length: u32,
    },
    /// A name or path component that could escape the download directory.
    #[error("unsafe path {path:?} in `{key}`: {reason}")]
    UnsafePath {
        /// Where (`info.name` or `info.files[i].path`).
        key: String,
        /// The whole path as given (lossily printable).
        path: String,
        /// The rule it broke.
        reason: &'static str,
    },
    /// Two files map to the same path, or a file is also a directory.
    #[error("conflicting file paths: {0:?}")]
    ConflictingPaths(String),
    /// No data at all.
    #[error("torrent holds no data (total length 0)")]
    Empty,
    /// A BEP 52 v2-only torrent.
    #[error("v2-only torrent (no `pieces`): not supported")]
    V2Only,
}

type Result<T> = std::result::Result<T, MetainfoError>;

impl Metainfo {
    /// Parses and checks a `.torrent` file's bytes.
    pub fn from_bytes(data: &[u8]) -> Result<Metainfo> {
        let top = weir_bencode::decode(data)?;
        let top = as_dict(&top, "(top level)")?;
        let info_v = top
            .get(b"info")
            .ok_or_else(|| MetainfoError::MissingKey("info".into()))?;
        let info_d = as_dict(info_v, "info")?;
        let info_bytes = bytes::Bytes::copy_from_slice(info_d.raw);
        let info = Info::from_dict(info_d, &info_bytes)?;
        let info_hash: [u8; 20] = Sha1::digest(info_d.raw).into();

        let announce = opt_string(top, "announce")?;
        let mut announce_list = Vec::new();
        if let Some(v) = top.get(b"announce-list") {
            let tiers = as_list(v, "announce-list")?;
            for (i, tier) in tiers.iter().enumerate() {
                let key = format!("announce-list[{i}]");
                let urls = as_list(tier, &key)?;
                let mut out = Vec::with_capacity(urls.len());
                for (j, u) in urls.iter().enumerate() {
                    let s = lossy(as_bytes(u, &format!("{key}[{j}]"))?);
                    if !s.is_empty() {
                        out.push(Arc::from(s));
                    }
                }
                if !out.is_empty() {
                    announce_list.push(out);
                }
            }
        }
        let comment = match top.get(b"comment.utf-8") {
            Some(v) => Some(lossy(as_bytes(v, "comment.utf-8")?)),
            None => opt_string(top, "comment")?,
        };
        let created_by = opt_string(top, "created by")?;
        let creation_date = match top.get(b"creation date") {
            Some(v) => Some(as_int(v, "creation date")?),
            None => None,
        };
        Ok(Metainfo {
            info_bytes: Some(info_bytes),
            info_hash,
            info,
            announce: announce.filter(|s| !s.is_empty()).map(Arc::from),
            announce_list,
            comment,
            created_by,
            creation_date,
        })
    }

    /// Total payload length in bytes.
    pub fn total_length(&self) -> u64 {
        self.info.total_length()
    }

    /// The trackers to use, by tier: the announce list if present (BEP 12
    /// says to ignore `announce` then), otherwise `announce` as one tier.
    pub fn trackers(&self) -> Vec<Vec<String>> {
        if !self.announce_list.is_empty() {
            self.announce_list
                .iter()
                .map(|tier| tier.iter().map(|u| u.to_string()).collect())
                .collect()
        } else {
            self.announce.iter().map(|a| vec![a.to_string()]).collect()
        }
    }

    /// [`Metainfo::trackers`] as the metainfo's own shared URLs (no copy
    /// of the text): what a program keeps for as long as it announces.
    pub fn tracker_tiers(&self) -> Vec<Vec<Arc<str>>> {
        if !self.announce_list.is_empty() {
            self.announce_list.clone()
        } else {
            self.announce.iter().map(|a| vec![a.clone()]).collect()
        }
    }

    /// Replaces each tracker URL with `share(url)`, the same text (a copy
    /// held elsewhere, so that many torrents naming one tracker hold it
    /// once).
    pub fn share_trackers(&mut self, mut share: impl FnMut(&Arc<str>) -> Arc<str>) {
        if let Some(a) = &mut self.announce {
            *a = share(a);
        }
        for u in self.announce_list.iter_mut().flatten() {
            *u = share(u);
        }
    }
}

impl Info {
    /// Parses and checks a bare `info` dictionary (as fetched from peers by
    /// BEP 9); the caller compares its SHA-1 with the expected info-hash.
    pub fn from_bytes(raw: &[u8]) -> Result<Info> {
        let v = weir_bencode::decode(raw)?;
        Info::from_dict(as_dict(&v, "info")?, &bytes::Bytes::copy_from_slice(raw))
    }

    /// Total payload length in bytes.
    pub fn total_length(&self) -> u64 {
        self.files.iter().map(|f| f.length).sum()
    }

    /// Number of pieces.
    pub fn piece_count(&self) -> u32 {
        // from_dict checked that the count fits and matches the length.
        self.pieces.len() as u32
    }

    /// Length of piece `index` (the last one may be short); 0 past the end.
    pub fn piece_len(&self, index: u32) -> u32 {
        let total = self.total_length();
        let start = u64::from(index) * u64::from(self.piece_length);
        if start >= total {
            return 0;
        }
        (total - start).min(u64::from(self.piece_length)) as u32
    }

    /// `raw` holds the same bytes as `d.raw` (the dictionary as it
    /// appears in the file); the piece hashes are taken as a view of it.
    fn from_dict(d: &Dict<'_>, raw: &bytes::Bytes) -> Result<Info> {
        let name_raw = match d.get(b"name.utf-8") {
            Some(v) => as_bytes(v, "info.name.utf-8")?,
            None => as_bytes(
                d.get(b"name")
                    .ok_or_else(|| MetainfoError::MissingKey("info.name".into()))?,
                "info.name",
            )?,
        };
        let name = checked_component(&lossy(name_raw), "info.name", &lossy(name_raw))?;

        let pl = as_int(
            d.get(b"piece length")
                .ok_or_else(|| MetainfoError::MissingKey("info.piece length".into()))?,
            "info.piece length",
        )?;
        if pl < i64::from(MIN_PIECE_LENGTH) || pl > i64::from(MAX_PIECE_LENGTH) {
            return Err(MetainfoError::BadPieceLength(pl));
        }
        let piece_length = pl as u32;

        let pieces_raw = match d.get(b"pieces") {
            Some(v) => as_bytes(v, "info.pieces")?,
            None if d.get(b"file tree").is_some() => return Err(MetainfoError::V2Only),
            None => return Err(MetainfoError::MissingKey("info.pieces".into())),
        };
        if pieces_raw.len() % 20 != 0 {
            return Err(MetainfoError::BadPiecesLength(pieces_raw.len()));
        }
        let pieces = PieceHashes(shared_slice(raw, d.raw, pieces_raw));

        let private = match d.get(b"private") {
            None => false,
            Some(v) => match as_int(v, "info.private")? {
                0 => false,
                1 => true,
                n => {
                    return Err(MetainfoError::BadValue {
                        key: "info.private".into(),
                        reason: format!("{n} (must be 0 or 1)"),
                    });
                }
            },
        };

        let (files, single_file) = match (d.get(b"length"), d.get(b"files")) {
            (Some(_), Some(_)) => {
                return Err(MetainfoError::BadValue {
                    key: "info".into(),
                    reason: "has both `length` and `files`".into(),
                });
            }
            (None, None) => {
                return Err(MetainfoError::MissingKey(
                    "info.length or info.files".into(),
                ));
            }
            (Some(len), None) => {
                let length = non_negative(as_int(len, "info.length")?, "info.length")?;
                (
                    vec![FileEntry {
                        path: vec![name.clone()],
                        length,
                        ed2k: ed2k_key(d),
                    }],
                    true,
                )
            }
            (None, Some(files)) => (parse_files(as_list(files, "info.files")?)?, false),
        };

        let mut total: u64 = 0;
        for f in &files {
            total = total
                .checked_add(f.length)
                .ok_or_else(|| MetainfoError::BadValue {
                    key: "info.files".into(),
                    reason: "total length overflows 64 bits".into(),
                })?;
        }
        if total == 0 {
            return Err(MetainfoError::Empty);
        }
        let expected = total.div_ceil(u64::from(piece_length));
        if expected != pieces.len() as u64 || expected > u64::from(u32::MAX) {
            return Err(MetainfoError::PieceCount {
                expected,
                found: pieces.len(),
                total,
                piece_length,
            });
        }
        Ok(Info {
            name: name.into(),
            piece_length,
            pieces,
            files,
            private,
            single_file,
        })
    }
}

/// `part` (a slice of `whole`) as the same bytes of `shared`, which holds
/// a copy of `whole`; a copy of `part` when it is not inside `whole`.
fn shared_slice(shared: &bytes::Bytes, whole: &[u8], part: &[u8]) -> bytes::Bytes {
    // Addresses only compare positions; nothing is read through them.
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if shared.len() == whole.len() && end <= whole.len() => shared.slice(start..end),
        _ => bytes::Bytes::copy_from_slice(part),
    }
}

fn parse_files(list: &[Value<'_>]) -> Result<Vec<FileEntry>> {
    if list.is_empty() {
        return Err(MetainfoError::BadValue {
            key: "info.files".into(),
            reason: "empty file list".into(),
        });
    }
    let mut files = Vec::with_capacity(list.len());
    let mut seen: HashSet<Vec<String>> = HashSet::with_capacity(list.len());
    let mut dirs: HashSet<Vec<String>> = HashSet::new();
    for (i, f) in list.iter().enumerate() {
        let key = format!("info.files[{i}]");
        let fd = as_dict(f, &key)?;
        let length = non_negative(
            as_int(
                fd.get(b"length")
                    .ok_or_else(|| MetainfoError::MissingKey(format!("{key}.length")))?,
                &format!("{key}.length"),
            )?,
            &format!("{key}.length"),
        )?;
        let (pkey, pv) = match fd.get(b"path.utf-8") {
            Some(v) => (format!("{key}.path.utf-8"), v),
            None => (
                format!("{key}.path"),
                fd.get(b"path")
                    .ok_or_else(|| MetainfoError::MissingKey(format!("{key}.path")))?,
            ),
        };
        let comps = as_list(pv, &pkey)?;
        let raw: Vec<String> = comps
            .iter()
            .enumerate()
            .map(|(j, c)| as_bytes(c, &format!("{pkey}[{j}]")).map(lossy))
            .collect::<Result<_>>()?;
        let whole = raw.join("/");
        if raw.is_empty() {
            return Err(MetainfoError::UnsafePath {
                key: pkey,
                path: whole,
                reason: "empty path",
            });
        }
        let mut path = Vec::with_capacity(raw.len());
        for c in &raw {
            path.push(checked_component(c, &pkey, &whole)?);
        }
        // A file may not share a path with another file or with a directory.
        for n in 1..path.len() {
            let prefix = path[..n].to_vec();
            if seen.contains(&prefix) {
                return Err(MetainfoError::ConflictingPaths(prefix.join("/")));
            }
            dirs.insert(prefix);
        }
        if dirs.contains(&path) || !seen.insert(path.clone()) {
            return Err(MetainfoError::ConflictingPaths(whole));
        }
        files.push(FileEntry {
            path,
            length,
            ed2k: ed2k_key(fd),
        });
    }
    Ok(files)
}

fn checked_component(c: &str, key: &str, whole: &str) -> Result<String> {
    safepath::component(c, Platform::current())
        .map(|s| s.into_owned())
        .map_err(|e| MetainfoError::UnsafePath {
            key: key.to_string(),
            path: whole.to_string(),
            reason: e.reason,
        })
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn non_negative(n: i64, key: &str) -> Result<u64> {
    u64::try_from(n).map_err(|_| MetainfoError::BadValue {
        key: key.to_string(),
        reason: format!("negative length {n}"),
    })
}

fn wrong(key: &str, expected: &'static str, v: &Value<'_>) -> MetainfoError {
    MetainfoError::WrongType {
        key: key.to_string(),
        expected,
        found: v.type_name(),
    }
}

fn as_dict<'v, 'a>(v: &'v Value<'a>, key: &str) -> Result<&'v Dict<'a>> {
    v.as_dict().ok_or_else(|| wrong(key, "dictionary", v))
}

fn as_list<'v, 'a>(v: &'v Value<'a>, key: &str) -> Result<&'v [Value<'a>]> {
    v.as_list().ok_or_else(|| wrong(key, "list", v))
}

fn as_bytes<'a>(v: &Value<'a>, key: &str) -> Result<&'a [u8]> {
    v.as_bytes().ok_or_else(|| wrong(key, "byte string", v))
}

fn as_int(v: &Value<'_>, key: &str) -> Result<i64> {
    v.as_int().ok_or_else(|| wrong(key, "integer", v))
}

fn opt_string(d: &Dict<'_>, key: &str) -> Result<Option<String>> {
    match d.get(key.as_bytes()) {
        Some(v) => Ok(Some(lossy(as_bytes(v, key)?))),
        None => Ok(None),
    }
}
