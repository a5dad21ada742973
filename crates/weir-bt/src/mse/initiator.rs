//! The initiator (A) side of the handshake.

use std::time::Instant;

use super::cipher::{Rc4Stream, hash, streams};
use super::dh::{KEY_LEN, KeyPair};
use super::{
    CRYPTO_PLAINTEXT, CRYPTO_RC4, Crypto, Established, MAX_PAD, MseCipher, MseConfig, MseError, VC,
    be16, be32, find, random_pad, zero_pad,
};

/// Where the initiator is.
enum State {
    /// Waiting for the 96 bytes of Yb.
    AwaitYb,
    /// Looking for `ENCRYPT(VC)` after PadB.
    SyncVc {
        /// The encrypted VC: the first 8 bytes of B's keystream.
        pattern: [u8; 8],
    },
    /// Reading crypto_select and len(PadD).
    Select,
    /// Skipping PadD.
    PadD {
        /// Its length.
        len: usize,
        /// The selected crypto.
        crypto: Crypto,
    },
    /// Finished (the outcome was returned) or failed.
    Over,
}

/// The MSE initiator: dials, sends `Ya`, and ends with an [`Established`].
/// See the [module docs](super) for how to drive it.
pub struct Initiator {
    cfg: MseConfig,
    info_hash: [u8; 20],
    keys: KeyPair,
    ia: Vec<u8>,
    pad_c: Vec<u8>,
    provide: u32,
    state: State,
    buf: Vec<u8>,
    out: Vec<u8>,
    enc: Option<Rc4Stream>,
    dec: Option<Rc4Stream>,
    deadline: Instant,
    error: Option<MseError>,
    short_secret: bool,
}

impl Initiator {
    /// Starts a handshake for the torrent `info_hash`, carrying `ia` as
    /// initial payload. The first bytes to send (Ya, PadA) are ready in
    /// [`Initiator::take_output`]. Put at most the 68-byte BitTorrent
    /// handshake in `ia`: libtorrent 2.0 drops a connection whose IA is
    /// longer than 68 bytes; send the rest after the handshake.
    pub fn new(
        cfg: MseConfig,
        info_hash: [u8; 20],
        ia: &[u8],
        rng: &mut fastrand::Rng,
        now: Instant,
    ) -> Result<Initiator, MseError> {
        let provide = cfg.policy.provide();
        if provide == 0 {
            return Err(MseError::PolicyForbids(cfg.policy));
        }
        if ia.len() > usize::from(cfg.max_ia) {
            return Err(MseError::OwnIaTooLong {
                len: ia.len(),
                max: cfg.max_ia,
            });
        }
        let keys = KeyPair::generate(rng);
        let mut out = Vec::with_capacity(KEY_LEN + MAX_PAD);
        out.extend_from_slice(keys.public());
        out.extend_from_slice(&random_pad(rng, cfg.pad_ab));
        let pad_c = zero_pad(rng, cfg.pad_cd);
        Ok(Initiator {
            cfg,
            info_hash,
            keys,
            ia: ia.to_vec(),
            pad_c,
            provide,
            state: State::AwaitYb,
            buf: Vec::new(),
            out,
            enc: None,
            dec: None,
            deadline: now + cfg.timeout,
            error: None,
            short_secret: false,
        })
    }

    /// Bytes to send now (moved out; empty when there are none).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// When [`Initiator::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Over => None,
            _ => Some(self.deadline),
        }
    }

    /// Fails the handshake if its deadline has passed.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), MseError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if !matches!(self.state, State::Over) && now >= self.deadline {
            return Err(self.fail(MseError::Timeout(self.cfg.timeout)));
        }
        Ok(())
    }

    /// Bytes received and held, not consumed yet. Until the handshake
    /// settles this stays within what the current step may need (Ya/Yb, a
    /// pad and its pattern, `len(IA)` bytes of IA): see the module docs'
    /// bounds.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the shared secret begins with a zero byte (known once Yb
    /// arrived; about 1 handshake in 256). libtorrent 2.0 (2.0.8 at least)
    /// hashes such a secret without its leading zeros when it computes
    /// `HASH('req3', S)`, cannot find the torrent, and closes the
    /// connection. When an attempt fails with this set, the runtime should
    /// retry MSE at once with a fresh `Initiator` (new keys) instead of
    /// falling back to plaintext.
    pub fn short_secret(&self) -> bool {
        self.short_secret
    }

    /// Feeds bytes received from the responder; appends what to send to
    /// `out`. `Ok(Some(_))` once the handshake is complete (every byte of
    /// `input` past the handshake is in [`Established::payload`]).
    pub fn handle_input(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Established>, MseError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        out.append(&mut self.out);
        self.buf.extend_from_slice(input);
        match self.step(out) {
            Ok(r) => Ok(r),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn fail(&mut self, e: MseError) -> MseError {
        self.state = State::Over;
        self.buf = Vec::new();
        self.error = Some(e.clone());
        e
    }

    fn step(&mut self, out: &mut Vec<u8>) -> Result<Option<Established>, MseError> {
        loop {
            match self.state {
                State::AwaitYb => {
                    if self.buf.len() < KEY_LEN {
                        return Ok(None);
                    }
                    let s = self.keys.shared(&self.buf[..KEY_LEN])?;
                    self.short_secret = s[0] == 0;
                    self.buf.drain(..KEY_LEN);
                    let (mut enc, mut dec) = streams(&s, &self.info_hash);
                    out.extend_from_slice(&hash(&[b"req1", &s]));
                    let req2 = hash(&[b"req2", &self.info_hash]);
                    let req3 = hash(&[b"req3", &s]);
                    out.extend(req2.iter().zip(req3).map(|(a, b)| a ^ b));
                    let start = out.len();
                    out.extend_from_slice(&VC);
                    out.extend_from_slice(&self.provide.to_be_bytes());
                    out.extend_from_slice(&(self.pad_c.len() as u16).to_be_bytes());
                    out.extend_from_slice(&self.pad_c);
                    out.extend_from_slice(&(self.ia.len() as u16).to_be_bytes());
                    out.extend_from_slice(&self.ia);
                    enc.apply_keystream(&mut out[start..]);
                    self.ia = Vec::new();
                    let mut pattern = VC;
                    dec.apply_keystream(&mut pattern);
                    self.enc = Some(enc);
                    self.dec = Some(dec);
                    self.state = State::SyncVc { pattern };
                }
                State::SyncVc { pattern } => match find(&self.buf, &pattern, MAX_PAD) {
                    Some(at) => {
                        self.buf.drain(..at + VC.len());
                        self.state = State::Select;
                    }
                    None if self.buf.len() >= MAX_PAD + VC.len() => {
                        return Err(MseError::SyncNotFound {
                            what: "ENCRYPT(VC)",
                            limit: KEY_LEN + MAX_PAD + VC.len(),
                        });
                    }
                    None => return Ok(None),
                },
                State::Select => {
                    if self.buf.len() < 6 {
                        return Ok(None);
                    }
                    let mut head = [0u8; 6];
                    head.copy_from_slice(&self.buf[..6]);
                    self.buf.drain(..6);
                    self.decrypt(&mut head);
                    let select = be32(&head[..4]);
                    let len = be16(&head[4..]);
                    let crypto = match select {
                        CRYPTO_RC4 if self.provide & CRYPTO_RC4 != 0 => Crypto::Rc4,
                        CRYPTO_PLAINTEXT if self.provide & CRYPTO_PLAINTEXT != 0 => {
                            Crypto::Plaintext
                        }
                        _ => {
                            return Err(MseError::BadSelect {
                                select,
                                provide: self.provide,
                            });
                        }
                    };
                    if usize::from(len) > MAX_PAD {
                        return Err(MseError::PadTooLong { which: "PadD", len });
                    }
                    self.state = State::PadD {
                        len: usize::from(len),
                        crypto,
                    };
                }
                State::PadD { len, crypto } => {
                    if self.buf.len() < len {
                        return Ok(None);
                    }
                    let mut pad: Vec<u8> = self.buf.drain(..len).collect();
                    self.decrypt(&mut pad);
                    self.state = State::Over;
                    let mut payload = std::mem::take(&mut self.buf);
                    let (enc, mut dec) = (self.enc.take(), self.dec.take());
                    let cipher = match (crypto, enc, dec.as_mut()) {
                        (Crypto::Rc4, Some(encrypt), Some(d)) => {
                            d.apply_keystream(&mut payload);
                            Some(MseCipher {
                                encrypt,
                                decrypt: dec.take().expect("checked above"),
                            })
                        }
                        _ => None,
                    };
                    return Ok(Some(Established {
                        info_hash: self.info_hash,
                        crypto,
                        cipher,
                        payload,
                    }));
                }
                State::Over => return Ok(None),
            }
        }
    }

    fn decrypt(&mut self, b: &mut [u8]) {
        if let Some(d) = self.dec.as_mut() {
            d.apply_keystream(b);
        }
    }
}

impl std::fmt::Debug for Initiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initiator")
            .field("policy", &self.cfg.policy)
            .field("buffered", &self.buf.len())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}
