//! A flood of known peers (issue 9): one session downloads two torrents
//! (512 and 384 MiB) whose trackers hand out about 2,500 addresses, of
//! which 26 are real seeders (20 for the first torrent, 6 for the second,
//! each on a 0.5 MB/s link). Of the others most refuse at once (a reset
//! 20 ms later), some refuse only after 3 s, some never answer (the 15 s
//! connect timeout). The first announce returns each whole swarm in
//! answers of 200, more than the 1,000-address book holds; later ones
//! every 20 s return random samples. The session's limits are small so
//! the flood presses on them: at most 6 dials in progress and 8 peers over
//! the session, 4 dials and 5 peers per torrent.
//!
//! Checked after every step of the run, as the simulator sees it (dials
//! asked for and not yet answered, connections past their handshake) and
//! against the session's own counters (they must agree): every half-open
//! and peer limit holds, globally and per torrent, and is reached (the
//! flood saturates it); the books stay at their bound; enough real seeders
//! are found to fill every peer slot; both downloads complete, intact, no
//! sooner than the peer limit allows and within 450 s of virtual time.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use weir_sim::{
    LinkConfig, NodeConfig, NodeId, Payload, Proto, Source, TorrentSpec, TransferConfig,
    TransferId, Unreachable, World,
};

const GLOBAL_PEERS: usize = 8;
const GLOBAL_HALF_OPEN: usize = 6;
const PER_PEERS: usize = 5;
const PER_HALF_OPEN: usize = 4;
/// Fake addresses per torrent, by behaviour.
const FAST: u32 = 1200;
const SLOW: u32 = 30;
const SILENT: u32 = 8;
/// Real seeders per torrent.
const SEEDERS: [usize; 2] = [20, 6];
/// Each seeder's link rate (bytes/s).
const SEED_RATE: u64 = 500_000;
/// Tracker answers: one every this often, of at most this many addresses.
const ANNOUNCE: Duration = Duration::from_secs(20);
const ANSWER: usize = 200;
const DEADLINE: Duration = Duration::from_secs(450);
/// Known addresses per torrent (fewer than a swarm has).
const BOOK: usize = 1000;

fn fake(torrent: u32, i: u32) -> SocketAddr {
    let ip = Ipv4Addr::from(0x0a01_0000 + (torrent << 14) + i);
    SocketAddr::new(IpAddr::V4(ip), 6881)
}

#[derive(Default, Debug)]
struct Peaks {
    dialing: usize,
    peers: usize,
    dialing_of: [usize; 2],
    peers_of: [usize; 2],
    known_of: [usize; 2],
}

#[test]
fn dials_and_peers_stay_within_the_limits_under_a_flood() {
    let mut w = World::new(21);
    w.net.absent = Unreachable::Refuse {
        after: Duration::from_millis(20),
    };
    let specs = [
        TorrentSpec::new("flood-a", Payload::synthetic(512 << 20, 1 << 20, 21)),
        TorrentSpec::new("flood-b", Payload::synthetic(384 << 20, 1 << 20, 22)),
    ];
    let leecher = w.add_node(
        NodeConfig::new()
            .name("leecher")
            .listen_bt(None)
            .with(TransferConfig::leech(&specs[0]))
            .with(TransferConfig::leech(&specs[1]))
            .configure(|c| {
                c.global.max_peers = GLOBAL_PEERS;
                c.global.max_half_open = GLOBAL_HALF_OPEN;
                c.per_transfer.max_peers = PER_PEERS;
                c.per_transfer.max_half_open = PER_HALF_OPEN;
                c.book.max_known = BOOK;
                c.book.max_per_source = BOOK * 3 / 5;
            }),
    );
    let ts: Vec<TransferId> = w.node(leecher).transfers();
    // The swarms: fakes of three kinds, and the real seeders, shuffled.
    let mut rng = fastrand::Rng::with_seed(21);
    let mut swarms: Vec<Vec<SocketAddr>> = Vec::new();
    let mut real: Vec<BTreeSet<SocketAddr>> = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        let mut addrs: Vec<SocketAddr> = (0..FAST + SLOW + SILENT)
            .map(|i| fake(k as u32, i))
            .collect();
        for (i, a) in addrs.iter().enumerate() {
            let i = i as u32;
            if i >= FAST + SLOW {
                w.set_unreachable(a.ip(), Unreachable::Silent);
            } else if i >= FAST {
                w.set_unreachable(
                    a.ip(),
                    Unreachable::Refuse {
                        after: Duration::from_secs(3),
                    },
                );
            }
        }
        let mut seeds = BTreeSet::new();
        for j in 0..SEEDERS[k] {
            let s = w.add_node(NodeConfig::seeder(spec).name(&format!("seed-{k}-{j}")));
            w.set_link_sym(
                s,
                leecher,
                LinkConfig::new(Duration::from_millis(10 + 5 * j as u64), SEED_RATE),
            );
            let a = w.node(s).bt_addr().expect("listens");
            seeds.insert(a);
            addrs.push(a);
        }
        rng.shuffle(&mut addrs);
        swarms.push(addrs);
        real.push(seeds);
    }
    // The first announce returns the whole swarm in answers of 200 (the
    // book takes what its quotas allow, from the tracker and the DHT);
    // later announces return a random sample.
    for (k, swarm) in swarms.iter().enumerate() {
        for (i, chunk) in swarm.chunks(ANSWER).enumerate() {
            let source = if i % 2 == 0 {
                Source::Tracker
            } else {
                Source::Dht
            };
            w.add_peers(leecher, ts[k], Proto::Bt, chunk, source);
        }
    }
    schedule_announces(&mut w, leecher, &ts, swarms, 21);
    let mut p = Peaks::default();
    let mut mismatch = None;
    let done = w.run_until(DEADLINE, |w| {
        let s = w.node(leecher).session();
        let (d, n) = (w.dials_in_progress(leecher), w.peers(leecher));
        if (d, n) != (s.counts().dialing, s.counts().peers) && mismatch.is_none() {
            mismatch = Some((w.now(), d, n, s.counts()));
        }
        p.dialing = p.dialing.max(d);
        p.peers = p.peers.max(n);
        for (k, &t) in ts.iter().enumerate() {
            let (d, n) = (w.dials_in_progress_of(leecher, t), w.peers_of(leecher, t));
            let c = s.transfer_counts(t).expect("known");
            if (d, n) != (c.dialing, c.peers) && mismatch.is_none() {
                mismatch = Some((w.now(), d, n, c));
            }
            p.dialing_of[k] = p.dialing_of[k].max(d);
            p.peers_of[k] = p.peers_of[k].max(n);
            let info = s.info(t, w.instant()).expect("known");
            p.known_of[k] = p.known_of[k].max(info.known);
        }
        w.node(leecher).completed_at().is_some()
    });
    let node = w.node(leecher);
    let dials = node.dials();
    // Real seeders each torrent connected to.
    let mut found = [0usize; 2];
    for (k, &t) in ts.iter().enumerate() {
        let connected: BTreeSet<SocketAddr> = dials
            .iter()
            .filter(|d| d.transfer == Some(t) && real[k].contains(&d.addr))
            .filter(|d| matches!(d.result, Some((_, Ok(())))))
            .map(|d| d.addr)
            .collect();
        found[k] = connected.len();
    }
    let failed = dials
        .iter()
        .filter(|d| matches!(&d.result, Some((_, Err(_)))))
        .count();
    let times: Vec<String> = ts
        .iter()
        .map(|&t| {
            node.completed_at_of(t)
                .map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()))
        })
        .collect();
    eprintln!(
        "{} dials ({failed} failed); peaks: {} dialling (limit {GLOBAL_HALF_OPEN}), {} peers \
         (limit {GLOBAL_PEERS}); per torrent: dialling {:?} (limit {PER_HALF_OPEN}), peers {:?} \
         (limit {PER_PEERS}), known {:?} (book {BOOK}); real seeders connected {found:?} of \
         {SEEDERS:?}; complete at {times:?}",
        dials.len(),
        p.dialing,
        p.peers,
        p.dialing_of,
        p.peers_of,
        p.known_of,
    );
    assert_eq!(
        mismatch, None,
        "the simulator's counts and the session's differ"
    );
    assert!(done, "not complete by {DEADLINE:?}: {times:?}");
    // Every limit holds, and the flood reached it.
    assert_eq!(p.dialing, GLOBAL_HALF_OPEN, "global half-open");
    assert_eq!(p.peers, GLOBAL_PEERS, "global peers");
    assert_eq!(p.dialing_of, [PER_HALF_OPEN; 2], "half-open per torrent");
    assert!(
        p.peers_of.iter().all(|&n| n <= PER_PEERS),
        "peers per torrent"
    );
    assert_eq!(
        p.peers_of[0], PER_PEERS,
        "torrent a (20 seeders) fills its peer limit"
    );
    assert_eq!(
        p.known_of, [BOOK; 2],
        "known addresses: a full, bounded book"
    );
    // The seeders were found among the flood: enough to fill every peer
    // slot the limits gave each torrent.
    assert!(
        found[0] >= PER_PEERS,
        "torrent a connected {} seeders",
        found[0]
    );
    assert!(
        found[1] >= GLOBAL_PEERS - PER_PEERS,
        "torrent b connected {} seeders",
        found[1]
    );
    // Hundreds of addresses were tried; nearly all failed.
    assert!(
        dials.len() >= 500 && failed * 100 >= dials.len() * 95,
        "{} dials, {failed} failed",
        dials.len()
    );
    for (k, &t) in ts.iter().enumerate() {
        let st = node
            .session()
            .torrent(t)
            .expect("a torrent")
            .stats(w.instant());
        assert_eq!(st.hash_failures, 0);
        // No faster than the peer limit allows (5 seeders at 0.5 MB/s).
        let fastest = specs[k].len() as f64 / (PER_PEERS as f64 * SEED_RATE as f64);
        let end = node.completed_at_of(t).expect("checked").as_secs_f64();
        assert!(
            end >= fastest && end <= DEADLINE.as_secs_f64(),
            "torrent {k} complete at {end:.1} s; the limits allow {fastest:.1} s at best"
        );
    }
}

/// A tracker re-announce every [`ANNOUNCE`]: a random sample of the swarm.
fn schedule_announces(
    w: &mut World,
    n: NodeId,
    ts: &[TransferId],
    swarms: Vec<Vec<SocketAddr>>,
    seed: u64,
) {
    let ts = ts.to_vec();
    let at = w.now() + ANNOUNCE;
    w.at(at, move |w| {
        let mut rng = fastrand::Rng::with_seed(seed);
        for (k, swarm) in swarms.iter().enumerate() {
            let sample: Vec<SocketAddr> = (0..ANSWER)
                .map(|_| swarm[rng.usize(..swarm.len())])
                .collect();
            w.add_peers(n, ts[k], Proto::Bt, &sample, Source::Tracker);
        }
        if w.node(n).completed_at().is_none() {
            schedule_announces(w, n, &ts, swarms, rng.u64(..));
        }
    });
}
