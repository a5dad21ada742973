//! The shared transfer core of weir.
//!
//! Everything here is sans-IO: no sockets, no files, no clock reads, no
//! threads. Time comes in as an [`std::time::Instant`] argument, bytes come in
//! as slices or [`bytes::Bytes`], and results go out as return values. Every
//! protocol (BitTorrent, eD2k, ZMODEM) uses these pieces instead of its own:
//!
//! - [`meter`]: rate meters over one-second buckets that divide by the time
//!   actually observed, so a new connection reads its true rate at once.
//! - [`pipeline`]: request-pipeline depth from the recent rate and the
//!   measured request round trip, with per-peer slow start and hysteresis.
//! - [`bucket`]: lock-free token buckets for literal global (and optional
//!   per-transfer) bandwidth caps that redistribute by demand.
//! - [`close`]: why a connection is closed and why an address is banned,
//!   as types every core and the session return.
//! - [`geometry`], [`bitfield`], [`picker`]: pieces, blocks, who has what,
//!   and which block to ask for next (rarest first, sequential, endgame).
//! - [`storage`]: the storage contract (operations a core asks for and their
//!   completions), the file layout, and the streaming piece verifier.
//! - [`content`]: the protocol-neutral transfer: pieces had, blocks asked,
//!   in-order assembly, start-up checks, secondary verification schemes and
//!   evidence against senders, shared by every network feeding one file.
//! - [`outbox`]: a connection's queued output in the writer's units.
//! - [`policy`]: the network allow-list every socket and datagram obeys.
//! - [`peers`]: known-peer lists (bounded, pruned), dial state and backoff,
//!   bans, and the limits on connections, half-open dials and handshakes.
//! - [`resume`]: the resume journal's checked format, and the decision of
//!   what an opening transfer trusts, hashes again or must not touch.
//! - [`safepath`]: turning names from torrents and the wire into paths that
//!   can never leave the download directory.
//! - [`units`]: sizes, rates and durations as people type them, parsed one
//!   way for every front end.

pub mod bitfield;
pub mod bucket;
pub mod close;
pub mod content;
pub mod geometry;
pub mod meter;
pub mod outbox;
pub mod peers;
pub mod picker;
pub mod pipeline;
pub mod policy;
pub mod resume;
pub mod safepath;
pub mod selection;
pub mod storage;
pub mod units;
