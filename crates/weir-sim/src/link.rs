//! One direction of a TCP-like connection, sans-IO (modelled on
//! str0m-netem, but a reliable byte stream rather than datagrams).
//!
//! ```text
//!  write() --> [send buffer] --(bottleneck: rate, segments)--> latency --> [receive buffer] --> read()
//!               bounded:                                        (+ retransmit     bounded by the window
//!               backpressure                                     delay if lost)   the sender was told
//! ```
//!
//! - **Send buffer**: a write that does not fit is accepted in part; the
//!   writer waits until the bottleneck drains some (backpressure).
//! - **Bottleneck**: bytes leave the send buffer in segments of at most
//!   [`LinkConfig::segment`] bytes, one after the other, each taking
//!   `len / rate` seconds; a segment arrives [`LinkConfig::latency`] after it
//!   finished leaving.
//! - **Flow control**: the receive buffer holds what arrived and was not
//!   read yet. The sender transmits only up to the window edge it last
//!   heard of (`bytes read + receive buffer`), and the receiver's reads are
//!   reported back after one latency, so a receiver that stops reading
//!   stalls the link, as TCP does.
//! - **Loss**: each segment is lost with probability [`LinkConfig::loss`]
//!   (drawn from the link's seeded generator). A lost segment is not
//!   dropped from the stream: it arrives [`LinkConfig::retransmit_delay`]
//!   late, its transmission is charged to the bottleneck again, and the
//!   segments behind it wait in the receiver until the gap is filled
//!   (head-of-line blocking).
//! - **Corruption**: [`Link::corrupt_at`] flips one byte at a stream offset
//!   (for protocols that must detect and repair it, such as ZMODEM).
//!
//! Not modelled: congestion control (no slow start, no window reduction on
//! loss), Nagle, delayed acks, per-packet headers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};

use crate::sched::Queue;

/// The shape of one direction of a link.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub latency: Duration,
    /// Bottleneck rate in bytes per second; 0 means infinitely fast.
    pub rate: u64,
    /// Largest segment the bottleneck sends at once.
    pub segment: usize,
    /// The sender's socket buffer: bytes accepted but not yet transmitted.
    pub send_buffer: usize,
    /// The receiver's socket buffer, which is also the flow-control window.
    pub recv_buffer: usize,
    /// Probability that a segment is lost (and retransmitted late).
    pub loss: f64,
    /// How late a lost segment arrives; `None`: one round trip
    /// (`2 * latency`) plus 10 ms, as a fast retransmit would.
    pub retransmit_delay: Option<Duration>,
}

impl LinkConfig {
    /// A link of `latency` one way at `rate` bytes/s with 64 KiB segments,
    /// a 4 MiB send buffer and a receive buffer of twice the round-trip
    /// bandwidth-delay product (at least 4 MiB), so the window never limits
    /// a receiver that keeps reading (as Linux buffer auto-tuning intends).
    pub fn new(latency: Duration, rate: u64) -> Self {
        let bdp = (rate as f64 * 2.0 * latency.as_secs_f64()) as usize;
        Self {
            latency,
            rate,
            segment: 64 * 1024,
            send_buffer: 4 << 20,
            recv_buffer: (2 * bdp).max(4 << 20),
            loss: 0.0,
            retransmit_delay: None,
        }
    }

    /// The same link losing a fraction `p` of its segments.
    pub fn with_loss(mut self, p: f64) -> Self {
        self.loss = p;
        self
    }

    /// The same link with these socket buffers.
    pub fn with_buffers(mut self, send: usize, recv: usize) -> Self {
        self.send_buffer = send;
        self.recv_buffer = recv;
        self
    }

    /// How late a lost segment arrives.
    pub fn retransmit(&self) -> Duration {
        self.retransmit_delay
            .unwrap_or(self.latency * 2 + Duration::from_millis(10))
    }

    /// Seconds the bottleneck needs for `len` bytes.
    fn tx_time(&self, len: usize) -> Duration {
        if self.rate == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(len as f64 / self.rate as f64)
        }
    }
}

/// What a link's timers changed, for whoever waits on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// New bytes (or the end of the stream) can be read.
    pub readable: bool,
    /// Room was made in the send buffer.
    pub writable: bool,
}

/// Counters of one link.
#[derive(Clone, Debug, Default)]
pub struct LinkStats {
    /// Bytes accepted from the writer.
    pub written: u64,
    /// Bytes that left the bottleneck (retransmissions not counted).
    pub transmitted: u64,
    /// Segments that left the bottleneck.
    pub segments: u64,
    /// Segments lost (and delivered late).
    pub lost: u64,
    /// Bytes handed to the reader.
    pub read: u64,
    /// Times the sender had data but the window was closed.
    pub window_stalls: u64,
}

#[derive(Debug)]
enum Flight {
    Segment { off: u64, data: Vec<Bytes> },
    Window { edge: u64 },
    Fin { off: u64 },
}

/// One direction of a connection. Drive it with [`Link::write`],
/// [`Link::read_into`], [`Link::poll_timeout`] and [`Link::handle_timeout`].
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: fastrand::Rng,
    // Sender.
    sndq: VecDeque<Bytes>,
    sndq_len: usize,
    /// Stream offset of the first byte in `sndq`.
    tx_off: u64,
    /// The bottleneck is busy until then.
    tx_free_at: Duration,
    /// The sender may transmit offsets below this.
    window_edge: u64,
    fin_requested: bool,
    fin_sent: bool,
    stalled: bool,
    // In flight.
    flights: Queue<Flight>,
    // Receiver.
    rcvq: VecDeque<Bytes>,
    rcv_len: usize,
    /// Everything below this arrived in order.
    in_order: u64,
    /// Segments that arrived ahead of a gap.
    ooo: BTreeMap<u64, Vec<Bytes>>,
    read_off: u64,
    fin_off: Option<u64>,
    corrupt: BTreeSet<u64>,
    stats: LinkStats,
}

impl Link {
    /// A link with this shape; `seed` drives its losses.
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        assert!(cfg.segment > 0, "a link needs a positive segment size");
        assert!(cfg.recv_buffer > 0, "a link needs a receive buffer");
        assert!(cfg.send_buffer > 0, "a link needs a send buffer");
        Self {
            window_edge: cfg.recv_buffer as u64,
            rng: fastrand::Rng::with_seed(seed),
            cfg,
            sndq: VecDeque::new(),
            sndq_len: 0,
            tx_off: 0,
            tx_free_at: Duration::ZERO,
            fin_requested: false,
            fin_sent: false,
            stalled: false,
            flights: Queue::default(),
            rcvq: VecDeque::new(),
            rcv_len: 0,
            in_order: 0,
            ooo: BTreeMap::new(),
            read_off: 0,
            fin_off: None,
            corrupt: BTreeSet::new(),
            stats: LinkStats::default(),
        }
    }

    /// The link's shape.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Flips the byte at stream offset `offset` when it is transmitted
    /// (once). Offsets already transmitted are ignored.
    pub fn corrupt_at(&mut self, offset: u64) {
        if offset >= self.tx_off {
            self.corrupt.insert(offset);
        }
    }

    /// Room in the send buffer.
    pub fn writable(&self) -> usize {
        if self.fin_requested {
            0
        } else {
            self.cfg.send_buffer - self.sndq_len
        }
    }

    /// Accepts as much of `chunks` (in order) as the send buffer holds and
    /// returns how many bytes that was (0: the buffer is full, or the
    /// stream was closed).
    pub fn write<'a>(
        &mut self,
        now: Duration,
        chunks: impl IntoIterator<Item = &'a Bytes>,
    ) -> usize {
        let mut room = self.writable();
        let mut n = 0;
        for c in chunks {
            if room == 0 {
                break;
            }
            if c.is_empty() {
                continue;
            }
            let take = c.len().min(room);
            self.sndq.push_back(if take == c.len() {
                c.clone()
            } else {
                c.slice(..take)
            });
            room -= take;
            n += take;
        }
        self.sndq_len += n;
        self.stats.written += n as u64;
        self.transmit(now);
        n
    }

    /// Ends the stream after what was written (TCP FIN).
    pub fn close(&mut self, now: Duration) {
        self.fin_requested = true;
        self.transmit(now);
    }

    /// Bytes that can be read now.
    pub fn readable(&self) -> usize {
        self.rcv_len
    }

    /// Whether the stream ended and every byte was read.
    pub fn is_eof(&self) -> bool {
        self.fin_off == Some(self.read_off) && self.rcv_len == 0
    }

    /// Moves up to `max` readable bytes into `buf` and returns how many.
    /// The freed window reaches the sender one latency later.
    pub fn read_into(&mut self, now: Duration, buf: &mut BytesMut, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(front) = self.rcvq.front_mut() else {
                break;
            };
            let take = front.len().min(max - n);
            buf.extend_from_slice(&front[..take]);
            n += take;
            if take == front.len() {
                self.rcvq.pop_front();
            } else {
                front.advance(take);
            }
        }
        if n > 0 {
            self.rcv_len -= n;
            self.read_off += n as u64;
            self.stats.read += n as u64;
            let edge = self.read_off + self.cfg.recv_buffer as u64;
            self.flights
                .push(now + self.cfg.latency, Flight::Window { edge });
        }
        n
    }

    /// When [`Link::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let tx = (self.sndq_len > 0 && self.tx_off < self.window_edge).then_some(self.tx_free_at);
        match (tx, self.flights.peek_time()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Delivers what is due at `now` and keeps the bottleneck busy.
    pub fn handle_timeout(&mut self, now: Duration) -> Wake {
        let mut wake = Wake::default();
        while let Some((_, f)) = self.flights.pop_due(now) {
            match f {
                Flight::Segment { off, data } => wake.readable |= self.arrive(off, data),
                Flight::Window { edge } => self.window_edge = self.window_edge.max(edge),
                Flight::Fin { off } => {
                    self.fin_off = Some(off);
                    wake.readable = true;
                }
            }
        }
        wake.writable = self.transmit(now);
        wake
    }

    /// Sends segments while the bottleneck is free, there is data and the
    /// window is open. Returns whether room was made in the send buffer.
    fn transmit(&mut self, now: Duration) -> bool {
        let mut freed = false;
        while self.sndq_len > 0 && self.tx_free_at <= now {
            let room = self.window_edge.saturating_sub(self.tx_off);
            if room == 0 {
                if !self.stalled {
                    self.stalled = true;
                    self.stats.window_stalls += 1;
                }
                break;
            }
            self.stalled = false;
            let len = self
                .cfg
                .segment
                .min(self.sndq_len)
                .min(usize::try_from(room).unwrap_or(usize::MAX));
            let data = self.take_segment(len);
            let off = self.tx_off;
            self.tx_off += len as u64;
            self.sndq_len -= len;
            freed = true;
            let start = self.tx_free_at.max(now);
            let tx = self.cfg.tx_time(len);
            self.tx_free_at = start + tx;
            let mut arrive = self.tx_free_at + self.cfg.latency;
            if self.cfg.loss > 0.0 && self.rng.f64() < self.cfg.loss {
                self.stats.lost += 1;
                arrive += self.cfg.retransmit();
                // The retransmission occupies the bottleneck again.
                self.tx_free_at += tx;
            }
            self.stats.segments += 1;
            self.stats.transmitted += len as u64;
            self.flights.push(arrive, Flight::Segment { off, data });
        }
        if self.fin_requested && !self.fin_sent && self.sndq_len == 0 {
            self.fin_sent = true;
            let at = self.tx_free_at.max(now) + self.cfg.latency;
            self.flights.push(at, Flight::Fin { off: self.tx_off });
        }
        freed
    }

    /// Splits the first `len` bytes off the send buffer, corrupting the
    /// bytes asked for.
    fn take_segment(&mut self, len: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut left = len;
        let mut off = self.tx_off;
        while left > 0 {
            let front = self.sndq.front_mut().expect("sndq_len counts these bytes");
            let mut chunk = if front.len() <= left {
                self.sndq.pop_front().expect("front exists")
            } else {
                front.split_to(left)
            };
            let end = off + chunk.len() as u64;
            let hits: Vec<u64> = self.corrupt.range(off..end).copied().collect();
            if !hits.is_empty() {
                let mut m = BytesMut::from(&chunk[..]);
                for h in hits {
                    m[(h - off) as usize] ^= 0xff;
                    self.corrupt.remove(&h);
                }
                chunk = m.freeze();
            }
            left -= chunk.len();
            off = end;
            out.push(chunk);
        }
        out
    }

    /// A segment arrived; returns whether in-order data became readable.
    fn arrive(&mut self, off: u64, data: Vec<Bytes>) -> bool {
        if off != self.in_order {
            self.ooo.insert(off, data);
            return false;
        }
        self.push_in_order(data);
        while let Some(d) = self.ooo.remove(&self.in_order) {
            self.push_in_order(d);
        }
        true
    }

    fn push_in_order(&mut self, data: Vec<Bytes>) {
        for d in data {
            self.in_order += d.len() as u64;
            self.rcv_len += d.len();
            self.rcvq.push_back(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs the link to quiescence, reading everything as it arrives
    /// (optionally never reading); returns when the last byte was read (or,
    /// not reading, when the link went quiet) and the bytes read.
    fn drain(link: &mut Link, mut now: Duration, read: bool) -> (Duration, Vec<u8>) {
        let mut got = BytesMut::new();
        let mut last = now;
        while let Some(t) = link.poll_timeout() {
            now = now.max(t);
            link.handle_timeout(now);
            let n = link.readable();
            if read && n > 0 {
                link.read_into(now, &mut got, n);
                last = now;
            }
            if !read {
                last = now;
            }
        }
        (last, got.to_vec())
    }

    fn bytes(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i % 251) as u8).collect::<Vec<_>>())
    }

    #[test]
    fn latency_plus_serialization() {
        // 1 MB/s, 10 ms: 64 KiB takes 65.536 ms to send, +10 ms to arrive.
        let mut l = Link::new(LinkConfig::new(10 * MS, 1_000_000), 1);
        let data = bytes(65_536);
        assert_eq!(l.write(Duration::ZERO, [&data]), 65_536);
        l.handle_timeout(Duration::ZERO);
        let t = l.poll_timeout().unwrap();
        assert_eq!(t, Duration::from_micros(75_536));
        let (_, got) = drain(&mut l, Duration::ZERO, true);
        assert_eq!(got, data[..]);
    }

    #[test]
    fn rate_is_the_bottleneck() {
        let mut l = Link::new(LinkConfig::new(5 * MS, 10_000_000), 1);
        let data = bytes(1_000_000);
        assert_eq!(l.write(Duration::ZERO, [&data]), 1_000_000);
        let (end, got) = drain(&mut l, Duration::ZERO, true);
        assert_eq!(got.len(), 1_000_000);
        // 100 ms on the wire + 5 ms latency.
        assert!((end.as_secs_f64() - 0.105).abs() < 1e-6, "{end:?}");
    }

    #[test]
    fn full_send_buffer_accepts_part_of_a_write() {
        let cfg = LinkConfig::new(MS, 1_000).with_buffers(100_000, 1 << 20);
        let mut l = Link::new(cfg, 1);
        let data = bytes(150_000);
        // The first segment leaves at once, so 64 KiB of room reopens.
        let n = l.write(Duration::ZERO, [&data]);
        assert_eq!(n, 100_000);
        assert_eq!(l.writable(), 65_536);
        assert_eq!(l.write(Duration::ZERO, [&data.slice(n..)]), 50_000);
    }

    #[test]
    fn receiver_that_does_not_read_stalls_the_sender() {
        let cfg = LinkConfig::new(MS, 0).with_buffers(1 << 20, 200_000);
        let mut l = Link::new(cfg, 1);
        let data = bytes(2_000_000);
        assert_eq!(l.write(Duration::ZERO, [&data]), 1 << 20);
        let (now, _) = drain(&mut l, Duration::ZERO, false);
        assert_eq!(l.readable(), 200_000);
        assert_eq!(l.stats().transmitted, 200_000);
        assert_eq!(l.writable(), 200_000);
        assert!(l.stats().window_stalls >= 1);
        // Reading reopens the window one latency later.
        let mut buf = BytesMut::new();
        assert_eq!(l.read_into(now, &mut buf, 50_000), 50_000);
        assert_eq!(l.poll_timeout(), Some(now + MS));
        l.handle_timeout(now + MS);
        assert_eq!(l.stats().transmitted, 250_000);
    }

    #[test]
    fn loss_delays_and_blocks_the_head_of_line() {
        let cfg = LinkConfig::new(10 * MS, 0).with_loss(1.0);
        let mut l = Link::new(cfg, 7);
        let data = bytes(200_000);
        l.write(Duration::ZERO, [&data]);
        let (end, got) = drain(&mut l, Duration::ZERO, true);
        assert_eq!(got, data[..]);
        // Every segment lost once: all arrive 10 ms + 30 ms late.
        assert_eq!(end, 40 * MS);
        assert_eq!(l.stats().lost, 4);

        // One loss in the middle: later segments wait for it.
        let cfg = LinkConfig::new(10 * MS, 0);
        let mut l = Link::new(cfg, 7);
        l.write(Duration::ZERO, [&data.slice(..65_536)]);
        l.cfg.loss = 1.0;
        l.write(Duration::ZERO, [&data.slice(65_536..131_072)]);
        l.cfg.loss = 0.0;
        l.write(Duration::ZERO, [&data.slice(131_072..)]);
        l.handle_timeout(10 * MS);
        assert_eq!(l.readable(), 65_536);
        l.handle_timeout(40 * MS);
        assert_eq!(l.readable(), 200_000);
    }

    #[test]
    fn corruption_flips_one_byte() {
        let mut l = Link::new(LinkConfig::new(MS, 0), 1);
        l.corrupt_at(70_000);
        let data = bytes(100_000);
        l.write(Duration::ZERO, [&data]);
        let (_, got) = drain(&mut l, Duration::ZERO, true);
        let diff: Vec<usize> = (0..data.len()).filter(|&i| got[i] != data[i]).collect();
        assert_eq!(diff, [70_000]);
        assert_eq!(got[70_000], !data[70_000]);
    }

    #[test]
    fn fin_arrives_after_the_data() {
        let mut l = Link::new(LinkConfig::new(MS, 1_000_000), 1);
        l.write(Duration::ZERO, [&bytes(10_000)]);
        l.close(Duration::ZERO);
        assert_eq!(l.write(Duration::ZERO, [&bytes(1)]), 0);
        let mut got = BytesMut::new();
        while !l.is_eof() {
            let now = l.poll_timeout().expect("fin still in flight");
            l.handle_timeout(now);
            let n = l.readable();
            l.read_into(now, &mut got, n);
        }
        assert_eq!(got.len(), 10_000);
    }
}
