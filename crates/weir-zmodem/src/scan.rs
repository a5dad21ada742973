//! Finding the bytes that need attention, 64 at a time.
//!
//! [`mask64`] returns a bit per byte of a 64-byte block that *may* need
//! escaping (sender) or special handling (receiver); the caller confirms each
//! candidate with its 256-entry table, so a candidate set may be a superset.
//! On x86_64 it runs on SSE2 (part of the architecture's baseline, so no
//! runtime detection); elsewhere a portable loop gives the same answer.
//!
//! With random data about one byte in 26 needs escaping, so a block holds
//! two or three candidates: the escaper and unescaper copy whole windows
//! between them instead of handling bytes one by one.

/// Which bytes are candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Set {
    /// Sender, normal escaping: (b & 0x7f) in {0x10..=0x13, 0x18, 0x0d}.
    TxStd,
    /// Either side under ESCCTL: every byte with (b & 0x60) == 0.
    Ctl,
    /// Receiver, normal: ZDLE (0x18), and XON/XOFF with either parity.
    RxStd,
}

/// Candidate bits of a 64-byte block (bit k for byte k).
#[inline]
pub(crate) fn mask64(block: &[u8; 64], set: Set) -> u64 {
    let mut m = 0u64;
    for q in 0..4 {
        let chunk: &[u8; 16] = block[q * 16..q * 16 + 16]
            .try_into()
            .expect("16-byte slice of a 64-byte block");
        m |= u64::from(mask16(chunk, set)) << (q * 16);
    }
    m
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
fn mask16(chunk: &[u8; 16], set: Set) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_setzero_si128,
    };
    #[allow(unsafe_code)]
    // SAFETY: the SSE2 intrinsics are sound to call because this function
    // only exists when SSE2 is enabled at compile time (it is part of the
    // x86_64 baseline). The one memory access, `_mm_loadu_si128`, reads
    // exactly the 16 initialised bytes `chunk` refers to and has no
    // alignment requirement.
    unsafe {
        let v: __m128i = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
        let m = match set {
            Set::Ctl => _mm_cmpeq_epi8(_mm_and_si128(v, _mm_set1_epi8(0x60)), _mm_setzero_si128()),
            Set::TxStd => {
                let x = _mm_and_si128(v, _mm_set1_epi8(0x7f));
                let a = _mm_cmpeq_epi8(_mm_and_si128(x, _mm_set1_epi8(0x7c)), _mm_set1_epi8(0x10));
                let b = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x18));
                let c = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x0d));
                _mm_or_si128(a, _mm_or_si128(b, c))
            }
            Set::RxStd => {
                let x = _mm_and_si128(v, _mm_set1_epi8(0x7f));
                let a = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x18));
                let b = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x11));
                let c = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x13));
                _mm_or_si128(a, _mm_or_si128(b, c))
            }
        };
        _mm_movemask_epi8(m) as u32
    }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
fn mask16(chunk: &[u8; 16], set: Set) -> u32 {
    let mut m = 0u32;
    for (k, &b) in chunk.iter().enumerate() {
        if is_candidate(b, set) {
            m |= 1 << k;
        }
    }
    m
}

/// The scalar definition of the candidate sets.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
pub(crate) fn is_candidate(b: u8, set: Set) -> bool {
    let x = b & 0x7f;
    match set {
        Set::Ctl => b & 0x60 == 0,
        Set::TxStd => x & 0x7c == 0x10 || x == 0x18 || x == 0x0d,
        Set::RxStd => b == 0x18 || x == 0x11 || x == 0x13,
    }
}

/// Copies a fixed 64-byte window (compiles to a few vector moves).
#[inline(always)]
pub(crate) fn copy64(dst: &mut [u8], src: &[u8]) {
    let d: &mut [u8; 64] = (&mut dst[..64]).try_into().expect("64-byte window");
    let s: &[u8; 64] = src[..64].try_into().expect("64-byte window");
    *d = *s;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_match_the_scalar_definition() {
        for set in [Set::TxStd, Set::Ctl, Set::RxStd] {
            for base in (0..256).step_by(64) {
                let block: [u8; 64] = std::array::from_fn(|k| (base + k) as u8);
                let m = mask64(&block, set);
                for (k, &b) in block.iter().enumerate() {
                    assert_eq!(m >> k & 1 == 1, is_candidate(b, set), "{set:?} {b:#x}");
                }
            }
        }
    }
}
