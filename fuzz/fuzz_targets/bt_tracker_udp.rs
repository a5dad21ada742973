//! weir-bt `tracker::udp` (BEP 15): connect and announce requests (tracker
//! side) and responses (client side), error packets.
//!
//! Each packet that parses is built again with the module's encoders: a
//! connect packet and an announce response must come out byte for byte, an
//! announce request must parse to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_bt::tracker::TrackerError;
use weir_bt::tracker::udp::{
    ACTION_ERROR, announce_request, announce_response, connect_request, connect_response,
    parse_announce_request, parse_announce_response, parse_connect_request, parse_connect_response,
};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, buf)) = data.split_first() else {
        return;
    };
    // Usually the transaction id the packet carries (so parsing goes on),
    // sometimes another one.
    let tx_in = buf
        .get(4..8)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let tx = match (sel & 3, tx_in) {
        (0, _) | (_, None) => 0x5eed_0000 | u32::from(sel),
        (_, Some(t)) => t,
    };
    let ipv6 = sel & 4 != 0;

    if let Ok(t) = parse_connect_request(buf) {
        assert_eq!(&connect_request(t)[..], &buf[..16]);
    }
    match parse_connect_response(buf, tx) {
        Ok(cid) => assert_eq!(&connect_response(tx, cid)[..], &buf[..16]),
        Err(TrackerError::TransactionId { expected, found }) => {
            assert_eq!((expected, Some(found)), (tx, tx_in))
        }
        Err(TrackerError::Failure(msg)) => {
            assert_eq!(&buf[..4], &ACTION_ERROR.to_be_bytes());
            assert_eq!(msg, String::from_utf8_lossy(&buf[8..]));
        }
        Err(_) => {}
    }
    if let Ok(a) = parse_announce_request(buf) {
        let again = announce_request(a.connection_id, a.transaction_id, &a.request);
        assert_eq!(parse_announce_request(&again).as_ref(), Ok(&a));
        assert_eq!(&again[..16], &buf[..16]);
    }
    match parse_announce_response(buf, tx, ipv6) {
        Ok(r) => {
            assert_eq!(announce_response(tx, &r, ipv6), buf);
            assert!(r.peers.iter().all(|p| p.is_ipv6() == ipv6));
        }
        Err(TrackerError::TransactionId { expected, found }) => {
            assert_eq!((expected, Some(found)), (tx, tx_in))
        }
        Err(_) => {}
    }
});
