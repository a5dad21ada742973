use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use super::*;

fn limits() -> LookupLimits {
    LookupLimits {
        k: 8,
        alpha: 3,
        max_in_flight: 6,
        max_candidates: 64,
        max_queries: 128,
        max_peers_remembered: 100,
        enforce_node_id: false,
        one_per_ip: true,
    }
}

fn addr(i: u32) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i)), 1000)
}

fn nodes(rng: &mut fastrand::Rng, n: u32, base: u32) -> Vec<NodeInfo> {
    (0..n)
        .map(|i| NodeInfo {
            id: Id::random(rng),
            addr: addr(base + i),
        })
        .collect()
}

fn answer(l: &mut Lookup, ask: &Ask, now: Instant) -> Option<Vec<SocketAddr>> {
    let from = NodeInfo {
        id: ask.expected.unwrap(),
        addr: ask.addr,
    };
    l.on_response(&ask.key, from, ask.depth, &[], &[], Some(vec![1]), now)
}

#[test]
fn alpha_in_flight_and_slow_queries_free_a_slot() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(1);
    let mut l = Lookup::new(
        LookupId(1),
        Id::random(&mut rng),
        LookupKind::GetPeers,
        Id([0; 20]),
        limits(),
        t0,
    );
    l.add_nodes(&nodes(&mut rng, 20, 0), 0);
    let first = l.pick();
    assert_eq!(first.len(), 3);
    assert!(l.pick().is_empty(), "alpha reached");
    l.on_slow(&first[0].key);
    let more = l.pick();
    assert_eq!(more.len(), 1, "a slow query frees one slot");
    for a in &first[1..] {
        l.on_slow(&a.key);
    }
    l.on_slow(&more[0].key);
    // Everything slow: at most max_in_flight in flight in all.
    let extra = l.pick();
    assert_eq!(extra.len(), 2);
    assert!(l.pick().is_empty());
}

#[test]
fn done_only_when_k_closest_answered() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(2);
    let target = Id::random(&mut rng);
    let mut l = Lookup::new(
        LookupId(1),
        target,
        LookupKind::FindNode,
        Id([0; 20]),
        limits(),
        t0,
    );
    let all = nodes(&mut rng, 30, 0);
    l.add_nodes(&all, 0);
    let mut answered = 0;
    let mut rounds = 0;
    while !l.is_finished() {
        let asks = l.pick();
        assert!(!asks.is_empty(), "stuck without queries");
        for a in &asks {
            // Every third node times out.
            if answered % 3 == 2 {
                l.on_failure(&a.key, true);
            } else {
                answer(&mut l, a, t0);
            }
            answered += 1;
        }
        rounds += 1;
        assert!(rounds < 50);
    }
    l.finish(t0);
    let mut sorted = all.clone();
    sorted.sort_by_key(|n| n.id.distance(&target));
    let got = &l.stats.closest;
    assert_eq!(got.len(), 8);
    // The result is the 8 closest of those that answered, in order.
    for w in got.windows(2) {
        assert!(w[0].id.distance(&target) < w[1].id.distance(&target));
    }
    assert!(l.stats.timeouts > 0);
    // Nodes farther than the 8th closest answering one were never asked
    // beyond what alpha allowed.
    assert!(l.stats.queries < 30, "{}", l.stats.queries);
}

#[test]
fn closer_nodes_from_answers_are_asked_next() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(3);
    let target = Id::random(&mut rng);
    let mut l = Lookup::new(
        LookupId(1),
        target,
        LookupKind::GetPeers,
        Id([0; 20]),
        limits(),
        t0,
    );
    l.add_nodes(&nodes(&mut rng, 3, 0), 0);
    let asks = l.pick();
    let close = NodeInfo {
        id: target.random_with_prefix(60, &mut rng),
        addr: addr(500),
    };
    let from = NodeInfo {
        id: asks[0].expected.unwrap(),
        addr: asks[0].addr,
    };
    let peers = [addr(900), addr(901), addr(900)];
    let fresh = l
        .on_response(&asks[0].key, from, 0, &[close], &peers, None, t0)
        .unwrap();
    assert_eq!(fresh, vec![addr(900), addr(901)]);
    let next = l.pick();
    assert_eq!(next[0].addr, close.addr);
    assert_eq!(next[0].depth, 1);
    // The same peers again are not reported twice.
    let from1 = NodeInfo {
        id: asks[1].expected.unwrap(),
        addr: asks[1].addr,
    };
    let again = l
        .on_response(&asks[1].key, from1, 0, &[], &peers, None, t0)
        .unwrap();
    assert!(again.is_empty());
}

#[test]
fn wrong_id_answers_are_ignored() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(4);
    let target = Id::random(&mut rng);
    let mut l = Lookup::new(
        LookupId(1),
        target,
        LookupKind::GetPeers,
        Id([0; 20]),
        limits(),
        t0,
    );
    l.add_nodes(&nodes(&mut rng, 3, 0), 0);
    let a = l.pick()[0];
    let liar = NodeInfo {
        id: target, // claims to be the target itself
        addr: a.addr,
    };
    let fake = [addr(777)];
    let fake_node = NodeInfo {
        id: target.random_with_prefix(150, &mut rng),
        addr: addr(778),
    };
    assert!(
        l.on_response(&a.key, liar, 0, &[fake_node], &fake, None, t0)
            .is_none()
    );
    assert_eq!(l.stats.mismatched, 1);
    assert_eq!(l.stats.peers, 0);
    assert!(l.pick().iter().all(|x| x.addr != fake_node.addr));
}

#[test]
fn bounded_whatever_answers_bring() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(5);
    let target = Id::random(&mut rng);
    let mut l = Lookup::new(
        LookupId(1),
        target,
        LookupKind::GetPeers,
        Id([0; 20]),
        limits(),
        t0,
    );
    l.add_nodes(&nodes(&mut rng, 3, 0), 0);
    let a = l.pick()[0];
    let from = NodeInfo {
        id: a.expected.unwrap(),
        addr: a.addr,
    };
    let flood = nodes(&mut rng, 10_000, 1000);
    let peers: Vec<SocketAddr> = (0..10_000).map(|i| addr(100_000 + i)).collect();
    let fresh = l
        .on_response(&a.key, from, 0, &flood, &peers, None, t0)
        .unwrap();
    assert!(l.candidates() <= 64);
    // All peers are reported, only 100 remembered for de-duplication.
    assert_eq!(fresh.len(), 10_000);
    assert_eq!(l.peers_seen.len(), 100);
    // Many ports on one IP: one candidate.
    let same_ip: Vec<NodeInfo> = (0..50)
        .map(|p| NodeInfo {
            id: target.random_with_prefix(100 + p, &mut rng),
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(9, 9, 9, 9)), 2000 + p as u16),
        })
        .collect();
    l.add_nodes(&same_ip, 1);
    let on_ip = l
        .cands
        .values()
        .filter(|c| c.info.addr.ip() == same_ip[0].addr.ip())
        .count();
    assert_eq!(on_ip, 1);
    // BEP 42 enforcement drops ids that do not match their (public) IP.
    let mut strict = limits();
    strict.enforce_node_id = true;
    let mut l = Lookup::new(
        LookupId(2),
        target,
        LookupKind::GetPeers,
        Id([0; 20]),
        strict,
        t0,
    );
    let public = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 1);
    l.add_nodes(
        &[NodeInfo {
            id: Id::random(&mut rng),
            addr: public,
        }],
        0,
    );
    assert_eq!(l.candidates(), 0);
    let good = Id::bep42_for(public.ip(), &mut rng);
    l.add_nodes(
        &[NodeInfo {
            id: good,
            addr: public,
        }],
        0,
    );
    assert_eq!(l.candidates(), 1);
}

#[test]
fn seeds_resolve_into_candidates() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(6);
    let target = Id::random(&mut rng);
    let mut l = Lookup::new(
        LookupId(1),
        target,
        LookupKind::Bootstrap,
        Id([0; 20]),
        limits(),
        t0,
    );
    l.add_seeds(&[addr(1), addr(1), addr(2)]);
    let asks = l.pick();
    assert_eq!(asks.len(), 2);
    assert!(asks.iter().all(|a| a.expected.is_none()));
    assert!(!l.is_finished());
    l.on_failure(&asks[1].key, true);
    let seed_node = NodeInfo {
        id: Id::random(&mut rng),
        addr: addr(1),
    };
    let more = nodes(&mut rng, 5, 10);
    l.on_response(&asks[0].key, seed_node, 0, &more, &[], None, t0)
        .unwrap();
    assert_eq!(l.candidates(), 2 + 6);
    while !l.is_finished() {
        let asks = l.pick();
        assert!(!asks.is_empty());
        for a in asks {
            answer(&mut l, &a, t0);
        }
    }
    l.finish(t0);
    assert_eq!(l.stats.closest.len(), 6);
    assert!(l.stats.closest.contains(&seed_node));
}
