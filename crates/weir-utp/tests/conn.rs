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

/// Runs a one-way transfer of `total` bytes over the simulator with `link`
/// both ways; returns the app state and the simulator.
fn bulk_over(cfg: Config, link: LinkSpec, total: usize, secs: u64) -> (Bulk, Sim) {
    let t0 = std::time::Instant::now();
    let mut sim = Sim::new(t0, 42);
    let a = sim.add_node(Endpoint::new(cfg.clone(), 1), addr("10.0.0.1:1"));
    let b = sim.add_node(Endpoint::new(cfg, 2), addr("10.0.0.2:2"));
    sim.set_link(a, b, link.clone());
    sim.set_link(b, a, link);
    let mut app = Bulk::new(total, 5);
    let now = sim.now();
    let peer = sim.addr(b);
    app.conn = Some(sim.endpoint(a).connect(peer, now).unwrap());
    sim.flush(a);
    sim.run_until(Duration::from_secs(secs), |node, ep, ev, now| {
        app.on_event(a, node, ep, ev, now)
    });
    (app, sim)
}

#[test]
fn loss_reorder_and_duplication_keep_the_data_intact() {
    let mut link = LinkSpec::new(Duration::from_millis(10), 20_000_000, 1 << 20);
    link.loss = 0.03;
    link.reorder = 0.05;
    link.reorder_delay = Duration::from_millis(3);
    link.duplicate = 0.03;
    let (app, sim) = bulk_over(Config::default(), link, 3 << 20, 60);
    let st = sim.link_stats(0, 1);
    eprintln!(
        "3 MiB over 3% loss, 5% reorder, 3% dup: done at {:?}, link {:?}",
        app.samples.last().map(|s| s.0 - sim.now() + sim.elapsed()),
        st
    );
    assert!(
        st.lost > 20,
        "the link lost too little to test anything: {st:?}"
    );
    assert_eq!(app.mismatch, None);
    assert_eq!(app.received, 3 << 20);
    assert!(app.eof);
    assert!(
        app.closed
            .iter()
            .filter(|c| c.1 == CloseReason::Finished)
            .count()
            == 2,
        "{:?}",
        app.closed
    );
}

#[test]
fn sequence_numbers_wrap_around() {
    // 150-byte packets: 10 MB is ~77,000 packets, more than the 16-bit
    // sequence space, whatever the initial sequence number; with loss and
    // reordering across the wrap.
    let cfg = Config {
        packet_size: 150,
        max_packet_size: 150,
        ..Config::default()
    };
    let mut link = LinkSpec::new(Duration::from_millis(2), 0, 1 << 30);
    link.loss = 0.005;
    link.reorder = 0.01;
    link.reorder_delay = Duration::from_millis(1);
    let total = 10_000_000;
    let (app, sim) = bulk_over(cfg, link, total, 120);
    let st = sim.link_stats(0, 1);
    assert!(st.delivered > 70_000, "{st:?}");
    assert_eq!(app.mismatch, None);
    assert_eq!(app.received, total);
    assert!(app.eof);
}

#[test]
fn connect_to_nobody_fails_after_the_syn_retries() {
    let mut p = Pair::new(ep(1), ep(2));
    let a = p.a.connect(p.b_addr, p.now).unwrap();
    let mut drop_all = |_: Dir, _: &mut Vec<u8>| false;
    let mut syns = 0;
    let mut count = |d: Dir, b: &mut Vec<u8>| {
        if d == Dir::AtoB && b[0] >> 4 == PacketType::Syn as u8 {
            syns += 1;
        }
        false
    };
    p.run_for(Duration::from_secs(6), &mut count);
    assert!(p.a_events.is_empty(), "{:?}", p.a_events);
    p.run_for(Duration::from_secs(2), &mut drop_all);
    assert_eq!(
        p.a_events,
        vec![Event::Closed {
            conn: a,
            reason: CloseReason::ConnectFailed
        }]
    );
    // 1 + 2 retries (1 s, 2 s); failure 4 s after the last: 7 s.
    assert_eq!(syns, 3);
    assert!(p.a.is_empty());
}

fn connected_pair() -> (Pair, weir_utp::ConnHandle, weir_utp::ConnHandle) {
    let mut p = Pair::new(ep(1), ep(2));
    let a = p.a.connect(p.b_addr, p.now).unwrap();
    p.a.write(a, b"hello", p.now).unwrap();
    let ok = p.run_until(Duration::from_secs(2), &mut pass, |p| {
        p.b_events.iter().any(|e| matches!(e, Event::Incoming(_)))
    });
    assert!(ok);
    let b = p
        .b_events
        .iter()
        .find_map(|e| match e {
            Event::Incoming(h) => Some(*h),
            _ => None,
        })
        .unwrap();
    (p, a, b)
}

#[test]
fn reset_closes_the_peer() {
    let (mut p, a, b) = connected_pair();
    p.b.abort(b, p.now).unwrap();
    p.run_for(Duration::from_millis(100), &mut pass);
    assert!(p.a_events.contains(&Event::Closed {
        conn: a,
        reason: CloseReason::Reset
    }));
    assert!(p.b_events.contains(&Event::Closed {
        conn: b,
        reason: CloseReason::Aborted
    }));
    // The handle is dead after its Closed event.
    assert_eq!(
        p.a.write(a, b"x", p.now),
        Err(StreamError::UnknownConnection)
    );
    p.run_for(Duration::from_millis(10), &mut pass);
    assert!(p.a.is_empty() && p.b.is_empty());
}

#[test]
fn a_silent_peer_times_out() {
    let (mut p, a, _b) = connected_pair();
    p.a.write(a, &[7u8; 10_000], p.now).unwrap();
    let mut drop_all = |_: Dir, _: &mut Vec<u8>| false;
    p.run_for(Duration::from_secs(20), &mut drop_all);
    assert!(!p.a_events.iter().any(|e| matches!(e, Event::Closed { .. })));
    p.run_for(Duration::from_secs(200), &mut drop_all);
    assert!(
        p.a_events.contains(&Event::Closed {
            conn: a,
            reason: CloseReason::TimedOut
        }),
        "{:?}",
        p.a_events
    );
    let st = p.a.conn_stats(a);
    assert!(st.is_none(), "removed after the timeout: {st:?}");
}

#[test]
fn writes_stop_at_the_send_buffer_and_resume_on_writable() {
    let cfg = Config {
        send_buffer: 64 * 1024,
        recv_buffer: 32 * 1024,
        ..Config::default()
    };
    let mut p = Pair::new(Endpoint::new(cfg.clone(), 1), Endpoint::new(cfg, 2));
    let a = p.a.connect(p.b_addr, p.now).unwrap();
    let data = pattern(1 << 20, 9);
    let n = p.a.write(a, &data, p.now).unwrap();
    assert_eq!(n, 64 * 1024, "takes only what fits");
    assert_eq!(p.a.write(a, &data[n..], p.now), Ok(0));
    // The receiver does not read: its window fills, the sender stalls.
    p.run_for(Duration::from_secs(3), &mut pass);
    let b = p
        .b_events
        .iter()
        .find_map(|e| match e {
            Event::Incoming(h) => Some(*h),
            _ => None,
        })
        .unwrap();
    let bs = p.b.conn_stats(b).unwrap();
    assert!(bs.recv_buffered <= 32 * 1024, "{bs:?}");
    assert!(bs.recv_buffered > 20 * 1024, "{bs:?}");
    // What the receiver buffered was acknowledged: room again, announced.
    assert_eq!(
        p.a_events
            .iter()
            .filter(|e| **e == Event::Writable(a))
            .count(),
        1
    );
    p.a_events.clear();
    let m = p.a.write(a, &data[n..], p.now).unwrap();
    assert_eq!(m, bs.recv_buffered, "exactly what left the send buffer");
    let n = n + m;
    assert_eq!(p.a.write(a, &data[n..], p.now), Ok(0));
    // Stalled: nothing moves, nothing is announced, memory stays bounded
    // (the sender probes the closed window on its timer).
    p.run_for(Duration::from_secs(5), &mut pass);
    assert!(!p.a_events.contains(&Event::Writable(a)));
    let bs = p.b.conn_stats(b).unwrap();
    assert!(bs.recv_buffered <= 32 * 1024, "{bs:?}");
    assert!(p.a.conn_stats(a).unwrap().send_buffered <= 64 * 1024);
    // Now it reads everything and the sender refills on Writable.
    let mut got = Vec::new();
    let mut written = n;
    let ok = p.run_until(Duration::from_secs(60), &mut pass, |p| {
        let now = p.now;
        drain(&mut p.b, b, &mut got, now);
        if p.a_events.contains(&Event::Writable(a)) {
            p.a_events.retain(|e| *e != Event::Writable(a));
            written += p.a.write(a, &data[written..], now).unwrap();
        }
        got.len() == data.len()
    });
    assert!(ok, "got {} of {}", got.len(), data.len());
    assert!(got == data);
}

#[test]
fn half_close_keeps_the_other_direction_open() {
    let (mut p, a, b) = connected_pair();
    p.a.close(a, p.now).unwrap();
    let mut got_b = Vec::new();
    let ok = p.run_until(Duration::from_secs(2), &mut pass, |p| {
        let now = p.now;
        drain(&mut p.b, b, &mut got_b, now)
    });
    assert!(ok, "B sees A's end of stream");
    assert_eq!(got_b, b"hello");
    assert_eq!(
        p.a.write(a, b"more", p.now),
        Err(StreamError::WriteAfterClose)
    );
    // B keeps sending to A.
    let down = pattern(200_000, 3);
    assert_eq!(p.b.write(b, &down, p.now).unwrap(), down.len());
    p.b.close(b, p.now).unwrap();
    let mut got_a = Vec::new();
    let ok = p.run_until(Duration::from_secs(5), &mut pass, |p| {
        let now = p.now;
        drain(&mut p.a, a, &mut got_a, now)
    });
    assert!(ok);
    assert!(got_a == down);
    p.run_for(Duration::from_secs(1), &mut pass);
    for (evs, h) in [(&p.a_events, a), (&p.b_events, b)] {
        assert!(evs.contains(&Event::Closed {
            conn: h,
            reason: CloseReason::Finished
        }));
    }
}

/// The ids and sequence numbers A uses toward B, read off its packets.
fn forge(p: &mut Pair, a: weir_utp::ConnHandle) -> Header {
    p.a.write(a, b"ping", p.now).unwrap();
    let mut seen = None;
    let mut sniff = |d: Dir, b: &mut Vec<u8>| {
        if d == Dir::BtoA
            && let Ok(pk) = packet::decode(b)
        {
            seen = Some(pk.header);
        }
        true
    };
    p.run_for(Duration::from_millis(100), &mut sniff);
    seen.expect("B answered")
}

#[test]
fn packets_far_outside_the_window_are_dropped_not_buffered() {
    let (mut p, a, _b) = connected_pair();
    let h = forge(&mut p, a);
    let before = p.a.conn_stats(a).unwrap();
    let mut out = BytesMut::new();
    // DATA far ahead of what A expects (each of these would otherwise be
    // held in its reorder buffer).
    for k in 0..200u16 {
        let mut f = h;
        f.ptype = PacketType::Data;
        f.seq_nr = h.seq_nr.wrapping_add(20_000 + k * 7);
        out.clear();
        packet::encode(&f, None, 0, &[0xAB; 1000], &mut out);
        let data = out.to_vec();
        p.deliver(Dir::BtoA, &data);
    }
    // An ack of packets A never sent: dropped whole.
    let mut f = h;
    f.ptype = PacketType::State;
    f.ack_nr = h.ack_nr.wrapping_add(5000);
    out.clear();
    packet::encode(&f, None, 0, &[], &mut out);
    let data = out.to_vec();
    p.deliver(Dir::BtoA, &data);
    // Old, already delivered data: a duplicate, acknowledged again.
    let mut f = h;
    f.ptype = PacketType::Data;
    f.seq_nr = h.seq_nr.wrapping_sub(1);
    out.clear();
    packet::encode(&f, None, 0, b"hello", &mut out);
    let data = out.to_vec();
    p.deliver(Dir::BtoA, &data);
    let st = p.a.conn_stats(a).unwrap();
    assert_eq!(st.out_of_window - before.out_of_window, 200);
    assert_eq!(st.invalid_packets - before.invalid_packets, 1);
    assert_eq!(st.duplicates - before.duplicates, 1);
    assert_eq!(st.reorder_held, 0);
    assert_eq!(st.recv_buffered, before.recv_buffered);
    assert_eq!(
        p.a.read(a, &mut [0u8; 16], p.now),
        Err(StreamError::WouldBlock)
    );
    // The connection still works.
    let (mut got, mut eof) = (Vec::new(), false);
    p.b.write(_b, b"still here", p.now).unwrap();
    p.run_until(Duration::from_secs(2), &mut pass, |p| {
        let now = p.now;
        eof |= drain(&mut p.a, a, &mut got, now);
        !got.is_empty()
    });
    assert_eq!(got, b"still here");
    assert!(!eof);
}

#[test]
fn a_syn_flood_holds_bounded_memory_and_real_peers_get_in() {
    let cfg = Config {
        max_half_open: 32,
        ..Config::default()
    };
    let mut server = Endpoint::new(cfg, 3);
    let t0 = std::time::Instant::now();
    let mut out = BytesMut::new();
    let mut replies = 0;
    for i in 0..20_000u32 {
        let from =
            std::net::SocketAddr::from(([10, 9, (i >> 8) as u8, i as u8], 1000 + (i % 50) as u16));
        let h = Header {
            ptype: PacketType::Syn,
            conn_id: i as u16,
            timestamp_us: i,
            timestamp_diff_us: 0,
            wnd_size: 1 << 20,
            seq_nr: (i * 7) as u16,
            ack_nr: 0,
        };
        out.clear();
        packet::encode(&h, None, 0, &[], &mut out);
        let now = t0 + Duration::from_micros(u64::from(i));
        server.handle_datagram(from, &out, now).unwrap();
        while server.poll_transmit(now).is_some() {
            replies += 1;
        }
        assert!(
            server.len() <= 32,
            "{} connections after {i} SYNs",
            server.len()
        );
    }
    assert_eq!(replies, 20_000, "every SYN is answered (STATE)");
    assert_eq!(server.stats().accepted, 20_000);
    assert_eq!(server.stats().half_open_evicted, 20_000 - 32);
    assert!(
        server.poll_event().is_none(),
        "unconfirmed connections raise no events"
    );
    // A real client still connects through the flood's leftovers.
    let mut p = Pair::new(ep(1), server);
    p.now = t0 + Duration::from_secs(1);
    let a = p.a.connect(p.b_addr, p.now).unwrap();
    p.a.write(a, b"real", p.now).unwrap();
    let ok = p.run_until(Duration::from_secs(2), &mut pass, |p| {
        p.b_events.iter().any(|e| matches!(e, Event::Incoming(_)))
    });
    assert!(ok);
    // Half-open connections expire.
    p.run_for(Duration::from_secs(11), &mut pass);
    assert_eq!(p.b.len(), 1, "only the real connection remains");
}

/// Many peers each filling their window out of order: together they hold
/// the endpoint's receive budget plus a floor each, not a window each, and
/// an honest peer still gets its data through meanwhile.
#[test]
fn out_of_order_floods_from_many_peers_stay_within_the_receive_budget() {
    let budget = 2 << 20;
    let cfg = Config {
        recv_budget: budget,
        ..Config::default()
    };
    let floor = cfg.recv_floor;
    let mut server = Endpoint::new(cfg, 5);
    let t0 = std::time::Instant::now();
    let mut out = BytesMut::new();
    let peers = 100u16;
    let mut handles = Vec::new();
    for i in 0..peers {
        let from = std::net::SocketAddr::from(([10, 7, 0, i as u8], 2000));
        let mut h = Header {
            ptype: PacketType::Syn,
            conn_id: i * 2,
            timestamp_us: 1,
            timestamp_diff_us: 0,
            wnd_size: 1 << 20,
            seq_nr: 100,
            ack_nr: 0,
        };
        out.clear();
        packet::encode(&h, None, 0, &[], &mut out);
        server.handle_datagram(from, &out, t0).unwrap();
        let reply = server.poll_transmit(t0).expect("the SYN is answered");
        let their = packet::decode(&reply.data).unwrap().header.seq_nr;
        while server.poll_transmit(t0).is_some() {}
        // 300 packets of 1,000 bytes after a gap (seq 101 never comes):
        // 300 KB each, well inside a connection's 4 MiB window.
        h.ptype = PacketType::Data;
        h.conn_id = i * 2 + 1;
        h.ack_nr = their.wrapping_sub(1);
        for k in 0..300u16 {
            h.seq_nr = 102 + k;
            out.clear();
            packet::encode(&h, None, 0, &[0xEE; 1000], &mut out);
            server.handle_datagram(from, &out, t0).unwrap();
            while server.poll_transmit(t0).is_some() {}
        }
        while let Some(e) = server.poll_event() {
            if let Event::Incoming(c) = e {
                handles.push(c);
            }
        }
    }
    assert_eq!(
        handles.len(),
        usize::from(peers),
        "every flooder is connected"
    );
    let bound = budget + usize::from(peers) * floor;
    let held: usize = handles
        .iter()
        .map(|h| server.conn_stats(*h).unwrap().recv_buffered)
        .sum();
    assert_eq!(
        held,
        server.recv_held(),
        "the endpoint counts what they hold"
    );
    assert!(
        held <= bound,
        "{held} bytes held by {peers} flooders, bound {bound}"
    );
    assert!(
        held > budget,
        "the budget is used before packets are refused: {held}"
    );
    assert!(server.stats().over_budget > 0, "{:?}", server.stats());
    // An honest peer moves 1 MiB through the full budget on its floor.
    let mut p = Pair::new(ep(1), server);
    p.now = t0 + Duration::from_secs(1);
    let a = p.a.connect(p.b_addr, p.now).unwrap();
    let data = pattern(1 << 20, 3);
    let mut written = p.a.write(a, &data, p.now).unwrap();
    let (mut got, mut b) = (Vec::new(), None);
    let ok = p.run_until(Duration::from_secs(30), &mut pass, |p| {
        let now = p.now;
        if b.is_none() {
            b = p.b_events.iter().find_map(|e| match e {
                Event::Incoming(h) => Some(*h),
                _ => None,
            });
        }
        if let Some(b) = b {
            drain(&mut p.b, b, &mut got, now);
        }
        if written < data.len() {
            written += p.a.write(a, &data[written..], now).unwrap();
        }
        assert!(p.b.recv_held() <= bound, "{} held", p.b.recv_held());
        got.len() == data.len()
    });
    assert!(ok, "got {} of {}", got.len(), data.len());
    assert!(got == data);
}

#[test]
fn mtu_probing_finds_the_path_limit_and_never_exceeds_the_callers() {
    // The caller allows 9000-byte datagrams; the path carries 4000.
    let cfg = Config {
        max_packet_size: 9000,
        ..Config::default()
    };
    let mut link = LinkSpec::new(Duration::from_millis(5), 50_000_000, 64 << 20);
    link.mtu = 4000;
    let (app, mut sim) = bulk_over(cfg, link, 40 << 20, 60);
    let st = sim.link_stats(0, 1);
    assert_eq!(app.mismatch, None);
    assert_eq!(app.received, 40 << 20);
    let _ = sim.endpoint(0);
    assert!(st.too_big >= 1, "no probe ever hit the limit: {st:?}");
    assert!(st.too_big <= 12, "probing keeps hitting the limit: {st:?}");
    assert_eq!(st.lost + st.dropped, 0);
    // Mostly big packets: 40 MiB in far fewer datagrams than at 1400 bytes.
    let at_1400 = (40u64 << 20) / 1380;
    assert!(
        st.delivered < at_1400 / 2,
        "{} datagrams (1400-byte packets would take {at_1400})",
        st.delivered
    );
    assert!(st.bytes / st.delivered.max(1) <= 4000);

    // The caller's limit is never exceeded, even when the path would take more.
    let cfg = Config {
        max_packet_size: 3000,
        ..Config::default()
    };
    let mut link = LinkSpec::new(Duration::from_millis(5), 50_000_000, 64 << 20);
    link.mtu = 3000;
    let (app, sim) = bulk_over(cfg, link, 20 << 20, 60);
    assert_eq!(app.received, 20 << 20);
    assert_eq!(
        sim.link_stats(0, 1).too_big,
        0,
        "sent past the caller's 3000 bytes"
    );
}

#[test]
fn buffers_start_at_the_floor_and_grow_only_with_what_the_peer_proves() {
    let floor = Config::default().min_buffer;
    assert!(floor < Config::default().send_buffer);
    // A writer gets the floor, not the most, before anything is acknowledged.
    let mut p = Pair::new(ep(1), ep(2));
    let a = p.a.connect(p.b_addr, p.now).unwrap();
    let data = pattern(16 << 20, 3);
    let n = p.a.write(a, &data, p.now).unwrap();
    assert_eq!(n, floor, "took more than the floor before any ACK");
    // A peer that answers the SYN and then acknowledges nothing: the
    // window never grows, so neither does what the sender holds.
    let mut answered = 0;
    let mut ack_nothing = |d: Dir, _: &mut Vec<u8>| match d {
        Dir::AtoB => true,
        Dir::BtoA => {
            answered += 1;
            answered == 1
        }
    };
    p.run_for(Duration::from_secs(5), &mut ack_nothing);
    assert_eq!(p.a.write(a, &data[n..], p.now), Ok(0));
    let st = p.a.conn_stats(a).unwrap();
    assert!(st.send_buffered <= floor, "{st:?}");

    // A peer delivering 1.5 MB/s (under half the 4 MiB floor a second)
    // is never advertised more than the floor; one delivering 20 MB/s is
    // (sim.rs's a_long_fat_path_with_large_datagrams_ramps_within_two_seconds
    // shows it reaching 16 MiB where the path needs it).
    let link = LinkSpec::new(Duration::from_millis(10), 1_500_000, 1 << 20);
    let (app, mut sim) = bulk_over(Config::default(), link, 60 << 20, 10);
    assert!(app.received > 10_000_000, "got {}", app.received);
    let st = sim.endpoint(0).conn_stats(app.conn.unwrap()).unwrap();
    assert!(st.peer_window <= floor, "{st:?}");
    let link = LinkSpec::new(Duration::from_millis(10), 20_000_000, 1 << 20);
    let (app, mut sim) = bulk_over(Config::default(), link, 200 << 20, 3);
    assert!(app.received > 30_000_000, "got {}", app.received);
    let st = sim.endpoint(0).conn_stats(app.conn.unwrap()).unwrap();
    assert!(st.peer_window > floor, "{st:?}");
}
