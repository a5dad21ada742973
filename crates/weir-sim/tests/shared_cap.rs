//! One global download cap over two protocols (issue 9): one session
//! downloads a torrent from a BitTorrent seeder and an eD2k file from an
//! eD2k seeder, both 1 GiB, under one 20 MB/s global download chain; both
//! seeders are on fast links (10 ms one way, 200 MB/s). Over [2 s, 22 s]
//! the payload received by the two transfers together is within 1% of
//! 20 MB/s x 20 s, and each transfer gets a real share of it (between a
//! third and two thirds: the cap has no per-transfer or per-protocol
//! share; readers take the tokens of each refill in turn).
//!
//! The same with two torrents in one session (the redistribution set-up of
//! `redistribution.rs` with one host's two torrents in one session rather
//! than two): a seeder capped at 5 MB/s upload and an unlimited one, the
//! total within 2% of the cap, the slow source getting its 5 MB/s.

use std::time::Duration;

use weir_sim::{
    ED2K_PART, Ed2kSpec, LinkConfig, NodeConfig, Payload, Proto, TorrentSpec, TransferConfig, World,
};

const CAP: u64 = 20_000_000;
const FROM: Duration = Duration::from_secs(2);
const TO: Duration = Duration::from_secs(22);

fn link() -> LinkConfig {
    LinkConfig::new(Duration::from_millis(10), 200_000_000)
}

#[test]
fn a_bittorrent_and_an_ed2k_transfer_share_one_cap() {
    let torrent = TorrentSpec::new("cap-bt", Payload::synthetic(1 << 30, 1 << 20, 51));
    let file = Ed2kSpec::new("cap-ed2k.bin", Payload::synthetic(1 << 30, ED2K_PART, 52));
    let mut w = World::new(51);
    w.net.link = link();
    let global = w.bucket(CAP);
    let bt_seed = w.add_node(NodeConfig::seeder(&torrent).name("bt-seeder"));
    let ed2k_seed = w.add_node(
        NodeConfig::new()
            .name("ed2k-seeder")
            .with(TransferConfig::ed2k_share(&file)),
    );
    let (bt_addr, ed2k_addr) = (
        w.node(bt_seed).bt_addr().expect("listens"),
        w.node(ed2k_seed).ed2k_addr().expect("listens"),
    );
    let leecher = w.add_node(
        NodeConfig::new()
            .name("leecher")
            .down([global])
            .with(TransferConfig::leech(&torrent).peers([bt_addr]))
            .with(TransferConfig::ed2k_get(&file).peers([ed2k_addr])),
    );
    w.run_to(TO);
    let node = w.node(leecher);
    let ts = node.transfers();
    assert!(node.completed_at().is_none(), "payload too small");
    let secs = (TO - FROM).as_secs_f64();
    let total = node.received().rate(FROM, TO);
    let bt = node.received_of(ts[0]).rate(FROM, TO);
    let ed2k = node.received_of(ts[1]).rate(FROM, TO);
    // Per protocol, counted separately on the wire: the same split.
    let (by_bt, by_ed2k) = (
        node.received_by(Proto::Bt).rate(FROM, TO),
        node.received_by(Proto::Ed2k).rate(FROM, TO),
    );
    let err = (total - CAP as f64) / CAP as f64;
    eprintln!(
        "[{FROM:?}, {TO:?}]: total {:.3} MB/s ({:+.3}% of the cap) = BitTorrent {:.2} MB/s \
         ({:.1}%) + eD2k {:.2} MB/s ({:.1}%); {:.1} MiB in {secs} s",
        total / 1e6,
        100.0 * err,
        bt / 1e6,
        100.0 * bt / total,
        ed2k / 1e6,
        100.0 * ed2k / total,
        total * secs / (1 << 20) as f64,
    );
    for s in [2u64, 5, 10, 15, 20, 22] {
        let t = Duration::from_secs(s);
        let r = |x: &weir_sim::Series| x.rate(t - Duration::from_millis(500), t) / 1e6;
        eprintln!(
            "  500 ms before t={s:2} s: BitTorrent {:5.2} MB/s, eD2k {:5.2} MB/s",
            r(node.received_of(ts[0])),
            r(node.received_of(ts[1]))
        );
    }
    assert!(err.abs() <= 0.01, "cap missed by {:+.2}%", 100.0 * err);
    for (name, share) in [("BitTorrent", bt / total), ("eD2k", ed2k / total)] {
        assert!(
            (1.0 / 3.0..=2.0 / 3.0).contains(&share),
            "{name} got {:.1}% of the cap",
            100.0 * share
        );
    }
    assert!((by_bt - bt).abs() < 1.0 && (by_ed2k - ed2k).abs() < 1.0);
}

#[test]
fn two_torrents_of_one_session_share_one_cap() {
    const SLOW: u64 = 5_000_000;
    let a = TorrentSpec::new("cap-a", Payload::synthetic(1 << 30, 1 << 20, 53));
    let b = TorrentSpec::new("cap-b", Payload::synthetic(1 << 30, 1 << 20, 54));
    let mut w = World::new(53);
    w.net.link = link();
    let slow_up = w.bucket(SLOW);
    let global = w.bucket(CAP);
    let slow = w.add_node(NodeConfig::seeder(&a).name("slow").up([slow_up]));
    let fast = w.add_node(NodeConfig::seeder(&b).name("fast"));
    let (sa, fa) = (
        w.node(slow).bt_addr().expect("listens"),
        w.node(fast).bt_addr().expect("listens"),
    );
    let leecher = w.add_node(
        NodeConfig::new()
            .name("leecher")
            .down([global])
            .with(TransferConfig::leech(&a).peers([sa]))
            .with(TransferConfig::leech(&b).peers([fa])),
    );
    w.run_to(TO);
    let node = w.node(leecher);
    let ts = node.transfers();
    let (ra, rb) = (
        node.received_of(ts[0]).rate(FROM, TO),
        node.received_of(ts[1]).rate(FROM, TO),
    );
    let total = ra + rb;
    eprintln!(
        "two torrents, one session: total {:.2} MB/s ({:.1}% of the cap) = slow seeder {:.2} + \
         fast seeder {:.2} MB/s",
        total / 1e6,
        100.0 * total / CAP as f64,
        ra / 1e6,
        rb / 1e6
    );
    assert!(
        (0.98 * CAP as f64..=1.01 * CAP as f64).contains(&total),
        "total {:.2} MB/s",
        total / 1e6
    );
    assert!(
        (0.9 * SLOW as f64..=1.01 * SLOW as f64).contains(&ra),
        "slow seeder gave {:.2} MB/s of its 5",
        ra / 1e6
    );
}
