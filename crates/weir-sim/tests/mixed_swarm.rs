//! A mixed swarm over lossy links (issue 9): one seeder node has a torrent
//! and shares an eD2k file; four leecher nodes each download both in one
//! session. BitTorrent peers are known from the start (the seeder and each
//! other, dialled through the simulated network); eD2k sources come from a
//! simulated eD2k index server every node logs into (the seeder offers its
//! file, leechers ask for sources and offer what they have). Latencies and
//! rates differ per pair, and 1% of segments are lost on every link.
//!
//! Every leecher must finish both transfers with byte-identical data
//! (SHA-1 pieces and MD4 parts verified as written, then compared whole),
//! the leechers must have shared with each other (on both networks: the
//! server hands out leechers that offer parts as sources), the server must
//! have handed out sources, and the run must be
//! deterministic: the same seed gives the same completion times, bytes per
//! link and dials.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::time::Duration;

use weir_ed2k::server::ServerEvent;
use weir_sim::{
    Ed2kSpec, LinkConfig, NodeConfig, NodeId, Payload, TorrentSpec, TransferConfig, World,
};

/// (one-way latency to the core of the network in ms, access rate B/s).
const SEEDER: (u64, u64) = (10, 40_000_000);
const LEECHERS: [(u64, u64); 4] = [
    (5, 30_000_000),
    (20, 15_000_000),
    (40, 8_000_000),
    (75, 4_000_000),
];
const SERVER: (u64, u64) = (15, 10_000_000);
const LOSS: f64 = 0.01;
const RUNS: usize = 3;

fn path(a: (u64, u64), b: (u64, u64)) -> LinkConfig {
    LinkConfig::new(Duration::from_millis(a.0 + b.0), a.1.min(b.1)).with_loss(LOSS)
}

#[derive(Debug, PartialEq)]
struct Outcome {
    /// Per leecher: when the torrent and the eD2k file completed.
    done: Vec<(Option<Duration>, Option<Duration>)>,
    /// Bytes every link carried, in creation order.
    carried: Vec<u64>,
    /// A digest of every dial of every node (time, address, result).
    dials: u64,
    lost: u64,
    bt_shared: u64,
    ed2k_from_leechers: u64,
    sources_found: usize,
}

fn run(seed: u64) -> Outcome {
    let torrent = TorrentSpec::new("mixed", Payload::random(8 << 20, 128 << 10, 61));
    let file = Ed2kSpec::new("mixed.bin", Payload::random(12 << 20, 1 << 20, 62));
    let mut w = World::new(seed);
    let server = w.add_ed2k_server("server");
    let seeder = w.add_node(
        NodeConfig::new()
            .name("seeder")
            .with(TransferConfig::seed(&torrent))
            .with(TransferConfig::ed2k_share(&file)),
    );
    w.set_link_sym(server, seeder, path(SERVER, SEEDER));
    let server_addr = w.server_addr(server);
    w.use_ed2k_server(seeder, server_addr);
    let mut bt_addrs: Vec<SocketAddr> = vec![w.node(seeder).bt_addr().expect("listens")];
    let mut leechers: Vec<NodeId> = Vec::new();
    for (i, &me) in LEECHERS.iter().enumerate() {
        let l = w.add_node(
            NodeConfig::new()
                .name(&format!("leecher{i}"))
                .with(TransferConfig::leech(&torrent).peers(bt_addrs.clone()))
                .with(TransferConfig::ed2k_get(&file))
                .configure(|c| c.source_reask = Duration::from_secs(3)),
        );
        w.set_link_sym(l, seeder, path(me, SEEDER));
        w.set_link_sym(l, server, path(me, SERVER));
        for (j, &o) in leechers.iter().enumerate() {
            w.set_link_sym(l, o, path(me, LEECHERS[j]));
        }
        bt_addrs.push(w.node(l).bt_addr().expect("listens"));
        w.use_ed2k_server(l, server_addr);
        leechers.push(l);
    }
    let all = w.run_until(Duration::from_secs(120), |w| {
        leechers.iter().all(|&l| w.node(l).completed_at().is_some())
    });
    let done: Vec<(Option<Duration>, Option<Duration>)> = leechers
        .iter()
        .map(|&l| {
            let n = w.node(l);
            let ts = n.transfers();
            (n.completed_at_of(ts[0]), n.completed_at_of(ts[1]))
        })
        .collect();
    assert!(all, "not every leecher finished: {done:?}");
    let (want_t, want_e) = (torrent.payload.to_vec(), file.payload.to_vec());
    let mut bt_shared = 0;
    for &l in &leechers {
        let n = w.node(l);
        let ts = n.transfers();
        assert!(
            n.stored_of(ts[0]) == Some(&want_t[..]),
            "{}: torrent differs",
            n.name()
        );
        assert!(
            n.stored_of(ts[1]) == Some(&want_e[..]),
            "{}: eD2k file differs",
            n.name()
        );
        let st = n
            .session()
            .torrent(ts[0])
            .expect("a torrent")
            .stats(w.instant());
        assert_eq!(st.hash_failures, 0, "{}", n.name());
        let (client, _) = n.session().ed2k_file(ts[1]).expect("an eD2k file");
        assert_eq!(client.stats(w.instant()).hash_failures, 0, "{}", n.name());
        bt_shared += st.uploaded;
    }
    // eD2k part data the leechers got from each other (not the seeder).
    let ed2k_from_leechers: u64 = leechers
        .iter()
        .map(|&l| {
            let n = w.node(l);
            let (client, _) = n
                .session()
                .ed2k_file(n.transfers()[1])
                .expect("an eD2k file");
            client.stats(w.instant()).uploaded
        })
        .sum();
    let sources_found = w
        .server_events(server)
        .iter()
        .filter_map(|e| match e {
            ServerEvent::SourcesAsked { found, .. } => Some(*found),
            _ => None,
        })
        .sum();
    let links = w.link_count();
    let carried = (0..links).map(|i| w.link(i).stats().transmitted).collect();
    let lost = (0..links).map(|i| w.link(i).stats().lost).sum();
    let mut h = DefaultHasher::new();
    for n in 0..w.node_count() {
        for d in w.node(n).dials() {
            (n, d.at, d.addr, format!("{:?}", d.result)).hash(&mut h);
        }
    }
    Outcome {
        done,
        carried,
        dials: h.finish(),
        lost,
        bt_shared,
        ed2k_from_leechers,
        sources_found,
    }
}

#[test]
fn mixed_lossy_swarm_completes_identically_and_deterministically() {
    let first = run(61);
    let show: Vec<String> = first
        .done
        .iter()
        .map(|(t, e)| {
            format!(
                "{:.3}/{:.3}",
                t.expect("checked").as_secs_f64(),
                e.expect("checked").as_secs_f64()
            )
        })
        .collect();
    eprintln!(
        "completion (torrent/eD2k, s): {}; leechers uploaded {:.1} MiB of the torrent and \
         {:.1} MiB of the eD2k file; {} sources handed out by the server; {} segments lost",
        show.join(", "),
        first.bt_shared as f64 / (1 << 20) as f64,
        first.ed2k_from_leechers as f64 / (1 << 20) as f64,
        first.sources_found,
        first.lost
    );
    assert!(first.lost > 0, "no loss happened");
    assert!(first.bt_shared > 0, "leechers did not share the torrent");
    assert!(
        first.ed2k_from_leechers > 0,
        "leechers did not share the eD2k file"
    );
    assert!(
        first.sources_found >= LEECHERS.len(),
        "the server found {} sources",
        first.sources_found
    );
    for run_no in 2..=RUNS {
        let again = run(61);
        assert_eq!(
            first, again,
            "same seed, run {run_no} differs from run 1 (completion times, bytes per link, dials)"
        );
    }
}
