//! weir-utp `Endpoint` (connections) fed by hostile peers: datagrams built
//! from the fuzzer's bytes around what the endpoint sent (its connection
//! ids, sequence and ack numbers, nearby or wild), raw datagrams, SYN
//! floods, and our side connecting, writing, reading, closing, aborting and
//! letting time pass.
//!
//! No panic, and the limits hold: at most `max_connections` connections,
//! every datagram sent is valid uTP within `max_packet_size` and goes to a
//! peer that exists, per connection at most `send_buffer` bytes buffered to
//! send (in flight within it) and `recv_buffer` to receive, writes take at
//! most what was offered, reads never give more than the peer sent, and
//! `Closed` comes once per connection, after which nothing more does.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::Input;
use weir_utp::packet::{Header, PacketType, decode, encode};
use weir_utp::{Config, ConnHandle, Endpoint, Event, StreamError};

const TYPES: [PacketType; 8] = [
    PacketType::Data,
    PacketType::Data,
    PacketType::Data,
    PacketType::State,
    PacketType::State,
    PacketType::Fin,
    PacketType::Reset,
    PacketType::Syn,
];

/// What the endpoint last sent to a peer: connection id, seq and ack.
#[derive(Clone, Copy, Default)]
struct Seen {
    conn_id: u16,
    seq: u16,
    ack: u16,
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let cfg = Config {
        send_buffer: 64 << 10,
        recv_buffer: 64 << 10,
        max_connections: 6,
        max_half_open: 2,
        max_packet_size: if sel & 1 != 0 { 9000 } else { 1400 },
        initial_window: 4,
        ..Config::default()
    };
    let peers: Vec<SocketAddr> = (2..5)
        .map(|i| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)), 6881))
        .collect();
    let mut ep = Endpoint::new(cfg.clone(), u64::from(inp.u32()));
    let mut now = Instant::now();
    let mut seen: BTreeMap<SocketAddr, Seen> = BTreeMap::new();
    let mut live: BTreeSet<ConnHandle> = BTreeSet::new();
    let mut closed: BTreeSet<ConnHandle> = BTreeSet::new();
    let mut sent_to_us: BTreeMap<SocketAddr, u64> = BTreeMap::new();
    let mut read: BTreeMap<SocketAddr, u64> = BTreeMap::new();
    let mut buf = vec![0u8; 4096];
    let mut steps = 0;
    while !inp.is_empty() && steps < 300 {
        steps += 1;
        let op = inp.byte();
        let handles: Vec<ConnHandle> = live.iter().copied().collect();
        let pick = |b: u8| handles.get(usize::from(b) % handles.len().max(1)).copied();
        match op % 10 {
            0 => {
                let to = peers[usize::from(op >> 4) % peers.len()];
                if let Ok(h) = ep.connect(to, now) {
                    assert!(live.insert(h) && !closed.contains(&h), "handle reused");
                }
            }
            1..=4 => {
                let from = peers[usize::from(op >> 4) % peers.len()];
                let s = seen.get(&from).copied().unwrap_or_default();
                let ptype = TYPES[usize::from(inp.byte()) % TYPES.len()];
                let f = inp.byte();
                let near = |b: u8| i16::from(b as i8 >> 3);
                // Our SYN's id is the peer's to use; after it, ours +- 1
                // depending on who opened the connection.
                let conn_id = match f % 4 {
                    0 => inp.u16(),
                    1 => s.conn_id,
                    2 => s.conn_id.wrapping_sub(1),
                    _ => s.conn_id.wrapping_add(1),
                };
                let h = Header {
                    ptype,
                    conn_id,
                    timestamp_us: inp.u32(),
                    timestamp_diff_us: if f & 0x10 != 0 { inp.u32() } else { 0 },
                    wnd_size: if f & 0x20 != 0 { inp.u32() } else { 1 << 20 },
                    seq_nr: s.ack.wrapping_add(1).wrapping_add_signed(near(inp.byte())),
                    ack_nr: s.seq.wrapping_sub(1).wrapping_add_signed(near(inp.byte())),
                };
                let sack_n = usize::from(inp.byte() % 12);
                let sack = (f & 0x40 != 0).then(|| inp.take(sack_n).to_vec());
                let n = usize::from(inp.u16() % 1500);
                let payload = if ptype == PacketType::Data || f & 0x80 != 0 {
                    inp.take(n)
                } else {
                    &[][..]
                };
                *sent_to_us.entry(from).or_default() += payload.len() as u64;
                let mut out = BytesMut::new();
                encode(&h, sack.as_deref(), 0, payload, &mut out);
                ep.handle_datagram(from, &out, now)
                    .expect("a valid packet refused");
            }
            5 => {
                let from = peers[usize::from(op >> 4) % peers.len()];
                let n = usize::from(inp.byte());
                let raw = inp.take(n);
                if let Ok(p) = decode(raw) {
                    *sent_to_us.entry(from).or_default() += p.payload.len() as u64;
                }
                let _ = ep.handle_datagram(from, raw, now);
            }
            6 => {
                let Some(h) = pick(inp.byte()) else { continue };
                let n = usize::from(inp.u16());
                let data = vec![0xa5u8; n];
                match ep.write(h, &data, now) {
                    Ok(k) => assert!(k <= n),
                    Err(StreamError::UnknownConnection) => panic!("live handle unknown"),
                    Err(_) => {}
                }
            }
            7 => {
                let Some(h) = pick(inp.byte()) else { continue };
                let peer = ep.peer_addr(h).expect("live handle has a peer");
                loop {
                    match ep.read(h, &mut buf, now) {
                        Ok(0) => break,
                        Ok(k) => *read.entry(peer).or_default() += k as u64,
                        Err(_) => break,
                    }
                }
            }
            8 => {
                let Some(h) = pick(inp.byte()) else { continue };
                let _ = if op & 0x80 != 0 {
                    ep.abort(h, now)
                } else {
                    ep.close(h, now)
                };
            }
            _ => {
                now = match ep.poll_timeout() {
                    Some(t) if op & 0x80 == 0 => now.max(t),
                    _ => now + Duration::from_millis(u64::from(inp.u16())),
                };
                ep.handle_timeout(now);
            }
        }
        while let Some(t) = ep.poll_transmit(now) {
            assert!(peers.contains(&t.dst), "sent to {}", t.dst);
            assert!(
                t.data.len() <= cfg.max_packet_size,
                "{}-byte datagram",
                t.data.len()
            );
            let p = decode(&t.data).expect("we sent invalid uTP");
            let e = seen.entry(t.dst).or_default();
            e.conn_id = p.header.conn_id;
            e.seq = p.header.seq_nr;
            e.ack = p.header.ack_nr;
        }
        while let Some(ev) = ep.poll_event() {
            match ev {
                Event::Incoming(h) => {
                    assert!(!closed.contains(&h), "event after Closed");
                    live.insert(h);
                }
                Event::Connected(h) | Event::Readable(h) | Event::Writable(h) => {
                    assert!(!closed.contains(&h), "event after Closed: {ev:?}");
                }
                Event::Closed { conn, .. } => {
                    assert!(closed.insert(conn), "Closed twice for {conn:?}");
                    live.remove(&conn);
                }
            }
        }
        assert!(ep.len() <= cfg.max_connections);
        for h in &live {
            let Some(st) = ep.conn_stats(*h) else {
                panic!("live handle {h:?} has no connection");
            };
            assert!(
                st.send_buffered <= cfg.send_buffer,
                "{} buffered",
                st.send_buffered
            );
            assert!(st.bytes_in_flight <= st.send_buffered);
            assert!(
                st.recv_buffered <= cfg.recv_buffer,
                "{} received",
                st.recv_buffered
            );
            assert!(st.packet_size <= cfg.max_packet_size);
        }
        for h in &closed {
            assert!(ep.conn_stats(*h).is_none() || !live.contains(h));
        }
        for (peer, n) in &read {
            assert!(
                n <= sent_to_us.get(peer).unwrap_or(&0),
                "read more than {peer} sent"
            );
        }
    }
});
