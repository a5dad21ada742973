//! Deterministic network simulator that drives weir's sans-IO cores in
//! virtual time.
//!
//! The same `weir_bt::torrent::Torrent`, `weir_core` pipelines, meters and
//! token buckets that run over real sockets under `weir-runtime` run here
//! over simulated links, so ramp-up, caps and fairness are tested in
//! milliseconds of real time, exactly, and reproducibly for a seed.
//!
//! # The model
//!
//! **Time.** A [`World`] has a virtual clock: an `Instant` taken once at
//! creation (the only clock read in this crate) plus a `Duration`. Every
//! future happening (a segment arriving, a bucket refill, a torrent timer, a
//! disk completion, a scripted call) is a wake-up in one min-heap ordered
//! by time and then by insertion, so ties resolve the same way every run.
//! Processing is instantaneous: everything a wake-up causes happens at its
//! instant. Randomness (link losses, torrent seeds) comes from one
//! `fastrand` generator seeded per scenario; the environment variable
//! `WEIR_SIM_SEED` overrides the seed, and the seed is printed when a test
//! fails.
//!
//! **Links** ([`link`]). Each connection is two [`Link`]s, one per
//! direction, each a reliable TCP-like byte stream: a bounded send buffer
//! (a write that does not fit is taken in part; the writer waits for room),
//! a bottleneck that sends 64 KiB segments back to back at its rate, a
//! one-way latency, and a bounded receive buffer that is also the
//! flow-control window (a receiver that stops reading stalls the sender
//! one latency later). A lost segment arrives a retransmission delay late
//! and holds back everything behind it (head-of-line blocking). A byte can
//! be corrupted at a chosen stream offset.
//!
//! **Nodes** ([`bt`]). A BitTorrent node is one `Torrent`, its in-memory
//! storage (real bytes verified with SHA-1, or a synthetic payload checked
//! by comparison; optionally a disk model with per-operation delay), and
//! its download and upload chains of `weir_core::bucket::TokenBucket`s,
//! refilled every 10 ms of virtual time exactly as the runtime's ticker
//! refills them. Handshakes are assumed done: [`World::connect`] calls
//! `add_peer` on both sides. Reading and writing follow the runtime's
//! `conn.rs` step for step (see [`bt`]): the reader reserves from the
//! download chain before each read of up to 512 KiB and refunds what it did
//! not use, the writer sends control runs without waiting for the upload
//! chain and pays for block runs before they start, and every write is
//! reported with `Torrent::on_sent`. Each node records the block payload it
//! receives as a cumulative series over virtual time ([`Series`]).
//!
//! **Token waiters.** When a refill wakes several readers and writers that
//! found their buckets empty, the runtime's `Notify::notify_waiters` wakes
//! them all and tokio runs them in an unspecified order (LIFO slot, work
//! stealing). The simulator runs them in a seeded random order
//! ([`WakeOrder::Shuffled`]); [`WakeOrder::Fifo`] is there for experiments.
//! A fixed order matters: every reader reserves its whole free buffer
//! (at least 64 KiB), more than a 20 MB/s cap grants per tick, so the first
//! task after a refill takes the tick's budget.
//!
//! # What is not modelled
//!
//! - TCP congestion control: no slow start, no congestion window, no
//!   reaction to loss beyond the retransmission delay. The real benches run
//!   through a userspace link emulator that terminates TCP at each end, so
//!   what the peers see is its rate, delay and buffers, which this models.
//! - Send-buffer accounting of bytes in flight: the send buffer holds only
//!   bytes not yet transmitted (as when a loopback socket feeds an
//!   emulator); the receive window bounds what is in flight.
//! - CPU time: decoding, hashing and the cores' decisions cost nothing, and
//!   tasks never wait for a thread.
//! - Handshakes, trackers, reconnection after a close (a banned or closed
//!   peer stays gone).
//! - Per-packet headers and MTU; Nagle and delayed acks.
//!
//! # Scenarios
//!
//! `tests/*.rs`, one scenario per file, each asserting numbers and printing
//! them (`cargo test -p weir-sim -- --nocapture`): `ramp` (150 ms RTT,
//! 50 MB/s), `cap` (20 MB/s global download cap), `redistribution` (a slow
//! and a fast source under one cap, one and two torrents), `unlimited`
//! (unlimited buckets cost nothing), `pipeline_depth` (depth versus the
//! bandwidth-delay product, a slow peer, a hung peer), `swarm` (lossy
//! mixed swarm, identical data, determinism), `bad_peer` (a corrupting
//! seeder is banned), `disk` (a slow disk paces a transfer).
//!
//! # Using it
//!
//! ```no_run
//! use std::time::Duration;
//! use weir_sim::{LinkConfig, NodeConfig, Payload, TorrentSpec, World};
//!
//! let spec = TorrentSpec::new("demo", Payload::synthetic(64 << 20, 1 << 20, 1));
//! let mut w = World::new(1);
//! let seed = w.add_bt(NodeConfig::seeder(&spec));
//! let leech = w.add_bt(NodeConfig::leecher(&spec));
//! w.connect_sym(seed, leech, LinkConfig::new(Duration::from_millis(10), 50_000_000));
//! assert!(w.run_until(Duration::from_secs(10), |w| w.node(leech).completed_at().is_some()));
//! ```

pub mod conn;
pub mod content;
pub mod link;
pub mod measure;
pub mod net;
pub mod node;
mod sched;
pub mod server;
pub mod storage;
pub mod world;

pub use conn::{ConnStats, MAX_IOV, MIN_FREE, READ_BUF};
pub use content::{ED2K_PART, Ed2kSpec, Payload, TorrentSpec};
pub use link::{Link, LinkConfig};
pub use measure::{Series, mib};
pub use net::{Conn, NetConfig, Unreachable};
pub use node::{Arrival, BT_PORT, DialRecord, ED2K_PORT, Node, NodeConfig, TransferConfig};
pub use server::ED2K_SERVER_PORT;
pub use storage::Disk;
pub use weir_session::{Proto, Refused, Source, TransferId};
pub use world::{BUCKET_TICK, BucketId, LinkId, NodeId, SEED_ENV, WakeOrder, World};
