//! The send side's buffers: bytes written but not yet sent, already cut
//! into packet buffers with room for the header in front (so a first
//! transmission writes the header in place and hands the buffer out
//! without copying the payload again), and the packets in flight, in
//! sequence order, kept until acknowledged.
//!
//! Memory is bounded by `cap`: payload bytes unsent plus payload bytes sent
//! and not yet acknowledged. A packet acknowledged selectively drops its
//! payload at once (it will never be sent again) and stops counting.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::packet::HEADER_LEN;

/// Packet buffers are carved out of allocations of this size.
const CHUNK: usize = 256 * 1024;

/// What a packet in flight is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The connection request.
    Syn,
    /// Payload.
    Data,
    /// End of our stream.
    Fin,
}

/// One packet sent and not yet acknowledged cumulatively.
#[derive(Debug)]
pub(crate) struct Sent {
    pub(crate) kind: Kind,
    /// The payload (empty once selectively acknowledged).
    pub(crate) payload: Bytes,
    /// Payload length as sent.
    pub(crate) len: usize,
    /// Last transmission time.
    pub(crate) sent_at: Instant,
    /// How often it was sent.
    pub(crate) transmissions: u32,
    /// Acknowledged selectively.
    pub(crate) sacked: bool,
    /// Deemed lost and waiting to be sent again (not counted in flight).
    pub(crate) lost: bool,
    /// Its first transmission was an MTU probe.
    pub(crate) probe: bool,
}

/// Unsent packet buffers and packets in flight.
#[derive(Debug)]
pub(crate) struct SendBuf {
    /// Packet buffers not yet sent, each `[HEADER_LEN zero bytes][payload]`.
    unsent: VecDeque<BytesMut>,
    unsent_bytes: usize,
    /// Whether the last unsent buffer may still take bytes.
    tail_open: bool,
    chunk: BytesMut,
    /// Packets in flight; the front has sequence number `una`.
    pub(crate) inflight: VecDeque<Sent>,
    /// Payload bytes held in `inflight` (not yet acknowledged).
    held: usize,
    cap: usize,
}

impl SendBuf {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            unsent: VecDeque::new(),
            unsent_bytes: 0,
            tail_open: false,
            chunk: BytesMut::new(),
            inflight: VecDeque::new(),
            held: 0,
            cap,
        }
    }

    /// Payload bytes buffered (unsent plus unacknowledged).
    pub(crate) fn buffered(&self) -> usize {
        self.unsent_bytes + self.held
    }

    /// Sets the most bytes it holds (writes beyond are refused; what it
    /// holds already stays).
    pub(crate) fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
    }

    /// The most bytes it holds.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes a write could take now.
    pub(crate) fn space(&self) -> usize {
        self.cap.saturating_sub(self.buffered())
    }

    /// Payload bytes not sent yet.
    pub(crate) fn unsent_bytes(&self) -> usize {
        self.unsent_bytes
    }

    /// Whether the next unsent packet is full (cut at its size; a partial
    /// one is the tail of what was written).
    pub(crate) fn next_full(&self) -> bool {
        self.unsent.front().is_some_and(|b| b.len() == b.capacity())
    }

    /// Cuts the unsent bytes again into packets of `payload_max` (after the
    /// packet size changed; one copy of what is unsent).
    pub(crate) fn recut(&mut self, payload_max: usize) {
        let old: Vec<BytesMut> = self.unsent.drain(..).collect();
        self.unsent_bytes = 0;
        self.tail_open = false;
        let cap = self.cap;
        self.cap = usize::MAX;
        for p in old {
            self.write(&p[HEADER_LEN..], payload_max);
        }
        self.cap = cap;
    }

    /// Payload length of the next unsent packet, if any.
    pub(crate) fn next_len(&self) -> Option<usize> {
        self.unsent.front().map(|b| b.len() - HEADER_LEN)
    }

    fn new_packet(&mut self, size: usize) -> BytesMut {
        if self.chunk.capacity() < size {
            self.chunk = BytesMut::with_capacity(CHUNK.max(size));
        }
        let rest = self.chunk.split_off(size);
        let mut p = std::mem::replace(&mut self.chunk, rest);
        p.extend_from_slice(&[0u8; HEADER_LEN]);
        p
    }

    /// Copies as much of `data` as fits under the cap into packet buffers of
    /// at most `payload_max` payload bytes; returns how much was taken.
    pub(crate) fn write(&mut self, data: &[u8], payload_max: usize) -> usize {
        let n = data.len().min(self.space());
        let mut rest = &data[..n];
        let full = HEADER_LEN + payload_max.max(1);
        while !rest.is_empty() {
            if self.tail_open
                && let Some(last) = self.unsent.back_mut()
            {
                let room = full.min(last.capacity()).saturating_sub(last.len());
                if room > 0 {
                    let k = room.min(rest.len());
                    last.extend_from_slice(&rest[..k]);
                    rest = &rest[k..];
                    self.unsent_bytes += k;
                    continue;
                }
            }
            let p = self.new_packet(full);
            self.unsent.push_back(p);
            self.tail_open = true;
        }
        n
    }

    /// Takes the next unsent packet buffer (header room included).
    pub(crate) fn take_unsent(&mut self) -> Option<BytesMut> {
        let p = self.unsent.pop_front()?;
        if self.unsent.is_empty() {
            self.tail_open = false;
        }
        self.unsent_bytes -= p.len() - HEADER_LEN;
        Some(p)
    }

    /// Records a newly sent packet.
    pub(crate) fn push_inflight(&mut self, s: Sent) {
        self.held += s.payload.len();
        self.inflight.push_back(s);
    }

    /// Removes the oldest packet in flight.
    pub(crate) fn pop_front(&mut self) -> Option<Sent> {
        let s = self.inflight.pop_front()?;
        self.held -= s.payload.len();
        Some(s)
    }

    /// Marks packet `i` selectively acknowledged and frees its payload;
    /// false if it already was.
    pub(crate) fn sack(&mut self, i: usize) -> bool {
        let Some(s) = self.inflight.get_mut(i) else {
            return false;
        };
        if s.sacked {
            return false;
        }
        s.sacked = true;
        self.held -= s.payload.len();
        s.payload = Bytes::new();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_fill_packets_and_respect_the_cap() {
        let mut b = SendBuf::new(10_000);
        assert_eq!(b.write(&[1u8; 2500], 1000), 2500);
        assert_eq!(b.next_len(), Some(1000));
        assert_eq!(b.unsent_bytes(), 2500);
        // The open tail packet (500 bytes) takes the next write first.
        assert_eq!(b.write(&[2u8; 700], 1000), 700);
        let lens: Vec<usize> = std::iter::from_fn(|| b.take_unsent())
            .map(|p| {
                assert!(p[..HEADER_LEN].iter().all(|&x| x == 0));
                p.len() - HEADER_LEN
            })
            .collect();
        assert_eq!(lens, vec![1000, 1000, 1000, 200]);
        assert_eq!(b.unsent_bytes(), 0);
        // A sent tail is closed: the next write starts a new packet.
        assert_eq!(b.write(&[3u8; 20_000], 1000), 10_000);
        assert_eq!(b.space(), 0);
        assert_eq!(b.write(&[3u8; 5], 1000), 0);
    }

    #[test]
    fn held_payload_counts_until_acknowledged() {
        let now = Instant::now(); // test-epoch
        let mut b = SendBuf::new(3000);
        b.write(&[0u8; 3000], 1000);
        for _ in 0..3 {
            let p = b.take_unsent().unwrap().freeze();
            let payload = p.slice(HEADER_LEN..);
            b.push_inflight(Sent {
                kind: Kind::Data,
                len: payload.len(),
                payload,
                sent_at: now,
                transmissions: 1,
                sacked: false,
                lost: false,
                probe: false,
            });
        }
        assert_eq!(b.space(), 0);
        assert!(b.sack(2));
        assert!(!b.sack(2));
        assert_eq!(b.space(), 1000);
        b.pop_front();
        assert_eq!(b.space(), 2000);
    }
}
