//! A literal global download cap (`SEEDS.md` section 2): a leecher capped
//! at 20 MB/s, one unlimited seeder on a fast link (10 ms one way,
//! 200 MB/s). Over 30 s of virtual time measured after the first second
//! ([1 s, 31 s]), the block payload received is within 1% of
//! 20 MB/s x 30 s. The figure over the first 30 s from t = 0 is printed
//! too.

use std::time::Duration;

use weir_sim::{LinkConfig, NodeConfig, Payload, TorrentSpec, World};

const CAP: u64 = 20_000_000;

#[test]
fn global_download_cap_holds_within_one_percent() {
    let spec = TorrentSpec::new("cap", Payload::synthetic(1 << 30, 1 << 20, 2));
    let mut w = World::new(2);
    let global = w.bucket(CAP);
    let seeder = w.add_bt(NodeConfig::seeder(&spec).name("seeder"));
    let leecher = w.add_bt(NodeConfig::leecher(&spec).name("leecher").down([global]));
    let link = LinkConfig::new(Duration::from_millis(10), 200_000_000);
    w.connect_sym(seeder, leecher, link);
    let s = Duration::from_secs;
    w.run_to(s(31));
    let got = w.node(leecher).received();
    assert!(
        w.node(leecher).completed_at().is_none(),
        "payload too small"
    );
    let want = CAP as f64 * 30.0;
    let after_first = (got.at(s(31)) - got.at(s(1))) as f64;
    let from_zero = got.at(s(30)) as f64;
    let err = (after_first - want) / want;
    eprintln!(
        "[1 s, 31 s]: {:.2} MB/s, error {:+.3}%; [0, 30 s]: {:.2} MB/s, error {:+.3}%",
        after_first / 30e6,
        100.0 * err,
        from_zero / 30e6,
        100.0 * (from_zero - want) / want
    );
    for secs in [1u64, 2, 5, 10, 20, 30] {
        let r = got.rate(s(secs) - Duration::from_millis(500), s(secs));
        eprintln!(
            "  rate over 500 ms before t={secs:2} s: {:.2} MB/s",
            r / 1e6
        );
    }
    assert!(err.abs() <= 0.01, "cap missed by {:+.2}%", 100.0 * err);
}
