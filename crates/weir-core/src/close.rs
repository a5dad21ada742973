//! Why a connection is closed and why an address is banned, as types.
//!
//! Every protocol core and the session say why they drop a peer; the
//! runtime logs it and decides by kind (an own-connection warning, a ban
//! line), so the reasons are values to match on, not strings to compare.
//! What a misbehaving peer did exactly is kept as text inside
//! [`CloseReason::Protocol`], for the log only.

use std::time::Duration;

/// Why a core or the session closes a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// The peer broke its protocol (counted as a protocol error); what it
    /// did, for the log.
    #[error("{0}")]
    Protocol(String),
    /// The peer's address was just banned for bad data.
    #[error("banned: {0}")]
    Banned(BanReason),
    /// The peer's address is on the ban list already.
    #[error("banned address")]
    BannedAddress,
    /// Nothing moved either way for too long.
    #[error("idle")]
    Idle,
    /// A source we download from sent nothing for too long.
    #[error("source sent nothing for too long")]
    Stalled,
    /// An eD2k peer connected and never sent its hello.
    #[error("no hello")]
    NoHello,
    /// Closed to make room for a new peer.
    #[error("made room for a new peer: {}", eviction(*.took_nothing, *.idle))]
    Evicted {
        /// It held an upload slot and took nothing in it.
        took_nothing: bool,
        /// Otherwise: no block moved either way in this long.
        idle: Duration,
    },
    /// Both sides are seeds: nothing to exchange.
    #[error("both seeds")]
    BothSeeds,
    /// Our download is complete and the peer is a seed.
    #[error("download complete; peer is a seed")]
    PeerIsSeed,
    /// Neither side wants anything the other has (eD2k).
    #[error("nothing to transfer")]
    NothingToTransfer,
    /// The peer is this client (our own id or user hash came back).
    #[error("connected to ourselves")]
    SelfConnection,
    /// The peer stopped reading what we send; we dial it again later to
    /// resume (eD2k's callback).
    #[error("peer stopped reading; connecting to it again to resume")]
    StoppedReading,
    /// Reading data for the peer failed; what storage said.
    #[error("storage: {0}")]
    Storage(String),
    /// Every peer slot is taken.
    #[error("peer limit reached")]
    PeerLimit,
    /// Too many handshakes were in progress; the oldest made room.
    #[error("too many handshakes in progress")]
    TooManyHandshakes,
    /// Its transfer was paused.
    #[error("transfer paused")]
    TransferPaused,
    /// Its transfer failed (storage).
    #[error("transfer failed")]
    TransferFailed,
    /// The eD2k source's file is not the torrent's file it was joined to.
    #[error("eD2k file does not match the torrent")]
    WrongFile,
}

impl CloseReason {
    /// Whether the peer is at fault (it broke the protocol or sent bad
    /// data), as opposed to a close for housekeeping.
    pub fn peer_at_fault(&self) -> bool {
        matches!(
            self,
            CloseReason::Protocol(_) | CloseReason::Banned(_) | CloseReason::BannedAddress
        )
    }
}

fn eviction(took_nothing: bool, idle: Duration) -> String {
    if took_nothing {
        "took nothing in its upload slot".to_string()
    } else {
        format!("no block either way in {} s", idle.as_secs())
    }
}

/// Why an address is banned: it sent data that failed verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BanReason {
    /// Its own block was proven bad (a piece failed its hash and the
    /// block it sent differs from the one that passed).
    #[error("sent a block that failed its piece's hash ({strikes} strikes)")]
    BadBlock {
        /// Strikes counted against it.
        strikes: u32,
    },
    /// It sent data of pieces (or eD2k parts) that failed their hash too
    /// often.
    #[error("sent data of pieces that failed their hash ({strikes} strikes)")]
    BadPieces {
        /// Strikes counted against it.
        strikes: u32,
    },
    /// eD2k: its MD4 hash list does not match the file hash.
    #[error("sent a hashset that does not match the file hash")]
    BadHashset,
    /// eD2k: a block it sent failed its AICH hash.
    #[error("sent a block that failed its AICH hash")]
    BadAichBlock,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_the_log_shows_them() {
        assert_eq!(
            CloseReason::Banned(BanReason::BadBlock { strikes: 3 }).to_string(),
            "banned: sent a block that failed its piece's hash (3 strikes)"
        );
        assert_eq!(
            CloseReason::Evicted {
                took_nothing: false,
                idle: Duration::from_secs(60)
            }
            .to_string(),
            "made room for a new peer: no block either way in 60 s"
        );
        assert_eq!(
            CloseReason::Protocol("reject without the fast extension".into()).to_string(),
            "reject without the fast extension"
        );
    }

    #[test]
    fn only_misbehaviour_is_the_peers_fault() {
        assert!(CloseReason::Protocol("x".into()).peer_at_fault());
        assert!(CloseReason::Banned(BanReason::BadHashset).peer_at_fault());
        assert!(!CloseReason::Idle.peer_at_fault());
        assert!(!CloseReason::SelfConnection.peer_at_fault());
    }
}
