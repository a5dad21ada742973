//! Deterministic network simulator that drives weir's sans-IO session and
//! protocol cores in virtual time.
//!
//! The same `weir_session::Session` (transfers, dial decisions, limits,
//! backoff, bans), `weir_bt::torrent::Torrent`, `weir_ed2k::transfer::Client`,
//! `weir_core` pipelines, meters and token buckets that run over real
//! sockets under `weir-runtime` run here over simulated hosts and links, so
//! ramp-up, caps, fairness, dialling and bans are tested in milliseconds of
//! real time, exactly, and reproducibly for a seed.
//!
//! # The model
//!
//! **Time.** A [`World`] has a virtual clock: an `Instant` taken once at
//! creation (the only clock read in this crate) plus a `Duration`. Every
//! future happening (a segment arriving, a bucket refill, a session timer,
//! a disk completion, a SYN, a refusal, a reset, a scripted call) is a
//! wake-up in one min-heap ordered by time and then by insertion, so ties
//! resolve the same way every run. Processing is instantaneous: everything
//! a wake-up causes happens at its instant. Randomness (link losses,
//! session seeds) comes from one `fastrand` generator seeded per scenario;
//! the environment variable `WEIR_SIM_SEED` overrides the seed, and the
//! seed is printed when a test fails.
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
//! **Nodes** ([`node`]). A node is one host: an IPv4 address, optional
//! BitTorrent and eD2k listen ports, a `Session` holding its transfers
//! (torrents seeded or downloaded, eD2k files shared or downloaded; a
//! BitTorrent node of the older scenarios is a session with one torrent),
//! each transfer's in-memory storage ([`storage`]: real bytes verified
//! with SHA-1 pieces or MD4 parts, or a synthetic payload checked by
//! comparison; one disk model per node), and bucket chains of
//! `weir_core::bucket::TokenBucket`s (the node's global chains, plus
//! optional per-transfer chains reserved first), refilled every 10 ms of
//! virtual time exactly as the runtime's ticker refills them. The node
//! drives its session as the runtime does: after every input it drains
//! `Session::poll_event` (opening storage, executing storage operations,
//! dialling, queueing sends, closing), and calls `handle_timeout` at
//! `poll_timeout`. What the payloads are ([`content`]): [`TorrentSpec`]
//! and [`Ed2kSpec`] over a [`Payload`] addressed by byte offset, so one
//! payload can be served in any grid.
//!
//! **The network** ([`net`]). A dial the session asks for goes to the node
//! at the dial's IP: its SYN takes one latency; a node that is down or
//! does not listen there refuses (a reset one latency later); otherwise the
//! listener's session is asked (`incoming`) and the dialler is connected
//! one more latency later. eD2k connections are peers at once (the eD2k
//! core writes its hello); BitTorrent handshakes (68 bytes, with the
//! dialler's preamble) cross the links and are routed with `bt_route`, so
//! they cost a round trip. Addresses where no node is refuse after a
//! delay or stay silent until the connect timeout ([`Unreachable`],
//! [`NetConfig`]); a node can be taken down (its connections reset, dials
//! to it refused, its session's timers stopped) and brought up again.
//! [`World::connect`] is the shortcut of the older scenarios: both sessions
//! take a BitTorrent connection as accepted and established at once.
//! An eD2k index server node ([`server`]) runs `weir_ed2k::server`'s
//! sans-IO `IndexServer` behind a listener.
//!
//! **Connections** ([`conn`]). Reading and writing follow the runtime's
//! `peerconn` tasks step for step: the reader decodes with the protocol's
//! codec (`weir_bt::wire`, `weir_ed2k::packet`), reserves from the download
//! chain before each read of up to 512 KiB and refunds what it did not
//! use; the writer sends control runs without waiting for the upload chain
//! and pays for block runs before they start, and every write is reported
//! with `Session::sent`. Each node records the payload it receives (block
//! data, eD2k part data) as cumulative series over virtual time
//! ([`Series`]): in all, per protocol and per transfer.
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
//! - CPU time: decoding, hashing and the sessions' decisions cost nothing,
//!   and tasks never wait for a thread.
//! - The TCP handshake's third packet (the listener accepts when the SYN
//!   arrives), RST on writes to a closed socket (a refused or reset
//!   connection is seen as its end of stream, or as the reset wake-up),
//!   port exhaustion, and addresses other than IPv4.
//! - Trackers, the DHT, PEX, uTP and encryption: scenarios hand peers to a
//!   session with [`World::add_peers`] as a tracker answer would.
//! - eD2k low ids and callbacks through the server (every node listens, so
//!   the index gives every client a high id), UDP, server lists.
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
//! seeder is banned), `disk` (a slow disk paces a transfer); and through
//! the session's own dials: `flood` (peer and half-open limits under
//! thousands of known peers), `backoff` (redials at growing intervals,
//! reconnection after outages), `bans` (a ban holds across transfers,
//! protocols and reconnects), `shared_cap` (a BitTorrent and an eD2k
//! transfer under one 20 MB/s cap; two torrents of one session),
//! `mixed_swarm` (BitTorrent and eD2k in every session, sources from an
//! eD2k server, loss, identical data, determinism), `two_networks` (one
//! file from a BitTorrent and an eD2k seeder at once through an ed2k link
//! that joins the torrent; a corrupt eD2k seeder caught and banned).
//!
//! # Using it
//!
//! ```
//! use std::time::Duration;
//! use weir_sim::{Ed2kSpec, ED2K_PART, NodeConfig, Payload, TorrentSpec, TransferConfig, World};
//!
//! let torrent = TorrentSpec::new("demo", Payload::synthetic(64 << 20, 1 << 20, 1));
//! let file = Ed2kSpec::new("demo.bin", Payload::synthetic(64 << 20, ED2K_PART, 2));
//! let mut w = World::new(1);
//! let seed = w.add_node(
//!     NodeConfig::seeder(&torrent).with(TransferConfig::ed2k_share(&file)),
//! );
//! let (bt, ed2k) = (w.node(seed).bt_addr().unwrap(), w.node(seed).ed2k_addr().unwrap());
//! // One session downloads both; its dials go over the default links.
//! let leech = w.add_node(
//!     NodeConfig::new()
//!         .with(TransferConfig::leech(&torrent).peers([bt]))
//!         .with(TransferConfig::ed2k_get(&file).peers([ed2k])),
//! );
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
