//! Sans-IO BitTorrent DHT (BEP 5, with BEP 32 `nodes6`, BEP 42 node ids
//! and `ip`, BEP 43 read-only) and Local Service Discovery (BEP 14).
//!
//! Like the other protocol cores of weir, nothing here does I/O: no
//! sockets, no clock, no threads, no unseeded randomness. Datagrams and
//! time come in as arguments, datagrams to send and events come out of
//! `poll_*` calls, so the same node runs over the session's UDP socket in
//! `weir-runtime` and, in this crate's tests, in a simulated network of a
//! thousand nodes in virtual time (`tests/sim`).
//!
//! # Design
//!
//! - [`krpc`]: the message codec on the strict decoder of `weir-bencode`,
//!   every size a stranger controls bounded (16 KiB datagrams, 32 nodes per
//!   family and 200 peers kept per answer, short ids, tokens and texts);
//!   [`krpc::decode`] is the entry point for fuzzing.
//! - [`id`]: 160-bit ids, XOR distance, BEP 42 ids ([`Id::bep42_for`],
//!   [`Id::is_valid_for`]).
//! - [`table`]: k-buckets (k = 8), only the bucket holding our id splits;
//!   BEP 5 liveness (good / questionable / bad), replacement caches, bucket
//!   refresh, one node per IP; [`save`] writes and reads it as a blob for
//!   the state directory.
//! - [`lookup`]: iterative lookups, `alpha` (3) queries in flight and more
//!   while some are slow (up to 8), a slow query sent once more, and done
//!   when the `k` closest nodes seen have answered, not on a timer. Peers
//!   are reported as each answer brings them.
//! - [`Dht`] ties them together. Server half: answers `ping`, `find_node`,
//!   `get_peers`, `announce_peer`, with tokens from a secret rotated every
//!   5 minutes (the current and previous are accepted) tied to the
//!   querier's IP, and a peer store bounded per info-hash and in total
//!   whose entries expire after 30 minutes; a node that queries us is
//!   pinged before it enters the table. Client half: lookups, announces to
//!   the closest nodes with their tokens, pings of questionable nodes,
//!   bucket refresh, a bootstrap (with a refresh of every far bucket, as
//!   Kademlia joins) at start and whenever fewer than `k` live nodes are
//!   left; every outgoing query passes a rate limit (100/s by default),
//!   waiting in a bounded queue rather than being dropped.
//! - [`lsd`]: the BEP 14 announce codec and a sans-IO state machine.
//!
//! Defences against hostile nodes: an answer counts only from the address
//! asked, under the transaction id given, and under the id the node was
//! referred with (a node claiming another id is ignored, which defeats
//! made-up "closest" ids); one candidate per IP; optional BEP 42
//! enforcement ([`Config::enforce_node_id`]); every list and queue bounded.
//!
//! # Driving a [`Dht`] (what the runtime does)
//!
//! ```text
//! let saved = SavedTable::decode(&blob_from_state_dir).ok();  // absent or bad: start cold
//! let id = saved.as_ref().map_or_else(|| random_id(), |s| s.id);
//! let cfg = Config { bootstrap: resolved --dht-bootstrap addresses, ..Config::default() };
//! let mut dht = Dht::new(cfg, id, seed_from_os, now);
//! if let Some(s) = &saved { dht.load_table(s, now); }
//! loop {
//!     // 1. one input:
//!     //    a datagram on the session's UDP socket with is_krpc(data):
//!     //        dht.handle_datagram(from, data, now)
//!     //    the deadline of poll_timeout() passed: dht.handle_timeout(now)
//!     //    a command: get_peers / announce / find_node / add_node / cancel
//!     // 2. drain, in this order:
//!     while let Some((to, bytes)) = dht.poll_transmit() { send_to(to, bytes) /* policy-checked */ }
//!     while let Some(ev) = dht.poll_event() { /* Event::Peers -> the torrent's dialer, ... */ }
//!     // 3. sleep until dht.poll_timeout() or the next input.
//! }
//! // Every few minutes and at exit: write dht.save_table() to the state dir.
//! ```
//!
//! Notes for the runtime:
//! - `Dht::new` takes `now` (unlike the suggested shape) so that it can
//!   start bootstrapping at once; time must not go backwards (an earlier
//!   `now` is treated as the latest seen).
//! - Every datagram out is a query or an answer to an address that should
//!   pass the network policy (`weir_runtime::net::PolicedUdp` checks it);
//!   one refused can simply be dropped: the query times out.
//! - One `Dht` per address family (BEP 32 keeps separate tables): a node on
//!   an IPv4 socket uses `nodes`, one on IPv6 `nodes6`.
//! - Re-announce each torrent every 15 to 30 minutes ([`Dht::announce`]);
//!   stored peers expire after 30. `announce(ih, None, now)` sends
//!   `implied_port` (uTP on the DHT socket).
//! - [`Event::ExternalAddress`] reports our address as others see it (the
//!   BEP 42 `ip` field); a runtime may derive a BEP 42 id from it for the
//!   next start.
//! - The decoder is strict bencode: a datagram with unsorted dictionary
//!   keys (some old clients) is refused as malformed.
//!
//! **Demultiplexing the shared UDP socket** ([`is_krpc`]): a KRPC datagram
//! is a bencoded dictionary, so it starts with `d` (0x64) and ends with `e`.
//! uTP packets start with `(type << 4) | 1` with type 0 to 4, so with 0x01,
//! 0x11, 0x21, 0x31 or 0x41, never 0x64; UDP tracker packets start with a
//! big-endian 64-bit protocol id (0x00...) or 32-bit action (0 to 3), so
//! with 0x00. The rule is exactly: length at least 2, first byte `b'd'`,
//! last byte `b'e'`.

mod dht;

pub mod compact;
pub mod id;
pub mod krpc;
pub mod lookup;
pub mod lsd;
mod ratelimit;
pub mod save;
mod store;
pub mod table;
mod token;

pub use compact::NodeInfo;
pub use dht::{CommandError, Config, Dht, Event, Stats};
pub use id::{Id, InfoHash, NodeId};
pub use lookup::{LookupId, LookupKind, LookupStats};
pub use save::{LoadError, SavedTable};
pub use store::StoreConfig;
pub use table::TableConfig;
pub use token::TOKEN_LEN;

/// Whether a datagram on a shared UDP socket is KRPC (for the DHT) rather
/// than uTP or a UDP tracker answer: at least 2 bytes, starting with `d`
/// and ending with `e` (see the crate documentation for why this is
/// unambiguous). Cheap: it reads two bytes.
pub fn is_krpc(data: &[u8]) -> bool {
    data.len() >= 2 && data[0] == b'd' && data[data.len() - 1] == b'e'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn krpc_demux_rule() {
        assert!(is_krpc(
            b"d1:ad2:id20:abcdefghij0123456789e1:q4:ping1:t2:aa1:y1:qe"
        ));
        assert!(!is_krpc(b"d"));
        assert!(!is_krpc(b""));
        assert!(!is_krpc(b"d1:a"));
        // uTP: ST_DATA..ST_SYN, version 1.
        for ty in 0u8..=4 {
            let mut p = vec![(ty << 4) | 1, 0, 0, 0];
            p.extend_from_slice(&[b'e'; 16]);
            assert!(!is_krpc(&p));
        }
        // UDP tracker connect request and an announce answer.
        assert!(!is_krpc(&0x0417_2710_1980u64.to_be_bytes()));
        assert!(!is_krpc(&[0, 0, 0, 1, 0, 0, 0, 5, b'e']));
    }
}
