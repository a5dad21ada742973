//! The 768-bit Diffie-Hellman exchange of MSE: prime `P` from the spec,
//! generator 2, 160-bit private keys.
//!
//! Arithmetic is `crypto-bigint` (RustCrypto): fixed-size 768-bit integers
//! on the stack, Montgomery exponentiation that is constant-time in the
//! exponent's value (only its bit length, always 160 here, shows in the
//! timing), no allocation, pure Rust. `num-bigint` would also do, but it
//! allocates per operation and its `modpow` is variable-time.

use std::sync::OnceLock;

use crypto_bigint::modular::{FixedMontyForm, FixedMontyParams};
use crypto_bigint::{Odd, U768};

use super::MseError;

/// Bytes of a public key or shared secret on the wire (768 bits, big-endian,
/// leading zeros kept).
pub const KEY_LEN: usize = 96;

/// Bits of a private key. The spec leaves the size open and notes that
/// implementations use 160 bits.
const PRIVATE_BITS: u32 = 160;

/// The MSE prime (768 bits).
const P_HEX: &str = concat!(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A63A36210000000000090563",
);

fn prime() -> U768 {
    U768::from_be_hex(P_HEX)
}

fn params() -> &'static FixedMontyParams<{ U768::LIMBS }> {
    static PARAMS: OnceLock<FixedMontyParams<{ U768::LIMBS }>> = OnceLock::new();
    PARAMS.get_or_init(|| {
        // P is odd (it ends in ...63): the Option is always Some.
        let odd = Option::<Odd<U768>>::from(Odd::new(prime())).expect("the MSE prime is odd");
        FixedMontyParams::new_vartime(odd)
    })
}

/// One side's key pair. The private key never leaves this type.
pub(crate) struct KeyPair {
    private: U768,
    public: [u8; KEY_LEN],
}

impl KeyPair {
    /// A fresh key pair from `rng` (seeded by the caller).
    pub(crate) fn generate(rng: &mut fastrand::Rng) -> KeyPair {
        let mut x = [0u8; KEY_LEN];
        let start = KEY_LEN - (PRIVATE_BITS as usize / 8);
        loop {
            for b in &mut x[start..] {
                *b = rng.u8(..);
            }
            if x[start..].iter().any(|&b| b != 0) {
                break;
            }
        }
        let private = U768::from_be_slice(&x);
        let g = FixedMontyForm::new(&U768::from_u8(2), params());
        let y = g.pow_bounded_exp(&private, PRIVATE_BITS).retrieve();
        let mut public = [0u8; KEY_LEN];
        public.copy_from_slice(y.to_be_bytes().as_ref());
        KeyPair { private, public }
    }

    /// The public key to send (`Ya` or `Yb`).
    pub(crate) fn public(&self) -> &[u8; KEY_LEN] {
        &self.public
    }

    /// The shared secret `S = Y^x mod P` for the peer's public key `y`.
    /// Refuses keys outside `2..=P-2` (0, 1 and P-1 give a guessable secret;
    /// values >= P are not keys at all).
    pub(crate) fn shared(&self, y: &[u8]) -> Result<[u8; KEY_LEN], MseError> {
        if y.len() != KEY_LEN {
            return Err(MseError::BadPublicKey);
        }
        let y = U768::from_be_slice(y);
        let p_minus_1 = prime().wrapping_sub(&U768::ONE);
        if y <= U768::ONE || y >= p_minus_1 {
            return Err(MseError::BadPublicKey);
        }
        let s = FixedMontyForm::new(&y, params())
            .pow_bounded_exp(&self.private, PRIVATE_BITS)
            .retrieve();
        let mut out = [0u8; KEY_LEN];
        out.copy_from_slice(s.to_be_bytes().as_ref());
        Ok(out)
    }
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prime_is_768_bits_and_both_sides_agree() {
        assert_eq!(P_HEX.len(), 192);
        assert_eq!(prime().bit_width(), 768);
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..4 {
            let a = KeyPair::generate(&mut rng);
            let b = KeyPair::generate(&mut rng);
            assert_ne!(a.public(), b.public());
            let sa = a.shared(b.public()).unwrap();
            let sb = b.shared(a.public()).unwrap();
            assert_eq!(sa, sb);
            assert!(sa.iter().any(|&x| x != 0));
        }
    }

    #[test]
    fn small_exponent_matches_schoolbook() {
        // 2^x for a tiny private key, checked against repeated doubling mod P.
        let kp = KeyPair {
            private: U768::from_u8(10),
            public: [0; KEY_LEN],
        };
        // S = Y^10 with Y = 3: 59049, far below P.
        let mut y = [0u8; KEY_LEN];
        y[KEY_LEN - 1] = 3;
        let s = kp.shared(&y).unwrap();
        assert_eq!(&s[KEY_LEN - 3..], &59049u32.to_be_bytes()[1..]);
        assert!(s[..KEY_LEN - 3].iter().all(|&b| b == 0));
    }

    #[test]
    fn degenerate_public_keys_refused() {
        let mut rng = fastrand::Rng::with_seed(1);
        let kp = KeyPair::generate(&mut rng);
        let p = prime().to_be_bytes();
        let p_minus_1 = prime().wrapping_sub(&U768::ONE).to_be_bytes();
        let mut one = [0u8; KEY_LEN];
        one[KEY_LEN - 1] = 1;
        for bad in [
            &[0u8; KEY_LEN][..],
            &one[..],
            p_minus_1.as_ref(),
            p.as_ref(),
            &[0xffu8; KEY_LEN][..],
            &[2u8; 95][..],
        ] {
            assert!(matches!(kp.shared(bad), Err(MseError::BadPublicKey)));
        }
    }
}
