//! The receive side's buffers: data delivered in order and waiting for the
//! application, and the bounded reorder buffer for packets that arrived
//! ahead of a gap.
//!
//! Memory is bounded by `cap` bytes (what the advertised window promises):
//! in-order data waiting to be read plus packets held for reordering, each
//! of those charged at least [`MIN_CHARGE`] bytes so that tiny packets
//! cannot pin more memory than the window says. The reorder buffer also
//! spans at most `max_span` sequence numbers; packets beyond are dropped,
//! not buffered. In-order payloads are copied once, into large shared
//! buffers; out-of-order ones into exact-size buffers (so a straggler
//! never pins a large buffer).
//!
//! Beyond its own cap, a buffer answers to its endpoint's budget: past
//! `floor` bytes held it takes a packet only while the endpoint's `room`
//! (what its budget has left over every connection) covers it, so many
//! connections together hold at most the budget plus a floor each (see
//! [`crate::Config::recv_budget`]).

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

/// Least a held out-of-order packet is charged against the window.
pub(crate) const MIN_CHARGE: usize = 64;

/// In-order payloads are copied into allocations of this size.
const CHUNK: usize = 256 * 1024;

/// What became of an arriving packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Delivered in order, with `n` packets in all (it and the ones the
    /// reorder buffer held after it).
    InOrder(u16),
    /// Held for reordering.
    Buffered,
    /// Already received (delivered or held).
    Duplicate,
    /// Too far ahead of the next expected packet: dropped.
    OutOfWindow,
    /// No room under the window: dropped.
    NoRoom,
    /// Past the floor and the endpoint's budget has no room: dropped.
    OverBudget,
}

/// In-order data and the reorder buffer.
#[derive(Debug)]
pub(crate) struct RecvBuf {
    ready: VecDeque<Bytes>,
    ready_bytes: usize,
    /// `reorder[i]` holds the packet `i` after the next expected one
    /// (`reorder[0]` is always empty).
    reorder: VecDeque<Option<Bytes>>,
    reorder_charge: usize,
    reorder_count: usize,
    chunk: BytesMut,
    cap: usize,
    max_span: usize,
    /// Bytes held that never need the endpoint's budget.
    floor: usize,
    /// What the endpoint's budget has left (set before each packet).
    room: usize,
}

impl RecvBuf {
    pub(crate) fn new(cap: usize, max_span: usize) -> Self {
        Self {
            ready: VecDeque::new(),
            ready_bytes: 0,
            reorder: VecDeque::new(),
            reorder_charge: 0,
            reorder_count: 0,
            chunk: BytesMut::new(),
            cap,
            max_span: max_span.max(2),
            floor: usize::MAX,
            room: usize::MAX,
        }
    }

    /// Bytes it may always hold, whatever the endpoint's budget says.
    pub(crate) fn set_floor(&mut self, floor: usize) {
        self.floor = floor;
    }

    /// What the endpoint's budget has left for every connection now.
    pub(crate) fn set_room(&mut self, room: usize) {
        self.room = room;
    }

    /// Bytes held (unread in-order data plus the reorder buffer's charge):
    /// what the endpoint's budget counts.
    pub(crate) fn held_bytes(&self) -> usize {
        self.ready_bytes + self.reorder_charge
    }

    /// The most bytes it holds (never lowered: a window once advertised
    /// stays honoured).
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Raises the most bytes it holds to `cap`.
    pub(crate) fn grow(&mut self, cap: usize) {
        self.cap = self.cap.max(cap);
    }

    /// Window to advertise: bytes still free under the cap, and under the
    /// floor or the endpoint's room.
    pub(crate) fn free(&self) -> usize {
        let held = self.held_bytes();
        let budget = self.floor.saturating_sub(held).max(self.room);
        self.cap.saturating_sub(held).min(budget)
    }

    /// Whether `more` bytes may be held on top of `held` under the budget.
    fn budget_takes(&self, held: usize, more: usize) -> bool {
        held + more <= self.floor || more <= self.room
    }

    /// Bytes ready for the application.
    pub(crate) fn ready_bytes(&self) -> usize {
        self.ready_bytes
    }

    /// Packets held for reordering.
    pub(crate) fn held(&self) -> usize {
        self.reorder_count
    }

    fn deliver(&mut self, payload: &[u8]) {
        if payload.is_empty() {
            return;
        }
        if self.chunk.capacity() - self.chunk.len() < payload.len() {
            self.chunk = BytesMut::with_capacity(CHUNK.max(payload.len()));
        }
        self.chunk.extend_from_slice(payload);
        let b = self.chunk.split().freeze();
        self.ready_bytes += b.len();
        self.ready.push_back(b);
    }

    /// A packet `offset` sequence numbers after the next expected one
    /// (0: it is the next one; 0x8000 and above: before it). The peer's FIN
    /// takes a sequence number and is held like an empty data packet.
    ///
    /// The next expected packet is refused only when in-order data alone
    /// would pass the cap, or the floor when the budget has no room: it is
    /// what frees the reorder buffer, so refusing it for the reorder
    /// buffer's sake could stall the connection.
    pub(crate) fn on_packet(&mut self, offset: u16, payload: &[u8]) -> Arrival {
        if offset >= 0x8000 {
            return Arrival::Duplicate;
        }
        let offset = usize::from(offset);
        if offset == 0 {
            if self.ready_bytes + payload.len() > self.cap {
                return Arrival::NoRoom;
            }
            if !self.budget_takes(self.ready_bytes, payload.len()) {
                return Arrival::OverBudget;
            }
            self.deliver(payload);
            let mut n = 1u16;
            self.reorder.pop_front();
            while let Some(Some(_)) = self.reorder.front() {
                let Some(Some(p)) = self.reorder.pop_front() else {
                    break;
                };
                self.reorder_count -= 1;
                self.reorder_charge -= p.len().max(MIN_CHARGE);
                self.ready_bytes += p.len();
                if !p.is_empty() {
                    self.ready.push_back(p);
                }
                n += 1;
            }
            return Arrival::InOrder(n);
        }
        if offset >= self.max_span {
            return Arrival::OutOfWindow;
        }
        if self.reorder.get(offset).is_some_and(Option::is_some) {
            return Arrival::Duplicate;
        }
        let charge = payload.len().max(MIN_CHARGE);
        if self.ready_bytes + self.reorder_charge + charge > self.cap {
            return Arrival::NoRoom;
        }
        if !self.budget_takes(self.held_bytes(), charge) {
            return Arrival::OverBudget;
        }
        if self.reorder.len() <= offset {
            self.reorder.resize(offset + 1, None);
        }
        self.reorder[offset] = Some(Bytes::copy_from_slice(payload));
        self.reorder_count += 1;
        self.reorder_charge += charge;
        Arrival::Buffered
    }

    /// Writes the selective-ACK bitmask (bit `j`: packet `j + 2` after the
    /// last one delivered) into `out`; returns its length in bytes (0: none
    /// held), trimmed to the last set bit and to `out`'s length.
    pub(crate) fn sack(&self, out: &mut [u8]) -> usize {
        if self.reorder_count == 0 {
            return 0;
        }
        let bits = (self.reorder.len().saturating_sub(1)).min(out.len() * 8);
        let mut last = 0;
        for b in out.iter_mut().take(bits.div_ceil(8)) {
            *b = 0;
        }
        for j in 0..bits {
            if self.reorder[1 + j].is_some() {
                out[j / 8] |= 1 << (j % 8);
                last = j / 8 + 1;
            }
        }
        last
    }

    /// Copies ready data into `buf`; returns the bytes copied.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = self.ready.front_mut() else {
                break;
            };
            let k = front.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&front[..k]);
            front.advance(k);
            n += k;
            if front.is_empty() {
                self.ready.pop_front();
            }
        }
        self.ready_bytes -= n;
        n
    }

    /// Takes the next ready buffer (at most `max` bytes of it), without
    /// copying.
    pub(crate) fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        let front = self.ready.front_mut()?;
        let b = if front.len() <= max {
            self.ready.pop_front()?
        } else {
            front.split_to(max)
        };
        self.ready_bytes -= b.len();
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorders_and_delivers_in_order() {
        let mut r = RecvBuf::new(1 << 20, 100);
        assert_eq!(r.on_packet(2, b"c"), Arrival::Buffered);
        assert_eq!(r.on_packet(1, b"b"), Arrival::Buffered);
        assert_eq!(r.on_packet(1, b"b"), Arrival::Duplicate);
        assert_eq!(r.on_packet(4, b"e"), Arrival::Buffered);
        let mut s = [0u8; 4];
        // Bits for offsets 2.. : offset 2 -> bit 0? No: bit j is offset j + 1.
        assert_eq!(r.sack(&mut s), 1);
        assert_eq!(s[0], 0b1011);
        assert_eq!(r.on_packet(0, b"a"), Arrival::InOrder(3));
        let mut buf = [0u8; 10];
        assert_eq!(r.read(&mut buf), 3);
        assert_eq!(&buf[..3], b"abc");
        // Offsets now relative to the next expected ("d").
        assert_eq!(r.sack(&mut s), 1);
        assert_eq!(s[0], 0b1);
        assert_eq!(r.on_packet(0xffff, b"c"), Arrival::Duplicate);
        assert_eq!(r.on_packet(0, b"d"), Arrival::InOrder(2));
        assert_eq!(r.read_bytes(100).as_deref(), Some(&b"d"[..]));
        assert_eq!(r.read_bytes(100).as_deref(), Some(&b"e"[..]));
        assert_eq!(r.read_bytes(100), None);
        assert_eq!(r.held(), 0);
        assert_eq!(r.free(), 1 << 20);
    }

    #[test]
    fn far_packets_and_overflow_are_dropped() {
        let mut r = RecvBuf::new(1000, 50);
        assert_eq!(r.on_packet(50, b"x"), Arrival::OutOfWindow);
        assert_eq!(r.on_packet(0x7fff, b"x"), Arrival::OutOfWindow);
        // Tiny packets are charged 64 bytes each: 15 fit under 1000.
        for i in 1..=15 {
            assert_eq!(r.on_packet(i, b"x"), Arrival::Buffered, "{i}");
        }
        assert_eq!(r.on_packet(16, b"x"), Arrival::NoRoom);
        assert_eq!(r.free(), 1000 - 15 * 64);
        // The gap filler is taken (it frees the reorder buffer).
        assert_eq!(r.on_packet(0, &[0u8; 40]), Arrival::InOrder(16));
        assert_eq!(r.ready_bytes(), 55);
        assert_eq!(r.free(), 1000 - 55);
        // In-order data beyond the cap is refused while unread.
        assert_eq!(r.on_packet(0, &[0u8; 946]), Arrival::NoRoom);
        assert_eq!(r.on_packet(0, &[0u8; 945]), Arrival::InOrder(1));
        assert_eq!(r.free(), 0);
    }

    #[test]
    fn past_the_floor_only_the_budget_takes_packets() {
        let mut r = RecvBuf::new(1 << 20, 100);
        r.set_floor(3000);
        r.set_room(0);
        // Within the floor: taken, out of order or in order.
        assert_eq!(r.on_packet(2, &[1; 1000]), Arrival::Buffered);
        assert_eq!(r.on_packet(3, &[1; 1000]), Arrival::Buffered);
        assert_eq!(r.on_packet(4, &[1; 1001]), Arrival::OverBudget);
        assert_eq!(r.free(), 1000);
        // The gap fillers count only what is ready: they free the reorder
        // buffer, so a connection full of out-of-order data never stalls.
        assert_eq!(r.on_packet(0, &[1; 500]), Arrival::InOrder(1));
        assert_eq!(r.on_packet(0, &[1; 500]), Arrival::InOrder(3));
        assert_eq!(r.held_bytes(), 3000);
        assert_eq!(r.free(), 0);
        assert_eq!(r.on_packet(0, &[1; 1]), Arrival::OverBudget);
        // Room in the budget takes it past the floor, and shows in the window.
        r.set_room(700);
        assert_eq!(r.free(), 700);
        assert_eq!(r.on_packet(0, &[1; 701]), Arrival::OverBudget);
        assert_eq!(r.on_packet(0, &[1; 700]), Arrival::InOrder(1));
        // Reading frees the floor again.
        let mut b = vec![0u8; 4000];
        assert_eq!(r.read(&mut b), 3700);
        r.set_room(0);
        assert_eq!(r.free(), 3000);
        assert_eq!(r.on_packet(1, &[1; 3000]), Arrival::Buffered);
    }

    #[test]
    fn partial_reads() {
        let mut r = RecvBuf::new(1 << 20, 10);
        r.on_packet(0, b"hello");
        r.on_packet(0, b"world");
        let mut b = [0u8; 3];
        assert_eq!(r.read(&mut b), 3);
        assert_eq!(&b, b"hel");
        assert_eq!(r.read_bytes(4).as_deref(), Some(&b"lo"[..]));
        assert_eq!(r.read_bytes(4).as_deref(), Some(&b"worl"[..]));
        assert_eq!(r.ready_bytes(), 1);
    }
}
