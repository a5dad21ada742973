//! Hashing tests: known vectors, the empty-part rule, chunking independence
//! and AICH recovery data.

use super::*;
use crate::hash::aich::leaf_count;
use crate::{AichHash, EMBLOCKSIZE, PARTSIZE};
use proptest::prelude::*;

/// AES-128-CTR keystream, key 00..0f, IV 0: the lab's deterministic test
/// content (`openssl enc -aes-128-ctr -K 000102..0f -iv 0 < /dev/zero`).
fn keystream(len: usize) -> Vec<u8> {
    use aes::cipher::{KeyIvInit, StreamCipher};
    type Ctr = ctr::Ctr128BE<aes::Aes128>;
    let key: [u8; 16] = std::array::from_fn(|i| i as u8);
    let mut c = Ctr::new(&key.into(), &[0u8; 16].into());
    let mut v = vec![0u8; len];
    c.apply_keystream(&mut v);
    v
}

fn hash_all(data: &[u8]) -> FileHashes {
    let mut h = Ed2kHasher::new();
    h.update(data);
    h.finish()
}

#[test]
fn md4_vectors() {
    // RFC 1320.
    assert_eq!(md4(b"").to_hex(), "31D6CFE0D16AE931B73C59D7E0C089C0");
    assert_eq!(md4(b"abc").to_hex(), "A448017AAF21D8525FC10AE87AA6729D");
    assert_eq!(md4(b"").to_hex(), Md4Hash::EMPTY.to_hex());
}

#[test]
fn one_part_keystream_vector_from_the_lab() {
    let data = keystream(PARTSIZE as usize);
    assert_eq!(data[..4], [0xc6, 0xa1, 0x3b, 0x37]); // AES-128(k, 0) starts c6a13b37
    let h = hash_all(&data);
    assert_eq!(h.file_hash.to_hex(), "D3B6B09D73D3FE0DD41DDE5ED244215A");
    assert_eq!(h.hashset.len(), 2);
    assert_eq!(h.hashset[1], Md4Hash::EMPTY);
    // Without the empty-part rule the file hash would be the part's MD4.
    assert_eq!(h.hashset[0].to_hex(), "6E6DC9CAF5C2BAB98702E5C4E68769F0");
    assert_eq!(h.hashset[0], md4(&data));
    assert_eq!(h.part_hash(0), Some(h.hashset[0]));
    assert_eq!(h.part_hash(1), None);
}

#[test]
fn core_verifier_accepts_parts_and_rejects_a_bad_one() {
    use weir_core::storage::PieceVerifier;
    let len = PARTSIZE as usize + 1000;
    let mut data = keystream(len);
    let h = hash_all(&data);
    let digests: weir_core::storage::Digests = h.part_digests().into();
    assert_eq!(digests.len(), 2);
    let v = PieceVerifier::new(crate::geometry(len as u64), digests);
    assert!(v.check(0, &data[..PARTSIZE as usize]));
    assert!(v.check(1, &data[PARTSIZE as usize..]));
    data[5] ^= 1;
    assert!(!v.check(0, &data[..PARTSIZE as usize]));
}

#[test]
fn empty_and_tiny_files() {
    let h = hash_all(b"");
    assert_eq!(h.file_hash, Md4Hash::EMPTY);
    assert!(h.hashset.is_empty());
    assert!(h.aich.is_none());
    assert_eq!(h.part_hash(0), None);
    let h = hash_all(b"abc");
    assert_eq!(h.file_hash, md4(b"abc"));
    assert_eq!(h.part_hash(0), Some(md4(b"abc")));
    // A file of one block: the AICH master hash is the block's SHA-1.
    let a = h.aich.unwrap();
    assert_eq!(
        a.root().0,
        <[u8; 20]>::from(<sha1::Sha1 as sha1::Digest>::digest(b"abc"))
    );
}

#[test]
fn hashset_rules_around_the_boundary() {
    let p = PARTSIZE as usize;
    let data = keystream(2 * p + 1);
    for len in [p - 1, p, p + 1, 2 * p, 2 * p + 1] {
        let h = hash_all(&data[..len]);
        let parts: Vec<Md4Hash> = data[..len].chunks(p).map(md4).collect();
        if len < p {
            assert!(h.hashset.is_empty());
            assert_eq!(h.file_hash, md4(&data[..len]));
        } else {
            let mut expect = parts.clone();
            if len % p == 0 {
                expect.push(Md4Hash::EMPTY);
            }
            assert_eq!(h.hashset, expect, "{len}");
            assert_eq!(h.file_hash, file_hash_from_hashset(&expect));
        }
        for (i, ph) in parts.iter().enumerate() {
            assert_eq!(h.part_hash(i as u64), Some(*ph), "{len} part {i}");
        }
        assert_eq!(h.hashset.len() as u64, crate::hashset_len(len as u64));
    }
}

/// Straightforward recursive AICH over the data itself (independent of the
/// leaf bookkeeping in `AichTree`), written from the rule in SHAHashSet.cpp.
fn aich_reference(data: &[u8], start: u64, size: u64, left: bool) -> [u8; 20] {
    use sha1::Digest;
    if size <= EMBLOCKSIZE {
        let s = start as usize;
        return sha1::Sha1::digest(&data[s..s + size as usize]).into();
    }
    let base = if size <= PARTSIZE {
        EMBLOCKSIZE
    } else {
        PARTSIZE
    };
    let n = size.div_ceil(base);
    let nl = (if left { n + 1 } else { n }) / 2 * base;
    let mut h = sha1::Sha1::new();
    h.update(aich_reference(data, start, nl, true));
    h.update(aich_reference(data, start + nl, size - nl, false));
    h.finalize().into()
}

#[test]
fn aich_matches_reference_for_boundary_sizes() {
    let p = PARTSIZE as usize;
    let b = EMBLOCKSIZE as usize;
    let data = keystream(3 * p + b + 5);
    for len in [
        1,
        b - 1,
        b,
        b + 1,
        p - 1,
        p,
        p + 1,
        2 * p,
        2 * p + 1,
        3 * p + b + 5,
    ] {
        let h = hash_all(&data[..len]);
        let a = h.aich.expect("aich");
        assert_eq!(a.leaves().len() as u64, leaf_count(len as u64));
        let want = aich_reference(&data[..len], 0, len as u64, true);
        assert_eq!(a.root(), AichHash(want), "size {len}");
    }
}

#[test]
fn recovery_data_round_trips_and_verifies() {
    let p = PARTSIZE as usize;
    let len = 3 * p + 2 * EMBLOCKSIZE as usize + 17;
    let data = keystream(len);
    let tree = hash_all(&data).aich.unwrap();
    for part in 0..4u64 {
        let rd = tree.recovery_data(part).unwrap();
        assert!(!rd.wide);
        let bytes = rd.to_bytes();
        let back =
            RecoveryData::decode(&mut crate::wire::Reader::new(bytes.clone())).expect("decode");
        assert_eq!(back, rd);
        let blocks = back.verify(len as u64, tree.root(), part).expect("verify");
        assert_eq!(blocks.as_slice(), tree.part_leaves(part));
        // Flip one bit of one hash: verification fails.
        let mut bad = rd.clone();
        let last = bad.hashes.len() - 1;
        bad.hashes[last].1[0] ^= 1;
        assert_eq!(
            bad.verify(len as u64, tree.root(), part),
            Err(RecoveryError::Mismatch)
        );
        // Drop one: a missing hash is named.
        let mut short = rd.clone();
        short.hashes.remove(0);
        assert!(matches!(
            short.verify(len as u64, tree.root(), part),
            Err(RecoveryError::Missing { .. })
        ));
    }
    assert!(matches!(
        tree.recovery_data(4),
        Err(RecoveryError::NoSuchPart { part: 4, .. })
    ));
    // The count matches aMule's formula (levels - 1) + blocks: part 3 has 3 blocks.
    let rd = tree.recovery_data(3).unwrap();
    assert_eq!(rd.hashes.len(), 2 + 3);
    assert_eq!(rd.hashes.len() * 22 + 4, rd.to_bytes().len());
}

#[test]
fn no_recovery_data_for_single_block_parts() {
    let data = keystream(PARTSIZE as usize + 10);
    let tree = hash_all(&data).aich.unwrap();
    assert!(tree.recovery_data(0).is_ok());
    assert!(matches!(
        tree.recovery_data(1),
        Err(RecoveryError::NoSuchPart { part: 1, .. })
    ));
    let small = hash_all(&data[..100]).aich.unwrap();
    assert!(matches!(
        small.recovery_data(0),
        Err(RecoveryError::NoSuchPart { part: 0, size: 100 })
    ));
}

#[test]
fn recovery_decoder_rejects_garbage() {
    for bytes in [
        &[][..],
        &[1, 0],
        &[1, 0, 3, 0],
        &[0xff, 0xff, 0, 0],
        &[0, 0, 1, 0, 1, 2],
    ] {
        let r = RecoveryData::decode(&mut crate::wire::Reader::new(Bytes::copy_from_slice(bytes)));
        assert!(matches!(r, Err(RecoveryError::Wire(_))), "{bytes:?}: {r:?}");
    }
}

use bytes::Bytes;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Chunking never changes the result.
    #[test]
    fn chunking_is_irrelevant(len in 0usize..(PARTSIZE as usize + 300_000), cuts in proptest::collection::vec(1usize..400_000, 1..8)) {
        let data = keystream(len);
        let whole = hash_all(&data);
        let mut h = Ed2kHasher::new();
        let mut rest = &data[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            h.update(&rest[..n]);
            rest = &rest[n..];
            i += 1;
        }
        prop_assert_eq!(h.finish(), whole);
    }

    /// Arbitrary recovery packets never panic the decoder or verifier.
    #[test]
    fn recovery_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), size in 1u64..(5 * PARTSIZE), part in 0u64..6) {
        match RecoveryData::decode(&mut crate::wire::Reader::new(Bytes::from(bytes))) {
            Ok(rd) => {
                // It re-encodes to itself, and verifying it against a
                // master hash it was not made for never succeeds.
                let mut r = crate::wire::Reader::new(rd.to_bytes());
                prop_assert_eq!(RecoveryData::decode(&mut r), Ok(rd.clone()));
                let v = rd.verify(size, AichHash::default(), part);
                prop_assert!(
                    matches!(v, Err(RecoveryError::NoSuchPart { .. } | RecoveryError::Missing { .. } | RecoveryError::Mismatch)),
                    "{:?}", v
                );
            }
            Err(e) => prop_assert!(matches!(e, RecoveryError::Wire(_)), "{:?}", e),
        }
    }
}
