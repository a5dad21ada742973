//! BEP 9 metadata exchange (`ut_metadata`): fetching a torrent's info
//! dictionary from peers (for magnet links) and serving it to them.
//!
//! - [`MetadataMsg`]: the message codec (request, data, reject), strictly
//!   bounded by [`MetadataLimits`].
//! - [`MetadataFetcher`]: one info-hash, many peers at once, each peer's
//!   requests in flight sized by the shared [`weir_core::pipeline`];
//!   timeouts, rejects, re-asks, SHA-1 verification of the whole
//!   dictionary against the info-hash, and finding the peer that lied when
//!   it does not match. The result is a [`crate::metainfo::Metainfo`] parsed
//!   by the strict metainfo parser, plus the `.torrent` bytes to save.
//! - [`MetadataServer`]: answers requests from the info dictionary's bytes,
//!   with rejects when we have none and a per-peer rate bound.
//!
//! # Wiring it into a connection
//!
//! Our extension handshake advertises `m: {ut_metadata: LOCAL_ID}` and,
//! when we have the metadata, `metadata_size`
//! ([`MetadataServer::metadata_size`]). Extended messages arriving on
//! [`LOCAL_ID`] are decoded once with [`MetadataMsg::decode`] and routed:
//! `Request` to the server, `Data` and `Reject` to the fetcher (if one is
//! running). Both queue whole wire frames (length prefix, id 20, the
//! peer's own ut_metadata id, payload) that the runtime drains with
//! `poll_send` and writes to that connection.

mod fetcher;
mod message;
mod server;
#[cfg(test)]
mod tests;

use bytes::{Bytes, BytesMut};

pub use fetcher::{
    FetchDrop, FetchError, FetchEvent, FetchStats, FetchedMetadata, FetcherConfig, MetadataFetcher,
};
pub use message::{
    MSG_DATA, MSG_REJECT, MSG_REQUEST, MetadataLimits, MetadataMsg, MetadataMsgError,
};
pub use server::{LazyServer, MetadataServer, ServerConfig, ServerStats};

/// Bytes per metadata piece (the last piece may be shorter).
pub const PIECE_LEN: usize = 16 * 1024;
/// Default largest info dictionary accepted (16 MiB: a torrent of about
/// 800,000 pieces; larger ones are not worth fetching from strangers).
pub const DEFAULT_MAX_SIZE: u64 = 16 << 20;
/// The extended message id weir asks peers to send ut_metadata on (the
/// value in our handshake's `m`).
pub const LOCAL_ID: u8 = 2;

/// Pieces in an info dictionary of `size` bytes.
pub fn piece_count(size: u64) -> u32 {
    u32::try_from(size.div_ceil(PIECE_LEN as u64)).unwrap_or(u32::MAX)
}

/// Length of piece `piece` of a `size`-byte dictionary (0 past the end).
pub fn piece_len(size: u64, piece: u32) -> usize {
    let start = u64::from(piece) * PIECE_LEN as u64;
    size.saturating_sub(start).min(PIECE_LEN as u64) as usize
}

/// A whole wire frame carrying `msg` to a peer that wants ut_metadata on
/// extended id `ext_id`.
pub fn frame(ext_id: u8, msg: &MetadataMsg) -> Bytes {
    let payload = Bytes::from(msg.encode());
    let mut out = BytesMut::with_capacity(6 + payload.len());
    crate::wire::encode(
        &crate::wire::Message::Extended {
            id: ext_id,
            payload,
        },
        &mut out,
    );
    out.freeze()
}
