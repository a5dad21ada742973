//! Demand-aware redistribution under one global download cap (`SEEDS.md`
//! section 2): there is no per-peer share, so a slow source takes what it
//! can and a fast one takes the rest. The leecher is capped at 20 MB/s;
//! one seeder is capped at 5 MB/s upload, the other is unlimited; both are
//! on fast links (10 ms one way, 200 MB/s). Rates are measured over
//! [2 s, 22 s], after the pipelines settled.
//!
//! aMule #491 measured 19.5 MB/s in both set-ups; an equal split would
//! give 15 MB/s.

use std::time::Duration;

use weir_sim::{Conn, LinkConfig, NodeConfig, NodeId, Payload, TorrentSpec, World};

const CAP: u64 = 20_000_000;
const SLOW: u64 = 5_000_000;
const FROM: Duration = Duration::from_secs(2);
const TO: Duration = Duration::from_secs(22);

fn link() -> LinkConfig {
    LinkConfig::new(Duration::from_millis(10), 200_000_000)
}

/// Payload rate received over [FROM, TO] on the leecher's end of `c`.
fn rate(w: &World, leecher: NodeId, c: Conn) -> f64 {
    w.conn_stats(leecher, c.b).payload.rate(FROM, TO)
}

fn check(label: &str, slow: f64, fast: f64) {
    let total = slow + fast;
    eprintln!(
        "{label}: total {:.2} MB/s ({:.1}% of the cap) = slow seeder {:.2} + fast seeder {:.2} MB/s",
        total / 1e6,
        100.0 * total / CAP as f64,
        slow / 1e6,
        fast / 1e6
    );
    assert!(
        total >= 0.98 * CAP as f64,
        "{label}: total {:.2} MB/s is under 98% of the cap",
        total / 1e6
    );
    // The cap holds: one bucket shared by everything the leecher(s) get
    // (a cap applied per torrent or per connection would let the total
    // run past it).
    assert!(
        total <= 1.01 * CAP as f64,
        "{label}: total {:.2} MB/s is over the 20 MB/s cap",
        total / 1e6
    );
    // The slow source is not squeezed out: it delivers what it can, and
    // no more than its own 5 MB/s upload cap allows.
    assert!(
        slow >= 0.9 * SLOW as f64,
        "{label}: slow seeder got only {:.2} MB/s of its 5",
        slow / 1e6
    );
    assert!(
        slow <= 1.02 * SLOW as f64,
        "{label}: slow seeder sent {:.2} MB/s, over its 5 MB/s cap",
        slow / 1e6
    );
    // The fast one takes the rest of the cap.
    assert!(
        (0.95 * (CAP - SLOW) as f64..=1.02 * (CAP - SLOW) as f64).contains(&fast),
        "{label}: fast seeder {:.2} MB/s, expected about 15",
        fast / 1e6
    );
}

#[test]
fn two_seeders_one_slow_fill_the_cap() {
    let spec = TorrentSpec::new("redis", Payload::synthetic(1 << 30, 1 << 20, 3));
    let mut w = World::new(3);
    let slow_up = w.bucket(SLOW);
    let global = w.bucket(CAP);
    let slow = w.add_bt(NodeConfig::seeder(&spec).name("slow").up([slow_up]));
    let fast = w.add_bt(NodeConfig::seeder(&spec).name("fast"));
    let leecher = w.add_bt(NodeConfig::leecher(&spec).name("leecher").down([global]));
    let cs = w.connect_sym(slow, leecher, link());
    let cf = w.connect_sym(fast, leecher, link());
    w.run_to(TO);
    assert!(
        w.node(leecher).completed_at().is_none(),
        "payload too small"
    );
    check(
        "one torrent, two seeders",
        rate(&w, leecher, cs),
        rate(&w, leecher, cf),
    );
}

#[test]
fn two_torrents_from_two_seeders_share_one_cap() {
    let a = TorrentSpec::new("redis-a", Payload::synthetic(1 << 30, 1 << 20, 4));
    let b = TorrentSpec::new("redis-b", Payload::synthetic(1 << 30, 1 << 20, 5));
    let mut w = World::new(4);
    let slow_up = w.bucket(SLOW);
    let global = w.bucket(CAP);
    let slow = w.add_bt(NodeConfig::seeder(&a).name("slow").up([slow_up]));
    let fast = w.add_bt(NodeConfig::seeder(&b).name("fast"));
    // One host, two torrents, one global bucket.
    let la = w.add_bt(NodeConfig::leecher(&a).name("leecher-a").down([global]));
    let lb = w.add_bt(NodeConfig::leecher(&b).name("leecher-b").down([global]));
    let ca = w.connect_sym(slow, la, link());
    let cb = w.connect_sym(fast, lb, link());
    w.run_to(TO);
    check(
        "two torrents, one per seeder",
        rate(&w, la, ca),
        rate(&w, lb, cb),
    );
}
