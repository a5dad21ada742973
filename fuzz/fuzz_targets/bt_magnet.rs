//! weir-bt `Magnet::parse_bytes` / `Magnet::parse` (BEP 9/53 magnet URIs).
//!
//! Any input gives a magnet or a typed error, never a panic. A magnet that
//! parses keeps the module's bounds (trackers, peers, web seeds, `so`
//! ranges, value lengths), has a usable hash, and `to_uri` writes a link
//! that parses back to the same value (when that link is within
//! `MAX_URI_LEN`: percent-encoding may triple a value), and prints the same
//! link again. `parse` and `parse_bytes` agree on UTF-8 input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_bt::magnet::{
    MAX_PEERS, MAX_SELECT_RANGES, MAX_TRACKERS, MAX_URI_LEN, MAX_VALUE_LEN, MAX_WEB_SEEDS, Magnet,
    MagnetError,
};

fuzz_target!(|data: &[u8]| {
    let r = Magnet::parse_bytes(data);
    match std::str::from_utf8(data) {
        Ok(s) => assert_eq!(Magnet::parse(s), r, "parse and parse_bytes differ"),
        Err(_) => assert_eq!(r, Err(MagnetError::NotUtf8)),
    }
    let Ok(m) = r else { return };
    assert!(
        m.info_hash.is_some() || m.ed2k.is_some(),
        "no usable hash: {m:?}"
    );
    assert!(m.trackers.len() + m.unsupported_trackers.len() <= MAX_TRACKERS);
    assert!(m.peers.len() <= MAX_PEERS);
    assert!(m.web_seeds.len() <= MAX_WEB_SEEDS);
    if let Some(sel) = &m.select {
        assert!(!sel.ranges().is_empty() && sel.ranges().len() <= MAX_SELECT_RANGES);
        assert!(sel.ranges().iter().all(|(a, b)| a <= b));
    }
    for v in m.name.iter().chain(&m.trackers).chain(&m.web_seeds) {
        assert!(v.len() <= MAX_VALUE_LEN);
    }
    assert!(m.name.as_ref().is_none_or(|n| !n.is_empty()));
    for t in &m.trackers {
        let scheme = t.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        assert!(
            matches!(scheme.as_deref(), Some("http" | "https" | "udp")),
            "tracker {t:?}"
        );
    }
    let uri = m.to_uri();
    if uri.len() > MAX_URI_LEN {
        return;
    }
    let again = Magnet::parse(&uri).unwrap_or_else(|e| panic!("{uri:?} does not parse: {e}"));
    assert_eq!(again, m, "{uri:?} parses to another magnet");
    assert_eq!(again.to_uri(), uri, "to_uri is not stable");
});
