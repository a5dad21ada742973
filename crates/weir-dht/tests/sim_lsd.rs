//! LSD (BEP 14) on a simulated LAN in virtual time: a multicast group that
//! delivers every announce to every member (the sender too, as multicast
//! loopback does), with seeded delay and loss. No socket is opened and
//! nothing is multicast for real.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use weir_dht::lsd::{Announce, GROUP_V4, Lsd, LsdConfig, LsdError, LsdEvent};
use weir_dht::{Id, InfoHash};

/// A datagram in flight: (arrival, seq, to, from, bytes).
type InFlight = Reverse<(Duration, u64, usize, SocketAddr, Vec<u8>)>;

struct Lan {
    base: Instant,
    now: Duration,
    nodes: Vec<Lsd>,
    ips: Vec<IpAddr>,
    rng: fastrand::Rng,
    loss: f64,
    queue: BinaryHeap<InFlight>,
    seq: u64,
    /// Every announce sent: (time, sender, announce).
    sent: Vec<(Duration, usize, Announce)>,
    /// Every peer event: (time, node, info-hash, peer).
    learnt: Vec<(Duration, usize, InfoHash, SocketAddr)>,
}

impl Lan {
    fn new(n: usize, seed: u64, loss: f64) -> Self {
        let base = Instant::now(); // test-epoch
        let nodes = (0..n)
            .map(|i| {
                let cfg = LsdConfig {
                    port: 6881 + i as u16,
                    ..LsdConfig::default()
                };
                Lsd::new(cfg, seed * 1000 + i as u64, base)
            })
            .collect();
        let ips = (0..n)
            .map(|i| IpAddr::V4(Ipv4Addr::new(10, 9, 0, i as u8 + 1)))
            .collect();
        Self {
            base,
            now: Duration::ZERO,
            nodes,
            ips,
            rng: fastrand::Rng::with_seed(seed),
            loss,
            queue: BinaryHeap::new(),
            seq: 0,
            sent: Vec::new(),
            learnt: Vec::new(),
        }
    }

    fn multicast(&mut self, from: SocketAddr, data: Vec<u8>) {
        for to in 0..self.nodes.len() {
            if self.rng.f64() < self.loss {
                continue;
            }
            let at = self.now + Duration::from_micros(self.rng.u64(200..5_000));
            self.seq += 1;
            self.queue
                .push(Reverse((at, self.seq, to, from, data.clone())));
        }
    }

    fn drain(&mut self, i: usize) {
        while let Some((to, data)) = self.nodes[i].poll_transmit() {
            assert_eq!(to, GROUP_V4);
            assert!(data.len() <= weir_dht::lsd::MAX_MESSAGE);
            let a = Announce::decode(&data).expect("we send valid announces");
            self.sent.push((self.now, i, a));
            let from = SocketAddr::new(self.ips[i], 6771);
            self.multicast(from, data);
        }
        while let Some(LsdEvent::Peer { info_hash, addr }) = self.nodes[i].poll_event() {
            self.learnt.push((self.now, i, info_hash, addr));
        }
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        loop {
            let next_timer = (0..self.nodes.len())
                .filter_map(|i| self.nodes[i].poll_timeout().map(|t| (t - self.base, i)))
                .min();
            let next_packet = self.queue.peek().map(|Reverse(p)| p.0);
            let t = match (next_timer, next_packet) {
                (Some((a, _)), Some(b)) => a.min(b),
                (Some((a, _)), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            let now = self.base + self.now;
            if next_packet == Some(t) {
                let Some(Reverse((_, _, to, from, data))) = self.queue.pop() else {
                    break;
                };
                let _ = self.nodes[to].handle_datagram(from, &data, now);
                self.drain(to);
            } else if let Some((_, i)) = next_timer {
                self.nodes[i].handle_timeout(now);
                self.drain(i);
            }
        }
        self.now = until;
    }
}

fn ih(n: u8) -> InfoHash {
    Id([n; 20])
}

/// 20 nodes, 10 torrents, each node in 3 of them: every node learns every
/// other member of its swarms within 2 seconds, announces each torrent every 5
/// minutes and sends at most one announce a minute, and ignores its own.
#[test]
fn lan_peers_learn_each_other() {
    let mut lan = Lan::new(20, 1, 0.01);
    let mut members: BTreeMap<InfoHash, BTreeSet<usize>> = BTreeMap::new();
    for i in 0..20usize {
        for t in [i % 10, (i + 3) % 10, (i + 7) % 10] {
            let now = lan.base + lan.now;
            assert!(lan.nodes[i].add_torrent(ih(t as u8), now));
            members.entry(ih(t as u8)).or_default().insert(i);
        }
        lan.drain(i);
    }
    lan.run_for(Duration::from_secs(31 * 60));

    // Who learnt whom, and when.
    let mut first: BTreeMap<(usize, InfoHash, SocketAddr), Duration> = BTreeMap::new();
    for (t, i, h, p) in &lan.learnt {
        first.entry((*i, *h, *p)).or_insert(*t);
    }
    let mut expected = 0;
    let mut late = 0;
    for (h, m) in &members {
        for &i in m {
            for &j in m {
                if i == j {
                    continue;
                }
                expected += 1;
                let peer = SocketAddr::new(lan.ips[j], 6881 + j as u16);
                match first.get(&(i, *h, peer)) {
                    Some(t) if *t < Duration::from_secs(2) => {}
                    Some(_) => late += 1,
                    None => panic!("node {i} never learnt node {j} for {h}"),
                }
            }
        }
    }
    // 1% loss: a lost first announce is made up 5 minutes later.
    println!(
        "LSD: {expected} (node, swarm peer) pairs, {late} learnt only after the first announce was lost"
    );
    assert!(late <= expected / 10, "{late}/{expected}");
    // Nobody reports itself.
    assert!(lan.learnt.iter().all(|(_, i, _, p)| p.ip() != lan.ips[*i]));

    // Rates: one announce a minute at most, each torrent every 5 minutes.
    for i in 0..20 {
        let mine: Vec<&(Duration, usize, Announce)> =
            lan.sent.iter().filter(|s| s.1 == i).collect();
        for w in mine.windows(2) {
            assert!(w[1].0 - w[0].0 >= Duration::from_secs(60));
        }
        let mut per_torrent: BTreeMap<InfoHash, Vec<Duration>> = BTreeMap::new();
        for (t, _, a) in &mine {
            for h in &a.info_hashes {
                per_torrent.entry(*h).or_default().push(*t);
            }
        }
        for times in per_torrent.values() {
            // At 0, 5, ..., 30 minutes.
            assert_eq!(times.len(), 7, "{times:?}");
            for w in times.windows(2) {
                assert!(w[1] - w[0] >= Duration::from_secs(300));
                assert!(w[1] - w[0] <= Duration::from_secs(301));
            }
        }
        let s = lan.nodes[i].stats();
        // Its own announces came back by loopback and were ignored.
        assert!(s.own >= s.sent * 9 / 10 && s.own <= s.sent, "{s:?}");
    }
    let sends = lan.sent.len();
    println!("LSD: {sends} announces sent by 20 nodes in 31 minutes (7 each)");
    assert_eq!(sends, 20 * 7);
}

/// 100 torrents on one node take turns: 26 info-hashes fit one announce,
/// at most one announce a minute, each torrent every 5 to 6 minutes.
#[test]
fn many_torrents_round_robin() {
    let mut lan = Lan::new(2, 2, 0.0);
    for t in 0..100u8 {
        let now = lan.base + lan.now;
        lan.nodes[0].add_torrent(ih(t), now);
        lan.nodes[1].add_torrent(ih(t), now);
    }
    lan.drain(0);
    lan.drain(1);
    lan.run_for(Duration::from_secs(30 * 60));
    let mine: Vec<&(Duration, usize, Announce)> = lan.sent.iter().filter(|s| s.1 == 0).collect();
    assert!(mine.iter().all(|s| s.2.info_hashes.len() <= 26));
    let mut per: BTreeMap<InfoHash, Vec<Duration>> = BTreeMap::new();
    for (t, _, a) in &mine {
        for h in &a.info_hashes {
            per.entry(*h).or_default().push(*t);
        }
    }
    assert_eq!(per.len(), 100);
    for times in per.values() {
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                gap >= Duration::from_secs(300) && gap <= Duration::from_secs(360),
                "{gap:?}"
            );
        }
    }
    let learnt: BTreeSet<InfoHash> = lan
        .learnt
        .iter()
        .filter(|l| l.1 == 1)
        .map(|l| l.2)
        .collect();
    assert_eq!(learnt.len(), 100, "node 1 learnt node 0 in every torrent");
    println!(
        "LSD: {} announces for 100 torrents in 30 minutes",
        mine.len()
    );
    // Four announces carry the 100 (26 each); each batch is due again 5
    // minutes later: 4 per 5 minutes.
    assert!((24..=28).contains(&mine.len()), "{}", mine.len());
}

/// A host flooding announces (many ports, our torrents) and garbage: the
/// peers reported stay within the per-source limit, garbage is refused
/// with typed errors, memory stays bounded.
#[test]
fn flood_and_garbage_are_bounded() {
    let t0 = Instant::now(); // test-epoch
    let mut lsd = Lsd::new(LsdConfig::default(), 3, t0);
    for t in 0..5u8 {
        lsd.add_torrent(ih(t), t0);
    }
    while lsd.poll_transmit().is_some() {}
    let flooder = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)), 6771);
    let mut rng = fastrand::Rng::with_seed(4);
    let mut events = 0;
    // 10,000 announces over 100 s, 5 of our torrents each, random ports.
    for k in 0..10_000u64 {
        let now = t0 + Duration::from_millis(k * 10);
        let a = Announce {
            host: "239.192.152.143:6771".into(),
            port: rng.u16(1..),
            info_hashes: (0..5).map(ih).collect(),
            cookie: Some(format!("x{k}")),
        };
        lsd.handle_datagram(flooder, &a.encode(), now).unwrap();
        while lsd.poll_event().is_some() {
            events += 1;
        }
    }
    // 6 announces a minute from one source, over 100 s: 2 windows.
    println!("LSD flood: 10000 announces, {events} peers reported");
    assert!((5 * 6..=5 * 6 * 2).contains(&events), "{events}");
    assert_eq!(lsd.stats().rate_limited, 10_000 - lsd.stats().received);
    // Another host is not locked out by the flooder.
    let other = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 10)), 6771);
    let a = Announce {
        host: String::new(),
        port: 7000,
        info_hashes: vec![ih(1), ih(200)],
        cookie: None,
    };
    lsd.handle_datagram(other, &a.encode(), t0 + Duration::from_secs(100))
        .unwrap();
    assert_eq!(
        lsd.poll_event(),
        Some(LsdEvent::Peer {
            info_hash: ih(1),
            addr: SocketAddr::new(other.ip(), 7000)
        })
    );
    assert_eq!(lsd.poll_event(), None, "not our torrent: not reported");
    // Garbage.
    assert_eq!(
        lsd.handle_datagram(other, b"\x00\x01", t0),
        Err(LsdError::BadRequestLine)
    );
    assert_eq!(
        lsd.handle_datagram(other, &[0xff; 10], t0),
        Err(LsdError::NotText)
    );
    assert_eq!(
        lsd.handle_datagram(other, &[b'x'; 5000], t0),
        Err(LsdError::TooLarge(5000))
    );
    assert_eq!(lsd.stats().malformed, 3);
    // Our own cookie is ignored.
    let own = Announce {
        host: String::new(),
        port: 6881,
        info_hashes: vec![ih(1)],
        cookie: Some(lsd.cookie().to_string()),
    };
    lsd.handle_datagram(other, &own.encode(), t0 + Duration::from_secs(500))
        .unwrap();
    assert_eq!(lsd.poll_event(), None);
    assert_eq!(lsd.stats().own, 1);
}
