//! No regression when unlimited (`SEEDS.md` section 2): an unlimited
//! bucket must short-circuit. The same 128 MiB transfer (20 ms one way,
//! 100 MB/s) runs with no limiter at all, with unlimited buckets in both
//! chains, and with caps far above the link (1 GB/s, the "UI maximum"
//! case); the first two finish at the same virtual time (to within one
//! bucket tick), the third within two ticks.

use std::time::Duration;

use weir_sim::{BUCKET_TICK, LinkConfig, NodeConfig, Payload, TorrentSpec, World};

#[derive(Clone, Copy, Debug)]
enum Limit {
    None,
    UnlimitedBuckets,
    HighCap,
}

fn finish_time(limit: Limit) -> Duration {
    let spec = TorrentSpec::new("unl", Payload::synthetic(128 << 20, 1 << 20, 6));
    let mut w = World::new(6);
    let (down, up) = match limit {
        Limit::None => (vec![], vec![]),
        Limit::UnlimitedBuckets => {
            let per = w.bucket(0);
            let global = w.bucket(0);
            (vec![per, global], vec![w.bucket(0)])
        }
        Limit::HighCap => (vec![w.bucket(1_000_000_000)], vec![w.bucket(1_000_000_000)]),
    };
    let seeder = w.add_bt(NodeConfig::seeder(&spec).up(up));
    let leecher = w.add_bt(NodeConfig::leecher(&spec).down(down));
    w.connect_sym(
        seeder,
        leecher,
        LinkConfig::new(Duration::from_millis(20), 100_000_000),
    );
    let done = w.run_until(Duration::from_secs(30), |w| {
        w.node(leecher).completed_at().is_some()
    });
    assert!(done, "{limit:?}: transfer did not finish");
    let t = w.node(leecher).completed_at().expect("checked");
    eprintln!("{limit:?}: complete at {:.4} s", t.as_secs_f64());
    t
}

#[test]
fn unlimited_buckets_cost_nothing() {
    let none = finish_time(Limit::None);
    let unlimited = finish_time(Limit::UnlimitedBuckets);
    let high = finish_time(Limit::HighCap);
    assert!(
        unlimited <= none + BUCKET_TICK,
        "unlimited buckets: {unlimited:?} vs no limiter {none:?}"
    );
    assert!(
        high <= none + 2 * BUCKET_TICK,
        "1 GB/s caps: {high:?} vs no limiter {none:?}"
    );
    // The transfer is link-bound: 128 MiB at 100 MB/s is 1.34 s.
    assert!(none < Duration::from_secs(3), "no limiter took {none:?}");
}
