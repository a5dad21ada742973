//! The resume journal's format and its parser, without any I/O.
//!
//! A journal sits next to a transfer's data and says which pieces an earlier
//! run verified, so a restarted download fetches only what is missing. It
//! must never make weir trust data that was not verified: a torn write, a
//! stray byte, a journal of another transfer, or a data file changed behind
//! weir's back all cost a recheck, never a wrong piece.
//!
//! The file is [`MAGIC`] followed by records, each framed as
//!
//! ```text
//! 0xA5 | kind u8 | len u32 LE | payload (len bytes) | crc32 u32 LE (kind, len, payload)
//! ```
//!
//! The first record is the [`Record::Header`], which names the transfer (its
//! id, geometry, and every file's path and length): a journal whose header
//! differs belongs to something else and is ignored. What the journal vouches
//! for comes only from the records of its *valid prefix*, read in order up to
//! the first record that does not parse or fails its checksum. Past that
//! point the parser re-synchronises on the frame marker and keeps what it
//! finds there only as hints (pieces worth hashing again), never as verified.
//!
//! Record kinds, in the order a run writes them:
//! - [`Record::Owned`]: the files weir created (or was allowed to overwrite);
//!   any other file is someone else's data.
//! - [`Record::Have`]: a snapshot of the verified pieces (written when a run
//!   starts and compacts the journal).
//! - [`Record::Written`]: a hint, appended right after a write without any
//!   flush: bytes `[0, end)` of a piece are on disk. After a crash this lets
//!   a run hash a piece that was complete but not yet journalled, and resume
//!   a partly written one, instead of fetching them again.
//! - [`Record::Verified`]: pieces verified, appended only after their data
//!   was flushed to disk (the runtime calls `fdatasync` first).
//! - [`Record::Files`]: every data file's inode, size and mtime, appended
//!   with each flush: a file that differs from its last recorded state when
//!   the next run starts has its pieces hashed again instead of trusted.
//! - [`Record::Lost`]: pieces found unreadable while seeding (no longer
//!   vouched for).
//! - [`Record::Closed`]: the run ended cleanly.
//!
//! [`parse`] turns a journal into a [`Resume`]; [`plan`] combines it with
//! what is on disk now into a [`Plan`]: which pieces are had, which must be
//! hashed, which files are someone else's.

use std::collections::BTreeMap;

use crate::bitfield::Bitfield;
use crate::geometry::Geometry;
use crate::storage::FileLayout;

/// The first bytes of a journal (format version 2).
pub const MAGIC: &[u8; 8] = b"weirjnl2";
/// Marks the start of every record.
const SYNC: u8 = 0xA5;
/// Frame bytes around a payload: marker, kind, length, checksum.
const FRAME: usize = 1 + 1 + 4 + 4;
/// The largest payload a record may have (a snapshot of 2^24 pieces, or the
/// states of a few million files, fit well below it).
pub const MAX_PAYLOAD: usize = 64 << 20;

const K_HEADER: u8 = 1;
const K_OWNED: u8 = 2;
const K_HAVE: u8 = 3;
const K_VERIFIED: u8 = 4;
const K_WRITTEN: u8 = 5;
const K_FILES: u8 = 6;
const K_CLOSED: u8 = 7;
const K_LOST: u8 = 8;

/// What a journal belongs to: the transfer, its geometry and its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalId {
    /// The transfer's identity (info-hash, eD2k file hash).
    pub transfer: Vec<u8>,
    /// Piece length.
    pub piece_len: u32,
    /// Bytes in the transfer.
    pub total: u64,
    /// Every file's path (relative, `/`-separated) and length, in order.
    pub files: Vec<(String, u64)>,
}

impl JournalId {
    /// The identity of a transfer laid out as `layout` over `geo`.
    pub fn new(transfer: &[u8], geo: &Geometry, layout: &FileLayout) -> Self {
        Self {
            transfer: transfer.to_vec(),
            piece_len: geo.piece_len(),
            total: geo.total_len(),
            files: layout
                .files()
                .iter()
                .map(|f| {
                    let p: Vec<String> = f
                        .path
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    (p.join("/"), f.length)
                })
                .collect(),
        }
    }

    fn piece_count(&self) -> u32 {
        if self.piece_len == 0 {
            return 0;
        }
        self.total.div_ceil(u64::from(self.piece_len)) as u32
    }

    fn piece_size(&self, piece: u32) -> u32 {
        let start = u64::from(piece) * u64::from(self.piece_len);
        (self.total.saturating_sub(start)).min(u64::from(self.piece_len)) as u32
    }
}

/// A data file's identity and state as recorded with a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileState {
    /// Inode number (a replaced file has another).
    pub ino: u64,
    /// Length in bytes.
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Nanoseconds of the modification time.
    pub mtime_nsec: u32,
}

/// One journal record (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// What the journal belongs to; always the first record.
    Header(JournalId),
    /// Files weir created or was allowed to overwrite, one bit per file.
    Owned(Bitfield),
    /// Snapshot of verified pieces.
    Have(Bitfield),
    /// Pieces verified, their data flushed before this record was written.
    Verified(Vec<u32>),
    /// Hint: bytes `[0, end)` of `piece` were written (not flushed).
    Written {
        /// Piece index.
        piece: u32,
        /// Bytes written from the piece's start.
        end: u32,
    },
    /// Every data file's state at a flush.
    Files(Vec<FileState>),
    /// Pieces whose stored data was found unreadable: no longer vouched.
    Lost(Vec<u32>),
    /// The run ended cleanly.
    Closed,
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bits(out: &mut Vec<u8>, b: &Bitfield) {
    put_u32(out, b.len());
    out.extend_from_slice(b.as_bytes());
}

impl Record {
    /// Appends the framed record to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut p = Vec::new();
        let kind = match self {
            Record::Header(id) => {
                put_u32(&mut p, id.transfer.len() as u32);
                p.extend_from_slice(&id.transfer);
                put_u32(&mut p, id.piece_len);
                put_u64(&mut p, id.total);
                put_u32(&mut p, id.files.len() as u32);
                for (path, len) in &id.files {
                    put_u32(&mut p, path.len() as u32);
                    p.extend_from_slice(path.as_bytes());
                    put_u64(&mut p, *len);
                }
                K_HEADER
            }
            Record::Owned(b) => {
                put_bits(&mut p, b);
                K_OWNED
            }
            Record::Have(b) => {
                put_bits(&mut p, b);
                K_HAVE
            }
            Record::Verified(v) | Record::Lost(v) => {
                put_u32(&mut p, v.len() as u32);
                for i in v {
                    put_u32(&mut p, *i);
                }
                if matches!(self, Record::Lost(_)) {
                    K_LOST
                } else {
                    K_VERIFIED
                }
            }
            Record::Written { piece, end } => {
                put_u32(&mut p, *piece);
                put_u32(&mut p, *end);
                K_WRITTEN
            }
            Record::Files(v) => {
                put_u32(&mut p, v.len() as u32);
                for s in v {
                    put_u64(&mut p, s.ino);
                    put_u64(&mut p, s.size);
                    put_u64(&mut p, s.mtime_sec as u64);
                    put_u32(&mut p, s.mtime_nsec);
                }
                K_FILES
            }
            Record::Closed => K_CLOSED,
        };
        out.push(SYNC);
        let start = out.len();
        out.push(kind);
        put_u32(out, p.len() as u32);
        out.extend_from_slice(&p);
        let crc = crc32fast::hash(&out[start..]);
        put_u32(out, crc);
    }

    /// The record framed on its own.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

/// Reads little-endian fields from a payload, failing past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn bits(&mut self) -> Option<Bitfield> {
        let len = self.u32()?;
        let bytes = self.take(len.div_ceil(8) as usize)?;
        Bitfield::from_bytes(bytes, len).ok()
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Decodes the record framed at the start of `buf`: the record and the
/// bytes it took, or `None` when it is torn, garbled or unknown.
fn decode(buf: &[u8]) -> Option<(Record, usize)> {
    if buf.len() < FRAME || buf[0] != SYNC {
        return None;
    }
    let kind = buf[1];
    let len = u32::from_le_bytes(buf[2..6].try_into().expect("4 bytes")) as usize;
    if len > MAX_PAYLOAD || buf.len() < FRAME + len {
        return None;
    }
    let body = &buf[1..6 + len];
    let crc = u32::from_le_bytes(buf[6 + len..10 + len].try_into().expect("4 bytes"));
    if crc32fast::hash(body) != crc {
        return None;
    }
    let mut c = Cursor(&buf[6..6 + len]);
    let rec = match kind {
        K_HEADER => {
            let n = c.u32()? as usize;
            let transfer = c.take(n)?.to_vec();
            let piece_len = c.u32()?;
            let total = c.u64()?;
            let count = c.u32()? as usize;
            let mut files = Vec::with_capacity(count.min(len / 12));
            for _ in 0..count {
                let n = c.u32()? as usize;
                let path = String::from_utf8(c.take(n)?.to_vec()).ok()?;
                files.push((path, c.u64()?));
            }
            Record::Header(JournalId {
                transfer,
                piece_len,
                total,
                files,
            })
        }
        K_OWNED => Record::Owned(c.bits()?),
        K_HAVE => Record::Have(c.bits()?),
        K_VERIFIED | K_LOST => {
            let n = c.u32()? as usize;
            if n > len / 4 {
                return None;
            }
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(c.u32()?);
            }
            if kind == K_LOST {
                Record::Lost(v)
            } else {
                Record::Verified(v)
            }
        }
        K_WRITTEN => Record::Written {
            piece: c.u32()?,
            end: c.u32()?,
        },
        K_FILES => {
            let n = c.u32()? as usize;
            if n > len / 28 {
                return None;
            }
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(FileState {
                    ino: c.u64()?,
                    size: c.u64()?,
                    mtime_sec: c.u64()? as i64,
                    mtime_nsec: c.u32()?,
                });
            }
            Record::Files(v)
        }
        K_CLOSED => Record::Closed,
        _ => return None,
    };
    c.done().then_some((rec, FRAME + len))
}

/// What a journal of this transfer says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    /// Pieces verified and flushed (trusted only for files whose state
    /// still matches [`Resume::files`]).
    pub vouched: Bitfield,
    /// Hints: bytes written from the start of each piece (the latest
    /// record per piece). Never trusted: such pieces are hashed again.
    pub written: BTreeMap<u32, u32>,
    /// Files weir created or was allowed to overwrite.
    pub owned: Vec<bool>,
    /// The files' state at the last flush.
    pub files: Option<Vec<FileState>>,
    /// The last record says the run ended cleanly.
    pub clean: bool,
    /// Bytes past the valid prefix did not parse (a torn tail, a stray
    /// byte, a bad checksum).
    pub damaged: bool,
}

/// Why a journal was not used at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotOurs {
    /// Its header, intact, names another transfer or another layout of the
    /// files.
    #[error("the journal belongs to another transfer")]
    Other,
}

/// Reads a journal of the transfer `want` (found under the name weir gives
/// this transfer's journal).
///
/// Only an intact header naming something else makes it not ours. A journal
/// whose start is unreadable (another format, a damaged header) is still
/// this transfer's: the files it covers stay weir's own, it vouches for
/// nothing, and the records found in it are hints. Losing the journal's
/// first bytes therefore costs a recheck, never the user's own partial
/// download being taken for someone else's data.
pub fn parse(data: &[u8], want: &JournalId) -> Result<Resume, NotOurs> {
    let pieces = want.piece_count();
    let nfiles = want.files.len() as u32;
    let mut r = Resume {
        vouched: Bitfield::new(pieces),
        written: BTreeMap::new(),
        owned: vec![false; nfiles as usize],
        files: None,
        clean: false,
        damaged: false,
    };
    let header = data
        .strip_prefix(MAGIC.as_slice())
        .and_then(|body| Some((body, decode(body)?)));
    let (body, mut at) = match header {
        Some((body, (Record::Header(id), n))) => {
            if id != *want {
                return Err(NotOurs::Other);
            }
            (body, n)
        }
        _ => {
            r.owned = vec![true; nfiles as usize];
            r.damaged = true;
            resync(data, 0, want, &mut r);
            return Ok(r);
        }
    };
    // The valid prefix: everything it says counts.
    while at < body.len() {
        let Some((rec, n)) = decode(&body[at..]) else {
            r.damaged = true;
            break;
        };
        let ok = match rec {
            Record::Header(_) => false,
            Record::Owned(b) if b.len() == nfiles => {
                r.owned = (0..nfiles).map(|i| b.get(i)).collect();
                true
            }
            Record::Have(b) if b.len() == pieces => {
                for p in b.iter_ones() {
                    r.vouched.set(p);
                }
                true
            }
            Record::Verified(v) if v.iter().all(|&p| p < pieces) => {
                for p in v {
                    r.vouched.set(p);
                }
                true
            }
            Record::Written { piece, end } if piece < pieces && end <= want.piece_size(piece) => {
                r.written.insert(piece, end);
                true
            }
            Record::Files(v) if v.len() == nfiles as usize => {
                r.files = Some(v);
                true
            }
            Record::Lost(v) => {
                for p in v {
                    r.vouched.clear(p);
                }
                true
            }
            Record::Closed => true,
            _ => false,
        };
        if !ok {
            r.damaged = true;
            break;
        }
        r.clean = matches!(body[at + 1], K_CLOSED);
        at += n;
    }
    if r.damaged {
        r.clean = false;
        resync(body, at + 1, want, &mut r);
    }
    Ok(r)
}

/// Past damage: re-synchronises on the frame marker from `from`; whatever
/// is found is only a reason to hash pieces again ([`Resume::written`]).
fn resync(body: &[u8], from: usize, want: &JournalId, r: &mut Resume) {
    let pieces = want.piece_count();
    let mut i = from;
    while i < body.len() {
        if body[i] != SYNC {
            i += 1;
            continue;
        }
        let Some((rec, n)) = decode(&body[i..]) else {
            i += 1;
            continue;
        };
        let mut hint = |p: u32, end: u32| {
            if p < pieces {
                r.written.insert(p, end.min(want.piece_size(p)));
            }
        };
        match rec {
            Record::Have(b) if b.len() == pieces => {
                for p in b.iter_ones() {
                    hint(p, want.piece_size(p));
                }
            }
            Record::Verified(v) => {
                for p in v {
                    hint(p, u32::MAX);
                }
            }
            Record::Written { piece, end } => hint(piece, end),
            _ => {}
        }
        i += n;
    }
}

/// A data file as found on disk when a transfer opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing at that path.
    Missing,
    /// A regular file.
    File(FileState),
}

/// How a transfer is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Download: missing files are created; files weir owns are written.
    Download,
    /// Seed what is there: nothing is created or written.
    Seed,
}

/// Choices the user made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Download or seed.
    pub mode: Mode,
    /// Hash everything on disk instead of trusting the journal.
    pub recheck: bool,
    /// Files weir did not create may be written into (and resized).
    pub overwrite: bool,
}

/// What to do with one file when the transfer opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileAction {
    /// Missing: create it (sparse, at its length). It is then weir's.
    Create,
    /// Weir's own file: keep it, set to its exact length if it is not.
    Own,
    /// Someone else's data: never written; its pieces are hashed first.
    Foreign,
    /// Missing while seeding: its pieces are not had.
    Absent,
}

/// A file weir may not use as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// A file weir did not create has another length than the transfer's.
    WrongSize {
        /// File index.
        file: usize,
        /// Its length on disk.
        found: u64,
        /// The transfer's length for it.
        want: u64,
    },
}

/// What opening a transfer does, decided from the journal and the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// One action per file.
    pub files: Vec<FileAction>,
    /// Pieces trusted without hashing.
    pub had: Bitfield,
    /// Pieces to hash before they count (data that may be complete).
    pub check: Bitfield,
    /// Pieces partly written by an earlier run: `(piece, bytes from its
    /// start)`, to hash and continue instead of fetching again (a protocol
    /// that asks in whole blocks takes fewer). Disjoint from `had` and
    /// `check`.
    pub partial: Vec<(u32, u32)>,
    /// Pieces that touch a foreign file: hashed before the transfer starts,
    /// because a foreign file must verify before anything is written.
    pub foreign: Bitfield,
    /// Files that cannot be used as they are (only without `overwrite`).
    pub conflicts: Vec<Conflict>,
}

impl Plan {
    /// Whether file `i` is weir's to write.
    pub fn writable(&self, i: usize) -> bool {
        matches!(self.files[i], FileAction::Create | FileAction::Own)
    }

    /// After the pieces in [`Plan::foreign`] were hashed (`verified` holds
    /// those that matched): the files weir would have to write into to
    /// complete the download, which it may not. A failed piece that also
    /// covers a file of weir's own is not counted here: its bytes in the
    /// foreign file are compared, not written, when it arrives.
    pub fn refused_files(
        &self,
        layout: &FileLayout,
        geo: &Geometry,
        verified: &Bitfield,
    ) -> Vec<usize> {
        let mut out = std::collections::BTreeSet::new();
        for p in self.foreign.iter_ones() {
            if verified.get(p) {
                continue;
            }
            let fs: Vec<usize> = layout
                .map(geo.piece_offset(p), u64::from(geo.piece_size(p)))
                .map(|(fi, _, _)| fi)
                .collect();
            if fs.iter().all(|&i| !self.writable(i)) {
                out.extend(fs);
            }
        }
        out.into_iter().collect()
    }
}

/// Decides how to open a transfer: `journal` is what [`parse`] made of its
/// journal (`None`: no usable journal), `found` what each file is on disk
/// now.
pub fn plan(
    layout: &FileLayout,
    geo: &Geometry,
    journal: Option<&Resume>,
    found: &[Found],
    opts: PlanOptions,
) -> Plan {
    let n = geo.piece_count();
    let nfiles = layout.files().len();
    let mut files = Vec::with_capacity(nfiles);
    let mut conflicts = Vec::new();
    // Whether each file's recorded state still holds (its pieces may be
    // trusted), and whether its bytes may be on disk at all.
    let mut intact = vec![false; nfiles];
    let mut present = vec![false; nfiles];
    for (i, f) in layout.files().iter().enumerate() {
        let owned = journal.is_some_and(|j| j.owned.get(i).copied().unwrap_or(false));
        let recorded = journal.and_then(|j| j.files.as_ref()).map(|s| s[i]);
        let action = match found.get(i).copied().unwrap_or(Found::Missing) {
            Found::Missing => match opts.mode {
                Mode::Download => FileAction::Create,
                Mode::Seed => FileAction::Absent,
            },
            Found::File(now) => {
                present[i] = true;
                // A file replaced since (another inode) is not the one weir
                // wrote, whatever the journal says.
                // (A damaged journal with no state left keeps ownership.)
                let same_file = recorded.is_none_or(|r| r.ino == now.ino);
                intact[i] = recorded == Some(now) && now.size == f.length;
                if owned && same_file {
                    FileAction::Own
                } else {
                    if now.size != f.length && opts.mode == Mode::Download && !opts.overwrite {
                        conflicts.push(Conflict::WrongSize {
                            file: i,
                            found: now.size,
                            want: f.length,
                        });
                    }
                    match (opts.mode, opts.overwrite) {
                        (Mode::Download, true) => FileAction::Own,
                        _ => FileAction::Foreign,
                    }
                }
            }
        };
        files.push(action);
    }
    let mut had = Bitfield::new(n);
    let mut check = Bitfield::new(n);
    let mut foreign = Bitfield::new(n);
    let mut partial = Vec::new();
    let touches = |p: u32| {
        let off = geo.piece_offset(p);
        layout
            .map(off, u64::from(geo.piece_size(p)))
            .map(|(fi, _, _)| fi)
            .collect::<Vec<_>>()
    };
    for p in 0..n {
        let fs = touches(p);
        if fs.iter().any(|&i| files[i] == FileAction::Absent) {
            continue; // part of its data is not there to seed
        }
        if fs.iter().any(|&i| files[i] == FileAction::Foreign) {
            // Someone else's data: hashed before anything starts. What the
            // journal says about it still counts if the file is unchanged.
            let trusted = journal.is_some_and(|j| j.vouched.get(p))
                && !opts.recheck
                && fs.iter().all(|&i| intact[i]);
            if trusted {
                had.set(p);
            } else {
                foreign.set(p);
            }
            continue;
        }
        let vouched = journal.is_some_and(|j| j.vouched.get(p));
        if vouched && !opts.recheck && fs.iter().all(|&i| intact[i]) {
            had.set(p);
            continue;
        }
        if !fs.iter().all(|&i| present[i]) {
            continue; // some of its bytes are in a new file: nothing to hash
        }
        if opts.recheck || vouched {
            check.set(p);
            continue;
        }
        match journal.and_then(|j| j.written.get(&p)).copied() {
            Some(end) if end >= geo.piece_size(p) => {
                check.set(p);
            }
            Some(end) if end > 0 && opts.mode == Mode::Download => {
                partial.push((p, end));
            }
            Some(_) => {}
            None if journal.is_none_or(|j| j.files.is_none()) => {
                // Data of weir's own (or adopted) files with no journal to
                // say what it is (damaged, or --overwrite): worth hashing.
                check.set(p);
            }
            None => {}
        }
    }
    Plan {
        files,
        had,
        check,
        partial,
        foreign,
        conflicts,
    }
}

#[cfg(test)]
mod tests;
