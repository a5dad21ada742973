//! RC4 streams keyed as MSE says, and the hashes of the handshake.

use sha1::{Digest, Sha1};

use super::rc4::Rc4;

/// Keystream bytes every MSE RC4 stream throws away before its first use
/// (the spec's defence against RC4's biased first bytes).
pub const DISCARD: usize = 1024;

/// SHA-1 over the concatenation of `parts`.
pub(crate) fn hash(parts: &[&[u8]]) -> [u8; 20] {
    let mut h = Sha1::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `HASH('req2', SKEY)`: what an initiator's obfuscated info-hash reveals
/// once the responder removes `HASH('req3', S)`. A session precomputes it
/// once per torrent so the responder's lookup is one map access
/// ([`super::SkeyLookup`]).
pub fn req2_hash(info_hash: &[u8; 20]) -> [u8; 20] {
    hash(&[b"req2", info_hash])
}

/// One direction of an RC4 stream, first 1024 keystream bytes dropped.
///
/// `Send` and free of references: the runtime moves the decrypting half
/// into a connection's reader task and the encrypting half into its writer
/// task, so RC4 runs where the bytes are, never on the driver task, and in
/// place ([`Rc4Stream::apply_keystream`]), without copies.
pub struct Rc4Stream(Rc4);

impl Rc4Stream {
    /// The stream for `key` (`SHA1('keyA' | 'keyB', S, SKEY)`), with
    /// [`DISCARD`] bytes of keystream already dropped.
    pub(crate) fn new(key: &[u8; 20]) -> Rc4Stream {
        // A 20-byte key is within RC4's 1..=256 bytes: never an error.
        let mut rc4 = Rc4::new(key).expect("20-byte RC4 key");
        rc4.skip(DISCARD);
        Rc4Stream(rc4)
    }

    /// XORs the next `buf.len()` keystream bytes into `buf`: encrypts or
    /// decrypts in place. Every byte of the direction must pass through
    /// exactly once, in order. About 500 MB/s on one core here (see
    /// [`super::Rc4`]).
    pub fn apply_keystream(&mut self, buf: &mut [u8]) {
        self.0.apply_keystream(buf);
    }
}

impl std::fmt::Debug for Rc4Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rc4Stream(..)")
    }
}

/// Both directions of an encrypted connection after the handshake.
#[derive(Debug)]
pub struct MseCipher {
    /// Applied to every byte we send.
    pub encrypt: Rc4Stream,
    /// Applied to every byte we receive.
    pub decrypt: Rc4Stream,
}

impl MseCipher {
    /// The two halves, to give to the writer and the reader task.
    pub fn split(self) -> (Rc4Stream, Rc4Stream) {
        (self.encrypt, self.decrypt)
    }
}

/// The two streams for shared secret `s` and info-hash `skey`:
/// `(A to B, B to A)`.
pub(crate) fn streams(s: &[u8], skey: &[u8; 20]) -> (Rc4Stream, Rc4Stream) {
    let a = hash(&[b"keyA", s, skey]);
    let b = hash(&[b"keyB", s, skey]);
    (Rc4Stream::new(&a), Rc4Stream::new(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_then_stream_is_rc4_past_1024() {
        // The stream equals plain RC4 with 1024 bytes skipped, chunking
        // does not matter, and applying twice restores the input.
        let key = [7u8; 20];
        let mut plain = Rc4::new(&key).unwrap();
        let mut ks = vec![0u8; DISCARD + 300];
        plain.apply_keystream(&mut ks);
        let mut s = Rc4Stream::new(&key);
        let mut buf = vec![0u8; 300];
        s.apply_keystream(&mut buf[..7]);
        s.apply_keystream(&mut buf[7..]);
        assert_eq!(buf, ks[DISCARD..]);
        let mut d = Rc4Stream::new(&key);
        d.apply_keystream(&mut buf);
        assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn directions_differ() {
        let (mut a, mut b) = streams(&[1; 96], &[2; 20]);
        let (mut x, mut y) = ([0u8; 16], [0u8; 16]);
        a.apply_keystream(&mut x);
        b.apply_keystream(&mut y);
        assert_ne!(x, y);
        assert_ne!(req2_hash(&[1; 20]), req2_hash(&[2; 20]));
    }
}
