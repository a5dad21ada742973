//! The names, inputs and outputs of a session.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use bytes::Bytes;
use weir_bt::wire::Handshake;
use weir_core::close::{BanReason, CloseReason};
use weir_core::storage::{Digests, StorageOp};

/// A transfer of the session, stable for its life (the daemon's RPC ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransferId(pub u32);

impl std::fmt::Display for TransferId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A connection, as the session, the protocol cores and the runtime all
/// name it (session-wide, never reused).
pub type ConnId = u32;

/// What a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    /// BitTorrent peer wire.
    Bt,
    /// eD2k client-client.
    Ed2k,
    /// eD2k client-server (finding sources).
    Ed2kServer,
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Proto::Bt => "BitTorrent",
            Proto::Ed2k => "eD2k",
            Proto::Ed2kServer => "eD2k server",
        })
    }
}

/// What the runtime sends first on a dialled connection.
#[derive(Clone, Debug)]
pub enum Hello {
    /// A BitTorrent handshake, then messages valid for any peer that ride
    /// along with it (so the first request needs no extra round trip).
    Bt {
        /// Our handshake (the transfer's info-hash, our peer id).
        ours: Handshake,
        /// Messages after the handshake (may be empty).
        preamble: Bytes,
    },
    /// Nothing: the eD2k core writes its hello once the connection is up.
    Ed2k,
    /// Nothing: the server session writes its login once connected.
    Ed2kServer,
}

/// What the runtime learnt when a connection's handshake finished.
#[derive(Clone, Debug)]
pub enum Established {
    /// BitTorrent: the peer's handshake (for a dial, the preamble of
    /// [`Hello::Bt`] went out when `preamble_sent`).
    Bt {
        /// The peer's handshake.
        theirs: Handshake,
        /// The preamble went out behind our handshake.
        preamble_sent: bool,
    },
    /// eD2k: the TCP connection is up; our address on it (our high id).
    Ed2k {
        /// Our local IPv4 address on the connection.
        local_ip: Option<Ipv4Addr>,
    },
    /// An eD2k server connection is up.
    Ed2kServer,
}

/// What a connection runs over, as the runtime reports it after the
/// handshake ([`crate::Session::set_link`]): shown per peer (Transmission's
/// `isUTP`, `isEncrypted`, flags `T` and `E`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// uTP, not TCP.
    pub utp: bool,
    /// RC4 (MSE) after the handshake, not plaintext.
    pub encrypted: bool,
}

/// Why an incoming connection or a handshake was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The address is banned.
    #[error("banned address")]
    Banned,
    /// Outside the network policy.
    #[error("outside the network policy")]
    Outside,
    /// Every peer slot is taken.
    #[error("peer limit reached")]
    Full,
    /// A BitTorrent handshake for a torrent this session does not have.
    #[error("no such torrent")]
    UnknownTorrent,
    /// Our own connection came back (the same peer id).
    #[error("connected to ourselves")]
    Ourselves,
    /// Already connected to this peer.
    #[error("duplicate connection")]
    Duplicate,
    /// The transfer is paused or still checking its data.
    #[error("transfer not accepting peers now")]
    NotNow,
    /// No such connection (it was closed meanwhile).
    #[error("unknown connection")]
    UnknownConn,
}

/// Something that happened to a transfer, for progress displays, the
/// daemon and the resume state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferEvent {
    /// The start-up check of its data finished.
    Checked,
    /// A piece (or eD2k part) was verified.
    Verified(u32),
    /// Every wanted byte is verified.
    Complete,
    /// Its storage failed; it stopped.
    Failed(String),
}

/// What the runtime must do. Drained with [`crate::Session::poll_event`]
/// after every input.
#[derive(Debug)]
pub enum SessionEvent {
    /// Open (create, or find) the transfer's files with these digests for
    /// its pieces; storage events for it may follow only after.
    OpenStorage {
        /// The transfer.
        transfer: TransferId,
        /// The digest of every piece of the transfer's primary grid.
        digests: Digests,
        /// Pieces whose first bytes an earlier run wrote and the transfer
        /// took, `(piece, bytes)`: storage hashes them back before any new
        /// write to those pieces.
        resumed: Vec<(u32, u32)>,
    },
    /// Perform a storage operation for a transfer.
    Storage {
        /// The transfer.
        transfer: TransferId,
        /// The operation.
        op: StorageOp,
    },
    /// Open a connection to `addr` (policy-checked by the runtime again),
    /// send `hello`, and report [`crate::Session::established`] or
    /// [`crate::Session::dial_failed`].
    Dial {
        /// The connection's id from now on.
        conn: ConnId,
        /// What it speaks.
        proto: Proto,
        /// Where.
        addr: SocketAddr,
        /// What to send first.
        hello: Hello,
    },
    /// Write these bytes to the connection, in order.
    Send {
        /// The connection.
        conn: ConnId,
        /// Chunks (vectored).
        data: Vec<Bytes>,
        /// Payload bytes among them (charged to upload caps).
        payload: u64,
    },
    /// Close the connection after what is queued; the session forgot it.
    Close {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
    /// An address was banned (bad data): for the log.
    Banned {
        /// The address.
        ip: IpAddr,
        /// Why.
        reason: BanReason,
    },
    /// Something happened to a transfer.
    Transfer {
        /// The transfer.
        transfer: TransferId,
        /// What.
        event: TransferEvent,
    },
    /// Check a unit of a secondary scheme from storage (an eD2k part of a
    /// torrent's file): read `len` bytes at `offset` of the transfer, hash
    /// them, and report [`crate::Session::range_checked`].
    CheckRange {
        /// The transfer.
        transfer: TransferId,
        /// The content's scheme.
        scheme: weir_core::content::SchemeId,
        /// The unit.
        unit: u32,
        /// Transfer offset of its first byte.
        offset: u64,
        /// Its length.
        len: u64,
        /// What it must hash to.
        digest: weir_core::storage::Digest,
    },
    /// A BitTorrent peer's DHT node (BEP 5 `port`), allowed by the
    /// policy and not banned: the runtime's DHT pings it and keeps it if
    /// it answers.
    DhtNode(std::net::SocketAddr),
    /// A line for the log (the session itself never logs).
    Log {
        /// How important.
        level: LogLevel,
        /// The line.
        message: String,
    },
}

/// Importance of a [`SessionEvent::Log`] line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// Details.
    Debug,
    /// Normal operation worth a line.
    Info,
    /// Something the user may need to act on.
    Warn,
}

/// Why a transfer could not be added.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// The session has it already.
    #[error("already added as transfer {0}")]
    Duplicate(TransferId),
    /// The eD2k core refused it.
    #[error("eD2k: {0}")]
    Ed2k(#[from] weir_ed2k::transfer::AddError),
}
