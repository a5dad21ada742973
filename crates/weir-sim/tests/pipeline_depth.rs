//! Request pipeline depth (`SEEDS.md` sections 1 and 3), read off the wire:
//! requests a leecher sent minus blocks, rejects and cancels since.
//!
//! - At 150 ms RTT and 50 MB/s the steady depth covers the bandwidth-delay
//!   product (and the link stays full).
//! - A 1 MB/s peer next to it gets a shallow pipe (and still delivers its
//!   rate).
//! - A peer that stops answering has its blocks asked of another peer
//!   (the request timeout / snub path), and the download completes.

use std::collections::BTreeSet;
use std::time::Duration;

use weir_sim::{LinkConfig, NodeConfig, Payload, TorrentSpec, World};

const BLOCK: f64 = 16384.0;
const ONE_WAY: Duration = Duration::from_millis(75);

/// (min, max) of `sample` taken every 50 ms over [from, to].
fn sample_range(
    w: &mut World,
    from: Duration,
    to: Duration,
    mut sample: impl FnMut(&World) -> u64,
) -> (u64, u64) {
    w.run_to(from);
    let (mut lo, mut hi) = (u64::MAX, 0);
    while w.now() < to {
        let v = sample(w);
        lo = lo.min(v);
        hi = hi.max(v);
        let next = w.now() + Duration::from_millis(50);
        w.run_to(next);
    }
    (lo, hi)
}

#[test]
fn steady_depth_covers_the_bandwidth_delay_product() {
    let rate = 50_000_000u64;
    let spec = TorrentSpec::new("bdp", Payload::synthetic(1 << 30, 1 << 20, 7));
    let mut w = World::new(7);
    let seeder = w.add_bt(NodeConfig::seeder(&spec));
    let leecher = w.add_bt(NodeConfig::leecher(&spec));
    let c = w.connect_sym(seeder, leecher, LinkConfig::new(ONE_WAY, rate));
    let s = Duration::from_secs;
    let (lo, hi) = sample_range(&mut w, s(4), s(8), |w| {
        w.conn_stats(leecher, c.b).outstanding()
    });
    let bdp = (rate as f64 * 2.0 * ONE_WAY.as_secs_f64() / BLOCK).ceil() as u64;
    let got = w.node(leecher).received().rate(s(4), s(8));
    eprintln!(
        "steady depth {lo}..{hi} blocks; bandwidth-delay product {bdp} blocks; rate {:.1} MB/s",
        got / 1e6
    );
    assert!(lo >= bdp, "depth fell to {lo} < {bdp} blocks");
    assert!(
        got >= 0.97 * rate as f64,
        "link not kept full: {:.1} MB/s",
        got / 1e6
    );
}

#[test]
fn slow_peer_gets_a_shallow_pipe() {
    let spec = TorrentSpec::new("slow", Payload::synthetic(1 << 30, 1 << 20, 8));
    let mut w = World::new(8);
    let fast = w.add_bt(NodeConfig::seeder(&spec).name("fast"));
    let slow = w.add_bt(NodeConfig::seeder(&spec).name("slow"));
    let leecher = w.add_bt(NodeConfig::leecher(&spec));
    let cf = w.connect_sym(fast, leecher, LinkConfig::new(ONE_WAY, 50_000_000));
    let cs = w.connect_sym(slow, leecher, LinkConfig::new(ONE_WAY, 1_000_000));
    let s = Duration::from_secs;
    let mut fast_depth = (u64::MAX, 0);
    let (lo, hi) = sample_range(&mut w, s(4), s(10), |w| {
        let f = w.conn_stats(leecher, cf.b).outstanding();
        fast_depth = (fast_depth.0.min(f), fast_depth.1.max(f));
        w.conn_stats(leecher, cs.b).outstanding()
    });
    let slow_rate = w.conn_stats(leecher, cs.b).payload.rate(s(4), s(10));
    let slow_bdp = 1e6 * 2.0 * ONE_WAY.as_secs_f64() / BLOCK;
    eprintln!(
        "slow peer: depth {lo}..{hi} blocks (its bandwidth-delay product is {slow_bdp:.1}), \
         {:.2} MB/s; fast peer: depth {}..{}",
        slow_rate / 1e6,
        fast_depth.0,
        fast_depth.1
    );
    // Shallow: about one second of its own rate (the pipeline's floor on
    // the time a pipe covers, 61 blocks at 1 MB/s), nowhere near the fast
    // peer's depth.
    assert!(hi <= 80, "slow peer's pipe reached {hi} blocks");
    assert!(hi * 10 < fast_depth.0, "slow {hi} vs fast {}", fast_depth.0);
    // And still deep enough for its rate.
    assert!(
        slow_rate >= 0.9e6,
        "slow peer delivered {:.2} MB/s",
        slow_rate / 1e6
    );
}

#[test]
fn hung_peer_blocks_are_asked_of_another() {
    let spec = TorrentSpec::new("hung", Payload::synthetic(96 << 20, 1 << 20, 9));
    let mut w = World::new(9);
    w.trace_blocks = true;
    let hung = w.add_bt(NodeConfig::seeder(&spec).name("hung"));
    let good = w.add_bt(NodeConfig::seeder(&spec).name("good"));
    let leecher = w.add_bt(NodeConfig::leecher(&spec));
    let link = LinkConfig::new(Duration::from_millis(20), 2_000_000);
    let ch = w.connect_sym(hung, leecher, link.clone());
    let cg = w.connect_sym(good, leecher, link);
    let freeze = Duration::from_secs(5);
    w.at(freeze, move |w| w.freeze(hung));
    let done = w.run_until(Duration::from_secs(200), |w| {
        w.node(leecher).completed_at().is_some()
    });
    let hs = w.conn_stats(leecher, ch.b);
    let gs = w.conn_stats(leecher, cg.b);
    // Blocks asked of the hung peer that it never delivered.
    let delivered: BTreeSet<(u32, u32)> = hs.received.iter().map(|&(_, p, b)| (p, b)).collect();
    let stuck: Vec<(Duration, u32, u32)> = hs
        .requested
        .iter()
        .filter(|(_, r)| !delivered.contains(&(r.index, r.begin)))
        .map(|(t, r)| (*t, r.index, r.begin))
        .collect();
    assert!(!stuck.is_empty(), "the hung peer had nothing in flight");
    // When each was first asked of the good peer after the hung one had it.
    let mut worst = Duration::ZERO;
    let mut never = 0;
    for &(t, p, b) in &stuck {
        // The good peer may have been asked first (the hung peer then got
        // the block as an endgame duplicate while snubbed): that counts.
        match gs
            .requested
            .iter()
            .filter(|(_, r)| (r.index, r.begin) == (p, b))
            .map(|(u, _)| *u)
            .min_by_key(|u| if *u >= t { *u - t } else { Duration::ZERO })
        {
            Some(u) => worst = worst.max(u.saturating_sub(freeze.max(t))),
            None => never += 1,
        }
    }
    let completed = w.node(leecher).completed_at();
    eprintln!(
        "{} blocks stuck at the hung peer; re-asked of the good peer at most {:.2} s after \
         the hang ({never} never re-asked); complete at {:?} (good peer alone needs about {:.0} s)",
        stuck.len(),
        worst.as_secs_f64(),
        completed,
        spec.len() as f64 / 2e6
    );
    // (Every written byte was compared with the payload: a mismatch fails
    // its piece.)
    assert!(done, "download did not complete");
    assert_eq!(
        w.node(leecher).torrent().stats(w.instant()).hash_failures,
        0
    );
    assert_eq!(never, 0, "blocks never re-asked of the good peer");
    // The request timeout is 30 s; allow a few torrent ticks on top, and
    // the good peer's own pipe (one second of its rate) draining before a
    // released block's request can join it.
    assert!(
        worst <= Duration::from_secs(33),
        "blocks re-asked of the good peer only {worst:?} after the hang: when the hung peer \
         was snubbed, Torrent::tick released its blocks and at once refilled the snubbed peer's \
         own pipeline, which took some of them back; those waited for the endgame"
    );
}
