//! The process's open data files, at most [`MAX_OPEN`] at once.
//!
//! A transfer opens its files when first used. Held for as long as the
//! transfer lives, that is one descriptor per file of every transfer ever
//! read: a daemon seeding 10,000 one-file torrents after checking them held
//! 10,000 data files open next to 10,000 locks and ran out of descriptors
//! ("Too many open files" on the 10,001st add, with the limit at 20,000).
//! Transmission keeps 32 files open; weir keeps the [`MAX_OPEN`] most
//! recently used, process-wide, and closes the least recently used when
//! another is needed. A file in use by a read or write stays open until
//! that operation ends (the cache hands out `Arc<File>`s).
//!
//! A file closed here is reopened by name through the download directory
//! (links refused). So that a file replaced in between is not mistaken
//! for the one weir had, the first open records its inode and a reopen
//! that finds another is refused as an I/O error: its pieces are then
//! lost, as for a file truncated under weir. Closing does not lose a
//! write error either: since Linux 4.16 an error not yet reported is
//! reported once to the next `fdatasync`, whichever descriptor it is on.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Data files open at most (beyond those in use by an operation).
pub(crate) const MAX_OPEN: usize = 256;

/// Which file: a [`super::files::Files`]'s id and the file's index.
pub(crate) type Key = (u64, usize);

struct Entry {
    file: Arc<File>,
    used: u64,
}

#[derive(Default)]
struct Cache {
    open: HashMap<Key, Entry>,
    clock: u64,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id for a set of files.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

fn with<R>(f: impl FnOnce(&mut Cache) -> R) -> R {
    let mut g = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Cache::default))
}

/// The file `key` if it is open (marked as just used).
pub(crate) fn get(key: Key) -> Option<Arc<File>> {
    with(|c| {
        c.clock += 1;
        let now = c.clock;
        c.open.get_mut(&key).map(|e| {
            e.used = now;
            e.file.clone()
        })
    })
}

/// Keeps `file` open as `key`, closing the least recently used file past
/// [`MAX_OPEN`]; returns the one kept (another thread's, if it opened the
/// same file meanwhile).
pub(crate) fn insert(key: Key, file: File) -> Arc<File> {
    let (kept, evicted) = with(|c| {
        c.clock += 1;
        let now = c.clock;
        if let Some(e) = c.open.get_mut(&key) {
            e.used = now;
            return (e.file.clone(), None);
        }
        let mut evicted = None;
        if c.open.len() >= MAX_OPEN
            && let Some(old) = c.open.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| *k)
        {
            evicted = c.open.remove(&old);
        }
        let file = Arc::new(file);
        c.open.insert(
            key,
            Entry {
                file: file.clone(),
                used: now,
            },
        );
        (file, evicted)
    });
    // Closed outside the lock.
    drop(evicted);
    kept
}

/// Forgets (closes, once no operation uses them) every file of `id`.
pub(crate) fn forget(id: u64) {
    let gone: Vec<Entry> = with(|c| {
        let keys: Vec<Key> = c.open.keys().filter(|k| k.0 == id).copied().collect();
        keys.into_iter().filter_map(|k| c.open.remove(&k)).collect()
    });
    drop(gone);
}

/// Files of `id` open now (for tests).
#[cfg(test)]
pub(crate) fn open_count(id: u64) -> usize {
    with(|c| c.open.keys().filter(|k| k.0 == id).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_open_stay_open_and_the_least_recently_used_goes() {
        let id = next_id();
        let dir = std::env::temp_dir().join(format!("weir-fdcache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, b"x").unwrap();
        let open = || File::open(&path).unwrap();
        for i in 0..MAX_OPEN + 10 {
            insert((id, i), open());
            // File 0 is used all along: it must never be the one closed.
            assert!(get((id, 0)).is_some(), "the most used file was closed");
        }
        assert!(open_count(id) <= MAX_OPEN);
        assert!(
            get((id, 1)).is_none(),
            "the least recently used stayed open"
        );
        assert!(get((id, MAX_OPEN + 9)).is_some());
        forget(id);
        assert_eq!(open_count(id), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
