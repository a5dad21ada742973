//! Initiator against responder in memory: every policy pair, random
//! chunking, bounds and hostile input.

use std::time::Instant;

use proptest::prelude::*;

use super::*;
use crate::wire::Handshake;

const IH: [u8; 20] = [0x11; 20];

fn epoch() -> Instant {
    Instant::now() // test-epoch
}

fn bt_handshake() -> Vec<u8> {
    let mut b = bytes::BytesMut::new();
    Handshake::new(IH, [0x22; 20]).encode(&mut b);
    b.to_vec()
}

fn skeys() -> Skeys {
    Skeys::from_info_hashes([&[0x99; 20], &IH, &[0x01; 20]])
}

/// Moves bytes both ways in chunks drawn from `rng` (1..=max_chunk bytes)
/// until both sides settle or one fails. Returns both outcomes.
struct Pair {
    init: Initiator,
    resp: Responder,
    a_to_b: Vec<u8>,
    b_to_a: Vec<u8>,
    rng: fastrand::Rng,
    max_chunk: usize,
}

/// Each side's outcome (`None`: still waiting when the other side stopped,
/// as if the connection closed), and bytes A sent that B never read.
type PairOutcome = (
    Option<Result<Established, MseError>>,
    Option<Result<Accepted, MseError>>,
    Vec<u8>,
);

impl Pair {
    fn new(ip: Encryption, rp: Encryption, seed: u64, max_chunk: usize) -> Result<Pair, MseError> {
        Pair::with(MseConfig::new(ip), MseConfig::new(rp), seed, max_chunk)
    }

    fn with(ic: MseConfig, rc: MseConfig, seed: u64, max_chunk: usize) -> Result<Pair, MseError> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let now = epoch();
        let mut init = Initiator::new(ic, IH, &bt_handshake(), &mut rng, now)?;
        let resp = Responder::new(rc, &mut rng, now);
        let a_to_b = init.take_output();
        Ok(Pair {
            init,
            resp,
            a_to_b,
            b_to_a: Vec::new(),
            rng,
            max_chunk,
        })
    }

    /// Runs until both sides settle, one fails, or nothing moves.
    fn run(mut self) -> PairOutcome {
        let keys = skeys();
        let mut a: Option<Result<Established, MseError>> = None;
        let mut b: Option<Result<Accepted, MseError>> = None;
        for _ in 0..100_000 {
            let mut progressed = false;
            if b.is_none() && !self.a_to_b.is_empty() {
                let n = self.rng.usize(1..=self.max_chunk).min(self.a_to_b.len());
                let chunk: Vec<u8> = self.a_to_b.drain(..n).collect();
                let mut out = Vec::new();
                match self.resp.handle_input(&chunk, &keys, &mut out) {
                    Ok(Some(acc)) => {
                        // Bytes still queued from A are payload for B.
                        let acc = match acc {
                            Accepted::Encrypted(mut e) => {
                                let mut rest = std::mem::take(&mut self.a_to_b);
                                if let Some(c) = e.cipher.as_mut() {
                                    c.decrypt.apply_keystream(&mut rest);
                                }
                                e.payload.extend_from_slice(&rest);
                                Accepted::Encrypted(e)
                            }
                            Accepted::Plaintext(mut p) => {
                                p.append(&mut self.a_to_b);
                                Accepted::Plaintext(p)
                            }
                        };
                        b = Some(Ok(acc));
                    }
                    Ok(None) => {}
                    Err(e) => b = Some(Err(e)),
                }
                self.b_to_a.extend_from_slice(&out);
                progressed = true;
            }
            if a.is_none() && !self.b_to_a.is_empty() {
                let n = self.rng.usize(1..=self.max_chunk).min(self.b_to_a.len());
                let chunk: Vec<u8> = self.b_to_a.drain(..n).collect();
                let mut out = Vec::new();
                match self.init.handle_input(&chunk, &mut out) {
                    Ok(Some(mut e)) => {
                        let mut rest = std::mem::take(&mut self.b_to_a);
                        if let Some(c) = e.cipher.as_mut() {
                            c.decrypt.apply_keystream(&mut rest);
                        }
                        e.payload.extend_from_slice(&rest);
                        a = Some(Ok(e));
                    }
                    Ok(None) => {}
                    Err(e) => a = Some(Err(e)),
                }
                self.a_to_b.extend_from_slice(&out);
                progressed = true;
            }
            let a_done = a.is_some();
            let b_done = b.is_some();
            if (a_done && b_done) || (!progressed) {
                break;
            }
            if matches!(b, Some(Err(_))) && self.b_to_a.is_empty() {
                break;
            }
            if matches!(a, Some(Err(_))) {
                break;
            }
        }
        (a, b, self.a_to_b)
    }
}

/// What the table in [`Encryption`]'s docs says a pair ends with: the
/// attempt used and the crypto, or None (no connection possible).
fn expected(ip: Encryption, rp: Encryption) -> Option<(Outgoing, Option<Crypto>)> {
    for &att in ip.outgoing_attempts() {
        match att {
            Outgoing::Plaintext if rp.accepts_plaintext() => return Some((att, None)),
            Outgoing::Mse if rp.accepts_mse() => {
                if let Some(c) = rp.select(ip.provide()) {
                    return Some((att, Some(c)));
                }
            }
            _ => {}
        }
    }
    None
}

/// Both ends of an established MSE connection: initiator, responder.
type Sides = (Established, Box<Established>);

/// Runs the outgoing attempts of `ip` against a responder of `rp`, each on
/// a fresh connection, as the runtime will. Returns the attempt that
/// worked and both sides' outcome, or every attempt's errors.
fn connect(
    ip: Encryption,
    rp: Encryption,
    seed: u64,
    chunk: usize,
) -> Result<(Outgoing, Option<Sides>), Vec<MseError>> {
    let mut errors = Vec::new();
    for &att in ip.outgoing_attempts() {
        match att {
            Outgoing::Plaintext => {
                let mut rng = fastrand::Rng::with_seed(seed);
                let mut resp = Responder::new(MseConfig::new(rp), &mut rng, epoch());
                let mut out = Vec::new();
                match resp.handle_input(&bt_handshake(), &skeys(), &mut out) {
                    Ok(Some(Accepted::Plaintext(data))) => {
                        assert_eq!(data, bt_handshake());
                        assert!(out.is_empty());
                        return Ok((att, None));
                    }
                    Ok(other) => panic!("plaintext handshake gave {other:?}"),
                    Err(e) => errors.push(e),
                }
            }
            Outgoing::Mse => {
                let pair = Pair::new(ip, rp, seed, chunk).expect("policy initiates MSE");
                match pair.run() {
                    (Some(Ok(a)), Some(Ok(Accepted::Encrypted(b))), rest) => {
                        assert!(rest.is_empty());
                        return Ok((att, Some((a, b))));
                    }
                    (a, b, _) => {
                        if let Some(Err(e)) = a {
                            errors.push(e);
                        }
                        if let Some(Err(e)) = b {
                            errors.push(e);
                        }
                    }
                }
            }
        }
    }
    Err(errors)
}

fn check_streams(a: &mut Established, b: &mut Established) {
    assert_eq!(a.crypto, b.crypto);
    assert_eq!(b.info_hash, IH);
    assert_eq!(b.payload, bt_handshake(), "IA reaches the responder");
    assert!(a.payload.is_empty());
    assert_eq!(a.cipher.is_some(), a.crypto == Crypto::Rc4);
    assert_eq!(b.cipher.is_some(), b.crypto == Crypto::Rc4);
    if let (Some(ca), Some(cb)) = (a.cipher.as_mut(), b.cipher.as_mut()) {
        for msg in [&b"first message"[..], &[0u8; 5000][..], b"x"] {
            let mut m = msg.to_vec();
            ca.encrypt.apply_keystream(&mut m);
            if msg.len() > 8 {
                // A single keystream byte may be 0; 9 in a row never are here.
                assert_ne!(m, msg, "RC4 changes the bytes");
            }
            cb.decrypt.apply_keystream(&mut m);
            assert_eq!(m, msg);
            let mut r = msg.to_vec();
            cb.encrypt.apply_keystream(&mut r);
            ca.decrypt.apply_keystream(&mut r);
            assert_eq!(r, msg);
        }
    }
}

#[test]
fn every_policy_pair_connects_or_fails_as_the_table_says() {
    for ip in Encryption::ALL {
        for rp in Encryption::ALL {
            let want = expected(ip, rp);
            let got = connect(ip, rp, 42, 64);
            match (want, got) {
                (Some((att, crypto)), Ok((gatt, sides))) => {
                    assert_eq!(att, gatt, "{ip} -> {rp}");
                    match sides {
                        Some((mut a, mut b)) => {
                            assert_eq!(Some(a.crypto), crypto, "{ip} -> {rp}");
                            check_streams(&mut a, &mut b);
                        }
                        None => assert_eq!(crypto, None),
                    }
                }
                (None, Err(errors)) => {
                    assert!(!errors.is_empty());
                    for e in &errors {
                        assert!(
                            matches!(
                                e,
                                MseError::PlaintextRefused
                                    | MseError::EncryptionRefused
                                    | MseError::NoCommonCrypto { .. }
                            ),
                            "{ip} -> {rp}: {e}"
                        );
                    }
                }
                (w, g) => panic!("{ip} -> {rp}: expected {w:?}, got {g:?}"),
            }
        }
    }
    // The failing pairs are exactly these.
    assert_eq!(expected(Encryption::Off, Encryption::Require), None);
    assert_eq!(expected(Encryption::Require, Encryption::Off), None);
    assert_eq!(
        expected(Encryption::Prefer, Encryption::Prefer),
        Some((Outgoing::Mse, Some(Crypto::Rc4)))
    );
    assert_eq!(
        expected(Encryption::Allow, Encryption::Require),
        Some((Outgoing::Mse, Some(Crypto::Rc4)))
    );
    assert_eq!(
        expected(Encryption::Prefer, Encryption::Off),
        Some((Outgoing::Plaintext, None))
    );
}

#[test]
fn require_against_off_and_off_against_require_name_the_refusal() {
    let errs = connect(Encryption::Require, Encryption::Off, 1, 512).unwrap_err();
    assert!(errs.contains(&MseError::EncryptionRefused), "{errs:?}");
    let errs = connect(Encryption::Off, Encryption::Require, 1, 512).unwrap_err();
    assert_eq!(errs, vec![MseError::PlaintextRefused]);
    assert!(matches!(
        Initiator::new(
            MseConfig::new(Encryption::Off),
            IH,
            b"",
            &mut fastrand::Rng::with_seed(1),
            epoch()
        ),
        Err(MseError::PolicyForbids(Encryption::Off))
    ));
}

#[test]
fn plaintext_only_mse_selects_plaintext_and_still_delivers_ia() {
    // An initiator offering only plaintext (as some clients do) to Prefer.
    let mut ic = MseConfig::new(Encryption::Allow);
    ic.pad_cd = 512;
    let rc = MseConfig::new(Encryption::Allow);
    let (a, b, _) = Pair::with(ic, rc, 5, 7).unwrap().run();
    let (mut a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
    let Accepted::Encrypted(mut b) = b else {
        panic!("expected MSE")
    };
    let b = &mut *b;
    assert_eq!(a.crypto, Crypto::Plaintext);
    check_streams(&mut a, b);
}

#[test]
fn wrong_skey_is_unknown_info_hash() {
    let mut rng = fastrand::Rng::with_seed(3);
    let now = epoch();
    let mut init = Initiator::new(MseConfig::default(), [0x55; 20], b"", &mut rng, now).unwrap();
    let mut resp = Responder::new(MseConfig::default(), &mut rng, now);
    let mut to_b = init.take_output();
    let mut to_a = Vec::new();
    let keys = skeys();
    let mut result = Ok(None);
    for _ in 0..4 {
        result = resp.handle_input(&std::mem::take(&mut to_b), &keys, &mut to_a);
        if result.is_err() {
            break;
        }
        init.handle_input(&std::mem::take(&mut to_a), &mut to_b)
            .unwrap();
    }
    assert!(
        matches!(result, Err(MseError::UnknownInfoHash)),
        "{result:?}"
    );
    // Poisoned: the same error again.
    assert_eq!(
        resp.handle_input(b"more", &keys, &mut to_a).unwrap_err(),
        MseError::UnknownInfoHash
    );
}

#[test]
fn garbage_before_the_handshake_is_refused() {
    let mut rng = fastrand::Rng::with_seed(9);
    // Garbage that is a valid-looking Ya followed by no req1: sync fails
    // after exactly 96 + 512 + 20 bytes, not before.
    let mut resp = Responder::new(MseConfig::default(), &mut rng, epoch());
    let mut junk = vec![0u8; 2000];
    rng.fill(&mut junk);
    junk[0] = 0x42; // below P, not 19
    let mut out = Vec::new();
    let keys = skeys();
    let limit = KEY_LEN + MAX_PAD + 20;
    assert!(matches!(
        resp.handle_input(&junk[..limit - 1], &keys, &mut out),
        Ok(None)
    ));
    assert!(out.len() >= KEY_LEN, "Yb sent after Ya");
    assert!(matches!(
        resp.handle_input(&junk[limit - 1..limit], &keys, &mut out),
        Err(MseError::SyncNotFound { limit: l, .. }) if l == limit
    ));
    // Garbage that cannot be a public key at all.
    let mut resp = Responder::new(MseConfig::default(), &mut rng, epoch());
    assert_eq!(
        resp.handle_input(&[0xff; 200], &keys, &mut out)
            .unwrap_err(),
        MseError::BadPublicKey
    );
    // Garbage in front of a real handshake: the real Ya is not at 0, the
    // secrets differ, req1 never matches: refused once the search window
    // is exhausted, or at the deadline if the initiator goes quiet first.
    let cfg = MseConfig::default();
    let now = epoch();
    let mut init = Initiator::new(cfg, IH, b"", &mut rng, now).unwrap();
    let mut resp = Responder::new(cfg, &mut rng, now);
    let mut stream = vec![0x05u8; 3];
    stream.extend(init.take_output());
    let mut out = Vec::new();
    let r = resp.handle_input(&stream, &keys, &mut out);
    assert!(matches!(r, Ok(None)), "{r:?}");
    let mut to_b = Vec::new();
    assert!(matches!(init.handle_input(&out, &mut to_b), Ok(None)));
    let r = resp.handle_input(&to_b, &keys, &mut out);
    match r {
        Err(MseError::SyncNotFound { .. }) => {}
        Ok(None) => {
            assert_eq!(
                resp.handle_timeout(now + cfg.timeout).unwrap_err(),
                MseError::Timeout(cfg.timeout)
            );
        }
        other => panic!("garbage-prefixed handshake gave {other:?}"),
    }
}

#[test]
fn initiator_rejects_responder_padding_past_512() {
    // A hostile responder: real Yb, then PadB of 513 bytes and the real
    // ENCRYPT(VC) after it. With 512 bytes of PadB the same VC is found.
    for (pad, ok) in [(MAX_PAD + 1, false), (MAX_PAD, true)] {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut init = Initiator::new(MseConfig::default(), IH, b"", &mut rng, epoch()).unwrap();
        let ya = init.take_output();
        let peer = dh::KeyPair::generate(&mut rng);
        let s = peer.shared(&ya[..KEY_LEN]).unwrap();
        let (_, mut b_to_a) = cipher::streams(&s, &IH);
        let mut tail = VC.to_vec();
        tail.extend(CRYPTO_RC4.to_be_bytes());
        tail.extend(0u16.to_be_bytes());
        b_to_a.apply_keystream(&mut tail);
        let mut stream = peer.public().to_vec();
        stream.extend(vec![0u8; pad]);
        stream.extend(tail);
        let mut out = Vec::new();
        let r = init.handle_input(&stream, &mut out);
        if ok {
            assert!(
                matches!(r, Ok(Some(ref e)) if e.crypto == Crypto::Rc4),
                "{r:?}"
            );
        } else {
            assert!(
                matches!(
                    r,
                    Err(MseError::SyncNotFound {
                        what: "ENCRYPT(VC)",
                        limit: 616
                    })
                ),
                "{r:?}"
            );
        }
    }
}

#[test]
fn responder_rejects_initiator_padding_past_512() {
    // A hostile initiator: Ya, then 513 bytes of PadA before req1.
    let mut rng = fastrand::Rng::with_seed(12);
    let peer = dh::KeyPair::generate(&mut rng);
    let mut resp = Responder::new(MseConfig::default(), &mut rng, epoch());
    let keys = skeys();
    let mut out = Vec::new();
    let mut stream = peer.public().to_vec();
    stream.extend(vec![7u8; MAX_PAD + 1]);
    resp.handle_input(&stream, &keys, &mut out).unwrap();
    let s = peer.shared(&out[..KEY_LEN]).unwrap();
    let req1 = cipher::hash(&[b"req1", &s]);
    assert!(matches!(
        resp.handle_input(&req1, &keys, &mut out),
        Err(MseError::SyncNotFound { .. })
    ));
    // The same with 512 bytes of PadA is fine.
    let mut resp = Responder::new(MseConfig::default(), &mut rng, epoch());
    let mut out = Vec::new();
    let mut stream = peer.public().to_vec();
    stream.extend(vec![7u8; MAX_PAD]);
    resp.handle_input(&stream, &keys, &mut out).unwrap();
    let s = peer.shared(&out[..KEY_LEN]).unwrap();
    let req1 = cipher::hash(&[b"req1", &s]);
    assert!(matches!(
        resp.handle_input(&req1, &keys, &mut out),
        Ok(None)
    ));
}

/// A hand-built step 3 with chosen PadC / IA lengths, for the bounds.
fn step3(
    peer: &dh::KeyPair,
    yb: &[u8],
    provide: u32,
    pad_c: u16,
    ia_len: u16,
    vc: [u8; 8],
) -> Vec<u8> {
    let s = peer.shared(yb).unwrap();
    let mut v = cipher::hash(&[b"req1", &s]).to_vec();
    let req2 = req2_hash(&IH);
    let req3 = cipher::hash(&[b"req3", &s]);
    v.extend(req2.iter().zip(req3).map(|(a, b)| a ^ b));
    let (mut enc, _) = cipher::streams(&s, &IH);
    let mut e = vc.to_vec();
    e.extend(provide.to_be_bytes());
    e.extend(pad_c.to_be_bytes());
    e.extend(vec![0u8; usize::from(pad_c).min(MAX_PAD)]);
    e.extend(ia_len.to_be_bytes());
    enc.apply_keystream(&mut e);
    v.extend(e);
    v
}

fn responder_after_ya(seed: u64) -> (Responder, dh::KeyPair, Vec<u8>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let peer = dh::KeyPair::generate(&mut rng);
    let mut resp = Responder::new(MseConfig::default(), &mut rng, epoch());
    let mut out = Vec::new();
    resp.handle_input(peer.public(), &skeys(), &mut out)
        .unwrap();
    (resp, peer, out[..KEY_LEN].to_vec())
}

#[test]
fn responder_bounds_padc_ia_and_checks_vc() {
    let keys = skeys();
    let mut out = Vec::new();
    let (mut r, peer, yb) = responder_after_ya(20);
    let m = step3(&peer, &yb, CRYPTO_RC4, 513, 0, VC);
    assert_eq!(
        r.handle_input(&m, &keys, &mut out).unwrap_err(),
        MseError::PadTooLong {
            which: "PadC",
            len: 513
        }
    );
    let (mut r, peer, yb) = responder_after_ya(21);
    let m = step3(&peer, &yb, CRYPTO_RC4, 0, 4097, VC);
    assert_eq!(
        r.handle_input(&m, &keys, &mut out).unwrap_err(),
        MseError::IaTooLong {
            len: 4097,
            max: 4096
        }
    );
    let (mut r, peer, yb) = responder_after_ya(22);
    let m = step3(&peer, &yb, CRYPTO_RC4, 0, 0, [1, 0, 0, 0, 0, 0, 0, 0]);
    assert!(matches!(
        r.handle_input(&m, &keys, &mut out),
        Err(MseError::BadVc(_))
    ));
    let (mut r, peer, yb) = responder_after_ya(23);
    let m = step3(&peer, &yb, 0x04, 0, 0, VC);
    assert_eq!(
        r.handle_input(&m, &keys, &mut out).unwrap_err(),
        MseError::NoCommonCrypto {
            provide: 4,
            policy: Encryption::Prefer
        }
    );
    // 512 bytes of PadC and a 4096-byte IA are within bounds.
    let (mut r, peer, yb) = responder_after_ya(24);
    let mut m = step3(&peer, &yb, CRYPTO_RC4, 512, 4096, VC);
    m.extend(vec![0u8; 4095]);
    assert!(matches!(r.handle_input(&m, &keys, &mut out), Ok(None)));
    assert!(matches!(
        r.handle_input(&[0], &keys, &mut out),
        Ok(Some(Accepted::Encrypted(_)))
    ));
}

#[test]
fn timeouts_fire_at_the_deadline_only() {
    let mut rng = fastrand::Rng::with_seed(4);
    let now = epoch();
    let cfg = MseConfig::default();
    let mut init = Initiator::new(cfg, IH, b"", &mut rng, now).unwrap();
    let mut resp = Responder::new(cfg, &mut rng, now);
    assert_eq!(init.poll_timeout(), Some(now + cfg.timeout));
    assert_eq!(resp.poll_timeout(), Some(now + cfg.timeout));
    assert!(init.handle_timeout(now + cfg.timeout / 2).is_ok());
    assert!(resp.handle_timeout(now + cfg.timeout / 2).is_ok());
    assert_eq!(
        init.handle_timeout(now + cfg.timeout).unwrap_err(),
        MseError::Timeout(cfg.timeout)
    );
    assert_eq!(
        resp.handle_timeout(now + cfg.timeout).unwrap_err(),
        MseError::Timeout(cfg.timeout)
    );
    assert_eq!(init.poll_timeout(), None);
}

#[test]
fn plaintext_detection_needs_the_whole_protocol_string() {
    let keys = skeys();
    let hs = bt_handshake();
    let mut rng = fastrand::Rng::with_seed(8);
    let mut r = Responder::new(MseConfig::default(), &mut rng, epoch());
    let mut out = Vec::new();
    for b in &hs[..19] {
        assert!(matches!(
            r.handle_input(std::slice::from_ref(b), &keys, &mut out),
            Ok(None)
        ));
    }
    let got = r.handle_input(&hs[19..], &keys, &mut out).unwrap();
    assert!(matches!(got, Some(Accepted::Plaintext(ref d)) if *d == hs));
    assert!(out.is_empty());
    // 19 then something else is MSE (and garbage here).
    let mut r = Responder::new(MseConfig::default(), &mut rng, epoch());
    let mut almost = hs.clone();
    almost[5] = b'X';
    let res = r.handle_input(&almost, &keys, &mut out);
    assert!(matches!(res, Ok(None)), "{res:?}");
}

#[test]
fn policies_parse_and_print() {
    for p in Encryption::ALL {
        assert_eq!(p.as_str().parse::<Encryption>().unwrap(), p);
        assert_eq!(
            p.to_string().to_uppercase().parse::<Encryption>().unwrap(),
            p
        );
    }
    assert!("forced".parse::<Encryption>().is_err());
    assert_eq!(Encryption::default(), Encryption::Prefer);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_chunking_and_pads_complete(seed in any::<u64>(), chunk in 1usize..700,
                                      pad_ab in 0u16..=512, pad_cd in 0u16..=512,
                                      ip in 0usize..3, rp in 0usize..3) {
        let pols = [Encryption::Prefer, Encryption::Require, Encryption::Allow];
        let mut ic = MseConfig::new(pols[ip]);
        ic.pad_ab = pad_ab;
        ic.pad_cd = pad_cd;
        let mut rc = MseConfig::new(pols[rp]);
        rc.pad_ab = 512 - pad_ab;
        rc.pad_cd = pad_cd;
        let (a, b, rest) = Pair::with(ic, rc, seed, chunk).unwrap().run();
        let mut a = a.unwrap().unwrap();
        let Accepted::Encrypted(mut b) = b.unwrap().unwrap() else { panic!("MSE expected") };
        prop_assert!(rest.is_empty());
        prop_assert_eq!(Some(a.crypto), pols[rp].select(pols[ip].provide()));
        check_streams(&mut a, &mut b);
    }

    #[test]
    fn responder_never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..2000),
                                                 split in 0usize..2000, seed in any::<u64>()) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut r = Responder::new(MseConfig::default(), &mut rng, epoch());
        let mut out = Vec::new();
        let keys = skeys();
        let split = split.min(data.len());
        let _ = r.handle_input(&data[..split], &keys, &mut out);
        let _ = r.handle_input(&data[split..], &keys, &mut out);
        prop_assert!(out.len() <= KEY_LEN + MAX_PAD);
    }

    #[test]
    fn initiator_never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..2000),
                                                 seed in any::<u64>()) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut i = Initiator::new(MseConfig::default(), IH, b"ia", &mut rng, epoch()).unwrap();
        let mut out = Vec::new();
        let r = i.handle_input(&data, &mut out);
        // Random bytes never hold the encrypted VC at a valid offset.
        prop_assert!(!matches!(r, Ok(Some(_))));
    }
}
