//! BEP 11 peer exchange (`ut_pex`): telling connected peers about the other
//! peers we are connected to, and learning theirs.
//!
//! - [`PexMessage`]: the codec (`added`, `added.f`, `added6`, `added6.f`,
//!   `dropped`, `dropped6`, compact addresses), bounded per message as
//!   libtorrent does: at most [`MAX_PER_LIST`] addresses per list; longer
//!   lists are truncated and the excess counted ([`Decoded::truncated`]).
//! - [`PexState`]: one per connection that negotiated ut_pex. It works out
//!   what to send from the session's current peer set (added and dropped
//!   since the last message to this peer) at most once per
//!   [`PexConfig::interval`] (a minute), and bounds what it accepts: a
//!   message sooner than [`PexConfig::min_receive_interval`] after the
//!   previous one is ignored and counted, and newly learnt addresses are
//!   rate-limited by a token bucket so a flood from one peer is capped.
//!
//! Learnt peers are only reported ([`PexReceived::added`]): the session
//! checks each against its network policy and dial limits before dialling.
//!
//! # Driving it
//!
//! After the extension handshake, if the peer's `m` has `ut_pex`, create a
//! [`PexState`]. Whenever the session's peer set changes, and at
//! [`PexState::poll_timeout`], call [`PexState::poll_message`] with the
//! session's current peers (without this peer) and send what it returns,
//! framed with [`frame`] on the peer's ut_pex id. Extended messages
//! arriving on [`LOCAL_ID`] go to [`PexState::handle_message`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use weir_bencode::{OwnedValue, Value};

/// The extended message id weir asks peers to send ut_pex on.
pub const LOCAL_ID: u8 = 1;
/// Most addresses in one list of one message (libtorrent's limit).
pub const MAX_PER_LIST: usize = 50;

/// PEX flags of one added peer (`added.f` / `added6.f`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PexFlags(pub u8);

impl PexFlags {
    /// 0x01: prefers encrypted connections (MSE).
    pub const ENCRYPTION: PexFlags = PexFlags(0x01);
    /// 0x02: a seed (upload only).
    pub const SEED: PexFlags = PexFlags(0x02);
    /// 0x04: supports uTP.
    pub const UTP: PexFlags = PexFlags(0x04);
    /// 0x08: supports ut_holepunch.
    pub const HOLEPUNCH: PexFlags = PexFlags(0x08);
    /// 0x10: reachable (we connected to it, not it to us).
    pub const REACHABLE: PexFlags = PexFlags(0x10);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: PexFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of bits.
    pub fn union(self, other: PexFlags) -> PexFlags {
        PexFlags(self.0 | other.0)
    }
}

/// One peer in an `added` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PexPeer {
    /// Its address.
    pub addr: SocketAddr,
    /// Its flags.
    pub flags: PexFlags,
}

/// A ut_pex message; IPv4 and IPv6 addresses together (the codec splits
/// them into their lists).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PexMessage {
    /// Peers the sender connected to since its last message.
    pub added: Vec<PexPeer>,
    /// Peers it disconnected from.
    pub dropped: Vec<SocketAddr>,
}

/// A decoded message and what was cut from it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The message, each list at most the limit.
    pub msg: PexMessage,
    /// Addresses dropped beyond the per-list limit.
    pub truncated: usize,
    /// Things not as BEP 11 says that were tolerated (a flags string of the
    /// wrong length, port 0 or unspecified/multicast addresses skipped).
    pub violations: u32,
}

/// A malformed ut_pex message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PexError {
    /// Not valid bencode, or not a dictionary.
    #[error("ut_pex: bad bencode: {0}")]
    Bencode(String),
    /// A list key that is not a byte string.
    #[error("ut_pex: `{0}` is not a byte string")]
    Type(&'static str),
    /// A compact list whose length is not a multiple of 6 (IPv4) or 18
    /// (IPv6).
    #[error("ut_pex: `{key}` has {len} bytes, not a multiple of {unit}")]
    CompactLength {
        /// The key.
        key: &'static str,
        /// Its length.
        len: usize,
        /// 6 or 18.
        unit: usize,
    },
}

impl PexMessage {
    /// Encodes the payload. Lists longer than [`MAX_PER_LIST`] per family
    /// are cut (callers normally never build such a message:
    /// [`PexState`] does not).
    pub fn encode(&self) -> Vec<u8> {
        let mut v4 = Vec::new();
        let mut f4 = Vec::new();
        let mut v6 = Vec::new();
        let mut f6 = Vec::new();
        for p in &self.added {
            match p.addr {
                SocketAddr::V4(a) if f4.len() < MAX_PER_LIST => {
                    put_v4(&mut v4, a);
                    f4.push(p.flags.0);
                }
                SocketAddr::V6(a) if f6.len() < MAX_PER_LIST => {
                    put_v6(&mut v6, a);
                    f6.push(p.flags.0);
                }
                _ => {}
            }
        }
        let (mut d4, mut d6) = (Vec::new(), Vec::new());
        let (mut n4, mut n6) = (0, 0);
        for a in &self.dropped {
            match a {
                SocketAddr::V4(a) if n4 < MAX_PER_LIST => {
                    put_v4(&mut d4, *a);
                    n4 += 1;
                }
                SocketAddr::V6(a) if n6 < MAX_PER_LIST => {
                    put_v6(&mut d6, *a);
                    n6 += 1;
                }
                _ => {}
            }
        }
        let mut d = OwnedValue::dict();
        d.insert("added", OwnedValue::Bytes(v4));
        d.insert("added.f", OwnedValue::Bytes(f4));
        d.insert("added6", OwnedValue::Bytes(v6));
        d.insert("added6.f", OwnedValue::Bytes(f6));
        d.insert("dropped", OwnedValue::Bytes(d4));
        d.insert("dropped6", OwnedValue::Bytes(d6));
        d.to_vec()
    }

    /// Decodes a payload (fuzz entry point: any bytes, never panics),
    /// keeping at most `max_per_list` addresses per list.
    pub fn decode(payload: &[u8], max_per_list: usize) -> Result<Decoded, PexError> {
        let lim = weir_bencode::Limits {
            max_depth: 4,
            max_input: payload.len(),
        };
        let v = weir_bencode::decode_with(payload, &lim)
            .map_err(|e| PexError::Bencode(e.to_string()))?;
        let d = v
            .as_dict()
            .ok_or(PexError::Bencode("not a dictionary".into()))?;
        let bytes = |k: &'static str| -> Result<&[u8], PexError> {
            match d.get(k.as_bytes()) {
                None => Ok(&[]),
                Some(Value::Bytes(b)) => Ok(b),
                Some(_) => Err(PexError::Type(k)),
            }
        };
        let mut out = Decoded::default();
        for (key, fkey, unit) in [("added", "added.f", 6), ("added6", "added6.f", 18)] {
            let list = bytes(key)?;
            check_len(key, list, unit)?;
            let flags = bytes(fkey)?;
            let n = list.len() / unit;
            let use_flags = flags.len() == n;
            if !use_flags && !flags.is_empty() {
                out.violations += 1;
            }
            out.truncated += n.saturating_sub(max_per_list);
            for (i, c) in list.chunks_exact(unit).take(max_per_list).enumerate() {
                let addr = compact(c);
                if !plausible(&addr) {
                    out.violations += 1;
                    continue;
                }
                let f = if use_flags { flags[i] } else { 0 };
                out.msg.added.push(PexPeer {
                    addr,
                    flags: PexFlags(f),
                });
            }
        }
        for (key, unit) in [("dropped", 6), ("dropped6", 18)] {
            let list = bytes(key)?;
            check_len(key, list, unit)?;
            let n = list.len() / unit;
            out.truncated += n.saturating_sub(max_per_list);
            for c in list.chunks_exact(unit).take(max_per_list) {
                out.msg.dropped.push(compact(c));
            }
        }
        Ok(out)
    }
}

fn check_len(key: &'static str, list: &[u8], unit: usize) -> Result<(), PexError> {
    if list.len() % unit != 0 {
        return Err(PexError::CompactLength {
            key,
            len: list.len(),
            unit,
        });
    }
    Ok(())
}

fn put_v4(out: &mut Vec<u8>, a: SocketAddrV4) {
    out.extend_from_slice(&a.ip().octets());
    out.extend_from_slice(&a.port().to_be_bytes());
}

fn put_v6(out: &mut Vec<u8>, a: SocketAddrV6) {
    out.extend_from_slice(&a.ip().octets());
    out.extend_from_slice(&a.port().to_be_bytes());
}

/// A compact address: 4 or 16 address bytes, then the port big-endian.
fn compact(c: &[u8]) -> SocketAddr {
    let n = c.len() - 2;
    let port = u16::from_be_bytes([c[n], c[n + 1]]);
    let ip = match n {
        4 => IpAddr::V4(Ipv4Addr::new(c[0], c[1], c[2], c[3])),
        _ => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&c[..16]);
            IpAddr::V6(Ipv6Addr::from(b))
        }
    };
    SocketAddr::new(ip, port)
}

/// Whether an address could be a peer at all (the session's policy decides
/// whether it may be dialled).
fn plausible(a: &SocketAddr) -> bool {
    let ip = a.ip();
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    a.port() != 0 && !ip.is_unspecified() && !ip.is_multicast() && !broadcast
}

/// The whole wire frame of `msg` for a peer that wants ut_pex on `ext_id`.
pub fn frame(ext_id: u8, msg: &PexMessage) -> Bytes {
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

/// Tunables of one connection's PEX.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PexConfig {
    /// Least time between two messages we send (BEP 11: one a minute).
    pub interval: Duration,
    /// Messages from the peer sooner than this after its previous one are
    /// ignored and counted (a little under a minute, for timer slack).
    pub min_receive_interval: Duration,
    /// Addresses per list we accept in one message.
    pub max_per_list: usize,
    /// New addresses learnt from this peer at once (token bucket size).
    pub learn_burst: f64,
    /// New addresses learnt from this peer per minute, sustained.
    pub learn_per_minute: f64,
    /// Addresses remembered as already learnt from this peer (older ones
    /// are forgotten first).
    pub remember: usize,
}

impl Default for PexConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            min_receive_interval: Duration::from_secs(45),
            max_per_list: MAX_PER_LIST,
            learn_burst: 100.0,
            learn_per_minute: 50.0,
            remember: 1000,
        }
    }
}

/// What one received message taught.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PexReceived {
    /// New peers to consider (after the session's policy check).
    pub added: Vec<PexPeer>,
    /// Peers the sender dropped (information only).
    pub dropped: Vec<SocketAddr>,
    /// Addresses discarded by the learning rate limit.
    pub capped: usize,
    /// Addresses beyond the per-list limit.
    pub truncated: usize,
    /// The whole message was ignored: it came too soon after the previous.
    pub too_soon: bool,
}

/// Counters for one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PexStats {
    /// Messages sent.
    pub sent: u64,
    /// Messages received and used.
    pub received: u64,
    /// Violations: messages too soon, lists over the limit, malformed
    /// flags, implausible addresses.
    pub violations: u64,
    /// Addresses learnt (reported in `added`).
    pub learnt: u64,
    /// Addresses discarded by the rate limit.
    pub capped: u64,
}

/// PEX for one connection. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct PexState {
    cfg: PexConfig,
    /// What the peer has been told is connected (with the flags told).
    told: BTreeMap<SocketAddr, PexFlags>,
    next_send: Instant,
    /// The last check found nothing to say: no timer until the peer set
    /// changes (the caller then calls `poll_message` again).
    idle: bool,
    last_received: Option<Instant>,
    tokens: f64,
    refilled: Instant,
    known: BTreeSet<SocketAddr>,
    known_order: VecDeque<SocketAddr>,
    stats: PexStats,
}

impl PexState {
    /// PEX for a connection that negotiated it at `now`; the first message
    /// may go at once.
    pub fn new(cfg: PexConfig, now: Instant) -> Self {
        Self {
            tokens: cfg.learn_burst,
            cfg,
            told: BTreeMap::new(),
            next_send: now,
            idle: false,
            last_received: None,
            refilled: now,
            known: BTreeSet::new(),
            known_order: VecDeque::new(),
            stats: PexStats::default(),
        }
    }

    /// When to call [`PexState::poll_message`] next: the time the next
    /// message may go, or `None` when the last call found nothing to say
    /// (call it again when the session's peers change).
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!self.idle).then_some(self.next_send)
    }

    /// The message to send now, if one is due and something changed:
    /// `current` is the session's connected peers (without this one) and
    /// their flags. What does not fit in one message (50 per list) goes in
    /// the next.
    pub fn poll_message(
        &mut self,
        now: Instant,
        current: &BTreeMap<SocketAddr, PexFlags>,
    ) -> Option<PexMessage> {
        if now < self.next_send {
            // Something may have changed: look again when allowed.
            self.idle = false;
            return None;
        }
        let mut msg = PexMessage::default();
        let (mut a4, mut a6, mut d4, mut d6) = (0, 0, 0, 0);
        for (addr, flags) in current {
            if self.told.get(addr) == Some(flags) {
                continue;
            }
            let n = if addr.is_ipv4() { &mut a4 } else { &mut a6 };
            if *n < MAX_PER_LIST {
                *n += 1;
                msg.added.push(PexPeer {
                    addr: *addr,
                    flags: *flags,
                });
            }
        }
        for addr in self.told.keys() {
            if current.contains_key(addr) {
                continue;
            }
            let n = if addr.is_ipv4() { &mut d4 } else { &mut d6 };
            if *n < MAX_PER_LIST {
                *n += 1;
                msg.dropped.push(*addr);
            }
        }
        if msg.added.is_empty() && msg.dropped.is_empty() {
            self.idle = true;
            return None;
        }
        self.idle = false;
        for p in &msg.added {
            self.told.insert(p.addr, p.flags);
        }
        for a in &msg.dropped {
            self.told.remove(a);
        }
        self.next_send = now + self.cfg.interval;
        self.stats.sent += 1;
        Some(msg)
    }

    /// A ut_pex payload from the peer. Malformed payloads are errors (the
    /// caller may drop the peer); floods are capped and counted.
    pub fn handle_message(
        &mut self,
        payload: &[u8],
        now: Instant,
    ) -> Result<PexReceived, PexError> {
        let decoded = PexMessage::decode(payload, self.cfg.max_per_list)?;
        let mut out = PexReceived {
            truncated: decoded.truncated,
            ..PexReceived::default()
        };
        if let Some(last) = self.last_received {
            if now.saturating_duration_since(last) < self.cfg.min_receive_interval {
                self.stats.violations += 1;
                out.too_soon = true;
                out.truncated = 0;
                return Ok(out);
            }
        }
        self.last_received = Some(now);
        self.stats.received += 1;
        self.stats.violations += u64::from(decoded.violations) + u64::from(decoded.truncated > 0);
        let minutes = now.saturating_duration_since(self.refilled).as_secs_f64() / 60.0;
        self.refilled = now;
        self.tokens = (self.tokens + minutes * self.cfg.learn_per_minute).min(self.cfg.learn_burst);
        // One message may name an address twice; `known` alone does not
        // catch that when it remembers fewer addresses than a list holds.
        let mut this = BTreeSet::new();
        for p in decoded.msg.added {
            if !this.insert(p.addr) || self.known.contains(&p.addr) {
                continue;
            }
            if self.tokens < 1.0 {
                out.capped += 1;
                continue;
            }
            self.tokens -= 1.0;
            self.remember(p.addr);
            out.added.push(p);
        }
        for a in decoded.msg.dropped {
            if self.known.remove(&a) {
                self.known_order.retain(|k| *k != a);
            }
            out.dropped.push(a);
        }
        self.stats.learnt += out.added.len() as u64;
        self.stats.capped += out.capped as u64;
        Ok(out)
    }

    /// Counters.
    pub fn stats(&self) -> PexStats {
        self.stats
    }

    fn remember(&mut self, a: SocketAddr) {
        if self.known.insert(a) {
            self.known_order.push_back(a);
        }
        while self.known_order.len() > self.cfg.remember {
            if let Some(old) = self.known_order.pop_front() {
                self.known.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests;
