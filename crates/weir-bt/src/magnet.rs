//! Magnet URIs: `magnet:?xt=urn:btih:...&dn=...&tr=...`.
//!
//! [`Magnet::parse`] reads what BitTorrent and eD2k clients put in them:
//!
//! - `xt` (also `xt.1`, `xt.2`, ...): `urn:btih:` (40 hex digits or 32
//!   base32 characters, BEP 9), `urn:btmh:` (a BitTorrent v2 multihash,
//!   `1220` + 64 hex digits, BEP 52: recognised and kept; a magnet with
//!   only a v2 hash is refused with [`MagnetError::V2Only`] because weir
//!   speaks v1), `urn:ed2k:` / `urn:ed2khash:` (32 hex digits: with `xl`
//!   and `dn` it names an eD2k file, [`Magnet::ed2k_file`]). Other URNs
//!   (`urn:sha1:`, `urn:tree:tiger:`...) are ignored. The same `xt` twice
//!   is fine; two different hashes of one kind are
//!   [`MagnetError::ConflictingXt`].
//! - `dn` (display name), `xl` (exact length), `tr` (trackers: `http`,
//!   `https`, `udp`; `ws`/`wss` WebTorrent trackers are kept apart in
//!   [`Magnet::unsupported_trackers`]), `x.pe` (peers: `ip:port`,
//!   `[ipv6]:port`, or `host:port` kept as an unresolved name for the
//!   runtime to check against its policy), `so` (BEP 53 file selection:
//!   `0,2,4-6`), `ws` (web seeds, kept but unused). Unknown parameters are
//!   ignored.
//!
//! Values are percent-decoded (in `dn` a `+` is a space, as browsers
//! write it; in tracker and web seed URLs it stays a `+`);
//! `%` not followed by two hex digits is an error. Everything is bounded
//! (URI length, parameter count, trackers, peers, ranges) and every error
//! names the parameter and what is wrong with it. [`Magnet::to_uri`]
//! writes a magnet that parses back to the same value.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

/// Longest magnet URI accepted (bytes).
pub const MAX_URI_LEN: usize = 64 * 1024;
/// Most `&`-separated parameters.
pub const MAX_PARAMS: usize = 2048;
/// Most trackers (`tr`), counting unsupported ones.
pub const MAX_TRACKERS: usize = 256;
/// Most peers (`x.pe`).
pub const MAX_PEERS: usize = 1024;
/// Most web seeds (`ws`).
pub const MAX_WEB_SEEDS: usize = 64;
/// Most ranges in `so`.
pub const MAX_SELECT_RANGES: usize = 1024;
/// Longest decoded value of one parameter (bytes).
pub const MAX_VALUE_LEN: usize = 4096;

/// A parsed magnet link.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Magnet {
    /// BitTorrent v1 info-hash (`xt=urn:btih:`).
    pub info_hash: Option<[u8; 20]>,
    /// BitTorrent v2 info-hash (SHA-256, from `xt=urn:btmh:1220...`); kept
    /// for hybrid torrents, unused by weir's v1 engine.
    pub info_hash_v2: Option<[u8; 32]>,
    /// eD2k file hash (MD4, `xt=urn:ed2k:`).
    pub ed2k: Option<[u8; 16]>,
    /// Display name (`dn`), a suggestion only (never a path).
    pub name: Option<String>,
    /// Exact length in bytes (`xl`).
    pub length: Option<u64>,
    /// Tracker URLs (`tr`) with a supported scheme, in order, duplicates
    /// dropped.
    pub trackers: Vec<String>,
    /// `tr` values with a well-formed but unsupported scheme (`ws`, `wss`).
    pub unsupported_trackers: Vec<String>,
    /// Peers to dial (`x.pe`), duplicates dropped.
    pub peers: Vec<PeerAddr>,
    /// BEP 53 file selection (`so`).
    pub select: Option<FileSelection>,
    /// Web seeds (`ws`), kept as given; weir does not use them yet.
    pub web_seeds: Vec<String>,
}

/// A peer from `x.pe`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PeerAddr {
    /// A literal address.
    Ip(SocketAddr),
    /// A host name, not resolved here: the runtime resolves it only when
    /// its network policy allows every address it resolves to.
    Name {
        /// The host name (letters, digits, `-`, `.`; lower-cased).
        host: String,
        /// The port.
        port: u16,
    },
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Ip(a) => write!(f, "{a}"),
            PeerAddr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// BEP 53 `so`: file indices to download, as inclusive ranges in the order
/// given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSelection {
    ranges: Vec<(u32, u32)>,
}

impl FileSelection {
    /// A selection of inclusive `(first, last)` ranges; `None` if a range
    /// is reversed, there are none, or more than [`MAX_SELECT_RANGES`].
    pub fn new(ranges: Vec<(u32, u32)>) -> Option<Self> {
        let ok = !ranges.is_empty()
            && ranges.len() <= MAX_SELECT_RANGES
            && ranges.iter().all(|(a, b)| a <= b);
        ok.then_some(Self { ranges })
    }

    /// Reads a selection as BEP 53 writes it (`0,2,4-6`: file indices
    /// from 0, inclusive ranges), as in `so=` or `weir get --files`.
    pub fn parse(v: &str) -> Result<Self> {
        parse_select(v)
    }

    /// One flag per file of a torrent with `files` files, and the indices
    /// given past its last file (BEP 53 says to ignore them; callers say
    /// so).
    pub fn flags(&self, files: usize) -> (Vec<bool>, Vec<(u32, u32)>) {
        let mut flags = vec![false; files];
        let mut past = Vec::new();
        for &(a, b) in &self.ranges {
            for i in a..=b.min(u32::try_from(files).unwrap_or(u32::MAX).saturating_sub(1)) {
                if let Some(f) = flags.get_mut(i as usize) {
                    *f = true;
                }
            }
            if files == 0 || b as usize >= files {
                past.push(((a as usize).max(files) as u32, b));
            }
        }
        (flags, past)
    }

    /// The ranges.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }

    /// Whether file `index` is selected.
    pub fn contains(&self, index: u32) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&index))
    }
}

impl std::fmt::Display for FileSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (a, b)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

/// An eD2k file named by a magnet: hash, size and (optional) name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ed2kFile {
    /// MD4 file hash.
    pub hash: [u8; 16],
    /// Size in bytes.
    pub size: u64,
    /// Name, if the magnet gives one.
    pub name: Option<String>,
}

/// What is wrong with a magnet URI. Each message starts with `magnet:` and
/// names the parameter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MagnetError {
    /// The text does not start with `magnet:?`.
    #[error("magnet: does not start with `magnet:?`")]
    NotMagnet,
    /// The URI is not UTF-8 (from [`Magnet::parse_bytes`]).
    #[error("magnet: not valid UTF-8")]
    NotUtf8,
    /// Longer than [`MAX_URI_LEN`].
    #[error("magnet: URI of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Too many of something.
    #[error("magnet: more than {max} {what}")]
    TooMany {
        /// `parameters`, `tr`, `x.pe`, `ws` or `so ranges`.
        what: &'static str,
        /// The limit.
        max: usize,
    },
    /// A bad percent escape.
    #[error("magnet: {param}= has a bad percent escape at byte {at}")]
    BadEscape {
        /// The parameter.
        param: String,
        /// Offset in the raw value.
        at: usize,
    },
    /// A decoded value longer than [`MAX_VALUE_LEN`] or not UTF-8.
    #[error("magnet: {param}= {reason}")]
    BadValue {
        /// The parameter.
        param: String,
        /// What is wrong.
        reason: String,
    },
    /// No `xt` with a hash weir can use (btih, btmh or ed2k).
    #[error("magnet: no xt=urn:btih: (or urn:ed2k:) exact topic")]
    MissingXt,
    /// Only a v2 info-hash.
    #[error(
        "magnet: only a BitTorrent v2 info-hash (xt=urn:btmh:) is given; weir supports v1 (urn:btih:) torrents"
    )]
    V2Only,
    /// A hash of the wrong length.
    #[error("magnet: xt={urn} has {len} {unit}, expected {expected}")]
    HashLength {
        /// `urn:btih:`, `urn:btmh:` or `urn:ed2k:`.
        urn: &'static str,
        /// Characters found.
        len: usize,
        /// `hex digits` or `characters`.
        unit: &'static str,
        /// What it should be.
        expected: &'static str,
    },
    /// A character that is not a digit of the encoding.
    #[error("magnet: xt={urn} has {ch:?} at position {at}, which is not {encoding}")]
    HashChar {
        /// The URN prefix.
        urn: &'static str,
        /// The character.
        ch: char,
        /// Its position in the hash.
        at: usize,
        /// `hex` or `base32`.
        encoding: &'static str,
    },
    /// A btmh multihash that is not SHA-256 (`1220...`).
    #[error("magnet: xt=urn:btmh: multihash does not start with 1220 (sha2-256, 32 bytes)")]
    BadMultihash,
    /// Two different hashes of the same kind.
    #[error("magnet: two different xt=urn:{kind}: hashes")]
    ConflictingXt {
        /// `btih`, `btmh` or `ed2k`.
        kind: &'static str,
    },
    /// Two different values of a single-valued parameter.
    #[error("magnet: two different {param}= values")]
    Conflicting {
        /// `xl`.
        param: &'static str,
    },
    /// A malformed tracker URL or one with an unknown scheme.
    #[error("magnet: tr={url:?}: {reason}")]
    BadTracker {
        /// The decoded URL.
        url: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A malformed `x.pe` peer.
    #[error("magnet: x.pe={value:?}: {reason}")]
    BadPeer {
        /// The decoded value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A malformed `so`.
    #[error("magnet: so={value:?}: {reason}")]
    BadSelect {
        /// The decoded value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A malformed `xl`.
    #[error("magnet: xl={0:?} is not a length in bytes")]
    BadLength(String),
}

type Result<T> = std::result::Result<T, MagnetError>;

impl Magnet {
    /// A magnet for one v1 info-hash.
    pub fn new(info_hash: [u8; 20]) -> Self {
        Self {
            info_hash: Some(info_hash),
            ..Self::default()
        }
    }

    /// Parses raw bytes (fuzz entry point: any input, never panics).
    pub fn parse_bytes(b: &[u8]) -> Result<Magnet> {
        Magnet::parse(std::str::from_utf8(b).map_err(|_| MagnetError::NotUtf8)?)
    }

    /// Parses a magnet URI. See the module docs for what is accepted.
    pub fn parse(uri: &str) -> Result<Magnet> {
        if uri.len() > MAX_URI_LEN {
            return Err(MagnetError::TooLong {
                len: uri.len(),
                max: MAX_URI_LEN,
            });
        }
        let uri = uri.trim();
        let query = match uri.get(..8) {
            Some(p) if p.eq_ignore_ascii_case("magnet:?") => &uri[8..],
            _ => return Err(MagnetError::NotMagnet),
        };
        let mut m = Magnet::default();
        let mut params = 0usize;
        for part in query.split('&') {
            if part.is_empty() {
                continue;
            }
            params += 1;
            if params > MAX_PARAMS {
                return Err(MagnetError::TooMany {
                    what: "parameters",
                    max: MAX_PARAMS,
                });
            }
            let (key, raw) = part.split_once('=').unwrap_or((part, ""));
            let key = key.to_ascii_lowercase();
            let base = match key.split_once('.') {
                Some(("xt", n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => "xt",
                _ => key.as_str(),
            };
            match base {
                "xt" => {
                    let v = decode(&key, raw)?;
                    m.add_xt(&v)?;
                }
                "dn" => {
                    let v = decode(&key, raw)?;
                    if m.name.is_none() && !v.is_empty() {
                        m.name = Some(v);
                    }
                }
                "xl" => {
                    let v = decode(&key, raw)?;
                    let n: u64 = v
                        .parse()
                        .ok()
                        .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
                        .ok_or_else(|| MagnetError::BadLength(v.clone()))?;
                    match m.length {
                        Some(old) if old != n => {
                            return Err(MagnetError::Conflicting { param: "xl" });
                        }
                        _ => m.length = Some(n),
                    }
                }
                "tr" => {
                    let v = decode(&key, raw)?;
                    m.add_tracker(v)?;
                }
                "x.pe" => {
                    let v = decode(&key, raw)?;
                    let p = parse_peer(&v)?;
                    if !m.peers.contains(&p) {
                        if m.peers.len() == MAX_PEERS {
                            return Err(MagnetError::TooMany {
                                what: "x.pe",
                                max: MAX_PEERS,
                            });
                        }
                        m.peers.push(p);
                    }
                }
                "so" => {
                    let v = decode(&key, raw)?;
                    let sel = parse_select(&v)?;
                    m.select = Some(match m.select.take() {
                        None => sel,
                        Some(mut old) => {
                            old.ranges.extend(sel.ranges);
                            if old.ranges.len() > MAX_SELECT_RANGES {
                                return Err(MagnetError::TooMany {
                                    what: "so ranges",
                                    max: MAX_SELECT_RANGES,
                                });
                            }
                            old
                        }
                    });
                }
                "ws" => {
                    let v = decode(&key, raw)?;
                    if !m.web_seeds.contains(&v) {
                        if m.web_seeds.len() == MAX_WEB_SEEDS {
                            return Err(MagnetError::TooMany {
                                what: "ws",
                                max: MAX_WEB_SEEDS,
                            });
                        }
                        m.web_seeds.push(v);
                    }
                }
                _ => {}
            }
        }
        match (m.info_hash, m.info_hash_v2, m.ed2k) {
            (None, Some(_), None) => Err(MagnetError::V2Only),
            (None, None, None) => Err(MagnetError::MissingXt),
            _ => Ok(m),
        }
    }

    /// The magnet URI for this value; [`Magnet::parse`] reads it back
    /// unchanged. Hashes are written in lower-case hex.
    pub fn to_uri(&self) -> String {
        let mut s = String::from("magnet:?");
        let mut first = true;
        let mut push = |s: &mut String, key: &str, value: &str| {
            if !first {
                s.push('&');
            }
            first = false;
            s.push_str(key);
            s.push('=');
            encode_into(s, value);
        };
        if let Some(h) = &self.info_hash {
            push(&mut s, "xt", &format!("urn:btih:{}", hex(h)));
        }
        if let Some(h) = &self.info_hash_v2 {
            push(&mut s, "xt", &format!("urn:btmh:1220{}", hex(h)));
        }
        if let Some(h) = &self.ed2k {
            push(&mut s, "xt", &format!("urn:ed2k:{}", hex(h)));
        }
        if let Some(n) = &self.name {
            push(&mut s, "dn", n);
        }
        if let Some(l) = self.length {
            push(&mut s, "xl", &l.to_string());
        }
        for t in self.trackers.iter().chain(&self.unsupported_trackers) {
            push(&mut s, "tr", t);
        }
        for p in &self.peers {
            push(&mut s, "x.pe", &p.to_string());
        }
        if let Some(sel) = &self.select {
            push(&mut s, "so", &sel.to_string());
        }
        for w in &self.web_seeds {
            push(&mut s, "ws", w);
        }
        s
    }

    /// The eD2k file this magnet names: needs `xt=urn:ed2k:` and `xl`.
    pub fn ed2k_file(&self) -> Option<Ed2kFile> {
        Some(Ed2kFile {
            hash: self.ed2k?,
            size: self.length?,
            name: self.name.clone(),
        })
    }

    fn add_xt(&mut self, v: &str) -> Result<()> {
        let lower = v.to_ascii_lowercase();
        if let Some(h) = lower.strip_prefix("urn:btih:") {
            let h = parse_btih(&v[9..9 + h.len()])?;
            return set_once(&mut self.info_hash, h, "btih");
        }
        if let Some(h) = lower.strip_prefix("urn:btmh:") {
            let raw = hex_decode::<34>(h, "urn:btmh:", "68 hex digits (1220 + 64)")?;
            if raw[..2] != [0x12, 0x20] {
                return Err(MagnetError::BadMultihash);
            }
            let mut out = [0u8; 32];
            out.copy_from_slice(&raw[2..]);
            return set_once(&mut self.info_hash_v2, out, "btmh");
        }
        let ed2k = lower
            .strip_prefix("urn:ed2k:")
            .or_else(|| lower.strip_prefix("urn:ed2khash:"));
        if let Some(h) = ed2k {
            let h = hex_decode::<16>(h, "urn:ed2k:", "32 hex digits")?;
            return set_once(&mut self.ed2k, h, "ed2k");
        }
        Ok(())
    }

    fn add_tracker(&mut self, url: String) -> Result<()> {
        if self.trackers.len() + self.unsupported_trackers.len() >= MAX_TRACKERS {
            return Err(MagnetError::TooMany {
                what: "tr",
                max: MAX_TRACKERS,
            });
        }
        let bad = |reason| MagnetError::BadTracker {
            url: url.clone(),
            reason,
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            return Err(bad("no host"));
        }
        if url.chars().any(|c| c.is_control() || c == ' ') {
            return Err(bad("has spaces or control characters"));
        }
        let list = match scheme.as_str() {
            "http" | "https" | "udp" => &mut self.trackers,
            "ws" | "wss" => &mut self.unsupported_trackers,
            _ => return Err(bad("scheme is not http, https or udp")),
        };
        if !list.contains(&url) {
            list.push(url);
        }
        Ok(())
    }
}

fn set_once<T: PartialEq>(slot: &mut Option<T>, v: T, kind: &'static str) -> Result<()> {
    match slot {
        Some(old) if *old != v => Err(MagnetError::ConflictingXt { kind }),
        _ => {
            *slot = Some(v);
            Ok(())
        }
    }
}

/// Percent-decodes one value into UTF-8 (in `dn`, `+` is a space; in URLs
/// and addresses it stays a `+`).
fn decode(param: &str, raw: &str) -> Result<String> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = b.get(i + 1).and_then(|c| (*c as char).to_digit(16));
                let lo = b.get(i + 2).and_then(|c| (*c as char).to_digit(16));
                match (hi, lo) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => {
                        return Err(MagnetError::BadEscape {
                            param: param.to_string(),
                            at: i,
                        });
                    }
                }
                i += 3;
            }
            b'+' if param == "dn" => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
        if out.len() > MAX_VALUE_LEN {
            return Err(MagnetError::BadValue {
                param: param.to_string(),
                reason: format!("is longer than {MAX_VALUE_LEN} bytes"),
            });
        }
    }
    String::from_utf8(out).map_err(|_| MagnetError::BadValue {
        param: param.to_string(),
        reason: "is not UTF-8 after percent-decoding".into(),
    })
}

/// Percent-encodes everything but RFC 3986 unreserved characters and the
/// few that are safe in a query value (`:`, `/`, `@`, `,`, `[`, `]`).
fn encode_into(s: &mut String, v: &str) {
    for b in v.bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'.'
            | b'_'
            | b'~'
            | b':'
            | b'/'
            | b'@'
            | b','
            | b'['
            | b']' => s.push(b as char),
            _ => {
                let _ = write!(s, "%{b:02X}");
            }
        }
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn hex_decode<const N: usize>(
    h: &str,
    urn: &'static str,
    expected: &'static str,
) -> Result<[u8; N]> {
    if let Some((at, ch)) = h.chars().enumerate().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(MagnetError::HashChar {
            urn,
            ch,
            at,
            encoding: "hex",
        });
    }
    if h.len() != 2 * N {
        return Err(MagnetError::HashLength {
            urn,
            len: h.len(),
            unit: "hex digits",
            expected,
        });
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        // Checked above: 2N ASCII hex digits.
        *o = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    Ok(out)
}

fn parse_btih(h: &str) -> Result<[u8; 20]> {
    const URN: &str = "urn:btih:";
    const EXPECTED: &str = "40 hex or 32 base32";
    let n = h.chars().count();
    if n == 32 {
        return base32_decode(h);
    }
    if let Some((at, ch)) = h.chars().enumerate().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(MagnetError::HashChar {
            urn: URN,
            ch,
            at,
            encoding: "hex",
        });
    }
    if n != 40 {
        return Err(MagnetError::HashLength {
            urn: URN,
            len: n,
            unit: "hex digits",
            expected: EXPECTED,
        });
    }
    hex_decode::<20>(h, URN, EXPECTED)
}

/// RFC 4648 base32 (either case), exactly 32 characters to 20 bytes.
fn base32_decode(h: &str) -> Result<[u8; 20]> {
    let mut out = [0u8; 20];
    let mut acc: u64 = 0;
    let mut bits = 0;
    let mut o = 0;
    for (at, ch) in h.chars().enumerate() {
        let v = match ch {
            'A'..='Z' => ch as u64 - 'A' as u64,
            'a'..='z' => ch as u64 - 'a' as u64,
            '2'..='7' => ch as u64 - '2' as u64 + 26,
            _ => {
                return Err(MagnetError::HashChar {
                    urn: "urn:btih:",
                    ch,
                    at,
                    encoding: "base32",
                });
            }
        };
        acc = (acc << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out[o] = (acc >> bits) as u8;
            o += 1;
        }
    }
    Ok(out)
}

fn parse_peer(v: &str) -> Result<PeerAddr> {
    let bad = |reason| MagnetError::BadPeer {
        value: v.to_string(),
        reason,
    };
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let (h, p) = rest
            .split_once("]:")
            .ok_or_else(|| bad("expected [ipv6]:port"))?;
        let ip: std::net::Ipv6Addr = h.parse().map_err(|_| bad("not an IPv6 address"))?;
        (Some(IpAddr::V6(ip)), (h, p).1)
    } else {
        let (h, p) = v
            .rsplit_once(':')
            .ok_or_else(|| bad("expected host:port"))?;
        if h.contains(':') {
            return Err(bad("IPv6 addresses must be in brackets"));
        }
        match h.parse::<std::net::Ipv4Addr>() {
            Ok(ip) => (Some(IpAddr::V4(ip)), p),
            Err(_) => {
                let port = parse_port(p).ok_or_else(|| bad("port must be 1-65535"))?;
                let host = h.to_ascii_lowercase();
                let label_ok = |l: &str| {
                    !l.is_empty()
                        && l.len() <= 63
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                };
                let all_numeric = host.bytes().all(|b| b.is_ascii_digit() || b == b'.');
                if host.is_empty() || host.len() > 253 || all_numeric {
                    return Err(bad("not an IP address or host name"));
                }
                if !host.split('.').all(label_ok) {
                    return Err(bad("not an IP address or host name"));
                }
                return Ok(PeerAddr::Name { host, port });
            }
        }
    };
    let port = parse_port(port).ok_or_else(|| bad("port must be 1-65535"))?;
    Ok(PeerAddr::Ip(SocketAddr::new(
        host.ok_or_else(|| bad("no address"))?,
        port,
    )))
}

fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse::<u16>().ok().filter(|&n| n != 0)
}

fn parse_select(v: &str) -> Result<FileSelection> {
    let bad = |reason| MagnetError::BadSelect {
        value: v.to_string(),
        reason,
    };
    let num = |s: &str| -> Option<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let mut ranges = Vec::new();
    for item in v.split(',') {
        if ranges.len() == MAX_SELECT_RANGES {
            return Err(MagnetError::TooMany {
                what: "so ranges",
                max: MAX_SELECT_RANGES,
            });
        }
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (num(a), num(b)),
            None => (num(item), num(item)),
        };
        let (Some(a), Some(b)) = (a, b) else {
            return Err(bad("expected file indices like 0,2,4-6"));
        };
        if a > b {
            return Err(bad("a range ends before it starts"));
        }
        ranges.push((a, b));
    }
    FileSelection::new(ranges).ok_or_else(|| bad("empty"))
}

#[cfg(test)]
mod tests;
