//! What storage a source opens: a torrent's file layout, an eD2k file's
//! journal name and its part digests (from its link, or proved by data
//! already on disk). The engine's commands and [`super::DataPaths`] use
//! these, so a transfer's files are named in one place.

use std::path::PathBuf;

use weir_bt::metainfo::Metainfo;
use weir_core::storage::{Digest, Digests, FileLayout};
use weir_ed2k::Md4Hash;
use weir_ed2k::link::FileLink;

/// The layout of a torrent's files, relative to the download directory (a
/// multi-file torrent's files under a folder named after it).
pub(crate) fn layout(meta: &Metainfo) -> FileLayout {
    if meta.info.single_file {
        let f = &meta.info.files[0];
        FileLayout::new([(PathBuf::from(&*meta.info.name), f.length)])
    } else {
        let files = meta.info.files.iter().map(|f| {
            let mut p = PathBuf::from(&*meta.info.name);
            p.extend(f.path.iter());
            (p, f.length)
        });
        FileLayout::new(files)
    }
}

/// Names the journal and lock of an eD2k file: `.weir-resume-ed2k-<hash>`.
pub(crate) fn journal_stem(hash: &Md4Hash) -> String {
    format!("ed2k-{}", hash.to_hex().to_ascii_lowercase())
}

/// The part digests a link gives (a file below one part: its file hash;
/// otherwise its `p=` part hashes, if it has all of them).
pub(crate) fn link_digests(link: &FileLink) -> Option<Digests> {
    let n = weir_ed2k::geometry(link.size).piece_count() as usize;
    if weir_ed2k::hashset_len(link.size) == 0 {
        return Some(vec![Digest::Md4(link.hash.0); n].into());
    }
    let hs = link.part_hashes.as_ref()?;
    (hs.len() >= n).then(|| hs[..n].iter().map(|h| Digest::Md4(h.0)).collect())
}

/// The part digests of data that hashes to `hash` and is `size` bytes
/// long (`None` otherwise, or if it cannot be read).
pub(crate) fn derive_digests(
    r: &mut dyn std::io::Read,
    size: u64,
    hash: Md4Hash,
) -> Option<Digests> {
    let mut h = weir_ed2k::hash::Ed2kHasher::md4_only();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(_) => return None,
        }
    }
    let got = h.finish();
    (got.size == size && got.file_hash == hash).then(|| got.part_digests().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_bt::create::{TorrentBuilder, hash_pieces};
    use weir_ed2k::PARTSIZE;
    use weir_ed2k::hash::Ed2kHasher;

    fn link(size: u64, hash: Md4Hash, part_hashes: Option<Vec<Md4Hash>>) -> FileLink {
        FileLink {
            name: "f".into(),
            size,
            hash,
            aich: None,
            part_hashes,
            sources: Vec::new(),
        }
    }

    fn hashes(data: &[u8]) -> weir_ed2k::hash::FileHashes {
        let mut h = Ed2kHasher::new();
        h.update(data);
        h.finish()
    }

    #[test]
    fn a_single_file_torrent_is_its_name_and_a_multi_file_one_a_folder() {
        let data = vec![3u8; 40_000];
        let mut b = TorrentBuilder::single_file("one.bin", data.len() as u64, 16_384);
        b.pieces(hash_pieces(&data, 16_384));
        let meta = b.build().unwrap().metainfo;
        let l = layout(&meta);
        assert_eq!(l.files().len(), 1);
        assert_eq!(l.files()[0].path, PathBuf::from("one.bin"));
        assert_eq!(l.total_len(), 40_000);

        let mut b = TorrentBuilder::multi_file("set", 16_384);
        b.add_file(vec!["a".into()], 10_000);
        b.add_file(vec!["sub".into(), "b".into()], 30_000);
        b.pieces(hash_pieces(&data, 16_384));
        let meta = b.build().unwrap().metainfo;
        let l = layout(&meta);
        let paths: Vec<_> = l.files().iter().map(|f| f.path.clone()).collect();
        assert_eq!(
            paths,
            vec![PathBuf::from("set/a"), PathBuf::from("set/sub/b")]
        );
        assert_eq!(l.total_len(), 40_000);
    }

    #[test]
    fn the_journal_stem_is_the_lowercase_file_hash() {
        let h = Md4Hash([0xAB; 16]);
        assert_eq!(journal_stem(&h), format!("ed2k-{}", "ab".repeat(16)));
    }

    #[test]
    fn a_link_gives_digests_only_when_they_cover_every_part() {
        // Below one part: the file hash is the part's hash.
        let small = link(1000, Md4Hash([7; 16]), None);
        assert_eq!(
            link_digests(&small).map(|d| d.to_vec()),
            Some(vec![Digest::Md4([7; 16])])
        );
        // Two parts (and a bit): three part hashes needed.
        let size = 2 * PARTSIZE + 5;
        assert!(link_digests(&link(size, Md4Hash([1; 16]), None)).is_none());
        let two = vec![Md4Hash([1; 16]), Md4Hash([2; 16])];
        assert!(link_digests(&link(size, Md4Hash([1; 16]), Some(two))).is_none());
        let three = vec![Md4Hash([1; 16]), Md4Hash([2; 16]), Md4Hash([3; 16])];
        let d = link_digests(&link(size, Md4Hash([9; 16]), Some(three))).unwrap();
        assert_eq!(
            d.to_vec(),
            [
                Digest::Md4([1; 16]),
                Digest::Md4([2; 16]),
                Digest::Md4([3; 16])
            ]
        );
    }

    #[test]
    fn data_proves_its_digests_only_by_its_size_and_file_hash() {
        let data: Vec<u8> = (0..PARTSIZE + 1000).map(|i| (i % 251) as u8).collect();
        let h = hashes(&data);
        let size = data.len() as u64;
        let d = derive_digests(&mut &data[..], size, h.file_hash).unwrap();
        assert_eq!(d.to_vec(), h.part_digests());
        assert_eq!(d.len(), 2);
        // Another hash, another size, a short read: nothing.
        assert!(derive_digests(&mut &data[..], size, Md4Hash([0; 16])).is_none());
        assert!(derive_digests(&mut &data[..], size + 1, h.file_hash).is_none());
        assert!(derive_digests(&mut &data[..10], size, h.file_hash).is_none());
        // A read error: nothing.
        struct Failing;
        impl std::io::Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk gone"))
            }
        }
        assert!(derive_digests(&mut Failing, size, h.file_hash).is_none());
    }
}
