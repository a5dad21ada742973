//! The DHT in a simulated network of 1,000+ nodes, in virtual time: lookup
//! hops and time, announce then find, churn, hostile nodes. Figures are
//! printed (`cargo test -p weir-dht --test sim_dht -- --nocapture`) and
//! asserted with lower and upper bounds.

mod sim;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use sim::{Hostile, Net, NetConfig, build, percentile, true_closest};
use weir_dht::{Config, Event, Id, LookupId, LookupStats};

const N: usize = 1000;

fn settle_build(hostile: &[(Hostile, usize)], cfg: &Config, seed: u64) -> Net {
    let wall = std::time::Instant::now();
    let net = build(
        N,
        hostile,
        NetConfig {
            seed,
            ..NetConfig::default()
        },
        cfg,
        Duration::from_millis(20),
        Duration::from_secs(60),
    );
    let nodes: Vec<usize> = net.nodes.iter().map(|_| 0).collect();
    println!(
        "built {} nodes ({} hostile) in {:.1} s of virtual time, {:.2} s wall, {} datagrams",
        nodes.len(),
        hostile.iter().map(|h| h.1).sum::<usize>(),
        net.now.as_secs_f64(),
        wall.elapsed().as_secs_f64(),
        net.delivered
    );
    net
}

fn honest_net() -> Net {
    static NET: OnceLock<Net> = OnceLock::new();
    NET.get_or_init(|| settle_build(&[], &Config::default(), 1))
        .clone()
}

/// Runs until every lookup in `pending` reported `LookupDone` (at most
/// `limit` of virtual time); returns the stats and the peers each found.
fn run_lookups(
    net: &mut Net,
    mut pending: Vec<(usize, LookupId)>,
    limit: Duration,
) -> Vec<(usize, LookupId, Option<LookupStats>, BTreeSet<SocketAddr>)> {
    let mut peak = (0usize, 0usize);
    let mut out: Vec<_> = pending
        .iter()
        .map(|&(n, l)| (n, l, None, BTreeSet::new()))
        .collect();
    let until = net.now + limit;
    while !pending.is_empty() {
        let stopped = net.run_until(until, |n| !n.events.is_empty());
        for (node, _, ev) in std::mem::take(&mut net.events) {
            match ev {
                Event::Peers { lookup, peers, .. } => {
                    if let Some(o) = out.iter_mut().find(|o| o.0 == node && o.1 == lookup) {
                        o.3.extend(peers);
                    }
                }
                Event::LookupDone { lookup, stats, .. } => {
                    if let Some(o) = out.iter_mut().find(|o| o.0 == node && o.1 == lookup) {
                        o.2 = Some(stats);
                    }
                    pending.retain(|p| !(p.0 == node && p.1 == lookup));
                }
                _ => {}
            }
        }
        // Memory while the lookups run (each node has one of them).
        for &(n, _) in &pending {
            let s = net.dht(n).stats();
            peak.0 = peak.0.max(s.largest_lookup);
            peak.1 = peak.1.max(s.transactions);
        }
        if !stopped {
            break;
        }
    }
    PEAK_CANDIDATES.fetch_max(peak.0, std::sync::atomic::Ordering::Relaxed);
    PEAK_TRANSACTIONS.fetch_max(peak.1, std::sync::atomic::Ordering::Relaxed);
    out
}

/// Largest number of candidates one lookup held, and of transactions one
/// node held, while lookups ran (over every test of this binary).
static PEAK_CANDIDATES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PEAK_TRANSACTIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs until each announce in `pending` reported `Announced`; returns how
/// many nodes acknowledged each.
fn run_announces(
    net: &mut Net,
    mut pending: Vec<(usize, LookupId)>,
    limit: Duration,
) -> Vec<usize> {
    let mut acked = Vec::new();
    let until = net.now + limit;
    while !pending.is_empty() {
        let stopped = net.run_until(until, |n| !n.events.is_empty());
        for (node, _, ev) in std::mem::take(&mut net.events) {
            if let Event::Announced {
                lookup, acked: a, ..
            } = ev
            {
                if pending.contains(&(node, lookup)) {
                    acked.push(a);
                    pending.retain(|p| *p != (node, lookup));
                }
            }
        }
        if !stopped {
            break;
        }
    }
    acked
}

fn summary(name: &str, v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    let med = percentile(&mut v, 0.5);
    let p90 = percentile(&mut v, 0.9);
    println!("{name}: median {med:.3}, p90 {p90:.3}, n {}", v.len());
    (med, p90)
}

#[test]
fn find_node_lookups_converge_on_the_closest_nodes() {
    let mut net = honest_net();
    let mut rng = fastrand::Rng::with_seed(11);
    let honest = net.honest();
    let mut pending = Vec::new();
    let mut targets = Vec::new();
    let now = net.instant();
    for _ in 0..100 {
        let n = honest[rng.usize(..honest.len())];
        let target = Id::random(&mut rng);
        let l = net.dht(n).find_node(target, now).unwrap();
        net.flush(n);
        pending.push((n, l));
        targets.push(target);
    }
    let done = run_lookups(&mut net, pending, Duration::from_secs(120));
    let mut hops = Vec::new();
    let mut secs = Vec::new();
    let mut queries = Vec::new();
    let mut exact = 0;
    let mut overlap = 0usize;
    for (o, target) in done.iter().zip(&targets) {
        let stats = o.2.as_ref().expect("every lookup finishes");
        let truth = true_closest(&net, target, 8);
        let found: Vec<Id> = stats.closest.iter().map(|n| n.id).collect();
        if found.first() == truth.first() {
            exact += 1;
        }
        overlap += found.iter().filter(|id| truth.contains(id)).count();
        hops.push(stats.hops as f64);
        secs.push(stats.elapsed.as_secs_f64());
        queries.push(stats.queries as f64);
    }
    let (hop_med, hop_p90) = summary("find_node hops", &hops);
    let (t_med, t_p90) = summary("find_node time s", &secs);
    let (q_med, _) = summary("find_node queries", &queries);
    println!(
        "closest found exactly: {exact}/100; mean overlap with the true 8 closest: {:.2}",
        overlap as f64 / 100.0
    );
    assert!(exact >= 95, "closest node found in {exact}/100 lookups");
    assert!(overlap >= 100 * 7, "overlap {overlap}");
    assert!((1.0..=5.0).contains(&hop_med), "hops median {hop_med}");
    assert!((1.0..=7.0).contains(&hop_p90), "hops p90 {hop_p90}");
    // One-way latency 10-120 ms: a round trip is 20-240 ms.
    assert!((0.1..=1.5).contains(&t_med), "time median {t_med}");
    assert!((0.2..=4.0).contains(&t_p90), "time p90 {t_p90}");
    assert!((8.0..=60.0).contains(&q_med), "queries median {q_med}");
}

/// Announces `pairs` info-hashes, each from one node, then looks each up
/// from another node; returns (found, acks, time to first peer, lookup
/// time) per pair.
fn announce_then_find(
    net: &mut Net,
    pairs: usize,
    rng: &mut fastrand::Rng,
    avoid: &BTreeSet<usize>,
) -> Vec<Found> {
    let honest: Vec<usize> = net
        .honest()
        .into_iter()
        .filter(|i| !avoid.contains(i))
        .collect();
    let now = net.instant();
    let mut jobs = Vec::new();
    let mut announces = Vec::new();
    for p in 0..pairs {
        let a = honest[rng.usize(..honest.len())];
        let b = loop {
            let b = honest[rng.usize(..honest.len())];
            if b != a {
                break b;
            }
        };
        let ih = Id::random(rng);
        let port = 10_000 + p as u16;
        let l = net.dht(a).announce(ih, Some(port), now).unwrap();
        net.flush(a);
        announces.push((a, l));
        jobs.push((a, b, ih, port));
    }
    let acks = run_announces(net, announces, Duration::from_secs(120));
    assert_eq!(acks.len(), pairs, "every announce ends");
    let now = net.instant();
    let mut lookups = Vec::new();
    for &(_, b, ih, _) in &jobs {
        let l = net.dht(b).get_peers(ih, now).unwrap();
        net.flush(b);
        lookups.push((b, l));
    }
    let done = run_lookups(net, lookups, Duration::from_secs(120));
    jobs.iter()
        .zip(done)
        .zip(acks)
        .map(|((&(a, _, _, port), o), acked)| {
            let want = SocketAddr::new(net.nodes[a].addr.ip(), port);
            let stats = o.2.expect("lookup finishes");
            let fake = o.3.iter().filter(|p| is_fake(p)).count();
            Found {
                found: o.3.contains(&want),
                acked,
                first_peer: stats.first_peer_after,
                elapsed: stats.elapsed,
                fake,
            }
        })
        .collect()
}

/// What one announce-then-find gave.
struct Found {
    found: bool,
    acked: usize,
    first_peer: Option<Duration>,
    elapsed: Duration,
    /// Peers reported at the hostile nodes' made-up addresses.
    fake: usize,
}

fn is_fake(p: &SocketAddr) -> bool {
    matches!(p.ip(), std::net::IpAddr::V4(v4) if v4.octets()[..3] == [203, 0, 113])
}

fn report(name: &str, r: &[Found]) -> (usize, f64, f64, f64) {
    let found = r.iter().filter(|x| x.found).count();
    let acks: Vec<f64> = r.iter().map(|x| x.acked as f64).collect();
    let first: Vec<f64> = r
        .iter()
        .filter_map(|x| x.first_peer.map(|d| d.as_secs_f64()))
        .collect();
    let total: Vec<f64> = r.iter().map(|x| x.elapsed.as_secs_f64()).collect();
    let fake: usize = r.iter().map(|x| x.fake).sum();
    println!(
        "{name}: found {found}/{}, fake peers reported alongside: {fake}",
        r.len()
    );
    let (ack_med, _) = summary(&format!("{name} announce acks"), &acks);
    let (first_med, _) = summary(&format!("{name} time to first peer s"), &first);
    let (_, total_p90) = summary(&format!("{name} get_peers time s"), &total);
    (found, ack_med, first_med, total_p90)
}

#[test]
fn announce_then_find_in_1000_nodes() {
    let mut net = honest_net();
    let mut rng = fastrand::Rng::with_seed(21);
    let r = announce_then_find(&mut net, 40, &mut rng, &BTreeSet::new());
    let (found, ack_med, first_med, total_p90) = report("announce/find", &r);
    assert_eq!(found, 40, "every announced peer is found");
    assert!((6.0..=8.0).contains(&ack_med), "acks {ack_med}");
    // Peers are reported before the lookup ends.
    assert!((0.05..=1.5).contains(&first_med), "first peer {first_med}");
    let firsts_before_end = r
        .iter()
        .filter(|x| x.first_peer.is_some_and(|f| f < x.elapsed))
        .count();
    assert!(
        firsts_before_end >= 30,
        "{firsts_before_end}/40 streamed before the end"
    );
    assert!(
        (0.2..=4.0).contains(&total_p90),
        "get_peers p90 {total_p90}"
    );
}

/// A fifth of the nodes vanish at once; then, while the lookups run,
/// another tenth leave and as many new nodes join (one every 0.3 s):
/// lookups still find the peers.
#[test]
fn churn_lookups_still_succeed() {
    let mut net = honest_net();
    let mut rng = fastrand::Rng::with_seed(31);
    let mut honest = net.honest();
    rng.shuffle(&mut honest[1..]);
    for &i in honest.iter().skip(1).take(N / 5) {
        net.leave(i);
    }
    let leaving: Vec<usize> = honest
        .iter()
        .skip(1 + N / 5)
        .take(N / 10)
        .copied()
        .collect();
    let start = net.now;
    let alive = net.honest();
    for (n, &i) in leaving.iter().enumerate() {
        let at = start + Duration::from_millis(300 * n as u64);
        net.schedule_leave(at, i);
        let cfg = Config {
            bootstrap: vec![net.nodes[alive[rng.usize(..alive.len())]].addr],
            ..Config::default()
        };
        net.schedule_join(at + Duration::from_millis(150), cfg);
    }
    println!(
        "churn: {} nodes left at once, {} leave and {} join over {:.0} s",
        N / 5,
        leaving.len(),
        leaving.len(),
        0.3 * leaving.len() as f64
    );
    let avoid: BTreeSet<usize> = leaving.iter().copied().collect();
    let mut r = Vec::new();
    for round in 0..3 {
        r.extend(announce_then_find(&mut net, 15, &mut rng, &avoid));
        println!(
            "churn round {round} done at {:.1} s, {} nodes online",
            (net.now - start).as_secs_f64(),
            net.honest().len()
        );
    }
    assert!(
        net.now - start < Duration::from_millis(300 * leaving.len() as u64),
        "churn still going on during the last round"
    );
    let (found, ack_med, _, total_p90) = report("churn", &r);
    assert!(found >= 43, "found {found}/45 under churn");
    assert!((4.0..=8.0).contains(&ack_med), "acks {ack_med}");
    assert!(
        (0.3..=8.0).contains(&total_p90),
        "get_peers p90 {total_p90}"
    );
}

const HOSTILE: [(Hostile, usize); 5] = [
    (Hostile::Garbage, 40),
    (Hostile::HugeNodes, 40),
    (Hostile::Silent, 40),
    (Hostile::Liar, 40),
    (Hostile::FakePeers, 40),
];

/// Memory bounds that hold for every honest node whatever the hostile ones
/// sent.
fn assert_bounded(net: &mut Net, cfg: &Config) {
    let mut worst = weir_dht::Stats::default();
    for i in net.honest() {
        let s = net.dht(i).stats();
        worst.nodes = worst.nodes.max(s.nodes);
        worst.replacements = worst.replacements.max(s.replacements);
        worst.lookup_candidates = worst.lookup_candidates.max(s.lookup_candidates);
        worst.transactions = worst.transactions.max(s.transactions);
        worst.queued = worst.queued.max(s.queued);
        worst.stored_peers = worst.stored_peers.max(s.stored_peers);
        worst.malformed += s.malformed;
    }
    println!(
        "worst honest node: {} nodes, {} replacements, {} lookup candidates, {} transactions, {} queued, {} stored peers; {} malformed datagrams in all",
        worst.nodes,
        worst.replacements,
        worst.lookup_candidates,
        worst.transactions,
        worst.queued,
        worst.stored_peers,
        worst.malformed
    );
    assert!(worst.nodes <= 160 * cfg.table.k);
    assert!(worst.replacements <= 160 * cfg.table.k);
    assert!(worst.lookup_candidates <= (cfg.max_lookups + 4) * (cfg.max_candidates + 16));
    assert!(worst.transactions <= cfg.max_queued + 100 * 4 + 32);
    assert!(worst.queued <= cfg.max_queued);
    assert!(worst.stored_peers <= cfg.store.max_total);
    assert!(worst.malformed > 0, "the garbage reached the honest nodes");
}

fn hostile_run(enforce: bool, seed: u64) {
    let cfg = Config {
        enforce_node_id: enforce,
        ..Config::default()
    };
    let mut net = settle_build(&HOSTILE, &cfg, seed);
    let mut rng = fastrand::Rng::with_seed(seed + 100);
    let r = announce_then_find(&mut net, 30, &mut rng, &BTreeSet::new());
    let name = if enforce {
        "hostile, BEP 42 enforced"
    } else {
        "hostile"
    };
    let (found, ack_med, _, total_p90) = report(name, &r);
    assert_bounded(&mut net, &cfg);
    let fake: usize = r.iter().map(|x| x.fake).sum();
    assert!(fake > 0, "{name}: the fake peers reached the lookups");
    let peak = PEAK_CANDIDATES.load(std::sync::atomic::Ordering::Relaxed);
    let peak_tx = PEAK_TRANSACTIONS.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{name}: peak candidates in one lookup {peak}, peak transactions on one node {peak_tx}"
    );
    assert!(
        (8..=cfg.max_candidates + 16).contains(&peak),
        "peak candidates {peak}"
    );
    assert!(
        (1..=cfg.max_in_flight * 2 + 32).contains(&peak_tx),
        "peak transactions {peak_tx}"
    );
    assert!(found >= 29, "{name}: found {found}/30");
    assert!((4.0..=8.0).contains(&ack_med), "{name}: acks {ack_med}");
    assert!(
        (0.2..=8.0).contains(&total_p90),
        "{name}: get_peers p90 {total_p90}"
    );
}

/// 200 hostile nodes among 1,000 honest ones (garbage, huge node lists,
/// silent, consistent liars about ids, fake peers): announced peers are
/// still found, and memory stays within bounds.
#[test]
fn hostile_nodes_do_not_stop_lookups() {
    hostile_run(false, 41);
}

/// The same with BEP 42 enforced (the liars' made-up ids are refused
/// outright).
#[test]
fn hostile_nodes_with_bep42_enforced() {
    hostile_run(true, 51);
}
