//! Giving freed heap back to the system after a burst of work.
//!
//! glibc's allocator keeps the pages of freed blocks: only the top of the
//! main heap is returned, and only past 128 KiB. A daemon that answers a
//! `torrent-get` of 1,000 transfers (a 232 KiB answer and its parts) or takes
//! a thousand adds is left holding the holes between the blocks it still
//! uses, ~0.5-0.7 MiB at 1,000 idle transfers, until the next burst reuses
//! them. [`HeapReleaser`] asks the allocator to give free pages back
//! (`malloc_trim(0)`, `madvise`) 50 ms after the first note of a burst (at
//! most every 50 ms in a long one), off the runtime's worker threads.

use std::time::Duration;

use tokio::sync::mpsc;

/// How long after the last [`HeapReleaser::note`] the release runs: later
/// notes within it are one burst.
const SETTLE: Duration = Duration::from_millis(50);

/// Releases freed heap pages [`SETTLE`] after work that freed memory.
/// Cloning shares it; the task ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct HeapReleaser {
    tx: mpsc::Sender<()>,
}

impl HeapReleaser {
    /// Starts the releasing task on the current tokio runtime.
    pub fn spawn() -> HeapReleaser {
        Self::spawn_with(release_free_heap).0
    }

    fn spawn_with(release: fn() -> bool) -> (HeapReleaser, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let task = tokio::spawn(async move {
            while rx.recv().await.is_some() {
                tokio::time::sleep(SETTLE).await;
                // Notes during the wait are this burst's.
                while rx.try_recv().is_ok() {}
                let _ = tokio::task::spawn_blocking(release).await;
            }
        });
        (HeapReleaser { tx }, task)
    }

    /// Says that memory was just freed (a request answered, a connection
    /// closed): a release follows once the burst settles. Never blocks.
    pub fn note(&self) {
        let _ = self.tx.try_send(());
    }
}

/// Returns the free pages of the allocator's heaps to the system now;
/// whether any were (always false where the allocator cannot say).
pub fn release_free_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes the allocator's own locks and only
        // returns free pages to the system; it reads and writes no memory
        // of ours and is safe to call from any thread at any time.
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        released != 0
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A burst of notes is one release after it settles; dropping the last
    /// handle ends the task.
    #[tokio::test]
    async fn a_burst_is_released_once_and_the_task_ends_with_its_handles() {
        static RELEASED: AtomicU32 = AtomicU32::new(0);
        fn count() -> bool {
            RELEASED.fetch_add(1, Ordering::SeqCst);
            true
        }
        let (h, task) = HeapReleaser::spawn_with(count);
        let other = h.clone();
        for _ in 0..100 {
            h.note();
            other.note();
        }
        drop(h);
        drop(other);
        // The task ends only after the release the notes asked for.
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the task ended")
            .unwrap();
        assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
    }

    /// Freed holes in the heap come back: RSS falls after a release.
    #[test]
    fn freed_holes_are_released() {
        fn rss_kib() -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap()
        }
        // 64 MiB in 16 KiB blocks (below the mmap threshold: from the heap),
        // every block touched; free all but every 64th, so the heap's top
        // stays in use and the holes cannot be trimmed from the end.
        let mut blocks: Vec<Vec<u8>> = (0..4096).map(|_| vec![1u8; 16 << 10]).collect();
        let keep: Vec<Vec<u8>> = blocks
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| i % 64 == 63)
            .map(|(_, b)| std::mem::take(b))
            .collect();
        drop(blocks);
        let before = rss_kib();
        assert!(release_free_heap(), "nothing was released");
        let after = rss_kib();
        assert!(
            before >= after + (32 << 10),
            "RSS {before} KiB before the release, {after} KiB after: under 32 MiB given back"
        );
        assert_eq!(keep.len(), 64);
        assert!(keep.iter().all(|b| b.iter().all(|&x| x == 1)));
    }
}
