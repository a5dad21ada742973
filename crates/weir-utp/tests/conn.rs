//! Connection state machine: handshake, data both ways, FIN, RESET,
//! timeouts, backpressure, wrap-around, loss/reorder/duplication, bad
//! sequence numbers and a SYN flood.

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::*;
use weir_utp::packet::{self, Header, PacketType};
use weir_utp::sim::{LinkSpec, Sim};
use weir_utp::{CloseReason, Config, Endpoint, Event, StreamError};

fn ep(seed: u64) -> Endpoint {
    Endpoint::new(Config::default(), seed)
}

#[test]
fn handshake_data_both_ways_and_fin() {
    let mut p = Pair::new(ep(1), ep(2));
    let a = p.a.connect(p.b_addr, p.now).unwrap();
    let up = pattern(300_000, 1);
    let down = pattern(120_000, 2);
    // Written before the connection is up: sent once it is.
    let mut written = p.a.write(a, &up[..1000], p.now).unwrap();
    assert_eq!(written, 1000);
    let mut b = None;
    let (mut got_b, mut got_a) = (Vec::new(), Vec::new());
    let (mut eof_a, mut eof_b, mut b_written) = (false, false, 0);
    let done = p.run_until(Duration::from_secs(10), &mut pass, |p| {
        let now = p.now;
        if written < up.len() {
            written += p.a.write(a, &up[written..], now).unwrap();
            if written == up.len() {
                p.a.close(a, now).unwrap();
            }
        }
        if b.is_none() {
            b = p.b_events.iter().find_map(|e| match e {
                Event::Incoming(h) => Some(*h),
                _ => None,
            });
        }
        if let Some(b) = b {
            if b_written < down.len() {
                b_written += p.b.write(b, &down[b_written..], now).unwrap();
                if b_written == down.len() {
                    p.b.close(b, now).unwrap();
                }
            }
            if !eof_b {
                eof_b = drain(&mut p.b, b, &mut got_b, now);
            }
        }
        if !eof_a {
            eof_a = drain(&mut p.a, a, &mut got_a, now);
        }
        let closed = |evs: &[Event]| {
            evs.iter().any(|e| {
                matches!(
                    e,
                    Event::Closed {
                        reason: CloseReason::Finished,
                        ..
                    }
                )
            })
        };
        closed(&p.a_events) && closed(&p.b_events)
    });
    assert!(
        done,
        "a got {} eof {eof_a}, b got {} eof {eof_b}; a {:?}\nb {:?}\na last {:?} b last {:?}",
        got_a.len(),
        got_b.len(),
        p.a.conn_stats(a),
        b.and_then(|b| p.b.conn_stats(b)),
        p.a_events.last(),
        p.b_events.last()
    );
    assert!(eof_a && eof_b);
    assert_eq!(got_b.len(), up.len());
    assert!(got_b == up, "data A->B differs");
    assert!(got_a == down, "data B->A differs");
    assert_eq!(p.a_events[0], Event::Connected(a));
    let b = b.unwrap();
    assert!(matches!(
        p.b.write(b, b"x", p.now),
        Err(StreamError::WriteAfterClose | StreamError::Closed(_) | StreamError::UnknownConnection)
    ));
    // After the linger both are gone.
    p.run_for(Duration::from_secs(10), &mut pass);
    assert!(
        p.a.is_empty() && p.b.is_empty(),
        "{} {}",
        p.a.len(),
        p.b.len()
    );
    assert_eq!(
        p.a.read(a, &mut [0u8; 4], p.now),
        Err(StreamError::UnknownConnection)
    );
}
