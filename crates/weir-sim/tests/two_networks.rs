//! One file from two networks at once (issue 9): the leecher's session has
//! a torrent and an ed2k link naming the torrent's file (same name and
//! size), so the eD2k side joins the torrent's transfer
//! (`Session::ed2k_joins`): eD2k sources pick blocks from and deliver into
//! the torrent's content. A BitTorrent seeder and an eD2k seeder (found
//! through a simulated eD2k index server) each sit behind their own
//! 4 MB/s link to the leecher.
//!
//! Honest run: the file completes byte-identical (SHA-1 pieces verified as
//! written, the eD2k MD4 parts checked from storage after), each network
//! delivers at least 30% of it, and the time is within [1.0, 1.1] x
//! size / (sum of the two rates).
//!
//! Corrupt run: the eD2k seeder flips a byte of every block it uploads.
//! The pieces its data went into fail SHA-1, it is banned (the BitTorrent
//! seeder is not), and the file still completes byte-identical.

use std::time::Duration;

use weir_ed2k::server::ServerEvent;
use weir_sim::{
    Ed2kSpec, LinkConfig, NodeConfig, NodeId, Payload, Proto, TorrentSpec, TransferConfig, World,
};

/// Each seeder's link to the leecher.
const RATE: u64 = 4_000_000;
const LATENCY: Duration = Duration::from_millis(20);
/// 40 MiB: a little over four eD2k parts, 160 pieces of 256 KiB.
const SIZE: u64 = 40 << 20;
const NAME: &str = "two-networks.bin";

struct Run {
    w: World,
    leecher: NodeId,
    server: NodeId,
    bt_seeder: NodeId,
    ed2k_seeder: NodeId,
    torrent: std::sync::Arc<TorrentSpec>,
    /// When the leecher was added.
    start: Duration,
    done: bool,
}

fn run(seed: u64, corrupt_ed2k: bool) -> Run {
    // The same bytes under both networks' names: the torrent's single file
    // and the eD2k file share a name and a size.
    let torrent = TorrentSpec::new(NAME, Payload::random(SIZE, 256 << 10, 71));
    let file = Ed2kSpec::new(NAME, Payload::random(SIZE, 256 << 10, 71));
    assert_eq!(torrent.payload.to_vec(), file.payload.to_vec());
    let mut w = World::new(seed);
    let server = w.add_ed2k_server("server");
    let server_addr = w.server_addr(server);
    let bt_seeder = w.add_node(NodeConfig::seeder(&torrent).name("bt-seeder"));
    let mut ed2k_cfg = NodeConfig::new()
        .name("ed2k-seeder")
        .with(TransferConfig::ed2k_share(&file));
    if corrupt_ed2k {
        ed2k_cfg = ed2k_cfg.corrupt_uploads();
    }
    let ed2k_seeder = w.add_node(ed2k_cfg);
    w.use_ed2k_server(ed2k_seeder, server_addr);
    // The eD2k seeder's file is on the server before the leecher asks
    // (a leecher asks again only after `source_reask`, 20 minutes).
    let offered = w.run_until(Duration::from_secs(5), |w| {
        w.server_events(server)
            .iter()
            .any(|e| matches!(e, ServerEvent::Offered { files: 1, .. }))
    });
    assert!(offered, "the eD2k seeder did not offer its file");
    let start = w.now();
    // The leecher is the next node: shape its links to the seeders before
    // it exists, so its first dials use them.
    let leecher_id = w.node_count();
    let link = LinkConfig::new(LATENCY, RATE);
    w.set_link_sym(leecher_id, bt_seeder, link.clone());
    w.set_link_sym(leecher_id, ed2k_seeder, link);
    let bt_addr = w.node(bt_seeder).bt_addr().expect("listens");
    let leecher = w.add_node(
        NodeConfig::new()
            .name("leecher")
            .with(TransferConfig::leech(&torrent).peers([bt_addr]))
            .with(TransferConfig::ed2k_get(&file)),
    );
    assert_eq!(leecher, leecher_id);
    w.use_ed2k_server(leecher, server_addr);
    let done = w.run_until(start + Duration::from_secs(120), |w| {
        w.node(leecher).completed_at().is_some()
    });
    Run {
        w,
        leecher,
        server,
        bt_seeder,
        ed2k_seeder,
        torrent,
        start,
        done,
    }
}

/// The joined transfer: one transfer, with a torrent and an eD2k side;
/// returns the eD2k file's (MD4 parts checked, parts).
fn check_joined(r: &Run) -> (u32, u32) {
    let n = r.w.node(r.leecher);
    assert_eq!(
        n.transfers().len(),
        1,
        "the ed2k link did not join the torrent"
    );
    let t = n.transfers()[0];
    assert!(n.session().torrent(t).is_some());
    let (client, file) = n
        .session()
        .ed2k_file(t)
        .expect("no eD2k side on the torrent's transfer");
    let p = client.progress(file);
    assert!(p.digests_known, "the eD2k hashset never came");
    (p.parts_had, p.parts)
}

#[test]
fn one_file_from_a_bittorrent_and_an_ed2k_seeder_at_once() {
    let r = run(71, false);
    let parts = check_joined(&r);
    let n = r.w.node(r.leecher);
    let t = n.transfers()[0];
    let at = n.completed_at().map(|t| t - r.start);
    let (bt, ed2k) = (
        n.received_by(Proto::Bt).total(),
        n.received_by(Proto::Ed2k).total(),
    );
    let total = bt + ed2k;
    let ideal = SIZE as f64 / (2 * RATE) as f64;
    let alone = SIZE as f64 / RATE as f64;
    let st = n
        .session()
        .torrent(t)
        .expect("a torrent")
        .stats(r.w.instant());
    eprintln!(
        "{} MiB over two {} MB/s links: complete {:?} after the start ({:.3}x the ideal {ideal:.3} s; \
         one link alone would take {alone:.3} s); BitTorrent {:.1} MiB ({:.1}%), eD2k {:.1} MiB \
         ({:.1}%), {:.1} MiB received in all ({:+.2}% over the file); {} hash failures; eD2k MD4 \
         parts checked {}/{}",
        SIZE >> 20,
        RATE / 1_000_000,
        at,
        at.map_or(f64::NAN, |d| d.as_secs_f64() / ideal),
        bt as f64 / (1 << 20) as f64,
        100.0 * bt as f64 / total as f64,
        ed2k as f64 / (1 << 20) as f64,
        100.0 * ed2k as f64 / total as f64,
        total as f64 / (1 << 20) as f64,
        100.0 * (total as f64 - SIZE as f64) / SIZE as f64,
        st.hash_failures,
        parts.0,
        parts.1,
    );
    assert!(r.done, "the file did not complete in 120 s");
    assert!(
        n.stored_of(t) == Some(&r.torrent.payload.to_vec()[..]),
        "data differs"
    );
    assert_eq!(parts.0, parts.1, "not every eD2k part passed MD4");
    // Once it had a part, the leecher offered the file on eD2k too.
    let offers: Vec<&ServerEvent> =
        r.w.server_events(r.server)
            .iter()
            .filter(|e| matches!(e, ServerEvent::Offered { files: 1.., .. }))
            .collect();
    assert_eq!(offers.len(), 2, "offers: {offers:?}");
    assert_eq!(st.hash_failures, 0);
    assert!(n.banned().is_empty(), "banned {:?}", n.banned());
    for (name, got) in [("BitTorrent", bt), ("eD2k", ed2k)] {
        assert!(
            got as f64 >= 0.3 * SIZE as f64,
            "{name} delivered {:.1}% of the file",
            100.0 * got as f64 / SIZE as f64
        );
    }
    // Little fetched twice (endgame duplicates at most).
    assert!(
        (SIZE..=SIZE + SIZE / 20).contains(&total),
        "received {total} bytes for a {SIZE}-byte file"
    );
    // Above the ideal by the start-up round trips (BitTorrent handshake;
    // eD2k server login, source request, dial, hello, hashset) and the
    // last blocks: within 15%.
    let secs = at.expect("complete").as_secs_f64();
    assert!(
        (ideal..=1.15 * ideal).contains(&secs),
        "took {secs:.3} s; size / (sum of the rates) is {ideal:.3} s"
    );
}

#[test]
fn a_corrupt_ed2k_seeder_is_caught_and_banned_and_the_file_completes() {
    let r = run(72, true);
    let parts = check_joined(&r);
    let n = r.w.node(r.leecher);
    let t = n.transfers()[0];
    let st = n
        .session()
        .torrent(t)
        .expect("a torrent")
        .stats(r.w.instant());
    let liar = r.w.node(r.ed2k_seeder).ip();
    let honest = r.w.node(r.bt_seeder).ip();
    let (bt, ed2k) = (
        n.received_by(Proto::Bt).total(),
        n.received_by(Proto::Ed2k).total(),
    );
    eprintln!(
        "corrupt eD2k seeder: complete {:?} after the start; {} hash failures; banned {:?}; \
         BitTorrent {:.1} MiB, eD2k {:.1} MiB (all of it bad); eD2k MD4 parts checked {}/{}",
        n.completed_at().map(|t| t - r.start),
        st.hash_failures,
        n.banned(),
        bt as f64 / (1 << 20) as f64,
        ed2k as f64 / (1 << 20) as f64,
        parts.0,
        parts.1,
    );
    assert!(r.done, "the file did not complete in 120 s");
    assert!(
        n.stored_of(t) == Some(&r.torrent.payload.to_vec()[..]),
        "data differs"
    );
    assert_eq!(parts.0, parts.1, "not every eD2k part passed MD4");
    assert!(ed2k > 0, "the eD2k seeder never sent anything");
    assert!(st.hash_failures >= 1, "the corrupt data was never caught");
    assert_eq!(n.banned(), [liar], "banned the wrong senders");
    assert!(!n.banned().contains(&honest));
    // Once banned, its data stops: at most a few pieces' worth came in.
    assert!(
        ed2k <= 8 << 20,
        "{:.1} MiB came from the liar before the ban",
        ed2k as f64 / (1 << 20) as f64
    );
}
