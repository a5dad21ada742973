//! Heap held per piece by a parsed torrent and its idle `Torrent`, counted
//! by this test binary's own allocator: the piece hashes once (20 bytes a
//! piece, shared by the metainfo and storage's digests) and the picker's
//! one state byte, not the 77 bytes a piece a 2,000-piece torrent once cost
//! (three copies of the hashes, availability and buckets for a torrent that
//! had never seen a peer).

use weir_bt::metainfo::Metainfo;
use weir_bt::torrent::{Torrent, TorrentConfig};
use weir_core::bitfield::Bitfield;

#[global_allocator]
static ALLOC: weir_lab::alloc::Counting = weir_lab::alloc::Counting;

/// A single-file torrent of `pieces` pieces of 16 KiB.
fn torrent(pieces: usize) -> Vec<u8> {
    let hashes: Vec<u8> = (0..pieces * 20).map(|i| (i % 251) as u8).collect();
    let mut t = format!(
        "d4:infod6:lengthi{}e4:name8:file.bin12:piece lengthi16384e6:pieces{}:",
        pieces * 16_384 - 100,
        hashes.len()
    )
    .into_bytes();
    t.extend_from_slice(&hashes);
    t.extend_from_slice(b"ee");
    t
}

#[test]
fn an_idle_torrent_holds_about_the_hashes_and_a_byte_a_piece() {
    const PIECES: usize = 8_192;
    let file = torrent(PIECES);
    let before = weir_lab::alloc::live();
    let meta = Metainfo::from_bytes(&file).unwrap();
    let digests = Torrent::digests(&meta);
    let n = meta.info.piece_count();
    let t = Torrent::new(
        &meta,
        TorrentConfig::new([7; 20]),
        &Bitfield::new(n),
        &Bitfield::new(n),
    );
    let held = weir_lab::alloc::live() - before;
    let per_piece = held as f64 / PIECES as f64;
    // 20 bytes of hash, 1 of picker state, a few bits of bitfields, and a
    // fixed part spread over the pieces.
    assert!(
        per_piece < 24.0,
        "{held} bytes held for {PIECES} pieces: {per_piece:.1} a piece"
    );
    eprintln!("{per_piece:.1} bytes a piece");
    assert_eq!(digests.len(), PIECES);
    drop((t, digests, meta));
}
