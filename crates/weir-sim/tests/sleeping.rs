//! Idle torrents sleep (a `Dormant` instead of a live `Torrent`) and wake
//! for what needs them. In the simulator, with the session and cores a
//! daemon runs: a seed with no peer sleeps; a leecher that joins later is
//! served by it, byte for byte; once the leecher is complete and the two
//! part, both sleep with their figures intact.

use std::time::Duration;

use weir_bt::torrent::TorrentRef;
use weir_sim::{LinkConfig, NodeConfig, Payload, TorrentSpec, World};

fn asleep(t: TorrentRef<'_>) -> bool {
    matches!(t, TorrentRef::Asleep(..))
}

#[test]
fn a_sleeping_seed_serves_a_late_leecher_and_both_sleep_after() {
    let spec = TorrentSpec::new("sleep", Payload::random(4 << 20, 256 << 10, 5));
    let mut w = World::new(3);
    let seeder = w.add_bt(NodeConfig::seeder(&spec).name("seeder"));
    w.run_for(Duration::from_secs(30));
    assert!(
        asleep(w.node(seeder).torrent()),
        "a seed with no peer sleeps"
    );
    let seeded = w.node(seeder).torrent().stats(w.instant());
    assert_eq!(seeded.bytes_left, 0);
    assert_eq!(seeded.pieces_had, spec.meta.info.piece_count());

    let leecher = w.add_bt(NodeConfig::leecher(&spec).name("leecher"));
    w.connect_sym(
        seeder,
        leecher,
        LinkConfig::new(Duration::from_millis(20), 20_000_000),
    );
    let done = w.run_until(Duration::from_secs(60), |w| {
        w.node(leecher).completed_at().is_some()
    });
    assert!(done, "the late leecher never completed");
    let n = w.node(leecher);
    assert!(
        n.stored().expect("real payload") == &spec.payload.to_vec()[..],
        "leecher's data differs"
    );
    let len = spec.payload.to_vec().len() as u64;
    let up = w.node(seeder).torrent().stats(w.instant()).uploaded;
    assert!(up >= len, "the seed uploaded {up} of {len} bytes");

    // Two seeds part; with no peer and no timer left both sleep, their
    // figures as they were.
    w.run_for(Duration::from_secs(120));
    for (node, what) in [(seeder, "seed"), (leecher, "leecher")] {
        let t = w.node(node).torrent();
        assert!(asleep(t), "the {what} sleeps once alone");
        assert!(t.is_complete());
    }
    let now = w.instant();
    assert_eq!(w.node(seeder).torrent().stats(now).uploaded, up);
    let got = w.node(leecher).torrent().stats(now);
    assert!(got.downloaded >= len && got.hash_failures == 0, "{got:?}");
}
