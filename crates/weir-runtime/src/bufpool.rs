//! Buffers reused across reads: sockets' receive buffers and storage
//! reads.
//!
//! A reader splits each message off its receive buffer without copying, so
//! a buffer stays alive while any block of it waits in storage. When the
//! reader needs room and its buffer is still shared, it takes another one;
//! left to the allocator, that is a fresh 512 KiB mapping per read: glibc
//! hands out and returns such chunks with `mmap`/`madvise`, and every
//! `recv` into one page-faults and zeroes its 128 pages. Measured on a
//! 1 GiB download into tmpfs: runs where `clear_page_erms` under
//! `recvfrom` took 26% of the process's samples and the download 13.1 s
//! instead of 2.8 s. The pool keeps the buffers a reader let go of and
//! hands one out again once every block split from it has been dropped
//! (`BytesMut::try_reclaim`), so a steady download recycles the same few
//! buffers, their pages already mapped. Storage reads for uploads are the
//! same shape (a buffer per read, alive until the block is sent) and use
//! a pool of their own.

use std::sync::Mutex;

use bytes::BytesMut;

/// A bounded set of let-go buffers of one size (see the module
/// documentation). Past its bound a let-go buffer is simply dropped, and
/// freed with its last block.
#[derive(Debug)]
pub struct BufPool {
    size: usize,
    max: usize,
    kept: Mutex<Vec<BytesMut>>,
}

impl BufPool {
    /// A pool of at most `max` buffers of `size` bytes.
    pub fn new(size: usize, max: usize) -> Self {
        BufPool {
            size,
            max,
            kept: Mutex::new(Vec::new()),
        }
    }

    /// An empty buffer with room for `size` bytes: a kept one nothing
    /// refers to any more, or a new one.
    pub fn take(&self) -> BytesMut {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        // `try_reclaim` succeeds only on a buffer no block shares.
        if let Some(i) = kept.iter_mut().position(|b| b.try_reclaim(self.size)) {
            let mut b = kept.swap_remove(i);
            b.clear();
            return b;
        }
        drop(kept);
        BytesMut::with_capacity(self.size)
    }

    /// Keeps `buf` (whose bytes the caller no longer needs; the rest of a
    /// buffer from [`BufPool::take`] whose front was split off) for a
    /// later [`BufPool::take`], unless the pool is full.
    pub fn give(&self, mut buf: BytesMut) {
        buf.clear();
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < self.max {
            kept.push(buf);
        }
    }

    /// The size of its buffers.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Buffers kept now.
    pub fn kept(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Makes room in `buf` for a read: in place when nothing else refers
    /// to its allocation (the unread tail moved to the front), otherwise by
    /// moving the tail into a buffer from the pool and keeping `buf`'s
    /// (`buf` must come from this pool's [`BufPool::take`]).
    pub fn refill(&self, buf: &mut BytesMut) {
        // The whole buffer again, less the tail kept; at least a good read.
        let min = self.size / 8;
        if buf.try_reclaim(self.size.saturating_sub(buf.len()).max(min)) {
            return;
        }
        let mut next = self.take();
        // A message larger than a buffer grows this one (not a new buffer
        // per read while it arrives).
        next.reserve(buf.len() + min);
        next.extend_from_slice(buf);
        let old = std::mem::replace(buf, next);
        self.give(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_once_its_blocks_are_dropped() {
        let pool = BufPool::new(4096, 4);
        let mut buf = pool.take();
        buf.extend_from_slice(&[7u8; 4000]);
        let block = buf.split_to(3000).freeze();
        let first = block.as_ptr();
        // Shared with `block`: refilled from a new buffer, tail copied.
        pool.refill(&mut buf);
        assert_eq!(&buf[..], &[7u8; 1000][..]);
        assert!(buf.capacity() >= 4096);
        assert_eq!(pool.kept(), 1);
        // Still shared: not handed out.
        let other = pool.take();
        assert_ne!(other.as_ptr(), first);
        drop(block);
        let again = pool.take();
        assert_eq!(again.as_ptr(), first, "the first allocation, reused");
        assert!(again.is_empty() && again.capacity() >= 4096);
        assert_eq!(pool.kept(), 0);
        drop(other);
    }

    #[test]
    fn an_unshared_buffer_is_refilled_in_place() {
        let pool = BufPool::new(4096, 4);
        let mut buf = pool.take();
        let at = buf.as_ptr();
        buf.extend_from_slice(&[1u8; 4096]);
        drop(buf.split_to(4000));
        pool.refill(&mut buf);
        assert_eq!(buf.as_ptr(), at, "moved to the front of its own buffer");
        assert_eq!(&buf[..], &[1u8; 96][..]);
        assert_eq!(pool.kept(), 0);
    }

    #[test]
    fn a_message_larger_than_a_buffer_grows_the_new_one() {
        let pool = BufPool::new(1024, 4);
        let mut buf = pool.take();
        buf.extend_from_slice(&[3u8; 1024]);
        let held = buf.split_to(10).freeze();
        pool.refill(&mut buf);
        assert_eq!(buf.len(), 1014);
        assert!(buf.capacity() - buf.len() >= 128, "room for a read");
        drop(held);
    }

    #[test]
    fn a_buffer_split_off_whole_comes_back() {
        // A read that fills its buffer: the handle left has no capacity
        // but still owns the allocation.
        let pool = BufPool::new(4096, 4);
        let mut buf = pool.take();
        buf.resize(4096, 9);
        let block = buf.split_to(4096).freeze();
        let first = block.as_ptr();
        assert_eq!(buf.capacity(), 0);
        pool.give(buf);
        assert_eq!(pool.kept(), 1);
        drop(block);
        let again = pool.take();
        assert_eq!(again.as_ptr(), first, "the same allocation, reused");
        assert!(again.capacity() >= 4096);
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound() {
        let pool = BufPool::new(1024, 3);
        let mut held = Vec::new();
        for _ in 0..10 {
            let mut b = pool.take();
            b.extend_from_slice(&[0u8; 1024]);
            held.push(b.split_to(512).freeze());
            pool.give(b);
        }
        assert_eq!(pool.kept(), 3);
        drop(held);
        // All three free now: taken in turn, then new ones.
        for _ in 0..3 {
            drop(pool.take());
        }
        assert_eq!(pool.kept(), 0);
    }
}
