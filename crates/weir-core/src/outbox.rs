//! What a protocol core has queued for its connections, in the units the
//! runtime's writer sends (`peerconn`): control runs that never wait for an
//! upload cap, and block runs whose payload the cap charges.
//!
//! Every protocol core had the same glue: encode control messages into a
//! per-connection buffer, close that buffer into a unit before a block,
//! append blocks to the open block run up to a size, remember which
//! connections were touched, and turn their queued units into send events
//! after each input. It lives here once: [`Outbox`] per connection and
//! [`Dirty`] per core.

use bytes::{Bytes, BytesMut};

/// Block data is grouped into runs of up to this many payload bytes, each
/// one unit of the writer (one upload-cap reservation, few syscalls).
pub const BLOCK_RUN: u64 = 256 * 1024;

/// One unit for the writer: chunks written in order, and how many of their
/// bytes are payload (0: control only).
pub type Unit = (Vec<Bytes>, u64);

/// A connection's queued output.
#[derive(Debug, Default)]
pub struct Outbox {
    control: BytesMut,
    units: Vec<Unit>,
    queued: u64,
    run: u64,
}

impl Outbox {
    /// An empty outbox grouping blocks into runs of [`BLOCK_RUN`].
    pub fn new() -> Self {
        Self::with_run(BLOCK_RUN)
    }

    /// An empty outbox grouping blocks into runs of up to `run` payload
    /// bytes.
    pub fn with_run(run: u64) -> Self {
        Self {
            control: BytesMut::with_capacity(256),
            units: Vec::new(),
            queued: 0,
            run: run.max(1),
        }
    }

    /// The buffer control messages are encoded into (they are sent in the
    /// order written, ahead of nothing: a block queued later goes after).
    pub fn control(&mut self) -> &mut BytesMut {
        &mut self.control
    }

    /// Queues a block: its header (protocol framing) and its data, a
    /// shared slice of a storage read. Control bytes written before it go
    /// first.
    pub fn block(&mut self, header: Bytes, data: Bytes) {
        let len = data.len() as u64;
        self.block_chunks(header, std::slice::from_ref(&data), len);
    }

    /// Queues a block whose data is several shared chunks (`payload` of
    /// their bytes count against the upload cap).
    pub fn block_chunks(&mut self, header: Bytes, data: &[Bytes], payload: u64) {
        self.close_control();
        let bytes: u64 = data.iter().map(|d| d.len() as u64).sum();
        self.queued += (header.len() as u64) + bytes;
        match self.units.last_mut() {
            Some((chunks, p)) if *p > 0 && *p < self.run => {
                chunks.push(header);
                chunks.extend_from_slice(data);
                *p += payload;
            }
            _ => {
                let mut chunks = Vec::with_capacity(1 + data.len());
                chunks.push(header);
                chunks.extend_from_slice(data);
                self.units.push((chunks, payload));
            }
        }
    }

    /// Whether anything is queued.
    pub fn has_output(&self) -> bool {
        !self.control.is_empty() || !self.units.is_empty()
    }

    /// Takes every queued unit, in order.
    pub fn take(&mut self) -> Vec<Unit> {
        self.close_control();
        self.queued = 0;
        std::mem::take(&mut self.units)
    }

    /// Bytes queued and not yet taken.
    pub fn queued(&self) -> u64 {
        self.queued + self.control.len() as u64
    }

    fn close_control(&mut self) {
        if !self.control.is_empty() {
            self.queued += self.control.len() as u64;
            self.units.push((vec![self.control.split().freeze()], 0));
        }
    }
}

/// The connections touched since output was last collected, in the order
/// they were first touched.
#[derive(Debug, Default)]
pub struct Dirty<K> {
    list: Vec<K>,
}

impl<K: PartialEq + Copy> Dirty<K> {
    /// Nothing touched.
    pub fn new() -> Self {
        Self { list: Vec::new() }
    }

    /// Marks `k` as having output to collect.
    pub fn mark(&mut self, k: K) {
        if !self.list.contains(&k) {
            self.list.push(k);
        }
    }

    /// Forgets `k` (its connection is gone).
    pub fn forget(&mut self, k: K) {
        self.list.retain(|c| *c != k);
    }

    /// Whether nothing is marked.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Takes the touched connections, leaving none.
    pub fn take(&mut self) -> Vec<K> {
        std::mem::take(&mut self.list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_blocks_keep_their_order_and_runs() {
        let mut o = Outbox::new();
        o.control().extend_from_slice(b"ab");
        o.block(Bytes::from_static(b"H"), Bytes::from(vec![1; 1000]));
        o.block(Bytes::from_static(b"H"), Bytes::from(vec![2; 1000]));
        o.control().extend_from_slice(b"c");
        assert_eq!(o.queued(), 2 + 1001 + 1001 + 1);
        let units = o.take();
        assert_eq!(units.len(), 3);
        assert_eq!(units[0], (vec![Bytes::from_static(b"ab")], 0));
        assert_eq!(units[1].0.len(), 4);
        assert_eq!(units[1].1, 2000);
        assert_eq!(units[2], (vec![Bytes::from_static(b"c")], 0));
        assert!(!o.has_output());
        assert_eq!(o.queued(), 0);
    }

    #[test]
    fn block_runs_close_at_the_run_size() {
        let mut o = Outbox::new();
        let block = Bytes::from(vec![0; 16_384]);
        for _ in 0..32 {
            o.block(Bytes::from_static(b"H"), block.clone());
        }
        let units = o.take();
        assert_eq!(units.len(), 2);
        assert_eq!(units[0].1, BLOCK_RUN);
        assert_eq!(units[1].1, BLOCK_RUN);
    }

    #[test]
    fn dirty_lists_each_once_in_first_touch_order() {
        let mut d = Dirty::new();
        d.mark(3u32);
        d.mark(1);
        d.mark(3);
        d.mark(2);
        d.forget(1);
        assert_eq!(d.take(), vec![3, 2]);
        assert!(d.take().is_empty());
    }
}
