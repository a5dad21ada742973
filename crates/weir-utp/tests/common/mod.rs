//! Test helpers: a two-endpoint wire moved by hand (for inspecting,
//! dropping and forging packets) and bulk-transfer applications for the
//! simulator.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_utp::{CloseReason, ConnHandle, Endpoint, Event, StreamError};

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A deterministic test payload.
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Which way a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    AtoB,
    BtoA,
}

/// Two endpoints joined by a wire the test moves by hand, with a virtual
/// clock.
pub struct Pair {
    pub a: Endpoint,
    pub b: Endpoint,
    pub a_addr: SocketAddr,
    pub b_addr: SocketAddr,
    pub t0: Instant,
    pub now: Instant,
    pub a_events: Vec<Event>,
    pub b_events: Vec<Event>,
    /// Delay added to every datagram.
    pub latency: Duration,
    in_flight: Vec<(Instant, Dir, Bytes)>,
    steps: u64,
}

impl Pair {
    pub fn new(a: Endpoint, b: Endpoint) -> Pair {
        let t0 = Instant::now();
        Pair {
            a,
            b,
            a_addr: addr("10.0.0.1:1000"),
            b_addr: addr("10.0.0.2:2000"),
            t0,
            now: t0,
            a_events: Vec::new(),
            b_events: Vec::new(),
            latency: Duration::from_millis(5),
            in_flight: Vec::new(),
            steps: 0,
        }
    }

    /// Collects what both endpoints want to send; `filter` may change or
    /// drop (false) each datagram.
    pub fn collect(&mut self, filter: &mut dyn FnMut(Dir, &mut Vec<u8>) -> bool) {
        let now = self.now;
        while let Some(t) = self.a.poll_transmit(now) {
            assert_eq!(t.dst, self.b_addr);
            let mut d = t.data.to_vec();
            if filter(Dir::AtoB, &mut d) {
                self.in_flight
                    .push((now + self.latency, Dir::AtoB, Bytes::from(d)));
            }
        }
        while let Some(t) = self.b.poll_transmit(now) {
            if t.dst != self.a_addr {
                continue;
            }
            let mut d = t.data.to_vec();
            if filter(Dir::BtoA, &mut d) {
                self.in_flight
                    .push((now + self.latency, Dir::BtoA, Bytes::from(d)));
            }
        }
        while let Some(e) = self.a.poll_event() {
            self.a_events.push(e);
        }
        while let Some(e) = self.b.poll_event() {
            self.b_events.push(e);
        }
    }

    /// Delivers a datagram to one side now.
    pub fn deliver(&mut self, dir: Dir, data: &[u8]) {
        match dir {
            Dir::AtoB => {
                let _ = self.b.handle_datagram(self.a_addr, data, self.now);
            }
            Dir::BtoA => {
                let _ = self.a.handle_datagram(self.b_addr, data, self.now);
            }
        }
    }

    /// Advances to the next datagram arrival or timer (at most `until`);
    /// false when there is nothing before `until`.
    pub fn step(
        &mut self,
        until: Instant,
        filter: &mut dyn FnMut(Dir, &mut Vec<u8>) -> bool,
    ) -> bool {
        self.steps += 1;
        assert!(
            self.steps < 3_000_000,
            "no progress: at {:?}, timers {:?} {:?}, {} in flight, a {:?} b {:?}",
            self.now - self.t0,
            self.a.poll_timeout().map(|t| t - self.t0),
            self.b.poll_timeout().map(|t| t - self.t0),
            self.in_flight.len(),
            self.a_events.last(),
            self.b_events.last(),
        );
        self.collect(filter);
        let next_pkt = self.in_flight.iter().map(|p| p.0).min();
        let next_timer = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = [next_pkt, next_timer].into_iter().flatten().min() else {
            return false;
        };
        if t > until {
            self.now = until;
            return false;
        }
        self.now = self.now.max(t);
        let now = self.now;
        if next_pkt.is_some_and(|p| p <= t) {
            let mut due = Vec::new();
            self.in_flight.retain(|p| {
                if p.0 <= now {
                    due.push(p.clone());
                    false
                } else {
                    true
                }
            });
            for (_, dir, d) in due {
                self.deliver(dir, &d);
            }
        }
        self.a.handle_timeout(now);
        self.b.handle_timeout(now);
        self.collect(filter);
        true
    }

    /// Runs for `d` of virtual time with `filter`.
    pub fn run_for(&mut self, d: Duration, filter: &mut dyn FnMut(Dir, &mut Vec<u8>) -> bool) {
        let until = self.now + d;
        while self.step(until, filter) {}
    }

    /// Runs until `pred` holds (checked after every step) or `d` passes.
    pub fn run_until(
        &mut self,
        d: Duration,
        filter: &mut dyn FnMut(Dir, &mut Vec<u8>) -> bool,
        mut pred: impl FnMut(&mut Pair) -> bool,
    ) -> bool {
        let until = self.now + d;
        loop {
            if pred(self) {
                return true;
            }
            if !self.step(until, filter) {
                return pred(self);
            }
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }
}

pub fn pass(_: Dir, _: &mut Vec<u8>) -> bool {
    true
}

/// Reads everything ready on `h` into `out`; true at EOF.
pub fn drain(ep: &mut Endpoint, h: ConnHandle, out: &mut Vec<u8>, now: Instant) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match ep.read(h, &mut buf, now) {
            Ok(0) => return true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(StreamError::WouldBlock) => return false,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Application state for a one-way bulk transfer in the simulator: node
/// `sender` connects to `receiver` and writes `total` bytes of a pattern,
/// then closes; the receiver checks them and records (time, bytes) as
/// data arrives.
pub struct Bulk {
    pub data: Vec<u8>,
    pub written: usize,
    pub conn: Option<ConnHandle>,
    pub rconn: Option<ConnHandle>,
    pub received: usize,
    pub mismatch: Option<usize>,
    pub eof: bool,
    pub closed: Vec<(usize, CloseReason)>,
    pub samples: Vec<(Instant, usize)>,
    pub close_when_done: bool,
    buf: Vec<u8>,
}

impl Bulk {
    pub fn new(total: usize, seed: u64) -> Bulk {
        Bulk {
            data: pattern(total, seed),
            written: 0,
            conn: None,
            rconn: None,
            received: 0,
            mismatch: None,
            eof: false,
            closed: Vec::new(),
            samples: Vec::new(),
            close_when_done: true,
            buf: vec![0u8; 256 * 1024],
        }
    }

    pub fn fill(&mut self, ep: &mut Endpoint, now: Instant) {
        let Some(h) = self.conn else { return };
        while self.written < self.data.len() {
            match ep.write(h, &self.data[self.written..], now) {
                Ok(0) => return,
                Ok(n) => self.written += n,
                Err(_) => return,
            }
        }
        if self.close_when_done {
            let _ = ep.close(h, now);
        }
    }

    pub fn on_event(
        &mut self,
        sender: usize,
        node: usize,
        ep: &mut Endpoint,
        ev: Event,
        now: Instant,
    ) {
        match ev {
            Event::Connected(_) | Event::Writable(_) if node == sender => self.fill(ep, now),
            Event::Incoming(h) if node != sender => self.rconn = Some(h),
            Event::Readable(h) if node != sender => loop {
                match ep.read(h, &mut self.buf, now) {
                    Ok(0) => {
                        self.eof = true;
                        let _ = ep.close(h, now);
                        break;
                    }
                    Ok(n) => {
                        let want = &self.data[self.received..self.received + n];
                        if want != &self.buf[..n] && self.mismatch.is_none() {
                            let i = want.iter().zip(&self.buf[..n]).position(|(a, b)| a != b);
                            self.mismatch = Some(self.received + i.unwrap_or(0));
                        }
                        self.received += n;
                        self.samples.push((now, self.received));
                    }
                    Err(_) => break,
                }
            },
            Event::Closed { reason, .. } => self.closed.push((node, reason)),
            _ => {}
        }
    }

    /// Bytes received by `t` (from the samples).
    pub fn received_at(&self, t: Instant) -> usize {
        self.samples
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(0, |s| s.1)
    }
}
