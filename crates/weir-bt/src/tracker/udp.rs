//! The UDP tracker protocol (BEP 15): connect, announce and error packets.
//! Transaction ids come from the caller (the core draws no random numbers);
//! every decoder checks the action, the transaction id and the length.

use std::net::{IpAddr, SocketAddr};

use super::http::{compact_v4, compact_v6};
use super::{AnnounceRequest, AnnounceResponse, Event, TrackerError};

/// The magic constant a connect request carries.
pub const PROTOCOL_ID: u64 = 0x0417_2710_1980;
/// Action: connect.
pub const ACTION_CONNECT: u32 = 0;
/// Action: announce.
pub const ACTION_ANNOUNCE: u32 = 1;
/// Action: scrape.
pub const ACTION_SCRAPE: u32 = 2;
/// Action: error.
pub const ACTION_ERROR: u32 = 3;
/// Length of an announce request.
pub const ANNOUNCE_LEN: usize = 98;

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn need(what: &'static str, buf: &[u8], min: usize) -> Result<(), TrackerError> {
    if buf.len() < min {
        return Err(TrackerError::TooShort {
            what,
            len: buf.len(),
            min,
        });
    }
    Ok(())
}

/// Checks a response's header (action, transaction id); an error response
/// becomes [`TrackerError::Failure`] with the tracker's message.
fn check_header(
    what: &'static str,
    buf: &[u8],
    action: u32,
    transaction_id: u32,
) -> Result<(), TrackerError> {
    need(what, buf, 8)?;
    let found_tx = be32(&buf[4..8]);
    if found_tx != transaction_id {
        return Err(TrackerError::TransactionId {
            expected: transaction_id,
            found: found_tx,
        });
    }
    match be32(&buf[0..4]) {
        a if a == action => Ok(()),
        ACTION_ERROR => Err(TrackerError::Failure(
            String::from_utf8_lossy(&buf[8..]).into_owned(),
        )),
        found => Err(TrackerError::Action {
            expected: action,
            found,
        }),
    }
}

/// A connect request.
pub fn connect_request(transaction_id: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&PROTOCOL_ID.to_be_bytes());
    b[8..12].copy_from_slice(&ACTION_CONNECT.to_be_bytes());
    b[12..16].copy_from_slice(&transaction_id.to_be_bytes());
    b
}

/// Decodes a connect request (tracker side; used by test trackers) and
/// returns its transaction id.
pub fn parse_connect_request(buf: &[u8]) -> Result<u32, TrackerError> {
    need("connect request", buf, 16)?;
    if be64(buf) != PROTOCOL_ID {
        return Err(TrackerError::BadValue {
            key: "protocol_id",
            reason: format!("{:#x}", be64(buf)),
        });
    }
    let action = be32(&buf[8..12]);
    if action != ACTION_CONNECT {
        return Err(TrackerError::Action {
            expected: ACTION_CONNECT,
            found: action,
        });
    }
    Ok(be32(&buf[12..16]))
}

/// A connect response.
pub fn connect_response(transaction_id: u32, connection_id: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&ACTION_CONNECT.to_be_bytes());
    b[4..8].copy_from_slice(&transaction_id.to_be_bytes());
    b[8..16].copy_from_slice(&connection_id.to_be_bytes());
    b
}

/// Decodes a connect response to our `transaction_id`; returns the
/// connection id.
pub fn parse_connect_response(buf: &[u8], transaction_id: u32) -> Result<u64, TrackerError> {
    check_header("connect response", buf, ACTION_CONNECT, transaction_id)?;
    need("connect response", buf, 16)?;
    Ok(be64(&buf[8..16]))
}

fn event_code(e: Option<Event>) -> u32 {
    match e {
        None => 0,
        Some(Event::Completed) => 1,
        Some(Event::Started) => 2,
        Some(Event::Stopped) => 3,
    }
}

/// An announce request (`compact` does not apply to UDP; `numwant` `None`
/// is sent as -1, `key` `None` as 0, the IP field as 0 = "the sender").
pub fn announce_request(
    connection_id: u64,
    transaction_id: u32,
    req: &AnnounceRequest,
) -> [u8; ANNOUNCE_LEN] {
    let mut b = [0u8; ANNOUNCE_LEN];
    b[0..8].copy_from_slice(&connection_id.to_be_bytes());
    b[8..12].copy_from_slice(&ACTION_ANNOUNCE.to_be_bytes());
    b[12..16].copy_from_slice(&transaction_id.to_be_bytes());
    b[16..36].copy_from_slice(&req.info_hash);
    b[36..56].copy_from_slice(&req.peer_id);
    b[56..64].copy_from_slice(&req.downloaded.to_be_bytes());
    b[64..72].copy_from_slice(&req.left.to_be_bytes());
    b[72..80].copy_from_slice(&req.uploaded.to_be_bytes());
    b[80..84].copy_from_slice(&event_code(req.event).to_be_bytes());
    // 84..88: IP address, 0.
    b[88..92].copy_from_slice(&req.key.unwrap_or(0).to_be_bytes());
    let numwant = req
        .numwant
        .map(|n| n.min(i32::MAX as u32) as i32)
        .unwrap_or(-1);
    b[92..96].copy_from_slice(&numwant.to_be_bytes());
    b[96..98].copy_from_slice(&req.port.to_be_bytes());
    b
}

/// A decoded announce request (tracker side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpAnnounce {
    /// The connection id the client presented.
    pub connection_id: u64,
    /// The client's transaction id.
    pub transaction_id: u32,
    /// The announce (`compact` is reported as `true`).
    pub request: AnnounceRequest,
}

/// Decodes an announce request (tracker side; used by test trackers).
pub fn parse_announce_request(buf: &[u8]) -> Result<UdpAnnounce, TrackerError> {
    need("announce request", buf, ANNOUNCE_LEN)?;
    let action = be32(&buf[8..12]);
    if action != ACTION_ANNOUNCE {
        return Err(TrackerError::Action {
            expected: ACTION_ANNOUNCE,
            found: action,
        });
    }
    let event = match be32(&buf[80..84]) {
        0 => None,
        1 => Some(Event::Completed),
        2 => Some(Event::Started),
        3 => Some(Event::Stopped),
        n => {
            return Err(TrackerError::BadValue {
                key: "event",
                reason: format!("unknown event {n}"),
            });
        }
    };
    let mut info_hash = [0u8; 20];
    info_hash.copy_from_slice(&buf[16..36]);
    let mut peer_id = [0u8; 20];
    peer_id.copy_from_slice(&buf[36..56]);
    let key = be32(&buf[88..92]);
    let numwant = be32(&buf[92..96]) as i32;
    Ok(UdpAnnounce {
        connection_id: be64(&buf[0..8]),
        transaction_id: be32(&buf[12..16]),
        request: AnnounceRequest {
            info_hash,
            peer_id,
            port: u16::from_be_bytes([buf[96], buf[97]]),
            uploaded: be64(&buf[72..80]),
            downloaded: be64(&buf[56..64]),
            left: be64(&buf[64..72]),
            event,
            numwant: u32::try_from(numwant).ok(),
            key: (key != 0).then_some(key),
            compact: true,
        },
    })
}

/// An announce response (tracker side). Peers of the other address family
/// than `ipv6` are left out, as BEP 15 sends one family per socket.
pub fn announce_response(transaction_id: u32, resp: &AnnounceResponse, ipv6: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + resp.peers.len() * 18);
    b.extend_from_slice(&ACTION_ANNOUNCE.to_be_bytes());
    b.extend_from_slice(&transaction_id.to_be_bytes());
    b.extend_from_slice(&resp.interval.to_be_bytes());
    b.extend_from_slice(&resp.incomplete.unwrap_or(0).to_be_bytes());
    b.extend_from_slice(&resp.complete.unwrap_or(0).to_be_bytes());
    for p in &resp.peers {
        match (p.ip(), ipv6) {
            (IpAddr::V4(ip), false) => b.extend_from_slice(&ip.octets()),
            (IpAddr::V6(ip), true) => b.extend_from_slice(&ip.octets()),
            _ => continue,
        }
        b.extend_from_slice(&p.port().to_be_bytes());
    }
    b
}

/// Decodes the answer to our announce `transaction_id`. `ipv6`: the request
/// went over IPv6, so peers are 18-byte entries (BEP 15); otherwise 6-byte.
pub fn parse_announce_response(
    buf: &[u8],
    transaction_id: u32,
    ipv6: bool,
) -> Result<AnnounceResponse, TrackerError> {
    check_header("announce response", buf, ACTION_ANNOUNCE, transaction_id)?;
    need("announce response", buf, 20)?;
    let peers: Vec<SocketAddr> = if ipv6 {
        compact_v6(&buf[20..])?
    } else {
        compact_v4(&buf[20..])?
    };
    Ok(AnnounceResponse {
        interval: be32(&buf[8..12]),
        min_interval: None,
        peers,
        incomplete: Some(be32(&buf[12..16])),
        complete: Some(be32(&buf[16..20])),
        warning: None,
    })
}

/// An error response (tracker side).
pub fn error_response(transaction_id: u32, message: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + message.len());
    b.extend_from_slice(&ACTION_ERROR.to_be_bytes());
    b.extend_from_slice(&transaction_id.to_be_bytes());
    b.extend_from_slice(message.as_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connect_bytes() {
        let r = connect_request(0x01020304);
        assert_eq!(
            r,
            [
                0, 0, 4, 0x17, 0x27, 0x10, 0x19, 0x80, 0, 0, 0, 0, 1, 2, 3, 4
            ]
        );
        assert_eq!(parse_connect_request(&r).unwrap(), 0x01020304);
        let resp = connect_response(0x01020304, 0xfeed);
        assert_eq!(parse_connect_response(&resp, 0x01020304).unwrap(), 0xfeed);
        assert_eq!(
            parse_connect_response(&resp, 7).unwrap_err(),
            TrackerError::TransactionId {
                expected: 7,
                found: 0x01020304
            }
        );
        assert!(matches!(
            parse_connect_response(&resp[..12], 0x01020304),
            Err(TrackerError::TooShort { .. })
        ));
        assert!(matches!(
            parse_connect_response(
                &announce_response(1, &AnnounceResponse::default(), false),
                1
            ),
            Err(TrackerError::Action {
                expected: 0,
                found: 1
            })
        ));
    }

    #[test]
    fn error_response_carries_the_message() {
        let e = error_response(9, "unregistered torrent");
        assert_eq!(
            parse_announce_response(&e, 9, false).unwrap_err(),
            TrackerError::Failure("unregistered torrent".into())
        );
        assert_eq!(
            parse_connect_response(&e, 9).unwrap_err().to_string(),
            "tracker failure: unregistered torrent"
        );
    }

    #[test]
    fn bad_peer_lengths() {
        let mut r = announce_response(1, &AnnounceResponse::default(), false);
        r.extend_from_slice(&[1, 2, 3]);
        assert!(matches!(
            parse_announce_response(&r, 1, false),
            Err(TrackerError::BadValue { .. })
        ));
        assert!(matches!(
            parse_announce_response(&r[..19], 1, false),
            Err(TrackerError::TooShort { .. })
        ));
    }

    fn arb_req() -> impl Strategy<Value = AnnounceRequest> {
        (
            any::<[u8; 20]>(),
            any::<[u8; 20]>(),
            any::<u16>(),
            any::<(u64, u64, u64)>(),
            prop_oneof![
                Just(None),
                Just(Some(Event::Started)),
                Just(Some(Event::Completed)),
                Just(Some(Event::Stopped))
            ],
            proptest::option::of(0u32..=i32::MAX as u32),
            proptest::option::of(1u32..),
        )
            .prop_map(
                |(info_hash, peer_id, port, (uploaded, downloaded, left), event, numwant, key)| {
                    AnnounceRequest {
                        info_hash,
                        peer_id,
                        port,
                        uploaded,
                        downloaded,
                        left,
                        event,
                        numwant,
                        key,
                        compact: true,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn announce_request_round_trips(req in arb_req(), cid in any::<u64>(), tx in any::<u32>()) {
            let b = announce_request(cid, tx, &req);
            let got = parse_announce_request(&b).unwrap();
            prop_assert_eq!(got, UdpAnnounce { connection_id: cid, transaction_id: tx, request: req });
        }

        #[test]
        fn announce_response_round_trips(
            v4 in proptest::collection::vec(any::<([u8; 4], u16)>(), 0..20),
            v6 in proptest::collection::vec(any::<([u8; 16], u16)>(), 0..20),
            interval in any::<u32>(), seeders in any::<u32>(), leechers in any::<u32>(),
            tx in any::<u32>(), ipv6 in any::<bool>(),
        ) {
            let peers4: Vec<SocketAddr> = v4.iter().map(|(ip, p)| SocketAddr::from((*ip, *p))).collect();
            let peers6: Vec<SocketAddr> = v6.iter().map(|(ip, p)| SocketAddr::from((*ip, *p))).collect();
            let mut all = peers4.clone();
            all.extend(peers6.iter().copied());
            let resp = AnnounceResponse {
                interval, min_interval: None, peers: all,
                complete: Some(seeders), incomplete: Some(leechers), warning: None,
            };
            let b = announce_response(tx, &resp, ipv6);
            let got = parse_announce_response(&b, tx, ipv6).unwrap();
            prop_assert_eq!(got.interval, interval);
            prop_assert_eq!(got.complete, Some(seeders));
            prop_assert_eq!(got.incomplete, Some(leechers));
            prop_assert_eq!(got.peers, if ipv6 { peers6 } else { peers4 });
        }

        #[test]
        fn arbitrary_packets_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200), tx in any::<u32>()) {
            // What parses is rebuilt by the encoders; what is too short says so.
            match parse_connect_request(&data) {
                Ok(t) => prop_assert_eq!(&connect_request(t)[..], &data[..16]),
                Err(TrackerError::TooShort { len, min: 16, .. }) => prop_assert!(len < 16),
                Err(e) => prop_assert!(matches!(e, TrackerError::BadValue { .. } | TrackerError::Action { .. }), "{:?}", e),
            }
            match parse_connect_response(&data, tx) {
                Ok(cid) => prop_assert_eq!(&connect_response(tx, cid)[..], &data[..16]),
                Err(TrackerError::TooShort { len, .. }) => prop_assert!(len < 16),
                Err(e) => prop_assert!(
                    matches!(e, TrackerError::TransactionId { expected, .. } if expected == tx)
                        || matches!(e, TrackerError::Failure(_) | TrackerError::Action { .. }),
                    "{:?}", e
                ),
            }
            match parse_announce_request(&data) {
                Ok(a) => {
                    let again = announce_request(a.connection_id, a.transaction_id, &a.request);
                    prop_assert_eq!(parse_announce_request(&again), Ok(a));
                }
                Err(TrackerError::TooShort { len, .. }) => prop_assert!(len < ANNOUNCE_LEN),
                Err(e) => prop_assert!(matches!(e, TrackerError::BadValue { .. } | TrackerError::Action { .. }), "{:?}", e),
            }
            for ipv6 in [false, true] {
                match parse_announce_response(&data, tx, ipv6) {
                    Ok(r) => prop_assert_eq!(announce_response(tx, &r, ipv6), data.clone()),
                    Err(TrackerError::TooShort { len, .. }) => prop_assert!(len < 20),
                    Err(e) => prop_assert!(
                        matches!(
                            e,
                            TrackerError::TransactionId { .. } | TrackerError::Failure(_)
                                | TrackerError::Action { .. } | TrackerError::BadValue { .. }
                        ),
                        "{:?}", e
                    ),
                }
            }
        }
    }
}
