//! A min-heap of timed items: the event queue of the world and of each link.
//!
//! Items due at the same instant come out in the order they were pushed, so
//! a run is reproducible: nothing depends on heap internals or on hashing.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Items ordered by (time, insertion order).
#[derive(Debug)]
pub(crate) struct Queue<T> {
    heap: BinaryHeap<Entry<T>>,
    seq: u64,
}

#[derive(Debug)]
struct Entry<T> {
    at: Duration,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T> Queue<T> {
    /// Schedules `item` at `at`.
    pub(crate) fn push(&mut self, at: Duration, item: T) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            item,
        });
    }

    /// When the earliest item is due.
    pub(crate) fn peek_time(&self) -> Option<Duration> {
        self.heap.peek().map(|e| e.at)
    }

    /// Takes the earliest item if it is due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Duration) -> Option<(Duration, T)> {
        if self.peek_time()? <= now {
            self.heap.pop().map(|e| (e.at, e.item))
        } else {
            None
        }
    }

    /// Takes the earliest item.
    pub(crate) fn pop(&mut self) -> Option<(Duration, T)> {
        self.heap.pop().map(|e| (e.at, e.item))
    }

    /// Whether nothing is scheduled.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = Queue::default();
        let ms = Duration::from_millis;
        q.push(ms(5), "c");
        q.push(ms(1), "a");
        q.push(ms(5), "d");
        q.push(ms(1), "b");
        assert_eq!(q.pop_due(ms(0)), None);
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, x)| x)).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        assert!(q.is_empty());
    }
}
