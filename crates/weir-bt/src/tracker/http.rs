//! The HTTP tracker announce: building the GET URL and parsing the bencoded
//! response body.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use weir_bencode::{Dict, Value};

use super::{AnnounceRequest, AnnounceResponse, TrackerError};

/// Appends `bytes` percent-encoded: RFC 3986 unreserved characters stay,
/// every other byte becomes `%XX`.
pub fn percent_encode(bytes: &[u8], out: &mut String) {
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

impl AnnounceRequest {
    /// The full announce URL for the tracker at `announce`: binary fields
    /// percent-encoded, appended to an existing query string if the URL has
    /// one, any `#fragment` dropped.
    pub fn url(&self, announce: &str) -> String {
        let base = announce.split('#').next().unwrap_or(announce);
        let mut u = String::with_capacity(base.len() + 200);
        u.push_str(base);
        if !base.contains('?') {
            u.push('?');
        } else if !base.ends_with('?') && !base.ends_with('&') {
            u.push('&');
        }
        u.push_str("info_hash=");
        percent_encode(&self.info_hash, &mut u);
        u.push_str("&peer_id=");
        percent_encode(&self.peer_id, &mut u);
        let _ = write!(
            u,
            "&port={}&uploaded={}&downloaded={}&left={}&compact={}",
            self.port,
            self.uploaded,
            self.downloaded,
            self.left,
            u8::from(self.compact)
        );
        if let Some(e) = self.event {
            let _ = write!(u, "&event={}", e.as_str());
        }
        if let Some(n) = self.numwant {
            let _ = write!(u, "&numwant={n}");
        }
        if let Some(k) = self.key {
            let _ = write!(u, "&key={k:08x}");
        }
        u
    }
}

fn wrong(key: &'static str, expected: &'static str, v: &Value<'_>) -> TrackerError {
    TrackerError::WrongType {
        key,
        expected,
        found: v.type_name(),
    }
}

fn opt_u32(d: &Dict<'_>, key: &'static str) -> Result<Option<u32>, TrackerError> {
    match d.get(key.as_bytes()) {
        None => Ok(None),
        Some(v) => {
            let n = v.as_int().ok_or_else(|| wrong(key, "integer", v))?;
            u32::try_from(n)
                .map(Some)
                .map_err(|_| TrackerError::BadValue {
                    key,
                    reason: format!("{n} out of range"),
                })
        }
    }
}

fn opt_text(d: &Dict<'_>, key: &'static str) -> Result<Option<String>, TrackerError> {
    match d.get(key.as_bytes()) {
        None => Ok(None),
        Some(v) => {
            let b = v.as_bytes().ok_or_else(|| wrong(key, "byte string", v))?;
            Ok(Some(String::from_utf8_lossy(b).into_owned()))
        }
    }
}

/// Parses BEP 23 compact IPv4 peers (6 bytes each).
pub fn compact_v4(b: &[u8]) -> Result<Vec<SocketAddr>, TrackerError> {
    if b.len() % 6 != 0 {
        return Err(TrackerError::BadValue {
            key: "peers",
            reason: format!("compact length {} is not a multiple of 6", b.len()),
        });
    }
    Ok(b.chunks_exact(6)
        .map(|c| {
            let ip = Ipv4Addr::new(c[0], c[1], c[2], c[3]);
            SocketAddr::new(IpAddr::V4(ip), u16::from_be_bytes([c[4], c[5]]))
        })
        .collect())
}

/// Parses BEP 7 compact IPv6 peers (18 bytes each).
pub fn compact_v6(b: &[u8]) -> Result<Vec<SocketAddr>, TrackerError> {
    if b.len() % 18 != 0 {
        return Err(TrackerError::BadValue {
            key: "peers6",
            reason: format!("compact length {} is not a multiple of 18", b.len()),
        });
    }
    Ok(b.chunks_exact(18)
        .map(|c| {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&c[..16]);
            SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(ip)),
                u16::from_be_bytes([c[16], c[17]]),
            )
        })
        .collect())
}

/// The dictionary form of the peer list: `ip` must be an address literal
/// (a host name is dropped, never resolved), `port` 1..=65535.
fn dict_peers(list: &[Value<'_>], out: &mut Vec<SocketAddr>) -> Result<(), TrackerError> {
    for p in list {
        let d = p.as_dict().ok_or_else(|| wrong("peers", "dictionary", p))?;
        let ip = match d.get(b"ip") {
            Some(v) => v
                .as_bytes()
                .ok_or_else(|| wrong("peers.ip", "byte string", v))?,
            None => return Err(TrackerError::MissingKey("peers.ip")),
        };
        let port = match d.get(b"port") {
            Some(v) => v
                .as_int()
                .ok_or_else(|| wrong("peers.port", "integer", v))?,
            None => return Err(TrackerError::MissingKey("peers.port")),
        };
        let ip = std::str::from_utf8(ip)
            .ok()
            .and_then(|s| s.parse::<IpAddr>().ok());
        if let (Some(ip), Ok(port @ 1..)) = (ip, u16::try_from(port)) {
            out.push(SocketAddr::new(ip, port));
        }
    }
    Ok(())
}

impl AnnounceResponse {
    /// Parses an HTTP tracker's response body. A `failure reason` becomes
    /// [`TrackerError::Failure`] carrying the tracker's text.
    pub fn from_bytes(body: &[u8]) -> Result<AnnounceResponse, TrackerError> {
        let v = weir_bencode::decode(body)?;
        let d = v
            .as_dict()
            .ok_or_else(|| wrong("(body)", "dictionary", &v))?;
        if let Some(reason) = opt_text(d, "failure reason")? {
            return Err(TrackerError::Failure(reason));
        }
        let interval = opt_u32(d, "interval")?.ok_or(TrackerError::MissingKey("interval"))?;
        let mut peers = Vec::new();
        match d.get(b"peers") {
            None => {}
            Some(Value::Bytes(b)) => peers.extend(compact_v4(b)?),
            Some(Value::List(l)) => dict_peers(&l.items, &mut peers)?,
            Some(other) => return Err(wrong("peers", "byte string or list", other)),
        }
        match d.get(b"peers6") {
            None => {}
            Some(Value::Bytes(b)) => peers.extend(compact_v6(b)?),
            Some(other) => return Err(wrong("peers6", "byte string", other)),
        }
        Ok(AnnounceResponse {
            interval,
            min_interval: opt_u32(d, "min interval")?,
            peers,
            complete: opt_u32(d, "complete")?,
            incomplete: opt_u32(d, "incomplete")?,
            warning: opt_text(d, "warning message")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::Event;

    fn req() -> AnnounceRequest {
        AnnounceRequest {
            info_hash:
                *b"\x12\x34\x56\x78\x9a\xbc\xde\xf1\x23\x45\x67\x89\xab\xcd\xef\x12\x34\x56\x78\x9a",
            peer_id: *b"-WE0001-abc~.-_ %/&=",
            port: 6881,
            uploaded: 1,
            downloaded: 2,
            left: 3,
            event: Some(Event::Started),
            numwant: Some(50),
            key: Some(0xdead),
            compact: true,
        }
    }

    #[test]
    fn url_encodes_binary_fields() {
        let u = req().url("http://127.0.0.1:6969/announce");
        assert_eq!(
            u,
            "http://127.0.0.1:6969/announce?info_hash=%124Vx%9A%BC%DE%F1%23Eg%89%AB%CD%EF%124Vx%9A\
             &peer_id=-WE0001-abc~.-_%20%25%2F%26%3D&port=6881&uploaded=1&downloaded=2&left=3\
             &compact=1&event=started&numwant=50&key=0000dead"
        );
    }

    #[test]
    fn url_with_existing_query_and_fragment() {
        let mut r = req();
        r.event = None;
        r.numwant = None;
        r.key = None;
        r.compact = false;
        let u = r.url("http://t/ann?passkey=x#frag");
        assert!(u.starts_with("http://t/ann?passkey=x&info_hash="), "{u}");
        assert!(u.ends_with("&left=3&compact=0"), "{u}");
        assert!(
            r.url("http://t/ann?")
                .starts_with("http://t/ann?info_hash=")
        );
    }

    #[test]
    fn parses_compact_v4_and_v6() {
        let body = b"d8:completei5e10:incompletei2e8:intervali1800e12:min intervali60e\
            5:peers12:\x7f\x00\x00\x01\x1a\xe1\x7f\x00\x00\x02\x00\x50\
            6:peers618:\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x1a\xe2\
            15:warning message4:hmm!e";
        let r = AnnounceResponse::from_bytes(body).unwrap();
        assert_eq!(r.interval, 1800);
        assert_eq!(r.min_interval, Some(60));
        assert_eq!(r.complete, Some(5));
        assert_eq!(r.incomplete, Some(2));
        assert_eq!(r.warning.as_deref(), Some("hmm!"));
        let want: Vec<SocketAddr> = vec![
            "127.0.0.1:6881".parse().unwrap(),
            "127.0.0.2:80".parse().unwrap(),
            "[::1]:6882".parse().unwrap(),
        ];
        assert_eq!(r.peers, want);
    }

    #[test]
    fn parses_dict_peers_dropping_hostnames() {
        let body = b"d8:intervali900e5:peersl\
            d2:ip9:127.0.0.17:peer id20:aaaaaaaaaaaaaaaaaaaa4:porti6881ee\
            d2:ip11:example.com4:porti80ee\
            d2:ip3:::14:porti6969ee\
            d2:ip9:127.0.0.14:porti0ee\
            ee";
        let r = AnnounceResponse::from_bytes(body).unwrap();
        let want: Vec<SocketAddr> = vec![
            "127.0.0.1:6881".parse().unwrap(),
            "[::1]:6969".parse().unwrap(),
        ];
        assert_eq!(r.peers, want);
    }

    #[test]
    fn failures_and_malformed_bodies() {
        assert_eq!(
            AnnounceResponse::from_bytes(b"d14:failure reason17:torrent not founde").unwrap_err(),
            TrackerError::Failure("torrent not found".into())
        );
        for (body, want) in [
            (&b"de"[..], "tracker response lacks `interval`"),
            (
                b"d8:intervali-1ee",
                "tracker response `interval`: -1 out of range",
            ),
            (
                b"d8:interval2:xxe",
                "tracker response `interval`: expected integer, found byte string",
            ),
            (
                b"d8:intervali1e5:peers5:abcdee",
                "tracker response `peers`: compact length 5 is not a multiple of 6",
            ),
            (
                b"d8:intervali1e6:peers63:abce",
                "tracker response `peers6`: compact length 3 is not a multiple of 18",
            ),
            (
                b"d8:intervali1e5:peersi1ee",
                "tracker response `peers`: expected byte string or list, found integer",
            ),
            (
                b"d8:intervali1e5:peersld4:porti1eeee",
                "tracker response lacks `peers.ip`",
            ),
            (
                b"<html>",
                "malformed tracker response: bencode error at byte 0: unexpected byte 0x3c (expected `i`, `l`, `d` or a string length)",
            ),
            (
                b"le",
                "tracker response `(body)`: expected dictionary, found list",
            ),
        ] {
            assert_eq!(
                AnnounceResponse::from_bytes(body).unwrap_err().to_string(),
                want
            );
        }
    }

    fn percent_decode(s: &str) -> Vec<u8> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(h, 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn url_fields_decode_back(
            ih in proptest::prelude::any::<[u8; 20]>(),
            pid in proptest::prelude::any::<[u8; 20]>(),
            left in proptest::prelude::any::<u64>(),
        ) {
            let mut r = req();
            r.info_hash = ih;
            r.peer_id = pid;
            r.left = left;
            let u = r.url("http://127.0.0.1/a?x=1");
            let q = u.split_once('?').unwrap().1;
            let fields: std::collections::HashMap<&str, &str> =
                q.split('&').map(|kv| kv.split_once('=').unwrap()).collect();
            proptest::prop_assert_eq!(fields["x"], "1");
            proptest::prop_assert_eq!(percent_decode(fields["info_hash"]), ih.to_vec());
            proptest::prop_assert_eq!(percent_decode(fields["peer_id"]), pid.to_vec());
            let left_s = left.to_string();
            proptest::prop_assert_eq!(fields["left"], left_s.as_str());
        }

        #[test]
        fn compact_peers_round_trip(peers in proptest::collection::vec(proptest::prelude::any::<([u8; 4], u16)>(), 0..50)) {
            let mut body = b"d8:intervali5e5:peers".to_vec();
            let compact: Vec<u8> = peers.iter().flat_map(|(ip, p)| ip.iter().copied().chain(p.to_be_bytes())).collect();
            body.extend_from_slice(format!("{}:", compact.len()).as_bytes());
            body.extend_from_slice(&compact);
            body.push(b'e');
            let r = AnnounceResponse::from_bytes(&body).unwrap();
            let want: Vec<SocketAddr> = peers.iter().map(|(ip, p)| SocketAddr::from((*ip, *p))).collect();
            proptest::prop_assert_eq!(r.peers, want);
        }

        #[test]
        fn arbitrary_bodies_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let r = AnnounceResponse::from_bytes(&data);
            // A bencode error exactly when the body is not bencode, and
            // never one of the UDP packet errors.
            proptest::prop_assert_eq!(
                matches!(r, Err(TrackerError::Bencode(_))),
                weir_bencode::decode(&data).is_err()
            );
            proptest::prop_assert!(
                !matches!(
                    r,
                    Err(TrackerError::TooShort { .. } | TrackerError::Action { .. } | TrackerError::TransactionId { .. })
                ),
                "{:?}", r
            );
        }
    }
}
