//! The world: a virtual clock, one queue of timed wake-ups, the links, the
//! token buckets and the nodes.
//!
//! Time only moves when [`World::step`] pops the earliest wake-up; all the
//! work that wake-up causes (reads, decodes, the core's reactions, writes,
//! storage answers) happens at that instant, in a fixed order, before time
//! moves again. Processing costs no virtual time.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use weir_core::bucket::TokenBucket;
use weir_core::storage::StorageEvent;
use weir_session::TransferId;

use crate::conn::Side;
use crate::link::{Link, LinkConfig};
use crate::net::{DialKey, Dialing, NetConfig, Unreachable};
use crate::node::Node;
use crate::sched::Queue;

/// A node (one host running a session) in the world.
pub type NodeId = usize;
/// A token bucket in the world.
pub type BucketId = usize;
/// One direction of a connection.
pub type LinkId = usize;
/// One end of a connection.
pub(crate) type SideId = usize;

/// How often buckets are refilled: the runtime's
/// `weir_runtime::bandwidth::TICK`.
pub const BUCKET_TICK: Duration = Duration::from_millis(10);

/// The environment variable that overrides a scenario's seed.
pub const SEED_ENV: &str = "WEIR_SIM_SEED";

/// Something scheduled.
pub(crate) enum WakeUp {
    Link(LinkId),
    Tick,
    Timer(NodeId),
    Storage(NodeId, TransferId, StorageEvent),
    /// A dial's SYN reaches its target.
    Syn(DialKey),
    /// The target's SYN-ACK reaches the dialer: connected.
    SynAck(DialKey),
    /// A dial fails (refused, or its timeout).
    DialFail(DialKey, DialFailure),
    /// A reset reaches this end of a connection.
    Reset(SideId),
    Call(Box<dyn FnOnce(&mut World)>),
}

/// Why a dial failed, as the runtime would report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DialFailure {
    Refused,
    Timeout,
}

/// Work to do at the current instant.
#[derive(Debug)]
pub(crate) enum Work {
    Reader(SideId),
    Writer(SideId),
    Storage(NodeId, TransferId, StorageEvent),
}

/// In which order tasks waiting for tokens run after a refill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WakeOrder {
    /// A seeded random order each tick. The runtime wakes waiters with
    /// `Notify::notify_waiters` and the order in which a multi-threaded
    /// tokio scheduler then runs them is unspecified (LIFO slot, work
    /// stealing), so no fixed order would be more faithful; a fixed one
    /// would hand the first reservation of every tick to the same task.
    #[default]
    Shuffled,
    /// The order in which they started waiting.
    Fifo,
}

/// A task waiting for the next bucket refill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    Reader(SideId),
    Writer(SideId),
}

pub(crate) struct LinkSlot {
    pub(crate) link: Link,
    /// The earliest wake-up queued for this link.
    armed: Option<Duration>,
    touched: bool,
    /// The side that writes into it and the side that reads from it.
    pub(crate) writer: SideId,
    pub(crate) reader: SideId,
}

/// The simulated world. See the crate docs.
pub struct World {
    epoch: Instant,
    now: Duration,
    seed: u64,
    pub(crate) rng: fastrand::Rng,
    queue: Queue<WakeUp>,
    pub(crate) links: Vec<LinkSlot>,
    touched: Vec<LinkId>,
    pub(crate) buckets: Vec<TokenBucket>,
    ticking: bool,
    pub(crate) waiters: Vec<Waiter>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) hosts: BTreeMap<IpAddr, NodeId>,
    pub(crate) sides: Vec<Side>,
    pub(crate) dialing: BTreeMap<DialKey, Dialing>,
    /// How the network behaves where nothing is configured.
    pub net: NetConfig,
    pub(crate) pair_links: BTreeMap<(NodeId, NodeId), LinkConfig>,
    pub(crate) unreachable: BTreeMap<IpAddr, Unreachable>,
    pub(crate) work: VecDeque<Work>,
    /// Record every request and block per connection (for tests that ask
    /// which peer was asked for what).
    pub trace_blocks: bool,
    /// The order in which token waiters run after a refill.
    pub wake_order: WakeOrder,
    steps: u64,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("seed", &self.seed)
            .field("now", &self.now)
            .field("nodes", &self.nodes.len())
            .field("links", &self.links.len())
            .finish()
    }
}

impl World {
    /// An empty world at virtual time 0, seeded with `seed` unless the
    /// environment variable [`SEED_ENV`] gives another. The seed is printed
    /// (shown by the test harness when a test fails) and printed again if
    /// the world is dropped during a panic.
    pub fn new(seed: u64) -> Self {
        let seed = std::env::var(SEED_ENV)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(seed);
        eprintln!("weir-sim: seed {seed} ({SEED_ENV}={seed} reproduces this run)");
        Self {
            // The one clock read of the simulator: the origin of virtual time.
            epoch: Instant::now(),
            now: Duration::ZERO,
            seed,
            rng: fastrand::Rng::with_seed(seed),
            queue: Queue::default(),
            links: Vec::new(),
            touched: Vec::new(),
            buckets: Vec::new(),
            ticking: false,
            waiters: Vec::new(),
            nodes: Vec::new(),
            hosts: BTreeMap::new(),
            sides: Vec::new(),
            dialing: BTreeMap::new(),
            net: NetConfig::default(),
            pair_links: BTreeMap::new(),
            unreachable: BTreeMap::new(),
            work: VecDeque::new(),
            trace_blocks: false,
            wake_order: WakeOrder::default(),
            steps: 0,
        }
    }

    /// The seed this world runs with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Virtual time since the start.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Virtual time as the `Instant` the cores see.
    pub fn instant(&self) -> Instant {
        self.epoch + self.now
    }

    /// Virtual time of an `Instant` the cores returned.
    pub(crate) fn since_epoch(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.epoch)
    }

    /// Wake-ups processed so far (a cost measure of a scenario).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// A token bucket capping at `rate` bytes/s (0: unlimited), refilled
    /// every [`BUCKET_TICK`] of virtual time with carry capped at two ticks,
    /// exactly as the runtime's ticker does.
    pub fn bucket(&mut self, rate: u64) -> BucketId {
        self.buckets.push(TokenBucket::new(rate));
        if rate > 0 && !self.ticking {
            self.ticking = true;
            let next = (self.now.as_nanos() / BUCKET_TICK.as_nanos() + 1) as u32;
            self.queue.push(BUCKET_TICK * next, WakeUp::Tick);
        }
        self.buckets.len() - 1
    }

    /// A bucket, to read its state.
    pub fn bucket_ref(&self, id: BucketId) -> &TokenBucket {
        &self.buckets[id]
    }

    /// Runs `f` at virtual time `at` (or now, if that has passed).
    pub fn at(&mut self, at: Duration, f: impl FnOnce(&mut World) + 'static) {
        self.queue.push(at.max(self.now), WakeUp::Call(Box::new(f)));
    }

    /// Links made so far (two per connection, in creation order).
    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// A link, to read its counters.
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id].link
    }

    /// Flips the byte at `offset` of link `id`'s stream when it is sent.
    pub fn corrupt_at(&mut self, id: LinkId, offset: u64) {
        self.links[id].link.corrupt_at(offset);
    }

    pub(crate) fn add_link(&mut self, cfg: LinkConfig) -> LinkId {
        let seed = self.rng.u64(..);
        self.links.push(LinkSlot {
            link: Link::new(cfg, seed),
            armed: None,
            touched: false,
            writer: usize::MAX,
            reader: usize::MAX,
        });
        self.links.len() - 1
    }

    /// Marks a link as changed, so its next wake-up is queued.
    pub(crate) fn touch(&mut self, id: LinkId) {
        let slot = &mut self.links[id];
        if !slot.touched {
            slot.touched = true;
            self.touched.push(id);
        }
    }

    /// Processes the earliest wake-up and everything it causes. Returns
    /// `false` when nothing is scheduled (the world is idle for ever).
    pub fn step(&mut self) -> bool {
        let Some((at, w)) = self.queue.pop() else {
            return false;
        };
        self.steps += 1;
        self.now = self.now.max(at);
        match w {
            WakeUp::Link(id) => self.wake_link(id, at),
            WakeUp::Tick => self.tick(),
            WakeUp::Timer(n) => self.wake_timer(n, at),
            WakeUp::Storage(n, t, ev) => self.work.push_back(Work::Storage(n, t, ev)),
            WakeUp::Syn(k) => self.on_syn(k),
            WakeUp::SynAck(k) => self.on_syn_ack(k),
            WakeUp::DialFail(k, why) => self.on_dial_fail(k, why),
            WakeUp::Reset(s) => self.on_reset(s),
            WakeUp::Call(f) => f(self),
        }
        self.settle();
        true
    }

    /// Runs until `pred` holds (checked after every step) or virtual time
    /// passes `deadline`; returns whether `pred` held.
    pub fn run_until(&mut self, deadline: Duration, mut pred: impl FnMut(&World) -> bool) -> bool {
        loop {
            if pred(self) {
                return true;
            }
            match self.queue.peek_time() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(deadline);
                    return pred(self);
                }
            }
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let deadline = self.now + d;
        self.run_until(deadline, |_| false);
    }

    /// Runs to virtual time `t`.
    pub fn run_to(&mut self, t: Duration) {
        self.run_until(t, |_| false);
    }

    /// Does all the work queued for this instant, then queues the next
    /// wake-up of every link that changed.
    pub(crate) fn settle(&mut self) {
        while let Some(w) = self.work.pop_front() {
            match w {
                Work::Reader(s) => {
                    self.sides[s].reader.queued = false;
                    self.run_reader(s);
                }
                Work::Writer(s) => {
                    self.sides[s].writer.queued = false;
                    self.run_writer(s);
                }
                Work::Storage(n, t, ev) => self.storage_done(n, t, ev),
            }
        }
        for id in std::mem::take(&mut self.touched) {
            let slot = &mut self.links[id];
            slot.touched = false;
            if let Some(t) = slot.link.poll_timeout() {
                let t = t.max(self.now);
                if slot.armed.is_none_or(|a| t < a) {
                    slot.armed = Some(t);
                    self.queue.push(t, WakeUp::Link(id));
                }
            }
        }
    }

    fn wake_link(&mut self, id: LinkId, at: Duration) {
        let now = self.now;
        let slot = &mut self.links[id];
        if slot.armed == Some(at) {
            slot.armed = None;
        }
        let w = slot.link.handle_timeout(now);
        let (reader, writer) = (slot.reader, slot.writer);
        self.touch(id);
        if w.readable {
            self.wake_reader_for_data(reader);
        }
        if w.writable {
            self.wake_writer_for_room(writer);
        }
    }

    fn tick(&mut self) {
        for b in &self.buckets {
            b.refill(BUCKET_TICK);
        }
        let mut waiters = std::mem::take(&mut self.waiters);
        if self.wake_order == WakeOrder::Shuffled {
            self.rng.shuffle(&mut waiters);
        }
        for w in waiters {
            match w {
                Waiter::Reader(s) => self.wake_reader_for_tokens(s),
                Waiter::Writer(s) => self.wake_writer_for_tokens(s),
            }
        }
        self.queue.push(self.now + BUCKET_TICK, WakeUp::Tick);
    }

    fn wake_timer(&mut self, n: NodeId, at: Duration) {
        let node = &mut self.nodes[n];
        if node.timer == Some(at) {
            node.timer = None;
        }
        if node.frozen || node.is_down {
            return;
        }
        let now = self.instant();
        self.nodes[n].session.handle_timeout(now);
        self.drain(n);
    }

    /// Queues a wake-up for node `n`'s session timer if it moved earlier.
    pub(crate) fn arm_timer(&mut self, n: NodeId) {
        let Some(t) = self.nodes[n].session.poll_timeout() else {
            return;
        };
        let t = self.since_epoch(t).max(self.now);
        let node = &mut self.nodes[n];
        if node.timer.is_none_or(|a| t < a) {
            node.timer = Some(t);
            self.queue.push(t, WakeUp::Timer(n));
        }
    }

    /// Queues a storage answer for later.
    pub(crate) fn schedule_storage(
        &mut self,
        at: Duration,
        n: NodeId,
        t: TransferId,
        ev: StorageEvent,
    ) {
        self.queue.push(at, WakeUp::Storage(n, t, ev));
    }

    /// Queues a wake-up at `at` (not before now).
    pub(crate) fn schedule(&mut self, at: Duration, w: WakeUp) {
        self.queue.push(at.max(self.now), w);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "weir-sim: failed with seed {} at virtual time {:?} ({SEED_ENV}={} reproduces it)",
                self.seed, self.now, self.seed
            );
        }
    }
}
