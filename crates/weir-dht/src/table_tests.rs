use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::*;

fn addr(i: u32) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 6881)
}

/// An id sharing exactly `prefix` bits with the zero id, distinguished by `n`.
fn id_with_prefix(prefix: usize, n: u8) -> Id {
    let mut b = [0u8; 20];
    b[prefix / 8] = 0x80 >> (prefix % 8);
    b[19] |= n;
    if prefix == 159 {
        b[19] = 1; // only one id shares 159 bits with zero
    }
    Id(b)
}

fn node(prefix: usize, n: u8, a: u32) -> NodeInfo {
    NodeInfo {
        id: id_with_prefix(prefix, n),
        addr: addr(a),
    }
}

#[test]
fn only_the_bucket_holding_our_id_splits() {
    let t0 = Instant::now(); // test-epoch
    let mut t = RoutingTable::new(Id([0; 20]), TableConfig::default(), t0);
    // Nine nodes sharing 0 bits: the first split makes bucket 0 (far half)
    // and bucket 1 (our half); the far bucket then fills and stops at 8.
    for n in 0..9u8 {
        t.heard_response(node(0, n + 1, u32::from(n)), t0);
    }
    assert_eq!(t.bucket_count(), 2);
    assert_eq!(t.len(), 8);
    assert_eq!(t.replacement_count(), 1);
    // Nodes close to us keep splitting the last bucket.
    for p in 1..20usize {
        for n in 0..3u8 {
            t.heard_response(node(p, n + 1, 1000 + (p as u32) * 10 + u32::from(n)), t0);
        }
    }
    assert_eq!(t.len(), 8 + 19 * 3);
    assert!(t.bucket_count() <= 20, "{}", t.bucket_count());
    assert!(t.bucket_count() >= 12, "{}", t.bucket_count());
}

#[test]
fn liveness_follows_bep5() {
    let t0 = Instant::now(); // test-epoch
    let cfg = TableConfig::default();
    let mut t = RoutingTable::new(Id([0; 20]), cfg, t0);
    let a = node(3, 1, 1);
    assert_eq!(t.heard_response(a, t0), Insert::Inserted);
    let live = |t: &RoutingTable, now| t.get(&a.id).unwrap().liveness(now, &cfg);
    assert_eq!(live(&t, t0 + Duration::from_secs(14 * 60)), Liveness::Good);
    assert_eq!(
        live(&t, t0 + Duration::from_secs(15 * 60)),
        Liveness::Questionable
    );
    // A query from it within 15 minutes keeps it good.
    let q = t0 + Duration::from_secs(20 * 60);
    assert!(t.heard_query(&a, q));
    assert_eq!(live(&t, q + Duration::from_secs(60)), Liveness::Good);
    // Two failures in a row: bad. An answer resets the count.
    t.failed(&a.id, &a.addr, q);
    assert_eq!(live(&t, q), Liveness::Good);
    t.heard_response(a, q);
    t.failed(&a.id, &a.addr, q);
    assert_eq!(live(&t, q), Liveness::Good);
    t.failed(&a.id, &a.addr, q);
    assert_eq!(live(&t, q), Liveness::Bad);
    assert!(t.has_no_live_nodes(q));
    // A query from an unknown node is not an insertion.
    let b = node(4, 1, 2);
    assert!(!t.heard_query(&b, q));
    assert!(t.get(&b.id).is_none());
}

#[test]
fn full_bucket_pings_questionable_then_replaces() {
    let t0 = Instant::now(); // test-epoch
    let mut t = RoutingTable::new(Id([0; 20]), TableConfig::default(), t0);
    // Fill the far bucket (after the first split) with 8 nodes.
    t.heard_response(node(5, 1, 500), t0); // forces a split later
    for n in 0..8u8 {
        t.heard_response(node(0, n + 1, u32::from(n)), t0);
    }
    let later = t0 + Duration::from_secs(16 * 60);
    let newcomer = node(0, 100, 99);
    // All questionable now: the newcomer waits, the oldest is to be pinged.
    let Insert::Full(Some(ping)) = t.heard_response(newcomer, later) else {
        panic!("expected a ping candidate")
    };
    assert!(t.get(&newcomer.id).is_none());
    // A second newcomer while that ping is out asks for another ping.
    let Insert::Full(Some(ping2)) = t.heard_response(node(0, 101, 98), later) else {
        panic!()
    };
    assert_ne!(ping.id, ping2.id);
    // The pinged node fails twice (it had answered before): the newest
    // replacement takes its place.
    t.failed(&ping.id, &ping.addr, later);
    t.failed(&ping.id, &ping.addr, later);
    assert!(t.get(&ping.id).is_none());
    assert!(t.get(&node(0, 101, 98).id).is_some());
}

#[test]
fn one_node_per_ip_and_address_moves() {
    let t0 = Instant::now(); // test-epoch
    let mut t = RoutingTable::new(Id([0; 20]), TableConfig::default(), t0);
    let a = node(2, 1, 7);
    t.heard_response(a, t0);
    let mut other_port = node(3, 1, 7);
    other_port.addr.set_port(7000);
    assert_eq!(t.heard_response(other_port, t0), Insert::Rejected);
    // Same address, new id: the node restarted; the new id replaces it.
    let moved = NodeInfo {
        id: id_with_prefix(6, 1),
        addr: a.addr,
    };
    assert_eq!(t.heard_response(moved, t0), Insert::Inserted);
    assert!(t.get(&a.id).is_none());
    assert_eq!(t.id_at(&a.addr), Some(moved.id));
    // Our own id is never inserted.
    let me = NodeInfo {
        id: Id([0; 20]),
        addr: addr(55),
    };
    assert_eq!(t.heard_response(me, t0), Insert::Rejected);
}

#[test]
fn closest_are_sorted_and_exclude_bad() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(3);
    let mut t = RoutingTable::new(Id::random(&mut rng), TableConfig::default(), t0);
    for i in 0..500 {
        t.heard_response(
            NodeInfo {
                id: Id::random(&mut rng),
                addr: addr(i),
            },
            t0,
        );
    }
    let target = Id::random(&mut rng);
    let c = t.closest(&target, 8, true, t0);
    assert_eq!(c.len(), 8);
    for w in c.windows(2) {
        assert!(w[0].id.distance(&target) < w[1].id.distance(&target));
    }
    let best = c[0];
    t.failed(&best.id, &best.addr, t0);
    t.failed(&best.id, &best.addr, t0);
    let c2 = t.closest(&target, 8, true, t0);
    assert!(!c2.contains(&best));
    // Every node in the table is further than the 8th closest, or listed.
    let eighth = c[7].id.distance(&target);
    let closer = t
        .nodes()
        .filter(|n| n.info.id.distance(&target) <= eighth)
        .count();
    assert_eq!(closer, 8);
}

/// Whatever arrives, the table holds at most 160 buckets of k nodes and
/// as many replacements.
#[test]
fn size_is_bounded() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(9);
    let me = Id::random(&mut rng);
    let mut t = RoutingTable::new(me, TableConfig::default(), t0);
    for i in 0..50_000u32 {
        // Half random, half crowding near our id.
        let id = if i % 2 == 0 {
            Id::random(&mut rng)
        } else {
            me.random_with_prefix(rng.usize(100..160), &mut rng)
        };
        t.heard_response(NodeInfo { id, addr: addr(i) }, t0);
    }
    assert!(t.bucket_count() <= 160);
    assert!(t.len() <= 160 * 8, "{}", t.len());
    assert!(t.replacement_count() <= 160 * 8);
    assert!(t.len() > 100, "{}", t.len());
}

#[test]
fn refresh_targets_fall_in_stale_buckets() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(5);
    let me = Id::random(&mut rng);
    let mut t = RoutingTable::new(me, TableConfig::default(), t0);
    for i in 0..200 {
        t.heard_response(
            NodeInfo {
                id: Id::random(&mut rng),
                addr: addr(i),
            },
            t0,
        );
    }
    let n = t.bucket_count();
    assert!(
        t.refresh_targets(Duration::from_secs(900), t0, &mut rng, 200)
            .is_empty()
    );
    let later = t0 + Duration::from_secs(900);
    let targets = t.refresh_targets(Duration::from_secs(900), later, &mut rng, 200);
    assert_eq!(targets.len(), n);
    for (i, target) in targets.iter().enumerate() {
        assert_eq!(me.common_prefix(target), i);
    }
    assert!(
        t.refresh_targets(Duration::from_secs(900), later, &mut rng, 200)
            .is_empty()
    );
}

/// The bucket walk of `closest` gives what sorting every node gives.
#[test]
fn closest_matches_a_full_sort() {
    let t0 = Instant::now(); // test-epoch
    let mut rng = fastrand::Rng::with_seed(12);
    let me = Id::random(&mut rng);
    let mut t = RoutingTable::new(me, TableConfig::default(), t0);
    for i in 0..3000 {
        let id = if i % 3 == 0 {
            me.random_with_prefix(rng.usize(0..40), &mut rng)
        } else {
            Id::random(&mut rng)
        };
        t.heard_response(NodeInfo { id, addr: addr(i) }, t0);
    }
    for k in 0..300 {
        let target = if k % 2 == 0 {
            Id::random(&mut rng)
        } else {
            me.random_with_prefix(rng.usize(0..30), &mut rng)
        };
        let n = [1, 8, 16, 200][k % 4];
        let mut all: Vec<NodeInfo> = t.nodes().map(|x| x.info).collect();
        all.sort_by_key(|x| x.id.distance(&target));
        all.truncate(n);
        assert_eq!(
            t.closest(&target, n, true, t0),
            all,
            "target {target} n {n}"
        );
    }
}
