//! A small deterministic network for DHT nodes, in virtual time: datagrams
//! between nodes with seeded latencies (fixed per pair) and seeded loss,
//! no real sockets. Nodes are honest `Dht`s, hostile scripts, or offline.
//!
//! Addresses are in 198.18.0.0/15 (the benchmarking range, never routed
//! here, and not exempt from BEP 42) so ids can follow BEP 42.

// Helpers shared by several test binaries; each uses part of them.
#![allow(dead_code, unreachable_pub)]

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use weir_dht::krpc::{self, Body, Message, Query, Response};
use weir_dht::{Config, Dht, Event, Id, NodeInfo};

/// What a hostile node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// Answers every query with random bytes (sometimes shaped like a
    /// bencoded dictionary), or a valid answer under a wrong transaction id.
    Garbage,
    /// Answers with hundreds of nodes (or a datagram claiming 10,000),
    /// all at addresses where nobody listens.
    HugeNodes,
    /// Answers every `get_peers` with fake peers and claims, consistently,
    /// that it and its colluders are the nodes closest to every id (its
    /// answers carry the claimed id).
    Liar,
    /// Answers under its real id, every `get_peers` with 50 fake peers, and
    /// names its colluders under ids next to every target.
    FakePeers,
    /// Never answers.
    Silent,
}

pub enum Role {
    Honest(Box<Dht>),
    Hostile { kind: Hostile, id: Id },
    Offline,
}

pub struct SimNode {
    pub addr: SocketAddr,
    pub id: Id,
    pub role: Role,
    wake_at: Option<Duration>,
}

#[derive(Clone, Debug)]
enum Ev {
    Deliver {
        to: usize,
        from: SocketAddr,
        data: Vec<u8>,
    },
    Wake(usize),
    /// Node goes offline.
    Leave(usize),
    /// A new honest node joins with `joins[i]` as its config.
    Join(usize),
}

struct Entry {
    at: Duration,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Network settings.
#[derive(Clone, Debug)]
pub struct NetConfig {
    pub seed: u64,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// One-way latency range, fixed per pair of nodes.
    pub latency: (Duration, Duration),
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            loss: 0.01,
            latency: (Duration::from_millis(10), Duration::from_millis(120)),
        }
    }
}

#[derive(Clone)]
pub struct Net {
    pub base: Instant,
    pub now: Duration,
    cfg: NetConfig,
    queue: BinaryHeap<EntryBox>,
    seq: u64,
    pub nodes: Vec<SimNode>,
    by_addr: BTreeMap<SocketAddr, usize>,
    rng: fastrand::Rng,
    pub events: Vec<(usize, Duration, Event)>,
    pub delivered: u64,
    pub lost: u64,
    pub bytes: u64,
    /// Addresses of the liars (they refer to each other).
    liars: Vec<usize>,
    joins: Vec<Config>,
}

/// `BinaryHeap` wants `Clone` for a cloneable `Net`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct EntryBox(Entry);

impl Clone for EntryBox {
    fn clone(&self) -> Self {
        EntryBox(Entry {
            at: self.0.at,
            seq: self.0.seq,
            ev: self.0.ev.clone(),
        })
    }
}

impl Clone for SimNode {
    fn clone(&self) -> Self {
        SimNode {
            addr: self.addr,
            id: self.id,
            role: match &self.role {
                Role::Honest(d) => Role::Honest(d.clone()),
                Role::Hostile { kind, id } => Role::Hostile {
                    kind: *kind,
                    id: *id,
                },
                Role::Offline => Role::Offline,
            },
            wake_at: self.wake_at,
        }
    }
}

pub fn addr_of(i: usize) -> SocketAddr {
    let n = i as u32 + 1;
    let ip = Ipv4Addr::new(198, 18 + (n >> 16) as u8, (n >> 8) as u8, n as u8);
    SocketAddr::new(IpAddr::V4(ip), 6881)
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Net {
    pub fn new(cfg: NetConfig) -> Self {
        Self {
            base: Instant::now(), // test-epoch: the only clock read
            now: Duration::ZERO,
            rng: fastrand::Rng::with_seed(cfg.seed),
            cfg,
            queue: BinaryHeap::new(),
            seq: 0,
            nodes: Vec::new(),
            by_addr: BTreeMap::new(),
            events: Vec::new(),
            delivered: 0,
            lost: 0,
            bytes: 0,
            liars: Vec::new(),
            joins: Vec::new(),
        }
    }

    /// Node `i` will leave at virtual time `at`.
    pub fn schedule_leave(&mut self, at: Duration, i: usize) {
        self.push(at, Ev::Leave(i));
    }

    /// A new honest node with `cfg` will join at virtual time `at`.
    pub fn schedule_join(&mut self, at: Duration, cfg: Config) {
        self.joins.push(cfg);
        let i = self.joins.len() - 1;
        self.push(at, Ev::Join(i));
    }

    pub fn instant(&self) -> Instant {
        self.base + self.now
    }

    fn push(&mut self, at: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.push(EntryBox(Entry {
            at,
            seq: self.seq,
            ev,
        }));
    }

    fn latency(&self, a: usize, b: usize) -> Duration {
        let (lo, hi) = self.cfg.latency;
        let key = mix(((a.min(b) as u64) << 32) ^ b.max(a) as u64 ^ self.cfg.seed);
        let span = (hi - lo).as_micros() as u64 + 1;
        lo + Duration::from_micros(key % span)
    }

    /// Adds an honest node (not started: call `start`).
    pub fn add_honest(&mut self, cfg: Config) -> usize {
        let i = self.nodes.len();
        let addr = addr_of(i);
        let id = Id::bep42_for(addr.ip(), &mut self.rng);
        let seed = self.rng.u64(..);
        let dht = Dht::new(cfg, id, seed, self.instant());
        self.by_addr.insert(addr, i);
        self.nodes.push(SimNode {
            addr,
            id,
            role: Role::Honest(Box::new(dht)),
            wake_at: None,
        });
        self.flush(i);
        i
    }

    /// Adds a hostile node that makes itself known by pinging `contacts`.
    pub fn add_hostile(&mut self, kind: Hostile, contacts: &[usize]) -> usize {
        let i = self.nodes.len();
        let addr = addr_of(i);
        let id = Id::bep42_for(addr.ip(), &mut self.rng);
        self.by_addr.insert(addr, i);
        self.nodes.push(SimNode {
            addr,
            id,
            role: Role::Hostile { kind, id },
            wake_at: None,
        });
        if matches!(kind, Hostile::Liar | Hostile::FakePeers) {
            self.liars.push(i);
        }
        for &c in contacts {
            let ping = Message {
                transaction: vec![0xee, (c % 256) as u8],
                version: None,
                read_only: false,
                ip: None,
                body: Body::Query(Query::Ping { id }),
            };
            self.send(i, self.nodes[c].addr, ping.to_vec());
        }
        i
    }

    /// The honest node `i`.
    pub fn dht(&mut self, i: usize) -> &mut Dht {
        match &mut self.nodes[i].role {
            Role::Honest(d) => d,
            _ => panic!("node {i} is not an honest node"),
        }
    }

    pub fn is_honest(&self, i: usize) -> bool {
        matches!(self.nodes[i].role, Role::Honest(_))
    }

    /// Takes node `i` off the network (its datagrams vanish).
    pub fn leave(&mut self, i: usize) {
        self.nodes[i].role = Role::Offline;
    }

    /// Drains node `i`'s output: datagrams into the network, events into
    /// `events`, and its next wake-up.
    pub fn flush(&mut self, i: usize) {
        let now = self.now;
        let mut out = Vec::new();
        let mut evs = Vec::new();
        let next = match &mut self.nodes[i].role {
            Role::Honest(d) => {
                while let Some(t) = d.poll_transmit() {
                    out.push(t);
                }
                while let Some(e) = d.poll_event() {
                    evs.push(e);
                }
                d.poll_timeout()
            }
            _ => None,
        };
        for (to, data) in out {
            self.send(i, to, data);
        }
        for e in evs {
            self.events.push((i, now, e));
        }
        if let Some(t) = next {
            let at = t.saturating_duration_since(self.base).max(now);
            if self.nodes[i].wake_at.is_none_or(|w| at < w || w < now) {
                self.nodes[i].wake_at = Some(at);
                self.push(at, Ev::Wake(i));
            }
        }
    }

    fn send(&mut self, from: usize, to: SocketAddr, data: Vec<u8>) {
        let Some(&j) = self.by_addr.get(&to) else {
            self.lost += 1;
            return;
        };
        if self.rng.f64() < self.cfg.loss {
            self.lost += 1;
            return;
        }
        self.bytes += data.len() as u64;
        let at = self.now + self.latency(from, j);
        let from = self.nodes[from].addr;
        self.push(at, Ev::Deliver { to: j, from, data });
    }

    /// Runs until virtual time `until`, or until `stop` says so (checked
    /// after each step).
    pub fn run_until(&mut self, until: Duration, mut stop: impl FnMut(&Net) -> bool) -> bool {
        while let Some(top) = self.queue.peek() {
            if top.0.at > until {
                break;
            }
            let Some(EntryBox(e)) = self.queue.pop() else {
                break;
            };
            self.now = e.at;
            self.step(e.ev);
            if stop(self) {
                return true;
            }
        }
        self.now = self.now.max(until);
        false
    }

    /// Runs for `d` more virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until, |_| false);
    }

    fn step(&mut self, ev: Ev) {
        let now = self.instant();
        match ev {
            Ev::Wake(i) => {
                if self.nodes[i].wake_at != Some(self.now) {
                    return;
                }
                self.nodes[i].wake_at = None;
                if let Role::Honest(d) = &mut self.nodes[i].role {
                    d.handle_timeout(now);
                    self.flush(i);
                }
            }
            Ev::Leave(i) => self.leave(i),
            Ev::Join(j) => {
                let cfg = self.joins[j].clone();
                self.add_honest(cfg);
            }
            Ev::Deliver { to, from, data } => {
                self.delivered += 1;
                match &mut self.nodes[to].role {
                    Role::Honest(d) => {
                        d.handle_datagram(from, &data, now);
                        self.flush(to);
                    }
                    Role::Hostile { kind, id } => {
                        let (kind, id) = (*kind, *id);
                        if let Some(reply) = self.hostile_reply(to, kind, id, &data) {
                            self.send(to, from, reply);
                        }
                    }
                    Role::Offline => {}
                }
            }
        }
    }

    fn hostile_reply(
        &mut self,
        me: usize,
        kind: Hostile,
        my_id: Id,
        data: &[u8],
    ) -> Option<Vec<u8>> {
        let msg = krpc::decode(data).ok()?;
        let Body::Query(q) = &msg.body else {
            return None;
        };
        let answer = |r: Response| {
            Message {
                transaction: msg.transaction.clone(),
                version: Some(b"EV1L".to_vec()),
                read_only: false,
                ip: None,
                body: Body::Response(r),
            }
            .to_vec()
        };
        match kind {
            Hostile::Silent => None,
            Hostile::Garbage => {
                let n = self.rng.usize(1..300);
                let mut junk: Vec<u8> = (0..n).map(|_| self.rng.u8(..)).collect();
                match self.rng.u8(0..3) {
                    0 => {
                        junk[0] = b'd';
                        *junk.last_mut()? = b'e';
                        Some(junk)
                    }
                    1 => Some(
                        Message {
                            transaction: vec![self.rng.u8(..), self.rng.u8(..)],
                            version: None,
                            read_only: false,
                            ip: None,
                            body: Body::Response(Response {
                                id: Id::random(&mut self.rng),
                                ..Response::default()
                            }),
                        }
                        .to_vec(),
                    ),
                    _ => Some(junk),
                }
            }
            Hostile::HugeNodes => {
                let all = huge_nodes();
                if self.rng.bool() {
                    // 500 nodes (fits the datagram bound, truncated to 32).
                    let off = self.rng.usize(..all.len() - 500);
                    Some(answer(Response {
                        id: my_id,
                        nodes: all[off..off + 500].to_vec(),
                        token: Some(b"tok".to_vec()),
                        ..Response::default()
                    }))
                } else {
                    // 10,000 nodes: 260 KB, refused by size. Encoded once,
                    // the transaction id patched in.
                    Some(huge_answer(&msg.transaction))
                }
            }
            Hostile::Liar | Hostile::FakePeers => {
                let target = match q {
                    Query::FindNode { target, .. } => *target,
                    Query::GetPeers { info_hash, .. } => *info_hash,
                    Query::Ping { .. } => {
                        return Some(answer(Response {
                            id: my_id,
                            ..Response::default()
                        }));
                    }
                    Query::AnnouncePeer { .. } => {
                        return Some(answer(Response {
                            id: my_id,
                            ..Response::default()
                        }));
                    }
                    Query::Other { .. } => return None,
                };
                // Consistent lies: liar j always claims id target ^ (j + 1)
                // in its last bytes, for itself and when naming others.
                let claim = |j: usize| {
                    let mut id = target;
                    let x = (j as u64 + 1).to_be_bytes();
                    for (b, v) in id.0[12..].iter_mut().zip(x) {
                        *b ^= v;
                    }
                    id
                };
                let nodes = self
                    .liars
                    .iter()
                    .filter(|&&j| j != me)
                    .take(8)
                    .map(|&j| NodeInfo {
                        id: claim(j),
                        addr: self.nodes[j].addr,
                    })
                    .collect();
                let values = if matches!(q, Query::GetPeers { .. }) {
                    (0..50)
                        .map(|_| {
                            SocketAddr::new(
                                IpAddr::V4(Ipv4Addr::new(203, 0, 113, self.rng.u8(1..))),
                                self.rng.u16(1..),
                            )
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                Some(answer(Response {
                    id: if kind == Hostile::Liar {
                        claim(me)
                    } else {
                        my_id
                    },
                    nodes,
                    values,
                    token: Some(b"liar".to_vec()),
                    ..Response::default()
                }))
            }
        }
    }

    /// Events of node `i` since the last call.
    pub fn take_events(&mut self, i: usize) -> Vec<Event> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.events)
            .into_iter()
            .partition(|(n, _, _)| *n == i);
        self.events = rest;
        mine.into_iter().map(|(_, _, e)| e).collect()
    }

    /// Honest online nodes.
    pub fn honest(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.is_honest(i))
            .collect()
    }
}

/// 10,000 made-up nodes at addresses where nobody listens.
fn huge_nodes() -> &'static [NodeInfo] {
    static NODES: std::sync::OnceLock<Vec<NodeInfo>> = std::sync::OnceLock::new();
    NODES.get_or_init(|| {
        let mut rng = fastrand::Rng::with_seed(77);
        (0..10_000)
            .map(|_| NodeInfo {
                id: Id::random(&mut rng),
                addr: SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::new(203, 0, 113, rng.u8(..))),
                    rng.u16(1..),
                ),
            })
            .collect()
    })
}

/// An answer listing all of [`huge_nodes`] under transaction id `t`.
fn huge_answer(t: &[u8]) -> Vec<u8> {
    static MSG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let msg = |t: &[u8]| {
        Message {
            transaction: t.to_vec(),
            version: None,
            read_only: false,
            ip: None,
            body: Body::Response(Response {
                id: Id([0xee; 20]),
                nodes: huge_nodes().to_vec(),
                ..Response::default()
            }),
        }
        .to_vec()
    };
    if t.len() != 2 {
        return msg(t);
    }
    let mut out = MSG.get_or_init(|| msg(b"\x00\x00")).clone();
    // The message ends "1:t2:XX1:y1:re": XX is 9 bytes before the end.
    let at = out.len() - 9;
    assert_eq!(&out[at - 5..], b"1:t2:\x00\x001:y1:re");
    out[at..at + 2].copy_from_slice(t);
    out
}

/// Builds `n` honest nodes joining one after another every `join_every`,
/// each bootstrapping from node 0, with `hostile` nodes mixed in (each
/// pinging 20 random honest nodes when it arrives), then lets the network
/// settle for `settle`.
pub fn build(
    n: usize,
    hostile: &[(Hostile, usize)],
    net_cfg: NetConfig,
    dht_cfg: &Config,
    join_every: Duration,
    settle: Duration,
) -> Net {
    let mut net = Net::new(net_cfg);
    let mut order: Vec<Option<Hostile>> = vec![None; n];
    for &(kind, count) in hostile {
        order.extend(std::iter::repeat_n(Some(kind), count));
    }
    // Node 0 stays honest (it is the bootstrap node).
    let mut rng = fastrand::Rng::with_seed(net.cfg.seed ^ 0x5eed);
    rng.shuffle(&mut order[1..]);
    let boot = addr_of(0);
    for slot in order {
        match slot {
            None => {
                let mut cfg = dht_cfg.clone();
                if !net.nodes.is_empty() {
                    cfg.bootstrap = vec![boot];
                }
                net.add_honest(cfg);
            }
            Some(kind) => {
                let honest = net.honest();
                let contacts: Vec<usize> = (0..20.min(honest.len()))
                    .map(|_| honest[rng.usize(..honest.len())])
                    .collect();
                net.add_hostile(kind, &contacts);
            }
        }
        net.run_for(join_every);
    }
    net.run_for(settle);
    net
}

/// The `k` honest online nodes closest to `target` (the right answer).
pub fn true_closest(net: &Net, target: &Id, k: usize) -> Vec<Id> {
    let mut ids: Vec<Id> = net.honest().into_iter().map(|i| net.nodes[i].id).collect();
    ids.sort_by_key(|id| id.distance(target));
    ids.truncate(k);
    ids
}

pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i]
}
