//! The BEP 14 announce: HTTP-like text in one UDP datagram.
//!
//! ```text
//! BT-SEARCH * HTTP/1.1\r\n
//! Host: 239.192.152.143:6771\r\n
//! Port: 6881\r\n
//! Infohash: <40 hex digits>\r\n      (one or more, consecutive)
//! cookie: <opaque, optional>\r\n
//! \r\n
//! \r\n
//! ```
//!
//! Decoding: header names are case-insensitive, lines may end in `\n`
//! alone, unknown headers are ignored (as HTTP requires), whitespace
//! around values is trimmed. A datagram larger than [`MAX_MESSAGE`], a
//! request line other than `BT-SEARCH * HTTP/1.1`, a missing or bad `Port`,
//! no valid `Infohash`, or more than [`MAX_INFOHASHES`] of them is an
//! error.

use crate::id::InfoHash;

/// Largest announce sent or accepted (BEP 14: stay under 1400 bytes).
pub const MAX_MESSAGE: usize = 1400;
/// Most info-hashes accepted in one announce: as many as 1400 bytes hold
/// in the form this crate sends (26).
pub const MAX_INFOHASHES: usize = 26;
/// Longest cookie kept.
pub const MAX_COOKIE: usize = 64;

const REQUEST_LINE: &str = "BT-SEARCH * HTTP/1.1";

/// One LSD announce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announce {
    /// The `Host` header (the multicast group, as text).
    pub host: String,
    /// The sender's BitTorrent port.
    pub port: u16,
    /// The torrents announced.
    pub info_hashes: Vec<InfoHash>,
    /// The sender's cookie (to recognise its own announces looped back).
    pub cookie: Option<String>,
}

/// Why a datagram is not an LSD announce.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LsdError {
    /// Larger than [`MAX_MESSAGE`].
    #[error("LSD datagram of {0} bytes is too large")]
    TooLarge(usize),
    /// Not text.
    #[error("LSD datagram is not UTF-8 text")]
    NotText,
    /// The first line is not `BT-SEARCH * HTTP/1.1`.
    #[error("not a BT-SEARCH request")]
    BadRequestLine,
    /// A header line without a colon.
    #[error("malformed LSD header line")]
    BadHeader,
    /// A required header is missing.
    #[error("LSD announce without `{0}`")]
    Missing(&'static str),
    /// `Port` is not 1..=65535, or appears twice.
    #[error("bad LSD port")]
    BadPort,
    /// An `Infohash` that is not 40 hex digits.
    #[error("bad LSD infohash")]
    BadInfohash,
    /// More than [`MAX_INFOHASHES`] info-hashes.
    #[error("too many infohashes in one LSD announce")]
    TooManyInfohashes,
}

/// Lower-case hex of an info-hash.
pub(crate) fn to_hex(ih: &InfoHash) -> String {
    ih.to_string()
}

fn from_hex(s: &str) -> Option<InfoHash> {
    let b = s.as_bytes();
    if b.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, o) in out.iter_mut().enumerate() {
        let hi = (b[2 * i] as char).to_digit(16)?;
        let lo = (b[2 * i + 1] as char).to_digit(16)?;
        *o = (hi * 16 + lo) as u8;
    }
    Some(InfoHash::from(out))
}

impl Announce {
    /// Bytes one announce takes without its info-hashes, at most (a port
    /// of 5 digits).
    pub(crate) fn overhead(host: &str, cookie: Option<&str>) -> usize {
        let request = REQUEST_LINE.len() + 2;
        let host = "Host: ".len() + host.len() + 2;
        let port = "Port: ".len() + 5 + 2;
        let cookie = cookie.map_or(0, |c| "cookie: ".len() + c.len() + 2);
        request + host + port + cookie + 4
    }

    /// Bytes each info-hash adds.
    pub(crate) const PER_HASH: usize = 10 + 40 + 2;

    /// The datagram.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::with_capacity(
            Self::overhead(&self.host, self.cookie.as_deref())
                + self.info_hashes.len() * Self::PER_HASH,
        );
        s.push_str(REQUEST_LINE);
        s.push_str("\r\nHost: ");
        s.push_str(&self.host);
        s.push_str("\r\nPort: ");
        s.push_str(&self.port.to_string());
        s.push_str("\r\n");
        for ih in &self.info_hashes {
            s.push_str("Infohash: ");
            s.push_str(&to_hex(ih));
            s.push_str("\r\n");
        }
        if let Some(c) = &self.cookie {
            s.push_str("cookie: ");
            s.push_str(c);
            s.push_str("\r\n");
        }
        s.push_str("\r\n\r\n");
        s.into_bytes()
    }

    /// Reads one announce.
    pub fn decode(data: &[u8]) -> Result<Announce, LsdError> {
        if data.len() > MAX_MESSAGE {
            return Err(LsdError::TooLarge(data.len()));
        }
        let text = std::str::from_utf8(data).map_err(|_| LsdError::NotText)?;
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        if lines.next().map(str::trim) != Some(REQUEST_LINE) {
            return Err(LsdError::BadRequestLine);
        }
        let mut host = None;
        let mut port = None;
        let mut info_hashes = Vec::new();
        let mut cookie = None;
        for line in lines {
            if line.trim().is_empty() {
                // End of the headers.
                break;
            }
            let (name, value) = line.split_once(':').ok_or(LsdError::BadHeader)?;
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "host" => host = Some(value.to_string()),
                "port" => {
                    let p: u16 = value.parse().map_err(|_| LsdError::BadPort)?;
                    if p == 0 || port.is_some() {
                        return Err(LsdError::BadPort);
                    }
                    port = Some(p);
                }
                "infohash" => {
                    if info_hashes.len() >= MAX_INFOHASHES {
                        return Err(LsdError::TooManyInfohashes);
                    }
                    info_hashes.push(from_hex(value).ok_or(LsdError::BadInfohash)?);
                }
                "cookie" => {
                    cookie = Some(value.chars().take(MAX_COOKIE).collect());
                }
                _ => {}
            }
        }
        let port = port.ok_or(LsdError::Missing("Port"))?;
        if info_hashes.is_empty() {
            return Err(LsdError::Missing("Infohash"));
        }
        Ok(Announce {
            host: host.unwrap_or_default(),
            port,
            info_hashes,
            cookie,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ih(b: u8) -> InfoHash {
        InfoHash::from([b; 20])
    }

    #[test]
    fn encodes_the_bep14_form() {
        let a = Announce {
            host: "239.192.152.143:6771".into(),
            port: 6881,
            info_hashes: vec![ih(0xab), ih(0x01)],
            cookie: Some("w1a2".into()),
        };
        let text = String::from_utf8(a.encode()).unwrap();
        assert_eq!(
            text,
            format!(
                "BT-SEARCH * HTTP/1.1\r\nHost: 239.192.152.143:6771\r\nPort: 6881\r\nInfohash: {}\r\nInfohash: {}\r\ncookie: w1a2\r\n\r\n\r\n",
                "ab".repeat(20),
                "01".repeat(20)
            )
        );
        assert_eq!(Announce::decode(text.as_bytes()).unwrap(), a);
        // "6881" is one digit short of the 5 the bound allows.
        assert_eq!(
            text.len() + 1,
            Announce::overhead(&a.host, a.cookie.as_deref()) + 2 * Announce::PER_HASH
        );
    }

    #[test]
    fn lenient_where_http_is() {
        // Other clients' spelling: bare \n, other case, extra headers and
        // spaces, upper-case hex, no cookie, no host.
        let text = format!(
            "BT-SEARCH * HTTP/1.1\nPORT:  51413 \nX-Extra: 1\ninfohash: {}\n\n",
            "AB".repeat(20)
        );
        let a = Announce::decode(text.as_bytes()).unwrap();
        assert_eq!(a.port, 51413);
        assert_eq!(a.info_hashes, vec![ih(0xab)]);
        assert_eq!(a.cookie, None);
        assert_eq!(a.host, "");
    }

    #[test]
    fn typed_errors() {
        let ok_hash = "00".repeat(20);
        let cases: Vec<(Vec<u8>, LsdError)> = vec![
            (vec![b'a'; 1401], LsdError::TooLarge(1401)),
            (vec![0xff, 0xfe], LsdError::NotText),
            (
                b"M-SEARCH * HTTP/1.1\r\n\r\n".to_vec(),
                LsdError::BadRequestLine,
            ),
            (
                b"BT-SEARCH * HTTP/1.1\r\nnocolon\r\n\r\n".to_vec(),
                LsdError::BadHeader,
            ),
            (
                format!("BT-SEARCH * HTTP/1.1\r\nInfohash: {ok_hash}\r\n\r\n").into_bytes(),
                LsdError::Missing("Port"),
            ),
            (
                b"BT-SEARCH * HTTP/1.1\r\nPort: 1\r\n\r\n".to_vec(),
                LsdError::Missing("Infohash"),
            ),
            (
                format!("BT-SEARCH * HTTP/1.1\r\nPort: 0\r\nInfohash: {ok_hash}\r\n\r\n")
                    .into_bytes(),
                LsdError::BadPort,
            ),
            (
                format!("BT-SEARCH * HTTP/1.1\r\nPort: 70000\r\nInfohash: {ok_hash}\r\n\r\n")
                    .into_bytes(),
                LsdError::BadPort,
            ),
            (
                format!(
                    "BT-SEARCH * HTTP/1.1\r\nPort: 1\r\nPort: 2\r\nInfohash: {ok_hash}\r\n\r\n"
                )
                .into_bytes(),
                LsdError::BadPort,
            ),
            (
                b"BT-SEARCH * HTTP/1.1\r\nPort: 1\r\nInfohash: xyz\r\n\r\n".to_vec(),
                LsdError::BadInfohash,
            ),
            (
                format!(
                    "BT-SEARCH * HTTP/1.1\r\nPort: 1\r\nInfohash: {}\r\n\r\n",
                    "g".repeat(40)
                )
                .into_bytes(),
                LsdError::BadInfohash,
            ),
        ];
        for (data, want) in cases {
            assert_eq!(Announce::decode(&data), Err(want.clone()), "{want:?}");
        }
        // 27 hashes in the tersest spelling still fit 1400 bytes.
        let mut many = String::from("BT-SEARCH * HTTP/1.1\nPort:1\n");
        for _ in 0..27 {
            many.push_str("infohash:");
            many.push_str(&"1".repeat(40));
            many.push('\n');
        }
        many.push('\n');
        assert!(many.len() <= MAX_MESSAGE);
        assert_eq!(
            Announce::decode(many.as_bytes()),
            Err(LsdError::TooManyInfohashes)
        );
    }

    proptest! {
        #[test]
        fn round_trip(
            port in 1u16..,
            hashes in proptest::collection::vec(any::<[u8; 20]>(), 1..=MAX_INFOHASHES.min(20)),
            cookie in proptest::option::of("[a-zA-Z0-9]{1,16}"),
        ) {
            let a = Announce {
                host: "239.192.152.143:6771".into(),
                port,
                info_hashes: hashes.into_iter().map(InfoHash::from).collect(),
                cookie,
            };
            prop_assert_eq!(Announce::decode(&a.encode()).unwrap(), a);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let _ = Announce::decode(&data);
        }

        #[test]
        fn arbitrary_text_never_panics(s in "(BT-SEARCH \\* HTTP/1.1\r\n)?([A-Za-z]{0,8}:? ?[0-9a-fA-F]{0,42}\r?\n){0,40}") {
            let _ = Announce::decode(s.as_bytes());
        }
    }
}
