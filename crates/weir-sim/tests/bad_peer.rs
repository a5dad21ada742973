//! A lying seeder: it flips a byte of every block it uploads. Next to it an
//! honest seeder. The leecher (SHA-1 verifying as it writes) must finish
//! with the right data, ban the liar, and keep the honest seeder.

use std::time::Duration;

use weir_session::CloseReason;
use weir_sim::{LinkConfig, NodeConfig, Payload, TorrentSpec, World};

#[test]
fn corrupt_seeder_is_banned_and_download_completes() {
    let spec = TorrentSpec::new("bad", Payload::random(8 << 20, 256 << 10, 12));
    let mut w = World::new(12);
    let liar = w.add_bt(NodeConfig::seeder(&spec).name("liar").corrupt_uploads());
    let honest = w.add_bt(NodeConfig::seeder(&spec).name("honest"));
    let leecher = w.add_bt(NodeConfig::leecher(&spec).name("leecher"));
    let link = LinkConfig::new(Duration::from_millis(20), 10_000_000);
    let cl = w.connect_sym(liar, leecher, link.clone());
    let ch = w.connect_sym(honest, leecher, link);
    let done = w.run_until(Duration::from_secs(60), |w| {
        w.node(leecher).completed_at().is_some()
    });
    let n = w.node(leecher);
    let st = n.torrent().stats(w.instant());
    let closed: Vec<String> = n
        .closed()
        .iter()
        .map(|(t, c, r)| format!("conn {c} at {:.2} s: {r}", t.as_secs_f64()))
        .collect();
    eprintln!(
        "complete: {:?}; hash failures {}; banned {:?}; closed: {closed:?}; \
         from liar {:.1} MiB, from honest {:.1} MiB",
        n.completed_at(),
        st.hash_failures,
        n.banned(),
        w.conn_stats(leecher, cl.b).payload_received as f64 / (1 << 20) as f64,
        w.conn_stats(leecher, ch.b).payload_received as f64 / (1 << 20) as f64,
    );
    assert!(
        done,
        "download did not complete; banned {:?} (a failed piece strikes every peer that \
         contributed a block to it, so the honest seeder shares the liar's strikes)",
        n.banned()
    );
    assert!(
        n.stored().expect("real payload") == &spec.payload.to_vec()[..],
        "data differs"
    );
    assert!(st.hash_failures >= 1, "the liar's data was never caught");
    assert_eq!(
        n.banned(),
        [w.node(liar).addr().ip()],
        "banned the wrong peers"
    );
    // The liar's connection was closed for it; the honest one was not
    // closed as a liar (it may be closed at the end as a fellow seed).
    assert!(
        n.closed()
            .iter()
            .any(|(_, c, r)| *c == cl.b && matches!(r, CloseReason::Banned(_))),
        "liar not dropped: {closed:?}"
    );
    assert!(
        !n.closed()
            .iter()
            .any(|(_, c, r)| *c == ch.b && matches!(r, CloseReason::Banned(_))),
        "honest seeder dropped as a liar: {closed:?}"
    );
}
