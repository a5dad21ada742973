//! weir-bt `PexMessage::decode` and `PexState` (BEP 11 ut_pex).
//!
//! Decoding: lists keep at most `max_per_list` addresses each (the rest
//! counted in `truncated`), added peers are plausible (port, not
//! unspecified, multicast or broadcast), and `encode` gives a payload that
//! decodes to the same message with nothing truncated or tolerated.
//!
//! State: a session of messages from the peer (fuzzed payloads, at fuzzed
//! times) and of our peer set changing. What is learnt is never more than
//! the learning bucket allows (`learn_burst` plus `learn_per_minute` for
//! the time elapsed), nothing comes from a message that came too soon, an
//! address is not reported twice while remembered; what we send has at
//! most 50 addresses per family and list, never more than one message per
//! `interval`, and always tells the peer exactly the changes since the last
//! one (a model of what the peer was told is kept and compared).
#![no_main]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use weir_bt::pex::{MAX_PER_LIST, PexConfig, PexFlags, PexMessage, PexState};
use weir_fuzz::Input;

fn check_decode(payload: &[u8], max: usize) {
    let Ok(d) = PexMessage::decode(payload, max) else {
        return;
    };
    let v4 = d.msg.added.iter().filter(|p| p.addr.is_ipv4()).count();
    assert!(v4 <= max && d.msg.added.len() - v4 <= max);
    let d4 = d.msg.dropped.iter().filter(|a| a.is_ipv4()).count();
    assert!(d4 <= max && d.msg.dropped.len() - d4 <= max);
    for p in &d.msg.added {
        let ip = p.addr.ip();
        assert!(p.addr.port() != 0 && !ip.is_unspecified() && !ip.is_multicast());
        assert_ne!(ip, IpAddr::V4(Ipv4Addr::BROADCAST));
    }
    if max > MAX_PER_LIST {
        return; // encode cuts at MAX_PER_LIST
    }
    let enc = d.msg.encode();
    let back = PexMessage::decode(&enc, max).expect("own encoding decodes");
    assert_eq!(back.msg, d.msg, "does not round-trip");
    assert_eq!((back.truncated, back.violations), (0, 0));
    assert_eq!(back.msg.encode(), enc, "encoding not stable");
}

fn addr(inp: &mut Input<'_>) -> SocketAddr {
    let b = inp.byte();
    let port = 6881 + u16::from(b >> 4);
    if b & 1 == 0 {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, b >> 1)), port)
    } else {
        let mut o = [0u8; 16];
        o[0] = 0xfd;
        o[15] = b >> 1;
        SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), port)
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let cfg = PexConfig {
        max_per_list: if sel & 1 == 0 {
            MAX_PER_LIST
        } else {
            usize::from(inp.byte() % 80)
        },
        learn_burst: f64::from(inp.byte()),
        learn_per_minute: f64::from(inp.byte()),
        remember: usize::from(inp.u16() % 2000),
        ..PexConfig::default()
    };
    if sel & 2 == 0 {
        check_decode(inp.clone().rest(), cfg.max_per_list);
    }
    let start = Instant::now();
    let mut now = start;
    let mut st = PexState::new(cfg, now);
    let mut learnt = 0u64;
    let mut current: BTreeMap<SocketAddr, PexFlags> = BTreeMap::new();
    let mut told: BTreeMap<SocketAddr, PexFlags> = BTreeMap::new();
    let mut last_sent: Option<Instant> = None;
    let mut steps = 0;
    while !inp.is_empty() && steps < 200 {
        steps += 1;
        let op = inp.byte();
        match op % 6 {
            0 | 1 => {
                let n = usize::from(inp.u16() % 2048);
                let payload = inp.take(n);
                check_decode(payload, cfg.max_per_list);
                let before = st.stats();
                let Ok(r) = st.handle_message(payload, now) else {
                    assert_eq!(st.stats(), before, "a refused message changed the counters");
                    continue;
                };
                if r.too_soon {
                    assert!(r.added.is_empty() && r.dropped.is_empty());
                }
                assert!(r.added.len() <= 2 * cfg.max_per_list);
                let mut seen = std::collections::BTreeSet::new();
                assert!(
                    r.added.iter().all(|p| seen.insert(p.addr)),
                    "an address twice"
                );
                learnt += r.added.len() as u64;
                assert_eq!(st.stats().learnt, learnt);
                let minutes = now.duration_since(start).as_secs_f64() / 60.0;
                let allowed = cfg.learn_burst + minutes * cfg.learn_per_minute;
                assert!(
                    learnt as f64 <= allowed + 1e-6,
                    "learnt {learnt} > {allowed} allowed"
                );
            }
            2 => {
                let a = addr(&mut inp);
                if op & 0x80 != 0 {
                    current.remove(&a);
                } else {
                    current.insert(a, PexFlags(inp.byte() & 0x1f));
                }
            }
            3 => {
                for _ in 0..usize::from(inp.byte()) {
                    let o = inp.u16();
                    let a = SocketAddr::new(
                        IpAddr::V4(Ipv4Addr::new(10, 0, (o >> 8) as u8, o as u8)),
                        1,
                    );
                    current.insert(a, PexFlags(0));
                }
            }
            4 => now += Duration::from_millis(u64::from(inp.u16()) * 100),
            _ => {
                if let Some(t) = st.poll_timeout() {
                    now = now.max(t);
                }
            }
        }
        if let Some(m) = st.poll_message(now, &current) {
            if let Some(t) = last_sent {
                assert!(now >= t + cfg.interval, "two messages within the interval");
            }
            last_sent = Some(now);
            let a4 = m.added.iter().filter(|p| p.addr.is_ipv4()).count();
            let d4 = m.dropped.iter().filter(|a| a.is_ipv4()).count();
            assert!(a4 <= MAX_PER_LIST && m.added.len() - a4 <= MAX_PER_LIST);
            assert!(d4 <= MAX_PER_LIST && m.dropped.len() - d4 <= MAX_PER_LIST);
            for p in &m.added {
                assert_eq!(
                    current.get(&p.addr),
                    Some(&p.flags),
                    "added but not current"
                );
                assert_ne!(told.get(&p.addr), Some(&p.flags), "told twice");
                told.insert(p.addr, p.flags);
            }
            for a in &m.dropped {
                assert!(!current.contains_key(a), "dropped but current");
                assert!(told.remove(a).is_some(), "dropped but never told");
            }
            // Whatever was not sent now differs from what the peer knows
            // only because a list was full.
            if a4 < MAX_PER_LIST
                && m.added.len() - a4 < MAX_PER_LIST
                && d4 < MAX_PER_LIST
                && m.dropped.len() - d4 < MAX_PER_LIST
            {
                assert_eq!(told, current, "changes left unsaid");
            }
        } else if st.poll_timeout().is_none() {
            assert_eq!(told, current, "idle with changes to tell");
        }
    }
});
