//! One DHT node driven by hand (the server side, read-only mode, the rate
//! limit, commands), and small simulated networks for the saved table and
//! re-bootstrap.

mod sim;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use weir_dht::krpc::{self, Body, ErrorBody, Message, Query, Response, Want};
use weir_dht::{CommandError, Config, Dht, Event, Id, SavedTable, StoreConfig};

fn addr(i: u32) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 6881)
}

fn query_msg(t: &[u8], q: Query) -> Vec<u8> {
    Message {
        transaction: t.to_vec(),
        version: None,
        read_only: false,
        ip: None,
        body: Body::Query(q),
    }
    .to_vec()
}

fn out(d: &mut Dht) -> Vec<(SocketAddr, Message)> {
    let mut v = Vec::new();
    while let Some((to, data)) = d.poll_transmit() {
        v.push((to, krpc::decode(&data).expect("the node sends valid KRPC")));
    }
    v
}

/// Sends `q` from `from`; returns the node's answer to it (and answers any
/// ping the node sends back, so the querier gets into its table).
fn ask(d: &mut Dht, from: SocketAddr, from_id: Id, q: Query, now: Instant) -> Option<Message> {
    d.handle_datagram(from, &query_msg(b"qq", q), now);
    let mut answer = None;
    for (to, m) in out(d) {
        match &m.body {
            Body::Query(Query::Ping { .. }) if to == from => {
                let pong = Message {
                    transaction: m.transaction.clone(),
                    version: None,
                    read_only: false,
                    ip: None,
                    body: Body::Response(Response {
                        id: from_id,
                        ..Response::default()
                    }),
                };
                d.handle_datagram(from, &pong.to_vec(), now);
            }
            Body::Response(_) | Body::Error(_) if to == from && m.transaction == b"qq" => {
                answer = Some(m)
            }
            _ => {}
        }
    }
    answer
}

fn node(cfg: Config, now: Instant) -> Dht {
    Dht::new(cfg, Id([0x11; 20]), 7, now)
}

fn response(m: &Message) -> &Response {
    match &m.body {
        Body::Response(r) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

fn error(m: &Message) -> &ErrorBody {
    match &m.body {
        Body::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn answers_queries_and_checks_tokens() {
    let t0 = Instant::now(); // test-epoch
    let unlimited = Config {
        queries_per_sec: 0,
        ..Config::default()
    };
    let mut d = node(unlimited, t0);
    let mut rng = fastrand::Rng::with_seed(1);
    // Twenty nodes introduce themselves; each is pinged back and answers.
    let ids: Vec<Id> = (0..20).map(|_| Id::random(&mut rng)).collect();
    for (i, id) in ids.iter().enumerate() {
        let pong = ask(&mut d, addr(i as u32), *id, Query::Ping { id: *id }, t0).unwrap();
        assert_eq!(response(&pong).id, d.id());
        assert_eq!(
            pong.ip,
            Some(addr(i as u32)),
            "BEP 42 `ip` names the querier"
        );
    }
    // Random ids: half fall in the far half of the id space, whose
    // bucket holds 8; the rest split our half.
    let in_table = d.stats().nodes;
    assert!((12..=20).contains(&in_table), "{in_table}");

    let me = addr(100);
    let my_id = Id::random(&mut rng);
    let target = Id::random(&mut rng);
    let want = Want::default();
    let r = ask(
        &mut d,
        me,
        my_id,
        Query::FindNode {
            id: my_id,
            target,
            want,
        },
        t0,
    )
    .unwrap();
    let nodes = &response(&r).nodes;
    assert_eq!(nodes.len(), 8);
    let mut sorted: Vec<Id> = d.table().nodes().map(|n| n.info.id).collect();
    sorted.sort_by_key(|i| i.distance(&target));
    assert_eq!(nodes.iter().map(|n| n.id).collect::<Vec<_>>(), sorted[..8]);
    assert!(response(&r).nodes6.is_empty());

    let ih = Id::random(&mut rng);
    let gp = Query::GetPeers {
        id: my_id,
        info_hash: ih,
        want,
    };
    let r = ask(&mut d, me, my_id, gp.clone(), t0).unwrap();
    let token = response(&r).token.clone().unwrap();
    assert!(response(&r).values.is_empty());
    assert_eq!(response(&r).nodes.len(), 8);

    let announce = |token: Vec<u8>, implied_port| Query::AnnouncePeer {
        id: my_id,
        info_hash: ih,
        port: 7777,
        implied_port,
        token,
    };
    // A wrong token, or another IP's, is refused with 203.
    let e = ask(&mut d, me, my_id, announce(b"nope".to_vec(), false), t0).unwrap();
    assert_eq!(error(&e).code, krpc::ERROR_PROTOCOL);
    let other = addr(101);
    let e = ask(&mut d, other, my_id, announce(token.clone(), false), t0).unwrap();
    assert_eq!(error(&e).code, krpc::ERROR_PROTOCOL);
    assert_eq!(d.stats().bad_tokens, 2);
    // The right one, 5 minutes later (one rotation in between), is taken.
    let t4 = t0 + Duration::from_secs(300);
    d.handle_timeout(t4);
    out(&mut d);
    let ok = ask(&mut d, me, my_id, announce(token.clone(), false), t4).unwrap();
    assert_eq!(response(&ok).id, d.id());
    // implied_port: the source port is stored instead.
    let mut me2 = addr(102);
    me2.set_port(5555);
    let r = ask(&mut d, me2, my_id, gp.clone(), t4).unwrap();
    let t2 = response(&r).token.clone().unwrap();
    ask(&mut d, me2, my_id, announce(t2, true), t4).unwrap();
    let r = ask(&mut d, addr(103), my_id, gp.clone(), t4).unwrap();
    let mut values = response(&r).values.clone();
    values.sort();
    assert_eq!(values, vec![SocketAddr::new(me.ip(), 7777), me2]);
    // Two rotations after it was made, the first token is refused.
    let t10 = t0 + Duration::from_secs(600);
    d.handle_timeout(t10);
    out(&mut d);
    let e = ask(&mut d, me, my_id, announce(token, false), t10).unwrap();
    assert_eq!(error(&e).code, krpc::ERROR_PROTOCOL);
    // Stored peers expire 30 minutes after their announce.
    let t35 = t4 + Duration::from_secs(30 * 60 + 10);
    d.handle_timeout(t35);
    out(&mut d);
    let r = ask(&mut d, addr(104), my_id, gp, t35).unwrap();
    assert!(response(&r).values.is_empty());
    assert_eq!(d.stats().stored_peers, 0);
}

#[test]
fn unknown_methods_and_malformed_queries_get_errors() {
    let t0 = Instant::now(); // test-epoch
    let mut d = node(Config::default(), t0);
    let id = Id([5; 20]);
    let e = ask(
        &mut d,
        addr(1),
        id,
        Query::Other {
            id: Some(id),
            method: b"sample_infohashes".to_vec(),
        },
        t0,
    )
    .unwrap();
    assert_eq!(error(&e).code, krpc::ERROR_METHOD_UNKNOWN);
    // A query with a short id: 203 under its transaction id.
    d.handle_datagram(addr(2), b"d1:ad2:id3:abce1:q4:ping1:t2:zz1:y1:qe", t0);
    let o = out(&mut d);
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].1.transaction, b"zz");
    assert_eq!(error(&o[0].1).code, krpc::ERROR_PROTOCOL);
    // Garbage gets nothing back, and is counted.
    for junk in [&b"\x01\x02garbage"[..], b"d1:xe", b"le", &[b'd'; 40_000]] {
        d.handle_datagram(addr(3), junk, t0);
    }
    assert!(out(&mut d).is_empty());
    assert_eq!(d.stats().malformed, 5);
    // An answer nobody asked for is ignored.
    let stray = Message {
        transaction: b"\x00\x01".to_vec(),
        version: None,
        read_only: false,
        ip: None,
        body: Body::Response(Response {
            id,
            ..Response::default()
        }),
    };
    let before = d.stats().nodes;
    d.handle_datagram(addr(4), &stray.to_vec(), t0);
    assert_eq!(d.stats().unexpected, 1);
    assert_eq!(d.stats().nodes, before);
}

#[test]
fn read_only_nodes_send_ro_and_answer_nothing() {
    let t0 = Instant::now(); // test-epoch
    let cfg = Config {
        read_only: true,
        bootstrap: vec![addr(9)],
        ..Config::default()
    };
    let mut ro = node(cfg, t0);
    let sent = out(&mut ro);
    assert!(!sent.is_empty(), "it bootstraps");
    assert!(
        sent.iter().all(|(_, m)| m.read_only),
        "every query says ro=1"
    );
    let id = Id([1; 20]);
    assert!(ask(&mut ro, addr(1), id, Query::Ping { id }, t0).is_none());
    let gp = Query::GetPeers {
        id,
        info_hash: id,
        want: Want::default(),
    };
    assert!(ask(&mut ro, addr(1), id, gp, t0).is_none());
    assert_eq!(ro.stats().queries_received, 0);

    // A normal node does not put a read-only querier in its table.
    let mut d = node(Config::default(), t0);
    let mut q = Message {
        transaction: b"aa".to_vec(),
        version: None,
        read_only: true,
        ip: None,
        body: Body::Query(Query::Ping { id }),
    };
    d.handle_datagram(addr(2), &q.to_vec(), t0);
    let o = out(&mut d);
    assert_eq!(o.len(), 1, "answered, but no ping back: {o:?}");
    assert!(matches!(o[0].1.body, Body::Response(_)));
    // The same query without ro gets a ping back (to verify it).
    q.read_only = false;
    d.handle_datagram(addr(2), &q.to_vec(), t0);
    let o = out(&mut d);
    assert_eq!(o.len(), 2);
    assert!(
        o.iter()
            .any(|(_, m)| matches!(m.body, Body::Query(Query::Ping { .. })))
    );
}

/// Outgoing queries never exceed the configured rate (plus its burst);
/// queries over it wait in the queue and all go out, none dropped.
#[test]
fn outgoing_queries_are_rate_limited_not_dropped() {
    let t0 = Instant::now(); // test-epoch
    let cfg = Config {
        queries_per_sec: 20,
        query_burst: 5,
        ..Config::default()
    };
    let mut d = node(cfg, t0);
    let mut rng = fastrand::Rng::with_seed(2);
    let mut ids = std::collections::BTreeMap::new();
    for i in 0..64u32 {
        let id = Id::random(&mut rng);
        ids.insert(addr(i), id);
        ask(&mut d, addr(i), id, Query::Ping { id }, t0);
    }
    // The verify pings were rate-limited too: let them all out, answered.
    let mut now = t0;
    for _ in 0..500 {
        now += Duration::from_millis(10);
        d.handle_timeout(now);
        while let Some((to, data)) = d.poll_transmit() {
            if let (Ok(m), Some(id)) = (krpc::decode(&data), ids.get(&to)) {
                let pong = Message {
                    transaction: m.transaction,
                    version: None,
                    read_only: false,
                    ip: None,
                    body: Body::Response(Response {
                        id: *id,
                        ..Response::default()
                    }),
                };
                d.handle_datagram(to, &pong.to_vec(), now);
            }
        }
    }
    assert!(d.stats().nodes >= 15, "{}", d.stats().nodes);
    // 30 lookups want 3 queries each at once: 90 queries, 20 a second.
    let start = now;
    for _ in 0..30 {
        d.get_peers(Id::random(&mut rng), now).unwrap();
    }
    let queued = d.stats().queued;
    assert!((60..=90).contains(&queued), "queued {queued}");
    let mut per_second = vec![0usize; 6];
    while now < start + Duration::from_secs(6) {
        while let Some((_, data)) = d.poll_transmit() {
            if matches!(krpc::decode(&data).map(|m| m.body), Ok(Body::Query(_))) {
                per_second[((now - start).as_millis() / 1000) as usize] += 1;
            }
        }
        now += Duration::from_millis(5);
        d.handle_timeout(now);
    }
    println!("queries per second under a 20/s limit: {per_second:?}");
    assert!(per_second[0] <= 20 + 5, "{per_second:?}");
    for s in &per_second[1..] {
        assert!((15..=21).contains(s), "{per_second:?}");
    }
    assert!(d.stats().queued <= d.config().max_queued);
    // Every one of the first 90 went out (and more since, as lookups went on).
    assert!(
        per_second.iter().sum::<usize>() >= queued + 5,
        "{per_second:?}"
    );
}

#[test]
fn command_errors() {
    let t0 = Instant::now(); // test-epoch
    let cfg = Config {
        max_lookups: 2,
        // Somewhere to send queries, so the lookups keep running.
        bootstrap: vec![addr(9)],
        ..Config::default()
    };
    let mut d = node(cfg, t0);
    let ih = Id([3; 20]);
    d.get_peers(ih, t0).unwrap();
    d.announce(ih, Some(1), t0).unwrap();
    assert_eq!(d.get_peers(ih, t0), Err(CommandError::TooManyLookups(2)));
    assert_eq!(d.announce(ih, Some(0), t0), Err(CommandError::BadPort));
}

/// Announces from thousands of addresses (each with a valid token) never
/// grow the peer store past its bounds.
#[test]
fn peer_store_bounded_under_an_announce_flood() {
    let t0 = Instant::now(); // test-epoch
    let cfg = Config {
        store: StoreConfig {
            max_per_hash: 20,
            max_hashes: 50,
            max_total: 500,
            ttl: Duration::from_secs(1800),
        },
        queries_per_sec: 0,
        ..Config::default()
    };
    let mut d = node(cfg, t0);
    let id = Id([9; 20]);
    for i in 0..3000u32 {
        let from = addr(1000 + i);
        let ih = Id([(i % 200) as u8; 20]);
        let r = ask(
            &mut d,
            from,
            id,
            Query::GetPeers {
                id,
                info_hash: ih,
                want: Want::default(),
            },
            t0,
        )
        .unwrap();
        let token = response(&r).token.clone().unwrap();
        let a = Query::AnnouncePeer {
            id,
            info_hash: ih,
            port: 1,
            implied_port: false,
            token,
        };
        assert!(matches!(
            ask(&mut d, from, id, a, t0).unwrap().body,
            Body::Response(_)
        ));
        let s = d.stats();
        assert!(s.stored_peers <= 500 && s.stored_hashes <= 50, "{s:?}");
    }
    let s = d.stats();
    println!(
        "after 3000 announces: {} peers for {} hashes stored",
        s.stored_peers, s.stored_hashes
    );
    assert!((400..=500).contains(&s.stored_peers), "{s:?}");
    assert!((25..=50).contains(&s.stored_hashes), "{s:?}");
    // The newest announce is kept.
    let last = Id([(2999 % 200) as u8; 20]);
    let r = ask(
        &mut d,
        addr(1),
        id,
        Query::GetPeers {
            id,
            info_hash: last,
            want: Want::default(),
        },
        t0,
    )
    .unwrap();
    assert!(
        response(&r)
            .values
            .contains(&SocketAddr::new(addr(1000 + 2999).ip(), 1))
    );
}

/// A node saves its table; a new node started from that blob (same id, no
/// bootstrap nodes configured) is back in the DHT at once and finds peers.
#[test]
fn saved_table_is_reused_at_start() {
    let mut net = sim::build(
        60,
        &[],
        sim::NetConfig::default(),
        &Config::default(),
        Duration::from_millis(50),
        Duration::from_secs(30),
    );
    let now = net.instant();
    let ih = Id([0x42; 20]);
    let l = net.dht(5).announce(ih, Some(4242), now).unwrap();
    net.flush(5);
    net.run_for(Duration::from_secs(10));
    assert!(net.take_events(5).iter().any(
        |e| matches!(e, Event::Announced { lookup, acked, .. } if *lookup == l && *acked > 0)
    ));

    let blob = net.dht(7).save_table();
    let saved = SavedTable::decode(&blob).unwrap();
    assert_eq!(saved.id, net.nodes[7].id);
    assert!(saved.nodes.len() >= 20, "{}", saved.nodes.len());
    // Restart node 7 from the blob, with no bootstrap node.
    net.take_events(7);
    let now = net.instant();
    let mut fresh = Dht::new(Config::default(), saved.id, 99, now);
    assert_eq!(fresh.stats().nodes, 0);
    let taken = fresh.load_table(&saved, now);
    assert!(taken >= 20 && taken <= saved.nodes.len(), "{taken}");
    assert_eq!(fresh.stats().nodes, taken);
    *net.dht(7) = fresh;
    net.flush(7);
    net.run_for(Duration::from_secs(5));
    let ev = net.take_events(7);
    let boot = ev.iter().find_map(|e| match e {
        Event::Bootstrapped { nodes } => Some(*nodes),
        _ => None,
    });
    assert!(boot.is_some_and(|n| n >= 20), "{ev:?}");
    let now = net.instant();
    let l = net.dht(7).get_peers(ih, now).unwrap();
    net.flush(7);
    net.run_for(Duration::from_secs(5));
    let want = SocketAddr::new(net.nodes[5].addr.ip(), 4242);
    let found = net.take_events(7).iter().any(|e| matches!(e, Event::Peers { lookup, peers, .. } if *lookup == l && peers.contains(&want)));
    assert!(found);
    assert!(net.dht(7).stats().good_nodes >= 20);
}

/// When every node in the table is gone, the node bootstraps again from its
/// configured nodes and refills its table with the nodes alive now.
#[test]
fn rebootstraps_when_the_table_empties() {
    let mut net = sim::build(
        40,
        &[],
        sim::NetConfig::default(),
        &Config::default(),
        Duration::from_millis(50),
        Duration::from_secs(30),
    );
    let x = 39;
    assert!(net.dht(x).stats().nodes >= 10);
    // Everyone but the bootstrap node and x leaves; 12 new nodes join.
    for i in 1..x {
        net.leave(i);
    }
    for _ in 0..12 {
        net.add_honest(Config {
            bootstrap: vec![sim::addr_of(0)],
            ..Config::default()
        });
        net.run_for(Duration::from_millis(200));
    }
    // Liveness runs out after 15 minutes, then pings fail.
    net.run_for(Duration::from_secs(20 * 60));
    let s = net.dht(x).stats();
    println!("after churn: {s:?}");
    let new_ids: Vec<Id> = (40..52).map(|i| net.nodes[i].id).collect();
    let knows_new = new_ids
        .iter()
        .filter(|id| net.dht(x).table().get(id).is_some())
        .count();
    assert!(knows_new >= 8, "knows {knows_new} of the 12 new nodes");
    assert!(s.good_nodes >= 8, "{s:?}");
    assert!(
        net.take_events(x)
            .iter()
            .filter(|e| matches!(e, Event::Bootstrapped { .. }))
            .count()
            >= 1
    );
}

#[test]
fn learns_its_external_address_from_answers() {
    let t0 = Instant::now(); // test-epoch
    let mut d = node(Config::default(), t0);
    let external: SocketAddr = "198.51.100.7:6881".parse().unwrap();
    for i in 0..3u32 {
        d.add_node(addr(i), t0);
        for (to, m) in out(&mut d) {
            let pong = Message {
                transaction: m.transaction,
                version: None,
                read_only: false,
                ip: Some(external),
                body: Body::Response(Response {
                    id: Id([i as u8 + 1; 20]),
                    ..Response::default()
                }),
            };
            d.handle_datagram(to, &pong.to_vec(), t0);
        }
    }
    let evs: Vec<Event> = std::iter::from_fn(|| d.poll_event()).collect();
    assert_eq!(evs, vec![Event::ExternalAddress(external.ip())]);
    assert_eq!(d.stats().nodes, 3);
}
