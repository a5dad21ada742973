//! The responder (B) side of the handshake, which also recognises a
//! plaintext BitTorrent handshake so one listener accepts both.

use std::time::Instant;

use super::cipher::{Rc4Stream, hash, streams};
use super::dh::{KEY_LEN, KeyPair};
use super::{
    Crypto, Established, MAX_PAD, MseCipher, MseConfig, MseError, SkeyLookup, VC, be16, be32, find,
    random_pad, zero_pad,
};
use crate::wire::PROTOCOL;

/// How an incoming connection starts.
#[derive(Debug)]
pub enum Accepted {
    /// A plaintext BitTorrent handshake: every byte received so far, to be
    /// fed to the BitTorrent handshake decoder as they are.
    Plaintext(Vec<u8>),
    /// A completed MSE handshake (boxed: it holds two RC4 states).
    Encrypted(Box<Established>),
}

enum State {
    /// Telling a plaintext handshake from MSE (first 20 bytes).
    Detect,
    /// Waiting for the 96 bytes of Ya.
    AwaitYa,
    /// Looking for `HASH('req1', S)` after PadA.
    SyncReq1 { s: [u8; KEY_LEN], req1: [u8; 20] },
    /// Reading `HASH('req2', SKEY) xor HASH('req3', S)`.
    Skey { s: [u8; KEY_LEN] },
    /// Reading VC, crypto_provide and len(PadC).
    Provide,
    /// Skipping PadC.
    PadC { len: usize, provide: u32 },
    /// Reading len(IA).
    IaLen { provide: u32 },
    /// Reading IA.
    Ia { len: usize, provide: u32 },
    /// Finished or failed.
    Over,
}

/// The MSE responder for one accepted connection. See the [module
/// docs](super) for how to drive it.
pub struct Responder {
    cfg: MseConfig,
    keys: KeyPair,
    pad_b: Vec<u8>,
    pad_d: Vec<u8>,
    state: State,
    buf: Vec<u8>,
    info_hash: [u8; 20],
    enc: Option<Rc4Stream>,
    dec: Option<Rc4Stream>,
    deadline: Instant,
    error: Option<MseError>,
    short_secret: bool,
}

impl Responder {
    /// A responder for a connection accepted at `now`. Its key pair is made
    /// here (one modular exponentiation), before any byte arrives.
    pub fn new(cfg: MseConfig, rng: &mut fastrand::Rng, now: Instant) -> Responder {
        let keys = KeyPair::generate(rng);
        let pad_b = random_pad(rng, cfg.pad_ab);
        let pad_d = zero_pad(rng, cfg.pad_cd);
        Responder {
            cfg,
            keys,
            pad_b,
            pad_d,
            state: State::Detect,
            buf: Vec::new(),
            info_hash: [0; 20],
            enc: None,
            dec: None,
            deadline: now + cfg.timeout,
            error: None,
            short_secret: false,
        }
    }

    /// Bytes received and held, not consumed yet. Until the handshake
    /// settles this stays within what the current step may need (Ya/Yb, a
    /// pad and its pattern, `len(IA)` bytes of IA): see the module docs'
    /// bounds.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the shared secret begins with a zero byte. A libtorrent 2.0
    /// initiator then sends a wrong `HASH('req3', S)` (see
    /// [`super::Initiator::short_secret`]), so [`MseError::UnknownInfoHash`]
    /// with this set is that bug, not a stranger asking for a torrent we
    /// do not have; libtorrent reconnects with new keys.
    pub fn short_secret(&self) -> bool {
        self.short_secret
    }

    /// When [`Responder::handle_timeout`] must be called.
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

    /// Feeds bytes received from the initiator; appends what to send to
    /// `out`; `skeys` finds the torrent asked for. `Ok(Some(_))` once the
    /// connection's kind is settled.
    pub fn handle_input(
        &mut self,
        input: &[u8],
        skeys: &dyn SkeyLookup,
        out: &mut Vec<u8>,
    ) -> Result<Option<Accepted>, MseError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        self.buf.extend_from_slice(input);
        match self.step(skeys, out) {
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

    fn step(
        &mut self,
        skeys: &dyn SkeyLookup,
        out: &mut Vec<u8>,
    ) -> Result<Option<Accepted>, MseError> {
        loop {
            match self.state {
                State::Detect => {
                    let mut bt = [0u8; 20];
                    bt[0] = PROTOCOL.len() as u8;
                    bt[1..].copy_from_slice(PROTOCOL);
                    let n = self.buf.len().min(bt.len());
                    if n == 0 {
                        return Ok(None);
                    }
                    if self.buf[..n] == bt[..n] {
                        if n < bt.len() {
                            return Ok(None);
                        }
                        if !self.cfg.policy.accepts_plaintext() {
                            return Err(MseError::PlaintextRefused);
                        }
                        self.state = State::Over;
                        return Ok(Some(Accepted::Plaintext(std::mem::take(&mut self.buf))));
                    }
                    if !self.cfg.policy.accepts_mse() {
                        return Err(MseError::EncryptionRefused);
                    }
                    self.state = State::AwaitYa;
                }
                State::AwaitYa => {
                    if self.buf.len() < KEY_LEN {
                        return Ok(None);
                    }
                    let s = self.keys.shared(&self.buf[..KEY_LEN])?;
                    self.short_secret = s[0] == 0;
                    self.buf.drain(..KEY_LEN);
                    out.extend_from_slice(self.keys.public());
                    out.extend_from_slice(&self.pad_b);
                    self.pad_b = Vec::new();
                    let req1 = hash(&[b"req1", &s]);
                    self.state = State::SyncReq1 { s, req1 };
                }
                State::SyncReq1 { s, req1 } => match find(&self.buf, &req1, MAX_PAD) {
                    Some(at) => {
                        self.buf.drain(..at + req1.len());
                        self.state = State::Skey { s };
                    }
                    None if self.buf.len() >= MAX_PAD + req1.len() => {
                        return Err(MseError::SyncNotFound {
                            what: "HASH('req1', S)",
                            limit: KEY_LEN + MAX_PAD + 20,
                        });
                    }
                    None => return Ok(None),
                },
                State::Skey { s } => {
                    if self.buf.len() < 20 {
                        return Ok(None);
                    }
                    let req3 = hash(&[b"req3", &s]);
                    let mut req2 = [0u8; 20];
                    for (i, r) in req2.iter_mut().enumerate() {
                        *r = self.buf[i] ^ req3[i];
                    }
                    self.buf.drain(..20);
                    let skey = skeys.lookup(&req2).ok_or(MseError::UnknownInfoHash)?;
                    let (a_to_b, b_to_a) = streams(&s, &skey);
                    self.info_hash = skey;
                    self.dec = Some(a_to_b);
                    self.enc = Some(b_to_a);
                    self.state = State::Provide;
                }
                State::Provide => {
                    if self.buf.len() < 14 {
                        return Ok(None);
                    }
                    let mut head = [0u8; 14];
                    head.copy_from_slice(&self.buf[..14]);
                    self.buf.drain(..14);
                    self.decrypt(&mut head);
                    let mut vc = [0u8; 8];
                    vc.copy_from_slice(&head[..8]);
                    if vc != VC {
                        return Err(MseError::BadVc(vc));
                    }
                    let provide = be32(&head[8..12]);
                    let len = be16(&head[12..]);
                    if usize::from(len) > MAX_PAD {
                        return Err(MseError::PadTooLong { which: "PadC", len });
                    }
                    self.state = State::PadC {
                        len: usize::from(len),
                        provide,
                    };
                }
                State::PadC { len, provide } => {
                    if self.buf.len() < len {
                        return Ok(None);
                    }
                    let mut pad: Vec<u8> = self.buf.drain(..len).collect();
                    self.decrypt(&mut pad);
                    self.state = State::IaLen { provide };
                }
                State::IaLen { provide } => {
                    if self.buf.len() < 2 {
                        return Ok(None);
                    }
                    let mut l = [self.buf[0], self.buf[1]];
                    self.buf.drain(..2);
                    self.decrypt(&mut l);
                    let len = u16::from_be_bytes(l);
                    if len > self.cfg.max_ia {
                        return Err(MseError::IaTooLong {
                            len,
                            max: self.cfg.max_ia,
                        });
                    }
                    self.state = State::Ia {
                        len: usize::from(len),
                        provide,
                    };
                }
                State::Ia { len, provide } => {
                    if self.buf.len() < len {
                        return Ok(None);
                    }
                    let crypto =
                        self.cfg
                            .policy
                            .select(provide)
                            .ok_or(MseError::NoCommonCrypto {
                                provide,
                                policy: self.cfg.policy,
                            })?;
                    let mut rest = std::mem::take(&mut self.buf);
                    let mut payload: Vec<u8> = rest.drain(..len).collect();
                    self.decrypt(&mut payload);
                    let (mut enc, dec) = match (self.enc.take(), self.dec.take()) {
                        (Some(e), Some(d)) => (e, d),
                        _ => unreachable!("the Skey state set both streams"),
                    };
                    let mut dec = Some(dec);
                    if crypto == Crypto::Rc4 {
                        if let Some(d) = dec.as_mut() {
                            d.apply_keystream(&mut rest);
                        }
                    }
                    payload.extend_from_slice(&rest);
                    let start = out.len();
                    out.extend_from_slice(&VC);
                    out.extend_from_slice(&crypto.bit().to_be_bytes());
                    out.extend_from_slice(&(self.pad_d.len() as u16).to_be_bytes());
                    out.extend_from_slice(&self.pad_d);
                    enc.apply_keystream(&mut out[start..]);
                    self.state = State::Over;
                    let cipher = match (crypto, dec) {
                        (Crypto::Rc4, Some(decrypt)) => Some(MseCipher {
                            encrypt: enc,
                            decrypt,
                        }),
                        _ => None,
                    };
                    return Ok(Some(Accepted::Encrypted(Box::new(Established {
                        info_hash: self.info_hash,
                        crypto,
                        cipher,
                        payload,
                    }))));
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

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("policy", &self.cfg.policy)
            .field("buffered", &self.buf.len())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}
