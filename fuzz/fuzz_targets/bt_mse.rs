//! weir-bt MSE/PE handshakes (`mse::Initiator`, `mse::Responder`).
//!
//! Three modes, by the first byte:
//! - a responder fed arbitrary bytes, cut into reads;
//! - an initiator fed arbitrary bytes after its Ya;
//! - an initiator and a responder talking to each other (any policies,
//!   pads, IA, reads cut anywhere), optionally with one byte of either
//!   direction flipped.
//!
//! Always: no panic; while unsettled a side holds at most what the spec
//! bounds (`MAX_RESPONDER_PREFIX` + `max_ia`, `MAX_INITIATOR_PREFIX`) and
//! writes at most its own handshake; an error is final (the same error
//! again, nothing more written after it). A responder only takes a plaintext
//! connection that starts with the BitTorrent protocol string, under a
//! policy that accepts it. Unmodified, the two sides agree: both settle
//! with the crypto the responder's policy selects, the same info-hash, IA
//! delivered to the responder, and ciphers that decrypt each other's
//! stream; or the side the policies say fails, with that error.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use weir_bt::mse::{
    Accepted, Crypto, Encryption, Established, Initiator, KEY_LEN, MAX_INITIATOR_PREFIX, MAX_PAD,
    MAX_RESPONDER_PREFIX, MseConfig, MseError, Responder, Skeys,
};
use weir_fuzz::{Input, chunks};

const HASH: [u8; 20] = [7; 20];
const BT_PREFIX: &[u8] = b"\x13BitTorrent protocol";

fn cfg(inp: &mut Input<'_>) -> MseConfig {
    let b = inp.byte();
    let mut c = MseConfig::new(Encryption::ALL[usize::from(b % 4)]);
    c.pad_ab = inp.u16() % 600;
    c.pad_cd = inp.u16() % 600;
    if b & 0x10 != 0 {
        c.max_ia = inp.u16() % 200;
    }
    c.timeout = Duration::from_secs(20);
    c
}

fn responder_alone(inp: &mut Input<'_>, now: Instant) {
    let c = cfg(inp);
    let mut rng = fastrand::Rng::with_seed(u64::from(inp.u32()));
    let seed = inp.byte();
    let skeys = Skeys::from_info_hashes([&HASH]);
    let mut r = Responder::new(c, &mut rng, now);
    let stream = inp.clone().rest();
    let mut out = Vec::new();
    let mut fed = 0usize;
    for piece in chunks(stream, seed) {
        fed += piece.len();
        let before = out.len();
        match r.handle_input(piece, &skeys, &mut out) {
            Ok(None) => {
                assert!(r.buffered() <= MAX_RESPONDER_PREFIX + usize::from(c.max_ia));
                assert!(
                    out.len() <= KEY_LEN + MAX_PAD,
                    "responder wrote {}",
                    out.len()
                );
            }
            Ok(Some(Accepted::Plaintext(b))) => {
                assert!(c.policy.accepts_plaintext());
                assert_eq!(b.len(), fed, "plaintext start lost bytes");
                assert!(b.starts_with(BT_PREFIX));
                assert_eq!(out.len(), before);
                return;
            }
            // Needs HASH('req1', S) for a key the fuzzer cannot know.
            Ok(Some(Accepted::Encrypted(_))) => panic!("settled MSE from random bytes"),
            Err(e) => {
                // What the failing call wrote (Yb, when the same read then
                // fails) is never sent: the connection is closed.
                let before = out.len();
                if let MseError::PlaintextRefused = e {
                    assert!(!c.policy.accepts_plaintext());
                }
                if let MseError::EncryptionRefused = e {
                    assert!(!c.policy.accepts_mse());
                }
                assert_eq!(
                    r.handle_input(b"x", &skeys, &mut out).err(),
                    Some(e.clone())
                );
                assert_eq!(r.handle_timeout(now).err(), Some(e));
                assert_eq!(out.len(), before);
                return;
            }
        }
    }
    assert_eq!(
        r.handle_timeout(now + c.timeout).err(),
        Some(MseError::Timeout(c.timeout))
    );
}

fn initiator_alone(inp: &mut Input<'_>, now: Instant) {
    let c = cfg(inp);
    let mut rng = fastrand::Rng::with_seed(u64::from(inp.u32()));
    let seed = inp.byte();
    let Ok(mut a) = Initiator::new(
        c,
        HASH,
        &[1; 68][..68.min(usize::from(c.max_ia))],
        &mut rng,
        now,
    ) else {
        return;
    };
    let first = a.take_output();
    assert!(first.len() >= KEY_LEN && first.len() <= KEY_LEN + MAX_PAD);
    let mut out = Vec::new();
    for piece in chunks(inp.clone().rest(), seed) {
        match a.handle_input(piece, &mut out) {
            Ok(None) => {
                assert!(a.buffered() <= MAX_INITIATOR_PREFIX);
                assert!(out.len() <= 20 + 20 + 8 + 4 + 2 + MAX_PAD + 2 + 68);
            }
            Ok(Some(_)) => panic!("settled MSE from random bytes"),
            Err(e) => {
                let before = out.len();
                assert_eq!(a.handle_input(b"x", &mut out).err(), Some(e.clone()));
                assert_eq!(out.len(), before);
                return;
            }
        }
    }
}

fn take(v: &mut Vec<u8>, n: u8) -> Vec<u8> {
    let n = if n == 0 {
        v.len()
    } else {
        usize::from(n).min(v.len())
    };
    v.drain(..n).collect()
}

fn pair(inp: &mut Input<'_>, now: Instant) {
    let ca = cfg(inp);
    let cb = cfg(inp);
    let mut rng = fastrand::Rng::with_seed(u64::from(inp.u32()));
    let ia_len = usize::from(inp.byte() % 100);
    let ia: Vec<u8> = (0..ia_len).map(|i| i as u8 ^ 0x5a).collect();
    let wrong_hash = inp.byte() % 8 == 0;
    let flip = inp.byte();
    let flip_at = usize::from(inp.u16() % 1400);
    let flip_bit = 1u8 << (inp.byte() % 8);
    let skeys = Skeys::from_info_hashes([if wrong_hash { &[9; 20] } else { &HASH }]);
    let mut a = match Initiator::new(ca, HASH, &ia, &mut rng, now) {
        Ok(a) => a,
        Err(e) => {
            assert!(
                e == MseError::PolicyForbids(ca.policy) && ca.policy == Encryption::Off
                    || matches!(e, MseError::OwnIaTooLong { .. })
                        && ia.len() > usize::from(ca.max_ia),
                "{e:?}"
            );
            return;
        }
    };
    let mut b = Responder::new(cb, &mut rng, now);
    let mut a_to_b = a.take_output();
    let mut b_to_a = Vec::new();
    let (mut sent_ab, mut sent_ba) = (0usize, 0usize);
    let (mut ra, mut rb): (
        Option<Result<Established, MseError>>,
        Option<Result<Established, MseError>>,
    ) = (None, None);
    for _ in 0..10_000 {
        let mut moved = false;
        if rb.is_none() && !a_to_b.is_empty() {
            moved = true;
            let mut chunk = take(&mut a_to_b, inp.byte());
            if flip == 1 && (sent_ab..sent_ab + chunk.len()).contains(&flip_at) {
                chunk[flip_at - sent_ab] ^= flip_bit;
            }
            sent_ab += chunk.len();
            match b.handle_input(&chunk, &skeys, &mut b_to_a) {
                Ok(None) => assert!(b.buffered() <= MAX_RESPONDER_PREFIX + usize::from(cb.max_ia)),
                Ok(Some(Accepted::Encrypted(e))) => rb = Some(Ok(*e)),
                Ok(Some(Accepted::Plaintext(_))) => panic!("MSE taken for plaintext"),
                Err(e) => rb = Some(Err(e)),
            }
        }
        if ra.is_none() && !b_to_a.is_empty() {
            moved = true;
            let mut chunk = take(&mut b_to_a, inp.byte());
            if flip == 2 && (sent_ba..sent_ba + chunk.len()).contains(&flip_at) {
                chunk[flip_at - sent_ba] ^= flip_bit;
            }
            sent_ba += chunk.len();
            match a.handle_input(&chunk, &mut a_to_b) {
                Ok(None) => assert!(a.buffered() <= MAX_INITIATOR_PREFIX),
                Ok(Some(e)) => ra = Some(Ok(e)),
                Err(e) => ra = Some(Err(e)),
            }
        }
        if !moved {
            break;
        }
    }
    if flip == 1 || flip == 2 {
        return; // no panic, bounded: that is all a flipped byte promises
    }
    let provide = ca.policy.provide();
    let expect_b: Result<Crypto, MseError> = if !cb.policy.accepts_mse() {
        Err(MseError::EncryptionRefused)
    } else if wrong_hash {
        Err(MseError::UnknownInfoHash)
    } else if ia.len() > usize::from(cb.max_ia) {
        Err(MseError::IaTooLong {
            len: ia.len() as u16,
            max: cb.max_ia,
        })
    } else {
        cb.policy.select(provide).ok_or(MseError::NoCommonCrypto {
            provide,
            policy: cb.policy,
        })
    };
    let rb = rb.expect("responder never settled");
    match (expect_b, rb) {
        (Err(want), Err(got)) => {
            assert_eq!(got, want);
            assert!(ra.is_none(), "initiator settled against a failed responder");
        }
        (Ok(crypto), Ok(eb)) => {
            let ea = ra
                .expect("initiator never settled")
                .expect("initiator failed");
            assert_eq!((ea.crypto, eb.crypto), (crypto, crypto));
            assert_eq!((ea.info_hash, eb.info_hash), (HASH, HASH));
            assert_eq!(eb.payload, ia, "IA not delivered");
            assert!(ea.payload.is_empty());
            let (Some(mut ka), Some(mut kb)) = (ea.cipher, eb.cipher) else {
                assert_eq!(crypto, Crypto::Plaintext);
                return;
            };
            let mut m = b"after the handshake".to_vec();
            ka.encrypt.apply_keystream(&mut m);
            kb.decrypt.apply_keystream(&mut m);
            assert_eq!(m, b"after the handshake");
            kb.encrypt.apply_keystream(&mut m);
            ka.decrypt.apply_keystream(&mut m);
            assert_eq!(m, b"after the handshake");
        }
        (want, got) => panic!("responder: expected {want:?}, got {got:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let now = Instant::now();
    match inp.byte() % 3 {
        0 => responder_alone(&mut inp, now),
        1 => initiator_alone(&mut inp, now),
        _ => pair(&mut inp, now),
    }
});
