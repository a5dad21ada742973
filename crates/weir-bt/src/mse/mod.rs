//! MSE/PE (Message Stream Encryption, "protocol encryption"): the
//! obfuscating handshake many BitTorrent peers require, as a sans-IO byte
//! transform in front of the BitTorrent handshake.
//!
//! The exchange, A the initiator (who dials), B the responder:
//!
//! ```text
//! 1 A->B: Ya, PadA
//! 2 B->A: Yb, PadB
//! 3 A->B: HASH('req1', S), HASH('req2', SKEY) xor HASH('req3', S),
//!         ENCRYPT(VC, crypto_provide, len(PadC), PadC, len(IA)), ENCRYPT(IA)
//! 4 B->A: ENCRYPT(VC, crypto_select, len(PadD), PadD), ENCRYPT2(payload)
//! 5 A->B: ENCRYPT2(payload)
//! ```
//!
//! `Y` are 768-bit Diffie-Hellman public keys ([`dh`](self) module), `S` the
//! shared secret, `SKEY` the torrent's info-hash, `HASH` SHA-1, `ENCRYPT`
//! RC4 keyed with `SHA1('keyA', S, SKEY)` (A to B) or `SHA1('keyB', S,
//! SKEY)` (B to A) with 1024 keystream bytes dropped, `VC` eight zero bytes.
//! `ENCRYPT2` is the same RC4 stream when RC4 was selected, or nothing
//! (plaintext) when plaintext was. Pads are 0..=512 random bytes; `IA` is
//! the initiator's first payload (weir puts its BitTorrent handshake there,
//! saving a round trip).
//!
//! # Bounds
//!
//! Everything a peer sends before the handshake settles is bounded by the
//! spec's own limits, and enforced: B must find `HASH('req1', S)` within
//! 96 + 512 + 20 bytes of A's stream, A must find `ENCRYPT(VC)` within
//! 96 + 512 + 8 bytes of B's; `len(PadC)` and `len(PadD)` above 512 are
//! errors, and `len(IA)` above [`MseConfig::max_ia`]. So a responder holds
//! at most [`MAX_RESPONDER_PREFIX`] plus `max_ia` bytes before it settles.
//! A deadline ([`MseConfig::timeout`], from the `now` given at creation)
//! bounds the time: the caller asks [`Initiator::poll_timeout`] and calls
//! `handle_timeout`.
//!
//! # Driving it
//!
//! 1. Outgoing: [`Encryption::outgoing_attempts`] says what to try, in
//!    order, each on a fresh TCP connection. For an MSE attempt create an
//!    [`Initiator`] (with the 68-byte BitTorrent handshake as IA) and write
//!    [`Initiator::take_output`]; for a plaintext one, write the BitTorrent
//!    handshake as usual.
//! 2. Incoming: create a [`Responder`] for every accepted connection; it
//!    tells a plaintext BitTorrent handshake (`\x13BitTorrent protocol`)
//!    from MSE by the first 20 bytes, so one listener serves both.
//! 3. Feed every received chunk to `handle_input`, write whatever it
//!    appended to `out`, and loop until it returns the outcome; on an
//!    error close the connection (outgoing: try the next attempt).
//! 4. The outcome, [`Established`], holds the selected [`Crypto`], the
//!    cipher halves (RC4 only) and the first payload bytes, already
//!    decrypted, that arrived with the end of the handshake (for a
//!    responder: IA, which is where the peer's BitTorrent handshake is).
//!    Hand them to the BitTorrent handshake/message decoder first.
//! 5. From then on the reader task runs [`Rc4Stream::apply_keystream`] on
//!    each read buffer in place before decoding, and the writer task on
//!    each buffer before writing (`MseCipher::split`). For a responder the
//!    runtime must have sent all bytes `handle_input` produced before any
//!    encrypted payload.
//!
//! # Randomness
//!
//! Private keys and pads come from the `fastrand::Rng` passed in. The
//! runtime seeds it from the operating system's entropy per session; with
//! a 64-bit seed an observer who could guess it could recover keys, which
//! is acceptable for MSE: it obfuscates traffic against shaping, it does
//! not authenticate anyone and was never meant as confidentiality.

mod cipher;
mod dh;
mod initiator;
mod rc4;
mod responder;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use cipher::{DISCARD, MseCipher, Rc4Stream, req2_hash};
pub use dh::KEY_LEN;
pub use initiator::Initiator;
pub use rc4::{Rc4, Rc4KeyLength};
pub use responder::{Accepted, Responder};

/// The verification constant: eight zero bytes.
pub const VC: [u8; 8] = [0; 8];
/// Largest PadA, PadB, PadC or PadD the spec allows.
pub const MAX_PAD: usize = 512;
/// `crypto_provide`/`crypto_select` bit: plaintext after the handshake.
pub const CRYPTO_PLAINTEXT: u32 = 0x01;
/// `crypto_provide`/`crypto_select` bit: RC4 after the handshake.
pub const CRYPTO_RC4: u32 = 0x02;
/// Bytes before a responder reads `len(IA)`: Ya, PadA, the two hashes, VC,
/// crypto_provide, len(PadC), PadC, len(IA).
pub const MAX_RESPONDER_PREFIX: usize = KEY_LEN + MAX_PAD + 20 + 20 + 8 + 4 + 2 + MAX_PAD + 2;
/// Bytes before an initiator has settled: Yb, PadB, VC, crypto_select,
/// len(PadD), PadD.
pub const MAX_INITIATOR_PREFIX: usize = KEY_LEN + MAX_PAD + 8 + 4 + 2 + MAX_PAD;

/// The encryption policy of a session (`--encryption`, and `encryption`
/// in the daemon's settings).
///
/// | policy | outgoing | incoming plaintext | incoming MSE selects |
/// |---|---|---|---|
/// | `Prefer` (default) | MSE offering RC4 and plaintext, then plaintext | accepted | RC4 if offered, else plaintext |
/// | `Require` | MSE offering RC4 only | refused | RC4 only |
/// | `Allow` | plaintext, then MSE offering both | accepted | plaintext if offered, else RC4 |
/// | `Off` | plaintext only | accepted | refused |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Encryption {
    /// Encrypt outgoing connections, fall back to plaintext, accept both.
    #[default]
    Prefer,
    /// Only RC4-encrypted connections, both ways.
    Require,
    /// Plaintext first, encryption when a peer needs it; accept both.
    Allow,
    /// Never encrypt; refuse MSE.
    Off,
}

/// One way to open an outgoing connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// A plain BitTorrent handshake.
    Plaintext,
    /// An MSE handshake ([`Initiator`]) offering [`Encryption::provide`].
    Mse,
}

/// What the stream is after the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Crypto {
    /// Plaintext (only the handshake itself was encrypted).
    Plaintext,
    /// RC4 both ways.
    Rc4,
}

impl Crypto {
    /// The `crypto_select` bit.
    pub fn bit(self) -> u32 {
        match self {
            Crypto::Plaintext => CRYPTO_PLAINTEXT,
            Crypto::Rc4 => CRYPTO_RC4,
        }
    }
}

impl Encryption {
    /// Every policy, for tests and help text.
    pub const ALL: [Encryption; 4] = [
        Encryption::Prefer,
        Encryption::Require,
        Encryption::Allow,
        Encryption::Off,
    ];

    /// What to try for an outgoing connection, in order; the next entry
    /// is tried (on a new connection) when one fails before the BitTorrent
    /// handshake completes.
    pub fn outgoing_attempts(self) -> &'static [Outgoing] {
        match self {
            Encryption::Prefer => &[Outgoing::Mse, Outgoing::Plaintext],
            Encryption::Require => &[Outgoing::Mse],
            Encryption::Allow => &[Outgoing::Plaintext, Outgoing::Mse],
            Encryption::Off => &[Outgoing::Plaintext],
        }
    }

    /// The `crypto_provide` an initiator sends (0 for `Off`, which never
    /// initiates MSE).
    pub fn provide(self) -> u32 {
        match self {
            Encryption::Prefer | Encryption::Allow => CRYPTO_RC4 | CRYPTO_PLAINTEXT,
            Encryption::Require => CRYPTO_RC4,
            Encryption::Off => 0,
        }
    }

    /// Whether a plaintext BitTorrent handshake is accepted from a peer
    /// that dialled us.
    pub fn accepts_plaintext(self) -> bool {
        !matches!(self, Encryption::Require)
    }

    /// Whether an incoming MSE handshake is accepted.
    pub fn accepts_mse(self) -> bool {
        !matches!(self, Encryption::Off)
    }

    /// The responder's `crypto_select` for an initiator's `provide`, or
    /// `None` when nothing acceptable was offered.
    pub fn select(self, provide: u32) -> Option<Crypto> {
        let rc4 = provide & CRYPTO_RC4 != 0;
        let plain = provide & CRYPTO_PLAINTEXT != 0;
        match self {
            Encryption::Prefer if rc4 => Some(Crypto::Rc4),
            Encryption::Prefer if plain => Some(Crypto::Plaintext),
            Encryption::Require if rc4 => Some(Crypto::Rc4),
            Encryption::Allow if plain => Some(Crypto::Plaintext),
            Encryption::Allow if rc4 => Some(Crypto::Rc4),
            _ => None,
        }
    }

    /// The name used on the command line and in settings.
    pub fn as_str(self) -> &'static str {
        match self {
            Encryption::Prefer => "prefer",
            Encryption::Require => "require",
            Encryption::Allow => "allow",
            Encryption::Off => "off",
        }
    }
}

impl fmt::Display for Encryption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not one of `prefer`, `require`, `allow`, `off`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown encryption policy {0:?}: expected prefer, require, allow or off")]
pub struct UnknownPolicy(pub String);

impl FromStr for Encryption {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Encryption::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// Tunables of one handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MseConfig {
    /// The session's policy.
    pub policy: Encryption,
    /// Largest PadA/PadB we send (random length `0..=pad_ab`; at most 512).
    pub pad_ab: u16,
    /// Largest PadC/PadD we send (random length `0..=pad_cd`; at most 512).
    /// 0 by default: the spec reserves them and most clients send none.
    pub pad_cd: u16,
    /// Largest IA a responder accepts (our own IA must fit too).
    pub max_ia: u16,
    /// The handshake must settle within this time of its creation.
    pub timeout: Duration,
}

impl MseConfig {
    /// Defaults for `policy`: PadA/PadB up to 512 bytes, no PadC/PadD, IA
    /// up to 4 KiB (a BitTorrent handshake is 68 bytes; some clients add
    /// their extension handshake), 20 s to settle.
    pub fn new(policy: Encryption) -> Self {
        Self {
            policy,
            pad_ab: MAX_PAD as u16,
            pad_cd: 0,
            max_ia: 4096,
            timeout: Duration::from_secs(20),
        }
    }
}

impl Default for MseConfig {
    fn default() -> Self {
        Self::new(Encryption::default())
    }
}

/// Why a handshake failed. After an error the handshake object keeps
/// returning it; the caller closes the connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MseError {
    /// A public key outside `2..=P-2` (or garbage where a key should be).
    #[error("mse: peer's Diffie-Hellman public key is out of range")]
    BadPublicKey,
    /// The synchronisation pattern did not appear where the spec puts it
    /// (padding past 512 bytes, garbage, or not MSE at all).
    #[error("mse: {what} not found within the first {limit} bytes")]
    SyncNotFound {
        /// `HASH('req1', S)` (responder) or `ENCRYPT(VC)` (initiator).
        what: &'static str,
        /// Bytes searched.
        limit: usize,
    },
    /// The decrypted VC is not eight zero bytes.
    #[error("mse: verification constant is {0:02x?}, expected eight zero bytes")]
    BadVc([u8; 8]),
    /// The initiator asked for a torrent the session does not have.
    #[error("mse: peer asked for an info-hash this session does not serve")]
    UnknownInfoHash,
    /// A `len(PadC)` or `len(PadD)` above 512.
    #[error("mse: {which} length {len} exceeds {MAX_PAD}")]
    PadTooLong {
        /// `PadC` or `PadD`.
        which: &'static str,
        /// The declared length.
        len: u16,
    },
    /// A `len(IA)` above [`MseConfig::max_ia`].
    #[error("mse: initial payload length {len} exceeds the limit of {max}")]
    IaTooLong {
        /// The declared length.
        len: u16,
        /// Our limit.
        max: u16,
    },
    /// Nothing in the initiator's `crypto_provide` is acceptable here.
    #[error("mse: peer provides crypto {provide:#x}, policy {policy} accepts none of it")]
    NoCommonCrypto {
        /// The peer's `crypto_provide`.
        provide: u32,
        /// Our policy.
        policy: Encryption,
    },
    /// The responder's `crypto_select` is not one bit we offered.
    #[error("mse: peer selected crypto {select:#x}, we provided {provide:#x}")]
    BadSelect {
        /// The peer's `crypto_select`.
        select: u32,
        /// What we provided.
        provide: u32,
    },
    /// A plaintext BitTorrent handshake while the policy requires MSE.
    #[error("mse: plaintext BitTorrent handshake refused (encryption is required)")]
    PlaintextRefused,
    /// An MSE handshake (or anything but a BitTorrent handshake) while the
    /// policy is `off`.
    #[error("mse: peer did not send a BitTorrent handshake and encryption is off")]
    EncryptionRefused,
    /// The policy does not initiate MSE (`off`), or provides nothing.
    #[error("mse: policy {0} does not make encrypted connections")]
    PolicyForbids(Encryption),
    /// Our own initial payload is longer than [`MseConfig::max_ia`].
    #[error("mse: our initial payload of {len} bytes exceeds the limit of {max}")]
    OwnIaTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: u16,
    },
    /// The handshake did not settle before its deadline.
    #[error("mse: handshake did not complete within {0:?}")]
    Timeout(Duration),
}

/// The outcome of a completed handshake.
#[derive(Debug)]
pub struct Established {
    /// The torrent: the initiator's SKEY, or the one a responder found.
    pub info_hash: [u8; 20],
    /// What the stream is from now on.
    pub crypto: Crypto,
    /// The RC4 halves when `crypto` is [`Crypto::Rc4`].
    pub cipher: Option<MseCipher>,
    /// Payload bytes that arrived with the end of the handshake, already
    /// decrypted (a responder's start with IA). Feed them to the
    /// BitTorrent decoder before anything read later.
    pub payload: Vec<u8>,
}

/// How a responder finds the torrent an initiator asks for.
///
/// The initiator sends `HASH('req2', SKEY) xor HASH('req3', S)`; the
/// responder removes `HASH('req3', S)` and asks this lookup for the
/// info-hash whose [`req2_hash`] is the result. A session keeps one map for
/// all its torrents ([`Skeys`]), so the lookup costs one access whatever the
/// number of torrents. Closures `Fn(&[u8; 20]) -> Option<[u8; 20]>` work
/// too.
pub trait SkeyLookup {
    /// The info-hash whose `HASH('req2', info_hash)` is `req2`.
    fn lookup(&self, req2: &[u8; 20]) -> Option<[u8; 20]>;
}

impl<F: Fn(&[u8; 20]) -> Option<[u8; 20]>> SkeyLookup for F {
    fn lookup(&self, req2: &[u8; 20]) -> Option<[u8; 20]> {
        self(req2)
    }
}

/// The info-hashes a session serves, keyed by `HASH('req2', info_hash)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skeys(BTreeMap<[u8; 20], [u8; 20]>);

impl Skeys {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The set of `hashes`.
    pub fn from_info_hashes<'a>(hashes: impl IntoIterator<Item = &'a [u8; 20]>) -> Self {
        let mut s = Self::new();
        for h in hashes {
            s.insert(*h);
        }
        s
    }

    /// Adds a torrent.
    pub fn insert(&mut self, info_hash: [u8; 20]) {
        self.0.insert(req2_hash(&info_hash), info_hash);
    }

    /// Removes a torrent.
    pub fn remove(&mut self, info_hash: &[u8; 20]) {
        self.0.remove(&req2_hash(info_hash));
    }

    /// Number of torrents.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl SkeyLookup for Skeys {
    fn lookup(&self, req2: &[u8; 20]) -> Option<[u8; 20]> {
        self.0.get(req2).copied()
    }
}

/// Random pad of `0..=max` bytes (max capped at 512).
fn random_pad(rng: &mut fastrand::Rng, max: u16) -> Vec<u8> {
    let len = rng.usize(..=usize::from(max).min(MAX_PAD));
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// Zero pad of `0..=max` bytes (PadC/PadD are encrypted, so zeros are as
/// good as random and are what the spec's reference sends).
fn zero_pad(rng: &mut fastrand::Rng, max: u16) -> Vec<u8> {
    vec![0u8; rng.usize(..=usize::from(max).min(MAX_PAD))]
}

/// Finds `needle` at an offset in `0..=max_offset` of `hay`.
fn find(hay: &[u8], needle: &[u8], max_offset: usize) -> Option<usize> {
    let last = hay.len().checked_sub(needle.len())?.min(max_offset);
    (0..=last).find(|&i| &hay[i..i + needle.len()] == needle)
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
