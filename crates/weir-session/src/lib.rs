//! The session of weir: every transfer of every protocol in one place.
//!
//! Sans-IO like the protocol cores: a [`Session`] takes commands (add a
//! torrent, an eD2k download or share, an eD2k server; pause, resume,
//! remove), connection and storage inputs, and time as `now` arguments,
//! and answers with [`SessionEvent`]s the runtime carries out. It owns
//! what used to live in each runtime driver:
//!
//! - the transfers by [`TransferId`], each with its BitTorrent side (a
//!   `weir_bt::torrent::Torrent`, routed by info-hash) and/or its eD2k side
//!   (a file of the session's one `weir_ed2k::transfer::Client`, routed by
//!   file hash), downloading through the shared `weir_core::content`;
//! - every connection by [`ConnId`] (session-wide, never reused), its
//!   stage (dialling, handshaking, peer) and transfer;
//! - the known-peer lists (`weir_core::peers::PeerBook`, bounded and
//!   pruned, one per transfer and network), the dial decisions under the
//!   global and per-transfer limits (peers, half-open dials, handshakes in
//!   progress), backoff, and bans by IP that hold across transfers,
//!   protocols and reconnects;
//! - the eD2k servers (login, offers, source requests, callbacks).
//!
//! The runtime's part is the I/O: it dials on [`SessionEvent::Dial`] and
//! reports [`Session::established`] / [`Session::dial_failed`], asks
//! [`Session::incoming`] before running an accepted connection's handshake
//! and [`Session::bt_route`] to answer a BitTorrent one, feeds decoded
//! messages ([`Session::bt_messages`], [`Session::ed2k_packets`]), write
//! completions ([`Session::sent`]), closes ([`Session::closed`]) and storage
//! completions ([`Session::storage`]), and calls [`Session::handle_timeout`]
//! at [`Session::poll_timeout`]. After every input it drains
//! [`Session::poll_event`]. The simulator drives the same session in
//! virtual time.

mod config;
mod conns;
mod mixed;
mod pump;
mod server;
mod session;
mod transfer;
mod types;

pub use config::SessionConfig;
pub use session::{AddEd2k, AddTorrent, BtPeer, Session};
pub use transfer::{Phase, RunState, TransferInfo};
pub use types::{
    AddError, ConnId, Established, Hello, Link, LogLevel, Proto, Refused, SessionEvent,
    TransferEvent, TransferId,
};
pub use weir_core::close::{BanReason, CloseReason};
pub use weir_core::peers::Source;

#[cfg(test)]
mod tests;
