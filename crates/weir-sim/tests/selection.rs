//! File selection (BEP 53 `so=`, `--files`): a leecher that wants only
//! some pieces asks for those and no others, completes when it has them,
//! and reports its progress against them, not the whole torrent.

use std::time::Duration;

use weir_core::bitfield::Bitfield;
use weir_sim::{LinkConfig, NodeConfig, Payload, TorrentSpec, TransferConfig, World};

#[test]
fn a_leecher_fetches_the_selected_pieces_only_and_completes() {
    const PIECE: u32 = 256 << 10;
    let spec = TorrentSpec::new("sel", Payload::synthetic(64 * u64::from(PIECE), PIECE, 9));
    let n = spec.meta.info.piece_count();
    // Two "files": pieces 5..12 and piece 40 (a boundary piece of each).
    let mut wanted = Bitfield::new(n);
    for p in (5..12).chain([40]) {
        wanted.set(p);
    }
    let mut w = World::new(11);
    let seeder = w.add_bt(NodeConfig::seeder(&spec));
    let leecher =
        w.add_bt(NodeConfig::new().with(TransferConfig::leech(&spec).wanted(wanted.clone())));
    w.connect_sym(
        seeder,
        leecher,
        LinkConfig::new(Duration::from_millis(10), 50_000_000),
    );
    let done = w.run_until(Duration::from_secs(20), |w| {
        w.node(leecher).completed_at().is_some()
    });
    assert!(done, "the selected pieces never completed");
    let t = w.node(leecher).torrent();
    assert!(t.is_complete());
    assert_eq!(t.had(), &wanted, "had exactly the selected pieces");
    let s = t.stats(w.instant());
    let bytes = 8 * u64::from(PIECE);
    assert_eq!(
        (s.bytes_wanted, s.bytes_had, s.bytes_left),
        (bytes, bytes, 0)
    );
    // Nothing outside the selection came over the wire (endgame duplicates
    // of selected blocks at most).
    let got = w.node(leecher).received().total();
    assert!(
        got >= bytes && got < bytes + u64::from(PIECE),
        "received {got} for {bytes}"
    );
    eprintln!(
        "selected 8 of {n} pieces: received {got} bytes, complete at {:.3} s",
        w.node(leecher).completed_at().expect("done").as_secs_f64()
    );
}
