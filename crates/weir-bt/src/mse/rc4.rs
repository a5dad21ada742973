//! RC4, written here for speed.
//!
//! # Why hand-written
//!
//! MSE runs every payload byte of an encrypted connection through RC4, once
//! each way, so its speed bounds an encrypted transfer. Measured on this
//! project's machines (release build, 256 KiB buffers, CPU time of one
//! core; the machines vary, so each row compares figures of one machine):
//!
//! | implementation | first machine | 2-core Xeon | 2-core AMD EPYC |
//! |---|---:|---:|---:|
//! | RustCrypto `rc4` 0.2 | ~300 | - | - |
//! | OpenSSL 3.0 (`openssl speed -evp rc4`, legacy provider) | ~410 | 514 | 910 |
//! | this module, bytewise | ~500 | 430 | 530-550 |
//! | eight bytes a word | - | 468 | 600-750 |
//! | and the next `s[i]` loaded a step ahead (now) | - | - | 840-900 |
//!
//! RustCrypto's is the only well-kept Rust crate; OpenSSL would bring a C
//! dependency, and in OpenSSL 3 RC4 lives in the legacy provider, which has
//! to be loaded at run time and is missing from some builds. So weir keeps
//! its own, in safe Rust, checked against RFC 6229's vectors and, by a
//! property test, against the `rc4` crate.
//!
//! # What makes it fast
//!
//! - The permutation is a `[u32; 256]` indexed by `u8`: the compiler knows
//!   every index is in bounds (no checks on the hot path), and one entry
//!   per 32-bit word runs faster than a `[u8; 256]` (measured ~350 MB/s
//!   for bytes): the entries read and written in consecutive steps then
//!   share no word, so loads never wait on a neighbouring byte store.
//! - `i` and `j` live in locals for a whole call (the struct is touched
//!   once on entry and once on exit) and the loop runs eight bytes per
//!   iteration, gathering their keystream in a register and XORing it into
//!   the buffer as one 64-bit word (one load and one store per eight bytes
//!   instead of eight of each).
//! - Each step loads the next step's `s[i + 1]` before its own swap and
//!   patches it in the one case the swap changed it (`j == i + 1`): the
//!   only chain from one byte to the next is then `j += s[i]`, not a load
//!   waiting behind the previous step's stores.
//!
//! RC4 is broken as a cipher; MSE uses it for obfuscation, as the spec
//! says, and so does weir.

/// An RC4 key outside RC4's 1..=256 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rc4: key of {0} bytes, expected 1..=256")]
pub struct Rc4KeyLength(pub usize);

/// The RC4 stream cipher (no bytes dropped; [`super::Rc4Stream`] is the
/// MSE stream with its 1024 bytes dropped).
#[derive(Clone)]
pub struct Rc4 {
    s: [u32; 256],
    i: u8,
    j: u8,
}

impl Rc4 {
    /// The cipher keyed with `key` (1..=256 bytes).
    pub fn new(key: &[u8]) -> Result<Rc4, Rc4KeyLength> {
        if key.is_empty() || key.len() > 256 {
            return Err(Rc4KeyLength(key.len()));
        }
        let mut s = [0u32; 256];
        for (n, e) in s.iter_mut().enumerate() {
            *e = n as u32;
        }
        let mut j = 0u8;
        for (n, &k) in (0..=255u8).zip(key.iter().cycle()) {
            let sn = s[usize::from(n)];
            j = j.wrapping_add(sn as u8).wrapping_add(k);
            s[usize::from(n)] = s[usize::from(j)];
            s[usize::from(j)] = sn;
        }
        Ok(Rc4 { s, i: 0, j: 0 })
    }

    /// XORs the next `buf.len()` keystream bytes into `buf` (encrypts or
    /// decrypts in place).
    pub fn apply_keystream(&mut self, buf: &mut [u8]) {
        // `i` is the index of the step about to run and `x` its `s[i]`,
        // loaded one step ahead (see the module docs).
        let (mut i, mut j) = (self.i.wrapping_add(1), self.j);
        let s = &mut self.s;
        let mut x = s[usize::from(i)];
        let mut chunks = buf.chunks_exact_mut(8);
        for chunk in &mut chunks {
            let mut ks = 0u64;
            for k in 0..8 {
                j = j.wrapping_add(x as u8);
                let y = s[usize::from(j)];
                let next = i.wrapping_add(1);
                // Loaded before this step's swap, which changes it only
                // when `j` is `next` (then it is `x`).
                let mut next_x = s[usize::from(next)];
                s[usize::from(i)] = y;
                s[usize::from(j)] = x;
                if j == next {
                    next_x = x;
                }
                ks |= u64::from(s[usize::from((x as u8).wrapping_add(y as u8))] as u8) << (8 * k);
                i = next;
                x = next_x;
            }
            let word: [u8; 8] = (&*chunk).try_into().expect("chunks of 8");
            chunk.copy_from_slice(&(u64::from_le_bytes(word) ^ ks).to_le_bytes());
        }
        for b in chunks.into_remainder() {
            j = j.wrapping_add(x as u8);
            let y = s[usize::from(j)];
            s[usize::from(i)] = y;
            s[usize::from(j)] = x;
            *b ^= s[usize::from((x as u8).wrapping_add(y as u8))] as u8;
            i = i.wrapping_add(1);
            x = s[usize::from(i)];
        }
        self.i = i.wrapping_sub(1);
        self.j = j;
    }

    /// Drops the next `n` keystream bytes.
    pub fn skip(&mut self, mut n: usize) {
        let mut scratch = [0u8; 256];
        while n > 0 {
            let k = n.min(scratch.len());
            self.apply_keystream(&mut scratch[..k]);
            n -= k;
        }
    }
}

impl std::fmt::Debug for Rc4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rc4(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rc4::{KeyInit, StreamCipher};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 6229, keystream at each offset for the 40-bit key 0102030405.
    const RFC6229_40: &[(usize, &str)] = &[
        (0, "b2396305f03dc027ccc3524a0a1118a8"),
        (16, "6982944f18fc82d589c403a47a0d0919"),
        (240, "28cb1132c96ce286421dcaadb8b69eae"),
        (256, "1cfcf62b03eddb641d77dfcf7f8d8c93"),
        (496, "42b7d0cdd918a8a33dd51781c81f4041"),
        (512, "6459844432a7da923cfb3eb4980661f6"),
        (752, "ec10327bde2beefd18f9277680457e22"),
        (768, "eb62638d4f0ba1fe9fca20e05bf8ff2b"),
        (1008, "45129048e6a0ed0b56b490338f078da5"),
        (1024, "30abbcc7c20b01609f23ee2d5f6bb7df"),
        (1520, "3294f744d8f9790507e70f62e5bbceea"),
        (1536, "d8729db41882259bee4f825325f5a130"),
        (2032, "1eb14a0c13b3bf47fa2a0ba93ad45b8b"),
        (2048, "cc582f8ba9f265e2b1be9112e975d2d7"),
        (3056, "f2e30f9bd102ecbf75aaade9bc35c43c"),
        (3072, "ec0e11c479dc329dc8da7968fe965681"),
        (4080, "068326a2118416d21f9d04b2cd1ca050"),
        (4096, "ff25b58995996707e51fbdf08b34d875"),
    ];

    /// RFC 6229, some offsets for the 128-bit key 0102...10.
    const RFC6229_128: &[(usize, &str)] = &[
        (0, "9ac7cc9a609d1ef7b2932899cde41b97"),
        (16, "5248c4959014126a6e8a84f11d1a9e1c"),
        (240, "065902e4b620f6cc36c8589f66432f2b"),
        (256, "d39d566bc6bce3010768151549f3873f"),
        (4096, "a36a4c301ae8ac13610ccbc12256cacc"),
    ];

    fn check(key: &[u8], vectors: &[(usize, &str)]) {
        let mut ks = vec![0u8; 4112];
        Rc4::new(key).unwrap().apply_keystream(&mut ks);
        for &(off, v) in vectors {
            assert_eq!(ks[off..off + 16], hex(v)[..], "offset {off}");
        }
    }

    #[test]
    fn rfc6229_vectors() {
        check(&[1, 2, 3, 4, 5], RFC6229_40);
        let k128: Vec<u8> = (1..=16).collect();
        check(&k128, RFC6229_128);
        // The first 16 bytes for the 56- and 64-bit keys.
        check(
            &[1, 2, 3, 4, 5, 6, 7],
            &[(0, "293f02d47f37c9b633f2af5285feb46b")],
        );
        check(
            &[1, 2, 3, 4, 5, 6, 7, 8],
            &[(0, "97ab8a1bf0afb96132f2f67258da15a8")],
        );
    }

    #[test]
    fn key_length_is_checked() {
        assert_eq!(Rc4::new(&[]).unwrap_err(), Rc4KeyLength(0));
        assert_eq!(Rc4::new(&[0; 257]).unwrap_err(), Rc4KeyLength(257));
        assert!(Rc4::new(&[0; 256]).is_ok());
        assert!(Rc4::new(&[0; 1]).is_ok());
    }

    #[test]
    fn skip_equals_discarding() {
        let mut a = Rc4::new(b"skip").unwrap();
        let mut b = a.clone();
        a.skip(1000);
        let mut x = [0u8; 1017];
        b.apply_keystream(&mut x);
        let (mut y, mut z) = ([0u8; 17], [0u8; 17]);
        a.apply_keystream(&mut y);
        z.copy_from_slice(&x[1000..]);
        assert_eq!(y, z);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Any key, any data, any split into calls: the same bytes as the
        /// RustCrypto crate.
        #[test]
        fn matches_the_rc4_crate(
            key in proptest::collection::vec(any::<u8>(), 1..=256),
            data in proptest::collection::vec(any::<u8>(), 0..5000),
            cuts in proptest::collection::vec(0usize..5000, 0..6),
        ) {
            let mut expect = data.clone();
            rc4::Rc4::new_from_slice(&key).unwrap().apply_keystream(&mut expect);
            let mut got = data.clone();
            let mut ours = Rc4::new(&key).unwrap();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for c in cuts.into_iter().chain([data.len()]) {
                ours.apply_keystream(&mut got[at..c]);
                at = c;
            }
            prop_assert_eq!(got, expect);
        }
    }
}
