//! Bans hold across transfers, protocols and reconnects (issue 9).
//!
//! One session (the leecher) downloads torrent `a` from an honest seeder
//! and a liar that flips a byte of every block it uploads, and seeds
//! torrent `b` and an eD2k file `e`. The liar also wants `b` (BitTorrent)
//! and `e` (eD2k) from the leecher, so it keeps dialling it; it goes down
//! and up twice, and each time dials again at its backoff. After the
//! liar's bad data got it banned, the leecher adds torrent `c`, which the
//! liar seeds too, with the liar among its `--peer`s and in a tracker
//! answer (at another port as well).
//!
//! Checked: the liar is banned once, by address, and the download of `a`
//! completes byte-identical from the honest seeder; after the ban the
//! session never dials the liar's address for any transfer, refuses every
//! connection from it on either listener (BitTorrent and eD2k) before any
//! handshake, takes none of its addresses into `c`'s book, and `c`
//! completes from the honest seeder alone; the liar's connections to the
//! leecher end.

use std::net::SocketAddr;
use std::time::Duration;

use weir_sim::{
    ED2K_PART, Ed2kSpec, LinkConfig, NodeConfig, Payload, Proto, Refused, Source, TorrentSpec,
    TransferConfig, World,
};

const DOWN: [(u64, u64); 2] = [(4, 6), (12, 14)];
const ADD_C: Duration = Duration::from_secs(3);
const END: Duration = Duration::from_secs(60);
const AFTER_BAN: Duration = Duration::from_secs(2);

#[test]
fn a_banned_address_is_refused_by_every_transfer_and_protocol_across_reconnects() {
    let a = TorrentSpec::new("ban-a", Payload::random(8 << 20, 256 << 10, 41));
    let b = TorrentSpec::new("ban-b", Payload::synthetic(1 << 30, 1 << 20, 42));
    let c = TorrentSpec::new("ban-c", Payload::random(4 << 20, 256 << 10, 43));
    let e = Ed2kSpec::new("ban-e.bin", Payload::synthetic(1 << 30, ED2K_PART, 44));
    let mut w = World::new(41);
    w.net.link = LinkConfig::new(Duration::from_millis(20), 10_000_000);
    let liar = w.add_node(
        NodeConfig::new()
            .name("liar")
            .corrupt_uploads()
            .with(TransferConfig::seed(&a))
            .with(TransferConfig::seed(&c)),
    );
    let honest = w.add_node(
        NodeConfig::new()
            .name("honest")
            .with(TransferConfig::seed(&a))
            .with(TransferConfig::seed(&c)),
    );
    let (liar_bt, honest_bt) = (
        w.node(liar).bt_addr().expect("listens"),
        w.node(honest).bt_addr().expect("listens"),
    );
    let leecher = w.add_node(
        NodeConfig::new()
            .name("leecher")
            .with(TransferConfig::leech(&a).peers([liar_bt, honest_bt]))
            .with(TransferConfig::seed(&b))
            .with(TransferConfig::ed2k_share(&e)),
    );
    let (l_bt, l_ed2k) = (
        w.node(leecher).bt_addr().expect("listens"),
        w.node(leecher).ed2k_addr().expect("listens"),
    );
    // The liar wants `b` and `e` from the leecher, and keeps asking.
    w.add_transfer(liar, TransferConfig::leech(&b).peers([l_bt]));
    w.add_transfer(liar, TransferConfig::ed2k_get(&e).peers([l_ed2k]));
    for (down, up) in DOWN {
        w.at(Duration::from_secs(down), move |w| w.take_down(liar));
        w.at(Duration::from_secs(up), move |w| w.bring_up(liar));
    }
    // A torrent added after the ban, listing the liar.
    let other_port = SocketAddr::new(liar_bt.ip(), 7000);
    let c2 = c.clone();
    w.at(ADD_C, move |w| {
        let t = w.add_transfer(
            leecher,
            TransferConfig::leech(&c2).peers([liar_bt, honest_bt]),
        );
        let took = w.add_peers(
            leecher,
            t,
            Proto::Bt,
            &[liar_bt, other_port],
            Source::Tracker,
        );
        assert_eq!(took, 0, "the book took a banned address");
    });
    // The ban, and what the liar still gets afterwards.
    assert!(
        w.run_until(END, |w| !w.node(leecher).banned().is_empty()),
        "the liar was never banned"
    );
    let ban_time = w.now();
    let got_at_ban = w.node(liar).received().total();
    w.run_for(AFTER_BAN);
    let (peers_after, got_after) = (w.peers(liar), w.node(liar).received().total() - got_at_ban);
    w.run_to(END);

    let node = w.node(leecher);
    let liar_ip = liar_bt.ip();
    let ts = node.transfers();
    let t_a = ts[0];
    let t_c = *ts.last().expect("c was added");
    let arrivals_from_liar: Vec<_> = node
        .arrivals()
        .iter()
        .filter(|a| a.from.ip() == liar_ip)
        .collect();
    let dials_to_liar: Vec<_> = node
        .dials()
        .iter()
        .filter(|d| d.addr.ip() == liar_ip)
        .collect();
    eprintln!(
        "banned {:?} at {ban_time:?}; dials to the liar: {:?}; \
         arrivals from the liar: {:?}; a complete at {:?}, c complete at {:?}; \
         {AFTER_BAN:?} after the ban the liar had {peers_after} connections and had got {:.1} MiB \
         more",
        node.banned(),
        dials_to_liar
            .iter()
            .map(|d| format!("{:.3} s {:?}", d.at.as_secs_f64(), d.transfer))
            .collect::<Vec<_>>(),
        arrivals_from_liar
            .iter()
            .map(|a| format!("{:.3} s {} {:?}", a.at.as_secs_f64(), a.proto, a.result))
            .collect::<Vec<_>>(),
        node.completed_at_of(t_a),
        node.completed_at_of(t_c),
        got_after as f64 / (1 << 20) as f64,
    );
    assert_eq!(node.banned(), [liar_ip], "banned the wrong peers");
    assert!(
        node.stored_of(t_a).expect("real payload") == &a.payload.to_vec()[..],
        "a differs"
    );
    assert!(
        node.stored_of(t_c).expect("real payload") == &c.payload.to_vec()[..],
        "c differs"
    );
    // Never dialled again, by any transfer.
    assert!(
        dials_to_liar.iter().all(|d| d.at <= ban_time),
        "dialled after the ban"
    );
    assert!(
        dials_to_liar.iter().all(|d| d.transfer == Some(t_a)),
        "another transfer dialled the liar"
    );
    // Every connection from it after the ban refused before a handshake,
    // on both listeners; it came back several times.
    let after: Vec<_> = arrivals_from_liar
        .iter()
        .filter(|a| a.at > ban_time)
        .collect();
    assert!(
        after.iter().all(|a| a.result == Err(Refused::Banned)),
        "a connection from the liar was taken after the ban"
    );
    for proto in [Proto::Bt, Proto::Ed2k] {
        let n = after.iter().filter(|a| a.proto == proto).count();
        assert!(
            (3..=20).contains(&n),
            "{proto}: {n} connections from the liar after the ban"
        );
    }
    // Its connections of the other transfers and of eD2k ended with the
    // ban: what it got afterwards is at most what was already queued for
    // it (each connection's upload watermark and send buffer).
    assert_eq!(peers_after, 0, "the liar is still connected");
    assert!(
        got_after <= 2 * (8 << 20),
        "the liar got {got_after} bytes after the ban"
    );
    let closed_at_ban: std::collections::BTreeSet<_> = node
        .closed()
        .iter()
        .filter(|(t, _, _)| *t == ban_time)
        .map(|(_, c, _)| *c)
        .collect();
    assert_eq!(
        closed_at_ban.len(),
        3,
        "its a, b and e connections closed at the ban: {:?}",
        node.closed()
    );
    let st = node
        .session()
        .torrent(t_a)
        .expect("a torrent")
        .stats(w.instant());
    assert!(st.hash_failures >= 1, "the liar's data was never caught");
}
