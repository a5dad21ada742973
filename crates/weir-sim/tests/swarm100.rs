//! A swarm of 100 leechers and one seeder (issue 13: "the same at 100
//! peers with a seeded mix of rates and latencies"). Every node runs the
//! real session. The seeder's upload is capped; each leecher has its own
//! access link (upload and download buckets drawn from a seeded mix) and a
//! one-way latency to the core of the network (a pair's latency is the
//! sum). As from a tracker, every leecher starts with the seeder and up to
//! 40 leechers that joined before it; later ones reach it by dialling in.
//!
//! The floor is what no client could beat: every leecher needs the whole
//! payload, the seeder sends at most its cap, the swarm as a whole uploads
//! at most the sum of every upload bucket, and a leecher receives at most
//! its download bucket. The test prints each figure (swarm completion
//! against the floor, the seeder's copies, how much leechers served each
//! other) and holds the swarm to bounds that a regression in sharing,
//! picking or choking would break; the run is deterministic.

use std::time::Duration;

use weir_sim::{LinkConfig, NodeConfig, NodeId, Payload, TorrentSpec, TransferConfig, World};

const LEECHERS: usize = 100;
const PAYLOAD: u64 = 32 << 20;
const PIECE: u32 = 256 << 10;
/// The seeder's upload cap, B/s.
const SEEDER_UP: u64 = 20_000_000;
/// The seeder's one-way latency to the core, ms.
const SEEDER_MS: u64 = 10;
/// Leechers' upload rates (B/s), drawn per leecher; download is 4x.
const UP_MIX: [u64; 4] = [2_000_000, 4_000_000, 8_000_000, 16_000_000];
/// Peers a leecher is handed at start besides the seeder.
const HANDED: usize = 40;
/// Bounds the run is held to, regression guards above what was measured
/// on 2026-12-03 (floor 5.08 s, last leecher 9.55 s = 1.88x, the seeder
/// sending 4.32 copies; 1.79x before slow start tripled the pipeline per
/// round trip): the goal of 1.15x the floor is not met here.
const MAX_X_FLOOR: f64 = 2.0;
const MAX_SEEDER_COPIES: f64 = 5.0;

/// splitmix64: the test's own seeded draws (rates, latencies, peer lists).
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, PartialEq)]
struct Outcome {
    /// Per leecher: when it completed.
    done: Vec<Option<Duration>>,
    /// Per leecher: payload bytes it uploaded to other leechers.
    uploaded: Vec<u64>,
    /// Payload bytes the seeder uploaded.
    seeder_up: u64,
    /// The floor of the swarm's completion, s.
    floor_s: f64,
}

fn run(seed: u64) -> Outcome {
    let spec = TorrentSpec::new("swarm100", Payload::synthetic(PAYLOAD, PIECE, seed));
    let mut w = World::new(seed);
    let mut draw = Draw(seed);
    let seeder_bucket = w.bucket(SEEDER_UP);
    let seeder = w.add_bt(NodeConfig::seeder(&spec).name("seeder").up([seeder_bucket]));
    let mut addrs = vec![w.node(seeder).bt_addr().expect("listens")];
    // (node, one-way latency ms, up B/s, down B/s)
    let mut leechers: Vec<(NodeId, u64, u64, u64)> = Vec::new();
    for i in 0..LEECHERS {
        let ms = 5 + draw.below(96);
        let up = UP_MIX[draw.below(UP_MIX.len() as u64) as usize];
        let down = up * 4;
        // The seeder and up to HANDED of those before, drawn.
        let mut handed = vec![addrs[0]];
        let mut pool: Vec<usize> = (1..addrs.len()).collect();
        while handed.len() <= HANDED && !pool.is_empty() {
            let k = draw.below(pool.len() as u64) as usize;
            handed.push(addrs[pool.swap_remove(k)]);
        }
        let (ub, db) = (w.bucket(up), w.bucket(down));
        let l = w.add_bt(
            NodeConfig::new()
                .name(&format!("leecher{i}"))
                .with(TransferConfig::leech(&spec).peers(handed))
                .up([ub])
                .down([db]),
        );
        w.set_link_sym(
            l,
            seeder,
            LinkConfig::new(Duration::from_millis(ms + SEEDER_MS), SEEDER_UP.max(down)),
        );
        for &(o, oms, oup, odown) in &leechers {
            let rate = up.max(down).max(oup).max(odown);
            w.set_link_sym(l, o, LinkConfig::new(Duration::from_millis(ms + oms), rate));
        }
        addrs.push(w.node(l).bt_addr().expect("listens"));
        leechers.push((l, ms, up, down));
    }
    let ids: Vec<NodeId> = leechers.iter().map(|l| l.0).collect();
    let all = w.run_until(Duration::from_secs(600), |w| {
        ids.iter().all(|&l| w.node(l).completed_at().is_some())
    });
    let done: Vec<Option<Duration>> = ids.iter().map(|&l| w.node(l).completed_at()).collect();
    assert!(all, "not every leecher finished: {done:?}");
    let now = w.instant();
    let pieces = spec.payload.geometry().piece_count();
    let mut uploaded = Vec::new();
    for &l in &ids {
        let n = w.node(l);
        let st = n.torrent().stats(now);
        assert_eq!(st.hash_failures, 0, "{}", n.name());
        assert_eq!(n.pieces_verified(), pieces, "{}", n.name());
        uploaded.push(st.uploaded);
    }
    let seeder_up = w.node(seeder).torrent().stats(now).uploaded;
    let p = PAYLOAD as f64;
    let supply = SEEDER_UP as f64 + leechers.iter().map(|l| l.2 as f64).sum::<f64>();
    let floor_s = (p / SEEDER_UP as f64)
        .max(LEECHERS as f64 * p / supply)
        .max(leechers.iter().map(|l| p / l.3 as f64).fold(0.0, f64::max));
    Outcome {
        done,
        uploaded,
        seeder_up,
        floor_s,
    }
}

#[test]
fn a_hundred_peer_swarm_of_mixed_rates_finishes_near_its_floor() {
    let o = run(100);
    let secs: Vec<f64> = o
        .done
        .iter()
        .map(|t| t.expect("checked").as_secs_f64())
        .collect();
    let last = secs.iter().copied().fold(0.0, f64::max);
    let mut sorted = secs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let copies = o.seeder_up as f64 / PAYLOAD as f64;
    let shared: u64 = o.uploaded.iter().sum();
    let serving = o.uploaded.iter().filter(|&&u| u >= PAYLOAD / 2).count();
    eprintln!(
        "swarm of {LEECHERS}: floor {:.2} s, first {:.2} s, median {median:.2} s, last {last:.2} s \
         ({:.2}x floor); seeder sent {copies:.2} copies; leechers served each other \
         {:.0} MiB ({:.1} copies); {serving} leechers uploaded at least half a copy",
        o.floor_s,
        sorted[0],
        last / o.floor_s,
        shared as f64 / (1 << 20) as f64,
        shared as f64 / PAYLOAD as f64,
    );
    // Every leecher that did not get its copy from the seeder got it from
    // the others: together they served what the seeder did not.
    assert!(
        (shared + o.seeder_up) as f64 >= (LEECHERS as u64 * PAYLOAD) as f64 * 0.99,
        "served {shared} + {} bytes for {LEECHERS} copies",
        o.seeder_up
    );
    assert!(
        last / o.floor_s <= MAX_X_FLOOR,
        "swarm took {last:.2} s, {:.2}x its floor of {:.2} s",
        last / o.floor_s,
        o.floor_s
    );
    assert!(
        copies <= MAX_SEEDER_COPIES,
        "the seeder sent {copies:.2} copies"
    );
    assert_eq!(o, run(100), "same seed, a different run");
}
