//! Sans-IO eD2k protocol core for weir: what aMule and eMule speak.
//!
//! Nothing here touches a socket, a file or a clock. Bytes come in as
//! slices or [`bytes::Bytes`], results go out as values; the runtime
//! (`weir-runtime`) owns the sockets and files.
//!
//! - [`hash`]: MD4 part hashes and the ed2k file hash (with the empty-part
//!   rule), and the AICH SHA-1 tree in aMule's exact shape, including the
//!   recovery data that answers an AICH request for one part.
//! - [`link`]: `ed2k://|file|...|/` links: parse with clear errors, format
//!   the way aMule prints them.
//! - [`tag`]: eD2k tags, old and new (compact) encodings.
//! - [`packet`]: framing (0xE3 / 0xC5 / 0xD4), an incremental decoder over
//!   `BytesMut` with a length limit, bounded zlib inflation.
//! - [`client`]: typed client-to-client messages (hello, file requests,
//!   multipackets, hashsets, AICH, upload slots, part requests and data).
//! - [`server`]: the client-to-server protocol and a small sans-IO index
//!   server (`weir ed2k-server` runs it over sockets).
//!
//! Wire facts (layouts, what aMule 2.3.3 sends and expects) are recorded in
//! `PROTOCOL-NOTES.md` beside this crate, with the aMule source lines they
//! come from.

pub mod client;
pub mod hash;
pub mod inflate;
pub mod link;
pub mod packet;
pub mod server;
pub mod tag;
pub mod wire;

mod types;

pub use types::{AichHash, Md4Hash, ParseHashError};

/// Size of an eD2k part: the unit of MD4 verification and of the part
/// bitfield in `OP_FILESTATUS` (9,728,000 bytes).
pub const PARTSIZE: u64 = 9_728_000;

/// Size of an eD2k block (180 KiB): the unit of data requests and of AICH
/// leaves. A part holds 52 full blocks and one of 143,360 bytes.
pub const EMBLOCKSIZE: u64 = 184_320;

/// The largest file eD2k can describe (aMule's `MAX_FILE_SIZE`, 256 GiB).
pub const MAX_FILE_SIZE: u64 = 0x40_0000_0000;

/// Files at or above this size need 64-bit offsets on the wire
/// (`OP_REQUESTPARTS_I64`, ...) and are "large files" for aMule
/// (`OLD_MAX_FILE_SIZE`).
pub const OLD_MAX_FILE_SIZE: u64 = 4_290_048_000;

/// Number of data parts of a file of `size` bytes (0 for an empty file).
pub fn part_count(size: u64) -> u64 {
    size.div_ceil(PARTSIZE)
}

/// Number of parts announced in `OP_FILESTATUS` and part-status fields:
/// `size / PARTSIZE + 1`, one more than the data parts when the size is an
/// exact multiple of [`PARTSIZE`] (aMule `GetED2KPartCount`). 0 for an
/// empty file.
pub fn ed2k_part_count(size: u64) -> u64 {
    if size == 0 { 0 } else { size / PARTSIZE + 1 }
}

/// Number of MD4 hashes in a hashset (`OP_HASHSETANSWER`, `p=` of a link):
/// 0 below one part, else `size / PARTSIZE + 1` (the last one is the hash
/// of the empty part when the size is an exact multiple).
pub fn hashset_len(size: u64) -> u64 {
    if size < PARTSIZE {
        0
    } else {
        size / PARTSIZE + 1
    }
}

/// The shared-core geometry of an eD2k file: [`PARTSIZE`] pieces of
/// [`EMBLOCKSIZE`] blocks (the last block of a full part is 143,360 bytes,
/// exactly the AICH leaves). Pieces are data parts: an exact multiple of
/// the part size has no extra empty piece.
pub fn geometry(size: u64) -> weir_core::geometry::Geometry {
    // PARTSIZE and EMBLOCKSIZE are non-zero and MAX_FILE_SIZE / PARTSIZE
    // fits a u32, so this cannot fail for any eD2k size.
    weir_core::geometry::Geometry::new(size.min(MAX_FILE_SIZE), PARTSIZE as u32, EMBLOCKSIZE as u32)
        .expect("eD2k geometry is always valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_matches_parts_and_aich_blocks() {
        let g = geometry(2 * PARTSIZE);
        assert_eq!(g.piece_count(), 2);
        assert_eq!(g.blocks_in_piece(0), 53);
        assert_eq!(g.block(0, 52).len, 143_360);
        assert_eq!(g.block(1, 0).begin, 0);
        let g = geometry(PARTSIZE + 10);
        assert_eq!((g.piece_count(), g.piece_size(1)), (2, 10));
        assert_eq!(geometry(0).piece_count(), 0);
    }

    #[test]
    fn part_counts_match_amule_table() {
        // KnownFile.cpp SetFileSize table.
        for (size, data, ed2k, hashes) in [
            (1, 1, 1, 0),
            (PARTSIZE - 1, 1, 1, 0),
            (PARTSIZE, 1, 2, 2),
            (PARTSIZE + 1, 2, 2, 2),
            (2 * PARTSIZE, 2, 3, 3),
            (2 * PARTSIZE + 1, 3, 3, 3),
        ] {
            assert_eq!(part_count(size), data, "{size}");
            assert_eq!(ed2k_part_count(size), ed2k, "{size}");
            assert_eq!(hashset_len(size), hashes, "{size}");
        }
        assert_eq!(part_count(0), 0);
        assert_eq!(ed2k_part_count(0), 0);
    }
}
