//! weir-ed2k hashset and AICH answers: `RecoveryData::decode` and
//! `RecoveryData::verify` on wire bytes, `OP_HASHSETANSWER` /
//! `OP_AICHANSWER` packets, and the whole round trip of a tree:
//! `AichTree::recovery_data` -> encode -> decode -> `verify` against the
//! master hash gives the part's block hashes, and any changed hash is
//! refused.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_ed2k::client::{ClientMessage, DecodeCtx, emule_op, op};
use weir_ed2k::hash::aich::{BLOCKS_PER_PART, leaf_count};
use weir_ed2k::hash::{AichTree, RecoveryData, RecoveryError, file_hash_from_hashset};
use weir_ed2k::packet::{Packet, Protocol};
use weir_ed2k::wire::Reader;
use weir_ed2k::{AichHash, EMBLOCKSIZE, MAX_FILE_SIZE, OLD_MAX_FILE_SIZE, PARTSIZE, part_count};
use weir_fuzz::Input;

fn aich(inp: &mut Input<'_>) -> AichHash {
    let mut h = [0u8; 20];
    h.copy_from_slice(&{
        let mut v = inp.take(20).to_vec();
        v.resize(20, 0);
        v
    });
    AichHash(h)
}

fn reread(rd: &RecoveryData) {
    let bytes = rd.to_bytes();
    let mut r = Reader::new(bytes);
    assert_eq!(RecoveryData::decode(&mut r).as_ref(), Ok(rd));
    assert!(r.is_empty());
}

/// Blocks in part `part` of a file of `size` bytes.
fn blocks_in_part(size: u64, part: u64) -> usize {
    let start = part * PARTSIZE;
    PARTSIZE.min(size - start).div_ceil(EMBLOCKSIZE) as usize
}

fn check_verify(rd: &RecoveryData, size: u64, master: AichHash, part: u64) {
    match rd.verify(size, master, part) {
        Ok(blocks) => assert_eq!(blocks.len(), blocks_in_part(size, part)),
        Err(
            RecoveryError::NoSuchPart { .. }
            | RecoveryError::Missing { .. }
            | RecoveryError::Mismatch,
        ) => {}
        Err(e) => panic!("verify: {e:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    match sel % 3 {
        0 => {
            // Recovery data straight from the wire.
            let size = 1 + inp.u64() % MAX_FILE_SIZE;
            let part = u64::from(inp.u16());
            let master = aich(&mut inp);
            let mut r = Reader::new(Bytes::copy_from_slice(inp.rest()));
            match RecoveryData::decode(&mut r) {
                Ok(rd) => {
                    reread(&rd);
                    check_verify(&rd, size, master, part);
                }
                Err(RecoveryError::Wire(_)) => {}
                Err(e) => panic!("decode: {e:?}"),
            }
        }
        1 => {
            // A real tree of up to 12 parts. (Above 4 GB, where
            // identifiers are 32-bit, building the 23,000 leaves takes
            // ~0.5 s a run; wide recovery data is fuzzed on the wire in
            // the first case.)
            let size = 1 + u64::from(inp.u32()) % (12 * PARTSIZE);
            let seed = inp.u64();
            let leaves: Vec<[u8; 20]> = (0..leaf_count(size))
                .map(|i| {
                    let mut h = [0u8; 20];
                    h[..8].copy_from_slice(&i.to_le_bytes());
                    h[8..16].copy_from_slice(&seed.to_le_bytes());
                    h
                })
                .collect();
            let tree = AichTree::from_leaves(size, leaves);
            let part = u64::from(inp.u16()) % (part_count(size) + 1);
            match tree.recovery_data(part) {
                Ok(rd) => {
                    assert_eq!(rd.wide, size > OLD_MAX_FILE_SIZE);
                    assert!(rd.hashes.len() <= 32 + BLOCKS_PER_PART as usize);
                    reread(&rd);
                    let blocks = rd
                        .verify(size, tree.root(), part)
                        .expect("own recovery data verifies");
                    assert_eq!(blocks, tree.part_leaves(part));
                    // Change one hash or identifier: never trusted.
                    let mut bad = rd.clone();
                    let i = usize::from(inp.u16()) % bad.hashes.len();
                    match inp.byte() % 3 {
                        0 => bad.hashes[i].1[usize::from(inp.byte()) % 20] ^= 1 << (inp.byte() % 8),
                        1 => bad.hashes[i].0 ^= 1 << (inp.byte() % 16),
                        _ => {
                            bad.hashes.remove(i);
                        }
                    }
                    if bad != rd {
                        assert!(
                            bad.verify(size, tree.root(), part).is_err(),
                            "tampered data verified"
                        );
                    }
                }
                Err(RecoveryError::NoSuchPart { .. }) => {
                    let start = part * PARTSIZE;
                    assert!(size <= EMBLOCKSIZE || start >= size || size - start <= EMBLOCKSIZE);
                }
                Err(e) => panic!("recovery_data: {e:?}"),
            }
        }
        _ => {
            // The two answers as packets.
            let (protocol, opcode) = if sel & 8 == 0 {
                (Protocol::Edonkey, op::HASHSETANSWER)
            } else {
                (Protocol::Emule, emule_op::AICHANSWER)
            };
            let size = 1 + inp.u64() % MAX_FILE_SIZE;
            let p = Packet {
                protocol,
                opcode,
                payload: Bytes::copy_from_slice(inp.rest()),
                packed: false,
            };
            match ClientMessage::decode(&p, &DecodeCtx::default()) {
                Ok(ClientMessage::HashSetAnswer { hashes, .. }) => {
                    assert_eq!(p.payload.len(), 18 + 16 * hashes.len());
                    let _ = file_hash_from_hashset(&hashes);
                }
                Ok(ClientMessage::AichAnswer {
                    data: Some((part, master, rd)),
                    ..
                }) => {
                    reread(&rd);
                    check_verify(&rd, size, master, u64::from(part));
                }
                Ok(ClientMessage::AichAnswer { data: None, .. }) => assert_eq!(p.payload.len(), 16),
                Ok(m) => panic!("{m:?} from opcode {opcode:#x}"),
                Err(_) => {}
            }
        }
    }
});
