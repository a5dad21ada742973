//! The log of changes since the snapshot (`transfers.log`): its records,
//! how they are framed, read back and applied to a [`State`].
//!
//! ```text
//! weir-daemon-log 1 <generation: 16 hex> <crc32 of what precedes: 8 hex>\n
//! record*
//! record = body length (u32 LE) | CRC-32 of those 4 bytes (u32 LE)
//!        | CRC-32 of the body (u32 LE) | body
//! body   = JSON length (u32 LE) | JSON of a `Change` | blob
//! ```
//!
//! The blob is the .torrent of an added transfer (or of a magnet whose
//! metadata came): the log keeps it until the next snapshot, so its copy in
//! `torrents/` need not be durable before the change is acknowledged. The
//! generation ties the log to the snapshot it follows: a log older than the
//! snapshot is what a crash in the middle of a compaction leaves, already
//! in the snapshot.
//!
//! Reading: a record cut short at the end of the file, a bad record that
//! is the file's last, or an all-zero remainder is a write a kill or power
//! cut interrupted (never acknowledged): the records before it are the
//! state. Any other damage is an error naming the file and the offset.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::state::{SavedCaps, SharedRecord, State, StateError, check_record};
use crate::backend::SessionChange;

/// First word of the log's header line.
const MAGIC: &str = "weir-daemon-log";
/// The log format version.
const VERSION: u32 = 1;
/// Length of the header line.
pub const HEADER_LEN: usize = MAGIC.len() + 3 + 16 + 1 + 8 + 1;
/// Bytes before a record's body.
pub const FRAME_LEN: usize = 12;
/// Largest record body (a .torrent of the largest size read, and its
/// record).
pub const MAX_RECORD: usize = crate::sources::MAX_TORRENT + (1 << 20);

/// One change to the state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A new transfer (the blob: its .torrent, for a torrent). Its id is
    /// new; `next_id` passes it; it joins the queue's end.
    Add(SharedRecord),
    /// Transfers' records replaced whole (settings, paused, done, a
    /// magnet's record become a torrent's: then the blob is its .torrent).
    Set(Vec<SharedRecord>),
    /// Transfers removed.
    Remove(Vec<u64>),
    /// Session settings.
    Session {
        /// The next id to give.
        next_id: u64,
        /// Session caps.
        caps: SavedCaps,
        /// What `session-set` changed, merged.
        settings: Box<SessionChange>,
    },
    /// The queue order, whole.
    Queue(Vec<u64>),
    /// Traffic totals: (id, downloaded, uploaded) of the transfers whose
    /// totals moved.
    Traffic(Vec<(u64, u64, u64)>),
}

/// A change and the .torrent it carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The change.
    pub change: Change,
    /// The .torrent of the record it adds or makes a torrent's.
    pub torrent: Option<Vec<u8>>,
}

/// The log's header line for `generation`.
pub fn header(generation: u64) -> Vec<u8> {
    let text = format!("{MAGIC} {VERSION} {generation:016x} ");
    format!("{text}{:08x}\n", crc32fast::hash(text.as_bytes())).into_bytes()
}

/// Reads a header line: the generation.
fn read_header(data: &[u8]) -> Result<u64, String> {
    let line = data
        .get(..HEADER_LEN)
        .filter(|l| l[HEADER_LEN - 1] == b'\n')
        .ok_or("no header line")?;
    fn text(b: &[u8]) -> Result<&str, &'static str> {
        std::str::from_utf8(b).map_err(|_| "header is not text")
    }
    let (head, crc) = (
        text(&line[..HEADER_LEN - 9])?,
        text(&line[HEADER_LEN - 9..HEADER_LEN - 1])?,
    );
    let mut w = head.split(' ');
    if w.next() != Some(MAGIC) {
        return Err("no weir-daemon-log header".into());
    }
    if u32::from_str_radix(crc, 16).ok() != Some(crc32fast::hash(head.as_bytes())) {
        return Err("header checksum mismatch (damaged)".into());
    }
    let version: u32 = w.next().and_then(|v| v.parse().ok()).ok_or("no version")?;
    if version != VERSION {
        return Err(format!(
            "version {version}; this weir reads version {VERSION}"
        ));
    }
    w.next()
        .and_then(|g| u64::from_str_radix(g, 16).ok())
        .ok_or_else(|| "no generation".into())
}

/// Frames one record.
pub fn encode(e: &Entry, out: &mut Vec<u8>) {
    // Serializing plain structs of strings and numbers cannot fail.
    let json = serde_json::to_vec(&e.change).unwrap_or_default();
    let blob = e.torrent.as_deref().unwrap_or_default();
    let len = (4 + json.len() + blob.len()) as u32;
    let start = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&len.to_le_bytes()).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let body = out.len();
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(blob);
    let crc = crc32fast::hash(&out[body..]);
    out[start + 8..body].copy_from_slice(&crc.to_le_bytes());
}

/// What reading a log gave.
#[derive(Debug)]
pub struct Read {
    /// The generation of the snapshot it follows.
    pub generation: u64,
    /// Its records, each with its offset.
    pub entries: Vec<(u64, Entry)>,
    /// Where the last whole record ends.
    pub end: u64,
    /// Why the bytes after `end` were not used (a torn write), if any.
    pub torn: Option<String>,
}

/// Reads a whole log file from `path` (named in errors).
pub fn read(data: &[u8], path: &Path) -> Result<Read, StateError> {
    let bad = |at: usize, why: String| StateError::Corrupt {
        path: path.to_path_buf(),
        why: format!("at offset {at}: {why}"),
    };
    let generation = read_header(data).map_err(|w| bad(0, w))?;
    let mut entries = Vec::new();
    let mut at = HEADER_LEN;
    // A bad record at `at`: the tail a torn write left, or damage.
    let torn_or_bad = |at: usize, why: String, last: bool| {
        if last || data[at..].iter().all(|b| *b == 0) {
            Ok(Some(format!("at offset {at}: {why}")))
        } else {
            Err(bad(at, why))
        }
    };
    let torn = loop {
        let rest = &data[at..];
        if rest.is_empty() {
            break None;
        }
        if rest.len() < FRAME_LEN {
            break torn_or_bad(at, "a record's frame cut short".into(), true)?;
        }
        let word = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
        let len = word(0) as usize;
        if crc32fast::hash(&rest[..4]) != word(4) {
            break torn_or_bad(at, "a record's length is damaged".into(), false)?;
        }
        if !(4..=MAX_RECORD).contains(&len) {
            return Err(bad(at, format!("a record of {len} bytes")));
        }
        let Some(body) = rest.get(FRAME_LEN..FRAME_LEN + len) else {
            break torn_or_bad(at, "a record cut short".into(), true)?;
        };
        let last = rest.len() == FRAME_LEN + len;
        if crc32fast::hash(body) != word(8) {
            break torn_or_bad(at, "a record's checksum mismatch".into(), last)?;
        }
        let entry = decode_body(body).map_err(|w| bad(at, w))?;
        entries.push((at as u64, entry));
        at += FRAME_LEN + len;
    };
    Ok(Read {
        generation,
        entries,
        end: at as u64,
        torn,
    })
}

/// A record's body: its change and blob.
fn decode_body(body: &[u8]) -> Result<Entry, String> {
    let json_len = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
    let json = body
        .get(4..4 + json_len)
        .ok_or("the change is longer than its record")?;
    let change: Change = serde_json::from_slice(json).map_err(|e| format!("bad change: {e}"))?;
    let blob = &body[4 + json_len..];
    Ok(Entry {
        change,
        torrent: (!blob.is_empty()).then(|| blob.to_vec()),
    })
}

/// Checks that `c` applies to `s`, changing nothing.
pub fn check(s: &State, c: &Change) -> Result<(), String> {
    let known = |id: u64| {
        s.get(id)
            .map(|_| ())
            .ok_or_else(|| format!("transfer {id} is not in the state"))
    };
    match c {
        Change::Add(r) => {
            if s.get(r.id).is_some() {
                return Err(format!("transfer {} is added twice", r.id));
            }
            check_record(r, s.next_id.max(r.id.saturating_add(1)))
        }
        Change::Set(rs) => rs.iter().try_for_each(|r| {
            known(r.id)?;
            check_record(r, s.next_id)
        }),
        Change::Remove(ids) => ids.iter().try_for_each(|id| known(*id)),
        Change::Traffic(t) => t.iter().try_for_each(|(id, _, _)| known(*id)),
        Change::Session { .. } | Change::Queue(_) => Ok(()),
    }
}

/// Applies `c` to `s` (checked first: on an error `s` is unchanged).
pub fn apply(s: &mut State, c: Change) -> Result<(), String> {
    check(s, &c)?;
    let at = |s: &State, id: u64| s.transfers.binary_search_by_key(&id, |r| r.id);
    match c {
        Change::Add(r) => {
            s.next_id = s.next_id.max(r.id + 1);
            if !s.queue.contains(&r.id) {
                s.queue.push(r.id);
            }
            let i = at(s, r.id).unwrap_or_else(|i| i);
            s.transfers.insert(i, r);
        }
        Change::Set(rs) => {
            for r in rs {
                if let Ok(i) = at(s, r.id) {
                    s.transfers[i] = r;
                }
            }
        }
        Change::Remove(ids) => {
            let gone: std::collections::BTreeSet<u64> = ids.into_iter().collect();
            s.transfers.retain(|r| !gone.contains(&r.id));
            s.queue.retain(|id| !gone.contains(id));
        }
        Change::Session {
            next_id,
            caps,
            settings,
        } => {
            s.next_id = s.next_id.max(next_id);
            s.caps = caps;
            s.settings = *settings;
        }
        Change::Queue(ids) => {
            s.queue = ids;
            s.complete_queue();
        }
        Change::Traffic(t) => {
            for (id, down, up) in t {
                if let Ok(i) = at(s, id) {
                    s.transfers[i].downloaded = down;
                    s.transfers[i].uploaded = up;
                }
            }
        }
    }
    Ok(())
}
