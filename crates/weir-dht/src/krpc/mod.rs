//! KRPC, the DHT's message format (BEP 5): one bencoded dictionary per UDP
//! datagram, a query (`y=q`), a response (`y=r`) or an error (`y=e`), tied
//! together by a transaction id `t` the querier chose.
//!
//! [`decode`] is strict where meaning depends on it (the bencode itself, ids
//! of 20 bytes, compact lists of whole entries, ports in range) and lenient
//! where it does not: unknown keys are ignored, and so are informational
//! keys of the wrong type (`v`, `ro`, `ip`). Every size a stranger controls
//! is bounded: the datagram ([`MAX_PACKET`]), transaction ids, tokens,
//! versions, method names and error messages (longer is an error, or is
//! dropped for `v`), and the number of nodes and peers kept from a response
//! ([`MAX_NODES`] per address family, [`MAX_VALUES`]): more are not read,
//! and [`Response::truncated`] says so. Decoding never panics.
//!
//! [`Message::encode`] writes canonical bencode (keys sorted), which is
//! what the strict decoder accepts; `decode(encode(m)) == m` for every
//! message within the bounds.

mod decode;
mod encode;

pub use decode::decode;

use std::net::SocketAddr;

use crate::compact::NodeInfo;
use crate::id::Id;

/// Largest datagram decoded. Real KRPC messages fit one MTU (libtorrent
/// keeps them under 1500 bytes); 16 KiB leaves room for extensions and
/// bounds what one datagram can make the decoder allocate.
pub const MAX_PACKET: usize = 16 * 1024;
/// Longest transaction id accepted (real ones are 2 to 8 bytes).
pub const MAX_TRANSACTION_LEN: usize = 32;
/// Longest token accepted (real ones are 4 to 20 bytes).
pub const MAX_TOKEN_LEN: usize = 64;
/// Longest `v` (client version) kept; a longer one is dropped.
pub const MAX_VERSION_LEN: usize = 16;
/// Longest method name accepted in a query.
pub const MAX_METHOD_LEN: usize = 32;
/// Longest error message kept (bytes; the rest is cut).
pub const MAX_ERROR_MESSAGE: usize = 256;
/// Nodes kept per address family from one response (real ones send 8).
pub const MAX_NODES: usize = 32;
/// Peers kept from one `get_peers` response.
pub const MAX_VALUES: usize = 200;

/// KRPC error code 201: generic error.
pub const ERROR_GENERIC: i64 = 201;
/// KRPC error code 202: server error.
pub const ERROR_SERVER: i64 = 202;
/// KRPC error code 203: protocol error (malformed packet, bad token...).
pub const ERROR_PROTOCOL: i64 = 203;
/// KRPC error code 204: method unknown.
pub const ERROR_METHOD_UNKNOWN: i64 = 204;

/// One KRPC message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The transaction id, chosen by the querier and echoed in the answer.
    pub transaction: Vec<u8>,
    /// The sender's client version (`v`), if it sent a short one.
    pub version: Option<Vec<u8>>,
    /// BEP 43: the sender is read-only (`ro=1`): it does not answer
    /// queries and must not be put in routing tables.
    pub read_only: bool,
    /// BEP 42: in a response, the querier's address as the responder saw
    /// it (how a node learns its external address).
    pub ip: Option<SocketAddr>,
    /// What the message is.
    pub body: Body,
}

/// The three kinds of message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A query (`y=q`).
    Query(Query),
    /// A response (`y=r`).
    Response(Response),
    /// An error (`y=e`).
    Error(ErrorBody),
}

/// The address families a querier wants nodes for (BEP 32 `want`); both
/// false means "the family of the address the query came from".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Want {
    /// `n4`: IPv4 nodes.
    pub v4: bool,
    /// `n6`: IPv6 nodes.
    pub v6: bool,
}

/// A query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// `ping`.
    Ping {
        /// The querier's id.
        id: Id,
    },
    /// `find_node`: the nodes closest to `target`.
    FindNode {
        /// The querier's id.
        id: Id,
        /// The id looked for.
        target: Id,
        /// Address families wanted.
        want: Want,
    },
    /// `get_peers`: peers of `info_hash`, or the closest nodes.
    GetPeers {
        /// The querier's id.
        id: Id,
        /// The torrent.
        info_hash: Id,
        /// Address families wanted.
        want: Want,
    },
    /// `announce_peer`: the querier is a peer of `info_hash`.
    AnnouncePeer {
        /// The querier's id.
        id: Id,
        /// The torrent.
        info_hash: Id,
        /// The peer's port (ignored when `implied_port`).
        port: u16,
        /// Use the query's source port instead of `port` (peers behind
        /// NAT, uTP on the DHT's socket).
        implied_port: bool,
        /// The token the receiver gave in its `get_peers` answer.
        token: Vec<u8>,
    },
    /// A method this crate does not implement (answered with error 204).
    Other {
        /// The querier's id, if it sent a valid one.
        id: Option<Id>,
        /// The method name.
        method: Vec<u8>,
    },
}

impl Query {
    /// The querier's id (`None` only for an unknown method without one).
    pub fn id(&self) -> Option<Id> {
        match self {
            Query::Ping { id }
            | Query::FindNode { id, .. }
            | Query::GetPeers { id, .. }
            | Query::AnnouncePeer { id, .. } => Some(*id),
            Query::Other { id, .. } => *id,
        }
    }

    /// The method name as sent on the wire.
    pub fn method(&self) -> &[u8] {
        match self {
            Query::Ping { .. } => b"ping",
            Query::FindNode { .. } => b"find_node",
            Query::GetPeers { .. } => b"get_peers",
            Query::AnnouncePeer { .. } => b"announce_peer",
            Query::Other { method, .. } => method,
        }
    }
}

/// A response. KRPC responses are not typed: which fields matter depends
/// on the query the transaction id belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The responder's id.
    pub id: Id,
    /// IPv4 nodes (`nodes`, 26 bytes each). The encoder writes only the
    /// IPv4 entries of this list.
    pub nodes: Vec<NodeInfo>,
    /// IPv6 nodes (`nodes6`, 38 bytes each). The encoder writes only the
    /// IPv6 entries of this list.
    pub nodes6: Vec<NodeInfo>,
    /// Peers (`values`, compact 6 or 18 bytes each).
    pub values: Vec<SocketAddr>,
    /// The token to present in a later `announce_peer`.
    pub token: Option<Vec<u8>>,
    /// Set by the decoder when nodes or peers past [`MAX_NODES`] /
    /// [`MAX_VALUES`] were dropped. Never encoded.
    pub truncated: bool,
}

/// An error message (`e`: a code and a text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorBody {
    /// The error code (201 to 204 in BEP 5).
    pub code: i64,
    /// The text, decoded lossily as UTF-8 and cut at [`MAX_ERROR_MESSAGE`].
    pub message: String,
}

/// Why a datagram is not a valid KRPC message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad KRPC message: {kind}")]
pub struct DecodeError {
    /// What is wrong.
    pub kind: DecodeErrorKind,
    /// The transaction id, when the message got that far (a server answers
    /// a malformed query with error 203 under it).
    pub transaction: Option<Vec<u8>>,
    /// Whether the message said it was a query (`y=q`).
    pub query: bool,
}

/// The kinds of [`DecodeError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeErrorKind {
    /// The datagram is larger than [`MAX_PACKET`].
    #[error("datagram of {len} bytes is larger than {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not bencode (or not strict bencode).
    #[error("{0}")]
    Bencode(weir_bencode::Error),
    /// The top-level value is not a dictionary.
    #[error("not a dictionary")]
    NotADict,
    /// A required key is missing.
    #[error("missing key `{0}`")]
    Missing(&'static str),
    /// A key holds the wrong type.
    #[error("key `{key}` is not a {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// The type it should have.
        expected: &'static str,
    },
    /// A byte string of the wrong length (an id that is not 20 bytes, a
    /// compact list that is not whole entries, an oversized token...).
    #[error("key `{key}` has a bad length ({len} bytes)")]
    BadLength {
        /// The key.
        key: &'static str,
        /// The length found.
        len: usize,
    },
    /// `y` is not `q`, `r` or `e`.
    #[error("unknown message type")]
    UnknownType,
    /// A port that is not 1..=65535.
    #[error("port {0} out of range")]
    BadPort(i64),
}

#[cfg(test)]
mod tests;
