//! A deterministic virtual-time network for uTP endpoints.
//!
//! Nodes are [`Endpoint`]s with an address each; a [`LinkSpec`] shapes each
//! direction between two nodes:
//!
//! ```text
//!  datagram --(loss?)--> [bottleneck queue, `queue` bytes, tail drop]
//!           --(rate: size / rate each, one after the other)--> delay --> node
//! ```
//!
//! plus optional reordering (a share of datagrams held back `reorder_delay`)
//! and duplication. A [`Reno`] model flow (slow start, +1 packet per round
//! trip, halving once per round trip on loss) can share a link with uTP to
//! test that LEDBAT yields. Everything is driven from one event queue
//! ordered by (time, insertion), with seeded generators: a seed reproduces
//! a run exactly. Time is virtual: a run of seconds takes as long as its
//! packets take to process.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::{Endpoint, Event};

/// One direction of a link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Bottleneck rate in bytes per second (0: infinitely fast).
    pub rate: u64,
    /// Bytes the bottleneck queue holds; datagrams that do not fit are dropped.
    pub queue: usize,
    /// Probability that a datagram is lost (before the queue).
    pub loss: f64,
    /// Probability that a datagram is held back by `reorder_delay`.
    pub reorder: f64,
    /// How long a reordered datagram is held back.
    pub reorder_delay: Duration,
    /// Probability that a datagram arrives twice.
    pub duplicate: f64,
    /// Largest datagram the link carries; larger ones are dropped (0: any).
    pub mtu: usize,
}

impl LinkSpec {
    /// A link of `delay` one way at `rate` bytes/s with a queue of `queue`
    /// bytes and nothing lost, reordered or duplicated.
    pub fn new(delay: Duration, rate: u64, queue: usize) -> Self {
        Self {
            delay,
            rate,
            queue,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            duplicate: 0.0,
            mtu: 0,
        }
    }
}

/// What a link did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams delivered (duplicates included).
    pub delivered: u64,
    /// Bytes delivered.
    pub bytes: u64,
    /// Datagrams lost at random.
    pub lost: u64,
    /// Datagrams dropped by a full queue.
    pub dropped: u64,
    /// Datagrams dropped for exceeding the link's MTU.
    pub too_big: u64,
    /// Most bytes queued at once.
    pub max_queue: usize,
}

#[derive(Debug)]
struct Link {
    spec: LinkSpec,
    busy_until: Duration,
    rng: fastrand::Rng,
    stats: LinkStats,
}

impl Link {
    /// Queues `size` bytes at `now`; the arrival times (none if dropped,
    /// two if duplicated).
    fn send(&mut self, now: Duration, size: usize) -> (Option<Duration>, Option<Duration>) {
        if self.spec.mtu > 0 && size > self.spec.mtu {
            self.stats.too_big += 1;
            return (None, None);
        }
        if self.spec.loss > 0.0 && self.rng.f64() < self.spec.loss {
            self.stats.lost += 1;
            return (None, None);
        }
        let done = if self.spec.rate == 0 {
            now
        } else {
            let rate = self.spec.rate as f64;
            let backlog = self.busy_until.saturating_sub(now).as_secs_f64() * rate;
            if backlog + size as f64 > self.spec.queue as f64 {
                self.stats.dropped += 1;
                return (None, None);
            }
            self.stats.max_queue = self.stats.max_queue.max(backlog as usize + size);
            let start = self.busy_until.max(now);
            self.busy_until = start + Duration::from_secs_f64(size as f64 / rate);
            self.busy_until
        };
        let mut at = done + self.spec.delay;
        if self.spec.reorder > 0.0 && self.rng.f64() < self.spec.reorder {
            at += self.spec.reorder_delay;
        }
        let dup = (self.spec.duplicate > 0.0 && self.rng.f64() < self.spec.duplicate)
            .then_some(at + Duration::from_micros(10));
        (Some(at), dup)
    }

    /// When a datagram sent now would have been delivered (for loss signals).
    fn would_arrive(&self, now: Duration) -> Duration {
        self.busy_until.max(now) + self.spec.delay
    }
}

/// A TCP-like model flow: Reno's window (slow start, then one packet per
/// round trip; halved once per round trip on loss), packets of `mss`
/// bytes, each acknowledged at once by the receiver. Only the window is
/// modelled (a lost packet's data is not resent), which is what sharing a
/// bottleneck needs.
#[derive(Clone, Debug)]
pub struct Reno {
    from: usize,
    to: usize,
    mss: usize,
    cwnd: f64,
    ssthresh: f64,
    in_flight: usize,
    next_seq: u64,
    recover: u64,
    active: bool,
    /// Payload bytes delivered to the receiver.
    pub delivered: u64,
    /// Loss events (window halvings).
    pub losses: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Item {
    Datagram {
        to: usize,
        from: SocketAddr,
        data: Bytes,
    },
    RenoStart(usize),
    RenoStop(usize),
    RenoData(usize),
    RenoAck(usize),
    RenoLoss(usize, u64),
}

/// Bytes of headers counted for a Reno packet and for its ACK.
const RENO_HEADER: usize = 40;

/// The simulated network.
pub struct Sim {
    base: Instant,
    now: Duration,
    nodes: Vec<Endpoint>,
    addrs: Vec<SocketAddr>,
    by_addr: BTreeMap<SocketAddr, usize>,
    links: BTreeMap<(usize, usize), Link>,
    queue: BinaryHeap<Reverse<(Duration, u64, Item)>>,
    seq: u64,
    seed: u64,
    renos: Vec<Reno>,
}

impl Sim {
    /// An empty network whose time 0 is `base`; `seed` drives the links.
    pub fn new(base: Instant, seed: u64) -> Sim {
        Sim {
            base,
            now: Duration::ZERO,
            nodes: Vec::new(),
            addrs: Vec::new(),
            by_addr: BTreeMap::new(),
            links: BTreeMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            seed,
            renos: Vec::new(),
        }
    }

    /// Adds a node; returns its index.
    pub fn add_node(&mut self, ep: Endpoint, addr: SocketAddr) -> usize {
        let i = self.nodes.len();
        self.nodes.push(ep);
        self.addrs.push(addr);
        self.by_addr.insert(addr, i);
        i
    }

    /// Shapes the direction `from` -> `to` (unset directions are perfect:
    /// no delay, infinitely fast).
    pub fn set_link(&mut self, from: usize, to: usize, spec: LinkSpec) {
        let n = self.links.len() as u64;
        self.links.insert(
            (from, to),
            Link {
                spec,
                busy_until: self.now,
                rng: fastrand::Rng::with_seed(self.seed ^ (n + 1).wrapping_mul(0x9E37_79B9)),
                stats: LinkStats::default(),
            },
        );
    }

    /// What the direction `from` -> `to` did.
    pub fn link_stats(&self, from: usize, to: usize) -> LinkStats {
        self.links
            .get(&(from, to))
            .map(|l| l.stats.clone())
            .unwrap_or_default()
    }

    /// Virtual now.
    pub fn now(&self) -> Instant {
        self.base + self.now
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now
    }

    /// A node's address.
    pub fn addr(&self, node: usize) -> SocketAddr {
        self.addrs[node]
    }

    /// A node's endpoint (call [`Sim::flush`] after acting on it).
    pub fn endpoint(&mut self, node: usize) -> &mut Endpoint {
        &mut self.nodes[node]
    }

    /// A Reno model flow from `from` to `to`, starting at `start` and
    /// stopping at `stop` (virtual times since the start); returns its index.
    pub fn add_reno(
        &mut self,
        from: usize,
        to: usize,
        start: Duration,
        stop: Option<Duration>,
    ) -> usize {
        let i = self.renos.len();
        self.renos.push(Reno {
            from,
            to,
            mss: 1400,
            cwnd: 10.0 * 1400.0,
            ssthresh: f64::INFINITY,
            in_flight: 0,
            next_seq: 0,
            recover: 0,
            active: false,
            delivered: 0,
            losses: 0,
        });
        self.push(start, Item::RenoStart(i));
        if let Some(stop) = stop {
            self.push(stop, Item::RenoStop(i));
        }
        i
    }

    /// A Reno flow's state.
    pub fn reno(&self, i: usize) -> &Reno {
        &self.renos[i]
    }

    fn push(&mut self, at: Duration, item: Item) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, item)));
    }

    /// Sends everything node `node` has to send into its links.
    pub fn flush(&mut self, node: usize) {
        let now = self.now();
        while let Some(t) = self.nodes[node].poll_transmit(now) {
            let Some(&to) = self.by_addr.get(&t.dst) else {
                continue;
            };
            let from = self.addrs[node];
            let (a, b) = match self.links.get_mut(&(node, to)) {
                Some(l) => l.send(self.now, t.data.len()),
                None => (Some(self.now), None),
            };
            for at in [a, b].into_iter().flatten() {
                if let Some(l) = self.links.get_mut(&(node, to)) {
                    l.stats.delivered += 1;
                    l.stats.bytes += t.data.len() as u64;
                }
                self.push(
                    at,
                    Item::Datagram {
                        to,
                        from,
                        data: t.data.clone(),
                    },
                );
            }
        }
    }

    fn reno_send(&mut self, i: usize) {
        loop {
            let r = &self.renos[i];
            if !r.active || (r.in_flight + r.mss) as f64 > r.cwnd {
                return;
            }
            let (from, to, mss) = (r.from, r.to, r.mss);
            let seq = r.next_seq;
            let now = self.now;
            let (arrive, lost_signal) = match self.links.get_mut(&(from, to)) {
                Some(l) => {
                    let (a, _) = l.send(now, mss + RENO_HEADER);
                    let back = self
                        .links
                        .get(&(to, from))
                        .map_or(Duration::ZERO, |l| l.spec.delay);
                    let signal = self
                        .links
                        .get(&(from, to))
                        .map_or(now, |l| l.would_arrive(now))
                        + back;
                    (a, signal)
                }
                None => (Some(now), now),
            };
            let r = &mut self.renos[i];
            r.in_flight += mss;
            r.next_seq += 1;
            match arrive {
                Some(at) => self.push(at, Item::RenoData(i)),
                None => self.push(lost_signal, Item::RenoLoss(i, seq)),
            }
        }
    }

    fn next_timeout(&self) -> Option<(Duration, usize)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, ep)| {
                ep.poll_timeout()
                    .map(|t| (t.saturating_duration_since(self.base), i))
            })
            .min()
    }

    /// Runs until virtual time `until`, handing every event of every node
    /// to `app` (which may read, write, connect or close on the endpoint it
    /// is given; what that sends is flushed after it returns).
    pub fn run_until<F>(&mut self, until: Duration, mut app: F)
    where
        F: FnMut(usize, &mut Endpoint, Event, Instant),
    {
        loop {
            let next_item = self.queue.peek().map(|Reverse((t, _, _))| *t);
            let next_timer = self.next_timeout();
            let t = match (next_item, next_timer) {
                (None, None) => break,
                (Some(a), None) => a,
                (None, Some((b, _))) => b,
                (Some(a), Some((b, _))) => a.min(b),
            };
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            let now = self.now();
            let mut touched = None;
            if next_timer.is_some_and(|(b, _)| b <= t) {
                let (_, i) = next_timer.unwrap_or_default();
                self.nodes[i].handle_timeout(now);
                touched = Some(i);
            } else if let Some(Reverse((_, _, item))) = self.queue.pop() {
                match item {
                    Item::Datagram { to, from, data } => {
                        let _ = self.nodes[to].handle_datagram(from, &data, now);
                        touched = Some(to);
                    }
                    Item::RenoStart(i) => {
                        self.renos[i].active = true;
                        self.reno_send(i);
                    }
                    Item::RenoStop(i) => self.renos[i].active = false,
                    Item::RenoData(i) => {
                        let (from, to) = (self.renos[i].from, self.renos[i].to);
                        let at = match self.links.get_mut(&(to, from)) {
                            Some(l) => l.send(self.now, RENO_HEADER).0,
                            None => Some(self.now),
                        };
                        let r = &mut self.renos[i];
                        r.delivered += r.mss as u64;
                        match at {
                            Some(at) => self.push(at, Item::RenoAck(i)),
                            // A lost ACK: the next one covers it.
                            None => self.push(self.now, Item::RenoAck(i)),
                        }
                    }
                    Item::RenoAck(i) => {
                        let r = &mut self.renos[i];
                        r.in_flight = r.in_flight.saturating_sub(r.mss);
                        let mss = r.mss as f64;
                        if r.cwnd < r.ssthresh {
                            r.cwnd += mss;
                        } else {
                            r.cwnd += mss * mss / r.cwnd;
                        }
                        r.cwnd = r.cwnd.min(256e6);
                        self.reno_send(i);
                    }
                    Item::RenoLoss(i, seq) => {
                        let r = &mut self.renos[i];
                        r.in_flight = r.in_flight.saturating_sub(r.mss);
                        if seq >= r.recover {
                            r.cwnd = (r.cwnd / 2.0).max(2.0 * r.mss as f64);
                            r.ssthresh = r.cwnd;
                            r.recover = r.next_seq;
                            r.losses += 1;
                        }
                        self.reno_send(i);
                    }
                }
            }
            if let Some(i) = touched {
                while let Some(ev) = self.nodes[i].poll_event() {
                    app(i, &mut self.nodes[i], ev, now);
                }
                self.flush(i);
            }
        }
        self.now = self.now.max(until);
    }
}
